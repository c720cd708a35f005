/* hr_cuda.h — the CUDA backend's insides for its .c and .cu files (C and C++):
 * the context, the checking macros, the kernel entries, the shared launchers. */
#ifndef HR_CUDA_H
#define HR_CUDA_H

/* Included before the extern "C" block below, so that the project headers it
 * wraps find them already included (a C++ standard header must not be read
 * inside extern "C"). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "headroom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* core.h and op_list.h have no extern "C" of their own: wrapped here, their
 * functions (hr_error_set, hr_op_name) keep C linkage in the .cu files. */
#include "core/core.h"
#include "graph/op_list.h"

/* Scratch of the reductions that finish in a second launch (loss, norms):
 * one double per block of the first launch. Planned as the node's workspace. */
#define HR_CUDA_RED_BLOCKS 256
#define HR_CUDA_RED_BYTES (HR_CUDA_RED_BLOCKS * sizeof(double))
/* cuBLAS scratch, planned in the arena for every matrix-product node, so that
 * the library never allocates behind the planner's back. */
#define HR_CUDA_CUBLAS_WS ((size_t)4 << 20)
/* cuDNN algorithms needing more workspace than this are passed over. */
#define HR_CUDA_CONV_WS_CAP ((size_t)256 << 20)
#define HR_PIECES 4 /* pieces of a pipelined input upload */

typedef struct hr_cuda_conv hr_cuda_conv; /* conv.h */
typedef struct hr_cuda_dnn hr_cuda_dnn;   /* cudnn_load.h */
typedef struct cublasContext *hr_cublas_handle;
enum { HR_CHOICE_CONV, HR_CHOICE_GEMM, HR_CHOICE_KINDS }; /* the kinds of timed choices kept (choice_cache.c) */

typedef struct hr_cuda {
    hr_options opt;           /* the HR_* switches, read once when the backend is made */
    int device;
    char device_name[256];
    char bus_id[64];          /* PCI bus id, for NVML (the backend's device_id) */
    int sms;                  /* multiprocessors */
    size_t smem_optin;        /* shared memory a block may ask for (sharedMemPerBlockOptin) */
    bool allow_tf32;
    int64_t max_elems;        /* per library call (cuBLAS, cuDNN take int sizes): opt.max_call_elems or INT_MAX */
    cudaStream_t stream;      /* every kernel and library call */
    cudaStream_t copy_stream; /* host-to-device batch copies */
    cudaEvent_t compute_ev;   /* marks the compute stream when an upload is queued */
    hr_cublas_handle blas;
    void *lt;                 /* cuBLASLt's handle */
    struct hr_lt_algo *lt_algos; /* its algorithm by product shape (gemm_lt.c) */
    int nlt, caplt;
    cudaEvent_t lt_ev[2];     /* timing the products' candidates */
    hr_cuda_dnn *dnn;         /* cuDNN, loaded at run time; NULL when missing */
    struct hr_choices *cache[HR_CHOICE_KINDS]; /* timed choices of earlier runs (choice_cache.c) */
    bool cache_off[HR_CHOICE_KINDS];           /* none could be made here */
    char dnn_why[256];        /* why cuDNN is missing */
    /* memory facts */
    size_t overhead;          /* context + handles, measured */
    size_t used_at_start;     /* total - free (cudaMemGetInfo) once the handles exist */
    size_t total_mem;         /* the device's memory (cudaMemGetInfo's total) */
    int64_t allocs;           /* cudaMalloc / cudaHostAlloc calls */
    /* the arena */
    void *arena;
    size_t arena_bytes;
    /* pinned staging: two slots, each the size of a batch and its labels */
    unsigned char *pinned;
    size_t slot_bytes, fill[2];
    int cur;
    cudaEvent_t slot_ev[2];
    size_t want_slot;         /* from set_batch: the input, labels and step scalars, each rounded up to 256 */
    /* convolution plans by shape */
    hr_cuda_conv **conv;
    int nconv, capconv;
    /* cuDNN's fused attention plans by shape (cudnn_attention.c) */
    struct hr_cuda_sdpa **sdpa;
    int nsdpa, capsdpa;
    /* the batch's input in pieces of samples, an event after each on the copy
     * stream, so that the node reading it can start on the samples that have
     * arrived (hr_cuda_*_pieces); every other node waits for the whole upload */
    int64_t in_batch, in_sample;     /* from set_batch: samples, bytes a sample */
    cudaEvent_t piece_ev[HR_PIECES];
    const void *piece_dst;           /* the input's bytes while their upload is pending, else NULL */
    int npieces;
    int64_t piece_upto[HR_PIECES];   /* samples arrived once piece k is in */
    bool pending;                    /* the compute stream has not waited for the last upload yet */
    cudaEvent_t pending_ev;
    /* pieces not yet staged: the reader stages piece k (host copy, then its
     * transfer) just before it queues the work on it, so the host's copying
     * overlaps the device's work on the pieces before */
    const unsigned char *defer_src;
    unsigned char *defer_stage, *defer_dst;
    size_t defer_n, defer_piece;
    int staged, defer_slot;
    /* steps queued ahead: each one's loss, copied to the host behind it */
    float *loss_pin;                 /* HR_STEP_QUEUE floats after the pinned slots; NULL without them */
    float loss_host[HR_STEP_QUEUE];  /* without pinned slots */
    cudaEvent_t loss_ev[HR_STEP_QUEUE];
    cudaEvent_t staged_ev;           /* the last stage_in has copied the staged batch out */
    /* the training step as one graph (graph.c): a cudaGraphExec_t, NULL
     * before its capture */
    void *graph;
    bool capturing;
    /* device profiles: timing events on the compute stream, made as slots appear */
    cudaEvent_t *marks;
    int nmarks;
} hr_cuda;

/* context.c: turns a failed call into HR_ERR_DEVICE "file:line: call failed: why". */
hr_status hr_cuda_fail(const char *file, int line, const char *call, const char *why);
const char *hr_cublas_status_str(int st);

#define HR_CU(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define HR_CUBLAS(call)                                                                      \
    do {                                                                                     \
        int s_ = (int)(call);                                                                \
        if (s_ != 0) return hr_cuda_fail(__FILE__, __LINE__, #call, hr_cublas_status_str(s_)); \
    } while (0)

/* ---- the kernels: hr_cuda_<kernel>(ctx = hr_cuda *, a), one for each name
 * in HR_OP_LIST's kernel column, each beside its family's device code ---- */
#define HR_X_CUDA_KERNEL(E, id, k, name) hr_status hr_cuda_##k(void *ctx, const hr_kargs *a);
HR_OP_LIST(HR_X_CUDA_KERNEL)
#undef HR_X_CUDA_KERNEL

/* ---- half activations: a kernel that runs BF16 and F16 activations itself
 * (hr_kargs.dt) says so beside its entry with HR_CUDA_TAKES_HALF(kernel),
 * which defines hr_cuda_<kernel>_takes_half; cuda_backend.c's takes_half
 * finds it (none: the kernel runs F32 only, and exec hands it F32 copies). */
#define HR_CUDA_TAKES_HALF(k) \
    bool hr_cuda_##k##_takes_half(const hr_cuda *c) { (void)c; return true; }
typedef bool (*hr_cuda_half_fn)(const struct hr_cuda *c);

/* ---- context.c: the device, streams, handles; released in reverse ---- */
hr_status hr_cuda_init(hr_cuda *c, const hr_config_t *cfg);
void hr_cuda_fini(hr_cuda *c); /* everything but the arena; c itself stays */
const char *hr_cuda_unavailable_why(void); /* after hr_backend_cuda_available() said no */
cudaStream_t hr_cuda_stream(void *ctx);     /* ctx->stream, for kernel files that keep hr_cuda opaque */

/* ---- cudnn_load.c: cuDNN, loaded with dlopen (c->dnn; NULL with c->dnn_why) */
hr_status hr_cuda_dnn_open(hr_cuda *c);
void hr_cuda_dnn_close(hr_cuda *c);

/* ---- workspace: a kernel that needs scratch defines hr_cuda_<kernel>_workspace
 * beside it (cuda_backend.c's table finds it; none: 0 bytes) ---- */
typedef size_t (*hr_cuda_ws_fn)(hr_cuda *c, const hr_kargs *a);

/* ---- conv2d.c: Conv2d by plans made per shape while planning ---- */
void hr_cuda_conv_plans_free(hr_cuda *c);
/* ---- cudnn_attention.c: causal attention by cuDNN's fused flash attention
 * where it has an engine (attention.cu asks first; false: the kernels run) */
size_t hr_cuda_sdpa_workspace(hr_cuda *c, const hr_attention_args *p, hr_dtype dt, bool backward);
bool hr_cuda_sdpa_run(hr_cuda *c, const hr_attention_args *p, hr_dtype dt, bool backward, void *ws, size_t wsz,
                      hr_status *st);
void hr_cuda_sdpa_free(hr_cuda *c);
/* cuda_gemm.c: cuBLASLt's handle, made with cuBLAS's; freed with its choices */
hr_status hr_cuda_gemm_init(hr_cuda *c);
/* activation.cu: the cuBLASLt epilogue (a cublasLtEpilogue_t) that applies
 * activation `act` (an hr_op, tanh form when approx) to a product's sums,
 * writing its input beside them (forward, with the bias added first when
 * `bias`), or its derivative to the product (backward); false: none does. */
bool hr_cuda_act_epilogue(int act, bool approx, bool backward, bool bias, int *epi);
void hr_cuda_gemm_free(hr_cuda *c);
/* The forward pass on an input arriving in pieces (c->piece_*); returns with
 * the compute stream past the whole upload. */
hr_status hr_cuda_conv2d_pieces(hr_cuda *c, const hr_kargs *a);

/* ---- cuda_gemm.c: Linear through cuBLAS ---- */
hr_status hr_cuda_linear_pieces(hr_cuda *c, const hr_kargs *a);

/* ---- staging.c: the batch's way to the device ---- */
/* Pinned slots for c->want_slot bytes each (none when 0 or too large). */
hr_status hr_cuda_staging_alloc(hr_cuda *c);
void hr_cuda_staging_free(hr_cuda *c);
/* Through a pinned slot on the copy stream; `input`: the batch's input (the
 * last upload of a step), which may go in pieces. */
hr_status hr_cuda_upload(hr_cuda *c, void *dst, const void *src, size_t n, bool input);
/* Samples a piece of a pipelined upload of `batch` samples of `sample` bytes
 * (0: one piece, no pipelining); the same rule for planning and running. */
int64_t hr_cuda_piece_samples(const hr_cuda *c, int64_t batch, int64_t sample);
/* Makes the compute stream wait for every upload queued so far (staging
 * the pieces not yet staged). */
hr_status hr_cuda_settle(hr_cuda *c);
/* Stages the input's pieces up to k (host copy and transfer), if not yet. */
hr_status hr_cuda_stage_upto(hr_cuda *c, int k);
/* The next batch while a step runs: uploads into the staged buffer that wait
 * only for the last stage_in, and stage_in's copies out of it. */
hr_status hr_cuda_upload_staged(hr_cuda *c, void *dst, const void *src, size_t n);
hr_status hr_cuda_stage_in(hr_cuda *c, void *const *dst, const void *const *src, const size_t *n, int count);
/* The step's loss to host slot `slot` behind the work queued, and the wait for it. */
hr_status hr_cuda_loss_queue(hr_cuda *c, const float *loss, int slot);
hr_status hr_cuda_loss_wait(hr_cuda *c, int slot, float *out);

/* ---- optim.cu: a[0..count), all SGD or all Adam, in few launches ---- */
hr_status hr_cuda_optim_group(hr_cuda *c, const hr_kargs *a, int count);

/* ---- graph.c: the training step captured once, replayed each step ---- */
hr_status hr_cuda_graph_begin(hr_cuda *c);
hr_status hr_cuda_graph_end(hr_cuda *c, bool keep);
hr_status hr_cuda_graph_launch(hr_cuda *c);
void hr_cuda_graph_free(hr_cuda *c);
/* optim.cu: the NaN stop's check, between the backward pass and the update */
hr_status hr_cuda_step_check(hr_cuda *c, const float *loss, hr_step_vars *v, bool stop);
hr_status hr_cuda_loss_add(hr_cuda *c, const float *loss, hr_step_vars *v, int k, int K);

/* ---- choice_cache.c: timed choices kept between runs, a file a kind ---- */
/* A choice an earlier run made (or this one), by key: true with its values. */
bool hr_choice_get(hr_cuda *c, int kind, const char *key, int64_t v[3]);
/* Remembers a choice timing made (written when the backend closes). */
void hr_choice_put(hr_cuda *c, int kind, const char *key, const int64_t v[3]);
/* Writes the new choices (merged with the files') and frees the caches. */
void hr_choice_cache_close(hr_cuda *c);

/* ---- profile.c: timing events for device profiles ---- */
hr_status hr_cuda_mark(hr_cuda *c, int slot);
double hr_cuda_mark_ms(hr_cuda *c, int a, int b);
void hr_cuda_marks_free(hr_cuda *c);
/* A candidate's time a run in *ms (-1: it did not run): `run` queues one run
 * on s and returns 0 when it could. False: the events failed (error set). */
typedef int (*hr_launch_fn)(void *arg);
bool hr_cuda_time_runs(cudaStream_t s, cudaEvent_t ev[2], hr_launch_fn run, void *arg, float *ms);

/* ---- attention_half.cu: causal attention on BF16/F16 q, k, v by tensor
 * cores (attention.cu hands them dt != F32); D: the backward's N*H*T floats */
hr_status hr_cuda_attention_half(cudaStream_t st, const hr_attention_args *p, hr_dtype dt);
hr_status hr_cuda_attention_half_bwd(cudaStream_t st, const hr_attention_args *p, hr_dtype dt, float *D);

/* ---- launchers several families share; each returns cudaGetLastError() ---- */
/* channel.cu: (N, C, HW) layouts (HW = 1: row-major (N, C)); y and dy hold
 * dt values (F32, BF16, F16), the bias b and its gradient db are F32 */
cudaError_t hrk_bias_fill(cudaStream_t s, hr_dtype dt, const float *b, void *y, int64_t N, int64_t C, int64_t HW);
cudaError_t hrk_channel_sum(cudaStream_t s, hr_dtype dt, const void *dy, float *db, int64_t N, int64_t C, int64_t HW,
                            bool acc);
/* The same sum spread over many blocks: (N, C) is cut into hr_chan_splits
 * slices of samples per channel, whose partial sums (doubles, in `part`,
 * hr_chan_sum_ws bytes) are added in a fixed order. part NULL: one block a
 * channel, as hrk_channel_sum. */
static inline int64_t hr_chan_splits(int64_t N, int64_t C) {
    int64_t k = (1024 + C - 1) / (C > 0 ? C : 1);
    if (k > N) k = N;
    if (k > 1024) k = 1024;
    return k < 1 ? 1 : k;
}
/* HW = 1, row-major (N, C): slices of at least 64 rows, about HR_COL_BLOCKS
 * blocks of 256 columns each: five resident blocks on each of an H100's or
 * H200's 132 SMs, one wave (1024 blocks made 1.2-1.6 waves of GPT-2's bias
 * sums: 11% slower, ncu on an H100). From the shape alone: the same sums on
 * every device. */
#define HR_COL_BLOCKS 660
static inline int64_t hr_col_splits(int64_t N, int64_t C) {
    int64_t cb = (C + 255) / 256, k = HR_COL_BLOCKS / (cb > 0 ? cb : 1);
    if (k > N / 64) k = N / 64;
    if (k > 65535) k = 65535;
    return k < 1 ? 1 : k;
}
static inline size_t hr_chan_sum_ws(int64_t N, int64_t C, int64_t HW) {
    int64_t S = HW > 1 ? hr_chan_splits(N, C) : hr_col_splits(N, C);
    return S > 1 ? (size_t)(C * S) * sizeof(double) : 0;
}
cudaError_t hrk_channel_sum_ws(cudaStream_t s, hr_dtype dt, const void *dy, float *db, int64_t N, int64_t C,
                               int64_t HW, bool acc, void *part);
/* loss.cu: out[0] = (acc ? out[0] : 0) + sum(part[0..n)) / div, in double */
cudaError_t hr_finish_launch(cudaStream_t s, const double *part, int n, float *out, bool acc, double div);
/* loss.cu: the cross-entropy of `rows` rows of C logits (dt) at stride ld:
 * each row's lse and lse - x[label] (term, double); hrk_ce_rows_bwd rewrites
 * the rows as (softmax - onehot) k from that lse, and zeros in columns [C,
 * ld) (ld a multiple of 16 bytes' elements, x 16-byte aligned) */
cudaError_t hrk_ce_rows(cudaStream_t s, hr_dtype dt, const void *x, int64_t ld, int64_t rows, int64_t C,
                        const int32_t *lab, float *lse, double *term);
cudaError_t hrk_ce_rows_bwd(cudaStream_t s, hr_dtype dt, void *x, int64_t ld, int64_t rows, int64_t C,
                            const int32_t *lab, const float *lse, float k);
/* loss.cu: both in one pass over the rows (a block an SM, two rows in its
 * shared memory; term as hrk_ce_rows's, no lse kept), where
 * hrk_ce_rows_grad_fits says the row suits it (C >= 1024 classes, two rows
 * of ld in dt within smem_optin bytes, at most 112 KiB each); sms: the
 * device's multiprocessor count */
bool hrk_ce_rows_grad_fits(hr_dtype dt, int64_t ld, int64_t C, size_t smem_optin);
cudaError_t hrk_ce_rows_grad(cudaStream_t s, hr_dtype dt, void *x, int64_t ld, int64_t rows, int64_t C,
                             const int32_t *lab, double *term, float k, int sms);
/* gemm_splitk.cu: C (m, n column-major, leading dimension ldc, ct values:
 * F32, BF16 or F16) = the sum of the `parts` F32 partials (each m*n, packed,
 * one after the other) in the order 0..parts-1, + bias[i] on row i when bias,
 * + beta C when beta != 0, in float, rounded once. */
cudaError_t hrk_splitk_reduce(cudaStream_t s, const float *part, int parts, int64_t m, int64_t n, const float *bias,
                              float beta, hr_dtype ct, void *C, int64_t ldc);
/* precision.cu: y = x converted from `from` to `to` (F32, BF16, F16), or
 * y += x with acc (the sum in float, rounded to `to`) */
cudaError_t hrk_cast(cudaStream_t s, const void *x, hr_dtype from, void *y, hr_dtype to, int64_t n, bool acc);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "backend/backend.h"
/* For tests: pinned bytes held, device bytes in use when the backend was made. */
size_t hr_cuda_pinned_bytes(const hr_backend *be);
size_t hr_cuda_used_at_start(const hr_backend *be);
#endif

#endif
