/* internal.h — the one small header through which tests and tools reach
 * inside headroom: a session's program, plan, backend and tensor data, a
 * session on a backend of one's own, and one node run by itself. */
#ifndef HR_EXEC_INTERNAL_H
#define HR_EXEC_INTERNAL_H

#include "backend/backend.h"
#include "plan/cost.h"
#include "plan/plan.h"

/* Compiles on a backend the caller made (the session takes it over only on
 * success); the largest batch that fits, planned on that backend. */
hr_session_t *hr_compile_on(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be);
int64_t hr_largest_batch_on(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi,
                            hr_backend *be);

/* What this session's process may hold on its device now, overhead
 * included (what is free, less what the driver keeps, plus the overhead
 * held already): the budget that hr_session_alloc's fit test uses and the
 * largest-batch search should use. SIZE_MAX where the backend cannot tell. */
size_t hr_session_device_room(const hr_session_t *s);
/* The same for a backend and the overhead it holds (no session yet). */
size_t hr_device_room(hr_backend *be, size_t overhead);

const hr_program *hr_session_program(const hr_session_t *s);
const hr_plan *hr_session_plan(const hr_session_t *s);
hr_backend *hr_session_backend(const hr_session_t *s);
/* Per tensor of the program: its data in the arena; NULL before hr_session_alloc. */
void **hr_session_ptrs(const hr_session_t *s);
size_t hr_session_overhead(const hr_session_t *s); /* measured at hr_session_alloc */
bool hr_session_allocated(const hr_session_t *s);
/* The session's profile mode: 0 off, 1 host times, 2 device events. */
int hr_session_profile_mode(const hr_session_t *s);
/* Whether the training step runs as one captured device graph (CUDA
 * graphs): 1 it does (captured at the second step), 0 not captured yet, -1
 * it runs node by node, why (n bytes, may be NULL) saying why. */
int hr_session_graph(const hr_session_t *s, char *why, size_t n);

/* One node of graph g on backend be: its kernel arguments unpacked from the
 * node (ptr[i]: tensor i's data) into *a, then the backend's kernel; half
 * tensors of an op the backend runs in F32 only go through F32 copies in the
 * node's workspace (ptr's entries are changed for the call and restored). */
hr_status hr_node_exec(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si,
                       hr_kargs *a);
/* The same with arguments of its own. */
hr_status hr_node_run(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si);
/* nodes[0..count), all of one update op, as the backend's group launch (or
 * one by one where it has none). */
hr_status hr_node_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void **ptr,
                            const hr_step_info *si);
/* ---- recomputation to a budget (fit.c) ---------------------------------------- */
/* Predicted seconds of one node (the cost model's, or a stand-in in tests). */
typedef double (*hr_node_cost_fn)(void *ctx, const hr_graph *g, const hr_node *n);
typedef struct {
    char *layers;      /* the layers to recompute, "1,2,5" ("" for none); the caller frees it (hr_free) */
    size_t arena;      /* the plan's arena with them */
    size_t total;      /* its device total (the budget's measure) */
    size_t arena_none; /* the arena without recomputation */
    double extra_s;    /* predicted seconds the recomputation adds to one pass (forward + backward) */
    bool fits;         /* total <= budget */
} hr_recompute_choice;
/* The cheapest layers to recompute (predicted time) for base's plan (built
 * without recomputation) to fit `budget` (device total on be, with
 * `overhead`); min: the smallest arena the search finds, whatever the
 * budget. Nothing to recompute when base fits already. pages: totals in a
 * GPU's 2 MiB pages (be may be a CPU backend planning for a GPU). */
hr_status hr_recompute_choose(const hr_program *base, hr_backend *be, bool pages, size_t budget, size_t overhead,
                              bool min, hr_node_cost_fn cost, void *cost_ctx, hr_recompute_choice *out);
/* cfg.recompute is "auto" or "min" (chosen by the search) */
bool hr_recompute_searched(const char *recompute);
/* The search for cfg (its batch, precision, accumulation) on be: base
 * built here; pages: totals counted in a GPU's pages. */
hr_status hr_recompute_fit(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, size_t budget, size_t overhead,
                           hr_recompute_choice *out);

/* The same with a cost model (NULL: bytes moved at 10 GB/s) and a budget
 * of one's own; cfg.recompute "min" asks for the smallest arena. */
hr_status hr_recompute_choose_for(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, bool pages, size_t budget,
                                  size_t overhead, const struct hr_cost_model *cm, hr_recompute_choice *out);

/* The cost model of this process's device: the GPU's name and driver from
 * NVML, or the CPU's (plan/cost.h); NULL only when out of memory. */
struct hr_cost_model *hr_cost_model_here(bool cuda);

/* ---- `headroom fit` (fit.c) ------------------------------------------------------ */
typedef struct {
    hr_precision precision;
    int accumulate;          /* K micro-batches a step */
    int64_t micro;           /* of batch / K samples */
    char *recompute;         /* recomputed layers, NULL for none (owned by the result) */
    size_t arena, total;     /* the plan's arena and device total */
    double step_s;           /* predicted seconds an optimizer step */
    int measured, estimated; /* nodes of the prediction measured on this device, estimated */
    bool fits;
} hr_fit_candidate;
typedef struct {
    hr_fit_candidate *c;
    int n, cap;
    int best; /* the fastest that fits, -1 for none */
} hr_fit_result;
/* Weighs cfg's batch as K micro-batches (K dividing it), in each precision
 * of the bit set `precisions` (1 << HR_PREC_*; 0: fp32), with recomputation
 * where keeping everything does not fit `budget`; each candidate planned
 * exactly and its step predicted by cm. */
hr_status hr_fit_search(const hr_model_t *m, const hr_config_t *cfg, unsigned precisions, bool recompute, hr_backend *be,
                        bool pages, size_t budget, size_t overhead, struct hr_cost_model *cm, hr_fit_result *out);
void hr_fit_result_free(hr_fit_result *r);

/* cfg.recompute "auto" or "min": the layers the search chooses on be (the
 * budget: cfg.device_budget, else what the device has free) into *layers
 * (hr_free); NULL for any other value. */
hr_status hr_recompute_resolve(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, char **layers);
/* The report's recomputation lines of a compiled session: what was
 * recomputed, the arena without it, the predicted extra time. */
hr_status hr_recompute_report(hr_session_t *s, const hr_model_t *m);

/* Scratch bytes node n needs on be (0: none). */
size_t hr_node_workspace(hr_backend *be, const hr_graph *g, const hr_node *n);

/* ---- nancheck.c: where a non-finite loss came from ---------------------------
 * With the stop on, hr_train_step reads the loss before the update and, when
 * it is NaN or infinite, returns it with HR_OK and runs no update (the step
 * count stays): the parameters stay as that step found them. */
void hr_session_set_nan_stop(hr_session_t *s, bool on);
typedef enum { HR_NAN_NONE, HR_NAN_PARAM, HR_NAN_INPUT, HR_NAN_OP } hr_nan_kind;
typedef struct {
    hr_nan_kind kind;     /* NONE: the forward pass ran finite this time */
    int tensor;           /* the program's tensor that holds it */
    int node;             /* HR_NAN_OP: the forward node that wrote it from finite inputs */
    int micro;            /* the micro-batch (accumulation; 0 without) */
    int64_t count, numel; /* its non-finite values, of */
    int64_t first;        /* the first one's index; value: NaN, inf or -inf */
    float value;
    double in_max;        /* HR_NAN_OP: the largest |value| of the node's inputs */
} hr_nan_report;
/* After a stopped step on batch (x, labels): the first non-finite value, in
 * this order: a parameter, the batch, the output of a forward node, run again
 * one at a time and read back. Running statistics of normalisation layers
 * take the batch once more: call it only to stop. */
hr_status hr_nan_find(hr_session_t *s, const float *x, const void *labels, hr_nan_report *r);

/* html.c: the plan of s drawn as one self-contained HTML page at path (the
 * arena over the schedule, live bytes by category, the report's table),
 * written to a temporary file and renamed over path. */
hr_status hr_plan_html(const hr_session_t *s, const char *path);

/* calibrate.c: times every node of `steps` training steps of s (after one
 * warm-up step) on random data, records each node's median in cm and saves
 * its cache (a cache that can't be written is a warning). The steps train s:
 * measure a throwaway session, compiled for the configuration to predict. */
hr_status hr_cost_measure(hr_session_t *s, hr_cost_model *cm, int steps);

/* ---- train --profile and --trace (profile.c, trace.c) ---------------------------
 *     hr_trace *t = hr_trace_new("run.json", 10);   // after hr_trace_check_path
 *     hr_trace_attach(t, s);                         // s allocated
 *     each step: hr_trace_batch(t, ...loader's times...); hr_train_step(...);
 *                hr_trace_step_end(t, step, loss);   // writes the file after the 10th
 *     hr_trace_finish(t, "why the run stopped");     // writes it if not yet done
 *     hr_trace_free(t);                              // then hr_session_free(s) */
/* Profiles s's nodes from now on (device marks where the backend has them,
 * else host time), for hr_profile_print_sorted rather than HR_PROFILE's table. */
hr_status hr_session_profile_on(hr_session_t *s);
/* The step's nodes, slowest first: time a step, share, GFLOP/s and GB/s from
 * the ops' work, and the share of the device's roofline (a GPU: the cost
 * model's peaks; the CPU: an sgemm and a copy measured now). */
hr_status hr_profile_print_sorted(const hr_session_t *s, FILE *f);

typedef struct hr_trace hr_trace;
/* HR_OK when a trace can be written at path (a file made there and removed). */
hr_status hr_trace_check_path(const char *path);
/* Records the first `steps` steps of the session it is attached to; NULL on OOM. */
hr_trace *hr_trace_new(const char *path, int steps);
/* Turns s's profile on for the trace, copies what the file names (nodes,
 * layers, the plan's live bytes) and catches SIGINT and SIGTERM until the
 * steps are done (hr_trace_interrupted). */
hr_status hr_trace_attach(hr_trace *t, hr_session_t *s);
/* A step begins: the loader's times of its batch (hr_trace_clock's clock):
 * the wait for it on this thread, its gathering on the loader's. */
void hr_trace_batch(hr_trace *t, double wait0, double wait1, double gather0, double gather1, int64_t n);
/* The step ended (loss may be NaN); after the last traced one the file is
 * written (its status returned) and the trace detaches. */
hr_status hr_trace_step_end(hr_trace *t, int64_t step, float loss);
/* Writes what was recorded, if not yet written, with why the run stopped. */
hr_status hr_trace_finish(hr_trace *t, const char *why);
bool hr_trace_written(const hr_trace *t);
/* The steps recorded, the file's bytes and the seconds its writing took (fsync included). */
void hr_trace_stats(const hr_trace *t, int *steps, size_t *bytes, double *seconds);
const char *hr_trace_path(const hr_trace *t);
void hr_trace_free(hr_trace *t);
bool hr_trace_interrupted(void); /* a SIGINT or SIGTERM came while tracing */
double hr_trace_clock(void);     /* seconds, CLOCK_MONOTONIC (the loader's clock too) */
/* What the profile's hooks (profile.c) record while a step is traced. A pass
 * begins (its batch was uploaded since the trace's last event); node k (and
 * the count-1 nodes of its launch) ran from t0 to t1: host seconds, or,
 * device, seconds from the start of the run of nodes that
 * hr_trace_device_run placed: launched (its first launch), synced (when the
 * sync after it returned) and ms (the run's device milliseconds, < 0
 * unknown). */
void hr_trace_pass(hr_trace *t, double now);
void hr_trace_node(hr_trace *t, int k, int count, double t0, double t1, bool device);
void hr_trace_device_run(hr_trace *t, double launched, double synced, double ms);

#endif
