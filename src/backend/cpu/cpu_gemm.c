/* cpu_gemm.c — Linear and Conv2d on the CPU: matrix products by oneDNN's or OpenBLAS's sgemm,
 * convolution as im2col + GEMM with its columns in the planned workspace. */
#include "backend/cpu/cpu.h"
#include "ops/ops.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* One product on the calling thread: oneDNN's sgemm where it loads (its
 * AVX-512 kernels ran 3-5x OpenBLAS's single-threaded sgemm on this
 * project's Xeon: 42-84 against 12-17 GFLOP/s at 512 x 2000 x 1000), unless
 * HR_SGEMM=openblas; OpenBLAS otherwise. The choice is made once a process
 * and never by timing, so that every run gives the same bits. */
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static bool lib_dnnl;
static void choose_lib(void) { lib_dnnl = hr_options_read().sgemm_dnnl && hr_cpu_dnnl_why() == NULL; }

/* Products under this many multiply-adds stay with OpenBLAS: oneDNN gains
 * little there, and loading it costs a small job (a test) more than it saves.
 * The rule looks at the whole product, before any split, so the threads
 * never change which library computes it. */
#define HR_SGEMM_DNNL_MIN (1 << 20)
static bool wants_dnnl(int M, int N, int K) {
    if ((double)M * N * K < HR_SGEMM_DNNL_MIN) return false;
    pthread_once(&lib_once, choose_lib);
    return lib_dnnl;
}

static void sgemm1(bool dnnl, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    if (dnnl && hr_cpu_dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc);
}

void hr_cpu_sgemm_one(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    sgemm1(wants_dnnl(M, N, K), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The libraries run single-threaded (the backend sets OpenBLAS so; oneDNN
 * is called so): with OpenMP threads of our own around them, theirs would
 * fight ours. A large product is split into row blocks of C instead, one per
 * thread. Row-major C = op(A) op(B). */
void hr_cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    int th = 1;
#ifdef _OPENMP
    th = omp_get_max_threads();
#endif
    bool dnnl = wants_dnnl(M, N, K);
    if (th < 2 || (double)M * N * K < 4e6 || M < 2 * th) {
        sgemm1(dnnl, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(th)
    {
        int me = omp_get_thread_num(), nt = omp_get_num_threads();
        int per = (M + nt - 1) / nt, m0 = me * per, m1 = m0 + per < M ? m0 + per : M;
        if (m1 > m0) {
            const float *Ab = ta ? A + m0 : A + (size_t)m0 * lda;
            sgemm1(dnnl, ta, tb, m1 - m0, N, K, alpha, Ab, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
        }
    }
}

/* The activation in a Linear's epilogue (ops/activation.c), by the
 * activation kernels: forward y = act(pre); backward dx = dx act'(pre), in place. */
static hr_status epilogue_act(void *ctx, const hr_linear_args *l, bool backward) {
    hr_kargs g = hr_linear_act_kargs(l, backward, HR_F32, l->pre, l->dx, l->y, l->N * (backward ? l->in : l->out));
    return backward ? hr_cpu_act_bwd(ctx, &g) : hr_cpu_act(ctx, &g);
}

/* y (N,out) = x (N,in) W^T + b; with act, into pre and then y = act(pre) */
hr_status hr_cpu_linear(void *ctx, const hr_kargs *a) {
    const hr_linear_args *l = &a->linear;
    int N = (int)l->N, in = (int)l->in, out = (int)l->out;
    float *y = l->act ? l->pre : l->y;
    float beta = 0.0f;
    if (l->b) {
        for (int i = 0; i < N; i++) memcpy(y + (size_t)i * out, l->b, sizeof(float) * (size_t)out);
        beta = 1.0f;
    }
    hr_cpu_sgemm(false, true, N, out, in, 1.0f, l->x, in, l->w, in, beta, y, out);
    return l->act ? epilogue_act(ctx, l, false) : HR_OK;
}

/* dx = dy W (then times act'(pre)), dW = dy^T x, db = sum dy */
hr_status hr_cpu_linear_bwd(void *ctx, const hr_kargs *a) {
    const hr_linear_args *l = &a->linear;
    int N = (int)l->N, in = (int)l->in, out = (int)l->out;
    const float *dy = l->dy;
    if (l->dw) hr_cpu_sgemm(true, false, out, in, N, 1.0f, dy, out, l->x, in, l->acc_dw ? 1.0f : 0.0f, l->dw, in);
    if (l->db) {
        float *db = l->db;
        if (!l->acc_db) memset(db, 0, sizeof(float) * (size_t)out);
        for (int i = 0; i < N; i++) {
            const float *r = dy + (size_t)i * out;
            for (int j = 0; j < out; j++) db[j] += r[j];
        }
    }
    /* dx last: the planner may give it the bytes of x */
    if (l->dx) hr_cpu_sgemm(false, false, N, in, out, 1.0f, dy, out, l->w, in, l->acc_dx ? 1.0f : 0.0f, l->dx, in);
    return l->dx && l->act ? epilogue_act(ctx, l, true) : HR_OK;
}

/* ---- Conv2d ---------------------------------------------------------------- */
/* groups G: group g convolves channels [g Cg, (g+1) Cg) of x with weight rows
 * [g Kg, (g+1) Kg) into those output channels, one GEMM each; C and the
 * column buffer below are a group's (Cg = C/G channels, ckk = Cg kh kw rows). */
typedef struct {
    int N, C, H, W, K, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW;
    int G, Kg;    /* groups; output channels a group */
    int ckk, ohw; /* a group's column rows; output pixels */
} conv_dims;

static conv_dims dims_of(const hr_conv_args *c) {
    conv_dims d;
    d.G = c->groups > 0 ? c->groups : 1; /* 0: args made without them, as before groups */
    d.N = (int)c->N, d.C = (int)c->C / d.G, d.H = (int)c->H, d.W = (int)c->W;
    d.K = (int)c->K, d.kh = c->kh, d.kw = c->kw, d.sh = c->sh, d.sw = c->sw, d.ph = c->ph, d.pw = c->pw;
    d.dh = c->dil_h > 0 ? c->dil_h : 1, d.dw = c->dil_w > 0 ? c->dil_w : 1;
    d.OH = (int)c->OH, d.OW = (int)c->OW;
    d.Kg = d.K / d.G;
    d.ckk = d.C * d.kh * d.kw;
    d.ohw = d.OH * d.OW;
    return d;
}

/* Depthwise (one input channel a group, any channel multiplier): direct loops
 * over the taps, no columns, where a GEMM a channel would be 1 x OH OW x kh kw.
 * A 1x1 stride-1 unpadded kernel takes the GEMM's direct path instead. */
static bool depthwise(const conv_dims *d) {
    return d->C == 1 && !(d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->ph == 0 && d->pw == 0);
}

/* A thread's column buffer: one group's columns (none for depthwise). */
static size_t col_floats(const conv_dims *d) { return depthwise(d) ? 0 : (size_t)d->ckk * (size_t)d->ohw; }

/* Samples run in parallel, one column buffer (one group's) per thread; the
 * backward pass also needs one dW partial (all groups) per thread, summed at the end. */
size_t hr_cpu_workspace_size(const hr_cpu *c, const hr_kargs *a) {
    if (a->op == HR_OP_LINEAR_CE) return hr_cpu_linear_ce_workspace(a);
    if (a->op == HR_OP_ATTENTION || a->op == HR_OP_ATTENTION_BWD) return hr_cpu_attention_workspace(c, a);
    size_t norm = hr_cpu_norm_workspace(c, a);
    if (norm) return norm;
    if (a->op != HR_OP_CONV2D && a->op != HR_OP_CONV2D_BWD) return 0;
    conv_dims d = dims_of(&a->conv);
    int64_t th = c->nthreads < a->conv.N ? c->nthreads : a->conv.N; /* the batch may not fit an int */
    size_t col = col_floats(&d);
    size_t part = a->op == HR_OP_CONV2D_BWD ? (size_t)d.K * (size_t)d.ckk + (size_t)d.K : 0;
    return sizeof(float) * (size_t)th * (col + part);
}

/* x: one group's Cg channels of a sample; tap (ki, kj) reads x at
 * (oh sh - ph + ki dh, ow sw - pw + kj dw), zero outside */
static void im2col(const conv_dims *d, const float *x, float *col) {
    for (int c = 0; c < d->C; c++)
        for (int ki = 0; ki < d->kh; ki++)
            for (int kj = 0; kj < d->kw; kj++) {
                float *row = col + ((size_t)(c * d->kh + ki) * d->kw + kj) * d->ohw;
                for (int oh = 0; oh < d->OH; oh++) {
                    int ih = oh * d->sh - d->ph + ki * d->dh;
                    float *r = row + (size_t)oh * d->OW;
                    if (ih < 0 || ih >= d->H) {
                        memset(r, 0, sizeof(float) * (size_t)d->OW);
                        continue;
                    }
                    const float *xr = x + ((size_t)c * d->H + ih) * d->W;
                    for (int ow = 0; ow < d->OW; ow++) {
                        int iw = ow * d->sw - d->pw + kj * d->dw;
                        r[ow] = iw >= 0 && iw < d->W ? xr[iw] : 0.0f;
                    }
                }
            }
}

static void col2im_add(const conv_dims *d, const float *col, float *dx) {
    for (int c = 0; c < d->C; c++)
        for (int ki = 0; ki < d->kh; ki++)
            for (int kj = 0; kj < d->kw; kj++) {
                const float *row = col + ((size_t)(c * d->kh + ki) * d->kw + kj) * d->ohw;
                for (int oh = 0; oh < d->OH; oh++) {
                    int ih = oh * d->sh - d->ph + ki * d->dh;
                    if (ih < 0 || ih >= d->H) continue;
                    float *xr = dx + ((size_t)c * d->H + ih) * d->W;
                    const float *r = row + (size_t)oh * d->OW;
                    for (int ow = 0; ow < d->OW; ow++) {
                        int iw = ow * d->sw - d->pw + kj * d->dw;
                        if (iw >= 0 && iw < d->W) xr[iw] += r[ow];
                    }
                }
            }
}

/* The outputs o (0 <= o < n_out) whose tap at offset `off` reads inside the
 * input: 0 <= o s - p + off < n_in; [*lo, *hi], empty when *hi < *lo. */
static void tap_range(int n_out, int n_in, int s, int p, int off, int *lo, int *hi) {
    int a = p - off, b = n_in - 1 + p - off;
    *lo = a > 0 ? (a + s - 1) / s : 0;
    *hi = b < 0 ? -1 : b / s < n_out - 1 ? b / s : n_out - 1;
}

/* Depthwise, one output plane k of a sample: what each tap (ki, kj) of its
 * kh x kw weights w joins, the input plane x (H x W) and the output plane y
 * (OH x OW). mode 0: y += w x (forward); 1: x += w y (dx from dy in y);
 * 2: w += sum x y (dW from dy in y). */
static void dw_plane(const conv_dims *d, int mode, float *w, float *x, float *y) {
    for (int ki = 0; ki < d->kh; ki++) {
        int oh0, oh1;
        tap_range(d->OH, d->H, d->sh, d->ph, ki * d->dh, &oh0, &oh1);
        for (int kj = 0; kj < d->kw; kj++) {
            int ow0, ow1;
            tap_range(d->OW, d->W, d->sw, d->pw, kj * d->dw, &ow0, &ow1);
            if (ow1 < ow0) continue; /* the tap reads only padding */
            float wv = w[ki * d->kw + kj], acc = 0.0f;
            for (int oh = oh0; oh <= oh1; oh++) {
                float *xr = x + (size_t)(oh * d->sh - d->ph + ki * d->dh) * d->W + (ow0 * d->sw - d->pw + kj * d->dw);
                float *yr = y + (size_t)oh * d->OW + ow0;
                int n = ow1 - ow0 + 1, s = d->sw;
                if (mode == 0)
                    for (int j = 0; j < n; j++) yr[j] += wv * xr[j * s];
                else if (mode == 1)
                    for (int j = 0; j < n; j++) xr[j * s] += wv * yr[j];
                else
                    for (int j = 0; j < n; j++) acc += xr[j * s] * yr[j];
            }
            if (mode == 2) w[ki * d->kw + kj] += acc;
        }
    }
}

static int threads_for(const hr_cpu *c, int N) { return c->nthreads < N ? c->nthreads : N; }

hr_status hr_cpu_conv2d(void *ctx, const hr_kargs *a) {
    hr_status dnnl_st;
    if (hr_cpu_dnnl_conv(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (cpu_dnnl_conv.c) */
    const hr_cpu *cp = ctx;
    const hr_conv_args *cv = &a->conv;
    conv_dims d = dims_of(cv);
    const float *x = cv->x, *Wt = cv->w, *b = cv->b;
    float *y = cv->y, *ws = a->ws;
    int th = threads_for(cp, d.N);
    size_t col_n = col_floats(&d);
    bool direct = d.kh == 1 && d.kw == 1 && d.sh == 1 && d.sw == 1 && d.ph == 0 && d.pw == 0, dwise = depthwise(&d);
#pragma omp parallel for num_threads(th) schedule(static)
    for (int i = 0; i < d.N; i++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *yi = y + (size_t)i * d.K * d.ohw;
        float beta = 0.0f;
        if (b) {
            for (int k = 0; k < d.K; k++)
                for (int j = 0; j < d.ohw; j++) yi[(size_t)k * d.ohw + j] = b[k];
            beta = 1.0f;
        }
        if (dwise) {
            if (!b) memset(yi, 0, sizeof(float) * (size_t)d.K * d.ohw);
            for (int k = 0; k < d.K; k++)
                dw_plane(&d, 0, (float *)Wt + (size_t)k * d.ckk, (float *)x + ((size_t)i * d.G + k / d.Kg) * d.H * d.W,
                         yi + (size_t)k * d.ohw);
            continue;
        }
        for (int g = 0; g < d.G; g++) {
            const float *xg = x + ((size_t)i * d.G + g) * d.C * d.H * d.W;
            float *col = ws + (size_t)me * col_n;
            if (direct)
                col = (float *)xg;
            else
                im2col(&d, xg, col);
            sgemm1(wants_dnnl(d.Kg, d.ohw, d.ckk), false, false, d.Kg, d.ohw, d.ckk, 1.0f,
                   Wt + (size_t)g * d.Kg * d.ckk, d.ckk, col, d.ohw, beta, yi + (size_t)g * d.Kg * d.ohw, d.ohw);
        }
    }
    return HR_OK;
}

/* Workspace: per thread a column buffer and a (dW, db) partial sum. */
hr_status hr_cpu_conv2d_bwd(void *ctx, const hr_kargs *a) {
    hr_status dnnl_st;
    if (hr_cpu_dnnl_conv(ctx, a, &dnnl_st)) return dnnl_st; /* oneDNN, where faster (cpu_dnnl_conv.c) */
    const hr_cpu *cp = ctx;
    const hr_conv_args *cv = &a->conv;
    conv_dims d = dims_of(cv);
    const float *x = cv->x, *Wt = cv->w, *dy = cv->dy;
    float *dx = cv->dx, *dW = cv->dw, *db = cv->db;
    float *ws = a->ws;
    int th = threads_for(cp, d.N);
    size_t col_n = col_floats(&d), part_n = (size_t)d.K * d.ckk + d.K;
    bool dwise = depthwise(&d);
    float *parts = ws + (size_t)th * col_n;
    memset(parts, 0, sizeof(float) * part_n * (size_t)th);
    /* dx may have x's bytes (the planner's in-place): sample i's dx is
     * cleared and written only after sample i's x has been read */
#pragma omp parallel for num_threads(th) schedule(static)
    for (int i = 0; i < d.N; i++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *col = ws + (size_t)me * col_n, *pw = parts + (size_t)me * part_n;
        const float *dyi = dy + (size_t)i * d.K * d.ohw;
        size_t xs = (size_t)d.C * d.H * d.W; /* one group's channels of a sample */
        for (int k = 0; dW && dwise && k < d.K; k++) /* x read only: the casts keep dw_plane's one signature */
            dw_plane(&d, 2, pw + (size_t)k * d.ckk, (float *)x + ((size_t)i * d.G + k / d.Kg) * xs,
                     (float *)dyi + (size_t)k * d.ohw);
        for (int g = 0; dW && !dwise && g < d.G; g++) {
            im2col(&d, x + ((size_t)i * d.G + g) * xs, col);
            sgemm1(wants_dnnl(d.Kg, d.ckk, d.ohw), false, true, d.Kg, d.ckk, d.ohw, 1.0f,
                   dyi + (size_t)g * d.Kg * d.ohw, d.ohw, col, d.ohw, 1.0f, pw + (size_t)g * d.Kg * d.ckk, d.ckk);
        }
        if (db)
            for (int k = 0; k < d.K; k++) {
                float s = 0;
                for (int j = 0; j < d.ohw; j++) s += dyi[(size_t)k * d.ohw + j];
                pw[(size_t)d.K * d.ckk + k] += s;
            }
        if (dx) {
            float *dxi = dx + (size_t)i * d.G * xs;
            if (!cv->acc_dx) memset(dxi, 0, sizeof(float) * (size_t)d.G * xs);
            for (int k = 0; dwise && k < d.K; k++)
                dw_plane(&d, 1, (float *)Wt + (size_t)k * d.ckk, dxi + (size_t)(k / d.Kg) * xs,
                         (float *)dyi + (size_t)k * d.ohw);
            for (int g = 0; !dwise && g < d.G; g++) {
                sgemm1(wants_dnnl(d.ckk, d.ohw, d.Kg), true, false, d.ckk, d.ohw, d.Kg, 1.0f,
                       Wt + (size_t)g * d.Kg * d.ckk, d.ckk, dyi + (size_t)g * d.Kg * d.ohw, d.ohw, 0.0f, col, d.ohw);
                col2im_add(&d, col, dxi + (size_t)g * xs);
            }
        }
    }
    if (dW || db)
        for (size_t j = 0; j < part_n; j++) {
            float s = 0;
            for (int t = 0; t < th; t++) s += parts[(size_t)t * part_n + j];
            if (j < (size_t)d.K * d.ckk) {
                if (dW) dW[j] = (cv->acc_dw ? dW[j] : 0.0f) + s;
            } else if (db) {
                size_t k = j - (size_t)d.K * d.ckk;
                db[k] = (cv->acc_db ? db[k] : 0.0f) + s;
            }
        }
    return HR_OK;
}
