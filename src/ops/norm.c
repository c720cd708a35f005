/* norm.c — BatchNorm1d/2d: parameters, running statistics (buffers) and the
 * backward node. */
#include "ops/ops.h"

/* BatchNorm: in {x, gamma, beta, running_mean, running_var},
 *            out {y, mean, invstd} in training (batch statistics; running ones
 *            updated as PyTorch does, with the unbiased variance), {y} in inference.
 * BatchNorm.backward: in {x, gamma, mean, invstd, dy}, out {dx, dgamma, dbeta}. */
int hr_batchnorm(hr_model_t *m, const char *name, int x, int64_t features, float eps, float momentum) {
    if (!hr_model_check_tensor(m, x, "BatchNorm")) return -1;
    int nd = m->g.t[x].shape.ndim;
    int L = hr_model_begin_layer(m, name, nd == 3 ? "BatchNorm2d" : "BatchNorm1d");
    if (L < 0) return -1;
    if (nd != 1 && nd != 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "BatchNorm takes (batch, C) or (batch, C, H, W); the input has %d dims", nd + 1);
    if (features <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "num_features must be positive, eps > 0 and momentum in [0, 1]");
    if (m->g.t[x].shape.d[0] != features)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "num_features is %lld (expected) but the input has %lld channels (received)",
                             (long long)features, (long long)m->g.t[x].shape.d[0]);
    hr_node n = hr_node_make(HR_OP_BATCHNORM, L);
    n.a.eps = eps;
    n.a.momentum = momentum;
    n.a.out_f = features;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 1, &features, HR_T_PARAM);
    n.in[2] = hr_model_add_param(m, L, "bias", 1, &features, HR_T_PARAM);
    n.in[3] = hr_model_add_param(m, L, "running_mean", 1, &features, HR_T_BUFFER);
    n.in[4] = hr_model_add_param(m, L, "running_var", 1, &features, HR_T_BUFFER);
    n.nin = 5;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[x].shape);
    /* per-channel statistics are not batched: their shape is (C) */
    int mean = hr_graph_add_tensor(&m->g, "", HR_F32, hr_shape_make(1, &features), false, HR_T_ACT, L);
    int inv = hr_graph_add_tensor(&m->g, "", HR_F32, hr_shape_make(1, &features), false, HR_T_ACT, L);
    if (n.in[1] < 0 || n.in[2] < 0 || n.in[3] < 0 || n.in[4] < 0 || n.out[0] < 0 || mean < 0 || inv < 0) return -1;
    char nm[300];
    snprintf(nm, sizeof nm, "%s.batch_mean", m->g.l[L].name);
    char *a = hr_strdup(nm);
    snprintf(nm, sizeof nm, "%s.batch_invstd", m->g.l[L].name);
    char *b = hr_strdup(nm);
    if (!a || !b) {
        hr_free(a);
        hr_free(b);
        return -1;
    }
    hr_free(m->g.t[mean].name);
    m->g.t[mean].name = a;
    hr_free(m->g.t[inv].name);
    m->g.t[inv].name = b;
    n.out[1] = mean;
    n.out[2] = inv;
    n.nout = 3;
    return hr_build_node(m, &n);
}

hr_status hr_batchnorm_backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    hr_node n = hr_node_make(HR_OP_BATCHNORM_BWD, f->layer);
    n.a = f->a;
    n.in[0] = f->in[0];
    n.in[1] = f->in[1];
    n.in[2] = f->out[1];
    n.in[3] = f->out[2];
    n.in[4] = dy;
    n.nin = 5;
    n.nout = 3;
    for (int i = 0; i < 3; i++) {
        bool acc;
        n.out[i] = hr_ad_grad_out(ad, f->in[i], &acc);
        if (n.out[i] == -2) return HR_ERR_OOM;
    }
    if (n.out[0] < 0 && n.out[1] < 0 && n.out[2] < 0) return HR_OK;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}
