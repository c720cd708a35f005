/* cpu_backend.c — the CPU backend's table: a 64-byte aligned host arena,
 * plain copies, and the kernel table that HR_OP_LIST fills. */
#include "backend/cpu/cpu.h"

#include "backend/gpus.h"

#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Built from the op list: an op whose kernel is missing here fails to link.
 * Sized by its initialisers, so the count check below has something to check. */
static const hr_kernel_fn cpu_kernels[] = {
#define HR_X_CPU_KERNEL(E, id, k, name) [HR_OP_##E] = hr_cpu_##k,
    HR_OP_LIST(HR_X_CPU_KERNEL)
#undef HR_X_CPU_KERNEL
};
_Static_assert(sizeof cpu_kernels / sizeof cpu_kernels[0] == HR_OP_COUNT, "one CPU kernel entry per op");

/* The larger of the two conv paths' needs: the path is chosen at the first
 * run, and the plan stays exact either way. A backend that plans for a GPU
 * (takes_half set: made for a CUDA config) counts what the GPU's kernels
 * take too, where that is known without one. */
static size_t cpu_workspace(hr_backend *be, const hr_kargs *a) {
    size_t w = hr_cpu_workspace_size(be->ctx, a), d = hr_cpu_dnnl_workspace_size(be->ctx, a);
    size_t g = be->takes_half ? hr_gpu_workspace(a) : 0;
    w = w > d ? w : d;
    return w > g ? w : g;
}

static hr_status cpu_arena_alloc(hr_backend *be, size_t bytes, void **base) {
    (void)be;
    *base = hr_arena_host_alloc(bytes);
    if (!*base) return hr_error_prefix("allocating the planned arena (%zu bytes)", bytes);
    return HR_OK;
}

static void cpu_arena_free(hr_backend *be, void *base) {
    (void)be;
    hr_arena_host_free(base);
}

static hr_status cpu_copy(hr_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    if (dst != src) memcpy(dst, src, n);
    return HR_OK;
}

static hr_status cpu_run(hr_backend *be, const hr_kargs *a) {
    if ((unsigned)a->op >= HR_OP_COUNT || !be->kernels[a->op])
        return hr_error_set(HR_ERR_INTERNAL, "cpu backend: no kernel for op %s", hr_op_name(a->op));
    return be->kernels[a->op](be->ctx, a);
}

/* A CPU backend made for a CUDA config only plans for a GPU where there is
 * none (plan --gpu, hr_largest_batch): it counts the bytes of the GPU's half
 * kernels, never runs them. */
static bool plans_gpu_half(hr_backend *be, hr_op op, hr_dtype dt) {
    (void)be;
    return hr_gpu_takes_half(op, dt);
}

static hr_status cpu_sync(hr_backend *be) {
    (void)be;
    return HR_OK;
}

static void cpu_free(hr_backend *be) {
    if (!be) return;
    if (be->ctx) hr_cpu_dnnl_close(be->ctx);
    hr_free(be->ctx);
    hr_free(be);
}

hr_backend *hr_backend_cpu_new(const hr_config_t *cfg) {
    hr_backend *be = hr_calloc(1, sizeof *be);
    hr_cpu *c = hr_calloc(1, sizeof *c);
    if (!be || !c) {
        hr_free(be);
        hr_free(c);
        return NULL;
    }
    openblas_set_num_threads(1); /* our threads split the work; see hr_cpu_sgemm */
#ifdef _OPENMP
    c->nthreads = omp_get_max_threads();
#else
    c->nthreads = 1;
#endif
    hr_options o = hr_options_read();
    c->dnnl_mode = cfg && cfg->device == HR_DEVICE_CUDA ? 0 : o.dnnl; /* planning for a GPU: no oneDNN bytes */
    c->dnnl_verbose = o.profile > 0;
    *be = (hr_backend){
        /* .name           = */ "cpu",
        /* .device_id      = */ NULL,
        /* .arena_kind     = */ HR_MEM_ARENA_HOST,
        /* .ctx            = */ c,
        /* .kernels        = */ cpu_kernels,
        /* .supports       = */ NULL,
        /* .takes_half     = */ cfg && cfg->device == HR_DEVICE_CUDA ? plans_gpu_half : NULL,
        /* .set_batch      = */ NULL,
        /* .workspace_size = */ cpu_workspace,
        /* .arena_alloc    = */ cpu_arena_alloc,
        /* .arena_free     = */ cpu_arena_free,
        /* .upload         = */ cpu_copy,
        /* .upload_input   = */ NULL,
        /* .download       = */ cpu_copy,
        /* .run            = */ cpu_run,
        /* .run_group      = */ NULL,
        /* .sync           = */ cpu_sync,
        /* .mem_info       = */ NULL,
        /* .alloc_count    = */ NULL,
        /* .overhead       = */ NULL,
        /* .mark           = */ NULL,
        /* .mark_ms        = */ NULL,
        /* .free           = */ cpu_free,
        /* .graph_begin    = */ NULL,
        /* .graph_end      = */ NULL,
        /* .graph_launch   = */ NULL,
        /* .step_check     = */ NULL,
        /* .loss_add       = */ NULL,
        /* .loss_queue     = */ NULL,
        /* .loss_wait      = */ NULL,
        /* .upload_staged  = */ NULL,
        /* .stage_in       = */ NULL,
        /* .plan_note      = */ NULL,
    };
    return be;
}

#ifndef HR_CUDA
bool hr_backend_cuda_available(void) { return false; }
hr_backend *hr_backend_cuda_new(const hr_config_t *cfg) {
    (void)cfg;
    hr_error_set(HR_ERR_UNSUPPORTED, "this headroom was built without CUDA (no nvcc at build time); use --device cpu "
                                     "or rebuild with the CUDA toolkit on the PATH");
    return NULL;
}
#endif
