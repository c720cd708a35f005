/* trace.c — train --trace: the first steps of a run as a Chrome trace (the
 * trace-event "JSON Object Format" that Perfetto and chrome://tracing open).
 *
 * Tracks. The host process: the steps, the loader's thread (gathering a
 * batch: its shuffled copy, or a synthetic set's samples made), the main
 * thread waiting for it, the uploads, and the nodes and the optimizer as the
 * host sees them (on the CPU their compute, synchronised after each node; on
 * a GPU their launches). On a GPU, a device process: the nodes and the
 * optimizer in device time, from the backend's marks (profile.c). Counters:
 * the plan's live bytes at each node, NVML's view of this process on a GPU,
 * and the host's resident set (/proc/self/statm).
 *
 * Device times come as offsets from a run's first mark; a run is placed on
 * the host clock so that it ends when the sync after it returned (never
 * before its first launch, never over the device's previous run). A group of
 * update nodes launched at once is one event whose args count its nodes.
 *
 * The events are kept in memory (plain malloc: diagnostics, outside the
 * fault counter) and written once, whole, through hr_file_begin/commit:
 * when the traced steps are done, or when the run stops before that (an
 * error, a NaN loss, Ctrl-C), with what was recorded. */
#include "exec/session.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/nvml.h"

/* Tracks, then counters. */
enum {
    TK_STEPS, TK_LOADER, TK_WAIT, TK_UPLOAD, TK_HOST_NODES, TK_HOST_OPT, TK_DEV_NODES, TK_DEV_OPT, TK_COUNT,
    CT_PLANNED = TK_COUNT, CT_NVML, CT_RSS, CT_END
};
enum { PID_HOST = 1, PID_DEVICE = 2 };

typedef struct {
    double t0, t1;  /* seconds on hr_profile_now's clock; a counter's t1 unused */
    double value;   /* a counter's; a step's loss */
    int64_t a, b;   /* node and the nodes of its launch; traced step and samples; step and nodes seen */
    int pass;       /* micro-batch of a node; a step's status bits */
    int track;
    int seq;        /* order of recording (ties of t0) */
} tr_event;

typedef struct {
    const char *op;   /* hr_op_name's (static) */
    char *layer;      /* its layer's name and type, "" for none */
    char *type;
    int part;         /* 0 forward, 1 backward, 2 update */
    double live;      /* planned live bytes while it runs */
} tr_node;

struct hr_trace {
    char *path;
    int steps_max, steps_done;
    double origin;         /* hr_profile_now at hr_trace_new */
    tr_event *ev;
    int nev, cap;
    bool oom;              /* an event was dropped for want of memory */
    /* what the session was, copied at attach (the file is written without it) */
    hr_session_t *s;       /* while attached */
    char *model, *backend;
    tr_node *node;
    int nn, n_fwd, n_bwd_end, n_step, accumulate;
    size_t arena, lower_bound;
    bool device;           /* device events (marks); else host times */
    hr_nvml_sampler *nvml;
    /* the step being recorded */
    bool in_step;
    double step_t0, cursor, dev_base, dev_end;
    int64_t step_nodes, samples, last_step;
    int passes;
    bool written;
    size_t bytes;          /* the file's size, */
    double write_s;        /* and the seconds its writing took */
    struct sigaction old_int, old_term;
    bool caught;
};

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }
bool hr_trace_interrupted(void) { return interrupted != 0; }
double hr_trace_clock(void) { return hr_profile_now(); }

/* ---- recording ---------------------------------------------------------------- */
static tr_event *add(hr_trace *t, int track, double t0, double t1) {
    if (t->nev == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        tr_event *e = realloc(t->ev, sizeof *e * (size_t)cap);
        if (!e) {
            t->oom = true;
            return NULL;
        }
        t->ev = e, t->cap = cap;
    }
    tr_event *e = &t->ev[t->nev];
    memset(e, 0, sizeof *e);
    e->track = track, e->t0 = t0, e->t1 = t1 > t0 ? t1 : t0, e->seq = t->nev++;
    return e;
}

static void counter(hr_trace *t, int track, double at, double value) {
    tr_event *e = add(t, track, at, at);
    if (e) e->value = value;
}

static double host_rss(void) {
    unsigned long long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    int got = fscanf(f, "%llu %llu", &pages, &rss);
    fclose(f);
    return got == 2 ? (double)rss * (double)sysconf(_SC_PAGESIZE) : -1;
}

static void memory_counters(hr_trace *t, double at) {
    double rss = host_rss();
    if (rss >= 0) counter(t, CT_RSS, at, rss);
    if (!t->nvml) return;
    hr_nvml_sample r;
    hr_nvml_sampler_read(t->nvml, &r);
    if (r.available && r.current != HR_NVML_UNKNOWN) counter(t, CT_NVML, at, (double)r.current);
}

void hr_trace_batch(hr_trace *t, double wait0, double wait1, double gather0, double gather1, int64_t n) {
    if (!t || !t->s || t->steps_done >= t->steps_max) return;
    t->in_step = true;
    t->step_t0 = wait0, t->cursor = wait1;
    t->step_nodes = 0, t->passes = 0, t->samples = n;
    memory_counters(t, wait0);
    tr_event *e;
    if (gather1 > gather0 && gather0 > 0 && (e = add(t, TK_LOADER, gather0, gather1))) e->a = t->steps_done + 1, e->b = n;
    if ((e = add(t, TK_WAIT, wait0, wait1))) e->a = t->steps_done + 1, e->b = n;
}

void hr_trace_pass(hr_trace *t, double now) {
    if (!t || !t->in_step) return;
    tr_event *e = add(t, TK_UPLOAD, t->cursor, now);
    if (e) e->a = t->steps_done + 1, e->b = t->samples, e->pass = t->passes;
    t->passes++;
    t->cursor = now;
}

void hr_trace_device_run(hr_trace *t, double launched, double synced, double ms) {
    if (!t || !t->in_step) return;
    double start = ms >= 0 ? synced - 1e-3 * ms : launched;
    if (start < launched) start = launched;
    if (start < t->dev_end) start = t->dev_end;
    t->dev_base = start;
    t->cursor = synced;
}

void hr_trace_node(hr_trace *t, int k, int count, double t0, double t1, bool device) {
    if (!t || !t->in_step || k < 0 || k >= t->n_step) return; /* the evaluation pass is not traced */
    bool opt = k >= t->n_bwd_end;
    if (device) {
        t0 += t->dev_base, t1 += t->dev_base;
        if (t0 < t->dev_end) t0 = t->dev_end;
        if (t1 < t0) t1 = t0;
        t->dev_end = t1;
    } else {
        t->cursor = t1;
    }
    int track = device ? (opt ? TK_DEV_OPT : TK_DEV_NODES) : (opt ? TK_HOST_OPT : TK_HOST_NODES);
    tr_event *e = add(t, track, t0, t1);
    if (!e) return;
    e->a = k, e->b = count, e->pass = t->passes - 1;
    /* the nodes are counted once, where their time is */
    if (device == t->device) {
        t->step_nodes += count;
        counter(t, CT_PLANNED, t0, t->node[k].live);
    }
}

/* ---- the session: attach, detach --------------------------------------------------- */
static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

/* Planned live bytes at each node: state all the step, every other block of
 * storage (the tensors that share it) from its first node to its last. */
static void planned_live(const hr_session_t *s, tr_node *node) {
    const hr_graph *g = &s->prog.g;
    const int *root = s->plan.root;
    double *held = calloc((size_t)(g->nt ? g->nt : 1), sizeof *held), *diff = calloc((size_t)g->nn + 1, sizeof *diff);
    double persist = 0;
    if (held && diff) {
        for (int i = 0; i < g->nt; i++)
            if (root[i] >= 0 && (double)g->t[i].bytes > held[root[i]]) held[root[i]] = (double)g->t[i].bytes;
        for (int i = 0; i < g->nt; i++) {
            const hr_tensor *x = &g->t[i];
            if (root[i] != i) continue;
            if (x->kind == HR_T_PARAM || x->kind == HR_T_BUFFER || x->kind == HR_T_OPTSTATE) {
                persist += (double)x->bytes;
            } else if (x->first >= 0 && x->first <= x->last && x->last < g->nn) {
                diff[x->first] += held[i];
                diff[x->last + 1] -= held[i];
            }
        }
    }
    double live = 0;
    for (int k = 0; k < g->nn; k++) {
        live += diff ? diff[k] : 0;
        node[k].live = persist + live;
    }
    free(held);
    free(diff);
}

static void detach(hr_trace *t) {
    if (!t->s) return;
    hr_profile_trace(t->s, NULL);
    t->s = NULL;
    t->in_step = false;
    hr_nvml_sampler_stop(t->nvml, NULL);
    t->nvml = NULL;
    if (t->caught) {
        sigaction(SIGINT, &t->old_int, NULL);
        sigaction(SIGTERM, &t->old_term, NULL);
        t->caught = false;
    }
}

hr_status hr_trace_attach(hr_trace *t, hr_session_t *s) {
    if (!t || !s) return hr_error_set(HR_ERR_INVALID_ARG, "trace: NULL argument");
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    t->node = calloc((size_t)(g->nn ? g->nn : 1), sizeof *t->node);
    t->model = dup_or_empty(s->model_name);
    t->backend = dup_or_empty(s->be->name);
    if (!t->node || !t->model || !t->backend) return hr_error_set(HR_ERR_OOM, "trace: out of host memory");
    t->nn = g->nn;
    for (int k = 0; k < g->nn; k++) {
        const hr_node *n = &g->n[k];
        const hr_layer *l = n->layer >= 0 ? &g->l[n->layer] : NULL;
        t->node[k].op = hr_node_op_name(n);
        t->node[k].part = k < p->n_fwd ? 0 : k < p->n_bwd_end ? 1 : 2;
        if (!(t->node[k].layer = dup_or_empty(l ? l->name : NULL)) || !(t->node[k].type = dup_or_empty(l ? l->type : NULL)))
            return hr_error_set(HR_ERR_OOM, "trace: out of host memory");
    }
    planned_live(s, t->node);
    t->n_fwd = p->n_fwd, t->n_bwd_end = p->n_bwd_end, t->n_step = p->n_step;
    t->accumulate = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    t->arena = s->plan.arena_bytes, t->lower_bound = s->plan.lower_bound;
    hr_status st = hr_profile_trace(s, t);
    if (st) return st;
    t->s = s;
    t->device = hr_session_profile_mode(s) == 2;
    if (s->be->device_id) t->nvml = hr_nvml_sampler_start(NULL, s->be->device_id, -1, 10);
    /* Ctrl-C (or a TERM) while tracing: the run stops after its step and
     * writes what it has; a second one ends it as usual */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    t->caught = sigaction(SIGINT, &sa, &t->old_int) == 0 && sigaction(SIGTERM, &sa, &t->old_term) == 0;
    return HR_OK;
}

/* ---- writing ---------------------------------------------------------------------- */
static void js_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* Microseconds from the origin, in whole nanoseconds: an event's end and the
 * next one's start round alike, so touching events never overlap. */
static long long ns(const hr_trace *t, double at) {
    double d = (at - t->origin) * 1e9;
    return d > 0 ? (long long)(d + 0.5) : 0;
}
static void put_us(FILE *f, long long v) { fprintf(f, "%lld.%03lld", v / 1000, v % 1000); }

static int by_start(const void *a, const void *b) {
    const tr_event *x = a, *y = b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0 ? 1 : x->seq - y->seq;
}

typedef struct {
    int pid, tid;
    const char *name; /* of the thread (NULL: a counter's) */
} tr_track;

static tr_track track_of(const hr_trace *t, int track) {
    switch (track) {
    case TK_STEPS: return (tr_track){PID_HOST, 1, "steps"};
    case TK_LOADER: return (tr_track){PID_HOST, 2, "loader thread (gathers a batch: shuffled copy or synthetic samples)"};
    case TK_WAIT: return (tr_track){PID_HOST, 3, "main thread: waiting for the loader"};
    case TK_UPLOAD:
        return (tr_track){PID_HOST, 4, t->device ? "uploads (host to device)" : "uploads (batch into the arena)"};
    case TK_HOST_NODES: return (tr_track){PID_HOST, 5, t->device ? "node launches (host)" : "nodes (host time)"};
    case TK_HOST_OPT: return (tr_track){PID_HOST, 6, t->device ? "optimizer launches (host)" : "optimizer (host time)"};
    case TK_DEV_NODES: return (tr_track){PID_DEVICE, 1, "nodes (device time)"};
    case TK_DEV_OPT: return (tr_track){PID_DEVICE, 2, "optimizer (device time)"};
    /* counters sit on a track of their process */
    case CT_PLANNED: return (tr_track){t->device ? PID_DEVICE : PID_HOST, t->device ? 1 : 5, NULL};
    case CT_NVML: return (tr_track){PID_DEVICE, 1, NULL};
    default: return (tr_track){PID_HOST, 1, NULL};
    }
}

static const char *counter_name(int track) {
    return track == CT_PLANNED ? "arena: planned live bytes" : track == CT_NVML ? "device memory: NVML, this process"
                                                                                : "host memory: resident set";
}

static void write_event(FILE *f, const hr_trace *t, const tr_event *e) {
    tr_track tk = track_of(t, e->track);
    long long t0 = ns(t, e->t0), t1 = ns(t, e->t1);
    fprintf(f, ",\n{\"pid\":%d,\"tid\":%d,\"ts\":", tk.pid, tk.tid);
    put_us(f, t0);
    if (e->track >= TK_COUNT) {
        fputs(",\"ph\":\"C\",\"name\":", f);
        js_str(f, counter_name(e->track));
        fprintf(f, ",\"args\":{\"bytes\":%.0f}}", e->value);
        return;
    }
    fputs(",\"ph\":\"X\",\"dur\":", f);
    put_us(f, t1 - t0);
    fputs(",\"name\":", f);
    switch (e->track) {
    case TK_STEPS:
        fprintf(f, "\"step %lld\",\"args\":{\"step\":%lld,\"nodes\":%lld,\"expected_nodes\":%lld,\"loss\":",
                (long long)e->a, (long long)e->a, (long long)e->b,
                (long long)t->n_bwd_end * t->accumulate + (t->n_step - t->n_bwd_end));
        if (e->value == e->value && e->value < 1e300 && e->value > -1e300) fprintf(f, "%.9g", e->value);
        else js_str(f, e->value != e->value ? "NaN" : "inf");
        fprintf(f, ",\"complete\":%s}}", e->pass ? "true" : "false");
        return;
    case TK_LOADER:
    case TK_WAIT:
    case TK_UPLOAD:
        fprintf(f, "\"%s\",\"args\":{\"traced_step\":%lld,\"samples\":%lld", e->track == TK_LOADER ? "gather batch"
                                                                       : e->track == TK_WAIT ? "wait for batch"
                                                                                             : "upload batch",
                (long long)e->a, (long long)e->b);
        if (e->track == TK_UPLOAD && t->accumulate > 1) fprintf(f, ",\"micro_batch\":%d", e->pass);
        fputs("}}", f);
        return;
    default: {
        const tr_node *n = &t->node[e->a];
        char name[160];
        if (e->b > 1) snprintf(name, sizeof name, "%s x%lld (nodes %lld-%lld)", n->op, (long long)e->b, (long long)e->a,
                               (long long)(e->a + e->b - 1));
        else if (n->layer[0]) snprintf(name, sizeof name, "%s %s", n->op, n->layer);
        else snprintf(name, sizeof name, "%s", n->op);
        js_str(f, name);
        fprintf(f, ",\"args\":{\"node\":%lld,\"nodes\":%lld,\"op\":", (long long)e->a, (long long)e->b);
        js_str(f, n->op);
        fputs(",\"layer\":", f);
        js_str(f, n->layer);
        fputs(",\"layer_type\":", f);
        js_str(f, n->type);
        fprintf(f, ",\"part\":\"%s\"", n->part == 0 ? "forward" : n->part == 1 ? "backward" : "update");
        if (t->accumulate > 1 && n->part < 2) fprintf(f, ",\"micro_batch\":%d", e->pass);
        fputs("}}", f);
    }
    }
}

static void write_meta(FILE *f, const char *what, int pid, int tid, const char *name, bool *first) {
    fprintf(f, "%s\n{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"args\":{\"name\":", *first ? "" : ",",
            what, pid, tid);
    js_str(f, name);
    fputs("}}", f);
    *first = false;
}

static void write_trace(FILE *f, hr_trace *t, const char *why) {
    qsort(t->ev, (size_t)t->nev, sizeof *t->ev, by_start);
    bool used[CT_END] = {false}, pid_used[3] = {false}, first = true;
    for (int i = 0; i < t->nev; i++) used[t->ev[i].track] = true;
    for (int k = 0; k < CT_END; k++)
        if (used[k]) pid_used[track_of(t, k).pid] = true;
    /* a counter's (pid, tid) is named like any track: name its track even when it has no events */
    for (int k = TK_COUNT; k < CT_END; k++)
        if (used[k]) {
            tr_track c = track_of(t, k);
            for (int j = 0; j < TK_COUNT; j++)
                if (track_of(t, j).pid == c.pid && track_of(t, j).tid == c.tid) used[j] = true;
        }
    char pname[512];
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    if (pid_used[PID_HOST]) {
        snprintf(pname, sizeof pname, "headroom train %s: host", t->model ? t->model : "");
        write_meta(f, "process_name", PID_HOST, 0, pname, &first);
    }
    if (pid_used[PID_DEVICE]) {
        snprintf(pname, sizeof pname, "%s: device", t->backend ? t->backend : "device");
        write_meta(f, "process_name", PID_DEVICE, 0, pname, &first);
    }
    for (int k = 0; k < TK_COUNT; k++)
        if (used[k]) {
            tr_track tk = track_of(t, k);
            write_meta(f, "thread_name", tk.pid, tk.tid, tk.name, &first);
            fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"ts\":0,"
                       "\"args\":{\"sort_index\":%d}}", tk.pid, tk.tid, tk.tid);
        }
    /* every event's track was named above, so each event follows a comma */
    for (int i = 0; i < t->nev; i++) write_event(f, t, &t->ev[i]);
    fputs("\n],\n\"otherData\":{\"generator\":\"headroom " HR_VERSION "\",\"model\":", f);
    js_str(f, t->model ? t->model : "");
    fputs(",\"backend\":", f);
    js_str(f, t->backend ? t->backend : "");
    fprintf(f, ",\"timing\":\"%s\",\"steps_requested\":%d,\"steps_traced\":%d,\"schedule_nodes\":%d,"
               "\"pass_nodes\":%d,\"update_nodes\":%d,\"accumulate\":%d,\"arena_bytes\":%zu,\"lower_bound_bytes\":%zu,"
               "\"events_dropped\":%s,\"stopped\":",
            t->device ? "device events (marks) and host launches" : "host time, synchronised after each node",
            t->steps_max, t->steps_done, t->n_step, t->n_bwd_end, t->n_step - t->n_bwd_end, t->accumulate, t->arena,
            t->lower_bound, t->oom ? "true" : "false");
    js_str(f, why);
    fputs("}}\n", f);
}

static hr_status write_file(hr_trace *t, const char *why) {
    size_t n = strlen(t->path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return hr_error_set(HR_ERR_OOM, "out of host memory writing %s", t->path);
    double t0 = hr_profile_now();
    FILE *f = hr_file_begin(t->path, tmp, n);
    hr_status st = f ? HR_OK : hr_last_status();
    if (f) {
        write_trace(f, t, why);
        long at = ftell(f);
        t->bytes = at > 0 ? (size_t)at : 0;
        st = hr_file_commit(f, tmp, t->path);
    }
    t->write_s = hr_profile_now() - t0;
    free(tmp);
    t->written = true;
    return st;
}

/* ---- the caller's side -------------------------------------------------------------- */
hr_status hr_trace_check_path(const char *path) {
    struct stat sb;
    if (!path || !path[0]) return hr_error_set(HR_ERR_IO, "--trace: no file name given");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hr_error_set(HR_ERR_IO, "cannot write %s: it is a directory; give a file name, e.g. %s/trace.json", path,
                            path);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return hr_error_set(HR_ERR_IO, "cannot write %s: it is not a regular file (the trace is written to a "
                            "temporary file and renamed over it)", path);
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return hr_error_set(HR_ERR_OOM, "out of host memory");
    FILE *f = hr_file_begin(path, tmp, n); /* the error names the path and why */
    if (f) {
        fclose(f);
        unlink(tmp);
    }
    free(tmp);
    return f ? HR_OK : hr_last_status();
}

hr_trace *hr_trace_new(const char *path, int steps) {
    hr_trace *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path ? path : "");
    if (!t || !t->path) {
        free(t);
        hr_error_set(HR_ERR_OOM, "trace: out of host memory");
        return NULL;
    }
    t->steps_max = steps > 0 ? steps : 1;
    t->origin = hr_profile_now();
    interrupted = 0;
    return t;
}

/* The step's event, from its wait for the batch to now: its nodes, and
 * whether the schedule ran whole (an update skipped, or a step cut short,
 * leaves it incomplete). */
static void end_step(hr_trace *t, int64_t step, double loss) {
    double now = hr_profile_now();
    t->in_step = false;
    int64_t want = (int64_t)t->n_bwd_end * t->accumulate + (t->n_step - t->n_bwd_end);
    tr_event *e = add(t, TK_STEPS, t->step_t0, now);
    if (e) e->a = step, e->b = t->step_nodes, e->value = loss, e->pass = t->step_nodes == want;
    memory_counters(t, now);
    t->last_step = step;
    t->steps_done++;
}

hr_status hr_trace_step_end(hr_trace *t, int64_t step, float loss) {
    if (!t || !t->in_step) return HR_OK;
    end_step(t, step, loss);
    if (t->steps_done < t->steps_max) return HR_OK;
    /* the steps are done: the file now, and the run goes on untraced */
    detach(t);
    return write_file(t, "the traced steps are done");
}

hr_status hr_trace_finish(hr_trace *t, const char *why) {
    if (!t) return HR_OK;
    if (t->in_step) end_step(t, t->last_step + 1, NAN); /* cut short by an error: its events so far */
    detach(t);
    return t->written ? HR_OK : write_file(t, why && *why ? why : "the run ended");
}

bool hr_trace_written(const hr_trace *t) { return t && t->written; }
void hr_trace_stats(const hr_trace *t, int *steps, size_t *bytes, double *seconds) {
    *steps = t ? t->steps_done : 0;
    *bytes = t ? t->bytes : 0;
    *seconds = t ? t->write_s : 0;
}
const char *hr_trace_path(const hr_trace *t) { return t ? t->path : ""; }

void hr_trace_free(hr_trace *t) {
    if (!t) return;
    detach(t);
    for (int k = 0; k < t->nn && t->node; k++) {
        free(t->node[k].layer);
        free(t->node[k].type);
    }
    free(t->node);
    free(t->ev);
    free(t->model);
    free(t->backend);
    free(t->path);
    free(t);
}
