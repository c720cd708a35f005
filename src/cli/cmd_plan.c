/* cmd_plan.c — `headroom plan`: the category table of one step for a batch,
 * and with --budget the largest batch that fits, all without allocating. */
#include <stdio.h>

#include "cli/cli.h"
#include "io/io.h"

int hr_cmd_plan(const hr_cli_opts *o) {
    hr_model_t *m = hr_modelfile_load(o->model);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    hr_config_t cfg = hr_cli_config(o);
    if (o->batch < 0) cfg.batch = 64;
    /* A plan never needs the device: without one, CUDA plans use the CPU's
     * workspace sizes, which the report says. */
    if (cfg.device == HR_DEVICE_AUTO) cfg.device = HR_DEVICE_CPU;
    hr_session_t *s = hr_compile(m, &cfg);
    if (!s && cfg.device == HR_DEVICE_CUDA) {
        fprintf(stderr, "headroom plan: %s; planning with the CPU backend's workspace sizes instead\n", hr_last_error());
        cfg.device = HR_DEVICE_CPU;
        s = hr_compile(m, &cfg);
    }
    if (!s) {
        int rc = hr_cli_fail(HR_ERR_INVALID_ARG);
        hr_model_free(m);
        return rc;
    }
    const hr_report_t *r = hr_session_report(s);
    int rc = HR_EXIT_OK;
    int64_t largest = -1;
    if (o->budget_set) {
        largest = hr_largest_batch(m, &cfg, o->budget, 0, (int64_t)1 << 40);
        if (r->arena_bytes > o->budget) rc = HR_EXIT_NOFIT;
    }
    if (o->json) {
        hr_report_json(s, stdout);
        if (o->budget_set)
            printf("{\"budget\": %zu, \"fits\": %s, \"largest_batch\": %lld}\n", o->budget, rc ? "false" : "true",
                   (long long)largest);
    } else {
        hr_report_print(s, stdout);
        if (o->budget_set) {
            char a[32], b[32];
            printf("budget %s: batch %lld %s (needs %s)\n", hr_format_bytes(o->budget, a, sizeof a), (long long)cfg.batch,
                   rc ? "does NOT fit" : "fits", hr_format_bytes(r->arena_bytes, b, sizeof b));
            if (largest > 0)
                printf("largest batch that fits: %lld\n", (long long)largest);
            else
                printf("no batch fits: the parameters and optimizer state alone need more than the budget\n");
        }
    }
    hr_session_free(s);
    hr_model_free(m);
    return rc;
}
