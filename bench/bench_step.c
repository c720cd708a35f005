/* bench_step.c — training-step time and memory of a model file on random
 * data, one JSON line out.
 *
 *   bench_step MODEL BATCH [steps=20] [warmup=3] [cpu|cuda]
 *       Median (and mean, min, max) step time of Adam(1e-3) + the model's loss.
 *       Every step is hr_train_step from a host (pageable) batch with the loss
 *       read back, which synchronises: the host clock around it is what a
 *       training loop sees; then the same number of steps queued two at a
 *       time (hr_train_submit / hr_train_wait: the host stages batch t+1
 *       while the device runs step t), their mean as queued_ms. graph: 1
 *       when the step ran as one captured CUDA graph, -1 with graph_why
 *       when it ran node by node. On CUDA the JSON also holds the memory story:
 *       the planned arena, cudaMemGetInfo's free bytes before and after the
 *       arena's allocation and after the timed steps (what the first steps
 *       load lazily, e.g. library kernels), hr_mem_stats, the measured
 *       runtime overhead and the device allocations made by the steps.
 *
 *   bench_step --largest MODEL BATCH [cuda|cpu]
 *       The largest batch that fits this device, from the planner alone:
 *       with the context and library handles made (a session compiled at
 *       BATCH, nothing allocated), hr_largest_batch_on searches the plans
 *       whose arena fits the free memory (budget = free + overhead, the
 *       overhead being the measured context and handles). The free memory is
 *       read again after the search (nothing may have been allocated). Then
 *       one real training step at that batch confirms it: a session compiled
 *       at that batch reads the free memory again just before allocating; if
 *       the plan does not fit it (cudaMalloc rounds the arena up to 2 MiB
 *       pages, which the planner's fit test does not count), the batch is
 *       re-planned with that session (plans only, budget less 2 MiB) and
 *       tried again; if the allocation or the step fails, it is re-planned
 *       with a margin (512 MiB, then 2 GiB). The JSON lists every attempt.
 *
 *   Options, anywhere on the line (both forms):
 *       --precision fp32|bf16|fp16   mixed precision as `headroom train
 *                                    --precision` (hr_config_t.precision);
 *                                    HR_BENCH_PRECISION=bf16|fp16 in the
 *                                    environment does the same, the option wins.
 *                                    fp32 when neither. On the CPU, bf16 and
 *                                    fp16 run through fp32 copies (slow).
 *       --optim adam|adamw|sgd       the optimizer (adam when absent, lr 1e-3,
 *                                    sgd 0.01; adamw decays 0.01 decoupled, as
 *                                    torch.optim.AdamW's default and `headroom
 *                                    train --optim adamw`)
 *       --accumulate K, --recompute none|all|auto|min|LAYERS, --budget BYTES
 *       --tf32                       TF32 products and convolutions
 *                                    (hr_config_t.allow_tf32)
 *   HR_BENCH_CALIBRATE=1: after the timed steps, the cost model measures
 *       this session as `fit` does (hr_cost_measure, into the cache) and the
 *       JSON adds its prediction (calibrated_ms) and the median of as many
 *       steps timed after it (median_after_calibration_ms). HR_BENCH_NVML=0:
 *       no NVML witness thread.
 *   A next-token model (output (time, vocabulary)) gets random ids in
 *   [0, vocabulary) and its JSON also has tokens_per_s (batch x time / median).
 *   On CUDA the step time's JSON has NVML's witness too: this process's device
 *   memory read by a thread every 5 ms from before the arena's allocation to
 *   the last timed step (nvml_peak, nvml_end, bytes; nvml_how: how the process
 *   was found in the driver's list), or nvml_unavailable with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/nvml.h"
#include "exec/internal.h"
#include "headroom.h"
#include "io/io.h"
#include "plan/cost.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void json_escape(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 32)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* A random batch: uniform [-1, 1) inputs (token ids in [0, classes) for a
 * model whose output is (time, classes): a next-token model) and uniform
 * labels, one a sample or one a position. Large batches repeat a 64 MiB random
 * block (filling gigabytes one rand() at a time takes longer than the step). */
typedef struct {
    float *x;
    int32_t *y;
    int64_t per, classes;
    bool tokens; /* a next-token model: per is the time steps */
    size_t mapped; /* x is an mmap of this many bytes (0: malloc) */
} batch_t;

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A batch of random values (the first 16 Mi repeated). `light`: the
 * largest-batch search's confirming step, whose batch may be larger than
 * the host's memory (mlp on an H200 with slices: 35 M samples, 140 GB):
 * past the first 16 Mi values the input is zeros, pages the kernel has not
 * written (mmap: reading them takes no memory). */
static int make_batch(const hr_model_t *m, int64_t batch, batch_t *b, bool light) {
    int in = hr_model_input(m), out = hr_model_output(m);
    b->per = 1;
    for (int d = 0; d < hr_tensor_ndim(m, in); d++) b->per *= hr_tensor_dim(m, in, d);
    int od = hr_tensor_ndim(m, out);
    bool tokens = od == 2; /* (time, vocabulary): ids in, a label at every position */
    int64_t labels = tokens ? hr_tensor_dim(m, out, 0) : 1;
    b->classes = hr_tensor_dim(m, out, od - 1);
    b->tokens = tokens;
    size_t n = (size_t)(b->per * batch);
    b->mapped = light ? sizeof(float) * n : 0;
    if (light) {
        void *p = mmap(NULL, b->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        b->x = p == MAP_FAILED ? NULL : p;
        if (!b->x) b->mapped = 0;
    } else {
        b->x = malloc(sizeof(float) * n);
    }
    b->y = malloc(sizeof(int32_t) * (size_t)(batch * labels));
    if (!b->x || !b->y) return -1;
    size_t block = n < ((size_t)16 << 20) ? n : ((size_t)16 << 20);
    for (size_t i = 0; i < block; i++)
        b->x[i] = tokens ? (float)(next_u64() % (uint64_t)b->classes)
                         : (float)(next_u64() >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (!light)
        for (size_t i = block; i < n; i += block) memcpy(b->x + i, b->x, sizeof(float) * (n - i < block ? n - i : block));
    for (int64_t i = 0; i < batch * labels; i++) b->y[i] = (int32_t)(next_u64() % (uint64_t)b->classes);
    return 0;
}

static void free_batch(batch_t *b) {
    if (b->mapped) munmap(b->x, b->mapped);
    else free(b->x);
    free(b->y);
}

static size_t overhead_of(hr_session_t *s) {
    hr_backend *be = hr_session_backend(s);
    return be->overhead ? be->overhead(be) : 0;
}

static int fail(const char *what, const char *model, long long batch) {
    printf("{\"impl\": \"headroom\", \"model\": ");
    json_escape(stdout, model);
    printf(", \"batch\": %lld, \"error\": ", batch);
    json_escape(stdout, what);
    printf(", \"message\": ");
    json_escape(stdout, hr_last_error());
    printf("}\n");
    fprintf(stderr, "bench_step: %s: %s\n", what, hr_last_error());
    return 1;
}

/* "fp32", "bf16", "fp16" -> *p; false for anything else. */
static bool parse_precision(const char *v, hr_precision *p) {
    if (!strcmp(v, "fp32")) *p = HR_PREC_FP32;
    else if (!strcmp(v, "bf16")) *p = HR_PREC_BF16;
    else if (!strcmp(v, "fp16")) *p = HR_PREC_FP16;
    else return false;
    return true;
}

/* Options anywhere on the line: --precision P (or HR_BENCH_PRECISION),
 * --optim O, --accumulate K, --recompute LIST|all|auto|min, --chunks K (the
 * first layers in slices), --budget BYTES (what auto fits). */
static struct {
    const char *recompute;
    hr_precision precision;
    hr_optim_kind optim;
    int accumulate;
    int chunks;
    size_t budget;
    bool tf32;
} opt = {.optim = HR_OPTIM_ADAM};

static void configure(hr_config_t *c) {
    c->precision = opt.precision;
    c->optim.kind = opt.optim;
    if (opt.optim == HR_OPTIM_SGD) c->optim.lr = 0.01f;
    if (opt.optim == HR_OPTIM_ADAMW) c->optim.weight_decay = 0.01f;
    c->accumulate = opt.accumulate;
    c->chunks = opt.chunks;
    c->recompute = opt.recompute;
    c->device_budget = opt.budget;
    c->allow_tf32 = opt.tf32;
}

/* The step's predicted time from this device's cost cache (what `headroom
 * fit` measured), and how many nodes of it were measured. */
static double predicted_ms(hr_session_t *s, bool cuda, int *measured, int *estimated) {
    hr_cost_model *cm = hr_cost_model_here(cuda);
    if (!cm) return -1;
    double ms = 1e3 * hr_cost_step(cm, hr_session_program(s));
    hr_cost_count(cm, hr_session_program(s), measured, estimated);
    hr_cost_model_free(cm);
    return ms;
}

/* ---- step time and memory ------------------------------------------------------ */
static int bench(const char *model, int64_t batch, int steps, int warm, bool cuda) {
    hr_model_t *m = hr_modelfile_load(model);
    if (!m) return fail("load", model, batch);
    hr_config_t c = hr_config_default();
    c.batch = batch;
    c.device = cuda ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    configure(&c);
    hr_session_t *s = hr_compile(m, &c);
    if (!s) return fail("compile", model, batch);
    int n_meas = 0, n_est = 0;
    double pred = predicted_ms(s, cuda, &n_meas, &n_est);
    hr_mem_stats_t m0, m1, m2, m3;
    hr_mem_stats(s, &m0); /* context and handles made, nothing allocated */
    const char *bus = cuda ? hr_session_backend(s)->device_id : NULL;
    const char *nv_env = getenv("HR_BENCH_NVML"); /* 0: no witness (its polling's cost on the step) */
    hr_nvml_sampler *witness = bus && !(nv_env && !strcmp(nv_env, "0")) ? hr_nvml_sampler_start(NULL, bus, -1, 5) : NULL;
    if (hr_session_alloc(s) != HR_OK) return fail("alloc", model, batch);
    hr_mem_stats(s, &m1);
    batch_t b;
    if (make_batch(m, batch, &b, false)) return fail("host memory", model, batch);
    double *t = malloc(sizeof(double) * (size_t)(steps > 0 ? steps : 1));
    float loss = 0;
    for (int i = 0; i < warm + steps; i++) {
        if (i == warm) hr_mem_stats(s, &m2);
        double t0 = now();
        if (hr_train_step(s, b.x, b.y, &loss) != HR_OK) return fail("step", model, batch);
        if (i >= warm) t[i - warm] = now() - t0;
    }
    /* the same steps queued two at a time (hr_train_submit): the host stages
     * batch t+1 while the device runs step t; the mean over `steps` */
    double queued = 0;
    if (steps > 0) {
        double q0 = now();
        for (int i = 0; i <= steps; i++) {
            if (i < steps && hr_train_submit(s, b.x, b.y) != HR_OK) return fail("submit", model, batch);
            if (i > 0 && hr_train_wait(s, &loss) != HR_OK) return fail("wait", model, batch);
        }
        queued = (now() - q0) / steps;
    }
    /* HR_BENCH_CALIBRATE=1: the cost model's own measurement of this
     * session (hr_cost_measure, as `fit` does it), its prediction, and the
     * steps timed again after it (a check of the model against the bench) */
    double calibrated = -1, after = -1;
    const char *cal_env = getenv("HR_BENCH_CALIBRATE");
    if (cal_env && !strcmp(cal_env, "1") && steps > 0) {
        hr_cost_model *cm = hr_cost_model_here(cuda);
        if (cm && hr_cost_measure(s, cm, 20) == HR_OK) calibrated = 1e3 * hr_cost_step(cm, hr_session_program(s));
        hr_cost_model_free(cm);
        double *t2 = malloc(sizeof(double) * (size_t)steps);
        for (int i = 0; t2 && i < steps; i++) {
            double t0 = now();
            if (hr_train_step(s, b.x, b.y, &loss) != HR_OK) return fail("step", model, batch);
            t2[i] = now() - t0;
        }
        if (t2) {
            qsort(t2, (size_t)steps, sizeof *t2, cmp);
            after = 1e3 * (steps % 2 ? t2[steps / 2] : 0.5 * (t2[steps / 2 - 1] + t2[steps / 2]));
        }
        free(t2);
    }
    char graph_why[512];
    int graph = hr_session_graph(s, graph_why, sizeof graph_why);
    hr_mem_stats(s, &m3);
    hr_nvml_sample nv = {0};
    if (witness) hr_nvml_sampler_stop(witness, &nv);
    qsort(t, (size_t)steps, sizeof *t, cmp);
    double mean = 0;
    for (int i = 0; i < steps; i++) mean += t[i] / steps;
    double med = steps % 2 ? t[steps / 2] : 0.5 * (t[steps / 2 - 1] + t[steps / 2]);
    const hr_report_t *r = hr_session_report(s);
    printf("{\"impl\": \"headroom\", \"model\": ");
    json_escape(stdout, model);
    printf(", \"batch\": %lld, \"device\": \"%s\", \"steps\": %d, \"warmup\": %d, \"median_ms\": %.4f, \"mean_ms\": %.4f, "
           "\"min_ms\": %.4f, \"max_ms\": %.4f, \"samples_per_s\": %.1f, \"loss\": %.5f",
           (long long)batch, cuda ? "cuda" : "cpu", steps, warm, 1e3 * med, 1e3 * mean, 1e3 * t[0], 1e3 * t[steps - 1],
           (double)batch / med, loss);
    if (b.tokens) printf(", \"tokens_per_s\": %.1f", (double)(batch * b.per) / med);
    if (calibrated >= 0) printf(", \"calibrated_ms\": %.4f, \"median_after_calibration_ms\": %.4f", calibrated, after);
    printf(", \"queued_ms\": %.4f, \"graph\": %d, \"graph_why\": ", 1e3 * queued, graph);
    json_escape(stdout, graph_why);
    printf(", \"optim\": \"%s\"", c.optim.kind == HR_OPTIM_SGD ? "sgd" : c.optim.kind == HR_OPTIM_ADAMW ? "adamw" : "adam");
    printf(", \"arena_bytes\": %zu, \"lower_bound\": %zu, \"pinned_bytes\": %zu, \"overhead_bytes\": %zu", r->arena_bytes,
           r->lower_bound, r->pinned_bytes, overhead_of(s));
    printf(", \"precision\": \"%s\", \"job_total\": %zu", hr_precision_name(c.precision), r->device_total);
    printf(", \"accumulate\": %d, \"chunks\": %d, \"recompute\": ", c.accumulate > 1 ? c.accumulate : 1, r->chunks);
    json_escape(stdout, r->recompute ? r->recompute : "");
    printf(", \"arena_no_recompute\": %zu, \"recompute_nodes\": %d, \"predicted_ms\": %.4f, \"predicted_measured_nodes\": %d, "
           "\"predicted_estimated_nodes\": %d",
           r->recompute ? r->arena_no_recompute : r->arena_bytes, r->recompute_nodes, pred, n_meas, n_est);
    printf(", \"at_peak\": {");
    for (int k = 0; k < HR_CAT_COUNT; k++)
        printf("%s\"%s\": %zu", k ? ", " : "", hr_category_name((hr_category)k), r->category_at_peak[k]);
    printf("}");
    if (cuda) {
        printf(", \"device_total\": %zu, \"free_before_alloc\": %zu, \"free_after_alloc\": %zu, \"free_after_steps\": %zu",
               m0.device_total, m0.device_free, m1.device_free, m3.device_free);
        printf(", \"alloc_delta\": %lld, \"lazy_after_alloc\": %lld, \"device_used_end\": %zu",
               (long long)m0.device_free - (long long)m1.device_free,
               (long long)m1.device_free - (long long)m3.device_free, m3.device_total - m3.device_free);
        printf(", \"stats_allocated\": %zu, \"stats_reserved\": %zu, \"stats_peak_allocated\": %zu", m3.allocated,
               m3.reserved, m3.peak_allocated);
        printf(", \"device_allocs_in_timed_steps\": %lld", (long long)(m3.device_allocs - m2.device_allocs));
        if (nv.available && nv.peak != HR_NVML_UNKNOWN) {
            printf(", \"nvml_peak\": %llu, \"nvml_end\": %llu, \"nvml_how\": \"%s\", \"nvml_samples\": %lld",
                   (unsigned long long)nv.peak, (unsigned long long)nv.current, hr_nvml_self_how_name(nv.how),
                   (long long)nv.samples);
            if (nv.device_peak != HR_NVML_UNKNOWN)
                printf(", \"nvml_device_peak\": %llu", (unsigned long long)nv.device_peak);
        } else {
            printf(", \"nvml_unavailable\": ");
            json_escape(stdout, !bus ? "no PCI bus id for this device" : nv.available ? "the driver gives no per-process bytes" : nv.why);
        }
    }
    printf("}\n");
    free(t);
    free_batch(&b);
    hr_session_free(s);
    hr_model_free(m);
    return 0;
}

/* ---- the largest batch that fits ------------------------------------------------ */
typedef struct {
    int64_t batch;
    bool ok;
    double secs;
    float loss;
    size_t free_before_alloc, arena;
    char why[512];
} attempt_t;

/* Compiles at `batch`, reads the free memory, and allocates and runs one step
 * if the plan fits it; otherwise (or if the step fails) plans, with this
 * session's backend, the largest batch that fits what is free now (less
 * `margin`) into *next. */
static void try_batch(hr_model_t *m, const hr_config_t *base, int64_t batch, size_t margin, attempt_t *a,
                      int64_t *next) {
    memset(a, 0, sizeof *a);
    a->batch = batch;
    *next = 0;
    hr_config_t c = *base;
    c.batch = batch;
    double t0 = now();
    hr_session_t *s = hr_compile(m, &c);
    batch_t b = {0};
    if (!s) {
        snprintf(a->why, sizeof a->why, "compile: %s", hr_last_error());
        a->secs = now() - t0;
        return;
    }
    hr_mem_stats_t ms;
    hr_mem_stats(s, &ms);
    size_t ov = overhead_of(s);
    a->free_before_alloc = ms.device_free;
    a->arena = hr_session_report(s)->arena_bytes;
    const char *stage = "alloc";
    /* cudaMalloc hands out 2 MiB pages: the arena takes its size rounded up */
    const size_t gran = (size_t)2 << 20;
    size_t need = (a->arena + gran - 1) / gran * gran;
    if (need + margin > ms.device_free) {
        snprintf(a->why, sizeof a->why,
                 "does not fit what is free now: arena %zu (%zu in 2 MiB pages) + margin %zu > free %zu; re-planned",
                 a->arena, need, margin, ms.device_free);
    } else if (hr_session_alloc(s) == HR_OK && (stage = "host memory", make_batch(m, batch, &b, true) == 0) &&
               (stage = "step", hr_train_step(s, b.x, b.y, &a->loss) == HR_OK)) {
        a->ok = isfinite(a->loss);
        if (!a->ok) snprintf(a->why, sizeof a->why, "step: loss %g", (double)a->loss);
    } else {
        snprintf(a->why, sizeof a->why, "%s: %s", stage, hr_last_error());
        if (margin < ((size_t)512 << 20)) margin = (size_t)512 << 20; /* failed beyond the plan: leave room */
        else margin *= 4;
    }
    if (!a->ok && ms.device_free > margin + gran)
        *next = hr_largest_batch_on(m, &c, ms.device_free - margin - gran + ov, ov, batch - 1, hr_session_backend(s));
    a->secs = now() - t0;
    free_batch(&b);
    hr_session_free(s);
}

static int largest(const char *model, int64_t batch, bool cuda) {
    hr_model_t *m = hr_modelfile_load(model);
    if (!m) return fail("load", model, batch);
    hr_config_t c = hr_config_default();
    c.batch = batch;
    c.device = cuda ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    configure(&c);
    c.device_budget = 0;
    hr_session_t *s = hr_compile(m, &c);
    if (!s) return fail("compile", model, batch);
    hr_mem_stats_t m0, m1;
    hr_mem_stats(s, &m0);
    size_t ov = overhead_of(s), fr = m0.device_free;
    const int64_t hi = (int64_t)1 << 28;
    double t0 = now();
    /* the room hr_session_alloc's own fit test allows: planned and confirmed agree */
    int64_t planned = hr_largest_batch_on(m, &c, hr_session_device_room(s), ov, hi, hr_session_backend(s));
    (void)fr;
    double search_s = now() - t0;
    hr_mem_stats(s, &m1);
    hr_session_free(s);
    attempt_t at[5];
    int na = 0;
    int64_t n = planned, best = 0;
    size_t margin = 0;
    while (n > 0 && na < 5) {
        int64_t next;
        try_batch(m, &c, n, margin, &at[na], &next);
        fprintf(stderr, "bench_step --largest %s: batch %lld: %s %s\n", model, (long long)n,
                at[na].ok ? "ok" : "FAILED", at[na].why);
        if (at[na].ok) best = n;
        if (at[na++].ok) break;
        if (strstr(at[na - 1].why, "step:") || strstr(at[na - 1].why, "alloc:"))
            margin = margin < ((size_t)512 << 20) ? (size_t)512 << 20 : margin * 4;
        n = next;
    }
    printf("{\"impl\": \"headroom\", \"mode\": \"largest\", \"model\": ");
    json_escape(stdout, model);
    printf(", \"precision\": \"%s\", \"chunks\": %d, \"recompute\": ", hr_precision_name(c.precision), c.chunks);
    json_escape(stdout, c.recompute ? c.recompute : "");
    printf(", \"seed_batch\": %lld, \"device\": \"%s\", \"device_total\": %zu, \"free_at_search\": %zu, "
           "\"overhead_bytes\": %zu, \"search_s\": %.3f, \"free_after_search\": %zu, \"allocs_during_search\": %lld",
           (long long)batch, cuda ? "cuda" : "cpu", m0.device_total, fr, ov, search_s, m1.device_free,
           (long long)(m1.device_allocs - m0.device_allocs));
    printf(", \"attempts\": [");
    for (int i = 0; i < na; i++) {
        printf("%s{\"batch\": %lld, \"ok\": %s, \"secs\": %.2f, \"loss\": %.5f, \"free_before_alloc\": %zu, "
               "\"arena\": %zu, \"why\": ",
               i ? ", " : "", (long long)at[i].batch, at[i].ok ? "true" : "false", at[i].secs, at[i].loss,
               at[i].free_before_alloc, at[i].arena);
        json_escape(stdout, at[i].why);
        printf("}");
    }
    printf("], \"largest_planned\": %lld, \"largest_confirmed\": %lld, \"planner_exact\": %s}\n", (long long)planned,
           (long long)best, na > 0 && at[0].ok ? "true" : "false");
    hr_model_free(m);
    return best > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *env = getenv("HR_BENCH_PRECISION");
    if (env && *env && !parse_precision(env, &opt.precision)) {
        fprintf(stderr, "bench_step: HR_BENCH_PRECISION='%s': one of fp32, bf16, fp16\n", env);
        return 2;
    }
    int k = 1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--precision")) {
            if (!parse_precision(v, &opt.precision)) {
                fprintf(stderr, "bench_step: --precision '%s': one of fp32, bf16, fp16\n", v);
                return 2;
            }
            i++;
        } else if (v && !strcmp(argv[i], "--optim")) {
            if (!strcmp(v, "adam")) opt.optim = HR_OPTIM_ADAM;
            else if (!strcmp(v, "adamw")) opt.optim = HR_OPTIM_ADAMW;
            else if (!strcmp(v, "sgd")) opt.optim = HR_OPTIM_SGD;
            else {
                fprintf(stderr, "bench_step: --optim '%s': one of adam, adamw, sgd\n", v);
                return 2;
            }
            i++;
        } else if (v && !strcmp(argv[i], "--recompute")) opt.recompute = v, i++;
        else if (v && !strcmp(argv[i], "--accumulate")) opt.accumulate = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--chunks")) opt.chunks = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--budget")) {
            if (!hr_parse_bytes(v, &opt.budget)) {
                fprintf(stderr, "bench_step: --budget '%s' is not a size\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(argv[i], "--tf32")) opt.tf32 = true;
        else argv[k++] = argv[i];
    }
    argc = k;
    if (argc >= 4 && !strcmp(argv[1], "--largest"))
        return largest(argv[2], atoll(argv[3]), !(argc > 4 && !strcmp(argv[4], "cpu")));
    if (argc < 3) {
        fprintf(stderr, "usage: bench_step MODEL BATCH [steps=20] [warmup=3] [cpu|cuda]\n"
                        "       bench_step --largest MODEL BATCH [cuda|cpu]\n"
                        "       options anywhere: --precision fp32|bf16|fp16 --optim adam|adamw|sgd --accumulate K\n"
                        "                         --recompute none|all|auto|min|LAYERS --chunks K --budget BYTES --tf32\n");
        return 2;
    }
    int steps = argc > 3 ? atoi(argv[3]) : 20, warm = argc > 4 ? atoi(argv[4]) : 3;
    if (steps < 1) steps = 1;
    return bench(argv[1], atoll(argv[2]), steps, warm, argc > 5 && !strcmp(argv[5], "cuda"));
}
