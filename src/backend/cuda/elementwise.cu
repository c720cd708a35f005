/* elementwise.cu — Copy (a gradient passed on or added in), Reshape's copy
 * where it is no view, and Add on the GPU, kernels and entries, on F32, BF16
 * or F16 activations (sums in float, stored rounded). */
#include "backend/cuda/common.cuh"

/* y = a + b, or y += x (b == y): 16 bytes a thread where every pointer is
 * 16-byte aligned (the grid's first threads do the last values), else one
 * value a thread; the same sum either way. */
template <typename T> __global__ void k_add(const T *a, const T *b, T *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = hr_to<T>(hr_f(a[i]) + hr_f(b[i]));
}

template <typename T> __global__ void k_addv(const T *a, const T *b, T *y, int64_t n) {
    constexpr int V = hr_v16<T>::n;
    typedef hr_vec<T, V> vec;
    HR_GRID_STRIDE(i, n / V) {
        vec u = ((const vec *)a)[i], v = ((const vec *)b)[i], r;
#pragma unroll
        for (int k = 0; k < V; k++) r.v[k] = hr_to<T>(hr_f(u.v[k]) + hr_f(v.v[k]));
        ((vec *)y)[i] = r;
    }
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = n - n % V + t;
    if (i < n) y[i] = hr_to<T>(hr_f(a[i]) + hr_f(b[i]));
}

/* y (F32) = a + b with one of them half (mixed precision's residual join):
 * the half one widened, exactly as a Cast would */
template <typename Ta, typename Tb> __global__ void k_add_mixed(const Ta *a, const Tb *b, float *y, int64_t n) {
    HR_GRID_STRIDE(i, n) y[i] = hr_f(a[i]) + hr_f(b[i]);
}

/* The same, 4 values a thread (a float4 of the F32 side and of y, 8 bytes of
 * the half side, each so aligned); the last n % 4 one a thread. */
template <typename Ta, typename Tb> __global__ void k_add_mixed4(const Ta *a, const Tb *b, float *y, int64_t n) {
    typedef hr_vec<Ta, 4> va;
    typedef hr_vec<Tb, 4> vb;
    typedef hr_vec<float, 4> vy;
    HR_GRID_STRIDE(c, n / 4) {
        va x = ((const va *)a)[c];
        vb z = ((const vb *)b)[c];
        vy r;
#pragma unroll
        for (int k = 0; k < 4; k++) r.v[k] = hr_f(x.v[k]) + hr_f(z.v[k]);
        ((vy *)y)[c] = r;
    }
    int64_t i = n - n % 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = hr_f(a[i]) + hr_f(b[i]);
}

template <typename Ta, typename Tb> static void add_mixed_go(cudaStream_t s, const Ta *a, const Tb *b, float *y, int64_t n) {
    if (hr_al(a, 4 * sizeof(Ta)) && hr_al(b, 4 * sizeof(Tb)) && hr_al(y, 16))
        k_add_mixed4<<<hr_grid((n + 3) / 4), HR_THREADS, 0, s>>>(a, b, y, n);
    else
        k_add_mixed<<<hr_grid(n), HR_THREADS, 0, s>>>(a, b, y, n);
}

static cudaError_t add_mixed(cudaStream_t s, const hr_add_args *p) {
    const void *a = p->a, *b = p->b;
    float *y = p->y;
    if (p->ta == HR_F32 && p->tb == HR_BF16)
        add_mixed_go(s, (const float *)a, (const __nv_bfloat16 *)b, y, p->n);
    else if (p->ta == HR_F32 && p->tb == HR_F16)
        add_mixed_go(s, (const float *)a, (const __half *)b, y, p->n);
    else if (p->ta == HR_BF16 && p->tb == HR_F32)
        add_mixed_go(s, (const __nv_bfloat16 *)a, (const float *)b, y, p->n);
    else if (p->ta == HR_F16 && p->tb == HR_F32)
        add_mixed_go(s, (const __half *)a, (const float *)b, y, p->n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

template <typename T> static cudaError_t add(cudaStream_t s, const void *av, const void *bv, void *yv, int64_t n) {
    const T *a = (const T *)av, *b = (const T *)bv;
    T *y = (T *)yv;
    if (hr_al(a, 16) && hr_al(b, 16) && hr_al(y, 16))
        k_addv<T><<<hr_grid(n / hr_v16<T>::n), HR_THREADS, 0, s>>>(a, b, y, n);
    else
        k_add<T><<<hr_grid(n), HR_THREADS, 0, s>>>(a, b, y, n);
    return cudaGetLastError();
}

extern "C" {

HR_CUDA_TAKES_HALF(copy)
HR_CUDA_TAKES_HALF(add)

/* y = x, or y += x with acc (y + x, as the CPU adds); nothing when y is x (a view). */
hr_status hr_cuda_copy(void *ctx, const hr_kargs *a) {
    const hr_copy_args *p = &a->copy;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (p->n <= 0) return HR_OK;
    if (p->acc) {
        HR_CU(HR_DT_CALL(a->dt, add, s, p->y, p->x, p->y, p->n));
    } else if (p->x != p->y) {
        HR_CU(cudaMemcpyAsync(p->y, p->x, hr_dtype_size(a->dt) * (size_t)p->n, cudaMemcpyDeviceToDevice, s));
    }
    return HR_OK;
}

hr_status hr_cuda_add(void *ctx, const hr_kargs *a) {
    const hr_add_args *p = &a->add;
    if (p->n <= 0) return HR_OK;
    if (p->ta != p->tb) {
        if (p->ty != HR_F32) return hr_error_set(HR_ERR_INTERNAL, "Add: inputs of two types must give F32");
        HR_CU(add_mixed(((hr_cuda *)ctx)->stream, p));
        return HR_OK;
    }
    HR_CU(HR_DT_CALL(a->dt, add, ((hr_cuda *)ctx)->stream, p->a, p->b, p->y, p->n));
    return HR_OK;
}

} /* extern "C" */
