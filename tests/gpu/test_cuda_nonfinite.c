/* test_cuda_nonfinite.c — non-finite values on the GPU. The ops that select
 * (ReLU, LeakyReLU, MaxPool2d, forward and backward) and Dropout (which
 * multiplies by its mask: tests/ops/activations.c) take NaN, +-inf and -0
 * in F32, BF16 and F16 and must give the CPU's bits (which are PyTorch's:
 * tests/test_golden_ops.c's NF_CASES), masks and argmax bytes included; and
 * the NaN stop (tests/nan_stop.h) works through the CUDA backend as on the
 * CPU. Skips (passing) where no GPU is present. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nan_stop.h"
#include "exec/internal.h"

/* ---- the selecting ops, CUDA against the CPU --------------------------------- */
/* ReLU, Dropout(0.5), MaxPool2d(2) (the 2x2 kernels), LeakyReLU, MaxPool2d(3, 2)
 * (overlapping windows, the general kernels) */
static hr_model_t *select_cnn(void) {
    hr_model_t *m = hr_model_new("select_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 10, 10});
    x = hr_conv2d(m, NULL, x, 2, 4, 3, 1, 1, true);
    x = hr_relu(m, NULL, x);
    x = hr_dropout(m, NULL, x, 0.5f);
    x = hr_maxpool2d(m, NULL, x, 2, 2); /* 4x5x5 */
    x = hr_leaky_relu(m, NULL, x, 0.1f);
    x = hr_maxpool2d(m, NULL, x, 3, 2); /* 4x2x2 */
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 16, 5, true);
    hr_loss_cross_entropy(m, x, 5);
    return m;
}

static bool selects(hr_op op) {
    return op == HR_OP_RELU || op == HR_OP_RELU_BWD || op == HR_OP_LEAKY_RELU || op == HR_OP_LEAKY_RELU_BWD ||
           op == HR_OP_MAXPOOL || op == HR_OP_MAXPOOL_BWD || op == HR_OP_DROPOUT || op == HR_OP_DROPOUT_BWD;
}
static bool floating(hr_dtype t) { return t == HR_F32 || t == HR_BF16 || t == HR_F16; }

static size_t tbytes(const hr_graph *g, int t) {
    return (size_t)hr_shape_numel(&g->t[t].shape) * hr_dtype_size(g->t[t].dtype);
}

static hr_session_t *open_session(const hr_model_t *m, hr_config_t c, hr_device dev) {
    c.device = dev;
    hr_session_t *s = hr_compile(m, &c);
    CHECK(s && hr_session_alloc(s) == HR_OK, "session on %s: %s", dev == HR_DEVICE_CUDA ? "cuda" : "cpu",
          hr_last_error());
    if (s && !hr_session_allocated(s)) {
        hr_session_free(s);
        s = NULL;
    }
    return s;
}

/* The CPU session's tensor t into the GPU session's. */
static void push(hr_session_t *a, hr_session_t *b, int t) {
    const hr_graph *g = &hr_session_program(a)->g;
    void **pa = hr_session_ptrs(a), **pb = hr_session_ptrs(b);
    hr_backend *be = hr_session_backend(b);
    if (t < 0 || !pa[t] || !pb[t]) return;
    CHECK(be->upload(be, pb[t], pa[t], tbytes(g, t)) == HR_OK, "upload %s: %s", g->t[t].name, hr_last_error());
}

/* Values of tensor t whose bits differ between the sessions (two NaNs of its
 * type are equal, payloads aside); the first one's index in *at. */
static int64_t bits_differ(hr_session_t *a, hr_session_t *b, int t, int64_t *at) {
    const hr_graph *g = &hr_session_program(a)->g;
    hr_backend *be = hr_session_backend(b);
    hr_dtype dt = g->t[t].dtype;
    size_t n = tbytes(g, t), es = hr_dtype_size(dt);
    unsigned char *h = malloc(n ? n : 1);
    const unsigned char *c = hr_session_ptrs(a)[t];
    CHECK(be->download(be, h, hr_session_ptrs(b)[t], n) == HR_OK && be->sync(be) == HR_OK, "download: %s",
          hr_last_error());
    int64_t bad = 0;
    *at = -1;
    for (int64_t i = 0; i < (int64_t)(n / es); i++) {
        if (!memcmp(h + i * es, c + i * es, es) ||
            (floating(dt) && isnan(hr_load_f(h, dt, i)) && isnan(hr_load_f(c, dt, i))))
            continue;
        if (*at < 0) *at = i;
        bad++;
    }
    free(h);
    return bad;
}

/* Every node runs on both from the CPU's inputs (as test_cuda_ops.c's
 * run_nodes); before a selecting node, every 5th value of its float inputs
 * becomes one of the specials, and its outputs are compared. */
static void run_specials(const char *name, const hr_model_t *m, hr_precision prec) {
    static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -NAN, 3e38f, -3e38f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    hr_config_t c = hr_config_default();
    c.batch = 5, c.seed = 42, c.precision = prec, c.keep_grads = true;
    hr_session_t *a = open_session(m, c, HR_DEVICE_CPU), *b = open_session(m, c, HR_DEVICE_CUDA);
    if (!a || !b) goto out;
    const hr_program *p = hr_session_program(a);
    const hr_graph *g = &p->g, *gb = &hr_session_program(b)->g;
    void **pa = hr_session_ptrs(a), **pb = hr_session_ptrs(b);
    hr_backend *ba = hr_session_backend(a), *bb = hr_session_backend(b);
    CHECK(g->nn == gb->nn, "%s: %d nodes on the CPU, %d on the GPU", name, g->nn, gb->nn);
    if (g->nn != gb->nn) goto out;
    for (int64_t i = 0; i < hr_shape_numel(&g->t[p->input].shape); i++) /* in the input's type (half: the cast folded) */
        hr_store_f(pa[p->input], g->t[p->input].dtype, i, (float)((i * 37) % 23) / 11.0f - 1.0f);
    int32_t *lab = pa[p->label];
    for (int64_t i = 0; i < hr_shape_numel(&g->t[p->label].shape); i++) lab[i] = (int32_t)(i % 5);
    hr_step_info si = hr_step_info_make(0, &c, p->sqnorm);
    int checked = 0, drop_checked = 0;
    for (int k = 0; k < g->nn; k++) {
        const hr_node *na = &g->n[k];
        bool sel = selects(na->op);
        if (k == p->n_bwd_end) si.t = 1;
        for (int i = 0; i < na->nin; i++) {
            int t = na->in[i];
            if (t < 0) continue;
            if (sel && pa[t] && floating(g->t[t].dtype))
                for (int64_t j = k % 5; j < hr_shape_numel(&g->t[t].shape); j += 5)
                    hr_store_f(pa[t], g->t[t].dtype, j, specials[(j / 5 + i) % ns]);
            push(a, b, t);
        }
        for (int i = 0; i < na->nout; i++)
            if (na->accum[i]) push(a, b, na->out[i]);
        hr_status sa = hr_node_run(ba, g, na, pa, &si), sb = hr_node_run(bb, gb, &gb->n[k], pb, &si);
        if (sb == HR_OK) sb = bb->sync(bb);
        CHECK(sa == HR_OK && sb == HR_OK, "%s node %d (%s): %s", name, k, hr_op_name(na->op), hr_last_error());
        if (sa || sb || !sel) continue;
        for (int i = 0; i < na->nout; i++) {
            int t = na->out[i];
            if (t < 0) continue;
            int64_t at, bad = bits_differ(a, b, t, &at);
            checked++;
            drop_checked += na->op == HR_OP_DROPOUT || na->op == HR_OP_DROPOUT_BWD;
            CHECK(bad == 0, "%s node %d (%s, layer %s): %lld values of %s (%s) differ from the CPU's, the first at "
                            "%lld", name, k, hr_op_name(na->op), na->layer >= 0 ? g->l[na->layer].name : "-",
                  (long long)bad, g->t[t].name, hr_dtype_name(g->t[t].dtype), (long long)at);
        }
    }
    printf("  %-18s %d outputs of ReLU, Dropout, LeakyReLU, MaxPool2d (and backward) with NaN, +-inf, -0: compared\n",
           name, checked);
    CHECK(checked >= 8, "%s: only %d outputs compared", name, checked);
    CHECK(drop_checked >= 2, "%s: only %d outputs of Dropout (y, dx) compared", name, drop_checked);
out:
    hr_session_free(a);
    hr_session_free(b);
}

int main(void) {
    if (!hr_backend_cuda_available()) {
        printf("SKIP: no CUDA device (%s)\n", hr_backend_cuda_new(NULL) ? "?" : hr_last_error());
        TEST_END();
    }
    printf("selecting ops and Dropout with NaN, +-inf, -0: CUDA against the CPU, bit for bit\n");
    hr_model_t *m = select_cnn();
    run_specials("select_cnn fp32", m, HR_PREC_FP32);
    run_specials("select_cnn bf16", m, HR_PREC_BF16);
    run_specials("select_cnn fp16", m, HR_PREC_FP16);
    hr_model_free(m);
    printf("the NaN stop on the GPU\n");
    for (int K = 1; K <= 2; K++) {
        nan_stop_cases(HR_DEVICE_CUDA, K);
        nan_stop_same_numbers(HR_DEVICE_CUDA, K);
    }
    TEST_END();
}
