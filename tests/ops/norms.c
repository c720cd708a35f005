/* norms.c — test_ops' normalisations: BatchNorm1d/2d (batch and running statistics, eval)
 * and LayerNorm (1 to 3 normalised dims, affine or not, mean/rstd, inference, in place). */
#include "harness.h"

/* ---- BatchNorm ------------------------------------------------------------- */
typedef struct {
    double *x, *gm, *bt, *w, *y;
    int N, C, HW;
    double eps;
} bn_ctx;
static double bn_loss(void *c_) {
    bn_ctx *c = c_;
    ref_bn_train(c->x, c->gm, c->bt, c->N, c->C, c->HW, c->eps, c->y, NULL, NULL, NULL);
    return wsum(c->w, c->y, (int64_t)c->N * c->C * c->HW);
}

/* ndim 2: BatchNorm1d on (N, C); ndim 4: BatchNorm2d on (N, C, H, W) */
static void test_batchnorm(int N, int C, int H, int W, bool twod) {
    const char *op = twod ? "BatchNorm2d(train)" : "BatchNorm1d(train)";
    const double tol = 2e-4;
    bn_ctx c = {.N = N, .C = C, .HW = twod ? H * W : 1, .eps = 1e-5};
    int nx = N * C * c.HW;
    double mom = 0.1;
    c.x = dalloc(nx), c.gm = dalloc(C), c.bt = dalloc(C), c.w = dalloc(nx), c.y = dalloc(nx);
    fill(c.x, nx, -2, 3), fill(c.gm, C, 0.5, 1.5), fill(c.bt, C, -1, 1), fill(c.w, nx, -1, 1);
    double *rm = dalloc(C), *rv = dalloc(C), *mean = dalloc(C), *vb = dalloc(C), *vu = dalloc(C), *inv = dalloc(C);
    fill(rm, C, -0.5, 0.5), fill(rv, C, 0.5, 2);
    kt k;
    kt_init(&k);
    int tx = twod ? KT(&k, N, C, H, W) : KT(&k, N, C);
    int tg = KT(&k, C), tb = KT(&k, C), trm = KT(&k, C), trv = KT(&k, C), tmean = KT(&k, C), tinv = KT(&k, C);
    int ty = twod ? KT(&k, N, C, H, W) : KT(&k, N, C), tdy = twod ? KT(&k, N, C, H, W) : KT(&k, N, C);
    int tdx = twod ? KT(&k, N, C, H, W) : KT(&k, N, C), tdg = KT(&k, C), tdb = KT(&k, C);
    kt_set(&k, tx, c.x), kt_set(&k, tg, c.gm), kt_set(&k, tb, c.bt), kt_set(&k, trm, rm), kt_set(&k, trv, rv);
    kt_set(&k, tdy, c.w);
    hr_node f = hr_node_make(HR_OP_BATCHNORM, -1);
    f.a.eps = (float)c.eps, f.a.momentum = (float)mom, f.a.out_f = C, f.a.train = true;
    f.in[0] = tx, f.in[1] = tg, f.in[2] = tb, f.in[3] = trm, f.in[4] = trv, f.nin = 5;
    f.out[0] = ty, f.out[1] = tmean, f.out[2] = tinv, f.nout = 3;
    kt_run(&k, &f);
    ref_bn_train(c.x, c.gm, c.bt, N, C, c.HW, c.eps, c.y, mean, vb, vu);
    compare(op, "forward", kf(&k, ty), c.y, nx, tol);
    for (int i = 0; i < C; i++) inv[i] = 1 / sqrt(vb[i] + c.eps);
    compare(op, "saved mean", kf(&k, tmean), mean, C, 1e-5);
    compare(op, "saved invstd", kf(&k, tinv), inv, C, 1e-5);
    /* running statistics: (1 - m) r + m stat, with the unbiased variance */
    double *wrm = dalloc(C), *wrv = dalloc(C);
    for (int i = 0; i < C; i++) wrm[i] = (1 - mom) * rm[i] + mom * mean[i], wrv[i] = (1 - mom) * rv[i] + mom * vu[i];
    compare(op, "running_mean update", kf(&k, trm), wrm, C, 1e-5);
    compare(op, "running_var update (unbiased)", kf(&k, trv), wrv, C, 1e-5);

    double *gx = dalloc(nx), *gg = dalloc(C), *gb = dalloc(C);
    fd_grad(bn_loss, &c, c.x, nx, gx);
    fd_grad(bn_loss, &c, c.gm, C, gg);
    fd_grad(bn_loss, &c, c.bt, C, gb);
    hr_node b = hr_node_make(HR_OP_BATCHNORM_BWD, -1);
    b.a = f.a;
    b.in[0] = tx, b.in[1] = tg, b.in[2] = tmean, b.in[3] = tinv, b.in[4] = tdy, b.nin = 5;
    b.out[0] = tdx, b.out[1] = tdg, b.out[2] = tdb, b.nout = 3;
    check_backward(&k, &b, (double *[]){gx, gg, gb}, op, tol, true);

    /* inference: the running statistics, y = (x - rm) / sqrt(rv + eps) g + b */
    const char *opi = twod ? "BatchNorm2d(eval)" : "BatchNorm1d(eval)";
    fill(rv, C, 1e-4, 1e-3); /* small variances: eps matters */
    kt_set(&k, trm, rm), kt_set(&k, trv, rv);
    f.a.train = false, f.nout = 1, f.out[1] = f.out[2] = -1;
    kt_run(&k, &f);
    for (int n = 0; n < N; n++)
        for (int ch = 0; ch < C; ch++)
            for (int j = 0; j < c.HW; j++) {
                int i = (n * C + ch) * c.HW + j;
                c.y[i] = (c.x[i] - rm[ch]) / sqrt(rv[ch] + c.eps) * c.gm[ch] + c.bt[ch];
            }
    compare(opi, "forward", kf(&k, ty), c.y, nx, 1e-5);
    compare(opi, "running stats untouched", kf(&k, trm), rm, C, 0);
    kt_free(&k);
    free(c.x), free(c.gm), free(c.bt), free(c.w), free(c.y), free(rm), free(rv), free(mean), free(vb), free(vu);
    free(inv), free(wrm), free(wrv), free(gx), free(gg), free(gb);
}

/* ---- LayerNorm ------------------------------------------------------------- */
/* One row, as torch.nn.functional.layer_norm: biased variance, eps inside the
 * square root; gm, bt NULL without elementwise_affine (bt NULL with bias=False). */
static void ref_layernorm_row(const double *x, const double *gm, const double *bt, int64_t cols, double eps, double *y,
                              double *mean, double *rstd) {
    double s = 0, ss = 0;
    for (int64_t j = 0; j < cols; j++) s += x[j];
    double mu = s / cols;
    for (int64_t j = 0; j < cols; j++) ss += (x[j] - mu) * (x[j] - mu);
    double r = 1 / sqrt(ss / cols + eps);
    for (int64_t j = 0; j < cols; j++) y[j] = (x[j] - mu) * r * (gm ? gm[j] : 1) + (bt ? bt[j] : 0);
    if (mean) *mean = mu;
    if (rstd) *rstd = r;
}

typedef struct {
    double *x, *gm, *bt, *w, *y;
    int64_t rows, cols;
    double eps;
} ln_ctx;
static double ln_row_loss(ln_ctx *c, int64_t r) {
    int64_t o = r * c->cols;
    ref_layernorm_row(c->x + o, c->gm, c->bt, c->cols, c->eps, c->y + o, NULL, NULL);
    return wsum(c->w + o, c->y + o, c->cols);
}
static double ln_loss(void *c_) {
    ln_ctx *c = c_;
    double s = 0;
    for (int64_t r = 0; r < c->rows; r++) s += ln_row_loss(c, r);
    return s;
}

/* LayerNorm on x of shape dims[0..ndim) over its last norm_dims dims; x drawn
 * in [xlo, xhi). Training forward (y, mean, rstd), inference forward (y),
 * the backward in the ways of check_backward (each output skipped too), and
 * the in-place forms that the descriptors allow. */
static void test_layernorm(const char *what, int ndim, const int64_t *dims, int norm_dims, bool affine, bool bias,
                           float eps, double xlo, double xhi, double tol) {
    char op[96];
    snprintf(op, sizeof op, "LayerNorm%s %s", affine ? (bias ? "" : "(bias=False)") : "(elementwise_affine=False)", what);
    ln_ctx c = {.eps = (double)eps};
    c.rows = c.cols = 1;
    for (int d = 0; d < ndim; d++) *(d < ndim - norm_dims ? &c.rows : &c.cols) *= dims[d];
    const int64_t rows = c.rows, cols = c.cols, n = rows * cols;
    bias = affine && bias;
    c.x = dalloc(n), c.w = dalloc(n), c.y = dalloc(n);
    c.gm = affine ? dalloc(cols) : NULL, c.bt = bias ? dalloc(cols) : NULL;
    fill(c.x, n, xlo, xhi), fill(c.w, n, -1, 1);
    if (affine) fill(c.gm, cols, 0.5, 1.5);
    if (bias) fill(c.bt, cols, -1, 1);
    /* y kept apart: the finite differences below write c.y */
    double *mean = dalloc(rows), *rstd = dalloc(rows), *y = dalloc(n);
    for (int64_t r = 0; r < rows; r++)
        ref_layernorm_row(c.x + r * cols, c.gm, c.bt, cols, c.eps, y + r * cols, &mean[r], &rstd[r]);

    kt k;
    kt_init(&k);
    int tx = kt_tensor(&k, HR_F32, ndim, dims), ty = kt_tensor(&k, HR_F32, ndim, dims);
    int tdy = kt_tensor(&k, HR_F32, ndim, dims), tdx = kt_tensor(&k, HR_F32, ndim, dims);
    int tg = affine ? KT(&k, cols) : -1, tb = bias ? KT(&k, cols) : -1, tdg = affine ? KT(&k, cols) : -1;
    int tdb = bias ? KT(&k, cols) : -1, tmean = KT(&k, rows), trstd = KT(&k, rows);
    kt_set(&k, tx, c.x), kt_set(&k, tdy, c.w);
    if (affine) kt_set(&k, tg, c.gm);
    if (bias) kt_set(&k, tb, c.bt);
    hr_node f = hr_node_make(HR_OP_LAYERNORM, -1);
    f.a.eps = eps, f.a.norm_dims = norm_dims, f.a.affine = affine, f.a.bias = bias, f.a.train = true;
    f.in[0] = tx, f.in[1] = tg, f.in[2] = tb, f.nin = affine ? (bias ? 3 : 2) : 1;
    f.out[0] = ty, f.out[1] = tmean, f.out[2] = trstd, f.nout = 3;
    kt_fillf(&k, ty, NAN), kt_fillf(&k, tmean, NAN), kt_fillf(&k, trstd, NAN);
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, n, tol);
    compare(op, "saved mean", kf(&k, tmean), mean, rows, 1e-5);
    compare(op, "saved rstd", kf(&k, trstd), rstd, rows, 1e-5);

    /* gradients of sum(w * y): x row by row (a row's y depends on its row
     * alone), gamma and beta through the whole loss */
    double *gx = dalloc(n), *gg = dalloc(cols), *gb = dalloc(cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            double *v = &c.x[r * cols + j], v0 = *v, h = 1e-5;
            *v = v0 + h;
            double lp = ln_row_loss(&c, r);
            *v = v0 - h;
            double lm = ln_row_loss(&c, r);
            *v = v0;
            gx[r * cols + j] = (lp - lm) / (2 * h);
        }
    if (affine) fd_grad(ln_loss, &c, c.gm, cols, gg);
    if (bias) fd_grad(ln_loss, &c, c.bt, cols, gb);
    hr_node b = hr_node_make(HR_OP_LAYERNORM_BWD, -1);
    b.a = f.a;
    b.in[0] = tx, b.in[1] = tmean, b.in[2] = trstd, b.nin = 3;
    if (affine) b.in[b.nin++] = tg;
    b.in[b.nin++] = tdy;
    b.out[0] = tdx, b.out[1] = tdg, b.out[2] = tdb, b.nout = 3;
    check_backward(&k, &b, (double *[]){gx, affine ? gg : NULL, bias ? gb : NULL}, op, tol, true);

    /* in place, where the descriptors allow it (none, as of writing: the
     * kernels read a row's x or dy again after writing part of it) */
    check_inplace(&k, &b, gx, op, tol);
    check_inplace(&k, &f, y, op, tol);

    /* inference: y alone */
    f.a.train = false, f.nout = 1, f.out[1] = f.out[2] = -1;
    kt_fillf(&k, ty, NAN);
    kt_run(&k, &f);
    compare(op, "inference forward", kf(&k, ty), y, n, tol);
    check_inplace(&k, &f, y, op, tol);
    kt_free(&k);
    free(c.x), free(c.w), free(c.y), free(c.gm), free(c.bt), free(mean), free(rstd), free(y), free(gx), free(gg), free(gb);
}

void test_norms(void) {
    test_batchnorm(6, 3, 1, 1, false);
    test_batchnorm(3, 2, 3, 4, true);
    test_batchnorm(2, 4, 2, 2, true);
    /* (what, ndim, dims, normalised trailing dims, elementwise_affine, bias, eps, x range, tol) */
    test_layernorm("5x7 over 7", 2, (int64_t[]){5, 7}, 1, true, true, 1e-5f, -2, 3, 2e-5);
    test_layernorm("3x4x5 over 4x5", 3, (int64_t[]){3, 4, 5}, 2, true, false, 1e-5f, -2, 3, 2e-5);
    test_layernorm("2x3x4x5 over 3x4x5", 4, (int64_t[]){2, 3, 4, 5}, 3, false, false, 1e-5f, -2, 3, 2e-5);
    test_layernorm("6x1 over 1", 2, (int64_t[]){6, 1}, 1, true, true, 1e-5f, -2, 3, 2e-5); /* y = beta, dx = 0 */
    test_layernorm("5x1x1 over 1x1", 3, (int64_t[]){5, 1, 1}, 2, false, false, 1e-5f, -2, 3, 2e-5);
    test_layernorm("4099x17 over 17", 2, (int64_t[]){4099, 17}, 1, true, true, 1e-5f, -2, 3, 2e-5); /* threads */
    /* 4095 rows of three values: the row of least variance amplifies float32's
     * rounding by its rstd, past 2e-5 in some draws (2.1e-5 seen) */
    test_layernorm("3x1365x3 over 3", 3, (int64_t[]){3, 1365, 3}, 1, true, false, 1e-5f, -2, 3, 4e-5);
    /* eps comparable to the variance: eps inside the square root, as PyTorch */
    test_layernorm("4x9 eps 1e-3, variance ~3e-7", 2, (int64_t[]){4, 9}, 1, true, true, 1e-3f, 0.5, 0.502, 2e-5);
    /* mean 100, spread 1: y from a one-pass variance E[x^2] - mean^2 in float
     * is off by ~1e-2, from a two-pass one in float by ~2e-5 */
    test_layernorm("9x33 x in [99, 101)", 2, (int64_t[]){9, 33}, 1, true, true, 1e-5f, 99, 101, 1e-3);
}

OPS_TALLY(ops_tally_norms)
