/* cpu_norm.c — BatchNorm on the CPU: batch statistics in training (sums in
 * double), running statistics in inference, and the backward pass. */
#include "backend/cpu/cpu.h"

#include <math.h>

typedef struct {
    int64_t N, C, HW;
} bn_dims;

static bn_dims dims_of(const hr_shape *s) {
    bn_dims d = {s->d[0], s->d[1], 1};
    for (int i = 2; i < s->ndim; i++) d.HW *= s->d[i];
    return d;
}

/* in {x, gamma, beta, running_mean, running_var}, out {y, mean, invstd} */
void hr_cpu_batchnorm(const hr_graph *g, const hr_node *n, void *const *ptr) {
    bn_dims d = dims_of(&T_(n->in[0]).shape);
    const float *x = P_(n->in[0]), *gm = P_(n->in[1]), *bt = P_(n->in[2]);
    float *rm = P_(n->in[3]), *rv = P_(n->in[4]), *y = P_(n->out[0]);
    float eps = n->a.eps, mom = n->a.momentum;
    int64_t M = d.N * d.HW;
#pragma omp parallel for schedule(static) if (d.C > 1 && M > 4096)
    for (int64_t c = 0; c < d.C; c++) {
        float mean, invstd;
        if (n->a.train) {
            double s = 0, ss = 0;
            for (int64_t i = 0; i < d.N; i++) {
                const float *xc = x + (i * d.C + c) * d.HW;
                for (int64_t j = 0; j < d.HW; j++) s += xc[j];
            }
            double mu = s / (double)M;
            for (int64_t i = 0; i < d.N; i++) {
                const float *xc = x + (i * d.C + c) * d.HW;
                for (int64_t j = 0; j < d.HW; j++) ss += ((double)xc[j] - mu) * ((double)xc[j] - mu);
            }
            double var = ss / (double)M;
            mean = (float)mu;
            invstd = (float)(1.0 / sqrt(var + (double)eps));
            P_(n->out[1])[c] = mean;
            P_(n->out[2])[c] = invstd;
            double unbiased = M > 1 ? ss / (double)(M - 1) : var;
            rm[c] = (1.0f - mom) * rm[c] + mom * mean;
            rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
        } else {
            mean = rm[c];
            invstd = 1.0f / sqrtf(rv[c] + eps);
        }
        float a = gm[c] * invstd, b = bt[c] - mean * a;
        for (int64_t i = 0; i < d.N; i++) {
            const float *xc = x + (i * d.C + c) * d.HW;
            float *yc = y + (i * d.C + c) * d.HW;
            for (int64_t j = 0; j < d.HW; j++) yc[j] = xc[j] * a + b;
        }
    }
}

/* in {x, gamma, mean, invstd, dy}, out {dx, dgamma, dbeta}:
 * dx = gamma invstd / M (M dy - sum dy - xhat sum(dy xhat)) */
void hr_cpu_batchnorm_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    bn_dims d = dims_of(&T_(n->in[0]).shape);
    const float *x = P_(n->in[0]), *gm = P_(n->in[1]), *mean = P_(n->in[2]), *inv = P_(n->in[3]), *dy = P_(n->in[4]);
    float *dx = n->out[0] >= 0 ? P_(n->out[0]) : NULL;
    float *dg = n->out[1] >= 0 ? P_(n->out[1]) : NULL, *db = n->out[2] >= 0 ? P_(n->out[2]) : NULL;
    int64_t M = d.N * d.HW;
#pragma omp parallel for schedule(static) if (d.C > 1 && M > 4096)
    for (int64_t c = 0; c < d.C; c++) {
        double sdy = 0, sdyx = 0;
        float mu = mean[c], is = inv[c];
        for (int64_t i = 0; i < d.N; i++) {
            const float *xc = x + (i * d.C + c) * d.HW, *gc = dy + (i * d.C + c) * d.HW;
            for (int64_t j = 0; j < d.HW; j++) {
                sdy += gc[j];
                sdyx += (double)gc[j] * ((xc[j] - mu) * is);
            }
        }
        if (dg) dg[c] = (n->accum[1] ? dg[c] : 0.0f) + (float)sdyx;
        if (db) db[c] = (n->accum[2] ? db[c] : 0.0f) + (float)sdy;
        if (!dx) continue;
        float k = gm[c] * is / (float)M, a = (float)sdy, b = (float)sdyx;
        for (int64_t i = 0; i < d.N; i++) {
            const float *xc = x + (i * d.C + c) * d.HW, *gc = dy + (i * d.C + c) * d.HW;
            float *dc = dx + (i * d.C + c) * d.HW;
            for (int64_t j = 0; j < d.HW; j++) {
                float v = k * ((float)M * gc[j] - a - (xc[j] - mu) * is * b);
                dc[j] = n->accum[0] ? dc[j] + v : v;
            }
        }
    }
}
