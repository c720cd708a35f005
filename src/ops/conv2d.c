/* conv2d.c — Conv2d (nn.Conv2d): its model-file signature (padding 'same'
 * and 'valid' included), shape rule, parameters, backward and kernel arguments. */
#include "ops/ops.h"

#include <string.h>

hr_status hr_weighted_backward(hr_autodiff *ad, const hr_node *f, hr_op op); /* linear.c */

/* Conv2d: in {x (N,C,H,W), W (K,C,kh,kw), b (K)?}, out {y (N,K,OH,OW)}; square
 * kernels, symmetric stride and padding, as the model files write them.
 * Conv2d.backward: in {x, W, dy}, out {dx, dW, db}. */
int hr_conv2d(hr_model_t *m, const char *name, int x, int64_t cin, int64_t cout, int k, int stride, int pad, bool bias) {
    if (!hr_model_check_tensor(m, x, "Conv2d")) return -1;
    int L = hr_model_begin_layer(m, name, "Conv2d");
    if (L < 0) return -1;
    const hr_tensor *xt = &m->g.t[x];
    char sb[64];
    if (cin <= 0 || cout <= 0 || k <= 0 || stride <= 0 || pad < 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG,
                             "channels, kernel_size and stride must be positive and padding >= 0 "
                             "(got in=%lld out=%lld kernel=%d stride=%d padding=%d)",
                             (long long)cin, (long long)cout, k, stride, pad);
    if (xt->shape.ndim != 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "Conv2d takes (batch, C, H, W) but its input has per-sample shape %s",
                             hr_shape_str(&xt->shape, sb, sizeof sb));
    if (xt->shape.d[0] != cin)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "in_channels is %lld (expected) but the input has %lld channels (received)",
                             (long long)cin, (long long)xt->shape.d[0]);
    int64_t H = xt->shape.d[1], W = xt->shape.d[2];
    int64_t oh = (H + 2 * pad - k) / stride + 1, ow = (W + 2 * pad - k) / stride + 1;
    if (H + 2 * pad < k || W + 2 * pad < k)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "kernel_size %d is larger than the padded input %lldx%lld", k,
                             (long long)(H + 2 * pad), (long long)(W + 2 * pad));
    hr_node n = hr_node_make(HR_OP_CONV2D, L);
    n.a.in_f = cin;
    n.a.out_f = cout;
    n.a.kh = n.a.kw = k;
    n.a.sh = n.a.sw = stride;
    n.a.ph = n.a.pw = pad;
    n.a.groups = n.a.dil_h = n.a.dil_w = 1;
    n.a.bias = bias;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 4, (int64_t[]){cout, cin, k, k}, HR_T_PARAM);
    n.nin = 2;
    if (n.in[1] < 0) return -1;
    if (bias) {
        n.in[2] = hr_model_add_param(m, L, "bias", 1, (int64_t[]){cout}, HR_T_PARAM);
        if (n.in[2] < 0) return -1;
        n.nin = 3;
    }
    n.out[0] = hr_model_add_act(m, L, "out", hr_shape_make(3, (int64_t[]){cout, oh, ow}));
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

/* Conv2d(in, out, kernel_size, stride=1, padding=0, ...): padding 'valid' is
 * 0, 'same' (stride 1, odd kernel) is kernel_size / 2. */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    const hr_arg *a = c->a;
    int64_t pad = a[4].i;
    if (a[4].is_str) {
        bool valid = hr_arg_is(&a[4], "valid"), same_pad = hr_arg_is(&a[4], "same");
        if (!valid && !same_pad)
            return hr_model_fail(m, HR_ERR_PARSE, "Conv2d padding=%.*s: expected a number, 'same' or 'valid'", a[4].len,
                                 a[4].src);
        if (same_pad && (a[3].i != 1 || a[2].i % 2 == 0))
            return hr_model_fail(m, HR_ERR_UNSUPPORTED, "Conv2d padding='same' needs stride 1 and an odd kernel_size; "
                                 "write the padding as a number");
        pad = valid ? 0 : a[2].i / 2;
    }
    if (a[2].i > 1 << 20 || a[3].i > 1 << 20 || pad > 1 << 20)
        return hr_model_fail(m, HR_ERR_PARSE, "Conv2d kernel_size, stride or padding is too large");
    return hr_conv2d(m, name, c->x[0], a[0].i, a[1].i, (int)a[2].i, (int)a[3].i, (int)pad, a[7].i);
}

static hr_status backward(hr_autodiff *ad, const hr_node *n) { return hr_weighted_backward(ad, n, HR_OP_CONV2D_BWD); }

/* Weight and bias: U(-1/sqrt(fan_in), ...), fan_in = C kh kw, as nn.Conv2d. */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    hr_init_fan_in(&g->t[n->in[1]], hr_shape_numel(&g->t[n->in[slot]].shape), seed, stream, v);
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_conv_args *c = &a->conv;
    bool bwd = n->op == HR_OP_CONV2D_BWD;
    const hr_shape *xs = &g->t[n->in[0]].shape, *ys = &g->t[bwd ? n->in[2] : n->out[0]].shape;
    c->N = xs->d[0], c->C = xs->d[1], c->H = xs->d[2], c->W = xs->d[3];
    c->K = ys->d[1], c->OH = ys->d[2], c->OW = ys->d[3];
    c->kh = n->a.kh, c->kw = n->a.kw, c->sh = n->a.sh, c->sw = n->a.sw, c->ph = n->a.ph, c->pw = n->a.pw;
    c->groups = n->a.groups, c->dil_h = n->a.dil_h, c->dil_w = n->a.dil_w;
    c->x = hr_ptr(ptr, n->in[0]);
    c->w = hr_ptr(ptr, n->in[1]);
    c->batch_input = g->t[n->in[0]].kind == HR_T_INPUT;
    if (!bwd) {
        c->b = n->nin > 2 ? hr_ptr(ptr, n->in[2]) : NULL;
        c->y = hr_ptr(ptr, n->out[0]);
        return;
    }
    c->dy = hr_ptr(ptr, n->in[2]);
    c->dx = hr_ptr(ptr, n->out[0]);
    c->dw = hr_ptr(ptr, n->out[1]);
    c->db = hr_ptr(ptr, n->out[2]);
    c->acc_dx = n->accum[0];
    c->acc_dw = n->accum[1];
    c->acc_db = n->accum[2];
}

/* 2 N K OH OW C kh kw a product: y forward; dx (data gradient) and dW
 * (weight gradient), each when wanted, backward. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_conv_args *c = &a.conv;
    double out = (double)c->N * (double)c->K * (double)c->OH * (double)c->OW;
    double prod = 2.0 * out * (double)c->C * c->kh * c->kw;
    if (n->op == HR_OP_CONV2D)
        w->flops = prod + (c->b ? out : 0);
    else
        w->flops = (c->dx ? prod : 0) + (c->dw ? prod : 0) + (c->db ? out : 0);
    w->bytes = hr_work_io_bytes(g, n);
    w->matmul = true;
}

static const hr_layer_sig layers[] = {
    {"Conv2d",
     {HR_REQ("in_channels", HR_ARG_SIZE), HR_REQ("out_channels", HR_ARG_SIZE), HR_REQ("kernel_size", HR_ARG_SIZE),
      HR_OPT("stride", HR_ARG_SIZE, "1"), HR_OPT("padding", HR_ARG_PAD, "0"), HR_FIX("dilation", HR_ARG_SIZE, "1"),
      HR_FIX("groups", HR_ARG_SIZE, "1"), HR_OPT("bias", HR_ARG_BOOL, "True"), HR_FIX("padding_mode", HR_ARG_STR, "'zeros'")},
     HR_LAYER_ONE, build},
    {0},
};

const hr_op_desc hr_opdesc_conv2d = {
    .layers = layers, .backward = backward, .unpack = unpack, .init = init, .autocast = HR_AC_HALF, .work = work};
/* dx over x: the kernels read a sample's x (for dW) before they write its dx */
const hr_op_desc hr_opdesc_conv2d_bwd = {.unpack = unpack, .inplace = true, .work = work};
