/* test_fuse_bias.c — a Linear's bias gradient taken into the LayerNorm
 * backward that writes its dy (hr_norm_take_bias_grads): in mixed-precision
 * training the norm's backward writes the half copy of the residual stream's
 * gradient that a Linear reads as dy, and adds that copy's columns into the
 * Linear's bias gradient as it writes it, so the Linear's own pass over dy
 * goes. On the CPU the norm adds the rows in the order the Linear did, so
 * the fused program must give the unfused one's (HR_FUSE_BIAS=0) losses,
 * gradients and states bit for bit, in bf16 and fp16, with accumulation
 * (the flag that makes later micro-batches add moves with the gradient),
 * 128 wide and 40 wide. Not fused: fp32 (no half copy), a Linear whose dy is
 * the cast of a gradient another Linear last wrote, the head, and programs
 * cut in chunks. tests/gpu/test_cuda_fuse_bias.c builds this for the GPU,
 * where the sums run in another order: there the losses and gradients are
 * held to the unfused program's within float rounding. */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "residual_joins.h"
#include "same_states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef FB_DEVICE
#define FB_DEVICE HR_DEVICE_CPU
#endif

enum { B = 4, T = 16, V = 53 };
static int W = 128; /* 128: the GPU's one-pass backward (its partials); 40: its other forms */

/* Four residual joins: fc1's, fc2's and fc4's sums reach a norm whose
 * backward writes their dy (fused); fc3's dy is the cast of the stream's
 * gradient after fc4's backward added into it (not fused); the head has no
 * bias. */
static hr_model_t *model(void) { return residual_joins("fuse_bias", T, V, W); }

static hr_session_t *compile(hr_model_t *m, hr_precision p, int acc, int chunks, bool fuse) {
    hr_config_t c = hr_config_default();
    c.device = FB_DEVICE;
    c.batch = B, c.precision = p, c.accumulate = acc, c.chunks = chunks, c.keep_grads = true;
    c.seed = 13, c.eval_batch = 0, c.optim.kind = HR_OPTIM_ADAMW, c.optim.lr = 1e-2f;
    if (fuse) unsetenv("HR_FUSE_BIAS");
    else setenv("HR_FUSE_BIAS", "0", 1);
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_FUSE_BIAS");
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

/* norm backwards that write a Linear's bias gradient, and the Linear
 * backwards that still write their own */
static void count(const hr_session_t *s, int *taken, int *own) {
    const hr_program *p = hr_session_program(s);
    *taken = *own = 0;
    for (int i = p->n_fwd; i < p->n_bwd_end; i++) {
        const hr_node *n = &p->g.n[i];
        *taken += n->op == HR_OP_LAYERNORM_BWD && n->nout > 4 && n->out[4] >= 0;
        *own += n->op == HR_OP_LINEAR_BWD && n->nout > 2 && n->out[2] >= 0;
    }
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 29 + step * 13) % V);
        lab[i] = (int32_t)((i * 11 + step * 3 + 1) % V);
    }
}

/* a and b within float rounding of sums of B T terms: |a - b| <= 1e-5 (|a| + |b|) + 1e-7 */
static bool close(float a, float b) { return fabsf(a - b) <= 1e-5f * (fabsf(a) + fabsf(b)) + 1e-7f; }

/* every bias's gradient in f against u's; how many values agreed (bit for
 * bit on the CPU, within close() on the GPU) */
static void same_bias_grads(hr_session_t *f, hr_session_t *u, const char *what) {
    const char *names[] = {"fc1.bias", "fc2.bias", "fc3.bias", "fc4.bias", "ln1.bias", "ln2.bias"};
    float *a = malloc(sizeof(float) * (size_t)W), *b = malloc(sizeof(float) * (size_t)W);
    if (!a || !b) {
        CHECK(0, "out of memory");
        free(a), free(b);
        return;
    }
    for (int k = 0; k < 6; k++) {
        bool read = hr_grad_read(f, names[k], a) == HR_OK && hr_grad_read(u, names[k], b) == HR_OK;
        int bad = read ? 0 : W, first = -1;
        for (int j = 0; read && j < W; j++) {
            bool ok = FB_DEVICE == HR_DEVICE_CPU ? !memcmp(&a[j], &b[j], sizeof(float)) : close(a[j], b[j]);
            if (!ok && first < 0) first = j;
            bad += !ok;
        }
        CHECK(bad == 0, "%s: %s's gradient: %d of %d values differ fused and not (first [%d]: %.9g against %.9g)",
              what, names[k], bad, W, first, first >= 0 ? a[first] : 0.0f, first >= 0 ? b[first] : 0.0f);
    }
    free(a);
    free(b);
}

static void train(hr_precision p, int acc, int chunks) {
    const char *pn = hr_precision_name(p);
    char what[96];
    snprintf(what, sizeof what, "%s W=%d K=%d chunks %d", pn, W, acc, chunks);
    hr_model_t *m = model();
    hr_session_t *f = compile(m, p, acc, chunks, true), *u = compile(m, p, acc, chunks, false);
    hr_model_free(m);
    if (!f || !u) goto done;
    int tf, of, tu, ou;
    count(f, &tf, &of);
    count(u, &tu, &ou);
    int want = p == HR_PREC_FP32 || chunks > 1 ? 0 : 3; /* fc1, fc2, fc4 */
    CHECK(tf == want && of == 4 - want && tu == 0 && ou == 4, "%s: %d norms take a bias gradient (%d), %d Linears "
          "keep theirs (%d); unfused: 0 (%d), 4 (%d)", what, want, tf, 4 - want, of, tu, ou);
    float x[B * T];
    int32_t lab[B * T];
    for (int step = 0; step < 3; step++) {
        float lf = -1, lu = -2;
        batch(step, x, lab);
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", what,
              hr_last_error());
        bool ok = FB_DEVICE == HR_DEVICE_CPU ? !memcmp(&lf, &lu, sizeof lf) : close(lf, lu);
        CHECK(ok, "%s step %d: loss %.9g fused, %.9g not", what, step, lf, lu);
        if (step == 0) same_bias_grads(f, u, what); /* after one update: the same weights made them */
    }
    if (FB_DEVICE == HR_DEVICE_CPU) {
        int same = same_states(f, u, what, "fused");
        CHECK(same == hr_state_count(u) && same > 0, "%s: %d of %d states compared equal", what, same,
              hr_state_count(u));
    }
done:
    hr_session_free(f);
    hr_session_free(u);
}

int main(void) {
    train(HR_PREC_BF16, 1, 1);
    train(HR_PREC_BF16, 2, 1);
    train(HR_PREC_FP16, 1, 1);
    train(HR_PREC_FP16, 2, 1);
    train(HR_PREC_FP32, 1, 1);
    train(HR_PREC_BF16, 1, 2);
    W = 40;
    train(HR_PREC_BF16, 1, 1);
    train(HR_PREC_BF16, 2, 1);
    TEST_END();
}
