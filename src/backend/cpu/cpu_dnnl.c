/* cpu_dnnl.c — Conv2d through oneDNN (libdnnl.so.2, loaded at run time) beside
 * cpu_gemm.c's im2col, and BatchNorm's training passes beside cpu_norm.c's:
 * each shape's first use times both, the faster stays.
 *
 * The build needs dnnl.h only for its types; a build without it, or a machine
 * without the library, simply runs im2col. Primitives and the path chosen are
 * kept per shape for the whole process (not per backend), so that two
 * sessions of one process compute a shape the same way, bit for bit. The
 * scratchpad is the user's: it lives in the node's planned workspace. */
#include "backend/cpu/cpu.h"

#include <pthread.h>
#include <signal.h>

#if defined(__has_include) && !defined(HR_NO_DNNL) /* -DHR_NO_DNNL: build as if dnnl.h were absent */
#if __has_include(<dnnl.h>)
#define HR_HAVE_DNNL 1
#endif
#endif

#ifndef HR_HAVE_DNNL
bool hr_cpu_dnnl_conv(void *ctx, const hr_kargs *a, hr_status *st) {
    (void)ctx, (void)a, (void)st;
    return false;
}
size_t hr_cpu_dnnl_workspace_size(hr_cpu *c, const hr_kargs *a) {
    (void)c, (void)a;
    return 0;
}
bool hr_cpu_dnnl_batchnorm(void *ctx, const hr_kargs *a, hr_status *st) {
    (void)ctx, (void)a, (void)st;
    return false;
}
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
#include <dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* ---- the library ----------------------------------------------------------- */
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
 * global caches outlive any backend). */
static struct {
    pthread_once_t once;
    void *lib;
    dnnl_engine_t eng;
    char why[200];
#define X(f) __typeof__(&f) f;
    DNNL_FNS(X)
#undef X
} L = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
    const char *names[] = {"libdnnl.so.2", "libdnnl.so.2.6"};
    for (int i = 0; i < 2 && !L.lib; i++) L.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!L.lib) {
        const char *e = dlerror();
        snprintf(L.why, sizeof L.why, "oneDNN (libdnnl.so.2) could not be loaded: %s", e ? e : "not found");
        return;
    }
    bool ok = true;
#define X(f)                                                                                                           \
    if (!(*(void **)&L.f = dlsym(L.lib, #f))) ok = false;
    DNNL_FNS(X)
#undef X
    if (!ok) {
        snprintf(L.why, sizeof L.why, "the loaded libdnnl.so.2 lacks the oneDNN 2 convolution API");
    } else if (L.dnnl_version()->major != DNNL_VERSION_MAJOR) {
        snprintf(L.why, sizeof L.why, "oneDNN %d is not the major version built against (%d)", L.dnnl_version()->major,
                 DNNL_VERSION_MAJOR);
        ok = false;
    } else if (L.dnnl_engine_create(&L.eng, dnnl_cpu, 0) != dnnl_success) {
        snprintf(L.why, sizeof L.why, "oneDNN could not make a CPU engine");
        ok = false;
    }
    if (!ok) {
        dlclose(L.lib);
        L.lib = NULL;
    }
}

static bool loaded(void) {
    pthread_once(&L.once, load);
    return L.lib != NULL;
}

const char *hr_cpu_dnnl_why(void) { return loaded() ? NULL : L.why; }

/* ---- signals -------------------------------------------------------------------
 * A signal handler runs on the stack of whichever thread the signal lands
 * on; oneDNN's JIT kernels may keep data below their stack pointer, which the
 * kernel's signal frame then overwrites (Ctrl-C while tracing an mlp on this
 * CPU corrupted the heap in about one run in five). So SIGINT and SIGTERM
 * wait while a thread is inside oneDNN (delivered right after, or to another
 * thread), and the OpenMP threads other than the caller's, which oneDNN's
 * convolutions run on, keep them blocked from their first oneDNN call on. */
static void hold_signals(sigset_t *old) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &s, old);
}
static void release_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

#ifdef _OPENMP
static void quiet_pool(void) {
#pragma omp parallel
    if (omp_get_thread_num() != 0) {
        sigset_t old;
        hold_signals(&old);
    }
}
#endif

static void quiet_workers(void) {
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
    if (!loaded()) return false;
#ifdef _OPENMP
    int th = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    sigset_t old;
    hold_signals(&old);
    dnnl_status_t s = L.dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    release_signals(&old);
#ifdef _OPENMP
    omp_set_num_threads(th);
#endif
    return s == dnnl_success;
}

/* ---- one conv shape ---------------------------------------------------------- */
enum { HAS_B = 1, HAS_DX = 2, HAS_DW = 4, HAS_DB = 8 };
enum { PART_FWD = 0, PART_DATA, PART_WEIGHTS, PARTS };
/* The ways to run a part: cpu_gemm.c's im2col; oneDNN on the plain layouts;
 * oneDNN on the layouts it prefers (blocked), the tensors reordered to and
 * from them in the workspace. */
enum { WAY_IM2COL = 0, WAY_PLAIN, WAY_BLOCKED, WAYS };
static const char *way_name[WAYS] = {"im2col", "oneDNN", "oneDNN blocked"};

#define MAX_ARGS 4
typedef struct {
    int arg;                   /* DNNL_ARG_* */
    bool out;                  /* written by the part */
    dnnl_memory_desc_t user;   /* the plain layout of the kernel's pointer */
    dnnl_primitive_desc_t rpd; /* the reorder to (or from) the primitive's layout; NULL: none needed */
    dnnl_primitive_t r;
    size_t off; /* the reordered copy's offset in the workspace, after the scratchpad */
} conv_arg;

typedef struct {
    dnnl_primitive_desc_t pd; /* NULL: this way cannot run the part */
    dnnl_primitive_t prim;    /* made on first use, with its reorders */
    int nargs;
    conv_arg a[MAX_ARGS];
    size_t scratch, bytes; /* the largest scratchpad (of the conv and its reorders); that plus the copies */
} conv_way;

typedef struct {
    int64_t N, C, H, W, K, OH, OW;
    int32_t kh, kw, sh, sw, ph, pw, groups, dil_h, dil_w;
    int32_t bwd, has; /* bwd: a backward node; has: HAS_* bits */
    int32_t nthr;     /* OpenMP's threads: oneDNN fixes its split (and scratchpad) when a primitive is made */
} conv_key;

typedef struct conv_entry {
    conv_key k;
    bool broken;                /* oneDNN runs no part of the shape: im2col only */
    conv_way w[WAYS][PARTS];    /* [WAY_IM2COL] unused; a backward node's [.][PART_FWD].pd is only the hint */
    int64_t nb[WAYS];           /* the samples one call of a way takes (a divisor of N); 0: the way cannot run */
    int pick[PARTS];            /* the way chosen; -1: not timed yet */
    double ms[PARTS][WAYS];     /* the median times */
    struct conv_entry *next;
} conv_entry;

/* Every shape of the process. Plain calloc, not hr_calloc: the table is the
 * library's own cache, it outlives sessions, and growing it is not a step's
 * allocation (as oneDNN's own caches are not). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static conv_entry *shapes;
static _Thread_local bool timing; /* while this thread runs im2col from here: no dispatch */

static conv_key key_of(const hr_kargs *a) {
    const hr_conv_args *c = &a->conv;
    conv_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.N = c->N, k.C = c->C, k.H = c->H, k.W = c->W, k.K = c->K, k.OH = c->OH, k.OW = c->OW;
    k.kh = c->kh, k.kw = c->kw, k.sh = c->sh, k.sw = c->sw, k.ph = c->ph, k.pw = c->pw;
    k.groups = c->groups > 0 ? c->groups : 1;
    k.dil_h = c->dil_h > 0 ? c->dil_h : 1;
    k.dil_w = c->dil_w > 0 ? c->dil_w : 1;
    k.bwd = a->op == HR_OP_CONV2D_BWD;
#ifdef _OPENMP
    k.nthr = omp_get_max_threads();
#endif
    if (k.bwd)
        k.has = (c->dx ? HAS_DX : 0) | (c->dw ? HAS_DW : 0) | (c->db ? HAS_DB : 0);
    else
        k.has = c->b ? HAS_B : 0;
    return k;
}

static int first_part(const conv_key *k) { return k->bwd ? PART_DATA : PART_FWD; }
static int last_part(const conv_key *k) { return k->bwd ? PART_WEIGHTS : PART_FWD; }
static bool has_part(const conv_key *k, int p) {
    if (p == PART_FWD) return !k->bwd;
    return k->bwd && (k->has & (p == PART_DATA ? HAS_DX : HAS_DW | HAS_DB));
}

static bool md(dnnl_memory_desc_t *m, int nd, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    return L.dnnl_memory_desc_init_by_tag(m, nd, d, dnnl_f32, tag) == dnnl_success;
}

/* Scratchpads are the user's: they go into the planned workspace. */
static dnnl_primitive_attr_t user_scratch(void) {
    dnnl_primitive_attr_t attr;
    if (L.dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    if (L.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        L.dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

static bool make_pd(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op, const_dnnl_primitive_desc_t hint) {
    dnnl_primitive_attr_t attr = user_scratch();
    bool ok = attr && L.dnnl_primitive_desc_create(pd, op, attr, L.eng, hint) == dnnl_success;
    if (attr) L.dnnl_primitive_attr_destroy(attr);
    if (!ok) *pd = NULL;
    return ok;
}

static size_t scratch_of(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *s = L.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return s ? L.dnnl_memory_desc_get_size(s) : 0;
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The part's arguments, and a reorder for each whose layout the primitive
 * does not take as it is. */
static bool finish_way(conv_way *cw) {
    size_t scratch = scratch_of(cw->pd), off = 0;
    for (int i = 0; i < cw->nargs; i++) {
        conv_arg *a = &cw->a[i];
        const dnnl_memory_desc_t *pm = L.dnnl_primitive_desc_query_md(cw->pd, dnnl_query_exec_arg_md, a->arg);
        if (!pm) return false;
        if (L.dnnl_memory_desc_equal(pm, &a->user)) continue;
        dnnl_primitive_attr_t attr = user_scratch();
        bool ok = attr && L.dnnl_reorder_primitive_desc_create(&a->rpd, a->out ? pm : &a->user, L.eng,
                                                                a->out ? &a->user : pm, L.eng, attr) == dnnl_success;
        if (attr) L.dnnl_primitive_attr_destroy(attr);
        if (!ok) {
            a->rpd = NULL;
            return false;
        }
        size_t s = scratch_of(a->rpd);
        if (s > scratch) scratch = s;
        a->off = off;
        off += up64(L.dnnl_memory_desc_get_size(pm));
    }
    cw->scratch = up64(scratch);
    cw->bytes = cw->scratch + off;
    return true;
}

static void way_free(conv_way *cw) {
    for (int i = 0; i < cw->nargs; i++) {
        if (cw->a[i].r) L.dnnl_primitive_destroy(cw->a[i].r);
        if (cw->a[i].rpd) L.dnnl_primitive_desc_destroy(cw->a[i].rpd);
    }
    if (cw->prim) L.dnnl_primitive_destroy(cw->prim);
    if (cw->pd) L.dnnl_primitive_desc_destroy(cw->pd);
    memset(cw, 0, sizeof *cw);
}

static void set_args(conv_way *cw, int n, const int *arg, const bool *out, const dnnl_memory_desc_t *const *user) {
    cw->nargs = n;
    for (int i = 0; i < n; i++) cw->a[i] = (conv_arg){.arg = arg[i], .out = out[i], .user = *user[i]};
}

/* One way's descriptors for the node's parts. False: oneDNN has no
 * implementation of this shape in these layouts. */
static bool describe(conv_entry *e, int way, int64_t nb) {
    const conv_key *k = &e->k;
    int64_t G = k->groups;
    int64_t xd[4] = {nb, k->C, k->H, k->W}, yd[4] = {nb, k->K, k->OH, k->OW}, bd[1] = {k->K};
    int64_t wd[5] = {G, k->K / G, k->C / G, k->kh, k->kw};
    bool plain = way == WAY_PLAIN;
    dnnl_memory_desc_t xu, yu, wu, bu, xm, ym, wm;
    if (k->C % G || k->K % G) return false;
    bool ok = md(&xu, 4, xd, dnnl_nchw) && md(&yu, 4, yd, dnnl_nchw) && md(&bu, 1, bd, dnnl_x) &&
              (G > 1 ? md(&wu, 5, wd, dnnl_goihw) : md(&wu, 4, wd + 1, dnnl_oihw)) &&
              md(&xm, 4, xd, plain ? dnnl_nchw : dnnl_format_tag_any) &&
              md(&ym, 4, yd, plain ? dnnl_nchw : dnnl_format_tag_any) &&
              (G > 1 ? md(&wm, 5, wd, plain ? dnnl_goihw : dnnl_format_tag_any)
                     : md(&wm, 4, wd + 1, plain ? dnnl_oihw : dnnl_format_tag_any));
    if (!ok) return false;
    dnnl_dims_t st = {k->sh, k->sw}, dil = {k->dil_h - 1, k->dil_w - 1}, pl = {k->ph, k->pw}, pr;
    /* the right/bottom padding that makes the output size come out */
    pr[0] = (k->OH - 1) * k->sh + (k->kh - 1) * k->dil_h + 1 - k->H - k->ph;
    pr[1] = (k->OW - 1) * k->sw + (k->kw - 1) * k->dil_w + 1 - k->W - k->pw;
    if (pr[0] < 0) pr[0] = 0;
    if (pr[1] < 0) pr[1] = 0;
    conv_way *cw = e->w[way];
    dnnl_convolution_desc_t fd, dd, wdsc;
    bool bias = k->has & HAS_B, dbias = k->has & HAS_DB;
    if (L.dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xm, &wm,
                                                     bias ? &bu : NULL, &ym, st, dil, pl, pr) != dnnl_success ||
        !make_pd(&cw[PART_FWD].pd, &fd, NULL))
        return false;
    if (!k->bwd) {
        set_args(&cw[PART_FWD], bias ? 4 : 3, (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS},
                 (bool[]){false, false, true, false}, (const dnnl_memory_desc_t *[]){&xu, &wu, &yu, &bu});
        return finish_way(&cw[PART_FWD]);
    }
    if (k->has & HAS_DX) {
        if (L.dnnl_dilated_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &xm, &wm, &ym, st, dil, pl,
                                                               pr) != dnnl_success ||
            !make_pd(&cw[PART_DATA].pd, &dd, cw[PART_FWD].pd))
            return false;
        set_args(&cw[PART_DATA], 3, (int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                 (bool[]){false, false, true}, (const dnnl_memory_desc_t *[]){&yu, &wu, &xu});
        if (!finish_way(&cw[PART_DATA])) return false;
    }
    if (k->has & (HAS_DW | HAS_DB)) {
        if (L.dnnl_dilated_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_direct, &xm, &wm,
                                                                  dbias ? &bu : NULL, &ym, st, dil, pl,
                                                                  pr) != dnnl_success ||
            !make_pd(&cw[PART_WEIGHTS].pd, &wdsc, cw[PART_FWD].pd))
            return false;
        set_args(&cw[PART_WEIGHTS], dbias ? 4 : 3,
                 (int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS},
                 (bool[]){false, false, true, true}, (const dnnl_memory_desc_t *[]){&xu, &yu, &wu, &bu});
        if (!finish_way(&cw[PART_WEIGHTS])) return false;
    }
    return true;
}

static size_t way_total(const conv_entry *e, int way, const hr_conv_args *c);

static void way_drop(conv_entry *e, int way) {
    for (int p = 0; p < PARTS; p++) way_free(&e->w[way][p]);
    e->nb[way] = 0;
}

static bool way_at(conv_entry *e, int way, int64_t nb) {
    way_drop(e, way);
    if (!describe(e, way, nb)) {
        way_drop(e, way);
        return false;
    }
    e->nb[way] = nb;
    return true;
}

/* The largest divisor of n no larger than most, found among the next few
 * below it (planning may ask about batches of 2^40); 1 if none. */
static int64_t divisor_below(int64_t n, int64_t most) {
    for (int64_t d = most < n ? most : n, tries = 0; d > 1 && tries < 256; d--, tries++)
        if (n % d == 0) return d;
    return 1;
}

/* A way takes the whole batch in one call when its workspace fits in budget
 * (im2col's); else the largest divisor of the batch that does, so that
 * oneDNN's copies in its own layouts never make the plan much larger than
 * im2col's. Its bytes grow about linearly with the samples a call takes:
 * a few descriptions find the divisor. */
static void way_fit(conv_entry *e, int way, size_t budget, const hr_conv_args *c) {
    const conv_key *k = &e->k;
    int64_t N = k->N;
    int64_t xs = k->C * k->H * k->W, ys = k->K * k->OH * k->OW;
    bool huge = N * (xs > ys ? xs : ys) > (1LL << 36); /* a batch only plans ask about */
    if (!huge) {
        if (!way_at(e, way, N)) return;
        if (way_total(e, way, c) <= budget || N == 1) return;
    }
    size_t full = huge ? 0 : way_total(e, way, c);
    if (!way_at(e, way, 1)) return;
    size_t one = way_total(e, way, c);
    if (one >= budget) return;
    if (huge && (!way_at(e, way, 2) || (full = way_total(e, way, c)) <= one)) { /* full: at 2 here */
        way_at(e, way, 1);
        return;
    }
    size_t per = (full - one) / (size_t)(huge ? 1 : N - 1) + 1;
    int64_t nb = divisor_below(N, (int64_t)((budget - one) / per) + 1);
    for (int tries = 0; nb > 1 && tries < 3; tries++, nb = divisor_below(N, nb - 1))
        if (way_at(e, way, nb) && way_total(e, way, c) <= budget) return;
    way_at(e, way, 1);
}

/* The shape's entry, described on first sight; NULL when the table cannot
 * grow. Called with mu held. */
static conv_entry *entry_of(hr_cpu *cp, const hr_kargs *a) {
    conv_key k = key_of(a);
    for (conv_entry *e = shapes; e; e = e->next)
        if (!memcmp(&e->k, &k, sizeof k)) return e;
    conv_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->k = k;
    size_t budget = hr_cpu_workspace_size(cp, a);
    e->broken = true;
    for (int way = WAY_PLAIN; way < WAYS; way++) {
        way_fit(e, way, budget, &a->conv);
        if (e->nb[way]) e->broken = false;
    }
    for (int p = 0; p < PARTS; p++) e->pick[p] = -1;
    e->next = shapes;
    shapes = e;
    return e;
}

/* ---- the workspace ------------------------------------------------------------ */
/* [64-byte alignment slack][the way's scratchpad and copies][dx sum][dW sum]
 * [db sum]: an output that accumulates, or that a batch in several calls
 * adds up, is written to its own room first, then added on. */
typedef struct {
    size_t dx, dw, db, total; /* byte offsets from the aligned start; total: bytes needed */
} ws_layout;

static ws_layout layout_of(const conv_entry *e, int way, const hr_conv_args *c) {
    const conv_key *k = &e->k;
    ws_layout w = {0};
    size_t off = 0;
    for (int p = first_part(k); p <= last_part(k); p++)
        if (has_part(k, p) && e->w[way][p].bytes > off) off = e->w[way][p].bytes;
    int64_t nb = e->nb[way];
    bool chunks = nb < k->N;
    w.dx = off;
    if (k->bwd && c->dx && c->acc_dx) off += up64(sizeof(float) * (size_t)(nb * k->C * k->H * k->W));
    w.dw = off;
    if (k->bwd && ((c->dw && (c->acc_dw || chunks)) || (c->db && !c->dw)))
        off += up64(sizeof(float) * (size_t)(k->K * (k->C / k->groups) * k->kh * k->kw));
    w.db = off;
    if (k->bwd && c->db && (c->acc_db || chunks)) off += up64(sizeof(float) * (size_t)k->K);
    w.total = off + 64;
    return w;
}

static size_t way_total(const conv_entry *e, int way, const hr_conv_args *c) { return layout_of(e, way, c).total; }

/* The node's bytes: the most that any way it may take needs. */
static size_t total_of(const conv_entry *e, const hr_conv_args *c) {
    size_t n = 0;
    for (int way = WAY_PLAIN; way < WAYS; way++)
        if (e->nb[way] && way_total(e, way, c) > n) n = way_total(e, way, c);
    return n;
}

/* A conv too small to gain from oneDNN: where a call's products number
 * fewer than ~1M, its fixed costs (memory objects, reorders) and the timing
 * at first use outweigh what it could save, so HR_DNNL=1 takes im2col
 * without loading oneDNN at all. Counted on at most 64 samples, so that
 * planning a huge batch answers as the step's batch does. */
static bool tiny(const hr_conv_args *v) {
    int64_t g = v->groups > 0 ? v->groups : 1, n = v->N < 64 ? v->N : 64;
    return n * (v->C / g) * v->K * v->kh * v->kw * v->OH * v->OW < (1LL << 20);
}

static size_t bn_workspace(hr_cpu *c, const hr_kargs *a);

size_t hr_cpu_dnnl_workspace_size(hr_cpu *c, const hr_kargs *a) {
    if (a->op == HR_OP_BATCHNORM || a->op == HR_OP_BATCHNORM_BWD) return bn_workspace(c, a);
    if (a->op != HR_OP_CONV2D && a->op != HR_OP_CONV2D_BWD) return 0;
    if (c->dnnl_mode == 0 || a->dt != HR_F32 || (c->dnnl_mode == 1 && tiny(&a->conv)) || !loaded()) return 0;
    pthread_mutex_lock(&mu);
    conv_entry *e = entry_of(c, a);
    size_t n = e && !e->broken ? total_of(e, &a->conv) : 0;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- running a part ------------------------------------------------------------ */
/* Made once, with mu held, before a way first runs. */
static bool way_ready(conv_way *cw) {
    if (!cw->pd) return false;
    if (!cw->prim && L.dnnl_primitive_create(&cw->prim, cw->pd) != dnnl_success) cw->prim = NULL;
    for (int i = 0; i < cw->nargs && cw->prim; i++)
        if (cw->a[i].rpd && !cw->a[i].r && L.dnnl_primitive_create(&cw->a[i].r, cw->a[i].rpd) != dnnl_success) {
            cw->a[i].r = NULL;
            return false;
        }
    return cw->prim != NULL;
}

/* Runs one primitive on these pointers (the memory objects are made per
 * call: a few microseconds, and no state shared between threads). */
#define MAX_EXEC_ARGS 9 /* BatchNorm's backward: 6 inputs, 3 outputs */
static dnnl_status_t run_prim(hr_cpu *c, dnnl_primitive_t p, const_dnnl_primitive_desc_t pd, int n, const int *arg,
                              void *const *ptr, void *scratch) {
    dnnl_exec_arg_t ea[MAX_EXEC_ARGS + 1];
    if (n > MAX_EXEC_ARGS) return dnnl_invalid_arguments;
    int m = 0;
    dnnl_status_t s = dnnl_success;
    for (int i = 0; i <= n && s == dnnl_success; i++) {
        int which = i < n ? arg[i] : DNNL_ARG_SCRATCHPAD;
        if (i == n && !scratch_of(pd)) break;
        const dnnl_memory_desc_t *d = L.dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, which);
        ea[m].arg = which;
        s = L.dnnl_memory_create(&ea[m].memory, d, L.eng, i < n ? ptr[i] : scratch);
        if (s == dnnl_success) m++;
    }
    if (s == dnnl_success) s = L.dnnl_primitive_execute(p, c->dnnl_stream, m, ea);
    for (int i = 0; i < m; i++) L.dnnl_memory_destroy(ea[i].memory);
    return s;
}

/* The part on the kernel's pointers (ptr: one per argument, in cw->a's
 * order); base: the aligned workspace. */
static hr_status exec(hr_cpu *c, conv_way *cw, void *const *ptr, char *base) {
    if (!c->dnnl_stream && L.dnnl_stream_create((dnnl_stream_t *)&c->dnnl_stream, L.eng, dnnl_stream_default_flags) !=
                               dnnl_success) {
        c->dnnl_stream = NULL;
        return hr_error_set(HR_ERR_INTERNAL, "oneDNN: could not make a stream");
    }
    char *buf = base + cw->scratch;
    void *use[MAX_ARGS];
    int args[MAX_ARGS];
    dnnl_status_t s = dnnl_success;
    quiet_workers();
    sigset_t old;
    hold_signals(&old);
    for (int i = 0; i < cw->nargs && s == dnnl_success; i++) {
        const conv_arg *a = &cw->a[i];
        args[i] = a->arg;
        use[i] = a->rpd ? buf + a->off : ptr[i];
        if (a->rpd && !a->out)
            s = run_prim(c, a->r, a->rpd, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (void *[]){ptr[i], use[i]}, base);
    }
    if (s == dnnl_success) s = run_prim(c, cw->prim, cw->pd, cw->nargs, args, use, base);
    for (int i = 0; i < cw->nargs && s == dnnl_success; i++) {
        const conv_arg *a = &cw->a[i];
        if (a->rpd && a->out)
            s = run_prim(c, a->r, a->rpd, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (void *[]){use[i], ptr[i]}, base);
    }
    if (s == dnnl_success) s = L.dnnl_stream_wait(c->dnnl_stream);
    release_signals(&old);
    if (s != dnnl_success) return hr_error_set(HR_ERR_INTERNAL, "oneDNN: a convolution failed (status %d)", (int)s);
    return HR_OK;
}

static void add_into(const hr_cpu *c, float *dst, const float *src, int64_t n) {
#pragma omp parallel for num_threads(c->nthreads) schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

/* One part through oneDNN, nb samples a call; an output that accumulates (or
 * adds up over calls) goes to the workspace first. */
static hr_status dnnl_part(hr_cpu *c, const conv_entry *e, int way, int part, const hr_conv_args *v, char *ws) {
    const conv_key *k = &e->k;
    conv_way *cw = (conv_way *)&e->w[way][part];
    ws_layout w = layout_of(e, way, v);
    char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    int64_t nb = e->nb[way], nw = k->K * (k->C / k->groups) * k->kh * k->kw;
    size_t sx = (size_t)(nb * k->C * k->H * k->W), sy = (size_t)(nb * k->K * k->OH * k->OW);
    hr_status st = HR_OK;
    for (int64_t i = 0; i < k->N / nb && !st; i++) {
        size_t ox = (size_t)i * sx, oy = (size_t)i * sy;
        if (part == PART_FWD) {
            st = exec(c, cw, (void *[]){(void *)(v->x + ox), (void *)v->w, v->y + oy, (void *)v->b}, base);
        } else if (part == PART_DATA) {
            float *dx = v->acc_dx ? (float *)(base + w.dx) : v->dx + ox;
            st = exec(c, cw, (void *[]){(void *)(v->dy + oy), (void *)v->w, dx}, base);
            if (!st && v->acc_dx) add_into(c, v->dx + ox, dx, (int64_t)sx);
        } else {
            bool dw_direct = v->dw && i == 0 && !v->acc_dw, db_direct = v->db && i == 0 && !v->acc_db;
            float *dw = dw_direct ? v->dw : (float *)(base + w.dw);
            float *db = !v->db || db_direct ? v->db : (float *)(base + w.db);
            st = exec(c, cw, (void *[]){(void *)(v->x + ox), (void *)(v->dy + oy), dw, db}, base);
            if (!st && v->dw && !dw_direct) add_into(c, v->dw, dw, nw);
            if (!st && v->db && !db_direct) add_into(c, v->db, db, k->K);
        }
    }
    return st;
}

/* The im2col way for one part: the kernel with the other part's outputs
 * taken away. */
static hr_status im2col_part(hr_cpu *c, int part, const hr_kargs *a) {
    hr_kargs b = *a;
    if (part == PART_DATA) b.conv.dw = b.conv.db = NULL;
    if (part == PART_WEIGHTS) b.conv.dx = NULL;
    timing = true; /* the kernel then takes its own path */
    hr_status st = part == PART_FWD ? hr_cpu_conv2d(c, &b) : hr_cpu_conv2d_bwd(c, &b);
    timing = false;
    return st;
}

static hr_status run_way(hr_cpu *c, const conv_entry *e, int way, int part, const hr_kargs *a) {
    return way == WAY_IM2COL ? im2col_part(c, part, a) : dnnl_part(c, e, way, part, &a->conv, a->ws);
}

/* ---- the choice ------------------------------------------------------------------ */
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_d(const void *p, const void *q) {
    double a = *(const double *)p, b = *(const double *)q;
    return a < b ? -1 : a > b;
}

#define TIMED_REPS 3

static void say(const conv_entry *e) {
    static const char *pn[] = {"forward", "backward data", "backward weights"};
    const conv_key *k = &e->k;
    for (int p = first_part(k); p <= last_part(k); p++) {
        if (!has_part(k, p)) continue;
        fprintf(stderr, "conv %lldx%lldx%lldx%lld K%lld k%dx%d s%d,%d p%d,%d g%d d%d,%d %s:", (long long)k->N,
                (long long)k->C, (long long)k->H, (long long)k->W, (long long)k->K, k->kh, k->kw, k->sh, k->sw, k->ph,
                k->pw, k->groups, k->dil_h, k->dil_w, pn[p]);
        for (int way = 0; way < WAYS; way++) {
            const char *impl = NULL;
            if (way && e->w[way][p].pd)
                L.dnnl_primitive_desc_query(e->w[way][p].pd, dnnl_query_impl_info_str, 0, &impl);
            if (way && e->w[way][p].pd && e->nb[way] < k->N)
                fprintf(stderr, " %s (%s, %lld a call) %.3f ms,", way_name[way], impl ? impl : "?",
                        (long long)e->nb[way], e->ms[p][way]);
            else if (!way || e->w[way][p].pd)
                fprintf(stderr, " %s%s%s%s %.3f ms,", way_name[way], impl ? " (" : "", impl ? impl : "",
                        impl ? ")" : "", e->ms[p][way]);
        }
        fprintf(stderr, " %s\n", way_name[e->pick[p]]);
    }
}

/* Times each part of a node on every way (one warm-up, then the median of
 * TIMED_REPS, the ways interleaved so that drift hits all alike) on buffers
 * of its own, so that the node's tensors (dx may hold x's bytes, outputs may
 * accumulate) are never touched twice. Plain malloc: these buffers live only
 * while the shape is timed, once per process. Called with mu held. */
static void choose(hr_cpu *c, conv_entry *e, const hr_kargs *a) {
    const conv_key *k = &e->k;
    size_t nx = (size_t)(k->N * k->C * k->H * k->W), ny = (size_t)(k->N * k->K * k->OH * k->OW);
    size_t nw = (size_t)(k->K * (k->C / k->groups) * k->kh * k->kw), nb = (size_t)k->K;
    size_t wsn = hr_cpu_workspace_size(c, a), dn = total_of(e, &a->conv);
    if (dn > wsn) wsn = dn;
    float *x = calloc(nx, 4), *y = calloc(ny, 4), *w = calloc(nw, 4), *b = calloc(nb, 4), *dx = calloc(nx, 4);
    float *dw = calloc(nw, 4), *db = calloc(nb, 4);
    char *ws = malloc(wsn);
    for (int p = 0; p < PARTS; p++) e->pick[p] = WAY_IM2COL; /* also when there is no room to time */
    if (x && y && w && b && dx && dw && db && ws) {
        for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 255) / 128.0f - 1.0f;
        for (size_t i = 0; i < ny; i++) y[i] = (float)((i * 104729) % 251) / 125.0f - 1.0f;
        for (size_t i = 0; i < nw; i++) w[i] = (float)((i * 31) % 61) / 300.0f - 0.1f;
        hr_kargs t = *a;
        hr_conv_args *v = &t.conv;
        v->x = x, v->w = w, v->b = a->conv.b ? b : NULL;
        if (k->bwd) {
            v->dy = y, v->y = NULL;
            v->dx = a->conv.dx ? dx : NULL, v->dw = a->conv.dw ? dw : NULL, v->db = a->conv.db ? db : NULL;
        } else {
            v->y = y;
        }
        t.ws = ws, t.ws_bytes = wsn;
        for (int p = first_part(k); p <= last_part(k); p++) {
            if (!has_part(k, p)) continue;
            double ms[WAYS][TIMED_REPS];
            bool ok[WAYS];
            for (int way = 0; way < WAYS; way++)
                ok[way] = way == WAY_IM2COL || (e->nb[way] && way_ready(&e->w[way][p]));
            for (int r = 0; r <= TIMED_REPS; r++)
                for (int way = 0; way < WAYS; way++) {
                    if (!ok[way]) continue;
                    double t0 = now_ms();
                    ok[way] = run_way(c, e, way, p, &t) == HR_OK;
                    if (r) ms[way][r - 1] = now_ms() - t0;
                }
            for (int way = 0; way < WAYS; way++) {
                e->ms[p][way] = -1;
                if (!ok[way]) continue;
                qsort(ms[way], TIMED_REPS, sizeof(double), cmp_d);
                e->ms[p][way] = ms[way][TIMED_REPS / 2];
                if (e->ms[p][way] < e->ms[p][e->pick[p]]) e->pick[p] = way;
            }
        }
    }
    hr_error_clear();
    free(x), free(y), free(w), free(b), free(dx), free(dw), free(db), free(ws);
    if (c->dnnl_verbose) say(e);
}

/* ---- the dispatch ------------------------------------------------------------------- */
bool hr_cpu_dnnl_conv(void *ctx, const hr_kargs *a, hr_status *st) {
    hr_cpu *c = ctx;
    int mode = c->dnnl_mode;
    if (timing || mode == 0 || a->dt != HR_F32 || (mode == 1 && tiny(&a->conv)) || !loaded()) return false;
    pthread_mutex_lock(&mu);
    conv_entry *e = entry_of(c, a);
    /* a workspace planned without oneDNN (or for another shape): im2col */
    if (!e || e->broken || !a->ws || a->ws_bytes < total_of(e, &a->conv)) {
        pthread_mutex_unlock(&mu);
        return false;
    }
    int first = first_part(&e->k), last = last_part(&e->k), way[PARTS];
    bool any = false;
    if (mode == 1 && e->pick[first] < 0) choose(c, e, a);
    for (int p = first; p <= last; p++) {
        way[p] = mode == 1 ? e->pick[p] : mode == 2 ? WAY_PLAIN : WAY_BLOCKED;
        if (way[p] != WAY_IM2COL && !(e->nb[way[p]] && way_ready(&e->w[way[p]][p]))) way[p] = WAY_IM2COL;
        any |= way[p] != WAY_IM2COL;
    }
    pthread_mutex_unlock(&mu); /* from here the entry is only read */
    if (!any) return false;
    *st = HR_OK;
    /* weights first: dx may hold x's bytes (the planner's in-place) */
    for (int p = last; p >= first && !*st; p--)
        if (has_part(&e->k, p)) *st = run_way(c, e, way[p], p, a);
    return true;
}

/* ---- BatchNorm -------------------------------------------------------------------
 * Training's forward and backward (cpu_norm.c keeps inference, an
 * accumulating dx, and a backward without dx), chosen per shape by timing
 * as the convolutions are. oneDNN takes and gives the variance where
 * headroom keeps 1/sqrt(var + eps): the forward turns it into invstd (and
 * the unbiased running variance, as cpu_norm.c does), the backward rebuilds
 * it from invstd in the workspace. Its sums are in float, cpu_norm.c's in
 * double: the tests bound both against float64. Workspace: [alignment]
 * [scratchpad][variance][mean][dgamma][dbeta], each C floats rounded up to
 * 64 bytes. */
typedef struct {
    int64_t N, C, HW;
    float eps;
    int32_t bwd, nthr;
} bn_key;

typedef struct bn_entry {
    bn_key k;
    dnnl_primitive_desc_t pd; /* NULL: oneDNN cannot run the shape */
    dnnl_primitive_t prim;
    size_t scratch;
    int pick;     /* -1 not timed yet, 0 cpu_norm.c, 1 oneDNN */
    double ms[2]; /* the median times of each */
    struct bn_entry *next;
} bn_entry;

static bn_entry *bns; /* every shape of the process, as `shapes` */

/* A node oneDNN may take: training, F32, dx wanted and not accumulated; with
 * HR_DNNL=1 at least 64K values (below, its fixed costs outweigh). */
static bool bn_eligible(const hr_cpu *c, const hr_kargs *a) {
    const hr_batchnorm_args *b = &a->bn;
    if (c->dnnl_mode == 0 || a->dt != HR_F32 || b->N <= 0 || b->C <= 0 || b->HW <= 0) return false;
    if (a->op == HR_OP_BATCHNORM ? !b->train : !b->dx || b->acc_dx) return false;
    if (c->dnnl_mode == 1 && b->N * b->C * b->HW < (1 << 16)) return false;
    return loaded();
}

/* The shape's entry, described on first sight; NULL when the table cannot
 * grow. Called with mu held. */
static bn_entry *bn_entry_of(const hr_kargs *a) {
    const hr_batchnorm_args *b = &a->bn;
    bn_key k;
    memset(&k, 0, sizeof k);
    k.N = b->N, k.C = b->C, k.HW = b->HW, k.eps = b->eps, k.bwd = a->op == HR_OP_BATCHNORM_BWD;
#ifdef _OPENMP
    k.nthr = omp_get_max_threads();
#endif
    for (bn_entry *e = bns; e; e = e->next)
        if (!memcmp(&e->k, &k, sizeof k)) return e;
    bn_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->k = k;
    e->pick = -1;
    dnnl_memory_desc_t m;
    dnnl_batch_normalization_desc_t fd, bd;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_primitive_desc_t hint = NULL;
    bool ok = md(&m, 4, (int64_t[]){k.N, k.C, k.HW, 1}, dnnl_nchw) &&
              L.dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &m, k.eps, flags) ==
                  dnnl_success &&
              make_pd(k.bwd ? &hint : &e->pd, &fd, NULL);
    if (ok && k.bwd)
        ok = L.dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &m, &m, k.eps, flags) == dnnl_success &&
             make_pd(&e->pd, &bd, hint);
    if (hint) L.dnnl_primitive_desc_destroy(hint);
    if (!ok && e->pd) L.dnnl_primitive_desc_destroy(e->pd);
    if (!ok) e->pd = NULL;
    e->scratch = e->pd ? up64(scratch_of(e->pd)) : 0;
    e->next = bns;
    bns = e;
    return e;
}

static size_t bn_total(const bn_entry *e) { return e->pd ? 64 + e->scratch + 4 * up64(sizeof(float) * (size_t)e->k.C) : 0; }

static size_t bn_workspace(hr_cpu *c, const hr_kargs *a) {
    if (!bn_eligible(c, a)) return 0;
    pthread_mutex_lock(&mu);
    bn_entry *e = bn_entry_of(a);
    size_t n = e ? bn_total(e) : 0;
    pthread_mutex_unlock(&mu);
    return n;
}

/* The node through oneDNN; ws: at least bn_total bytes. */
static hr_status bn_dnnl(hr_cpu *c, const bn_entry *e, const hr_batchnorm_args *b, char *ws) {
    if (!c->dnnl_stream && L.dnnl_stream_create((dnnl_stream_t *)&c->dnnl_stream, L.eng, dnnl_stream_default_flags) !=
                               dnnl_success) {
        c->dnnl_stream = NULL;
        return hr_error_set(HR_ERR_INTERNAL, "oneDNN: could not make a stream");
    }
    int64_t C = e->k.C, M = e->k.N * e->k.HW;
    size_t row = up64(sizeof(float) * (size_t)C);
    char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float *var = (float *)(base + e->scratch), *mean = (float *)((char *)var + row);
    float *dg = (float *)((char *)mean + row), *db = (float *)((char *)dg + row);
    dnnl_status_t s;
    quiet_workers();
    sigset_t old;
    hold_signals(&old);
    if (!e->k.bwd) {
        float *mo = b->mean ? b->mean : mean;
        s = run_prim(c, e->prim, e->pd, 6,
                     (int[]){DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                             DNNL_ARG_VARIANCE},
                     (void *[]){(void *)b->x, b->y, (void *)b->gamma, (void *)b->beta, mo, var}, base);
        if (s == dnnl_success) s = L.dnnl_stream_wait(c->dnnl_stream);
        release_signals(&old);
        if (s != dnnl_success) return hr_error_set(HR_ERR_INTERNAL, "oneDNN: a batch norm failed (status %d)", (int)s);
        for (int64_t ch = 0; ch < C; ch++) { /* as cpu_norm.c: invstd and the running statistics */
            double v = var[ch];
            if (b->invstd) b->invstd[ch] = (float)(1.0 / sqrt(v + (double)b->eps));
            if (b->running_mean) {
                double unbiased = M > 1 ? v * (double)M / (double)(M - 1) : v;
                b->running_mean[ch] = (1.0f - b->momentum) * b->running_mean[ch] + b->momentum * mo[ch];
                b->running_var[ch] = (1.0f - b->momentum) * b->running_var[ch] + b->momentum * (float)unbiased;
            }
        }
        return HR_OK;
    }
    for (int64_t ch = 0; ch < C; ch++) { /* the variance whose 1/sqrt(var + eps) is invstd */
        double is = b->saved_invstd[ch];
        var[ch] = (float)(1.0 / (is * is) - (double)b->eps);
    }
    bool dg_direct = b->dgamma && !b->acc_dgamma, db_direct = b->dbeta && !b->acc_dbeta;
    /* oneDNN 2.6 wants the shift among a backward's inputs too, though
     * nothing reads it: gamma's bytes stand in */
    s = run_prim(c, e->prim, e->pd, 9,
                 (int[]){DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE,
                         DNNL_ARG_SHIFT, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT},
                 (void *[]){(void *)b->x, (void *)b->saved_mean, var, (void *)b->dy, (void *)b->gamma,
                            (void *)b->gamma, b->dx, dg_direct ? b->dgamma : dg, db_direct ? b->dbeta : db},
                 base);
    if (s == dnnl_success) s = L.dnnl_stream_wait(c->dnnl_stream);
    release_signals(&old);
    if (s != dnnl_success)
        return hr_error_set(HR_ERR_INTERNAL, "oneDNN: a batch norm's backward failed (status %d)", (int)s);
    for (int64_t ch = 0; ch < C; ch++) {
        if (b->dgamma && !dg_direct) b->dgamma[ch] += dg[ch];
        if (b->dbeta && !db_direct) b->dbeta[ch] += db[ch];
    }
    return HR_OK;
}

static hr_status bn_ours(hr_cpu *c, const hr_kargs *a) {
    timing = true; /* the kernel then takes its own path */
    hr_status st = a->op == HR_OP_BATCHNORM ? hr_cpu_batchnorm(c, a) : hr_cpu_batchnorm_bwd(c, a);
    timing = false;
    return st;
}

/* Times both ways (one warm-up, then the median of TIMED_REPS, interleaved)
 * on buffers of their own, running statistics included. Called with mu held. */
static void bn_choose(hr_cpu *c, bn_entry *e, const hr_kargs *a) {
    const bn_key *k = &e->k;
    size_t n = (size_t)(k->N * k->C * k->HW), nc = (size_t)k->C;
    float *x = malloc(4 * n), *y = malloc(4 * n), *pc = calloc(8 * nc, 4);
    char *ws = malloc(bn_total(e));
    e->pick = 0;
    if (x && y && pc && ws) {
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 255) / 128.0f - 1.0f;
        for (size_t i = 0; i < n; i++) y[i] = (float)((i * 104729) % 251) / 125.0f - 1.0f;
        for (size_t i = 0; i < nc; i++) pc[i] = 1.0f, pc[nc + i] = 0.5f, pc[6 * nc + i] = 1.0f;
        hr_kargs t = *a;
        hr_batchnorm_args *b = &t.bn;
        b->x = x, b->gamma = pc, b->beta = pc + nc, b->mean = pc + 2 * nc, b->invstd = pc + 3 * nc;
        b->saved_mean = pc + 4 * nc, b->saved_invstd = pc + 6 * nc;
        b->running_mean = pc + 4 * nc, b->running_var = pc + 5 * nc;
        if (k->bwd)
            b->dy = y, b->dx = y, b->dgamma = pc + 2 * nc, b->dbeta = pc + 3 * nc; /* dx over dy: the planner's way */
        else
            b->y = y;
        t.ws = ws, t.ws_bytes = bn_total(e);
        double ms[2][TIMED_REPS];
        bool ok[2] = {true, e->pd && (e->prim || L.dnnl_primitive_create(&e->prim, e->pd) == dnnl_success)};
        for (int r = 0; r <= TIMED_REPS; r++)
            for (int way = 0; way < 2; way++) {
                if (!ok[way]) continue;
                double t0 = now_ms();
                ok[way] = (way ? bn_dnnl(c, e, b, ws) : bn_ours(c, &t)) == HR_OK;
                if (r) ms[way][r - 1] = now_ms() - t0;
            }
        for (int way = 0; way < 2; way++) {
            e->ms[way] = -1;
            if (!ok[way]) continue;
            qsort(ms[way], TIMED_REPS, sizeof(double), cmp_d);
            e->ms[way] = ms[way][TIMED_REPS / 2];
        }
        if (ok[1] && e->ms[1] < e->ms[0]) e->pick = 1;
    }
    hr_error_clear();
    free(x), free(y), free(pc), free(ws);
    if (c->dnnl_verbose)
        fprintf(stderr, "batchnorm %lldx%lldx%lld %s: cpu %.3f ms, oneDNN %.3f ms, %s\n", (long long)k->N,
                (long long)k->C, (long long)k->HW, k->bwd ? "backward" : "forward", e->ms[0], e->ms[1],
                e->pick ? "oneDNN" : "cpu");
}

bool hr_cpu_dnnl_batchnorm(void *ctx, const hr_kargs *a, hr_status *st) {
    hr_cpu *c = ctx;
    if (timing || !bn_eligible(c, a)) return false;
    pthread_mutex_lock(&mu);
    bn_entry *e = bn_entry_of(a);
    /* a workspace planned without oneDNN: cpu_norm.c */
    if (!e || !e->pd || !a->ws || a->ws_bytes < bn_total(e)) {
        pthread_mutex_unlock(&mu);
        return false;
    }
    if (c->dnnl_mode == 1 && e->pick < 0) bn_choose(c, e, a);
    bool use = (c->dnnl_mode != 1 || e->pick == 1) &&
               (e->prim || L.dnnl_primitive_create(&e->prim, e->pd) == dnnl_success);
    pthread_mutex_unlock(&mu); /* from here the entry is only read */
    if (!use) return false;
    *st = bn_dnnl(c, e, &a->bn, a->ws);
    return true;
}

void hr_cpu_dnnl_close(hr_cpu *c) {
    if (c->dnnl_stream) L.dnnl_stream_destroy(c->dnnl_stream);
    c->dnnl_stream = NULL;
}
#endif
