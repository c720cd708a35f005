/* gemm_probe.c — how fast can cuBLAS run a model's products? For each product
 * shape of GPT-2 124M's Linear layers at 16,384 rows (bf16 inputs, FP32
 * accumulation): cublasGemmEx's default choice (what cuda_gemm.c calls) against
 * every candidate cuBLASLt's heuristic offers (up to 16), each timed with
 * events (median of 15 after 3 warm-ups). A diagnostic for choosing how
 * headroom calls cuBLAS, not part of the library.
 *   nvcc -O2 -o gemm_probe bench/gemm_probe.c -lcublas -lcublasLt
 *   ./gemm_probe [rows]                                   (default 16384) */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                                        \
    do {                                                                                                             \
        int e_ = (int)(x);                                                                                           \
        if (e_) {                                                                                                    \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_);                                  \
            exit(1);                                                                                                 \
        }                                                                                                            \
    } while (0)

typedef struct {
    const char *name;
    int ta, tb, m, n, k, lda, ldb, ldc;
    cudaDataType_t ct;
} shape;

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static cudaEvent_t e0, e1;

/* median ms of 15 runs of fn after 3 */
#define TIME(ms, call)                                                                                               \
    do {                                                                                                             \
        float t_[15];                                                                                                \
        for (int i_ = 0; i_ < 3; i_++) call;                                                                         \
        for (int i_ = 0; i_ < 15; i_++) {                                                                            \
            cudaEventRecord(e0, 0);                                                                                  \
            call;                                                                                                    \
            cudaEventRecord(e1, 0);                                                                                  \
            cudaEventSynchronize(e1);                                                                                \
            cudaEventElapsedTime(&t_[i_], e0, e1);                                                               \
        }                                                                                                            \
        qsort(t_, 15, sizeof(float), cmpf);                                                                          \
        ms = t_[7];                                                                                                  \
    } while (0)

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 16384;
    int C = 768, V = 50264;
    shape s[] = {
        /* forward y^T (out, N) = W (T) x^T */
        {"c_attn fwd", 1, 0, 3 * C, N, C, C, C, 3 * C, CUDA_R_16BF},
        {"attn.c_proj fwd", 1, 0, C, N, C, C, C, C, CUDA_R_16BF},
        {"c_fc fwd", 1, 0, 4 * C, N, C, C, C, 4 * C, CUDA_R_16BF},
        {"mlp.c_proj fwd", 1, 0, C, N, 4 * C, 4 * C, 4 * C, C, CUDA_R_16BF},
        {"lm_head fwd", 1, 0, V, N, C, C, C, V, CUDA_R_16BF},
        /* dW^T (in, out) = x^T dy, F32 */
        {"c_attn dW", 0, 1, C, 3 * C, N, C, 3 * C, C, CUDA_R_32F},
        {"attn.c_proj dW", 0, 1, C, C, N, C, C, C, CUDA_R_32F},
        {"c_fc dW", 0, 1, C, 4 * C, N, C, 4 * C, C, CUDA_R_32F},
        {"mlp.c_proj dW", 0, 1, 4 * C, C, N, 4 * C, C, 4 * C, CUDA_R_32F},
        {"lm_head dW", 0, 1, C, V, N, C, V, C, CUDA_R_32F},
        /* dx^T (in, N) = W dy^T */
        {"c_attn dx", 0, 0, C, N, 3 * C, C, 3 * C, C, CUDA_R_16BF},
        {"attn.c_proj dx", 0, 0, C, N, C, C, C, C, CUDA_R_16BF},
        {"c_fc dx", 0, 0, C, N, 4 * C, C, 4 * C, C, CUDA_R_16BF},
        {"mlp.c_proj dx", 0, 0, 4 * C, N, C, 4 * C, C, 4 * C, CUDA_R_16BF},
        {"lm_head dx", 0, 0, C, N, V, C, V, C, CUDA_R_16BF},
        /* lm_head at its odd width, every leading dimension a multiple of 8 */
        {"lm_head fwd odd", 1, 0, V - 7, N, C, C, C, V, CUDA_R_16BF},
        {"lm_head dW odd", 0, 1, C, V - 7, N, C, V, C, CUDA_R_32F},
        {"lm_head dx odd", 0, 0, C, N, V - 7, C, V, C, CUDA_R_16BF},
    };
    size_t big = (size_t)V * N * 2 + ((size_t)64 << 20);
    void *A, *B, *Cm, *ws;
    size_t wsb = (size_t)64 << 20;
    CK(cudaMalloc(&A, big));
    CK(cudaMalloc(&B, big));
    CK(cudaMalloc(&Cm, (size_t)V * N * 4 > big ? big : (size_t)V * N * 4));
    CK(cudaMalloc(&ws, wsb));
    CK(cudaMemset(A, 0, big));
    CK(cudaMemset(B, 0, big));
    cublasHandle_t h;
    cublasLtHandle_t lt;
    CK(cublasCreate(&h));
    CK(cublasLtCreate(&lt));
    CK(cublasSetWorkspace(h, ws, wsb));
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float one = 1, zero = 0;
    double tot_def = 0, tot_best = 0;
    printf("%-16s %8s %9s %9s %7s %s\n", "product", "GFLOP", "GemmEx", "Lt best", "TFLOP/s", "(Lt candidates: ms)");
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        shape *p = &s[i];
        if ((size_t)p->m * p->n * (p->ct == CUDA_R_32F ? 4 : 2) > big) continue;
        double gf = 2.0 * p->m * p->n * p->k / 1e9;
        float def;
        cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        TIME(def, cublasGemmEx(h, ta, tb, p->m, p->n, p->k, &one, A, CUDA_R_16BF, p->lda, B, CUDA_R_16BF, p->ldb,
                               &zero, Cm, p->ct, p->ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        cublasLtMatmulDesc_t op;
        CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb));
        CK(cublasLtMatrixLayoutCreate(&lc, p->ct, p->m, p->n, p->ldc));
        cublasLtMatmulPreference_t pref;
        CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t r[16];
        int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, r, &got));
        float best = 1e9;
        char line[1024];
        int o = 0;
        for (int j = 0; j < got; j++) {
            float ms;
            TIME(ms, cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, Cm, lc, Cm, lc, &r[j].algo, ws, wsb, 0));
            if (ms < best) best = ms;
            if (o < 900) o += snprintf(line + o, sizeof line - o, " %.3f", ms);
        }
        line[o] = 0;
        printf("%-16s %8.1f %9.3f %9.3f %7.0f %s\n", p->name, gf, def, best, gf / (best < def ? best : def),
               line);
        tot_def += def;
        tot_best += best < def ? best : def;
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
    printf("sum: GemmEx %.3f ms, best %.3f ms\n", tot_def, tot_best);
    return 0;
}
