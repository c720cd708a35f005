/* common.cuh — what every kernel file shares: grid sizes, warp and block
 * reductions in a fixed order (same bits on a rerun), op_list.h's generator. */
#ifndef HR_CUDA_COMMON_CUH
#define HR_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/hr_cuda.h"

#define HR_THREADS 256
#define HR_MAX_GRID 8192

/* Blocks for n items, one a thread, capped: kernels loop with a grid stride. */
static inline unsigned hr_grid(int64_t n, int threads = HR_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > HR_MAX_GRID ? HR_MAX_GRID : b);
}

#define HR_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Index of the m-th element of channel c in an (N, C, HW) tensor, m in [0, N*HW). */
__device__ __forceinline__ int64_t ch_index(int64_t m, int64_t c, int64_t C, int64_t HW) {
    int64_t nn = m / HW;
    return (nn * C + c) * HW + (m - nn * HW);
}

template <typename T> __device__ __forceinline__ T hr_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float hr_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
 * gets the result. `sh` holds 32 values. */
template <typename T> __device__ T hr_block_sum(T v, T *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = hr_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (T)0;
    return hr_warp_sum(v);
}

/* op_list.h's hr_mix64 and hr_rng_uniform, bit for bit:
 * u(seed, stream, i) = splitmix64(key(seed, stream) + i) >> 40, times 2^-24
 * (docs/golden.md); tests/gpu/test_cuda_ops.c compares the masks exactly. */
__device__ __forceinline__ uint64_t hr_dev_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

__device__ __forceinline__ float hr_dev_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t x = hr_dev_mix64(((seed * 0x100000001B3ULL) ^ (stream * 0x9E3779B97F4A7C15ULL)) + i);
    return (float)(x >> 40) * (1.0f / 16777216.0f);
}

#endif
