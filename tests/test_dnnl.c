/* test_dnnl.c — CPU convolutions through oneDNN (cpu_dnnl_conv.c), on its plain
 * (HR_DNNL=2) and blocked (HR_DNNL=3) layouts and on the timed choice
 * (HR_DNNL=1): forward, backward data, weights and bias against a float64
 * reference and against im2col (HR_DNNL=0), over stride, padding, 1x1, batch
 * 1, odd sizes, groups, dilation, accumulated outputs, missing outputs, dx
 * over x's bytes and batches split into calls (where oneDNN's copies would
 * not fit im2col's room); the same bits run to run; a workspace too small
 * falls back to im2col. BatchNorm's training forward and backward the same
 * way (cpu_norm.c) against float64 (its own kernels with HR_DNNL=0, oneDNN forced with
 * HR_DNNL=2, the timed choice with 1): running statistics, dx over dy's
 * bytes, accumulated and missing parameter gradients, the same bits twice.
 * Skips (passing) where libdnnl.so.2 is absent. */
#include "check.h"
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int N, C, H, W, K, kh, kw, sh, sw, ph, pw, g, dh, dw;
} shape;

static const shape cases[] = {
    {2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},       /* odd sizes, padding */
    {1, 4, 8, 8, 6, 1, 1, 1, 1, 0, 0, 1, 1, 1},       /* 1x1, batch 1 */
    {3, 5, 9, 7, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1},       /* stride 2 */
    {2, 3, 11, 10, 5, 5, 3, 2, 1, 2, 0, 1, 1, 1},     /* a 5x3 kernel, uneven stride and padding */
    {4, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* channels oneDNN's blocked layouts like */
    {2, 6, 10, 10, 4, 3, 3, 1, 1, 1, 1, 2, 1, 1},     /* groups 2 */
    {2, 4, 9, 9, 4, 3, 3, 1, 1, 2, 2, 4, 2, 2},       /* depthwise, dilation 2 */
    {2, 2, 11, 12, 4, 3, 2, 2, 1, 2, 1, 2, 2, 3},     /* groups and an uneven dilation, stride */
    {6, 16, 8, 8, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1},     /* blocked: one sample a call (1x1: little im2col room) */
    {32, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* blocked: some samples a call */
};

typedef struct {
    shape s;
    int OH, OW;
    size_t nx, nw, ny;
    float *x, *w, *b, *dy;
    double *ry, *rdx, *rdw, *rdb; /* the float64 reference */
} conv_case;

static float frand(unsigned *st) {
    *st = *st * 1664525u + 1013904223u;
    return (float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void reference(conv_case *c) {
    const shape *s = &c->s;
    int Cg = s->C / s->g, Kg = s->K / s->g;
    memset(c->ry, 0, sizeof(double) * c->ny);
    memset(c->rdx, 0, sizeof(double) * c->nx);
    memset(c->rdw, 0, sizeof(double) * c->nw);
    memset(c->rdb, 0, sizeof(double) * (size_t)s->K);
    for (int n = 0; n < s->N; n++)
        for (int k = 0; k < s->K; k++)
            for (int oh = 0; oh < c->OH; oh++)
                for (int ow = 0; ow < c->OW; ow++) {
                    size_t yi = (((size_t)n * s->K + k) * c->OH + oh) * c->OW + ow;
                    double acc = c->b[k], g = c->dy[yi];
                    c->rdb[k] += g;
                    for (int ci = 0; ci < Cg; ci++)
                        for (int i = 0; i < s->kh; i++)
                            for (int j = 0; j < s->kw; j++) {
                                int ih = oh * s->sh - s->ph + i * s->dh, iw = ow * s->sw - s->pw + j * s->dw;
                                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                                int cc = k / Kg * Cg + ci;
                                size_t xi = (((size_t)n * s->C + cc) * s->H + ih) * s->W + iw;
                                size_t wi = (((size_t)k * Cg + ci) * s->kh + i) * s->kw + j;
                                acc += (double)c->x[xi] * c->w[wi];
                                c->rdx[xi] += g * c->w[wi];
                                c->rdw[wi] += g * c->x[xi];
                            }
                    c->ry[yi] = acc;
                }
}

static void case_make(conv_case *c, const shape *s, unsigned seed) {
    memset(c, 0, sizeof *c);
    c->s = *s;
    c->OH = (s->H + 2 * s->ph - s->dh * (s->kh - 1) - 1) / s->sh + 1;
    c->OW = (s->W + 2 * s->pw - s->dw * (s->kw - 1) - 1) / s->sw + 1;
    c->nx = (size_t)s->N * s->C * s->H * s->W;
    c->nw = (size_t)s->K * (s->C / s->g) * s->kh * s->kw;
    c->ny = (size_t)s->N * s->K * c->OH * c->OW;
    c->x = malloc(4 * c->nx), c->w = malloc(4 * c->nw), c->b = malloc(4 * (size_t)s->K), c->dy = malloc(4 * c->ny);
    c->ry = malloc(8 * c->ny), c->rdx = malloc(8 * c->nx), c->rdw = malloc(8 * c->nw);
    c->rdb = malloc(8 * (size_t)s->K);
    for (size_t i = 0; i < c->nx; i++) c->x[i] = frand(&seed);
    for (size_t i = 0; i < c->nw; i++) c->w[i] = frand(&seed) * 0.5f;
    for (int i = 0; i < s->K; i++) c->b[i] = frand(&seed);
    for (size_t i = 0; i < c->ny; i++) c->dy[i] = frand(&seed);
    reference(c);
}

static void case_free(conv_case *c) {
    free(c->x), free(c->w), free(c->b), free(c->dy), free(c->ry), free(c->rdx), free(c->rdw), free(c->rdb);
}

static hr_kargs kargs(const conv_case *c, bool bwd) {
    hr_kargs a;
    memset(&a, 0, sizeof a);
    a.op = bwd ? HR_OP_CONV2D_BWD : HR_OP_CONV2D;
    a.dt = HR_F32;
    const shape *s = &c->s;
    hr_conv_args *v = &a.conv;
    v->N = s->N, v->C = s->C, v->H = s->H, v->W = s->W, v->K = s->K, v->OH = c->OH, v->OW = c->OW;
    v->kh = s->kh, v->kw = s->kw, v->sh = s->sh, v->sw = s->sw, v->ph = s->ph, v->pw = s->pw;
    v->groups = s->g, v->dil_h = s->dh, v->dil_w = s->dw;
    v->x = c->x, v->w = c->w;
    return a;
}

/* max |got - (base + want)| / (1 + max |want|) */
static double err(const float *got, const double *want, size_t n, float base) {
    double m = 0, scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(got[i] - (base + want[i])));
    return m / scale;
}

/* Runs one node on the backend with a workspace of the size it plans;
 * taken: whether oneDNN ran it (the dispatch's own answer: the conv's or the
 * norm's). */
static hr_status run(hr_backend *be, hr_kargs *a, bool *taken) {
    size_t ws = be->workspace_size(be, a);
    void *buf = ws ? malloc(ws) : NULL;
    a->ws = buf, a->ws_bytes = ws;
    hr_status st = HR_OK;
    bool norm = a->op == HR_OP_BATCHNORM || a->op == HR_OP_BATCHNORM_BWD;
    *taken = norm ? hr_cpu_norm_dnnl(be->ctx, a, &st) : hr_cpu_dnnl_conv(be->ctx, a, &st);
    if (!*taken) st = be->run(be, a);
    free(buf);
    return st;
}

static hr_backend *backend(const char *mode) {
    setenv("HR_DNNL", mode, 1);
    hr_backend *be = hr_backend_cpu_new(NULL);
    unsetenv("HR_DNNL");
    return be;
}

#define TOL 2e-5

/* Every output of both nodes, on one mode, against the reference. */
static void check_mode(const char *mode, conv_case *c, const char *name) {
    hr_backend *be = backend(mode);
    bool must = strcmp(mode, "2") == 0 || strcmp(mode, "3") == 0, taken;
    const shape *s = &c->s;
    float *y = malloc(4 * c->ny), *y2 = malloc(4 * c->ny), *dx = malloc(4 * c->nx), *dw = malloc(4 * c->nw);
    float *db = malloc(4 * (size_t)s->K), *dx2 = malloc(4 * c->nx), *dw2 = malloc(4 * c->nw);
    hr_kargs a = kargs(c, false);
    a.conv.b = c->b, a.conv.y = y;
    CHECK(run(be, &a, &taken) == HR_OK && (taken || !must), "HR_DNNL=%s %s forward: %s (oneDNN ran it: %d)", mode,
          name, hr_last_error(), taken);
    CHECK(err(y, c->ry, c->ny, 0) < TOL, "HR_DNNL=%s %s forward: error %.3g", mode, name, err(y, c->ry, c->ny, 0));
    a.conv.y = y2; /* the same bits again */
    CHECK(run(be, &a, &taken) == HR_OK && !memcmp(y, y2, 4 * c->ny), "HR_DNNL=%s %s forward: not the same bits twice",
          mode, name);
    a.conv.b = NULL; /* no bias: y - b */
    CHECK(run(be, &a, &taken) == HR_OK, "HR_DNNL=%s %s forward without bias", mode, name);
    double m = 0;
    for (size_t i = 0; i < c->ny; i++) m = fmax(m, fabs(y2[i] + c->b[i / (c->OH * c->OW) % s->K] - y[i]));
    CHECK(m < 1e-5, "HR_DNNL=%s %s forward without bias: off by %.3g", mode, name, m);

    /* backward, every output, overwritten, twice */
    hr_kargs b = kargs(c, true);
    b.conv.dy = c->dy, b.conv.dx = dx, b.conv.dw = dw, b.conv.db = db;
    CHECK(run(be, &b, &taken) == HR_OK && (taken || !must), "HR_DNNL=%s %s backward: %s", mode, name, hr_last_error());
    CHECK(err(dx, c->rdx, c->nx, 0) < TOL, "HR_DNNL=%s %s dx: error %.3g", mode, name, err(dx, c->rdx, c->nx, 0));
    CHECK(err(dw, c->rdw, c->nw, 0) < TOL, "HR_DNNL=%s %s dW: error %.3g", mode, name, err(dw, c->rdw, c->nw, 0));
    CHECK(err(db, c->rdb, (size_t)s->K, 0) < TOL, "HR_DNNL=%s %s db: error %.3g", mode, name,
          err(db, c->rdb, (size_t)s->K, 0));
    b.conv.dx = dx2, b.conv.dw = dw2;
    b.conv.db = y2; /* (room enough) */
    CHECK(run(be, &b, &taken) == HR_OK && !memcmp(dx, dx2, 4 * c->nx) && !memcmp(dw, dw2, 4 * c->nw) &&
              !memcmp(db, y2, 4 * (size_t)s->K),
          "HR_DNNL=%s %s backward: not the same bits twice", mode, name);

    /* accumulated: each output starts at 0.5 */
    for (size_t i = 0; i < c->nx; i++) dx[i] = 0.5f;
    for (size_t i = 0; i < c->nw; i++) dw[i] = 0.5f;
    for (int i = 0; i < s->K; i++) db[i] = 0.5f;
    b.conv.dx = dx, b.conv.dw = dw, b.conv.db = db;
    b.conv.acc_dx = b.conv.acc_dw = b.conv.acc_db = true;
    CHECK(run(be, &b, &taken) == HR_OK, "HR_DNNL=%s %s backward, accumulated: %s", mode, name, hr_last_error());
    CHECK(err(dx, c->rdx, c->nx, 0.5f) < TOL && err(dw, c->rdw, c->nw, 0.5f) < TOL &&
              err(db, c->rdb, (size_t)s->K, 0.5f) < TOL,
          "HR_DNNL=%s %s backward, accumulated: errors %.3g %.3g %.3g", mode, name, err(dx, c->rdx, c->nx, 0.5f),
          err(dw, c->rdw, c->nw, 0.5f), err(db, c->rdb, (size_t)s->K, 0.5f));

    /* some outputs only, mixed flags: dx alone; db alone (accumulated); dW without db */
    b.conv.acc_dx = b.conv.acc_dw = b.conv.acc_db = false;
    b.conv.dw = b.conv.db = NULL;
    CHECK(run(be, &b, &taken) == HR_OK && err(dx, c->rdx, c->nx, 0) < TOL, "HR_DNNL=%s %s dx alone", mode, name);
    for (int i = 0; i < s->K; i++) db[i] = 0.5f;
    b.conv.dx = NULL, b.conv.db = db, b.conv.acc_db = true;
    CHECK(run(be, &b, &taken) == HR_OK && err(db, c->rdb, (size_t)s->K, 0.5f) < TOL, "HR_DNNL=%s %s db alone", mode,
          name);
    b.conv.db = NULL, b.conv.dw = dw, b.conv.acc_db = false;
    CHECK(run(be, &b, &taken) == HR_OK && err(dw, c->rdw, c->nw, 0) < TOL, "HR_DNNL=%s %s dW without db", mode, name);

    /* dx over x's bytes (the planner's in-place), with dW that reads x */
    {
        float *xc = malloc(4 * c->nx);
        memcpy(xc, c->x, 4 * c->nx);
        b.conv.x = xc, b.conv.dx = xc, b.conv.dw = dw, b.conv.db = db;
        CHECK(run(be, &b, &taken) == HR_OK && err(xc, c->rdx, c->nx, 0) < TOL && err(dw, c->rdw, c->nw, 0) < TOL &&
                  err(db, c->rdb, (size_t)s->K, 0) < TOL,
              "HR_DNNL=%s %s dx over x: errors %.3g %.3g", mode, name, err(xc, c->rdx, c->nx, 0),
              err(dw, c->rdw, c->nw, 0));
        free(xc);
    }
    be->free(be);
    free(y), free(y2), free(dx), free(dw), free(db), free(dx2), free(dw2);
}

/* A workspace smaller than oneDNN's need (one planned with HR_DNNL=0, say):
 * the dispatch declines, and im2col runs. */
static void check_fallback(conv_case *c) {
    hr_backend *be0 = backend("0"), *be2 = backend("2");
    hr_kargs a = kargs(c, false);
    float *y = malloc(4 * c->ny);
    a.conv.b = c->b, a.conv.y = y;
    size_t ws0 = be0->workspace_size(be0, &a), ws2 = be2->workspace_size(be2, &a);
    CHECK(ws2 >= ws0, "HR_DNNL=2 plans %zu workspace bytes, fewer than im2col's %zu", ws2, ws0);
    size_t dn = hr_cpu_dnnl_workspace_size(be2->ctx, &a); /* oneDNN's own need */
    CHECK(dn > 0 && dn <= ws2, "oneDNN needs %zu bytes, the plan has %zu", dn, ws2);
    void *buf = malloc(ws2); /* room for both; the kernel is told of a byte short of oneDNN's need */
    a.ws = buf, a.ws_bytes = dn - 1;
    hr_status st = HR_OK;
    bool taken = hr_cpu_dnnl_conv(be2->ctx, &a, &st);
    CHECK(!taken, "oneDNN ran in a workspace of %zu bytes where it needs %zu", dn - 1, dn);
    CHECK(be2->run(be2, &a) == HR_OK && err(y, c->ry, c->ny, 0) < TOL, "the fallback to im2col: %s", hr_last_error());
    a.ws_bytes = dn;
    CHECK(hr_cpu_dnnl_conv(be2->ctx, &a, &st) && st == HR_OK, "oneDNN declined its planned workspace");
    free(buf), free(y);
    be0->free(be0), be2->free(be2);
}

/* ---- BatchNorm ----------------------------------------------------------------- */
typedef struct {
    int64_t N, C, HW;
} bn_shape;

static const bn_shape bn_cases[] = {
    {2, 3, 5},      /* tiny: the timed mode keeps cpu_norm.c */
    {16, 8, 1024},  /* 128K values: large enough for the timed choice */
    {64, 16, 64},   /* many samples, short planes */
    {4096, 32, 1},  /* BatchNorm1d-like: planes of one value */
};

static void check_bn(const char *mode, const bn_shape *s, unsigned seed) {
    hr_backend *be = backend(mode);
    bool must = strcmp(mode, "2") == 0, taken;
    int64_t N = s->N, C = s->C, HW = s->HW, M = N * HW;
    size_t n = (size_t)(N * C * HW), nc = (size_t)C;
    float eps = 1e-5f, mom = 0.1f;
    float *x = malloc(4 * n), *y = malloc(4 * n), *y2 = malloc(4 * n), *dy = malloc(4 * n), *dx = malloc(4 * n);
    float *pc = malloc(4 * 12 * nc);
    double *ry = malloc(8 * n), *rdx = malloc(8 * n), *rp = malloc(8 * 6 * nc);
    float *g = pc, *bt = pc + nc, *mean = pc + 2 * nc, *inv = pc + 3 * nc, *rm = pc + 4 * nc, *rv = pc + 5 * nc;
    float *dg = pc + 6 * nc, *db = pc + 7 * nc;
    double *rmean = rp, *rinv = rp + nc, *rrm = rp + 2 * nc, *rrv = rp + 3 * nc, *rdg = rp + 4 * nc, *rdb = rp + 5 * nc;
    for (size_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * frand(&seed), dy[i] = frand(&seed);
    for (size_t c = 0; c < nc; c++) g[c] = 0.5f + frand(&seed), bt[c] = frand(&seed), rm[c] = 0.2f, rv[c] = 1.5f;
    /* float64: the batch statistics, y, the running statistics, then the gradients */
    for (int64_t c = 0; c < C; c++) {
        double sum = 0, ss = 0, sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < HW; j++) sum += x[(i * C + c) * HW + j];
        double mu = sum / (double)M;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < HW; j++) ss += pow(x[(i * C + c) * HW + j] - mu, 2);
        double var = ss / (double)M, is = 1.0 / sqrt(var + eps);
        rmean[c] = mu, rinv[c] = is;
        rrm[c] = (1 - mom) * 0.2 + mom * mu;
        rrv[c] = (1 - mom) * 1.5 + mom * (M > 1 ? ss / (double)(M - 1) : var);
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < HW; j++) {
                size_t k = (size_t)((i * C + c) * HW + j);
                double xh = (x[k] - mu) * is;
                ry[k] = xh * g[c] + bt[c];
                sdy += dy[k], sdyx += dy[k] * xh;
            }
        rdg[c] = sdyx, rdb[c] = sdy;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < HW; j++) {
                size_t k = (size_t)((i * C + c) * HW + j);
                rdx[k] = g[c] * is / (double)M * ((double)M * dy[k] - sdy - (x[k] - mu) * is * sdyx);
            }
    }
    char name[96];
    snprintf(name, sizeof name, "BatchNorm %lldx%lldx%lld HR_DNNL=%s", (long long)N, (long long)C, (long long)HW, mode);
    hr_kargs a;
    memset(&a, 0, sizeof a);
    a.op = HR_OP_BATCHNORM, a.dt = HR_F32;
    hr_batchnorm_args *b = &a.bn;
    b->N = N, b->C = C, b->HW = HW, b->eps = eps, b->momentum = mom, b->train = true;
    b->x = x, b->gamma = g, b->beta = bt, b->running_mean = rm, b->running_var = rv;
    b->y = y, b->mean = mean, b->invstd = inv;
    /* float sums over M values: a few float roundings of the sum's size */
    double tol = 2e-6 * sqrt((double)M) + 1e-5;
    CHECK(run(be, &a, &taken) == HR_OK && (taken || !must), "%s forward: %s (oneDNN ran it: %d)", name,
          hr_last_error(), taken);
    CHECK(err(y, ry, n, 0) < tol && err(mean, rmean, nc, 0) < tol && err(inv, rinv, nc, 0) < tol,
          "%s forward: errors y %.3g mean %.3g invstd %.3g (bound %.3g)", name, err(y, ry, n, 0),
          err(mean, rmean, nc, 0), err(inv, rinv, nc, 0), tol);
    CHECK(err(rm, rrm, nc, 0) < tol && err(rv, rrv, nc, 0) < tol,
          "%s: running statistics off by %.3g and %.3g", name, err(rm, rrm, nc, 0), err(rv, rrv, nc, 0));
    b->y = y2, b->running_mean = b->running_var = NULL; /* a recomputation: the same bits, no running update */
    CHECK(run(be, &a, &taken) == HR_OK && !memcmp(y, y2, 4 * n), "%s forward: not the same bits twice", name);

    /* backward from the saved statistics, dx over dy (the planner's in-place) */
    memset(&a, 0, sizeof a);
    a.op = HR_OP_BATCHNORM_BWD, a.dt = HR_F32;
    b->N = N, b->C = C, b->HW = HW, b->eps = eps, b->momentum = mom, b->train = true;
    b->x = x, b->gamma = g, b->saved_mean = mean, b->saved_invstd = inv;
    memcpy(dx, dy, 4 * n);
    b->dy = dx, b->dx = dx, b->dgamma = dg, b->dbeta = db;
    CHECK(run(be, &a, &taken) == HR_OK && (taken || !must), "%s backward: %s", name, hr_last_error());
    CHECK(err(dx, rdx, n, 0) < tol && err(dg, rdg, nc, 0) < tol && err(db, rdb, nc, 0) < tol,
          "%s backward: errors dx %.3g dgamma %.3g dbeta %.3g (bound %.3g)", name, err(dx, rdx, n, 0),
          err(dg, rdg, nc, 0), err(db, rdb, nc, 0), tol);
    /* the parameter gradients accumulated (from 0.5), or not wanted; dx not over dy; the same bits */
    for (size_t c = 0; c < nc; c++) dg[c] = db[c] = 0.5f;
    b->dy = dy, b->dx = y2, b->acc_dgamma = b->acc_dbeta = true;
    CHECK(run(be, &a, &taken) == HR_OK && !memcmp(dx, y2, 4 * n), "%s backward: not the same bits twice", name);
    CHECK(err(dg, rdg, nc, 0.5f) < tol && err(db, rdb, nc, 0.5f) < tol,
          "%s backward, accumulated: errors %.3g %.3g", name, err(dg, rdg, nc, 0.5f), err(db, rdb, nc, 0.5f));
    b->dgamma = b->dbeta = NULL, b->acc_dgamma = b->acc_dbeta = false;
    CHECK(run(be, &a, &taken) == HR_OK && !memcmp(dx, y2, 4 * n), "%s backward, dx alone: %s", name,
          hr_last_error());
    be->free(be);
    free(x), free(y), free(y2), free(dy), free(dx), free(pc), free(ry), free(rdx), free(rp);
}

int main(void) {
    const char *why = hr_cpu_dnnl_why();
    if (why) {
        printf("SKIP oneDNN: %s\n", why);
        CHECK(true, "skipped");
        TEST_END();
    }
    char name[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const shape *s = &cases[i];
        conv_case c;
        case_make(&c, s, 1234u + (unsigned)i);
        snprintf(name, sizeof name, "%dx%dx%dx%d K%d k%dx%d s%d,%d p%d,%d g%d d%d,%d", s->N, s->C, s->H, s->W, s->K,
                 s->kh, s->kw, s->sh, s->sw, s->ph, s->pw, s->g, s->dh, s->dw);
        for (int m = 0; m < 4; m++) check_mode((const char *[]){"0", "1", "2", "3"}[m], &c, name);
        if (i == 0) check_fallback(&c);
        case_free(&c);
    }
    printf("oneDNN convolutions: %zu shapes, im2col and 3 oneDNN modes, against float64\n",
           sizeof cases / sizeof cases[0]);
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++)
        for (int m = 0; m < 3; m++) check_bn((const char *[]){"0", "1", "2"}[m], &bn_cases[i], 99u + (unsigned)i);
    printf("BatchNorm: %zu shapes, cpu_norm.c, the timed choice and oneDNN, against float64\n",
           sizeof bn_cases / sizeof bn_cases[0]);
    TEST_END();
}
