/* cpu_dnnl.c — oneDNN (libdnnl.so.2), loaded at run time: the library, the
 * matrix products through its sgemm, and what cpu_dnnl_conv.c and cpu_norm.c
 * share to run their primitives (dnnl_lib.h). A build without dnnl.h, or a
 * machine without the library, runs headroom's own kernels alone. */
#include "backend/cpu/dnnl_lib.h"

#ifndef HR_HAVE_DNNL
const char *hr_cpu_dnnl_why(void) { return "this headroom was built without oneDNN's headers (dnnl.h)"; }
void hr_cpu_dnnl_close(hr_cpu *c) { (void)c; }
bool hr_cpu_dnnl_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc;
    return false;
}
#else

#include <dlfcn.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the library ----------------------------------------------------------- */
hr_dnnl_lib hr_dnnl;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    const char *names[] = {"libdnnl.so.2", "libdnnl.so.2.6"};
    for (int i = 0; i < 2 && !hr_dnnl.lib; i++) hr_dnnl.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!hr_dnnl.lib) {
        const char *e = dlerror();
        snprintf(hr_dnnl.why, sizeof hr_dnnl.why, "oneDNN (libdnnl.so.2) could not be loaded: %s", e ? e : "not found");
        return;
    }
    bool ok = true;
#define X(f)                                                                                                           \
    if (!(*(void **)&hr_dnnl.f = dlsym(hr_dnnl.lib, #f))) ok = false;
    DNNL_FNS(X)
#undef X
    if (!ok) {
        snprintf(hr_dnnl.why, sizeof hr_dnnl.why, "the loaded libdnnl.so.2 lacks the oneDNN 2 convolution API");
    } else if (hr_dnnl.dnnl_version()->major != DNNL_VERSION_MAJOR) {
        snprintf(hr_dnnl.why, sizeof hr_dnnl.why, "oneDNN %d is not the major version built against (%d)",
                 hr_dnnl.dnnl_version()->major, DNNL_VERSION_MAJOR);
        ok = false;
    } else if (hr_dnnl.dnnl_engine_create(&hr_dnnl.eng, dnnl_cpu, 0) != dnnl_success) {
        snprintf(hr_dnnl.why, sizeof hr_dnnl.why, "oneDNN could not make a CPU engine");
        ok = false;
    }
    if (!ok) {
        dlclose(hr_dnnl.lib);
        hr_dnnl.lib = NULL;
    }
}

bool hr_dnnl_loaded(void) {
    pthread_once(&load_once, load);
    return hr_dnnl.lib != NULL;
}

const char *hr_cpu_dnnl_why(void) { return hr_dnnl_loaded() ? NULL : hr_dnnl.why; }

/* ---- signals -------------------------------------------------------------------
 * A signal handler runs on the stack of whichever thread the signal lands
 * on; oneDNN's JIT kernels may keep data below their stack pointer, which the
 * kernel's signal frame then overwrites (Ctrl-C while tracing an mlp on this
 * CPU corrupted the heap in about one run in five). So SIGINT and SIGTERM
 * wait while a thread is inside oneDNN (delivered right after, or to another
 * thread), and the OpenMP threads other than the caller's, which oneDNN's
 * convolutions run on, keep them blocked from their first oneDNN call on. */
void hr_dnnl_hold_signals(sigset_t *old) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &s, old);
}
void hr_dnnl_release_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

#ifdef _OPENMP
static void quiet_pool(void) {
#pragma omp parallel
    if (omp_get_thread_num() != 0) {
        sigset_t old;
        hr_dnnl_hold_signals(&old);
    }
}
#endif

void hr_dnnl_quiet_workers(void) {
#ifdef _OPENMP
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, quiet_pool);
#endif
}

/* ---- matrix products ----------------------------------------------------------
 * oneDNN's sgemm on the calling thread alone (oneDNN's OpenMP would take
 * every thread and might cut k among them: the bits would then depend on the
 * thread count); the callers split the work among our threads. */
bool hr_cpu_dnnl_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    if (!hr_dnnl_loaded()) return false;
#ifdef _OPENMP
    int th = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    sigset_t old;
    hr_dnnl_hold_signals(&old);
    dnnl_status_t s = hr_dnnl.dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    hr_dnnl_release_signals(&old);
#ifdef _OPENMP
    omp_set_num_threads(th);
#endif
    return s == dnnl_success;
}

/* ---- shared by the primitives ---------------------------------------------- */
bool hr_dnnl_md(dnnl_memory_desc_t *m, int nd, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    return hr_dnnl.dnnl_memory_desc_init_by_tag(m, nd, d, dnnl_f32, tag) == dnnl_success;
}

/* Scratchpads are the user's: they go into the planned workspace. */
dnnl_primitive_attr_t hr_dnnl_user_scratch(void) {
    dnnl_primitive_attr_t attr;
    if (hr_dnnl.dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    if (hr_dnnl.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        hr_dnnl.dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

bool hr_dnnl_make_pd(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op, const_dnnl_primitive_desc_t hint) {
    dnnl_primitive_attr_t attr = hr_dnnl_user_scratch();
    bool ok = attr && hr_dnnl.dnnl_primitive_desc_create(pd, op, attr, hr_dnnl.eng, hint) == dnnl_success;
    if (attr) hr_dnnl.dnnl_primitive_attr_destroy(attr);
    if (!ok) *pd = NULL;
    return ok;
}

size_t hr_dnnl_scratch_of(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *s = hr_dnnl.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return s ? hr_dnnl.dnnl_memory_desc_get_size(s) : 0;
}

/* Runs one primitive on these pointers (the memory objects are made per
 * call: a few microseconds, and no state shared between threads). */
dnnl_status_t hr_dnnl_run(hr_cpu *c, dnnl_primitive_t p, const_dnnl_primitive_desc_t pd, int n, const int *arg,
                          void *const *ptr, void *scratch) {
    dnnl_exec_arg_t ea[HR_DNNL_MAX_ARGS + 1];
    if (n > HR_DNNL_MAX_ARGS) return dnnl_invalid_arguments;
    int m = 0;
    dnnl_status_t s = dnnl_success;
    for (int i = 0; i <= n && s == dnnl_success; i++) {
        int which = i < n ? arg[i] : DNNL_ARG_SCRATCHPAD;
        if (i == n && !hr_dnnl_scratch_of(pd)) break;
        const dnnl_memory_desc_t *d = hr_dnnl.dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, which);
        ea[m].arg = which;
        s = hr_dnnl.dnnl_memory_create(&ea[m].memory, d, hr_dnnl.eng, i < n ? ptr[i] : scratch);
        if (s == dnnl_success) m++;
    }
    if (s == dnnl_success) s = hr_dnnl.dnnl_primitive_execute(p, c->dnnl_stream, m, ea);
    for (int i = 0; i < m; i++) hr_dnnl.dnnl_memory_destroy(ea[i].memory);
    return s;
}

hr_status hr_dnnl_stream(hr_cpu *c) {
    if (!c->dnnl_stream && hr_dnnl.dnnl_stream_create((dnnl_stream_t *)&c->dnnl_stream, hr_dnnl.eng,
                                                      dnnl_stream_default_flags) != dnnl_success) {
        c->dnnl_stream = NULL;
        return hr_error_set(HR_ERR_INTERNAL, "oneDNN: could not make a stream");
    }
    return HR_OK;
}

double hr_dnnl_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int hr_dnnl_cmp_d(const void *p, const void *q) {
    double a = *(const double *)p, b = *(const double *)q;
    return a < b ? -1 : a > b;
}

void hr_cpu_dnnl_close(hr_cpu *c) {
    if (c->dnnl_stream) hr_dnnl.dnnl_stream_destroy(c->dnnl_stream);
    c->dnnl_stream = NULL;
}
#endif
