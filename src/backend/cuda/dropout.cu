/* dropout.cu — Dropout on the GPU, forward and backward, kernels and
 * entries, with the CPU's masks bit for bit (core.h's generator, compiled for both), on
 * F32, BF16 or F16 activations (scaled in float, stored rounded). */
#include "backend/cuda/common.cuh"

/* The keep decision is hr_rng_uniform(seed, stream, first + i) >= p, as on the
 * CPU, drawn again by the backward (no mask is kept); both directions multiply
 * by (keep ? scale : 0), as the CPU and PyTorch do (a dropped NaN or +-inf
 * gives NaN, a dropped negative -0). A replayed step reads its number from dv.
 * V = hr_v16<T>::n values a thread where both pointers are 16-byte aligned
 * (one load and one store of each), else one; either way the last n % V
 * values go one a thread to the grid's first threads. fwd: y = x * f;
 * backward: dx = dy * f, or dx + dy * f with acc. */
template <typename T, int V, bool BWD>
__global__ void k_dropout(const T *x, T *y, int64_t n, float p, float scale, uint64_t seed, uint64_t stream,
                          uint64_t first, uint64_t stream_base, const hr_step_vars *dv, bool acc) {
    typedef hr_vec<T, V> vec;
    if (dv) stream = stream_base ^ dv->t;
    HR_GRID_STRIDE(c, n / V) {
        vec a = ((const vec *)x)[c], r;
        if (BWD && acc) r = ((const vec *)y)[c];
#pragma unroll
        for (int k = 0; k < V; k++) {
            float f = hr_rng_uniform(seed, stream, first + (uint64_t)(V * c + k)) >= p ? scale : 0.0f;
            float v = hr_f(a.v[k]) * f;
            r.v[k] = hr_to<T>(BWD && acc ? hr_f(r.v[k]) + v : v);
        }
        ((vec *)y)[c] = r;
    }
    int64_t i = n - n % V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = hr_f(x[i]) * (hr_rng_uniform(seed, stream, first + (uint64_t)i) >= p ? scale : 0.0f);
        y[i] = hr_to<T>(BWD && acc ? hr_f(y[i]) + v : v);
    }
}

/* in -> out (x -> y, or dy -> dx) */
template <typename T, bool BWD> static cudaError_t drop_go(cudaStream_t s, const hr_dropout_args *p, const void *in,
                                                           void *out) {
    constexpr int V = hr_v16<T>::n;
    const T *a = (const T *)in;
    T *b = (T *)out;
    if (hr_al(a, 16) && hr_al(b, 16))
        k_dropout<T, V, BWD><<<hr_grid((p->n + V - 1) / V), HR_THREADS, 0, s>>>(
            a, b, p->n, p->p, p->scale, p->seed, p->stream, p->first, p->stream_base, p->dv, p->acc);
    else
        k_dropout<T, 1, BWD><<<hr_grid(p->n), HR_THREADS, 0, s>>>(a, b, p->n, p->p, p->scale, p->seed, p->stream,
                                                                   p->first, p->stream_base, p->dv, p->acc);
    return cudaGetLastError();
}

template <typename T> static cudaError_t dropout(cudaStream_t s, const hr_dropout_args *p) {
    return drop_go<T, false>(s, p, p->x, p->y);
}

template <typename T> static cudaError_t dropout_bwd(cudaStream_t s, const hr_dropout_args *p) {
    return drop_go<T, true>(s, p, p->dy, p->dx);
}

extern "C" {

HR_CUDA_TAKES_HALF(dropout)
HR_CUDA_TAKES_HALF(dropout_bwd)

/* In training with p > 0: y = x * f. Otherwise y = x. */
hr_status hr_cuda_dropout(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *p = &a->drop;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (p->n <= 0) return HR_OK;
    if (!p->train || p->p == 0.0f) {
        if (p->y != p->x)
            HR_CU(cudaMemcpyAsync(p->y, p->x, hr_dtype_size(a->dt) * (size_t)p->n, cudaMemcpyDeviceToDevice, s));
        return HR_OK;
    }
    HR_CU(HR_DT_CALL(a->dt, dropout, s, p));
    return HR_OK;
}

hr_status hr_cuda_dropout_bwd(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *p = &a->drop;
    if (p->n <= 0) return HR_OK;
    HR_CU(HR_DT_CALL(a->dt, dropout_bwd, ((hr_cuda *)ctx)->stream, p));
    return HR_OK;
}

} /* extern "C" */
