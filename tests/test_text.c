/* test_text.c — token streams (src/data/text.c): a text's bytes and uint16
 * token files (nanoGPT's raw, llm.c's with its header) cut into windows whose
 * labels are the next tokens, the training/validation split, the loader over
 * them, every bad file named in its error, each allocation failed in turn,
 * and Debian's fortunes read whole. */
#include "check.h"
#include "core/core.h"
#include "data/data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", tmp, name);
    return p;
}

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
}

static void expect_fail(hr_status st, hr_status want, const char *n1, const char *n2, const char *what) {
    const char *msg = hr_last_error();
    CHECK(st == want, "%s: got %s, want %s (%s)", what, hr_status_name(st), hr_status_name(want), msg);
    CHECK(strstr(msg, n1) != NULL, "%s: message lacks \"%s\": %s", what, n1, msg);
    if (n2) CHECK(strstr(msg, n2) != NULL, "%s: message lacks \"%s\": %s", what, n2, msg);
}

/* 100 bytes: windows of 8, a validation tail of 20 */
static void test_bytes(void) {
    unsigned char text[100];
    for (int i = 0; i < 100; i++) text[i] = (unsigned char)(i * 37 + 11);
    write_raw(tpath("t.txt"), text, sizeof text);
    char spec[600];
    snprintf(spec, sizeof spec, "text:%s", tpath("t.txt"));
    CHECK(hr_text_spec(spec) && hr_text_spec("fortunes") && hr_text_spec("x.bin") && !hr_text_spec("synthetic") &&
              !hr_text_spec("fashion-mnist") && !hr_text_spec(".bin"), "which specs are text");
    hr_text_info info;
    CHECK(hr_text_peek(spec, &info) == HR_OK && info.ntokens == 100 && info.vocab == 256 && info.bytes == 200,
          "peek: %lld tokens, vocab %lld: %s", (long long)info.ntokens, (long long)info.vocab, hr_last_error());
    hr_dataset tr, va;
    CHECK(hr_text_load(spec, 8, 0.2, &tr, &va) == HR_OK, "load: %s", hr_last_error());
    /* training: tokens 0..79, windows of 8 with one token after: (80 - 1) / 8 = 9; validation: 80..99, 2 */
    CHECK(tr.ntokens == 80 && tr.n == 9 && tr.seq == 8 && tr.w == 8 && tr.c == 1 && tr.h == 1 && tr.nclasses == 256,
          "training set: %lld tokens, %lld windows", (long long)tr.ntokens, (long long)tr.n);
    CHECK(va.ntokens == 20 && va.n == 2, "validation set: %lld tokens, %lld windows", (long long)va.ntokens,
          (long long)va.n);
    CHECK(hr_dataset_label_len(&tr) == 8 && hr_dataset_host_bytes(&tr) == 160, "labels a sample, bytes held");
    float x[8];
    int32_t y[8];
    CHECK(hr_dataset_sample(&tr, 3, x, y) == HR_OK, "sample: %s", hr_last_error());
    bool ok = true;
    for (int k = 0; k < 8; k++) ok &= x[k] == text[24 + k] && y[k] == text[25 + k];
    CHECK(ok, "window 3 is bytes 24..31, its labels bytes 25..32");
    CHECK(hr_dataset_sample(&va, 1, x, y) == HR_OK && x[0] == text[88] && y[7] == text[96], "a validation window");
    float xs[3 * 8];
    int32_t ys[3 * 8];
    CHECK(hr_dataset_read(&tr, 6, 3, xs, ys) == HR_OK && xs[8] == text[56] && ys[23] == text[72], "read 6..8");

    /* the loader: batches of 4 windows, each with its 8 labels, every window once */
    hr_loader *l = hr_loader_new(&tr, 4, true, false, 5);
    CHECK(l != NULL, "loader: %s", hr_last_error());
    int seen[9] = {0}, total = 0;
    if (l && hr_loader_start_epoch(l, 0, 0) == HR_OK) {
        const float *bx;
        const int32_t *by;
        int64_t n;
        while (hr_loader_next(l, &bx, &by, &n) == HR_OK && n > 0)
            for (int64_t i = 0; i < n; i++) {
                int w = (int)(bx[i * 8] == text[0] ? 0 : -1);
                for (int c = 0; c < 9; c++)
                    if (bx[i * 8] == text[c * 8] && bx[i * 8 + 7] == text[c * 8 + 7]) w = c;
                ok = w >= 0 && by[i * 8 + 7] == text[w * 8 + 8];
                CHECK(ok, "batch sample %lld is a window with its labels", (long long)i);
                if (w >= 0) seen[w]++;
                total++;
            }
    }
    hr_loader_free(l);
    ok = total == 9;
    for (int c = 0; c < 9; c++) ok &= seen[c] == 1;
    CHECK(ok, "an epoch gives every window once (%d)", total);
    CHECK(hr_loader_bytes(9, 8, 8, false, 4) == 2 * 4 * 16 * 4 + 9 * 8, "the loader's bytes count a sample's labels");
    hr_dataset_free(&tr);
    hr_dataset_free(&va);

    /* too short: 20 bytes cannot give two windows of 16 and the token after each */
    write_raw(tpath("short.txt"), text, 20);
    snprintf(spec, sizeof spec, "text:%s", tpath("short.txt"));
    expect_fail(hr_text_load(spec, 16, 0.1, &tr, &va), HR_ERR_FORMAT, "short.txt", "at least 34", "too short");
    CHECK(tr.tokens == NULL && va.tokens == NULL, "a refused load leaves both sets empty");
    snprintf(spec, sizeof spec, "text:%s", tpath("none.txt"));
    expect_fail(hr_text_load(spec, 4, 0.1, &tr, &va), HR_ERR_IO, "none.txt", "No such file", "missing file");
    snprintf(spec, sizeof spec, "text:%s", tmp);
    expect_fail(hr_text_load(spec, 4, 0.1, &tr, &va), HR_ERR_IO, "is not a regular file", NULL, "a directory");
    expect_fail(hr_text_load("fashion-mnist", 4, 0.1, &tr, &va), HR_ERR_INVALID_ARG, "not a text source", NULL,
                "not text");
    expect_fail(hr_text_load(spec, 0, 0.1, &tr, &va), HR_ERR_INVALID_ARG, "windows of 0", NULL, "seq 0");
    expect_fail(hr_text_load(spec, 4, 1.0, &tr, &va), HR_ERR_INVALID_ARG, "fraction", NULL, "fraction 1");
}

/* uint16 token files: nanoGPT's raw, llm.c's with a header; damaged ones */
static void test_bin(void) {
    uint16_t tok[300];
    for (int i = 0; i < 300; i++) tok[i] = (uint16_t)((i * 7919) % 50257);
    tok[17] = 50256;
    write_raw(tpath("raw.bin"), tok, sizeof tok);
    hr_dataset tr, va;
    CHECK(hr_text_load(tpath("raw.bin"), 16, 0.1, &tr, &va) == HR_OK, "raw: %s", hr_last_error());
    CHECK(tr.ntokens == 270 && va.ntokens == 30 && tr.nclasses == 50257 && tr.tokens[17] == 50256,
          "raw: %lld + %lld tokens, vocab %d", (long long)tr.ntokens, (long long)va.ntokens, tr.nclasses);
    hr_dataset_free(&tr);
    hr_dataset_free(&va);

    int32_t head[256] = {20240520, 1, 300};
    unsigned char file[sizeof head + sizeof tok];
    memcpy(file, head, sizeof head);
    memcpy(file + sizeof head, tok, sizeof tok);
    write_raw(tpath("llmc.bin"), file, sizeof file);
    hr_text_info info;
    CHECK(hr_text_peek(tpath("llmc.bin"), &info) == HR_OK && info.ntokens == 300, "llm.c peek: %s", hr_last_error());
    CHECK(hr_text_load(tpath("llmc.bin"), 16, 0.1, &tr, &va) == HR_OK && tr.ntokens == 270 && tr.tokens[0] == tok[0] &&
              va.tokens[29] == tok[299], "llm.c file: %s", hr_last_error());
    hr_dataset_free(&tr);
    hr_dataset_free(&va);

    head[2] = 301; /* says more than it holds */
    memcpy(file, head, sizeof head);
    write_raw(tpath("bad.bin"), file, sizeof file);
    expect_fail(hr_text_load(tpath("bad.bin"), 16, 0.1, &tr, &va), HR_ERR_FORMAT, "bad.bin", "says 301 tokens",
                "llm.c count");
    head[1] = 7, head[2] = 300;
    memcpy(file, head, sizeof head);
    write_raw(tpath("ver.bin"), file, sizeof file);
    expect_fail(hr_text_load(tpath("ver.bin"), 16, 0.1, &tr, &va), HR_ERR_FORMAT, "ver.bin", "version 7", "version");
    write_raw(tpath("odd.bin"), tok, 301);
    expect_fail(hr_text_load(tpath("odd.bin"), 16, 0.1, &tr, &va), HR_ERR_FORMAT, "odd.bin", "odd number", "odd size");
}

/* Each allocation of a load and its loader failed in turn: an OOM, nothing leaked (ASan/valgrind runs see it). */
static void test_faults(void) {
    char spec[600];
    snprintf(spec, sizeof spec, "text:%s", tpath("t.txt"));
    int injected = 0, k;
    for (k = 1; k < 100; k++) {
        hr_fault_fail_at(k);
        hr_dataset tr, va;
        hr_status st = hr_text_load(spec, 8, 0.2, &tr, &va);
        hr_loader *l = NULL;
        if (st == HR_OK && !(l = hr_loader_new(&tr, 4, true, false, 1))) st = HR_ERR_OOM;
        hr_loader_free(l);
        hr_dataset_free(&tr);
        hr_dataset_free(&va);
        if (hr_fault_fail_at(0) < k) {
            CHECK(st == HR_OK, "without faults: %s", hr_last_error());
            break;
        }
        injected++;
        CHECK(st == HR_ERR_OOM, "allocation %d failed: got %s (%s)", k, hr_status_name(st), hr_last_error());
    }
    CHECK(injected >= 4 && k < 100, "%d allocations failed in turn", injected);
}

/* Debian's fortunes (installed by scripts/deps.sh test): every file but the
 * .dat indexes and the .u8 links, whole */
static void test_fortunes(void) {
    DIR *d = opendir(HR_FORTUNES_DIR);
    CHECK(d != NULL, "%s is missing: scripts/deps.sh test installs Debian's fortunes", HR_FORTUNES_DIR);
    if (!d) return;
    int64_t bytes = 0;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char path[600];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", HR_FORTUNES_DIR, e->d_name);
        if (e->d_name[0] == '.' || (n > 4 && (!strcmp(e->d_name + n - 4, ".dat"))) || (n > 3 && !strcmp(e->d_name + n - 3, ".u8")) ||
            stat(path, &sb) || !S_ISREG(sb.st_mode))
            continue;
        bytes += sb.st_size, files++;
    }
    closedir(d);
    hr_dataset tr, va;
    CHECK(hr_text_load("fortunes", 256, 0.1, &tr, &va) == HR_OK, "fortunes: %s", hr_last_error());
    CHECK(files > 10 && tr.ntokens + va.ntokens == bytes && tr.n == (tr.ntokens - 1) / 256,
          "fortunes: %d files, %lld bytes, %lld + %lld tokens", files, (long long)bytes, (long long)tr.ntokens,
          (long long)va.ntokens);
    int64_t printable = 0;
    for (int64_t i = 0; i < tr.ntokens; i++) printable += tr.tokens[i] == '\n' || (tr.tokens[i] >= 32 && tr.tokens[i] < 127);
    CHECK(printable > tr.ntokens * 9 / 10, "fortunes are text: %lld of %lld bytes printable", (long long)printable,
          (long long)tr.ntokens);
    printf("fortunes: %d files, %lld bytes: %lld training windows of 256, %lld validation\n", files, (long long)bytes,
           (long long)tr.n, (long long)va.n);
    hr_dataset_free(&tr);
    hr_dataset_free(&va);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/hr_test_text.%d", (int)getpid());
    mkdir(tmp, 0755);
    test_bytes();
    test_bin();
    test_faults();
    test_fortunes();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    TEST_END();
}
