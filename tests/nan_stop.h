/* nan_stop.h — the NaN stop on one device, shared by tests/test_nancheck.c
 * (CPU) and tests/gpu/test_cuda_nonfinite.c (CUDA): a non-finite loss skips
 * its update, and hr_nan_find names a NaN parameter, a NaN in the batch or
 * the Linear whose output overflows, each where it is. */
#ifndef HR_TEST_NAN_STOP_H
#define HR_TEST_NAN_STOP_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/internal.h"

/* Linear(8, 16) ReLU Linear(16, 4), CE: layers 0, 1, 2 */
static inline hr_model_t *nan_stop_model(void) {
    hr_model_t *m = hr_model_new("nan_stop");
    int x = hr_input(m, "x", 1, (int64_t[]){8});
    x = hr_linear(m, NULL, x, 8, 16, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 16, 4, true);
    hr_loss_cross_entropy(m, x, 4);
    return m;
}
#define NS_BATCH 4
#define NS_IN 8

static inline void nan_stop_batch(float *x, int32_t *y) {
    for (int i = 0; i < NS_BATCH * NS_IN; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < NS_BATCH; i++) y[i] = i % 4;
}

static inline int64_t ns_numel(hr_session_t *s, int i) {
    int64_t n = 1;
    for (int d = 0; d < hr_state_ndim(s, i); d++) n *= hr_state_dim(s, i, d);
    return n;
}

/* Every parameter's bits, in state order, into one malloc'd buffer. */
static inline float *ns_params(hr_session_t *s, int64_t *total) {
    int64_t n = 0;
    for (int i = 0; i < hr_state_count(s); i++) n += ns_numel(s, i);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1)), *at = v;
    for (int i = 0; i < hr_state_count(s) && v; i++) {
        CHECK(hr_state_read(s, i, at) == HR_OK, "read %s: %s", hr_state_name(s, i), hr_last_error());
        at += ns_numel(s, i);
    }
    *total = n;
    return v;
}

/* Sets element k of state `name` to v. */
static inline void ns_poke(hr_session_t *s, const char *name, int64_t k, float v) {
    int i = hr_state_find(s, name);
    CHECK(i >= 0, "no state named %s", name);
    if (i < 0) return;
    float *b = malloc(sizeof(float) * (size_t)ns_numel(s, i));
    hr_state_read(s, i, b);
    b[k] = v;
    CHECK(hr_state_write(s, i, b) == HR_OK, "write %s: %s", name, hr_last_error());
    free(b);
}

/* One stopped step: the loss is not finite, the status HR_OK, and neither
 * the parameters (and optimizer state) nor the step count moved; then the
 * report. */
static inline hr_nan_report ns_stop(const char *what, hr_session_t *s, const float *x, const int32_t *y) {
    int64_t n0, n1, t0 = hr_step_count(s);
    float *before = ns_params(s, &n0), loss = 0;
    hr_status st = hr_train_step(s, x, y, &loss);
    float *after = ns_params(s, &n1);
    CHECK(st == HR_OK && !isfinite(loss), "%s: status %s, loss %g (want HR_OK and a non-finite loss): %s", what,
          hr_status_name(st), (double)loss, hr_last_error());
    CHECK(hr_step_count(s) == t0, "%s: the step count moved from %lld to %lld", what, (long long)t0,
          (long long)hr_step_count(s));
    CHECK(before && after && memcmp(before, after, sizeof(float) * (size_t)n0) == 0,
          "%s: the stopped step changed the parameters or the optimizer state", what);
    free(before);
    free(after);
    hr_nan_report r;
    memset(&r, 0, sizeof r);
    st = hr_nan_find(s, x, y, &r);
    CHECK(st == HR_OK, "%s: nan_find: %s", what, hr_last_error());
    return r;
}

static inline const char *ns_tname(hr_session_t *s, int t) {
    const hr_graph *g = &hr_session_program(s)->g;
    return t >= 0 && t < g->nt ? g->t[t].name : "(none)";
}

/* The cases on dev, with accumulation K (1 or 2). */
static inline void nan_stop_cases(hr_device dev, int K) {
    const char *dn = dev == HR_DEVICE_CUDA ? "cuda" : "cpu";
    hr_model_t *m = nan_stop_model();
    hr_config_t c = hr_config_default();
    c.device = dev, c.batch = NS_BATCH, c.accumulate = K, c.seed = 3;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s && hr_session_alloc(s) == HR_OK, "%s: session: %s", dn, hr_last_error());
    if (!s || !hr_session_allocated(s)) goto out;
    hr_session_set_nan_stop(s, true);
    float x[NS_BATCH * NS_IN], loss = 0;
    int32_t y[NS_BATCH];
    nan_stop_batch(x, y);
    CHECK(hr_train_step(s, x, y, &loss) == HR_OK && isfinite(loss) && hr_step_count(s) == 1,
          "%s: a finite step: loss %g, step %lld: %s", dn, (double)loss, (long long)hr_step_count(s), hr_last_error());

    /* the batch: a NaN in the last sample (the second micro-batch with K = 2) */
    x[3 * NS_IN + 5] = NAN;
    hr_nan_report r = ns_stop("NaN input", s, x, y);
    const hr_program *p = hr_session_program(s);
    int64_t mb = NS_BATCH / K;
    CHECK(r.kind == HR_NAN_INPUT && r.tensor == p->input && r.count == 1 && isnan(r.value) && r.micro == 3 / mb &&
              r.first == (3 % mb) * NS_IN + 5,
          "%s K=%d NaN input: kind %d tensor %s count %lld first %lld micro %d", dn, K, r.kind, ns_tname(s, r.tensor),
          (long long)r.count, (long long)r.first, r.micro);
    nan_stop_batch(x, y);

    /* an overflow: the second Linear's weights at 3e38 (finite), its input >= 0 */
    int wi = hr_state_find(s, "2.weight");
    CHECK(wi >= 0, "%s: no 2.weight", dn);
    if (wi >= 0) {
        int64_t n = ns_numel(s, wi);
        float *w = malloc(sizeof(float) * (size_t)n), *keep = malloc(sizeof(float) * (size_t)n);
        hr_state_read(s, wi, keep);
        for (int64_t i = 0; i < n; i++) w[i] = 3e38f;
        hr_state_write(s, wi, w);
        r = ns_stop("overflow", s, x, y);
        const hr_graph *g = &p->g;
        bool linear2 = r.node >= 0 && g->n[r.node].op == HR_OP_LINEAR && g->n[r.node].layer >= 0 &&
                       !strcmp(g->l[g->n[r.node].layer].name, "2");
        CHECK(r.kind == HR_NAN_OP && linear2 && r.tensor == g->n[r.node].out[0] && isinf(r.value) &&
                  r.in_max == (double)3e38f && r.micro == 0,
              "%s K=%d overflow: kind %d node %d (%s) tensor %s value %g in_max %g", dn, K, r.kind, r.node,
              r.node >= 0 ? hr_op_name(g->n[r.node].op) : "-", ns_tname(s, r.tensor), (double)r.value, r.in_max);
        hr_state_write(s, wi, keep);
        free(w);
        free(keep);
    }

    /* a parameter that is NaN already */
    ns_poke(s, "0.bias", 3, NAN);
    r = ns_stop("NaN parameter", s, x, y);
    CHECK(r.kind == HR_NAN_PARAM && !strcmp(ns_tname(s, r.tensor), "0.bias") && r.first == 3 && r.count == 1 &&
              r.numel == 16 && isnan(r.value),
          "%s K=%d NaN parameter: kind %d tensor %s first %lld count %lld", dn, K, r.kind, ns_tname(s, r.tensor),
          (long long)r.first, (long long)r.count);
out:
    hr_session_free(s);
    hr_model_free(m);
}

/* The stop changes no number: 3 steps with it and without it, the same
 * losses and parameters, bit for bit. */
static inline void nan_stop_same_numbers(hr_device dev, int K) {
    hr_model_t *m = nan_stop_model();
    hr_config_t c = hr_config_default();
    c.device = dev, c.batch = NS_BATCH, c.accumulate = K, c.seed = 5;
    hr_session_t *s[2];
    float loss[2][3];
    for (int k = 0; k < 2; k++) {
        s[k] = hr_compile(m, &c);
        CHECK(s[k] && hr_session_alloc(s[k]) == HR_OK, "session: %s", hr_last_error());
        if (!s[k] || !hr_session_allocated(s[k])) continue;
        hr_session_set_nan_stop(s[k], k == 1);
        float x[NS_BATCH * NS_IN];
        int32_t y[NS_BATCH];
        nan_stop_batch(x, y);
        for (int t = 0; t < 3; t++) {
            x[t] += 0.5f;
            CHECK(hr_train_step(s[k], x, y, &loss[k][t]) == HR_OK, "step: %s", hr_last_error());
        }
    }
    if (s[0] && s[1] && hr_session_allocated(s[0]) && hr_session_allocated(s[1])) {
        int64_t n0, n1;
        float *a = ns_params(s[0], &n0), *b = ns_params(s[1], &n1);
        CHECK(n0 == n1 && !memcmp(a, b, sizeof(float) * (size_t)n0) && !memcmp(loss[0], loss[1], sizeof loss[0]),
              "K=%d: the stop changed the numbers (losses %.9g %.9g)", K, (double)loss[0][2], (double)loss[1][2]);
        free(a);
        free(b);
    }
    hr_session_free(s[0]);
    hr_session_free(s[1]);
    hr_model_free(m);
}

#endif
