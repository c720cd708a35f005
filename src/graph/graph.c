/* graph.c — growing arrays of tensors, nodes and layers, shared by the model
 * (forward graph) and the compiled step program. */
#include "graph/graph.h"

#include <string.h>

static const char *const op_names[] = {
#define X(E, id, k, name) [HR_OP_##E] = name,
    HR_OP_LIST(X)
#undef X
};
_Static_assert(sizeof op_names / sizeof *op_names == HR_OP_COUNT, "a name for every op");

const char *hr_op_name(hr_op op) { return (unsigned)op < HR_OP_COUNT && op_names[op] ? op_names[op] : "?"; }

/* What a node runs, for people (profiles, traces, errors): the op's name, or
 * the pair a Linear with an activation in its epilogue runs, a norm with
 * the Add before it, or a norm's backward with the next Linear's bias
 * gradient. */
#define HR_X_ADD_THEN(E, id, k, name) "Add+" name,
static const char *const add_then[] = {HR_OP_LIST(HR_X_ADD_THEN)};
#undef HR_X_ADD_THEN
#define HR_X_THEN_BIAS(E, id, k, name) name "+bias",
static const char *const then_bias[] = {HR_OP_LIST(HR_X_THEN_BIAS)};
#undef HR_X_THEN_BIAS
#define HR_X_LINEAR_WITH(E, id, k, name) "Linear+" name,
#define HR_X_LINEAR_BWD_WITH(E, id, k, name) "Linear.backward+" name ".backward",
static const char *const linear_with[] = {HR_OP_LIST(HR_X_LINEAR_WITH)};
static const char *const linear_bwd_with[] = {HR_OP_LIST(HR_X_LINEAR_BWD_WITH)};
#undef HR_X_LINEAR_WITH
#undef HR_X_LINEAR_BWD_WITH

const char *hr_node_op_name(const hr_node *n) {
    if (n->op == HR_OP_LINEAR && n->a.act > 0 && n->a.act < HR_OP_COUNT) return linear_with[n->a.act];
    if (n->op == HR_OP_LINEAR_BWD && n->a.dact > 0 && n->a.dact < HR_OP_COUNT) return linear_bwd_with[n->a.dact];
    if (n->a.pre_add && (unsigned)n->op < HR_OP_COUNT) return add_then[n->op];
    if (n->a.post_bias && (unsigned)n->op < HR_OP_COUNT) return then_bias[n->op];
    return hr_op_name(n->op);
}

void hr_graph_free(hr_graph *g) {
    for (int i = 0; i < g->nt; i++) hr_free(g->t[i].name);
    for (int i = 0; i < g->nl; i++) {
        hr_free(g->l[i].name);
        hr_free(g->l[i].file);
    }
    hr_free(g->t);
    hr_free(g->n);
    hr_free(g->l);
    memset(g, 0, sizeof *g);
}

static bool grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = hr_realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

int hr_graph_add_tensor(hr_graph *g, const char *name, hr_dtype dt, hr_shape shape, bool batched,
                        hr_tensor_kind kind, int layer) {
    if (!grow((void **)&g->t, &g->capt, g->nt + 1, sizeof *g->t)) return -1;
    char *nm = hr_strdup(name);
    if (!nm) return -1;
    hr_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->shape = shape;
    t->batched = batched;
    t->kind = kind;
    t->layer = layer;
    t->grad = -1;
    t->source = -1;
    t->alias = -1;
    return g->nt++;
}

int hr_graph_add_node(hr_graph *g, const hr_node *n) {
    if (!grow((void **)&g->n, &g->capn, g->nn + 1, sizeof *g->n)) return -1;
    g->n[g->nn] = *n;
    return g->nn++;
}

hr_node hr_node_make(hr_op op, int layer) {
    hr_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.layer = layer;
    n.ws = -1;
    for (int i = 0; i < HR_NODE_MAX_IO; i++) n.in[i] = n.out[i] = -1;
    return n;
}

void hr_graph_remove_node(hr_graph *g, int s) {
    if (s < 0 || s >= g->nn) return;
    memmove(&g->n[s], &g->n[s + 1], sizeof(hr_node) * (size_t)(g->nn - s - 1));
    g->nn--;
}

bool hr_graph_read_elsewhere(const hr_graph *g, int t, int but) {
    for (int s = 0; s < g->nn; s++)
        for (int i = 0; i < g->n[s].nin; i++)
            if (g->n[s].in[i] == t && s != but) return true;
    return false;
}

hr_status hr_graph_copy(hr_graph *dst, const hr_graph *src) {
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->nt; i++) {
        const hr_tensor *s = &src->t[i];
        int k = hr_graph_add_tensor(dst, s->name, s->dtype, s->shape, s->batched, s->kind, s->layer);
        if (k < 0) goto fail;
        char *nm = dst->t[k].name;
        dst->t[k] = *s;
        dst->t[k].name = nm;
    }
    for (int i = 0; i < src->nn; i++)
        if (hr_graph_add_node(dst, &src->n[i]) < 0) goto fail;
    for (int i = 0; i < src->nl; i++) {
        if (!grow((void **)&dst->l, &dst->capl, dst->nl + 1, sizeof *dst->l)) goto fail;
        hr_layer *l = &dst->l[dst->nl];
        *l = src->l[i];
        l->name = NULL;
        l->file = NULL;
        dst->nl++;
        if (!(l->name = hr_strdup(src->l[i].name))) goto fail;
        if (src->l[i].file && !(l->file = hr_strdup(src->l[i].file))) goto fail;
    }
    return HR_OK;
fail:
    hr_graph_free(dst);
    return HR_ERR_OOM;
}

/* ---- the model --------------------------------------------------------------- */
hr_model_t *hr_model_new(const char *name) {
    hr_model_t *m = hr_calloc(1, sizeof *m);
    if (!m) return NULL;
    if (!(m->name = hr_strdup(name ? name : "model"))) {
        hr_free(m);
        return NULL;
    }
    m->input = m->label = m->output = m->loss = -1;
    return m;
}

void hr_model_free(hr_model_t *m) {
    if (!m) return;
    hr_free(m->names);
    hr_graph_free(&m->g);
    hr_free(m->name);
    hr_free(m->src_file);
    hr_free(m);
}

void hr_model_set_source(hr_model_t *m, const char *file, int line) {
    if (!m) return;
    char *f = file ? hr_strdup(file) : NULL;
    if (file && !f) m->broken = m->oom = true; /* the next builder reports it */
    hr_free(m->src_file);
    m->src_file = f;
    m->src_line = line;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001B3ULL;
    return hr_mix64(h);
}

/* The slot of `name` in m->names: its layer's, or the empty one where it goes. */
static int name_slot(const hr_model_t *m, const char *name) {
    int mask = m->names_cap - 1, i = (int)(name_hash(name) & (uint64_t)mask);
    while (m->names[i] >= 0 && strcmp(m->g.l[m->names[i]].name, name) != 0) i = (i + 1) & mask;
    return i;
}

hr_status hr_model_set_init(hr_model_t *m, const char *scheme) {
    if (!m || !scheme) return hr_error_set(HR_ERR_INVALID_ARG, "hr_model_set_init: NULL argument");
    if (strcmp(scheme, "pytorch") && strcmp(scheme, "gpt2"))
        return hr_error_set(HR_ERR_INVALID_ARG, "init '%s': the schemes are pytorch (each layer's default) and gpt2",
                            scheme);
    m->init_gpt2 = !strcmp(scheme, "gpt2");
    return HR_OK;
}

int hr_model_find_layer(const hr_model_t *m, const char *name) {
    return m && name && m->names_cap ? m->names[name_slot(m, name)] : -1;
}

/* Room for one more layer name (rehashed at half full); false: out of memory. */
static bool names_reserve(hr_model_t *m) {
    if (2 * (m->g.nl + 1) <= m->names_cap) return true;
    int cap = m->names_cap ? 2 * m->names_cap : 64;
    int *old = m->names, n = m->g.nl;
    if (!(m->names = hr_malloc(sizeof(int) * (size_t)cap))) {
        m->names = old;
        return false;
    }
    hr_free(old);
    m->names_cap = cap;
    for (int i = 0; i < cap; i++) m->names[i] = -1;
    for (int k = 0; k < n; k++) m->names[name_slot(m, m->g.l[k].name)] = k;
    return true;
}

int hr_model_begin_layer(hr_model_t *m, const char *name, const char *type) {
    hr_graph *g = &m->g;
    char buf[32];
    if (!name) {
        snprintf(buf, sizeof buf, "%d", g->nl);
        name = buf;
    }
    if (!names_reserve(m)) return -1;
    int slot = name_slot(m, name);
    if (m->names[slot] >= 0) {
        hr_error_set(HR_ERR_INVALID_ARG, "%s%s%d%slayer name '%s' is used twice; give each layer its own name",
                     m->src_file ? m->src_file : "", m->src_file ? ":" : "", m->src_line, m->src_file ? ": " : "",
                     name);
        m->broken = true;
        return -1;
    }
    if (!grow((void **)&g->l, &g->capl, g->nl + 1, sizeof *g->l)) return -1;
    hr_layer *l = &g->l[g->nl];
    memset(l, 0, sizeof *l);
    l->type = type;
    l->line = m->src_line;
    l->out = -1;
    if (!(l->name = hr_strdup(name))) return -1;
    if (m->src_file && !(l->file = hr_strdup(m->src_file))) {
        hr_free(l->name);
        return -1;
    }
    m->names[slot] = g->nl;
    return g->nl++;
}

const char *hr_layer_where(const hr_model_t *m, int layer, char *buf, size_t n) {
    if (layer < 0 || layer >= m->g.nl) {
        snprintf(buf, n, "model '%s'", m->name);
        return buf;
    }
    return hr_graph_layer_where(&m->g, layer, buf, n);
}

const char *hr_graph_layer_where(const hr_graph *g, int layer, char *buf, size_t n) {
    if (layer < 0 || layer >= g->nl) {
        snprintf(buf, n, "the update");
        return buf;
    }
    const hr_layer *l = &g->l[layer];
    if (l->file)
        snprintf(buf, n, "%s:%d: layer %s (%s)", l->file, l->line, l->name, l->type);
    else
        snprintf(buf, n, "layer %s (%s)", l->name, l->type);
    return buf;
}

bool hr_model_check_tensor(hr_model_t *m, int t, const char *what) {
    if (!m) {
        hr_error_set(HR_ERR_INVALID_ARG, "%s: the model is NULL", what);
        return false;
    }
    if (m->broken && m->oom) {
        hr_error_set(HR_ERR_OOM, "%s: out of host memory while building the model", what);
        return false;
    }
    if (m->broken) {
        hr_error_set(HR_ERR_INVALID_ARG, "%s: an earlier layer of this model failed to build; fix that first", what);
        return false;
    }
    if (m->loss >= 0) {
        m->broken = true;
        hr_error_set(HR_ERR_INVALID_ARG, "%s: the model already ends in a loss; layers go before the loss line", what);
        return false;
    }
    if (t < 0 || t >= m->g.nt || (m->g.t[t].kind != HR_T_ACT && m->g.t[t].kind != HR_T_INPUT)) {
        m->broken = true;
        hr_error_set(HR_ERR_INVALID_ARG, "%s: input tensor %d is not an output of this model (is there an input line?)",
                     what, t);
        return false;
    }
    return true;
}

int hr_model_add_param(hr_model_t *m, int layer, const char *suffix, int ndim, const int64_t *dims, hr_tensor_kind kind) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.%s", m->g.l[layer].name, suffix);
    int t = hr_graph_add_tensor(&m->g, nm, HR_F32, hr_shape_make(ndim, dims), false, kind, layer);
    if (t >= 0 && kind == HR_T_PARAM) m->g.t[t].requires_grad = true;
    return t;
}

int hr_model_add_act(hr_model_t *m, int layer, const char *suffix, hr_shape per_sample) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.%s", m->g.l[layer].name, suffix);
    int t = hr_graph_add_tensor(&m->g, nm, HR_F32, per_sample, true, HR_T_ACT, layer);
    if (t >= 0 && strcmp(suffix, "out") == 0) m->g.l[layer].out = t;
    return t;
}

int hr_tensor_ndim(const hr_model_t *m, int t) { return m && t >= 0 && t < m->g.nt ? m->g.t[t].shape.ndim : -1; }
int64_t hr_tensor_dim(const hr_model_t *m, int t, int i) {
    if (!m || t < 0 || t >= m->g.nt || i < 0 || i >= m->g.t[t].shape.ndim) return -1;
    return m->g.t[t].shape.d[i];
}
int hr_model_output(const hr_model_t *m) { return m ? m->output : -1; }

hr_status hr_model_freeze(hr_model_t *m, const char *param_name) {
    if (!m || !param_name) return hr_error_set(HR_ERR_INVALID_ARG, "freeze: NULL model or parameter name");
    for (int i = 0; i < m->g.nt; i++)
        if (m->g.t[i].kind == HR_T_PARAM && strcmp(m->g.t[i].name, param_name) == 0) {
            m->g.t[i].requires_grad = false;
            return HR_OK;
        }
    return hr_error_set(HR_ERR_INVALID_ARG, "freeze: no parameter named '%s' in model '%s'", param_name, m->name);
}
int hr_model_input(const hr_model_t *m) { return m ? m->input : -1; }

/* The batch: one per model, the first tensor of the forward graph. */
int hr_input(hr_model_t *m, const char *name, int ndim, const int64_t *dims) {
    if (!m) return hr_error_set(HR_ERR_INVALID_ARG, "input: the model is NULL"), -1;
    if (m->input >= 0) {
        m->broken = true;
        return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: the model already has an input; write one input line",
                            m->src_file ? m->src_file : "model", m->src_line), -1;
    }
    if (ndim < 1 || ndim > 3) {
        m->broken = true;
        return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: input takes 1 to 3 sizes (features, or C H W), got %d",
                            m->src_file ? m->src_file : "model", m->src_line, ndim), -1;
    }
    for (int i = 0; i < ndim; i++)
        if (dims[i] <= 0 || dims[i] > (1LL << 31)) {
            m->broken = true;
            return hr_error_set(HR_ERR_INVALID_ARG, "%s:%d: input size %d is %lld; sizes must be in [1, 2^31]",
                                m->src_file ? m->src_file : "model", m->src_line, i + 1, (long long)dims[i]), -1;
        }
    int t = hr_graph_add_tensor(&m->g, name ? name : "input", HR_F32, hr_shape_make(ndim, dims), true, HR_T_INPUT, -1);
    if (t < 0) {
        m->broken = true;
        return -1;
    }
    m->input = m->output = t;
    return t;
}
