/* cpu_elementwise.c — ReLU, Dropout, Add, Copy, Concat and (Log)Softmax on
 * the CPU, forward and backward; outputs honour the node's accum flags. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

static int64_t numel(const hr_graph *g, int t) { return hr_shape_numel(&T_(t).shape); }

/* in {x}, out {y, mask?}: bit k of mask byte j is y[8j+k] > 0 */
void hr_cpu_relu(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
    int64_t N = numel(g, n->in[0]);
    uint8_t *mask = n->nout > 1 && n->out[1] >= 0 ? ptr[n->out[1]] : NULL;
    if (!mask) {
#pragma omp parallel for simd schedule(static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    }
    /* two passes, each of which vectorises: y, then the bits from y */
#pragma omp parallel for simd schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    int64_t nb = (N + 7) / 8, full = N / 8;
#pragma omp parallel for schedule(static) if (nb > 8192)
    for (int64_t j = 0; j < full; j++) {
        const float *yj = y + 8 * j;
        mask[j] = (uint8_t)((yj[0] > 0.0f) | (yj[1] > 0.0f) << 1 | (yj[2] > 0.0f) << 2 | (yj[3] > 0.0f) << 3 |
                            (yj[4] > 0.0f) << 4 | (yj[5] > 0.0f) << 5 | (yj[6] > 0.0f) << 6 | (yj[7] > 0.0f) << 7);
    }
    if (nb > full) {
        unsigned bits = 0;
        for (int64_t i = 8 * full; i < N; i++) bits |= (unsigned)(y[i] > 0.0f) << (i - 8 * full);
        mask[full] = (uint8_t)bits;
    }
}

/* in {y, dy}, out {dx}: y > 0 is where x was > 0. Two loops, so that each
 * vectorises without a branch inside. */
void hr_cpu_relu_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *y = P_(n->in[0]), *dy = P_(n->in[1]);
    float *dx = P_(n->out[0]);
    int64_t N = numel(g, n->in[1]);
    if (T_(n->in[0]).dtype == HR_U8) { /* in {mask, dy} */
        const uint8_t *mask = ptr[n->in[0]];
        bool acc = n->accum[0];
        int64_t full = N / 8;
#pragma omp parallel for schedule(static) if (full > 8192)
        for (int64_t j = 0; j < full; j++) { /* 8 values a mask byte, a fixed body */
            unsigned m = mask[j];
            float *d = dx + 8 * j;
            const float *g2 = dy + 8 * j;
            float v[8];
            for (int k = 0; k < 8; k++) v[k] = (m >> k) & 1 ? g2[k] : 0.0f;
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
    if (n->accum[0]) {
#pragma omp parallel for simd schedule(static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
#pragma omp parallel for simd schedule(static) if (N > 65536)
        for (int64_t i = 0; i < N; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
}

/* in {x}, out {y, mask}: keep with probability 1-p, scaled by 1/(1-p). */
void hr_cpu_dropout(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
    int64_t N = numel(g, n->in[0]);
    if (!n->a.train || n->a.p == 0.0f) {
        if (y != x) memcpy(y, x, sizeof(float) * (size_t)N);
        if (n->a.train) memset(ptr[n->out[1]], 1, (size_t)N);
        return;
    }
    uint8_t *mask = ptr[n->out[1]];
    float p = n->a.p, scale = 1.0f / (1.0f - p);
    uint64_t stream = hr_dropout_stream(n->a.seed, si->t + 1);
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; i++) {
        uint8_t keep = hr_rng_uniform(si->seed, stream, (uint64_t)i) >= p;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}

/* in {mask, dy}, out {dx} */
void hr_cpu_dropout_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const uint8_t *mask = ptr[n->in[0]];
    const float *dy = P_(n->in[1]);
    float *dx = P_(n->out[0]);
    int64_t N = numel(g, n->in[1]);
    float scale = 1.0f / (1.0f - n->a.p);
    bool acc = n->accum[0];
    for (int64_t i = 0; i < N; i++) {
        float v = mask[i] ? dy[i] * scale : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
}

void hr_cpu_add(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *a = P_(n->in[0]), *b = P_(n->in[1]);
    float *y = P_(n->out[0]);
    int64_t N = numel(g, n->out[0]);
    for (int64_t i = 0; i < N; i++) y[i] = a[i] + b[i];
}

/* Reshape (forward) and Copy (gradients): a no-op when the planner made the
 * output a view of the input. */
void hr_cpu_copy(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
    int64_t N = numel(g, n->out[0]);
    if (n->accum[0]) {
        for (int64_t i = 0; i < N; i++) y[i] += x[i];
    } else if (x != y) {
        memcpy(y, x, sizeof(float) * (size_t)N);
    }
}

/* Inner size of one sample-channel block: H*W for images, 1 for vectors. */
static int64_t inner(const hr_shape *s) {
    int64_t r = 1;
    for (int i = 2; i < s->ndim; i++) r *= s->d[i];
    return r;
}

void hr_cpu_concat(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *ys = &T_(n->out[0]).shape;
    int64_t N = ys->d[0], CY = ys->d[1], hw = inner(ys);
    float *y = P_(n->out[0]);
    int64_t off = 0;
    for (int k = 0; k < n->nin; k++) {
        const float *x = P_(n->in[k]);
        int64_t C = T_(n->in[k]).shape.d[1];
        for (int64_t i = 0; i < N; i++)
            memcpy(y + (i * CY + off) * hw, x + i * C * hw, sizeof(float) * (size_t)(C * hw));
        off += C;
    }
}

/* in {dy}, out {dx}: the channels [offset, offset + C) of dy */
void hr_cpu_concat_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *ys = &T_(n->in[0]).shape;
    int64_t N = ys->d[0], CY = ys->d[1], hw = inner(ys), C = T_(n->out[0]).shape.d[1];
    const float *dy = P_(n->in[0]);
    float *dx = P_(n->out[0]);
    for (int64_t i = 0; i < N; i++) {
        const float *src = dy + (i * CY + n->a.offset) * hw;
        float *dst = dx + i * C * hw;
        if (n->accum[0])
            for (int64_t j = 0; j < C * hw; j++) dst[j] += src[j];
        else
            memcpy(dst, src, sizeof(float) * (size_t)(C * hw));
    }
}

void hr_cpu_softmax(const hr_graph *g, const hr_node *n, void *const *ptr, bool lg) {
    const hr_shape *s = &T_(n->in[0]).shape;
    int64_t N = s->d[0], C = s->d[1];
    const float *x = P_(n->in[0]);
    float *y = P_(n->out[0]);
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
}

/* in {y, dy}, out {dx}. softmax: dx = y (dy - sum(dy y)); log: dx = dy - exp(y) sum(dy) */
void hr_cpu_softmax_bwd(const hr_graph *g, const hr_node *n, void *const *ptr, bool lg) {
    const hr_shape *s = &T_(n->in[0]).shape;
    int64_t N = s->d[0], C = s->d[1];
    const float *y = P_(n->in[0]), *dy = P_(n->in[1]);
    float *dx = P_(n->out[0]);
    for (int64_t i = 0; i < N; i++) {
        const float *yi = y + i * C, *gi = dy + i * C;
        float *di = dx + i * C;
        double dot = 0;
        for (int64_t j = 0; j < C; j++) dot += lg ? (double)gi[j] : (double)gi[j] * yi[j];
        for (int64_t j = 0; j < C; j++) {
            float v = lg ? (float)(gi[j] - expf(yi[j]) * dot) : (float)(yi[j] * (gi[j] - dot));
            di[j] = n->accum[0] ? di[j] + v : v;
        }
    }
}
