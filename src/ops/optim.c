/* optim.c — the update's ops: the squared gradient norm (clipping), SGD and
 * Adam/AdamW; compile builds their nodes, one per trainable parameter. */
#include "ops/ops.h"

/* GradNorm: in {g}, out {sqnorm (1)}: adds sum(g^2) (accum after the first) */
static void unpack_sqnorm(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    a->sq.g = hr_ptr(ptr, n->in[0]);
    a->sq.out = hr_ptr(ptr, n->out[0]);
    a->sq.n = hr_shape_numel(&g->t[n->in[0]].shape);
    a->sq.acc = n->accum[0];
}

/* SGD: in {param, grad, momentum_buffer or -1, -, sqnorm?};
 * Adam: in {param, grad, exp_avg, exp_avg_sq, sqnorm?}. */
static void unpack_update(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_optim_args *o = &a->opt;
    o->p = hr_ptr(ptr, n->in[0]);
    o->g = hr_ptr(ptr, n->in[1]);
    o->s1 = hr_ptr(ptr, n->in[2]);
    o->s2 = hr_ptr(ptr, n->in[3]);
    o->n = hr_shape_numel(&g->t[n->in[0]].shape);
    if (si) {
        o->o = si->optim;
        o->lr = si->lr;
        o->t = si->t;
        if (si->sqnorm >= 0 && si->optim.clip_norm > 0) o->sqnorm = hr_ptr(ptr, si->sqnorm);
    }
}

const hr_op_desc hr_opdesc_grad_sqnorm = {.unpack = unpack_sqnorm, .autocast = HR_AC_FP32};
const hr_op_desc hr_opdesc_sgd = {.unpack = unpack_update, .autocast = HR_AC_FP32};
const hr_op_desc hr_opdesc_adam = {.unpack = unpack_update, .autocast = HR_AC_FP32};
