/* synthetic.c — random data sets of any shape, for benchmarks, memory plans and
 * tests that must not depend on files: N(0,1) inputs, uniform labels. */
#include "data/data.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

/* A double in (0, 1]: never 0, so log() below stays finite. */
static double uniform_open0(hr_rng *r) { return ((hr_rng_next(r) >> 11) + 1) * 0x1.0p-53; }

hr_status hr_synthetic_make(int64_t n, int c, int h, int w, int nclasses, uint64_t seed, hr_dataset *out) {
    if (!out) return hr_error_set(HR_ERR_INVALID_ARG, "hr_synthetic_make: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 1 || c < 1 || h < 1 || w < 1 || nclasses < 1)
        return hr_error_set(HR_ERR_INVALID_ARG,
                            "hr_synthetic_make: n=%lld, shape (%d, %d, %d) and nclasses=%d must all be >= 1",
                            (long long)n, c, h, w, nclasses);
    int64_t per = 0, total = 0;
    if (!hr_mul_ok((int64_t)c * h, w, &per) || !hr_mul_ok(n, per, &total) ||
        total > (int64_t)(SIZE_MAX / sizeof(float) / 2))
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_synthetic_make: %lld samples of (%d, %d, %d) floats overflow "
                            "the address space; ask for fewer samples", (long long)n, c, h, w);

    out->images = hr_malloc((size_t)total * sizeof(float));
    out->labels = out->images ? hr_malloc((size_t)n * sizeof(int32_t)) : NULL;
    if (!out->labels) {
        hr_dataset_free(out);
        return HR_ERR_OOM;
    }
    /* Two streams, so the labels do not change when the shape does. */
    hr_rng rx = hr_rng_seed(seed), ry = hr_rng_seed(seed ^ 0x6C6162656C73ull /* "labels" */);
    /* Box-Muller: exact, and simple enough to re-implement elsewhere bit for
     * bit; each pair of uniforms gives two independent normals. */
    for (int64_t i = 0; i < total; i += 2) {
        double rad = sqrt(-2.0 * log(uniform_open0(&rx)));
        double ang = 2.0 * M_PI * uniform_open0(&rx);
        out->images[i] = (float)(rad * cos(ang));
        if (i + 1 < total) out->images[i + 1] = (float)(rad * sin(ang));
    }
    for (int64_t i = 0; i < n; i++) out->labels[i] = (int32_t)hr_rng_below(&ry, (uint64_t)nclasses);
    out->n = n;
    out->c = c;
    out->h = h;
    out->w = w;
    out->nclasses = nclasses;
    return HR_OK;
}
