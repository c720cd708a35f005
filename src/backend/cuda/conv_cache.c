/* conv_cache.c — the convolution algorithms that timing chose on this
 * device, kept between runs. A plan made where the choice is known holds that
 * algorithm's workspace alone, not its largest candidate's, and its first
 * step times nothing (the timing modes plan every candidate's workspace
 * until the first step has timed them: HR_CUDNN_ALGO=fastest's FFT and
 * Winograd candidates want gigabytes the winner may not).
 *
 * One file a device, driver and cuDNN, in the cache folder (hr_cache_dir):
 * conv-<device>-<driver>-cudnn<version>-<headroom>.tsv, read and written by
 * core/choices.c (KEY \t A \t B \t WORKSPACE; conv_algo.c says what A and B
 * are). A choice is used only where it is still among the candidates, with
 * the same workspace. Nothing here can fail a job: without memory or a
 * writable folder the runs time as before. HR_CUDNN_CACHE=0 turns it off. */
#include "backend/cuda/conv.h"
#include "core/choices.h"

#include <stdio.h>
#include <string.h>

/* The backend's cache, read at the first ask; NULL when off or impossible. */
static hr_choices *cache_of(hr_cuda *c) {
    if (!c->opt.cudnn_cache || c->conv_cache_off) return NULL;
    if (c->conv_cache) return c->conv_cache;
    char raw[600], name[600];
    int driver = 0;
    cudaDriverGetVersion(&driver);
    snprintf(raw, sizeof raw, "conv-%s-%d-cudnn%zu-%s.tsv", c->device_name, driver,
             c->dnn ? c->dnn->version : (size_t)0, HR_VERSION);
    hr_file_name_part(name, raw, sizeof name);
    char *dir = hr_cache_dir();
    c->conv_cache = dir ? hr_choices_open(dir, name) : NULL;
    hr_free(dir);
    if (!c->conv_cache) {
        hr_error_clear(); /* no memory or no folder: no cache */
        c->conv_cache_off = true;
    }
    return c->conv_cache;
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
    int64_t v[3];
    if (!hr_choices_get(cache_of(c), key, v)) return false;
    *a = v[0], *b = v[1], *ws = (size_t)v[2];
    return true;
}

void hr_conv_cache_put(hr_cuda *c, const char *key, int64_t a, int64_t b, size_t ws) {
    int64_t v[3] = {a, b, (int64_t)ws};
    hr_choices *k = cache_of(c);
    if (k && !hr_choices_put(k, key, v)) hr_error_clear();
}

void hr_conv_cache_close(hr_cuda *c) {
    hr_choices *k = c->conv_cache;
    c->conv_cache = NULL;
    char comment[160];
    snprintf(comment, sizeof comment,
             "headroom %s: convolution algorithms chosen by timing on this device: KEY A B WORKSPACE", HR_VERSION);
    if (k && hr_choices_save(k, comment) != HR_OK) {
        static bool warned;
        if (!warned && c->opt.cuda_verbose)
            fprintf(stderr, "headroom: warning: convolution choices not saved in %s: %s\n", hr_choices_path(k),
                    hr_last_error());
        warned = true;
        hr_error_clear();
    }
    hr_choices_free(k);
}
