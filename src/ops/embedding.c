/* embedding.c — Embedding (nn.Embedding: a table of vectors looked up by token
 * id) and PositionEmbedding (GPT's learned positions: the row of each position
 * added to the input): shape rules, parameters and their init, backward and
 * kernel arguments. */
#include "ops/ops.h"

#include <math.h>

/* Embedding: in {idx (N, T) token ids as floats, W (V, C)}, out {y (N, T, C)}.
 * The ids must be the batch's input, where they are checked as it is uploaded
 * (an id that is not an integer in [0, V) is refused before the step runs).
 * Embedding.backward: in {idx, dy}, out {dW}: no gradient reaches the ids. */
int hr_embedding(hr_model_t *m, const char *name, int x, int64_t num_embeddings, int64_t dim) {
    if (!hr_model_check_tensor(m, x, "Embedding")) return -1;
    int L = hr_model_begin_layer(m, name, "Embedding");
    if (L < 0) return -1;
    const hr_tensor *xt = &m->g.t[x];
    char sb[64];
    if (num_embeddings <= 0 || dim <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "num_embeddings and embedding_dim must be positive (got %lld, %lld)",
                             (long long)num_embeddings, (long long)dim);
    if (num_embeddings > (1 << 24))
        return hr_build_fail(m, L, HR_ERR_UNSUPPORTED, "num_embeddings is %lld; headroom carries token ids as float32, "
                             "exact up to 2^24 = 16777216", (long long)num_embeddings);
    if (xt->kind != HR_T_INPUT)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "Embedding looks up the model's input (its token ids); it cannot follow "
                             "another layer");
    if (xt->shape.ndim != 1)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "Embedding takes (batch, time) token ids but its input has per-sample "
                             "shape %s; write the input as `input T`", hr_shape_str(&xt->shape, sb, sizeof sb));
    int64_t T = xt->shape.d[0]; /* read now: adding tensors moves xt */
    hr_node n = hr_node_make(HR_OP_EMBEDDING, L);
    n.a.in_f = num_embeddings;
    n.a.out_f = dim;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 2, (int64_t[]){num_embeddings, dim}, HR_T_PARAM);
    n.nin = 2;
    if (n.in[1] < 0) return -1;
    n.out[0] = hr_model_add_act(m, L, "out", hr_shape_make(2, (int64_t[]){T, dim}));
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

/* PositionEmbedding: in {x (N, T, C), W (max_positions, C)}, out {y = x + W[t]}.
 * backward: dx = dy (a copy the planner may alias) and, from
 * PositionEmbedding.backward: in {dy}, out {dW} = dy summed over the batch. */
int hr_position_embedding(hr_model_t *m, const char *name, int x, int64_t max_positions, int64_t dim) {
    if (!hr_model_check_tensor(m, x, "PositionEmbedding")) return -1;
    int L = hr_model_begin_layer(m, name, "PositionEmbedding");
    if (L < 0) return -1;
    const hr_tensor *xt = &m->g.t[x];
    char sb[64];
    if (max_positions <= 0 || dim <= 0)
        return hr_build_fail(m, L, HR_ERR_INVALID_ARG, "num_positions and embedding_dim must be positive (got %lld, %lld)",
                             (long long)max_positions, (long long)dim);
    if (xt->shape.ndim != 2 || xt->shape.d[1] != dim)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "PositionEmbedding adds to (batch, time, %lld) but its input has "
                             "per-sample shape %s", (long long)dim, hr_shape_str(&xt->shape, sb, sizeof sb));
    if (xt->shape.d[0] > max_positions)
        return hr_build_fail(m, L, HR_ERR_SHAPE, "the sequence has %lld positions but the table only %lld; raise "
                             "num_positions (the context length) to at least %lld", (long long)xt->shape.d[0],
                             (long long)max_positions, (long long)xt->shape.d[0]);
    hr_shape ys = xt->shape; /* copied now: adding tensors moves xt */
    hr_node n = hr_node_make(HR_OP_POS_EMBEDDING, L);
    n.a.in_f = max_positions;
    n.a.out_f = dim;
    n.in[0] = x;
    n.in[1] = hr_model_add_param(m, L, "weight", 2, (int64_t[]){max_positions, dim}, HR_T_PARAM);
    n.nin = 2;
    if (n.in[1] < 0) return -1;
    n.out[0] = hr_model_add_act(m, L, "out", ys);
    n.nout = 1;
    if (n.out[0] < 0) return -1;
    return hr_build_node(m, &n);
}

static int build(hr_model_t *m, const char *name, const hr_layer_call *c) {
    return hr_embedding(m, name, c->x[0], c->a[0].i, c->a[1].i);
}

static int build_pos(hr_model_t *m, const char *name, const hr_layer_call *c) {
    return hr_position_embedding(m, name, c->x[0], c->a[0].i, c->a[1].i);
}

static hr_status backward(hr_autodiff *ad, const hr_node *f) {
    int dy = hr_ad_grad_in(ad, f->out[0]);
    if (dy < 0) return HR_OK;
    bool pos = f->op == HR_OP_POS_EMBEDDING;
    if (pos) { /* the input's gradient is dy as it is */
        hr_status st = hr_ad_copy(ad, f->layer, dy, f->in[0]);
        if (st != HR_OK) return st;
    }
    bool acc;
    hr_node n = hr_node_make(pos ? HR_OP_POS_EMBEDDING_BWD : HR_OP_EMBEDDING_BWD, f->layer);
    n.a = f->a;
    n.out[0] = hr_ad_grad_out(ad, f->in[1], &acc);
    if (n.out[0] == -2) return HR_ERR_OOM;
    if (n.out[0] < 0) return HR_OK; /* a frozen table */
    n.nout = 1;
    if (!pos) n.in[n.nin++] = f->in[0];
    n.in[n.nin++] = dy;
    return hr_ad_emit(ad, &n) < 0 ? HR_ERR_OOM : HR_OK;
}

/* N(0, 1), as nn.Embedding.reset_parameters. */
static void init(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v) {
    hr_init_normal(hr_shape_numel(&g->t[n->in[slot]].shape), 1.0, seed, stream, v);
}

static void unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a) {
    hr_embedding_args *e = &a->emb;
    bool fwd = n->op == HR_OP_EMBEDDING || n->op == HR_OP_POS_EMBEDDING;
    bool pos = n->op == HR_OP_POS_EMBEDDING || n->op == HR_OP_POS_EMBEDDING_BWD;
    e->V = n->a.in_f;
    e->C = n->a.out_f;
    const hr_shape *ys = &g->t[fwd ? n->out[0] : n->in[n->nin - 1]].shape; /* (N, T, C) */
    e->N = ys->d[0];
    e->T = ys->d[1];
    e->n = e->N * e->T;
    if (fwd) {
        if (pos)
            e->x = hr_ptr(ptr, n->in[0]);
        else
            e->idx = hr_ptr(ptr, n->in[0]);
        e->w = hr_ptr(ptr, n->in[1]);
        e->y = hr_ptr(ptr, n->out[0]);
        return;
    }
    if (!pos) e->idx = hr_ptr(ptr, n->in[0]);
    e->dy = hr_ptr(ptr, n->in[n->nin - 1]);
    e->dw = hr_ptr(ptr, n->out[0]);
    e->acc = n->accum[0];
}

/* A row copied (and added, for positions) a token; the backward's adds. */
static void work(const hr_graph *g, const hr_node *n, hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    bool pos = n->op == HR_OP_POS_EMBEDDING || n->op == HR_OP_POS_EMBEDDING_BWD;
    bool fwd = n->op == HR_OP_EMBEDDING || n->op == HR_OP_POS_EMBEDDING;
    w->flops = (fwd && !pos) ? 0 : (double)a.emb.n * (double)a.emb.C;
    w->bytes = hr_work_io_bytes(g, n);
}

static const hr_layer_sig layers[] = {
    {"Embedding",
     {HR_REQ("num_embeddings", HR_ARG_SIZE), HR_REQ("embedding_dim", HR_ARG_SIZE), HR_FIX("padding_idx", HR_ARG_OPTSIZE, "None"),
      HR_FIX("max_norm", HR_ARG_OPTSIZE, "None"), HR_FIX("scale_grad_by_freq", HR_ARG_BOOL, "False"),
      HR_FIX("sparse", HR_ARG_BOOL, "False")},
     HR_LAYER_ONE, build},
    {0},
};
static const hr_layer_sig pos_layers[] = {
    {"PositionEmbedding", {HR_REQ("num_positions", HR_ARG_SIZE), HR_REQ("embedding_dim", HR_ARG_SIZE)}, HR_LAYER_ONE,
     build_pos},
    {0},
};

/* the table gets the gradient, the ids none; autocast runs it in fp32 (as
 * torch.autocast does embedding) */
const hr_op_desc hr_opdesc_embedding = {.layers = layers, .backward = backward, .unpack = unpack, .init = init,
                                        .grad_inputs = 2, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_embedding_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .work = work};
/* y over x: each value is read once, then written */
const hr_op_desc hr_opdesc_pos_embedding = {.layers = pos_layers, .backward = backward, .unpack = unpack, .init = init,
                                            .inplace = true, .autocast = HR_AC_FP32, .work = work};
const hr_op_desc hr_opdesc_pos_embedding_bwd = {.unpack = unpack, .autocast = HR_AC_FP32, .work = work};
