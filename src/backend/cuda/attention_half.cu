/* attention_half.cu — causal self-attention for bf16 and fp16 activations on
 * tensor cores (FlashAttention-2 style; attention.cu's fp32 kernels are the
 * reference semantics). The products run as mma.sync m16n8k16 with 16-bit
 * inputs and fp32 accumulators; the softmax, the log-sum-exp and every
 * accumulator stay in fp32. Values are rounded to the element type in three
 * places only: the probabilities P (and dS) fed to the second product of each
 * step, and each output, once, at the end.
 *
 * Blocks have 4 warps; a warp owns 16 rows of a 64-row tile (queries for the
 * forward and dq, keys for dk/dv) and loops over tiles of the other side,
 * staged in shared memory as [row][channel] with channels zero-padded to D (a
 * multiple of 16: 32, 64, 128 or 256) and rows past T zero-filled and masked.
 * A row takes D + 8 elements: fragment loads then hit 32 distinct banks.
 * Every output element is written by one thread after a fixed loop: no
 * atomics, the same bits every run. */
#include "backend/cuda/common.cuh"

#include <limits.h>

#define HA_WARPS 4
#define HA_THREADS (HA_WARPS * 32)
#define HA_ROWS (HA_WARPS * 16) /* the rows a block owns */
/* The exponentials are exp2f of scores scaled by log2 e (HR_LOG2E, the
 * softmax scale folded in); the log-sum-exp kept is the natural one. */

/* ---- fragments. m16n8k16: lane = 4 g + t; A (16 x 16, row major) holds
 * (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B (16 x 8) holds
 * (k = 2t..2t+1, n = g), (k = 2t+8.., n = g); C (16 x 8, fp32) holds
 * (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). The first element of a pair is
 * a register's low 16 bits. */
template <typename E> __device__ __forceinline__ void ha_mma(float *c, const uint32_t *a, const uint32_t *b);
template <> __device__ __forceinline__ void ha_mma<__nv_bfloat16>(float *c, const uint32_t *a, const uint32_t *b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void ha_mma<__half>(float *c, const uint32_t *a, const uint32_t *b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* two floats rounded to E, lo in the low half */
template <typename E> __device__ __forceinline__ uint32_t ha_pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t ha_pack<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t ha_pack<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Fragments come from shared memory by ldmatrix: each lane gives the address
 * of one 8-element row (16 bytes: rows of D + 8 elements keep them aligned
 * and in distinct banks) of four 8 x 8 matrices, and gets register i of its
 * (g, 2t..2t+1) pair of matrix i; .trans gives (2t..2t+1, g). The same
 * values in the same registers as 32-bit loads (and 16-bit ones for
 * ha_frag_b) gave, in one instruction. */
__device__ __forceinline__ void ha_ldm(uint32_t *r, const uint16_t *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ha_ldm_t(uint32_t *r, const uint16_t *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* A at s (16 rows of stride S from s, 16 channels from s): lane's 4
 * registers, matrices (rows 0-7, 8-15) x (channels 0-7, 8-15) */
template <int S> __device__ __forceinline__ void ha_frag_a(uint32_t *a, const uint16_t *s, int g, int t) {
    int lane = 4 * g + t, mi = lane >> 3, rr = lane & 7;
    ha_ldm(a, s + (rr + 8 * (mi & 1)) * S + 8 * (mi >> 1));
}
/* B[k][n] = s[n S + k] for two n tiles (e.g. K[key][d] for Q K^T): b[0..1]
 * the first tile's, b[2..3] the second's */
template <int S> __device__ __forceinline__ void ha_frag_bt2(uint32_t *b, const uint16_t *s, int g, int t) {
    int lane = 4 * g + t, mi = lane >> 3, rr = lane & 7;
    ha_ldm(b, s + (rr + 8 * (mi >> 1)) * S + 8 * (mi & 1));
}
/* B[k][n] = s[k S + n] for two n tiles (e.g. V[key][d] for P V) */
template <int S> __device__ __forceinline__ void ha_frag_b2(uint32_t *b, const uint16_t *s, int g, int t) {
    int lane = 4 * g + t, mi = lane >> 3, rr = lane & 7;
    ha_ldm_t(b, s + (rr + 8 * (mi & 1)) * S + 8 * (mi >> 1));
}
/* C fragments nt = 2 ks, 2 ks + 1 (16 x 16 of fp32) rounded to an A fragment */
template <typename E> __device__ __forceinline__ void ha_c2a(uint32_t *a, const float *c0, const float *c1) {
    a[0] = ha_pack<E>(c0[0], c0[1]);
    a[1] = ha_pack<E>(c0[2], c0[3]);
    a[2] = ha_pack<E>(c1[0], c1[1]);
    a[3] = ha_pack<E>(c1[2], c1[3]);
}

/* acc[16 x 8 NT] += A[16 x 16 KS] B, A's rows at sa (stride S), B[k][n] =
 * sb[n S + k] for n in [0, 8 NT): the scores Q K^T, or dY V^T */
template <typename E, int S, int KS, int NT>
__device__ __forceinline__ void ha_mm_abt(float (*acc)[4], const uint16_t *sa, const uint16_t *sb, int g, int t) {
    static_assert(NT % 2 == 0, "n tiles go in pairs");
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        ha_frag_a<S>(a, sa + 16 * ks, g, t);
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b[4];
            ha_frag_bt2<S>(b, sb + 8 * nt * S + 16 * ks, g, t);
            ha_mma<E>(acc[nt], a, b);
            ha_mma<E>(acc[nt + 1], a, b + 2);
        }
    }
}

/* acc[16 x 8 NT] += P[16 x 16 KS] B, P in C fragments (rounded to E here),
 * B[k][n] = sb[k S + n]: P V, P^T dY, dS^T Q, dS K */
template <typename E, int S, int KS, int NT>
__device__ __forceinline__ void ha_mm_pb(float (*acc)[4], const float (*p)[4], const uint16_t *sb, int g, int t) {
    static_assert(NT % 2 == 0, "n tiles go in pairs");
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        ha_c2a<E>(a, p[2 * ks], p[2 * ks + 1]);
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b[4];
            ha_frag_b2<S>(b, sb + 16 * ks * S + 8 * nt, g, t);
            ha_mma<E>(acc[nt], a, b);
            ha_mma<E>(acc[nt + 1], a, b + 2);
        }
    }
}

/* ROWS rows of channels [0, D) from g (row stride ld) into s (stride D + 8):
 * rows from `valid` on and channels from hs on are zeros. vec: 16-byte
 * loads (hs, ld and g multiples of 8 elements). All the block's threads. */
template <int D, int ROWS>
__device__ __forceinline__ void ha_load(uint16_t *s, const uint16_t *g, int64_t ld, int valid, int hs, bool vec) {
    constexpr int S = D + 8;
    if (vec) {
        for (int x = threadIdx.x; x < ROWS * (D / 8); x += HA_THREADS) {
            int r = x / (D / 8), c = (x % (D / 8)) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < valid && c < hs) v = *reinterpret_cast<const uint4 *>(g + r * ld + c);
            *reinterpret_cast<uint4 *>(s + r * S + c) = v;
        }
    } else {
        for (int x = threadIdx.x; x < ROWS * D; x += HA_THREADS) {
            int r = x / D, c = x % D;
            s[r * S + c] = r < valid && c < hs ? g[r * ld + c] : (uint16_t)0;
        }
    }
}

/* ha_load's tile without waiting (vec: cp.async, 16 bytes a copy, zeros for
 * rows past `valid` and channels past hs; else ha_load itself): the block's
 * copies land once hr_cp_async_wait_group has passed and a __syncthreads follows, so the
 * next tile arrives while the block works on this one. */
__device__ __forceinline__ void ha_cp16(uint16_t *dst, const void *src, bool in) {
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(in ? 16 : 0));
}
__device__ __forceinline__ void ha_cp4(float *dst, const float *src, bool in) {
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(a), "l"(src), "r"(in ? 4 : 0));
}

template <int D, int ROWS>
__device__ __forceinline__ void ha_load_async(uint16_t *s, const uint16_t *g, int64_t ld, int valid, int hs, bool vec) {
    constexpr int S = D + 8;
    if (!vec) return ha_load<D, ROWS>(s, g, ld, valid, hs, false);
    for (int x = threadIdx.x; x < ROWS * (D / 8); x += HA_THREADS) {
        int r = x / (D / 8), c = (x % (D / 8)) * 8;
        bool in = r < valid && c < hs;
        ha_cp16(s + r * S + c, in ? g + r * ld + c : g, in);
    }
}

/* ---- forward: block (n h, query tile), 64 queries, warp w rows q0 + 16 w.
 * Key tiles of BC from 0 to the diagonal: S = Q K^T (fp32), scaled and masked
 * (j > i or j >= T: -inf), online softmax per row (running max m, partial sum
 * l of this lane's columns, summed over the quad at the end), P rounded to E,
 * O += P V in fp32 fragments rescaled by exp(m_old - m_new). y = O / l
 * rounded to E; lse = m + log l (fp32). smem: Q [64][D+8], two buffers of K,
 * V [BC][D+8]. */
template <typename E, int D, int BC, bool DROP>
__global__ void __launch_bounds__(HA_THREADS)
    ha_fwd(const E *qkv_, E *y_, float *lse, int T, int64_t C, int H, float scale, bool vec, hr_attn_drop dr) {
    constexpr int S = D + 8;
    extern __shared__ __align__(16) uint16_t ha_sm[];
    uint16_t *sq = ha_sm, *sk = sq + HA_ROWS * S; /* then K, V, K, V: [BC][S] each */
    const uint16_t *qkv = reinterpret_cast<const uint16_t *>(qkv_);
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t bh = blockIdx.x, n = bh / H, h = bh % H, hs = C / H, ld = 3 * C;
    int q0 = (gridDim.y - 1 - blockIdx.y) * HA_ROWS; /* the longest rows first */
    int qw = q0 + 16 * w;                            /* the warp's first query */
    const uint16_t *base = qkv + n * T * ld + h * hs;
    uint64_t dstream = DROP ? hr_attn_stream(dr) : 0;
    float sl2 = scale * HR_LOG2E; /* scores in base 2 */
    ha_load<D, HA_ROWS>(sq, base + q0 * ld, ld, T - q0, (int)hs, vec);

    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    int kend = min(q0 + HA_ROWS, T);
    /* K and V tiles in two buffers: tile k0 + BC loads while k0 is used */
    auto fetch = [&](int k, int b) {
        ha_load_async<D, BC>(sk + b * 2 * BC * S, base + k * ld + C, ld, T - k, (int)hs, vec);
        ha_load_async<D, BC>(sk + (b * 2 + 1) * BC * S, base + k * ld + 2 * C, ld, T - k, (int)hs, vec);
        hr_cp_async_commit();
    };
    fetch(0, 0);
    for (int k0 = 0, b = 0; k0 < kend; k0 += BC, b ^= 1) {
        if (k0 + BC < kend) {
            fetch(k0 + BC, b ^ 1);
            hr_cp_async_wait_group<1>();
        } else {
            hr_cp_async_wait_group<0>();
        }
        __syncthreads();
        const uint16_t *sk_ = sk + b * 2 * BC * S, *sv_ = sk_ + BC * S;
        if (k0 <= qw + 15) { /* else the whole tile is above the warp's diagonal */
        float s[BC / 8][4];
        uint32_t bk = DROP ? hr_attn_bkey(dr, dstream, n, h, q0, k0) : 0u; /* the tile's block of draws */
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        ha_mm_abt<E, S, D / 16, BC / 8>(s, sq + 16 * w * S, sk_, g, t);
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = qw + g + 8 * (e >> 1), j = k0 + 8 * nt + 2 * t + (e & 1);
                float v = j <= i && j < T ? sl2 * s[nt][e] : -INFINITY;
                s[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            /* key 0 is in every row's first tile: mx is finite from there on */
            float f = exp2f(m[r] - mx[r]);
            m[r] = mx[r];
            l[r] *= f;
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) o[nt][2 * r] *= f, o[nt][2 * r + 1] *= f;
        }
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[nt][e] - m[e >> 1]);
                int i = qw + g + 8 * (e >> 1), j = k0 + 8 * nt + 2 * t + (e & 1);
                /* dropped after the sum: the softmax counts every probability */
                s[nt][e] = DROP && j <= i && j < T ? p * hr_attn_keep(dr, bk, i, j) : p;
                l[e >> 1] += p;
            }
        ha_mm_pb<E, S, BC / 16, D / 8>(o, s, sv_, g, t);
        }
        __syncthreads(); /* every warp is done with buffer b before it is refilled */
    }

    E *y = y_ + n * T * C + h * hs;
#pragma unroll
    for (int r = 0; r < 2; r++) { /* the row's sum over the quad, before any lane leaves */
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = qw + g + 8 * r;
        if (i >= T) continue;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int d = 8 * nt + 2 * t + e;
                if (d < hs) y[(int64_t)i * C + d] = hr_to<E>(o[nt][2 * r + e] / l[r]);
            }
        if (lse && t == 0) lse[bh * T + i] = m[r] * HR_LN2 + logf(l[r]);
    }
}

/* ---- backward (1): D_r = dy_r . y_r in fp32, one warp a row r = (n H + h) T + i */
template <typename E>
__global__ void ha_rowdot(const E *dy, const E *y, float *D, int64_t T, int64_t C, int64_t H, int64_t R) {
    int lane = threadIdx.x & 31;
    int64_t hs = C / H;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < R;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        int64_t i = r % T, bh = r / T, n = bh / H, h = bh % H, off = (n * T + i) * C + h * hs;
        float s = 0.0f;
        for (int64_t d = lane; d < hs; d += 32) s += hr_f(dy[off + d]) * hr_f(y[off + d]);
        s = hr_warp_sum(s);
        if (lane == 0) D[r] = s;
    }
}

/* The same with 16-byte loads (vec: hs a multiple of 8, rows aligned): G
 * lanes a row (G the power of two >= hs / 8, at most 32), 32 / G rows a warp,
 * each lane's chunks summed in order, then the group's butterfly. */
template <typename E, int G>
__global__ void ha_rowdot_vec(const E *dy, const E *y, float *D, int64_t T, int64_t C, int64_t H, int64_t R) {
    int lane = threadIdx.x & 31, t = lane % G;
    int64_t hs = C / H, warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r0 = (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * (32 / G); r0 < R;
         r0 += warps * (32 / G)) {
        int64_t r = r0 + lane / G;
        float s = 0.0f;
        if (r < R) {
            int64_t i = r % T, bh = r / T, n = bh / H, h = bh % H, off = (n * T + i) * C + h * hs;
            for (int64_t d = 8 * t; d < hs; d += 8 * G) {
                uint4 a = *reinterpret_cast<const uint4 *>(dy + off + d), b = *reinterpret_cast<const uint4 *>(y + off + d);
                const E *ea = reinterpret_cast<const E *>(&a), *eb = reinterpret_cast<const E *>(&b);
#pragma unroll
                for (int k = 0; k < 8; k++) s = fmaf(hr_f(ea[k]), hr_f(eb[k]), s);
            }
        }
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (t == 0 && r < R) D[r] = s;
    }
}

/* dqkv element: the value rounded to E, or the sum with what is there */
template <typename E> __device__ __forceinline__ void ha_put(E *p, float v, bool acc) {
    *p = hr_to<E>(acc ? hr_f(*p) + v : v);
}

/* Blocks an SM the dK/dV kernel is compiled for: 4 for heads of 64
 * channels (128 registers, 12 bytes spilled, where 3 blocks took 168 and
 * spilled 24; GPT-2 b16's step 39.0 -> 38.6 ms on an H200), else what ptxas
 * chooses (at 32 channels 4 blocks spilled 36 to 80 bytes). */
#define HA_DKV_BLOCKS(D) ((D) == 64 ? 4 : 1)

/* ---- backward (2): dK, dV. Block (n h, key tile of 64, channel chunk of DO),
 * warp w keys j0 + 16 w. Query tiles of BQ from the diagonal to T: S^T = K Q^T,
 * P^T = exp(scale S^T - lse_i) (fp32; 0 where i < j or i >= T), dV += P^T dY
 * (P rounded to E), dP^T = V dY^T, dS^T = P^T (dP^T - D_i) (fp32), dK += dS^T Q
 * (dS rounded to E); dK *= scale. Both accumulate in fp32 fragments, written
 * once. smem: K, V [64][D+8], two buffers of Q, dY [BQ][D+8] and lse, D [BQ] floats. */
template <typename E, int D, int BQ, int DO, bool DROP>
__global__ void __launch_bounds__(HA_THREADS, HA_DKV_BLOCKS(D))
    ha_dkv(const E *qkv_, const E *dy_, const float *lse, const float *Dr, E *dqkv, int T, int64_t C, int H,
           float scale, bool acc, bool vec, hr_attn_drop dr) {
    constexpr int S = D + 8;
    extern __shared__ __align__(16) uint16_t ha_sm[];
    /* K, V, then two buffers of Q, dY [BQ][S] and of lse, D [BQ] */
    uint16_t *sk = ha_sm, *sv = sk + HA_ROWS * S, *sqb = sv + HA_ROWS * S;
    float *slb = reinterpret_cast<float *>(sqb + 4 * BQ * S);
    const uint16_t *qkv = reinterpret_cast<const uint16_t *>(qkv_), *dy = reinterpret_cast<const uint16_t *>(dy_);
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t bh = blockIdx.x, n = bh / H, h = bh % H, hs = C / H, ld = 3 * C;
    int j0 = blockIdx.y * HA_ROWS, jw = j0 + 16 * w, c0 = blockIdx.z * DO; /* key tile 0 has the most work */
    const uint16_t *base = qkv + n * T * ld + h * hs, *dyb = dy + n * T * C + h * hs;
    uint64_t dstream = DROP ? hr_attn_stream(dr) : 0;
    float sl2 = scale * HR_LOG2E; /* scores in base 2 */
    ha_load<D, HA_ROWS>(sk, base + j0 * ld + C, ld, T - j0, (int)hs, vec);
    ha_load<D, HA_ROWS>(sv, base + j0 * ld + 2 * C, ld, T - j0, (int)hs, vec);

    float dk[DO / 8][4], dv[DO / 8][4];
#pragma unroll
    for (int nt = 0; nt < DO / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nt][e] = dv[nt][e] = 0.0f;
    /* query tile i0 + BQ loads while i0 is used */
    auto fetch = [&](int i, int b) {
        ha_load_async<D, BQ>(sqb + 2 * b * BQ * S, base + i * ld, ld, T - i, (int)hs, vec);
        ha_load_async<D, BQ>(sqb + (2 * b + 1) * BQ * S, dyb + i * C, C, T - i, (int)hs, vec);
        float *sl = slb + 2 * b * BQ;
        for (int x = threadIdx.x; x < BQ; x += HA_THREADS) {
            bool in = i + x < T;
            int64_t at = in ? bh * T + i + x : 0;
            ha_cp4(sl + x, lse + at, in);
            ha_cp4(sl + BQ + x, Dr + at, in);
        }
        hr_cp_async_commit();
    };
    fetch(j0, 0);
    for (int i0 = j0, b = 0; i0 < T; i0 += BQ, b ^= 1) {
        if (i0 + BQ < T) {
            fetch(i0 + BQ, b ^ 1);
            hr_cp_async_wait_group<1>();
        } else {
            hr_cp_async_wait_group<0>();
        }
        __syncthreads();
        const uint16_t *sq = sqb + 2 * b * BQ * S, *sdy = sq + BQ * S;
        const float *slse = slb + 2 * b * BQ, *sD = slse + BQ;
        if (i0 + BQ - 1 >= jw) { /* else every query of the tile precedes the warp's keys */
        float p[BQ / 8][4], ds[BQ / 8][4];
        uint32_t bk = DROP ? hr_attn_bkey(dr, dstream, n, h, i0, j0) : 0u;
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = ds[nt][e] = 0.0f;
        ha_mm_abt<E, S, D / 16, BQ / 8>(p, sk + 16 * w * S, sq, g, t);
        ha_mm_abt<E, S, D / 16, BQ / 8>(ds, sv + 16 * w * S, sdy, g, t);
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = jw + g + 8 * (e >> 1), x = 8 * nt + 2 * t + (e & 1), i = i0 + x;
                bool in = j <= i && i < T;
                float pe = in ? exp2f(fmaf(p[nt][e], sl2, -HR_LOG2E * slse[x])) : 0.0f;
                float mk = DROP && in ? hr_attn_keep(dr, bk, i, j) : 1.0f;
                p[nt][e] = pe * mk;
                ds[nt][e] = pe * (ds[nt][e] * mk - sD[x]);
            }
        ha_mm_pb<E, S, BQ / 16, DO / 8>(dv, p, sdy + c0, g, t);
        ha_mm_pb<E, S, BQ / 16, DO / 8>(dk, ds, sq + c0, g, t);
        }
        __syncthreads(); /* every warp is done with buffer b before it is refilled */
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        int j = jw + g + 8 * r;
        if (j >= T) continue;
        E *pk = dqkv + (n * T + j) * ld + C + h * hs, *pv = pk + C;
#pragma unroll
        for (int nt = 0; nt < DO / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int d = c0 + 8 * nt + 2 * t + e;
                if (d >= hs) continue;
                ha_put(pk + d, scale * dk[nt][2 * r + e], acc);
                ha_put(pv + d, dv[nt][2 * r + e], acc);
            }
    }
}

/* ---- backward (3): dQ. Block (n h, query tile of 64, channel chunk of DO),
 * warp w queries q0 + 16 w. Key tiles of BK from 0 to the diagonal: S = Q K^T,
 * P = exp(scale S - lse_i), dP = dY V^T, dS = P (dP - D_i) (fp32), dQ += dS K
 * (dS rounded to E); dQ *= scale. smem: Q, dY [64][D+8], two buffers of K, V [BK][D+8]. */
template <typename E, int D, int BK, int DO, bool DROP>
__global__ void __launch_bounds__(HA_THREADS)
    ha_dq(const E *qkv_, const E *dy_, const float *lse, const float *Dr, E *dqkv, int T, int64_t C, int H,
          float scale, bool acc, bool vec, hr_attn_drop dr) {
    constexpr int S = D + 8;
    extern __shared__ __align__(16) uint16_t ha_sm[];
    uint16_t *sq = ha_sm, *sdy = sq + HA_ROWS * S, *skb = sdy + HA_ROWS * S; /* then K, V, K, V [BK][S] */
    const uint16_t *qkv = reinterpret_cast<const uint16_t *>(qkv_), *dy = reinterpret_cast<const uint16_t *>(dy_);
    int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    int64_t bh = blockIdx.x, n = bh / H, h = bh % H, hs = C / H, ld = 3 * C;
    int q0 = (gridDim.y - 1 - blockIdx.y) * HA_ROWS, qw = q0 + 16 * w, c0 = blockIdx.z * DO;
    const uint16_t *base = qkv + n * T * ld + h * hs;
    uint64_t dstream = DROP ? hr_attn_stream(dr) : 0;
    float sl2 = scale * HR_LOG2E; /* scores in base 2 */
    ha_load<D, HA_ROWS>(sq, base + q0 * ld, ld, T - q0, (int)hs, vec);
    ha_load<D, HA_ROWS>(sdy, dy + (n * T + q0) * C + h * hs, C, T - q0, (int)hs, vec);
    float L[2], Di[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = qw + g + 8 * r;
        L[r] = i < T ? HR_LOG2E * lse[bh * T + i] : 0.0f; /* in base 2 */
        Di[r] = i < T ? Dr[bh * T + i] : 0.0f;
    }

    float dq[DO / 8][4];
#pragma unroll
    for (int nt = 0; nt < DO / 8; nt++) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.0f;
    int kend = min(q0 + HA_ROWS, T);
    auto fetch = [&](int k, int b) { /* key tile k0 + BK loads while k0 is used */
        ha_load_async<D, BK>(skb + 2 * b * BK * S, base + k * ld + C, ld, T - k, (int)hs, vec);
        ha_load_async<D, BK>(skb + (2 * b + 1) * BK * S, base + k * ld + 2 * C, ld, T - k, (int)hs, vec);
        hr_cp_async_commit();
    };
    fetch(0, 0);
    for (int k0 = 0, b = 0; k0 < kend; k0 += BK, b ^= 1) {
        if (k0 + BK < kend) {
            fetch(k0 + BK, b ^ 1);
            hr_cp_async_wait_group<1>();
        } else {
            hr_cp_async_wait_group<0>();
        }
        __syncthreads();
        const uint16_t *sk = skb + 2 * b * BK * S, *sv = sk + BK * S;
        if (k0 <= qw + 15) { /* else the whole tile is above the warp's diagonal */
        float p[BK / 8][4], ds[BK / 8][4];
        uint32_t bk = DROP ? hr_attn_bkey(dr, dstream, n, h, q0, k0) : 0u;
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = ds[nt][e] = 0.0f;
        ha_mm_abt<E, S, D / 16, BK / 8>(p, sq + 16 * w * S, sk, g, t);
        ha_mm_abt<E, S, D / 16, BK / 8>(ds, sdy + 16 * w * S, sv, g, t);
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = e >> 1, i = qw + g + 8 * r, j = k0 + 8 * nt + 2 * t + (e & 1);
                bool in = j <= i && i < T;
                float pe = in ? exp2f(fmaf(p[nt][e], sl2, -L[r])) : 0.0f;
                float mk = DROP && in ? hr_attn_keep(dr, bk, i, j) : 1.0f;
                ds[nt][e] = pe * (ds[nt][e] * mk - Di[r]);
            }
        ha_mm_pb<E, S, BK / 16, DO / 8>(dq, ds, sk + c0, g, t);
        }
        __syncthreads(); /* every warp is done with buffer b before it is refilled */
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = qw + g + 8 * r;
        if (i >= T) continue;
        E *pq = dqkv + (n * T + i) * ld + h * hs;
#pragma unroll
        for (int nt = 0; nt < DO / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int d = c0 + 8 * nt + 2 * t + e;
                if (d < hs) ha_put(pq + d, scale * dq[nt][2 * r + e], acc);
            }
    }
}

/* ---- host side ---- */

/* sets a kernel's dynamic shared memory limit past the default 48 KB */
template <typename K> static hr_status ha_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) HR_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return HR_OK;
}

/* 16-byte tile loads: channels of a head and rows in multiples of 8 elements */
static bool ha_vec(const hr_attention_args *p, const void *a, const void *b) {
    return (p->C / p->H) % 8 == 0 && p->C % 8 == 0 && hr_al(a, 16) && (!b || hr_al(b, 16));
}

/* shape checks shared by both directions; *D gets the padded head size */
static hr_status ha_check(const hr_attention_args *p, hr_dtype dt, int *D) {
    int64_t hs = p->H > 0 ? p->C / p->H : 0;
    if (dt != HR_BF16 && dt != HR_F16)
        return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention's half kernels take BF16 or F16 activations");
    if (hs < 1 || hs > 256)
        return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention on the GPU takes heads of up to 256 channels; this "
                            "one has %lld (use more heads)", (long long)hs);
    if (p->T > INT_MAX - 2 * HA_ROWS || (p->T + HA_ROWS - 1) / HA_ROWS > 65535 || p->N * p->H > INT_MAX)
        return hr_error_set(HR_ERR_UNSUPPORTED, "CausalSelfAttention: %lld positions x %lld heads is too many for the "
                            "GPU kernels", (long long)p->T, (long long)(p->N * p->H));
    *D = hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 256;
    return HR_OK;
}

/* DROP: the kernels that drop attention probabilities (pdrop > 0), the others free of that code */
template <typename E, int D, int BC, bool DROP> static hr_status ha_fwd_go(cudaStream_t st, const hr_attention_args *p) {
    size_t bytes = sizeof(uint16_t) * (HA_ROWS + 4 * BC) * (D + 8);
    hr_status s = ha_smem(ha_fwd<E, D, BC, DROP>, bytes);
    if (s != HR_OK) return s;
    dim3 grid((unsigned)(p->N * p->H), (unsigned)((p->T + HA_ROWS - 1) / HA_ROWS));
    ha_fwd<E, D, BC, DROP><<<grid, HA_THREADS, bytes, st>>>((const E *)p->qkv, (E *)p->y, p->lse, (int)p->T, p->C,
                                                            (int)p->H, p->scale, ha_vec(p, p->qkv, NULL),
                                                            hr_attn_drop_of(p));
    HR_CU(cudaGetLastError());
    return HR_OK;
}

template <typename E, int D, int BC> static hr_status ha_fwd_run(cudaStream_t st, const hr_attention_args *p) {
    return p->pdrop > 0 ? ha_fwd_go<E, D, BC, true>(st, p) : ha_fwd_go<E, D, BC, false>(st, p);
}

template <typename E> static hr_status ha_fwd_dt(cudaStream_t st, const hr_attention_args *p, int D) {
    switch (D) {
    case 32: return ha_fwd_run<E, 32, 64>(st, p);
    case 64: return ha_fwd_run<E, 64, 64>(st, p);
    case 128: return ha_fwd_run<E, 128, 64>(st, p);
    default: return ha_fwd_run<E, 256, 32>(st, p);
    }
}

/* BQ: the dK/dV kernel's query tile; BK: the dQ kernel's key tile; DO: the
 * output channels a block keeps (128 at most: its accumulators are registers) */
template <typename E, int D, int BQ, int BK, bool DROP>
static hr_status ha_bwd_go(cudaStream_t st, const hr_attention_args *p, float *D_) {
    constexpr int DO = D < 128 ? D : 128;
    int64_t R = p->N * p->H * p->T;
    bool vec = ha_vec(p, p->qkv, p->dy);
    int64_t hs = p->C / p->H;
    if (vec && hr_al(p->y_saved, 16)) { /* G = hs / 8 rounded up to a power of two: 1 to 32 lanes a row */
        int g = 1;
        while (g < 32 && 8 * g < hs) g *= 2;
        unsigned grid = hr_grid((R * g + 31) / 32, 256 / 32);
        const E *dy = (const E *)p->dy, *y = (const E *)p->y_saved;
        if (g == 1) ha_rowdot_vec<E, 1><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
        else if (g == 2) ha_rowdot_vec<E, 2><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
        else if (g == 4) ha_rowdot_vec<E, 4><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
        else if (g == 8) ha_rowdot_vec<E, 8><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
        else if (g == 16) ha_rowdot_vec<E, 16><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
        else ha_rowdot_vec<E, 32><<<grid, 256, 0, st>>>(dy, y, D_, p->T, p->C, p->H, R);
    } else {
        ha_rowdot<E><<<hr_grid(R, 256 / 32), 256, 0, st>>>( /* a warp a row */
            (const E *)p->dy, (const E *)p->y_saved, D_, p->T, p->C, p->H, R);
    }
    HR_CU(cudaGetLastError());

    unsigned tiles = (unsigned)((p->T + HA_ROWS - 1) / HA_ROWS);
    dim3 grid((unsigned)(p->N * p->H), tiles, D / DO);
    size_t kv_bytes = sizeof(uint16_t) * (2 * HA_ROWS + 4 * BQ) * (D + 8) + sizeof(float) * 4 * BQ;
    hr_status s = ha_smem(ha_dkv<E, D, BQ, DO, DROP>, kv_bytes);
    if (s != HR_OK) return s;
    ha_dkv<E, D, BQ, DO, DROP><<<grid, HA_THREADS, kv_bytes, st>>>((const E *)p->qkv, (const E *)p->dy, p->lse_saved, D_,
                                                            (E *)p->dqkv, (int)p->T, p->C, (int)p->H, p->scale,
                                                            p->acc, vec, hr_attn_drop_of(p));
    HR_CU(cudaGetLastError());

    size_t q_bytes = sizeof(uint16_t) * (2 * HA_ROWS + 4 * BK) * (D + 8);
    s = ha_smem(ha_dq<E, D, BK, DO, DROP>, q_bytes);
    if (s != HR_OK) return s;
    ha_dq<E, D, BK, DO, DROP><<<grid, HA_THREADS, q_bytes, st>>>((const E *)p->qkv, (const E *)p->dy, p->lse_saved, D_,
                                                          (E *)p->dqkv, (int)p->T, p->C, (int)p->H, p->scale, p->acc,
                                                          vec, hr_attn_drop_of(p));
    HR_CU(cudaGetLastError());
    return HR_OK;
}

template <typename E, int D, int BQ, int BK>
static hr_status ha_bwd_run(cudaStream_t st, const hr_attention_args *p, float *D_) {
    return p->pdrop > 0 ? ha_bwd_go<E, D, BQ, BK, true>(st, p, D_) : ha_bwd_go<E, D, BQ, BK, false>(st, p, D_);
}

template <typename E> static hr_status ha_bwd_dt(cudaStream_t st, const hr_attention_args *p, float *D_, int D) {
    switch (D) {
    case 32: return ha_bwd_run<E, 32, 64, 64>(st, p, D_);
    case 64: return ha_bwd_run<E, 64, 32, 64>(st, p, D_); /* BQ 32: 0.386 ms against 0.423 at 64 (GPT-2, H200) */
    case 128: return ha_bwd_run<E, 128, 32, 64>(st, p, D_);
    default: return ha_bwd_run<E, 256, 32, 32>(st, p, D_);
    }
}

extern "C" {

/* y (and lse unless NULL) from qkv; dt: the activations' type (BF16, F16) */
hr_status hr_cuda_attention_half(cudaStream_t st, const hr_attention_args *p, hr_dtype dt) {
    int D;
    hr_status s = ha_check(p, dt, &D);
    if (s != HR_OK || p->N * p->H * p->T == 0) return s;
    return dt == HR_BF16 ? ha_fwd_dt<__nv_bfloat16>(st, p, D) : ha_fwd_dt<__half>(st, p, D);
}

/* dqkv from qkv, y_saved, lse_saved, dy; D: N H T floats of scratch */
hr_status hr_cuda_attention_half_bwd(cudaStream_t st, const hr_attention_args *p, hr_dtype dt, float *D) {
    int Dp;
    hr_status s = ha_check(p, dt, &Dp);
    if (s != HR_OK || p->N * p->H * p->T == 0) return s;
    return dt == HR_BF16 ? ha_bwd_dt<__nv_bfloat16>(st, p, D, Dp) : ha_bwd_dt<__half>(st, p, D, Dp);
}

} /* extern "C" */
