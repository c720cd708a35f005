/* cpu_attention.c — causal self-attention on the CPU, one (sequence, head) a
 * task: forward as an online softmax (a running maximum rescales the sums, so
 * no row of scores is kept), the backward from the saved output and
 * log-sum-exp, recomputing each probability (and, with attn_pdrop, drawing
 * its keep decision again). Each task owns its head's slices of q, k, v and
 * their gradients, so the bits never depend on the threads. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t d = 0; d < n; d++) s += (double)a[d] * b[d];
    return s;
}

/* probability (i, j)'s factor: 1 / (1 - pdrop) kept, 0 dropped; 1 without drops */
static double keep_factor(const hr_attention_args *p, int64_t n, int64_t h, int64_t i, int64_t j) {
    if (p->pdrop <= 0) return 1.0;
    uint32_t b = hr_attn_block_key(p->seed, p->stream, p->first + (uint64_t)n, (uint64_t)h, (uint64_t)p->H,
                                   (uint64_t)i, (uint64_t)j);
    return hr_attn_uniform(b, (uint64_t)i, (uint64_t)j) >= p->pdrop ? (double)p->pscale : 0.0;
}

hr_status hr_cpu_attention(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    int64_t N = p->N, T = p->T, C = p->C, H = p->H, hs = C / H, row = 3 * C;
    double scale = p->scale;
#pragma omp parallel for schedule(dynamic, 1) if (N * H > 1 && T * T * hs > 65536)
    for (int64_t nh = 0; nh < N * H; nh++) {
        int64_t n = nh / H, h = nh % H;
        const float *base = p->qkv + n * T * row;
        double acc[hs];
        for (int64_t i = 0; i < T; i++) {
            const float *q = base + i * row + h * hs;
            double mx = -INFINITY, l = 0;
            memset(acc, 0, sizeof acc);
            for (int64_t j = 0; j <= i; j++) {
                const float *k = base + j * row + C + h * hs, *v = base + j * row + 2 * C + h * hs;
                double s = scale * dot(q, k, hs);
                if (s > mx) { /* a new maximum: what was summed shrinks by exp(old - new) */
                    double r = exp(mx - s);
                    l *= r;
                    for (int64_t d = 0; d < hs; d++) acc[d] *= r;
                    mx = s;
                }
                double e = exp(s - mx), ek = e * keep_factor(p, n, h, i, j); /* the sum counts the dropped too */
                l += e;
                for (int64_t d = 0; d < hs; d++) acc[d] += ek * v[d];
            }
            float *y = p->y + (n * T + i) * C + h * hs;
            for (int64_t d = 0; d < hs; d++) y[d] = (float)(acc[d] / l);
            if (p->lse) p->lse[(n * H + h) * T + i] = (float)(mx + log(l));
        }
    }
    return HR_OK;
}

/* With P = softmax(S) recomputed from the log-sum-exp and M the keep
 * factors (all 1 without drops): dV = (P o M)^T dY, dP = (dY V^T) o M,
 * dS = P o (dP - rowsum(dY o Y)), dQ = scale dS K, dK = scale dS^T Q. */
hr_status hr_cpu_attention_bwd(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    int64_t N = p->N, T = p->T, C = p->C, H = p->H, hs = C / H, row = 3 * C;
    double scale = p->scale;
#pragma omp parallel for schedule(dynamic, 1) if (N * H > 1 && T * T * hs > 65536)
    for (int64_t nh = 0; nh < N * H; nh++) {
        int64_t n = nh / H, h = nh % H;
        const float *base = p->qkv + n * T * row;
        float *gbase = p->dqkv + n * T * row;
        if (!p->acc)
            for (int64_t i = 0; i < T; i++)
                for (int part = 0; part < 3; part++) memset(gbase + i * row + part * C + h * hs, 0, sizeof(float) * (size_t)hs);
        double dq[hs];
        for (int64_t i = 0; i < T; i++) {
            const float *q = base + i * row + h * hs;
            const float *dy = p->dy + (n * T + i) * C + h * hs, *y = p->y_saved + (n * T + i) * C + h * hs;
            double D = dot(dy, y, hs), lse = p->lse_saved[(n * H + h) * T + i];
            memset(dq, 0, sizeof dq);
            for (int64_t j = 0; j <= i; j++) {
                const float *k = base + j * row + C + h * hs, *v = base + j * row + 2 * C + h * hs;
                float *dk = gbase + j * row + C + h * hs, *dv = gbase + j * row + 2 * C + h * hs;
                double pr = exp(scale * dot(q, k, hs) - lse), mk = keep_factor(p, n, h, i, j);
                double ds = pr * (mk * dot(dy, v, hs) - D) * scale, pk = pr * mk;
                for (int64_t d = 0; d < hs; d++) {
                    dq[d] += ds * k[d];
                    dk[d] += (float)(ds * q[d]);
                    dv[d] += (float)(pk * dy[d]);
                }
            }
            float *gq = gbase + i * row + h * hs;
            for (int64_t d = 0; d < hs; d++) gq[d] += (float)dq[d];
        }
    }
    return HR_OK;
}
