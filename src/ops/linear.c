/* linear.c — Linear and Conv2d: shape rules, parameters and the backward
 * nodes. Kernels: backend/cpu/cpu_gemm.c, backend/cuda/. */
#include "ops/ops.h"

/* Linear: in {x (N,in), W (out,in), b (out)}, out {y (N,out)}
 * Linear.backward: in {x, W, dy}, out {dx, dW, db} */
int hr_linear(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias) {
    if (!hr_model_check_tensor(m, x, "Linear")) return -1;
    int L = hr_model_begin_layer(m, name, "Linear");
    if (L < 0) return -1;
    const hr_tensor *xt = &m->g.t[x];
    char sb[64];
    if (in_f <= 0 || out_f <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "in_features and out_features must be positive (got %lld, %lld)",
                             (long long)in_f, (long long)out_f);
    if (xt->shape.ndim != 1)
        return hr_build_fail(m, L, HR_ERR_SHAPE,
                             "Linear takes (batch, features) but its input has per-sample shape %s; add Flatten() before it",
                             hr_shape_str(&xt->shape, sb, sizeof sb));
    if (xt->shape.d[0] != in_f)
        return hr_build_fail(m, L, HR_ERR_SHAPE,
                             "in_features is %lld (expected) but the input has %lld features (received); "
                             "write Linear(%lld, %lld)",
                             (long long)in_f, (long long)xt->shape.d[0], (long long)xt->shape.d[0], (long long)out_f);
    hr_node n = hr_node_make(HR_OP_LINEAR, L);
    n.a.in_f = in_f;
    n.a.out_f = out_f;
    n.a.bias = bias;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 2, (int64_t[]){out_f, in_f}, HR_T_PARAM);
    n.nin = 2;
    if (n.in[1] < 0) return -1;
    if (bias) {
        n.in[2] = hr_model_add_param(m, L, "bias", 1, (int64_t[]){out_f}, HR_T_PARAM);
        if (n.in[2] < 0) return -1;
        n.nin = 3;
    }
    n.out[0] = hr_model_add_act(m, L, "out", hr_shape_make(1, (int64_t[]){out_f}));
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

/* Shared by Linear and Conv2d: both take {x, W, b} and give {dx, dW, db}. */
static hr_status weighted_backward(hr_autodiff *ad, const hr_node *f, hr_op op) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_node n = hr_node_make(op, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.in[2] = dy;
    n.nin = 3;
    n.nout = 3;
    for (int i = 0; i < 3; i++) {
        bool acc;
        int x = i < f->nin ? f->in[i] : -1;
        n.out[i] = hr_ad_grad_out(ad, x, &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0 && n.out[2] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

hr_status hr_linear_backward(hr_autodiff *ad, const hr_node *n) { return weighted_backward(ad, n, HR_OP_LINEAR_BWD); }
hr_status hr_conv2d_backward(hr_autodiff *ad, const hr_node *n) { return weighted_backward(ad, n, HR_OP_CONV2D_BWD); }

/* Conv2d: in {x (N,C,H,W), W (K,C,kh,kw), b (K)}, out {y (N,K,OH,OW)}; square
 * kernels, symmetric stride and padding, as the model files write them. */
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
