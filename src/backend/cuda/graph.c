/* graph.c — a training step as one CUDA graph: captured once from the
 * node-by-node launches (kernels, cuBLAS, cuDNN), replayed each step with
 * one launch. The step's scalars live in the arena (hr_step_vars), so the
 * same graph serves every step; the batch's upload stays outside it, on the
 * copy stream, and the launch waits for it. */
#include "backend/cuda/hr_cuda.h"

void hr_cuda_graph_free(hr_cuda *c) {
    if (c->graph) cudaGraphExecDestroy((cudaGraphExec_t)c->graph);
    c->graph = NULL;
}

/* The uploads queued so far are waited for before the capture starts (an
 * event of the copy stream, outside the capture, cannot be waited for in
 * it); the capture is this thread's, so another thread's CUDA calls (a
 * checkpoint's writer) neither join nor break it.
 * From HR_STAGED_INPUT_MAX (core.h) the input's pieces beat one graph: the
 * first node starts on each piece as it lands, hiding most of the transfer,
 * where one graph waits for all of it. H200, steps queued two at a time: mlp
 * at batch 32768 (125 MiB in) 17.2 ms a step as a graph, 15.4 in pieces;
 * below a few MiB the graph wins (deep_cnn at 64 in bf16, 3 MiB: 0.58 ms
 * against 1.12). Smaller inputs are staged whole while the step before runs. */
hr_status hr_cuda_graph_begin(hr_cuda *c) {
    if (c->piece_dst && c->defer_n >= HR_STAGED_INPUT_MAX)
        return hr_error_set(HR_ERR_UNSUPPORTED, "the batch's input (%zu MiB) goes up in pieces that its first node "
                            "takes as they land, which hides more than one graph saves from %zu MiB on",
                            c->defer_n >> 20, HR_STAGED_INPUT_MAX >> 20);
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    hr_cuda_graph_free(c);
    HR_CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    return HR_OK;
}

hr_status hr_cuda_graph_end(hr_cuda *c, bool keep) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = false;
    if (e != cudaSuccess || !keep) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); /* a broken capture leaves its error behind */
        if (!keep) return HR_OK;
        return hr_cuda_fail(__FILE__, __LINE__, "cudaStreamEndCapture", cudaGetErrorString(e));
    }
    size_t f0 = 0, f1 = 0, t;
    if (c->opt.cuda_verbose) cudaMemGetInfo(&f0, &t);
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_cuda_fail(__FILE__, __LINE__, "cudaGraphInstantiate", cudaGetErrorString(e));
    }
    if (c->opt.cuda_verbose && cudaMemGetInfo(&f1, &t) == cudaSuccess)
        fprintf(stderr, "cuda: the step captured as one graph; instantiating it took %zu device bytes\n",
                f0 > f1 ? f0 - f1 : 0);
    c->graph = x;
    return HR_OK;
}

hr_status hr_cuda_graph_launch(hr_cuda *c) {
    if (!c->graph) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: no captured step to launch");
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    HR_CU(cudaGraphLaunch((cudaGraphExec_t)c->graph, c->stream));
    return HR_OK;
}
