/* optim.cu — the optimizer updates on the GPU with cpu_optim.c's arithmetic,
 * step for step (the library is built without FMA contraction, so the same
 * inputs give the same bits), and the squared gradient norm for clipping.
 * One launch per parameter for now; a multi-tensor launch is the next step. */
#include "backend/cuda/common.cuh"

/* As torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)), read
 * on the device so that no step waits for the host. */
__device__ __forceinline__ float clip_scale(const float *sqnorm, float clip) {
    if (!sqnorm || clip <= 0) return 1.0f;
    float norm = sqrtf(sqnorm[0]);
    float c = clip / (norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

__global__ void k_sqnorm(const float *g, int64_t n, double *part) {
    __shared__ double sh[32];
    double s = 0;
    HR_GRID_STRIDE(i, n) s += (double)g[i] * g[i];
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_sgd(float *p, const float *g, float *buf, int64_t n, const float *sqnorm, float clip, float lr, float wd,
                      float mom, float damp, bool nesterov, bool first) {
    float cs = clip_scale(sqnorm, clip);
    HR_GRID_STRIDE(i, n) {
        float d = g[i] * cs + wd * p[i];
        if (buf) {
            buf[i] = first ? d : mom * buf[i] + (1.0f - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

__global__ void k_adam(float *p, const float *g, float *m, float *v, int64_t n, const float *sqnorm, float clip, float lr,
                       float b1, float b2, float eps, float wd, bool decoupled, float step, float bc2s) {
    float cs = clip_scale(sqnorm, clip);
    HR_GRID_STRIDE(i, n) {
        float gi = g[i] * cs, pi = p[i];
        if (decoupled)
            pi *= 1.0f - lr * wd;
        else
            gi += wd * pi;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * mi / (sqrtf(vi) / bc2s + eps);
    }
}

extern "C" {

cudaError_t hrk_sqnorm(cudaStream_t s, const float *g, int64_t n, float *out, bool acc, double *ws) {
    int64_t b = (n + HR_THREADS * 4 - 1) / (HR_THREADS * 4);
    unsigned nb = (unsigned)(b < 1 ? 1 : b > HR_CUDA_RED_BLOCKS ? HR_CUDA_RED_BLOCKS : b);
    k_sqnorm<<<nb, HR_THREADS, 0, s>>>(g, n, ws);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : hr_finish_launch(s, ws, (int)nb, out, acc, 1.0);
}

cudaError_t hrk_sgd(cudaStream_t s, float *p, const float *g, float *buf, int64_t n, const float *sqnorm, float clip,
                    float lr, float wd, float mom, float damp, bool nesterov, bool first) {
    k_sgd<<<hr_grid(n), HR_THREADS, 0, s>>>(p, g, buf, n, sqnorm, clip, lr, wd, mom, damp, nesterov, first);
    return cudaGetLastError();
}

cudaError_t hrk_adam(cudaStream_t s, float *p, const float *g, float *m, float *v, int64_t n, const float *sqnorm,
                     float clip, float lr, float b1, float b2, float eps, float wd, bool decoupled, float step,
                     float bc2s) {
    k_adam<<<hr_grid(n), HR_THREADS, 0, s>>>(p, g, m, v, n, sqnorm, clip, lr, b1, b2, eps, wd, decoupled, step, bc2s);
    return cudaGetLastError();
}

} /* extern "C" */
