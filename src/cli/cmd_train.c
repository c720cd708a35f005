/* cmd_train.c — `headroom train` and `headroom eval`: data, the plan's
 * summary, the training loop with its progress line, test accuracy, and
 * checkpoints that a crash or a NaN never half-writes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/nvml.h"
#include "cli/cli.h"
#include "data/data.h"
#include "exec/internal.h"
#include "io/io.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The model's input as (c, h, w) and its number of classes. */
static int model_io(hr_model_t *m, int *c, int *h, int *w, int *classes) {
    int in = hr_model_input(m);
    int nd = hr_tensor_ndim(m, in);
    *c = *h = *w = 1;
    if (nd == 3) *c = (int)hr_tensor_dim(m, in, 0), *h = (int)hr_tensor_dim(m, in, 1), *w = (int)hr_tensor_dim(m, in, 2);
    else if (nd == 2) *h = (int)hr_tensor_dim(m, in, 0), *w = (int)hr_tensor_dim(m, in, 1);
    else *w = (int)hr_tensor_dim(m, in, 0);
    *classes = (int)hr_model_classes(m);
    return 0;
}

/* train and eval read labels as classes: other models are refused. */
static hr_status require_classifier(const hr_cli_opts *o, int classes) {
    if (classes > 0) return HR_OK;
    return hr_error_set(HR_ERR_INVALID_ARG, "%s: headroom train and eval take classifiers, models whose last "
                        "line is 'loss CrossEntropyLoss'; an MSELoss model trains through the C API "
                        "(hr_train_step with float targets)", o->model);
}

/* A text (--data fortunes, text:FILE, FILE.bin) gives windows of tokens: the
 * model's input must be one, `input T`. */
static hr_status require_sequence_input(const hr_cli_opts *o, int c, int h, int w) {
    if (!hr_text_spec(o->data) || (c == 1 && h == 1)) return HR_OK;
    return hr_error_set(HR_ERR_SHAPE, "%s: --data %s gives windows of tokens, but the model's input is %dx%dx%d; write "
                        "it as `input T` (the context length)", o->model, o->data, c, h, w);
}

/* train NULL: the test set only (eval), without decompressing the training set. */
static hr_status load_data(const hr_cli_opts *o, hr_model_t *m, hr_dataset *train, hr_dataset *test) {
    int c, h, w, classes;
    model_io(m, &c, &h, &w, &classes);
    hr_status st = require_classifier(o, classes);
    if (st) return st;
    if (hr_text_spec(o->data)) { /* windows as long as the model's input; eval reads the validation tail */
        hr_dataset drop = {0};
        if ((st = require_sequence_input(o, c, h, w)) != HR_OK) return st;
        st = hr_text_load(o->data, w, HR_TEXT_VAL_FRACTION, train ? train : &drop, test);
        hr_dataset_free(&drop);
        if (!st && test->nclasses > classes)
            st = hr_error_set(HR_ERR_SHAPE, "%s: --data %s has token ids up to %d, but the model's vocabulary (its "
                              "output) has %d; raise the Embedding's and the last Linear's size to at least %d",
                              o->model, o->data, test->nclasses - 1, classes, test->nclasses);
        return st;
    }
    if (!strcmp(o->data, "synthetic")) {
        st = train ? hr_synthetic_make(o->samples, c, h, w, classes, o->seed + 1, train) : HR_OK;
        if (!st) st = hr_synthetic_make(o->samples / 4 > 0 ? o->samples / 4 : 1, c, h, w, classes, o->seed + 2, test);
        return st;
    }
    st = hr_fashion_load(!strcmp(o->data, "fashion-mnist") ? NULL : o->data, train, test);
    if (st) return st;
    const hr_dataset *d = train ? train : test;
    int64_t per = (int64_t)d->c * d->h * d->w, want = (int64_t)c * h * w;
    if (per != want)
        return hr_error_set(HR_ERR_SHAPE, "%s: the model's input has %lld values a sample (%dx%dx%d) but the data's "
                            "samples have %lld (%dx%dx%d); change the model's input line",
                            o->model, (long long)want, c, h, w, (long long)per, d->c, d->h, d->w);
    if (d->nclasses > classes)
        return hr_error_set(HR_ERR_SHAPE, "%s: the data has %d classes but the model outputs %d", o->model,
                            d->nclasses, classes);
    return HR_OK;
}

/* Accuracy and mean cross-entropy on a data set, through `fwd`: an
 * inference session's forward pass (eval) or a training session's
 * evaluation pass (train); the last partial batch is padded, its extra rows
 * ignored. A text set has a label at every position: both are per token
 * (the validation loss). The rows of a batch are scored in parallel (a
 * character model's validation set is millions of logits a pass), each into
 * its own slot, then added in order: the same sum on any number of threads.
 * confusion: classes x classes or NULL; loss may be NULL. */
typedef hr_status (*forward_fn)(hr_session_t *s, const float *x, float *out);
static hr_status evaluate(hr_session_t *s, forward_fn fwd, const hr_dataset *d, int64_t eb, int classes, double *acc,
                          double *loss, int64_t *confusion) {
    size_t per = (size_t)d->c * d->h * d->w, L = (size_t)hr_dataset_label_len(d);
    float *x = calloc((size_t)eb * per, sizeof(float)), *out = malloc(sizeof(float) * (size_t)eb * L * (size_t)classes);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)eb * L), *best = malloc(sizeof(int32_t) * (size_t)eb * L);
    double *rnll = malloc(sizeof(double) * (size_t)eb * L);
    if (!x || !out || !y || !best || !rnll) {
        free(x), free(out), free(y), free(best), free(rnll);
        return hr_error_set(HR_ERR_OOM, "out of host memory for evaluation");
    }
    int64_t right = 0;
    double nll = 0;
    hr_status st = HR_OK;
    for (int64_t at = 0; at < d->n && !st; at += eb) {
        int64_t n = d->n - at < eb ? d->n - at : eb, rows = n * (int64_t)L;
        if ((st = hr_dataset_read(d, at, n, x, y)) != HR_OK || (st = fwd(s, x, out)) != HR_OK) break;
#pragma omp parallel for schedule(static) if (rows * classes > 65536)
        for (int64_t i = 0; i < rows; i++) {
            const float *r = out + i * classes;
            int b = 0;
            for (int k = 1; k < classes; k++)
                if (r[k] > r[b]) b = k;
            double z = 0;
            for (int k = 0; k < classes; k++) z += exp((double)r[k] - r[b]);
            best[i] = b;
            rnll[i] = (double)r[b] + log(z) - r[y[i]];
        }
        for (int64_t i = 0; i < rows; i++) {
            nll += rnll[i];
            right += best[i] == y[i];
            if (confusion) confusion[y[i] * classes + best[i]]++;
        }
    }
    *acc = d->n ? (double)right / (double)(d->n * (int64_t)L) : 0;
    if (loss) *loss = d->n ? nll / (double)(d->n * (int64_t)L) : 0;
    free(x), free(out), free(y), free(best), free(rnll);
    return st;
}

static void progress(int64_t epoch, int64_t epochs, int64_t b, int64_t nb, double loss, double rate, double eta) {
    int width = 24, fill = nb ? (int)(width * b / nb) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %d:%02d ", (long long)epoch,
            (long long)epochs, bar, (long long)b, (long long)nb, loss, rate, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

/* --memory-stats: the plan's numbers in PyTorch's terms and, on a GPU,
 * beside them what NVML says this process holds (now, and the most a
 * sampling thread saw during the run) against the printed device total. */
static void print_memory_stats(hr_session_t *s, hr_nvml_sampler *witness) {
    hr_mem_stats_t ms;
    char a[32], b2[32], c2[32];
    hr_mem_stats(s, &ms);
    const hr_report_t *r = hr_session_report(s);
    printf("memory: allocated %s, reserved %s, peak %s", hr_format_bytes(ms.allocated, a, sizeof a),
           hr_format_bytes(ms.reserved, b2, sizeof b2), hr_format_bytes(ms.peak_allocated, c2, sizeof c2));
    if (ms.device_total) printf(", device free %s of %s", hr_format_bytes(ms.device_free, a, sizeof a),
                                hr_format_bytes(ms.device_total, b2, sizeof b2));
    printf(", device allocations %lld\n", (long long)ms.device_allocs);
    for (int k = 0; k < HR_CAT_COUNT; k++)
        printf("  %-18s %s\n", hr_category_name((hr_category)k), hr_format_bytes(r->category_bytes[k], a, sizeof a));
    if (!hr_session_backend(s)->device_id) return;
    printf("  %-18s %s (arena in 2 MiB pages + overhead)\n", "device total", hr_format_bytes(r->device_total, a, sizeof a));
    hr_nvml_sample now;
    if (!witness) {
        printf("  NVML: no sampler (out of host memory)\n");
        return;
    }
    hr_nvml_sampler_read(witness, &now);
    if (!now.available || now.peak == HR_NVML_UNKNOWN) {
        printf("  NVML: unavailable (%s)\n", now.why[0] ? now.why : "this process is not in the driver's list");
        return;
    }
    double d = (double)now.peak - (double)r->device_total;
    printf("  NVML (this process): %s now, peak %s over %lld samples every %d ms; peak - device total = %+.2f MiB "
           "(%+.3f%%)\n", hr_format_bytes((size_t)now.current, a, sizeof a), hr_format_bytes((size_t)now.peak, b2, sizeof b2),
           (long long)now.samples, now.period_ms, d / 1048576.0, r->device_total ? 100 * d / (double)r->device_total : 0);
}

/* The inputs as load_data makes them: synthetic, or IDX by hr_fashion_load. */
static void input_meta(const hr_cli_opts *o, hr_ckpt_meta *meta) {
    if (hr_text_spec(o->data)) {
        snprintf(meta->input, sizeof meta->input, "tokens: %.64s, %s ids as floats, not normalised", o->data,
                 strncmp(o->data, "text:", 5) && strcmp(o->data, "fortunes") ? "uint16" : "bytes as");
        return;
    }
    if (!strcmp(o->data, "synthetic")) {
        snprintf(meta->input, sizeof meta->input, "synthetic: N(0, 1) from headroom's generator, not normalised");
        return;
    }
    meta->input_mean = HR_FASHION_MEAN, meta->input_std = HR_FASHION_STD;
    snprintf(meta->input, sizeof meta->input, "%s: x/255, then (x - %.4f) / %.4f",
             strcmp(o->data, "fashion-mnist") ? "IDX files" : "fashion-mnist", (double)meta->input_mean,
             (double)meta->input_std);
}

/* With a writer the file is written in the background (the next save, or
 * the end of the run, waits for it); without one, now. */
static hr_status save(hr_session_t *s, hr_ckpt_writer *w, const hr_cli_opts *o, const char *model_name, int64_t epoch,
                      int64_t batch) {
    if (!o->save) return HR_OK;
    hr_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", model_name);
    meta.epoch = epoch;
    meta.batch = batch;
    meta.seed = o->seed;
    input_meta(o, &meta);
    return w ? hr_ckpt_writer_save(w, s, o->save, &meta) : hr_checkpoint_save(s, o->save, &meta);
}

/* A resumed run trains as the checkpoint's did: the same precision (it never
 * changes silently), batch (the epoch's position counts its batches) and
 * input normalisation, unless --next-epoch starts it at the next epoch's
 * first batch, where none of them has a position to keep. The accumulation
 * may change (the update is the whole batch's either way): the caller notes
 * it. Plain weights files (no headroom metadata) pass. */
static int check_resume(const hr_cli_opts *o, const hr_config_t *cfg, const hr_ckpt_meta *meta) {
    if (!meta->fingerprint[0] || o->next_epoch) return HR_EXIT_OK;
    if (meta->precision != cfg->precision) {
        fprintf(stderr, "headroom train: %s was written by a --precision %s run, and this run has --precision %s; "
                        "resume it with --precision %s, or add --next-epoch to continue in %s from the start of the "
                        "next epoch\n",
                o->resume, hr_precision_name(meta->precision), hr_precision_name(cfg->precision),
                hr_precision_name(meta->precision), hr_precision_name(cfg->precision));
        return HR_EXIT_USAGE;
    }
    if (meta->batch_size && meta->batch_size != cfg->batch) {
        fprintf(stderr, "headroom train: %s was written with --batch %lld; resume it with --batch %lld (this run has "
                        "--batch %lld, and the checkpoint's place in the epoch counts batches of %lld), or add "
                        "--next-epoch to continue with --batch %lld from the start of the next epoch\n", o->resume,
                (long long)meta->batch_size, (long long)meta->batch_size, (long long)cfg->batch,
                (long long)meta->batch_size, (long long)cfg->batch);
        return HR_EXIT_USAGE;
    }
    hr_ckpt_meta now = {0};
    input_meta(o, &now);
    bool tokens = !strncmp(meta->input, "tokens:", 7), now_tokens = !strncmp(now.input, "tokens:", 7);
    if (meta->input[0] && (meta->input_std != now.input_std || meta->input_mean != now.input_mean || tokens != now_tokens)) {
        fprintf(stderr, "headroom train: %s was trained on inputs '%s', and this run's are '%s'; resume it with the "
                        "same kind of --data (%s), or add --next-epoch to continue on these from the start of the next "
                        "epoch\n", o->resume, meta->input, now.input,
                tokens ? "a text" : meta->input_std > 0 ? "fashion-mnist or an IDX folder" : "synthetic");
        return HR_EXIT_USAGE;
    }
    return HR_EXIT_OK;
}

/* The NaN stop. The step's update did not run (hr_session_set_nan_stop), so
 * hr_nan_find sees what the step saw: the first non-finite value is named
 * (a parameter, the batch, or the forward op that overflowed, with its layer
 * and tensor), with the advice that fits it. steps: those this run took
 * before; last: the last finite loss (steps > 0). */
static int stop_nonfinite(hr_session_t *s, const hr_cli_opts *o, const hr_config_t *cfg, const float *x,
                          const int32_t *y, float loss, int64_t epoch, int64_t batch, int64_t steps, double last,
                          const char *last_good) {
    int64_t step = hr_step_count(s) + 1;
    fprintf(stderr, "headroom train: the loss is %s at step %lld (epoch %lld, batch %lld); stopped before its "
                    "update. %s%s\n", isnan(loss) ? "NaN" : "infinite", (long long)step, (long long)epoch,
            (long long)batch, last_good ? "The last good checkpoint is " : "No checkpoint was written in this run",
            last_good ? last_good : "");
    hr_nan_report r;
    const hr_program *p = hr_session_program(s);
    const hr_graph *g = &p->g;
    char lr[160], hist[96] = "", where[320] = "";
    snprintf(lr, sizeof lr, "try a smaller --lr (now %g) or --clip 1.0", (double)cfg->optim.lr);
    if (steps > 0) snprintf(hist, sizeof hist, " (%.4g at step %lld)", last, (long long)step - 1);
    if (hr_nan_find(s, x, y, &r) != HR_OK) {
        fprintf(stderr, "  (the first non-finite value could not be found: %s)\n  %s\n", hr_last_error(), lr);
        return HR_EXIT_NUMERIC;
    }
    const char *val = isnan(r.value) ? "NaN" : r.value > 0 ? "inf" : "-inf";
    int64_t per = p->input >= 0 ? hr_shape_numel(&g->t[p->input].shape) / hr_micro_batch(cfg) : 1;
    switch (r.kind) {
    case HR_NAN_PARAM:
        fprintf(stderr, "  parameter %s holds %lld non-finite values of %lld (the first, element %lld, is %s)\n",
                g->t[r.tensor].name, (long long)r.count, (long long)r.numel, (long long)r.first, val);
        if (steps > 0)
            fprintf(stderr, "  an update of this run made it so, after a finite loss%s: its gradients or the update "
                            "overflowed; %s\n", hist, lr);
        else
            fprintf(stderr, "  it was so when this run began: %s; start from an earlier checkpoint, or afresh\n",
                    o->resume ? o->resume : "the initial weights");
        break;
    case HR_NAN_INPUT:
        fprintf(stderr, "  the batch holds %lld non-finite input values (the first, %s, in sample %lld of the batch)\n"
                        "  the data has NaN or inf in it: clean the data set%s%s\n",
                (long long)r.count, val, (long long)(r.micro * hr_micro_batch(cfg) + r.first / (per ? per : 1)),
                strcmp(o->data, "synthetic") && strcmp(o->data, "fashion-mnist") ? " " : "",
                strcmp(o->data, "synthetic") && strcmp(o->data, "fashion-mnist") ? o->data : "");
        break;
    case HR_NAN_OP: {
        const hr_node *n = &g->n[r.node];
        char first[48] = "";
        if (r.count < r.numel) snprintf(first, sizeof first, ", the first at element %lld", (long long)r.first);
        if (n->layer < 0) { /* a node of no layer (a Cast of mixed precision) */
            snprintf(where, sizeof where, "a %s node", hr_op_name(n->op));
        } else {
            hr_graph_layer_where(g, n->layer, where, sizeof where);
            size_t l = strlen(where);
            if (!g->l[n->layer].type || strcmp(g->l[n->layer].type, hr_op_name(n->op)))
                snprintf(where + l, sizeof where - l, "'s %s", hr_op_name(n->op));
        }
        fprintf(stderr, "  the first non-finite value is %s in tensor %s (%lld of its %lld values%s), the output of "
                        "%s, whose inputs were finite (the largest |value| %.3g)\n",
                val, g->t[r.tensor].name, (long long)r.count, (long long)r.numel, first, where, r.in_max);
        if (cfg->precision == HR_PREC_FP16 && hr_dtype_is_half(g->t[r.tensor].dtype))
            fprintf(stderr, "  fp16 ends at 65504: train with --precision bf16 (float32's range), or %s\n", lr);
        else if (steps == 0 && !o->resume)
            fprintf(stderr, "  the weights are still their initial values, so the scale of the data is the likely "
                            "cause: normalise it; or %s\n", lr);
        else
            fprintf(stderr, "  the values grew past float32's range after a finite loss%s: %s\n", hist, lr);
        break;
    }
    default:
        fprintf(stderr, "  the forward pass, run again on this batch, stayed finite; %s\n", lr);
        break;
    }
    return HR_EXIT_NUMERIC;
}

int hr_cmd_train(const hr_cli_opts *o) {
    int rc = HR_EXIT_OK;
    hr_dataset train = {0}, test = {0};
    hr_session_t *s = NULL;
    hr_loader *ld = NULL;
    hr_nvml_sampler *witness = NULL; /* --memory-stats on a GPU: NVML's view of this process */
    hr_ckpt_writer *writer = NULL;   /* --save: each epoch's checkpoint written in the background */
    char *fit_recompute = NULL;      /* --fit: the layers its choice recomputes */
    struct hr_trace *tr = NULL;      /* --trace */
    if (o->fit && (o->accumulate > 1 || o->recompute)) {
        fprintf(stderr, "headroom train: --fit chooses the micro-batches and what to recompute itself; leave out %s\n",
                o->recompute ? "--recompute" : "--accumulate");
        return HR_EXIT_USAGE;
    }
    hr_model_t *m = hr_cli_load_model(o);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    int c, h, w, classes;
    model_io(m, &c, &h, &w, &classes);
    /* the data's size from its headers (nothing read), so that host memory
     * is planned before any data is read or made */
    hr_host_data hd;
    hr_status st = require_classifier(o, classes);
    if (!st) st = require_sequence_input(o, c, h, w);
    if (!st) st = hr_host_data_peek(o, (int64_t)c * h * w, true, &hd);
    if (st) {
        rc = hr_cli_fail(st);
        goto done;
    }
    /* a checkpoint that could not be written is found now, not after an epoch */
    if (o->save && (st = hr_safetensors_check_writable(o->save)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    if ((rc = hr_train_trace_open(o, &tr)) != HR_EXIT_OK) goto done; /* so is a trace's place */
    hr_config_t cfg = hr_cli_config(o);
    unsigned allowed = o->precisions ? o->precisions : 1u << o->precision;
    const char *refit = "";
    if (o->fit && o->resume && !o->next_epoch) {
        /* a resumed run keeps its effective batch and its precision; fit
         * chooses the rest again for what is free now */
        hr_ckpt_meta pm;
        if ((st = hr_checkpoint_peek(o->resume, &pm)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        if (pm.batch_size > 0 && o->batch < 0) cfg.batch = pm.batch_size;
        if (!(allowed >> pm.precision & 1)) {
            fprintf(stderr, "headroom train: %s trained in %s; resume it with --precision %s (a resumed run keeps its "
                            "precision)\n", o->resume, hr_precision_name(pm.precision), hr_precision_name(pm.precision));
            rc = HR_EXIT_USAGE;
            goto done;
        }
        allowed = 1u << pm.precision;
        cfg.precision = pm.precision;
        refit = " (re-fitted to what is free now)";
    }
    if (cfg.batch > hd.train_n) {
        fprintf(stderr, "headroom train: --batch %lld is larger than the training set (%lld samples); use at most %lld\n",
                (long long)cfg.batch, (long long)hd.train_n, (long long)hd.train_n);
        rc = HR_EXIT_USAGE;
        goto done;
    }
    /* the test set is evaluated after each epoch by the evaluation pass,
     * planned in the training arena: the job's memory is this one plan */
    if (o->fit) { /* fit's choice of micro-batches, precision and recomputation (the evaluation pass as planned) */
        if (cfg.device == HR_DEVICE_AUTO) cfg.device = hr_backend_cuda_available() ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
        if (cfg.eval_batch > hd.test_n) cfg.eval_batch = hd.test_n;
        if ((rc = hr_fit_for_train(o, m, &cfg, allowed, &fit_recompute, refit)) != HR_EXIT_OK) goto done;
    }
    /* by default the evaluation pass follows the (micro-)batch, up to the test set */
    if ((cfg.eval_batch < 0 ? hr_micro_batch(&cfg) : cfg.eval_batch) > hd.test_n) cfg.eval_batch = hd.test_n;
    /* the samples an evaluation call takes: the pass's own batch (with
     * accumulation a micro-batch), else the other samples of each chunk of
     * the test set would be read from outputs never written */
    int64_t eval_batch = cfg.eval_batch < 0 ? hr_micro_batch(&cfg) : cfg.eval_batch;
    /* host memory before any plan (an absurd batch stops here, in
     * microseconds), then with the plan; the device's in hr_session_alloc;
     * the data only once both fit */
    hr_host_job job = {.model = m, .cfg = &cfg, .data = hd, .loader_batch = cfg.batch, .eval_batch = eval_batch,
                       .eval_follows = o->eval_batch < 0, .classes = classes};
    hr_host_plan hp;
    if ((st = hr_host_check(&job, &hp)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    if (!(s = hr_compile(m, &cfg))) {
        rc = hr_cli_fail(HR_ERR_INVALID_ARG);
        goto done;
    }
    job.s = s;
    /* --save writes each epoch's checkpoint in the background from a copy of
     * the state in host memory, where that fits; else it writes while training waits */
    if (o->save && (writer = hr_ckpt_writer_new())) job.ckpt_bytes = hr_checkpoint_state_bytes(s);
    if ((st = hr_host_check(&job, &hp)) == HR_ERR_OOM && writer) {
        hr_ckpt_writer_free(writer);
        writer = NULL;
        job.ckpt_bytes = 0;
        st = hr_host_check(&job, &hp);
    }
    if (st != HR_OK || (st = hr_session_alloc(s)) != HR_OK) {
        rc = hr_cli_fail(st);
        if (st == HR_ERR_DEVICE_OOM) hr_report_print(s, stderr);
        goto done;
    }
    hr_session_set_nan_stop(s, true); /* a NaN loss stops before its update: stop_nonfinite */
    if (!o->quiet) {
        hr_report_print(s, stdout);
        hr_host_plan_print(&hp, stdout);
    }
    if ((st = load_data(o, m, &train, &test)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    const char *bus = hr_session_backend(s)->device_id;
    if (o->memory_stats && bus) witness = hr_nvml_sampler_start(NULL, bus, -1, 5);

    int64_t epoch0 = 0, batch0 = 0;
    /* --max-steps without --epochs: as many epochs as the steps take (set below) */
    bool by_steps = o->max_steps > 0 && !o->epochs_set;
    int64_t epochs = o->epochs;
    if (o->resume) {
        hr_ckpt_meta meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.model, sizeof meta.model, "%s", o->model);
        if ((st = hr_checkpoint_load(s, o->resume, &meta)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        /* the shuffle and the random masks follow the seed: another seed
         * would continue a different run without a word */
        if (meta.fingerprint[0] && meta.seed != o->seed) {
            fprintf(stderr, "headroom train: %s was written with --seed %llu; resume it with --seed %llu (this run has "
                            "--seed %llu)\n", o->resume, (unsigned long long)meta.seed, (unsigned long long)meta.seed,
                    (unsigned long long)o->seed);
            rc = HR_EXIT_USAGE;
            goto done;
        }
        if ((rc = check_resume(o, &cfg, &meta)) != HR_EXIT_OK) goto done;
        epoch0 = meta.epoch;
        batch0 = meta.batch;
        char skipped_rest[96] = "";
        if (o->next_epoch && batch0 > 0) { /* the epoch it was in is left unfinished */
            snprintf(skipped_rest, sizeof skipped_rest, " (--next-epoch: epoch %lld's last %s)", (long long)epoch0 + 1,
                     "batches are skipped");
            epoch0++, batch0 = 0;
        }
        char scaler[96] = "";
        float sc;
        int64_t skipped;
        hr_loss_scale(s, &sc, NULL, &skipped);
        if (cfg.precision == HR_PREC_FP16)
            snprintf(scaler, sizeof scaler, ", loss scale %.9g (%lld steps skipped so far)", (double)sc, (long long)skipped);
        printf("resumed from %s: epoch %lld, batch %lld, step %lld, %s%s%s\n", o->resume, (long long)epoch0,
               (long long)batch0, (long long)hr_step_count(s), hr_precision_name(cfg.precision), scaler, skipped_rest);
        int K = cfg.accumulate > 1 ? cfg.accumulate : 1;
        if (meta.fingerprint[0] && meta.accumulate != K)
            printf("note: accumulation %lld → %d micro-batches, batch %lld unchanged\n", (long long)meta.accumulate, K,
                   (long long)cfg.batch);
        if (!by_steps && epoch0 >= epochs) { /* a finished run: the checkpoint stays as it is */
            if (batch0 == 0 && epoch0 == epochs)
                printf("checkpoint %s has finished epoch %lld of %lld: nothing to train; raise --epochs to continue\n",
                       o->resume, (long long)epoch0, (long long)epochs);
            else
                printf("checkpoint %s has finished %lld epochs%s, and --epochs is %lld: nothing to train; raise "
                       "--epochs past %lld to continue\n", o->resume, (long long)epoch0,
                       batch0 ? " and part of the next" : "", (long long)epochs, (long long)epoch0);
            goto done;
        }
        if (o->max_steps && hr_step_count(s) >= o->max_steps) { /* --max-steps counts the run's steps from its start */
            printf("checkpoint %s has taken %lld steps, and --max-steps is %lld: nothing to train; raise --max-steps "
                   "past %lld to continue\n", o->resume, (long long)hr_step_count(s), (long long)o->max_steps,
                   (long long)hr_step_count(s));
            goto done;
        }
    }
    if ((rc = hr_train_observe_start(o, s, tr)) != HR_EXIT_OK) goto done; /* --profile, --trace */
    if (!(ld = hr_loader_new(&train, cfg.batch, true, true, o->seed))) {
        rc = hr_cli_fail(HR_ERR_INVALID_ARG);
        goto done;
    }
    int64_t nb = hr_loader_batches_per_epoch(ld);
    if (by_steps && nb > 0) /* the epoch that holds step --max-steps */
        epochs = epoch0 + (batch0 + (o->max_steps - hr_step_count(s)) + nb - 1) / nb;
    bool tty = isatty(2) && !o->quiet;
    const char *last_good = NULL;
    int64_t step_start = hr_step_count(s);
    double last_loss = 0; /* the last finite loss, for the NaN stop */
    for (int64_t e = epoch0; e < epochs || (by_steps && nb > 0 && hr_step_count(s) < o->max_steps); e++) {
        if (e >= epochs) /* fp16's skipped steps took batches but no step: more epochs until step --max-steps */
            epochs = e + (o->max_steps - hr_step_count(s) + nb - 1) / nb;
        if ((st = hr_loader_start_epoch(ld, e, e == epoch0 ? batch0 : 0)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        double t0 = now(), sum = 0, last_draw = 0;
        int64_t b = e == epoch0 ? batch0 : 0, seen = 0, skipped0 = 0;
        hr_loss_scale(s, NULL, NULL, &skipped0);
        /* One step queued ahead (hr_train_submit): batch t+1 is taken and
         * staged while the device runs step t, whose loss is read after. */
        int inflight = 0, depth = tr ? 1 : HR_STEP_QUEUE; /* a trace's steps hold their own nodes */
        int64_t qn[HR_STEP_QUEUE];
        for (;;) {
            const float *x;
            const int32_t *y;
            int64_t n = 0;
            /* never queued past --max-steps: each step queued counts once its loss is back */
            bool more = !(o->max_steps && hr_step_count(s) + inflight >= o->max_steps);
            if (more && (st = hr_train_next_batch(ld, tr, &x, &y, &n)) != HR_OK) {
                rc = hr_cli_fail(st);
                goto done;
            }
            if (n > 0) {
                if ((st = hr_train_submit(s, x, y)) != HR_OK) {
                    rc = hr_cli_fail(st);
                    goto done;
                }
                qn[inflight++] = n;
                if (inflight < depth) continue;
            }
            if (inflight == 0) break;
            float loss;
            if ((st = hr_train_wait(s, &loss)) != HR_OK) {
                rc = hr_cli_fail(st);
                goto done;
            }
            n = qn[0];
            for (int k = 1; k < inflight; k++) qn[k - 1] = qn[k];
            inflight--;
            if ((rc = hr_train_step_observed(tr, s, loss)) != HR_EXIT_OK) goto done;
            b++;
            seen += n;
            if (!isfinite(loss)) {
                if (tty) fputc('\n', stderr);
                /* the step queued behind it took no update either; the batch
                 * itself is taken again for the search (the loader's order is
                 * a function of the seed, the epoch and the index) */
                while (inflight > 0 && (st = hr_train_wait(s, NULL)) == HR_OK) inflight--;
                if (st == HR_OK && (st = hr_loader_start_epoch(ld, e, b - 1)) == HR_OK)
                    st = hr_loader_next(ld, &x, &y, &n);
                if (st != HR_OK) {
                    rc = hr_cli_fail(st);
                    goto done;
                }
                rc = stop_nonfinite(s, o, &cfg, x, y, loss, e + 1, b, hr_step_count(s) - step_start, last_loss,
                                    last_good);
                goto done;
            }
            last_loss = loss;
            sum += loss;
            double t = now();
            if (tty && (t - last_draw > 0.2 || b == nb)) {
                double rate = (double)seen / (t - t0);
                progress(e + 1, epochs, b, nb, sum / (double)(b - (e == epoch0 ? batch0 : 0)), rate,
                         (double)(nb - b) * (double)cfg.batch / (rate > 0 ? rate : 1));
                last_draw = t;
            }
            if (o->max_steps && hr_step_count(s) >= o->max_steps) {
                if (tty) fputc('\n', stderr);
                if ((st = save(s, writer, o, o->model, e, b)) != HR_OK || (st = hr_ckpt_writer_wait(writer)) != HR_OK) {
                    rc = hr_cli_fail(st);
                    goto done;
                }
                printf("stopped after %lld step%s (--max-steps) in epoch %lld at batch %lld%s%s\n",
                       (long long)hr_step_count(s), hr_step_count(s) == 1 ? "" : "s", (long long)e + 1, (long long)b, o->save ? "; saved " : "",
                       o->save ? o->save : "");
                goto done;
            }
        }
        double secs = now() - t0, acc = 0, vloss = 0;
        if (tty) fputc('\n', stderr);
        if (eval_batch && (st = evaluate(s, hr_eval_forward, &test, eval_batch, classes, &acc, &vloss, NULL)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        int64_t steps = b - (e == epoch0 ? batch0 : 0);
        char accs[64] = "not evaluated (--eval-batch 0)", skips[160] = "";
        if (eval_batch && test.seq) /* text: the validation loss, and how often the likeliest next token is right */
            snprintf(accs, sizeof accs, "%.4f (next token right %.1f%%)", vloss, 100 * acc);
        else if (eval_batch)
            snprintf(accs, sizeof accs, "%.2f%%", 100 * acc);
        float sc;
        int64_t skipped;
        hr_loss_scale(s, &sc, NULL, &skipped);
        if (skipped > skipped0) /* fp16: steps whose gradients overflowed (GradScaler skips them) */
            snprintf(skips, sizeof skips, "  %lld of %lld steps skipped (inf/NaN gradients; loss scale now %.9g)",
                     (long long)(skipped - skipped0), (long long)steps, (double)sc);
        printf("epoch %lld/%lld  train loss %.4f  %s %s  %.0f samples/s  %.1f s%s\n", (long long)e + 1,
               (long long)epochs, steps ? sum / (double)steps : 0.0, test.seq ? "val loss" : "test accuracy", accs,
               (double)seen / secs, secs, skips);
        if (e == epoch0) { /* how the device ran the steps: one graph, or node by node and why */
            char why[512];
            int gs = hr_session_graph(s, why, sizeof why);
            if (gs == 1) printf("note: each step after the first ran as one CUDA graph\n");
            else if (gs < 0 && strcmp(why, "this backend has no graphs")) printf("note: the steps ran node by node: %s\n", why);
        }
        fflush(stdout);
        if ((st = save(s, writer, o, o->model, e + 1, 0)) != HR_OK) {
            rc = hr_cli_fail(st);
            goto done;
        }
        last_good = o->save;
    }
    if (o->memory_stats) print_memory_stats(s, witness);
done:
    free(fit_recompute);
    /* the last checkpoint's write finishes before the run ends, whichever way it ends */
    if (writer && (st = hr_ckpt_writer_wait(writer)) != HR_OK) {
        int wrc = hr_cli_fail(st);
        if (rc == HR_EXIT_OK) rc = wrc;
    }
    hr_ckpt_writer_free(writer);
    rc = hr_train_observe_end(o, s, tr, rc); /* --profile's table; the trace, however the run ended */
    hr_nvml_sampler_stop(witness, NULL);
    hr_loader_free(ld);
    hr_session_free(s);
    hr_dataset_free(&train);
    hr_dataset_free(&test);
    hr_model_free(m);
    return rc;
}

/* Evaluation's own batch (no --batch) did not fit the device or the budget:
 * the batch changes no number it prints, so it takes the largest that fits,
 * says so, and goes on. *ev is replaced (allocated) on success; on failure
 * it keeps the session that did not fit, and the error says why. */
static hr_status eval_smaller(const hr_cli_opts *o, const hr_model_t *m, hr_config_t *cfg, hr_session_t **ev) {
    char why[4096];
    snprintf(why, sizeof why, "%s", hr_last_error());
    size_t room = hr_session_device_room(*ev);
    if (cfg->device_budget && cfg->device_budget < room) room = cfg->device_budget;
    int64_t was = cfg->batch, fit = hr_largest_batch(m, cfg, room, hr_session_report(*ev)->overhead_bytes, was - 1);
    if (fit < 1) return hr_error_set(HR_ERR_DEVICE_OOM, "%s", why);
    hr_config_t c = *cfg;
    c.batch = fit;
    hr_session_t *s = hr_compile(m, &c);
    hr_status st = s ? hr_session_alloc(s) : HR_ERR_INVALID_ARG;
    if (st != HR_OK) {
        hr_session_free(s);
        return st;
    }
    if (!o->quiet)
        fprintf(stderr, "headroom eval: batch %lld does not fit; evaluating %lld samples a batch instead (the same "
                        "results)\n", (long long)was, (long long)fit);
    hr_session_free(*ev);
    *ev = s;
    *cfg = c;
    return HR_OK;
}

int hr_cmd_eval(const hr_cli_opts *o) {
    if (!o->weights) {
        fprintf(stderr, "headroom eval: which weights? add --weights CKPT (a checkpoint written by train --save)\n");
        return HR_EXIT_USAGE;
    }
    int rc = HR_EXIT_OK;
    hr_dataset test = {0};
    hr_session_t *ev = NULL;
    int64_t *conf = NULL;
    hr_model_t *m = hr_cli_load_model(o);
    if (!m) return hr_cli_fail(HR_ERR_PARSE);
    int c, h, w, classes;
    model_io(m, &c, &h, &w, &classes);
    hr_host_data hd;
    hr_status st = require_classifier(o, classes);
    if (!st) st = require_sequence_input(o, c, h, w);
    if (!st) st = hr_host_data_peek(o, (int64_t)c * h * w, false, &hd);
    if (st) {
        rc = hr_cli_fail(st);
        goto done;
    }
    hr_config_t cfg = hr_cli_config(o);
    cfg.mode = HR_MODE_INFER;
    cfg.batch = o->batch > 0 ? (o->batch < hd.test_n ? o->batch : hd.test_n) : (hd.test_n < 1000 ? hd.test_n : 1000);
    hr_host_job job = {.model = m, .cfg = &cfg, .data = hd, .classes = classes}; /* no loader: cfg.batch is evaluation's */
    hr_host_plan hp;
    if ((st = hr_host_check(&job, &hp)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    if (!(ev = hr_compile(m, &cfg))) {
        rc = hr_cli_fail(HR_ERR_INVALID_ARG);
        goto done;
    }
    job.s = ev;
    if ((st = hr_host_check(&job, &hp)) == HR_OK) st = hr_session_alloc(ev);
    if (st == HR_ERR_DEVICE_OOM && o->batch <= 0 && (st = eval_smaller(o, m, &cfg, &ev)) == HR_OK) {
        job.s = ev;
        st = hr_host_check(&job, &hp);
    }
    if (st != HR_OK) {
        rc = hr_cli_fail(st);
        if (st == HR_ERR_DEVICE_OOM) hr_report_print(ev, stderr);
        goto done;
    }
    if (!o->quiet) {
        hr_report_print(ev, stdout);
        hr_host_plan_print(&hp, stdout);
    }
    if ((st = load_data(o, m, NULL, &test)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    hr_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", o->model);
    if ((st = hr_checkpoint_load(ev, o->weights, &meta)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    conf = calloc((size_t)classes * (size_t)classes, sizeof *conf);
    double acc = 0;
    if (!conf) {
        rc = hr_cli_fail(hr_error_set(HR_ERR_OOM, "out of host memory"));
        goto done;
    }
    double vloss = 0;
    if ((st = evaluate(ev, hr_forward, &test, cfg.batch, classes, &acc, &vloss, test.seq ? NULL : conf)) != HR_OK) {
        rc = hr_cli_fail(st);
        goto done;
    }
    if (test.seq) { /* text: the validation tail's loss and next-token accuracy; no confusion matrix of tokens */
        printf("val loss %.4f, next token right %.2f%% (%lld windows of %lld tokens)\n", vloss, 100 * acc,
               (long long)test.n, (long long)test.seq);
        goto done;
    }
    printf("test accuracy %.2f%% (%lld samples)\nconfusion matrix (rows: true class, columns: predicted)\n", 100 * acc,
           (long long)test.n);
    printf("      ");
    for (int k = 0; k < classes; k++) printf("%6d", k);
    printf("\n");
    for (int i = 0; i < classes; i++) {
        printf("%6d", i);
        for (int k = 0; k < classes; k++) printf("%6lld", (long long)conf[i * classes + k]);
        printf("\n");
    }
done:
    free(conf);
    hr_session_free(ev);
    hr_dataset_free(&test);
    hr_model_free(m);
    return rc;
}
