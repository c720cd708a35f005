/* checkpoint_model.h — the tiny model and the three sessions that fuzz_checkpoint
 * loads into and seed_checkpoint saves from, so the seeds always fit the target. */
#ifndef FUZZ_CHECKPOINT_MODEL_H
#define FUZZ_CHECKPOINT_MODEL_H

#include "headroom.h"

/* Every kind of state a checkpoint holds: weights and biases, BatchNorm's
 * running statistics (and PyTorch's num_batches_tracked in the file), a
 * LayerNorm, and per optimizer its own state. */
static const char FUZZ_CKPT_MODEL[] = "input 1 4 4\n"
                                      "Conv2d(1, 2, 3, padding=1)\n"
                                      "BatchNorm2d(2)\n"
                                      "ReLU()\n"
                                      "Flatten()\n"
                                      "LayerNorm(32)\n"
                                      "Linear(32, 3)\n"
                                      "loss CrossEntropyLoss\n";
#define FUZZ_CKPT_BATCH 4
#define FUZZ_CKPT_PIXELS 16
#define FUZZ_CKPT_CLASSES 3

/* Adam (exp_avg, exp_avg_sq), SGD with momentum (momentum_buffer), inference (none). */
enum { FUZZ_CKPT_ADAM, FUZZ_CKPT_SGD, FUZZ_CKPT_INFER, FUZZ_CKPT_SESSIONS };
static const char *const FUZZ_CKPT_NAMES[FUZZ_CKPT_SESSIONS] = {"adam", "sgd", "infer"};

/* A CPU session of kind k, allocated; NULL with hr_last_error() set. */
static hr_session_t *fuzz_ckpt_session(const hr_model_t *m, int k) {
    hr_config_t cfg = hr_config_default();
    cfg.batch = FUZZ_CKPT_BATCH;
    cfg.device = HR_DEVICE_CPU;
    cfg.seed = 1;
    if (k == FUZZ_CKPT_SGD) {
        cfg.optim.kind = HR_OPTIM_SGD;
        cfg.optim.momentum = 0.9f;
    }
    if (k == FUZZ_CKPT_INFER) cfg.mode = HR_MODE_INFER;
    hr_session_t *s = hr_compile(m, &cfg);
    if (s && hr_session_alloc(s) != HR_OK) {
        hr_session_free(s);
        s = NULL;
    }
    return s;
}

#endif
