/* cuda_backend.c — the CUDA backend's table: the context and its measured
 * overhead, the one device arena, pinned double-buffered uploads on a copy
 * stream, and the switch that sends each node to cuBLAS, cuDNN or a kernel. */
#include "backend/cuda/hr_cuda.h"
#include "backend/cpu/cpu.h" /* hr_dropout_stream: the same masks as the CPU */

#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define P_F(i) ((float *)ptr[(i)])
#define OUT_F(k) (n->out[(k)] >= 0 ? (float *)ptr[n->out[(k)]] : NULL)

hr_status hr_cuda_fail(const char *file, int line, const char *call, const char *why) {
    const char *base = strrchr(file, '/');
    return hr_error_set(HR_ERR_DEVICE, "%s:%d: %s failed: %s", base ? base + 1 : file, line, call, why);
}

const char *hr_cublas_status_str(int st) { return cublasGetStatusString((cublasStatus_t)st); }

static hr_cuda *ctx_of(const hr_backend *be) { return be->ctx; }

/* ---- device memory, as NVML sees it (no context needed) -------------------- */
typedef struct nvmlDevice_st *nvml_device;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;

/* Bytes in use on the device, or false when NVML is missing. */
static bool nvml_used(int dev, size_t *used) {
    char bus[64];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    int (*init)(void), (*shutdown)(void), (*by_bus)(const char *, nvml_device *), (*mem)(nvml_device, nvml_memory *);
    *(void **)&init = dlsym(lib, "nvmlInit_v2");
    *(void **)&shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&by_bus = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&mem = dlsym(lib, "nvmlDeviceGetMemoryInfo");
    bool ok = false;
    if (init && shutdown && by_bus && mem && init() == 0) {
        nvml_device d;
        nvml_memory m;
        if (by_bus(bus, &d) == 0 && mem(d, &m) == 0) {
            *used = (size_t)m.used;
            ok = true;
        }
        shutdown();
    }
    dlclose(lib);
    return ok;
}

/* The primary context is made once a process; its cost is measured then. */
static size_t g_ctx_bytes;
static bool g_ctx_measured;

/* ---- availability and creation --------------------------------------------- */
static cudaError_t g_count_err = cudaSuccess;

bool hr_backend_cuda_available(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        g_count_err = cudaGetDeviceCount(&n);
        if (g_count_err != cudaSuccess) cudaGetLastError();
        cached = g_count_err == cudaSuccess && n > 0;
    }
    return cached == 1;
}

static hr_status cuda_init(hr_cuda *c, const hr_config_t *cfg) {
    c->allow_tf32 = cfg && cfg->allow_tf32;
    /* Tensors of 2^31 elements and more go to the libraries in chunks of the
     * batch; HR_CUDA_MAX_CALL_ELEMS lowers the limit so tests reach that path. */
    c->max_elems = INT_MAX;
    const char *lim = getenv("HR_CUDA_MAX_CALL_ELEMS");
    if (lim && atoll(lim) > 0 && atoll(lim) < INT_MAX) c->max_elems = atoll(lim);
    HR_CU(cudaGetDevice(&c->device));
    struct cudaDeviceProp prop;
    HR_CU(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->sms = prop.multiProcessorCount;
    size_t before = 0, after = 0, f0, t0, f1, t1;
    bool nv = !g_ctx_measured && nvml_used(c->device, &before);
    HR_CU(cudaSetDevice(c->device));
    HR_CU(cudaFree(NULL)); /* makes the context now, not at the first kernel */
    HR_CU(cudaMemGetInfo(&f0, &t0));
    if (!g_ctx_measured) {
        /* without NVML: everything in use on the device (a device of our own) */
        g_ctx_bytes = nv && nvml_used(c->device, &after) && after > before ? after - before : t0 - f0;
        g_ctx_measured = true;
    }
    HR_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    HR_CU(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    HR_CU(cudaEventCreateWithFlags(&c->compute_ev, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) HR_CU(cudaEventCreateWithFlags(&c->slot_ev[i], cudaEventDisableTiming));
    for (int i = 0; i < HR_PIECES; i++) HR_CU(cudaEventCreateWithFlags(&c->piece_ev[i], cudaEventDisableTiming));
    cublasHandle_t h;
    HR_CUBLAS(cublasCreate(&h));
    c->blas = h;
    HR_CUBLAS(cublasSetStream(h, c->stream));
    HR_CUBLAS(cublasSetMathMode(h, c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (hr_cuda_dnn_open(c) != HR_OK && !c->dnn_why[0]) return HR_ERR_OOM;
    HR_CU(cudaMemGetInfo(&f1, &t1));
    c->overhead = g_ctx_bytes + (f0 > f1 ? f0 - f1 : 0);
    c->used_at_start = t1 - f1;
    return HR_OK;
}

/* ---- the table ------------------------------------------------------------- */
/* Learns the size of a batch and its labels from the program being planned:
 * the pinned staging holds two of them. A backend serves one session, whose
 * program is planned first; later plans on it (the largest batch that would
 * fit, for an OOM report) must not change the staging. */
static void learn_staging(hr_cuda *c, const hr_graph *g, const hr_node *n) {
    if (c->seen_graph ? g != c->seen_graph || n != g->n : n != g->n) return;
    c->seen_graph = g;
    size_t slot = 0;
    for (int i = 0; i < g->nt; i++) {
        const hr_tensor *t = &g->t[i];
        if (t->kind != HR_T_INPUT && t->kind != HR_T_LABEL) continue;
        int64_t k = hr_shape_numel(&t->shape);
        if (k > 0) slot += hr_align_up((size_t)k * hr_dtype_size(t->dtype), 256);
        if (t->kind == HR_T_INPUT && k > 0 && t->shape.d[0] > 0) {
            c->in_batch = t->shape.d[0];
            c->in_sample = k / t->shape.d[0] * (int64_t)hr_dtype_size(t->dtype);
        }
    }
    c->want_slot = slot;
}

static size_t cuda_workspace(hr_backend *be, const hr_graph *g, const hr_node *n) {
    hr_cuda *c = ctx_of(be);
    learn_staging(c, g, n);
    switch (n->op) {
    case HR_OP_CONV2D: case HR_OP_CONV2D_BWD: return hr_cuda_conv_workspace(c, g, n);
    case HR_OP_LINEAR: case HR_OP_LINEAR_BWD: return hr_cuda_linear_workspace(c, g, n, HR_CUDA_CUBLAS_WS);
    case HR_OP_CROSS_ENTROPY: case HR_OP_MSE: case HR_OP_GRAD_SQNORM: return HR_CUDA_RED_BYTES;
    default: return 0;
    }
}

#define HR_PINNED_SLOT_MAX ((size_t)1 << 30)

static hr_status cuda_arena_alloc(hr_backend *be, size_t bytes, void **base) {
    hr_cuda *c = ctx_of(be);
    char a[32], b[32], t[32];
    *base = NULL;
    if (c->arena) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: the arena is already allocated");
    if (hr_fault_should_fail(HR_MEM_DEVICE))
        return hr_error_set(HR_ERR_DEVICE_OOM, "could not allocate the device arena of %s (%zu bytes): injected fault",
                            hr_format_bytes(bytes, a, sizeof a), bytes);
    size_t fr, tot;
    HR_CU(cudaMemGetInfo(&fr, &tot));
    if (bytes > fr)
        return hr_error_set(HR_ERR_DEVICE_OOM,
                            "the plan needs %s (%zu bytes) of device memory but %s (%zu bytes) of %s are free on %s; "
                            "nothing was allocated",
                            hr_format_bytes(bytes, a, sizeof a), bytes, hr_format_bytes(fr, b, sizeof b), fr,
                            hr_format_bytes(tot, t, sizeof t), c->device_name);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    c->allocs++;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_error_set(HR_ERR_DEVICE_OOM, "cudaMalloc of the %s arena (%zu bytes) failed with %s (%zu bytes) free: %s",
                            hr_format_bytes(bytes, a, sizeof a), bytes, hr_format_bytes(fr, b, sizeof b), fr,
                            cudaGetErrorString(e));
    }
    /* Tests poison the arena (NaN everywhere) so that unwritten outputs show. */
    const char *poison = getenv("HR_CUDA_POISON");
    if (poison && *poison && *poison != '0') {
        e = cudaMemsetAsync(p, 0xFF, bytes, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            cudaFree(p);
            return hr_cuda_fail(__FILE__, __LINE__, "cudaMemsetAsync(arena)", cudaGetErrorString(e));
        }
    }
    size_t slot = c->want_slot;
    if (slot > 0 && slot <= HR_PINNED_SLOT_MAX) {
        void *pin = NULL;
        if (hr_fault_should_fail(HR_MEM_PINNED)) {
            cudaFree(p);
            return hr_error_set(HR_ERR_OOM, "could not pin %zu bytes of host memory for batch staging: injected fault",
                                2 * slot);
        }
        e = cudaHostAlloc(&pin, 2 * slot, cudaHostAllocDefault);
        c->allocs++;
        if (e != cudaSuccess) {
            cudaGetLastError();
            cudaFree(p);
            return hr_error_set(HR_ERR_OOM, "could not pin %s (%zu bytes) of host memory for batch staging: %s",
                                hr_format_bytes(2 * slot, a, sizeof a), 2 * slot, cudaGetErrorString(e));
        }
        c->pinned = pin;
        c->slot_bytes = slot;
        c->fill[0] = c->fill[1] = 0;
        c->cur = 0;
    }
    c->arena = p;
    c->arena_bytes = bytes;
    *base = p;
    return HR_OK;
}

static void cuda_arena_free(hr_backend *be, void *base) {
    hr_cuda *c = ctx_of(be);
    cudaStreamSynchronize(c->copy_stream);
    cudaStreamSynchronize(c->stream);
    if (base) cudaFree(base);
    if (base == c->arena) {
        c->arena = NULL;
        c->arena_bytes = 0;
    }
    if (c->pinned) cudaFreeHost(c->pinned);
    c->pinned = NULL;
    c->slot_bytes = 0;
    cudaGetLastError();
}

/* Staging copies: from 256 KiB up, by up to 16 threads (HR_STAGE_THREADS),
 * no more than OpenMP has. One thread's memcpy from pageable memory moves far
 * less than the link takes (53 GB/s pinned on the H200 machine): on it, an
 * MLP step at batch 1024 (4 MB of input) took 1.07 ms with one thread, 0.87
 * with 4, 0.84 with 8 and 0.83 with 16. */
#define HR_STAGE_PAR_MIN ((size_t)256 << 10)
static void stage_copy(unsigned char *dst, const unsigned char *src, size_t n) {
    static int most = 0;
    if (!most) {
        const char *e = getenv("HR_STAGE_THREADS");
        most = e && atoi(e) > 0 ? atoi(e) : 16;
    }
    int th = omp_get_max_threads();
    th = th > most ? most : th;
    if (n < HR_STAGE_PAR_MIN || th <= 1) {
        memcpy(dst, src, n);
        return;
    }
    size_t piece = hr_align_up((n + (size_t)th - 1) / (size_t)th, 4096);
#pragma omp parallel for num_threads(th) schedule(static)
    for (int i = 0; i < th; i++) {
        size_t off = (size_t)i * piece;
        if (off < n) memcpy(dst + off, src + off, n - off < piece ? n - off : piece);
    }
}

/* HR_CUDA_PIECE_MIN=bytes: the smallest input sent in pieces (tests lower it
 * to reach every path; 0 sends every input whole). */
int64_t hr_cuda_piece_samples(int64_t batch, int64_t sample) {
    static long long min = -1;
    if (min < 0) {
        const char *e = getenv("HR_CUDA_PIECE_MIN");
        min = e && *e ? atoll(e) : (long long)HR_PIECE_MIN;
        if (min <= 0) min = LLONG_MAX;
    }
    if (batch < 2 || sample <= 0 || batch * sample < min) return 0;
    return (batch + HR_PIECES - 1) / HR_PIECES;
}

#define HR_UPLOAD_CHUNK ((size_t)1 << 20) /* bytes a host copy and a transfer take at a time */

static hr_status stage_piece(hr_cuda *c, int k) {
    size_t p0 = (size_t)k * c->defer_piece, pend = c->defer_n - p0 < c->defer_piece ? c->defer_n : p0 + c->defer_piece;
    for (size_t off = p0; off < pend; off += HR_UPLOAD_CHUNK) {
        size_t b = pend - off < HR_UPLOAD_CHUNK ? pend - off : HR_UPLOAD_CHUNK;
        stage_copy(c->defer_stage + off, c->defer_src + off, b);
        HR_CU(cudaMemcpyAsync(c->defer_dst + off, c->defer_stage + off, b, cudaMemcpyHostToDevice, c->copy_stream));
    }
    HR_CU(cudaEventRecord(c->piece_ev[k], c->copy_stream));
    return HR_OK;
}

hr_status hr_cuda_stage_upto(hr_cuda *c, int k) {
    if (!c->defer_src) return HR_OK;
    if (k >= c->npieces) k = c->npieces - 1;
    while (c->staged <= k) {
        hr_status st = stage_piece(c, c->staged++);
        if (st) {
            c->defer_src = NULL; /* x is the caller's again: nothing may read it later */
            return st;
        }
    }
    if (c->staged == c->npieces) { /* all of it: the slot's last copy, what settle waits for */
        c->defer_src = NULL;
        HR_CU(cudaEventRecord(c->slot_ev[c->defer_slot], c->copy_stream));
        c->pending_ev = c->slot_ev[c->defer_slot];
    }
    return HR_OK;
}

hr_status hr_cuda_settle(hr_cuda *c) {
    hr_status st = hr_cuda_stage_upto(c, HR_PIECES);
    if (st) return st;
    if (!c->pending) return HR_OK;
    c->pending = false;
    c->piece_dst = NULL;
    HR_CU(cudaStreamWaitEvent(c->stream, c->pending_ev, 0));
    return HR_OK;
}

/* Through a pinned slot on the copy stream, after the compute queued so far
 * (which may still read dst) and before the compute that reads it. The host
 * returns once the bytes are staged: it may prepare the next batch while the
 * device works. The bytes are staged and sent in chunks of 1 MiB, so that the
 * host's copy of one chunk overlaps the link's transfer of the one before.
 * The compute stream waits for them at the next node (hr_cuda_settle). The
 * batch's input (upload_input: the last upload of a step) goes in HR_PIECES pieces of
 * samples, an event after each: the first is staged here, the others by the
 * node that reads the input, each just before it queues the work on it
 * (hr_cuda_*_pieces), so that the host's copying overlaps the device's work;
 * any other node, download or sync stages what is left first. Every step
 * ends with the input staged (the session syncs on its error paths), so x is
 * never read after hr_train_step returns. A transfer larger than a slot goes
 * straight, in order. */
static hr_status upload(hr_cuda *c, void *dst, const void *src, size_t n, bool input) {
    if (n == 0) return HR_OK;
    if (c->defer_src) { /* another upload before the input's reader ran: send the input now */
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
    }
    if (!c->pinned || n > c->slot_bytes) {
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
        HR_CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
        return HR_OK;
    }
    int s = c->cur;
    if (c->fill[s] + n > c->slot_bytes) { /* the other slot: wait until its last copy is done */
        s = c->cur = 1 - s;
        HR_CU(cudaEventSynchronize(c->slot_ev[s]));
        c->fill[s] = 0;
    }
    unsigned char *stage = c->pinned + (size_t)s * c->slot_bytes + c->fill[s];
    HR_CU(cudaEventRecord(c->compute_ev, c->stream));
    HR_CU(cudaStreamWaitEvent(c->copy_stream, c->compute_ev, 0));
    c->fill[s] += hr_align_up(n, 256);
    c->pending = true;
    /* the input (by its size), once a step: in pieces, the first staged now,
     * the others by its reader (hr_cuda_stage_upto) or at the next settle */
    int64_t q = input && !c->piece_dst && (int64_t)n == c->in_batch * c->in_sample
                    ? hr_cuda_piece_samples(c->in_batch, c->in_sample)
                    : 0;
    if (q) {
        c->defer_src = src, c->defer_stage = stage, c->defer_dst = dst;
        c->defer_n = n, c->defer_piece = (size_t)(q * c->in_sample), c->defer_slot = s;
        c->npieces = (int)((c->in_batch + q - 1) / q);
        for (int k = 0; k < c->npieces; k++) c->piece_upto[k] = k + 1 < c->npieces ? (k + 1) * q : c->in_batch;
        c->staged = 0;
        c->piece_dst = dst;
        return hr_cuda_stage_upto(c, 0);
    }
    for (size_t off = 0; off < n; off += HR_UPLOAD_CHUNK) {
        size_t k = n - off < HR_UPLOAD_CHUNK ? n - off : HR_UPLOAD_CHUNK;
        stage_copy(stage + off, (const unsigned char *)src + off, k);
        HR_CU(cudaMemcpyAsync((unsigned char *)dst + off, stage + off, k, cudaMemcpyHostToDevice, c->copy_stream));
    }
    HR_CU(cudaEventRecord(c->slot_ev[s], c->copy_stream));
    c->pending_ev = c->slot_ev[s];
    return HR_OK;
}

static hr_status cuda_upload(hr_backend *be, void *dst, const void *src, size_t n) {
    return upload(ctx_of(be), dst, src, n, false);
}

static hr_status cuda_upload_input(hr_backend *be, void *dst, const void *src, size_t n) {
    return upload(ctx_of(be), dst, src, n, true);
}

static hr_status cuda_download(hr_backend *be, void *dst, const void *src, size_t n) {
    hr_cuda *c = ctx_of(be);
    if (n == 0) return HR_OK;
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    HR_CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    HR_CU(cudaStreamSynchronize(c->stream));
    return HR_OK;
}

static hr_status cuda_sync(hr_backend *be) {
    hr_cuda *c = ctx_of(be);
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    HR_CU(cudaStreamSynchronize(c->copy_stream));
    HR_CU(cudaStreamSynchronize(c->stream));
    HR_CU(cudaGetLastError());
    return HR_OK;
}

static hr_status cuda_mem_info(hr_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    HR_CU(cudaMemGetInfo(free_bytes, total_bytes));
    return HR_OK;
}

static int64_t cuda_alloc_count(hr_backend *be) { return ctx_of(be)->allocs; }
static size_t cuda_overhead(hr_backend *be) { return ctx_of(be)->overhead; }

size_t hr_cuda_pinned_bytes(const hr_backend *be) { return ctx_of(be)->pinned ? 2 * ctx_of(be)->slot_bytes : 0; }
size_t hr_cuda_used_at_start(const hr_backend *be) { return ctx_of(be)->used_at_start; }

/* ---- one node -------------------------------------------------------------- */
static int64_t numel(const hr_graph *g, int t) { return hr_shape_numel(&g->t[t].shape); }
static int64_t inner(const hr_shape *s) { /* H*W for images, 1 for vectors */
    int64_t r = 1;
    for (int i = 2; i < s->ndim; i++) r *= s->d[i];
    return r;
}

static double *red_ws(const hr_node *n, void *const *ptr) { return n->ws >= 0 ? ptr[n->ws] : NULL; }

static hr_status copy_like(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *x = P_F(n->in[0]);
    float *y = P_F(n->out[0]);
    int64_t N = numel(g, n->out[0]);
    if (n->accum[0])
        HR_CU(hrk_acc(c->stream, x, y, N));
    else if (x != y)
        HR_CU(cudaMemcpyAsync(y, x, sizeof(float) * (size_t)N, cudaMemcpyDeviceToDevice, c->stream));
    return HR_OK;
}

static hr_status dropout(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    const float *x = P_F(n->in[0]);
    float *y = P_F(n->out[0]);
    int64_t N = numel(g, n->in[0]);
    if (!n->a.train || n->a.p == 0.0f) {
        if (y != x) HR_CU(cudaMemcpyAsync(y, x, sizeof(float) * (size_t)N, cudaMemcpyDeviceToDevice, c->stream));
        if (n->a.train) HR_CU(cudaMemsetAsync(ptr[n->out[1]], 1, (size_t)N, c->stream));
        return HR_OK;
    }
    HR_CU(hrk_dropout(c->stream, x, y, ptr[n->out[1]], N, n->a.p, 1.0f / (1.0f - n->a.p), si->seed,
                      hr_dropout_stream(n->a.seed, si->t + 1)));
    return HR_OK;
}

static hr_status pool(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_attr *a = &n->a;
    bool bwd = n->op == HR_OP_MAXPOOL_BWD || n->op == HR_OP_AVGPOOL_BWD;
    /* the big side (x or dx) and the pooled side (y or dy) */
    bool am = n->op == HR_OP_MAXPOOL_BWD && g->t[n->in[0]].dtype == HR_U8; /* in {argmax, dy} */
    int big = n->op == HR_OP_AVGPOOL_BWD || am ? n->out[0] : n->in[0];
    int small = n->op == HR_OP_MAXPOOL_BWD ? n->in[1] : n->op == HR_OP_AVGPOOL_BWD ? n->in[0] : n->out[0];
    const hr_shape *xs = &g->t[big].shape, *ys = &g->t[small].shape;
    int64_t NC = xs->d[0] * xs->d[1], H = xs->d[2], W = xs->d[3], OH = ys->d[2], OW = ys->d[3];
    bool acc = bwd && n->accum[0];
    switch (n->op) {
    case HR_OP_MAXPOOL:
        HR_CU(hrk_maxpool(c->stream, P_F(n->in[0]), P_F(n->out[0]), n->nout > 1 && n->out[1] >= 0 ? ptr[n->out[1]] : NULL,
                          NC, H, W, OH, OW, a->kh, a->kw, a->sh, a->sw));
        break;
    case HR_OP_MAXPOOL_BWD:
        if (am) {
            HR_CU(hrk_maxpool_bwd_am(c->stream, ptr[n->in[0]], P_F(n->in[1]), P_F(n->out[0]), NC, H, W, OH, OW, a->kh,
                                     a->kw, a->sh, a->sw, acc));
            break;
        }
        HR_CU(hrk_maxpool_bwd(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), NC, H, W, OH, OW, a->kh, a->kw,
                              a->sh, a->sw, acc));
        break;
    case HR_OP_AVGPOOL:
        HR_CU(hrk_avgpool(c->stream, P_F(n->in[0]), P_F(n->out[0]), NC, H, W, OH, OW, a->kh, a->kw, a->sh, a->sw));
        break;
    default:
        HR_CU(hrk_avgpool_bwd(c->stream, P_F(n->in[0]), P_F(n->out[0]), NC, H, W, OH, OW, a->kh, a->kw, a->sh, a->sw,
                              acc));
        break;
    }
    return HR_OK;
}

static hr_status batchnorm(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *s = &g->t[n->in[0]].shape;
    int64_t N = s->d[0], C = s->d[1], HW = inner(s);
    if (n->op == HR_OP_BATCHNORM_BWD) {
        HR_CU(hrk_bn_bwd(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->in[2]), P_F(n->in[3]), P_F(n->in[4]), OUT_F(0),
                         OUT_F(1), OUT_F(2), N, C, HW, n->accum[0], n->accum[1], n->accum[2]));
    } else if (n->a.train) {
        HR_CU(hrk_bn_train(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->in[2]), P_F(n->in[3]), P_F(n->in[4]),
                           P_F(n->out[0]), P_F(n->out[1]), P_F(n->out[2]), N, C, HW, n->a.eps, n->a.momentum));
    } else {
        HR_CU(hrk_bn_infer(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->in[2]), P_F(n->in[3]), P_F(n->in[4]),
                           P_F(n->out[0]), N, C, HW, n->a.eps));
    }
    return HR_OK;
}

static hr_status concat(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    if (n->op == HR_OP_CONCAT_BWD) { /* dx = channels [offset, offset + C) of dy */
        const hr_shape *ys = &g->t[n->in[0]].shape;
        int64_t N = ys->d[0], CY = ys->d[1], hw = inner(ys), C = g->t[n->out[0]].shape.d[1];
        HR_CU(hrk_copy_rows(c->stream, P_F(n->in[0]) + n->a.offset * hw, CY * hw, P_F(n->out[0]), C * hw, N, C * hw,
                            n->accum[0]));
        return HR_OK;
    }
    const hr_shape *ys = &g->t[n->out[0]].shape;
    int64_t N = ys->d[0], CY = ys->d[1], hw = inner(ys), off = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t C = g->t[n->in[k]].shape.d[1];
        HR_CU(hrk_copy_rows(c->stream, P_F(n->in[k]), C * hw, P_F(n->out[0]) + off * hw, CY * hw, N, C * hw, false));
        off += C;
    }
    return HR_OK;
}

static hr_status loss(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *s = &g->t[n->in[0]].shape;
    double *ws = red_ws(n, ptr);
    switch (n->op) {
    case HR_OP_CROSS_ENTROPY:
        if (!ws) return hr_error_set(HR_ERR_INTERNAL, "CrossEntropy: no workspace was planned");
        HR_CU(hrk_cross_entropy(c->stream, P_F(n->in[0]), ptr[n->in[1]], P_F(n->out[0]), s->d[0], s->d[1], ws));
        break;
    case HR_OP_CROSS_ENTROPY_BWD:
        HR_CU(hrk_cross_entropy_bwd(c->stream, P_F(n->in[0]), ptr[n->in[1]], P_F(n->out[0]), s->d[0], s->d[1],
                                    n->accum[0]));
        break;
    case HR_OP_MSE:
        if (!ws) return hr_error_set(HR_ERR_INTERNAL, "MSE: no workspace was planned");
        HR_CU(hrk_mse(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), hr_shape_numel(s), ws));
        break;
    default:
        HR_CU(hrk_mse_bwd(c->stream, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), hr_shape_numel(s), n->accum[0]));
        break;
    }
    return HR_OK;
}

/* Updates nodes[0..count), all SGD or all Adam, in launches of up to
 * HR_MT_MAX parameters; the step's scalars are made once, on the host,
 * exactly as cpu_optim.c makes them. */
static hr_status optim(hr_cuda *c, const hr_graph *g, const hr_node *nodes, int count, void *const *ptr,
                       const hr_step_info *si) {
    const hr_optim_t *o = &si->optim;
    const float *sq = si->sqnorm >= 0 && o->clip_norm > 0 ? P_F(si->sqnorm) : NULL;
    bool sgd = nodes[0].op == HR_OP_SGD;
    double bc1 = 1.0 - pow((double)o->beta1, (double)si->t), bc2 = 1.0 - pow((double)o->beta2, (double)si->t);
    float step = (float)(si->lr / bc1), bc2s = (float)sqrt(bc2);
    hr_mt_tensor t[HR_MT_MAX];
    for (int k0 = 0; k0 < count; k0 += HR_MT_MAX) {
        int m = count - k0 < HR_MT_MAX ? count - k0 : HR_MT_MAX;
        for (int j = 0; j < m; j++) {
            const hr_node *n = &nodes[k0 + j];
            if (n->op != nodes[0].op)
                return hr_error_set(HR_ERR_INTERNAL, "cuda backend: a group of %s nodes holds a %s",
                                    hr_op_name(nodes[0].op), hr_op_name(n->op));
            t[j] = (hr_mt_tensor){P_F(n->in[0]), P_F(n->in[1]), n->in[2] >= 0 ? P_F(n->in[2]) : NULL,
                                  !sgd ? P_F(n->in[3]) : NULL, numel(g, n->in[0])};
        }
        if (sgd)
            HR_CU(hrk_sgd_mt(c->stream, t, m, sq, o->clip_norm, si->lr, o->weight_decay, o->momentum, o->dampening,
                             o->nesterov, si->t == 1));
        else
            HR_CU(hrk_adam_mt(c->stream, t, m, sq, o->clip_norm, si->lr, o->beta1, o->beta2, o->eps, o->weight_decay,
                              o->kind == HR_OPTIM_ADAMW, step, bc2s));
    }
    return HR_OK;
}

static hr_status cuda_run(hr_backend *be, const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    hr_cuda *c = ctx_of(be);
    cudaStream_t s = c->stream;
    if (c->pending) { /* the batch's upload: its reader may take it in pieces, every other node waits */
        bool reader = c->piece_dst && n->nin > 0 && n->in[0] >= 0 && ptr[n->in[0]] == c->piece_dst;
        if (reader && n->op == HR_OP_LINEAR) return hr_cuda_linear_pieces(c, g, n, ptr);
        if (reader && n->op == HR_OP_CONV2D) return hr_cuda_conv2d_pieces(c, g, n, ptr);
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
    }
    switch (n->op) {
    case HR_OP_LINEAR: return hr_cuda_linear(c, g, n, ptr);
    case HR_OP_LINEAR_BWD: return hr_cuda_linear_bwd(c, g, n, ptr);
    case HR_OP_CONV2D: return hr_cuda_conv2d(c, g, n, ptr);
    case HR_OP_CONV2D_BWD: return hr_cuda_conv2d_bwd(c, g, n, ptr);
    case HR_OP_RELU:
        if (n->nout > 1 && n->out[1] >= 0)
            HR_CU(hrk_relu_mask(s, P_F(n->in[0]), P_F(n->out[0]), ptr[n->out[1]], numel(g, n->in[0])));
        else
            HR_CU(hrk_relu(s, P_F(n->in[0]), P_F(n->out[0]), numel(g, n->in[0])));
        return HR_OK;
    case HR_OP_RELU_BWD:
        if (g->t[n->in[0]].dtype == HR_U8) /* in {mask, dy} */
            HR_CU(hrk_relu_bwd_mask(s, ptr[n->in[0]], P_F(n->in[1]), P_F(n->out[0]), numel(g, n->in[1]), n->accum[0]));
        else
            HR_CU(hrk_relu_bwd(s, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), numel(g, n->in[0]), n->accum[0]));
        return HR_OK;
    case HR_OP_DROPOUT: return dropout(c, g, n, ptr, si);
    case HR_OP_DROPOUT_BWD:
        HR_CU(hrk_dropout_bwd(s, ptr[n->in[0]], P_F(n->in[1]), P_F(n->out[0]), numel(g, n->in[1]),
                              1.0f / (1.0f - n->a.p), n->accum[0]));
        return HR_OK;
    case HR_OP_ADD:
        HR_CU(hrk_add(s, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), numel(g, n->out[0])));
        return HR_OK;
    case HR_OP_RESHAPE: case HR_OP_COPY: return copy_like(c, g, n, ptr);
    case HR_OP_CONCAT: case HR_OP_CONCAT_BWD: return concat(c, g, n, ptr);
    case HR_OP_SOFTMAX: case HR_OP_LOGSOFTMAX: {
        const hr_shape *sh = &g->t[n->in[0]].shape;
        HR_CU(hrk_softmax(s, P_F(n->in[0]), P_F(n->out[0]), sh->d[0], sh->d[1], n->op == HR_OP_LOGSOFTMAX));
        return HR_OK;
    }
    case HR_OP_SOFTMAX_BWD: case HR_OP_LOGSOFTMAX_BWD: {
        const hr_shape *sh = &g->t[n->in[0]].shape;
        HR_CU(hrk_softmax_bwd(s, P_F(n->in[0]), P_F(n->in[1]), P_F(n->out[0]), sh->d[0], sh->d[1],
                              n->op == HR_OP_LOGSOFTMAX_BWD, n->accum[0]));
        return HR_OK;
    }
    case HR_OP_MAXPOOL: case HR_OP_MAXPOOL_BWD: case HR_OP_AVGPOOL: case HR_OP_AVGPOOL_BWD: return pool(c, g, n, ptr);
    case HR_OP_BATCHNORM: case HR_OP_BATCHNORM_BWD: return batchnorm(c, g, n, ptr);
    case HR_OP_CROSS_ENTROPY: case HR_OP_CROSS_ENTROPY_BWD: case HR_OP_MSE: case HR_OP_MSE_BWD:
        return loss(c, g, n, ptr);
    case HR_OP_GRAD_SQNORM: {
        double *ws = red_ws(n, ptr);
        if (!ws) return hr_error_set(HR_ERR_INTERNAL, "grad_sqnorm: no workspace was planned");
        HR_CU(hrk_sqnorm(s, P_F(n->in[0]), numel(g, n->in[0]), P_F(n->out[0]), n->accum[0], ws));
        return HR_OK;
    }
    case HR_OP_SGD: case HR_OP_ADAM: return optim(c, g, n, 1, ptr, si);
    default: return hr_error_set(HR_ERR_INTERNAL, "cuda backend: no kernel for op %s", hr_op_name(n->op));
    }
}

/* A run of update nodes: the whole update of a step in a few launches. */
static hr_status cuda_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void *const *ptr,
                                const hr_step_info *si) {
    if (count <= 0) return HR_OK;
    hr_status st0 = hr_cuda_settle(ctx_of(be));
    if (st0) return st0;
    if (nodes[0].op != HR_OP_SGD && nodes[0].op != HR_OP_ADAM)
        return hr_error_set(HR_ERR_INTERNAL, "cuda backend: no group launch for op %s", hr_op_name(nodes[0].op));
    return optim(ctx_of(be), g, nodes, count, ptr, si);
}

/* ---- profiling marks (HR_PROFILE=2) ------------------------------------------ */
/* Diagnostics only: the event array comes from plain realloc, outside the
 * fault-injection counter, and grows as slots appear (one a node, plus one). */
static hr_status cuda_mark(hr_backend *be, int slot) {
    hr_cuda *c = ctx_of(be);
    if (slot < 0) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: profiling mark %d", slot);
    if (slot >= c->nmarks) {
        int want = slot + 1 > 2 * c->nmarks ? slot + 1 : 2 * c->nmarks;
        cudaEvent_t *ev = realloc(c->marks, sizeof *ev * (size_t)want);
        if (!ev) return hr_error_set(HR_ERR_OOM, "profiling: no room for %d timing events", want);
        c->marks = ev;
        for (; c->nmarks < want; c->nmarks++) HR_CU(cudaEventCreate(&c->marks[c->nmarks]));
    }
    HR_CU(cudaEventRecord(c->marks[slot], c->stream));
    return HR_OK;
}

static double cuda_mark_ms(hr_backend *be, int a, int b) {
    hr_cuda *c = ctx_of(be);
    float ms = 0;
    if (a < 0 || b < 0 || a >= c->nmarks || b >= c->nmarks) return -1;
    if (cudaEventElapsedTime(&ms, c->marks[a], c->marks[b]) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return ms;
}

/* ---- lifetime ---------------------------------------------------------------- */
static void cuda_free(hr_backend *be) {
    if (!be) return;
    hr_cuda *c = be->ctx;
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
        if (c->arena) cuda_arena_free(be, c->arena);
        hr_cuda_dnn_close(c);
        if (c->blas) cublasDestroy(c->blas);
        for (int i = 0; i < 2; i++)
            if (c->slot_ev[i]) cudaEventDestroy(c->slot_ev[i]);
        for (int i = 0; i < HR_PIECES; i++)
            if (c->piece_ev[i]) cudaEventDestroy(c->piece_ev[i]);
        if (c->compute_ev) cudaEventDestroy(c->compute_ev);
        for (int i = 0; i < c->nmarks; i++) cudaEventDestroy(c->marks[i]);
        free(c->marks);
        if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
        if (c->stream) cudaStreamDestroy(c->stream);
        cudaGetLastError();
        hr_free(c);
    }
    hr_free(be);
}

hr_backend *hr_backend_cuda_new(const hr_config_t *cfg) {
    if (!hr_backend_cuda_available()) {
        hr_error_set(HR_ERR_UNSUPPORTED, "no CUDA device is usable here (%s); use --device cpu",
                     g_count_err != cudaSuccess ? cudaGetErrorString(g_count_err) : "no device found");
        return NULL;
    }
    hr_backend *be = hr_calloc(1, sizeof *be);
    hr_cuda *c = hr_calloc(1, sizeof *c);
    if (!be || !c) {
        hr_free(be);
        hr_free(c);
        return NULL;
    }
    *be = (hr_backend){
        /* .name           = */ "cuda",
        /* .arena_kind     = */ HR_MEM_DEVICE,
        /* .ctx            = */ c,
        /* .workspace_size = */ cuda_workspace,
        /* .arena_alloc    = */ cuda_arena_alloc,
        /* .arena_free     = */ cuda_arena_free,
        /* .upload         = */ cuda_upload,
        /* .upload_input   = */ cuda_upload_input,
        /* .download       = */ cuda_download,
        /* .run            = */ cuda_run,
        /* .run_group      = */ cuda_run_group,
        /* .sync           = */ cuda_sync,
        /* .mem_info       = */ cuda_mem_info,
        /* .alloc_count    = */ cuda_alloc_count,
        /* .overhead       = */ cuda_overhead,
        /* .mark           = */ cuda_mark,
        /* .mark_ms        = */ cuda_mark_ms,
        /* .free           = */ cuda_free,
    };
    if (cuda_init(c, cfg) != HR_OK) {
        hr_error_prefix("starting the CUDA backend");
        cuda_free(be);
        return NULL;
    }
    return be;
}
