/* ops.c — the op table and the autodiff helpers every op family uses. */
#include "ops/ops.h"

#include <stdarg.h>
#include <string.h>

const hr_op_info hr_ops[HR_OP_COUNT] = {
    [HR_OP_LINEAR] = {hr_linear_backward, false},
    [HR_OP_CONV2D] = {hr_conv2d_backward, false},
    [HR_OP_RELU] = {hr_relu_backward, true},
    [HR_OP_MAXPOOL] = {hr_pool_backward, false},
    [HR_OP_AVGPOOL] = {hr_pool_backward, false},
    [HR_OP_BATCHNORM] = {hr_batchnorm_backward, false},
    [HR_OP_DROPOUT] = {hr_dropout_backward, true},
    [HR_OP_RESHAPE] = {hr_reshape_backward, false},
    [HR_OP_ADD] = {hr_add_backward, true},
    [HR_OP_CONCAT] = {hr_concat_backward, false},
    [HR_OP_SOFTMAX] = {hr_softmax_backward, false},
    [HR_OP_LOGSOFTMAX] = {hr_softmax_backward, false},
    [HR_OP_CROSS_ENTROPY] = {hr_loss_backward, false},
    [HR_OP_MSE] = {hr_loss_backward, false},
    [HR_OP_RELU_BWD] = {NULL, true, true},
    [HR_OP_DROPOUT_BWD] = {NULL, true, true},
    [HR_OP_LINEAR_BWD] = {NULL, true, false}, /* dx over x: the kernels write dx last */
    /* dx over dy: per channel, the kernels finish the sums over dy before they
     * write dx, and each element of dx reads only its own element of dy */
    [HR_OP_BATCHNORM_BWD] = {NULL, true, true},
};

int hr_ad_grad_out(hr_autodiff *ad, int x, bool *accum) {
    *accum = false;
    if (x < 0 || !ad->needs_grad[x]) return -1;
    if (ad->grad[x] >= 0) {
        *accum = true;
        return ad->grad[x];
    }
    hr_tensor *t = &ad->g->t[x];
    char nm[300];
    snprintf(nm, sizeof nm, "%s.grad", t->name);
    bool param = t->kind == HR_T_PARAM;
    int gt = hr_graph_add_tensor(ad->g, nm, t->dtype, ad->g->t[x].shape, ad->g->t[x].batched,
                                 param ? HR_T_GRAD : HR_T_ACT_GRAD, ad->g->t[x].layer);
    if (gt < 0) return -2;
    ad->g->t[gt].source = x;
    ad->g->t[x].grad = gt;
    ad->grad[x] = gt;
    return gt;
}

int hr_ad_grad_in(const hr_autodiff *ad, int y) { return y >= 0 ? ad->grad[y] : -1; }

int hr_ad_emit(hr_autodiff *ad, hr_node *n) {
    /* An output is accumulated iff an earlier node already wrote that gradient. */
    for (int i = 0; i < n->nout; i++) {
        int o = n->out[i];
        if (o < 0) continue;
        n->accum[i] = ad->written[o];
    }
    int k = hr_graph_add_node(ad->g, n);
    if (k < 0) return -1;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] >= 0) ad->written[n->out[i]] = true;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0) ad->read[n->in[i]] = true;
    return k;
}

int hr_ad_add_saved(hr_autodiff *ad, const char *suffix, hr_dtype dt, int64_t numel) {
    hr_node *f = &ad->g->n[ad->cur];
    if (ad->g->nt >= ad->cap || f->nout >= HR_NODE_MAX_IO) return -1;
    char nm[300];
    int layer = f->layer;
    snprintf(nm, sizeof nm, "%s.%s", layer >= 0 ? ad->g->l[layer].name : "node", suffix);
    int t = hr_graph_add_tensor(ad->g, nm, dt, hr_shape_make(1, &numel), false, HR_T_ACT, layer);
    if (t < 0) return -1;
    f = &ad->g->n[ad->cur]; /* adding a tensor does not move nodes, but be plain about it */
    if (f->nout < 2) f->nout = 2;
    f->out[1] = t;
    return t;
}

int hr_build_fail(hr_model_t *m, int layer, hr_status st, const char *fmt, ...) {
    char where[512], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hr_layer_where(m, layer, where, sizeof where);
    hr_error_set(st, "%s: %s", where, msg);
    m->broken = true;
    return -1;
}

int hr_build_node(hr_model_t *m, hr_node *n) {
    if (hr_graph_add_node(&m->g, n) < 0) {
        m->broken = true;
        return -1;
    }
    m->output = n->out[0];
    return n->out[0];
}
