/* optim.c — test_ops' optimizers against torch.optim's documented algorithms: SGD (weight
 * decay, momentum, dampening, nesterov), Adam, AdamW, and clipping through GradNorm. */
#include "harness.h"

/* ---- optimizers: torch.optim's documented algorithms ----------------------- */
typedef struct {
    hr_optim_kind kind;
    float lr, mom, damp, wd, clip;
    bool nesterov;
    const char *name;
} opt_case;

static void test_optim(const opt_case *oc) {
    const int n = 37, steps = 3;
    const double tol = 2e-6;
    double *p = dalloc(n), *buf = dalloc(n), *m = dalloc(n), *v = dalloc(n), *gr = dalloc(n);
    fill(p, n, -1, 1);
    kt k;
    kt_init(&k);
    int tp = KT(&k, n), tg = KT(&k, n), ts1 = KT(&k, n), ts2 = KT(&k, n), tsq = KT(&k, 1);
    kt_set(&k, tp, p);
    hr_step_info si = kt_si();
    si.lr = oc->lr;
    si.optim.kind = oc->kind, si.optim.lr = oc->lr, si.optim.momentum = oc->mom, si.optim.dampening = oc->damp;
    si.optim.nesterov = oc->nesterov, si.optim.weight_decay = oc->wd, si.optim.clip_norm = oc->clip;
    si.optim.beta1 = 0.9f, si.optim.beta2 = 0.999f, si.optim.eps = 1e-8f;
    bool sgd = oc->kind == HR_OPTIM_SGD;
    for (int t = 1; t <= steps; t++) {
        fill(gr, n, -1, 1);
        kt_set(&k, tg, gr);
        double scale = 1;
        if (oc->clip > 0) {
            /* clip_grad_norm_: the global norm from GradNorm, coef = max / (norm + 1e-6) */
            hr_node q = hr_node_make(HR_OP_GRAD_SQNORM, -1);
            q.in[0] = tg, q.nin = 1, q.out[0] = tsq, q.nout = 1, q.accum[0] = false;
            kf(&k, tsq)[0] = NAN;
            kt_run(&k, &q);
            double sq = 0;
            for (int i = 0; i < n; i++) sq += gr[i] * gr[i];
            compare("GradNorm", "sum of squares", kf(&k, tsq), &sq, 1, 1e-6);
            /* accumulating, as the second and later gradients do: twice the sum */
            q.accum[0] = true;
            kt_run(&k, &q);
            double sq2 = 2 * sq;
            compare("GradNorm", "sum of squares (accum)", kf(&k, tsq), &sq2, 1, 1e-6);
            kf(&k, tsq)[0] = (float)sq;
            double coef = oc->clip / (sqrt(sq) + 1e-6);
            scale = coef < 1 ? coef : 1;
            si.sqnorm = tsq;
        }
        si.t = t;
        hr_node u = hr_node_make(sgd ? HR_OP_SGD : HR_OP_ADAM, -1);
        u.in[0] = tp, u.in[1] = tg, u.in[2] = (sgd && oc->mom == 0) ? -1 : ts1, u.in[3] = sgd ? -1 : ts2, u.nin = 4;
        if (oc->clip > 0) u.in[4] = tsq, u.nin = 5;
        kt_run_si(&k, &u, &si);
        for (int i = 0; i < n; i++) {
            double g = gr[i] * scale;
            if (sgd) {
                g += oc->wd * p[i];
                if (oc->mom != 0) {
                    buf[i] = t == 1 ? g : oc->mom * buf[i] + (1 - oc->damp) * g;
                    g = oc->nesterov ? g + oc->mom * buf[i] : buf[i];
                }
                p[i] -= oc->lr * g;
            } else {
                double b1 = 0.9, b2 = 0.999, eps = 1e-8;
                if (oc->kind == HR_OPTIM_ADAMW)
                    p[i] *= 1 - oc->lr * oc->wd;
                else
                    g += oc->wd * p[i];
                m[i] = b1 * m[i] + (1 - b1) * g;
                v[i] = b2 * v[i] + (1 - b2) * g * g;
                double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
                p[i] -= oc->lr * mh / (sqrt(vh) + eps);
            }
        }
        char what[32];
        snprintf(what, sizeof what, "parameters after step %d", t);
        compare(oc->name, what, kf(&k, tp), p, n, tol);
        kt_set(&k, tp, p); /* keep the two sides on the same path */
        if (sgd && oc->mom != 0) compare(oc->name, "momentum_buffer", kf(&k, ts1), buf, n, tol);
        if (!sgd) {
            compare(oc->name, "exp_avg", kf(&k, ts1), m, n, tol);
            compare(oc->name, "exp_avg_sq", kf(&k, ts2), v, n, tol);
        }
    }
    kt_free(&k);
    free(p), free(buf), free(m), free(v), free(gr);
}

void test_optimizers(void) {
    static const opt_case opts[] = {
        {HR_OPTIM_SGD, 0.1f, 0, 0, 0, 0, false, "SGD"},
        {HR_OPTIM_SGD, 0.1f, 0, 0, 0.01f, 0, false, "SGD(weight_decay)"},
        {HR_OPTIM_SGD, 0.05f, 0.9f, 0.1f, 0.01f, 0, false, "SGD(momentum, dampening)"},
        {HR_OPTIM_SGD, 0.05f, 0.9f, 0, 0, 0, true, "SGD(nesterov)"},
        {HR_OPTIM_SGD, 0.1f, 0.9f, 0, 0, 0.5f, false, "SGD(clip_norm 0.5)"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0, 0, false, "Adam"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0.05f, 0, false, "Adam(weight_decay)"},
        {HR_OPTIM_ADAMW, 1e-2f, 0, 0, 0.05f, 0, false, "AdamW"},
        {HR_OPTIM_ADAM, 1e-2f, 0, 0, 0, 1.0f, false, "Adam(clip_norm 1)"},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) test_optim(&opts[i]);
}

OPS_TALLY(ops_tally_optim)
