/* attention.c — causal multi-head self-attention (scaled_dot_product_attention
 * with is_causal=True over nanoGPT's q|k|v projection): shape rule, backward,
 * kernel arguments. What it keeps for the backward is its output and one
 * log-sum-exp a query and head, never the time x time probabilities: the
 * backward computes them again. */
#include "ops/ops.h"

#include <math.h>

/* in {qkv (N, T, 3C)}, out {y (N, T, C), lse (N, H, T) in training};
 * backward: in {qkv, y, lse, dy}, out {dqkv}. q, k and v are qkv's thirds,
 * each split into H heads of C/H channels (nanoGPT's CausalSelfAttention
 * after c_attn); the scale is 1/sqrt(C/H). */
int hr_causal_attention(hr_model_t *m, const char *name, int qkv, int64_t heads) {
    return hr_causal_attention_pdrop(m, name, qkv, heads, 0.0f);
}

/* attn_pdrop > 0: in training each probability is dropped with that
 * probability and the kept ones scaled by 1 / (1 - attn_pdrop), as
 * scaled_dot_product_attention does with a drop probability; the decisions
 * are drawn again in the backward pass from (seed, layer, step, sequence,
 * head, i, j), never stored. */
int hr_causal_attention_pdrop(hr_model_t *m, const char *name, int qkv, int64_t heads, float attn_pdrop) {
    if (!hr_model_check_tensor(m, qkv, "CausalSelfAttention")) return -1;
    int L = hr_model_begin_layer(m, name, "CausalSelfAttention");
    if (L < 0) return -1;
    if (!(attn_pdrop >= 0.0f && attn_pdrop < 1.0f))
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "attn_pdrop must be in [0, 1), got %g", attn_pdrop);
    const hr_tensor *xt = &m->g.t[qkv];
    char sb[64];
    if (xt->shape.ndim != 2 || xt->shape.d[1] % 3)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "CausalSelfAttention takes (batch, time, 3 x channels), the query, key "
                             "and value projections side by side, but its input has per-sample shape %s",
                             hr_shape_str(&xt->shape, sb, sizeof sb));
    int64_t T = xt->shape.d[0], C = xt->shape.d[1] / 3;
    if (heads <= 0 || C % heads)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "num_heads is %lld; it must divide the %lld channels",
                             (long long)heads, (long long)C);
    hr_node n = hr_node_make(HR_OP_ATTENTION, L);
    n.a.in_f = C;
    n.a.out_f = heads;
    n.a.p = attn_pdrop;
    n.a.seed = (uint64_t)L;
    n.in[0] = qkv;
    n.nin = 1;
    n.out[0] = hr_model_add_act(m, L, "out", hr_shape_make(2, (int64_t[]){T, C}));
    n.out[1] = hr_model_add_act(m, L, "lse", hr_shape_make(2, (int64_t[]){heads, T}));
    n.nout = 2;
    if (n.out[0] < 0 || n.out[1] < 0) return -1;
    return hr_build_node(m, &n);
}

/* CausalSelfAttention(embed_dim, num_heads): the input is the 3 x embed_dim
 * projection (a Linear(embed_dim, 3 * embed_dim) before it) */
static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    int nd = hr_tensor_ndim(m, c->x[0]);
    if (nd == 2 && hr_tensor_dim(m, c->x[0], 1) != 3 * c->a[0].i)
        return hr_model_fail(m, HR_ERR_SHAPE, "CausalSelfAttention(%lld, ...) takes the 3 x %lld = %lld channels of "
                             "q, k and v, but its input has %lld", (long long)c->a[0].i, (long long)c->a[0].i,
                             (long long)(3 * c->a[0].i), (long long)hr_tensor_dim(m, c->x[0], 1));
    if (!(c->a[2].f >= 0 && c->a[2].f < 1))
        return hr_model_fail(m, HR_ERR_PARSE, "CausalSelfAttention attn_pdrop must be in [0, 1), got %.*s", c->a[2].len,
                             c->a[2].src);
    return hr_causal_attention_pdrop(m, name, c->x[0], c->a[1].i, (float)c->a[2].f);
}

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    bool acc;
    hr_node n = hr_node_make(HR_OP_ATTENTION_BWD, f->layer);
    n.a = f->a;
    n.out[0] = hr_ad_grad_out(ad, f->in[0], &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK;
    n.nout = 1;
    n.in[0] = f->in[0];
    n.in[1] = f->out[0];
    n.in[2] = f->out[1];
    n.in[3] = dy;
    n.nin = 4;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_attention_args *p = &a->attn;
    const hr_shape *s = &g->t[n->in[0]].shape; /* (N, T, 3C) */
    p->N = s->d[0];
    p->T = s->d[1];
    p->C = n->a.in_f;
    p->H = n->a.out_f;
    p->scale = (float)(1.0 / sqrt((double)(p->C / p->H)));
    /* the drop decisions of step t+1 (t: steps taken), a stream per layer
     * and step; a micro-batch's continue the whole batch's */
    p->pdrop = n->a.train ? n->a.p : 0.0f;
    p->pscale = 1.0f / (1.0f - p->pdrop);
    p->seed = si ? si->seed : 0;
    p->stream_base = n->a.seed << 32;
    p->stream = p->stream_base ^ (uint64_t)((si ? si->t : 0) + 1);
    p->first = si ? (uint64_t)si->sample0 : 0;
    p->dv = si ? si->dvars : NULL;
    p->qkv = hr_ptr(ptr, n->in[0]);
    if (n->op == HR_OP_ATTENTION) {
        p->y = hr_ptr(ptr, n->out[0]);
        p->lse = n->nout > 1 ? hr_ptr(ptr, n->out[1]) : NULL;
        return;
    }
    p->y_saved = hr_ptr(ptr, n->in[1]);
    p->lse_saved = hr_ptr(ptr, n->in[2]);
    p->dy = hr_ptr(ptr, n->in[3]);
    p->dqkv = hr_ptr(ptr, n->out[0]);
    p->acc = n->accum[0];
}

/* Causal: about T^2/2 query-key pairs a head, each a dot product of C/H in
 * q.k and again in p.v (4 flops a channel a pair forward); the backward
 * computes the probabilities again and has four such products. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    const hr_attention_args *p = &a.attn;
    double pairs = (double)p->N * (double)p->H * (double)p->T * (double)(p->T + 1) / 2;
    double hs = (double)(p->C / p->H);
    w->flops = pairs * (hs * (n->op == HR_OP_ATTENTION ? 4 : 10) + (p->pdrop > 0 ? 13 : 0)); /* + a draw a pair */
    w->bytes = hr_work_io_bytes(g, n);
    w->matmul = true;
}

static const hr_layer_sig layers[] = {
    {"CausalSelfAttention",
     {HR_REQ("embed_dim", HR_ARG_SIZE), HR_REQ("num_heads", HR_ARG_SIZE), HR_OPT("attn_pdrop", HR_ARG_FLOAT, "0.0")},
     HR_LAYER_ONE, build},
    {0},
};

/* In the half type under autocast, as PyTorch's scaled_dot_product_attention:
 * q, k, v, y and their gradients in bf16/fp16, the products accumulated in
 * F32, the log-sum-exp kept in F32 (autocast types out[0] only). */
const hr_op_desc hr_opdesc_attention = {.layers = layers, .backward = backward, .unpack = unpack,
                                        .train_outputs = true, .autocast = HR_AC_HALF, .work = work};
const hr_op_desc hr_opdesc_attention_bwd = {.unpack = unpack, .autocast = HR_AC_HALF, .work = work};
