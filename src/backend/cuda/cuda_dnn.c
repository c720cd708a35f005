/* cuda_dnn.c — Conv2d through cuDNN, the library loaded at run time. Each
 * convolution (forward, backward data, backward filter) of each shape is
 * planned once while the program is planned, so the planner places its
 * workspace in the arena before anything runs: through the graph API
 * (cudnn_graph.c: engine configurations from cuDNN's heuristics, timed at the
 * first run) where the library offers it, else through the legacy API's
 * algorithms (cuDNN's heuristics, never cudnnFind, which allocates).
 * HR_CUDNN_API=legacy keeps to the legacy API. */
#include "backend/cuda/hr_cuda.h"
#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/cudnn_graph.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct hr_cuda_dnn {
    void *lib;
    cudnnHandle_t h;
    size_t version;
    hr_cudnn_status (*Create)(cudnnHandle_t *);
    hr_cudnn_status (*Destroy)(cudnnHandle_t);
    hr_cudnn_status (*SetStream)(cudnnHandle_t, cudaStream_t);
    const char *(*GetErrorString)(hr_cudnn_status);
    size_t (*GetVersion)(void);
    hr_cudnn_status (*CreateTensorDescriptor)(cudnnTensorDescriptor_t *);
    hr_cudnn_status (*SetTensor4dDescriptor)(cudnnTensorDescriptor_t, int, int, int, int, int, int);
    hr_cudnn_status (*DestroyTensorDescriptor)(cudnnTensorDescriptor_t);
    hr_cudnn_status (*CreateFilterDescriptor)(cudnnFilterDescriptor_t *);
    hr_cudnn_status (*SetFilter4dDescriptor)(cudnnFilterDescriptor_t, int, int, int, int, int, int);
    hr_cudnn_status (*DestroyFilterDescriptor)(cudnnFilterDescriptor_t);
    hr_cudnn_status (*CreateConvolutionDescriptor)(cudnnConvolutionDescriptor_t *);
    hr_cudnn_status (*SetConvolution2dDescriptor)(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, int, int);
    hr_cudnn_status (*SetConvolutionMathType)(cudnnConvolutionDescriptor_t, int);
    hr_cudnn_status (*DestroyConvolutionDescriptor)(cudnnConvolutionDescriptor_t);
    hr_cudnn_status (*GetFwdAlgo)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                                cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetBwdDataAlgo)(cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
                                    cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetBwdFilterAlgo)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
                                      cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetFwdWs)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                              cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, size_t *);
    hr_cudnn_status (*GetBwdDataWs)(cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
                                  cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, size_t *);
    hr_cudnn_status (*GetBwdFilterWs)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
                                    cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, int, size_t *);
    hr_cudnn_status (*Forward)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, cudnnFilterDescriptor_t,
                             const void *, cudnnConvolutionDescriptor_t, int, void *, size_t, const void *,
                             cudnnTensorDescriptor_t, void *);
    hr_cudnn_status (*BackwardData)(cudnnHandle_t, const void *, cudnnFilterDescriptor_t, const void *,
                                  cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t, int, void *,
                                  size_t, const void *, cudnnTensorDescriptor_t, void *);
    hr_cudnn_status (*BackwardFilter)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *,
                                    cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t, int, void *,
                                    size_t, const void *, cudnnFilterDescriptor_t, void *);
    cudaEvent_t ev[2]; /* timing the candidates (autotune); made at the first use */
    hr_cudnn_graph *G; /* the graph API; NULL: legacy only */
};

/* One convolution shape (N is a chunk of the batch: cuDNN's legacy API takes
 * tensors of fewer than 2^31 elements) and the algorithms chosen for it. */
struct hr_cuda_conv {
    int N, C, H, W, K, kh, kw, sh, sw, ph, pw, OH, OW;
    int align; /* bytes every call's x and y pointers keep: 16, or 4 where chunks start off a 16-byte line */
    bool tf32;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo[3], math[3]; /* forward, backward data, backward filter; algo -1: not chosen */
    size_t ws[3];
    hr_cudnn_status err[3]; /* nonzero: no algorithm could be chosen */
    /* autotune: the precise candidates whose workspace the plan holds, timed
     * at the first run on the real buffers; tuned: the fastest was taken */
    int ncand[3];
    struct {
        int algo, math;
        size_t ws;
    } cand[3][8];
    bool tuned[3];
    /* through the graph API: one op per convolution and beta (0: write, 1: add) */
    hr_cudnn_op *gop[3][2];
    bool gtried[3][2];
    char gwhy[3][2][96]; /* why there is none */
};

enum { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };

#define DNN(d, call)                                                                                  \
    do {                                                                                              \
        hr_cudnn_status s_ = (call);                                                                    \
        if (s_ != 0) return hr_cuda_fail(__FILE__, __LINE__, #call, (d)->GetErrorString(s_));        \
    } while (0)

static void *sym(hr_cuda_dnn *d, const char *name, bool *ok) {
    void *p = dlsym(d->lib, name);
    if (!p) *ok = false;
    return p;
}

hr_status hr_cuda_dnn_open(hr_cuda *c) {
    const char *names[] = {"libcudnn.so.9", "libcudnn.so"};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(c->dnn_why, sizeof c->dnn_why, "cuDNN 9 (libcudnn.so.9) could not be loaded: %s", e ? e : "not found");
        return HR_ERR_UNSUPPORTED;
    }
    hr_cuda_dnn *d = hr_calloc(1, sizeof *d);
    if (!d) {
        dlclose(lib);
        return hr_error_prefix("loading cuDNN");
    }
    d->lib = lib;
    bool ok = true;
#define LOAD(field, name) *(void **)(&d->field) = sym(d, name, &ok)
    LOAD(Create, "cudnnCreate");
    LOAD(Destroy, "cudnnDestroy");
    LOAD(SetStream, "cudnnSetStream");
    LOAD(GetErrorString, "cudnnGetErrorString");
    LOAD(GetVersion, "cudnnGetVersion");
    LOAD(CreateTensorDescriptor, "cudnnCreateTensorDescriptor");
    LOAD(SetTensor4dDescriptor, "cudnnSetTensor4dDescriptor");
    LOAD(DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
    LOAD(CreateFilterDescriptor, "cudnnCreateFilterDescriptor");
    LOAD(SetFilter4dDescriptor, "cudnnSetFilter4dDescriptor");
    LOAD(DestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
    LOAD(CreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
    LOAD(SetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor");
    LOAD(SetConvolutionMathType, "cudnnSetConvolutionMathType");
    LOAD(DestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
    LOAD(GetFwdAlgo, "cudnnGetConvolutionForwardAlgorithm_v7");
    LOAD(GetBwdDataAlgo, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    LOAD(GetBwdFilterAlgo, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    LOAD(GetFwdWs, "cudnnGetConvolutionForwardWorkspaceSize");
    LOAD(GetBwdDataWs, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    LOAD(GetBwdFilterWs, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    LOAD(Forward, "cudnnConvolutionForward");
    LOAD(BackwardData, "cudnnConvolutionBackwardData");
    LOAD(BackwardFilter, "cudnnConvolutionBackwardFilter");
#undef LOAD
    hr_cudnn_status st = 0;
    if (!ok) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "the loaded cuDNN lacks the convolution API (not cuDNN 9?)");
    } else if ((d->version = d->GetVersion()) < 90000) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "cuDNN %zu is too old; headroom needs cuDNN 9", d->version);
        ok = false;
    } else if ((st = d->Create(&d->h)) != 0 || (st = d->SetStream(d->h, c->stream)) != 0) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "cudnnCreate failed: %s", d->GetErrorString(st));
        if (d->h) d->Destroy(d->h);
        ok = false;
    }
    if (!ok) {
        dlclose(lib);
        hr_free(d);
        return HR_ERR_UNSUPPORTED;
    }
    const char *api = getenv("HR_CUDNN_API");
    if (!(api && !strcmp(api, "legacy"))) d->G = hr_cudnn_graph_open(lib, d->h);
    c->dnn = d;
    return HR_OK;
}

static void conv_free(hr_cuda_dnn *d, hr_cuda_conv *p) {
    if (!p) return;
    if (d) {
        for (int w = 0; w < 3; w++)
            for (int b = 0; b < 2; b++) hr_cudnn_op_free(d->G, p->gop[w][b]);
        if (p->xd) d->DestroyTensorDescriptor(p->xd);
        if (p->yd) d->DestroyTensorDescriptor(p->yd);
        if (p->wd) d->DestroyFilterDescriptor(p->wd);
        if (p->cd) d->DestroyConvolutionDescriptor(p->cd);
    }
    hr_free(p);
}

void hr_cuda_dnn_close(hr_cuda *c) {
    for (int i = 0; i < c->nconv; i++) conv_free(c->dnn, c->conv[i]);
    hr_free(c->conv);
    c->conv = NULL;
    c->nconv = c->capconv = 0;
    if (!c->dnn) return;
    for (int i = 0; i < 2; i++)
        if (c->dnn->ev[i]) cudaEventDestroy(c->dnn->ev[i]);
    hr_cudnn_graph_close(c->dnn->G);
    c->dnn->Destroy(c->dnn->h);
    dlclose(c->dnn->lib);
    hr_free(c->dnn);
    c->dnn = NULL;
}

/* ---- shapes and plans ------------------------------------------------------ */
typedef struct {
    int64_t N, C, H, W, K, OH, OW;
    int kh, kw, sh, sw, ph, pw;
    int64_t chunk; /* samples per cuDNN call */
} conv_shape;

static bool shape_of(const hr_cuda *c, const hr_graph *g, const hr_node *n, conv_shape *s) {
    const hr_shape *x = &g->t[n->in[0]].shape, *w = &g->t[n->in[1]].shape;
    s->N = x->d[0], s->C = x->d[1], s->H = x->d[2], s->W = x->d[3], s->K = w->d[0];
    s->kh = n->a.kh, s->kw = n->a.kw, s->sh = n->a.sh, s->sw = n->a.sw, s->ph = n->a.ph, s->pw = n->a.pw;
    s->OH = (s->H + 2 * s->ph - s->kh) / s->sh + 1;
    s->OW = (s->W + 2 * s->pw - s->kw) / s->sw + 1;
    int64_t per = s->C * s->H * s->W, out = s->K * s->OH * s->OW;
    if (out > per) per = out;
    if (per <= 0 || per > c->max_elems || s->K > INT_MAX || s->H > INT_MAX || s->W > INT_MAX) return false;
    s->chunk = c->max_elems / per;
    if (s->chunk > s->N) s->chunk = s->N;
    return s->chunk >= 1;
}

static int align_of(const conv_shape *s) {
    bool whole = s->chunk >= s->N; /* one call: the planned tensors start on HR_ALIGN */
    return whole || ((s->C * s->H * s->W) % 4 == 0 && (s->K * s->OH * s->OW) % 4 == 0) ? 16 : 4;
}

static bool same(const hr_cuda_conv *p, const conv_shape *s, int64_t N, bool tf32) {
    return p->N == N && p->align == align_of(s) && p->C == s->C && p->H == s->H && p->W == s->W && p->K == s->K && p->kh == s->kh &&
           p->kw == s->kw && p->sh == s->sh && p->sw == s->sw && p->ph == s->ph && p->pw == s->pw && p->tf32 == tf32;
}

static hr_status conv_new(hr_cuda *c, const conv_shape *s, int64_t N, hr_cuda_conv **out) {
    hr_cuda_dnn *d = c->dnn;
    for (int i = 0; i < c->nconv; i++)
        if (same(c->conv[i], s, N, c->allow_tf32)) return *out = c->conv[i], HR_OK;
    if (c->nconv == c->capconv) {
        int cap = c->capconv ? 2 * c->capconv : 16;
        hr_cuda_conv **a = hr_realloc(c->conv, sizeof *a * (size_t)cap);
        if (!a) return hr_error_prefix("planning a convolution");
        c->conv = a;
        c->capconv = cap;
    }
    hr_cuda_conv *p = hr_calloc(1, sizeof *p);
    if (!p) return hr_error_prefix("planning a convolution");
    p->N = (int)N, p->C = (int)s->C, p->H = (int)s->H, p->W = (int)s->W, p->K = (int)s->K;
    p->kh = s->kh, p->kw = s->kw, p->sh = s->sh, p->sw = s->sw, p->ph = s->ph, p->pw = s->pw;
    p->OH = (int)s->OH, p->OW = (int)s->OW;
    p->align = align_of(s);
    p->tf32 = c->allow_tf32;
    for (int i = 0; i < 3; i++) p->algo[i] = -1;
    c->conv[c->nconv++] = p; /* owned by the cache from here on, even if the descriptors fail */
    *out = p;
    DNN(d, d->CreateTensorDescriptor(&p->xd));
    DNN(d, d->CreateTensorDescriptor(&p->yd));
    DNN(d, d->CreateFilterDescriptor(&p->wd));
    DNN(d, d->CreateConvolutionDescriptor(&p->cd));
    DNN(d, d->SetTensor4dDescriptor(p->xd, HR_CUDNN_TENSOR_NCHW, HR_CUDNN_DATA_FLOAT, p->N, p->C, p->H, p->W));
    DNN(d, d->SetTensor4dDescriptor(p->yd, HR_CUDNN_TENSOR_NCHW, HR_CUDNN_DATA_FLOAT, p->N, p->K, p->OH, p->OW));
    DNN(d, d->SetFilter4dDescriptor(p->wd, HR_CUDNN_DATA_FLOAT, HR_CUDNN_TENSOR_NCHW, p->K, p->C, p->kh, p->kw));
    DNN(d, d->SetConvolution2dDescriptor(p->cd, p->ph, p->pw, p->sh, p->sw, 1, 1, HR_CUDNN_CROSS_CORRELATION,
                                         HR_CUDNN_DATA_FLOAT));
    return HR_OK;
}

/* FFT and Winograd algorithms trade FP32 accuracy for speed (errors near
 * 1e-5 instead of 1e-7), which Adam then amplifies where a gradient is near
 * zero; the GEMM-like ones add the same products as the CPU does. */
static bool precise(int which, int algo) {
    if (which == FWD) return algo <= 3;            /* implicit GEMM, precomputed, GEMM, direct */
    if (which == BWD_DATA) return algo <= 1;       /* ALGO_0, ALGO_1 */
    return algo == 0 || algo == 1 || algo == 3;    /* ALGO_0, ALGO_1, ALGO_3 */
}

static bool verbose(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("HR_CUDA_VERBOSE");
        v = e && *e && *e != '0';
    }
    return v;
}

/* Which algorithms come first (HR_CUDNN_ALGO):
 *   precise        (default) cuDNN's heuristic order among the GEMM-like
 *                  algorithms, deterministic or not, then any;
 *   deterministic  precise and deterministic, then deterministic, then any:
 *                  a rerun gives the same bits (slower backward passes);
 *   heuristic      cuDNN's heuristic first choice, whatever it is. */
enum { PICK_PRECISE = 0, PICK_DETERMINISTIC, PICK_HEURISTIC };

static int pick_mode(void) {
    static int m = -1;
    if (m < 0) {
        const char *e = getenv("HR_CUDNN_ALGO");
        m = !e || !*e                         ? PICK_PRECISE
            : !strcmp(e, "deterministic")     ? PICK_DETERMINISTIC
            : !strcmp(e, "heuristic")         ? PICK_HEURISTIC
                                              : PICK_PRECISE;
    }
    return m;
}

/* In the precise mode, the GEMM-like candidates are also timed once on the
 * real buffers at the first run, and the fastest is kept: the heuristics'
 * ranking is often wrong for FP32. Their workspace, up to
 * HR_CUDA_CONV_TUNE_WS, is planned. HR_CUDNN_AUTOTUNE=0 keeps the
 * heuristics' choice. */
#define HR_CUDA_CONV_TUNE_WS ((size_t)64 << 20)
static bool autotune(void) {
    static int a = -1;
    if (a < 0) {
        const char *e = getenv("HR_CUDNN_AUTOTUNE");
        a = pick_mode() == PICK_PRECISE && !(e && *e == '0');
    }
    return a;
}

/* The graph-API op for this convolution and beta, made at the first ask;
 * NULL where the graph API is off or offers no acceptable engine (the legacy
 * algorithms run then). The modes of pick_mode() map to engine filters:
 * precise: no FFT or Winograd, the candidates timed (autotune) or cuDNN's
 * first; deterministic: also no non-deterministic engine, cuDNN's first
 * (timing could pick another engine in another run); heuristic: cuDNN's
 * first, whatever it is. TF32 engines only when allowed. */
static hr_cudnn_op *gop_for(hr_cuda *c, hr_cuda_conv *p, int which, bool add) {
    hr_cuda_dnn *d = c->dnn;
    if (!d->G) return NULL;
    int b = add ? 1 : 0;
    if (p->gtried[which][b]) return p->gop[which][b];
    p->gtried[which][b] = true;
    int mode = pick_mode();
    unsigned flags = p->tf32 ? HR_ENGINE_ALLOW_TF32 : 0;
    if (mode != PICK_HEURISTIC) flags |= HR_ENGINE_PRECISE;
    if (mode == PICK_DETERMINISTIC) flags |= HR_ENGINE_DETERMINISTIC;
    if (!autotune()) flags |= HR_ENGINE_FIRST_ONLY;
    hr_conv_dims dims = {.n = p->N, .c = p->C, .h = p->H, .w = p->W, .k = p->K, .r = p->kh, .s = p->kw,
                         .oh = p->OH, .ow = p->OW, .pad = {p->ph, p->pw}, .stride = {p->sh, p->sw},
                         .align = p->align};
    size_t cap = autotune() ? HR_CUDA_CONV_TUNE_WS : HR_CUDA_CONV_WS_CAP;
    p->gop[which][b] = hr_cudnn_op_new(d->G, &dims, which, add ? 1.0f : 0.0f, flags, cap, 16, p->gwhy[which][b],
                                       sizeof p->gwhy[which][b]);
    if (verbose()) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        char desc[160];
        if (p->gop[which][b])
            hr_cudnn_op_describe(p->gop[which][b], desc, sizeof desc);
        else
            snprintf(desc, sizeof desc, "none (%s): legacy algorithms", p->gwhy[which][b]);
        fprintf(stderr, "cuda: conv N=%d C=%d %dx%d K=%d k=%dx%d s=%d p=%d: %s beta %d: %s\n", p->N, p->C, p->H, p->W,
                p->K, p->kh, p->kw, p->sh, p->ph, what[which], b, desc);
    }
    return p->gop[which][b];
}

/* Workspace of one convolution: the graph op's, else the legacy algorithm's. */
static size_t ws_of(hr_cuda *c, hr_cuda_conv *p, int which);
static size_t conv_ws(hr_cuda *c, hr_cuda_conv *p, int which, bool add) {
    if (!p) return 0;
    hr_cudnn_op *op = gop_for(c, p, which, add);
    return op ? hr_cudnn_op_workspace(op) : ws_of(c, p, which);
}

static hr_cudnn_status ws_size(hr_cuda_dnn *d, hr_cuda_conv *p, int which, int algo, size_t *ws) {
    if (which == FWD) return d->GetFwdWs(d->h, p->xd, p->wd, p->cd, p->yd, algo, ws);
    if (which == BWD_DATA) return d->GetBwdDataWs(d->h, p->wd, p->yd, p->cd, p->xd, algo, ws);
    return d->GetBwdFilterWs(d->h, p->xd, p->yd, p->cd, p->wd, algo, ws);
}

/* The first algorithm of cuDNN's heuristic ranking that succeeds, keeps to
 * FP32 arithmetic unless TF32 is allowed, and whose workspace fits the cap,
 * in the preference order of pick_mode(). */
static hr_status choose(hr_cuda *c, hr_cuda_conv *p, int which) {
    hr_cuda_dnn *d = c->dnn;
    if (p->algo[which] >= 0 || p->err[which]) return HR_OK;
    hr_cudnn_perf perf[8];
    int got = 0;
    memset(perf, 0, sizeof perf);
    DNN(d, d->SetConvolutionMathType(p->cd, p->tf32 ? HR_CUDNN_DEFAULT_MATH : HR_CUDNN_FMA_MATH));
    hr_cudnn_status st;
    if (which == FWD)
        st = d->GetFwdAlgo(d->h, p->xd, p->wd, p->cd, p->yd, HR_CUDNN_FWD_ALGO_COUNT, &got, perf);
    else if (which == BWD_DATA)
        st = d->GetBwdDataAlgo(d->h, p->wd, p->yd, p->cd, p->xd, HR_CUDNN_BWD_DATA_ALGO_COUNT, &got, perf);
    else
        st = d->GetBwdFilterAlgo(d->h, p->xd, p->yd, p->cd, p->wd, HR_CUDNN_BWD_FILTER_ALGO_COUNT, &got, perf);
    if (st != 0) {
        p->err[which] = st;
        return HR_OK;
    }
    int mode = pick_mode();
    for (int pass = 0; pass < 3 && p->algo[which] < 0; pass++)
        for (int i = 0; i < got; i++) {
            const hr_cudnn_perf *r = &perf[i];
            bool math_ok = p->tf32 || r->mathType == HR_CUDNN_FMA_MATH || r->mathType == HR_CUDNN_DEFAULT_MATH;
            if (r->status != 0 || !math_ok || r->memory > HR_CUDA_CONV_WS_CAP) continue;
            bool want_det = mode == PICK_DETERMINISTIC && pass < 2;
            bool want_precise = mode != PICK_HEURISTIC && pass < 1;
            if (want_det && r->determinism != HR_CUDNN_DETERMINISTIC) continue;
            if (want_precise && !precise(which, r->algo)) continue;
            size_t ws = 0;
            int math = p->tf32 ? r->mathType : HR_CUDNN_FMA_MATH;
            DNN(d, d->SetConvolutionMathType(p->cd, math));
            st = ws_size(d, p, which, r->algo, &ws);
            if (st != 0 || ws > HR_CUDA_CONV_WS_CAP) continue;
            p->algo[which] = r->algo;
            p->math[which] = math;
            p->ws[which] = ws;
            break;
        }
    if (p->algo[which] < 0) p->err[which] = 9; /* CUDNN_STATUS_NOT_SUPPORTED */
    if (p->algo[which] >= 0 && autotune()) {
        for (int i = 0; i < got && p->ncand[which] < 8; i++) {
            const hr_cudnn_perf *r = &perf[i];
            bool math_ok = p->tf32 || r->mathType == HR_CUDNN_FMA_MATH || r->mathType == HR_CUDNN_DEFAULT_MATH;
            if (r->status != 0 || !math_ok || !precise(which, r->algo)) continue;
            int math = p->tf32 ? r->mathType : HR_CUDNN_FMA_MATH;
            bool dup = false;
            for (int k = 0; k < p->ncand[which]; k++)
                dup |= p->cand[which][k].algo == r->algo && p->cand[which][k].math == math;
            size_t ws = 0;
            if (dup || d->SetConvolutionMathType(p->cd, math) != 0 || ws_size(d, p, which, r->algo, &ws) != 0) continue;
            if (ws > HR_CUDA_CONV_TUNE_WS && !(r->algo == p->algo[which] && math == p->math[which])) continue;
            int k = p->ncand[which]++;
            p->cand[which][k].algo = r->algo, p->cand[which][k].math = math, p->cand[which][k].ws = ws;
        }
        if (p->ncand[which] < 2) p->tuned[which] = true; /* nothing to compare */
    } else {
        p->tuned[which] = true;
    }
    if (verbose()) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        fprintf(stderr, "cuda: conv N=%d C=%d %dx%d K=%d k=%dx%d s=%d p=%d: %s algo %d (math %d, workspace %zu) of", p->N,
                p->C, p->H, p->W, p->K, p->kh, p->kw, p->sh, p->ph, what[which], p->algo[which], p->math[which],
                p->ws[which]);
        for (int i = 0; i < got; i++)
            fprintf(stderr, " %d%s%s", perf[i].algo, perf[i].status ? "!" : "",
                    perf[i].determinism == HR_CUDNN_DETERMINISTIC ? "" : "~");
        fprintf(stderr, "\n");
    }
    return HR_OK;
}

/* The plans for the full chunks and for the last, shorter one (if any). */
static hr_status plans_for(hr_cuda *c, const conv_shape *s, hr_cuda_conv **full, hr_cuda_conv **tail) {
    *full = *tail = NULL;
    hr_status st = conv_new(c, s, s->chunk, full);
    if (!st && s->N % s->chunk) st = conv_new(c, s, s->N % s->chunk, tail);
    return st;
}

static size_t ws_of(hr_cuda *c, hr_cuda_conv *p, int which) {
    if (!p) return 0;
    hr_status st = choose(c, p, which);
    if (st) hr_error_clear();
    if (p->algo[which] < 0) return 0;
    size_t ws = p->ws[which];
    for (int k = 0; k < p->ncand[which]; k++)
        if (!p->tuned[which] && p->cand[which][k].ws > ws) ws = p->cand[which][k].ws;
    return ws;
}

/* Plans for the pieces of a pipelined input (hr_cuda_piece_samples): q
 * samples, and the last piece when shorter. False: no pieces here. */
static bool piece_plans(hr_cuda *c, const conv_shape *s, hr_cuda_conv **pf, hr_cuda_conv **pt, int64_t *q) {
    *pf = *pt = NULL;
    *q = hr_cuda_piece_samples(s->N, s->C * s->H * s->W * (int64_t)sizeof(float));
    if (!*q || s->chunk < s->N) return false;
    conv_shape ps = *s;
    ps.chunk = *q;
    int64_t np = (s->N + *q - 1) / *q, last = s->N - (np - 1) * *q;
    if (conv_new(c, &ps, *q, pf) != HR_OK || (last != *q && conv_new(c, &ps, last, pt) != HR_OK)) {
        hr_error_clear();
        return false;
    }
    return true;
}

size_t hr_cuda_conv_workspace(hr_cuda *c, const hr_graph *g, const hr_node *n) {
    conv_shape s;
    if (!c->dnn || !shape_of(c, g, n, &s)) return 0; /* run() will say why */
    hr_cuda_conv *full, *tail;
    if (plans_for(c, &s, &full, &tail) != HR_OK) {
        hr_error_clear();
        return 0;
    }
    size_t ws = 0;
    hr_cuda_conv *ps[2] = {full, tail};
    bool bias = n->op == HR_OP_CONV2D && n->nin > 2 && n->in[2] >= 0;
    for (int i = 0; i < 2; i++) {
        /* the betas the run will use: see hr_cuda_conv2d and hr_cuda_conv2d_bwd */
        size_t w[4] = {0, 0, 0, 0};
        if (n->op == HR_OP_CONV2D) {
            w[0] = conv_ws(c, ps[i], FWD, bias);
        } else {
            if (n->out[0] >= 0) w[1] = conv_ws(c, ps[i], BWD_DATA, n->accum[0]);
            if (n->out[1] >= 0) {
                w[2] = conv_ws(c, ps[i], BWD_FILTER, n->accum[1] || i == 1);
                if (i == 0 && s.chunk < s.N) w[3] = conv_ws(c, ps[i], BWD_FILTER, true);
            }
        }
        for (int k = 0; k < 4; k++) ws = w[k] > ws ? w[k] : ws;
    }
    /* the forward pass over the batch's input may run in pieces as it arrives */
    hr_cuda_conv *pf, *pt;
    int64_t q;
    if (n->op == HR_OP_CONV2D && g->t[n->in[0]].kind == HR_T_INPUT && piece_plans(c, &s, &pf, &pt, &q)) {
        size_t a = conv_ws(c, pf, FWD, bias), b = conv_ws(c, pt, FWD, bias);
        ws = a > ws ? a : ws;
        ws = b > ws ? b : ws;
    }
    /* the bias gradient's partial sums reuse the scratch once cuDNN is done */
    if (n->op == HR_OP_CONV2D_BWD && n->out[2] >= 0) {
        size_t part = hr_chan_sum_ws(s.N, s.K, s.OH * s.OW);
        ws = part > ws ? part : ws;
    }
    return ws;
}

/* ---- running --------------------------------------------------------------- */
static hr_status ready(hr_cuda *c, const hr_graph *g, const hr_node *n, conv_shape *s, hr_cuda_conv **full,
                       hr_cuda_conv **tail) {
    if (!c->dnn) return hr_error_set(HR_ERR_UNSUPPORTED, "Conv2d on the GPU needs cuDNN: %s", c->dnn_why);
    if (!shape_of(c, g, n, s))
        return hr_error_set(HR_ERR_UNSUPPORTED, "Conv2d: one sample of %s or of its output has more elements than "
                            "one cuDNN call takes (%lld)", g->t[n->in[0]].name, (long long)c->max_elems);
    return plans_for(c, s, full, tail);
}

static hr_status need(hr_cuda *c, hr_cuda_conv *p, int which, size_t have) {
    static const char *what[] = {"forward", "backward-data", "backward-filter"};
    hr_status st = choose(c, p, which);
    if (st) return st;
    if (p->algo[which] < 0)
        return hr_error_set(HR_ERR_DEVICE, "cuDNN has no %s algorithm for this convolution (status %d)", what[which],
                            p->err[which]);
    if (p->ws[which] > have)
        return hr_error_set(HR_ERR_INTERNAL, "cuDNN %s algorithm needs %zu bytes of workspace, the plan gave %zu",
                            what[which], p->ws[which], have);
    return c->dnn->SetConvolutionMathType(p->cd, p->math[which]) == 0
               ? HR_OK
               : hr_error_set(HR_ERR_DEVICE, "cudnnSetConvolutionMathType failed");
}

static size_t ws_bytes(const hr_graph *g, const hr_node *n) {
    return n->ws >= 0 ? (size_t)hr_shape_numel(&g->t[n->ws].shape) : 0;
}

/* One call of algorithm `algo` on the first chunk: a, b are the inputs (x, W;
 * W, dy; x, dy), out the output, written (beta 0). */
static hr_cudnn_status call_algo(hr_cuda_dnn *d, hr_cuda_conv *p, int which, int algo, const void *a, const void *b,
                                 void *out, void *ws, size_t wsz) {
    float one = 1.0f, zero = 0.0f;
    if (which == FWD) return d->Forward(d->h, &one, p->xd, a, p->wd, b, p->cd, algo, ws, wsz, &zero, p->yd, out);
    if (which == BWD_DATA)
        return d->BackwardData(d->h, &one, p->wd, a, p->yd, b, p->cd, algo, ws, wsz, &zero, p->xd, out);
    return d->BackwardFilter(d->h, &one, p->xd, a, p->yd, b, p->cd, algo, ws, wsz, &zero, p->wd, out);
}

/* Times each candidate (one call to warm up, then the median of three) on the
 * real buffers, before the node's real work overwrites `out`, and keeps the
 * fastest. Only where the node does not accumulate into `out`. */
static hr_status tune(hr_cuda *c, hr_cuda_conv *p, int which, const void *a, const void *b, void *out, void *ws,
                      size_t wsz) {
    hr_cuda_dnn *d = c->dnn;
    if (p->tuned[which] || p->algo[which] < 0) return HR_OK;
    p->tuned[which] = true;
    for (int i = 0; i < 2; i++)
        if (!d->ev[i]) HR_CU(cudaEventCreate(&d->ev[i]));
    float best = -1, times[8];
    int pick = -1;
    for (int k = 0; k < p->ncand[which]; k++) {
        times[k] = -1;
        if (p->cand[which][k].ws > wsz || d->SetConvolutionMathType(p->cd, p->cand[which][k].math) != 0) continue;
        int algo = p->cand[which][k].algo;
        if (call_algo(d, p, which, algo, a, b, out, ws, wsz) != 0) continue;
        float t[3];
        bool ok = true;
        for (int r = 0; r < 3 && ok; r++) {
            HR_CU(cudaEventRecord(d->ev[0], c->stream));
            ok = call_algo(d, p, which, algo, a, b, out, ws, wsz) == 0;
            HR_CU(cudaEventRecord(d->ev[1], c->stream));
            HR_CU(cudaEventSynchronize(d->ev[1]));
            HR_CU(cudaEventElapsedTime(&t[r], d->ev[0], d->ev[1]));
        }
        if (!ok) continue;
        float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
        float med = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
        times[k] = med;
        if (pick < 0 || med < best) best = med, pick = k;
    }
    HR_CU(cudaGetLastError());
    if (pick >= 0) {
        p->algo[which] = p->cand[which][pick].algo;
        p->math[which] = p->cand[which][pick].math;
        p->ws[which] = p->cand[which][pick].ws;
    }
    if (verbose()) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        fprintf(stderr, "cuda: conv N=%d C=%d %dx%d K=%d: %s tuned: algo %d of", p->N, p->C, p->H, p->W, p->K,
                what[which], p->algo[which]);
        for (int k = 0; k < p->ncand[which]; k++)
            fprintf(stderr, " %d:%.3fms", p->cand[which][k].algo, (double)times[k]);
        fprintf(stderr, "\n");
    }
    return HR_OK;
}

/* Times the graph op's candidates on the real buffers (before the node's real
 * work overwrites `out`) and keeps the fastest. */
static hr_status gtune(hr_cuda *c, hr_cudnn_op *op, const void *a, const void *b, void *out, void *ws, size_t wsz) {
    hr_cuda_dnn *d = c->dnn;
    for (int i = 0; i < 2; i++)
        if (!d->ev[i]) HR_CU(cudaEventCreate(&d->ev[i]));
    return hr_cudnn_op_tune(d->G, op, c->stream, d->ev, a, b, out, ws, wsz, verbose());
}

/* in {x, W, b}, out {y}: y = b (broadcast), then y = conv(x, W) + y */
hr_status hr_cuda_conv2d(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    conv_shape s;
    hr_cuda_conv *full, *tail;
    hr_status st = ready(c, g, n, &s, &full, &tail);
    if (st) return st;
    hr_cuda_dnn *d = c->dnn;
    const float *x = ptr[n->in[0]], *w = ptr[n->in[1]];
    const float *b = n->nin > 2 && n->in[2] >= 0 ? ptr[n->in[2]] : NULL;
    float *y = ptr[n->out[0]];
    void *ws = n->ws >= 0 ? ptr[n->ws] : NULL;
    size_t wsz = ws_bytes(g, n);
    float one = 1.0f, beta = b ? 1.0f : 0.0f;
    hr_cudnn_op *gop = gop_for(c, full, FWD, b != NULL);
    if (gop && !hr_cudnn_op_tuned(gop) && (st = gtune(c, gop, x, w, y, ws, wsz)) != HR_OK) return st;
    if (!gop && !full->tuned[FWD] && (st = tune(c, full, FWD, x, w, y, ws, wsz)) != HR_OK) return st;
    if (b) HR_CU(hrk_bias_fill(c->stream, b, y, s.N, s.K, s.OH * s.OW));
    for (int64_t n0 = 0; n0 < s.N; n0 += s.chunk) {
        hr_cuda_conv *p = s.N - n0 >= s.chunk ? full : tail;
        hr_cudnn_op *op = gop_for(c, p, FWD, b != NULL);
        if (op) {
            st = hr_cudnn_op_run(d->G, op, x + n0 * s.C * s.H * s.W, w, y + n0 * s.K * s.OH * s.OW, ws, wsz);
            if (st) return st;
            continue;
        }
        if ((st = need(c, p, FWD, wsz)) != HR_OK) return st;
        DNN(d, d->Forward(d->h, &one, p->xd, x + n0 * s.C * s.H * s.W, p->wd, w, p->cd, p->algo[FWD], ws, wsz, &beta,
                          p->yd, y + n0 * s.K * s.OH * s.OW));
    }
    return HR_OK;
}

/* The same with the batch's input arriving in pieces (cuda_backend.c's
 * upload): each piece's samples go through cuDNN as soon as the piece is in.
 * The first run settles the upload and times the piece plans; where the
 * pieces or their plans are missing, the whole batch runs at once. */
hr_status hr_cuda_conv2d_pieces(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    conv_shape s;
    hr_cuda_conv *full, *tail, *pf, *pt;
    int64_t q;
    hr_status st = ready(c, g, n, &s, &full, &tail);
    if (st) return st;
    bool bias = n->nin > 2 && n->in[2] >= 0;
    hr_cudnn_op *of = NULL, *ot = NULL;
    int np = c->npieces;
    bool ok = piece_plans(c, &s, &pf, &pt, &q) && np == (int)((s.N + q - 1) / q) && c->piece_upto[np - 1] == s.N &&
              (of = gop_for(c, pf, FWD, bias)) != NULL && (!pt || (ot = gop_for(c, pt, FWD, bias)) != NULL);
    for (int k = 0; ok && k < np; k++) ok = c->piece_upto[k] == (k + 1 < np ? (k + 1) * q : s.N);
    if (!ok) {
        if ((st = hr_cuda_settle(c)) != HR_OK) return st;
        return hr_cuda_conv2d(c, g, n, ptr);
    }
    hr_cuda_dnn *d = c->dnn;
    const float *x = ptr[n->in[0]], *w = ptr[n->in[1]];
    float *y = ptr[n->out[0]];
    void *ws = n->ws >= 0 ? ptr[n->ws] : NULL;
    size_t wsz = ws_bytes(g, n);
    int64_t xs = s.C * s.H * s.W, ys = s.K * s.OH * s.OW;
    bool waiting = true;
    if (!hr_cudnn_op_tuned(of) || (ot && !hr_cudnn_op_tuned(ot))) { /* timing needs the samples in */
        if ((st = hr_cuda_settle(c)) != HR_OK) return st;
        waiting = false;
        if (!hr_cudnn_op_tuned(of) && (st = gtune(c, of, x, w, y, ws, wsz)) != HR_OK) return st;
        if (ot && !hr_cudnn_op_tuned(ot) &&
            (st = gtune(c, ot, x + (s.N - pt->N) * xs, w, y + (s.N - pt->N) * ys, ws, wsz)) != HR_OK)
            return st;
    }
    if (bias) HR_CU(hrk_bias_fill(c->stream, ptr[n->in[2]], y, s.N, s.K, s.OH * s.OW));
    for (int k = 0; k < np; k++) {
        int64_t n0 = k * q, cnt = c->piece_upto[k] - n0;
        if (waiting) {
            if ((st = hr_cuda_stage_upto(c, k)) != HR_OK) return st;
            HR_CU(cudaStreamWaitEvent(c->stream, c->piece_ev[k], 0));
        }
        st = hr_cudnn_op_run(d->G, cnt == q ? of : ot, x + n0 * xs, w, y + n0 * ys, ws, wsz);
        if (st) return st;
    }
    return hr_cuda_settle(c);
}

/* in {x, W, dy}, out {dx, dW, db} */
hr_status hr_cuda_conv2d_bwd(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    conv_shape s;
    hr_cuda_conv *full, *tail;
    hr_status st = ready(c, g, n, &s, &full, &tail);
    if (st) return st;
    hr_cuda_dnn *d = c->dnn;
    const float *x = ptr[n->in[0]], *w = ptr[n->in[1]], *dy = ptr[n->in[2]];
    float *dx = n->out[0] >= 0 ? ptr[n->out[0]] : NULL, *dw = n->out[1] >= 0 ? ptr[n->out[1]] : NULL;
    float *db = n->out[2] >= 0 ? ptr[n->out[2]] : NULL;
    void *ws = n->ws >= 0 ? ptr[n->ws] : NULL;
    size_t wsz = ws_bytes(g, n);
    float one = 1.0f, zero = 0.0f;
    /* timing overwrites the output: only where the node does not add into it */
    hr_cudnn_op *gd = dx ? gop_for(c, full, BWD_DATA, n->accum[0]) : NULL;
    hr_cudnn_op *gf = dw ? gop_for(c, full, BWD_FILTER, n->accum[1]) : NULL;
    if (gd && !n->accum[0] && !hr_cudnn_op_tuned(gd) && (st = gtune(c, gd, w, dy, dx, ws, wsz)) != HR_OK) return st;
    if (gf && !n->accum[1] && !hr_cudnn_op_tuned(gf) && (st = gtune(c, gf, x, dy, dw, ws, wsz)) != HR_OK) return st;
    if (dx && !gd && !n->accum[0] && !full->tuned[BWD_DATA] &&
        (st = tune(c, full, BWD_DATA, w, dy, dx, ws, wsz)) != HR_OK)
        return st;
    if (dw && !gf && !n->accum[1] && !full->tuned[BWD_FILTER] &&
        (st = tune(c, full, BWD_FILTER, x, dy, dw, ws, wsz)) != HR_OK)
        return st;
    for (int64_t n0 = 0; n0 < s.N; n0 += s.chunk) {
        hr_cuda_conv *p = s.N - n0 >= s.chunk ? full : tail;
        const float *dyc = dy + n0 * s.K * s.OH * s.OW;
        hr_cudnn_op *od = dx ? gop_for(c, p, BWD_DATA, n->accum[0]) : NULL;
        hr_cudnn_op *of = dw ? gop_for(c, p, BWD_FILTER, n0 > 0 || n->accum[1]) : NULL;
        if (od) {
            if ((st = hr_cudnn_op_run(d->G, od, w, dyc, dx + n0 * s.C * s.H * s.W, ws, wsz)) != HR_OK) return st;
        } else if (dx) {
            if ((st = need(c, p, BWD_DATA, wsz)) != HR_OK) return st;
            DNN(d, d->BackwardData(d->h, &one, p->wd, w, p->yd, dyc, p->cd, p->algo[BWD_DATA], ws, wsz,
                                   n->accum[0] ? &one : &zero, p->xd, dx + n0 * s.C * s.H * s.W));
        }
        if (of) {
            if ((st = hr_cudnn_op_run(d->G, of, x + n0 * s.C * s.H * s.W, dyc, dw, ws, wsz)) != HR_OK) return st;
        } else if (dw) {
            if ((st = need(c, p, BWD_FILTER, wsz)) != HR_OK) return st;
            bool add = n0 > 0 || n->accum[1];
            DNN(d, d->BackwardFilter(d->h, &one, p->xd, x + n0 * s.C * s.H * s.W, p->yd, dyc, p->cd,
                                     p->algo[BWD_FILTER], ws, wsz, add ? &one : &zero, p->wd, dw));
        }
    }
    if (db) {
        bool fits = ws && wsz >= hr_chan_sum_ws(s.N, s.K, s.OH * s.OW);
        HR_CU(hrk_channel_sum_ws(c->stream, dy, db, s.N, s.K, s.OH * s.OW, n->accum[2], fits ? ws : NULL));
    }
    return HR_OK;
}
