/* cpu_backend.c — the CPU backend's table: a 64-byte aligned host arena,
 * plain copies, and the one switch that sends each node to its kernel. */
#include "backend/cpu/cpu.h"

#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static size_t cpu_workspace(hr_backend *be, const hr_graph *g, const hr_node *n) {
    if (n->op == HR_OP_CONV2D || n->op == HR_OP_CONV2D_BWD) return hr_cpu_conv_workspace(be->ctx, g, n);
    return 0;
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

static hr_status cpu_run(hr_backend *be, const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    hr_cpu *c = be->ctx;
    switch (n->op) {
    case HR_OP_LINEAR: hr_cpu_linear(g, n, ptr); break;
    case HR_OP_LINEAR_BWD: hr_cpu_linear_bwd(g, n, ptr); break;
    case HR_OP_CONV2D: hr_cpu_conv2d(c, g, n, ptr); break;
    case HR_OP_CONV2D_BWD: hr_cpu_conv2d_bwd(c, g, n, ptr); break;
    case HR_OP_RELU: hr_cpu_relu(g, n, ptr); break;
    case HR_OP_RELU_BWD: hr_cpu_relu_bwd(g, n, ptr); break;
    case HR_OP_DROPOUT: hr_cpu_dropout(g, n, ptr, si); break;
    case HR_OP_DROPOUT_BWD: hr_cpu_dropout_bwd(g, n, ptr); break;
    case HR_OP_ADD: hr_cpu_add(g, n, ptr); break;
    case HR_OP_RESHAPE: case HR_OP_COPY: hr_cpu_copy(g, n, ptr); break;
    case HR_OP_CONCAT: hr_cpu_concat(g, n, ptr); break;
    case HR_OP_CONCAT_BWD: hr_cpu_concat_bwd(g, n, ptr); break;
    case HR_OP_SOFTMAX: hr_cpu_softmax(g, n, ptr, false); break;
    case HR_OP_LOGSOFTMAX: hr_cpu_softmax(g, n, ptr, true); break;
    case HR_OP_SOFTMAX_BWD: hr_cpu_softmax_bwd(g, n, ptr, false); break;
    case HR_OP_LOGSOFTMAX_BWD: hr_cpu_softmax_bwd(g, n, ptr, true); break;
    case HR_OP_MAXPOOL: hr_cpu_maxpool(g, n, ptr); break;
    case HR_OP_MAXPOOL_BWD: hr_cpu_maxpool_bwd(g, n, ptr); break;
    case HR_OP_AVGPOOL: hr_cpu_avgpool(g, n, ptr); break;
    case HR_OP_AVGPOOL_BWD: hr_cpu_avgpool_bwd(g, n, ptr); break;
    case HR_OP_BATCHNORM: hr_cpu_batchnorm(g, n, ptr); break;
    case HR_OP_BATCHNORM_BWD: hr_cpu_batchnorm_bwd(g, n, ptr); break;
    case HR_OP_CROSS_ENTROPY: hr_cpu_cross_entropy(g, n, ptr); break;
    case HR_OP_CROSS_ENTROPY_BWD: hr_cpu_cross_entropy_bwd(g, n, ptr); break;
    case HR_OP_MSE: hr_cpu_mse(g, n, ptr); break;
    case HR_OP_MSE_BWD: hr_cpu_mse_bwd(g, n, ptr); break;
    case HR_OP_GRAD_SQNORM: hr_cpu_grad_sqnorm(g, n, ptr); break;
    case HR_OP_SGD: hr_cpu_sgd(g, n, ptr, si); break;
    case HR_OP_ADAM: hr_cpu_adam(g, n, ptr, si); break;
    default: return hr_error_set(HR_ERR_INTERNAL, "cpu backend: no kernel for op %s", hr_op_name(n->op));
    }
    return HR_OK;
}

static hr_status cpu_sync(hr_backend *be) {
    (void)be;
    return HR_OK;
}

static void cpu_free(hr_backend *be) {
    if (!be) return;
    hr_free(be->ctx);
    hr_free(be);
}

hr_backend *hr_backend_cpu_new(const hr_config_t *cfg) {
    (void)cfg;
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
    *be = (hr_backend){
        /* .name           = */ "cpu",
        /* .arena_kind     = */ HR_MEM_ARENA_HOST,
        /* .ctx            = */ c,
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
