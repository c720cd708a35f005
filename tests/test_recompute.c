/* test_recompute.c — activation recomputation: training with recomputed
 * layers gives bit-identical losses, parameters, running statistics and
 * optimizer state to training that keeps everything (every example model,
 * models with dropout and batch norm, random graphs with Add and Concat; fp32,
 * bf16, accumulation), the plans pass the independent checker, the search
 * fits a budget between the smallest plan and the full one, and bad lists
 * are refused by name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "io/io.h"
#include "plan/cost.h"
#include "plan/recompute.h"

#include <time.h>
#include <unistd.h>

static uint64_t prng_s = 1;
static uint64_t prng(void) {
    prng_s ^= prng_s << 13;
    prng_s ^= prng_s >> 7;
    prng_s ^= prng_s << 17;
    return prng_s;
}
static int below(int n) { return (int)(prng() % (uint64_t)n); }

static int64_t input_numel(const hr_model_t *m) {
    int x = hr_model_input(m);
    int64_t n = 1;
    for (int i = 0; i < hr_tensor_ndim(m, x); i++) n *= hr_tensor_dim(m, x, i);
    return n;
}

/* Trains `steps` steps of the same random batches in two sessions, one
 * keeping everything and one recomputing `list`; everything must agree bit
 * for bit. Returns the recomputed session's clone count (-1: failed). */
static int same_training(const char *label, const hr_model_t *m, hr_config_t cfg, const char *list, int steps) {
    cfg.recompute = NULL;
    hr_session_t *a = hr_compile(m, &cfg);
    cfg.recompute = list;
    hr_session_t *b = hr_compile(m, &cfg);
    CHECK(a && b, "%s: compile: %s", label, hr_last_error());
    if (!a || !b) {
        hr_session_free(a);
        hr_session_free(b);
        return -1;
    }
    char why[256] = "";
    CHECK(hr_plan_verify(hr_session_program(b), hr_session_plan(b), why, sizeof why), "%s: plan check: %s", label, why);
    int clones = hr_recompute_count(hr_session_program(b));
    const hr_report_t *rb = hr_session_report(b);
    CHECK(rb->recompute_nodes == clones, "%s: the report counts %d clones, the program has %d", label, rb->recompute_nodes,
          clones);
    CHECK(rb->arena_no_recompute == hr_session_report(a)->arena_bytes || !clones,
          "%s: the arena without recomputation is %zu in the report, %zu planned", label, rb->arena_no_recompute,
          hr_session_report(a)->arena_bytes);
    CHECK(hr_session_alloc(a) == HR_OK && hr_session_alloc(b) == HR_OK, "%s: alloc: %s", label, hr_last_error());
    int64_t n = input_numel(m), classes = hr_model_classes(m);
    int out = hr_model_output(m);
    bool tokens = hr_tensor_ndim(m, out) == 2; /* (time, vocabulary): ids in, a label at every position */
    int64_t per = tokens ? hr_tensor_dim(m, out, 0) : 1;
    float *x = malloc(sizeof(float) * (size_t)(n * cfg.batch));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(cfg.batch * per));
    for (int t = 0; t < steps; t++) {
        for (int64_t i = 0; i < n * cfg.batch; i++)
            x[i] = tokens ? (float)(prng() % (uint64_t)classes) : (float)(prng() % 2001) / 1000.0f - 1.0f;
        for (int64_t i = 0; i < cfg.batch * per; i++) y[i] = (int32_t)(prng() % (uint64_t)classes);
        float la = 0, lb = 1;
        hr_status sa = hr_train_step(a, x, y, &la), sb = hr_train_step(b, x, y, &lb);
        CHECK(sa == HR_OK && sb == HR_OK, "%s: step %d: %s", label, t, hr_last_error());
        CHECK(!memcmp(&la, &lb, sizeof la), "%s: step %d: loss %.9g kept, %.9g recomputed", label, t, la, lb);
    }
    int bad = 0;
    for (int i = 0; i < hr_state_count(a); i++) {
        int j = hr_state_find(b, hr_state_name(a, i));
        int64_t k = 1;
        for (int d = 0; d < hr_state_ndim(a, i); d++) k *= hr_state_dim(a, i, d);
        float *va = malloc(sizeof(float) * (size_t)k), *vb = malloc(sizeof(float) * (size_t)k);
        if (j < 0 || hr_state_read(a, i, va) || hr_state_read(b, j, vb) || memcmp(va, vb, sizeof(float) * (size_t)k)) {
            if (!bad++) fprintf(stderr, "%s: %s differs after %d steps\n", label, hr_state_name(a, i), steps);
        }
        free(va);
        free(vb);
    }
    CHECK(!bad, "%s: %d of %d named tensors differ (parameters, buffers, optimizer state)", label, bad,
          hr_state_count(a));
    free(x);
    free(y);
    hr_session_free(a);
    hr_session_free(b);
    return clones;
}

/* The recomputable layers of m under cfg ("all" spelled out). */
static char *all_layers(const hr_model_t *m, hr_config_t cfg) {
    cfg.recompute = "all";
    hr_session_t *s = hr_compile(m, &cfg);
    char *r = s && hr_session_report(s)->recompute ? strdup(hr_session_report(s)->recompute) : strdup("");
    hr_session_free(s);
    return r;
}

/* A random subset of a list of layers (at least one). */
static void subset(const char *all, char *out, size_t n) {
    out[0] = 0;
    char *copy = strdup(all), *save = NULL;
    size_t k = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (below(2) && k + strlen(t) + 2 < n) k += (size_t)snprintf(out + k, n - k, "%s%s", k ? "," : "", t);
    if (!k) snprintf(out, n, "%.*s", (int)strcspn(all, ","), all);
    free(copy);
}

static void test_models(void) {
    static const char *files[] = {"examples/mlp.model", "examples/simple_cnn.model", "examples/deep_cnn.model",
                                  "examples/resnet_tiny.model", "examples/fashion.model"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        hr_model_t *m = hr_modelfile_load(files[f]);
        CHECK(m, "%s: %s", files[f], hr_last_error());
        if (!m) continue;
        hr_config_t cfg = hr_config_default();
        cfg.batch = 4;
        char *all = all_layers(m, cfg), label[800], some[512];
        CHECK(*all, "%s: no layer can be recomputed", files[f]);
        snprintf(label, sizeof label, "%s, all (%s)", files[f], all);
        CHECK(same_training(label, m, cfg, "all", 3) > 0, "%s: nothing recomputed", label);
        for (int r = 0; r < 3; r++) {
            subset(all, some, sizeof some);
            snprintf(label, sizeof label, "%s, %s", files[f], some);
            same_training(label, m, cfg, some, 2);
        }
        /* mixed precision, accumulation, SGD with momentum and clipping */
        hr_config_t c2 = cfg;
        c2.precision = HR_PREC_BF16;
        snprintf(label, sizeof label, "%s, bf16, all", files[f]);
        same_training(label, m, c2, "all", 2);
        c2 = cfg;
        c2.accumulate = 2;
        c2.optim.kind = HR_OPTIM_SGD;
        c2.optim.lr = 0.01f;
        c2.optim.momentum = 0.9f;
        c2.optim.clip_norm = 1.0f;
        snprintf(label, sizeof label, "%s, accumulate 2, SGD, clipping, all", files[f]);
        same_training(label, m, c2, "all", 2);
        c2 = cfg;
        c2.precision = HR_PREC_FP16;
        snprintf(label, sizeof label, "%s, fp16 (loss scaling), all", files[f]);
        same_training(label, m, c2, "all", 2);
        free(all);
        hr_model_free(m);
    }
}

/* Random graphs: Linear, activations, LayerNorm, BatchNorm1d, Dropout,
 * residual Adds and Concats. */
static hr_model_t *random_model(int blocks, int64_t F) {
    hr_model_t *m = hr_model_new("random");
    int outs[64], n = 0;
    int x = hr_input(m, "x", 1, &F);
    outs[n++] = x;
    for (int i = 0; i < blocks && x >= 0 && n < 64; i++) {
        switch (below(7)) {
        case 0: case 1:
            x = hr_linear(m, NULL, x, F, F, below(4) != 0);
            if (x >= 0 && below(2)) x = below(2) ? hr_relu(m, NULL, x) : hr_gelu(m, NULL, x, below(2));
            break;
        case 2: x = below(2) ? hr_layernorm(m, NULL, x, 1, &F, 1e-5f, true, true) : hr_batchnorm(m, NULL, x, F, 1e-5f, 0.1f); break;
        case 3: x = hr_dropout(m, NULL, x, 0.3f); break;
        case 4: x = hr_add(m, NULL, x, outs[n - 1 - below(n < 6 ? n : 6)]); break;
        default: {
            int xs[2] = {x, outs[n - 1 - below(n < 6 ? n : 6)]};
            x = hr_concat(m, NULL, 2, xs);
            if (x >= 0) x = hr_linear(m, NULL, x, 2 * F, F, true);
            break;
        }
        }
        outs[n++] = x;
    }
    if (x >= 0) x = hr_linear(m, NULL, x, F, 5, true);
    if (x >= 0) x = hr_loss_cross_entropy(m, x, 5);
    CHECK(x >= 0, "random model: %s", hr_last_error());
    if (x < 0) hr_model_free(m), m = NULL;
    return m;
}

static void test_random(void) {
    for (int k = 0; k < 12; k++) {
        prng_s = 77 + (uint64_t)k;
        hr_model_t *m = random_model(6 + below(20), 8);
        if (!m) continue;
        hr_config_t cfg = hr_config_default();
        cfg.batch = 6;
        char *all = all_layers(m, cfg), some[2048], label[2200];
        snprintf(label, sizeof label, "random model %d, all", k);
        same_training(label, m, cfg, "all", 2);
        subset(all, some, sizeof some);
        snprintf(label, sizeof label, "random model %d, %s", k, some);
        same_training(label, m, cfg, some, 2);
        free(all);
        hr_model_free(m);
    }
}

/* The search: min is no larger than keeping everything; a budget between
 * the two is met, by no more predicted time than min's; a budget below min
 * is reported as not fitting. */
static void test_search(void) {
    hr_model_t *m = hr_modelfile_load("examples/resnet_tiny.model");
    CHECK(m, "resnet_tiny: %s", hr_last_error());
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 256;
    hr_session_t *none = hr_compile(m, &cfg);
    cfg.recompute = "min";
    hr_session_t *mn = hr_compile(m, &cfg);
    CHECK(none && mn, "compile: %s", hr_last_error());
    if (!none || !mn) return;
    size_t a0 = hr_session_report(none)->arena_bytes, am = hr_session_report(mn)->arena_bytes;
    CHECK(am < a0 * 3 / 4, "min recomputation saves at least a quarter on resnet_tiny: %zu of %zu", am, a0);
    cfg.recompute = "auto";
    cfg.device_budget = (a0 + am) / 2;
    hr_session_t *au = hr_compile(m, &cfg);
    CHECK(au, "compile auto: %s", hr_last_error());
    if (au) {
        const hr_report_t *r = hr_session_report(au);
        CHECK(r->device_total <= cfg.device_budget, "auto: %zu over the budget %zu", r->device_total, cfg.device_budget);
        CHECK(r->recompute && r->recompute_extra_ms <= hr_session_report(mn)->recompute_extra_ms,
              "auto's predicted extra time %.3f ms is no more than min's %.3f", r->recompute_extra_ms,
              hr_session_report(mn)->recompute_extra_ms);
        char why[256] = "";
        CHECK(hr_plan_verify(hr_session_program(au), hr_session_plan(au), why, sizeof why), "auto plan: %s", why);
    }
    /* a budget that keeping everything meets: nothing recomputed */
    cfg.device_budget = a0;
    hr_session_t *fit = hr_compile(m, &cfg);
    CHECK(fit && !hr_session_report(fit)->recompute, "auto within the full plan's budget recomputes nothing");
    /* below min: compiled (min's plan), and the allocation refuses it */
    cfg.device_budget = am / 2;
    hr_session_t *low = hr_compile(m, &cfg);
    CHECK(low && hr_session_report(low)->device_total > cfg.device_budget, "auto below min: the plan does not fit");
    if (low) CHECK(hr_session_alloc(low) == HR_ERR_DEVICE_OOM, "auto below min: alloc refuses: %s", hr_last_error());
    /* the largest batch with recomputation is larger */
    hr_config_t c = hr_config_default();
    int64_t plain = hr_largest_batch(m, &c, a0, 0, 1 << 20);
    c.recompute = "auto";
    int64_t more = hr_largest_batch(m, &c, a0, 0, 1 << 20);
    /* (at least 256: packing another batch may happen to fit tighter, as 257 does since Copy runs in place) */
    CHECK(plain >= 256 && plain < 256 * 21 / 20 && more > plain * 5 / 4,
          "largest batch within batch 256's arena: %lld keeping, %lld recomputing", (long long)plain, (long long)more);
    /* ... and exact: min's own search fits at that batch and not one past it
     * (the search bisects with the layers min keeps at the config's batch,
     * then confirms with a searched probe) */
    c.recompute = "min";
    c.batch = 64;
    int64_t mb = hr_largest_batch(m, &c, a0, 0, 1 << 20);
    for (int d = 0; d < 2; d++) {
        hr_config_t at = c;
        at.batch = mb + d;
        hr_session_t *q = hr_compile(m, &at);
        CHECK(q && (hr_session_report(q)->arena_bytes <= a0) == !d, "min at the largest batch %lld%s: arena %zu, "
              "budget %zu", (long long)mb, d ? " + 1" : "", q ? hr_session_report(q)->arena_bytes : 0, a0);
        hr_session_free(q);
    }
    hr_session_free(none);
    hr_session_free(mn);
    hr_session_free(au);
    hr_session_free(fit);
    hr_session_free(low);
    hr_model_free(m);
}

static void test_errors(void) {
    hr_model_t *m = hr_modelfile_load("examples/simple_cnn.model");
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.recompute = "0,nosuch";
    CHECK(!hr_compile(m, &cfg) && strstr(hr_last_error(), "'nosuch'"), "unknown layer named: %s", hr_last_error());
    cfg.recompute = "4"; /* the Linear that makes the model's output */
    CHECK(!hr_compile(m, &cfg) && strstr(hr_last_error(), "cannot be recomputed"), "output layer refused: %s",
          hr_last_error());
    cfg.recompute = "all";
    cfg.mode = HR_MODE_INFER;
    CHECK(!hr_compile(m, &cfg) && strstr(hr_last_error(), "training"), "inference refuses it: %s", hr_last_error());
    cfg.recompute = "auto";
    CHECK(!hr_compile(m, &cfg) && strstr(hr_last_error(), "training"), "inference refuses auto: %s", hr_last_error());
    cfg.mode = HR_MODE_TRAIN;
    cfg.recompute = " 0 , 1 ";
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s && !strcmp(hr_session_report(s)->recompute, "0,1"), "spaces around names: %s",
          s ? hr_session_report(s)->recompute : hr_last_error());
    hr_session_free(s);
    cfg.recompute = "none";
    s = hr_compile(m, &cfg);
    CHECK(s && !hr_session_report(s)->recompute, "none recomputes nothing");
    hr_session_free(s);
    hr_model_free(m);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* fit's search on the CPU backend with estimated costs: a budget the full
 * plan meets keeps everything in one pass; a smaller one is met by
 * accumulation or recomputation (every candidate that says it fits does);
 * too small a budget has no choice; allowed precisions are weighed; every
 * example model answers in under 2 s. */
static void test_fit(void) {
    char dir[] = "/tmp/hr_fit_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    setenv("HR_CACHE_DIR", dir, 1);
    hr_cost_model *cm = hr_cost_model_new(HR_DEVICE_CPU, "test cpu", "none");
    hr_model_t *m = hr_modelfile_load("examples/resnet_tiny.model");
    CHECK(cm && m, "setup: %s", hr_last_error());
    if (!cm || !m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 256;
    cfg.eval_batch = 0;
    hr_session_t *s = hr_compile(m, &cfg);
    hr_backend *be = hr_session_backend(s);
    size_t a0 = hr_session_report(s)->arena_bytes;
    hr_fit_result r;
    CHECK(hr_fit_search(m, &cfg, 0, true, be, false, a0, 0, cm, &r) == HR_OK && r.best >= 0, "fit at the full plan");
    if (r.best >= 0)
        CHECK(r.c[r.best].accumulate == 1 && !r.c[r.best].recompute && r.c[r.best].total == a0,
              "the full plan's budget: one pass, nothing recomputed (K %d, total %zu of %zu)", r.c[r.best].accumulate,
              r.c[r.best].total, a0);
    hr_fit_result_free(&r);
    CHECK(hr_fit_search(m, &cfg, 0, true, be, false, a0 * 3 / 4, 0, cm, &r) == HR_OK && r.best >= 0, "fit at 75%%");
    bool recomputed = false;
    for (int i = 0; i < r.n; i++) {
        CHECK(r.c[i].fits == (r.c[i].total <= a0 * 3 / 4), "candidate %d: fits says %d for %zu", i, r.c[i].fits,
              r.c[i].total);
        recomputed |= r.c[i].recompute && r.c[i].fits && r.c[i].accumulate == 1;
        CHECK(r.c[i].step_s > 0 && r.c[i].micro * r.c[i].accumulate == 256, "candidate %d: %lld x %d, %.3g s", i,
              (long long)r.c[i].micro, r.c[i].accumulate, r.c[i].step_s);
    }
    CHECK(recomputed, "at 75%% of the plan, one pass of 256 fits by recomputation");
    /* the choice, compiled as train would: the same total */
    if (r.best >= 0) {
        hr_config_t c = cfg;
        c.accumulate = r.c[r.best].accumulate;
        c.recompute = r.c[r.best].recompute;
        hr_session_t *t = hr_compile(m, &c);
        CHECK(t && hr_session_report(t)->device_total == r.c[r.best].total, "the choice compiles to its total");
        hr_session_free(t);
    }
    hr_fit_result_free(&r);
    CHECK(hr_fit_search(m, &cfg, 0, true, be, false, 4096, 0, cm, &r) == HR_OK && r.best < 0, "4 KiB: nothing fits");
    hr_fit_result_free(&r);
    unsigned both = 1u << HR_PREC_FP32 | 1u << HR_PREC_BF16;
    CHECK(hr_fit_search(m, &cfg, both, true, be, false, a0, 0, cm, &r) == HR_OK, "fp32 and bf16");
    int bf = 0;
    for (int i = 0; i < r.n; i++) bf += r.c[i].precision == HR_PREC_BF16;
    CHECK(bf > 0, "bf16 candidates weighed: %d", bf);
    hr_fit_result_free(&r);
    hr_session_free(s);
    hr_model_free(m);
    static const char *files[] = {"examples/mlp.model", "examples/simple_cnn.model", "examples/deep_cnn.model",
                                  "examples/resnet_tiny.model", "examples/fashion.model"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        m = hr_modelfile_load(files[f]);
        if (!m) continue;
        s = hr_compile(m, &cfg);
        if (!s) continue;
        size_t full = hr_session_report(s)->arena_bytes;
        double t0 = now_s();
        hr_status st = hr_fit_search(m, &cfg, both, true, hr_session_backend(s), false, full / 2, 0, cm, &r);
        double dt = now_s() - t0;
        /* (mlp's parameters and Adam's state alone are more than half of its plan) */
        CHECK(st == HR_OK && (r.best >= 0 || f == 0) && dt < 2.0,
              "%s: fit of batch 256 within half its plan: %s in %.2f s", files[f], r.best >= 0 ? "found" : "nothing", dt);
        printf("fit %s, batch 256, budget %zu: %d candidates in %.3f s\n", files[f], full / 2, r.n, dt);
        hr_fit_result_free(&r);
        hr_session_free(s);
        hr_model_free(m);
    }
    hr_cost_model_free(cm);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* A small GPT with nanoGPT's dropouts, attention probabilities included:
 * recomputing every layer draws the same decisions again (nothing of them
 * is stored), so training gives the same bits, with accumulation too. */
static void test_attention_drops(void) {
    const char *gpt = "input 12\ninit gpt2\nwte = Embedding(20, 16)\nwpe = PositionEmbedding(12, 16)\n"
                      "drop = Dropout(0.2)\nln = LayerNorm(16)\nc_attn = Linear(16, 48)\n"
                      "sdpa = CausalSelfAttention(16, 2, attn_pdrop=0.3)\nc_proj = Linear(16, 16)\n"
                      "resid = Dropout(0.2)\nr = Add(drop)\nGELU()\nLinear(16, 20, tied_to='wte')\n"
                      "loss CrossEntropyLoss\n";
    hr_model_t *m = hr_modelfile_parse(gpt, "gpt_drops.model");
    CHECK(m, "gpt_drops: %s", hr_last_error());
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 4;
    CHECK(same_training("gpt with attention dropout, all", m, cfg, "all", 3) > 0, "nothing recomputed");
    cfg.accumulate = 2;
    same_training("gpt with attention dropout, accumulate 2, sdpa,c_attn", m, cfg, "sdpa,c_attn", 2);
    hr_model_free(m);
}

/* Patterns: '*.mlp.gelu' names the GELU of every block (the layers llm.c's
 * -r 1 recomputes), the same list as naming each; all matching layers train
 * as without recomputation; a pattern that names nothing is refused. */
static void test_patterns(void) {
    hr_model_t *m = hr_modelfile_load("examples/char_gpt.model");
    CHECK(m, "char_gpt: %s", hr_last_error());
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2;
    char names[1024] = "";
    for (int b = 0; b < 6; b++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%stransformer.h.%d.mlp.gelu", b ? "," : "", b);
    cfg.recompute = "*.mlp.gelu";
    hr_session_t *s = hr_compile(m, &cfg);
    const char *got = s ? hr_session_report(s)->recompute : NULL;
    CHECK(got && !strcmp(got, names), "'*.mlp.gelu' recomputes %s; want %s (%s)", got ? got : "nothing", names,
          s ? "" : hr_last_error());
    hr_session_free(s);
    cfg.recompute = "transformer.h.*.attn.c_*, *.nothing";
    hr_error_clear();
    CHECK(!hr_compile(m, &cfg) && hr_last_status() == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "*.nothing"),
          "a pattern that names no layer: '%s'", hr_last_error());
    hr_model_free(m);
    hr_model_t *r = hr_modelfile_load("examples/resnet_tiny.model");
    if (r) {
        hr_config_t c = hr_config_default();
        c.batch = 4;
        CHECK(same_training("resnet_tiny, pattern *", r, c, "*", 2) > 0, "'*' recomputes nothing on resnet_tiny");
        hr_model_free(r);
    }
}

/* A residual whose two branches wait for one clone: the Add reads the
 * stream (wpe's output) and the MLP's output, a Linear's backward reads the
 * Add's output, and the MLP's first clone (ln) reads the stream too. The stream's clone, pushed first, waits below
 * the MLP's; it must be made before ln's clone reads it (it once was not:
 * ln's clone read a tensor no node had made). With the GELUs in their
 * Linears (the default) and apart. */
static void test_diamond(void) {
    hr_model_t *m = hr_model_new("diamond");
    int x = hr_input(m, "tokens", 1, (int64_t[]){8});
    int e = hr_embedding(m, "wte", x, 20, 16);
    e = hr_position_embedding(m, "wpe", e, 8, 16);
    int h = hr_layernorm(m, "ln", e, 1, (int64_t[]){16}, 1e-5f, true, true);
    h = hr_gelu(m, "g1", hr_linear(m, "fc1", h, 16, 32, true), true);
    h = hr_gelu(m, "g2", hr_linear(m, "fc2", h, 32, 16, true), true);
    h = hr_add(m, "r", e, h); /* the stream first: its clone is pushed below the MLP's */
    h = hr_linear(m, "fc3", h, 16, 16, true); /* its backward reads r's output: r's clone is needed */
    CHECK(hr_loss_cross_entropy(m, hr_linear(m, "head", h, 16, 20, false), 20) >= 0, "diamond: %s", hr_last_error());
    hr_config_t cfg = hr_config_default();
    cfg.batch = 4;
    for (int apart = 0; apart < 2; apart++) {
        if (apart) setenv("HR_FUSE_ACT", "0", 1);
        CHECK(same_training(apart ? "diamond, activations apart, all" : "diamond, all", m, cfg, "all", 3) > 0,
              "diamond: nothing recomputed");
        unsetenv("HR_FUSE_ACT");
    }
    hr_model_free(m);
}

int main(void) {
    test_diamond();
    test_fit();
    test_patterns();
    test_attention_drops();
    test_models();
    test_random();
    test_search();
    test_errors();
    TEST_END();
}
