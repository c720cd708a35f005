/* attention.cu — causal self-attention on the GPU in fp32, one warp a query
 * (forward, dq) or a key (dk, dv): an online softmax forward, keeping only
 * each query's log-sum-exp; the backward recomputes the probabilities from
 * it. Every value is written by one warp in a fixed order: no atomics, the
 * same bits every run. Each lane holds E = ceil(head size / 32) channels. */
#include "backend/cuda/common.cuh"

#define HR_ATTN_WARPS 4 /* warps a block */

/* lane's channels of a head-size vector */
template <int E> __device__ __forceinline__ void load_row(const float *p, int64_t hs, int lane, float *r) {
#pragma unroll
    for (int e = 0; e < E; e++) {
        int64_t d = lane + 32 * e;
        r[e] = d < hs ? p[d] : 0.0f;
    }
}

template <int E> __device__ __forceinline__ float warp_dot(const float *a, const float *b) {
    float s = 0;
#pragma unroll
    for (int e = 0; e < E; e++) s += a[e] * b[e];
    return hr_warp_sum(s);
}

template <int E> __device__ __forceinline__ void store_row(float *p, int64_t hs, int lane, const float *r, bool acc) {
#pragma unroll
    for (int e = 0; e < E; e++) {
        int64_t d = lane + 32 * e;
        if (d < hs) p[d] = acc ? p[d] + r[e] : r[e];
    }
}

/* row r = ((n H) + h) T + i: the (sequence, head, position) a warp works on */
#define HR_ATTN_ROWS(r, R)                                                                                  \
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < (R);                         \
         r += ((int64_t)gridDim.x * blockDim.x) >> 5)

template <int E>
__global__ void k_attn_fwd(const float *qkv, float *y, float *lse, int64_t N, int64_t T, int64_t C, int64_t H, float scale) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H, row = 3 * C;
    HR_ATTN_ROWS(r, N * H * T) {
        int64_t i = r % T, h = (r / T) % H, n = r / (T * H);
        const float *base = qkv + n * T * row + h * hs;
        float q[E], k[E], v[E], acc[E];
        load_row<E>(base + i * row, hs, lane, q);
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = 0;
        float mx = -INFINITY, l = 0;
        for (int64_t j = 0; j <= i; j++) {
            load_row<E>(base + j * row + C, hs, lane, k);
            float s = scale * warp_dot<E>(q, k);
            if (s > mx) {
                float f = expf(mx - s);
                l *= f;
#pragma unroll
                for (int e = 0; e < E; e++) acc[e] *= f;
                mx = s;
            }
            float p = expf(s - mx);
            l += p;
            load_row<E>(base + j * row + 2 * C, hs, lane, v);
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] += p * v[e];
        }
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] /= l;
        store_row<E>(y + (n * T + i) * C + h * hs, hs, lane, acc, false);
        if (lse && lane == 0) lse[r] = mx + logf(l);
    }
}

/* D[r] = dy . y of row r (the softmax backward's row sum) */
template <int E>
__global__ void k_attn_rowdot(const float *dy, const float *y, float *D, int64_t N, int64_t T, int64_t C, int64_t H) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H;
    HR_ATTN_ROWS(r, N * H * T) {
        int64_t i = r % T, h = (r / T) % H, n = r / (T * H);
        float a[E], b[E];
        load_row<E>(dy + (n * T + i) * C + h * hs, hs, lane, a);
        load_row<E>(y + (n * T + i) * C + h * hs, hs, lane, b);
        float d = warp_dot<E>(a, b);
        if (lane == 0) D[r] = d;
    }
}

/* dq_i = scale sum_{j <= i} p_ij (dy_i . v_j - D_i) k_j */
template <int E>
__global__ void k_attn_dq(const float *qkv, const float *dy, const float *lse, const float *D, float *dqkv, int64_t N,
                          int64_t T, int64_t C, int64_t H, float scale, bool accum) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H, row = 3 * C;
    HR_ATTN_ROWS(r, N * H * T) {
        int64_t i = r % T, h = (r / T) % H, n = r / (T * H);
        const float *base = qkv + n * T * row + h * hs;
        float q[E], g[E], k[E], v[E], dq[E];
        load_row<E>(base + i * row, hs, lane, q);
        load_row<E>(dy + (n * T + i) * C + h * hs, hs, lane, g);
#pragma unroll
        for (int e = 0; e < E; e++) dq[e] = 0;
        float L = lse[r], Di = D[r];
        for (int64_t j = 0; j <= i; j++) {
            load_row<E>(base + j * row + C, hs, lane, k);
            load_row<E>(base + j * row + 2 * C, hs, lane, v);
            float p = expf(scale * warp_dot<E>(q, k) - L);
            float ds = p * (warp_dot<E>(g, v) - Di);
#pragma unroll
            for (int e = 0; e < E; e++) dq[e] += ds * k[e];
        }
#pragma unroll
        for (int e = 0; e < E; e++) dq[e] *= scale;
        store_row<E>(dqkv + (n * T + i) * row + h * hs, hs, lane, dq, accum);
    }
}

/* dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij dy_i */
template <int E>
__global__ void k_attn_dkv(const float *qkv, const float *dy, const float *lse, const float *D, float *dqkv, int64_t N,
                           int64_t T, int64_t C, int64_t H, float scale, bool accum) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H, row = 3 * C;
    HR_ATTN_ROWS(r, N * H * T) {
        int64_t j = r % T, h = (r / T) % H, n = r / (T * H);
        const float *base = qkv + n * T * row + h * hs;
        float k[E], v[E], q[E], g[E], dk[E], dv[E];
        load_row<E>(base + j * row + C, hs, lane, k);
        load_row<E>(base + j * row + 2 * C, hs, lane, v);
#pragma unroll
        for (int e = 0; e < E; e++) dk[e] = dv[e] = 0;
        int64_t r0 = r - j; /* row of (n, h, 0) */
        for (int64_t i = j; i < T; i++) {
            load_row<E>(base + i * row, hs, lane, q);
            load_row<E>(dy + (n * T + i) * C + h * hs, hs, lane, g);
            float p = expf(scale * warp_dot<E>(q, k) - lse[r0 + i]);
            float ds = p * (warp_dot<E>(g, v) - D[r0 + i]);
#pragma unroll
            for (int e = 0; e < E; e++) {
                dk[e] += ds * q[e];
                dv[e] += p * g[e];
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++) dk[e] *= scale;
        store_row<E>(dqkv + (n * T + j) * row + C + h * hs, hs, lane, dk, accum);
        store_row<E>(dqkv + (n * T + j) * row + 2 * C + h * hs, hs, lane, dv, accum);
    }
}

/* E for a head size: 1, 2, 4 or 8 channels a lane (head sizes up to 256) */
static int lanes_e(int64_t hs) { return hs <= 32 ? 1 : hs <= 64 ? 2 : hs <= 128 ? 4 : hs <= 256 ? 8 : 0; }

#define HR_ATTN_E(E, kern, ...)                                                                            \
    switch (E) {                                                                                           \
    case 1: kern<1><<<grid, HR_ATTN_WARPS * 32, 0, st>>>(__VA_ARGS__); break;                             \
    case 2: kern<2><<<grid, HR_ATTN_WARPS * 32, 0, st>>>(__VA_ARGS__); break;                             \
    case 4: kern<4><<<grid, HR_ATTN_WARPS * 32, 0, st>>>(__VA_ARGS__); break;                             \
    default: kern<8><<<grid, HR_ATTN_WARPS * 32, 0, st>>>(__VA_ARGS__); break;                            \
    }

extern "C" {

/* the backward's row sums D, one float a (sequence, head, position) */
size_t hr_cuda_attention_bwd_workspace(hr_cuda *c, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    return sizeof(float) * (size_t)(p->N * p->H * p->T);
}

hr_status hr_cuda_attention(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    int E = lanes_e(p->C / p->H);
    if (!E)
        return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention on the GPU takes heads of up to 256 channels; this "
                            "one has %lld (use more heads)", (long long)(p->C / p->H));
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    unsigned grid = hr_grid(p->N * p->H * p->T, HR_ATTN_WARPS);
    HR_ATTN_E(E, k_attn_fwd, p->qkv, p->y, p->lse, p->N, p->T, p->C, p->H, p->scale);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_attention_bwd(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    int E = lanes_e(p->C / p->H);
    if (!E) return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention: heads of more than 256 channels");
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    float *D = (float *)a->ws;
    unsigned grid = hr_grid(p->N * p->H * p->T, HR_ATTN_WARPS);
    HR_ATTN_E(E, k_attn_rowdot, p->dy, p->y_saved, D, p->N, p->T, p->C, p->H);
    HR_ATTN_E(E, k_attn_dq, p->qkv, p->dy, p->lse_saved, D, p->dqkv, p->N, p->T, p->C, p->H, p->scale, p->acc);
    HR_ATTN_E(E, k_attn_dkv, p->qkv, p->dy, p->lse_saved, D, p->dqkv, p->N, p->T, p->C, p->H, p->scale, p->acc);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
