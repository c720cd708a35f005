/* softmax.cu — Softmax and LogSoftmax on the GPU, forward and backward (from
 * the saved output): one warp a row, sums in double as the CPU's. */
#include "backend/cuda/common.cuh"

__global__ void k_softmax(const float *x, float *y, int64_t N, int64_t C, bool lg) {
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *xi = x + r * C;
        float *yi = y + r * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < C; j += 32) mx = xi[j] > mx ? xi[j] : mx;
        mx = hr_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < C; j += 32) sum += exp((double)(xi[j] - mx));
        sum = hr_warp_sum(sum);
        double lse = lg ? (double)mx + log(sum) : 0;
        for (int64_t j = lane; j < C; j += 32)
            yi[j] = lg ? (float)((double)xi[j] - lse) : (float)(exp((double)(xi[j] - mx)) / sum);
    }
}

__global__ void k_softmax_bwd(const float *y, const float *dy, float *dx, int64_t N, int64_t C, bool lg, bool acc) {
    int lane = threadIdx.x & 31;
    int64_t wpb = blockDim.x >> 5;
    for (int64_t r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); r < N; r += (int64_t)gridDim.x * wpb) {
        const float *yi = y + r * C, *gi = dy + r * C;
        float *di = dx + r * C;
        double dot = 0;
        for (int64_t j = lane; j < C; j += 32) dot += lg ? (double)gi[j] : (double)gi[j] * yi[j];
        dot = hr_warp_sum(dot);
        for (int64_t j = lane; j < C; j += 32) {
            float v = lg ? (float)(gi[j] - expf(yi[j]) * dot) : (float)(yi[j] * (gi[j] - dot));
            di[j] = acc ? di[j] + v : v;
        }
    }
}

extern "C" {

hr_status hr_cuda_softmax(void *ctx, const hr_kargs *a) {
    const hr_softmax_args *p = &a->sm;
    k_softmax<<<hr_grid(p->N, 8), HR_THREADS, 0, ((hr_cuda *)ctx)->stream>>>(p->x, p->out, p->N, p->C, p->log);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_softmax_bwd(void *ctx, const hr_kargs *a) {
    const hr_softmax_args *p = &a->sm;
    k_softmax_bwd<<<hr_grid(p->N, 8), HR_THREADS, 0, ((hr_cuda *)ctx)->stream>>>(p->y, p->dy, p->dx, p->N, p->C,
                                                                                   p->log, p->acc);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
