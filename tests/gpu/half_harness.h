/* half_harness.h — test_cuda_half.c's harness: random half values on the
 * host, one poisoned (NaN) device arena cut per case, a kernel run in F32 and
 * in the half type on the same values, and the comparisons between them
 * (1 ulp of the F32 result rounded, bit for bit, a derived bound). One
 * includer; the backend `be` and the arena are set by its main. */
#ifndef HR_TEST_HALF_HARNESS_H
#define HR_TEST_HALF_HARNESS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "device_arena.h"

/* ---- host values ------------------------------------------------------------ */
static uint64_t rng = 0x5eed;
static float frand(float lo, float hi) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}
static uint16_t bits_of(float v, hr_dtype t) { return t == HR_BF16 ? hr_f32_to_bf16(v) : hr_f32_to_f16(v); }
static float value_of(uint16_t b, hr_dtype t) { return t == HR_BF16 ? hr_bf16_to_f32(b) : hr_f16_to_f32(b); }
/* unit roundoff of t: half its ulp at 1 */
static double unit(hr_dtype t) { return t == HR_BF16 ? 0x1p-8 : t == HR_F16 ? 0x1p-11 : 0x1p-24; }
/* ulps between two values of a 16-bit float type (both orders of zero are 0) */
static int ulps(uint16_t a, uint16_t b) {
    int oa = a & 0x8000 ? -(int)(a & 0x7fff) : (int)a, ob = b & 0x8000 ? -(int)(b & 0x7fff) : (int)b;
    return abs(oa - ob);
}
static const char *tname(hr_dtype t) { return t == HR_BF16 ? "bf16" : "fp16"; }

/* Host buffers live until the case ends. */
static void *hold[512];
static int nhold;
static void *hmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (nhold < 512) hold[nhold++] = p;
    return p;
}

/* ---- a case's end: its device memory (device_arena.h) and host buffers back --- */
static void case_end(void) {
    dused = 0;
    while (nhold) free(hold[--nhold]);
}

/* A tensor in both forms: host values v (rounded to t), device copies in t
 * (h) and in F32 (f), each `off` elements past an aligned start (off 1: the
 * kernels' unaligned paths). fill: random values in [lo, hi), else the
 * arena's NaN (an output nobody adds into). */
typedef struct {
    int64_t n;
    hr_dtype t;
    float *v;
    void *h;
    float *f;
} pair;

static pair mk(int64_t n, hr_dtype t, bool fill, float lo, float hi, int off) {
    pair p = {n, t, hmalloc(sizeof(float) * (size_t)n), NULL, NULL};
    p.h = (char *)dalloc(2 * (size_t)(n + off)) + 2 * off;
    p.f = (float *)dalloc(4 * (size_t)(n + off)) + off;
    uint16_t *b = hmalloc(4 * (size_t)n);
    if (!fill) { /* NaN (all ones) in both, so that a value not written shows */
        memset(b, 0xff, 4 * (size_t)n);
        up(p.h, b, 2 * (size_t)n), up(p.f, b, 4 * (size_t)n);
        return p;
    }
    for (int64_t i = 0; i < n; i++) {
        b[i] = bits_of(frand(lo, hi), t);
        p.v[i] = value_of(b[i], t);
    }
    up(p.h, b, 2 * (size_t)n);
    up(p.f, p.v, 4 * (size_t)n);
    return p;
}
static pair in(int64_t n, hr_dtype t, float r, int off) { return mk(n, t, true, -r, r, off); }

/* F32 device values (parameters, statistics) */
static float *fbuf(int64_t n, float lo, float hi, float **host) {
    float *v = hmalloc(sizeof(float) * (size_t)n), *d = dalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = frand(lo, hi);
    up(d, v, sizeof(float) * (size_t)n);
    if (host) *host = v;
    return d;
}
static float *fget(const float *d, int64_t n) {
    float *h = hmalloc(sizeof(float) * (size_t)n);
    down(h, d, sizeof(float) * (size_t)n);
    return h;
}

/* ---- running a kernel ------------------------------------------------------------ */
/* The node's workspace as planning sizes it: from a copy with HR_PLANNED for
 * every pointer it has (the products', the loss's and BatchNorm's only; the
 * others need none). */
#define PLANNED(q) ((q) = (q) ? HR_PLANNED : NULL)
static void plan_ws(hr_kargs *a) {
    hr_kargs p = *a;
    bool prod = true;
    if (a->op == HR_OP_LINEAR || a->op == HR_OP_LINEAR_BWD) {
        hr_linear_args *l = &p.linear;
        PLANNED(l->x), PLANNED(l->w), PLANNED(l->b), PLANNED(l->dy), PLANNED(l->y), PLANNED(l->dx), PLANNED(l->dw),
            PLANNED(l->db);
    } else if (a->op == HR_OP_CONV2D || a->op == HR_OP_CONV2D_BWD) {
        hr_conv_args *v = &p.conv;
        PLANNED(v->x), PLANNED(v->w), PLANNED(v->b), PLANNED(v->dy), PLANNED(v->y), PLANNED(v->dx), PLANNED(v->dw),
            PLANNED(v->db);
    } else if (a->op == HR_OP_CROSS_ENTROPY) { /* the block partials of its mean */
        PLANNED(p.loss.x), PLANNED(p.loss.labels), PLANNED(p.loss.loss);
    } else if (a->op == HR_OP_LINEAR_CE) { /* its piece of logits, cuBLAS's */
        hr_linear_ce_args *l = &p.lce;
        PLANNED(l->x), PLANNED(l->w), PLANNED(l->labels), PLANNED(l->loss), PLANNED(l->dx), PLANNED(l->dw);
    } else if (a->op == HR_OP_BATCHNORM || a->op == HR_OP_BATCHNORM_BWD) { /* its splits' sums */
        hr_batchnorm_args *b = &p.bn;
        PLANNED(b->x), PLANNED(b->y), PLANNED(b->dy), PLANNED(b->dx), PLANNED(b->mean), PLANNED(b->invstd);
    } else {
        prod = false;
    }
    size_t ws = be->workspace_size(be, &p);
    CHECK(prod || ws == 0, "%s wants %zu bytes of workspace", hr_op_name(a->op), ws);
    a->ws = ws ? dalloc(ws) : NULL;
    a->ws_bytes = ws;
}

static bool run(hr_kargs *a, const char *what) {
    plan_ws(a);
    hr_status st = be->run(be, a);
    if (st == HR_OK) st = be->sync(be);
    CHECK(st == HR_OK, "%s (%s, %s): %s", what, hr_op_name(a->op), hr_dtype_name(a->dt), hr_last_error());
    return st == HR_OK;
}

/* The node's kernel in F32 on the f copies and in t on the h copies: `set`
 * fills the family's arguments from the pairs' f (half = false) or h. */
typedef void (*setter)(hr_kargs *a, bool half, void *ctx);
static bool run_both(hr_op op, hr_dtype t, setter set, void *ctx, const char *what) {
    hr_kargs a;
    memset(&a, 0, sizeof a);
    a.op = op, a.dt = HR_F32;
    set(&a, false, ctx);
    if (!run(&a, what)) return false;
    memset(&a, 0, sizeof a);
    a.op = op, a.dt = t;
    set(&a, true, ctx);
    return run(&a, what);
}
#define PTR(p, half) ((half) ? (p).h : (void *)(p).f)

/* ---- comparisons ----------------------------------------------------------------- */
/* the half output against the F32 kernel's, rounded: at most 1 ulp apart */
static void cmp_half(const char *what, const pair *o) {
    uint16_t *hb = hmalloc(2 * (size_t)o->n);
    float *r = hmalloc(4 * (size_t)o->n);
    down(hb, o->h, 2 * (size_t)o->n);
    down(r, o->f, 4 * (size_t)o->n);
    int worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < o->n; i++) {
        bool hn = isnan(value_of(hb[i], o->t)), rn = isnan(r[i]);
        int d = hn || rn ? (hn == rn ? 0 : 1000) : ulps(hb[i], bits_of(r[i], o->t));
        if (d > worst) worst = d, at = i;
    }
    CHECK(worst <= 1, "%s: %d ulps from the F32 kernel's result rounded, at %lld: %g vs %g", what, worst,
          (long long)at, (double)value_of(hb[at], o->t), (double)r[at]);
}

/* two F32 outputs (statistics, parameter gradients): identical */
static void cmp_same(const char *what, const float *a, const float *b, int64_t n) {
    float *x = fget(a, n), *y = fget(b, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], 4) != 0 && !(isnan(x[i]) && isnan(y[i]));
    CHECK(bad == 0, "%s: %lld of %lld values differ from the F32 kernel's", what, (long long)bad, (long long)n);
}

static void cmp_bytes(const char *what, const uint8_t *a, const uint8_t *b, int64_t n) {
    uint8_t *x = hmalloc((size_t)n), *y = hmalloc((size_t)n);
    down(x, a, (size_t)n);
    down(y, b, (size_t)n);
    CHECK(memcmp(x, y, (size_t)n) == 0, "%s: the bytes differ", what);
}

/* A product's output against the exact value e (double) with the bound
 *   |got - e| <= u |e| + slack,
 * u the output's unit roundoff (0: an F32 output, not rounded to half) and
 * slack what the arithmetic before that rounding may add (below). */
static double worst_of_bound[2]; /* the largest error / bound seen: half outputs, F32 outputs */
static void cmp_bound(const char *what, const float *got, const double *e, const double *slack, int64_t n, double u,
                      int kind) {
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double b = u * fabs(e[i]) + slack[i], d = fabs((double)got[i] - e[i]);
        double q = d != d ? INFINITY : d / b;
        if (q > worst) worst = q, at = i;
    }
    if (worst > worst_of_bound[kind]) worst_of_bound[kind] = worst;
    CHECK(worst <= 1, "%s: error %.3g times the bound at %lld: %.9g vs exact %.9g (bound %.3g)", what, worst,
          (long long)at, (double)got[at], e[at], u * fabs(e[at]) + slack[at]);
}

static float *half_values(const pair *o) {
    uint16_t *b = hmalloc(2 * (size_t)o->n);
    float *v = hmalloc(4 * (size_t)o->n);
    down(b, o->h, 2 * (size_t)o->n);
    for (int64_t i = 0; i < o->n; i++) v[i] = value_of(b[i], o->t);
    return v;
}

#endif
