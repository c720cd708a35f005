/* profile.c — per-node times of a session's steps: host time, or device
 * events in the queue; HR_PROFILE's table when the session ends, and the
 * cost model's measurements (calibrate.c). */
#include "exec/session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Diagnostics only: plain calloc, outside the plan and the fault counter. */
struct hr_profile {
    double *sec;      /* seconds spent in each node (a group's in its first) */
    int64_t *cnt;     /* times each node was timed (a group's first: its launches) */
    int *span;        /* per node: how many nodes ran with it as one group, last run; 0 inside a group */
    int nn;
    bool events;      /* device time from marks, no sync between nodes */
    bool skipped;     /* the first step was dropped from the table */
    int64_t runs;
};

double hr_profile_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mode 1 times every node on the host, synchronising after each (so only for
 * looking, not for benchmarks; on a GPU it counts launch latency and hides
 * overlap). Mode 2, where the backend has marks, records one in the device's
 * queue before each node and after the last, syncs once a step and gives
 * each node the device time to the next mark, gaps included: the column
 * sums to the step's device time (the first node's includes waiting for the
 * batch's upload). The first step (cuDNN's tuning, lazy loading) is left out
 * once there is a second; a group of update nodes run as one launch has its
 * time in its first. */
hr_profile *hr_profile_new(const hr_session_t *s, int mode) {
    if (mode <= 0) return NULL;
    hr_profile *p = calloc(1, sizeof *p);
    int nn = s->prog.g.nn ? s->prog.g.nn : 1;
    if (!p) return NULL;
    p->sec = calloc((size_t)nn, sizeof(double));
    p->cnt = calloc((size_t)nn, sizeof(int64_t));
    p->span = calloc((size_t)nn, sizeof(int));
    if (!p->sec || !p->cnt || !p->span) {
        free(p->sec);
        free(p->cnt);
        free(p->span);
        free(p);
        return NULL;
    }
    p->nn = s->prog.g.nn;
    p->events = mode >= 2 && s->be->mark && s->be->mark_ms;
    return p;
}

bool hr_profile_host(const hr_profile *p) { return p && !p->events; }

void hr_profile_step(hr_profile *p, int from, int nn) {
    if (!p || from != 0) return;
    if (p->runs == 1 && !p->skipped) hr_profile_reset(p);
    p->runs++;
}

void hr_profile_reset(hr_profile *p) {
    if (!p) return;
    memset(p->sec, 0, sizeof(double) * (size_t)p->nn);
    memset(p->cnt, 0, sizeof(int64_t) * (size_t)p->nn);
    p->runs = 0;
    p->skipped = true;
}

double hr_profile_node_seconds(const hr_profile *p, int k, int64_t *runs, int *span) {
    bool in = p && k >= 0 && k < p->nn;
    if (runs) *runs = in ? p->cnt[k] : 0;
    if (span) *span = in ? p->span[k] : 1;
    return in ? p->sec[k] : 0;
}

hr_status hr_profile_before(hr_profile *p, hr_backend *be, int k) {
    return p && p->events ? be->mark(be, k) : HR_OK;
}

void hr_profile_after(hr_profile *p, hr_backend *be, int k, int count, double t0) {
    if (!p) return;
    if (!p->events) {
        be->sync(be);
        p->sec[k] += hr_profile_now() - t0;
        p->cnt[k]++;
    }
    p->span[k] = count;
}

hr_status hr_profile_finish(hr_profile *p, hr_backend *be, int from, int to) {
    if (!p || !p->events || from >= to) return HR_OK;
    hr_status st = be->mark(be, to);
    if (!st) st = be->sync(be);
    if (st) return st;
    for (int k = from; k < to; k += p->span[k] > 0 ? p->span[k] : 1) {
        double ms = be->mark_ms(be, k, k + p->span[k]);
        if (ms >= 0) p->sec[k] += 1e-3 * ms, p->cnt[k]++;
    }
    return HR_OK;
}

static void print_table(const hr_profile *p, const hr_session_t *s) {
    const hr_graph *g = &s->prog.g;
    double total = 0, runs = (double)(p->runs ? p->runs : 1);
    for (int k = 0; k < p->nn; k++) total += p->sec[k];
    fprintf(stderr, "profile: %s on %s, %lld runs, %.3f ms a step (%s)\n", s->model_name, s->be->name,
            (long long)p->runs, 1e3 * total / runs,
            p->events ? "device events, gaps between nodes included" : "host time, synchronised after each node");
    for (int k = 0, group = -1, group_end = 0; k < p->nn; k++) {
        const hr_node *n = &g->n[k];
        const char *layer = n->layer >= 0 ? g->l[n->layer].name : "";
        if (k < group_end) {
            fprintf(stderr, "  %3d %-28s %-8s    (in node %d's launch)\n", k, hr_op_name(n->op), layer, group);
            continue;
        }
        fprintf(stderr, "  %3d %-28s %-8s %9.3f ms %5.1f%%", k, hr_op_name(n->op), layer, 1e3 * p->sec[k] / runs,
                total > 0 ? 100 * p->sec[k] / total : 0);
        if (p->span[k] > 1) {
            group = k;
            group_end = k + p->span[k];
            fprintf(stderr, "  one launch for nodes %d-%d", k, group_end - 1);
        }
        fputc('\n', stderr);
    }
}

void hr_profile_free(hr_profile *p, const hr_session_t *s) {
    if (!p) return;
    if (s) print_table(p, s);
    free(p->sec);
    free(p->cnt);
    free(p->span);
    free(p);
}
