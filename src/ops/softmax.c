/* softmax.c — Softmax and LogSoftmax over the features of (batch, features):
 * shape rule, backward from the saved output, kernel arguments. */
#include "ops/ops.h"

/* in {x (N, C)}, out {y}; backward in {y, dy}, out {dx}. */
static int softmax_like(hr_model_t *m, const char *name, const char *type, hr_op op, int x) {
    if (x >= 0 && m && x < m->g.nt && m->g.t[x].shape.ndim != 1) {
        int L = hr_model_begin_layer(m, name, type);
        if (L < 0) return -1;
        return hr_build_fail(m, L, HR_ERR_SHAPE, "%s(dim=1) takes (batch, classes); add Flatten() before it", type);
    }
    return hr_build_unary(m, name, type, op, x, NULL);
}
int hr_softmax(hr_model_t *m, const char *name, int x) { return softmax_like(m, name, "Softmax", HR_OP_SOFTMAX, x); }
int hr_log_softmax(hr_model_t *m, const char *name, int x) {
    return softmax_like(m, name, "LogSoftmax", HR_OP_LOGSOFTMAX, x);
}

/* dim=1 (or -1 on (batch, features)) only */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c, bool lg) {
    int nd = hr_tensor_ndim(m, c->x[0]);
    if (c->a[0].i != 1 && !(c->a[0].i == -1 && nd == 1))
        return hr_model_fail(m, HR_ERR_UNSUPPORTED, "%s(dim=%lld): headroom supports only dim=1 (the features)",
                             lg ? "LogSoftmax" : "Softmax", (long long)c->a[0].i);
    return (lg ? hr_log_softmax : hr_softmax)(m, name, c->x[0]);
}
static int build_sm(hr_model_t *m, const char *name, const hr_layer_call *c) { return build(m, name, c, false); }
static int build_lsm(hr_model_t *m, const char *name, const hr_layer_call *c) { return build(m, name, c, true); }

static const hr_layer_sig sm_layers[] = {{"Softmax", {HR_OPT("dim", HR_ARG_INT, "1")}, HR_LAYER_ONE, build_sm}, {0}};
static const hr_layer_sig lsm_layers[] = {{"LogSoftmax", {HR_OPT("dim", HR_ARG_INT, "1")}, HR_LAYER_ONE, build_lsm}, {0}};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, f->op == HR_OP_SOFTMAX ? HR_OP_SOFTMAX_BWD : HR_OP_LOGSOFTMAX_BWD, f->out[0], -1);
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_softmax_args *s = &a->sm;
    const hr_shape *sh = &g->t[n->in[0]].shape;
    s->N = sh->d[0], s->C = sh->d[1];
    s->log = n->op == HR_OP_LOGSOFTMAX || n->op == HR_OP_LOGSOFTMAX_BWD;
    if (n->op == HR_OP_SOFTMAX || n->op == HR_OP_LOGSOFTMAX) {
        s->x = hr_ptr(ptr, n->in[0]);
        s->out = hr_ptr(ptr, n->out[0]);
        return;
    }
    s->y = hr_ptr(ptr, n->in[0]);
    s->dy = hr_ptr(ptr, n->in[1]);
    s->dx = hr_ptr(ptr, n->out[0]);
    s->acc = n->accum[0];
}

/* Forward: the row's maximum, exponentials, their sum, the division (an
 * exponential counted as about 5); backward: a dot product and a scale. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    bool fwd = n->op == HR_OP_SOFTMAX || n->op == HR_OP_LOGSOFTMAX;
    w->flops = (fwd ? 8 : 4) * (double)hr_shape_numel(&g->t[n->in[0]].shape);
    w->bytes = hr_work_io_bytes(g, n);
}

const hr_op_desc hr_opdesc_softmax = {
    .layers = sm_layers, .backward = backward, .unpack = unpack, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_softmax_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_logsoftmax = {
    .layers = lsm_layers, .backward = backward, .unpack = unpack, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_logsoftmax_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .work = work};
