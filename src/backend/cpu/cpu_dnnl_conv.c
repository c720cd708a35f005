/* cpu_dnnl_conv.c — Conv2d through oneDNN beside cpu_gemm.c's im2col: each
 * shape's first use times both, the faster stays.
 *
 * Primitives and the path chosen are kept per shape for the whole process
 * (not per backend), so that two sessions of one process compute a shape the
 * same way, bit for bit. The scratchpad is the user's: it lives in the
 * node's planned workspace. */
#include "backend/cpu/dnnl_lib.h"

#ifndef HR_HAVE_DNNL
bool hr_cpu_dnnl_conv(void *ctx, const hr_kargs *a, hr_status *st) {
    (void)ctx, (void)a, (void)st;
    return false;
}
size_t hr_cpu_dnnl_workspace_size(hr_cpu *c, const hr_kargs *a) {
    (void)c, (void)a;
    return 0;
}
#else

#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    bool broken;             /* oneDNN runs no part of the shape: im2col only */
    conv_way w[WAYS][PARTS]; /* [WAY_IM2COL] unused; a backward node's [.][PART_FWD].pd is only the hint */
    int64_t nb[WAYS];        /* the samples one call of a way takes (a divisor of N); 0: the way cannot run */
    int pick[PARTS];         /* the way chosen; -1: not timed yet */
    double ms[PARTS][WAYS];  /* the median times */
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

/* The part's arguments, and a reorder for each whose layout the primitive
 * does not take as it is. */
static bool finish_way(conv_way *cw) {
    size_t scratch = hr_dnnl_scratch_of(cw->pd), off = 0;
    for (int i = 0; i < cw->nargs; i++) {
        conv_arg *a = &cw->a[i];
        const dnnl_memory_desc_t *pm = hr_dnnl.dnnl_primitive_desc_query_md(cw->pd, dnnl_query_exec_arg_md, a->arg);
        if (!pm) return false;
        if (hr_dnnl.dnnl_memory_desc_equal(pm, &a->user)) continue;
        dnnl_primitive_attr_t attr = hr_dnnl_user_scratch();
        bool ok = attr &&
                  hr_dnnl.dnnl_reorder_primitive_desc_create(&a->rpd, a->out ? pm : &a->user, hr_dnnl.eng,
                                                             a->out ? &a->user : pm, hr_dnnl.eng, attr) == dnnl_success;
        if (attr) hr_dnnl.dnnl_primitive_attr_destroy(attr);
        if (!ok) {
            a->rpd = NULL;
            return false;
        }
        size_t s = hr_dnnl_scratch_of(a->rpd);
        if (s > scratch) scratch = s;
        a->off = off;
        off += hr_dnnl_up64(hr_dnnl.dnnl_memory_desc_get_size(pm));
    }
    cw->scratch = hr_dnnl_up64(scratch);
    cw->bytes = cw->scratch + off;
    return true;
}

static void way_free(conv_way *cw) {
    for (int i = 0; i < cw->nargs; i++) {
        if (cw->a[i].r) hr_dnnl.dnnl_primitive_destroy(cw->a[i].r);
        if (cw->a[i].rpd) hr_dnnl.dnnl_primitive_desc_destroy(cw->a[i].rpd);
    }
    if (cw->prim) hr_dnnl.dnnl_primitive_destroy(cw->prim);
    if (cw->pd) hr_dnnl.dnnl_primitive_desc_destroy(cw->pd);
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
    bool ok = hr_dnnl_md(&xu, 4, xd, dnnl_nchw) && hr_dnnl_md(&yu, 4, yd, dnnl_nchw) &&
              hr_dnnl_md(&bu, 1, bd, dnnl_x) &&
              (G > 1 ? hr_dnnl_md(&wu, 5, wd, dnnl_goihw) : hr_dnnl_md(&wu, 4, wd + 1, dnnl_oihw)) &&
              hr_dnnl_md(&xm, 4, xd, plain ? dnnl_nchw : dnnl_format_tag_any) &&
              hr_dnnl_md(&ym, 4, yd, plain ? dnnl_nchw : dnnl_format_tag_any) &&
              (G > 1 ? hr_dnnl_md(&wm, 5, wd, plain ? dnnl_goihw : dnnl_format_tag_any)
                     : hr_dnnl_md(&wm, 4, wd + 1, plain ? dnnl_oihw : dnnl_format_tag_any));
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
    if (hr_dnnl.dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xm,
                                                           &wm, bias ? &bu : NULL, &ym, st, dil, pl,
                                                           pr) != dnnl_success ||
        !hr_dnnl_make_pd(&cw[PART_FWD].pd, &fd, NULL))
        return false;
    if (!k->bwd) {
        set_args(&cw[PART_FWD], bias ? 4 : 3, (int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS},
                 (bool[]){false, false, true, false}, (const dnnl_memory_desc_t *[]){&xu, &wu, &yu, &bu});
        return finish_way(&cw[PART_FWD]);
    }
    if (k->has & HAS_DX) {
        if (hr_dnnl.dnnl_dilated_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &xm, &wm, &ym, st,
                                                                     dil, pl, pr) != dnnl_success ||
            !hr_dnnl_make_pd(&cw[PART_DATA].pd, &dd, cw[PART_FWD].pd))
            return false;
        set_args(&cw[PART_DATA], 3, (int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                 (bool[]){false, false, true}, (const dnnl_memory_desc_t *[]){&yu, &wu, &xu});
        if (!finish_way(&cw[PART_DATA])) return false;
    }
    if (k->has & (HAS_DW | HAS_DB)) {
        if (hr_dnnl.dnnl_dilated_convolution_backward_weights_desc_init(
                &wdsc, dnnl_convolution_direct, &xm, &wm, dbias ? &bu : NULL, &ym, st, dil, pl, pr) != dnnl_success ||
            !hr_dnnl_make_pd(&cw[PART_WEIGHTS].pd, &wdsc, cw[PART_FWD].pd))
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
    if (k->bwd && c->dx && c->acc_dx) off += hr_dnnl_up64(sizeof(float) * (size_t)(nb * k->C * k->H * k->W));
    w.dw = off;
    if (k->bwd && ((c->dw && (c->acc_dw || chunks)) || (c->db && !c->dw)))
        off += hr_dnnl_up64(sizeof(float) * (size_t)(k->K * (k->C / k->groups) * k->kh * k->kw));
    w.db = off;
    if (k->bwd && c->db && (c->acc_db || chunks)) off += hr_dnnl_up64(sizeof(float) * (size_t)k->K);
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

size_t hr_cpu_dnnl_workspace_size(hr_cpu *c, const hr_kargs *a) {
    if (a->op != HR_OP_CONV2D && a->op != HR_OP_CONV2D_BWD) return 0;
    if (c->dnnl_mode == 0 || a->dt != HR_F32 || (c->dnnl_mode == 1 && tiny(&a->conv)) || !hr_dnnl_loaded()) return 0;
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
    if (!cw->prim && hr_dnnl.dnnl_primitive_create(&cw->prim, cw->pd) != dnnl_success) cw->prim = NULL;
    for (int i = 0; i < cw->nargs && cw->prim; i++)
        if (cw->a[i].rpd && !cw->a[i].r && hr_dnnl.dnnl_primitive_create(&cw->a[i].r, cw->a[i].rpd) != dnnl_success) {
            cw->a[i].r = NULL;
            return false;
        }
    return cw->prim != NULL;
}

/* The part on the kernel's pointers (ptr: one per argument, in cw->a's
 * order); base: the aligned workspace. */
static hr_status exec(hr_cpu *c, conv_way *cw, void *const *ptr, char *base) {
    hr_status st = hr_dnnl_stream(c);
    if (st) return st;
    char *buf = base + cw->scratch;
    void *use[MAX_ARGS];
    int args[MAX_ARGS];
    dnnl_status_t s = dnnl_success;
    hr_dnnl_quiet_workers();
    sigset_t old;
    hr_dnnl_hold_signals(&old);
    for (int i = 0; i < cw->nargs && s == dnnl_success; i++) {
        const conv_arg *a = &cw->a[i];
        args[i] = a->arg;
        use[i] = a->rpd ? buf + a->off : ptr[i];
        if (a->rpd && !a->out)
            s = hr_dnnl_run(c, a->r, a->rpd, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (void *[]){ptr[i], use[i]}, base);
    }
    if (s == dnnl_success) s = hr_dnnl_run(c, cw->prim, cw->pd, cw->nargs, args, use, base);
    for (int i = 0; i < cw->nargs && s == dnnl_success; i++) {
        const conv_arg *a = &cw->a[i];
        if (a->rpd && a->out)
            s = hr_dnnl_run(c, a->r, a->rpd, 2, (int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (void *[]){use[i], ptr[i]}, base);
    }
    if (s == dnnl_success) s = hr_dnnl.dnnl_stream_wait(c->dnnl_stream);
    hr_dnnl_release_signals(&old);
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
                hr_dnnl.dnnl_primitive_desc_query(e->w[way][p].pd, dnnl_query_impl_info_str, 0, &impl);
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
 * HR_DNNL_TIMED_REPS, the ways interleaved so that drift hits all alike) on buffers
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
            double ms[WAYS][HR_DNNL_TIMED_REPS];
            bool ok[WAYS];
            for (int way = 0; way < WAYS; way++)
                ok[way] = way == WAY_IM2COL || (e->nb[way] && way_ready(&e->w[way][p]));
            for (int r = 0; r <= HR_DNNL_TIMED_REPS; r++)
                for (int way = 0; way < WAYS; way++) {
                    if (!ok[way]) continue;
                    double t0 = hr_dnnl_now_ms();
                    ok[way] = run_way(c, e, way, p, &t) == HR_OK;
                    if (r) ms[way][r - 1] = hr_dnnl_now_ms() - t0;
                }
            for (int way = 0; way < WAYS; way++) {
                e->ms[p][way] = -1;
                if (!ok[way]) continue;
                qsort(ms[way], HR_DNNL_TIMED_REPS, sizeof(double), hr_dnnl_cmp_d);
                e->ms[p][way] = ms[way][HR_DNNL_TIMED_REPS / 2];
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
    if (timing || mode == 0 || a->dt != HR_F32 || (mode == 1 && tiny(&a->conv)) || !hr_dnnl_loaded()) return false;
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
#endif
