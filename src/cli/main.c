/* main.c — `headroom plan|train|eval|smi`: parses the command line into options
 * and hands them to the subcommand. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/io.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: headroom <command> MODEL [options]\n"
            "\n"
            "commands:\n"
            "  plan MODEL --batch N [--optim adam|adamw|sgd] [--mode train|infer] [--json]\n"
            "             [--budget 8GiB] [--device cpu|cuda] [--gpu h100|h200] [--eval-batch N]\n"
            "             [--precision fp32|bf16|fp16] [--accumulate K] [--recompute LAYERS|all|auto|min]\n"
            "             [--chunks K] [--html FILE] (the step's memory drawn as one self-contained web page)\n"
            "      every byte of one training step, by category, and the device total the\n"
            "      process will hold (arena in 2 MiB pages + runtime overhead), before anything\n"
            "      runs; with --budget (what nvidia-smi may show) or --gpu (where there is no\n"
            "      GPU: that GPU's measured overhead and memory, an estimate): whether it fits\n"
            "      and the largest batch that does\n"
            "  train MODEL [--data fashion-mnist|synthetic|DIR] [--epochs E] [--batch N] [--lr LR]\n"
            "              [--optim adam|adamw|sgd] [--momentum M] [--nesterov] [--weight-decay W]\n"
            "              [--decay-matrices-only] [--clip NORM] [--warmup N] [--lr-decay N] [--min-lr LR]\n"
            "              [--seed S] [--save CKPT] [--resume CKPT [--next-epoch]]\n"
            "              [--device auto|cpu|cuda] [--max-steps N] [--samples N] [--memory-stats]\n"
            "              [--budget 8GiB] (the device memory the process may hold) [--eval-batch N]\n"
            "              [--precision fp32|bf16|fp16] [--loss-scale S] [--accumulate K]\n"
            "              [--recompute LAYERS|all|auto|min] [--chunks K] [--fit [--precision fp32,bf16]]\n"
            "              [--trace FILE [--trace-steps N]] [--profile]\n"
            "  fit MODEL --batch N [--budget 8GiB] [--precision fp32,bf16,fp16] [--device cpu|cuda]\n"
            "            [--no-measure] [--json]\n"
            "      the fastest way to train batch N within the budget (default: what the GPU\n"
            "      has free): micro-batches, the precisions allowed (fp32 unless told) and\n"
            "      recomputation, each planned exactly and its step time predicted from\n"
            "      per-node times measured on this device (cached); prints the candidates\n"
            "      and the train command line; train --fit trains with its choice\n"
            "  eval MODEL --weights CKPT [--data fashion-mnist|synthetic|DIR] [--batch N]\n"
            "             [--precision fp32|bf16|fp16]\n"
            "\n"
            "  --precision bf16|fp16: mixed precision as torch.autocast (fp32 weights and\n"
            "      optimizer; products and convolutions in the half type); fp16 scales the\n"
            "      loss as torch.amp.GradScaler (--loss-scale: its first scale, 65536)\n"
            "  --context T: a model of token ids (`input T`, an Embedding) at context length T\n"
            "      instead of the file's, for plan, fit, train and eval: the largest micro-batch\n"
            "      and fit's choice for that length (at most PositionEmbedding's positions)\n"
            "  --accumulate K: each step sums the gradients of K micro-batches of batch/K\n"
            "      samples (the same update as the whole batch, in the memory of batch/K)\n"
            "  --chunks K: the layers from the input to the first that mixes samples (batch\n"
            "      statistics, a random mask, the loss) run on K slices of the batch, one at\n"
            "      a time, each slice recomputed for its backward pass: their full-batch\n"
            "      activations never exist (gradients equal up to rounding, as --accumulate's)\n"
            "  --max-steps N: stop after step N (counted from the run's start); without\n"
            "      --epochs it alone sets the length, with it the first limit stops the run\n"
            "  --decay-matrices-only: weight decay for parameters of two or more dimensions\n"
            "      only (matrices, embeddings); biases and norm weights undecayed, as GPT-2\n"
            "  --warmup N, --lr-decay N, --min-lr LR: nanoGPT's schedule: the learning rate\n"
            "      rises over N steps, then falls on a cosine to --min-lr (default lr/10) at\n"
            "      step --lr-decay and stays there\n"
            "  --next-epoch: resume a checkpoint with another --batch, --precision or --data,\n"
            "      from the start of the epoch after its last (a resumed run keeps them otherwise)\n"
            "  --recompute: layers whose activations are computed again in the backward pass\n"
            "      instead of kept (bit-identical gradients): names (1,3,stem), patterns\n"
            "      ('*.mlp.*'), all, auto (the cheapest that fits --budget or what is\n"
            "      free), min (the smallest plan)\n"
            "  --trace FILE: the first N steps (--trace-steps, default 10, at most 1000) as a\n"
            "      Chrome trace (open it in ui.perfetto.dev or chrome://tracing): each node's\n"
            "      time (device events on a GPU, host time on the CPU), the loader, the\n"
            "      uploads and the optimizer as tracks, planned and measured memory as counters;\n"
            "      written when those steps are done, or with what it has if the run stops first\n"
            "  --profile: at the end, the step's nodes slowest first: time, share, GFLOP/s,\n"
            "      GB/s and the share of the device's roofline (the first step left out)\n"
            "  generate MODEL --weights CKPT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
            "      text sampled a byte at a time from a model trained on text (--data fortunes)\n"
            "  smi [--json]\n"
            "      each GPU (memory, load, temperature, power) and the processes on it, as\n"
            "      the NVIDIA driver reports them (NVML); with no driver it says so, status 0\n"
            "\n"
            "exit status: 0 ok, 1 bad input, 2 bad command line, 3 does not fit, 4 NaN/inf loss,\n"
            "  130 interrupted while tracing (the trace has what was recorded)\n");
}

static bool parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) {
        /* allow 1e6-style sizes */
        double d = strtod(s, &end);
        if (end == s || *end || !(d >= -9.2e18 && d <= 9.2e18) || d != (double)(long long)d) return false;
        v = (long long)d;
    }
    *out = v;
    return true;
}

/* A finite number: inf, nan and values past double's range are refused. */
static bool parse_f(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

hr_model_t *hr_cli_load_model(const hr_cli_opts *o) { return hr_modelfile_load_context(o->model, o->context); }

int hr_cli_parse(int argc, char **argv, hr_cli_opts *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    o->data = "fashion-mnist";
    o->batch = -1;
    o->epochs = 10;
    o->lr = -1;
    o->optim = HR_OPTIM_ADAM;
    o->device = HR_DEVICE_AUTO;
    o->momentum = 0.0;
    o->samples = 4096;
    o->eval_batch = -1; /* the training batch */
    o->accumulate = 1;
    o->min_lr = -1; /* lr / 10 with --lr-decay */
    o->trace_steps = -1; /* --trace's default: 10 */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                       \
    do {                                                                             \
        if (!v) {                                                                    \
            fprintf(stderr, "headroom %s: option %s needs a value\n", cmd, a);       \
            return HR_EXIT_USAGE;                                                    \
        }                                                                            \
        i++;                                                                         \
    } while (0)
#define BAD(what)                                                                                      \
    do {                                                                                               \
        fprintf(stderr, "headroom %s: %s '%s' is not %s\n", cmd, a, v, what);                          \
        return HR_EXIT_USAGE;                                                                          \
    } while (0)
        if (a[0] != '-') {
            if (o->model) {
                fprintf(stderr, "headroom %s: unexpected argument '%s' (the model is already %s)\n", cmd, a, o->model);
                return HR_EXIT_USAGE;
            }
            o->model = a;
        } else if (!strcmp(a, "--batch")) {
            NEED();
            /* -1 is the default's mark inside: given, it is refused like 0 */
            if (!parse_i64(v, &o->batch)) BAD("an integer");
            if (o->batch < 1) BAD("a batch size of at least 1");
        } else if (!strcmp(a, "--context")) {
            NEED();
            if (!parse_i64(v, &o->context) || o->context <= 0) BAD("a positive number of positions");
        } else if (!strcmp(a, "--eval-batch")) {
            NEED();
            if (!parse_i64(v, &o->eval_batch) || o->eval_batch < 0) BAD("an integer >= 0 (0: no evaluation)");
        } else if (!strcmp(a, "--precision")) {
            NEED();
            /* one precision; fit (and train --fit) take a list of those it may choose */
            bool list = !strcmp(cmd, "fit") || !strcmp(cmd, "train");
            unsigned set = 0;
            for (const char *p = v; *p;) {
                size_t len = strcspn(p, ",");
                if (len == 4 && !strncmp(p, "fp32", 4)) set |= 1u << HR_PREC_FP32;
                else if (len == 4 && !strncmp(p, "bf16", 4)) set |= 1u << HR_PREC_BF16;
                else if (len == 4 && !strncmp(p, "fp16", 4)) set |= 1u << HR_PREC_FP16;
                else {
                    set = 0;
                    break;
                }
                p += len;
                if (*p == ',') p++;
            }
            if (!set) BAD(list ? "fp32, bf16, fp16 or a list of them (fp32,bf16)" : "one of fp32, bf16, fp16");
            o->precision = set & 1u ? HR_PREC_FP32 : set & 2u ? HR_PREC_BF16 : HR_PREC_FP16;
            if (set & (set - 1)) {
                if (!list) BAD("one of fp32, bf16, fp16 (a list is for fit and train --fit)");
                o->precisions = set;
            }
        } else if (!strcmp(a, "--no-measure")) {
            o->no_measure = true;
        } else if (!strcmp(a, "--fit")) {
            o->fit = true;
        } else if (!strcmp(a, "--chunks")) {
            NEED();
            if (!parse_i64(v, &o->chunks) || o->chunks < 1 || o->chunks > (1 << 30))
                BAD("an integer from 1 to 2^30 (slices of the batch)");
        } else if (!strcmp(a, "--accumulate")) {
            NEED();
            if (!parse_i64(v, &o->accumulate) || o->accumulate < 1 || o->accumulate > (1 << 30))
                BAD("an integer from 1 to 2^30 (micro-batches a step)");
        } else if (!strcmp(a, "--recompute")) {
            NEED();
            if (!*v) BAD("none, all, auto, min or layer names separated by commas");
            o->recompute = v;
        } else if (!strcmp(a, "--loss-scale")) {
            NEED();
            if (!parse_f(v, &o->loss_scale) || !(o->loss_scale > 0) || o->loss_scale > 3e38) BAD("a finite scale > 0");
        } else if (!strcmp(a, "--epochs")) {
            NEED();
            if (!parse_i64(v, &o->epochs) || o->epochs < 1) BAD("a positive integer");
            o->epochs_set = true;
        } else if (!strcmp(a, "--max-steps")) {
            NEED();
            if (!parse_i64(v, &o->max_steps) || o->max_steps < 1) BAD("a positive integer");
        } else if (!strcmp(a, "--samples")) {
            NEED();
            if (!parse_i64(v, &o->samples) || o->samples < 1) BAD("a positive integer");
        } else if (!strcmp(a, "--lr")) {
            NEED();
            if (!parse_f(v, &o->lr) || !(o->lr >= 0)) BAD("a finite learning rate >= 0");
        } else if (!strcmp(a, "--momentum")) {
            NEED();
            if (!parse_f(v, &o->momentum) || !(o->momentum >= 0)) BAD("a finite momentum >= 0");
        } else if (!strcmp(a, "--weight-decay")) {
            NEED();
            if (!parse_f(v, &o->weight_decay) || !(o->weight_decay >= 0)) BAD("a finite weight decay >= 0");
        } else if (!strcmp(a, "--warmup") || !strcmp(a, "--lr-decay")) {
            int64_t n;
            NEED();
            if (!parse_i64(v, &n) || n < 0 || n > ((int64_t)1 << 40)) BAD("a number of steps >= 0");
            *(!strcmp(a, "--warmup") ? &o->warmup : &o->lr_decay) = n;
        } else if (!strcmp(a, "--min-lr")) {
            NEED();
            if (!parse_f(v, &o->min_lr) || !(o->min_lr >= 0)) BAD("a finite learning rate >= 0");
        } else if (!strcmp(a, "--clip")) {
            NEED();
            if (!parse_f(v, &o->clip) || !(o->clip > 0)) BAD("a finite norm > 0");
        } else if (!strcmp(a, "--nesterov")) {
            o->nesterov = true;
        } else if (!strcmp(a, "--decay-matrices-only")) {
            o->decay_matrices_only = true;
        } else if (!strcmp(a, "--seed")) {
            int64_t s;
            NEED();
            if (!parse_i64(v, &s) || s < 0) BAD("a seed >= 0");
            o->seed = (uint64_t)s;
        } else if (!strcmp(a, "--optim")) {
            NEED();
            if (!strcmp(v, "adam")) o->optim = HR_OPTIM_ADAM;
            else if (!strcmp(v, "adamw")) o->optim = HR_OPTIM_ADAMW;
            else if (!strcmp(v, "sgd")) o->optim = HR_OPTIM_SGD;
            else BAD("one of adam, adamw, sgd");
        } else if (!strcmp(a, "--mode")) {
            NEED();
            if (!strcmp(v, "train")) o->mode = HR_MODE_TRAIN;
            else if (!strcmp(v, "infer")) o->mode = HR_MODE_INFER;
            else BAD("train or infer");
        } else if (!strcmp(a, "--device")) {
            NEED();
            if (!strcmp(v, "auto")) o->device = HR_DEVICE_AUTO;
            else if (!strcmp(v, "cpu")) o->device = HR_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) o->device = HR_DEVICE_CUDA;
            else BAD("auto, cpu or cuda");
        } else if (!strcmp(a, "--budget")) {
            NEED();
            if (!hr_parse_bytes(v, &o->budget) || o->budget == 0) BAD("a size such as 8GiB, 512MB or 1e9");
            o->budget_set = true;
            o->budget_arg = v;
        } else if (!strcmp(a, "--gpu")) {
            NEED();
            o->gpu = v;
        } else if (!strcmp(a, "--html")) {
            NEED();
            o->html = v;
        } else if (!strcmp(a, "--trace")) {
            NEED();
            if (!*v) BAD("a file name");
            o->trace = v;
        } else if (!strcmp(a, "--trace-steps")) {
            NEED();
            if (!parse_i64(v, &o->trace_steps) || o->trace_steps < 1 || o->trace_steps > 1000)
                BAD("an integer from 1 to 1000 (steps to trace)");
        } else if (!strcmp(a, "--profile")) {
            o->profile = true;
        } else if (!strcmp(a, "--data")) {
            NEED();
            o->data = v;
        } else if (!strcmp(a, "--save")) {
            NEED();
            o->save = v;
        } else if (!strcmp(a, "--resume")) {
            NEED();
            o->resume = v;
        } else if (!strcmp(a, "--next-epoch")) {
            o->next_epoch = true;
        } else if (!strcmp(a, "--weights")) {
            NEED();
            o->weights = v;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--memory-stats")) {
            o->memory_stats = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o->quiet = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "headroom %s: unknown option '%s' (see headroom --help)\n", cmd, a);
            return HR_EXIT_USAGE;
        }
    }
    if (!o->model) {
        fprintf(stderr, "headroom %s: which model? give a model file, e.g. examples/fashion.model\n", cmd);
        return HR_EXIT_USAGE;
    }
    bool fits = !strcmp(cmd, "fit") || (!strcmp(cmd, "train") && o->fit);
    if ((o->fit && strcmp(cmd, "train")) || (o->no_measure && !fits) || (o->precisions && !fits)) {
        fprintf(stderr, "headroom %s: %s is for fit and train --fit\n", cmd,
                o->precisions ? "a list of precisions" : o->fit ? "--fit" : "--no-measure");
        return HR_EXIT_USAGE;
    }
    if (o->next_epoch && (strcmp(cmd, "train") || !o->resume)) {
        fprintf(stderr, "headroom %s: --next-epoch is for train --resume CKPT (it says where a resumed run starts)\n",
                cmd);
        return HR_EXIT_USAGE;
    }
    if (o->html && strcmp(cmd, "plan")) {
        fprintf(stderr, "headroom %s: --html is for plan (it draws the plan's memory)\n", cmd);
        return HR_EXIT_USAGE;
    }
    if ((o->trace || o->trace_steps > 0 || o->profile) && strcmp(cmd, "train")) {
        fprintf(stderr, "headroom %s: %s is for train (it times the training steps)\n", cmd,
                o->trace ? "--trace" : o->profile ? "--profile" : "--trace-steps");
        return HR_EXIT_USAGE;
    }
    if (o->trace_steps > 0 && !o->trace) {
        fprintf(stderr, "headroom %s: --trace-steps says how many steps --trace records; add --trace FILE\n", cmd);
        return HR_EXIT_USAGE;
    }
    if (o->trace_steps < 0) o->trace_steps = 10;
    double lr = o->lr >= 0 ? o->lr : o->optim == HR_OPTIM_SGD ? 0.01 : 1e-3; /* hr_cli_config's */
    if (o->lr_decay > 0 && o->lr_decay <= o->warmup) {
        fprintf(stderr, "headroom %s: --lr-decay %lld must be past the --warmup of %lld steps\n", cmd,
                (long long)o->lr_decay, (long long)o->warmup);
        return HR_EXIT_USAGE;
    }
    if (o->min_lr > lr || (o->min_lr >= 0 && !o->lr_decay)) {
        fprintf(stderr, "headroom %s: --min-lr %g %s\n", cmd, o->min_lr,
                o->lr_decay ? "is above the learning rate; give at most --lr" : "needs --lr-decay (the step it is reached)");
        return HR_EXIT_USAGE;
    }
    if (o->batch == 0 || o->batch < -1) {
        fprintf(stderr, "headroom %s: --batch must be at least 1, got %lld\n", cmd, (long long)o->batch);
        return HR_EXIT_USAGE;
    }
    return HR_EXIT_OK;
}

hr_config_t hr_cli_config(const hr_cli_opts *o) {
    hr_config_t c = hr_config_default();
    c.batch = o->batch > 0 ? o->batch : 64;
    c.mode = o->mode;
    c.optim.kind = o->optim;
    if (o->optim == HR_OPTIM_SGD) c.optim.lr = 0.01f;
    if (o->lr >= 0) c.optim.lr = (float)o->lr;
    c.optim.momentum = (float)o->momentum;
    c.optim.nesterov = o->nesterov;
    c.optim.decay_matrices_only = o->decay_matrices_only;
    c.optim.weight_decay = (float)(o->weight_decay > 0 ? o->weight_decay : (o->optim == HR_OPTIM_ADAMW ? 0.01 : 0.0));
    c.optim.clip_norm = (float)o->clip;
    c.optim.warmup_steps = o->warmup;
    c.optim.decay_steps = o->lr_decay;
    c.optim.min_lr = o->min_lr >= 0 ? (float)o->min_lr : o->lr_decay > 0 ? c.optim.lr / 10 : 0;
    c.device = o->device;
    c.seed = o->seed;
    /* the device memory the process may hold, as nvidia-smi shows it */
    c.device_budget = o->budget_set ? o->budget : 0;
    /* the job's evaluation pass, planned with the step (train caps it at the test set) */
    c.eval_batch = o->mode != HR_MODE_TRAIN ? 0 : o->eval_batch; /* -1: follows the (micro-)batch */
    c.precision = o->precision;
    c.accumulate = (int)o->accumulate;
    c.chunks = (int)o->chunks;
    c.loss_scale = (float)o->loss_scale;
    c.recompute = o->recompute;
    return c;
}

int hr_cli_fail(hr_status st) {
    fprintf(stderr, "headroom: %s\n", hr_last_error());
    if (st == HR_ERR_DEVICE_OOM || st == HR_ERR_OOM) return HR_EXIT_NOFIT;
    if (st == HR_ERR_NUMERIC) return HR_EXIT_NUMERIC;
    return HR_EXIT_ERROR;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? HR_EXIT_USAGE : HR_EXIT_OK;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "smi")) return hr_cmd_smi(argc - 2, argv + 2); /* no model, options of its own */
    if (!strcmp(cmd, "generate")) return hr_cmd_generate(argc - 2, argv + 2); /* options of its own */
    int (*run)(const hr_cli_opts *) = NULL;
    if (!strcmp(cmd, "plan")) run = hr_cmd_plan;
    else if (!strcmp(cmd, "fit")) run = hr_cmd_fit;
    else if (!strcmp(cmd, "train")) run = hr_cmd_train;
    else if (!strcmp(cmd, "eval")) run = hr_cmd_eval;
    if (!run) {
        fprintf(stderr, "headroom: unknown command '%s'; the commands are plan, fit, train, eval, generate, smi\n", cmd);
        return HR_EXIT_USAGE;
    }
    hr_cli_opts o;
    int rc = hr_cli_parse(argc - 2, argv + 2, &o, cmd);
    return rc ? rc : run(&o);
}
