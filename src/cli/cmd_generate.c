/* cmd_generate.c — `headroom generate`: text sampled from a trained
 * next-token model, a token at a time, so that a person sees what it learned.
 * The model reads a window of T tokens; the context sits at its first
 * positions (causal attention: what follows it cannot change its logits, as
 * nanoGPT's shorter windows), or its last T tokens once it is longer. On
 * the CPU the window grows with the context, 32 positions, 64, ... up to T
 * (the model compiled again at that context; HR_GENERATE_GROW=0: always T),
 * so that a short context does not pay for T positions (the same text: the
 * positions after the context change nothing). On a GPU a whole window costs
 * little, and the window stays T. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "data/data.h"
#include "io/io.h"

typedef struct {
    const char *model, *weights, *prompt;
    int64_t tokens, top_k;
    double temperature;
    uint64_t seed;
    hr_device device;
} gen_opts;

static void gen_usage(FILE *f) {
    fprintf(f, "usage: headroom generate MODEL --weights CKPT [--prompt TEXT] [--tokens N] [--temperature T]\n"
               "                         [--top-k K] [--seed S] [--device auto|cpu|cuda]\n"
               "  samples N tokens (default 200) from a model trained on bytes (--data fortunes or text:FILE),\n"
               "  each from the softmax of its logits / T (default 0.8) over the K likeliest (default 200),\n"
               "  after the prompt (default a newline); the same seed gives the same text\n");
}

static int bad(const char *opt, const char *v, const char *what) {
    fprintf(stderr, "headroom generate: %s '%s' is not %s\n", opt, v ? v : "", what);
    return HR_EXIT_USAGE;
}

static int parse(int argc, char **argv, gen_opts *g) {
    memset(g, 0, sizeof *g);
    g->prompt = "\n", g->tokens = 200, g->top_k = 200, g->temperature = 0.8, g->device = HR_DEVICE_AUTO;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            gen_usage(stdout);
            return -1;
        }
        if (a[0] != '-') {
            if (g->model) return bad("the model", a, "the only model (one model file, given once)");
            g->model = a;
            continue;
        }
        bool known = !strcmp(a, "--weights") || !strcmp(a, "--prompt") || !strcmp(a, "--tokens") ||
                     !strcmp(a, "--temperature") || !strcmp(a, "--top-k") || !strcmp(a, "--seed") ||
                     !strcmp(a, "--device");
        if (!known) {
            fprintf(stderr, "headroom generate: unknown option '%s' (see headroom generate --help)\n", a);
            return HR_EXIT_USAGE;
        }
        if (!v) {
            fprintf(stderr, "headroom generate: option %s needs a value\n", a);
            return HR_EXIT_USAGE;
        }
        i++;
        if (!strcmp(a, "--weights")) {
            g->weights = v;
        } else if (!strcmp(a, "--prompt")) {
            g->prompt = v;
        } else if (!strcmp(a, "--tokens") || !strcmp(a, "--top-k") || !strcmp(a, "--seed")) {
            long long n = strtoll(v, &end, 10);
            if (end == v || *end || n < (strcmp(a, "--seed") ? 1 : 0) || n > 100000000)
                return bad(a, v, strcmp(a, "--seed") ? "a count in 1..100000000" : "a seed in 0..100000000");
            if (!strcmp(a, "--tokens")) g->tokens = n;
            else if (!strcmp(a, "--top-k")) g->top_k = n;
            else g->seed = (uint64_t)n;
        } else if (!strcmp(a, "--temperature")) {
            g->temperature = strtod(v, &end);
            if (end == v || *end || !isfinite(g->temperature) || !(g->temperature > 0) || g->temperature > 100)
                return bad(a, v, "a temperature in (0, 100]");
        } else if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda")) {
            g->device = !strcmp(v, "cpu") ? HR_DEVICE_CPU : !strcmp(v, "cuda") ? HR_DEVICE_CUDA : HR_DEVICE_AUTO;
        } else {
            return bad(a, v, "auto, cpu or cuda");
        }
    }
    if (!g->model) {
        fprintf(stderr, "headroom generate: which model? give a model file, e.g. examples/char_gpt.model\n");
        return HR_EXIT_USAGE;
    }
    if (!g->weights) {
        fprintf(stderr, "headroom generate: which weights? add --weights CKPT (a checkpoint written by train --save)\n");
        return HR_EXIT_USAGE;
    }
    if (!*g->prompt) {
        fprintf(stderr, "headroom generate: --prompt is empty; give at least one character (the default is a newline)\n");
        return HR_EXIT_USAGE;
    }
    return HR_EXIT_OK;
}

/* The window for a context of len tokens: the smallest of 32, 64, ... that
 * holds it, at most T; T without growing. */
static int64_t window_for(int64_t len, int64_t T, bool grow) {
    int64_t w = 32;
    while (grow && w < len && w < T) w *= 2;
    return grow && w < T ? w : T;
}

/* An inference session of batch 1 at window W (the model as loaded when W
 * is its T) with the checkpoint's weights; NULL with the error set. */
static hr_session_t *open_window(const gen_opts *g, const hr_model_t *m, int64_t W, int64_t T, hr_model_t **own) {
    *own = NULL;
    const hr_model_t *mw = m;
    if (W != T && !(mw = *own = hr_modelfile_load_context(g->model, W))) return NULL;
    hr_config_t cfg = hr_config_default();
    cfg.mode = HR_MODE_INFER;
    cfg.batch = 1;
    cfg.device = g->device;
    hr_session_t *s = hr_compile(mw, &cfg);
    hr_status st = s ? hr_session_alloc(s) : hr_last_status();
    hr_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", g->model);
    if (!st) st = hr_checkpoint_load(s, g->weights, &meta);
    if (st) {
        hr_session_free(s);
        hr_model_free(*own);
        *own = NULL;
        return NULL;
    }
    return s;
}

/* The next token from the last position's logits: softmax(logits / T) over
 * the top_k likeliest, drawn with r. */
static int sample(const float *logits, int64_t V, double temperature, int64_t top_k, hr_rng *r, double *p) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    /* the k-th largest logit is the cut: values below it get no probability */
    double cut = -INFINITY;
    if (top_k < V) {
        for (int64_t v = 0; v < V; v++) p[v] = logits[v];
        for (int64_t k = 0; k < top_k; k++) { /* top_k passes of selection: V and k are small here */
            int64_t best = -1;
            for (int64_t v = 0; v < V; v++)
                if (p[v] != -INFINITY && (best < 0 || p[v] > p[best])) best = v;
            cut = p[best];
            p[best] = -INFINITY;
        }
    }
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += p[v] = logits[v] >= cut ? exp(((double)logits[v] - mx) / temperature) : 0;
    double u = (double)(hr_rng_next(r) >> 11) * 0x1.0p-53 * sum;
    for (int64_t v = 0; v < V; v++) {
        if (u < p[v]) return (int)v;
        u -= p[v];
    }
    for (int64_t v = V - 1; v >= 0; v--)
        if (p[v] > 0) return (int)v;
    return 0;
}

int hr_cmd_generate(int argc, char **argv) {
    gen_opts g;
    int rc = parse(argc, argv, &g);
    if (rc) return rc < 0 ? HR_EXIT_OK : rc;
    hr_model_t *m = hr_modelfile_load(g.model);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    hr_session_t *s = NULL;
    hr_model_t *mw = NULL; /* the model at the current window, when not m itself */
    float *x = NULL, *out = NULL;
    double *p = NULL;
    int *ctx = NULL;
    int in = hr_model_input(m), outp = hr_model_output(m);
    int64_t T = hr_tensor_ndim(m, in) == 1 ? hr_tensor_dim(m, in, 0) : 0;
    int64_t V = hr_tensor_ndim(m, outp) == 2 ? hr_tensor_dim(m, outp, 1) : 0;
    if (!T || !V || hr_tensor_dim(m, outp, 0) != T) {
        fprintf(stderr, "headroom generate: %s does not predict the next token at each of its input's positions (its "
                        "output should be (time, vocabulary)); generate is for models such as examples/char_gpt.model\n",
                g.model);
        rc = HR_EXIT_ERROR;
        goto done;
    }
    if (V != 256) {
        fprintf(stderr, "headroom generate: %s has a vocabulary of %lld; generate reads and writes bytes, so it takes "
                        "models of 256 tokens (trained on --data fortunes or text:FILE)\n", g.model, (long long)V);
        rc = HR_EXIT_ERROR;
        goto done;
    }
    if (g.device == HR_DEVICE_AUTO) g.device = hr_backend_cuda_available() ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    const char *grow_env = getenv("HR_GENERATE_GROW");
    bool grow = g.device == HR_DEVICE_CPU && !(grow_env && !strcmp(grow_env, "0"));
    hr_status st;
    int64_t plen = (int64_t)strlen(g.prompt), cap = plen + g.tokens, W = 0;
    x = calloc((size_t)T, sizeof *x);
    out = malloc(sizeof *out * (size_t)(T * V));
    p = malloc(sizeof *p * (size_t)V);
    ctx = malloc(sizeof *ctx * (size_t)cap);
    if (!x || !out || !p || !ctx) {
        rc = hr_cli_fail(hr_error_set(HR_ERR_OOM, "out of host memory for a window of %lld tokens", (long long)T));
        goto done;
    }
    for (int64_t i = 0; i < plen; i++) ctx[i] = (unsigned char)g.prompt[i];
    hr_rng r = hr_rng_seed(g.seed);
    /* the first window (and the weights) before anything is printed: a
     * checkpoint that does not load leaves stdout empty */
    W = window_for(plen < T ? plen : T, T, grow);
    if (!(s = open_window(&g, m, W, T, &mw))) {
        rc = hr_cli_fail(hr_last_status());
        goto done;
    }
    fputs(g.prompt, stdout);
    for (int64_t n = plen; n < cap; n++) {
        int64_t first = n > T ? n - T : 0, len = n - first;
        if (window_for(len, T, grow) != W) { /* a longer context: the next window */
            hr_session_free(s);
            hr_model_free(mw);
            W = window_for(len, T, grow);
            if (!(s = open_window(&g, m, W, T, &mw))) {
                rc = hr_cli_fail(hr_last_status());
                goto done;
            }
        }
        for (int64_t t = 0; t < W; t++) x[t] = t < len ? (float)ctx[first + t] : 0;
        if ((st = hr_forward(s, x, out)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        const float *row = out + (len - 1) * V;
        for (int64_t v = 0; v < V; v++)
            if (!isfinite(row[v])) { /* a sample from NaN would be a silent guess */
                fprintf(stderr, "\nheadroom generate: the model's logits for token %lld hold %s (at id %lld); the "
                                "weights in %s give non-finite values\n", (long long)(n - plen + 1),
                        isnan(row[v]) ? "NaN" : "an infinity", (long long)v, g.weights);
                rc = HR_EXIT_NUMERIC;
                goto done;
            }
        ctx[n] = sample(row, V, g.temperature, g.top_k, &r, p);
        putchar(ctx[n]);
        fflush(stdout);
    }
    putchar('\n');
done:
    free(x), free(out), free(p), free(ctx);
    hr_session_free(s);
    hr_model_free(mw);
    hr_model_free(m);
    return rc;
}
