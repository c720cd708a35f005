/* loss.c — CrossEntropyLoss and MSELoss: the model's last node, its labels or
 * targets input, the backward node that starts the backward pass. */
#include "ops/ops.h"

/* CrossEntropyLoss: in {logits (N,C), labels (N) int32}, out {loss (1)}, mean;
 * with logits (N,T,C) and labels (N,T), the mean over every position (as
 * PyTorch's on logits.view(-1, C) and labels.view(-1)).
 * backward: in {logits, labels}, out {dlogits} = (softmax - onehot) / N. */
int hr_loss_cross_entropy(hr_model_t *m, int logits, int64_t nclasses) {
    if (!hr_model_check_tensor(m, logits, "CrossEntropyLoss")) return -1;
    int L = hr_model_begin_layer(m, "loss", "CrossEntropyLoss");
    if (L < 0) return -1;
    const hr_tensor *x = &m->g.t[logits];
    char a[64];
    if (x->shape.ndim != 1 && x->shape.ndim != 2)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "CrossEntropyLoss takes logits (batch, classes), or (batch, time, "
                             "classes) for a class at every position, but gets per-sample shape %s; add Flatten() and "
                             "a Linear layer", hr_shape_str(&x->shape, a, sizeof a));
    int cd = x->shape.ndim - 1;
    if (nclasses <= 0) nclasses = x->shape.d[cd];
    if (x->shape.d[cd] != nclasses)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "%lld classes expected but the logits have %lld", (long long)nclasses,
                             (long long)x->shape.d[cd]);
    /* one label a sample, or one a position: (batch) or (batch, time) */
    hr_shape ls = cd ? hr_shape_make(1, (int64_t[]){x->shape.d[0]}) : hr_shape_make(0, NULL);
    int lab = hr_graph_add_tensor(&m->g, "labels", HR_I32, ls, true, HR_T_LABEL, -1);
    if (lab < 0) return -1;
    hr_node n = hr_node_make(HR_OP_CROSS_ENTROPY, L);
    n.a.nclasses = nclasses;
    n.in[0] = logits;
    n.in[1] = lab;
    n.nin = 2;
    n.out[0] = hr_graph_add_tensor(&m->g, "loss", HR_F32, hr_shape_make(1, (int64_t[]){1}), false, HR_T_ACT, L);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    m->label = lab;
    m->output = logits;
    if (hr_graph_add_node(&m->g, &n) < 0) return -1;
    m->loss = n.out[0];
    m->g.l[L].out = m->loss;
    return m->loss;
}

/* MSELoss: in {pred, target (same shape)}, out {loss (1)}, mean over all
 * elements; backward: in {pred, target}, out {dpred} = 2 (pred - target) / numel. */
int hr_loss_mse(hr_model_t *m, int pred) {
    if (!hr_model_check_tensor(m, pred, "MSELoss")) return -1;
    int L = hr_model_begin_layer(m, "loss", "MSELoss");
    if (L < 0) return -1;
    int tgt = hr_graph_add_tensor(&m->g, "targets", HR_F32, m->g.t[pred].shape, true, HR_T_LABEL, -1);
    if (tgt < 0) return -1;
    hr_node n = hr_node_make(HR_OP_MSE, L);
    n.in[0] = pred;
    n.in[1] = tgt;
    n.nin = 2;
    n.out[0] = hr_graph_add_tensor(&m->g, "loss", HR_F32, hr_shape_make(1, (int64_t[]){1}), false, HR_T_ACT, L);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    m->label = tgt;
    m->output = pred;
    if (hr_graph_add_node(&m->g, &n) < 0) return -1;
    m->loss = n.out[0];
    m->g.l[L].out = m->loss;
    return m->loss;
}

int64_t hr_model_classes(const hr_model_t *m) {
    if (!m || m->loss < 0) return 0;
    for (int i = 0; i < m->g.nn; i++)
        if (m->g.n[i].out[0] == m->loss) return m->g.n[i].op == HR_OP_CROSS_ENTROPY ? m->g.n[i].a.nclasses : 0;
    return 0;
}

/* `loss CrossEntropyLoss`: the previous layer gives (batch, classes) logits */
static int build_ce(hr_model_t *m, const char *name, const hr_layer_call *c) {
    int nd = hr_tensor_ndim(m, c->x[0]);
    if (nd != 1 && nd != 2)
        return hr_model_fail(m, HR_ERR_SHAPE, "CrossEntropyLoss takes (batch, classes) logits, or (batch, time, classes), "
                             "but the last layer gives a per-sample shape of %d dims; add Flatten() and a Linear layer", nd);
    return hr_loss_cross_entropy(m, c->x[0], hr_tensor_dim(m, c->x[0], nd - 1));
}
static int build_mse(hr_model_t *m, const char *name, const hr_layer_call *c) { return hr_loss_mse(m, c->x[0]); }

static const hr_layer_sig ce_layers[] = {
    {"CrossEntropyLoss", {HR_FIX("reduction", HR_ARG_STR, "'mean'"), HR_FIX("label_smoothing", HR_ARG_FLOAT, "0.0")},
     HR_LAYER_LOSS, build_ce},
    {0}};
static const hr_layer_sig mse_layers[] = {{"MSELoss", {HR_FIX("reduction", HR_ARG_STR, "'mean'")}, HR_LAYER_LOSS, build_mse},
                                          {0}};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    bool acc;
    hr_node n = hr_node_make(f->op == HR_OP_CROSS_ENTROPY ? HR_OP_CROSS_ENTROPY_BWD : HR_OP_MSE_BWD, f->layer);
    n.a = f->a;
    n.out[0] = hr_ad_grad_out(ad, f->in[0], &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK;
    n.nout = 1;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.nin = 2;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* in {x, labels or targets}, out {loss} (forward) or {dx} (backward) */
static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_loss_args *l = &a->loss;
    const hr_shape *s = &g->t[n->in[0]].shape;
    bool ce = n->op == HR_OP_CROSS_ENTROPY || n->op == HR_OP_CROSS_ENTROPY_BWD;
    bool fwd = n->op == HR_OP_CROSS_ENTROPY || n->op == HR_OP_MSE;
    l->n = hr_shape_numel(s);
    l->C = s->ndim > 1 ? s->d[s->ndim - 1] : 1;
    l->N = l->n / (l->C ? l->C : 1); /* rows: one a sample, or one a position */
    l->x = hr_ptr(ptr, n->in[0]);
    if (ce)
        l->labels = hr_ptr(ptr, n->in[1]);
    else
        l->target = hr_ptr(ptr, n->in[1]);
    if (fwd) {
        l->loss = hr_ptr(ptr, n->out[0]);
    } else {
        l->dx = hr_ptr(ptr, n->out[0]);
        l->acc = n->accum[0];
        l->scale = si ? si->loss_scale : 1.0f;
    }
}

/* Cross-entropy: a log-softmax of each row (forward and backward); MSE: a
 * difference and its square, or its scaled copy. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    bool ce = n->op == HR_OP_CROSS_ENTROPY || n->op == HR_OP_CROSS_ENTROPY_BWD;
    w->flops = (ce ? 8 : 3) * (double)hr_shape_numel(&g->t[n->in[0]].shape);
    w->bytes = hr_work_io_bytes(g, n);
}

/* No gradient reaches the labels. */
/* Under autocast the cross-entropy reads the half logits themselves (with
 * F32 arithmetic inside) and its backward writes their gradient in their
 * type: the values of autocast's F32 copy and of the cast gradient, without
 * those two tensors of (positions x classes) F32. dlogits may take the
 * logits' bytes (where nothing reads them later): each row's statistics are
 * read before any of its dx is written, and each dx element from its own
 * logit. */
const hr_op_desc hr_opdesc_cross_entropy = {
    .layers = ce_layers, .backward = backward, .unpack = unpack, .grad_inputs = 0x1, .autocast = HR_AC_READS_HALF,
    .work = work};
const hr_op_desc hr_opdesc_cross_entropy_bwd = {
    .unpack = unpack, .inplace = true, .autocast = HR_AC_READS_HALF, .work = work};
const hr_op_desc hr_opdesc_mse = {
    .layers = mse_layers, .backward = backward, .unpack = unpack, .grad_inputs = 0x1, .autocast = HR_AC_FP32,
    .work = work};
const hr_op_desc hr_opdesc_mse_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .work = work};
