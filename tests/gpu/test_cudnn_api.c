/* test_cudnn_api.c — checks src/backend/cuda/cudnn_api.h (the backend's own
 * cuDNN declarations, used with dlopen) against the real cuDNN header, where
 * the build machine has one: enum values and the perf struct's layout. */
#include "check.h"

#include <stddef.h>

#if defined(__has_include)
#if __has_include(<cudnn.h>)
#define HAVE_CUDNN_H 1
#endif
#endif

#ifdef HAVE_CUDNN_H
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include "backend/cuda/cudnn_api.h"

#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " != " #b)
SAME(HR_CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
SAME(HR_CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW);
SAME(HR_CUDNN_CROSS_CORRELATION, CUDNN_CROSS_CORRELATION);
SAME(HR_CUDNN_DEFAULT_MATH, CUDNN_DEFAULT_MATH);
SAME(HR_CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH);
SAME(HR_CUDNN_FMA_MATH, CUDNN_FMA_MATH);
SAME(HR_CUDNN_DETERMINISTIC, CUDNN_DETERMINISTIC);
SAME(HR_CUDNN_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
SAME(HR_CUDNN_BWD_DATA_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
SAME(HR_CUDNN_BWD_FILTER_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
SAME(sizeof(hr_cudnn_perf), sizeof(cudnnConvolutionFwdAlgoPerf_t));
SAME(sizeof(hr_cudnn_perf), sizeof(cudnnConvolutionBwdDataAlgoPerf_t));
SAME(sizeof(hr_cudnn_perf), sizeof(cudnnConvolutionBwdFilterAlgoPerf_t));
SAME(offsetof(hr_cudnn_perf, memory), offsetof(cudnnConvolutionFwdAlgoPerf_t, memory));
SAME(offsetof(hr_cudnn_perf, determinism), offsetof(cudnnConvolutionBwdDataAlgoPerf_t, determinism));
SAME(offsetof(hr_cudnn_perf, mathType), offsetof(cudnnConvolutionBwdFilterAlgoPerf_t, mathType));
SAME(sizeof(hr_cudnn_status), sizeof(cudnnStatus_t));
#endif

int main(void) {
#ifdef HAVE_CUDNN_H
    CHECK(1, "cudnn_api.h matches cudnn.h (checked at compile time)");
#else
    printf("SKIP: no cudnn.h on the build machine; nothing to compare\n");
#endif
    TEST_END();
}
