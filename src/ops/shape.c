/* shape.c — ops that move no numbers or only rearrange them: the input,
 * Flatten/Reshape (views), Concat along channels, and pooling shapes. */
#include "ops/ops.h"

#include <string.h>

int hr_input(hr_model_t *m, const char *name, int ndim, const int64_t *dims) {
    if (!m) return hr_error_set(HR_ERR_INVALID_ARG, "input: the model is NULL"), -1;
    if (m->input >= 0) {
        m->broken = true;
        return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: the model already has an input; write one input line",
                            m->src_file ? m->src_file : "model", m->src_line), -1;
    }
    if (ndim < 1 || ndim > 3) {
        m->broken = true;
        return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: input takes 1 to 3 sizes (features, or C H W), got %d",
                            m->src_file ? m->src_file : "model", m->src_line, ndim), -1;
    }
    for (int i = 0; i < ndim; i++)
        if (dims[i] <= 0 || dims[i] > (1LL << 31)) {
            m->broken = true;
            return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: input size %d is %lld; sizes must be in [1, 2^31]",
                                m->src_file ? m->src_file : "model", m->src_line, i + 1, (long long)dims[i]), -1;
        }
    int t = hr_graph_add_tensor(&m->g, name ? name : "input", HR_F32, hr_shape_make(ndim, dims), true, HR_T_INPUT, -1);
    if (t < 0) {
        m->broken = true;
        return -1;
    }
    m->input = m->output = t;
    return t;
}

/* Reshape: in {x}, out {y}, a view of x's bytes (the planner aliases them). */
int hr_reshape(hr_model_t *m, const char *name, int x, int ndim, const int64_t *dims) {
    if (!hr_model_check_tensor(m, x, "Reshape")) return -1;
    int L = hr_model_begin_layer(m, name, ndim == 1 && dims == NULL ? "Flatten" : "Reshape");
    if (L < 0) return -1;
    hr_shape s = m->g.t[x].shape;
    int64_t n = hr_shape_numel(&s);
    hr_shape o;
    char a[64], b[64];
    if (dims == NULL) {
        o = hr_shape_make(1, (int64_t[]){n});
    } else {
        if (ndim < 1 || ndim > 3)
            return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "Reshape takes 1 to 3 sizes (without the batch), got %d", ndim);
        o = hr_shape_make(ndim, dims);
        if (hr_shape_numel(&o) != n)
            return hr_build_fail(m, L, HR_ERR_SHAPE, "cannot reshape %s (%lld values a sample) to %s",
                                 hr_shape_str(&s, a, sizeof a), (long long)n, hr_shape_str(&o, b, sizeof b));
    }
    hr_node nd = hr_node_make(HR_OP_RESHAPE, L);
    nd.in[0] = x;
    nd.nin = 1;
    nd.out[0] = hr_model_add_act(m, L, "out", o);
    nd.nout = 1;
    if (nd.out[0] < 0) return -1;
    return hr_build_node(m, &nd);
}

int hr_flatten(hr_model_t *m, const char *name, int x) { return hr_reshape(m, name, x, 1, NULL); }

/* Concat: in {x1..xk (N,Ci,H,W)}, out {y (N,sum Ci,H,W)}; backward: one
 * Concat.backward per input, in {dy}, out {dxi}, a.offset = its first channel. */
int hr_concat(hr_model_t *m, const char *name, int k, const int *xs) {
    if (!m) return hr_error_set(HR_ERR_INVALID_ARG, "Concat: the model is NULL"), -1;
    for (int i = 0; i < k; i++)
        if (!hr_model_check_tensor(m, xs[i], "Concat")) return -1;
    int L = hr_model_begin_layer(m, name, "Concat");
    if (L < 0) return -1;
    if (k < 2 || k > HR_NODE_MAX_IO)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "Concat takes 2 to %d inputs, got %d", HR_NODE_MAX_IO, k);
    hr_shape s0 = m->g.t[xs[0]].shape;
    int64_t ch = 0;
    char a[64], b[64];
    for (int i = 0; i < k; i++) {
        hr_shape s = m->g.t[xs[i]].shape;
        bool ok = s.ndim == s0.ndim;
        for (int d = 1; ok && d < s.ndim; d++) ok = s.d[d] == s0.d[d];
        if (!ok)
            return hr_build_fail(m, L, HR_ERR_SHAPE,
                                 "cannot concatenate %s (%s) with %s (%s) along channels: the other sizes differ",
                                 m->g.t[xs[0]].name, hr_shape_str(&s0, a, sizeof a), m->g.t[xs[i]].name,
                                 hr_shape_str(&s, b, sizeof b));
        ch += s.d[0];
    }
    hr_node n = hr_node_make(HR_OP_CONCAT, L);
    for (int i = 0; i < k; i++) n.in[i] = xs[i];
    n.nin = k;
    hr_shape o = s0;
    o.d[0] = ch;
    n.out[0] = hr_model_add_act(m, L, "out", o);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

hr_status hr_concat_backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    int64_t off = 0;
    for (int i = 0; i < f->nin; i++) {
        bool acc;
        hr_node n = hr_node_make(HR_OP_CONCAT_BWD, f->layer);
        n.a.offset = off;
        off += ad->g->t[f->in[i]].shape.d[1]; /* the program's shapes carry the batch first */
        n.out[0] = hr_ad_grad_out(ad, f->in[i], &acc);
        if (n.out[0] == -2) return HR_ERR_OOM;
        if (n.out[0] < 0) continue;
        n.in[0] = dy;
        n.nin = 1;
        n.nout = 1;
        if (hr_ad_emit(ad, &n) < 0) return HR_ERR_OOM;
    }
    return HR_OK;
}

/* MaxPool2d / AvgPool2d: in {x (N,C,H,W)}, out {y (N,C,OH,OW)}, no padding. */
static int pool(hr_model_t *m, const char *name, const char *type, hr_op op, int x, int k, int stride, bool global) {
    if (!hr_model_check_tensor(m, x, type)) return -1;
    int L = hr_model_begin_layer(m, name, type);
    if (L < 0) return -1;
    hr_shape s = m->g.t[x].shape;
    char a[64];
    if (s.ndim != 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "%s takes (batch, C, H, W) but its input has per-sample shape %s", type,
                             hr_shape_str(&s, a, sizeof a));
    int kh = global ? (int)s.d[1] : k, kw = global ? (int)s.d[2] : k;
    if (global) stride = 1;
    if (kh <= 0 || kw <= 0 || stride <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "kernel_size and stride must be positive (got %d, %d)", k, stride);
    if (kh > s.d[1] || kw > s.d[2])
        return hr_build_fail(m, L, HR_ERR_SHAPE, "kernel_size %d is larger than the input %s", k, hr_shape_str(&s, a, sizeof a));
    hr_node n = hr_node_make(op, L);
    n.a.kh = kh;
    n.a.kw = kw;
    n.a.sh = n.a.sw = stride;
    n.in[0] = x;
    n.nin = 1;
    int64_t oh = (s.d[1] - kh) / stride + 1, ow = (s.d[2] - kw) / stride + 1;
    n.out[0] = hr_model_add_act(m, L, "out", hr_shape_make(3, (int64_t[]){s.d[0], oh, ow}));
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

int hr_maxpool2d(hr_model_t *m, const char *name, int x, int k, int stride) {
    return pool(m, name, "MaxPool2d", HR_OP_MAXPOOL, x, k, stride == 0 ? k : stride, false);
}
int hr_avgpool2d(hr_model_t *m, const char *name, int x, int k, int stride) {
    return pool(m, name, "AvgPool2d", HR_OP_AVGPOOL, x, k, stride == 0 ? k : stride, false);
}
int hr_global_avgpool(hr_model_t *m, const char *name, int x) {
    return pool(m, name, "AdaptiveAvgPool2d", HR_OP_AVGPOOL, x, 0, 1, true);
}
