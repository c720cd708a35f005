/* channel.cu — the per-channel helpers of Linear and Conv2d on (N, C, HW):
 * the bias broadcast into y and the bias gradient (double sums, fixed order). */
#include "backend/cuda/common.cuh"

#define CH_THREADS 512

/* y[n][c][hw] = b[c], a pure write, seen as rows of cols stores: the (n, c)
 * planes, b[c] read once a row, V floats a store (4 when HW % 4 == 0 and y is
 * 16-byte aligned); or, for HW = 1, the samples, b read along the row (col).
 * 1 << lt threads a row (a power of two that covers it, at most the block),
 * so no element index is divided and a warp stores contiguous bytes. */
template <int V>
__global__ void k_bias_fill(const float *b, float *y, int64_t rows, int64_t cols, int64_t C, bool col, int lt) {
    int64_t rpb = blockDim.x >> lt;
    for (int64_t r = (int64_t)blockIdx.x * rpb + (threadIdx.x >> lt); r < rows; r += (int64_t)gridDim.x * rpb) {
        float v = col ? 0.0f : b[r % C];
        for (int64_t j = threadIdx.x & ((1 << lt) - 1); j < cols; j += 1 << lt) {
            if (col) v = b[j];
            if (V == 4)
                ((float4 *)y)[r * cols + j] = make_float4(v, v, v, v);
            else
                y[r * cols + j] = v;
        }
    }
}

/* HW == 1: (N, C) row-major; a block owns 32 columns, 8 row groups each
 * summing every 8th row, then the groups are added in order. */
__global__ void k_col_sum(const float *dy, float *db, int64_t N, int64_t C, bool acc) {
    __shared__ double sh[8][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.x * 32 + tx;
    double s = 0;
    if (c < C)
        for (int64_t r = ty; r < N; r += 8) s += dy[r * C + c];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
        double t = 0;
        for (int k = 0; k < 8; k++) t += sh[k][tx];
        db[c] = (acc ? db[c] : 0.0f) + (float)t;
    }
}

__global__ void k_chan_sum(const float *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x, M = N * HW;
    double s = 0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += dy[ch_index(m, c, C, HW)];
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) db[c] = (acc ? db[c] : 0.0f) + (float)s;
}

/* Block (k, c) sums the samples [k N / S, (k+1) N / S) of channel c, row by
 * row (HW contiguous floats a row, no division per element); a thread keeps
 * the same elements whatever the timing, so the sum's bits are fixed. */
__global__ void k_chan_part(const float *dy, double *part, int64_t N, int64_t C, int64_t HW, int64_t S) {
    __shared__ double sh[32];
    int64_t k = blockIdx.x, c = blockIdx.y;
    int64_t n0 = k * N / S, n1 = (k + 1) * N / S;
    int t = threadIdx.x, nt = blockDim.x;
    int64_t P = HW >= nt ? 1 : nt / HW;    /* rows a pass */
    int64_t j = HW >= nt ? 0 : t / HW;     /* this thread's row in a pass */
    int64_t h0 = HW >= nt ? t : t % HW, hs = HW >= nt ? nt : HW;
    double s = 0;
    if (j < P)
        for (int64_t n = n0 + j; n < n1; n += P) {
            const float *row = dy + (n * C + c) * HW;
            for (int64_t h = h0; h < HW; h += hs) s += row[h];
        }
    s = hr_block_sum(s, sh);
    if (t == 0) part[c * S + k] = s;
}

__global__ void k_chan_finish(const double *part, float *db, int64_t C, int64_t S, bool acc) {
    HR_GRID_STRIDE(c, C) {
        double s = 0;
        for (int64_t k = 0; k < S; k++) s += part[c * S + k];
        db[c] = (acc ? db[c] : 0.0f) + (float)s;
    }
}

static unsigned chan_grid(int64_t C) { return (unsigned)C; } /* C <= 2^31 by the model's checks */

extern "C" {

cudaError_t hrk_bias_fill(cudaStream_t s, const float *b, float *y, int64_t N, int64_t C, int64_t HW) {
    bool v4 = HW % 4 == 0 && ((uintptr_t)y & 15) == 0, col = HW == 1;
    int64_t rows = col ? N : N * C, cols = col ? C : v4 ? HW / 4 : HW;
    int lt = 0; /* log2 of the threads a row */
    while ((1 << lt) < HR_THREADS && ((int64_t)1 << lt) < cols) lt++;
    if (v4)
        k_bias_fill<4><<<hr_grid(rows << lt), HR_THREADS, 0, s>>>(b, y, rows, cols, C, col, lt);
    else
        k_bias_fill<1><<<hr_grid(rows << lt), HR_THREADS, 0, s>>>(b, y, rows, cols, C, col, lt);
    return cudaGetLastError();
}

cudaError_t hrk_channel_sum(cudaStream_t s, const float *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc) {
    if (HW == 1)
        k_col_sum<<<(unsigned)((C + 31) / 32), 256, 0, s>>>(dy, db, N, C, acc);
    else
        k_chan_sum<<<chan_grid(C), CH_THREADS, 0, s>>>(dy, db, N, C, HW, acc);
    return cudaGetLastError();
}

cudaError_t hrk_channel_sum_ws(cudaStream_t s, const float *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc,
                               void *part) {
    int64_t S = hr_chan_splits(N, C);
    if (!part || HW <= 1 || S <= 1 || C > 65535) return hrk_channel_sum(s, dy, db, N, C, HW, acc);
    k_chan_part<<<dim3((unsigned)S, (unsigned)C), 256, 0, s>>>(dy, (double *)part, N, C, HW, S);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    k_chan_finish<<<hr_grid(C), HR_THREADS, 0, s>>>((const double *)part, db, C, S, acc);
    return cudaGetLastError();
}

} /* extern "C" */
