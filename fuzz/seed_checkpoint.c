/* seed_checkpoint.c — writes fuzz_checkpoint's seeds into DIR: checkpoints that
 * headroom saves after one training step, plain weight files, and near misses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "checkpoint_model.h"

static void fail(const char *what) {
    fprintf(stderr, "seed_checkpoint: %s: %s\n", what, hr_last_error());
    exit(1);
}

/* Parameters and buffers only, as PyTorch's save_file writes a state dict,
 * converted to dtype (F32, F64, BF16). */
static void write_weights(hr_session_t *s, const char *path, const char *dtype, const char *extra_name) {
    hr_st_entry e[64];
    int64_t dims[64][HR_ST_MAX_DIMS];
    void *bufs[64];
    int n = 0;
    for (int i = 0; i < hr_state_count(s) && n < 62; i++) {
        if (!hr_state_is_param(s, i)) continue;
        size_t numel = 1;
        int nd = hr_state_ndim(s, i);
        for (int d = 0; d < nd; d++) numel *= (size_t)(dims[n][d] = hr_state_dim(s, i, d));
        float *v = malloc(numel * sizeof(float));
        double *v64 = malloc(numel * sizeof(double));
        unsigned short *v16 = malloc(numel * 2);
        if (!v || !v64 || !v16 || hr_state_read(s, i, v) != HR_OK) fail("read state");
        for (size_t j = 0; j < numel; j++) {
            v64[j] = v[j];
            unsigned int u;
            memcpy(&u, &v[j], 4);
            v16[j] = (unsigned short)(u >> 16); /* bfloat16: the top half, truncated */
        }
        bool f64 = !strcmp(dtype, "F64"), bf16 = !strcmp(dtype, "BF16");
        bufs[n] = f64 ? (void *)v64 : bf16 ? (void *)v16 : (void *)v;
        if (bufs[n] != v) free(v);
        if (bufs[n] != v64) free(v64);
        if (bufs[n] != v16) free(v16);
        e[n] = (hr_st_entry){hr_state_name(s, i), dtype, nd, dims[n], bufs[n]};
        n++;
    }
    if (extra_name) e[n++] = (hr_st_entry){extra_name, dtype, e[0].ndim, e[0].dims, bufs[0]};
    if (hr_safetensors_write(path, e, n, NULL, NULL, 0, NULL, NULL) != HR_OK) fail(path);
    for (int i = 0; i < n - (extra_name != NULL); i++) free(bufs[i]);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: seed_checkpoint DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char path[4096];
    hr_model_t *m = hr_modelfile_parse(FUZZ_CKPT_MODEL, "fuzz_checkpoint.model");
    if (!m) fail("model");
    /* one fixed batch: any values do, the seeds only need trained state */
    float x[FUZZ_CKPT_BATCH * FUZZ_CKPT_PIXELS];
    int32_t y[FUZZ_CKPT_BATCH];
    for (int i = 0; i < FUZZ_CKPT_BATCH * FUZZ_CKPT_PIXELS; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < FUZZ_CKPT_BATCH; i++) y[i] = i % FUZZ_CKPT_CLASSES;
    for (int k = 0; k < FUZZ_CKPT_SESSIONS; k++) {
        hr_session_t *s = fuzz_ckpt_session(m, k);
        if (!s) fail(FUZZ_CKPT_NAMES[k]);
        if (k != FUZZ_CKPT_INFER && hr_train_step(s, x, y, NULL) != HR_OK) fail("train step");
        hr_ckpt_meta meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.model, sizeof meta.model, "fuzz_checkpoint");
        meta.epoch = 0;
        meta.batch = 1;
        meta.seed = 1;
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, FUZZ_CKPT_NAMES[k]);
        if (hr_checkpoint_save(s, path, &meta) != HR_OK) fail(path);
        if (k == FUZZ_CKPT_ADAM) {
            static const char *dt[] = {"F32", "F64", "BF16"};
            for (int j = 0; j < 3; j++) {
                snprintf(path, sizeof path, "%s/weights_%s.safetensors", dir, dt[j]);
                write_weights(s, path, dt[j], NULL);
            }
            snprintf(path, sizeof path, "%s/weights_extra_tensor.safetensors", dir);
            write_weights(s, path, "F32", "fc.weight");
        }
        hr_session_free(s);
    }
    /* Another model's checkpoint: the fingerprint differs, so the loader says how. */
    hr_model_t *other = hr_modelfile_parse("input 1 4 4\nConv2d(1, 2, 3, padding=1)\nBatchNorm2d(2)\nReLU()\n"
                                           "Flatten()\nLayerNorm(32)\nLinear(32, 4)\nloss CrossEntropyLoss\n",
                                           "other.model");
    hr_session_t *s = other ? fuzz_ckpt_session(other, FUZZ_CKPT_INFER) : NULL;
    if (!s) fail("other model");
    snprintf(path, sizeof path, "%s/other_model.safetensors", dir);
    if (hr_checkpoint_save(s, path, NULL) != HR_OK) fail(path);
    hr_session_free(s);
    hr_model_free(other);
    hr_model_free(m);
    return 0;
}
