/* plan.c — the planner: lifetimes over the whole step, views and in-place
 * reuse as alias groups, then offsets in one arena by greedy best fit. */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

static bool persistent(const hr_tensor *t) {
    return t->kind == HR_T_PARAM || t->kind == HR_T_BUFFER || t->kind == HR_T_OPTSTATE;
}

static int find(int *root, int i) {
    while (root[i] != i) i = root[i] = root[root[i]];
    return i;
}

/* Joins b's group into a's; the group's lifetime is the union. */
static void join(hr_graph *g, int *root, int a, int b) {
    a = find(root, a);
    b = find(root, b);
    if (a == b) return;
    root[b] = a;
    if (g->t[b].first < g->t[a].first) g->t[a].first = g->t[b].first;
    if (g->t[b].last > g->t[a].last) g->t[a].last = g->t[b].last;
}

static hr_category category_of(const hr_program *p, const hr_tensor *t) {
    switch (t->kind) {
    case HR_T_PARAM: case HR_T_BUFFER: return HR_CAT_PARAMS;
    case HR_T_GRAD: return HR_CAT_GRADS;
    case HR_T_OPTSTATE: return HR_CAT_OPTSTATE;
    case HR_T_INPUT: case HR_T_LABEL: return HR_CAT_INPUTS;
    case HR_T_WORKSPACE: return HR_CAT_WORKSPACE;
    case HR_T_ACT: return t->last >= p->n_fwd && t->first < p->n_fwd ? HR_CAT_SAVED : HR_CAT_TRANSIENT;
    default: return HR_CAT_TRANSIENT;
    }
}

static void lifetimes(hr_program *p) {
    hr_graph *g = &p->g;
    int T = g->nn;
    for (int i = 0; i < g->nt; i++) {
        g->t[i].first = INT32_MAX;
        g->t[i].last = -1;
    }
    for (int s = 0; s < T; s++) {
        hr_node *n = &g->n[s];
        int ids[2 * HR_NODE_MAX_IO + 1], k = 0;
        for (int i = 0; i < n->nin; i++) ids[k++] = n->in[i];
        for (int i = 0; i < n->nout; i++) ids[k++] = n->out[i];
        ids[k++] = n->ws;
        for (int i = 0; i < k; i++) {
            if (ids[i] < 0) continue;
            hr_tensor *t = &g->t[ids[i]];
            if (s < t->first) t->first = s;
            if (s > t->last) t->last = s;
        }
    }
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        if (t->last < 0) continue; /* unused in this program */
        /* persistent state, and gradients kept for the caller, live all step */
        if (persistent(t) || (t->kind == HR_T_GRAD && p->cfg.keep_grads)) t->first = 0, t->last = T - 1;
        /* the batch is written before the first node */
        if (t->kind == HR_T_INPUT || t->kind == HR_T_LABEL) t->first = i == p->eval_input ? p->n_step : 0;
    }
    /* results the host reads after the step (before any evaluation pass) */
    int S = p->n_step > 0 ? p->n_step : T;
    if (p->loss >= 0) g->t[p->loss].last = S - 1;
    if (p->output >= 0) g->t[p->output].last = S - 1; /* hr_read_output after a step */
    if (p->sqnorm >= 0) g->t[p->sqnorm].last = S - 1;
    if (p->eval_output >= 0) g->t[p->eval_output].last = T - 1;
}

/* Views (Reshape) always share; an op that may run in place takes its input's
 * bytes when the input's group dies at that node. */
static void aliases(hr_program *p, int *root) {
    hr_graph *g = &p->g;
    for (int i = 0; i < g->nt; i++) root[i] = i;
    for (int s = 0; s < g->nn; s++) {
        hr_node *n = &g->n[s];
        const hr_op_desc *d = hr_op_descs[n->op];
        int in = n->nin ? n->in[d->inplace_last ? n->nin - 1 : 0] : -1, out = n->nout ? n->out[0] : -1;
        if (in < 0 || out < 0 || n->accum[0]) continue;
        if (d->view) {
            join(g, root, in, out);
            continue;
        }
        if (!d->inplace) continue;
        int r = find(root, in);
        hr_tensor *ti = &g->t[r], *to = &g->t[out];
        bool dies_here = ti->last == s;
        bool same = ti->dtype == to->dtype && hr_shape_numel(&ti->shape) == hr_shape_numel(&to->shape);
        bool movable = !persistent(ti) && ti->kind != HR_T_INPUT && ti->kind != HR_T_LABEL && find(root, out) == out;
        for (int i = 0; i < n->nin; i++) dies_here &= n->in[i] == in || find(root, n->in[i]) != r;
        if (dies_here && same && movable) join(g, root, in, out);
    }
}

typedef struct {
    int id;
    int first, last;
    size_t bytes, offset;
} block;

static int by_size_desc(const void *a, const void *b) {
    const block *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->first - y->first;
}

/* Bytes times steps: the blocks that hold the most memory for longest first. */
static int by_area_desc(const void *a, const void *b) {
    const block *x = a, *y = b;
    double ax = (double)x->bytes * (x->last - x->first + 1), ay = (double)y->bytes * (y->last - y->first + 1);
    if (ax != ay) return ax < ay ? 1 : -1;
    return by_size_desc(a, b);
}

/* In schedule order, as an allocator would see them. */
static int by_first(const void *a, const void *b) {
    const block *x = a, *y = b;
    if (x->first != y->first) return x->first - y->first;
    return by_size_desc(a, b);
}

static int by_life_desc(const void *a, const void *b) {
    const block *x = a, *y = b;
    if (x->last - x->first != y->last - y->first) return (y->last - y->first) - (x->last - x->first);
    return by_size_desc(a, b);
}

static int by_offset(const void *a, const void *b) {
    const block *x = *(block *const *)a, *y = *(block *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static hr_status too_big(void) {
    return hr_error_set(HR_ERR_INVALID_ARG, "the plan needs more than 2^64 bytes; plan a smaller batch");
}

/* Greedy: blocks in the given order, each into the tightest gap among the
 * already placed blocks whose lifetimes overlap it. */
static hr_status place(block *b, int nb, size_t base, size_t *top, int (*order)(const void *, const void *)) {
    qsort(b, (size_t)nb, sizeof *b, order);
    block **live = hr_malloc(sizeof *live * (size_t)(nb ? nb : 1));
    if (!live) return HR_ERR_OOM;
    *top = base;
    for (int i = 0; i < nb; i++) {
        int k = 0;
        for (int j = 0; j < i; j++)
            if (b[j].first <= b[i].last && b[i].first <= b[j].last) live[k++] = &b[j];
        qsort(live, (size_t)k, sizeof *live, by_offset);
        size_t at = base, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (int j = 0; j < k; j++) {
            if (live[j]->offset >= at + b[i].bytes && live[j]->offset - at < best_gap) {
                best_gap = live[j]->offset - at;
                best = at;
            }
            size_t end = live[j]->offset + live[j]->bytes; /* placed blocks end below SIZE_MAX: checked below */
            if (end > at) at = end;
        }
        b[i].offset = best != SIZE_MAX ? best : at;
        size_t end;
        if (__builtin_add_overflow(b[i].offset, b[i].bytes, &end)) {
            hr_free(live);
            return too_big();
        }
        if (end > *top) *top = end;
    }
    hr_free(live);
    return HR_OK;
}

static void build_report(hr_program *p, hr_plan *pl, const block *blocks, int nb);

hr_status hr_plan_make(hr_program *p, hr_plan *pl) {
    hr_graph *g = &p->g;
    memset(pl, 0, sizeof *pl);
    pl->root = hr_malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    block *b = hr_malloc(sizeof *b * (size_t)(g->nt ? g->nt : 1));
    if (!pl->root || !b) {
        hr_free(b);
        hr_plan_free(pl);
        return hr_error_prefix("planning");
    }
    lifetimes(p);
    aliases(p, pl->root);
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        t->bytes = t->last < 0 ? 0 : hr_align_up((size_t)hr_shape_numel(&t->shape) * hr_dtype_size(t->dtype), HR_ALIGN);
        t->cat = category_of(p, t);
    }
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].last < 0) pl->root[i] = -1;
    /* Persistent blocks first, side by side at the bottom of the arena. */
    size_t top = 0;
    int nb = 0;
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        if (pl->root[i] != i) continue;
        if (persistent(t)) {
            t->offset = top;
            if (__builtin_add_overflow(top, t->bytes, &top)) {
                hr_free(b);
                hr_plan_free(pl);
                return too_big();
            }
        } else {
            size_t bytes = 0; /* the group's largest member */
            for (int j = 0; j < g->nt; j++)
                if (pl->root[j] >= 0 && find(pl->root, j) == i && g->t[j].bytes > bytes) bytes = g->t[j].bytes;
            b[nb++] = (block){i, t->first, t->last, bytes, 0};
        }
    }
    size_t persist = top;
    /* No one order of placement is best for every schedule: try a few,
     * keep the smallest arena (each try is O(n^2) in the blocks; n is small). */
    static int (*const orders[])(const void *, const void *) = {by_size_desc, by_area_desc, by_first, by_life_desc};
    block *trial = hr_malloc(sizeof *b * (size_t)(nb ? nb : 1));
    hr_status st = trial ? HR_OK : HR_ERR_OOM;
    size_t best = SIZE_MAX;
    for (size_t k = 0; st == HR_OK && k < sizeof orders / sizeof orders[0]; k++) {
        size_t t = 0;
        memcpy(trial, b, sizeof *b * (size_t)nb);
        st = place(trial, nb, persist, &t, orders[k]);
        if (st == HR_OK && t < best) {
            best = t;
            memcpy(b, trial, sizeof *b * (size_t)nb);
        }
    }
    hr_free(trial);
    top = best == SIZE_MAX ? persist : best;
    if (st != HR_OK) {
        hr_free(b);
        hr_plan_free(pl);
        return st == HR_ERR_OOM ? hr_error_prefix("planning") : st;
    }
    for (int i = 0; i < nb; i++) g->t[b[i].id].offset = b[i].offset;
    for (int i = 0; i < g->nt; i++)
        if (pl->root[i] >= 0) {
            pl->root[i] = find(pl->root, i);
            g->t[i].offset = g->t[pl->root[i]].offset;
        }
    pl->arena_bytes = top;
    build_report(p, pl, b, nb);
    hr_free(b);
    return HR_OK;
}

void hr_plan_free(hr_plan *pl) {
    hr_free(pl->root);
    pl->root = NULL;
}

static void build_report(hr_program *p, hr_plan *pl, const block *b, int nb) {
    hr_graph *g = &p->g;
    hr_report_t *r = &pl->report;
    memset(r, 0, sizeof *r);
    size_t persist = 0;
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        if (pl->root[i] != i) continue;
        if (persistent(t)) persist += t->bytes;
    }
    /* live bytes at each step, and the step where they peak */
    size_t best = 0;
    int peak = 0;
    for (int s = 0; s < g->nn; s++) {
        size_t live = persist;
        for (int i = 0; i < nb; i++)
            if (b[i].first <= s && s <= b[i].last) live += b[i].bytes;
        if (live > best) best = live, peak = s;
    }
    pl->lower_bound = best ? best : persist;
    pl->peak_step = peak;
    r->arena_bytes = pl->arena_bytes;
    r->lower_bound = pl->lower_bound;
    r->peak_step = peak;
    r->n_steps = g->nn;
    const hr_node *pn = g->nn ? &g->n[peak] : NULL;
    if (pn && pn->layer >= 0)
        snprintf(pl->peak_op, sizeof pl->peak_op, "%s (layer %s)", hr_op_name(pn->op), g->l[pn->layer].name);
    else
        snprintf(pl->peak_op, sizeof pl->peak_op, "%s", pn ? hr_op_name(pn->op) : "none");
    r->peak_op = pl->peak_op;
    /* categories: a shared group counts once, under its root's category (a
     * saved member makes the group saved) */
    for (int i = 0; i < g->nt; i++) {
        int rt = pl->root[i];
        if (rt < 0) continue;
        r->n_tensors++;
        if (g->t[i].cat == HR_CAT_SAVED) g->t[rt].cat = HR_CAT_SAVED;
    }
    for (int i = 0; i < g->nt; i++) {
        if (pl->root[i] != i) continue;
        hr_tensor *t = &g->t[i];
        size_t bytes = t->bytes;
        for (int k = 0; k < nb; k++)
            if (b[k].id == i) bytes = b[k].bytes;
        r->category_bytes[t->cat] += bytes;
        if (t->first <= peak && peak <= t->last) r->category_at_peak[t->cat] += bytes;
    }
    /* the largest groups alive at the peak */
    for (int slot = 0; slot < 8; slot++) {
        int pick = -1;
        size_t pb = 0;
        for (int i = 0; i < g->nt; i++) {
            if (pl->root[i] != i) continue;
            hr_tensor *t = &g->t[i];
            if (!(t->first <= peak && peak <= t->last) || t->bytes <= pb) continue;
            bool taken = false;
            for (int k = 0; k < slot; k++) taken |= strcmp(pl->top_names[k], t->name) == 0;
            if (!taken) pick = i, pb = t->bytes;
        }
        if (pick < 0) break;
        hr_tensor *t = &g->t[pick];
        snprintf(pl->top_names[slot], sizeof pl->top_names[slot], "%s", t->name);
        if (t->layer >= 0)
            snprintf(pl->top_layers[slot], sizeof pl->top_layers[slot], "%s (%s)", g->l[t->layer].name, g->l[t->layer].type);
        else
            snprintf(pl->top_layers[slot], sizeof pl->top_layers[slot], "-");
        r->top[slot] = (hr_top_tensor){pl->top_names[slot], pl->top_layers[slot], pb};
        r->n_top = slot + 1;
    }
}

bool hr_plan_verify(const hr_program *p, const hr_plan *pl, char *why, size_t n) {
    const hr_graph *g = &p->g;
    for (int i = 0; i < g->nt; i++) {
        const hr_tensor *a = &g->t[i];
        if (pl->root[i] < 0) continue;
        size_t asz = (size_t)hr_shape_numel(&a->shape) * hr_dtype_size(a->dtype);
        if (a->offset + asz > pl->arena_bytes) {
            snprintf(why, n, "%s ends at %zu, past the arena (%zu)", a->name, a->offset + asz, pl->arena_bytes);
            return false;
        }
        if (a->offset % HR_ALIGN) {
            snprintf(why, n, "%s is not aligned (%zu)", a->name, a->offset);
            return false;
        }
        for (int j = i + 1; j < g->nt; j++) {
            const hr_tensor *c = &g->t[j];
            if (pl->root[j] < 0 || pl->root[j] == pl->root[i]) continue;
            size_t csz = (size_t)hr_shape_numel(&c->shape) * hr_dtype_size(c->dtype);
            /* lifetimes of the groups, since group members share their bytes by design */
            const hr_tensor *ra = &g->t[pl->root[i]], *rc = &g->t[pl->root[j]];
            bool time = ra->first <= rc->last && rc->first <= ra->last;
            bool space = a->offset < c->offset + csz && c->offset < a->offset + asz;
            if (time && space) {
                snprintf(why, n, "%s [%zu, %zu) steps %d-%d overlaps %s [%zu, %zu) steps %d-%d", a->name, a->offset,
                         a->offset + asz, ra->first, ra->last, c->name, c->offset, c->offset + csz, rc->first, rc->last);
                return false;
            }
        }
    }
    return true;
}
