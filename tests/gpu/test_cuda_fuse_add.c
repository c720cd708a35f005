/* test_cuda_fuse_add.c — tests/test_fuse_add.c on the GPU: the residual Add
 * taken into the norm's kernel that reads its sum, bit for bit against the
 * Add kernel and the norm apart. */
#define FA_DEVICE HR_DEVICE_CUDA
#include "test_fuse_add.c"
