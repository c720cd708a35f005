/* context.c — the CUDA backend's context: the device, its streams and events,
 * the cuBLAS and cuDNN handles, and what they cost in device memory (NVML). */
#include "backend/cuda/hr_cuda.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

hr_status hr_cuda_fail(const char *file, int line, const char *call, const char *why) {
    const char *base = strrchr(file, '/');
    return hr_error_set(HR_ERR_DEVICE, "%s:%d: %s failed: %s", base ? base + 1 : file, line, call, why);
}

const char *hr_cublas_status_str(int st) { return cublasGetStatusString((cublasStatus_t)st); }

/* ---- device memory, as NVML sees it (no context needed) -------------------- */
typedef struct nvmlDevice_st *nvml_device;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;

/* Bytes in use on the device, or false when NVML is missing. */
static bool nvml_used(int dev, size_t *used) {
    char bus[64];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    int (*init)(void), (*shutdown)(void), (*by_bus)(const char *, nvml_device *), (*mem)(nvml_device, nvml_memory *);
    *(void **)&init = dlsym(lib, "nvmlInit_v2");
    *(void **)&shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&by_bus = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&mem = dlsym(lib, "nvmlDeviceGetMemoryInfo");
    bool ok = false;
    if (init && shutdown && by_bus && mem && init() == 0) {
        nvml_device d;
        nvml_memory m;
        if (by_bus(bus, &d) == 0 && mem(d, &m) == 0) {
            *used = (size_t)m.used;
            ok = true;
        }
        shutdown();
    }
    dlclose(lib);
    return ok;
}

/* The primary context is made once a process; its cost is measured then. */
static size_t g_ctx_bytes;
static bool g_ctx_measured;

/* ---- availability ------------------------------------------------------------ */
static cudaError_t g_count_err = cudaSuccess;

bool hr_backend_cuda_available(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        g_count_err = cudaGetDeviceCount(&n);
        if (g_count_err != cudaSuccess) cudaGetLastError();
        cached = g_count_err == cudaSuccess && n > 0;
    }
    return cached == 1;
}

const char *hr_cuda_unavailable_why(void) {
    return g_count_err != cudaSuccess ? cudaGetErrorString(g_count_err) : "no device found";
}

cudaStream_t hr_cuda_stream(void *ctx) { return ((hr_cuda *)ctx)->stream; }

/* ---- creation and release ------------------------------------------------------ */
hr_status hr_cuda_init(hr_cuda *c, const hr_config_t *cfg) {
    c->opt = hr_options_read();
    c->allow_tf32 = cfg && cfg->allow_tf32;
    /* Tensors of 2^31 elements and more go to the libraries in chunks of the
     * batch; HR_CUDA_MAX_CALL_ELEMS lowers the limit so tests reach that path. */
    c->max_elems = c->opt.max_call_elems > 0 && c->opt.max_call_elems < INT_MAX ? c->opt.max_call_elems : INT_MAX;
    HR_CU(cudaGetDevice(&c->device));
    struct cudaDeviceProp prop;
    HR_CU(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->sms = prop.multiProcessorCount;
    size_t before = 0, after = 0, f0, t0, f1, t1;
    bool nv = !g_ctx_measured && nvml_used(c->device, &before);
    HR_CU(cudaSetDevice(c->device));
    HR_CU(cudaFree(NULL)); /* makes the context now, not at the first kernel */
    HR_CU(cudaMemGetInfo(&f0, &t0));
    if (!g_ctx_measured) {
        /* without NVML: everything in use on the device (a device of our own) */
        g_ctx_bytes = nv && nvml_used(c->device, &after) && after > before ? after - before : t0 - f0;
        g_ctx_measured = true;
    }
    HR_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    HR_CU(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    HR_CU(cudaEventCreateWithFlags(&c->compute_ev, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) HR_CU(cudaEventCreateWithFlags(&c->slot_ev[i], cudaEventDisableTiming));
    for (int i = 0; i < HR_PIECES; i++) HR_CU(cudaEventCreateWithFlags(&c->piece_ev[i], cudaEventDisableTiming));
    cublasHandle_t h;
    HR_CUBLAS(cublasCreate(&h));
    c->blas = h;
    HR_CUBLAS(cublasSetStream(h, c->stream));
    HR_CUBLAS(cublasSetMathMode(h, c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (hr_cuda_dnn_open(c) != HR_OK && !c->dnn_why[0]) return HR_ERR_OOM;
    HR_CU(cudaMemGetInfo(&f1, &t1));
    c->overhead = g_ctx_bytes + (f0 > f1 ? f0 - f1 : 0);
    c->used_at_start = t1 - f1;
    return HR_OK;
}

void hr_cuda_fini(hr_cuda *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    hr_cuda_conv_plans_free(c); /* their descriptors need the library: before it closes */
    hr_cuda_dnn_close(c);
    if (c->blas) cublasDestroy(c->blas);
    c->blas = NULL;
    for (int i = 0; i < 2; i++)
        if (c->slot_ev[i]) cudaEventDestroy(c->slot_ev[i]);
    for (int i = 0; i < HR_PIECES; i++)
        if (c->piece_ev[i]) cudaEventDestroy(c->piece_ev[i]);
    if (c->compute_ev) cudaEventDestroy(c->compute_ev);
    hr_cuda_marks_free(c);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
}
