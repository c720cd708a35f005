/* cpu_norm.c — BatchNorm and LayerNorm on the CPU, forward and backward:
 * statistics with sums in double, parameter gradients in a fixed order;
 * BatchNorm's training passes through oneDNN where that is faster (below). */
#include "backend/cpu/dnnl_lib.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int64_t N, C, HW;
} bn_dims;

/* ---- BatchNorm ---------------------------------------------------------------
 * Training: batch statistics, kept for the backward, and the running ones
 * updated; inference: the running statistics. */
hr_status hr_cpu_batchnorm(void *ctx, const hr_kargs *a) {
    hr_status dnnl_st;
    if (hr_cpu_norm_dnnl(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (below) */
    const hr_batchnorm_args *bn = &a->bn;
    bn_dims d = {bn->N, bn->C, bn->HW};
    const float *x = bn->x, *gm = bn->gamma, *bt = bn->beta;
    float *rm = bn->running_mean, *rv = bn->running_var, *y = bn->y;
    float eps = bn->eps, mom = bn->momentum;
    int64_t M = d.N * d.HW;
#pragma omp parallel for schedule(static) if (d.C > 1 && M > 4096)
    for (int64_t c = 0; c < d.C; c++) {
        float mean, invstd;
        if (bn->train) {
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
            if (bn->mean) bn->mean[c] = mean;
            if (bn->invstd) bn->invstd[c] = invstd;
            double unbiased = M > 1 ? ss / (double)(M - 1) : var;
            if (rm) { /* NULL: a recomputation, which leaves the running statistics alone */
                rm[c] = (1.0f - mom) * rm[c] + mom * mean;
                rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
            }
        } else {
            mean = rm[c];
            invstd = 1.0f / sqrtf(rv[c] + eps);
        }
        float ka = gm[c] * invstd, kb = bt[c] - mean * ka;
        for (int64_t i = 0; i < d.N; i++) {
            const float *xc = x + (i * d.C + c) * d.HW;
            float *yc = y + (i * d.C + c) * d.HW;
            for (int64_t j = 0; j < d.HW; j++) yc[j] = xc[j] * ka + kb;
        }
    }
    return HR_OK;
}

/* dx = gamma invstd / M (M dy - sum dy - xhat sum(dy xhat)) */
hr_status hr_cpu_batchnorm_bwd(void *ctx, const hr_kargs *a) {
    hr_status dnnl_st;
    if (hr_cpu_norm_dnnl(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (below) */
    const hr_batchnorm_args *bn = &a->bn;
    bn_dims d = {bn->N, bn->C, bn->HW};
    const float *x = bn->x, *gm = bn->gamma, *mean = bn->saved_mean, *inv = bn->saved_invstd, *dy = bn->dy;
    float *dx = bn->dx, *dg = bn->dgamma, *db = bn->dbeta;
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
        if (dg) dg[c] = (bn->acc_dgamma ? dg[c] : 0.0f) + (float)sdyx;
        if (db) db[c] = (bn->acc_dbeta ? db[c] : 0.0f) + (float)sdy;
        if (!dx) continue;
        float k = gm[c] * is / (float)M, ka = (float)sdy, kb = (float)sdyx;
        for (int64_t i = 0; i < d.N; i++) {
            const float *xc = x + (i * d.C + c) * d.HW, *gc = dy + (i * d.C + c) * d.HW;
            float *dc = dx + (i * d.C + c) * d.HW;
            for (int64_t j = 0; j < d.HW; j++) {
                float v = k * ((float)M * gc[j] - ka - (xc[j] - mu) * is * kb);
                dc[j] = bn->acc_dx ? dc[j] + v : v;
            }
        }
    }
    return HR_OK;
}

/* ---- LayerNorm ---------------------------------------------------------------
 * A row's sums in double are taken four columns abreast, four running sums
 * joined as (s0 + s1) + (s2 + s3) and the last C % 4 terms added after: a
 * fixed order (the bits do not depend on the threads) whose four chains
 * overlap, where one chain of dependent double adds made the char GPT's 13
 * LayerNorms 24 ms of a CPU step. */
typedef struct {
    double s, q; /* sum of g, sum of g * xhat */
} ln_sums;

/* With g = dy gamma (dy when no gamma) and xhat = (x - m) rs: sum_j g and
 * sum_j g xhat, in the order above (each g and xhat rounded to float as a
 * term of its own, as before). */
static ln_sums row_sums(const float *dy, const float *gm, const float *x, float m, float rs, int64_t C) {
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int64_t C4 = C / 4 * 4;
    for (int64_t j = 0; j < C4; j += 4)
        for (int k = 0; k < 4; k++) {
            float g = gm ? dy[j + k] * gm[j + k] : dy[j + k];
            s[k] += g;
            q[k] += (double)g * ((x[j + k] - m) * rs);
        }
    ln_sums r = {(s[0] + s[1]) + (s[2] + s[3]), (q[0] + q[1]) + (q[2] + q[3])};
    for (int64_t j = C4; j < C; j++) {
        float g = gm ? dy[j] * gm[j] : dy[j];
        r.s += g;
        r.q += (double)g * ((x[j] - m) * rs);
    }
    return r;
}

/* sum_j x[j], then sum_j (x[j] - mu)^2, in the order above */
static void row_moments(const float *x, int64_t C, double *mu, double *ss) {
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int64_t C4 = C / 4 * 4;
    for (int64_t j = 0; j < C4; j += 4)
        for (int k = 0; k < 4; k++) s[k] += x[j + k];
    double t = (s[0] + s[1]) + (s[2] + s[3]);
    for (int64_t j = C4; j < C; j++) t += x[j];
    double m = t / (double)C;
    for (int64_t j = 0; j < C4; j += 4)
        for (int k = 0; k < 4; k++) q[k] += ((double)x[j + k] - m) * ((double)x[j + k] - m);
    double u = (q[0] + q[1]) + (q[2] + q[3]);
    for (int64_t j = C4; j < C; j++) u += ((double)x[j] - m) * ((double)x[j] - m);
    *mu = m, *ss = u;
}

/* Rows are independent: one thread a block of rows. y may be half (autocast
 * folded its cast in: each value rounded once, as the Cast would), and then
 * dy is too (read exactly, widened). */
hr_status hr_cpu_layernorm(void *ctx, const hr_kargs *a) {
    const hr_layernorm_args *ln = &a->ln;
    const float *x = ln->x, *gm = ln->gamma, *bt = ln->beta;
    int64_t R = ln->rows, C = ln->cols;
    hr_dtype yt = ln->y_dt;
    double eps = ln->eps;
#pragma omp parallel for schedule(static) if (R > 1 && R * C > 4096)
    for (int64_t r = 0; r < R; r++) {
        if (ln->add_a) /* the residual Add taken in: x = a + b first, as Add computes it */
            for (int64_t j = 0; j < C; j++)
                ln->sum[r * C + j] = hr_load_f(ln->add_a, ln->add_a_dt, r * C + j) +
                                     hr_load_f(ln->add_b, ln->add_b_dt, r * C + j);
        const float *xr = x + r * C;
        double mu, ss;
        row_moments(xr, C, &mu, &ss);
        /* the backward sees only these two floats, so y is made from them too */
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)C + eps));
        if (ln->mean) ln->mean[r] = m;
        if (ln->rstd) ln->rstd[r] = rs;
        if (yt == HR_F32) {
            float *yr = (float *)ln->y + r * C;
            if (gm && bt)
                for (int64_t j = 0; j < C; j++) yr[j] = (xr[j] - m) * rs * gm[j] + bt[j];
            else if (gm)
                for (int64_t j = 0; j < C; j++) yr[j] = (xr[j] - m) * rs * gm[j];
            else
                for (int64_t j = 0; j < C; j++) yr[j] = (xr[j] - m) * rs;
        } else {
            for (int64_t j = 0; j < C; j++) {
                float v = (xr[j] - m) * rs;
                if (gm) v = bt ? v * gm[j] + bt[j] : v * gm[j];
                hr_store_f(ln->y, yt, r * C + j, v);
            }
        }
    }
    return HR_OK;
}

/* Row r of dy as floats: the row itself (F32) or its widened copy in buf. */
static const float *dy_row(const hr_layernorm_args *ln, int64_t r, float *buf) {
    int64_t C = ln->cols;
    if (ln->dy_dt == HR_F32) return (const float *)ln->dy + r * C;
    for (int64_t j = 0; j < C; j++) buf[j] = hr_load_f(ln->dy, ln->dy_dt, r * C + j);
    return buf;
}

/* dgamma and dbeta sum over rows. A thread takes a block of LN_COLS columns
 * and adds its rows in order, so the bits do not depend on the thread count;
 * 16 floats are one cache line of each row. */
#define LN_COLS 16

static void layernorm_param_grads(const hr_layernorm_args *ln) {
    const float *x = ln->x, *mean = ln->saved_mean, *rstd = ln->saved_rstd;
    float *dg = ln->dgamma, *db = ln->dbeta;
    int64_t R = ln->rows, C = ln->cols, nblk = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) if (nblk > 1 && R * C > 65536)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t j0 = b * LN_COLS, nj = C - j0 < LN_COLS ? C - j0 : LN_COLS;
        double sg[LN_COLS] = {0}, sb[LN_COLS] = {0};
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x + r * C + j0;
            float m = mean[r], rs = rstd[r];
            if (ln->dy_dt == HR_F32) { /* the common case without the per-element type switch: it vectorizes */
                const float *gr = (const float *)ln->dy + r * C + j0;
                for (int64_t j = 0; j < nj; j++) {
                    sg[j] += (double)gr[j] * ((xr[j] - m) * rs);
                    sb[j] += gr[j];
                }
                continue;
            }
            for (int64_t j = 0; j < nj; j++) {
                float gv = hr_load_f(ln->dy, ln->dy_dt, r * C + j0 + j);
                sg[j] += (double)gv * ((xr[j] - m) * rs);
                sb[j] += gv;
            }
        }
        for (int64_t j = 0; j < nj; j++) {
            if (dg) dg[j0 + j] = (ln->acc_dgamma ? dg[j0 + j] : 0.0f) + (float)sg[j];
            if (db) db[j0 + j] = (ln->acc_dbeta ? db[j0 + j] : 0.0f) + (float)sb[j];
        }
    }
}

static size_t bn_workspace(const hr_cpu *c, const hr_kargs *a);

size_t hr_cpu_norm_workspace(const hr_cpu *c, const hr_kargs *a) {
    if (a->op == HR_OP_BATCHNORM || a->op == HR_OP_BATCHNORM_BWD) return bn_workspace(c, a);
    const hr_layernorm_args *ln = &a->ln;
    if (a->op != HR_OP_LAYERNORM_BWD || ln->dy_dt == HR_F32 || ln->cols <= 0) return 0;
    return sizeof(float) * (size_t)ln->cols * (size_t)(c->nthreads > 0 ? c->nthreads : 1);
}

/* With g = dy gamma and xhat = (x - mean) rstd:
 * dx = rstd (g - mean_j(g) - xhat mean_j(g xhat)). A half dy is widened a
 * row at a time into the thread's row of the planned workspace (dx is F32,
 * like x); dx_half gets each final row rounded. */
hr_status hr_cpu_layernorm_bwd(void *ctx, const hr_kargs *a) {
    const hr_cpu *cp = ctx;
    const hr_layernorm_args *ln = &a->ln;
    /* the parameter gradients first: dx may take the bytes of dy or x */
    if (ln->dgamma || ln->dbeta) layernorm_param_grads(ln);
    if (!ln->dx) return HR_OK;
    const float *x = ln->x, *gm = ln->gamma, *mean = ln->saved_mean, *rstd = ln->saved_rstd;
    float *dx = ln->dx;
    int64_t R = ln->rows, C = ln->cols;
    bool acc = ln->acc_dx, half = ln->dy_dt != HR_F32;
    int th = cp->nthreads > 0 ? cp->nthreads : 1;
    if (half && (!a->ws || a->ws_bytes < sizeof(float) * (size_t)C * (size_t)th))
        return hr_error_set(HR_ERR_INTERNAL, "LayerNorm.backward: no workspace was planned for its half dy's rows");
#pragma omp parallel num_threads(th) if (R > 1 && R * C > 4096)
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *buf = half ? (float *)a->ws + (size_t)me * (size_t)C : NULL;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x + r * C, *gr = dy_row(ln, r, buf);
            float *dr = dx + r * C;
            float m = mean[r], rs = rstd[r];
            ln_sums t = row_sums(gr, gm, xr, m, rs, C);
            float mg = (float)(t.s / (double)C), mgx = (float)(t.q / (double)C);
            for (int64_t j = 0; j < C; j++) {
                float g = gm ? gr[j] * gm[j] : gr[j];
                float v = rs * (g - mg - (xr[j] - m) * rs * mgx);
                dr[j] = acc ? dr[j] + v : v;
            }
            if (ln->dx_half) /* the final dx rounded, as the Cast it replaces rounded it */
                for (int64_t j = 0; j < C; j++) hr_store_f(ln->dx_half, ln->dx_half_dt, r * C + j, dr[j]);
        }
    }
    if (!ln->dbias) return HR_OK;
    /* the next Linear's bias gradient from the half copy, added as its backward adds it: rows in order */
    if (!ln->dx_half) return hr_error_set(HR_ERR_INTERNAL, "LayerNorm.backward: a bias gradient without dx's half copy");
    if (!ln->acc_dbias) memset(ln->dbias, 0, sizeof(float) * (size_t)C);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++) ln->dbias[j] += hr_load_f(ln->dx_half, ln->dx_half_dt, r * C + j);
    return HR_OK;
}

#ifndef HR_HAVE_DNNL
bool hr_cpu_norm_dnnl(void *ctx, const hr_kargs *a, hr_status *st) {
    (void)ctx, (void)a, (void)st;
    return false;
}
static size_t bn_workspace(const hr_cpu *c, const hr_kargs *a) {
    (void)c, (void)a;
    return 0;
}
#else
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- BatchNorm through oneDNN -------------------------------------------------
 * Training's forward and backward (the kernels above keep inference, an
 * accumulating dx, and a backward without dx), chosen per shape by timing as
 * cpu_dnnl_conv.c chooses the convolutions' way. oneDNN takes and gives the
 * variance where headroom keeps 1/sqrt(var + eps): the forward turns it into
 * invstd (and the unbiased running variance, as the kernel above does), the
 * backward rebuilds it from invstd in the workspace. Its sums are in float,
 * the kernels' above in double: the tests bound both against float64.
 * Workspace: [alignment][scratchpad][variance][mean][dgamma][dbeta], each C
 * floats rounded up to 64 bytes. */
typedef struct {
    int64_t N, C, HW;
    float eps;
    int32_t bwd, nthr;
} bn_key;

typedef struct bn_entry {
    bn_key k;
    dnnl_primitive_desc_t pd; /* NULL: oneDNN cannot run the shape */
    dnnl_primitive_t prim;
    size_t scratch;
    int pick;     /* -1 not timed yet, 0 the kernels above, 1 oneDNN */
    double ms[2]; /* the median times of each */
    struct bn_entry *next;
} bn_entry;

/* Every shape of the process (plain calloc: the library's own cache, as
 * cpu_dnnl_conv.c's), and the lock that guards it. */
static bn_entry *bns;
static pthread_mutex_t bn_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local bool bn_timing; /* while this thread times the kernels above: no dispatch */

/* A node oneDNN may take: training, F32, dx wanted and not accumulated; with
 * HR_DNNL=1 at least 64K values (below, its fixed costs outweigh). */
static bool bn_eligible(const hr_cpu *c, const hr_kargs *a) {
    const hr_batchnorm_args *b = &a->bn;
    if (c->dnnl_mode == 0 || a->dt != HR_F32 || b->N <= 0 || b->C <= 0 || b->HW <= 0) return false;
    if (a->op == HR_OP_BATCHNORM ? !b->train : !b->dx || b->acc_dx) return false;
    if (c->dnnl_mode == 1 && b->N * b->C * b->HW < (1 << 16)) return false;
    return hr_dnnl_loaded();
}

/* The shape's entry, described on first sight; NULL when the table cannot
 * grow. Called with bn_mu held. */
static bn_entry *bn_entry_of(const hr_kargs *a) {
    const hr_batchnorm_args *b = &a->bn;
    bn_key k;
    memset(&k, 0, sizeof k);
    k.N = b->N, k.C = b->C, k.HW = b->HW, k.eps = b->eps, k.bwd = a->op == HR_OP_BATCHNORM_BWD;
#ifdef _OPENMP
    k.nthr = omp_get_max_threads();
#endif
    for (bn_entry *e = bns; e; e = e->next)
        if (!memcmp(&e->k, &k, sizeof k)) return e;
    bn_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->k = k;
    e->pick = -1;
    dnnl_memory_desc_t m;
    dnnl_batch_normalization_desc_t fd, bd;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_primitive_desc_t hint = NULL;
    bool ok = hr_dnnl_md(&m, 4, (int64_t[]){k.N, k.C, k.HW, 1}, dnnl_nchw) &&
              hr_dnnl.dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &m, k.eps, flags) ==
                  dnnl_success &&
              hr_dnnl_make_pd(k.bwd ? &hint : &e->pd, &fd, NULL);
    if (ok && k.bwd)
        ok = hr_dnnl.dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &m, &m, k.eps, flags) ==
                 dnnl_success &&
             hr_dnnl_make_pd(&e->pd, &bd, hint);
    if (hint) hr_dnnl.dnnl_primitive_desc_destroy(hint);
    if (!ok && e->pd) hr_dnnl.dnnl_primitive_desc_destroy(e->pd);
    if (!ok) e->pd = NULL;
    e->scratch = e->pd ? hr_dnnl_up64(hr_dnnl_scratch_of(e->pd)) : 0;
    e->next = bns;
    bns = e;
    return e;
}

static size_t bn_total(const bn_entry *e) {
    return e->pd ? 64 + e->scratch + 4 * hr_dnnl_up64(sizeof(float) * (size_t)e->k.C) : 0;
}

static size_t bn_workspace(const hr_cpu *c, const hr_kargs *a) {
    if (!bn_eligible(c, a)) return 0;
    pthread_mutex_lock(&bn_mu);
    bn_entry *e = bn_entry_of(a);
    size_t n = e ? bn_total(e) : 0;
    pthread_mutex_unlock(&bn_mu);
    return n;
}

/* The node through oneDNN; ws: at least bn_total bytes. */
static hr_status bn_dnnl(hr_cpu *c, const bn_entry *e, const hr_batchnorm_args *b, char *ws) {
    hr_status st0 = hr_dnnl_stream(c);
    if (st0) return st0;
    int64_t C = e->k.C, M = e->k.N * e->k.HW;
    size_t row = hr_dnnl_up64(sizeof(float) * (size_t)C);
    char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float *var = (float *)(base + e->scratch), *mean = (float *)((char *)var + row);
    float *dg = (float *)((char *)mean + row), *db = (float *)((char *)dg + row);
    dnnl_status_t s;
    hr_dnnl_quiet_workers();
    sigset_t old;
    hr_dnnl_hold_signals(&old);
    if (!e->k.bwd) {
        float *mo = b->mean ? b->mean : mean;
        s = hr_dnnl_run(
            c, e->prim, e->pd, 6,
            (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE},
            (void *[]){(void *)b->x, b->y, (void *)b->gamma, (void *)b->beta, mo, var}, base);
        if (s == dnnl_success) s = hr_dnnl.dnnl_stream_wait(c->dnnl_stream);
        hr_dnnl_release_signals(&old);
        if (s != dnnl_success) return hr_error_set(HR_ERR_INTERNAL, "oneDNN: a batch norm failed (status %d)", (int)s);
        for (int64_t ch = 0; ch < C; ch++) { /* as above: invstd and the running statistics */
            double v = var[ch];
            if (b->invstd) b->invstd[ch] = (float)(1.0 / sqrt(v + (double)b->eps));
            if (b->running_mean) {
                double unbiased = M > 1 ? v * (double)M / (double)(M - 1) : v;
                b->running_mean[ch] = (1.0f - b->momentum) * b->running_mean[ch] + b->momentum * mo[ch];
                b->running_var[ch] = (1.0f - b->momentum) * b->running_var[ch] + b->momentum * (float)unbiased;
            }
        }
        return HR_OK;
    }
    for (int64_t ch = 0; ch < C; ch++) { /* the variance whose 1/sqrt(var + eps) is invstd */
        double is = b->saved_invstd[ch];
        var[ch] = (float)(1.0 / (is * is) - (double)b->eps);
    }
    bool dg_direct = b->dgamma && !b->acc_dgamma, db_direct = b->dbeta && !b->acc_dbeta;
    /* oneDNN 2.6 wants the shift among a backward's inputs too, though
     * nothing reads it: gamma's bytes stand in */
    s = hr_dnnl_run(c, e->prim, e->pd, 9,
                    (int[]){DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE,
                            DNNL_ARG_SHIFT, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT},
                    (void *[]){(void *)b->x, (void *)b->saved_mean, var, (void *)b->dy, (void *)b->gamma,
                               (void *)b->gamma, b->dx, dg_direct ? b->dgamma : dg, db_direct ? b->dbeta : db},
                    base);
    if (s == dnnl_success) s = hr_dnnl.dnnl_stream_wait(c->dnnl_stream);
    hr_dnnl_release_signals(&old);
    if (s != dnnl_success)
        return hr_error_set(HR_ERR_INTERNAL, "oneDNN: a batch norm's backward failed (status %d)", (int)s);
    for (int64_t ch = 0; ch < C; ch++) {
        if (b->dgamma && !dg_direct) b->dgamma[ch] += dg[ch];
        if (b->dbeta && !db_direct) b->dbeta[ch] += db[ch];
    }
    return HR_OK;
}

static hr_status bn_ours(hr_cpu *c, const hr_kargs *a) {
    bn_timing = true; /* the kernel then takes its own path */
    hr_status st = a->op == HR_OP_BATCHNORM ? hr_cpu_batchnorm(c, a) : hr_cpu_batchnorm_bwd(c, a);
    bn_timing = false;
    return st;
}

/* Times both ways (one warm-up, then the median of HR_DNNL_TIMED_REPS, interleaved)
 * on buffers of their own, running statistics included. Called with bn_mu held. */
static void bn_choose(hr_cpu *c, bn_entry *e, const hr_kargs *a) {
    const bn_key *k = &e->k;
    size_t n = (size_t)(k->N * k->C * k->HW), nc = (size_t)k->C;
    float *x = malloc(4 * n), *y = malloc(4 * n), *pc = calloc(8 * nc, 4);
    char *ws = malloc(bn_total(e));
    e->pick = 0;
    if (x && y && pc && ws) {
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 255) / 128.0f - 1.0f;
        for (size_t i = 0; i < n; i++) y[i] = (float)((i * 104729) % 251) / 125.0f - 1.0f;
        for (size_t i = 0; i < nc; i++) pc[i] = 1.0f, pc[nc + i] = 0.5f, pc[6 * nc + i] = 1.0f;
        hr_kargs t = *a;
        hr_batchnorm_args *b = &t.bn;
        b->x = x, b->gamma = pc, b->beta = pc + nc, b->mean = pc + 2 * nc, b->invstd = pc + 3 * nc;
        b->saved_mean = pc + 4 * nc, b->saved_invstd = pc + 6 * nc;
        b->running_mean = pc + 4 * nc, b->running_var = pc + 5 * nc;
        if (k->bwd)
            b->dy = y, b->dx = y, b->dgamma = pc + 2 * nc, b->dbeta = pc + 3 * nc; /* dx over dy: the planner's way */
        else
            b->y = y;
        t.ws = ws, t.ws_bytes = bn_total(e);
        double ms[2][HR_DNNL_TIMED_REPS];
        bool ok[2] = {true, e->pd && (e->prim || hr_dnnl.dnnl_primitive_create(&e->prim, e->pd) == dnnl_success)};
        for (int r = 0; r <= HR_DNNL_TIMED_REPS; r++)
            for (int way = 0; way < 2; way++) {
                if (!ok[way]) continue;
                double t0 = hr_dnnl_now_ms();
                ok[way] = (way ? bn_dnnl(c, e, b, ws) : bn_ours(c, &t)) == HR_OK;
                if (r) ms[way][r - 1] = hr_dnnl_now_ms() - t0;
            }
        for (int way = 0; way < 2; way++) {
            e->ms[way] = -1;
            if (!ok[way]) continue;
            qsort(ms[way], HR_DNNL_TIMED_REPS, sizeof(double), hr_dnnl_cmp_d);
            e->ms[way] = ms[way][HR_DNNL_TIMED_REPS / 2];
        }
        if (ok[1] && e->ms[1] < e->ms[0]) e->pick = 1;
    }
    hr_error_clear();
    free(x), free(y), free(pc), free(ws);
    if (c->dnnl_verbose)
        fprintf(stderr, "batchnorm %lldx%lldx%lld %s: cpu %.3f ms, oneDNN %.3f ms, %s\n", (long long)k->N,
                (long long)k->C, (long long)k->HW, k->bwd ? "backward" : "forward", e->ms[0], e->ms[1],
                e->pick ? "oneDNN" : "cpu");
}

bool hr_cpu_norm_dnnl(void *ctx, const hr_kargs *a, hr_status *st) {
    hr_cpu *c = ctx;
    if (bn_timing || !bn_eligible(c, a)) return false;
    pthread_mutex_lock(&bn_mu);
    bn_entry *e = bn_entry_of(a);
    /* a workspace planned without oneDNN: the kernels above */
    if (!e || !e->pd || !a->ws || a->ws_bytes < bn_total(e)) {
        pthread_mutex_unlock(&bn_mu);
        return false;
    }
    if (c->dnnl_mode == 1 && e->pick < 0) bn_choose(c, e, a);
    bool use = (c->dnnl_mode != 1 || e->pick == 1) &&
               (e->prim || hr_dnnl.dnnl_primitive_create(&e->prim, e->pd) == dnnl_success);
    pthread_mutex_unlock(&bn_mu); /* from here the entry is only read */
    if (!use) return false;
    *st = bn_dnnl(c, e, &a->bn, a->ws);
    return true;
}
#endif
