/* data.h — training data for headroom: IDX files (MNIST, Fashion-MNIST), synthetic
 * data, and the double-buffered batch loader that feeds a training loop. */
#ifndef HR_DATA_H
#define HR_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "headroom.h"

typedef struct hr_dataset {
    int64_t n;            /* samples */
    int c, h, w;          /* per-sample shape; an MLP flattens it */
    float *images;        /* n*c*h*w, already normalised: (pixel/255 - mean)/std; NULL when synthetic */
    int32_t *labels;      /* n, each in [0, nclasses); NULL when synthetic */
    int nclasses;
    bool synthetic;       /* nothing held: sample i is made from (seed, i) when it is read */
    uint64_t seed;        /* the synthetic set's */
    /* a token stream (text.c): sample i is window i of seq tokens, given as
     * floats (c = h = 1, w = seq), and its labels are the next token of each
     * position (the window shifted by one); nclasses is the vocabulary */
    uint16_t *tokens;
    int64_t ntokens, seq; /* seq 0: not a token set */
} hr_dataset;

/* Labels a sample: one, or one a position of a token set's window. */
static inline int64_t hr_dataset_label_len(const hr_dataset *d) { return d->seq > 0 ? d->seq : 1; }

/* Sample i of any kind: its c*h*w floats into x and its label (a token set:
 * its seq labels) into label (either may be NULL). A synthetic sample is made here, the same bytes
 * whichever batch, order or thread asks for it. */
hr_status hr_dataset_sample(const hr_dataset *d, int64_t i, float *x, int32_t *label);
/* Samples [first, first + count) into x (count*c*h*w floats) and labels
 * (count * hr_dataset_label_len, or NULL): what an evaluation loop reads, for a held set or a synthetic one. */
hr_status hr_dataset_read(const hr_dataset *d, int64_t first, int64_t count, float *x, int32_t *labels);
/* Host bytes the set holds: its floats and labels, or its tokens; 0 for a
 * synthetic set. */
size_t hr_dataset_host_bytes(const hr_dataset *d);

/* IDX files, gzip'd or raw (zlib's gzread reads both). Checks the magic
 * (0x00000803 images, 0x00000801 labels), that the dimensions are sane, that
 * image and label counts agree, that neither file is truncated, and that every
 * label is in [0, nclasses). Memory grows only as bytes actually arrive, so a
 * corrupt header that claims 10^9 images gives a truncation error, not an OOM.
 * On failure *out is zeroed and nothing is leaked. */
hr_status hr_idx_load(const char *images_path, const char *labels_path, int nclasses, float mean, float std,
                      hr_dataset *out);
/* Fashion-MNIST (or MNIST) from a folder holding train-images-idx3-ubyte(.gz),
 * train-labels-idx1-ubyte(.gz), t10k-images-idx3-ubyte(.gz) and
 * t10k-labels-idx1-ubyte(.gz); dir NULL means HR_FASHION_DIR. Normalises with
 * Fashion-MNIST's mean 0.2860 and std 0.3530 (HR_FASHION_MEAN, HR_FASHION_STD:
 * what a checkpoint records). train may be NULL: then only the test set is
 * read (evaluation). */
#define HR_FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define HR_FASHION_MEAN 0.2860f /* of Fashion-MNIST's training pixels, /255 */
#define HR_FASHION_STD 0.3530f
hr_status hr_fashion_load(const char *dir, hr_dataset *train, hr_dataset *test);
/* The shape of an IDX pair from its headers alone (16 and 8 bytes, gzip'd or
 * raw), without reading the data: what a memory plan needs before loading.
 * Checks the magics, the dimensions and that the counts agree, with
 * hr_idx_load's messages; a truncated payload is found only by the load. */
typedef struct {
    int64_t n;         /* samples */
    int h, w;          /* image side */
    size_t bytes;      /* what hr_idx_load's data set holds: n*h*w floats and n int32 labels */
    size_t peak_bytes; /* what it holds at most while loading (bytes plus its read buffers) */
} hr_idx_info;
hr_status hr_idx_peek(const char *images_path, const char *labels_path, hr_idx_info *out);
/* hr_fashion_load's two pairs, peeked; train may be NULL (the test set only). */
hr_status hr_fashion_peek(const char *dir, hr_idx_info *train, hr_idx_info *test);

/* Inputs drawn from N(0,1) (like torch.randn) and uniform labels, never held:
 * sample i is a pure function of (seed, i), made when a loader or
 * hr_dataset_read asks for it, so a set of 10^12 samples costs no memory and
 * the same seed gives the same bytes on every machine. Allocates nothing. */
hr_status hr_synthetic_make(int64_t n, int c, int h, int w, int nclasses, uint64_t seed, hr_dataset *out);
void hr_dataset_free(hr_dataset *d); /* safe on a zeroed struct; leaves it zeroed */

/* The batch loader: a background thread gathers the next batch (by a shuffled
 * permutation, into a contiguous buffer; a synthetic set's samples are made
 * there) while the caller trains on the current one. The permutation is a
 * pure function of (seed, epoch), so a resumed run re-creates it: there is no
 * hidden RNG state to checkpoint. A held set is shuffled by Fisher-Yates over
 * an array of n indices; a synthetic one, which may have 10^12 samples, by a
 * keyed bijection of [0, n) that needs no array. drop_last is PyTorch's:
 * without it the last batch may be short. The loader reads d as it is: d must
 * outlive it and stay unchanged. */
typedef struct hr_loader hr_loader;
/* NULL + error for batch <= 0, batch > n with drop_last, OOM, or when the
 * thread cannot be started. Allocates everything it will ever need here. */
hr_loader *hr_loader_new(const hr_dataset *d, int64_t batch, bool shuffle, bool drop_last, uint64_t seed);
/* Starts (or restarts, abandoning the current one) an epoch; first_batch > 0
 * skips that many batches, for resuming mid-epoch. */
hr_status hr_loader_start_epoch(hr_loader *l, int64_t epoch, int64_t first_batch);
int64_t hr_loader_batches_per_epoch(const hr_loader *l);
/* Blocks until the next batch is ready. HR_OK with *n > 0, or HR_OK with
 * *n == 0 at the end of the epoch. The pointers stay valid until the next call
 * of hr_loader_next or hr_loader_start_epoch. */
hr_status hr_loader_next(hr_loader *l, const float **x, const int32_t **labels, int64_t *n);
/* When the loader's thread began and ended gathering the batch that
 * hr_loader_next returned last (CLOCK_MONOTONIC seconds; 0 and 0 for none). */
void hr_loader_times(const hr_loader *l, double *start, double *end);
void hr_loader_free(hr_loader *l); /* joins the thread; NULL is fine */
/* The host bytes hr_loader_new allocates for a set of n samples of `sample`
 * floats and `labels` labels, held in RAM or synthetic: two slots of
 * min(batch, n) inputs and labels, and a held set's order (8 bytes a
 * sample). SIZE_MAX if that overflows. A memory plan calls it before the
 * data exists. */
size_t hr_loader_bytes(int64_t n, int64_t sample, int64_t labels, bool synthetic, int64_t batch);

/* ---- text (text.c): token streams cut into windows for next-token training --
 * spec names the stream:
 *   "fortunes"     the text of Debian's fortunes package (HR_FORTUNES_DIR,
 *                  every file but the .dat indexes, in name order), bytes as tokens
 *   "text:PATH"    the bytes of a file as tokens (a vocabulary of 256)
 *   "PATH.bin"     uint16 tokens: nanoGPT's raw files, or llm.c's (a header
 *                  of 256 int32: magic 20240520, version, token count)
 * The last val_fraction of the stream (at least one window) is the
 * validation set, the rest the training set; each is cut into windows of seq
 * tokens (samples), each with seq next-token labels. Errors name the file.
 * On failure both sets are zeroed. */
#define HR_FORTUNES_DIR "/usr/share/games/fortunes"
#define HR_TEXT_VAL_FRACTION 0.1 /* headroom train's validation tail, as nanoGPT's 90/10 */
typedef struct {
    int64_t ntokens;     /* in the whole stream */
    int64_t vocab;       /* 256 for bytes; a token file's largest id + 1 */
    size_t bytes;        /* what the two sets hold: 2 bytes a token */
    char what[160];      /* "fortunes: 43 files, 2576674 bytes" */
} hr_text_info;
hr_status hr_text_peek(const char *spec, hr_text_info *out);
/* How hr_text_load splits a stream of n tokens: the validation tail (at
 * least seq + 1 tokens) and the rest; windows of a part of k tokens: (k - 1) / seq. */
void hr_text_split(int64_t n, int64_t seq, double val_fraction, int64_t *ntrain, int64_t *nval);
hr_status hr_text_load(const char *spec, int64_t seq, double val_fraction, hr_dataset *train, hr_dataset *val);
/* Is spec a text source (fortunes, text:..., *.bin)? */
bool hr_text_spec(const char *spec);

/* ---- the generator shared by synthetic.c and loader.c ---------------------- */
/* xoshiro256** seeded through splitmix64: fast, well tested, and fully
 * specified here, so the same seed gives the same data and order anywhere. */
typedef struct {
    uint64_t s[4];
} hr_rng;

static inline uint64_t hr_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline hr_rng hr_rng_seed(uint64_t seed) {
    hr_rng r;
    for (int i = 0; i < 4; i++) r.s[i] = hr_splitmix64(&seed);
    return r;
}

static inline uint64_t hr_rng_next(hr_rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, bound) without modulo bias: a biased shuffle would favour
 * some orders, a biased label draw some classes. */
static inline uint64_t hr_rng_below(hr_rng *r, uint64_t bound) {
    uint64_t threshold = -bound % bound; /* 2^64 mod bound */
    for (;;) {
        uint64_t x = hr_rng_next(r);
        if (x >= threshold) return x % bound;
    }
}

/* Sample i of a synthetic set (d->synthetic), for dataset.c; no checks. */
void hr_synthetic_sample(const hr_dataset *d, int64_t i, float *x, int32_t *label);
/* Window i of a token set (d->tokens): seq ids as floats into x, the seq
 * next ids into labels (either may be NULL); no checks. */
void hr_token_window(const hr_dataset *d, int64_t i, float *x, int32_t *labels);

#endif
