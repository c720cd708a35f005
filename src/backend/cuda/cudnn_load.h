/* cudnn_load.h — cuDNN as the backend loads it at run time (dlopen): the
 * handle and the legacy convolution API's functions, found by name. */
#ifndef HR_CUDNN_LOAD_H
#define HR_CUDNN_LOAD_H

#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/hr_cuda.h"

struct hr_cuda_dnn {
    void *lib;
    cudnnHandle_t h;
    size_t version;
    hr_cudnn_status (*Create)(cudnnHandle_t *);
    hr_cudnn_status (*Destroy)(cudnnHandle_t);
    hr_cudnn_status (*SetStream)(cudnnHandle_t, cudaStream_t);
    const char *(*GetErrorString)(hr_cudnn_status);
    size_t (*GetVersion)(void);
    hr_cudnn_status (*CreateTensorDescriptor)(cudnnTensorDescriptor_t *);
    hr_cudnn_status (*SetTensor4dDescriptor)(cudnnTensorDescriptor_t, int, int, int, int, int, int);
    hr_cudnn_status (*DestroyTensorDescriptor)(cudnnTensorDescriptor_t);
    hr_cudnn_status (*CreateFilterDescriptor)(cudnnFilterDescriptor_t *);
    hr_cudnn_status (*SetFilter4dDescriptor)(cudnnFilterDescriptor_t, int, int, int, int, int, int);
    hr_cudnn_status (*DestroyFilterDescriptor)(cudnnFilterDescriptor_t);
    hr_cudnn_status (*CreateConvolutionDescriptor)(cudnnConvolutionDescriptor_t *);
    hr_cudnn_status (*SetConvolution2dDescriptor)(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, int, int);
    hr_cudnn_status (*SetConvolutionMathType)(cudnnConvolutionDescriptor_t, int);
    hr_cudnn_status (*SetConvolutionGroupCount)(cudnnConvolutionDescriptor_t, int);
    hr_cudnn_status (*DestroyConvolutionDescriptor)(cudnnConvolutionDescriptor_t);
    hr_cudnn_status (*GetFwdAlgo)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                                cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetBwdDataAlgo)(cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
                                    cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetBwdFilterAlgo)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
                                      cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, int, int *, hr_cudnn_perf *);
    hr_cudnn_status (*GetFwdWs)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                              cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, size_t *);
    hr_cudnn_status (*GetBwdDataWs)(cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
                                  cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, size_t *);
    hr_cudnn_status (*GetBwdFilterWs)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
                                    cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, int, size_t *);
    hr_cudnn_status (*Forward)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, cudnnFilterDescriptor_t,
                             const void *, cudnnConvolutionDescriptor_t, int, void *, size_t, const void *,
                             cudnnTensorDescriptor_t, void *);
    hr_cudnn_status (*BackwardData)(cudnnHandle_t, const void *, cudnnFilterDescriptor_t, const void *,
                                  cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t, int, void *,
                                  size_t, const void *, cudnnTensorDescriptor_t, void *);
    hr_cudnn_status (*BackwardFilter)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *,
                                    cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t, int, void *,
                                    size_t, const void *, cudnnFilterDescriptor_t, void *);
    cudaEvent_t ev[2]; /* timing the candidates (autotune); made at the first use */
    hr_cudnn_graph *G; /* the graph API; NULL: legacy only */
};

/* Returns HR_ERR_DEVICE "file:line: call failed: cuDNN's reason" from the
 * calling function when a cuDNN call fails. */
#define DNN(d, call)                                                                                  \
    do {                                                                                              \
        hr_cudnn_status s_ = (call);                                                                    \
        if (s_ != 0) return hr_cuda_fail(__FILE__, __LINE__, #call, (d)->GetErrorString(s_));        \
    } while (0)

#endif
