/* pool.c — MaxPool2d, AvgPool2d and AdaptiveAvgPool2d(1) (no padding): shape
 * rules, what the max pool keeps for its backward, and kernel arguments. */
#include "ops/ops.h"

/* in {x (N,C,H,W)}, out {y (N,C,OH,OW)}; MaxPool2d also out[1] = argmax in
 * training (u8, y's shape: each window's first maximum as i*kw + j), added
 * by autodiff. MaxPool2d.backward: in {argmax, dy} or, when x is kept
 * anyway, in {x, dy} (the argmax found again); AvgPool2d.backward: in {dy}. */
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

/* MaxPool2d(kernel_size, stride=None) and AvgPool2d: stride None is the kernel size. */
static int build_pool(hr_model_t *m, const char *name, const hr_layer_call *c, bool max) {
    int64_t k = c->a[0].i, st = c->a[1].none ? k : c->a[1].i;
    if (k > 1 << 20 || st > 1 << 20)
        return hr_model_fail(m, HR_ERR_PARSE, "%s kernel_size or stride is too large", max ? "MaxPool2d" : "AvgPool2d");
    return (max ? hr_maxpool2d : hr_avgpool2d)(m, name, c->x[0], (int)k, (int)st);
}
static int build_max(hr_model_t *m, const char *name, const hr_layer_call *c) { return build_pool(m, name, c, true); }
static int build_avg(hr_model_t *m, const char *name, const hr_layer_call *c) { return build_pool(m, name, c, false); }
static int build_adaptive(hr_model_t *m, const char *name, const hr_layer_call *c) {
    if (c->a[0].i != 1)
        return hr_model_fail(m, HR_ERR_UNSUPPORTED, "AdaptiveAvgPool2d(%lld): headroom supports only output size 1 "
                             "(global average pooling); use AvgPool2d for other sizes", (long long)c->a[0].i);
    return hr_global_avgpool(m, name, c->x[0]);
}

static const hr_layer_sig max_layers[] = {
    {"MaxPool2d",
     {HR_REQ("kernel_size", HR_ARG_SIZE), HR_OPT("stride", HR_ARG_OPTSIZE, "None"), HR_FIX("padding", HR_ARG_NONNEG, "0"),
      HR_FIX("dilation", HR_ARG_SIZE, "1"), HR_FIX("return_indices", HR_ARG_BOOL, "False"),
      HR_FIX("ceil_mode", HR_ARG_BOOL, "False")},
     HR_LAYER_ONE, build_max},
    {0}};
static const hr_layer_sig avg_layers[] = {
    {"AvgPool2d",
     {HR_REQ("kernel_size", HR_ARG_SIZE), HR_OPT("stride", HR_ARG_OPTSIZE, "None"), HR_FIX("padding", HR_ARG_NONNEG, "0"),
      HR_FIX("ceil_mode", HR_ARG_BOOL, "False"), HR_OPT("count_include_pad", HR_ARG_BOOL, "True"),
      HR_FIX("divisor_override", HR_ARG_OPTSIZE, "None")},
     HR_LAYER_ONE, build_avg},
    {"AdaptiveAvgPool2d", {HR_REQ("output_size", HR_ARG_SIZE)}, HR_LAYER_ONE, build_adaptive},
    {0}};

/* Unless another backward node keeps x, the max pool keeps each window's
 * argmax as one byte (its offset in the window) instead of the whole of x. */
static hr_status max_backward(hr_autodiff *ad, const hr_node *f) {
    int x = f->in[0], saved = x;
    if (!ad->read[x] && f->a.kh * f->a.kw <= 255 && hr_ad_grad_in(ad, f->out[0]) >= 0) {
        saved = hr_ad_add_saved(ad, "argmax", HR_U8, hr_shape_numel(&ad->g->t[f->out[0]].shape));
        if (saved < 0) return HR_ERR_OOM;
    }
    return hr_ad_simple(ad, f, HR_OP_MAXPOOL_BWD, saved, -1);
}
static hr_status avg_backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, HR_OP_AVGPOOL_BWD, -1, -1);
}

/* The big side (x or dx) gives NC, H, W; the pooled side (y or dy) OH, OW. */
static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_pool_args *p = &a->pool;
    int big, small;
    switch (n->op) {
    case HR_OP_MAXPOOL: case HR_OP_AVGPOOL:
        big = n->in[0], small = n->out[0];
        p->x = hr_ptr(ptr, n->in[0]);
        p->y = hr_ptr(ptr, n->out[0]);
        if (n->op == HR_OP_MAXPOOL && n->nout > 1) p->argmax_out = hr_ptr(ptr, n->out[1]);
        break;
    case HR_OP_MAXPOOL_BWD:
        big = n->out[0], small = n->in[1];
        if (g->t[n->in[0]].dtype == HR_U8)
            p->argmax = hr_ptr(ptr, n->in[0]);
        else
            p->x = hr_ptr(ptr, n->in[0]);
        p->dy = hr_ptr(ptr, n->in[1]);
        p->dx = hr_ptr(ptr, n->out[0]);
        p->acc = n->accum[0];
        break;
    default: /* average pool's backward */
        big = n->out[0], small = n->in[0];
        p->dy = hr_ptr(ptr, n->in[0]);
        p->dx = hr_ptr(ptr, n->out[0]);
        p->acc = n->accum[0];
        break;
    }
    const hr_shape *xs = &g->t[big].shape, *ys = &g->t[small].shape;
    p->NC = xs->d[0] * xs->d[1], p->H = xs->d[2], p->W = xs->d[3], p->OH = ys->d[2], p->OW = ys->d[3];
    p->kh = n->a.kh, p->kw = n->a.kw, p->sh = n->a.sh, p->sw = n->a.sw;
}

/* A window's values a pooled value; max-pool's backward from its argmax
 * touches one a pooled value. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_pool_args *p = &a.pool;
    double pooled = (double)p->NC * (double)p->OH * (double)p->OW;
    w->flops = pooled * (p->argmax ? 1 : p->kh * p->kw);
    w->bytes = hr_work_io_bytes(g, n);
}

const hr_op_desc hr_opdesc_maxpool = {.per_sample = HR_SAMPLES_EACH, .layers = max_layers, .backward = max_backward, .unpack = unpack, .work = work};
const hr_op_desc hr_opdesc_maxpool_bwd = {.unpack = unpack, .work = work};
const hr_op_desc hr_opdesc_avgpool = {.per_sample = HR_SAMPLES_EACH, .layers = avg_layers, .backward = avg_backward, .unpack = unpack, .work = work};
const hr_op_desc hr_opdesc_avgpool_bwd = {.unpack = unpack, .work = work};
