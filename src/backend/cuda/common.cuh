/* common.cuh — what every kernel file shares: grid sizes, warp and block
 * reductions in a fixed order (same bits on a rerun), op_list.h's generator,
 * the activations' element types. */
#ifndef HR_CUDA_COMMON_CUH
#define HR_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

/* ---- element types: activations are float, __nv_bfloat16 or __half (hr_kargs.dt).
 * A kernel templated on T loads a value to float (hr_f: exact), computes in
 * float and stores it rounded to nearest even (hr_to); for float both are the
 * identity, so the F32 instantiation computes what the F32 kernel always did. */
__device__ __forceinline__ float hr_f(float v) { return v; }
__device__ __forceinline__ float hr_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float hr_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T hr_to(float v);
template <> __device__ __forceinline__ float hr_to<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 hr_to<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half hr_to<__half>(float v) { return __float2half_rn(v); }

/* V elements moved as one load or store (V * sizeof(T) bytes, aligned so). */
template <typename T, int V> struct alignas(sizeof(T) * V) hr_vec {
    T v[V];
};
/* Elements of a 16-byte vector: 4 floats, 8 halves. */
template <typename T> struct hr_v16 {
    static constexpr int n = 16 / (int)sizeof(T);
};

__host__ __device__ static inline bool hr_al(const void *p, size_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }

/* Calls f<T>(args...) for dt's element type (F32, BF16, F16). */
#define HR_DT_CALL(dt, f, ...)                                                                  \
    ((dt) == HR_BF16 ? f<__nv_bfloat16>(__VA_ARGS__)                                          \
     : (dt) == HR_F16 ? f<__half>(__VA_ARGS__)                                                 \
                      : f<float>(__VA_ARGS__))

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

/* log2 e and ln 2 in float: exp(y) as exp2f(y log2 e) is one multiply-add
 * and the hardware's 2^x (2 ulp), a scale folded into the multiply */
#define HR_LOG2E 1.44269504088896341f
#define HR_LN2 0.693147180559945309f

/* Column c's sum of S partials part[k cols + c], k = 0..S-1, by a block of
 * 8 warps (256 threads) that owns 32 columns (the lane's column): warp q adds
 * partials q, q + 8, ... (each a coalesced read of 32 columns, eight in
 * flight a column where one thread walking all S had one), then warp 0 adds
 * the 8 warps' sums in order: a fixed order, the same bits every run. The
 * sum is valid in warp 0; every thread of the block must call it. */
__device__ __forceinline__ double hr_sum_parts(const double *part, int64_t cols, int64_t S, int64_t c,
                                               double (*sh)[33]) {
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    double t = 0;
    if (c < cols)
        for (int64_t k = ty; k < S; k += 8) t += part[k * cols + c];
    sh[ty][tx] = t;
    __syncthreads();
    double s = 0;
    if (ty == 0)
        for (int q = 0; q < 8; q++) s += sh[q][tx];
    __syncthreads();
    return s;
}

/* 16 bytes from global to shared memory without passing through registers
 * (cp.async; both 16-byte aligned), in groups (hr_cp_async_commit); a group
 * has landed once hr_cp_async_wait_group has passed and a __syncthreads
 * follows. */
__device__ __forceinline__ void hr_cp_async16(void *dst, const void *src) {
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src));
}
__device__ __forceinline__ void hr_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* every committed group but the last `pending` has landed */
template <int pending> __device__ __forceinline__ void hr_cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
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

/* Attention's drop decisions (hr_attention_args, op_list.h), as the CPU
 * draws them (core.h): probability (i, j) of sequence n, head h is kept when
 * hr_attn_uniform(hr_attn_block_key(seed, stream, first + n, h, H, i, j), i,
 * j) >= p, and then scaled. A kernel takes the block key once a tile (tiles
 * are aligned and never cross a 65536 boundary), then a few 32-bit
 * operations a probability; (x >> 8) >= thr is u >= p, thr = ceil(p 2^24).
 * p == 0: none drawn. The stream is the step's, from dv in a replayed step. */
struct hr_attn_drop {
    float p, scale;
    uint32_t thr;
    uint64_t seed, stream, stream_base, first;
    const hr_step_vars *dv;
    int64_t H, T;
};
static inline hr_attn_drop hr_attn_drop_of(const hr_attention_args *a) {
    uint32_t thr = (uint32_t)ceil((double)a->pdrop * 16777216.0);
    return hr_attn_drop{a->pdrop, a->pscale, thr, a->seed, a->stream, a->stream_base, a->first, a->dv, a->H, a->T};
}
/* the step's stream in a kernel: a replayed graph reads the step from dv */
__device__ __forceinline__ uint64_t hr_attn_stream(const hr_attn_drop &d) {
    return d.dv ? d.stream_base ^ d.dv->t : d.stream;
}
/* the key of the 65536 x 65536 block of pairs that holds (i, j) */
__device__ __forceinline__ uint32_t hr_attn_bkey(const hr_attn_drop &d, uint64_t stream, int64_t n, int64_t h,
                                                 int64_t i, int64_t j) {
    return hr_attn_block_key(d.seed, stream, d.first + (uint64_t)n, (uint64_t)h, (uint64_t)d.H, (uint64_t)i,
                             (uint64_t)j);
}
/* pair (i, j)'s factor, bkey its block's key: scale kept, 0 dropped */
__device__ __forceinline__ float hr_attn_keep(const hr_attn_drop &d, uint32_t bkey, int64_t i, int64_t j) {
    uint32_t x = hr_hash32(bkey ^ ((((uint32_t)i & 0xffffU) << 16) | ((uint32_t)j & 0xffffU)));
    return (x >> 8) >= d.thr ? d.scale : 0.0f;
}

#endif
