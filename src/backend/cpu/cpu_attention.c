/* cpu_attention.c — causal self-attention on the CPU, one (sequence, head) a
 * task, its queries in blocks of HR_ATT_ROWS rows: a block's scores against
 * the keys up to its last row are one product (S = scale Q K^T), its
 * probabilities a softmax of each row in place (the sum in double; with
 * attn_pdrop each kept probability scaled by 1 / (1 - p), the dropped ones 0,
 * the sum counting them all), its output one more product (Y = P V). The
 * backward recomputes each block's probabilities from the saved log-sum-exp
 * (and the same keep decisions) and makes dQ, dK and dV by products. Each
 * task owns its head's slices of q, k, v and their gradients, and the
 * products' library is chosen by their shape, so the bits never depend on
 * the threads. (The first form, an online softmax a query at a time with its
 * sums in double, took 45 ms forward and 82 ms backward a layer of char_gpt at
 * batch 8, 65% of the step; the blocks with vector exponentials take 3.4 and
 * 7.2 ms.) */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define HR_ATT_ROWS 64 /* query rows a block */

/* glibc's vector expf (libmvec, which -lm brings in): the loops below call
 * its 4-, 8- or 16-wide forms, by the clone the CPU runs. The exponentials
 * were most of attention's time on the CPU with the scalar expf. A row's
 * split into vector and scalar calls comes from its length and its address
 * in the scratch, which is the same in every thread's, so the bits still do
 * not depend on the threads. */
#if defined(__GLIBC__) && defined(__x86_64__) && __GLIBC_PREREQ(2, 22) /* the vector expf came in 2.22 */
__attribute__((simd("notinbranch"))) float expf(float);
#endif

/* s[j] = exp(s[j] - sub), j < n; returns their sum in double */
__attribute__((target_clones("avx512f", "avx2", "default"))) static double exp_row(float *s, int64_t n, float sub) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) s[j] = expf(s[j] - sub);
    double l = 0;
    for (int64_t j = 0; j < n; j++) l += s[j];
    return l;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) static float max_row(const float *s, int64_t n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* attn_pdrop's factors of row i, keys j0 .. j1 - 1 (1 / (1 - pdrop)
 * kept, 0 dropped), into k: one block key for keys of the same j >> 16 (the
 * key changes every 2^16 keys), a hash a pair. hr_attn_uniform written out so
 * that it vectorizes (32-bit multiplies, a clone per ISA; x >> 8 is below
 * 2^24, so its conversion through int32 is exact): the same draws. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
keep_factors(const hr_attention_args *p, int64_t n, int64_t h, int64_t i, int64_t j0, int64_t j1, float *k) {
    uint32_t b = hr_attn_block_key(p->seed, p->stream, p->first + (uint64_t)n, (uint64_t)h, (uint64_t)p->H,
                                   (uint64_t)i, (uint64_t)j0);
    uint32_t hi = (uint32_t)(((uint64_t)i & 0xffffU) << 16);
    float pd = p->pdrop, ps = p->pscale;
#pragma omp simd
    for (int64_t j = j0; j < j1; j++) {
        uint32_t x = hr_hash32(b ^ (hi | (uint32_t)((uint64_t)j & 0xffffU)));
        k[j - j0] = (float)(int32_t)(x >> 8) * (1.0f / 16777216.0f) >= pd ? ps : 0.0f;
    }
}

/* s[j] *= mul (times the keep factor when dropping), j <= i; f: HR_ATT_ROWS floats of room */
static void scale_row(const hr_attention_args *p, int64_t n, int64_t h, int64_t i, float *s, float mul, float *f) {
    if (p->pdrop <= 0) {
        for (int64_t j = 0; j <= i; j++) s[j] *= mul;
        return;
    }
    for (int64_t j0 = 0; j0 <= i; j0 += HR_ATT_ROWS) {
        int64_t j1 = j0 + HR_ATT_ROWS < i + 1 ? j0 + HR_ATT_ROWS : i + 1;
        keep_factors(p, n, h, i, j0, j1, f);
        for (int64_t j = j0; j < j1; j++) s[j] *= mul * f[j - j0];
    }
}

/* The tasks' threads (at most one a task) and a task's scratch floats:
 * one block of scores forward, two backward (P and dP). */
static int att_threads(const hr_cpu *c, const hr_attention_args *p) {
    int64_t tasks = p->N * p->H;
    int th = c->nthreads < tasks ? c->nthreads : (int)tasks;
    return th > 0 ? th : 1;
}

static size_t att_scratch(const hr_attention_args *p, bool backward) {
    int64_t rows = p->T < HR_ATT_ROWS ? p->T : HR_ATT_ROWS;
    return (size_t)(backward ? 2 : 1) * (size_t)rows * (size_t)p->T;
}

size_t hr_cpu_attention_workspace(const hr_cpu *c, const hr_kargs *a) {
    if (a->op != HR_OP_ATTENTION && a->op != HR_OP_ATTENTION_BWD) return 0;
    return sizeof(float) * (size_t)att_threads(c, &a->attn) * att_scratch(&a->attn, a->op == HR_OP_ATTENTION_BWD);
}

static int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* The task threads and each one's scratch floats, checked against the
 * planned workspace. */
static hr_status task_scratch(const hr_cpu *c, const hr_kargs *a, bool backward, int *th, size_t *per) {
    *th = att_threads(c, &a->attn);
    *per = att_scratch(&a->attn, backward);
    size_t need = sizeof(float) * *per * (size_t)*th;
    if (!a->ws || a->ws_bytes < need)
        return hr_error_set(HR_ERR_INTERNAL, "CausalSelfAttention%s: %zu bytes of workspace planned, %zu needed",
                            backward ? ".backward" : "", a->ws ? a->ws_bytes : 0, need);
    return HR_OK;
}

/* S (m x r1) = scale Q[r0, r0 + m) K[0, r1)^T: a block's scores, q and k rows of ld row */
static void block_scores(const float *q, const float *k, int64_t r0, int64_t m, int64_t r1, int64_t hs, int64_t row,
                         float scale, float *S) {
    hr_cpu_sgemm_one(false, true, (int)m, (int)r1, (int)hs, scale, q + r0 * row, (int)row, k, (int)row, 0.0f, S,
                     (int)r1);
}

hr_status hr_cpu_attention(void *ctx, const hr_kargs *a) {
    const hr_cpu *c = ctx;
    const hr_attention_args *p = &a->attn;
    int64_t N = p->N, T = p->T, C = p->C, H = p->H, hs = C / H, row = 3 * C;
    float scale = (float)p->scale;
    int th;
    size_t per;
    hr_status st = task_scratch(c, a, false, &th, &per);
    if (st) return st;
#pragma omp parallel for num_threads(th) schedule(dynamic, 1) if (N * H > 1 && T * T * hs > 65536)
    for (int64_t nh = 0; nh < N * H; nh++) {
        int64_t n = nh / H, h = nh % H;
        const float *q = p->qkv + n * T * row + h * hs, *k = q + C, *v = q + 2 * C;
        float *y = p->y + n * T * C + h * hs, *S = (float *)a->ws + per * (size_t)thread_num(), f[HR_ATT_ROWS];
        for (int64_t r0 = 0; r0 < T; r0 += HR_ATT_ROWS) {
            int64_t r1 = r0 + HR_ATT_ROWS < T ? r0 + HR_ATT_ROWS : T, m = r1 - r0; /* keys 0 .. r1 - 1 */
            block_scores(q, k, r0, m, r1, hs, row, scale, S);
            for (int64_t i = r0; i < r1; i++) {
                float *s = S + (i - r0) * r1, mx = max_row(s, i + 1);
                double l = exp_row(s, i + 1, mx);
                scale_row(p, n, h, i, s, (float)(1.0 / l), f);
                memset(s + i + 1, 0, sizeof(float) * (size_t)(r1 - i - 1));
                if (p->lse) p->lse[(n * H + h) * T + i] = (float)((double)mx + log(l));
            }
            hr_cpu_sgemm_one(false, false, (int)m, (int)hs, (int)r1, 1.0f, S, (int)r1, v, (int)row, 0.0f,
                             y + r0 * C, (int)C);
        }
    }
    return HR_OK;
}

/* With P = softmax(S) recomputed from the log-sum-exp and M the keep
 * factors (all 1 without drops): dV = (P o M)^T dY, dP = (dY V^T) o M,
 * dS = P o (dP - rowsum(dY o Y)), dQ = scale dS K, dK = scale dS^T Q. */
hr_status hr_cpu_attention_bwd(void *ctx, const hr_kargs *a) {
    const hr_cpu *c = ctx;
    const hr_attention_args *p = &a->attn;
    int64_t N = p->N, T = p->T, C = p->C, H = p->H, hs = C / H, row = 3 * C;
    float scale = (float)p->scale;
    int th;
    size_t per;
    hr_status st = task_scratch(c, a, true, &th, &per);
    if (st) return st;
#pragma omp parallel for num_threads(th) schedule(dynamic, 1) if (N * H > 1 && T * T * hs > 65536)
    for (int64_t nh = 0; nh < N * H; nh++) {
        int64_t n = nh / H, h = nh % H;
        const float *q = p->qkv + n * T * row + h * hs, *k = q + C, *v = q + 2 * C;
        const float *dy = p->dy + n * T * C + h * hs, *y = p->y_saved + n * T * C + h * hs;
        float *dq = p->dqkv + n * T * row + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        float *P = (float *)a->ws + per * (size_t)thread_num(), *dP = P + per / 2, f[HR_ATT_ROWS];
        if (!p->acc)
            for (int64_t i = 0; i < T; i++)
                for (int part = 0; part < 3; part++) memset(dq + i * row + part * C, 0, sizeof(float) * (size_t)hs);
        for (int64_t r0 = 0; r0 < T; r0 += HR_ATT_ROWS) {
            int64_t r1 = r0 + HR_ATT_ROWS < T ? r0 + HR_ATT_ROWS : T, m = r1 - r0;
            block_scores(q, k, r0, m, r1, hs, row, scale, P);
            hr_cpu_sgemm_one(false, true, (int)m, (int)r1, (int)hs, 1.0f, dy + r0 * C, (int)C, v, (int)row, 0.0f, dP,
                             (int)r1);
            for (int64_t i = r0; i < r1; i++) {
                float *pr = P + (i - r0) * r1, *dpr = dP + (i - r0) * r1;
                const float *dyi = dy + i * C, *yi = y + i * C;
                double D = 0;
                for (int64_t d = 0; d < hs; d++) D += (double)dyi[d] * yi[d];
                float lse = p->lse_saved[(n * H + h) * T + i], Df = (float)D;
                exp_row(pr, i + 1, lse); /* the probabilities again */
                for (int64_t j0 = 0; j0 <= i; j0 += HR_ATT_ROWS) {
                    int64_t j1 = j0 + HR_ATT_ROWS < i + 1 ? j0 + HR_ATT_ROWS : i + 1;
                    if (p->pdrop > 0) keep_factors(p, n, h, i, j0, j1, f);
                    for (int64_t j = j0; j < j1; j++) {
                        float e = pr[j], mk = p->pdrop > 0 ? f[j - j0] : 1.0f;
                        dpr[j] = e * (mk * dpr[j] - Df) * scale;
                        pr[j] = e * mk;
                    }
                }
                memset(pr + i + 1, 0, sizeof(float) * (size_t)(r1 - i - 1));
                memset(dpr + i + 1, 0, sizeof(float) * (size_t)(r1 - i - 1));
            }
            /* dV[0, r1) += (P o M)^T dY[r0, r1); dQ[r0, r1) += dS K[0, r1); dK[0, r1) += dS^T Q[r0, r1) */
            hr_cpu_sgemm_one(true, false, (int)r1, (int)hs, (int)m, 1.0f, P, (int)r1, dy + r0 * C, (int)C, 1.0f, dv,
                             (int)row);
            hr_cpu_sgemm_one(false, false, (int)m, (int)hs, (int)r1, 1.0f, dP, (int)r1, k, (int)row, 1.0f,
                             dq + r0 * row, (int)row);
            hr_cpu_sgemm_one(true, false, (int)r1, (int)hs, (int)m, 1.0f, dP, (int)r1, q + r0 * row, (int)row, 1.0f,
                             dk, (int)row);
        }
    }
    return HR_OK;
}
