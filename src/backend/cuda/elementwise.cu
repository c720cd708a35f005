/* elementwise.cu — Copy (a gradient passed on or added in), Reshape's copy
 * where it is no view, and Add on the GPU, kernels and entries. */
#include "backend/cuda/common.cuh"

__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_acc(const float *x, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] += x[i];
}

extern "C" {

/* y = x, or y += x with acc; nothing when y is x (a view). */
hr_status hr_cuda_copy(void *ctx, const hr_kargs *a) {
    const hr_copy_args *p = &a->copy;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (p->acc) {
        k_acc<<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->x, p->y, p->n);
        HR_CU(cudaGetLastError());
    } else if (p->x != p->y) {
        HR_CU(cudaMemcpyAsync(p->y, p->x, sizeof(float) * (size_t)p->n, cudaMemcpyDeviceToDevice, s));
    }
    return HR_OK;
}

hr_status hr_cuda_add(void *ctx, const hr_kargs *a) {
    const hr_add_args *p = &a->add;
    k_add<<<hr_grid(p->n), HR_THREADS, 0, ((hr_cuda *)ctx)->stream>>>(p->a, p->b, p->y, p->n);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
