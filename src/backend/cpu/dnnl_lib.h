/* dnnl_lib.h — oneDNN as the CPU backend's files share it: cpu_dnnl.c loads
 * libdnnl.so.2 at run time (the build needs dnnl.h only for its types) and
 * keeps these helpers; cpu_dnnl_conv.c and cpu_norm.c run their primitives
 * through them. All of it only with HR_HAVE_DNNL: a build without dnnl.h (or
 * with -DHR_NO_DNNL) has headroom's own kernels alone. */
#ifndef HR_CPU_DNNL_LIB_H
#define HR_CPU_DNNL_LIB_H

#include "backend/cpu/cpu.h"

#if defined(__has_include) && !defined(HR_NO_DNNL) /* -DHR_NO_DNNL: build as if dnnl.h were absent */
#if __has_include(<dnnl.h>)
#define HR_HAVE_DNNL 1
#endif
#endif

#ifdef HR_HAVE_DNNL
#include <dnnl.h>
#include <signal.h>

/* the library's functions that headroom calls */
#define DNNL_FNS(X)                                                                                                    \
    X(dnnl_version) X(dnnl_engine_create) X(dnnl_engine_destroy) X(dnnl_stream_create) X(dnnl_stream_wait)             \
    X(dnnl_stream_destroy) X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_get_size) X(dnnl_memory_desc_equal)      \
    X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_dilated_convolution_backward_data_desc_init)                  \
    X(dnnl_dilated_convolution_backward_weights_desc_init) X(dnnl_primitive_attr_create)                               \
    X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode) X(dnnl_primitive_desc_create)            \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md)                        \
    X(dnnl_primitive_create) X(dnnl_primitive_destroy) X(dnnl_primitive_execute) X(dnnl_memory_create)                 \
    X(dnnl_memory_destroy) X(dnnl_reorder_primitive_desc_create) X(dnnl_sgemm)                                         \
    X(dnnl_batch_normalization_forward_desc_init) X(dnnl_batch_normalization_backward_desc_init)

/* The process's oneDNN: loaded once, never unloaded (its OpenMP threads and
 * global caches outlive any backend); its functions valid once
 * hr_dnnl_loaded() said true. */
typedef struct {
    void *lib;
    dnnl_engine_t eng;
    char why[200];
#define X(f) __typeof__(&f) f;
    DNNL_FNS(X)
#undef X
} hr_dnnl_lib;
extern hr_dnnl_lib hr_dnnl;
bool hr_dnnl_loaded(void);

/* SIGINT and SIGTERM held while a thread is inside oneDNN (cpu_dnnl.c says
 * why); the OpenMP workers keep them blocked from their first call on. */
void hr_dnnl_hold_signals(sigset_t *old);
void hr_dnnl_release_signals(const sigset_t *old);
void hr_dnnl_quiet_workers(void);

/* An f32 memory descriptor of nd dims in this layout. */
bool hr_dnnl_md(dnnl_memory_desc_t *m, int nd, const int64_t *dims, dnnl_format_tag_t tag);
/* Attributes whose scratchpad is the user's (the planned workspace); NULL on failure. */
dnnl_primitive_attr_t hr_dnnl_user_scratch(void);
/* A primitive descriptor with a user scratchpad; false (*pd NULL) where oneDNN has none. */
bool hr_dnnl_make_pd(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op, const_dnnl_primitive_desc_t hint);
size_t hr_dnnl_scratch_of(const_dnnl_primitive_desc_t pd);
static inline size_t hr_dnnl_up64(size_t n) { return (n + 63) & ~(size_t)63; }
/* Runs primitive p on these pointers (n arguments, at most HR_DNNL_MAX_ARGS,
 * and the scratchpad) on the backend's stream. */
#define HR_DNNL_MAX_ARGS 9
dnnl_status_t hr_dnnl_run(hr_cpu *c, dnnl_primitive_t p, const_dnnl_primitive_desc_t pd, int n, const int *arg,
                          void *const *ptr, void *scratch);
/* The backend's oneDNN stream, made on first use. */
hr_status hr_dnnl_stream(hr_cpu *c);

/* Timing at a shape's first use: the median of HR_DNNL_TIMED_REPS after one to warm up. */
#define HR_DNNL_TIMED_REPS 3
double hr_dnnl_now_ms(void);
int hr_dnnl_cmp_d(const void *p, const void *q);

#endif
#endif
