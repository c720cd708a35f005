/* test_fuse_add.c — a residual Add taken into the norm that reads its sum
 * (hr_norm_take_adds, a.pre_add): in training, the Add that writes an F32
 * stream goes into the next node when that node normalises the sum; the norm
 * writes the sum itself (its backward reads it as before). The arithmetic is
 * the Add's (each input widened to F32, one F32 sum) and then the norm's, so
 * the program must give the unfused one's (HR_FUSE_ADD=0) losses, gradients
 * and states bit for bit, in fp32, bf16 and fp16 (a half branch joining the
 * F32 stream), with accumulation, with the F32 input second in the Add, and
 * on a norm without its affine, 128 wide and 40 wide. Not fused: an Add whose sum a Linear reads
 * next, inference, and a program with recomputation. Built for the GPU by
 * tests/gpu/test_cuda_fuse_add.c (the same bits there: the norm's kernel
 * adds as the Add kernel does). */
#include "check.h"
#include "exec/internal.h"
#include "headroom.h"
#include "residual_joins.h"
#include "same_states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef FA_DEVICE
#define FA_DEVICE HR_DEVICE_CPU
#endif

enum { B = 4, T = 16, V = 53 };
static int W = 128; /* 128: the GPU's register form; 40: its other forms (the sum made first) */

/* residual_joins.h: three joins whose sums a norm reads next (fc1's, fc2's
 * with the F32 stream second, fc4's into a norm without affine), one whose
 * sum a Linear reads (fc3's: not fused), and the head. */
static hr_model_t *model(void) { return residual_joins("fuse_add", T, V, W); }

static hr_session_t *compile(hr_model_t *m, hr_precision p, hr_mode mode, int acc, bool fuse, const char *recompute) {
    hr_config_t c = hr_config_default();
    c.device = FA_DEVICE;
    c.batch = B, c.precision = p, c.accumulate = acc, c.mode = mode, c.keep_grads = true;
    c.seed = 11, c.eval_batch = 0, c.optim.kind = HR_OPTIM_ADAMW, c.optim.lr = 1e-2f;
    c.recompute = recompute;
    if (fuse) unsetenv("HR_FUSE_ADD");
    else setenv("HR_FUSE_ADD", "0", 1);
    hr_session_t *s = hr_compile(m, &c);
    unsetenv("HR_FUSE_ADD");
    CHECK(s && hr_session_alloc(s) == HR_OK, "compile: %s", hr_last_error());
    return s;
}

/* forward Adds and norms that took one in */
static void count(const hr_session_t *s, int *adds, int *taken) {
    const hr_program *p = hr_session_program(s);
    *adds = *taken = 0;
    for (int i = 0; i < p->n_fwd; i++) {
        *adds += p->g.n[i].op == HR_OP_ADD;
        *taken += p->g.n[i].a.pre_add;
    }
}

static void batch(int step, float *x, int32_t *lab) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (float)((i * 31 + step * 17) % V);
        lab[i] = (int32_t)((i * 7 + step * 5 + 2) % V);
    }
}

static void train(hr_precision p, int acc, const char *recompute) {
    const char *pn = hr_precision_name(p), *rn = recompute ? recompute : "none";
    hr_model_t *m = model();
    hr_session_t *f = compile(m, p, HR_MODE_TRAIN, acc, true, recompute),
                 *u = compile(m, p, HR_MODE_TRAIN, acc, false, recompute);
    hr_model_free(m);
    if (!f || !u) goto done;
    int af, tf, au, tu;
    count(f, &af, &tf);
    count(u, &au, &tu);
    int want = recompute ? 0 : 3; /* into ln2, ln3 and ln_f; fc3's join is read by fc4 next */
    CHECK(tf == want && af == 4 - want && tu == 0 && au == 4, "%s K=%d recompute %s: %d norms take their Add (%d), "
          "%d Adds left (%d); unfused: 0 (%d), 4 Adds (%d)", pn, acc, rn, want, tf, 4 - want, af, tu, au);
    float x[B * T];
    int32_t lab[B * T];
    for (int step = 0; step < 3; step++) {
        float lf = -1, lu = -2;
        batch(step, x, lab);
        CHECK(hr_train_step(f, x, lab, &lf) == HR_OK && hr_train_step(u, x, lab, &lu) == HR_OK, "%s step: %s", pn,
              hr_last_error());
        CHECK(!memcmp(&lf, &lu, sizeof lf), "%s K=%d recompute %s step %d: loss %.9g fused, %.9g not", pn, acc, rn,
              step, lf, lu);
    }
    char what[96]; /* the states after the updates, and the gradients */
    snprintf(what, sizeof what, "%s K=%d recompute %s", pn, acc, rn);
    int same = same_states(f, u, what, "fused");
    CHECK(same == hr_state_count(u) && same > 0, "%s: %d of %d states compared equal", pn, same, hr_state_count(u));
done:
    hr_session_free(f);
    hr_session_free(u);
}

/* Inference: the Adds stay (nothing is fused there). */
static void infer(void) {
    hr_model_t *m = model();
    hr_session_t *s = compile(m, HR_PREC_BF16, HR_MODE_INFER, 1, true, NULL);
    hr_model_free(m);
    if (!s) return;
    const hr_program *p = hr_session_program(s);
    int taken = 0;
    for (int i = 0; i < p->g.nn; i++) taken += p->g.n[i].a.pre_add;
    CHECK(taken == 0, "inference: %d norms took an Add", taken);
    hr_session_free(s);
}

int main(void) {
    hr_precision ps[] = {HR_PREC_FP32, HR_PREC_BF16, HR_PREC_FP16};
    for (int i = 0; i < 3; i++) {
        train(ps[i], 1, NULL);
        train(ps[i], 2, NULL);
    }
    train(HR_PREC_BF16, 1, "all");
    W = 40;
    train(HR_PREC_FP32, 1, NULL);
    train(HR_PREC_BF16, 2, NULL);
    infer();
    TEST_END();
}
