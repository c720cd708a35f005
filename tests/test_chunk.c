/* test_chunk.c — the first layers in slices of the batch (cfg.chunks):
 * losses and every parameter's gradient against the same step without
 * slices (the same sums in another order: within float rounding; the loss's
 * forward pass bit for bit), on every example model, a residual prefix with
 * Add and Concat, uneven slices, bf16 and accumulation; the plans pass the
 * independent checker and shrink as they must (deep_cnn at batch 256: the
 * step's arena under a quarter); the evaluation pass in slices gives the
 * same outputs; a run is the same bits twice; bad requests are refused.
 * HR_TEST_DEVICE=cuda runs it all on the GPU (scripts/gpu_test.sh does),
 * with tolerances for cuDNN's choice of algorithm per shape. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "io/io.h"

static hr_device dev = HR_DEVICE_CPU;
static double fp32_tol = 1e-5; /* of a gradient's largest value; 1e-4 on a GPU */

static uint64_t prng_s = 7;
static uint64_t prng(void) {
    prng_s ^= prng_s << 13;
    prng_s ^= prng_s >> 7;
    prng_s ^= prng_s << 17;
    return prng_s;
}

static int64_t input_numel(const hr_model_t *m) {
    int x = hr_model_input(m);
    int64_t n = 1;
    for (int i = 0; i < hr_tensor_ndim(m, x); i++) n *= hr_tensor_dim(m, x, i);
    return n;
}

typedef struct {
    float *x;
    int32_t *y;
} batch;

static batch make_batch(const hr_model_t *m, int64_t b) {
    int64_t n = input_numel(m), classes = hr_model_classes(m);
    batch r = {malloc(sizeof(float) * (size_t)(n * b)), malloc(sizeof(int32_t) * (size_t)b)};
    for (int64_t i = 0; i < n * b; i++) r.x[i] = (float)(prng() % 2001) / 1000.0f - 1.0f;
    for (int64_t i = 0; i < b; i++) r.y[i] = (int32_t)(prng() % (uint64_t)classes);
    return r;
}

/* Largest |a - b| over n values, and the largest |b|. */
static void diff(const float *a, const float *b, int64_t n, double *d, double *mx) {
    *d = 0, *mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= *d)) *d = e; /* NaN counts as the largest */
        if (fabs(b[i]) > *mx) *mx = fabs(b[i]);
    }
}

/* One step of the same batch with and without `chunks` slices: the loss,
 * then every parameter's gradient within tol of its largest value; two
 * more steps, losses within 1e-4 (fp32). Returns the slices made. */
static int same_step(const char *label, const hr_model_t *m, hr_config_t cfg, int chunks, double tol) {
    cfg.keep_grads = true;
    cfg.eval_batch = 0;
    cfg.chunks = 0;
    hr_session_t *a = hr_compile(m, &cfg);
    cfg.chunks = chunks;
    hr_session_t *b = hr_compile(m, &cfg);
    CHECK(a && b, "%s: compile: %s", label, hr_last_error());
    if (!a || !b) {
        hr_session_free(a);
        hr_session_free(b);
        return -1;
    }
    char why[256] = "";
    CHECK(hr_plan_verify(hr_session_program(b), hr_session_plan(b), why, sizeof why), "%s: plan check: %s", label, why);
    int made = hr_session_report(b)->chunks;
    CHECK(made == hr_session_program(b)->chunks, "%s: the report says %d slices, the program %d", label, made,
          hr_session_program(b)->chunks);
    CHECK(hr_session_alloc(a) == HR_OK && hr_session_alloc(b) == HR_OK, "%s: alloc: %s", label, hr_last_error());
    for (int t = 0; t < 3; t++) {
        batch d = make_batch(m, cfg.batch);
        float la = 0, lb = 1;
        hr_status sa = hr_train_step(a, d.x, d.y, &la), sb = hr_train_step(b, d.x, d.y, &lb);
        CHECK(sa == HR_OK && sb == HR_OK, "%s: step %d: %s", label, t, hr_last_error());
        if (t == 0) {
            CHECK_CLOSE(lb, la, 0, fp32_tol / 10, "%s: the first step's loss in %d slices", label, made);
            int bad = 0;
            for (int i = 0; i < hr_state_count(a); i++) {
                const char *nm = hr_state_name(a, i);
                int64_t k = 1;
                for (int dd = 0; dd < hr_state_ndim(a, i); dd++) k *= hr_state_dim(a, i, dd);
                float *ga = malloc(sizeof(float) * (size_t)k), *gb = malloc(sizeof(float) * (size_t)k);
                if (hr_grad_read(a, nm, ga) == HR_OK) {
                    CHECK(hr_grad_read(b, nm, gb) == HR_OK, "%s: %s's gradient: %s", label, nm, hr_last_error());
                    double e, mx;
                    diff(gb, ga, k, &e, &mx);
                    if (!(e <= tol * mx + 1e-7)) { /* 1e-7: a bias before a batch norm, whose gradient is rounding alone */
                        if (!bad++)
                            fprintf(stderr, "%s: %s's gradient differs by %.3g (largest value %.3g)\n", label, nm, e, mx);
                    }
                }
                free(ga);
                free(gb);
            }
            CHECK(!bad, "%s: %d gradients differ in %d slices beyond %.0e of their largest value", label, bad, made, tol);
        } else {
            CHECK_CLOSE(lb, la, 0, tol > 1e-3 ? 1e-2 : 1e-4, "%s: step %d's loss", label, t);
        }
        free(d.x);
        free(d.y);
    }
    hr_session_free(a);
    hr_session_free(b);
    return made;
}

static hr_config_t base_cfg(int64_t n) {
    hr_config_t c = hr_config_default();
    c.batch = n;
    c.seed = 3;
    c.device = dev;
    return c;
}

static void test_models(void) {
    static const struct {
        const char *file;
        int64_t n;
        int chunks, want; /* slices asked, made */
    } cases[] = {
        {"examples/mlp.model", 128, 4, 4},       {"examples/mlp.model", 96, 2, 2},
        {"examples/simple_cnn.model", 64, 4, 4}, {"examples/simple_cnn.model", 50, 3, 3},
        {"examples/deep_cnn.model", 32, 4, 4},   {"examples/deep_cnn.model", 37, 5, 5},
        {"examples/fashion.model", 32, 4, 4},    {"examples/resnet_tiny.model", 32, 2, 2},
        {"examples/resnet20.model", 16, 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hr_model_t *m = hr_modelfile_load(cases[i].file);
        CHECK(m, "%s: %s", cases[i].file, hr_last_error());
        if (!m) continue;
        char label[160];
        snprintf(label, sizeof label, "%s batch %lld, %d slices", cases[i].file, (long long)cases[i].n,
                 cases[i].chunks);
        int made = same_step(label, m, base_cfg(cases[i].n), cases[i].chunks, fp32_tol);
        CHECK(made == cases[i].want, "%s: %d slices made, %d expected", label, made, cases[i].want);
        hr_model_free(m);
    }
}

/* bf16 (the slices' products in bf16, their weight gradients summed in
 * F32) and accumulation (each micro-batch sliced). */
static void test_precision_accumulation(void) {
    hr_model_t *m = hr_modelfile_load("examples/deep_cnn.model");
    CHECK(m, "deep_cnn: %s", hr_last_error());
    if (!m) return;
    hr_config_t c = base_cfg(32);
    c.precision = HR_PREC_BF16;
    CHECK(same_step("deep_cnn bf16, 4 slices", m, c, 4, 3e-2) == 4, "deep_cnn bf16: 4 slices");
    c = base_cfg(64);
    c.accumulate = 2;
    CHECK(same_step("deep_cnn accumulate 2, 2 slices", m, c, 2, fp32_tol) == 2, "deep_cnn accumulation: 2 slices");
    hr_model_free(m);
}

/* A prefix with a residual Add, a Concat and a view: slices of every kind
 * of tensor the run makes. */
static void test_graph_prefix(void) {
    const char *text = "input 3 16 16\n"
                       "Conv2d(3, 8, 3, padding=1)\n"
                       "a = ReLU()\n"
                       "Conv2d(8, 8, 3, padding=1)\n"
                       "Add(a)\n"
                       "b = LeakyReLU(0.1)\n"
                       "c = Conv2d(8, 4, 1)(b)\n"
                       "d = AvgPool2d(1)(b)\n"
                       "Concat(c, d)\n"
                       "MaxPool2d(2)\n"
                       "Flatten()\n"
                       "Linear(768, 32)\n"
                       "Tanh()\n"
                       "Linear(32, 5)\n"
                       "loss CrossEntropyLoss\n";
    hr_model_t *m = hr_modelfile_parse(text, "prefix");
    CHECK(m, "prefix model: %s", hr_last_error());
    if (!m) return;
    CHECK(same_step("residual prefix, 3 slices", m, base_cfg(40), 3, fp32_tol) == 3, "residual prefix: 3 slices");
    hr_model_free(m);
}

/* Random per-sample prefixes (convolutions, activations, pools, Add and
 * Concat of named layers), random batches and slice counts: the plans pass
 * the checker and the gradients match the unsliced step's. */
static void test_random_prefixes(void) {
    for (int r = 0; r < 12; r++) {
        char text[4096];
        int n = 0, C = 1 + (int)(prng() % 3), H = 8 + 4 * (int)(prng() % 3);
        int shapes[32][2]; /* per named layer: channels, side */
        n += snprintf(text + n, sizeof text - (size_t)n, "input %d %d %d\n", C, H, H);
        int layers = 3 + (int)(prng() % 6), named = 0;
        for (int l = 0; l < layers; l++) {
            int pick = (int)(prng() % 6);
            char line[160];
            if (pick == 0 || l == 0) {
                int k = prng() % 2 ? 3 : 1, C2 = 2 + (int)(prng() % 5);
                snprintf(line, sizeof line, "Conv2d(%d, %d, %d, padding=%d)", C, C2, k, k / 2);
                C = C2;
            } else if (pick == 1) {
                snprintf(line, sizeof line, "%s", prng() % 2 ? "ReLU()" : "LeakyReLU(0.2)");
            } else if (pick == 2) {
                snprintf(line, sizeof line, "%s", prng() % 2 ? "Tanh()" : "Sigmoid()");
            } else if (pick == 3 && H % 2 == 0 && H >= 4) {
                snprintf(line, sizeof line, "%s", prng() % 2 ? "MaxPool2d(2)" : "AvgPool2d(2)");
                H /= 2;
            } else if (pick == 4 && named) { /* Add a named layer of the same shape, if any */
                int j = (int)(prng() % (uint64_t)named);
                if (shapes[j][0] != C || shapes[j][1] != H) continue;
                snprintf(line, sizeof line, "Add(n%d)", j);
            } else if (pick == 5 && named) { /* Concat the previous output's layer with a named one of its side */
                int j = (int)(prng() % (uint64_t)named);
                if (shapes[j][1] != H || named < 1) continue;
                snprintf(line, sizeof line, "Concat(n%d, n%d)", named - 1, j);
                if (shapes[named - 1][1] != H || shapes[named - 1][0] != C) continue;
                C = shapes[named - 1][0] + shapes[j][0];
            } else {
                continue;
            }
            n += snprintf(text + n, sizeof text - (size_t)n, "n%d = %s\n", named, line);
            shapes[named][0] = C, shapes[named][1] = H;
            named++;
        }
        n += snprintf(text + n, sizeof text - (size_t)n, "Flatten()\nLinear(%d, 5)\nloss CrossEntropyLoss\n", C * H * H);
        hr_model_t *m = hr_modelfile_parse(text, "random prefix");
        CHECK(m, "random prefix %d: %s\n%s", r, hr_last_error(), text);
        if (!m) continue;
        int64_t b = 3 + (int64_t)(prng() % 38);
        int k = 2 + (int)(prng() % 6);
        char label[64];
        snprintf(label, sizeof label, "random prefix %d (batch %lld, %d slices)", r, (long long)b, k);
        int made = same_step(label, m, base_cfg(b), k, fp32_tol);
        /* slices end on 16 bytes of 5 logits: multiples of 4 samples, so a batch past 4 is sliced */
        CHECK(made != 1 && (made >= 2 || b <= 4), "%s: %d slices made\n%s", label, made, text);
        hr_model_free(m);
    }
}

/* The arena shrinks; a run is the same bits twice; the evaluation pass in
 * slices gives the outputs of the one without. */
static void test_memory_and_eval(void) {
    hr_model_t *m = hr_modelfile_load("examples/deep_cnn.model");
    if (!m) return;
    hr_config_t c = base_cfg(256);
    c.eval_batch = 0;
    hr_session_t *a = hr_compile(m, &c);
    c.chunks = 8;
    hr_session_t *b = hr_compile(m, &c);
    CHECK(a && b, "deep_cnn 256: %s", hr_last_error());
    if (a && b) {
        size_t za = hr_session_report(a)->arena_bytes, zb = hr_session_report(b)->arena_bytes;
        CHECK(zb * 4 < za, "deep_cnn at 256 in 8 slices: arena %zu, without %zu (under a quarter expected)", zb, za);
        CHECK(hr_session_report(b)->arena_no_recompute == za, "the report's arena without slices %zu, planned %zu",
              hr_session_report(b)->arena_no_recompute, za);
    }
    hr_session_free(a);
    hr_session_free(b);

    c = base_cfg(24);
    c.eval_batch = 24;
    c.chunks = 3;
    hr_session_t *s1 = hr_compile(m, &c), *s2 = hr_compile(m, &c);
    c.chunks = 0;
    hr_session_t *s0 = hr_compile(m, &c);
    CHECK(s0 && s1 && s2, "deep_cnn 24: %s", hr_last_error());
    if (s0 && s1 && s2 && !hr_session_alloc(s0) && !hr_session_alloc(s1) && !hr_session_alloc(s2)) {
        batch d = make_batch(m, 24);
        float l1 = 0, l2 = 1;
        for (int t = 0; t < 3; t++) {
            CHECK(!hr_train_step(s1, d.x, d.y, &l1) && !hr_train_step(s2, d.x, d.y, &l2), "step: %s", hr_last_error());
            CHECK(!memcmp(&l1, &l2, sizeof l1), "step %d: %.9g and %.9g from the same sliced run", t, l1, l2);
        }
        float o0[24 * 10], o1[24 * 10], o2[24 * 10];
        hr_status e0 = hr_eval_forward(s0, d.x, o0), e1 = hr_eval_forward(s1, d.x, o1);
        CHECK(!e0 && !e1, "eval: %s", hr_last_error());
        CHECK(!hr_eval_forward(s2, d.x, o2) && !memcmp(o1, o2, sizeof o1), "the sliced evaluation twice differs");
        /* s0 has not trained: against a fresh sliced session */
        c.chunks = 3;
        hr_session_t *f = hr_compile(m, &c);
        if (f && !hr_session_alloc(f)) {
            float of[24 * 10];
            CHECK(!hr_eval_forward(f, d.x, of), "eval: %s", hr_last_error());
            double e, mx;
            diff(of, o0, 24 * 10, &e, &mx);
            CHECK(e <= fp32_tol / 10 * mx, "evaluation in 3 slices differs from the whole batch's by %.3g (largest %.3g)", e, mx);
        }
        hr_session_free(f);
        free(d.x);
        free(d.y);
    }
    hr_session_free(s0);
    hr_session_free(s1);
    hr_session_free(s2);
    hr_model_free(m);
}

/* What slices are for: a larger batch in the same memory (deep_cnn in 1 GiB:
 * its first block's activations and their gradients were most of a sample's
 * bytes). */
static void test_largest(void) {
    hr_model_t *m = hr_modelfile_load("examples/deep_cnn.model");
    if (!m) return;
    hr_config_t c = base_cfg(64);
    c.device = HR_DEVICE_CPU;
    int64_t whole = hr_largest_batch(m, &c, (size_t)1 << 30, 0, (int64_t)1 << 30);
    c.chunks = 64;
    int64_t sliced = hr_largest_batch(m, &c, (size_t)1 << 30, 0, (int64_t)1 << 30);
    CHECK(whole > 0 && sliced > 4 * whole, "deep_cnn in 1 GiB: largest batch %lld in 64 slices, %lld whole (over 4x "
          "expected)", (long long)sliced, (long long)whole);
    hr_model_free(m);
}

static void test_refusals(void) {
    hr_model_t *m = hr_modelfile_load("examples/simple_cnn.model");
    if (!m) return;
    hr_config_t c = base_cfg(8);
    c.chunks = -2;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(!s && strstr(hr_last_error(), "--chunks"), "chunks -2: %s", s ? "compiled" : hr_last_error());
    hr_session_free(s);
    c.chunks = 100000; /* an absurd count is refused at once, not planned for seconds */
    s = hr_compile(m, &c);
    CHECK(!s && strstr(hr_last_error(), "at most 4096 slices"), "chunks 100000: %s", s ? "compiled" : hr_last_error());
    hr_session_free(s);
    c.chunks = 9; /* more slices than samples: as many as the batch allows (a largest-batch search asks this) */
    s = hr_compile(m, &c);
    CHECK(s && hr_session_report(s)->chunks == 4, "chunks 9 of 8: %s", s ? "compiled" : hr_last_error());
    hr_session_free(s);
    c.chunks = 2;
    c.mode = HR_MODE_INFER;
    s = hr_compile(m, &c);
    CHECK(!s && strstr(hr_last_error(), "training"), "chunks in inference: %s", s ? "compiled" : hr_last_error());
    hr_session_free(s);
    /* slices start on 16-byte bounds: 10 logits a sample make them even */
    c = base_cfg(8);
    c.chunks = 8;
    s = hr_compile(m, &c);
    CHECK(s && hr_session_report(s)->chunks == 4 && hr_session_report(s)->chunk_samples == 2,
          "simple_cnn at 8 in 8 slices: %d of %lld made (4 of 2 expected)", s ? hr_session_report(s)->chunks : -1,
          s ? (long long)hr_session_report(s)->chunk_samples : -1LL);
    hr_session_free(s);
    hr_model_free(m);
}

int main(void) {
    const char *d = getenv("HR_TEST_DEVICE");
    if (d && !strcmp(d, "cuda")) {
        if (!hr_backend_cuda_available()) {
            printf("SKIP: no CUDA device\n");
            TEST_END();
        }
        dev = HR_DEVICE_CUDA;
        fp32_tol = 1e-4;
        setenv("HR_CUDNN_ALGO", "deterministic", 1); /* the same engine in two sessions: runs twice bit for bit */
    } else {
        /* one convolution path for the batch and its slices: by default the CPU times oneDNN against its own
         * kernels per shape, and on a loaded machine a slice's shape took the other (a CI run: deep_cnn's bf16
         * loss 2.29800057 against 2.29800296); oneDNN where it is loaded, else the CPU's own */
        setenv("HR_DNNL", "2", 0);
    }
    test_models();
    test_precision_accumulation();
    test_graph_prefix();
    test_random_prefixes();
    test_memory_and_eval();
    test_largest();
    test_refusals();
    TEST_END();
}
