/* activation.c — the elementwise activations: ReLU, LeakyReLU, GELU, SiLU,
 * Sigmoid, Tanh (PyTorch's modules), their backward nodes and what each keeps. */
#include "ops/ops.h"

/* Every activation: in {x}, out {y}, and may write y over x. What the
 * backward keeps: ReLU and LeakyReLU one bit a value (x > 0), added in
 * training by autodiff as out[1]; GELU and SiLU their input; Sigmoid and
 * Tanh their output. Backward: in {saved, dy}, out {dx}, dx over dy. */
int hr_relu(hr_model_t *m, const char *name, int x) { return hr_build_unary(m, name, "ReLU", HR_OP_RELU, x, NULL); }

int hr_leaky_relu(hr_model_t *m, const char *name, int x, float negative_slope) {
    hr_attr a = {.alpha = negative_slope};
    return hr_build_unary(m, name, "LeakyReLU", HR_OP_LEAKY_RELU, x, &a);
}

int hr_gelu(hr_model_t *m, const char *name, int x, bool tanh_approximation) {
    hr_attr a = {.approx = tanh_approximation};
    return hr_build_unary(m, name, "GELU", HR_OP_GELU, x, &a);
}

int hr_silu(hr_model_t *m, const char *name, int x) { return hr_build_unary(m, name, "SiLU", HR_OP_SILU, x, NULL); }
int hr_sigmoid(hr_model_t *m, const char *name, int x) {
    return hr_build_unary(m, name, "Sigmoid", HR_OP_SIGMOID, x, NULL);
}
int hr_tanh(hr_model_t *m, const char *name, int x) { return hr_build_unary(m, name, "Tanh", HR_OP_TANH, x, NULL); }

/* ---- model-file layers ---------------------------------------------------------- */
static int build_relu(hr_model_t *m, const char *name, const hr_layer_call *c) { return hr_relu(m, name, c->x[0]); }
static int build_leaky(hr_model_t *m, const char *name, const hr_layer_call *c) {
    return hr_leaky_relu(m, name, c->x[0], (float)c->a[0].f);
}
static int build_gelu(hr_model_t *m, const char *name, const hr_layer_call *c) {
    bool tanh_ = hr_arg_is(&c->a[0], "tanh");
    if (!tanh_ && !hr_arg_is(&c->a[0], "none"))
        return hr_model_fail(m, HR_ERR_PARSE, "GELU approximate=%.*s: expected 'none' or 'tanh'", c->a[0].len,
                             c->a[0].src);
    return hr_gelu(m, name, c->x[0], tanh_);
}
static int build_silu(hr_model_t *m, const char *name, const hr_layer_call *c) { return hr_silu(m, name, c->x[0]); }
static int build_sigmoid(hr_model_t *m, const char *name, const hr_layer_call *c) {
    return hr_sigmoid(m, name, c->x[0]);
}
static int build_tanh(hr_model_t *m, const char *name, const hr_layer_call *c) { return hr_tanh(m, name, c->x[0]); }

/* `inplace=True` is accepted: headroom decides in place from the plan. */
static const hr_layer_sig relu_layers[] = {{"ReLU", {HR_OPT("inplace", HR_ARG_BOOL, "False")}, HR_LAYER_ONE, build_relu}, {0}};
static const hr_layer_sig leaky_layers[] = {
    {"LeakyReLU", {HR_OPT("negative_slope", HR_ARG_FLOAT, "0.01"), HR_OPT("inplace", HR_ARG_BOOL, "False")}, HR_LAYER_ONE,
     build_leaky},
    {0}};
static const hr_layer_sig gelu_layers[] = {{"GELU", {HR_OPT("approximate", HR_ARG_STR, "'none'")}, HR_LAYER_ONE, build_gelu},
                                           {0}};
static const hr_layer_sig silu_layers[] = {{"SiLU", {HR_OPT("inplace", HR_ARG_BOOL, "False")}, HR_LAYER_ONE, build_silu}, {0}};
static const hr_layer_sig sigmoid_layers[] = {{"Sigmoid", {{0}}, HR_LAYER_ONE, build_sigmoid}, {0}};
static const hr_layer_sig tanh_layers[] = {{"Tanh", {{0}}, HR_LAYER_ONE, build_tanh}, {0}};

/* ---- backward ------------------------------------------------------------------- */
/* ReLU and LeakyReLU keep one bit a value for their backward (x > 0) rather
 * than x or y: y is then free once the forward pass is done with it, unless
 * another backward node reads it anyway (a following Linear does). */
static hr_status backward_mask(hr_autodiff *ad, const hr_node *f, hr_op op) {
    if (hr_ad_grad_in(ad, f->out[0]) < 0) return HR_OK;
    int64_t n = hr_shape_numel(&ad->g->t[f->out[0]].shape);
    int mask = hr_ad_add_saved(ad, op == HR_OP_RELU_BWD ? "relu_mask" : "mask", HR_U8, (n + 7) / 8);
    if (mask < 0) return HR_ERR_OOM;
    return hr_ad_simple(ad, f, op, mask, -1);
}
static hr_status relu_backward(hr_autodiff *ad, const hr_node *f) { return backward_mask(ad, f, HR_OP_RELU_BWD); }
static hr_status leaky_backward(hr_autodiff *ad, const hr_node *f) {
    return backward_mask(ad, f, HR_OP_LEAKY_RELU_BWD);
}
static hr_status gelu_backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, HR_OP_GELU_BWD, f->in[0], -1);
}
static hr_status silu_backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, HR_OP_SILU_BWD, f->in[0], -1);
}
static hr_status sigmoid_backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, HR_OP_SIGMOID_BWD, f->out[0], -1);
}
static hr_status tanh_backward(hr_autodiff *ad, const hr_node *f) {
    return hr_ad_simple(ad, f, HR_OP_TANH_BWD, f->out[0], -1);
}

hr_op hr_act_grad_op(hr_op act) {
    switch (act) {
    case HR_OP_RELU: return HR_OP_RELU_BWD;
    case HR_OP_LEAKY_RELU: return HR_OP_LEAKY_RELU_BWD;
    case HR_OP_GELU: return HR_OP_GELU_BWD;
    case HR_OP_SILU: return HR_OP_SILU_BWD;
    case HR_OP_SIGMOID: return HR_OP_SIGMOID_BWD;
    case HR_OP_TANH: return HR_OP_TANH_BWD;
    default: return act;
    }
}

/* ---- into the Linear before it --------------------------------------------------
 * A matrix product's epilogue can apply an activation to its F32 sums
 * before their one rounding, and its derivative to the product that makes
 * the activation's gradient: cuBLASLt's GELU_AUX(_BIAS) and DGELU, for
 * GELU(approximate='tanh') (its GELU is that form). GPT-2's MLP then reads
 * and writes its 3072-wide activations once less each way. Which activations
 * go in is decided here; the Linear runs them (a.act forward, a.dact
 * backward): on the CPU, and where cuBLASLt has no kernel, as the product
 * then this file's kernels, the values the pair computes (in a half type the
 * fused node rounds once where the pair rounded twice). */
static bool fuses(const hr_node *n) { return n->op == HR_OP_GELU && n->a.approx && n->nin == 1 && n->nout == 1; }

hr_status hr_act_fuse(hr_graph *g, int keep, const bool *alone) {
    for (int s = 0; s < g->nn; s++) {
        hr_node *k = &g->n[s];
        if (k->op != HR_OP_LINEAR || k->a.act || k->nout != 1 || k->out[0] == keep) continue;
        int pre = k->out[0], j = -1;
        for (int q = s + 1; q < g->nn && j < 0; q++)
            for (int i = 0; i < g->n[q].nin; i++)
                if (g->n[q].in[i] == pre) j = q;
        if (j < 0 || !fuses(&g->n[j]) || hr_graph_read_elsewhere(g, pre, j) || (alone && g->n[j].layer >= 0 && alone[g->n[j].layer]))
            continue;
        k->a.act = g->n[j].op;
        k->a.approx = g->n[j].a.approx;
        k->out[1] = pre;
        k->out[0] = g->n[j].out[0];
        k->nout = 2;
        hr_graph_remove_node(g, j);
    }
    return HR_OK;
}

/* The node that writes tensor t in [from, nn), -1: none or more than one. */
static int only_writer(const hr_graph *g, int t, int from) {
    int w = -1;
    for (int s = from; s < g->nn; s++)
        for (int i = 0; i < g->n[s].nout; i++)
            if (g->n[s].out[i] == t) {
                if (w >= 0) return -1;
                w = s;
            }
    return w;
}

hr_status hr_act_fuse_backward(hr_graph *g, int from) {
    for (int s = from; s < g->nn; s++) {
        const hr_node *gb = &g->n[s];
        if (gb->op != HR_OP_GELU_BWD || !gb->a.approx || gb->nin != 2 || gb->accum[0] || gb->out[0] < 0) continue;
        int dy = gb->in[1], w = only_writer(g, dy, from);
        if (w < 0 || w > s || hr_graph_read_elsewhere(g, dy, s)) continue;
        hr_node *L = &g->n[w];
        if (L->op != HR_OP_LINEAR_BWD || L->a.dact || L->out[0] != dy || L->accum[0] || L->nin != 3) continue;
        L->a.dact = HR_OP_GELU;
        L->a.approx = gb->a.approx;
        L->in[3] = gb->in[0];
        L->nin = 4;
        L->out[0] = gb->out[0];
        hr_graph_remove_node(g, s);
        s--;
    }
    return HR_OK;
}

/* ---- kernel arguments ------------------------------------------------------------ */
static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_act_args *k = &a->act;
    k->alpha = n->a.alpha;
    k->tanh_approx = n->a.approx;
    k->n = hr_shape_numel(&g->t[n->in[0]].shape);
    k->out = hr_ptr(ptr, n->out[0]);
    k->x = hr_ptr(ptr, n->in[0]);
    if (n->nout > 1) k->mask_out = hr_ptr(ptr, n->out[1]);
}

/* in {saved, dy}: a u8 saved tensor is the bit mask; a float one is x or y,
 * as the op keeps (ReLU's float form is y). */
static void unpack_bwd(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_act_args *k = &a->act;
    int saved = n->in[0];
    k->alpha = n->a.alpha;
    k->tanh_approx = n->a.approx;
    k->n = hr_shape_numel(&g->t[n->in[1]].shape);
    k->dy = hr_ptr(ptr, n->in[1]);
    k->out = hr_ptr(ptr, n->out[0]);
    k->acc = n->accum[0];
    bool keeps_y = n->op == HR_OP_RELU_BWD || n->op == HR_OP_SIGMOID_BWD || n->op == HR_OP_TANH_BWD;
    if (g->t[saved].dtype == HR_U8)
        k->mask = hr_ptr(ptr, saved);
    else if (keeps_y)
        k->y = hr_ptr(ptr, saved);
    else
        k->x = hr_ptr(ptr, saved);
}

/* Flops a value (exp, erf and tanh counted as about 10: the estimates'
 * scale only; these ops are bound by memory). */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    double per;
    switch (n->op) {
    case HR_OP_RELU: case HR_OP_RELU_BWD: per = 1; break;
    case HR_OP_LEAKY_RELU: case HR_OP_LEAKY_RELU_BWD: per = 2; break;
    case HR_OP_GELU: per = 14; break;
    case HR_OP_GELU_BWD: per = 20; break;
    case HR_OP_SILU: case HR_OP_SIGMOID: per = 12; break;
    case HR_OP_SILU_BWD: per = 16; break;
    case HR_OP_TANH: per = 10; break;
    default: per = 3; break; /* Sigmoid's and Tanh's backward, from y */
    }
    int x = n->in[n->nin - 1]; /* forward: x; backward: dy */
    w->flops = per * (double)hr_shape_numel(&g->t[x].shape);
    w->bytes = hr_work_io_bytes(g, n);
}

#define ACT(id, lay, bwd) \
    const hr_op_desc hr_opdesc_##id = {                                                                  \
        .per_sample = HR_SAMPLES_EACH, .layers = lay, .backward = bwd, .unpack = unpack, .inplace = true,         \
        .train_outputs = true, .work = work};                                                             \
    const hr_op_desc hr_opdesc_##id##_bwd = {.unpack = unpack_bwd, .inplace = true, .inplace_last = true, .work = work};
ACT(relu, relu_layers, relu_backward)
ACT(leaky_relu, leaky_layers, leaky_backward)
ACT(gelu, gelu_layers, gelu_backward)
ACT(silu, silu_layers, silu_backward)
ACT(sigmoid, sigmoid_layers, sigmoid_backward)
ACT(tanh, tanh_layers, tanh_backward)
#undef ACT
