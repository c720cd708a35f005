/* e2e.c — test_ops' autodiff end to end through the public API (keep_grads): three small
 * models' loss and every parameter's gradient against a float64 forward written here. */
#include "harness.h"

/* ---- autodiff end to end, through the public API ---------------------------- */
/* A model is checked by building it, reading its initial parameters, running
 * one step (SGD, lr 0, keep_grads) and comparing the loss and every
 * parameter's gradient with finite differences of a float64 forward pass
 * written here for that model (e2e and e2e_check_model: harness.h). */

double *P(e2e *e, const char *name) {
    for (int i = 0; i < e->np; i++)
        if (strcmp(e->names[i], name) == 0) return e->p[i];
    fprintf(stderr, "no parameter %s\n", name);
    abort();
}

/* Model A: Conv2d(2,3,3,p1) BatchNorm2d ReLU MaxPool2d(2) Flatten Linear(27,4) CE */
static double fwd_a(void *c_) {
    e2e *e = c_;
    int B = e->B;
    double c0[4 * 3 * 6 * 6], b1[4 * 3 * 6 * 6], p3[4 * 3 * 3 * 3], l5[4 * 4] = {0};
    ref_conv(e->x, P(e, "0.weight"), P(e, "0.bias"), B, 2, 6, 6, 3, 3, 1, 1, c0);
    ref_bn_train(c0, P(e, "1.weight"), P(e, "1.bias"), B, 3, 36, 1e-5, b1, NULL, NULL, NULL);
    for (int i = 0; i < B * 3 * 36; i++) b1[i] = b1[i] > 0 ? b1[i] : 0;
    ref_pool(b1, B * 3, 6, 6, 2, 2, 2, true, p3);
    ref_linear(p3, P(e, "5.weight"), P(e, "5.bias"), B, 27, 4, l5);
    int lab[4];
    for (int i = 0; i < B; i++) lab[i] = e->lab[i];
    return ref_ce(l5, lab, B, 4);
}

/* Model B: a residual and a two-branch concat, AvgPool, global pooling, Softmax + MSE.
 *   c0 = Conv(2,3,3,p1)(x); r1 = ReLU(c0); c2 = Conv(3,3,3,p1)(r1); r3 = ReLU(c2)
 *   a4 = r1 + r3; c5 = Conv(3,2,1)(a4); c6 = Conv(3,2,3,s1,p1,nobias)(a4)
 *   cat7 = [c5, c6]; ap8 = AvgPool(2, s1)(cat7); g9 = global avg(ap8); f10 = Flatten
 *   l11 = Linear(4,3); s12 = Softmax; MSE(s12, tgt) */
static double fwd_b(void *c_) {
    e2e *e = c_;
    int B = e->B, HW = 25;
    double c0[3 * 3 * 25], r1[3 * 3 * 25], c2[3 * 3 * 25], a4[3 * 3 * 25], c5[3 * 2 * 25], c6[3 * 2 * 25];
    double cat[3 * 4 * 25], ap[3 * 4 * 16], gp[3 * 4], l[3 * 3] = {0}, s[3 * 3];
    ref_conv(e->x, P(e, "0.weight"), P(e, "0.bias"), B, 2, 5, 5, 3, 3, 1, 1, c0);
    for (int i = 0; i < B * 3 * HW; i++) r1[i] = c0[i] > 0 ? c0[i] : 0;
    ref_conv(r1, P(e, "2.weight"), P(e, "2.bias"), B, 3, 5, 5, 3, 3, 1, 1, c2);
    for (int i = 0; i < B * 3 * HW; i++) a4[i] = r1[i] + (c2[i] > 0 ? c2[i] : 0);
    ref_conv(a4, P(e, "5.weight"), P(e, "5.bias"), B, 3, 5, 5, 2, 1, 1, 0, c5);
    ref_conv(a4, P(e, "6.weight"), NULL, B, 3, 5, 5, 2, 3, 1, 1, c6);
    for (int n = 0; n < B; n++)
        for (int c = 0; c < 4; c++)
            for (int j = 0; j < HW; j++)
                cat[(n * 4 + c) * HW + j] = c < 2 ? c5[(n * 2 + c) * HW + j] : c6[(n * 2 + c - 2) * HW + j];
    ref_pool(cat, B * 4, 5, 5, 2, 2, 1, false, ap);
    ref_pool(ap, B * 4, 4, 4, 4, 4, 1, false, gp);
    ref_linear(gp, P(e, "11.weight"), P(e, "11.bias"), B, 4, 3, l);
    ref_softmax(l, B, 3, false, s);
    double m = 0;
    for (int i = 0; i < B * 3; i++) m += (s[i] - e->tgt[i]) * (s[i] - e->tgt[i]);
    return m / (B * 3);
}

/* Model C: Linear(6,5,nobias) BatchNorm1d ReLU Dropout(0) Linear(5,8) Reshape(2,4)
 * Flatten LogSoftmax... as vectors: Linear(8,3) LogSoftmax, MSE */
static double fwd_c(void *c_) {
    e2e *e = c_;
    int B = e->B;
    double l0[5 * 5], b1[5 * 5], l4[5 * 8], l7[5 * 3] = {0}, ls[5 * 3];
    ref_linear(e->x, P(e, "0.weight"), NULL, B, 6, 5, l0);
    ref_bn_train(l0, P(e, "1.weight"), P(e, "1.bias"), B, 5, 1, 1e-5, b1, NULL, NULL, NULL);
    for (int i = 0; i < B * 5; i++) b1[i] = b1[i] > 0 ? b1[i] : 0;
    ref_linear(b1, P(e, "4.weight"), P(e, "4.bias"), B, 5, 8, l4);
    ref_linear(l4, P(e, "7.weight"), P(e, "7.bias"), B, 8, 3, l7);
    ref_softmax(l7, B, 3, true, ls);
    double m = 0;
    for (int i = 0; i < B * 3; i++) m += (ls[i] - e->tgt[i]) * (ls[i] - e->tgt[i]);
    return m / (B * 3);
}

static void e2e_check(const char *op, hr_model_t *m, int B, int64_t in_numel, bool ce, int nclasses_or_outputs,
                      double (*fwd)(void *)) {
    e2e_check_model(op, m, B, in_numel, ce ? 1 : 0, nclasses_or_outputs, 0, fwd);
}

void e2e_check_model(const char *op, hr_model_t *m, int B, int64_t in_numel, int64_t labels, int nclasses_or_outputs,
                     int vocab, double (*fwd)(void *)) {
    bool ce = labels > 0;
    const double tol = 2e-5;
    hr_config_t cfg = hr_config_default();
    cfg.batch = B, cfg.optim.kind = HR_OPTIM_SGD, cfg.optim.lr = 0.0f, cfg.keep_grads = true, cfg.seed = 11;
    e2e e = {0};
    e.B = B;
    e.fwd = fwd;
    e.s = hr_compile(m, &cfg);
    CHECK(e.s != NULL, "%s: compile: %s", op, hr_last_error());
    if (!e.s) return;
    CHECK(hr_session_alloc(e.s) == HR_OK, "%s: alloc: %s", op, hr_last_error());
    int64_t nx = in_numel * B;
    float *xf = malloc(sizeof(float) * (size_t)nx), *tf = malloc(sizeof(float) * (size_t)(B * nclasses_or_outputs));
    e.x = dalloc(nx);
    e.lab = calloc((size_t)(B * (labels ? labels : 1)), sizeof(int32_t));
    e.tgt = dalloc(B * nclasses_or_outputs);
    fill(e.x, nx, -1, 1);
    for (int64_t i = 0; i < nx; i++) { /* token ids in [0, vocab), or values in [-1, 1) */
        if (vocab) e.x[i] = (double)(int64_t)((e.x[i] + 1) / 2 * vocab);
        xf[i] = (float)e.x[i];
    }
    for (int64_t i = 0; i < B * labels; i++) e.lab[i] = (int32_t)((i * 7 + 2) % nclasses_or_outputs);
    fill(e.tgt, B * nclasses_or_outputs, 0, 1);
    for (int i = 0; i < B * nclasses_or_outputs; i++) tf[i] = (float)e.tgt[i];
    /* the parameters (not buffers, not optimizer state), as initialised */
    for (int i = 0; i < hr_state_count(e.s); i++) {
        const char *nm = hr_state_name(e.s, i);
        if (!hr_state_is_param(e.s, i) || strstr(nm, "running_")) continue;
        int64_t cnt = 1;
        for (int d = 0; d < hr_state_ndim(e.s, i); d++) cnt *= hr_state_dim(e.s, i, d);
        float *buf = malloc(sizeof(float) * (size_t)cnt);
        CHECK(hr_state_read(e.s, i, buf) == HR_OK, "read %s", nm);
        snprintf(e.names[e.np], sizeof e.names[e.np], "%s", nm);
        e.n[e.np] = cnt;
        e.p[e.np] = dalloc(cnt);
        for (int64_t j = 0; j < cnt; j++) e.p[e.np][j] = buf[j];
        e.np++;
        free(buf);
    }
    float loss = NAN;
    hr_status st = hr_train_step(e.s, xf, ce ? (const void *)e.lab : (const void *)tf, &loss);
    CHECK(st == HR_OK, "%s: train step: %s", op, hr_last_error());
    double L = fwd(&e);
    char opg[96];
    snprintf(opg, sizeof opg, "%s: loss", op);
    compare(opg, "loss", &loss, &L, 1, 1e-5);
    snprintf(opg, sizeof opg, "%s: grads", op);
    int kinks = 0;
    for (int i = 0; i < e.np; i++) {
        double *g = dalloc(e.n[i]);
        float *got = malloc(sizeof(float) * (size_t)e.n[i]);
        kinks += fd_grad_smooth(fwd, &e, e.p[i], e.n[i], g);
        st = hr_grad_read(e.s, e.names[i], got);
        CHECK(st == HR_OK, "%s: grad_read %s: %s", op, e.names[i], hr_last_error());
        char what[64];
        snprintf(what, sizeof what, "grad of %s", e.names[i]);
        if (st == HR_OK) compare(opg, what, got, g, e.n[i], tol);
        if (getenv("HR_DEBUG_E2E"))
            for (int64_t j = 0; j < e.n[i]; j++) printf("    %s[%lld] got %.9g want %.9g\n", e.names[i], (long long)j, got[j], g[j]);
        free(g), free(got);
    }
    for (int i = 0; i < e.np; i++) free(e.p[i]);
    int64_t total = 0;
    for (int i = 0; i < e.np; i++) total += e.n[i];
    if (kinks) printf("  %s: %d of %lld parameter elements on a kink, not compared\n", op, kinks, (long long)total);
    CHECK(kinks * 10 <= total, "%s: %d of %lld elements on kinks: the check compares too little", op, kinks,
          (long long)total);
    hr_session_free(e.s);
    free(xf), free(tf), free(e.x), free(e.lab), free(e.tgt);
}

void test_e2e(void) {
    hr_model_t *m = hr_model_new("a");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 6, 6});
    x = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 3, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 27, 4, true);
    CHECK(hr_loss_cross_entropy(m, x, 4) >= 0, "model a: %s", hr_last_error());
    e2e_check("model Conv-BN-ReLU-MaxPool-Linear-CE", m, 4, 2 * 36, true, 4, fwd_a);
    hr_model_free(m);

    m = hr_model_new("b");
    x = hr_input(m, "x", 3, (int64_t[]){2, 5, 5});
    int c0 = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    int r1 = hr_relu(m, NULL, c0);
    int c2 = hr_conv2d(m, NULL, r1, 3, 3, 3, 1, 1, true);
    int r3 = hr_relu(m, NULL, c2);
    int a4 = hr_add(m, NULL, r1, r3);
    int c5 = hr_conv2d(m, NULL, a4, 3, 2, 1, 1, 0, true);
    int c6 = hr_conv2d(m, NULL, a4, 3, 2, 3, 1, 1, false);
    int cat = hr_concat(m, NULL, 2, (int[]){c5, c6});
    x = hr_avgpool2d(m, NULL, cat, 2, 1);
    x = hr_global_avgpool(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 4, 3, true);
    x = hr_softmax(m, NULL, x);
    CHECK(hr_loss_mse(m, x) >= 0, "model b: %s", hr_last_error());
    e2e_check("model residual+concat+pools+Softmax+MSE", m, 3, 2 * 25, false, 3, fwd_b);
    hr_model_free(m);

    m = hr_model_new("c");
    x = hr_input(m, "x", 1, (int64_t[]){6});
    x = hr_linear(m, NULL, x, 6, 5, false);
    x = hr_batchnorm(m, NULL, x, 5, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_dropout(m, NULL, x, 0.0f);
    x = hr_linear(m, NULL, x, 5, 8, true);
    x = hr_reshape(m, NULL, x, 2, (int64_t[]){2, 4});
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 8, 3, true);
    x = hr_log_softmax(m, NULL, x);
    CHECK(hr_loss_mse(m, x) >= 0, "model c: %s", hr_last_error());
    e2e_check("model Linear-BN1d-ReLU-Dropout0-Reshape-LogSoftmax+MSE", m, 5, 6, false, 3, fwd_c);
    hr_model_free(m);
}

OPS_TALLY(ops_tally_e2e)
