/* test_linear_ce.c — a language model's head and loss as one node (CPU): the
 * training program fuses a bias-free Linear and the CrossEntropyLoss after it
 * into LinearCrossEntropy when nothing reads the logits after the step; the
 * plan then holds no logits, and the step gives the unfused pair's loss and
 * gradients (the same values, summed in other orders) in fp32, bf16 and fp16
 * (its loss scale), with accumulation, with the head tied to the embedding
 * (both add into one gradient) and with the logits made in two pieces. A
 * session that keeps its output, or a head with a bias, stays unfused. The
 * gradients are made in the forward pass; the backward's two Copy nodes
 * move nothing unless micro-batches add into dW. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 5000 classes: the CPU's 8 MiB piece holds 419 rows of the 8 x 64 */
enum { B = 8, T = 64, V = 5000, W = 16 };

static hr_model_t *lm_head(bool head_bias, bool tied) {
    hr_model_t *m = hr_model_new("lm");
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    int h = hr_layernorm(m, NULL, e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, NULL, h, W, W, true);
    h = hr_gelu(m, NULL, h, true);
    h = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln_f", h, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = tied ? hr_linear_tied(m, "lm_head", h, W, V, head_bias, "wte") : hr_linear(m, "lm_head", h, W, V, head_bias);
    hr_loss_cross_entropy(m, h, V);
    return m;
}

static hr_model_t *lm(bool head_bias) { return lm_head(head_bias, true); }

static hr_session_t *compile(hr_model_t *m, hr_precision p, int acc, bool keep_output) {
    hr_config_t c = hr_config_default();
    c.batch = B, c.precision = p, c.accumulate = acc, c.keep_output = keep_output, c.keep_grads = true;
    c.seed = 11, c.eval_batch = 0, c.optim.kind = HR_OPTIM_SGD, c.optim.lr = 0.5f;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

static int count_op(const hr_session_t *s, hr_op op) {
    const hr_graph *g = &hr_session_program(s)->g;
    int k = 0;
    for (int i = 0; i < g->nn; i++) k += g->n[i].op == op;
    return k;
}

/* The backward's Copy nodes that pass the saved gradients on, and how many
 * of them sit in their input's bytes (nothing moves). */
static void saved_copies(const hr_session_t *s, int *copies, int *views) {
    const hr_graph *g = &hr_session_program(s)->g;
    *copies = *views = 0;
    for (int i = 0; i < g->nn; i++) {
        const hr_node *n = &g->n[i];
        if (n->op != HR_OP_COPY || !strstr(g->t[n->in[0]].name, ".grad.saved")) continue;
        ++*copies;
        *views += g->t[n->in[0]].offset == g->t[n->out[0]].offset;
    }
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 37 + step * 101) % V);
        lab[i] = (int32_t)((i * 53 + step * 7 + 1) % V);
    }
}

/* the largest |a - b| over the largest |b| */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

static void compare(hr_precision p, int acc) {
    hr_model_t *m = lm(false);
    hr_session_t *f = compile(m, p, acc, false), *u = compile(m, p, acc, true);
    hr_model_free(m);
    if (!f || !u) goto done;
    const char *pn = hr_precision_name(p);
    CHECK(count_op(f, HR_OP_LINEAR_CE) == 1 && count_op(f, HR_OP_CROSS_ENTROPY) == 0 &&
              count_op(f, HR_OP_CROSS_ENTROPY_BWD) == 0,
          "%s K=%d: the head and the loss are one node", pn, acc);
    CHECK(count_op(u, HR_OP_LINEAR_CE) == 0 && count_op(u, HR_OP_CROSS_ENTROPY) == 1,
          "%s K=%d: keep_output keeps the logits, unfused", pn, acc);
    int copies, views;
    saved_copies(f, &copies, &views);
    CHECK(copies == 2 && views == 1, "%s K=%d: %d copies of the saved gradients, %d in place (dx's alone: the "
          "gradients are kept for the test)", pn, acc, copies, views);
    size_t af = hr_session_report(f)->arena_bytes, au = hr_session_report(u)->arena_bytes;
    size_t logits = (size_t)B / (size_t)acc * T * V * (p == HR_PREC_FP32 ? 4 : 2);
    CHECK(af + logits / 2 < au, "%s K=%d: the fused plan holds no logits: %zu bytes against %zu (logits %zu)", pn, acc,
          af, au, logits);
    float x[B * T];
    int32_t lab[B * T];
    double lt = p == HR_PREC_FP32 ? 1e-6 : 1e-5, gt = p == HR_PREC_FP32 ? 1e-5 : 2e-2;
    for (int step = 0; step < 3; step++) {
        float lf = NAN, lu = NAN;
        batch(step, x, lab);
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", pn,
              hr_last_error());
        double tol = (step == 0 ? lt : gt) * fmax(1.0, fabs(lu));
        CHECK(isfinite(lf) && fabs(lf - lu) <= tol, "%s K=%d step %d: loss %.9g fused, %.9g unfused (bound %.2g)", pn,
              acc, step, lf, lu, tol);
        if (step > 0) continue;
        for (int i = 0; i < hr_state_count(u); i++) { /* the first step's gradients, from the same weights */
            if (!hr_state_is_param(u, i)) continue;
            const char *nm = hr_state_name(u, i);
            int64_t n = 1;
            for (int d = 0; d < hr_state_ndim(u, i); d++) n *= hr_state_dim(u, i, d);
            float *gf = malloc(sizeof(float) * (size_t)n), *gu = malloc(sizeof(float) * (size_t)n);
            if (gf && gu && hr_grad_read(f, nm, gf) == HR_OK && hr_grad_read(u, nm, gu) == HR_OK) {
                double r = rel_diff(gf, gu, n);
                CHECK(r <= gt, "%s K=%d: %s's gradient differs by %.3g of its largest value (bound %.2g)", pn, acc, nm,
                      r, gt);
            } else {
                CHECK(0, "%s: reading %s's gradient: %s", pn, nm, hr_last_error());
            }
            free(gf);
            free(gu);
        }
    }
done:
    hr_session_free(f);
    hr_session_free(u);
}

/* An untied head starts from the values the unfused Linear would give it,
 * under each scheme of initial values: the fused node is no reason for
 * different weights. */
static void initial_values(const char *scheme) {
    hr_model_t *m = lm_head(false, false);
    CHECK(hr_model_set_init(m, scheme) == HR_OK, "init %s: %s", scheme, hr_last_error());
    hr_session_t *f = compile(m, HR_PREC_FP32, 1, false), *u = compile(m, HR_PREC_FP32, 1, true);
    hr_model_free(m);
    if (!f || !u) goto done;
    CHECK(count_op(f, HR_OP_LINEAR_CE) == 1, "init %s: an untied head is fused too", scheme);
    float *a = malloc(sizeof(float) * V * W), *b = malloc(sizeof(float) * V * W);
    int same = 0, nonzero = 0;
    int kf = hr_state_find(f, "lm_head.weight"), ku = hr_state_find(u, "lm_head.weight");
    if (a && b && kf >= 0 && ku >= 0 && hr_state_read(f, kf, a) == HR_OK && hr_state_read(u, ku, b) == HR_OK) {
        same = !memcmp(a, b, sizeof(float) * V * W);
        for (int i = 0; i < V * W; i++) nonzero += a[i] != 0;
    }
    CHECK(same && nonzero > V * W / 2, "init %s: lm_head.weight fused and unfused: %s, %d of %d values not zero", scheme,
          same ? "the same bits" : "different", nonzero, V * W);
    free(a);
    free(b);
done:
    hr_session_free(f);
    hr_session_free(u);
}

int main(void) {
    initial_values("pytorch");
    initial_values("gpt2");
    compare(HR_PREC_FP32, 1);
    compare(HR_PREC_FP32, 2);
    compare(HR_PREC_BF16, 1);
    compare(HR_PREC_BF16, 2);
    compare(HR_PREC_FP16, 1);
    /* gradients not kept past the update: both copies are in place; with
     * micro-batches adding into dW, dW keeps bytes of its own */
    for (int acc = 1; acc <= 2; acc++) {
        hr_model_t *lm1 = lm(false);
        hr_config_t c = hr_config_default();
        c.batch = B, c.accumulate = acc, c.eval_batch = 0, c.optim.kind = HR_OPTIM_SGD;
        hr_session_t *q = hr_compile(lm1, &c);
        hr_model_free(lm1);
        CHECK(q && hr_session_alloc(q) == HR_OK, "compile: %s", hr_last_error());
        int copies = 0, views = 0;
        if (q) saved_copies(q, &copies, &views);
        CHECK(copies == 2 && views == (acc == 1 ? 2 : 1), "K=%d, gradients not kept: %d copies of the saved gradients, "
              "%d in place", acc, copies, views);
        hr_session_free(q);
    }
    /* a head with a bias stays a Linear and a loss */
    hr_model_t *m = lm(true);
    hr_session_t *s = compile(m, HR_PREC_FP32, 1, false);
    hr_model_free(m);
    if (s) CHECK(count_op(s, HR_OP_LINEAR_CE) == 0, "a head with a bias is not fused");
    hr_session_free(s);
    TEST_END();
}
