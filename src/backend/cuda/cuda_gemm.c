/* cuda_gemm.c — Linear on the GPU: cuBLAS products in FP32 (TF32 only when
 * allowed) or, under mixed precision, on BF16/F16 inputs with FP32
 * accumulation (tensor cores); bias through small kernels, long-k products
 * cut along k (split-K). */

/* cuBLAS sees row-major (N, F) matrices as column-major (F, N) ones, so every
 * product below is written transposed.
 *
 * Element types: x, W (the weight's half copy), y, dy, dx are the node's dt;
 * dW is always F32 (cuBLAS writes the half product's FP32 sums), db too (a
 * sum of dy in double). A half y with a bias: the bias is filled into y
 * (rounded to dt, as autocast's cast of it) and the product added with beta
 * 1, so the sum is formed in FP32 and rounded once; split-K's reduction adds
 * the FP32 bias itself. */
#include "backend/cuda/gemm.h"
#include "backend/gpus.h"

#include <limits.h>
#include <string.h>

/* p + k elements of type t */
static const void *at(const void *p, int64_t k, hr_dtype t) {
    return (const char *)p + k * (int64_t)hr_dtype_size(t);
}

/* ---- split-K ------------------------------------------------------------------
 * A product whose output is a few tiles but whose k is long (Linear 8192 -> 10
 * on 64 samples: 2 tiles of 32x32, k = 8192) runs in cuBLAS as a couple of
 * blocks that each walk all of k, while the other SMs idle. Cutting k into
 * `parts` chunks gives tiles * parts blocks: one batched cuBLAS call writes the
 * partial products into the node's scratch, and hrk_splitk_reduce sums them in
 * the order 0..parts-1 (plus bias or beta C). The plan depends only on m, n, k,
 * the SM count and HR_CUDA_SPLITK (c->opt.splitk_min_k: the shortest k split,
 * HR_SPLITK_DEFAULT unless set; 0 turns split-K off), so the planner and the
 * run agree on it and a rerun gives the same bits. */
#define HR_SPLITK_MAX 64        /* partial products, at most */
#define HR_SPLITK_MIN_CHUNK 128 /* terms each partial sums, at least (default threshold) */
#define HR_SPLITK_ALIGN 32      /* chunk lengths are multiples of this: aligned, vector loads */
#define HR_SPLITK_TILE 32       /* tile side used to count the output's blocks */

typedef struct {
    int parts;    /* partial products; 0: a plain product */
    int chunk;    /* terms of k in each of the first `full` partials */
    int full;     /* partials of the batched call; parts - full = 1 when a shorter last chunk remains */
    size_t bytes; /* the partials, rounded up to HR_ALIGN */
} splitk_plan;

/* C (m, n) = op(A) (m, k) op(B) (k, n), k cut when
 *   k >= min_k  and  tiles = ceil(m/32) ceil(n/32) < SMs,
 * into at most want = min(64, ceil(SMs / tiles), k / min_chunk) pieces
 * (tiles * want blocks: one to two waves). Equal pieces when possible: the
 * largest parts in [want/2, want] with k a multiple of 32 parts, chunk = k /
 * parts. Else chunk = ceil(k / want) rounded up to a multiple of 32 and parts =
 * ceil(k / chunk) <= want, the last piece shorter (one more cuBLAS call). */
static splitk_plan splitk_plan_for(const hr_cuda *c, int64_t m, int64_t n, int64_t k) {
    splitk_plan p = {0, 0, 0, 0};
    int64_t min_k = c->opt.splitk_min_k, sms = c->sms;
    if (min_k <= 0 || k < min_k || k > INT_MAX || m <= 0 || n <= 0 || sms <= 0) return p;
    int64_t tiles = ((m + HR_SPLITK_TILE - 1) / HR_SPLITK_TILE) * ((n + HR_SPLITK_TILE - 1) / HR_SPLITK_TILE);
    if (tiles >= sms) return p;
    int64_t min_chunk = HR_SPLITK_MIN_CHUNK; /* lowered with min_k, for tests, to a multiple of 32 */
    if (min_k / 2 < min_chunk) min_chunk = min_k / 2 / HR_SPLITK_ALIGN * HR_SPLITK_ALIGN;
    if (min_chunk < HR_SPLITK_ALIGN) min_chunk = HR_SPLITK_ALIGN;
    int64_t want = (sms + tiles - 1) / tiles;
    if (want > HR_SPLITK_MAX) want = HR_SPLITK_MAX;
    if (want > k / min_chunk) want = k / min_chunk;
    if (want < 2) return p;
    int64_t parts = want, chunk = 0;
    for (; parts >= 2 && 2 * parts >= want; parts--)
        if (k % (HR_SPLITK_ALIGN * parts) == 0) {
            chunk = k / parts;
            break;
        }
    if (!chunk) {
        chunk = (k + want - 1) / want;
        chunk = (chunk + HR_SPLITK_ALIGN - 1) / HR_SPLITK_ALIGN * HR_SPLITK_ALIGN;
        parts = (k + chunk - 1) / chunk;
    }
    if (parts < 2) return p;
    p.parts = (int)parts;
    p.chunk = (int)chunk;
    p.full = (int)(k / chunk);
    p.bytes = hr_align_up((size_t)(parts * m * n) * sizeof(float), HR_ALIGN);
    return p;
}

/* The partials (F32 whatever the inputs) go to `part`, then one kernel
 * writes C in its type. Chunk s of k starts at row s*chunk of op(A)'s columns
 * / op(B)'s rows: an offset of s*chunk elements along the stored matrix's
 * contiguous side when that side is k (A transposed, B not), else s*chunk
 * leading dimensions. */
static hr_status gemm_split(hr_cuda *c, gemm_types ty, const splitk_plan *p, float *part, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                            const float *bias, float beta, void *C, int ldc) {
    float one = 1.0f, zero = 0.0f;
    cudaDataType_t ab = hr_cuda_blas_type(ty.ab);
    cublasComputeType_t ct = hr_cuda_compute_type(c, ty.ab);
    long long sa = ta == CUBLAS_OP_N ? (long long)p->chunk * lda : p->chunk;
    long long sb = tb == CUBLAS_OP_N ? p->chunk : (long long)p->chunk * ldb;
    long long sc = (long long)m * n;
    HR_CUBLAS(cublasGemmStridedBatchedEx(c->blas, ta, tb, m, n, p->chunk, &one, A, ab, lda, sa, B, ab, ldb, sb, &zero,
                                         part, CUDA_R_32F, m, sc, p->full, ct, CUBLAS_GEMM_DEFAULT));
    if (p->parts > p->full) { /* the shorter last chunk, into the last partial */
        int rest = k - p->full * p->chunk;
        HR_CUBLAS(cublasGemmEx(c->blas, ta, tb, m, n, rest, &one, at(A, p->full * sa, ty.ab), ab, lda,
                               at(B, p->full * sb, ty.ab), ab, ldb, &zero, part + p->full * sc, CUDA_R_32F, m, ct,
                               CUBLAS_GEMM_DEFAULT));
    }
    HR_CU(hrk_splitk_reduce(c->stream, part, p->parts, m, n, bias, beta, ty.ct, C, ldc));
    return HR_OK;
}

/* Rows per call: cuBLAS takes int sizes, and a chunk stays under 2^31 elements. */
static int64_t rows_per_call(const hr_cuda *c, int64_t in, int64_t out) {
    int64_t w = in > out ? in : out, r = c->max_elems / (w > 0 ? w : 1);
    return r > 0 ? r : 1;
}

/* The most partial bytes any product of the node needs (0: none splits).
 * The calls over rows have at most two sizes: `step` and the last one. The
 * backward's products are those of the gradients it writes. */
static size_t node_partials(const hr_cuda *c, hr_op op, const hr_linear_args *l) {
    int64_t N = l->N, in = l->in, out = l->out;
    if (N <= 0 || in > INT_MAX || out > INT_MAX) return 0;
    int64_t step = rows_per_call(c, in, out), rows[2] = {N < step ? N : step, N % step};
    size_t most = 0, b;
    for (int i = 0; i < 2; i++) {
        if (rows[i] <= 0) continue;
        if (op == HR_OP_LINEAR) {
            if ((b = splitk_plan_for(c, out, rows[i], in).bytes) > most) most = b;
            continue;
        }
        if (l->dw && (b = splitk_plan_for(c, in, out, rows[i]).bytes) > most) most = b; /* dW */
        if (l->dx && (b = splitk_plan_for(c, in, rows[i], out).bytes) > most) most = b; /* dx */
    }
    return most;
}

/* ---- products with a feature count that is not a multiple of 8 -----------
 * cuBLAS has no fast kernel for a half product one of whose sizes is odd:
 * GPT-2's lm_head (768 -> 50257) took 13.3 ms forward on an H200, 1.7 ms
 * at 50256 (PyTorch eager has the same cliff). Such a Linear (out >=
 * HR_PAD_MIN_OUT, no bias: lm_head) computes with out rounded up to `outp`,
 * a multiple of 8, in the node's scratch: the weight copied into outp rows
 * (the extra ones zero), y's rows written outp wide and copied into y,
 * dy's rows copied into outp-wide ones (the extra columns zero), dW formed
 * outp columns wide (the extra ones come out zero) and copied into dW. The
 * zeros add nothing: the same sums. At most HR_PAD_BYTES of rows at a time. */
#define HR_PAD_MIN_OUT 1024                /* narrower outputs: the plain product (copies cost more) */
#define HR_PAD_BYTES ((size_t)256 << 20) /* the padded rows of y or dy, at most */

static int64_t padded_out(const hr_kargs *a) {
    const hr_linear_args *l = &a->linear;
    bool half = a->dt == HR_BF16 || a->dt == HR_F16;
    if (!half || l->out % 8 == 0 || l->out < HR_PAD_MIN_OUT || (a->op == HR_OP_LINEAR && l->b)) return 0;
    return (l->out + 7) / 8 * 8;
}

/* The padded operands' place in the scratch: the weight (outp, in), rows
 * (pad_rows, outp) of y or dy, and in the backward dW (outp, in) in F32. */
typedef struct {
    int64_t outp, rows;
    size_t w_bytes, rows_bytes, dw_bytes;
} pad_plan;

static pad_plan pad_plan_for(const hr_cuda *c, const hr_kargs *a) {
    pad_plan p = {0};
    const hr_linear_args *l = &a->linear;
    if (!(p.outp = padded_out(a)) || l->N <= 0) return (pad_plan){0};
    int64_t r = (int64_t)(HR_PAD_BYTES / ((size_t)p.outp * 2)), step = rows_per_call(c, l->in, p.outp);
    r = r < step ? r : step;
    r = r < l->N ? r : l->N;
    p.rows = r > 0 ? r : 1;
    p.w_bytes = hr_align_up((size_t)(p.outp * l->in) * 2, HR_ALIGN);
    p.rows_bytes = hr_align_up((size_t)(p.rows * p.outp) * 2, HR_ALIGN);
    if (a->op == HR_OP_LINEAR_BWD && l->dw) p.dw_bytes = hr_align_up((size_t)(p.outp * l->in) * 4, HR_ALIGN);
    return p;
}

/* The bias gradient's partial sums (hrk_channel_sum_ws), in the backward;
 * the bias rounded to a half y's type, in the forward, unless autocast's copy
 * of it comes with the node (b_half). */
static size_t db_part_bytes(const hr_kargs *a) {
    const hr_linear_args *l = &a->linear;
    if (a->op == HR_OP_LINEAR && l->b && !l->b_half && a->dt != HR_F32) return hr_align_up((size_t)l->out * 2, HR_ALIGN);
    if (a->op != HR_OP_LINEAR_BWD || !l->db) return 0;
    return hr_align_up(hr_chan_sum_ws(l->N, l->out, 1), HR_ALIGN);
}

/* Scratch a Linear node needs: cuBLAS's or its split-K partials, the more,
 * the padded operands and the bias gradient's partials. */
static size_t linear_workspace(hr_cuda *c, const hr_kargs *a) {
    size_t part = node_partials(c, a->op, &a->linear);
    pad_plan p = pad_plan_for(c, a);
    return p.w_bytes + p.rows_bytes + p.dw_bytes + db_part_bytes(a) +
           (part > HR_CUDA_CUBLAS_WS ? part : HR_CUDA_CUBLAS_WS);
}

size_t hr_cuda_linear_workspace(hr_cuda *c, const hr_kargs *a) { return linear_workspace(c, a); }
size_t hr_cuda_linear_bwd_workspace(hr_cuda *c, const hr_kargs *a) { return linear_workspace(c, a); }

/* The node's planned scratch is split in two, so that they never overlap:
 * [0, part_bytes) holds the split-K partials, the rest is cuBLAS's (so cuBLAS
 * allocates nothing itself). With no scratch, or one too small for the
 * partials (a plan made without linear_workspace), part_bytes is 0:
 * every product of the node is then a plain one and cuBLAS gets it all. */
typedef struct {
    float *part;
    size_t part_bytes;
    pad_plan pad;      /* outp 0: no padding */
    void *w, *rows;    /* the padded weight and rows (first in the scratch) */
    float *dw;         /* the padded dW (the backward's) */
    void *db_part;     /* the bias gradient's partials (NULL: one pass, hrk_channel_sum), or
                          the forward's bias in a half y's type (NULL: no epilogue bias) */
    void *blas;        /* cuBLAS's workspace, the rest */
    size_t blas_bytes;
} node_scratch;

static hr_status use_workspace(hr_cuda *c, const hr_kargs *a, node_scratch *s) {
    unsigned char *ws = a->ws;
    size_t bytes = ws ? a->ws_bytes : 0, need = ws ? node_partials(c, a->op, &a->linear) : 0;
    memset(s, 0, sizeof *s);
    pad_plan p = ws ? pad_plan_for(c, a) : (pad_plan){0};
    size_t pb = p.w_bytes + p.rows_bytes + p.dw_bytes;
    if (p.outp && pb + need <= bytes) { /* each a multiple of HR_ALIGN */
        s->pad = p;
        s->w = ws;
        s->rows = ws + p.w_bytes;
        s->dw = p.dw_bytes ? (float *)(ws + p.w_bytes + p.rows_bytes) : NULL;
        ws += pb;
        bytes -= pb;
    }
    size_t dbb = ws ? db_part_bytes(a) : 0;
    if (dbb > 0 && dbb + need <= bytes) {
        s->db_part = ws;
        ws += dbb;
        bytes -= dbb;
    }
    if (need > 0 && need <= bytes) { /* need is a multiple of HR_ALIGN: cuBLAS's part stays 256-byte aligned */
        s->part = (float *)ws;
        s->part_bytes = need;
        ws += need;
        bytes -= need;
    }
    s->blas = bytes ? ws : NULL;
    s->blas_bytes = bytes;
    HR_CUBLAS(cublasSetWorkspace(c->blas, bytes ? ws : NULL, bytes));
    return HR_OK;
}

/* The weight (out, in) into outp rows, the extra ones zero; and, for dy,
 * the rows' extra columns zero (the copies of dy leave them so). */
static hr_status pad_operands(hr_cuda *c, const node_scratch *s, const hr_linear_args *l, bool rows_too) {
    size_t w = (size_t)(l->out * l->in) * 2, wp = (size_t)(s->pad.outp * l->in) * 2;
    HR_CU(cudaMemcpyAsync(s->w, l->w, w, cudaMemcpyDeviceToDevice, c->stream));
    HR_CU(cudaMemsetAsync((char *)s->w + w, 0, wp - w, c->stream));
    if (rows_too)
        HR_CU(cudaMemset2DAsync((char *)s->rows + l->out * 2, (size_t)s->pad.outp * 2, 0, (size_t)(s->pad.outp - l->out) * 2,
                                (size_t)s->pad.rows, c->stream));
    return HR_OK;
}

/* The plain product: cuBLASLt where its algorithms are timed (cublasGemmEx's
 * own choice among the candidates), else cublasGemmEx. */
static hr_status gemm(hr_cuda *c, const node_scratch *s, gemm_types ty, cublasOperation_t ta, cublasOperation_t tb,
                      int m, int n, int k, const void *A, int lda, const void *B, int ldb, float beta, void *C,
                      int ldc) {
    gemm_call g = {CUBLASLT_EPILOGUE_DEFAULT, ty, ta, tb, m, n, k, lda, ldb, ldc, A, B, NULL, NULL, beta, C,
                   s->blas, s->blas_bytes};
    if (hr_cuda_gemm_timed(c, m, n, k, beta)) {
        bool done;
        hr_status st = hr_cuda_lt_product(c, &g, &done);
        if (st || done) return st;
    }
    return hr_cuda_gemm_ex(c, &g);
}

/* C = op(A) op(B) + (bias on each row of C's (m, n), or beta C): split-K when
 * the plan says so and the partials were reserved, else the product with the
 * bias in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS: added to the FP32 sums
 * before their one rounding, in C's type as autocast rounds it), else one
 * plain product (the bias first filled into C, which is then C's old value:
 * GPT-2's c_fc took 0.19 ms that way on an H100, where its product alone
 * takes 0.12). */
static hr_status product(hr_cuda *c, const node_scratch *s, gemm_types ty, cublasOperation_t ta, cublasOperation_t tb,
                         int m, int n, int k, const void *A, int lda, const void *B, int ldb, const float *bias,
                         float beta, void *C, int ldc) {
    splitk_plan p = splitk_plan_for(c, m, n, k);
    if (p.parts > 0 && p.bytes <= s->part_bytes)
        return gemm_split(c, ty, &p, s->part, ta, tb, m, n, k, A, lda, B, ldb, bias, beta, C, ldc);
    const void *b_dt = ty.ct == HR_F32 ? (const void *)bias : s->db_part; /* the bias in C's type */
    if (bias && b_dt && ty.ab == ty.ct && ta == CUBLAS_OP_T && tb == CUBLAS_OP_N && beta == 0.0f && !c->opt.no_lt) {
        bool done;
        gemm_call g = {CUBLASLT_EPILOGUE_BIAS, ty, ta, tb, m, n, k, lda, ldb, ldc, A, B, b_dt, NULL, 0.0f, C,
                       s->blas, s->blas_bytes};
        hr_status st = hr_cuda_lt_product(c, &g, &done);
        if (st || done) return st;
    }
    if (bias) { /* C (m, n) with ldc == m: rows of the row-major (n, m) */
        HR_CU(hrk_bias_fill(c->stream, ty.ct, bias, C, n, m, 1));
        beta = 1.0f;
    }
    return gemm(c, s, ty, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
}

/* ---- an activation in the product's epilogue (ops/activation.c) -------------
 * Forward: y^T = act(W x^T + b), pre^T = W x^T + b beside it (the epilogue
 * activation.cu names: act of the F32 sums, both rounded once). Backward:
 * dx^T = act'(pre^T) (W dy^T). Where cuBLASLt has no such kernel (or split-K
 * would take the product, rows not a multiple of 8 wide, HR_CUDA_LT=0), the
 * product and then the activation's kernel, as the two nodes would. */
static hr_status act_rows(hr_cuda *c, hr_dtype dt, const hr_linear_args *l, bool backward, const void *pre, void *io,
                          void *y, int64_t n) {
    hr_kargs g = hr_linear_act_kargs(l, backward, dt, pre, io, y, n);
    return backward ? hr_cuda_act_bwd(c, &g) : hr_cuda_act(c, &g);
}

/* C (m, n) = the product with the activation's epilogue, aux = pre (ld m);
 * *done false: nothing queued. */
static hr_status act_product(hr_cuda *c, const node_scratch *s, gemm_types ty, const hr_linear_args *l, bool backward,
                             int m, int n, int k, const void *A, int lda, const void *B, int ldb, const void *bias,
                             const void *pre, void *C, bool *done) {
    *done = false;
    splitk_plan p = splitk_plan_for(c, m, n, k);
    int epi;
    if (c->opt.no_lt || m % 8 || (p.parts > 0 && p.bytes <= s->part_bytes) || ((uintptr_t)pre | (uintptr_t)C) % 16 ||
        !hr_cuda_act_epilogue(l->act, l->act_approx, backward, bias != NULL, &epi))
        return HR_OK;
    gemm_call g = {(cublasLtEpilogue_t)epi, ty, backward ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, lda, ldb, m,
                   A, B, bias, pre, 0.0f, C, s->blas, s->blas_bytes};
    return hr_cuda_lt_product(c, &g, done);
}

/* y (N,out) = x (N,in) W^T + b: y^T = W x^T, plus b. */
/* Rows [r0, r1) of y; when `pieces`, the input arrives in c's upload pieces
 * and each product waits for the piece that completes its rows. */
static hr_status linear_rows(hr_cuda *c, const hr_kargs *a, bool pieces) {
    const hr_linear_args *l = &a->linear;
    int64_t N = l->N, in = l->in, out = l->out;
    const float *b = l->b;
    hr_dtype dt = a->dt;
    gemm_types ty = {dt, dt};
    if (in > INT_MAX || out > INT_MAX) return hr_error_set(HR_ERR_UNSUPPORTED, "Linear: more than 2^31 features");
    node_scratch s;
    hr_status st = use_workspace(c, a, &s);
    if (st) return st;
    if (s.pad.outp && (st = pad_operands(c, &s, l, false))) return st;
    if (b && l->b_half && dt != HR_F32)
        s.db_part = (void *)l->b_half; /* autocast's copy of the bias */
    else if (b && s.db_part)
        HR_CU(hrk_cast(c->stream, b, HR_F32, s.db_part, dt, out, false));
    int64_t step = rows_per_call(c, in, out);
    int64_t r0 = 0;
    for (int k = 0; k < (pieces ? c->npieces : 1); k++) {
        int64_t r1 = pieces ? c->piece_upto[k] : N;
        if (pieces) {
            if ((st = hr_cuda_stage_upto(c, k)) != HR_OK) return st;
            HR_CU(cudaStreamWaitEvent(c->stream, c->piece_ev[k], 0));
        }
        int64_t st_rows = s.pad.outp ? s.pad.rows : step, outp = s.pad.outp;
        for (int64_t r = r0; r < r1; r += st_rows) {
            int rows = (int)(r1 - r < st_rows ? r1 - r : st_rows);
            void *y = (void *)at(l->y, r * out, dt);
            if (outp) { /* outp rows of the padded weight into the padded rows, then into y's */
                if ((st = product(c, &s, ty, CUBLAS_OP_T, CUBLAS_OP_N, (int)outp, rows, (int)in, s.w, (int)in,
                                  at(l->x, r * in, dt), (int)in, NULL, 0.0f, s.rows, (int)outp)))
                    return st;
                HR_CU(cudaMemcpy2DAsync(y, (size_t)out * 2, s.rows, (size_t)outp * 2, (size_t)out * 2, (size_t)rows,
                                        cudaMemcpyDeviceToDevice, c->stream));
                continue;
            }
            if (l->act) { /* y = act(pre): in the product's epilogue, or after it */
                void *pre = (void *)at(l->pre, r * out, dt);
                const void *b_dt = !b ? NULL : dt == HR_F32 ? (const void *)b : s.db_part;
                bool done = false;
                if ((!b || b_dt) &&
                    (st = act_product(c, &s, ty, l, false, (int)out, rows, (int)in, l->w, (int)in, at(l->x, r * in, dt),
                                      (int)in, b_dt, pre, y, &done)))
                    return st;
                if (!done && ((st = product(c, &s, ty, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, rows, (int)in, l->w, (int)in,
                                            at(l->x, r * in, dt), (int)in, b, 0.0f, pre, (int)out)) ||
                              (st = act_rows(c, dt, l, false, pre, NULL, y, rows * out))))
                    return st;
                continue;
            }
            if ((st = product(c, &s, ty, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, rows, (int)in, l->w, (int)in,
                              at(l->x, r * in, dt), (int)in, b, 0.0f, y, (int)out)))
                return st;
        }
        r0 = r1;
    }
    return HR_OK;
}

HR_CUDA_TAKES_HALF(linear)
HR_CUDA_TAKES_HALF(linear_bwd)

hr_status hr_cuda_linear(void *ctx, const hr_kargs *a) { return linear_rows(ctx, a, false); }

/* The batch's input arriving in pieces: each piece's rows as soon as it is in. */
hr_status hr_cuda_linear_pieces(hr_cuda *c, const hr_kargs *a) {
    if (c->npieces < 1 || c->piece_upto[c->npieces - 1] != a->linear.N) {
        hr_status st = hr_cuda_settle(c);
        return st ? st : linear_rows(c, a, false);
    }
    hr_status st = linear_rows(c, a, true);
    return st ? st : hr_cuda_settle(c);
}

/* dx = dy W (times act'(pre)), dW = dy^T x, db = sum dy, each when wanted. db and each chunk's
 * dW come before its dx: the planner may give dx the bytes of x. (db in dW's
 * product, cuBLASLt's BGRADB epilogue, was tried: GPT-2's c_fc backward took
 * 0.260 ms against 0.249, the step no faster, H200.) */
hr_status hr_cuda_linear_bwd(void *ctx, const hr_kargs *a) {
    hr_cuda *c = ctx;
    const hr_linear_args *l = &a->linear;
    int64_t N = l->N, in = l->in, out = l->out;
    hr_dtype dt = a->dt;
    gemm_types tw = {dt, HR_F32}, tx = {dt, dt}; /* dW in F32, dx in dt */
    if (in > INT_MAX || out > INT_MAX) return hr_error_set(HR_ERR_UNSUPPORTED, "Linear: more than 2^31 features");
    node_scratch s;
    hr_status st = use_workspace(c, a, &s);
    if (st) return st;
    int64_t outp = s.pad.outp, step = outp ? s.pad.rows : rows_per_call(c, in, out), ldy = outp ? outp : out;
    int64_t kout = outp ? outp : out; /* the products' size along the features */
    const void *w = outp ? s.w : l->w;
    float *dw = outp ? s.dw : l->dw;
    if (outp && (st = pad_operands(c, &s, l, true))) return st;
    if (outp && l->dw && l->acc_dw) { /* dW's old value into the padded one, its extra rows zero */
        size_t n = (size_t)(out * in) * 4;
        HR_CU(cudaMemcpyAsync(dw, l->dw, n, cudaMemcpyDeviceToDevice, c->stream));
        HR_CU(cudaMemsetAsync((char *)dw + n, 0, (size_t)(outp * in) * 4 - n, c->stream));
    }
    if (l->db) HR_CU(hrk_channel_sum_ws(c->stream, dt, l->dy, l->db, N, out, 1, l->acc_db, s.db_part));
    for (int64_t r = 0; r < N; r += step) {
        int rows = (int)(N - r < step ? N - r : step);
        const void *dyr = at(l->dy, r * out, dt);
        if (outp) { /* dy's rows into the padded ones */
            HR_CU(cudaMemcpy2DAsync(s.rows, (size_t)outp * 2, dyr, (size_t)out * 2, (size_t)out * 2, (size_t)rows,
                                    cudaMemcpyDeviceToDevice, c->stream));
            dyr = s.rows;
        }
        if (l->dw) { /* dW^T (in, out) = x^T (in, rows) . dy (rows, out) */
            bool add = r > 0 || l->acc_dw;
            if ((st = product(c, &s, tw, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)kout, rows, at(l->x, r * in, dt),
                              (int)in, dyr, (int)ldy, NULL, add ? 1.0f : 0.0f, dw, (int)in)))
                return st;
        }
        if (l->dx) { /* dx^T (in, rows) = W^T-as-stored (in, out) . dy^T (out, rows) */
            void *dxr = (void *)at(l->dx, r * in, dt);
            bool done = false;
            if (l->act && (st = act_product(c, &s, tx, l, true, (int)in, rows, (int)kout, w, (int)in, dyr, (int)ldy,
                                            NULL, at(l->pre, r * in, dt), dxr, &done)))
                return st;
            if (!done && (st = product(c, &s, tx, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, rows, (int)kout, w, (int)in, dyr,
                                        (int)ldy, NULL, l->acc_dx ? 1.0f : 0.0f, dxr, (int)in)))
                return st;
            if (!done && l->act && (st = act_rows(c, dt, l, true, at(l->pre, r * in, dt), dxr, NULL, rows * in)))
                return st;
        }
    }
    if (outp && l->dw) /* the first out rows of the padded dW (in-wide rows: one block) */
        HR_CU(cudaMemcpyAsync(l->dw, dw, (size_t)(out * in) * 4, cudaMemcpyDeviceToDevice, c->stream));
    return HR_OK;
}

/* ---- LinearCrossEntropy: the head's logits a piece of rows at a time -------
 * The scratch: the weight in outp rows (outp = out rounded up to 8, the
 * extra rows zero; none when out is a multiple of 8), the piece (R rows,
 * outp wide, in dt: at most HR_GPU_CE_PIECE_BYTES, or HR_CE_PIECE_MIB), each row's log-sum-exp (R floats)
 * and loss term (N doubles), the split-K partials and cuBLAS's workspace.
 * dW is formed in two products when out is not a multiple of 8: its first
 * out8 = out rounded down to 8 rows (aligned: cuBLAS's fast kernels), then
 * the last few; no padded copy of dW. */
/* The piece: HR_GPU_CE_PIECE_BYTES (backend/gpus.h, which plans made
 * without a GPU count too), 512 MiB of logits (GPT-2 at batch 16: 5,340
 * rows, 4 pieces) took 33.47 ms a step on an H100 against 34.40 with 256 MiB
 * (7 pieces), for 256 MiB more workspace: each piece passes once over the
 * F32 dW (154 MB read and written for GPT-2) and its products are wider; 1
 * GiB gained nothing more (33.44-33.53 ms). */

typedef struct {
    int64_t outp, out8, R;
    size_t w_bytes, rows_bytes, lse_bytes, term_bytes, part_bytes;
} lce_plan;

static lce_plan lce_plan_for(hr_cuda *c, const hr_kargs *a) {
    const hr_linear_ce_args *l = &a->lce;
    lce_plan p = {0};
    size_t es = hr_dtype_size(a->dt);
    p.outp = (l->out + 7) / 8 * 8;
    p.out8 = l->out / 8 * 8;
    size_t piece = c->opt.ce_piece_mib > 0 ? (size_t)c->opt.ce_piece_mib << 20 : HR_GPU_CE_PIECE_BYTES;
    int64_t r = (int64_t)(piece / ((size_t)p.outp * es)), step = rows_per_call(c, l->in, p.outp);
    r = r < step ? r : step;
    r = r < l->N ? r : l->N;
    p.R = r > 0 ? r : 1;
    p.w_bytes = p.outp != l->out ? hr_align_up((size_t)(p.outp * l->in) * es, HR_ALIGN) : 0;
    p.rows_bytes = hr_align_up((size_t)(p.R * p.outp) * es, HR_ALIGN);
    p.lse_bytes = hr_align_up((size_t)p.R * sizeof(float), HR_ALIGN);
    p.term_bytes = hr_align_up((size_t)l->N * sizeof(double), HR_ALIGN);
    int64_t rows[2] = {p.R, l->N % p.R}; /* the pieces have at most two sizes */
    for (int i = 0; i < 2; i++) {
        if (rows[i] <= 0) continue;
        size_t b[4] = {splitk_plan_for(c, p.outp, rows[i], l->in).bytes, splitk_plan_for(c, l->in, p.out8, rows[i]).bytes,
                       splitk_plan_for(c, l->in, l->out - p.out8, rows[i]).bytes,
                       splitk_plan_for(c, l->in, rows[i], p.outp).bytes};
        for (int k = 0; k < 4; k++) p.part_bytes = b[k] > p.part_bytes ? b[k] : p.part_bytes;
    }
    return p;
}

size_t hr_cuda_linear_ce_workspace(hr_cuda *c, const hr_kargs *a) {
    lce_plan p = lce_plan_for(c, a);
    return p.w_bytes + p.rows_bytes + p.lse_bytes + p.term_bytes + p.part_bytes + HR_CUDA_CUBLAS_WS;
}

HR_CUDA_TAKES_HALF(linear_ce)

/* Each piece: its logits (x W^T, outp wide), each row's lse and loss term,
 * the piece turned into dlogits in place (the padding columns zero; one
 * pass over the piece where hrk_ce_rows_grad fits its rows, else two), dW +=
 * dlogits^T x (F32; over pieces in order), then its rows of dx = dlogits W. */
hr_status hr_cuda_linear_ce(void *ctx, const hr_kargs *a) {
    hr_cuda *c = ctx;
    const hr_linear_ce_args *l = &a->lce;
    if (l->in > INT_MAX || l->out > INT_MAX - 8 || l->N > INT_MAX)
        return hr_error_set(HR_ERR_UNSUPPORTED, "LinearCrossEntropy: more than 2^31 rows, features or classes");
    lce_plan p = lce_plan_for(c, a);
    size_t need = hr_cuda_linear_ce_workspace(c, a);
    if (!a->ws || a->ws_bytes < need)
        return hr_error_set(HR_ERR_INTERNAL, "LinearCrossEntropy: %zu bytes of workspace planned, %zu needed",
                            a->ws ? a->ws_bytes : 0, need);
    unsigned char *ws = a->ws;
    const void *w = p.w_bytes ? (const void *)ws : (const void *)l->w;
    ws += p.w_bytes;
    void *rows = ws;
    ws += p.rows_bytes;
    float *lse = (float *)ws;
    ws += p.lse_bytes;
    double *term = (double *)ws;
    ws += p.term_bytes;
    node_scratch s;
    memset(&s, 0, sizeof s);
    s.part = p.part_bytes ? (float *)ws : NULL;
    s.part_bytes = p.part_bytes;
    ws += p.part_bytes;
    s.blas = ws;
    s.blas_bytes = a->ws_bytes - (size_t)(ws - (unsigned char *)a->ws);
    HR_CUBLAS(cublasSetWorkspace(c->blas, s.blas, s.blas_bytes));
    size_t es = hr_dtype_size(a->dt);
    if (p.w_bytes) { /* the weight's rows, then zero rows up to outp */
        size_t wb = (size_t)(l->out * l->in) * es;
        HR_CU(cudaMemcpyAsync(a->ws, l->w, wb, cudaMemcpyDeviceToDevice, c->stream));
        HR_CU(cudaMemsetAsync((unsigned char *)a->ws + wb, 0, (size_t)(p.outp * l->in) * es - wb, c->stream));
    }
    int in = (int)l->in, outp = (int)p.outp, out8 = (int)p.out8, tail = (int)(l->out - p.out8);
    float kk = (float)((double)l->scale / (double)l->N);
    gemm_types tw = {a->dt, HR_F32}, tx = {a->dt, a->dt};
    bool fused = hrk_ce_rows_grad_fits(a->dt, p.outp, l->out, c->smem_optin) && !c->opt.ce_two_pass;
    hr_status st;
    for (int64_t r0 = 0; r0 < l->N; r0 += p.R) {
        int m = (int)(l->N - r0 < p.R ? l->N - r0 : p.R);
        const void *x = at(l->x, r0 * in, a->dt);
        float beta = r0 > 0 ? 1.0f : 0.0f;
        if ((st = product(c, &s, tx, CUBLAS_OP_T, CUBLAS_OP_N, outp, m, in, w, in, x, in, NULL, 0.0f, rows, outp)))
            return st;
        if (fused) {
            HR_CU(hrk_ce_rows_grad(c->stream, a->dt, rows, p.outp, m, l->out, l->labels + r0, term + r0, kk, c->sms));
        } else {
            HR_CU(hrk_ce_rows(c->stream, a->dt, rows, p.outp, m, l->out, l->labels + r0, lse, term + r0));
            HR_CU(hrk_ce_rows_bwd(c->stream, a->dt, rows, p.outp, m, l->out, l->labels + r0, lse, kk));
        }
        if (out8 && (st = product(c, &s, tw, CUBLAS_OP_N, CUBLAS_OP_T, in, out8, m, x, in, rows, outp, NULL, beta,
                                  l->dw, in)))
            return st;
        if (tail && (st = product(c, &s, tw, CUBLAS_OP_N, CUBLAS_OP_T, in, tail, m, x, in, at(rows, out8, a->dt), outp,
                                  NULL, beta, l->dw + (int64_t)out8 * in, in)))
            return st;
        if (l->dx && (st = product(c, &s, tx, CUBLAS_OP_N, CUBLAS_OP_N, in, m, outp, w, in, rows, outp, NULL, 0.0f,
                                   (void *)at(l->dx, r0 * in, a->dt), in)))
            return st;
    }
    HR_CU(hr_finish_launch(c->stream, term, (int)l->N, l->loss, false, (double)l->N));
    return HR_OK;
}
