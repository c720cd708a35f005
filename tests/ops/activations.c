/* activations.c — test_ops' activation family (LeakyReLU, GELU, SiLU, Sigmoid, Tanh): forward,
 * LeakyReLU's bit mask, backward from what the forward kept, in place, extremes;
 * and Dropout with NaN, +-inf and -0 (PyTorch multiplies by the mask). */
#include "harness.h"

#include <float.h>

/* ---- LeakyReLU, GELU, SiLU, Sigmoid, Tanh ---------------------------------- */
/* What an activation's backward node reads besides dy (graph/op_list.h). */
typedef enum { ACT_SAVES_X, ACT_SAVES_Y, ACT_SAVES_MASK } act_saves;

typedef struct {
    const char *name;
    hr_op fwd, bwd;
    act_saves saves;
    float alpha; /* LeakyReLU: negative_slope */
    bool approx; /* GELU: approximate='tanh' */
} act_case;

/* The forward in float64, from PyTorch's formulas. */
static double ref_act(const act_case *c, double x) {
    switch (c->fwd) {
    case HR_OP_LEAKY_RELU: return x > 0 ? x : (double)c->alpha * x;
    case HR_OP_GELU:
        if (c->approx) return 0.5 * x * (1 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
        return 0.5 * x * erfc(-x / sqrt(2.0)); /* x * Phi(x), without 1 + erf's cancellation */
    case HR_OP_SILU: return x / (1 + exp(-x));
    case HR_OP_SIGMOID: return 1 / (1 + exp(-x));
    case HR_OP_TANH: return tanh(x);
    default: abort();
    }
}

/* d f / d x by central differences of ref_act. For LeakyReLU h is small
 * enough that x +- h stays on x's side of the kink, and at x == 0 the
 * gradient is negative_slope, PyTorch's `x > 0 ? dy : dy * slope`. (Only
 * there: Sigmoid near 0 is 0.5 + x/4, whose differences with h ~ 1e-20
 * vanish in float64.) */
static double ref_act_grad(const act_case *c, double x) {
    bool leaky = c->fwd == HR_OP_LEAKY_RELU;
    if (leaky && x == 0) return c->alpha;
    double h = leaky && fabs(x) / 2 < 1e-5 ? fabs(x) / 2 : 1e-5;
    return (ref_act(c, x + h) - ref_act(c, x - h)) / (2 * h);
}

/* One activation on an (R, C) tensor: forward (and LeakyReLU's bit mask in
 * training, y alone in inference), the backward in the four ways of
 * check_backward, and the in-place forms that the ops' descriptors allow
 * (output 0 over input 0: `inplace`; over dy: `inplace_last`). extremes: x
 * from a list of large, tiny and zero values instead (no overflow to NaN). */
static void test_act(const act_case *c, int R, int C, bool extremes) {
    static const double ext[] = {0, -0.0, 1e-20, -1e-20, 1e-3, -1e-3, 2.5, -2.5, 10, -10, 20, -20, 40, -40, 90, -90};
    if (extremes) R = 1, C = (int)(sizeof ext / sizeof ext[0]);
    char op[96];
    snprintf(op, sizeof op, "%s%s", c->name, extremes ? " extremes" : "");
    const bool leaky = c->saves == ACT_SAVES_MASK;
    /* LeakyReLU: one float product, 1/2 ulp; the smooth ones: a few ulps of
     * libm's expf/erff/tanhf and of the formula (errors scale with max(1, |f|)) */
    const double tol = leaky ? 1e-7 : 2e-6;
    const int64_t n = (int64_t)R * C, nb = (n + 7) / 8;
    double *x = dalloc(n), *w = dalloc(n), *y = dalloc(n), *g = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        if (extremes)
            x[i] = (double)(float)ext[i];
        else if (leaky && i % 97 == 5)
            x[i] = i % 2 ? -0.0 : 0.0; /* exactly on the kink: PyTorch's convention */
        else
            do x[i] = frand(-6, 6);
            while (leaky && fabs(x[i]) < 0.05);
        w[i] = frand(-1, 1);
        y[i] = ref_act(c, x[i]);
        g[i] = w[i] * ref_act_grad(c, x[i]);
    }
    kt k;
    kt_init(&k);
    int tx = KT(&k, R, C), ty = KT(&k, R, C), tdy = KT(&k, R, C), tdx = KT(&k, R, C);
    int tm = leaky ? kt_tensor(&k, HR_U8, 1, (int64_t[]){nb}) : -1;
    kt_set(&k, tx, x), kt_set(&k, tdy, w);
    hr_node f = hr_node_make(c->fwd, -1);
    f.a.alpha = c->alpha, f.a.approx = c->approx, f.a.train = true;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    if (leaky) f.out[1] = tm, f.nout = 2;
    /* the mask's bits: bit i%8 of byte i/8 is x[i] > 0 (bits past n not read) */
#define ACT_MASK_BAD(bad)                                                                                              \
    do {                                                                                                               \
        const uint8_t *m_ = k.ptr[tm];                                                                                 \
        (bad) = 0;                                                                                                     \
        for (int64_t i_ = 0; i_ < n; i_++) (bad) += (((m_[i_ / 8] >> (i_ % 8)) & 1) != 0) != (x[i_] > 0);             \
    } while (0)
    kt_fillf(&k, ty, NAN);
    if (leaky) memset(k.ptr[tm], 0xA5, (size_t)nb);
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, n, tol);
    if (leaky) {
        int64_t bad;
        ACT_MASK_BAD(bad);
        CHECK(bad == 0, "%s: %lld of %lld mask bits are not x > 0", op, (long long)bad, (long long)n);
    }

    /* backward, from what the forward kept (its own y, its own mask) */
    hr_node b = hr_node_make(c->bwd, -1);
    b.a = f.a;
    b.in[0] = c->saves == ACT_SAVES_X ? tx : c->saves == ACT_SAVES_Y ? ty : tm;
    b.in[1] = tdy, b.nin = 2, b.out[0] = tdx, b.nout = 1;
    check_backward(&k, &b, (double *[]){g}, op, tol, false);

    /* in place, where the descriptors allow it (the forward with its mask) */
    if (leaky) memset(k.ptr[tm], 0xA5, (size_t)nb);
    if (check_inplace(&k, &f, y, op, tol) && leaky) {
        int64_t bad;
        ACT_MASK_BAD(bad);
        CHECK(bad == 0, "%s in place: %lld of %lld mask bits are not x > 0", op, (long long)bad, (long long)n);
    }
    check_inplace(&k, &b, g, op, tol);
    if (leaky) { /* inference: y alone, no mask */
        f.a.train = false, f.nout = 1, f.out[1] = -1;
        kt_fillf(&k, ty, NAN);
        kt_run(&k, &f);
        compare(op, "inference forward (no mask)", kf(&k, ty), y, n, tol);
    }
#undef ACT_MASK_BAD
    kt_free(&k);
    free(x), free(w), free(y), free(g);
}

/* ---- Dropout with non-finite values ------------------------------------------
 * PyTorch's dropout multiplies: y = x * mask * scale, dx = dy * mask * scale
 * (mask 0 or 1, scale 1/(1-p)), so a dropped NaN or +-inf gives NaN and a
 * dropped negative gives -0. The masks are headroom's documented draws
 * (the op keeps none: its backward draws them again); the reference is that product in float64 with IEEE semantics,
 * rounded once (exact: a float times a float fits in a double), compared bit
 * for bit (signed zeros included), NaN against NaN. */
static float drop_ref(float x, uint8_t m, float scale) { return (float)((double)x * (double)m * (double)scale); }

/* Values of got that are not ref (both NaN is a match); the first in *at. */
static int64_t drop_bad(const float *got, const float *ref, int64_t n, int64_t *at) {
    int64_t bad = 0;
    *at = -1;
    for (int64_t i = 0; i < n; i++) {
        bool ok = isnan(ref[i]) ? isnan(got[i])
                                : !isnan(got[i]) && got[i] == ref[i] && !signbit(got[i]) == !signbit(ref[i]);
        if (ok) continue;
        if (*at < 0) *at = i;
        bad++;
    }
    return bad;
}

static void test_dropout_nonfinite(float p) {
    static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, -2.0f, 2.0f, 0.0f, -0.0f, 3e38f, -3e38f, 1e-40f,
                               -1e-40f, 1.5f, -0.25f, 65504.0f, -1e10f, FLT_MAX};
    const int ns = (int)(sizeof sp / sizeof sp[0]), reps = 40;
    const int64_t n = (int64_t)ns * reps;
    const float scale = 1.0f / (1.0f - p); /* the op's scale, as PyTorch's 1/(1-p) */
    char op[64];
    snprintf(op, sizeof op, "Dropout(p=%g) non-finite", p);
    kt k;
    kt_init(&k);
    int tx = KT(&k, reps, ns), ty = KT(&k, reps, ns), tdy = KT(&k, reps, ns), tdx = KT(&k, reps, ns);
    float *x = kf(&k, tx), *dy = kf(&k, tdy), *ref = malloc(sizeof(float) * (size_t)n);
    uint8_t *m = malloc((size_t)n);
    /* dy's specials sit 7 places on from x's, so that each meets every mask */
    for (int64_t i = 0; i < n; i++) x[i] = sp[i % ns], dy[i] = sp[(i + 7) % ns];
    hr_step_info si = kt_si();
    si.t = 3;
    hr_node f = hr_node_make(HR_OP_DROPOUT, -1);
    f.a.p = p, f.a.train = true, f.a.seed = 5;
    f.in[0] = tx, f.nin = 1, f.out[0] = ty, f.nout = 1;
    kt_fillf(&k, ty, 42.0f);
    kt_run_si(&k, &f, &si);

    /* the decisions as documented (op_list.h): layer 5's stream at step 3 is
     * 5 << 32 ^ 4; every special both kept and dropped, or the test proves nothing */
    int64_t kept[sizeof sp / sizeof sp[0]] = {0};
    for (int64_t i = 0; i < n; i++) {
        m[i] = hr_rng_uniform(si.seed, (5ULL << 32) ^ 4, (uint64_t)i) >= p;
        kept[i % ns] += m[i];
    }
    for (int j = 0; j < ns; j++)
        CHECK(kept[j] > 0 && kept[j] < reps, "%s: x = %g kept %lld times of %d (want some kept, some dropped)", op,
              (double)sp[j], (long long)kept[j], reps);

    int64_t at, bad;
    for (int64_t i = 0; i < n; i++) ref[i] = drop_ref(x[i], m[i], scale);
    bad = drop_bad(kf(&k, ty), ref, n, &at);
    CHECK(bad == 0, "%s forward: %lld of %lld values are not x * mask * scale, the first at %lld: x = %g, mask %d, "
                    "got %g, want %g", op, (long long)bad, (long long)n, (long long)at, at < 0 ? 0.0 : (double)x[at],
          at < 0 ? 0 : m[at], at < 0 ? 0.0 : (double)kf(&k, ty)[at], at < 0 ? 0.0 : (double)ref[at]);

    /* backward: overwrite, then accumulate into 0.5 (dx + dy * mask * scale) */
    hr_node b = hr_node_make(HR_OP_DROPOUT_BWD, -1);
    b.a = f.a;
    b.in[0] = tdy, b.nin = 1, b.out[0] = tdx, b.nout = 1;
    for (int acc = 0; acc < 2; acc++) {
        kt_fillf(&k, tdx, acc ? 0.5f : 42.0f);
        b.accum[0] = acc;
        kt_run_si(&k, &b, &si);
        for (int64_t i = 0; i < n; i++) {
            float v = drop_ref(dy[i], m[i], scale);
            ref[i] = acc ? (float)(0.5 + (double)v) : v;
        }
        bad = drop_bad(kf(&k, tdx), ref, n, &at);
        CHECK(bad == 0, "%s backward (%s): %lld of %lld values are not %sdy * mask * scale, the first at %lld: "
                        "dy = %g, mask %d, got %g, want %g",
              op, acc ? "accumulate" : "overwrite", (long long)bad, (long long)n, acc ? "0.5 + " : "", (long long)at,
              at < 0 ? 0.0 : (double)dy[at], at < 0 ? 0 : m[at], at < 0 ? 0.0 : (double)kf(&k, tdx)[at],
              at < 0 ? 0.0 : (double)ref[at]);
    }

    /* in place (y over x), as the planner allows: the same mask, the same bits */
    for (int64_t i = 0; i < n; i++) ref[i] = drop_ref(x[i], m[i], scale);
    void *save = k.ptr[ty];
    k.ptr[ty] = k.ptr[tx];
    kt_run_si(&k, &f, &si);
    bad = drop_bad(kf(&k, tx), ref, n, &at);
    CHECK(bad == 0, "%s forward in place: %lld of %lld values are not x * mask * scale, the first at %lld", op,
          (long long)bad, (long long)n, (long long)at);
    k.ptr[ty] = save;
    kt_free(&k);
    free(ref), free(m);
}

void test_activations(void) {
    static const act_case acts[] = {
        {"LeakyReLU(0.01)", HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, ACT_SAVES_MASK, 0.01f, false},
        {"LeakyReLU(0.2)", HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, ACT_SAVES_MASK, 0.2f, false},
        {"GELU", HR_OP_GELU, HR_OP_GELU_BWD, ACT_SAVES_X, 0, false},
        {"GELU(approximate='tanh')", HR_OP_GELU, HR_OP_GELU_BWD, ACT_SAVES_X, 0, true},
        {"SiLU", HR_OP_SILU, HR_OP_SILU_BWD, ACT_SAVES_X, 0, false},
        {"Sigmoid", HR_OP_SIGMOID, HR_OP_SIGMOID_BWD, ACT_SAVES_Y, 0, false},
        {"Tanh", HR_OP_TANH, HR_OP_TANH_BWD, ACT_SAVES_Y, 0, false},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        test_act(&acts[i], 7, 15, false);    /* 105 values: the mask's last byte partly used */
        test_act(&acts[i], 263, 257, false); /* 67591 values: past the kernels' one-thread sizes */
        test_act(&acts[i], 0, 0, true);      /* 0, -0, tiny, +-90 */
    }
    test_dropout_nonfinite(0.5f);  /* scale 2 */
    test_dropout_nonfinite(0.25f); /* scale 1.3333334f: kept values rounded */
}

OPS_TALLY(ops_tally_activations)
