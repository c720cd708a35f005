/* test_cuda_linear_gelu.c — tests/test_linear_gelu.c on the GPU: the Linear
 * with its tanh GELU in cuBLASLt's epilogues (GELU_AUX_BIAS forward, DGELU
 * backward), or the product and the activation kernel where cuBLASLt has
 * none (gpu_test.sh also runs it with HR_CUDA_LT=0), against the two nodes
 * unfused, within the bounds that test names. */
#define LG_DEVICE HR_DEVICE_CUDA
#include "test_linear_gelu.c"
