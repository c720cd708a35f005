/* test_golden_ops.c — the ops that no seed model uses (GELU, SiLU, Sigmoid,
 * Tanh, LeakyReLU, LayerNorm, Conv2d with groups and dilation) against
 * PyTorch: each op's forward and backward
 * node on the CPU backend, from inputs drawn with the shared RNG, against what
 * scripts/make_golden_ops.py stored in tests/golden/ops.safetensors.
 *
 * Both sides compute in float32, so a tensor passes when
 * nmax = max|a - b| / max|b| <= k * FLT_EPSILON (k ulps of its largest value);
 * k is stated per op in CASES and explained in docs/golden.md ("Single ops"),
 * and every tensor's nmax is printed.
 *
 * NF_CASES: NaN, +-inf and -0 through the ops that compare values (ReLU,
 * LeakyReLU, MaxPool2d, Softmax, LogSoftmax) and the smooth activations, on
 * the generator's stored inputs: NaN exactly where PyTorch has NaN, the same
 * infinities, and the selections bit for bit (the sign of zero too). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/internal.h"
#include "golden_conv.h"
#include "io/io.h"

#define GOLDEN_PATH "tests/golden/ops.safetensors"
#define SEED 1234
#define X_HEAD 16   /* "<case>.x_head": the first values of x, bit-exact */
#define LN_EPS 1e-5f /* nn.LayerNorm's default, as the generator used */

/* k of the bound k * FLT_EPSILON on nmax. LeakyReLU is one float product
 * (x or slope * x, dy or slope * dy), correctly rounded on both sides: exact.
 * The smooth activations differ by the libm's and the formulas' few ulps; the
 * generator measured <= 2.4e-7 (2 ulps of the largest value) float32 against
 * float64. LayerNorm adds sums over a row (up to 240 values) and over rows:
 * measured <= 3.3e-7. */
#define ULPS_EXACT 0
#define ULPS_ACT 16
#define ULPS_LN 32
/* Conv2d: sums of up to 8 x 9 products (forward, dx) and 2 x 81 (dW, db) in
 * another order than PyTorch's: measured <= 3.0e-7 float32 against float64 */
#define ULPS_CONV 32

/* One case of scripts/make_golden_ops.py's CASES (the same order and streams):
 * x = 4 (2u - 1) on `stream`, dy = 2u - 1 on stream + 1, LayerNorm's weight
 * and bias = 2u - 1 on stream + 2 and + 3. */
typedef struct {
    const char *name; /* the tensors' prefix in the file */
    hr_op fwd, bwd;
    int ndim;
    int64_t dims[3];
    uint64_t stream;
    int ulps;
    float alpha;   /* LeakyReLU: negative_slope */
    bool approx;   /* GELU: approximate='tanh' */
    int norm_dims; /* LayerNorm: normalised trailing dims */
    bool affine, bias;
} gcase;

#define ACT2 2, {31, 49}
#define LN1 3, {4, 16, 24}
#define LN2 3, {8, 12, 20}
static const gcase CASES[] = {
    {"gelu", HR_OP_GELU, HR_OP_GELU_BWD, ACT2, 3000, ULPS_ACT, .approx = false},
    {"gelu_tanh", HR_OP_GELU, HR_OP_GELU_BWD, ACT2, 3010, ULPS_ACT, .approx = true},
    {"silu", HR_OP_SILU, HR_OP_SILU_BWD, ACT2, 3020, ULPS_ACT, .alpha = 0},
    {"sigmoid", HR_OP_SIGMOID, HR_OP_SIGMOID_BWD, ACT2, 3030, ULPS_ACT, .alpha = 0},
    {"tanh", HR_OP_TANH, HR_OP_TANH_BWD, ACT2, 3040, ULPS_ACT, .alpha = 0},
    {"leaky_relu_0.01", HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, ACT2, 3050, ULPS_EXACT, .alpha = 0.01f},
    {"leaky_relu_0.2", HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, ACT2, 3060, ULPS_EXACT, .alpha = 0.2f},
    {"layernorm_last1", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN1, 3100, ULPS_LN, .norm_dims = 1, .affine = true,
     .bias = true},
    {"layernorm_last1_noaffine", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN1, 3110, ULPS_LN, .norm_dims = 1},
    {"layernorm_last1_nobias", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN1, 3120, ULPS_LN, .norm_dims = 1, .affine = true},
    {"layernorm_last2", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN2, 3130, ULPS_LN, .norm_dims = 2, .affine = true,
     .bias = true},
    {"layernorm_last2_noaffine", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN2, 3140, ULPS_LN, .norm_dims = 2},
    {"layernorm_last2_nobias", HR_OP_LAYERNORM, HR_OP_LAYERNORM_BWD, LN2, 3150, ULPS_LN, .norm_dims = 2, .affine = true},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

static hr_safetensors_t *file;

/* ---- tensors: a one-node graph on the CPU backend -------------------------- */
#define GT_MAX 24
typedef struct {
    hr_graph g;
    void *ptr[GT_MAX];
    hr_backend *be;
} gt;

static int gt_tensor(gt *k, hr_dtype dt, int ndim, const int64_t *d) {
    char nm[16];
    snprintf(nm, sizeof nm, "t%d", k->g.nt);
    int t = hr_graph_add_tensor(&k->g, nm, dt, hr_shape_make(ndim, d), false, HR_T_ACT, -1);
    if (t < 0 || t >= GT_MAX) abort();
    size_t n = (size_t)hr_shape_numel(&k->g.t[t].shape) * hr_dtype_size(dt);
    k->ptr[t] = calloc(n ? n : 1, 1);
    if (!k->ptr[t]) abort();
    return t;
}
static float *gf(gt *k, int t) { return k->ptr[t]; }

static void gt_run(gt *k, hr_node *n) {
    hr_step_info si;
    memset(&si, 0, sizeof si);
    si.sqnorm = -1;
    si.loss_scale = si.inv_scale = 1.0f;
    n->ws = -1;
    size_t ws = hr_node_workspace(k->be, &k->g, n);
    if (ws) n->ws = gt_tensor(k, HR_U8, 1, (int64_t[]){(int64_t)ws});
    hr_status st = hr_node_run(k->be, &k->g, n, k->ptr, &si);
    CHECK(st == HR_OK, "run %s: %s", hr_op_name(n->op), hr_last_error());
}

static void gt_free(gt *k) {
    for (int i = 0; i < GT_MAX; i++) free(k->ptr[i]);
    hr_graph_free(&k->g);
}

/* c's values on stream s: scale * (2u - 1), exact in float32 as in hr_rng.py */
static void draw(float *v, int64_t n, uint64_t s, float scale) {
    for (int64_t i = 0; i < n; i++) v[i] = scale * (2.0f * hr_rng_uniform(SEED, s, (uint64_t)i) - 1.0f);
}

/* ---- the comparison -------------------------------------------------------- */
/* The stored tensor "<case>.<what>" (F32, shape dims[0..ndim)) against got. */
static void compare(const gcase *c, const char *what, const float *got, int ndim, const int64_t *dims) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->name, what);
    const hr_st_tensor *t = hr_safetensors_expect(file, key, "F32", ndim, dims);
    CHECK(t != NULL, "%s: %s", key, hr_last_error());
    if (!t) return;
    float *ref = malloc(sizeof(float) * (size_t)t->numel);
    if (!ref || hr_safetensors_read(file, t, ref) != HR_OK) {
        CHECK(false, "%s: read: %s", key, hr_last_error());
        free(ref);
        return;
    }
    double mx = 0, err = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        double d = fabs((double)got[i] - ref[i]);
        mx = fmax(mx, fabs(ref[i]));
        err = d == d ? fmax(err, d) : INFINITY;
    }
    double nmax = mx > 0 ? err / mx : err, tol = c->ulps * (double)FLT_EPSILON;
    printf("  %-34s %6lld  nmax %9.3g  bound %9.3g (%d ulps)%s\n", key, (long long)t->numel, nmax, tol, c->ulps,
           nmax <= tol ? "" : "  FAIL");
    CHECK(nmax <= tol, "%s: nmax %.3g > %.3g (%d ulps of max|b| = %.4g)", key, nmax, tol, c->ulps, mx);
    free(ref);
}

/* ---- one case: forward and backward ---------------------------------------- */
static void run_case(hr_backend *be, const gcase *c) {
    gt k;
    memset(&k, 0, sizeof k);
    k.be = be;
    const int nd = c->ndim;
    const int64_t *dims = c->dims;
    int64_t n = 1, rows = 1, cols = 1;
    for (int d = 0; d < nd; d++) {
        n *= dims[d];
        *(d < nd - c->norm_dims ? &rows : &cols) *= dims[d];
    }
    bool ln = c->fwd == HR_OP_LAYERNORM, leaky = c->fwd == HR_OP_LEAKY_RELU, bias = c->affine && c->bias;
    int tx = gt_tensor(&k, HR_F32, nd, dims), ty = gt_tensor(&k, HR_F32, nd, dims);
    int tdy = gt_tensor(&k, HR_F32, nd, dims), tdx = gt_tensor(&k, HR_F32, nd, dims);
    draw(gf(&k, tx), n, c->stream, 4.0f);
    draw(gf(&k, tdy), n, c->stream + 1, 1.0f);

    /* the C draw against the generator's, bit for bit */
    char key[96];
    snprintf(key, sizeof key, "%s.x_head", c->name);
    const hr_st_tensor *th = hr_safetensors_expect(file, key, "F32", 1, (int64_t[]){X_HEAD});
    CHECK(th != NULL, "%s: %s", key, hr_last_error());
    float head[X_HEAD];
    if (th && hr_safetensors_read(file, th, head) == HR_OK)
        CHECK(memcmp(head, gf(&k, tx), sizeof head) == 0, "%s: x drawn here differs from the generator's", key);

    hr_node f = hr_node_make(c->fwd, -1), b = hr_node_make(c->bwd, -1);
    f.a.train = true;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    if (ln) {
        /* forward in {x, weight?, bias?} out {y, mean, rstd};
         * backward in {x, mean, rstd, weight?, dy} out {dx, dweight?, dbias?} */
        int64_t ns[3];
        for (int d = 0; d < c->norm_dims; d++) ns[d] = dims[nd - c->norm_dims + d];
        int tw = -1, tb = -1, tdw = -1, tdb = -1, tmean = gt_tensor(&k, HR_F32, 1, &rows),
            trstd = gt_tensor(&k, HR_F32, 1, &rows);
        if (c->affine) {
            tw = gt_tensor(&k, HR_F32, c->norm_dims, ns), tdw = gt_tensor(&k, HR_F32, c->norm_dims, ns);
            draw(gf(&k, tw), cols, c->stream + 2, 1.0f);
            f.in[f.nin++] = tw;
        }
        if (bias) {
            tb = gt_tensor(&k, HR_F32, c->norm_dims, ns), tdb = gt_tensor(&k, HR_F32, c->norm_dims, ns);
            draw(gf(&k, tb), cols, c->stream + 3, 1.0f);
            f.in[f.nin++] = tb;
        }
        f.a.eps = LN_EPS, f.a.norm_dims = c->norm_dims, f.a.affine = c->affine, f.a.bias = bias;
        f.out[1] = tmean, f.out[2] = trstd, f.nout = 3;
        gt_run(&k, &f);
        compare(c, "y", gf(&k, ty), nd, dims);
        compare(c, "mean", gf(&k, tmean), 1, &rows);
        compare(c, "rstd", gf(&k, trstd), 1, &rows);
        b.a = f.a;
        b.in[0] = tx, b.in[1] = tmean, b.in[2] = trstd, b.nin = 3;
        if (c->affine) b.in[b.nin++] = tw;
        b.in[b.nin++] = tdy;
        b.out[0] = tdx, b.out[1] = tdw, b.out[2] = tdb, b.nout = 3;
        gt_run(&k, &b);
        compare(c, "dx", gf(&k, tdx), nd, dims);
        if (c->affine) compare(c, "dweight", gf(&k, tdw), c->norm_dims, ns);
        if (bias) compare(c, "dbias", gf(&k, tdb), c->norm_dims, ns);
    } else {
        /* forward in {x} out {y, mask (LeakyReLU)}; backward in {x (GELU,
         * SiLU) or y (Sigmoid, Tanh) or the mask, dy} out {dx} */
        f.a.alpha = c->alpha, f.a.approx = c->approx;
        int saved = c->fwd == HR_OP_SIGMOID || c->fwd == HR_OP_TANH ? ty : tx;
        if (leaky) {
            saved = gt_tensor(&k, HR_U8, 1, (int64_t[]){(n + 7) / 8});
            f.out[1] = saved, f.nout = 2;
        }
        gt_run(&k, &f);
        compare(c, "y", gf(&k, ty), nd, dims);
        b.a = f.a;
        b.in[0] = saved, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
        gt_run(&k, &b);
        compare(c, "dx", gf(&k, tdx), nd, dims);
    }
    gt_free(&k);
}

/* ---- Conv2d with groups and dilation ---------------------------------------- */
/* One case of the generator's CONV_CASES (tests/golden_conv.h). */
static void run_conv_case(hr_backend *be, const convcase *c) {
    gt k;
    memset(&k, 0, sizeof k);
    k.be = be;
    int64_t xd[4], wd[4], yd[4], bd[1] = {c->K};
    conv_case_dims(c, xd, wd, yd);
    int tx = gt_tensor(&k, HR_F32, 4, xd), tw = gt_tensor(&k, HR_F32, 4, wd), ty = gt_tensor(&k, HR_F32, 4, yd);
    int tdy = gt_tensor(&k, HR_F32, 4, yd), tdx = gt_tensor(&k, HR_F32, 4, xd), tdw = gt_tensor(&k, HR_F32, 4, wd);
    int tb = c->bias ? gt_tensor(&k, HR_F32, 1, bd) : -1, tdb = c->bias ? gt_tensor(&k, HR_F32, 1, bd) : -1;
    int64_t nx = xd[0] * xd[1] * xd[2] * xd[3], nw = wd[0] * wd[1] * wd[2] * wd[3], ny = yd[0] * yd[1] * yd[2] * yd[3];
    draw(gf(&k, tx), nx, c->stream, 1.0f);
    draw(gf(&k, tw), nw, c->stream + 1, 0.5f);
    if (c->bias) draw(gf(&k, tb), c->K, c->stream + 2, 1.0f);
    draw(gf(&k, tdy), ny, c->stream + 3, 1.0f);
    printf("  %s: x %lldx%lldx%lldx%lld, K %lld, kernel %d, stride %d, padding %d, dilation %d, groups %d%s\n", c->name,
           (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->K, c->k, c->stride, c->pad,
           c->dil, c->groups, c->bias ? "" : ", no bias");

    char key[96];
    snprintf(key, sizeof key, "%s.x_head", c->name);
    const hr_st_tensor *th = hr_safetensors_expect(file, key, "F32", 1, (int64_t[]){X_HEAD});
    CHECK(th != NULL, "%s: %s", key, hr_last_error());
    float head[X_HEAD];
    if (th && hr_safetensors_read(file, th, head) == HR_OK)
        CHECK(memcmp(head, gf(&k, tx), sizeof head) == 0, "%s: x drawn here differs from the generator's", key);

    /* the node as hr_conv2d_ex makes it: forward in {x, W, b?} out {y};
     * backward in {x, W, dy} out {dx, dW, db?} */
    hr_node f = hr_node_make(HR_OP_CONV2D, -1), b = hr_node_make(HR_OP_CONV2D_BWD, -1);
    conv_case_attrs(c, &f);
    f.in[0] = tx, f.in[1] = tw, f.in[2] = tb, f.nin = c->bias ? 3 : 2;
    f.out[0] = ty, f.nout = 1;
    gcase gc = {.name = c->name, .ulps = ULPS_CONV}; /* for compare(): the prefix and the bound */
    gt_run(&k, &f);
    compare(&gc, "y", gf(&k, ty), 4, yd);
    b.a = f.a;
    b.in[0] = tx, b.in[1] = tw, b.in[2] = tdy, b.nin = 3;
    b.out[0] = tdx, b.out[1] = tdw, b.out[2] = tdb, b.nout = 3;
    gt_run(&k, &b);
    compare(&gc, "dx", gf(&k, tdx), 4, xd);
    compare(&gc, "dweight", gf(&k, tdw), 4, wd);
    if (c->bias) compare(&gc, "dbias", gf(&k, tdb), 1, bd);
    gt_free(&k);
}

/* ---- non-finite inputs ------------------------------------------------------ */
/* One case of the generator's NF_CASES: x and dy are read from the file
 * ("<case>.x", "<case>.dy"), y and dx compared. exact: a selection (ReLU,
 * LeakyReLU, MaxPool2d), equal bits; else within `ulps` of each value (or of
 * 1), as the smooth functions' libm and formula differences allow. */
typedef struct {
    const char *name;
    hr_op fwd, bwd;
    int ndim;
    int64_t dims[4], ydims[4];
    bool exact;
    int ulps;
    float alpha; /* LeakyReLU */
    bool approx; /* GELU tanh */
    int k, s;    /* MaxPool2d */
} nfcase;

#define NF_ACT 2, {3, 13}, {3, 13}
#define NF_SM 2, {6, 5}, {6, 5}
static const nfcase NF_CASES[] = {
    {"nf_relu", HR_OP_RELU, HR_OP_RELU_BWD, NF_ACT, true, 0, .alpha = 0},
    {"nf_leaky_relu_0.1", HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, NF_ACT, true, 0, .alpha = 0.1f},
    {"nf_gelu", HR_OP_GELU, HR_OP_GELU_BWD, NF_ACT, false, ULPS_ACT, .alpha = 0},
    {"nf_gelu_tanh", HR_OP_GELU, HR_OP_GELU_BWD, NF_ACT, false, ULPS_ACT, .approx = true},
    {"nf_silu", HR_OP_SILU, HR_OP_SILU_BWD, NF_ACT, false, ULPS_ACT, .alpha = 0},
    {"nf_sigmoid", HR_OP_SIGMOID, HR_OP_SIGMOID_BWD, NF_ACT, false, ULPS_ACT, .alpha = 0},
    {"nf_tanh", HR_OP_TANH, HR_OP_TANH_BWD, NF_ACT, false, ULPS_ACT, .alpha = 0},
    {"nf_softmax", HR_OP_SOFTMAX, HR_OP_SOFTMAX_BWD, NF_SM, false, ULPS_ACT, .alpha = 0},
    {"nf_log_softmax", HR_OP_LOGSOFTMAX, HR_OP_LOGSOFTMAX_BWD, NF_SM, false, ULPS_ACT, .alpha = 0},
    {"nf_maxpool_2", HR_OP_MAXPOOL, HR_OP_MAXPOOL_BWD, 4, {1, 2, 4, 6}, {1, 2, 2, 3}, true, 0, .k = 2, .s = 2},
    {"nf_maxpool_3s2", HR_OP_MAXPOOL, HR_OP_MAXPOOL_BWD, 4, {1, 1, 7, 7}, {1, 1, 3, 3}, true, 0, .k = 3, .s = 2},
    {"nf_maxpool_2s1", HR_OP_MAXPOOL, HR_OP_MAXPOOL_BWD, 4, {1, 1, 4, 4}, {1, 1, 3, 3}, true, 0, .k = 2, .s = 1},
};
#define NNF (int)(sizeof NF_CASES / sizeof NF_CASES[0])

/* The stored "<case>.<what>" into dst (n floats); false (and a failed check) if absent. */
static bool nf_read(const nfcase *c, const char *what, const int64_t *dims, float *dst) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->name, what);
    const hr_st_tensor *t = hr_safetensors_expect(file, key, "F32", c->ndim, dims);
    CHECK(t != NULL, "%s: %s", key, hr_last_error());
    hr_status st = t ? hr_safetensors_read(file, t, dst) : HR_ERR_FORMAT;
    CHECK(st == HR_OK, "%s: read: %s", key, hr_last_error());
    return st == HR_OK;
}

/* got against "<case>.<what>" (`how` names the run): NaN where PyTorch has
 * NaN, equal bits (exact) or within ulps * max(1, |b|). */
static void nf_compare(const nfcase *c, const char *what, const char *how, const float *got, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= dims[d];
    float *ref = malloc(sizeof(float) * (size_t)n);
    if (!ref || !nf_read(c, what, dims, ref)) {
        free(ref);
        return;
    }
    int64_t bad = 0, first = -1;
    double tol = c->ulps * (double)FLT_EPSILON;
    for (int64_t i = 0; i < n; i++) {
        float a = got[i], b = ref[i];
        bool ok;
        if (isnan(b) || isnan(a)) ok = isnan(a) && isnan(b);
        else if (c->exact) ok = memcmp(&a, &b, sizeof a) == 0;
        else if (isinf(b) || isinf(a)) ok = a == b;
        else ok = fabs((double)a - b) <= tol * fmax(1.0, fabs(b));
        if (!ok && first < 0) first = i;
        bad += !ok;
    }
    printf("  %-34s %6lld  %s%s\n", what, (long long)n, bad ? "FAIL " : "", how);
    CHECK(bad == 0, "%s.%s (%s): %lld of %lld values differ from PyTorch's; the first at %lld: %g, PyTorch %g",
          c->name, what, how, (long long)bad, (long long)n, (long long)first, first >= 0 ? (double)got[first] : 0.0,
          first >= 0 ? (double)ref[first] : 0.0);
    free(ref);
}

static void run_nf_case(hr_backend *be, const nfcase *c) {
    gt k;
    memset(&k, 0, sizeof k);
    k.be = be;
    const int nd = c->ndim;
    int64_t n = 1, ny = 1;
    for (int d = 0; d < nd; d++) n *= c->dims[d], ny *= c->ydims[d];
    bool pool = c->fwd == HR_OP_MAXPOOL, mask = c->fwd == HR_OP_RELU || c->fwd == HR_OP_LEAKY_RELU;
    int tx = gt_tensor(&k, HR_F32, nd, c->dims), ty = gt_tensor(&k, HR_F32, nd, c->ydims);
    int tdy = gt_tensor(&k, HR_F32, nd, c->ydims), tdx = gt_tensor(&k, HR_F32, nd, c->dims);
    printf("  %s\n", c->name);
    if (!nf_read(c, "x", c->dims, gf(&k, tx)) || !nf_read(c, "dy", c->ydims, gf(&k, tdy))) {
        gt_free(&k);
        return;
    }
    /* forward in {x} out {y, mask or argmax (training)}; backward in {the
     * mask, argmax, x (GELU, SiLU) or y (Sigmoid, Tanh, Softmax), dy} out {dx} */
    hr_node f = hr_node_make(c->fwd, -1), b = hr_node_make(c->bwd, -1);
    f.a.train = true, f.a.alpha = c->alpha, f.a.approx = c->approx;
    f.a.kh = f.a.kw = c->k, f.a.sh = f.a.sw = c->s;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    int saved = c->fwd == HR_OP_GELU || c->fwd == HR_OP_SILU ? tx : ty;
    if (mask || pool) {
        saved = mask ? gt_tensor(&k, HR_U8, 1, (int64_t[]){(n + 7) / 8}) : gt_tensor(&k, HR_U8, nd, c->ydims);
        f.out[1] = saved, f.nout = 2;
    }
    gt_run(&k, &f);
    nf_compare(c, "y", mask || pool ? "training forward" : "forward", gf(&k, ty), c->ydims);
    b.a = f.a;
    b.in[0] = saved, b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    gt_run(&k, &b);
    nf_compare(c, "dx", mask ? "backward from the mask" : pool ? "backward from the argmax" : "backward", gf(&k, tdx),
               c->dims);
    if (mask || pool) {
        /* inference: y alone; then the backward from its float form: y
         * (ReLU), x (LeakyReLU), x with the argmax found again (MaxPool2d) */
        f.nout = 1;
        memset(gf(&k, ty), 0xff, sizeof(float) * (size_t)ny);
        gt_run(&k, &f);
        nf_compare(c, "y", "inference forward", gf(&k, ty), c->ydims);
        bool relu = c->fwd == HR_OP_RELU;
        b.in[0] = relu ? ty : tx;
        memset(gf(&k, tdx), 0xff, sizeof(float) * (size_t)n);
        gt_run(&k, &b);
        nf_compare(c, "dx", relu ? "backward from y" : "backward from x", gf(&k, tdx), c->dims);
    }
    if (c->fwd == HR_OP_RELU) { /* in place, as the planner allows: y over x, mask from y */
        f.out[0] = tx, f.out[1] = saved, f.nout = 2;
        gt_run(&k, &f);
        nf_compare(c, "y", "forward in place", gf(&k, tx), c->ydims);
        b.in[0] = saved;
        gt_run(&k, &b);
        nf_compare(c, "dx", "backward from the in-place mask", gf(&k, tdx), c->dims);
    }
    gt_free(&k);
}

/* Every tensor of the file belongs to a case here: a case the generator has
 * and this table lacks would otherwise go untested. */
static void check_file_cases(void) {
    for (int i = 0; i < hr_safetensors_count(file); i++) {
        const char *nm = hr_safetensors_at(file, i)->name;
        bool known = false;
        for (int j = 0; j < NCASES + NNF + NCONV && !known; j++) {
            const char *cn = j < NCASES ? CASES[j].name
                             : j < NCASES + NNF ? NF_CASES[j - NCASES].name
                                                : CONV_CASES[j - NCASES - NNF].name;
            size_t l = strlen(cn);
            known = strncmp(nm, cn, l) == 0 && nm[l] == '.' && !strchr(nm + l + 1, '.');
        }
        CHECK(known, "%s: tensor '%s' belongs to no case of test_golden_ops.c's CASES, NF_CASES or CONV_CASES (keep them in "
                     "step with scripts/make_golden_ops.py)", GOLDEN_PATH, nm);
    }
}

int main(void) {
    file = hr_safetensors_open(GOLDEN_PATH);
    CHECK(file != NULL, "%s: %s (regenerate with /usr/bin/python3 scripts/make_golden_ops.py)", GOLDEN_PATH,
          hr_last_error());
    if (!file) TEST_END();
    const char *seed = hr_safetensors_meta(file, "seed"), *eps = hr_safetensors_meta(file, "layernorm_eps");
    CHECK(seed && atoll(seed) == SEED, "%s: seed %s, this test draws with %d", GOLDEN_PATH, seed ? seed : "(none)", SEED);
    CHECK(eps && (float)atof(eps) == LN_EPS, "%s: layernorm_eps %s, this test uses %g", GOLDEN_PATH, eps ? eps : "(none)",
          (double)LN_EPS);
    const char *tv = hr_safetensors_meta(file, "torch");
    printf("  %s: %d tensors from torch %s\n", GOLDEN_PATH, hr_safetensors_count(file), tv ? tv : "?");
    check_file_cases();

    hr_config_t cfg = hr_config_default();
    hr_backend *be = hr_backend_cpu_new(&cfg);
    CHECK(be != NULL, "CPU backend: %s", hr_last_error());
    if (be) {
        for (int i = 0; i < NCASES; i++) run_case(be, &CASES[i]);
        printf("  non-finite inputs (NaN, +-inf, -0): NaN where PyTorch has it, exact selections\n");
        for (int i = 0; i < NNF; i++) run_nf_case(be, &NF_CASES[i]);
        printf("  Conv2d with groups and dilation\n");
        for (int i = 0; i < NCONV; i++) run_conv_case(be, &CONV_CASES[i]);
        be->free(be);
    }
    hr_safetensors_free(file);
    TEST_END();
}
