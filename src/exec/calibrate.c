/* calibrate.c — the cost model's measurements: a session's training steps on
 * random data with every node timed (device events on a GPU, host time on
 * the CPU), each node's median recorded under its key, the cache saved. */
#include "exec/session.h"

#include <stdlib.h>
#include <string.h>

/* A whole batch (every micro-batch): inputs uniform in [-1, 1), labels
 * uniform over the classes, or MSE targets in [-1, 1). */
static hr_status random_batch(const hr_session_t *s, float **x, void **labels) {
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    int64_t K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    size_t nx = (size_t)(hr_shape_numel(&g->t[p->input].shape) * K);
    size_t nl = p->label >= 0 ? (size_t)(hr_shape_numel(&g->t[p->label].shape) * K) : 0;
    *x = hr_malloc(sizeof(float) * (nx ? nx : 1));
    *labels = hr_malloc(sizeof(float) * (nl ? nl : 1)); /* int32 or float */
    if (!*x || !*labels) return hr_error_prefix("calibration: a random batch of %zu values", nx);
    for (size_t i = 0; i < nx; i++) (*x)[i] = 2 * hr_rng_uniform(p->cfg.seed, 77, i) - 1;
    bool classes = p->label >= 0 && g->t[p->label].dtype == HR_I32;
    int64_t C = classes ? g->t[p->output].shape.d[1] : 0;
    for (size_t i = 0; i < nl; i++) {
        float u = hr_rng_uniform(p->cfg.seed, 78, i);
        if (classes) ((int32_t *)*labels)[i] = (int32_t)(C > 0 ? (int64_t)(u * (float)C) % C : 0);
        else ((float *)*labels)[i] = 2 * u - 1;
    }
    return HR_OK;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v's values >= 0 (v is reordered); -1 when none. */
static double median(double *v, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] >= 0) v[k++] = v[i];
    if (!k) return -1;
    qsort(v, (size_t)k, sizeof *v, by_value);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

/* Runs the steps with prof as the session's profile; samples[k * steps + i]:
 * node k's seconds a run in step i, -1 where it did not run. */
static hr_status timed_steps(hr_session_t *s, hr_profile *prof, int steps, const float *x, const void *labels,
                             double *samples) {
    int nn = s->prog.n_step;
    double *prev = hr_calloc((size_t)(nn ? nn : 1), sizeof *prev);
    int64_t *prev_runs = hr_calloc((size_t)(nn ? nn : 1), sizeof *prev_runs);
    hr_status st = prev && prev_runs ? HR_OK : hr_error_prefix("calibration");
    hr_profile *own = s->prof;
    s->prof = prof;
    for (int i = 0; i < steps && !st; i++) {
        st = hr_train_step(s, x, labels, NULL);
        for (int k = 0; k < nn && !st; k++) {
            int64_t runs;
            double sec = hr_profile_node_seconds(prof, k, &runs, NULL);
            samples[(size_t)k * (size_t)steps + (size_t)i] =
                runs > prev_runs[k] ? (sec - prev[k]) / (double)(runs - prev_runs[k]) : -1;
            prev[k] = sec;
            prev_runs[k] = runs;
        }
    }
    s->prof = own;
    hr_free(prev);
    hr_free(prev_runs);
    return st;
}

/* Node k's median into the model; a group's launch is shared among its
 * nodes as their estimates are. */
static hr_status record(hr_session_t *s, hr_cost_model *cm, const hr_profile *prof, double *samples, int steps) {
    const hr_graph *g = &s->prog.g;
    for (int k = 0; k < s->prog.n_step; k++) {
        int span;
        hr_profile_node_seconds(prof, k, NULL, &span);
        double t = median(samples + (size_t)k * (size_t)steps, steps);
        if (t < 0 || span == 0) continue; /* did not run, or timed with its group */
        if (span < 1) span = 1;
        double sum = 0;
        for (int j = k; j < k + span; j++) sum += hr_cost_estimate(cm, g, &g->n[j]);
        for (int j = k; j < k + span; j++) {
            double share = span == 1 || sum <= 0 ? 1.0 / span : hr_cost_estimate(cm, g, &g->n[j]) / sum;
            hr_status st = hr_cost_record(cm, g, &g->n[j], t * share);
            if (st) return st;
        }
    }
    return HR_OK;
}

/* Whole steps as a training loop sees them (the host clock around each,
 * the loss read back, no profile): what the median takes beyond the
 * nodes' recorded times is the passes' own (upload, launch gaps, sync). */
static hr_status record_pass(hr_session_t *s, hr_cost_model *cm, int steps, const float *x, const void *labels) {
    double *t = hr_malloc(sizeof(double) * (size_t)steps);
    if (!t) return hr_error_prefix("calibration");
    hr_status st = HR_OK;
    for (int i = 0; i < steps && !st; i++) {
        float loss;
        double t0 = hr_profile_now();
        st = hr_train_step(s, x, labels, &loss);
        t[i] = hr_profile_now() - t0;
    }
    if (!st) {
        const hr_program *p = &s->prog;
        int K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
        double nodes = 0;
        for (int k = 0; k < p->n_step; k++) nodes += hr_cost_node(cm, &p->g, &p->g.n[k]) * (k < p->n_bwd_end ? K : 1);
        st = hr_cost_record_pass(cm, p, (median(t, steps) - nodes) / K);
    }
    hr_free(t);
    return st;
}

hr_status hr_cost_measure(hr_session_t *s, hr_cost_model *cm, int steps) {
    if (!s || !cm || steps < 1)
        return hr_error_set(HR_ERR_INVALID_ARG, "cost measure: %s", !s || !cm ? "NULL argument" : "steps must be >= 1");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "cost measure: call hr_session_alloc first");
    if (s->prog.cfg.mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "cost measure: the session was compiled for inference; compile one "
                            "for training (HR_MODE_TRAIN) to measure its step");
    float *x = NULL;
    void *labels = NULL;
    int nn = s->prog.n_step;
    double *samples = hr_malloc(sizeof(double) * (size_t)(nn ? nn : 1) * (size_t)steps);
    hr_profile *prof = hr_profile_new(s, 2); /* device events where the backend has marks, else host time */
    hr_status st = samples ? random_batch(s, &x, &labels) : hr_error_prefix("calibration: %d nodes", nn);
    if (!st && !prof) st = hr_error_set(HR_ERR_OOM, "calibration: out of memory for the node profile");
    /* the first step (library tuning, first touches) is left out */
    hr_profile *own = s->prof;
    s->prof = NULL;
    if (!st) st = hr_train_step(s, x, labels, NULL);
    s->prof = own;
    hr_profile_reset(prof);
    if (!st) st = timed_steps(s, prof, steps, x, labels, samples);
    if (!st) st = record(s, cm, prof, samples, steps);
    /* on a GPU, what a step does besides its kernels (the batch's upload
     * from pageable memory above all) is measured; on the CPU the nodes are
     * the step, and the batch's copy is estimated (a step of host-timed
     * nodes has no gaps worth a measurement that noise on shared cores
     * would swamp) */
    if (!st && s->be->arena_kind == HR_MEM_DEVICE) st = record_pass(s, cm, steps < 5 ? 5 : steps, x, labels);
    if (!st) hr_cost_save(cm); /* a cache that can't be written is a warning (printed), not a failure */
    if (st) hr_error_prefix("measuring node times of %s", s->model_name);
    hr_profile_free(prof, NULL);
    hr_free(samples);
    hr_free(x);
    hr_free(labels);
    return st;
}
