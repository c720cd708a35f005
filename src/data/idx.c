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

/* Reads the header: magic, then ndims big-endian 32-bit dimensions. */
static hr_status read_header(idx_file *f, uint32_t magic, int ndims, int64_t *dims) {
    unsigned char h[16];
    int64_t want = 4 + 4 * (int64_t)ndims, got = read_some(f, h, want);
    if (got == 0 && gzeof(f->gz))
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

static hr_status load(idx_file *fi, idx_file *fl, int nclasses, float mean, float std, hr_dataset *out) {
    int64_t idims[3], ldims[1];
    hr_status st;
    if ((st = read_header(fi, IDX_MAGIC_IMAGES, 3, idims)) != HR_OK) return st;
    if ((st = read_header(fl, IDX_MAGIC_LABELS, 1, ldims)) != HR_OK) return st;
    int64_t n = idims[0], pixels;
    if (ldims[0] != n)
        return hr_error_set(HR_ERR_FORMAT,
                            "%s holds %lld images but %s holds %lld labels; pass the labels file of the same "
                            "set (train-* with train-*, t10k-* with t10k-*)",
                            fi->path, (long long)n, fl->path, (long long)ldims[0]);
    if (!hr_mul_ok(n, idims[1] * idims[2], &pixels) || pixels > (int64_t)(SIZE_MAX / sizeof(float) / 2))
        return hr_error_set(HR_ERR_FORMAT, "%s: %lld images of %lldx%lld is too large to be real; the header is corrupt",
                            fi->path, (long long)n, (long long)idims[1], (long long)idims[2]);

    unsigned char *lab = NULL, *pix = NULL;
    if ((st = read_payload(fl, "labels", 8, n, &lab)) != HR_OK) return st;
    for (int64_t i = 0; i < n; i++)
        if (lab[i] >= nclasses) {
            st = hr_error_set(HR_ERR_FORMAT, "%s: label %d of sample %lld (byte offset %lld) is not in [0, %d); "
                              "the file is corrupt or the data set has more classes than %d",
                              fl->path, lab[i], (long long)i, (long long)(8 + i), nclasses, nclasses);
            goto done;
        }
    if ((st = read_payload(fi, "pixels", 16, pixels, &pix)) != HR_OK) goto done;

    out->labels = hr_malloc((size_t)n * sizeof(int32_t));
    out->images = out->labels ? hr_malloc((size_t)pixels * sizeof(float)) : NULL;
    if (!out->images) {
        st = HR_ERR_OOM;
        goto done;
    }
    float lut[256]; /* 256 divisions instead of 47 million */
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
    for (int64_t i = 0; i < pixels; i++) out->images[i] = lut[pix[i]];
    for (int64_t i = 0; i < n; i++) out->labels[i] = lab[i];
    out->n = n;
    out->c = 1;
    out->h = (int)idims[1];
    out->w = (int)idims[2];
    out->nclasses = nclasses;
done:
    hr_free(lab);
    hr_free(pix);
    return st;
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

void hr_dataset_free(hr_dataset *d) {
    if (!d) return;
    hr_free(d->images);
    hr_free(d->labels);
    memset(d, 0, sizeof *d);
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

hr_status hr_fashion_load(const char *dir, hr_dataset *train, hr_dataset *test) {
    if (!test) return hr_error_set(HR_ERR_INVALID_ARG, "hr_fashion_load: test must not be NULL");
    if (train) memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!dir) dir = HR_FASHION_DIR;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return hr_error_set(HR_ERR_IO, "no Fashion-MNIST folder at %s (%s); %s", dir, strerror(errno), FASHION_HINT);
    if (!S_ISDIR(sb.st_mode))
        return hr_error_set(HR_ERR_IO, "%s is not a folder; %s", dir, FASHION_HINT);

    const float mean = 0.2860f, std = 0.3530f; /* of Fashion-MNIST's training pixels, /255 */
    char ti[4096], tl[4096], ei[4096], el[4096];
    hr_status st;
    if ((train && (st = find_file(dir, "train-images-idx3-ubyte", ti, sizeof ti)) != HR_OK) ||
        (train && (st = find_file(dir, "train-labels-idx1-ubyte", tl, sizeof tl)) != HR_OK) ||
        (st = find_file(dir, "t10k-images-idx3-ubyte", ei, sizeof ei)) != HR_OK ||
        (st = find_file(dir, "t10k-labels-idx1-ubyte", el, sizeof el)) != HR_OK)
        return st;
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
