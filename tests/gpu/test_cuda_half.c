/* test_cuda_half.c — the CUDA backend's BF16 and F16 kernels, op by op, on
 * random values already rounded to the half type: each op's half kernel
 * against its F32 kernel on the same values (elementwise ops, pools,
 * BatchNorm, Dropout, copies, the cross-entropy's gradient: the F32 result
 * rounded, within 1 ulp; masks, argmax bytes, F32 statistics and the loss
 * identical), Cast against the CPU's
 * conversions (identical), and Linear and Conv2d against a double reference
 * on the host within a derived bound (below), the F32 kernel too. Also which
 * ops takes_half claims. Three backends: the default one, one cutting the
 * batch into several library calls with split-K on, one on cuDNN's legacy
 * API. Skips (passing) where no GPU is present. */
#include "backend/gpus.h"
#include "half_harness.h"

/* ---- the bound for products ---------------------------------------------------------
 * Products of two half values are exact in FP32; a sum of k of them in FP32
 * (cuBLAS, cuDNN, tensor cores, any order; tensor cores may truncate and
 * align to the largest term, so twice the usual 2^-24 a step, doubled again
 * for margin) is off by at most gamma(k) S, S the sum of the terms'
 * magnitudes. A half output is then rounded once: u |e|. The bias reaches a
 * half y rounded to the half type first (autocast's cast of it): u |b|. A
 * half dW (Conv2d) is rounded per library call, then summed in F32: u times
 * the sum of the calls' |partial|. The F32 kernels meet gamma(k) S alone. */
static double gamma_k(int64_t k) { return (double)(k + 4) * 0x1p-22; }
static double tiny(hr_dtype t) { return t == HR_F16 ? 0x1p-24 : 1e-37; } /* F16's subnormal spacing */

/* slack[i] = gamma S[i] + extra[i] (+ tiny) */
static double *slack_of(const double *S, const double *extra, int64_t n, int64_t k, double add) {
    double *s = hmalloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) s[i] = 1.01 * (gamma_k(k) * S[i] + (extra ? extra[i] : 0)) + add;
    return s;
}

/* ---- activations ------------------------------------------------------------------ */
typedef struct {
    hr_op op;
    pair x, dy, out;
    uint8_t *m32, *mh; /* forward: each kernel's mask; backward: the one mask both read */
    bool mask, tanh, acc;
} act_case;

static bool bwd_from_y(hr_op op) { return op == HR_OP_SIGMOID_BWD || op == HR_OP_TANH_BWD || op == HR_OP_RELU_BWD; }

static void set_act(hr_kargs *a, bool half, void *ctx) {
    act_case *c = ctx;
    hr_act_args *p = &a->act;
    p->n = c->x.n, p->alpha = 0.1f, p->tanh_approx = c->tanh, p->acc = c->acc;
    p->out = PTR(c->out, half);
    if (c->op == a->op) { /* forward */
        p->x = PTR(c->x, half);
        p->mask_out = c->mask ? (half ? c->mh : c->m32) : NULL;
        return;
    }
    p->dy = PTR(c->dy, half);
    if (c->mask) p->mask = c->m32;
    else if (bwd_from_y(a->op)) p->y = PTR(c->x, half);
    else p->x = PTR(c->x, half);
}

static void test_act(hr_dtype t) {
    static const hr_op ops[] = {HR_OP_RELU, HR_OP_LEAKY_RELU, HR_OP_GELU, HR_OP_SILU, HR_OP_SIGMOID, HR_OP_TANH};
    char what[160];
    for (int o = 0; o < 6; o++)
        for (int var = 0; var < 2; var++) /* ReLU, LeakyReLU: with the mask; GELU: tanh form */
            for (int off = 0; off < 2; off++) {
                hr_op op = ops[o];
                bool masked = op == HR_OP_RELU || op == HR_OP_LEAKY_RELU;
                if (var && !masked && op != HR_OP_GELU) continue;
                int64_t n = 1037 + 40 * off; /* tails past whole vectors, mask bytes cut short */
                act_case c = {op, in(n, t, 4, off), in(n, t, 2, off), mk(n, t, false, 0, 0, off), NULL, NULL,
                              masked && var, op == HR_OP_GELU && var, false};
                c.m32 = (uint8_t *)dalloc((size_t)n / 8 + 8) + off, c.mh = (uint8_t *)dalloc((size_t)n / 8 + 8) + off;
                snprintf(what, sizeof what, "%s %s%s%s, n %lld, offset %d", hr_op_name(op), tname(t),
                         c.mask ? " mask" : "", c.tanh ? " tanh" : "", (long long)n, off);
                if (run_both(op, t, set_act, &c, what)) {
                    cmp_half(what, &c.out);
                    if (c.mask) {
                        uint8_t *want = hmalloc((size_t)(n + 7) / 8);
                        for (int64_t i = 0; i < n; i++) want[i / 8] |= (uint8_t)((c.x.v[i] > 0) << (i % 8));
                        cmp_bytes(what, c.m32, c.mh, (n + 7) / 8);
                        uint8_t *got = hmalloc((size_t)(n + 7) / 8);
                        down(got, c.mh, (size_t)(n + 7) / 8);
                        CHECK(!memcmp(got, want, (size_t)(n + 7) / 8), "%s: the mask is not x > 0", what);
                        up(c.m32, want, (size_t)(n + 7) / 8); /* the backward's */
                    }
                }
                for (int acc = 0; acc < 2; acc++) {
                    c.acc = acc;
                    c.out = mk(n, t, acc, -1, 1, off);
                    snprintf(what, sizeof what, "%s.backward %s%s%s%s, n %lld, offset %d", hr_op_name(op), tname(t),
                             c.mask ? " mask" : "", c.tanh ? " tanh" : "", acc ? " acc" : "", (long long)n, off);
                    if (run_both((hr_op)(op + 1), t, set_act, &c, what)) cmp_half(what, &c.out);
                }
                case_end();
            }
}

/* ---- pools ---------------------------------------------------------------------------- */
typedef struct {
    pair x, y, dy, dx;
    uint8_t *am32, *amh;
    int64_t NC, H, OH;
    int k, s;
    bool argmax, acc;
} pool_case;

static void set_pool(hr_kargs *a, bool half, void *ctx) {
    pool_case *c = ctx;
    hr_pool_args *p = &a->pool;
    p->NC = c->NC, p->H = p->W = c->H, p->OH = p->OW = c->OH, p->kh = p->kw = c->k, p->sh = p->sw = c->s;
    p->acc = c->acc;
    if (a->op == HR_OP_MAXPOOL || a->op == HR_OP_AVGPOOL) {
        p->x = PTR(c->x, half), p->y = PTR(c->y, half);
        if (a->op == HR_OP_MAXPOOL && c->argmax) p->argmax_out = half ? c->amh : c->am32;
        return;
    }
    p->dy = PTR(c->dy, half), p->dx = PTR(c->dx, half);
    if (a->op == HR_OP_MAXPOOL_BWD && c->argmax) p->argmax = c->am32;
    else p->x = PTR(c->x, half);
}

static void test_pool(hr_dtype t) {
    /* NC, H, kernel, stride: 2x2 tiles (the paired kernels), overlapping
     * windows, 3x3 tiles; offset 1 takes the general kernels */
    static const int shapes[4][4] = {{6, 8, 2, 2}, {5, 9, 3, 2}, {4, 9, 3, 3}, {3, 8, 2, 2}};
    char what[160];
    for (int sh = 0; sh < 4; sh++)
        for (int avg = 0; avg < 2; avg++)
            for (int am = 0; am < 2 - avg; am++) {
                int off = sh == 3;
                pool_case c = {.NC = shapes[sh][0], .H = shapes[sh][1], .k = shapes[sh][2], .s = shapes[sh][3]};
                c.OH = (c.H - c.k) / c.s + 1, c.argmax = am;
                int64_t nx = c.NC * c.H * c.H, ny = c.NC * c.OH * c.OH;
                c.x = in(nx, t, 3, off), c.y = mk(ny, t, false, 0, 0, off), c.dy = in(ny, t, 2, off);
                for (int64_t i = 0; i < nx; i += 7) { /* ties, as ReLU's zeros make */
                    c.x.v[i] = 0;
                    uint16_t z = 0;
                    up((char *)c.x.h + 2 * i, &z, 2);
                    up(c.x.f + i, &c.x.v[i], 4);
                }
                c.am32 = dalloc((size_t)ny), c.amh = dalloc((size_t)ny);
                hr_op op = avg ? HR_OP_AVGPOOL : HR_OP_MAXPOOL;
                snprintf(what, sizeof what, "%s %s %lldx%lld k%d s%d%s, offset %d", hr_op_name(op), tname(t),
                         (long long)c.H, (long long)c.H, c.k, c.s, am ? " argmax" : "", off);
                if (run_both(op, t, set_pool, &c, what)) {
                    cmp_half(what, &c.y);
                    if (am) cmp_bytes(what, c.am32, c.amh, ny);
                }
                for (int acc = 0; acc < 2; acc++) {
                    c.acc = acc, c.dx = mk(nx, t, acc, -1, 1, off);
                    snprintf(what, sizeof what, "%s.backward %s %lldx%lld k%d s%d%s%s, offset %d", hr_op_name(op),
                             tname(t), (long long)c.H, (long long)c.H, c.k, c.s, am ? " argmax" : " from x",
                             acc ? " acc" : "", off);
                    if (run_both((hr_op)(op + 1), t, set_pool, &c, what)) cmp_half(what, &c.dx);
                }
                case_end();
            }
}

/* ---- BatchNorm: F32 statistics, the same in both ------------------------------------- */
typedef struct {
    pair x, y, dy, dx;
    float *gamma, *beta, *rm[2], *rv[2], *mean[2], *invstd[2], *dg[2], *db[2];
    int64_t N, C, HW;
    bool train, acc;
} bn_case;

static void set_bn(hr_kargs *a, bool half, void *ctx) {
    bn_case *c = ctx;
    hr_batchnorm_args *p = &a->bn;
    p->N = c->N, p->C = c->C, p->HW = c->HW, p->eps = 1e-5f, p->momentum = 0.1f, p->train = c->train;
    p->x = PTR(c->x, half), p->gamma = c->gamma, p->beta = c->beta;
    if (a->op == HR_OP_BATCHNORM) {
        p->y = PTR(c->y, half), p->running_mean = c->rm[half], p->running_var = c->rv[half];
        p->mean = c->mean[half], p->invstd = c->invstd[half];
        return;
    }
    p->saved_mean = c->mean[0], p->saved_invstd = c->invstd[0];
    p->dy = PTR(c->dy, half), p->dx = PTR(c->dx, half), p->dgamma = c->dg[half], p->dbeta = c->db[half];
    p->acc_dx = p->acc_dgamma = p->acc_dbeta = c->acc;
}

static void test_bn(hr_dtype t) {
    /* the last two: a channel in several splits (N HW >= 8192), with 16-byte
     * vectors and without (HW not a multiple of 8) */
    static const int shapes[4][3] = {{4, 3, 25}, {16, 5, 1}, {64, 3, 256}, {32, 2, 300}};
    char what[160];
    for (int sh = 0; sh < 4; sh++)
        for (int train = 1; train >= 0; train--) {
            bn_case c = {.N = shapes[sh][0], .C = shapes[sh][1], .HW = shapes[sh][2], .train = train};
            int64_t n = c.N * c.C * c.HW, C = c.C;
            c.x = mk(n, t, true, -1, 3, 0), c.y = mk(n, t, false, 0, 0, 0), c.dy = in(n, t, 1, 0);
            c.gamma = fbuf(C, 0.5f, 1.5f, NULL), c.beta = fbuf(C, -0.5f, 0.5f, NULL);
            float *rm, *rv;
            c.rm[0] = fbuf(C, -0.3f, 0.3f, &rm), c.rv[0] = fbuf(C, 0.5f, 1.5f, &rv);
            c.rm[1] = dalloc(4 * C), c.rv[1] = dalloc(4 * C);
            up(c.rm[1], rm, 4 * C), up(c.rv[1], rv, 4 * C);
            for (int k = 0; k < 2; k++) c.mean[k] = dalloc(4 * C), c.invstd[k] = dalloc(4 * C);
            snprintf(what, sizeof what, "BatchNorm %s (%lld, %lld, %lld) %s", tname(t), (long long)c.N, (long long)C,
                     (long long)c.HW, train ? "training" : "inference");
            if (run_both(HR_OP_BATCHNORM, t, set_bn, &c, what)) {
                cmp_half(what, &c.y);
                if (train) {
                    cmp_same(what, c.mean[0], c.mean[1], C), cmp_same(what, c.invstd[0], c.invstd[1], C);
                    cmp_same(what, c.rm[0], c.rm[1], C), cmp_same(what, c.rv[0], c.rv[1], C);
                }
            }
            for (int acc = 0; train && acc < 2; acc++) {
                c.acc = acc, c.dx = mk(n, t, acc, -1, 1, 0);
                float *g, *b;
                c.dg[0] = fbuf(C, -1, 1, &g), c.db[0] = fbuf(C, -1, 1, &b);
                c.dg[1] = dalloc(4 * C), c.db[1] = dalloc(4 * C);
                up(c.dg[1], g, 4 * C), up(c.db[1], b, 4 * C);
                snprintf(what, sizeof what, "BatchNorm.backward %s (%lld, %lld, %lld)%s", tname(t), (long long)c.N,
                         (long long)C, (long long)c.HW, acc ? " acc" : "");
                if (run_both(HR_OP_BATCHNORM_BWD, t, set_bn, &c, what)) {
                    cmp_half(what, &c.dx);
                    cmp_same(what, c.dg[0], c.dg[1], C), cmp_same(what, c.db[0], c.db[1], C);
                }
            }
            case_end();
        }
}

/* ---- Dropout, Copy, Add, Concat ---------------------------------------------------------- */
typedef struct {
    pair a, b, y;
    bool train, acc;
} ew_case;

static void set_ew(hr_kargs *x, bool half, void *ctx) {
    ew_case *c = ctx;
    switch (x->op) {
    case HR_OP_DROPOUT:
    case HR_OP_DROPOUT_BWD: {
        hr_dropout_args *p = &x->drop;
        p->n = c->a.n, p->p = 0.3f, p->scale = 1.0f / 0.7f, p->seed = 7, p->stream = 3, p->first = 100;
        p->train = c->train, p->acc = c->acc;
        if (x->op == HR_OP_DROPOUT) p->x = PTR(c->a, half), p->y = PTR(c->y, half);
        else p->dy = PTR(c->a, half), p->dx = PTR(c->y, half);
        break;
    }
    case HR_OP_COPY: x->copy = (hr_copy_args){PTR(c->a, half), PTR(c->y, half), c->a.n, c->acc}; break;
    case HR_OP_ADD: {
        hr_dtype dt = half ? c->a.t : HR_F32;
        x->add = (hr_add_args){PTR(c->a, half), PTR(c->b, half), PTR(c->y, half), c->a.n, dt, dt, dt};
        break;
    }
    default: break;
    }
}

/* Concat: inputs of 2, 3 and 1 channels of 7 values, 3 samples; backward
 * takes channels [2, 5) */
typedef struct {
    pair x[3], y, dx;
    bool acc;
} cat_case;

static void set_cat(hr_kargs *a, bool half, void *ctx) {
    cat_case *c = ctx;
    hr_concat_args *p = &a->cat;
    p->k = 3, p->N = 3, p->CY = 6, p->inner = 7, p->offset = 2, p->C = 3, p->acc = c->acc;
    for (int k = 0; k < 3; k++) p->x[k] = PTR(c->x[k], half), p->c[k] = k == 0 ? 2 : k == 1 ? 3 : 1;
    if (a->op == HR_OP_CONCAT) p->y = PTR(c->y, half);
    else p->dy = PTR(c->y, half), p->dx = PTR(c->dx, half);
}

static void test_ew(hr_dtype t) {
    char what[160];
    for (int off = 0; off < 2; off++) {
        int64_t n = 1037 + 40 * off;
        for (int train = 1; train >= 0; train--) {
            ew_case c = {in(n, t, 2, off), in(n, t, 2, off), mk(n, t, false, 0, 0, off), train, 0};
            snprintf(what, sizeof what, "Dropout %s %s, offset %d", tname(t), train ? "training" : "inference", off);
            /* y in a (half), b (F32): the backward of dy = x draws the same decisions: dx is y */
            uint16_t *a = hmalloc(2 * n), *a2 = hmalloc(2 * n), *b = hmalloc(4 * (size_t)n), *b2 = hmalloc(4 * (size_t)n);
            bool fwd = run_both(HR_OP_DROPOUT, t, set_ew, &c, what);
            if (fwd) {
                cmp_half(what, &c.y), down(a, c.y.h, 2 * n), down(b, c.y.f, 4 * (size_t)n), down(a2, c.a.h, 2 * n);
                CHECK(train || !memcmp(a, a2, 2 * n), "%s: y is not x", what); /* inference: y = x, bit for bit */
            }
            for (int acc = 0; train && acc < 2; acc++) {
                c.acc = acc, c.y = mk(n, t, acc, -1, 1, off);
                snprintf(what, sizeof what, "Dropout.backward %s%s, offset %d", tname(t), acc ? " acc" : "", off);
                if (!run_both(HR_OP_DROPOUT_BWD, t, set_ew, &c, what)) continue;
                cmp_half(what, &c.y);
                if (acc || !fwd) continue;
                down(a2, c.y.h, 2 * n), down(b2, c.y.f, 4 * (size_t)n);
                CHECK(!memcmp(a, a2, 2 * n) && !memcmp(b, b2, 4 * (size_t)n), "%s: dx of dy = x is not y", what);
            }
            case_end();
        }
        for (int acc = 0; acc < 3; acc++) { /* Copy, Copy adding, Add */
            hr_op op = acc < 2 ? HR_OP_COPY : HR_OP_ADD;
            ew_case c = {in(n, t, 2, off), in(n, t, 2, off), mk(n, t, acc == 1, -1, 1, off), 0, acc == 1};
            snprintf(what, sizeof what, "%s %s%s, offset %d", hr_op_name(op), tname(t), acc == 1 ? " acc" : "", off);
            if (run_both(op, t, set_ew, &c, what)) cmp_half(what, &c.y);
            case_end();
        }
        /* Add of an F32 a and a half b (a GPT's residual join under autocast),
         * and the other way round: F32 y = a + widened b, bit for bit */
        for (int swap = 0; swap < 2; swap++) {
            pair a = in(n, t, 2, off), b = in(n, t, 2, off);
            float *y = (float *)dalloc(4 * (size_t)n), *want = hmalloc(4 * (size_t)n);
            hr_kargs k;
            memset(&k, 0, sizeof k);
            k.op = HR_OP_ADD, k.dt = swap ? t : HR_F32;
            k.add = swap ? (hr_add_args){b.h, a.f, y, n, t, HR_F32, HR_F32} : (hr_add_args){a.f, b.h, y, n, HR_F32, t, HR_F32};
            for (int64_t i = 0; i < n; i++) want[i] = a.v[i] + b.v[i];
            snprintf(what, sizeof what, "Add F32 + %s%s, offset %d", tname(t), swap ? " (half first)" : "", off);
            if (run(&k, what)) {
                float *got = fget(y, n);
                CHECK(!memcmp(got, want, 4 * (size_t)n), "%s: not the F32 sum of the widened values", what);
            }
            case_end();
        }
    }
    cat_case c = {{in(42, t, 2, 0), in(63, t, 2, 0), in(21, t, 2, 0)}, mk(126, t, false, 0, 0, 0), {0}, false};
    snprintf(what, sizeof what, "Concat %s", tname(t));
    if (run_both(HR_OP_CONCAT, t, set_cat, &c, what)) cmp_half(what, &c.y);
    for (int acc = 0; acc < 2; acc++) {
        c.acc = acc, c.dx = mk(63, t, acc, -1, 1, 1);
        snprintf(what, sizeof what, "Concat.backward %s%s", tname(t), acc ? " acc" : "");
        if (run_both(HR_OP_CONCAT_BWD, t, set_cat, &c, what)) cmp_half(what, &c.dx);
    }
    case_end();
}

/* ---- LinearCrossEntropy on half activations ----------------------------------------
 * The head and its loss in one node, its gradients from the same pass: the
 * half kernels round the logits (and dlogits) to the element type as the
 * unfused Linear and loss did; against float64 on those rounded values: the
 * loss within 2^-10 (1 + |loss|), dx and dW within 2^-7 of their largest (a
 * rounding flip of a logit moves them that little; a wrong stride or padding
 * far more). 1037 classes: padded to 1040 (the weight's copy), dW made as
 * 1032 rows and 5, a row a block in shared memory (hrk_ce_rows_grad); 523:
 * the two passes over the piece that narrow rows take; 50,257 (GPT-2's): a
 * half row of 100 KB in shared memory, an F32 one (201 KB) in two passes;
 * pieces: test_cuda_ops. */
typedef struct {
    pair x, w, dx;
    int32_t *lab;
    float *loss, *dw;
    int64_t N, in, V;
} lce_case;

static void set_lce(hr_kargs *a, bool half, void *ctx) {
    lce_case *c = ctx;
    hr_linear_ce_args *p = &a->lce;
    p->N = c->N, p->in = c->in, p->out = c->V, p->scale = 1.0f, p->logits_dt = half ? c->x.t : HR_F32;
    p->x = PTR(c->x, half), p->w = PTR(c->w, half), p->labels = c->lab;
    p->loss = c->loss, p->dx = PTR(c->dx, half), p->dw = c->dw;
}

static void test_lce(hr_dtype t, int V) {
    enum { N = 150, IN = 24 };
    lce_case c = {in(N * IN, t, 2, 0), in(V * IN, t, 1, 0), mk(N * IN, t, false, 0, 0, 0), dalloc(4 * N), dalloc(4),
                  dalloc(4 * V * IN), N, IN, V};
    int32_t *lab = hmalloc(4 * N);
    for (int r = 0; r < N; r++) lab[r] = (int32_t)((r * 7919) % V);
    up(c.lab, lab, 4 * N);
    /* float64: logits rounded to t, their lse, the loss, dlogits rounded to t, dx and dW */
    double *lg = hmalloc(sizeof(double) * N * V), *lse = hmalloc(sizeof(double) * N), loss = 0;
    double *dx = hmalloc(sizeof(double) * N * IN), *dw = hmalloc(sizeof(double) * V * IN);
    double *z = hmalloc(sizeof(double) * V), *dx32 = hmalloc(sizeof(double) * N * IN); /* the F32 kernel's: no rounding */
    memset(dx, 0, sizeof(double) * N * IN), memset(dw, 0, sizeof(double) * V * IN);
    memset(dx32, 0, sizeof(double) * N * IN);
    for (int r = 0; r < N; r++) {
        double m = -INFINITY, s = 0, mz = -INFINITY, sz = 0;
        for (int j = 0; j < V; j++) {
            z[j] = 0;
            for (int k = 0; k < IN; k++) z[j] += (double)c.x.v[r * IN + k] * c.w.v[j * IN + k];
            lg[r * V + j] = value_of(bits_of((float)z[j], t), t);
            m = fmax(m, lg[r * V + j]);
            mz = fmax(mz, z[j]);
        }
        for (int j = 0; j < V; j++) s += exp(lg[r * V + j] - m), sz += exp(z[j] - mz);
        lse[r] = m + log(s);
        loss += (lse[r] - lg[r * V + lab[r]]) / N;
        for (int j = 0; j < V; j++) {
            double g = value_of(bits_of((float)((exp(lg[r * V + j] - lse[r]) - (j == lab[r])) / N), t), t);
            double g32 = (exp(z[j] - mz) / sz - (j == lab[r])) / N;
            for (int k = 0; k < IN; k++) {
                dx[r * IN + k] += g * c.w.v[j * IN + k];
                dx32[r * IN + k] += g32 * c.w.v[j * IN + k];
                dw[j * IN + k] += g * c.x.v[r * IN + k];
            }
        }
    }
    char what[96];
    snprintf(what, sizeof what, "LinearCrossEntropy %s, %d x %d -> %d", tname(t), N, IN, V);
    if (run_both(HR_OP_LINEAR_CE, t, set_lce, &c, what)) {
        float *got = fget(c.loss, 1);
        CHECK(fabs(got[0] - loss) <= 0x1p-10 * (1 + fabs(loss)), "%s: loss %.9g, float64 %.9g", what, (double)got[0],
              loss);
        uint16_t *hb = hmalloc(2 * N * IN);
        float *gw = fget(c.dw, V * IN);
        down(hb, c.dx.h, 2 * N * IN);
        double ex = 0, mx = 1e-30, ew = 0, mw = 1e-30;
        for (int i = 0; i < N * IN; i++) ex = fmax(ex, fabs(value_of(hb[i], t) - dx[i])), mx = fmax(mx, fabs(dx[i]));
        for (int i = 0; i < V * IN; i++) ew = fmax(ew, fabs(gw[i] - dw[i])), mw = fmax(mw, fabs(dw[i]));
        CHECK(ex <= 0x1p-7 * mx && ew <= 0x1p-7 * mw, "%s: dx off by %.3g of %.3g, dW by %.3g of %.3g", what,
              ex, mx, ew, mw);
        float *fx = fget(c.dx.f, N * IN); /* the F32 run's dx, against float64 without rounding */
        double ef = 0;
        for (int i = 0; i < N * IN; i++) ef = fmax(ef, fabs(fx[i] - dx32[i]));
        CHECK(ef <= 1e-5 * mx, "%s: the F32 kernel's dx off by %.3g of %.3g", what, ef, mx);
    }
    case_end();
}

/* ---- CrossEntropyLoss on half logits ---------------------------------------------------
 * The half kernels read the logits as the matrix product wrote them and do
 * the F32 kernel's arithmetic on the same (exactly widened) values, grouped
 * by their own vector width: dx within 1 ulp of the F32 kernel's rounded.
 * Both against float64: the loss within 2^-16 (1 + |loss|), dx within
 * 2^-16 k + u |dx| (k = scale / N): float exp's few ulps a term, far below a
 * wrong index or a lost rescaling. Rows of 3 columns (scalar), 1037 and
 * 50,257 (GPT-2's: a scalar head and tail around 16-byte vectors; offset 1
 * on odd rows shifts them), and -inf logits, which add nothing. */
typedef struct {
    pair x, dx;
    int32_t *lab;
    float *l32, *lh;
    int64_t N, C;
    float scale;
    bool acc;
} ce_case;

static void set_ce(hr_kargs *a, bool half, void *ctx) {
    ce_case *c = ctx;
    hr_loss_args *p = &a->loss;
    p->N = c->N, p->C = c->C, p->n = c->N * c->C, p->scale = c->scale, p->acc = c->acc;
    p->x = PTR(c->x, half), p->labels = c->lab;
    if (a->op == HR_OP_CROSS_ENTROPY) p->loss = half ? c->lh : c->l32;
    else p->dx = PTR(c->dx, half);
}

static void test_ce(hr_dtype t) {
    static const int64_t Cs[3] = {3, 1037, 50257};
    char what[160];
    for (int k = 0; k < 3; k++)
        for (int ninf = 0; ninf < 2; ninf++) {
            int64_t N = k == 2 ? 9 : 37, C = Cs[k], n = N * C;
            ce_case c = {in(n, t, 8, k & 1), mk(n, t, false, 0, 0, k & 1), dalloc(4 * N), dalloc(4), dalloc(4), N, C,
                         t == HR_F16 ? 4096.0f : 1.0f, false};
            int32_t *lab = hmalloc(4 * (size_t)N);
            for (int64_t r = 0; r < N; r++) lab[r] = (int32_t)((r * 7919) % C);
            if (ninf) { /* a third of each row's logits -inf, never the label's */
                uint16_t *b = hmalloc(2 * (size_t)n);
                for (int64_t i = 0; i < n; i++) {
                    if (i % 3 == 0 && i % C != lab[i / C]) c.x.v[i] = -INFINITY;
                    b[i] = bits_of(c.x.v[i], t);
                }
                up(c.x.h, b, 2 * (size_t)n), up(c.x.f, c.x.v, 4 * (size_t)n);
            }
            up(c.lab, lab, 4 * (size_t)N);
            /* the float64 reference: each row's log-sum-exp */
            double *lse = hmalloc(sizeof(double) * (size_t)N), want = 0;
            for (int64_t r = 0; r < N; r++) {
                const float *xr = c.x.v + r * C;
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < C; j++) m = xr[j] > m ? xr[j] : m;
                for (int64_t j = 0; j < C; j++) s += exp((double)xr[j] - m);
                lse[r] = m + log(s);
                want += (lse[r] - xr[lab[r]]) / (double)N;
            }
            snprintf(what, sizeof what, "CrossEntropyLoss %s, %lld x %lld%s", tname(t), (long long)N, (long long)C,
                     ninf ? ", -inf logits" : "");
            if (run_both(HR_OP_CROSS_ENTROPY, t, set_ce, &c, what)) {
                float *got = fget(c.lh, 1), *f32 = fget(c.l32, 1);
                CHECK(fabs(got[0] - want) <= 0x1p-16 * (1 + fabs(want)) &&
                          fabs(f32[0] - want) <= 0x1p-16 * (1 + fabs(want)),
                      "%s: loss %.9g (the F32 kernel's %.9g), float64 %.9g", what, (double)got[0], (double)f32[0], want);
            }
            for (int acc = 0; acc < 2; acc++) {
                c.acc = acc, c.dx = mk(n, t, acc, -1, 1, k & 1);
                float *before = acc ? c.dx.v : NULL;
                snprintf(what, sizeof what, "CrossEntropyLoss.backward %s, %lld x %lld%s%s", tname(t), (long long)N,
                         (long long)C, ninf ? ", -inf logits" : "", acc ? " acc" : "");
                if (!run_both(HR_OP_CROSS_ENTROPY_BWD, t, set_ce, &c, what)) continue;
                cmp_half(what, &c.dx);
                if (!acc) { /* dx over x (the plan's in place): the same bits */
                    pair xp = mk(n, t, false, 0, 0, k & 1);
                    uint16_t *b = hmalloc(2 * (size_t)n), *g0 = hmalloc(2 * (size_t)n), *g1 = hmalloc(2 * (size_t)n);
                    for (int64_t i = 0; i < n; i++) b[i] = bits_of(c.x.v[i], t);
                    up(xp.h, b, 2 * (size_t)n), up(xp.f, c.x.v, 4 * (size_t)n);
                    ce_case d = c;
                    d.x = d.dx = xp;
                    char w2[200];
                    snprintf(w2, sizeof w2, "%s, in place", what);
                    if (run_both(HR_OP_CROSS_ENTROPY_BWD, t, set_ce, &d, w2)) {
                        down(g0, xp.h, 2 * (size_t)n), down(g1, c.dx.h, 2 * (size_t)n);
                        CHECK(!memcmp(g0, g1, 2 * (size_t)n), "%s: not the bits of dx in its own bytes", w2);
                        cmp_same(w2, xp.f, c.dx.f, n);
                    }
                }
                float *got = half_values(&c.dx);
                double kk = (double)c.scale / (double)N, worst = 0;
                int64_t at = 0;
                for (int64_t i = 0; i < n; i++) {
                    int64_t r = i / C;
                    double e = (exp((double)c.x.v[i] - lse[r]) - (i % C == lab[r])) * kk + (before ? before[i] : 0);
                    double q = fabs(got[i] - e) / (0x1p-16 * kk + unit(t) * fabs(e));
                    if (!(q <= worst)) worst = q, at = i;
                }
                CHECK(worst <= 1, "%s: dx %.9g at %lld, float64 %.9g (%.3g times the bound)", what, (double)got[at],
                      (long long)at,
                      (exp((double)c.x.v[at] - lse[at / C]) - (at % C == lab[at / C])) * kk + (before ? before[at] : 0),
                      worst);
            }
            case_end();
        }
}

/* ---- Cast: the CPU's conversions, bit for bit -------------------------------------------- */
static void test_cast(void) {
    static const hr_dtype ts[3] = {HR_F32, HR_BF16, HR_F16};
    static const float special[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 70000.0f, -1e6f, 3e38f, 1e-5f,
                                    6e-8f, 3e-8f, -2.9802322e-08f, 1e-30f, 1.00390625f, 1.01171875f, 1.0009766f,
                                    1.0004883f, INFINITY, -INFINITY, NAN};
    int ns = (int)(sizeof special / sizeof *special);
    char what[160];
    for (int f = 0; f < 3; f++)
        for (int g = 0; g < 3; g++)
            for (int acc = 0; acc < 2; acc++)
                for (int off = 0; off < 2; off++) {
                    hr_dtype from = ts[f], to = ts[g];
                    size_t ef = hr_dtype_size(from), et = hr_dtype_size(to);
                    int64_t n = 1003;
                    char *x = hmalloc(ef * n), *y = hmalloc(et * n), *want = hmalloc(et * n), *got = hmalloc(et * n);
                    for (int64_t i = 0; i < n; i++) {
                        float v = i < ns ? special[i] : frand(-3, 3) * powf(2.0f, (float)(i % 40) - 20.0f);
                        hr_store_f(x, from, i, v);
                        hr_store_f(y, to, i, frand(-2, 2));
                        float s = hr_load_f(x, from, i);
                        hr_store_f(want, to, i, acc ? hr_load_f(y, to, i) + s : s);
                    }
                    char *dx = (char *)dalloc(ef * (n + 1)) + ef * off, *dy = (char *)dalloc(et * (n + 1)) + et * off;
                    up(dx, x, ef * n);
                    if (acc) up(dy, y, et * n);
                    hr_kargs a;
                    memset(&a, 0, sizeof a);
                    a.op = HR_OP_CAST, a.dt = from;
                    a.cast = (hr_cast_args){dx, dy, n, from, to, acc};
                    snprintf(what, sizeof what, "Cast %s to %s%s, offset %d", hr_dtype_name(from), hr_dtype_name(to),
                             acc ? " acc" : "", off);
                    if (run(&a, what)) {
                        down(got, dy, et * n);
                        int64_t bad = 0, at = -1;
                        for (int64_t i = 0; i < n; i++) {
                            float u = hr_load_f(got, to, i), w = hr_load_f(want, to, i);
                            bool same = memcmp(got + et * i, want + et * i, et) == 0 || (isnan(u) && isnan(w));
                            if (!same && at < 0) at = i;
                            bad += !same;
                        }
                        CHECK(bad == 0, "%s: %lld values differ from the CPU's; first at %lld: %g vs %g", what,
                              (long long)bad, (long long)at, at < 0 ? 0.0 : (double)hr_load_f(got, to, at),
                              at < 0 ? 0.0 : (double)hr_load_f(want, to, at));
                    }
                    case_end();
                }
}

/* ---- Linear and Conv2d: against the exact values ----------------------------------------- */
static int64_t max_call; /* the backend's HR_CUDA_MAX_CALL_ELEMS (0: none) */

/* The products' outputs, each with its exact value e, the sum S of its terms'
 * magnitudes, and P (dW of Conv2d) the sum of the library calls' |partial|. */
typedef struct {
    double *e, *S, *P;
    int64_t n, k; /* values, terms a value sums */
} ref;
static ref ref_new(int64_t n, int64_t k, const float *old) {
    ref r = {hmalloc(8 * (size_t)n), hmalloc(8 * (size_t)n), hmalloc(8 * (size_t)n), n, k};
    for (int64_t i = 0; old && i < n; i++) r.e[i] = old[i], r.S[i] = fabs(old[i]);
    return r;
}
static void term(ref *r, int64_t i, double v) { r->e[i] += v, r->S[i] += fabs(v); }

/* The F32 kernel's output and the half kernel's (half: in t; dW, db: F32)
 * against r. `extra`: u |b| for a half y with a bias, u P for Conv2d's dW. */
static void check_out(const char *what, const ref *r, const float *got32, const float *goth, hr_dtype t, bool half_out,
                      const double *extra) {
    char w[200];
    snprintf(w, sizeof w, "%s, F32 kernel", what);
    cmp_bound(w, got32, r->e, slack_of(r->S, NULL, r->n, r->k, 1e-37), r->n, 0, 1);
    snprintf(w, sizeof w, "%s, %s kernel", what, tname(t));
    cmp_bound(w, goth, r->e, slack_of(r->S, extra, r->n, r->k, tiny(t)), r->n, half_out ? unit(t) : 0, half_out ? 0 : 1);
}

typedef struct {
    pair x, w, y, dy, dx;
    float *b, *bh, *dw[2], *db[2]; /* the bias (device, host); gradients: [0] the F32 kernel's, [1] the half one's */
    hr_conv_args g;                /* the shape (Linear: N, C = in, K = out) */
    bool acc;
} prod_case;

static void set_prod(hr_kargs *a, bool half, void *ctx) {
    prod_case *c = ctx;
    bool fwd = a->op == HR_OP_LINEAR || a->op == HR_OP_CONV2D;
    const void *x = PTR(c->x, half), *w = PTR(c->w, half), *dy = PTR(c->dy, half);
    void *y = PTR(c->y, half), *dx = PTR(c->dx, half);
    float *dw = c->dw[half], *db = c->b ? c->db[half] : NULL;
    if (a->op == HR_OP_LINEAR || a->op == HR_OP_LINEAR_BWD) {
        a->linear = (hr_linear_args){.x = x, .w = w, .b = fwd ? c->b : NULL, .dy = fwd ? NULL : dy, .y = fwd ? y : NULL,
                                     .dx = fwd ? NULL : dx, .dw = fwd ? NULL : dw, .db = fwd ? NULL : db, .N = c->g.N,
                                     .in = c->g.C, .out = c->g.K, .acc_dx = c->acc, .acc_dw = c->acc, .acc_db = c->acc};
        return;
    }
    a->conv = c->g;
    hr_conv_args *v = &a->conv;
    v->x = x, v->w = w;
    if (fwd) v->b = c->b, v->y = y;
    else v->dy = dy, v->dx = dx, v->dw = dw, v->db = db, v->acc_dx = v->acc_dw = v->acc_db = c->acc;
}

/* A Linear (kh = 0) or Conv2d of shape g, forward, then backward with and
 * without adding into the gradients. */
static void test_product(hr_dtype t, hr_conv_args g, bool bias) {
    bool lin = g.kh == 0;
    int64_t N = g.N, C = g.C, H = lin ? 1 : g.H, W = lin ? 1 : g.W, K = g.K, OH = lin ? 1 : g.OH, OW = lin ? 1 : g.OW;
    int kh = lin ? 1 : g.kh, kw = lin ? 1 : g.kw, sh = lin ? 1 : g.sh, sw = lin ? 1 : g.sw, ph = g.ph, pw = g.pw;
    int64_t nx = N * C * H * W, nw = K * C * kh * kw, ny = N * K * OH * OW;
    prod_case c = {.g = g};
    c.x = in(nx, t, 1, 0), c.w = in(nw, t, 0.5f, 0), c.y = mk(ny, t, false, 0, 0, 0);
    if (bias) c.b = fbuf(K, -1, 1, &c.bh);
    int64_t per = C * H * W > K * OH * OW ? C * H * W : K * OH * OW, chunk = max_call ? max_call / per : N;
    if (lin) chunk = N; /* Linear's dW is F32 in every call */
    chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
    char what[160], kind[96];
    if (lin)
        snprintf(kind, sizeof kind, "Linear %s (%lld, %lld -> %lld)%s", tname(t), (long long)N, (long long)C,
                 (long long)K, bias ? " bias" : "");
    else
        snprintf(kind, sizeof kind, "Conv2d %s N%lld C%lld %lldx%lld K%lld k%d s%d p%d%s", tname(t), (long long)N,
                 (long long)C, (long long)H, (long long)W, (long long)K, kh, sh, ph, bias ? " bias" : "");
    /* the exact values, from the host copies */
    ref ry = ref_new(ny, C * kh * kw + 1, NULL);
    double *ub = hmalloc(8 * (size_t)ny);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t i = ((n * K + k) * OH + oh) * OW + ow;
                    if (bias) term(&ry, i, c.bh[k]), ub[i] = unit(t) * fabs(c.bh[k]);
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int a = 0; a < kh; a++)
                            for (int b = 0; b < kw; b++) {
                                int64_t h = oh * sh - ph + a, w = ow * sw - pw + b;
                                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                                term(&ry, i, (double)c.x.v[((n * C + ci) * H + h) * W + w] *
                                                 c.w.v[((k * C + ci) * kh + a) * kw + b]);
                            }
                }
    snprintf(what, sizeof what, "%s", kind);
    if (run_both(lin ? HR_OP_LINEAR : HR_OP_CONV2D, t, set_prod, &c, what))
        check_out(what, &ry, fget(c.y.f, ny), half_values(&c.y), t, true, bias ? ub : NULL);
    for (int acc = 0; acc < 2; acc++) {
        c.acc = acc;
        c.dy = in(ny, t, 1, 0), c.dx = mk(nx, t, acc, -1, 1, 0);
        float *old_w = NULL, *old_b = NULL;
        for (int k = 0; k < 2; k++) {
            c.dw[k] = k ? dalloc(4 * nw) : fbuf(nw, -1, 1, &old_w);
            c.db[k] = k ? dalloc(4 * K) : fbuf(K, -1, 1, &old_b);
        }
        up(c.dw[1], old_w, 4 * nw), up(c.db[1], old_b, 4 * K);
        ref rx = ref_new(nx, K * kh * kw, acc ? c.dx.v : NULL), rw = ref_new(nw, N * OH * OW, acc ? old_w : NULL),
            rb = ref_new(K, 0, acc ? old_b : NULL);
        double *part = hmalloc(8 * (size_t)nw);
        for (int64_t n0 = 0; n0 < N; n0 += chunk) { /* dW a library call at a time (its partial rounded to t) */
            memset(part, 0, 8 * (size_t)nw);
            for (int64_t n = n0; n < N && n < n0 + chunk; n++)
                for (int64_t k = 0; k < K; k++)
                    for (int64_t oh = 0; oh < OH; oh++)
                        for (int64_t ow = 0; ow < OW; ow++) {
                            double gv = c.dy.v[((n * K + k) * OH + oh) * OW + ow];
                            term(&rb, k, gv);
                            for (int64_t ci = 0; ci < C; ci++)
                                for (int a = 0; a < kh; a++)
                                    for (int b = 0; b < kw; b++) {
                                        int64_t h = oh * sh - ph + a, w = ow * sw - pw + b;
                                        if (h < 0 || h >= H || w < 0 || w >= W) continue;
                                        int64_t xi = ((n * C + ci) * H + h) * W + w, wi = ((k * C + ci) * kh + a) * kw + b;
                                        term(&rx, xi, gv * c.w.v[wi]);
                                        term(&rw, wi, gv * c.x.v[xi]);
                                        part[wi] += gv * c.x.v[xi];
                                    }
                        }
            for (int64_t i = 0; i < nw; i++) rw.P[i] += unit(t) * fabs(part[i]) + tiny(t);
        }
        snprintf(what, sizeof what, "%s.backward%s", kind, acc ? " acc" : "");
        char w2[200];
        hr_op bop = lin ? HR_OP_LINEAR_BWD : HR_OP_CONV2D_BWD; /* legacy cuDNN: F32 copies, no half kernel */
        if (!be->takes_half(be, bop, t) || !run_both(bop, t, set_prod, &c, what)) continue;
        snprintf(w2, sizeof w2, "%s dx", what);
        /* adding into a half dx may round the new sum first (as PyTorch adds two half gradients): one more u */
        double *twice = acc ? hmalloc(8 * (size_t)nx) : NULL;
        for (int64_t i = 0; acc && i < nx; i++) twice[i] = unit(t) * rx.S[i];
        check_out(w2, &rx, fget(c.dx.f, nx), half_values(&c.dx), t, true, twice);
        snprintf(w2, sizeof w2, "%s dW", what);
        check_out(w2, &rw, fget(c.dw[0], nw), fget(c.dw[1], nw), t, false, lin ? NULL : rw.P);
        if (bias) {
            snprintf(w2, sizeof w2, "%s db", what);
            check_out(w2, &rb, fget(c.db[0], K), fget(c.db[1], K), t, false, NULL);
        }
    }
    case_end();
}

static void test_products(hr_dtype t) {
    /* the last: 1037 features without a bias, rows not 16-byte aligned: through padded rows (cuda_gemm.c) */
    hr_conv_args lin[4] = {{.N = 24, .C = 40, .K = 12}, {.N = 7, .C = 200, .K = 9}, {.N = 5, .C = 16, .K = 64},
                           {.N = 37, .C = 24, .K = 1037}};
    for (int i = 0; i < 4; i++) test_product(t, lin[i], i < 2);
    hr_conv_args cv[3] = {
        {.N = 3, .C = 4, .H = 9, .W = 9, .K = 5, .OH = 9, .OW = 9, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
        {.N = 2, .C = 3, .H = 10, .W = 10, .K = 4, .OH = 4, .OW = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2},
        {.N = 5, .C = 8, .H = 5, .W = 5, .K = 6, .OH = 5, .OW = 5, .kh = 1, .kw = 1, .sh = 1, .sw = 1}};
    for (int i = 0; i < 3; i++) test_product(t, cv[i], i != 1);
}

/* ---- takes_half: exactly the ops autocast leaves in the half type ------------------------ */
static void test_takes_half(void) {
    static const hr_op half_ops[] = {
        HR_OP_LINEAR, HR_OP_LINEAR_BWD, HR_OP_CONV2D, HR_OP_CONV2D_BWD, HR_OP_RELU, HR_OP_RELU_BWD,
        HR_OP_LEAKY_RELU, HR_OP_LEAKY_RELU_BWD, HR_OP_GELU, HR_OP_GELU_BWD, HR_OP_SILU, HR_OP_SILU_BWD,
        HR_OP_SIGMOID, HR_OP_SIGMOID_BWD, HR_OP_TANH, HR_OP_TANH_BWD, HR_OP_MAXPOOL, HR_OP_MAXPOOL_BWD,
        HR_OP_AVGPOOL, HR_OP_AVGPOOL_BWD, HR_OP_BATCHNORM, HR_OP_BATCHNORM_BWD, HR_OP_DROPOUT, HR_OP_DROPOUT_BWD,
        HR_OP_RESHAPE, HR_OP_COPY, HR_OP_ADD, HR_OP_CONCAT, HR_OP_CONCAT_BWD, HR_OP_CAST, HR_OP_ATTENTION,
        HR_OP_ATTENTION_BWD, HR_OP_CROSS_ENTROPY, HR_OP_CROSS_ENTROPY_BWD, HR_OP_LINEAR_CE};
    CHECK(be->takes_half != NULL, "the CUDA backend has no takes_half");
    if (!be->takes_half) return;
    int wrong = 0;
    for (int op = 0; op < HR_OP_COUNT; op++) {
        bool want = false;
        for (size_t i = 0; i < sizeof half_ops / sizeof *half_ops; i++) want |= half_ops[i] == (hr_op)op;
        static const hr_dtype ts[4] = {HR_BF16, HR_F16, HR_F32, HR_I32};
        for (int k = 0; k < 4; k++) {
            bool got = be->takes_half(be, (hr_op)op, ts[k]), w = want && k < 2;
            if (got != w || got != hr_gpu_takes_half((hr_op)op, ts[k])) {
                wrong++;
                fprintf(stderr, "FAIL takes_half(%s, %s) = %d; want %d (hr_gpu_takes_half: %d)\n",
                        hr_op_name((hr_op)op), hr_dtype_name(ts[k]), got, w, hr_gpu_takes_half((hr_op)op, ts[k]));
            }
        }
    }
    CHECK(wrong == 0, "takes_half is wrong for %d (op, type) pairs", wrong);
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device (%s)\n", hr_backend_cuda_new(NULL) ? "?" : hr_last_error());
        TEST_END();
    }
    setenv("HR_CUDA_POISON", "1", 1); /* the arena starts as NaN */
    /* every op on the default backend; the products also with the batch cut
     * into library calls of 900 elements and split-K from k = 32, and on
     * cuDNN's legacy API */
    static const char *setups[3][3] = {{"default backend", NULL, NULL},
                                       {"calls of 900 elements, split-K", "HR_CUDA_MAX_CALL_ELEMS=900", "HR_CUDA_SPLITK=32"},
                                       {"cuDNN legacy API", "HR_CUDNN_API=legacy", NULL}};
    for (int s = 0; s < 3; s++) {
        char env[2][64];
        for (int k = 0; k < 2; k++)
            if (setups[s][k + 1]) {
                snprintf(env[k], sizeof env[k], "%s", setups[s][k + 1]);
                char *eq = strchr(env[k], '=');
                *eq = 0;
                setenv(env[k], eq + 1, 1);
            }
        max_call = s == 1 ? 900 : 0;
        hr_config_t cfg = hr_config_default();
        cfg.device = HR_DEVICE_CUDA;
        be = hr_backend_cuda_new(&cfg);
        for (int k = 0; k < 2; k++)
            if (setups[s][k + 1]) unsetenv(env[k]);
        CHECK(be != NULL, "%s: %s", setups[s][0], hr_last_error());
        if (!be) continue;
        void *base = NULL;
        hr_status st = be->arena_alloc(be, dsize, &base);
        CHECK(st == HR_OK, "%s: arena: %s", setups[s][0], hr_last_error());
        dbase = base;
        worst_of_bound[0] = worst_of_bound[1] = 0;
        for (int ti = 0; st == HR_OK && ti < 2; ti++) {
            hr_dtype t = ti ? HR_F16 : HR_BF16;
            if (s == 0) {
                if (ti == 0) test_takes_half(), test_cast();
                test_act(t), test_pool(t), test_bn(t), test_ew(t), test_ce(t), test_lce(t, 1037), test_lce(t, 523), test_lce(t, 50257);
            }
            test_products(t);
        }
        printf("  %-34s products: worst error / bound %.3f (half outputs), %.3f (F32 outputs)\n", setups[s][0],
               worst_of_bound[0], worst_of_bound[1]);
        if (base) be->arena_free(be, base);
        be->free(be);
    }
    TEST_END();
}
