/* residual_joins.h — a small GPT-like stack of residual joins for the tests
 * of rewrites around them (test_fuse_add.c, test_fuse_bias.c): tokens ->
 * wte, wpe (the F32 stream e), then four joins of e and a Linear's output:
 *   fc1: e + fc1(ln1(e))      its sum read by ln2
 *   fc2: fc2(ln2(e)) + e      the F32 stream second, read by ln3
 *   fc3: e + fc3(ln3(e))      ln3 without a bias; its sum read by fc4, a Linear
 *   fc4: e + fc4(e)           read by ln_f (no affine)
 * and a head without a bias over V classes, CrossEntropyLoss at every one of
 * the T positions. Every Linear is W -> W with a bias. */
#ifndef RESIDUAL_JOINS_H
#define RESIDUAL_JOINS_H

#include "headroom.h"

static hr_model_t *residual_joins(const char *name, int64_t T, int64_t V, int64_t W) {
    hr_model_t *m = hr_model_new(name);
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    int h = hr_layernorm(m, "ln1", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc1", h, W, W, true);
    e = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln2", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "fc2", h, W, W, true);
    e = hr_add(m, NULL, h, e);
    h = hr_layernorm(m, "ln3", e, 1, (int64_t[]){W}, 1e-5f, true, false);
    h = hr_linear(m, "fc3", h, W, W, true);
    e = hr_add(m, NULL, e, h);
    h = hr_linear(m, "fc4", e, W, W, true);
    e = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln_f", e, 1, (int64_t[]){W}, 1e-5f, false, false);
    h = hr_linear(m, "lm_head", h, W, V, false);
    hr_loss_cross_entropy(m, h, V);
    return m;
}

#endif
