/* precision.c — the ops of mixed precision: Cast (a tensor in another
 * element type: the half copies that autocast makes before a matrix product,
 * the fp32 copies before a loss or a norm) and GradScaler.unscale (fp16's
 * gradients divided by the loss scale, with the inf/NaN check that decides
 * whether the step is taken). No model-file layer writes them: the program
 * builder inserts them (plan/autocast.c, plan/program.c). */
#include "ops/ops.h"

/* Cast: in {x}, out {y}; the types are the tensors'. Its backward casts dy
 * back to x's type. A weight's half copy has no gradient of its own: the
 * products write the weight's F32 gradient directly (hr_ad_grad_out). */
static hr_status cast_backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0 || ad->g->t[f->out[0]].kind == HR_T_WCOPY) return HR_OK;
    return hr_ad_copy(ad, f->layer, dy, f->in[0]); /* a Cast back to x's type */
}

static void cast_unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    (void)si;
    hr_cast_args *c = &a->cast;
    c->x = hr_ptr(ptr, n->in[0]);
    c->y = hr_ptr(ptr, n->out[0]);
    c->n = hr_shape_numel(&g->t[n->in[0]].shape);
    c->from = g->t[n->in[0]].dtype;
    c->to = g->t[n->out[0]].dtype;
    c->acc = n->accum[0];
}

/* GradScaler.unscale: in {grad}, out {found_inf}; the gradient is scaled in
 * place (it is the optimizer's input next). The first of these nodes writes
 * found_inf, the others add into it (accum). */
static void unscale_unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_unscale_args *u = &a->unscale;
    u->g = hr_ptr(ptr, n->in[0]);
    u->n = hr_shape_numel(&g->t[n->in[0]].shape);
    u->inv_scale = si ? si->inv_scale : 1.0f;
    u->found_inf = hr_ptr(ptr, n->out[0]);
    u->acc = n->accum[0];
}

/* Cast: a conversion a value; unscale rewrites g in place (a multiply and
 * a finiteness test a value). */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double v = (double)hr_shape_numel(&g->t[n->in[0]].shape);
    w->flops = n->op == HR_OP_CAST ? v : 2 * v;
    w->bytes = hr_work_io_bytes(g, n) + (n->op == HR_OP_CAST ? 0 : hr_work_tensor_bytes(g, n->in[0]));
}

const hr_op_desc hr_opdesc_cast = {.per_sample = HR_SAMPLES_EACH, .backward = cast_backward, .unpack = cast_unpack, .work = work};
const hr_op_desc hr_opdesc_unscale = {.unpack = unscale_unpack, .autocast = HR_AC_FP32, .work = work};
