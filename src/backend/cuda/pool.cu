/* pool.cu — MaxPool2d and AvgPool2d (no padding) on the GPU, forward and
 * backward, kernels and entries, on F32, BF16 or F16 activations (compared
 * and summed in float, stored rounded; a maximum is copied as it is). */

/* The backward passes gather: each input element visits the windows that
 * hold it, in the CPU's (oh, ow) order, so sums match it bit for bit and need
 * no atomics. */
#include "backend/cuda/common.cuh"

/* PyTorch's test, `v > max || isnan(v)`, as cpu_pool.c's: the first maximum
 * wins, and a NaN beats everything, the window's last NaN among several. */
__device__ __forceinline__ bool pool_beats(float v, float m) { return v > m || v != v; }

/* Index (within the plane) of the window's maximum, by pool_beats. */
template <typename T>
__device__ __forceinline__ int64_t window_argmax(const T *xc, int64_t W, int64_t oh, int64_t ow, int kh, int kw, int sh,
                                                 int sw) {
    int64_t best = oh * sh * W + ow * sw;
    float bv = hr_f(xc[best]);
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            int64_t k = (oh * sh + i) * W + ow * sw + j;
            float v = hr_f(xc[k]);
            if (pool_beats(v, bv)) bv = v, best = k;
        }
    return best;
}

/* The windows holding row h: oh in [lo, hi]. */
__device__ __forceinline__ void window_range(int64_t h, int k, int s, int64_t O, int64_t *lo, int64_t *hi) {
    *lo = h - k + 1 <= 0 ? 0 : (h - k + s) / s;
    int64_t e = h / s;
    *hi = e < O - 1 ? e : O - 1;
}

/* Threads a row, for rows of `cols` items: the least power of two that
 * covers the row, at most the block; returned as its log2, so that a thread
 * finds its row and column with shifts, not divisions. */
static int row_shift(int64_t cols) {
    int l = 0;
    while ((1 << l) < HR_THREADS && ((int64_t)1 << l) < cols) l++;
    return l;
}

/* The planes of a pooling with windows that tile them exactly (stride =
 * kernel, no remainder) stack into one tall image: output row r, which is
 * (c, oh) with r = c*OH + oh, reads input rows r*kh .. r*kh+kh-1. The kernels
 * below walk rows of that image, 1 << lt threads a row, with no division. */
#define ROW_LOOP(r, j, R, cols, lt)                                                                                  \
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> (lt)) + (threadIdx.x >> (lt)); r < (R);                  \
         r += (int64_t)gridDim.x * (blockDim.x >> (lt)))                                                            \
        for (int64_t j = threadIdx.x & ((1 << (lt)) - 1); j < (cols); j += 1 << (lt))

/* 2x2 windows, stride 2, H and W even, x aligned to two values: a thread
 * reads its window as a pair from each of the two rows (a warp reads 64
 * pairs a row) and compares in window_argmax's order with its test, so value
 * and argmax byte match the general kernel bit for bit. R = NC*OH. */
template <typename T> __global__ void k_maxpool2(const T *x, T *y, uint8_t *am, int64_t R, int64_t OW, int lt) {
    typedef hr_vec<T, 2> pair;
    ROW_LOOP(r, j, R, OW, lt) {
        pair pa = ((const pair *)(x + 4 * r * OW))[j], pb = ((const pair *)(x + (4 * r + 2) * OW))[j];
        float v[4] = {hr_f(pa.v[0]), hr_f(pa.v[1]), hr_f(pb.v[0]), hr_f(pb.v[1])};
        float bv = v[0]; /* window_argmax's first test, x00 against itself, never moves it */
        int best = 0;
#pragma unroll
        for (int k = 1; k < 4; k++)
            if (pool_beats(v[k], bv)) bv = v[k], best = k;
        y[r * OW + j] = hr_to<T>(bv); /* exact: bv is a value of T */
        if (am) am[r * OW + j] = (uint8_t)best;
    }
}

/* am (may be NULL): the max's offset in its window, i*kw + j (training) */
template <typename T>
__global__ void k_maxpool(const T *x, T *y, uint8_t *am, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                          int kh, int kw, int sh, int sw) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        const T *xc = x + c * H * W;
        int64_t k = window_argmax(xc, W, oh, ow, kh, kw, sh, sw);
        y[i] = xc[k];
        if (am) am[i] = (uint8_t)((k / W - oh * sh) * kw + (k % W - ow * sw));
    }
}

/* Where a window's maximum lies, as its offset a*kw + b in the window: read
 * from the argmax saved by the forward pass, or found again in x (when the
 * backward pass keeps x anyway). The backward kernels take either. */
struct saved_argmax {
    const uint8_t *am;
    __device__ int at(int64_t c, int64_t oh, int64_t ow, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh, int kw,
                      int sh, int sw) const {
        return am[(c * OH + oh) * OW + ow];
    }
};

template <typename T> struct found_argmax {
    const T *x;
    __device__ int at(int64_t c, int64_t oh, int64_t ow, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh, int kw,
                      int sh, int sw) const {
        int64_t k = window_argmax(x + c * H * W, W, oh, ow, kh, kw, sh, sw);
        return (int)((k / W - oh * sh) * kw + (k % W - ow * sw));
    }
};

/* Each input element gathers from the windows that hold it, in (oh, ow)
 * order, as the CPU adds them. */
template <typename T, class Argmax>
__global__ void k_maxpool_bwd(Argmax src, const T *dy, T *dx, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                              int kh, int kw, int sh, int sw, bool acc) {
    int64_t n = NC * H * W;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (H * W), k = i - c * H * W, h = k / W, w = k - h * W;
        const T *gc = dy + c * OH * OW;
        float v = acc ? hr_f(dx[i]) : 0.0f;
        int64_t oh0, oh1, ow0, ow1;
        window_range(h, kh, sh, OH, &oh0, &oh1);
        window_range(w, kw, sw, OW, &ow0, &ow1);
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if (src.at(c, oh, ow, H, W, OH, OW, kh, kw, sh, sw) == (h - oh * sh) * kw + (w - ow * sw))
                    v += hr_f(gc[oh * OW + ow]);
        dx[i] = hr_to<T>(v);
    }
}

/* Windows that tile the plane exactly (stride = kernel, no remainder): one
 * thread a window writes the whole window of dx, with the same arithmetic per
 * element as k_maxpool_bwd (each element lies in exactly one window). */
template <typename T, class Argmax>
__global__ void k_maxpool_bwd_tiled(Argmax src, const T *dy, T *dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                                    int64_t OW, int kh, int kw, bool acc) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        T *dc = dx + c * H * W;
        int best = src.at(c, oh, ow, H, W, OH, OW, kh, kw, kh, kw);
        float g = hr_f(dy[i]);
        for (int a = 0; a < kh; a++)
            for (int b = 0; b < kw; b++) {
                int64_t k = (oh * kh + a) * W + ow * kw + b;
                float v = acc ? hr_f(dc[k]) : 0.0f;
                if (a * kw + b == best) v += g;
                dc[k] = hr_to<T>(v);
            }
    }
}

/* Tiled windows kw = 2 wide, dx aligned to two values: one thread a window,
 * as above, but it writes each of its kh rows as one pair, so a warp's store
 * fills 64 contiguous pairs (above, each scalar store fills every other
 * value of its span), and the thread finds its window with shifts. The
 * stacked image is passed to the Argmax as plane c = 0 with r as oh (H =
 * R*kh, OH = R): the same argmax byte or the same x window. Per element the
 * arithmetic is k_maxpool_bwd_tiled's: v = acc ? dx : 0, then v += g on the
 * match. R = NC*OH. */
template <typename T, class Argmax>
__global__ void k_maxpool_bwd_w2(Argmax src, const T *dy, T *dx, int64_t R, int64_t OW, int kh, bool acc, int lt) {
    typedef hr_vec<T, 2> pair;
    int64_t W = 2 * OW;
    ROW_LOOP(r, j, R, OW, lt) {
        int best = src.at(0, r, j, R * kh, W, R, OW, kh, 2, kh, 2);
        float g = hr_f(dy[r * OW + j]);
        for (int a = 0; a < kh; a++) {
            pair *p = (pair *)(dx + (r * kh + a) * W) + j, o;
            float v0 = 0.0f, v1 = 0.0f;
            if (acc) {
                o = *p;
                v0 = hr_f(o.v[0]), v1 = hr_f(o.v[1]);
            }
            if (2 * a == best) v0 += g;
            if (2 * a + 1 == best) v1 += g;
            o.v[0] = hr_to<T>(v0), o.v[1] = hr_to<T>(v1);
            *p = o;
        }
    }
}

template <typename T, class Argmax>
static cudaError_t maxpool_bwd(cudaStream_t s, Argmax src, const T *dy, T *dx, int64_t NC, int64_t H, int64_t W,
                               int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    bool tiled = kh == sh && kw == sw && OH * kh == H && OW * kw == W;
    if (tiled && kw == 2 && hr_al(dx, 2 * sizeof(T))) {
        int lt = row_shift(OW);
        k_maxpool_bwd_w2<<<hr_grid((NC * OH) << lt), HR_THREADS, 0, s>>>(src, dy, dx, NC * OH, OW, kh, acc, lt);
    } else if (tiled)
        k_maxpool_bwd_tiled<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(src, dy, dx, NC, H, W, OH, OW, kh, kw, acc);
    else
        k_maxpool_bwd<<<hr_grid(NC * H * W), HR_THREADS, 0, s>>>(src, dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, acc);
    return cudaGetLastError();
}

template <typename T>
__global__ void k_avgpool(const T *x, T *y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh, int kw,
                          int sh, int sw, float inv) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        const T *xc = x + c * H * W;
        float s = 0;
        for (int a = 0; a < kh; a++)
            for (int b = 0; b < kw; b++) s += hr_f(xc[(oh * sh + a) * W + ow * sw + b]);
        y[i] = hr_to<T>(s * inv);
    }
}

template <typename T>
__global__ void k_avgpool_bwd(const T *dy, T *dx, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh,
                              int kw, int sh, int sw, float inv, bool acc) {
    int64_t n = NC * H * W;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (H * W), k = i - c * H * W, h = k / W, w = k - h * W;
        const T *gc = dy + c * OH * OW;
        float v = acc ? hr_f(dx[i]) : 0.0f;
        int64_t oh0, oh1, ow0, ow1;
        window_range(h, kh, sh, OH, &oh0, &oh1);
        window_range(w, kw, sw, OW, &ow0, &ow1);
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) v += hr_f(gc[oh * OW + ow]) * inv;
        dx[i] = hr_to<T>(v);
    }
}

/* ---- launchers, one instance per element type (p's pointers hold T) ---- */
template <typename T> static cudaError_t maxpool(cudaStream_t s, const hr_pool_args *p) {
    const T *x = (const T *)p->x;
    T *y = (T *)p->y;
    int64_t NC = p->NC, H = p->H, W = p->W, OH = p->OH, OW = p->OW;
    if (p->kh == 2 && p->kw == 2 && p->sh == 2 && p->sw == 2 && H == 2 * OH && W == 2 * OW && hr_al(x, 2 * sizeof(T))) {
        int lt = row_shift(OW);
        k_maxpool2<T><<<hr_grid((NC * OH) << lt), HR_THREADS, 0, s>>>(x, y, p->argmax_out, NC * OH, OW, lt);
        return cudaGetLastError();
    }
    k_maxpool<T><<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(x, y, p->argmax_out, NC, H, W, OH, OW, p->kh, p->kw,
                                                               p->sh, p->sw);
    return cudaGetLastError();
}

/* From the window offsets the forward kept, else from x found again. */
template <typename T> static cudaError_t maxpool_bwd_of(cudaStream_t s, const hr_pool_args *p) {
    const T *dy = (const T *)p->dy;
    T *dx = (T *)p->dx;
    if (p->argmax)
        return maxpool_bwd(s, saved_argmax{p->argmax}, dy, dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh,
                           p->sw, p->acc);
    return maxpool_bwd(s, found_argmax<T>{(const T *)p->x}, dy, dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw,
                       p->sh, p->sw, p->acc);
}

template <typename T> static cudaError_t avgpool(cudaStream_t s, const hr_pool_args *p) {
    float inv = 1.0f / (float)(p->kh * p->kw);
    k_avgpool<T><<<hr_grid(p->NC * p->OH * p->OW), HR_THREADS, 0, s>>>(
        (const T *)p->x, (T *)p->y, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, inv);
    return cudaGetLastError();
}

template <typename T> static cudaError_t avgpool_bwd(cudaStream_t s, const hr_pool_args *p) {
    float inv = 1.0f / (float)(p->kh * p->kw);
    k_avgpool_bwd<T><<<hr_grid(p->NC * p->H * p->W), HR_THREADS, 0, s>>>(
        (const T *)p->dy, (T *)p->dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, inv, p->acc);
    return cudaGetLastError();
}

/* ---- the kernel entries: NC, H, W the big side (x or dx), OH, OW the pooled one */
extern "C" {

HR_CUDA_TAKES_HALF(maxpool)
HR_CUDA_TAKES_HALF(maxpool_bwd)
HR_CUDA_TAKES_HALF(avgpool)
HR_CUDA_TAKES_HALF(avgpool_bwd)

hr_status hr_cuda_maxpool(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, maxpool, ((hr_cuda *)ctx)->stream, &a->pool));
    return HR_OK;
}

hr_status hr_cuda_maxpool_bwd(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, maxpool_bwd_of, ((hr_cuda *)ctx)->stream, &a->pool));
    return HR_OK;
}

hr_status hr_cuda_avgpool(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, avgpool, ((hr_cuda *)ctx)->stream, &a->pool));
    return HR_OK;
}

hr_status hr_cuda_avgpool_bwd(void *ctx, const hr_kargs *a) {
    HR_CU(HR_DT_CALL(a->dt, avgpool_bwd, ((hr_cuda *)ctx)->stream, &a->pool));
    return HR_OK;
}

} /* extern "C" */
