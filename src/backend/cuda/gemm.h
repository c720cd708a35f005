/* gemm.h — one matrix product as cuda_gemm.c (Linear, the head) hands it to
 * gemm_lt.c (cuBLASLt, its algorithm chosen by timing once a shape). */
#ifndef HR_CUDA_GEMM_H
#define HR_CUDA_GEMM_H

#include "backend/cuda/hr_cuda.h"

#include <cublasLt.h>
#include <cublas_v2.h>

/* Operand types of a product: its inputs' (ab) and its output's (ct). */
typedef struct {
    hr_dtype ab, ct;
} gemm_types;

/* C (m, n; ldc, ct) = op(A) (m, k) op(B) (k, n) + beta C (column-major), with
 * epilogue epi, its vector `vec` (the bias added: m values of ct) and matrix
 * `aux` (an activation's input, laid out as C: written forward, read
 * backward); ws: cuBLAS's workspace. */
typedef struct {
    cublasLtEpilogue_t epi;
    gemm_types ty;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    const void *A, *B, *vec, *aux;
    float beta;
    void *C;
    void *ws;
    size_t ws_bytes;
} gemm_call;

cudaDataType_t hr_cuda_blas_type(hr_dtype t);
cublasComputeType_t hr_cuda_compute_type(const hr_cuda *c, hr_dtype ab);

/* The product by cublasGemmEx (epi must be CUBLASLT_EPILOGUE_DEFAULT). */
hr_status hr_cuda_gemm_ex(hr_cuda *c, const gemm_call *g);

/* The product by cuBLASLt with the algorithm chosen for its shape: the
 * heuristic's first, or, where the product is timed (hr_cuda_gemm_timed), the
 * fastest of its candidates and, for a plain product, cublasGemmEx's own
 * choice. *done false: nothing queued, the caller runs the plain form
 * (cublasGemmEx, or the product and a kernel for the epilogue). */
hr_status hr_cuda_lt_product(hr_cuda *c, const gemm_call *g, bool *done);

/* Whether a product of this size and beta is timed (HR_CUDA_GEMM_TIME: the
 * multiply-adds from which products are; the precise and fastest modes, C
 * written whole). */
bool hr_cuda_gemm_timed(const hr_cuda *c, int m, int n, int k, float beta);

#endif
