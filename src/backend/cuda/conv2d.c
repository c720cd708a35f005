/* conv2d.c — Conv2d through cuDNN: plans by shape, made while the program is
 * planned (their workspace known before anything runs), forward and backward. */

/* Each convolution (forward, backward data, backward filter) of each shape
 * gets one plan; conv_algo.c chooses the graph API's engine or the legacy
 * API's algorithm that runs it; cudnn_load.c found the library.
 *
 * Mixed precision: x, W (the weight's half copy), y, dy, dx in the node's dt
 * (BF16, F16), FP32 arithmetic. cuDNN writes dW in the type of x and dy, so a
 * half node's dW goes to the head of its workspace in dt and is added into
 * the F32 gradient (hrk_cast) after each call; the bias is filled into y in
 * dt and the convolution added to it (beta 1). */
#include "backend/cuda/conv.h"

#include <limits.h>

/* ---- shapes and plans ------------------------------------------------------ */
typedef struct {
    int64_t N, C, H, W, K, OH, OW;
    int kh, kw, sh, sw, ph, pw;
    int G, dh, dw; /* groups, dilation */
    int64_t chunk; /* samples per cuDNN call */
    hr_dtype dt;
} conv_shape;

/* p + k elements of type t */
static const void *at(const void *p, int64_t k, hr_dtype t) {
    return (const char *)p + k * (int64_t)hr_dtype_size(t);
}

/* 0 (args made before groups and dilation existed): 1 */
static int one_if_unset(int v) { return v > 0 ? v : 1; }

/* The weight's elements: K x C/groups x kh x kw. */
static int64_t w_numel(const hr_conv_args *v) { return v->K * (v->C / one_if_unset(v->groups)) * v->kh * v->kw; }

/* A half node's dW in dt at the head of the workspace, cuDNN's scratch after
 * it (256-byte aligned); F32: none. */
static size_t dw_half_bytes(const hr_conv_args *v, hr_dtype dt) {
    if (dt == HR_F32 || !v->dw) return 0;
    return hr_align_up((size_t)w_numel(v) * hr_dtype_size(dt), HR_ALIGN);
}

static bool shape_of(const hr_cuda *c, const hr_conv_args *v, hr_dtype dt, conv_shape *s) {
    s->dt = dt;
    s->N = v->N, s->C = v->C, s->H = v->H, s->W = v->W, s->K = v->K, s->OH = v->OH, s->OW = v->OW;
    s->kh = v->kh, s->kw = v->kw, s->sh = v->sh, s->sw = v->sw, s->ph = v->ph, s->pw = v->pw;
    s->G = one_if_unset(v->groups), s->dh = one_if_unset(v->dil_h), s->dw = one_if_unset(v->dil_w);
    int64_t per = s->C * s->H * s->W, out = s->K * s->OH * s->OW;
    if (out > per) per = out;
    if (per <= 0 || per > c->max_elems || s->K > INT_MAX || s->H > INT_MAX || s->W > INT_MAX) return false;
    s->chunk = c->max_elems / per;
    if (s->chunk > s->N) s->chunk = s->N;
    return s->chunk >= 1;
}

/* Chunks start a whole number of samples in: on a 16-byte line when a
 * sample of x and of y fill whole lines, else only on an element. */
static int align_of(const conv_shape *s) {
    bool whole = s->chunk >= s->N; /* one call: the planned tensors start on HR_ALIGN */
    int64_t e = (int64_t)hr_dtype_size(s->dt);
    return whole || ((s->C * s->H * s->W * e) % 16 == 0 && (s->K * s->OH * s->OW * e) % 16 == 0) ? 16 : (int)e;
}

static bool same(const hr_cuda_conv *p, const conv_shape *s, int64_t N, bool tf32) {
    return p->N == N && p->align == align_of(s) && p->C == s->C && p->H == s->H && p->W == s->W && p->K == s->K &&
           p->kh == s->kh && p->kw == s->kw && p->sh == s->sh && p->sw == s->sw && p->ph == s->ph && p->pw == s->pw &&
           p->G == s->G && p->dh == s->dh && p->dw == s->dw && p->tf32 == tf32 && p->dt == s->dt;
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
    p->G = s->G, p->dh = s->dh, p->dw = s->dw;
    p->align = align_of(s);
    p->tf32 = c->allow_tf32;
    p->dt = s->dt;
    for (int i = 0; i < 3; i++) p->algo[i] = -1;
    c->conv[c->nconv++] = p; /* owned by the cache from here on, even if the descriptors fail */
    *out = p;
    int ty = hr_conv_dnn_type(p->dt); /* the tensors' type; the arithmetic stays FP32 */
    DNN(d, d->CreateTensorDescriptor(&p->xd));
    DNN(d, d->CreateTensorDescriptor(&p->yd));
    DNN(d, d->CreateFilterDescriptor(&p->wd));
    DNN(d, d->CreateConvolutionDescriptor(&p->cd));
    DNN(d, d->SetTensor4dDescriptor(p->xd, HR_CUDNN_TENSOR_NCHW, ty, p->N, p->C, p->H, p->W));
    DNN(d, d->SetTensor4dDescriptor(p->yd, HR_CUDNN_TENSOR_NCHW, ty, p->N, p->K, p->OH, p->OW));
    DNN(d, d->SetFilter4dDescriptor(p->wd, ty, HR_CUDNN_TENSOR_NCHW, p->K, p->C / p->G, p->kh, p->kw));
    DNN(d, d->SetConvolution2dDescriptor(p->cd, p->ph, p->pw, p->sh, p->sw, p->dh, p->dw, HR_CUDNN_CROSS_CORRELATION,
                                         HR_CUDNN_DATA_FLOAT));
    if (p->G > 1) DNN(d, d->SetConvolutionGroupCount(p->cd, p->G));
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

void hr_cuda_conv_plans_free(hr_cuda *c) {
    for (int i = 0; i < c->nconv; i++) conv_free(c->dnn, c->conv[i]);
    hr_free(c->conv);
    c->conv = NULL;
    c->nconv = c->capconv = 0;
}

/* The plans for the full chunks and for the last, shorter one (if any). */
static hr_status plans_for(hr_cuda *c, const conv_shape *s, hr_cuda_conv **full, hr_cuda_conv **tail) {
    *full = *tail = NULL;
    hr_status st = conv_new(c, s, s->chunk, full);
    if (!st && s->N % s->chunk) st = conv_new(c, s, s->N % s->chunk, tail);
    return st;
}

/* Plans for the pieces of a pipelined input (hr_cuda_piece_samples): q
 * samples, and the last piece when shorter. False: no pieces here. */
static bool piece_plans(hr_cuda *c, const conv_shape *s, hr_cuda_conv **pf, hr_cuda_conv **pt, int64_t *q) {
    *pf = *pt = NULL;
    *q = hr_cuda_piece_samples(c, s->N, s->C * s->H * s->W * (int64_t)hr_dtype_size(s->dt));
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

/* Forward workspace with the bias (beta 1) or without (beta 0). */
static size_t fwd_ws(hr_cuda *c, hr_cuda_conv *p, bool bias) { return hr_conv_algo_workspace(c, p, FWD, bias); }

/* The most any call of the node needs, with the betas the run will use (see
 * hr_cuda_conv2d and hr_cuda_conv2d_bwd); the forward pass over the batch's
 * input may also run in pieces as it arrives (staging.c), whose plans count. */
static size_t conv_workspace(hr_cuda *c, const hr_kargs *a) {
    const hr_conv_args *v = &a->conv;
    conv_shape s;
    if (!c->dnn || !shape_of(c, v, a->dt, &s)) return 0; /* run() will say why */
    size_t dwh = dw_half_bytes(v, a->dt);
    hr_cuda_conv *full, *tail;
    if (plans_for(c, &s, &full, &tail) != HR_OK) {
        hr_error_clear();
        return 0;
    }
    bool fwd = a->op == HR_OP_CONV2D;
    size_t ws = 0;
    hr_cuda_conv *ps[2] = {full, tail};
    for (int i = 0; i < 2; i++) {
        size_t w[4] = {0, 0, 0, 0};
        if (fwd) {
            w[0] = ps[i] ? fwd_ws(c, ps[i], v->b != NULL) : 0;
        } else {
            if (v->dx) w[1] = hr_conv_algo_workspace(c, ps[i], BWD_DATA, v->acc_dx);
            if (v->dw && dwh) { /* each call writes the half dW (beta 0) behind which cuDNN works */
                w[2] = ps[i] ? dwh + hr_conv_algo_workspace(c, ps[i], BWD_FILTER, false) : 0;
            } else if (v->dw) {
                w[2] = hr_conv_algo_workspace(c, ps[i], BWD_FILTER, v->acc_dw || i == 1);
                if (i == 0 && s.chunk < s.N) w[3] = hr_conv_algo_workspace(c, ps[i], BWD_FILTER, true);
            }
        }
        for (int k = 0; k < 4; k++) ws = w[k] > ws ? w[k] : ws;
    }
    /* the forward pass over the batch's input may run in pieces as it arrives */
    hr_cuda_conv *pf, *pt;
    int64_t q;
    if (fwd && v->batch_input && c->in_sample > 0 && piece_plans(c, &s, &pf, &pt, &q)) {
        size_t pa = fwd_ws(c, pf, v->b != NULL), pb = pt ? fwd_ws(c, pt, v->b != NULL) : 0;
        ws = pa > ws ? pa : ws;
        ws = pb > ws ? pb : ws;
    }
    /* the bias gradient's partial sums reuse the scratch once cuDNN is done */
    if (!fwd && v->db) {
        size_t part = hr_chan_sum_ws(s.N, s.K, s.OH * s.OW);
        ws = part > ws ? part : ws;
    }
    return ws;
}

HR_CUDA_TAKES_HALF(conv2d)
/* The legacy API's half weight gradients were measured at several times the
 * rounding of fp32 sums (H100, cuDNN 9.14: tests/gpu/test_cuda_half.c): with
 * it (HR_CUDNN_API=legacy, or no graph API) the backward runs on F32 copies. */
bool hr_cuda_conv2d_bwd_takes_half(const hr_cuda *c) { return !c->opt.cudnn_legacy && (!c->dnn || c->dnn->G); }

size_t hr_cuda_conv2d_workspace(hr_cuda *c, const hr_kargs *a) { return conv_workspace(c, a); }
size_t hr_cuda_conv2d_bwd_workspace(hr_cuda *c, const hr_kargs *a) { return conv_workspace(c, a); }

/* ---- running --------------------------------------------------------------- */
static hr_status ready(hr_cuda *c, const hr_kargs *a, conv_shape *s, hr_cuda_conv **full, hr_cuda_conv **tail) {
    const hr_conv_args *v = &a->conv;
    if (!c->dnn) return hr_error_set(HR_ERR_UNSUPPORTED, "Conv2d on the GPU needs cuDNN: %s", c->dnn_why);
    if (a->dt != HR_F32 && !hr_dtype_is_half(a->dt))
        return hr_error_set(HR_ERR_UNSUPPORTED, "Conv2d on the GPU: activations of type %s", hr_dtype_name(a->dt));
    if (!shape_of(c, v, a->dt, s))
        return hr_error_set(HR_ERR_UNSUPPORTED,
                            "Conv2d: one sample of its input (%lld x %lld x %lld) or of its output (%lld x %lld x "
                            "%lld) has more elements than one cuDNN call takes (%lld)",
                            (long long)v->C, (long long)v->H, (long long)v->W, (long long)v->K, (long long)v->OH,
                            (long long)v->OW, (long long)c->max_elems);
    return plans_for(c, s, full, tail);
}

/* y = b (broadcast), then y = conv(x, W) + y; without a bias, y = conv(x, W) */
hr_status hr_cuda_conv2d(void *ctx, const hr_kargs *a) {
    hr_cuda *c = ctx;
    const hr_conv_args *v = &a->conv;
    conv_shape s;
    hr_cuda_conv *full, *tail;
    hr_status st = ready(c, a, &s, &full, &tail);
    if (st) return st;
    hr_cuda_dnn *d = c->dnn;
    hr_dtype dt = s.dt;
    const void *x = v->x, *w = v->w;
    const float *b = v->b;
    void *y = v->y;
    void *ws = a->ws;
    size_t wsz = a->ws_bytes;
    float one = 1.0f, beta = b ? 1.0f : 0.0f;
    hr_cudnn_op *gop = hr_conv_algo_graph_op(c, full, FWD, b != NULL);
    if (gop && (st = hr_conv_algo_tune_op(c, full, FWD, b != NULL, x, w, y, ws, wsz)) != HR_OK) return st;
    if (!gop && !full->tuned[FWD] && (st = hr_conv_algo_tune(c, full, FWD, x, w, y, ws, wsz)) != HR_OK) return st;
    if (b) HR_CU(hrk_bias_fill(c->stream, dt, b, y, s.N, s.K, s.OH * s.OW));
    for (int64_t n0 = 0; n0 < s.N; n0 += s.chunk) {
        hr_cuda_conv *p = s.N - n0 >= s.chunk ? full : tail;
        hr_cudnn_op *op = hr_conv_algo_graph_op(c, p, FWD, b != NULL);
        const void *xc = at(x, n0 * s.C * s.H * s.W, dt);
        void *yc = (void *)at(y, n0 * s.K * s.OH * s.OW, dt);
        if (op) {
            if ((st = hr_cudnn_op_run(d->G, op, xc, w, yc, ws, wsz)) != HR_OK) return st;
            continue;
        }
        if ((st = hr_conv_algo_ready(c, p, FWD, wsz)) != HR_OK) return st;
        DNN(d, d->Forward(d->h, &one, p->xd, xc, p->wd, w, p->cd, p->algo[FWD], ws, wsz, &beta, p->yd, yc));
    }
    return HR_OK;
}

/* The same with the batch's input arriving in pieces (staging.c): each
 * piece's samples go through cuDNN as soon as the piece is in. The first run
 * settles the upload and times the piece plans; where the pieces or their
 * plans are missing, the whole batch runs at once. */
hr_status hr_cuda_conv2d_pieces(hr_cuda *c, const hr_kargs *a) {
    const hr_conv_args *v = &a->conv;
    conv_shape s;
    hr_cuda_conv *full, *tail, *pf, *pt;
    int64_t q;
    hr_status st = ready(c, a, &s, &full, &tail);
    if (st) return st;
    bool bias = v->b != NULL;
    hr_cudnn_op *of = NULL, *ot = NULL;
    int np = c->npieces;
    bool ok = piece_plans(c, &s, &pf, &pt, &q) && np == (int)((s.N + q - 1) / q) && c->piece_upto[np - 1] == s.N &&
              (of = hr_conv_algo_graph_op(c, pf, FWD, bias)) != NULL &&
              (!pt || (ot = hr_conv_algo_graph_op(c, pt, FWD, bias)) != NULL);
    for (int k = 0; ok && k < np; k++) ok = c->piece_upto[k] == (k + 1 < np ? (k + 1) * q : s.N);
    if (!ok) {
        if ((st = hr_cuda_settle(c)) != HR_OK) return st;
        return hr_cuda_conv2d(c, a);
    }
    hr_cuda_dnn *d = c->dnn;
    hr_dtype dt = s.dt;
    const void *x = v->x, *w = v->w;
    void *y = v->y;
    void *ws = a->ws;
    size_t wsz = a->ws_bytes;
    int64_t xs = s.C * s.H * s.W, ys = s.K * s.OH * s.OW;
    bool waiting = true;
    if (!hr_conv_algo_op_timed(pf, FWD, bias) || (pt && !hr_conv_algo_op_timed(pt, FWD, bias))) {
        /* timing needs the samples in */
        if ((st = hr_cuda_settle(c)) != HR_OK) return st;
        waiting = false;
        if ((st = hr_conv_algo_tune_op(c, pf, FWD, bias, x, w, y, ws, wsz)) != HR_OK) return st;
        if (pt && (st = hr_conv_algo_tune_op(c, pt, FWD, bias, at(x, (s.N - pt->N) * xs, dt), w,
                                             (void *)at(y, (s.N - pt->N) * ys, dt), ws, wsz)) != HR_OK)
            return st;
        /* the fastest mode may have found a legacy algorithm faster: its ops are gone */
        of = hr_conv_algo_graph_op(c, pf, FWD, bias);
        ot = pt ? hr_conv_algo_graph_op(c, pt, FWD, bias) : NULL;
        if (!of || (pt && !ot)) return hr_cuda_conv2d(c, a);
    }
    if (bias) HR_CU(hrk_bias_fill(c->stream, dt, v->b, y, s.N, s.K, s.OH * s.OW));
    for (int k = 0; k < np; k++) {
        int64_t n0 = k * q, cnt = c->piece_upto[k] - n0;
        if (waiting) {
            if ((st = hr_cuda_stage_upto(c, k)) != HR_OK) return st;
            HR_CU(cudaStreamWaitEvent(c->stream, c->piece_ev[k], 0));
        }
        st = hr_cudnn_op_run(d->G, cnt == q ? of : ot, at(x, n0 * xs, dt), w, (void *)at(y, n0 * ys, dt), ws, wsz);
        if (st) return st;
    }
    return hr_cuda_settle(c);
}

/* dx, dW, db from x, W, dy, each when wanted. A half node's dW: each call
 * writes the chunk's dW in dt to the workspace's head (beta 0; cuDNN's own
 * scratch behind it), then it is added into the F32 gradient. */
hr_status hr_cuda_conv2d_bwd(void *ctx, const hr_kargs *a) {
    hr_cuda *c = ctx;
    const hr_conv_args *v = &a->conv;
    conv_shape s;
    hr_cuda_conv *full, *tail;
    hr_status st = ready(c, a, &s, &full, &tail);
    if (st) return st;
    hr_cuda_dnn *d = c->dnn;
    hr_dtype dt = s.dt;
    const void *x = v->x, *w = v->w, *dy = v->dy;
    void *dx = v->dx;
    float *dw = v->dw, *db = v->db;
    void *ws = a->ws;
    size_t wsz = a->ws_bytes;
    float one = 1.0f, zero = 0.0f;
    /* the filter convolution's output and scratch: dW itself, or the half dW and what follows it */
    size_t dwh = dw_half_bytes(v, dt);
    void *dwo = dw, *fws = ws;
    size_t fwsz = wsz;
    if (dwh) {
        if (!ws || wsz < dwh)
            return hr_error_set(HR_ERR_INTERNAL,
                                "Conv2d.backward: the plan gave %zu bytes of workspace, the %s weight gradient needs %zu",
                                ws ? wsz : 0, hr_dtype_name(dt), dwh);
        dwo = ws, fws = (char *)ws + dwh, fwsz = wsz - dwh;
    }
    bool half_dw = dwh > 0;
    /* timing overwrites the output: only where the node does not add into it (a half dW never does) */
    hr_cudnn_op *gd = dx ? hr_conv_algo_graph_op(c, full, BWD_DATA, v->acc_dx) : NULL;
    hr_cudnn_op *gf = dw ? hr_conv_algo_graph_op(c, full, BWD_FILTER, !half_dw && v->acc_dw) : NULL;
    bool tune_dw = half_dw || !v->acc_dw;
    /* dx may have x's bytes (the planner's in-place, never with acc_dx): the
     * weight gradient reads all of x first, then dx is timed and written */
    if (gf && tune_dw &&
        (st = hr_conv_algo_tune_op(c, full, BWD_FILTER, !half_dw && v->acc_dw, x, dy, dwo, fws, fwsz)) != HR_OK)
        return st;
    if (dw && !gf && tune_dw && !full->tuned[BWD_FILTER] &&
        (st = hr_conv_algo_tune(c, full, BWD_FILTER, x, dy, dwo, fws, fwsz)) != HR_OK)
        return st;
    for (int64_t n0 = 0; dw && n0 < s.N; n0 += s.chunk) {
        hr_cuda_conv *p = s.N - n0 >= s.chunk ? full : tail;
        const void *dyc = at(dy, n0 * s.K * s.OH * s.OW, dt), *xc = at(x, n0 * s.C * s.H * s.W, dt);
        bool add = n0 > 0 || v->acc_dw; /* into the F32 dW */
        hr_cudnn_op *of = hr_conv_algo_graph_op(c, p, BWD_FILTER, !half_dw && add);
        if (of) {
            if ((st = hr_cudnn_op_run(d->G, of, xc, dyc, dwo, fws, fwsz)) != HR_OK) return st;
        } else if (dw) {
            if ((st = hr_conv_algo_ready(c, p, BWD_FILTER, fwsz)) != HR_OK) return st;
            DNN(d, d->BackwardFilter(d->h, &one, p->xd, xc, p->yd, dyc, p->cd, p->algo[BWD_FILTER], fws, fwsz,
                                     !half_dw && add ? &one : &zero, p->wd, dwo));
        }
        if (half_dw) HR_CU(hrk_cast(c->stream, dwo, dt, dw, HR_F32, w_numel(v), add));
    }
    /* A dx that adds into what it holds (a second reader's gradient) cannot
     * be timed in place: its candidates write into the workspace's tail
     * instead, those whose own workspace fits before it (none fit: the
     * heuristics' first runs, untimed) */
    void *tdx = dx, *tws = ws;
    size_t twsz = wsz, dxb = (size_t)full->N * s.C * s.H * s.W * hr_dtype_size(dt);
    if (dx && v->acc_dx) {
        size_t off = wsz >= dxb + HR_ALIGN ? (wsz - dxb) & ~(size_t)(HR_ALIGN - 1) : 0;
        tdx = off ? (char *)ws + off : NULL;
        twsz = off;
    }
    if (gd && tdx && (st = hr_conv_algo_tune_op(c, full, BWD_DATA, v->acc_dx, w, dy, tdx, tws, twsz)) != HR_OK)
        return st;
    if (dx && !gd && tdx && !full->tuned[BWD_DATA] &&
        (st = hr_conv_algo_tune(c, full, BWD_DATA, w, dy, tdx, tws, twsz)) != HR_OK)
        return st;
    for (int64_t n0 = 0; dx && n0 < s.N; n0 += s.chunk) {
        hr_cuda_conv *p = s.N - n0 >= s.chunk ? full : tail;
        const void *dyc = at(dy, n0 * s.K * s.OH * s.OW, dt);
        void *dxc = (void *)at(dx, n0 * s.C * s.H * s.W, dt);
        hr_cudnn_op *od = hr_conv_algo_graph_op(c, p, BWD_DATA, v->acc_dx);
        if (od) {
            if ((st = hr_cudnn_op_run(d->G, od, w, dyc, dxc, ws, wsz)) != HR_OK) return st;
        } else {
            if ((st = hr_conv_algo_ready(c, p, BWD_DATA, wsz)) != HR_OK) return st;
            DNN(d, d->BackwardData(d->h, &one, p->wd, w, p->yd, dyc, p->cd, p->algo[BWD_DATA], ws, wsz,
                                   v->acc_dx ? &one : &zero, p->xd, dxc));
        }
    }
    if (db) {
        bool fits = ws && wsz >= hr_chan_sum_ws(s.N, s.K, s.OH * s.OW);
        HR_CU(hrk_channel_sum_ws(c->stream, dt, dy, db, s.N, s.K, s.OH * s.OW, v->acc_db, fits ? ws : NULL));
    }
    return HR_OK;
}
