/* profile.c — per-node times of a session's steps: host time, or device
 * events in the queue; HR_PROFILE's table when the session ends, train
 * --profile's table sorted by time against the device's peaks, the cost
 * model's measurements (calibrate.c) and the node events of a trace. */
#include "exec/session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"

/* Diagnostics only: plain calloc, outside the plan and the fault counter. */
struct hr_profile {
    double *sec;      /* seconds spent in each node (a group's in its first) */
    int64_t *cnt;     /* times each node was timed (a group's first: its launches) */
    int *span;        /* per node: how many nodes ran with it as one group, last run; 0 inside a group */
    int nn;
    bool events;      /* device time from marks, no sync between nodes */
    bool skipped;     /* the first step was dropped from the table */
    bool print;       /* HR_PROFILE's table when the session ends (not for --profile or a trace) */
    int per_step;     /* passes a step (accumulation): the first step's are dropped */
    bool for_trace;   /* made for a trace alone: it goes when the trace detaches */
    int64_t runs;
    struct hr_trace *trace; /* node events of a trace (trace.c), NULL when none */
    double t_before;  /* host time before the launch being timed (traces) */
    double t_range;   /* host time the run of nodes [from, to) began */
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
    p->print = true;
    p->per_step = s->prog.cfg.accumulate > 1 ? s->prog.cfg.accumulate : 1;
    return p;
}

bool hr_profile_host(const hr_profile *p) { return p && !p->events; }

void hr_profile_step(hr_profile *p, int from, int nn) {
    if (!p) return;
    p->t_range = hr_profile_now();
    if (from != 0) return;
    if (p->trace) hr_trace_pass(p->trace, p->t_range);
    if (p->runs == p->per_step && !p->skipped) hr_profile_reset(p);
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
    if (!p) return HR_OK;
    hr_status st = p->events ? be->mark(be, k) : HR_OK;
    if (p->trace) p->t_before = hr_profile_now();
    return st;
}

void hr_profile_after(hr_profile *p, hr_backend *be, int k, int count, double t0) {
    if (!p) return;
    double t1 = 0;
    if (!p->events) {
        be->sync(be);
        t1 = hr_profile_now();
        p->sec[k] += t1 - t0;
        p->cnt[k]++;
    }
    p->span[k] = count;
    if (p->trace) hr_trace_node(p->trace, k, count, p->t_before, t1 ? t1 : hr_profile_now(), false);
}

hr_status hr_profile_finish(hr_profile *p, hr_backend *be, int from, int to) {
    if (!p || !p->events || from >= to) return HR_OK;
    hr_status st = be->mark(be, to);
    if (!st) st = be->sync(be);
    if (st) return st;
    /* a trace places the run on the host's clock: it ended about when the
     * sync returned (no earlier than its first launch) */
    if (p->trace) hr_trace_device_run(p->trace, p->t_range, hr_profile_now(), be->mark_ms(be, from, to));
    for (int k = from; k < to; k += p->span[k] > 0 ? p->span[k] : 1) {
        double ms = be->mark_ms(be, k, k + p->span[k]);
        if (ms >= 0) p->sec[k] += 1e-3 * ms, p->cnt[k]++;
        if (p->trace && ms >= 0) {
            double at = be->mark_ms(be, from, k);
            if (at >= 0) hr_trace_node(p->trace, k, p->span[k] > 0 ? p->span[k] : 1, 1e-3 * at, 1e-3 * (at + ms), true);
        }
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
            fprintf(stderr, "  %3d %-28s %-8s    (in node %d's launch)\n", k, hr_node_op_name(n), layer, group);
            continue;
        }
        fprintf(stderr, "  %3d %-28s %-8s %9.3f ms %5.1f%%", k, hr_node_op_name(n), layer, 1e3 * p->sec[k] / runs,
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
    if (s && p->print) print_table(p, s);
    free(p->sec);
    free(p->cnt);
    free(p->span);
    free(p);
}

/* ---- train --profile and traces: turning the profile on ------------------------ */
hr_status hr_session_profile_on(hr_session_t *s) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "profile: the session is NULL");
    if (!s->prof && !(s->prof = hr_profile_new(s, 2)))
        return hr_error_set(HR_ERR_OOM, "profile: out of host memory for %d nodes", s->prog.g.nn);
    s->prof->print = false; /* hr_profile_print_sorted prints it */
    s->prof->for_trace = false;
    return HR_OK;
}

hr_status hr_profile_trace(hr_session_t *s, struct hr_trace *t) {
    if (!t) { /* detach: a profile made for the trace alone goes with it */
        if (s->prof && s->prof->for_trace) {
            hr_profile_free(s->prof, NULL);
            s->prof = NULL;
        } else if (s->prof) {
            s->prof->trace = NULL;
        }
        return HR_OK;
    }
    if (!s->prof) {
        hr_status st = hr_session_profile_on(s);
        if (st) return st;
        s->prof->for_trace = true;
    }
    s->prof->trace = t;
    return HR_OK;
}

/* ---- train --profile's table -------------------------------------------------- */
/* The CPU's peaks, measured here (nothing else knows them honestly): the best
 * of three single-precision products of 512x512 matrices through the
 * backend's own sgemm (split over its threads), and the best of three 32 MiB
 * copies (read and write counted). 0 when the memory is not there. */
static void cpu_peaks(double *flops, double *bytes) {
    enum { N = 512 };
    size_t big = (size_t)32 << 20;
    float *a = malloc(sizeof(float) * 3 * N * N);
    char *x = malloc(big), *y = malloc(big);
    *flops = *bytes = 0;
    if (a) {
        for (size_t i = 0; i < 3 * (size_t)N * N; i++) a[i] = (float)(i % 7) * 0.125f;
        for (int r = 0; r < 4; r++) { /* the first warms up */
            double t0 = hr_profile_now();
            hr_cpu_sgemm(false, false, N, N, N, 1.0f, a, N, a + N * N, N, 0.0f, a + 2 * N * N, N);
            double dt = hr_profile_now() - t0, f = 2.0 * N * N * N / (dt > 0 ? dt : 1e-9);
            if (r && f > *flops) *flops = f;
        }
    }
    if (x && y) {
        memset(x, 1, big);
        memset(y, 2, big);
        for (int r = 0; r < 4; r++) {
            double t0 = hr_profile_now();
            memcpy(r % 2 ? x : y, r % 2 ? y : x, big);
            double dt = hr_profile_now() - t0, b = 2.0 * (double)big / (dt > 0 ? dt : 1e-9);
            if (r && b > *bytes) *bytes = b;
        }
    }
    free(a);
    free(x);
    free(y);
}

typedef struct {
    int k, span;
    double sec, flops, bytes, roof; /* a step's; roof: the roofline's time, 0 unknown */
} prof_row;

static int by_time(const void *a, const void *b) {
    const prof_row *x = a, *y = b;
    return x->sec < y->sec ? 1 : x->sec > y->sec ? -1 : x->k - y->k;
}

hr_status hr_profile_print_sorted(const hr_session_t *s, FILE *f) {
    const hr_profile *p = s ? s->prof : NULL;
    if (!p) return hr_error_set(HR_ERR_INVALID_ARG, "profile: the session was not profiled");
    const hr_program *pr = &s->prog;
    const hr_graph *g = &pr->g;
    int K = pr->cfg.accumulate > 1 ? pr->cfg.accumulate : 1;
    double steps = (double)p->runs / K;
    if (steps < 1 || !p->skipped) { /* the first step is the warm-up: only the steps after it count */
        fprintf(f, "profile: %s: no step was timed after the first (the warm-up, left out); run more steps\n",
                s->model_name);
        return HR_OK;
    }
    prof_row *row = calloc((size_t)(pr->n_step ? pr->n_step : 1), sizeof *row);
    if (!row) return hr_error_set(HR_ERR_OOM, "profile: out of host memory for its table");
    bool gpu = s->be->arena_kind == HR_MEM_DEVICE;
    struct hr_cost_model *cm = gpu ? hr_cost_model_here(true) : NULL;
    double pf = 0, pb = 0;
    if (!gpu) cpu_peaks(&pf, &pb);
    int nr = 0;
    double total = 0, tflops = 0, tbytes = 0;
    for (int k = 0; k < pr->n_step;) {
        int span = p->span[k] > 0 ? p->span[k] : 1;
        if (k + span > pr->n_step) span = pr->n_step - k;
        prof_row *r = &row[nr++];
        r->k = k, r->span = span, r->sec = p->sec[k] / steps;
        for (int j = k; j < k + span; j++) {
            hr_work w = hr_cost_work(g, &g->n[j]);
            int times = j < pr->n_bwd_end ? K : 1; /* a pass's nodes run K times a step */
            r->flops += w.flops * times, r->bytes += w.bytes * times;
            if (cm) r->roof += hr_cost_estimate(cm, g, &g->n[j]) * times;
        }
        if (!gpu && pf > 0 && pb > 0) r->roof = r->flops / pf > r->bytes / pb ? r->flops / pf : r->bytes / pb;
        total += r->sec, tflops += r->flops, tbytes += r->bytes;
        k += span;
    }
    qsort(row, (size_t)nr, sizeof *row, by_time);
    fprintf(f, "profile: %s on %s, %.0f steps timed (the first, a warm-up, left out), %.3f ms a step in its nodes "
               "(%s)\n", s->model_name, s->be->name, steps, 1e3 * total,
            p->events ? "device events, gaps between nodes included" : "host time, synchronised after each node");
    if (gpu)
        fprintf(f, "roofline: the cost model's estimate of each node on this GPU (its datasheet peaks, FP32 or "
                   "tensor-core, memory bandwidth, plus a launch)%s\n", cm ? "" : " unavailable (out of memory)");
    else if (pf > 0 && pb > 0)
        fprintf(f, "roofline: peaks measured here: sgemm 512^3 %.1f GFLOP/s, memcpy 32 MiB %.1f GB/s (read + write)\n",
                pf * 1e-9, pb * 1e-9);
    else
        fprintf(f, "roofline: the CPU's peaks are unknown (no memory to measure them)\n");
    fprintf(f, "  %4s %5s %-24s %-10s %10s %7s %9s %9s %8s\n", "rank", "node", "op", "layer", "ms/step", "share",
            "GFLOP/s", "GB/s", "roofline");
    for (int i = 0; i < nr; i++) {
        const prof_row *r = &row[i];
        const hr_node *n = &g->n[r->k];
        char op[40], roof[16] = "?";
        if (r->span > 1) snprintf(op, sizeof op, "%s x%d", hr_node_op_name(n), r->span);
        else snprintf(op, sizeof op, "%s", hr_node_op_name(n));
        if (r->roof > 0 && r->sec > 0) snprintf(roof, sizeof roof, "%.0f%%", 100 * r->roof / r->sec);
        fprintf(f, "  %4d %5d %-24s %-10.10s %10.3f %6.1f%% %9.2f %9.2f %8s\n", i + 1, r->k, op,
                n->layer >= 0 && g->l[n->layer].name ? g->l[n->layer].name : "-", 1e3 * r->sec,
                total > 0 ? 100 * r->sec / total : 0.0, r->sec > 0 ? 1e-9 * r->flops / r->sec : 0.0,
                r->sec > 0 ? 1e-9 * r->bytes / r->sec : 0.0, roof);
    }
    fprintf(f, "  %-47s %10.3f %6.1f%% %9.2f %9.2f\n", "total", 1e3 * total, total > 0 ? 100.0 : 0.0,
            total > 0 ? 1e-9 * tflops / total : 0.0, total > 0 ? 1e-9 * tbytes / total : 0.0);
    fprintf(f, "  (roofline: the time at the device's peak for the node's FLOPs or bytes, whichever bounds it, "
               "over the time taken; ms/step counts a pass's nodes %d time%s a step)\n", K, K > 1 ? "s" : "");
    hr_cost_model_free(cm);
    free(row);
    return HR_OK;
}
