/* test_plan.c — the planner, checked by an independent checker (plan_check.h):
 * lifetimes are recomputed from the program's nodes, and any two tensors that
 * share a byte must live at different times or be a view / in-place pair it
 * recognises on its own (hr_plan_verify and the planner's alias groups are not
 * used). Then: a run with every tensor in its own buffer must give what the
 * planned arena gives; arena vs lower bound on the seed models; categories;
 * huge and bad batch sizes; hr_largest_batch; frozen parameters; 200+ random
 * layer stacks (every activation and LayerNorm among their layers). */
#include "check.h"
#include "isolated.h"
#include "plan_check.h"
#include "seed_models.h"
#include "exec/internal.h"
#include "io/io.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the seed models ---------------------------------------------------------- */
typedef struct {
    const char *name;
    hr_model_t *(*make)(void);
    int64_t batch, params, in_numel;
} seed_model;
static const seed_model seeds[] = {
    {"MLP", seed_mlp, 1024, 1000LL * 2000 + 2000 + 2000LL * 1000 + 1000 + 1000LL * 10 + 10, 1000},
    {"SimpleCNN", seed_simple_cnn, 128, 16LL * 3 * 9 + 16 + 4096LL * 10 + 10, 3 * 32 * 32},
    {"DeepCNN", seed_deep_cnn, 64, 32LL * 27 + 32 + 64LL * 32 * 9 + 64 + 128LL * 64 * 9 + 128 + 8192LL * 10 + 10, 3 * 64 * 64},
};
#define NSEEDS 3

static hr_config_t cfg_for(int64_t batch, int variant) {
    hr_config_t c = hr_config_default();
    c.batch = batch;
    switch (variant) {
    case 0: c.optim.kind = HR_OPTIM_ADAM; break;
    case 1: c.optim.kind = HR_OPTIM_SGD, c.optim.lr = 0.1f; break;
    case 2: c.optim.kind = HR_OPTIM_SGD, c.optim.lr = 0.1f, c.optim.momentum = 0.9f; break;
    case 3: c.optim.kind = HR_OPTIM_ADAMW, c.optim.clip_norm = 1.0f, c.optim.weight_decay = 0.01f; break;
    case 4: c.optim.kind = HR_OPTIM_SGD, c.optim.momentum = 0.9f, c.optim.nesterov = true, c.optim.clip_norm = 5; break;
    case 5: c.optim.kind = HR_OPTIM_ADAM, c.keep_grads = true; break;
    case 6: c.mode = HR_MODE_INFER; break;
    }
    return c;
}
static const char *variant_name[] = {"train Adam", "train SGD", "train SGD momentum", "train AdamW clip_norm",
                                     "train SGD nesterov clip_norm", "train Adam keep_grads", "inference"};
#define NVARIANTS 7

static void test_seed_models(void) {
    printf("  %-10s %-30s %12s %12s %12s %9s %9s\n", "model", "config", "arena", "lower bound", "report lb", "arena/lb",
           "/report");
    for (int k = 0; k < NSEEDS; k++) {
        hr_model_t *m = seeds[k].make();
        size_t arena_train = 0, arena_infer = 0;
        for (int v = 0; v < NVARIANTS; v++) {
            hr_config_t c = cfg_for(seeds[k].batch, v);
            char label[96];
            snprintf(label, sizeof label, "%s %s batch %lld", seeds[k].name, variant_name[v], (long long)c.batch);
            check_out o = {0};
            hr_session_t *s = compile_checked(m, &c, label, &o, true);
            if (!s) continue;
            const hr_report_t *r = hr_session_report(s);
            double ratio = (double)o.arena / (double)o.my_lb, ratio2 = (double)o.arena / (double)o.report_lb;
            printf("  %-10s %-30s %12zu %12zu %12zu %9.4f %9.4f\n", seeds[k].name, variant_name[v], o.arena, o.my_lb,
                   o.report_lb, ratio, ratio2);
            CHECK(ratio <= 1.05, "%s: arena %zu is %.4fx the lower bound %zu", label, o.arena, ratio, o.my_lb);
            CHECK(o.arena >= o.my_lb, "%s: arena below the live bytes", label);
            /* categories */
            size_t p4 = 4 * (size_t)seeds[k].params;
            /* categories count bytes as placed: each tensor is rounded up to
             * HR_ALIGN, so at most 255 bytes of padding per tensor (<= 16 here) */
            CHECK(r->category_bytes[HR_CAT_PARAMS] >= p4 && r->category_bytes[HR_CAT_PARAMS] < p4 + 16 * HR_ALIGN,
                  "%s: parameters %zu bytes, 4 x %lld parameters = %zu (+ padding)", label,
                  r->category_bytes[HR_CAT_PARAMS], (long long)seeds[k].params, p4);
            size_t at_peak = 0, total = 0;
            for (int q = 0; q < HR_CAT_COUNT; q++) at_peak += r->category_at_peak[q], total += r->category_bytes[q];
            CHECK(at_peak == r->lower_bound, "%s: categories at the peak sum to %zu, the lower bound is %zu", label,
                  at_peak, r->lower_bound);
            CHECK(at_peak <= r->arena_bytes, "%s: at peak %zu > arena %zu", label, at_peak, r->arena_bytes);
            CHECK(total >= at_peak, "%s: category totals %zu < at peak %zu", label, total, at_peak);
            size_t in_bytes = 4 * (size_t)seeds[k].in_numel * (size_t)c.batch;
            size_t lab_bytes = c.mode == HR_MODE_TRAIN ? 4 * (size_t)c.batch : 0;
            CHECK(r->category_bytes[HR_CAT_INPUTS] == hr_align_up(in_bytes, HR_ALIGN) + hr_align_up(lab_bytes, HR_ALIGN),
                  "%s: inputs %zu bytes; the batch is %zu bytes and its labels %zu", label,
                  r->category_bytes[HR_CAT_INPUTS], in_bytes, lab_bytes);
            if (c.mode == HR_MODE_INFER) {
                arena_infer = o.arena;
                CHECK(r->category_bytes[HR_CAT_GRADS] == 0 && r->category_bytes[HR_CAT_OPTSTATE] == 0,
                      "%s: inference plans %zu gradient and %zu optimizer bytes", label, r->category_bytes[HR_CAT_GRADS],
                      r->category_bytes[HR_CAT_OPTSTATE]);
                CHECK(r->category_bytes[HR_CAT_SAVED] == 0, "%s: inference saves %zu bytes for a backward pass", label,
                      r->category_bytes[HR_CAT_SAVED]);
            } else {
                if (v == 0) arena_train = o.arena;
                /* one gradient per parameter, 0, 1 or 2 optimizer tensors: the
                 * same accounting as the parameters' */
                size_t pc = r->category_bytes[HR_CAT_PARAMS];
                size_t want_opt = c.optim.kind != HR_OPTIM_SGD ? 2 * pc : c.optim.momentum != 0 ? pc : 0;
                CHECK(r->category_bytes[HR_CAT_GRADS] == pc, "%s: gradients %zu bytes, parameters %zu", label,
                      r->category_bytes[HR_CAT_GRADS], pc);
                CHECK(r->category_bytes[HR_CAT_OPTSTATE] == want_opt, "%s: optimizer state %zu bytes, expected %zu",
                      label, r->category_bytes[HR_CAT_OPTSTATE], want_opt);
            }
            hr_session_free(s);
        }
        CHECK(arena_infer > 0 && arena_infer < arena_train, "%s: inference arena %zu not below train arena %zu",
              seeds[k].name, arena_infer, arena_train);
        hr_model_free(m);
    }
}

/* Planning 10^7 samples: fast, consistent, linear in the batch. */
static void test_big_batches(void) {
    for (int k = 0; k < NSEEDS; k++) {
        hr_model_t *m = seeds[k].make();
        size_t a[3] = {0};
        int64_t bs[3] = {100000, 1000000, 10000000};
        for (int i = 0; i < 3; i++) {
            hr_config_t c = cfg_for(bs[i], 0);
            char label[96];
            snprintf(label, sizeof label, "%s batch %lld", seeds[k].name, (long long)bs[i]);
            double t0 = now();
            hr_session_t *s = hr_compile(m, &c);
            double dt = now() - t0;
            CHECK(s != NULL, "%s: compile: %s", label, hr_last_error());
            if (!s) continue;
            a[i] = hr_session_plan(s)->arena_bytes;
            if (i == 2) {
                char buf[32];
                printf("  %-10s batch 10^7: planned in %.2f ms, arena %s (%.4fx lower bound)\n", seeds[k].name,
                       1e3 * dt, hr_format_bytes(a[i], buf, sizeof buf),
                       (double)a[i] / (double)hr_session_report(s)->lower_bound);
                CHECK(dt < 1.0, "%s: planning took %.3f s", label, dt);
                char why[512];
                check_out o;
                int nbad = check_plan(s, why, sizeof why, &o);
                CHECK(nbad == 0, "%s: %s", label, why);
                CHECK((double)o.arena <= 1.05 * (double)o.my_lb, "%s: arena %zu vs lower bound %zu", label, o.arena,
                      o.my_lb);
                CHECK(a[i] >= 4 * (size_t)seeds[k].in_numel * (size_t)bs[i], "%s: arena %zu smaller than the input",
                      label, a[i]);
            }
            hr_session_free(s);
        }
        /* bytes per extra sample, between 10^5 and 10^6 and between 10^6 and 10^7 */
        double s1 = ((double)a[1] - (double)a[0]) / 9e5, s2 = ((double)a[2] - (double)a[1]) / 9e6;
        CHECK(a[0] < a[1] && a[1] < a[2] && fabs(s1 - s2) <= 0.01 * s2,
              "%s: arena not linear in the batch: %.1f vs %.1f bytes a sample", seeds[k].name, s1, s2);
        hr_model_free(m);
    }
}

typedef struct {
    const hr_model_t *m;
    const hr_config_t *c;
    const char *needle;
} bad_compile_arg;

/* hr_compile must refuse, with a message that contains `needle`. */
static void bad_compile(void *a_) {
    bad_compile_arg *a = a_;
    hr_error_clear();
    hr_session_t *s = hr_compile(a->m, a->c);
    CHECK(s == NULL, "batch %lld compiled", (long long)a->c->batch);
    CHECK(strstr(hr_last_error(), a->needle) != NULL, "batch %lld: message '%s'", (long long)a->c->batch,
          hr_last_error());
    hr_session_free(s);
}

typedef struct {
    const hr_model_t *m;
    hr_config_t c;
    const char *label;
    int64_t in_numel;
} huge_arg;

/* A batch too large to allocate: a plan whose bytes are right, or a clear
 * refusal; never a wrapped size. */
static void huge_compile(void *a_) {
    huge_arg *a = a_;
    hr_error_clear();
    hr_session_t *s = hr_compile(a->m, &a->c);
    if (!s) {
        const char *e = hr_last_error();
        printf("  %s: refused: %s\n", a->label, e);
        CHECK(strlen(e) > 10 && strcmp(e, "no error") != 0, "%s: no message", a->label);
        return;
    }
    char buf[32];
    printf("  %s: planned, arena %s\n", a->label, hr_format_bytes(hr_session_plan(s)->arena_bytes, buf, sizeof buf));
    if (a->in_numel) { /* the input alone, in 128 bits, so that a wrapped size_t shows */
        unsigned __int128 in = (unsigned __int128)4 * (unsigned __int128)a->in_numel * (unsigned __int128)a->c.batch;
        CHECK((unsigned __int128)hr_session_plan(s)->arena_bytes >= in, "%s: arena %zu is smaller than its input (%.4g bytes)",
              a->label, hr_session_plan(s)->arena_bytes, (double)in);
    }
    char why[512];
    check_out o;
    CHECK(check_plan(s, why, sizeof why, &o) == 0, "%s: %s", a->label, why);
    CHECK(a->c.batch <= (1LL << 40), "%s: beyond the documented limit of 2^40 samples", a->label);
    hr_status st = hr_session_alloc(s); /* petabytes: must fail cleanly */
    CHECK(st != HR_OK, "%s: allocating %zu bytes succeeded?", a->label, hr_session_plan(s)->arena_bytes);
    CHECK(st == HR_ERR_OOM || st == HR_ERR_DEVICE_OOM, "%s: alloc status %s", a->label, hr_status_name(st));
    CHECK(strlen(hr_last_error()) > 10, "%s: alloc failed without a message", a->label);
    hr_session_free(s);
}

/* Batches that cannot be planned must say so; nothing may wrap around. */
static void test_bad_batches(void) {
    hr_model_t *m = seed_mlp();
    int64_t bad[] = {0, -1, -1000000000000LL, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hr_config_t c = cfg_for(bad[i], 0);
        char label[64];
        snprintf(label, sizeof label, "compile with batch %lld", (long long)bad[i]);
        bad_compile_arg a = {m, &c, "batch"};
        isolated(label, bad_compile, &a);
        /* the status, which hr_compile does not return: through the program
         * builder (no workspaces: the batch is checked before any node) */
        hr_program p;
        hr_status st = hr_program_build(m, &c, NULL, NULL, &p);
        CHECK(st == HR_ERR_INVALID_ARG, "batch %lld: status %s", (long long)bad[i], hr_status_name(st));
        if (st == HR_OK) hr_program_free(&p);
        CHECK(hr_largest_batch(m, &c, (size_t)1 << 30, 0, bad[i]) == 0, "largest_batch with hi %lld", (long long)bad[i]);
    }
    /* 10^12 and beyond: a plan whose bytes are right, or a clear refusal */
    int64_t huge[] = {1000000000000LL, (1LL << 40), (1LL << 40) + 1, INT64_MAX};
    for (int k = 0; k < NSEEDS; k++) {
        hr_model_t *sm = seeds[k].make();
        for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            char label[96];
            snprintf(label, sizeof label, "%s batch %lld", seeds[k].name, (long long)huge[i]);
            huge_arg a = {sm, cfg_for(huge[i], 0), label, seeds[k].in_numel};
            isolated(label, huge_compile, &a);
        }
        hr_model_free(sm);
    }
    /* Many tensors of 2^60 bytes each: the arena is beyond 2^64 bytes and must
     * be refused, not wrapped. 24 BatchNorm1d layers save 24 activations. */
    hr_model_t *w = hr_model_new("wide");
    const int64_t F = 1 << 19;
    int x = hr_input(w, "x", 1, &F);
    for (int i = 0; i < 24; i++) x = hr_batchnorm(w, NULL, x, F, 1e-5f, 0.1f);
    x = hr_linear(w, NULL, x, F, 2, true);
    hr_loss_cross_entropy(w, x, 2);
    huge_arg a = {w, cfg_for(1LL << 39, 1), "24 BatchNorm1d(2^19) at batch 2^39 (24 x 2^60 bytes)", F};
    isolated(a.label, huge_compile, &a);
    hr_model_free(w);
    hr_model_free(m);
}

static size_t arena_of(const hr_model_t *m, const hr_config_t *cfg, int64_t b) {
    hr_config_t c = *cfg;
    c.batch = b;
    hr_session_t *s = hr_compile(m, &c);
    size_t a = s ? hr_session_plan(s)->arena_bytes : SIZE_MAX;
    hr_session_free(s);
    return a;
}

static void test_largest_batch(void) {
    const size_t budgets[] = {64u << 20, 300u << 20, 1u << 30};
    for (int k = 0; k < NSEEDS; k++) {
        hr_model_t *m = seeds[k].make();
        for (int v = 0; v < NVARIANTS; v += 6) {
            hr_config_t c = cfg_for(64, v);
            for (size_t bi = 0; bi < 3; bi++)
                for (size_t ov = 0; ov < 2; ov++) {
                    size_t budget = budgets[bi], overhead = ov ? 10u << 20 : 0;
                    int64_t b = hr_largest_batch(m, &c, budget, overhead, 1 << 22);
                    size_t at = b > 0 ? arena_of(m, &c, b) : 0, next = arena_of(m, &c, b + 1);
                    CHECK(b >= 0, "%s: largest_batch %lld", seeds[k].name, (long long)b);
                    CHECK(b == 0 || at + overhead <= budget, "%s %s: batch %lld needs %zu + %zu > %zu", seeds[k].name,
                          variant_name[v], (long long)b, at, overhead, budget);
                    CHECK(next + overhead > budget, "%s %s: batch %lld + 1 still fits (%zu + %zu <= %zu)", seeds[k].name,
                          variant_name[v], (long long)b, next, overhead, budget);
                    if (bi == 1 && ov == 0)
                        printf("  %-10s %-10s largest batch in 300 MiB: %lld\n", seeds[k].name,
                               v ? "inference" : "train", (long long)b);
                }
            /* nothing fits: 0; everything up to hi fits: hi */
            CHECK(hr_largest_batch(m, &c, 1000, 0, 1 << 20) == 0, "%s: 1000 bytes fits a batch?", seeds[k].name);
            CHECK(hr_largest_batch(m, &c, (size_t)1 << 40, 0, 7) == 7, "%s: 1 TiB does not fit 7 samples?",
                  seeds[k].name);
            CHECK(hr_largest_batch(m, &c, (size_t)1 << 30, 0, 0) == 0, "%s: hi 0", seeds[k].name);
        }
        hr_model_free(m);
    }
}

/* A frozen parameter: no gradient, no optimizer state, and it does not move. */
static void test_frozen(void) {
    hr_model_t *m = hr_model_new("frozen");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 6, 6});
    x = hr_conv2d(m, NULL, x, 2, 4, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 4, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 144, 5, true);
    hr_loss_cross_entropy(m, x, 5);
    hr_config_t c = cfg_for(4, 0);
    hr_session_t *s0 = hr_compile(m, &c);
    CHECK(hr_model_freeze(m, "0.weight") == HR_OK, "freeze: %s", hr_last_error());
    CHECK(hr_model_freeze(m, "1.bias") == HR_OK, "freeze: %s", hr_last_error());
    CHECK(hr_model_freeze(m, "nope.weight") != HR_OK, "freezing a missing parameter succeeded");
    check_out o;
    hr_session_t *s = compile_checked(m, &c, "frozen 0.weight, 1.bias", &o, true);
    if (!s || !s0) return;
    const hr_graph *g = &hr_session_program(s)->g;
    for (int i = 0; i < g->nt; i++) {
        const hr_tensor *t = &g->t[i];
        if ((t->kind != HR_T_GRAD && t->kind != HR_T_OPTSTATE) || t->source < 0) continue;
        const char *src = g->t[t->source].name;
        bool used = false;
        for (int n = 0; n < g->nn; n++) {
            for (int k = 0; k < g->n[n].nout; k++) used |= g->n[n].out[k] == i;
            for (int k = 0; k < g->n[n].nin; k++) used |= g->n[n].in[k] == i;
        }
        CHECK(!used || (strcmp(src, "0.weight") != 0 && strcmp(src, "1.bias") != 0), "frozen %s has %s (%s)", src,
              t->name, t->kind == HR_T_GRAD ? "gradient" : "optimizer state");
    }
    CHECK(hr_state_find(s, "0.weight.exp_avg") < 0 && hr_state_find(s, "1.bias.exp_avg_sq") < 0,
          "frozen parameters have optimizer state");
    CHECK(hr_state_find(s, "0.bias.exp_avg") >= 0 && hr_state_find(s, "1.weight.exp_avg_sq") >= 0,
          "trainable parameters lost their optimizer state");
    const hr_report_t *r0 = hr_session_report(s0), *r = hr_session_report(s);
    /* 0.weight (4,2,3,3) and 1.bias (4): exact bytes, or padded to HR_ALIGN
     * each (whether categories count padding is checked with the seed models) */
    size_t exact = 4 * 4 * 2 * 9 + 4 * 4, padded = hr_align_up(4 * 4 * 2 * 9, HR_ALIGN) + hr_align_up(4 * 4, HR_ALIGN);
    size_t dg = r0->category_bytes[HR_CAT_GRADS] - r->category_bytes[HR_CAT_GRADS];
    size_t dopt = r0->category_bytes[HR_CAT_OPTSTATE] - r->category_bytes[HR_CAT_OPTSTATE];
    CHECK(dg == exact || dg == padded, "freezing saved %zu gradient bytes, expected %zu (%zu padded)", dg, exact,
          padded);
    CHECK(dopt == 2 * exact || dopt == 2 * padded, "freezing saved %zu optimizer bytes, expected %zu (%zu padded)",
          dopt, 2 * exact, 2 * padded);
    CHECK(r->category_bytes[HR_CAT_PARAMS] == r0->category_bytes[HR_CAT_PARAMS], "frozen parameters take other room");
    /* a step: the frozen ones stay, the others move */
    CHECK(hr_session_alloc(s) == HR_OK, "alloc: %s", hr_last_error());
    float x0[4 * 72], before[72], after[72], bb[4], ba[4], cb[4], ca[4];
    int32_t lab[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4 * 72; i++) x0[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
    int iw = hr_state_find(s, "0.weight"), ib = hr_state_find(s, "1.bias"), ic = hr_state_find(s, "0.bias");
    hr_state_read(s, iw, before), hr_state_read(s, ib, bb), hr_state_read(s, ic, cb);
    CHECK(hr_train_step(s, x0, lab, NULL) == HR_OK, "step: %s", hr_last_error());
    hr_state_read(s, iw, after), hr_state_read(s, ib, ba), hr_state_read(s, ic, ca);
    CHECK(memcmp(before, after, sizeof before) == 0, "frozen 0.weight changed");
    CHECK(memcmp(bb, ba, sizeof bb) == 0, "frozen 1.bias changed");
    CHECK(memcmp(cb, ca, sizeof cb) != 0, "trainable 0.bias did not change");
    hr_session_free(s);
    hr_session_free(s0);
    hr_model_free(m);

    /* everything frozen: no backward at all, and the step still runs */
    m = hr_model_new("all frozen");
    x = hr_input(m, "x", 1, (int64_t[]){6});
    x = hr_linear(m, NULL, x, 6, 3, true);
    hr_loss_cross_entropy(m, x, 3);
    hr_model_freeze(m, "0.weight"), hr_model_freeze(m, "0.bias");
    s = compile_checked(m, &c, "all frozen", &o, true);
    if (s) {
        CHECK(hr_session_report(s)->category_bytes[HR_CAT_GRADS] == 0, "all frozen: gradients planned");
        CHECK(hr_session_report(s)->category_bytes[HR_CAT_OPTSTATE] == 0, "all frozen: optimizer state planned");
        const hr_program *p = hr_session_program(s);
        CHECK(p->g.nn == p->n_fwd, "all frozen: %d backward/update nodes", p->g.nn - p->n_fwd);
        float xx[24] = {0};
        int32_t lab3[4] = {0, 1, 2, 0};
        float loss = 0;
        CHECK(hr_session_alloc(s) == HR_OK && hr_train_step(s, xx, lab3, &loss) == HR_OK, "all frozen step: %s",
              hr_last_error());
        CHECK(fabsf(loss - logf(3.0f)) < 0.5f, "all frozen: loss %g", loss);
        hr_session_free(s);
    }
    hr_model_free(m);
}

/* ---- random layer stacks ---------------------------------------------------- */
typedef struct {
    hr_model_t *m;
    char desc[1024];
    size_t dl;
} gen;

static void gadd(gen *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (g->dl < sizeof g->desc) g->dl += (size_t)vsnprintf(g->desc + g->dl, sizeof g->desc - g->dl, fmt, ap);
    va_end(ap);
}
#define ADD(...) gadd(g, __VA_ARGS__)
#define CH(x) hr_tensor_dim(g->m, (x), 0)
#define HH(x) hr_tensor_dim(g->m, (x), 1)
#define WW(x) hr_tensor_dim(g->m, (x), 2)

static int rconv(gen *g, int x, int64_t cout, bool any) {
    int64_t H = HH(x), W = WW(x), mn = H < W ? H : W;
    int k = any ? (int[]){1, 1, 2, 3, 3, 5}[below(6)] : 3, s = any ? 1 + below(2) : 1;
    int p = any ? below(k / 2 + 1) : 1;
    if (mn + 2 * p < k) k = 1, p = 0;
    ADD("Conv(%lld,%lld,k%d,s%d,p%d) ", (long long)CH(x), (long long)cout, k, s, p);
    return hr_conv2d(g->m, NULL, x, CH(x), cout, k, s, p, below(3) != 0);
}

/* one of the activations besides ReLU */
static int ract(gen *g, int x) {
    switch (below(6)) {
    case 0: ADD("LeakyReLU "); return hr_leaky_relu(g->m, NULL, x, 0.1f);
    case 1: ADD("GELU "); return hr_gelu(g->m, NULL, x, false);
    case 2: ADD("GELU(tanh) "); return hr_gelu(g->m, NULL, x, true);
    case 3: ADD("SiLU "); return hr_silu(g->m, NULL, x);
    case 4: ADD("Sigmoid "); return hr_sigmoid(g->m, NULL, x);
    default: ADD("Tanh "); return hr_tanh(g->m, NULL, x);
    }
}

/* LayerNorm over the last 1 to all dims, with or without weight and bias */
static int rln(gen *g, int x) {
    int nd = hr_tensor_ndim(g->m, x), k = 1 + below(nd);
    int64_t shape[3];
    for (int i = 0; i < k; i++) shape[i] = hr_tensor_dim(g->m, x, nd - k + i);
    bool affine = below(3) != 0, bias = below(2) != 0;
    ADD("LN(%d dim%s%s) ", k, k > 1 ? "s" : "", affine ? bias ? ", affine" : ", affine, no bias" : "");
    return hr_layernorm(g->m, NULL, x, k, shape, 1e-5f, affine, bias);
}

static hr_model_t *random_stack(int idx, char *desc, size_t dlen) {
    gen G = {0}, *g = &G;
    (void)dlen;
    char nm[32];
    snprintf(nm, sizeof nm, "random%d", idx);
    g->m = hr_model_new(nm);
    int x;
    if (below(4)) {
        int64_t C = 1 + below(4), H = 3 + below(12), W = below(2) ? H : 3 + below(12);
        x = hr_input(g->m, "x", 3, (int64_t[]){C, H, W});
        ADD("in(%lld,%lld,%lld) ", (long long)C, (long long)H, (long long)W);
        int nb = 1 + below(6);
        for (int b = 0; b < nb && x >= 0; b++) {
            int64_t h = HH(x), w = WW(x), mn = h < w ? h : w;
            switch (below(10)) {
            case 0: x = rconv(g, x, 1 + below(8), true); break;
            case 1: ADD("BN "), x = hr_batchnorm(g->m, NULL, x, CH(x), 1e-5f, 0.1f); break;
            case 2: ADD("ReLU "), x = hr_relu(g->m, NULL, x); break;
            case 3:
                if (mn >= 2) {
                    int k = mn >= 3 ? 2 + below(2) : 2, s = (int[]){1, 2, 0}[below(3)];
                    bool mx = below(2);
                    ADD("%s(k%d,s%d) ", mx ? "MaxPool" : "AvgPool", k, s ? s : k);
                    x = mx ? hr_maxpool2d(g->m, NULL, x, k, s) : hr_avgpool2d(g->m, NULL, x, k, s);
                }
                break;
            case 4: {
                float p = (float[]){0.0f, 0.1f, 0.5f}[below(3)];
                ADD("Dropout(%g) ", p);
                x = hr_dropout(g->m, NULL, x, p);
                break;
            }
            case 5: { /* a residual block */
                ADD("Residual[");
                int y = rconv(g, x, CH(x), false);
                if (below(2)) ADD("BN "), y = hr_batchnorm(g->m, NULL, y, CH(y), 1e-5f, 0.1f);
                if (below(2)) ADD("ReLU "), y = hr_relu(g->m, NULL, y);
                ADD("] ");
                x = below(2) ? hr_add(g->m, NULL, x, y) : hr_add(g->m, NULL, y, x);
                if (below(2)) ADD("ReLU "), x = hr_relu(g->m, NULL, x);
                break;
            }
            case 6: { /* two or three branches of the same size, stacked */
                int n = 2 + below(2), br[3];
                ADD("Concat[");
                for (int i = 0; i < n; i++) {
                    int kind = below(3);
                    if (kind == 0) {
                        ADD("Conv1x1 ");
                        br[i] = hr_conv2d(g->m, NULL, x, CH(x), 1 + below(4), 1, 1, 0, true);
                    } else if (kind == 1) {
                        br[i] = rconv(g, x, 1 + below(4), false);
                    } else {
                        ADD("ReLU ");
                        br[i] = hr_relu(g->m, NULL, x);
                    }
                }
                ADD("] ");
                x = hr_concat(g->m, NULL, n, br);
                break;
            }
            case 7:
                if (below(3) == 0) ADD("GAP "), x = hr_global_avgpool(g->m, NULL, x);
                break;
            case 8: x = ract(g, x); break;
            case 9: x = rln(g, x); break;
            }
        }
        ADD("Flatten ");
        if (x >= 0) x = hr_flatten(g->m, NULL, x);
    } else {
        int64_t F = 1 + below(40);
        x = hr_input(g->m, "x", 1, &F);
        ADD("in(%lld) ", (long long)F);
    }
    int nd = below(4);
    for (int i = 0; i < nd && x >= 0; i++) {
        int64_t F = hr_tensor_dim(g->m, x, 0), O = 1 + below(24);
        ADD("Linear(%lld,%lld) ", (long long)F, (long long)O);
        x = hr_linear(g->m, NULL, x, F, O, below(4) != 0);
        if (x >= 0 && below(2)) ADD("BN1d "), x = hr_batchnorm(g->m, NULL, x, O, 1e-5f, 0.1f);
        if (x >= 0 && below(4) == 0) x = rln(g, x);
        if (x >= 0 && below(2)) ADD("ReLU "), x = hr_relu(g->m, NULL, x);
        else if (x >= 0 && below(2)) x = ract(g, x);
        if (x >= 0 && below(3) == 0) ADD("Dropout "), x = hr_dropout(g->m, NULL, x, 0.25f);
    }
    if (x >= 0) {
        int64_t F = hr_tensor_dim(g->m, x, 0), K = 2 + below(9);
        ADD("Linear(%lld,%lld) ", (long long)F, (long long)K);
        x = hr_linear(g->m, NULL, x, F, K, true);
        if (below(10) < 7) {
            ADD("CE");
            if (x >= 0) x = hr_loss_cross_entropy(g->m, x, K);
        } else {
            int f = below(3);
            if (f == 1 && x >= 0) ADD("Softmax "), x = hr_softmax(g->m, NULL, x);
            if (f == 2 && x >= 0) ADD("LogSoftmax "), x = hr_log_softmax(g->m, NULL, x);
            ADD("MSE");
            if (x >= 0) x = hr_loss_mse(g->m, x);
        }
    }
    memcpy(desc, g->desc, sizeof g->desc);
    if (x < 0) {
        CHECK(0, "random stack %d failed to build: %s\n  %s", idx, hr_last_error(), g->desc);
        hr_model_free(g->m);
        return NULL;
    }
    if (below(5) == 0) { /* freeze a parameter now and then (the name may match none) */
        char p[32];
        snprintf(p, sizeof p, "%d.weight", below(6));
        hr_model_freeze(g->m, p);
        ADD(" [froze %s]", p);
        memcpy(desc, g->desc, sizeof g->desc);
    }
    return g->m;
}

static void test_random_stacks(int n, uint64_t seed) {
    prng_s = seed;
    int with_problems = 0, planned = 0, worst_at = -1;
    static char worst_desc[1024];
    double worst = 0, worst_ratio = 0;
    for (int i = 0; i < n; i++) {
        char desc[1024];
        hr_model_t *m = random_stack(i, desc, sizeof desc);
        if (!m) continue;
        hr_config_t c = hr_config_default();
        c.seed = (uint64_t)i;
        c.mode = below(4) == 0 ? HR_MODE_INFER : HR_MODE_TRAIN;
        c.optim.kind = (hr_optim_kind)below(3);
        c.optim.lr = 0.01f;
        if (c.optim.kind == HR_OPTIM_SGD && below(2)) c.optim.momentum = 0.9f, c.optim.nesterov = below(2);
        if (below(3) == 0) c.optim.clip_norm = 1.0f;
        c.keep_grads = below(3) == 0;
        int f0 = check_fail;
        char label[64];
        /* a large batch: plan only */
        c.batch = 1 + below(4000);
        snprintf(label, sizeof label, "random stack %d (batch %lld)", i, (long long)c.batch);
        check_out o = {0};
        compile_checked(m, &c, label, &o, false);
        planned++;
        if (o.my_lb && (double)o.arena / (double)o.my_lb > worst_ratio) {
            worst_ratio = (double)o.arena / (double)o.my_lb;
            worst_at = i;
            snprintf(worst_desc, sizeof worst_desc, "%s", desc);
        }
        /* a small batch: plan, and run against separate buffers */
        c.batch = 1 + below(6);
        snprintf(label, sizeof label, "random stack %d (batch %lld)", i, (long long)c.batch);
        compile_checked(m, &c, label, &o, false);
        oracle(m, &c, label, &worst);
        if (check_fail != f0) {
            with_problems++;
            fprintf(stderr, "  stack %d (%s, %s%s): %s\n", i, c.mode == HR_MODE_INFER ? "inference" : "train",
                    c.optim.kind == HR_OPTIM_SGD ? "SGD" : c.optim.kind == HR_OPTIM_ADAM ? "Adam" : "AdamW",
                    c.keep_grads ? ", keep_grads" : "", desc);
        }
        hr_model_free(m);
    }
    printf("  %d random stacks (seed %llu): %d with problems; worst arena-vs-unshared difference %.3g\n", planned,
           (unsigned long long)seed, with_problems, worst);
    if (worst_at >= 0)
        printf("  worst arena/lower bound %.4f (not checked on random stacks), stack %d: %s\n", worst_ratio, worst_at,
               worst_desc);
}

/* The example model files, when present (another engineer's): each plans
 * cleanly in train and inference mode and runs as separate buffers do. */
static void test_examples(void) {
    const char *dir = getenv("HR_EXAMPLES") ? getenv("HR_EXAMPLES") : "examples";
    DIR *d = opendir(dir);
    if (!d) {
        printf("SKIP %s: no %s/ directory (model files)\n", __FILE__, dir);
        return;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".model") != 0 || strstr(e->d_name, "broken")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        hr_model_t *m = hr_modelfile_load(path);
        CHECK(m != NULL, "%s: %s", path, hr_last_error());
        if (!m) continue;
        /* the planned and the unshared step run only where they take seconds:
         * GPT-2's (124M parameters, 1024 positions) would take minutes */
        int64_t params = 0;
        for (int t = 0; t < m->g.nt; t++)
            if (m->g.t[t].kind == HR_T_PARAM) params += hr_shape_numel(&m->g.t[t].shape);
        bool run = params <= 20000000;
        if (!run) printf("  %-28s %lld parameters: plans checked, no step run\n", path, (long long)params);
        for (int v = 0; v < NVARIANTS; v += 3) {
            hr_config_t c = cfg_for(32, v);
            char label[600];
            snprintf(label, sizeof label, "%s %s", path, variant_name[v]);
            check_out o = {0};
            compile_checked(m, &c, label, &o, false);
            if (v == 0 && o.my_lb) printf("  %-28s arena/lower bound %.4f\n", path, (double)o.arena / (double)o.my_lb);
            c.batch = 2;
            double w = 0;
            if (run) oracle(m, &c, label, &w);
        }
        n++;
        hr_model_free(m);
    }
    closedir(d);
    if (n == 0) printf("SKIP %s: no model files in %s/\n", __FILE__, dir);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* test_plan [number of random stacks [seed]] */
    int nrandom = argc > 1 ? atoi(argv[1]) : 240;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 20261126;
    double t0 = now();
    test_seed_models();
    test_big_batches();
    test_bad_batches();
    test_largest_batch();
    test_frozen();
    test_random_stacks(nrandom, seed);
    test_examples();
    printf("  (%.2f s)\n", now() - t0);
    TEST_END();
}
