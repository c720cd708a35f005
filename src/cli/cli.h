/* cli.h — the headroom command: shared option parsing, exit codes and the
 * subcommands (plan, train, eval, smi). */
#ifndef HR_CLI_H
#define HR_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "headroom.h"

/* Exit codes a script can tell apart. */
enum {
    HR_EXIT_OK = 0,
    HR_EXIT_ERROR = 1,    /* bad input: model file, data, checkpoint */
    HR_EXIT_USAGE = 2,    /* bad command line */
    HR_EXIT_NOFIT = 3,    /* the plan does not fit the device or the budget */
    HR_EXIT_NUMERIC = 4,  /* NaN or inf loss */
};

typedef struct {
    const char *model;
    const char *data;      /* fashion-mnist, synthetic, or a folder */
    const char *save, *resume, *weights;
    const char *gpu;       /* plan: the GPU to estimate for where there is none (backend/gpus.c) */
    int64_t batch, epochs, max_steps, samples;
    int64_t context;       /* --context T: a token model's input length (0: the model file's) */
    bool epochs_set;       /* --epochs given: else --max-steps alone trains until it */
    int64_t eval_batch;    /* train, plan (train mode): the evaluation pass's batch; 0: none; -1: the batch */
    double lr;
    hr_optim_kind optim;
    hr_mode mode;
    hr_device device;
    uint64_t seed;
    bool json, memory_stats, quiet, budget_set;
    size_t budget;
    const char *budget_arg; /* --budget as written ("8GiB") */
    double momentum, weight_decay, clip;
    int64_t warmup, lr_decay; /* the learning-rate schedule's steps (0: none) */
    double min_lr;            /* -1: lr / 10 (nanoGPT's) when a decay is given */
    bool nesterov;
    bool decay_matrices_only; /* --decay-matrices-only: GPT-2's AdamW groups */
    hr_precision precision;
    int64_t accumulate;    /* micro-batches an optimizer step (1: none) */
    int64_t chunks;        /* slices the first per-sample layers run in (0: none) */
    double loss_scale;     /* fp16: GradScaler's initial scale (0: 2^16) */
    const char *recompute; /* layers whose activations are recomputed: none, all, auto, min or names */
    unsigned precisions;   /* fit: the precisions it may choose (bit 1 << HR_PREC_*); 0: --precision's one */
    bool no_measure;       /* fit: predict from the cache and estimates only */
    bool fit;              /* train: train with fit's choice */
    bool next_epoch;       /* train --resume: another batch, precision or data from the next epoch's start */
    const char *html;      /* plan: the memory drawn as one HTML page at this path */
    const char *trace;     /* train: the first trace_steps steps as a Chrome trace at this path */
    int64_t trace_steps;   /* 1..1000; 10 unless given */
    bool profile;          /* train: the per-node table, slowest first, at the end */
} hr_cli_opts;

int hr_cli_parse(int argc, char **argv, hr_cli_opts *o, const char *cmd);
/* The model file, at --context's length when given; NULL with the error set. */
hr_model_t *hr_cli_load_model(const hr_cli_opts *o);
hr_config_t hr_cli_config(const hr_cli_opts *o);
int hr_cmd_plan(const hr_cli_opts *o);
int hr_cmd_fit(const hr_cli_opts *o);
/* train --fit: fit's choice for cfg->batch within o's budget (or what is
 * free), the precision one of `allowed` (bits 1 << HR_PREC_*): sets cfg's
 * accumulation, precision and recomputation (*recompute: the layer list,
 * free()d by the caller) and prints it, `why` after "fit". An exit status. */
int hr_fit_for_train(const hr_cli_opts *o, const hr_model_t *m, hr_config_t *cfg, unsigned allowed, char **recompute,
                     const char *why);
int hr_cmd_train(const hr_cli_opts *o);
int hr_cmd_eval(const hr_cli_opts *o);
int hr_cmd_smi(int argc, char **argv); /* the GPUs as NVML sees them; its own options (--json), no model */
int hr_cmd_generate(int argc, char **argv); /* text sampled from a next-token model (cmd_generate.c); its own options */
int hr_cli_fail(hr_status st); /* prints hr_last_error(), returns the exit code */

/* ---- train --trace and --profile (train_observe.c) ---------------------------
 * The training loop's hooks; with neither option each is a plain pass-through. */
struct hr_trace;
struct hr_loader;
/* --trace: its path checked (a directory, or a place that can't be written:
 * one line, HR_EXIT_USAGE) and the trace made, before anything is planned. */
int hr_train_trace_open(const hr_cli_opts *o, struct hr_trace **tr);
/* Once the session is allocated, before the first step: --profile turned on,
 * the trace attached. An exit status. */
int hr_train_observe_start(const hr_cli_opts *o, hr_session_t *s, struct hr_trace *tr);
/* hr_loader_next, with the wait and the loader's times given to the trace. */
hr_status hr_train_next_batch(struct hr_loader *ld, struct hr_trace *tr, const float **x, const int32_t **y,
                              int64_t *n);
/* After each step: the trace's step ends (its file written after the last
 * traced one). HR_EXIT_OK, or 130 when a SIGINT or SIGTERM came meanwhile. */
int hr_train_step_observed(struct hr_trace *tr, hr_session_t *s, float loss);
/* At the end, whatever rc is: --profile's table, the trace written with why
 * the run stopped, and freed. rc, or HR_EXIT_ERROR when the trace could not
 * be written. */
int hr_train_observe_end(const hr_cli_opts *o, hr_session_t *s, struct hr_trace *tr, int rc);

/* ---- host memory (host_plan.c) ---------------------------------------------
 * What a command holds in host RAM, planned before any data is read or made,
 * against what the host has; a job whose host side does not fit is refused
 * with HR_ERR_OOM, the table, what is available and the largest batch. */
/* The command's data from the IDX headers alone (synthetic: nothing held). */
typedef struct {
    bool synthetic;
    int64_t train_n, test_n; /* samples; train_n 0 when nothing trains (eval) */
    int64_t sample;          /* floats a sample: the files' (IDX) or the model's input (synthetic, text) */
    int64_t labels;          /* labels a sample: 1, or a text window's (one a position) */
    size_t bytes;            /* host bytes the loaded sets take at their peak; 0 when synthetic */
} hr_host_data;
/* o->data peeked for a model whose input has `sample` floats; train false: the
 * test set only (eval). Reads each IDX file's header, none of its data. */
hr_status hr_host_data_peek(const hr_cli_opts *o, int64_t sample, bool train, hr_host_data *out);

typedef enum {
    HR_HOST_DATA = 0,
    HR_HOST_LOADER,
    HR_HOST_PINNED,
    HR_HOST_ARENA,
    HR_HOST_EVAL,
    HR_HOST_CKPT,
    HR_HOST_COUNT
} hr_host_item;
typedef struct {
    const hr_model_t *model;  /* re-planned at smaller batches when a CPU arena does not fit */
    const hr_config_t *cfg;   /* the session's config: batch, eval_batch, mode */
    const hr_session_t *s;    /* its plan (arena, pinned staging); NULL before planning: a lower bound */
    hr_host_data data;
    int64_t loader_batch;     /* the loader's batch (train); 0: no loader (eval: cfg->batch is evaluation's) */
    int64_t eval_batch;       /* train: the evaluation loop's batch (its host buffers); 0: none */
    bool eval_follows;        /* train: eval_batch is min(batch, test_n) (no --eval-batch): the search moves it too */
    int classes;
    size_t ckpt_bytes;        /* train --save: the state's copy that a background checkpoint write holds; 0: none */
} hr_host_job;
typedef struct {
    size_t bytes[HR_HOST_COUNT];
    size_t total;             /* SIZE_MAX if the sum overflows */
    size_t available;         /* what the host has, less the margin */
    size_t margin;
    char source[640];         /* what set `available`: MemAvailable, a cgroup limit, ulimit -v, HR_HOST_MEMORY */
    bool arena_on_host, planned;
} hr_host_plan;
/* HR_OK when the job's host side fits (out filled either way), else HR_ERR_OOM
 * with the table and the largest batch that fits. Call it before planning
 * (s NULL: data, loader and evaluation alone, so an absurd batch is refused
 * before anything is planned) and after (with the session's arena when it is
 * on the CPU and its pinned staging). Allocates nothing. */
hr_status hr_host_check(const hr_host_job *job, hr_host_plan *out);
void hr_host_plan_print(const hr_host_plan *p, FILE *f);
/* Host memory this process may still take: the least of MemAvailable, the room
 * under its cgroups' memory limits (v2 or v1), ulimit -v and HR_HOST_MEMORY;
 * why names which. SIZE_MAX when none is known. */
size_t hr_host_available(char *why, size_t len);

#endif
