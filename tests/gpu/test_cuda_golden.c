/* test_cuda_golden.c — tests/test_golden.c (the three seed models against
 * PyTorch's vectors: first logits, loss, every gradient, 5 steps of Adam, and
 * SGD/AdamW/clipping on SimpleCNN) run on the CUDA backend, with the same
 * tolerances as on the CPU except the 5-step Adam trajectories of the MLP and
 * DeepCNN: there a weight whose gradient is rounding noise takes a step of
 * +-lr whose sign the summation order decides, and cuDNN's engines sum in
 * other orders than the CPU (measured on an H200 with the graph API's
 * engines: update L2 1.2e-2, sampled parameters 1.0e-2, from the one or two
 * weights that flip, while the first gradients agree with the CPU's to 7e-8).
 * The bounds allow a few such weights.
 *
 * Then Conv2d with groups, depthwise and dilation (tests/golden_conv.h, the
 * cases of tests/test_golden_ops.c): each node on the CUDA backend, with
 * the graph API's engines and with the legacy API (cudnnSetConvolutionGroupCount),
 * against PyTorch's values in tests/golden/ops.safetensors. Run from the
 * repository root. */
#include "headroom.h"

#define GOLDEN_TRAJ_L2 3e-2
#define GOLDEN_TRAJ_NMAX 2e-2

static hr_config_t cuda_config_default(void) {
    hr_config_t c = hr_config_default();
    c.device = HR_DEVICE_CUDA;
    return c;
}

#define hr_config_default cuda_config_default
#define main golden_main
#include "../test_golden.c"
#undef main
#undef hr_config_default

#include "exec/internal.h"
#include "golden_conv.h"
#include "io/io.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

bool hr_backend_cuda_available(void);

/* cuDNN's precise FP32 algorithms sum in other orders than PyTorch's CPU:
 * the CPU's bound (test_golden_ops.c, measured <= 4.7e-7) with room */
#define CONV_ULPS 64

/* got (on the device, n floats) against "<case>.<what>" */
static void conv_compare(hr_backend *be, hr_safetensors_t *f, const char *cs, const char *what, const void *got, int ndim,
                         const int64_t *dims, const char *api) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", cs, what);
    const hr_st_tensor *t = hr_safetensors_expect(f, key, "F32", ndim, dims);
    CHECK(t != NULL, "%s: %s", key, hr_last_error());
    if (!t) return;
    float *ref = malloc(sizeof(float) * (size_t)t->numel), *h = malloc(sizeof(float) * (size_t)t->numel);
    if (!ref || !h) abort();
    CHECK(hr_safetensors_read(f, t, ref) == HR_OK, "%s: %s", key, hr_last_error());
    CHECK(be->download(be, h, got, sizeof(float) * (size_t)t->numel) == HR_OK, "download: %s", hr_last_error());
    double mx = 0, err = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        double d = fabs((double)h[i] - ref[i]);
        mx = fmax(mx, fabs(ref[i]));
        err = d == d ? fmax(err, d) : INFINITY;
    }
    double nmax = mx > 0 ? err / mx : err, tol = CONV_ULPS * (double)FLT_EPSILON;
    printf("  %-24s %-7s %6lld  nmax %9.3g  bound %9.3g%s\n", key, api, (long long)t->numel, nmax, tol,
           nmax <= tol ? "" : "  FAIL");
    CHECK(nmax <= tol, "%s (%s): nmax %.3g > %.3g", key, api, nmax, tol);
    free(ref), free(h);
}

/* One case: forward and backward nodes on device buffers cut from one arena. */
static void conv_case(hr_backend *be, hr_safetensors_t *f, const convcase *c, char *base, size_t size, const char *api) {
    hr_graph g;
    memset(&g, 0, sizeof g);
    void *ptr[16] = {0};
    size_t used = 0;
    int64_t xd[4], wd[4], yd[4], bd[1] = {c->K};
    conv_case_dims(c, xd, wd, yd);
#define T(nd, d)                                                                                                        \
    (tn = hr_graph_add_tensor(&g, "t", HR_F32, hr_shape_make(nd, d), false, HR_T_ACT, -1),                             \
     ptr[tn] = base + used, used = hr_align_up(used + (size_t)hr_shape_numel(&g.t[tn].shape) * 4, HR_ALIGN), tn)
    int tn;
    int tx = T(4, xd), tw = T(4, wd), ty = T(4, yd), tdy = T(4, yd), tdx = T(4, xd), tdw = T(4, wd);
    int tb = c->bias ? T(1, bd) : -1, tdb = c->bias ? T(1, bd) : -1;
    int64_t ns[4] = {hr_shape_numel(&g.t[tx].shape), hr_shape_numel(&g.t[tw].shape), c->K, hr_shape_numel(&g.t[ty].shape)};
    int ts[4] = {tx, tw, tb, tdy};
    float scale[4] = {1.0f, 0.5f, 1.0f, 1.0f};
    for (int i = 0; i < 4; i++) { /* x, W, b, dy: the generator's draws */
        if (ts[i] < 0) continue;
        float *v = malloc(sizeof(float) * (size_t)ns[i]);
        if (!v) abort();
        for (int64_t j = 0; j < ns[i]; j++)
            v[j] = scale[i] * (2.0f * hr_rng_uniform(1234, c->stream + (uint64_t)i, (uint64_t)j) - 1.0f);
        CHECK(be->upload(be, ptr[ts[i]], v, sizeof(float) * (size_t)ns[i]) == HR_OK, "upload: %s", hr_last_error());
        free(v);
    }
    hr_node fw = hr_node_make(HR_OP_CONV2D, -1), bw = hr_node_make(HR_OP_CONV2D_BWD, -1);
    conv_case_attrs(c, &fw);
    fw.in[0] = tx, fw.in[1] = tw, fw.in[2] = tb, fw.nin = c->bias ? 3 : 2, fw.out[0] = ty, fw.nout = 1;
    bw.a = fw.a;
    bw.in[0] = tx, bw.in[1] = tw, bw.in[2] = tdy, bw.nin = 3;
    bw.out[0] = tdx, bw.out[1] = tdw, bw.out[2] = tdb, bw.nout = 3;
    hr_step_info si;
    memset(&si, 0, sizeof si);
    si.sqnorm = -1, si.loss_scale = si.inv_scale = 1.0f;
    hr_node *ns2[2] = {&fw, &bw};
    for (int k = 0; k < 2; k++) {
        size_t ws = hr_node_workspace(be, &g, ns2[k]);
        ns2[k]->ws = ws ? T(1, ((int64_t[]){(int64_t)(ws + 3) / 4})) : -1;
        CHECK(used <= size, "%s: the test's arena is too small", c->name);
        hr_status st = used <= size ? hr_node_run(be, &g, ns2[k], ptr, &si) : HR_ERR_INTERNAL;
        if (st == HR_OK) st = be->sync(be);
        CHECK(st == HR_OK, "%s %s (%s): %s", c->name, k ? "backward" : "forward", api, hr_last_error());
    }
#undef T
    conv_compare(be, f, c->name, "y", ptr[ty], 4, yd, api);
    conv_compare(be, f, c->name, "dx", ptr[tdx], 4, xd, api);
    conv_compare(be, f, c->name, "dweight", ptr[tdw], 4, wd, api);
    if (c->bias) conv_compare(be, f, c->name, "dbias", ptr[tdb], 1, bd, api);
    hr_graph_free(&g);
}

static void conv_golden(void) {
    hr_safetensors_t *f = hr_safetensors_open("tests/golden/ops.safetensors");
    CHECK(f != NULL, "tests/golden/ops.safetensors: %s", hr_last_error());
    if (!f) return;
    printf("Conv2d with groups and dilation, CUDA against PyTorch\n");
    for (int api = 0; api < 2; api++) {
        if (api) setenv("HR_CUDNN_API", "legacy", 1);
        hr_config_t cfg = cuda_config_default();
        hr_backend *be = hr_backend_cuda_new(&cfg);
        unsetenv("HR_CUDNN_API");
        CHECK(be != NULL, "CUDA backend: %s", hr_last_error());
        if (!be) continue;
        void *base = NULL;
        size_t size = (size_t)256 << 20;
        CHECK(be->arena_alloc(be, size, &base) == HR_OK, "arena: %s", hr_last_error());
        for (int i = 0; base && i < NCONV; i++) conv_case(be, f, &CONV_CASES[i], base, size, api ? "legacy" : "graph");
        if (base) be->arena_free(be, base);
        be->free(be);
    }
    hr_safetensors_free(f);
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        TEST_END();
    }
    conv_golden();
    return golden_main();
}
