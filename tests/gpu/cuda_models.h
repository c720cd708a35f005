/* cuda_models.h — the small models that tests/gpu/test_cuda_ops.c runs node
 * by node on both backends, each chosen for the ops and corner cases it
 * reaches (see main's list there). */
#ifndef HR_TESTS_CUDA_MODELS_H
#define HR_TESTS_CUDA_MODELS_H

#include "headroom.h"

static inline hr_model_t *mlp_dropout(void) { /* Linear ReLU Dropout Linear, CE */
    hr_model_t *m = hr_model_new("mlp_dropout");
    int x = hr_input(m, "x", 1, (int64_t[]){20});
    x = hr_linear(m, NULL, x, 20, 32, true);
    x = hr_relu(m, NULL, x);
    x = hr_dropout(m, NULL, x, 0.3f);
    x = hr_linear(m, NULL, x, 32, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

/* Dropout over 13 features: at batch 5, 65 values, so its kernels' vector
 * loops (4 floats, 8 halves a thread) leave one value to the tail */
static inline hr_model_t *odd_dropout(void) {
    hr_model_t *m = hr_model_new("odd_dropout");
    int x = hr_input(m, "x", 1, (int64_t[]){20});
    x = hr_linear(m, NULL, x, 20, 13, true);
    x = hr_dropout(m, NULL, x, 0.4f);
    x = hr_linear(m, NULL, x, 13, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

static inline hr_model_t *cnn_bn(void) { /* Conv BN ReLU MaxPool Conv AvgPool Dropout Flatten Linear, CE */
    hr_model_t *m = hr_model_new("cnn_bn");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 12, 12});
    x = hr_conv2d(m, NULL, x, 3, 8, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 8, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);               /* 8x6x6 */
    x = hr_conv2d(m, NULL, x, 8, 8, 3, 1, 0, false);  /* 8x4x4 */
    x = hr_avgpool2d(m, NULL, x, 2, 2);               /* 8x2x2 */
    x = hr_dropout(m, NULL, x, 0.25f);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 32, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

static inline hr_model_t *res_concat(void) { /* two convs, Add, Concat, global pool, LogSoftmax, CE */
    hr_model_t *m = hr_model_new("res_concat");
    int x = hr_input(m, "x", 3, (int64_t[]){4, 8, 8});
    int a = hr_conv2d(m, NULL, x, 4, 4, 3, 1, 1, true);
    int b = hr_conv2d(m, NULL, x, 4, 4, 1, 1, 0, true);
    int c = hr_add(m, NULL, a, b);
    int y = hr_concat(m, NULL, 2, (int[]){c, a});
    y = hr_relu(m, NULL, y);
    y = hr_conv2d(m, NULL, y, 8, 6, 3, 2, 1, true); /* 6x4x4, strided */
    y = hr_global_avgpool(m, NULL, y);
    y = hr_flatten(m, NULL, y);
    y = hr_linear(m, NULL, y, 6, 6, true);
    y = hr_log_softmax(m, NULL, y);
    hr_loss_cross_entropy(m, y, 6);
    return m;
}

static inline hr_model_t *fork_cnn(void) { /* a conv's output read by two convs: the second dx adds */
    hr_model_t *m = hr_model_new("fork_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){4, 8, 8});
    int h = hr_conv2d(m, NULL, x, 4, 8, 3, 1, 1, true);
    h = hr_relu(m, NULL, h);
    int a = hr_conv2d(m, NULL, h, 8, 8, 3, 1, 1, true);
    int b = hr_conv2d(m, NULL, h, 8, 8, 1, 1, 0, true);
    int y = hr_add(m, NULL, a, b);
    y = hr_relu(m, NULL, y);
    y = hr_global_avgpool(m, NULL, y);
    y = hr_flatten(m, NULL, y);
    y = hr_linear(m, NULL, y, 8, 6, true);
    hr_loss_cross_entropy(m, y, 6);
    return m;
}

static inline hr_model_t *bn_first(void) { /* BatchNorm on the input itself (the test shifts it), ReLU, Linear, CE */
    hr_model_t *m = hr_model_new("bn_first");
    int x = hr_input(m, "x", 3, (int64_t[]){4, 16, 16});
    x = hr_batchnorm(m, NULL, x, 4, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 1024, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

static inline hr_model_t *bn1d_softmax_mse(void) { /* Linear BN1d ReLU Linear Softmax, MSE */
    hr_model_t *m = hr_model_new("bn1d_softmax");
    int x = hr_input(m, "x", 1, (int64_t[]){10});
    x = hr_linear(m, NULL, x, 10, 16, true);
    x = hr_batchnorm(m, NULL, x, 16, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 16, 5, true);
    x = hr_softmax(m, NULL, x);
    hr_loss_mse(m, x);
    return m;
}

static inline hr_model_t *overlap_pool(void) { /* overlapping windows and ReLU's zeros: ties in max pooling */
    hr_model_t *m = hr_model_new("overlap_pool");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 9, 9});
    x = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 3, 2); /* 3x4x4 */
    x = hr_avgpool2d(m, NULL, x, 3, 1); /* 3x2x2 */
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 12, 5, true);
    hr_loss_cross_entropy(m, x, 5);
    return m;
}

/* a 16x16 window has 256 positions, more than a byte's offsets: the max pool
 * keeps x and its backward finds the argmax again (the other CUDA path) */
static inline hr_model_t *wide_pool(void) {
    hr_model_t *m = hr_model_new("wide_pool");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 16, 16});
    x = hr_conv2d(m, NULL, x, 2, 3, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 16, 16); /* 3x1x1 */
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 3, 4, true);
    hr_loss_cross_entropy(m, x, 4);
    return m;
}

/* every activation on (batch, features), both GELUs; LayerNorm over the last
 * dim: on the input (no gradient to it), without affine, affine without bias */
static inline hr_model_t *act_mlp(void) {
    hr_model_t *m = hr_model_new("act_mlp");
    int x = hr_input(m, "x", 1, (int64_t[]){24});
    x = hr_layernorm(m, NULL, x, 1, (int64_t[]){24}, 1e-5f, true, true);
    x = hr_linear(m, NULL, x, 24, 32, true);
    x = hr_leaky_relu(m, NULL, x, 0.1f);
    x = hr_linear(m, NULL, x, 32, 32, true);
    x = hr_gelu(m, NULL, x, false);
    x = hr_layernorm(m, NULL, x, 1, (int64_t[]){32}, 1e-5f, false, false);
    x = hr_linear(m, NULL, x, 32, 32, true);
    x = hr_gelu(m, NULL, x, true);
    x = hr_silu(m, NULL, x);
    x = hr_linear(m, NULL, x, 32, 16, true);
    x = hr_sigmoid(m, NULL, x);
    x = hr_layernorm(m, NULL, x, 1, (int64_t[]){16}, 1e-3f, true, false);
    x = hr_linear(m, NULL, x, 16, 16, true);
    x = hr_tanh(m, NULL, x);
    x = hr_linear(m, NULL, x, 16, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

/* LayerNorm over the last 3 dims of images (C, H, W): affine with and
 * without bias, and without affine; the activations on images */
static inline hr_model_t *ln_cnn(void) {
    hr_model_t *m = hr_model_new("ln_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 8, 8});
    x = hr_conv2d(m, NULL, x, 3, 4, 3, 1, 1, true);
    x = hr_layernorm(m, NULL, x, 3, (int64_t[]){4, 8, 8}, 1e-5f, true, true);
    x = hr_silu(m, NULL, x);
    x = hr_conv2d(m, NULL, x, 4, 4, 3, 1, 1, false);
    x = hr_layernorm(m, NULL, x, 3, (int64_t[]){4, 8, 8}, 1e-5f, true, false);
    x = hr_leaky_relu(m, NULL, x, 0.2f);
    x = hr_maxpool2d(m, NULL, x, 2, 2); /* 4x4x4 */
    x = hr_layernorm(m, NULL, x, 3, (int64_t[]){4, 4, 4}, 1e-5f, false, false);
    x = hr_gelu(m, NULL, x, true);
    x = hr_conv2d(m, NULL, x, 4, 4, 3, 1, 1, true);
    x = hr_gelu(m, NULL, x, false);
    x = hr_tanh(m, NULL, x);
    x = hr_sigmoid(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 64, 6, true);
    hr_loss_cross_entropy(m, x, 6);
    return m;
}

/* Conv2d's groups and dilation (cuDNN's group count, the filter K x C/groups, the dilations) */
static inline hr_model_t *grouped_cnn(void) {
    hr_model_t *m = hr_model_new("grouped_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){4, 10, 10});
    x = hr_conv2d_ex(m, NULL, x, 4, 8, 3, 1, 1, 1, 2, true);   /* groups 2: 8x10x10 */
    x = hr_conv2d_ex(m, NULL, x, 8, 8, 3, 1, 1, 1, 8, true);   /* depthwise */
    x = hr_conv2d_ex(m, NULL, x, 8, 16, 3, 2, 1, 1, 8, true);  /* depthwise x2, strided: 16x5x5 */
    x = hr_relu(m, NULL, x);
    x = hr_conv2d_ex(m, NULL, x, 16, 8, 3, 1, 2, 2, 1, true);  /* dilation 2: 8x5x5 */
    x = hr_conv2d_ex(m, NULL, x, 8, 8, 3, 1, 2, 2, 8, false);  /* depthwise, dilation 2 */
    x = hr_conv2d_ex(m, NULL, x, 8, 6, 1, 1, 0, 1, 2, true);   /* 1x1, groups 2: 6x5x5 */
    x = hr_flatten(m, NULL, hr_global_avgpool(m, NULL, x));
    hr_loss_cross_entropy(m, hr_linear(m, NULL, x, 6, 5, true), 5);
    return m;
}

/* tokens -> Embedding, PositionEmbedding, LayerNorm, Linear over (T, C),
 * causal attention (heads of 20: a lane holds one or no channel), Add, a
 * Linear tied to the Embedding, CrossEntropyLoss at every position */
static inline hr_model_t *tiny_gpt_p(float attn_pdrop) { /* attn_pdrop > 0: attention dropout */
    hr_model_t *m = hr_model_new(attn_pdrop > 0 ? "tiny_gpt_pdrop" : "tiny_gpt");
    int x = hr_input(m, "tokens", 1, (int64_t[]){12});
    int e = hr_embedding(m, "wte", x, 50, 40);
    e = hr_position_embedding(m, "wpe", e, 16, 40);
    x = hr_layernorm(m, NULL, e, 1, (int64_t[]){40}, 1e-5f, true, true);
    x = hr_linear(m, NULL, x, 40, 120, true);
    x = hr_causal_attention_pdrop(m, NULL, x, 2, attn_pdrop);
    x = hr_linear(m, NULL, x, 40, 40, true);
    x = hr_add(m, NULL, e, x);
    x = hr_gelu(m, NULL, x, true);
    x = hr_linear_tied(m, NULL, x, 40, 50, true, "wte");
    hr_loss_cross_entropy(m, x, 50);
    return m;
}
static inline hr_model_t *tiny_gpt(void) { return tiny_gpt_p(0.0f); }

/* Embedding and PositionEmbedding 6 wide, no multiple of 4: their kernels
 * a channel a thread (the others take four) */
static inline hr_model_t *odd_embed(void) {
    hr_model_t *m = hr_model_new("odd_embed");
    int x = hr_input(m, "tokens", 1, (int64_t[]){12});
    int e = hr_embedding(m, "wte", x, 50, 6);
    e = hr_position_embedding(m, "wpe", e, 16, 6);
    hr_loss_cross_entropy(m, hr_linear(m, NULL, e, 6, 50, true), 50);
    return m;
}

/* rows of 128 in any number: a residual Add taken into the LayerNorm after
 * it, the norm's one-pass backward over row counts that are no multiple of
 * its four-row batches (7 a sample) and, at batch 4700 (32,900 rows), over
 * more rows a block than its least */
static inline hr_model_t *ln_rows(void) {
    hr_model_t *m = hr_model_new("ln_rows");
    int x = hr_input(m, "x", 2, (int64_t[]){7, 64});
    int e = hr_linear(m, NULL, x, 64, 128, true);
    int h = hr_linear(m, NULL, e, 128, 128, true);
    h = hr_add(m, NULL, e, h);
    h = hr_layernorm(m, NULL, h, 1, (int64_t[]){128}, 1e-5f, true, true);
    h = hr_linear(m, NULL, h, 128, 8, true);
    h = hr_flatten(m, NULL, h);
    hr_loss_cross_entropy(m, hr_linear(m, NULL, h, 56, 5, true), 5);
    return m;
}

/* tiny_gpt 128 wide: LayerNorm's register form (rows of 128 n floats), with
 * and without its affine, its dx added to the residual's gradient; the head
 * without a bias, so that training fuses it with the loss (LinearCrossEntropy:
 * 50 classes padded to 56, its dW added to the Embedding's) */
static inline hr_model_t *wide_gpt(void) {
    hr_model_t *m = hr_model_new("wide_gpt");
    int x = hr_input(m, "tokens", 1, (int64_t[]){8});
    int e = hr_embedding(m, "wte", x, 50, 128);
    e = hr_position_embedding(m, "wpe", e, 16, 128);
    x = hr_layernorm(m, NULL, e, 1, (int64_t[]){128}, 1e-5f, true, true);
    x = hr_linear(m, NULL, x, 128, 384, true);
    x = hr_causal_attention(m, NULL, x, 2);
    x = hr_linear(m, NULL, x, 128, 128, true);
    x = hr_add(m, NULL, e, x);
    x = hr_layernorm(m, NULL, x, 1, (int64_t[]){128}, 1e-5f, false, false);
    x = hr_gelu(m, NULL, x, true);
    x = hr_linear_tied(m, NULL, x, 128, 50, false, "wte");
    hr_loss_cross_entropy(m, x, 50);
    return m;
}

#endif
