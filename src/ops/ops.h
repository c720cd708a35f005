/* ops.h — the op table: for each forward op, how autodiff builds its backward
 * and whether its output may overwrite its input. Builders live beside it. */
#ifndef HR_OPS_H
#define HR_OPS_H

#include "graph/graph.h"

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
 * needs no gradient (the node then skips that output). */
int hr_ad_grad_out(hr_autodiff *ad, int x, bool *accum);
/* The gradient of forward tensor y, which later nodes have written; -1 if none. */
int hr_ad_grad_in(const hr_autodiff *ad, int y);
/* Appends a backward node; sets accum flags of its outputs. -1 on OOM. */
int hr_ad_emit(hr_autodiff *ad, hr_node *n);

typedef struct {
    /* Emits the backward nodes of forward node `n`. */
    hr_status (*backward)(hr_autodiff *ad, const hr_node *n);
    /* Output 0 may take the bytes of one input when that input dies at this
     * node: input 0, or the last input (a backward node's dy). */
    bool inplace;
    bool inplace_last;
} hr_op_info;

extern const hr_op_info hr_ops[HR_OP_COUNT];

/* Per-family backward builders (src/ops/<family>.c). */
hr_status hr_linear_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_conv2d_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_relu_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_dropout_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_add_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_pool_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_batchnorm_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_reshape_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_concat_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_softmax_backward(hr_autodiff *ad, const hr_node *n);
hr_status hr_loss_backward(hr_autodiff *ad, const hr_node *n);

/* Shared by builders: fail the model with a located message. */
int hr_build_fail(hr_model_t *m, int layer, hr_status st, const char *fmt, ...) HR_PRINTF(4, 5);
/* Appends a forward node to the model; returns its output 0 or -1. */
int hr_build_node(hr_model_t *m, hr_node *n);

#endif
