/* fuzz_safetensors.c — libFuzzer target for the safetensors reader: any bytes
 * must open as a valid table (then every tensor reads in bounds) or fail cleanly.
 * Its mutator (safetensors_mutator.h) mostly mutates the JSON header alone. */
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "safetensors_mutator.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    hr_safetensors_t *f = hr_safetensors_open_memory(data, size, "fuzz.safetensors");
    if (!f) return 0;
    for (int i = 0; i < hr_safetensors_count(f); i++) {
        const hr_st_tensor *t = hr_safetensors_at(f, i);
        if (hr_safetensors_find(f, t->name) != t) abort(); /* names are unique and found */
        /* Reads go through a buffer of exactly the tensor's size: ASan sees any overrun. */
        size_t n = (size_t)(t->end - t->begin);
        if (n > (1 << 20)) continue;
        void *buf = malloc(n ? n : 1);
        float *f32 = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        if (buf && hr_safetensors_read(f, t, buf) != HR_OK) abort();
        if (f32) (void)hr_safetensors_read_f32(f, t, f32);
        free(buf);
        free(f32);
    }
    for (int i = 0; i < hr_safetensors_meta_count(f); i++)
        if (!hr_safetensors_meta(f, hr_safetensors_meta_key(f, i))) abort();
    hr_safetensors_free(f);
    return 0;
}
