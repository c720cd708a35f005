/* activations.c — test_ops' activation family (LeakyReLU, GELU, SiLU, Sigmoid, Tanh): forward,
 * LeakyReLU's bit mask, backward from what the forward kept, in place, extremes. */
#include "harness.h"

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
}

OPS_TALLY(ops_tally_activations)
