/* profile.c — timing events on the compute stream for device profiles: a mark
 * a slot, read back as the milliseconds between two slots once both passed. */
#include "backend/cuda/hr_cuda.h"

#include <stdlib.h>

/* Diagnostics only: the event array comes from plain realloc, outside the
 * fault-injection counter, and grows as slots appear (one a node, plus one). */
hr_status hr_cuda_mark(hr_cuda *c, int slot) {
    if (slot < 0) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: profiling mark %d", slot);
    if (slot >= c->nmarks) {
        int want = slot + 1 > 2 * c->nmarks ? slot + 1 : 2 * c->nmarks;
        cudaEvent_t *ev = realloc(c->marks, sizeof *ev * (size_t)want);
        if (!ev) return hr_error_set(HR_ERR_OOM, "profiling: no room for %d timing events", want);
        c->marks = ev;
        for (; c->nmarks < want; c->nmarks++) HR_CU(cudaEventCreate(&c->marks[c->nmarks]));
    }
    HR_CU(cudaEventRecord(c->marks[slot], c->stream));
    return HR_OK;
}

double hr_cuda_mark_ms(hr_cuda *c, int a, int b) {
    float ms = 0;
    if (a < 0 || b < 0 || a >= c->nmarks || b >= c->nmarks) return -1;
    if (cudaEventElapsedTime(&ms, c->marks[a], c->marks[b]) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return ms;
}

void hr_cuda_marks_free(hr_cuda *c) {
    for (int i = 0; i < c->nmarks; i++) cudaEventDestroy(c->marks[i]);
    free(c->marks);
    c->marks = NULL;
    c->nmarks = 0;
}
