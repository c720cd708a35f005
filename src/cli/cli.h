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
    int64_t eval_batch;    /* train, plan (train mode): the evaluation pass's batch; 0: none; -1: the batch */
    double lr;
    hr_optim_kind optim;
    hr_mode mode;
    hr_device device;
    uint64_t seed;
    bool json, memory_stats, quiet, budget_set;
    size_t budget;
    double momentum, weight_decay, clip;
    bool nesterov;
} hr_cli_opts;

int hr_cli_parse(int argc, char **argv, hr_cli_opts *o, const char *cmd);
hr_config_t hr_cli_config(const hr_cli_opts *o);
int hr_cmd_plan(const hr_cli_opts *o);
int hr_cmd_train(const hr_cli_opts *o);
int hr_cmd_eval(const hr_cli_opts *o);
int hr_cmd_smi(int argc, char **argv); /* the GPUs as NVML sees them; its own options (--json), no model */
int hr_cli_fail(hr_status st); /* prints hr_last_error(), returns the exit code */

#endif
