/* safetensors_mutator.h — a libFuzzer custom mutator for safetensors inputs:
 * most mutations go to the JSON header alone and the 8-byte length in front is
 * rewritten to match, so a header may grow or shrink and stay a header (the
 * default mutations break the length and stop at the first check). */
#ifndef FUZZ_SAFETENSORS_MUTATOR_H
#define FUZZ_SAFETENSORS_MUTATOR_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t n = 0;
    for (int i = 0; i < 8 && i < (int)size; i++) n |= (uint64_t)data[i] << (8 * i);
    /* a quarter of the time, or when there is no header to keep: anywhere */
    if (seed % 4 == 0 || size < 8 || n > size - 8 || size - 8 - n >= max_size - 8)
        return LLVMFuzzerMutate(data, size, max_size);
    size_t tail = size - 8 - (size_t)n;
    uint8_t *saved = malloc(tail ? tail : 1);
    if (!saved) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(saved, data + 8 + n, tail);
    size_t nn = LLVMFuzzerMutate(data + 8, (size_t)n, max_size - 8 - tail);
    memcpy(data + 8 + nn, saved, tail);
    free(saved);
    for (int i = 0; i < 8; i++) data[i] = (uint8_t)((uint64_t)nn >> (8 * i));
    return 8 + nn + tail;
}

#endif
