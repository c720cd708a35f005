/* cudnn_load.c — finds cuDNN 9 at run time (dlopen), so that the build needs
 * no cuDNN and a machine without it still runs everything but Conv2d. */
#include "backend/cuda/cudnn_load.h"

#include <dlfcn.h>

static void *sym(hr_cuda_dnn *d, const char *name, bool *ok) {
    void *p = dlsym(d->lib, name);
    if (!p) *ok = false;
    return p;
}

hr_status hr_cuda_dnn_open(hr_cuda *c) {
    const char *names[] = {"libcudnn.so.9", "libcudnn.so"};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(c->dnn_why, sizeof c->dnn_why, "cuDNN 9 (libcudnn.so.9) could not be loaded: %s", e ? e : "not found");
        return HR_ERR_UNSUPPORTED;
    }
    hr_cuda_dnn *d = hr_calloc(1, sizeof *d);
    if (!d) {
        dlclose(lib);
        return hr_error_prefix("loading cuDNN");
    }
    d->lib = lib;
    bool ok = true;
#define LOAD(field, name) *(void **)(&d->field) = sym(d, name, &ok)
    LOAD(Create, "cudnnCreate");
    LOAD(Destroy, "cudnnDestroy");
    LOAD(SetStream, "cudnnSetStream");
    LOAD(GetErrorString, "cudnnGetErrorString");
    LOAD(GetVersion, "cudnnGetVersion");
    LOAD(CreateTensorDescriptor, "cudnnCreateTensorDescriptor");
    LOAD(SetTensor4dDescriptor, "cudnnSetTensor4dDescriptor");
    LOAD(DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
    LOAD(CreateFilterDescriptor, "cudnnCreateFilterDescriptor");
    LOAD(SetFilter4dDescriptor, "cudnnSetFilter4dDescriptor");
    LOAD(DestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
    LOAD(CreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
    LOAD(SetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor");
    LOAD(SetConvolutionMathType, "cudnnSetConvolutionMathType");
    LOAD(SetConvolutionGroupCount, "cudnnSetConvolutionGroupCount");
    LOAD(DestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
    LOAD(GetFwdAlgo, "cudnnGetConvolutionForwardAlgorithm_v7");
    LOAD(GetBwdDataAlgo, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    LOAD(GetBwdFilterAlgo, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    LOAD(GetFwdWs, "cudnnGetConvolutionForwardWorkspaceSize");
    LOAD(GetBwdDataWs, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    LOAD(GetBwdFilterWs, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    LOAD(Forward, "cudnnConvolutionForward");
    LOAD(BackwardData, "cudnnConvolutionBackwardData");
    LOAD(BackwardFilter, "cudnnConvolutionBackwardFilter");
#undef LOAD
    hr_cudnn_status st = 0;
    if (!ok) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "the loaded cuDNN lacks the convolution API (not cuDNN 9?)");
    } else if ((d->version = d->GetVersion()) < 90000) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "cuDNN %zu is too old; headroom needs cuDNN 9", d->version);
        ok = false;
    } else if ((st = d->Create(&d->h)) != 0 || (st = d->SetStream(d->h, c->stream)) != 0) {
        snprintf(c->dnn_why, sizeof c->dnn_why, "cudnnCreate failed: %s", d->GetErrorString(st));
        if (d->h) d->Destroy(d->h);
        ok = false;
    }
    if (!ok) {
        dlclose(lib);
        hr_free(d);
        return HR_ERR_UNSUPPORTED;
    }
    if (!c->opt.cudnn_legacy) d->G = hr_cudnn_graph_open(lib, d->h); /* HR_CUDNN_API=legacy: the legacy API only */
    c->dnn = d;
    return HR_OK;
}

/* The convolution plans go first (hr_cuda_conv_plans_free): their
 * descriptors are the library's. */
void hr_cuda_dnn_close(hr_cuda *c) {
    if (!c->dnn) return;
    for (int i = 0; i < 2; i++)
        if (c->dnn->ev[i]) cudaEventDestroy(c->dnn->ev[i]);
    hr_cudnn_graph_close(c->dnn->G);
    c->dnn->Destroy(c->dnn->h);
    dlclose(c->dnn->lib);
    hr_free(c->dnn);
    c->dnn = NULL;
}
