/* sequence.c — the ops of sequence models against float64 references and
 * finite differences: Embedding (repeated ids, the table's gradient),
 * PositionEmbedding, and causal self-attention (several heads, the saved
 * log-sum-exp, the backward in every accumulate/overwrite form, inference). */
#include "harness.h"

/* ---- Embedding and PositionEmbedding ----------------------------------------- */
typedef struct {
    const int *ids;
    double *w, *x, *gw, *y;
    int64_t N, T, V, C;
    bool pos;
} emb_ctx;

static void ref_embed(emb_ctx *c, double *y) {
    for (int64_t i = 0; i < c->N * c->T; i++)
        for (int64_t j = 0; j < c->C; j++)
            y[i * c->C + j] = c->pos ? c->x[i * c->C + j] + c->w[(i % c->T) * c->C + j] : c->w[c->ids[i] * c->C + j];
}
static double emb_loss(void *c_) {
    emb_ctx *c = c_;
    ref_embed(c, c->y);
    return wsum(c->gw, c->y, c->N * c->T * c->C);
}

static void test_embedding(bool pos) {
    const int64_t N = 3, T = 5, V = pos ? T + 2 : 7, C = 6, n = N * T * C;
    const char *op = pos ? "PositionEmbedding" : "Embedding";
    int ids[N * T];
    for (int64_t i = 0; i < N * T; i++) ids[i] = (int)((i * 5 + i / 4) % V); /* ids repeat, some unused */
    ids[3] = ids[4] = ids[7];
    emb_ctx c = {.ids = ids, .N = N, .T = T, .V = V, .C = C, .pos = pos};
    c.w = dalloc(V * C), c.x = dalloc(n), c.gw = dalloc(n), c.y = dalloc(n);
    fill(c.w, V * C, -2, 2), fill(c.x, n, -1, 1), fill(c.gw, n, -1, 1);
    double *y = dalloc(n), *dw = dalloc(V * C), *dx = dalloc(n);
    ref_embed(&c, y);
    fd_grad(emb_loss, &c, c.w, V * C, dw);
    if (pos) fd_grad(emb_loss, &c, c.x, n, dx);
    double idf[N * T];
    for (int64_t i = 0; i < N * T; i++) idf[i] = ids[i];

    kt k;
    kt_init(&k);
    int tin = pos ? KT(&k, N, T, C) : KT(&k, N, T), tw = KT(&k, V, C), ty = KT(&k, N, T, C), tdy = KT(&k, N, T, C);
    int tdw = KT(&k, V, C);
    kt_set(&k, tin, pos ? c.x : idf), kt_set(&k, tw, c.w), kt_set(&k, tdy, c.gw);
    hr_node f = hr_node_make(pos ? HR_OP_POS_EMBEDDING : HR_OP_EMBEDDING, -1);
    f.a.in_f = V, f.a.out_f = C, f.a.train = true;
    f.in[0] = tin, f.in[1] = tw, f.nin = 2, f.out[0] = ty, f.nout = 1;
    kt_fillf(&k, ty, NAN);
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, n, 1e-6);
    if (pos) check_inplace(&k, &f, y, op, 1e-6);

    hr_node b = hr_node_make(pos ? HR_OP_POS_EMBEDDING_BWD : HR_OP_EMBEDDING_BWD, -1);
    b.a = f.a;
    if (!pos) b.in[b.nin++] = tin;
    b.in[b.nin++] = tdy;
    b.out[0] = tdw, b.nout = 1;
    check_backward(&k, &b, (double *[]){dw}, op, 1e-5, false);
    /* PositionEmbedding's input gradient is dy itself (autodiff's Copy): the reference says so */
    if (pos) compare(op, "input gradient = dy", kf(&k, tdy), dx, n, 1e-6);

    /* an id outside the table is an error, not a read past it */
    if (!pos) {
        kf(&k, tin)[2] = (float)V;
        hr_status st = hr_node_run(k.be, &k.g, &f, k.ptr, NULL);
        CHECK(st == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "token id 7 at position 2 is outside [0, 7)"),
              "Embedding of id V: status %d, '%s'", (int)st, hr_last_error());
    }
    kt_free(&k);
    free(c.w), free(c.x), free(c.gw), free(c.y), free(y), free(dw), free(dx);
}

/* ---- causal self-attention --------------------------------------------------- */
typedef struct {
    double *qkv, *w, *y;
    int64_t N, T, C, H;
    double pdrop; /* > 0: probability (i, j) kept when the harness's draw (seed 7, layer 3, step 1) is >= pdrop */
} att_ctx;

/* the keep factor of probability (i, j) of sequence n, head h: from the
 * documented draw (docs/golden.md, "Attention's drop draws"), written out
 * here again, 1 / (1 - pdrop) or 0 */
static double att_keep(const att_ctx *c, int64_t n, int64_t h, int64_t i, int64_t j) {
    if (c->pdrop <= 0) return 1;
    uint64_t seed = 7, stream = (3ULL << 32) ^ 1;
    uint64_t key = (seed * 0x100000001B3ULL) ^ (stream * 0x9E3779B97F4A7C15ULL);
    uint64_t blk = ((uint64_t)(n * c->H + h) << 32) | ((uint64_t)(i >> 16) << 16) | (uint64_t)(j >> 16);
    uint32_t x = (uint32_t)(hr_mix64(key + blk) >> 32) ^ (uint32_t)(((i & 0xffff) << 16) | (j & 0xffff));
    x = (x ^ (x >> 16)) * 0x7feb352dU;
    x = (x ^ (x >> 15)) * 0x846ca68bU;
    x ^= x >> 16;
    return (double)(x >> 8) / 16777216.0 >= (double)(float)c->pdrop ? 1.0 / (1.0 - (double)(float)c->pdrop) : 0.0;
}

/* y and lse of every (sequence, head, query), as softmax(q k^T / sqrt(hs) + causal mask) v,
 * each probability times its keep factor */
static void ref_attention(const att_ctx *c, double *y, double *lse) {
    int64_t N = c->N, T = c->T, C = c->C, H = c->H, hs = C / H;
    double scale = 1 / sqrt((double)hs), *s = dalloc(T);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const double *q = c->qkv + (n * T + i) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *k = c->qkv + (n * T + j) * 3 * C + C + h * hs;
                    s[j] = 0;
                    for (int64_t d = 0; d < hs; d++) s[j] += q[d] * k[d];
                    s[j] *= scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
                double *yo = y + (n * T + i) * C + h * hs;
                for (int64_t d = 0; d < hs; d++) {
                    yo[d] = 0;
                    for (int64_t j = 0; j <= i; j++)
                        yo[d] += exp(s[j] - mx) / sum * att_keep(c, n, h, i, j) *
                                 c->qkv[(n * T + j) * 3 * C + 2 * C + h * hs + d];
                }
                if (lse) lse[(n * H + h) * T + i] = mx + log(sum);
            }
    free(s);
}
static double att_loss(void *c_) {
    att_ctx *c = c_;
    ref_attention(c, c->y, NULL);
    return wsum(c->w, c->y, c->N * c->T * c->C);
}

/* pdrop > 0: attention dropout, the reference's keep factors drawn as
 * documented; the inference forward then drops nothing, and a second
 * micro-batch (sample0 = 1) draws the whole batch's second sequence's. */
static void test_attention(int64_t N, int64_t T, int64_t C, int64_t H, double pdrop) {
    char op[96];
    snprintf(op, sizeof op, "CausalSelfAttention N%lld T%lld C%lld H%lld attn_pdrop %g", (long long)N, (long long)T,
             (long long)C, (long long)H, pdrop);
    att_ctx c = {.N = N, .T = T, .C = C, .H = H, .pdrop = pdrop};
    int64_t nq = N * T * 3 * C, ny = N * T * C, nl = N * H * T;
    c.qkv = dalloc(nq), c.w = dalloc(ny), c.y = dalloc(ny);
    fill(c.qkv, nq, -1.5, 1.5), fill(c.w, ny, -1, 1);
    double *y = dalloc(ny), *lse = dalloc(nl), *g = dalloc(nq);
    ref_attention(&c, y, lse);
    fd_grad(att_loss, &c, c.qkv, nq, g);

    kt k;
    kt_init(&k);
    int tq = KT(&k, N, T, 3 * C), ty = KT(&k, N, T, C), tl = KT(&k, N, H, T), tdy = KT(&k, N, T, C);
    int tdq = KT(&k, N, T, 3 * C);
    kt_set(&k, tq, c.qkv), kt_set(&k, tdy, c.w);
    hr_node f = hr_node_make(HR_OP_ATTENTION, -1);
    f.a.in_f = C, f.a.out_f = H, f.a.train = true;
    f.a.p = (float)pdrop, f.a.seed = 3;
    f.in[0] = tq, f.nin = 1, f.out[0] = ty, f.out[1] = tl, f.nout = 2;
    kt_fillf(&k, ty, NAN), kt_fillf(&k, tl, NAN);
    kt_run(&k, &f);
    compare(op, "forward", kf(&k, ty), y, ny, 2e-6);
    compare(op, "saved log-sum-exp", kf(&k, tl), lse, nl, 2e-6);

    hr_node b = hr_node_make(HR_OP_ATTENTION_BWD, -1);
    b.a = f.a;
    b.in[0] = tq, b.in[1] = ty, b.in[2] = tl, b.in[3] = tdy, b.nin = 4;
    b.out[0] = tdq, b.nout = 1;
    check_backward(&k, &b, (double *[]){g}, op, 2e-5, false);

    if (pdrop > 0 && N > 1) { /* the second sequence alone as micro-batch 2: the whole batch's draws */
        kt k2;
        kt_init(&k2);
        int q2 = KT(&k2, 1, T, 3 * C), y2 = KT(&k2, 1, T, C), l2 = KT(&k2, 1, H, T);
        kt_set(&k2, q2, c.qkv + T * 3 * C);
        hr_node f2 = f;
        f2.in[0] = q2, f2.out[0] = y2, f2.out[1] = l2;
        kt_fillf(&k2, y2, NAN);
        hr_step_info si = kt_si();
        si.sample0 = 1;
        kt_run_si(&k2, &f2, &si);
        compare(op, "micro-batch 2's forward", kf(&k2, y2), y + T * C, T * C, 2e-6);
        kt_free(&k2);
    }
    f.a.train = false, f.nout = 1, f.out[1] = -1; /* inference: y alone, nothing dropped */
    kt_fillf(&k, ty, NAN);
    kt_run(&k, &f);
    c.pdrop = 0;
    ref_attention(&c, y, NULL);
    compare(op, "inference forward", kf(&k, ty), y, ny, 2e-6);
    kt_free(&k);
    free(c.qkv), free(c.w), free(c.y), free(y), free(lse), free(g);
}

/* The half nodes autocast makes (q, k, v, y and dqkv in bf16 or f16, the
 * log-sum-exp in F32), which the CPU runs through F32 copies: y within one
 * unit of the half type of the float64 result from the same rounded inputs
 * (plus the F32 sums' 1e-6), the gradient of sum(dy . y) within four units of
 * its largest value (the kernel reads y as saved, rounded, for D). */
static double hval(const void *p, hr_dtype t, int64_t i) {
    uint16_t b = ((const uint16_t *)p)[i];
    return t == HR_BF16 ? hr_bf16_to_f32(b) : hr_f16_to_f32(b);
}
static double hput(void *p, hr_dtype t, int64_t i, double v) {
    ((uint16_t *)p)[i] = t == HR_BF16 ? hr_f32_to_bf16((float)v) : hr_f32_to_f16((float)v);
    return hval(p, t, i);
}
static void test_attention_half(hr_dtype ht) {
    const int64_t N = 2, T = 5, C = 8, H = 2;
    const char *op = ht == HR_BF16 ? "CausalSelfAttention (bf16, through F32 copies)"
                                   : "CausalSelfAttention (fp16, through F32 copies)";
    double u = ht == HR_BF16 ? 0x1p-8 : 0x1p-11;
    att_ctx c = {.N = N, .T = T, .C = C, .H = H};
    int64_t nq = N * T * 3 * C, ny = N * T * C, nl = N * H * T;
    c.qkv = dalloc(nq), c.w = dalloc(ny), c.y = dalloc(ny);
    double *y = dalloc(ny), *lse = dalloc(nl), *g = dalloc(nq);
    kt k;
    kt_init(&k);
    int tq = kt_tensor(&k, ht, 3, (int64_t[]){N, T, 3 * C}), ty = kt_tensor(&k, ht, 3, (int64_t[]){N, T, C});
    int tl = KT(&k, N, H, T), tdy = kt_tensor(&k, ht, 3, (int64_t[]){N, T, C});
    int tdq = kt_tensor(&k, ht, 3, (int64_t[]){N, T, 3 * C});
    for (int64_t i = 0; i < nq; i++) c.qkv[i] = hput(k.ptr[tq], ht, i, frand(-1.5, 1.5));
    for (int64_t i = 0; i < ny; i++) c.w[i] = hput(k.ptr[tdy], ht, i, frand(-1, 1));
    ref_attention(&c, y, lse);
    fd_grad(att_loss, &c, c.qkv, nq, g);
    hr_node f = hr_node_make(HR_OP_ATTENTION, -1);
    f.a.in_f = C, f.a.out_f = H, f.a.train = true;
    f.in[0] = tq, f.nin = 1, f.out[0] = ty, f.out[1] = tl, f.nout = 2;
    kt_fillf(&k, tl, NAN);
    memset(k.ptr[ty], 0xff, (size_t)ny * 2);
    kt_run(&k, &f);
    int64_t far = 0;
    for (int64_t i = 0; i < ny; i++) far += !(fabs(hval(k.ptr[ty], ht, i) - y[i]) <= u * fabs(y[i]) + 1e-6);
    CHECK(far == 0, "%s: %lld of %lld outputs more than one unit from the float64 result", op, (long long)far,
          (long long)ny);
    compare(op, "saved log-sum-exp (F32)", kf(&k, tl), lse, nl, 2e-6);

    hr_node b = hr_node_make(HR_OP_ATTENTION_BWD, -1);
    b.a = f.a;
    b.in[0] = tq, b.in[1] = ty, b.in[2] = tl, b.in[3] = tdy, b.nin = 4;
    b.out[0] = tdq, b.nout = 1;
    memset(k.ptr[tdq], 0xff, (size_t)nq * 2);
    kt_run(&k, &b);
    double gmax = 0, worst = 0;
    for (int64_t i = 0; i < nq; i++) gmax = fmax(gmax, fabs(g[i]));
    for (int64_t i = 0; i < nq; i++) {
        double d = fabs(hval(k.ptr[tdq], ht, i) - g[i]);
        worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
    }
    CHECK(worst <= 4 * u * gmax, "%s: the gradient is %.3g from finite differences, more than 4 units of its largest "
          "value %.3g", op, worst, gmax);
    kt_free(&k);
    free(c.qkv), free(c.w), free(c.y), free(y), free(lse), free(g);
}

/* ---- a tiny GPT end to end --------------------------------------------------- */
/* tokens (B, T) -> 0 Embedding(V, C) -> 1 PositionEmbedding(T + 1, C) ->
 * 2 LayerNorm(C) -> 3 Linear(C, 3C) -> 4 attention (H heads) -> 5 Linear(C, C)
 * -> 6 Add(1) -> 7 Linear(C, V) -> CrossEntropyLoss at every position */
enum { G_B = 2, G_T = 4, G_V = 5, G_C = 6, G_H = 2 };
static bool g_tied; /* 7 Linear shares 0's weight (weight tying) */

static double fwd_gpt(void *c_) {
    e2e *e = c_;
    const int B = e->B, T = G_T, C = G_C, V = G_V, R = B * T;
    double x0[G_B * G_T * G_C], ln[G_B * G_T * G_C], qkv[G_B * G_T * 3 * G_C], att[G_B * G_T * G_C];
    double pr[G_B * G_T * G_C], x1[G_B * G_T * G_C], lg[G_B * G_T * G_V];
    const double *wte = P(e, "0.weight"), *wpe = P(e, "1.weight"), *g = P(e, "2.weight"), *bt = P(e, "2.bias");
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) x0[r * C + j] = wte[(int)e->x[r] * C + j] + wpe[(r % T) * C + j];
    for (int r = 0; r < R; r++) { /* LayerNorm over C, biased variance, eps 1e-5 */
        double mu = 0, var = 0;
        for (int j = 0; j < C; j++) mu += x0[r * C + j] / C;
        for (int j = 0; j < C; j++) var += (x0[r * C + j] - mu) * (x0[r * C + j] - mu) / C;
        for (int j = 0; j < C; j++) ln[r * C + j] = (x0[r * C + j] - mu) / sqrt(var + 1e-5) * g[j] + bt[j];
    }
    ref_linear(ln, P(e, "3.weight"), P(e, "3.bias"), R, C, 3 * C, qkv);
    att_ctx ac = {.qkv = qkv, .N = B, .T = T, .C = C, .H = G_H};
    ref_attention(&ac, att, NULL);
    ref_linear(att, P(e, "5.weight"), P(e, "5.bias"), R, C, C, pr);
    for (int i = 0; i < R * C; i++) x1[i] = x0[i] + pr[i];
    ref_linear(x1, g_tied ? wte : P(e, "7.weight"), P(e, "7.bias"), R, C, V, lg);
    int lab[G_B * G_T];
    for (int i = 0; i < R; i++) lab[i] = e->lab[i];
    return ref_ce(lg, lab, R, V);
}

static void test_gpt_e2e(bool tied) {
    g_tied = tied;
    hr_model_t *m = hr_model_new("gpt");
    int tok = hr_input(m, "tokens", 1, (int64_t[]){G_T});
    int x0 = hr_embedding(m, NULL, tok, G_V, G_C);
    x0 = hr_position_embedding(m, NULL, x0, G_T + 1, G_C);
    int x = hr_layernorm(m, NULL, x0, 1, (int64_t[]){G_C}, 1e-5f, true, true);
    x = hr_linear(m, NULL, x, G_C, 3 * G_C, true);
    x = hr_causal_attention(m, NULL, x, G_H);
    x = hr_linear(m, NULL, x, G_C, G_C, true);
    x = hr_add(m, NULL, x0, x);
    x = tied ? hr_linear_tied(m, NULL, x, G_C, G_V, true, "0") : hr_linear(m, NULL, x, G_C, G_V, true);
    CHECK(hr_loss_cross_entropy(m, x, G_V) >= 0, "tiny GPT: %s", hr_last_error());
    e2e_check_model(tied ? "model tiny GPT, lm_head tied to the Embedding (one weight, both gradients)"
                         : "model tiny GPT (Embedding, positions, LayerNorm, attention, CE at every position)",
                    m, G_B, G_T, G_T, G_V, G_V, fwd_gpt);
    hr_model_free(m);
}

/* ---- AdamW's groups: decay_matrices_only -------------------------------------- */
/* One step of AdamW (weight_decay 0.5) on Linear(3, 2): with decay for
 * matrices only, the weight moves as with decay everywhere and the bias as
 * with no decay at all. */
static void adamw_step(bool matrices_only, float wd, float *w, float *b) {
    hr_model_t *m = hr_model_new("wd");
    int x = hr_input(m, "x", 1, (int64_t[]){3});
    x = hr_linear(m, NULL, x, 3, 2, true);
    hr_loss_mse(m, x);
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2, cfg.optim.kind = HR_OPTIM_ADAMW, cfg.optim.lr = 0.1f, cfg.optim.weight_decay = wd, cfg.seed = 3;
    cfg.optim.decay_matrices_only = matrices_only;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s && hr_session_alloc(s) == HR_OK, "AdamW session: %s", hr_last_error());
    const float xs[6] = {1, -2, 0.5f, 0.25f, 1, -1}, ts[4] = {0.5f, -1, 2, 0};
    CHECK(s && hr_train_step(s, xs, ts, NULL) == HR_OK, "AdamW step: %s", hr_last_error());
    if (s) {
        hr_state_read(s, hr_state_find(s, "0.weight"), w);
        hr_state_read(s, hr_state_find(s, "0.bias"), b);
    }
    hr_session_free(s);
    hr_model_free(m);
}

static void test_decay_groups(void) {
    float wa[6], ba[2], wb[6], bb[2], wc[6], bc[2];
    adamw_step(true, 0.5f, wa, ba);
    adamw_step(false, 0.5f, wb, bb);
    adamw_step(false, 0.0f, wc, bc);
    CHECK(!memcmp(wa, wb, sizeof wa), "decay_matrices_only: the weight (2 dims) is decayed");
    CHECK(!memcmp(ba, bc, sizeof ba) && memcmp(ba, bb, sizeof ba), "decay_matrices_only: the bias (1 dim) is not");
}

/* ---- GPT-2's initial values ------------------------------------------------ */
static double state_std(hr_session_t *s, const char *name, double *mean) {
    int i = hr_state_find(s, name);
    int64_t n = 1;
    for (int d = 0; i >= 0 && d < hr_state_ndim(s, i); d++) n *= hr_state_dim(s, i, d);
    float *v = malloc(sizeof(float) * (size_t)n);
    CHECK(i >= 0 && hr_state_read(s, i, v) == HR_OK, "read %s", name);
    double m = 0, q = 0;
    for (int64_t k = 0; k < n; k++) m += v[k] / (double)n;
    for (int64_t k = 0; k < n; k++) q += (v[k] - m) * (v[k] - m) / (double)n;
    free(v);
    *mean = m;
    return sqrt(q);
}

static void test_gpt2_init(void) {
    for (int gpt2 = 0; gpt2 < 2; gpt2++) {
        hr_model_t *m = hr_model_new("init");
        int x = hr_input(m, "tokens", 1, (int64_t[]){8});
        x = hr_embedding(m, "wte", x, 256, 64);
        x = hr_linear(m, "attn.c_attn", x, 64, 192, true);
        x = hr_causal_attention(m, NULL, x, 2);
        x = hr_linear(m, "attn.c_proj", x, 64, 64, true);
        x = hr_linear(m, "head", x, 64, 256, true);
        hr_loss_cross_entropy(m, x, 256);
        CHECK(hr_model_set_init(m, gpt2 ? "gpt2" : "pytorch") == HR_OK, "set_init");
        CHECK(hr_model_set_init(m, "xavier") == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "'xavier'"),
              "an unknown scheme is refused");
        hr_config_t cfg = hr_config_default();
        cfg.batch = 1;
        hr_session_t *s = hr_compile(m, &cfg);
        CHECK(s && hr_session_alloc(s) == HR_OK, "init session: %s", hr_last_error());
        if (s) {
            double mw, mb, mp, me;
            double sw = state_std(s, "attn.c_attn.weight", &mw), sb = state_std(s, "attn.c_attn.bias", &mb);
            double sp = state_std(s, "attn.c_proj.weight", &mp), se = state_std(s, "wte.weight", &me);
            if (gpt2)
                CHECK(fabs(sw / 0.02 - 1) < 0.05 && sb == 0 && mb == 0 && fabs(sp / (0.02 / sqrt(2.0)) - 1) < 0.08 &&
                          fabs(se / 0.02 - 1) < 0.05 && fabs(mw) < 0.002,
                      "gpt2: std %.4f (0.02), bias %.3g/%.3g (0), c_proj %.4f (0.0141), wte %.4f (0.02)", sw, sb, mb, sp, se);
            else /* nn.Linear's U(+-1/8): std 1/8/sqrt(3); nn.Embedding's N(0, 1) */
                CHECK(fabs(sw / (0.125 / sqrt(3.0)) - 1) < 0.05 && sb > 0.05 && fabs(se - 1) < 0.05,
                      "pytorch: std %.4f (0.0722), bias std %.4f, wte %.4f (1)", sw, sb, se);
        }
        hr_session_free(s);
        hr_model_free(m);
    }
}

/* ---- the learning-rate schedule (nanoGPT's get_lr) --------------------------- */
static void test_lr_schedule(void) {
    hr_optim_t o = {.lr = 1.0f, .warmup_steps = 3, .decay_steps = 10, .min_lr = 0.1f};
    const double pi = 3.14159265358979323846;
    /* step t is nanoGPT's iteration t - 1 */
    double want[] = {0.25, 0.5, 0.75, 1.0, 0.1 + 0.45 * (1 + cos(pi * 1 / 7)), 0.1 + 0.45 * (1 + cos(pi * 3 / 7)),
                     0.1 + 0.45 * (1 + cos(pi * 6 / 7)), 0.1, 0.1};
    int64_t at[] = {1, 2, 3, 4, 5, 7, 10, 11, 50};
    for (int k = 0; k < 9; k++)
        CHECK(fabs(hr_lr_at(&o, at[k]) - want[k]) < 1e-6, "lr at step %lld: %.7f, want %.7f", (long long)at[k],
              (double)hr_lr_at(&o, at[k]), want[k]);
    hr_optim_t none = {.lr = 0.3f};
    CHECK(hr_lr_at(&none, 1) == 0.3f && hr_lr_at(&none, 1000) == 0.3f, "no schedule: lr at every step");
    /* the steps take it: SGD's update is lr_t times the gradient */
    hr_model_t *m = hr_model_new("lr");
    int x = hr_input(m, "x", 1, (int64_t[]){2});
    x = hr_linear(m, NULL, x, 2, 1, false);
    hr_loss_mse(m, x);
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2, cfg.optim.kind = HR_OPTIM_SGD, cfg.optim.lr = 0.5f, cfg.keep_grads = true;
    cfg.optim.warmup_steps = 2, cfg.optim.decay_steps = 4, cfg.optim.min_lr = 0.05f;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s && hr_session_alloc(s) == HR_OK, "schedule session: %s", hr_last_error());
    const float xs[4] = {1, 2, -1, 0.5f}, ts[2] = {3, -1};
    for (int64_t t = 1; s && t <= 6; t++) {
        float w0[2], w1[2], g[2];
        hr_state_read(s, hr_state_find(s, "0.weight"), w0);
        CHECK(hr_train_step(s, xs, ts, NULL) == HR_OK, "step: %s", hr_last_error());
        hr_state_read(s, hr_state_find(s, "0.weight"), w1);
        hr_grad_read(s, "0.weight", g);
        double lr = hr_lr_at(&cfg.optim, t);
        CHECK(fabs(w1[0] - (w0[0] - lr * g[0])) < 1e-6 && fabs(w1[1] - (w0[1] - lr * g[1])) < 1e-6,
              "step %lld moved the weight by lr %.4f x its gradient", (long long)t, lr);
    }
    cfg.optim.decay_steps = 2; /* not past the warmup */
    hr_session_t *bad = hr_compile(m, &cfg);
    CHECK(!bad && strstr(hr_last_error(), "learning-rate schedule out of range"), "a decay inside the warmup is refused");
    hr_session_free(bad);
    hr_session_free(s);
    hr_model_free(m);
}

/* ---- LinearCrossEntropy: a head and its loss in one node ----------------------
 * logits = x W^T (N rows, V classes), the mean cross-entropy and, from the
 * same pass, dx and dW: the loss against the float64 reference, the
 * gradients against central differences, with the loss's gradient scaled
 * (an fp16 scale over accumulation) and without dx (x the model's input). */
typedef struct {
    double *x, *w;
    int *lab;
    int N, in, V;
} lce_ctx;

static double lce_loss(void *p) {
    lce_ctx *c = p;
    double *lg = dalloc((int64_t)c->N * c->V);
    ref_linear(c->x, c->w, NULL, c->N, c->in, c->V, lg);
    double L = ref_ce(lg, c->lab, c->N, c->V);
    free(lg);
    return L;
}

static void test_linear_ce(int N, int in, int V) {
    const char *op = "LinearCrossEntropy";
    lce_ctx c = {dalloc((int64_t)N * in), dalloc((int64_t)V * in), calloc((size_t)N, sizeof(int)), N, in, V};
    fill(c.x, (int64_t)N * in, -2, 2), fill(c.w, (int64_t)V * in, -1, 1);
    for (int i = 0; i < N; i++) c.lab[i] = (i * 5 + 2) % V;
    kt k;
    kt_init(&k);
    int tx = KT(&k, N, in), tw = KT(&k, V, in), tl = kt_tensor(&k, HR_I32, 1, (int64_t[]){N});
    int tloss = KT(&k, 1), tdx = KT(&k, N, in), tdw = KT(&k, V, in);
    kt_set(&k, tx, c.x), kt_set(&k, tw, c.w);
    for (int i = 0; i < N; i++) ((int32_t *)k.ptr[tl])[i] = c.lab[i];
    double L = lce_loss(&c), *gx = dalloc((int64_t)N * in), *gw = dalloc((int64_t)V * in);
    fd_grad(lce_loss, &c, c.x, (int64_t)N * in, gx);
    fd_grad(lce_loss, &c, c.w, (int64_t)V * in, gw);
    hr_node f = hr_node_make(HR_OP_LINEAR_CE, -1);
    f.a.in_f = in, f.a.out_f = V, f.a.nclasses = V;
    f.in[0] = tx, f.in[1] = tw, f.in[2] = tl, f.nin = 3, f.out[0] = tloss, f.out[1] = tdw, f.out[2] = tdx, f.nout = 3;
    for (int i = 0; i < N * in; i++) kf(&k, tdx)[i] = NAN; /* written, not added to */
    for (int i = 0; i < V * in; i++) kf(&k, tdw)[i] = NAN;
    kt_run(&k, &f);
    compare(op, "forward (mean loss)", kf(&k, tloss), &L, 1, 1e-5);
    compare(op, "dx from the forward pass", kf(&k, tdx), gx, (int64_t)N * in, 1e-5);
    compare(op, "dW from the forward pass", kf(&k, tdw), gw, (int64_t)V * in, 1e-5);
    /* the loss's gradient scaled by 1024 / 4 (fp16's scale, 4 micro-batches) */
    hr_step_info si = kt_si();
    si.loss_scale = 256.0f;
    kt_run_si(&k, &f, &si);
    for (int i = 0; i < N * in; i++) gx[i] *= 256.0;
    for (int i = 0; i < V * in; i++) gw[i] *= 256.0;
    compare(op, "forward (mean loss, scaled gradient)", kf(&k, tloss), &L, 1, 1e-5);
    compare(op, "dx, scaled", kf(&k, tdx), gx, (int64_t)N * in, 1e-5);
    compare(op, "dW, scaled", kf(&k, tdw), gw, (int64_t)V * in, 1e-5);
    /* no dx: dW alone */
    f.nout = 2, f.out[2] = -1;
    for (int i = 0; i < V * in; i++) kf(&k, tdw)[i] = NAN;
    kt_run(&k, &f);
    for (int i = 0; i < V * in; i++) gw[i] /= 256.0;
    compare(op, "dW without dx", kf(&k, tdw), gw, (int64_t)V * in, 1e-5);
    kt_free(&k);
    free(c.x), free(c.w), free(c.lab), free(gx), free(gw);
}

/* The attention-drop draws as a generator (core.h, docs/golden.md): over a
 * million pairs of two heads, the kept fraction is 1 - p within 5 standard
 * errors, and a decision says nothing of its neighbours' (the next key, the
 * next query, the other head; the pairs either side of a 65536 block edge):
 * each correlation within 5 / sqrt(n). A weak mix (the pair's index itself,
 * say) fails every line. */
static double corr(const uint8_t *a, const uint8_t *b, int64_t n) {
    double sa = 0, sb = 0, sab = 0;
    for (int64_t i = 0; i < n; i++) sa += a[i], sb += b[i], sab += a[i] * b[i];
    double ma = sa / n, mb = sb / n, va = ma * (1 - ma), vb = mb * (1 - mb);
    return (sab / n - ma * mb) / sqrt(va * vb);
}

static void test_attn_draws(void) {
    const int64_t R = 1024, n = R * R; /* queries x keys, two heads */
    const float p = 0.2f;
    uint8_t *k[5];
    for (int c = 0; c < 5; c++) k[c] = malloc((size_t)n);
    uint32_t b0 = hr_attn_block_key(7, 3, 0, 0, 2, 0, 0), b1 = hr_attn_block_key(7, 3, 0, 1, 2, 0, 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < R; j++) {
            int64_t x = i * R + j;
            k[0][x] = hr_attn_uniform(b0, (uint64_t)i, (uint64_t)j) >= p;           /* (i, j), head 0 */
            k[1][x] = hr_attn_uniform(b0, (uint64_t)i, (uint64_t)j + 1) >= p;       /* the next key */
            k[2][x] = hr_attn_uniform(b0, (uint64_t)i + 1, (uint64_t)j) >= p;       /* the next query */
            k[3][x] = hr_attn_uniform(b1, (uint64_t)i, (uint64_t)j) >= p;           /* head 1 */
            uint64_t e = 65536 - R / 2 + (uint64_t)j; /* keys across a block edge */
            k[4][x] = hr_attn_uniform(hr_attn_block_key(7, 3, 0, 0, 2, (uint64_t)i, e), (uint64_t)i, e) >= p;
            kept += k[0][x];
        }
    double frac = (double)kept / (double)n, se = sqrt(p * (1 - p) / (double)n), bound = 5 / sqrt((double)n);
    printf("  attention drop draws: kept %.5f of %lld (want %.5f +- %.5f); correlations", frac, (long long)n,
           1 - (double)p, 5 * se);
    CHECK(fabs(frac - (1 - p)) < 5 * se, "attention drop draws: kept fraction %.5f, want %.5f", frac, 1 - (double)p);
    static const char *what[4] = {"with the next key", "with the next query", "with the other head",
                                  "across a block edge"};
    for (int c = 1; c < 5; c++) {
        /* the block edge: each decision against its neighbour key (x+1) */
        double r = c < 4 ? corr(k[0], k[c], n) : corr(k[4], k[4] + 1, n - 1);
        printf(" %.4f", r);
        CHECK(fabs(r) < bound, "attention drop draws: correlation %s %.4f (bound %.4f)", what[c - 1], r, bound);
    }
    printf(" (bound %.4f)\n", bound);
    for (int c = 0; c < 5; c++) free(k[c]);
}

void test_sequence(void) {
    test_attn_draws();
    test_linear_ce(7, 5, 11);
    test_linear_ce(3, 4, 2); /* two classes */
    test_lr_schedule();
    test_gpt2_init();
    test_decay_groups();
    test_gpt_e2e(false);
    test_gpt_e2e(true);
    test_embedding(false);
    test_embedding(true);
    test_attention(1, 1, 4, 1, 0);   /* one position: the softmax of one score */
    test_attention(2, 5, 8, 2, 0);   /* heads of 4 */
    test_attention(1, 9, 12, 3, 0);  /* a longer sequence */
    test_attention(2, 3, 70, 2, 0);  /* heads of 35: a lane holds two channels on the GPU */
    test_attention(2, 7, 8, 2, 0.3); /* attention dropout */
    test_attention(3, 9, 12, 3, 0.5);
    test_attention(1, 70, 8, 2, 0.3); /* the CPU's blocks of 64 queries: two, the second short */
    test_attention(1, 130, 4, 1, 0);  /* three blocks */
    test_attention_half(HR_BF16);
    test_attention_half(HR_F16);
}

OPS_TALLY(ops_tally_sequence)
