/* test_cuda_fold.c — tests/test_fold.c on the GPU: the LayerNorm kernels
 * writing half y and reading half dy (both row forms, 128 and 96 wide) give
 * the unfolded program's bits, and the residual Add's mixed kernel the fp32
 * model's values, rounded. */
#define FOLD_DEVICE HR_DEVICE_CUDA
#include "test_fold.c"
