/* pool.cu — MaxPool2d and AvgPool2d (no padding) on the GPU. The backward
 * passes gather: each input element visits the windows that hold it, in the
 * CPU's (oh, ow) order, so sums match it bit for bit and need no atomics. */
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

template <class Argmax>
static cudaError_t maxpool_bwd(cudaStream_t s, Argmax src, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                               int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    if (kh == sh && kw == sw && OH * kh == H && OW * kw == W)
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

extern "C" {

cudaError_t hrk_maxpool(cudaStream_t s, const float *x, float *y, uint8_t *am, int64_t NC, int64_t H, int64_t W,
                        int64_t OH, int64_t OW, int kh, int kw, int sh, int sw) {
    k_maxpool<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(x, y, am, NC, H, W, OH, OW, kh, kw, sh, sw);
    return cudaGetLastError();
}

cudaError_t hrk_maxpool_bwd_am(cudaStream_t s, const uint8_t *am, const float *dy, float *dx, int64_t NC, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    return maxpool_bwd(s, saved_argmax{am}, dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, acc);
}

cudaError_t hrk_maxpool_bwd(cudaStream_t s, const float *x, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W,
                            int64_t OH, int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    return maxpool_bwd(s, found_argmax{x}, dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, acc);
}

cudaError_t hrk_avgpool(cudaStream_t s, const float *x, float *y, int64_t NC, int64_t H, int64_t W, int64_t OH,
                        int64_t OW, int kh, int kw, int sh, int sw) {
    float inv = 1.0f / (float)(kh * kw);
    k_avgpool<<<hr_grid(NC * OH * OW), HR_THREADS, 0, s>>>(x, y, NC, H, W, OH, OW, kh, kw, sh, sw, inv);
    return cudaGetLastError();
}

cudaError_t hrk_avgpool_bwd(cudaStream_t s, const float *dy, float *dx, int64_t NC, int64_t H, int64_t W, int64_t OH,
                            int64_t OW, int kh, int kw, int sh, int sw, bool acc) {
    float inv = 1.0f / (float)(kh * kw);
    k_avgpool_bwd<<<hr_grid(NC * H * W), HR_THREADS, 0, s>>>(dy, dx, NC, H, W, OH, OW, kh, kw, sh, sw, inv, acc);
    return cudaGetLastError();
}

} /* extern "C" */
