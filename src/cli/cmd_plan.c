/* cmd_plan.c — `headroom plan`: the category table of one step for a batch,
 * the device total the process will hold, and with --budget or --gpu
 * whether it fits and the largest batch that does, all without allocating. */
#include <stdio.h>
#include <string.h>

#include "backend/gpus.h"
#include "cli/cli.h"
#include "exec/internal.h"
#include "io/io.h"

/* The slices plan's hint tries: enough that a slice's activations are a
 * small part of the batch's tensors, few enough to plan in milliseconds. */
#define HR_PLAN_SLICES 64

int hr_cmd_plan(const hr_cli_opts *o) {
    const hr_gpu_info *gpu = NULL;
    if (o->gpu && !(gpu = hr_gpu_find(o->gpu))) {
        fprintf(stderr, "headroom plan: --gpu '%s' is not a GPU headroom has measured; known: %s (or give --budget)\n",
                o->gpu, hr_gpu_keys());
        return HR_EXIT_USAGE;
    }
    hr_model_t *m = hr_cli_load_model(o);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    hr_config_t cfg = hr_cli_config(o);
    if (o->batch < 0) cfg.batch = 64;
    /* the plan answers the budget question itself, below; recomputation
     * chosen by the search looks for a plan within it */
    cfg.device_budget = hr_recompute_searched(cfg.recompute) && o->budget_set ? o->budget : 0;
    /* A plan never needs the device: without one, CUDA plans use the CPU's
     * workspace sizes and the GPU's known without it (backend/gpus.h), and
     * the overhead comes from --gpu's measurement. */
    if (cfg.device == HR_DEVICE_AUTO) cfg.device = gpu ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    bool want_cuda = cfg.device == HR_DEVICE_CUDA;
    hr_session_t *s = hr_compile(m, &cfg);
    if (!s && want_cuda) {
        fprintf(stderr, "headroom plan: %s; planning with the CPU backend's workspace sizes and the GPU's that are "
                        "known without one (the head's piece of logits) instead\n", hr_last_error());
        /* a CPU backend made for the CUDA config: it plans the GPU's half kernels */
        hr_backend *be = hr_backend_cpu_new(&cfg);
        cfg.device = HR_DEVICE_CPU;
        if (be && !(s = hr_compile_on(m, &cfg, be))) be->free(be);
    }
    if (!s) {
        int rc = hr_cli_fail(HR_ERR_INVALID_ARG);
        hr_model_free(m);
        return rc;
    }
    const hr_report_t *r = hr_session_report(s);
    bool on_gpu = want_cuda && cfg.device == HR_DEVICE_CUDA; /* a GPU is here: the overhead is measured */
    size_t overhead = on_gpu ? r->overhead_bytes : want_cuda && gpu ? gpu->overhead_bytes : 0;
    size_t total = want_cuda ? hr_device_total(r->arena_bytes, overhead) : r->arena_bytes;
    bool estimate = want_cuda && !on_gpu;
    /* the question: --budget; else on a GPU what is free on it now (the
     * test train's allocation makes); else the whole of --gpu's memory */
    bool ask = o->budget_set || on_gpu || gpu;
    size_t budget = o->budget_set ? o->budget
                    : on_gpu      ? hr_session_device_room(s)
                    : gpu         ? gpu->total_bytes - HR_DEVICE_RESERVE
                                  : 0;
    const char *whose = o->budget_set ? "" : on_gpu ? " (what is free on this GPU now, less the driver's 32 MiB, + the "
                                                      "overhead held)"
                                                    : " (the GPU's memory less the driver's 32 MiB)";
    int rc = HR_EXIT_OK;
    int64_t largest = -1, sliced = -1; /* the largest batch; with --chunks HR_PLAN_SLICES (-1: no larger) */
    if (ask) {
        hr_config_t c = cfg;
        c.device = want_cuda ? HR_DEVICE_CUDA : HR_DEVICE_CPU; /* pages counted for a GPU's budget */
        largest = on_gpu ? hr_largest_batch_on(m, &c, budget, overhead, (int64_t)1 << 40, hr_session_backend(s))
                         : hr_largest_batch(m, &c, budget, overhead, (int64_t)1 << 40);
        if (total > budget) rc = HR_EXIT_NOFIT;
        /* the first layers in slices, where the model has such layers (training); the
         * slices recompute their layers themselves, so no recomputation is searched
         * beside them (a bisection of searches: seconds on a ResNet, for nothing) */
        if (largest >= 0 && cfg.mode == HR_MODE_TRAIN && cfg.chunks <= 1) {
            c.chunks = HR_PLAN_SLICES;
            c.recompute = NULL;
            sliced = on_gpu ? hr_largest_batch_on(m, &c, budget, overhead, (int64_t)1 << 40, hr_session_backend(s))
                            : hr_largest_batch(m, &c, budget, overhead, (int64_t)1 << 40);
            if (sliced <= largest) sliced = -1;
        }
    }
    char a[32], b[32];
    if (o->json) {
        hr_report_json(s, stdout);
        printf("{\"device_total\": %zu, \"overhead_bytes\": %zu, \"estimate\": %s", total, overhead,
               estimate ? "true" : "false");
        if (gpu) printf(", \"gpu\": \"%s\", \"gpu_measured\": \"%s\"", gpu->name, gpu->measured);
        if (ask)
            printf(", \"budget\": %zu, \"fits\": %s, \"largest_batch\": %lld, \"largest_batch_sliced\": %lld", budget,
                   rc ? "false" : "true", (long long)largest, (long long)sliced);
        printf("}\n");
    } else {
        hr_report_print(s, stdout);
        if (estimate && gpu)
            printf("  %-18s %12s   (estimate for an %s: arena in 2 MiB pages + its measured overhead %s; %s)\n",
                   "device total", hr_format_bytes(total, a, sizeof a), gpu->name,
                   hr_format_bytes(overhead, b, sizeof b), gpu->measured);
        else if (estimate)
            printf("  %-18s %12s   (the arena alone: no GPU here to measure the runtime overhead; --gpu h100 "
                   "or h200 adds the one measured there)\n", "device total", hr_format_bytes(r->arena_bytes, a, sizeof a));
        if (ask) {
            printf("budget %s%s: batch %lld %s (needs %s)\n", hr_format_bytes(budget, a, sizeof a), whose,
                   (long long)cfg.batch,
                   rc ? "does NOT fit" : "fits", hr_format_bytes(total, b, sizeof b));
            if (sliced > 0)
                printf("largest batch that fits: %lld\n  with --chunks %d (the first layers in slices of the batch, each "
                       "recomputed: slower steps): %lld\n", (long long)largest, HR_PLAN_SLICES, (long long)sliced);
            else if (largest > 0)
                printf("largest batch that fits: %lld\n", (long long)largest);
            else
                printf("no batch fits: the parameters and optimizer state alone need more than the budget\n");
        }
    }
    if (o->html) {
        if (hr_plan_html(s, o->html) != HR_OK) {
            fprintf(stderr, "headroom plan: %s\n", hr_last_error());
            rc = HR_EXIT_ERROR;
        } else {
            fprintf(o->json ? stderr : stdout, "memory drawn in %s\n", o->html);
        }
    }
    hr_session_free(s);
    hr_model_free(m);
    return rc;
}
