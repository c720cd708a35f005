/* cuda_backend.c — the CUDA backend's table: kernels indexed by op, the
 * dispatch (the batch's reader may take it in pieces), the arena, the copies. */
#include "backend/cuda/conv.h"
#include "backend/cuda/hr_cuda.h"
#include "backend/gpus.h"

static hr_cuda *ctx_of(const hr_backend *be) { return be->ctx; }

/* ---- the kernels, indexed by op ----------------------------------------------- */
static const hr_kernel_fn cuda_kernels[HR_OP_COUNT] = {
#define HR_X_CUDA_ROW(E, id, k, name) [HR_OP_##E] = hr_cuda_##k,
    HR_OP_LIST(HR_X_CUDA_ROW)
#undef HR_X_CUDA_ROW
};
_Static_assert(sizeof cuda_kernels / sizeof *cuda_kernels == HR_OP_COUNT, "a CUDA kernel for every op");

/* ---- planning ------------------------------------------------------------------ */
/* The pinned staging holds two of the session's batches (input and labels),
 * and the input's samples decide its pieces. Later plans on this backend
 * (the largest batch that would fit) do not come here: the staging stays. */
static void cuda_set_batch(hr_backend *be, int64_t batch, size_t input_bytes, size_t label_bytes) {
    hr_cuda *c = ctx_of(be);
    /* + the step's scalars (hr_step_vars), uploaded with each batch */
    c->want_slot = hr_align_up(input_bytes, HR_ALIGN) + hr_align_up(label_bytes, HR_ALIGN) + HR_ALIGN;
    c->in_batch = batch > 0 && input_bytes > 0 ? batch : 0;
    c->in_sample = c->in_batch ? (int64_t)(input_bytes / (size_t)batch) : 0;
}

/* Each kernel that needs scratch defines hr_cuda_<kernel>_workspace in its
 * own file; the others define none, and the weak reference is NULL. The
 * kernel table above links every family's object, so a workspace function
 * that exists is always found. */
#define HR_X_CUDA_WS_DECL(E, id, k, name) size_t hr_cuda_##k##_workspace(hr_cuda *c, const hr_kargs *a) __attribute__((weak));
HR_OP_LIST(HR_X_CUDA_WS_DECL)
#undef HR_X_CUDA_WS_DECL
static const hr_cuda_ws_fn cuda_workspaces[HR_OP_COUNT] = {
#define HR_X_CUDA_WS(E, id, k, name) [HR_OP_##E] = hr_cuda_##k##_workspace,
    HR_OP_LIST(HR_X_CUDA_WS)
#undef HR_X_CUDA_WS
};

static size_t cuda_workspace(hr_backend *be, const hr_kargs *a) {
    hr_cuda_ws_fn f = (unsigned)a->op < HR_OP_COUNT ? cuda_workspaces[a->op] : NULL;
    return f ? f(ctx_of(be), a) : 0;
}

/* Which kernels run BF16 and F16 activations themselves: those whose file
 * says so with HR_CUDA_TAKES_HALF (hr_cuda.h), found as the workspaces are. */
#define HR_X_CUDA_HALF_DECL(E, id, k, name) bool hr_cuda_##k##_takes_half(const hr_cuda *c) __attribute__((weak));
HR_OP_LIST(HR_X_CUDA_HALF_DECL)
#undef HR_X_CUDA_HALF_DECL
static const hr_cuda_half_fn cuda_halves[HR_OP_COUNT] = {
#define HR_X_CUDA_HALF(E, id, k, name) [HR_OP_##E] = hr_cuda_##k##_takes_half,
    HR_OP_LIST(HR_X_CUDA_HALF)
#undef HR_X_CUDA_HALF
};

/* BF16 and F16 (hr_gpu_takes_half says the same without a GPU); F32 is not
 * asked (every kernel runs it). Only ops that autocast may hand a half type:
 * a kernel shared by a family (the losses') may take half for one of them. */
static bool cuda_takes_half(hr_backend *be, hr_op op, hr_dtype dt) {
    hr_cuda_half_fn f = (unsigned)op < HR_OP_COUNT ? cuda_halves[op] : NULL;
    return hr_gpu_takes_half(op, dt) && f && f(ctx_of(be));
}

/* Convolutions planned with their untimed candidates' largest workspace. */
static void cuda_plan_note(hr_backend *be, char *buf, size_t n) {
    int untimed = 0, total = 0;
    hr_conv_algo_untimed(ctx_of(be), &untimed, &total);
    if (untimed == 0) {
        snprintf(buf, n, "%s", "");
        return;
    }
    snprintf(buf, n,
             "%d of %d convolution algorithms are not timed yet on this GPU: the workspace holds their candidates' "
             "largest until the first step times them; the choices are kept (HR_CUDNN_CACHE), and later plans hold "
             "the chosen ones' alone",
             untimed, total);
}

/* ---- the arena ------------------------------------------------------------------- */
static hr_status cuda_arena_alloc(hr_backend *be, size_t bytes, void **base) {
    hr_cuda *c = ctx_of(be);
    char a[32], b[32], t[32];
    *base = NULL;
    if (c->arena) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: the arena is already allocated");
    if (hr_fault_should_fail(HR_MEM_DEVICE))
        return hr_error_set(HR_ERR_DEVICE_OOM, "could not allocate the device arena of %s (%zu bytes): injected fault",
                            hr_format_bytes(bytes, a, sizeof a), bytes);
    size_t fr, tot;
    HR_CU(cudaMemGetInfo(&fr, &tot));
    if (bytes > fr)
        return hr_error_set(HR_ERR_DEVICE_OOM,
                            "the plan needs %s (%zu bytes) of device memory but %s (%zu bytes) of %s are free on %s; "
                            "nothing was allocated",
                            hr_format_bytes(bytes, a, sizeof a), bytes, hr_format_bytes(fr, b, sizeof b), fr,
                            hr_format_bytes(tot, t, sizeof t), c->device_name);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    c->allocs++;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_error_set(HR_ERR_DEVICE_OOM, "cudaMalloc of the %s arena (%zu bytes) failed with %s (%zu bytes) free: %s",
                            hr_format_bytes(bytes, a, sizeof a), bytes, hr_format_bytes(fr, b, sizeof b), fr,
                            cudaGetErrorString(e));
    }
    /* Tests poison the arena (NaN everywhere) so that unwritten outputs show. */
    if (c->opt.cuda_poison) {
        e = cudaMemsetAsync(p, 0xFF, bytes, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            cudaFree(p);
            return hr_cuda_fail(__FILE__, __LINE__, "cudaMemsetAsync(arena)", cudaGetErrorString(e));
        }
    }
    hr_status st = hr_cuda_staging_alloc(c);
    if (st) {
        cudaFree(p);
        return st;
    }
    c->arena = p;
    c->arena_bytes = bytes;
    *base = p;
    return HR_OK;
}

static void cuda_arena_free(hr_backend *be, void *base) {
    hr_cuda *c = ctx_of(be);
    cudaStreamSynchronize(c->copy_stream);
    cudaStreamSynchronize(c->stream);
    hr_cuda_graph_free(c); /* it holds the arena's pointers */
    if (base) cudaFree(base);
    if (base == c->arena) {
        c->arena = NULL;
        c->arena_bytes = 0;
    }
    hr_cuda_staging_free(c);
    cudaGetLastError();
}

/* ---- copies and memory facts ------------------------------------------------------ */
static hr_status cuda_upload(hr_backend *be, void *dst, const void *src, size_t n) {
    return hr_cuda_upload(ctx_of(be), dst, src, n, false);
}

static hr_status cuda_upload_input(hr_backend *be, void *dst, const void *src, size_t n) {
    return hr_cuda_upload(ctx_of(be), dst, src, n, true);
}

static hr_status cuda_upload_staged(hr_backend *be, void *dst, const void *src, size_t n) {
    return hr_cuda_upload_staged(ctx_of(be), dst, src, n);
}

static hr_status cuda_stage_in(hr_backend *be, void *const *dst, const void *const *src, const size_t *n, int count) {
    return hr_cuda_stage_in(ctx_of(be), dst, src, n, count);
}

static hr_status cuda_download(hr_backend *be, void *dst, const void *src, size_t n) {
    hr_cuda *c = ctx_of(be);
    if (n == 0) return HR_OK;
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    HR_CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    HR_CU(cudaStreamSynchronize(c->stream));
    return HR_OK;
}

static hr_status cuda_sync(hr_backend *be) {
    hr_cuda *c = ctx_of(be);
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    HR_CU(cudaStreamSynchronize(c->copy_stream));
    HR_CU(cudaStreamSynchronize(c->stream));
    HR_CU(cudaGetLastError());
    return HR_OK;
}

static hr_status cuda_mem_info(hr_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    HR_CU(cudaMemGetInfo(free_bytes, total_bytes));
    return HR_OK;
}

static int64_t cuda_alloc_count(hr_backend *be) { return ctx_of(be)->allocs; }
static size_t cuda_overhead(hr_backend *be) { return ctx_of(be)->overhead; }

size_t hr_cuda_pinned_bytes(const hr_backend *be) {
    return ctx_of(be)->pinned ? 2 * ctx_of(be)->slot_bytes + HR_ALIGN : 0;
}
size_t hr_cuda_used_at_start(const hr_backend *be) { return ctx_of(be)->used_at_start; }

/* ---- running ----------------------------------------------------------------------- */
static hr_status cuda_run(hr_backend *be, const hr_kargs *a) {
    hr_cuda *c = ctx_of(be);
    hr_kernel_fn k = (unsigned)a->op < HR_OP_COUNT ? cuda_kernels[a->op] : NULL;
    if (!k) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: no kernel for op %s", hr_op_name(a->op));
    if (c->pending) { /* the batch's upload: its reader may take it in pieces, every other node waits */
        /* (the whole batch's reader: a slice of it, plan/chunk.c, starts at the same address) */
        if (c->piece_dst && a->op == HR_OP_LINEAR && a->linear.x == c->piece_dst && a->linear.batch_input)
            return hr_cuda_linear_pieces(c, a);
        if (c->piece_dst && a->op == HR_OP_CONV2D && a->conv.x == c->piece_dst && a->conv.batch_input)
            return hr_cuda_conv2d_pieces(c, a);
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
    }
    return k(c, a);
}

/* A run of update nodes: the whole update of a step in a few launches. */
static hr_status cuda_run_group(hr_backend *be, const hr_kargs *a, int count) {
    hr_cuda *c = ctx_of(be);
    if (count <= 0) return HR_OK;
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    if (a[0].op != HR_OP_SGD && a[0].op != HR_OP_ADAM)
        return hr_error_set(HR_ERR_INTERNAL, "cuda backend: no group launch for op %s", hr_op_name(a[0].op));
    return hr_cuda_optim_group(c, a, count);
}

static hr_status cuda_graph_begin(hr_backend *be) { return hr_cuda_graph_begin(ctx_of(be)); }
static hr_status cuda_graph_end(hr_backend *be, bool keep) { return hr_cuda_graph_end(ctx_of(be), keep); }
static hr_status cuda_graph_launch(hr_backend *be) { return hr_cuda_graph_launch(ctx_of(be)); }
static hr_status cuda_step_check(hr_backend *be, const float *loss, hr_step_vars *v, bool stop) {
    return hr_cuda_step_check(ctx_of(be), loss, v, stop);
}

static hr_status cuda_loss_add(hr_backend *be, const float *loss, hr_step_vars *v, int k, int K) {
    return hr_cuda_loss_add(ctx_of(be), loss, v, k, K);
}

static hr_status cuda_loss_queue(hr_backend *be, const float *loss, int slot) {
    return hr_cuda_loss_queue(ctx_of(be), loss, slot);
}
static hr_status cuda_loss_wait(hr_backend *be, int slot, float *out) { return hr_cuda_loss_wait(ctx_of(be), slot, out); }

static hr_status cuda_mark(hr_backend *be, int slot) { return hr_cuda_mark(ctx_of(be), slot); }
static double cuda_mark_ms(hr_backend *be, int a, int b) { return hr_cuda_mark_ms(ctx_of(be), a, b); }

/* ---- lifetime ------------------------------------------------------------------------- */
static void cuda_free(hr_backend *be) {
    if (!be) return;
    hr_cuda *c = be->ctx;
    if (c) {
        if (c->arena) cuda_arena_free(be, c->arena);
        hr_cuda_fini(c);
        hr_free(c);
    }
    hr_free(be);
}

hr_backend *hr_backend_cuda_new(const hr_config_t *cfg) {
    if (!hr_backend_cuda_available()) {
        hr_error_set(HR_ERR_UNSUPPORTED, "no CUDA device is usable here (%s); use --device cpu",
                     hr_cuda_unavailable_why());
        return NULL;
    }
    hr_backend *be = hr_calloc(1, sizeof *be);
    hr_cuda *c = hr_calloc(1, sizeof *c);
    if (!be || !c) {
        hr_free(be);
        hr_free(c);
        return NULL;
    }
    *be = (hr_backend){
        /* .name           = */ "cuda",
        /* .device_id      = */ NULL,
        /* .arena_kind     = */ HR_MEM_DEVICE,
        /* .ctx            = */ c,
        /* .kernels        = */ cuda_kernels,
        /* .supports       = */ NULL,
        /* .takes_half     = */ cuda_takes_half,
        /* .set_batch      = */ cuda_set_batch,
        /* .workspace_size = */ cuda_workspace,
        /* .arena_alloc    = */ cuda_arena_alloc,
        /* .arena_free     = */ cuda_arena_free,
        /* .upload         = */ cuda_upload,
        /* .upload_input   = */ cuda_upload_input,
        /* .download       = */ cuda_download,
        /* .run            = */ cuda_run,
        /* .run_group      = */ cuda_run_group,
        /* .sync           = */ cuda_sync,
        /* .mem_info       = */ cuda_mem_info,
        /* .alloc_count    = */ cuda_alloc_count,
        /* .overhead       = */ cuda_overhead,
        /* .mark           = */ cuda_mark,
        /* .mark_ms        = */ cuda_mark_ms,
        /* .free           = */ cuda_free,
        /* .graph_begin    = */ cuda_graph_begin,
        /* .graph_end      = */ cuda_graph_end,
        /* .graph_launch   = */ cuda_graph_launch,
        /* .step_check     = */ cuda_step_check,
        /* .loss_add       = */ cuda_loss_add,
        /* .loss_queue     = */ cuda_loss_queue,
        /* .loss_wait      = */ cuda_loss_wait,
        /* .upload_staged  = */ cuda_upload_staged,
        /* .stage_in       = */ cuda_stage_in,
        /* .plan_note      = */ cuda_plan_note,
    };
    if (hr_cuda_init(c, cfg) != HR_OK) {
        hr_error_prefix("starting the CUDA backend");
        cuda_free(be);
        return NULL;
    }
    be->device_id = c->bus_id[0] ? c->bus_id : NULL;
    return be;
}
