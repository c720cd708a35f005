/* test_cuda_graph.c — the training step as one CUDA graph: captured at the
 * second step and replayed, it gives the bits of the node-by-node step
 * (HR_CUDA_GRAPH=0) on every state tensor and every loss, over steps whose
 * scalars change (a warm-up and cosine schedule, Adam's bias corrections,
 * SGD's first momentum step, Dropout's masks, BatchNorm's running
 * statistics, clipping); a non-finite loss skips the update on the device
 * exactly as the host's NaN stop did; what cannot be captured (accumulation,
 * fp16's scaler, a profile) runs node by node and says why; accumulation's
 * micro-batches on the device give the bits of the host's loop between
 * them (HR_DEVICE_ACCUMULATE=0), a NaN in one skipping the step; steps queued
 * two at a time (hr_train_submit) give the same bits, their batches staged
 * in a second buffer while the step before runs (or, from 32 MiB, in pieces),
 * and a NaN skips the step queued behind it; and the graph costs no device
 * memory past the plan. Skips (passing) without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cuda_models.h"
#include "exec/internal.h"
#include "exec/session.h"
#include "seed_models.h"

static uint64_t rng_state = 0x9e3779b9;
static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

enum { STEPS = 7 };

typedef struct {
    float *x[STEPS];
    void *y[STEPS];
} batches;

/* STEPS random batches for s's shapes (token ids for an Embedding input). */
static batches make_batches(hr_session_t *s, uint64_t seed) {
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    batches b;
    memset(&b, 0, sizeof b);
    rng_state = seed;
    int64_t K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1; /* the program's tensors hold a micro-batch */
    int64_t nx = K * hr_shape_numel(&g->t[p->input].shape), vocab = 0;
    for (int k = 0; k < p->n_fwd; k++)
        if (g->n[k].op == HR_OP_EMBEDDING && g->n[k].in[0] == p->input) vocab = g->n[k].a.in_f;
    const hr_tensor *lt = &g->t[p->label];
    int64_t nl = K * hr_shape_numel(&lt->shape);
    const hr_shape *os = &g->t[p->output].shape;
    int64_t C = os->d[os->ndim - 1];
    for (int k = 0; k < STEPS; k++) {
        b.x[k] = malloc(sizeof(float) * (size_t)nx);
        b.y[k] = malloc(4 * (size_t)nl);
        for (int64_t i = 0; i < nx; i++)
            b.x[k][i] = vocab ? (float)((int64_t)((frand() + 1.0f) * 0.5f * (float)vocab) % vocab) : frand();
        for (int64_t i = 0; i < nl; i++) {
            if (lt->dtype == HR_I32)
                ((int32_t *)b.y[k])[i] = (int32_t)((frand() + 1.0f) * 0.5f * (float)C) % (int32_t)C;
            else
                ((float *)b.y[k])[i] = frand();
        }
    }
    return b;
}

static void free_batches(batches *b) {
    for (int k = 0; k < STEPS; k++) free(b->x[k]), free(b->y[k]);
}

static hr_session_t *open_cuda(const hr_model_t *m, hr_config_t c, bool graph) {
    if (graph)
        unsetenv("HR_CUDA_GRAPH");
    else
        setenv("HR_CUDA_GRAPH", "0", 1);
    c.device = HR_DEVICE_CUDA;
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_CUDA_GRAPH");
    CHECK(s != NULL, "compile: %s", hr_last_error());
    if (s && hr_session_alloc(s) != HR_OK) {
        CHECK(0, "alloc: %s", hr_last_error());
        hr_session_free(s);
        s = NULL;
    }
    return s;
}

/* Every state tensor of a and b, bit for bit; the number that differ. */
static int state_diff(hr_session_t *a, hr_session_t *b, const char *name) {
    int bad = 0;
    for (int i = 0; i < hr_state_count(a); i++) {
        int64_t n = 1;
        for (int d = 0; d < hr_state_ndim(a, i); d++) n *= hr_state_dim(a, i, d);
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        hr_status s1 = hr_state_read(a, i, va), s2 = hr_state_read(b, i, vb);
        CHECK(!s1 && !s2, "%s: reading %s: %s", name, hr_state_name(a, i), hr_last_error());
        if (!s1 && !s2 && memcmp(va, vb, sizeof(float) * (size_t)n)) {
            if (!bad) fprintf(stderr, "  %s: %s differs\n", name, hr_state_name(a, i));
            bad++;
        }
        free(va);
        free(vb);
    }
    return bad;
}

/* STEPS steps node by node and as a graph (nan_at >= 0: that step's input
 * holds a NaN), the same bits everywhere. */
static void same_bits(const char *name, const hr_model_t *m, hr_config_t c, bool nan_stop, int nan_at) {
    hr_session_t *a = open_cuda(m, c, false), *b = open_cuda(m, c, true);
    if (!a || !b) goto out;
    hr_session_set_nan_stop(a, nan_stop);
    hr_session_set_nan_stop(b, nan_stop);
    batches in = make_batches(a, 77);
    if (nan_at >= 0) in.x[nan_at][3] = NAN;
    int loss_diff = 0;
    for (int k = 0; k < STEPS; k++) {
        float la = 0, lb = 0;
        hr_status sa = hr_train_step(a, in.x[k], in.y[k], &la), sb = hr_train_step(b, in.x[k], in.y[k], &lb);
        CHECK(!sa && !sb, "%s step %d: %s", name, k + 1, hr_last_error());
        if (memcmp(&la, &lb, sizeof la)) loss_diff++, fprintf(stderr, "  %s step %d: loss %.9g vs %.9g\n", name, k + 1, la, lb);
        if (k == nan_at) CHECK(!isfinite(lb), "%s: step %d's loss %g is finite", name, k + 1, lb);
    }
    char why[512];
    int ga = hr_session_graph(a, why, sizeof why), gb = hr_session_graph(b, NULL, 0);
    CHECK(ga == -1 && strstr(why, "HR_CUDA_GRAPH=0"), "%s: HR_CUDA_GRAPH=0 gave %d (%s)", name, ga, why);
    CHECK(gb == 1, "%s: the step was not captured (%d: %s)", name, gb,
          (hr_session_graph(b, why, sizeof why), why));
    const hr_program *pb = hr_session_program(b);
    CHECK(pb->staged >= 0, "%s: no staged batch in the plan (input %lld floats)", name,
          (long long)hr_shape_numel(&pb->g.t[pb->input].shape));
    int64_t want = nan_at >= 0 && nan_stop ? STEPS - 1 : STEPS;
    CHECK(hr_step_count(a) == want && hr_step_count(b) == want, "%s: %lld and %lld steps taken, %lld expected", name,
          (long long)hr_step_count(a), (long long)hr_step_count(b), (long long)want);
    int sd = state_diff(a, b, name);
    CHECK(loss_diff == 0 && sd == 0, "%s: %d losses and %d state tensors differ between the graph and node by node",
          name, loss_diff, sd);
    printf("  %-34s %d steps, graph %s: %d losses, %d of %d state tensors differ\n", name, STEPS,
           gb == 1 ? "captured" : "not captured", loss_diff, sd, hr_state_count(a));
    free_batches(&in);
out:
    hr_session_free(a);
    hr_session_free(b);
}

/* Two steps queued at a time (hr_train_submit, hr_train_wait) against
 * hr_train_step, bit for bit. With a NaN in batch nan_at, the step queued
 * behind it is skipped too: the reference skips that batch. */
static void queued_bits(const char *name, const hr_model_t *m, hr_config_t c, int nan_at) {
    hr_session_t *a = open_cuda(m, c, true), *b = open_cuda(m, c, true);
    if (!a || !b) goto out;
    hr_session_set_nan_stop(a, true);
    hr_session_set_nan_stop(b, true);
    batches in = make_batches(a, 99);
    if (nan_at >= 0) in.x[nan_at][1] = NAN;
    float la[STEPS], lb[STEPS];
    int n = 0;
    for (int k = 0; k < STEPS; k++) {
        if (nan_at >= 0 && k == nan_at + 1) continue; /* queued behind the NaN: skipped */
        CHECK(hr_train_step(a, in.x[k], in.y[k], &la[n++]) == HR_OK, "%s: step: %s", name, hr_last_error());
    }
    int got = 0, bad = 0;
    for (int k = 0; k <= STEPS; k++) {
        if (k < STEPS) CHECK(hr_train_submit(b, in.x[k], in.y[k]) == HR_OK, "%s: submit %d: %s", name, k, hr_last_error());
        if (k == 0) {
            CHECK(hr_train_queued(b) == 1, "%s: %d queued", name, hr_train_queued(b));
            continue;
        }
        if (k == 1) {
            float x;
            CHECK(hr_train_submit(b, in.x[0], in.y[0]) == HR_ERR_INVALID_ARG, "%s: a third step was queued", name);
            CHECK(hr_train_step(b, in.x[0], in.y[0], &x) == HR_ERR_INVALID_ARG, "%s: train_step with steps queued", name);
            CHECK(hr_state_read(b, 0, &x) == HR_ERR_INVALID_ARG, "%s: state read with steps queued", name);
        }
        CHECK(hr_train_wait(b, &lb[got]) == HR_OK, "%s: wait: %s", name, hr_last_error());
        if (nan_at >= 0 && got == nan_at + 1) {
            CHECK(isnan(lb[got]), "%s: the step queued behind the NaN gave loss %g", name, lb[got]);
            got++;
            continue;
        }
        got++;
    }
    CHECK(hr_train_queued(b) == 0, "%s: %d still queued", name, hr_train_queued(b));
    for (int k = 0, j = 0; k < STEPS; k++) {
        if (nan_at >= 0 && k == nan_at + 1) continue;
        if (memcmp(&la[j], &lb[k], sizeof(float))) bad++, fprintf(stderr, "  %s step %d: %.9g vs %.9g\n", name, k, la[j], lb[k]);
        j++;
    }
    CHECK(hr_step_count(a) == hr_step_count(b), "%s: %lld steps queued, %lld one by one", name,
          (long long)hr_step_count(b), (long long)hr_step_count(a));
    int sd = state_diff(a, b, name);
    CHECK(bad == 0 && sd == 0, "%s: %d losses and %d state tensors differ from one step at a time", name, bad, sd);
    printf("  %-34s queued two at a time: %lld steps taken, %d losses and %d state tensors differ\n", name,
           (long long)hr_step_count(b), bad, sd);
    free_batches(&in);
out:
    hr_session_free(a);
    hr_session_free(b);
}

/* Accumulation on the device (the micro-batches queued one after another,
 * the next one's batch staged while this one runs, their losses summed on
 * the device) against the host reading each micro-batch's loss before it
 * sends the next (HR_DEVICE_ACCUMULATE=0): the same bits on every loss and
 * state tensor, steps queued two at a time too; a NaN in one micro-batch of
 * step nan_at skips that step's whole update in both. */
static void accumulated(const char *name, const hr_model_t *m, hr_config_t c, int nan_at) {
    setenv("HR_DEVICE_ACCUMULATE", "0", 1);
    hr_session_t *a = open_cuda(m, c, true);
    unsetenv("HR_DEVICE_ACCUMULATE");
    hr_session_t *b = open_cuda(m, c, true), *q = nan_at < 0 ? open_cuda(m, c, true) : NULL;
    if (!a || !b || (nan_at < 0 && !q)) goto out;
    hr_session_set_nan_stop(a, true);
    hr_session_set_nan_stop(b, true);
    if (q) hr_session_set_nan_stop(q, true);
    const hr_program *pb = hr_session_program(b);
    CHECK(!hr_device_stepped(a) && hr_device_stepped(b), "%s: the device's accumulation is %s, the host's %s", name,
          hr_device_stepped(b) ? "on" : "off", hr_device_stepped(a) ? "on" : "off");
    CHECK(pb->staged >= 0, "%s: no staged micro-batch in the plan", name);
    batches in = make_batches(a, 41);
    int64_t micro = hr_shape_numel(&pb->g.t[pb->input].shape);
    if (nan_at >= 0) in.x[nan_at][micro + 2] = NAN; /* the second micro-batch */
    float la[STEPS], lb[STEPS], lq[STEPS];
    int loss_diff = 0;
    for (int k = 0; k < STEPS; k++) {
        hr_status sa = hr_train_step(a, in.x[k], in.y[k], &la[k]), sb = hr_train_step(b, in.x[k], in.y[k], &lb[k]);
        CHECK(!sa && !sb, "%s step %d: %s", name, k + 1, hr_last_error());
        if (memcmp(&la[k], &lb[k], sizeof(float)))
            loss_diff++, fprintf(stderr, "  %s step %d: loss %.9g (host) vs %.9g (device)\n", name, k + 1, la[k], lb[k]);
        if (k == nan_at) CHECK(!isfinite(lb[k]), "%s: step %d's loss %g is finite", name, k + 1, lb[k]);
    }
    for (int k = 0; q && k <= STEPS; k++) {
        if (k < STEPS) CHECK(hr_train_submit(q, in.x[k], in.y[k]) == HR_OK, "%s: submit: %s", name, hr_last_error());
        if (k > 0) CHECK(hr_train_wait(q, &lq[k - 1]) == HR_OK, "%s: wait: %s", name, hr_last_error());
    }
    int queued_diff = 0;
    for (int k = 0; q && k < STEPS; k++) queued_diff += memcmp(&la[k], &lq[k], sizeof(float)) != 0;
    int64_t want = nan_at >= 0 ? STEPS - 1 : STEPS;
    CHECK(hr_step_count(a) == want && hr_step_count(b) == want, "%s: %lld and %lld steps taken, %lld expected", name,
          (long long)hr_step_count(a), (long long)hr_step_count(b), (long long)want);
    int sd = state_diff(a, b, name), sq = q ? state_diff(a, q, name) : 0;
    CHECK(loss_diff == 0 && sd == 0, "%s: %d losses and %d state tensors differ between the device's accumulation and "
          "the host's", name, loss_diff, sd);
    CHECK(queued_diff == 0 && sq == 0, "%s: queued two at a time, %d losses and %d state tensors differ", name,
          queued_diff, sq);
    char why[512];
    hr_session_graph(b, why, sizeof why);
    CHECK(strstr(why, "accumulation") != NULL, "%s: the reason it is not one graph: '%s'", name, why);
    printf("  %-34s accumulate %d, %d steps: %d losses, %d of %d state tensors differ%s\n", name, c.accumulate, STEPS,
           loss_diff + queued_diff, sd + sq, hr_state_count(a), q ? " (also queued)" : "");
    free_batches(&in);
out:
    hr_session_free(a);
    hr_session_free(b);
    hr_session_free(q);
}

/* A session whose step cannot be one graph runs node by node, and says why. */
static void not_captured(const char *name, const hr_model_t *m, hr_config_t c, const char *reason) {
    hr_session_t *s = open_cuda(m, c, true);
    if (!s) return;
    batches in = make_batches(s, 5);
    for (int k = 0; k < 3; k++) CHECK(hr_train_step(s, in.x[k], in.y[k], NULL) == HR_OK, "%s: %s", name, hr_last_error());
    char why[512];
    int gs = hr_session_graph(s, why, sizeof why);
    CHECK(gs == -1 && strstr(why, reason), "%s: graph state %d, '%s' (expected a reason with '%s')", name, gs, why,
          reason);
    printf("  %-34s node by node: %s\n", name, why);
    const hr_program *p = hr_session_program(s);
    size_t inb = (size_t)hr_shape_numel(&p->g.t[p->input].shape) * sizeof(float);
    CHECK((p->staged >= 0) == (inb < HR_STAGED_INPUT_MAX && c.precision != HR_PREC_FP16),
          "%s: staged batch %d for an input of %zu bytes", name, p->staged, inb);
    free_batches(&in);
    hr_session_free(s);
}

/* With cuDNN's engines timed (the default), a step whose convolutions are
 * not all timed yet runs node by node; the step after it is captured. */
static void captured(const char *name, const hr_model_t *m, hr_config_t c) {
    unsetenv("HR_CUDNN_ALGO");
    hr_session_t *s = open_cuda(m, c, true);
    setenv("HR_CUDNN_ALGO", "deterministic", 1);
    if (!s) return;
    batches in = make_batches(s, 5);
    for (int k = 0; k < 4; k++) CHECK(hr_train_step(s, in.x[k], in.y[k], NULL) == HR_OK, "%s: %s", name, hr_last_error());
    char why[512];
    int gs = hr_session_graph(s, why, sizeof why);
    CHECK(gs == 1, "%s: not captured after 4 steps (%d: %s)", name, gs, why);
    printf("  %-34s timed engines: %s\n", name, gs == 1 ? "captured" : why);
    free_batches(&in);
    hr_session_free(s);
}

/* The graph's own device memory: cudaMemGetInfo's free bytes after the
 * arena, and after 20 steps (captured at the second), the same within one
 * 2 MiB page. */
static void graph_memory(void) {
    hr_model_t *m = seed_mlp();
    hr_config_t c = hr_config_default();
    c.batch = 256;
    hr_session_t *s = open_cuda(m, c, true);
    if (!s) {
        hr_model_free(m);
        return;
    }
    batches in = make_batches(s, 9);
    hr_mem_stats_t m0, m1;
    CHECK(hr_train_step(s, in.x[0], in.y[0], NULL) == HR_OK, "step 1: %s", hr_last_error());
    hr_mem_stats(s, &m0);
    for (int k = 0; k < 20; k++)
        CHECK(hr_train_step(s, in.x[k % STEPS], in.y[k % STEPS], NULL) == HR_OK, "step: %s", hr_last_error());
    float l;
    CHECK(hr_train_step(s, in.x[0], in.y[0], &l) == HR_OK, "step: %s", hr_last_error());
    hr_mem_stats(s, &m1);
    long long grew = (long long)m0.device_free - (long long)m1.device_free;
    printf("  graph memory: device free %lld bytes lower after the capture and 21 replays\n", grew);
    CHECK(hr_session_graph(s, NULL, 0) == 1, "mlp was not captured");
    CHECK(grew <= (2LL << 20), "the captured step took %lld device bytes past the plan", grew);
    free_batches(&in);
    hr_session_free(s);
    hr_model_free(m);
}

/* Informational: mlp at batch 1024, median step node by node and as a graph. */
static double median_step(hr_session_t *s, batches *in) {
    double t[30];
    for (int k = 0; k < 33; k++) {
        struct timespec a, b;
        float l;
        clock_gettime(CLOCK_MONOTONIC, &a);
        hr_train_step(s, in->x[k % STEPS], in->y[k % STEPS], &l);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (k >= 3) t[k - 3] = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
    }
    for (int i = 1; i < 30; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return 0.5 * (t[14] + t[15]);
}

static void timing(void) {
    hr_model_t *m = seed_mlp();
    hr_config_t c = hr_config_default();
    c.batch = 1024;
    hr_session_t *a = open_cuda(m, c, false), *b = open_cuda(m, c, true);
    if (a && b) {
        hr_session_set_nan_stop(a, true);
        hr_session_set_nan_stop(b, true);
        batches in = make_batches(a, 3);
        double ta = median_step(a, &in), tb = median_step(b, &in);
        struct timespec t0, t1;
        float l;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int k = 0; k < 100; k++) {
            hr_train_submit(b, in.x[k % STEPS], in.y[k % STEPS]);
            if (k) hr_train_wait(b, &l);
        }
        hr_train_wait(b, &l);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double tq = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6) / 100;
        printf("  mlp batch 1024, NaN stop on: node by node %.3f ms, one graph %.3f ms a step (median of 30), "
               "queued two at a time %.3f ms (mean of 100)\n", ta, tb, tq);
        free_batches(&in);
    }
    hr_session_free(a);
    hr_session_free(b);
    hr_model_free(m);
}

/* Informational: simple_cnn at batch 4096 in 4 micro-batches, the host
 * between them against the device's accumulation. */
static void accumulate_timing(void) {
    hr_model_t *m = seed_simple_cnn();
    hr_config_t c = hr_config_default();
    c.batch = 4096, c.accumulate = 4;
    setenv("HR_DEVICE_ACCUMULATE", "0", 1);
    hr_session_t *a = open_cuda(m, c, true);
    unsetenv("HR_DEVICE_ACCUMULATE");
    hr_session_t *b = open_cuda(m, c, true);
    if (a && b) {
        batches in = make_batches(a, 4);
        double ta = median_step(a, &in), tb = median_step(b, &in);
        printf("  simple_cnn batch 4096 as 4 x 1024: the host between micro-batches %.3f ms, on the device %.3f ms "
               "a step (median of 30)\n", ta, tb);
        free_batches(&in);
    }
    hr_session_free(a);
    hr_session_free(b);
    hr_model_free(m);
}

static hr_config_t config(int64_t nb, hr_optim_kind k) {
    hr_config_t c = hr_config_default();
    c.batch = nb;
    c.seed = 7;
    c.optim.kind = k;
    return c;
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        TEST_END();
    }
    /* two sessions that each time cuDNN's engines may pick different ones:
     * the first deterministic engine in both, for bit-for-bit comparisons */
    setenv("HR_CUDNN_ALGO", "deterministic", 1);
    printf("the graph's bits against node by node\n");
    hr_model_t *ms[7] = {mlp_dropout(), cnn_bn(), tiny_gpt(), wide_gpt(), seed_deep_cnn(), seed_mlp(), tiny_gpt_p(0.2f)};
    hr_config_t adam = config(16, HR_OPTIM_ADAM);
    adam.optim.clip_norm = 0.5f;
    adam.optim.warmup_steps = 2, adam.optim.decay_steps = 5, adam.optim.min_lr = 1e-4f;
    hr_config_t sgd = config(8, HR_OPTIM_SGD);
    sgd.optim.lr = 0.01f, sgd.optim.momentum = 0.9f, sgd.optim.weight_decay = 1e-4f;
    hr_config_t adamw = config(6, HR_OPTIM_ADAMW);
    adamw.optim.weight_decay = 0.1f, adamw.optim.decay_matrices_only = true;
    adamw.optim.warmup_steps = 3, adamw.optim.decay_steps = 6, adamw.optim.min_lr = 1e-5f;
    same_bits("mlp_dropout adam schedule clip", ms[0], adam, false, -1);
    same_bits("mlp_dropout nan stop", ms[0], adam, true, -1);
    same_bits("cnn_bn sgd momentum", ms[1], sgd, true, -1);
    same_bits("tiny_gpt adamw matrices only", ms[2], adamw, true, -1);
    same_bits("tiny_gpt attention dropout", ms[6], adamw, true, -1); /* the step's draws from the arena */
    same_bits("wide_gpt adamw (LinearCrossEntropy)", ms[3], adamw, true, -1);
    hr_config_t bf = adamw;
    bf.precision = HR_PREC_BF16;
    same_bits("wide_gpt bf16", ms[3], bf, true, -1);
    same_bits("deep_cnn adam", ms[4], config(32, HR_OPTIM_ADAM), true, -1);
    printf("a NaN in step 4's batch: the update skipped on the device\n");
    same_bits("mlp_dropout NaN at step 4", ms[0], adam, true, 3);
    same_bits("cnn_bn NaN at step 5", ms[1], sgd, true, 4);
    captured("deep_cnn", ms[4], config(32, HR_OPTIM_ADAM));
    captured("cnn_bn", ms[1], sgd);
    printf("steps queued ahead\n");
    queued_bits("mlp_dropout", ms[0], adam, -1);
    queued_bits("wide_gpt bf16", ms[3], bf, -1);
    queued_bits("mlp_dropout NaN at step 3", ms[0], adam, 2);
    /* no BatchNorm (a skipped step still updates its statistics), and floats in (a NaN id is refused) */
    queued_bits("seed mlp NaN at step 5", ms[5], sgd, 4);
    queued_bits("seed mlp batch 11000 (in pieces)", ms[5], config(11000, HR_OPTIM_ADAM), -1);
    printf("accumulation on the device against the host between micro-batches\n");
    hr_config_t acc3 = adam;
    acc3.batch = 24, acc3.accumulate = 3;
    accumulated("mlp_dropout adam schedule clip", ms[0], acc3, -1);
    accumulated("mlp_dropout NaN at step 4", ms[0], acc3, 3);
    hr_config_t sgd2 = sgd;
    sgd2.accumulate = 2;
    accumulated("cnn_bn sgd momentum", ms[1], sgd2, -1);
    accumulated("cnn_bn NaN at step 5", ms[1], sgd2, 4);
    hr_config_t aw2 = adamw;
    aw2.accumulate = 2;
    accumulated("tiny_gpt adamw", ms[2], aw2, -1);
    accumulated("tiny_gpt attention dropout", ms[6], aw2, -1);
    hr_config_t bf2 = bf;
    bf2.batch = 8, bf2.accumulate = 4;
    accumulated("wide_gpt bf16", ms[3], bf2, -1);
    hr_config_t dc = config(64, HR_OPTIM_ADAM);
    dc.accumulate = 4;
    accumulated("deep_cnn adam", ms[4], dc, -1);
    printf("steps that stay node by node\n");
    /* an input from HR_STAGED_INPUT_MAX (32 MiB) goes up in pieces, node by node, not staged */
    hr_config_t big = config(11000, HR_OPTIM_ADAM); /* 11000 x 784 floats: 34.5 MB */
    not_captured("seed mlp batch 11000", ms[5], big, "pieces");
    hr_config_t acc = config(16, HR_OPTIM_ADAM);
    acc.accumulate = 2;
    not_captured("accumulate 2", ms[0], acc, "accumulation");
    hr_config_t f16 = config(16, HR_OPTIM_ADAM);
    f16.precision = HR_PREC_FP16;
    not_captured("fp16", ms[0], f16, "loss scaler");
    setenv("HR_PROFILE", "2", 1);
    not_captured("HR_PROFILE=2", ms[0], config(16, HR_OPTIM_ADAM), "profile");
    unsetenv("HR_PROFILE");
    for (int i = 0; i < 7; i++) hr_model_free(ms[i]);
    printf("memory and time\n");
    graph_memory();
    timing();
    accumulate_timing();
    TEST_END();
}
