/* device_arena.h — the GPU kernel tests' device memory: one arena on the
 * backend `be` (its main allocates dsize bytes into dbase; the CUDA backend
 * poisons it with NaN under HR_CUDA_POISON), cut front to back by dalloc and
 * given back whole by setting dused to 0; up and down copy through the
 * backend and fail the test loudly. An includer may set HR_TEST_ARENA_BYTES
 * first (default 512 MiB). */
#ifndef HR_TEST_DEVICE_ARENA_H
#define HR_TEST_DEVICE_ARENA_H

#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "check.h"

#ifndef HR_TEST_ARENA_BYTES
#define HR_TEST_ARENA_BYTES ((size_t)512 << 20)
#endif

static hr_backend *be;
static char *dbase;
static size_t dsize = HR_TEST_ARENA_BYTES, dused;
static void *dalloc(size_t n) {
    size_t o = hr_align_up(dused, HR_ALIGN);
    if (o + n > dsize) {
        fprintf(stderr, "test arena exhausted\n");
        exit(2);
    }
    dused = o + n;
    return dbase + o;
}
static void up(void *d, const void *h, size_t n) { CHECK(be->upload(be, d, h, n) == HR_OK, "upload: %s", hr_last_error()); }
static void down(void *h, const void *d, size_t n) {
    CHECK(be->download(be, h, d, n) == HR_OK, "download: %s", hr_last_error());
}

#endif
