/* train_observe.c — train's --trace and --profile: the trace opened before
 * anything is planned, the loader's times and each step handed to it, and at
 * the end the profile's table and the trace's file, however the run ended. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "data/data.h"
#include "exec/internal.h"

static bool trace_failed; /* the file could not be written once the steps were done: said then */

int hr_train_trace_open(const hr_cli_opts *o, struct hr_trace **tr) {
    *tr = NULL;
    trace_failed = false;
    if (!o->trace) return HR_EXIT_OK;
    if (hr_trace_check_path(o->trace) != HR_OK) {
        fprintf(stderr, "headroom train: --trace: %s\n", hr_last_error());
        return HR_EXIT_USAGE;
    }
    if (!(*tr = hr_trace_new(o->trace, (int)o->trace_steps))) return hr_cli_fail(HR_ERR_OOM);
    return HR_EXIT_OK;
}

int hr_train_observe_start(const hr_cli_opts *o, hr_session_t *s, struct hr_trace *tr) {
    hr_status st = o->profile ? hr_session_profile_on(s) : HR_OK;
    if (!st && tr) st = hr_trace_attach(tr, s);
    return st ? hr_cli_fail(st) : HR_EXIT_OK;
}

hr_status hr_train_next_batch(struct hr_loader *ld, struct hr_trace *tr, const float **x, const int32_t **y,
                              int64_t *n) {
    double w0 = tr ? hr_trace_clock() : 0;
    hr_status st = hr_loader_next(ld, x, y, n);
    if (!st && tr && *n > 0) {
        double g0, g1, w1 = hr_trace_clock();
        hr_loader_times(ld, &g0, &g1);
        hr_trace_batch(tr, w0, w1, g0, g1, *n);
    }
    return st;
}

int hr_train_step_observed(struct hr_trace *tr, hr_session_t *s, float loss) {
    if (!tr) return HR_EXIT_OK;
    if (hr_trace_step_end(tr, hr_step_count(s), loss) != HR_OK && !trace_failed) {
        trace_failed = true;
        fprintf(stderr, "headroom train: --trace: %s (training goes on; the run will end with status 1)\n",
                hr_last_error());
    }
    if (!hr_trace_interrupted()) return HR_EXIT_OK;
    fprintf(stderr, "\nheadroom train: interrupted after step %lld; nothing was saved since the last checkpoint\n",
            (long long)hr_step_count(s));
    return 130;
}

int hr_train_observe_end(const hr_cli_opts *o, hr_session_t *s, struct hr_trace *tr, int rc) {
    if (o->profile && s && hr_session_profile_mode(s)) {
        fflush(stdout);
        if (hr_profile_print_sorted(s, stdout) != HR_OK) fprintf(stderr, "headroom train: --profile: %s\n", hr_last_error());
    }
    if (!tr) return rc;
    bool before = hr_trace_written(tr);
    char why[512];
    if (rc == HR_EXIT_OK) snprintf(why, sizeof why, "the run ended before the traced steps were done");
    else if (rc == HR_EXIT_NUMERIC) snprintf(why, sizeof why, "the loss was NaN or infinite (the run stopped)");
    else if (rc == 130) snprintf(why, sizeof why, "interrupted (SIGINT or SIGTERM)");
    else snprintf(why, sizeof why, "%s: %.400s", rc == HR_EXIT_NOFIT ? "out of memory" : "an error",
                  hr_last_error());
    char *nl = strchr(why, '\n'); /* the first line of a long message */
    if (nl) *nl = 0;
    hr_status st = hr_trace_finish(tr, why);
    int steps;
    size_t bytes;
    double secs;
    hr_trace_stats(tr, &steps, &bytes, &secs);
    if (st && !before) {
        fprintf(stderr, "headroom train: --trace: %s\n", hr_last_error());
    } else if (!st && !trace_failed && (!o->quiet || !before)) {
        char b[32];
        /* a run that stopped early says so on stderr, beside its error */
        fprintf(before ? stdout : stderr, "trace: %s, %d step%s, %s, written in %.1f ms%s%s%s\n", hr_trace_path(tr),
                steps, steps == 1 ? "" : "s", hr_format_bytes(bytes, b, sizeof b), 1e3 * secs, before ? "" : " (",
                before ? "" : why, before ? "" : ")");
    }
    if ((st || trace_failed) && rc == HR_EXIT_OK) rc = HR_EXIT_ERROR;
    hr_trace_free(tr);
    return rc;
}
