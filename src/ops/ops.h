/* ops.h — the op descriptor: everything about one op in one place (its
 * model-file layers with PyTorch's signatures, shape rule, backward builder,
 * in-place and alias rules, parameter initialisation, kernel arguments), and
 * the registry that the parser, autodiff, the planner and exec read. Each
 * family's descriptors live in src/ops/<family>.c. */
#ifndef HR_OPS_H
#define HR_OPS_H

#include "graph/graph.h"

/* What a node needs to know about the step it runs in. */
typedef struct {
    int64_t t;          /* optimizer step, 1-based, as PyTorch's state['step'] */
    float lr;
    uint64_t seed;      /* session seed: random masks hash (seed, layer, t, element) */
    hr_optim_t optim;
    int sqnorm;         /* tensor holding the squared global gradient norm, -1 without clipping */
    float loss_scale;   /* the loss's gradient is multiplied by this (1/accumulate x the fp16 scale) */
    float inv_scale;    /* GradScaler.unscale multiplies gradients by this */
    int64_t sample0;    /* the micro-batch's first sample in the whole batch */
    const hr_step_vars *dvars; /* the step's scalars in the arena (CUDA training), or NULL */
} hr_step_info;
/* Step t's information for cfg's optimizer: no loss scaling, the whole batch. */
hr_step_info hr_step_info_make(int64_t t, const hr_config_t *cfg, int sqnorm);

/* ---- model-file layers: PyTorch's names, arguments and defaults ------------- */
typedef enum {
    HR_ARG_SIZE,    /* a positive integer (a tuple of equal sizes stands for one) */
    HR_ARG_NONNEG,  /* an integer >= 0 */
    HR_ARG_OPTSIZE, /* a positive integer or None */
    HR_ARG_FLOAT,
    HR_ARG_BOOL,
    HR_ARG_PAD,     /* an integer >= 0, 'same' or 'valid' */
    HR_ARG_INT,
    HR_ARG_STR,
    HR_ARG_SHAPE,   /* a positive integer or a tuple of up to 3 (a normalized_shape) */
} hr_arg_type;

typedef struct {
    const char *name;
    hr_arg_type type;
    const char *def; /* as written in Python; NULL: required */
    bool fixed;      /* accepted only with its default: headroom has no other */
} hr_arg_spec;

/* A bound argument: the value given, or its default. */
typedef struct {
    bool none, is_str, is_float;
    int64_t i;         /* integers and booleans */
    double f;          /* numbers (integers too) */
    int n;             /* HR_ARG_SHAPE: how many sizes in tup */
    int64_t tup[4];
    const char *src;   /* the text as written, for messages; a string keeps its quotes */
    int len;
} hr_arg;

#define HR_LAYER_MAX_ARGS 10
#define HR_REQ(n, t) {n, t, NULL, false}   /* required */
#define HR_OPT(n, t, d) {n, t, d, false}   /* with its default */
#define HR_FIX(n, t, d) {n, t, d, true}    /* only its default is supported */

/* Is a a string argument that says `word` (either quotes)? */
bool hr_arg_is(const hr_arg *a, const char *word);

/* What the parser hands a layer's builder. */
typedef struct {
    const int *x;        /* input tensors: the previous layer's output, or the layers named */
    int nx;
    const hr_arg *a;     /* a[i]: the value of the layer's argument i */
    const int64_t *ints; /* HR_LAYER_VARARGS: the positional integers */
    int nints;
} hr_layer_call;

typedef enum {
    HR_LAYER_ONE = 0, /* one input: the previous layer's output, or Layer(...)(name) */
    HR_LAYER_REFS,    /* its positional arguments name the layers it joins (Add) */
    HR_LAYER_VARARGS, /* positional integers, no keywords (Reshape) */
    HR_LAYER_LOSS,    /* a `loss` line */
} hr_layer_inputs;

typedef struct {
    const char *name;                       /* PyTorch's class name: "Conv2d" */
    hr_arg_spec args[HR_LAYER_MAX_ARGS];    /* in PyTorch's order; ends at a NULL name */
    hr_layer_inputs inputs;
    /* Builds the layer into m (named `name`); the output tensor or -1 with
     * the error set (hr_build_fail / hr_model_fail). */
    int (*build)(hr_model_t *m, const char *name, const hr_layer_call *c);
} hr_layer_sig;

/* ---- autodiff ----------------------------------------------------------------- */
/* State of autodiff while it walks the forward nodes backwards. */
typedef struct {
    hr_graph *g;       /* the step program being built */
    int *grad;         /* per tensor: its gradient, -1 while none */
    bool *needs_grad;  /* per tensor: a gradient must reach it */
    bool *written;     /* per gradient tensor: a node has written it already */
    bool *read;        /* per tensor: a backward node emitted so far reads it */
    int cap;           /* size of the arrays above */
    int cur;           /* the forward node being differentiated (its backward may add saved outputs to it) */
} hr_autodiff;

/* Adds a saved output to the forward node being differentiated (a ReLU's
 * bit mask, a max pool's window offsets); returns the tensor or -1. */
int hr_ad_add_saved(hr_autodiff *ad, const char *suffix, hr_dtype dt, int64_t numel);
/* The gradient that a backward node writes for forward tensor x: created on
 * first use; *accum tells whether the node must add into it. Returns -1 when x
 * needs no gradient (the node then skips that output), -2 when out of memory. */
int hr_ad_grad_out(hr_autodiff *ad, int x, bool *accum);
/* The gradient of forward tensor y, which later nodes have written; -1 if none. */
int hr_ad_grad_in(const hr_autodiff *ad, int y);
/* Appends a backward node; sets accum flags of its outputs. -1 on OOM. */
int hr_ad_emit(hr_autodiff *ad, hr_node *n);
/* The common backward node: in {saved0?, saved1?, dy}, out {dx}, attributes
 * copied from the forward node f. */
hr_status hr_ad_simple(hr_autodiff *ad, const hr_node *f, hr_op op, int saved0, int saved1);
/* dy passed on unchanged to x: a Copy node (the planner makes it a view when
 * it can), or a Cast when x's gradient has another type (mixed precision). */
hr_status hr_ad_copy(hr_autodiff *ad, int layer, int dy, int x);

/* linear_ce.c: the loss node at loss_node and the Linear right before it as
 * one LinearCrossEntropy, when they are a language model's head whose
 * logits nothing else reads. */
hr_status hr_linear_ce_fuse(hr_graph *g, int loss_node);
/* activation.c: an activation into the epilogue of the Linear before it
 * (a.act), in a graph of forward nodes (`keep` is read after the step:
 * never fused away; the activation layers `alone` names, may be NULL, stay
 * nodes); its backward into the Linear backward that alone makes its dy
 * (a.dact), in the backward nodes from `from` on. Which activations: those a
 * product's epilogue has (activation.c names them). hr_act_grad_op: an activation's
 * backward op. */
hr_status hr_act_fuse(hr_graph *g, int keep, const bool *alone);
hr_status hr_act_fuse_backward(hr_graph *g, int from);
hr_op hr_act_grad_op(hr_op act);
/* the layer norm's file: in a training program's forward nodes [0, *n_fwd), an F32
 * residual Add whose sum the next node normalises goes into that node
 * (a.pre_add: one read of the stream instead of two); the backward nodes are
 * left as they are, reading the sum the norm now writes. *n_fwd drops by the
 * Adds taken in. */
hr_status hr_norm_take_adds(hr_graph *g, int *n_fwd);
/* the layer norm's file: in a training program's backward (nodes from `from`
 * on), a Linear.backward whose dy is the half copy of dx a norm's backward
 * writes (output 3, autocast's folded cast) gives that node its bias gradient: the
 * norm adds the columns of the copy as it writes it (output 4, with the
 * Linear's accumulation flag), one pass over dy fewer. Only where no node
 * between the two touches the bias gradient. */
hr_status hr_norm_take_bias_grads(hr_graph *g, int from);
/* linear.c: a Linear's epilogue activation as its own kernel's arguments,
 * for a backend that runs the product and then the activation: over n
 * values of type dt, forward y = act(pre), backward io = io act'(pre) in
 * place. */
hr_kargs hr_linear_act_kargs(const hr_linear_args *l, bool backward, hr_dtype dt, const void *pre, void *io, void *y,
                             int64_t n);

/* ---- work: what a node computes and moves (the cost model's estimates) ------- */
typedef struct {
    double flops;  /* floating-point operations, a multiply-add counted as 2 */
    double bytes;  /* what its kernels read and write */
    bool matmul;   /* the flops are a matrix product's (tensor cores take its half types) */
} hr_work;
/* Bytes of tensor t (0 for t < 0). */
static inline double hr_work_tensor_bytes(const hr_graph *g, int t) {
    return t < 0 ? 0 : (double)hr_shape_numel(&g->t[t].shape) * (double)hr_dtype_size(g->t[t].dtype);
}
/* Bytes of n's inputs and outputs, each read or written once (an output
 * that the node adds into is read too). */
static inline double hr_work_io_bytes(const hr_graph *g, const hr_node *n) {
    double b = 0;
    for (int i = 0; i < n->nin; i++) b += hr_work_tensor_bytes(g, n->in[i]);
    for (int i = 0; i < n->nout; i++) b += hr_work_tensor_bytes(g, n->out[i]) * (n->accum[i] ? 2 : 1);
    return b;
}

/* ---- the descriptor ---------------------------------------------------------- */
/* How mixed precision treats an op (torch.autocast's op lists); a backward
 * op has its forward op's rule, the update ops HR_AC_FP32. */
typedef enum {
    HR_AC_FOLLOW = 0, /* computes in its input's type (activations, pools, norms over the batch, masks, views) */
    HR_AC_HALF,       /* in the half type, weight included (matrix products, convolutions) */
    HR_AC_FP32,       /* in F32 only (norms over features, softmax, losses, the update) */
    HR_AC_PROMOTE,    /* in the widest type of its inputs (joins) */
    /* reads half inputs as they are and computes in F32, writing F32 (the
     * cross-entropy: an F32 copy of a language model's logits would be its
     * step's largest tensor, holding the same values, since widening is exact) */
    HR_AC_READS_HALF,
    /* in the widest type of its inputs, reading each as it is (Add: a half
     * branch added to an F32 residual stream with no F32 copy of it; the same
     * sums, widening being exact) */
    HR_AC_PROMOTE_READS,
} hr_autocast_rule;

enum { HR_SAMPLES_EACH = 1, HR_SAMPLES_INFER = 2 };

typedef struct {
    /* Model-file layers that build this op (PyTorch's names), ending at a
     * NULL name; NULL for ops that no layer writes (backward, update). */
    const hr_layer_sig *layers;
    /* Emits the backward nodes of forward node n; NULL: no gradient passes. */
    hr_status (*backward)(hr_autodiff *ad, const hr_node *n);
    /* Fills the family's kernel arguments from the node's tensors: ptr[i] is
     * tensor i's data, or ptr NULL while planning (HR_PLANNED pointers then). */
    void (*unpack)(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a);
    /* Initial values of the parameter or buffer in input slot `slot` of
     * forward node n (PyTorch's default init), drawn from (seed, stream). */
    void (*init)(const hr_graph *g, const hr_node *n, int slot, uint64_t seed, uint64_t stream, float *v);
    unsigned grad_inputs;  /* bit i: a gradient flows to input i; 0: to every input */
    /* inplace: output 0 may take the bytes of one input when that input
     * dies at this node; which input: input 0, or with inplace_last the
     * last one instead (a backward node's dy). */
    bool inplace, inplace_last;
    bool view;             /* output 0 is always input 0's bytes (Reshape) */
    /* Computes each sample from that sample alone, so that plan/chunk.c may
     * run it on slices of the batch: HR_SAMPLES_EACH always, HR_SAMPLES_INFER
     * in inference only (training draws batch statistics or a mask that
     * follows the element's place in the batch); 0 never. */
    unsigned char per_sample;
    /* Outputs past the first exist only in training (batch statistics, a
     * mask); the node's a.train says which mode it runs in. */
    bool train_outputs;
    hr_autocast_rule autocast;
    /* An HR_AC_FP32 op that may write output 0 in the half type when a half
     * copy is all that reads it (autocast folds that Cast into the op: the
     * F32 result rounded once, the same bits), and whose backward then reads
     * a half gradient for it (a norm over features before a product). */
    bool half_out;
    /* A backward op that may also write its dx (output 0, F32, after any
     * accumulation into it) rounded to a half type as output 3, when a Cast
     * of that final dx follows (autocast folds the Cast in: the same bits; a
     * residual stream's gradient going into a half product's backward). */
    bool half_dx_copy;
    /* Under mixed precision its bias (input 2) also comes rounded to the
     * half type as input 3 (autocast's copy, held and written by the update
     * in training): what a half product's epilogue adds, where the F32 bias
     * stays for kernels that add it in F32. */
    bool half_bias;
    /* Normalises over the batch (batch statistics): a micro-batch changes
     * what it computes, which the report says under accumulation. */
    bool batch_stats;
    /* What node n computes and moves, for the cost model's estimates
     * (plan/cost.c); NULL: its tensors' bytes and one flop an output value. */
    void (*work)(const hr_graph *g, const hr_node *n, hr_work *w);
} hr_op_desc;

#define HR_X_DECL(E, id, k, name) extern const hr_op_desc hr_opdesc_##id;
HR_OP_LIST(HR_X_DECL)
#undef HR_X_DECL

/* The registry, indexed by op (ops.c). */
extern const hr_op_desc *const hr_op_descs[HR_OP_COUNT];
static inline const hr_op_desc *hr_op_desc_of(hr_op op) { return hr_op_descs[op]; }

/* The kernel arguments of node n (its descriptor's unpack, plus the workspace). */
void hr_op_unpack(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si, hr_kargs *a);
/* Blocks: model-file layers built from other layers (blocks.c), no op of their own. */
extern const hr_layer_sig hr_block_layers[];
/* The layer a model file names `name` (len bytes); NULL if none. */
const hr_layer_sig *hr_layer_find(const char *name, int len, bool loss);
/* Every layer name (loss: the losses), ", "-separated, into buf. */
const char *hr_layer_names(bool loss, char *buf, size_t n);

/* ---- helpers for the builders ----------------------------------------------- */
/* Fail the model with a located message: "file:line: layer 3 (Conv2d): ...". */
int hr_build_fail(hr_model_t *m, int layer, hr_status st, const char *fmt, ...) HR_PRINTF(4, 5);
/* The same before the layer exists: "file:line: ...". */
int hr_model_fail(hr_model_t *m, hr_status st, const char *fmt, ...) HR_PRINTF(3, 4);
/* Appends a forward node to the model; returns its output 0 or -1. */
int hr_build_node(hr_model_t *m, hr_node *n);
/* One input, one output of the same shape (activations): the output or -1. */
int hr_build_unary(hr_model_t *m, const char *name, const char *type, hr_op op, int x, const hr_attr *a);
/* A Linear whose parameters are named <name>.<wname> and <name>.<bname>
 * (MultiheadAttention's in_proj_weight, in_proj_bias), linear.c */
int hr_linear_named(hr_model_t *m, const char *name, int x, int64_t in_f, int64_t out_f, bool bias, const char *wname,
                    const char *bname);
/* Tensor t's data; NULL for t < 0 (none); HR_PLANNED while planning (ptr NULL). */
static inline void *hr_ptr(void *const *ptr, int t) { return t < 0 ? NULL : ptr ? ptr[t] : HR_PLANNED; }
/* Product of dims [from, ndim) of tensor t. */
int64_t hr_numel_from(const hr_graph *g, int t, int from);
/* PyTorch's default init of a weighted layer's weight or bias:
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = the weight's dims past the first. */
void hr_init_fan_in(const hr_tensor *w, int64_t n, uint64_t seed, uint64_t stream, float *v);
/* N(0, std^2), Box-Muller on two uniforms of (seed, stream) a value. */
void hr_init_normal(int64_t n, double std, uint64_t seed, uint64_t stream, float *v);

#endif
