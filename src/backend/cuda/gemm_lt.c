/* gemm_lt.c — FP32 matrix products through cuBLASLt with the algorithm timed
 * once per shape. cublasGemmEx takes cuBLAS's heuristic first choice; for
 * the medium products of a training step (1024 x 2000 x 1000) another of its
 * candidates is often faster. Here the heuristic's first few candidates for
 * a shape (transposes, sizes, leading dimensions, beta, alignment, TF32) are
 * timed on the real buffers at the first call that may overwrite C, and the
 * fastest is kept; calls that add into C take the first candidate untimed.
 * HR_CUDNN_ALGO=deterministic keeps the first candidate everywhere (a rerun
 * then gives the same bits); HR_CUDA_GEMM=blas sends everything to
 * cublasGemmEx. */
#include "backend/cuda/hr_cuda.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define LT_CANDIDATES 8

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, align;
    bool add, tf32;
} lt_key;

typedef struct {
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulHeuristicResult_t cand[LT_CANDIDATES];
    int ncand, pick; /* pick -1: none works, use cublasGemmEx */
    bool timed;
} lt_plan;

typedef struct hr_lt {
    cublasLtHandle_t h;
    lt_plan *plan;
    int n, cap;
    cudaEvent_t ev[2];
    bool off;
} hr_lt;

static int mode(void) { /* 0: timed, 1: first candidate, 2: cublasGemmEx */
    static int m = -1;
    if (m < 0) {
        const char *g = getenv("HR_CUDA_GEMM"), *a = getenv("HR_CUDNN_ALGO");
        m = g && !strcmp(g, "blas") ? 2 : a && !strcmp(a, "deterministic") ? 1 : 0;
    }
    return m;
}

void hr_lt_free(hr_cuda *c) {
    hr_lt *L = c->lt;
    if (!L) return;
    for (int i = 0; i < L->n; i++) {
        lt_plan *p = &L->plan[i];
        if (p->a) cublasLtMatrixLayoutDestroy(p->a);
        if (p->b) cublasLtMatrixLayoutDestroy(p->b);
        if (p->c) cublasLtMatrixLayoutDestroy(p->c);
        if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    }
    for (int i = 0; i < 2; i++)
        if (L->ev[i]) cudaEventDestroy(L->ev[i]);
    if (L->h) cublasLtDestroy(L->h);
    hr_free(L->plan);
    hr_free(L);
    c->lt = NULL;
}

static int align_of(const void *p) {
    uintptr_t v = (uintptr_t)p;
    return (v & 15) == 0 ? 16 : (v & 7) == 0 ? 8 : 4;
}

/* The plan for this shape, made (candidates from the heuristic) at its first
 * use; NULL where cuBLASLt is off or failed (the caller uses cublasGemmEx). */
static lt_plan *plan_for(hr_cuda *c, const lt_key *key, size_t wsz) {
    hr_lt *L = c->lt;
    if (!L) {
        if (!(L = hr_calloc(1, sizeof *L))) return hr_error_clear(), NULL;
        c->lt = L;
        if (cublasLtCreate(&L->h) != CUBLAS_STATUS_SUCCESS || cudaEventCreate(&L->ev[0]) != cudaSuccess ||
            cudaEventCreate(&L->ev[1]) != cudaSuccess) {
            cudaGetLastError();
            L->off = true;
        }
    }
    if (L->off) return NULL;
    for (int i = 0; i < L->n; i++)
        if (!memcmp(&L->plan[i].key, key, sizeof *key)) return &L->plan[i];
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 16;
        lt_plan *np = hr_realloc(L->plan, sizeof *np * (size_t)cap);
        if (!np) return hr_error_clear(), NULL;
        L->plan = np, L->cap = cap;
    }
    lt_plan *p = &L->plan[L->n++];
    memset(p, 0, sizeof *p);
    p->key = *key;
    p->pick = -1;
    cublasOperation_t ta = (cublasOperation_t)key->ta, tb = (cublasOperation_t)key->tb;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = wsz;
    uint32_t al = (uint32_t)key->align;
    bool ok = cublasLtMatmulDescCreate(&p->desc, key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                       CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
              cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, ta == CUBLAS_OP_N ? key->m : key->k,
                                         ta == CUBLAS_OP_N ? key->k : key->m, key->lda) == 0 &&
              cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, tb == CUBLAS_OP_N ? key->k : key->n,
                                         tb == CUBLAS_OP_N ? key->n : key->k, key->ldb) == 0 &&
              cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, key->m, key->n, key->ldc) == 0 &&
              cublasLtMatmulPreferenceCreate(&pref) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al) == 0 &&
              cublasLtMatmulAlgoGetHeuristic(L->h, p->desc, p->a, p->b, p->c, p->c, pref, LT_CANDIDATES, p->cand,
                                             &p->ncand) == CUBLAS_STATUS_SUCCESS;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) p->ncand = 0;
    int keep = 0; /* only candidates the heuristic says work, within the workspace */
    for (int i = 0; i < p->ncand; i++)
        if (p->cand[i].state == CUBLAS_STATUS_SUCCESS && p->cand[i].workspaceSize <= wsz) p->cand[keep++] = p->cand[i];
    p->ncand = keep;
    p->pick = keep > 0 ? 0 : -1;
    p->timed = keep < 2 || mode() == 1;
    return p;
}

static cublasStatus_t run(hr_cuda *c, const lt_plan *p, int i, const float *A, const float *B, float beta, float *C,
                          void *ws, size_t wsz) {
    float one = 1.0f;
    return cublasLtMatmul(c->lt->h, p->desc, &one, A, p->a, B, p->b, &beta, C, p->c, C, p->c, &p->cand[i].algo, ws,
                          wsz, c->stream);
}

/* Times the candidates (a warm-up, then the median of three) and keeps the
 * fastest. C is overwritten: only where the caller writes it afresh after. */
static hr_status time_candidates(hr_cuda *c, lt_plan *p, const float *A, const float *B, float beta, float *C, void *ws,
                                 size_t wsz) {
    hr_lt *L = c->lt;
    p->timed = true;
    float best = -1;
    for (int i = 0; i < p->ncand; i++) {
        if (p->cand[i].workspaceSize > wsz || run(c, p, i, A, B, beta, C, ws, wsz) != CUBLAS_STATUS_SUCCESS) continue;
        float t[3];
        bool ok = true;
        for (int r = 0; r < 3 && ok; r++) {
            HR_CU(cudaEventRecord(L->ev[0], c->stream));
            ok = run(c, p, i, A, B, beta, C, ws, wsz) == CUBLAS_STATUS_SUCCESS;
            HR_CU(cudaEventRecord(L->ev[1], c->stream));
            HR_CU(cudaEventSynchronize(L->ev[1]));
            HR_CU(cudaEventElapsedTime(&t[r], L->ev[0], L->ev[1]));
        }
        if (!ok) continue;
        float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
        float med = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
        if (best < 0 || med < best) best = med, p->pick = i;
    }
    return HR_OK;
}

static lt_plan *plan_of(hr_cuda *c, int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B,
                        int ldb, float beta, float *C, int ldc, size_t wsz) {
    if (mode() == 2 || m <= 0 || n <= 0 || k <= 0) return NULL;
    int al = align_of(A);
    if (align_of(B) < al) al = align_of(B);
    if (align_of(C) < al) al = align_of(C);
    lt_key key;
    memset(&key, 0, sizeof key); /* compared with memcmp: no stray padding bytes */
    key.ta = ta, key.tb = tb, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.align = al, key.add = beta != 0.0f, key.tf32 = c->allow_tf32;
    lt_plan *p = plan_for(c, &key, wsz);
    return p && p->pick >= 0 ? p : NULL;
}

hr_status hr_lt_prepare(hr_cuda *c, int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B,
                        int ldb, float beta, float *C, int ldc, void *ws, size_t wsz) {
    lt_plan *p = plan_of(c, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, wsz);
    return p && !p->timed ? time_candidates(c, p, A, B, beta, C, ws, wsz) : HR_OK;
}

hr_status hr_lt_gemm(hr_cuda *c, int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc, void *ws, size_t wsz, bool fresh, bool *done) {
    *done = false;
    lt_plan *p = plan_of(c, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, wsz);
    if (!p) return HR_OK;
    if (!p->timed && fresh) {
        hr_status st = time_candidates(c, p, A, B, beta, C, ws, wsz);
        if (st) return st;
    }
    if (p->cand[p->pick].workspaceSize > wsz) return HR_OK;
    if (run(c, p, p->pick, A, B, beta, C, ws, wsz) != CUBLAS_STATUS_SUCCESS) return HR_OK; /* cublasGemmEx then */
    *done = true;
    return HR_OK;
}
