/* nancheck.c — where a non-finite loss came from: a parameter that already
 * was, the batch, or the first forward node that made one from finite inputs. */
#include "exec/session.h"

#include <math.h>
#include <string.h>

void hr_session_set_nan_stop(hr_session_t *s, bool on) {
    if (!s) return;
    if (s->nan_stop != on && s->graph > 0) s->graph = 0; /* the check is part of the captured step: capture again */
    s->nan_stop = on;
}

static bool is_float(hr_dtype t) { return t == HR_F32 || hr_dtype_is_half(t); }

/* Counts the non-finite values of v (n values of type t) into r, and the
 * largest finite |value| into *amax; true if there are any. */
static bool scan(const void *v, hr_dtype t, int64_t n, hr_nan_report *r, double *amax) {
    int64_t bad = 0, first = -1;
    double mx = 0;
    for (int64_t i = 0; i < n; i++) {
        float f = hr_load_f(v, t, i);
        if (isfinite(f)) {
            mx = fmax(mx, fabs((double)f));
        } else if (!bad++) {
            first = i;
            r->value = f;
        }
    }
    *amax = mx;
    if (!bad) return false;
    r->count = bad, r->numel = n, r->first = first;
    return true;
}

/* Tensor t's values into buf, scanned; HR_OK with *found set. */
static hr_status scan_tensor(hr_session_t *s, int t, void *buf, hr_nan_report *r, double *amax, bool *found) {
    const hr_tensor *ts = &s->prog.g.t[t];
    int64_t n = hr_shape_numel(&ts->shape);
    hr_status st = s->be->download(s->be, buf, s->ptr[t], (size_t)n * hr_dtype_size(ts->dtype));
    if (!st) st = s->be->sync(s->be);
    if (st) return hr_error_prefix("finding the first non-finite value: reading %s", ts->name);
    *found = scan(buf, ts->dtype, n, r, amax);
    if (*found) r->tensor = t;
    return HR_OK;
}

hr_status hr_nan_find(hr_session_t *s, const float *x, const void *labels, hr_nan_report *r) {
    if (!s || !x || !labels || !r) return hr_error_set(HR_ERR_INVALID_ARG, "nan_find: NULL argument");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "nan_find: call hr_session_alloc first");
    memset(r, 0, sizeof *r);
    r->kind = HR_NAN_NONE, r->tensor = r->node = -1;
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    hr_backend *be = s->be;
    /* one host buffer, as large as the largest tensor read; each tensor's
     * largest finite |value| as it is read (-1: not read), for the inputs of
     * the node that overflows */
    size_t big = 0;
    for (int t = 0; t < g->nt; t++) {
        size_t b = (size_t)hr_shape_numel(&g->t[t].shape) * hr_dtype_size(g->t[t].dtype);
        if (b > big) big = b;
    }
    void *buf = hr_malloc(big ? big : 1);
    double *amax = hr_malloc(sizeof(double) * (size_t)(g->nt ? g->nt : 1));
    hr_status st = buf && amax ? HR_OK : hr_error_prefix("finding the first non-finite value");
    for (int t = 0; t < g->nt && !st; t++) amax[t] = -1;
    bool found = false;

    /* parameters (what the step found; the stop skipped its update) */
    for (int i = 0; i < s->nstate && !st && !found; i++) {
        int t = s->state[i];
        if (g->t[t].kind != HR_T_PARAM) continue;
        st = scan_tensor(s, t, buf, r, &amax[t], &found);
        if (found) r->kind = HR_NAN_PARAM;
    }
    /* the batch, on the host, micro-batch by micro-batch */
    int K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    int64_t xs = hr_shape_numel(&g->t[p->input].shape);
    size_t ls = p->label >= 0 ? (size_t)hr_shape_numel(&g->t[p->label].shape) * hr_dtype_size(g->t[p->label].dtype) : 0;
    for (int k = 0; k < K && !st && !found; k++) {
        found = scan(x + (size_t)k * (size_t)xs, HR_F32, xs, r, &amax[p->input]);
        if (found) r->kind = HR_NAN_INPUT, r->tensor = p->input, r->micro = k;
    }
    /* the forward pass again, node by node, each output read back */
    bool fp16 = p->cfg.precision == HR_PREC_FP16;
    hr_step_info si = hr_step_info_make(s->t, &p->cfg, p->sqnorm);
    si.loss_scale = (fp16 ? s->scale : 1.0f) / (float)K;
    si.inv_scale = fp16 ? (float)(1.0 / (double)s->scale) : 1.0f;
    for (int k = 0; k < K && !st && !found; k++) {
        hr_nan_report none;
        scan(x + (size_t)k * (size_t)xs, HR_F32, xs, &none, &amax[p->input]); /* this micro-batch's largest */
        si.sample0 = k * hr_micro_batch(&p->cfg);
        if (p->label >= 0) st = be->upload(be, s->ptr[p->label], (const char *)labels + (size_t)k * ls, ls);
        if (!st) st = hr_send_input(s, be->upload, s->ptr[p->input], x + (size_t)k * (size_t)xs, xs, g->t[p->input].dtype);
        if (!st) st = be->sync(be);
        if (st) {
            st = hr_error_prefix("finding the first non-finite value: uploading the batch");
            break;
        }
        for (int j = 0; j < p->n_fwd && !st && !found; j++) {
            const hr_node *n = &g->n[j];
            st = hr_node_exec(be, g, n, s->ptr, &si, &s->args[j]);
            if (st) {
                st = hr_error_prefix("finding the first non-finite value: node %d (%s)", j, hr_node_op_name(n));
                break;
            }
            for (int o = 0; o < n->nout && !st && !found; o++) {
                int t = n->out[o];
                if (t < 0 || !s->ptr[t] || !is_float(g->t[t].dtype)) continue;
                st = scan_tensor(s, t, buf, r, &amax[t], &found);
                if (!found) continue;
                r->kind = HR_NAN_OP, r->node = j, r->micro = k;
                r->in_max = 0;
                for (int i = 0; i < n->nin; i++)
                    if (n->in[i] >= 0 && amax[n->in[i]] > r->in_max) r->in_max = amax[n->in[i]];
            }
        }
    }
    hr_free(buf);
    hr_free(amax);
    return st;
}
