/* plan_check.h — test_plan's independent checker of a session's plan:
 * lifetimes recomputed from the program's nodes, and any two tensors that
 * share a byte must live at different times or be a view / in-place pair
 * recognised here on its own (hr_plan_verify and the planner's alias groups
 * are not used); and the oracle, which runs the program with every tensor in
 * its own buffer and compares with the planned arena. Plus the seeded
 * generator that the oracle's data and the random stacks draw from. */
#ifndef HR_TEST_PLAN_CHECK_H
#define HR_TEST_PLAN_CHECK_H

#include "check.h"
#include "exec/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- a seeded generator for the data and the random stacks ----------------- */
static uint64_t prng_s;
static uint64_t prng(void) {
    uint64_t x = (prng_s += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
static inline int below(int n) { return (int)(prng() % (uint64_t)n); }

/* ---- the independent checker ----------------------------------------------- */
typedef struct {
    bool used;
    int first, last;   /* steps: first write (0 for state and the batch), last read */
    size_t off, size;  /* exact bytes, no alignment padding */
    int view;          /* union-find over Reshape in/out: the view class */
} life;

static int vfind(life *L, int i) {
    while (L[i].view != i) i = L[i].view = L[L[i].view].view;
    return i;
}

static bool is_state(hr_tensor_kind k) { return k == HR_T_PARAM || k == HR_T_BUFFER || k == HR_T_OPTSTATE; }

/* May node n write output `o` over input `i`'s bytes? Where every output
 * element reads only the same element of that input (the elementwise ops),
 * and Linear.backward's dx over x (below). */
static bool inplace_ok(const hr_node *n, int in_idx, int out_idx) {
    if (out_idx != 0) return false;
    switch (n->op) {
    case HR_OP_RELU: case HR_OP_DROPOUT: case HR_OP_COPY: case HR_OP_RESHAPE: return in_idx == 0;
    case HR_OP_LEAKY_RELU: case HR_OP_GELU: case HR_OP_SILU: case HR_OP_SIGMOID: case HR_OP_TANH: return in_idx == 0;
    case HR_OP_ADD: case HR_OP_RELU_BWD: return in_idx <= 1;
    /* y = x + table[t]: each y element reads its own x element */
    case HR_OP_POS_EMBEDDING: return in_idx == 0;
    /* dx over dy (the last input): each dx element reads its own dy element
     * and its own element of what the forward kept */
    case HR_OP_LEAKY_RELU_BWD: case HR_OP_GELU_BWD: case HR_OP_SILU_BWD: case HR_OP_SIGMOID_BWD: case HR_OP_TANH_BWD:
        return in_idx == n->nin - 1;
    case HR_OP_DROPOUT_BWD: return in_idx == 0; /* dy: it draws the decisions again */
    /* not elementwise, but documented: the kernels finish reading x (for dW)
     * before they write dx; the separate-buffers run below checks the numbers */
    case HR_OP_LINEAR_BWD: return in_idx == 0;
    /* the same for Conv2d.backward: a sample's x is read (dW) before its dx
     * is written (cpu_gemm.c: per sample; conv2d.c: every dW call first) */
    case HR_OP_CONV2D_BWD: return in_idx == 0;
    /* dx over dy: each dx element reads its own dy element after the
     * per-channel sums (cpu_norm.c, norm.cu) */
    case HR_OP_BATCHNORM_BWD: return in_idx == 4;
    /* dlogits over the logits: a row's statistics are read first, then each
     * dx element from its own logit (cpu_loss.c, loss.cu) */
    case HR_OP_CROSS_ENTROPY_BWD: return in_idx == 0;
    default: return false;
    }
}

typedef struct {
    size_t lo, hi;
} range;
static int by_lo(const void *a, const void *b) {
    size_t x = ((const range *)a)->lo, y = ((const range *)b)->lo;
    return x < y ? -1 : x > y;
}

typedef struct {
    size_t arena, my_lb, report_lb;
    int clashes;
} check_out;

/* Returns the number of problems found; describes the first in `why`. */
static int check_plan(const hr_session_t *s, char *why, size_t whylen, check_out *out) {
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    const size_t arena = hr_session_plan(s)->arena_bytes;
    int T = g->nn, nt = g->nt, bad = 0;
    life *L = calloc((size_t)nt, sizeof *L);
    why[0] = 0;
#define PROBLEM(...)                                            \
    do {                                                        \
        if (!bad++) snprintf(why, whylen, __VA_ARGS__);         \
    } while (0)
    for (int i = 0; i < nt; i++) L[i].view = i, L[i].first = -1, L[i].last = -1;
    for (int st = 0; st < T; st++) {
        const hr_node *n = &g->n[st];
        for (int k = 0; k < n->nin; k++) {
            int t = n->in[k];
            if (t < 0) continue;
            if (!L[t].used && !is_state(g->t[t].kind) && g->t[t].kind != HR_T_INPUT && g->t[t].kind != HR_T_LABEL)
                PROBLEM("%s is read at step %d (%s) before anything wrote it", g->t[t].name, st, hr_op_name(n->op));
            if (!L[t].used) L[t].used = true, L[t].first = st;
            L[t].last = st;
        }
        for (int k = 0; k < n->nout; k++) {
            int t = n->out[k];
            if (t < 0) continue;
            if (!L[t].used && n->accum[k] && !is_state(g->t[t].kind))
                PROBLEM("%s is first written at step %d (%s) by accumulating into garbage", g->t[t].name, st,
                        hr_op_name(n->op));
            if (!L[t].used) L[t].used = true, L[t].first = st;
            L[t].last = st;
        }
        if (n->ws >= 0) {
            int t = n->ws;
            if (!L[t].used) L[t].used = true, L[t].first = st;
            L[t].last = st;
        }
        if (n->op == HR_OP_RESHAPE && n->in[0] >= 0 && n->out[0] >= 0) {
            int a = vfind(L, n->in[0]), b = vfind(L, n->out[0]);
            if (a != b) L[b].view = a;
        }
    }
    for (int i = 0; i < nt; i++) {
        const hr_tensor *t = &g->t[i];
        if (!L[i].used) continue;
        if (is_state(t->kind)) L[i].first = 0, L[i].last = T - 1;
        /* a batch is written before the first node of its pass: the step's
         * at 0, the evaluation pass's where that pass begins */
        if (t->kind == HR_T_INPUT || t->kind == HR_T_LABEL) L[i].first = i == p->eval_input ? p->n_step : 0;
        /* kept gradients outlive the step (hr_grad_read, accumulation across steps) */
        if (t->kind == HR_T_GRAD && p->cfg.keep_grads) L[i].first = 0, L[i].last = T - 1;
        L[i].off = t->offset;
        L[i].size = (size_t)hr_shape_numel(&t->shape) * hr_dtype_size(t->dtype);
        if (L[i].off % HR_ALIGN) PROBLEM("%s at offset %zu is not %d-aligned", t->name, L[i].off, HR_ALIGN);
        if (L[i].off + L[i].size > arena || L[i].off + L[i].size < L[i].off)
            PROBLEM("%s [%zu, +%zu) ends past the arena (%zu)", t->name, L[i].off, L[i].size, arena);
    }
    /* the host reads the step's results after the step, and the evaluation
     * pass's output after that pass (the step's are gone by then) */
    int S = p->n_step;
    if (p->loss >= 0 && L[p->loss].used) L[p->loss].last = S - 1;
    if ((p->cfg.mode == HR_MODE_INFER || p->cfg.keep_output) && p->output >= 0 && L[p->output].used)
        L[p->output].last = S - 1;
    if (p->sqnorm >= 0 && L[p->sqnorm].used) L[p->sqnorm].last = S - 1;
    if (p->eval_output >= 0 && L[p->eval_output].used) L[p->eval_output].last = T - 1;

    int clashes = 0;
    for (int i = 0; i < nt; i++) {
        if (!L[i].used || !L[i].size) continue;
        for (int j = i + 1; j < nt; j++) {
            if (!L[j].used || !L[j].size) continue;
            bool space = L[i].off < L[j].off + L[j].size && L[j].off < L[i].off + L[i].size;
            if (!space) continue;
            bool time = L[i].first <= L[j].last && L[j].first <= L[i].last;
            if (!time) continue;
            /* a view: the same bytes under another shape */
            if (vfind(L, i) == vfind(L, j) && L[i].off == L[j].off && L[i].size == L[j].size) continue;
            /* in place: one dies at step s as an input, the other is born
             * there as the output, on the same first byte */
            bool legit = false;
            for (int pass = 0; pass < 2 && !legit; pass++) {
                int a = pass ? j : i, b = pass ? i : j;
                if (L[a].last != L[b].first || L[a].off != L[b].off) continue;
                const hr_node *n = &g->n[L[a].last];
                for (int k = 0; k < n->nin; k++)
                    for (int o = 0; o < n->nout; o++)
                        if (n->in[k] == a && n->out[o] == b && !n->accum[o] && inplace_ok(n, k, o)) legit = true;
            }
            if (legit) continue;
            clashes++;
            PROBLEM("%s [%zu, +%zu) steps %d-%d and %s [%zu, +%zu) steps %d-%d share bytes", g->t[i].name, L[i].off,
                    L[i].size, L[i].first, L[i].last, g->t[j].name, L[j].off, L[j].size, L[j].first, L[j].last);
        }
    }
    /* the bytes this plan's sharing needs at its busiest step: the union of
     * the (aligned) ranges live there; in 128 bits so a wrap would show */
    unsigned __int128 best = 0;
    range *r = malloc(sizeof *r * (size_t)(nt ? nt : 1));
    for (int st = 0; st < T; st++) {
        int k = 0;
        for (int i = 0; i < nt; i++)
            if (L[i].used && L[i].size && L[i].first <= st && st <= L[i].last)
                r[k].lo = L[i].off, r[k].hi = L[i].off + hr_align_up(L[i].size, HR_ALIGN), k++;
        /* sort by start and merge */
        qsort(r, (size_t)k, sizeof *r, by_lo);
        unsigned __int128 u = 0;
        size_t cs = 0, ce = 0;
        for (int a = 0; a < k; a++) {
            if (a == 0 || r[a].lo > ce) {
                u += ce - cs;
                cs = r[a].lo, ce = r[a].hi;
            } else if (r[a].hi > ce) {
                ce = r[a].hi;
            }
        }
        if (k) u += ce - cs;
        if (u > best) best = u;
    }
    free(r);
    if (best > (unsigned __int128)arena)
        PROBLEM("the live bytes at the peak (%.4g) exceed the arena (%zu)", (double)best, arena);
    if (out) {
        out->arena = arena;
        out->my_lb = (size_t)best;
        out->report_lb = hr_session_report(s)->lower_bound;
        out->clashes = clashes;
    }
    free(L);
    return bad;
#undef PROBLEM
}

/* Compiles, checks, frees; returns the session if keep. */
static inline hr_session_t *compile_checked(const hr_model_t *m, const hr_config_t *cfg, const char *label, check_out *o,
                                     bool keep) {
    hr_session_t *s = hr_compile(m, cfg);
    CHECK(s != NULL, "%s: compile: %s", label, hr_last_error());
    if (!s) return NULL;
    char why[512];
    int bad = check_plan(s, why, sizeof why, o);
    CHECK(bad == 0, "%s: %d plan problems; first: %s", label, bad, why);
    if (!keep) {
        hr_session_free(s);
        return NULL;
    }
    return s;
}

/* ---- run on the arena vs run with every tensor in its own buffer ---------- */
/* The oracle knows nothing of the plan: each tensor gets its own zeroed
 * buffer, the initial state is copied from the planned session, and the nodes
 * run in order on the same backend. A clash in the plan shows as a
 * difference in the loss, the outputs, the updated state or the gradients. */
static double max_rel(const float *a, const float *b, int64_t n) {
    double e = 0, mx = 1e-3;
    for (int64_t i = 0; i < n; i++) mx = fabs((double)b[i]) > mx ? fabs((double)b[i]) : mx;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) d = INFINITY;
        e = d > e ? d : e;
    }
    return e / mx;
}

static inline void oracle(const hr_model_t *m, const hr_config_t *cfg, const char *label, double *worst) {
    hr_session_t *s = hr_compile(m, cfg);
    CHECK(s != NULL, "%s: compile: %s", label, hr_last_error());
    if (!s) return;
    hr_status st = hr_session_alloc(s);
    CHECK(st == HR_OK, "%s: alloc: %s", label, hr_last_error());
    if (st) {
        hr_session_free(s);
        return;
    }
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    void *const *ptr = hr_session_ptrs(s);
    int nt = g->nt;
    void **own = calloc((size_t)nt, sizeof(void *));
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)hr_shape_numel(&g->t[i].shape) * hr_dtype_size(g->t[i].dtype);
        own[i] = calloc(n ? n : 1, 1);
        if (ptr[i] && is_state(g->t[i].kind)) memcpy(own[i], ptr[i], n);
    }
    const hr_tensor *xin = &g->t[p->input];
    int64_t nx = hr_shape_numel(&xin->shape);
    float *x = malloc(sizeof(float) * (size_t)nx);
    int64_t vocab = 0; /* an input of token ids (read by an Embedding): ids in [0, vocab) */
    for (int k = 0; k < p->n_fwd; k++)
        if (g->n[k].op == HR_OP_EMBEDDING && g->n[k].in[0] == p->input) vocab = g->n[k].a.in_f;
    for (int64_t i = 0; i < nx; i++)
        x[i] = vocab ? (float)(prng() % (uint64_t)vocab) : (float)((int64_t)(prng() % 2001) - 1000) / 500.0f;
    for (int64_t i = 0; i < nx; i++) hr_store_f(own[p->input], xin->dtype, i, x[i]); /* a half input: rounded */
    void *labels = NULL;
    bool train = cfg->mode == HR_MODE_TRAIN;
    if (train) {
        const hr_tensor *lt = &g->t[p->label];
        int64_t nl = hr_shape_numel(&lt->shape);
        labels = malloc(sizeof(float) * (size_t)nl);
        if (lt->dtype == HR_I32) {
            const hr_shape *os = &g->t[p->output].shape; /* classes: the last dim (one label a position) */
            int64_t C = os->d[os->ndim - 1];
            for (int64_t i = 0; i < nl; i++) ((int32_t *)labels)[i] = (int32_t)(prng() % (uint64_t)C);
        } else {
            for (int64_t i = 0; i < nl; i++) ((float *)labels)[i] = (float)(prng() % 1000) / 1000.0f;
        }
        memcpy(own[p->label], labels, (size_t)nl * hr_dtype_size(lt->dtype));
    }
    /* the planned run */
    float loss = NAN;
    st = train ? hr_train_step(s, x, labels, &loss) : hr_forward(s, x, NULL);
    CHECK(st == HR_OK, "%s: step: %s", label, hr_last_error());
    /* the unshared run: the session's schedule, node by node, with the step
     * numbers hr_train_step uses (0 for the forward and backward, 1 for the
     * update) */
    hr_step_info si = hr_step_info_make(0, cfg, p->sqnorm);
    int end = train ? g->nn : p->n_fwd;
    for (int k = 0; k < end && st == HR_OK; k++) {
        if (k == p->n_bwd_end) si.t = 1;
        hr_status r = hr_node_run(hr_session_backend(s), g, &g->n[k], own, &si);
        CHECK(r == HR_OK, "%s: oracle node %d: %s", label, k, hr_last_error());
    }
    double e = 0;
    char what[160] = "";
    if (st == HR_OK) {
        if (train) {
            double d = max_rel(&loss, own[p->loss], 1);
            if (d > e) e = d, snprintf(what, sizeof what, "loss");
        } else {
            int o = p->output;
            double d = max_rel(ptr[o], own[o], hr_shape_numel(&g->t[o].shape));
            if (d > e) e = d, snprintf(what, sizeof what, "output");
        }
        for (int i = 0; i < nt; i++) {
            const hr_tensor *t = &g->t[i];
            bool cmp = is_state(t->kind) || (t->kind == HR_T_GRAD && cfg->keep_grads);
            if (!cmp || !ptr[i] || t->dtype != HR_F32) continue;
            double d = max_rel(ptr[i], own[i], hr_shape_numel(&t->shape));
            if (d > e) e = d, snprintf(what, sizeof what, "%s", t->name);
        }
    }
    if (e > *worst) *worst = e;
    CHECK(e <= 1e-5, "%s: the planned arena and separate buffers differ by %.3g in %s", label, e, what);
    for (int i = 0; i < nt; i++) free(own[i]);
    free(own), free(x), free(labels);
    hr_session_free(s);
}

#endif
