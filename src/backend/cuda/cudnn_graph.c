/* cudnn_graph.c — a convolution through cuDNN's graph (backend) API, and
 * the engine choice and running of any graph (cudnn_attention.c builds
 * attention's); see cudnn_graph.h. The library is the one cudnn_load.c
 * loaded. */
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/hr_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

hr_cudnn_graph *hr_cudnn_graph_open(void *lib, cudnnHandle_t h) {
    hr_cudnn_graph *G = hr_calloc(1, sizeof *G);
    if (!G) {
        hr_error_clear();
        return NULL;
    }
    G->h = h;
    *(void **)&G->Create = dlsym(lib, "cudnnBackendCreateDescriptor");
    *(void **)&G->Destroy = dlsym(lib, "cudnnBackendDestroyDescriptor");
    *(void **)&G->Finalize = dlsym(lib, "cudnnBackendFinalize");
    *(void **)&G->Set = dlsym(lib, "cudnnBackendSetAttribute");
    *(void **)&G->Get = dlsym(lib, "cudnnBackendGetAttribute");
    *(void **)&G->Execute = dlsym(lib, "cudnnBackendExecute");
    if (!G->Create || !G->Destroy || !G->Finalize || !G->Set || !G->Get || !G->Execute) {
        hr_free(G);
        return NULL;
    }
    return G;
}

void hr_cudnn_graph_close(hr_cudnn_graph *G) { hr_free(G); }

/* ---- building the operation graph ------------------------------------------ */
#define MAX_PLANS 16

typedef struct {
    hr_cudnn_desc plan;
    size_t ws;
    int64_t engine;    /* the engine's global index */
    unsigned notes;    /* bit i: numerical note i */
    float ms;          /* timed; -1 before, or when it failed */
} cand;

struct hr_cudnn_op {
    int which;
    hr_cudnn_desc plan;      /* the chosen one (also in c[] until freed) */
    size_t ws;               /* its workspace */
    int64_t engine;
    unsigned notes;
    int k;                   /* its place among the candidates */
    int n;                   /* candidates */
    cand c[MAX_PLANS];
    bool tuned;
    hr_cudnn_scope *keep;    /* the descriptors the plans were made from */
    /* the variant pack of the last call, reused while the pointers stay */
    hr_cudnn_desc pack;
    const void *pa, *pb, *pout, *pws;
    const void *pp[HR_CUDNN_MAX_PACK]; /* hr_cudnn_op_exec's pointers (pws its workspace) */
    int pn;
};

hr_cudnn_desc hr_cudnn_make(hr_cudnn_scope *s, int type) {
    hr_cudnn_desc d = NULL;
    if (s->err || s->n == HR_CUDNN_MAX_KEEP) {
        if (!s->err) s->err = -1, s->where = "too many descriptors";
        return NULL;
    }
    hr_cudnn_status st = s->G->Create(type, &d);
    if (st) {
        s->err = st, s->where = "cudnnBackendCreateDescriptor";
        return NULL;
    }
    return s->d[s->n++] = d;
}

void hr_cudnn_set(hr_cudnn_scope *s, hr_cudnn_desc d, int name, int type, int64_t count, const void *v,
                  const char *what) {
    if (s->err || !d) return;
    hr_cudnn_status st = s->G->Set(d, name, type, count, v);
    if (st) s->err = st, s->where = what;
}

void hr_cudnn_fin(hr_cudnn_scope *s, hr_cudnn_desc d, const char *what) {
    if (s->err || !d) return;
    hr_cudnn_status st = s->G->Finalize(d);
    if (st) s->err = st, s->where = what;
}

static void scope_end(hr_cudnn_scope *s) {
    for (int i = s->n - 1; i >= 0; i--) s->G->Destroy(s->d[i]);
    s->n = 0;
}

hr_cudnn_desc hr_cudnn_graph_of(hr_cudnn_scope *s, const hr_cudnn_desc *ops, int n) {
    hr_cudnn_desc g = hr_cudnn_make(s, HR_CUDNN_BK_OPERATIONGRAPH);
    hr_cudnn_set(s, g, HR_CUDNN_ATTR_OPERATIONGRAPH_OPS, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops, "graph ops");
    hr_cudnn_set(s, g, HR_CUDNN_ATTR_OPERATIONGRAPH_HANDLE, HR_CUDNN_TYPE_HANDLE, 1, &s->G->h, "graph handle");
    hr_cudnn_fin(s, g, "operation graph");
    return g;
}

hr_cudnn_desc hr_cudnn_tensor(hr_cudnn_scope *s, int64_t uid, int dt, const int64_t dim[4], const int64_t str[4],
                              int64_t align, unsigned kind) {
    bool yes = true;
    hr_cudnn_desc t = hr_cudnn_make(s, HR_CUDNN_BK_TENSOR);
    hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_DATA_TYPE, HR_CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_DIMENSIONS, HR_CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
    hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_STRIDES, HR_CUDNN_TYPE_INT64, 4, str, "tensor strides");
    hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_UNIQUE_ID, HR_CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, HR_CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (kind & HR_CUDNN_VIRTUAL)
        hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_IS_VIRTUAL, HR_CUDNN_TYPE_BOOLEAN, 1, &yes, "virtual tensor");
    if (kind & HR_CUDNN_BY_VALUE)
        hr_cudnn_set(s, t, HR_CUDNN_ATTR_TENSOR_IS_BY_VALUE, HR_CUDNN_TYPE_BOOLEAN, 1, &yes, "scalar tensor");
    hr_cudnn_fin(s, t, "tensor");
    return t;
}

/* a packed NCHW tensor */
static hr_cudnn_desc tensor(hr_cudnn_scope *s, int64_t uid, const int64_t dim[4], int64_t align, int dt) {
    int64_t st[4] = {dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1};
    return hr_cudnn_tensor(s, uid, dt, dim, st, align, 0);
}

/* The tensors' ids in every variant pack: x (or dx), W (or dW), y (or dy). */
enum { UID_X = 'x', UID_W = 'w', UID_Y = 'y' };

static hr_cudnn_desc op_graph(hr_cudnn_scope *s, const hr_conv_dims *d, int which, float alpha, float beta) {
    int64_t groups = d->groups > 0 ? d->groups : 1; /* grouped: the filter's channels are a group's */
    int64_t xd[4] = {d->n, d->c, d->h, d->w}, wd[4] = {d->k, d->c / groups, d->r, d->s}, yd[4] = {d->n, d->k, d->oh, d->ow};
    hr_cudnn_desc x = tensor(s, UID_X, xd, d->align, d->dtype), w = tensor(s, UID_W, wd, d->align, d->dtype),
                  y = tensor(s, UID_Y, yd, d->align, d->dtype);
    int64_t two = 2, dil[2] = {d->dil[0] > 0 ? d->dil[0] : 1, d->dil[1] > 0 ? d->dil[1] : 1};
    int comp = HR_CUDNN_DATA_FLOAT, mode = HR_CUDNN_CROSS_CORRELATION;
    hr_cudnn_desc conv = hr_cudnn_make(s, HR_CUDNN_BK_CONVOLUTION);
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, HR_CUDNN_TYPE_INT64, 1, &two, "spatial dims");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_COMP_TYPE, HR_CUDNN_TYPE_DATA_TYPE, 1, &comp, "compute type");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_CONV_MODE, HR_CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "mode");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_DILATIONS, HR_CUDNN_TYPE_INT64, 2, dil, "dilations");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, HR_CUDNN_TYPE_INT64, 2, d->stride, "strides");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, HR_CUDNN_TYPE_INT64, 2, d->pad, "paddings");
    hr_cudnn_set(s, conv, HR_CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, HR_CUDNN_TYPE_INT64, 2, d->pad, "paddings");
    hr_cudnn_fin(s, conv, "convolution");
    static const int type[3] = {HR_CUDNN_BK_OP_CONV_FORWARD, HR_CUDNN_BK_OP_CONV_BWD_DATA,
                                HR_CUDNN_BK_OP_CONV_BWD_FILTER};
    /* attribute names per op: alpha, beta, conv, then x, W, y in their roles */
    static const int attr[3][6] = {
        {HR_CUDNN_ATTR_CONV_FWD_ALPHA, HR_CUDNN_ATTR_CONV_FWD_BETA, HR_CUDNN_ATTR_CONV_FWD_CONV_DESC,
         HR_CUDNN_ATTR_CONV_FWD_X, HR_CUDNN_ATTR_CONV_FWD_W, HR_CUDNN_ATTR_CONV_FWD_Y},
        {HR_CUDNN_ATTR_CONV_BWD_DATA_ALPHA, HR_CUDNN_ATTR_CONV_BWD_DATA_BETA, HR_CUDNN_ATTR_CONV_BWD_DATA_CONV_DESC,
         HR_CUDNN_ATTR_CONV_BWD_DATA_DX, HR_CUDNN_ATTR_CONV_BWD_DATA_W, HR_CUDNN_ATTR_CONV_BWD_DATA_DY},
        {HR_CUDNN_ATTR_CONV_BWD_FILTER_ALPHA, HR_CUDNN_ATTR_CONV_BWD_FILTER_BETA,
         HR_CUDNN_ATTR_CONV_BWD_FILTER_CONV_DESC, HR_CUDNN_ATTR_CONV_BWD_FILTER_X, HR_CUDNN_ATTR_CONV_BWD_FILTER_DW,
         HR_CUDNN_ATTR_CONV_BWD_FILTER_DY}};
    const int *a = attr[which];
    hr_cudnn_desc op = hr_cudnn_make(s, type[which]);
    hr_cudnn_set(s, op, a[0], HR_CUDNN_TYPE_FLOAT, 1, &alpha, "alpha");
    hr_cudnn_set(s, op, a[1], HR_CUDNN_TYPE_FLOAT, 1, &beta, "beta");
    hr_cudnn_set(s, op, a[2], HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv, "operation convolution");
    hr_cudnn_set(s, op, a[3], HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "operation x");
    hr_cudnn_set(s, op, a[4], HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "operation w");
    hr_cudnn_set(s, op, a[5], HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "operation y");
    hr_cudnn_fin(s, op, "operation");
    return hr_cudnn_graph_of(s, &op, 1);
}

/* ---- candidates ---------------------------------------------------------- */
static unsigned notes_of(hr_cudnn_graph *G, hr_cudnn_desc engine, int name, int type) {
    int v[16];
    int64_t got = 0;
    if (G->Get(engine, name, type, 16, &got, v)) return ~0u; /* unknown: treat as everything */
    unsigned m = 0;
    for (int64_t i = 0; i < got && i < 16; i++)
        if (v[i] >= 0 && v[i] < 32) m |= 1u << v[i];
    return m;
}

static bool acceptable(unsigned notes, unsigned behavior, unsigned flags) {
    unsigned tf32 = 1u << HR_CUDNN_NOTE_TENSOR_CORE | 1u << HR_CUDNN_NOTE_DOWN_CONVERT_INPUTS |
                    1u << HR_CUDNN_NOTE_REDUCED_PRECISION_REDUCTION;
    unsigned transform = 1u << HR_CUDNN_NOTE_FFT | 1u << HR_CUDNN_NOTE_WINOGRAD |
                         1u << HR_CUDNN_NOTE_WINOGRAD_TILE_4x4 | 1u << HR_CUDNN_NOTE_WINOGRAD_TILE_6x6 |
                         1u << HR_CUDNN_NOTE_WINOGRAD_TILE_13x13;
    if (flags & HR_ENGINE_TENSOR_CORE) tf32 &= ~(1u << HR_CUDNN_NOTE_TENSOR_CORE); /* half data: tensor cores only */
    if (flags & HR_ENGINE_HALF_REDUCTION) tf32 &= ~(1u << HR_CUDNN_NOTE_REDUCED_PRECISION_REDUCTION);
    if (!(flags & HR_ENGINE_ALLOW_TF32) && (notes & tf32)) return false;
    if ((flags & HR_ENGINE_PRECISE) && (notes & transform)) return false;
    if ((flags & HR_ENGINE_DETERMINISTIC) && (notes & 1u << HR_CUDNN_NOTE_NONDETERMINISTIC)) return false;
    /* engines compiled at run time need NVRTC and take seconds: only where asked */
    if (!(flags & HR_ENGINE_ALLOW_COMPILED) && (behavior & 1u << HR_CUDNN_BEHAVIOR_RUNTIME_COMPILATION)) return false;
    return true;
}

/* The engine configurations of one heuristics mode, in its order, offered to
 * `take` until it has had enough. */
static void from_heuristics(hr_cudnn_scope *s, hr_cudnn_op *op, hr_cudnn_desc graph, int mode, unsigned flags,
                            size_t ws_cap, int max_plans) {
    hr_cudnn_graph *G = s->G;
    hr_cudnn_desc heur = hr_cudnn_make(s, HR_CUDNN_BK_ENGINEHEUR);
    if (!heur) return;
    int64_t count = 0;
    hr_cudnn_desc cfg[32] = {0};
    int ncfg = 0;
    if (G->Set(heur, HR_CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        G->Set(heur, HR_CUDNN_ATTR_ENGINEHEUR_MODE, HR_CUDNN_TYPE_HEUR_MODE, 1, &mode) || G->Finalize(heur) ||
        G->Get(heur, HR_CUDNN_ATTR_ENGINEHEUR_RESULTS, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL))
        goto done;
    if (count > 32) count = 32;
    for (ncfg = 0; ncfg < count; ncfg++)
        if (!(cfg[ncfg] = hr_cudnn_make(s, HR_CUDNN_BK_ENGINECFG))) break;
    if (G->Get(heur, HR_CUDNN_ATTR_ENGINEHEUR_RESULTS, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &count, cfg)) goto done;
    for (int64_t i = 0; i < count && i < ncfg && op->n < max_plans; i++) {
        hr_cudnn_desc engine = NULL, plan = NULL;
        int64_t got = 0, index = -1, ws = 0;
        if (G->Create(HR_CUDNN_BK_ENGINE, &engine)) continue;
        unsigned notes = ~0u, behavior = ~0u;
        if (!G->Get(cfg[i], HR_CUDNN_ATTR_ENGINECFG_ENGINE, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine)) {
            notes = notes_of(G, engine, HR_CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, HR_CUDNN_TYPE_NUMERICAL_NOTE);
            behavior = notes_of(G, engine, HR_CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, HR_CUDNN_TYPE_BEHAVIOR_NOTE);
            G->Get(engine, HR_CUDNN_ATTR_ENGINE_GLOBAL_INDEX, HR_CUDNN_TYPE_INT64, 1, &got, &index);
        }
        G->Destroy(engine);
        if (!acceptable(notes, behavior, flags)) continue;
        bool ok = !G->Create(HR_CUDNN_BK_EXECUTION_PLAN, &plan) &&
                  !G->Set(plan, HR_CUDNN_ATTR_EXECUTION_PLAN_HANDLE, HR_CUDNN_TYPE_HANDLE, 1, &G->h) &&
                  !G->Set(plan, HR_CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, HR_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                          &cfg[i]) &&
                  !G->Finalize(plan) &&
                  !G->Get(plan, HR_CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, HR_CUDNN_TYPE_INT64, 1, &got, &ws) &&
                  ws >= 0 && (size_t)ws <= ws_cap;
        /* the same engine with the same workspace from an earlier list: most
         * likely the same configuration, already here */
        for (int k = 0; ok && k < op->n; k++)
            if (op->c[k].engine == index && op->c[k].ws == (size_t)ws && mode != HR_CUDNN_HEUR_MODE_A) ok = false;
        if (!ok) {
            if (plan) G->Destroy(plan);
            continue;
        }
        cand *c = &op->c[op->n++];
        c->plan = plan, c->ws = (size_t)ws, c->engine = index, c->notes = notes, c->ms = -1;
    }
done:
    s->err = 0; /* a mode that fails or runs out of room leaves the other one its chance */
}

static void choose(hr_cudnn_op *op, int k) {
    op->plan = op->c[k].plan, op->ws = op->c[k].ws, op->engine = op->c[k].engine, op->notes = op->c[k].notes;
    op->k = k;
}

/* The candidates but the chosen one are no longer needed. */
static void drop_others(hr_cudnn_graph *G, hr_cudnn_op *op) {
    for (int k = 0; k < op->n; k++)
        if (k != op->k && op->c[k].plan) G->Destroy(op->c[k].plan), op->c[k].plan = NULL;
}

hr_cudnn_op *hr_cudnn_op_from(hr_cudnn_graph *G, hr_cudnn_scope *s, hr_cudnn_desc graph, int which, unsigned flags,
                              size_t ws_cap, int max_plans, char *why, size_t whylen) {
    hr_cudnn_op *op = hr_calloc(1, sizeof *op);
    if (!op) {
        hr_error_clear();
        snprintf(why, whylen, "out of host memory");
        scope_end(s);
        hr_free(s);
        return NULL;
    }
    op->which = which;
    op->keep = s;
    if (max_plans > MAX_PLANS) max_plans = MAX_PLANS;
    if (flags & HR_ENGINE_FIRST_ONLY) max_plans = 1;
    hr_cudnn_status err = s->err;
    const char *where = s->where;
    if (!err) {
        /* mode A's list, then what mode B and the fallback list add (mode B
         * ranks other knob settings of the same engines) */
        from_heuristics(s, op, graph, HR_CUDNN_HEUR_MODE_A, flags, ws_cap, max_plans);
        if (op->n < max_plans && !(flags & HR_ENGINE_FIRST_ONLY))
            from_heuristics(s, op, graph, HR_CUDNN_HEUR_MODE_B, flags, ws_cap, max_plans);
        if (op->n < max_plans) from_heuristics(s, op, graph, HR_CUDNN_HEUR_MODE_FALLBACK, flags, ws_cap, max_plans);
    }
    if (err || op->n == 0) {
        if (err)
            snprintf(why, whylen, "%s failed (cuDNN status %d)", where, err);
        else
            snprintf(why, whylen, "no acceptable engine");
        hr_cudnn_op_free(G, op);
        return NULL;
    }
    choose(op, 0);
    op->tuned = op->n == 1;
    return op;
}

hr_cudnn_op *hr_cudnn_op_new(hr_cudnn_graph *G, const hr_conv_dims *d, int which, float beta, unsigned flags,
                             size_t ws_cap, int max_plans, char *why, size_t whylen) {
    if (!G) return NULL;
    hr_cudnn_scope *s = hr_calloc(1, sizeof *s);
    if (!s) {
        hr_error_clear();
        snprintf(why, whylen, "out of host memory");
        return NULL;
    }
    s->G = G;
    hr_cudnn_desc graph = op_graph(s, d, which, 1.0f, beta);
    return hr_cudnn_op_from(G, s, graph, which, flags, ws_cap, max_plans, why, whylen);
}

void hr_cudnn_op_free(hr_cudnn_graph *G, hr_cudnn_op *op) {
    if (!op) return;
    if (op->pack) G->Destroy(op->pack);
    for (int k = 0; k < op->n; k++)
        if (op->c[k].plan) G->Destroy(op->c[k].plan);
    if (op->keep) {
        scope_end(op->keep);
        hr_free(op->keep);
    }
    hr_free(op);
}

size_t hr_cudnn_op_workspace(const hr_cudnn_op *op) {
    if (op->tuned) return op->ws;
    size_t ws = 0;
    for (int k = 0; k < op->n; k++) ws = op->c[k].ws > ws ? op->c[k].ws : ws;
    return ws;
}

bool hr_cudnn_op_tuned(const hr_cudnn_op *op) { return op->tuned; }

/* ---- running --------------------------------------------------------------- */
static hr_status pack_for(hr_cudnn_graph *G, hr_cudnn_op *op, const void *a, const void *b, void *out, void *ws) {
    if (op->pack && op->pa == a && op->pb == b && op->pout == out && op->pws == ws) return HR_OK;
    if (op->pack) G->Destroy(op->pack);
    op->pack = NULL;
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *p[3];
    if (op->which == HR_CONV_FWD)
        p[0] = (void *)a, p[1] = (void *)b, p[2] = out;
    else if (op->which == HR_CONV_BWD_DATA)
        p[0] = out, p[1] = (void *)a, p[2] = (void *)b;
    else
        p[0] = (void *)a, p[1] = out, p[2] = (void *)b;
    hr_cudnn_desc pk = NULL;
    hr_cudnn_status st = G->Create(HR_CUDNN_BK_VARIANT_PACK, &pk);
    if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, HR_CUDNN_TYPE_INT64, 3, uids);
    if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, HR_CUDNN_TYPE_VOID_PTR, 3, p);
    if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_WORKSPACE, HR_CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!st) st = G->Finalize(pk);
    if (st) {
        if (pk) G->Destroy(pk);
        return hr_error_set(HR_ERR_DEVICE, "cuDNN: making a variant pack failed (status %d)", st);
    }
    op->pack = pk, op->pa = a, op->pb = b, op->pout = out, op->pws = ws, op->pn = 0;
    return HR_OK;
}

hr_status hr_cudnn_op_exec(hr_cudnn_graph *G, hr_cudnn_op *op, int n, const int64_t *uids, void *const *ptrs,
                           void *ws, size_t wsz) {
    if (op->ws > wsz)
        return hr_error_set(HR_ERR_INTERNAL, "cuDNN engine %lld needs %zu bytes of workspace, the plan gave %zu",
                            (long long)op->engine, op->ws, wsz);
    if (n > HR_CUDNN_MAX_PACK) return hr_error_set(HR_ERR_INTERNAL, "cuDNN: %d tensors in one pack", n);
    bool same = op->pack && op->pn == n && op->pws == ws;
    for (int i = 0; same && i < n; i++) same = op->pp[i] == ptrs[i];
    if (!same) {
        if (op->pack) G->Destroy(op->pack);
        op->pack = NULL;
        hr_cudnn_desc pk = NULL;
        hr_cudnn_status st = G->Create(HR_CUDNN_BK_VARIANT_PACK, &pk);
        if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, HR_CUDNN_TYPE_INT64, n, uids);
        if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, HR_CUDNN_TYPE_VOID_PTR, n, ptrs);
        if (!st) st = G->Set(pk, HR_CUDNN_ATTR_VARIANT_PACK_WORKSPACE, HR_CUDNN_TYPE_VOID_PTR, 1, &ws);
        if (!st) st = G->Finalize(pk);
        if (st) {
            if (pk) G->Destroy(pk);
            return hr_error_set(HR_ERR_DEVICE, "cuDNN: making a variant pack failed (status %d)", st);
        }
        op->pack = pk, op->pn = n, op->pws = ws, op->pa = op->pb = op->pout = NULL;
        for (int i = 0; i < n; i++) op->pp[i] = ptrs[i];
    }
    hr_cudnn_status e = G->Execute(G->h, op->plan, op->pack);
    if (e) return hr_error_set(HR_ERR_DEVICE, "cuDNN engine %lld failed to run (status %d)", (long long)op->engine, e);
    return HR_OK;
}

hr_status hr_cudnn_op_run(hr_cudnn_graph *G, hr_cudnn_op *op, const void *a, const void *b, void *out, void *ws,
                          size_t wsz) {
    if (op->ws > wsz)
        return hr_error_set(HR_ERR_INTERNAL, "cuDNN engine %lld needs %zu bytes of workspace, the plan gave %zu",
                            (long long)op->engine, op->ws, wsz);
    hr_status st = pack_for(G, op, a, b, out, ws);
    if (st) return st;
    hr_cudnn_status e = G->Execute(G->h, op->plan, op->pack);
    if (e) return hr_error_set(HR_ERR_DEVICE, "cuDNN engine %lld failed to run (status %d)", (long long)op->engine, e);
    return HR_OK;
}

/* One run of a plan (hr_cuda_time_runs' launcher). */
typedef struct {
    hr_cudnn_graph *G;
    hr_cudnn_desc plan, pack;
} plan_run;

static int run_plan(void *arg) {
    plan_run *r = arg;
    return r->G->Execute(r->G->h, r->plan, r->pack) == 0 ? 0 : -1;
}

/* The plan's time a run (-1 when it fails to run). False: the events failed
 * (the error is set). */
static bool time_plan(hr_cudnn_graph *G, hr_cudnn_desc plan, hr_cudnn_desc pack, cudaStream_t stream,
                      cudaEvent_t ev[2], float *ms) {
    plan_run r = {G, plan, pack};
    return hr_cuda_time_runs(stream, ev, run_plan, &r, ms);
}

hr_status hr_cudnn_op_tune(hr_cudnn_graph *G, hr_cudnn_op *op, cudaStream_t stream, cudaEvent_t ev[2], const void *a,
                           const void *b, void *out, void *ws, size_t wsz, bool verbose) {
    if (op->tuned) return HR_OK;
    op->tuned = true;
    hr_status st = pack_for(G, op, a, b, out, ws);
    if (st) return st;
    int pick = -1;
    for (int k = 0; k < op->n; k++) {
        cand *c = &op->c[k];
        if (c->ws > wsz) continue;
        if (!time_plan(G, c->plan, op->pack, stream, ev, &c->ms)) return HR_ERR_DEVICE;
        if (c->ms >= 0 && (pick < 0 || c->ms < op->c[pick].ms)) pick = k;
    }
    if (pick < 0) return hr_error_set(HR_ERR_DEVICE, "cuDNN: none of %d engines ran for this convolution", op->n);
    choose(op, pick);
    if (verbose) {
        static const char *what[] = {"forward", "backward-data", "backward-filter"};
        fprintf(stderr, "cuda: cudnn graph %s tuned: engine %lld (%.3f ms, workspace %zu) of", what[op->which],
                (long long)op->engine, (double)op->c[pick].ms, op->ws);
        for (int k = 0; k < op->n; k++)
            fprintf(stderr, " %lld%s:%.3f", (long long)op->c[k].engine,
                    op->c[k].notes & 1u << HR_CUDNN_NOTE_NONDETERMINISTIC ? "~" : "", (double)op->c[k].ms);
        fprintf(stderr, "\n");
    }
    drop_others(G, op);
    return HR_OK;
}

hr_status hr_cudnn_op_time(hr_cudnn_graph *G, hr_cudnn_op *op, cudaStream_t stream, cudaEvent_t ev[2], const void *a,
                           const void *b, void *out, void *ws, size_t wsz, float *ms) {
    *ms = -1;
    if (op->ws > wsz) return HR_OK;
    hr_status st = pack_for(G, op, a, b, out, ws);
    if (st) return st;
    if (!time_plan(G, op->plan, op->pack, stream, ev, ms)) return HR_ERR_DEVICE;
    if (op->k >= 0 && op->k < op->n) op->c[op->k].ms = *ms;
    return HR_OK;
}

void hr_cudnn_op_choice(const hr_cudnn_op *op, int64_t *engine, int64_t *k, size_t *ws) {
    *engine = op->engine, *k = op->k, *ws = op->ws;
}

float hr_cudnn_op_ms(const hr_cudnn_op *op) { return op->tuned && op->k >= 0 && op->k < op->n ? op->c[op->k].ms : -1; }

bool hr_cudnn_op_take(hr_cudnn_graph *G, hr_cudnn_op *op, int64_t engine, int64_t k, size_t ws) {
    if (op->tuned || k < 0 || k >= op->n || op->c[k].engine != engine || op->c[k].ws != ws) return false;
    choose(op, (int)k);
    op->tuned = true;
    drop_others(G, op);
    return true;
}

void hr_cudnn_op_describe(const hr_cudnn_op *op, char *buf, size_t len) {
    snprintf(buf, len, "graph engine %lld%s (workspace %zu, %d candidates%s)", (long long)op->engine,
             op->notes & 1u << HR_CUDNN_NOTE_NONDETERMINISTIC ? ", non-deterministic" : "", op->ws, op->n,
             op->tuned ? "" : ", not yet timed");
}
