/* harness.c — test_ops' shared machinery: random inputs, the worst-error table,
 * a one-node harness around the CPU backend, finite differences, float64 references. */
#include "harness.h"

/* ---- small helpers -------------------------------------------------------- */
static uint64_t rng_state = 0x1234567ULL;
double urand(void) { /* [0, 1) */
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}
/* Uniform in [lo, hi), rounded to float so that both sides see the same input. */
double frand(double lo, double hi) { return (double)(float)(lo + (hi - lo) * urand()); }
void fill(double *a, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) a[i] = frand(lo, hi);
}
double *dalloc(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

/* Worst error per op, for the summary. */
typedef struct {
    char name[80];
    double worst, tol; /* tol: the bound of the worst error */
    bool failed;
} op_stat;
#define MAX_STATS 160
static op_stat stats[MAX_STATS];
static int nstats;

static void note(const char *op, double err, double tol) {
    int i = 0;
    while (i < nstats && strcmp(stats[i].name, op) != 0) i++;
    if (i == MAX_STATS) return;
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

void compare(const char *op, const char *what, const float *got, const double *ref, int64_t n, double tol) {
    double e = rel_err(got, ref, n);
    note(op, e, tol);
    CHECK(e <= tol, "%s %s: error %.3g > %.3g", op, what, e, tol);
}

/* ---- a one-node harness around the CPU backend ---------------------------- */
void kt_init(kt *k) {
    memset(k, 0, sizeof *k);
    hr_config_t cfg = hr_config_default();
    k->be = hr_backend_cpu_new(&cfg);
}

int64_t kt_numel(kt *k, int t) { return hr_shape_numel(&k->g.t[t].shape); }

int kt_tensor(kt *k, hr_dtype dt, int ndim, const int64_t *d) {
    char nm[16];
    snprintf(nm, sizeof nm, "t%d", k->g.nt);
    int t = hr_graph_add_tensor(&k->g, nm, dt, hr_shape_make(ndim, d), false, HR_T_ACT, -1);
    if (t < 0 || t >= KT_MAX) abort();
    size_t n = (size_t)hr_shape_numel(&k->g.t[t].shape) * hr_dtype_size(dt);
    k->ptr[t] = calloc(n ? n : 1, 1);
    k->owned[t] = true;
    return t;
}

float *kf(kt *k, int t) { return k->ptr[t]; }
void kt_set(kt *k, int t, const double *v) {
    for (int64_t i = 0; i < kt_numel(k, t); i++) kf(k, t)[i] = (float)v[i];
}
void kt_fillf(kt *k, int t, float v) {
    for (int64_t i = 0; i < kt_numel(k, t); i++) kf(k, t)[i] = v;
}

hr_step_info kt_si(void) {
    hr_step_info si;
    memset(&si, 0, sizeof si);
    si.t = 0;
    si.seed = 7;
    si.sqnorm = -1;
    si.loss_scale = si.inv_scale = 1.0f;
    return si;
}

int op_runs[HR_OP_COUNT]; /* (harness.h) */

/* Runs n once, with a fresh workspace when the backend asks for one. */
void kt_run_si(kt *k, hr_node *n, const hr_step_info *si) {
    if (!k->be->kernels || !k->be->kernels[n->op]) {
        CHECK(false, "run %s: the CPU backend has no kernel for it", hr_op_name(n->op));
        return;
    }
    n->ws = -1;
    size_t ws = hr_node_workspace(k->be, &k->g, n);
    if (ws) n->ws = kt_tensor(k, HR_U8, 1, (int64_t[]){(int64_t)ws});
    hr_status st = hr_node_run(k->be, &k->g, n, k->ptr, si);
    CHECK(st == HR_OK, "run %s: %s", hr_op_name(n->op), hr_last_error());
    if (st == HR_OK) op_runs[n->op]++;
}
void kt_run(kt *k, hr_node *n) {
    hr_step_info si = kt_si();
    kt_run_si(k, n, &si);
}

void kt_free(kt *k) {
    for (int i = 0; i < KT_MAX; i++)
        if (k->owned[i]) free(k->ptr[i]);
    hr_graph_free(&k->g);
    k->be->free(k->be);
}

/* ---- finite differences on the float64 reference -------------------------- */

/* d loss / d a[i] for every i, central differences with h = 1e-5. */
void fd_grad(loss_fn f, void *ctx, double *a, int64_t n, double *g) {
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
int fd_grad_smooth(loss_fn f, void *ctx, double *a, int64_t n, double *g) {
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
void check_backward(kt *k, const hr_node *tmpl, double *const *ref, const char *op, double tol, bool skippable) {
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

/* The planner's in-place rule (ops.h, plan.c): with `inplace`, output 0 may
 * take the bytes of input 0, or of the last input (a backward node's dy) with
 * `inplace_last`, when that input has output 0's dtype and size. Runs n so,
 * compares output 0 with ref and puts the input's values back; false (nothing
 * run) when n's descriptor allows no such alias. */
bool check_inplace(kt *k, hr_node *n, const double *ref, const char *op, double tol) {
    const hr_op_desc *d = hr_op_desc_of(n->op);
    if (!d->inplace || d->view || n->nin < 1 || n->out[0] < 0) return false;
    int slot = d->inplace_last ? n->nin - 1 : 0, in = n->in[slot], out = n->out[0];
    const hr_tensor *ti = &k->g.t[in], *to = &k->g.t[out];
    if (ti->dtype != to->dtype || kt_numel(k, in) != kt_numel(k, out)) return false;
    size_t bytes = (size_t)kt_numel(k, in) * hr_dtype_size(ti->dtype);
    void *keep = malloc(bytes ? bytes : 1), *save = k->ptr[out];
    memcpy(keep, k->ptr[in], bytes);
    k->ptr[out] = k->ptr[in];
    bool acc = n->accum[0];
    n->accum[0] = false;
    kt_run(k, n);
    char what[64];
    snprintf(what, sizeof what, "%s in place: output 0 over input %d", hr_op_name(n->op), slot);
    compare(op, what, kf(k, in), ref, kt_numel(k, out), tol);
    n->accum[0] = acc;
    k->ptr[out] = save;
    memcpy(k->ptr[in], keep, bytes);
    free(keep);
    return true;
}

/* ---- float64 references ---------------------------------------------------- */
/* y (N,out) = x (N,in) W^T + b */
void ref_linear(const double *x, const double *W, const double *b, int N, int in, int out, double *y) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int j = 0; j < in; j++) s += x[i * in + j] * W[o * in + j];
            y[i * out + o] = s;
        }
}

/* cross-correlation with zero padding, as torch.nn.Conv2d */
void ref_conv(const double *x, const double *W, const double *b, int N, int C, int H, int Wd, int K, int k, int s,
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

void ref_pool(const double *x, int NC, int H, int W, int kh, int kw, int s, bool max, double *y) {
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
void ref_bn_train(const double *x, const double *gm, const double *bt, int N, int C, int HW, double eps, double *y,
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

void ref_softmax(const double *x, int N, int C, bool lg, double *y) {
    for (int i = 0; i < N; i++) {
        double mx = x[i * C];
        for (int j = 1; j < C; j++) mx = x[i * C + j] > mx ? x[i * C + j] : mx;
        double s = 0;
        for (int j = 0; j < C; j++) s += exp(x[i * C + j] - mx);
        for (int j = 0; j < C; j++) y[i * C + j] = lg ? x[i * C + j] - mx - log(s) : exp(x[i * C + j] - mx) / s;
    }
}

/* mean over samples of -log softmax(x)[label] */
double ref_ce(const double *x, const int *lab, int N, int C) {
    double tot = 0;
    double *ls = dalloc((int64_t)N * C);
    ref_softmax(x, N, C, true, ls);
    for (int i = 0; i < N; i++) tot -= ls[i * C + lab[i]];
    free(ls);
    return tot / N;
}

double wsum(const double *w, const double *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

void report_worst(void) {
    printf("  %-56s %12s %10s\n", "op", "worst error", "bound");
    for (int i = 0; i < nstats; i++)
        printf("  %-56s %12.3g %10.3g%s\n", stats[i].name, stats[i].worst, stats[i].tol,
               stats[i].failed ? "  FAIL" : "");
}

OPS_TALLY(ops_tally_harness)
