/* backend.h — the small table of functions a device implements: arenas,
 * copies, one node at a time, synchronisation, memory facts. The graph, the
 * planner and the optimizers never know which backend runs. */
#ifndef HR_BACKEND_H
#define HR_BACKEND_H

#include "graph/graph.h"

/* What a node needs to know about the step it runs in. */
typedef struct {
    int64_t t;          /* optimizer step, 1-based, as PyTorch's state['step'] */
    float lr;
    uint64_t seed;      /* session seed: dropout masks hash (seed, layer, t, element) */
    hr_optim_t optim;
    int sqnorm;         /* tensor holding the squared global gradient norm, -1 without clipping */
} hr_step_info;

typedef struct hr_backend hr_backend;
struct hr_backend {
    const char *name;          /* "cpu", "cuda" */
    hr_memkind arena_kind;     /* HR_MEM_ARENA_HOST or HR_MEM_DEVICE */
    void *ctx;
    /* Scratch bytes node n needs (im2col, cuDNN workspace); known before anything runs. */
    size_t (*workspace_size)(hr_backend *be, const hr_graph *g, const hr_node *n);
    hr_status (*arena_alloc)(hr_backend *be, size_t bytes, void **base);
    void (*arena_free)(hr_backend *be, void *base);
    hr_status (*upload)(hr_backend *be, void *dst, const void *src, size_t n); /* src is free again on return */
    /* Optional: the batch's input, last of a step's uploads. The backend may
     * keep reading src until the next run, sync or download returns (the CUDA
     * backend stages it in pieces while the first node runs); NULL: upload. */
    hr_status (*upload_input)(hr_backend *be, void *dst, const void *src, size_t n);
    hr_status (*download)(hr_backend *be, void *dst, const void *src, size_t n);
    /* Runs node n; ptr[i] is the data of tensor i (NULL for tensors not placed). */
    hr_status (*run)(hr_backend *be, const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si);
    /* Optional: runs the `count` consecutive nodes nodes[0..count) of g, all of
     * one update op (HR_OP_ADAM or HR_OP_SGD), as one launch where it can (a
     * multi-tensor update); the same bits as `run` on each in turn. NULL: the
     * session runs them one by one. */
    hr_status (*run_group)(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void *const *ptr,
                           const hr_step_info *si);
    hr_status (*sync)(hr_backend *be);
    hr_status (*mem_info)(hr_backend *be, size_t *free_bytes, size_t *total_bytes); /* NULL: unknown */
    /* Optional: allocations of the device allocator so far (tests count them). */
    int64_t (*alloc_count)(hr_backend *be);
    /* Bytes the backend itself holds (CUDA context, library handles), measured. */
    size_t (*overhead)(hr_backend *be);
    /* Optional, for HR_PROFILE=2 (both or neither): mark records a timestamp
     * in the device's queue, in slot `slot` (0-based; the backend makes room
     * as slots appear), without waiting; mark_ms gives the milliseconds from
     * slot a's mark to slot b's once both have passed (after sync), < 0 when
     * it can't tell. */
    hr_status (*mark)(hr_backend *be, int slot);
    double (*mark_ms)(hr_backend *be, int a, int b);
    void (*free)(hr_backend *be);
};

hr_backend *hr_backend_cpu_new(const hr_config_t *cfg);
/* NULL with HR_ERR_UNSUPPORTED when built without CUDA or no GPU is present. */
hr_backend *hr_backend_cuda_new(const hr_config_t *cfg);
bool hr_backend_cuda_available(void);

/* The counter-based generator shared by init, dropout and the golden tests:
 * splitmix64 of a stream-keyed counter (see docs/golden.md). */
static inline uint64_t hr_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

#endif
