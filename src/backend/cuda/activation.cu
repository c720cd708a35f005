/* activation.cu — the elementwise activations on the GPU (ReLU, LeakyReLU, GELU,
 * SiLU, Sigmoid, Tanh), forward and backward, as the CPU kernels compute them. */

/* hr_cuda.h (through common.cuh) declares the entries (HR_OP_LIST's kernel
 * column), hr_cuda_fail and hr_cuda_stream, and brings op_list.h in with C
 * linkage. */
#include "backend/cuda/common.cuh"

/* Every kernel is bandwidth-bound: where all its float pointers are 16-byte
 * aligned (the arena aligns tensors to 256 bytes) a thread moves a float4 and
 * the grid's first n % 4 threads do the last values one by one; otherwise the
 * scalar kernel runs. Each value goes through the same expression either way,
 * so the path taken never changes a bit, and a thread reads all of a value's
 * inputs before writing it, so y or dx may alias an input (in-place). The
 * functions are functors, so one kernel body serves the whole family. */
static inline bool act_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- forward values ---- */
struct FRelu {
    __device__ __forceinline__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct FLeaky {
    float a;
    __device__ __forceinline__ float operator()(float x) const { return x > 0.0f ? x : x * a; }
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
 * The mask forms take the kept bit (x > 0), the others a float (x or y). ---- */
struct BReluMask {
    __device__ __forceinline__ float operator()(bool keep, float g) const { return keep ? g : 0.0f; }
};
struct BLeakyMask {
    float a;
    __device__ __forceinline__ float operator()(bool keep, float g) const { return keep ? g : g * a; }
};
/* ReLU from y (or x: y > 0 exactly where x > 0) */
struct BRelu {
    __device__ __forceinline__ float operator()(float s, float g) const { return s > 0.0f ? g : 0.0f; }
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

/* ---- forward kernels ---- */
template <class F> static __global__ void k_act(const float *x, float *y, int64_t n, F f) {
    HR_GRID_STRIDE(i, n) y[i] = f(x[i]);
}

template <class F> static __global__ void k_act4(const float *x, float *y, int64_t n, F f) {
    const float4 *x4 = (const float4 *)x;
    float4 *y4 = (float4 *)y;
    HR_GRID_STRIDE(i, n / 4) {
        float4 v = x4[i];
        y4[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) y[i] = f(x[i]);
}

/* With a bit mask (training; ReLU and LeakyReLU): bit k of mask byte j is
 * x[8j+k] > 0, and the mask is exactly (n+7)/8 bytes. A warp takes 32
 * consecutive values, one a lane (coalesced, any alignment), and its ballot is
 * the 32 bits of mask bytes base/8 .. base/8+3 (little-endian); lanes 0-3 each
 * write one of those bytes that exists. The loop runs over a warp-uniform base,
 * so the whole warp reaches the ballot. */
template <class F> static __global__ void k_act_mask(const float *x, float *y, uint8_t *mask, int64_t n, F f) {
    int lane = threadIdx.x & 31;
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * 32; base < n; base += nw * 32) {
        int64_t i = base + lane;
        float v = i < n ? x[i] : 0.0f;
        unsigned bits = __ballot_sync(0xffffffffu, v > 0.0f);
        if (i < n) y[i] = f(v);
        if (lane < 4 && base + 8 * lane < n) mask[base / 8 + lane] = (uint8_t)(bits >> (8 * lane));
    }
}

/* The same with x and y 16-byte aligned and the mask 4-byte aligned: a warp
 * takes 128 values, a float4 a lane; lanes 8q..8q+7 hold mask word q of the
 * chunk, a nibble each, which three shuffles OR together for lane 8q to store
 * (four lanes storing 16 consecutive bytes). A word the end of x cuts short is
 * stored byte by byte, only the bytes that exist; its bits past n are 0. */
template <class F> static __global__ void k_act_mask4(const float *x, float *y, uint8_t *mask, int64_t n, F f) {
    int lane = threadIdx.x & 31;
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * 128; base < n; base += nw * 128) {
        int64_t i = base + 4 * lane;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i + 4 <= n) v = *(const float4 *)(x + i);
        else {
            if (i < n) v.x = x[i];
            if (i + 1 < n) v.y = x[i + 1];
            if (i + 2 < n) v.z = x[i + 2];
        }
        unsigned bits = (unsigned)(v.x > 0.0f) | (unsigned)(v.y > 0.0f) << 1 | (unsigned)(v.z > 0.0f) << 2 |
                        (unsigned)(v.w > 0.0f) << 3;
        bits <<= 4 * (lane & 7);
        for (int o = 1; o < 8; o <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, o);
        float4 r = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
        if (i + 4 <= n) *(float4 *)(y + i) = r;
        else {
            if (i < n) y[i] = r.x;
            if (i + 1 < n) y[i + 1] = r.y;
            if (i + 2 < n) y[i + 2] = r.z;
        }
        if ((lane & 7) == 0 && i < n) { /* lane 8q: i is the first value of word q */
            if (i + 32 <= n) *(uint32_t *)(mask + i / 8) = bits;
            else /* the last word: its bytes up to byte (n+7)/8 - 1 < i/8 + 4 */
                for (int64_t j = i / 8; j < (n + 7) / 8; j++) mask[j] = (uint8_t)(bits >> (8 * (j - i / 8)));
        }
    }
}

/* ---- backward kernels ---- */
/* from a float the forward kept (x or y) */
template <class B>
static __global__ void k_act_bwd(const float *s, const float *dy, float *dx, int64_t n, bool acc, B b) {
    HR_GRID_STRIDE(i, n) dx[i] = act_put(b(s[i], dy[i]), acc ? dx[i] : 0.0f, acc);
}

template <class B>
static __global__ void k_act_bwd4(const float *s, const float *dy, float *dx, int64_t n, bool acc, B b) {
    const float4 *s4 = (const float4 *)s, *g4 = (const float4 *)dy;
    float4 *d4 = (float4 *)dx;
    HR_GRID_STRIDE(i, n / 4) {
        float4 v = s4[i], g = g4[i], d = acc ? d4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        d4[i] = make_float4(act_put(b(v.x, g.x), d.x, acc), act_put(b(v.y, g.y), d.y, acc),
                            act_put(b(v.z, g.z), d.z, acc), act_put(b(v.w, g.w), d.w, acc));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) dx[i] = act_put(b(s[i], dy[i]), acc ? dx[i] : 0.0f, acc);
}

/* from the bit mask */
template <class B>
static __global__ void k_act_bwd_mask(const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc, B b) {
    HR_GRID_STRIDE(i, n) dx[i] = act_put(b((mask[i >> 3] >> (i & 7)) & 1, dy[i]), acc ? dx[i] : 0.0f, acc);
}

/* A float4 of dy (16-byte aligned, as dx) takes its 4 bits from the mask byte
 * that holds them: lanes 2m and 2m+1 read the same byte, a warp 16 bytes. */
template <class B>
static __global__ void k_act_bwd_mask4(const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc, B b) {
    const float4 *g4 = (const float4 *)dy;
    float4 *d4 = (float4 *)dx;
    HR_GRID_STRIDE(i, n / 4) {
        unsigned m = (unsigned)mask[i >> 1] >> (4 * (i & 1));
        float4 g = g4[i], d = acc ? d4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        d4[i] = make_float4(act_put(b(m & 1, g.x), d.x, acc), act_put(b(m & 2, g.y), d.y, acc),
                            act_put(b(m & 4, g.z), d.z, acc), act_put(b(m & 8, g.w), d.w, acc));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) dx[i] = act_put(b((mask[i >> 3] >> (i & 7)) & 1, dy[i]), acc ? dx[i] : 0.0f, acc);
}

/* ---- launchers: the float4 form where every pointer allows it ---- */
template <class F> static cudaError_t act_fwd(cudaStream_t s, const float *x, float *y, int64_t n, F f) {
    if (act_al16(x) && act_al16(y))
        k_act4<F><<<hr_grid(n / 4), HR_THREADS, 0, s>>>(x, y, n, f);
    else
        k_act<F><<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, n, f);
    return cudaGetLastError();
}

template <class F>
static cudaError_t act_fwd_mask(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n, F f) {
    if (act_al16(x) && act_al16(y) && ((uintptr_t)mask & 3) == 0)
        k_act_mask4<F><<<hr_grid((n + 127) / 128 * 32), HR_THREADS, 0, s>>>(x, y, mask, n, f);
    else
        k_act_mask<F><<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, mask, n, f);
    return cudaGetLastError();
}

template <class B>
static cudaError_t act_bwd(cudaStream_t s, const float *sv, const float *dy, float *dx, int64_t n, bool acc, B b) {
    if (act_al16(sv) && act_al16(dy) && act_al16(dx))
        k_act_bwd4<B><<<hr_grid(n / 4), HR_THREADS, 0, s>>>(sv, dy, dx, n, acc, b);
    else
        k_act_bwd<B><<<hr_grid(n), HR_THREADS, 0, s>>>(sv, dy, dx, n, acc, b);
    return cudaGetLastError();
}

template <class B>
static cudaError_t act_bwd_mask(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc,
                                B b) {
    if (act_al16(dy) && act_al16(dx))
        k_act_bwd_mask4<B><<<hr_grid(n / 4), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc, b);
    else
        k_act_bwd_mask<B><<<hr_grid(n), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc, b);
    return cudaGetLastError();
}

extern "C" {

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
        e = p->mask_out ? act_fwd_mask(s, p->x, p->out, p->mask_out, n, FRelu()) : act_fwd(s, p->x, p->out, n, FRelu());
        break;
    case HR_OP_LEAKY_RELU:
        what = "LeakyReLU kernel";
        e = p->mask_out ? act_fwd_mask(s, p->x, p->out, p->mask_out, n, FLeaky{p->alpha})
                        : act_fwd(s, p->x, p->out, n, FLeaky{p->alpha});
        break;
    case HR_OP_GELU:
        what = "GELU kernel";
        e = p->tanh_approx ? act_fwd(s, p->x, p->out, n, FGeluTanh()) : act_fwd(s, p->x, p->out, n, FGelu());
        break;
    case HR_OP_SILU:
        what = "SiLU kernel";
        e = act_fwd(s, p->x, p->out, n, FSilu());
        break;
    case HR_OP_SIGMOID:
        what = "Sigmoid kernel";
        e = act_fwd(s, p->x, p->out, n, FSigmoid());
        break;
    case HR_OP_TANH:
        what = "Tanh kernel";
        e = act_fwd(s, p->x, p->out, n, FTanh());
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
        if (p->mask) e = act_bwd_mask(s, p->mask, p->dy, p->out, n, acc, BReluMask());
        else if (sv) e = act_bwd(s, sv, p->dy, p->out, n, acc, BRelu());
        else return HR_ERR_INVALID_ARG;
        break;
    }
    case HR_OP_LEAKY_RELU_BWD:
        what = "LeakyReLU.backward kernel";
        if (p->mask) e = act_bwd_mask(s, p->mask, p->dy, p->out, n, acc, BLeakyMask{p->alpha});
        else if (p->x) e = act_bwd(s, p->x, p->dy, p->out, n, acc, BLeaky{p->alpha});
        else return HR_ERR_INVALID_ARG;
        break;
    case HR_OP_GELU_BWD:
        what = "GELU.backward kernel";
        if (!p->x) return HR_ERR_INVALID_ARG;
        e = p->tanh_approx ? act_bwd(s, p->x, p->dy, p->out, n, acc, BGeluTanh())
                           : act_bwd(s, p->x, p->dy, p->out, n, acc, BGelu());
        break;
    case HR_OP_SILU_BWD:
        what = "SiLU.backward kernel";
        if (!p->x) return HR_ERR_INVALID_ARG;
        e = act_bwd(s, p->x, p->dy, p->out, n, acc, BSilu());
        break;
    case HR_OP_SIGMOID_BWD:
        what = "Sigmoid.backward kernel";
        if (!p->y) return HR_ERR_INVALID_ARG;
        e = act_bwd(s, p->y, p->dy, p->out, n, acc, BSigmoid());
        break;
    case HR_OP_TANH_BWD:
        what = "Tanh.backward kernel";
        if (!p->y) return HR_ERR_INVALID_ARG;
        e = act_bwd(s, p->y, p->dy, p->out, n, acc, BTanh());
        break;
    default: return HR_ERR_INTERNAL;
    }
    if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, what, cudaGetErrorString(e));
    return HR_OK;
}

} /* extern "C" */
