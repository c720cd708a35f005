/* test_choice_cache.c — the timed choices kept between runs
 * (backend/cuda/choice_cache.c), in a cache folder of its own.
 *
 * Convolutions: a first run
 * times the candidates and writes its choices when its backend closes; a
 * second run of the same model plans each chosen algorithm's workspace alone
 * (never more than the first plan, which held the largest candidate's) and
 * trains to the same losses; a cache whose choices are no longer candidates,
 * or full of garbage, is ignored (the first plan again); HR_CUDNN_CACHE=0
 * ignores a good one; a folder that cannot be written costs nothing but the
 * cache. In the precise mode (GEMM-like engines, graph API) and the fastest
 * (the graph engines timed against every legacy algorithm: FFT and Winograd
 * want the largest workspaces; which API won is kept too), on deep_cnn and
 * on a depthwise model (grouped and 1x1 convolutions, where the graph
 * engines tend to win).
 *
 * Matrix products (backend/cuda/gemm_lt.c), the seed MLP in FP32 and bf16
 * with every product timed (HR_CUDA_GEMM_TIME=1): the first run writes a
 * choice per product shape; a second trains to the same losses, bit for bit,
 * and leaves the file as it was; choices whose algorithm is not the
 * candidate's any more are timed again (and rewritten); garbage lines are
 * skipped; HR_CUDA_GEMM_TIME=0 times nothing and writes no file. Skips
 * (passing) where no GPU is present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "seed_models.h"

enum { STEPS = 3, BATCH = 256 };

static uint64_t rng_state = 0x5eed;
static float frand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *xs[STEPS];
static int32_t *ys[STEPS];

typedef struct {
    size_t arena;
    float loss[STEPS];
    bool ok;
} run_t;

/* Compiles, plans and trains STEPS steps on the fixed batches; the session
 * (and its backend, which writes the cache) is freed before it returns. */
static hr_precision g_precision = HR_PREC_FP32;

static run_t run(const hr_model_t *m, const char *what) {
    run_t r = {0};
    hr_config_t c = hr_config_default();
    c.device = HR_DEVICE_CUDA;
    c.precision = g_precision;
    c.batch = BATCH;
    c.seed = 7;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s != NULL, "%s: compile: %s", what, hr_last_error());
    if (!s) return r;
    r.arena = hr_session_report(s)->arena_bytes;
    bool ok = hr_session_alloc(s) == HR_OK;
    CHECK(ok, "%s: alloc: %s", what, hr_last_error());
    for (int t = 0; ok && t < STEPS; t++) {
        ok = hr_train_step(s, xs[t], ys[t], &r.loss[t]) == HR_OK && isfinite(r.loss[t]);
        CHECK(ok, "%s: step %d: %s", what, t, hr_last_error());
    }
    hr_session_free(s);
    r.ok = ok;
    return r;
}

/* The cache's choices (lines not comments) of a kind ("conv", "gemm") that
 * match a grep pattern. */
static int kind_lines_like(const char *dir, const char *kind, const char *pattern) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat %s/%s-*.tsv 2>/dev/null | grep -v '^#' | grep -c -- '%s'", dir, kind, pattern);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p && fscanf(p, "%d", &n) != 1) n = 0;
    if (p) pclose(p);
    return n;
}

static int lines_like(const char *dir, const char *pattern) { return kind_lines_like(dir, "conv", pattern); }
static int lines_in(const char *dir) { return lines_like(dir, "."); }

static void same_losses(const run_t *a, const run_t *b, const char *what) {
    double e = 0;
    for (int t = 0; t < STEPS; t++) e = fmax(e, fabs((double)a->loss[t] - b->loss[t]) / fmax(1.0, fabs(a->loss[t])));
    CHECK(a->ok && b->ok && e <= 1e-4, "%s: losses differ from the first run's by %.3g", what, e);
}

static void one_mode(const hr_model_t *m, const char *name, const char *mode) {
    char dir[] = "/tmp/hr_conv_cache_XXXXXX", cmd[700], what[160];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: cannot make a folder");
        return;
    }
    setenv("HR_CACHE_DIR", dir, 1);
    setenv("HR_CUDNN_ALGO", mode, 1);
    unsetenv("HR_CUDNN_CACHE");

    snprintf(what, sizeof what, "%s, first run", mode);
    run_t first = run(m, what);
    int n = lines_in(dir);
    int apis = lines_like(dir, " api\t"), legacy = lines_like(dir, " api\t2\t");
    printf("  %-10s %-8s first run: arena %zu bytes, %d choices written (%d between the APIs, %d legacy)\n", name,
           mode, first.arena, n, apis, legacy);
    CHECK(n >= 3, "%s: %d convolution choices in the cache, expected one per timed convolution (>= 3)", mode, n);
    /* the fastest mode decides each convolution's API (forward, backward-data
     * but the first layer's, backward-filter), the others never */
    int convs = 3; /* both models */
    if (!strcmp(mode, "fastest"))
        CHECK(apis == 3 * convs - 1, "%s %s: %d API choices kept, expected %d", name, mode, apis, 3 * convs - 1);
    else
        CHECK(apis == 0, "%s %s: %d API choices kept, expected none", name, mode, apis);

    snprintf(what, sizeof what, "%s, second run", mode);
    run_t second = run(m, what);
    printf("  %-10s %-8s second run: arena %zu bytes (%.1f%% of the first)\n", name, mode, second.arena,
           100.0 * (double)second.arena / (double)(first.arena ? first.arena : 1));
    CHECK(second.arena <= first.arena, "%s: the plan grew with the cache: %zu > %zu bytes", mode, second.arena,
          first.arena);
    same_losses(&first, &second, what);
    CHECK(lines_in(dir) == n, "%s: the second run changed the cache (%d lines, %d before)", mode, lines_in(dir), n);

    /* HR_CUDNN_CACHE=0: the cache is there and ignored */
    setenv("HR_CUDNN_CACHE", "0", 1);
    snprintf(what, sizeof what, "%s, HR_CUDNN_CACHE=0", mode);
    run_t off = run(m, what);
    CHECK(off.arena == first.arena, "%s: arena %zu, expected the first run's %zu", what, off.arena, first.arena);
    unsetenv("HR_CUDNN_CACHE");

    /* choices that are no longer candidates (another algorithm, another
     * workspace) and lines that are not choices at all: all ignored */
    snprintf(cmd, sizeof cmd,
             "cd %s && f=$(ls conv-*.tsv) && awk -F'\\t' 'BEGIN{OFS=\"\\t\"} /^#/{print;next} {print $1, 977, $3, $4 + 256}' "
             "$f > t && mv t $f && printf 'garbage\\nkey only\\t\\nprecise x\\t1\\t2\\t-5\\n\\t\\t\\t\\n' >> $f",
             dir);
    CHECK(system(cmd) == 0, "%s: rewriting the cache failed", mode);
    snprintf(what, sizeof what, "%s, stale cache", mode);
    run_t stale = run(m, what);
    CHECK(stale.arena == first.arena, "%s: arena %zu, expected the first run's %zu", what, stale.arena, first.arena);
    same_losses(&first, &stale, what);

    /* a cache folder that cannot be made: training goes on */
    snprintf(cmd, sizeof cmd, "rm -rf %s && touch %s", dir, dir);
    CHECK(system(cmd) == 0, "%s: making a file in the folder's place failed", mode);
    snprintf(what, sizeof what, "%s, no folder", mode);
    run_t nodir = run(m, what);
    CHECK(nodir.ok && nodir.arena == first.arena, "%s: arena %zu, expected %zu", what, nodir.arena, first.arena);
    unlink(dir);
}

static bool same_bits(const run_t *a, const run_t *b) {
    return a->ok && b->ok && !memcmp(a->loss, b->loss, sizeof a->loss);
}

/* The products' choices: the MLP's products timed, kept, reused, and
 * retimed where the cache's algorithm is not the candidate's. */
static void products(const hr_model_t *m, hr_precision prec) {
    char dir[] = "/tmp/hr_gemm_cache_XXXXXX", cmd[900], what[160];
    const char *pn = hr_precision_name(prec);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: cannot make a folder");
        return;
    }
    g_precision = prec;
    setenv("HR_CACHE_DIR", dir, 1);
    unsetenv("HR_CUDNN_ALGO");
    unsetenv("HR_CUDNN_CACHE");
    setenv("HR_CUDA_GEMM_TIME", "1", 1);
    snprintf(what, sizeof what, "products %s, first run", pn);
    run_t first = run(m, what);
    int n = kind_lines_like(dir, "gemm", ".");
    /* forward 3 (the bias in the epilogue), dW 3, dx 2; the last layer's
     * products may be split along k (not timed) */
    printf("  mlp %s: %d product choices written, %d cublasGemmEx's\n", pn, n,
           kind_lines_like(dir, "gemm", "\t-1\t0\t"));
    CHECK(n >= 5, "products %s: %d choices in the cache, expected one a timed product shape (>= 5)", pn, n);
    snprintf(cmd, sizeof cmd, "cp %s/gemm-*.tsv %s/before", dir, dir);
    CHECK(system(cmd) == 0, "products %s: copying the cache failed", pn);

    snprintf(what, sizeof what, "products %s, second run", pn);
    run_t second = run(m, what);
    CHECK(same_bits(&first, &second), "%s: losses %.9g %.9g %.9g, the first run's %.9g %.9g %.9g", what,
          second.loss[0], second.loss[1], second.loss[2], first.loss[0], first.loss[1], first.loss[2]);
    snprintf(cmd, sizeof cmd, "cmp -s %s/gemm-*.tsv %s/before", dir, dir);
    bool same = system(cmd) == 0;
    CHECK(same, "%s: the cache changed", what);
    if (!same) { /* what changed, for the log */
        snprintf(cmd, sizeof cmd, "diff %s/before %s/gemm-*.tsv | head -20", dir, dir);
        if (system(cmd) < 0) printf("  (diff failed)\n");
    }

    /* every kept algorithm's hash wrong (cublasGemmEx's, -1, has none to
     * check), and lines that are no choices: each algorithm's choice timed
     * again and written anew */
    snprintf(cmd, sizeof cmd,
             "cd %s && f=$(ls gemm-*.tsv) && awk -F'\\t' 'BEGIN{OFS=\"\\t\"} /^#/{print;next} {print $1, $2, $3 + 1, $4}' "
             "before > stale && cp stale $f && printf 'garbage\\nsms1 x\\t0\\t1\\n\\t\\t\\t\\n' >> $f",
             dir);
    CHECK(system(cmd) == 0, "products %s: rewriting the cache failed", pn);
    snprintf(what, sizeof what, "products %s, stale cache", pn);
    run_t stale = run(m, what);
    same_losses(&first, &stale, what);
    snprintf(cmd, sizeof cmd, "cd %s && grep -v '^#' stale | awk -F'\\t' '$2 >= 0' | sort > a && grep -v '^#' gemm-*.tsv "
             "| sort > b && test $(comm -12 a b | wc -l) -eq 0 && test $(grep -c . a) -gt 0", dir);
    CHECK(system(cmd) == 0, "%s: the stale choices were not all timed again", what);

    /* HR_CUDA_GEMM_TIME=0: nothing timed, nothing written */
    snprintf(cmd, sizeof cmd, "rm -f %s/gemm-*.tsv", dir);
    CHECK(system(cmd) == 0, "products %s: removing the cache failed", pn);
    setenv("HR_CUDA_GEMM_TIME", "0", 1);
    snprintf(what, sizeof what, "products %s, HR_CUDA_GEMM_TIME=0", pn);
    run_t off = run(m, what);
    same_losses(&first, &off, what);
    CHECK(kind_lines_like(dir, "gemm", ".") == 0, "%s: %d choices written", what, kind_lines_like(dir, "gemm", "."));
    unsetenv("HR_CUDA_GEMM_TIME");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "products %s: removing the folder failed", pn);
    g_precision = HR_PREC_FP32;
}

/* A MobileNet-like block on deep_cnn's input: a 3x3 stem, a depthwise 3x3
 * (groups = channels) and a pointwise 1x1. */
static hr_model_t *depthwise(void) {
    hr_model_t *m = hr_model_new("depthwise");
    int x = hr_input(m, "x", 3, (int64_t[]){3, 64, 64});
    x = hr_relu(m, NULL, hr_conv2d(m, NULL, x, 3, 32, 3, 1, 1, true));
    x = hr_relu(m, NULL, hr_conv2d_ex(m, NULL, x, 32, 32, 3, 1, 1, 1, 32, true));
    x = hr_relu(m, NULL, hr_conv2d_ex(m, NULL, x, 32, 64, 1, 1, 0, 1, 1, true));
    x = hr_maxpool2d(m, NULL, x, 4, 4);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 64 * 16 * 16, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    return m;
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        TEST_END();
    }
    hr_model_t *m = seed_deep_cnn();
    int64_t per = 3 * 64 * 64;
    for (int t = 0; t < STEPS; t++) {
        xs[t] = malloc(sizeof(float) * (size_t)(BATCH * per));
        ys[t] = malloc(sizeof(int32_t) * BATCH);
        for (int64_t i = 0; i < BATCH * per; i++) xs[t][i] = frand();
        for (int i = 0; i < BATCH; i++) ys[t][i] = (int32_t)((frand() + 1.0f) * 5.0f) % 10;
    }
    hr_model_t *dw = depthwise();
    one_mode(m, "deep_cnn", "precise");
    one_mode(m, "deep_cnn", "fastest");
    one_mode(dw, "depthwise", "fastest");
    hr_model_t *mlp = seed_mlp();
    products(mlp, HR_PREC_FP32);
    products(mlp, HR_PREC_BF16);
    hr_model_free(mlp);
    for (int t = 0; t < STEPS; t++) free(xs[t]), free(ys[t]);
    hr_model_free(m);
    hr_model_free(dw);
    TEST_END();
}
