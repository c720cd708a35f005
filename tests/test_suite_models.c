/* test_suite_models.c — the standard CNN suite (VGG-16-BN, ResNet-18 and
 * MobileNetV1 under bench/models/, ResNet-20 in examples/), and a small GPT
 * of TransformerEncoderLayer lines (bench/models/encoder_gpt.model), against PyTorch's
 * own definitions in bench/torch_models.py: each model file builds and plans;
 * its parameter count is the published one; its checkpoint loads into the
 * PyTorch module with load_state_dict(strict=True); the eval-mode logits of a
 * batch agree with PyTorch's on the same weights, input and (randomised)
 * BatchNorm statistics within 1e-4 of max|logit|; and (ResNet-20,
 * MobileNetV1) one training step's loss and gradients agree with PyTorch's
 * in float64 (bounds and why in bench/torch_models.py). Also prints each model's planned peak (CPU, Adam,
 * fp32) at batch 128 and 1024. The PyTorch half is skipped (with a note)
 * where /usr/bin/python3 has no torch. HR_SUITE_KEEP=1 keeps the files. Run
 * from the repository root. */
#include "check.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name, *path;
    int64_t params; /* published (kuangliu/pytorch-cifar; ResNet-20: He et al.'s 269,722 + option B's 2,752) */
    bool train;     /* also the training step's gradients (the two large ones would take minutes on a busy CPU) */
    int64_t vocab;  /* a text model: token ids < vocab in, logits at every position out; 0: 3x32x32 images, 10 classes */
} suite_model;

static const suite_model SUITE[] = {
    {"vgg16_bn", "bench/models/vgg16_bn.model", 14728266, false, 0},
    {"resnet18", "bench/models/resnet18.model", 11173962, false, 0},
    {"resnet20", "examples/resnet20.model", 272474, true, 0},
    {"mobilenet_v1", "bench/models/mobilenet_v1.model", 3217226, true, 0},
    {"encoder_gpt", "bench/models/encoder_gpt.model", 5962, true, 50}, /* TransformerEncoderLayer lines */
};
#define NSUITE (int)(sizeof SUITE / sizeof SUITE[0])
#define BATCH 3
#define TRAIN_BATCH 8 /* BatchNorm's batch statistics over more values: less amplified rounding */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float urand(void) { /* [0, 1) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / 16777216.0));
}

static int64_t state_numel(hr_session_t *s, int i) {
    int64_t n = 1;
    for (int d = 0; d < hr_state_ndim(s, i); d++) n *= hr_state_dim(s, i, d);
    return n;
}

/* Parameters (not buffers, not optimizer state), as sum(p.numel() for p in m.parameters()). */
static int64_t count_params(hr_session_t *s) {
    int64_t n = 0;
    for (int i = 0; i < hr_state_count(s); i++)
        if (hr_state_is_param(s, i) && !strstr(hr_state_name(s, i), "running_")) n += state_numel(s, i);
    return n;
}

/* nn.Conv2d's init: U(-b, b), b = 1/sqrt(fan_in), fan_in = C/groups kh kw
 * (the weight's numel / K): every value within b, the largest near it (a
 * depthwise conv given C kh kw would stay under b / sqrt(C)). */
static void check_conv_init(hr_session_t *s, const char *model) {
    for (int i = 0; i < hr_state_count(s); i++) {
        if (hr_state_ndim(s, i) != 4) continue;
        int64_t n = state_numel(s, i), fan_in = n / hr_state_dim(s, i, 0);
        float *v = malloc(sizeof(float) * (size_t)n);
        if (!v) abort();
        hr_state_read(s, i, v);
        double b = 1.0 / sqrt((double)fan_in), mx = 0;
        for (int64_t j = 0; j < n; j++) mx = fmax(mx, fabs(v[j]));
        CHECK(mx <= b && (n < 64 || mx >= 0.8 * b), "%s %s: max|w| %.4g, nn.Conv2d's bound 1/sqrt(%lld) = %.4g",
              model, hr_state_name(s, i), mx, (long long)fan_in, b);
        free(v);
    }
}

/* BatchNorm's statistics and affine parameters, and every bias, away from
 * their initial 0 and 1, so that eval mode tests all of them. */
static void randomise(hr_session_t *s) {
    for (int i = 0; i < hr_state_count(s); i++) {
        const char *nm = hr_state_name(s, i);
        bool mean = strstr(nm, "running_mean") != NULL, var = strstr(nm, "running_var") != NULL;
        bool one_d = hr_state_ndim(s, i) == 1, weight = one_d && strstr(nm, ".weight") != NULL;
        if (!mean && !var && !one_d) continue;
        int64_t n = state_numel(s, i);
        float *v = malloc(sizeof(float) * (size_t)n);
        if (!v) abort();
        for (int64_t j = 0; j < n; j++)
            v[j] = var ? 0.5f + urand() : weight ? 0.75f + 0.5f * urand() : 0.2f * (2 * urand() - 1);
        CHECK(hr_state_write(s, i, v) == HR_OK, "write %s: %s", nm, hr_last_error());
        free(v);
    }
}

/* One training step (SGD, train-mode BatchNorm) from the checkpoint at
 * `ckpt`, on random x and labels: the loss and every parameter's gradient
 * into dir/NAME.grad.safetensors ("x", "labels", "loss", "grad.<name>"). */
static void train_grads(const suite_model *sm, hr_model_t *m, const char *ckpt, const char *dir) {
    hr_config_t cfg = hr_config_default();
    cfg.batch = TRAIN_BATCH;
    cfg.device = HR_DEVICE_CPU;
    cfg.optim.kind = HR_OPTIM_SGD;
    cfg.optim.lr = 0.01f;
    cfg.keep_grads = true;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "%s compiles for training: %s", sm->name, hr_last_error());
    if (!s || hr_session_alloc(s) != HR_OK || hr_checkpoint_load(s, ckpt, NULL) != HR_OK) {
        CHECK(0, "%s: training session: %s", sm->name, hr_last_error());
        hr_session_free(s);
        return;
    }
    /* images: x (B, 3, 32, 32), a label a sample; text: token ids x (B, T), a label a position */
    int64_t T = sm->vocab ? hr_tensor_dim(m, hr_model_input(m), 0) : 1, classes = sm->vocab ? sm->vocab : 10;
    static int32_t labels[TRAIN_BATCH * 64];
    static int64_t labels64[TRAIN_BATCH * 64];
    static float x[TRAIN_BATCH * 3 * 32 * 32];
    int64_t xd[4] = {TRAIN_BATCH, 3, 32, 32}, ld[2] = {TRAIN_BATCH, T}, nx = TRAIN_BATCH * 3 * 32 * 32;
    if (sm->vocab) xd[1] = T, nx = TRAIN_BATCH * T;
    if (T > 64) abort();
    for (int i = 0; i < TRAIN_BATCH * T; i++) labels[i] = (int32_t)(urand() * classes) % classes, labels64[i] = labels[i];
    for (int i = 0; i < nx; i++) x[i] = sm->vocab ? (float)((int)(urand() * sm->vocab) % sm->vocab) : 2 * urand() - 1;
    float loss = 0;
    CHECK(hr_train_step(s, x, labels, &loss) == HR_OK, "%s train step: %s", sm->name, hr_last_error());
    int n = 0, cap = hr_state_count(s) + 3;
    hr_st_entry *e = calloc((size_t)cap, sizeof *e);
    char **names = calloc((size_t)cap, sizeof *names);
    float **bufs = calloc((size_t)cap, sizeof *bufs);
    int64_t(*dims)[4] = calloc((size_t)cap, sizeof *dims);
    if (!e || !names || !bufs || !dims) abort();
    e[n++] = (hr_st_entry){"x", "F32", sm->vocab ? 2 : 4, xd, x};
    e[n++] = (hr_st_entry){"loss", "F32", 0, NULL, &loss};
    e[n++] = (hr_st_entry){"labels", "I64", sm->vocab ? 2 : 1, ld, labels64};
    for (int i = 0; i < hr_state_count(s); i++) {
        const char *nm = hr_state_name(s, i);
        if (!hr_state_is_param(s, i) || strstr(nm, "running_")) continue;
        size_t len = strlen(nm) + 6;
        names[n] = malloc(len), bufs[n] = malloc(sizeof(float) * (size_t)state_numel(s, i));
        if (!names[n] || !bufs[n]) abort();
        snprintf(names[n], len, "grad.%s", nm);
        CHECK(hr_grad_read(s, nm, bufs[n]) == HR_OK, "%s: gradient of %s: %s", sm->name, nm, hr_last_error());
        for (int d = 0; d < hr_state_ndim(s, i); d++) dims[n][d] = hr_state_dim(s, i, d);
        e[n] = (hr_st_entry){names[n], "F32", hr_state_ndim(s, i), dims[n], bufs[n]};
        n++;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s.grad.safetensors", dir, sm->name);
    CHECK(hr_safetensors_write(path, e, n, NULL, NULL, 0, NULL, NULL) == HR_OK, "%s: write %s: %s", sm->name, path,
          hr_last_error());
    for (int i = 0; i < n; i++) free(names[i]), free(bufs[i]);
    free(e), free(names), free(bufs), free(dims);
    hr_session_free(s);
}

/* The model at BATCH in inference mode: its checkpoint and (x, logits) into
 * dir; then a training step's gradients from the same weights. */
static bool run_model(const suite_model *sm, const char *dir) {
    hr_model_t *m = hr_modelfile_load(sm->path);
    CHECK(m != NULL, "%s: %s", sm->path, hr_last_error());
    if (!m) return false;
    hr_config_t cfg = hr_config_default();
    cfg.batch = BATCH;
    cfg.mode = HR_MODE_INFER;
    cfg.device = HR_DEVICE_CPU;
    cfg.seed = 7;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "%s compiles: %s", sm->name, hr_last_error());
    bool ok = false;
    float *x = NULL, *y = NULL;
    if (!s || hr_session_alloc(s) != HR_OK) {
        CHECK(s == NULL, "%s alloc: %s", sm->name, hr_last_error());
        goto out;
    }
    int64_t np = count_params(s);
    CHECK(np == sm->params, "%s: %lld parameters, published %lld", sm->name, (long long)np, (long long)sm->params);
    check_conv_init(s, sm->name);
    randomise(s);
    int in = hr_model_input(m), out = hr_model_output(m);
    int64_t nx = BATCH, ny = BATCH;
    for (int d = 0; d < hr_tensor_ndim(m, in); d++) nx *= hr_tensor_dim(m, in, d);
    for (int d = 0; d < hr_tensor_ndim(m, out); d++) ny *= hr_tensor_dim(m, out, d);
    int64_t T = sm->vocab ? hr_tensor_dim(m, in, 0) : 1, classes = sm->vocab ? sm->vocab : 10;
    CHECK(ny == BATCH * T * classes, "%s: %lld logits for %d samples", sm->name, (long long)ny, BATCH);
    x = malloc(sizeof(float) * (size_t)nx), y = malloc(sizeof(float) * (size_t)ny);
    if (!x || !y) abort();
    for (int64_t i = 0; i < nx; i++)
        x[i] = sm->vocab ? (float)((int)(urand() * sm->vocab) % sm->vocab) : 2 * urand() - 1;
    CHECK(hr_forward(s, x, y) == HR_OK, "%s forward: %s", sm->name, hr_last_error());
    char path[512];
    snprintf(path, sizeof path, "%s/%s.ckpt.safetensors", dir, sm->name);
    hr_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", sm->name);
    CHECK(hr_checkpoint_save(s, path, &meta) == HR_OK, "%s save: %s", sm->name, hr_last_error());
    int64_t xd[4] = {BATCH, 3, 32, 32}, yd[3] = {BATCH, 10, 0};
    if (sm->vocab) xd[1] = T, yd[1] = T, yd[2] = classes;
    hr_st_entry io[2] = {{"x", "F32", sm->vocab ? 2 : 4, xd, x}, {"logits", "F32", sm->vocab ? 3 : 2, yd, y}};
    snprintf(path, sizeof path, "%s/%s.io.safetensors", dir, sm->name);
    CHECK(nx == (sm->vocab ? BATCH * T : BATCH * 3 * 32 * 32) && hr_safetensors_write(path, io, 2, NULL, NULL, 0, NULL, NULL) == HR_OK,
          "%s: write %s: %s", sm->name, path, hr_last_error());
    snprintf(path, sizeof path, "%s/%s.ckpt.safetensors", dir, sm->name);
    if (sm->train) train_grads(sm, m, path, dir);
    ok = true;
out:
    free(x);
    free(y);
    hr_session_free(s);
    hr_model_free(m);
    return ok;
}

/* The planned peak of a training step (Adam, fp32, CPU) at `batch`. */
static void report_plan(const suite_model *sm, int64_t batch) {
    hr_model_t *m = hr_modelfile_load(sm->path);
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = batch;
    cfg.device = HR_DEVICE_CPU;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "%s plans at batch %lld: %s", sm->name, (long long)batch, hr_last_error());
    if (s) {
        char b[32];
        printf("  %-13s batch %5lld: planned peak %s\n", sm->name, (long long)batch,
               hr_format_bytes(hr_session_report(s)->arena_bytes, b, sizeof b));
    }
    hr_session_free(s);
    hr_model_free(m);
}

int main(void) {
    char dir[] = "/tmp/hr_suite_models.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    bool all = true;
    for (int i = 0; i < NSUITE; i++) all &= run_model(&SUITE[i], dir);
    for (int i = 0; i < NSUITE; i++) {
        report_plan(&SUITE[i], 128);
        report_plan(&SUITE[i], 1024);
    }
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("note: no PyTorch at /usr/bin/python3; skipping the comparison with bench/torch_models.py\n");
    } else if (all) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/torch_models.py check %s", dir);
        fflush(stdout);
        int rc = system(cmd);
        CHECK(rc == 0, "bench/torch_models.py check: the PyTorch models disagree (status %d; its lines above)", rc);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("HR_SUITE_KEEP")) /* the files, to look at with bench/torch_models.py check DIR */
        printf("kept %s\n", dir);
    else
        CHECK(system(cmd) == 0, "remove %s", dir);
    TEST_END();
}
