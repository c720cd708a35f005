/* dropout.c — Dropout (nn.Dropout): its keep decisions, the same on every
 * backend from (seed, layer, step, element) and drawn again by the backward
 * (no mask is kept), the backward node and kernel arguments. */
#include "ops/ops.h"

/* Dropout: in {x}, out {y}; backward in {dy}, out {dx}, the decisions drawn
 * again (PyTorch keeps a byte a value for them). In inference the node copies. */
int hr_dropout(hr_model_t *m, const char *name, int x, float p) {
    if (!hr_model_check_tensor(m, x, "Dropout")) return -1;
    int L = hr_model_begin_layer(m, name, "Dropout");
    if (L < 0) return -1;
    if (!(p >= 0.0f && p < 1.0f)) return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "p must be in [0, 1), got %g", p);
    hr_node n = hr_node_make(HR_OP_DROPOUT, L);
    n.a.p = p;
    n.a.seed = (uint64_t)L;
    n.in[0] = x;
    n.nin = 1;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[x].shape);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    if (!(c->a[0].f >= 0 && c->a[0].f < 1))
        return hr_model_fail(m, HR_ERR_PARSE, "Dropout p must be in [0, 1), got %.*s", c->a[0].len, c->a[0].src);
    return hr_dropout(m, name, c->x[0], (float)c->a[0].f);
}

static const hr_layer_sig layers[] = {
    {"Dropout", {HR_OPT("p", HR_ARG_FLOAT, "0.5"), HR_OPT("inplace", HR_ARG_BOOL, "False")}, HR_LAYER_ONE, build},
    {0},
};

static hr_status backward(hr_autodiff *ad, const hr_node *f) { return hr_ad_simple(ad, f, HR_OP_DROPOUT_BWD, -1, -1); }

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_dropout_args *d = &a->drop;
    d->p = n->a.p;
    d->scale = 1.0f / (1.0f - n->a.p);
    d->train = n->a.train;
    d->seed = si ? si->seed : 0;
    /* the mask of step t+1 (t: steps taken): a stream per layer and step */
    d->stream_base = n->a.seed << 32;
    d->stream = d->stream_base ^ (uint64_t)((si ? si->t : 0) + 1);
    d->dv = si ? si->dvars : NULL;
    /* x and dy have one shape: both directions number the values alike, a
     * micro-batch's continuing the whole batch's */
    d->n = hr_shape_numel(&g->t[n->in[0]].shape);
    d->first = si ? (uint64_t)si->sample0 * (uint64_t)hr_numel_from(g, n->in[0], 1) : 0;
    if (n->op == HR_OP_DROPOUT) {
        d->x = hr_ptr(ptr, n->in[0]);
        d->y = hr_ptr(ptr, n->out[0]);
        return;
    }
    d->dy = hr_ptr(ptr, n->in[0]);
    d->dx = hr_ptr(ptr, n->out[0]);
    d->acc = n->accum[0];
}

/* Training hashes a random number a value (about 12 flops), in both
 * directions; inference copies. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double x = (double)hr_shape_numel(&g->t[n->in[0]].shape);
    w->flops = x * (n->op == HR_OP_DROPOUT_BWD ? 14 : n->a.train ? 13 : 0);
    w->bytes = hr_work_io_bytes(g, n);
}

const hr_op_desc hr_opdesc_dropout = {
    .per_sample = HR_SAMPLES_INFER,
    .layers = layers, .backward = backward, .unpack = unpack, .grad_inputs = 0x1, .inplace = true, .work = work};
const hr_op_desc hr_opdesc_dropout_bwd = {.unpack = unpack, .inplace = true, .inplace_last = true, .work = work};
