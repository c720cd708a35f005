/* test_cuda_fuse_bias.c — tests/test_fuse_bias.c on the GPU: a Linear's bias
 * gradient added by the LayerNorm backward's kernel that writes its dy (its
 * one-pass partials at 128 wide, the column-sum kernel after the row kernels
 * at 40), held to the unfused program's within float rounding. */
#define FB_DEVICE HR_DEVICE_CUDA
#include "test_fuse_bias.c"
