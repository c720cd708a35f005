/* test_hold_copies.c — the weights' half copies held from step to step
 * (plan/autocast.c: hr_autocast_hold): under mixed precision each update
 * writes its weight's half copy from the new value, rounded as a Cast rounds
 * it, and the forward casts no weight; the session makes the copies itself
 * after the host writes parameters (initialisation, hr_state_write). The
 * program must give the one that casts in every forward (HR_HOLD_COPIES=0)
 * bit for bit: every loss, evaluation output, gradient and state, in bf16
 * and fp16 (a step GradScaler skips leaves the copies as they are), with
 * accumulation, with SGD and momentum, with a parameter rewritten from the
 * host between steps, and with the evaluation pass reading the held copies
 * before the first step. A frozen weight keeps its Cast; fp32 holds none.
 * Built for the GPU by tests/gpu/test_cuda_hold_copies.c. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "same_states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef HC_DEVICE
#define HC_DEVICE HR_DEVICE_CPU
#endif

enum { B = 4, T = 16, V = 53, W = 64, EB = 2 };

/* tokens -> wte + wpe -> (norm, Linear, GELU, Linear) + residual -> norm ->
 * head; fc2 frozen in the `frozen` variant */
static hr_model_t *model(bool frozen) {
    hr_model_t *m = hr_model_new("hold");
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    int h = hr_layernorm(m, "ln1", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc1", h, W, 2 * W, true);
    h = hr_gelu(m, NULL, h, false);
    h = hr_linear(m, "fc2", h, 2 * W, W, true);
    e = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln_f", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "lm_head", h, W, V, false);
    hr_loss_cross_entropy(m, h, V);
    if (frozen) CHECK(hr_model_freeze(m, "fc2.weight") == HR_OK, "freeze: %s", hr_last_error());
    return m;
}

typedef struct {
    hr_precision prec;
    hr_optim_kind opt;
    int acc;
    bool frozen;
} variant;

static hr_session_t *compile(hr_model_t *m, variant v, bool hold) {
    hr_config_t c = hr_config_default();
    c.device = HC_DEVICE;
    c.batch = B, c.precision = v.prec, c.accumulate = v.acc, c.keep_grads = true;
    c.seed = 5, c.eval_batch = EB, c.optim.kind = v.opt, c.optim.lr = 1e-2f;
    if (v.opt == HR_OPTIM_SGD) c.optim.momentum = 0.9f;
    if (hold) unsetenv("HR_HOLD_COPIES");
    else setenv("HR_HOLD_COPIES", "0", 1);
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_HOLD_COPIES");
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

/* held copies; Casts of a parameter in the step and in the evaluation pass;
 * evaluation copies of their own */
static void count(const hr_session_t *s, int *held, int *casts, int *eval_copies) {
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    *held = *casts = *eval_copies = 0;
    for (int i = 0; i < g->nt; i++) {
        *held += g->t[i].held;
        *eval_copies += g->t[i].kind == HR_T_WCOPY && !strncmp(g->t[i].name, "eval.", 5);
    }
    for (int k = 0; k < g->nn; k++)
        *casts += g->n[k].op == HR_OP_CAST && g->t[g->n[k].in[0]].kind == HR_T_PARAM;
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 29 + step * 13) % V);
        lab[i] = (int32_t)((i * 11 + step * 7 + 3) % V);
    }
}

/* both sessions' evaluation outputs on the same tokens: the same bits */
static void same_eval(hr_session_t *h, hr_session_t *u, const char *what, const char *when) {
    float x[EB * T], a[EB * T * V], b[EB * T * V];
    for (int i = 0; i < EB * T; i++) x[i] = (float)((i * 17 + 5) % V);
    bool ok = hr_eval_forward(h, x, a) == HR_OK && hr_eval_forward(u, x, b) == HR_OK;
    CHECK(ok, "%s: evaluation %s: %s", what, when, hr_last_error());
    CHECK(ok && !memcmp(a, b, sizeof a), "%s: evaluation %s differs held and not (%.9g, %.9g)", what, when, a[0], b[0]);
}

/* A parameter rewritten from the host in both sessions: the held copy must
 * follow it before the next pass. */
static void rewrite(hr_session_t *h, hr_session_t *u, const char *name, const char *what) {
    int ih = hr_state_find(h, name), iu = hr_state_find(u, name);
    CHECK(ih >= 0 && iu >= 0, "%s: no state %s", what, name);
    if (ih < 0 || iu < 0) return;
    int64_t n = 1;
    for (int d = 0; d < hr_state_ndim(h, ih); d++) n *= hr_state_dim(h, ih, d);
    float *w = malloc(sizeof(float) * (size_t)n);
    CHECK(w && hr_state_read(h, ih, w) == HR_OK, "%s: read %s", what, name);
    for (int64_t i = 0; w && i < n; i++) w[i] = -0.5f * w[i] + 0.01f * (float)(i % 7);
    CHECK(w && hr_state_write(h, ih, w) == HR_OK && hr_state_write(u, iu, w) == HR_OK, "%s: write %s: %s", what, name,
          hr_last_error());
    free(w);
}

static void train(variant v) {
    char what[96];
    snprintf(what, sizeof what, "%s %s K=%d%s", hr_precision_name(v.prec), v.opt == HR_OPTIM_SGD ? "SGD" : "AdamW",
             v.acc, v.frozen ? " fc2 frozen" : "");
    hr_model_t *m = model(v.frozen);
    hr_session_t *h = compile(m, v, true), *u = compile(m, v, false);
    hr_model_free(m);
    if (!h || !u) goto done;
    int hh, hc, he, uh, uc, ue;
    count(h, &hh, &hc, &he);
    count(u, &uh, &uc, &ue);
    /* the weights a product reads (fc1, fc2, lm_head) and the biases its
     * epilogue adds (fc1's, fc2's) */
    int products = v.prec == HR_PREC_FP32 ? 0 : 5, frozen = v.frozen && products ? 1 : 0;
    CHECK(hh == products - frozen && hc == 2 * frozen && he == frozen, "%s: %d held copies (%d), %d weight Casts left "
          "(%d: a frozen weight's, step and evaluation), %d evaluation copies (%d)", what, products - frozen, hh,
          2 * frozen, hc, frozen, he);
    CHECK(uh == 0 && uc == 2 * products && ue == products, "%s unheld: 0 held (%d), %d Casts (%d), %d evaluation "
          "copies (%d)", what, uh, 2 * products, uc, products, ue);
    same_eval(h, u, what, "before the first step"); /* the copies made at initialisation */
    float x[B * T];
    int32_t lab[B * T];
    for (int step = 0; step < 4; step++) {
        if (step == 2) rewrite(h, u, "fc1.weight", what);
        if (v.prec == HR_PREC_FP16) { /* step 1 overflows and is skipped; the rest at a scale that holds */
            float sc = step == 1 ? 3e38f : 1024.0f;
            int64_t sk = 0;
            CHECK(hr_loss_scale(h, NULL, NULL, &sk) == HR_OK && hr_set_loss_scale(h, sc, 0, sk) == HR_OK &&
                  hr_set_loss_scale(u, sc, 0, sk) == HR_OK, "%s: set_loss_scale: %s", what, hr_last_error());
        }
        float lh = -1, lu = -2;
        batch(step, x, lab);
        CHECK(hr_train_step(h, x, lab, &lh) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", what,
              hr_last_error());
        CHECK(!memcmp(&lh, &lu, sizeof lh), "%s step %d: loss %.9g held, %.9g not", what, step, lh, lu);
    }
    same_eval(h, u, what, "after four steps");
    int64_t sh = -1, su = -2;
    int64_t want = v.prec == HR_PREC_FP16 ? 1 : 0;
    CHECK(hr_loss_scale(h, NULL, NULL, &sh) == HR_OK && hr_loss_scale(u, NULL, NULL, &su) == HR_OK && sh == want &&
          su == want, "%s: %lld steps skipped held, %lld not (%lld)", what, (long long)sh, (long long)su, (long long)want);
    int same = same_states(h, u, what, "held");
    CHECK(same == hr_state_count(u) && same > 0, "%s: %d of %d states compared equal", what, same, hr_state_count(u));
done:
    hr_session_free(h);
    hr_session_free(u);
}

int main(void) {
    variant vs[] = {
        {HR_PREC_BF16, HR_OPTIM_ADAMW, 1, false}, {HR_PREC_FP16, HR_OPTIM_ADAMW, 1, false},
        {HR_PREC_BF16, HR_OPTIM_ADAMW, 2, false}, {HR_PREC_FP16, HR_OPTIM_SGD, 2, false},
        {HR_PREC_BF16, HR_OPTIM_SGD, 1, true},    {HR_PREC_FP32, HR_OPTIM_ADAMW, 1, false},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) train(vs[i]);
    TEST_END();
}
