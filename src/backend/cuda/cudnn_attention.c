/* cudnn_attention.c — causal attention on BF16/F16 q, k, v through cuDNN's
 * fused flash attention (its graph API), forward and backward, where cuDNN
 * has an engine for the shape; attention_half.cu's kernels everywhere else.
 *
 * The graphs are the ones cuDNN's fused attention engines recognise (cuDNN's
 * "scaled dot product attention" pattern, as its frontend builds them):
 *
 *   forward:  S = scale Q K^T, masked to -inf above the diagonal (generated
 *             row and column indices, row >= col kept); M = rowmax S;
 *             Z = rowsum exp(S - M); lse = M + log Z (saved, F32); P =
 *             exp(S - M) / Z in the half type; O = P V.
 *   backward: Dsum = rowsum(dO * O) (F32, in the workspace); P = exp(scale
 *             Q K^T - lse) masked; dV = P^T dO; dS = P (dO V^T - Dsum)
 *             scale; dK = dS^T Q; dQ = dS K, summed in F32 in the workspace
 *             (dQacc), then copied out in the half type.
 *
 * Every tensor but q, k, v, y, lse, their gradients and the two F32
 * buffers is virtual: the engine never writes the time x time matrices.
 * q, k and v are read in place from the (N, T, 3C) projection (strides),
 * and dq, dk, dv written in place into its gradient, so nothing is copied.
 *
 * The same lse as attention_half.cu's (natural log, F32, (N, H, T)), so a
 * forward of one kind and a backward of the other agree (inference keeps no
 * lse: the forward writes it to its workspace). What cuDNN does not do is
 * taken by the kernels: attn_pdrop > 0 (cuDNN draws other masks than
 * hr_attn_uniform), a gradient added into dqkv (acc), the backward under
 * HR_CUDNN_ALGO=deterministic (cuDNN sums dQ with atomics), pointers off 16
 * bytes, heads that are not a multiple of 8 channels or wider than 128.
 * HR_CUDNN_ATTENTION=0: the kernels always.
 *
 * Plans are made per shape while planning (the workspace query), since the
 * engine's workspace is part of the plan, and never while a CUDA graph is
 * being captured (the kernels run then); cuDNN compiles these engines at
 * run time (NVRTC) as their plan is made.
 *
 * The backward's F32 dQ sums are 4 N T C bytes: a large batch (fit's, 2,600
 * GPT-2 sequences) would need gigabytes of workspace that the kernels do
 * without. So both directions run on groups of at most HR_SDPA_GROUP_BYTES /
 * (4 T C) sequences (GPT-2: 21), one call a group: the workspace stays under
 * that bound whatever the batch, at one more plan for the last, shorter
 * group. */
#include "backend/cuda/cudnn_load.h"

#include <math.h>

enum { SDPA_FWD = 0, SDPA_BWD = 1 };
#define HR_SDPA_GROUP_BYTES ((int64_t)64 << 20) /* the F32 dQ sums of one call, at most */

/* sequences a call: the whole batch, or groups whose dQ sums fit the bound
 * (HR_CUDNN_ATTENTION_GROUP: at most that many, for tests) */
static int64_t group_of(const hr_cuda *c, const hr_attention_args *p) {
    int64_t per = 4 * p->T * p->C, g = per > 0 ? HR_SDPA_GROUP_BYTES / per : p->N;
    if (c->opt.cudnn_attention_group > 0 && g > c->opt.cudnn_attention_group) g = c->opt.cudnn_attention_group;
    return g < 1 ? 1 : g < p->N ? g : p->N;
}

struct hr_cuda_sdpa {
    int dir;
    hr_dtype dt;
    int64_t N, T, C, H;
    bool det;
    hr_cudnn_op *op;  /* NULL: cuDNN offers nothing (why) */
    char why[160];
    float scale, neginf, one; /* the by-value tensors' values, where the variant pack points */
};

/* tensor ids in the variant packs; virtual tensors take ids from VIRT on */
enum { U_Q = 1, U_K, U_V, U_O, U_LSE, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEGINF, U_ONE, U_DSUM, U_DQACC, VIRT = 100 };

typedef struct {
    hr_cudnn_scope *s;
    int64_t next; /* the next virtual tensor's id */
    int io;       /* cuDNN's half type */
} build;

/* q, k, v and their gradients are 16-byte aligned (checked before a run) */
static hr_cudnn_desc tensor(build *b, int64_t uid, int dt, const int64_t dim[4], const int64_t str[4], unsigned kind) {
    return hr_cudnn_tensor(b->s, uid, dt, dim, str, 16, kind);
}

/* a virtual tensor of dims `dim`, packed (or with strides `str`) */
static hr_cudnn_desc virt(build *b, int dt, const int64_t dim[4], const int64_t *str) {
    int64_t packed[4] = {dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1};
    return tensor(b, b->next++, dt, dim, str ? str : packed, HR_CUDNN_VIRTUAL);
}

static hr_cudnn_desc scalar(build *b, int64_t uid) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(b, uid, HR_CUDNN_DATA_FLOAT, one, one, HR_CUDNN_BY_VALUE);
}

/* y = mode(x, b, t): b, t NULL where the mode takes fewer; axis for GEN_INDEX */
static hr_cudnn_desc pointwise(build *b, int mode, hr_cudnn_desc x, hr_cudnn_desc in2, hr_cudnn_desc in3,
                               hr_cudnn_desc y, int prec, int64_t axis) {
    hr_cudnn_scope *s = b->s;
    hr_cudnn_desc pw = hr_cudnn_make(s, HR_CUDNN_BK_POINTWISE);
    hr_cudnn_set(s, pw, HR_CUDNN_ATTR_POINTWISE_MODE, HR_CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    hr_cudnn_set(s, pw, HR_CUDNN_ATTR_POINTWISE_MATH_PREC, HR_CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (mode == HR_CUDNN_PW_GEN_INDEX)
        hr_cudnn_set(s, pw, HR_CUDNN_ATTR_POINTWISE_AXIS, HR_CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    hr_cudnn_fin(s, pw, "pointwise");
    hr_cudnn_desc op = hr_cudnn_make(s, HR_CUDNN_BK_OP_POINTWISE);
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_POINTWISE_PW_DESCRIPTOR, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
                 "pointwise op");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_POINTWISE_XDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    const int D = HR_CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (in2) hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_POINTWISE_BDESC, D, 1, &in2, "pointwise b");
    if (in3) hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_POINTWISE_TDESC, D, 1, &in3, "pointwise t");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_POINTWISE_YDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    hr_cudnn_fin(s, op, "pointwise operation");
    return op;
}

/* c = a b over the last two dimensions, F32 accumulation */
static hr_cudnn_desc matmul(build *b, hr_cudnn_desc a, hr_cudnn_desc bm, hr_cudnn_desc c) {
    hr_cudnn_scope *s = b->s;
    int comp = HR_CUDNN_DATA_FLOAT;
    hr_cudnn_desc mm = hr_cudnn_make(s, HR_CUDNN_BK_MATMUL);
    hr_cudnn_set(s, mm, HR_CUDNN_ATTR_MATMUL_COMP_TYPE, HR_CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul compute type");
    hr_cudnn_fin(s, mm, "matmul");
    hr_cudnn_desc op = hr_cudnn_make(s, HR_CUDNN_BK_OP_MATMUL);
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_MATMUL_ADESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_MATMUL_BDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm, "matmul b");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_MATMUL_CDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_MATMUL_DESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul op");
    hr_cudnn_fin(s, op, "matmul operation");
    return op;
}

/* y = reduce(x) over the dimensions where y has 1 */
static hr_cudnn_desc reduction(build *b, int mode, hr_cudnn_desc x, hr_cudnn_desc y) {
    hr_cudnn_scope *s = b->s;
    int comp = HR_CUDNN_DATA_FLOAT;
    hr_cudnn_desc rd = hr_cudnn_make(s, HR_CUDNN_BK_REDUCTION);
    hr_cudnn_set(s, rd, HR_CUDNN_ATTR_REDUCTION_OPERATOR, HR_CUDNN_TYPE_REDUCTION_OPERATOR, 1, &mode, "reduction mode");
    hr_cudnn_set(s, rd, HR_CUDNN_ATTR_REDUCTION_COMP_TYPE, HR_CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction type");
    hr_cudnn_fin(s, rd, "reduction");
    hr_cudnn_desc op = hr_cudnn_make(s, HR_CUDNN_BK_OP_REDUCTION);
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_REDUCTION_XDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_REDUCTION_YDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_REDUCTION_DESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction op");
    hr_cudnn_fin(s, op, "reduction operation");
    return op;
}

/* y: x's elements seen with y's dimensions and strides */
static hr_cudnn_desc reshape(build *b, hr_cudnn_desc x, hr_cudnn_desc y) {
    hr_cudnn_scope *s = b->s;
    hr_cudnn_desc op = hr_cudnn_make(s, HR_CUDNN_BK_OP_RESHAPE);
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_RESHAPE_XDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    hr_cudnn_set(s, op, HR_CUDNN_ATTR_OP_RESHAPE_YDESC, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    hr_cudnn_fin(s, op, "reshape operation");
    return op;
}

/* Shapes of one head's tensors, as seen in the (N, T, 3C) projection and
 * the (N, T, C) output: [N, H, T, hs] with the heads hs channels apart. */
typedef struct {
    int64_t qkv[4], qkvT[4], out[4]; /* strides: q (k, v) rows; k^T (v^T); y, dy */
    int64_t bhtd[4], bhdt[4], bhtt[4], bht1[4], lse[4], acc[4];
} shapes;

static shapes shapes_of(const struct hr_cuda_sdpa *e) {
    int64_t N = e->N, T = e->T, C = e->C, H = e->H, hs = C / H;
    shapes z = {
        .qkv = {T * 3 * C, hs, 3 * C, 1}, .qkvT = {T * 3 * C, hs, 1, 3 * C}, .out = {T * C, hs, C, 1},
        .bhtd = {N, H, T, hs}, .bhdt = {N, H, hs, T}, .bhtt = {N, H, T, T}, .bht1 = {N, H, T, 1},
        .lse = {H * T, T, 1, 1}, .acc = {H * T * hs, T * hs, hs, 1},
    };
    return z;
}

/* S masked above the diagonal: row index >= column index kept, -inf else */
static hr_cudnn_desc causal(build *b, hr_cudnn_desc *ops, int *n, hr_cudnn_desc S, const int64_t *bhtt,
                            hr_cudnn_desc neginf) {
    hr_cudnn_desc row = virt(b, HR_CUDNN_DATA_INT32, bhtt, NULL), col = virt(b, HR_CUDNN_DATA_INT32, bhtt, NULL);
    hr_cudnn_desc keep = virt(b, HR_CUDNN_DATA_BOOLEAN, bhtt, NULL), out = virt(b, HR_CUDNN_DATA_FLOAT, bhtt, NULL);
    ops[(*n)++] = pointwise(b, HR_CUDNN_PW_GEN_INDEX, S, NULL, NULL, row, HR_CUDNN_DATA_FLOAT, 2);
    ops[(*n)++] = pointwise(b, HR_CUDNN_PW_GEN_INDEX, S, NULL, NULL, col, HR_CUDNN_DATA_FLOAT, 3);
    ops[(*n)++] = pointwise(b, HR_CUDNN_PW_CMP_GE, row, col, NULL, keep, HR_CUDNN_DATA_BOOLEAN, 0);
    ops[(*n)++] = pointwise(b, HR_CUDNN_PW_BINARY_SELECT, S, neginf, keep, out, HR_CUDNN_DATA_FLOAT, 0);
    return out;
}

static hr_cudnn_desc fwd_graph(build *b, const struct hr_cuda_sdpa *e) {
    shapes z = shapes_of(e);
    const int F = HR_CUDNN_DATA_FLOAT, io = b->io;
    hr_cudnn_desc ops[24];
    int n = 0;
    hr_cudnn_desc Q = tensor(b, U_Q, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc KT = tensor(b, U_K, io, z.bhdt, z.qkvT, 0);
    hr_cudnn_desc V = tensor(b, U_V, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc O = tensor(b, U_O, io, z.bhtd, z.out, 0);
    hr_cudnn_desc L = tensor(b, U_LSE, F, z.bht1, z.lse, 0);
    hr_cudnn_desc scale = scalar(b, U_SCALE), neginf = scalar(b, U_NEGINF);

    hr_cudnn_desc S0 = virt(b, F, z.bhtt, NULL), S1 = virt(b, F, z.bhtt, NULL);
    ops[n++] = matmul(b, Q, KT, S0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, S0, scale, NULL, S1, F, 0);
    hr_cudnn_desc S = causal(b, ops, &n, S1, z.bhtt, neginf);
    hr_cudnn_desc M = virt(b, F, z.bht1, NULL), D = virt(b, F, z.bhtt, NULL), E = virt(b, F, z.bhtt, NULL);
    hr_cudnn_desc Z = virt(b, F, z.bht1, NULL), logZ = virt(b, F, z.bht1, NULL), P = virt(b, io, z.bhtt, NULL);
    ops[n++] = reduction(b, HR_CUDNN_REDUCE_MAX, S, M);
    ops[n++] = pointwise(b, HR_CUDNN_PW_SUB, S, M, NULL, D, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_EXP, D, NULL, NULL, E, F, 0);
    ops[n++] = reduction(b, HR_CUDNN_REDUCE_ADD, E, Z);
    ops[n++] = pointwise(b, HR_CUDNN_PW_LOG, Z, NULL, NULL, logZ, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_ADD, M, logZ, NULL, L, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_DIV, E, Z, NULL, P, F, 0);
    ops[n++] = matmul(b, P, V, O);
    return hr_cudnn_graph_of(b->s, ops, n);
}

static hr_cudnn_desc bwd_graph(build *b, const struct hr_cuda_sdpa *e) {
    shapes z = shapes_of(e);
    const int F = HR_CUDNN_DATA_FLOAT, io = b->io;
    hr_cudnn_desc ops[32];
    int n = 0;
    hr_cudnn_desc Q = tensor(b, U_Q, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc KT = tensor(b, U_K, io, z.bhdt, z.qkvT, 0);
    hr_cudnn_desc VT = tensor(b, U_V, io, z.bhdt, z.qkvT, 0);
    hr_cudnn_desc O = tensor(b, U_O, io, z.bhtd, z.out, 0);
    hr_cudnn_desc dO = tensor(b, U_DO, io, z.bhtd, z.out, 0);
    hr_cudnn_desc L = tensor(b, U_LSE, F, z.bht1, z.lse, 0);
    hr_cudnn_desc dQ = tensor(b, U_DQ, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc dK = tensor(b, U_DK, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc dV = tensor(b, U_DV, io, z.bhtd, z.qkv, 0);
    hr_cudnn_desc Dsum = tensor(b, U_DSUM, F, z.bht1, z.lse, 0);
    hr_cudnn_desc dQacc = tensor(b, U_DQACC, F, z.bhtd, z.acc, 0);
    hr_cudnn_desc scale = scalar(b, U_SCALE), neginf = scalar(b, U_NEGINF), one = scalar(b, U_ONE);

    /* Dsum = rowsum(dO * O) */
    hr_cudnn_desc dOO = virt(b, F, z.bhtd, NULL), rs = virt(b, F, z.bht1, NULL);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, dO, O, NULL, dOO, F, 0);
    ops[n++] = reduction(b, HR_CUDNN_REDUCE_ADD, dOO, rs);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, rs, one, NULL, Dsum, F, 0);
    /* P = exp(scale Q K^T - lse), masked */
    hr_cudnn_desc S0 = virt(b, F, z.bhtt, NULL), S1 = virt(b, F, z.bhtt, NULL), S2 = virt(b, F, z.bhtt, NULL);
    ops[n++] = matmul(b, Q, KT, S0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, S0, scale, NULL, S1, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_SUB, S1, L, NULL, S2, F, 0);
    hr_cudnn_desc S = causal(b, ops, &n, S2, z.bhtt, neginf);
    hr_cudnn_desc P = virt(b, F, z.bhtt, NULL);
    ops[n++] = pointwise(b, HR_CUDNN_PW_EXP, S, NULL, NULL, P, F, 0);
    /* dV = P^T dO */
    int64_t tt_T[4] = {e->H * e->T * e->T, e->T * e->T, 1, e->T};
    hr_cudnn_desc PT = virt(b, io, z.bhtt, tt_T);
    ops[n++] = reshape(b, P, PT);
    ops[n++] = matmul(b, PT, dO, dV);
    /* dS = P (dO V^T - Dsum) scale */
    hr_cudnn_desc dP = virt(b, F, z.bhtt, NULL), u = virt(b, F, z.bhtt, NULL), w = virt(b, F, z.bhtt, NULL),
                  dS = virt(b, F, z.bhtt, NULL);
    ops[n++] = matmul(b, dO, VT, dP);
    ops[n++] = pointwise(b, HR_CUDNN_PW_SUB, dP, Dsum, NULL, u, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, u, P, NULL, w, F, 0);
    ops[n++] = pointwise(b, HR_CUDNN_PW_MUL, w, scale, NULL, dS, F, 0);
    /* dK = dS^T Q */
    hr_cudnn_desc dST = virt(b, io, z.bhtt, tt_T);
    ops[n++] = reshape(b, dS, dST);
    ops[n++] = matmul(b, dST, Q, dK);
    /* dQ = dS K (K seen again as rows), summed in F32, then in the half type */
    hr_cudnn_desc K = virt(b, io, z.bhtd, z.qkv);
    ops[n++] = reshape(b, KT, K);
    ops[n++] = matmul(b, dS, K, dQacc);
    ops[n++] = pointwise(b, HR_CUDNN_PW_IDENTITY, dQacc, NULL, NULL, dQ, F, 0);
    return hr_cudnn_graph_of(b->s, ops, n);
}

static size_t round256(size_t x) { return (x + 255) & ~(size_t)255; }

/* the backward's F32 buffers: Dsum (N H T), then dQacc (N H T hs) */
static size_t bwd_buffers(const struct hr_cuda_sdpa *e) {
    size_t rows = (size_t)(e->N * e->H * e->T);
    return round256(rows * sizeof(float)) + round256(rows * (size_t)(e->C / e->H) * sizeof(float));
}

static bool usable(const hr_cuda *c, const hr_attention_args *p, hr_dtype dt, int dir) {
    int64_t hs = p->H > 0 ? p->C / p->H : 0;
    if (!c->dnn || !c->dnn->G || !c->opt.cudnn_attention || (dt != HR_BF16 && dt != HR_F16)) return false;
    if (p->pdrop > 0 || hs % 8 || hs > 128 || p->C % 8 || p->N * p->H * p->T == 0) return false;
    if (dir == SDPA_FWD) return true;
    /* cuDNN's backward sums dQ with atomics whatever its engine's notes say
     * (two GPT-2 runs part in the loss): not in the deterministic mode */
    return !p->acc && c->opt.cudnn_algo != HR_ALGO_DETERMINISTIC;
}

/* the plan of this shape and scale (the plan holds the scale its variant
 * packs point at), made at the first ask; NULL (the kernels run) when cuDNN
 * has none, or when it would have to be made while a graph is being captured */
static struct hr_cuda_sdpa *plan_of(hr_cuda *c, const hr_attention_args *p, int64_t N, hr_dtype dt, int dir) {
    bool det = c->opt.cudnn_algo == HR_ALGO_DETERMINISTIC;
    for (int i = 0; i < c->nsdpa; i++) {
        struct hr_cuda_sdpa *e = c->sdpa[i];
        if (e->dir == dir && e->dt == dt && e->N == N && e->T == p->T && e->C == p->C && e->H == p->H &&
            e->det == det && e->scale == p->scale)
            return e->op ? e : NULL;
    }
    if (c->capturing) return NULL;
    if (c->nsdpa == c->capsdpa) {
        int cap = c->capsdpa ? 2 * c->capsdpa : 8;
        struct hr_cuda_sdpa **g = hr_realloc(c->sdpa, sizeof *g * (size_t)cap);
        if (!g) {
            hr_error_clear();
            return NULL;
        }
        c->sdpa = g, c->capsdpa = cap;
    }
    struct hr_cuda_sdpa *e = hr_calloc(1, sizeof *e);
    hr_cudnn_scope *s = e ? hr_calloc(1, sizeof *s) : NULL;
    if (!s) {
        hr_free(e);
        hr_error_clear();
        return NULL;
    }
    e->dir = dir, e->dt = dt, e->N = N, e->T = p->T, e->C = p->C, e->H = p->H, e->det = det;
    e->scale = p->scale, e->neginf = -INFINITY, e->one = 1.0f;
    c->sdpa[c->nsdpa++] = e;
    s->G = c->dnn->G;
    build b = {.s = s, .next = VIRT, .io = dt == HR_BF16 ? HR_CUDNN_DATA_BFLOAT16 : HR_CUDNN_DATA_HALF};
    hr_cudnn_desc graph = dir == SDPA_FWD ? fwd_graph(&b, e) : bwd_graph(&b, e);
    unsigned flags = HR_ENGINE_ALLOW_TF32 | HR_ENGINE_ALLOW_COMPILED | HR_ENGINE_FIRST_ONLY |
                     (det ? HR_ENGINE_DETERMINISTIC : 0);
    e->op = hr_cudnn_op_from(c->dnn->G, s, graph, dir, flags, HR_CUDA_CONV_WS_CAP, 1, e->why, sizeof e->why);
    if (c->opt.cuda_verbose) {
        char d[160] = "";
        if (e->op) hr_cudnn_op_describe(e->op, d, sizeof d);
        fprintf(stderr, "cuda: cudnn attention %s N%lld T%lld C%lld H%lld %s: %s\n",
                dir == SDPA_FWD ? "forward" : "backward", (long long)N, (long long)p->T, (long long)p->C,
                (long long)p->H, hr_dtype_name(dt), e->op ? d : e->why);
    }
    return e->op ? e : NULL;
}

/* the forward's lse where the node keeps none (inference): N H T floats */
static size_t fwd_scratch(const struct hr_cuda_sdpa *e, const hr_attention_args *p) {
    return p->lse ? 0 : round256((size_t)(e->N * e->H * e->T) * sizeof(float));
}

/* the workspace of one group's call: the backward's buffers or the
 * forward's scratch lse, then the engine's */
static size_t need_of(const struct hr_cuda_sdpa *e, const hr_attention_args *p) {
    return (e->dir == SDPA_BWD ? bwd_buffers(e) : fwd_scratch(e, p)) + hr_cudnn_op_workspace(e->op);
}

/* The plans of the groups (the full ones', the last one's); false when
 * cuDNN has no plan for either. */
static bool plans_of(hr_cuda *c, const hr_attention_args *p, hr_dtype dt, int dir, struct hr_cuda_sdpa **full,
                     struct hr_cuda_sdpa **last) {
    int64_t g = group_of(c, p), rest = p->N % g;
    *full = plan_of(c, p, g, dt, dir);
    *last = rest && *full ? plan_of(c, p, rest, dt, dir) : *full;
    return *full && *last;
}

size_t hr_cuda_sdpa_workspace(hr_cuda *c, const hr_attention_args *p, hr_dtype dt, bool backward) {
    int dir = backward ? SDPA_BWD : SDPA_FWD;
    struct hr_cuda_sdpa *full, *last;
    if (!usable(c, p, dt, dir) || !plans_of(c, p, dt, dir, &full, &last)) return 0;
    size_t a = need_of(full, p), b = need_of(last, p);
    return a > b ? a : b;
}

static bool aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* one call on sequences [n0, n0 + e->N) */
static hr_status run_group(hr_cuda *c, struct hr_cuda_sdpa *e, const hr_attention_args *p, int64_t n0, void *ws,
                           size_t wsz) {
    size_t el = 2, C = (size_t)p->C, T = (size_t)p->T, H = (size_t)p->H, n = (size_t)n0;
    char *qkv = (char *)p->qkv + n * T * 3 * C * el;
    if (e->dir == SDPA_FWD) {
        size_t scratch = fwd_scratch(e, p);
        int64_t uid[7] = {U_Q, U_K, U_V, U_O, U_LSE, U_SCALE, U_NEGINF};
        void *ptr[7] = {qkv, qkv + C * el, qkv + 2 * C * el, (char *)p->y + n * T * C * el,
                        p->lse ? (void *)(p->lse + n * H * T) : ws, &e->scale, &e->neginf};
        return hr_cudnn_op_exec(c->dnn->G, e->op, 7, uid, ptr, (char *)ws + scratch, wsz - scratch);
    }
    size_t rows = (size_t)(e->N * e->H * e->T), bufs = bwd_buffers(e);
    char *dq = (char *)p->dqkv + n * T * 3 * C * el, *w = (char *)ws;
    void *dsum = w, *acc = w + round256(rows * sizeof(float));
    int64_t uid[14] = {U_Q, U_K, U_V, U_O, U_DO, U_LSE, U_DQ, U_DK, U_DV, U_DSUM, U_DQACC, U_SCALE, U_NEGINF, U_ONE};
    void *ptr[14] = {qkv, qkv + C * el, qkv + 2 * C * el, (char *)p->y_saved + n * T * C * el,
                     (char *)p->dy + n * T * C * el, (void *)(p->lse_saved + n * H * T), dq, dq + C * el,
                     dq + 2 * C * el, dsum, acc, &e->scale, &e->neginf, &e->one};
    return hr_cudnn_op_exec(c->dnn->G, e->op, 14, uid, ptr, w + bufs, wsz - bufs);
}

bool hr_cuda_sdpa_run(hr_cuda *c, const hr_attention_args *p, hr_dtype dt, bool backward, void *ws, size_t wsz,
                      hr_status *st) {
    int dir = backward ? SDPA_BWD : SDPA_FWD;
    *st = HR_OK;
    if (!usable(c, p, dt, dir)) return false;
    const float *lse = backward ? p->lse_saved : p->lse;
    if (!aligned(p->qkv) || !aligned(backward ? p->y_saved : p->y) || (lse && !aligned(lse)) ||
        (backward && (!aligned(p->dy) || !aligned(p->dqkv))) || ((uintptr_t)ws & 255))
        return false;
    struct hr_cuda_sdpa *full, *last;
    if (!plans_of(c, p, dt, dir, &full, &last) || need_of(full, p) > wsz || need_of(last, p) > wsz) return false;
    if (full->N < p->N && (full->N * p->H * p->T) % 4) return false; /* a later group's lse off 16 bytes */
    for (int64_t n0 = 0; n0 < p->N && *st == HR_OK; n0 += full->N)
        *st = run_group(c, p->N - n0 >= full->N ? full : last, p, n0, ws, wsz);
    return true;
}

void hr_cuda_sdpa_free(hr_cuda *c) {
    for (int i = 0; i < c->nsdpa; i++) {
        if (c->sdpa[i]->op) hr_cudnn_op_free(c->dnn->G, c->sdpa[i]->op);
        hr_free(c->sdpa[i]);
    }
    hr_free(c->sdpa);
    c->sdpa = NULL, c->nsdpa = c->capsdpa = 0;
}
