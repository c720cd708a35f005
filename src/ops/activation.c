/* activation.c — elementwise ops: ReLU, Dropout, Add, Softmax, LogSoftmax:
 * shape rules and backward nodes. */
#include "ops/ops.h"

/* One input, one output of the same shape. */
static int unary(hr_model_t *m, const char *name, const char *type, hr_op op, int x, int *layer) {
    if (!hr_model_check_tensor(m, x, type)) return -1;
    int L = hr_model_begin_layer(m, name, type);
    if (L < 0) return -1;
    *layer = L;
    hr_node n = hr_node_make(op, L);
    n.in[0] = x;
    n.nin = 1;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[x].shape);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

/* ReLU: in {x}, out {y, mask}; the mask (bit i of byte i/8: y[i] > 0) is
 * added in training by autodiff. Backward in {mask, dy}, out {dx}; a backward
 * in {y, dy} (float y) is understood too. x may be overwritten in place. */
int hr_relu(hr_model_t *m, const char *name, int x) {
    int L;
    return unary(m, name, "ReLU", HR_OP_RELU, x, &L);
}

/* Softmax / LogSoftmax over dim 1 of (N, C): backward in {y, dy}, out {dx}. */
static int softmax_like(hr_model_t *m, const char *name, const char *type, hr_op op, int x) {
    if (x >= 0 && m && x < m->g.nt && m->g.t[x].shape.ndim != 1) {
        int L = hr_model_begin_layer(m, name, type);
        if (L < 0) return -1;
        return hr_build_fail(m, L, HR_ERR_SHAPE, "%s(dim=1) takes (batch, classes); add Flatten() before it", type);
    }
    int L;
    return unary(m, name, type, op, x, &L);
}
int hr_softmax(hr_model_t *m, const char *name, int x) { return softmax_like(m, name, "Softmax", HR_OP_SOFTMAX, x); }
int hr_log_softmax(hr_model_t *m, const char *name, int x) {
    return softmax_like(m, name, "LogSoftmax", HR_OP_LOGSOFTMAX, x);
}

/* Dropout: in {x}, out {y, mask (u8, one byte a sample element)}; backward in
 * {mask, dy}, out {dx}. The mask comes from (seed, step, element), so it is
 * the same on every backend. In inference the node copies. */
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
    n.out[1] = hr_model_add_act(m, L, "mask", m->g.t[x].shape);
    n.nout = 2;
    if (n.out[0] < 0 || n.out[1] < 0) return -1;
    m->g.t[n.out[1]].dtype = HR_U8;
    return hr_build_node(m, &n);
}

/* Add: in {a, b}, out {y}; backward: a Copy of dy to each input. */
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

/* dy flows unchanged to x: a Copy node, which the planner turns into a view
 * when it can (x's gradient not yet written, dy dead afterwards). */
static hr_status copy_grad(hr_autodiff *ad, int layer, int dy, int x) {
    bool acc;
    hr_node n = hr_node_make(HR_OP_COPY, layer);
    n.out[0] = hr_ad_grad_out(ad, x, &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK;
    n.in[0] = dy;
    n.nin = 1;
    n.nout = 1;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

hr_status hr_add_backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_status st = copy_grad(ad, f->layer, dy, f->in[0]);
    return st ? st : copy_grad(ad, f->layer, dy, f->in[1]);
}

hr_status hr_reshape_backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    return dy < 0 ? HR_OK : copy_grad(ad, f->layer, dy, f->in[0]);
}

/* The common shape of backward nodes: in {saved..., dy}, out {dx}. */
static hr_status simple_backward(hr_autodiff *ad, const hr_node *f, hr_op op, int saved0, int saved1) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    bool acc;
    hr_node n = hr_node_make(op, f->layer);
    n.a = f->a;
    n.out[0] = hr_ad_grad_out(ad, f->in[0], &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK;
    n.nout = 1;
    if (saved0 >= 0) n.in[n.nin++] = saved0;
    if (saved1 >= 0) n.in[n.nin++] = saved1;
    n.in[n.nin++] = dy;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* ReLU keeps one bit a value for its backward (where y > 0) rather than y:
 * y is then free once the forward pass is done with it, unless another
 * backward node reads it anyway (a following Linear does). */
hr_status hr_relu_backward(hr_autodiff *ad, const hr_node *f) {
    if (hr_ad_grad_in(ad, f->out[0]) < 0) return HR_OK;
    int64_t n = hr_shape_numel(&ad->g->t[f->out[0]].shape);
    int mask = hr_ad_add_saved(ad, "relu_mask", HR_U8, (n + 7) / 8);
    if (mask < 0) return HR_ERR_OOM;
    return simple_backward(ad, f, HR_OP_RELU_BWD, mask, -1);
}
hr_status hr_dropout_backward(hr_autodiff *ad, const hr_node *f) {
    return simple_backward(ad, f, HR_OP_DROPOUT_BWD, f->out[1], -1);
}
hr_status hr_softmax_backward(hr_autodiff *ad, const hr_node *f) {
    return simple_backward(ad, f, f->op == HR_OP_SOFTMAX ? HR_OP_SOFTMAX_BWD : HR_OP_LOGSOFTMAX_BWD, f->out[0], -1);
}
/* MaxPool2d: in {x}, out {y, argmax}: argmax (u8, y's shape) is each window's
 * first maximum as i*kw + j, added in training by autodiff. Backward in
 * {argmax, dy} or, when x is kept anyway, in {x, dy} (the argmax found
 * again); AvgPool2d.backward: in {dy}. */
hr_status hr_pool_backward(hr_autodiff *ad, const hr_node *f) {
    if (f->op == HR_OP_MAXPOOL) {
        /* Unless another backward node keeps x, keep each window's argmax as
         * one byte (its offset in the window) instead of the whole of x. */
        int x = f->in[0], saved = x;
        if (!ad->read[x] && f->a.kh * f->a.kw <= 255 && hr_ad_grad_in(ad, f->out[0]) >= 0) {
            saved = hr_ad_add_saved(ad, "argmax", HR_U8, hr_shape_numel(&ad->g->t[f->out[0]].shape));
            if (saved < 0) return HR_ERR_OOM;
        }
        return simple_backward(ad, f, HR_OP_MAXPOOL_BWD, saved, -1);
    }
    return simple_backward(ad, f, HR_OP_AVGPOOL_BWD, -1, -1);
}
