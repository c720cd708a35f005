/* bench_step.c — median training-step time of a model file on random data:
 * `bench_step MODEL BATCH [steps] [warmup] [cpu|cuda]`, one JSON line out.
 * On CUDA the step is timed with the host clock after a synchronising loss
 * read, which is what a training loop sees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "headroom.h"
#include "io/io.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_step MODEL BATCH [steps=20] [warmup=3] [cpu|cuda]\n");
        return 2;
    }
    int64_t batch = atoll(argv[2]);
    int steps = argc > 3 ? atoi(argv[3]) : 20, warm = argc > 4 ? atoi(argv[4]) : 3;
    hr_model_t *m = hr_modelfile_load(argv[1]);
    if (!m) return fprintf(stderr, "%s\n", hr_last_error()), 1;
    hr_config_t c = hr_config_default();
    c.batch = batch;
    c.device = argc > 5 && !strcmp(argv[5], "cuda") ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    hr_session_t *s = hr_compile(m, &c);
    if (!s || hr_session_alloc(s) != HR_OK) return fprintf(stderr, "%s\n", hr_last_error()), 3;
    int in = hr_model_input(m), out = hr_model_output(m);
    int64_t per = 1;
    for (int d = 0; d < hr_tensor_ndim(m, in); d++) per *= hr_tensor_dim(m, in, d);
    int64_t classes = hr_tensor_dim(m, out, 0);
    float *x = malloc(sizeof(float) * (size_t)(per * batch));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    srand(1);
    for (int64_t i = 0; i < per * batch; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int64_t i = 0; i < batch; i++) y[i] = rand() % (int)classes;
    double *t = malloc(sizeof(double) * (size_t)steps);
    float loss = 0;
    for (int i = 0; i < warm + steps; i++) {
        double t0 = now();
        if (hr_train_step(s, x, y, &loss) != HR_OK) return fprintf(stderr, "%s\n", hr_last_error()), 1;
        if (i >= warm) t[i - warm] = now() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp);
    double mean = 0;
    for (int i = 0; i < steps; i++) mean += t[i] / steps;
    const hr_report_t *r = hr_session_report(s);
    hr_mem_stats_t ms;
    hr_mem_stats(s, &ms);
    printf("{\"impl\": \"headroom\", \"model\": \"%s\", \"batch\": %lld, \"device\": \"%s\", \"median_ms\": %.3f, "
           "\"mean_ms\": %.3f, \"samples_per_s\": %.1f, \"arena_bytes\": %zu, \"lower_bound\": %zu, \"loss\": %.5f}\n",
           argv[1], (long long)batch, c.device == HR_DEVICE_CUDA ? "cuda" : "cpu", 1e3 * t[steps / 2], 1e3 * mean,
           (double)batch / t[steps / 2], r->arena_bytes, r->lower_bound, loss);
    free(t);
    free(x);
    free(y);
    hr_session_free(s);
    hr_model_free(m);
    return 0;
}
