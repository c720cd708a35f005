/* test_cuda_attention.c — the CUDA backend's causal self-attention (its
 * kernels, and for BF16 and F16 cuDNN's fused attention where cuDNN has an
 * engine: gpu_test.sh runs this test again with HR_CUDNN_ATTENTION=0 and
 * with HR_CUDNN_ATTENTION_GROUP=1, a sequence a cuDNN call),
 * forward and backward, in F32, BF16 and F16, against a float64 reference
 * on the host computed from the same (rounded) inputs, on shapes that cut
 * the kernels' tiles every way: T of 1, 7, 64, 100, 257, head sizes 1 to
 * 256 (padded ones included), several sequences and heads. Also: every
 * output written (the arena is NaN), the same bits on a second run, the
 * inference forward (no log-sum-exp) equal to the training one, and the
 * backward adding into dqkv. Last, the kernels' times at the character GPT's
 * and GPT-2's shapes (printed, not checked). Skips (passing) without a GPU.
 *
 * The bound, for each output element e with its float64 value:
 *     |got - e| <= u_out |e| + c_half u_h A + c_32 u_32 A
 * where A is the sum of the absolute values of the terms whose sum makes e
 * (y_i: sum_j P_ij |v_j|; dv_j: sum_i P_ij |dy_i|; dq and dk: scale sum of
 * |dS_ij| |k_j| or |q_i|, with |dS_ij| <= P_ij (|dy_i . v_j| + |D_i|) and
 * D_i's own error bounded by P_ij |dy_i| . |y_i| added in); u_out is the
 * output's unit roundoff (its one rounding), u_h the half type's (the half
 * kernels round P and dS to it before the products, as FlashAttention does:
 * c_half = 4, for P's or dS's rounding and the products' inputs), u_32 =
 * 2^-24 and c_32 = 2 (T + hs) for the F32 sums. The F32 kernels have no u_h
 * term. fp16 adds its subnormals' absolute error, 2^-25 a rounding: once for
 * the output and once for each P or dS rounded, times Z, the sum of the
 * absolute values of what that P or dS multiplies (y: sum_j |v_j|; dv: sum_i
 * |dy_i|; dq, dk: scale sum of |k_j| or |q_i|). The log-sum-exp (F32
 * always): 1e-5 (1 + |e|). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "check.h"

#define HR_TEST_ARENA_BYTES ((size_t)1 << 30)
#include "device_arena.h"

static uint64_t rng = 0xa77e;
static double frand(double lo, double hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng >> 11) * 0x1p-53;
}

static size_t esize(hr_dtype t) { return t == HR_F32 ? 4 : 2; }
static double unit(hr_dtype t) { return t == HR_BF16 ? 0x1p-8 : t == HR_F16 ? 0x1p-11 : 0x1p-24; }
static const char *tname(hr_dtype t) { return t == HR_BF16 ? "bf16" : t == HR_F16 ? "fp16" : "fp32"; }

/* v rounded to t, as a double; its bits into dst[i] */
static double put(void *dst, int64_t i, hr_dtype t, double v) {
    if (t == HR_F32) {
        float f = (float)v;
        ((float *)dst)[i] = f;
        return f;
    }
    uint16_t b = t == HR_BF16 ? hr_f32_to_bf16((float)v) : hr_f32_to_f16((float)v);
    ((uint16_t *)dst)[i] = b;
    return t == HR_BF16 ? hr_bf16_to_f32(b) : hr_f16_to_f32(b);
}
static double get(const void *src, int64_t i, hr_dtype t) {
    if (t == HR_F32) return ((const float *)src)[i];
    uint16_t b = ((const uint16_t *)src)[i];
    return t == HR_BF16 ? hr_bf16_to_f32(b) : hr_f16_to_f32(b);
}

/* ---- the float64 reference ------------------------------------------------------ */
typedef struct {
    int64_t N, T, C, H;
    float pdrop;                 /* attention dropout: > 0, keep factors from the documented draw */
    double *qkv, *dy;            /* the inputs' values (rounded to the type) */
    double *y, *lse, *dqkv;      /* exact results */
    double *ay, *adqkv;          /* A of each output (see the top) */
    double *zy, *zdqkv;          /* Z of each output */
} ref;

/* the drop decisions' parameters of every case: seed 11, layer 5's stream at step 3, micro-batch from sequence 4 */
#define DROP_SEED 11
#define DROP_STREAM ((5ULL << 32) ^ 3)
#define DROP_FIRST 4
static double keep(const ref *r, int64_t n, int64_t h, int64_t i, int64_t j) {
    if (r->pdrop <= 0) return 1;
    /* docs/golden.md's "Attention's drop draws", written out here again */
    uint64_t key = ((uint64_t)DROP_SEED * 0x100000001B3ULL) ^ (DROP_STREAM * 0x9E3779B97F4A7C15ULL);
    uint64_t blk = ((uint64_t)((DROP_FIRST + n) * r->H + h) << 32) | ((uint64_t)(i >> 16) << 16) | (uint64_t)(j >> 16);
    uint32_t x = (uint32_t)(hr_mix64(key + blk) >> 32) ^ (uint32_t)(((i & 0xffff) << 16) | (j & 0xffff));
    x = (x ^ (x >> 16)) * 0x7feb352dU;
    x = (x ^ (x >> 15)) * 0x846ca68bU;
    x ^= x >> 16;
    return (double)(x >> 8) / 16777216.0 >= r->pdrop ? (double)(1.0f / (1.0f - r->pdrop)) : 0.0;
}

static void reference(ref *r) {
    int64_t N = r->N, T = r->T, C = r->C, H = r->H, hs = C / H, row = 3 * C;
    double *M = malloc(sizeof(double) * (size_t)(T * T));
    double scale = 1 / sqrt((double)hs);
    double *P = malloc(sizeof(double) * (size_t)(T * T)), *dS = malloc(sizeof(double) * (size_t)(T * T));
    double *aS = malloc(sizeof(double) * (size_t)(T * T)), *D = malloc(sizeof(double) * (size_t)T);
    double *aD = malloc(sizeof(double) * (size_t)T);
    memset(r->dqkv, 0, sizeof(double) * (size_t)(N * T * row));
    memset(r->adqkv, 0, sizeof(double) * (size_t)(N * T * row));
    memset(r->zdqkv, 0, sizeof(double) * (size_t)(N * T * row));
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++) {
            const double *base = r->qkv + n * T * row + h * hs;
#define Q(i) (base + (i) * row)
#define K(j) (base + (j) * row + C)
#define V(j) (base + (j) * row + 2 * C)
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < hs; d++) s += Q(i)[d] * K(j)[d];
                    P[i * T + j] = s * scale;
                    if (s * scale > mx) mx = s * scale;
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(P[i * T + j] - mx);
                for (int64_t j = 0; j <= i; j++) P[i * T + j] = exp(P[i * T + j] - mx) / sum, M[i * T + j] = keep(r, n, h, i, j);
                r->lse[(n * H + h) * T + i] = mx + log(sum);
                double *y = r->y + (n * T + i) * C + h * hs, *ay = r->ay + (n * T + i) * C + h * hs;
                double *zy = r->zy + (n * T + i) * C + h * hs;
                const double *g = r->dy + (n * T + i) * C + h * hs;
                D[i] = aD[i] = 0;
                for (int64_t d = 0; d < hs; d++) {
                    y[d] = ay[d] = zy[d] = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        double pm = P[i * T + j] * M[i * T + j];
                        y[d] += pm * V(j)[d], ay[d] += pm * fabs(V(j)[d]), zy[d] += M[i * T + j] * fabs(V(j)[d]);
                    }
                    D[i] += g[d] * y[d];
                    aD[i] += fabs(g[d] * y[d]);
                }
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0, adp = 0;
                    for (int64_t d = 0; d < hs; d++) dp += g[d] * V(j)[d], adp += fabs(g[d] * V(j)[d]);
                    dS[i * T + j] = P[i * T + j] * (dp * M[i * T + j] - D[i]);
                    aS[i * T + j] = P[i * T + j] * (adp * M[i * T + j] + fabs(D[i]) + aD[i]);
                }
            }
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j <= i; j++) {
                    const double *g = r->dy + (n * T + i) * C + h * hs;
                    double *dq = r->dqkv + (n * T + i) * row + h * hs, *dk = r->dqkv + (n * T + j) * row + C + h * hs;
                    double *dv = dk + C, *aq = r->adqkv + (n * T + i) * row + h * hs;
                    double *ak = r->adqkv + (n * T + j) * row + C + h * hs, *av = ak + C;
                    double *zq = r->zdqkv + (n * T + i) * row + h * hs, *zk = r->zdqkv + (n * T + j) * row + C + h * hs;
                    double *zv = zk + C;
                    for (int64_t d = 0; d < hs; d++) {
                        dq[d] += scale * dS[i * T + j] * K(j)[d];
                        aq[d] += scale * aS[i * T + j] * fabs(K(j)[d]);
                        dk[d] += scale * dS[i * T + j] * Q(i)[d];
                        ak[d] += scale * aS[i * T + j] * fabs(Q(i)[d]);
                        dv[d] += P[i * T + j] * M[i * T + j] * g[d];
                        av[d] += P[i * T + j] * M[i * T + j] * fabs(g[d]);
                        zq[d] += scale * fabs(K(j)[d]), zk[d] += scale * fabs(Q(i)[d]), zv[d] += M[i * T + j] * fabs(g[d]);
                    }
                }
#undef Q
#undef K
#undef V
        }
    free(P), free(dS), free(aS), free(D), free(aD), free(M);
}

/* got (type t, n values) against e with its A; returns the worst error / bound */
static double compare(const char *what, const void *got, hr_dtype t, const double *e, const double *A, const double *Z,
                      int64_t n, int64_t T, int64_t hs) {
    double u = unit(t), half = t == HR_F32 ? 0 : 4 * u, c32 = 2.0 * (double)(T + hs) * 0x1p-24, worst = 0;
    double sub = t == HR_F16 ? 0x1p-25 : 0; /* fp16's subnormal spacing, halved */
    int64_t bad = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = get(got, i, t), b = u * fabs(e[i]) + (half + c32) * A[i] + sub * (1 + Z[i]) + 1e-30;
        double q = fabs(g - e[i]) / b;
        if (!(q <= 1)) bad++, at = at < 0 ? i : at;
        if (q > worst || q != q) worst = q != q ? INFINITY : q;
    }
    CHECK(bad == 0, "%s: %lld of %lld values past the bound (first at %lld: %.9g vs %.9g), worst error / bound %.3g", what,
          (long long)bad, (long long)n, (long long)at, at >= 0 ? get(got, at, t) : 0.0, at >= 0 ? e[at] : 0.0, worst);
    return worst;
}

static bool dnn_on;   /* half types may go to cuDNN (HR_CUDNN_ATTENTION unset or not 0) */
static int64_t group; /* HR_CUDNN_ATTENTION_GROUP: sequences a cuDNN call (0: all of these) */
static double worst_of[3]; /* the worst error / bound: fp32, bf16, fp16 */

static int tidx(hr_dtype t) { return t == HR_F32 ? 0 : t == HR_BF16 ? 1 : 2; }

static void one_case(int64_t N, int64_t T, int64_t C, int64_t H, hr_dtype t, float pdrop) {
    char what[200], tag[128];
    snprintf(tag, sizeof tag, "attention %s N%lld T%lld C%lld H%lld (hs %lld)%s", tname(t), (long long)N, (long long)T,
             (long long)C, (long long)H, (long long)(C / H), pdrop > 0 ? " attn_pdrop" : "");
    int64_t nq = N * T * 3 * C, ny = N * T * C, nl = N * H * T;
    size_t es = esize(t);
    ref r = {.N = N, .T = T, .C = C, .H = H, .pdrop = pdrop};
    r.qkv = malloc(sizeof(double) * (size_t)nq), r.dy = malloc(sizeof(double) * (size_t)ny);
    r.y = malloc(sizeof(double) * (size_t)ny), r.lse = malloc(sizeof(double) * (size_t)nl);
    r.dqkv = malloc(sizeof(double) * (size_t)nq), r.ay = malloc(sizeof(double) * (size_t)ny);
    r.adqkv = malloc(sizeof(double) * (size_t)nq);
    r.zy = malloc(sizeof(double) * (size_t)ny), r.zdqkv = malloc(sizeof(double) * (size_t)nq);
    void *hq = malloc(es * (size_t)nq), *hdy = malloc(es * (size_t)ny), *hacc = malloc(es * (size_t)nq);
    void *gy = malloc(es * (size_t)ny), *gy2 = malloc(es * (size_t)ny), *gyi = malloc(es * (size_t)ny);
    void *gd = malloc(es * (size_t)nq), *gd2 = malloc(es * (size_t)nq), *gda = malloc(es * (size_t)nq);
    float *gl = malloc(4 * (size_t)nl), *gl2 = malloc(4 * (size_t)nl);
    double *acc_e = malloc(sizeof(double) * (size_t)nq);
    /* q and k of a spread that makes some rows peaked, others flat */
    for (int64_t i = 0; i < nq; i++) r.qkv[i] = put(hq, i, t, frand(-2, 2));
    for (int64_t i = 0; i < ny; i++) r.dy[i] = put(hdy, i, t, frand(-1, 1));
    reference(&r);

    dused = 0;
    void *dq = dalloc(es * (size_t)nq), *ddy = dalloc(es * (size_t)ny), *dy_ = dalloc(es * (size_t)ny);
    void *dd = dalloc(es * (size_t)nq);
    float *dl = dalloc(4 * (size_t)nl);
    up(dq, hq, es * (size_t)nq), up(ddy, hdy, es * (size_t)ny);
    void *nan = malloc(4 * (size_t)nq);
    memset(nan, 0xff, 4 * (size_t)nq);

    hr_kargs f;
    memset(&f, 0, sizeof f);
    f.op = HR_OP_ATTENTION, f.dt = t;
    f.attn = (hr_attention_args){.qkv = dq, .y = dy_, .lse = dl, .N = N, .T = T, .C = C, .H = H,
                                 .scale = (float)(1 / sqrt((double)(C / H))), .pdrop = pdrop,
                                 .pscale = 1.0f / (1.0f - pdrop), .seed = DROP_SEED, .stream = DROP_STREAM,
                                 .stream_base = 5ULL << 32, .first = DROP_FIRST};
    hr_kargs b = f;
    b.op = HR_OP_ATTENTION_BWD;
    b.attn.y = NULL, b.attn.lse = NULL;
    b.attn.y_saved = dy_, b.attn.lse_saved = dl, b.attn.dy = ddy, b.attn.dqkv = dd;
    /* the kernels' row sums D, or cuDNN's (half types): its F32 row sums and
     * dQ sums, then its engine's own */
    size_t ws = be->workspace_size(be, &b), own = sizeof(float) * (size_t)nl;
    size_t gown = own / (size_t)N * (size_t)(group > 0 && group < N ? group : N); /* one call's rows */
    size_t dnn = ((gown + 255) & ~(size_t)255) + ((gown * (size_t)(C / H) + 255) & ~(size_t)255);
    CHECK(ws == own || (t != HR_F32 && ws >= dnn && ws <= dnn + (64u << 20)),
          "%s: backward workspace %zu bytes, want %zu (the kernels) or %zu + the engine's (cuDNN)", tag, ws, own, dnn);
    b.ws = dalloc(ws), b.ws_bytes = ws;
    size_t fws = be->workspace_size(be, &f);
    CHECK(fws == 0 || (t != HR_F32 && fws <= (64u << 20)), "%s: the forward wants %zu bytes of workspace", tag, fws);
    f.ws = fws ? dalloc(fws) : NULL, f.ws_bytes = fws;
    CHECK(t == HR_F32 || be->takes_half(be, HR_OP_ATTENTION, t), "%s: takes_half says no", tag);

    hr_status st;
    for (int rep = 0; rep < 2; rep++) {
        up(dy_, nan, es * (size_t)ny), up(dl, nan, 4 * (size_t)nl), up(dd, nan, es * (size_t)nq);
        st = be->run(be, &f);
        if (st == HR_OK) st = be->sync(be);
        CHECK(st == HR_OK, "%s forward: %s", tag, hr_last_error());
        if (st) goto out;
        down(rep ? gy2 : gy, dy_, es * (size_t)ny), down(rep ? gl2 : gl, dl, 4 * (size_t)nl);
        st = be->run(be, &b);
        if (st == HR_OK) st = be->sync(be);
        CHECK(st == HR_OK, "%s backward: %s", tag, hr_last_error());
        if (st) goto out;
        down(rep ? gd2 : gd, dd, es * (size_t)nq);
    }
    CHECK(!memcmp(gy, gy2, es * (size_t)ny) && !memcmp(gl, gl2, 4 * (size_t)nl) && !memcmp(gd, gd2, es * (size_t)nq),
          "%s: a second run gave other bits", tag);
    int ti = tidx(t);
    double w;
    snprintf(what, sizeof what, "%s: y", tag);
    w = compare(what, gy, t, r.y, r.ay, r.zy, ny, T, C / H);
    worst_of[ti] = fmax(worst_of[ti], w);
    int64_t badl = 0;
    for (int64_t i = 0; i < nl; i++) badl += !(fabs(gl[i] - r.lse[i]) <= 1e-5 * (1 + fabs(r.lse[i])));
    CHECK(badl == 0, "%s: %lld of %lld log-sum-exps off by more than 1e-5 (1 + |lse|)", tag, (long long)badl,
          (long long)nl);
    /* the backward's reference used the exact y; the kernel reads the rounded one (A covers it) */
    snprintf(what, sizeof what, "%s: dqkv", tag);
    w = compare(what, gd, t, r.dqkv, r.adqkv, r.zdqkv, nq, T, C / H);
    worst_of[ti] = fmax(worst_of[ti], w);

    /* y alone (no log-sum-exp; cuDNN's forward writes it to its workspace):
     * the training forward's bits, the same drops if any */
    hr_kargs fi = f;
    fi.attn.lse = NULL;
    fi.ws_bytes = be->workspace_size(be, &fi);
    CHECK(fi.ws_bytes >= f.ws_bytes && fi.ws_bytes <= f.ws_bytes + ((own + 255) & ~(size_t)255),
          "%s: the inference forward wants %zu bytes of workspace, the training one %zu", tag, fi.ws_bytes, f.ws_bytes);
    fi.ws = fi.ws_bytes ? dalloc(fi.ws_bytes) : NULL;
    up(dy_, nan, es * (size_t)ny);
    st = be->run(be, &fi);
    if (st == HR_OK) st = be->sync(be);
    CHECK(st == HR_OK, "%s inference forward: %s", tag, hr_last_error());
    if (st) goto out;
    down(gyi, dy_, es * (size_t)ny);
    CHECK(!memcmp(gy, gyi, es * (size_t)ny), "%s: the inference forward differs from the training one", tag);

    /* acc: dqkv += the gradient (the sum rounded once), against the gradient
     * the adding backward itself gives on zeros (cuDNN's does not add: the
     * kernels take it, whose gradient may differ from cuDNN's in the last bit) */
    up(dy_, gy, es * (size_t)ny); /* y as saved */
    b.attn.acc = true;
    memset(hacc, 0, es * (size_t)nq);
    up(dd, hacc, es * (size_t)nq);
    st = be->run(be, &b);
    if (st == HR_OK) st = be->sync(be);
    CHECK(st == HR_OK, "%s backward, adding to zero: %s", tag, hr_last_error());
    if (st) goto out;
    down(gd, dd, es * (size_t)nq);
    /* that gradient is the kernels' also where cuDNN made the one above:
     * held to the same float64 bound */
    snprintf(what, sizeof what, "%s: dqkv (adding, onto zeros)", tag);
    worst_of[ti] = fmax(worst_of[ti], compare(what, gd, t, r.dqkv, r.adqkv, r.zdqkv, nq, T, C / H));
    for (int64_t i = 0; i < nq; i++) {
        double p = put(hacc, i, t, frand(-1, 1));
        acc_e[i] = p + get(gd, i, t); /* the kernel's own gradient plus what was there */
    }
    up(dd, hacc, es * (size_t)nq);
    st = be->run(be, &b);
    if (st == HR_OK) st = be->sync(be);
    CHECK(st == HR_OK, "%s backward, adding: %s", tag, hr_last_error());
    if (st) goto out;
    down(gda, dd, es * (size_t)nq);
    int64_t bada = 0;
    /* old + the F32 gradient, rounded once; the gradient read back was itself
     * rounded (half a unit of it) */
    for (int64_t i = 0; i < nq; i++)
        bada += !(fabs(get(gda, i, t) - acc_e[i]) <=
                  unit(t) * (fabs(acc_e[i]) + fabs(get(gd, i, t))) + (t == HR_F16 ? 0x1p-24 : 0) + 1e-30);
    CHECK(bada == 0, "%s: %lld of %lld values of dqkv (acc) are not the old value plus the gradient, rounded once", tag,
          (long long)bada, (long long)nq);
out:
    free(r.qkv), free(r.dy), free(r.y), free(r.lse), free(r.dqkv), free(r.ay), free(r.adqkv), free(r.zy), free(r.zdqkv);
    free(hq), free(hdy), free(hacc), free(gy), free(gy2), free(gyi), free(gd), free(gd2), free(gda), free(gl), free(gl2);
    free(acc_e), free(nan);
}

/* ---- times at the shapes that matter ----------------------------------------------- */
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void timing(const char *name, int64_t N, int64_t T, int64_t C, int64_t H, hr_dtype t, float pdrop) {
    int64_t nq = N * T * 3 * C, ny = N * T * C, nl = N * H * T;
    size_t es = esize(t);
    dused = 0;
    void *dq = dalloc(es * (size_t)nq), *dy = dalloc(es * (size_t)ny), *y = dalloc(es * (size_t)ny);
    void *dd = dalloc(es * (size_t)nq);
    float *dl = dalloc(4 * (size_t)nl);
    void *h = malloc(es * (size_t)nq);
    for (int64_t i = 0; i < nq; i++) put(h, i, t, frand(-2, 2));
    up(dq, h, es * (size_t)nq), up(dy, h, es * (size_t)ny);
    free(h);
    hr_kargs f;
    memset(&f, 0, sizeof f);
    f.op = HR_OP_ATTENTION, f.dt = t;
    f.attn = (hr_attention_args){.qkv = dq, .y = y, .lse = dl, .N = N, .T = T, .C = C, .H = H,
                                 .scale = (float)(1 / sqrt((double)(C / H))), .pdrop = pdrop,
                                 .pscale = 1.0f / (1.0f - pdrop), .seed = DROP_SEED, .stream = DROP_STREAM};
    hr_kargs b = f;
    b.op = HR_OP_ATTENTION_BWD, b.attn.y = NULL, b.attn.lse = NULL;
    b.attn.y_saved = y, b.attn.lse_saved = dl, b.attn.dy = dy, b.attn.dqkv = dd;
    b.ws_bytes = be->workspace_size(be, &b);
    b.ws = dalloc(b.ws_bytes);
    f.ws_bytes = be->workspace_size(be, &f);
    f.ws = f.ws_bytes ? dalloc(f.ws_bytes) : NULL;
    double tf[15], tb[15];
    for (int k = 0; k < 18; k++) {
        double t0 = now_ms();
        hr_status st = be->run(be, &f);
        if (!st) st = be->sync(be);
        double t1 = now_ms();
        if (!st) st = be->run(be, &b);
        if (!st) st = be->sync(be);
        double t2 = now_ms();
        CHECK(st == HR_OK, "timing %s: %s", name, hr_last_error());
        if (st) return;
        if (k >= 3) tf[k - 3] = t1 - t0, tb[k - 3] = t2 - t1;
    }
    qsort(tf, 15, sizeof *tf, cmpd), qsort(tb, 15, sizeof *tb, cmpd);
    printf("  time %-10s %s N%lld T%lld C%lld H%lld%s: forward %.3f ms, backward %.3f ms (medians of 15)\n", name,
           tname(t), (long long)N, (long long)T, (long long)C, (long long)H, pdrop > 0 ? " attn_pdrop 0.1" : "", tf[7],
           tb[7]);
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device (%s)\n", hr_backend_cuda_new(NULL) ? "?" : hr_last_error());
        TEST_END();
    }
    const char *dv = getenv("HR_CUDNN_ATTENTION");
    dnn_on = !(dv && *dv == '0');
    const char *gv = getenv("HR_CUDNN_ATTENTION_GROUP");
    group = gv ? atoll(gv) : 0;
    printf("  half types by %s\n", dnn_on ? "cuDNN's fused attention where it has an engine (HR_CUDNN_ATTENTION=0: "
                                            "the kernels alone)" : "the kernels alone (HR_CUDNN_ATTENTION=0)");
    hr_config_t cfg = hr_config_default();
    cfg.device = HR_DEVICE_CUDA;
    be = hr_backend_cuda_new(&cfg);
    CHECK(be != NULL, "the CUDA backend: %s", hr_last_error());
    if (!be) TEST_END();
    void *base = NULL;
    CHECK(be->arena_alloc(be, dsize, &base) == HR_OK, "arena: %s", hr_last_error());
    if (!base) TEST_END();
    dbase = base;
    /* N, T, C, H: head sizes 1, 20, 32, 64, 80, 128, 256 and T cutting the tiles */
    static const int64_t cases[][4] = {{1, 1, 1, 1},    {2, 7, 40, 2},    {2, 64, 64, 2},   {1, 100, 128, 2},
                                       {2, 257, 160, 2}, {1, 257, 256, 2}, {1, 100, 256, 1}, {1, 257, 512, 2},
                                       {3, 65, 96, 3},   {1, 130, 48, 1}};
    static const hr_dtype ts[3] = {HR_F32, HR_BF16, HR_F16};
    for (int k = 0; k < 3; k++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
            one_case(cases[c][0], cases[c][1], cases[c][2], cases[c][3], ts[k], 0.0f);
    /* attention dropout: the decisions drawn as the CPU draws them, again in the backward */
    static const int64_t drops[][4] = {{2, 7, 40, 2}, {2, 64, 64, 2}, {1, 257, 256, 2}, {3, 65, 96, 3}, {1, 130, 48, 1}};
    for (int k = 0; k < 3; k++)
        for (size_t c = 0; c < sizeof drops / sizeof *drops; c++)
            one_case(drops[c][0], drops[c][1], drops[c][2], drops[c][3], ts[k], c % 2 ? 0.5f : 0.1f);
    printf("  worst error / bound: fp32 %.3f, bf16 %.3f, fp16 %.3f\n", worst_of[0], worst_of[1], worst_of[2]);
    for (int k = 0; k < 2; k++) {
        timing("char_gpt", 64, 256, 384, 6, ts[k], 0.0f);
        timing("gpt2", 8, 1024, 768, 12, ts[k], 0.0f);
        timing("gpt2", 8, 1024, 768, 12, ts[k], 0.1f);
    }
    be->arena_free(be, base);
    be->free(be);
    TEST_END();
}
