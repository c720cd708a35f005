/* elementwise.cu — ReLU, Dropout, Add, copies (Copy, Concat) and
 * (Log)Softmax on the GPU, forward and backward, as cpu_elementwise.c
 * computes them; outputs flagged acc add into what is there. */
#include "backend/cuda/common.cuh"

/* The ReLU kernels are pure bandwidth: where every float pointer is 16-byte
 * aligned (the arena aligns tensors to 256 bytes) a thread moves a float4, and
 * the grid's first n % 4 threads do the last values one by one; otherwise the
 * scalar kernels run. Each value goes through the same expression either way,
 * and a thread reads all of a value's inputs before writing it, so y or dx may
 * alias an input. */
static inline bool hr_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

__device__ __forceinline__ float relu1(float x) { return x > 0.0f ? x : 0.0f; }

/* dx = acc ? dx + v : v, where v is dy if the value was kept, else 0 */
__device__ __forceinline__ float relu_bwd1(bool keep, float g, float d, bool acc) {
    float v = keep ? g : 0.0f;
    return acc ? d + v : v;
}

__global__ void k_relu(const float *x, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = relu1(x[i]);
}

__global__ void k_relu4(const float *x, float *y, int64_t n) {
    const float4 *x4 = (const float4 *)x;
    float4 *y4 = (float4 *)y;
    HR_GRID_STRIDE(i, n / 4) {
        float4 v = x4[i];
        y4[i] = make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) y[i] = relu1(x[i]);
}

__global__ void k_relu_bwd(const float *y, const float *dy, float *dx, int64_t n, bool acc) {
    HR_GRID_STRIDE(i, n) dx[i] = relu_bwd1(y[i] > 0.0f, dy[i], acc ? dx[i] : 0.0f, acc);
}

__global__ void k_relu_bwd4(const float *y, const float *dy, float *dx, int64_t n, bool acc) {
    const float4 *y4 = (const float4 *)y, *g4 = (const float4 *)dy;
    float4 *d4 = (float4 *)dx;
    HR_GRID_STRIDE(i, n / 4) {
        float4 v = y4[i], g = g4[i], d = acc ? d4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        d4[i] = make_float4(relu_bwd1(v.x > 0.0f, g.x, d.x, acc), relu_bwd1(v.y > 0.0f, g.y, d.y, acc),
                            relu_bwd1(v.z > 0.0f, g.z, d.z, acc), relu_bwd1(v.w > 0.0f, g.w, d.w, acc));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) dx[i] = relu_bwd1(y[i] > 0.0f, dy[i], acc ? dx[i] : 0.0f, acc);
}

/* With a bit mask (training): bit k of mask byte j is x[8j+k] > 0, and the
 * mask is exactly (n+7)/8 bytes. A warp takes 32 consecutive values, one a
 * lane (coalesced, any alignment), and its ballot is the 32 bits of mask bytes
 * base/8 .. base/8+3 (little-endian); lanes 0-3 each write one of those bytes
 * that exists. The loop runs over a warp-uniform base, so the whole warp
 * reaches the ballot. */
__global__ void k_relu_mask(const float *x, float *y, uint8_t *mask, int64_t n) {
    int lane = threadIdx.x & 31;
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * 32; base < n; base += nw * 32) {
        int64_t i = base + lane;
        float v = i < n ? x[i] : 0.0f;
        unsigned bits = __ballot_sync(0xffffffffu, v > 0.0f);
        if (i < n) y[i] = relu1(v);
        if (lane < 4 && base + 8 * lane < n) mask[base / 8 + lane] = (uint8_t)(bits >> (8 * lane));
    }
}

/* The same with x and y 16-byte aligned and the mask 4-byte aligned: a warp
 * takes 128 values, a float4 a lane; lanes 8q..8q+7 hold mask word q of the
 * chunk, a nibble each, which three shuffles OR together for lane 8q to store
 * (four lanes storing 16 consecutive bytes). A word the end of x cuts short is
 * stored byte by byte, only the bytes that exist; its bits past n are 0. */
__global__ void k_relu_mask4(const float *x, float *y, uint8_t *mask, int64_t n) {
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
        float4 r = make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
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

__global__ void k_relu_bwd_mask(const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc) {
    HR_GRID_STRIDE(i, n) dx[i] = relu_bwd1((mask[i >> 3] >> (i & 7)) & 1, dy[i], acc ? dx[i] : 0.0f, acc);
}

/* A float4 of dy (16-byte aligned, as dx) takes its 4 bits from the mask byte
 * that holds them: lanes 2m and 2m+1 read the same byte, a warp 16 bytes. */
__global__ void k_relu_bwd_mask4(const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc) {
    const float4 *g4 = (const float4 *)dy;
    float4 *d4 = (float4 *)dx;
    HR_GRID_STRIDE(i, n / 4) {
        unsigned m = (unsigned)mask[i >> 1] >> (4 * (i & 1));
        float4 g = g4[i], d = acc ? d4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        d4[i] = make_float4(relu_bwd1(m & 1, g.x, d.x, acc), relu_bwd1(m & 2, g.y, d.y, acc),
                            relu_bwd1(m & 4, g.z, d.z, acc), relu_bwd1(m & 8, g.w, d.w, acc));
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = (n & ~(int64_t)3) + t;
    if (i < n) dx[i] = relu_bwd1((mask[i >> 3] >> (i & 7)) & 1, dy[i], acc ? dx[i] : 0.0f, acc);
}

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

__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_acc(const float *x, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void k_copy_rows(const float *src, int64_t sp, float *dst, int64_t dp, int64_t rows, int64_t cols, bool acc) {
    int64_t n = rows * cols;
    HR_GRID_STRIDE(i, n) {
        int64_t r = i / cols, c = i - r * cols;
        float v = src[r * sp + c];
        float *d = dst + r * dp + c;
        *d = acc ? *d + v : v;
    }
}

/* One warp a row; sums in double as the CPU does. */
__global__ void k_softmax(const float *x, float *y, int64_t N, int64_t C, bool lg) {
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *xi = x + r * C;
        float *yi = y + r * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < C; j += 32) mx = xi[j] > mx ? xi[j] : mx;
        mx = hr_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < C; j += 32) sum += exp((double)(xi[j] - mx));
        sum = hr_warp_sum(sum);
        double lse = lg ? (double)mx + log(sum) : 0;
        for (int64_t j = lane; j < C; j += 32)
            yi[j] = lg ? (float)((double)xi[j] - lse) : (float)(exp((double)(xi[j] - mx)) / sum);
    }
}

__global__ void k_softmax_bwd(const float *y, const float *dy, float *dx, int64_t N, int64_t C, bool lg, bool acc) {
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *yi = y + r * C, *gi = dy + r * C;
        float *di = dx + r * C;
        double dot = 0;
        for (int64_t j = lane; j < C; j += 32) dot += lg ? (double)gi[j] : (double)gi[j] * yi[j];
        dot = hr_warp_sum(dot);
        for (int64_t j = lane; j < C; j += 32) {
            float v = lg ? (float)(gi[j] - expf(yi[j]) * dot) : (float)(yi[j] * (gi[j] - dot));
            di[j] = acc ? di[j] + v : v;
        }
    }
}

extern "C" {

cudaError_t hrk_relu(cudaStream_t s, const float *x, float *y, int64_t n) {
    if (hr_al16(x) && hr_al16(y))
        k_relu4<<<hr_grid(n / 4), HR_THREADS, 0, s>>>(x, y, n);
    else
        k_relu<<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t hrk_relu_mask(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n) {
    if (hr_al16(x) && hr_al16(y) && ((uintptr_t)mask & 3) == 0)
        k_relu_mask4<<<hr_grid((n + 127) / 128 * 32), HR_THREADS, 0, s>>>(x, y, mask, n);
    else
        k_relu_mask<<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, mask, n);
    return cudaGetLastError();
}

cudaError_t hrk_relu_bwd_mask(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc) {
    if (hr_al16(dy) && hr_al16(dx))
        k_relu_bwd_mask4<<<hr_grid(n / 4), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc);
    else
        k_relu_bwd_mask<<<hr_grid(n), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc);
    return cudaGetLastError();
}

cudaError_t hrk_relu_bwd(cudaStream_t s, const float *y, const float *dy, float *dx, int64_t n, bool acc) {
    if (hr_al16(y) && hr_al16(dy) && hr_al16(dx))
        k_relu_bwd4<<<hr_grid(n / 4), HR_THREADS, 0, s>>>(y, dy, dx, n, acc);
    else
        k_relu_bwd<<<hr_grid(n), HR_THREADS, 0, s>>>(y, dy, dx, n, acc);
    return cudaGetLastError();
}

cudaError_t hrk_dropout(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n, float p, float scale,
                        uint64_t seed, uint64_t stream) {
    k_dropout<<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, mask, n, p, scale, seed, stream);
    return cudaGetLastError();
}

cudaError_t hrk_dropout_bwd(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, float scale,
                            bool acc) {
    k_dropout_bwd<<<hr_grid(n), HR_THREADS, 0, s>>>(mask, dy, dx, n, scale, acc);
    return cudaGetLastError();
}

cudaError_t hrk_add(cudaStream_t s, const float *a, const float *b, float *y, int64_t n) {
    k_add<<<hr_grid(n), HR_THREADS, 0, s>>>(a, b, y, n);
    return cudaGetLastError();
}

cudaError_t hrk_acc(cudaStream_t s, const float *x, float *y, int64_t n) {
    k_acc<<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t hrk_copy_rows(cudaStream_t s, const float *src, int64_t sp, float *dst, int64_t dp, int64_t rows,
                          int64_t cols, bool acc) {
    if (!acc) /* a plain strided copy: the copy engine's 2D form */
        return cudaMemcpy2DAsync(dst, (size_t)dp * sizeof(float), src, (size_t)sp * sizeof(float),
                                 (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, s);
    k_copy_rows<<<hr_grid(rows * cols), HR_THREADS, 0, s>>>(src, sp, dst, dp, rows, cols, acc);
    return cudaGetLastError();
}

cudaError_t hrk_softmax(cudaStream_t s, const float *x, float *y, int64_t N, int64_t C, bool lg) {
    k_softmax<<<hr_grid(N, 8), HR_THREADS, 0, s>>>(x, y, N, C, lg);
    return cudaGetLastError();
}

cudaError_t hrk_softmax_bwd(cudaStream_t s, const float *y, const float *dy, float *dx, int64_t N, int64_t C, bool lg,
                            bool acc) {
    k_softmax_bwd<<<hr_grid(N, 8), HR_THREADS, 0, s>>>(y, dy, dx, N, C, lg, acc);
    return cudaGetLastError();
}

} /* extern "C" */
