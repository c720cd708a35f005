/* choice_cache.c — the algorithms that timing chose on this device, kept
 * between runs: the convolutions' (conv_algo.c) and the matrix products'
 * (gemm_lt.c). A plan made where a convolution's choice is known holds that
 * algorithm's workspace alone, not its largest candidate's, and its first
 * step times nothing (the timing modes plan every candidate's workspace
 * until the first step has timed them: HR_CUDNN_ALGO=fastest's FFT and
 * Winograd candidates want gigabytes the winner may not).
 *
 * A file a kind, device, driver and library, in the cache folder
 * (hr_cache_dir): conv-<device>-<driver>-cudnn<version>-<headroom>.tsv and
 * gemm-<device>-<driver>-cublasLt<version>-<headroom>.tsv, read and written
 * by core/choices.c (KEY \t A \t B \t C; conv_algo.c and gemm_lt.c say what
 * the values are). A choice is used only where it is still among the
 * candidates. Nothing here can fail a job: without memory or a writable
 * folder the runs time as before. HR_CUDNN_CACHE=0 turns both off. */
#include "backend/cuda/conv.h"
#include "core/choices.h"

#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

static const char *kind_name[HR_CHOICE_KINDS] = {"convolution", "matrix product"};

/* The backend's cache of a kind, read at the first ask; NULL when off or impossible. */
static hr_choices *cache_of(hr_cuda *c, int kind) {
    if (!c->opt.cudnn_cache || c->cache_off[kind]) return NULL;
    if (c->cache[kind]) return c->cache[kind];
    char raw[600], name[600];
    int driver = 0;
    cudaDriverGetVersion(&driver);
    if (kind == HR_CHOICE_CONV)
        snprintf(raw, sizeof raw, "conv-%s-%d-cudnn%zu-%s.tsv", c->device_name, driver,
                 c->dnn ? c->dnn->version : (size_t)0, HR_VERSION);
    else
        snprintf(raw, sizeof raw, "gemm-%s-%d-cublasLt%zu-%s.tsv", c->device_name, driver, cublasLtGetVersion(),
                 HR_VERSION);
    hr_file_name_part(name, raw, sizeof name);
    char *dir = hr_cache_dir();
    c->cache[kind] = dir ? hr_choices_open(dir, name) : NULL;
    hr_free(dir);
    if (!c->cache[kind]) {
        hr_error_clear(); /* no memory or no folder: no cache */
        c->cache_off[kind] = true;
    }
    return c->cache[kind];
}

bool hr_choice_get(hr_cuda *c, int kind, const char *key, int64_t v[3]) {
    return hr_choices_get(cache_of(c, kind), key, v);
}

void hr_choice_put(hr_cuda *c, int kind, const char *key, const int64_t v[3]) {
    hr_choices *k = cache_of(c, kind);
    if (k && !hr_choices_put(k, key, v)) hr_error_clear();
}

void hr_conv_cache_key(const hr_cuda *c, const hr_cuda_conv *p, int which, bool add, bool graph, char *key, size_t n) {
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
    int64_t v[3];
    if (!hr_choice_get(c, HR_CHOICE_CONV, key, v)) return false;
    *a = v[0], *b = v[1], *ws = (size_t)v[2];
    return true;
}

void hr_conv_cache_put(hr_cuda *c, const char *key, int64_t a, int64_t b, size_t ws) {
    int64_t v[3] = {a, b, (int64_t)ws};
    hr_choice_put(c, HR_CHOICE_CONV, key, v);
}

void hr_choice_cache_close(hr_cuda *c) {
    static const char *what[HR_CHOICE_KINDS] = {"KEY A B WORKSPACE",
                                                "KEY CANDIDATE (-1 cublasGemmEx) ALGORITHM-HASH CANDIDATES"};
    for (int kind = 0; kind < HR_CHOICE_KINDS; kind++) {
        hr_choices *k = c->cache[kind];
        c->cache[kind] = NULL;
        char comment[200];
        snprintf(comment, sizeof comment, "headroom %s: %s algorithms chosen by timing on this device: %s", HR_VERSION,
                 kind_name[kind], what[kind]);
        if (k && hr_choices_save(k, comment) != HR_OK) {
            static bool warned;
            if (!warned && c->opt.cuda_verbose)
                fprintf(stderr, "headroom: warning: %s choices not saved in %s: %s\n", kind_name[kind],
                        hr_choices_path(k), hr_last_error());
            warned = true;
            hr_error_clear();
        }
        hr_choices_free(k);
    }
}
