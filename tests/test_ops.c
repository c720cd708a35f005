/* test_ops.c — every op's CPU kernels, forward and backward, against float64
 * references written here from the math (PyTorch's docs), with gradients
 * from central finite differences; accum/in-place/skipped-output semantics
 * of the backward kernels; the optimizers; and autodiff end to end through
 * the public API (keep_grads) on small models with residuals and concats.
 * op_tests[] maps every op of HR_OP_LIST to its test: an op without one fails.
 * One binary, build/tests/test_ops, from this file (main, op_tests[], Linear,
 * Conv2d, ReLU, Add, Reshape, Dropout, pools, Concat, Softmax, losses) and
 * the files under tests/ops/: the shared harness and references, activations,
 * norms, optimizers, end to end, mixed precision (tests/ops/harness.h lists them).
 *
 * Bounds: an op's result r (float32) against the float64 reference f passes
 * when max|r - f| <= tol * max(1, max|f|); tol is stated per op below and
 * the worst error of every op is printed. */
#include "ops/harness.h"

/* ---- Linear ----------------------------------------------------------------- */
typedef struct {
    double *x, *W, *b, *w, *y;
    int N, in, out;
} lin_ctx;
static double lin_loss(void *c_) {
    lin_ctx *c = c_;
    ref_linear(c->x, c->W, c->b, c->N, c->in, c->out, c->y);
    return wsum(c->w, c->y, (int64_t)c->N * c->out);
}

static void test_linear(bool bias) {
    const char *op = bias ? "Linear" : "Linear(bias=False)";
    const double tol = 1e-4;
    lin_ctx c = {.N = 4, .in = 7, .out = 5};
    int N = c.N, in = c.in, out = c.out;
    c.x = dalloc(N * in), c.W = dalloc(out * in), c.b = bias ? dalloc(out) : NULL, c.w = dalloc(N * out), c.y = dalloc(N * out);
    fill(c.x, N * in, -1, 1), fill(c.W, out * in, -1, 1), fill(c.w, N * out, -1, 1);
    if (bias) fill(c.b, out, -1, 1);
    kt k;
    kt_init(&k);
    int x = KT(&k, N, in), W = KT(&k, out, in), b = bias ? KT(&k, out) : -1, y = KT(&k, N, out), dy = KT(&k, N, out);
    int dx = KT(&k, N, in), dW = KT(&k, out, in), db = bias ? KT(&k, out) : -1;
    kt_set(&k, x, c.x), kt_set(&k, W, c.W), kt_set(&k, dy, c.w);
    if (bias) kt_set(&k, b, c.b);
    hr_node n = hr_node_make(HR_OP_LINEAR, -1);
    n.a.in_f = in, n.a.out_f = out, n.a.bias = bias;
    n.in[0] = x, n.in[1] = W, n.in[2] = b, n.nin = bias ? 3 : 2;
    n.out[0] = y, n.nout = 1;
    kt_fillf(&k, y, NAN);
    kt_run(&k, &n);
    lin_loss(&c);
    compare(op, "forward", kf(&k, y), c.y, N * out, tol);

    double *gx = dalloc(N * in), *gW = dalloc(out * in), *gb = dalloc(out);
    fd_grad(lin_loss, &c, c.x, N * in, gx);
    fd_grad(lin_loss, &c, c.W, out * in, gW);
    if (bias) fd_grad(lin_loss, &c, c.b, out, gb);
    hr_node bw = hr_node_make(HR_OP_LINEAR_BWD, -1);
    bw.a = n.a;
    bw.in[0] = x, bw.in[1] = W, bw.in[2] = dy, bw.nin = 3;
    bw.out[0] = dx, bw.out[1] = dW, bw.out[2] = db, bw.nout = 3;
    double *refs[3] = {gx, gW, bias ? gb : NULL};
    check_backward(&k, &bw, refs, op, tol, true);
    kt_free(&k);
    free(c.x), free(c.W), free(c.b), free(c.w), free(c.y), free(gx), free(gW), free(gb);
}

/* ---- Conv2d ----------------------------------------------------------------- */
/* nn.Conv2d with dilation and groups, from its definition: output channel o
 * of group g = o / (K/G) sums input channels g C/G .. (g+1) C/G - 1 at
 * (oh s - p + i dil, ow s - p + j dil); W is (K, C/G, k, k). */
static void ref_conv_gd(const double *x, const double *W, const double *b, int N, int C, int H, int Wd, int K, int k,
                        int s, int p, int dil, int G, double *y) {
    int ke = dil * (k - 1) + 1, OH = (H + 2 * p - ke) / s + 1, OW = (Wd + 2 * p - ke) / s + 1, Cg = C / G, Kg = K / G;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < K; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = b ? b[o] : 0;
                    for (int cg = 0; cg < Cg; cg++) {
                        int c = o / Kg * Cg + cg;
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int ih = oh * s - p + i * dil, iw = ow * s - p + j * dil;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                                acc += x[((n * C + c) * H + ih) * Wd + iw] * W[((o * Cg + cg) * k + i) * k + j];
                            }
                    }
                    y[((n * K + o) * OH + oh) * OW + ow] = acc;
                }
}

typedef struct {
    double *x, *W, *b, *w, *y;
    int N, C, H, Wd, K, k, s, p, dil, G, OH, OW;
} conv_ctx;
static double conv_loss(void *c_) {
    conv_ctx *c = c_;
    if (c->dil == 1 && c->G == 1)
        ref_conv(c->x, c->W, c->b, c->N, c->C, c->H, c->Wd, c->K, c->k, c->s, c->p, c->y);
    else
        ref_conv_gd(c->x, c->W, c->b, c->N, c->C, c->H, c->Wd, c->K, c->k, c->s, c->p, c->dil, c->G, c->y);
    return wsum(c->w, c->y, (int64_t)c->N * c->K * c->OH * c->OW);
}

/* groups G and dilation dil as nn.Conv2d's; the node is made as
 * hr_conv2d_ex makes it */
static void test_conv_ex(int N, int C, int H, int Wd, int K, int ks, int s, int p, int dil, int G, bool bias) {
    char op[64];
    snprintf(op, sizeof op, "Conv2d(k%d,s%d,p%d,d%d,g%d%s)", ks, s, p, dil, G, bias ? "" : ",nobias");
    const double tol = 1e-4;
    conv_ctx c = {.N = N, .C = C, .H = H, .Wd = Wd, .K = K, .k = ks, .s = s, .p = p, .dil = dil, .G = G};
    int ke = dil * (ks - 1) + 1;
    c.OH = (H + 2 * p - ke) / s + 1, c.OW = (Wd + 2 * p - ke) / s + 1;
    int nx = N * C * H * Wd, nw = K * (C / G) * ks * ks, ny = N * K * c.OH * c.OW;
    c.x = dalloc(nx), c.W = dalloc(nw), c.b = bias ? dalloc(K) : NULL, c.w = dalloc(ny), c.y = dalloc(ny);
    fill(c.x, nx, -1, 1), fill(c.W, nw, -1, 1), fill(c.w, ny, -1, 1);
    if (bias) fill(c.b, K, -1, 1);
    kt k;
    kt_init(&k);
    int x = KT(&k, N, C, H, Wd), W = KT(&k, K, C / G, ks, ks), b = bias ? KT(&k, K) : -1;
    int y = KT(&k, N, K, c.OH, c.OW), dy = KT(&k, N, K, c.OH, c.OW);
    int dx = KT(&k, N, C, H, Wd), dW = KT(&k, K, C / G, ks, ks), db = bias ? KT(&k, K) : -1;
    kt_set(&k, x, c.x), kt_set(&k, W, c.W), kt_set(&k, dy, c.w);
    if (bias) kt_set(&k, b, c.b);
    hr_node n = hr_node_make(HR_OP_CONV2D, -1);
    n.a.in_f = C, n.a.out_f = K, n.a.kh = n.a.kw = ks, n.a.sh = n.a.sw = s, n.a.ph = n.a.pw = p, n.a.bias = bias;
    n.a.groups = G, n.a.dil_h = n.a.dil_w = dil;
    n.in[0] = x, n.in[1] = W, n.in[2] = b, n.nin = bias ? 3 : 2;
    n.out[0] = y, n.nout = 1;
    kt_fillf(&k, y, NAN);
    kt_run(&k, &n);
    conv_loss(&c);
    compare(op, "forward", kf(&k, y), c.y, ny, tol);

    double *gx = dalloc(nx), *gW = dalloc(nw), *gb = dalloc(K);
    fd_grad(conv_loss, &c, c.x, nx, gx);
    fd_grad(conv_loss, &c, c.W, nw, gW);
    if (bias) fd_grad(conv_loss, &c, c.b, K, gb);
    hr_node bw = hr_node_make(HR_OP_CONV2D_BWD, -1);
    bw.a = n.a;
    bw.in[0] = x, bw.in[1] = W, bw.in[2] = dy, bw.nin = 3;
    bw.out[0] = dx, bw.out[1] = dW, bw.out[2] = db, bw.nout = 3;
    double *refs[3] = {gx, gW, bias ? gb : NULL};
    check_backward(&k, &bw, refs, op, tol, true);
    kt_free(&k);
    free(c.x), free(c.W), free(c.b), free(c.w), free(c.y), free(gx), free(gW), free(gb);
}

static void test_conv(int N, int C, int H, int Wd, int K, int ks, int s, int p, bool bias) {
    test_conv_ex(N, C, H, Wd, K, ks, s, p, 1, 1, bias);
}

/* ---- elementwise: ReLU, Add, Reshape/Copy, Dropout ------------------------- */
static void test_relu(void) {
    const char *op = "ReLU";
    const double tol = 1e-6;
    const int n = 60;
    double *x = dalloc(n), *w = dalloc(n), *y = dalloc(n), *g = dalloc(n);
    for (int i = 0; i < n; i++) {
        do x[i] = frand(-2, 2);
        while (fabs(x[i]) < 0.05); /* away from the kink, for the differences */
        w[i] = frand(-1, 1);
        y[i] = x[i] > 0 ? x[i] : 0;
    }
    /* the gradient of sum(w * relu(x)), by differences of the reference */
    for (int i = 0; i < n; i++) {
        double h = 1e-5, a = x[i] + h, b = x[i] - h;
        g[i] = w[i] * ((a > 0 ? a : 0) - (b > 0 ? b : 0)) / (2 * h);
    }
    kt k;
    kt_init(&k);
    int tx = KT(&k, 3, 4, 5), ty = KT(&k, 3, 4, 5), tdy = KT(&k, 3, 4, 5), tdx = KT(&k, 3, 4, 5);
    kt_set(&k, tx, x), kt_set(&k, tdy, w);
    hr_node f = hr_node_make(HR_OP_RELU, -1);
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, n, tol);
    hr_node b = hr_node_make(HR_OP_RELU_BWD, -1);
    b.in[0] = ty, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){g}, op, tol, false);
    /* in place, as the planner allows: y over x, then dx over y */
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[tx];
    kt_run(&k, &f);
    compare(op, "forward in place", kf(&k, tx), y, n, tol);
    void *save_dx = k.ptr[tdx];
    k.ptr[tdx] = k.ptr[ty];
    b.accum[0] = false;
    kt_run(&k, &b);
    compare(op, "backward in place (dx over y)", kf(&k, tdx), g, n, tol);
    k.ptr[ty] = save, k.ptr[tdx] = save_dx;
    kt_free(&k);
    free(x), free(w), free(y), free(g);
}

static void test_add(void) {
    const char *op = "Add";
    const double tol = 1e-6;
    const int n = 2 * 3 * 2 * 2;
    double *a = dalloc(n), *b = dalloc(n), *y = dalloc(n), *w = dalloc(n);
    fill(a, n, -1, 1), fill(b, n, -1, 1), fill(w, n, -1, 1);
    for (int i = 0; i < n; i++) y[i] = a[i] + b[i];
    kt k;
    kt_init(&k);
    int ta = KT(&k, 2, 3, 2, 2), tb = KT(&k, 2, 3, 2, 2), ty = KT(&k, 2, 3, 2, 2), tdy = KT(&k, 2, 3, 2, 2),
        tdx = KT(&k, 2, 3, 2, 2);
    kt_set(&k, ta, a), kt_set(&k, tb, b), kt_set(&k, tdy, w);
    hr_node f = hr_node_make(HR_OP_ADD, -1);
    f.in[0] = ta, f.in[1] = tb, f.nin = 2, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, n, tol);
    /* y over a, the planner's in-place case */
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[ta];
    kt_run(&k, &f);
    compare(op, "forward in place", kf(&k, ta), y, n, tol);
    k.ptr[ty] = save;
    /* backward: Add's gradient reaches each input by a Copy of dy; d/da sum(w (a+b)) = w */
    hr_node c = hr_node_make(HR_OP_COPY, -1);
    c.in[0] = tdy, c.nin = 1, c.out[0] = tdx, c.nout = 1;
    check_backward(&k, &c, (double *[]){w}, "Add/Copy.backward", tol, false);
    kt_free(&k);
    free(a), free(b), free(y), free(w);
}

static void test_reshape(void) {
    const char *op = "Flatten/Reshape";
    const int n = 3 * 2 * 3 * 2;
    double *x = dalloc(n), *w = dalloc(n);
    fill(x, n, -1, 1), fill(w, n, -1, 1);
    kt k;
    kt_init(&k);
    int tx = KT(&k, 3, 2, 3, 2), ty = KT(&k, 3, 12), tdy = KT(&k, 3, 12), tdx = KT(&k, 3, 2, 3, 2);
    kt_set(&k, tx, x), kt_set(&k, tdy, w);
    hr_node f = hr_node_make(HR_OP_RESHAPE, -1);
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    /* Flatten keeps C,H,W order: the bytes are unchanged */
    compare(op, "forward (copy)", kf(&k, ty), x, n, 0);
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[tx]; /* the planner's view */
    kt_run(&k, &f);
    compare(op, "forward (view)", kf(&k, tx), x, n, 0);
    k.ptr[ty] = save;
    hr_node c = hr_node_make(HR_OP_COPY, -1);
    c.in[0] = tdy, c.nin = 1, c.out[0] = tdx, c.nout = 1;
    check_backward(&k, &c, (double *[]){w}, op, 1e-7, false);
    kt_free(&k);
    free(x), free(w);
}

static void test_dropout(void) {
    const char *op = "Dropout";
    const int N = 8, D = 512, n = N * D;
    double *x = dalloc(n), *w = dalloc(n), *g = dalloc(n), *y = dalloc(n);
    for (int i = 0; i < n; i++) {
        do x[i] = frand(-1, 1);
        while (x[i] == 0);
    }
    fill(w, n, -1, 1);
    kt k;
    kt_init(&k);
    int tx = KT(&k, N, D), ty = KT(&k, N, D), tdy = KT(&k, N, D), tdx = KT(&k, N, D), ty2 = KT(&k, N, D);
    kt_set(&k, tx, x), kt_set(&k, tdy, w);
    hr_step_info si = kt_si(); /* step 0, as kt_run (check_backward) runs the backward */

    /* p = 0: identity, every element kept, gradient passes unchanged */
    hr_node f = hr_node_make(HR_OP_DROPOUT, -1);
    f.a.p = 0.0f, f.a.train = true, f.a.seed = 3;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_run_si(&k, &f, &si);
    compare(op, "p=0 forward", kf(&k, ty), x, n, 0);
    int kept = 0;
    for (int i = 0; i < n; i++) kept += kf(&k, ty)[i] != 0; /* no x is 0 */
    CHECK(kept == n, "Dropout p=0 kept %d of %d", kept, n);
    hr_node b = hr_node_make(HR_OP_DROPOUT_BWD, -1);
    b.a = f.a;
    b.in[0] = tdy, b.nin = 1, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){w}, op, 1e-7, false);

    /* p = 0.5: about half kept, kept values doubled, each decision the
     * documented draw (op_list.h: layer 3's stream at step 0 is 3 << 32 ^ 1);
     * the backward draws the same ones again: y = m x / (1-p) is linear in x */
    f.a.p = b.a.p = 0.5f;
    kt_run_si(&k, &f, &si);
    kept = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bool m = hr_rng_uniform(si.seed, (3ULL << 32) ^ 1, (uint64_t)i) >= 0.5f;
        kept += m;
        y[i] = m ? 2 * x[i] : 0;
        g[i] = m ? 2 * w[i] : 0;
        bad += (kf(&k, ty)[i] != 0) != m;
    }
    double frac = (double)kept / n;
    printf("  Dropout(p=0.5): kept fraction %.4f of %d\n", frac, n);
    CHECK(fabs(frac - 0.5) < 0.03, "Dropout p=0.5 kept fraction %.4f", frac);
    CHECK(bad == 0, "Dropout: %d outputs disagree with the documented draw", bad);
    compare(op, "p=0.5 forward (kept x2, dropped 0)", kf(&k, ty), y, n, 1e-7);
    check_backward(&k, &b, (double *[]){g}, op, 1e-7, false);
    /* the same (seed, layer, step) gives the same decisions; another step others */
    f.out[0] = ty2;
    kt_run_si(&k, &f, &si);
    CHECK(memcmp(k.ptr[ty], k.ptr[ty2], sizeof(float) * (size_t)n) == 0, "Dropout: same seed and step, different draws");
    si.t = 5;
    kt_run_si(&k, &f, &si);
    CHECK(memcmp(k.ptr[ty], k.ptr[ty2], sizeof(float) * (size_t)n) != 0, "Dropout: the draws do not change between steps");
    /* in place (y over x), as the planner allows */
    si.t = 0;
    f.out[0] = ty;
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[tx];
    kt_run_si(&k, &f, &si);
    compare(op, "p=0.5 forward in place", kf(&k, tx), y, n, 1e-7);
    k.ptr[ty] = save;
    kt_set(&k, tx, x);
    /* inference: a copy */
    f.a.train = false;
    kt_run_si(&k, &f, &si);
    compare(op, "inference forward", kf(&k, ty), x, n, 0);
    kt_free(&k);
    free(x), free(w), free(g), free(y);
}

/* ---- pools -------------------------------------------------------------------- */
typedef struct {
    double *x, *w, *y;
    int NC, H, W, kh, kw, s, OH, OW;
    bool max;
} pool_ctx;
static double pool_loss(void *c_) {
    pool_ctx *c = c_;
    ref_pool(c->x, c->NC, c->H, c->W, c->kh, c->kw, c->s, c->max, c->y);
    return wsum(c->w, c->y, (int64_t)c->NC * c->OH * c->OW);
}

static void test_pool(bool max, int N, int C, int H, int W, int kh, int kw, int s, bool global) {
    char op[64];
    if (global)
        snprintf(op, sizeof op, "AdaptiveAvgPool2d(1) %dx%d", H, W);
    else
        snprintf(op, sizeof op, "%s(k%d,s%d) %dx%d", max ? "MaxPool2d" : "AvgPool2d", kh, s, H, W);
    const double tol = 1e-5;
    pool_ctx c = {.NC = N * C, .H = H, .W = W, .kh = kh, .kw = kw, .s = s, .max = max};
    c.OH = (H - kh) / s + 1, c.OW = (W - kw) / s + 1;
    int nx = N * C * H * W, ny = N * C * c.OH * c.OW;
    c.x = dalloc(nx), c.w = dalloc(ny), c.y = dalloc(ny);
    fill(c.w, ny, -1, 1);
    /* distinct values, 0.01 apart, shuffled: no ties within h of each other */
    for (int i = 0; i < nx; i++) c.x[i] = (double)(float)(0.01 * (i - nx / 2));
    for (int i = nx - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1));
        double t = c.x[i];
        c.x[i] = c.x[j], c.x[j] = t;
    }
    kt k;
    kt_init(&k);
    int tx = KT(&k, N, C, H, W), ty = KT(&k, N, C, c.OH, c.OW), tdy = KT(&k, N, C, c.OH, c.OW), tdx = KT(&k, N, C, H, W);
    kt_set(&k, tx, c.x), kt_set(&k, tdy, c.w);
    hr_node f = hr_node_make(max ? HR_OP_MAXPOOL : HR_OP_AVGPOOL, -1);
    f.a.kh = kh, f.a.kw = kw, f.a.sh = f.a.sw = s;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_fillf(&k, ty, NAN);
    kt_run(&k, &f);
    pool_loss(&c);
    compare(op, "forward", kf(&k, ty), c.y, ny, tol);
    double *gx = dalloc(nx);
    fd_grad(pool_loss, &c, c.x, nx, gx);
    hr_node b = hr_node_make(max ? HR_OP_MAXPOOL_BWD : HR_OP_AVGPOOL_BWD, -1);
    b.a = f.a;
    if (max)
        b.in[0] = tx, b.in[1] = tdy, b.nin = 2;
    else
        b.in[0] = tdy, b.nin = 1;
    b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){gx}, op, tol, false);
    kt_free(&k);
    free(c.x), free(c.w), free(c.y), free(gx);
}

/* Ties: PyTorch sends the gradient to the first maximum of the window. */
static void test_maxpool_ties(void) {
    kt k;
    kt_init(&k);
    int tx = KT(&k, 1, 1, 4, 4), ty = KT(&k, 1, 1, 2, 2), tdy = KT(&k, 1, 1, 2, 2), tdx = KT(&k, 1, 1, 4, 4);
    kt_fillf(&k, tx, 0.5f), kt_fillf(&k, tdy, 1.0f);
    hr_node f = hr_node_make(HR_OP_MAXPOOL, -1);
    f.a.kh = f.a.kw = f.a.sh = f.a.sw = 2;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    double half[4] = {0.5, 0.5, 0.5, 0.5};
    compare("MaxPool2d(k2,s2) 4x4", "ties forward", kf(&k, ty), half, 4, 0);
    hr_node b = hr_node_make(HR_OP_MAXPOOL_BWD, -1);
    b.a.kh = b.a.kw = b.a.sh = b.a.sw = 2;
    b.in[0] = tx, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    kt_run(&k, &b);
    double want[16] = {1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0};
    compare("MaxPool2d(k2,s2) 4x4", "ties go to the first maximum", kf(&k, tdx), want, 16, 0);
    kt_free(&k);
}

/* ---- Concat ------------------------------------------------------------------ */
static void test_concat(int nin, const int *ch, int H, int W, bool image) {
    const char *op = image ? "Concat(N,C,H,W)" : "Concat(N,C)";
    const int N = 3;
    int HW = image ? H * W : 1, CY = 0;
    for (int i = 0; i < nin; i++) CY += ch[i];
    int ny = N * CY * HW;
    double *w = dalloc(ny), *y = dalloc(ny), *xs[HR_NODE_MAX_IO];
    fill(w, ny, -1, 1);
    kt k;
    kt_init(&k);
    int tx[HR_NODE_MAX_IO], tdx[HR_NODE_MAX_IO];
    int ty = image ? KT(&k, N, CY, H, W) : KT(&k, N, CY), tdy = image ? KT(&k, N, CY, H, W) : KT(&k, N, CY);
    kt_set(&k, tdy, w);
    hr_node f = hr_node_make(HR_OP_CONCAT, -1);
    int off = 0;
    for (int i = 0; i < nin; i++) {
        int nx = N * ch[i] * HW;
        xs[i] = dalloc(nx);
        fill(xs[i], nx, -1, 1);
        tx[i] = image ? KT(&k, N, ch[i], H, W) : KT(&k, N, ch[i]);
        tdx[i] = image ? KT(&k, N, ch[i], H, W) : KT(&k, N, ch[i]);
        kt_set(&k, tx[i], xs[i]);
        f.in[i] = tx[i];
        for (int n = 0; n < N; n++)
            for (int c = 0; c < ch[i]; c++)
                for (int j = 0; j < HW; j++) y[(n * CY + off + c) * HW + j] = xs[i][(n * ch[i] + c) * HW + j];
        off += ch[i];
    }
    f.nin = nin, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, ny, 0);
    /* d/dx_i sum(w y) = the channels of w that x_i filled */
    off = 0;
    for (int i = 0; i < nin; i++) {
        int nx = N * ch[i] * HW;
        double *g = dalloc(nx);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < ch[i]; c++)
                for (int j = 0; j < HW; j++) g[(n * ch[i] + c) * HW + j] = w[(n * CY + off + c) * HW + j];
        hr_node b = hr_node_make(HR_OP_CONCAT_BWD, -1);
        b.a.offset = off;
        b.in[0] = tdy, b.nin = 1, b.out[0] = tdx[i], b.nout = 1;
        check_backward(&k, &b, (double *[]){g}, op, 1e-7, false);
        off += ch[i];
        free(g);
        free(xs[i]);
    }
    kt_free(&k);
    free(w), free(y);
}

/* ---- Softmax, LogSoftmax ----------------------------------------------------- */
typedef struct {
    double *x, *w, *y;
    int N, C;
    bool lg;
} sm_ctx;
static double sm_loss(void *c_) {
    sm_ctx *c = c_;
    ref_softmax(c->x, c->N, c->C, c->lg, c->y);
    return wsum(c->w, c->y, (int64_t)c->N * c->C);
}

static void test_softmax(bool lg) {
    const char *op = lg ? "LogSoftmax" : "Softmax";
    const double tol = 1e-5;
    sm_ctx c = {.N = 5, .C = 7, .lg = lg};
    int n = c.N * c.C;
    c.x = dalloc(n), c.w = dalloc(n), c.y = dalloc(n);
    fill(c.x, n, -3, 3), fill(c.w, n, -1, 1);
    /* large logits: exp overflows even a double without the max subtracted */
    for (int j = 0; j < c.C; j++) c.x[4 * c.C + j] = 1000.0 + 2.0 * j;
    kt k;
    kt_init(&k);
    int tx = KT(&k, c.N, c.C), ty = KT(&k, c.N, c.C), tdy = KT(&k, c.N, c.C), tdx = KT(&k, c.N, c.C);
    kt_set(&k, tx, c.x), kt_set(&k, tdy, c.w);
    hr_node f = hr_node_make(lg ? HR_OP_LOGSOFTMAX : HR_OP_SOFTMAX, -1);
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_run(&k, &f);
    sm_loss(&c);
    compare(op, "forward", kf(&k, ty), c.y, n, tol);
    double *g = dalloc(n);
    fd_grad(sm_loss, &c, c.x, n, g);
    hr_node b = hr_node_make(lg ? HR_OP_LOGSOFTMAX_BWD : HR_OP_SOFTMAX_BWD, -1);
    b.in[0] = ty, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){g}, op, tol, false);
    kt_free(&k);
    free(c.x), free(c.w), free(c.y), free(g);
}

/* ---- losses --------------------------------------------------------------------- */
typedef struct {
    double *x, *t;
    int *lab;
    int N, C;
} loss_ctx;
static double ce_loss(void *c_) {
    loss_ctx *c = c_;
    return ref_ce(c->x, c->lab, c->N, c->C);
}
static double mse_loss(void *c_) {
    loss_ctx *c = c_;
    double s = 0;
    for (int i = 0; i < c->N * c->C; i++) s += (c->x[i] - c->t[i]) * (c->x[i] - c->t[i]);
    return s / (c->N * c->C);
}

static void test_loss(bool ce) {
    const char *op = ce ? "CrossEntropyLoss" : "MSELoss";
    const double tol = 1e-5;
    loss_ctx c = {.N = 6, .C = 5};
    int n = c.N * c.C;
    c.x = dalloc(n), c.t = dalloc(n), c.lab = calloc((size_t)c.N, sizeof(int));
    fill(c.x, n, -3, 3), fill(c.t, n, -1, 1);
    for (int i = 0; i < c.N; i++) c.lab[i] = (i * 3 + 1) % c.C;
    kt k;
    kt_init(&k);
    int tx = KT(&k, c.N, c.C), tl = ce ? kt_tensor(&k, HR_I32, 1, (int64_t[]){c.N}) : KT(&k, c.N, c.C);
    int tloss = KT(&k, 1), tdx = KT(&k, c.N, c.C);
    kt_set(&k, tx, c.x);
    if (ce)
        for (int i = 0; i < c.N; i++) ((int32_t *)k.ptr[tl])[i] = c.lab[i];
    else
        kt_set(&k, tl, c.t);
    hr_node f = hr_node_make(ce ? HR_OP_CROSS_ENTROPY : HR_OP_MSE, -1);
    f.a.nclasses = c.C;
    f.in[0] = tx, f.in[1] = tl, f.nin = 2, f.out[0] = tloss, f.nout = 1;
    kt_run(&k, &f);
    double L = ce ? ce_loss(&c) : mse_loss(&c);
    compare(op, "forward (mean loss)", kf(&k, tloss), &L, 1, tol);
    double *g = dalloc(n);
    fd_grad(ce ? ce_loss : mse_loss, &c, c.x, n, g);
    hr_node b = hr_node_make(ce ? HR_OP_CROSS_ENTROPY_BWD : HR_OP_MSE_BWD, -1);
    b.a = f.a;
    b.in[0] = tx, b.in[1] = tl, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){g}, op, tol, false);
    kt_free(&k);
    free(c.x), free(c.t), free(c.lab), free(g);
}

/* ---- every op of HR_OP_LIST has a test ------------------------------------- */
/* Which test covers each op. A backward op is covered by its forward op's
 * gradient check (check_backward: against central finite differences of the
 * float64 reference, overwriting, accumulating, with outputs skipped). An op
 * added to HR_OP_LIST without a row here fails the run (check_coverage), and
 * so does a row whose op never ran through the harness. */
static const char *const op_tests[HR_OP_COUNT] = {
    [HR_OP_LINEAR] = "test_linear: forward, bias and bias=False",
    [HR_OP_LINEAR_BWD] = "test_linear: Linear's gradient check (dx, dW, db)",
    [HR_OP_CONV2D] = "test_conv: forward, 8 shapes (1x1, strides, padding, even and 5x5 kernels); test_conv_ex: "
                     "groups, depthwise (x1, x2), dilation",
    [HR_OP_CONV2D_BWD] = "test_conv: Conv2d's gradient check (dx, dW, db)",
    [HR_OP_RELU] = "test_relu: forward, in place",
    [HR_OP_RELU_BWD] = "test_relu: ReLU's gradient check (from float y), in place",
    [HR_OP_LEAKY_RELU] = "test_act: LeakyReLU(0.01), (0.2): forward, bit mask, inference, in place",
    [HR_OP_LEAKY_RELU_BWD] = "test_act: LeakyReLU's gradient check (from the mask)",
    [HR_OP_GELU] = "test_act: GELU, GELU(approximate='tanh'): forward, in place",
    [HR_OP_GELU_BWD] = "test_act: GELU's gradient check (from x)",
    [HR_OP_SILU] = "test_act: SiLU: forward, in place",
    [HR_OP_SILU_BWD] = "test_act: SiLU's gradient check (from x)",
    [HR_OP_SIGMOID] = "test_act: Sigmoid: forward, in place",
    [HR_OP_SIGMOID_BWD] = "test_act: Sigmoid's gradient check (from y)",
    [HR_OP_TANH] = "test_act: Tanh: forward, in place",
    [HR_OP_TANH_BWD] = "test_act: Tanh's gradient check (from y)",
    [HR_OP_MAXPOOL] = "test_pool, test_maxpool_ties: forward",
    [HR_OP_MAXPOOL_BWD] = "test_pool: MaxPool2d's gradient check; ties to the first maximum",
    [HR_OP_AVGPOOL] = "test_pool: forward, global average pool too",
    [HR_OP_AVGPOOL_BWD] = "test_pool: AvgPool2d's gradient check",
    [HR_OP_BATCHNORM] = "test_batchnorm: 1d and 2d, batch and running statistics, eval",
    [HR_OP_BATCHNORM_BWD] = "test_batchnorm: BatchNorm's gradient check (dx, dgamma, dbeta)",
    [HR_OP_LAYERNORM] = "test_layernorm: 1 to 3 dims, affine or not, bias=False, mean/rstd, inference, in place",
    [HR_OP_LAYERNORM_BWD] = "test_layernorm: LayerNorm's gradient check (dx, dgamma, dbeta)",
    [HR_OP_EMBEDDING] = "test_embedding (ops/sequence.c): repeated ids, an id outside the table refused",
    [HR_OP_EMBEDDING_BWD] = "test_embedding: the table's gradient check, repeated ids summed",
    [HR_OP_POS_EMBEDDING] = "test_embedding: positions added, in place",
    [HR_OP_POS_EMBEDDING_BWD] = "test_embedding: the table's gradient (rows past the sequence zero)",
    [HR_OP_ATTENTION] = "test_attention (ops/sequence.c): 1 to 3 heads, log-sum-exp, inference",
    [HR_OP_ATTENTION_BWD] = "test_attention: the gradient check of q, k and v",
    [HR_OP_DROPOUT] = "test_dropout: p=0, p=0.5, masks per step, in place, inference",
    [HR_OP_DROPOUT_BWD] = "test_dropout: Dropout's gradient (linear with the mask fixed)",
    [HR_OP_RESHAPE] = "test_reshape: copy and view",
    [HR_OP_COPY] = "test_add, test_reshape: the backward of Add and Reshape",
    [HR_OP_ADD] = "test_add: forward, in place (its backward is Copy)",
    [HR_OP_CONCAT] = "test_concat: forward, 2 and 3 inputs, (N,C) and (N,C,H,W)",
    [HR_OP_CONCAT_BWD] = "test_concat: Concat's gradient (each input's channels)",
    [HR_OP_SOFTMAX] = "test_softmax: forward, large logits",
    [HR_OP_SOFTMAX_BWD] = "test_softmax: Softmax's gradient check",
    [HR_OP_LOGSOFTMAX] = "test_softmax: forward, large logits",
    [HR_OP_LOGSOFTMAX_BWD] = "test_softmax: LogSoftmax's gradient check",
    [HR_OP_CROSS_ENTROPY] = "test_loss: mean loss",
    [HR_OP_CROSS_ENTROPY_BWD] = "test_loss: CrossEntropyLoss's gradient check",
    [HR_OP_MSE] = "test_loss: mean loss",
    [HR_OP_MSE_BWD] = "test_loss: MSELoss's gradient check",
    [HR_OP_LINEAR_CE] = "test_linear_ce (ops/sequence.c): the mean loss, dx and dW against differences, scaled, no dx",
    [HR_OP_CAST] = "test_precision: F32<->BF16/F16 both ways, acc, gradient; bf16/f16 rounding vs references",
    [HR_OP_UNSCALE] = "test_precision: GradScaler.unscale: scaling, found_inf by inf/NaN, acc semantics",
    [HR_OP_GRAD_SQNORM] = "test_optim (clipping): sum of squares, overwritten and accumulated",
    [HR_OP_SGD] = "test_optim: SGD, weight decay, momentum, dampening, nesterov, clipping",
    [HR_OP_ADAM] = "test_optim: Adam, AdamW, weight decay, clipping",
};

static void check_coverage(void) {
    printf("  %-28s %6s  %s\n", "op (HR_OP_LIST)", "nodes", "covered by");
    for (int op = 0; op < HR_OP_COUNT; op++) {
        const char *t = op_tests[op], *name = hr_op_name((hr_op)op);
        printf("  %-28s %6d  %s\n", name, op_runs[op], t ? t : "NOTHING");
        CHECK(t != NULL, "op %s (row %d of HR_OP_LIST) has no test: add one to tests/test_ops.c or tests/ops/ and its row to op_tests[]",
              name, op);
        CHECK(!t || op_runs[op] > 0, "op %s: op_tests[] says \"%s\", but no %s node ran", name, t ? t : "", name);
    }
}

int main(void) {
    test_linear(true);
    test_linear(false);
    /* (N, C, H, W, K, kernel, stride, padding, bias); N > threads so that the
     * per-thread buffers are reused */
    test_conv(3, 2, 5, 5, 3, 3, 1, 1, true);
    test_conv(3, 3, 4, 5, 4, 1, 1, 0, true);  /* 1x1: the direct path, no im2col */
    test_conv(3, 2, 6, 6, 3, 3, 2, 1, true);  /* stride 2 */
    test_conv(2, 3, 7, 7, 2, 1, 2, 0, true);  /* 1x1, stride 2 */
    test_conv(3, 2, 7, 5, 3, 5, 2, 2, false); /* 5x5, non-square input */
    test_conv(2, 2, 5, 6, 2, 2, 1, 0, true);  /* even kernel */
    test_conv(5, 1, 4, 4, 2, 3, 1, 0, false); /* no padding */
    test_conv(2, 2, 6, 6, 3, 3, 3, 2, true);  /* stride 3, padding 2 */
    /* (N, C, H, W, K, kernel, stride, padding, dilation, groups, bias) */
    test_conv_ex(3, 4, 5, 5, 6, 3, 1, 1, 1, 2, true);  /* groups 2 */
    test_conv_ex(3, 3, 5, 5, 3, 3, 1, 1, 1, 3, true);  /* depthwise: groups = C = K */
    test_conv_ex(2, 3, 5, 6, 6, 3, 2, 1, 1, 3, false); /* depthwise, channel multiplier 2 (K = 2C), stride 2 */
    test_conv_ex(3, 2, 9, 8, 3, 3, 2, 2, 2, 1, true);  /* dilation 2, stride 2, padding 2 */
    test_conv_ex(2, 3, 6, 7, 2, 2, 1, 1, 3, 1, true);  /* even kernel, dilation 3 */
    test_conv_ex(2, 4, 7, 7, 4, 3, 1, 2, 2, 4, true);  /* depthwise and dilated */
    test_conv_ex(3, 4, 4, 4, 6, 1, 1, 0, 1, 2, true);  /* 1x1 grouped: the direct path, a group at a time */
    test_conv_ex(2, 6, 6, 5, 4, 3, 2, 1, 2, 2, false); /* groups 2, dilation 2, stride 2 */
    test_conv_ex(2, 3, 1, 4, 6, 3, 1, 2, 2, 3, true);  /* depthwise x2 on one row: taps that read only padding */
    test_relu();
    test_pool(true, 2, 3, 4, 4, 2, 2, 2, false);
    test_pool(true, 2, 2, 7, 7, 3, 3, 2, false); /* overlapping windows */
    test_pool(true, 2, 2, 5, 4, 2, 2, 2, false); /* odd size: the last row dropped */
    test_pool(true, 1, 2, 5, 5, 2, 2, 1, false);
    test_maxpool_ties();
    test_pool(false, 2, 3, 4, 4, 2, 2, 2, false);
    test_pool(false, 2, 2, 7, 7, 3, 3, 2, false);
    test_pool(false, 2, 2, 5, 6, 3, 3, 1, false);
    test_pool(false, 2, 3, 3, 5, 3, 5, 1, true); /* global average pool */
    test_norms(); /* tests/ops/norms.c */
    test_dropout();
    test_activations(); /* tests/ops/activations.c */
    test_reshape();
    test_add();
    test_concat(2, (int[]){2, 1}, 3, 3, true);
    test_concat(3, (int[]){1, 3, 2}, 2, 3, true);
    test_concat(2, (int[]){3, 4}, 1, 1, false);
    test_softmax(false);
    test_softmax(true);
    test_loss(true);
    test_loss(false);
    test_optimizers(); /* tests/ops/optim.c */
    test_e2e(); /* tests/ops/e2e.c */
    test_precision(); /* tests/ops/precision.c */
    test_sequence();  /* tests/ops/sequence.c */
    check_coverage();

    report_worst();

    /* the other files' checks, so that the one RESULT line counts them all */
    void (*const tallies[])(int *, int *) = {ops_tally_harness, ops_tally_norms, ops_tally_activations,
                                             ops_tally_optim, ops_tally_e2e, ops_tally_precision,
                                             ops_tally_sequence};
    for (size_t i = 0; i < sizeof tallies / sizeof tallies[0]; i++) tallies[i](&check_pass, &check_fail);
    TEST_END();
}
