/* gemm_splitk.cu — the second half of a split-K matrix product (cuda_gemm.c):
 * the F32 partial products that one batched cuBLAS call left side by side in
 * the node's scratch, summed in a fixed order, plus the bias or the old C,
 * into C's type (F32, BF16, F16: rounded once, after the bias). */
#include "backend/cuda/common.cuh"

#define SK_LANES 32 /* outputs a block, one a lane: each load is a warp's 128 bytes */
#define SK_WARPS 8  /* warps a block, each summing every SK_WARPS-th partial */

/* Element e = i + j*m of the (m, n) column-major result. Warp w sums partials
 * w, w + SK_WARPS, ... in that order, then lane x of warp 0 adds the warps'
 * sums in the order 0..SK_WARPS-1: the bits depend on the shapes only. C may
 * hold NaN when beta is 0 (a fresh output), so it is read only when beta != 0. */
template <typename T>
__global__ void k_splitk_reduce(const float *__restrict__ part, int parts, int64_t m, int64_t mn,
                                const float *__restrict__ bias, float beta, T *C, int64_t ldc) {
    __shared__ float sh[SK_WARPS][SK_LANES];
    for (int64_t base = (int64_t)blockIdx.x * SK_LANES; base < mn; base += (int64_t)gridDim.x * SK_LANES) {
        int64_t e = base + threadIdx.x;
        float v = 0.0f;
        if (e < mn)
            for (int s = threadIdx.y; s < parts; s += SK_WARPS) v += part[(int64_t)s * mn + e];
        sh[threadIdx.y][threadIdx.x] = v;
        __syncthreads();
        if (threadIdx.y == 0 && e < mn) {
            float sum = sh[0][threadIdx.x];
            for (int w = 1; w < SK_WARPS; w++) sum += sh[w][threadIdx.x];
            int64_t i = e % m, j = e / m;
            T *c = C + i + j * ldc;
            if (bias) sum += bias[i];
            if (beta != 0.0f) sum += beta * hr_f(*c);
            *c = hr_to<T>(sum);
        }
        __syncthreads(); /* sh is written again by the next round */
    }
}

template <typename T>
static cudaError_t reduce(cudaStream_t s, const float *part, int parts, int64_t m, int64_t n, const float *bias,
                          float beta, void *C, int64_t ldc) {
    int64_t mn = m * n, blocks = (mn + SK_LANES - 1) / SK_LANES;
    if (mn <= 0) return cudaSuccess;
    dim3 block(SK_LANES, SK_WARPS);
    k_splitk_reduce<T><<<(unsigned)(blocks > HR_MAX_GRID ? HR_MAX_GRID : blocks), block, 0, s>>>(
        part, parts, m, mn, bias, beta, (T *)C, ldc);
    return cudaGetLastError();
}

cudaError_t hrk_splitk_reduce(cudaStream_t s, const float *part, int parts, int64_t m, int64_t n, const float *bias,
                              float beta, hr_dtype ct, void *C, int64_t ldc) {
    return HR_DT_CALL(ct, reduce, s, part, parts, m, n, bias, beta, C, ldc);
}
