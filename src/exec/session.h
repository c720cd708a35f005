/* session.h — exec's own view of a compiled model: its step program, its
 * plan, the backend that runs it and, once allocated, the arena. Only
 * src/exec/ includes this; tests and tools use exec/internal.h. */
#ifndef HR_SESSION_H
#define HR_SESSION_H

#include "exec/internal.h"

struct hr_session {
    char *model_name;
    hr_model_t *model; /* a copy, so the OOM report can search the largest batch that fits */
    hr_program prog;
    hr_plan plan;
    hr_backend *be;
    hr_options opt;   /* the HR_* switches, read at compile */
    void *arena;      /* backend memory, NULL before hr_session_alloc */
    void **ptr;       /* per tensor: its data in the arena, NULL if unplaced */
    hr_kargs *args;   /* per node: its kernel arguments, refilled each step (allocated with the arena) */
    int64_t t;        /* optimizer steps taken */
    int *state;       /* tensor ids of named state: params, buffers, optimizer state */
    int nstate;
    size_t overhead;  /* measured runtime overhead of the backend */
    struct hr_profile *prof; /* HR_PROFILE (diagnostics), NULL when off */
    /* fp16: GradScaler's state (scale, good steps in a row), steps skipped */
    float scale;
    int64_t growth, skipped;
    int *first_writer; /* accumulation: node * HR_NODE_MAX_IO + slot of each gradient's first writer */
    int n_first_writer;
    bool nan_stop;     /* a non-finite loss skips the update (nancheck.c) */
    bool copies_stale; /* the host wrote parameters: their held half copies are made before the next pass */
    /* The step as one device graph (CUDA): 0 not captured yet, 1 captured
     * (each step replays it), -1 never (graph_why says why); steps run node
     * by node so far (the first runs so, to choose its algorithms). */
    int graph;
    char graph_why[512];
    int64_t eager_steps;
    int graph_tries;   /* captures that failed */
    /* Steps queued ahead (hr_train_submit), oldest at qhead: their losses
     * (read back by the backend, or kept here when the step ran at once:
     * qsync). skip_left: queued steps whose update the device skips, being
     * behind one whose loss was not finite (the NaN stop). */
    int queued, qhead, skip_left;
    float qloss[HR_STEP_QUEUE];
    bool qsync[HR_STEP_QUEUE];
    uint16_t *xh;      /* a half input's block on its way (hr_send_input), NULL until used */
};

/* session.c: nodes [from, to) of the step (base: its scalars; NULL: step
 * t's); the batch's labels and input to the arena (the input last; staged:
 * into the staged batch, prog.staged); after a
 * failed step that uploaded, the backend finishes with x (st returned). */
hr_status hr_run_range(hr_session_t *s, int from, int to, const hr_step_info *base);
hr_status hr_upload_batch(hr_session_t *s, const float *x, const void *labels, bool staged);
/* Accumulation: the nodes that write the parameters' gradients first add
 * into them (on) or overwrite them (off: the first micro-batch). */
void hr_grads_accumulate(hr_session_t *s, bool on);
/* n values of a batch's input x to dst, in the input tensor's type t: F32
 * as they are, a half type rounded as autocast's cast rounds them (the cast
 * folded into the input: plan/autocast.c), a block at a time through
 * s->xh (each upload has taken its bytes when it returns). */
typedef hr_status (*hr_upload_fn)(hr_backend *, void *, const void *, size_t);
hr_status hr_send_input(hr_session_t *s, hr_upload_fn up, void *dst, const float *x, int64_t n, hr_dtype t);
hr_status hr_finish_batch(hr_session_t *s, hr_status st);
/* hr_train_step once its arguments are checked (hr_train_submit's steps
 * that run at once come here too). */
hr_status hr_train_step_now(hr_session_t *s, const float *x, const void *labels, float *loss);

/* step.c: the step's scalars for step t to the arena (clear: the NaN stop's
 * flag starts clear); whether this session's step runs on the device alone,
 * and that step; why its step cannot be one graph, noted in s->graph_why. */
hr_status hr_upload_vars(hr_session_t *s, int64_t t, bool clear);
bool hr_device_stepped(const hr_session_t *s);
hr_status hr_device_step(hr_session_t *s, const float *x, const void *labels, float *loss);
/* The weights' held half copies (plan/autocast.c: hr_autocast_hold) made
 * from the parameters, when the host wrote these since (initialisation,
 * hr_state_write); nothing otherwise. Before any pass that reads them. */
hr_status hr_copies_refresh(hr_session_t *s);
void hr_graph_blocked(hr_session_t *s);

/* node.c: the workspace callback the program builder asks (ctx: the backend). */
size_t hr_exec_workspace(void *be, const hr_graph *g, const hr_node *n);
/* node.c: refuses, naming the layer, a node whose op the backend lacks. */
hr_status hr_exec_check_support(hr_backend *be, const hr_program *p);

/* profile.c: per-node times (HR_PROFILE=1 host, 2 device events), printed
 * when the session ends. */
typedef struct hr_profile hr_profile;
hr_profile *hr_profile_new(const hr_session_t *s, int mode);
void hr_profile_free(hr_profile *p, const hr_session_t *s); /* prints s's table (s NULL: frees only) */
/* Forgets the times so far (the warm-up), as the first step's are. */
void hr_profile_reset(hr_profile *p);
/* Node k's seconds since the warm-up, summed over *runs timings; *span: the
 * nodes of its last launch (1 alone, > 1 the first of a group, which holds
 * the group's time; 0 inside a group). */
double hr_profile_node_seconds(const hr_profile *p, int k, int64_t *runs, int *span);
/* Around each run of nodes [from, to): start before, node/group hooks around
 * each launch, finish after. */
void hr_profile_step(hr_profile *p, int from, int nn);
hr_status hr_profile_before(hr_profile *p, hr_backend *be, int k);
void hr_profile_after(hr_profile *p, hr_backend *be, int k, int count, double t0);
hr_status hr_profile_finish(hr_profile *p, hr_backend *be, int from, int to);
bool hr_profile_host(const hr_profile *p); /* host timing: sync after each node */
double hr_profile_now(void);
/* s's profile hands its node events to trace t from now on (made, device
 * marks where the backend has them, when s had none); t NULL: no more, and
 * a profile made for the trace alone goes. */
hr_status hr_profile_trace(hr_session_t *s, struct hr_trace *t);

#endif
