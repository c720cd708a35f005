/* test_ckpt_writer.c — checkpoints written in the background (train --save's
 * per-epoch saves): the file is the one hr_checkpoint_save writes at the same
 * moment, byte for byte, although training goes on (and changes the state)
 * while it is written; a failed write is reported by the next save or the
 * wait, naming the file, and leaves the previous checkpoint whole; every
 * allocation of a background save may fail (the save then reports a clean
 * out-of-memory error or writes the file at once: never a wrong file). */
#include "check.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *path_in(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b && len > 0 && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na > 0 && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* a Linear and a LayerNorm, AdamW (optimizer state in the file too) */
static hr_session_t *session(void) {
    hr_model_t *m = hr_model_new("writer");
    int x = hr_input(m, "x", 1, (int64_t[]){24});
    x = hr_linear(m, "fc", x, 24, 32, true);
    x = hr_layernorm(m, "ln", x, 1, (int64_t[]){32}, 1e-5f, true, true);
    x = hr_linear(m, "head", x, 32, 5, true);
    hr_loss_cross_entropy(m, x, 5);
    hr_config_t c = hr_config_default();
    c.batch = 8, c.seed = 3, c.optim.kind = HR_OPTIM_ADAMW;
    hr_session_t *s = hr_compile(m, &c);
    hr_model_free(m);
    if (s && hr_session_alloc(s) != HR_OK) {
        hr_session_free(s);
        s = NULL;
    }
    CHECK(s != NULL, "session: %s", hr_last_error());
    return s;
}

static float X[8 * 24];
static int32_t Y[8] = {0, 1, 2, 3, 4, 0, 1, 2};

static void step(hr_session_t *s) {
    float loss;
    CHECK(hr_train_step(s, X, Y, &loss) == HR_OK, "step: %s", hr_last_error());
}

static void test_snapshot(void) {
    hr_session_t *s = session();
    if (!s) return;
    hr_ckpt_writer *w = hr_ckpt_writer_new();
    char a[128], b[128], c[128];
    hr_ckpt_meta meta = {.epoch = 2, .seed = 3};
    snprintf(meta.model, sizeof meta.model, "writer");
    step(s);
    CHECK(hr_checkpoint_save(s, path_in("sync.ckpt", a, sizeof a), &meta) == HR_OK, "sync save: %s", hr_last_error());
    CHECK(hr_ckpt_writer_save(w, s, path_in("bg.ckpt", b, sizeof b), &meta) == HR_OK, "background save: %s",
          hr_last_error());
    for (int k = 0; k < 3; k++) step(s); /* the state moves on while the file is written */
    CHECK(hr_ckpt_writer_wait(w) == HR_OK, "wait: %s", hr_last_error());
    CHECK(same_file(a, b), "the background file is the synchronous one of the same moment, byte for byte");
    /* a second save through the same writer (its buffer reused) */
    CHECK(hr_checkpoint_save(s, a, &meta) == HR_OK && hr_ckpt_writer_save(w, s, b, &meta) == HR_OK, "saves: %s",
          hr_last_error());
    step(s);
    CHECK(hr_ckpt_writer_wait(w) == HR_OK && same_file(a, b), "the second background file matches too");
    /* a file that cannot be written: the error comes with the next save, naming the file; bg.ckpt stays */
    CHECK(hr_ckpt_writer_save(w, s, path_in("no/such/dir/x.ckpt", c, sizeof c), &meta) == HR_OK,
          "a doomed save starts: %s", hr_last_error());
    hr_status st = hr_ckpt_writer_save(w, s, b, &meta);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "no/such/dir/x.ckpt"), "the failed write is the next save's error: %s",
          hr_last_error());
    CHECK(same_file(a, b), "the previous checkpoint is untouched");
    CHECK(hr_ckpt_writer_wait(w) == HR_OK, "nothing pending after the error is reported");
    /* a session loads the background file */
    hr_session_t *r = session();
    if (r) CHECK(hr_checkpoint_load(r, b, NULL) == HR_OK, "the background file loads: %s", hr_last_error());
    hr_session_free(r);
    hr_ckpt_writer_free(w);
    hr_session_free(s);
}

/* every allocation of a background save fails in turn */
static void test_faults(void) {
    hr_session_t *s = session();
    if (!s) return;
    char a[128], b[128];
    hr_ckpt_meta meta = {.epoch = 1};
    step(s);
    CHECK(hr_checkpoint_save(s, path_in("ref.ckpt", a, sizeof a), &meta) == HR_OK, "reference: %s", hr_last_error());
    int clean = 0, total = 0;
    for (int k = 1; k < 200; k++) {
        hr_fault_fail_at(k);
        hr_ckpt_writer *w = hr_ckpt_writer_new();
        hr_status st = w ? hr_ckpt_writer_save(w, s, path_in("f.ckpt", b, sizeof b), &meta) : HR_ERR_OOM;
        if (st == HR_OK) st = hr_ckpt_writer_wait(w);
        int64_t made = hr_fault_fail_at(0);
        hr_ckpt_writer_free(w);
        total++;
        bool ok = st == HR_OK ? same_file(a, b) : st == HR_ERR_OOM && strstr(hr_last_error(), "memory") != NULL;
        if (!ok) printf("  allocation %d failing: status %d, %s\n", k, (int)st, hr_last_error());
        clean += ok;
        unlink(b);
        if (st == HR_OK && made < k) break; /* the kth allocation was never reached: all done */
    }
    printf("  %d allocations failed in turn\n", total - 1);
    CHECK(total > 3 && clean == total, "%d of %d runs with an allocation failing ended cleanly (an OOM error, or the "
          "right file)", clean, total);
    hr_session_free(s);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hr_test_writer.XXXXXX");
    if (!mkdtemp(dir)) return 2;
    for (int i = 0; i < 8 * 24; i++) X[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    test_snapshot();
    test_faults();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    TEST_END();
}
