/* conv2d.c — Conv2d (nn.Conv2d, with groups and dilation): its model-file signature (padding
 * 'same' and 'valid' included), shape rule, parameters, backward and kernel arguments. */
#include "ops/ops.h"

#include <string.h>

hr_status hr_weighted_backward(hr_autodiff *ad, const hr_node *f, hr_op op); /* linear.c */

/* Conv2d: in {x (N,C,H,W), W (K,C/groups,kh,kw), b (K)?}, out {y (N,K,OH,OW)};
 * square kernels, symmetric stride, padding and dilation, as the model files
 * write them. groups splits C and K into independent convolutions (groups ==
 * C: depthwise). Conv2d.backward: in {x, W, dy}, out {dx, dW, db}. */
int hr_conv2d_ex(hr_model_t *m, const char *name, int x, int64_t cin, int64_t cout, int k, int stride, int pad,
                 int dilation, int groups, bool bias) {
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
    if (dilation <= 0 || groups <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "dilation and groups must be positive (got dilation=%d groups=%d)",
                             dilation, groups);
    if (cin % groups || cout % groups)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG,
                             "%s_channels (%lld) must be divisible by groups (%d), as nn.Conv2d requires",
                             cin % groups ? "in" : "out", (long long)(cin % groups ? cin : cout), groups);
    if (xt->shape.ndim != 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "Conv2d takes (batch, C, H, W) but its input has per-sample shape %s",
                             hr_shape_str(&xt->shape, sb, sizeof sb));
    if (xt->shape.d[0] != cin)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "in_channels is %lld (expected) but the input has %lld channels (received)",
                             (long long)cin, (long long)xt->shape.d[0]);
    int64_t H = xt->shape.d[1], W = xt->shape.d[2];
    int64_t ke = (int64_t)dilation * (k - 1) + 1; /* the kernel's reach: its taps dilation apart */
    if (H + 2 * pad < ke || W + 2 * pad < ke) {
        if (dilation == 1)
            return hr_build_fail(m, L, HR_ERR_SHAPE, "kernel_size %d is larger than the padded input %lldx%lld", k,
                                 (long long)(H + 2 * pad), (long long)(W + 2 * pad));
        return hr_build_fail(m, L, HR_ERR_SHAPE,
                             "kernel_size %d with dilation %d reaches over %lld pixels, more than the padded input "
                             "%lldx%lld",
                             k, dilation, (long long)ke, (long long)(H + 2 * pad), (long long)(W + 2 * pad));
    }
    int64_t oh = (H + 2 * pad - ke) / stride + 1, ow = (W + 2 * pad - ke) / stride + 1;
    hr_node n = hr_node_make(HR_OP_CONV2D, L);
    n.a.in_f = cin;
    n.a.out_f = cout;
    n.a.kh = n.a.kw = k;
    n.a.sh = n.a.sw = stride;
    n.a.ph = n.a.pw = pad;
    n.a.groups = groups;
    n.a.dil_h = n.a.dil_w = dilation;
    n.a.bias = bias;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 4, (int64_t[]){cout, cin / groups, k, k}, HR_T_PARAM);
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

int hr_conv2d(hr_model_t *m, const char *name, int x, int64_t cin, int64_t cout, int k, int stride, int pad, bool bias) {
    return hr_conv2d_ex(m, name, x, cin, cout, k, stride, pad, 1, 1, bias);
}

/* Conv2d(in, out, kernel_size, stride=1, padding=0, dilation=1, groups=1,
 * ...): padding 'valid' is 0; 'same' (stride 1) is dilation (kernel_size - 1)
 * / 2 on every side, so that total must be even (PyTorch pads an odd total
 * one more on the right; headroom's padding is symmetric). */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    const hr_arg *a = c->a;
    int64_t pad = a[4].i;
    if (a[4].is_str) {
        bool valid = hr_arg_is(&a[4], "valid"), same_pad = hr_arg_is(&a[4], "same");
        if (!valid && !same_pad)
            return hr_model_fail(m, HR_ERR_PARSE, "Conv2d padding=%.*s: expected a number, 'same' or 'valid'", a[4].len,
                                 a[4].src);
        if (a[2].i > 1 << 20 || a[5].i > 1 << 20)
            return hr_model_fail(m, HR_ERR_PARSE, "Conv2d kernel_size or dilation is too large");
        if (same_pad && (a[3].i != 1 || a[5].i * (a[2].i - 1) % 2))
            return hr_model_fail(m, HR_ERR_UNSUPPORTED, "Conv2d padding='same' needs stride 1 and an even "
                                 "dilation * (kernel_size - 1) (an odd kernel_size); write the padding as a number");
        pad = valid ? 0 : a[5].i * (a[2].i - 1) / 2;
    }
    if (a[2].i > 1 << 20 || a[3].i > 1 << 20 || pad > 1 << 20 || a[5].i > 1 << 20 || a[6].i > 1 << 20)
        return hr_model_fail(m, HR_ERR_PARSE, "Conv2d kernel_size, stride, padding, dilation or groups is too large");
    return hr_conv2d_ex(m, name, c->x[0], a[0].i, a[1].i, (int)a[2].i, (int)a[3].i, (int)pad, (int)a[5].i, (int)a[6].i,
                        a[7].i);
}

static hr_status backward(hr_autodiff *ad, const hr_node *n) { return hr_weighted_backward(ad, n, HR_OP_CONV2D_BWD); }

/* Weight and bias: U(-1/sqrt(fan_in), ...), fan_in = C/groups kh kw (the
 * weight's numel / K), as nn.Conv2d. */
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
    /* 0: a node made without them (tests build nodes by hand): 1 */
    c->groups = n->a.groups > 0 ? n->a.groups : 1;
    c->dil_h = n->a.dil_h > 0 ? n->a.dil_h : 1, c->dil_w = n->a.dil_w > 0 ? n->a.dil_w : 1;
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

/* 2 N K OH OW (C/groups) kh kw a product: y forward; dx (data gradient) and dW
 * (weight gradient), each when wanted, backward. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_conv_args *c = &a.conv;
    double out = (double)c->N * (double)c->K * (double)c->OH * (double)c->OW;
    double prod = 2.0 * out * (double)(c->C / c->groups) * c->kh * c->kw;
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
      HR_OPT("stride", HR_ARG_SIZE, "1"), HR_OPT("padding", HR_ARG_PAD, "0"), HR_OPT("dilation", HR_ARG_SIZE, "1"),
      HR_OPT("groups", HR_ARG_SIZE, "1"), HR_OPT("bias", HR_ARG_BOOL, "True"), HR_FIX("padding_mode", HR_ARG_STR, "'zeros'")},
     HR_LAYER_ONE, build},
    {0},
};

const hr_op_desc hr_opdesc_conv2d = {
    .per_sample = HR_SAMPLES_EACH,
    .layers = layers, .backward = backward, .unpack = unpack, .init = init, .autocast = HR_AC_HALF, .work = work};
/* dx over x: the kernels read a sample's x (for dW) before they write its dx */
const hr_op_desc hr_opdesc_conv2d_bwd = {.unpack = unpack, .inplace = true, .work = work};
