/* gpus.c — the table of GPUs headroom has measured: total memory and the
 * runtime overhead (docs/benchmarks.md has the runs they come from). */
#include "backend/gpus.h"

#include <strings.h>

/* Each row from a run of bench/gpu_bench.sh on that GPU: overhead_bytes is
 * bench_step's measured runtime overhead (context + cuBLAS + cuDNN handles,
 * with cuDNN's kernels loaded), device_total cudaMemGetInfo's total. */
static const hr_gpu_info gpus[] = {
    {"h100", "NVIDIA H100 80GB HBM3", 85017493504ull, 630784000ull,
     "driver 580.159.04, CUDA 13.0, cuDNN 9.14, 2026-11-26"},
    {"h200", "NVIDIA H200", 150109880320ull, 630784000ull, "driver 580.159.04, CUDA 13.0, cuDNN 9.14, 2026-11-26"},
};

const hr_gpu_info *hr_gpu_find(const char *key) {
    for (size_t i = 0; key && i < sizeof gpus / sizeof *gpus; i++)
        if (!strcasecmp(key, gpus[i].key)) return &gpus[i];
    return NULL;
}

const char *hr_gpu_keys(void) { return "h100, h200"; }

bool hr_gpu_takes_half(hr_op op, hr_dtype dt) {
    if (dt != HR_BF16 && dt != HR_F16) return false;
    switch (op) {
    case HR_OP_LINEAR: case HR_OP_LINEAR_BWD: case HR_OP_CONV2D: case HR_OP_CONV2D_BWD:
    case HR_OP_RELU: case HR_OP_RELU_BWD: case HR_OP_LEAKY_RELU: case HR_OP_LEAKY_RELU_BWD:
    case HR_OP_GELU: case HR_OP_GELU_BWD: case HR_OP_SILU: case HR_OP_SILU_BWD:
    case HR_OP_SIGMOID: case HR_OP_SIGMOID_BWD: case HR_OP_TANH: case HR_OP_TANH_BWD:
    case HR_OP_MAXPOOL: case HR_OP_MAXPOOL_BWD: case HR_OP_AVGPOOL: case HR_OP_AVGPOOL_BWD:
    case HR_OP_BATCHNORM: case HR_OP_BATCHNORM_BWD: case HR_OP_DROPOUT: case HR_OP_DROPOUT_BWD:
    case HR_OP_RESHAPE: case HR_OP_COPY: case HR_OP_ADD: case HR_OP_CONCAT: case HR_OP_CONCAT_BWD:
    case HR_OP_CAST:
        return true;
    default:
        return false;
    }
}
