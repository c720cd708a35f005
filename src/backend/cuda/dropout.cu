/* dropout.cu — Dropout on the GPU, forward and backward, kernels and
 * entries, with the CPU's masks bit for bit (common.cuh's generator), on
 * F32, BF16 or F16 activations (scaled in float, stored rounded). */
#include "backend/cuda/common.cuh"

/* The keep decision is hr_rng_uniform(seed, stream, first + i) >= p, as on the
 * CPU; both directions multiply by (keep ? scale : 0), as the CPU and PyTorch
 * do (a dropped NaN or +-inf gives NaN, a dropped negative -0). */
template <typename T>
__global__ void k_dropout(const T *x, T *y, uint8_t *mask, int64_t n, float p, float scale, uint64_t seed,
                          uint64_t stream, uint64_t first, uint64_t stream_base, const hr_step_vars *dv) {
    if (dv) stream = stream_base ^ dv->t; /* a replayed step: its number from the device */
    HR_GRID_STRIDE(i, n) {
        uint8_t keep = hr_dev_uniform(seed, stream, first + (uint64_t)i) >= p;
        mask[i] = keep;
        y[i] = hr_to<T>(hr_f(x[i]) * (keep ? scale : 0.0f));
    }
}

template <typename T>
__global__ void k_dropout_bwd(const uint8_t *mask, const T *dy, T *dx, int64_t n, float scale, bool acc) {
    HR_GRID_STRIDE(i, n) {
        float v = hr_f(dy[i]) * (mask[i] ? scale : 0.0f);
        dx[i] = hr_to<T>(acc ? hr_f(dx[i]) + v : v);
    }
}

/* The same, V = hr_v16<T>::n values a thread (x, y 16-byte aligned, the
 * mask V-byte aligned): one load and one store of each, the mask's V bytes
 * as one word; the last n % V values one a thread. */
template <typename T>
__global__ void k_dropoutv(const T *x, T *y, uint8_t *mask, int64_t n, float p, float scale, uint64_t seed,
                           uint64_t stream, uint64_t first, uint64_t stream_base, const hr_step_vars *dv) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    typedef hr_vec<uint8_t, V> bytes;
    if (dv) stream = stream_base ^ dv->t;
    HR_GRID_STRIDE(c, n / V) {
        vec a = ((const vec *)x)[c], r;
        bytes m;
#pragma unroll
        for (int k = 0; k < V; k++) {
            uint8_t keep = hr_dev_uniform(seed, stream, first + (uint64_t)(V * c + k)) >= p;
            m.v[k] = keep;
            r.v[k] = hr_to<T>(hr_f(a.v[k]) * (keep ? scale : 0.0f));
        }
        ((vec *)y)[c] = r;
        ((bytes *)mask)[c] = m;
    }
    int64_t i = n - n % V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint8_t keep = hr_dev_uniform(seed, stream, first + (uint64_t)i) >= p;
        mask[i] = keep;
        y[i] = hr_to<T>(hr_f(x[i]) * (keep ? scale : 0.0f));
    }
}

template <typename T>
__global__ void k_dropout_bwdv(const uint8_t *mask, const T *dy, T *dx, int64_t n, float scale, bool acc) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    typedef hr_vec<uint8_t, V> bytes;
    HR_GRID_STRIDE(c, n / V) {
        bytes m = ((const bytes *)mask)[c];
        vec g = ((const vec *)dy)[c], d, r;
        if (acc) d = ((const vec *)dx)[c];
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = hr_f(g.v[k]) * (m.v[k] ? scale : 0.0f);
            r.v[k] = hr_to<T>(acc ? hr_f(d.v[k]) + v : v);
        }
        ((vec *)dx)[c] = r;
    }
    int64_t i = n - n % V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = hr_f(dy[i]) * (mask[i] ? scale : 0.0f);
        dx[i] = hr_to<T>(acc ? hr_f(dx[i]) + v : v);
    }
}

/* the vector kernels where every pointer allows them */
template <typename T> static bool drop_vec(const void *a, const void *b, const void *mask) {
    return hr_al(a, 16) && hr_al(b, 16) && hr_al(mask, (size_t)hr_v16<T>::n);
}

template <typename T> static cudaError_t dropout(cudaStream_t s, const hr_dropout_args *p) {
    constexpr int V = hr_v16<T>::n;
    if (drop_vec<T>(p->x, p->y, p->mask_out))
        k_dropoutv<T><<<hr_grid((p->n + V - 1) / V), HR_THREADS, 0, s>>>((const T *)p->x, (T *)p->y, p->mask_out, p->n,
                                                                        p->p, p->scale, p->seed, p->stream, p->first,
                                                                        p->stream_base, p->dv);
    else
        k_dropout<T><<<hr_grid(p->n), HR_THREADS, 0, s>>>((const T *)p->x, (T *)p->y, p->mask_out, p->n, p->p,
                                                           p->scale, p->seed, p->stream, p->first, p->stream_base,
                                                           p->dv);
    return cudaGetLastError();
}

template <typename T> static cudaError_t dropout_bwd(cudaStream_t s, const hr_dropout_args *p) {
    constexpr int V = hr_v16<T>::n;
    if (drop_vec<T>(p->dy, p->dx, p->mask))
        k_dropout_bwdv<T><<<hr_grid((p->n + V - 1) / V), HR_THREADS, 0, s>>>(p->mask, (const T *)p->dy, (T *)p->dx,
                                                                            p->n, p->scale, p->acc);
    else
        k_dropout_bwd<T><<<hr_grid(p->n), HR_THREADS, 0, s>>>(p->mask, (const T *)p->dy, (T *)p->dx, p->n, p->scale,
                                                               p->acc);
    return cudaGetLastError();
}

extern "C" {

HR_CUDA_TAKES_HALF(dropout)
HR_CUDA_TAKES_HALF(dropout_bwd)

/* In training with p > 0: y and the mask. Otherwise y = x and the mask (if
 * the node has one) all ones, as the CPU leaves it. */
hr_status hr_cuda_dropout(void *ctx, const hr_kargs *a) {
    const hr_dropout_args *p = &a->drop;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (p->n <= 0) return HR_OK;
    if (!p->train || p->p == 0.0f) {
        if (p->y != p->x)
            HR_CU(cudaMemcpyAsync(p->y, p->x, hr_dtype_size(a->dt) * (size_t)p->n, cudaMemcpyDeviceToDevice, s));
        if (p->mask_out) HR_CU(cudaMemsetAsync(p->mask_out, 1, (size_t)p->n, s));
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
