/* test_fold.c — mixed precision folds a LayerNorm's cast into the norm: under
 * bf16 and fp16 a LayerNorm whose F32 output only its half copy reads (the
 * norm before a product) writes the half tensor itself, and its backward
 * reads the half gradient; a LayerNorm backward whose dx (the residual
 * stream's gradient) is then cast to half for a product writes that copy too. The copy's values are the F32 result rounded
 * once, as the Cast rounded it, so the folded program must give the unfolded
 * one's (HR_FOLD_CASTS=0) losses, gradients and outputs bit for bit, in
 * training (three steps, with accumulation) and in inference. A norm whose
 * output an F32 op also reads keeps its cast. And the batch's input, whose
 * only reader is its cast to half on the seed models, is held and sent in
 * the half type with the same bits (half_input). Both programs keep the
 * Linears' bias gradients apart (HR_FUSE_BIAS=0). Built for the CPU here and, by
 * tests/gpu/test_cuda_fold.c, for CUDA. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "same_states.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef FOLD_DEVICE
#define FOLD_DEVICE HR_DEVICE_CPU
#endif

/* 128 and 384 wide: the GPU's register form of a row (128 n floats) and its
 * other form (96) */
enum { B = 4, T = 16, V = 97 };

/* two blocks of x + Linear(GELU(Linear(LN(x)))); the second LN's output is
 * also added to the stream (an F32 reader: not folded) */
static hr_model_t *lm(int W) {
    hr_model_t *m = hr_model_new("fold");
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    int h = hr_layernorm(m, "ln_1", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc", h, W, 2 * W, true);
    h = hr_gelu(m, NULL, h, true);
    h = hr_linear(m, "proj", h, 2 * W, W, true);
    e = hr_add(m, NULL, e, h);
    int n2 = hr_layernorm(m, "ln_2", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc2", n2, W, W, true);
    e = hr_add(m, NULL, n2, h);
    h = hr_layernorm(m, "ln_f", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "lm_head", h, W, V, false);
    hr_loss_cross_entropy(m, h, V);
    return m;
}

static hr_session_t *compile(hr_model_t *m, hr_precision p, hr_mode mode, int acc, bool fold) {
    hr_config_t c = hr_config_default();
    c.device = FOLD_DEVICE;
    c.batch = B, c.precision = p, c.accumulate = acc, c.mode = mode, c.keep_grads = true;
    c.seed = 5, c.eval_batch = 0, c.optim.kind = HR_OPTIM_ADAMW, c.optim.lr = 1e-2f;
    if (fold) unsetenv("HR_FOLD_CASTS");
    else setenv("HR_FOLD_CASTS", "0", 1);
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_FOLD_CASTS");
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

static int count_op(const hr_session_t *s, hr_op op) {
    const hr_graph *g = &hr_session_program(s)->g;
    int k = 0;
    for (int i = 0; i < g->nn; i++) k += g->n[i].op == op;
    return k;
}

/* forward LayerNorms writing a half tensor */
static int half_norms(const hr_session_t *s) {
    const hr_graph *g = &hr_session_program(s)->g;
    int k = 0;
    for (int i = 0; i < g->nn; i++)
        k += g->n[i].op == HR_OP_LAYERNORM && g->t[g->n[i].out[0]].dtype != HR_F32;
    return k;
}

/* backward LayerNorms writing their dx's half copy too (the gradient's cast folded in) */
static int half_dx_norms(const hr_session_t *s) {
    const hr_graph *g = &hr_session_program(s)->g;
    int k = 0;
    for (int i = 0; i < g->nn; i++) k += g->n[i].op == HR_OP_LAYERNORM_BWD && g->n[i].nout > 3 && g->n[i].out[3] >= 0;
    return k;
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 31 + step * 17) % V);
        lab[i] = (int32_t)((i * 7 + step * 3 + 1) % V);
    }
}

static void train(int W, hr_precision p, int acc) {
    const char *pn = hr_precision_name(p);
    hr_model_t *m = lm(W);
    hr_session_t *f = compile(m, p, HR_MODE_TRAIN, acc, true), *u = compile(m, p, HR_MODE_TRAIN, acc, false);
    hr_model_free(m);
    if (!f || !u) goto done;
    /* ln_1 and ln_f fold; ln_2's output is also added in F32. Backward, the
       two residual streams' gradients go to the half products (proj, fc2)
       through casts that ln_2's and ln_f's backward nodes write instead */
    CHECK(half_norms(f) == 2 && half_norms(u) == 0 && half_dx_norms(f) == 2 && half_dx_norms(u) == 0 &&
              count_op(u, HR_OP_CAST) - count_op(f, HR_OP_CAST) == 6,
          "%s W=%d: two norms write half (%d), two norm backwards a half dx too (%d), six casts fewer: two a pass and "
          "the two gradients' (%d against %d)", pn, W, half_norms(f), half_dx_norms(f), count_op(f, HR_OP_CAST),
          count_op(u, HR_OP_CAST));
    float x[B * T];
    int32_t lab[B * T];
    for (int step = 0; step < 3; step++) {
        float lf = -1, lu = -2;
        batch(step, x, lab);
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", pn,
              hr_last_error());
        CHECK(!memcmp(&lf, &lu, sizeof lf), "%s W=%d K=%d step %d: loss %.9g folded, %.9g not", pn, W, acc, step, lf,
              lu);
    }
    char what[64]; /* the last step's gradients and every state after three updates */
    snprintf(what, sizeof what, "%s W=%d K=%d", pn, W, acc);
    same_states(f, u, what, "folded");
done:
    hr_session_free(f);
    hr_session_free(u);
}

static void infer(int W, hr_precision p) {
    const char *pn = hr_precision_name(p);
    hr_model_t *m = lm(W);
    hr_session_t *f = compile(m, p, HR_MODE_INFER, 1, true), *u = compile(m, p, HR_MODE_INFER, 1, false), *s32 = NULL;
    hr_model_free(m);
    if (!f || !u) goto done;
    CHECK(half_norms(f) == 2, "%s W=%d inference: two norms write half (%d)", pn, W, half_norms(f));
    float x[B * T];
    int32_t lab[B * T];
    batch(0, x, lab);
    float *yf = malloc(sizeof(float) * B * T * V), *yu = malloc(sizeof(float) * B * T * V),
          *y32 = malloc(sizeof(float) * B * T * V), *again = malloc(sizeof(float) * B * T * V);
    CHECK(yf && yu && y32 && again && hr_forward(f, x, yf) == HR_OK && hr_forward(u, x, yu) == HR_OK &&
              !memcmp(yf, yu, sizeof(float) * B * T * V),
          "%s W=%d inference: the logits differ folded and not (%s)", pn, W, hr_last_error());
    /* and they are the fp32 model's, rounded: the residual Add reads its half
     * branch as it is (a CPU kernel that read those bytes as floats gave
     * logits off by their own size, different each run) */
    m = lm(W);
    s32 = compile(m, HR_PREC_FP32, HR_MODE_INFER, 1, true);
    hr_model_free(m);
    double d = 0, big = 1e-30;
    if (s32 && yf && y32 && again && hr_forward(s32, x, y32) == HR_OK && hr_forward(f, x, again) == HR_OK)
        for (int i = 0; i < B * T * V; i++) {
            d = fmax(d, fabs((double)yf[i] - y32[i]));
            big = fmax(big, fabs((double)y32[i]));
        }
    CHECK(d / big < 0.05 && again && !memcmp(yf, again, sizeof(float) * B * T * V),
          "%s W=%d inference: the logits are fp32's within %.3g of their largest (bound 0.05), the same on a rerun", pn,
          W, d / big);
    free(yf);
    free(yu);
    free(y32);
    free(again);
done:
    hr_session_free(f);
    hr_session_free(u);
    hr_session_free(s32);
}

/* The batch in the half type: a model whose input's only reader is
 * autocast's cast of it holds and sends the input rounded as that cast
 * rounded it (the cast folded into the input): the unfolded program's
 * losses, gradients, state and evaluation outputs bit for bit, with half
 * the input's bytes; with accumulation and with slices of the batch too. */
static void half_input(const char *file, hr_precision p, int acc, int chunks) {
    const char *pn = hr_precision_name(p);
    hr_model_t *m = hr_modelfile_load(file);
    CHECK(m, "%s: %s", file, hr_last_error());
    if (!m) return;
    hr_session_t *ss[2] = {NULL, NULL};
    /* on a GPU: cuDNN's first deterministic engine in both sessions (a timed
     * choice may differ between them, and with it the bits) */
    if (FOLD_DEVICE == HR_DEVICE_CUDA) setenv("HR_CUDNN_ALGO", "deterministic", 1);
    for (int k = 0; k < 2; k++) {
        hr_config_t c = hr_config_default();
        c.device = FOLD_DEVICE;
        c.batch = 8, c.precision = p, c.accumulate = acc, c.chunks = chunks, c.keep_grads = true;
        c.seed = 5, c.eval_batch = 8;
        if (k) setenv("HR_FOLD_CASTS", "0", 1);
        ss[k] = hr_compile(m, &c);
        unsetenv("HR_FOLD_CASTS");
        CHECK(ss[k] && hr_session_alloc(ss[k]) == HR_OK, "%s %s: %s", file, pn, hr_last_error());
    }
    unsetenv("HR_CUDNN_ALGO");
    hr_session_t *f = ss[0], *u = ss[1];
    int64_t n = 1, classes = hr_model_classes(m);
    int in = hr_model_input(m);
    for (int d = 0; d < hr_tensor_ndim(m, in); d++) n *= hr_tensor_dim(m, in, d);
    float *x = malloc(sizeof(float) * (size_t)(8 * n)), *of = malloc(sizeof(float) * (size_t)(8 * classes)),
          *ou = malloc(sizeof(float) * (size_t)(8 * classes));
    int32_t lab[8];
    if (!f || !u || !x || !of || !ou) goto done;
    const hr_program *pf = hr_session_program(f), *pu = hr_session_program(u);
    CHECK(pf->g.t[pf->input].dtype == (p == HR_PREC_BF16 ? HR_BF16 : HR_F16) && pu->g.t[pu->input].dtype == HR_F32 &&
              hr_session_report(f)->category_bytes[HR_CAT_INPUTS] < hr_session_report(u)->category_bytes[HR_CAT_INPUTS],
          "%s %s: the input is %s folded (%s not), inputs %zu bytes against %zu", file, pn,
          hr_dtype_name(pf->g.t[pf->input].dtype), hr_dtype_name(pu->g.t[pu->input].dtype),
          hr_session_report(f)->category_bytes[HR_CAT_INPUTS], hr_session_report(u)->category_bytes[HR_CAT_INPUTS]);
    for (int step = 0; step < 3; step++) {
        for (int64_t i = 0; i < 8 * n; i++) x[i] = (float)((i * 7919 + step * 104729) % 40009) / 10000.0f - 2.0f;
        for (int i = 0; i < 8; i++) lab[i] = (int32_t)((i * 3 + step) % classes);
        float lf = -1, lu = -2;
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", file,
              hr_last_error());
        CHECK(!memcmp(&lf, &lu, sizeof lf), "%s %s K=%d slices %d step %d: loss %.9g with the half input, %.9g without",
              file, pn, acc, chunks, step, lf, lu);
    }
    int bad = 0;
    for (int i = 0; i < hr_state_count(u); i++) {
        int64_t k = 1;
        for (int d = 0; d < hr_state_ndim(u, i); d++) k *= hr_state_dim(u, i, d);
        const char *nm = hr_state_name(u, i);
        float *a = malloc(sizeof(float) * (size_t)k), *b = malloc(sizeof(float) * (size_t)k);
        bool same = a && b && hr_state_read(f, hr_state_find(f, nm), a) == HR_OK && hr_state_read(u, i, b) == HR_OK &&
                    !memcmp(a, b, sizeof(float) * (size_t)k);
        if (same && hr_state_is_param(u, i))
            same = hr_grad_read(f, nm, a) == HR_OK && hr_grad_read(u, nm, b) == HR_OK &&
                   !memcmp(a, b, sizeof(float) * (size_t)k);
        bad += !same;
        free(a);
        free(b);
    }
    CHECK(!bad, "%s %s K=%d slices %d: %d state tensors (or gradients) differ with the half input", file, pn, acc, chunks,
          bad);
    CHECK(hr_eval_forward(f, x, of) == HR_OK && hr_eval_forward(u, x, ou) == HR_OK &&
              !memcmp(of, ou, sizeof(float) * (size_t)(8 * classes)),
          "%s %s: the evaluation pass's outputs differ with the half input (%s)", file, pn, hr_last_error());
done:
    free(x);
    free(of);
    free(ou);
    hr_session_free(f);
    hr_session_free(u);
    hr_model_free(m);
}

int main(void) {
    /* the bias gradients stay in their Linears (tests/test_fuse_bias.c takes
     * them into the norms: other sums on the GPU, so other bits) */
    setenv("HR_FUSE_BIAS", "0", 1);
    half_input("examples/mlp.model", HR_PREC_BF16, 1, 0);
    half_input("examples/mlp.model", HR_PREC_FP16, 2, 0);
    half_input("examples/simple_cnn.model", HR_PREC_BF16, 1, 2);
    half_input("examples/deep_cnn.model", HR_PREC_BF16, 2, 0);
    half_input("examples/deep_cnn.model", HR_PREC_FP16, 1, 2);
    for (int w = 0; w < 2; w++) {
        int W = w ? 96 : 128;
        train(W, HR_PREC_BF16, 1);
        train(W, HR_PREC_FP16, 1);
        train(W, HR_PREC_BF16, 2);
        infer(W, HR_PREC_BF16);
    }
    /* fp32: nothing to fold */
    hr_model_t *m = lm(128);
    hr_session_t *s = compile(m, HR_PREC_FP32, HR_MODE_TRAIN, 1, true);
    hr_model_free(m);
    if (s) CHECK(half_norms(s) == 0 && count_op(s, HR_OP_CAST) == 0, "fp32: no casts, no half norms");
    hr_session_free(s);
    TEST_END();
}
