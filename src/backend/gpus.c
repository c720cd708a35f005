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

/* cuda_gemm.c's lce_plan_for without split-K's partials (none for a head's
 * shapes: thousands of tiles) and with the default piece. */
size_t hr_gpu_workspace(const hr_kargs *a) {
    if (a->op != HR_OP_LINEAR_CE) return 0;
    const hr_linear_ce_args *l = &a->lce;
    size_t es = hr_dtype_size(a->dt);
    int64_t outp = (l->out + 7) / 8 * 8, r = (int64_t)(HR_GPU_CE_PIECE_BYTES / ((size_t)outp * es));
    r = r < l->N ? r : l->N;
    r = r > 0 ? r : 1;
    size_t w = outp != l->out ? hr_align_up((size_t)(outp * l->in) * es, HR_ALIGN) : 0;
    return w + hr_align_up((size_t)(r * outp) * es, HR_ALIGN) + hr_align_up((size_t)r * sizeof(float), HR_ALIGN) +
           hr_align_up((size_t)l->N * sizeof(double), HR_ALIGN) + ((size_t)4 << 20);
}

bool hr_gpu_takes_half(hr_op op, hr_dtype dt) {
    return (dt == HR_BF16 || dt == HR_F16) && (unsigned)op < HR_OP_COUNT && hr_op_descs[op]->autocast != HR_AC_FP32;
}
