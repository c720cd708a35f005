/* elementwise.cu — ReLU, Dropout, Add, copies (Copy, Concat) and
 * (Log)Softmax on the GPU, forward and backward, as cpu_elementwise.c
 * computes them; outputs flagged acc add into what is there. */
#include "backend/cuda/common.cuh"

__global__ void k_relu(const float *x, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void k_relu_bwd(const float *y, const float *dy, float *dx, int64_t n, bool acc) {
    HR_GRID_STRIDE(i, n) {
        float v = y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
}

/* With a bit mask (training): one thread a mask byte, i.e. 8 values, so no
 * two threads write the same byte. Bit k of byte j is y[8j+k] > 0. */
__global__ void k_relu_mask(const float *x, float *y, uint8_t *mask, int64_t n) {
    int64_t nb = (n + 7) / 8;
    HR_GRID_STRIDE(j, nb) {
        uint8_t bits = 0;
        for (int k = 0; k < 8 && 8 * j + k < n; k++) {
            float v = x[8 * j + k];
            bits |= (uint8_t)((v > 0.0f) << k);
            y[8 * j + k] = v > 0.0f ? v : 0.0f;
        }
        mask[j] = bits;
    }
}

__global__ void k_relu_bwd_mask(const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc) {
    HR_GRID_STRIDE(i, n) {
        float v = (mask[i >> 3] >> (i & 7)) & 1 ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
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
    k_relu<<<hr_grid(n), HR_THREADS, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t hrk_relu_mask(cudaStream_t s, const float *x, float *y, uint8_t *mask, int64_t n) {
    k_relu_mask<<<hr_grid((n + 7) / 8), HR_THREADS, 0, s>>>(x, y, mask, n);
    return cudaGetLastError();
}

cudaError_t hrk_relu_bwd_mask(cudaStream_t s, const uint8_t *mask, const float *dy, float *dx, int64_t n, bool acc) {
    k_relu_bwd_mask<<<hr_grid(n), HR_THREADS, 0, s>>>(mask, dy, dx, n, acc);
    return cudaGetLastError();
}

cudaError_t hrk_relu_bwd(cudaStream_t s, const float *y, const float *dy, float *dx, int64_t n, bool acc) {
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
