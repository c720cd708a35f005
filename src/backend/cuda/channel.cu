/* channel.cu — the per-channel helpers of Linear and Conv2d on (N, C, HW):
 * the bias broadcast into y and the bias gradient (double sums, fixed order).
 * y and dy hold F32, BF16 or F16 values; the bias and its gradient are F32. */
#include "backend/cuda/common.cuh"

#define CH_THREADS 512

/* y[n][c][hw] = b[c] (rounded to T), a pure write, seen as rows of cols
 * stores: the (n, c) planes, b[c] read once a row, V values a store (16
 * bytes when HW is a multiple of them and y is 16-byte aligned, else 1); or,
 * for HW = 1, the samples, b read along the row (col). 1 << lt threads a row
 * (a power of two that covers it, at most the block), so no element index is
 * divided and a warp stores contiguous bytes. */
template <typename T, int V>
__global__ void k_bias_fill(const float *b, T *y, int64_t rows, int64_t cols, int64_t C, bool col, int lt) {
    typedef hr_vec<T, V> vec;
    int64_t rpb = blockDim.x >> lt;
    for (int64_t r = (int64_t)blockIdx.x * rpb + (threadIdx.x >> lt); r < rows; r += (int64_t)gridDim.x * rpb) {
        T v = hr_to<T>(col ? 0.0f : b[r % C]);
        for (int64_t j = threadIdx.x & ((1 << lt) - 1); j < cols; j += 1 << lt) {
            if (col) v = hr_to<T>(b[j]);
            vec w;
#pragma unroll
            for (int k = 0; k < V; k++) w.v[k] = v;
            ((vec *)y)[r * cols + j] = w;
        }
    }
}

/* HW == 1: (N, C) row-major; a block owns 32 columns, 8 row groups each
 * summing every 8th row, then the groups are added in order. */
template <typename T> __global__ void k_col_sum(const T *dy, float *db, int64_t N, int64_t C, bool acc) {
    __shared__ double sh[8][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.x * 32 + tx;
    double s = 0;
    if (c < C)
        for (int64_t r = ty; r < N; r += 8) s += hr_f(dy[r * C + c]);
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
        double t = 0;
        for (int k = 0; k < 8; k++) t += sh[k][tx];
        db[c] = (acc ? db[c] : 0.0f) + (float)t;
    }
}

template <typename T> __global__ void k_chan_sum(const T *dy, float *db, int64_t N, int64_t C, int64_t HW, bool acc) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x, M = N * HW;
    double s = 0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += hr_f(dy[ch_index(m, c, C, HW)]);
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) db[c] = (acc ? db[c] : 0.0f) + (float)s;
}

/* Block (k, c) sums the samples [k N / S, (k+1) N / S) of channel c, row by
 * row (HW contiguous floats a row, no division per element); a thread keeps
 * the same elements whatever the timing, so the sum's bits are fixed. */
template <typename T> __global__ void k_chan_part(const T *dy, double *part, int64_t N, int64_t C, int64_t HW, int64_t S) {
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
            const T *row = dy + (n * C + c) * HW;
            for (int64_t h = h0; h < HW; h += hs) s += hr_f(row[h]);
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

/* HW == 1 spread over blocks: block (b, k) sums rows [k N / S, (k+1) N / S)
 * of the 32 V columns from b 32 V: lane l reads V columns (16 bytes when V >
 * 1), row group g (of 8) every 8th row, in double; the groups are added in
 * order into part[k C + c]. GPT-2's Linear biases: 0.13-0.18 ms in
 * k_col_sum's 24-96 blocks, each walking all 16,384 rows. */
template <typename T, int V> __global__ void k_col_part(const T *dy, double *part, int64_t N, int64_t C, int64_t S) {
    typedef hr_vec<T, V> vec;
    __shared__ double sh[8][32 * V + 1];
    int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    int64_t k = blockIdx.y, c0 = (int64_t)blockIdx.x * 32 * V + (int64_t)lane * V;
    int64_t n0 = k * N / S, n1 = (k + 1) * N / S;
    double s[V];
#pragma unroll
    for (int v = 0; v < V; v++) s[v] = 0;
    if (c0 < C) {
        int64_t n = n0 + g;
        for (; n + 24 < n1; n += 32) { /* four rows' loads in flight, added in row order */
            vec w0 = *(const vec *)(dy + n * C + c0), w1 = *(const vec *)(dy + (n + 8) * C + c0);
            vec w2 = *(const vec *)(dy + (n + 16) * C + c0), w3 = *(const vec *)(dy + (n + 24) * C + c0);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += hr_f(w0.v[v]);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += hr_f(w1.v[v]);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += hr_f(w2.v[v]);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += hr_f(w3.v[v]);
        }
        for (; n < n1; n += 8) {
            vec w = *(const vec *)(dy + n * C + c0);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += hr_f(w.v[v]);
        }
    }
#pragma unroll
    for (int v = 0; v < V; v++) sh[g][lane * V + v] = s[v];
    __syncthreads();
    for (int j = threadIdx.x; j < 32 * V; j += blockDim.x) {
        int64_t c = (int64_t)blockIdx.x * 32 * V + j;
        if (c >= C) continue;
        double t = 0;
        for (int q = 0; q < 8; q++) t += sh[q][j];
        part[k * C + c] = t;
    }
}

/* a block of 256 threads a 32 columns (hr_sum_parts) */
__global__ void k_col_finish(const double *part, float *db, int64_t C, int64_t S, bool acc) {
    __shared__ double sh[8][33];
    int64_t c = (int64_t)blockIdx.x * 32 + (threadIdx.x & 31);
    double s = hr_sum_parts(part, C, S, c, sh);
    if (threadIdx.x < 32 && c < C) db[c] = (acc ? db[c] : 0.0f) + (float)s;
}

static unsigned chan_grid(int64_t C) { return (unsigned)C; } /* C <= 2^31 by the model's checks */

/* ---- launchers, one instance per element type of y / dy ---- */
template <typename T> static cudaError_t bias_fill(cudaStream_t s, const float *b, void *y, int64_t N, int64_t C,
                                                   int64_t HW) {
    constexpr int V = hr_v16<T>::n;
    bool vec = HW % V == 0 && hr_al(y, 16), col = HW == 1;
    int64_t rows = col ? N : N * C, cols = col ? C : vec ? HW / V : HW;
    int lt = 0; /* log2 of the threads a row */
    while ((1 << lt) < HR_THREADS && ((int64_t)1 << lt) < cols) lt++;
    if (vec && !col)
        k_bias_fill<T, V><<<hr_grid(rows << lt), HR_THREADS, 0, s>>>(b, (T *)y, rows, cols, C, col, lt);
    else
        k_bias_fill<T, 1><<<hr_grid(rows << lt), HR_THREADS, 0, s>>>(b, (T *)y, rows, cols, C, col, lt);
    return cudaGetLastError();
}

template <typename T> static cudaError_t channel_sum(cudaStream_t s, const void *dy, float *db, int64_t N, int64_t C,
                                                     int64_t HW, bool acc) {
    if (HW == 1)
        k_col_sum<T><<<(unsigned)((C + 31) / 32), 256, 0, s>>>((const T *)dy, db, N, C, acc);
    else
        k_chan_sum<T><<<chan_grid(C), CH_THREADS, 0, s>>>((const T *)dy, db, N, C, HW, acc);
    return cudaGetLastError();
}

template <typename T> static cudaError_t channel_part(cudaStream_t s, const void *dy, double *part, int64_t N,
                                                      int64_t C, int64_t HW, int64_t S) {
    k_chan_part<T><<<dim3((unsigned)S, (unsigned)C), 256, 0, s>>>((const T *)dy, part, N, C, HW, S);
    return cudaGetLastError();
}

template <typename T> static cudaError_t col_part(cudaStream_t s, const void *dy, double *part, int64_t N, int64_t C,
                                                  int64_t S) {
    constexpr int V = hr_v16<T>::n;
    if (C % V == 0 && hr_al(dy, 16))
        k_col_part<T, V><<<dim3((unsigned)((C + 32 * V - 1) / (32 * V)), (unsigned)S), 256, 0, s>>>((const T *)dy, part,
                                                                                                     N, C, S);
    else
        k_col_part<T, 1><<<dim3((unsigned)((C + 31) / 32), (unsigned)S), 256, 0, s>>>((const T *)dy, part, N, C, S);
    return cudaGetLastError();
}

extern "C" {

cudaError_t hrk_bias_fill(cudaStream_t s, hr_dtype dt, const float *b, void *y, int64_t N, int64_t C, int64_t HW) {
    return HR_DT_CALL(dt, bias_fill, s, b, y, N, C, HW);
}

cudaError_t hrk_channel_sum(cudaStream_t s, hr_dtype dt, const void *dy, float *db, int64_t N, int64_t C, int64_t HW,
                            bool acc) {
    return HR_DT_CALL(dt, channel_sum, s, dy, db, N, C, HW, acc);
}

cudaError_t hrk_channel_sum_ws(cudaStream_t s, hr_dtype dt, const void *dy, float *db, int64_t N, int64_t C,
                               int64_t HW, bool acc, void *part) {
    if (HW == 1) {
        int64_t S = hr_col_splits(N, C);
        if (!part || S <= 1) return hrk_channel_sum(s, dt, dy, db, N, C, HW, acc);
        cudaError_t e = HR_DT_CALL(dt, col_part, s, dy, (double *)part, N, C, S);
        if (e != cudaSuccess) return e;
        k_col_finish<<<(unsigned)((C + 31) / 32), 256, 0, s>>>((const double *)part, db, C, S, acc);
        return cudaGetLastError();
    }
    int64_t S = hr_chan_splits(N, C);
    if (!part || S <= 1 || C > 65535) return hrk_channel_sum(s, dt, dy, db, N, C, HW, acc);
    cudaError_t e = HR_DT_CALL(dt, channel_part, s, dy, (double *)part, N, C, HW, S);
    if (e != cudaSuccess) return e;
    k_chan_finish<<<hr_grid(C), HR_THREADS, 0, s>>>((const double *)part, db, C, S, acc);
    return cudaGetLastError();
}

} /* extern "C" */
