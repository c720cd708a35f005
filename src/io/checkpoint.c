/* checkpoint.c — saves a session's named state (parameters, buffers, optimizer
 * state) as one safetensors file that PyTorch loads, and loads it back, checked. */
#include "io/io.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/internal.h"

#define OPTIM_PREFIX "optim."
#define NBT_SUFFIX ".num_batches_tracked"
#define MEAN_SUFFIX ".running_mean"

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The name a state tensor has in the file. */
static char *file_name(const hr_session_t *s, int i) {
    const char *name = hr_state_name(s, i);
    bool param = hr_state_is_param(s, i);
    char *out = hr_malloc(strlen(name) + sizeof OPTIM_PREFIX);
    if (out) sprintf(out, "%s%s", param ? "" : OPTIM_PREFIX, name);
    return out;
}

static void state_dims(const hr_session_t *s, int i, int *ndim, int64_t *dims) {
    *ndim = hr_state_ndim(s, i);
    if (*ndim > HR_ST_MAX_DIMS) *ndim = HR_ST_MAX_DIMS;
    for (int d = 0; d < *ndim; d++) dims[d] = hr_state_dim(s, i, d);
}

void hr_checkpoint_fingerprint(const hr_session_t *s, char *buf, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
    int count = 0;
    long long values = 0;
    for (int i = 0; i < hr_state_count(s); i++) {
        if (!hr_state_is_param(s, i)) continue;
        char part[64];
        int ndim;
        int64_t dims[HR_ST_MAX_DIMS];
        state_dims(s, i, &ndim, dims);
        long long numel = 1;
        for (const char *c = hr_state_name(s, i); *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        for (int d = 0; d < ndim; d++) {
            int k = snprintf(part, sizeof part, "%c%lld", d ? ',' : ':', (long long)dims[d]);
            for (int j = 0; j < k; j++) h = (h ^ (unsigned char)part[j]) * 0x100000001b3ull;
            numel *= dims[d];
        }
        h = (h ^ ';') * 0x100000001b3ull;
        count++;
        values += numel;
    }
    snprintf(buf, n, "%d tensors, %lld values, fnv1a64 %016llx", count, values, (unsigned long long)h);
}

/* ---- saving ------------------------------------------------------------------ */
typedef struct {
    hr_session_t *s;
    int n_state;
    const int *alias; /* entries past the state: the state each repeats (a tied weight's second name) */
} save_ctx;

static hr_status fill_state(void *ctx, int i, void *dst) {
    save_ctx *c = ctx;
    /* only state entries and aliases have no data pointer */
    return hr_state_read(c->s, i < c->n_state ? i : c->alias[i - c->n_state], dst);
}

/* A layer whose weight is another's (weight tying): its own name for it,
 * "lm_head.weight", and the state that holds it. The k-th such layer; false
 * past the last. */
static bool tied_name(const hr_session_t *s, int k, char *name, size_t n, int *state) {
    const hr_graph *g = &hr_session_program(s)->g;
    for (int L = 0; L < g->nl; L++) {
        if (!g->l[L].tied || k--) continue;
        for (int j = 0; j < g->nn; j++)
            if (g->n[j].layer == L && (g->n[j].op == HR_OP_LINEAR || g->n[j].op == HR_OP_LINEAR_CE)) {
                int w = g->n[j].in[1];
                while (w >= 0 && g->t[w].kind == HR_T_WCOPY) w = g->t[w].source; /* under autocast: its half copy */
                snprintf(name, n, "%s.weight", g->l[L].name);
                *state = w >= 0 ? hr_state_find(s, g->t[w].name) : -1;
                return *state >= 0;
            }
    }
    return false;
}

/* Is name a tied layer's own name for its weight? */
static bool is_tied_name(const hr_session_t *s, const char *name) {
    char nm[320];
    int st;
    for (int k = 0; tied_name(s, k, nm, sizeof nm, &st); k++)
        if (!strcmp(nm, name)) return true;
    return false;
}

/* Is there a state tensor with this exact name? */
static bool has_state(const hr_session_t *s, const char *name) { return hr_state_find(s, name) >= 0; }

/* Everything a checkpoint file is made of, owned here: the entries (their
 * names and shapes, the tied weights' second names, num_batches_tracked) and
 * the metadata's strings. data: the state's bytes copied to the host (the
 * background writer's), or NULL when the writer reads each tensor from the
 * session as it goes. */
typedef struct {
    hr_st_entry *t;
    char **names;
    int64_t *dims;
    int *alias;
    int n_state, m, n_names, n_meta;
    int64_t step;
    hr_ckpt_meta meta;
    char fp[96], epoch[24], batch[24], steps[24], seed[24], accum[24], bsize[24], scale[48], growth[24], skipped[24];
    char imean[32], istd[32], precision[16];
    const char *keys[16], *values[16];
    char *path;
    unsigned char *data;
    size_t data_bytes;
} ckpt_job;

static void job_free(ckpt_job *j) {
    if (j->names)
        for (int i = 0; i < j->n_names; i++) hr_free(j->names[i]);
    hr_free(j->names);
    hr_free(j->alias);
    hr_free(j->t);
    hr_free(j->dims);
    hr_free(j->path);
    memset(j, 0, sizeof *j);
}

/* The job of saving session s now (the data left to the caller). */
static hr_status job_build(hr_session_t *s, const char *path, const hr_ckpt_meta *meta, ckpt_job *j) {
    int n = hr_state_count(s), extra = 0, ntied = 0, tstate;
    char tname[320];
    memset(j, 0, sizeof *j);
    /* PyTorch keeps num_batches_tracked beside running statistics; write it (as the step
     * count) so load_state_dict(strict=True) finds every key it expects. A tied
     * weight is written under each layer's name, as PyTorch's state_dict has it. */
    for (int i = 0; i < n; i++) {
        const char *name = hr_state_name(s, i);
        if (hr_state_is_param(s, i) && ends_with(name, MEAN_SUFFIX)) extra++;
    }
    while (tied_name(s, ntied, tname, sizeof tname, &tstate)) ntied++;
    j->n_state = n;
    j->n_names = n + ntied + extra;
    j->t = hr_calloc((size_t)(n + ntied + extra + 1), sizeof *j->t);
    j->names = hr_calloc((size_t)(n + ntied + extra + 1), sizeof *j->names);
    j->dims = hr_calloc((size_t)(n + 1) * HR_ST_MAX_DIMS, sizeof *j->dims);
    j->alias = hr_calloc((size_t)ntied + 1, sizeof *j->alias);
    j->path = hr_malloc(strlen(path) + 1);
    if (!j->t || !j->names || !j->dims || !j->alias || !j->path) return HR_ERR_OOM;
    strcpy(j->path, path);
    if (meta) j->meta = *meta;
    hr_st_entry *t = j->t;
    char **names = j->names;
    int64_t *dims = j->dims;
    int m = 0;
    j->step = hr_step_count(s);
    for (int i = 0; i < n; i++, m++) {
        if (!(names[m] = file_name(s, i))) return HR_ERR_OOM;
        t[m].name = names[m];
        t[m].dtype = "F32";
        t[m].dims = dims + (size_t)i * HR_ST_MAX_DIMS;
        state_dims(s, i, &t[m].ndim, dims + (size_t)i * HR_ST_MAX_DIMS);
    }
    for (int k = 0; k < ntied; k++, m++) { /* the tied weights' second names: filled from their state */
        tied_name(s, k, tname, sizeof tname, &tstate);
        if (!(names[m] = hr_malloc(strlen(tname) + 1))) return HR_ERR_OOM;
        strcpy(names[m], tname);
        t[m] = t[tstate];
        t[m].name = names[m];
        j->alias[k] = tstate;
    }
    for (int i = 0; i < n; i++) {
        const char *name = hr_state_name(s, i);
        if (!hr_state_is_param(s, i) || !ends_with(name, MEAN_SUFFIX)) continue;
        size_t stem = strlen(name) - strlen(MEAN_SUFFIX);
        if (!(names[m] = hr_malloc(stem + sizeof NBT_SUFFIX))) return HR_ERR_OOM;
        sprintf(names[m], "%.*s%s", (int)stem, name, NBT_SUFFIX);
        if (has_state(s, names[m])) { hr_free(names[m]); names[m] = NULL; continue; }
        t[m] = (hr_st_entry){names[m], "I64", 0, NULL, &j->step};
        m++;
    }
    j->m = m;
    hr_checkpoint_fingerprint(s, j->fp, sizeof j->fp);
    snprintf(j->epoch, sizeof j->epoch, "%lld", (long long)j->meta.epoch);
    snprintf(j->batch, sizeof j->batch, "%lld", (long long)j->meta.batch);
    snprintf(j->steps, sizeof j->steps, "%lld", (long long)j->step);
    snprintf(j->seed, sizeof j->seed, "%llu", (unsigned long long)j->meta.seed);
    /* how the run trains: precision never changes silently on resume, and
     * fp16's loss scaler continues where it was ("%a": the float exactly) */
    const hr_config_t *cfg = &hr_session_program(s)->cfg;
    float sc;
    int64_t gr, sk;
    hr_loss_scale(s, &sc, &gr, &sk);
    snprintf(j->accum, sizeof j->accum, "%d", cfg->accumulate > 1 ? cfg->accumulate : 1);
    snprintf(j->bsize, sizeof j->bsize, "%lld", (long long)(cfg->mode == HR_MODE_TRAIN ? cfg->batch : 0));
    snprintf(j->scale, sizeof j->scale, "%a", (double)sc);
    snprintf(j->growth, sizeof j->growth, "%lld", (long long)gr);
    snprintf(j->skipped, sizeof j->skipped, "%lld", (long long)sk);
    snprintf(j->precision, sizeof j->precision, "%s", hr_precision_name(cfg->precision));
    const char *keys[] = {"format", "headroom.model", "headroom.epoch", "headroom.batch",
                          "headroom.step", "headroom.seed", "headroom.fingerprint", "headroom.precision",
                          "headroom.accumulate", "headroom.batch_size", "headroom.loss_scale",
                          "headroom.scale_growth", "headroom.steps_skipped"};
    const char *values[] = {"pt", j->meta.model, j->epoch, j->batch, j->steps, j->seed, j->fp,
                            j->precision, j->accum, j->bsize, j->scale, j->growth, j->skipped};
    int n_meta = cfg->precision == HR_PREC_FP16 ? 13 : 10;
    memcpy(j->keys, keys, sizeof keys);
    memcpy(j->values, values, sizeof values);
    /* the input's normalisation, where the caller says it ("%.9g": the float exactly) */
    if (j->meta.input[0]) j->keys[n_meta] = "headroom.input", j->values[n_meta++] = j->meta.input;
    if (j->meta.input_std > 0) {
        snprintf(j->imean, sizeof j->imean, "%.9g", (double)j->meta.input_mean);
        snprintf(j->istd, sizeof j->istd, "%.9g", (double)j->meta.input_std);
        j->keys[n_meta] = "headroom.input_mean", j->values[n_meta++] = j->imean;
        j->keys[n_meta] = "headroom.input_std", j->values[n_meta++] = j->istd;
    }
    j->n_meta = n_meta;
    return HR_OK;
}

hr_status hr_checkpoint_save(hr_session_t *s, const char *path, const hr_ckpt_meta *meta) {
    ckpt_job j;
    hr_status st = job_build(s, path, meta, &j);
    if (st == HR_OK) {
        save_ctx ctx = {s, j.n_state, j.alias};
        st = hr_safetensors_write(path, j.t, j.m, j.keys, j.values, j.n_meta, fill_state, &ctx);
    }
    if (st != HR_OK) hr_error_prefix("saving checkpoint %s", path);
    job_free(&j);
    return st;
}

/* ---- saving in the background -------------------------------------------------
 * The state is copied to host memory while the caller waits (a consistent
 * snapshot: the next step may change it), then a thread writes the file.
 * The copy's buffer is kept for the next save. */
struct hr_ckpt_writer {
    pthread_t thread;
    bool running;
    ckpt_job job;
    unsigned char *buf;
    size_t cap;
    hr_status st;     /* the last write's */
    char err[1024];
};

/* state tensor i's slot in the copy: its floats, 64-byte aligned */
static size_t slot_bytes(const hr_session_t *s, int i) {
    size_t k = sizeof(float);
    for (int d = 0; d < hr_state_ndim(s, i); d++) k *= (size_t)hr_state_dim(s, i, d);
    return hr_align_up(k, 64);
}

size_t hr_checkpoint_state_bytes(const hr_session_t *s) {
    size_t b = 0;
    for (int i = 0; i < hr_state_count(s); i++) b += slot_bytes(s, i);
    return b;
}

hr_ckpt_writer *hr_ckpt_writer_new(void) { return hr_calloc(1, sizeof(hr_ckpt_writer)); }

static void *write_job(void *arg) {
    hr_ckpt_writer *w = arg;
    ckpt_job *j = &w->job;
    w->st = hr_safetensors_write(j->path, j->t, j->m, j->keys, j->values, j->n_meta, NULL, NULL);
    if (w->st != HR_OK) snprintf(w->err, sizeof w->err, "saving checkpoint %s: %s", j->path, hr_last_error());
    return NULL;
}

hr_status hr_ckpt_writer_wait(hr_ckpt_writer *w) {
    if (!w || !w->running) return HR_OK;
    pthread_join(w->thread, NULL);
    w->running = false;
    job_free(&w->job);
    return w->st == HR_OK ? HR_OK : hr_error_set(w->st, "%s", w->err);
}

hr_status hr_ckpt_writer_save(hr_ckpt_writer *w, hr_session_t *s, const char *path, const hr_ckpt_meta *meta) {
    if (!w) return hr_checkpoint_save(s, path, meta);
    hr_status st = hr_ckpt_writer_wait(w); /* one file at a time, in order; the last one's error first */
    if (st != HR_OK) return st;
    size_t need = hr_checkpoint_state_bytes(s);
    if (need > w->cap) {
        unsigned char *b = hr_malloc(need ? need : 1);
        if (!b) return hr_checkpoint_save(s, path, meta); /* no room for a copy: the file is written now */
        hr_free(w->buf);
        w->buf = b;
        w->cap = need;
    }
    if ((st = job_build(s, path, meta, &w->job)) != HR_OK) {
        job_free(&w->job);
        hr_error_prefix("saving checkpoint %s", path);
        return st;
    }
    ckpt_job *j = &w->job;
    size_t off = 0;
    for (int i = 0; i < j->n_state && st == HR_OK; i++) { /* the snapshot */
        st = hr_state_read(s, i, (float *)(w->buf + off));
        j->t[i].data = w->buf + off;
        off += slot_bytes(s, i);
    }
    for (int k = 0; k < j->m - j->n_state && st == HR_OK; k++) /* tied names and num_batches_tracked */
        if (!j->t[j->n_state + k].data) j->t[j->n_state + k].data = j->t[j->alias[k]].data;
    if (st == HR_OK && pthread_create(&w->thread, NULL, write_job, w) != 0)
        st = hr_error_set(HR_ERR_IO, "could not start a thread to write the checkpoint");
    if (st != HR_OK) {
        job_free(&w->job);
        hr_error_prefix("saving checkpoint %s", path);
        return st;
    }
    w->running = true;
    return HR_OK;
}

void hr_ckpt_writer_free(hr_ckpt_writer *w) {
    if (!w) return;
    hr_ckpt_writer_wait(w);
    hr_free(w->buf);
    hr_free(w);
}

/* ---- loading ------------------------------------------------------------------ */
static hr_status meta_int(const hr_safetensors_t *f, const char *key, int64_t *out) {
    const char *v = hr_safetensors_meta(f, key);
    if (!v) return hr_error_set(HR_ERR_FORMAT, "checkpoint %s has no metadata '%s'; it is damaged",
                                hr_safetensors_path(f), key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno)
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata %s = '%s' is not an integer; it is damaged",
                            hr_safetensors_path(f), key, v);
    /* epochs, batches and steps count up from 0: refused here, before the
     * load writes anything into the session */
    if (x < 0)
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata %s = %lld is negative; it is damaged",
                            hr_safetensors_path(f), key, x);
    *out = x;
    return HR_OK;
}

/* Says how the file and the session differ, for the fingerprint message. */
static void first_difference(const hr_session_t *s, const hr_safetensors_t *f, char *buf, size_t n) {
    char a[120], b[120];
    snprintf(buf, n, "their parameters differ");
    for (int i = 0; i < hr_state_count(s); i++) {
        if (!hr_state_is_param(s, i)) continue;
        const char *name = hr_state_name(s, i);
        int ndim;
        int64_t dims[HR_ST_MAX_DIMS];
        state_dims(s, i, &ndim, dims);
        const hr_st_tensor *t = hr_safetensors_find(f, name);
        hr_shape here = hr_shape_make(ndim < HR_MAX_DIMS ? ndim : HR_MAX_DIMS, dims);
        if (!t) {
            snprintf(buf, n, "this model has '%s' %s, the checkpoint has not", name, hr_shape_str(&here, a, sizeof a));
            return;
        }
        bool same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = t->dims[d] == dims[d];
        if (!same) {
            hr_shape there = hr_shape_make(t->ndim < HR_MAX_DIMS ? t->ndim : HR_MAX_DIMS, t->dims);
            snprintf(buf, n, "'%s' is %s in the checkpoint, %s here", name, hr_shape_str(&there, a, sizeof a),
                     hr_shape_str(&here, b, sizeof b));
            return;
        }
    }
    for (int i = 0; i < hr_safetensors_count(f); i++) {
        const char *name = hr_safetensors_at(f, i)->name;
        if (strncmp(name, OPTIM_PREFIX, strlen(OPTIM_PREFIX)) && !ends_with(name, NBT_SUFFIX) && !has_state(s, name)) {
            snprintf(buf, n, "the checkpoint has '%s', this model has not", name);
            return;
        }
    }
}

/* Is this file tensor one that the session has no use for? A session without
 * optimizer state (inference, plain SGD) takes the weights and leaves the
 * file's optimizer state aside. */
static bool unexpected(const hr_session_t *s, const char *name, bool session_has_optim) {
    if (ends_with(name, NBT_SUFFIX)) return false; /* PyTorch's counter beside running statistics */
    if (is_tied_name(s, name)) return false;       /* a tied weight's second name: the same values */
    if (!strncmp(name, OPTIM_PREFIX, strlen(OPTIM_PREFIX))) {
        if (!session_has_optim) return false;
        int i = hr_state_find(s, name + strlen(OPTIM_PREFIX));
        return i < 0 || hr_state_is_param(s, i);
    }
    int i = hr_state_find(s, name);
    return i < 0 || !hr_state_is_param(s, i);
}

/* Finds every state tensor in the file (found[i], NULL where the file need
 * not have it) and checks dtypes, shapes and that nothing is left over. */
static hr_status check_file(hr_session_t *s, hr_safetensors_t *f, const hr_st_tensor **found, int64_t *biggest,
                            const char *model) {
    const char *path = hr_safetensors_path(f);
    int n = hr_state_count(s), optim_found = 0, optim_total = 0;
    for (int i = 0; i < n; i++) {
        char *name = file_name(s, i);
        if (!name) return HR_ERR_OOM;
        found[i] = hr_safetensors_find(f, name);
        hr_free(name);
        optim_total += !hr_state_is_param(s, i);
        optim_found += !hr_state_is_param(s, i) && found[i];
    }
    /* All of the session's optimizer state, or none (plain weights, or a
     * checkpoint of an inference session): then it stays as it is. */
    bool load_optim = optim_found > 0;
    for (int i = 0; i < n; i++) {
        bool param = hr_state_is_param(s, i);
        if (!param && !load_optim) continue;
        int ndim;
        int64_t dims[HR_ST_MAX_DIMS], numel = 1;
        state_dims(s, i, &ndim, dims);
        for (int d = 0; d < ndim; d++) numel *= dims[d];
        if (numel > *biggest) *biggest = numel;
        char *name = file_name(s, i);
        if (!name) return HR_ERR_OOM;
        found[i] = hr_safetensors_expect(f, name, NULL, ndim, dims);
        hr_free(name);
        if (!found[i] && !param)
            return hr_error_prefix("optimizer state in checkpoint %s does not match this session's optimizer "
                                   "(was it saved with another one?)", path);
        if (!found[i]) return hr_error_prefix("cannot load %s into model '%s'", path, model);
    }
    for (int i = 0; i < hr_safetensors_count(f); i++) {
        const char *name = hr_safetensors_at(f, i)->name;
        if (!unexpected(s, name, optim_total > 0)) continue;
        if (!strncmp(name, OPTIM_PREFIX, strlen(OPTIM_PREFIX)))
            return hr_error_set(HR_ERR_FORMAT, "optimizer state in checkpoint %s does not match this session's "
                                "optimizer: it holds '%s' (was it saved with another one?)", path, name);
        return hr_error_set(HR_ERR_FORMAT, "%s holds tensor '%s' that model '%s' does not have; it was written "
                            "for another model", path, name, model);
    }
    return HR_OK;
}

/* How the run trained: absent from files written before mixed precision,
 * which trained in fp32 without accumulation. */
static hr_status read_training(hr_safetensors_t *f, hr_ckpt_meta *m) {
    const char *path = hr_safetensors_path(f), *v;
    hr_status st;
    m->precision = HR_PREC_FP32;
    m->accumulate = 1;
    if ((v = hr_safetensors_meta(f, "headroom.precision"))) {
        hr_precision p = HR_PREC_FP32;
        while (p <= HR_PREC_FP16 && strcmp(v, hr_precision_name(p))) p++;
        if (p > HR_PREC_FP16)
            return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata headroom.precision = '%s' is not fp32, bf16 "
                                "or fp16; it is damaged", path, v);
        m->precision = p;
    }
    if (hr_safetensors_meta(f, "headroom.accumulate")) {
        if ((st = meta_int(f, "headroom.accumulate", &m->accumulate)) != HR_OK) return st;
        if (m->accumulate < 1)
            return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata headroom.accumulate = 0; it is damaged", path);
    }
    if (hr_safetensors_meta(f, "headroom.batch_size") && (st = meta_int(f, "headroom.batch_size", &m->batch_size)))
        return st;
    if (m->precision != HR_PREC_FP16) return HR_OK;
    /* fp16: the scaler's state is part of the run */
    if ((st = meta_int(f, "headroom.scale_growth", &m->scale_growth)) != HR_OK) return st;
    if ((st = meta_int(f, "headroom.steps_skipped", &m->steps_skipped)) != HR_OK) return st;
    if (!(v = hr_safetensors_meta(f, "headroom.loss_scale")))
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s of an fp16 run has no metadata 'headroom.loss_scale'; it is "
                            "damaged", path);
    char *end;
    double d = strtod(v, &end);
    float sc = (float)d;
    if (!*v || *end || !(sc > 0) || !isfinite(sc) || (double)sc != d)
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata headroom.loss_scale = '%s' is not a finite "
                            "positive float (written as C's %%a); it is damaged", path, v);
    m->loss_scale = sc;
    return HR_OK;
}

/* The input's normalisation: absent from files written before these keys
 * and from runs on synthetic data; a mean needs its std and the reverse. */
static hr_status read_input(hr_safetensors_t *f, hr_ckpt_meta *m) {
    const char *path = hr_safetensors_path(f), *v;
    if ((v = hr_safetensors_meta(f, "headroom.input"))) snprintf(m->input, sizeof m->input, "%s", v);
    const char *mean = hr_safetensors_meta(f, "headroom.input_mean");
    const char *std = hr_safetensors_meta(f, "headroom.input_std");
    if (!mean && !std) return HR_OK;
    if (!mean || !std)
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s has metadata '%s' but not '%s'; it is damaged", path,
                            mean ? "headroom.input_mean" : "headroom.input_std",
                            mean ? "headroom.input_std" : "headroom.input_mean");
    char *end1, *end2;
    float mu = strtof(mean, &end1), sd = strtof(std, &end2);
    if (!*mean || *end1 || !isfinite(mu) || !*std || *end2 || !isfinite(sd) || !(sd > 0))
        return hr_error_set(HR_ERR_FORMAT, "checkpoint %s: metadata headroom.input_mean = '%s', headroom.input_std = "
                            "'%s' are not finite floats with std > 0; it is damaged", path, mean, std);
    m->input_mean = mu, m->input_std = sd;
    return HR_OK;
}

static hr_status read_meta(hr_safetensors_t *f, hr_ckpt_meta *out) {
    hr_ckpt_meta m = {0};
    const char *v;
    hr_status st;
    if ((st = meta_int(f, "headroom.epoch", &m.epoch)) != HR_OK) return st;
    if ((st = meta_int(f, "headroom.batch", &m.batch)) != HR_OK) return st;
    if ((st = meta_int(f, "headroom.step", &m.step)) != HR_OK) return st;
    if ((st = read_training(f, &m)) != HR_OK) return st;
    if ((st = read_input(f, &m)) != HR_OK) return st;
    if ((v = hr_safetensors_meta(f, "headroom.seed"))) m.seed = strtoull(v, NULL, 10);
    if ((v = hr_safetensors_meta(f, "headroom.model"))) snprintf(m.model, sizeof m.model, "%s", v);
    if ((v = hr_safetensors_meta(f, "headroom.fingerprint"))) snprintf(m.fingerprint, sizeof m.fingerprint, "%s", v);
    *out = m;
    return HR_OK;
}

hr_status hr_checkpoint_peek(const char *path, hr_ckpt_meta *meta) {
    hr_safetensors_t *f = hr_safetensors_open(path);
    if (!f) return hr_error_prefix("reading checkpoint");
    hr_ckpt_meta got = {.precision = HR_PREC_FP32, .accumulate = 1};
    hr_status st = hr_safetensors_meta(f, "headroom.fingerprint") ? read_meta(f, &got) : HR_OK;
    hr_safetensors_free(f);
    if (!st) *meta = got;
    return st;
}

hr_status hr_checkpoint_load(hr_session_t *s, const char *path, hr_ckpt_meta *meta) {
    char model[128];
    snprintf(model, sizeof model, "%s", meta && meta->model[0] ? meta->model : "(this session)");
    hr_safetensors_t *f = hr_safetensors_open(path);
    if (!f) return hr_error_prefix("loading checkpoint");
    hr_ckpt_meta got = {.precision = HR_PREC_FP32, .accumulate = 1}; /* a plain weights file says nothing */
    float *buf = NULL;
    const hr_st_tensor **found = NULL;
    hr_status st = HR_OK;
    const char *file_fp = hr_safetensors_meta(f, "headroom.fingerprint");
    bool ours = file_fp != NULL;
    if (ours) {
        if ((st = read_meta(f, &got)) != HR_OK) goto done;
        char fp[96], diff[320];
        hr_checkpoint_fingerprint(s, fp, sizeof fp);
        if (strcmp(fp, file_fp) != 0) {
            first_difference(s, f, diff, sizeof diff);
            st = hr_error_set(HR_ERR_FORMAT, "checkpoint %s was written for model '%s' (%s) but this is model '%s' "
                              "(%s): %s. Load it with the model file it was trained with, or train afresh",
                              path, got.model, file_fp, model, fp, diff);
            goto done;
        }
    }
    int64_t biggest = 1;
    if (!(found = hr_calloc((size_t)hr_state_count(s) + 1, sizeof *found))) { st = HR_ERR_OOM; goto done; }
    if ((st = check_file(s, f, found, &biggest, model)) != HR_OK) goto done;
    if (!(buf = hr_malloc((size_t)biggest * sizeof(float)))) { st = HR_ERR_OOM; goto done; }
    /* Every value must be finite: a NaN or inf saved by a diverged run would
     * only come back as a NaN loss steps later. Read once to check, before
     * anything is written, so a refused file leaves the session as it was. */
    for (int i = 0; i < hr_state_count(s) && st == HR_OK; i++) {
        if (!found[i]) continue;
        if ((st = hr_safetensors_read_f32(f, found[i], buf)) != HR_OK) break;
        for (int64_t k = 0; k < found[i]->numel; k++)
            if (!isfinite(buf[k])) {
                st = hr_error_set(HR_ERR_FORMAT, "checkpoint %s: tensor '%s' holds %s at element %lld; it was saved "
                                  "from a run that diverged (or is damaged): resume from an earlier checkpoint",
                                  path, hr_state_name(s, i), isnan(buf[k]) ? "NaN" : "an infinity", (long long)k);
                break;
            }
    }
    if (st != HR_OK) goto done;
    /* Everything was checked and allocated: only I/O or the device can fail now. */
    for (int i = 0; i < hr_state_count(s) && st == HR_OK; i++) {
        if (!found[i]) continue;
        st = hr_safetensors_read_f32(f, found[i], buf);
        if (st == HR_OK) st = hr_state_write(s, i, buf);
        if (st != HR_OK)
            hr_error_prefix("loading %s stopped at tensor '%s', leaving the session's state partly loaded; "
                            "load again before training", path, hr_state_name(s, i));
    }
    if (st == HR_OK && ours) st = hr_set_step_count(s, got.step);
    if (st == HR_OK && ours && got.precision == HR_PREC_FP16 && hr_session_program(s)->cfg.precision == HR_PREC_FP16)
        st = hr_set_loss_scale(s, got.loss_scale, got.scale_growth, got.steps_skipped);
    if (st == HR_OK && meta) *meta = got;
done:
    hr_free(found);
    hr_free(buf);
    hr_safetensors_free(f);
    return st;
}
