/* precision.cu — the mixed-precision ops on the GPU: Cast between F32, BF16
 * and F16 (round to nearest even, as the CPU's), and GradScaler's unscale
 * with its inf/NaN flag. */
#include "backend/cuda/common.cuh"

/* y = x, or y = y + x (acc), from TI to TO through float (every half value
 * is exact in it). Four values a thread where both sides are aligned to four
 * values (the grid's first threads do the last ones), else one; the same
 * value either way. */
template <typename TI, typename TO> __device__ __forceinline__ TO cast_one(TI x, TO y, bool acc) {
    return hr_to<TO>(acc ? hr_f(y) + hr_f(x) : hr_f(x));
}

template <typename TI, typename TO> __global__ void k_cast(const TI *x, TO *y, int64_t n, bool acc) {
    HR_GRID_STRIDE(i, n) y[i] = cast_one(x[i], acc ? y[i] : hr_to<TO>(0.0f), acc);
}

template <typename TI, typename TO> __global__ void k_cast4(const TI *x, TO *y, int64_t n, bool acc) {
    typedef hr_vec<TI, 4> vin;
    typedef hr_vec<TO, 4> vout;
    HR_GRID_STRIDE(i, n / 4) {
        vin a = ((const vin *)x)[i];
        vout b;
        if (acc) b = ((const vout *)y)[i];
#pragma unroll
        for (int k = 0; k < 4; k++) b.v[k] = cast_one(a.v[k], acc ? b.v[k] : hr_to<TO>(0.0f), acc);
        ((vout *)y)[i] = b;
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = n - n % 4 + t;
    if (i < n) y[i] = cast_one(x[i], acc ? y[i] : hr_to<TO>(0.0f), acc);
}

template <typename TI, typename TO> static cudaError_t cast_to(cudaStream_t s, const void *x, void *y, int64_t n, bool acc) {
    if (hr_al(x, 4 * sizeof(TI)) && hr_al(y, 4 * sizeof(TO)))
        k_cast4<TI, TO><<<hr_grid(n / 4), HR_THREADS, 0, s>>>((const TI *)x, (TO *)y, n, acc);
    else
        k_cast<TI, TO><<<hr_grid(n), HR_THREADS, 0, s>>>((const TI *)x, (TO *)y, n, acc);
    return cudaGetLastError();
}

/* the second type from `to`, the first already chosen */
template <typename TI> static cudaError_t cast_from(cudaStream_t s, const void *x, void *y, hr_dtype to, int64_t n,
                                                    bool acc) {
    return to == HR_BF16 ? cast_to<TI, __nv_bfloat16>(s, x, y, n, acc)
         : to == HR_F16  ? cast_to<TI, __half>(s, x, y, n, acc)
                         : cast_to<TI, float>(s, x, y, n, acc);
}

/* g *= inv; any inf or NaN sets *found (a plain store of 1: every writer agrees). */
__global__ void k_unscale(float *g, int64_t n, float inv, float *found) {
    bool bad = false;
    HR_GRID_STRIDE(i, n) {
        float v = g[i];
        bad |= !isfinite(v);
        g[i] = v * inv;
    }
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *found = 1.0f;
}

extern "C" {

HR_CUDA_TAKES_HALF(cast)

cudaError_t hrk_cast(cudaStream_t s, const void *x, hr_dtype from, void *y, hr_dtype to, int64_t n, bool acc) {
    if (n <= 0) return cudaSuccess;
    if ((from != HR_F32 && !hr_dtype_is_half(from)) || (to != HR_F32 && !hr_dtype_is_half(to)))
        return cudaErrorInvalidValue;
    return HR_DT_CALL(from, cast_from, s, x, y, to, n, acc);
}

hr_status hr_cuda_cast(void *ctx, const hr_kargs *a) {
    const hr_cast_args *p = &a->cast;
    bool ok = (p->from == HR_F32 || hr_dtype_is_half(p->from)) && (p->to == HR_F32 || hr_dtype_is_half(p->to));
    if (!ok)
        return hr_error_set(HR_ERR_UNSUPPORTED, "Cast from %s to %s: the GPU casts between F32, BF16 and F16 only",
                            hr_dtype_name(p->from), hr_dtype_name(p->to));
    HR_CU(hrk_cast(((hr_cuda *)ctx)->stream, p->x, p->from, p->y, p->to, p->n, p->acc));
    return HR_OK;
}

hr_status hr_cuda_unscale(void *ctx, const hr_kargs *a) {
    const hr_unscale_args *p = &a->unscale;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (!p->acc) HR_CU(cudaMemsetAsync(p->found_inf, 0, sizeof(float), s));
    if (p->n <= 0) return HR_OK;
    k_unscale<<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->g, p->n, p->inv_scale, p->found_inf);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
