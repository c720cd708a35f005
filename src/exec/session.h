/* session.h — a compiled model: its step program, its plan, the backend that
 * runs it and, once allocated, the arena. */
#ifndef HR_SESSION_H
#define HR_SESSION_H

#include "backend/backend.h"
#include "graph/program.h"
#include "plan/plan.h"

struct hr_session {
    char *model_name;
    hr_model_t *model; /* a copy, so the OOM report can search the largest batch that fits */
    hr_program prog;
    hr_plan plan;
    hr_backend *be;
    void *arena;      /* backend memory, NULL before hr_session_alloc */
    void **ptr;       /* per tensor: its data in the arena, NULL if unplaced */
    int64_t t;        /* optimizer steps taken */
    int *state;       /* tensor ids of named state: params, buffers, optimizer state */
    int nstate;
    size_t overhead;  /* measured runtime overhead of the backend */
    /* HR_PROFILE at compile (diagnostics: plain calloc, may stay NULL) */
    double *prof;     /* seconds spent in each node (a group's in its first), printed at free */
    int *prof_span;   /* per node: how many nodes ran with it as one group, last run; 0 inside a group */
    bool prof_events; /* HR_PROFILE=2 on a backend with marks: device time, no sync between nodes */
    bool prof_skipped; /* the first step was dropped from the table */
    int64_t prof_runs;
};

int64_t hr_largest_batch_on(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi,
                            hr_backend *be);
hr_session_t *hr_compile_on(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be);

#endif
