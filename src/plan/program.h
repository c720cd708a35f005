/* program.h — the step program: forward, backward and update nodes in one
 * linear schedule, built from a model for a batch size, mode and optimizer. */
#ifndef HR_PROGRAM_H
#define HR_PROGRAM_H

#include "ops/ops.h"

typedef struct {
    hr_graph g;
    hr_config_t cfg;
    int n_fwd;      /* nodes [0, n_fwd) are the forward pass */
    int n_bwd_end;  /* nodes [n_fwd, n_bwd_end) the backward pass, then the update */
    int n_step;     /* nodes [0, n_step) are the step; [n_step, nn) the evaluation pass */
    int input, label, loss, output;
    int sqnorm;     /* squared gradient norm (clipping), -1 */
    /* fp16's loss scaler: nodes [n_bwd_end, n_unscale_end) unscale the
     * gradients and set found_inf (one F32) on any inf or NaN; the step reads
     * it before the rest of the update runs. -1 and n_bwd_end without. */
    int found_inf;
    int n_unscale_end;
    /* The evaluation pass (cfg.eval_batch > 0 in training): the forward pass
     * in inference mode on eval_batch samples, sharing the parameters and
     * buffers, in the same arena (its tensors live only in its own part of
     * the schedule, so they take the step's dead bytes). -1 without one. */
    int eval_input, eval_output;
    /* Training on CUDA: the step's scalars in the arena (hr_step_vars, one
     * F32 tensor of its size), which the host writes before each step and
     * the update and the random masks read there, so that one captured step replays
     * (CUDA graphs). Alive through the whole program. -1 elsewhere. */
    int step_vars;
    /* Training on CUDA without fp16's scaler, an input (a micro-batch's)
     * below HR_STAGED_INPUT_MAX: the next batch or micro-batch (labels, the
     * step's scalars, the input: hr_staged_layout) is uploaded here while
     * the step or micro-batch before it runs, then copied in at its start.
     * -1 elsewhere. */
    int staged;
    /* The recomputed layers ("1,2,5"; cfg.recompute points here), NULL for none. */
    char *recompute;
    /* cfg.chunks: the slices the first layers run in (0: none), each of
     * chunk_samples samples (the last one the rest), and those layers. */
    int chunks;
    int64_t chunk_samples;
    int chunk_layers;
} hr_program;

/* Scratch bytes node n of g needs on the device that will run it (0: none);
 * the backend answers through exec, which passes this in. */
typedef size_t (*hr_workspace_fn)(void *ctx, const hr_graph *g, const hr_node *n);

/* Builds the program; ws (may be NULL: no workspace) sizes each node's
 * scratch. On failure p is freed. */
hr_status hr_program_build(const hr_model_t *m, const hr_config_t *cfg, hr_workspace_fn ws, void *ws_ctx,
                           hr_program *p);
void hr_program_free(hr_program *p);
/* A deep copy of src (for trying a change to a built program). */
hr_status hr_program_copy(hr_program *dst, const hr_program *src);
/* The samples of one pass: the batch, or batch/accumulate with accumulation. */
static inline int64_t hr_micro_batch(const hr_config_t *cfg) {
    return cfg->accumulate > 1 ? cfg->batch / cfg->accumulate : cfg->batch;
}

/* The staged batch: its parts' offsets (each HR_ALIGN-aligned) and bytes. */
typedef struct {
    size_t labels, vars, input;          /* offsets */
    size_t label_bytes, input_bytes, total;
} hr_staged;
static inline hr_staged hr_staged_layout(const hr_program *p) {
    const hr_graph *g = &p->g;
    hr_staged l;
    l.label_bytes = p->label >= 0 ? (size_t)hr_shape_numel(&g->t[p->label].shape) * hr_dtype_size(g->t[p->label].dtype) : 0;
    l.input_bytes = (size_t)hr_shape_numel(&g->t[p->input].shape) * hr_dtype_size(g->t[p->input].dtype);
    l.labels = 0;
    l.vars = hr_align_up(l.label_bytes, HR_ALIGN);
    l.input = l.vars + hr_align_up(sizeof(hr_step_vars), HR_ALIGN);
    l.total = l.input + l.input_bytes;
    return l;
}

#endif
