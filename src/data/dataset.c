/* dataset.c — one data set, held in RAM (IDX) or made on demand (synthetic),
 * read the same way: a sample, a range of samples, the bytes it holds. */
#include "data/data.h"

#include <string.h>

#include "core/core.h"

static hr_status check_set(const hr_dataset *d, const char *fn) {
    if (!d || d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 ||
        (!d->synthetic && !d->tokens && (!d->images || !d->labels)))
        return hr_error_set(HR_ERR_INVALID_ARG, "%s: the data set is NULL or empty; load or make one first", fn);
    return HR_OK;
}

hr_status hr_dataset_sample(const hr_dataset *d, int64_t i, float *x, int32_t *label) {
    hr_status st = check_set(d, "hr_dataset_sample");
    if (st) return st;
    if (i < 0 || i >= d->n)
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_dataset_sample: sample %lld of a set of %lld; use 0..%lld",
                            (long long)i, (long long)d->n, (long long)d->n - 1);
    if (d->synthetic) {
        hr_synthetic_sample(d, i, x, label);
        return HR_OK;
    }
    if (d->tokens) {
        hr_token_window(d, i, x, label);
        return HR_OK;
    }
    int64_t per = (int64_t)d->c * d->h * d->w;
    if (x) memcpy(x, d->images + i * per, sizeof(float) * (size_t)per);
    if (label) *label = d->labels[i];
    return HR_OK;
}

hr_status hr_dataset_read(const hr_dataset *d, int64_t first, int64_t count, float *x, int32_t *labels) {
    hr_status st = check_set(d, "hr_dataset_read");
    if (st) return st;
    if (first < 0 || count < 0 || first > d->n || count > d->n - first)
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_dataset_read: samples %lld..%lld of a set of %lld",
                            (long long)first, (long long)first + count - 1, (long long)d->n);
    if (!x && !labels) return HR_OK;
    int64_t per = (int64_t)d->c * d->h * d->w, nl = hr_dataset_label_len(d);
    if (d->tokens) {
        for (int64_t i = 0; i < count; i++) hr_token_window(d, first + i, x ? x + i * per : NULL, labels ? labels + i * nl : NULL);
        return HR_OK;
    }
    if (!d->synthetic) {
        if (x) memcpy(x, d->images + first * per, sizeof(float) * (size_t)(count * per));
        if (labels) memcpy(labels, d->labels + first, sizeof(int32_t) * (size_t)count);
        return HR_OK;
    }
    for (int64_t i = 0; i < count; i++)
        hr_synthetic_sample(d, first + i, x ? x + i * per : NULL, labels ? labels + i : NULL);
    return HR_OK;
}

size_t hr_dataset_host_bytes(const hr_dataset *d) {
    if (d && d->tokens) return (size_t)d->ntokens * sizeof(uint16_t);
    if (!d || d->synthetic || !d->images) return 0;
    return (size_t)d->n * ((size_t)d->c * d->h * d->w * sizeof(float) + sizeof(int32_t));
}

void hr_dataset_free(hr_dataset *d) {
    if (!d) return;
    hr_free(d->images);
    hr_free(d->labels);
    hr_free(d->tokens);
    memset(d, 0, sizeof *d);
}
