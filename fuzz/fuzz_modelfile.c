/* fuzz_modelfile.c — libFuzzer target for the model-file parser: any text
 * must give a model or NULL with a message, never a crash, leak or hang. */
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the parser takes C text; a NUL inside just ends it early */
    hr_model_t *m = hr_modelfile_parse(text, "fuzz.model");
    if (m) {
        int o = hr_model_output(m);
        for (int i = 0; i < hr_tensor_ndim(m, o); i++) (void)hr_tensor_dim(m, o, i);
    } else if (strncmp(hr_last_error(), "fuzz.model:", 11) != 0 && !strstr(hr_last_error(), "could not allocate")) {
        abort(); /* every parse error must say where */
    }
    hr_model_free(m);
    free(text);
    return 0;
}
