/* concat.c — Concat along channels (torch.cat(dim=1)) of two or more layers'
 * outputs; its backward hands each input its slice of dy. */
#include "ops/ops.h"

/* Concat: in {x1..xk (N,Ci,...)}, out {y (N,sum Ci,...)}; backward: one
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

/* Concat(a, b, ...): the layers named (x[1..]; x[0] is the previous output) */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    if (c->nx - 1 < 2) return hr_model_fail(m, HR_ERR_PARSE, "Concat takes two or more layer names, got %d", c->nx - 1);
    return hr_concat(m, name, c->nx - 1, c->x + 1);
}

static const hr_layer_sig layers[] = {{"Concat", {{0}}, HR_LAYER_REFS, build}, {0}};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
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

/* inner: the values a sample-channel holds (H*W for images, 1 for vectors) */
static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_concat_args *c = &a->cat;
    int wide = n->op == HR_OP_CONCAT ? n->out[0] : n->in[0]; /* y or dy */
    const hr_shape *ys = &g->t[wide].shape;
    c->N = ys->d[0], c->CY = ys->d[1], c->inner = hr_numel_from(g, wide, 2);
    if (n->op == HR_OP_CONCAT) {
        c->k = n->nin;
        for (int i = 0; i < n->nin; i++) {
            c->x[i] = hr_ptr(ptr, n->in[i]);
            c->c[i] = g->t[n->in[i]].shape.d[1];
        }
        c->y = hr_ptr(ptr, n->out[0]);
        return;
    }
    c->dy = hr_ptr(ptr, n->in[0]);
    c->dx = hr_ptr(ptr, n->out[0]);
    c->offset = n->a.offset;
    c->C = g->t[n->out[0]].shape.d[1];
    c->acc = n->accum[0];
}

/* Copies only; the backward reads just its input's slice of dy. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double dx = hr_work_tensor_bytes(g, n->out[0]);
    w->flops = 0;
    w->bytes = n->op == HR_OP_CONCAT ? hr_work_io_bytes(g, n) : dx * (n->accum[0] ? 3 : 2);
}

const hr_op_desc hr_opdesc_concat = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .autocast = HR_AC_PROMOTE, .work = work};
const hr_op_desc hr_opdesc_concat_bwd = {.unpack = unpack, .work = work};
