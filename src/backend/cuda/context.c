/* context.c — the CUDA backend's context: the device, its streams and events,
 * the cuBLAS and cuDNN handles, and what they cost in device memory (NVML). */
#include "backend/cuda/conv.h"
#include "backend/cuda/hr_cuda.h"
#include "backend/nvml.h"

#include <cublas_v2.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

hr_status hr_cuda_fail(const char *file, int line, const char *call, const char *why) {
    const char *base = strrchr(file, '/');
    return hr_error_set(HR_ERR_DEVICE, "%s:%d: %s failed: %s", base ? base + 1 : file, line, call, why);
}

const char *hr_cublas_status_str(int st) { return cublasGetStatusString((cublasStatus_t)st); }

/* ---- device memory, as NVML sees it (no context needed) -------------------- */
/* Bytes in use on the device (every process's), or false when NVML is missing. */
static bool nvml_used(hr_nvml *nv, const char *bus, size_t *used) {
    uint64_t u;
    int i = nv ? hr_nvml_find_bus(nv, bus) : -1;
    if (i < 0 || hr_nvml_memory(nv, i, NULL, &u, NULL) != HR_OK) return false;
    *used = (size_t)u;
    return true;
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
    c->smem_optin = prop.sharedMemPerBlockOptin;
    size_t before = 0, after = 0, f0, t0, f1, t1;
    char bus[64] = "";
    hr_nvml *nvml = NULL;
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, c->device) == cudaSuccess)
        snprintf(c->bus_id, sizeof c->bus_id, "%s", bus);
    else
        bus[0] = 0;
    cudaGetLastError();
    if (!g_ctx_measured && bus[0]) nvml = hr_nvml_open(NULL, 0);
    bool nv = nvml_used(nvml, bus, &before);
    /* (no early return while NVML is open) */
    const char *call = "cudaSetDevice(c->device)";
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) call = "cudaFree(NULL)", e = cudaFree(NULL); /* makes the context now, not at the first kernel */
    if (e == cudaSuccess) call = "cudaMemGetInfo(&f0, &t0)", e = cudaMemGetInfo(&f0, &t0);
    if (e == cudaSuccess && !g_ctx_measured) {
        /* without NVML: everything in use on the device (a device of our own) */
        g_ctx_bytes = nv && nvml_used(nvml, bus, &after) && after > before ? after - before : t0 - f0;
        g_ctx_measured = true;
    }
    hr_nvml_close(nvml);
    if (e != cudaSuccess) return hr_cuda_fail(__FILE__, __LINE__, call, cudaGetErrorString(e));
    HR_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    HR_CU(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    HR_CU(cudaEventCreateWithFlags(&c->compute_ev, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) HR_CU(cudaEventCreateWithFlags(&c->slot_ev[i], cudaEventDisableTiming));
    for (int i = 0; i < HR_PIECES; i++) HR_CU(cudaEventCreateWithFlags(&c->piece_ev[i], cudaEventDisableTiming));
    for (int i = 0; i < HR_STEP_QUEUE; i++) HR_CU(cudaEventCreateWithFlags(&c->loss_ev[i], cudaEventDisableTiming));
    HR_CU(cudaEventCreateWithFlags(&c->staged_ev, cudaEventDisableTiming));
    cublasHandle_t h;
    HR_CUBLAS(cublasCreate(&h));
    c->blas = h;
    HR_CUBLAS(cublasSetStream(h, c->stream));
    HR_CUBLAS(cublasSetMathMode(h, c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    hr_status st = hr_cuda_gemm_init(c);
    if (st) return st;
    if (hr_cuda_dnn_open(c) != HR_OK && !c->dnn_why[0]) return HR_ERR_OOM;
    HR_CU(cudaMemGetInfo(&f1, &t1));
    c->overhead = g_ctx_bytes + (f0 > f1 ? f0 - f1 : 0);
    c->used_at_start = t1 - f1;
    c->total_mem = t1;
    return HR_OK;
}

void hr_cuda_fini(hr_cuda *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    hr_cuda_graph_free(c);
    hr_choice_cache_close(c);
    hr_cuda_conv_plans_free(c); /* their descriptors need the library: before it closes */
    hr_cuda_sdpa_free(c);
    hr_cuda_dnn_close(c);
    hr_cuda_gemm_free(c);
    if (c->blas) cublasDestroy(c->blas);
    c->blas = NULL;
    for (int i = 0; i < 2; i++)
        if (c->slot_ev[i]) cudaEventDestroy(c->slot_ev[i]);
    for (int i = 0; i < HR_PIECES; i++)
        if (c->piece_ev[i]) cudaEventDestroy(c->piece_ev[i]);
    for (int i = 0; i < HR_STEP_QUEUE; i++)
        if (c->loss_ev[i]) cudaEventDestroy(c->loss_ev[i]);
    if (c->staged_ev) cudaEventDestroy(c->staged_ev);
    if (c->compute_ev) cudaEventDestroy(c->compute_ev);
    hr_cuda_marks_free(c);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
}
