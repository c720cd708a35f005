/* cpu_pool.c — MaxPool2d and AvgPool2d (no padding) on the CPU; the max
 * pool's backward reads the saved window offsets, or finds the max again. */
#include "backend/cpu/cpu.h"

#include <string.h>

typedef struct {
    int64_t NC, H, W, OH, OW;
    int kh, kw, sh, sw;
} pool_dims;

static pool_dims dims_of(const hr_pool_args *p) {
    return (pool_dims){p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw};
}

/* PyTorch's test, `v > max || isnan(v)`: the first maximum wins, and a NaN
 * beats everything, the window's last NaN among several (its gradient goes
 * there). */
#define BEATS(v, m) ((v) > (m) || (v) != (v))

/* Index of the window's maximum, as PyTorch picks it. */
static int64_t argmax(const pool_dims *d, const float *x, int64_t oh, int64_t ow) {
    int64_t best = oh * d->sh * d->W + ow * d->sw;
    float bv = x[best];
    for (int i = 0; i < d->kh; i++)
        for (int j = 0; j < d->kw; j++) {
            int64_t k = (oh * d->sh + i) * d->W + ow * d->sw + j;
            if (BEATS(x[k], bv)) bv = x[k], best = k;
        }
    return best;
}

/* The common 2x2 stride-2 window, without the general loop. */
static inline int64_t argmax22(const float *x, int64_t W, int64_t oh, int64_t ow) {
    int64_t k = 2 * oh * W + 2 * ow, best = k;
    float bv = x[k];
    if (BEATS(x[k + 1], bv)) bv = x[k + 1], best = k + 1;
    if (BEATS(x[k + W], bv)) bv = x[k + W], best = k + W;
    if (BEATS(x[k + W + 1], bv)) best = k + W + 1;
    return best;
}

#define ARGMAX(d, x, oh, ow) \
    ((d)->kh == 2 && (d)->kw == 2 && (d)->sh == 2 && (d)->sw == 2 ? argmax22(x, (d)->W, oh, ow) : argmax(d, x, oh, ow))

/* 2x2 windows, stride 2: two input rows at a time, no index arithmetic per
 * element. Ties and NaNs follow argmax22: the pairs (a, b) and (c, e), then
 * their winners, give the value of the last NaN in a, b, c, e order. */
static void maxpool22(const pool_dims *d, const float *xc, float *yc, float *dc, const float *gc) {
    for (int64_t oh = 0; oh < d->OH; oh++) {
        const float *r0 = xc + 2 * oh * d->W, *r1 = r0 + d->W;
        for (int64_t ow = 0; ow < d->OW; ow++) {
            int64_t j = 2 * ow;
            float a = r0[j], b = r0[j + 1], c = r1[j], e = r1[j + 1];
            if (!dc) {
                float m = a, m2 = c;
                if (BEATS(b, m)) m = b;
                if (BEATS(e, m2)) m2 = e;
                if (BEATS(m2, m)) m = m2;
                yc[oh * d->OW + ow] = m;
            } else {
                dc[argmax22(xc, d->W, oh, ow)] += gc[oh * d->OW + ow];
            }
        }
    }
}

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

/* argmax_out, when kept, holds the window offset i*kw + j of each max */
hr_status hr_cpu_maxpool(void *ctx, const hr_kargs *a) {
    const hr_pool_args *pa = &a->pool;
    pool_dims d = dims_of(pa);
    const float *x = pa->x;
    float *y = pa->y;
    uint8_t *am = pa->argmax_out;
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
        return HR_OK;
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
    return HR_OK;
}

hr_status hr_cpu_maxpool_bwd(void *ctx, const hr_kargs *a) {
    const hr_pool_args *pa = &a->pool;
    pool_dims d = dims_of(pa);
    const float *x = pa->x, *dy = pa->dy;
    float *dx = pa->dx;
    if (pa->argmax) {
        const uint8_t *am = pa->argmax;
#pragma omp parallel for schedule(static) if (d.NC > 64)
        for (int64_t c = 0; c < d.NC; c++) {
            float *dc = dx + c * d.H * d.W;
            const float *gc = dy + c * d.OH * d.OW;
            const uint8_t *ac = am + c * d.OH * d.OW;
            if (!pa->acc) memset(dc, 0, sizeof(float) * (size_t)(d.H * d.W));
            for (int64_t oh = 0; oh < d.OH; oh++)
                for (int64_t ow = 0; ow < d.OW; ow++) {
                    int o = ac[oh * d.OW + ow];
                    dc[(oh * d.sh + o / d.kw) * d.W + ow * d.sw + o % d.kw] += gc[oh * d.OW + ow];
                }
        }
        return HR_OK;
    }
    bool k22 = d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2;
#pragma omp parallel for schedule(static) if (d.NC > 64)
    for (int64_t c = 0; c < d.NC; c++) {
        const float *xc = x + c * d.H * d.W, *gc = dy + c * d.OH * d.OW;
        float *dc = dx + c * d.H * d.W;
        if (!pa->acc) memset(dc, 0, sizeof(float) * (size_t)(d.H * d.W));
        if (k22) {
            maxpool22(&d, xc, NULL, dc, gc);
            continue;
        }
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) dc[ARGMAX(&d, xc, oh, ow)] += gc[oh * d.OW + ow];
    }
    return HR_OK;
}

hr_status hr_cpu_avgpool(void *ctx, const hr_kargs *a) {
    pool_dims d = dims_of(&a->pool);
    const float *x = a->pool.x;
    float *y = a->pool.y;
    float inv = 1.0f / (float)(d.kh * d.kw);
#pragma omp parallel for schedule(static) if (d.NC > 64)
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
    return HR_OK;
}

hr_status hr_cpu_avgpool_bwd(void *ctx, const hr_kargs *a) {
    pool_dims d = dims_of(&a->pool);
    const float *dy = a->pool.dy;
    float *dx = a->pool.dx;
    float inv = 1.0f / (float)(d.kh * d.kw);
#pragma omp parallel for schedule(static) if (d.NC > 64)
    for (int64_t c = 0; c < d.NC; c++) {
        float *dc = dx + c * d.H * d.W;
        if (!a->pool.acc) memset(dc, 0, sizeof(float) * (size_t)(d.H * d.W));
        for (int64_t oh = 0; oh < d.OH; oh++)
            for (int64_t ow = 0; ow < d.OW; ow++) {
                float v = dy[c * d.OH * d.OW + oh * d.OW + ow] * inv;
                for (int i = 0; i < d.kh; i++)
                    for (int j = 0; j < d.kw; j++) dc[(oh * d.sh + i) * d.W + ow * d.sw + j] += v;
            }
    }
    return HR_OK;
}
