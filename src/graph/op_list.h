/* op_list.h — the one list of every op headroom has, and the argument struct
 * each op's kernels take (plain pointers and sizes, the same on every backend).
 *
 * A row is X(ENUM, id, kernel, "Name"):
 *   ENUM    the op is HR_OP_<ENUM>;
 *   id      its descriptor is hr_opdesc_<id> (src/ops/, one file per family);
 *   kernel  each backend's kernel for it is hr_<backend>_<kernel> (several ops
 *           of a family may share one kernel, which reads a->op);
 *   "Name"  what messages and profiles call it.
 * Every table indexed by op is built from this list, so an op added here
 * without its descriptor or a backend's kernel does not link.
 *
 * This header stands alone (C and C++: the .cu files include it). */
#ifndef HR_OP_LIST_H
#define HR_OP_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "headroom.h"

#define HR_OP_LIST(X)                                                          \
    /* forward and backward, family by family */                               \
    X(LINEAR, linear, linear, "Linear")                                        \
    X(LINEAR_BWD, linear_bwd, linear_bwd, "Linear.backward")                   \
    X(CONV2D, conv2d, conv2d, "Conv2d")                                        \
    X(CONV2D_BWD, conv2d_bwd, conv2d_bwd, "Conv2d.backward")                   \
    X(RELU, relu, act, "ReLU")                                                 \
    X(RELU_BWD, relu_bwd, act_bwd, "ReLU.backward")                            \
    X(LEAKY_RELU, leaky_relu, act, "LeakyReLU")                                \
    X(LEAKY_RELU_BWD, leaky_relu_bwd, act_bwd, "LeakyReLU.backward")           \
    X(GELU, gelu, act, "GELU")                                                 \
    X(GELU_BWD, gelu_bwd, act_bwd, "GELU.backward")                            \
    X(SILU, silu, act, "SiLU")                                                 \
    X(SILU_BWD, silu_bwd, act_bwd, "SiLU.backward")                            \
    X(SIGMOID, sigmoid, act, "Sigmoid")                                        \
    X(SIGMOID_BWD, sigmoid_bwd, act_bwd, "Sigmoid.backward")                   \
    X(TANH, tanh, act, "Tanh")                                                 \
    X(TANH_BWD, tanh_bwd, act_bwd, "Tanh.backward")                            \
    X(MAXPOOL, maxpool, maxpool, "MaxPool2d")                                  \
    X(MAXPOOL_BWD, maxpool_bwd, maxpool_bwd, "MaxPool2d.backward")             \
    X(AVGPOOL, avgpool, avgpool, "AvgPool2d")                                  \
    X(AVGPOOL_BWD, avgpool_bwd, avgpool_bwd, "AvgPool2d.backward")             \
    X(BATCHNORM, batchnorm, batchnorm, "BatchNorm")                            \
    X(BATCHNORM_BWD, batchnorm_bwd, batchnorm_bwd, "BatchNorm.backward")       \
    X(LAYERNORM, layernorm, layernorm, "LayerNorm")                            \
    X(LAYERNORM_BWD, layernorm_bwd, layernorm_bwd, "LayerNorm.backward")       \
    X(EMBEDDING, embedding, embedding, "Embedding")                            \
    X(EMBEDDING_BWD, embedding_bwd, embedding_bwd, "Embedding.backward")       \
    X(POS_EMBEDDING, pos_embedding, embedding, "PositionEmbedding")            \
    X(POS_EMBEDDING_BWD, pos_embedding_bwd, embedding_bwd, "PositionEmbedding.backward") \
    X(ATTENTION, attention, attention, "CausalSelfAttention")                  \
    X(ATTENTION_BWD, attention_bwd, attention_bwd, "CausalSelfAttention.backward") \
    X(DROPOUT, dropout, dropout, "Dropout")                                    \
    X(DROPOUT_BWD, dropout_bwd, dropout_bwd, "Dropout.backward")               \
    X(RESHAPE, reshape, copy, "Reshape")                                       \
    X(COPY, copy, copy, "Copy") /* a gradient passed on unchanged */           \
    X(ADD, add, add, "Add")                                                    \
    X(CONCAT, concat, concat, "Concat")                                        \
    X(CONCAT_BWD, concat_bwd, concat_bwd, "Concat.backward")                   \
    X(SOFTMAX, softmax, softmax, "Softmax")                                    \
    X(SOFTMAX_BWD, softmax_bwd, softmax_bwd, "Softmax.backward")               \
    X(LOGSOFTMAX, logsoftmax, softmax, "LogSoftmax")                           \
    X(LOGSOFTMAX_BWD, logsoftmax_bwd, softmax_bwd, "LogSoftmax.backward")      \
    X(CROSS_ENTROPY, cross_entropy, loss, "CrossEntropyLoss")                  \
    X(CROSS_ENTROPY_BWD, cross_entropy_bwd, loss_bwd, "CrossEntropyLoss.backward") \
    X(MSE, mse, loss, "MSELoss")                                               \
    X(MSE_BWD, mse_bwd, loss_bwd, "MSELoss.backward")                          \
    /* a language model's head and its loss in one (plan/program.c fuses them) */ \
    X(LINEAR_CE, linear_ce, linear_ce, "LinearCrossEntropy")                   \
    /* mixed precision: a tensor in another element type (autocast's casts) */ \
    X(CAST, cast, cast, "Cast")                                                \
    /* the update */                                                           \
    X(UNSCALE, unscale, unscale, "GradScaler.unscale")                         \
    X(GRAD_SQNORM, grad_sqnorm, grad_sqnorm, "GradNorm")                       \
    X(SGD, sgd, sgd, "SGD.update")                                             \
    X(ADAM, adam, adam, "Adam.update")

typedef enum {
#define HR_X_ENUM(E, id, k, name) HR_OP_##E,
    HR_OP_LIST(HR_X_ENUM)
#undef HR_X_ENUM
    HR_OP_COUNT
} hr_op;

/* "Linear", "ReLU.backward"; "?" for a value that is not an op. */
const char *hr_op_name(hr_op op);

#define HR_OP_MAX_IN 8 /* inputs of one node (Concat's) */

/* ---- kernel arguments: one struct a family, named by what each tensor is.
 * A pointer an op does not use (or an output nobody needs) is NULL; `acc`
 * flags say an output adds into what is there. While planning (workspace
 * sizes, support checks) the same structs come with HR_PLANNED, never read,
 * where the node has the tensor, and NULL where it has none.
 *
 * Element types: hr_kargs.dt is the type of the node's activations (x, y,
 * dx, dy: F32, or BF16/F16 under mixed precision; the pointers are typed
 * float * for the fp32 kernels and point at dt elements). Parameters, their
 * gradients, optimizer state, statistics and losses are always F32, except
 * the weight that a matrix product or convolution reads: its half copy, in
 * dt. A backend that runs an op only in F32 gets its half nodes through F32
 * copies (exec/node.c); one that runs dt natively says so in `takes_half`. */
#define HR_PLANNED ((void *)(uintptr_t)256)

/* Linear: y = x W^T + b; backward: dx = dy W, dW = dy^T x, db = sum dy; with an
 * activation fused on either side (act: ops/activation.c) */
typedef struct {
    const float *x, *w, *b, *dy; /* x (N, in), w (out, in), b (out) or NULL, dy (N, out) */
    const void *b_half;          /* forward under mixed precision: b rounded to y's type (its copy), or NULL */
    float *y, *dx, *dw, *db;
    int64_t N, in, out;
    bool acc_dx, acc_dw, acc_db;
    bool batch_input;            /* x is the batch's input (it may arrive in pieces) */
    float *pre;                  /* act: the product (+ b) the activation took, written forward; read backward */
    int act;                     /* 0, or an activation (hr_op) in the product's epilogue: forward y = act(pre),
                                    pre = x W^T + b; backward dx = (dy W) act'(pre), no acc_dx */
    int act_bwd;                 /* act's backward op (hr_act_grad_op) */
    bool act_approx;             /* its tanh form */
} hr_linear_args;

/* Conv2d, NCHW: x (N, C, H, W), w (K, C/groups, kh, kw), y (N, K, OH, OW);
 * groups splits C and K into that many independent convolutions (groups == C
 * == K: depthwise); the dilation dil_h, dil_w spaces the kernel's taps (1:
 * adjacent), as nn.Conv2d's groups and dilation. */
typedef struct {
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    int64_t N, C, H, W, K, OH, OW;
    int kh, kw, sh, sw, ph, pw;
    int groups, dil_h, dil_w;
    bool acc_dx, acc_dw, acc_db;
    bool batch_input; /* x is the batch's input (it may arrive in pieces) */
} hr_conv_args;

/* Elementwise activations: forward out = f(x); backward out = dx from dy and
 * what the forward kept: the input x (GELU, SiLU), the output y (Sigmoid,
 * Tanh, ReLU's float form) or a bit mask (ReLU, LeakyReLU: bit i%8 of byte
 * i/8 is x[i] > 0, (n+7)/8 bytes). */
typedef struct {
    const float *x, *y, *dy;
    const uint8_t *mask;  /* backward: the forward's bit mask, or NULL */
    float *out;           /* forward: y; backward: dx */
    uint8_t *mask_out;    /* forward: the bit mask to write (training), or NULL */
    int64_t n;
    float alpha;          /* LeakyReLU: negative_slope */
    bool tanh_approx;     /* GELU: approximate='tanh' */
    bool acc;             /* backward: dx += */
} hr_act_args;

/* MaxPool2d / AvgPool2d, no padding: x (NC, H, W) planes, y (NC, OH, OW).
 * Max-pool backward takes argmax (a byte a window: i*kw + j of its first
 * maximum) when the forward kept it, else finds the maximum again in x. */
typedef struct {
    const float *x, *dy;
    const uint8_t *argmax;
    float *y, *dx;
    uint8_t *argmax_out;  /* forward, training: the window offsets to write, or NULL */
    int64_t NC, H, W, OH, OW;
    int kh, kw, sh, sw;
    bool acc;
} hr_pool_args;

/* BatchNorm1d/2d over (N, C, HW): batch statistics in training, running ones
 * in inference. Backward: dx, dgamma, dbeta from x, gamma, mean, invstd, dy. */
typedef struct {
    const float *x, *gamma, *beta, *dy;
    float *running_mean, *running_var;
    float *y, *mean, *invstd;             /* forward outputs */
    const float *saved_mean, *saved_invstd; /* backward inputs */
    float *dx, *dgamma, *dbeta;
    int64_t N, C, HW;
    float eps, momentum;
    bool train;
    bool acc_dx, acc_dgamma, acc_dbeta;
} hr_batchnorm_args;

/* LayerNorm over the last `cols` values of each of `rows` rows; gamma and
 * beta (cols) are NULL without elementwise_affine. mean and rstd (rows) are
 * kept for the backward. */
typedef struct {
    const float *x, *gamma, *beta;
    const void *dy; /* dy_dt: F32, or half when y is */
    void *y;        /* y_dt: F32, or half when autocast folded its cast in */
    float *mean, *rstd;
    const float *saved_mean, *saved_rstd;
    float *dx, *dgamma, *dbeta;
    int64_t rows, cols;
    float eps;
    hr_dtype y_dt, dy_dt;
    bool acc_dx, acc_dgamma, acc_dbeta;
    void *dx_half;      /* backward: dx (after acc_dx's add) rounded to dx_half_dt too, or NULL */
    hr_dtype dx_half_dt;
    /* backward with the bias gradient of the Linear that reads dx_half as its
     * dy taken in (hr_norm_take_bias_grads): dbias = (acc_dbias ? dbias : 0)
     * + the column sums of dx_half's values; NULL otherwise */
    float *dbias;
    bool acc_dbias;
    /* forward with the residual Add before it taken in (a.pre_add): x = add_a
     * + add_b first, each widened to F32, written to sum (which x is) */
    const void *add_a, *add_b;
    hr_dtype add_a_dt, add_b_dt;
    float *sum;
} hr_layernorm_args;

/* A training step's scalars in device memory, for a step captured once and
 * replayed (CUDA graphs): the host writes the fields up to skip before each
 * step; a kernel given a pointer to them (dv) reads these instead of its own
 * by-value copies, which hold the same bits (hr_step_vars_make makes both).
 * The NaN stop's check writes skip (the update's kernels skip themselves)
 * and stopped: a non-finite loss was seen, so the steps queued behind it
 * skip too, until a step comes whose host part says clear. */
typedef struct {
    float lr, adam_step, adam_bc2s; /* at the update's step t: lr, lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    uint32_t sgd_first;             /* t == 1: SGD's momentum buffer starts as the gradient */
    uint64_t t;                     /* the step, 1-based (Dropout's stream) */
    uint32_t clear, pad_;           /* clear: no step queued ahead of this one will update: stopped starts at 0 */
    uint32_t skip, stopped;         /* the device's own */
    double loss_sum;                /* accumulation: the micro-batches' losses so far (the device's) */
    float loss_mean, pad2_;         /* accumulation: the step's loss, loss_sum / K after the last */
} hr_step_vars;
/* The bytes the host writes each step; the rest stays as the device left it. */
#define HR_STEP_VARS_HOST 32
/* The update's scalars at step t (1-based) with learning rate lr (the
 * schedule's, hr_lr_at), made in one place (ops/optim.c) for the CPU's and
 * the GPU's arithmetic alike. */
hr_step_vars hr_step_vars_make(const hr_optim_t *o, int64_t t, float lr);

/* Dropout: keep element i when hr_rng_uniform(seed, stream, first + i) >= p;
 * a kept value is scaled by 1/(1-p). No mask is kept: the backward draws the
 * same decisions again from the same (seed, stream, first). Not in training
 * (or p == 0): y = x. */
typedef struct {
    const float *x, *dy;
    float *y, *dx;
    int64_t n;
    float p, scale;
    uint64_t seed, stream;
    uint64_t stream_base; /* stream without the step: stream = stream_base ^ t */
    const hr_step_vars *dv; /* the step on the device (CUDA), or NULL */
    uint64_t first;       /* element 0's index in the whole batch (a micro-batch starts past 0) */
    bool train, acc;
} hr_dropout_args;

/* Copy / Reshape: y = x (y += x with acc; nothing when y is x) */
typedef struct {
    const float *x;
    float *y;
    int64_t n;
    bool acc;
} hr_copy_args;

/* Embedding (nn.Embedding): y[i] = w[idx[i]] for n tokens, each a row of C;
 * the ids arrive as floats (the batch's input is float; exact below 2^24;
 * checked as the batch is uploaded). Backward: dw[idx[i]] += dy[i], in token
 * order (the same bits on every run). PositionEmbedding (GPT's learned
 * positions, wpe): y[b, t] = x[b, t] + w[t] for N sequences of T; backward:
 * dw[t] = sum over b of dy[b, t] (the input's gradient is dy itself). */
typedef struct {
    const float *idx, *x, *w, *dy;
    float *y, *dw;
    int64_t n, V, C, N, T;
    bool acc;
} hr_embedding_args;

/* Causal self-attention (F.scaled_dot_product_attention(q, k, v,
 * is_causal=True) after nanoGPT's split of one (N, T, 3C) projection into q,
 * k, v of H heads of C/H): y (N, T, C), and lse (N, H, T), each query's
 * log-sum-exp, so that the backward recomputes the probabilities and no
 * T x T matrix is kept. Backward: dqkv (N, T, 3C) from qkv, y, lse and dy. */
typedef struct {
    const float *qkv, *y_saved, *lse_saved, *dy;
    float *y, *lse, *dqkv;
    int64_t N, T, C, H;
    float scale;
    /* Training with attn_pdrop > 0 (PyTorch's dropout_p): probability (i, j)
     * of sequence n, head h is kept when hr_attn_uniform(hr_attn_block_key(
     * seed, stream, first + n, h, H, i, j), i, j) >= pdrop (core.h) and then
     * scaled by pscale = 1 / (1 - pdrop); the softmax's sum is over the kept and the
     * dropped alike. The stream is the step's (stream_base ^ t, from dv on
     * the device when dv is set); first: the micro-batch's first sequence.
     * pdrop == 0: nothing is drawn. */
    float pdrop, pscale;
    uint64_t seed, stream, stream_base, first;
    const hr_step_vars *dv;
    bool acc;
} hr_attention_args;
/* Add: y = a + b */
typedef struct {
    const float *a, *b;
    float *y;
    int64_t n;
    hr_dtype ta, tb, ty; /* each one's type: under autocast a half branch joins an F32 stream as it is */
} hr_add_args;

/* Concat along channels: x[k] (N, c[k], inner) into y (N, CY, inner);
 * backward: dx = channels [offset, offset + C) of dy. */
typedef struct {
    const float *x[HR_OP_MAX_IN];
    int64_t c[HR_OP_MAX_IN];
    int k;
    float *y;
    const float *dy;
    float *dx;
    int64_t N, CY, inner, offset, C;
    bool acc;
} hr_concat_args;

/* Softmax / LogSoftmax over the C values of each of N rows; backward from the
 * saved output y. */
typedef struct {
    const float *x, *y, *dy;
    float *out, *dx;
    int64_t N, C;
    bool log, acc;
} hr_softmax_args;

/* CrossEntropyLoss (mean over N rows of C logits, int32 labels) and MSELoss
 * (mean over n values); backward writes dx = scale * d(loss)/d(x) (scale:
 * 1/accumulate times the fp16 loss scale, 1 otherwise). */
typedef struct {
    const float *x;
    const int32_t *labels;
    const float *target;
    float *loss, *dx;
    int64_t N, C, n;
    float scale;
    bool acc;
} hr_loss_args;

/* Cast: y = x converted from `from` to `to` (round to nearest even), y += x
 * with acc (in `to`'s precision after an fp32 sum). */
typedef struct {
    const void *x;
    void *y;
    int64_t n;
    hr_dtype from, to;
    bool acc;
} hr_cast_args;

/* GradScaler.unscale (_amp_foreach_non_finite_check_and_unscale_): g *=
 * inv_scale; found_inf[0] = 1 when any g is inf or NaN, else left as it was
 * with acc and set to 0 without (the first node of a step writes it). */
typedef struct {
    float *g;
    int64_t n;
    float inv_scale;
    float *found_inf;
    bool acc;
} hr_unscale_args;

/* sum(g^2) into out[0] (added with acc) */
typedef struct {
    const float *g;
    float *out;
    int64_t n;
    bool acc;
} hr_sqnorm_args;

/* One parameter's update (SGD: s1 = momentum buffer or NULL; Adam: s1, s2 =
 * exp_avg, exp_avg_sq). sqnorm: the squared global gradient norm when
 * clipping, else NULL. t is the update's step (1-based). copy: the weight's
 * half copy, rounded from the updated value as a Cast rounds it. */
typedef struct {
    float *p;
    const float *g;
    float *s1, *s2;
    int64_t n;
    const float *sqnorm;
    hr_optim_t o;
    float lr;
    int64_t t;
    const hr_step_vars *dv; /* the step's scalars and skip flag on the device (CUDA), or NULL */
    void *copy;             /* the parameter's held half copy, written from the new value (NULL: none) */
    hr_dtype copy_dt;       /* its type, HR_BF16 or HR_F16 */
} hr_optim_args;

/* LinearCrossEntropy: the mean cross-entropy of logits = x W^T (no bias)
 * against int32 labels and, in the same pass, its gradients dW = dlogits^T x
 * and dx = dlogits W (dlogits = (softmax - onehot) scale / N), the logits
 * made a piece of rows at a time in the node's scratch and never kept whole.
 * logits_dt: the type the unfused Linear wrote its logits in (half under
 * autocast), which the logits and dlogits are rounded to. */
typedef struct {
    const float *x, *w; /* x (N, in), w (out, in) */
    const int32_t *labels;
    float *loss;
    float *dw;          /* (out, in), F32 */
    float *dx;          /* (N, in) in x's type; NULL: x takes no gradient */
    int64_t N, in, out;
    float scale;
    hr_dtype logits_dt;
} hr_linear_ce_args;

/* What a kernel receives: the op, its family's arguments, its workspace. */
typedef struct {
    hr_op op;
    hr_dtype dt;       /* the activations' element type (see above) */
    void *ws;          /* the node's planned scratch, or NULL */
    size_t ws_bytes;
    union {
        hr_linear_args linear;
        hr_conv_args conv;
        hr_act_args act;
        hr_pool_args pool;
        hr_batchnorm_args bn;
        hr_layernorm_args ln;
        hr_embedding_args emb;
        hr_attention_args attn;
        hr_dropout_args drop;
        hr_copy_args copy;
        hr_add_args add;
        hr_concat_args cat;
        hr_softmax_args sm;
        hr_cast_args cast;
        hr_unscale_args unscale;
        hr_loss_args loss;
        hr_linear_ce_args lce;
        hr_sqnorm_args sq;
        hr_optim_args opt;
    };
} hr_kargs;

/* A backend's kernel: ctx is the backend's own context. */
typedef hr_status (*hr_kernel_fn)(void *ctx, const hr_kargs *a);

#endif
