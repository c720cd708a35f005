/* test_ops.c — every op's CPU kernels, forward and backward, against float64
 * references written here from the math (PyTorch's docs), with gradients
 * from central finite differences; accum/in-place/skipped-output semantics
 * of the backward kernels; the optimizers; and autodiff end to end through
 * the public API (keep_grads) on small models with residuals and concats.
 *
 * Bounds: an op's result r (float32) against the float64 reference f passes
 * when max|r - f| <= tol * max(1, max|f|); tol is stated per op below and
 * the worst error of every op is printed. */
#include "backend/cpu/cpu.h"
#include "check.h"
#include "exec/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers -------------------------------------------------------- */
static uint64_t rng_state = 0x1234567ULL;
static double urand(void) { /* [0, 1) */
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}
/* Uniform in [lo, hi), rounded to float so that both sides see the same input. */
static double frand(double lo, double hi) { return (double)(float)(lo + (hi - lo) * urand()); }
static void fill(double *a, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) a[i] = frand(lo, hi);
}
static double *dalloc(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

/* Worst error per op, for the summary. */
typedef struct {
    char name[80];
    double worst, tol; /* tol: the bound of the worst error */
    bool failed;
} op_stat;
static op_stat stats[64];
static int nstats;

static void note(const char *op, double err, double tol) {
    int i = 0;
    while (i < nstats && strcmp(stats[i].name, op) != 0) i++;
    if (i == 64) return;
    if (i == nstats) {
        snprintf(stats[i].name, sizeof stats[i].name, "%s", op);
        stats[i].worst = -1;
        nstats++;
    }
    if (err > stats[i].worst) stats[i].worst = err, stats[i].tol = tol;
    if (!(err <= tol)) stats[i].failed = true;
}

/* max|got - ref| / max(1, max|ref|), with NaN counted as infinite. */
static double rel_err(const float *got, const double *ref, int64_t n) {
    double mx = 1, e = 0;
    for (int64_t i = 0; i < n; i++) mx = ref[i] == ref[i] && fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    for (int64_t i = 0; i < n; i++) {
        if (ref[i] != ref[i]) continue; /* a kink: not compared */
        double d = fabs((double)got[i] - ref[i]);
        if (d != d) d = INFINITY;
        if (d > e) e = d;
    }
    return e / mx;
}

static void compare(const char *op, const char *what, const float *got, const double *ref, int64_t n, double tol) {
    double e = rel_err(got, ref, n);
    note(op, e, tol);
    CHECK(e <= tol, "%s %s: error %.3g > %.3g", op, what, e, tol);
}

/* ---- a one-node harness around the CPU backend ---------------------------- */
#define KT_MAX 48
typedef struct {
    hr_graph g;
    void *ptr[KT_MAX];
    bool owned[KT_MAX];
    hr_backend *be;
} kt;

static void kt_init(kt *k) {
    memset(k, 0, sizeof *k);
    hr_config_t cfg = hr_config_default();
    k->be = hr_backend_cpu_new(&cfg);
}

static int64_t kt_numel(kt *k, int t) { return hr_shape_numel(&k->g.t[t].shape); }

static int kt_tensor(kt *k, hr_dtype dt, int ndim, const int64_t *d) {
    char nm[16];
    snprintf(nm, sizeof nm, "t%d", k->g.nt);
    int t = hr_graph_add_tensor(&k->g, nm, dt, hr_shape_make(ndim, d), false, HR_T_ACT, -1);
    if (t < 0 || t >= KT_MAX) abort();
    size_t n = (size_t)hr_shape_numel(&k->g.t[t].shape) * hr_dtype_size(dt);
    k->ptr[t] = calloc(n ? n : 1, 1);
    k->owned[t] = true;
    return t;
}
#define KT(k, ...) kt_tensor((k), HR_F32, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static float *kf(kt *k, int t) { return k->ptr[t]; }
static void kt_set(kt *k, int t, const double *v) {
    for (int64_t i = 0; i < kt_numel(k, t); i++) kf(k, t)[i] = (float)v[i];
}
static void kt_fillf(kt *k, int t, float v) {
    for (int64_t i = 0; i < kt_numel(k, t); i++) kf(k, t)[i] = v;
}

static hr_step_info kt_si(void) {
    hr_step_info si;
    memset(&si, 0, sizeof si);
    si.t = 0;
    si.seed = 7;
    si.sqnorm = -1;
    return si;
}

/* Runs n once, with a fresh workspace when the backend asks for one. */
static void kt_run_si(kt *k, hr_node *n, const hr_step_info *si) {
    size_t ws = k->be->workspace_size ? k->be->workspace_size(k->be, &k->g, n) : 0;
    n->ws = -1;
    if (ws) n->ws = kt_tensor(k, HR_U8, 1, (int64_t[]){(int64_t)ws});
    hr_status st = k->be->run(k->be, &k->g, n, k->ptr, si);
    CHECK(st == HR_OK, "run %s: %s", hr_op_name(n->op), hr_last_error());
}
static void kt_run(kt *k, hr_node *n) {
    hr_step_info si = kt_si();
    kt_run_si(k, n, &si);
}

static void kt_free(kt *k) {
    for (int i = 0; i < KT_MAX; i++)
        if (k->owned[i]) free(k->ptr[i]);
    hr_graph_free(&k->g);
    k->be->free(k->be);
}

/* ---- finite differences on the float64 reference -------------------------- */
typedef double (*loss_fn)(void *ctx);

/* d loss / d a[i] for every i, central differences with h = 1e-5. */
static void fd_grad(loss_fn f, void *ctx, double *a, int64_t n, double *g) {
    const double h = 1e-5;
    for (int64_t i = 0; i < n; i++) {
        double v = a[i];
        a[i] = v + h;
        double lp = f(ctx);
        a[i] = v - h;
        double lm = f(ctx);
        a[i] = v;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* As fd_grad, but an element whose differences with h and h/2 disagree has
 * a kink within h (a ReLU or max input near its switch, where float32 and
 * float64 may take different sides): it gets NaN, which compare skips.
 * Smooth, the two differ by O(h^2) ~ 1e-10. Returns how many were skipped. */
static int fd_grad_smooth(loss_fn f, void *ctx, double *a, int64_t n, double *g) {
    const double h = 1e-5;
    int kinks = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = a[i], d[2];
        for (int k = 0; k < 2; k++) {
            double hk = h / (k + 1);
            a[i] = v + hk;
            double lp = f(ctx);
            a[i] = v - hk;
            double lm = f(ctx);
            d[k] = (lp - lm) / (2 * hk);
        }
        a[i] = v;
        g[i] = d[0];
        if (fabs(d[0] - d[1]) > 1e-7 * (fabs(g[i]) > 1 ? fabs(g[i]) : 1)) g[i] = NAN, kinks++;
    }
    return kinks;
}

/* Checks a backward node: outputs out[0..nout) against grads ref[i] (NULL: not
 * checked), in four ways: overwrite (outputs pre-filled with NaN, accum off),
 * accumulate (pre-filled with random values, accum on), mixed accum flags,
 * and -- for nodes with several outputs -- each output skipped (-1). */
static void check_backward(kt *k, const hr_node *tmpl, double *const *ref, const char *op, double tol, bool skippable) {
    int nout = tmpl->nout;
    for (int variant = 0; variant < 3 + (skippable ? nout : 0); variant++) {
        hr_node n = *tmpl;
        double *pre[HR_NODE_MAX_IO] = {0};
        for (int i = 0; i < nout; i++) {
            if (n.out[i] < 0 || !ref[i]) continue;
            int64_t m = kt_numel(k, n.out[i]);
            bool acc = variant == 1 || (variant == 2 && i % 2 == 0);
            n.accum[i] = acc;
            if (variant >= 3 && variant - 3 == i) {
                n.out[i] = -1;
                continue;
            }
            if (acc) {
                pre[i] = dalloc(m);
                fill(pre[i], m, -2, 2);
                kt_set(k, n.out[i], pre[i]);
            } else {
                kt_fillf(k, n.out[i], NAN);
            }
        }
        kt_run(k, &n);
        for (int i = 0; i < nout; i++) {
            if (n.out[i] < 0 || !ref[i]) continue;
            int64_t m = kt_numel(k, n.out[i]);
            double *want = dalloc(m);
            for (int64_t j = 0; j < m; j++) want[j] = ref[i][j] + (pre[i] ? pre[i][j] : 0);
            char what[64];
            snprintf(what, sizeof what, "grad out[%d] (%s%s)", i, pre[i] ? "accum" : "overwrite",
                     variant >= 3 ? ", another output skipped" : variant == 2 ? ", mixed flags" : "");
            compare(op, what, kf(k, n.out[i]), want, m, tol);
            free(want);
            free(pre[i]);
        }
    }
}

/* ---- float64 references ---------------------------------------------------- */
/* y (N,out) = x (N,in) W^T + b */
static void ref_linear(const double *x, const double *W, const double *b, int N, int in, int out, double *y) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int j = 0; j < in; j++) s += x[i * in + j] * W[o * in + j];
            y[i * out + o] = s;
        }
}

/* cross-correlation with zero padding, as torch.nn.Conv2d */
static void ref_conv(const double *x, const double *W, const double *b, int N, int C, int H, int Wd, int K, int k, int s,
                     int p, double *y) {
    int OH = (H + 2 * p - k) / s + 1, OW = (Wd + 2 * p - k) / s + 1;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < K; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = b ? b[o] : 0;
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int ih = oh * s - p + i, iw = ow * s - p + j;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                                acc += x[((n * C + c) * H + ih) * Wd + iw] * W[((o * C + c) * k + i) * k + j];
                            }
                    y[((n * K + o) * OH + oh) * OW + ow] = acc;
                }
}

static void ref_pool(const double *x, int NC, int H, int W, int kh, int kw, int s, bool max, double *y) {
    int OH = (H - kh) / s + 1, OW = (W - kw) / s + 1;
    for (int c = 0; c < NC; c++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double acc = max ? -INFINITY : 0;
                for (int i = 0; i < kh; i++)
                    for (int j = 0; j < kw; j++) {
                        double v = x[(c * H + oh * s + i) * W + ow * s + j];
                        if (max)
                            acc = v > acc ? v : acc;
                        else
                            acc += v;
                    }
                y[(c * OH + oh) * OW + ow] = max ? acc : acc / (kh * kw);
            }
}

/* batch statistics per channel over N and HW; biased variance for y */
static void ref_bn_train(const double *x, const double *gm, const double *bt, int N, int C, int HW, double eps, double *y,
                         double *mean, double *var_b, double *var_u) {
    int M = N * HW;
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < HW; j++) s += x[(n * C + c) * HW + j];
        double mu = s / M;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < HW; j++) ss += (x[(n * C + c) * HW + j] - mu) * (x[(n * C + c) * HW + j] - mu);
        double vb = ss / M;
        if (mean) mean[c] = mu;
        if (var_b) var_b[c] = vb;
        if (var_u) var_u[c] = ss / (M - 1);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < HW; j++) {
                int i = (n * C + c) * HW + j;
                y[i] = (x[i] - mu) / sqrt(vb + eps) * gm[c] + bt[c];
            }
    }
}

static void ref_softmax(const double *x, int N, int C, bool lg, double *y) {
    for (int i = 0; i < N; i++) {
        double mx = x[i * C];
        for (int j = 1; j < C; j++) mx = x[i * C + j] > mx ? x[i * C + j] : mx;
        double s = 0;
        for (int j = 0; j < C; j++) s += exp(x[i * C + j] - mx);
        for (int j = 0; j < C; j++) y[i * C + j] = lg ? x[i * C + j] - mx - log(s) : exp(x[i * C + j] - mx) / s;
    }
}

/* mean over samples of -log softmax(x)[label] */
static double ref_ce(const double *x, const int *lab, int N, int C) {
    double tot = 0;
    double *ls = dalloc((int64_t)N * C);
    ref_softmax(x, N, C, true, ls);
    for (int i = 0; i < N; i++) tot -= ls[i * C + lab[i]];
    free(ls);
    return tot / N;
}

static double wsum(const double *w, const double *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

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
typedef struct {
    double *x, *W, *b, *w, *y;
    int N, C, H, Wd, K, k, s, p, OH, OW;
} conv_ctx;
static double conv_loss(void *c_) {
    conv_ctx *c = c_;
    ref_conv(c->x, c->W, c->b, c->N, c->C, c->H, c->Wd, c->K, c->k, c->s, c->p, c->y);
    return wsum(c->w, c->y, (int64_t)c->N * c->K * c->OH * c->OW);
}

static void test_conv(int N, int C, int H, int Wd, int K, int ks, int s, int p, bool bias) {
    char op[64];
    snprintf(op, sizeof op, "Conv2d(k%d,s%d,p%d%s)", ks, s, p, bias ? "" : ",nobias");
    const double tol = 1e-4;
    conv_ctx c = {.N = N, .C = C, .H = H, .Wd = Wd, .K = K, .k = ks, .s = s, .p = p};
    c.OH = (H + 2 * p - ks) / s + 1, c.OW = (Wd + 2 * p - ks) / s + 1;
    int nx = N * C * H * Wd, nw = K * C * ks * ks, ny = N * K * c.OH * c.OW;
    c.x = dalloc(nx), c.W = dalloc(nw), c.b = bias ? dalloc(K) : NULL, c.w = dalloc(ny), c.y = dalloc(ny);
    fill(c.x, nx, -1, 1), fill(c.W, nw, -1, 1), fill(c.w, ny, -1, 1);
    if (bias) fill(c.b, K, -1, 1);
    kt k;
    kt_init(&k);
    int x = KT(&k, N, C, H, Wd), W = KT(&k, K, C, ks, ks), b = bias ? KT(&k, K) : -1;
    int y = KT(&k, N, K, c.OH, c.OW), dy = KT(&k, N, K, c.OH, c.OW);
    int dx = KT(&k, N, C, H, Wd), dW = KT(&k, K, C, ks, ks), db = bias ? KT(&k, K) : -1;
    kt_set(&k, x, c.x), kt_set(&k, W, c.W), kt_set(&k, dy, c.w);
    if (bias) kt_set(&k, b, c.b);
    hr_node n = hr_node_make(HR_OP_CONV2D, -1);
    n.a.in_f = C, n.a.out_f = K, n.a.kh = n.a.kw = ks, n.a.sh = n.a.sw = s, n.a.ph = n.a.pw = p, n.a.bias = bias;
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
    int tx = KT(&k, N, D), ty = KT(&k, N, D), tm = kt_tensor(&k, HR_U8, 2, (int64_t[]){N, D}), tdy = KT(&k, N, D),
        tdx = KT(&k, N, D), ty2 = KT(&k, N, D), tm2 = kt_tensor(&k, HR_U8, 2, (int64_t[]){N, D});
    kt_set(&k, tx, x), kt_set(&k, tdy, w);
    hr_step_info si = kt_si();

    /* p = 0: identity, every element kept, gradient passes unchanged */
    hr_node f = hr_node_make(HR_OP_DROPOUT, -1);
    f.a.p = 0.0f, f.a.train = true, f.a.seed = 3;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.out[1] = tm, f.nout = 2;
    kt_run_si(&k, &f, &si);
    compare(op, "p=0 forward", kf(&k, ty), x, n, 0);
    int kept = 0;
    for (int i = 0; i < n; i++) kept += ((uint8_t *)k.ptr[tm])[i] != 0;
    CHECK(kept == n, "Dropout p=0 kept %d of %d", kept, n);
    hr_node b = hr_node_make(HR_OP_DROPOUT_BWD, -1);
    b.a = f.a;
    b.in[0] = tm, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){w}, op, 1e-7, false);

    /* p = 0.5: about half kept, kept values doubled; the backward uses the
     * forward's mask: with that mask fixed, y = m x / (1-p) is linear in x */
    f.a.p = b.a.p = 0.5f;
    si.t = 4;
    kt_run_si(&k, &f, &si);
    kept = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bool m = ((uint8_t *)k.ptr[tm])[i] != 0;
        kept += m;
        y[i] = m ? 2 * x[i] : 0;
        g[i] = m ? 2 * w[i] : 0;
        bad += (kf(&k, ty)[i] != 0) != m; /* the output says the same as the mask */
    }
    double frac = (double)kept / n;
    printf("  Dropout(p=0.5): kept fraction %.4f of %d\n", frac, n);
    CHECK(fabs(frac - 0.5) < 0.03, "Dropout p=0.5 kept fraction %.4f", frac);
    CHECK(bad == 0, "Dropout: %d outputs disagree with the mask", bad);
    compare(op, "p=0.5 forward (kept x2, dropped 0)", kf(&k, ty), y, n, 1e-7);
    check_backward(&k, &b, (double *[]){g}, op, 1e-7, false);
    /* the same (seed, layer, step) gives the same mask; another step another */
    f.out[0] = ty2, f.out[1] = tm2;
    kt_run_si(&k, &f, &si);
    CHECK(memcmp(k.ptr[tm], k.ptr[tm2], (size_t)n) == 0, "Dropout: same seed and step, different masks");
    si.t = 5;
    kt_run_si(&k, &f, &si);
    CHECK(memcmp(k.ptr[tm], k.ptr[tm2], (size_t)n) != 0, "Dropout: the mask does not change between steps");
    /* in place (y over x), as the planner allows */
    si.t = 4;
    f.out[0] = ty, f.out[1] = tm2;
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[tx];
    kt_run_si(&k, &f, &si);
    compare(op, "p=0.5 forward in place", kf(&k, tx), y, n, 1e-7);
    k.ptr[ty] = save;
    kt_set(&k, tx, x);
    /* inference: a copy */
    f.a.train = false, f.nout = 1, f.out[1] = -1;
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

/* ---- optimizers: torch.optim's documented algorithms ----------------------- */
typedef struct {
    hr_optim_kind kind;
    float lr, mom, damp, wd, clip;
    bool nesterov;
    const char *name;
} opt_case;

static void test_optim(const opt_case *oc) {
    const int n = 37, steps = 3;
    const double tol = 2e-6;
    double *p = dalloc(n), *buf = dalloc(n), *m = dalloc(n), *v = dalloc(n), *gr = dalloc(n);
    fill(p, n, -1, 1);
    kt k;
    kt_init(&k);
    int tp = KT(&k, n), tg = KT(&k, n), ts1 = KT(&k, n), ts2 = KT(&k, n), tsq = KT(&k, 1);
    kt_set(&k, tp, p);
    hr_step_info si = kt_si();
    si.lr = oc->lr;
    si.optim.kind = oc->kind, si.optim.lr = oc->lr, si.optim.momentum = oc->mom, si.optim.dampening = oc->damp;
    si.optim.nesterov = oc->nesterov, si.optim.weight_decay = oc->wd, si.optim.clip_norm = oc->clip;
    si.optim.beta1 = 0.9f, si.optim.beta2 = 0.999f, si.optim.eps = 1e-8f;
    bool sgd = oc->kind == HR_OPTIM_SGD;
    for (int t = 1; t <= steps; t++) {
        fill(gr, n, -1, 1);
        kt_set(&k, tg, gr);
        double scale = 1;
        if (oc->clip > 0) {
            /* clip_grad_norm_: the global norm from GradNorm, coef = max / (norm + 1e-6) */
            hr_node q = hr_node_make(HR_OP_GRAD_SQNORM, -1);
            q.in[0] = tg, q.nin = 1, q.out[0] = tsq, q.nout = 1, q.accum[0] = false;
            kf(&k, tsq)[0] = NAN;
            kt_run(&k, &q);
            double sq = 0;
            for (int i = 0; i < n; i++) sq += gr[i] * gr[i];
            compare("GradNorm", "sum of squares", kf(&k, tsq), &sq, 1, 1e-6);
            /* accumulating, as the second and later gradients do: twice the sum */
            q.accum[0] = true;
            kt_run(&k, &q);
            double sq2 = 2 * sq;
            compare("GradNorm", "sum of squares (accum)", kf(&k, tsq), &sq2, 1, 1e-6);
            kf(&k, tsq)[0] = (float)sq;
            double coef = oc->clip / (sqrt(sq) + 1e-6);
            scale = coef < 1 ? coef : 1;
            si.sqnorm = tsq;
        }
        si.t = t;
        hr_node u = hr_node_make(sgd ? HR_OP_SGD : HR_OP_ADAM, -1);
        u.in[0] = tp, u.in[1] = tg, u.in[2] = (sgd && oc->mom == 0) ? -1 : ts1, u.in[3] = sgd ? -1 : ts2, u.nin = 4;
        if (oc->clip > 0) u.in[4] = tsq, u.nin = 5;
        kt_run_si(&k, &u, &si);
        for (int i = 0; i < n; i++) {
            double g = gr[i] * scale;
            if (sgd) {
                g += oc->wd * p[i];
                if (oc->mom != 0) {
                    buf[i] = t == 1 ? g : oc->mom * buf[i] + (1 - oc->damp) * g;
                    g = oc->nesterov ? g + oc->mom * buf[i] : buf[i];
                }
                p[i] -= oc->lr * g;
            } else {
                double b1 = 0.9, b2 = 0.999, eps = 1e-8;
                if (oc->kind == HR_OPTIM_ADAMW)
                    p[i] *= 1 - oc->lr * oc->wd;
                else
                    g += oc->wd * p[i];
                m[i] = b1 * m[i] + (1 - b1) * g;
                v[i] = b2 * v[i] + (1 - b2) * g * g;
                double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
                p[i] -= oc->lr * mh / (sqrt(vh) + eps);
            }
        }
        char what[32];
        snprintf(what, sizeof what, "parameters after step %d", t);
        compare(oc->name, what, kf(&k, tp), p, n, tol);
        kt_set(&k, tp, p); /* keep the two sides on the same path */
        if (sgd && oc->mom != 0) compare(oc->name, "momentum_buffer", kf(&k, ts1), buf, n, tol);
        if (!sgd) {
            compare(oc->name, "exp_avg", kf(&k, ts1), m, n, tol);
            compare(oc->name, "exp_avg_sq", kf(&k, ts2), v, n, tol);
        }
    }
    kt_free(&k);
    free(p), free(buf), free(m), free(v), free(gr);
}

/* ---- autodiff end to end, through the public API ---------------------------- */
/* A model is checked by building it, reading its initial parameters, running
 * one step (SGD, lr 0, keep_grads) and comparing the loss and every
 * parameter's gradient with finite differences of a float64 forward pass
 * written here for that model. */
typedef struct {
    hr_session_t *s;
    int np;
    char names[16][32];
    double *p[16];
    int64_t n[16];
    double *x;
    int32_t *lab;
    double *tgt;
    int B;
    double (*fwd)(void *ctx); /* the model's loss in float64 from p[], x, lab/tgt */
} e2e;

static double *P(e2e *e, const char *name) {
    for (int i = 0; i < e->np; i++)
        if (strcmp(e->names[i], name) == 0) return e->p[i];
    fprintf(stderr, "no parameter %s\n", name);
    abort();
}

/* Model A: Conv2d(2,3,3,p1) BatchNorm2d ReLU MaxPool2d(2) Flatten Linear(27,4) CE */
static double fwd_a(void *c_) {
    e2e *e = c_;
    int B = e->B;
    double c0[4 * 3 * 6 * 6], b1[4 * 3 * 6 * 6], p3[4 * 3 * 3 * 3], l5[4 * 4] = {0};
    ref_conv(e->x, P(e, "0.weight"), P(e, "0.bias"), B, 2, 6, 6, 3, 3, 1, 1, c0);
    ref_bn_train(c0, P(e, "1.weight"), P(e, "1.bias"), B, 3, 36, 1e-5, b1, NULL, NULL, NULL);
    for (int i = 0; i < B * 3 * 36; i++) b1[i] = b1[i] > 0 ? b1[i] : 0;
    ref_pool(b1, B * 3, 6, 6, 2, 2, 2, true, p3);
    ref_linear(p3, P(e, "5.weight"), P(e, "5.bias"), B, 27, 4, l5);
    int lab[4];
    for (int i = 0; i < B; i++) lab[i] = e->lab[i];
    return ref_ce(l5, lab, B, 4);
}

/* Model B: a residual and a two-branch concat, AvgPool, global pooling, Softmax + MSE.
 *   c0 = Conv(2,3,3,p1)(x); r1 = ReLU(c0); c2 = Conv(3,3,3,p1)(r1); r3 = ReLU(c2)
 *   a4 = r1 + r3; c5 = Conv(3,2,1)(a4); c6 = Conv(3,2,3,s1,p1,nobias)(a4)
 *   cat7 = [c5, c6]; ap8 = AvgPool(2, s1)(cat7); g9 = global avg(ap8); f10 = Flatten
 *   l11 = Linear(4,3); s12 = Softmax; MSE(s12, tgt) */
static double fwd_b(void *c_) {
    e2e *e = c_;
    int B = e->B, HW = 25;
    double c0[3 * 3 * 25], r1[3 * 3 * 25], c2[3 * 3 * 25], a4[3 * 3 * 25], c5[3 * 2 * 25], c6[3 * 2 * 25];
    double cat[3 * 4 * 25], ap[3 * 4 * 16], gp[3 * 4], l[3 * 3] = {0}, s[3 * 3];
    ref_conv(e->x, P(e, "0.weight"), P(e, "0.bias"), B, 2, 5, 5, 3, 3, 1, 1, c0);
    for (int i = 0; i < B * 3 * HW; i++) r1[i] = c0[i] > 0 ? c0[i] : 0;
    ref_conv(r1, P(e, "2.weight"), P(e, "2.bias"), B, 3, 5, 5, 3, 3, 1, 1, c2);
    for (int i = 0; i < B * 3 * HW; i++) a4[i] = r1[i] + (c2[i] > 0 ? c2[i] : 0);
    ref_conv(a4, P(e, "5.weight"), P(e, "5.bias"), B, 3, 5, 5, 2, 1, 1, 0, c5);
    ref_conv(a4, P(e, "6.weight"), NULL, B, 3, 5, 5, 2, 3, 1, 1, c6);
    for (int n = 0; n < B; n++)
        for (int c = 0; c < 4; c++)
            for (int j = 0; j < HW; j++)
                cat[(n * 4 + c) * HW + j] = c < 2 ? c5[(n * 2 + c) * HW + j] : c6[(n * 2 + c - 2) * HW + j];
    ref_pool(cat, B * 4, 5, 5, 2, 2, 1, false, ap);
    ref_pool(ap, B * 4, 4, 4, 4, 4, 1, false, gp);
    ref_linear(gp, P(e, "11.weight"), P(e, "11.bias"), B, 4, 3, l);
    ref_softmax(l, B, 3, false, s);
    double m = 0;
    for (int i = 0; i < B * 3; i++) m += (s[i] - e->tgt[i]) * (s[i] - e->tgt[i]);
    return m / (B * 3);
}

/* Model C: Linear(6,5,nobias) BatchNorm1d ReLU Dropout(0) Linear(5,8) Reshape(2,4)
 * Flatten LogSoftmax... as vectors: Linear(8,3) LogSoftmax, MSE */
static double fwd_c(void *c_) {
    e2e *e = c_;
    int B = e->B;
    double l0[5 * 5], b1[5 * 5], l4[5 * 8], l7[5 * 3] = {0}, ls[5 * 3];
    ref_linear(e->x, P(e, "0.weight"), NULL, B, 6, 5, l0);
    ref_bn_train(l0, P(e, "1.weight"), P(e, "1.bias"), B, 5, 1, 1e-5, b1, NULL, NULL, NULL);
    for (int i = 0; i < B * 5; i++) b1[i] = b1[i] > 0 ? b1[i] : 0;
    ref_linear(b1, P(e, "4.weight"), P(e, "4.bias"), B, 5, 8, l4);
    ref_linear(l4, P(e, "7.weight"), P(e, "7.bias"), B, 8, 3, l7);
    ref_softmax(l7, B, 3, true, ls);
    double m = 0;
    for (int i = 0; i < B * 3; i++) m += (ls[i] - e->tgt[i]) * (ls[i] - e->tgt[i]);
    return m / (B * 3);
}

static void e2e_check(const char *op, hr_model_t *m, int B, int64_t in_numel, bool ce, int nclasses_or_outputs,
                      double (*fwd)(void *)) {
    const double tol = 2e-5;
    hr_config_t cfg = hr_config_default();
    cfg.batch = B, cfg.optim.kind = HR_OPTIM_SGD, cfg.optim.lr = 0.0f, cfg.keep_grads = true, cfg.seed = 11;
    e2e e = {0};
    e.B = B;
    e.fwd = fwd;
    e.s = hr_compile(m, &cfg);
    CHECK(e.s != NULL, "%s: compile: %s", op, hr_last_error());
    if (!e.s) return;
    CHECK(hr_session_alloc(e.s) == HR_OK, "%s: alloc: %s", op, hr_last_error());
    int64_t nx = in_numel * B;
    float *xf = malloc(sizeof(float) * (size_t)nx), *tf = malloc(sizeof(float) * (size_t)(B * nclasses_or_outputs));
    e.x = dalloc(nx);
    e.lab = calloc((size_t)B, sizeof(int32_t));
    e.tgt = dalloc(B * nclasses_or_outputs);
    fill(e.x, nx, -1, 1);
    for (int64_t i = 0; i < nx; i++) xf[i] = (float)e.x[i];
    for (int i = 0; i < B; i++) e.lab[i] = (i * 7 + 2) % nclasses_or_outputs;
    fill(e.tgt, B * nclasses_or_outputs, 0, 1);
    for (int i = 0; i < B * nclasses_or_outputs; i++) tf[i] = (float)e.tgt[i];
    /* the parameters (not buffers, not optimizer state), as initialised */
    for (int i = 0; i < hr_state_count(e.s); i++) {
        const char *nm = hr_state_name(e.s, i);
        if (!hr_state_is_param(e.s, i) || strstr(nm, "running_")) continue;
        int64_t cnt = 1;
        for (int d = 0; d < hr_state_ndim(e.s, i); d++) cnt *= hr_state_dim(e.s, i, d);
        float *buf = malloc(sizeof(float) * (size_t)cnt);
        CHECK(hr_state_read(e.s, i, buf) == HR_OK, "read %s", nm);
        snprintf(e.names[e.np], sizeof e.names[e.np], "%s", nm);
        e.n[e.np] = cnt;
        e.p[e.np] = dalloc(cnt);
        for (int64_t j = 0; j < cnt; j++) e.p[e.np][j] = buf[j];
        e.np++;
        free(buf);
    }
    float loss = NAN;
    hr_status st = hr_train_step(e.s, xf, ce ? (const void *)e.lab : (const void *)tf, &loss);
    CHECK(st == HR_OK, "%s: train step: %s", op, hr_last_error());
    double L = fwd(&e);
    char opg[96];
    snprintf(opg, sizeof opg, "%s: loss", op);
    compare(opg, "loss", &loss, &L, 1, 1e-5);
    snprintf(opg, sizeof opg, "%s: grads", op);
    int kinks = 0;
    for (int i = 0; i < e.np; i++) {
        double *g = dalloc(e.n[i]);
        float *got = malloc(sizeof(float) * (size_t)e.n[i]);
        kinks += fd_grad_smooth(fwd, &e, e.p[i], e.n[i], g);
        st = hr_grad_read(e.s, e.names[i], got);
        CHECK(st == HR_OK, "%s: grad_read %s: %s", op, e.names[i], hr_last_error());
        char what[64];
        snprintf(what, sizeof what, "grad of %s", e.names[i]);
        if (st == HR_OK) compare(opg, what, got, g, e.n[i], tol);
        if (getenv("HR_DEBUG_E2E"))
            for (int64_t j = 0; j < e.n[i]; j++) printf("    %s[%lld] got %.9g want %.9g\n", e.names[i], (long long)j, got[j], g[j]);
        free(g), free(got);
    }
    for (int i = 0; i < e.np; i++) free(e.p[i]);
    int64_t total = 0;
    for (int i = 0; i < e.np; i++) total += e.n[i];
    if (kinks) printf("  %s: %d of %lld parameter elements on a kink, not compared\n", op, kinks, (long long)total);
    CHECK(kinks * 10 <= total, "%s: %d of %lld elements on kinks: the check compares too little", op, kinks,
          (long long)total);
    hr_session_free(e.s);
    free(xf), free(tf), free(e.x), free(e.lab), free(e.tgt);
}

static void test_e2e(void) {
    hr_model_t *m = hr_model_new("a");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 6, 6});
    x = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 3, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 27, 4, true);
    CHECK(hr_loss_cross_entropy(m, x, 4) >= 0, "model a: %s", hr_last_error());
    e2e_check("model Conv-BN-ReLU-MaxPool-Linear-CE", m, 4, 2 * 36, true, 4, fwd_a);
    hr_model_free(m);

    m = hr_model_new("b");
    x = hr_input(m, "x", 3, (int64_t[]){2, 5, 5});
    int c0 = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    int r1 = hr_relu(m, NULL, c0);
    int c2 = hr_conv2d(m, NULL, r1, 3, 3, 3, 1, 1, true);
    int r3 = hr_relu(m, NULL, c2);
    int a4 = hr_add(m, NULL, r1, r3);
    int c5 = hr_conv2d(m, NULL, a4, 3, 2, 1, 1, 0, true);
    int c6 = hr_conv2d(m, NULL, a4, 3, 2, 3, 1, 1, false);
    int cat = hr_concat(m, NULL, 2, (int[]){c5, c6});
    x = hr_avgpool2d(m, NULL, cat, 2, 1);
    x = hr_global_avgpool(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 4, 3, true);
    x = hr_softmax(m, NULL, x);
    CHECK(hr_loss_mse(m, x) >= 0, "model b: %s", hr_last_error());
    e2e_check("model residual+concat+pools+Softmax+MSE", m, 3, 2 * 25, false, 3, fwd_b);
    hr_model_free(m);

    m = hr_model_new("c");
    x = hr_input(m, "x", 1, (int64_t[]){6});
    x = hr_linear(m, NULL, x, 6, 5, false);
    x = hr_batchnorm(m, NULL, x, 5, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_dropout(m, NULL, x, 0.0f);
    x = hr_linear(m, NULL, x, 5, 8, true);
    x = hr_reshape(m, NULL, x, 2, (int64_t[]){2, 4});
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 8, 3, true);
    x = hr_log_softmax(m, NULL, x);
    CHECK(hr_loss_mse(m, x) >= 0, "model c: %s", hr_last_error());
    e2e_check("model Linear-BN1d-ReLU-Dropout0-Reshape-LogSoftmax+MSE", m, 5, 6, false, 3, fwd_c);
    hr_model_free(m);
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
    test_batchnorm(6, 3, 1, 1, false);
    test_batchnorm(3, 2, 3, 4, true);
    test_batchnorm(2, 4, 2, 2, true);
    test_dropout();
    test_reshape();
    test_add();
    test_concat(2, (int[]){2, 1}, 3, 3, true);
    test_concat(3, (int[]){1, 3, 2}, 2, 3, true);
    test_concat(2, (int[]){3, 4}, 1, 1, false);
    test_softmax(false);
    test_softmax(true);
    test_loss(true);
    test_loss(false);
    static const opt_case opts[] = {
        {HR_OPTIM_SGD, 0.1f, 0, 0, 0, 0, false, "SGD"},
        {HR_OPTIM_SGD, 0.1f, 0, 0, 0.01f, 0, false, "SGD(weight_decay)"},
        {HR_OPTIM_SGD, 0.05f, 0.9f, 0.1f, 0.01f, 0, false, "SGD(momentum, dampening)"},
        {HR_OPTIM_SGD, 0.05f, 0.9f, 0, 0, 0, true, "SGD(nesterov)"},
        {HR_OPTIM_SGD, 0.1f, 0.9f, 0, 0, 0.5f, false, "SGD(clip_norm 0.5)"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, false, "Adam"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0.05f, 0, false, "Adam(weight_decay)"},
        {HR_OPTIM_ADAMW, 1e-2f, 0, 0, 0.05f, 0, false, "AdamW"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0, 1.0f, false, "Adam(clip_norm 1)"},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) test_optim(&opts[i]);
    test_e2e();

    printf("  %-56s %12s %10s\n", "op", "worst error", "bound");
    for (int i = 0; i < nstats; i++)
        printf("  %-56s %12.3g %10.3g%s\n", stats[i].name, stats[i].worst, stats[i].tol,
               stats[i].failed ? "  FAIL" : "");
    TEST_END();
}
