/* optim.c — the update's ops: the squared gradient norm (clipping), SGD and
 * Adam/AdamW; compile builds their nodes, one per trainable parameter. */
#include "ops/ops.h"

#include <math.h>
#include <string.h>

/* GradNorm: in {g}, out {sqnorm (1)}: adds sum(g^2) (accum after the first) */
static void unpack_sqnorm(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    a->sq.g = hr_ptr(ptr, n->in[0]);
    a->sq.out = hr_ptr(ptr, n->out[0]);
    a->sq.n = hr_shape_numel(&g->t[n->in[0]].shape);
    a->sq.acc = n->accum[0];
}

/* SGD: in {param, grad, momentum_buffer or -1, -, sqnorm?};
 * Adam: in {param, grad, exp_avg, exp_avg_sq, sqnorm?}; either out {} or,
 * under mixed precision, {the parameter's held half copy} (plan/autocast.c). */
static void unpack_update(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_optim_args *o = &a->opt;
    o->p = hr_ptr(ptr, n->in[0]);
    o->g = hr_ptr(ptr, n->in[1]);
    o->s1 = hr_ptr(ptr, n->in[2]);
    o->s2 = hr_ptr(ptr, n->in[3]);
    o->n = hr_shape_numel(&g->t[n->in[0]].shape);
    o->copy = n->nout > 0 ? hr_ptr(ptr, n->out[0]) : NULL;
    o->copy_dt = n->nout > 0 ? g->t[n->out[0]].dtype : HR_F32;
    if (si) {
        o->o = si->optim;
        if (o->o.decay_matrices_only && g->t[n->in[0]].shape.ndim < 2) o->o.weight_decay = 0;
        o->lr = si->lr;
        o->t = si->t;
        if (si->sqnorm >= 0 && si->optim.clip_norm > 0) o->sqnorm = hr_ptr(ptr, si->sqnorm);
        o->dv = si->dvars;
    }
}

hr_step_vars hr_step_vars_make(const hr_optim_t *o, int64_t t, float lr) {
    hr_step_vars v;
    memset(&v, 0, sizeof v);
    v.lr = lr;
    double bc1 = 1.0 - pow((double)o->beta1, (double)t), bc2 = 1.0 - pow((double)o->beta2, (double)t);
    v.adam_step = (float)(v.lr / bc1);
    v.adam_bc2s = (float)sqrt(bc2);
    v.sgd_first = t == 1;
    v.t = (uint64_t)t;
    return v;
}

/* GradNorm reads g once (a multiply-add a value). An update reads g and
 * rewrites the parameter and its state in place: SGD 3 arrays (5 with
 * momentum), Adam 7 (about 16 flops a value, the square root counted as 4),
 * and writes the half copy where it holds one. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double v = (double)hr_shape_numel(&g->t[n->in[0]].shape), f32 = 4 * v;
    bool momentum = n->op == HR_OP_SGD && n->in[2] >= 0;
    if (n->op == HR_OP_GRAD_SQNORM) w->flops = 2 * v, w->bytes = f32;
    else if (n->op == HR_OP_ADAM) w->flops = 16 * v, w->bytes = 7 * f32;
    else w->flops = (momentum ? 5 : 2) * v, w->bytes = (momentum ? 5 : 3) * f32;
    if (n->op != HR_OP_GRAD_SQNORM && n->nout > 0) w->bytes += hr_work_tensor_bytes(g, n->out[0]); /* the copy */
}

const hr_op_desc hr_opdesc_grad_sqnorm = {.unpack = unpack_sqnorm, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_sgd = {.unpack = unpack_update, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_adam = {.unpack = unpack_update, .autocast = HR_AC_FP32, .work = work};
