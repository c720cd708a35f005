/* gemm_lt.c — matrix products through cuBLASLt, an algorithm a product shape.
 *
 * cuBLASLt's heuristic ranks its candidates by a model of the device; its
 * first is not always the fastest. On an H200 (bench/gemm_probe.c, GPT-2's
 * products at 16,384 rows) the seventh of eight ran c_attn's forward in 0.080
 * ms against the first's 0.093, c_fc's in 0.099 against 0.114, and
 * mlp.c_proj's dx in 0.099 against 0.115; cublasGemmEx's own choice, on the
 * other hand, beat every candidate on the head's dx and dW. So a product of
 * at least HR_CUDA_GEMM_TIME multiply-adds (default 2^30) that writes its
 * output whole (beta 0) is timed once, on its first run outside a graph
 * capture (the first step runs node by node), on the real buffers: each of
 * the heuristic's first LT_CANDS candidates and, for a plain product,
 * cublasGemmEx; the fastest is kept for the backend's life and between runs
 * (choice_cache.c: the candidate's index, -1 for cublasGemmEx, a hash of its
 * algorithm, used only where the heuristic still offers that algorithm
 * there). The deterministic and heuristic modes of HR_CUDNN_ALGO time
 * nothing: the heuristic's first, or cublasGemmEx for a plain product, as
 * smaller products and those that add into C always take. Every candidate
 * accumulates in FP32 (TF32 only where allowed), as cublasGemmEx does.
 *
 * What timing costs besides its milliseconds: each candidate's kernel is
 * loaded into the context when it first runs (CUDA loads modules lazily),
 * memory the plan does not see: about 2 MiB on an H100 (memory_truth.py:
 * a 128-sample model's NVML peak 8.44 MiB over its printed total timed from
 * 2^27 multiply-adds, 6.44 untimed, as every small model). Products below
 * 2^30 (a few microseconds) gain too little to pay it. */
#include "backend/cuda/gemm.h"
#include "core/choices.h"

#include <stdio.h>
#include <string.h>

#define LT_CANDS 8
#define LT_UNCHOSEN (-2)

struct hr_lt_algo {
    int epi, ta, tb, m, n, k, lda, ldb, ldc, align;
    hr_dtype ab, ct;
    size_t ws;
    bool beta0;
    int ncand; /* 0: the heuristic offered none (the plain form then) */
    int pick;  /* the candidate run: -1 cublasGemmEx, LT_UNCHOSEN before timing */
    cublasLtMatmulAlgo_t cand[LT_CANDS];
};

cudaDataType_t hr_cuda_blas_type(hr_dtype t) {
    return t == HR_BF16 ? CUDA_R_16BF : t == HR_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Half inputs: FP32 accumulation (tensor cores take them as they are). */
cublasComputeType_t hr_cuda_compute_type(const hr_cuda *c, hr_dtype ab) {
    if (ab != HR_F32) return CUBLAS_COMPUTE_32F;
    return c->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

hr_status hr_cuda_gemm_ex(hr_cuda *c, const gemm_call *g) {
    float alpha = 1.0f, beta = g->beta;
    cudaDataType_t ab = hr_cuda_blas_type(g->ty.ab);
    HR_CUBLAS(cublasGemmEx(c->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha, g->A, ab, g->lda, g->B, ab, g->ldb, &beta,
                           g->C, hr_cuda_blas_type(g->ty.ct), g->ldc, hr_cuda_compute_type(c, g->ty.ab),
                           CUBLAS_GEMM_DEFAULT));
    return HR_OK;
}

hr_status hr_cuda_gemm_init(hr_cuda *c) {
    cublasLtHandle_t lt;
    HR_CUBLAS(cublasLtCreate(&lt));
    c->lt = lt;
    return HR_OK;
}

void hr_cuda_gemm_free(hr_cuda *c) {
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    c->lt = NULL;
    for (int i = 0; i < 2; i++)
        if (c->lt_ev[i]) cudaEventDestroy(c->lt_ev[i]);
    c->lt_ev[0] = c->lt_ev[1] = NULL;
    hr_free(c->lt_algos);
    c->lt_algos = NULL;
    c->nlt = c->caplt = 0;
}

bool hr_cuda_gemm_timed(const hr_cuda *c, int m, int n, int k, float beta) {
    int64_t least = c->opt.gemm_time_min;
    return least > 0 && beta == 0.0f && !c->opt.no_lt &&
           (c->opt.cudnn_algo == HR_ALGO_PRECISE || c->opt.cudnn_algo == HR_ALGO_FASTEST) &&
           (int64_t)m * n * k >= least;
}

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, y;
} lt_descs;

static void lt_descs_free(lt_descs *d) {
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->y) cublasLtMatrixLayoutDestroy(d->y);
}

static int lt_descs_make(hr_cuda *c, const gemm_call *g, lt_descs *d) {
    int bad = cublasLtMatmulDescCreate(&d->op, hr_cuda_compute_type(c, g->ty.ab), CUDA_R_32F);
    if (!bad) bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta);
    if (!bad) bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb);
    if (!bad) bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epi, sizeof g->epi);
    if (!bad && g->vec)
        bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->vec, sizeof g->vec);
    int64_t aux_ld = g->ldc; /* the activation's input beside C, in C's layout and type */
    if (!bad && g->aux)
        bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux);
    if (!bad && g->aux)
        bad = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cudaDataType_t ab = hr_cuda_blas_type(g->ty.ab);
    bool na = g->ta == CUBLAS_OP_N, nb = g->tb == CUBLAS_OP_N;
    if (!bad) bad = cublasLtMatrixLayoutCreate(&d->a, ab, na ? g->m : g->k, na ? g->k : g->m, g->lda);
    if (!bad) bad = cublasLtMatrixLayoutCreate(&d->b, ab, nb ? g->k : g->n, nb ? g->n : g->k, g->ldb);
    if (!bad) bad = cublasLtMatrixLayoutCreate(&d->y, hr_cuda_blas_type(g->ty.ct), g->m, g->n, g->ldc);
    return bad;
}

/* The largest power of two, at most 256, that every operand's address is a
 * multiple of: the heuristic offers only algorithms that take it. */
static int operand_align(const gemm_call *g) {
    uintptr_t u = (uintptr_t)g->A | (uintptr_t)g->B | (uintptr_t)g->C | (uintptr_t)g->aux | 256;
    return (int)(u & (~u + 1));
}

static bool same_call(const struct hr_lt_algo *q, const gemm_call *g, int align) {
    return q->epi == (int)g->epi && q->ta == (int)g->ta && q->tb == (int)g->tb && q->m == g->m && q->n == g->n &&
           q->k == g->k && q->lda == g->lda && q->ldb == g->ldb && q->ldc == g->ldc && q->ab == g->ty.ab &&
           q->ct == g->ty.ct && q->ws == g->ws_bytes && q->beta0 == (g->beta == 0.0f) && q->align == align;
}

/* The heuristic's candidates for a new entry (none: ncand 0). */
static void ask_heuristic(hr_cuda *c, const gemm_call *g, const lt_descs *d, struct hr_lt_algo *e) {
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t r[LT_CANDS];
    memset(r, 0, sizeof r);
    int got = 0;
    uint32_t al = (uint32_t)e->align;
    size_t ws = g->ws_bytes;
    bool ok = cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                  CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; ok && i < 4; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
    int want = hr_cuda_gemm_timed(c, g->m, g->n, g->k, g->beta) ? LT_CANDS : 1;
    if (ok && cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, d->op, d->a, d->b, d->y, d->y, pref, want, r,
                                             &got) == CUBLAS_STATUS_SUCCESS)
        for (int i = 0; i < got; i++)
            if (r[i].state == CUBLAS_STATUS_SUCCESS) e->cand[e->ncand++] = r[i].algo;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
}

static int lt_run(hr_cuda *c, const gemm_call *g, const lt_descs *d, const cublasLtMatmulAlgo_t *algo) {
    float one = 1.0f, beta = g->beta;
    return (int)cublasLtMatmul((cublasLtHandle_t)c->lt, d->op, &one, g->A, d->a, g->B, d->b, &beta, g->C, d->y, g->C,
                               d->y, algo, g->ws, g->ws_bytes, c->stream);
}

/* ---- timing ------------------------------------------------------------------ */
typedef struct {
    hr_cuda *c;
    const gemm_call *g;
    const lt_descs *d;
    const cublasLtMatmulAlgo_t *algo; /* NULL: cublasGemmEx */
} cand_run;

static int run_cand(void *arg) {
    cand_run *r = arg;
    if (r->algo) return lt_run(r->c, r->g, r->d, r->algo) == 0 ? 0 : -1;
    if (hr_cuda_gemm_ex(r->c, r->g) == HR_OK) return 0;
    hr_error_clear();
    return -1;
}

/* A hash of what the algorithm is (its configuration's attributes, FNV-1a),
 * stable between runs: the opaque struct's unused bytes need not be. */
static int64_t algo_hash(const cublasLtMatmulAlgo_t *a) {
    static const cublasLtMatmulAlgoConfigAttributes_t what[] = {CUBLASLT_ALGO_CONFIG_ID,
                                                                CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                                CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                                CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                                CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                                CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                                CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                                CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                                                CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof what / sizeof what[0]; i++) {
        uint64_t v = 0; /* the attribute's bytes (2 or 4 of them; asked for their size first) */
        size_t need = 0, got = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(a, what[i], NULL, 0, &need) != CUBLAS_STATUS_SUCCESS || need == 0 ||
            need > sizeof v ||
            cublasLtMatmulAlgoConfigGetAttribute(a, what[i], &v, need, &got) != CUBLAS_STATUS_SUCCESS)
            v = ~0ULL;
        for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ULL;
    }
    return (int64_t)(h >> 16); /* 48 bits: core/choices.c reads numbers below 2^59 */
}

static void choice_key(const hr_cuda *c, const struct hr_lt_algo *e, char *key, size_t n) {
    snprintf(key, n, "sms%d epi%d t%d%d m%d n%d k%d ld%d,%d,%d %s %s ws%zu al%d tf32 %d", c->sms, e->epi, e->ta, e->tb,
             e->m, e->n, e->k, e->lda, e->ldb, e->ldc, hr_dtype_name(e->ab), hr_dtype_name(e->ct), e->ws, e->align,
             c->allow_tf32 ? 1 : 0);
}

/* Times every candidate of e on g's buffers (C and aux are written; the real
 * run writes them again) and picks the fastest; kept in the cache. */
static hr_status time_candidates(hr_cuda *c, const gemm_call *g, const lt_descs *d, struct hr_lt_algo *e) {
    for (int i = 0; i < 2; i++)
        if (!c->lt_ev[i]) HR_CU(cudaEventCreate(&c->lt_ev[i]));
    float ms[LT_CANDS + 1], best = -1;
    int first = g->epi == CUBLASLT_EPILOGUE_DEFAULT ? -1 : 0; /* cublasGemmEx: a plain product's candidate */
    for (int j = first; j < e->ncand; j++) {
        cand_run r = {c, g, d, j < 0 ? NULL : &e->cand[j]};
        float t;
        if (!hr_cuda_time_runs(c->stream, c->lt_ev, run_cand, &r, &t)) return HR_ERR_DEVICE;
        ms[j + 1] = t;
        if (t >= 0 && (best < 0 || t < best)) best = t, e->pick = j;
    }
    cudaGetLastError();                          /* a candidate that did not run left its error; it is not picked */
    if (e->pick == LT_UNCHOSEN) e->pick = first; /* none ran: the plain form or the first says why */
    char key[HR_CHOICE_KEY];
    choice_key(c, e, key, sizeof key);
    int64_t v[3] = {e->pick, e->pick >= 0 ? algo_hash(&e->cand[e->pick]) : 0, e->ncand};
    hr_choice_put(c, HR_CHOICE_GEMM, key, v);
    if (c->opt.cuda_verbose) {
        fprintf(stderr, "cuda: product %s (backend %p): candidate %d of", key, (void *)c, e->pick);
        for (int j = first; j < e->ncand; j++) fprintf(stderr, " %d:%.4fms", j, (double)ms[j + 1]);
        fprintf(stderr, "\n");
    }
    return HR_OK;
}

/* An earlier run's choice for e, where its algorithm is still that candidate. */
static bool kept_choice(hr_cuda *c, struct hr_lt_algo *e) {
    char key[HR_CHOICE_KEY];
    choice_key(c, e, key, sizeof key);
    int64_t v[3];
    if (!hr_choice_get(c, HR_CHOICE_GEMM, key, v) || v[2] != e->ncand || v[0] < -1 || v[0] >= e->ncand) return false;
    if (v[0] == -1 ? e->epi != CUBLASLT_EPILOGUE_DEFAULT : algo_hash(&e->cand[v[0]]) != v[1]) return false;
    e->pick = (int)v[0];
    return true;
}

static hr_status untimed_in_capture(void) {
    return hr_error_set(HR_ERR_DEVICE, "a matrix product's algorithms are not timed yet (they are timed on a step run "
                                       "node by node)");
}

/* The entry for g: found, or made with the heuristic's candidates (NULL:
 * no memory to keep one: the plain form). */
static struct hr_lt_algo *entry_for(hr_cuda *c, const gemm_call *g, const lt_descs *d) {
    int align = operand_align(g);
    for (int i = 0; i < c->nlt; i++)
        if (same_call(&c->lt_algos[i], g, align)) return &c->lt_algos[i];
    if (c->nlt == c->caplt) {
        int cap = c->caplt ? 2 * c->caplt : 16;
        struct hr_lt_algo *grown = hr_realloc(c->lt_algos, (size_t)cap * sizeof *grown);
        if (!grown) { /* a choice not kept costs speed only */
            hr_error_clear();
            return NULL;
        }
        c->lt_algos = grown;
        c->caplt = cap;
    }
    struct hr_lt_algo *e = &c->lt_algos[c->nlt++];
    *e = (struct hr_lt_algo){.epi = (int)g->epi,
                             .ta = (int)g->ta,
                             .tb = (int)g->tb,
                             .m = g->m,
                             .n = g->n,
                             .k = g->k,
                             .lda = g->lda,
                             .ldb = g->ldb,
                             .ldc = g->ldc,
                             .align = align,
                             .ab = g->ty.ab,
                             .ct = g->ty.ct,
                             .ws = g->ws_bytes,
                             .beta0 = g->beta == 0.0f,
                             .pick = LT_UNCHOSEN};
    ask_heuristic(c, g, d, e);
    bool plain = g->epi == CUBLASLT_EPILOGUE_DEFAULT;
    if (e->ncand == 0)
        e->pick = -1;
    else if (!hr_cuda_gemm_timed(c, g->m, g->n, g->k, g->beta))
        e->pick = plain ? -1 : 0;
    else
        kept_choice(c, e);
    return e;
}

/* The descriptors are made on every call, a known shape's too (also where
 * its choice is cublasGemmEx): host work of a few microseconds on a step run
 * node by node; a captured step replays the products without it. */
hr_status hr_cuda_lt_product(hr_cuda *c, const gemm_call *g, bool *done) {
    *done = false;
    lt_descs d = {0};
    int bad = lt_descs_make(c, g, &d);
    if (bad) {
        lt_descs_free(&d);
        return hr_cuda_fail(__FILE__, __LINE__, "cublasLt descriptors", hr_cublas_status_str(bad));
    }
    struct hr_lt_algo *e = entry_for(c, g, &d);
    hr_status st = HR_OK;
    if (e && e->pick == LT_UNCHOSEN) st = c->capturing ? untimed_in_capture() : time_candidates(c, g, &d, e);
    if (!st && e && e->pick >= 0) {
        int r = lt_run(c, g, &d, &e->cand[e->pick]);
        if (r) st = hr_cuda_fail(__FILE__, __LINE__, "cublasLtMatmul", hr_cublas_status_str(r));
        *done = r == 0;
    }
    lt_descs_free(&d);
    return st;
}
