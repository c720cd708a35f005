/* test_cost.c — the cost model: work counts of Linear and Conv2d against
 * FLOPs worked out by hand; estimates positive and growing with the batch;
 * the cache written, reloaded, corrupt (ignored with one warning) and
 * unwritable (a warning); and on the CPU, each example model's step time
 * predicted from its measured nodes against a fresh timed run. */
#include "check.h"
#include "exec/internal.h"
#include "io/io.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static char tmpdir[256];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static hr_config_t cfg_batch(int64_t batch) {
    hr_config_t c = hr_config_default();
    c.batch = batch;
    return c;
}

/* The first node of op in p's step, -1 if none. */
static int node_of(const hr_program *p, hr_op op, int from) {
    for (int k = from; k < p->n_step; k++)
        if (p->g.n[k].op == op) return k;
    return -1;
}

/* ---- work counts ---------------------------------------------------------------- */
/* Linear(5, 3) -> Linear(3, 2) at batch 4: forward 2*N*in*out + N*out (bias);
 * the first layer's backward has no dx (its input is the batch). */
static void test_linear_work(void) {
    hr_model_t *m = hr_model_new("lin");
    int x = hr_input(m, "x", 1, (int64_t[]){5});
    x = hr_linear(m, NULL, x, 5, 3, true);
    x = hr_linear(m, NULL, x, 3, 2, true);
    hr_loss_mse(m, x);
    hr_config_t c = cfg_batch(4);
    hr_program p;
    CHECK(hr_program_build(m, &c, NULL, NULL, &p) == HR_OK, "build: %s", hr_last_error());
    int f0 = node_of(&p, HR_OP_LINEAR, 0), f1 = node_of(&p, HR_OP_LINEAR, f0 + 1);
    int b1 = node_of(&p, HR_OP_LINEAR_BWD, 0), b0 = node_of(&p, HR_OP_LINEAR_BWD, b1 + 1);
    CHECK(f0 >= 0 && f1 >= 0 && b0 >= 0 && b1 >= 0, "the Linear nodes");
    if (f0 < 0 || f1 < 0 || b0 < 0 || b1 < 0) return;
    hr_work w = hr_cost_work(&p.g, &p.g.n[f0]);
    CHECK(w.flops == 2 * 4 * 5 * 3 + 4 * 3, "Linear(5,3) forward: %g flops", w.flops);
    CHECK(w.bytes == 4 * (4 * 5 + 3 * 5 + 3 + 4 * 3), "Linear(5,3) forward: %g bytes (x, W, b, y)", w.bytes);
    CHECK(w.matmul, "a matrix product");
    w = hr_cost_work(&p.g, &p.g.n[f1]);
    CHECK(w.flops == 2 * 4 * 3 * 2 + 4 * 2, "Linear(3,2) forward: %g flops", w.flops);
    w = hr_cost_work(&p.g, &p.g.n[b1]); /* dx, dW, db */
    CHECK(w.flops == 2 * (2 * 4 * 3 * 2) + 4 * 2, "Linear(3,2) backward: %g flops", w.flops);
    w = hr_cost_work(&p.g, &p.g.n[b0]); /* dW, db only */
    CHECK(w.flops == 2 * 4 * 5 * 3 + 4 * 3, "Linear(5,3) backward without dx: %g flops", w.flops);
    hr_program_free(&p);
    hr_model_free(m);
}

/* Conv2d(3, 4, 3, padding 1) on 8x8, then Conv2d(4, 2, 3, stride 2) (8x8 ->
 * 3x3), batch 2: 2 N K OH OW C kh kw a product, N K OH OW for the bias. */
static void test_conv_work(void) {
    hr_model_t *m = hr_model_new("conv");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 8, 8});
    x = hr_conv2d(m, NULL, x, 3, 4, 3, 1, 1, true);
    x = hr_conv2d(m, NULL, x, 4, 2, 3, 2, 0, false);
    x = hr_flatten(m, NULL, x);
    hr_loss_mse(m, x);
    hr_config_t c = cfg_batch(2);
    hr_program p;
    CHECK(hr_program_build(m, &c, NULL, NULL, &p) == HR_OK, "build: %s", hr_last_error());
    int f0 = node_of(&p, HR_OP_CONV2D, 0), f1 = node_of(&p, HR_OP_CONV2D, f0 + 1);
    int b1 = node_of(&p, HR_OP_CONV2D_BWD, 0), b0 = node_of(&p, HR_OP_CONV2D_BWD, b1 + 1);
    CHECK(f0 >= 0 && f1 >= 0 && b0 >= 0 && b1 >= 0, "the Conv2d nodes");
    if (f0 < 0 || f1 < 0 || b0 < 0 || b1 < 0) return;
    double p0 = 2.0 * 2 * 4 * 8 * 8 * 3 * 3 * 3, bias0 = 2.0 * 4 * 8 * 8, p1 = 2.0 * 2 * 2 * 3 * 3 * 4 * 3 * 3;
    hr_work w = hr_cost_work(&p.g, &p.g.n[f0]);
    CHECK(w.flops == p0 + bias0, "Conv2d(3,4,3,p1) forward: %g flops, expected %g", w.flops, p0 + bias0);
    CHECK(w.bytes == 4 * (2 * 3 * 64 + 4 * 3 * 9 + 4 + 2 * 4 * 64), "Conv2d forward: %g bytes", w.bytes);
    w = hr_cost_work(&p.g, &p.g.n[f1]);
    CHECK(w.flops == p1, "Conv2d(4,2,3,s2) forward, no bias: %g flops, expected %g", w.flops, p1);
    w = hr_cost_work(&p.g, &p.g.n[b1]); /* data and weight gradients, no bias */
    CHECK(w.flops == 2 * p1, "Conv2d(4,2,3,s2) backward: %g flops, expected %g", w.flops, 2 * p1);
    w = hr_cost_work(&p.g, &p.g.n[b0]); /* weight gradient and bias only */
    CHECK(w.flops == p0 + bias0, "Conv2d(3,4,3,p1) backward without dx: %g flops, expected %g", w.flops, p0 + bias0);
    /* every op counts its own work (its descriptor's `work`) */
    for (int op = 0; op < HR_OP_COUNT; op++)
        CHECK(hr_op_desc_of((hr_op)op)->work, "%s has no work count", hr_op_name((hr_op)op));
    /* the work of every node of a step is >= 0 */
    for (int k = 0; k < p.n_step; k++) {
        w = hr_cost_work(&p.g, &p.g.n[k]);
        CHECK(w.flops >= 0 && w.bytes >= 0, "node %d (%s): work %g flops %g bytes", k, hr_op_name(p.g.n[k].op), w.flops,
              w.bytes);
    }
    hr_program_free(&p);
    hr_model_free(m);
}

/* ---- estimates ------------------------------------------------------------------- */
static void test_estimate_monotonic(void) {
    hr_model_t *m = hr_modelfile_load("examples/simple_cnn.model");
    CHECK(m != NULL, "load: %s", hr_last_error());
    if (!m) return;
    const hr_device devs[] = {HR_DEVICE_CPU, HR_DEVICE_CUDA};
    const char *names[] = {"test cpu", "NVIDIA H100 80GB HBM3"};
    for (int d = 0; d < 2; d++) {
        hr_cost_model *cm = hr_cost_model_new(devs[d], names[d], "test-driver");
        CHECK(cm != NULL, "model");
        if (!cm) continue;
        double last = 0;
        for (int64_t b = 1; b <= 1024; b *= 2) {
            hr_config_t c = cfg_batch(b);
            hr_program p;
            if (hr_program_build(m, &c, NULL, NULL, &p) != HR_OK) {
                CHECK(0, "build batch %lld: %s", (long long)b, hr_last_error());
                continue;
            }
            double t = hr_cost_step(cm, &p);
            int meas = -1, est = -1;
            hr_cost_count(cm, &p, &meas, &est);
            CHECK(t > 0 && t > last, "%s, batch %lld: %g s after %g s", names[d], (long long)b, t, last);
            CHECK(meas == 0 && est == p.n_step, "%s: %d measured, %d estimated of %d", names[d], meas, est, p.n_step);
            last = t;
            hr_program_free(&p);
        }
        printf("  estimate %-24s simple_cnn batch 1024: %.3f ms a step\n", names[d], 1e3 * last);
        hr_cost_model_free(cm);
    }
    hr_model_free(m);
}

/* ---- the cache --------------------------------------------------------------------- */
/* Runs f with stderr into a file; how many lines of it say "warning". */
static int warnings_of(void (*f)(void *), void *arg) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *in = fopen(path, "r");
    char line[1024];
    int n = 0;
    while (in && fgets(line, sizeof line, in)) {
        fputs(line, stderr);
        n += strstr(line, "warning") != NULL;
    }
    if (in) fclose(in);
    return n;
}

static hr_cost_model *made;  /* by make_model */
static void make_model(void *name) { made = hr_cost_model_new(HR_DEVICE_CPU, name, "d1"); }
static hr_status saved_st;
static void save_model(void *cm) { saved_st = hr_cost_save(cm); }

static void test_cache(void) {
    hr_model_t *m = hr_modelfile_load("examples/mlp.model");
    hr_config_t c = cfg_batch(8);
    hr_program p;
    CHECK(m && hr_program_build(m, &c, NULL, NULL, &p) == HR_OK, "build: %s", hr_last_error());
    if (!m) return;
    hr_cost_model *a = hr_cost_model_new(HR_DEVICE_CPU, "cache test", "d1");
    CHECK(a && strstr(hr_cost_cache_path(a), tmpdir) == hr_cost_cache_path(a), "the cache is in HR_CACHE_DIR: %s",
          a ? hr_cost_cache_path(a) : "");
    for (int k = 0; k < p.n_step; k++) CHECK(hr_cost_record(a, &p.g, &p.g.n[k], 1e-4 * (k + 1) / 3) == HR_OK, "record");
    hr_cost_record(a, &p.g, &p.g.n[0], 2e-4 / 3); /* averaged with the first: (1e-4 + 2e-4) / 6 */
    CHECK(hr_cost_save(a) == HR_OK, "save: %s", hr_last_error());
    hr_cost_model *b = hr_cost_model_new(HR_DEVICE_CPU, "cache test", "d1");
    int meas = 0, est = 0;
    hr_cost_count(b, &p, &meas, &est);
    CHECK(meas == p.n_step && est == 0, "reloaded: %d measured, %d estimated", meas, est);
    CHECK_CLOSE(hr_cost_node(b, &p.g, &p.g.n[0]), 0.5e-4, 0, 1e-8, "node 0, averaged");
    for (int k = 1; k < p.n_step; k++)
        CHECK_CLOSE(hr_cost_node(b, &p.g, &p.g.n[k]), 1e-4 * (k + 1) / 3, 0, 1e-8, "node %d reloaded", k);
    double sum = 0;
    for (int k = 1; k < p.n_bwd_end; k++) sum += 1e-4 * (k + 1) / 3;
    double upd = 0;
    for (int k = p.n_bwd_end; k < p.n_step; k++) upd += 1e-4 * (k + 1) / 3;
    CHECK(hr_cost_step(b, &p) >= 0.5e-4 + sum + upd, "a step is at least its nodes");
    /* another driver is another cache; a measured op corrects the estimates of its kind */
    hr_cost_model *other = hr_cost_model_new(HR_DEVICE_CPU, "cache test", "d2");
    hr_cost_count(other, &p, &meas, &est);
    CHECK(meas == 0, "another driver's cache: %d measured", meas);
    hr_config_t c2 = cfg_batch(16);
    hr_program p2;
    CHECK(hr_program_build(m, &c2, NULL, NULL, &p2) == HR_OK, "build");
    int lin = node_of(&p2, HR_OP_LINEAR, 0);
    CHECK(!hr_cost_node_measured(b, &p2.g, &p2.g.n[lin]), "batch 16 is not measured");
    double est_raw = hr_cost_estimate(b, &p2.g, &p2.g.n[lin]), est_cor = hr_cost_node(b, &p2.g, &p2.g.n[lin]);
    CHECK(est_raw > 0 && est_cor > 0 && est_raw != est_cor, "corrected %g vs raw %g", est_cor, est_raw);
    /* what a measured step took beyond its nodes (a pass's own time: the
     * batch's upload, launch gaps) counts once a pass, K times with
     * accumulation; the step of another shape just before, so that a key
     * left on the stack by it can't stand in for this one's */
    CHECK(hr_cost_record_pass(b, &p, 3e-3) == HR_OK, "record a pass: %s", hr_last_error());
    hr_config_t c3 = cfg_batch(16);
    c3.accumulate = 2; /* micro-batches of 8: p's nodes and pass */
    hr_program p3;
    CHECK(hr_program_build(m, &c3, NULL, NULL, &p3) == HR_OK, "build accumulate 2: %s", hr_last_error());
    hr_cost_step(b, &p2);
    CHECK_CLOSE(hr_cost_step(b, &p), 0.5e-4 + sum + 3e-3 + upd, 0, 1e-9, "a step with its recorded pass");
    hr_cost_step(b, &p2);
    CHECK_CLOSE(hr_cost_step(b, &p3), 2 * (0.5e-4 + sum + 3e-3) + upd, 0, 1e-9, "two micro-batches' passes");
    hr_program_free(&p3);
    hr_program_free(&p2);
    hr_cost_model_free(other);
    hr_cost_model_free(b);

    /* corrupt: ignored with one warning, estimates still work, rewritten on save */
    FILE *f = fopen(hr_cost_cache_path(a), "w");
    fputs("# a comment\nLinear:F32 F32[8,1000] -> F32[8,2000]\t0.001\t1\t1\t0\nthis is not a cache line\n", f);
    fclose(f);
    int w = warnings_of(make_model, "cache test");
    CHECK(made != NULL, "a corrupt cache still gives a model");
    CHECK(w == 1, "one warning for the corrupt cache, got %d", w);
    hr_cost_count(made, &p, &meas, &est);
    CHECK(meas == 0 && hr_cost_step(made, &p) > 0, "nothing read from it (%d measured)", meas);
    hr_cost_record(made, &p.g, &p.g.n[0], 1e-3);
    w = warnings_of(save_model, made);
    CHECK(w == 0 && saved_st == HR_OK, "saving over the corrupt file: %d more warnings, %s", w,
          hr_status_name(saved_st));
    hr_cost_model_free(made);
    made = hr_cost_model_new(HR_DEVICE_CPU, "cache test", "d1");
    hr_cost_count(made, &p, &meas, &est);
    CHECK(meas == 1 && hr_cost_node(made, &p.g, &p.g.n[0]) == 1e-3, "rewritten: %d measured", meas);
    hr_cost_model_free(made);
    /* binary junk and an empty file */
    f = fopen(hr_cost_cache_path(a), "wb");
    fwrite("\0\1\2\3\tx\n", 1, 7, f);
    fclose(f);
    w = warnings_of(make_model, "cache test");
    CHECK(made && w == 1, "binary junk: %d warnings", w);
    hr_cost_model_free(made);
    f = fopen(hr_cost_cache_path(a), "w");
    fclose(f);
    w = warnings_of(make_model, "cache test");
    CHECK(made && w == 0, "an empty cache: %d warnings", w);
    hr_cost_model_free(made);
    hr_cost_model_free(a);

    /* unwritable: the folder lies under a plain file */
    char blocked[300], file[300];
    snprintf(file, sizeof file, "%s/plainfile", tmpdir);
    snprintf(blocked, sizeof blocked, "%s/plainfile/cache", tmpdir);
    f = fopen(file, "w");
    fclose(f);
    setenv("HR_CACHE_DIR", blocked, 1);
    w = warnings_of(make_model, "cache test");
    CHECK(made && w == 0, "a cache folder that can't exist: no warning until saving (%d)", w);
    if (made) hr_cost_record(made, &p.g, &p.g.n[0], 1e-3);
    w = warnings_of(save_model, made);
    CHECK(w == 1 && saved_st == HR_ERR_IO, "unwritable: %d warnings, %s", w, hr_status_name(saved_st));
    CHECK(made && hr_cost_node_measured(made, &p.g, &p.g.n[0]), "the model keeps its times");
    hr_session_t *s = hr_compile(m, &c);
    hr_status st = s ? hr_session_alloc(s) : hr_last_status();
    if (!st && made) st = hr_cost_measure(s, made, 1);
    CHECK(st == HR_OK, "measuring with an unwritable cache: %s", hr_last_error());
    hr_session_free(s);
    hr_cost_model_free(made);
    setenv("HR_CACHE_DIR", tmpdir, 1);
    hr_program_free(&p);
    hr_model_free(m);
}

/* ---- measured against predicted on the CPU ------------------------------------------ */
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A session of m at c, allocated, with a batch to train on; NULL on failure. */
typedef struct {
    hr_session_t *s;
    float *x;
    int32_t *y;
} bench;

static bool bench_make(const hr_model_t *m, const hr_config_t *c, bench *b) {
    memset(b, 0, sizeof *b);
    b->s = hr_compile(m, c);
    if (!b->s || hr_session_alloc(b->s) != HR_OK) return false;
    const hr_program *p = hr_session_program(b->s);
    /* the whole batch: every micro-batch of an accumulating step */
    int64_t nx = hr_shape_numel(&p->g.t[p->input].shape) / hr_micro_batch(c) * c->batch;
    int64_t C = p->g.t[p->output].shape.d[1];
    b->x = malloc(sizeof(float) * (size_t)nx);
    b->y = malloc(sizeof(int32_t) * (size_t)c->batch);
    if (!b->x || !b->y) return false;
    uint64_t r = 88172645463325252ULL;
    for (int64_t i = 0; i < nx; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        b->x[i] = (float)(r >> 40) / 16777216.0f * 2 - 1;
    }
    for (int64_t i = 0; i < c->batch; i++) b->y[i] = (int32_t)(i % C);
    return true;
}

static void bench_free(bench *b) {
    hr_session_free(b->s);
    free(b->x);
    free(b->y);
}

typedef struct {
    const char *file;
    int64_t batch;
    int accumulate;
    hr_precision precision;
    int threads; /* 0: OpenMP's default (this machine's cores) */
} example;

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Paired rounds, so that the two sides of a comparison meet the same load
 * on this shared machine (other builds and tests come and go within
 * seconds): a round measures one step of a throwaway session into a model
 * of its own (a new model's first measurement replaces the cache's), then
 * times one hr_train_step of a fresh session and predicts it. The error:
 * the median of the rounds' errors. */
static void compare(const example *ex, int threads, double *worst) {
    enum { ROUNDS = 15 };
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    hr_model_t *m = hr_modelfile_load(ex->file);
    CHECK(m != NULL, "%s: %s", ex->file, hr_last_error());
    if (!m) return;
    hr_config_t c = cfg_batch(ex->batch);
    c.accumulate = ex->accumulate;
    c.precision = ex->precision;
    bench cal = {0}, run = {0};
    bool ok = bench_make(m, &c, &cal) && bench_make(m, &c, &run);
    double meas[ROUNDS], pred[ROUNDS], err[ROUNDS];
    int nm = -1, ne = -1;
    float loss;
    for (int i = 0; ok && i < 2; i++) ok = hr_train_step(run.s, run.x, run.y, &loss) == HR_OK; /* warm-up */
    /* A busy machine (another process on the two cores) can push a whole
     * set of rounds off; one more set is taken then, and printed as such. */
    double e = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        for (int r = 0; ok && r < ROUNDS; r++) {
            hr_cost_model *cm = hr_cost_model_new(HR_DEVICE_CPU, NULL, NULL);
            ok = cm && hr_cost_measure(cal.s, cm, 1) == HR_OK;
            double t0 = now();
            ok = ok && hr_train_step(run.s, run.x, run.y, &loss) == HR_OK;
            if (ok) {
                meas[r] = now() - t0;
                pred[r] = hr_cost_step(cm, hr_session_program(run.s));
                err[r] = (pred[r] - meas[r]) / meas[r];
                hr_cost_count(cm, hr_session_program(run.s), &nm, &ne);
            }
            hr_cost_model_free(cm);
        }
        if (!ok) break;
        e = median_of(err, ROUNDS);
        if (fabs(e) < 0.15) break;
        if (!attempt) printf("  %s: %+.1f%% off in the first set of rounds; measuring again\n", ex->file, 100 * e);
    }
    CHECK(ok, "%s: %s", ex->file, hr_last_error());
    if (ok) {
        double lo = err[0], hi = err[0];
        for (int r = 1; r < ROUNDS; r++) lo = err[r] < lo ? err[r] : lo, hi = err[r] > hi ? err[r] : hi;
        char what[64];
        int k = snprintf(what, sizeof what, "%lld", (long long)ex->batch);
        if (ex->accumulate > 1) k += snprintf(what + k, sizeof what - (size_t)k, " K=%d", ex->accumulate);
        if (ex->precision) snprintf(what + k, sizeof what - (size_t)k, " %s", hr_precision_name(ex->precision));
        printf("  %-27s %-11s %7d %9.3f ms %9.3f ms %+7.1f%%  [%+.1f%%, %+.1f%%]  %d measured, %d estimated\n",
               ex->file, what, threads, 1e3 * median_of(meas, ROUNDS), 1e3 * median_of(pred, ROUNDS), 100 * e,
               100 * lo, 100 * hi, nm, ne);
        CHECK(ne == 0, "%s: every node of the fresh session is measured (%d estimated)", ex->file, ne);
        CHECK(fabs(e) < 0.15, "%s %s, %d thread(s): predicted %+.1f%% off the measured step (median of %d rounds)",
              ex->file, what, threads, 100 * e, ROUNDS);
        if (fabs(e) > *worst) *worst = fabs(e);
    }
    bench_free(&cal);
    bench_free(&run);
    hr_model_free(m);
}

/* One thread for every example model (and accumulation, bf16); OpenMP's
 * default for MLP and SimpleCNN. With two threads on this machine's two
 * shared cores, any other busy process stalls each parallel region for a
 * scheduler slice (SimpleCNN's 4.4 ms step becomes 56 ms): the paired
 * rounds still hold, but the rest would take minutes. */
/* The convolutions' cuDNN mode changes a GPU's op times: a mode other than
 * the default keeps its own cache file; the CPU's ignores the variable. */
static void test_cache_per_mode(void) {
    char plain[1024], fast[1024], cpu_plain[1024], cpu_fast[1024];
    unsetenv("HR_CUDNN_ALGO");
    hr_cost_model *a = hr_cost_model_new(HR_DEVICE_CUDA, "mode test", "d1");
    hr_cost_model *c = hr_cost_model_new(HR_DEVICE_CPU, "mode test", "d1");
    snprintf(plain, sizeof plain, "%s", hr_cost_cache_path(a));
    snprintf(cpu_plain, sizeof cpu_plain, "%s", hr_cost_cache_path(c));
    hr_cost_model_free(a), hr_cost_model_free(c);
    setenv("HR_CUDNN_ALGO", "fastest", 1);
    a = hr_cost_model_new(HR_DEVICE_CUDA, "mode test", "d1");
    c = hr_cost_model_new(HR_DEVICE_CPU, "mode test", "d1");
    snprintf(fast, sizeof fast, "%s", hr_cost_cache_path(a));
    snprintf(cpu_fast, sizeof cpu_fast, "%s", hr_cost_cache_path(c));
    hr_cost_model_free(a), hr_cost_model_free(c);
    unsetenv("HR_CUDNN_ALGO");
    CHECK(plain[0] && strcmp(plain, fast) != 0 && strstr(fast, "-fastest.tsv") && !strstr(plain, "fastest"),
          "the GPU's cache per cuDNN mode: '%s' and '%s'", plain, fast);
    CHECK(cpu_plain[0] && strcmp(cpu_plain, cpu_fast) == 0, "the CPU's cache ignores HR_CUDNN_ALGO: '%s' and '%s'",
          cpu_plain, cpu_fast);
}

static void test_predicted_vs_measured(void) {
    const example ex[] = {
        {"examples/mlp.model", 32, 1, HR_PREC_FP32, 1},
        {"examples/simple_cnn.model", 32, 1, HR_PREC_FP32, 1},
        {"examples/fashion.model", 8, 1, HR_PREC_FP32, 1},
        {"examples/resnet_tiny.model", 8, 1, HR_PREC_FP32, 1},
        {"examples/deep_cnn.model", 4, 1, HR_PREC_FP32, 1},
        {"examples/mlp.model", 64, 2, HR_PREC_FP32, 1},
        {"examples/simple_cnn.model", 32, 1, HR_PREC_BF16, 1},
        {"examples/mlp.model", 32, 1, HR_PREC_FP32, 0},
        {"examples/simple_cnn.model", 32, 1, HR_PREC_FP32, 0},
    };
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("  %-27s %-11s %7s %12s %12s %8s  %s\n", "model (CPU)", "batch", "threads", "measured", "predicted", "error",
           "[rounds' range]");
    double worst = 0;
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
        compare(&ex[i], ex[i].threads ? ex[i].threads : threads, &worst);
    printf("  worst error: %.1f%%\n", 100 * worst);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
}

/* Every allocation of making, filling, saving and reloading a model fails in
 * turn: NULL or HR_ERR_OOM, never a crash (leaks: under valgrind). */
static void test_faults(void) {
    hr_model_t *m = hr_modelfile_load("examples/mlp.model");
    hr_config_t c = cfg_batch(8);
    hr_program p;
    if (!m || hr_program_build(m, &c, NULL, NULL, &p) != HR_OK) {
        CHECK(0, "build: %s", hr_last_error());
        return;
    }
    int64_t k = 1, allocs = 0;
    int failures = 0, bad = 0;
    for (; k < 10000; k++) {
        hr_fault_fail_at(k);
        hr_cost_model *cm = hr_cost_model_new(HR_DEVICE_CPU, "fault test", "f");
        hr_status st = cm ? HR_OK : hr_last_status();
        for (int i = 0; cm && !st && i < p.n_step; i++) st = hr_cost_record(cm, &p.g, &p.g.n[i], 1e-5 * (i + 1));
        if (cm && !st) st = hr_cost_save(cm);
        hr_cost_model *again = cm && !st ? hr_cost_model_new(HR_DEVICE_CPU, "fault test", "f") : NULL;
        if (cm && !st && !again) st = hr_last_status();
        hr_cost_model_free(again);
        hr_cost_model_free(cm);
        allocs = hr_fault_fail_at(0);
        if (allocs < k) break; /* the whole use ran without reaching the kth allocation */
        failures++;
        bad += st != HR_ERR_OOM;
    }
    printf("  faults: %d runs, each with one allocation failing, of %lld allocations\n", failures, (long long)allocs);
    CHECK(failures > 5 && bad == 0, "%d of %d failed allocations came back as something else than HR_ERR_OOM", bad,
          failures);
    hr_program_free(&p);
    hr_model_free(m);
}

static void remove_tree(const char *dir) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hr_test_cost_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("HR_CACHE_DIR", tmpdir, 1);
    test_linear_work();
    test_conv_work();
    test_estimate_monotonic();
    test_cache();
    test_cache_per_mode();
    test_faults();
    test_predicted_vs_measured();
    remove_tree(tmpdir);
    TEST_END();
}
