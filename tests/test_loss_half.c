/* test_loss_half.c — the cross-entropy on half logits (CPU, through the public
 * API and the compiled program): under bf16 and fp16 the loss reads the last
 * Linear's half output itself, with no F32 copy of the logits in the step;
 * its backward writes the half gradient over the logits' own bytes unless
 * the session keeps its output (keep_output), which hr_read_output then
 * widens: half values whose float64 cross-entropy is the loss the step
 * returned, and the logits of an inference session and of an evaluation
 * pass, whose outputs stay half too. An MLP and a small CNN. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"

#include <math.h>
#include <string.h>

enum { B = 16, D = 20, H = 27, C = 5 };

static hr_session_t *session_mode(bool cnn, hr_precision p, bool keep, hr_mode mode, int64_t eval_batch) {
    hr_model_t *m = hr_model_new(cnn ? "cnn" : "mlp");
    int x = hr_input(m, "x", cnn ? 3 : 1, cnn ? (int64_t[]){1, 6, 6} : (int64_t[]){D});
    if (cnn) {
        x = hr_conv2d(m, NULL, x, 1, 3, 3, 1, 1, true);
        x = hr_relu(m, NULL, x);
        x = hr_maxpool2d(m, NULL, x, 2, 2);
        x = hr_flatten(m, NULL, x);
    } else {
        x = hr_linear(m, NULL, x, D, H, true);
        x = hr_relu(m, NULL, x);
    }
    x = hr_linear(m, NULL, x, H, C, true);
    hr_loss_cross_entropy(m, x, C);
    hr_config_t c = hr_config_default();
    c.batch = B, c.precision = p, c.keep_output = keep, c.seed = 3, c.mode = mode, c.eval_batch = eval_batch;
    hr_session_t *s = hr_compile(m, &c);
    hr_model_free(m);
    CHECK(s != NULL && hr_session_alloc(s) == HR_OK, "compile %s: %s", hr_precision_name(p), hr_last_error());
    return s;
}
static hr_session_t *session(bool cnn, hr_precision p, bool keep) { return session_mode(cnn, p, keep, HR_MODE_TRAIN, 0); }

/* Each precision, with and without keep_output: the program's shape, then
 * one step; the loss against the float64 cross-entropy of the logits read
 * back within the F32 arithmetic's error, 1e-6. */
static void test_loss_reads_half(bool cnn) {
    float x[B * 36], logits[B * C];
    int32_t lab[B];
    uint64_t r = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < B * 36; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(r >> 40) / 8388608.0 - 1.0);
    }
    for (int i = 0; i < B; i++) lab[i] = (i * 7) % C;
    for (hr_precision p = HR_PREC_BF16; p <= HR_PREC_FP16; p++)
        for (int keep = 0; keep < 2; keep++) {
            hr_session_t *s = session(cnn, p, keep);
            if (!s) continue;
            const hr_program *pr = hr_session_program(s);
            const hr_graph *g = &pr->g;
            const hr_node *ce = NULL, *ceb = NULL;
            int f32_copies = 0;
            for (int k = 0; k < pr->n_step; k++) {
                const hr_node *n = &g->n[k];
                if (n->op == HR_OP_CROSS_ENTROPY) ce = n;
                if (n->op == HR_OP_CROSS_ENTROPY_BWD) ceb = n;
                if (n->op == HR_OP_CAST && n->in[0] == pr->output && g->t[n->out[0]].dtype == HR_F32) f32_copies++;
            }
            const char *pn = hr_precision_name(p);
            CHECK(ce && ceb && ce->in[0] == pr->output && g->t[pr->output].dtype == (p == HR_PREC_BF16 ? HR_BF16 : HR_F16)
                      && f32_copies == 0,
                  "%s: the loss reads %s logits (%d F32 copies in the step)", pn,
                  ce ? hr_dtype_name(g->t[ce->in[0]].dtype) : "no", f32_copies);
            if (ceb)
                CHECK(g->t[ceb->out[0]].dtype == g->t[ceb->in[0]].dtype &&
                          (g->t[ceb->out[0]].offset == g->t[ceb->in[0]].offset) == !keep,
                      "%s, keep_output %d: dlogits (%s) %s the logits' bytes", pn, keep,
                      hr_dtype_name(g->t[ceb->out[0]].dtype), keep ? "take" : "do not take");
            float loss = NAN;
            CHECK(hr_train_step(s, x, lab, &loss) == HR_OK, "%s step: %s", pn, hr_last_error());
            hr_status st = hr_read_output(s, logits);
            CHECK(keep ? st == HR_OK : st == HR_ERR_INVALID_ARG, "%s, keep_output %d: read_output: %s", pn, keep,
                  hr_last_error());
            if (keep && st == HR_OK) {
                double want = 0;
                int not_half = 0;
                for (int i = 0; i < B; i++) {
                    const float *z = logits + i * C;
                    double mx = z[0], sum = 0;
                    for (int j = 0; j < C; j++) {
                        float h = p == HR_PREC_BF16 ? hr_bf16_to_f32(hr_f32_to_bf16(z[j])) : hr_f16_to_f32(hr_f32_to_f16(z[j]));
                        not_half += h != z[j];
                        mx = z[j] > mx ? z[j] : mx;
                    }
                    for (int j = 0; j < C; j++) sum += exp((double)z[j] - mx);
                    want += (mx + log(sum) - z[lab[i]]) / B;
                }
                CHECK(not_half == 0 && fabs(loss - want) <= 1e-6 * (1 + fabs(want)),
                      "%s: loss %.9g vs float64 %.9g of the logits read back (%d of them not %s values)", pn, loss,
                      want, not_half, pn);
                /* inference and a training session's evaluation pass, from the
                 * same initial weights: their half outputs, widened on the
                 * host, are the same logits (no F32 copy on the device) */
                hr_session_t *inf = session_mode(cnn, p, false, HR_MODE_INFER, 0);
                hr_session_t *ev = session_mode(cnn, p, false, HR_MODE_TRAIN, B);
                float a[B * C], b[B * C];
                if (inf && ev) {
                    const hr_program *ip = hr_session_program(inf), *ep = hr_session_program(ev);
                    CHECK(hr_dtype_is_half(ip->g.t[ip->output].dtype) && hr_dtype_is_half(ep->g.t[ep->eval_output].dtype),
                          "%s: the inference and evaluation outputs are %s and %s", pn,
                          hr_dtype_name(ip->g.t[ip->output].dtype), hr_dtype_name(ep->g.t[ep->eval_output].dtype));
                    CHECK(hr_forward(inf, x, a) == HR_OK && hr_eval_forward(ev, x, b) == HR_OK, "%s forward: %s", pn,
                          hr_last_error());
                    CHECK(!memcmp(a, logits, sizeof a) && !memcmp(b, logits, sizeof b),
                          "%s: the inference or evaluation logits differ from the training step's", pn);
                }
                hr_session_free(inf);
                hr_session_free(ev);
            }
            hr_session_free(s);
        }
}

int main(void) {
    test_loss_reads_half(false);
    test_loss_reads_half(true);
    TEST_END();
}
