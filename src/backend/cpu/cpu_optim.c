/* cpu_optim.c — the optimizer updates with PyTorch's exact semantics (SGD with
 * momentum, dampening, nesterov and weight decay; Adam; AdamW) and the global
 * gradient norm for clipping. An update that holds its weight's half copy
 * (mixed precision) writes it from the new value, rounded as a Cast rounds. */
#include "backend/cpu/cpu.h"

#include <math.h>

/* sum(g^2), added to out[0] with acc */
hr_status hr_cpu_grad_sqnorm(void *ctx, const hr_kargs *a) {
    const hr_sqnorm_args *q = &a->sq;
    int64_t N = q->n;
    const float *gr = q->g;
    double s = 0;
    for (int64_t i = 0; i < N; i++) s += (double)gr[i] * gr[i];
    float *out = q->out;
    out[0] = (float)((q->acc ? out[0] : 0.0) + s);
    return HR_OK;
}

/* As torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (norm + 1e-6)). */
static float clip_scale(const hr_optim_args *u) {
    if (!u->sqnorm || u->o.clip_norm <= 0) return 1.0f;
    float norm = sqrtf(u->sqnorm[0]);
    float c = u->o.clip_norm / (norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* s1: the momentum buffer, or NULL without momentum */
hr_status hr_cpu_sgd(void *ctx, const hr_kargs *a) {
    const hr_optim_args *u = &a->opt;
    int64_t N = u->n;
    float *p = u->p, *buf = u->s1;
    const float *gr = u->g;
    const hr_optim_t *o = &u->o;
    float cs = clip_scale(u), lr = u->lr, wd = o->weight_decay, mom = o->momentum, damp = o->dampening;
    for (int64_t i = 0; i < N; i++) {
        float d = gr[i] * cs + wd * p[i];
        if (buf) {
            buf[i] = u->t == 1 ? d : mom * buf[i] + (1.0f - damp) * d;
            d = o->nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
        if (u->copy) hr_store_f(u->copy, u->copy_dt, i, p[i]);
    }
    return HR_OK;
}

/* s1, s2: exp_avg, exp_avg_sq. AdamW decays the weights first, Adam adds the
 * decay to the gradient. */
hr_status hr_cpu_adam(void *ctx, const hr_kargs *a) {
    const hr_optim_args *u = &a->opt;
    int64_t N = u->n;
    float *p = u->p, *m = u->s1, *v = u->s2;
    const float *gr = u->g;
    const hr_optim_t *o = &u->o;
    float cs = clip_scale(u), lr = u->lr, b1 = o->beta1, b2 = o->beta2, eps = o->eps, wd = o->weight_decay;
    bool decoupled = o->kind == HR_OPTIM_ADAMW;
    hr_step_vars sv = hr_step_vars_make(o, u->t, lr);
    float step = sv.adam_step, bc2s = sv.adam_bc2s;
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) {
        float gi = gr[i] * cs;
        if (decoupled)
            p[i] *= 1.0f - lr * wd;
        else
            gi += wd * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);
        if (u->copy) hr_store_f(u->copy, u->copy_dt, i, p[i]);
    }
    return HR_OK;
}

/* GradScaler's unscale: g *= inv_scale, found_inf[0] = 1 on any inf or NaN. */
hr_status hr_cpu_unscale(void *ctx, const hr_kargs *a) {
    (void)ctx;
    const hr_unscale_args *u = &a->unscale;
    float *gr = u->g, inv = u->inv_scale;
    bool bad = false;
    for (int64_t i = 0; i < u->n; i++) {
        bad |= !isfinite(gr[i]);
        gr[i] *= inv;
    }
    if (!u->acc) u->found_inf[0] = 0.0f;
    if (bad) u->found_inf[0] = 1.0f;
    return HR_OK;
}
