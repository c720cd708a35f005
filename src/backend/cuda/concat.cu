/* concat.cu — Concat along channels on the GPU, forward and backward: strided
 * copies of each sample's block of channels (the copy engine's where it can),
 * on F32, BF16 or F16 activations. */
#include "backend/cuda/common.cuh"

/* the added form (acc): d + v in float, stored rounded */
template <typename T>
__global__ void k_copy_rows(const T *src, int64_t sp, T *dst, int64_t dp, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    HR_GRID_STRIDE(i, n) {
        int64_t r = i / cols, c = i - r * cols;
        float v = hr_f(src[r * sp + c]);
        T *d = dst + r * dp + c;
        *d = hr_to<T>(hr_f(*d) + v);
    }
}

template <typename T>
static cudaError_t add_rows(cudaStream_t s, const void *src, int64_t sp, void *dst, int64_t dp, int64_t rows,
                           int64_t cols) {
    k_copy_rows<T><<<hr_grid(rows * cols), HR_THREADS, 0, s>>>((const T *)src, sp, (T *)dst, dp, rows, cols);
    return cudaGetLastError();
}

/* rows of `cols` values of type dt from src (pitch sp) to dst (pitch dp),
 * added when acc; pitches and offsets count values */
static cudaError_t hrk_copy_rows(cudaStream_t s, hr_dtype dt, const void *src, int64_t sp, void *dst, int64_t dp,
                                 int64_t rows, int64_t cols, bool acc) {
    size_t e = hr_dtype_size(dt);
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    if (!acc) /* a plain strided copy: the copy engine's 2D form */
        return cudaMemcpy2DAsync(dst, (size_t)dp * e, src, (size_t)sp * e, (size_t)cols * e, (size_t)rows,
                                 cudaMemcpyDeviceToDevice, s);
    return HR_DT_CALL(dt, add_rows, s, src, sp, dst, dp, rows, cols);
}

/* p + k values of type dt */
static const char *at(const void *p, int64_t k, hr_dtype dt) { return (const char *)p + k * (int64_t)hr_dtype_size(dt); }

extern "C" {

HR_CUDA_TAKES_HALF(concat)
HR_CUDA_TAKES_HALF(concat_bwd)

/* x[k] (N, c[k], inner) side by side into y (N, CY, inner) */
hr_status hr_cuda_concat(void *ctx, const hr_kargs *a) {
    const hr_concat_args *p = &a->cat;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    int64_t hw = p->inner, off = 0;
    for (int k = 0; k < p->k; k++) {
        HR_CU(hrk_copy_rows(s, a->dt, p->x[k], p->c[k] * hw, (void *)at(p->y, off * hw, a->dt), p->CY * hw, p->N,
                            p->c[k] * hw, false));
        off += p->c[k];
    }
    return HR_OK;
}

/* dx = channels [offset, offset + C) of dy */
hr_status hr_cuda_concat_bwd(void *ctx, const hr_kargs *a) {
    const hr_concat_args *p = &a->cat;
    int64_t hw = p->inner;
    HR_CU(hrk_copy_rows(((hr_cuda *)ctx)->stream, a->dt, at(p->dy, p->offset * hw, a->dt), p->CY * hw, p->dx,
                        p->C * hw, p->N, p->C * hw, p->acc));
    return HR_OK;
}

} /* extern "C" */
