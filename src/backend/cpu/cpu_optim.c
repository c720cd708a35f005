/* cpu_optim.c — the optimizer updates with PyTorch's exact semantics (SGD with
 * momentum, dampening, nesterov and weight decay; Adam; AdamW) and the global
 * gradient norm for clipping. */
#include "backend/cpu/cpu.h"

#include <math.h>

/* in {g}, out {sqnorm (1)}: adds sum(g^2) */
void hr_cpu_grad_sqnorm(const hr_graph *g, const hr_node *n, void *const *ptr) {
    int64_t N = hr_shape_numel(&T_(n->in[0]).shape);
    const float *gr = P_(n->in[0]);
    double s = 0;
    for (int64_t i = 0; i < N; i++) s += (double)gr[i] * gr[i];
    float *out = P_(n->out[0]);
    out[0] = (float)((n->accum[0] ? out[0] : 0.0) + s);
}

/* As torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (norm + 1e-6)). */
static float clip_scale(void *const *ptr, const hr_step_info *si) {
    if (si->sqnorm < 0 || si->optim.clip_norm <= 0) return 1.0f;
    float norm = sqrtf(((float *)ptr[si->sqnorm])[0]);
    float c = si->optim.clip_norm / (norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* in {param, grad, momentum_buffer or -1, -, sqnorm?} */
void hr_cpu_sgd(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    int64_t N = hr_shape_numel(&T_(n->in[0]).shape);
    float *p = P_(n->in[0]), *buf = n->in[2] >= 0 ? P_(n->in[2]) : NULL;
    const float *gr = P_(n->in[1]);
    const hr_optim_t *o = &si->optim;
    float cs = clip_scale(ptr, si), lr = si->lr, wd = o->weight_decay, mom = o->momentum, damp = o->dampening;
    for (int64_t i = 0; i < N; i++) {
        float d = gr[i] * cs + wd * p[i];
        if (buf) {
            buf[i] = si->t == 1 ? d : mom * buf[i] + (1.0f - damp) * d;
            d = o->nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

/* in {param, grad, exp_avg, exp_avg_sq, sqnorm?}; AdamW decays the weights
 * first, Adam adds the decay to the gradient. */
void hr_cpu_adam(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    int64_t N = hr_shape_numel(&T_(n->in[0]).shape);
    float *p = P_(n->in[0]), *m = P_(n->in[2]), *v = P_(n->in[3]);
    const float *gr = P_(n->in[1]);
    const hr_optim_t *o = &si->optim;
    float cs = clip_scale(ptr, si), lr = si->lr, b1 = o->beta1, b2 = o->beta2, eps = o->eps, wd = o->weight_decay;
    bool decoupled = o->kind == HR_OPTIM_ADAMW;
    double bc1 = 1.0 - pow((double)b1, (double)si->t), bc2 = 1.0 - pow((double)b2, (double)si->t);
    float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
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
    }
}
