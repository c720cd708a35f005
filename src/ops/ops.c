/* ops.c — the registry of op descriptors, built from the one op list, and
 * the helpers that every family's builders and backward builders share. */
#include "ops/ops.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

const hr_op_desc *const hr_op_descs[HR_OP_COUNT] = {
#define X(E, id, k, name) [HR_OP_##E] = &hr_opdesc_##id,
    HR_OP_LIST(X)
#undef X
};
_Static_assert(sizeof hr_op_descs / sizeof *hr_op_descs == HR_OP_COUNT, "a descriptor for every op");

float hr_lr_at(const hr_optim_t *o, int64_t t) {
    int64_t it = t > 1 ? t - 1 : 0; /* nanoGPT's iteration, from 0 */
    if (o->warmup_steps > 0 && it < o->warmup_steps) return (float)((double)o->lr * (double)(it + 1) / (double)(o->warmup_steps + 1));
    if (o->decay_steps <= 0) return o->lr;
    if (it > o->decay_steps) return o->min_lr;
    double ratio = (double)(it - o->warmup_steps) / (double)(o->decay_steps - o->warmup_steps);
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));
    return (float)((double)o->min_lr + coeff * ((double)o->lr - (double)o->min_lr));
}

hr_step_info hr_step_info_make(int64_t t, const hr_config_t *cfg, int sqnorm) {
    hr_step_info si;
    memset(&si, 0, sizeof si);
    si.t = t;
    si.lr = hr_lr_at(&cfg->optim, t);
    si.seed = cfg->seed;
    si.optim = cfg->optim;
    si.sqnorm = sqnorm;
    si.loss_scale = si.inv_scale = 1.0f;
    return si;
}

/* The node's activation type: its first input that is a floating-point
 * activation (or activation gradient); F32 when it has none. */
static hr_dtype act_dtype(const hr_graph *g, const hr_node *n) {
    for (int i = 0; i < n->nin; i++) {
        if (n->in[i] < 0) continue;
        const hr_tensor *t = &g->t[n->in[i]];
        bool act = t->kind == HR_T_ACT || t->kind == HR_T_ACT_GRAD || t->kind == HR_T_INPUT;
        if (act && (t->dtype == HR_F32 || t->dtype == HR_F16 || t->dtype == HR_BF16)) return t->dtype;
    }
    return HR_F32;
}

void hr_op_unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    memset(a, 0, sizeof *a);
    a->op = n->op;
    a->dt = act_dtype(g, n);
    if (n->ws >= 0) {
        a->ws = hr_ptr(ptr, n->ws);
        a->ws_bytes = (size_t)hr_shape_numel(&g->t[n->ws].shape);
    }
    hr_op_descs[n->op]->unpack(g, n, ptr, si, a);
}

/* ---- model-file layers ----------------------------------------------------- */
/* The ops' layer tables, then the blocks' (index HR_OP_COUNT). */
static const hr_layer_sig *layer_table(int i) { return i < HR_OP_COUNT ? hr_op_descs[i]->layers : hr_block_layers; }

const hr_layer_sig *hr_layer_find(const char *name, int len, bool loss) {
    for (int op = 0; op <= HR_OP_COUNT; op++)
        for (const hr_layer_sig *l = layer_table(op); l && l->name; l++)
            if ((l->inputs == HR_LAYER_LOSS) == loss && (int)strlen(l->name) == len && !strncmp(l->name, name, (size_t)len))
                return l;
    return NULL;
}

const char *hr_layer_names(bool loss, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int op = 0; op <= HR_OP_COUNT; op++)
        for (const hr_layer_sig *l = layer_table(op); l && l->name; l++)
            if ((l->inputs == HR_LAYER_LOSS) == loss && k < n)
                k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", l->name);
    return buf;
}

bool hr_arg_is(const hr_arg *a, const char *word) {
    size_t n = strlen(word);
    return a->is_str && a->len == (int)n + 2 && !strncmp(a->src + 1, word, n);
}

/* ---- autodiff -------------------------------------------------------------- */
int hr_ad_grad_out(hr_autodiff *ad, int x, bool *accum) {
    *accum = false;
    if (x < 0 || !ad->needs_grad[x]) return -1;
    /* a weight's half copy: the product writes the weight's own F32 gradient */
    if (ad->g->t[x].kind == HR_T_WCOPY) x = ad->g->t[x].source;
    if (!ad->needs_grad[x]) return -1;
    if (ad->grad[x] >= 0) {
        *accum = true;
        return ad->grad[x];
    }
    hr_tensor *t = &ad->g->t[x];
    char nm[300];
    snprintf(nm, sizeof nm, "%s.grad", t->name);
    bool param = t->kind == HR_T_PARAM;
    int gt = hr_graph_add_tensor(ad->g, nm, t->dtype, ad->g->t[x].shape, ad->g->t[x].batched,
                                 param ? HR_T_GRAD : HR_T_ACT_GRAD, ad->g->t[x].layer);
    if (gt < 0) return -2;
    ad->g->t[gt].source = x;
    ad->g->t[x].grad = gt;
    ad->grad[x] = gt;
    return gt;
}

int hr_ad_grad_in(const hr_autodiff *ad, int y) { return y >= 0 ? ad->grad[y] : -1; }

int hr_ad_emit(hr_autodiff *ad, hr_node *n) {
    /* An output is accumulated iff an earlier node already wrote that gradient. */
    for (int i = 0; i < n->nout; i++) {
        int o = n->out[i];
        if (o < 0) continue;
        n->accum[i] = ad->written[o];
    }
    int k = hr_graph_add_node(ad->g, n);
    if (k < 0) return -1;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] >= 0) ad->written[n->out[i]] = true;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0) ad->read[n->in[i]] = true;
    return k;
}

int hr_ad_add_saved(hr_autodiff *ad, const char *suffix, hr_dtype dt, int64_t numel) {
    hr_node *f = &ad->g->n[ad->cur];
    if (ad->g->nt >= ad->cap || f->nout >= HR_NODE_MAX_IO) return -1;
    char nm[300];
    int layer = f->layer;
    snprintf(nm, sizeof nm, "%s.%s", layer >= 0 ? ad->g->l[layer].name : "node", suffix);
    int t = hr_graph_add_tensor(ad->g, nm, dt, hr_shape_make(1, &numel), false, HR_T_ACT, layer);
    if (t < 0) return -1;
    f = &ad->g->n[ad->cur]; /* adding a tensor does not move nodes, but be plain about it */
    if (f->nout < 2) f->nout = 2;
    f->out[1] = t;
    return t;
}

hr_status hr_ad_simple(hr_autodiff *ad, const hr_node *f, hr_op op, int saved0, int saved1) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    bool acc;
    hr_node n = hr_node_make(op, f->layer);
    n.a = f->a;
    n.out[0] = hr_ad_grad_out(ad, f->in[0], &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK;
    n.nout = 1;
    if (saved0 >= 0) n.in[n.nin++] = saved0;
    if (saved1 >= 0) n.in[n.nin++] = saved1;
    n.in[n.nin++] = dy;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

hr_status hr_ad_copy(hr_autodiff *ad, int layer, int dy, int x) {
    bool acc;
    int dx = hr_ad_grad_out(ad, x, &acc);
    if (dx == -2) return HR_ERR_OOM;
    if (dx < 0) return HR_OK;
    /* in x's type: a Copy, or a Cast where they differ (mixed precision) */
    hr_node n = hr_node_make(ad->g->t[dx].dtype == ad->g->t[dy].dtype ? HR_OP_COPY : HR_OP_CAST, layer);
    n.out[0] = dx;
    n.in[0] = dy;
    n.nin = 1;
    n.nout = 1;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* ---- builders ---------------------------------------------------------------- */
int hr_build_fail(hr_model_t *m, int layer, hr_status st, const char *fmt, ...) {
    char where[512], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hr_layer_where(m, layer, where, sizeof where);
    hr_error_set(st, "%s: %s", where, msg);
    m->broken = true;
    return -1;
}

int hr_model_fail(hr_model_t *m, hr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m->src_file)
        hr_error_set(st, "%s:%d: %s", m->src_file, m->src_line, msg);
    else
        hr_error_set(st, "%s", msg);
    m->broken = true;
    return -1;
}

int hr_build_node(hr_model_t *m, hr_node *n) {
    if (hr_graph_add_node(&m->g, n) < 0) {
        m->broken = true;
        return -1;
    }
    m->output = n->out[0];
    return n->out[0];
}

int hr_build_unary(hr_model_t *m, const char *name, const char *type, hr_op op, int x, const hr_attr *a) {
    if (!hr_model_check_tensor(m, x, type)) return -1;
    int L = hr_model_begin_layer(m, name, type);
    if (L < 0) return -1;
    hr_node n = hr_node_make(op, L);
    if (a) n.a = *a;
    n.in[0] = x;
    n.nin = 1;
    n.out[0] = hr_model_add_act(m, L, "out", m->g.t[x].shape);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

int64_t hr_numel_from(const hr_graph *g, int t, int from) {
    int64_t r = 1;
    const hr_shape *s = &g->t[t].shape;
    for (int i = from; i < s->ndim; i++) r *= s->d[i];
    return r;
}

void hr_init_normal(int64_t n, double std, uint64_t seed, uint64_t stream, float *v) {
    for (int64_t i = 0; i < n; i++) {
        double u1 = hr_rng_uniform(seed, stream, 2 * (uint64_t)i), u2 = hr_rng_uniform(seed, stream, 2 * (uint64_t)i + 1);
        v[i] = (float)(std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
    }
}

void hr_init_fan_in(const hr_tensor *w, int64_t n, uint64_t seed, uint64_t stream, float *v) {
    int64_t fan_in = 1;
    for (int d = 1; d < w->shape.ndim; d++) fan_in *= w->shape.d[d];
    double bound = 1.0 / sqrt((double)fan_in);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((double)(2.0f * hr_rng_uniform(seed, stream, (uint64_t)i) - 1.0f) * bound);
}
