/* conv_cache.c — the convolution algorithms that timing chose on this
 * device, kept between runs. A plan made where the choice is known holds that
 * algorithm's workspace alone, not its largest candidate's, and its first
 * step times nothing (the timing modes plan every candidate's workspace
 * until the first step has timed them: HR_CUDNN_ALGO=fastest's FFT and
 * Winograd candidates want gigabytes the winner may not).
 *
 * One file a device, driver and cuDNN, in the cache folder (hr_cache_dir):
 * conv-<device>-<driver>-cudnn<version>-<headroom>.tsv, a line a choice,
 * KEY \t A \t B \t WORKSPACE (conv_algo.c says what A and B are). A choice
 * is used only where it is still among the candidates, with the same
 * workspace; a line that does not parse is skipped. Nothing here can fail a
 * job: without memory or a writable folder the runs time as before.
 * HR_CUDNN_CACHE=0 turns it off. */
#include "backend/cuda/conv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;
    int64_t a, b;
    size_t ws;
} entry;

struct hr_conv_cache {
    char *dir, *path;
    entry *e;
    int n, cap;
    bool dirty; /* choices made here that the file lacks */
};

#define CACHE_MAX_BYTES ((long)4 << 20)

static entry *find(hr_conv_cache *k, const char *key) {
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->e[i].key, key)) return &k->e[i];
    return NULL;
}

/* Adds or replaces a choice; false without memory. */
static bool put(hr_conv_cache *k, const char *key, int64_t a, int64_t b, size_t ws, bool replace) {
    entry *e = find(k, key);
    if (e) {
        if (replace) e->a = a, e->b = b, e->ws = ws;
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
    k->e[k->n++] = (entry){s, a, b, ws};
    return true;
}

/* The file's choices that k lacks (k's own win). */
static void load(hr_conv_cache *k) {
    FILE *f = fopen(k->path, "r");
    if (!f) return;
    char line[512];
    long read = 0;
    bool rest = false; /* the rest of a line too long for `line`: skipped */
    while (fgets(line, sizeof line, f) && read < CACHE_MAX_BYTES) {
        read += (long)strlen(line);
        bool cut = !strchr(line, '\n'), skip = rest || cut || line[0] == '#';
        rest = cut;
        if (skip) continue;
        char *t1 = strchr(line, '\t');
        if (!t1) continue;
        *t1 = 0;
        char *end;
        errno = 0;
        long long a = strtoll(t1 + 1, &end, 10);
        if (*end != '\t') continue;
        long long b = strtoll(end + 1, &end, 10);
        if (*end != '\t') continue;
        long long ws = strtoll(end + 1, &end, 10);
        if ((*end != '\n' && *end != '\r') || errno || ws < 0 || !line[0]) continue;
        if (!put(k, line, a, b, (size_t)ws, false)) {
            hr_error_clear();
            break;
        }
    }
    fclose(f);
}

static void cache_free(hr_conv_cache *k) {
    if (!k) return;
    for (int i = 0; i < k->n; i++) hr_free(k->e[i].key);
    hr_free(k->e);
    hr_free(k->dir);
    hr_free(k->path);
    hr_free(k);
}

/* Letters, digits, '.' and '-' as they are; anything else '_'. */
static void sanitize(char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '-'))
            *s = '_';
}

/* The backend's cache, read at the first ask; NULL when off or impossible. */
static hr_conv_cache *cache_of(hr_cuda *c) {
    if (!c->opt.cudnn_cache || c->conv_cache_off) return NULL;
    if (c->conv_cache) return c->conv_cache;
    c->conv_cache_off = true; /* until it exists */
    hr_conv_cache *k = hr_calloc(1, sizeof *k);
    char name[600];
    int driver = 0;
    cudaDriverGetVersion(&driver);
    snprintf(name, sizeof name, "conv-%s-%d-cudnn%zu-%s.tsv", c->device_name, driver,
             c->dnn ? c->dnn->version : (size_t)0, HR_VERSION);
    sanitize(name);
    if (k) k->dir = hr_cache_dir();
    if (k && k->dir && (k->path = hr_malloc(strlen(k->dir) + strlen(name) + 2)) != NULL) {
        sprintf(k->path, "%s/%s", k->dir, name);
        load(k);
        c->conv_cache = k;
        c->conv_cache_off = false;
        return k;
    }
    hr_error_clear(); /* no memory or no folder: no cache */
    cache_free(k);
    return NULL;
}

void hr_conv_cache_key(const hr_cuda *c, const hr_cuda_conv *p, int which, bool add, bool graph, char *key,
                       size_t n) {
    static const char *mode[] = {"precise", "deterministic", "heuristic", "fastest"};
    int m = c->opt.cudnn_algo;
    snprintf(key, n, "%s %s %s %s %d ws%llu n%d c%d h%d w%d k%d r%d s%d u%d v%d p%d q%d d%d e%d g%d a%d tf32 %d hr%d",
             m >= 0 && m < 4 ? mode[m] : "?", graph ? "graph" : "legacy", hr_dtype_name(p->dt),
             which == FWD ? "fwd" : which == BWD_DATA ? "bwd_data" : "bwd_filter", add ? 1 : 0,
             (unsigned long long)(c->opt.cudnn_fast_ws_mib > 0 ? c->opt.cudnn_fast_ws_mib : 0), p->N, p->C, p->H,
             p->W, p->K, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw, p->G, p->align, p->tf32 ? 1 : 0,
             c->opt.cudnn_half_reduction ? 1 : 0);
}

bool hr_conv_cache_get(hr_cuda *c, const char *key, int64_t *a, int64_t *b, size_t *ws) {
    hr_conv_cache *k = cache_of(c);
    entry *e = k ? find(k, key) : NULL;
    if (!e) return false;
    *a = e->a, *b = e->b, *ws = e->ws;
    return true;
}

void hr_conv_cache_put(hr_cuda *c, const char *key, int64_t a, int64_t b, size_t ws) {
    hr_conv_cache *k = cache_of(c);
    if (!k) return;
    entry *e = find(k, key);
    if (e && e->a == a && e->b == b && e->ws == ws) return;
    if (put(k, key, a, b, ws, true))
        k->dirty = true;
    else
        hr_error_clear();
}

void hr_conv_cache_close(hr_cuda *c) {
    hr_conv_cache *k = c->conv_cache;
    c->conv_cache = NULL;
    if (k && k->dirty) {
        load(k); /* what another run wrote since: ours win */
        char *tmp = hr_malloc(strlen(k->path) + 8);
        const char *why = !tmp ? "out of memory" : NULL;
        if (tmp && !hr_make_dirs(k->dir)) why = strerror(errno);
        FILE *f = why ? NULL : hr_file_begin(k->path, tmp, strlen(k->path) + 8);
        if (f) {
            fprintf(f, "# headroom %s: convolution algorithms chosen by timing on this device: KEY\tA\tB\tWORKSPACE\n",
                    HR_VERSION);
            for (int i = 0; i < k->n; i++)
                fprintf(f, "%s\t%lld\t%lld\t%zu\n", k->e[i].key, (long long)k->e[i].a, (long long)k->e[i].b,
                        k->e[i].ws);
        }
        if (!f || hr_file_commit(f, tmp, k->path) != HR_OK) {
            static bool warned;
            if (!warned && c->opt.cuda_verbose)
                fprintf(stderr, "headroom: warning: convolution choices not saved in %s: %s\n", k->path,
                        why ? why : hr_last_error());
            warned = true;
            hr_error_clear();
        }
        hr_free(tmp);
    }
    cache_free(k);
}
