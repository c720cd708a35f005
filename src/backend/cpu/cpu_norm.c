/* cpu_norm.c — BatchNorm and LayerNorm on the CPU, forward and backward:
 * statistics with sums in double, parameter gradients in a fixed order. */
#include "backend/cpu/cpu.h"

#include <math.h>
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
    if (hr_cpu_dnnl_batchnorm(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (cpu_dnnl.c) */
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
    if (hr_cpu_dnnl_batchnorm(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (cpu_dnnl.c) */
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
 * Rows are independent: one thread a block of rows. y may be half (autocast
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
        const float *xr = x + r * C;
        double s = 0, ss = 0;
        for (int64_t j = 0; j < C; j++) s += xr[j];
        double mu = s / (double)C;
        for (int64_t j = 0; j < C; j++) ss += ((double)xr[j] - mu) * ((double)xr[j] - mu);
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

size_t hr_cpu_norm_workspace(const hr_cpu *c, const hr_kargs *a) {
    const hr_layernorm_args *ln = &a->ln;
    if (a->op != HR_OP_LAYERNORM_BWD || ln->dy_dt == HR_F32 || ln->cols <= 0) return 0;
    return sizeof(float) * (size_t)ln->cols * (size_t)(c->nthreads > 0 ? c->nthreads : 1);
}

/* With g = dy gamma and xhat = (x - mean) rstd:
 * dx = rstd (g - mean_j(g) - xhat mean_j(g xhat)). A half dy is widened a
 * row at a time into the thread's row of the planned workspace (dx is F32,
 * like x). */
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
            double sg = 0, sgx = 0;
            for (int64_t j = 0; j < C; j++) {
                float g = gm ? gr[j] * gm[j] : gr[j];
                sg += g;
                sgx += (double)g * ((xr[j] - m) * rs);
            }
            float mg = (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
            for (int64_t j = 0; j < C; j++) {
                float g = gm ? gr[j] * gm[j] : gr[j];
                float v = rs * (g - mg - (xr[j] - m) * rs * mgx);
                dr[j] = acc ? dr[j] + v : v;
            }
        }
    }
    return HR_OK;
}
