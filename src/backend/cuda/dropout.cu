/* dropout.cu — Dropout on the GPU, forward and backward, kernels and
 * entries, with the CPU's masks bit for bit (common.cuh's generator). */
#include "backend/cuda/common.cuh"

/* The keep decision is hr_rng_uniform(seed, stream, i) >= p, as on the CPU. */
__global__ void k_dropout(const float *x, float *y, uint8_t *mask, int64_t n, float p, float scale, uint64_t seed,
                          uint64_t stream) {
    HR_GRID_STRIDE(i, n) {
        uint8_t keep = hr_dev_uniform(seed, stream, (uint64_t)i) >= p;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}

__global__ void k_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float scale, bool acc) {
    HR_GRID_STRIDE(i, n) {
        float v = mask[i] ? dy[i] * scale : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
}

extern "C" {

/* In training with p > 0: y and the mask. Otherwise y = x and the mask (if
 * the node has one) all ones, as the CPU leaves it. */
hr_status hr_cuda_dropout(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *p = &a->drop;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (!p->train || p->p == 0.0f) {
        if (p->y != p->x) HR_CU(cudaMemcpyAsync(p->y, p->x, sizeof(float) * (size_t)p->n, cudaMemcpyDeviceToDevice, s));
        if (p->mask_out) HR_CU(cudaMemsetAsync(p->mask_out, 1, (size_t)p->n, s));
        return HR_OK;
    }
    k_dropout<<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->x, p->y, p->mask_out, p->n, p->p, p->scale, p->seed, p->stream);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_dropout_bwd(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *p = &a->drop;
    k_dropout_bwd<<<hr_grid(p->n), HR_THREADS, 0, ((hr_cuda *)ctx)->stream>>>(p->mask, p->dy, p->dx, p->n, p->scale,
                                                                                p->acc);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
