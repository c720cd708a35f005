/* session.c — compile, allocate, run: the story of a training step, top to
 * bottom, and the named-state access that checkpoints use. */
#include "exec/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hr_config_t hr_config_default(void) {
    hr_config_t c;
    memset(&c, 0, sizeof c);
    c.batch = 64;
    c.mode = HR_MODE_TRAIN;
    c.optim.kind = HR_OPTIM_ADAM;
    c.optim.lr = 1e-3f;
    c.optim.beta1 = 0.9f;
    c.optim.beta2 = 0.999f;
    c.optim.eps = 1e-8f;
    c.device = HR_DEVICE_CPU;
    return c;
}

static hr_backend *backend_for(const hr_config_t *cfg) {
    if (cfg->device == HR_DEVICE_CUDA) return hr_backend_cuda_new(cfg);
    if (cfg->device == HR_DEVICE_AUTO && hr_backend_cuda_available()) return hr_backend_cuda_new(cfg);
    return hr_backend_cpu_new(cfg);
}

static bool is_state(const hr_tensor *t) {
    return (t->kind == HR_T_PARAM || t->kind == HR_T_BUFFER || t->kind == HR_T_OPTSTATE) && t->last >= 0;
}

/* The batch's input and labels, in bytes (what the backend stages). */
static void batch_bytes(const hr_model_t *m, int64_t batch, size_t *input, size_t *labels) {
    const hr_tensor *in = &m->g.t[m->input];
    *input = (size_t)(hr_shape_numel(&in->shape) * batch) * hr_dtype_size(in->dtype);
    *labels = 0;
    if (m->label >= 0) {
        const hr_tensor *lt = &m->g.t[m->label];
        *labels = (size_t)(hr_shape_numel(&lt->shape) * batch) * hr_dtype_size(lt->dtype);
    }
}

/* What the job holds: the runtime overhead (measured by the backend when it
 * started), the device total it makes with the arena, and, with an
 * evaluation pass, what the step alone would need (planned again without it). */
static hr_status job_totals(hr_session_t *s, const hr_model_t *m, const hr_config_t *cfg) {
    hr_report_t *r = &s->plan.report;
    s->overhead = s->be->overhead ? s->be->overhead(s->be) : 0;
    r->overhead_bytes = s->overhead;
    r->device_total = s->be->arena_kind == HR_MEM_DEVICE ? hr_device_total(s->plan.arena_bytes, s->overhead)
                                                         : s->plan.arena_bytes + s->overhead;
    r->eval_batch = s->prog.eval_input < 0 ? 0 : cfg->eval_batch < 0 ? cfg->batch : cfg->eval_batch;
    r->step_arena_bytes = s->plan.arena_bytes;
    if (!r->eval_batch) return HR_OK;
    hr_config_t c = *cfg;
    c.eval_batch = 0;
    hr_program p;
    hr_plan pl;
    if (hr_program_build(m, &c, hr_exec_workspace, s->be, &p) != HR_OK) return hr_last_status();
    hr_status st = hr_plan_make(&p, &pl);
    if (!st) {
        r->step_arena_bytes = pl.arena_bytes;
        hr_plan_free(&pl);
    }
    hr_program_free(&p);
    return st;
}

hr_session_t *hr_compile_on(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be) {
    hr_config_t dc; /* --device auto: the program is built for the device it got */
    if (cfg && cfg->device == HR_DEVICE_AUTO) {
        dc = *cfg;
        dc.device = be->arena_kind == HR_MEM_DEVICE ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
        cfg = &dc;
    }
    hr_session_t *s = hr_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->be = be;
    s->opt = hr_options_read();
    if (!(s->model_name = hr_strdup(m && m->name ? m->name : "model"))) goto fail;
    if (m && !m->broken) {
        if (!(s->model = hr_calloc(1, sizeof *s->model))) goto fail;
        *s->model = *m;
        memset(&s->model->g, 0, sizeof s->model->g);
        s->model->names = NULL; /* the copy only plans; it adds no layers */
        s->model->names_cap = 0;
        s->model->name = s->model->src_file = NULL;
        if (hr_graph_copy(&s->model->g, &m->g) != HR_OK || !(s->model->name = hr_strdup(m->name))) goto fail;
        if (be->set_batch && m->input >= 0 && cfg && cfg->batch > 0 && cfg->batch <= (1LL << 40)) {
            size_t in, lab;
            int64_t micro = cfg->accumulate > 1 && cfg->accumulate <= cfg->batch ? cfg->batch / cfg->accumulate : cfg->batch;
            batch_bytes(m, micro, &in, &lab);
            be->set_batch(be, micro, in, lab);
        }
    }
    /* recompute "auto" or "min": the search's choice, compiled as a list */
    char *chosen = NULL;
    hr_config_t rc;
    if (m && hr_recompute_resolve(m, cfg, be, &chosen) != HR_OK) goto fail;
    if (chosen) rc = *cfg, rc.recompute = chosen, cfg = &rc;
    hr_status built = hr_program_build(m, cfg, hr_exec_workspace, be, &s->prog);
    if (chosen) rc.recompute = s->prog.recompute; /* the program's copy, which lives as long as it */
    hr_free(chosen);
    if (built != HR_OK) goto fail;
    if (hr_exec_check_support(be, &s->prog) != HR_OK) goto fail;
    if (hr_plan_make(&s->prog, &s->plan) != HR_OK) goto fail;
    if (job_totals(s, m, cfg) != HR_OK) goto fail;
    if (hr_recompute_report(s, m) != HR_OK) goto fail;
    if (be->arena_kind == HR_MEM_DEVICE) {
        /* batches reach the device through two pinned host slots (double
         * buffering): the batch and its labels, each 256-byte aligned */
        const hr_graph *pg = &s->prog.g;
        size_t slot = hr_align_up((size_t)hr_shape_numel(&pg->t[s->prog.input].shape) * sizeof(float), HR_ALIGN);
        if (s->prog.label >= 0)
            slot += hr_align_up((size_t)hr_shape_numel(&pg->t[s->prog.label].shape) *
                                    hr_dtype_size(pg->t[s->prog.label].dtype), HR_ALIGN);
        slot += HR_ALIGN;                                  /* the step's scalars */
        s->plan.report.pinned_bytes = 2 * slot + HR_ALIGN; /* + the queued steps' losses */
    }
    /* Named state in PyTorch's order: parameters and buffers as the layers
     * made them, then optimizer state. */
    hr_graph *g = &s->prog.g;
    if (!(s->state = hr_malloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1)))) goto fail;
    s->prof = hr_profile_new(s, s->opt.profile);
    s->scale = cfg->loss_scale > 0 ? cfg->loss_scale : 65536.0f;
    /* the first writers of the parameters' gradients (accumulation) */
    if (cfg->accumulate > 1) {
        int cap = 0;
        for (int pass = 0; pass < 2; pass++) {
            for (int k = s->prog.n_fwd; k < s->prog.n_bwd_end; k++)
                for (int i = 0; i < g->n[k].nout; i++) {
                    int o = g->n[k].out[i];
                    if (o < 0 || g->t[o].kind != HR_T_GRAD || g->n[k].accum[i]) continue;
                    if (pass) s->first_writer[s->n_first_writer++] = k * HR_NODE_MAX_IO + i;
                    else cap++;
                }
            if (!pass && !(s->first_writer = hr_malloc(sizeof(int) * (size_t)(cap ? cap : 1)))) goto fail;
        }
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->nt; i++)
            if (is_state(&g->t[i]) && (g->t[i].kind == HR_T_OPTSTATE) == (pass == 1)) s->state[s->nstate++] = i;
    return s;
fail:
    s->be = NULL; /* the caller owns the backend */
    hr_session_free(s);
    return NULL;
}

hr_session_t *hr_compile(const hr_model_t *m, const hr_config_t *cfg) {
    if (!cfg) return hr_error_set(HR_ERR_INVALID_ARG, "compile: cfg is NULL"), NULL;
    hr_backend *be = backend_for(cfg);
    if (!be) return NULL;
    hr_session_t *s = hr_compile_on(m, cfg, be);
    if (!s) be->free(be);
    return s;
}

void hr_session_free(hr_session_t *s) {
    if (!s) return;
    hr_profile_free(s->prof, s);
    if (s->be) {
        if (s->arena) s->be->arena_free(s->be, s->arena);
        s->be->free(s->be);
    }
    hr_free(s->ptr);
    hr_free(s->args);
    hr_free(s->state);
    hr_free(s->first_writer);
    hr_free(s->xh);
    hr_plan_free(&s->plan);
    hr_program_free(&s->prog);
    hr_free(s->model_name);
    hr_model_free(s->model);
    hr_free(s);
}

const hr_report_t *hr_session_report(const hr_session_t *s) { return s ? &s->plan.report : NULL; }

/* ---- allocation and initial values ------------------------------------------ */
/* Each parameter and buffer takes its initial values from the descriptor of
 * the forward node that reads it (PyTorch's default init of that layer);
 * parameter k (in state order) draws from stream 1000 + k. */
static bool gpt2_init(const hr_graph *g, int n_fwd, const hr_node *n, int slot, uint64_t seed, uint64_t stream,
                      float *v);

static void init_state(const hr_graph *g, int n_fwd, int tensor, int index, uint64_t seed, bool gpt2, float *v) {
    int copy = -1; /* mixed precision: the layer reads the tensor's half copy (a held one, or a Cast's) */
    for (int i = 0; i < g->nt && copy < 0; i++)
        if (g->t[i].held && g->t[i].source == tensor) copy = i;
    for (int s = 0; s < n_fwd; s++) {
        const hr_node *n = &g->n[s];
        const hr_op_desc *d = hr_op_descs[n->op];
        if (n->op == HR_OP_CAST && n->in[0] == tensor) copy = n->out[0];
        for (int i = 0; i < n->nin; i++)
            if ((n->in[i] == tensor || (copy >= 0 && n->in[i] == copy)) && d->init) {
                if (!gpt2 || !gpt2_init(g, n_fwd, n, i, seed, 1000 + (uint64_t)index, v))
                    d->init(g, n, i, seed, 1000 + (uint64_t)index, v);
                return;
            }
    }
    memset(v, 0, sizeof(float) * (size_t)hr_shape_numel(&g->t[tensor].shape));
}

/* GPT-2's scheme (nanoGPT's _init_weights): Linear and embedding weights
 * N(0, 0.02), a *c_proj weight N(0, 0.02 / sqrt(2 n_layer)) with n_layer the
 * attention layers, biases 0; false for what it leaves to the layer's default. */
static bool gpt2_init(const hr_graph *g, int n_fwd, const hr_node *n, int slot, uint64_t seed, uint64_t stream,
                      float *v) {
    bool linear = n->op == HR_OP_LINEAR || n->op == HR_OP_LINEAR_CE; /* a head fused with its loss */
    if (!linear && n->op != HR_OP_EMBEDDING && n->op != HR_OP_POS_EMBEDDING) return false;
    const hr_tensor *t = &g->t[n->in[slot]];
    int64_t cnt = hr_shape_numel(&t->shape);
    if (slot == 2) { /* a bias */
        memset(v, 0, sizeof(float) * (size_t)cnt);
        return true;
    }
    double std = 0.02;
    size_t len = strlen(t->name), tail = strlen("c_proj.weight");
    if (linear && len >= tail && !strcmp(t->name + len - tail, "c_proj.weight")) {
        int layers = 0;
        for (int k = 0; k < n_fwd; k++) layers += g->n[k].op == HR_OP_ATTENTION;
        if (layers) std /= sqrt(2.0 * layers);
    }
    hr_init_normal(cnt, std, seed, stream, v);
    return true;
}

static hr_status upload_initial_state(hr_session_t *s) {
    hr_graph *g = &s->prog.g;
    size_t maxn = 0;
    for (int k = 0; k < s->nstate; k++) {
        size_t n = (size_t)hr_shape_numel(&g->t[s->state[k]].shape);
        if (n > maxn) maxn = n;
    }
    float *buf = hr_malloc(sizeof(float) * (maxn ? maxn : 1));
    if (!buf) return hr_error_prefix("initialising parameters");
    int index = 0;
    hr_status st = HR_OK;
    for (int k = 0; k < s->nstate && !st; k++) {
        hr_tensor *t = &g->t[s->state[k]];
        int64_t n = hr_shape_numel(&t->shape);
        if (t->kind == HR_T_OPTSTATE)
            memset(buf, 0, sizeof(float) * (size_t)n);
        else
            init_state(g, s->prog.n_fwd, s->state[k], t->kind == HR_T_PARAM ? index : -1, s->prog.cfg.seed,
                       s->model && s->model->init_gpt2, buf);
        if (t->kind == HR_T_PARAM) index++;
        st = s->be->upload(s->be, s->ptr[s->state[k]], buf, sizeof(float) * (size_t)n);
    }
    hr_free(buf);
    s->copies_stale = true;
    if (!st && s->prog.step_vars >= 0) { /* the NaN stop's flags start clear */
        hr_step_vars v;
        memset(&v, 0, sizeof v);
        st = s->be->upload(s->be, s->ptr[s->prog.step_vars], &v, sizeof v);
    }
    return st;
}

/* The plan does not fit: say what it needs, by category, what there is, and
 * the largest batch that would fit, before anything is allocated. `budget`
 * is what the process may hold in all (overhead included), the one test
 * being device total <= budget. */
static hr_status no_room(hr_session_t *s, size_t budget, const char *what) {
    char a[32], b[32], c[32], d[32], cats[1024] = "";
    const hr_report_t *r = &s->plan.report;
    size_t k = 0;
    for (int i = 0; i < HR_CAT_COUNT && k < sizeof cats; i++)
        k += (size_t)snprintf(cats + k, sizeof cats - k, "\n  %-18s %12s", hr_category_name((hr_category)i),
                              hr_format_bytes(r->category_at_peak[i], a, sizeof a));
    int64_t fit = s->model ? hr_largest_batch_on(s->model, &s->prog.cfg, budget, s->overhead, s->prog.cfg.batch, s->be) : -1;
    return hr_error_set(HR_ERR_DEVICE_OOM,
                        "batch %lld does not fit %s: the job holds %s (the planned arena %s%s, and %s of runtime "
                        "overhead), and %s allows %s.%s\n  largest batch that fits: %lld%s",
                        (long long)s->prog.cfg.batch, s->be->name, hr_format_bytes(r->device_total, d, sizeof d),
                        hr_format_bytes(s->plan.arena_bytes, a, sizeof a),
                        s->be->arena_kind == HR_MEM_DEVICE ? " in 2 MiB pages" : "",
                        hr_format_bytes(s->overhead, b, sizeof b), what, hr_format_bytes(budget, c, sizeof c), cats,
                        (long long)fit, fit > 0 ? " (use --batch, or fit it with gradient accumulation)" : "");
}

size_t hr_device_room(hr_backend *be, size_t overhead) {
    size_t free_b = 0, total_b = 0;
    if (!be->mem_info || be->mem_info(be, &free_b, &total_b) != HR_OK || !total_b) return SIZE_MAX;
    size_t reserve = be->arena_kind == HR_MEM_DEVICE ? HR_DEVICE_RESERVE : 0;
    return (free_b > reserve ? free_b - reserve : 0) + overhead;
}

size_t hr_session_device_room(const hr_session_t *s) { return hr_device_room(s->be, s->overhead); }

hr_status hr_session_alloc(hr_session_t *s) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "alloc: session is NULL");
    if (s->arena) return HR_OK;
    hr_graph *g = &s->prog.g;
    size_t need = s->plan.arena_bytes, total = s->plan.report.device_total;
    if (s->prog.cfg.device_budget && total > s->prog.cfg.device_budget)
        return no_room(s, s->prog.cfg.device_budget, "the budget");
    size_t room = hr_session_device_room(s);
    if (total > room)
        return no_room(s, room, "what is free on the device (less the driver's 32 MiB), with the overhead held already,");
    if (!(s->ptr = hr_calloc((size_t)(g->nt ? g->nt : 1), sizeof(void *)))) return hr_error_prefix("alloc");
    if (!(s->args = hr_calloc((size_t)(g->nn ? g->nn : 1), sizeof *s->args))) {
        hr_free(s->ptr);
        s->ptr = NULL;
        return hr_error_prefix("alloc");
    }
    hr_status st = s->be->arena_alloc(s->be, need, &s->arena);
    if (st != HR_OK) {
        hr_free(s->ptr);
        hr_free(s->args);
        s->ptr = NULL;
        s->args = NULL;
        s->arena = NULL;
        /* another process took the memory between the check and now */
        if (st == HR_ERR_DEVICE_OOM && (room = hr_session_device_room(s)) != SIZE_MAX)
            return no_room(s, room, "what is free on the device now");
        return st;
    }
    for (int i = 0; i < g->nt; i++)
        if (s->plan.root[i] >= 0) s->ptr[i] = (char *)s->arena + g->t[i].offset;
    if ((st = upload_initial_state(s)) != HR_OK) {
        s->be->arena_free(s->be, s->arena);
        s->arena = NULL;
        hr_free(s->ptr);
        hr_free(s->args);
        s->ptr = NULL;
        s->args = NULL;
    }
    return st;
}

/* ---- running ------------------------------------------------------------------ */
hr_status hr_copies_refresh(hr_session_t *s) {
    if (!s->copies_stale) return HR_OK;
    const hr_graph *g = &s->prog.g;
    for (int i = 0; i < g->nt; i++) {
        if (!g->t[i].held || !s->ptr[i]) continue;
        hr_node n = hr_node_make(HR_OP_CAST, g->t[i].layer);
        n.in[0] = g->t[i].source;
        n.nin = 1;
        n.out[0] = i;
        n.nout = 1;
        hr_kargs a;
        if (hr_node_exec(s->be, g, &n, s->ptr, NULL, &a) != HR_OK)
            return hr_error_prefix("making %s, the half copy of a weight", g->t[i].name);
    }
    s->copies_stale = false;
    return HR_OK;
}

/* Runs nodes [from, to), each through its kernel arguments (unpacked here,
 * once a step: the step number changes them). A run of update nodes of one
 * op goes to the backend as one group where it can (a multi-tensor launch);
 * the step number changes at n_bwd_end, so no group crosses it. */
hr_status hr_run_range(hr_session_t *s, int from, int to, const hr_step_info *base) {
    hr_graph *g = &s->prog.g;
    hr_step_info si = base ? *base : hr_step_info_make(s->t, &s->prog.cfg, s->prog.sqnorm);
    if (from >= s->prog.n_bwd_end && from < s->prog.n_step) si.t = s->t + 1, si.lr = hr_lr_at(&si.optim, si.t);
    hr_backend *be = s->be;
    hr_profile_step(s->prof, from, g->nn);
    for (int k = from, cnt; k < to; k += cnt) {
        if (k == s->prog.n_bwd_end) /* the update is step t+1, at its learning rate */
            si.t = s->t + 1, si.lr = hr_lr_at(&si.optim, si.t);
        const hr_node *n = &g->n[k];
        bool group = be->run_group && (n->op == HR_OP_ADAM || n->op == HR_OP_SGD);
        cnt = 1;
        while (group && k + cnt < to && k + cnt != s->prog.n_bwd_end && n[cnt].op == n->op) cnt++;
        if (group)
            for (int j = 0; j < cnt; j++) hr_op_unpack(g, &n[j], s->ptr, &si, &s->args[k + j]);
        if (hr_profile_before(s->prof, be, k) != HR_OK)
            return hr_error_prefix("step %lld, profiling mark at node %d", (long long)s->t + 1, k);
        double t0 = hr_profile_host(s->prof) ? hr_profile_now() : 0;
        hr_status st = group ? be->run_group(be, &s->args[k], cnt) : hr_node_exec(be, g, n, s->ptr, &si, &s->args[k]);
        hr_profile_after(s->prof, be, k, cnt, t0);
        if (st != HR_OK) {
            char grp[64] = "";
            if (cnt > 1) snprintf(grp, sizeof grp, ", launched with the %d update nodes after it", cnt - 1);
            return hr_error_prefix("step %lld, node %d (%s%s%s%s)", (long long)s->t + 1, k, hr_node_op_name(n),
                                   n->layer >= 0 ? ", layer " : "", n->layer >= 0 ? g->l[n->layer].name : "", grp);
        }
    }
    if (hr_profile_finish(s->prof, be, from, to) != HR_OK)
        return hr_error_prefix("step %lld, profiling mark after node %d", (long long)s->t + 1, to - 1);
    return HR_OK;
}

/* An input of token ids (read by an Embedding) holds integers in [0, V):
 * checked here, on the host, so that no kernel reads outside its table. */
static hr_status check_tokens(const hr_session_t *s, const float *x) {
    const hr_graph *g = &s->prog.g;
    for (int k = 0; k < g->nn; k++) {
        const hr_node *n = &g->n[k];
        if (n->op != HR_OP_EMBEDDING || n->in[0] != s->prog.input) continue;
        int64_t cnt = hr_shape_numel(&g->t[s->prog.input].shape), per = g->t[s->prog.input].shape.d[1];
        for (int64_t i = 0; i < cnt; i++)
            if (!(x[i] >= 0 && x[i] < (float)n->a.in_f && x[i] == (float)(int64_t)x[i]))
                return hr_error_set(HR_ERR_INVALID_ARG, "token %.9g of sample %lld (position %lld) is not an id in "
                                    "[0, %lld), the vocabulary of the Embedding", (double)x[i], (long long)(i / per),
                                    (long long)(i % per), (long long)n->a.in_f);
        return HR_OK;
    }
    return HR_OK;
}

/* Labels first (checked, then sent), the input last: a backend may take the
 * input's bytes from x while the step's first node runs (the CUDA backend's
 * pieces), so every path out of a step that uploaded it goes through
 * hr_finish_batch. */
hr_status hr_upload_batch(hr_session_t *s, const float *x, const void *labels, bool staged) {
    hr_graph *g = &s->prog.g;
    const hr_tensor *in = &g->t[s->prog.input];
    hr_staged l = hr_staged_layout(&s->prog);
    char *buf = staged ? s->ptr[s->prog.staged] : NULL; /* the staged batch (step.c) */
    hr_status (*up)(hr_backend *, void *, const void *, size_t) = staged ? s->be->upload_staged : s->be->upload;
    if (s->prog.label >= 0 && s->ptr[s->prog.label]) {
        const hr_tensor *lt = &g->t[s->prog.label];
        if (lt->dtype == HR_I32) {
            const int32_t *lab = labels;
            const hr_shape *os = &g->t[s->prog.output].shape;
            int64_t n = hr_shape_numel(&lt->shape), C = os->d[os->ndim - 1];
            int64_t per = n / (lt->shape.d[0] ? lt->shape.d[0] : 1); /* labels a sample: 1, or one a position */
            for (int64_t i = 0; i < n; i++)
                if (lab[i] < 0 || lab[i] >= C)
                    return hr_error_set(HR_ERR_INVALID_ARG, "label %d of sample %lld%s is outside [0, %lld)", lab[i],
                                        (long long)(i / per), per > 1 ? " (a position's)" : "", (long long)C);
        }
        hr_status st = up(s->be, staged ? buf + l.labels : s->ptr[s->prog.label], labels,
                          (size_t)hr_shape_numel(&lt->shape) * hr_dtype_size(lt->dtype));
        if (st) return st;
    }
    hr_status st = check_tokens(s, x);
    if (st != HR_OK) return st;
    if (!staged && s->be->upload_input) up = s->be->upload_input;
    return hr_send_input(s, up, staged ? buf + l.input : s->ptr[s->prog.input], x, hr_shape_numel(&in->shape), in->dtype);
}

#define HR_XH_BLOCK ((int64_t)1 << 21) /* values a block: 4 MiB of a half type */

hr_status hr_send_input(hr_session_t *s, hr_upload_fn up, void *dst, const float *x, int64_t n, hr_dtype t) {
    if (!hr_dtype_is_half(t)) return up(s->be, dst, x, (size_t)n * sizeof(float));
    if (!s->xh && !(s->xh = hr_malloc(sizeof(uint16_t) * (size_t)HR_XH_BLOCK)))
        return hr_error_set(HR_ERR_OOM, "out of host memory for a block of the half input (%lld bytes)",
                            (long long)(HR_XH_BLOCK * 2));
    for (int64_t off = 0; off < n; off += HR_XH_BLOCK) {
        int64_t k = n - off < HR_XH_BLOCK ? n - off : HR_XH_BLOCK;
#pragma omp parallel for if (k > 65536)
        for (int64_t i = 0; i < k; i++) hr_store_f(s->xh, t, i, x[off + i]);
        hr_status st = up(s->be, (char *)dst + (size_t)off * 2, s->xh, (size_t)k * 2);
        if (st) return st;
    }
    return HR_OK;
}

/* A step that failed after its upload: the backend finishes with x before
 * the caller gets it back (the first error is the one reported). */
hr_status hr_finish_batch(hr_session_t *s, hr_status st) {
    if (!st) return st;
    char first[4096]; /* the message, which a failing sync would replace */
    snprintf(first, sizeof first, "%s", hr_last_error());
    if (s->be->sync(s->be) != HR_OK) hr_error_set(st, "%s", first);
    return st;
}

/* With accumulation, micro-batches after the first add into the parameters'
 * gradients: the nodes that write them first set their accum flags for
 * those passes (first_writer lists them, node * HR_NODE_MAX_IO + slot). */
void hr_grads_accumulate(hr_session_t *s, bool on) {
    for (int i = 0; i < s->n_first_writer; i++) {
        int w = s->first_writer[i];
        s->prog.g.n[w / HR_NODE_MAX_IO].accum[w % HR_NODE_MAX_IO] = on;
    }
}

/* GradScaler.update: halve on inf/NaN (the step was skipped), double after
 * `interval` good steps in a row. */
static void scaler_update(hr_session_t *s, bool found_inf) {
    int interval = s->prog.cfg.scale_growth_interval > 0 ? s->prog.cfg.scale_growth_interval : 2000;
    if (found_inf) {
        s->scale *= 0.5f;
        s->growth = 0;
        s->skipped++;
    } else if (++s->growth >= interval) {
        s->scale *= 2.0f;
        s->growth = 0;
    }
}

hr_status hr_train_step(hr_session_t *s, const float *x, const void *labels, float *loss) {
    if (!s || !x || !labels) return hr_error_set(HR_ERR_INVALID_ARG, "train_step: NULL argument");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "train_step: call hr_session_alloc first");
    if (s->prog.cfg.mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "train_step: this session was compiled for inference");
    if (s->queued)
        return hr_error_set(HR_ERR_INVALID_ARG, "train_step: %d steps are queued (hr_train_submit); take their losses "
                            "with hr_train_wait first", s->queued);
    return hr_train_step_now(s, x, labels, loss);
}

hr_status hr_train_step_now(hr_session_t *s, const float *x, const void *labels, float *loss) {
    hr_status cs = hr_copies_refresh(s);
    if (cs) return cs;
    if (hr_device_stepped(s)) return hr_device_step(s, x, labels, loss);
    const hr_program *p = &s->prog;
    const hr_graph *g = &p->g;
    int K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    int64_t micro = hr_micro_batch(&p->cfg);
    size_t xs = (size_t)hr_shape_numel(&g->t[p->input].shape), ls = 0;
    if (p->label >= 0) ls = (size_t)hr_shape_numel(&g->t[p->label].shape) * hr_dtype_size(g->t[p->label].dtype);
    bool fp16 = p->cfg.precision == HR_PREC_FP16;
    hr_step_info si = hr_step_info_make(s->t, &p->cfg, p->sqnorm);
    si.loss_scale = (fp16 ? s->scale : 1.0f) / (float)K;
    si.inv_scale = fp16 ? (float)(1.0 / (double)s->scale) : 1.0f;
    si.dvars = p->step_vars >= 0 ? s->ptr[p->step_vars] : NULL;
    hr_graph_blocked(s);
    double total = 0;
    hr_status st = hr_upload_vars(s, s->t + 1, true);
    for (int k = 0; k < K && !st; k++) {
        si.sample0 = k * micro;
        hr_grads_accumulate(s, k > 0);
        st = hr_upload_batch(s, x + (size_t)k * xs, (const char *)labels + (size_t)k * ls, false);
        /* the whole step in one run when nothing happens between the passes */
        int end = K == 1 && p->found_inf < 0 && !s->nan_stop ? p->n_step : p->n_bwd_end;
        if (!st) st = hr_run_range(s, 0, end, &si);
        if (!st && (loss || s->nan_stop) && K > 1) {
            float l = 0;
            st = s->be->download(s->be, &l, s->ptr[p->loss], sizeof(float));
            if (!st) st = s->be->sync(s->be);
            total += l;
        }
    }
    hr_grads_accumulate(s, false);
    /* the NaN stop (nancheck.c): a non-finite loss returns before the update */
    float step_loss = (float)(total / K);
    if (!st && s->nan_stop) {
        if (K == 1) st = s->be->download(s->be, &step_loss, s->ptr[p->loss], sizeof(float));
        if (!st) st = s->be->sync(s->be);
        if (!st && !isfinite(step_loss)) {
            if (loss) *loss = step_loss;
            return HR_OK;
        }
    }
    bool found_inf = false;
    if (!st && p->found_inf >= 0) {
        float f = 0;
        st = hr_run_range(s, p->n_bwd_end, p->n_unscale_end, &si);
        if (!st) st = s->be->download(s->be, &f, s->ptr[p->found_inf], sizeof(float));
        if (!st) st = s->be->sync(s->be);
        found_inf = f != 0.0f;
    }
    if (!st && !found_inf && (K > 1 || p->found_inf >= 0 || s->nan_stop))
        st = hr_run_range(s, p->n_unscale_end, p->n_step, &si);
    if (st) return hr_finish_batch(s, st);
    if (fp16) scaler_update(s, found_inf);
    if (!found_inf) s->t++;
    if (loss && (K > 1 || s->nan_stop)) {
        *loss = step_loss;
    } else if (loss) {
        st = s->be->download(s->be, loss, s->ptr[p->loss], sizeof(float));
        if (!st) st = s->be->sync(s->be);
    }
    return st;
}

hr_status hr_loss_scale(const hr_session_t *s, float *scale, int64_t *growth, int64_t *skipped) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "loss_scale: the session is NULL");
    if (scale) *scale = s->prog.cfg.precision == HR_PREC_FP16 ? s->scale : 1.0f;
    if (growth) *growth = s->growth;
    if (skipped) *skipped = s->skipped;
    return HR_OK;
}

hr_status hr_set_loss_scale(hr_session_t *s, float scale, int64_t growth, int64_t skipped) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "set_loss_scale: the session is NULL");
    if (!(scale > 0) || !isfinite(scale) || growth < 0 || skipped < 0)
        return hr_error_set(HR_ERR_INVALID_ARG, "loss scale %g with growth tracker %lld and %lld skipped steps: the "
                            "scale must be finite and positive, the counts >= 0", scale, (long long)growth,
                            (long long)skipped);
    s->scale = scale;
    s->growth = growth;
    s->skipped = skipped;
    return HR_OK;
}

/* Tensor t as F32 into out: an F32 one as it is; a half one (a pass's output
 * under mixed precision) comes down into the back of `out` and is widened in
 * place, front to back, through a chunk on the stack (memcpy: no aliasing
 * between the views; floats [0, i + k) never reach the halves past i + k). */
static hr_status read_f32(hr_session_t *s, int t, float *out) {
    const hr_tensor *x = &s->prog.g.t[t];
    int64_t n = hr_shape_numel(&x->shape);
    size_t es = hr_dtype_size(x->dtype);
    void *dst = (char *)out + (size_t)n * (sizeof(float) - es);
    hr_status st = s->be->download(s->be, dst, s->ptr[t], (size_t)n * es);
    if (!st) st = s->be->sync(s->be);
    uint16_t chunk[2048];
    for (int64_t i = 0; !st && x->dtype != HR_F32 && i < n; i += 2048) {
        int64_t k = n - i < 2048 ? n - i : 2048;
        memcpy(chunk, (const uint16_t *)dst + i, (size_t)k * 2);
        for (int64_t j = 0; j < k; j++) out[i + j] = hr_load_f(chunk, x->dtype, j);
    }
    return st;
}

hr_status hr_forward(hr_session_t *s, const float *x, float *out) {
    if (!s || !x) return hr_error_set(HR_ERR_INVALID_ARG, "forward: NULL argument");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "forward: call hr_session_alloc first");
    if (s->prog.cfg.mode != HR_MODE_INFER)
        return hr_error_set(HR_ERR_INVALID_ARG, "forward: compile with mode HR_MODE_INFER for inference");
    hr_status st = hr_upload_batch(s, x, NULL, false);
    if (!st) st = hr_run_range(s, 0, s->prog.n_fwd, NULL);
    if (st) return hr_finish_batch(s, st);
    if (out) st = hr_read_output(s, out);
    return st;
}

hr_status hr_eval_forward(hr_session_t *s, const float *x, float *out) {
    if (!s || !x || !out) return hr_error_set(HR_ERR_INVALID_ARG, "eval_forward: NULL argument");
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "eval_forward: call hr_session_alloc first");
    const hr_program *p = &s->prog;
    if (p->eval_input < 0)
        return hr_error_set(HR_ERR_INVALID_ARG, "eval_forward: this session has no evaluation pass; compile it for "
                            "training with cfg.eval_batch > 0");
    if (s->queued) /* the parameters it reads are still being updated */
        return hr_error_set(HR_ERR_INVALID_ARG, "eval_forward: %d steps are queued; take their losses with "
                            "hr_train_wait first", s->queued);
    const hr_tensor *in = &p->g.t[p->eval_input];
    hr_status st = hr_copies_refresh(s);
    if (!st) st = hr_send_input(s, s->be->upload, s->ptr[p->eval_input], x, hr_shape_numel(&in->shape), in->dtype);
    if (!st) st = hr_run_range(s, p->n_step, p->g.nn, NULL);
    if (st) return hr_finish_batch(s, st);
    return read_f32(s, p->eval_output, out);
}

hr_status hr_read_output(hr_session_t *s, float *out) {
    if (!s || !out) return hr_error_set(HR_ERR_INVALID_ARG, "read_output: NULL argument");
    if (!s->ptr || !s->ptr[s->prog.output]) return hr_error_set(HR_ERR_INVALID_ARG, "read_output: nothing has run");
    if (s->prog.cfg.mode == HR_MODE_TRAIN && !s->prog.cfg.keep_output)
        return hr_error_set(HR_ERR_INVALID_ARG, "read_output: a training step reuses its output's bytes; compile the "
                                                "session with keep_output to read it after a step");
    if (s->queued)
        return hr_error_set(HR_ERR_INVALID_ARG, "read_output: %d steps are queued; take their losses with hr_train_wait "
                            "first", s->queued);
    return read_f32(s, s->prog.output, out);
}

int64_t hr_step_count(const hr_session_t *s) { return s ? s->t : -1; }
hr_status hr_set_step_count(hr_session_t *s, int64_t t) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "set_step_count: the session is NULL");
    if (t < 0) return hr_error_set(HR_ERR_INVALID_ARG, "step count %lld is negative", (long long)t);
    if (s->queued) /* their scalars were made from the old count */
        return hr_error_set(HR_ERR_INVALID_ARG, "set_step_count: %d steps are queued; take their losses with "
                            "hr_train_wait first", s->queued);
    s->t = t;
    return HR_OK;
}

/* ---- named state --------------------------------------------------------------- */
static const hr_tensor *state_t(const hr_session_t *s, int i) { return &s->prog.g.t[s->state[i]]; }
int hr_state_count(const hr_session_t *s) { return s ? s->nstate : 0; }
const char *hr_state_name(const hr_session_t *s, int i) { return s && i >= 0 && i < s->nstate ? state_t(s, i)->name : NULL; }
int hr_state_ndim(const hr_session_t *s, int i) { return s && i >= 0 && i < s->nstate ? state_t(s, i)->shape.ndim : -1; }
int64_t hr_state_dim(const hr_session_t *s, int i, int d) {
    if (!s || i < 0 || i >= s->nstate || d < 0 || d >= state_t(s, i)->shape.ndim) return -1;
    return state_t(s, i)->shape.d[d];
}
bool hr_state_is_param(const hr_session_t *s, int i) {
    return s && i >= 0 && i < s->nstate && state_t(s, i)->kind != HR_T_OPTSTATE;
}
int hr_state_find(const hr_session_t *s, const char *name) {
    if (!s || !name) return -1;
    for (int i = 0; i < s->nstate; i++)
        if (strcmp(state_t(s, i)->name, name) == 0) return i;
    return -1;
}

static hr_status state_check(hr_session_t *s, int i, const void *buf) {
    if (i < 0 || i >= s->nstate || !buf) return hr_error_set(HR_ERR_INVALID_ARG, "state index %d out of range", i);
    if (!s->arena) return hr_error_set(HR_ERR_INVALID_ARG, "state: call hr_session_alloc first");
    if (s->queued) /* their updates and the step count would disagree */
        return hr_error_set(HR_ERR_INVALID_ARG, "state: %d steps are queued; take their losses with hr_train_wait first",
                            s->queued);
    return HR_OK;
}

hr_status hr_state_read(hr_session_t *s, int i, float *dst) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "state_read: the session is NULL");
    hr_status st = state_check(s, i, dst);
    if (st) return st;
    size_t n = (size_t)hr_shape_numel(&state_t(s, i)->shape) * sizeof(float);
    st = s->be->download(s->be, dst, s->ptr[s->state[i]], n);
    return st ? st : s->be->sync(s->be);
}

hr_status hr_state_write(hr_session_t *s, int i, const float *src) {
    if (!s) return hr_error_set(HR_ERR_INVALID_ARG, "state_write: the session is NULL");
    hr_status st = state_check(s, i, src);
    if (st) return st;
    size_t n = (size_t)hr_shape_numel(&state_t(s, i)->shape) * sizeof(float);
    st = s->be->upload(s->be, s->ptr[s->state[i]], src, n);
    s->copies_stale = true; /* a parameter's half copy follows it before the next pass */
    return st ? st : s->be->sync(s->be);
}

hr_status hr_grad_read(hr_session_t *s, const char *param, float *dst) {
    if (!s || !param || !dst) return hr_error_set(HR_ERR_INVALID_ARG, "grad_read: NULL argument");
    hr_graph *g = &s->prog.g;
    if (!s->prog.cfg.keep_grads)
        return hr_error_set(HR_ERR_INVALID_ARG, "grad_read: gradients die at their update; compile with keep_grads");
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].kind == HR_T_PARAM && strcmp(g->t[i].name, param) == 0) {
            int gt = g->t[i].grad;
            if (gt < 0 || !s->ptr || !s->ptr[gt])
                return hr_error_set(HR_ERR_INVALID_ARG, "grad_read: parameter %s has no gradient (frozen?)", param);
            hr_status st = s->be->download(s->be, dst, s->ptr[gt], (size_t)hr_shape_numel(&g->t[gt].shape) * sizeof(float));
            return st ? st : s->be->sync(s->be);
        }
    return hr_error_set(HR_ERR_INVALID_ARG, "grad_read: no parameter named '%s'", param);
}

hr_status hr_mem_stats(hr_session_t *s, hr_mem_stats_t *out) {
    if (!s || !out) return hr_error_set(HR_ERR_INVALID_ARG, "mem_stats: NULL argument");
    memset(out, 0, sizeof *out);
    out->allocated = out->reserved = out->peak_allocated = s->arena ? s->plan.arena_bytes : 0;
    if (s->be->mem_info) s->be->mem_info(s->be, &out->device_free, &out->device_total);
    if (s->be->alloc_count) out->device_allocs = s->be->alloc_count(s->be);
    return HR_OK;
}

/* ---- internal.h ------------------------------------------------------------------ */
const hr_program *hr_session_program(const hr_session_t *s) { return &s->prog; }
const hr_plan *hr_session_plan(const hr_session_t *s) { return &s->plan; }
hr_backend *hr_session_backend(const hr_session_t *s) { return s->be; }
void **hr_session_ptrs(const hr_session_t *s) { return s->ptr; }
size_t hr_session_overhead(const hr_session_t *s) { return s->overhead; }
bool hr_session_allocated(const hr_session_t *s) { return s->arena != NULL; }
int hr_session_profile_mode(const hr_session_t *s) { return s->prof ? (hr_profile_host(s->prof) ? 1 : 2) : 0; }
