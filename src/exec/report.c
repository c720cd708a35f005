/* report.c — the plan for people (a category table) and for programs (JSON),
 * byte formatting, and the planner's search for the largest batch that fits. */
#include "exec/session.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *hr_category_name(hr_category c) {
    static const char *n[HR_CAT_COUNT] = {"parameters", "gradients", "optimizer state", "saved activations",
                                          "transients", "workspace", "inputs",
                                          "weight copies"};
    return (unsigned)c < HR_CAT_COUNT ? n[c] : "?";
}

const char *hr_format_bytes(size_t n, char *buf, size_t len) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    int k = 0;
    while (v >= 1024 && k < 6) v /= 1024, k++;
    if (k == 0)
        snprintf(buf, len, "%zu B", n);
    else
        snprintf(buf, len, "%.2f %s", v, u[k]);
    return buf;
}

bool hr_parse_bytes(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return false;
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1e6}, {"MB", 1e6},
        {"MiB", 1048576.0}, {"G", 1e9}, {"GB", 1e9}, {"GiB", 1073741824.0}, {"T", 1e12}, {"TB", 1e12},
        {"TiB", 1099511627776.0}};
    bool found = false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].u) == 0) { /* "8GiB" binary, "8GB" decimal, any case */
            mul = units[i].m;
            found = true;
            break;
        }
    if (!found || v * mul > 1.8e19) return false;
    *out = (size_t)(v * mul);
    return true;
}

/* ---- attention's bytes, layer by layer ------------------------------------------
 * What each causal attention node of the forward pass keeps: its output and
 * a log-sum-exp a query and head (the backward recomputes the probabilities
 * from them), against the probabilities' own bytes, N x heads x T x T, which
 * an attention that kept them (PyTorch's math path) would hold. */
typedef struct {
    const char *layer;
    size_t out, lse, probs;
} attn_bytes;

static size_t tensor_bytes(const hr_graph *g, int t) {
    return t < 0 ? 0 : (size_t)hr_shape_numel(&g->t[t].shape) * hr_dtype_size(g->t[t].dtype);
}

/* The first attention node of the forward pass at or after node i, into *a:
 * its index, or -1 past the last. */
static int next_attention(const hr_session_t *s, int i, attn_bytes *a) {
    const hr_graph *g = &s->prog.g;
    for (; i < s->prog.n_fwd; i++) {
        const hr_node *n = &g->n[i];
        if (n->op != HR_OP_ATTENTION) continue;
        const hr_shape *y = &g->t[n->out[0]].shape; /* (N, T, C) */
        size_t N = (size_t)y->d[0], T = (size_t)y->d[1], H = (size_t)n->a.out_f;
        *a = (attn_bytes){g->l[n->layer].name, tensor_bytes(g, n->out[0]), n->nout > 1 ? tensor_bytes(g, n->out[1]) : 0,
                          N * H * T * T * hr_dtype_size(g->t[n->out[0]].dtype)};
        return i;
    }
    return -1;
}

static void print_attention(const hr_session_t *s, FILE *f) {
    attn_bytes a0, a;
    int first = next_attention(s, 0, &a0), n = 0;
    if (first < 0) return;
    bool same = true;
    for (int i = first; (i = next_attention(s, i, &a)) >= 0; i++, n++)
        same &= a.out == a0.out && a.lse == a0.lse && a.probs == a0.probs;
    char b1[32], b2[32], b3[32];
    fprintf(f, "  attention: %d layer%s, none keeps its time x time probabilities%s\n", n, n == 1 ? "" : "s",
            s->prog.cfg.mode == HR_MODE_TRAIN ? " (the backward computes them again)" : "");
    for (int i = first; (i = next_attention(s, i, &a)) >= 0; i++) {
        fprintf(f, "    %-30s output %s + log-sum-exp %s%s; the probabilities would be %s\n",
                same && n > 1 ? "each" : a.layer, hr_format_bytes(a.out, b1, sizeof b1),
                hr_format_bytes(a.lse, b2, sizeof b2), a.lse ? "" : " (inference: none)",
                hr_format_bytes(a.probs, b3, sizeof b3));
        if (same) break;
    }
}

void hr_report_print(const hr_session_t *s, FILE *f) {
    const hr_report_t *r = &s->plan.report;
    const hr_config_t *c = &s->prog.cfg;
    char a[32], b[32], micro[96] = "";
    int K = c->accumulate > 1 ? c->accumulate : 1;
    if (K > 1) snprintf(micro, sizeof micro, " (%d micro-batches of %lld)", K, (long long)(c->batch / K));
    fprintf(f, "plan: %s, batch %lld%s, %s, %s, %s on %s — %d tensors, %d steps\n", s->model_name, (long long)c->batch,
            micro, c->mode == HR_MODE_TRAIN ? "train" : "inference",
            c->mode == HR_MODE_TRAIN ? (c->optim.kind == HR_OPTIM_SGD ? "SGD" : c->optim.kind == HR_OPTIM_ADAM ? "Adam" : "AdamW")
                                     : "no optimizer",
            hr_precision_name(c->precision), s->be->name, r->n_tensors, r->n_steps);
    fprintf(f, "  %-18s %12s %14s\n", "category", "total", "live at peak");
    for (int k = 0; k < HR_CAT_COUNT; k++) {
        if (k == HR_CAT_WCOPY && c->precision == HR_PREC_FP32) continue;
        fprintf(f, "  %-18s %12s %14s", hr_category_name((hr_category)k), hr_format_bytes(r->category_bytes[k], a, sizeof a),
                hr_format_bytes(r->category_at_peak[k], b, sizeof b));
        if (k == HR_CAT_GRADS && K > 1) fprintf(f, "   (summed over the %d micro-batches: held the whole step)", K);
        if (k == HR_CAT_WCOPY) {
            bool held = false; /* written by their updates (plan/autocast.c: hr_autocast_hold) */
            for (int i = 0; i < s->prog.g.nt && !held; i++) held = s->prog.g.t[i].held;
            fprintf(f, "   (%s copies of the weights, %s)", hr_precision_name(c->precision),
                    held ? "held from step to step: each update writes its copy" : "kept from forward to backward");
        }
        if (k == HR_CAT_INPUTS && s->prog.staged >= 0) fprintf(f, "   (with the next batch, uploaded while a step runs)");
        fputc('\n', f);
    }
    fprintf(f, "  %-18s %12s   (lower bound %s, %.3fx)\n", "arena (peak)", hr_format_bytes(r->arena_bytes, a, sizeof a),
            hr_format_bytes(r->lower_bound, b, sizeof b), r->lower_bound ? (double)r->arena_bytes / (double)r->lower_bound : 1.0);
    if (r->pinned_bytes) fprintf(f, "  %-18s %12s   (pinned host memory: two batch slots for the copies, the losses of queued steps)\n", "pinned staging",
                                 hr_format_bytes(r->pinned_bytes, a, sizeof a));
    if (r->eval_batch > 0) {
        size_t grow = r->arena_bytes > r->step_arena_bytes ? r->arena_bytes - r->step_arena_bytes : 0;
        if (grow)
            fprintf(f, "  %-18s %12s   (evaluation pass, batch %lld, beyond the step's %s)\n", "evaluation",
                    hr_format_bytes(grow, a, sizeof a), (long long)r->eval_batch,
                    hr_format_bytes(r->step_arena_bytes, b, sizeof b));
        else
            fprintf(f, "  %-18s %12s   (evaluation pass, batch %lld: in the step's dead bytes)\n", "evaluation", "0 B",
                    (long long)r->eval_batch);
    }
    if (s->overhead) fprintf(f, "  %-18s %12s   (measured: context, library handles)\n", "runtime overhead",
                             hr_format_bytes(s->overhead, a, sizeof a));
    if (s->be->arena_kind == HR_MEM_DEVICE)
        fprintf(f, "  %-18s %12s   (arena in 2 MiB pages + overhead: what nvidia-smi shows for this process)\n",
                "device total", hr_format_bytes(r->device_total, a, sizeof a));
    char note[400] = "";
    if (s->be->plan_note) s->be->plan_note(s->be, note, sizeof note);
    if (note[0]) fprintf(f, "  note: %s\n", note);
    if (K > 1)
        for (int k = 0; k < s->prog.n_fwd; k++)
            if (hr_op_descs[s->prog.g.n[k].op]->batch_stats) {
                const hr_graph *g = &s->prog.g;
                fprintf(f, "  note: %s (layer %s) normalises each micro-batch of %lld samples (as PyTorch does with "
                           "accumulation), so its statistics differ from batch %lld's\n",
                        g->l[g->n[k].layer].type, g->l[g->n[k].layer].name, (long long)(c->batch / K),
                        (long long)c->batch);
                break;
            }
    if (c->chunks > 1 && !r->chunks && c->mode == HR_MODE_TRAIN)
        fprintf(f, "  note: --chunks %d made no slices: the model's first layer mixes samples (batch statistics, a "
                   "random mask, the loss) or the batch (%lld) is too small to cut on 16-byte bounds\n",
                c->chunks, (long long)hr_micro_batch(c));
    if (r->chunks) {
        size_t saved = r->arena_no_recompute > r->arena_bytes ? r->arena_no_recompute - r->arena_bytes : 0;
        int64_t last = hr_micro_batch(c) - r->chunk_samples * (r->chunks - 1);
        char tail[64] = "";
        if (last != r->chunk_samples) snprintf(tail, sizeof tail, " (the last %lld)", (long long)last);
        char lay[32] = "layer";
        if (r->chunk_layers != 1) snprintf(lay, sizeof lay, "%d layers", r->chunk_layers);
        fprintf(f, "  slices: the first %s run%s on %d slices of %lld samples%s, one at a time, each recomputed for "
                   "its backward pass\n    recomputed layers: %s (%d forward nodes run again); the arena is %s "
                   "smaller (%s without slices or recomputation); predicted extra time %.3f ms a step\n",
                lay, r->chunk_layers == 1 ? "s" : "", r->chunks, (long long)r->chunk_samples, tail,
                r->recompute ? r->recompute : "none (the slices' backward passes read nothing they made)",
                r->recompute_nodes, hr_format_bytes(saved, a, sizeof a),
                hr_format_bytes(r->arena_no_recompute, b, sizeof b), r->recompute_extra_ms);
    } else if (r->recompute) {
        size_t saved = r->arena_no_recompute > r->arena_bytes ? r->arena_no_recompute - r->arena_bytes : 0;
        fprintf(f, "  recomputed layers: %s\n    %d forward nodes run again in the backward pass; the arena is %s "
                   "smaller (%s keeping everything); predicted extra time %.3f ms a step\n",
                r->recompute, r->recompute_nodes, hr_format_bytes(saved, a, sizeof a),
                hr_format_bytes(r->arena_no_recompute, b, sizeof b), r->recompute_extra_ms);
    }
    print_attention(s, f);
    fprintf(f, "  peak at step %d of %d: %s\n", r->peak_step, r->n_steps, r->peak_op);
    for (int i = 0; i < r->n_top; i++)
        fprintf(f, "    %-32s %-24s %12s\n", r->top[i].name, r->top[i].layer, hr_format_bytes(r->top[i].bytes, a, sizeof a));
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

void hr_report_json(const hr_session_t *s, FILE *f) {
    const hr_report_t *r = &s->plan.report;
    fprintf(f, "{\"model\": ");
    json_str(f, s->model_name);
    const hr_config_t *c = &s->prog.cfg;
    fprintf(f, ", \"batch\": %lld, \"micro_batch\": %lld, \"accumulate\": %d, \"precision\": \"%s\", \"mode\": \"%s\", "
               "\"device\": \"%s\", \"categories\": {",
            (long long)c->batch, (long long)hr_micro_batch(c), c->accumulate > 1 ? c->accumulate : 1,
            hr_precision_name(c->precision), c->mode == HR_MODE_TRAIN ? "train" : "infer", s->be->name);
    for (int k = 0; k < HR_CAT_COUNT; k++)
        fprintf(f, "%s\"%s\": %zu", k ? ", " : "", hr_category_name((hr_category)k), r->category_bytes[k]);
    fprintf(f, "}, \"at_peak\": {");
    for (int k = 0; k < HR_CAT_COUNT; k++)
        fprintf(f, "%s\"%s\": %zu", k ? ", " : "", hr_category_name((hr_category)k), r->category_at_peak[k]);
    fprintf(f, "}, \"arena_bytes\": %zu, \"lower_bound\": %zu, \"overhead_bytes\": %zu, \"device_total\": %zu, "
               "\"pinned_bytes\": %zu, \"eval_batch\": %lld, \"step_arena_bytes\": %zu, \"peak_step\": %d, \"steps\": %d, "
               "\"peak_op\": ",
            r->arena_bytes, r->lower_bound, s->overhead, r->device_total, r->pinned_bytes, (long long)r->eval_batch,
            r->step_arena_bytes, r->peak_step, r->n_steps);
    json_str(f, r->peak_op);
    fprintf(f, ", \"recompute\": ");
    json_str(f, r->recompute ? r->recompute : "");
    fprintf(f, ", \"recompute_nodes\": %d, \"arena_no_recompute\": %zu, \"recompute_extra_ms\": %.6f",
            r->recompute_nodes, r->recompute ? r->arena_no_recompute : r->arena_bytes, r->recompute_extra_ms);
    fprintf(f, ", \"chunks\": %d, \"chunk_samples\": %lld, \"chunk_layers\": %d", r->chunks, (long long)r->chunk_samples,
            r->chunk_layers);
    fprintf(f, ", \"top\": [");
    for (int i = 0; i < r->n_top; i++) {
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        json_str(f, r->top[i].name);
        fprintf(f, ", \"layer\": ");
        json_str(f, r->top[i].layer);
        fprintf(f, ", \"bytes\": %zu}", r->top[i].bytes);
    }
    fprintf(f, "], \"attention\": [");
    attn_bytes a;
    for (int i = 0, k = 0; (i = next_attention(s, i, &a)) >= 0; i++, k++) {
        fprintf(f, "%s{\"layer\": ", k ? ", " : "");
        json_str(f, a.layer);
        fprintf(f, ", \"output\": %zu, \"lse\": %zu, \"probabilities_not_kept\": %zu}", a.out, a.lse, a.probs);
    }
    fprintf(f, "]}\n");
}

size_t hr_device_total(size_t arena_bytes, size_t overhead_bytes) {
    return hr_align_up(arena_bytes, HR_DEVICE_PAGE) + overhead_bytes;
}

/* What a plan of this backend holds, as the budget counts it. */
static size_t job_total(const hr_backend *be, size_t arena, size_t overhead) {
    return be->arena_kind == HR_MEM_DEVICE ? hr_device_total(arena, overhead) : arena + overhead;
}

/* Plans only (on the CPU backend's shapes), so no device is touched. The peak
 * grows with the batch, so a binary search over plans finds the largest fit. */
static int plan_fits(const hr_model_t *m, const hr_config_t *cfg, int64_t batch, size_t budget, size_t overhead,
                     hr_backend *be) {
    hr_config_t c = *cfg;
    c.batch = batch * (cfg->accumulate > 1 ? cfg->accumulate : 1); /* batch: the micro-batch */
    if (hr_recompute_searched(c.recompute)) { /* recomputation chosen for this batch */
        hr_recompute_choice ch;
        if (hr_recompute_fit(m, &c, be, budget, overhead, &ch) != HR_OK) return -1;
        hr_free(ch.layers);
        return ch.fits;
    }
    hr_program p;
    if (hr_program_build(m, &c, hr_exec_workspace, be, &p) != HR_OK) return -1;
    hr_plan pl;
    int fits = -1;
    if (hr_plan_make(&p, &pl) == HR_OK) {
        /* a CPU backend planning for a CUDA config (hr_largest_batch) counts pages too */
        size_t total = c.device == HR_DEVICE_CUDA ? hr_device_total(pl.arena_bytes, overhead)
                                                  : job_total(be, pl.arena_bytes, overhead);
        fits = total <= budget;
        hr_plan_free(&pl);
    }
    hr_program_free(&p);
    return fits;
}

/* The largest micro-batch in (lo, hi] that fits, given that lo does (0:
 * none known); lo when none does, -1 when a plan could not be made for want
 * of host memory (no answer rather than a wrong one). */
static int64_t bisect(const hr_model_t *m, const hr_config_t *cfg, int64_t lo, int64_t hi, size_t budget,
                      size_t overhead, hr_backend *be) {
    int f = plan_fits(m, cfg, hi, budget, overhead, be);
    if (f < 0 && hr_last_status() == HR_ERR_OOM) return -1;
    if (f == 1) return hi;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        int r = plan_fits(m, cfg, mid, budget, overhead, be);
        if (r < 0 && hr_last_status() == HR_ERR_OOM) return -1;
        if (r == 1)
            lo = mid;
        else
            hi = mid; /* too large to fit, or to plan */
    }
    return lo;
}

/* min's layers for micro-batch `batch` into *layers (hr_free), and whether
 * its plan fits: 1, 0, or -1 when the search failed. */
static int min_layers(const hr_model_t *m, const hr_config_t *cfg, int64_t batch, size_t budget, size_t overhead,
                      hr_backend *be, char **layers) {
    hr_config_t c = *cfg;
    c.batch = batch * (cfg->accumulate > 1 ? cfg->accumulate : 1);
    c.recompute = "min";
    hr_recompute_choice ch;
    *layers = NULL;
    if (hr_recompute_fit(m, &c, be, budget, overhead, &ch) != HR_OK) return -1;
    *layers = ch.layers;
    return ch.fits;
}

/* With accumulation the search is over micro-batches, and the answer is K
 * times the largest (the batches that K divides). A searched recomputation
 * (auto, min) would plan each probe with its own search, seconds a probe on
 * a GPT. Instead: min's layers at the config's batch, and a bisection with
 * them fixed (plain plans) gives b; then, while min's own search at b + 1
 * fits, a bisection from b + 1 with the layers it chose there (at small
 * batches the fixed bytes hide what larger ones need recomputed). The
 * answer is the b at which min's search no longer fits one more. */
int64_t hr_largest_batch_on(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi,
                            hr_backend *be) {
    int64_t K = cfg->accumulate > 1 ? cfg->accumulate : 1;
    hi /= K;
    if (hi < 1) return 0;
    if (!hr_recompute_searched(cfg->recompute) || cfg->mode != HR_MODE_TRAIN) {
        int64_t r = bisect(m, cfg, 0, hi, budget, overhead, be);
        return r < 0 ? -1 : r * K;
    }
    int64_t seed = cfg->batch / K, b = 0;
    seed = seed < 1 ? 1 : seed > hi ? hi : seed;
    char *layers;
    int f = min_layers(m, cfg, seed, budget, overhead, be, &layers);
    if (f < 0) { /* no plan at the config's batch: searched probes throughout */
        if (hr_last_status() == HR_ERR_OOM) return -1;
        int64_t r = bisect(m, cfg, 0, hi, budget, overhead, be);
        return r < 0 ? -1 : r * K;
    }
    for (int round = 0; round < 16; round++) {
        hr_config_t c = *cfg;
        c.recompute = layers;
        int64_t nb = bisect(m, &c, round ? b : 0, hi, budget, overhead, be);
        hr_free(layers);
        if (nb < 0) return -1;
        b = nb;
        if (b >= hi) return hi * K;
        if ((f = min_layers(m, cfg, b + 1, budget, overhead, be, &layers)) != 1) break;
        b++; /* min's layers at b + 1 fit there: bisect from it with them */
    }
    hr_free(layers); /* f == 1: the rounds ran out; b fits, larger ones may */
    if (f < 0 && hr_last_status() == HR_ERR_OOM) return -1;
    return b * K;
}

int64_t hr_largest_batch(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi) {
    hr_backend *be = hr_backend_cpu_new(cfg);
    if (!be) return -1;
    int64_t r = hr_largest_batch_on(m, cfg, budget, overhead, hi, be);
    be->free(be);
    return r;
}
