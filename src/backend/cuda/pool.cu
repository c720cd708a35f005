/* pool.cu — MaxPool2d and AvgPool2d (no padding) on the GPU, forward and
 * backward, kernels and entries. */

/* The backward passes gather: each input element visits the windows that
 * hold it, in the CPU's (oh, ow) order, so sums match it bit for bit and need
 * no atomics. */
#include "backend/cuda/common.cuh"

/* Index (within the plane) of the window's first maximum; NaN wins, as in PyTorch. */
__device__ __forceinline__ int64_t window_argmax(const float *xc, int64_t W, int64_t oh, int64_t ow, int kh, int kw,
                                                 int sh, int sw) {
    int64_t best = oh * sh * W + ow * sw;
    float bv = xc[best];
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            int64_t k = (oh * sh + i) * W + ow * sw + j;
            float v = xc[k];
            if (v > bv || (v != v && bv == bv)) bv = v, best = k;
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

/* 2x2 windows, stride 2, H and W even, x 8-byte aligned: a thread reads its
 * window as a float2 from each of the two rows (a warp reads 256 contiguous
 * bytes a row) and compares in window_argmax's order with its test, so value
 * and argmax byte match the general kernel bit for bit. R = NC*OH. */
__global__ void k_maxpool2(const float *x, float *y, uint8_t *am, int64_t R, int64_t OW, int lt) {
    ROW_LOOP(r, j, R, OW, lt) {
        float2 a = ((const float2 *)(x + 4 * r * OW))[j], b = ((const float2 *)(x + (4 * r + 2) * OW))[j];
        float bv = a.x; /* window_argmax's first test, x00 against itself, never moves it */
        int best = 0;
        if (a.y > bv || (a.y != a.y && bv == bv)) bv = a.y, best = 1;
        if (b.x > bv || (b.x != b.x && bv == bv)) bv = b.x, best = 2;
        if (b.y > bv || (b.y != b.y && bv == bv)) bv = b.y, best = 3;
        y[r * OW + j] = bv;
        if (am) am[r * OW + j] = (uint8_t)best;
    }
}

/* am (may be NULL): the max's offset in its window, i*kw + j (training) */
__global__ void k_maxpool(const float *x, float *y, uint8_t *am, int64_t NC, int64_t H, int64_t W, int64_t OH,
                          int64_t OW, int kh, int kw, int sh, int sw) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        const float *xc = x + c * H * W;
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

struct found_argmax {
    const float *x;
    __device__ int at(int64_t c, int64_t oh, int64_t ow, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh, int kw,
                      int sh, int sw) const {
        int64_t k = window_argmax(x + c * H * W, W, oh, ow, kh, kw, sh, sw);
        return (int)((k / W - oh * sh) * kw + (k % W - ow * sw));
    }
};

/* Each input element gathers from the windows that hold it, in (oh, ow)
 * order, as the CPU adds them. */
template <class Argmax>
__global__ void k_maxpool_bwd(Argmax src, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                              int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    int64_t n = NC * H * W;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (H * W), k = i - c * H * W, h = k / W, w = k - h * W;
        const float *gc = dy + c * OH * OW;
        float v = acc ? dx[i] : 0.0f;
        int64_t oh0, oh1, ow0, ow1;
        window_range(h, kh, sh, OH, &oh0, &oh1);
        window_range(w, kw, sw, OW, &ow0, &ow1);
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if (src.at(c, oh, ow, H, W, OH, OW, kh, kw, sh, sw) == (h - oh * sh) * kw + (w - ow * sw))
                    v += gc[oh * OW + ow];
        dx[i] = v;
    }
}

/* Windows that tile the plane exactly (stride = kernel, no remainder): one
 * thread a window writes the whole window of dx, with the same arithmetic per
 * element as k_maxpool_bwd (each element lies in exactly one window). */
template <class Argmax>
__global__ void k_maxpool_bwd_tiled(Argmax src, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                                    int64_t OH, int64_t OW, int kh, int kw, bool acc) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        float *dc = dx + c * H * W;
        int best = src.at(c, oh, ow, H, W, OH, OW, kh, kw, kh, kw);
        float g = dy[i];
        for (int a = 0; a < kh; a++)
            for (int b = 0; b < kw; b++) {
                int64_t k = (oh * kh + a) * W + ow * kw + b;
                float v = acc ? dc[k] : 0.0f;
                if (a * kw + b == best) v += g;
                dc[k] = v;
            }
    }
}

/* Tiled windows kw = 2 wide, dx 8-byte aligned: one thread a window, as
 * above, but it writes each of its kh rows as one float2, so a warp's store
 * fills 256 contiguous bytes (above, each scalar store fills every other
 * float of its span), and the thread finds its window with shifts. The
 * stacked image is passed to the Argmax as plane c = 0 with r as oh (H =
 * R*kh, OH = R): the same argmax byte or the same x window. Per element the
 * arithmetic is k_maxpool_bwd_tiled's: v = acc ? dx : 0, then v += g on the
 * match. R = NC*OH. */
template <class Argmax>
__global__ void k_maxpool_bwd_w2(Argmax src, const float *dy, float *dx, int64_t R, int64_t OW, int kh, bool acc,
                                 int lt) {
    int64_t W = 2 * OW;
    ROW_LOOP(r, j, R, OW, lt) {
        int best = src.at(0, r, j, R * kh, W, R, OW, kh, 2, kh, 2);
        float g = dy[r * OW + j];
        for (int a = 0; a < kh; a++) {
            float2 *p = (float2 *)(dx + (r * kh + a) * W) + j;
            float2 v = acc ? *p : make_float2(0.0f, 0.0f);
            if (2 * a == best) v.x += g;
            if (2 * a + 1 == best) v.y += g;
            *p = v;
        }
    }
}

template <class Argmax>
static cudaError_t maxpool_bwd(cudaStream_t s, Argmax src, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                               int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    bool tiled = kh == sh && kw == sw && OH * kh == H && OW * kw == W;
    if (tiled && kw == 2 && ((uintptr_t)dx & 7) == 0) {
        int lt = row_shift(OW);
        k_maxpool_bwd_w2<<<hr_grid((NC * OH) << lt), HR_THREADS, 0, s>>>(src, dy, dx, NC * OH, OW, kh, acc, lt);
    } else if (tiled)
        k_maxpool_bwd_tiled<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(src, dy, dx, NC, H, W, OH, OW, kh, kw, acc);
    else
        k_maxpool_bwd<<<hr_grid(NC * H * W), HR_THREADS, 0, s>>>(src, dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, acc);
    return cudaGetLastError();
}

__global__ void k_avgpool(const float *x, float *y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int kh,
                          int kw, int sh, int sw, float inv) {
    int64_t n = NC * OH * OW;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (OH * OW), r = i - c * OH * OW, oh = r / OW, ow = r - oh * OW;
        const float *xc = x + c * H * W;
        float s = 0;
        for (int a = 0; a < kh; a++)
            for (int b = 0; b < kw; b++) s += xc[(oh * sh + a) * W + ow * sw + b];
        y[i] = s * inv;
    }
}

__global__ void k_avgpool_bwd(const float *dy, float *dx, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                              int kh, int kw, int sh, int sw, float inv, bool acc) {
    int64_t n = NC * H * W;
    HR_GRID_STRIDE(i, n) {
        int64_t c = i / (H * W), k = i - c * H * W, h = k / W, w = k - h * W;
        const float *gc = dy + c * OH * OW;
        float v = acc ? dx[i] : 0.0f;
        int64_t oh0, oh1, ow0, ow1;
        window_range(h, kh, sh, OH, &oh0, &oh1);
        window_range(w, kw, sw, OW, &ow0, &ow1);
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) v += gc[oh * OW + ow] * inv;
        dx[i] = v;
    }
}

static cudaError_t hrk_maxpool(cudaStream_t s, const float *x, float *y, uint8_t *am, int64_t NC, int64_t H, int64_t W,
                               int64_t OH, int64_t OW, int kh, int kw, int sh, int sw) {
    if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && H == 2 * OH && W == 2 * OW && ((uintptr_t)x & 7) == 0) {
        int lt = row_shift(OW);
        k_maxpool2<<<hr_grid((NC * OH) << lt), HR_THREADS, 0, s>>>(x, y, am, NC * OH, OW, lt);
        return cudaGetLastError();
    }
    k_maxpool<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(x, y, am, NC, H, W, OH, OW, kh, kw, sh, sw);
    return cudaGetLastError();
}

static cudaError_t hrk_avgpool(cudaStream_t s, const float *x, float *y, int64_t NC, int64_t H, int64_t W, int64_t OH,
                               int64_t OW, int kh, int kw, int sh, int sw) {
    float inv = 1.0f / (float)(kh * kw);
    k_avgpool<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(x, y, NC, H, W, OH, OW, kh, kw, sh, sw, inv);
    return cudaGetLastError();
}

static cudaError_t hrk_avgpool_bwd(cudaStream_t s, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                                   int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    float inv = 1.0f / (float)(kh * kw);
    k_avgpool_bwd<<<hr_grid(NC * H * W), HR_THREADS, 0, s>>>(dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, inv, acc);
    return cudaGetLastError();
}

/* ---- the kernel entries: NC, H, W the big side (x or dx), OH, OW the pooled one */
extern "C" {

hr_status hr_cuda_maxpool(void *ctx, const hr_kargs *a) {
    const hr_pool_args *p = &a->pool;
    HR_CU(hrk_maxpool(((hr_cuda *)ctx)->stream, p->x, p->y, p->argmax_out, p->NC, p->H, p->W, p->OH, p->OW, p->kh,
                      p->kw, p->sh, p->sw));
    return HR_OK;
}

/* From the window offsets the forward kept, else from x found again. */
hr_status hr_cuda_maxpool_bwd(void *ctx, const hr_kargs *a) {
    const hr_pool_args *p = &a->pool;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (p->argmax)
        HR_CU(maxpool_bwd(s, saved_argmax{p->argmax}, p->dy, p->dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw,
                          p->sh, p->sw, p->acc));
    else
        HR_CU(maxpool_bwd(s, found_argmax{p->x}, p->dy, p->dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh,
                          p->sw, p->acc));
    return HR_OK;
}

hr_status hr_cuda_avgpool(void *ctx, const hr_kargs *a) {
    const hr_pool_args *p = &a->pool;
    HR_CU(hrk_avgpool(((hr_cuda *)ctx)->stream, p->x, p->y, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh,
                      p->sw));
    return HR_OK;
}

hr_status hr_cuda_avgpool_bwd(void *ctx, const hr_kargs *a) {
    const hr_pool_args *p = &a->pool;
    HR_CU(hrk_avgpool_bwd(((hr_cuda *)ctx)->stream, p->dy, p->dx, p->NC, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh,
                          p->sw, p->acc));
    return HR_OK;
}

} /* extern "C" */
