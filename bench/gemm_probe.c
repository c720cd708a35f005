/* gemm_probe.c — how fast can cuBLAS run a model's products? For each product
 * shape of GPT-2 124M's Linear layers at 16,384 rows (bf16 inputs, FP32
 * accumulation): cublasGemmEx's default choice (what cuda_gemm.c calls) against
 * every candidate cuBLASLt's heuristic offers (up to 16), each timed with
 * events (median of 15 after 3 warm-ups). Then the products headroom runs
 * with an epilogue (c_fc's forward with GELU_AUX_BIAS, mlp.c_proj's dx with
 * DGELU or DGELU_BGRAD, dW with BGRADB) beside their plain forms, every
 * candidate timed: what cuBLASLt's first choice costs against its best.
 * A diagnostic for choosing how headroom calls cuBLAS, not part of the library.
 *   nvcc -O2 -o gemm_probe bench/gemm_probe.c -lcublas -lcublasLt
 *   ./gemm_probe [rows [workspace MiB]]                 (default 16384, 64) */
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
    size_t wsb = (size_t)(argc > 2 ? atoi(argv[2]) : 64) << 20; /* cuBLAS's workspace (headroom's: 4 MiB) */
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
    /* the epilogue forms: m, n, k as headroom's Linear calls them (column-major,
     * features first); vec: the bias (m) or its gradient (m for DGELU_BGRAD, n
     * for BGRADB); aux: the activation's input in the output's layout */
    struct {
        const char *name;
        int ta, tb, m, n, k, lda, ldb, ldc;
        cudaDataType_t ct;
        cublasLtEpilogue_t epi;
    } e[] = {
        {"c_fc fwd BIAS", 1, 0, 4 * C, N, C, C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS},
        {"c_fc fwd GELU_AUX_BIAS", 1, 0, 4 * C, N, C, C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
        {"c_fc fwd GELU_BIAS", 1, 0, 4 * C, N, C, C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_BIAS},
        {"mlp.c_proj dx", 0, 0, 4 * C, N, C, 4 * C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT},
        {"mlp.c_proj dx DGELU", 0, 0, 4 * C, N, C, 4 * C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU},
        {"mlp.c_proj dx DGELU_BGRAD", 0, 0, 4 * C, N, C, 4 * C, C, 4 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU_BGRAD},
        {"c_fc dW", 0, 1, C, 4 * C, N, C, 4 * C, C, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT},
        {"c_fc dW BGRADB", 0, 1, C, 4 * C, N, C, 4 * C, C, CUDA_R_32F, CUBLASLT_EPILOGUE_BGRADB},
        {"c_attn dW", 0, 1, C, 3 * C, N, C, 3 * C, C, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT},
        {"c_attn dW BGRADB", 0, 1, C, 3 * C, N, C, 3 * C, C, CUDA_R_32F, CUBLASLT_EPILOGUE_BGRADB},
        {"attn.c_proj fwd BIAS", 1, 0, C, N, C, C, C, C, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS},
        {"c_attn fwd BIAS", 1, 0, 3 * C, N, C, C, C, 3 * C, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS},
        {"mlp.c_proj fwd BIAS", 1, 0, C, N, 4 * C, 4 * C, 4 * C, C, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS},
    };
    void *vec, *aux;
    CK(cudaMalloc(&vec, (size_t)4 * V * 4));
    CK(cudaMalloc(&aux, (size_t)4 * C * N * 2));
    CK(cudaMemset(vec, 0, (size_t)4 * V * 4));
    CK(cudaMemset(aux, 0, (size_t)4 * C * N * 2));
    printf("\n%-28s %8s %9s %9s %5s %s\n", "product + epilogue", "GFLOP", "Lt first", "Lt best", "of", "(candidates: ms)");
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        double gf = 2.0 * e[i].m * e[i].n * e[i].k / 1e9;
        cublasOperation_t ta = e[i].ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = e[i].tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasLtMatmulDesc_t op;
        CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e[i].epi, sizeof e[i].epi));
        if (e[i].epi != CUBLASLT_EPILOGUE_DEFAULT && e[i].epi != CUBLASLT_EPILOGUE_DGELU) {
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec));
            cudaDataType_t vt = e[i].ct; /* a bias in C's type; a bias gradient too */
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vt, sizeof vt));
        }
        if (e[i].epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e[i].epi == CUBLASLT_EPILOGUE_DGELU ||
            e[i].epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
            int64_t ld = e[i].ldc;
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
            CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        }
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, e[i].ta ? e[i].k : e[i].m, e[i].ta ? e[i].m : e[i].k,
                                      e[i].lda));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, e[i].tb ? e[i].n : e[i].k, e[i].tb ? e[i].k : e[i].n,
                                      e[i].ldb));
        CK(cublasLtMatrixLayoutCreate(&lc, e[i].ct, e[i].m, e[i].n, e[i].ldc));
        cublasLtMatmulPreference_t pref;
        CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t r[32];
        int got = 0;
        int hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, r, &got);
        float first = -1, best = 1e9;
        char line[2048];
        int o = 0;
        for (int j = 0; !hs && j < got; j++) {
            float ms;
            int st = 0;
            TIME(ms, st |= cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, Cm, lc, Cm, lc, &r[j].algo, ws, wsb, 0));
            if (cudaGetLastError() || st) ms = -1;
            if (j == 0) first = ms;
            if (ms > 0 && ms < best) best = ms;
            if (o < 1900) o += snprintf(line + o, sizeof line - o, " %.3f", ms);
        }
        line[o] = 0;
        printf("%-28s %8.1f %9.3f %9.3f %5d %s\n", e[i].name, gf, first, got ? best : -1.0f, got, line);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
    return 0;
}
