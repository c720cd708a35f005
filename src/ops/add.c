/* add.c — Add, the residual join of two layers' outputs of one shape; its
 * backward passes dy on to both (Copy nodes the planner turns into views). */
#include "ops/ops.h"

/* Add: in {a, b}, out {y}; y may take a's bytes. */
int hr_add(hr_model_t *m, const char *name, int a, int b) {
    if (!hr_model_check_tensor(m, a, "Add") || !hr_model_check_tensor(m, b, "Add")) return -1;
    int L = hr_model_begin_layer(m, name, "Add");
    if (L < 0) return -1;
    char sa[64], sb[64];
    if (!hr_shape_eq(&m->g.t[a].shape, &m->g.t[b].shape))
        return hr_build_fail(m, L, HR_ERR_SHAPE, "cannot add %s (%s) and %s (%s): the shapes differ", m->g.t[a].name,
                             hr_shape_str(&m->g.t[a].shape, sa, sizeof sa), m->g.t[b].name,
                             hr_shape_str(&m->g.t[b].shape, sb, sizeof sb));
    hr_node n = hr_node_make(HR_OP_ADD, L);
    n.in[0] = a;
    n.in[1] = b;
    n.nin = 2;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[a].shape);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

/* Add(a): the previous output + a; Add(a, b): a + b. The parser gives the
 * previous output as x[0] and the layers named as x[1..]. */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    int refs = c->nx - 1;
    if (refs < 1 || refs > 2)
        return hr_model_fail(m, HR_ERR_PARSE, "Add takes one layer name (added to the previous output) or two, got %d",
                             refs);
    return refs == 1 ? hr_add(m, name, c->x[0], c->x[1]) : hr_add(m, name, c->x[1], c->x[2]);
}

static const hr_layer_sig layers[] = {{"Add", {{0}}, HR_LAYER_REFS, build}, {0}};

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_status st = hr_ad_copy(ad, f->layer, dy, f->in[0]);
    return st ? st : hr_ad_copy(ad, f->layer, dy, f->in[1]);
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    a->add.a = hr_ptr(ptr, n->in[0]);
    a->add.b = hr_ptr(ptr, n->in[1]);
    a->add.y = hr_ptr(ptr, n->out[0]);
    a->add.n = hr_shape_numel(&g->t[n->out[0]].shape);
    a->add.ta = g->t[n->in[0]].dtype;
    a->add.tb = g->t[n->in[1]].dtype;
    a->add.ty = g->t[n->out[0]].dtype;
    /* one half input (mixed precision's residual join): the node is a half
     * node, so a backend without a mixed kernel (the CPU's) gets F32 copies
     * of the half input (node.c) instead of reading its bytes as floats */
    if (hr_dtype_is_half(a->add.tb)) a->dt = a->add.tb;
    if (hr_dtype_is_half(a->add.ta)) a->dt = a->add.ta;
}

static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    w->flops = (double)hr_shape_numel(&g->t[n->out[0]].shape);
    w->bytes = hr_work_io_bytes(g, n);
}

const hr_op_desc hr_opdesc_add = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .inplace = true, .autocast = HR_AC_PROMOTE_READS,
    .work = work};
