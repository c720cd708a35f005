/* fit.c — choosing what to recompute so that a step fits a byte budget with
 * the least predicted extra time.
 *
 * The search works on exact plans, not on estimates of bytes: a move (one
 * layer and the layers it would then have to recompute with it) is tried by
 * rewriting a copy of the step program and planning it. Greedy by bytes
 * saved per second of recomputation, lazily (a move's last ratio bounds what
 * it can give now, so most moves are not planned again each round), then a
 * pruning pass drops the layers not needed to fit, most expensive first. */
#include "exec/session.h"
#include "backend/nvml.h"
#include "plan/cost.h"
#include "plan/recompute.h"

#include <math.h>
#include <string.h>

/* A stand-in for the cost model: bytes moved at 10 GB/s plus a launch. */
static double rough_cost(void *ctx, const hr_graph *g, const hr_node *n) {
    (void)ctx;
    double bytes = 0;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0) bytes += (double)hr_shape_numel(&g->t[n->in[i]].shape) * hr_dtype_size(g->t[n->in[i]].dtype);
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] >= 0) bytes += (double)hr_shape_numel(&g->t[n->out[i]].shape) * hr_dtype_size(g->t[n->out[i]].dtype);
    return bytes / 1e10 + 5e-6;
}

typedef struct {
    const hr_program *base;
    hr_backend *be;
    bool pages; /* totals in the allocator's 2 MiB pages (a GPU's) */
    size_t overhead;
    hr_node_cost_fn cost;
    void *cost_ctx;
} search;

/* The device total of an arena on be: 2 MiB pages on a GPU, bytes on the CPU. */
static size_t total_of(const search *s, size_t arena) {
    return s->pages ? hr_device_total(arena, s->overhead) : arena + s->overhead;
}

/* Plans base with the layers of sel recomputed: its arena and the predicted
 * seconds of its clones (one pass). */
static hr_status try_sel(const search *s, const bool *sel, size_t *arena, double *extra) {
    hr_program p;
    hr_status st = hr_program_copy(&p, s->base);
    if (st) return st;
    if ((st = hr_recompute_apply(&p, sel)) == HR_OK) {
        hr_plan pl;
        if ((st = hr_plan_make(&p, &pl)) == HR_OK) {
            *arena = pl.arena_bytes;
            hr_plan_free(&pl);
        }
        double x = 0;
        for (int k = p.n_fwd; k < p.n_bwd_end; k++)
            if (p.g.n[k].a.recompute) x += s->cost(s->cost_ctx, &p.g, &p.g.n[k]);
        *extra = x;
    }
    hr_program_free(&p);
    return st;
}

/* Layer l's move: l, and the layers that make the inputs it reads when no
 * backward node keeps those (recomputing l from them would keep them
 * instead), recursively. */
static void move_of(const hr_program *p, const bool *ok, const bool *saved, const int *producer, int l, bool *mv) {
    const hr_graph *g = &p->g;
    mv[l] = true;
    for (bool grew = true; grew;) {
        grew = false;
        for (int k = 0; k < p->n_fwd; k++) {
            const hr_node *n = &g->n[k];
            if (n->layer < 0 || !mv[n->layer]) continue;
            for (int i = 0; i < n->nin; i++) {
                int u = n->in[i];
                if (u < 0 || saved[u] || producer[u] < 0) continue;
                int q = g->n[producer[u]].layer;
                if (q >= 0 && ok[q] && !mv[q]) mv[q] = grew = true;
            }
        }
    }
}

hr_status hr_recompute_choose(const hr_program *base, hr_backend *be, bool pages, size_t budget, size_t overhead,
                              bool min, hr_node_cost_fn cost, void *cost_ctx, hr_recompute_choice *out) {
    const hr_graph *g = &base->g;
    int L = g->nl, nt = g->nt;
    memset(out, 0, sizeof *out);
    search s = {base, be, pages, overhead, cost, cost_ctx};
    bool *ok = hr_calloc((size_t)L + 1, 1), *cur = hr_calloc((size_t)L + 1, 1), *trial = hr_calloc((size_t)L + 1, 1);
    bool *mv = hr_calloc((size_t)L + 1, 1), *saved = hr_calloc((size_t)nt + 1, 1);
    int *producer = hr_malloc(sizeof(int) * ((size_t)nt + 1));
    double *ratio = hr_malloc(sizeof(double) * ((size_t)L + 1)), *lcost = hr_calloc((size_t)L + 1, sizeof(double));
    char *names = hr_malloc(hr_recompute_list_len(base));
    hr_status st = HR_OK;
    if (!ok || !cur || !trial || !mv || !saved || !producer || !ratio || !lcost || !names) {
        st = hr_error_set(HR_ERR_OOM, "choosing what to recompute: out of host memory");
        goto done;
    }
    for (int i = 0; i < nt; i++) producer[i] = -1;
    for (int k = 0; k < base->n_fwd; k++)
        for (int i = 0; i < g->n[k].nout; i++)
            if (g->n[k].out[i] >= 0) producer[g->n[k].out[i]] = k;
    for (int k = base->n_fwd; k < base->n_bwd_end; k++)
        for (int i = 0; i < g->n[k].nin; i++)
            if (g->n[k].in[i] >= 0) saved[g->n[k].in[i]] = true;
    for (int l = 0; l < L; l++) ok[l] = hr_recompute_layer_ok(base, l);
    for (int k = 0; k < base->n_fwd; k++)
        if (g->n[k].layer >= 0) lcost[g->n[k].layer] += cost(cost_ctx, g, &g->n[k]);

    size_t arena;
    double extra = 0, x;
    if ((st = try_sel(&s, cur, &arena, &x)) != HR_OK) goto done;
    out->arena_none = arena;
    /* Lazy greedy: ratio[l] is bytes per second the move gave when last
     * tried (+inf: not yet tried; 0: gives nothing). */
    for (int l = 0; l < L; l++) ratio[l] = ok[l] ? INFINITY : 0;
    while (min || total_of(&s, arena) > budget) {
        int c = -1;
        for (int l = 0; l < L; l++)
            if (ratio[l] > 0 && !cur[l] && (c < 0 || ratio[l] > ratio[c])) c = l;
        if (c < 0) break; /* nothing left that helps */
        memset(mv, 0, (size_t)L);
        move_of(base, ok, saved, producer, c, mv);
        for (int l = 0; l < L; l++) trial[l] = cur[l] || mv[l];
        size_t a;
        if ((st = try_sel(&s, trial, &a, &x)) != HR_OK) goto done;
        double gain = arena > a ? (double)(arena - a) : 0, dt = x - extra;
        double r = gain > 0 ? gain / (dt > 1e-9 ? dt : 1e-9) : 0;
        double next = 0;
        for (int l = 0; l < L; l++)
            if (l != c && ratio[l] > next && !cur[l]) next = ratio[l];
        ratio[c] = r;
        if (r > 0 && r >= next) { /* still the best: take it */
            memcpy(cur, trial, (size_t)L);
            arena = a;
            extra = x;
        }
    }
    memset(mv, 0, (size_t)L);
    /* Prune: each chosen layer, most expensive first, goes when the plan
     * still fits without it (min: when the arena does not grow). */
    for (;;) {
        int l = -1;
        for (int j = 0; j < L; j++)
            if (cur[j] && !mv[j] && (l < 0 || lcost[j] > lcost[l])) l = j;
        if (l < 0) break;
        mv[l] = true; /* mv now marks the layers already weighed */
        memcpy(trial, cur, (size_t)L);
        trial[l] = false;
        size_t a;
        if ((st = try_sel(&s, trial, &a, &x)) != HR_OK) goto done;
        if (min ? a <= arena : total_of(&s, a) <= budget) {
            cur[l] = false;
            arena = a;
            extra = x;
        }
    }
    out->arena = arena;
    out->total = total_of(&s, arena);
    out->fits = out->total <= budget;
    out->extra_s = extra;
    hr_recompute_list(base, cur, names, hr_recompute_list_len(base));
    out->layers = names;
    names = NULL;
done:
    hr_free(ok);
    hr_free(cur);
    hr_free(trial);
    hr_free(mv);
    hr_free(lcost);
    hr_free(saved);
    hr_free(producer);
    hr_free(ratio);
    hr_free(names);
    return st;
}

bool hr_recompute_searched(const char *r) { return r && (!strcmp(r, "auto") || !strcmp(r, "min")); }

static double model_cost(void *ctx, const hr_graph *g, const hr_node *n);

hr_status hr_recompute_choose_for(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, bool pages, size_t budget,
                                  size_t overhead, const hr_cost_model *cm, hr_recompute_choice *out) {
    memset(out, 0, sizeof *out);
    if (cfg->mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "--recompute is for training: inference keeps no activations");
    hr_config_t c = *cfg;
    c.recompute = NULL;
    hr_program base;
    hr_status st = hr_program_build(m, &c, hr_exec_workspace, be, &base);
    if (st) return st;
    st = hr_recompute_choose(&base, be, pages, budget, overhead, cfg->recompute && !strcmp(cfg->recompute, "min"),
                             cm ? model_cost : rough_cost, (void *)cm, out);
    hr_program_free(&base);
    return st;
}

hr_status hr_recompute_fit(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, size_t budget, size_t overhead,
                           hr_recompute_choice *out) {
    bool pages = be->arena_kind == HR_MEM_DEVICE || cfg->device == HR_DEVICE_CUDA;
    return hr_recompute_choose_for(m, cfg, be, pages, budget, overhead, NULL, out);
}

hr_status hr_recompute_resolve(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, char **layers) {
    *layers = NULL;
    if (!hr_recompute_searched(cfg->recompute)) return HR_OK;
    size_t overhead = be->overhead ? be->overhead(be) : 0, budget = cfg->device_budget;
    if (!budget) budget = hr_device_room(be, overhead); /* what is free, as hr_session_alloc counts it */
    hr_recompute_choice ch;
    hr_cost_model *cm = hr_cost_model_here(be->arena_kind == HR_MEM_DEVICE);
    if (!cm) return hr_last_status();
    hr_status st = hr_recompute_choose_for(m, cfg, be, be->arena_kind == HR_MEM_DEVICE || cfg->device == HR_DEVICE_CUDA,
                                           budget, overhead, cm, &ch);
    hr_cost_model_free(cm);
    if (!st) *layers = ch.layers;
    return st;
}

hr_status hr_recompute_report(hr_session_t *s, const hr_model_t *m) {
    hr_report_t *r = &s->plan.report;
    const hr_program *p = &s->prog;
    r->recompute = p->recompute;
    r->recompute_nodes = hr_recompute_count(p);
    r->chunks = p->chunks;
    r->chunk_samples = p->chunk_samples;
    r->chunk_layers = p->chunk_layers;
    if (!r->recompute_nodes && !r->chunks) return HR_OK;
    int K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    hr_cost_model *cm = hr_cost_model_here(s->be->arena_kind == HR_MEM_DEVICE);
    if (!cm) return hr_last_status();
    double x = 0;
    for (int k = p->n_fwd; k < p->n_bwd_end; k++)
        if (p->g.n[k].a.recompute) x += hr_cost_node(cm, &p->g, &p->g.n[k]);
    hr_cost_model_free(cm);
    r->recompute_extra_ms = 1e3 * x * K;
    hr_config_t c = p->cfg;
    c.recompute = NULL;
    c.chunks = 0;
    hr_program base;
    hr_status st = hr_program_build(m, &c, hr_exec_workspace, s->be, &base);
    if (st) return st;
    hr_plan pl;
    if ((st = hr_plan_make(&base, &pl)) == HR_OK) {
        r->arena_no_recompute = pl.arena_bytes;
        hr_plan_free(&pl);
    }
    hr_program_free(&base);
    return st;
}

hr_cost_model *hr_cost_model_here(bool cuda) {
    if (!cuda) return hr_cost_model_new(HR_DEVICE_CPU, NULL, NULL);
    char why[256];
    hr_nvml *h = hr_nvml_open(why, sizeof why);
    hr_nvml_device d = {0};
    bool named = h && hr_nvml_count(h) > 0 && hr_nvml_device_info(h, 0, &d) == HR_OK;
    hr_cost_model *cm = hr_cost_model_new(HR_DEVICE_CUDA, named ? d.name : NULL, h ? hr_nvml_driver(h) : NULL);
    hr_nvml_close(h);
    return cm;
}

/* ---- the search of `headroom fit` ---------------------------------------------- */
static double model_cost(void *ctx, const hr_graph *g, const hr_node *n) { return hr_cost_node(ctx, g, n); }


void hr_fit_result_free(hr_fit_result *r) {
    for (int i = 0; i < r->n; i++) hr_free(r->c[i].recompute);
    hr_free(r->c);
    memset(r, 0, sizeof *r);
}

/* Plans cfg (its recompute list included) and predicts its step. */
static hr_status weigh(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, bool pages, size_t overhead,
                       const hr_cost_model *cm, hr_fit_candidate *c) {
    hr_program p;
    hr_status st = hr_program_build(m, cfg, hr_exec_workspace, be, &p);
    if (st) return st;
    hr_plan pl;
    if ((st = hr_plan_make(&p, &pl)) == HR_OK) {
        c->arena = pl.arena_bytes;
        c->total = pages ? hr_device_total(pl.arena_bytes, overhead) : pl.arena_bytes + overhead;
        hr_plan_free(&pl);
        c->step_s = hr_cost_step(cm, &p);
        hr_cost_count(cm, &p, &c->measured, &c->estimated);
    }
    hr_program_free(&p);
    return st;
}

static hr_status add(hr_fit_result *r, const hr_fit_candidate *c) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        hr_fit_candidate *q = hr_realloc(r->c, sizeof *q * (size_t)cap);
        if (!q) return hr_error_set(HR_ERR_OOM, "fit: out of host memory");
        r->c = q;
        r->cap = cap;
    }
    r->c[r->n++] = *c;
    return HR_OK;
}

hr_status hr_fit_search(const hr_model_t *m, const hr_config_t *cfg, unsigned precisions, bool recompute, hr_backend *be,
                        bool pages, size_t budget, size_t overhead, hr_cost_model *cm, hr_fit_result *out) {
    memset(out, 0, sizeof *out);
    out->best = -1;
    if (cfg->mode != HR_MODE_TRAIN) return hr_error_set(HR_ERR_INVALID_ARG, "fit: fitting is for training");
    if (!precisions) precisions = 1u << HR_PREC_FP32;
    hr_status st = HR_OK;
    int64_t N = cfg->batch;
    for (int prec = HR_PREC_FP32; prec <= HR_PREC_FP16; prec++) {
        if (!(precisions >> prec & 1)) continue;
        /* K up the divisors of N: micro-batches from the whole batch down.
         * Below the first K that fits keeping everything, recomputation may
         * make a larger micro-batch fit; past it, smaller ones only slow the
         * step, so one more is weighed and the search stops. */
        int past = 0;
        for (int64_t K = 1; K <= N && past < 2; K++) {
            if (N % K || K > (1 << 30)) continue;
            hr_config_t c = *cfg;
            c.precision = (hr_precision)prec;
            c.accumulate = (int)K;
            c.recompute = NULL;
            hr_fit_candidate cand = {.precision = c.precision, .accumulate = (int)K, .micro = N / K};
            if ((st = weigh(m, &c, be, pages, overhead, cm, &cand)) != HR_OK) {
                if (st == HR_ERR_OOM) goto fail;
                continue; /* a micro-batch too large to plan: the next */
            }
            cand.fits = cand.total <= budget;
            if (!cand.fits && recompute) {
                hr_recompute_choice ch;
                if ((st = hr_recompute_choose_for(m, &c, be, pages, budget, overhead, cm, &ch)) != HR_OK) goto fail;
                if (ch.fits && *ch.layers) {
                    c.recompute = ch.layers;
                    hr_fit_candidate rc = cand;
                    st = weigh(m, &c, be, pages, overhead, cm, &rc);
                    rc.fits = rc.total <= budget;
                    rc.recompute = ch.layers;
                    if (!st) st = add(out, &rc);
                    if (st) {
                        hr_free(ch.layers);
                        goto fail;
                    }
                } else {
                    hr_free(ch.layers);
                }
            }
            if ((st = add(out, &cand)) != HR_OK) goto fail;
            if (cand.fits) past++;
        }
    }
    for (int i = 0; i < out->n; i++)
        if (out->c[i].fits && (out->best < 0 || out->c[i].step_s < out->c[out->best].step_s)) out->best = i;
    return HR_OK;
fail:
    hr_fit_result_free(out);
    return st;
}
