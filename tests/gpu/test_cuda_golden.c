/* test_cuda_golden.c — tests/test_golden.c (the three seed models against
 * PyTorch's vectors: first logits, loss, every gradient, 5 steps of Adam, and
 * SGD/AdamW/clipping on SimpleCNN) run on the CUDA backend, with the same
 * tolerances as on the CPU. Run from the repository root. */
#include "headroom.h"

static hr_config_t cuda_config_default(void) {
    hr_config_t c = hr_config_default();
    c.device = HR_DEVICE_CUDA;
    return c;
}

#define hr_config_default cuda_config_default
#define main golden_main
#include "../test_golden.c"
#undef main
#undef hr_config_default

bool hr_backend_cuda_available(void);

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        TEST_END();
    }
    return golden_main();
}
