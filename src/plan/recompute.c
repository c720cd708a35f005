/* recompute.c — activation recomputation as a rewrite of the step program.
 *
 * A forward node of a selected layer keeps running in the forward pass, but
 * the backward pass no longer reads its outputs: it reads those of a clone,
 * the same node run again (a.recompute) right before the first backward node
 * that needs one of them. A clone reads kept tensors, or the outputs of
 * other clones, made first. The original outputs then die in the forward
 * pass, and the planner gives their bytes to what comes after; the clones'
 * outputs live from the recomputation to their last backward reader.
 *
 * The clone computes what the original did, bit for bit: the same kernel on
 * the same inputs; a random mask comes from (seed, layer, step, element),
 * so the clone draws the same one; a batch normalisation computes the same
 * batch statistics and leaves the running ones alone (a.recompute). */
#include "plan/recompute.h"

#include <fnmatch.h>
#include <string.h>

/* Forward node k may be recomputed: it belongs to a layer, and it makes
 * neither the loss, the model's output (read after the step anyway) nor a
 * weight's half copy (kept for the backward pass as autocast's cache). */
static bool node_ok(const hr_program *p, int k) {
    const hr_graph *g = &p->g;
    const hr_node *n = &g->n[k];
    if (n->layer < 0 || n->nout < 1 || n->out[0] < 0) return false;
    for (int i = 0; i < n->nout; i++) {
        int o = n->out[i];
        if (o < 0) continue;
        if (o == p->loss || o == p->output || g->t[o].kind != HR_T_ACT) return false;
    }
    return true;
}

bool hr_recompute_layer_ok(const hr_program *p, int l) {
    for (int k = 0; k < p->n_fwd; k++)
        if (p->g.n[k].layer == l && node_ok(p, k)) return true;
    return false;
}

hr_status hr_recompute_parse(const hr_program *p, const char *list, bool *sel) {
    const hr_graph *g = &p->g;
    memset(sel, 0, sizeof(bool) * (size_t)g->nl);
    if (!list || !*list || !strcmp(list, "none")) return HR_OK;
    if (!strcmp(list, "all")) {
        for (int l = 0; l < g->nl; l++) sel[l] = hr_recompute_layer_ok(p, l);
        return HR_OK;
    }
    for (const char *s = list; *s;) {
        while (*s == ' ') s++;
        size_t len = strcspn(s, ",");
        size_t end = len;
        while (end && s[end - 1] == ' ') end--;
        if (memchr(s, '*', end) || memchr(s, '?', end) || memchr(s, '[', end)) {
            /* a pattern (fnmatch's): every layer it names that can be recomputed */
            char pat[512];
            if (end >= sizeof pat)
                return hr_error_set(HR_ERR_INVALID_ARG, "--recompute: a pattern of %zu characters is too long", end);
            memcpy(pat, s, end);
            pat[end] = 0;
            int hits = 0;
            for (int l = 0; l < g->nl; l++)
                if (!fnmatch(pat, g->l[l].name, 0) && hr_recompute_layer_ok(p, l)) sel[l] = true, hits++;
            if (!hits)
                return hr_error_set(HR_ERR_INVALID_ARG,
                                    "--recompute: '%s' names no layer that can be recomputed; patterns match whole "
                                    "layer names as the plan's report prints them (e.g. '*.mlp.*')", pat);
            s += len;
            if (*s == ',') s++;
            continue;
        }
        int found = -1;
        for (int l = 0; l < g->nl && found < 0; l++)
            if (strlen(g->l[l].name) == end && !strncmp(g->l[l].name, s, end)) found = l;
        if (found < 0)
            return hr_error_set(HR_ERR_INVALID_ARG,
                                "--recompute: the model has no layer named '%.*s'; name layers as the plan's report "
                                "does (e.g. --recompute 0,1), give a pattern ('*.mlp.*'), or use all, none or auto",
                                (int)end, s);
        if (!hr_recompute_layer_ok(p, found)) {
            char where[160];
            return hr_error_set(HR_ERR_INVALID_ARG,
                                "--recompute: %s cannot be recomputed (it makes the loss or the model's output, which "
                                "are kept anyway); leave it out",
                                hr_graph_layer_where(g, found, where, sizeof where));
        }
        sel[found] = true;
        s += len;
        if (*s == ',') s++;
    }
    return HR_OK;
}

size_t hr_recompute_list_len(const hr_program *p) {
    size_t n = 1;
    for (int l = 0; l < p->g.nl; l++) n += strlen(p->g.l[l].name) + 1;
    return n;
}

const char *hr_recompute_list(const hr_program *p, const bool *sel, char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int l = 0; l < p->g.nl; l++) {
        if (!sel[l]) continue;
        int w = snprintf(buf + k, n > k ? n - k : 0, "%s%s", k ? "," : "", p->g.l[l].name);
        if (w > 0) k += (size_t)w;
    }
    return buf;
}

int hr_recompute_count(const hr_program *p) {
    int c = 0;
    for (int k = p->n_fwd; k < p->n_bwd_end; k++) c += p->g.n[k].a.recompute;
    return c;
}

/* A copy of tensor t for a clone: "<name>.recomputed", its kind and layer. */
static int clone_tensor(hr_graph *g, int t) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s.recomputed", g->t[t].name);
    hr_tensor src = g->t[t]; /* adding may move g->t */
    int c = hr_graph_add_tensor(g, nm, src.dtype, src.shape, src.batched, src.kind, src.layer);
    if (c >= 0) g->t[c].requires_grad = src.requires_grad;
    return c;
}

typedef struct {
    hr_graph *g;
    const int *producer; /* per original tensor: the forward node that makes it, -1 */
    const bool *redo;    /* per forward node: recomputed */
    int *clone;          /* per original tensor: its clone, -1 */
    bool *done;
    int *stack, *next; /* need()'s path of producers, and each one's next input */
    hr_node *out;        /* the new schedule */
    int m, nt0;
} rewrite;

/* The clone of tensor t's producer is needed: the clones it reads first,
 * then it (depth first, without recursion: models may be deep). The stack is
 * the path from t's producer down; each frame resumes at its next input (the
 * last input first), so every clone a node reads is made before it, even
 * where two readers wait for one clone (a residual's stream and its
 * branch). The graph has no cycles: the path has at most nf nodes. */
static hr_status need(rewrite *w, int t) {
    if (t < 0 || t >= w->nt0 || w->producer[t] < 0 || !w->redo[w->producer[t]] || w->done[w->producer[t]]) return HR_OK;
    int sp = 0;
    w->stack[sp] = w->producer[t];
    w->next[sp++] = w->g->n[w->producer[t]].nin - 1;
    while (sp) {
        int k = w->stack[sp - 1], q = -1;
        while (w->next[sp - 1] >= 0 && q < 0) { /* its next input whose clone is still to make */
            int u = w->g->n[k].in[w->next[sp - 1]--];
            if (u >= 0 && u < w->nt0 && w->producer[u] >= 0 && w->redo[w->producer[u]] && !w->done[w->producer[u]])
                q = w->producer[u];
        }
        if (q >= 0) {
            w->stack[sp] = q;
            w->next[sp++] = w->g->n[q].nin - 1;
            continue;
        }
        hr_node n = w->g->n[k];
        for (int i = 0; i < n.nin; i++) {
            int u = n.in[i];
            if (u >= 0 && u < w->nt0 && w->producer[u] >= 0 && w->redo[w->producer[u]]) n.in[i] = w->clone[u];
        }
        for (int i = 0; i < n.nout; i++) {
            if (n.out[i] < 0) continue;
            int c = clone_tensor(w->g, n.out[i]);
            if (c < 0) return HR_ERR_OOM;
            w->clone[n.out[i]] = c;
            n.out[i] = c;
        }
        if (n.ws >= 0 && (n.ws = clone_tensor(w->g, n.ws)) < 0) return HR_ERR_OOM;
        n.a.recompute = true;
        w->out[w->m++] = n;
        w->done[k] = true;
        sp--;
    }
    return HR_OK;
}

hr_status hr_recompute_apply(hr_program *p, const bool *sel) {
    hr_graph *g = &p->g;
    int nf = p->n_fwd, nb = p->n_bwd_end, nn = g->nn, nt0 = g->nt;
    rewrite w = {.g = g, .nt0 = nt0};
    int *producer = hr_malloc(sizeof(int) * (size_t)(nt0 ? nt0 : 1));
    bool *redo = hr_calloc((size_t)nf + 1, 1);
    w.clone = hr_malloc(sizeof(int) * (size_t)(nt0 ? nt0 : 1));
    w.done = hr_calloc((size_t)nf + 1, 1);
    w.stack = hr_malloc(sizeof(int) * ((size_t)nf + 1));
    w.next = hr_malloc(sizeof(int) * ((size_t)nf + 1));
    w.out = hr_malloc(sizeof(hr_node) * ((size_t)nn + (size_t)nf + 1));
    hr_status st = HR_OK;
    if (!producer || !redo || !w.clone || !w.done || !w.stack || !w.next || !w.out) {
        st = HR_ERR_OOM;
        goto done;
    }
    w.producer = producer;
    w.redo = redo;
    for (int i = 0; i < nt0; i++) producer[i] = w.clone[i] = -1;
    int any = 0;
    for (int k = 0; k < nf; k++) {
        const hr_node *n = &g->n[k];
        for (int i = 0; i < n->nout; i++)
            if (n->out[i] >= 0) producer[n->out[i]] = k;
        redo[k] = n->layer >= 0 && sel[n->layer] && node_ok(p, k);
        any += redo[k];
    }
    if (!any) goto done;
    memcpy(w.out, g->n, sizeof(hr_node) * (size_t)nf);
    w.m = nf;
    for (int b = nf; b < nb; b++) {
        hr_node n = g->n[b];
        for (int i = 0; i < n.nin; i++) {
            int t = n.in[i];
            if (t < 0 || t >= nt0 || producer[t] < 0 || !redo[producer[t]]) continue;
            if ((st = need(&w, t)) != HR_OK) goto done;
            n.in[i] = w.clone[t];
        }
        w.out[w.m++] = n;
    }
    int added = w.m - nb;
    memcpy(w.out + w.m, g->n + nb, sizeof(hr_node) * (size_t)(nn - nb));
    w.m += nn - nb;
    hr_free(g->n);
    g->n = w.out;
    g->nn = w.m;
    g->capn = nn + nf + 1;
    w.out = NULL;
    p->n_bwd_end += added;
    p->n_unscale_end += added;
    p->n_step += added;
done:
    hr_free(producer);
    hr_free(redo);
    hr_free(w.clone);
    hr_free(w.done);
    hr_free(w.stack);
    hr_free(w.next);
    hr_free(w.out);
    if (st == HR_ERR_OOM) hr_error_prefix("recomputation");
    return st;
}
