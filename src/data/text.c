/* text.c — token streams for next-token training: the bytes of a text (the
 * fortunes package's, or any file's) or a file of uint16 tokens, split into a
 * training and a validation set, each cut into windows of seq tokens whose
 * labels are the tokens that follow. */
#include "data/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

#define LLMC_MAGIC 20240520 /* llm.c's token files: 256 int32 of header, then uint16 tokens */

bool hr_text_spec(const char *spec) {
    size_t n = spec ? strlen(spec) : 0;
    return spec && (!strcmp(spec, "fortunes") || !strncmp(spec, "text:", 5) || (n > 4 && !strcmp(spec + n - 4, ".bin")));
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fortunes files, in name order: their paths into *names (a count), or an
 * error that says how to get them. */
static hr_status fortune_files(char ***names, int *count) {
    *names = NULL, *count = 0;
    DIR *dir = opendir(HR_FORTUNES_DIR);
    if (!dir)
        return hr_error_set(HR_ERR_IO, "--data fortunes reads %s, which is missing (%s); install Debian's fortunes "
                            "package (scripts/deps.sh data) or give a text: --data text:FILE", HR_FORTUNES_DIR,
                            strerror(errno));
    hr_status st = HR_OK;
    int cap = 0;
    struct dirent *e;
    while (st == HR_OK && (e = readdir(dir))) {
        char path[4096];
        struct stat sb;
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8")) continue;
        snprintf(path, sizeof path, "%s/%s", HR_FORTUNES_DIR, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (*count == cap) {
            char **more = hr_realloc(*names, sizeof(char *) * (size_t)(cap = cap ? 2 * cap : 64));
            if (!more) {
                st = HR_ERR_OOM;
                break;
            }
            *names = more;
        }
        if (!((*names)[*count] = hr_malloc(strlen(path) + 1))) {
            st = HR_ERR_OOM;
            break;
        }
        strcpy((*names)[(*count)++], path);
    }
    closedir(dir);
    if (st == HR_OK && !*count)
        st = hr_error_set(HR_ERR_IO, "%s holds no fortune files; reinstall Debian's fortunes package", HR_FORTUNES_DIR);
    if (st == HR_OK) qsort(*names, (size_t)*count, sizeof(char *), by_name);
    return st;
}

static void free_names(char **names, int count) {
    for (int i = 0; i < count; i++) hr_free(names[i]);
    hr_free(names);
}

/* A file's size, or an error naming it. */
static hr_status file_size(const char *path, int64_t *size) {
    struct stat sb;
    if (stat(path, &sb) != 0) return hr_error_set(HR_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return hr_error_set(HR_ERR_IO, "%s is not a regular file", path);
    *size = (int64_t)sb.st_size;
    return HR_OK;
}

/* Reads n bytes at offset off of path into buf. */
static hr_status read_at(const char *path, int64_t off, void *buf, int64_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return hr_error_set(HR_ERR_IO, "%s: %s", path, strerror(errno));
    bool ok = fseek(f, (long)off, SEEK_SET) == 0 && (n == 0 || fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return ok ? HR_OK : hr_error_set(HR_ERR_IO, "%s: cannot read %lld bytes at %lld (was it cut short?)", path,
                                     (long long)n, (long long)off);
}

/* A token file: where its tokens begin and how many; llm.c's header checked. */
static hr_status bin_layout(const char *path, int64_t *first, int64_t *ntok) {
    int64_t size = 0;
    hr_status st = file_size(path, &size);
    if (st) return st;
    int32_t head[256];
    if (size >= (int64_t)sizeof head && (st = read_at(path, 0, head, sizeof head)) != HR_OK) return st;
    if (size >= (int64_t)sizeof head && head[0] == LLMC_MAGIC) {
        if (head[1] != 1 && head[1] != 2)
            return hr_error_set(HR_ERR_FORMAT, "%s: llm.c token file of version %d; headroom reads versions 1 and 2",
                                path, (int)head[1]);
        if (head[2] < 0 || (int64_t)head[2] * 2 != size - (int64_t)sizeof head)
            return hr_error_set(HR_ERR_FORMAT, "%s: its llm.c header says %d tokens (%lld bytes) but %lld bytes "
                                "follow it; the file is damaged", path, (int)head[2], 2LL * head[2],
                                (long long)(size - (int64_t)sizeof head));
        *first = sizeof head, *ntok = head[2];
        return HR_OK;
    }
    if (size % 2)
        return hr_error_set(HR_ERR_FORMAT, "%s has %lld bytes, an odd number; a token file holds uint16 tokens "
                            "(nanoGPT's .bin) or llm.c's header and them", path, (long long)size);
    *first = 0, *ntok = size / 2;
    return HR_OK;
}

hr_status hr_text_peek(const char *spec, hr_text_info *out) {
    memset(out, 0, sizeof *out);
    if (!hr_text_spec(spec))
        return hr_error_set(HR_ERR_INVALID_ARG, "'%s' is not a text source: fortunes, text:FILE or FILE.bin",
                            spec ? spec : "(null)");
    hr_status st = HR_OK;
    if (!strcmp(spec, "fortunes")) {
        char **names;
        int count;
        if ((st = fortune_files(&names, &count)) != HR_OK) return st;
        for (int i = 0; i < count && st == HR_OK; i++) {
            int64_t size = 0;
            if ((st = file_size(names[i], &size)) == HR_OK) out->ntokens += size;
        }
        free_names(names, count);
        out->vocab = 256;
        snprintf(out->what, sizeof out->what, "fortunes: %d files of %s, %lld bytes as tokens", count, HR_FORTUNES_DIR,
                 (long long)out->ntokens);
    } else if (!strncmp(spec, "text:", 5)) {
        st = file_size(spec + 5, &out->ntokens);
        out->vocab = 256;
        snprintf(out->what, sizeof out->what, "%.120s: %lld bytes as tokens", spec + 5, (long long)out->ntokens);
    } else {
        int64_t first;
        st = bin_layout(spec, &first, &out->ntokens);
        snprintf(out->what, sizeof out->what, "%.120s: %lld uint16 tokens", spec, (long long)out->ntokens);
    }
    out->bytes = (size_t)out->ntokens * sizeof(uint16_t);
    return st;
}

/* The whole stream as uint16 tokens (hr_malloc'd); *vocab its largest id + 1
 * (256 for bytes). */
static hr_status read_stream(const char *spec, const hr_text_info *info, uint16_t **tokens, int64_t *vocab) {
    int64_t n = info->ntokens;
    uint16_t *t = hr_malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
    if (!t) return HR_ERR_OOM;
    hr_status st = HR_OK;
    bool bytes = !strcmp(spec, "fortunes") || !strncmp(spec, "text:", 5);
    if (bytes) {
        /* bytes: read into the upper half of the array, widened in place from the front */
        unsigned char *b = (unsigned char *)t + n;
        if (!strcmp(spec, "fortunes")) {
            char **names;
            int count;
            int64_t at = 0;
            if ((st = fortune_files(&names, &count)) == HR_OK)
                for (int i = 0; i < count && st == HR_OK; i++) {
                    int64_t size = 0;
                    if ((st = file_size(names[i], &size)) == HR_OK && at + size > n)
                        st = hr_error_set(HR_ERR_IO, "%s grew while it was read; run again", names[i]);
                    if (st == HR_OK && (st = read_at(names[i], 0, b + at, size)) == HR_OK) at += size;
                }
            free_names(names, count);
        } else {
            st = read_at(spec + 5, 0, b, n);
        }
        for (int64_t i = 0; st == HR_OK && i < n; i++) t[i] = b[i];
        *vocab = 256;
    } else {
        int64_t first, ntok;
        if ((st = bin_layout(spec, &first, &ntok)) == HR_OK && (st = read_at(spec, first, t, 2 * ntok)) == HR_OK) {
            int64_t mx = 0;
            for (int64_t i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
            *vocab = mx + 1;
        }
    }
    if (st != HR_OK) {
        hr_free(t);
        return st;
    }
    *tokens = t;
    return HR_OK;
}

/* A set of the n tokens at src: windows of seq. */
static hr_status make_set(const uint16_t *src, int64_t n, int64_t seq, int64_t vocab, hr_dataset *d) {
    memset(d, 0, sizeof *d);
    if (!(d->tokens = hr_malloc((size_t)n * sizeof(uint16_t)))) return HR_ERR_OOM;
    memcpy(d->tokens, src, (size_t)n * sizeof(uint16_t));
    d->ntokens = n;
    d->seq = seq;
    d->n = (n - 1) / seq;
    d->c = d->h = 1;
    d->w = (int)seq;
    d->nclasses = (int)vocab;
    return HR_OK;
}

void hr_text_split(int64_t n, int64_t seq, double val_fraction, int64_t *ntrain, int64_t *nval) {
    *nval = (int64_t)((double)n * val_fraction);
    if (*nval < seq + 1) *nval = seq + 1;
    *ntrain = n - *nval;
}

hr_status hr_text_load(const char *spec, int64_t seq, double val_fraction, hr_dataset *train, hr_dataset *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (seq < 1 || seq > (1 << 24) || !(val_fraction > 0 && val_fraction < 1))
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_text_load: windows of %lld tokens and a validation fraction of %g; "
                            "use 1..16777216 and a fraction in (0, 1)", (long long)seq, val_fraction);
    hr_text_info info;
    hr_status st = hr_text_peek(spec, &info);
    if (st) return st;
    int64_t ntrain, nval;
    hr_text_split(info.ntokens, seq, val_fraction, &ntrain, &nval);
    if (ntrain < seq + 1)
        return hr_error_set(HR_ERR_FORMAT, "%s: %lld tokens are too few for a training and a validation window of %lld "
                            "tokens (and the one after each): give at least %lld, or a shorter context",
                            info.what, (long long)info.ntokens, (long long)seq, 2 * (long long)(seq + 1));
    uint16_t *all;
    int64_t vocab;
    if ((st = read_stream(spec, &info, &all, &vocab)) != HR_OK) return st;
    st = make_set(all, ntrain, seq, vocab, train);
    if (st == HR_OK) st = make_set(all + ntrain, nval, seq, vocab, val);
    hr_free(all);
    if (st != HR_OK) {
        hr_dataset_free(train);
        hr_dataset_free(val);
    }
    return st;
}

void hr_token_window(const hr_dataset *d, int64_t i, float *x, int32_t *labels) {
    const uint16_t *t = d->tokens + i * d->seq;
    if (x)
        for (int64_t k = 0; k < d->seq; k++) x[k] = t[k];
    if (labels)
        for (int64_t k = 0; k < d->seq; k++) labels[k] = t[k + 1];
}
