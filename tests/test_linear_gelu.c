/* test_linear_gelu.c — a GELU(approximate='tanh') fused into the Linear
 * before it (ops/activation.c): forward one node {y, pre}, backward the GELU's
 * derivative in the epilogue of the Linear backward that makes its dy. The
 * fusion happens only where it may: a Linear whose output the tanh GELU
 * alone reads (not one an Add also reads, not before an exact GELU), and a
 * backward fusion only where a Linear backward alone makes the GELU's dy.
 * On the CPU the fused nodes run the same kernels in the same order, so the
 * fp32 program must give the unfused one's (HR_FUSE_ACT=0) losses,
 * gradients and states bit for bit, with accumulation and with every layer
 * recomputed. In bf16 and fp16 the fused node rounds once where the pair
 * rounded twice (as cuBLASLt's epilogue does): the gradients agree within a
 * bound and are no further from the fp32 program's than the unfused ones.
 * Built for the GPU by tests/gpu/test_cuda_linear_gelu.c, with bounds for
 * cuBLASLt's tanh beside the CPU's. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef LG_DEVICE
#define LG_DEVICE HR_DEVICE_CPU
#endif

enum { B = 4, T = 16, V = 61, W = 128 };

/* x = LN(wpe(wte)); fc1 -> GELU(tanh) -> fc2 -> GELU(tanh) -> + x (pair A
 * both ways, pair B forward only: its dy comes from the Add); fc3 -> GELU(tanh),
 * fc3's output also added (not fused); fc4 -> exact GELU -> fc5 (not fused). */
static hr_model_t *model(void) {
    hr_model_t *m = hr_model_new("linear_gelu");
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    int h = hr_layernorm(m, "ln", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc1", h, W, 2 * W, true);
    h = hr_gelu(m, "gelu1", h, true);
    h = hr_linear(m, "fc2", h, 2 * W, W, true);
    h = hr_gelu(m, "gelu2", h, true);
    e = hr_add(m, NULL, e, h);
    int c = hr_linear(m, "fc3", e, W, W, false);
    h = hr_gelu(m, "gelu3", c, true);
    e = hr_add(m, NULL, h, c);
    h = hr_linear(m, "fc4", e, W, W, true);
    h = hr_gelu(m, "gelu4", h, false);
    h = hr_linear(m, "fc5", h, W, W, true);
    h = hr_linear(m, "lm_head", h, W, V, false);
    hr_loss_cross_entropy(m, h, V);
    return m;
}

static hr_session_t *compile(hr_model_t *m, hr_precision p, hr_mode mode, int acc, bool fuse, const char *recompute) {
    hr_config_t c = hr_config_default();
    c.device = LG_DEVICE;
    c.batch = B, c.precision = p, c.accumulate = acc, c.mode = mode, c.keep_grads = true;
    c.seed = 7, c.eval_batch = 0, c.optim.kind = HR_OPTIM_ADAMW, c.optim.lr = 1e-2f;
    c.recompute = recompute;
    if (fuse) unsetenv("HR_FUSE_ACT");
    else setenv("HR_FUSE_ACT", "0", 1);
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_FUSE_ACT");
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

typedef struct {
    int gelu, gelu_bwd, fused, dfused, recomputed;
} counts;

static counts count(const hr_session_t *s) {
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    counts k = {0};
    for (int i = 0; i < g->nn; i++) {
        const hr_node *n = &g->n[i];
        k.gelu += n->op == HR_OP_GELU && !n->a.recompute;
        k.gelu_bwd += n->op == HR_OP_GELU_BWD;
        k.fused += n->op == HR_OP_LINEAR && n->a.act == HR_OP_GELU && n->a.approx && !n->a.recompute;
        k.dfused += n->op == HR_OP_LINEAR_BWD && n->a.dact == HR_OP_GELU && n->a.approx;
        k.recomputed += n->a.recompute;
    }
    return k;
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 29 + step * 13) % V);
        lab[i] = (int32_t)((i * 5 + step * 11 + 3) % V);
    }
}

/* max |a - b| / max(1e-3, max |b|): the two runs' difference against b's scale */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, mx = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN counts as the worst */
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
    }
    return d / mx;
}

/* The bound the fused run is held to against the unfused one. fp32 on the
 * CPU: none (the same kernels, in the same order). A half type: the fused
 * node rounds once where the pair rounded twice (the GELU of the unrounded
 * sums; its derivative times the unrounded product), on the CPU (its F32
 * copies of the half node) as in cuBLASLt's epilogue; on the GPU also
 * cuBLASLt's tanh beside CUDA's tanhf. */
static double bound(hr_precision p) {
    if (p == HR_PREC_FP32) return LG_DEVICE == HR_DEVICE_CPU ? 0 : 1e-4;
    return 2e-2;
}

static void train(hr_precision p, int acc, const char *recompute) {
    const char *pn = hr_precision_name(p);
    const char *rn = recompute ? recompute : "none";
    hr_model_t *m = model();
    hr_session_t *f = compile(m, p, HR_MODE_TRAIN, acc, true, recompute),
                 *u = compile(m, p, HR_MODE_TRAIN, acc, false, recompute),
                 *r = p != HR_PREC_FP32 ? compile(m, HR_PREC_FP32, HR_MODE_TRAIN, acc, false, recompute) : NULL;
    hr_model_free(m);
    if (!f || !u || (p != HR_PREC_FP32 && !r)) goto done;
    counts cf = count(f), cu = count(u);
    /* fc1 and fc2 take their GELUs (gelu1 stays when the user recomputes it alone, as llm.c's -r 1);
       fc2's backward takes gelu1's; gelu2's backward stays (the Add's dy) */
    int alone = recompute && strstr(recompute, "gelu1") != NULL;
    CHECK(cf.fused == 2 - alone && cf.dfused == 1 && cf.gelu == 2 + alone && cf.gelu_bwd == 3,
          "%s K=%d recompute %s: %d Linears with their GELU (%d), 1 backward with its GELU's (%d), %d GELUs (%d) and 3 "
          "GELU backwards (%d) left", pn, acc, rn, 2 - alone, cf.fused, cf.dfused, 2 + alone, cf.gelu, cf.gelu_bwd);
    CHECK(cu.fused == 0 && cu.dfused == 0 && cu.gelu == 4 && cu.gelu_bwd == 4,
          "%s HR_FUSE_ACT=0: nothing fused (%d, %d; GELUs %d, backwards %d)", pn, cu.fused, cu.dfused, cu.gelu,
          cu.gelu_bwd);
    if (recompute) CHECK(cf.recomputed > 0 && cu.recomputed > 0, "%s recompute %s: clones made (%d, %d)", pn, rn,
                         cf.recomputed, cu.recomputed);
    float x[B * T];
    int32_t lab[B * T];
    double tol = bound(p);
    int steps = tol > 0 ? 1 : 3; /* one step where they may differ: updates amplify rounding apart */
    for (int step = 0; step < steps; step++) {
        float lf = -1, lu = -2;
        batch(step, x, lab);
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK &&
                  (!r || hr_train_step(r, x, lab, NULL) == HR_OK),
              "%s step: %s", pn, hr_last_error());
        double d = fabs((double)lf - lu) / fmax(1.0, fabs(lu));
        CHECK(tol > 0 ? d <= tol : !memcmp(&lf, &lu, sizeof lf),
              "%s K=%d recompute %s step %d: loss %.9g fused, %.9g not", pn, acc, rn, step, lf, lu);
    }
    double worst = 0;
    for (int i = 0; i < hr_state_count(u); i++) { /* the gradients, and the states after the updates */
        int64_t n = 1;
        for (int d = 0; d < hr_state_ndim(u, i); d++) n *= hr_state_dim(u, i, d);
        const char *nm = hr_state_name(u, i);
        int j = hr_state_find(f, nm);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        bool read = a && b && j >= 0 && hr_state_read(f, j, a) == HR_OK && hr_state_read(u, i, b) == HR_OK;
        /* where they may differ, not the weights: Adam's first step moves each by about lr times
           its gradient's sign, which rounding flips where a gradient is near 0 */
        double d = !read ? INFINITY : tol > 0 && hr_state_is_param(u, i) ? 0 : rel_diff(a, b, n);
        if (read && hr_state_is_param(u, i)) {
            read = hr_grad_read(f, nm, a) == HR_OK && hr_grad_read(u, nm, b) == HR_OK;
            double dg = read ? rel_diff(a, b, n) : INFINITY;
            d = dg > d ? dg : d;
            float *c = r ? malloc(sizeof(float) * (size_t)n) : NULL;
            if (c && read && hr_grad_read(r, nm, c) == HR_OK) { /* one rounding fewer: no further from fp32's */
                double ef = rel_diff(a, c, n), eu = rel_diff(b, c, n);
                CHECK(ef <= 1.25 * eu + 1e-3, "%s K=%d recompute %s: %s's gradient %.3g of its scale from fp32's "
                      "fused, %.3g unfused", pn, acc, rn, nm, ef, eu);
            }
            free(c);
        }
        CHECK(read && (tol > 0 ? d <= tol : d == 0), "%s K=%d recompute %s: %s (or its gradient) differs fused and "
              "not: %.3g of its scale (bound %.3g)", pn, acc, rn, nm, d, tol);
        worst = d > worst ? d : worst;
        free(a);
        free(b);
    }
    if (tol > 0) printf("  %s K=%d recompute %s: fused within %.3g of unfused (bound %.3g)\n", pn, acc, rn, worst, tol);
done:
    hr_session_free(f);
    hr_session_free(u);
    hr_session_free(r);
}

/* Inference keeps no pre-activation: nothing is fused there. */
static void infer(void) {
    hr_model_t *m = model();
    hr_session_t *s = compile(m, HR_PREC_FP32, HR_MODE_INFER, 1, true, NULL);
    hr_model_free(m);
    if (!s) return;
    counts k = count(s);
    CHECK(k.fused == 0 && k.gelu == 4, "inference: nothing fused (%d Linears with their GELU, %d GELUs)", k.fused,
          k.gelu);
    hr_session_free(s);
}

int main(void) {
    hr_precision ps[] = {HR_PREC_FP32, HR_PREC_BF16, HR_PREC_FP16};
    for (int i = 0; i < 3; i++) {
        train(ps[i], 1, NULL);
        train(ps[i], 2, NULL);
        train(ps[i], 1, "all");
    }
    train(HR_PREC_FP32, 1, "gelu1");
    train(HR_PREC_BF16, 1, "gelu1,fc2");
    infer();
    TEST_END();
}
