/* test_eval.c — the evaluation pass that a training session plans in its own
 * arena (cfg.eval_batch): its outputs equal a separate inference session's
 * bit for bit, it leaves training untouched, the independent plan checker
 * passes with it, and it is refused where there is none. CPU. */
#include "plan_check.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

static float *batch_x(int64_t n, int64_t per, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)(n * per));
    prng_s = seed;
    for (int64_t i = 0; i < n * per; i++) x[i] = (float)((double)(prng() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    return x;
}

static int64_t per_sample(const hr_model_t *m) {
    int64_t per = 1;
    for (int d = 0; d < hr_tensor_ndim(m, hr_model_input(m)); d++) per *= hr_tensor_dim(m, hr_model_input(m), d);
    return per;
}

static int64_t outputs(const hr_model_t *m) {
    int64_t o = 1;
    for (int d = 0; d < hr_tensor_ndim(m, hr_model_output(m)); d++) o *= hr_tensor_dim(m, hr_model_output(m), d);
    return o;
}

/* Copies every parameter and buffer of `from` into `to`, by name. */
static void copy_state(hr_session_t *from, hr_session_t *to) {
    for (int i = 0; i < hr_state_count(to); i++) {
        int j = hr_state_find(from, hr_state_name(to, i));
        int64_t n = 1;
        for (int d = 0; d < hr_state_ndim(to, i); d++) n *= hr_state_dim(to, i, d);
        float *b = malloc(sizeof(float) * (size_t)(n ? n : 1));
        CHECK(j >= 0 && hr_state_read(from, j, b) == HR_OK && hr_state_write(to, i, b) == HR_OK, "copy %s: %s",
              hr_state_name(to, i), hr_last_error());
        free(b);
    }
}

static void check_model(const char *label, hr_model_t *m, int64_t B, int64_t E) {
    if (!m) {
        CHECK(false, "%s: %s", label, hr_last_error());
        return;
    }
    int64_t per = per_sample(m), C = hr_model_classes(m), O = outputs(m);
    hr_config_t c = hr_config_default();
    c.batch = B;
    c.seed = 5;
    hr_config_t ce = c;
    ce.eval_batch = E;
    hr_config_t ci = c;
    ci.mode = HR_MODE_INFER;
    ci.batch = E;
    hr_session_t *s = hr_compile(m, &ce), *plain = hr_compile(m, &c), *inf = hr_compile(m, &ci);
    CHECK(s && plain && inf, "%s: compile: %s", label, hr_last_error());
    if (!s || !plain || !inf) goto out;
    char why[512];
    check_out co;
    int bad = check_plan(s, why, sizeof why, &co);
    CHECK(bad == 0, "%s: the plan with an evaluation pass: %d problems, the first: %s", label, bad, why);
    size_t a_eval = hr_session_report(s)->arena_bytes, a_plain = hr_session_report(plain)->arena_bytes;
    CHECK(a_eval >= a_plain, "%s: arena with evaluation %zu < without %zu", label, a_eval, a_plain);
    printf("%-12s batch %lld, eval %lld: arena %zu without the pass, %zu with it\n", label, (long long)B,
           (long long)E, a_plain, a_eval);
    CHECK(hr_session_alloc(s) == HR_OK && hr_session_alloc(plain) == HR_OK && hr_session_alloc(inf) == HR_OK,
          "%s: alloc: %s", label, hr_last_error());
    if (!hr_session_allocated(s) || !hr_session_allocated(plain) || !hr_session_allocated(inf)) goto out;
    float *x = batch_x(B, per, 11), *xe = batch_x(E, per, 12);
    void *lab = malloc(sizeof(float) * (size_t)(B * O));
    for (int64_t i = 0; i < B * O; i++) {
        if (C > 0 && i < B) ((int32_t *)lab)[i] = (int32_t)(i % C);
        if (C == 0) ((float *)lab)[i] = (float)(i % 7) * 0.1f;
    }
    float *o1 = malloc(sizeof(float) * (size_t)(E * O)), *o2 = malloc(sizeof(float) * (size_t)(E * O));
    for (int step = 0; step < 3; step++) {
        float l1 = 0, l2 = 0;
        CHECK(hr_train_step(s, x, lab, &l1) == HR_OK && hr_train_step(plain, x, lab, &l2) == HR_OK, "%s step %d: %s",
              label, step, hr_last_error());
        CHECK(memcmp(&l1, &l2, sizeof l1) == 0, "%s step %d: loss %.9g with an evaluation pass, %.9g without", label, step,
              l1, l2);
        CHECK(hr_eval_forward(s, xe, o1) == HR_OK, "%s step %d: eval_forward: %s", label, step, hr_last_error());
        copy_state(s, inf);
        CHECK(hr_forward(inf, xe, o2) == HR_OK, "%s step %d: forward: %s", label, step, hr_last_error());
        CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(E * O)) == 0,
              "%s step %d: the evaluation pass differs from an inference session", label, step);
    }
    free(x);
    free(xe);
    free(lab);
    free(o1);
    free(o2);
out:
    hr_session_free(s);
    hr_session_free(plain);
    hr_session_free(inf);
    hr_model_free(m);
}

int main(void) {
    static const char *files[] = {"examples/mlp.model", "examples/simple_cnn.model", "examples/deep_cnn.model",
                                  "examples/resnet_tiny.model", "examples/fashion.model"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) check_model(files[i], hr_modelfile_load(files[i]), 16, 37);
    /* every mode-dependent op: statistics, masks, norms kept only in training */
    static const char *mixed = "input 1 12 12\n"
                               "Conv2d(1, 6, 3, padding=1)\nBatchNorm2d(6)\nReLU()\nMaxPool2d(2)\nDropout(0.3)\n"
                               "Flatten()\nLinear(216, 32)\nLayerNorm(32)\nGELU()\nDropout(0.2)\nLinear(32, 5)\n"
                               "loss CrossEntropyLoss\n";
    check_model("mixed", hr_modelfile_parse(mixed, "mixed.model"), 8, 3);
    check_model("mixed, eval 1", hr_modelfile_parse(mixed, "mixed.model"), 8, 1);
    check_model("regression", hr_modelfile_parse("input 6\nLinear(6, 4)\nTanh()\nLinear(4, 2)\nloss MSELoss\n", "r"),
                4, 9);

    /* refused where there is no pass, or a batch that cannot be one */
    hr_model_t *m = hr_modelfile_load("examples/mlp.model");
    hr_config_t c = hr_config_default();
    c.batch = 4;
    hr_session_t *s = hr_compile(m, &c);
    float x[784] = {0}, o[10];
    CHECK(s && hr_session_alloc(s) == HR_OK, "mlp: %s", hr_last_error());
    CHECK(hr_eval_forward(s, x, o) == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "eval_batch"),
          "no pass: %s", hr_last_error());
    hr_session_free(s);
    c.eval_batch = -2;
    CHECK(!hr_compile(m, &c) && hr_last_status() == HR_ERR_INVALID_ARG, "eval_batch -2 compiled");
    /* -1: the pass follows the batch */
    c.eval_batch = -1;
    s = hr_compile(m, &c);
    CHECK(s && hr_session_report(s)->eval_batch == 4, "eval_batch -1 at batch 4: %lld (%s)",
          s ? (long long)hr_session_report(s)->eval_batch : -1LL, hr_last_error());
    hr_session_free(s);
    c.eval_batch = (1LL << 40) + 1;
    CHECK(!hr_compile(m, &c) && hr_last_status() == HR_ERR_INVALID_ARG, "eval_batch 2^40+1 compiled");
    hr_model_free(m);
    TEST_END();
}
