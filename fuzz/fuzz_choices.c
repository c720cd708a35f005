/* fuzz_choices.c — libFuzzer target for the reader of the choices files
 * (core/choices.c; the CUDA backend's timed convolution algorithms live in
 * one): any bytes parse without a crash, leak or hang; every choice read is
 * found again with its values; and what is read, written out and read again
 * is the same set of choices (the writer's lines always parse). Nothing
 * touches the file system: the folder given does not exist and nothing is
 * saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/choices.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    hr_choices *a = hr_choices_open("/nonexistent/hr_fuzz_choices", "f.tsv");
    if (!a) abort();
    if (!hr_choices_parse(a, (const char *)data, size)) abort(); /* no memory is not expected here */
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) abort();
    hr_choices_write(a, f, "round trip");
    fclose(f);
    hr_choices *b = hr_choices_open("/nonexistent/hr_fuzz_choices", "f.tsv");
    if (!b || !hr_choices_parse(b, text, n)) abort();
    if (hr_choices_count(a) != hr_choices_count(b)) abort();
    /* every line written names a key: look each one up in both */
    for (char *p = text, *nl; (nl = memchr(p, '\n', n - (size_t)(p - text))) != NULL; p = nl + 1) {
        if (*p == '#') continue;
        char *tab = memchr(p, '\t', (size_t)(nl - p));
        if (!tab) abort();
        *tab = 0;
        int64_t va[3], vb[3];
        if (!hr_choices_get(a, p, va) || !hr_choices_get(b, p, vb) || memcmp(va, vb, sizeof va) || va[2] < 0) abort();
        *tab = '\t';
    }
    free(text);
    hr_choices_free(a);
    hr_choices_free(b);
    return 0;
}
