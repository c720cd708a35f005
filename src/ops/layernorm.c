/* layernorm.c — LayerNorm (nn.LayerNorm) over the last 1 to 3 dims: shape
 * rule, optional weight and bias and their init, backward and kernel arguments. */
#include "ops/ops.h"

/* LayerNorm: in {x, weight?, bias?} (nin 1 without elementwise_affine, 2
 * with bias=False), out {y, mean, rstd} in training (one float a row: the
 * values before the normalised dims), {y} in inference.
 * LayerNorm.backward: in {x, mean, rstd, weight?, dy}, out {dx, dweight?, dbias?}, and
 * in mixed precision {.., dx's half copy (autocast.c: fold_grad), the next
 * Linear's bias gradient (hr_norm_take_bias_grads)}. */
int hr_layernorm(hr_model_t *m, const char *name, int x, int ndim, const int64_t *shape, float eps, bool affine,
                 bool bias) {
    if (!hr_model_check_tensor(m, x, "LayerNorm")) return -1;
    int L = hr_model_begin_layer(m, name, "LayerNorm");
    if (L < 0) return -1;
    hr_shape s = m->g.t[x].shape;
    char a[64], b[64];
    if (ndim < 1 || ndim > s.ndim || !shape)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "normalized_shape has %d sizes but the input's per-sample shape %s has "
                             "%d dims; normalise 1 to %d of its last dims", ndim, hr_shape_str(&s, a, sizeof a), s.ndim,
                             s.ndim);
    hr_shape ns = hr_shape_make(ndim, shape);
    for (int i = 0; i < ndim; i++)
        if (shape[i] != s.d[s.ndim - ndim + i])
            return hr_build_fail(m, L, HR_ERR_SHAPE, "normalized_shape %s (expected) does not end the input's per-sample "
                                 "shape %s (received)", hr_shape_str(&ns, b, sizeof b), hr_shape_str(&s, a, sizeof a));
    if (!(eps > 0)) return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "eps must be > 0, got %g", eps);
    hr_node n = hr_node_make(HR_OP_LAYERNORM, L);
    n.a.eps = eps;
    n.a.norm_dims = ndim;
    n.a.affine = affine;
    n.a.bias = affine && bias;
    n.in[0] = x;
    n.nin = 1;
    if (affine) {
        n.in[n.nin++] = hr_model_add_param(m, L, "weight", ndim, shape, HR_T_PARAM);
        if (bias) n.in[n.nin++] = hr_model_add_param(m, L, "bias", ndim, shape, HR_T_PARAM);
        for (int i = 1; i < n.nin; i++)
            if (n.in[i] < 0) return -1;
    }
    int64_t rows = 1;
    for (int i = 0; i < s.ndim - ndim; i++) rows *= s.d[i];
    n.out[0] = hr_model_add_act(m, L, "out", s);
    n.out[1] = hr_model_add_act(m, L, "mean", hr_shape_make(1, &rows));
    n.out[2] = hr_model_add_act(m, L, "rstd", hr_shape_make(1, &rows));
    n.nout = 3;
    if (n.out[0] < 0 || n.out[1] < 0 || n.out[2] < 0) return -1;
    return hr_build_node(m, &n);
}

/* LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True) */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    const hr_arg *a = c->a;
    if (!(a[1].f > 0)) return hr_model_fail(m, HR_ERR_PARSE, "LayerNorm needs eps > 0, got %.*s", a[1].len, a[1].src);
    return hr_layernorm(m, name, c->x[0], a[0].n, a[0].tup, (float)a[1].f, a[2].i, a[3].i);
}

static const hr_layer_sig layers[] = {
    {"LayerNorm",
     {HR_REQ("normalized_shape", HR_ARG_SHAPE), HR_OPT("eps", HR_ARG_FLOAT, "1e-5"), HR_OPT("elementwise_affine", HR_ARG_BOOL, "True"),
      HR_OPT("bias", HR_ARG_BOOL, "True")},
     HR_LAYER_ONE, build},
    {0},
};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_node n = hr_node_make(HR_OP_LAYERNORM_BWD, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->out[1];
    n.in[2] = f->out[2];
    n.nin = 3;
    if (f->nin > 1) n.in[n.nin++] = f->in[1];
    n.in[n.nin++] = dy;
    n.nout = 3;
    for (int i = 0; i < 3; i++) {
        bool acc;
        n.out[i] = hr_ad_grad_out(ad, i < f->nin ? f->in[i] : -1, &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0 && n.out[2] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* The residual Add before a LayerNorm, taken in: the Add at s writes h (F32)
 * that the LayerNorm at s+1 reads as x, its inputs a float each (the F32 one
 * first, so the node's activation type is F32). The norm keeps its inputs,
 * with a as in[0] and b last, and writes h as out[3]; the Add goes. */
static bool takes_add(const hr_graph *g, const hr_node *ad, const hr_node *ln) {
    if (ad->op != HR_OP_ADD || ad->nin != 2 || ad->nout != 1 || ad->out[0] < 0) return false;
    if (ln->op != HR_OP_LAYERNORM || ln->a.pre_add || ln->nout != 3 || ln->in[0] != ad->out[0]) return false;
    if (g->t[ad->out[0]].dtype != HR_F32 || ad->in[0] < 0 || ad->in[1] < 0) return false;
    return g->t[ad->in[0]].dtype == HR_F32 || g->t[ad->in[1]].dtype == HR_F32;
}

hr_status hr_norm_take_adds(hr_graph *g, int *n_fwd) {
    for (int s = 0; s + 1 < *n_fwd; s++) {
        hr_node *ad = &g->n[s], *ln = &g->n[s + 1];
        if (!takes_add(g, ad, ln)) continue;
        bool swap = g->t[ad->in[0]].dtype != HR_F32;
        ln->in[0] = ad->in[swap ? 1 : 0];
        ln->in[ln->nin++] = ad->in[swap ? 0 : 1];
        ln->out[3] = ad->out[0];
        ln->nout = 4;
        ln->a.pre_add = true;
        hr_graph_remove_node(g, s);
        (*n_fwd)--;
    }
    return HR_OK;
}

/* Does node q read or write tensor t? */
static bool touches(const hr_node *q, int t) {
    for (int i = 0; i < q->nin; i++)
        if (q->in[i] == t) return true;
    for (int i = 0; i < q->nout; i++)
        if (q->out[i] == t) return true;
    return false;
}

/* The Linear.backward at k: the LayerNorm.backward that last wrote its dy as
 * the half copy (output 3), or -1. That norm writes every row of dy, so the
 * columns it adds are the bias gradient the Linear would have summed. */
static int bias_taker(const hr_graph *g, int from, int k) {
    const hr_node *lb = &g->n[k];
    int dy = lb->in[2], db = lb->nout > 2 ? lb->out[2] : -1;
    if (db < 0 || dy < 0 || !hr_dtype_is_half(g->t[dy].dtype)) return -1;
    int p = k - 1;
    while (p >= from && !touches(&g->n[p], db) && !touches(&g->n[p], dy)) p--;
    if (p < from) return -1;
    const hr_node *pn = &g->n[p];
    if (pn->op != HR_OP_LAYERNORM_BWD || pn->nout != 4 || pn->out[3] != dy || pn->accum[3] || touches(pn, db))
        return -1;
    const hr_shape *s = &g->t[pn->in[0]].shape;
    int64_t cols = hr_numel_from(g, pn->in[0], s->ndim - pn->a.norm_dims);
    return cols == lb->a.out_f && hr_shape_numel(&g->t[db].shape) == cols ? p : -1;
}

hr_status hr_norm_take_bias_grads(hr_graph *g, int from) {
    for (int k = from; k < g->nn; k++) {
        hr_node *lb = &g->n[k];
        if (lb->op != HR_OP_LINEAR_BWD) continue;
        int p = bias_taker(g, from, k);
        if (p < 0) continue;
        hr_node *pn = &g->n[p];
        pn->out[4] = lb->out[2];
        pn->accum[4] = lb->accum[2];
        pn->nout = 5;
        pn->a.post_bias = true;
        lb->out[2] = -1;
        lb->accum[2] = false;
    }
    return HR_OK;
}

/* weight 1, bias 0, as nn.LayerNorm.reset_parameters */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    float c = slot == 1 ? 1.0f : 0.0f;
    int64_t k = hr_shape_numel(&g->t[n->in[slot]].shape);
    for (int64_t i = 0; i < k; i++) v[i] = c;
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_layernorm_args *l = &a->ln;
    const hr_shape *s = &g->t[n->in[0]].shape;
    l->cols = hr_numel_from(g, n->in[0], s->ndim - n->a.norm_dims);
    l->rows = l->cols ? hr_shape_numel(s) / l->cols : 0;
    l->eps = n->a.eps;
    l->x = hr_ptr(ptr, n->in[0]);
    if (n->op == HR_OP_LAYERNORM) {
        int nin = n->nin;
        if (n->a.pre_add) {
            int b = n->in[--nin];
            l->add_a = l->x, l->add_a_dt = g->t[n->in[0]].dtype;
            l->add_b = hr_ptr(ptr, b), l->add_b_dt = g->t[b].dtype;
            l->x = l->sum = hr_ptr(ptr, n->out[3]);
        }
        if (nin > 1) l->gamma = hr_ptr(ptr, n->in[1]);
        if (nin > 2) l->beta = hr_ptr(ptr, n->in[2]);
        l->y = hr_ptr(ptr, n->out[0]);
        l->y_dt = g->t[n->out[0]].dtype;
        if (n->nout > 2) l->mean = hr_ptr(ptr, n->out[1]), l->rstd = hr_ptr(ptr, n->out[2]);
        return;
    }
    l->saved_mean = hr_ptr(ptr, n->in[1]);
    l->saved_rstd = hr_ptr(ptr, n->in[2]);
    if (n->nin > 4) l->gamma = hr_ptr(ptr, n->in[3]);
    l->dy = hr_ptr(ptr, n->in[n->nin - 1]);
    l->dy_dt = g->t[n->in[n->nin - 1]].dtype;
    l->dx = hr_ptr(ptr, n->out[0]);
    l->dgamma = hr_ptr(ptr, n->out[1]);
    l->dbeta = hr_ptr(ptr, n->out[2]);
    l->acc_dx = n->accum[0], l->acc_dgamma = n->accum[1], l->acc_dbeta = n->accum[2];
    if (n->nout > 3 && n->out[3] >= 0) l->dx_half = hr_ptr(ptr, n->out[3]), l->dx_half_dt = g->t[n->out[3]].dtype;
    if (n->nout > 4 && n->out[4] >= 0) l->dbias = hr_ptr(ptr, n->out[4]), l->acc_dbias = n->accum[4];
}

/* A row is read twice (its statistics, then y; the backward's sums, then dx). */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    bool bwd = n->op == HR_OP_LAYERNORM_BWD;
    double x = (double)hr_shape_numel(&g->t[n->in[0]].shape);
    w->flops = x * (bwd ? 10 : 8);
    double again = hr_work_tensor_bytes(g, n->in[0]) + (bwd ? hr_work_tensor_bytes(g, n->in[n->nin - 1]) : 0);
    w->bytes = hr_work_io_bytes(g, n) + again;
}

/* Not in place: the kernels read a row's dy (or x) again after writing parts of it. */
const hr_op_desc hr_opdesc_layernorm = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .init = init, .train_outputs = true,
    .autocast = HR_AC_FP32, .half_out = true, .work = work};
const hr_op_desc hr_opdesc_layernorm_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .half_dx_copy = true, .work = work};
