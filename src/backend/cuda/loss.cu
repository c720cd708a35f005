/* loss.cu — CrossEntropyLoss and MSELoss on the GPU, forward and backward
 * (sums in double, as the CPU's; the cross-entropy's exp in float, the
 * CPU's in double), and the two-launch reduction they share. */

/* The reduction (the gradient norm uses it too): per-block partials in the
 * node's workspace, then one block adds them in order, so the result does not
 * depend on timing. */
#include "backend/cuda/common.cuh"

/* blocks of 8 warps for a warp a row, at most 2048 */
static unsigned ce_blocks_of(int64_t rows) {
    int64_t b = (rows + 7) / 8;
    return (unsigned)(b < 1 ? 1 : b > 2048 ? 2048 : b);
}

/* out[0] = (acc ? out[0] : 0) + sum(part[0..n)) / div */
__global__ void k_finish(const double *part, int n, float *out, bool acc, double div) {
    __shared__ double sh[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)((acc ? (double)out[0] : 0.0) + s / div);
}

/* Cross-entropy, one warp a row, on F32, BF16 or F16 logits (the half ones
 * as the matrix product wrote them: autocast's F32 copy would hold the same
 * values, widening being exact, at twice the bytes). Each lane keeps an
 * online maximum m and sum s = sum exp(x - m) (exp in float, the sum in
 * double) over its part of the row, read in 16-byte vectors (two in flight)
 * between a scalar head and tail; each vector's own (max, sum) in float
 * merges into the lane's; the lanes' pairs then merge. A -inf logit adds
 * nothing, a NaN makes the row NaN, as PyTorch's. */
struct ce_stats {
    float m;  /* the row's maximum */
    double s; /* sum exp(x - m) */
};

template <typename S> __device__ __forceinline__ void ce_add(float &m, S &s, float v) {
    float d = v - m;
    if (d > 0.0f) { /* a new maximum (the first finite value: m was -inf) */
        s = s * (S)expf(m - v) + (S)1;
        m = v;
    } else if (v != -INFINITY) {
        s += (S)expf(d); /* NaN stays NaN */
    }
}

/* (m, s) takes in (m2, s2); nothing when (m2, s2) saw only -inf (a NaN's
 * s2 is NaN, whatever m2, and carries on) */
__device__ __forceinline__ void ce_merge(float &m, double &s, float m2, float s2) {
    if (m2 == -INFINITY && s2 == 0.0f) return;
    if (m2 > m) {
        s = s * (double)expf(m - m2) + (double)s2;
        m = m2;
    } else {
        s += (double)s2 * (double)expf(m2 - m);
    }
}

/* Row layout for 16-byte vectors: [0, head) scalar, then nv vectors, then
 * the tail scalar (an element address not aligned to its size: all scalar). */
template <typename T> struct ce_span {
    static constexpr int V = 16 / (int)sizeof(T);
    int64_t head, nv, tail;
    __device__ ce_span(const T *xi, int64_t C) {
        uintptr_t a = (uintptr_t)xi;
        head = a % sizeof(T) ? C : (int64_t)(((16 - (a & 15)) & 15) / sizeof(T));
        if (head > C) head = C;
        nv = (C - head) / V;
        tail = head + nv * V;
    }
};

template <typename T> __device__ __forceinline__ void ce_vec(float &m, double &s, const hr_vec<T, ce_span<T>::V> &v) {
    float m8 = -INFINITY, s8 = 0.0f;
#pragma unroll
    for (int i = 0; i < ce_span<T>::V; i++) ce_add(m8, s8, hr_f(v.v[i]));
    ce_merge(m, s, m8, s8);
}

template <typename T> __device__ ce_stats ce_row(const T *xi, int64_t C, int lane) {
    typedef hr_vec<T, ce_span<T>::V> vec;
    ce_span<T> sp(xi, C);
    float m = -INFINITY;
    double s = 0;
    for (int64_t j = lane; j < sp.head; j += 32) ce_add(m, s, hr_f(xi[j]));
    const vec *xv = (const vec *)(xi + sp.head);
    int64_t k = lane;
    for (; k + 32 < sp.nv; k += 64) {
        vec v0 = xv[k], v1 = xv[k + 32];
        ce_vec<T>(m, s, v0);
        ce_vec<T>(m, s, v1);
    }
    if (k < sp.nv) ce_vec<T>(m, s, xv[k]);
    for (int64_t j = sp.tail + lane; j < C; j += 32) ce_add(m, s, hr_f(xi[j]));
    float mx = hr_warp_max(m);
    /* a lane that saw only -inf (or nothing) adds 0; a NaN stays */
    s = m == -INFINITY && s == 0.0 ? 0.0 : s * (double)expf(m - mx);
    s = hr_warp_sum(s);
    return {mx, s};
}

/* The block partials of sum over rows of mx + log(s) - x[label]. */
template <typename T> __global__ void k_ce(const T *x, const int32_t *lab, int64_t N, int64_t C, double *part) {
    __shared__ double sh[32];
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    double acc = 0;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const T *xi = x + r * C;
        ce_stats st = ce_row(xi, C, lane);
        if (lane == 0) acc += (double)st.m + log(st.s) - (double)hr_f(xi[lab[r]]);
    }
    acc = hr_block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* dx = (softmax(x) - onehot) * scale / N, in x's type: p = exp(x - lse) in
 * float, lse = mx + log(s) from the row's statistics; each dx element
 * written after its own x is read (dx may be x's bytes), in vectors where
 * dx's row lines up with x's. */
template <typename T> struct ce_grad {
    float lse, k;
    int64_t l;
    bool accum;
    __device__ __forceinline__ T at(float x, T old, int64_t j) const {
        float v = (expf(x - lse) - (j == l ? 1.0f : 0.0f)) * k;
        return hr_to<T>(accum ? hr_f(old) + v : v);
    }
};

template <typename T>
__global__ void k_ce_bwd(const T *x, const int32_t *lab, T *dx, int64_t N, int64_t C, double scale, bool accum) {
    typedef hr_vec<T, ce_span<T>::V> vec;
    constexpr int V = ce_span<T>::V;
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const T *xi = x + r * C;
        T *di = dx + r * C;
        ce_stats st = ce_row(xi, C, lane);
        ce_grad<T> g = {(float)((double)st.m + log(st.s)), (float)(scale / (double)N), lab[r], accum};
        ce_span<T> sp(xi, C);
        if ((((uintptr_t)xi ^ (uintptr_t)di) & 15) != 0) sp.head = sp.tail = C, sp.nv = 0;
        for (int64_t j = lane; j < sp.head; j += 32) di[j] = g.at(hr_f(xi[j]), di[j], j);
        const vec *xv = (const vec *)(xi + sp.head);
        vec *dv = (vec *)(di + sp.head);
        for (int64_t k = lane; k < sp.nv; k += 32) {
            vec v = xv[k], o, d;
            if (accum) o = dv[k];
#pragma unroll
            for (int i = 0; i < V; i++) d.v[i] = g.at(hr_f(v.v[i]), accum ? o.v[i] : v.v[i], sp.head + k * V + i);
            dv[k] = d;
        }
        for (int64_t j = sp.tail + lane; j < C; j += 32) di[j] = g.at(hr_f(xi[j]), di[j], j);
    }
}

/* ---- rows of logits in a piece of scratch (LinearCrossEntropy): row r at x
 * + r ld, C classes, ld - C padding columns. k_ce_rows finds each row's lse
 * and its term lse - x[label] (double); k_ce_rows_bwd then turns the row into
 * its gradient in place from that lse, the padding into zeros: the values
 * k_ce and k_ce_bwd give. k_ce_rows_grad (below) does both in one pass. */
/* A row's vectors split among P warps (part p takes the lane's vectors
 * lane + 32 p, stepping 32 P; part 0 the scalar head and tail): a row of
 * 50,257 logits is a chain of some 200 dependent merges a lane, too long for
 * one warp a row to keep the SMs busy when a piece has a few thousand rows.
 * Each vector's own (max, sum) is ce_vec's, as in ce_row. */
template <typename T> __device__ ce_stats ce_row_part(const T *xi, int64_t C, int lane, int part, int P) {
    typedef hr_vec<T, ce_span<T>::V> vec;
    ce_span<T> sp(xi, C);
    float m = -INFINITY;
    double s = 0;
    if (part == 0) {
        for (int64_t j = lane; j < sp.head; j += 32) ce_add(m, s, hr_f(xi[j]));
        for (int64_t j = sp.tail + lane; j < C; j += 32) ce_add(m, s, hr_f(xi[j]));
    }
    const vec *xv = (const vec *)(xi + sp.head);
    int64_t k = lane + 32 * part, step = 32 * (int64_t)P;
    for (; k + step < sp.nv; k += 2 * step) {
        vec v0 = xv[k], v1 = xv[k + step];
        ce_vec<T>(m, s, v0);
        ce_vec<T>(m, s, v1);
    }
    if (k < sp.nv) ce_vec<T>(m, s, xv[k]);
    float mx = hr_warp_max(m);
    s = m == -INFINITY && s == 0.0 ? 0.0 : s * (double)expf(m - mx);
    s = hr_warp_sum(s);
    return {mx, s};
}

/* (m, s) takes in another part's (m2, s2), both sums in double; nothing for
 * a part that saw only -inf; a NaN carries on */
__device__ __forceinline__ void ce_merge_parts(float &m, double &s, float m2, double s2) {
    if (m2 == -INFINITY && s2 == 0.0) return;
    if (m == -INFINITY && s == 0.0) {
        m = m2, s = s2;
    } else if (m2 > m) {
        s = s * (double)expf(m - m2) + s2;
        m = m2;
    } else {
        s += s2 * (double)expf(m2 - m);
    }
}

enum { CE_PARTS = 4, CE_ROWS_A_BLOCK = 8 / CE_PARTS }; /* 256 threads: 8 warps, CE_PARTS a row */

template <typename T>
__global__ void k_ce_rows(const T *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab, float *lse,
                          double *term) {
    __shared__ float shm[8];
    __shared__ double shs[8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = warp % CE_PARTS, slot = warp / CE_PARTS;
    for (int64_t base = (int64_t)blockIdx.x * CE_ROWS_A_BLOCK; base < rows; base += (int64_t)gridDim.x * CE_ROWS_A_BLOCK) {
        int64_t r = base + slot;
        ce_stats st = {-INFINITY, 0.0};
        if (r < rows) st = ce_row_part(x + r * ld, C, lane, part, CE_PARTS);
        if (lane == 0) shm[warp] = st.m, shs[warp] = st.s;
        __syncthreads();
        if (part == 0 && lane == 0 && r < rows) { /* the parts in order: the same sum every run */
            float m = shm[warp];
            double sum = shs[warp];
            for (int q = 1; q < CE_PARTS; q++) ce_merge_parts(m, sum, shm[warp + q], shs[warp + q]);
            double l = (double)m + log(sum);
            lse[r] = (float)l;
            term[r] = l - (double)hr_f(x[r * ld + lab[r]]);
        }
        __syncthreads();
    }
}

/* ld a multiple of V (16 bytes a vector) and x 16-byte aligned */
template <typename T>
__global__ void k_ce_rows_bwd(T *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab, const float *lse,
                              float k) {
    typedef hr_vec<T, ce_span<T>::V> vec;
    constexpr int V = ce_span<T>::V;
    int lane = threadIdx.x & 31;
    int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
        vec *xv = (vec *)(x + r * ld);
        float L = lse[r];
        int64_t l = lab[r];
        for (int64_t q = lane; q < ld / V; q += 32) {
            vec v = xv[q];
#pragma unroll
            for (int i = 0; i < V; i++) {
                int64_t j = q * V + i;
                v.v[i] = hr_to<T>(j < C ? (expf(hr_f(v.v[i]) - L) - (j == l ? 1.0f : 0.0f)) * k : 0.0f);
            }
            xv[q] = v;
        }
    }
}

/* Forward and backward of a row in one pass over global memory (the
 * LinearCrossEntropy's pieces): a block an SM, a row at a time, staged in
 * shared memory by 16-byte cp.async copies, the next row's arriving in a
 * second buffer while the block works on this one. From there, each
 * step a pass of independent work (no chain of rescalings): the row's
 * maximum M; sum exp(x - M) (float a thread, double across the threads, the
 * warps' sums added by one warp in a fixed tree: the same bits every run);
 * lse and the term; then the gradient (softmax - onehot) k written over the
 * row, the padding zeros.
 * exp(y) is exp2f(y log2 e) (2 ulp, and the argument's rounding: a few
 * parts in 10^7 at |y| = 20, below a bf16 logit's spacing by far). A
 * NaN logit makes the row's sum NaN, as PyTorch's; -inf ones add nothing.
 * The logits are read from global memory once instead of twice. Rows of
 * CE_GRAD_MIN_COLS classes or more (narrower ones: a warp a row does
 * better) and at most CE_GRAD_MAX_BYTES (two rows in an SM's shared memory).
 * 512 threads: a GPT-2 piece's kernel 13% faster than 1024 (more vectors a
 * thread between the barriers; H100, ncu), and than 256 or 384; two blocks
 * an SM of one buffer each were slower than one block of two. */
enum { CE_GRAD_THREADS = 512, CE_GRAD_WARPS = CE_GRAD_THREADS / 32, CE_GRAD_MIN_COLS = 1024 };
#define CE_GRAD_MAX_BYTES ((int64_t)112 * 1024)

template <typename T>
__global__ void __launch_bounds__(CE_GRAD_THREADS)
    k_ce_rows_grad(T *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab, double *term, float k) {
    typedef hr_vec<T, ce_span<T>::V> vec;
    constexpr int V = ce_span<T>::V;
    extern __shared__ __align__(16) unsigned char ce_row_sm[];
    __shared__ float shm[CE_GRAD_WARPS];
    __shared__ double shs[CE_GRAD_WARPS];
    __shared__ float sh_m, sh_lse;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int nv = (int)(ld / V), full = (int)(C / V), rest = (int)(C - (int64_t)full * V);
    size_t row_bytes = (size_t)ld * sizeof(T);
    int64_t r = blockIdx.x;
    if (r >= rows) return;
    for (int q = tid; q < nv; q += CE_GRAD_THREADS) hr_cp_async16(ce_row_sm + (size_t)q * 16, (const vec *)(x + r * ld) + q);
    hr_cp_async_commit();
    for (int it = 0; r < rows; r += gridDim.x, it++) {
        const unsigned char *buf = ce_row_sm + (it & 1) * row_bytes;
        const vec *sv = (const vec *)buf;
        const T *se = (const T *)buf;
        vec *xv = (vec *)(x + r * ld);
        if (r + gridDim.x < rows) { /* the next row into the other buffer while this one is worked on */
            unsigned char *nb = ce_row_sm + ((it + 1) & 1) * row_bytes;
            const vec *nx = (const vec *)(x + (r + gridDim.x) * ld);
            for (int q = tid; q < nv; q += CE_GRAD_THREADS) hr_cp_async16(nb + (size_t)q * 16, nx + q);
            hr_cp_async_commit();
            hr_cp_async_wait_group<1>();
        } else {
            hr_cp_async_wait_group<0>();
        }
        __syncthreads();
        /* the maximum */
        float m = -INFINITY;
        for (int q = tid; q < full; q += CE_GRAD_THREADS) {
            vec v = sv[q];
#pragma unroll
            for (int i = 0; i < V; i++) m = fmaxf(m, hr_f(v.v[i]));
        }
        if (tid < rest) m = fmaxf(m, hr_f(se[full * V + tid]));
        m = hr_warp_max(m);
        if (lane == 0) shm[warp] = m;
        __syncthreads();
        if (warp == 0) {
            float M = hr_warp_max(lane < CE_GRAD_WARPS ? shm[lane] : -INFINITY);
            if (lane == 0) sh_m = M;
        }
        __syncthreads();
        float M = sh_m, nm2 = -M * HR_LOG2E;
        /* sum exp(x - M): -inf adds 0 (a row all -inf: M = -inf, the sum NaN, as the log-sum-exp's) */
        float f = 0.0f;
        for (int q = tid; q < full; q += CE_GRAD_THREADS) {
            vec v = sv[q];
#pragma unroll
            for (int i = 0; i < V; i++) f += exp2f(fmaf(hr_f(v.v[i]), HR_LOG2E, nm2));
        }
        if (tid < rest) f += exp2f(fmaf(hr_f(se[full * V + tid]), HR_LOG2E, nm2));
        double s = hr_warp_sum((double)f);
        if (lane == 0) shs[warp] = s;
        __syncthreads();
        if (warp == 0) { /* the warps' sums in a fixed tree: the same bits every run */
            double S = hr_warp_sum(lane < CE_GRAD_WARPS ? shs[lane] : 0.0);
            if (lane == 0) {
                double l = (double)M + log(S);
                sh_lse = (float)l;
                term[r] = l - (double)hr_f(se[lab[r]]);
            }
        }
        __syncthreads();
        float nl2 = -sh_lse * HR_LOG2E;
        int64_t l = lab[r];
        for (int q = tid; q < nv; q += CE_GRAD_THREADS) {
            vec v = sv[q];
#pragma unroll
            for (int i = 0; i < V; i++) {
                int64_t j = (int64_t)q * V + i;
                float p = exp2f(fmaf(hr_f(v.v[i]), HR_LOG2E, nl2));
                v.v[i] = hr_to<T>(j < C ? (p - (j == l ? 1.0f : 0.0f)) * k : 0.0f);
            }
            xv[q] = v;
        }
        __syncthreads(); /* the row after next takes this buffer */
    }
}

/* two rows and the kernel's own 400-odd bytes (1 KiB kept) */
static bool ce_rows_grad_fits(hr_dtype dt, int64_t ld, int64_t C, size_t smem_optin) {
    int64_t row = ld * (int64_t)hr_dtype_size(dt);
    return C >= CE_GRAD_MIN_COLS && row <= CE_GRAD_MAX_BYTES && 2 * row + 1024 <= (int64_t)smem_optin;
}

template <typename T>
static cudaError_t ce_rows_grad(cudaStream_t s, void *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab,
                                double *term, float k, int sms) {
    size_t bytes = 2 * (size_t)ld * sizeof(T);
    cudaError_t e = cudaFuncSetAttribute(k_ce_rows_grad<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    int64_t blocks = sms > 0 ? sms : 1;
    blocks = blocks < rows ? blocks : rows;
    k_ce_rows_grad<T><<<(unsigned)(blocks < 1 ? 1 : blocks), CE_GRAD_THREADS, bytes, s>>>((T *)x, ld, rows, C, lab,
                                                                                       term, k);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t ce_rows(cudaStream_t s, const void *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab,
                           float *lse, double *term) {
    int64_t blocks = (rows + CE_ROWS_A_BLOCK - 1) / CE_ROWS_A_BLOCK;
    k_ce_rows<T><<<(unsigned)(blocks < 1 ? 1 : blocks > 8192 ? 8192 : blocks), 256, 0, s>>>((const T *)x, ld, rows, C,
                                                                                        lab, lse, term);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t ce_rows_bwd(cudaStream_t s, void *x, int64_t ld, int64_t rows, int64_t C, const int32_t *lab,
                               const float *lse, float k) {
    k_ce_rows_bwd<T><<<ce_blocks_of(rows), HR_THREADS, 0, s>>>((T *)x, ld, rows, C, lab, lse, k);
    return cudaGetLastError();
}

__global__ void k_mse(const float *p, const float *t, int64_t n, double *part) {
    __shared__ double sh[32];
    double s = 0;
    HR_GRID_STRIDE(i, n) {
        double d = (double)p[i] - t[i];
        s += d * d;
    }
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_mse_bwd(const float *p, const float *t, float *dx, int64_t n, float k, bool acc) {
    HR_GRID_STRIDE(i, n) {
        float v = k * (p[i] - t[i]);
        dx[i] = acc ? dx[i] + v : v;
    }
}

static unsigned red_grid(int64_t items, int per_block) {
    int64_t b = (items + per_block - 1) / per_block;
    if (b < 1) b = 1;
    return (unsigned)(b > HR_CUDA_RED_BLOCKS ? HR_CUDA_RED_BLOCKS : b);
}

/* The cross-entropy's forward: a warp a row, up to 2048 blocks of 8 (16,384
 * warps: enough rows in flight to keep memory busy), one partial a block. */
static unsigned ce_blocks(int64_t N) { return ce_blocks_of(N); }

template <typename T>
static cudaError_t hrk_ce_bwd(cudaStream_t s, const hr_loss_args *p) {
    k_ce_bwd<T><<<hr_grid(p->N, 8), HR_THREADS, 0, s>>>((const T *)p->x, p->labels, (T *)p->dx, p->N, p->C,
                                                         (double)p->scale, p->acc);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t hrk_cross_entropy(cudaStream_t s, const void *x, const int32_t *lab, float *loss, int64_t N,
                                     int64_t C, double *ws) {
    unsigned nb = ce_blocks(N);
    k_ce<T><<<nb, HR_THREADS, 0, s>>>((const T *)x, lab, N, C, ws);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : hr_finish_launch(s, ws, (int)nb, loss, false, (double)N);
}

static cudaError_t hrk_mse(cudaStream_t s, const float *p, const float *t, float *loss, int64_t n, double *ws) {
    unsigned nb = red_grid(n, HR_THREADS * 4);
    k_mse<<<nb, HR_THREADS, 0, s>>>(p, t, n, ws);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : hr_finish_launch(s, ws, (int)nb, loss, false, (double)n);
}

extern "C" {

/* Cross-entropy reads half logits itself (autocast's rule for it,
 * HR_AC_READS_HALF); MSE's are F32 (HR_AC_FP32), never half here. */
HR_CUDA_TAKES_HALF(loss)
HR_CUDA_TAKES_HALF(loss_bwd)

cudaError_t hr_finish_launch(cudaStream_t s, const double *part, int n, float *out, bool acc, double div) {
    k_finish<<<1, HR_THREADS, 0, s>>>(part, n, out, acc, div);
    return cudaGetLastError();
}

cudaError_t hrk_ce_rows(cudaStream_t s, hr_dtype dt, const void *x, int64_t ld, int64_t rows, int64_t C,
                        const int32_t *lab, float *lse, double *term) {
    return HR_DT_CALL(dt, ce_rows, s, x, ld, rows, C, lab, lse, term);
}

cudaError_t hrk_ce_rows_bwd(cudaStream_t s, hr_dtype dt, void *x, int64_t ld, int64_t rows, int64_t C,
                            const int32_t *lab, const float *lse, float k) {
    return HR_DT_CALL(dt, ce_rows_bwd, s, x, ld, rows, C, lab, lse, k);
}

bool hrk_ce_rows_grad_fits(hr_dtype dt, int64_t ld, int64_t C, size_t smem_optin) {
    return ce_rows_grad_fits(dt, ld, C, smem_optin);
}

cudaError_t hrk_ce_rows_grad(cudaStream_t s, hr_dtype dt, void *x, int64_t ld, int64_t rows, int64_t C,
                             const int32_t *lab, double *term, float k, int sms) {
    return HR_DT_CALL(dt, ce_rows_grad, s, x, ld, rows, C, lab, term, k, sms);
}

/* ---- the kernel entries ---- */
/* The forward's block partials: one double a block of the first launch. */
static size_t loss_ws(const hr_kargs *a) {
    return a->op == HR_OP_CROSS_ENTROPY ? ce_blocks(a->loss.N) * sizeof(double) : HR_CUDA_RED_BYTES;
}
size_t hr_cuda_loss_workspace(hr_cuda *c, const hr_kargs *a) { return loss_ws(a); }

/* The loss (a mean) into loss[0]; the block partials go to the node's
 * workspace (hr_cuda_loss_workspace). */
hr_status hr_cuda_loss(void *ctx, const hr_kargs *a) {
    const hr_loss_args *p = &a->loss;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    bool ce = a->op == HR_OP_CROSS_ENTROPY;
    if (!a->ws || a->ws_bytes < loss_ws(a))
        return hr_error_set(HR_ERR_INTERNAL, "%s: no workspace was planned", hr_op_name(a->op));
    if (!ce && a->dt != HR_F32) return hr_error_set(HR_ERR_INTERNAL, "MSELoss runs F32 predictions only");
    if (ce)
        HR_CU(HR_DT_CALL(a->dt, hrk_cross_entropy, s, p->x, p->labels, p->loss, p->N, p->C, (double *)a->ws));
    else
        HR_CU(hrk_mse(s, p->x, p->target, p->loss, p->n, (double *)a->ws));
    return HR_OK;
}

hr_status hr_cuda_loss_bwd(void *ctx, const hr_kargs *a) {
    const hr_loss_args *p = &a->loss;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (a->op == HR_OP_CROSS_ENTROPY_BWD) {
        HR_CU(HR_DT_CALL(a->dt, hrk_ce_bwd, s, p));
        return HR_OK;
    }
    if (a->dt != HR_F32) return hr_error_set(HR_ERR_INTERNAL, "MSELoss.backward runs F32 predictions only");
    k_mse_bwd<<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->x, p->target, p->dx, p->n, 2.0f * p->scale / (float)p->n, p->acc);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
