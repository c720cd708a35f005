/* chunk.c — the model's first layers a slice of the batch at a time, as a
 * rewrite of the forward graph (see chunk.h).
 *
 * The slices' inputs and the last layer's outputs are slices of the full
 * tensors (hr_tensor.alias: the planner places them inside those), so
 * nothing is copied: slice k reads samples [k c, k c + c_k) of the input
 * where they lie and writes its share of the output where the full one
 * will be read. Autodiff then differentiates each slice on its own, and
 * the weights' gradients add up over the slices as over any weight read
 * twice. */
#include "plan/chunk.h"

#include <string.h>

/* A node that computes each sample from that sample alone (its op's
 * descriptor says so, for training or for inference only). */
static bool per_sample(const hr_node *n) {
    unsigned k = hr_op_descs[n->op]->per_sample;
    return k == HR_SAMPLES_EACH || (k == HR_SAMPLES_INFER && !n->a.train);
}

static bool batched_t(const hr_graph *g, int t) { return t >= 0 && g->t[t].batched; }

/* A node of the run that no slice repeats: a weight's half copy (autocast),
 * which reads parameters only. */
static bool side_node(const hr_graph *g, const hr_node *n) {
    if (n->op != HR_OP_CAST || n->nout != 1 || n->out[0] < 0 || g->t[n->out[0]].kind != HR_T_WCOPY) return false;
    for (int i = 0; i < n->nin; i++)
        if (batched_t(g, n->in[i])) return false;
    return true;
}

int hr_chunk_segment(const hr_graph *g, int from, int input, int keep, int *out) {
    *out = -1;
    if (input < 0 || !g->t[input].batched) return from;
    int nt = g->nt, nn = g->nn;
    char *mine = hr_calloc((size_t)nt + 1, 1); /* made by the run, or its input */
    int *last = hr_malloc(sizeof(int) * ((size_t)nt + 1)); /* per tensor: its last reader */
    if (!mine || !last) {
        hr_free(mine);
        hr_free(last);
        return -1;
    }
    mine[input] = 1;
    for (int i = 0; i < nt; i++) last[i] = -1;
    for (int k = 0; k < nn; k++)
        for (int i = 0; i < g->n[k].nin; i++)
            if (g->n[k].in[i] >= 0) last[g->n[k].in[i]] = k;
    if (keep >= 0) last[keep] = nn;
    int end = from;
    for (int k = from; k < nn; k++) {
        const hr_node *n = &g->n[k];
        if (side_node(g, n)) continue;
        bool ok = per_sample(n) && n->nout >= 1;
        for (int i = 0; ok && i < n->nout; i++) ok = n->out[i] >= 0 && batched_t(g, n->out[i]);
        for (int i = 0; ok && i < n->nin; i++) ok = !batched_t(g, n->in[i]) || mine[n->in[i]];
        if (!ok) break;
        for (int i = 0; i < n->nout; i++) mine[n->out[i]] = 1;
        end = k + 1;
    }
    /* Cut where exactly one tensor of the run, the last node's output, is
     * read after it. */
    int cut = from;
    for (int e = end; e > from && cut == from; e--) {
        const hr_node *ln = &g->n[e - 1];
        if (side_node(g, ln)) continue;
        int y = ln->out[0];
        bool ok = last[y] >= e;
        for (int k = from; ok && k < e; k++) {
            const hr_node *n = &g->n[k];
            if (side_node(g, n)) continue;
            for (int i = 0; ok && i < n->nout; i++) ok = n->out[i] == y || last[n->out[i]] < e;
        }
        if (ok) cut = e, *out = y;
    }
    hr_free(mine);
    hr_free(last);
    return cut;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Bytes of one sample of batched tensor t. */
static int64_t sample_bytes(const hr_graph *g, int t) {
    const hr_tensor *x = &g->t[t];
    return hr_shape_numel(&x->shape) / x->shape.d[0] * (int64_t)hr_dtype_size(x->dtype);
}

/* Samples a slice must be a multiple of for the next one to start on HR_ALIAS_ALIGN. */
static int64_t align_samples(int64_t sb) { return HR_ALIAS_ALIGN / gcd64(HR_ALIAS_ALIGN, sb); }

/* A tensor of slice k: t's shape with c samples, named "<t>.slice<k>". */
static int slice_tensor(hr_graph *g, int t, int k, int64_t c) {
    char nm[300];
    hr_tensor src = g->t[t]; /* adding may move g->t */
    snprintf(nm, sizeof nm, "%s.slice%d", src.name, k);
    src.shape.d[0] = c;
    int s = hr_graph_add_tensor(g, nm, src.dtype, src.shape, true, src.kind == HR_T_INPUT ? HR_T_ACT : src.kind, src.layer);
    return s;
}

hr_status hr_chunk_apply(hr_program *p, int from, int input, int keep, int chunks, int *done, int64_t *slice,
                         bool *layers) {
    hr_graph *g = &p->g;
    *done = 0;
    *slice = 0;
    if (chunks <= 1) return HR_OK;
    int y;
    int end = hr_chunk_segment(g, from, input, keep, &y);
    if (end < 0) return hr_error_set(HR_ERR_OOM, "slicing the batch: out of host memory");
    if (end == from) return HR_OK;
    int X = input;
    int64_t B = g->t[X].shape.d[0];
    int64_t q = align_samples(sample_bytes(g, X)), qy = align_samples(sample_bytes(g, y));
    q = q / gcd64(q, qy) * qy;
    int64_t c = (B + chunks - 1) / chunks;
    c = (c + q - 1) / q * q;
    int K = (int)((B + c - 1) / c);
    if (K < 2) return HR_OK;

    int nt0 = g->nt, nn = g->nn, nrun = 0;
    for (int k = from; k < end; k++) nrun += !side_node(g, &g->n[k]);
    size_t cap = (size_t)nn + (size_t)nrun * (size_t)(K - 1) + 1;
    hr_node *out = hr_malloc(sizeof(hr_node) * cap);
    int *map = hr_malloc(sizeof(int) * ((size_t)nt0 + 1));
    if (!out || !map) {
        hr_free(out);
        hr_free(map);
        return hr_error_set(HR_ERR_OOM, "slicing the batch: out of host memory");
    }
    memcpy(out, g->n, sizeof(hr_node) * (size_t)from);
    int m = from;
    for (int k = from; k < end; k++)
        if (side_node(g, &g->n[k])) out[m++] = g->n[k];
    hr_status st = HR_OK;
    for (int s = 0; s < K && st == HR_OK; s++) {
        int64_t cs = s < K - 1 ? c : B - c * (K - 1);
        for (int i = 0; i < nt0; i++) map[i] = -1;
        int xs = slice_tensor(g, X, s, cs), ys = slice_tensor(g, y, s, cs);
        if (xs < 0 || ys < 0) {
            st = HR_ERR_OOM;
            break;
        }
        g->t[xs].alias = X;
        g->t[xs].alias_offset = (size_t)(s * c * sample_bytes(g, X));
        g->t[ys].alias = y;
        g->t[ys].alias_offset = (size_t)(s * c * sample_bytes(g, y));
        map[X] = xs;
        map[y] = ys;
        for (int k = from; k < end && st == HR_OK; k++) {
            hr_node n = g->n[k];
            if (side_node(g, &n)) continue;
            for (int i = 0; i < n.nin; i++)
                if (n.in[i] >= 0 && map[n.in[i]] >= 0) n.in[i] = map[n.in[i]];
            for (int i = 0; i < n.nout; i++) {
                int o = n.out[i];
                if (map[o] < 0 && (map[o] = slice_tensor(g, o, s, cs)) < 0) {
                    st = HR_ERR_OOM;
                    break;
                }
                n.out[i] = map[o];
            }
            out[m++] = n;
            if (layers && n.layer >= 0) layers[n.layer] = true;
        }
    }
    hr_free(map);
    if (st != HR_OK) {
        hr_free(out);
        return hr_error_set(st, "slicing the batch: out of host memory");
    }
    memcpy(out + m, g->n + end, sizeof(hr_node) * (size_t)(nn - end));
    m += nn - end;
    hr_free(g->n);
    g->n = out;
    g->nn = m;
    g->capn = (int)cap;
    *done = K;
    *slice = c;
    return HR_OK;
}
