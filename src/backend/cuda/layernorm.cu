/* layernorm.cu — LayerNorm on the GPU over the last `cols` values of each row,
 * forward and backward, as the CPU computes it (row statistics in double). */

/* hr_cuda.h (through common.cuh) declares the entries (HR_OP_LIST's kernel
 * column), hr_cuda_fail and hr_cuda_stream, and brings op_list.h in with C
 * linkage. */
#include "backend/cuda/common.cuh"

/* Row work (statistics, y, dx) goes to a group of L lanes of a warp for short
 * rows (L the power of two >= cols, at most 32), so that a warp keeps 32 / L
 * rows in flight instead of idling lanes on padding, and to one block a row
 * past LN_WARP_COLS, with block-stride loops for rows of any length. Sums are
 * in double and run in a fixed order (the same thread takes the same
 * elements, the reductions are fixed trees), so reruns give the same bits.
 * A row's values are reread from global memory for each pass (L1/L2 serve
 * them) rather than held, which keeps rows of any length in one kernel. */
#define LN_WARP_COLS 1024
#define LN_ROW_BLOCKS 65535 /* rows loop past this many blocks */

/* The two shapes of a row's group of threads: t its index in the group, n the
 * group's size, sum the group's total (every thread gets it, the same bits:
 * a butterfly adds the same pairs on every lane). A lane group past the last
 * row still takes part in the shuffles (the whole warp must) but is not live:
 * it reads and writes nothing. */
template <int L> struct LnLanes { /* L: a power of two, at most 32; a constant, so loops unroll */
    static constexpr int n = L;
    int t;
    bool live;
    __device__ __forceinline__ double sum(double v) const {
        for (int o = n >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
};
struct LnBlock {
    int t, n;
    double *sh; /* 32 doubles of shared memory */
    static constexpr bool live = true;
    __device__ __forceinline__ double sum(double v) const { return hr_block_sum(v, sh); }
};

/* y and dy: F32, or the half type when autocast folded y's cast into the
 * norm; t is the same across the grid, so the branches cost nothing. */
__device__ __forceinline__ float ln_ld(const void *p, int64_t i, hr_dtype t) {
    return t == HR_BF16 ? __bfloat162float(((const __nv_bfloat16 *)p)[i])
         : t == HR_F16  ? __half2float(((const __half *)p)[i])
                        : ((const float *)p)[i];
}
__device__ __forceinline__ void ln_st(void *p, int64_t i, float v, hr_dtype t) {
    if (t == HR_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == HR_F16) ((__half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}

/* One row of the forward. Two passes in double (mean, then the biased
 * variance of the deviations) as the CPU does; y is written only after both
 * sums are complete in the whole group, so y may be x. */
template <class G>
__device__ __forceinline__ void ln_fwd_row(G g, const float *xr, const float *gamma, const float *beta, void *y,
                                           hr_dtype yt, float *mean, float *rstd, int64_t r, int64_t cols, float eps) {
    int64_t end = g.live ? cols : 0; /* the loops' end: nothing for a group past the rows */
    double s = 0;
    for (int64_t j = g.t; j < end; j += g.n) s += xr[j];
    double mu = g.sum(s) / (double)cols;
    double ss = 0;
    for (int64_t j = g.t; j < end; j += g.n) {
        double d = (double)xr[j] - mu;
        ss += d * d;
    }
    double var = g.sum(ss) / (double)cols;
    float mf = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps));
    if (g.t == 0 && g.live) {
        if (mean) mean[r] = mf;
        if (rstd) rstd[r] = rs;
    }
    for (int64_t j = g.t; j < end; j += g.n) { /* beta only with gamma: no gamma is no affine at all */
        float v = (xr[j] - mf) * rs;
        if (gamma) v = beta ? v * gamma[j] + beta[j] : v * gamma[j];
        ln_st(y, r * cols + j, v, yt);
    }
}

/* One row of dx = rstd (g - mean_j(g) - xhat mean_j(g xhat)), g = dy gamma
 * (or dy), xhat = (x - mean) rstd. Both row sums are complete before any dx is
 * written, and each dx[j] is written after its own inputs are read, so dx may
 * be dy or x. dxh (type ht), when given, gets the final dx rounded (the cast
 * autocast folded in). */
template <class G>
__device__ __forceinline__ void ln_bwd_row(G g, const float *xr, const float *gamma, const void *dy, hr_dtype dt,
                                           int64_t off, float *dxr, void *dxh, hr_dtype ht, float mu, float rs,
                                           int64_t cols, bool acc) {
    int64_t end = g.live ? cols : 0;
    double sg = 0, sgx = 0;
    for (int64_t j = g.t; j < end; j += g.n) {
        float xh = (xr[j] - mu) * rs;
        float d = ln_ld(dy, off + j, dt), gj = gamma ? d * gamma[j] : d;
        sg += gj;
        sgx += (double)gj * xh;
    }
    sg = g.sum(sg);
    sgx = g.sum(sgx);
    float mg = (float)(sg / (double)cols), mgx = (float)(sgx / (double)cols);
    for (int64_t j = g.t; j < end; j += g.n) {
        float xh = (xr[j] - mu) * rs;
        float d = ln_ld(dy, off + j, dt), gj = gamma ? d * gamma[j] : d;
        float v = rs * (gj - mg - xh * mgx);
        v = acc ? dxr[j] + v : v;
        dxr[j] = v;
        if (dxh) ln_st(dxh, off + j, v, ht);
    }
}

/* The residual Add taken in, for the forms that read x more than once: sum =
 * a + b first, then the norm over sum. */
static __global__ void k_ln_add(const void *a, hr_dtype ta, const void *b, hr_dtype tb, float *sum, int64_t n) {
    HR_GRID_STRIDE(i, n) sum[i] = ln_ld(a, i, ta) + ln_ld(b, i, tb);
}

/* ---- forward ---- */
/* Warp w of the grid takes rows base .. base + 32/L - 1, lane group q row
 * base + q; base is warp-uniform, so every lane reaches every shuffle. A
 * group past the last row stands on row 0 and reads or writes none of it. */
template <int L>
static __global__ void k_ln_fwd_lanes(const float *x, const float *gamma, const float *beta, void *y, hr_dtype yt,
                                      float *mean, float *rstd, int64_t rows, int64_t cols, float eps) {
    int64_t rpw = 32 / L, w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * rpw; base < rows; base += nw * rpw) {
        int64_t r = base + (threadIdx.x & 31) / L;
        LnLanes<L> g{(int)(threadIdx.x & (L - 1)), r < rows};
        if (!g.live) r = 0;
        ln_fwd_row(g, x + r * cols, gamma, beta, y, yt, mean, rstd, r, cols, eps);
    }
}

/* 1024 threads for long rows: the bound keeps registers within what a full
 * block may use, so the launch cannot fail for lack of them. */
static __global__ void __launch_bounds__(1024)
    k_ln_fwd_block(const float *x, const float *gamma, const float *beta, void *y, hr_dtype yt, float *mean,
                   float *rstd, int64_t rows, int64_t cols, float eps) {
    __shared__ double sh[32];
    LnBlock g{(int)threadIdx.x, (int)blockDim.x, sh};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) /* block-uniform: every thread reaches the syncs */
        ln_fwd_row(g, x + r * cols, gamma, beta, y, yt, mean, rstd, r, cols, eps);
}

/* ---- backward, dx ---- */
template <int L>
static __global__ void k_ln_dx_lanes(const float *x, const float *gamma, const float *mean, const float *rstd,
                                     const void *dy, hr_dtype dt, float *dx, void *dxh, hr_dtype ht, int64_t rows,
                                     int64_t cols, bool acc) {
    int64_t rpw = 32 / L, w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t base = w * rpw; base < rows; base += nw * rpw) {
        int64_t r = base + (threadIdx.x & 31) / L;
        LnLanes<L> g{(int)(threadIdx.x & (L - 1)), r < rows};
        if (!g.live) r = 0;
        ln_bwd_row(g, x + r * cols, gamma, dy, dt, r * cols, dx + r * cols, dxh, ht, mean[r], rstd[r], cols, acc);
    }
}

static __global__ void __launch_bounds__(1024)
    k_ln_dx_block(const float *x, const float *gamma, const float *mean, const float *rstd, const void *dy, hr_dtype dt,
                  float *dx, void *dxh, hr_dtype ht, int64_t rows, int64_t cols, bool acc) {
    __shared__ double sh[32];
    LnBlock g{(int)threadIdx.x, (int)blockDim.x, sh};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        ln_bwd_row(g, x + r * cols, gamma, dy, dt, r * cols, dx + r * cols, dxh, ht, mean[r], rstd[r], cols, acc);
}

/* ---- rows of 128 NV floats (NV <= 8: GPT-2's 768, the char GPT's 384), a
 * warp a row held in registers: lane l has the float4s l, l + 32, ...; one
 * read of x and dy instead of two per pass (GPT-2's backward took 0.16 ms a
 * LayerNorm on an H100 for 150 MB). The arithmetic of ln_*_row, except
 * that a lane adds its 4 NV terms in float and only the lanes' sums go to
 * double (the butterfly): a float-to-double conversion per term cost more
 * than the row's loads. Each element is written by the lane that read it,
 * so y may be x and dx may be dy or x. */
__device__ __forceinline__ float ln_c(const float4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
__device__ __forceinline__ void ln_set(float4 &v, int k, float f) {
    if (k == 0) v.x = f;
    else if (k == 1) v.y = f;
    else if (k == 2) v.z = f;
    else v.w = f;
}

/* four values j*4 .. j*4+3 of an F32 or half array (16 or 8 bytes) */
__device__ __forceinline__ float4 ln_ld4(const void *p, int64_t j, hr_dtype t) {
    if (t == HR_F32) return ((const float4 *)p)[j];
    uint2 u = ((const uint2 *)p)[j];
    unsigned short h[4] = {(unsigned short)(u.x & 0xffff), (unsigned short)(u.x >> 16), (unsigned short)(u.y & 0xffff),
                           (unsigned short)(u.y >> 16)};
    float4 v;
    if (t == HR_BF16)
        v = make_float4(__bfloat162float(__ushort_as_bfloat16(h[0])), __bfloat162float(__ushort_as_bfloat16(h[1])),
                        __bfloat162float(__ushort_as_bfloat16(h[2])), __bfloat162float(__ushort_as_bfloat16(h[3])));
    else
        v = make_float4(__half2float(__ushort_as_half(h[0])), __half2float(__ushort_as_half(h[1])),
                        __half2float(__ushort_as_half(h[2])), __half2float(__ushort_as_half(h[3])));
    return v;
}
__device__ __forceinline__ void ln_st4(void *p, int64_t j, float4 v, hr_dtype t) {
    if (t == HR_F32) {
        ((float4 *)p)[j] = v;
        return;
    }
    unsigned h[4];
    for (int k = 0; k < 4; k++)
        h[k] = t == HR_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(ln_c(v, k)))
                            : __half_as_ushort(__float2half_rn(ln_c(v, k)));
    ((uint2 *)p)[j] = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
}
/* v as ln_st4 stores it in a half type, read back */
__device__ __forceinline__ float ln_round(float v, hr_dtype t) {
    return t == HR_BF16 ? __bfloat162float(__float2bfloat16_rn(v)) : __half2float(__float2half_rn(v));
}

/* With add_a, the residual Add taken in: x = a + b (each widened to F32, as
 * Add computes it) is made here and written to sum (which x is). */
/* 64 registers (8 bytes spilled) for 4 blocks of 256 an SM, 3 at its own
 * 70: GPT-2's 2,048 blocks in 3.9 waves instead of 5.2; H100, ncu, 25
 * launches a step: 1.442 -> 1.359 ms. */
template <int NV>
static __global__ void __launch_bounds__(256, 4) k_ln_fwd_vec(const float *x, const float *gamma, const float *beta, void *y, hr_dtype yt,
                                    float *mean, float *rstd, int64_t rows, int64_t cols, float eps, const void *add_a,
                                    hr_dtype ta, const void *add_b, hr_dtype tb, float *sum) {
    int lane = threadIdx.x & 31;
    int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
        const float4 *xr = (const float4 *)(x + r * cols);
        float4 v[NV];
        float sm = 0.0f;
        if (add_a) {
#pragma unroll
            for (int i = 0; i < NV; i++) {
                int64_t j = r * cols / 4 + lane + 32 * i;
                float4 p = ln_ld4(add_a, j, ta), q = ln_ld4(add_b, j, tb);
                v[i] = make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w);
                ((float4 *)sum)[j] = v[i];
            }
        } else
#pragma unroll
            for (int i = 0; i < NV; i++) v[i] = xr[lane + 32 * i];
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) sm += ln_c(v[i], k);
        double mu = hr_warp_sum((double)sm) / (double)cols;
        float muf = (float)mu, ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float d = ln_c(v[i], k) - muf;
                ss = fmaf(d, d, ss);
            }
        double var = hr_warp_sum((double)ss) / (double)cols;
        float mf = (float)mu, rs = (float)(1.0 / sqrt(var + (double)eps));
        if (lane == 0) {
            if (mean) mean[r] = mf;
            if (rstd) rstd[r] = rs;
        }
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int j = lane + 32 * i;
            float4 gm = gamma ? ((const float4 *)gamma)[j] : make_float4(0, 0, 0, 0);
            float4 bt = beta ? ((const float4 *)beta)[j] : make_float4(0, 0, 0, 0);
            float4 o;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float u = (ln_c(v[i], k) - mf) * rs;
                if (gamma) u = beta ? u * ln_c(gm, k) + ln_c(bt, k) : u * ln_c(gm, k);
                ln_set(o, k, u);
            }
            ln_st4(y, r * cols / 4 + j, o, yt);
        }
    }
}

template <int NV>
static __global__ void k_ln_dx_vec(const float *x, const float *gamma, const float *mean, const float *rstd,
                                   const void *dy, hr_dtype dt, float *dx, void *dxh, hr_dtype ht, int64_t rows,
                                   int64_t cols, bool acc) {
    int lane = threadIdx.x & 31;
    int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
        const float4 *xr = (const float4 *)(x + r * cols);
        float mu = mean[r], rs = rstd[r];
        float4 xh[NV], gv[NV];
        float sg = 0.0f, sgx = 0.0f; /* a lane's 4 NV terms in float, the lanes' sums in double */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int j = lane + 32 * i;
            float4 xv = xr[j], d = ln_ld4(dy, r * cols / 4 + j, dt);
            float4 gm = gamma ? ((const float4 *)gamma)[j] : make_float4(1, 1, 1, 1);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float h = (ln_c(xv, k) - mu) * rs, gj = gamma ? ln_c(d, k) * ln_c(gm, k) : ln_c(d, k);
                ln_set(xh[i], k, h);
                ln_set(gv[i], k, gj);
                sg += gj;
                sgx = fmaf(gj, h, sgx);
            }
        }
        double tg = hr_warp_sum((double)sg), tgx = hr_warp_sum((double)sgx);
        float mg = (float)(tg / (double)cols), mgx = (float)(tgx / (double)cols);
        float4 *xo = (float4 *)(dx + r * cols);
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int j = lane + 32 * i;
            float4 o = acc ? xo[j] : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float v = rs * (ln_c(gv[i], k) - mg - ln_c(xh[i], k) * mgx);
                ln_set(o, k, acc ? ln_c(o, k) + v : v);
            }
            xo[j] = o;
            if (dxh) ln_st4(dxh, r * cols / 4 + j, o, ht);
        }
    }
}

/* ---- backward in one pass: dx, and dgamma and dbeta's column sums from
 * the same loads (rows of 128 NV floats, x and dy read once where the two
 * kernels below read them twice). A block of 32 NV threads takes R rows,
 * LN_TILE_B at a time; thread t owns the four columns 4t .. 4t+3 of every
 * row, so its share of the column sums stays in its registers all along,
 * and LN_TILE_B rows' loads are in flight together. A row's two sums are
 * added across the warp (float: each lane's four terms) and across the
 * block's warps in warp order (double), through shared memory, by 2
 * LN_TILE_B lanes of each warp, which share the means by shuffles. The block
 * writes its column partials ([S][cols] floats) and k_ln_bwd_finish adds
 * them in block order; R comes from the shape alone (ln_bwd_rows), so the
 * sums are deterministic. Each element is written by the thread that read
 * it, after it read it, so dx may be dy or x. (A warp a row with the column
 * sums in registers, as the register form, held too few rows in flight.) */
#define LN_TILE_B 4        /* rows a batch */
#define LN_BWD_RMIN 32     /* rows a block, at least */
#define LN_BWD_BLOCKS 1024 /* at most: R grows past rows / (32 * 1024) */

/* Registers for 24 warps an SM (at least 2 blocks): GPT-2's 768 columns
 * (NV 6) get 80 registers a thread and 4 blocks an SM, whose 528 places
 * take the 512 blocks of its 16,384 rows in one wave; at 2 blocks (111
 * registers, 3 resident) they took 1.3 waves. H100, ncu, 25 launches a
 * step: 2.47 -> 1.85 ms (the means' double sums once a warp: 2.26 of it). */
#define LN_BWD_MIN_BLOCKS(NV) (24 / (NV) < 2 ? 2 : 24 / (NV))

static int64_t ln_bwd_rows(int64_t rows) {
    int64_t r = (rows + LN_BWD_BLOCKS - 1) / LN_BWD_BLOCKS;
    r = (r + LN_TILE_B - 1) / LN_TILE_B * LN_TILE_B;
    return r < LN_BWD_RMIN ? LN_BWD_RMIN : r;
}

template <int NV>
static __global__ void __launch_bounds__(32 * NV, LN_BWD_MIN_BLOCKS(NV))
    k_ln_bwd_tile(const float *x, const float *gamma, const float *mean, const float *rstd, const void *dy, hr_dtype dt,
                  float *dx, void *dxh, hr_dtype ht, float *pg, float *pb, float *pd, int64_t rows, int64_t cols,
                  int64_t R, bool acc) {
    __shared__ float sh[2][2][LN_TILE_B][NV]; /* [batch parity][sum][row][warp] */
    int t = threadIdx.x, lane = t & 31, w = t >> 5;
    int64_t c4 = cols / 4;
    float4 gm = gamma ? ((const float4 *)gamma)[t] : make_float4(1, 1, 1, 1);
    float4 ag = make_float4(0, 0, 0, 0), ab = ag, ad = ag;
    int64_t r0 = (int64_t)blockIdx.x * R, r1 = r0 + R < rows ? r0 + R : rows;
    int par = 0;
    for (int64_t rb = r0; rb < r1; rb += LN_TILE_B, par ^= 1) {
        float4 xv[LN_TILE_B], dv[LN_TILE_B], ov[LN_TILE_B];
        float mu[LN_TILE_B], rs[LN_TILE_B];
#pragma unroll
        for (int b = 0; b < LN_TILE_B; b++) { /* a dead row (past r1) reads nothing and adds zeros */
            int64_t r = rb + b;
            bool live = r < r1;
            xv[b] = live ? ((const float4 *)x)[r * c4 + t] : make_float4(0, 0, 0, 0);
            dv[b] = live ? ln_ld4(dy, r * c4 + t, dt) : make_float4(0, 0, 0, 0);
            ov[b] = live && acc && dx ? ((const float4 *)dx)[r * c4 + t] : make_float4(0, 0, 0, 0);
            mu[b] = live ? mean[r] : 0.0f;
            rs[b] = live ? rstd[r] : 0.0f;
        }
        float sg[LN_TILE_B], sgx[LN_TILE_B];
#pragma unroll
        for (int b = 0; b < LN_TILE_B; b++) {
            sg[b] = sgx[b] = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float h = (ln_c(xv[b], k) - mu[b]) * rs[b], d = ln_c(dv[b], k), gj = d * ln_c(gm, k);
                ln_set(ab, k, ln_c(ab, k) + d);
                ln_set(ag, k, fmaf(d, h, ln_c(ag, k)));
                sg[b] += gj;
                sgx[b] = fmaf(gj, h, sgx[b]);
            }
        }
        if (!dx) continue;
#pragma unroll
        for (int b = 0; b < LN_TILE_B; b++) {
            float u = hr_warp_sum(sg[b]), v = hr_warp_sum(sgx[b]);
            if (lane == 0) {
                sh[par][0][b][w] = u;
                sh[par][1][b][w] = v;
            }
        }
        __syncthreads(); /* the other parity's buffer is free: every thread passed this sync after reading it */
        /* lane j < 2 LN_TILE_B adds sum j / LN_TILE_B of row j % LN_TILE_B over the warps and divides it: the
         * double work once a warp, not once a thread; the others take the means by shuffles */
        float m = 0.0f;
        if (lane < 2 * LN_TILE_B) {
            double tot = 0;
#pragma unroll
            for (int q = 0; q < NV; q++) tot += sh[par][lane / LN_TILE_B][lane % LN_TILE_B][q];
            m = (float)(tot / (double)cols);
        }
#pragma unroll
        for (int b = 0; b < LN_TILE_B; b++) {
            float mg = __shfl_sync(0xffffffffu, m, b), mgx = __shfl_sync(0xffffffffu, m, LN_TILE_B + b);
            int64_t r = rb + b;
            if (r >= r1) break;
            float4 o;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float h = (ln_c(xv[b], k) - mu[b]) * rs[b], gj = ln_c(dv[b], k) * ln_c(gm, k);
                float e = rs[b] * (gj - mg - h * mgx);
                ln_set(o, k, acc ? ln_c(ov[b], k) + e : e);
            }
            ((float4 *)dx)[r * c4 + t] = o;
            if (dxh) ln_st4(dxh, r * c4 + t, o, ht);
            if (pd)
#pragma unroll
                for (int k = 0; k < 4; k++) ln_set(ad, k, ln_c(ad, k) + ln_round(ln_c(o, k), ht));
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (pg) pg[blockIdx.x * cols + 4 * t + k] = ln_c(ag, k);
        if (pb) pb[blockIdx.x * cols + 4 * t + k] = ln_c(ab, k);
        if (pd) pd[blockIdx.x * cols + 4 * t + k] = ln_c(ad, k);
    }
}

/* The one-pass form's partials added: a block of 32 x 32 threads a 32
 * columns, thread (c, q) adding the partials q, q + 32, ... of column c in
 * double, then the 32 sums in q order: the order is fixed by the shape.
 * Up to three sums: dgamma, dbeta and the next Linear's bias (each where its
 * output is wanted). */
typedef struct {
    const float *part[3];
    float *out[3];
    bool acc[3];
} ln_finish_args;

static __global__ void __launch_bounds__(1024) k_ln_bwd_finish(ln_finish_args f, int64_t cols, int64_t S) {
    __shared__ double sh[3][32][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.x * 32 + tx;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        double t = 0;
        if (c < cols && f.out[i])
#pragma unroll 8
            for (int64_t k = ty; k < S; k += 32) t += f.part[i][k * cols + c];
        sh[i][ty][tx] = t;
    }
    __syncthreads();
    if (ty != 0 || c >= cols) return;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        if (!f.out[i]) continue;
        double t = 0;
        for (int q = 0; q < 32; q++) t += sh[i][q][tx];
        f.out[i][c] = (f.acc[i] ? f.out[i][c] : 0.0f) + (float)t;
    }
}

/* ---- backward, dgamma and dbeta: column sums over the rows ----
 * Block (bx, k) owns columns [32 bx, 32 bx + 32) and the rows
 * [k rows / S, (k+1) rows / S): its 8 warps each read whole 128-byte row
 * segments (warp w takes rows w, w+8, ...), then the 8 partial sums of a
 * column are added in warp order. With S = 1 the block writes the gradients;
 * with S > 1 it writes its partial (doubles, [S][cols]) and k_ln_col_finish
 * adds the S partials of a column (hr_sum_parts). Either way the order is
 * fixed by the shape alone, so the sums are deterministic. */
#define LN_COL_ROWGROUPS 8

static __global__ void k_ln_col(const float *x, const float *mean, const float *rstd, const void *dy, hr_dtype dt, float *dg,
                                float *db, double *pg, double *pb, int64_t rows, int64_t cols, int64_t S, bool acc_g,
                                bool acc_b) {
    __shared__ double shg[LN_COL_ROWGROUPS][33], shb[LN_COL_ROWGROUPS][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.x * 32 + tx, k = blockIdx.y;
    int64_t r0 = k * rows / S, r1 = (k + 1) * rows / S;
    double sg = 0, sb = 0;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += LN_COL_ROWGROUPS) {
            float gv = ln_ld(dy, r * cols + c, dt);
            sb += gv;
            if (dg) sg += (double)gv * ((x[r * cols + c] - mean[r]) * rstd[r]);
        }
    shg[ty][tx] = sg;
    shb[ty][tx] = sb;
    __syncthreads();
    if (ty != 0 || c >= cols) return;
    double tg = 0, tb = 0;
    for (int q = 0; q < LN_COL_ROWGROUPS; q++) {
        tg += shg[q][tx];
        tb += shb[q][tx];
    }
    if (S > 1) {
        if (dg) pg[k * cols + c] = tg;
        if (db) pb[k * cols + c] = tb;
        return;
    }
    if (dg) dg[c] = (acc_g ? dg[c] : 0.0f) + (float)tg;
    if (db) db[c] = (acc_b ? db[c] : 0.0f) + (float)tb;
}

/* a block of 256 threads a 32 columns (hr_sum_parts) */
static __global__ void k_ln_col_finish(const double *pg, const double *pb, float *dg, float *db, int64_t cols,
                                       int64_t S, bool acc_g, bool acc_b) {
    __shared__ double sh[8][33];
    int64_t c = (int64_t)blockIdx.x * 32 + (threadIdx.x & 31);
    double tg = dg ? hr_sum_parts(pg, cols, S, c, sh) : 0.0, tb = db ? hr_sum_parts(pb, cols, S, c, sh) : 0.0;
    if (threadIdx.x >= 32 || c >= cols) return;
    if (dg) dg[c] = (acc_g ? dg[c] : 0.0f) + (float)tg;
    if (db) db[c] = (acc_b ? db[c] : 0.0f) + (float)tb;
}

/* Row slices S of the column sums: enough blocks (column tiles times slices)
 * to fill the device, about 1024, each slice at least 32 rows (4 per warp).
 * The partials are 2 S cols doubles, under 1 MiB for every shape (S > 1 only
 * while cols < 32 * 1024, and then S * cols < 65536). */
static int64_t ln_col_splits(int64_t rows, int64_t cols) {
    int64_t tiles = (cols + 31) / 32;
    int64_t s = (1024 + tiles - 1) / tiles;
    if (s > rows / 32) s = rows / 32;
    return s < 1 ? 1 : s;
}

/* log2 of the lanes a row in the lane form: L = the power of two >= cols, at
 * most 32 */
static int ln_lanes_lg(int64_t cols) {
    int lg = 0;
    while (lg < 5 && ((int64_t)1 << lg) < cols) lg++;
    return lg;
}
/* blocks of the lane form: a thread a lane, 32 / L rows a warp */
static unsigned ln_lane_grid(int64_t rows, int L) { return hr_grid((rows + 32 / L - 1) / (32 / L) * 32); }

/* The lane kernels' launches, one instance a width (L a compile-time
 * constant, so the strided loops and the shuffles unroll), indexed by log2 L. */
template <int L> static void ln_fwd_lanes(cudaStream_t s, const hr_layernorm_args *p) {
    k_ln_fwd_lanes<L><<<ln_lane_grid(p->rows, L), HR_THREADS, 0, s>>>(p->x, p->gamma, p->beta, p->y, p->y_dt, p->mean,
                                                                      p->rstd, p->rows, p->cols, p->eps);
}
template <int L> static void ln_dx_lanes(cudaStream_t s, const hr_layernorm_args *p) {
    k_ln_dx_lanes<L><<<ln_lane_grid(p->rows, L), HR_THREADS, 0, s>>>(p->x, p->gamma, p->saved_mean, p->saved_rstd,
                                                                     p->dy, p->dy_dt, p->dx, p->dx_half, p->dx_half_dt,
                                                                     p->rows, p->cols, p->acc_dx);
}
typedef void (*ln_launch)(cudaStream_t, const hr_layernorm_args *);
static const ln_launch ln_fwd_by_lg[6] = {ln_fwd_lanes<1>, ln_fwd_lanes<2>,  ln_fwd_lanes<4>,
                                          ln_fwd_lanes<8>, ln_fwd_lanes<16>, ln_fwd_lanes<32>};
static const ln_launch ln_dx_by_lg[6] = {ln_dx_lanes<1>, ln_dx_lanes<2>,  ln_dx_lanes<4>,
                                         ln_dx_lanes<8>, ln_dx_lanes<16>, ln_dx_lanes<32>};

static unsigned ln_row_grid(int64_t rows) { return (unsigned)(rows < LN_ROW_BLOCKS ? rows : LN_ROW_BLOCKS); }
/* threads a row in the block form: more for long rows, fewer loop trips */
static unsigned ln_row_threads(int64_t cols) { return cols <= 4096 ? 256u : 1024u; }

/* The register form: 128 NV columns, NV <= 8, every row pointer 16-byte
 * aligned; 0 otherwise. */
static int ln_vec_nv(const hr_layernorm_args *p, const void *a, const void *b, const void *c) {
    int64_t cols = p->cols;
    if (cols % 128 || cols > 1024 || !hr_al(a, 16) || !hr_al(b, 16) || (c && !hr_al(c, 16))) return 0;
    if ((p->gamma && !hr_al(p->gamma, 16)) || (p->beta && !hr_al(p->beta, 16))) return 0;
    return (int)(cols / 128);
}

#define LN_VEC_CASES(K, args)                                                                                          \
    switch (nv) {                                                                                                      \
    case 1: K<1><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 2: K<2><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 3: K<3><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 4: K<4><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 5: K<5><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 6: K<6><<<grid, 256, 0, s>>> args; break;                                                                     \
    case 7: K<7><<<grid, 256, 0, s>>> args; break;                                                                     \
    default: K<8><<<grid, 256, 0, s>>> args; break;                                                                    \
    }

extern "C" {

/* The workspace LayerNorm.backward wants for deterministic, parallel column
 * sums: 16 S cols bytes (S = ln_col_splits) when S > 1, else 0; none for the
 * forward. From the sizes alone (planning passes NULL pointers, so whether
 * dgamma or dbeta is wanted is not known then). With less, the backward
 * falls back to one slice: slower, as deterministic. */
static size_t ln_bwd_ws(int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return 0;
    int64_t S = ln_col_splits(rows, cols);
    return S > 1 ? (size_t)(2 * S * cols) * sizeof(double) : 0;
}

/* The one-pass form's blocks (k_ln_bwd_tile), 0 where its register form cannot
 * take the rows (the alignment is checked at the launch) or it is switched
 * off; its workspace is 8 S cols bytes, at most 8 MiB. */
static int64_t ln_bwd_blocks(const hr_cuda *c, int64_t rows, int64_t cols) {
    if (c->opt.ln_two_kernels || rows <= 0 || cols % 128 || cols > 1024) return 0;
    int64_t R = ln_bwd_rows(rows);
    return (rows + R - 1) / R;
}

size_t hr_cuda_layernorm_bwd_workspace(hr_cuda *c, const hr_kargs *a) {
    size_t two = ln_bwd_ws(a->ln.rows, a->ln.cols);
    int64_t sums = a->ln.dbias ? 3 : 2; /* dgamma's, dbeta's and the next Linear's bias's partials */
    size_t one = (size_t)(sums * ln_bwd_blocks(c, a->ln.rows, a->ln.cols) * a->ln.cols) * sizeof(float);
    return one > two ? one : two;
}

hr_status hr_cuda_layernorm(void *ctx, const hr_kargs *a) {
    const hr_layernorm_args *p = &a->ln;
    cudaStream_t s = hr_cuda_stream(ctx);
    int64_t rows = p->rows, cols = p->cols;
    if (rows <= 0 || cols <= 0) return HR_OK;
    if (!p->x || !p->y) return HR_ERR_INVALID_ARG;
    int nv = ln_vec_nv(p, p->x, p->y, NULL);
    if (p->add_a && (!hr_al(p->add_a, p->add_a_dt == HR_F32 ? 16 : 8) || !hr_al(p->add_b, p->add_b_dt == HR_F32 ? 16 : 8)))
        nv = 0;
    unsigned grid = hr_grid(rows * 32);
    if (p->add_a && !nv) {
        k_ln_add<<<hr_grid(rows * cols), HR_THREADS, 0, s>>>(p->add_a, p->add_a_dt, p->add_b, p->add_b_dt, p->sum,
                                                             rows * cols);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, "LayerNorm's Add kernel", cudaGetErrorString(e));
    }
    if (nv)
        LN_VEC_CASES(k_ln_fwd_vec, (p->x, p->gamma, p->beta, p->y, p->y_dt, p->mean, p->rstd, rows, cols, p->eps,
                                    p->add_a, p->add_a_dt, p->add_b, p->add_b_dt, p->sum))
    else if (cols <= LN_WARP_COLS)
        ln_fwd_by_lg[ln_lanes_lg(cols)](s, p);
    else
        k_ln_fwd_block<<<ln_row_grid(rows), ln_row_threads(cols), 0, s>>>(p->x, p->gamma, p->beta, p->y, p->y_dt,
                                                                          p->mean, p->rstd, rows, cols, p->eps);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, "LayerNorm kernel", cudaGetErrorString(e));
    return HR_OK;
}

/* dgamma and dbeta first: they read dy and x, which dx may overwrite (in
 * place); the stream orders the launches. */
hr_status hr_cuda_layernorm_bwd(void *ctx, const hr_kargs *a) {
    const hr_layernorm_args *p = &a->ln;
    cudaStream_t s = hr_cuda_stream(ctx);
    int64_t rows = p->rows, cols = p->cols;
    if (rows <= 0 || cols <= 0) return HR_OK;
    if (!p->dy || ((p->dx || p->dgamma) && (!p->x || !p->saved_mean || !p->saved_rstd))) return HR_ERR_INVALID_ARG;
    if (p->dbias && (!p->dx || !p->dx_half))
        return hr_error_set(HR_ERR_INTERNAL, "LayerNorm.backward: a bias gradient without dx's half copy");
    cudaError_t e;
    int nv = ln_vec_nv(p, p->x, p->dy, p->dx);
    if (p->dx_half && !hr_al(p->dx_half, 8)) nv = 0; /* its rows of 4 halves as 8-byte stores */
    int64_t S1 = nv && (p->dgamma || p->dbeta || p->dbias) ? ln_bwd_blocks((const hr_cuda *)ctx, rows, cols) : 0;
    int64_t sums = p->dbias ? 3 : 2;
    if (S1 && a->ws && a->ws_bytes >= (size_t)(sums * S1 * cols) * sizeof(float)) {
        float *w = (float *)a->ws;
        float *pg = p->dgamma ? w : NULL, *pb = p->dbeta ? w + S1 * cols : NULL, *pd = p->dbias ? w + 2 * S1 * cols : NULL;
        int64_t R = ln_bwd_rows(rows);
        unsigned grid = (unsigned)S1, th = (unsigned)(32 * nv);
#define LN_TILE(NV)                                                                                                    \
    k_ln_bwd_tile<NV><<<grid, th, 0, s>>>(p->x, p->gamma, p->saved_mean, p->saved_rstd, p->dy, p->dy_dt, p->dx,        \
                                          p->dx_half, p->dx_half_dt, pg, pb, pd, rows, cols, R, p->acc_dx)
        switch (nv) {
        case 1: LN_TILE(1); break;
        case 2: LN_TILE(2); break;
        case 3: LN_TILE(3); break;
        case 4: LN_TILE(4); break;
        case 5: LN_TILE(5); break;
        case 6: LN_TILE(6); break;
        case 7: LN_TILE(7); break;
        default: LN_TILE(8); break;
        }
#undef LN_TILE
        e = cudaGetLastError();
        ln_finish_args f = {{pg, pb, pd}, {p->dgamma, p->dbeta, p->dbias}, {p->acc_dgamma, p->acc_dbeta, p->acc_dbias}};
        if (e == cudaSuccess) k_ln_bwd_finish<<<(unsigned)((cols + 31) / 32), 1024, 0, s>>>(f, cols, S1);
        e = e == cudaSuccess ? cudaGetLastError() : e;
        if (e != cudaSuccess)
            return hr_cuda_fail(__FILE__, __LINE__, "LayerNorm.backward kernel", cudaGetErrorString(e));
        return HR_OK;
    }
    if (p->dgamma || p->dbeta) {
        int64_t S = ln_col_splits(rows, cols);
        size_t need = ln_bwd_ws(rows, cols);
        if (S > 1 && (!a->ws || a->ws_bytes < need)) S = 1; /* no room for partials */
        double *pg = S > 1 ? (double *)a->ws : NULL, *pb = S > 1 ? pg + S * cols : NULL;
        dim3 grid((unsigned)((cols + 31) / 32), (unsigned)S);
        k_ln_col<<<grid, 32 * LN_COL_ROWGROUPS, 0, s>>>(p->x, p->saved_mean, p->saved_rstd, p->dy, p->dy_dt, p->dgamma,
                                                         p->dbeta,
                                                         pg, pb, rows, cols, S, p->acc_dgamma, p->acc_dbeta);
        e = cudaGetLastError();
        if (e == cudaSuccess && S > 1)
            k_ln_col_finish<<<(unsigned)((cols + 31) / 32), 256, 0, s>>>(pg, pb, p->dgamma, p->dbeta, cols, S,
                                                                       p->acc_dgamma, p->acc_dbeta);
        e = e == cudaSuccess ? cudaGetLastError() : e;
        if (e != cudaSuccess)
            return hr_cuda_fail(__FILE__, __LINE__, "LayerNorm.backward dgamma/dbeta kernel", cudaGetErrorString(e));
    }
    if (!p->dx) return HR_OK;
    unsigned grid = hr_grid(rows * 32);
    if (nv)
        LN_VEC_CASES(k_ln_dx_vec, (p->x, p->gamma, p->saved_mean, p->saved_rstd, p->dy, p->dy_dt, p->dx, p->dx_half,
                                   p->dx_half_dt, rows, cols, p->acc_dx))
    else if (cols <= LN_WARP_COLS)
        ln_dx_by_lg[ln_lanes_lg(cols)](s, p);
    else
        k_ln_dx_block<<<ln_row_grid(rows), ln_row_threads(cols), 0, s>>>(p->x, p->gamma, p->saved_mean, p->saved_rstd,
                                                                         p->dy, p->dy_dt, p->dx, p->dx_half,
                                                                         p->dx_half_dt, rows, cols, p->acc_dx);
    e = cudaGetLastError();
    if (e == cudaSuccess && p->dbias) /* the next Linear's bias, as its backward would have summed it */
        e = hrk_channel_sum(s, p->dx_half_dt, p->dx_half, p->dbias, rows, cols, 1, p->acc_dbias);
    if (e != cudaSuccess)
        return hr_cuda_fail(__FILE__, __LINE__, "LayerNorm.backward dx kernel", cudaGetErrorString(e));
    return HR_OK;
}

} /* extern "C" */
