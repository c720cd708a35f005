/* optim.cu — the optimizer updates on the GPU with cpu_optim.c's arithmetic,
 * step for step (the library is built without FMA contraction, so the same
 * inputs give the same bits), and the squared gradient norm for clipping.
 * The updates are multi-tensor: one launch updates up to HR_MT_MAX parameters
 * (a table passed by value), so a step's update costs a few launches, not one
 * a parameter; the session hands the backend the whole run of update nodes. */
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

/* ---- multi-tensor updates ---------------------------------------------------
 * Tensor k gets hr_grid(n) blocks, as its own launch would, starting at block
 * start[k] (start[count] is the grid); a block finds its tensor by binary
 * search and strides over it with its tensor's share of the grid. The table
 * is a __grid_constant__ parameter: read where the launch put it, never
 * copied to local memory by the dynamic index. */
struct mt_table {
    hr_mt_tensor t[HR_MT_MAX];
    int start[HR_MT_MAX + 1];
    int count;
};
/* kernel parameters must fit 4 KB (the table and the step's scalars) */
static_assert(sizeof(mt_table) + 128 <= 4096, "the multi-tensor table must leave room in 4 KB of parameters");

/* the tensor of block b: the last k with start[k] <= b (starts strictly increase) */
__device__ __forceinline__ int mt_find(const mt_table &tab, int b) {
    int lo = 0, hi = tab.count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tab.start[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__global__ void k_sgd_mt(const __grid_constant__ mt_table tab, const float *sqnorm, float clip, float lr, float wd,
                         float mom, float damp, bool nesterov, bool first) {
    int k = mt_find(tab, (int)blockIdx.x);
    float *p = tab.t[k].p, *buf = tab.t[k].s1;
    const float *g = tab.t[k].g;
    int64_t n = tab.t[k].n, stride = (int64_t)(tab.start[k + 1] - tab.start[k]) * blockDim.x;
    float cs = clip_scale(sqnorm, clip);
    for (int64_t i = (int64_t)((int)blockIdx.x - tab.start[k]) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i] * cs + wd * p[i];
        if (buf) {
            buf[i] = first ? d : mom * buf[i] + (1.0f - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

__global__ void k_adam_mt(const __grid_constant__ mt_table tab, const float *sqnorm, float clip, float lr, float b1,
                          float b2, float eps, float wd, bool decoupled, float step, float bc2s) {
    int k = mt_find(tab, (int)blockIdx.x);
    float *p = tab.t[k].p, *m = tab.t[k].s1, *v = tab.t[k].s2;
    const float *g = tab.t[k].g;
    int64_t n = tab.t[k].n, stride = (int64_t)(tab.start[k + 1] - tab.start[k]) * blockDim.x;
    float cs = clip_scale(sqnorm, clip);
    for (int64_t i = (int64_t)((int)blockIdx.x - tab.start[k]) * blockDim.x + threadIdx.x; i < n; i += stride) {
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

/* Cuts t[0..count) into tables of up to HR_MT_MAX non-empty tensors and calls
 * launch(table, blocks) for each, in order. */
template <typename Launch> static cudaError_t mt_launch(const hr_mt_tensor *t, int count, Launch launch) {
    mt_table tab{}; /* the unused tail is passed too: zeros, not stack garbage */
    for (int i = 0; i < count;) {
        int blocks = 0;
        tab.count = 0;
        for (; i < count && tab.count < HR_MT_MAX; i++) {
            if (t[i].n <= 0) continue;
            tab.t[tab.count] = t[i];
            tab.start[tab.count++] = blocks;
            blocks += (int)hr_grid(t[i].n); /* at most HR_MT_MAX * HR_MAX_GRID */
        }
        if (tab.count == 0) break;
        tab.start[tab.count] = blocks;
        launch(tab, (unsigned)blocks);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" {

cudaError_t hrk_sqnorm(cudaStream_t s, const float *g, int64_t n, float *out, bool acc, double *ws) {
    int64_t b = (n + HR_THREADS * 4 - 1) / (HR_THREADS * 4);
    unsigned nb = (unsigned)(b < 1 ? 1 : b > HR_CUDA_RED_BLOCKS ? HR_CUDA_RED_BLOCKS : b);
    k_sqnorm<<<nb, HR_THREADS, 0, s>>>(g, n, ws);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : hr_finish_launch(s, ws, (int)nb, out, acc, 1.0);
}

cudaError_t hrk_sgd_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip, float lr,
                       float wd, float mom, float damp, bool nesterov, bool first) {
    return mt_launch(t, count, [&](const mt_table &tab, unsigned blocks) {
        k_sgd_mt<<<blocks, HR_THREADS, 0, s>>>(tab, sqnorm, clip, lr, wd, mom, damp, nesterov, first);
    });
}

cudaError_t hrk_adam_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip, float lr,
                        float b1, float b2, float eps, float wd, bool decoupled, float step, float bc2s) {
    return mt_launch(t, count, [&](const mt_table &tab, unsigned blocks) {
        k_adam_mt<<<blocks, HR_THREADS, 0, s>>>(tab, sqnorm, clip, lr, b1, b2, eps, wd, decoupled, step, bc2s);
    });
}

} /* extern "C" */
