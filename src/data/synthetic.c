/* synthetic.c — random data sets of any shape and size, for benchmarks, memory
 * plans and tests that must not depend on files: N(0,1) inputs, uniform labels,
 * each sample made on demand from (seed, index), never the whole set. */
#include "data/data.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

/* Two streams, so the labels do not change when the shape does. */
#define STREAM_INPUTS 0ull
#define STREAM_LABELS 0x6C6162656C73ull /* "labels" */

/* Sample i's own generator, keyed by (seed, stream, i): the key is splitmix64
 * of the mixed seed xor i, a bijection of i, so no two samples share a key,
 * and hr_rng_seed spreads it over xoshiro's 256 bits. A sample is then made
 * alone, in any order, by any thread. */
static hr_rng sample_rng(uint64_t seed, uint64_t stream, int64_t i) {
    uint64_t x = seed ^ stream;
    x = hr_splitmix64(&x) ^ (uint64_t)i;
    return hr_rng_seed(hr_splitmix64(&x));
}

/* A double in (0, 1]: never 0, so log() below stays finite. */
static double uniform_open0(hr_rng *r) { return ((hr_rng_next(r) >> 11) + 1) * 0x1.0p-53; }

void hr_synthetic_sample(const hr_dataset *d, int64_t i, float *x, int32_t *label) {
    if (x) {
        int64_t per = (int64_t)d->c * d->h * d->w;
        hr_rng r = sample_rng(d->seed, STREAM_INPUTS, i);
        /* Box-Muller: exact, and simple enough to re-implement elsewhere bit
         * for bit; each pair of uniforms gives two independent normals (an odd
         * sample's last pair gives one). */
        for (int64_t j = 0; j < per; j += 2) {
            double rad = sqrt(-2.0 * log(uniform_open0(&r)));
            double ang = 2.0 * M_PI * uniform_open0(&r);
            x[j] = (float)(rad * cos(ang));
            if (j + 1 < per) x[j + 1] = (float)(rad * sin(ang));
        }
    }
    if (label) {
        hr_rng r = sample_rng(d->seed, STREAM_LABELS, i);
        *label = (int32_t)hr_rng_below(&r, (uint64_t)d->nclasses);
    }
}

hr_status hr_synthetic_make(int64_t n, int c, int h, int w, int nclasses, uint64_t seed, hr_dataset *out) {
    if (!out) return hr_error_set(HR_ERR_INVALID_ARG, "hr_synthetic_make: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 1 || c < 1 || h < 1 || w < 1 || nclasses < 1)
        return hr_error_set(HR_ERR_INVALID_ARG,
                            "hr_synthetic_make: n=%lld, shape (%d, %d, %d) and nclasses=%d must all be >= 1",
                            (long long)n, c, h, w, nclasses);
    /* Nothing is held, but every index arithmetic over the set (sample i's
     * offset in a flat view, a loader's batch) stays within int64. */
    int64_t per = 0, total = 0;
    if (!hr_mul_ok((int64_t)c * h, w, &per) || !hr_mul_ok(n, per, &total))
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_synthetic_make: %lld samples of (%d, %d, %d) floats overflow "
                            "a 64-bit count; ask for fewer samples", (long long)n, c, h, w);
    out->n = n;
    out->c = c;
    out->h = h;
    out->w = w;
    out->nclasses = nclasses;
    out->synthetic = true;
    out->seed = seed;
    return HR_OK;
}
