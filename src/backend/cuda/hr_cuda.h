/* hr_cuda.h — the CUDA backend's insides: its context (streams, library
 * handles, arena, pinned staging, convolution plans), the checking macros and
 * the kernel launchers that the .cu files define, in plain C. */
#ifndef HR_CUDA_H
#define HR_CUDA_H

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#include <stdint.h>
#else
#include "backend/backend.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch of the reductions that finish in a second launch (loss, norms):
 * one double per block of the first launch. Planned as the node's workspace. */
#define HR_CUDA_RED_BLOCKS 256
#define HR_CUDA_RED_BYTES (HR_CUDA_RED_BLOCKS * sizeof(double))
/* cuBLAS scratch, planned in the arena for every matrix-product node, so that
 * the library never allocates behind the planner's back. */
#define HR_CUDA_CUBLAS_WS ((size_t)4 << 20)
/* cuDNN algorithms needing more workspace than this are passed over. */
#define HR_CUDA_CONV_WS_CAP ((size_t)256 << 20)

#ifndef __CUDACC__
#define HR_PIECES 4                     /* pieces of a pipelined input upload */
#define HR_PIECE_MIN ((size_t)2 << 20) /* smaller inputs go whole: splitting them costs the first node more than it hides */

typedef struct hr_cuda_conv hr_cuda_conv;
typedef struct hr_cuda_dnn hr_cuda_dnn;
typedef struct cublasContext *hr_cublas_handle;

typedef struct {
    int device;
    char device_name[256];
    int sms;                  /* multiprocessors */
    bool allow_tf32;
    int64_t max_elems;        /* per library call (cuBLAS, cuDNN take int sizes); tests lower it */
    cudaStream_t stream;      /* every kernel and library call */
    cudaStream_t copy_stream; /* host-to-device batch copies */
    cudaEvent_t compute_ev;   /* marks the compute stream when an upload is queued */
    hr_cublas_handle blas;
    hr_cuda_dnn *dnn;         /* cuDNN, loaded at run time; NULL when missing */
    char dnn_why[256];        /* why cuDNN is missing */
    /* memory facts */
    size_t overhead;          /* context + handles, measured */
    size_t used_at_start;     /* total - free (cudaMemGetInfo) once the handles exist */
    int64_t allocs;           /* cudaMalloc / cudaHostAlloc calls */
    /* the arena */
    void *arena;
    size_t arena_bytes;
    /* pinned staging: two slots, each the size of a batch and its labels */
    unsigned char *pinned;
    size_t slot_bytes, fill[2];
    int cur;
    cudaEvent_t slot_ev[2];
    size_t want_slot;         /* learnt from the last program planned (workspace_size) */
    const void *seen_graph;   /* the first program planned on this backend */
    /* convolution plans by shape */
    hr_cuda_conv **conv;
    int nconv, capconv;
    /* the batch's input in pieces of samples, an event after each on the copy
     * stream, so that the node reading it can start on the samples that have
     * arrived (hr_cuda_*_pieces); every other node waits for the whole upload */
    int64_t in_batch, in_sample;     /* learnt while planning: samples, bytes a sample */
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
    /* HR_PROFILE=2: timing events on the compute stream, made as slots appear */
    cudaEvent_t *marks;
    int nmarks;
} hr_cuda;

/* cuda_backend.c: turns a failed call into HR_ERR_DEVICE "file:line: call failed: why". */
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

/* cuda_gemm.c: Linear through cuBLAS */
hr_status hr_cuda_linear(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);
/* Scratch bytes a Linear node needs: `current` (cuBLAS's) or its split-K
 * partials, whichever is more; cuda_workspace() calls it. */
size_t hr_cuda_linear_workspace(hr_cuda *c, const hr_graph *g, const hr_node *n, size_t current);
hr_status hr_cuda_linear_bwd(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);
/* cuda_dnn.c: cuDNN, loaded with dlopen; Conv2d */
hr_status hr_cuda_dnn_open(hr_cuda *c);
void hr_cuda_dnn_close(hr_cuda *c);
size_t hr_cuda_conv_workspace(hr_cuda *c, const hr_graph *g, const hr_node *n);
hr_status hr_cuda_conv2d(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);
/* The same on an input arriving in pieces (c->piece_*); they return with the
 * compute stream past the whole upload. */
hr_status hr_cuda_conv2d_pieces(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);
hr_status hr_cuda_linear_pieces(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);
/* Samples a piece of a pipelined upload of `batch` samples of `sample` bytes
 * (0: one piece, no pipelining); the same rule for planning and running. */
int64_t hr_cuda_piece_samples(int64_t batch, int64_t sample);
/* Makes the compute stream wait for every upload queued so far (staging
 * the pieces not yet staged). */
hr_status hr_cuda_settle(hr_cuda *c);
/* Stages the input's pieces up to k (host copy and transfer), if not yet. */
hr_status hr_cuda_stage_upto(hr_cuda *c, int k);
hr_status hr_cuda_conv2d_bwd(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr);

/* For tests: pinned bytes held, device bytes in use when the backend was made. */
size_t hr_cuda_pinned_bytes(const hr_backend *be);
size_t hr_cuda_used_at_start(const hr_backend *be);
#endif

/* ---- kernel launchers (the .cu files); each returns cudaGetLastError() ---- */
/* elementwise.cu */
cudaError_t hrk_relu(cudaStream_t s, const float *x, float *y, int64_t n);
cudaError_t hrk_relu_bwd(cudaStream_t s, const float *y, const float *dy, float *dx, int64_t n, bool acc);
cudaError_t hrk_relu_mask(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n);
cudaError_t hrk_relu_bwd_mask(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc);
cudaError_t hrk_dropout(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n, float p, float scale,
                        uint64_t seed, uint64_t stream);
cudaError_t hrk_dropout_bwd(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, float scale,
                            bool acc);
cudaError_t hrk_add(cudaStream_t s, const float *a, const float *b, float *y, int64_t n);
cudaError_t hrk_acc(cudaStream_t s, const float *x, float *y, int64_t n); /* y += x */
/* rows of `cols` floats from src (pitch sp) to dst (pitch dp), added when acc */
cudaError_t hrk_copy_rows(cudaStream_t s, const float *src, int64_t sp, float *dst, int64_t dp, int64_t rows,
                          int64_t cols, bool acc);
cudaError_t hrk_softmax(cudaStream_t s, const float *x, float *y, int64_t N, int64_t C, bool lg);
cudaError_t hrk_softmax_bwd(cudaStream_t s, const float *y, const float *dy, float *dx, int64_t N, int64_t C, bool lg,
                            bool acc);
/* pool.cu (no padding) */
cudaError_t hrk_maxpool(cudaStream_t s, const float *x, float *y, uint8_t *am, int64_t NC, int64_t H, int64_t W,
                        int64_t OH, int64_t OW, int kh, int kw, int sh, int sw);
cudaError_t hrk_maxpool_bwd_am(cudaStream_t s, const uint8_t *am, const float *dy, float *dx, int64_t NC, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc);
cudaError_t hrk_maxpool_bwd(cudaStream_t s, const float *x, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                            int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc);
cudaError_t hrk_avgpool(cudaStream_t s, const float *x, float *y, int64_t NC, int64_t H, int64_t W, int64_t OH,
                        int64_t OW, int kh, int kw, int sh, int sw);
cudaError_t hrk_avgpool_bwd(cudaStream_t s, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                            int64_t OW, int kh, int kw, int sh, int sw, bool acc);
/* norm.cu: (N, C, HW) layouts */
cudaError_t hrk_bn_train(cudaStream_t s, const float *x, const float *gm, const float *bt, float *rm, float *rv, float *y,
                         float *mean, float *invstd, int64_t N, int64_t C, int64_t HW, float eps, float mom);
cudaError_t hrk_bn_infer(cudaStream_t s, const float *x, const float *gm, const float *bt, const float *rm,
                         const float *rv, float *y, int64_t N, int64_t C, int64_t HW, float eps);
cudaError_t hrk_bn_bwd(cudaStream_t s, const float *x, const float *gm, const float *mean, const float *invstd,
                       const float *dy, float *dx, float *dg, float *db, int64_t N, int64_t C, int64_t HW, bool acc0,
                       bool acc1, bool acc2);
cudaError_t hrk_bias_fill(cudaStream_t s, const float *b, float *y, int64_t N, int64_t C, int64_t HW);
cudaError_t hrk_channel_sum(cudaStream_t s, const float *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc);
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
static inline size_t hr_chan_sum_ws(int64_t N, int64_t C, int64_t HW) {
    return HW > 1 && hr_chan_splits(N, C) > 1 ? (size_t)(C * hr_chan_splits(N, C)) * sizeof(double) : 0;
}
cudaError_t hrk_channel_sum_ws(cudaStream_t s, const float *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc,
                               void *part);
/* loss.cu: ws holds HR_CUDA_RED_BLOCKS doubles */
/* out[0] = (acc ? out[0] : 0) + sum(part[0..n)) / div, in double */
cudaError_t hr_finish_launch(cudaStream_t s, const double *part, int n, float *out, bool acc, double div);
cudaError_t hrk_cross_entropy(cudaStream_t s, const float *x, const int32_t *lab, float *loss, int64_t N, int64_t C,
                              double *ws);
cudaError_t hrk_cross_entropy_bwd(cudaStream_t s, const float *x, const int32_t *lab, float *dx, int64_t N, int64_t C,
                                  bool acc);
cudaError_t hrk_mse(cudaStream_t s, const float *p, const float *t, float *loss, int64_t n, double *ws);
cudaError_t hrk_mse_bwd(cudaStream_t s, const float *p, const float *t, float *dx, int64_t n, bool acc);
/* optim.cu */
cudaError_t hrk_sqnorm(cudaStream_t s, const float *g, int64_t n, float *out, bool acc, double *ws);
/* Multi-tensor updates: t[0..count) in launches of up to HR_MT_MAX tensors
 * (the table travels as a kernel parameter, under 4 KB), in order; empty
 * tensors are skipped. The step's scalars are shared by all. sqnorm NULL (or
 * clip <= 0): no clipping. */
#define HR_MT_MAX 48
typedef struct {
    float *p;       /* parameter */
    const float *g; /* its gradient */
    float *s1, *s2; /* Adam: exp_avg, exp_avg_sq; SGD: momentum_buffer or NULL, - */
    int64_t n;
} hr_mt_tensor;
cudaError_t hrk_sgd_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip, float lr,
                       float wd, float mom, float damp, bool nesterov, bool first);
cudaError_t hrk_adam_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip, float lr,
                        float b1, float b2, float eps, float wd, bool decoupled, float step, float bc2s);

/* gemm_splitk.cu: C (m, n column-major, leading dimension ldc) = the sum of
 * the `parts` partials (each m*n, packed, one after the other) in the order
 * 0..parts-1, + bias[i] on row i when bias, + beta C when beta != 0. */
cudaError_t hrk_splitk_reduce(cudaStream_t s, const float *part, int parts, int64_t m, int64_t n, const float *bias,
                              float beta, float *C, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif
