/* choices.c — a small text file of choices measured on this machine, kept
 * between runs (the CUDA backend's convolution algorithms: conv_cache.c). A
 * line a choice, KEY \t A \t B \t C, A..C integers, C >= 0; '#' lines are
 * comments. Reading skips whatever is not such a line (a cache must never
 * fail a job, and a stale or damaged one is simply not used); writing is
 * whole or not at all (hr_file_begin / hr_file_commit), merged with what
 * another run wrote since. fuzz/fuzz_choices.c feeds the reader anything. */
#include "core/choices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;
    int64_t v[3];
} entry;

struct hr_choices {
    char *dir, *path;
    entry *e;
    int n, cap;
    bool dirty; /* choices put here that the file lacks */
};

static entry *find(const hr_choices *k, const char *key) {
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->e[i].key, key)) return &k->e[i];
    return NULL;
}

/* Adds key (or replaces its values when `replace`); false without memory. */
static bool add(hr_choices *k, const char *key, const int64_t v[3], bool replace) {
    entry *e = find(k, key);
    if (e) {
        if (replace) memcpy(e->v, v, sizeof e->v);
        return true;
    }
    if (k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 64;
        entry *ne = hr_realloc(k->e, sizeof *ne * (size_t)cap);
        if (!ne) return false;
        k->e = ne, k->cap = cap;
    }
    char *s = hr_strdup(key);
    if (!s) return false;
    k->e[k->n].key = s;
    memcpy(k->e[k->n].v, v, sizeof k->e[k->n].v);
    k->n++;
    return true;
}

/* A decimal integer ending at `stop` (a tab, or a newline for the last). */
static bool number(const char **p, const char *end, char stop, int64_t *out) {
    const char *s = *p;
    bool neg = s < end && *s == '-';
    if (neg) s++;
    if (s == end || *s < '0' || *s > '9') return false;
    uint64_t v = 0;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v >= (UINT64_C(1) << 59)) return false; /* far past any algorithm, index or size; no wrap-around */
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (s == end || *s != stop) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    *p = s + 1;
    return true;
}

bool hr_choices_parse(hr_choices *k, const char *buf, size_t n) {
    const char *p = buf, *end = buf + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break; /* a last line without its newline: cut short, skipped */
        const char *tab = memchr(p, '\t', (size_t)(nl - p));
        int64_t v[3];
        const char *q = tab ? tab + 1 : NULL;
        bool ok = *p != '#' && tab && tab > p && tab - p < HR_CHOICE_KEY && !memchr(p, 0, (size_t)(tab - p)) &&
                  number(&q, nl, '\t', &v[0]) && number(&q, nl, '\t', &v[1]) && number(&q, nl + 1, '\n', &v[2]) &&
                  v[2] >= 0;
        if (ok) {
            char key[HR_CHOICE_KEY];
            memcpy(key, p, (size_t)(tab - p));
            key[tab - p] = 0;
            if (!add(k, key, v, false)) return false;
        }
        p = nl + 1;
    }
    return true;
}

/* The file's choices that k lacks; a file past `HR_CHOICES_MAX` bytes, or
 * none, adds nothing. */
#define HR_CHOICES_MAX ((long)4 << 20)
static void load(hr_choices *k) {
    FILE *f = fopen(k->path, "rb");
    if (!f) return;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= HR_CHOICES_MAX && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = hr_malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        if (!hr_choices_parse(k, buf, (size_t)n)) hr_error_clear();
    } else {
        hr_error_clear();
    }
    hr_free(buf);
    fclose(f);
}

hr_choices *hr_choices_open(const char *dir, const char *name) {
    hr_choices *k = hr_calloc(1, sizeof *k);
    if (!k) return NULL;
    k->dir = hr_strdup(dir);
    k->path = k->dir ? hr_malloc(strlen(dir) + strlen(name) + 2) : NULL;
    if (!k->path) {
        hr_choices_free(k);
        return NULL;
    }
    sprintf(k->path, "%s/%s", dir, name);
    load(k);
    return k;
}

bool hr_choices_get(const hr_choices *k, const char *key, int64_t v[3]) {
    const entry *e = k ? find(k, key) : NULL;
    if (e) memcpy(v, e->v, sizeof e->v);
    return e != NULL;
}

bool hr_choices_put(hr_choices *k, const char *key, const int64_t v[3]) {
    if (!k || !key[0] || key[0] == '#' || strlen(key) >= HR_CHOICE_KEY || strpbrk(key, "\t\n") || v[2] < 0)
        return false; /* a line the reader would skip */
    const entry *e = find(k, key);
    if (e && !memcmp(e->v, v, sizeof e->v)) return true;
    if (!add(k, key, v, true)) return false;
    k->dirty = true;
    return true;
}

void hr_choices_write(const hr_choices *k, FILE *f, const char *comment) {
    if (comment) fprintf(f, "# %s\n", comment);
    for (int i = 0; i < k->n; i++)
        fprintf(f, "%s\t%lld\t%lld\t%lld\n", k->e[i].key, (long long)k->e[i].v[0], (long long)k->e[i].v[1],
                (long long)k->e[i].v[2]);
}

hr_status hr_choices_save(hr_choices *k, const char *comment) {
    if (!k || !k->dirty) return HR_OK;
    load(k); /* what another run wrote since: ours win */
    if (!hr_make_dirs(k->dir))
        return hr_error_set(HR_ERR_IO, "cannot make the cache folder %s: %s", k->dir, strerror(errno));
    size_t tn = strlen(k->path) + 8;
    char *tmp = hr_malloc(tn);
    if (!tmp) return hr_last_status();
    FILE *f = hr_file_begin(k->path, tmp, tn);
    hr_status st = f ? HR_OK : hr_last_status();
    if (f) {
        hr_choices_write(k, f, comment);
        st = hr_file_commit(f, tmp, k->path);
    }
    hr_free(tmp);
    if (st == HR_OK) k->dirty = false;
    return st;
}

const char *hr_choices_path(const hr_choices *k) { return k ? k->path : ""; }
int hr_choices_count(const hr_choices *k) { return k ? k->n : 0; }

void hr_choices_free(hr_choices *k) {
    if (!k) return;
    for (int i = 0; i < k->n; i++) hr_free(k->e[i].key);
    hr_free(k->e);
    hr_free(k->dir);
    hr_free(k->path);
    hr_free(k);
}
