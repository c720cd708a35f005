/* fuzz_cli.c — libFuzzer target for the headroom command line: any argv (the
 * input split at NULs or newlines) must parse into sane options or give one
 * "headroom CMD: ..." line and the usage status; nothing runs. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* hr_cli_parse lives in src/cli/main.c beside main(), so the file is included
 * here with main renamed, its messages caught in memory streams, and exit()
 * (only --help calls it) turned into a jump back. The commands are linked in
 * (main refers to them) but never called. */
static FILE *fuzz_err, *fuzz_out;
static jmp_buf fuzz_jmp;
static int fuzz_exit_code;
static _Noreturn void fuzz_exit(int code) {
    fuzz_exit_code = code;
    longjmp(fuzz_jmp, 1);
}
#undef stderr
#undef stdout
#define stderr fuzz_err
#define stdout fuzz_out
#define exit fuzz_exit
#define main fuzz_headroom_main
#include "cli/main.c"
#undef main
#undef exit
#undef stdout
#undef stderr

#define MAX_ARGS 64

static int rc, exited;
static hr_cli_opts opts;

static bool is_arg(char **argv, int argc, const char *p) {
    for (int i = 0; i < argc; i++)
        if (argv[i] == p) return true;
    return false;
}

static bool has_help(char **argv, int argc) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size && (data[size - 1] == '\n' || data[size - 1] == 0)) size--; /* one trailing separator */
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    /* argv[0] is the command (plan, train, eval or anything), the rest its arguments */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = buf;
    for (size_t i = 0; i < size; i++)
        if (buf[i] == '\n' || buf[i] == 0) {
            buf[i] = 0;
            if (argc == MAX_ARGS) break; /* the rest is dropped */
            argv[argc++] = buf + i + 1;
        }
    argv[argc] = NULL;

    char *err = NULL, *out = NULL;
    size_t nerr = 0, nout = 0;
    fuzz_err = open_memstream(&err, &nerr);
    fuzz_out = open_memstream(&out, &nout);
    if (!fuzz_err || !fuzz_out) abort();
    exited = 0;
    if (setjmp(fuzz_jmp) == 0)
        rc = hr_cli_parse(argc - 1, argv + 1, &opts, argv[0]);
    else
        exited = 1;
    fclose(fuzz_err);
    fclose(fuzz_out);

    const hr_cli_opts *o = &opts;
    if (exited) {
        /* --help: the usage on stdout, status 0 */
        if (fuzz_exit_code != 0 || !has_help(argv + 1, argc - 1) || strncmp(out, "usage: headroom", 15) || nerr) abort();
    } else if (rc == HR_EXIT_USAGE) {
        /* one line that says which command, on stderr */
        char *nl = strchr(err, '\n');
        if (strncmp(err, "headroom ", 9) || !nl || nl[1] || nout) abort();
    } else if (rc == HR_EXIT_OK) {
        if (nerr || nout || !o->model || !is_arg(argv + 1, argc - 1, o->model)) abort();
        if (!(o->batch == -1 || o->batch >= 1) || o->epochs < 1 || o->samples < 1 || o->max_steps < 0) abort();
        if (!(o->lr == -1 || o->lr >= 0) || !(o->momentum >= 0) || !(o->weight_decay >= 0) || !(o->clip >= 0)) abort();
        if (o->budget_set != (o->budget > 0)) abort();
        if ((unsigned)o->optim > HR_OPTIM_ADAMW || (unsigned)o->mode > HR_MODE_INFER || (unsigned)o->device > HR_DEVICE_AUTO)
            abort();
        const char *paths[] = {o->save, o->resume, o->weights};
        for (int i = 0; i < 3; i++)
            if (paths[i] && !is_arg(argv + 1, argc - 1, paths[i])) abort(); /* paths are arguments, not copies */
        if (strcmp(o->data, "fashion-mnist") && !is_arg(argv + 1, argc - 1, o->data)) abort();
        hr_config_t c = hr_cli_config(o);
        if (c.batch < 1 || c.optim.kind != o->optim || c.device != o->device) abort();
    } else {
        abort(); /* parsing knows only these outcomes */
    }
    free(err);
    free(out);
    free(buf);
    return 0;
}
