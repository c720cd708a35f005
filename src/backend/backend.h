/* backend.h — the small table of functions a device implements: arenas,
 * copies, a kernel table indexed by op, synchronisation, memory facts. The
 * graph, the planner and the optimizers never know which backend runs; the
 * kernels see plain pointers and sizes (hr_kargs, graph/op_list.h). */
#ifndef HR_BACKEND_H
#define HR_BACKEND_H

#include "ops/ops.h"

typedef struct hr_backend hr_backend;
struct hr_backend {
    const char *name;          /* "cpu", "cuda" */
    const char *device_id;     /* the GPU's PCI bus id ("0000:65:00.0", for NVML); NULL on the CPU */
    hr_memkind arena_kind;     /* HR_MEM_ARENA_HOST or HR_MEM_DEVICE */
    void *ctx;
    /* The kernels, indexed by op; a NULL entry is an op this backend lacks,
     * which compile refuses before anything is allocated. */
    const hr_kernel_fn *kernels;
    /* Optional: false when the backend cannot run this node (a dtype it
     * lacks), with the reason in why; a's pointers are HR_PLANNED or NULL. */
    bool (*supports)(hr_backend *be, const hr_kargs *a, char *why, size_t n);
    /* Optional: true when kernels[op] runs activations of type dt (BF16,
     * F16) itself; otherwise exec hands it F32 copies (exec/node.c). NULL:
     * every op but Cast runs in F32 only. */
    bool (*takes_half)(hr_backend *be, hr_op op, hr_dtype dt);
    /* Optional: the session's batch, before its program is planned: the
     * bytes of one batch's input and labels, for pinned staging. */
    void (*set_batch)(hr_backend *be, int64_t batch, size_t input_bytes, size_t label_bytes);
    /* Scratch bytes a node needs (im2col, cuDNN workspace), from its
     * arguments while planning (HR_PLANNED where the node has a tensor,
     * NULL where not); known before anything runs. */
    size_t (*workspace_size)(hr_backend *be, const hr_kargs *a);
    hr_status (*arena_alloc)(hr_backend *be, size_t bytes, void **base);
    void (*arena_free)(hr_backend *be, void *base);
    hr_status (*upload)(hr_backend *be, void *dst, const void *src, size_t n); /* src is free again on return */
    /* Optional: the batch's input, last of a step's uploads. The backend may
     * keep reading src until the next run, sync or download returns (the CUDA
     * backend stages it in pieces while the first node runs); NULL: upload. */
    hr_status (*upload_input)(hr_backend *be, void *dst, const void *src, size_t n);
    hr_status (*download)(hr_backend *be, void *dst, const void *src, size_t n);
    /* Runs one node through kernels[a->op], with whatever the backend does
     * between nodes (the CUDA backend waits for the batch's upload). */
    hr_status (*run)(hr_backend *be, const hr_kargs *a);
    /* Optional: runs a[0..count), all of one update op (HR_OP_ADAM or
     * HR_OP_SGD), as one launch where it can (a multi-tensor update); the same
     * bits as `run` on each in turn. NULL: the session runs them one by one. */
    hr_status (*run_group)(hr_backend *be, const hr_kargs *a, int count);
    hr_status (*sync)(hr_backend *be);
    hr_status (*mem_info)(hr_backend *be, size_t *free_bytes, size_t *total_bytes); /* NULL: unknown */
    /* Optional: allocations of the device allocator so far (tests count them). */
    int64_t (*alloc_count)(hr_backend *be);
    /* Bytes the backend itself holds (CUDA context, library handles), measured. */
    size_t (*overhead)(hr_backend *be);
    /* Optional, for device profiles (both or neither): mark records a
     * timestamp in the device's queue, in slot `slot` (0-based; the backend
     * makes room as slots appear), without waiting; mark_ms gives the
     * milliseconds from slot a's mark to slot b's once both have passed
     * (after sync), < 0 when it can't tell. */
    hr_status (*mark)(hr_backend *be, int slot);
    double (*mark_ms)(hr_backend *be, int a, int b);
    void (*free)(hr_backend *be);
    /* Optional (all or none): a training step as one captured graph (CUDA
     * graphs). graph_begin waits for the uploads queued so far and starts
     * capturing: the work queued after it is recorded, not run; graph_end
     * stops, and with keep makes what was recorded the graph that
     * graph_launch queues (an error, the reason in its message, when it
     * could not be captured: nothing of it ran); a new capture replaces it.
     * The graph holds the arena's pointers, and goes with the arena. */
    hr_status (*graph_begin)(hr_backend *be);
    hr_status (*graph_end)(hr_backend *be, bool keep);
    hr_status (*graph_launch)(hr_backend *be);
    /* Optional: the NaN stop on the device, queued between the backward pass
     * and the update: v->skip = v->stopped = stop and (loss not finite or
     * v->stopped, which v->clear resets first) (hr_step_vars); the update's
     * kernels read skip. */
    hr_status (*step_check)(hr_backend *be, const float *loss, hr_step_vars *v, bool stop);
    /* Optional (with step_check): accumulation's loss on the device, queued
     * after micro-batch k's (0 .. K-1) backward pass: v->loss_sum =
     * (k ? v->loss_sum : 0) + loss in double, and after the last, v->loss_mean
     * = (float)(loss_sum / K): the step's loss, as the host would sum it. */
    hr_status (*loss_add)(hr_backend *be, const float *loss, hr_step_vars *v, int k, int K);
    /* Optional (both or neither): loss_queue queues a copy of the step's
     * loss (one F32) into host slot `slot` (0 .. HR_STEP_QUEUE-1) behind the
     * work queued so far, without waiting; loss_wait waits for slot's copy
     * and gives the value. */
    hr_status (*loss_queue)(hr_backend *be, const float *loss, int slot);
    hr_status (*loss_wait)(hr_backend *be, int slot, float *out);
    /* Optional (both or neither): the next batch while a step runs.
     * upload_staged is upload into the staged batch's buffer, waiting only
     * until the last stage_in has copied it out (not for the steps queued);
     * stage_in copies count pieces out of it (src) into the step's tensors
     * (dst), queued after the uploads and before the step's work. */
    hr_status (*upload_staged)(hr_backend *be, void *dst, const void *src, size_t n);
    hr_status (*stage_in)(hr_backend *be, void *const *dst, const void *const *src, const size_t *n, int count);
    /* Optional: a note for the plan's report on what the plan holds until a
     * run settles it (CUDA: convolutions whose workspace is their untimed
     * candidates' largest); buf empty when there is none. */
    void (*plan_note)(hr_backend *be, char *buf, size_t n);
};

hr_backend *hr_backend_cpu_new(const hr_config_t *cfg);
/* NULL with HR_ERR_UNSUPPORTED when built without CUDA or no GPU is present. */
hr_backend *hr_backend_cuda_new(const hr_config_t *cfg);
bool hr_backend_cuda_available(void);

#endif
