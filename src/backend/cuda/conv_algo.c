/* conv_algo.c — which cuDNN engine or algorithm runs each convolution plan
 * (HR_CUDNN_ALGO), and the autotuner that times candidates on real buffers. */

/* HR_CUDNN_ALGO filters: precise, deterministic, heuristic; with
 * HR_CUDNN_AUTOTUNE the precise candidates are timed once at the first run;
 * HR_CUDA_VERBOSE prints what was considered and timed. All come from c->opt. */
#include "backend/cuda/conv.h"

#include <string.h>

/* FFT and Winograd algorithms trade FP32 accuracy for speed (errors near
 * 1e-5 instead of 1e-7), which Adam then amplifies where a gradient is near
 * zero; the GEMM-like ones add the same products as the CPU does. */
static bool precise(int which, int algo) {
    if (which == FWD) return algo <= 3;            /* implicit GEMM, precomputed, GEMM, direct */
    if (which == BWD_DATA) return algo <= 1;       /* ALGO_0, ALGO_1 */
    return algo == 0 || algo == 1 || algo == 3;    /* ALGO_0, ALGO_1, ALGO_3 */
}

/* Which algorithms come first (HR_CUDNN_ALGO, c->opt.cudnn_algo):
 *   precise        (default) cuDNN's heuristic order among the GEMM-like
 *                  algorithms, deterministic or not, then any;
 *   deterministic  precise and deterministic, then deterministic, then any:
 *                  a rerun gives the same bits (slower backward passes);
 *   heuristic      cuDNN's heuristic first choice, whatever it is;
 *   fastest        every algorithm, FFT and Winograd included, timed:
 *                  PyTorch's rule under cudnn.benchmark. */
static int pick_mode(const hr_cuda *c) { return c->opt.cudnn_algo; }
static bool precise_only(const hr_cuda *c) {
    return pick_mode(c) == HR_ALGO_PRECISE || pick_mode(c) == HR_ALGO_DETERMINISTIC;
}

/* In the precise mode, the GEMM-like candidates are also timed once on the
 * real buffers at the first run, and the fastest is kept: the heuristics'
 * ranking is often wrong for FP32. Their workspace, up to
 * HR_CUDA_CONV_TUNE_WS, is planned. HR_CUDNN_AUTOTUNE=0 keeps the
 * heuristics' choice. */
#define HR_CUDA_CONV_TUNE_WS ((size_t)64 << 20)
static bool autotune(const hr_cuda *c) {
    return (pick_mode(c) == HR_ALGO_PRECISE || pick_mode(c) == HR_ALGO_FASTEST) && c->opt.cudnn_autotune;
}
/* The largest workspace an algorithm may have (ws_cap), and a timed
 * candidate (tune_ws). FFT and Winograd want far more than the GEMM-like
 * algorithms (ResNet-18 at batch 1024 on an H200: 80.7 ms a step with 4 GiB
 * allowed, 123.5 with 1 GiB, 151.6 with 256 MiB); the fastest mode lets them
 * have HR_CUDNN_FASTEST_WS_MIB, else a sixteenth of the device's memory up
 * to 4 GiB, all of it planned (the candidates' largest: the arena is planned
 * before they are timed). */
static size_t ws_cap(const hr_cuda *c) {
    if (pick_mode(c) != HR_ALGO_FASTEST) return HR_CUDA_CONV_WS_CAP;
    if (c->opt.cudnn_fast_ws_mib > 0) return (size_t)c->opt.cudnn_fast_ws_mib << 20;
    size_t cap = c->total_mem / 16, most = (size_t)4 << 30;
    return cap > most ? most : cap > HR_CUDA_CONV_WS_CAP ? cap : HR_CUDA_CONV_WS_CAP;
}
static size_t tune_ws(const hr_cuda *c) {
    return pick_mode(c) == HR_ALGO_FASTEST ? ws_cap(c) : HR_CUDA_CONV_TUNE_WS;
}

/* The key under which the fastest mode keeps which API won for p's
 * convolution `which`. */
static void api_key(const hr_cuda *c, const hr_cuda_conv *p, int which, char *key, size_t n) {
    hr_conv_cache_key(c, p, which, false, false, key, n);
    size_t len = strlen(key);
    snprintf(key + len, n - len, " api");
}

/* The fastest mode weighs both APIs where the legacy one may win: FP32 (its
 * FFT and Winograd algorithms, which cuDNN's graph heuristics do not offer
 * for FP32 here, against the graph engines, faster on depthwise and small
 * convolutions) and half forward and backward-data (see below). */
static bool both_apis(const hr_cuda *c, const hr_cuda_conv *p, int which) {
    return pick_mode(c) == HR_ALGO_FASTEST && autotune(c) &&
           (p->dt == HR_F32 || (which != BWD_FILTER && c->opt.cudnn_half_legacy));
}

/* Both APIs are planned and neither has won yet. */
static bool undecided(const hr_cuda_conv *p, int which) {
    return p->dual[which] && p->api[which] == 0 && (p->gop[which][0] || p->gop[which][1]);
}

/* The modes of pick_mode() map to engine filters:
 * precise: no FFT or Winograd, the candidates timed (autotune) or cuDNN's
 * first; deterministic: also no non-deterministic engine, cuDNN's first
 * (timing could pick another engine in another run); heuristic: cuDNN's
 * first, whatever it is; fastest: every engine, timed, and (both_apis) the
 * legacy algorithms timed against them. TF32 engines only when allowed; half
 * data takes tensor-core engines, none that reduces in lower precision. */
hr_cudnn_op *hr_conv_algo_graph_op(hr_cuda *c, hr_cuda_conv *p, int which, bool add) {
    hr_cuda_dnn *d = c->dnn;
    if (!d->G) return NULL;
    int b = add ? 1 : 0;
    if (p->gtried[which][b]) return p->gop[which][b];
    p->gtried[which][b] = true;
    if (both_apis(c, p, which)) {
        char key[HR_CONV_KEY];
        int64_t api, unused;
        size_t w;
        if (!p->dual[which]) {
            p->dual[which] = true;
            api_key(c, p, which, key, sizeof key);
            if (hr_conv_cache_get(c, key, &api, &unused, &w) && (api == 1 || api == 2)) p->api[which] = (int8_t)api;
        }
        if (p->api[which] == 2) {
            snprintf(p->gwhy[which][b], sizeof p->gwhy[which][b], "fastest: a legacy algorithm was faster");
            return NULL;
        }
    } else if (p->dt != HR_F32 && which != BWD_FILTER && c->opt.cudnn_half_legacy) {
        /* Half data: the graph engines that keep FP32 accumulation were slow
         * for forward and backward-data on the H100 (cuDNN 9.19, PyTorch's
         * copy: deep_cnn at batch 2048 took 107 ms a step with them, 57 ms
         * with the legacy algorithms, timed the same way); the weight
         * gradient stays on the graph API (the legacy one's half weight
         * gradients were not FP32-accurate). */
        snprintf(p->gwhy[which][b], sizeof p->gwhy[which][b], "half data");
        return NULL;
    } else if (p->dt == HR_F32 && pick_mode(c) == HR_ALGO_FASTEST) {
        /* FP32 in the fastest mode, untimed: the legacy API, whose list has
         * FFT and Winograd */
        snprintf(p->gwhy[which][b], sizeof p->gwhy[which][b], "fastest: FFT and Winograd");
        return NULL;
    }
    int mode = pick_mode(c);
    unsigned flags = p->dt != HR_F32 ? HR_ENGINE_TENSOR_CORE : p->tf32 ? HR_ENGINE_ALLOW_TF32 : 0;
    if (p->dt != HR_F32 && c->opt.cudnn_half_reduction) flags |= HR_ENGINE_HALF_REDUCTION;
    if (precise_only(c)) flags |= HR_ENGINE_PRECISE;
    if (mode == HR_ALGO_DETERMINISTIC) flags |= HR_ENGINE_DETERMINISTIC;
    if (!autotune(c)) flags |= HR_ENGINE_FIRST_ONLY;
    hr_conv_dims dims = {.n = p->N, .c = p->C, .h = p->H, .w = p->W, .k = p->K, .r = p->kh, .s = p->kw,
                         .oh = p->OH, .ow = p->OW, .pad = {p->ph, p->pw}, .stride = {p->sh, p->sw},
                         .dil = {p->dh, p->dw}, .groups = p->G,
                         .align = p->align, .dtype = hr_conv_dnn_type(p->dt)};
    size_t cap = autotune(c) ? tune_ws(c) : ws_cap(c);
    p->gop[which][b] = hr_cudnn_op_new(d->G, &dims, which, add ? 1.0f : 0.0f, flags, cap, 16, p->gwhy[which][b],
                                       sizeof p->gwhy[which][b]);
    /* an earlier run's timed choice: planned alone, nothing timed */
    char key[HR_CONV_KEY];
    int64_t engine, k;
    size_t w;
    if (p->gop[which][b] && !hr_cudnn_op_tuned(p->gop[which][b])) {
        hr_conv_cache_key(c, p, which, add, true, key, sizeof key);
        if (hr_conv_cache_get(c, key, &engine, &k, &w)) hr_cudnn_op_take(d->G, p->gop[which][b], engine, k, w);
    }
    if (c->opt.cuda_verbose) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        char desc[160];
        if (p->gop[which][b])
            hr_cudnn_op_describe(p->gop[which][b], desc, sizeof desc);
        else
            snprintf(desc, sizeof desc, "none (%s): legacy algorithms", p->gwhy[which][b]);
        fprintf(stderr, "cuda: conv %s N=%d C=%d %dx%d K=%d k=%dx%d s=%d p=%d d=%d g=%d: %s beta %d: %s\n",
                hr_dtype_name(p->dt), p->N, p->C, p->H, p->W, p->K, p->kh, p->kw, p->sh, p->ph, p->dh, p->G, what[which],
                b, desc);
    }
    return p->gop[which][b];
}

void hr_conv_algo_untimed(const hr_cuda *c, int *untimed, int *total) {
    *untimed = *total = 0;
    for (int i = 0; i < c->nconv; i++) {
        const hr_cuda_conv *p = c->conv[i];
        for (int w = 0; w < 3; w++) {
            bool graph = false;
            for (int b = 0; b < 2; b++)
                if (p->gop[w][b]) {
                    graph = true;
                    (*total)++;
                    *untimed += !hr_cudnn_op_tuned(p->gop[w][b]) || undecided(p, w);
                }
            if (!graph && p->algo[w] >= 0) {
                (*total)++;
                *untimed += !p->tuned[w];
            }
        }
    }
}

/* ---- the legacy API's algorithms ---------------------------------------------- */
static hr_cudnn_status ws_size(hr_cuda_dnn *d, hr_cuda_conv *p, int which, int algo, size_t *ws) {
    if (which == FWD) return d->GetFwdWs(d->h, p->xd, p->wd, p->cd, p->yd, algo, ws);
    if (which == BWD_DATA) return d->GetBwdDataWs(d->h, p->wd, p->yd, p->cd, p->xd, algo, ws);
    return d->GetBwdFilterWs(d->h, p->xd, p->yd, p->cd, p->wd, algo, ws);
}

/* The first algorithm of cuDNN's heuristic ranking that succeeds, keeps to
 * FP32 arithmetic unless TF32 is allowed (half data: tensor cores, FP32
 * accumulation), and whose workspace fits the cap, in the preference order
 * of pick_mode(). */
static hr_status choose(hr_cuda *c, hr_cuda_conv *p, int which) {
    hr_cuda_dnn *d = c->dnn;
    if (p->algo[which] >= 0 || p->err[which]) return HR_OK;
    hr_cudnn_perf perf[8];
    int got = 0;
    memset(perf, 0, sizeof perf);
    int ask = p->dt != HR_F32 ? HR_CUDNN_TENSOR_OP_MATH : p->tf32 ? HR_CUDNN_DEFAULT_MATH : HR_CUDNN_FMA_MATH;
    DNN(d, d->SetConvolutionMathType(p->cd, ask));
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
    int mode = pick_mode(c);
    bool tc = hr_conv_tensor_ok(p); /* tensor-core math: TF32 allowed, or half data */
    for (int pass = 0; pass < 3 && p->algo[which] < 0; pass++)
        for (int i = 0; i < got; i++) {
            const hr_cudnn_perf *r = &perf[i];
            bool math_ok = tc || r->mathType == HR_CUDNN_FMA_MATH || r->mathType == HR_CUDNN_DEFAULT_MATH;
            if (r->status != 0 || !math_ok || r->memory > ws_cap(c)) continue;
            bool want_det = mode == HR_ALGO_DETERMINISTIC && pass < 2;
            bool want_precise = precise_only(c) && pass < 1;
            if (want_det && r->determinism != HR_CUDNN_DETERMINISTIC) continue;
            if (want_precise && !precise(which, r->algo)) continue;
            size_t ws = 0;
            int math = tc ? r->mathType : HR_CUDNN_FMA_MATH;
            DNN(d, d->SetConvolutionMathType(p->cd, math));
            st = ws_size(d, p, which, r->algo, &ws);
            if (st != 0 || ws > ws_cap(c)) continue;
            p->algo[which] = r->algo;
            p->math[which] = math;
            p->ws[which] = ws;
            break;
        }
    if (p->algo[which] < 0) p->err[which] = 9; /* CUDNN_STATUS_NOT_SUPPORTED */
    if (p->algo[which] >= 0 && autotune(c)) {
        for (int i = 0; i < got && p->ncand[which] < 8; i++) {
            const hr_cudnn_perf *r = &perf[i];
            bool math_ok = tc || r->mathType == HR_CUDNN_FMA_MATH || r->mathType == HR_CUDNN_DEFAULT_MATH;
            if (r->status != 0 || !math_ok || (precise_only(c) && !precise(which, r->algo))) continue;
            int math = tc ? r->mathType : HR_CUDNN_FMA_MATH;
            bool dup = false;
            for (int k = 0; k < p->ncand[which]; k++)
                dup |= p->cand[which][k].algo == r->algo && p->cand[which][k].math == math;
            size_t ws = 0;
            if (dup || d->SetConvolutionMathType(p->cd, math) != 0 || ws_size(d, p, which, r->algo, &ws) != 0) continue;
            if (ws > tune_ws(c) && !(r->algo == p->algo[which] && math == p->math[which])) continue;
            int k = p->ncand[which]++;
            p->cand[which][k].algo = r->algo, p->cand[which][k].math = math, p->cand[which][k].ws = ws;
        }
        if (p->ncand[which] < 2) p->tuned[which] = true; /* nothing to compare */
        /* an earlier run's timed choice, if still a candidate: planned alone, nothing timed */
        char key[HR_CONV_KEY];
        int64_t ca, cm;
        size_t cw;
        hr_conv_cache_key(c, p, which, false, false, key, sizeof key);
        bool known = !p->tuned[which] && !undecided(p, which) && hr_conv_cache_get(c, key, &ca, &cm, &cw);
        for (int k = 0; known && k < p->ncand[which]; k++)
            if (p->cand[which][k].algo == ca && p->cand[which][k].math == cm && p->cand[which][k].ws == cw) {
                p->algo[which] = (int)ca, p->math[which] = (int)cm, p->ws[which] = cw;
                p->tuned[which] = true;
                break;
            }
    } else {
        p->tuned[which] = true;
    }
    if (c->opt.cuda_verbose) {
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

/* The chosen algorithm's workspace, or its candidates' largest until timed. */
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

size_t hr_conv_algo_workspace(hr_cuda *c, hr_cuda_conv *p, int which, bool add) {
    if (!p) return 0;
    hr_cudnn_op *op = hr_conv_algo_graph_op(c, p, which, add);
    if (!op) return ws_of(c, p, which);
    size_t ws = hr_cudnn_op_workspace(op);
    if (undecided(p, which)) {
        size_t legacy = ws_of(c, p, which);
        ws = legacy > ws ? legacy : ws;
    }
    return ws;
}

hr_status hr_conv_algo_ready(hr_cuda *c, hr_cuda_conv *p, int which, size_t have) {
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

/* ---- autotune --------------------------------------------------------------- */
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

/* One call of an algorithm (hr_cuda_time_runs' launcher). */
typedef struct {
    hr_cuda_dnn *d;
    hr_cuda_conv *p;
    int which, algo;
    const void *a, *b;
    void *out, *ws;
    size_t wsz;
} algo_run;

static int run_algo(void *arg) {
    algo_run *r = arg;
    return call_algo(r->d, r->p, r->which, r->algo, r->a, r->b, r->out, r->ws, r->wsz) == 0 ? 0 : -1;
}

/* Times each candidate (hr_cuda_time_runs: batches of runs, the median) on the
 * real buffers, before the node's real work overwrites `out`, and keeps the
 * fastest. Only where the node does not accumulate into `out`. */
/* Timing waits for the device, which a step being captured as a graph
 * cannot: that step runs node by node and times them, and the next is
 * captured (exec/step.c). */
static hr_status untimed_in_capture(void) {
    return hr_error_set(HR_ERR_DEVICE, "a convolution's engines are not timed yet (they are timed on a step run node "
                        "by node)");
}

static hr_status events(hr_cuda_dnn *d) {
    for (int i = 0; i < 2; i++)
        if (!d->ev[i]) HR_CU(cudaEventCreate(&d->ev[i]));
    return HR_OK;
}

/* Times the legacy candidates (the chosen algorithm alone when there are
 * none), takes the fastest, and gives its median in *best (-1: none ran). */
static hr_status time_legacy(hr_cuda *c, hr_cuda_conv *p, int which, const void *a, const void *b, void *out,
                             void *ws, size_t wsz, float *best) {
    hr_cuda_dnn *d = c->dnn;
    hr_status st = events(d);
    if (st) return st;
    int n = p->ncand[which];
    if (n == 0) { /* no candidates kept: the chosen one alone, so that the fastest mode can compare it */
        p->cand[which][0].algo = p->algo[which], p->cand[which][0].math = p->math[which];
        p->cand[which][0].ws = p->ws[which];
        n = 1;
    }
    float times[8];
    int pick = -1;
    *best = -1;
    for (int k = 0; k < n; k++) {
        times[k] = -1;
        if (p->cand[which][k].ws > wsz || d->SetConvolutionMathType(p->cd, p->cand[which][k].math) != 0) continue;
        algo_run r = {d, p, which, p->cand[which][k].algo, a, b, out, ws, wsz};
        float med;
        if (!hr_cuda_time_runs(c->stream, d->ev, run_algo, &r, &med)) return HR_ERR_DEVICE;
        if (med < 0) continue;
        times[k] = med;
        if (pick < 0 || med < *best) *best = med, pick = k;
    }
    HR_CU(cudaGetLastError());
    if (pick >= 0) {
        p->algo[which] = p->cand[which][pick].algo;
        p->math[which] = p->cand[which][pick].math;
        p->ws[which] = p->cand[which][pick].ws;
        char key[HR_CONV_KEY];
        hr_conv_cache_key(c, p, which, false, false, key, sizeof key);
        hr_conv_cache_put(c, key, p->algo[which], p->math[which], p->ws[which]);
    }
    if (c->opt.cuda_verbose) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        fprintf(stderr, "cuda: conv N=%d C=%d %dx%d K=%d: %s tuned: algo %d of", p->N, p->C, p->H, p->W, p->K,
                what[which], p->algo[which]);
        for (int k = 0; k < n; k++) fprintf(stderr, " %d:%.3fms", p->cand[which][k].algo, (double)times[k]);
        fprintf(stderr, "\n");
    }
    return HR_OK;
}

hr_status hr_conv_algo_tune(hr_cuda *c, hr_cuda_conv *p, int which, const void *a, const void *b, void *out, void *ws,
                            size_t wsz) {
    if (p->tuned[which] || p->algo[which] < 0) return HR_OK;
    if (c->capturing) return untimed_in_capture();
    p->tuned[which] = true;
    float best;
    return time_legacy(c, p, which, a, b, out, ws, wsz, &best);
}

/* The fastest mode's choice between the APIs, once the graph op is timed:
 * the legacy algorithms are timed on the same buffers, and where one of them
 * is faster the graph ops of `which` (both betas) are freed. */
static hr_status decide_api(hr_cuda *c, hr_cuda_conv *p, int which, hr_cudnn_op *op, const void *a, const void *b,
                            void *out, void *ws, size_t wsz) {
    hr_cuda_dnn *d = c->dnn;
    float g = hr_cudnn_op_ms(op), l = -1;
    hr_status st = HR_OK;
    if (g < 0) st = hr_cudnn_op_time(d->G, op, c->stream, d->ev, a, b, out, ws, wsz, &g);
    if (!st && choose(c, p, which) == HR_OK && p->algo[which] >= 0) {
        p->tuned[which] = true;
        st = time_legacy(c, p, which, a, b, out, ws, wsz, &l);
    }
    if (st) return st;
    p->api[which] = l >= 0 && (g < 0 || l < g) ? 2 : 1;
    char key[HR_CONV_KEY];
    api_key(c, p, which, key, sizeof key);
    hr_conv_cache_put(c, key, p->api[which], 0, 0);
    if (c->opt.cuda_verbose) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        fprintf(stderr, "cuda: conv %s N=%d C=%d %dx%d K=%d k=%dx%d g=%d: %s: graph %.3f ms, legacy %.3f ms: %s\n",
                hr_dtype_name(p->dt), p->N, p->C, p->H, p->W, p->K, p->kh, p->kw, p->G, what[which], (double)g,
                (double)l, p->api[which] == 2 ? "legacy" : "graph");
    }
    if (p->api[which] == 2)
        for (int k = 0; k < 2; k++) {
            hr_cudnn_op_free(d->G, p->gop[which][k]);
            p->gop[which][k] = NULL;
            p->gtried[which][k] = true;
            snprintf(p->gwhy[which][k], sizeof p->gwhy[which][k], "fastest: a legacy algorithm was faster");
        }
    return HR_OK;
}

bool hr_conv_algo_op_timed(const hr_cuda_conv *p, int which, bool add) {
    const hr_cudnn_op *op = p->gop[which][add ? 1 : 0];
    return op && hr_cudnn_op_tuned(op) && !undecided(p, which);
}

/* Times the graph op's candidates on the real buffers (before the node's real
 * work overwrites `out`) and keeps the fastest; in the fastest mode's dual
 * case, then against the legacy algorithms. */
hr_status hr_conv_algo_tune_op(hr_cuda *c, hr_cuda_conv *p, int which, bool add, const void *a, const void *b,
                               void *out, void *ws, size_t wsz) {
    hr_cuda_dnn *d = c->dnn;
    hr_cudnn_op *op = p->gop[which][add ? 1 : 0];
    bool decide = op && undecided(p, which);
    if (!op || (hr_cudnn_op_tuned(op) && !decide)) return HR_OK;
    if (c->capturing) return untimed_in_capture();
    hr_status st = events(d);
    if (st) return st;
    if (!hr_cudnn_op_tuned(op)) {
        st = hr_cudnn_op_tune(d->G, op, c->stream, d->ev, a, b, out, ws, wsz, c->opt.cuda_verbose);
        if (st) return st;
        char key[HR_CONV_KEY];
        int64_t engine, k;
        size_t w;
        hr_cudnn_op_choice(op, &engine, &k, &w);
        hr_conv_cache_key(c, p, which, add, true, key, sizeof key);
        hr_conv_cache_put(c, key, engine, k, w);
    }
    return decide ? decide_api(c, p, which, op, a, b, out, ws, wsz) : HR_OK;
}
