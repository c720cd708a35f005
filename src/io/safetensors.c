/* safetensors.c — reads and validates safetensors files (header in memory,
 * data on demand) and writes them atomically (a temporary file of its own, fsync, rename). */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct hr_safetensors {
    char *path;
    int fd;                /* -1 for an in-memory file */
    const unsigned char *mem;
    uint64_t data_start;   /* 8 + N */
    int n;
    hr_st_tensor *t;
    const hr_st_tensor **by_name; /* sorted by name, for lookups */
    int n_meta;
    char **meta_keys, **meta_values;
};

static const struct {
    const char *name;
    size_t size;
    int hr;
} dtypes[] = {
    {"F64", 8, -1},  {"F32", 4, HR_F32}, {"F16", 2, HR_F16}, {"BF16", 2, HR_BF16}, {"I64", 8, -1},
    {"I32", 4, HR_I32}, {"I16", 2, -1},  {"I8", 1, -1},      {"U64", 8, -1},       {"U32", 4, -1},
    {"U16", 2, -1},  {"U8", 1, HR_U8},   {"BOOL", 1, -1},    {"F8_E4M3", 1, -1},   {"F8_E5M2", 1, -1},
};
#define N_DTYPES (int)(sizeof dtypes / sizeof dtypes[0])

static const char *shape_str(int ndim, const int64_t *d, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

void hr_safetensors_free(hr_safetensors_t *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) hr_free(f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        hr_free(f->meta_keys[i]);
        hr_free(f->meta_values[i]);
    }
    hr_free(f->t);
    hr_free(f->by_name);
    hr_free(f->meta_keys);
    hr_free(f->meta_values);
    hr_free(f->path);
    hr_free(f);
}

/* Comparators for arrays of tensor pointers. */
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const hr_st_tensor *const *)a)->name, (*(const hr_st_tensor *const *)b)->name);
}
static int cmp_begin(const void *a, const void *b) {
    const hr_st_tensor *x = *(const hr_st_tensor *const *)a, *y = *(const hr_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static hr_status bad(const hr_safetensors_t *f, const char *name, const hr_json *at, const char *msg) {
    if (name)
        return hr_error_set(HR_ERR_FORMAT, "%s: byte %zu: tensor '%s': %s; the file is corrupt or not safetensors",
                            f->path, at->offset, name, msg);
    return hr_error_set(HR_ERR_FORMAT, "%s: byte %zu: %s; the file is corrupt or not safetensors", f->path, at->offset,
                        msg);
}

static hr_status parse_metadata(hr_safetensors_t *f, const hr_json *m) {
    if (m->type != HR_JSON_OBJECT) return bad(f, NULL, m, "__metadata__ must be an object of strings");
    f->meta_keys = hr_calloc((size_t)m->n, sizeof(char *));
    f->meta_values = hr_calloc((size_t)m->n, sizeof(char *));
    if (!f->meta_keys || !f->meta_values) return HR_ERR_OOM;
    for (int i = 0; i < m->n; i++) {
        if (m->items[i].type != HR_JSON_STRING)
            return bad(f, NULL, &m->items[i], "__metadata__ values must be strings");
        for (int j = 0; j < i; j++)
            if (strcmp(m->keys[i], m->keys[j]) == 0) return bad(f, NULL, &m->items[i], "duplicate __metadata__ key");
        f->meta_keys[i] = hr_strdup(m->keys[i]);
        f->meta_values[i] = hr_strdup(m->items[i].str);
        f->n_meta = i + 1;
        if (!f->meta_keys[i] || !f->meta_values[i]) return HR_ERR_OOM;
    }
    return HR_OK;
}

static hr_status parse_tensor(hr_safetensors_t *f, const char *name, const hr_json *v, hr_st_tensor *t) {
    if (v->type != HR_JSON_OBJECT)
        return bad(f, name, v, "expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") && strcmp(v->keys[i], "data_offsets"))
            return bad(f, name, &v->items[i], "unknown field (expected dtype, shape, data_offsets)");
    const hr_json *dt = hr_json_get(v, "dtype"), *sh = hr_json_get(v, "shape"), *off = hr_json_get(v, "data_offsets");
    if (!dt || !sh || !off) return bad(f, name, v, "missing dtype, shape or data_offsets");
    if (dt->type != HR_JSON_STRING) return bad(f, name, dt, "dtype must be a string");
    int k = 0;
    while (k < N_DTYPES && strcmp(dtypes[k].name, dt->str) != 0) k++;
    if (k == N_DTYPES) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "unknown dtype '%.40s' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL ...)", dt->str);
        return bad(f, name, dt, msg);
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dtypes[k].name);
    t->hr_dtype = dtypes[k].hr;
    t->elsize = dtypes[k].size;
    if (sh->type != HR_JSON_ARRAY) return bad(f, name, sh, "shape must be an array of sizes");
    if (sh->n > HR_ST_MAX_DIMS) return bad(f, name, sh, "more than 8 dimensions");
    t->ndim = sh->n;
    t->numel = 1;
    for (int i = 0; i < sh->n; i++) {
        if (!hr_json_uint(&sh->items[i], &t->dims[i]))
            return bad(f, name, &sh->items[i], "a size must be an integer >= 0");
        if (!hr_mul_ok(t->numel, t->dims[i], &t->numel)) return bad(f, name, sh, "shape too large (overflow)");
    }
    int64_t b, e, bytes;
    if (off->type != HR_JSON_ARRAY || off->n != 2 || !hr_json_uint(&off->items[0], &b) ||
        !hr_json_uint(&off->items[1], &e))
        return bad(f, name, off, "data_offsets must be [begin, end], two integers >= 0");
    if (e < b) return bad(f, name, off, "data_offsets end before they begin");
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (!hr_mul_ok(t->numel, (int64_t)t->elsize, &bytes)) return bad(f, name, sh, "shape too large (overflow)");
    if (bytes != e - b) {
        char msg[200], s[120];
        snprintf(msg, sizeof msg, "shape %s of %s needs %lld bytes but data_offsets [%lld, %lld] hold %lld",
                 shape_str(t->ndim, t->dims, s, sizeof s), t->dtype, (long long)bytes, (long long)b, (long long)e,
                 (long long)(e - b));
        return bad(f, name, off, msg);
    }
    t->name = hr_strdup(name);
    return t->name ? HR_OK : HR_ERR_OOM;
}

/* Checks, in order of offsets, that the tensors tile [0, data_len) exactly:
 * no gap, no overlap, nothing past the end (what the reference reader checks). */
static hr_status check_layout(hr_safetensors_t *f, uint64_t data_len) {
    const hr_st_tensor **order = hr_malloc((size_t)(f->n ? f->n : 1) * sizeof *order);
    if (!order) return HR_ERR_OOM;
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    uint64_t pos = 0;
    hr_status st = HR_OK;
    for (int i = 0; i < f->n && st == HR_OK; i++) {
        const hr_st_tensor *t = order[i];
        if (t->end > data_len)
            st = hr_error_set(HR_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes); "
                              "the file is truncated or corrupt",
                              f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                              (unsigned long long)data_len);
        else if (t->begin < pos)
            st = hr_error_set(
                HR_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]", f->path,
                t->name, (unsigned long long)t->begin, (unsigned long long)t->end, order[i - 1]->name,
                (unsigned long long)order[i - 1]->begin, (unsigned long long)order[i - 1]->end);
        else if (t->begin > pos)
            st = hr_error_set(HR_ERR_FORMAT, "%s: tensor '%s': data_offsets begin at %llu, leaving bytes [%llu, %llu) "
                              "of the data unused; safetensors tensors must be contiguous",
                              f->path, t->name, (unsigned long long)t->begin, (unsigned long long)pos,
                              (unsigned long long)t->begin);
        pos = t->end;
    }
    if (st == HR_OK && pos != data_len)
        st = hr_error_set(HR_ERR_FORMAT, "%s: the tensors cover %llu bytes of data but the file holds %llu; "
                          "the file is corrupt or has trailing bytes",
                          f->path, (unsigned long long)pos, (unsigned long long)data_len);
    hr_free(order);
    return st;
}

static hr_status parse_header(hr_safetensors_t *f, const char *text, size_t len, uint64_t data_len) {
    hr_json *root;
    hr_status st = hr_json_parse(text, len, f->path, 8, &root);
    if (st != HR_OK) return st;
    if (root->type != HR_JSON_OBJECT) {
        st = bad(f, NULL, root, "the header must be a JSON object");
        goto done;
    }
    f->t = hr_calloc((size_t)(root->n ? root->n : 1), sizeof *f->t);
    f->by_name = hr_malloc((size_t)(root->n ? root->n : 1) * sizeof *f->by_name);
    if (!f->t || !f->by_name) { st = HR_ERR_OOM; goto done; }
    bool have_meta = false;
    for (int i = 0; i < root->n && st == HR_OK; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            if (have_meta) st = bad(f, NULL, &root->items[i], "two __metadata__ entries");
            else st = parse_metadata(f, &root->items[i]);
            have_meta = true;
            continue;
        }
        st = parse_tensor(f, root->keys[i], &root->items[i], &f->t[f->n]);
        if (st == HR_OK) f->n++;
    }
    if (st != HR_OK) goto done;
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i]->name, f->by_name[i - 1]->name) == 0) {
            st = hr_error_set(HR_ERR_FORMAT, "%s: tensor '%s' appears twice in the header; the file is corrupt",
                              f->path, f->by_name[i]->name);
            goto done;
        }
    st = check_layout(f, data_len);
done:
    hr_json_free(root);
    return st;
}

static hr_safetensors_t *new_table(const char *name) {
    hr_safetensors_t *f = hr_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->fd = -1;
    f->path = hr_strdup(name ? name : "(memory)");
    if (!f->path) { hr_free(f); return NULL; }
    return f;
}

static uint64_t read_u64le(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* The header length must leave room for itself in the file. */
static bool check_n(hr_safetensors_t *f, uint64_t n, uint64_t size) {
    if (size < 8) {
        hr_error_set(HR_ERR_FORMAT, "%s: %llu bytes is too short for a safetensors file (the 8-byte header length is "
                     "missing); the file is truncated or not safetensors", f->path, (unsigned long long)size);
        return false;
    }
    if (n > HR_ST_MAX_HEADER || n > size - 8) {
        hr_error_set(HR_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)%s; the file is "
                     "truncated or not safetensors", f->path, (unsigned long long)n, (unsigned long long)size,
                     n > HR_ST_MAX_HEADER ? " or past the 100 MB limit" : "");
        return false;
    }
    if (n < 2) {
        hr_error_set(HR_ERR_FORMAT, "%s: header length %llu is too short for a JSON object", f->path,
                     (unsigned long long)n);
        return false;
    }
    return true;
}

hr_safetensors_t *hr_safetensors_open_memory(const void *buf, size_t len, const char *name_for_errors) {
    hr_safetensors_t *f = new_table(name_for_errors);
    if (!f) return NULL;
    f->mem = buf;
    uint64_t n = len >= 8 ? read_u64le(f->mem) : 0;
    if (!check_n(f, n, len) || parse_header(f, (const char *)f->mem + 8, n, len - 8 - n) != HR_OK) {
        hr_safetensors_free(f);
        return NULL;
    }
    f->data_start = 8 + n;
    return f;
}

static hr_status read_at(hr_safetensors_t *f, void *dst, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return hr_error_set(HR_ERR_IO, "%s: reading %zu bytes at offset %llu: %s", f->path, n,
                                (unsigned long long)off, r < 0 ? strerror(errno) : "the file got shorter while open");
        done += (size_t)r;
    }
    return HR_OK;
}

hr_safetensors_t *hr_safetensors_open(const char *path) {
    hr_safetensors_t *f = new_table(path);
    if (!f) return NULL;
    struct stat sb;
    unsigned char len8[8];
    char *text = NULL;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        hr_error_set(HR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        hr_error_set(HR_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size, n = 0;
    if (size >= 8) {
        if (read_at(f, len8, 8, 0) != HR_OK) goto fail;
        n = read_u64le(len8);
    }
    if (!check_n(f, n, size)) goto fail;
    text = hr_malloc((size_t)n);
    if (!text || read_at(f, text, (size_t)n, 8) != HR_OK) goto fail;
    if (parse_header(f, text, (size_t)n, size - 8 - n) != HR_OK) goto fail;
    hr_free(text);
    f->data_start = 8 + n;
    return f;
fail:
    hr_free(text);
    hr_safetensors_free(f);
    return NULL;
}

int hr_safetensors_count(const hr_safetensors_t *f) { return f->n; }
const hr_st_tensor *hr_safetensors_at(const hr_safetensors_t *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }
const char *hr_safetensors_path(const hr_safetensors_t *f) { return f->path; }
int hr_safetensors_meta_count(const hr_safetensors_t *f) { return f->n_meta; }
const char *hr_safetensors_meta_key(const hr_safetensors_t *f, int i) {
    return i >= 0 && i < f->n_meta ? f->meta_keys[i] : NULL;
}

const char *hr_safetensors_meta(const hr_safetensors_t *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

const hr_st_tensor *hr_safetensors_find(const hr_safetensors_t *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, f->by_name[mid]->name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    char list[400];
    size_t k = 0;
    list[0] = 0;
    for (int i = 0; i < f->n && k < sizeof list - 40; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s'%s'", i ? ", " : "", f->t[i].name);
    if (k >= sizeof list - 40 && f->n) snprintf(list + sizeof list - 40, 40, ", ... (%d in all)", f->n);
    hr_error_set(HR_ERR_FORMAT, "no tensor '%s' in %s (it has %s%s); was it written for another model?", name, f->path,
                 f->n ? "" : "no tensors", list);
    return NULL;
}

static bool float_dtype(const char *d) {
    return !strcmp(d, "F32") || !strcmp(d, "F16") || !strcmp(d, "BF16") || !strcmp(d, "F64");
}

const hr_st_tensor *hr_safetensors_expect(const hr_safetensors_t *f, const char *name, const char *dtype, int ndim,
                                          const int64_t *dims) {
    const hr_st_tensor *t = hr_safetensors_find(f, name);
    if (!t) return NULL;
    if (dtype ? strcmp(dtype, t->dtype) != 0 : !float_dtype(t->dtype)) {
        hr_error_set(HR_ERR_FORMAT, "tensor '%s' in %s has dtype %s, expected %s", name, f->path, t->dtype,
                     dtype ? dtype : "a float (F32, F16, BF16 or F64)");
        return NULL;
    }
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->dims[i] == dims[i];
    if (!same) {
        char a[120], b[120];
        hr_error_set(HR_ERR_FORMAT, "tensor '%s' in %s has shape %s, the model expects %s", name, f->path,
                     shape_str(t->ndim, t->dims, a, sizeof a), shape_str(ndim, dims, b, sizeof b));
        return NULL;
    }
    return t;
}

hr_status hr_safetensors_read(hr_safetensors_t *f, const hr_st_tensor *t, void *dst) {
    size_t n = (size_t)(t->end - t->begin);
    if (f->fd < 0) {
        memcpy(dst, f->mem + f->data_start + t->begin, n);
        return HR_OK;
    }
    return read_at(f, dst, n, f->data_start + t->begin);
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F) bits = sign | 0x7F800000 | man << 13;       /* inf, nan */
    else if (exp) bits = sign | (exp + 112) << 23 | man << 13;    /* normal */
    else if (!man) bits = sign;                                    /* zero */
    else {                                                         /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) { man <<= 1; exp--; }
        bits = sign | exp << 23 | (man & 0x3FF) << 13;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

hr_status hr_safetensors_read_f32(hr_safetensors_t *f, const hr_st_tensor *t, float *dst) {
    if (!strcmp(t->dtype, "F32")) return hr_safetensors_read(f, t, dst);
    if (!float_dtype(t->dtype))
        return hr_error_set(HR_ERR_FORMAT, "tensor '%s' in %s has dtype %s; only F32, F16, BF16 and F64 convert to F32",
                            t->name, f->path, t->dtype);
    /* Converted in chunks through a small buffer. */
    unsigned char chunk[8192];
    size_t per = sizeof chunk / t->elsize;
    hr_st_tensor part = *t;
    for (int64_t i = 0; i < t->numel; i += (int64_t)per) {
        size_t k = (size_t)(t->numel - i) < per ? (size_t)(t->numel - i) : per;
        part.begin = t->begin + (uint64_t)i * t->elsize;
        part.end = part.begin + k * t->elsize;
        hr_status st = hr_safetensors_read(f, &part, chunk);
        if (st != HR_OK) return st;
        for (size_t j = 0; j < k; j++) {
            if (t->elsize == 8) {
                double d;
                memcpy(&d, chunk + 8 * j, 8);
                dst[i + (int64_t)j] = (float)d;
            } else {
                uint16_t h = (uint16_t)(chunk[2 * j] | chunk[2 * j + 1] << 8);
                uint32_t bits = (uint32_t)h << 16;
                float v;
                memcpy(&v, &bits, 4);
                dst[i + (int64_t)j] = !strcmp(t->dtype, "BF16") ? v : half_to_float(h);
            }
        }
    }
    return HR_OK;
}

/* ---- writing --------------------------------------------------------------- */
typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *p = hr_realloc(b->s, nc);
        if (!p) { b->oom = true; return; }
        b->s = p;
        b->cap = nc;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(strbuf *b, const char *fmt, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal; names and values are taken as UTF-8 as they are. */
static void sb_json_str(strbuf *b, const char *s) {
    sb_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; sb_put(b, e, 2); }
        else if (c < 0x20) sb_fmt(b, "\\u%04llx", c);
        else sb_put(b, s, 1);
    }
    sb_str(b, "\"");
}

static hr_status write_all(int fd, const void *p, size_t n, const char *tmp) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return hr_error_set(HR_ERR_IO, "writing %s: %s", tmp, strerror(errno));
        c += w;
        n -= (size_t)w;
    }
    return HR_OK;
}

static int dtype_index(const char *name) {
    for (int k = 0; k < N_DTYPES; k++)
        if (name && !strcmp(dtypes[k].name, name)) return k;
    return -1;
}

/* Builds the header; sizes[i] gets each tensor's byte size and order[] the
 * order of the data: by element size, largest first, as the reference writer
 * does, so that every tensor starts aligned to its element size. */
static hr_status build_header(const char *path, const hr_st_entry *t, int n, const char *const *keys,
                              const char *const *values, int n_meta, strbuf *h, uint64_t *sizes, int *order) {
    uint64_t *offs = sizes + n;
    for (int i = 0; i < n; i++) {
        int k = dtype_index(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__"))
            return hr_error_set(HR_ERR_INVALID_ARG,
                                "writing %s: tensor %d has no name or the reserved name __metadata__", path, i);
        if (k < 0)
            return hr_error_set(HR_ERR_INVALID_ARG, "writing %s: tensor '%s' has unknown dtype '%s'", path, t[i].name,
                                t[i].dtype ? t[i].dtype : "(null)");
        if (t[i].ndim < 0 || t[i].ndim > HR_ST_MAX_DIMS)
            return hr_error_set(HR_ERR_INVALID_ARG, "writing %s: tensor '%s' has %d dimensions (0 to 8 allowed)", path,
                                t[i].name, t[i].ndim);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name))
                return hr_error_set(HR_ERR_INVALID_ARG, "writing %s: tensor '%s' is listed twice", path, t[i].name);
        int64_t bytes = (int64_t)dtypes[k].size;
        for (int d = 0; d < t[i].ndim; d++)
            if (!hr_mul_ok(bytes, t[i].dims[d], &bytes))
                return hr_error_set(HR_ERR_INVALID_ARG, "writing %s: tensor '%s' has a negative or too large shape",
                                    path, t[i].name);
        sizes[i] = (uint64_t)bytes;
    }
    uint64_t off = 0;
    int m = 0;
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; i < n; i++)
            if (dtypes[dtype_index(t[i].dtype)].size == es) {
                order[m++] = i;
                offs[i] = off;
                off += sizes[i];
            }
    sb_str(h, "{");
    if (n_meta > 0) {
        sb_str(h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(h, ",");
            sb_json_str(h, keys[i]);
            sb_str(h, ":");
            sb_json_str(h, values[i]);
        }
        sb_str(h, "}");
    }
    for (int i = 0; i < n; i++) {
        if (n_meta > 0 || i) sb_str(h, ",");
        sb_json_str(h, t[i].name);
        sb_str(h, ":{\"dtype\":\"");
        sb_str(h, dtypes[dtype_index(t[i].dtype)].name);
        sb_str(h, "\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) sb_fmt(h, d ? ",%lld" : "%lld", (long long)t[i].dims[d]);
        sb_fmt(h, "],\"data_offsets\":[%lld,", (long long)offs[i]);
        sb_fmt(h, "%lld]}", (long long)(offs[i] + sizes[i]));
    }
    sb_str(h, "}");
    while (!h->oom && h->len % 8) sb_str(h, " ");
    return h->oom ? HR_ERR_OOM : HR_OK;
}

static hr_status sync_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return hr_error_set(HR_ERR_IO, "wrote %s but cannot open its directory %s to sync it: %s", path, dir,
                                    strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    /* Some file systems cannot sync a directory (EINVAL): the rename stands. */
    if (r != 0 && e != EINVAL)
        return hr_error_set(HR_ERR_IO, "wrote %s but syncing its directory failed: %s", path, strerror(e));
    return HR_OK;
}

/* The file a write of `path` replaces: path itself, or the file a symlink
 * leads to (so the link survives the rename); into out (PATH_MAX). Refuses a
 * directory or another kind of file, and a link that leads nowhere. */
static hr_status write_target(const char *path, char *out, size_t n) {
    struct stat ls, fs;
    if (!path[0]) return hr_error_set(HR_ERR_IO, "cannot write a checkpoint to an empty path");
    snprintf(out, n, "%s", path);
    if (lstat(path, &ls) != 0) {
        if (errno == ENOENT) return HR_OK; /* a new file; its directory is checked by the caller */
        return hr_error_set(HR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    if (S_ISLNK(ls.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real)
            return hr_error_set(HR_ERR_IO, "cannot write %s: it is a symbolic link to a file that cannot be reached "
                                "(%s); point it at a file, or remove it", path, strerror(errno));
        snprintf(out, n, "%s", real);
        free(real);
        if (stat(out, &fs) != 0) return hr_error_set(HR_ERR_IO, "cannot write %s (%s): %s", path, out, strerror(errno));
        ls = fs;
    }
    if (S_ISDIR(ls.st_mode))
        return hr_error_set(HR_ERR_IO, "cannot write %s: it is a directory; give a file name, e.g. %s/model.ckpt", path,
                            path);
    if (!S_ISREG(ls.st_mode))
        return hr_error_set(HR_ERR_IO, "cannot write %s: it is not a regular file (a device, pipe or socket); a "
                            "checkpoint is written to a temporary file and renamed over it", path);
    return HR_OK;
}

/* A temporary file beside `target`, unique to this write: `target.` and six
 * characters that mkstemp chooses (its template is the six X's below). */
static int make_temp(const char *target, char *tmp, size_t n) {
    snprintf(tmp, n, "%s.XXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        mode_t um = umask(0);
        umask(um);
        fchmod(fd, 0666 & ~um); /* mkstemp makes 0600; a checkpoint gets a plain file's mode */
    }
    return fd;
}

hr_status hr_safetensors_check_writable(const char *path) {
    char target[4096], tmp[4200];
    if (strlen(path) >= sizeof target - 8) return hr_error_set(HR_ERR_IO, "cannot write %s: the path is too long", path);
    hr_status st = write_target(path, target, sizeof target);
    if (st) return st;
    int fd = make_temp(target, tmp, sizeof tmp);
    if (fd < 0) {
        char dir[4096];
        const char *slash = strrchr(target, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == target ? 1 : slash - target) : 1, slash ? target : ".");
        return hr_error_set(HR_ERR_IO, "cannot write %s: cannot create a file in %s: %s%s", path, dir, strerror(errno),
                            errno == ENOENT ? " (make the directory first)" : "");
    }
    close(fd);
    unlink(tmp);
    return HR_OK;
}

hr_status hr_safetensors_write(const char *path, const hr_st_entry *t, int n, const char *const *keys,
                               const char *const *values, int n_meta, hr_st_fill_fn fill, void *ctx) {
    strbuf h = {0};
    uint64_t *sizes = hr_calloc((size_t)(n > 0 ? 2 * n : 1), sizeof *sizes);
    int *order = hr_calloc((size_t)(n > 0 ? n : 1), sizeof *order);
    char *target = hr_malloc(4096), *tmp = hr_malloc(4200);
    void *scratch = NULL;
    int fd = -1;
    hr_status st = HR_OK;
    if (!sizes || !order || !tmp || !target) { st = HR_ERR_OOM; goto done; }
    if (strlen(path) >= 4096 - 8) { st = hr_error_set(HR_ERR_IO, "cannot write %s: the path is too long", path); goto done; }
    if ((st = write_target(path, target, 4096)) != HR_OK) goto done;
    st = build_header(path, t, n, keys, values, n_meta, &h, sizes, order);
    if (st != HR_OK) goto done;
    /* Everything that can run out of memory happens before the file is touched. */
    uint64_t biggest = 0;
    for (int i = 0; i < n; i++)
        if (!t[i].data && sizes[i] > biggest) biggest = sizes[i];
    for (int i = 0; i < n; i++)
        if (!t[i].data && !fill) {
            st = hr_error_set(HR_ERR_INVALID_ARG, "writing %s: tensor '%s' has no data and no fill function", path,
                              t[i].name);
            goto done;
        }
    if (biggest && !(scratch = hr_malloc((size_t)biggest))) { st = HR_ERR_OOM; goto done; }
    fd = make_temp(target, tmp, 4200);
    if (fd < 0) {
        st = hr_error_set(HR_ERR_IO, "cannot create %s (to write %s): %s", tmp, path, strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    st = write_all(fd, len8, 8, tmp);
    if (st == HR_OK) st = write_all(fd, h.s, h.len, tmp);
    for (int j = 0; j < n && st == HR_OK; j++) {
        int i = order[j];
        const void *src = t[i].data;
        if (!src) {
            st = fill(ctx, i, scratch);
            if (st != HR_OK) { hr_error_prefix("writing tensor '%s' of %s", t[i].name, path); break; }
            src = scratch;
        }
        st = write_all(fd, src, (size_t)sizes[i], tmp);
    }
    if (st == HR_OK && fsync(fd) != 0) st = hr_error_set(HR_ERR_IO, "syncing %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == HR_OK) st = hr_error_set(HR_ERR_IO, "closing %s: %s", tmp, strerror(errno));
    fd = -1;
    if (st == HR_OK && rename(tmp, target) != 0)
        st = hr_error_set(HR_ERR_IO, "renaming %s to %s: %s", tmp, target, strerror(errno));
    if (st != HR_OK) {
        unlink(tmp); /* the previous PATH, if any, is untouched */
        goto done;
    }
    st = sync_dir(target);
done:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    hr_free(scratch);
    hr_free(tmp);
    hr_free(target);
    hr_free(order);
    hr_free(sizes);
    hr_free(h.s);
    return st;
}
