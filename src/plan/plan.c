/* plan.c — the planner: lifetimes over the whole step, views and in-place
 * reuse as alias groups, then offsets in one arena by greedy best fit;
 * O(n log n) in the tensors and nodes (see OFFLINE_PAIRS). */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

static bool persistent(const hr_tensor *t) {
    return t->kind == HR_T_PARAM || t->kind == HR_T_BUFFER || t->kind == HR_T_OPTSTATE || t->held;
}

/* Groups of tensors that share storage: a union-find whose links also hold
 * where a member starts in its parent's bytes (sub[i], from root[i]); find
 * leaves sub[i] relative to the group's root, which starts lowest. */
static int find(int *root, size_t *sub, int i) {
    int r = i;
    size_t o = 0;
    while (root[r] != r) o += sub[r], r = root[r];
    for (int x = i; root[x] != x;) { /* path compression, offsets carried along */
        int nx = root[x];
        size_t ox = sub[x];
        root[x] = r;
        sub[x] = o;
        o -= ox;
        x = nx;
    }
    return r;
}

/* Joins b's group and a's, b's bytes starting d bytes into a's; the group's
 * root is the one starting lowest (on a tie the larger, then a's), its
 * lifetime the union. */
static void join(hr_graph *g, int *root, size_t *sub, int a, int b, size_t d) {
    int ra = find(root, sub, a), rb = find(root, sub, b);
    if (ra == rb) return;
    size_t at = sub[a] + d, ob = sub[b]; /* a root's sub is 0 */
    size_t za = (size_t)hr_shape_numel(&g->t[ra].shape) * hr_dtype_size(g->t[ra].dtype);
    size_t zb = (size_t)hr_shape_numel(&g->t[rb].shape) * hr_dtype_size(g->t[rb].dtype);
    if (at < ob || (at == ob && zb > za)) { /* b's root starts first (or as early, and is larger): a's goes under it */
        int t = ra;
        ra = rb, rb = t;
        at = ob - at;
    } else {
        at -= ob;
    }
    root[rb] = ra;
    sub[rb] = at;
    if (g->t[rb].first < g->t[ra].first) g->t[ra].first = g->t[rb].first;
    if (g->t[rb].last > g->t[ra].last) g->t[ra].last = g->t[rb].last;
}

static hr_category category_of(const hr_program *p, const hr_tensor *t) {
    switch (t->kind) {
    case HR_T_PARAM: case HR_T_BUFFER: return HR_CAT_PARAMS;
    case HR_T_GRAD: return HR_CAT_GRADS;
    case HR_T_OPTSTATE: return HR_CAT_OPTSTATE;
    case HR_T_INPUT: case HR_T_LABEL: return HR_CAT_INPUTS;
    case HR_T_WORKSPACE: return HR_CAT_WORKSPACE;
    case HR_T_WCOPY: return HR_CAT_WCOPY;
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
        if (persistent(t) || (t->kind == HR_T_GRAD && (p->cfg.keep_grads || p->cfg.accumulate > 1))) t->first = 0, t->last = T - 1;
        /* the batch is written before the first node */
        if (t->kind == HR_T_INPUT || t->kind == HR_T_LABEL) t->first = i == p->eval_input ? p->n_step : 0;
    }
    /* results the host reads after the step (before any evaluation pass) */
    int S = p->n_step > 0 ? p->n_step : T;
    if (p->loss >= 0) g->t[p->loss].last = S - 1;
    /* hr_read_output after a step; a training step keeps it on request only */
    if (p->output >= 0 && (p->cfg.mode != HR_MODE_TRAIN || p->cfg.keep_output)) g->t[p->output].last = S - 1;
    if (p->sqnorm >= 0) g->t[p->sqnorm].last = S - 1;
    if (p->eval_output >= 0) g->t[p->eval_output].last = T - 1;
    /* no node names it: the host writes it, the update reads it, and its
     * NaN-stop flag outlives the step */
    if (p->step_vars >= 0) g->t[p->step_vars].first = 0, g->t[p->step_vars].last = T - 1;
    if (p->staged >= 0) g->t[p->staged].first = 0, g->t[p->staged].last = T - 1; /* written while a step runs */
}

/* Slices that a rewrite made (a batch chunk's input and output) sit in their
 * tensor's bytes; views (Reshape) always share; an op that may run in place
 * takes its input's bytes when the input's group dies at that node (the
 * whole group: not a slice of it). */
static void aliases(hr_program *p, int *root, size_t *sub) {
    hr_graph *g = &p->g;
    for (int i = 0; i < g->nt; i++) root[i] = i, sub[i] = 0;
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].alias >= 0) join(g, root, sub, g->t[i].alias, i, g->t[i].alias_offset);
    for (int s = 0; s < g->nn; s++) {
        hr_node *n = &g->n[s];
        const hr_op_desc *d = hr_op_descs[n->op];
        int in = n->nin ? n->in[d->inplace_last ? n->nin - 1 : 0] : -1, out = n->nout ? n->out[0] : -1;
        if (in < 0 || out < 0 || n->accum[0]) continue;
        if (d->view) {
            join(g, root, sub, in, out, 0);
            continue;
        }
        if (!d->inplace) continue;
        int r = find(root, sub, in);
        hr_tensor *ti = &g->t[r], *to = &g->t[out];
        bool dies_here = ti->last == s;
        bool same = ti->dtype == to->dtype && hr_shape_numel(&ti->shape) == hr_shape_numel(&to->shape) && !sub[in];
        /* out must not be live before this node: a gradient kept all step
         * (accumulation's micro-batches add into it) keeps its own bytes */
        bool movable = !persistent(ti) && ti->kind != HR_T_INPUT && ti->kind != HR_T_LABEL && find(root, sub, out) == out &&
                       to->first >= s;
        for (int i = 0; i < n->nin; i++) dies_here &= n->in[i] == in || find(root, sub, n->in[i]) != r;
        if (dies_here && same && movable) join(g, root, sub, in, out, 0);
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

static hr_status too_big(void) {
    return hr_error_set(HR_ERR_INVALID_ARG, "the plan needs more than 2^64 bytes; plan a smaller batch");
}

/* ---- best fit in any order ------------------------------------------------------ */
/* The placed blocks, listed by first step under a tree over the steps that
 * keeps the latest last step below each node: the ones alive at some step of
 * [f, l] come out in O(log T) each, and the others are never looked at. */
typedef struct {
    int leaves;       /* a power of two >= the steps */
    int *latest;      /* per node (2 * leaves): the latest last step of a block below it, -1 none */
    int *head, *next; /* per step: the placed blocks that start there, a list through next */
} step_tree;

typedef struct {
    int v, lo, n; /* node v covers steps [lo, lo + n) */
} step_node;

static void step_tree_add(step_tree *s, const block *b, int i) {
    s->next[i] = s->head[b[i].first];
    s->head[b[i].first] = i;
    for (int v = s->leaves + b[i].first; v > 0 && s->latest[v] < b[i].last; v >>= 1) s->latest[v] = b[i].last;
}

/* The bytes [lo, hi) of a placed block. */
typedef struct {
    size_t lo, hi;
} span;

/* Fills out with the bytes of the placed blocks whose lifetimes meet [f, l];
 * returns how many. */
static int step_tree_find(const step_tree *s, const block *b, int f, int l, span *out) {
    step_node st[2 * 32 + 2]; /* one pending sibling a level */
    int k = 0, sp = 0;
    st[sp++] = (step_node){1, 0, s->leaves};
    while (sp) {
        step_node x = st[--sp];
        if (x.lo > l || s->latest[x.v] < f) continue;
        if (x.n == 1) {
            for (int j = s->head[x.lo]; j >= 0; j = s->next[j])
                if (b[j].last >= f) out[k++] = (span){b[j].offset, b[j].offset + b[j].bytes};
            continue;
        }
        st[sp++] = (step_node){2 * x.v + 1, x.lo + x.n / 2, x.n / 2};
        st[sp++] = (step_node){2 * x.v, x.lo, x.n / 2};
    }
    return k;
}

static int by_lo(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Greedy: blocks in the given order, each into the tightest gap among the
 * already placed blocks whose lifetimes overlap it (the lowest of equal
 * gaps), or above them all. Those blocks differ with every lifetime and may
 * overlap each other in space, so each placement sorts them all: O((n + P)
 * log n) for P pairs of blocks alive together. */
static hr_status place_any(block *b, int nb, int steps, size_t base, size_t *top,
                           int (*order)(const void *, const void *)) {
    qsort(b, (size_t)nb, sizeof *b, order);
    step_tree s = {1, NULL, NULL, NULL};
    while (s.leaves < steps) s.leaves *= 2;
    s.latest = hr_malloc(sizeof(int) * 2 * (size_t)s.leaves);
    s.head = hr_malloc(sizeof(int) * (size_t)steps);
    s.next = hr_malloc(sizeof(int) * (size_t)nb);
    span *live = hr_malloc(sizeof *live * (size_t)nb);
    hr_status st = s.latest && s.head && s.next && live ? HR_OK : HR_ERR_OOM;
    if (st == HR_OK) {
        memset(s.latest, 0xff, sizeof(int) * 2 * (size_t)s.leaves); /* -1 */
        memset(s.head, 0xff, sizeof(int) * (size_t)steps);
    }
    *top = base;
    for (int i = 0; st == HR_OK && i < nb; i++) {
        int k = step_tree_find(&s, b, b[i].first, b[i].last, live);
        qsort(live, (size_t)k, sizeof *live, by_lo);
        size_t at = base, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (int j = 0; j < k; j++) {
            if (live[j].lo >= at + b[i].bytes && live[j].lo - at < best_gap) {
                best_gap = live[j].lo - at;
                best = at;
            }
            if (live[j].hi > at) at = live[j].hi; /* placed blocks end below SIZE_MAX: checked below */
        }
        b[i].offset = best != SIZE_MAX ? best : at;
        size_t end;
        if (__builtin_add_overflow(b[i].offset, b[i].bytes, &end)) {
            st = too_big();
            break;
        }
        if (end > *top) *top = end;
        step_tree_add(&s, b, i);
    }
    hr_free(s.latest);
    hr_free(s.head);
    hr_free(s.next);
    hr_free(live);
    return st;
}

/* ---- best fit in schedule order: a sweep ---------------------------------------- */
/* In schedule order, the placed blocks that overlap the next one are those
 * still alive at its first step, and no two of them overlap in space: a list
 * by offset holds them, and a treap holds the gaps below them by (size,
 * offset), so the tightest gap that fits (the lowest of equal ones) is one
 * search. The same offsets as place_any(by_first) (every block has bytes,
 * so an empty gap fits none), in O(n log n). */
typedef struct {
    size_t size, at; /* the free bytes [at, at + size) just below the block; size 0: not in the treap */
    int l, r;        /* treap children, -1 none */
    uint32_t pri;
} gap;

static bool gap_below(const gap *g, int a, int c) {
    return g[a].size != g[c].size ? g[a].size < g[c].size : g[a].at < g[c].at;
}

/* Splits treap t into the gaps below gap k and the others. */
static void gap_split(gap *g, int t, int k, int *lo, int *hi) {
    if (t < 0) {
        *lo = *hi = -1;
    } else if (gap_below(g, t, k)) {
        *lo = t;
        gap_split(g, g[t].r, k, &g[t].r, hi);
    } else {
        *hi = t;
        gap_split(g, g[t].l, k, lo, &g[t].l);
    }
}

/* Joins treaps a and c, every gap of a below every gap of c. */
static int gap_merge(gap *g, int a, int c) {
    if (a < 0 || c < 0) return a < 0 ? c : a;
    if (g[a].pri > g[c].pri) {
        g[a].r = gap_merge(g, g[a].r, c);
        return a;
    }
    g[c].l = gap_merge(g, a, g[c].l);
    return c;
}

static int gap_insert(gap *g, int t, int k) {
    if (t < 0 || g[k].pri > g[t].pri) {
        gap_split(g, t, k, &g[k].l, &g[k].r);
        return k;
    }
    if (gap_below(g, k, t))
        g[t].l = gap_insert(g, g[t].l, k);
    else
        g[t].r = gap_insert(g, g[t].r, k);
    return t;
}

static int gap_erase(gap *g, int t, int k) {
    if (t == k) return gap_merge(g, g[t].l, g[t].r);
    if (gap_below(g, k, t))
        g[t].l = gap_erase(g, g[t].l, k);
    else
        g[t].r = gap_erase(g, g[t].r, k);
    return t;
}

/* Block k's gap becomes [at, its offset); returns the treap's root. */
static int gap_set(gap *g, int root, const block *b, int k, size_t at) {
    if (g[k].size) root = gap_erase(g, root, k);
    g[k].at = at;
    g[k].size = b[k].offset - at;
    return g[k].size ? gap_insert(g, root, k) : root;
}

/* The block below the tightest gap of at least `bytes`, -1 none. */
static int gap_fit(const gap *g, int t, size_t bytes) {
    int fit = -1;
    while (t >= 0)
        if (g[t].size >= bytes)
            fit = t, t = g[t].l;
        else
            t = g[t].r;
    return fit;
}

static uint32_t mix(uint32_t x) {
    x = (x ^ (x >> 16)) * 0x7feb352dU;
    x = (x ^ (x >> 15)) * 0x846ca68bU;
    return x ^ (x >> 16);
}

static hr_status place_sweep(block *b, int nb, int steps, size_t base, size_t *top) {
    qsort(b, (size_t)nb, sizeof *b, by_first);
    gap *g = hr_malloc(sizeof *g * (size_t)nb);
    int *prev = hr_malloc(sizeof(int) * (size_t)nb), *next = hr_malloc(sizeof(int) * (size_t)nb);
    int *ends = hr_malloc(sizeof(int) * (size_t)nb), *count = hr_calloc((size_t)steps + 1, sizeof(int));
    hr_status st = g && prev && next && ends && count ? HR_OK : HR_ERR_OOM;
    *top = base;
    if (st == HR_OK) { /* the blocks by last step: a counting sort */
        for (int i = 0; i < nb; i++) count[b[i].last + 1]++;
        for (int s = 0; s < steps; s++) count[s + 1] += count[s];
        for (int i = 0; i < nb; i++) ends[count[b[i].last]++] = i;
    }
    int root = -1, tail = -1, e = 0;
    for (int i = 0; st == HR_OK && i < nb; i++) {
        /* the blocks dead before this one starts leave (all placed: their
         * first step is before its first) */
        for (; e < nb && b[ends[e]].last < b[i].first && ends[e] < i; e++) {
            int q = ends[e], p = prev[q], n = next[q];
            if (g[q].size) root = gap_erase(g, root, q);
            if (p >= 0) next[p] = n;
            if (n >= 0) {
                prev[n] = p;
                root = gap_set(g, root, b, n, p >= 0 ? b[p].offset + b[p].bytes : base);
            } else {
                tail = p;
            }
        }
        int q = gap_fit(g, root, b[i].bytes);
        g[i] = (gap){0, 0, -1, -1, mix((uint32_t)i)};
        if (q >= 0) { /* at the bottom of the gap below q */
            b[i].offset = g[q].at;
            prev[i] = prev[q], next[i] = q;
            if (prev[q] >= 0) next[prev[q]] = i;
            prev[q] = i;
            root = gap_set(g, root, b, q, b[i].offset + b[i].bytes);
        } else { /* above them all */
            b[i].offset = tail >= 0 ? b[tail].offset + b[tail].bytes : base;
            prev[i] = tail, next[i] = -1;
            if (tail >= 0) next[tail] = i;
            tail = i;
        }
        size_t end;
        if (__builtin_add_overflow(b[i].offset, b[i].bytes, &end)) st = too_big();
        else if (end > *top) *top = end;
    }
    hr_free(g);
    hr_free(prev);
    hr_free(next);
    hr_free(ends);
    hr_free(count);
    return st;
}

/* Pairs of blocks alive at a common step: all pairs less those where one
 * ends before the other starts (count: scratch for steps + 1 ints). */
static size_t overlapping_pairs(const block *b, int nb, int steps, int *count) {
    memset(count, 0, sizeof(int) * ((size_t)steps + 1));
    for (int i = 0; i < nb; i++) count[b[i].first]++;
    for (int s = steps - 1; s >= 0; s--) count[s] += count[s + 1]; /* count[s]: blocks starting at s or later */
    size_t apart = 0;
    for (int i = 0; i < nb; i++) apart += (size_t)count[b[i].last + 1];
    return (size_t)nb * (size_t)(nb - 1) / 2 - apart;
}

static hr_status build_report(hr_program *p, hr_plan *pl, const block *blocks, int nb);

/* The orders other than the schedule's cost O(P log n) for P pairs of blocks
 * alive together, and P grows as n^2 with depth (a 1,000-layer chain has
 * 6 x 10^6 pairs, 20,000 layers 2.4 x 10^9): they run up to this many pairs
 * (a few tenths of a second at most), which keeps the planner O(n log n).
 * Beyond, the schedule-order sweep alone plans; where both can be compared
 * (deep chains, random graphs of 10^4 tensors) its arena is within 1% of the
 * best of the four. */
#define OFFLINE_PAIRS ((size_t)1 << 20)

hr_status hr_plan_make(hr_program *p, hr_plan *pl) {
    hr_graph *g = &p->g;
    memset(pl, 0, sizeof *pl);
    size_t nt = (size_t)(g->nt ? g->nt : 1);
    pl->root = hr_malloc(sizeof(int) * nt);
    block *b = hr_malloc(sizeof *b * nt), *trial = hr_malloc(sizeof *b * nt);
    size_t *held = hr_malloc(sizeof *held * nt); /* per group: the bytes its members span */
    size_t *sub = hr_malloc(sizeof *sub * nt);   /* per tensor: where it starts in its group */
    int *scratch = hr_malloc(sizeof(int) * ((size_t)g->nn + 1));
    hr_status st = pl->root && b && trial && held && sub && scratch ? HR_OK : HR_ERR_OOM;
    if (st != HR_OK) goto done;
    lifetimes(p);
    aliases(p, pl->root, sub);
    for (int i = 0; i < g->nt; i++) find(pl->root, sub, i); /* every member linked to its root */
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        t->bytes = t->last < 0 ? 0 : hr_align_up((size_t)hr_shape_numel(&t->shape) * hr_dtype_size(t->dtype), HR_ALIGN);
        t->cat = category_of(p, t);
        held[i] = 0;
    }
    for (int i = 0; i < g->nt; i++) /* a slice is what its tensor is (the batch's, an activation's) */
        if (g->t[i].alias >= 0) g->t[i].cat = g->t[g->t[i].alias].cat;
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].last < 0) pl->root[i] = -1;
    for (int i = 0; i < g->nt; i++)
        if (pl->root[i] >= 0) {
            int r = pl->root[i];
            size_t end = hr_align_up(sub[i] + g->t[i].bytes, HR_ALIGN); /* slices start on 16 bytes */
            if (end > held[r]) held[r] = end;
        }
    /* Persistent blocks first, side by side at the bottom of the arena. */
    size_t top = 0;
    int nb = 0;
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        if (pl->root[i] != i) continue;
        if (persistent(t)) {
            t->offset = top;
            if (__builtin_add_overflow(top, t->bytes, &top)) {
                st = too_big();
                goto done;
            }
        } else {
            b[nb++] = (block){i, t->first, t->last, held[i], 0};
        }
    }
    size_t persist = top;
    /* No one order of placement is best for every schedule: try a few, keep
     * the smallest arena (the first of equal ones). Each try starts from the
     * blocks as the last better one left them, as it always has: qsort's order
     * among equal keys follows its input. The schedule's order is a sweep;
     * the others, only while few blocks live together (OFFLINE_PAIRS). */
    static int (*const orders[])(const void *, const void *) = {by_size_desc, by_area_desc, by_first, by_life_desc};
    size_t pairs = overlapping_pairs(b, nb, g->nn, scratch);
    bool offline = pairs <= OFFLINE_PAIRS;
    size_t best = SIZE_MAX;
    for (size_t k = 0; st == HR_OK && k < sizeof orders / sizeof orders[0]; k++) {
        if (orders[k] != by_first && !offline) continue;
        size_t t = 0;
        memcpy(trial, b, sizeof *b * (size_t)nb);
        st = orders[k] == by_first ? place_sweep(trial, nb, g->nn, persist, &t)
                                   : place_any(trial, nb, g->nn, persist, &t, orders[k]);
        if (st == HR_OK && t < best) {
            best = t;
            memcpy(b, trial, sizeof *b * (size_t)nb);
        }
    }
    if (st != HR_OK) goto done;
    top = best == SIZE_MAX ? persist : best;
    for (int i = 0; i < nb; i++) g->t[b[i].id].offset = b[i].offset;
    for (int i = 0; i < g->nt; i++)
        if (pl->root[i] >= 0) g->t[i].offset = g->t[pl->root[i]].offset + sub[i];
    pl->arena_bytes = top;
    st = build_report(p, pl, b, nb);
done:
    hr_free(b);
    hr_free(trial);
    hr_free(held);
    hr_free(sub);
    hr_free(scratch);
    if (st == HR_OK) return HR_OK;
    hr_plan_free(pl);
    return st == HR_ERR_OOM ? hr_error_prefix("planning") : st;
}

void hr_plan_free(hr_plan *pl) {
    hr_free(pl->root);
    pl->root = NULL;
}

static hr_status build_report(hr_program *p, hr_plan *pl, const block *b, int nb) {
    hr_graph *g = &p->g;
    hr_report_t *r = &pl->report;
    memset(r, 0, sizeof *r);
    /* bytes born at each step, and freed after it */
    size_t *born = hr_calloc((size_t)g->nn + 1, sizeof *born), *freed = hr_calloc((size_t)g->nn + 1, sizeof *freed);
    size_t *held = hr_malloc(sizeof *held * (size_t)(g->nt ? g->nt : 1)); /* per group: the bytes it holds */
    if (!born || !freed || !held) {
        hr_free(born);
        hr_free(freed);
        hr_free(held);
        return HR_ERR_OOM;
    }
    size_t persist = 0;
    for (int i = 0; i < g->nt; i++) {
        hr_tensor *t = &g->t[i];
        held[i] = t->bytes;
        if (pl->root[i] != i) continue;
        if (persistent(t)) persist += t->bytes;
    }
    for (int i = 0; i < nb; i++) {
        held[b[i].id] = b[i].bytes;
        if (b[i].first > b[i].last) continue; /* alive at no step */
        born[b[i].first] += b[i].bytes;
        freed[b[i].last] += b[i].bytes;
    }
    /* live bytes at each step, and the step where they peak */
    size_t best = 0, alive = 0;
    int peak = 0;
    for (int s = 0; s < g->nn; s++) {
        alive += born[s];
        size_t live = persist + alive;
        if (live > best) best = live, peak = s;
        alive -= freed[s];
    }
    pl->lower_bound = best ? best : persist;
    pl->peak_step = peak;
    r->arena_bytes = pl->arena_bytes;
    r->lower_bound = pl->lower_bound;
    r->peak_step = peak;
    r->n_steps = g->nn;
    const hr_node *pn = g->nn ? &g->n[peak] : NULL;
    if (pn && pn->layer >= 0)
        snprintf(pl->peak_op, sizeof pl->peak_op, "%s (layer %s)", hr_node_op_name(pn), g->l[pn->layer].name);
    else
        snprintf(pl->peak_op, sizeof pl->peak_op, "%s", pn ? hr_node_op_name(pn) : "none");
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
        r->category_bytes[t->cat] += held[i];
        if (t->first <= peak && peak <= t->last) r->category_at_peak[t->cat] += held[i];
    }
    hr_free(born);
    hr_free(freed);
    hr_free(held);
    /* the largest groups alive at the peak (8 passes over the tensors) */
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
    return HR_OK;
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
        if (a->offset % (a->alias >= 0 ? HR_ALIAS_ALIGN : HR_ALIGN)) {
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
