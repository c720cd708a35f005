/* activation.cu — the elementwise activations on the GPU (ReLU, LeakyReLU, GELU,
 * SiLU, Sigmoid, Tanh), forward and backward, as the CPU kernels compute them,
 * on F32, BF16 or F16 activations (computed in float, stored rounded). */

/* hr_cuda.h (through common.cuh) declares the entries (HR_OP_LIST's kernel
 * column), hr_cuda_fail and hr_cuda_stream, and brings op_list.h in with C
 * linkage. */
#include "backend/cuda/common.cuh"

#include <cublasLt.h>

/* Every kernel is bandwidth-bound: where all its value pointers are 16-byte
 * aligned (the arena aligns tensors to 256 bytes) a thread moves 16 bytes (4
 * floats or 8 halves) and the grid's first threads do the last values one by
 * one; otherwise the scalar kernel runs. Each value goes through the same
 * expression either way, so the path taken never changes a bit, and a thread
 * reads all of a value's inputs before writing it, so y or dx may alias an
 * input (in-place). The functions are functors, so one kernel body serves the
 * whole family, and the kernels are templates on the element type. */
static inline bool act_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- forward values ----
 * ReLU is PyTorch's clamp_min(x, 0): x < 0 ? 0 : x keeps NaN, and -0 as -0.
 * keep(x) is the mask bit the backward reads (cpu_activation.c's): ReLU's
 * !(x <= 0), so that a NaN passes dy (threshold_backward); LeakyReLU's x > 0,
 * so that a NaN takes the slope. */
struct FRelu {
    __device__ __forceinline__ float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
    __device__ __forceinline__ bool keep(float x) const { return !(x <= 0.0f); }
};
struct FLeaky {
    float a;
    __device__ __forceinline__ float operator()(float x) const { return x > 0.0f ? x : x * a; }
    __device__ __forceinline__ bool keep(float x) const { return x > 0.0f; }
};
/* The GELU expressions are grouped as cpu_activation.c groups them (PyTorch's
 * grouping), so that the float rounding matches as far as erff/tanhf/expf
 * allow. Exact: 0.5 x (1 + erf(x / sqrt 2)), x * (1/sqrt 2). */
struct FGelu {
    __device__ __forceinline__ float operator()(float x) const {
        return x * 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    }
};
#define GELU_K0 0.79788456080286536f /* sqrt(2/pi) */
#define GELU_K1 0.044715f
struct FGeluTanh {
    __device__ __forceinline__ float operator()(float x) const {
        return 0.5f * x * (1.0f + tanhf(GELU_K0 * (x + GELU_K1 * (x * x * x))));
    }
};
/* x / (1 + e^-x): for x very negative e^-x is inf and the quotient -0, no NaN */
struct FSilu {
    __device__ __forceinline__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};
struct FSigmoid {
    __device__ __forceinline__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct FTanh {
    __device__ __forceinline__ float operator()(float x) const { return tanhf(x); }
};

/* ---- backward values: v from what the forward kept and dy; dx = v or dx + v.
 * The mask forms take the kept bit (keep above), the others a float (x or y). ---- */
struct BReluMask {
    __device__ __forceinline__ float operator()(bool keep, float g) const { return keep ? g : 0.0f; }
};
struct BLeakyMask {
    float a;
    __device__ __forceinline__ float operator()(bool keep, float g) const { return keep ? g : g * a; }
};
/* ReLU from y (or x: y <= 0 exactly where x <= 0), as threshold_backward */
struct BRelu {
    __device__ __forceinline__ float operator()(float s, float g) const { return s <= 0.0f ? 0.0f : g; }
};
struct BLeaky { /* from x */
    float a;
    __device__ __forceinline__ float operator()(float x, float g) const { return x > 0.0f ? g : g * a; }
};
struct BGelu { /* from x: dy (Phi(x) + x phi(x)) */
    __device__ __forceinline__ float operator()(float x, float g) const {
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = expf(-0.5f * x * x) * 0.39894228040143268f; /* 1/sqrt(2 pi) */
        return g * (cdf + x * pdf);
    }
};
struct BGeluTanh { /* from x */
    __device__ __forceinline__ float operator()(float x, float g) const {
        float x2 = x * x;
        float t = tanhf(GELU_K0 * (x + GELU_K1 * (x2 * x)));
        return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * (GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2)));
    }
};
struct BSilu { /* from x */
    __device__ __forceinline__ float operator()(float x, float g) const {
        float s = 1.0f / (1.0f + expf(-x));
        return g * s * (1.0f + x * (1.0f - s));
    }
};
struct BSigmoid { /* from y */
    __device__ __forceinline__ float operator()(float y, float g) const { return g * (1.0f - y) * y; }
};
struct BTanh { /* from y */
    __device__ __forceinline__ float operator()(float y, float g) const { return g * (1.0f - y * y); }
};

/* dx = acc ? dx + v : v */
__device__ __forceinline__ float act_put(float v, float d, bool acc) { return acc ? d + v : v; }

/* ---- forward kernels: T the element type, V = hr_v16<T>::n values a vector ---- */
template <typename T, class F> static __global__ void k_act(const T *x, T *y, int64_t n, F f) {
    HR_GRID_STRIDE(i, n) y[i] = hr_to<T>(f(hr_f(x[i])));
}

template <typename T, class F> static __global__ void k_actv(const T *x, T *y, int64_t n, F f) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    HR_GRID_STRIDE(i, n / V) {
        vec v = ((const vec *)x)[i], r;
#pragma unroll
        for (int k = 0; k < V; k++) r.v[k] = hr_to<T>(f(hr_f(v.v[k])));
        ((vec *)y)[i] = r;
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = n - n % V + t;
    if (i < n) y[i] = hr_to<T>(f(hr_f(x[i])));
}

/* With a bit mask (training; ReLU and LeakyReLU): bit k of mask byte j is
 * f.keep(x[8j+k]), and the mask is exactly (n+7)/8 bytes. A warp takes 32
 * consecutive values, one a lane (coalesced, any alignment), and its ballot is
 * the 32 bits of mask bytes base/8 .. base/8+3 (little-endian); lanes 0-3 each
 * write one of those bytes that exists. The loop runs over a warp-uniform base,
 * so the whole warp reaches the ballot. */
template <typename T, class F>
static __global__ void k_act_mask(const T *x, T *y, uint8_t *mask, int64_t n, F f) {
    int lane = threadIdx.x & 31;
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * 32; base < n; base += nw * 32) {
        int64_t i = base + lane;
        float v = i < n ? hr_f(x[i]) : 0.0f;
        unsigned bits = __ballot_sync(0xffffffffu, f.keep(v));
        if (i < n) y[i] = hr_to<T>(f(v));
        if (lane < 4 && base + 8 * lane < n) mask[base / 8 + lane] = (uint8_t)(bits >> (8 * lane));
    }
}

/* The same with x and y 16-byte aligned and the mask 4-byte aligned: a warp
 * takes 32 V values, a vector of V a lane (V = 4 floats or 8 halves), and so
 * V mask bits a lane; the L = 32 / V lanes Lq..Lq+L-1 hold mask word q of the
 * chunk, which shuffles OR together for lane Lq to store. A word the end of x
 * cuts short is stored byte by byte, only the bytes that exist; its bits past
 * n are 0. */
template <typename T, class F>
static __global__ void k_act_maskv(const T *x, T *y, uint8_t *mask, int64_t n, F f) {
    constexpr int V = hr_v16<T>::n, L = 32 / V;
    typedef hr_vec<T, V> vec;
    int lane = threadIdx.x & 31;
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * 32 * V; base < n; base += nw * 32 * V) {
        int64_t i = base + V * lane;
        float v[V];
        if (i + V <= n) {
            vec a = *(const vec *)(x + i);
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = hr_f(a.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = i + k < n ? hr_f(x[i + k]) : 0.0f;
        }
        unsigned bits = 0;
#pragma unroll
        for (int k = 0; k < V; k++) bits |= (unsigned)f.keep(v[k]) << k;
        bits <<= V * (lane % L);
        for (int o = 1; o < L; o <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, o);
        if (i + V <= n) {
            vec r;
#pragma unroll
            for (int k = 0; k < V; k++) r.v[k] = hr_to<T>(f(v[k]));
            *(vec *)(y + i) = r;
        } else {
            for (int k = 0; k < V; k++)
                if (i + k < n) y[i + k] = hr_to<T>(f(v[k]));
        }
        if (lane % L == 0 && i < n) { /* lane Lq: i is the first value of word q */
            if (i + 32 <= n) *(uint32_t *)(mask + i / 8) = bits;
            else /* the last word: its bytes up to byte (n+7)/8 - 1 < i/8 + 4 */
                for (int64_t j = i / 8; j < (n + 7) / 8; j++) mask[j] = (uint8_t)(bits >> (8 * (j - i / 8)));
        }
    }
}

/* ---- backward kernels ---- */
/* from a value the forward kept (x or y) */
template <typename T, class B>
static __global__ void k_act_bwd(const T *s, const T *dy, T *dx, int64_t n, bool acc, B b) {
    HR_GRID_STRIDE(i, n) dx[i] = hr_to<T>(act_put(b(hr_f(s[i]), hr_f(dy[i])), acc ? hr_f(dx[i]) : 0.0f, acc));
}

template <typename T, class B>
static __global__ void k_act_bwdv(const T *s, const T *dy, T *dx, int64_t n, bool acc, B b) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    HR_GRID_STRIDE(i, n / V) {
        vec v = ((const vec *)s)[i], g = ((const vec *)dy)[i], d, r;
        if (acc) d = ((const vec *)dx)[i];
#pragma unroll
        for (int k = 0; k < V; k++)
            r.v[k] = hr_to<T>(act_put(b(hr_f(v.v[k]), hr_f(g.v[k])), acc ? hr_f(d.v[k]) : 0.0f, acc));
        ((vec *)dx)[i] = r;
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = n - n % V + t;
    if (i < n) dx[i] = hr_to<T>(act_put(b(hr_f(s[i]), hr_f(dy[i])), acc ? hr_f(dx[i]) : 0.0f, acc));
}

/* from the bit mask */
template <typename T, class B>
static __global__ void k_act_bwd_mask(const uint8_t *mask, const T *dy, T *dx, int64_t n, bool acc, B b) {
    HR_GRID_STRIDE(i, n)
    dx[i] = hr_to<T>(act_put(b((mask[i >> 3] >> (i & 7)) & 1, hr_f(dy[i])), acc ? hr_f(dx[i]) : 0.0f, acc));
}

/* A vector of V values of dy (16-byte aligned, as dx) takes its V bits from
 * the mask byte that holds them: 4 floats a nibble, 8 halves a byte. */
template <typename T, class B>
static __global__ void k_act_bwd_maskv(const uint8_t *mask, const T *dy, T *dx, int64_t n, bool acc, B b) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    HR_GRID_STRIDE(i, n / V) {
        unsigned m = (unsigned)mask[(V * i) >> 3] >> ((V * i) & 7);
        vec g = ((const vec *)dy)[i], d, r;
        if (acc) d = ((const vec *)dx)[i];
#pragma unroll
        for (int k = 0; k < V; k++)
            r.v[k] = hr_to<T>(act_put(b((m >> k) & 1, hr_f(g.v[k])), acc ? hr_f(d.v[k]) : 0.0f, acc));
        ((vec *)dx)[i] = r;
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = n - n % V + t;
    if (i < n) dx[i] = hr_to<T>(act_put(b((mask[i >> 3] >> (i & 7)) & 1, hr_f(dy[i])), acc ? hr_f(dx[i]) : 0.0f, acc));
}

/* ---- launchers: the vector form where every pointer allows it ---- */
template <typename T, class F> static cudaError_t act_fwd(cudaStream_t s, const void *xv, void *yv, int64_t n, F f) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if (act_al16(x) && act_al16(y))
        k_actv<T, F><<<hr_grid(n / hr_v16<T>::n), HR_THREADS, 0, s>>>(x, y, n, f);
    else
        k_act<T, F><<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, n, f);
    return cudaGetLastError();
}

template <typename T, class F>
static cudaError_t act_fwd_mask(cudaStream_t s, const void *xv, void *yv, uint8_t *mask, int64_t n, F f) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    constexpr int V = hr_v16<T>::n;
    if (act_al16(x) && act_al16(y) && ((uintptr_t)mask & 3) == 0)
        k_act_maskv<T, F><<<hr_grid((n + 32 * V - 1) / (32 * V) * 32), HR_THREADS, 0, s>>>(x, y, mask, n, f);
    else
        k_act_mask<T, F><<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, mask, n, f);
    return cudaGetLastError();
}

template <typename T, class B>
static cudaError_t act_bwd(cudaStream_t s, const void *sv, const void *dyv, void *dxv, int64_t n, bool acc, B b) {
    const T *sp = (const T *)sv, *dy = (const T *)dyv;
    T *dx = (T *)dxv;
    if (act_al16(sp) && act_al16(dy) && act_al16(dx))
        k_act_bwdv<T, B><<<hr_grid(n / hr_v16<T>::n), HR_THREADS, 0, s>>>(sp, dy, dx, n, acc, b);
    else
        k_act_bwd<T, B><<<hr_grid(n), HR_THREADS, 0, s>>>(sp, dy, dx, n, acc, b);
    return cudaGetLastError();
}

template <typename T, class B>
static cudaError_t act_bwd_mask(cudaStream_t s, const uint8_t *mask, const void *dyv, void *dxv, int64_t n, bool acc,
                                B b) {
    const T *dy = (const T *)dyv;
    T *dx = (T *)dxv;
    if (act_al16(dy) && act_al16(dx))
        k_act_bwd_maskv<T, B><<<hr_grid(n / hr_v16<T>::n), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc, b);
    else
        k_act_bwd_mask<T, B><<<hr_grid(n), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc, b);
    return cudaGetLastError();
}

/* The launchers for the node's element type. */
#define FWD(f) HR_DT_CALL(a->dt, act_fwd, s, p->x, p->out, n, f)
#define FWD_MASK(f) HR_DT_CALL(a->dt, act_fwd_mask, s, p->x, p->out, p->mask_out, n, f)
#define BWD(sv, b) HR_DT_CALL(a->dt, act_bwd, s, sv, p->dy, p->out, n, acc, b)
#define BWD_MASK(b) HR_DT_CALL(a->dt, act_bwd_mask, s, p->mask, p->dy, p->out, n, acc, b)

extern "C" {

/* cuBLASLt's GELU is the tanh form (GELU_AUX: the input written beside the
 * output; DGELU: the derivative times the product, from that input). */
bool hr_cuda_act_epilogue(int act, bool approx, bool backward, bool bias, int *epi) {
    if (act != HR_OP_GELU || !approx) return false;
    *epi = backward ? (bias ? -1 : (int)CUBLASLT_EPILOGUE_DGELU)
                    : (int)(bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
    return *epi >= 0;
}

HR_CUDA_TAKES_HALF(act)
HR_CUDA_TAKES_HALF(act_bwd)

/* Forward, every op of the family: out = f(x); ReLU and LeakyReLU also write
 * the bit mask when mask_out is given. */
hr_status hr_cuda_act(void *ctx, const hr_kargs *a) {
    const hr_act_args *p = &a->act;
    cudaStream_t s = hr_cuda_stream(ctx);
    int64_t n = p->n;
    if (n <= 0) return HR_OK;
    if (!p->x || !p->out) return HR_ERR_INVALID_ARG;
    cudaError_t e;
    const char *what;
    switch (a->op) {
    case HR_OP_RELU:
        what = "ReLU kernel";
        e = p->mask_out ? FWD_MASK(FRelu()) : FWD(FRelu());
        break;
    case HR_OP_LEAKY_RELU:
        what = "LeakyReLU kernel";
        e = p->mask_out ? FWD_MASK(FLeaky{p->alpha}) : FWD(FLeaky{p->alpha});
        break;
    case HR_OP_GELU:
        what = "GELU kernel";
        e = p->tanh_approx ? FWD(FGeluTanh()) : FWD(FGelu());
        break;
    case HR_OP_SILU:
        what = "SiLU kernel";
        e = FWD(FSilu());
        break;
    case HR_OP_SIGMOID:
        what = "Sigmoid kernel";
        e = FWD(FSigmoid());
        break;
    case HR_OP_TANH:
        what = "Tanh kernel";
        e = FWD(FTanh());
        break;
    default: return HR_ERR_INTERNAL; /* the kernel table sent another op here */
    }
    if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, what, cudaGetErrorString(e));
    return HR_OK;
}

/* Backward: out = dx (added with acc) from dy and what the forward kept. ReLU:
 * the mask, else y (or x); LeakyReLU: the mask, else x; GELU, SiLU: x;
 * Sigmoid, Tanh: y. */
hr_status hr_cuda_act_bwd(void *ctx, const hr_kargs *a) {
    const hr_act_args *p = &a->act;
    cudaStream_t s = hr_cuda_stream(ctx);
    int64_t n = p->n;
    bool acc = p->acc;
    if (n <= 0) return HR_OK;
    if (!p->dy || !p->out) return HR_ERR_INVALID_ARG;
    cudaError_t e;
    const char *what;
    switch (a->op) {
    case HR_OP_RELU_BWD: {
        what = "ReLU.backward kernel";
        const float *sv = p->y ? p->y : p->x;
        if (p->mask) e = BWD_MASK(BReluMask());
        else if (sv) e = BWD(sv, BRelu());
        else return HR_ERR_INVALID_ARG;
        break;
    }
    case HR_OP_LEAKY_RELU_BWD:
        what = "LeakyReLU.backward kernel";
        if (p->mask) e = BWD_MASK(BLeakyMask{p->alpha});
        else if (p->x) e = BWD(p->x, BLeaky{p->alpha});
        else return HR_ERR_INVALID_ARG;
        break;
    case HR_OP_GELU_BWD:
        what = "GELU.backward kernel";
        if (!p->x) return HR_ERR_INVALID_ARG;
        e = p->tanh_approx ? BWD(p->x, BGeluTanh()) : BWD(p->x, BGelu());
        break;
    case HR_OP_SILU_BWD:
        what = "SiLU.backward kernel";
        if (!p->x) return HR_ERR_INVALID_ARG;
        e = BWD(p->x, BSilu());
        break;
    case HR_OP_SIGMOID_BWD:
        what = "Sigmoid.backward kernel";
        if (!p->y) return HR_ERR_INVALID_ARG;
        e = BWD(p->y, BSigmoid());
        break;
    case HR_OP_TANH_BWD:
        what = "Tanh.backward kernel";
        if (!p->y) return HR_ERR_INVALID_ARG;
        e = BWD(p->y, BTanh());
        break;
    default: return HR_ERR_INTERNAL;
    }
    if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, what, cudaGetErrorString(e));
    return HR_OK;
}

} /* extern "C" */
