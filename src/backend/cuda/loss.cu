/* loss.cu — CrossEntropyLoss and MSELoss on the GPU, forward and backward
 * (sums in double, as the CPU's), and the two-launch reduction they share. */

/* The reduction (the gradient norm uses it too): per-block partials in the
 * node's workspace, then one block adds them in order, so the result does not
 * depend on timing. */
#include "backend/cuda/common.cuh"

/* out[0] = (acc ? out[0] : 0) + sum(part[0..n)) / div */
__global__ void k_finish(const double *part, int n, float *out, bool acc, double div) {
    __shared__ double sh[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)((acc ? (double)out[0] : 0.0) + s / div);
}

/* One warp a row: mx + log(sum exp(x - mx)) - x[label]. */
__global__ void k_ce(const float *x, const int32_t *lab, int64_t N, int64_t C, double *part) {
    __shared__ double sh[32];
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    double acc = 0;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *xi = x + r * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < C; j += 32) mx = xi[j] > mx ? xi[j] : mx;
        mx = hr_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < C; j += 32) sum += exp((double)xi[j] - mx);
        sum = hr_warp_sum(sum);
        if (lane == 0) acc += (double)mx + log(sum) - xi[lab[r]];
    }
    acc = hr_block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void k_ce_bwd(const float *x, const int32_t *lab, float *dx, int64_t N, int64_t C, double scale, bool accum) {
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    double invn = scale / (double)N;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *xi = x + r * C;
        float *di = dx + r * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < C; j += 32) mx = xi[j] > mx ? xi[j] : mx;
        mx = hr_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < C; j += 32) sum += exp((double)xi[j] - mx);
        sum = hr_warp_sum(sum);
        int32_t l = lab[r];
        for (int64_t j = lane; j < C; j += 32) {
            float v = (float)((exp((double)xi[j] - mx) / sum - (j == l)) * invn);
            di[j] = accum ? di[j] + v : v;
        }
    }
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

static cudaError_t hrk_cross_entropy(cudaStream_t s, const float *x, const int32_t *lab, float *loss, int64_t N,
                                     int64_t C, double *ws) {
    unsigned nb = red_grid(N, 8);
    k_ce<<<nb, HR_THREADS, 0, s>>>(x, lab, N, C, ws);
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

cudaError_t hr_finish_launch(cudaStream_t s, const double *part, int n, float *out, bool acc, double div) {
    k_finish<<<1, HR_THREADS, 0, s>>>(part, n, out, acc, div);
    return cudaGetLastError();
}

/* ---- the kernel entries ---- */
/* The forward's block partials: one double a block of the first launch. */
size_t hr_cuda_loss_workspace(hr_cuda *c, const hr_kargs *a) { return HR_CUDA_RED_BYTES; }

/* The loss (a mean) into loss[0]; the block partials go to the node's
 * workspace (hr_cuda_loss_workspace). */
hr_status hr_cuda_loss(void *ctx, const hr_kargs *a) {
    const hr_loss_args *p = &a->loss;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    bool ce = a->op == HR_OP_CROSS_ENTROPY;
    if (!a->ws || a->ws_bytes < HR_CUDA_RED_BYTES)
        return hr_error_set(HR_ERR_INTERNAL, "%s: no workspace was planned", hr_op_name(a->op));
    if (ce)
        HR_CU(hrk_cross_entropy(s, p->x, p->labels, p->loss, p->N, p->C, (double *)a->ws));
    else
        HR_CU(hrk_mse(s, p->x, p->target, p->loss, p->n, (double *)a->ws));
    return HR_OK;
}

hr_status hr_cuda_loss_bwd(void *ctx, const hr_kargs *a) {
    const hr_loss_args *p = &a->loss;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (a->op == HR_OP_CROSS_ENTROPY_BWD)
        k_ce_bwd<<<hr_grid(p->N, 8), HR_THREADS, 0, s>>>(p->x, p->labels, p->dx, p->N, p->C, (double)p->scale, p->acc);
    else
        k_mse_bwd<<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->x, p->target, p->dx, p->n, 2.0f * p->scale / (float)p->n, p->acc);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
