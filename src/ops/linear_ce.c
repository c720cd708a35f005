/* linear_ce.c — LinearCrossEntropy: a language model's head (Linear without a
 * bias) and its CrossEntropyLoss as one node, which the program builder
 * makes from the two when nothing else reads the logits. A GPT-2 step at
 * batch 16 then holds no (16,384 x 50,257) logits (1.6 GB in bf16) nor their
 * gradient: the node makes them a piece of rows at a time in its scratch,
 * keeps each row's log-sum-exp, and its backward makes each piece again. The
 * values are the unfused pair's: the logits and their gradient are rounded
 * to the type the Linear wrote them in. */
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

/* The loss node `loss_node` (CrossEntropyLoss) right after a Linear without a
 * bias whose per-position logits (batch, time, classes) it alone reads: the
 * two become one LinearCrossEntropy at the Linear's place, the loss node
 * goes; anything else is left as it is. */
hr_status hr_linear_ce_fuse(hr_graph *g, int loss_node) {
    if (loss_node < 1 || loss_node >= g->nn) return HR_OK;
    hr_node *l = &g->n[loss_node], *k = &g->n[loss_node - 1];
    if (l->op != HR_OP_CROSS_ENTROPY || k->op != HR_OP_LINEAR || k->nin != 2 || k->out[0] != l->in[0]) return HR_OK;
    int logits = l->in[0];
    const hr_tensor *lt = &g->t[logits];
    /* a class a sample: small logits, nothing to save */
    if (lt->shape.ndim < 3 || hr_graph_read_elsewhere(g, logits, loss_node)) return HR_OK;
    hr_shape rows = lt->shape;
    rows.ndim--;
    char nm[300];
    snprintf(nm, sizeof nm, "%s.lse", g->l[k->layer].name);
    int lse = hr_graph_add_tensor(g, nm, HR_F32, rows, lt->batched, HR_T_ACT, k->layer);
    if (lse < 0) return HR_ERR_OOM;
    k->op = HR_OP_LINEAR_CE;
    k->in[2] = l->in[1];
    k->nin = 3;
    k->out[0] = l->out[0];
    k->out[1] = lse;
    k->nout = 2;
    memmove(&g->n[loss_node], &g->n[loss_node + 1], sizeof(hr_node) * (size_t)(g->nn - loss_node - 1));
    g->nn--;
    return HR_OK;
}

/* in {x, W, labels, lse}, out {dx, dW} */
static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    hr_node n = hr_node_make(HR_OP_LINEAR_CE_BWD, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.in[2] = f->in[2];
    n.in[3] = f->out[1];
    n.nin = 4;
    n.nout = 2;
    for (int i = 0; i < 2; i++) {
        bool acc;
        n.out[i] = hr_ad_grad_out(ad, f->in[i], &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
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
    if (n->op == HR_OP_LINEAR_CE) {
        l->loss = hr_ptr(ptr, n->out[0]);
        l->lse = hr_ptr(ptr, n->out[1]);
        return;
    }
    l->lse = hr_ptr(ptr, n->in[3]);
    l->dx = hr_ptr(ptr, n->out[0]);
    l->dw = hr_ptr(ptr, n->out[1]);
    l->acc_dx = n->accum[0];
    l->acc_dw = n->accum[1];
    l->scale = si ? si->loss_scale : 1.0f;
}

/* The product (2 N in out) once forward; again, with dx and dW, backward;
 * the loss's few flops an element of each piece. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_linear_ce_args *l = &a.lce;
    double prod = 2.0 * (double)l->N * (double)l->in * (double)l->out, ce = 8.0 * (double)l->N * (double)l->out;
    if (n->op == HR_OP_LINEAR_CE)
        w->flops = prod + ce;
    else
        w->flops = prod * (1 + (l->dx ? 1 : 0) + (l->dw ? 1 : 0)) + ce;
    w->bytes = hr_work_io_bytes(g, n) + 2.0 * (double)l->N * (double)l->out * hr_dtype_size(l->logits_dt);
    w->matmul = true;
}

/* The weight's initial values are the Linear's it replaced (nn.Linear's
 * default): an untied head starts where the unfused pair would. */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    hr_init_fan_in(&g->t[n->in[1]], hr_shape_numel(&g->t[n->in[slot]].shape), seed, stream, v);
}

/* Made after autocast, in its types: x and W half under mixed precision,
 * the loss and lse F32. No gradient reaches the labels. */
const hr_op_desc hr_opdesc_linear_ce = {.backward = backward,
                                        .unpack = unpack,
                                        .init = init,
                                        .grad_inputs = 0x3,
                                        .autocast = HR_AC_READS_HALF,
                                        .work = work};
/* dx last: it may take x's bytes */
const hr_op_desc hr_opdesc_linear_ce_bwd = {.unpack = unpack, .inplace = true, .autocast = HR_AC_READS_HALF, .work = work};
