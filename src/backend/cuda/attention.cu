/* attention.cu — causal self-attention on the GPU in fp32, tiled as flash
 * attention is: a block takes B queries (or keys) of one (sequence, head) and
 * walks over the tiles of B keys (or queries) it sees, staging each in shared
 * memory, so that every value read from global memory serves B rows. The
 * forward keeps an online softmax and only each query's log-sum-exp; the
 * backward computes the probabilities again from it, once for dk, dv (a block
 * a key tile) and once for dq (a block a query tile).
 *
 * Tiles. A block has 16 x 16 threads (ty, tx). Its score tile S (B x B) is
 * split so that thread (ty, tx) holds rows ty + 16a and columns tx + 16b
 * (a, b < R = B / 16) in registers; an output tile (B x D) likewise holds
 * rows ty + 16a and D / 16 channels in runs of V side by side (out_ch:
 * 4tx .. 4tx + 3, then 64 + 4tx .. for D >= 64; 2tx and 2tx + 1 for D = 32).
 * The 16 threads of a row are one half warp, so a row's max and sum are
 * half-warp shuffles. Head sizes are padded to D = 32, 64, 128 or 256 with
 * zero channels in shared memory (they add nothing and are never written);
 * rows past T are zero and masked. Rows of a head-size tile are D + 4 floats
 * apart and rows of a score tile B + 16 apart: rows stay 16-byte aligned, so
 * the inner loops read 4 channels (or scores, or V channels of an output
 * run) a load, free of bank conflicts (8 lanes read 8 rows of K, 16 bytes
 * each, from distinct banks; or one address of Q or P that they share; or
 * consecutive runs of a row of V).
 *
 * Every value is written by one thread, summed in a fixed order: no atomics,
 * the same bits every run. Products are explicit fmaf (the build has
 * --fmad=false), all in fp32. BF16 and F16 activations go to the tensor-core
 * kernels of attention_half.cu. With attn_pdrop each probability's keep
 * decision is drawn where the probability is made (common.cuh's
 * hr_attn_keep, the CPU's draw), after the softmax's sum in the forward and
 * again in both backward kernels: no mask is stored. */
#include "backend/cuda/common.cuh"

#define HR_ATTN_THREADS 256 /* 16 x 16 */

/* tile edge for padded head size D: 64 rows, 32 for the wide heads (shared memory) */
template <int D> struct attn_tile {
    static constexpr int MINB = D < 256 ? 2 : 1; /* blocks an SM (caps registers at 128) */
    static constexpr int B = D <= 64 ? 64 : 32, R = B / 16, E = D / 16, LD = D + 4, PLD = B + 16;
    static constexpr int V = E < 4 ? E : 4; /* output channels a thread holds side by side */
};

/* channel of a thread's output column c (c < E): runs of V channels, the 16
 * threads of a row side by side, then the next run 16 V channels on */
template <int D> __device__ __forceinline__ int out_ch(int tx, int c) {
    constexpr int V = attn_tile<D>::V;
    return c / V * 16 * V + V * tx + c % V;
}

/* shared floats of each kernel: head-size tiles (B x LD), score tiles (B x PLD), row values */
template <int D> constexpr int tile_floats() { return attn_tile<D>::B * attn_tile<D>::LD; }
template <int D> constexpr int score_floats() { return attn_tile<D>::B * attn_tile<D>::PLD; }
template <int D> constexpr int fwd_smem() { return 3 * tile_floats<D>() + score_floats<D>(); }
template <int D> constexpr int dq_smem() { return 4 * tile_floats<D>() + score_floats<D>(); }
template <int D> constexpr int dkv_smem() { return 4 * tile_floats<D>() + 2 * score_floats<D>() + 2 * attn_tile<D>::B; }

/* s (B x LD) = rows [0, B) of g, `stride` floats apart, channels [0, hs);
 * zero past `rows` rows and hs channels. Four floats a load where rows are
 * 16-byte aligned (hs a multiple of 4: so are C and the strides). */
template <int D>
__device__ __forceinline__ void load_tile(float *s, const float *g, int64_t stride, int64_t rows, int hs) {
    constexpr int B = attn_tile<D>::B, LD = attn_tile<D>::LD;
    if (hs % 4 == 0 && ((uintptr_t)g & 15) == 0) {
#pragma unroll 4
        for (int x = threadIdx.x; x < B * D / 4; x += HR_ATTN_THREADS) {
            int r = x / (D / 4), d = x % (D / 4) * 4;
            float4 v = r < rows && d < hs ? *(const float4 *)(g + r * stride + d) : make_float4(0, 0, 0, 0);
            *(float4 *)(s + r * LD + d) = v;
        }
    } else {
#pragma unroll 4
        for (int x = threadIdx.x; x < B * D; x += HR_ATTN_THREADS) {
            int r = x / D, d = x % D;
            s[r * LD + d] = r < rows && d < hs ? g[r * stride + d] : 0.0f;
        }
    }
}

/* acc[a][b] = sum_d A[ty + 16a][d] X[tx + 16b][d]: a B x B tile of row dot products */
template <int D>
__device__ __forceinline__ void tile_dot(float (&acc)[attn_tile<D>::R][attn_tile<D>::R], const float *A, const float *X,
                                         int ty, int tx) {
    constexpr int R = attn_tile<D>::R, LD = attn_tile<D>::LD;
#pragma unroll
    for (int a = 0; a < R; a++)
#pragma unroll
        for (int b = 0; b < R; b++) acc[a][b] = 0;
#pragma unroll 1
    for (int d = 0; d < D; d += 4) {
        float4 u[R], w[R];
#pragma unroll
        for (int a = 0; a < R; a++) u[a] = *(const float4 *)(A + (ty + 16 * a) * LD + d);
#pragma unroll
        for (int b = 0; b < R; b++) w[b] = *(const float4 *)(X + (tx + 16 * b) * LD + d);
#pragma unroll
        for (int a = 0; a < R; a++)
#pragma unroll
            for (int b = 0; b < R; b++) {
                acc[a][b] = fmaf(u[a].x, w[b].x, acc[a][b]);
                acc[a][b] = fmaf(u[a].y, w[b].y, acc[a][b]);
                acc[a][b] = fmaf(u[a].z, w[b].z, acc[a][b]);
                acc[a][b] = fmaf(u[a].w, w[b].w, acc[a][b]);
            }
    }
}

/* acc[a][c] += sum_k P[ty + 16a][k] M[k][out_ch(tx, c)]: a score tile times a
 * head-size tile; a thread reads its runs of V channels of M as one load */
template <int D>
__device__ __forceinline__ void tile_acc(float (&acc)[attn_tile<D>::R][attn_tile<D>::E], const float *P, const float *M,
                                         int ty, int tx) {
    constexpr int B = attn_tile<D>::B, R = attn_tile<D>::R, E = attn_tile<D>::E, LD = attn_tile<D>::LD,
                  PLD = attn_tile<D>::PLD, V = attn_tile<D>::V;
    static_assert(V == 2 || V == 4, "runs of 2 or 4 channels");
#pragma unroll 2
    for (int k = 0; k < B; k += 4) {
        float4 u[R];
        float w[4][E];
#pragma unroll
        for (int a = 0; a < R; a++) u[a] = *(const float4 *)(P + (ty + 16 * a) * PLD + k);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int g = 0; g < E / V; g++) {
                const float *m = M + (k + kk) * LD + g * 16 * V + V * tx;
                if constexpr (V == 4) {
                    float4 t = *(const float4 *)m;
                    w[kk][4 * g] = t.x, w[kk][4 * g + 1] = t.y, w[kk][4 * g + 2] = t.z, w[kk][4 * g + 3] = t.w;
                } else {
                    float2 t = *(const float2 *)m;
                    w[kk][2 * g] = t.x, w[kk][2 * g + 1] = t.y;
                }
            }
#pragma unroll
        for (int a = 0; a < R; a++)
#pragma unroll
            for (int c = 0; c < E; c++) {
                acc[a][c] = fmaf(u[a].x, w[0][c], acc[a][c]);
                acc[a][c] = fmaf(u[a].y, w[1][c], acc[a][c]);
                acc[a][c] = fmaf(u[a].z, w[2][c], acc[a][c]);
                acc[a][c] = fmaf(u[a].w, w[3][c], acc[a][c]);
            }
    }
}

/* max and sum over the 16 threads of a row (a half warp); every lane gets the same bits */
__device__ __forceinline__ float row_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float row_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* rows i = i0 + ty + 16a, channels out_ch(tx, c) of acc, times f, into p + i * stride
 * (added to what is there if accum); only rows below T and channels below hs */
template <int D>
__device__ __forceinline__ void store_tile(float *p, int64_t stride, int64_t i0, int64_t T, int hs,
                                           const float (&acc)[attn_tile<D>::R][attn_tile<D>::E], float f, bool accum,
                                           int ty, int tx) {
#pragma unroll
    for (int a = 0; a < attn_tile<D>::R; a++) {
        int64_t i = i0 + ty + 16 * a;
        if (i >= T) continue;
#pragma unroll
        for (int c = 0; c < attn_tile<D>::E; c++) {
            int d = out_ch<D>(tx, c);
            if (d < hs) {
                float v = acc[a][c] * f;
                p[i * stride + d] = accum ? p[i * stride + d] + v : v;
            }
        }
    }
}

/* Block (query tile qt, sequence n, head h): y_i = sum_{j <= i} softmax_j(scale
 * q_i . k_j) v_j and lse_i for the B queries i0 + [0, B). Key tiles 0 .. qt
 * (the last one the diagonal, masked j > i) pass through shared memory;
 * each thread keeps its rows' running max m and sum l and rescales its part
 * of the output O by exp(m_old - m_new) when m grows. Tile 0 holds key 0 <=
 * i for every row, so m is finite from then on and no exp(-inf + inf) occurs. */
template <int D>
__global__ void __launch_bounds__(HR_ATTN_THREADS, attn_tile<D>::MINB)
    k_attn_fwd(const float *qkv, float *y, float *lse, int64_t N, int64_t T, int64_t C, int64_t H, float scale,
               hr_attn_drop dr) {
    constexpr int B = attn_tile<D>::B, R = attn_tile<D>::R, E = attn_tile<D>::E, LD = attn_tile<D>::LD,
                  PLD = attn_tile<D>::PLD;
    extern __shared__ float4 sm4[]; /* 16-byte aligned */
    float *sm = (float *)sm4;
    float *Qs = sm, *Ks = Qs + B * LD, *Vs = Ks + B * LD, *Ps = Vs + B * LD; /* Ps: B x PLD */
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, hs = (int)(C / H);
    int64_t NH = N * H, nt = (T + B - 1) / B, row = 3 * C;
    int64_t qt = nt - 1 - blockIdx.x / NH, nh = blockIdx.x % NH, n = nh / H, h = nh % H; /* longest tiles first */
    int64_t i0 = qt * B;
    const float *base = qkv + n * T * row + h * hs;
    uint64_t dstream = dr.p > 0 ? hr_attn_stream(dr) : 0;
    load_tile<D>(Qs, base + i0 * row, row, T - i0, hs);

    float o[R][E], m[R], l[R];
#pragma unroll
    for (int a = 0; a < R; a++) {
        m[a] = -INFINITY;
        l[a] = 0;
#pragma unroll
        for (int c = 0; c < E; c++) o[a][c] = 0;
    }
    for (int64_t kt = 0; kt <= qt; kt++) {
        int64_t j0 = kt * B;
        __syncthreads(); /* the last tile's Ks, Vs, Ps are read */
        load_tile<D>(Ks, base + j0 * row + C, row, T - j0, hs);
        load_tile<D>(Vs, base + j0 * row + 2 * C, row, T - j0, hs);
        __syncthreads();
        float s[R][R];
        uint32_t bk = dr.p > 0 ? hr_attn_bkey(dr, dstream, n, h, i0, j0) : 0u; /* the tile's block of draws */
        tile_dot<D>(s, Qs, Ks, ty, tx);
#pragma unroll
        for (int a = 0; a < R; a++) {
            int64_t i = i0 + ty + 16 * a;
            float mt = -INFINITY;
#pragma unroll
            for (int b = 0; b < R; b++) {
                s[a][b] = j0 + tx + 16 * b <= i ? scale * s[a][b] : -INFINITY;
                mt = fmaxf(mt, s[a][b]);
            }
            float mn = fmaxf(m[a], row_max(mt)), f = expf(m[a] - mn), rs = 0;
#pragma unroll
            for (int b = 0; b < R; b++) {
                float p = expf(s[a][b] - mn);
                int64_t j = j0 + tx + 16 * b;
                /* dropped after the sum: the softmax counts every probability */
                Ps[(ty + 16 * a) * PLD + tx + 16 * b] =
                    dr.p > 0 && j <= i && i < T ? p * hr_attn_keep(dr, bk, i, j) : p;
                rs += p;
            }
            l[a] = l[a] * f + row_sum(rs);
            m[a] = mn;
#pragma unroll
            for (int c = 0; c < E; c++) o[a][c] *= f;
        }
        __syncthreads();
        tile_acc<D>(o, Ps, Vs, ty, tx);
    }
#pragma unroll
    for (int a = 0; a < R; a++) {
        int64_t i = i0 + ty + 16 * a;
        if (i >= T) continue;
#pragma unroll
        for (int c = 0; c < E; c++) {
            int d = out_ch<D>(tx, c);
            if (d < hs) y[(n * T + i) * C + h * hs + d] = o[a][c] / l[a];
        }
        if (lse && tx == 0) lse[nh * T + i] = m[a] + logf(l[a]);
    }
}

/* D[r] = dy . y of row r = ((n H) + h) T + i (the softmax backward's row sum), one warp a row */
__global__ void k_attn_rowdot(const float *dy, const float *y, float *D, int64_t N, int64_t T, int64_t C, int64_t H) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < N * H * T;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        int64_t i = r % T, h = (r / T) % H, n = r / (T * H);
        const float *a = dy + (n * T + i) * C + h * hs, *b = y + (n * T + i) * C + h * hs;
        float s = 0;
        for (int64_t d = lane; d < hs; d += 32) s = fmaf(a[d], b[d], s);
        s = hr_warp_sum(s);
        if (lane == 0) D[r] = s;
    }
}

/* Block (key tile kt, n, h): dk_j = scale sum_{i >= j} ds_ij q_i and dv_j =
 * sum_{i >= j} p_ij dy_i for the B keys j0 + [0, B), with p_ij = exp(scale
 * q_i . k_j - lse_i), ds_ij = p_ij (dy_i . v_j - D_i). K and V stay in shared
 * memory; query tiles kt .. last pass through it with their dy, lse and D.
 * The score tiles are transposed here: thread rows are keys, columns queries. */
template <int D>
__global__ void __launch_bounds__(HR_ATTN_THREADS, attn_tile<D>::MINB)
    k_attn_dkv(const float *qkv, const float *dy, const float *lse, const float *Dr, float *dqkv, int64_t N, int64_t T,
               int64_t C, int64_t H, float scale, bool accum, hr_attn_drop dr) {
    constexpr int B = attn_tile<D>::B, R = attn_tile<D>::R, E = attn_tile<D>::E, LD = attn_tile<D>::LD,
                  PLD = attn_tile<D>::PLD;
    extern __shared__ float4 sm4[]; /* 16-byte aligned */
    float *sm = (float *)sm4;
    float *Ks = sm, *Vs = Ks + B * LD, *Qs = Vs + B * LD, *Gs = Qs + B * LD; /* Gs: dy */
    float *Ps = Gs + B * LD, *Ss = Ps + B * PLD, *Ls = Ss + B * PLD, *Ds = Ls + B;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, hs = (int)(C / H);
    int64_t NH = N * H, nt = (T + B - 1) / B, row = 3 * C;
    int64_t kt = blockIdx.x / NH, nh = blockIdx.x % NH, n = nh / H, h = nh % H; /* longest tiles first */
    int64_t j0 = kt * B;
    const float *base = qkv + n * T * row + h * hs, *gbase = dy + n * T * C + h * hs;
    uint64_t dstream = dr.p > 0 ? hr_attn_stream(dr) : 0;
    load_tile<D>(Ks, base + j0 * row + C, row, T - j0, hs);
    load_tile<D>(Vs, base + j0 * row + 2 * C, row, T - j0, hs);

    float dk[R][E], dv[R][E];
#pragma unroll
    for (int a = 0; a < R; a++)
#pragma unroll
        for (int c = 0; c < E; c++) dk[a][c] = dv[a][c] = 0;
    for (int64_t qt = kt; qt < nt; qt++) {
        int64_t i0 = qt * B;
        __syncthreads(); /* the last tile's Qs, Gs, Ps, Ss, Ls, Ds are read */
        load_tile<D>(Qs, base + i0 * row, row, T - i0, hs);
        load_tile<D>(Gs, gbase + i0 * C, C, T - i0, hs);
        if (threadIdx.x < B) {
            int64_t i = i0 + threadIdx.x;
            Ls[threadIdx.x] = i < T ? lse[nh * T + i] : 0.0f;
            Ds[threadIdx.x] = i < T ? Dr[nh * T + i] : 0.0f;
        }
        __syncthreads();
        float s[R][R], g[R][R];
        uint32_t bk = dr.p > 0 ? hr_attn_bkey(dr, dstream, n, h, i0, j0) : 0u;
        tile_dot<D>(s, Ks, Qs, ty, tx); /* k_j . q_i */
        tile_dot<D>(g, Vs, Gs, ty, tx); /* v_j . dy_i */
#pragma unroll
        for (int a = 0; a < R; a++) {
            int64_t j = j0 + ty + 16 * a;
#pragma unroll
            for (int b = 0; b < R; b++) {
                int ib = tx + 16 * b;
                int64_t i = i0 + ib;
                bool in = j <= i && i < T;
                float p = in ? expf(scale * s[a][b] - Ls[ib]) : 0.0f;
                float mk = dr.p > 0 && in ? hr_attn_keep(dr, bk, i, j) : 1.0f;
                Ps[(ty + 16 * a) * PLD + ib] = p * mk;
                Ss[(ty + 16 * a) * PLD + ib] = p * (g[a][b] * mk - Ds[ib]);
            }
        }
        __syncthreads();
        tile_acc<D>(dv, Ps, Gs, ty, tx);
        tile_acc<D>(dk, Ss, Qs, ty, tx);
    }
    store_tile<D>(dqkv + n * T * row + C + h * hs, row, j0, T, hs, dk, scale, accum, ty, tx);
    store_tile<D>(dqkv + n * T * row + 2 * C + h * hs, row, j0, T, hs, dv, 1.0f, accum, ty, tx);
}

/* Block (query tile qt, n, h): dq_i = scale sum_{j <= i} ds_ij k_j for the B
 * queries i0 + [0, B); q and dy stay in shared memory, key tiles 0 .. qt
 * (k and v) pass through it. */
template <int D>
__global__ void __launch_bounds__(HR_ATTN_THREADS, attn_tile<D>::MINB)
    k_attn_dq(const float *qkv, const float *dy, const float *lse, const float *Dr, float *dqkv, int64_t N, int64_t T,
              int64_t C, int64_t H, float scale, bool accum, hr_attn_drop dr) {
    constexpr int B = attn_tile<D>::B, R = attn_tile<D>::R, E = attn_tile<D>::E, LD = attn_tile<D>::LD,
                  PLD = attn_tile<D>::PLD;
    extern __shared__ float4 sm4[]; /* 16-byte aligned */
    float *sm = (float *)sm4;
    float *Qs = sm, *Gs = Qs + B * LD, *Ks = Gs + B * LD, *Vs = Ks + B * LD, *Ss = Vs + B * LD; /* Ss: B x PLD */
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, hs = (int)(C / H);
    int64_t NH = N * H, nt = (T + B - 1) / B, row = 3 * C;
    int64_t qt = nt - 1 - blockIdx.x / NH, nh = blockIdx.x % NH, n = nh / H, h = nh % H; /* longest tiles first */
    int64_t i0 = qt * B;
    const float *base = qkv + n * T * row + h * hs;
    uint64_t dstream = dr.p > 0 ? hr_attn_stream(dr) : 0;
    load_tile<D>(Qs, base + i0 * row, row, T - i0, hs);
    load_tile<D>(Gs, dy + (n * T + i0) * C + h * hs, C, T - i0, hs);
    float L[R], Di[R], dq[R][E];
#pragma unroll
    for (int a = 0; a < R; a++) {
        int64_t i = i0 + ty + 16 * a;
        L[a] = i < T ? lse[nh * T + i] : 0.0f;
        Di[a] = i < T ? Dr[nh * T + i] : 0.0f;
#pragma unroll
        for (int c = 0; c < E; c++) dq[a][c] = 0;
    }
    for (int64_t kt = 0; kt <= qt; kt++) {
        int64_t j0 = kt * B;
        __syncthreads(); /* the last tile's Ks, Vs, Ss are read */
        load_tile<D>(Ks, base + j0 * row + C, row, T - j0, hs);
        load_tile<D>(Vs, base + j0 * row + 2 * C, row, T - j0, hs);
        __syncthreads();
        float s[R][R], g[R][R];
        uint32_t bk = dr.p > 0 ? hr_attn_bkey(dr, dstream, n, h, i0, j0) : 0u;
        tile_dot<D>(s, Qs, Ks, ty, tx); /* q_i . k_j */
        tile_dot<D>(g, Gs, Vs, ty, tx); /* dy_i . v_j */
#pragma unroll
        for (int a = 0; a < R; a++) {
            int64_t i = i0 + ty + 16 * a;
#pragma unroll
            for (int b = 0; b < R; b++) {
                int64_t j = j0 + tx + 16 * b;
                bool in = j <= i && i < T;
                float p = in ? expf(scale * s[a][b] - L[a]) : 0.0f;
                float mk = dr.p > 0 && in ? hr_attn_keep(dr, bk, i, j) : 1.0f;
                Ss[(ty + 16 * a) * PLD + tx + 16 * b] = p * (g[a][b] * mk - Di[a]);
            }
        }
        __syncthreads();
        tile_acc<D>(dq, Ss, Ks, ty, tx);
    }
    store_tile<D>(dqkv + n * T * row + h * hs, row, i0, T, hs, dq, scale, accum, ty, tx);
}

/* padded head size: 32, 64, 128 or 256; 0 past 256 */
static int attn_pad(int64_t hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : hs <= 256 ? 256 : 0; }

/* blocks of a launch: one a (tile, sequence, head) */
template <int D> static unsigned attn_blocks(const hr_attention_args *p) {
    constexpr int B = attn_tile<D>::B;
    return (unsigned)(p->N * p->H * ((p->T + B - 1) / B));
}

/* kern<D> on p's shapes, on stream st, with `floats` floats of dynamic shared
 * memory (past the 48 KB default, the kernel's cap is raised first) */
#define HR_ATTN_LAUNCH(kern, D, floats, ...)                                                                  \
    do {                                                                                                      \
        size_t b_ = sizeof(float) * (size_t)(floats);                                                         \
        if (b_ > 48 * 1024)                                                                                   \
            HR_CU(cudaFuncSetAttribute(kern<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b_));       \
        kern<D><<<attn_blocks<D>(p), HR_ATTN_THREADS, b_, st>>>(__VA_ARGS__);                                  \
        HR_CU(cudaGetLastError());                                                                            \
    } while (0)

template <int D> static hr_status attn_fwd(const hr_attention_args *p, cudaStream_t st) {
    HR_ATTN_LAUNCH(k_attn_fwd, D, fwd_smem<D>(), p->qkv, p->y, p->lse, p->N, p->T, p->C, p->H, p->scale,
                   hr_attn_drop_of(p));
    return HR_OK;
}

/* D (one warp a row), then dq and dk, dv: each writes its own third of dqkv */
template <int D> static hr_status attn_bwd(const hr_attention_args *p, float *Dr, cudaStream_t st) {
    unsigned grid = hr_grid(p->N * p->H * p->T, HR_THREADS / 32);
    k_attn_rowdot<<<grid, HR_THREADS, 0, st>>>(p->dy, p->y_saved, Dr, p->N, p->T, p->C, p->H);
    HR_CU(cudaGetLastError());
    HR_ATTN_LAUNCH(k_attn_dq, D, dq_smem<D>(), p->qkv, p->dy, p->lse_saved, Dr, p->dqkv, p->N, p->T, p->C, p->H,
                   p->scale, p->acc, hr_attn_drop_of(p));
    HR_ATTN_LAUNCH(k_attn_dkv, D, dkv_smem<D>(), p->qkv, p->dy, p->lse_saved, Dr, p->dqkv, p->N, p->T, p->C, p->H,
                   p->scale, p->acc, hr_attn_drop_of(p));
    return HR_OK;
}

extern "C" {

/* cuDNN's fused attention where it runs the shape (cudnn_attention.c) */
size_t hr_cuda_attention_workspace(hr_cuda *c, const hr_kargs *a) {
    return a->dt != HR_F32 ? hr_cuda_sdpa_workspace(c, &a->attn, a->dt, false) : 0;
}

/* the backward's row sums D, one float a (sequence, head, position), or cuDNN's */
size_t hr_cuda_attention_bwd_workspace(hr_cuda *c, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    size_t own = sizeof(float) * (size_t)(p->N * p->H * p->T);
    size_t dnn = a->dt != HR_F32 ? hr_cuda_sdpa_workspace(c, p, a->dt, true) : 0;
    return own > dnn ? own : dnn;
}

hr_status hr_cuda_attention(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    hr_status ds;
    if (a->dt != HR_F32 && hr_cuda_sdpa_run((hr_cuda *)ctx, p, a->dt, false, a->ws, a->ws_bytes, &ds)) return ds;
    if (a->dt != HR_F32) return hr_cuda_attention_half(((hr_cuda *)ctx)->stream, p, a->dt); /* attention_half.cu */
    int D = attn_pad(p->C / p->H);
    if (!D)
        return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention on the GPU takes heads of up to 256 channels; this "
                            "one has %lld (use more heads)", (long long)(p->C / p->H));
    if (p->N * p->H * p->T == 0) return HR_OK;
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    return D == 32    ? attn_fwd<32>(p, st)
           : D == 64  ? attn_fwd<64>(p, st)
           : D == 128 ? attn_fwd<128>(p, st)
                      : attn_fwd<256>(p, st);
}

hr_status hr_cuda_attention_bwd(void *ctx, const hr_kargs *a) {
    const hr_attention_args *p = &a->attn;
    hr_status ds;
    if (a->dt != HR_F32 && hr_cuda_sdpa_run((hr_cuda *)ctx, p, a->dt, true, a->ws, a->ws_bytes, &ds)) return ds;
    if (a->dt != HR_F32) return hr_cuda_attention_half_bwd(((hr_cuda *)ctx)->stream, p, a->dt, (float *)a->ws);
    int D = attn_pad(p->C / p->H);
    if (!D) return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention: heads of more than 256 channels");
    if (p->N * p->H * p->T == 0) return HR_OK;
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    float *Dr = (float *)a->ws;
    return D == 32    ? attn_bwd<32>(p, Dr, st)
           : D == 64  ? attn_bwd<64>(p, Dr, st)
           : D == 128 ? attn_bwd<128>(p, Dr, st)
                      : attn_bwd<256>(p, Dr, st);
}

HR_CUDA_TAKES_HALF(attention)
HR_CUDA_TAKES_HALF(attention_bwd)

} /* extern "C" */
