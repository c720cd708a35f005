/* loader.c — the batch loader: one background thread gathers (or, for a
 * synthetic set, makes) batch k+1 into one buffer while the caller trains on
 * batch k from the other (double buffering). */
#include "data/data.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

/* Six rounds of a keyed splitmix64 round function: four make a pseudo-random
 * permutation (Luby-Rackoff); two more cost nothing next to making a sample. */
#define FEISTEL_ROUNDS 6

/* Slot k % 2 holds batch k. The worker fills slot s only when it is neither
 * ready (filled, not yet taken) nor held by the caller, so the two threads
 * never touch the same buffer at once; the mutex orders every hand-over. */
struct hr_loader {
    const hr_dataset *d;
    int64_t batch, nbatches, sample; /* sample: floats per sample */
    int64_t labels;                  /* labels per sample */
    bool shuffle;
    uint64_t seed;
    int64_t *perm; /* a held set's order this epoch; rewritten only while the worker is idle */
    /* a synthetic set's order: a Feistel network on 2*half bits, keyed per epoch */
    int half;
    uint64_t key[FEISTEL_ROUNDS];

    float *x[2];
    int32_t *y[2];
    int64_t count[2]; /* samples in each slot's batch */
    double when[2][2]; /* when the worker began and ended gathering each slot's batch (traces) */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started;   /* an epoch was started: until then there is no order to follow */
    bool ready[2];  /* slot filled, not yet taken */
    int held;       /* slot the caller holds, -1 if none */
    bool busy;      /* the worker is filling a slot outside the lock */
    bool quit;
    int64_t fill;   /* next batch the worker fills */
    int64_t take;   /* next batch the caller takes */
};

/* The epoch's generator, seeded from (seed, epoch) alone, so a resumed run
 * rebuilds the same order without saved RNG state. */
static hr_rng epoch_rng(const hr_loader *l, int64_t epoch) {
    uint64_t mix = (uint64_t)epoch;
    return hr_rng_seed(l->seed ^ hr_splitmix64(&mix));
}

/* A held set: Fisher-Yates over an array of its indices. A synthetic one:
 * the round keys of a bijection that feistel() evaluates index by index. */
static void make_perm(hr_loader *l, int64_t epoch) {
    hr_rng r = epoch_rng(l, epoch);
    if (!l->perm) {
        for (int k = 0; k < FEISTEL_ROUNDS; k++) l->key[k] = hr_rng_next(&r);
        return;
    }
    int64_t n = l->d->n;
    for (int64_t i = 0; i < n; i++) l->perm[i] = i;
    if (!l->shuffle) return;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)hr_rng_below(&r, (uint64_t)i + 1), t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

/* Position i of a synthetic set's shuffled order: a balanced Feistel network
 * permutes [0, 4^half), the smallest such range holding n (so fewer than 4n
 * values), and values past n are walked through it again until they land
 * inside (cycle walking), which keeps it a bijection of [0, n). */
static int64_t feistel(const hr_loader *l, int64_t i) {
    uint64_t mask = ((uint64_t)1 << l->half) - 1, x = (uint64_t)i, n = (uint64_t)l->d->n;
    do {
        uint64_t left = x >> l->half, right = x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
            uint64_t z = l->key[k] ^ right, t = right;
            right = left ^ (hr_splitmix64(&z) & mask);
            left = t;
        }
        x = left << l->half | right;
    } while (x >= n);
    return (int64_t)x;
}

/* Batch b's samples into slot s; runs without the lock, on data that nobody
 * else writes meanwhile (see the struct's comment). */
static void gather(hr_loader *l, int64_t b, int s) {
    const hr_dataset *d = l->d;
    int64_t first = b * l->batch, m = d->n - first < l->batch ? d->n - first : l->batch;
    size_t bytes = (size_t)l->sample * sizeof(float);
    for (int64_t i = 0; i < m; i++) {
        if (d->synthetic) {
            int64_t k = l->shuffle ? feistel(l, first + i) : first + i;
            hr_synthetic_sample(d, k, l->x[s] + i * l->sample, &l->y[s][i]);
        } else if (d->tokens) {
            hr_token_window(d, l->perm[first + i], l->x[s] + i * l->sample, l->y[s] + i * l->labels);
        } else {
            int64_t k = l->perm[first + i];
            memcpy(l->x[s] + i * l->sample, d->images + k * l->sample, bytes);
            l->y[s][i] = d->labels[k];
        }
    }
    l->count[s] = m;
}

static double loader_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *worker(void *arg) {
    hr_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        int s = (int)(l->fill % 2);
        while (!l->quit && (!l->started || l->fill >= l->nbatches || l->ready[s] || l->held == s)) {
            pthread_cond_wait(&l->cv, &l->mu);
            s = (int)(l->fill % 2);
        }
        if (l->quit) break;
        int64_t b = l->fill;
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        double t0 = loader_clock();
        gather(l, b, s);
        l->when[s][0] = t0, l->when[s][1] = loader_clock(); /* handed over with the slot, under the lock below */
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        l->ready[s] = true;
        l->fill = b + 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void loader_release(hr_loader *l) {
    for (int s = 0; s < 2; s++) {
        hr_free(l->x[s]);
        hr_free(l->y[s]);
    }
    hr_free(l->perm);
    hr_free(l);
}

hr_loader *hr_loader_new(const hr_dataset *d, int64_t batch, bool shuffle, bool drop_last, uint64_t seed) {
    if (!d || d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 ||
        (!d->synthetic && !d->tokens && (!d->images || !d->labels))) {
        hr_error_set(HR_ERR_INVALID_ARG, "hr_loader_new: the data set is NULL or empty; load one first");
        return NULL;
    }
    if (batch < 1 || (drop_last && batch > d->n)) {
        hr_error_set(HR_ERR_INVALID_ARG,
                     "hr_loader_new: batch %lld for %lld samples%s; use a batch in 1..%lld",
                     (long long)batch, (long long)d->n, drop_last ? " with drop_last gives no batch at all" : "",
                     (long long)d->n);
        return NULL;
    }
    hr_loader *l = hr_calloc(1, sizeof *l);
    if (!l) return NULL;
    l->d = d;
    l->batch = batch;
    l->shuffle = shuffle;
    l->seed = seed;
    l->sample = (int64_t)d->c * d->h * d->w;
    l->labels = hr_dataset_label_len(d);
    l->nbatches = drop_last ? d->n / batch : (d->n + batch - 1) / batch;
    l->held = -1;
    /* A batch never holds more than n samples, whatever was asked for. */
    int64_t rows = batch < d->n ? batch : d->n, floats;
    if (!hr_mul_ok(rows, l->sample, &floats) || floats > (int64_t)(SIZE_MAX / sizeof(float) / 4)) {
        hr_error_set(HR_ERR_INVALID_ARG, "hr_loader_new: a batch of %lld samples of %lld floats is too large",
                     (long long)rows, (long long)l->sample);
        loader_release(l);
        return NULL;
    }
    /* Everything is allocated here, so the worker never allocates and an OOM
     * can only happen before training starts. A synthetic set needs no order
     * array: its 4^half range is the smallest holding n. */
    while (d->synthetic && l->half < 32 && ((uint64_t)d->n - 1) >> 2 * l->half) l->half++;
    bool ok = d->synthetic || (l->perm = hr_malloc((size_t)d->n * sizeof(int64_t))) != NULL;
    for (int s = 0; s < 2 && ok; s++)
        ok = (l->x[s] = hr_malloc((size_t)floats * sizeof(float))) &&
             (l->y[s] = hr_malloc((size_t)(rows * l->labels) * sizeof(int32_t)));
    if (!ok) {
        loader_release(l);
        return NULL;
    }
    int e = pthread_mutex_init(&l->mu, NULL);
    if (e == 0 && (e = pthread_cond_init(&l->cv, NULL)) != 0) pthread_mutex_destroy(&l->mu);
    if (e == 0 && (e = pthread_create(&l->thread, NULL, worker, l)) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    if (e != 0) {
        hr_error_set(e == EAGAIN || e == ENOMEM ? HR_ERR_OOM : HR_ERR_INTERNAL,
                     "hr_loader_new: could not start the loader thread: %s", strerror(e));
        loader_release(l);
        return NULL;
    }
    return l;
}

hr_status hr_loader_start_epoch(hr_loader *l, int64_t epoch, int64_t first_batch) {
    if (!l) return hr_error_set(HR_ERR_INVALID_ARG, "hr_loader_start_epoch: the loader is NULL");
    if (epoch < 0 || first_batch < 0 || first_batch > l->nbatches)
        return hr_error_set(HR_ERR_INVALID_ARG,
                            "hr_loader_start_epoch: epoch %lld, first batch %lld; an epoch has %lld batches, "
                            "so the first batch must be in 0..%lld and the epoch >= 0",
                            (long long)epoch, (long long)first_batch, (long long)l->nbatches,
                            (long long)l->nbatches);
    pthread_mutex_lock(&l->mu);
    while (l->busy) pthread_cond_wait(&l->cv, &l->mu); /* let it finish with the old order */
    make_perm(l, epoch); /* under the lock: the worker cannot start a batch meanwhile */
    l->ready[0] = l->ready[1] = false;
    l->held = -1;
    l->fill = l->take = first_batch;
    l->started = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return HR_OK;
}

int64_t hr_loader_batches_per_epoch(const hr_loader *l) { return l ? l->nbatches : 0; }

hr_status hr_loader_next(hr_loader *l, const float **x, const int32_t **labels, int64_t *n) {
    if (!l || !x || !labels || !n) return hr_error_set(HR_ERR_INVALID_ARG, "hr_loader_next: NULL argument");
    *x = NULL;
    *labels = NULL;
    *n = 0;
    pthread_mutex_lock(&l->mu);
    if (!l->started) {
        pthread_mutex_unlock(&l->mu);
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_loader_next: no epoch started; call hr_loader_start_epoch first");
    }
    if (l->held >= 0) { /* the caller is done with the last batch: its slot may be refilled */
        l->held = -1;
        pthread_cond_broadcast(&l->cv);
    }
    if (l->take < l->nbatches) {
        int s = (int)(l->take % 2);
        while (!l->ready[s]) pthread_cond_wait(&l->cv, &l->mu);
        l->ready[s] = false;
        l->held = s;
        l->take++;
        *x = l->x[s];
        *labels = l->y[s];
        *n = l->count[s];
    }
    pthread_mutex_unlock(&l->mu);
    return HR_OK;
}

void hr_loader_times(const hr_loader *l, double *start, double *end) {
    bool held = l && l->held >= 0; /* the caller's slot: the worker does not touch it */
    *start = held ? l->when[l->held][0] : 0;
    *end = held ? l->when[l->held][1] : 0;
}

size_t hr_loader_bytes(int64_t n, int64_t sample, int64_t labels, bool synthetic, int64_t batch) {
    int64_t rows = batch < n ? batch : n, per, slot, order = 0, all;
    if (n < 0 || sample < 0 || labels < 0 || rows < 0 || !hr_add_ok(sample, labels, &per) ||
        !hr_mul_ok(rows, per, &slot) || !hr_mul_ok(slot, 2 * 4, &slot) || (!synthetic && !hr_mul_ok(n, 8, &order)) ||
        !hr_add_ok(slot, order, &all))
        return SIZE_MAX;
    return (size_t)all; /* sample floats and its int32 labels a row, 4 bytes each; 2 slots */
}

void hr_loader_free(hr_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->quit = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    loader_release(l);
}
