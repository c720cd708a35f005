/* linear.c — Linear (nn.Linear): its model-file signature, shape rule,
 * parameters and their init, backward node and kernel arguments (with an
 * activation in its product's epilogue, as ops/activation.c fuses it). */
#include "ops/ops.h"

#include <string.h>

/* Linear: in {x (N,..., in), W (out,in), b (out)?, b's half copy?}, out
 * {y (N,..., out)}: the rows are every position of every sample, as
 * nn.Linear on (batch, time, in); the half copy (mixed precision:
 * plan/autocast.c) is what a half product's epilogue adds
 * Linear.backward: in {x, W, dy}, out {dx, dW, db} */
static int linear(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias, const char *tied_to,
                  const char *wname, const char *bname) {
    if (!hr_model_check_tensor(m, x, "Linear")) return -1;
    int L = hr_model_begin_layer(m, name, "Linear");
    if (L < 0) return -1;
    const hr_tensor *xt = &m->g.t[x];
    char sb[64];
    if (in_f <= 0 || out_f <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "in_features and out_features must be positive (got %lld, %lld)",
                             (long long)in_f, (long long)out_f);
    int last = xt->shape.ndim - 1;
    if (last < 0)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "Linear takes (batch, ..., features) but its input is one value a sample");
    if (xt->shape.d[last] != in_f) {
        if (last > 0 && hr_shape_numel(&xt->shape) == in_f) /* an image where a vector was meant */
            return hr_build_fail(m, L, HR_ERR_SHAPE,
                                 "Linear acts on the last dim, and its input has per-sample shape %s; add Flatten() "
                                 "before it for its %lld features",
                                 hr_shape_str(&xt->shape, sb, sizeof sb), (long long)in_f);
        return hr_build_fail(m, L, HR_ERR_SHAPE,
                             "in_features is %lld (expected) but the input has %lld features (received)%s; "
                             "write Linear(%lld, %lld)",
                             (long long)in_f, (long long)xt->shape.d[last], last ? " in its last dim" : "",
                             (long long)xt->shape.d[last], (long long)out_f);
    }
    hr_shape ys = xt->shape; /* (..., in) -> (..., out), as nn.Linear; copied: adding tensors moves xt */
    ys.d[last] = out_f;
    hr_node n = hr_node_make(HR_OP_LINEAR, L);
    n.a.in_f = in_f;
    n.a.out_f = out_f;
    n.a.bias = bias;
    n.in[0] = x;
    if (tied_to) { /* the other layer's weight: the same tensor, so one gradient sums both uses */
        int T = hr_model_find_layer(m, tied_to), w = -1;
        char wn[300];
        snprintf(wn, sizeof wn, "%s.weight", tied_to);
        for (int t = 0; T >= 0 && t < m->g.nt && w < 0; t++)
            if (m->g.t[t].kind == HR_T_PARAM && m->g.t[t].layer == T && !strcmp(m->g.t[t].name, wn)) w = t;
        if (w < 0)
            return hr_build_fail(m, L, HR_ERR_SHAPE, "tied_to='%s': %s", tied_to,
                                 T < 0 ? "no layer before this one has that name" : "that layer has no weight");
        const hr_shape *ws = &m->g.t[w].shape;
        if (ws->ndim != 2 || ws->d[0] != out_f || ws->d[1] != in_f)
            return hr_build_fail(m, L, HR_ERR_SHAPE, "tied_to='%s': its weight is %s, but this layer's must be "
                                 "(%lld, %lld), (out_features, in_features)", tied_to,
                                 hr_shape_str(ws, sb, sizeof sb), (long long)out_f, (long long)in_f);
        n.in[1] = w;
        m->g.l[L].tied = true;
    } else {
        n.in[1] = hr_model_add_param(m, L, wname, 2, (int64_t[]){out_f, in_f}, HR_T_PARAM);
    }
    n.nin = 2;
    if (n.in[1] < 0) return -1;
    if (bias) {
        n.in[2] = hr_model_add_param(m, L, bname, 1, (int64_t[]){out_f}, HR_T_PARAM);
        if (n.in[2] < 0) return -1;
        n.nin = 3;
    }
    n.out[0] = hr_model_add_act(m, L, "out", ys);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

int hr_linear(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias) {
    return linear(m, name, x, in_f, out_f, bias, NULL, "weight", "bias");
}

int hr_linear_named(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias, const char *wname,
                    const char *bname) {
    return linear(m, name, x, in_f, out_f, bias, NULL, wname, bname);
}

int hr_linear_tied(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias, const char *tied_to) {
    if (!tied_to) {
        hr_error_set(HR_ERR_INVALID_ARG, "hr_linear_tied: tied_to is NULL; name the layer whose weight to share");
        return -1;
    }
    return linear(m, name, x, in_f, out_f, bias, tied_to, "weight", "bias");
}

/* Linear(in, out, bias=True, tied_to='layer'): tied_to is headroom's, the
 * model file's way of writing nanoGPT's `wte.weight = lm_head.weight` */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    char tied[128] = "";
    const hr_arg *t = &c->a[3];
    if (!t->none) {
        if (t->len < 3 || t->len - 2 >= (int)sizeof tied)
            return hr_model_fail(m, HR_ERR_PARSE, "Linear tied_to=%.*s: give a layer's name in quotes", t->len, t->src);
        snprintf(tied, sizeof tied, "%.*s", t->len - 2, t->src + 1); /* the name without its quotes */
    }
    return linear(m, name, c->x[0], c->a[0].i, c->a[1].i, c->a[2].i, tied[0] ? tied : NULL, "weight", "bias");
}

/* Shared with Conv2d's (conv2d.c): both take {x, W, b} and give {dx, dW, db}. */
hr_status hr_weighted_backward(hr_autodiff *ad, const hr_node *f, hr_op op);
hr_status hr_weighted_backward(hr_autodiff *ad, const hr_node *f, hr_op op) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_node n = hr_node_make(op, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.in[2] = dy;
    n.nin = 3;
    n.nout = 3;
    for (int i = 0; i < 3; i++) {
        bool acc;
        int x = i < f->nin ? f->in[i] : -1;
        n.out[i] = hr_ad_grad_out(ad, x, &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0 && n.out[2] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* A Linear with an activation in its epilogue (out {y, pre}): the two
 * backward nodes the pair would have had, the activation's (pre's gradient
 * from y's) then Linear's (from pre's). hr_act_fuse_backward may then put
 * the first into the Linear backward that makes y's gradient. */
static hr_status backward(hr_autodiff *ad, const hr_node *n) {
    if (!n->a.act) return hr_weighted_backward(ad, n, HR_OP_LINEAR_BWD);
    int y = n->out[0], pre = n->out[1];
    hr_node act = hr_node_make((hr_op)n->a.act, ad->g->t[y].layer);
    act.a.approx = n->a.approx;
    act.in[0] = pre;
    act.out[0] = y;
    act.nin = act.nout = 1;
    ad->needs_grad[pre] = ad->needs_grad[y];
    hr_status st = hr_op_descs[act.op]->backward(ad, &act);
    if (st) return st;
    hr_node lin = *n;
    lin.a.act = 0;
    lin.a.approx = false;
    lin.out[0] = pre;
    lin.nout = 1;
    return hr_weighted_backward(ad, &lin, HR_OP_LINEAR_BWD);
}

hr_kargs hr_linear_act_kargs(const hr_linear_args *l, bool backward, hr_dtype dt, const void *pre, void *io, void *y,
                             int64_t n) {
    hr_kargs g;
    memset(&g, 0, sizeof g);
    g.op = (hr_op)(backward ? l->act_bwd : l->act);
    g.dt = dt;
    g.act.n = n;
    g.act.tanh_approx = l->act_approx;
    g.act.x = pre;
    g.act.dy = io;
    g.act.out = backward ? io : y;
    return g;
}

/* Weight and bias: U(-1/sqrt(in), 1/sqrt(in)), as nn.Linear.reset_parameters. */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    hr_init_fan_in(&g->t[n->in[1]], hr_shape_numel(&g->t[n->in[slot]].shape), seed, stream, v);
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_linear_args *l = &a->linear;
    bool bwd = n->op == HR_OP_LINEAR_BWD;
    l->x = hr_ptr(ptr, n->in[0]);
    l->w = hr_ptr(ptr, n->in[1]);
    l->N = hr_shape_numel(&g->t[n->in[0]].shape) / n->a.in_f; /* the rows: batch x every dim but the last */
    l->in = n->a.in_f;
    l->out = n->a.out_f;
    l->batch_input = g->t[n->in[0]].kind == HR_T_INPUT;
    if (!bwd) {
        l->b = n->nin > 2 ? hr_ptr(ptr, n->in[2]) : NULL;
        l->b_half = n->nin > 3 ? hr_ptr(ptr, n->in[3]) : NULL;
        l->y = hr_ptr(ptr, n->out[0]);
        l->act = n->a.act;
        l->pre = l->act ? hr_ptr(ptr, n->out[1]) : NULL;
    } else {
        l->act = n->a.dact;
        l->pre = l->act ? hr_ptr(ptr, n->in[3]) : NULL;
    }
    l->act_bwd = l->act ? hr_act_grad_op((hr_op)l->act) : 0;
    l->act_approx = l->act && n->a.approx;
    if (!bwd) return;
    l->dy = hr_ptr(ptr, n->in[2]);
    l->dx = hr_ptr(ptr, n->out[0]);
    l->dw = hr_ptr(ptr, n->out[1]);
    l->db = hr_ptr(ptr, n->out[2]);
    l->acc_dx = n->accum[0];
    l->acc_dw = n->accum[1];
    l->acc_db = n->accum[2];
}

/* 2 N in out a product: y forward; dx and dW, each when wanted, backward. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_linear_args *l = &a.linear;
    double prod = 2.0 * (double)l->N * (double)l->in * (double)l->out, bias = (double)l->N * (double)l->out;
    if (n->op == HR_OP_LINEAR)
        w->flops = prod + (l->b ? bias : 0);
    else
        w->flops = (l->dx ? prod : 0) + (l->dw ? prod : 0) + (l->db ? bias : 0);
    if (l->act) { /* the activation's own count, on the rows it takes */
        hr_node act = hr_node_make((hr_op)(n->op == HR_OP_LINEAR ? l->act : l->act_bwd), n->layer);
        hr_work aw = {0};
        act.in[0] = n->op == HR_OP_LINEAR ? n->out[1] : n->in[3];
        act.nin = 1;
        hr_op_descs[act.op]->work(g, &act, &aw);
        w->flops += aw.flops;
    }
    w->bytes = hr_work_io_bytes(g, n);
    w->matmul = true;
}

static const hr_layer_sig layers[] = {
    {"Linear", {HR_REQ("in_features", HR_ARG_SIZE), HR_REQ("out_features", HR_ARG_SIZE), HR_OPT("bias", HR_ARG_BOOL, "True"),
                HR_OPT("tied_to", HR_ARG_STR, "None")},
     HR_LAYER_ONE, build},
    {0},
};

const hr_op_desc hr_opdesc_linear = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .init = init, .autocast = HR_AC_HALF,
    .half_bias = true, .work = work};
/* dx over x: the kernels write dx last */
const hr_op_desc hr_opdesc_linear_bwd = {.unpack = unpack, .inplace = true, .work = work};
