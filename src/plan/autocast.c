/* autocast.c — mixed precision as torch.autocast does it, written into the
 * step program as Cast nodes and tensor types before autodiff runs (so every
 * gradient takes its tensor's type, and the planner sees every byte):
 *   - matrix products and convolutions (HR_AC_HALF) read half copies of their
 *     input and weight (the weight's copy is made once a pass and kept for the
 *     backward, as autocast's cache keeps it) and write half outputs; a
 *     Linear's epilogue adds its bias's half copy;
 *   - norms over features, softmax and the losses (HR_AC_FP32) read F32
 *     copies of half inputs and write F32;
 *   - joins (HR_AC_PROMOTE) take the widest type of their inputs, Add
 *     (HR_AC_PROMOTE_READS) reading each input as it is;
 *   - the cross-entropy (HR_AC_READS_HALF) reads half logits as they are, in
 *     F32 arithmetic, and writes an F32 loss;
 *   - everything else (HR_AC_FOLLOW) computes in its input's type.
 * A tensor is cast to a type once, whoever asks. Afterwards
 * (hr_autocast_fold) a norm whose F32 output only its half copy reads writes
 * that copy itself (the same bits, one kernel and one F32 tensor fewer). In
 * training, a weight's half copy is then held from step to step, written by
 * its update (hr_autocast_hold), as llm.c's AdamW writes its bf16 weights;
 * the evaluation pass reads the same copies. The model's output stays in
 * the type its layer computes (half after a product): the host widens it as
 * it reads it (hr_read_output, hr_forward, hr_eval_forward), since an F32
 * copy on the device would be a language model's largest tensor. */
#include "plan/autocast.h"

#include <string.h>

typedef struct {
    hr_graph *g;
    hr_dtype half;
    const char *prefix;  /* "" or "eval.": the evaluation pass's copies */
    int *copy;           /* [3 * nt0]: tensor i's copy in F32 / half, -1 */
    int nt0;
} autocast;

static bool is_float(hr_dtype t) { return t == HR_F32 || t == HR_F16 || t == HR_BF16; }

/* Tensor x in type `to`: x itself, its copy made earlier, or a new Cast node
 * (appended now, so it runs right before the node that asked). */
static int cast_to(autocast *ac, int x, hr_dtype to, int layer) {
    hr_graph *g = ac->g;
    if (g->t[x].dtype == to) return x;
    int slot = to == HR_F32 ? 0 : 1;
    if (x < ac->nt0 && ac->copy[slot * ac->nt0 + x] >= 0) return ac->copy[slot * ac->nt0 + x];
    const hr_tensor *src = &g->t[x];
    bool weight = src->kind == HR_T_PARAM || src->kind == HR_T_BUFFER;
    char nm[300];
    snprintf(nm, sizeof nm, "%s%s.%s", weight ? ac->prefix : "", src->name, to == HR_F32 ? "f32" : to == HR_BF16 ? "bf16" : "f16");
    int y = hr_graph_add_tensor(g, nm, to, src->shape, src->batched, weight ? HR_T_WCOPY : HR_T_ACT, layer);
    if (y < 0) return -1;
    g->t[y].source = x;
    hr_node n = hr_node_make(HR_OP_CAST, layer);
    n.in[0] = x;
    n.nin = 1;
    n.out[0] = y;
    n.nout = 1;
    if (hr_graph_add_node(g, &n) < 0) return -1;
    if (x < ac->nt0) ac->copy[slot * ac->nt0 + x] = y;
    return y;
}

/* The floating-point activation inputs of node n (not parameters, buffers,
 * labels or masks): bit i for input i. */
static unsigned act_inputs(const hr_graph *g, const hr_node *n) {
    unsigned m = 0;
    for (int i = 0; i < n->nin; i++) {
        if (n->in[i] < 0) continue;
        const hr_tensor *t = &g->t[n->in[i]];
        if (is_float(t->dtype) && (t->kind == HR_T_ACT || t->kind == HR_T_INPUT)) m |= 1u << i;
    }
    return m;
}

/* Rewrites node n (a copy, appended after whatever casts it needs). */
static hr_status one_node(autocast *ac, hr_node n) {
    hr_graph *g = ac->g;
    hr_autocast_rule pol = hr_op_descs[n.op]->autocast;
    unsigned acts = act_inputs(g, &n);
    hr_dtype out = g->t[n.in[0]].dtype;
    if (pol == HR_AC_HALF) {
        out = ac->half;
    } else if (pol == HR_AC_FP32) {
        out = HR_F32;
    } else if (pol == HR_AC_PROMOTE || pol == HR_AC_PROMOTE_READS) {
        out = ac->half;
        for (int i = 0; i < n.nin; i++)
            if (acts >> i & 1 && g->t[n.in[i]].dtype == HR_F32) out = HR_F32;
        if (pol == HR_AC_PROMOTE_READS) acts = 0; /* no copies */
    } else if (pol == HR_AC_READS_HALF) {
        out = HR_F32;
        acts = 0; /* no copies */
    }
    if (pol != HR_AC_FOLLOW)
        for (int i = 0; i < n.nin; i++) {
            bool weight = pol == HR_AC_HALF && i == 1; /* the weight; a bias stays F32 */
            if (!(acts >> i & 1) && !weight) continue;
            if ((n.in[i] = cast_to(ac, n.in[i], out, n.layer)) < 0) return HR_ERR_OOM;
        }
    /* A bias autocast rounds to y's type too, for the product's epilogue
     * (half_bias: a Linear's): its half copy beside it as in[3], the F32
     * bias staying in[2]. */
    if (pol == HR_AC_HALF && hr_op_descs[n.op]->half_bias && n.nin == 3 && n.in[2] >= 0) {
        if ((n.in[3] = cast_to(ac, n.in[2], out, n.layer)) < 0) return HR_ERR_OOM;
        n.nin = 4;
    }
    if (is_float(g->t[n.out[0]].dtype)) g->t[n.out[0]].dtype = out;
    return hr_graph_add_node(g, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

hr_status hr_autocast(hr_graph *g, int from, hr_precision prec, const char *prefix) {
    if (prec == HR_PREC_FP32) return HR_OK;
    int nn = g->nn, count = nn - from;
    autocast ac = {g, prec == HR_PREC_BF16 ? HR_BF16 : HR_F16, prefix, NULL, g->nt};
    hr_node *nodes = hr_malloc(sizeof(hr_node) * (size_t)(count > 0 ? count : 1));
    ac.copy = hr_malloc(sizeof(int) * 2 * (size_t)(ac.nt0 ? ac.nt0 : 1));
    hr_status st = HR_OK;
    if (!nodes || !ac.copy) {
        st = HR_ERR_OOM;
        goto done;
    }
    for (int i = 0; i < 2 * ac.nt0; i++) ac.copy[i] = -1;
    for (int i = 0; i < ac.nt0; i++) /* a weight's held copy serves every later pass (the evaluation's) */
        if (g->t[i].held && g->t[i].source >= 0) ac.copy[(g->t[i].dtype == HR_F32 ? 0 : 1) * ac.nt0 + g->t[i].source] = i;
    memcpy(nodes, g->n + from, sizeof(hr_node) * (size_t)count);
    g->nn = from;
    for (int k = 0; k < count && !st; k++) st = one_node(&ac, nodes[k]);
done:
    hr_free(nodes);
    hr_free(ac.copy);
    return st == HR_ERR_OOM ? hr_error_set(st, "mixed precision: out of host memory rewriting the program") : st;
}

/* The batch's input in the half type: its cast, when it is the input's only
 * reader, goes, and the host sends the values rounded as the cast rounds
 * them (exec/session.c: hr_send_input): half the bytes held and sent. */
static bool fold_input(hr_graph *g, int c, int keep) {
    hr_node *cn = &g->n[c];
    int x = cn->in[0], y = cn->out[0];
    if (g->t[x].kind != HR_T_INPUT || g->t[x].dtype != HR_F32 || !hr_dtype_is_half(g->t[y].dtype) || x == keep ||
        y == keep || hr_graph_read_elsewhere(g, x, c))
        return false;
    g->t[x].dtype = g->t[y].dtype;
    for (int k = c + 1; k < g->nn; k++)
        for (int i = 0; i < g->n[k].nin; i++)
            if (g->n[k].in[i] == y) g->n[k].in[i] = x;
    return true;
}

/* A norm's cast: the producer, an op with half_out, writes the half copy y
 * itself when its F32 output x is read by nothing else. */
static bool fold_norm(hr_graph *g, int from, int c, int keep) {
    int x = g->n[c].in[0], y = g->n[c].out[0];
    if (g->t[x].dtype != HR_F32 || !hr_dtype_is_half(g->t[y].dtype) || x == keep || g->t[x].kind != HR_T_ACT)
        return false;
    int p = c - 1;
    while (p >= from && g->n[p].out[0] != x) p--;
    if (p < from || !hr_op_descs[g->n[p].op]->half_out || hr_graph_read_elsewhere(g, x, c)) return false;
    g->n[p].out[0] = y; /* the producer writes the copy; x is read by nothing now */
    g->t[y].source = -1;
    return true;
}

/* A gradient's cast: the last node before it that writes its F32 input x
 * (an op with half_dx_copy, x its output 0) writes the half copy y too, as
 * output 3, from the final value (after its own accumulation into x). No
 * node between them writes x; x stays for its other readers. */
static bool fold_grad(hr_graph *g, int from, int c) {
    const hr_node *cn = &g->n[c];
    int x = cn->in[0], y = cn->out[0];
    if (g->t[x].dtype != HR_F32 || !hr_dtype_is_half(g->t[y].dtype) || g->t[x].kind != HR_T_ACT_GRAD || cn->accum[0])
        return false;
    int p = c - 1;
    for (; p >= from; p--) {
        const hr_node *q = &g->n[p];
        bool writes = false;
        for (int i = 0; i < q->nout; i++) writes |= q->out[i] == x || q->out[i] == y;
        if (writes) break;
    }
    if (p < from) return false;
    hr_node *pn = &g->n[p];
    if (!hr_op_descs[pn->op]->half_dx_copy || pn->out[0] != x || pn->nout != 3) return false;
    for (int k = c + 1; k < g->nn; k++) /* y: the cast's alone */
        for (int i = 0; i < g->n[k].nout; i++)
            if (g->n[k].out[i] == y) return false;
    pn->out[3] = y;
    pn->accum[3] = false;
    pn->nout = 4;
    return true;
}

hr_status hr_autocast_fold_grads(hr_graph *g, int from) {
    if (hr_options_read().no_fold) return HR_OK;
    for (int c = from; c < g->nn; c++) {
        if (g->n[c].op != HR_OP_CAST || !fold_grad(g, from, c)) continue;
        hr_graph_remove_node(g, c--);
    }
    return HR_OK;
}

hr_status hr_autocast_fold(hr_graph *g, int from, int keep) {
    if (hr_options_read().no_fold) return HR_OK;
    for (int c = from; c < g->nn; c++) {
        if (g->n[c].op != HR_OP_CAST || !(fold_input(g, c, keep) || fold_norm(g, from, c, keep))) continue;
        hr_graph_remove_node(g, c--); /* the cast goes */
    }
    return HR_OK;
}

/* Cast node c makes a weight's half copy that an update could write. */
static bool holdable(const hr_graph *g, const hr_node *c) {
    if (c->op != HR_OP_CAST) return false;
    const hr_tensor *y = &g->t[c->out[0]];
    return y->kind == HR_T_WCOPY && hr_dtype_is_half(y->dtype);
}

/* A weight's half copy y, made by Cast node c from a parameter that the
 * update node u changes: u writes y from the value it leaves (the same
 * rounding as the Cast), y is held across steps, and the Cast goes. The
 * forward then casts no weight, and accumulation's micro-batches none. */
hr_status hr_autocast_hold(hr_graph *g, int n_fwd, int from, int to, int *removed) {
    *removed = 0;
    if (hr_options_read().no_hold) return HR_OK;
    /* each tensor's first holdable Cast in the forward pass, found in one sweep (a sweep an update node
     * took 0.6 s of a 20,000-layer plan's 0.98) */
    int *first = hr_malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
    if (!first)
        return hr_error_set(HR_ERR_OOM, "autocast: out of host memory indexing %d tensors for the held weight copies",
                            g->nt);
    for (int t = 0; t < g->nt; t++) first[t] = -1;
    for (int c = n_fwd - 1; c >= 0; c--)
        if (holdable(g, &g->n[c])) first[g->n[c].in[0]] = c;
    for (int k = from; k < to; k++) {
        hr_node *u = &g->n[k];
        if ((u->op != HR_OP_ADAM && u->op != HR_OP_SGD) || u->nout || u->in[0] < 0) continue;
        for (int c = first[u->in[0]]; c >= 0 && c < n_fwd; c++) { /* past a copy already held: the next one */
            const hr_node *cn = &g->n[c];
            if (!holdable(g, cn) || cn->in[0] != u->in[0] || g->t[cn->out[0]].held) continue;
            g->t[cn->out[0]].held = true;
            u->out[0] = cn->out[0];
            u->nout = 1;
            break;
        }
    }
    hr_free(first);
    int w = 0; /* the held copies' Casts go, the order of the rest kept */
    for (int c = 0; c < g->nn; c++) {
        if (c < n_fwd && g->n[c].op == HR_OP_CAST && g->t[g->n[c].out[0]].held) {
            ++*removed;
            continue;
        }
        g->n[w++] = g->n[c];
    }
    g->nn = w;
    return HR_OK;
}
