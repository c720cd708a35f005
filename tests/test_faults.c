/* test_faults.c — every allocation can fail: for k = 1, 2, ... the kth
 * allocation of a whole use (build a model, compile, plan, allocate, two
 * train steps, largest batch, free) fails; each run must end in a clean
 * HR_ERR_OOM with a message, never a crash or a leak (run.sh runs this under
 * valgrind when it is installed). Each k runs in a child process, so that a
 * crash is one failure and the search goes on. */
#include "check.h"
#include "exec/internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define B 4

/* What a run reports to the parent, through a pipe. */
typedef struct {
    int64_t allocs;    /* allocations the run made */
    int failed_at;     /* which stage failed (0: none) */
    int clean;         /* the failure was a clean OOM with a message */
    int64_t largest;   /* hr_largest_batch's answer */
    float loss[2];     /* the two steps' losses */
    char msg[200];
} report;

static const char *stage_name[] = {"none", "hr_model_new", "a builder", "hr_compile", "hr_session_alloc",
                                   "alloc retry", "hr_train_step", "hr_largest_batch", "allocations in a step"};

static bool oom_message(const char *e) {
    return e && strcmp(e, "no error") != 0 && (strstr(e, "memory") || strstr(e, "allocat"));
}

static hr_model_t *build(report *r) {
    hr_model_t *m = hr_model_new("faults");
    if (!m) {
        r->failed_at = 1;
        r->clean = oom_message(hr_last_error());
        return NULL;
    }
    int x = hr_input(m, "x", 3, (int64_t[]){2, 8, 8});
    if (x >= 0) x = hr_conv2d(m, NULL, x, 2, 4, 3, 1, 1, true);
    if (x >= 0) x = hr_batchnorm(m, NULL, x, 4, 1e-5f, 0.1f);
    if (x >= 0) x = hr_relu(m, NULL, x);
    if (x >= 0) x = hr_maxpool2d(m, NULL, x, 2, 2);
    if (x >= 0) x = hr_flatten(m, NULL, x);
    if (x >= 0) x = hr_dropout(m, NULL, x, 0.3f);
    if (x >= 0) x = hr_layernorm(m, NULL, x, 1, (int64_t[]){64}, 1e-5f, true, true);
    if (x >= 0) x = hr_gelu(m, NULL, x, false);
    if (x >= 0) x = hr_linear(m, NULL, x, 64, 5, true);
    if (x >= 0) x = hr_loss_cross_entropy(m, x, 5);
    if (x < 0) {
        r->failed_at = 2;
        r->clean = oom_message(hr_last_error());
        hr_model_free(m);
        return NULL;
    }
    return m;
}

/* hr_fault_fail_at both reads the count and re-arms; these keep one count
 * over the whole run, with the fault still at the run's kth allocation. */
static int64_t total, target;
static int64_t tally(void) {
    int64_t made = hr_fault_fail_at(0);
    total += made;
    hr_fault_fail_at(target > total ? target - total : 0);
    return made;
}

/* One whole use; the first failure ends it. */
static void run(report *r, int64_t k) {
    memset(r, 0, sizeof *r);
    r->largest = -2;
    hr_error_clear();
    total = 0, target = k;
    hr_fault_fail_at(k);
    hr_config_t cfg = hr_config_default();
    cfg.batch = B;
    cfg.optim.clip_norm = 1.0f;
    hr_session_t *s = NULL;
    hr_model_t *m = build(r);
    float x[B * 128];
    int32_t lab[B] = {0, 1, 2, 4};
    for (int i = 0; i < B * 128; i++) x[i] = (float)((i * 29) % 17) / 8.0f - 1.0f;
    if (!m) goto done;
    if (!(s = hr_compile(m, &cfg))) {
        r->failed_at = 3;
        r->clean = oom_message(hr_last_error());
        goto done;
    }
    hr_status st = hr_session_alloc(s);
    if (st) {
        r->failed_at = 4;
        r->clean = st == HR_ERR_OOM && oom_message(hr_last_error());
        snprintf(r->msg, sizeof r->msg, "%s", hr_last_error());
        /* nothing is lost: without the fault, the same session allocates and trains */
        hr_fault_fail_at(0);
        if (hr_session_alloc(s) != HR_OK || hr_train_step(s, x, lab, NULL) != HR_OK) {
            r->failed_at = 5;
            r->clean = 0;
            snprintf(r->msg, sizeof r->msg, "%s", hr_last_error());
        }
        goto done;
    }
    /* a steady-state step allocates nothing */
    tally();
    for (int i = 0; i < 2; i++) {
        if ((st = hr_train_step(s, x, lab, &r->loss[i])) != HR_OK) {
            r->failed_at = 6;
            r->clean = st == HR_ERR_OOM && oom_message(hr_last_error());
            goto done;
        }
    }
    int64_t in_steps = tally();
    if (in_steps) {
        r->failed_at = 8;
        snprintf(r->msg, sizeof r->msg, "two train steps made %lld allocations", (long long)in_steps);
        goto done;
    }
    /* plans only: on an allocation failure, -1 (with a message), never a wrong batch */
    r->largest = hr_largest_batch(m, &cfg, 1u << 20, 0, 1000);
    if (r->largest == -1) {
        r->failed_at = 7;
        r->clean = oom_message(hr_last_error());
    }
done:
    hr_session_free(s);
    hr_model_free(m);
    tally();
    hr_fault_fail_at(0);
    r->allocs = total;
    if (r->failed_at && !r->msg[0]) snprintf(r->msg, sizeof r->msg, "%s", hr_last_error());
}

/* Runs run(k) for k = k0, k0+1, ... (at most n, and not past the run that
 * made fewer than k allocations) in a child, each report written as soon as
 * it is made, so that after a crash the reports before it survive. Returns
 * how many reports came back; *status is the child's wait status. The parent
 * itself never runs a kernel: OpenMP's thread pool does not survive fork. */
static int child_runs(int64_t k0, int n, report *r, int *status) {
    int fd[2];
    if (pipe(fd) != 0) return perror("pipe"), 0;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        for (int i = 0; i < n; i++) {
            report c;
            run(&c, k0 + i);
            if (write(fd[1], &c, sizeof c) != (ssize_t)sizeof c) _exit(3);
            if (c.failed_at == 0 && k0 + i > c.allocs) break;
        }
        close(fd[1]);
        _exit(0); /* valgrind still checks leaks, and sets the status */
    }
    close(fd[1]);
    int got = 0;
    while (got < n && read(fd[0], &r[got], sizeof *r) == (ssize_t)sizeof *r) got++;
    close(fd[0]);
    waitpid(pid, status, 0);
    return got;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Under valgrind each child's leak check costs ~0.5 s: run several k a
     * child there (a leak is then reported for the group, with valgrind's
     * stack above it). */
    const char *pre = getenv("LD_PRELOAD"), *per = getenv("HR_FAULTS_PER_CHILD");
    int group = per ? atoi(per) : pre && strstr(pre, "vgpreload") ? 25 : 1;
    if (group < 1) group = 1;
    /* without faults: the allocations a whole use makes, and the answers */
    report base;
    memset(&base, 0, sizeof base);
    int ws = 0;
    bool ok = child_runs(0, 1, &base, &ws) == 1;
    CHECK(ok && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the run without faults crashed or leaked");
    CHECK(base.failed_at == 0, "without faults: %s failed: %s", stage_name[base.failed_at], base.msg);
    CHECK(base.largest > 0, "largest batch %lld", (long long)base.largest);
    if (!ok || base.failed_at) TEST_END();
    printf("  a whole use makes %lld allocations; largest batch in 1 MiB: %lld; %d run%s a child\n",
           (long long)base.allocs, (long long)base.largest, group, group > 1 ? "s" : "");
    /* one check per k; the first few failures of each kind are printed */
    enum { CRASH, LEAK, UNCLEAN, WRONG, NKINDS };
    static const char *kind_name[] = {"crashes", "valgrind errors", "unclean errors",
                                      "failures absorbed with a changed result"};
    int count[NKINDS] = {0}, runs = 0, absorbed = 0;
    int per_stage[9] = {0};
    report *rs = calloc((size_t)group, sizeof *rs);
    bool done = false;
    for (int64_t k0 = 1; !done && k0 <= base.allocs + 1;) {
        int got = child_runs(k0, group, rs, &ws);
        bool crashed = WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) == 3);
        for (int i = 0; i <= got && i < group; i++) {
            int64_t k = k0 + i;
            char why[300] = "";
            int kind = -1;
            if (i == got) { /* no report for k: the child died running it */
                if (!crashed) break;
                kind = CRASH;
                snprintf(why, sizeof why, "the run crashed (%s)", WIFSIGNALED(ws) ? strsignal(WTERMSIG(ws)) : "?");
            } else {
                report *r = &rs[i];
                runs++;
                per_stage[r->failed_at]++;
                if (r->failed_at == 0 && k <= r->allocs) {
                    /* a failure handled inside (a fallback) is fine if every
                     * result is the same as without it */
                    bool wrong = r->largest != base.largest || memcmp(r->loss, base.loss, sizeof base.loss) != 0;
                    absorbed++;
                    if (wrong) {
                        kind = WRONG;
                        snprintf(why, sizeof why,
                                 "allocation %lld of %lld failed, no call reported it, and the results changed: "
                                 "largest batch %lld (not %lld), losses %g %g (not %g %g)",
                                 (long long)k, (long long)r->allocs, (long long)r->largest, (long long)base.largest,
                                 r->loss[0], r->loss[1], base.loss[0], base.loss[1]);
                    }
                } else if (r->failed_at && !r->clean) {
                    kind = UNCLEAN;
                    snprintf(why, sizeof why, "%s failed without a clean OOM: '%s'", stage_name[r->failed_at], r->msg);
                } else if (r->failed_at == 0) {
                    done = true; /* the fault never came: every allocation has failed once */
                }
            }
            if (kind < 0) {
                check_pass++;
            } else if (count[kind]++ < 3) {
                CHECK(0, "allocation %lld failing: %s", (long long)k, why);
            } else {
                check_fail++;
            }
        }
        if (!crashed && WIFEXITED(ws) && WEXITSTATUS(ws) != 0) {
            /* valgrind's error exit: leaks or memory errors in this group */
            if (count[LEAK]++ < 3)
                CHECK(0, "allocations %lld..%lld failing: valgrind errors (above)", (long long)k0,
                      (long long)(k0 + got - 1));
            else
                check_fail++;
        }
        k0 += crashed ? got + 1 : got;
        if (got == 0 && !crashed) break;
    }
    free(rs);
    for (int i = 0; i < NKINDS; i++)
        if (count[i]) fprintf(stderr, "  %d runs with %s\n", count[i], kind_name[i]);
    printf("  %d runs: failures surfaced in", runs);
    for (int i = 1; i < 9; i++)
        if (per_stage[i]) printf(" %s %d,", stage_name[i], per_stage[i]);
    printf(" none %d (%d failures handled inside with unchanged results)\n", per_stage[0], absorbed);
    TEST_END();
}
