/* step.c — a training step that the device runs without the host in
 * between (no loss scaler): its scalars in the arena, the NaN stop checked
 * on the device, the whole step of one pass captured once as a graph and
 * replayed (CUDA graphs), accumulation's micro-batches queued one after
 * another with their losses summed on the device, and steps queued ahead
 * (hr_train_submit) so that the host stages the next batch while the device
 * runs this one. */
#include "exec/session.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* The step's scalars for step t (hr_step_vars: the host's part), uploaded
 * before its batch: on CUDA the update and the random masks read them in the
 * arena. clear: no step queued ahead of this one will update, so the NaN
 * stop's flag starts clear. Staged: into the staged batch (hr_stage_in
 * copies them to the arena at the step's start). */
static hr_status upload_vars(hr_session_t *s, int64_t t, bool clear, bool staged) {
    const hr_program *p = &s->prog;
    if (p->step_vars < 0) return HR_OK;
    hr_step_vars v = hr_step_vars_make(&p->cfg.optim, t, hr_lr_at(&p->cfg.optim, t));
    v.clear = clear;
    if (!staged) return s->be->upload(s->be, s->ptr[p->step_vars], &v, HR_STEP_VARS_HOST);
    return s->be->upload_staged(s->be, (char *)s->ptr[p->staged] + hr_staged_layout(p).vars, &v, HR_STEP_VARS_HOST);
}

hr_status hr_upload_vars(hr_session_t *s, int64_t t, bool clear) { return upload_vars(s, t, clear, false); }

/* The staged batch into the step's labels, scalars and input. */
static hr_status stage_in(hr_session_t *s) {
    const hr_program *p = &s->prog;
    hr_staged l = hr_staged_layout(p);
    const char *buf = s->ptr[p->staged];
    void *dst[3] = {p->label >= 0 ? s->ptr[p->label] : NULL, s->ptr[p->step_vars], s->ptr[p->input]};
    const void *src[3] = {buf + l.labels, buf + l.vars, buf + l.input};
    size_t n[3] = {l.label_bytes, HR_STEP_VARS_HOST, l.input_bytes};
    return s->be->stage_in(s->be, dst, src, n, 3);
}

/* The step of one pass without a loss scaler, which the device runs without
 * the host in between: forward, backward, the NaN stop's check (on the
 * device: the update's kernels skip themselves), the update. */
bool hr_device_stepped(const hr_session_t *s) {
    const hr_program *p = &s->prog;
    return p->step_vars >= 0 && s->be->step_check && p->found_inf < 0 &&
           (p->cfg.accumulate <= 1 || (s->be->loss_add && s->opt.device_accumulate));
}

/* The step's loss on the device: the loss node's output, or with
 * accumulation the micro-batches' mean in the step's scalars. */
static const float *device_loss(const hr_session_t *s) {
    const hr_program *p = &s->prog;
    if (p->cfg.accumulate <= 1) return s->ptr[p->loss];
    return (const float *)((const char *)s->ptr[p->step_vars] + offsetof(hr_step_vars, loss_mean));
}

static hr_status step_nodes(hr_session_t *s, const hr_step_info *si) {
    const hr_program *p = &s->prog;
    hr_status st = hr_run_range(s, 0, p->n_bwd_end, si);
    if (!st) st = s->be->step_check(s->be, s->ptr[p->loss], s->ptr[p->step_vars], s->nan_stop);
    if (!st) st = hr_run_range(s, p->n_bwd_end, p->n_step, si);
    return st;
}

/* Accumulation's step on the device, the first micro-batch already
 * uploaded: the next micro-batch crosses the link (into the staged buffer)
 * while this one runs, each adds its loss on the device, and the host never
 * waits between them; then the NaN stop's check on the mean loss and the
 * update. Node by node: each micro-batch has its own accumulate flags and
 * first sample (where its random masks start). */
static hr_status micro_batches(hr_session_t *s, const float *x, const void *labels, bool staged, hr_step_info *si) {
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    int K = p->cfg.accumulate;
    int64_t micro = hr_micro_batch(&p->cfg);
    size_t xs = (size_t)hr_shape_numel(&g->t[p->input].shape), ls = 0;
    if (p->label >= 0) ls = (size_t)hr_shape_numel(&g->t[p->label].shape) * hr_dtype_size(g->t[p->label].dtype);
    hr_step_vars *dv = s->ptr[p->step_vars];
    si->loss_scale = 1.0f / (float)K;
    hr_status st = HR_OK;
    for (int k = 0; k < K && !st; k++) {
        if (k > 0) st = hr_upload_batch(s, x + (size_t)k * xs, (const char *)labels + (size_t)k * ls, staged);
        if (!st && k > 0 && staged) st = stage_in(s);
        si->sample0 = k * micro;
        hr_grads_accumulate(s, k > 0);
        if (!st) st = hr_run_range(s, 0, p->n_bwd_end, si);
        if (!st) st = s->be->loss_add(s->be, s->ptr[p->loss], dv, k, K);
    }
    hr_grads_accumulate(s, false);
    if (!st) st = s->be->step_check(s->be, device_loss(s), dv, s->nan_stop);
    if (!st) st = hr_run_range(s, p->n_bwd_end, p->n_step, si);
    return st;
}

/* Why this session's step is not one graph, or NULL when it can be. */
static const char *graph_blocker(const hr_session_t *s) {
    const hr_program *p = &s->prog;
    if (!s->be->graph_begin) return "this backend has no graphs";
    if (!s->opt.cuda_graph) return "HR_CUDA_GRAPH=0";
    if (s->prof) return "a profile or trace times each node";
    if (p->cfg.accumulate > 1)
        return "accumulation runs its micro-batches node by node (each has its own accumulate flags and samples)";
    if (p->found_inf >= 0) return "fp16's loss scaler reads found_inf on the host before the update";
    if (p->step_vars < 0 || !s->be->step_check) return "the step's scalars are not in the arena";
    return NULL;
}

void hr_graph_blocked(hr_session_t *s) {
    const char *no = s->graph >= 0 ? graph_blocker(s) : NULL;
    if (no) s->graph = -1, snprintf(s->graph_why, sizeof s->graph_why, "%s", no);
}

/* Records the step as a graph (nothing of it runs); when it cannot be
 * captured, the step runs node by node, and the next steps try again (a
 * node may still choose its algorithm at its second run) up to three times,
 * then the session keeps to node by node and says why. */
static void capture(hr_session_t *s, const hr_step_info *si) {
    hr_backend *be = s->be;
    hr_status st = be->graph_begin(be);
    if (!st) {
        hr_status run = step_nodes(s, si);
        char why[512] = "";
        if (run) snprintf(why, sizeof why, "%s", hr_last_error());
        st = be->graph_end(be, run == HR_OK);
        if (run) st = hr_error_set(run, "%s", why);
    }
    if (st) { /* this step runs node by node; a few more tries, unless it can never be */
        snprintf(s->graph_why, sizeof s->graph_why, "capturing the step failed: %s", hr_last_error());
        s->graph = st == HR_ERR_UNSUPPORTED || ++s->graph_tries >= 3 ? -1 : 0;
    } else {
        s->graph = 1;
    }
}

/* Queues the step after the s->queued steps already queued: its scalars and
 * batch (into the staged buffer, which the copy fills while the steps queued
 * run, then copied in at this one's start), then the captured graph (or its
 * nodes). With steps queued before it that will update, the NaN stop's flag
 * is left as they leave it (sticky). */
static hr_status device_queue(hr_session_t *s, const float *x, const void *labels) {
    const hr_program *p = &s->prog;
    int ahead = s->queued - s->skip_left; /* queued steps that will update */
    int64_t t = s->t + ahead;             /* steps taken when this one runs */
    hr_step_info si = hr_step_info_make(t, &p->cfg, p->sqnorm);
    si.dvars = s->ptr[p->step_vars];
    hr_graph_blocked(s);
    /* none that will update ahead: the NaN stop's flags start clear (the
     * copy runs after the steps queued so far, which stay skipped) */
    bool staged = p->staged >= 0 && s->be->upload_staged && s->be->stage_in; /* while the step before runs */
    hr_status st = hr_copies_refresh(s);
    if (!st) st = upload_vars(s, t + 1, ahead == 0, staged);
    if (!st) st = hr_upload_batch(s, x, labels, staged);
    if (!st && staged) st = stage_in(s);
    if (p->cfg.accumulate > 1) {
        if (!st) st = micro_batches(s, x, labels, staged, &si);
        return st ? hr_finish_batch(s, st) : HR_OK;
    }
    /* the first step runs node by node: it chooses the algorithms (timing them) */
    if (!st && s->graph == 0 && s->eager_steps > 0) capture(s, &si);
    if (!st && s->graph > 0) {
        st = s->be->graph_launch(s->be);
    } else if (!st) {
        st = step_nodes(s, &si);
        s->eager_steps++;
    }
    return st ? hr_finish_batch(s, st) : HR_OK;
}

/* A queued step's loss is known (s->queued no longer counts it): with the
 * NaN stop, a non-finite loss took no update, nor did the steps queued
 * behind it then (the device's sticky flag): their losses come back NaN. */
static float step_done(hr_session_t *s, float l) {
    if (s->skip_left > 0) {
        s->skip_left--;
        return NAN;
    }
    if (s->nan_stop && !isfinite(l)) {
        s->skip_left = s->queued;
        return l;
    }
    s->t++;
    return l;
}

hr_status hr_device_step(hr_session_t *s, const float *x, const void *labels, float *loss) {
    hr_status st = device_queue(s, x, labels);
    float l = 0;
    if (!st && (loss || s->nan_stop)) st = s->be->download(s->be, &l, device_loss(s), sizeof(float));
    if (st) return hr_finish_batch(s, st);
    l = step_done(s, l);
    if (loss) *loss = l;
    return HR_OK;
}

/* ---- steps queued ahead: the host stages batch t+1 while the device runs step t */
hr_status hr_train_submit(hr_session_t *s, const float *x, const void *labels) {
    if (!s || !x || !labels) return hr_error_set(HR_ERR_INVALID_ARG, "train_submit: NULL argument");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "train_submit: call hr_session_alloc first");
    if (s->prog.cfg.mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "train_submit: this session was compiled for inference");
    if (s->queued >= HR_STEP_QUEUE)
        return hr_error_set(HR_ERR_INVALID_ARG, "train_submit: %d steps are queued already; take the oldest's loss "
                            "with hr_train_wait first", s->queued);
    int slot = (s->qhead + s->queued) % HR_STEP_QUEUE;
    bool async = hr_device_stepped(s) && s->be->loss_queue;
    if (!async) { /* the step now; its loss waits in the queue */
        bool behind_nan = false; /* as on the device: no step runs behind a non-finite loss */
        for (int k = 0; k < s->queued && s->nan_stop; k++)
            behind_nan |= !isfinite(s->qloss[(s->qhead + k) % HR_STEP_QUEUE]);
        hr_status st = behind_nan ? HR_OK : hr_train_step_now(s, x, labels, &s->qloss[slot]);
        if (behind_nan) s->qloss[slot] = NAN;
        if (st) return st;
        s->qsync[slot] = true;
        s->queued++;
        return HR_OK;
    }
    hr_status st = device_queue(s, x, labels);
    if (!st) st = s->be->loss_queue(s->be, device_loss(s), slot);
    if (st) return hr_finish_batch(s, st);
    s->qsync[slot] = false;
    s->queued++;
    return HR_OK;
}

hr_status hr_train_wait(hr_session_t *s, float *loss) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "train_wait: the session is NULL");
    if (s->queued == 0) return hr_error_set(HR_ERR_INVALID_ARG, "train_wait: no step is queued (hr_train_submit)");
    int slot = s->qhead;
    float l = s->qloss[slot];
    hr_status st = s->qsync[slot] ? HR_OK : s->be->loss_wait(s->be, slot, &l);
    s->qhead = (s->qhead + 1) % HR_STEP_QUEUE;
    s->queued--;
    if (st) return st;
    if (!s->qsync[slot]) l = step_done(s, l);
    if (loss) *loss = l;
    return HR_OK;
}

int hr_train_queued(const hr_session_t *s) { return s ? s->queued : 0; }

int hr_session_graph(const hr_session_t *s, char *why, size_t n) {
    if (!s) return -1;
    if (why && n) snprintf(why, n, "%s", s->graph < 0 ? s->graph_why : "");
    return s->graph;
}

