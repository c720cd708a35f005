/* idx.c — reads IDX files (the MNIST family's format), gzip'd or raw, into a
 * normalised hr_dataset, checking every header field and every label. */
#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/core.h"

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define IDX_MAX_SIDE 16384           /* no image data set comes near; a larger side is a corrupt header */
#define READ_CHUNK (1 << 20)

static const char *FASHION_HINT =
    "install the Debian package dataset-fashion-mnist (apt install dataset-fashion-mnist) or pass --data DIR";

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* An open IDX file and what a message about it needs to say. */
typedef struct {
    gzFile gz;
    const char *path;
} idx_file;

static hr_status idx_open(idx_file *f, const char *path) {
    f->path = path;
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz) {
        int e = errno;
        return hr_error_set(HR_ERR_IO, "cannot open %s: %s; check the path", path,
                            e ? strerror(e) : "out of memory in zlib");
    }
    gzbuffer(f->gz, 1 << 17); /* fewer system calls on the 47 MB of Fashion-MNIST */
    return HR_OK;
}

static void idx_close(idx_file *f) {
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Reads up to `want` bytes, stopping only at the end of the data or an error;
 * returns how many arrived (a short count means truncated or corrupt). */
static int64_t read_some(idx_file *f, unsigned char *dst, int64_t want) {
    int64_t got = 0;
    while (got < want) {
        int64_t ask = want - got < INT_MAX / 2 ? want - got : INT_MAX / 2;
        int r = gzread(f->gz, dst + got, (unsigned)ask);
        if (r <= 0) break;
        got += r;
    }
    return got;
}

/* The error for `got` < `want` bytes of `what` starting at byte `offset`. */
static hr_status short_read(idx_file *f, const char *what, int64_t offset, int64_t want, int64_t got) {
    int zerr = Z_OK;
    const char *zmsg = gzerror(f->gz, &zerr);
    const char *kind = gzdirect(f->gz) ? "raw" : "gzip'd";
    if (zerr != Z_OK && zerr != Z_BUF_ERROR) /* Z_BUF_ERROR is zlib's word for a cut-off stream */
        return hr_error_set(HR_ERR_FORMAT,
                            "%s: corrupt %s data after %lld bytes of %s (zlib: %s); the file is damaged: "
                            "download or install it again",
                            f->path, kind, (long long)(offset + got), what, zmsg);
    return hr_error_set(HR_ERR_FORMAT,
                        "%s: truncated %s file: expected %lld bytes of %s from byte offset %lld, got %lld; "
                        "the file is incomplete: download or install it again",
                        f->path, kind, (long long)want, what, (long long)offset, (long long)got);
}

/* After the last byte the header promised (at `end`): the data must stop
 * there, and a gzip'd file's trailer (CRC-32 and length), which zlib checks
 * only when asked for more, must be whole and agree. */
static hr_status read_end(idx_file *f, int64_t end) {
    unsigned char extra;
    int r = gzread(f->gz, &extra, 1), zerr = Z_OK;
    const char *zmsg = gzerror(f->gz, &zerr);
    if (zerr == Z_BUF_ERROR)
        return hr_error_set(HR_ERR_FORMAT, "%s: truncated gzip'd file: all %lld bytes of data are there, but the "
                            "gzip trailer (its checksum) is cut off; the file is incomplete: download or install it "
                            "again", f->path, (long long)end);
    if (r < 0 || zerr != Z_OK)
        return hr_error_set(HR_ERR_FORMAT, "%s: corrupt gzip'd file: its data does not match its checksum (zlib: %s); "
                            "the file is damaged: download or install it again", f->path, zmsg);
    if (r > 0)
        return hr_error_set(HR_ERR_FORMAT, "%s: the file goes on past byte %lld, where its header says the data ends; "
                            "is this the right file?", f->path, (long long)end);
    return HR_OK;
}

/* Reads the header: magic, then ndims big-endian 32-bit dimensions. */
static hr_status read_header(idx_file *f, uint32_t magic, int ndims, int64_t *dims) {
    unsigned char h[16];
    int64_t want = 4 + 4 * (int64_t)ndims, got = read_some(f, h, want);
    int zerr = Z_OK;
    if (got == 0 && gzeof(f->gz) && (gzerror(f->gz, &zerr), zerr == Z_OK))
        return hr_error_set(HR_ERR_FORMAT, "%s: the file is empty; expected an IDX %s file (%lld-byte header)",
                            f->path, ndims == 1 ? "labels" : "images", (long long)want);
    if (got >= 4 && be32(h) != magic)
        return hr_error_set(HR_ERR_FORMAT,
                            "%s: magic number 0x%08x at byte offset 0 is not 0x%08x (IDX %s); "
                            "is this the right file (images are 0x%08x, labels 0x%08x)?",
                            f->path, be32(h), magic, ndims == 1 ? "labels" : "images", IDX_MAGIC_IMAGES,
                            IDX_MAGIC_LABELS);
    if (got < want) return short_read(f, "header", 0, want, got);
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(h + 4 + 4 * i);
        bool side = i > 0;
        if (dims[i] == 0 || (side && dims[i] > IDX_MAX_SIDE))
            return hr_error_set(HR_ERR_FORMAT, "%s: dimension %d (at byte offset %d) is %lld, expected 1..%d; "
                                "the header is corrupt",
                                f->path, i, 4 + 4 * i, (long long)dims[i], side ? IDX_MAX_SIDE : INT_MAX);
    }
    return HR_OK;
}

/* Reads exactly `want` payload bytes after the header. The buffer grows as
 * bytes arrive, so memory is bounded by the file, not by what its header claims. */
static hr_status read_payload(idx_file *f, const char *what, int64_t offset, int64_t want, unsigned char **out) {
    *out = NULL;
    int64_t cap = want < READ_CHUNK ? want : READ_CHUNK, got = 0;
    unsigned char *buf = hr_malloc((size_t)cap);
    if (!buf) return HR_ERR_OOM;
    for (;;) {
        int64_t r = read_some(f, buf + got, cap - got);
        got += r;
        if (got == want) break;
        if (got < cap) {
            hr_status st = short_read(f, what, offset, want, got);
            hr_free(buf);
            return st;
        }
        int64_t ncap = cap > want / 2 ? want : cap * 2;
        unsigned char *nb = hr_realloc(buf, (size_t)ncap);
        if (!nb) {
            hr_free(buf);
            return HR_ERR_OOM;
        }
        buf = nb;
        cap = ncap;
    }
    *out = buf;
    return HR_OK;
}

/* The pixels, normalised through `lut` chunk by chunk as they arrive: the
 * floats grow with the bytes read (a header that lies costs no more than the
 * file holds), and the raw bytes are never held whole, so the load's peak is
 * the data set plus one chunk (hr_idx_info.peak_bytes; glibc moves a block
 * this large by remapping its pages, so growing it costs no second copy). */
static hr_status read_pixels(idx_file *f, int64_t want, const float *lut, float **out) {
    *out = NULL;
    int64_t cap = want < READ_CHUNK ? want : READ_CHUNK, got = 0;
    unsigned char *chunk = hr_malloc((size_t)cap);
    float *px = chunk ? hr_malloc((size_t)cap * sizeof(float)) : NULL;
    hr_status st = HR_OK;
    if (!px) {
        st = HR_ERR_OOM;
        goto done;
    }
    while (got < want) {
        int64_t ask = want - got < READ_CHUNK ? want - got : READ_CHUNK;
        if (got + ask > cap) { /* ask <= READ_CHUNK <= cap: doubling is enough */
            int64_t ncap = cap > want / 2 ? want : cap * 2;
            float *np = hr_realloc(px, (size_t)ncap * sizeof(float));
            if (!np) {
                st = HR_ERR_OOM;
                goto done;
            }
            px = np;
            cap = ncap;
        }
        int64_t r = read_some(f, chunk, ask);
        for (int64_t k = 0; k < r; k++) px[got + k] = lut[chunk[k]];
        got += r;
        if (r < ask) {
            st = short_read(f, "pixels", 16, want, got);
            goto done;
        }
    }
done:
    hr_free(chunk);
    if (st != HR_OK) hr_free(px);
    else *out = px;
    return st;
}

/* Both headers, checked, and the sizes they promise. */
static hr_status read_headers(idx_file *fi, idx_file *fl, int64_t *n, int64_t *h, int64_t *w, int64_t *pixels) {
    int64_t idims[3], ldims[1];
    hr_status st;
    if ((st = read_header(fi, IDX_MAGIC_IMAGES, 3, idims)) != HR_OK) return st;
    if ((st = read_header(fl, IDX_MAGIC_LABELS, 1, ldims)) != HR_OK) return st;
    *n = idims[0], *h = idims[1], *w = idims[2];
    if (ldims[0] != *n)
        return hr_error_set(HR_ERR_FORMAT,
                            "%s holds %lld images but %s holds %lld labels; pass the labels file of the same "
                            "set (train-* with train-*, t10k-* with t10k-*)",
                            fi->path, (long long)*n, fl->path, (long long)ldims[0]);
    if (!hr_mul_ok(*n, idims[1] * idims[2], pixels) || *pixels > (int64_t)(SIZE_MAX / sizeof(float) / 2))
        return hr_error_set(HR_ERR_FORMAT, "%s: %lld images of %lldx%lld is too large to be real; the header is corrupt",
                            fi->path, (long long)*n, (long long)idims[1], (long long)idims[2]);
    return HR_OK;
}

static hr_status load(idx_file *fi, idx_file *fl, int nclasses, float mean, float std, hr_dataset *out) {
    int64_t n, h, w, pixels;
    hr_status st = read_headers(fi, fl, &n, &h, &w, &pixels);
    if (st) return st;

    unsigned char *lab = NULL;
    if ((st = read_payload(fl, "labels", 8, n, &lab)) != HR_OK) return st;
    if ((st = read_end(fl, 8 + n)) != HR_OK) {
        hr_free(lab);
        return st;
    }
    for (int64_t i = 0; i < n; i++)
        if (lab[i] >= nclasses) {
            st = hr_error_set(HR_ERR_FORMAT, "%s: label %d of sample %lld (byte offset %lld) is not in [0, %d); "
                              "the file is corrupt or the data set has more classes than %d",
                              fl->path, lab[i], (long long)i, (long long)(8 + i), nclasses, nclasses);
            hr_free(lab);
            return st;
        }
    out->labels = hr_malloc((size_t)n * sizeof(int32_t));
    if (out->labels)
        for (int64_t i = 0; i < n; i++) out->labels[i] = lab[i];
    hr_free(lab);
    if (!out->labels) return HR_ERR_OOM;

    float lut[256]; /* 256 divisions instead of 47 million */
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
    if ((st = read_pixels(fi, pixels, lut, &out->images)) != HR_OK) return st;
    if ((st = read_end(fi, 16 + pixels)) != HR_OK) return st;
    out->n = n;
    out->c = 1;
    out->h = (int)h;
    out->w = (int)w;
    out->nclasses = nclasses;
    return HR_OK;
}

hr_status hr_idx_load(const char *images_path, const char *labels_path, int nclasses, float mean, float std,
                      hr_dataset *out) {
    if (!out) return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!images_path || !labels_path)
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_load: the images and labels paths must not be NULL");
    if (nclasses < 1 || nclasses > 256)
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_load: nclasses is %d; IDX labels are bytes, so 1..256",
                            nclasses);
    if (!(std > 0) || !isfinite(std) || !isfinite(mean))
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_load: normalisation mean %g, std %g; std must be > 0 "
                            "and both finite", mean, std);
    idx_file fi = {0}, fl = {0};
    hr_status st = idx_open(&fi, images_path);
    if (st == HR_OK) st = idx_open(&fl, labels_path);
    if (st == HR_OK) st = load(&fi, &fl, nclasses, mean, std, out);
    idx_close(&fi);
    idx_close(&fl);
    if (st != HR_OK) hr_dataset_free(out);
    return st;
}

hr_status hr_idx_peek(const char *images_path, const char *labels_path, hr_idx_info *out) {
    if (!out) return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_peek: out is NULL");
    memset(out, 0, sizeof *out);
    if (!images_path || !labels_path)
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_idx_peek: the images and labels paths must not be NULL");
    idx_file fi = {0}, fl = {0};
    int64_t n = 0, h = 0, w = 0, pixels = 0;
    hr_status st = idx_open(&fi, images_path);
    if (st == HR_OK) st = idx_open(&fl, labels_path);
    if (st == HR_OK) st = read_headers(&fi, &fl, &n, &h, &w, &pixels);
    idx_close(&fi);
    idx_close(&fl);
    if (st) return st;
    out->n = n;
    out->h = (int)h;
    out->w = (int)w;
    out->bytes = (size_t)pixels * sizeof(float) + (size_t)n * sizeof(int32_t);
    /* the labels' raw bytes, or one chunk of pixels, beside the set */
    out->peak_bytes = out->bytes + (size_t)(n > READ_CHUNK ? n : READ_CHUNK);
    return HR_OK;
}

/* ---- Fashion-MNIST --------------------------------------------------------- */
/* dir/name.gz if it exists, else dir/name (the raw file as some mirrors ship it). */
static hr_status find_file(const char *dir, const char *name, char *path, size_t len) {
    struct stat sb;
    snprintf(path, len, "%s/%s.gz", dir, name);
    if (stat(path, &sb) == 0) return HR_OK;
    snprintf(path, len, "%s/%s", dir, name);
    if (stat(path, &sb) == 0) return HR_OK;
    return hr_error_set(HR_ERR_IO, "%s has neither %s.gz nor %s; %s", dir, name, name, FASHION_HINT);
}

/* The folder's four files (two when train is false), checked to exist. */
static hr_status fashion_paths(const char *dir, bool train, char ti[4096], char tl[4096], char ei[4096], char el[4096]) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return hr_error_set(HR_ERR_IO, "no Fashion-MNIST folder at %s (%s); %s", dir, strerror(errno), FASHION_HINT);
    if (!S_ISDIR(sb.st_mode))
        return hr_error_set(HR_ERR_IO, "%s is not a folder; %s", dir, FASHION_HINT);
    hr_status st;
    if ((train && (st = find_file(dir, "train-images-idx3-ubyte", ti, 4096)) != HR_OK) ||
        (train && (st = find_file(dir, "train-labels-idx1-ubyte", tl, 4096)) != HR_OK) ||
        (st = find_file(dir, "t10k-images-idx3-ubyte", ei, 4096)) != HR_OK ||
        (st = find_file(dir, "t10k-labels-idx1-ubyte", el, 4096)) != HR_OK)
        return st;
    return HR_OK;
}

hr_status hr_fashion_peek(const char *dir, hr_idx_info *train, hr_idx_info *test) {
    if (!test) return hr_error_set(HR_ERR_INVALID_ARG, "hr_fashion_peek: test must not be NULL");
    if (train) memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    char ti[4096], tl[4096], ei[4096], el[4096];
    hr_status st = fashion_paths(dir ? dir : HR_FASHION_DIR, train != NULL, ti, tl, ei, el);
    if (st == HR_OK && train) st = hr_idx_peek(ti, tl, train);
    if (st == HR_OK) st = hr_idx_peek(ei, el, test);
    if (st == HR_OK && train && (test->h != train->h || test->w != train->w))
        st = hr_error_set(HR_ERR_FORMAT, "%s holds %dx%d images but %s holds %dx%d; both sets must come from "
                          "the same data set", ti, train->h, train->w, ei, test->h, test->w);
    if (st) {
        if (train) memset(train, 0, sizeof *train);
        memset(test, 0, sizeof *test);
    }
    return st;
}

hr_status hr_fashion_load(const char *dir, hr_dataset *train, hr_dataset *test) {
    if (!test) return hr_error_set(HR_ERR_INVALID_ARG, "hr_fashion_load: test must not be NULL");
    if (train) memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    const float mean = HR_FASHION_MEAN, std = HR_FASHION_STD;
    char ti[4096], tl[4096], ei[4096], el[4096];
    hr_status st = fashion_paths(dir ? dir : HR_FASHION_DIR, train != NULL, ti, tl, ei, el);
    if (st) return st;
    if (train && (st = hr_idx_load(ti, tl, 10, mean, std, train)) != HR_OK) return st;
    if ((st = hr_idx_load(ei, el, 10, mean, std, test)) != HR_OK) {
        if (train) hr_dataset_free(train);
        return st;
    }
    if (train && (test->h != train->h || test->w != train->w)) {
        st = hr_error_set(HR_ERR_FORMAT, "%s holds %dx%d images but %s holds %dx%d; both sets must come from "
                          "the same data set", ti, train->h, train->w, ei, test->h, test->w);
        hr_dataset_free(train);
        hr_dataset_free(test);
    }
    return st;
}
