/* cuda_gemm.c — Linear on the GPU: matrix products through cuBLAS in FP32
 * (TF32 only when the config allows it), bias through small kernels. cuBLAS
 * sees row-major (N, F) matrices as column-major (F, N) ones, so every
 * product below is written transposed. */
#include "backend/cuda/hr_cuda.h"

#include <cublas_v2.h>
#include <limits.h>

static hr_status gemm(hr_cuda *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    float alpha = 1.0f;
    cublasComputeType_t ct = c->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    HR_CUBLAS(cublasGemmEx(c->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta, C,
                           CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
    return HR_OK;
}

/* The planned scratch of this node, so cuBLAS allocates nothing itself. */
static hr_status use_workspace(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    void *ws = n->ws >= 0 ? ptr[n->ws] : NULL;
    size_t bytes = ws ? (size_t)hr_shape_numel(&g->t[n->ws].shape) : 0;
    HR_CUBLAS(cublasSetWorkspace(c->blas, ws, bytes));
    return HR_OK;
}

/* Rows per call: cuBLAS takes int sizes, and a chunk stays under 2^31 elements. */
static int64_t rows_per_call(const hr_cuda *c, int64_t in, int64_t out) {
    int64_t w = in > out ? in : out, r = c->max_elems / (w > 0 ? w : 1);
    return r > 0 ? r : 1;
}

/* y (N,out) = x (N,in) W^T + b: y^T = W x^T, with y first filled with b. */
hr_status hr_cuda_linear(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    int64_t N = g->t[n->in[0]].shape.d[0], in = n->a.in_f, out = n->a.out_f;
    const float *x = ptr[n->in[0]], *W = ptr[n->in[1]];
    const float *b = n->nin > 2 && n->in[2] >= 0 ? ptr[n->in[2]] : NULL;
    float *y = ptr[n->out[0]];
    if (in > INT_MAX || out > INT_MAX) return hr_error_set(HR_ERR_UNSUPPORTED, "Linear: more than 2^31 features");
    hr_status st = use_workspace(c, g, n, ptr);
    if (st) return st;
    if (b) HR_CU(hrk_bias_fill(c->stream, b, y, N, out, 1));
    int64_t step = rows_per_call(c, in, out);
    for (int64_t r = 0; r < N; r += step) {
        int rows = (int)(N - r < step ? N - r : step);
        if ((st = gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, rows, (int)in, W, (int)in, x + r * in, (int)in,
                       b ? 1.0f : 0.0f, y + r * out, (int)out)))
            return st;
    }
    return HR_OK;
}

/* in {x, W, dy}, out {dx = dy W, dW = dy^T x, db = sum dy}. db and each chunk's
 * dW come before its dx: the planner may give dx the bytes of x. */
hr_status hr_cuda_linear_bwd(hr_cuda *c, const hr_graph *g, const hr_node *n, void *const *ptr) {
    int64_t N = g->t[n->in[0]].shape.d[0], in = n->a.in_f, out = n->a.out_f;
    const float *x = ptr[n->in[0]], *W = ptr[n->in[1]], *dy = ptr[n->in[2]];
    if (in > INT_MAX || out > INT_MAX) return hr_error_set(HR_ERR_UNSUPPORTED, "Linear: more than 2^31 features");
    hr_status st = use_workspace(c, g, n, ptr);
    if (st) return st;
    int64_t step = rows_per_call(c, in, out);
    if (n->out[2] >= 0) HR_CU(hrk_channel_sum(c->stream, dy, ptr[n->out[2]], N, out, 1, n->accum[2]));
    for (int64_t r = 0; r < N; r += step) {
        int rows = (int)(N - r < step ? N - r : step);
        if (n->out[1] >= 0) { /* dW^T (in, out) = x^T (in, rows) . dy (rows, out) */
            float *dW = ptr[n->out[1]];
            bool add = r > 0 || n->accum[1];
            if ((st = gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, rows, x + r * in, (int)in, dy + r * out,
                           (int)out, add ? 1.0f : 0.0f, dW, (int)in)))
                return st;
        }
        if (n->out[0] >= 0) { /* dx^T (in, rows) = W^T-as-stored (in, out) . dy^T (out, rows) */
            float *dx = ptr[n->out[0]];
            if ((st = gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, rows, (int)out, W, (int)in, dy + r * out, (int)out,
                           n->accum[0] ? 1.0f : 0.0f, dx + r * in, (int)in)))
                return st;
        }
    }
    return HR_OK;
}
