/* test_threads.c — the CPU's results do not depend on its thread count: a
 * small GPT trained three steps with one thread and with two gives the same
 * losses and the same bits in every parameter, gradient and Adam moment. The
 * shapes take the kernels' threaded paths: attention's heads as tasks with
 * their blocks of 64 queries (131 positions: three blocks, the last of 3),
 * GELU's elementwise loops split between the threads (66,810 values, over
 * their 65,536 threshold; half of them an odd count), whose vector calls
 * (glibc's libmvec) must fall on the same elements whatever the split. */
#include "check.h"
#include "headroom.h"
#include "same_states.h"

#include <omp.h>
#include <string.h>

enum { B = 5, T = 131, V = 61, W = 32, HID = 102, HEADS = 4, STEPS = 3 };

static hr_model_t *model(void) {
    hr_model_t *m = hr_model_new("threads");
    int x = hr_input(m, "tokens", 1, (int64_t[]){T});
    int e = hr_embedding(m, "wte", x, V, W);
    e = hr_position_embedding(m, "wpe", e, T, W);
    e = hr_dropout(m, "drop", e, 0.1f);
    int h = hr_layernorm(m, "ln1", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "c_attn", h, W, 3 * W, true);
    h = hr_causal_attention_pdrop(m, "sdpa", h, HEADS, 0.1f);
    h = hr_linear(m, "c_proj", h, W, W, true);
    e = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln2", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "c_fc", h, W, HID, true);
    h = hr_gelu(m, NULL, h, false);
    h = hr_linear(m, "mlp_proj", h, HID, W, true);
    h = hr_dropout(m, "mlp_drop", h, 0.1f);
    e = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, "ln_f", e, 1, (int64_t[]){W}, 1e-5f, true, true);
    h = hr_linear(m, "lm_head", h, W, V, false);
    CHECK(hr_loss_cross_entropy(m, h, V) >= 0, "model: %s", hr_last_error());
    return m;
}

/* A session built and trained with `threads` OpenMP threads; its losses in loss[]. */
static hr_session_t *trained(const hr_model_t *m, int threads, float loss[STEPS]) {
    omp_set_num_threads(threads);
    hr_config_t c = hr_config_default();
    c.device = HR_DEVICE_CPU;
    c.batch = B, c.seed = 7, c.keep_grads = true, c.optim.lr = 1e-2f;
    hr_session_t *s = hr_compile(m, &c);
    bool ok = s && hr_session_alloc(s) == HR_OK;
    CHECK(ok, "%d threads: compile: %s", threads, hr_last_error());
    float x[B * T];
    int32_t lab[B * T];
    for (int step = 0; ok && step < STEPS; step++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (float)((i * 29 + step * 13) % V);
            lab[i] = (int32_t)((i * 11 + step * 7 + 3) % V);
        }
        ok = hr_train_step(s, x, lab, &loss[step]) == HR_OK;
        CHECK(ok, "%d threads: step %d: %s", threads, step, hr_last_error());
    }
    return s;
}

int main(void) {
    hr_model_t *m = model();
    float l1[STEPS] = {0}, l2[STEPS] = {0};
    hr_session_t *one = trained(m, 1, l1), *two = trained(m, 2, l2);
    for (int k = 0; k < STEPS; k++)
        CHECK(!memcmp(&l1[k], &l2[k], sizeof(float)), "step %d's loss: %.9g with 1 thread, %.9g with 2", k, l1[k],
              l2[k]);
    if (one && two) {
        int same = same_states(one, two, "1 and 2 threads", "with 1 thread");
        printf("  %d states (with their gradients) the same bits with 1 and 2 threads; losses %.6f %.6f %.6f\n", same,
               l1[0], l1[1], l1[2]);
    }
    hr_session_free(one);
    hr_session_free(two);
    hr_model_free(m);
    TEST_END();
}
