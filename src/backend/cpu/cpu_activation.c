/* cpu_activation.c — the elementwise activations on the CPU (ReLU, LeakyReLU,
 * GELU, SiLU, Sigmoid, Tanh), forward and backward, as PyTorch defines them. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* glibc's vector erff, expf and tanhf (libmvec, which -lm brings in): the
 * elementwise loops below call their vector forms. Their threads take whole
 * runs of elements (ACT_RUNS), so which elements take the vector form and
 * which the scalar peel and tail depends on the length alone, not on the
 * threads: the bits do not depend on the thread count. */
#if defined(__GLIBC__) && defined(__x86_64__) && __GLIBC_PREREQ(2, 35) /* the vector erff and tanhf came in 2.35 */
__attribute__((simd("notinbranch"))) float erff(float);
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) float tanhf(float);
#endif

/* ACT_RUNS: for i in [0, N), `body` then `store`. ACT_BWD: dx = g, or dx +=
 * g when acc, where `body` sets float g from element i: two loops, each with
 * one store. (One loop with `acc ?
 * dx[i] + g : g` in it ran GELU's exact backward on scalar erff and expf: 8
 * ms a char GPT layer at batch 8, against 1.2 for the forward; split: 3.)
 * The threads take whole runs of ACT_RUN elements, each run a vector loop
 * of its own: a run starts ACT_RUN floats after the last, so the vectorizer's
 * scalar peel and tail fall on the same elements of every run whatever the
 * threads, and so do glibc's vector and scalar calls, whose bits differ. */
#define ACT_RUN 256
#define ACT_RUNS(N, body, store)                                                                                       \
    _Pragma("omp parallel for schedule(static) if (N > 65536)") for (int64_t r = 0; r < (N + ACT_RUN - 1) / ACT_RUN;  \
                                                                      r++) {                                           \
        int64_t e = r * ACT_RUN + ACT_RUN < N ? r * ACT_RUN + ACT_RUN : N;                                             \
        _Pragma("omp simd") for (int64_t i = r * ACT_RUN; i < e; i++) {                                                \
            body;                                                                                                      \
            store;                                                                                                     \
        }                                                                                                              \
    }
#define ACT_BWD(acc, N, body)                                                                                          \
    do {                                                                                                               \
        if (acc) {                                                                                                     \
            ACT_RUNS(N, body, dx[i] += g)                                                                              \
        } else {                                                                                                       \
            ACT_RUNS(N, body, dx[i] = g)                                                                               \
        }                                                                                                              \
    } while (0)

/* The bit masks the backward passes keep, bit k of byte j for v[8j+k]:
 * LeakyReLU's is x > 0 (a NaN x takes the slope, as PyTorch's `x > 0 ? dy :
 * dy * slope`), ReLU's !(y <= 0) (a NaN y passes dy, as PyTorch's
 * threshold_backward `y <= 0 ? 0 : dy`). Eight values a byte, a fixed body,
 * so that it vectorises; `relu` is a constant at each call. */
static inline unsigned keep_bit(float v, bool relu) { return relu ? !(v <= 0.0f) : v > 0.0f; }

static inline void mask_of(const float *v, int64_t n, uint8_t *mask, bool relu) {
    int64_t nb = (n + 7) / 8, full = n / 8;
#pragma omp parallel for schedule(static) if (nb > 8192)
    for (int64_t j = 0; j < full; j++) {
        const float *vj = v + 8 * j;
        unsigned bits = 0;
        for (int k = 0; k < 8; k++) bits |= keep_bit(vj[k], relu) << k;
        mask[j] = (uint8_t)bits;
    }
    if (nb > full) {
        unsigned bits = 0;
        for (int64_t i = 8 * full; i < n; i++) bits |= keep_bit(v[i], relu) << (i - 8 * full);
        mask[full] = (uint8_t)bits;
    }
}

/* Mask byte m as eight lanes of all ones (bit set) or zeros: the backward
 * passes select with AND instead of a branch a bit (random masks made those
 * branches mispredict: ReLU.backward took 17% of deep_cnn's CPU step). */
#define LANE(m, k) (((m) >> (k)) & 1 ? 0xffffffffu : 0u)
#define LANES(m) {LANE(m, 0), LANE(m, 1), LANE(m, 2), LANE(m, 3), LANE(m, 4), LANE(m, 5), LANE(m, 6), LANE(m, 7)}
#define LANES4(m) LANES(m), LANES((m) + 1), LANES((m) + 2), LANES((m) + 3)
#define LANES16(m) LANES4(m), LANES4((m) + 4), LANES4((m) + 8), LANES4((m) + 12)
#define LANES64(m) LANES16(m), LANES16((m) + 16), LANES16((m) + 32), LANES16((m) + 48)
static const uint32_t lanes[256][8] = {LANES64(0), LANES64(64), LANES64(128), LANES64(192)};

/* Eight values of dy where their bits are set, else `other`'s (bits as
 * lanes); exact: a select, no arithmetic. */
static inline void select8(const uint32_t *lane, const float *dy, const float *other, float *v) {
    uint32_t g[8], o[8], r[8];
    memcpy(g, dy, sizeof g);
    memcpy(o, other, sizeof o);
    for (int k = 0; k < 8; k++) r[k] = (g[k] & lane[k]) | (o[k] & ~lane[k]);
    memcpy(v, r, sizeof r);
}

/* dx = bit ? dy : dy * neg, from LeakyReLU's bit mask. */
static void masked_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float neg, bool acc) {
    int64_t full = n / 8;
#pragma omp parallel for schedule(static) if (full > 8192)
    for (int64_t j = 0; j < full; j++) { /* 8 values a mask byte, a fixed body */
        float *d = dx + 8 * j, scaled[8], v[8];
        const float *g2 = dy + 8 * j;
        for (int k = 0; k < 8; k++) scaled[k] = g2[k] * neg;
        select8(lanes[mask[j]], g2, scaled, v);
        if (acc)
            for (int k = 0; k < 8; k++) d[k] += v[k];
        else
            for (int k = 0; k < 8; k++) d[k] = v[k];
    }
    for (int64_t i = 8 * full; i < n; i++) {
        float v = (mask[i >> 3] >> (i & 7)) & 1 ? dy[i] : dy[i] * neg;
        dx[i] = acc ? dx[i] + v : v;
    }
}

/* ---- ReLU ------------------------------------------------------------------
 * PyTorch's clamp_min(x, 0): x < 0 ? 0 : x keeps NaN, and -0 as -0. */
static void relu(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    /* two passes, each of which vectorises: y, then the bits from y (y may
     * be x's bytes; !(y <= 0) exactly where !(x <= 0)) */
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
    if (p->mask_out) mask_of(y, N, p->mask_out, true);
}

/* From the bit mask, or from y as PyTorch's threshold_backward: y <= 0 ? 0 :
 * dy (a NaN y passes dy). Two loops, so that each vectorises without a branch
 * inside. */
static void relu_bwd(const hr_act_args *p) {
    const float *y = p->y, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    if (p->mask) {
        /* not masked_bwd with a zero slope: dy * 0 is NaN for an infinite
         * dy and -0 for a negative one, where ReLU passes exact zeros */
        const uint8_t *mask = p->mask;
        bool acc = p->acc;
        int64_t full = N / 8;
#pragma omp parallel for schedule(static) if (full > 8192)
        for (int64_t j = 0; j < full; j++) { /* 8 values a mask byte, a fixed body */
            static const float zeros[8];
            float *d = dx + 8 * j, v[8];
            select8(lanes[mask[j]], dy + 8 * j, zeros, v);
            if (acc)
                for (int k = 0; k < 8; k++) d[k] += v[k];
            else
                for (int k = 0; k < 8; k++) d[k] = v[k];
        }
        for (int64_t i = 8 * full; i < N; i++) {
            float v = (mask[i >> 3] >> (i & 7)) & 1 ? dy[i] : 0.0f;
            dx[i] = acc ? dx[i] + v : v;
        }
        return;
    }
    if (p->acc) {
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] += y[i] <= 0.0f ? 0.0f : dy[i];
    } else {
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
    }
}

/* ---- LeakyReLU ------------------------------------------------------------- */
static void leaky_relu(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    float al = p->alpha;
    /* the bits first, from x: y may be x's bytes, and with a negative slope
     * y > 0 is not x > 0. A NaN x gives NaN * slope, NaN. */
    if (p->mask_out) mask_of(x, N, p->mask_out, false);
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) y[i] = x[i] > 0.0f ? x[i] : x[i] * al;
}

static void leaky_relu_bwd(const hr_act_args *p) {
    const float *x = p->x, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    float al = p->alpha;
    if (p->mask) {
        masked_bwd(p->mask, dy, dx, N, al, p->acc);
        return;
    }
    if (p->acc) {
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] += x[i] > 0.0f ? dy[i] : dy[i] * al;
    } else {
#pragma omp parallel for simd schedule(simd : static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * al;
    }
}

/* ---- GELU ------------------------------------------------------------------
 * Each expression is grouped as PyTorch's CPU kernel groups it, so that the
 * float rounding is the same as far as erff/tanhf/expf allow. */
#define GELU_SQRT1_2 0.70710678118654752440f   /* 1/sqrt(2) */
#define GELU_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */
#define GELU_BETA 0.79788456080286535588f      /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715f

static void gelu(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    if (p->tanh_approx) {
        ACT_RUNS(N, float v = x[i], y[i] = 0.5f * v * (1.0f + tanhf(GELU_BETA * (v + GELU_KAPPA * (v * v * v)))))
    } else {
        ACT_RUNS(N, float v = x[i], y[i] = v * 0.5f * (1.0f + erff(v * GELU_SQRT1_2)))
    }
}

/* From x: exact dx = dy (Phi(x) + x phi(x)); tanh form differentiates its
 * forward, as PyTorch's gelu_backward does. */
static void gelu_bwd(const hr_act_args *p) {
    const float *x = p->x, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    if (p->tanh_approx)
        ACT_BWD(p->acc, N, float v = x[i]; float v2 = v * v; float t = tanhf(GELU_BETA * (v + GELU_KAPPA * (v2 * v)));
                float g = dy[i] * (0.5f * (1.0f + t) +
                                   0.5f * v * (1.0f - t * t) * (GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * v2))));
    else
        ACT_BWD(p->acc, N, float v = x[i];
                float g = dy[i] * (0.5f * (1.0f + erff(v * GELU_SQRT1_2)) +
                                   v * (expf(-0.5f * v * v) * GELU_INV_SQRT_2PI)));
}

/* ---- SiLU, Sigmoid, Tanh ---------------------------------------------------- */
static void silu(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    ACT_RUNS(N, (void)0, y[i] = x[i] / (1.0f + expf(-x[i])))
}

/* From x: d/dx x s(x) = s (1 + x (1 - s)). */
static void silu_bwd(const hr_act_args *p) {
    const float *x = p->x, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    ACT_BWD(p->acc, N, float s = 1.0f / (1.0f + expf(-x[i])); float g = dy[i] * s * (1.0f + x[i] * (1.0f - s)));
}

static void sigmoid(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    ACT_RUNS(N, (void)0, y[i] = 1.0f / (1.0f + expf(-x[i])))
}

/* From y, so that x need not be kept: dx = dy (1 - y) y. */
static void sigmoid_bwd(const hr_act_args *p) {
    const float *y = p->y, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    ACT_BWD(p->acc, N, float g = dy[i] * (1.0f - y[i]) * y[i]);
}

static void tanh_fwd(const hr_act_args *p) {
    const float *x = p->x;
    float *y = p->out;
    int64_t N = p->n;
    ACT_RUNS(N, (void)0, y[i] = tanhf(x[i]))
}

/* From y: dx = dy (1 - y^2). */
static void tanh_bwd(const hr_act_args *p) {
    const float *y = p->y, *dy = p->dy;
    float *dx = p->out;
    int64_t N = p->n;
    ACT_BWD(p->acc, N, float g = dy[i] * (1.0f - y[i] * y[i]));
}

/* ---- the two kernels: one switch each, over the family's ops ---------------- */
hr_status hr_cpu_act(void *ctx, const hr_kargs *a) {
    const hr_act_args *p = &a->act;
    switch (a->op) {
    case HR_OP_RELU: relu(p); break;
    case HR_OP_LEAKY_RELU: leaky_relu(p); break;
    case HR_OP_GELU: gelu(p); break;
    case HR_OP_SILU: silu(p); break;
    case HR_OP_SIGMOID: sigmoid(p); break;
    case HR_OP_TANH: tanh_fwd(p); break;
    default: return hr_error_set(HR_ERR_INTERNAL, "cpu activation kernel: not an activation (%s)", hr_op_name(a->op));
    }
    return HR_OK;
}

hr_status hr_cpu_act_bwd(void *ctx, const hr_kargs *a) {
    const hr_act_args *p = &a->act;
    switch (a->op) {
    case HR_OP_RELU_BWD: relu_bwd(p); break;
    case HR_OP_LEAKY_RELU_BWD: leaky_relu_bwd(p); break;
    case HR_OP_GELU_BWD: gelu_bwd(p); break;
    case HR_OP_SILU_BWD: silu_bwd(p); break;
    case HR_OP_SIGMOID_BWD: sigmoid_bwd(p); break;
    case HR_OP_TANH_BWD: tanh_bwd(p); break;
    default:
        return hr_error_set(HR_ERR_INTERNAL, "cpu activation kernel: not an activation's backward (%s)",
                            hr_op_name(a->op));
    }
    return HR_OK;
}
