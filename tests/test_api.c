/* test_api.c — the public API as a user meets it: misuse (NULLs, wrong
 * order, wrong mode, labels out of range, broken models, bad settings) must
 * give a status and a message, never a crash; a tiny problem must be
 * learned; equal seeds must give bit-identical training; named state must
 * round-trip and resume a run exactly. Calls that might crash run in a child
 * process, so that a crash is one failure, not the end of the test. */
#include "check.h"
#include "isolated.h"
#include "headroom.h"
#include "io/io.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


static bool has(const char *needle) { return strstr(hr_last_error(), needle) != NULL; }
static bool message(void) { return strcmp(hr_last_error(), "no error") != 0 && strlen(hr_last_error()) > 10; }

/* ---- models ----------------------------------------------------------------- */
static hr_model_t *tiny_cnn(float dropout) {
    hr_model_t *m = hr_model_new("tiny");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 6, 6});
    x = hr_conv2d(m, NULL, x, 2, 4, 3, 1, 1, true); /* 0 */
    x = hr_batchnorm(m, NULL, x, 4, 1e-5f, 0.1f);   /* 1 */
    x = hr_relu(m, NULL, x);                        /* 2 */
    x = hr_maxpool2d(m, NULL, x, 2, 2);             /* 3 */
    x = hr_flatten(m, NULL, x);                     /* 4 */
    x = hr_dropout(m, NULL, x, dropout);            /* 5 */
    x = hr_linear(m, NULL, x, 36, 10, true);        /* 6 */
    hr_loss_cross_entropy(m, x, 10);
    return m;
}
#define TB 4
#define TIN 72

static void tiny_batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < TB * TIN; i++) x[i] = (float)(((i + 7 * step) * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < TB; i++) lab[i] = (i * 3 + step) % 10;
}

static hr_session_t *ready(hr_model_t *m, hr_config_t c) {
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s != NULL, "compile: %s", hr_last_error());
    if (s) CHECK(hr_session_alloc(s) == HR_OK, "alloc: %s", hr_last_error());
    return s;
}

/* ---- NULLs and wrong order ---------------------------------------------------- */
static void null_compile(void *a) {
    (void)a;
    hr_config_t c = hr_config_default();
    hr_error_clear();
    CHECK(hr_compile(NULL, &c) == NULL, "compile(NULL model) gave a session");
    CHECK(message() && has("NULL"), "compile(NULL model): '%s'", hr_last_error());
}
static void null_cfg(void *a) {
    (void)a;
    hr_model_t *m = tiny_cnn(0);
    hr_error_clear();
    CHECK(hr_compile(m, NULL) == NULL, "compile(m, NULL) gave a session");
    CHECK(message(), "compile(m, NULL): no message");
    hr_model_free(m);
}
static void null_freeze(void *a) {
    (void)a;
    CHECK(hr_model_freeze(NULL, "0.weight") == HR_ERR_INVALID_ARG, "freeze(NULL model)");
}
static void null_freeze_name(void *a) {
    (void)a;
    hr_model_t *m = tiny_cnn(0);
    CHECK(hr_model_freeze(m, NULL) == HR_ERR_INVALID_ARG, "freeze(m, NULL)");
    hr_model_free(m);
}
static void null_session_calls(void *a) {
    int which = *(int *)a;
    float buf[16] = {0};
    hr_mem_stats_t ms;
    hr_status st = HR_OK;
    switch (which) {
    case 0: st = hr_read_output(NULL, buf); break;
    case 1: st = hr_state_read(NULL, 0, buf); break;
    case 2: st = hr_state_write(NULL, 0, buf); break;
    case 3: st = hr_grad_read(NULL, "0.weight", buf); break;
    case 4: st = hr_mem_stats(NULL, &ms); break;
    case 5: st = hr_set_step_count(NULL, 3); break;
    }
    CHECK(st == HR_ERR_INVALID_ARG, "call %d with a NULL session: %s", which, hr_status_name(st));
}
static const char *null_call_name[] = {"hr_read_output(NULL)", "hr_state_read(NULL)", "hr_state_write(NULL)",
                                       "hr_grad_read(NULL)", "hr_mem_stats(NULL)", "hr_set_step_count(NULL)"};

static void test_nulls(void) {
    float x[8] = {0};
    int32_t lab[1] = {0};
    hr_model_free(NULL);
    hr_session_free(NULL);
    hr_model_set_source(NULL, "f", 1);
    CHECK(hr_input(NULL, "x", 1, (int64_t[]){4}) == -1 && message(), "input(NULL)");
    CHECK(hr_linear(NULL, NULL, 0, 4, 4, true) == -1 && message(), "linear(NULL)");
    CHECK(hr_relu(NULL, NULL, 0) == -1, "relu(NULL)");
    CHECK(hr_concat(NULL, NULL, 2, (int[]){0, 1}) == -1, "concat(NULL)");
    CHECK(hr_loss_cross_entropy(NULL, 0, 10) == -1, "loss(NULL)");
    CHECK(hr_tensor_ndim(NULL, 0) == -1 && hr_tensor_dim(NULL, 0, 0) == -1 && hr_model_output(NULL) == -1,
          "shape queries on NULL");
    CHECK(hr_session_alloc(NULL) == HR_ERR_INVALID_ARG, "alloc(NULL)");
    CHECK(hr_train_step(NULL, x, lab, NULL) == HR_ERR_INVALID_ARG, "train_step(NULL)");
    CHECK(hr_forward(NULL, x, NULL) == HR_ERR_INVALID_ARG, "forward(NULL)");
    isolated("hr_compile(NULL model)", null_compile, NULL);
    isolated("hr_compile(model, NULL cfg)", null_cfg, NULL);
    isolated("hr_model_freeze(NULL, name)", null_freeze, NULL);
    isolated("hr_model_freeze(model, NULL)", null_freeze_name, NULL);
    for (int i = 0; i < 6; i++) isolated(null_call_name[i], null_session_calls, &i);

    /* a session, used in the wrong order or mode */
    hr_model_t *m = tiny_cnn(0);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s != NULL, "compile: %s", hr_last_error());
    if (!s) return;
    float xb[TB * TIN], out[TB * 10], w[40];
    int32_t lb[TB];
    tiny_batch(0, xb, lb);
    hr_error_clear();
    CHECK(hr_train_step(s, xb, lb, NULL) == HR_ERR_INVALID_ARG && has("alloc"), "step before alloc: '%s'",
          hr_last_error());
    CHECK(hr_state_read(s, 0, w) == HR_ERR_INVALID_ARG && message(), "state_read before alloc");
    CHECK(hr_read_output(s, out) == HR_ERR_INVALID_ARG && message(), "read_output before alloc");
    CHECK(hr_session_alloc(s) == HR_OK, "alloc: %s", hr_last_error());
    CHECK(hr_session_alloc(s) == HR_OK, "a second alloc is not harmless");
    CHECK(hr_train_step(s, NULL, lb, NULL) == HR_ERR_INVALID_ARG, "train_step(x NULL)");
    CHECK(hr_train_step(s, xb, NULL, NULL) == HR_ERR_INVALID_ARG, "train_step(labels NULL)");
    hr_error_clear();
    CHECK(hr_forward(s, xb, out) == HR_ERR_INVALID_ARG && message(), "forward on a train session: '%s'",
          hr_last_error());
    CHECK(hr_grad_read(s, "0.weight", w) == HR_ERR_INVALID_ARG && has("keep_grads"), "grad_read without keep_grads");
    CHECK(hr_train_step(s, xb, lb, NULL) == HR_OK, "step: %s", hr_last_error());
    CHECK(hr_read_output(s, out) == HR_ERR_INVALID_ARG && has("keep_output"), "read_output after a step without "
          "keep_output: '%s'", hr_last_error());
    CHECK(hr_state_read(s, -1, w) == HR_ERR_INVALID_ARG, "state_read(-1)");
    CHECK(hr_state_read(s, hr_state_count(s), w) == HR_ERR_INVALID_ARG, "state_read(count)");
    CHECK(hr_state_read(s, 0, NULL) == HR_ERR_INVALID_ARG, "state_read(NULL dst)");
    CHECK(hr_state_name(s, -1) == NULL && hr_state_name(s, 999) == NULL, "state_name out of range");
    CHECK(hr_state_ndim(s, 999) == -1 && hr_state_dim(s, 0, 9) == -1, "state dims out of range");
    CHECK(hr_state_find(s, "no.such") == -1, "state_find of a missing name");
    CHECK(hr_set_step_count(s, -1) == HR_ERR_INVALID_ARG, "negative step count");
    hr_mem_stats_t ms;
    CHECK(hr_mem_stats(s, &ms) == HR_OK && ms.allocated == hr_session_report(s)->arena_bytes,
          "mem_stats allocated %zu, arena %zu", ms.allocated, hr_session_report(s)->arena_bytes);
    hr_session_free(s);

    c.mode = HR_MODE_INFER;
    s = ready(m, c);
    if (s) {
        hr_error_clear();
        CHECK(hr_train_step(s, xb, lb, NULL) == HR_ERR_INVALID_ARG && message(), "train_step on inference: '%s'",
              hr_last_error());
        CHECK(hr_forward(s, xb, out) == HR_OK, "forward: %s", hr_last_error());
        CHECK(hr_state_find(s, "0.weight.exp_avg") == -1, "inference session has optimizer state");
        hr_session_free(s);
    }
    hr_model_free(m);
}

/* ---- labels out of range ------------------------------------------------------- */
static void test_labels(void) {
    hr_model_t *m = tiny_cnn(0);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    hr_session_t *s = ready(m, c);
    if (!s) return;
    float x[TB * TIN], w0[360], w1[360];
    int32_t lab[TB];
    tiny_batch(0, x, lab);
    int iw = hr_state_find(s, "6.weight");
    hr_state_read(s, iw, w0);
    int32_t bad[][TB] = {{0, 1, 12, 3}, {-1, 0, 0, 0}, {0, 0, 0, 10}, {INT32_MIN, 0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        hr_error_clear();
        hr_status st = hr_train_step(s, x, bad[k], NULL);
        char v[16];
        int32_t shown = bad[k][0] != 0 ? bad[k][0] : bad[k][2] != 0 ? bad[k][2] : bad[k][3];
        snprintf(v, sizeof v, "%d", shown);
        CHECK(st == HR_ERR_INVALID_ARG && has(v), "label %d of 10 classes: %s '%s'", shown, hr_status_name(st),
              hr_last_error());
    }
    hr_state_read(s, iw, w1);
    CHECK(memcmp(w0, w1, sizeof w0) == 0, "a refused step changed the weights");
    CHECK(hr_step_count(s) == 0, "a refused step counted: %lld", (long long)hr_step_count(s));
    CHECK(hr_train_step(s, x, lab, NULL) == HR_OK && hr_step_count(s) == 1, "a good step after bad ones: %s",
          hr_last_error());
    hr_session_free(s);
    hr_model_free(m);
}

/* ---- broken models: the builder's message ----------------------------------- */
static hr_model_t *deep_cnn_broken(int64_t in_f, bool with_source) {
    hr_model_t *m = hr_model_new("deep_cnn_broken");
    if (with_source) hr_model_set_source(m, "deep_cnn_broken.model", 9);
    int x = hr_input(m, "x", 3, (int64_t[]){3, 64, 64});
    x = hr_conv2d(m, NULL, x, 3, 32, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_conv2d(m, NULL, x, 32, 64, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_conv2d(m, NULL, x, 64, 128, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_flatten(m, NULL, x);
    if (with_source) hr_model_set_source(m, "deep_cnn_broken.model", 20);
    hr_error_clear();
    int y = hr_linear(m, NULL, x, in_f, 10, true);
    CHECK(y == -1, "Linear(%lld, 10) after 8192 features built", (long long)in_f);
    return m;
}

static void compile_broken(void *a) {
    hr_model_t *m = a;
    hr_config_t c = hr_config_default();
    hr_error_clear();
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s == NULL, "a broken model compiled");
    CHECK(message(), "compile of a broken model: no message");
    hr_session_free(s);
}

typedef struct {
    const char *what;
    int (*build)(hr_model_t *m);
    const char *needles[3];
} misuse;

static int input4(hr_model_t *m) { return hr_input(m, "x", 3, (int64_t[]){4, 8, 8}); }
static int b_conv_channels(hr_model_t *m) { return hr_conv2d(m, NULL, input4(m), 3, 8, 3, 1, 1, true); }
static int b_conv_kernel(hr_model_t *m) { return hr_conv2d(m, NULL, input4(m), 4, 8, 11, 1, 1, true); }
static int b_conv_stride(hr_model_t *m) { return hr_conv2d(m, NULL, input4(m), 4, 8, 3, 0, 1, true); }
static int b_linear_4d(hr_model_t *m) { return hr_linear(m, NULL, input4(m), 256, 10, true); }
static int b_linear_neg(hr_model_t *m) { return hr_linear(m, NULL, hr_flatten(m, NULL, input4(m)), 256, -3, true); }
static int b_pool(hr_model_t *m) { return hr_maxpool2d(m, NULL, input4(m), 9, 1); }
static int b_bn(hr_model_t *m) { return hr_batchnorm(m, NULL, input4(m), 5, 1e-5f, 0.1f); }
static int b_bn_eps(hr_model_t *m) { return hr_batchnorm(m, NULL, input4(m), 4, 0.0f, 0.1f); }
static int b_dropout(hr_model_t *m) { return hr_dropout(m, NULL, input4(m), 1.0f); }
static int b_dropout_nan(hr_model_t *m) { return hr_dropout(m, NULL, input4(m), NAN); }
static int b_add(hr_model_t *m) {
    int x = input4(m);
    return hr_add(m, NULL, x, hr_maxpool2d(m, NULL, x, 2, 2));
}
/* a block's name too long for its layers' names (a model file's parser stops such names sooner) */
static int b_block_name(hr_model_t *m) {
    char name[256];
    memset(name, 'a', 255);
    name[255] = 0;
    int x = hr_embedding(m, NULL, hr_input(m, "tokens", 1, (int64_t[]){8}), 10, 4);
    return hr_transformer_encoder_layer(m, name, x, 4, 2, 8, 0.0f, true, 1e-5f, true, true);
}
static int b_concat(hr_model_t *m) {
    int x = input4(m);
    return hr_concat(m, NULL, 2, (int[]){x, hr_maxpool2d(m, NULL, x, 2, 2)});
}
static int b_concat_one(hr_model_t *m) { return hr_concat(m, NULL, 1, (int[]){input4(m)}); }
static int b_reshape(hr_model_t *m) { return hr_reshape(m, NULL, input4(m), 2, (int64_t[]){10, 10}); }
static int b_softmax(hr_model_t *m) { return hr_softmax(m, NULL, input4(m)); }
static int b_dup(hr_model_t *m) {
    int x = input4(m);
    x = hr_relu(m, "a", x);
    return hr_relu(m, "a", x);
}
static int b_after_loss(hr_model_t *m) {
    int x = hr_flatten(m, NULL, input4(m));
    x = hr_linear(m, NULL, x, 256, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return hr_relu(m, NULL, x);
}
static int b_classes(hr_model_t *m) {
    int x = hr_linear(m, NULL, hr_flatten(m, NULL, input4(m)), 256, 10, true);
    return hr_loss_cross_entropy(m, x, 12);
}
static int b_two_inputs(hr_model_t *m) {
    input4(m);
    return input4(m);
}
static int b_input_ndim(hr_model_t *m) { return hr_input(m, "x", 4, (int64_t[]){1, 2, 3, 4}); }
static int b_input_dim(hr_model_t *m) { return hr_input(m, "x", 2, (int64_t[]){3, -2}); }
static int b_bad_tensor(hr_model_t *m) {
    input4(m);
    return hr_relu(m, NULL, 999);
}
static int b_no_input(hr_model_t *m) { return hr_relu(m, NULL, 0); }

static const misuse misuses[] = {
    {"Conv2d in_channels", b_conv_channels, {"3", "4", "Conv2d"}},
    {"Conv2d kernel larger than the input", b_conv_kernel, {"11", "Conv2d", NULL}},
    {"Conv2d stride 0", b_conv_stride, {"stride", NULL, NULL}},
    {"Linear on (C,H,W)", b_linear_4d, {"Flatten", NULL, NULL}},
    {"Linear out_features -3", b_linear_neg, {"-3", NULL, NULL}},
    {"MaxPool2d kernel 9 on 8x8", b_pool, {"9", NULL, NULL}},
    {"BatchNorm features", b_bn, {"5", "4", NULL}},
    {"BatchNorm eps 0", b_bn_eps, {"eps", NULL, NULL}},
    {"Dropout p=1", b_dropout, {"1", NULL, NULL}},
    {"Dropout p=NaN", b_dropout_nan, {"p", NULL, NULL}},
    {"Add of different shapes", b_add, {"shape", NULL, NULL}},
    {"TransformerEncoderLayer named in 255 characters", b_block_name, {"255 characters", "fewer than 200", NULL}},
    {"Concat of different sizes", b_concat, {"Concat", NULL, NULL}},
    {"Concat of one input", b_concat_one, {"Concat", NULL, NULL}},
    {"Reshape to another size", b_reshape, {"256", "10, 10", NULL}},
    {"Softmax on (C,H,W)", b_softmax, {"Softmax", NULL, NULL}},
    {"a layer name used twice", b_dup, {"'a'", NULL, NULL}},
    {"a layer after the loss", b_after_loss, {"loss", NULL, NULL}},
    {"CrossEntropyLoss classes", b_classes, {"12", "10", NULL}},
    {"two inputs", b_two_inputs, {"input", NULL, NULL}},
    {"input of 4 sizes", b_input_ndim, {"4", NULL, NULL}},
    {"input size -2", b_input_dim, {"-2", NULL, NULL}},
    {"tensor id 999", b_bad_tensor, {"999", NULL, NULL}},
    {"a layer before any input", b_no_input, {"input", NULL, NULL}},
};

static void test_broken(void) {
    /* the classic: Linear(2048, 10) where three pools leave 128 x 8 x 8 = 8192 */
    hr_model_t *m = deep_cnn_broken(2048, false);
    CHECK(has("2048") && has("8192") && has("layer 10") && has("Linear"), "message: '%s'", hr_last_error());
    printf("  DeepCNN with Linear(2048, 10): %s\n", hr_last_error());
    CHECK(hr_loss_cross_entropy(m, 0, 10) == -1, "a loss after a failed layer built");
    isolated("hr_compile of the broken DeepCNN", compile_broken, m);
    hr_model_free(m);
    m = deep_cnn_broken(2048, true);
    CHECK(has("deep_cnn_broken.model:20"), "message without file:line: '%s'", hr_last_error());
    hr_model_free(m);
    /* the fixed model builds and compiles */
    m = deep_cnn_broken(2048, false);
    hr_model_free(m);
    for (size_t i = 0; i < sizeof misuses / sizeof misuses[0]; i++) {
        const misuse *u = &misuses[i];
        m = hr_model_new("misuse");
        hr_error_clear();
        int r = u->build(m);
        bool ok = r == -1 && message();
        for (int k = 0; k < 3 && u->needles[k]; k++) ok &= has(u->needles[k]);
        CHECK(ok, "%s: builder returned %d, message '%s'", u->what, r, hr_last_error());
        char label[96];
        snprintf(label, sizeof label, "hr_compile after '%s'", u->what);
        isolated(label, compile_broken, m);
        hr_model_free(m);
    }
}

/* ---- bad settings --------------------------------------------------------------- */
typedef struct {
    const char *what;
    hr_config_t c;
    const char *needle;
} bad_cfg;

static void compile_bad_cfg(void *a) {
    bad_cfg *b = a;
    hr_model_t *m = tiny_cnn(0);
    hr_error_clear();
    hr_session_t *s = hr_compile(m, &b->c);
    CHECK(s == NULL, "%s: compiled", b->what);
    CHECK(message() && has(b->needle), "%s: '%s'", b->what, hr_last_error());
    hr_session_free(s);
    hr_model_free(m);
}

static void no_loss_or_input(void *a) {
    hr_model_t *m = hr_model_new("incomplete");
    if (*(int *)a) {
        int x = hr_input(m, "x", 1, (int64_t[]){4});
        hr_linear(m, NULL, x, 4, 2, true);
    }
    hr_config_t c = hr_config_default();
    hr_error_clear();
    CHECK(hr_compile(m, &c) == NULL, "a model without %s compiled", *(int *)a ? "loss" : "input");
    CHECK(has(*(int *)a ? "loss" : "input"), "'%s'", hr_last_error());
    hr_model_free(m);
}

static void test_settings(void) {
    bad_cfg b[8];
    for (int i = 0; i < 8; i++) b[i].c = hr_config_default();
    b[0].what = "lr -1", b[0].c.optim.lr = -1, b[0].needle = "lr";
    b[1].what = "beta1 1", b[1].c.optim.beta1 = 1, b[1].needle = "beta";
    b[2].what = "Adam eps 0", b[2].c.optim.eps = 0, b[2].needle = "eps";
    b[3].what = "nesterov without momentum", b[3].c.optim.kind = HR_OPTIM_SGD, b[3].c.optim.nesterov = true,
    b[3].needle = "nesterov";
    b[4].what = "weight_decay -1", b[4].c.optim.weight_decay = -1, b[4].needle = "weight_decay";
    b[5].what = "lr NaN", b[5].c.optim.lr = NAN, b[5].needle = "lr";
    b[6].what = "batch 0", b[6].c.batch = 0, b[6].needle = "batch";
    b[7].what = "momentum -0.5", b[7].c.optim.kind = HR_OPTIM_SGD, b[7].c.optim.momentum = -0.5f,
    b[7].needle = "momentum";
    for (int i = 0; i < 8; i++) {
        char label[96];
        snprintf(label, sizeof label, "hr_compile with %s", b[i].what);
        isolated(label, compile_bad_cfg, &b[i]);
    }
    int z = 0, o = 1;
    isolated("hr_compile of a model without input", no_loss_or_input, &z);
    isolated("hr_compile of a model without loss", no_loss_or_input, &o);
#ifndef HR_CUDA
    /* a CPU-only build asked for CUDA */
    bad_cfg cu = {"device CUDA in a CPU-only build", hr_config_default(), "CUDA"};
    cu.c.device = HR_DEVICE_CUDA;
    isolated("hr_compile for CUDA without CUDA", compile_bad_cfg, &cu);
#endif
}

/* ---- a tiny problem must be learned ------------------------------------------- */
#define NS 1024
#define DIN 8
#define NC 4

static void test_learns(void) {
    /* labels = argmax of a fixed linear map: linearly separable */
    static float X[NS * DIN];
    static int32_t Y[NS];
    uint64_t r = 99;
    float Wt[NC * DIN];
    for (int i = 0; i < NC * DIN; i++) r = r * 6364136223846793005ULL + 1442695040888963407ULL, Wt[i] = (float)((r >> 33) % 2001) / 1000.0f - 1.0f;
    for (int n = 0; n < NS; n++) {
        for (int j = 0; j < DIN; j++)
            r = r * 6364136223846793005ULL + 1442695040888963407ULL, X[n * DIN + j] = (float)((r >> 33) % 2001) / 1000.0f - 1.0f;
        int best = 0;
        float bv = -1e30f;
        for (int c = 0; c < NC; c++) {
            float v = 0;
            for (int j = 0; j < DIN; j++) v += Wt[c * DIN + j] * X[n * DIN + j];
            if (v > bv) bv = v, best = c;
        }
        Y[n] = best;
    }
    hr_model_t *m = hr_model_new("mlp2");
    int x = hr_input(m, "x", 1, (int64_t[]){DIN});
    x = hr_linear(m, NULL, x, DIN, 32, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 32, NC, true);
    hr_loss_cross_entropy(m, x, NC);
    hr_config_t c = hr_config_default();
    c.batch = 64;
    c.optim.lr = 1e-2f;
    c.seed = 5;
    c.keep_output = true; /* hr_read_output after the last step */
    hr_session_t *s = ready(m, c);
    c.mode = HR_MODE_INFER;
    hr_session_t *inf = ready(m, c);
    if (!s || !inf) return;
    float first = 0, last10 = 0, logits[64 * NC], check[64 * NC];
    const int steps = 400;
    bool read_ok = true;
    for (int t = 0; t < steps; t++) {
        int b = t % (NS / 64);
        float loss;
        if (t == steps - 1) /* the outputs of a train step are the forward pass's logits */
            for (int i = 0; i < hr_state_count(inf); i++) {
                int j = hr_state_find(s, hr_state_name(inf, i));
                float buf[32 * 32];
                hr_state_read(s, j, buf), hr_state_write(inf, i, buf);
            }
        CHECK(hr_train_step(s, X + b * 64 * DIN, Y + b * 64, &loss) == HR_OK, "step %d: %s", t, hr_last_error());
        if (t == 0) first = loss;
        if (t >= steps - 10) last10 += loss / 10;
        if (t == steps - 1) {
            read_ok = hr_read_output(s, logits) == HR_OK && hr_forward(inf, X + b * 64 * DIN, check) == HR_OK;
            float d = 0;
            for (int i = 0; i < 64 * NC; i++) d = fmaxf(d, fabsf(logits[i] - check[i]));
            CHECK(read_ok && d < 1e-4f, "hr_read_output after a train step: %s, max difference %g from the logits of "
                  "that step's parameters", read_ok ? "ok" : hr_last_error(), d);
        }
    }
    /* accuracy on all samples, with the trained parameters in an inference session */
    for (int i = 0; i < hr_state_count(inf); i++) {
        int j = hr_state_find(s, hr_state_name(inf, i));
        float buf[32 * 32];
        CHECK(j >= 0 && hr_state_read(s, j, buf) == HR_OK && hr_state_write(inf, i, buf) == HR_OK, "copying %s",
              hr_state_name(inf, i));
    }
    int correct = 0;
    for (int b = 0; b < NS / 64; b++) {
        CHECK(hr_forward(inf, X + b * 64 * DIN, logits) == HR_OK, "forward: %s", hr_last_error());
        for (int n = 0; n < 64; n++) {
            int best = 0;
            for (int k = 1; k < NC; k++)
                if (logits[n * NC + k] > logits[n * NC + best]) best = k;
            correct += best == Y[b * 64 + n];
        }
    }
    double acc = (double)correct / NS;
    printf("  2-layer MLP, %d steps: loss %.3f -> %.3f, accuracy %.1f%%\n", steps, first, last10, 100 * acc);
    CHECK(acc > 0.95, "accuracy %.3f", acc);
    CHECK(last10 < 0.25f && last10 < first / 4, "loss %g -> %g", first, last10);
    CHECK(hr_step_count(s) == steps, "step count %lld", (long long)hr_step_count(s));
    hr_session_free(s);
    hr_session_free(inf);
    hr_model_free(m);
}

/* ---- determinism, named state, resume ------------------------------------------ */
static void read_all(hr_session_t *s, float **out, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < hr_state_count(s); i++) {
        size_t k = 1;
        for (int d = 0; d < hr_state_ndim(s, i); d++) k *= (size_t)hr_state_dim(s, i, d);
        total += k;
    }
    *out = malloc(sizeof(float) * total);
    *n = total;
    size_t at = 0;
    for (int i = 0; i < hr_state_count(s); i++) {
        size_t k = 1;
        for (int d = 0; d < hr_state_ndim(s, i); d++) k *= (size_t)hr_state_dim(s, i, d);
        CHECK(hr_state_read(s, i, *out + at) == HR_OK, "read %s", hr_state_name(s, i));
        at += k;
    }
}

static void train(hr_session_t *s, int from, int steps) {
    float x[TB * TIN];
    int32_t lab[TB];
    for (int t = from; t < from + steps; t++) {
        tiny_batch(t, x, lab);
        CHECK(hr_train_step(s, x, lab, NULL) == HR_OK, "step %d: %s", t, hr_last_error());
    }
}

static void test_determinism(void) {
    hr_model_t *m = tiny_cnn(0.5f);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    c.seed = 42;
    c.optim.kind = HR_OPTIM_SGD, c.optim.lr = 0.05f, c.optim.momentum = 0.9f;
    hr_session_t *a = ready(m, c), *b = ready(m, c);
    c.seed = 43;
    hr_session_t *d = ready(m, c);
    if (!a || !b || !d) return;
    train(a, 0, 10), train(b, 0, 10), train(d, 0, 10);
    float *sa, *sb, *sd;
    size_t na, nb, nd;
    read_all(a, &sa, &na), read_all(b, &sb, &nb), read_all(d, &sd, &nd);
    CHECK(na == nb && memcmp(sa, sb, sizeof(float) * na) == 0, "same seed, 10 steps: the state differs");
    CHECK(na == nd && memcmp(sa, sd, sizeof(float) * na) != 0, "another seed gave the same state");
    free(sa), free(sb), free(sd);
    hr_session_free(a), hr_session_free(b), hr_session_free(d);
    hr_model_free(m);
}

/* Steps queued ahead (hr_train_submit / hr_train_wait): on the CPU each
 * runs when submitted, so the losses and state are hr_train_step's; at most
 * HR_STEP_QUEUE are queued; nothing else that steps or touches state runs
 * while any is. (tests/gpu/test_cuda_graph.c: the device's queue.) */
static void test_queue(void) {
    hr_model_t *m = tiny_cnn(0.5f);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    c.seed = 9;
    hr_session_t *a = ready(m, c), *b = ready(m, c);
    if (!a || !b) return;
    float x[TB * TIN], la[8], lb[8], v;
    int32_t lab[TB];
    CHECK(hr_train_wait(b, &v) == HR_ERR_INVALID_ARG && has("no step is queued"), "wait with nothing queued: %s",
          hr_last_error());
    for (int t = 0; t < 8; t++) {
        tiny_batch(t, x, lab);
        CHECK(hr_train_step(a, x, lab, &la[t]) == HR_OK, "step %d: %s", t, hr_last_error());
        CHECK(hr_train_submit(b, x, lab) == HR_OK, "submit %d: %s", t, hr_last_error());
        if (t == 0) continue;
        if (t == 1) {
            CHECK(hr_train_queued(b) == HR_STEP_QUEUE, "%d queued", hr_train_queued(b));
            CHECK(hr_train_submit(b, x, lab) == HR_ERR_INVALID_ARG && has("hr_train_wait"), "a third queued: %s",
                  hr_last_error());
            CHECK(hr_train_step(b, x, lab, NULL) == HR_ERR_INVALID_ARG && has("queued"), "step while queued: %s",
                  hr_last_error());
            CHECK(hr_state_read(b, 0, &v) == HR_ERR_INVALID_ARG && has("queued"), "state read while queued: %s",
                  hr_last_error());
            CHECK(hr_set_step_count(b, 5) == HR_ERR_INVALID_ARG && has("queued"), "step count set while queued: %s",
                  hr_last_error());
        }
        if (t == 3) { /* a bad batch is refused and queues nothing; the queue goes on */
            int32_t bad[TB];
            memcpy(bad, lab, sizeof bad);
            bad[1] = 10;
            CHECK(hr_train_wait(b, &lb[t - 1]) == HR_OK, "wait %d: %s", t - 1, hr_last_error());
            CHECK(hr_train_submit(b, x, bad) == HR_ERR_INVALID_ARG && has("outside [0, 10)") && hr_train_queued(b) == 1,
                  "a label out of range: %s, %d queued", hr_last_error(), hr_train_queued(b));
            continue;
        }
        CHECK(hr_train_wait(b, &lb[t - 1]) == HR_OK, "wait %d: %s", t - 1, hr_last_error());
    }
    CHECK(hr_train_wait(b, &lb[7]) == HR_OK && hr_train_queued(b) == 0, "last wait: %s", hr_last_error());
    CHECK(!memcmp(la, lb, sizeof la), "queued steps gave other losses than hr_train_step");
    float *sa, *sb;
    size_t na, nb;
    read_all(a, &sa, &na), read_all(b, &sb, &nb);
    CHECK(na == nb && !memcmp(sa, sb, sizeof(float) * na) && hr_step_count(b) == 8, "queued steps: the state differs");
    free(sa), free(sb);
    hr_session_free(a), hr_session_free(b);
    hr_model_free(m);
}

static void test_state(void) {
    hr_model_t *m = tiny_cnn(0.25f);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    c.seed = 3;
    hr_session_t *a = ready(m, c);
    if (!a) return;
    /* names, in PyTorch's state_dict order, then the optimizer's */
    static const char *want[] = {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                 "6.weight", "6.bias"};
    int n = hr_state_count(a), np = 0;
    for (int i = 0; i < n; i++) np += hr_state_is_param(a, i);
    CHECK(np == 8, "%d parameters and buffers, expected 8", np);
    for (int i = 0; i < 8 && i < n; i++)
        CHECK(hr_state_name(a, i) && strcmp(hr_state_name(a, i), want[i]) == 0, "state %d is %s, expected %s", i,
              hr_state_name(a, i), want[i]);
    CHECK(n == 8 + 2 * 6, "%d state tensors; expected 8 + Adam's 2 x 6", n);
    for (int i = 8; i < n; i++) {
        const char *nm = hr_state_name(a, i);
        CHECK(!hr_state_is_param(a, i) && (strstr(nm, ".exp_avg") != NULL), "optimizer state %d is %s", i, nm);
    }
    CHECK(hr_state_find(a, "6.weight") == 6 && hr_state_ndim(a, 6) == 2 && hr_state_dim(a, 6, 0) == 10 &&
              hr_state_dim(a, 6, 1) == 36,
          "6.weight shape");
    CHECK(hr_state_ndim(a, 0) == 4 && hr_state_dim(a, 0, 0) == 4 && hr_state_dim(a, 0, 1) == 2 &&
              hr_state_dim(a, 0, 3) == 3,
          "0.weight shape");
    int ie = hr_state_find(a, "6.weight.exp_avg_sq");
    CHECK(ie >= 0 && hr_state_ndim(a, ie) == 2 && hr_state_dim(a, ie, 1) == 36, "6.weight.exp_avg_sq");
    /* BatchNorm starts as PyTorch's: weight 1, bias 0, running mean 0, running var 1 */
    float bn[4][4];
    for (int k = 0; k < 4; k++) hr_state_read(a, 2 + k, bn[k]);
    CHECK(bn[0][0] == 1 && bn[1][3] == 0 && bn[2][1] == 0 && bn[3][2] == 1, "BatchNorm initial state");
    /* write, read back bit for bit */
    float w[360], r[360];
    for (int i = 0; i < 360; i++) w[i] = (float)i * 0.001f - 0.1f;
    w[7] = -0.0f, w[8] = 1e-40f; /* a signed zero and a subnormal survive too */
    CHECK(hr_state_write(a, 6, w) == HR_OK && hr_state_read(a, 6, r) == HR_OK && memcmp(w, r, sizeof w) == 0,
          "state write/read round trip");
    /* resume: b takes all of a's state and its step count after 3 steps;
     * then both take the same 4 steps and must agree bit for bit */
    train(a, 0, 3);
    hr_session_t *b = ready(m, c);
    if (!b) return;
    float *sa;
    size_t na;
    read_all(a, &sa, &na);
    size_t at = 0;
    for (int i = 0; i < hr_state_count(b); i++) {
        size_t k = 1;
        for (int d = 0; d < hr_state_ndim(b, i); d++) k *= (size_t)hr_state_dim(b, i, d);
        CHECK(hr_state_write(b, i, sa + at) == HR_OK, "write %s", hr_state_name(b, i));
        at += k;
    }
    free(sa);
    CHECK(hr_set_step_count(b, hr_step_count(a)) == HR_OK && hr_step_count(b) == 3, "step count");
    train(a, 3, 4), train(b, 3, 4);
    float *ra, *rb;
    size_t n1, n2;
    read_all(a, &ra, &n1), read_all(b, &rb, &n2);
    CHECK(n1 == n2 && memcmp(ra, rb, sizeof(float) * n1) == 0, "resumed session differs from the original");
    free(ra), free(rb);
    hr_session_free(a), hr_session_free(b);
    hr_model_free(m);
}

/* ---- small utilities of the header ------------------------------------------- */
static void test_utils(void) {
    size_t v = 0;
    CHECK(hr_parse_bytes("8GiB", &v) && v == (size_t)8 << 30, "8GiB -> %zu", v);
    CHECK(hr_parse_bytes("512MB", &v) && v == 512000000u, "512MB -> %zu", v);
    CHECK(hr_parse_bytes("1e9", &v) && v == 1000000000u, "1e9 -> %zu", v);
    CHECK(hr_parse_bytes("1.5 GiB", &v) && v == (size_t)3 << 29, "1.5 GiB -> %zu", v);
    CHECK(hr_parse_bytes("4096", &v) && v == 4096, "4096 -> %zu", v);
    CHECK(!hr_parse_bytes("abc", &v) && !hr_parse_bytes("", &v) && !hr_parse_bytes("-1GB", &v) &&
              !hr_parse_bytes("12XB", &v) && !hr_parse_bytes("1e30", &v),
          "malformed sizes accepted");
    char buf[32];
    CHECK(strcmp(hr_format_bytes(1536u << 20, buf, sizeof buf), "1.50 GiB") == 0, "'%s'", buf);
    CHECK(strcmp(hr_format_bytes(100, buf, sizeof buf), "100 B") == 0, "'%s'", buf);
    for (int st = HR_OK; st <= HR_ERR_INTERNAL; st++) {
        const char *nm = hr_status_name((hr_status)st);
        CHECK(nm && *nm && strcmp(nm, "unknown status") != 0, "status %d has no name", st);
        for (int o = HR_OK; o < st; o++) CHECK(strcmp(nm, hr_status_name((hr_status)o)) != 0, "status %d and %d", st, o);
    }
    for (int k = 0; k < HR_CAT_COUNT; k++) CHECK(strlen(hr_category_name((hr_category)k)) > 3, "category %d", k);
    /* the report, for people and as JSON that a strict parser accepts */
    hr_model_t *m = tiny_cnn(0);
    hr_config_t c = hr_config_default();
    c.batch = TB;
    hr_session_t *s = hr_compile(m, &c);
    if (s) {
        char *text = NULL, *json = NULL;
        size_t tl = 0, jl = 0;
        FILE *f = open_memstream(&text, &tl);
        hr_report_print(s, f);
        fclose(f);
        f = open_memstream(&json, &jl);
        hr_report_json(s, f);
        fclose(f);
        CHECK(strstr(text, "parameters") && strstr(text, "arena") && strstr(text, "gradients"), "report:\n%s", text);
        hr_json *j = NULL;
        CHECK(hr_json_parse(json, jl, "report", 0, &j) == HR_OK, "report JSON: %s\n%s", hr_last_error(), json);
        if (j) {
            int64_t arena = 0;
            const hr_json *a = hr_json_get(j, "arena_bytes");
            CHECK(a && hr_json_uint(a, &arena) && (size_t)arena == hr_session_report(s)->arena_bytes,
                  "JSON arena_bytes");
            hr_json_free(j);
        }
        free(text), free(json);
        hr_session_free(s);
    }
    hr_model_free(m);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_nulls();
    test_labels();
    test_broken();
    test_settings();
    test_learns();
    test_determinism();
    test_queue();
    test_state();
    test_utils();
    TEST_END();
}
