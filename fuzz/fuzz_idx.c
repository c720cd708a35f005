/* fuzz_idx.c — libFuzzer target for the IDX reader: any pair of files (the
 * input split at a position its first two bytes name, raw or gzip'd) must
 * load or fail with a message naming a file; never crash, leak or hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/data.h"

/* The two files live in memfds, read through /proc/self/fd/N (zlib's gzopen
 * takes a path): nothing reaches the file system, even after a crash. */
static int fd_img = -1, fd_lab = -1;
static char img[64], lab[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fd_img = memfd_create("fuzz_idx_images", MFD_CLOEXEC);
    fd_lab = memfd_create("fuzz_idx_labels", MFD_CLOEXEC);
    if (fd_img < 0 || fd_lab < 0) abort();
    snprintf(img, sizeof img, "/proc/self/fd/%d", fd_img);
    snprintf(lab, sizeof lab, "/proc/self/fd/%d", fd_lab);
    return 0;
}

static void put(int fd, const unsigned char *p, size_t n) {
    if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, p, n, 0) != (ssize_t)n)) abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 2) return 0;
    size_t cut = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    put(fd_img, data + 2, cut);
    put(fd_lab, data + 2 + cut, size - 2 - cut);
    hr_dataset d = {0};
    hr_status st = hr_idx_load(img, lab, 10, 0.5f, 0.5f, &d);
    if (st == HR_OK) {
        if (d.n < 1 || d.c != 1 || d.h < 1 || d.w < 1 || d.nclasses != 10) abort();
        for (int64_t i = 0; i < d.n; i++)
            if (d.labels[i] < 0 || d.labels[i] >= 10) abort(); /* the reader promised the range */
        for (int64_t i = 0; i < d.n * d.h * d.w; i++)
            if (!(d.images[i] >= -1.0f && d.images[i] <= 1.0f)) abort(); /* (v/255 - 0.5)/0.5 */
    } else if (!strstr(hr_last_error(), "/proc/self/fd/") && !strstr(hr_last_error(), "could not allocate")) {
        abort(); /* every error names the file */
    } else if (d.n || d.images || d.labels) {
        abort(); /* a failure leaves *out zeroed */
    }
    hr_dataset_free(&d);
    return 0;
}
