/* cpu_pool.c — MaxPool2d and AvgPool2d (no padding) on the CPU; the max
 * pool's backward finds the argmax again in its saved input. */
#include "backend/cpu/cpu.h"

#include <string.h>

typedef struct {
    int64_t NC, H, W, OH, OW;
    int kh, kw, sh, sw;
} pool_dims;

static pool_dims dims_of(const hr_graph *g, const hr_node *n, int x, int y) {
    const hr_shape *xs = &T_(x).shape, *ys = &T_(y).shape;
    return (pool_dims){xs->d[0] * xs->d[1], xs->d[2], xs->d[3], ys->d[2], ys->d[3], n->a.kh, n->a.kw, n->a.sh, n->a.sw};
}

/* Index of the window's first maximum, as PyTorch picks it. */
static int64_t argmax(const pool_dims *d, const float *x, int64_t oh, int64_t ow) {
    int64_t best = oh * d->sh * d->W + ow * d->sw;
    float bv = x[best];
    for (int i = 0; i < d->kh; i++)
        for (int j = 0; j < d->kw; j++) {
            int64_t k = (oh * d->sh + i) * d->W + ow * d->sw + j;
            if (x[k] > bv || (x[k] != x[k] && bv == bv)) bv = x[k], best = k; /* NaN wins, as in PyTorch */
        }
    return best;
}

/* The common 2x2 stride-2 window, without the general loop. */
static inline int64_t argmax22(const float *x, int64_t W, int64_t oh, int64_t ow) {
    int64_t k = 2 * oh * W + 2 * ow, best = k;
    float bv = x[k];
    if (x[k + 1] > bv || (x[k + 1] != x[k + 1] && bv == bv)) bv = x[k + 1], best = k + 1;
    if (x[k + W] > bv || (x[k + W] != x[k + W] && bv == bv)) bv = x[k + W], best = k + W;
    if (x[k + W + 1] > bv || (x[k + W + 1] != x[k + W + 1] && bv == bv)) best = k + W + 1;
    return best;
}

#define ARGMAX(d, x, oh, ow) \
    ((d)->kh == 2 && (d)->kw == 2 && (d)->sh == 2 && (d)->sw == 2 ? argmax22(x, (d)->W, oh, ow) : argmax(d, x, oh, ow))

/* 2x2 windows, stride 2: two input rows at a time, no index arithmetic per
 * element. Ties and NaNs follow argmax22. */
static void maxpool22(const pool_dims *d, const float *xc, float *yc, float *dc, const float *gc) {
    for (int64_t oh = 0; oh < d->OH; oh++) {
        const float *r0 = xc + 2 * oh * d->W, *r1 = r0 + d->W;
        for (int64_t ow = 0; ow < d->OW; ow++) {
            int64_t j = 2 * ow;
            float a = r0[j], b = r0[j + 1], c = r1[j], e = r1[j + 1];
            if (!dc) {
                float m = a, m2 = c;
                if (b > m || (b != b && m == m)) m = b;
                if (e > m2 || (e != e && m2 == m2)) m2 = e;
                if (m2 > m || (m2 != m2 && m == m)) m = m2;
                yc[oh * d->OW + ow] = m;
            } else {
                dc[argmax22(xc, d->W, oh, ow)] += gc[oh * d->OW + ow];
            }
        }
    }
}

/* in {x}, out {y, argmax?}: argmax holds the window offset i*kw + j of the max */
/* The window offsets of a plane whose maxima y are known: the first position
 * equal to its max, branch-free so that it vectorises; a window whose max is
 * NaN takes the exact rule of argmax22. */
static void argmax22_plane(const pool_dims *d, const float *xc, const float *yc, uint8_t *am) {
    for (int64_t oh = 0; oh < d->OH; oh++) {
        const float *r0 = xc + 2 * oh * d->W, *r1 = r0 + d->W, *m = yc + oh * d->OW;
        uint8_t *ao = am + oh * d->OW;
        int nan = 0;
        for (int64_t ow = 0; ow < d->OW; ow++) {
            int ka = r0[2 * ow] != m[ow], kb = ka & (r0[2 * ow + 1] != m[ow]), kc = kb & (r1[2 * ow] != m[ow]);
            ao[ow] = (uint8_t)(ka + kb + kc);
            nan |= m[ow] != m[ow];
        }
        if (nan)
            for (int64_t ow = 0; ow < d->OW; ow++) {
                int64_t k = argmax22(xc, d->W, oh, ow) - 2 * oh * d->W - 2 * ow;
                ao[ow] = (uint8_t)(k >= d->W ? 2 + (k - d->W) : k);
            }
    }
}

void hr_cpu_maxpool(const hr_graph *g, const hr_node *n, void *const *ptr) {
    pool_dims d = dims_of(g, n, n->in[0], n->out[0]);
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
    uint8_t *am = n->nout > 1 && n->out[1] >= 0 ? ptr[n->out[1]] : NULL;
    if (am) {
        bool fast = d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2;
#pragma omp parallel for schedule(static) if (d.NC > 64)
        for (int64_t c = 0; c < d.NC; c++) {
            const float *xc = x + c * d.H * d.W;
            if (fast) {
                maxpool22(&d, xc, y + c * d.OH * d.OW, NULL, NULL);
                argmax22_plane(&d, xc, y + c * d.OH * d.OW, am + c * d.OH * d.OW);
                continue;
            }
            for (int64_t oh = 0; oh < d.OH; oh++)
                for (int64_t ow = 0; ow < d.OW; ow++) {
                    int64_t k = ARGMAX(&d, xc, oh, ow), o = c * d.OH * d.OW + oh * d.OW + ow;
                    y[o] = xc[k];
                    am[o] = (uint8_t)((k / d.W - oh * d.sh) * d.kw + (k % d.W - ow * d.sw));
                }
        }
        return;
    }
    bool k22 = d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2;
#pragma omp parallel for schedule(static) if (d.NC > 64)
    for (int64_t c = 0; c < d.NC; c++) {
        const float *xc = x + c * d.H * d.W;
        float *yc = y + c * d.OH * d.OW;
        if (k22) {
            maxpool22(&d, xc, yc, NULL, NULL);
            continue;
        }
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) yc[oh * d.OW + ow] = xc[argmax(&d, xc, oh, ow)];
    }
}

/* in {x, dy}, out {dx} */
void hr_cpu_maxpool_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *x = P_(n->in[0]), *dy = P_(n->in[1]);
    float *dx = P_(n->out[0]);
    if (T_(n->in[0]).dtype == HR_U8) { /* in {argmax, dy} */
        pool_dims d = dims_of(g, n, n->out[0], n->in[1]);
        const uint8_t *am = ptr[n->in[0]];
#pragma omp parallel for schedule(static) if (d.NC > 64)
        for (int64_t c = 0; c < d.NC; c++) {
            float *dc = dx + c * d.H * d.W;
            const float *gc = dy + c * d.OH * d.OW;
            const uint8_t *ac = am + c * d.OH * d.OW;
            if (!n->accum[0]) memset(dc, 0, sizeof(float) * (size_t)(d.H * d.W));
            for (int64_t oh = 0; oh < d.OH; oh++)
                for (int64_t ow = 0; ow < d.OW; ow++) {
                    int a = ac[oh * d.OW + ow];
                    dc[(oh * d.sh + a / d.kw) * d.W + ow * d.sw + a % d.kw] += gc[oh * d.OW + ow];
                }
        }
        return;
    }
    pool_dims d = dims_of(g, n, n->in[0], n->in[1]);
    bool k22 = d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2;
#pragma omp parallel for schedule(static) if (d.NC > 64)
    for (int64_t c = 0; c < d.NC; c++) {
        const float *xc = x + c * d.H * d.W, *gc = dy + c * d.OH * d.OW;
        float *dc = dx + c * d.H * d.W;
        if (!n->accum[0]) memset(dc, 0, sizeof(float) * (size_t)(d.H * d.W));
        if (k22) {
            maxpool22(&d, xc, NULL, dc, gc);
            continue;
        }
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) dc[ARGMAX(&d, xc, oh, ow)] += gc[oh * d.OW + ow];
    }
}

void hr_cpu_avgpool(const hr_graph *g, const hr_node *n, void *const *ptr) {
    pool_dims d = dims_of(g, n, n->in[0], n->out[0]);
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
    float inv = 1.0f / (float)(d.kh * d.kw);
    for (int64_t c = 0; c < d.NC; c++) {
        const float *xc = x + c * d.H * d.W;
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) {
                float s = 0;
                for (int i = 0; i < d.kh; i++)
                    for (int j = 0; j < d.kw; j++) s += xc[(oh * d.sh + i) * d.W + ow * d.sw + j];
                y[c * d.OH * d.OW + oh * d.OW + ow] = s * inv;
            }
    }
}

/* in {dy}, out {dx} */
void hr_cpu_avgpool_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    pool_dims d = dims_of(g, n, n->out[0], n->in[0]);
    const float *dy = P_(n->in[0]);
    float *dx = P_(n->out[0]);
    float inv = 1.0f / (float)(d.kh * d.kw);
    if (!n->accum[0]) memset(dx, 0, sizeof(float) * (size_t)(d.NC * d.H * d.W));
    for (int64_t c = 0; c < d.NC; c++) {
        float *dc = dx + c * d.H * d.W;
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) {
                float v = dy[c * d.OH * d.OW + oh * d.OW + ow] * inv;
                for (int i = 0; i < d.kh; i++)
                    for (int j = 0; j < d.kw; j++) dc[(oh * d.sh + i) * d.W + ow * d.sw + j] += v;
            }
    }
}
