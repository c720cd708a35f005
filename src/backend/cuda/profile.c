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

/* ---- timing a candidate (a convolution's engines, both cuDNN APIs; a product's algorithms) --
 * One run to warm up and one to size the batches: a short candidate (tens of
 * microseconds) runs back to back in batches of about HR_TIME_BATCH_MS, as it
 * will inside a step, rather than by one launch with its jitter; then the
 * median of three batches, per run. (Session 13 saw deep_cnn's step move
 * 0.89 to 1.04 ms between processes on an H200 with single runs; on an H100
 * both ways gave 0.98 to 1.00 ms in five processes each.) */
#define HR_TIME_BATCH_MS 0.25f
#define HR_TIME_MAX_REPS 32

static bool timed(cudaStream_t s, cudaEvent_t ev[2], hr_launch_fn run, void *arg, int reps, float *ms, bool *ran) {
    *ran = true;
    if (cudaEventRecord(ev[0], s) != cudaSuccess) return false;
    for (int i = 0; i < reps && *ran; i++) *ran = run(arg) == 0;
    if (cudaEventRecord(ev[1], s) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess)
        return false;
    *ms /= (float)reps;
    return true;
}

bool hr_cuda_time_runs(cudaStream_t s, cudaEvent_t ev[2], hr_launch_fn run, void *arg, float *ms) {
    *ms = -1;
    if (run(arg) != 0) return true; /* warm-up: the candidate does not run here */
    float one, t[3];
    bool ran;
    if (!timed(s, ev, run, arg, 1, &one, &ran)) goto failed;
    if (!ran) return true;
    int reps = 1;
    while (reps < HR_TIME_MAX_REPS && one * (float)reps < HR_TIME_BATCH_MS) reps++;
    for (int r = 0; r < 3; r++) {
        if (!timed(s, ev, run, arg, reps, &t[r], &ran)) goto failed;
        if (!ran) return true;
    }
    float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    *ms = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
    return true;
failed:
    hr_error_set(HR_ERR_DEVICE, "timing a candidate (a convolution's or a product's): %s", cudaGetErrorString(cudaGetLastError()));
    return false;
}
