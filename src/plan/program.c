/* program.c — turns a model into the step program: the forward nodes for the
 * batch, the backward nodes that autodiff needs (from each op's descriptor),
 * and the optimizer updates. */
#include "plan/program.h"

#include "plan/autocast.h"
#include "plan/chunk.h"
#include "plan/recompute.h"

#include <string.h>

#define HR_MAX_BATCH (1LL << 40)

void hr_program_free(hr_program *p) {
    hr_graph_free(&p->g);
    hr_free(p->recompute);
    memset(p, 0, sizeof *p);
}

hr_status hr_program_copy(hr_program *dst, const hr_program *src) {
    *dst = *src;
    dst->recompute = NULL;
    dst->cfg.recompute = NULL;
    if (hr_graph_copy(&dst->g, &src->g) != HR_OK) goto oom;
    if (src->recompute && !(dst->recompute = hr_strdup(src->recompute))) goto oom;
    dst->cfg.recompute = dst->recompute;
    return HR_OK;
oom:
    hr_program_free(dst);
    return hr_error_set(HR_ERR_OOM, "out of host memory copying the step program");
}

/* Recomputes the layers that cfg.recompute names, and those that run in
 * slices (`sliced`, may be NULL), after the whole program is built: the
 * clones take the workspace of the nodes they copy. */
static hr_status recompute(hr_program *p, const char *list, const bool *sliced) {
    p->cfg.recompute = NULL;
    bool named = list && *list && strcmp(list, "none");
    if (!named && !sliced) return HR_OK;
    if (named && p->cfg.mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "--recompute is for training: inference keeps no activations");
    if (named && (!strcmp(list, "auto") || !strcmp(list, "min")))
        return hr_error_set(HR_ERR_INVALID_ARG, "recompute '%s' is chosen by hr_compile, not by the program builder", list);
    bool *sel = hr_calloc((size_t)p->g.nl + 1, 1);
    size_t n = hr_recompute_list_len(p);
    char *names = hr_malloc(n);
    hr_status st = !sel || !names ? HR_ERR_OOM : named ? hr_recompute_parse(p, list, sel) : HR_OK;
    if (!st && sliced)
        for (int l = 0; l < p->g.nl; l++) sel[l] |= sliced[l] && hr_recompute_layer_ok(p, l);
    if (!st) st = hr_recompute_apply(p, sel);
    if (!st && hr_recompute_count(p)) {
        p->recompute = names;
        p->cfg.recompute = hr_recompute_list(p, sel, names, n);
        names = NULL;
    }
    hr_free(sel);
    hr_free(names);
    return st;
}

/* The layers a list names for recomputation (not auto, min, all or none),
 * per layer, on the forward graph as it stands: an activation among them is
 * recomputed alone (llm.c's -r 1), so it does not go into its Linear.
 * NULL: none named, or a list recompute() will refuse with its message. */
static bool *named_recompute(hr_program *p, const char *list) {
    if (!list || !*list || !strcmp(list, "none") || !strcmp(list, "all") || !strcmp(list, "auto") || !strcmp(list, "min"))
        return NULL;
    bool *sel = hr_calloc((size_t)p->g.nl + 1, 1);
    int nf = p->n_fwd;
    p->n_fwd = p->g.nn; /* the forward nodes, for hr_recompute_layer_ok */
    if (sel && hr_recompute_parse(p, list, sel) != HR_OK) {
        hr_error_clear();
        hr_free(sel);
        sel = NULL;
    }
    p->n_fwd = nf;
    return sel;
}

/* Gives tensor t its batch dimension when it is batched; checks the bytes fit int64. */
static hr_status batch_one(hr_tensor *t, int64_t batch) {
    if (t->batched) {
        if (t->shape.ndim >= HR_MAX_DIMS) return hr_error_set(HR_ERR_INTERNAL, "tensor %s has too many dims", t->name);
        memmove(&t->shape.d[1], &t->shape.d[0], sizeof(int64_t) * (size_t)t->shape.ndim);
        t->shape.d[0] = batch;
        t->shape.ndim++;
    }
    int64_t n = hr_shape_numel(&t->shape), b;
    if (n < 0 || !hr_mul_ok(n, (int64_t)hr_dtype_size(t->dtype), &b) || b > (INT64_MAX >> 2))
        return hr_error_set(HR_ERR_INVALID_ARG, "batch %lld makes tensor %s larger than 2^61 bytes; plan a smaller batch",
                            (long long)batch, t->name);
    return HR_OK;
}

static hr_status add_batch(hr_program *p, int64_t batch) {
    for (int i = 0; i < p->g.nt; i++) {
        hr_status st = batch_one(&p->g.t[i], batch);
        if (st) return st;
    }
    return HR_OK;
}

/* The evaluation pass: the model's forward nodes again (the loss left out),
 * in inference mode, on `batch` samples of their own tensors ("eval." + the
 * name), reading the step's parameters and buffers themselves. Appended
 * after the update, so its tensors live where the step's are dead. */
static hr_status build_eval(hr_program *p, const hr_model_t *m, int64_t batch) {
    hr_graph *g = &p->g;
    const hr_graph *mg = &m->g;
    int *map = hr_malloc(sizeof(int) * (size_t)(mg->nt ? mg->nt : 1));
    if (!map) return HR_ERR_OOM;
    hr_status st = HR_OK;
    for (int i = 0; i < mg->nt; i++)
        map[i] = mg->t[i].kind == HR_T_PARAM || mg->t[i].kind == HR_T_BUFFER ? i : -1;
    /* a model tensor's evaluation copy: made on first use */
    char nm[300];
#define EVAL_COPY(i)                                                                                            \
    do {                                                                                                        \
        const hr_tensor *src_ = &mg->t[(i)];                                                                    \
        snprintf(nm, sizeof nm, "eval.%s", src_->name);                                                         \
        int t_ = hr_graph_add_tensor(g, nm, src_->dtype, src_->shape, src_->batched, src_->kind, src_->layer);  \
        if (t_ < 0) { st = HR_ERR_OOM; goto done; }                                                             \
        if ((st = batch_one(&g->t[t_], batch)) != HR_OK) goto done;                                             \
        map[(i)] = t_;                                                                                          \
    } while (0)
    EVAL_COPY(m->input);
    for (int k = 0; k < mg->nn; k++) {
        hr_node n = mg->n[k];
        if (n.out[0] == m->loss) continue;
        for (int i = 0; i < n.nin; i++) {
            if (n.in[i] < 0) continue;
            if (map[n.in[i]] < 0) {
                st = hr_error_set(HR_ERR_INTERNAL, "evaluation pass: %s reads %s before it is made", hr_op_name(n.op),
                                  mg->t[n.in[i]].name);
                goto done;
            }
            n.in[i] = map[n.in[i]];
        }
        if (hr_op_descs[n.op]->train_outputs)
            for (; n.nout > 1; n.nout--) n.out[n.nout - 1] = -1;
        for (int i = 0; i < n.nout; i++)
            if (n.out[i] >= 0) {
                EVAL_COPY(n.out[i]);
                n.out[i] = map[mg->n[k].out[i]];
            }
        n.a.train = false;
        n.ws = -1;
        if (hr_graph_add_node(g, &n) < 0) {
            st = HR_ERR_OOM;
            goto done;
        }
    }
#undef EVAL_COPY
    p->eval_input = map[m->input];
    p->eval_output = map[m->output];
done:
    hr_free(map);
    return st;
}

/* The gradient of a slice of a tensor (plan/chunk.c) is the same slice of
 * that tensor's gradient, which later nodes have written. A slice that
 * needs its own gradient written by the slice's nodes (its input's: a run
 * starts at the model's input, which takes none) is not made. */
static hr_status slice_grad(hr_autodiff *ad, int y) {
    hr_graph *g = ad->g;
    int a = g->t[y].alias;
    if (a < 0 || ad->grad[y] >= 0 || ad->grad[a] < 0) return HR_OK;
    int ga = ad->grad[a];
    char nm[300];
    snprintf(nm, sizeof nm, "%s.grad", g->t[y].name);
    hr_tensor t = g->t[y];
    int gt = hr_graph_add_tensor(g, nm, g->t[ga].dtype, t.shape, t.batched, HR_T_ACT_GRAD, t.layer);
    if (gt < 0) return HR_ERR_OOM;
    g->t[gt].source = y;
    g->t[gt].alias = ga;
    g->t[gt].alias_offset = t.alias_offset / hr_dtype_size(t.dtype) * hr_dtype_size(g->t[ga].dtype);
    g->t[y].grad = gt;
    ad->grad[y] = gt;
    ad->written[gt] = true;
    return HR_OK;
}

static hr_status build_backward(hr_program *p) {
    hr_graph *g = &p->g;
    /* each tensor gets at most one gradient and each node at most one saved extra */
    int cap = 2 * g->nt + g->nn + 16;
    hr_autodiff ad = {g, hr_malloc(sizeof(int) * (size_t)cap), hr_calloc((size_t)cap, 1), hr_calloc((size_t)cap, 1),
                      hr_calloc((size_t)cap, 1), cap, -1};
    hr_status st = HR_OK;
    if (!ad.grad || !ad.needs_grad || !ad.written || !ad.read) {
        st = HR_ERR_OOM;
        goto done;
    }
    for (int i = 0; i < cap; i++) ad.grad[i] = -1;
    /* A gradient must reach a tensor when a trainable parameter is on its path. */
    for (int i = 0; i < g->nt; i++) ad.needs_grad[i] = g->t[i].kind == HR_T_PARAM && g->t[i].requires_grad;
    for (int s = 0; s < p->n_fwd; s++) {
        const hr_node *n = &g->n[s];
        unsigned through = hr_op_descs[n->op]->grad_inputs;
        bool any = false;
        for (int i = 0; i < n->nin; i++) {
            int x = n->in[i];
            if (x >= 0 && g->t[x].alias >= 0) ad.needs_grad[x] = ad.needs_grad[g->t[x].alias];
            if (x >= 0 && (!through || (through >> i & 1))) any |= ad.needs_grad[x];
        }
        if (any) ad.needs_grad[n->out[0]] = true;
        if (any && g->t[n->out[0]].alias >= 0) ad.needs_grad[g->t[n->out[0]].alias] = true;
    }
    for (int s = p->n_fwd - 1; s >= 0; s--) {
        hr_node n = g->n[s]; /* copy: emitting may move g->n */
        if (!ad.needs_grad[n.out[0]] || !hr_op_descs[n.op]->backward) continue;
        if ((st = slice_grad(&ad, n.out[0])) != HR_OK) goto done;
        ad.cur = s;
        if ((st = hr_op_descs[n.op]->backward(&ad, &n)) != HR_OK) goto done;
    }
done:
    hr_free(ad.grad);
    hr_free(ad.needs_grad);
    hr_free(ad.written);
    hr_free(ad.read);
    if (st == HR_ERR_OOM) hr_error_prefix("building the backward pass");
    return st;
}

static int add_state(hr_graph *g, int param, const char *suffix) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s.%s", g->t[param].name, suffix);
    int t = hr_graph_add_tensor(g, nm, HR_F32, g->t[param].shape, false, HR_T_OPTSTATE, g->t[param].layer);
    if (t >= 0) g->t[t].source = param;
    return t;
}

static hr_status build_update(hr_program *p) {
    hr_graph *g = &p->g;
    const hr_optim_t *o = &p->cfg.optim;
    int nt0 = g->nt;
    if (p->cfg.precision == HR_PREC_FP16) {
        p->found_inf = hr_graph_add_tensor(g, "found_inf", HR_F32, hr_shape_make(1, (int64_t[]){1}), false, HR_T_ACT, -1);
        if (p->found_inf < 0) return HR_ERR_OOM;
        bool first = true;
        for (int i = 0; i < nt0; i++) {
            if (g->t[i].kind != HR_T_PARAM || g->t[i].grad < 0) continue;
            hr_node n = hr_node_make(HR_OP_UNSCALE, g->t[i].layer);
            n.in[0] = g->t[i].grad;
            n.nin = 1;
            n.out[0] = p->found_inf;
            n.nout = 1;
            n.accum[0] = !first;
            first = false;
            if (hr_graph_add_node(g, &n) < 0) return HR_ERR_OOM;
        }
        if (first) p->found_inf = -1;
    }
    p->n_unscale_end = g->nn;
    if (o->clip_norm > 0) {
        p->sqnorm = hr_graph_add_tensor(g, "grad_sqnorm", HR_F32, hr_shape_make(1, (int64_t[]){1}), false, HR_T_ACT, -1);
        if (p->sqnorm < 0) return HR_ERR_OOM;
        bool first = true;
        for (int i = 0; i < nt0; i++) {
            if (g->t[i].kind != HR_T_PARAM || g->t[i].grad < 0) continue;
            hr_node n = hr_node_make(HR_OP_GRAD_SQNORM, g->t[i].layer);
            n.in[0] = g->t[i].grad;
            n.nin = 1;
            n.out[0] = p->sqnorm;
            n.nout = 1;
            n.accum[0] = !first;
            first = false;
            if (hr_graph_add_node(g, &n) < 0) return HR_ERR_OOM;
        }
        if (first) p->sqnorm = -1;
    }
    int index = 0;
    for (int i = 0; i < nt0; i++) {
        if (g->t[i].kind != HR_T_PARAM) continue;
        int k = index++;
        if (g->t[i].grad < 0) continue;
        hr_node n = hr_node_make(o->kind == HR_OPTIM_SGD ? HR_OP_SGD : HR_OP_ADAM, g->t[i].layer);
        n.a.index = k;
        n.in[0] = i;
        n.in[1] = g->t[i].grad;
        n.nin = 4;
        if (o->kind == HR_OPTIM_SGD) {
            if (o->momentum != 0 && (n.in[2] = add_state(g, i, "momentum_buffer")) < 0) return HR_ERR_OOM;
        } else {
            if ((n.in[2] = add_state(g, i, "exp_avg")) < 0) return HR_ERR_OOM;
            if ((n.in[3] = add_state(g, i, "exp_avg_sq")) < 0) return HR_ERR_OOM;
        }
        if (p->sqnorm >= 0) {
            n.in[4] = p->sqnorm;
            n.nin = 5;
        }
        if (hr_graph_add_node(g, &n) < 0) return HR_ERR_OOM;
    }
    return HR_OK;
}

static hr_status check_config(const hr_model_t *m, const hr_config_t *cfg) {
    if (!m) return hr_error_set(HR_ERR_INVALID_ARG, "compile: the model is NULL");
    if (m->broken)
        return hr_error_set(HR_ERR_INVALID_ARG, "compile: model '%s' failed to build; fix the first error it reported",
                            m->name);
    if (m->input < 0) return hr_error_set(HR_ERR_INVALID_ARG, "compile: model '%s' has no input", m->name);
    if (m->loss < 0)
        return hr_error_set(HR_ERR_INVALID_ARG, "compile: model '%s' has no loss; end it with a loss line", m->name);
    if (cfg->batch <= 0)
        return hr_error_set(HR_ERR_INVALID_ARG, "batch size must be at least 1, got %lld", (long long)cfg->batch);
    if (cfg->batch > HR_MAX_BATCH)
        return hr_error_set(HR_ERR_INVALID_ARG, "batch size %lld is beyond headroom's limit of 2^40 samples",
                            (long long)cfg->batch);
    if ((unsigned)cfg->precision > HR_PREC_FP16)
        return hr_error_set(HR_ERR_INVALID_ARG, "precision %d is not one of fp32, bf16, fp16", (int)cfg->precision);
    if (cfg->accumulate < 0 || cfg->accumulate > cfg->batch)
        return hr_error_set(HR_ERR_INVALID_ARG, "--accumulate %d must be between 1 and the batch (%lld)", cfg->accumulate,
                            (long long)cfg->batch);
    if (cfg->chunks < 0)
        return hr_error_set(HR_ERR_INVALID_ARG, "--chunks %d: slices of the batch are 1 or more (0: none)", cfg->chunks);
    if (cfg->chunks > HR_MAX_CHUNKS)
        return hr_error_set(HR_ERR_INVALID_ARG, "--chunks %d: at most %d slices (each adds its layers' nodes to the "
                            "step); a few hundred already leave a slice's activations a small part of the memory",
                            cfg->chunks, HR_MAX_CHUNKS);
    if (cfg->chunks > 1 && cfg->mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "--chunks is for training: inference keeps no activations to slice");
    if (cfg->accumulate > 1 && cfg->mode != HR_MODE_TRAIN)
        return hr_error_set(HR_ERR_INVALID_ARG, "gradient accumulation is for training; leave --accumulate out");
    if (cfg->accumulate > 1 && cfg->batch % cfg->accumulate)
        return hr_error_set(HR_ERR_INVALID_ARG,
                            "batch %lld is not a multiple of --accumulate %d: each of the %d micro-batches must hold the "
                            "same number of samples; try batch %lld or %lld",
                            (long long)cfg->batch, cfg->accumulate, cfg->accumulate,
                            (long long)(cfg->batch / cfg->accumulate * cfg->accumulate),
                            (long long)((cfg->batch / cfg->accumulate + 1) * cfg->accumulate));
    if (cfg->precision == HR_PREC_FP16 && (!(cfg->loss_scale >= 0) || cfg->loss_scale > 3e38f || cfg->scale_growth_interval < 0))
        return hr_error_set(HR_ERR_INVALID_ARG, "loss scale %g and growth interval %d: both must be >= 0 (0: GradScaler's "
                            "defaults, 2^16 and 2000)", cfg->loss_scale, cfg->scale_growth_interval);
    if (cfg->eval_batch < -1 || cfg->eval_batch > HR_MAX_BATCH)
        return hr_error_set(HR_ERR_INVALID_ARG,
                            "evaluation batch %lld is outside [-1, 2^40] (0: no evaluation pass; -1: the batch)",
                            (long long)cfg->eval_batch);
    const hr_optim_t *o = &cfg->optim;
    if (cfg->mode == HR_MODE_TRAIN) {
        if (!(o->lr >= 0) || !(o->eps > 0 || o->kind == HR_OPTIM_SGD) || !(o->weight_decay >= 0) ||
            !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->momentum >= 0) ||
            (o->nesterov && (o->momentum <= 0 || o->dampening != 0)))
            return hr_error_set(HR_ERR_INVALID_ARG,
                                "optimizer settings out of range: lr=%g betas=(%g, %g) eps=%g weight_decay=%g momentum=%g "
                                "(nesterov needs momentum > 0 and dampening 0)",
                                o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->momentum);
        if (o->warmup_steps < 0 || o->decay_steps < 0 || (o->decay_steps > 0 && o->decay_steps <= o->warmup_steps) ||
            !(o->min_lr >= 0 && o->min_lr <= o->lr))
            return hr_error_set(HR_ERR_INVALID_ARG,
                                "learning-rate schedule out of range: warmup %lld steps, decay to step %lld, min_lr %g "
                                "(warmup >= 0; decay 0 (none) or past the warmup; 0 <= min_lr <= lr %g)",
                                (long long)o->warmup_steps, (long long)o->decay_steps, o->min_lr, o->lr);
    }
    return HR_OK;
}

hr_status hr_program_build(const hr_model_t *m, const hr_config_t *cfg, hr_workspace_fn wsfn, void *ws_ctx,
                           hr_program *p) {
    memset(p, 0, sizeof *p);
    bool *sliced = NULL; /* per layer: runs in slices of the batch */
    hr_status st = check_config(m, cfg);
    if (st) return st;
    p->cfg = *cfg;
    p->sqnorm = p->found_inf = p->step_vars = p->staged = -1;
    p->eval_input = p->eval_output = -1;
    if ((st = hr_graph_copy(&p->g, &m->g)) != HR_OK) return hr_error_set(st, "compile: out of host memory copying the graph");
    p->input = m->input;
    p->label = m->label;
    p->loss = m->loss;
    p->output = m->output;
    /* the passes run on micro-batches of batch/accumulate samples */
    int64_t micro = hr_micro_batch(cfg);
    if ((st = add_batch(p, micro)) != HR_OK) goto fail;
    bool train = cfg->mode == HR_MODE_TRAIN;
    /* Inference drops the loss and keeps no statistics or masks. */
    for (int s = 0; s < p->g.nn; s++) {
        hr_node *n = &p->g.n[s];
        n->a.train = train;
        if (!train && hr_op_descs[n->op]->train_outputs)
            for (; n->nout > 1; n->nout--) n->out[n->nout - 1] = -1;
    }
    if (!train) {
        p->g.nn--; /* the loss node is last */
        p->loss = p->label = -1;
    }
    if ((st = hr_autocast(&p->g, 0, cfg->precision, "")) != HR_OK) goto fail;
    if ((st = hr_autocast_fold(&p->g, 0, p->output)) != HR_OK) goto fail;
    /* a language model's head and loss as one node, unless the logits are read after the step */
    if (train && !cfg->keep_output && (st = hr_linear_ce_fuse(&p->g, p->g.nn - 1)) != HR_OK) goto fail;
    /* an activation in the epilogue of the Linear before it (not in a batch cut in chunks) */
    bool act_fuse = train && cfg->chunks <= 1 && !hr_options_read().no_fuse_act;
    if (act_fuse) {
        bool *alone = named_recompute(p, cfg->recompute);
        st = hr_act_fuse(&p->g, p->output, alone);
        hr_free(alone);
        if (st) goto fail;
    }
    if (train && cfg->chunks > 1) {
        if (!(sliced = hr_calloc((size_t)p->g.nl + 1, 1))) {
            st = HR_ERR_OOM;
            goto fail;
        }
        if ((st = hr_chunk_apply(p, 0, p->input, p->output, cfg->chunks, &p->chunks, &p->chunk_samples, sliced)) != HR_OK)
            goto fail;
        for (int l = 0; l < p->g.nl; l++) p->chunk_layers += sliced[l];
        if (!p->chunks) {
            hr_free(sliced);
            sliced = NULL;
        }
    }
    p->n_fwd = p->g.nn;
    if (train) {
        if ((st = build_backward(p)) != HR_OK) goto fail;
        if (act_fuse && (st = hr_act_fuse_backward(&p->g, p->n_fwd)) != HR_OK) goto fail;
        if ((st = hr_autocast_fold_grads(&p->g, p->n_fwd)) != HR_OK) goto fail;
        /* the bias gradients of the Linears whose dy a norm's backward writes, into that node (not with
         * --chunks, whose pieces write parts of a tensor) */
        if (cfg->chunks <= 1 && !hr_options_read().no_fuse_bias &&
            (st = hr_norm_take_bias_grads(&p->g, p->n_fwd)) != HR_OK)
            goto fail;
        /* the residual Adds into the norms after them (not with recomputation,
         * whose clones copy the forward's nodes layer by layer) */
        bool named = cfg->recompute && *cfg->recompute && strcmp(cfg->recompute, "none");
        if (cfg->chunks <= 1 && !named && !hr_options_read().no_fuse_add &&
            (st = hr_norm_take_adds(&p->g, &p->n_fwd)) != HR_OK)
            goto fail;
        p->n_bwd_end = p->g.nn;
        if ((st = build_update(p)) != HR_OK) goto fail;
        /* the weights' half copies written by their updates, held across steps */
        int gone = 0;
        if ((st = hr_autocast_hold(&p->g, p->n_fwd, p->n_unscale_end, p->g.nn, &gone)) != HR_OK) goto fail;
        p->n_fwd -= gone, p->n_bwd_end -= gone, p->n_unscale_end -= gone;
    } else {
        p->n_bwd_end = p->n_unscale_end = p->g.nn;
    }
    p->n_step = p->g.nn;
    int64_t eb = cfg->eval_batch < 0 ? micro : cfg->eval_batch;
    if (train && eb > 0) {
        if ((st = build_eval(p, m, eb)) != HR_OK) goto fail;
        if ((st = hr_autocast(&p->g, p->n_step, cfg->precision, "eval.")) != HR_OK) goto fail;
        if ((st = hr_autocast_fold(&p->g, p->n_step, p->eval_output)) != HR_OK) goto fail;
        int k;
        int64_t c;
        if (p->chunks && (st = hr_chunk_apply(p, p->n_step, p->eval_input, p->eval_output, cfg->chunks, &k, &c, NULL)))
            goto fail;
    }
    /* Workspace: one tensor per node that asks for scratch. */
    for (int s = 0; s < p->g.nn; s++) {
        size_t ws = wsfn ? wsfn(ws_ctx, &p->g, &p->g.n[s]) : 0;
        if (!ws) continue;
        if (ws > ((size_t)1 << 61)) {
            st = hr_error_set(HR_ERR_INVALID_ARG, "%s needs %zu bytes of workspace; plan a smaller batch",
                              hr_op_name(p->g.n[s].op), ws);
            goto fail;
        }
        char nm[300];
        snprintf(nm, sizeof nm, "%s.workspace", hr_op_name(p->g.n[s].op));
        int layer = p->g.n[s].layer;
        if (layer >= 0) snprintf(nm, sizeof nm, "%s.%s.workspace", p->g.l[layer].name, hr_op_name(p->g.n[s].op));
        int t = hr_graph_add_tensor(&p->g, nm, HR_U8, hr_shape_make(1, (int64_t[]){(int64_t)ws}), false, HR_T_WORKSPACE, layer);
        if (t < 0) {
            st = HR_ERR_OOM;
            goto fail;
        }
        p->g.n[s].ws = t;
    }
    if ((st = recompute(p, cfg->recompute, sliced)) != HR_OK) goto fail;
    hr_free(sliced);
    sliced = NULL;
    if (train && cfg->device == HR_DEVICE_CUDA) {
        int64_t n = (int64_t)((sizeof(hr_step_vars) + 3) / 4);
        p->step_vars = hr_graph_add_tensor(&p->g, "step scalars", HR_F32, hr_shape_make(1, (int64_t[]){n}), false,
                                           HR_T_INPUT, -1);
        if (p->step_vars < 0) {
            st = HR_ERR_OOM;
            goto fail;
        }
        hr_staged l = hr_staged_layout(p);
        if (cfg->precision != HR_PREC_FP16 && l.input_bytes < HR_STAGED_INPUT_MAX) {
            p->staged = hr_graph_add_tensor(&p->g, "next batch", HR_U8, hr_shape_make(1, (int64_t[]){(int64_t)l.total}),
                                            false, HR_T_INPUT, -1);
            if (p->staged < 0) {
                st = HR_ERR_OOM;
                goto fail;
            }
        }
    }
    return HR_OK;
fail:
    hr_free(sliced);
    if (st == HR_ERR_OOM) hr_error_prefix("compile");
    hr_program_free(p);
    return st;
}
