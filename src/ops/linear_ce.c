/* linear_ce.c — LinearCrossEntropy: a language model's head (Linear without a
 * bias) and its CrossEntropyLoss as one node, which the program builder
 * makes from the two when nothing else reads the logits. A GPT-2 step at
 * batch 16 then holds no (16,384 x 50,257) logits (1.6 GB in bf16) nor their
 * gradient: the node makes them a piece of rows at a time in its scratch.
 * The loss is the step's last forward node and its gradient's scale is known
 * before it runs, so each piece's gradient is formed while the piece is
 * there, and with it the piece's share of dx = dlogits W and dW = dlogits^T
 * x: the logits are made once, not again in the backward pass, which only
 * hands the two on (Copy nodes: dx in place, dW onto the saved one's bytes
 * unless gradients accumulate across micro-batches). The values are the
 * unfused pair's: the logits and their gradient are rounded to the type the
 * Linear wrote them in. */
#include "ops/ops.h"

#include <stdio.h>

/* The loss node `loss_node` (CrossEntropyLoss) right after a Linear without a
 * bias whose per-position logits (batch, time, classes) it alone reads: the
 * two become one LinearCrossEntropy at the Linear's place, the loss node
 * goes; anything else is left as it is. Outputs {loss, dW (F32, W's shape),
 * dx (x's type and shape)}; no dx when x is the model's input. */
hr_status hr_linear_ce_fuse(hr_graph *g, int loss_node) {
    if (loss_node < 1 || loss_node >= g->nn) return HR_OK;
    hr_node *l = &g->n[loss_node], *k = &g->n[loss_node - 1];
    if (l->op != HR_OP_CROSS_ENTROPY || k->op != HR_OP_LINEAR || k->nin != 2 || k->out[0] != l->in[0]) return HR_OK;
    int logits = l->in[0];
    const hr_tensor *lt = &g->t[logits];
    /* a class a sample: small logits, nothing to save */
    if (lt->shape.ndim < 3 || hr_graph_read_elsewhere(g, logits, loss_node)) return HR_OK;
    int x = k->in[0], w = k->in[1];
    char nm[300];
    snprintf(nm, sizeof nm, "%s.weight.grad.saved", g->l[k->layer].name);
    int dw = hr_graph_add_tensor(g, nm, HR_F32, g->t[w].shape, false, HR_T_ACT, k->layer);
    if (dw < 0) return HR_ERR_OOM;
    int dx = -1;
    if (g->t[x].kind != HR_T_INPUT) {
        snprintf(nm, sizeof nm, "%s.input.grad.saved", g->l[k->layer].name);
        dx = hr_graph_add_tensor(g, nm, g->t[x].dtype, g->t[x].shape, g->t[x].batched, HR_T_ACT, k->layer);
        if (dx < 0) return HR_ERR_OOM;
    }
    k = &g->n[loss_node - 1]; /* adding tensors leaves the nodes where they are; l too */
    k->op = HR_OP_LINEAR_CE;
    k->in[2] = l->in[1];
    k->nin = 3;
    k->out[0] = l->out[0];
    k->out[1] = dw;
    k->out[2] = dx;
    k->nout = dx >= 0 ? 3 : 2;
    hr_graph_remove_node(g, loss_node);
    return HR_OK;
}

/* The gradients are made: the backward pass passes them on. */
static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    hr_status st = hr_ad_copy(ad, f->layer, f->out[1], f->in[1]);
    if (!st && f->nout > 2) st = hr_ad_copy(ad, f->layer, f->out[2], f->in[0]);
    return st;
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_linear_ce_args *l = &a->lce;
    l->x = hr_ptr(ptr, n->in[0]);
    l->w = hr_ptr(ptr, n->in[1]);
    l->labels = hr_ptr(ptr, n->in[2]);
    l->in = n->a.in_f;
    l->out = n->a.out_f;
    l->N = hr_shape_numel(&g->t[n->in[0]].shape) / (n->a.in_f ? n->a.in_f : 1);
    l->logits_dt = g->t[n->in[0]].dtype;
    l->loss = hr_ptr(ptr, n->out[0]);
    l->dw = hr_ptr(ptr, n->out[1]);
    l->dx = n->nout > 2 ? hr_ptr(ptr, n->out[2]) : NULL;
    l->scale = si ? si->loss_scale : 1.0f;
}

/* The product (2 N in out) for the logits, again for dW and for dx; the
 * loss's few flops an element of each piece, the piece written, read and
 * written again as its gradient. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_linear_ce_args *l = &a.lce;
    double prod = 2.0 * (double)l->N * (double)l->in * (double)l->out, ce = 12.0 * (double)l->N * (double)l->out;
    w->flops = prod * (2 + (n->nout > 2 ? 1 : 0)) + ce;
    w->bytes = hr_work_io_bytes(g, n) + 3.0 * (double)l->N * (double)l->out * hr_dtype_size(l->logits_dt);
    w->matmul = true;
}

/* The weight's initial values are the Linear's it replaced (nn.Linear's
 * default): an untied head starts where the unfused pair would. */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    hr_init_fan_in(&g->t[n->in[1]], hr_shape_numel(&g->t[n->in[slot]].shape), seed, stream, v);
}

/* Made after autocast, in its types: x and W half under mixed precision,
 * the loss and dW F32, dx in x's type. No gradient reaches the labels. */
const hr_op_desc hr_opdesc_linear_ce = {.backward = backward,
                                        .unpack = unpack,
                                        .init = init,
                                        .grad_inputs = 0x3,
                                        .autocast = HR_AC_READS_HALF,
                                        .work = work};
