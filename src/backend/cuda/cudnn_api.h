/* cudnn_api.h — the few cuDNN 9 declarations the backend uses (the legacy
 * convolution API), so the build needs no cuDNN headers: the library is
 * loaded at run time with dlopen. Values and layouts are cudnn_*_v9.h's;
 * tests/gpu/check_cudnn_api.c compares them with the real header. */
#ifndef HR_CUDNN_API_H
#define HR_CUDNN_API_H

#include <stddef.h>
#include <cuda_runtime_api.h>

typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;

typedef int hr_cudnn_status; /* cudnnStatus_t: CUDNN_STATUS_SUCCESS = 0 */

enum { HR_CUDNN_DATA_FLOAT = 0 };
enum { HR_CUDNN_TENSOR_NCHW = 0 };
enum { HR_CUDNN_CROSS_CORRELATION = 1 };
enum { HR_CUDNN_DEFAULT_MATH = 0, HR_CUDNN_TENSOR_OP_MATH = 1, HR_CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
       HR_CUDNN_FMA_MATH = 3 };
enum { HR_CUDNN_NON_DETERMINISTIC = 0, HR_CUDNN_DETERMINISTIC = 1 };
enum { HR_CUDNN_FWD_ALGO_COUNT = 8, HR_CUDNN_BWD_DATA_ALGO_COUNT = 6, HR_CUDNN_BWD_FILTER_ALGO_COUNT = 7 };

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout. */
typedef struct {
    int algo;
    hr_cudnn_status status;
    float time;
    size_t memory;
    int determinism;
    int mathType;
    int reserved[3];
} hr_cudnn_perf;

#endif
