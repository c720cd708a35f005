/* batchnorm.c — BatchNorm1d and BatchNorm2d: parameters, running statistics
 * (buffers) and their init, the backward node and kernel arguments. */
#include "ops/ops.h"

/* BatchNorm: in {x, gamma, beta, running_mean, running_var},
 *            out {y, mean, invstd} in training (batch statistics; running ones
 *            updated as PyTorch does, with the unbiased variance), {y} in inference.
 * BatchNorm.backward: in {x, gamma, mean, invstd, dy}, out {dx, dgamma, dbeta}. */
int hr_batchnorm(hr_model_t *m, const char *name, int x, int64_t features, float eps, float momentum) {
    if (!hr_model_check_tensor(m, x, "BatchNorm")) return -1;
    int nd = m->g.t[x].shape.ndim;
    int L = hr_model_begin_layer(m, name, nd == 3 ? "BatchNorm2d" : "BatchNorm1d");
    if (L < 0) return -1;
    if (nd != 1 && nd != 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "BatchNorm takes (batch, C) or (batch, C, H, W); the input has %d dims", nd + 1);
    if (features <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "num_features must be positive, eps > 0 and momentum in [0, 1]");
    if (m->g.t[x].shape.d[0] != features)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "num_features is %lld (expected) but the input has %lld channels (received)",
                             (long long)features, (long long)m->g.t[x].shape.d[0]);
    hr_node n = hr_node_make(HR_OP_BATCHNORM, L);
    n.a.eps = eps;
    n.a.momentum = momentum;
    n.a.out_f = features;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 1, &features, HR_T_PARAM);
    n.in[2] = hr_model_add_param(m, L, "bias", 1, &features, HR_T_PARAM);
    n.in[3] = hr_model_add_param(m, L, "running_mean", 1, &features, HR_T_BUFFER);
    n.in[4] = hr_model_add_param(m, L, "running_var", 1, &features, HR_T_BUFFER);
    n.nin = 5;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[x].shape);
    /* per-channel statistics are not batched: their shape is (C) */
    n.out[1] = hr_model_add_param(m, L, "batch_mean", 1, &features, HR_T_ACT);
    n.out[2] = hr_model_add_param(m, L, "batch_invstd", 1, &features, HR_T_ACT);
    n.nout = 3;
    if (n.in[1] < 0 || n.in[2] < 0 || n.in[3] < 0 || n.in[4] < 0 || n.out[0] < 0 || n.out[1] < 0 || n.out[2] < 0)
        return -1;
    return hr_build_node(m, &n);
}

/* BatchNorm1d takes (batch, C), BatchNorm2d (batch, C, H, W): the wrong one
 * is refused, naming the right one. */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c, bool twod) {
    const char *type = twod ? "BatchNorm2d" : "BatchNorm1d";
    int nd = hr_tensor_ndim(m, c->x[0]);
    if (nd >= 0 && twod != (nd == 3)) {
        char sh[80];
        hr_shape xs = {.ndim = nd < HR_MAX_DIMS ? nd : HR_MAX_DIMS};
        for (int i = 0; i < xs.ndim; i++) xs.d[i] = hr_tensor_dim(m, c->x[0], i);
        return hr_model_fail(m, HR_ERR_SHAPE, "%s takes %s but its input has per-sample shape %s; use %s", type,
                             twod ? "(batch, C, H, W)" : "(batch, features)", hr_shape_str(&xs, sh, sizeof sh),
                             twod ? "BatchNorm1d" : "BatchNorm2d");
    }
    if (!(c->a[1].f > 0) || !(c->a[2].f >= 0 && c->a[2].f <= 1))
        return hr_model_fail(m, HR_ERR_PARSE, "%s needs eps > 0 and momentum in [0, 1]", type);
    return hr_batchnorm(m, name, c->x[0], c->a[0].i, (float)c->a[1].f, (float)c->a[2].f);
}
static int build1(hr_model_t *m, const char *name, const hr_layer_call *c) { return build(m, name, c, false); }
static int build2(hr_model_t *m, const char *name, const hr_layer_call *c) { return build(m, name, c, true); }

#define BN_ARGS                                                                                          \
    {HR_REQ("num_features", HR_ARG_SIZE), HR_OPT("eps", HR_ARG_FLOAT, "1e-5"), HR_OPT("momentum", HR_ARG_FLOAT, "0.1"),     \
     HR_FIX("affine", HR_ARG_BOOL, "True"), HR_FIX("track_running_stats", HR_ARG_BOOL, "True")}
static const hr_layer_sig layers[] = {
    {"BatchNorm1d", BN_ARGS, HR_LAYER_ONE, build1},
    {"BatchNorm2d", BN_ARGS, HR_LAYER_ONE, build2},
    {0},
};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_node n = hr_node_make(HR_OP_BATCHNORM_BWD, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.in[2] = f->out[1];
    n.in[3] = f->out[2];
    n.in[4] = dy;
    n.nin = 5;
    n.nout = 3;
    for (int i = 0; i < 3; i++) {
        bool acc;
        n.out[i] = hr_ad_grad_out(ad, f->in[i], &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0 && n.out[2] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* weight 1, bias 0, running_mean 0, running_var 1, as nn.BatchNorm2d */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    float c = slot == 1 || slot == 4 ? 1.0f : 0.0f;
    int64_t k = hr_shape_numel(&g->t[n->in[slot]].shape);
    for (int64_t i = 0; i < k; i++) v[i] = c;
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_batchnorm_args *b = &a->bn;
    const hr_shape *s = &g->t[n->in[0]].shape;
    b->N = s->d[0], b->C = s->d[1], b->HW = hr_numel_from(g, n->in[0], 2);
    b->eps = n->a.eps, b->momentum = n->a.momentum, b->train = n->a.train;
    b->x = hr_ptr(ptr, n->in[0]);
    b->gamma = hr_ptr(ptr, n->in[1]);
    if (n->op == HR_OP_BATCHNORM) {
        b->beta = hr_ptr(ptr, n->in[2]);
        /* a recomputation in the backward pass updates no running statistics */
        b->running_mean = n->a.recompute ? NULL : hr_ptr(ptr, n->in[3]);
        b->running_var = n->a.recompute ? NULL : hr_ptr(ptr, n->in[4]);
        b->y = hr_ptr(ptr, n->out[0]);
        if (n->nout > 2) b->mean = hr_ptr(ptr, n->out[1]), b->invstd = hr_ptr(ptr, n->out[2]);
        return;
    }
    b->saved_mean = hr_ptr(ptr, n->in[2]);
    b->saved_invstd = hr_ptr(ptr, n->in[3]);
    b->dy = hr_ptr(ptr, n->in[4]);
    b->dx = hr_ptr(ptr, n->out[0]);
    b->dgamma = hr_ptr(ptr, n->out[1]);
    b->dbeta = hr_ptr(ptr, n->out[2]);
    b->acc_dx = n->accum[0], b->acc_dgamma = n->accum[1], b->acc_dbeta = n->accum[2];
}

/* Training reads x twice (the statistics, then y) and the backward x and
 * dy twice (the sums, then dx); inference is one scale and shift a value. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double x = (double)hr_shape_numel(&g->t[n->in[0]].shape), again = hr_work_tensor_bytes(g, n->in[0]);
    if (n->op == HR_OP_BATCHNORM_BWD) again += hr_work_tensor_bytes(g, n->in[4]);
    bool train = n->op == HR_OP_BATCHNORM_BWD || n->a.train;
    w->flops = x * (n->op == HR_OP_BATCHNORM_BWD ? 10 : train ? 8 : 2);
    w->bytes = hr_work_io_bytes(g, n) + (train ? again : 0);
}

/* Gradients reach x, gamma and beta, never the running statistics. */
const hr_op_desc hr_opdesc_batchnorm = {
    .per_sample = HR_SAMPLES_INFER,
    .layers = layers, .backward = backward, .unpack = unpack, .init = init, .grad_inputs = 0x7, .train_outputs = true,
    .batch_stats = true, .work = work};
/* dx over dy: per channel, the kernels finish the sums over dy before they
 * write dx, and each element of dx reads only its own element of dy */
const hr_op_desc hr_opdesc_batchnorm_bwd = {.unpack = unpack, .inplace = true, .inplace_last = true, .work = work};
