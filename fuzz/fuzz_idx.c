/* fuzz_idx.c — libFuzzer target for the IDX reader: any pair of files (the
 * input split at a position its first two bytes name, raw or gzip'd) must
 * load or fail with a message naming a file; never crash, leak or hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"

static void put(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 2) return 0;
    size_t cut = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    char img[64], lab[64];
    snprintf(img, sizeof img, "/tmp/fuzz_idx_%d.img", (int)getpid());
    snprintf(lab, sizeof lab, "/tmp/fuzz_idx_%d.lab", (int)getpid());
    put(img, data + 2, cut);
    put(lab, data + 2 + cut, size - 2 - cut);
    hr_dataset d = {0};
    hr_status st = hr_idx_load(img, lab, 10, 0.5f, 0.5f, &d);
    if (st == HR_OK) {
        for (int64_t i = 0; i < d.n; i++)
            if (d.labels[i] < 0 || d.labels[i] >= 10) abort(); /* the reader promised the range */
    } else if (!strstr(hr_last_error(), "/tmp/fuzz_idx_") && !strstr(hr_last_error(), "could not allocate")) {
        abort(); /* every error names the file */
    }
    hr_dataset_free(&d);
    return 0;
}
