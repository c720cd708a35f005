/* fuzz_checkpoint.c — libFuzzer target for the checkpoint loader: any file must
 * load into a session, or fail with a message and leave the session as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/io.h"
#include "checkpoint_model.h"
#include "safetensors_mutator.h"

/* The input lives in a memfd and is read through /proc/self/fd/N: the loader
 * takes a path, and nothing reaches the file system (nothing to remove, even
 * after a crash). */
static int memfd = -1;
static char path[64];
static hr_model_t *model;

/* A session and its state as it was before any load: after each input the
 * state must still be this (a failed load) or is put back (a good one). */
typedef struct {
    hr_session_t *s;
    int n;
    float **data;
    size_t *bytes;
} fixture;
static fixture fx[FUZZ_CKPT_SESSIONS];

static size_t state_numel(hr_session_t *s, int i) {
    size_t n = 1;
    for (int d = 0; d < hr_state_ndim(s, i); d++) n *= (size_t)hr_state_dim(s, i, d);
    return n;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, hr_last_error());
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    memfd = memfd_create("fuzz_checkpoint", MFD_CLOEXEC);
    if (memfd < 0) fail("memfd_create");
    snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    model = hr_modelfile_parse(FUZZ_CKPT_MODEL, "fuzz_checkpoint.model");
    if (!model) fail("model");
    for (int k = 0; k < FUZZ_CKPT_SESSIONS; k++) {
        fixture *f = &fx[k];
        if (!(f->s = fuzz_ckpt_session(model, k))) fail(FUZZ_CKPT_NAMES[k]);
        f->n = hr_state_count(f->s);
        f->data = calloc((size_t)f->n, sizeof *f->data);
        f->bytes = calloc((size_t)f->n, sizeof *f->bytes);
        if (!f->data || !f->bytes) abort();
        for (int i = 0; i < f->n; i++) {
            f->bytes[i] = state_numel(f->s, i) * sizeof(float);
            if (!(f->data[i] = malloc(f->bytes[i]))) abort();
            if (hr_state_read(f->s, i, f->data[i]) != HR_OK) fail("read state");
        }
    }
    return 0;
}

static bool unchanged(fixture *f) {
    static float buf[4096];
    for (int i = 0; i < f->n; i++) {
        if (f->bytes[i] > sizeof buf) abort(); /* the model above is tiny */
        if (hr_state_read(f->s, i, buf) != HR_OK) fail("read state");
        if (memcmp(buf, f->data[i], f->bytes[i])) return false;
    }
    return hr_step_count(f->s) == 0;
}

static void restore(fixture *f) {
    for (int i = 0; i < f->n; i++)
        if (hr_state_write(f->s, i, f->data[i]) != HR_OK) fail("restore state");
    if (hr_set_step_count(f->s, 0) != HR_OK) fail("restore step");
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (ftruncate(memfd, 0) != 0 || (size && pwrite(memfd, data, size, 0) != (ssize_t)size)) abort();
    for (int k = 0; k < FUZZ_CKPT_SESSIONS; k++) {
        fixture *f = &fx[k];
        hr_ckpt_meta meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.model, sizeof meta.model, "fuzz");
        hr_status st = hr_checkpoint_load(f->s, path, k == FUZZ_CKPT_ADAM ? &meta : NULL);
        if (st == HR_OK) {
            /* headroom's own file sets the step; plain weights leave it alone */
            if (k == FUZZ_CKPT_ADAM && hr_step_count(f->s) != (meta.fingerprint[0] ? meta.step : 0))
                abort();
            restore(f);
            continue;
        }
        const char *msg = hr_last_error();
        if (!strstr(msg, path) && !strstr(msg, "could not allocate")) abort(); /* every error names the file */
        if (strstr(msg, "partly loaded")) {
            restore(f); /* an I/O or device failure after the checks: said so, and allowed */
            continue;
        }
        if (!unchanged(f)) abort(); /* a refused file must not have changed anything */
    }
    return 0;
}
