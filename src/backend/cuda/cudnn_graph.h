/* cudnn_graph.h — one convolution (forward, backward data or backward filter)
 * through cuDNN's graph API: cuDNN's heuristics list the engine
 * configurations that run it (each engine with its knobs, e.g. tile sizes,
 * which the legacy API's algorithm numbers hide), the ones headroom accepts
 * are made into execution plans with their workspace known, the fastest is
 * timed on the real buffers at the first run, and that one runs after.
 *
 * The legacy API (conv_algo.c) stays the fallback: where the graph API is
 * missing or offers nothing acceptable, conv_algo.c picks its algorithms. */
#ifndef HR_CUDNN_GRAPH_H
#define HR_CUDNN_GRAPH_H

#include "backend/cuda/cudnn_api.h"
#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_cudnn_graph hr_cudnn_graph; /* the API's functions, found in the loaded library */
typedef struct hr_cudnn_op hr_cudnn_op;       /* one convolution: its candidate plans, then the chosen one */

enum { HR_CONV_FWD = 0, HR_CONV_BWD_DATA = 1, HR_CONV_BWD_FILTER = 2 };

/* Which engines are acceptable. */
enum {
    HR_ENGINE_ALLOW_TF32 = 1,     /* tensor-core engines (TF32 inputs) */
    HR_ENGINE_PRECISE = 2,        /* no FFT or Winograd engines */
    HR_ENGINE_DETERMINISTIC = 4, /* no engine that may give other bits on a rerun */
    HR_ENGINE_FIRST_ONLY = 8,     /* the heuristics' first acceptable engine, not timed */
    HR_ENGINE_TENSOR_CORE = 16,   /* tensor-core engines, but none that converts inputs down or reduces
                                     in lower precision (half data with FP32 accumulation) */
    HR_ENGINE_HALF_REDUCTION = 32, /* with HR_ENGINE_TENSOR_CORE: engines that reduce in the half type too
                                     (HR_CUDNN_HALF_REDUCTION=1, as PyTorch allows them) */
    HR_ENGINE_ALLOW_COMPILED = 64 /* engines cuDNN compiles at run time (NVRTC; seconds, once a plan) */
};

typedef struct {
    int64_t n, c, h, w;    /* x: NCHW, packed */
    int64_t k, r, s;       /* W: K x C x R x S */
    int64_t oh, ow;        /* y: N x K x OH x OW */
    int64_t pad[2], stride[2];
    int64_t dil[2];        /* dilation (1: adjacent taps) */
    int64_t groups;        /* W is then K x C/groups x R x S (cuDNN infers the groups from it) */
    int64_t align;         /* byte alignment every call's pointers keep (an element's size, or 16) */
    int dtype;             /* x, W and y: HR_CUDNN_DATA_FLOAT, _HALF or _BFLOAT16 (compute: FLOAT) */
} hr_conv_dims;

/* NULL when the library lacks the graph API. */
hr_cudnn_graph *hr_cudnn_graph_open(void *lib, cudnnHandle_t h);
void hr_cudnn_graph_close(hr_cudnn_graph *G);

/* The acceptable plans for y = alpha*conv + beta*y (one of the three
 * convolutions), up to `max_plans`, each needing at most `ws_cap` bytes of
 * workspace. NULL with a reason in `why` when there are none (the caller
 * falls back to the legacy API); the error state is left clear. */
hr_cudnn_op *hr_cudnn_op_new(hr_cudnn_graph *G, const hr_conv_dims *d, int which, float beta, unsigned flags,
                             size_t ws_cap, int max_plans, char *why, size_t whylen);
void hr_cudnn_op_free(hr_cudnn_graph *G, hr_cudnn_op *op);

/* ---- graphs of other operations (cudnn_attention.c) ----------------------
 * Descriptors made while building one graph (tensors, operations, the graph,
 * the heuristics and their engine configurations) are kept in a scope as
 * long as the op made from them lives, then destroyed together. The first
 * failing call is kept in err (where: what it was), and every later call
 * does nothing, so a builder checks once at the end. */
struct hr_cudnn_graph {
    cudnnHandle_t h;
    hr_cudnn_status (*Create)(int type, hr_cudnn_desc *d);
    hr_cudnn_status (*Destroy)(hr_cudnn_desc d);
    hr_cudnn_status (*Finalize)(hr_cudnn_desc d);
    hr_cudnn_status (*Set)(hr_cudnn_desc d, int name, int type, int64_t count, const void *elems);
    hr_cudnn_status (*Get)(hr_cudnn_desc d, int name, int type, int64_t want, int64_t *got, void *elems);
    hr_cudnn_status (*Execute)(cudnnHandle_t h, hr_cudnn_desc plan, hr_cudnn_desc pack);
};
#define HR_CUDNN_MAX_KEEP 160
#define HR_CUDNN_MAX_PACK 16
typedef struct {
    hr_cudnn_graph *G;
    hr_cudnn_desc d[HR_CUDNN_MAX_KEEP];
    int n;
    hr_cudnn_status err;
    const char *where;
} hr_cudnn_scope;
hr_cudnn_desc hr_cudnn_make(hr_cudnn_scope *s, int type);
void hr_cudnn_set(hr_cudnn_scope *s, hr_cudnn_desc d, int name, int type, int64_t count, const void *v,
                  const char *what);
void hr_cudnn_fin(hr_cudnn_scope *s, hr_cudnn_desc d, const char *what);
/* A tensor: dimensions and strides (elements), its id in variant packs;
 * kind: HR_CUDNN_VIRTUAL (only inside the graph), HR_CUDNN_BY_VALUE (a host
 * scalar), or 0. */
enum { HR_CUDNN_VIRTUAL = 1, HR_CUDNN_BY_VALUE = 2 };
hr_cudnn_desc hr_cudnn_tensor(hr_cudnn_scope *s, int64_t uid, int dt, const int64_t dim[4], const int64_t str[4],
                              int64_t align, unsigned kind);
/* The finalised operation graph of n operations. */
hr_cudnn_desc hr_cudnn_graph_of(hr_cudnn_scope *s, const hr_cudnn_desc *ops, int n);
/* The op of a built graph, as hr_cudnn_op_new; it owns s (hr_calloc'd) from
 * here on, freeing it on failure too. `which` is the caller's label. */
hr_cudnn_op *hr_cudnn_op_from(hr_cudnn_graph *G, hr_cudnn_scope *s, hr_cudnn_desc graph, int which, unsigned flags,
                              size_t ws_cap, int max_plans, char *why, size_t whylen);
/* Runs the chosen plan on n tensors (their ids and pointers; by-value
 * tensors point at host values) and the workspace. */
hr_status hr_cudnn_op_exec(hr_cudnn_graph *G, hr_cudnn_op *op, int n, const int64_t *uids, void *const *ptrs,
                           void *ws, size_t wsz);

/* Workspace bytes: the largest candidate's until tuned, the chosen one's after. */
size_t hr_cudnn_op_workspace(const hr_cudnn_op *op);
bool hr_cudnn_op_tuned(const hr_cudnn_op *op);
/* The chosen engine's global index, its place among the candidates, its workspace. */
void hr_cudnn_op_choice(const hr_cudnn_op *op, int64_t *engine, int64_t *k, size_t *ws);
/* The chosen engine's median time when this run timed it; -1 otherwise. */
float hr_cudnn_op_ms(const hr_cudnn_op *op);
/* Takes candidate k untimed when it is still engine `engine` with workspace
 * ws (an earlier run's choice); false, changing nothing, otherwise. */
bool hr_cudnn_op_take(hr_cudnn_graph *G, hr_cudnn_op *op, int64_t engine, int64_t k, size_t ws);

/* Times every candidate on these buffers (out is overwritten; call before the
 * node's real work) and keeps the fastest. `ev` are two CUDA events. */
hr_status hr_cudnn_op_tune(hr_cudnn_graph *G, hr_cudnn_op *op, cudaStream_t stream, cudaEvent_t ev[2],
                           const void *a, const void *b, void *out, void *ws, size_t wsz, bool verbose);

/* Times the chosen plan alone on these buffers (out is overwritten): *ms,
 * -1 when it does not run or its workspace is more than wsz. */
hr_status hr_cudnn_op_time(hr_cudnn_graph *G, hr_cudnn_op *op, cudaStream_t stream, cudaEvent_t ev[2], const void *a,
                           const void *b, void *out, void *ws, size_t wsz, float *ms);

/* Runs the chosen plan. a, b are the inputs (x, W; W, dy; x, dy); out the
 * output (y; dx; dW). */
hr_status hr_cudnn_op_run(hr_cudnn_graph *G, hr_cudnn_op *op, const void *a, const void *b, void *out, void *ws,
                          size_t wsz);

/* One line describing the chosen engine (for HR_CUDA_VERBOSE). */
void hr_cudnn_op_describe(const hr_cudnn_op *op, char *buf, size_t len);

#endif
