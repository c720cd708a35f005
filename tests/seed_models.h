/* seed_models.h — the three seed models of the issues (examples/mlp.model,
 * simple_cnn.model, deep_cnn.model) built through the C API, for the tests
 * that need them without a model file. */
#ifndef HR_TEST_SEED_MODELS_H
#define HR_TEST_SEED_MODELS_H

#include "headroom.h"

static inline hr_model_t *seed_mlp(void) {
    hr_model_t *m = hr_model_new("mlp");
    int x = hr_input(m, "x", 1, (int64_t[]){1000});
    x = hr_linear(m, NULL, x, 1000, 2000, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 2000, 1000, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 1000, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

static inline hr_model_t *seed_simple_cnn(void) {
    hr_model_t *m = hr_model_new("simple_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 32, 32});
    x = hr_conv2d(m, NULL, x, 3, 16, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 4096, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

/* three blocks of Conv2d(3x3, padding 1), ReLU, MaxPool2d(2): 3 -> 32 -> 64 -> 128 */
static inline hr_model_t *seed_deep_cnn(void) {
    hr_model_t *m = hr_model_new("deep_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 64, 64});
    int ch[4] = {3, 32, 64, 128};
    for (int i = 0; i < 3; i++) {
        x = hr_conv2d(m, NULL, x, ch[i], ch[i + 1], 3, 1, 1, true);
        x = hr_relu(m, NULL, x);
        x = hr_maxpool2d(m, NULL, x, 2, 2);
    }
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 8192, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

#endif
