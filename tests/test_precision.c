/* test_precision.c — gradient accumulation and mixed precision through the
 * public API on the CPU, against a float64 forward and backward written here
 * (an MLP, a small CNN): accumulation gives the whole batch's gradients and
 * loss curve; the plan at (B, K) is the plan at B/K; GradScaler's skip/halve/
 * double sequence; bf16 and fp16 gradients within bounds derived below; an
 * fp16 run's scaler survives a checkpoint; the CLI's resume rules.
 *
 * Bounds. Every gradient element is compared with the float64 reference g
 * (or another run's) using two magnitudes that the reference carries beside
 * each value v (first-order running error analysis, as in Higham's book):
 *   A(v) >= |v|: v evaluated on magnitudes (|W|, |x|, sums of |terms|; for
 *     the loss gradient dz = s(p - y): |dz| + s p (1 + 2 max_c A(z_c)), since
 *     a softmax moves by at most 2 p max|dz| when z moves by dz);
 *   F(v): what a kink can flip at full size: a ReLU input or a max-pool gap
 *     within the forward's error (gamma A) may take the other side in a run,
 *     routing its whole gradient elsewhere; F carries those gradients on.
 * A computation whose roundings have unit u and whose longest chain of
 * dependent roundings (sums counted by their length) is n, is within
 * gamma A + F of g, gamma = n u. fp32: n32 = batch (x positions) + the
 * dot-product lengths of the forward and backward + 3 classes + 20.
 * Mixed precision adds the half roundings on any path to a gradient: input,
 * weight copy and output of each product, the loss gradient's and the
 * backward products' half outputs, the input read again for dW: at most 9 in
 * these models, 12 taken; gamma_h = 12 u_h + n32 u32, with u_h = 2^-8 (bf16:
 * 8 significant bits) or 2^-11 (fp16: 11). Two runs a and b: |a - b| <=
 * (gamma_a + gamma_b) A + 2F. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define U32 (1.0 / 16777216.0)
#define UH(prec) ((prec) == HR_PREC_BF16 ? 1.0 / 256 : 1.0 / 2048)

/* ---- the models ------------------------------------------------------------------ */
typedef struct {
    bool cnn;
    int B, D, H, C; /* MLP: in D, hidden H, classes C. CNN: 1x6x6 -> Conv(1,3,3,p1) -> ReLU -> MaxPool(2) -> 27 -> C */
    float dropout;  /* MLP: Dropout(p) after the ReLU, 0: none */
    int last;       /* the last Linear's layer index */
} spec;

static const spec MLP = {false, 32, 20, 16, 5, 0, 2};
static const spec MLP_DROP = {false, 32, 20, 16, 5, 0.5f, 3};
static const spec CNN = {true, 8, 36, 27, 4, 0, 4};

static hr_model_t *build(const spec *m) {
    hr_model_t *md = hr_model_new(m->cnn ? "cnn" : "mlp");
    int x = hr_input(md, "x", m->cnn ? 3 : 1, m->cnn ? (int64_t[]){1, 6, 6} : (int64_t[]){m->D});
    if (m->cnn) {
        x = hr_conv2d(md, NULL, x, 1, 3, 3, 1, 1, true);
        x = hr_relu(md, NULL, x);
        x = hr_maxpool2d(md, NULL, x, 2, 2);
        x = hr_flatten(md, NULL, x);
    } else {
        x = hr_linear(md, NULL, x, m->D, m->H, true);
        x = hr_relu(md, NULL, x);
        if (m->dropout > 0) x = hr_dropout(md, NULL, x, m->dropout);
    }
    x = hr_linear(md, NULL, x, m->H, m->C, true);
    hr_loss_cross_entropy(md, x, m->C);
    return md;
}

/* Batch `step`: inputs in [-1, 1), labels in [0, C). */
static void batch(const spec *m, int step, float *x, int32_t *lab) {
    uint64_t r = 0x9E3779B97F4A7C15ULL * (uint64_t)(step + 1);
    for (int i = 0; i < m->B * m->D; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(r >> 40) / 8388608.0 - 1.0);
    }
    for (int i = 0; i < m->B; i++) lab[i] = (int32_t)((i * 7 + step * 3) % m->C);
}

static hr_config_t config(const spec *m, hr_precision prec, int K) {
    hr_config_t c = hr_config_default();
    c.batch = m->B, c.precision = prec, c.accumulate = K, c.keep_grads = true, c.seed = 5;
    c.optim.kind = HR_OPTIM_SGD, c.optim.lr = 0.05f, c.optim.momentum = 0.9f;
    return c;
}

static hr_session_t *session(const spec *m, const hr_config_t *c) {
    hr_model_t *md = build(m);
    hr_session_t *s = hr_compile(md, c);
    hr_model_free(md);
    CHECK(s != NULL, "compile (%s, K %d): %s", hr_precision_name(c->precision), c->accumulate, hr_last_error());
    if (s && hr_session_alloc(s) != HR_OK) {
        CHECK(false, "alloc: %s", hr_last_error());
        hr_session_free(s);
        return NULL;
    }
    return s;
}

/* ---- the float64 reference: values, magnitudes A, flips F ------------------------------- */
enum { W1, B1, W2, B2, NP };
typedef struct {
    const spec *m;
    double p[NP][1024];      /* parameters: first layer's weight, bias; last Linear's */
    int64_t n[NP];
    const uint8_t *mask;     /* Dropout: kept elements of the whole batch (B x H), or NULL */
    double gamma;            /* the forward's error, for what a kink may flip */
    double loss, loss_bound; /* mean loss; its error over gamma: 1 + 2 max A(z) */
    double g[NP][1024], A[NP][1024], F[NP][1024];
} ref;

static const char *pname(const spec *m, int k, char *buf) {
    sprintf(buf, "%d.%s", k < W2 ? 0 : m->last, k % 2 ? "bias" : "weight");
    return buf;
}

static void read_params(hr_session_t *s, ref *r) {
    char nm[32];
    for (int k = 0; k < NP; k++) {
        int i = hr_state_find(s, pname(r->m, k, nm));
        int64_t n = 1;
        for (int d = 0; d < hr_state_ndim(s, i); d++) n *= hr_state_dim(s, i, d);
        float buf[1024];
        r->n[k] = n;
        CHECK(i >= 0 && n <= 1024 && hr_state_read(s, i, buf) == HR_OK, "read %s: %s", nm, hr_last_error());
        for (int64_t j = 0; j < n && j < 1024; j++) r->p[k][j] = buf[j];
    }
}

/* y (N,out) = x W^T + b; with magnitudes */
static void lin_f(const double *x, const double *ax, int N, int in, const double *W, const double *b, int out,
                  double *y, double *ay) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) {
            double v = b[o], a = fabs(b[o]);
            for (int j = 0; j < in; j++) v += x[i * in + j] * W[o * in + j], a += ax[i * in + j] * fabs(W[o * in + j]);
            y[i * out + o] = v, ay[i * out + o] = a;
        }
}
/* Linear's backward: dW, db (value, A, F) and dx (NULL: not needed) */
static void lin_b(const double *dy, const double *ady, const double *fdy, const double *x, const double *ax, int N,
                  int in, const double *W, int out, ref *r, int kw, double *dx, double *adx, double *fdx) {
    for (int o = 0; o < out; o++)
        for (int i = 0; i < N; i++) {
            int q = i * out + o;
            r->g[kw + 1][o] += dy[q], r->A[kw + 1][o] += ady[q], r->F[kw + 1][o] += fdy[q];
            for (int j = 0; j < in; j++) {
                r->g[kw][o * in + j] += dy[q] * x[i * in + j];
                r->A[kw][o * in + j] += ady[q] * ax[i * in + j];
                r->F[kw][o * in + j] += fdy[q] * ax[i * in + j];
                if (dx) {
                    dx[i * in + j] += dy[q] * W[o * in + j];
                    adx[i * in + j] += ady[q] * fabs(W[o * in + j]);
                    fdx[i * in + j] += fdy[q] * fabs(W[o * in + j]);
                }
            }
        }
}

static double scratch[1 << 17];
static void run_ref(ref *r, const float *xf, const int32_t *lab) {
    const spec *m = r->m;
    int B = m->B, H = m->H, C = m->C, D = m->D, NH = B * (m->cnn ? 108 : H);
    double *x = scratch, *ax = x + B * D, *h = ax + B * D, *ah = h + NH, *d = ah + NH, *ad = d + NH, *z = ad + NH,
           *az = z + B * C, *dz = az + B * C, *adz = dz + B * C, *fdz = adz + B * C, *dd = fdz + B * C,
           *add = dd + NH, *fdd = add + NH, *dh = fdd + NH, *adh = dh + NH, *fdh = adh + NH;
    memset(scratch, 0, sizeof scratch);
    memset(r->g, 0, sizeof r->g), memset(r->A, 0, sizeof r->A), memset(r->F, 0, sizeof r->F);
    for (int i = 0; i < B * D; i++) x[i] = xf[i], ax[i] = fabs(x[i]);
    int arg[8 * 27];
    bool tie[8 * 27] = {0};
    if (m->cnn) { /* conv (B,3,6,6), ReLU; pool into d (B,27) */
        for (int n = 0; n < B; n++)
            for (int o = 0; o < 3; o++)
                for (int i = 0; i < 36; i++) {
                    double v = r->p[B1][o], a = fabs(v);
                    for (int ki = 0; ki < 3; ki++)
                        for (int kj = 0; kj < 3; kj++) {
                            int y = i / 6 + ki - 1, xx = i % 6 + kj - 1;
                            if (y < 0 || y > 5 || xx < 0 || xx > 5) continue;
                            v += r->p[W1][o * 9 + ki * 3 + kj] * x[n * 36 + y * 6 + xx];
                            a += fabs(r->p[W1][o * 9 + ki * 3 + kj]) * ax[n * 36 + y * 6 + xx];
                        }
                    int q = (n * 3 + o) * 36 + i;
                    h[q] = v > 0 ? v : 0, ah[q] = v > 0 || fabs(v) <= r->gamma * a ? a : 0;
                }
        for (int w = 0; w < B * 27; w++) { /* window (n, o, wi, wj): the first maximum, ties within the error */
            int n = w / 27, o = w / 9 % 3, wi = w % 9 / 3, wj = w % 3, base = (n * 3 + o) * 36 + wi * 12 + wj * 2;
            int best = base;
            for (int k = 1; k < 4; k++)
                if (h[base + k / 2 * 6 + k % 2] > h[best]) best = base + k / 2 * 6 + k % 2;
            for (int k = 0; k < 4; k++) {
                int e = base + k / 2 * 6 + k % 2;
                if (e != best && h[best] - h[e] <= r->gamma * (ah[best] + ah[e])) tie[w] = true;
            }
            arg[w] = best, d[w] = h[best], ad[w] = ah[best];
        }
    } else {
        lin_f(x, ax, B, D, r->p[W1], r->p[B1], H, h, ah);
        for (int i = 0; i < NH; i++) {
            double keep = r->mask ? 2.0 * r->mask[i] : 1.0;
            d[i] = h[i] > 0 ? h[i] * keep : 0;
            ad[i] = h[i] > 0 || fabs(h[i]) <= r->gamma * ah[i] ? ah[i] * keep : 0;
        }
    }
    lin_f(d, ad, B, H, r->p[W2], r->p[B2], C, z, az);
    r->loss = 0, r->loss_bound = 1;
    for (int i = 0; i < B; i++) { /* CrossEntropyLoss (mean) and its gradient, s = 1/B */
        double mx = z[i * C], se = 0, amax = 0;
        for (int c = 0; c < C; c++) mx = z[i * C + c] > mx ? z[i * C + c] : mx, amax = az[i * C + c] > amax ? az[i * C + c] : amax;
        for (int c = 0; c < C; c++) se += exp(z[i * C + c] - mx);
        r->loss += (log(se) + mx - z[i * C + lab[i]]) / B;
        r->loss_bound = fmax(r->loss_bound, 1 + 2 * amax);
        for (int c = 0; c < C; c++) {
            double p = exp(z[i * C + c] - mx) / se;
            dz[i * C + c] = (p - (c == lab[i])) / B;
            adz[i * C + c] = fabs(dz[i * C + c]) + p * (1 + 2 * amax) / B;
        }
    }
    lin_b(dz, adz, fdz, d, ad, B, H, r->p[W2], C, r, W2, dd, add, fdd);
    if (m->cnn) { /* pool's backward routes to the maximum (F: to every near-tie too), ReLU's, conv's dW */
        for (int w = 0; w < B * 27; w++) {
            int n = w / 27, o = w / 9 % 3, wi = w % 9 / 3, wj = w % 3, base = (n * 3 + o) * 36 + wi * 12 + wj * 2;
            dh[arg[w]] += dd[w], adh[arg[w]] += add[w], fdh[arg[w]] += fdd[w];
            for (int k = 0; tie[w] && k < 4; k++) fdh[base + k / 2 * 6 + k % 2] += add[w] + fdd[w];
        }
        for (int q = 0; q < B * 108; q++) { /* ReLU: h is its output; an input near 0 may flip */
            bool on = h[q] > 0, near = ah[q] > 0 && h[q] <= r->gamma * ah[q];
            if (near) fdh[q] += adh[q];
            if (!on && !near) dh[q] = adh[q] = fdh[q] = 0;
            if (!on) dh[q] = 0;
        }
        for (int n = 0; n < B; n++)
            for (int o = 0; o < 3; o++)
                for (int i = 0; i < 36; i++) {
                    int q = (n * 3 + o) * 36 + i;
                    r->g[B1][o] += dh[q], r->A[B1][o] += adh[q], r->F[B1][o] += fdh[q];
                    for (int ki = 0; ki < 3; ki++)
                        for (int kj = 0; kj < 3; kj++) {
                            int y = i / 6 + ki - 1, xx = i % 6 + kj - 1, e = o * 9 + ki * 3 + kj;
                            if (y < 0 || y > 5 || xx < 0 || xx > 5) continue;
                            r->g[W1][e] += dh[q] * x[n * 36 + y * 6 + xx];
                            r->A[W1][e] += adh[q] * ax[n * 36 + y * 6 + xx];
                            r->F[W1][e] += fdh[q] * ax[n * 36 + y * 6 + xx];
                        }
                }
    } else {
        for (int i = 0; i < NH; i++) {
            double keep = r->mask ? 2.0 * r->mask[i] : 1.0;
            bool on = h[i] > 0, near = fabs(h[i]) <= r->gamma * ah[i];
            dh[i] = on ? dd[i] * keep : 0;
            adh[i] = on || near ? add[i] * keep : 0;
            fdh[i] = on || near ? fdd[i] * keep + (near ? add[i] * keep : 0) : 0;
        }
        lin_b(dh, adh, fdh, x, ax, B, D, r->p[W1], H, r, W1, NULL, NULL, NULL);
    }
}

/* n32 of the header: the longest chain of fp32 roundings */
static double gamma32(const spec *m) { return (m->cnn ? m->B * 36 + 9 + 27 : m->B + m->D + m->H) * U32 + (3 * m->C + 20) * U32; }
static double gamma_of(const spec *m, hr_precision p) { return gamma32(m) + (p == HR_PREC_FP32 ? 0 : 12 * UH(p)); }

/* Every gradient of s against want (NULL: the reference's g): |got - want| <=
 * gamma A + k_f F. Returns the worst ratio error / bound. */
static double check_grads(hr_session_t *s, const ref *r, float (*want)[1024], double gamma, double k_f,
                          const char *what) {
    double worst = 0;
    char nm[32];
    for (int k = 0; k < NP; k++) {
        float got[1024];
        CHECK(hr_grad_read(s, pname(r->m, k, nm), got) == HR_OK, "grad_read %s: %s", nm, hr_last_error());
        int bad = 0, first = -1;
        for (int64_t j = 0; j < r->n[k]; j++) {
            double w = want ? want[k][j] : r->g[k][j], bound = gamma * r->A[k][j] + k_f * r->F[k][j];
            double e = fabs(got[j] - w);
            if (!(e <= bound)) bad++, first = first < 0 ? (int)j : first;
            if (bound > 0 && e / bound > worst) worst = e / bound;
        }
        CHECK(bad == 0, "%s: %s: %d of %lld gradients out of bound (first [%d]: %.9g vs %.9g, bound %.3g)", what, nm, bad,
              (long long)r->n[k], first, first >= 0 ? got[first] : 0.0, first >= 0 ? (want ? want[k][first] : r->g[k][first]) : 0.0,
              first >= 0 ? gamma * r->A[k][first] + k_f * r->F[k][first] : 0.0);
    }
    return worst;
}

static void grads_of(hr_session_t *s, const spec *m, float (*g)[1024]) {
    char nm[32];
    for (int k = 0; k < NP; k++) CHECK(hr_grad_read(s, pname(m, k, nm), g[k]) == HR_OK, "grad_read: %s", hr_last_error());
}

/* ---- (a) accumulation is exact --------------------------------------------------------- */
#define STEPS 20
static void test_accumulation(const spec *m) {
    float *x = malloc(sizeof(float) * (size_t)m->B * m->D);
    int32_t lab[64];
    static ref r, r1;
    static float g1[NP][1024];
    double curve1[STEPS], band = 1e-5;
    const char *name = m->cnn ? "CNN" : "MLP";
    for (int K = 1; K <= 8; K *= 2) {
        hr_config_t c = config(m, HR_PREC_FP32, K);
        hr_session_t *s = session(m, &c);
        if (!s) break;
        r.m = m, r.mask = NULL, r.gamma = gamma32(m);
        read_params(s, &r);
        if (K == 1) r1 = r;
        CHECK(memcmp(r.p, r1.p, sizeof r.p) == 0, "%s K=%d: initial parameters differ from K=1's", name, K);
        double worst_ref = 0, worst_k1 = 0, worst_curve = 0;
        for (int t = 0; t < STEPS; t++) {
            batch(m, t, x, lab);
            float loss = NAN;
            CHECK(hr_train_step(s, x, lab, &loss) == HR_OK, "%s K=%d step %d: %s", name, K, t, hr_last_error());
            if (t == 0) {
                run_ref(&r, x, lab);
                CHECK(fabs(loss - r.loss) <= gamma32(m) * r.loss_bound, "%s K=%d: loss %.9g, float64 %.9g", name, K,
                      loss, r.loss);
                char what[64];
                snprintf(what, sizeof what, "%s fp32 K=%d vs float64", name, K);
                worst_ref = check_grads(s, &r, NULL, gamma32(m), 1, what);
                if (K == 1) grads_of(s, m, g1);
                snprintf(what, sizeof what, "%s fp32 K=%d vs K=1", name, K);
                worst_k1 = check_grads(s, &r, g1, 2 * gamma32(m), 2, what);
            }
            /* the curve: a band, not a bound: 20 steps of SGD carry the
             * gradients' rounding differences (~1e-7 relative) through the
             * dynamics; 1e-5 leaves two orders of magnitude for that, while
             * a wrong accumulation (a micro-batch lost or counted twice, a
             * 1/K missing) moves the curve by percents */
            if (K == 1) curve1[t] = loss;
            double dev = fabs(loss - curve1[t]) / fmax(1, fabs(curve1[t]));
            worst_curve = fmax(worst_curve, dev);
            CHECK(dev <= band, "%s K=%d: step %d loss %.9g vs K=1's %.9g (band %.0e)", name, K, t + 1, loss, curve1[t], band);
        }
        printf("  accumulation %s K=%d: gradients at %.2g of the bound vs float64, %.2g vs K=1; 20-step curve within %.2g "
               "(band %.0e)\n", name, K, worst_ref, worst_k1, worst_curve, band);
        hr_session_free(s);
    }
    free(x);
}

/* With Dropout, micro-batch k's masks continue the whole batch's: every run's
 * gradient matches the reference with the whole batch's masks, drawn here
 * from the documented scheme: element i of step t+1 is kept when
 * hr_rng_uniform(seed, layer seed << 32 ^ (t+1), i) >= p. */
static void test_dropout_accumulation(void) {
    const spec *m = &MLP_DROP;
    float x[32 * 20];
    int32_t lab[32];
    uint8_t mask[32 * 16];
    static ref r;
    static float g1[NP][1024];
    batch(m, 0, x, lab);
    for (int K = 1; K <= 4; K *= 2) {
        hr_config_t c = config(m, HR_PREC_FP32, K);
        hr_session_t *s = session(m, &c);
        if (!s) return;
        const hr_program *p = hr_session_program(s);
        uint64_t layer_seed = 0;
        int found = 0;
        for (int k = 0; k < p->n_fwd; k++)
            if (p->g.n[k].op == HR_OP_DROPOUT) layer_seed = p->g.n[k].a.seed, found++;
        CHECK(found == 1, "dropout model: %d Dropout nodes", found);
        int kept = 0;
        for (int i = 0; i < m->B * m->H; i++) kept += mask[i] = hr_rng_uniform(c.seed, (layer_seed << 32) ^ 1u, (uint64_t)i) >= m->dropout;
        r.m = m, r.mask = mask, r.gamma = gamma32(m);
        read_params(s, &r);
        CHECK(hr_train_step(s, x, lab, NULL) == HR_OK, "dropout K=%d: %s", K, hr_last_error());
        run_ref(&r, x, lab);
        char what[64];
        snprintf(what, sizeof what, "MLP+Dropout K=%d vs float64 with the batch's masks", K);
        double w = check_grads(s, &r, NULL, gamma32(m), 1, what);
        if (K == 1) grads_of(s, m, g1);
        snprintf(what, sizeof what, "MLP+Dropout K=%d vs K=1", K);
        double w1 = check_grads(s, &r, g1, 2 * gamma32(m), 2, what);
        printf("  dropout K=%d: %d of %d kept; gradients at %.2g of the bound vs float64, %.2g vs K=1\n", K, kept,
               m->B * m->H, w, w1);
        hr_session_free(s);
    }
}

/* BatchNorm normalises each micro-batch by its own statistics (as PyTorch
 * does when one accumulates by hand): the curve differs from K=1's; it must
 * run, and the plan's report says so. */
static void test_batchnorm_accumulation(void) {
    hr_model_t *md = hr_model_new("bn");
    int x = hr_input(md, "x", 1, (int64_t[]){20});
    x = hr_linear(md, NULL, x, 20, 16, true);
    x = hr_batchnorm(md, NULL, x, 16, 1e-5f, 0.1f);
    x = hr_relu(md, NULL, x);
    x = hr_linear(md, NULL, x, 16, 5, true);
    hr_loss_cross_entropy(md, x, 5);
    hr_config_t c = config(&MLP, HR_PREC_FP32, 4);
    hr_session_t *s = hr_compile(md, &c);
    CHECK(s && hr_session_alloc(s) == HR_OK, "BatchNorm with accumulation: %s", hr_last_error());
    float xb[32 * 20], loss = NAN;
    int32_t lab[32];
    for (int t = 0; s && t < 3; t++) {
        batch(&MLP, t, xb, lab);
        CHECK(hr_train_step(s, xb, lab, &loss) == HR_OK && isfinite(loss), "BatchNorm K=4 step %d: loss %g: %s", t, loss,
              hr_last_error());
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (s && f) hr_report_print(s, f);
    if (f) fclose(f);
    const char *note = text ? strstr(text, "note: BatchNorm") : NULL;
    CHECK(note && strstr(note, "micro-batch of 8 samples"),
          "the report does not say that BatchNorm sees micro-batches of 8:\n%s", text ? text : "");
    free(text);
    hr_session_free(s);
    hr_model_free(md);
}

/* ---- (b) the plan at (B, K) is the plan at B/K ------------------------------------------ */
static void test_plan_sizes(void) {
    const struct { spec m; hr_precision p; } cases[] = {
        {{false, 256, 784, 256, 10, 0, 2}, HR_PREC_FP32}, {{false, 256, 784, 256, 10, 0, 2}, HR_PREC_BF16},
        {{true, 256, 36, 27, 4, 0, 4}, HR_PREC_FP32}, {{true, 256, 36, 27, 4, 0, 4}, HR_PREC_FP16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hr_model_t *md = build(&cases[i].m);
        hr_config_t ck = config(&cases[i].m, cases[i].p, 4), cm = config(&cases[i].m, cases[i].p, 1);
        cm.batch = ck.batch / 4;
        hr_session_t *sk = hr_compile(md, &ck), *sm = hr_compile(md, &cm);
        CHECK(sk && sm, "plan: %s", hr_last_error());
        if (sk && sm) {
            size_t a = hr_session_report(sk)->arena_bytes, b = hr_session_report(sm)->arena_bytes;
            double rel = fabs((double)a - (double)b) / (double)b;
            printf("  plan %s %s: batch 256 in 4 micro-batches %zu bytes, batch 64 with kept gradients %zu (%.3f%%)\n",
                   cases[i].m.cnn ? "CNN" : "MLP", hr_precision_name(cases[i].p), a, b, 100 * rel);
            CHECK(rel <= 0.01, "plan at (256, K=4) %zu bytes vs at 64 %zu: %.2f%% apart (at most 1%%)", a, b, 100 * rel);
        }
        hr_session_free(sk), hr_session_free(sm);
        /* a batch that K does not divide is refused, naming both */
        ck.batch = 250, ck.accumulate = 3;
        hr_session_t *bad = hr_compile(md, &ck);
        CHECK(!bad && strstr(hr_last_error(), "250") && strstr(hr_last_error(), " 3"),
              "batch 250 with 3 micro-batches: %s", bad ? "compiled" : hr_last_error());
        hr_session_free(bad);
        hr_model_free(md);
    }
}

/* ---- (c) GradScaler's sequence ------------------------------------------------------------ */
typedef struct {
    float scale;
    int64_t growth, skipped, steps;
} scaler;
static scaler scaler_of(hr_session_t *s) {
    scaler q;
    hr_loss_scale(s, &q.scale, &q.growth, &q.skipped);
    q.steps = hr_step_count(s);
    return q;
}
/* torch.amp.GradScaler.update, written out: on inf/NaN halve the scale and
 * skip; after `interval` good steps in a row double it; either resets the tracker. */
static scaler gradscaler_rule(scaler q, bool found_inf, int interval) {
    if (found_inf) {
        q.scale *= 0.5f, q.growth = 0, q.skipped++;
    } else {
        q.steps++;
        if (++q.growth == interval) q.scale *= 2.0f, q.growth = 0;
    }
    return q;
}

/* n steps of an fp16 session on batch 0, each checked against the rules;
 * returns how many doublings happened. */
static int scaler_steps(hr_session_t *s, const spec *m, int n, int interval, float *losses) {
    float x[32 * 36];
    int32_t lab[32];
    batch(m, 0, x, lab);
    int grew = 0;
    for (int t = 0; t < n; t++) {
        scaler before = scaler_of(s);
        float loss = NAN;
        CHECK(hr_train_step(s, x, lab, &loss) == HR_OK, "fp16 step: %s", hr_last_error());
        if (losses) losses[t] = loss;
        scaler after = scaler_of(s);
        bool skipped = after.steps == before.steps; /* the outcome the step tells */
        scaler want = gradscaler_rule(before, skipped, interval);
        grew += !skipped && want.scale > before.scale;
        CHECK(memcmp(&after.scale, &want.scale, sizeof(float)) == 0 && after.growth == want.growth &&
                  after.skipped == want.skipped && after.steps == want.steps,
              "scaler after step %d: (scale %g, growth %lld, skipped %lld, steps %lld), GradScaler's rules give "
              "(%g, %lld, %lld, %lld)", t, after.scale, (long long)after.growth, (long long)after.skipped,
              (long long)after.steps, want.scale, (long long)want.growth, (long long)want.skipped, (long long)want.steps);
        /* the inf check itself: dz reaches scale/B |p - y| >= 2^30/32 * 0.5 > 65504 in fp16 above 2^30, and
         * stays below 2^16/32 * (1 + the hidden layer's gain) well under 65504 at or below 2^16 */
        if (before.scale >= 0x1p30f) CHECK(skipped, "step %d at scale %g was taken: fp16 gradients must overflow", t, before.scale);
        if (before.scale <= 65536.0f) CHECK(!skipped, "step %d at scale %g was skipped", t, before.scale);
        CHECK(isfinite(loss), "fp16 step %d: loss %g", t, loss);
    }
    return grew;
}

static void test_gradscaler(void) {
    const spec *m = &MLP;
    hr_config_t c = config(m, HR_PREC_FP16, 1);
    c.loss_scale = 0x1p40f, c.scale_growth_interval = 3;
    hr_session_t *s = session(m, &c), *s32 = NULL;
    if (!s) return;
    static ref r, r0;
    r.m = r0.m = m;
    read_params(s, &r0);
    /* the first step at 2^40 is skipped and changes nothing */
    scaler_steps(s, m, 1, 3, NULL);
    read_params(s, &r);
    CHECK(hr_step_count(s) == 0 && memcmp(r.p, r0.p, sizeof r.p) == 0, "the step at 2^40 was taken (%lld) or changed "
          "the parameters", (long long)hr_step_count(s));
    /* on until the first good step; its unscaled gradients at the initial parameters vs fp32's */
    int tries = 0;
    while (hr_step_count(s) == 0 && tries++ < 40) scaler_steps(s, m, 1, 3, NULL);
    CHECK(hr_step_count(s) == 1, "no good step in 40 after 2^40");
    scaler q = scaler_of(s);
    printf("  GradScaler: first good step after %lld skipped, at scale %g\n", (long long)q.skipped, q.scale);
    hr_config_t c32 = config(m, HR_PREC_FP32, 1);
    float x[32 * 20];
    int32_t lab[32];
    static float g32[NP][1024];
    batch(m, 0, x, lab);
    if ((s32 = session(m, &c32)) && hr_train_step(s32, x, lab, NULL) == HR_OK) {
        grads_of(s32, m, g32);
        r.gamma = gamma_of(m, HR_PREC_FP16);
        memcpy(r.p, r0.p, sizeof r.p);
        run_ref(&r, x, lab);
        double w = check_grads(s, &r, g32, gamma_of(m, HR_PREC_FP16) + gamma32(m), 2, "fp16 unscaled vs fp32");
        printf("  fp16's first good step, unscaled: gradients at %.2g of the bound vs fp32\n", w);
    }
    hr_session_free(s32);
    /* the whole sequence: down to a scale that fits, then doubling every 3 good steps */
    int grew = scaler_steps(s, m, 30, 3, NULL);
    q = scaler_of(s);
    printf("  GradScaler: after 32+ steps scale %g, growth %lld, %lld skipped, %lld taken, %d doublings\n", q.scale,
           (long long)q.growth, (long long)q.skipped, (long long)q.steps, grew);
    CHECK(grew >= 2, "the scale doubled %d times in 30 steps with interval 3", grew);
    hr_session_free(s);
}

/* ---- (d) bf16 and fp16 gradients vs fp32 ------------------------------------------------ */
static void test_half_grads(const spec *m) {
    float x[32 * 36];
    int32_t lab[32];
    static ref r;
    static float g32[NP][1024];
    batch(m, 0, x, lab);
    hr_config_t c32 = config(m, HR_PREC_FP32, 1);
    hr_session_t *s32 = session(m, &c32);
    if (!s32 || hr_train_step(s32, x, lab, NULL) != HR_OK) {
        hr_session_free(s32);
        return;
    }
    grads_of(s32, m, g32);
    for (hr_precision p = HR_PREC_BF16; p <= HR_PREC_FP16; p++) {
        hr_config_t c = config(m, p, 1);
        hr_session_t *s = session(m, &c);
        if (!s) continue;
        r.m = m, r.mask = NULL, r.gamma = gamma_of(m, p);
        read_params(s, &r);
        float loss = NAN;
        CHECK(hr_train_step(s, x, lab, &loss) == HR_OK && hr_step_count(s) == 1, "%s first step: %s",
              hr_precision_name(p), hr_last_error());
        run_ref(&r, x, lab);
        CHECK(fabs(loss - r.loss) <= r.gamma * r.loss_bound, "%s loss %.9g vs float64 %.9g (bound %.3g)",
              hr_precision_name(p), loss, r.loss, r.gamma * r.loss_bound);
        char what[64];
        snprintf(what, sizeof what, "%s %s vs fp32", m->cnn ? "CNN" : "MLP", hr_precision_name(p));
        double w = check_grads(s, &r, g32, gamma_of(m, p) + gamma32(m), 2, what);
        snprintf(what, sizeof what, "%s %s vs float64", m->cnn ? "CNN" : "MLP", hr_precision_name(p));
        double w64 = check_grads(s, &r, NULL, gamma_of(m, p), 1, what);
        printf("  %s %s: gradients at %.2g of the bound vs fp32 (gamma %.3g), %.2g vs float64\n", m->cnn ? "CNN" : "MLP",
               hr_precision_name(p), w, gamma_of(m, p), w64);
        hr_session_free(s);
    }
    hr_session_free(s32);
}

/* ---- (e) an fp16 run's checkpoint ------------------------------------------------------ */
/* Writes s's state as a checkpoint with exactly these metadata keys (files
 * of older versions, damaged ones). */
static void write_with_meta(hr_session_t *s, const char *path, const char *const *keys, const char *const *vals, int nk) {
    int n = hr_state_count(s);
    hr_st_entry t[16];
    char names[16][64];
    int64_t dims[16][4];
    static float data[16][1024];
    for (int i = 0; i < n && i < 16; i++) {
        snprintf(names[i], sizeof names[i], "%s%s", hr_state_is_param(s, i) ? "" : "optim.", hr_state_name(s, i));
        t[i] = (hr_st_entry){names[i], "F32", hr_state_ndim(s, i), dims[i], data[i]};
        for (int d = 0; d < t[i].ndim; d++) dims[i][d] = hr_state_dim(s, i, d);
        hr_state_read(s, i, data[i]);
    }
    CHECK(n <= 16 && hr_safetensors_write(path, t, n, keys, vals, nk, NULL, NULL) == HR_OK, "write %s: %s", path,
          hr_last_error());
}

static void test_checkpoint(const char *dir) {
    const spec *m = &MLP;
    char path[512], old[512], bad[512], fp[96];
    snprintf(path, sizeof path, "%s/fp16.ckpt", dir);
    snprintf(old, sizeof old, "%s/old.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    hr_config_t c = config(m, HR_PREC_FP16, 1);
    c.loss_scale = 0x1p40f, c.scale_growth_interval = 3;
    hr_session_t *a = session(m, &c), *b = NULL, *s32 = NULL;
    if (!a) return;
    scaler_steps(a, m, 26, 3, NULL);
    for (int i = 0; i < 5 && scaler_of(a).growth == 0; i++) scaler_steps(a, m, 1, 3, NULL);
    scaler qa = scaler_of(a);
    CHECK(qa.growth > 0 && qa.skipped > 0, "the saved scaler should have a growth tracker and skips: %lld, %lld",
          (long long)qa.growth, (long long)qa.skipped);
    hr_ckpt_meta meta = {.epoch = 1, .seed = c.seed};
    snprintf(meta.model, sizeof meta.model, "mlp");
    CHECK(hr_checkpoint_save(a, path, &meta) == HR_OK, "save: %s", hr_last_error());
    /* the file says how the run trained, the scale as "%a" */
    hr_safetensors_t *f = hr_safetensors_open(path);
    const char *v;
    CHECK(f && (v = hr_safetensors_meta(f, "headroom.precision")) && !strcmp(v, "fp16"), "headroom.precision");
    CHECK(f && (v = hr_safetensors_meta(f, "headroom.accumulate")) && !strcmp(v, "1"), "headroom.accumulate");
    CHECK(f && (v = hr_safetensors_meta(f, "headroom.loss_scale")) && strtod(v, NULL) == (double)qa.scale,
          "headroom.loss_scale '%s' vs %a", f ? hr_safetensors_meta(f, "headroom.loss_scale") : "", qa.scale);
    hr_safetensors_free(f);
    /* a fresh fp16 session with GradScaler's defaults takes the scaler bit for bit, and both go on alike */
    hr_config_t c2 = c;
    c2.loss_scale = 0;
    if ((b = session(m, &c2))) {
        hr_ckpt_meta got;
        memset(&got, 0, sizeof got);
        CHECK(hr_checkpoint_load(b, path, &got) == HR_OK, "load: %s", hr_last_error());
        scaler qb = scaler_of(b);
        CHECK(memcmp(&qa.scale, &qb.scale, sizeof(float)) == 0 && qa.growth == qb.growth && qa.skipped == qb.skipped &&
                  qa.steps == qb.steps,
              "restored scaler (%a, %lld, %lld, %lld) vs saved (%a, %lld, %lld, %lld)", qb.scale, (long long)qb.growth,
              (long long)qb.skipped, (long long)qb.steps, qa.scale, (long long)qa.growth, (long long)qa.skipped,
              (long long)qa.steps);
        CHECK(got.precision == HR_PREC_FP16 && got.accumulate == 1 && got.batch_size == m->B &&
                  memcmp(&got.loss_scale, &qa.scale, sizeof(float)) == 0 && got.scale_growth == qa.growth &&
                  got.steps_skipped == qa.skipped,
              "the metadata read back: %s, accumulate %lld, batch %lld, scale %a", hr_precision_name(got.precision),
              (long long)got.accumulate, (long long)got.batch_size, got.loss_scale);
        float la[8], lb[8];
        scaler_steps(a, m, 8, 3, la);
        scaler_steps(b, m, 8, 3, lb);
        qa = scaler_of(a), qb = scaler_of(b);
        CHECK(memcmp(la, lb, sizeof la) == 0 && memcmp(&qa, &qb, sizeof qa) == 0,
              "8 steps after the resume differ from the run's own (loss %.9g vs %.9g, scale %g vs %g)", la[7], lb[7],
              qa.scale, qb.scale);
    }
    /* an fp32 session loads the weights; the file's precision is the caller's to refuse */
    hr_config_t c32 = config(m, HR_PREC_FP32, 1);
    if ((s32 = session(m, &c32))) {
        hr_ckpt_meta got;
        memset(&got, 0, sizeof got);
        float sc = 0;
        CHECK(hr_checkpoint_load(s32, path, &got) == HR_OK && got.precision == HR_PREC_FP16, "fp16 file into fp32: %s",
              hr_last_error());
        CHECK(hr_loss_scale(s32, &sc, NULL, NULL) == HR_OK && sc == 1.0f, "an fp32 session's scale is %g", sc);
        /* a file of an older version (no precision keys) loads as fp32, one micro-batch */
        hr_checkpoint_fingerprint(s32, fp, sizeof fp);
        const char *keys[] = {"format", "headroom.model", "headroom.epoch", "headroom.batch", "headroom.step",
                              "headroom.seed", "headroom.fingerprint", "headroom.precision", "headroom.scale_growth",
                              "headroom.steps_skipped", "headroom.loss_scale"};
        const char *vals[] = {"pt", "mlp", "1", "0", "3", "5", fp, "fp16", "1", "2", "0x1p+200"};
        write_with_meta(s32, old, keys, vals, 7);
        memset(&got, 0, sizeof got);
        CHECK(hr_checkpoint_load(s32, old, &got) == HR_OK && got.precision == HR_PREC_FP32 && got.accumulate == 1 &&
                  got.batch_size == 0 && hr_step_count(s32) == 3,
              "an old checkpoint: %s, %s, accumulate %lld", hr_last_error(), hr_precision_name(got.precision),
              (long long)got.accumulate);
        /* damaged: a scale that is no float, an unknown precision, fp16 without its scale */
        write_with_meta(s32, bad, keys, vals, 11);
        CHECK(hr_checkpoint_load(s32, bad, NULL) == HR_ERR_FORMAT && strstr(hr_last_error(), "loss_scale"), "scale 2^200: %s",
              hr_last_error());
        vals[7] = "fp8";
        write_with_meta(s32, bad, keys, vals, 8);
        CHECK(hr_checkpoint_load(s32, bad, NULL) == HR_ERR_FORMAT && strstr(hr_last_error(), "fp8"), "precision fp8: %s",
              hr_last_error());
        vals[7] = "fp16";
        write_with_meta(s32, bad, keys, vals, 10);
        CHECK(hr_checkpoint_load(s32, bad, NULL) == HR_ERR_FORMAT && strstr(hr_last_error(), "loss_scale"),
              "fp16 without its scale: %s", hr_last_error());
        if (b) { /* and the old file into an fp16 session leaves its scaler as it was */
            scaler q0 = scaler_of(b);
            CHECK(hr_checkpoint_load(b, old, NULL) == HR_OK && scaler_of(b).scale == q0.scale, "old file into fp16: %s",
                  hr_last_error());
        }
    }
    hr_session_free(a), hr_session_free(b), hr_session_free(s32);
}

/* ---- (f) the command line: resume rules, skipped steps, eval's precision ------------------ */
#ifndef HR /* another build's binary: -DHR='"/path/headroom"' */
#define HR "./build/headroom"
#endif
static char out[65536];
static int sh(const char *cmd) {
    char full[2048];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
#define RUN(code, needle, ...)                                                                                    \
    do {                                                                                                          \
        char cmd_[1536];                                                                                          \
        snprintf(cmd_, sizeof cmd_, __VA_ARGS__);                                                                 \
        int rc_ = sh(cmd_);                                                                                       \
        CHECK(rc_ == (code) && strstr(out, needle), "exit %d (want %d), output lacks \"%s\": %s\n%s", rc_, code, \
              needle, cmd_, out);                                                                                 \
    } while (0)

static void test_cli(const char *dir) {
    if (access(HR, X_OK) != 0) {
        printf("SKIP test_precision: no %s to run (build it first); command-line cases not run\n", HR);
        return;
    }
    char model[512];
    snprintf(model, sizeof model, "%s/small.model", dir);
    FILE *f = fopen(model, "w");
    if (f) fputs("input 1 8 8\nFlatten()\nLinear(64, 16)\nReLU()\nLinear(16, 4)\nloss CrossEntropyLoss\n", f), fclose(f);
    const char *common = "--data synthetic --samples 256 --batch 16 --device cpu --seed 7 -q --optim sgd --lr 0.05";
    /* 2^24: the first steps overflow fp16 and are skipped, and the epoch line says so */
    RUN(0, "steps skipped", HR " train %s %s --precision fp16 --loss-scale 16777216 --epochs 1 --save %s/f16.ckpt",
        model, common, dir);
    /* resuming in another precision is refused, naming the flag */
    RUN(2, "--precision fp16", HR " train %s %s --precision fp32 --epochs 2 --resume %s/f16.ckpt", model, common, dir);
    RUN(2, "--precision fp16", HR " train %s %s --precision bf16 --epochs 2 --resume %s/f16.ckpt", model, common, dir);
    /* another batch is refused; another accumulation of the same batch is a note */
    RUN(2, "--batch 16", HR " train %s %s --precision fp16 --batch 32 --epochs 2 --resume %s/f16.ckpt", model, common,
        dir);
    RUN(0, "accumulation 1 → 2 micro-batches, batch 16 unchanged",
        HR " train %s %s --precision fp16 --accumulate 2 --epochs 2 --resume %s/f16.ckpt", model, common, dir);
    CHECK(strstr(out, "steps skipped so far") != NULL, "the resume line lacks the scaler:\n%s", out);
    /* eval runs in the precision asked for, from any run's weights */
    RUN(0, "confusion matrix", HR " eval %s --data synthetic --samples 256 --device cpu --precision bf16 --weights %s/f16.ckpt",
        model, dir);
    CHECK(strstr(out, "bf16") != NULL, "eval's plan does not say bf16:\n%s", out);
}

int main(void) {
    char dir[] = "/tmp/hr_test_precision_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_accumulation(&MLP);
    test_accumulation(&CNN);
    test_dropout_accumulation();
    test_batchnorm_accumulation();
    test_plan_sizes();
    test_gradscaler();
    test_half_grads(&MLP);
    test_half_grads(&CNN);
    test_checkpoint(dir);
    test_cli(dir);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0) printf("could not remove %s\n", dir);
    TEST_END();
}
