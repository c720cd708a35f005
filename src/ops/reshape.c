/* reshape.c — Flatten and Reshape (views of their input's bytes) and Copy,
 * the node that passes a gradient on unchanged (Add's and Reshape's backward). */
#include "ops/ops.h"

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

static int build_flatten(hr_model_t *m, const char *name, const hr_layer_call *c) {
    return hr_flatten(m, name, c->x[0]);
}

/* Reshape(d1, d2, ...): sizes without the batch; one may be -1 */
static int build_reshape(hr_model_t *m, const char *name, const hr_layer_call *c) {
    int64_t d[HR_MAX_DIMS], known = 1, numel = 1;
    int infer = -1, nd = hr_tensor_ndim(m, c->x[0]);
    if (c->nints < 1 || c->nints > 3)
        return hr_model_fail(m, HR_ERR_PARSE, "Reshape takes 1 to 3 sizes (without the batch), got %d", c->nints);
    for (int i = 0; i < c->nints; i++) {
        int64_t v = c->ints[i];
        if (v == 0 || v < -1 || (v == -1 && infer >= 0))
            return hr_model_fail(m, HR_ERR_PARSE, "Reshape sizes must be positive integers (one may be -1), got %lld",
                                 (long long)v);
        if (v == -1) infer = i;
        else if (!hr_mul_ok(known, v, &known)) return hr_model_fail(m, HR_ERR_PARSE, "Reshape sizes too large");
        d[i] = v;
    }
    for (int i = 0; i < nd; i++) numel *= hr_tensor_dim(m, c->x[0], i);
    if (infer >= 0) d[infer] = numel % known ? -1 : numel / known;
    if (infer >= 0 && d[infer] < 0)
        return hr_model_fail(m, HR_ERR_SHAPE, "Reshape: %lld values a sample do not divide into sizes of %lld",
                             (long long)numel, (long long)known);
    return hr_reshape(m, name, c->x[0], c->nints, d);
}

static const hr_layer_sig layers[] = {
    {"Flatten", {HR_FIX("start_dim", HR_ARG_INT, "1"), HR_FIX("end_dim", HR_ARG_INT, "-1")}, HR_LAYER_ONE, build_flatten},
    {"Reshape", {{0}}, HR_LAYER_VARARGS, build_reshape},
    {0},
};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    return dy < 0 ? HR_OK : hr_ad_copy(ad, f->layer, dy, f->in[0]);
}

/* in {x}, out {y}: y = x (added with accum); nothing to do when y is a view of x */
static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    a->copy.x = hr_ptr(ptr, n->in[0]);
    a->copy.y = hr_ptr(ptr, n->out[0]);
    a->copy.n = hr_shape_numel(&g->t[n->out[0]].shape);
    a->copy.acc = n->accum[0];
}

/* A view costs nothing: Reshape always, a Copy whose output the plan put
 * on its input's bytes (an unplanned graph has no bytes placed). */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    const hr_tensor *x = &g->t[n->in[0]], *y = &g->t[n->out[0]];
    bool view = n->op == HR_OP_RESHAPE || (x->bytes && y->bytes && x->offset == y->offset);
    w->flops = view || !n->accum[0] ? 0 : (double)hr_shape_numel(&y->shape);
    w->bytes = view ? 0 : hr_work_io_bytes(g, n);
}

const hr_op_desc hr_opdesc_reshape = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .view = true, .work = work};
/* A Copy may take its input's bytes where the input dies (the last of
 * Add's two gradient copies, a Reshape's backward): then nothing runs. */
const hr_op_desc hr_opdesc_copy = {.unpack = unpack, .inplace = true, .work = work};
