/* concat.cu — Concat along channels on the GPU, forward and backward: strided
 * copies of each sample's block of channels (the copy engine's where it can). */
#include "backend/cuda/common.cuh"

__global__ void k_copy_rows(const float *src, int64_t sp, float *dst, int64_t dp, int64_t rows, int64_t cols, bool acc) {
    int64_t n = rows * cols;
    HR_GRID_STRIDE(i, n) {
        int64_t r = i / cols, c = i - r * cols;
        float v = src[r * sp + c];
        float *d = dst + r * dp + c;
        *d = acc ? *d + v : v;
    }
}

/* rows of `cols` floats from src (pitch sp) to dst (pitch dp), added when acc */
static cudaError_t hrk_copy_rows(cudaStream_t s, const float *src, int64_t sp, float *dst, int64_t dp, int64_t rows,
                                 int64_t cols, bool acc) {
    if (!acc) /* a plain strided copy: the copy engine's 2D form */
        return cudaMemcpy2DAsync(dst, (size_t)dp * sizeof(float), src, (size_t)sp * sizeof(float),
                                 (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, s);
    k_copy_rows<<<hr_grid(rows * cols), HR_THREADS, 0, s>>>(src, sp, dst, dp, rows, cols, acc);
    return cudaGetLastError();
}

extern "C" {

/* x[k] (N, c[k], inner) side by side into y (N, CY, inner) */
hr_status hr_cuda_concat(void *ctx, const hr_kargs *a) {
    const hr_concat_args *p = &a->cat;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    int64_t hw = p->inner, off = 0;
    for (int k = 0; k < p->k; k++) {
        HR_CU(hrk_copy_rows(s, p->x[k], p->c[k] * hw, p->y + off * hw, p->CY * hw, p->N, p->c[k] * hw, false));
        off += p->c[k];
    }
    return HR_OK;
}

/* dx = channels [offset, offset + C) of dy */
hr_status hr_cuda_concat_bwd(void *ctx, const hr_kargs *a) {
    const hr_concat_args *p = &a->cat;
    int64_t hw = p->inner;
    HR_CU(hrk_copy_rows(((hr_cuda *)ctx)->stream, p->dy + p->offset * hw, p->CY * hw, p->dx, p->C * hw, p->N,
                        p->C * hw, p->acc));
    return HR_OK;
}

} /* extern "C" */
