/* test_cuda_hold_copies.c — tests/test_hold_copies.c on the GPU: the
 * multi-tensor updates write the weights' half copies, bit for bit the
 * Casts' copies in every forward. */
#define HC_DEVICE HR_DEVICE_CUDA
#include "test_hold_copies.c"
