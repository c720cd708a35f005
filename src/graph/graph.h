/* graph.h — tensors, nodes and layers: the forward graph a model builds and
 * the step program (forward, backward, update) that compile makes from it. */
#ifndef HR_GRAPH_H
#define HR_GRAPH_H

#include "core/core.h"
#include "graph/op_list.h"

#define HR_NODE_MAX_IO HR_OP_MAX_IN
/* Where a slice of a tensor may start (the kernels' vector loads, cuDNN's
 * and cuBLAS's pointers: 16 bytes); whole tensors start on HR_ALIGN. */
#define HR_ALIAS_ALIGN 16

/* What a tensor is to the step; the planner's categories follow from it. */
typedef enum {
    HR_T_ACT = 0,   /* produced by a forward op */
    HR_T_PARAM,     /* trainable (or frozen) parameter */
    HR_T_BUFFER,    /* persistent state that is not trained: running statistics */
    HR_T_INPUT,     /* the batch */
    HR_T_LABEL,     /* labels or regression targets */
    HR_T_GRAD,      /* gradient of a parameter */
    HR_T_ACT_GRAD,  /* gradient of an activation */
    HR_T_OPTSTATE,  /* optimizer state (Adam moments, momentum) */
    HR_T_WORKSPACE, /* one node's scratch */
    HR_T_WCOPY,     /* a parameter's half copy (mixed precision: autocast's cached casts) */
} hr_tensor_kind;


/* Attributes of every op, in one small struct (fields unused by an op stay 0). */
typedef struct {
    int64_t in_f, out_f;          /* Linear; Conv2d channels */
    int kh, kw, sh, sw, ph, pw;   /* Conv2d, pools */
    int groups, dil_h, dil_w;     /* Conv2d (1 each unless set) */
    float eps, momentum, p;       /* norms; the drop probability */
    int64_t nclasses;             /* CrossEntropy */
    bool bias;
    bool train;                   /* training (batch statistics, masks) or inference */
    uint64_t seed;                /* a random mask's stream, per layer */
    int64_t offset;               /* a join's backward: the first channel of this input */
    float alpha;                  /* LeakyReLU: negative_slope */
    bool approx;                  /* the tanh approximation of an activation */
    int act;                      /* Linear: the activation (an hr_op; 0, Linear, none) its product's epilogue
                                     applies, y = act(pre), pre kept as out[1], with `approx` its form;
                                     ops/activation.c fuses them */
    int dact;                     /* Linear.backward: the activation whose output x is (0 none): dx times its
                                     derivative at in[3], that activation's backward fused in */
    bool affine;                  /* a norm's elementwise_affine */
    bool pre_add;                 /* a norm that also runs the Add before it: in[0] + in[nin-1] is its x,
                                     written as out[3] (the layer norm's op file takes them in) */
    bool post_bias;               /* a norm's backward that also writes the next Linear's bias gradient (out[4]:
                                     hr_norm_take_bias_grads) */
    int norm_dims;                /* how many trailing dims a norm normalises */
    int index;                    /* optimizer: parameter index (for its RNG stream, reports) */
    bool recompute;               /* a forward node run again in the backward pass: no side effects (running statistics) */
} hr_attr;

typedef struct {
    char *name;
    hr_dtype dtype;
    hr_shape shape;     /* in a model: without the batch when `batched` */
    bool batched;       /* the first dimension is the batch */
    hr_tensor_kind kind;
    int layer;          /* layer that made it, -1 for none */
    bool requires_grad; /* a parameter that is not frozen */
    int grad;           /* its gradient tensor, -1 */
    int source;         /* for grads, optimizer state and half copies: the tensor they belong to */
    bool held;          /* a weight's half copy kept from step to step: its update writes it
                           (hr_autocast_hold), not a Cast in each forward */
    /* A slice of another tensor's bytes (a batch chunk: plan/chunk.c), set
     * by a rewrite: `alias` the tensor, `alias_offset` where this one starts
     * in it. -1 for none; views made by ops (Reshape) and in-place reuse are
     * the planner's own and not recorded here. */
    int alias;
    size_t alias_offset; /* a multiple of HR_ALIAS_ALIGN */
    /* filled by the planner */
    hr_category cat;
    int first, last;    /* lifetime: schedule indices */
    size_t bytes;       /* aligned size */
    size_t offset;      /* in its arena */
} hr_tensor;

typedef struct {
    hr_op op;
    int nin, nout;
    int in[HR_NODE_MAX_IO];
    int out[HR_NODE_MAX_IO];     /* -1: output not needed (e.g. dx of the first layer) */
    bool accum[HR_NODE_MAX_IO];  /* output i adds into what is there */
    int ws;                      /* workspace tensor, -1 */
    int layer;
    hr_attr a;
} hr_node;

typedef struct {
    char *name;       /* "3" or the user's name */
    const char *type; /* "Conv2d" */
    char *file;       /* model file, may be NULL */
    int line;
    int out;          /* output tensor */
    bool tied;        /* its weight is another layer's (weight tying): its node's input 1 */
} hr_layer;

typedef struct {
    hr_tensor *t; int nt, capt;
    hr_node *n;   int nn, capn;
    hr_layer *l;  int nl, capl;
} hr_graph;

void hr_graph_free(hr_graph *g);
/* Both return the new index or -1 (OOM). The name is copied. */
int hr_graph_add_tensor(hr_graph *g, const char *name, hr_dtype dt, hr_shape shape, bool batched,
                        hr_tensor_kind kind, int layer);
int hr_graph_add_node(hr_graph *g, const hr_node *n);
hr_status hr_graph_copy(hr_graph *dst, const hr_graph *src);
hr_node hr_node_make(hr_op op, int layer);
/* Node s out of the schedule, the nodes after it one place earlier (a
 * rewrite that folds a node into another; its tensors stay). */
void hr_graph_remove_node(hr_graph *g, int s);
/* Does any node but node `but` read tensor t? (A rewrite that folds two
 * nodes into one asks it of the tensor between them.) */
bool hr_graph_read_elsewhere(const hr_graph *g, int t, int but);
/* The op a node runs as people read it: hr_op_name, or a fused pair's names. */
const char *hr_node_op_name(const hr_node *n);

struct hr_model {
    char *name;
    hr_graph g;
    char *src_file; /* where the next layer comes from, for messages */
    int src_line;
    int input, label, output, loss;
    bool init_gpt2; /* hr_model_set_init(m, "gpt2"): GPT-2's initial values, not each layer's default */
    int nparams;    /* layers with parameters get them in this order (state_dict order) */
    bool broken;    /* a builder failed: compile refuses */
    bool oom;       /* ... because host memory ran out */
    /* The layers by name (open addressing: layer index or -1), so that a
     * name used twice is found in O(1), whatever the depth. Not copied. */
    int *names;
    int names_cap;  /* a power of two, at least twice the layers; 0: none yet */
};

/* Helpers for the builders in src/ops/. */
int hr_model_begin_layer(hr_model_t *m, const char *name, const char *type); /* layer index or -1 */
int hr_model_find_layer(const hr_model_t *m, const char *name);               /* layer index or -1 */
/* "layer 3 (Conv2d, model.txt:7)" for messages */
const char *hr_layer_where(const hr_model_t *m, int layer, char *buf, size_t n);
/* The same for a layer of any graph (a step program's); "the update" for none. */
const char *hr_graph_layer_where(const hr_graph *g, int layer, char *buf, size_t n);
bool hr_model_check_tensor(hr_model_t *m, int t, const char *what);
int hr_model_add_param(hr_model_t *m, int layer, const char *suffix, int ndim, const int64_t *dims, hr_tensor_kind kind);
int hr_model_add_act(hr_model_t *m, int layer, const char *suffix, hr_shape per_sample);

#endif
