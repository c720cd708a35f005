/* cmd_fit.c — `headroom fit`: the fastest way to train an effective batch
 * within a byte budget. Every candidate (micro-batch and accumulation,
 * precision, recomputation) is planned exactly; its step time is predicted
 * from per-node times measured on this device (cached; measured here for the
 * shapes the cache lacks, unless --no-measure) or estimated from FLOP and
 * byte counts. Prints the candidates, the choice and the `train` command
 * line; --json for programs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpus.h"
#include "cli/cli.h"
#include "exec/internal.h"
#include "io/io.h"
#include "plan/cost.h"

/* Measures the nodes of candidate c that the cache lacks: a throwaway
 * session of that configuration, a few steps on random data. */
static hr_status measure(const hr_model_t *m, const hr_config_t *base, const hr_fit_candidate *c, hr_cost_model *cm,
                         bool cuda) {
    hr_config_t cfg = *base;
    cfg.precision = c->precision;
    cfg.accumulate = c->accumulate;
    cfg.recompute = c->recompute;
    cfg.eval_batch = 0;
    hr_session_t *s = hr_compile(m, &cfg);
    if (!s) return hr_last_status();
    hr_status st = hr_session_alloc(s);
    if (!st) st = hr_cost_measure(s, cm, cuda ? 20 : 3); /* GPU steps take milliseconds: medians of 20 */
    hr_session_free(s);
    return st;
}

static void print_command(FILE *f, const hr_cli_opts *o, const hr_fit_candidate *c, bool cuda) {
    fprintf(f, "headroom train %s --batch %lld", o->model, (long long)o->batch);
    if (o->context > 0) fprintf(f, " --context %lld", (long long)o->context);
    if (c->accumulate > 1) fprintf(f, " --accumulate %d", c->accumulate);
    if (c->precision != HR_PREC_FP32) fprintf(f, " --precision %s", hr_precision_name(c->precision));
    if (c->recompute) fprintf(f, " --recompute %s", c->recompute);
    if (o->budget_set) fprintf(f, " --budget %s", o->budget_arg);
    fprintf(f, " --device %s", cuda ? "cuda" : "cpu");
}

static int by_time(const void *a, const void *b) {
    const hr_fit_candidate *x = a, *y = b;
    if (x->fits != y->fits) return x->fits ? -1 : 1;
    return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

/* What one search leaves: the batch-1 session that holds the backend (and
 * on a GPU its context), the cost model, the candidates sorted by predicted
 * time (fitting ones first), the budget and overhead. */
typedef struct {
    hr_session_t *s;
    hr_cost_model *cm;
    hr_fit_result res;
    size_t budget, overhead;
    bool cuda;
    unsigned prec;
} fit_run;

static void fit_run_free(fit_run *f) {
    hr_fit_result_free(&f->res);
    hr_cost_model_free(f->cm);
    hr_session_free(f->s);
    memset(f, 0, sizeof *f);
}

/* The search of cfg.batch (cfg: train's, device resolved) within o's budget
 * or what is free; measures the candidates the cache lacks unless
 * --no-measure. Returns an exit status (0: searched; whether anything fits
 * is f->res.best). */
static int fit_search(const hr_cli_opts *o, const hr_model_t *m, const hr_config_t *cfg, unsigned prec, fit_run *f,
                      const char *cmd) {
    memset(f, 0, sizeof *f);
    f->cuda = cfg->device == HR_DEVICE_CUDA;
    f->prec = prec;
    hr_config_t one = *cfg; /* one sample: the backend, its overhead, what is free */
    one.batch = 1;
    one.accumulate = 1;
    one.recompute = NULL;
    one.device_budget = 0;
    one.eval_batch = 0;
    if (!(f->s = hr_compile(m, &one))) return hr_cli_fail(hr_last_status());
    f->overhead = hr_session_report(f->s)->overhead_bytes;
    f->budget = o->budget_set ? o->budget : hr_session_device_room(f->s);
    if (f->budget == SIZE_MAX) {
        fprintf(stderr, "headroom %s: give --budget (the memory the job may hold, e.g. --budget 8GiB): on the CPU "
                        "there is no device to ask what is free\n", cmd);
        return HR_EXIT_USAGE;
    }
    if (!(f->cm = hr_cost_model_here(f->cuda))) return hr_cli_fail(hr_last_status());
    hr_config_t c = *cfg;
    c.recompute = NULL;
    c.device_budget = 0;
    /* the evaluation pass as train plans it (by default the micro-batch's) */
    hr_backend *be = hr_session_backend(f->s);
    hr_status st = hr_fit_search(m, &c, prec, true, be, f->cuda, f->budget, f->overhead, f->cm, &f->res);
    /* measure what the cache lacks, fastest predicted first, then weigh again */
    int measured = 0;
    if (!st && !o->no_measure && f->res.best >= 0) {
        qsort(f->res.c, (size_t)f->res.n, sizeof *f->res.c, by_time);
        for (int i = 0; i < f->res.n && f->res.c[i].fits && measured < 8; i++) {
            const hr_fit_candidate *k = &f->res.c[i];
            if (!k->estimated) continue;
            if (!o->quiet && !o->json)
                fprintf(stderr, "%s: measuring micro-batch %lld, %s%s on this device...\n", cmd, (long long)k->micro,
                        hr_precision_name(k->precision), k->recompute ? ", recomputing" : "");
            if (measure(m, &c, k, f->cm, f->cuda) != HR_OK)
                fprintf(stderr, "%s: measuring failed (%s); its prediction stays an estimate\n", cmd, hr_last_error());
            measured++;
        }
        if (measured) {
            hr_fit_result_free(&f->res);
            st = hr_fit_search(m, &c, prec, true, be, f->cuda, f->budget, f->overhead, f->cm, &f->res);
        }
    }
    if (st) return hr_cli_fail(st);
    qsort(f->res.c, (size_t)f->res.n, sizeof *f->res.c, by_time);
    f->res.best = f->res.n && f->res.c[0].fits ? 0 : -1;
    return HR_EXIT_OK;
}

/* Nothing fits: what the smallest configuration (one sample a micro-batch,
 * the most compact precision allowed, the smallest recomputation) needs. */
static void nothing_fits(const char *cmd, const hr_model_t *m, const hr_config_t *cfg, const fit_run *f) {
    hr_config_t c = *cfg;
    char a[32], b[32];
    c.accumulate = (int)(cfg->batch <= (1 << 30) ? cfg->batch : 1);
    c.precision = f->prec >> HR_PREC_BF16 & 1 ? HR_PREC_BF16 : f->prec >> HR_PREC_FP16 & 1 ? HR_PREC_FP16 : HR_PREC_FP32;
    c.recompute = "min";
    hr_recompute_choice ch;
    if (hr_recompute_choose_for(m, &c, hr_session_backend(f->s), f->cuda, f->budget, f->overhead, f->cm, &ch) == HR_OK) {
        fprintf(stderr,
                "headroom %s: nothing fits %s: the smallest configuration (micro-batch 1 x %d, %s%s%s) needs %s; give a "
                "larger --budget%s\n",
                cmd, hr_format_bytes(f->budget, a, sizeof a), c.accumulate, hr_precision_name(c.precision),
                *ch.layers ? ", recomputing " : "", ch.layers, hr_format_bytes(ch.total, b, sizeof b),
                f->prec == 1u << HR_PREC_FP32 ? ", or allow --precision fp32,bf16" : "");
        hr_free(ch.layers);
    } else {
        fprintf(stderr, "headroom %s: nothing fits %s (%s)\n", cmd, hr_format_bytes(f->budget, a, sizeof a),
                hr_last_error());
    }
}

int hr_fit_for_train(const hr_cli_opts *o, const hr_model_t *m, hr_config_t *cfg, unsigned allowed, char **recompute,
                     const char *why) {
    *recompute = NULL;
    fit_run f;
    int rc = fit_search(o, m, cfg, allowed, &f, "train --fit");
    if (!rc && f.res.best < 0) {
        nothing_fits("train --fit", m, cfg, &f);
        rc = HR_EXIT_NOFIT;
    }
    if (!rc) {
        const hr_fit_candidate *c = &f.res.c[0];
        char a[32], b[32];
        cfg->accumulate = c->accumulate;
        cfg->precision = c->precision;
        if (c->recompute && !(*recompute = strdup(c->recompute))) rc = hr_cli_fail(HR_ERR_OOM);
        cfg->recompute = *recompute;
        if (!o->budget_set) cfg->device_budget = 0; /* the session checks what is free itself */
        if (!o->quiet)
            printf("fit%s: batch %lld as %d x %lld, %s%s%s: %s of %s%s, predicted %.2f ms a step\n", why,
                   (long long)cfg->batch, c->accumulate, (long long)c->micro, hr_precision_name(c->precision),
                   c->recompute ? ", recomputing " : "", c->recompute ? c->recompute : "",
                   hr_format_bytes(c->total, a, sizeof a), hr_format_bytes(f.budget, b, sizeof b),
                   o->budget_set ? " (--budget)" : " (free now)", 1e3 * c->step_s);
    }
    fit_run_free(&f);
    return rc;
}

int hr_cmd_fit(const hr_cli_opts *o) {
    if (o->batch < 1) {
        fprintf(stderr, "headroom fit: which effective batch? give --batch N (the samples an optimizer step sees)\n");
        return HR_EXIT_USAGE;
    }
    if (o->mode != HR_MODE_TRAIN) {
        fprintf(stderr, "headroom fit: fitting is for training; leave --mode out\n");
        return HR_EXIT_USAGE;
    }
    hr_model_t *m = hr_cli_load_model(o);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    hr_config_t cfg = hr_cli_config(o);
    if (cfg.device == HR_DEVICE_AUTO) cfg.device = hr_backend_cuda_available() ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    bool cuda = cfg.device == HR_DEVICE_CUDA;
    unsigned prec = o->precisions ? o->precisions : 1u << o->precision;
    fit_run f;
    int rc = fit_search(o, m, &cfg, prec, &f, "fit");
    if (rc) goto done;
    hr_fit_result res = f.res;
    size_t budget = f.budget;
    hr_cost_model *cm = f.cm;
    char a[32], b[32];
    if (o->json) {
        printf("{\"model\": \"%s\", \"batch\": %lld, \"budget\": %zu, \"device\": \"%s\", \"cost_cache\": \"%s\", "
               "\"candidates\": [",
               o->model, (long long)o->batch, budget, cuda ? "cuda" : "cpu", hr_cost_cache_path(cm));
        for (int i = 0; i < res.n; i++) {
            const hr_fit_candidate *c = &res.c[i];
            printf("%s{\"precision\": \"%s\", \"micro_batch\": %lld, \"accumulate\": %d, \"recompute\": \"%s\", "
                   "\"arena_bytes\": %zu, \"device_total\": %zu, \"step_ms\": %.4f, \"samples_per_s\": %.1f, "
                   "\"measured_nodes\": %d, \"estimated_nodes\": %d, \"fits\": %s}",
                   i ? ", " : "", hr_precision_name(c->precision), (long long)c->micro, c->accumulate,
                   c->recompute ? c->recompute : "", c->arena, c->total, 1e3 * c->step_s,
                   c->step_s > 0 ? (double)o->batch / c->step_s : 0, c->measured, c->estimated,
                   c->fits ? "true" : "false");
        }
        printf("], \"choice\": %d", res.best);
        if (res.best >= 0) {
            printf(", \"command\": \"");
            print_command(stdout, o, &res.c[0], cuda);
            printf("\"");
        }
        printf("}\n");
    } else {
        printf("fit: %s, effective batch %lld, within %s%s on %s\n", o->model, (long long)o->batch,
               hr_format_bytes(budget, a, sizeof a), o->budget_set ? "" : " (what is free now)", cuda ? "cuda" : "cpu");
        printf("  %-9s %12s %-24s %12s %11s %12s  %s\n", "precision", "micro x K", "recompute", "device total",
               "step ms", "samples/s", "");
        for (int i = 0; i < res.n; i++) {
            const hr_fit_candidate *c = &res.c[i];
            char mk[48], rl[32];
            snprintf(mk, sizeof mk, "%lld x %d", (long long)c->micro, c->accumulate);
            if (!c->recompute) snprintf(rl, sizeof rl, "-");
            else {
                int k = 1;
                for (const char *p = c->recompute; *p; p++) k += *p == ',';
                snprintf(rl, sizeof rl, "%d layer%s", k, k > 1 ? "s" : "");
            }
            printf("  %-9s %12s %-24s %12s %11.3f %12.0f  %s%s\n", hr_precision_name(c->precision), mk, rl,
                   hr_format_bytes(c->total, b, sizeof b), 1e3 * c->step_s,
                   c->step_s > 0 ? (double)o->batch / c->step_s : 0, c->fits ? "fits" : "does not fit",
                   i == res.best ? "  <- chosen" : "");
        }
        int nm = 0, ne = 0;
        if (res.best >= 0) nm = res.c[0].measured, ne = res.c[0].estimated;
        printf("  step times: %s (cache %s)\n",
               res.best >= 0 ? (ne ? "partly estimated from FLOP and byte counts" : "from times measured on this device")
                             : "predicted",
               hr_cost_cache_path(cm));
        (void)nm;
        if (res.best >= 0) {
            printf("choice: ");
            print_command(stdout, o, &res.c[0], cuda);
            printf("\n");
        }
    }
    if (res.best < 0) {
        nothing_fits("fit", m, &cfg, &f);
        rc = HR_EXIT_NOFIT;
    }
done:
    fit_run_free(&f);
    hr_model_free(m);
    return rc;
}
