/* cpu_elementwise.c — Dropout, Add, Copy, Concat and (Log)Softmax on the CPU,
 * forward and backward; outputs honour their acc flags. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* Keep with probability 1-p, scaled by 1/(1-p); the decision hashes (seed,
 * stream, first + i), so every backend draws the same ones, and the backward
 * draws them again. Both directions multiply by (keep ? scale : 0), as
 * PyTorch's x * mask * scale: a dropped NaN or +-inf gives NaN, a dropped
 * negative -0 (not 0 written over it).
 *
 * The draws are hr_rng_uniform's, in loops of 64-bit integer multiplies
 * that vectorize (8 a vector in the AVX-512 clone): the char
 * GPT's 13 Dropouts took 17 ms forward and 18 backward a CPU step, scalar.
 * u is below 2^24, so its conversion through int32 is exact: the same bits. */
enum { DROP_Y = 0, DROP_DX = 1, DROP_DX_ACC = 2 };
#define DROP_RUN 4096 /* elements a thread takes at a time */

__attribute__((target_clones("avx512f", "avx2", "default"))) static void
drop_run(const hr_dropout_args *d, int mode, const float *in, float *out, int64_t i0, int64_t n) {
    uint64_t base = hr_rng_key(d->seed, d->stream) + d->first + (uint64_t)i0;
    float p = d->p, scale = d->scale;
    in += i0, out += i0;
#define DROP_F(i) ((float)(int32_t)(hr_mix64(base + (uint64_t)(i)) >> 40) * (1.0f / 16777216.0f) >= p ? scale : 0.0f)
    if (mode == DROP_DX_ACC) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] += in[i] * DROP_F(i);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] = in[i] * DROP_F(i);
    }
#undef DROP_F
}

static void drop_all(const hr_dropout_args *d, int mode, const float *in, float *out) {
    int64_t N = d->n, runs = (N + DROP_RUN - 1) / DROP_RUN;
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t r = 0; r < runs; r++)
        drop_run(d, mode, in, out, r * DROP_RUN, r * DROP_RUN + DROP_RUN < N ? DROP_RUN : N - r * DROP_RUN);
}

hr_status hr_cpu_dropout(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *d = &a->drop;
    const float *x = d->x;
    float *y = d->y;
    int64_t N = d->n;
    if (!d->train || d->p == 0.0f) {
        if (y != x) memcpy(y, x, sizeof(float) * (size_t)N);
        return HR_OK;
    }
    drop_all(d, DROP_Y, x, y);
    return HR_OK;
}

hr_status hr_cpu_dropout_bwd(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *d = &a->drop;
    const float *dy = d->dy;
    float *dx = d->dx;
    int64_t N = d->n;
    if (d->p != 0.0f) {
        drop_all(d, d->acc ? DROP_DX_ACC : DROP_DX, dy, dx);
        return HR_OK;
    }
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) dx[i] = d->acc ? dx[i] + dy[i] : dy[i];
    return HR_OK;
}

hr_status hr_cpu_add(void *ctx, const hr_kargs *a) {
    const float *x0 = a->add.a, *x1 = a->add.b;
    float *y = a->add.y;
    int64_t N = a->add.n;
    for (int64_t i = 0; i < N; i++) y[i] = x0[i] + x1[i];
    return HR_OK;
}

/* Reshape (forward) and Copy (gradients): a no-op when the planner made the
 * output a view of the input. */
hr_status hr_cpu_copy(void *ctx, const hr_kargs *a) {
    const float *x = a->copy.x;
    float *y = a->copy.y;
    int64_t N = a->copy.n;
    if (a->copy.acc) {
        for (int64_t i = 0; i < N; i++) y[i] += x[i];
    } else if (x != y) {
        memcpy(y, x, sizeof(float) * (size_t)N);
    }
    return HR_OK;
}

hr_status hr_cpu_concat(void *ctx, const hr_kargs *a) {
    const hr_concat_args *c = &a->cat;
    int64_t N = c->N, CY = c->CY, hw = c->inner;
    float *y = c->y;
    int64_t off = 0;
    for (int k = 0; k < c->k; k++) {
        const float *x = c->x[k];
        int64_t C = c->c[k];
        for (int64_t i = 0; i < N; i++)
            memcpy(y + (i * CY + off) * hw, x + i * C * hw, sizeof(float) * (size_t)(C * hw));
        off += C;
    }
    return HR_OK;
}

/* dx: the channels [offset, offset + C) of dy */
hr_status hr_cpu_concat_bwd(void *ctx, const hr_kargs *a) {
    const hr_concat_args *c = &a->cat;
    int64_t N = c->N, CY = c->CY, hw = c->inner, C = c->C;
    const float *dy = c->dy;
    float *dx = c->dx;
    for (int64_t i = 0; i < N; i++) {
        const float *src = dy + (i * CY + c->offset) * hw;
        float *dst = dx + i * C * hw;
        if (c->acc)
            for (int64_t j = 0; j < C * hw; j++) dst[j] += src[j];
        else
            memcpy(dst, src, sizeof(float) * (size_t)(C * hw));
    }
    return HR_OK;
}

hr_status hr_cpu_softmax(void *ctx, const hr_kargs *a) {
    const hr_softmax_args *s = &a->sm;
    int64_t N = s->N, C = s->C;
    const float *x = s->x;
    float *y = s->out;
    bool lg = s->log;
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float *yi = y + i * C;
        float mx = xi[0];
        for (int64_t j = 1; j < C; j++) mx = xi[j] > mx ? xi[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += exp((double)(xi[j] - mx));
        double lse = lg ? (double)mx + log(sum) : 0;
        for (int64_t j = 0; j < C; j++)
            yi[j] = lg ? (float)((double)xi[j] - lse) : (float)(exp((double)(xi[j] - mx)) / sum);
    }
    return HR_OK;
}

/* From the saved output y. softmax: dx = y (dy - sum(dy y)); log: dx = dy - exp(y) sum(dy) */
hr_status hr_cpu_softmax_bwd(void *ctx, const hr_kargs *a) {
    const hr_softmax_args *s = &a->sm;
    int64_t N = s->N, C = s->C;
    const float *y = s->y, *dy = s->dy;
    float *dx = s->dx;
    bool lg = s->log;
    for (int64_t i = 0; i < N; i++) {
        const float *yi = y + i * C, *gi = dy + i * C;
        float *di = dx + i * C;
        double dot = 0;
        for (int64_t j = 0; j < C; j++) dot += lg ? (double)gi[j] : (double)gi[j] * yi[j];
        for (int64_t j = 0; j < C; j++) {
            float v = lg ? (float)(gi[j] - expf(yi[j]) * dot) : (float)(yi[j] * (gi[j] - dot));
            di[j] = s->acc ? di[j] + v : v;
        }
    }
    return HR_OK;
}

/* Cast between F32, BF16 and F16 (through float: every half value is exact
 * in it), adding into y with acc. */
hr_status hr_cpu_cast(void *ctx, const hr_kargs *a) {
    (void)ctx;
    const hr_cast_args *c = &a->cast;
    int64_t N = c->n;
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) {
        float v = hr_load_f(c->x, c->from, i);
        hr_store_f(c->y, c->to, i, c->acc ? hr_load_f(c->y, c->to, i) + v : v);
    }
    return HR_OK;
}
