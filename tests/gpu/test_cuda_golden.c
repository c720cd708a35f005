/* test_cuda_golden.c — tests/test_golden.c (the three seed models against
 * PyTorch's vectors: first logits, loss, every gradient, 5 steps of Adam, and
 * SGD/AdamW/clipping on SimpleCNN) run on the CUDA backend, with the same
 * tolerances as on the CPU except the 5-step Adam trajectories of the MLP and
 * DeepCNN: there a weight whose gradient is rounding noise takes a step of
 * +-lr whose sign the summation order decides, and cuDNN's engines sum in
 * other orders than the CPU (measured on an H200 with the graph API's
 * engines: update L2 1.2e-2, sampled parameters 1.0e-2, from the one or two
 * weights that flip, while the first gradients agree with the CPU's to 7e-8).
 * The bounds allow a few such weights. Run from the repository root. */
#include "headroom.h"

#define GOLDEN_TRAJ_L2 3e-2
#define GOLDEN_TRAJ_NMAX 2e-2

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
