/* norm.cu — BatchNorm1d/2d on the GPU (training, inference, backward) on
 * (N, C, HW): one block a channel, sums in double in a fixed order. x, y, dy,
 * dx are F32, BF16 or F16 (read to float, stored rounded); gamma, beta, the
 * statistics and dgamma, dbeta are F32. */
#include "backend/cuda/common.cuh"

#define BN_THREADS 512

template <typename T>
__global__ void k_bn_train(const T *x, const float *gm, const float *bt, float *rm, float *rv, T *y, float *mean,
                           float *invstd, int64_t N, int64_t C, int64_t HW, float eps, float mom) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x, M = N * HW;
    double s = 0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += hr_f(x[ch_index(m, c, C, HW)]);
    double mu = hr_block_sum(s, sh) / (double)M;
    double ss = 0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
        double d = (double)hr_f(x[ch_index(m, c, C, HW)]) - mu;
        ss += d * d;
    }
    ss = hr_block_sum(ss, sh);
    double var = ss / (double)M;
    float mf = (float)mu, is = (float)(1.0 / sqrt(var + (double)eps));
    if (threadIdx.x == 0) {
        mean[c] = mf;
        invstd[c] = is;
        double unbiased = M > 1 ? ss / (double)(M - 1) : var;
        if (rm) { /* NULL: a recomputation, which leaves the running statistics alone */
            rm[c] = (1.0f - mom) * rm[c] + mom * mf;
            rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
        }
    }
    float a = gm[c] * is, b = bt[c] - mf * a;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
        int64_t i = ch_index(m, c, C, HW);
        y[i] = hr_to<T>(hr_f(x[i]) * a + b);
    }
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

/* dx = gamma invstd / M (M dy - sum dy - xhat sum(dy xhat)) */
template <typename T>
__global__ void k_bn_bwd(const T *x, const float *gm, const float *mean, const float *invstd, const T *dy, T *dx,
                         float *dg, float *db, int64_t N, int64_t C, int64_t HW, bool acc0, bool acc1, bool acc2) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x, M = N * HW;
    float mu = mean[c], is = invstd[c];
    double sdy = 0, sdyx = 0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
        int64_t i = ch_index(m, c, C, HW);
        float g = hr_f(dy[i]);
        sdy += g;
        sdyx += (double)g * ((hr_f(x[i]) - mu) * is);
    }
    sdy = hr_block_sum(sdy, sh);
    sdyx = hr_block_sum(sdyx, sh);
    if (threadIdx.x == 0) {
        if (dg) dg[c] = (acc1 ? dg[c] : 0.0f) + (float)sdyx;
        if (db) db[c] = (acc2 ? db[c] : 0.0f) + (float)sdy;
    }
    if (!dx) return;
    float k = gm[c] * is / (float)M, a = (float)sdy, b = (float)sdyx;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
        int64_t i = ch_index(m, c, C, HW);
        float v = k * ((float)M * hr_f(dy[i]) - a - (hr_f(x[i]) - mu) * is * b);
        dx[i] = hr_to<T>(acc0 ? hr_f(dx[i]) + v : v);
    }
}

static unsigned chan_grid(int64_t C) { return (unsigned)C; } /* C <= 2^31 by the model's checks */

/* ---- launchers, one instance per element type (p's x, y, dy, dx hold T) ---- */
template <typename T> static cudaError_t bn_fwd(cudaStream_t s, const hr_batchnorm_args *p) {
    if (p->train)
        k_bn_train<T><<<chan_grid(p->C), BN_THREADS, 0, s>>>((const T *)p->x, p->gamma, p->beta, p->running_mean,
                                                              p->running_var, (T *)p->y, p->mean, p->invstd, p->N, p->C,
                                                              p->HW, p->eps, p->momentum);
    else
        k_bn_infer<T><<<hr_grid(p->N * p->C * p->HW), HR_THREADS, 0, s>>>((const T *)p->x, p->gamma, p->beta,
                                                                           p->running_mean, p->running_var, (T *)p->y,
                                                                           p->N, p->C, p->HW, p->eps);
    return cudaGetLastError();
}

template <typename T> static cudaError_t bn_bwd(cudaStream_t s, const hr_batchnorm_args *p) {
    k_bn_bwd<T><<<chan_grid(p->C), BN_THREADS, 0, s>>>((const T *)p->x, p->gamma, p->saved_mean, p->saved_invstd,
                                                        (const T *)p->dy, (T *)p->dx, p->dgamma, p->dbeta, p->N, p->C,
                                                        p->HW, p->acc_dx, p->acc_dgamma, p->acc_dbeta);
    return cudaGetLastError();
}

/* ---- the kernel entries: (N, C, HW) layouts ---- */
extern "C" {

HR_CUDA_TAKES_HALF(batchnorm)
HR_CUDA_TAKES_HALF(batchnorm_bwd)

/* Batch statistics in training (and the running ones updated), the running
 * statistics in inference. */
hr_status hr_cuda_batchnorm(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, bn_fwd, ((hr_cuda *)ctx)->stream, &a->bn));
    return HR_OK;
}

/* Any of dx, dgamma, dbeta may be NULL (not needed). */
hr_status hr_cuda_batchnorm_bwd(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, bn_bwd, ((hr_cuda *)ctx)->stream, &a->bn));
    return HR_OK;
}

} /* extern "C" */
