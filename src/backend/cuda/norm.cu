/* norm.cu — BatchNorm1d/2d on the GPU (training, inference, backward) on
 * (N, C, HW): each channel cut into splits of whole samples, a block each,
 * their sums in double gathered in a fixed order (the same bits on a
 * rerun). x, y, dy, dx are F32, BF16 or F16 (read to float, stored rounded);
 * gamma, beta, the statistics and dgamma, dbeta are F32. */
#include "backend/cuda/common.cuh"

#define BN_THREADS 256
/* Blocks a (N, C, HW) pass aims for (several a multiprocessor), and the fewest
 * values a block sums: a channel's N*HW values are cut into P splits of whole
 * samples, one block each, so that C*P blocks fill the GPU. */
#define BN_BLOCKS 1024
#define BN_MIN_PER 4096
#define BN_MAX_SPLITS 256

static int64_t bn_splits(int64_t N, int64_t C, int64_t HW) {
    if (N <= 0 || C <= 0 || HW <= 0) return 1;
    int64_t p = (BN_BLOCKS + C - 1) / C, cap = N * HW / BN_MIN_PER;
    if (p > cap) p = cap;
    if (p > N) p = N;
    if (p > BN_MAX_SPLITS) p = BN_MAX_SPLITS;
    return p < 1 ? 1 : p;
}

/* The per-split partial sums (two doubles a split and channel) when there is
 * more than one split; none otherwise. From the sizes alone. */
static size_t bn_ws(int64_t N, int64_t C, int64_t HW) {
    int64_t P = bn_splits(N, C, HW);
    return P > 1 ? (size_t)(2 * P * C) * sizeof(double) : 0;
}

/* Split p of channel c: samples [n0, n1) of (N, C, HW), each a run of HW
 * values at (n C + c) HW. f(i) is called for every index in the split, V at a
 * time (V > 1: HW % V == 0 and the tensors' runs aligned to V elements). */
template <int V, typename F>
__device__ __forceinline__ void bn_each(int64_t c, int64_t p, int64_t P, int64_t N, int64_t C, int64_t HW, F f) {
    int64_t n0 = N * p / P, n1 = N * (p + 1) / P;
    uint32_t per = (uint32_t)(HW / V); /* vectors a sample; HW < 2^31 by the model's checks */
    int64_t units = (n1 - n0) * (int64_t)per;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
        int64_t n = n0 + (int64_t)((uint64_t)u / per);
        int64_t off = (int64_t)((uint64_t)u % per) * V;
        f(((n * C + c) * HW) + off);
    }
}

template <typename T, int V> __device__ __forceinline__ void bn_load(const T *p, int64_t i, float *v) {
    hr_vec<T, V> r = *reinterpret_cast<const hr_vec<T, V> *>(p + i);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = hr_f(r.v[k]);
}

template <typename T, int V> __device__ __forceinline__ void bn_store(T *p, int64_t i, const float *v) {
    hr_vec<T, V> r;
#pragma unroll
    for (int k = 0; k < V; k++) r.v[k] = hr_to<T>(v[k]);
    *reinterpret_cast<hr_vec<T, V> *>(p + i) = r;
}

/* Sums over split p of channel c of x - shift and its square, in double
 * (shifted by the channel's first value, so a large mean costs no precision);
 * every thread gets them. */
template <typename T, int V>
__device__ void bn_moments(const T *x, int64_t c, int64_t p, int64_t P, int64_t N, int64_t C, int64_t HW, float shift,
                           double *sh, double *s_out, double *ss_out) {
    double s = 0, ss = 0;
    bn_each<V>(c, p, P, N, C, HW, [&](int64_t i) {
        float v[V];
        bn_load<T, V>(x, i, v);
#pragma unroll
        for (int k = 0; k < V; k++) {
            double d = (double)v[k] - (double)shift;
            s += d;
            ss += d * d;
        }
    });
    *s_out = hr_block_sum(s, sh);
    *ss_out = hr_block_sum(ss, sh);
}

/* The P partial pairs of channel c summed in a fixed order (lane l takes
 * splits l, l + 32, ...; then the warp's tree): every thread gets them. */
__device__ void bn_gather(const double *ws, int64_t c, int64_t P, double *sh, double *a_out, double *b_out) {
    __shared__ double got[2];
    if (threadIdx.x < 32) {
        double a = 0, b = 0;
        for (int64_t q = threadIdx.x; q < P; q += 32) a += ws[2 * (c * P + q)], b += ws[2 * (c * P + q) + 1];
        a = hr_warp_sum(a);
        b = hr_warp_sum(b);
        if (threadIdx.x == 0) got[0] = a, got[1] = b;
    }
    __syncthreads();
    *a_out = got[0], *b_out = got[1];
}

/* Training, pass 1 (P > 1): block c P + p writes split p's shifted sums. */
template <typename T, int V>
__global__ void k_bn_moments(const T *x, double *ws, int64_t N, int64_t C, int64_t HW, int64_t P) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x / P, p = blockIdx.x % P;
    double s, ss;
    bn_moments<T, V>(x, c, p, P, N, C, HW, hr_f(x[c * HW]), sh, &s, &ss);
    if (threadIdx.x == 0) ws[2 * blockIdx.x] = s, ws[2 * blockIdx.x + 1] = ss;
}

/* Training, pass 2: the channel's statistics from the partial sums (ws) or,
 * with one split (ws NULL), from its own pass; split 0 stores them (and
 * updates the running ones unless rm is NULL: a recomputation); then every
 * block normalises its split. */
template <typename T, int V>
__global__ void k_bn_train(const T *x, const double *ws, const float *gm, const float *bt, float *rm, float *rv, T *y,
                           float *mean, float *invstd, int64_t N, int64_t C, int64_t HW, int64_t P, float eps,
                           float mom) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x / P, p = blockIdx.x % P, M = N * HW;
    float shift = hr_f(x[c * HW]);
    double s, ss;
    if (ws)
        bn_gather(ws, c, P, sh, &s, &ss);
    else
        bn_moments<T, V>(x, c, 0, 1, N, C, HW, shift, sh, &s, &ss);
    double dm = s / (double)M, q = ss - s * dm; /* q: the sum of squared deviations */
    if (q < 0) q = 0;
    double var = q / (double)M;
    float mf = (float)((double)shift + dm), is = (float)(1.0 / sqrt(var + (double)eps));
    if (p == 0 && threadIdx.x == 0) {
        mean[c] = mf;
        invstd[c] = is;
        double unbiased = M > 1 ? q / (double)(M - 1) : var;
        if (rm) {
            rm[c] = (1.0f - mom) * rm[c] + mom * mf;
            rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
        }
    }
    float a = gm[c] * is, b = bt[c] - mf * a;
    bn_each<V>(c, p, P, N, C, HW, [&](int64_t i) {
        float v[V];
        bn_load<T, V>(x, i, v);
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = v[k] * a + b;
        bn_store<T, V>(y, i, v);
    });
}

template <typename T>
__global__ void k_bn_infer(const T *x, const float *gm, const float *bt, const float *rm, const float *rv, T *y,
                           int64_t N, int64_t C, int64_t HW, float eps) {
    int64_t n = N * C * HW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = (i / HW) % C;
        float is = 1.0f / sqrtf(rv[c] + eps);
        float a = gm[c] * is, b = bt[c] - rm[c] * a;
        y[i] = hr_to<T>(hr_f(x[i]) * a + b);
    }
}

/* Backward, the sums of dy and dy xhat over split p of channel c, in double. */
template <typename T, int V>
__device__ void bn_grad_sums(const T *x, const T *dy, float mu, float is, int64_t c, int64_t p, int64_t P, int64_t N,
                             int64_t C, int64_t HW, double *sh, double *sdy_out, double *sdyx_out) {
    double sdy = 0, sdyx = 0;
    bn_each<V>(c, p, P, N, C, HW, [&](int64_t i) {
        float xv[V], gv[V];
        bn_load<T, V>(x, i, xv);
        bn_load<T, V>(dy, i, gv);
#pragma unroll
        for (int k = 0; k < V; k++) {
            sdy += gv[k];
            sdyx += (double)gv[k] * ((xv[k] - mu) * is);
        }
    });
    *sdy_out = hr_block_sum(sdy, sh);
    *sdyx_out = hr_block_sum(sdyx, sh);
}

/* Backward, pass 1 (P > 1): block c P + p writes split p's two sums. */
template <typename T, int V>
__global__ void k_bn_grad_sums(const T *x, const T *dy, const float *mean, const float *invstd, double *ws, int64_t N,
                               int64_t C, int64_t HW, int64_t P) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x / P, p = blockIdx.x % P;
    double a, b;
    bn_grad_sums<T, V>(x, dy, mean[c], invstd[c], c, p, P, N, C, HW, sh, &a, &b);
    if (threadIdx.x == 0) ws[2 * blockIdx.x] = a, ws[2 * blockIdx.x + 1] = b;
}

/* Backward, pass 2: the channel's sums (from ws, or its own pass when ws is
 * NULL); split 0 writes dgamma and dbeta; every block writes its split of
 * dx = gamma invstd / M (M dy - sum dy - xhat sum(dy xhat)). */
template <typename T, int V>
__global__ void k_bn_bwd(const T *x, const double *ws, const float *gm, const float *mean, const float *invstd,
                         const T *dy, T *dx, float *dg, float *db, int64_t N, int64_t C, int64_t HW, int64_t P,
                         bool acc0, bool acc1, bool acc2) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x / P, p = blockIdx.x % P, M = N * HW;
    float mu = mean[c], is = invstd[c];
    double sdy, sdyx;
    if (ws)
        bn_gather(ws, c, P, sh, &sdy, &sdyx);
    else
        bn_grad_sums<T, V>(x, dy, mu, is, c, 0, 1, N, C, HW, sh, &sdy, &sdyx);
    if (p == 0 && threadIdx.x == 0) {
        if (dg) dg[c] = (acc1 ? dg[c] : 0.0f) + (float)sdyx;
        if (db) db[c] = (acc2 ? db[c] : 0.0f) + (float)sdy;
    }
    if (!dx) return;
    float k = gm[c] * is / (float)M, a = (float)sdy, b = (float)sdyx;
    bn_each<V>(c, p, P, N, C, HW, [&](int64_t i) {
        float xv[V], gv[V], d[V];
        bn_load<T, V>(x, i, xv);
        bn_load<T, V>(dy, i, gv);
        if (acc0) bn_load<T, V>(dx, i, d);
#pragma unroll
        for (int k2 = 0; k2 < V; k2++) {
            float v = k * ((float)M * gv[k2] - a - (xv[k2] - mu) * is * b);
            d[k2] = acc0 ? d[k2] + v : v;
        }
        bn_store<T, V>(dx, i, d);
    });
}

/* Vectors of V = 16 bytes when every run of HW values starts on one (the
 * arena's tensors are 256-byte aligned; HW a multiple of V), else 1. */
template <typename T> static bool bn_vec_ok(int64_t HW, const void *a, const void *b, const void *c2, const void *d) {
    const int V = hr_v16<T>::n;
    return HW % V == 0 && hr_al(a, 16) && (!b || hr_al(b, 16)) && (!c2 || hr_al(c2, 16)) && (!d || hr_al(d, 16));
}

/* The splits and their scratch: more than one split only with the planned
 * workspace (less than planned: one split, as deterministic, slower). */
static int64_t bn_plan(const hr_kargs *a, double **ws) {
    const hr_batchnorm_args *p = &a->bn;
    int64_t P = bn_splits(p->N, p->C, p->HW);
    *ws = NULL;
    if (P > 1 && a->ws && a->ws_bytes >= bn_ws(p->N, p->C, p->HW)) *ws = (double *)a->ws;
    return *ws ? P : 1;
}

/* ---- launchers, one instance per element type (p's x, y, dy, dx hold T) ---- */
template <typename T, int V> static void bn_train(cudaStream_t s, const hr_batchnorm_args *p, double *ws, int64_t P) {
    unsigned grid = (unsigned)(p->C * P); /* C P <= C BN_MAX_SPLITS; C < 2^23 by the model's checks */
    if (ws) k_bn_moments<T, V><<<grid, BN_THREADS, 0, s>>>((const T *)p->x, ws, p->N, p->C, p->HW, P);
    k_bn_train<T, V><<<grid, BN_THREADS, 0, s>>>((const T *)p->x, ws, p->gamma, p->beta, p->running_mean,
                                                 p->running_var, (T *)p->y, p->mean, p->invstd, p->N, p->C, p->HW, P,
                                                 p->eps, p->momentum);
}

template <typename T> static cudaError_t bn_fwd(cudaStream_t s, const hr_kargs *a) {
    const hr_batchnorm_args *p = &a->bn;
    if (p->train) {
        double *ws;
        int64_t P = bn_plan(a, &ws);
        if (bn_vec_ok<T>(p->HW, p->x, p->y, NULL, NULL))
            bn_train<T, hr_v16<T>::n>(s, p, ws, P);
        else
            bn_train<T, 1>(s, p, ws, P);
    } else {
        k_bn_infer<T><<<hr_grid(p->N * p->C * p->HW), HR_THREADS, 0, s>>>((const T *)p->x, p->gamma, p->beta,
                                                                           p->running_mean, p->running_var, (T *)p->y,
                                                                           p->N, p->C, p->HW, p->eps);
    }
    return cudaGetLastError();
}

template <typename T, int V> static void bn_back(cudaStream_t s, const hr_batchnorm_args *p, double *ws, int64_t P) {
    unsigned grid = (unsigned)(p->C * P);
    if (ws)
        k_bn_grad_sums<T, V><<<grid, BN_THREADS, 0, s>>>((const T *)p->x, (const T *)p->dy, p->saved_mean,
                                                         p->saved_invstd, ws, p->N, p->C, p->HW, P);
    k_bn_bwd<T, V><<<grid, BN_THREADS, 0, s>>>((const T *)p->x, ws, p->gamma, p->saved_mean, p->saved_invstd,
                                               (const T *)p->dy, (T *)p->dx, p->dgamma, p->dbeta, p->N, p->C, p->HW,
                                               P, p->acc_dx, p->acc_dgamma, p->acc_dbeta);
}

template <typename T> static cudaError_t bn_bwd(cudaStream_t s, const hr_kargs *a) {
    const hr_batchnorm_args *p = &a->bn;
    double *ws;
    int64_t P = bn_plan(a, &ws);
    if (bn_vec_ok<T>(p->HW, p->x, p->dy, p->dx, NULL))
        bn_back<T, hr_v16<T>::n>(s, p, ws, P);
    else
        bn_back<T, 1>(s, p, ws, P);
    return cudaGetLastError();
}

/* ---- the kernel entries: (N, C, HW) layouts ---- */
extern "C" {

HR_CUDA_TAKES_HALF(batchnorm)
HR_CUDA_TAKES_HALF(batchnorm_bwd)

/* The split sums' scratch (training and backward; inference needs none). */
size_t hr_cuda_batchnorm_workspace(hr_cuda *c, const hr_kargs *a) {
    (void)c;
    return a->bn.train ? bn_ws(a->bn.N, a->bn.C, a->bn.HW) : 0;
}

size_t hr_cuda_batchnorm_bwd_workspace(hr_cuda *c, const hr_kargs *a) {
    (void)c;
    return bn_ws(a->bn.N, a->bn.C, a->bn.HW);
}

/* Batch statistics in training (and the running ones updated), the running
 * statistics in inference. */
hr_status hr_cuda_batchnorm(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, bn_fwd, ((hr_cuda *)ctx)->stream, a));
    return HR_OK;
}

/* Any of dx, dgamma, dbeta may be NULL (not needed). */
hr_status hr_cuda_batchnorm_bwd(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, bn_bwd, ((hr_cuda *)ctx)->stream, a));
    return HR_OK;
}

} /* extern "C" */
