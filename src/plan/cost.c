/* cost.c — the cost model: per-node times by key (measured, cached on disk)
 * and roofline estimates from the ops' work counts, summed into step times. */
#include "plan/cost.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- device peaks ---------------------------------------------------------------
 * Only the estimates of unmeasured nodes use these; measured times win.
 * f32: non-tensor FP32 (TF32 off, as PyTorch's default); half: dense BF16/FP16
 * tensor-core throughput (without sparsity); bw: memory bandwidth; launch: a
 * kernel launch and its tail; sync: a step's host round trip (the loss read
 * back); upload: host-to-arena bandwidth for the batch. */
typedef struct {
    const char *match; /* a substring of the device's name */
    double f32, half, bw, launch, sync, upload;
} hr_peaks;

/* NVIDIA's datasheets: H200 SXM (67 TFLOP/s FP32, 989 dense BF16, 4.8 TB/s
 * HBM3e); H100 NVL (60, 835, 3.9 TB/s); H100 PCIe (51, 756, 2.0 TB/s); H100
 * SXM5 (67, 989, 3.35 TB/s HBM3); A100 SXM 80GB (19.5, 312, 2.0 TB/s). Any
 * other GPU: a modest guess. Launch ~5 us (a CUDA launch and its tail). */
static const hr_peaks gpu_peaks[] = {
    {"H200", 67e12, 989e12, 4.8e12, 5e-6, 20e-6, 10e9},
    {"H100 NVL", 60e12, 835e12, 3.9e12, 5e-6, 20e-6, 10e9},
    {"H100 PCIe", 51e12, 756e12, 2.0e12, 5e-6, 20e-6, 10e9},
    {"H100", 67e12, 989e12, 3.35e12, 5e-6, 20e-6, 10e9},
    {"A100", 19.5e12, 312e12, 2.0e12, 5e-6, 20e-6, 10e9},
    {"", 10e12, 100e12, 0.8e12, 5e-6, 20e-6, 5e9},
};
/* The CPU: a modest default for two cores (50 GFLOP/s, well under two
 * AVX2-FMA cores' peak of ~100 each; 10 GB/s, what one core streams); half
 * types run through F32 copies, so no faster. */
static const hr_peaks cpu_peaks = {"cpu", 50e9, 50e9, 10e9, 1e-6, 0, 10e9};

/* ---- the table of times ------------------------------------------------------------ */
typedef struct {
    char *key;          /* NULL: empty slot */
    uint64_t hash, cls; /* cls: the hash of the key's first word (op:type) */
    double sec, flops, bytes;
    bool tensor;        /* a matrix product in a half type (the estimate uses the half peak) */
    int fresh;          /* measurements this model recorded (0: from the cache) */
} hr_cost_entry;

struct hr_cost_model {
    hr_device kind;     /* HR_DEVICE_CPU or HR_DEVICE_CUDA */
    hr_peaks pk;
    char *dir, *path;   /* the cache; NULL when there is no place for one */
    hr_cost_entry *e;
    size_t cap, count;  /* cap: a power of two, at least twice count */
    bool warned;        /* about the file we read: once is enough */
};

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static uint64_t class_of(const char *key) { return fnv(key, strcspn(key, " ")); }

static hr_cost_entry *find(const hr_cost_model *cm, const char *key, uint64_t h) {
    if (!cm->cap) return NULL;
    for (size_t i = h & (cm->cap - 1);; i = (i + 1) & (cm->cap - 1)) {
        hr_cost_entry *e = &cm->e[i];
        if (!e->key) return NULL;
        if (e->hash == h && !strcmp(e->key, key)) return e;
    }
}

static hr_status grow(hr_cost_model *cm) {
    size_t cap = cm->cap ? cm->cap * 2 : 256;
    hr_cost_entry *e = hr_calloc(cap, sizeof *e);
    if (!e) return hr_error_prefix("cost model: %zu entries", cm->count);
    for (size_t i = 0; i < cm->cap; i++) {
        if (!cm->e[i].key) continue;
        size_t j = cm->e[i].hash & (cap - 1);
        while (e[j].key) j = (j + 1) & (cap - 1);
        e[j] = cm->e[i];
    }
    hr_free(cm->e);
    cm->e = e;
    cm->cap = cap;
    return HR_OK;
}

/* The entry of key, made (empty: sec < 0) if absent; NULL on OOM. */
static hr_cost_entry *insert(hr_cost_model *cm, const char *key) {
    uint64_t h = fnv(key, strlen(key));
    hr_cost_entry *e = find(cm, key, h);
    if (e) return e;
    if (2 * (cm->count + 1) > cm->cap && grow(cm) != HR_OK) return NULL;
    char *k = hr_strdup(key);
    if (!k) return NULL;
    size_t i = h & (cm->cap - 1);
    while (cm->e[i].key) i = (i + 1) & (cm->cap - 1);
    cm->e[i] = (hr_cost_entry){.key = k, .hash = h, .cls = class_of(key), .sec = -1};
    cm->count++;
    return &cm->e[i];
}

/* ---- keys ---------------------------------------------------------------------------- */
#define KEY_MAX 2048

static size_t put(char *b, size_t n, size_t k, const char *fmt, ...) HR_PRINTF(4, 5);
static size_t put(char *b, size_t n, size_t k, const char *fmt, ...) {
    if (k >= n) return k;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b + k, n - k, fmt, ap);
    va_end(ap);
    return w < 0 ? k : k + (size_t)w;
}

static size_t put_tensor(char *b, size_t n, size_t k, const hr_graph *g, int t) {
    if (t < 0) return put(b, n, k, " -");
    const hr_tensor *x = &g->t[t];
    k = put(b, n, k, " %s[", hr_dtype_name(x->dtype));
    for (int d = 0; d < x->shape.ndim; d++) k = put(b, n, k, d ? ",%lld" : "%lld", (long long)x->shape.d[d]);
    return put(b, n, k, "]");
}

/* Output 0 on an input's bytes (planned in place, or a view). */
static bool in_place(const hr_graph *g, const hr_node *n) {
    if (!n->nout || n->out[0] < 0 || !g->t[n->out[0]].bytes) return false;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] >= 0 && g->t[n->in[i]].bytes && g->t[n->in[i]].offset == g->t[n->out[0]].offset) return true;
    return false;
}

const char *hr_cost_key(const hr_graph *g, const hr_node *n, char *buf, size_t n_buf) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    size_t k = put(buf, n_buf, 0, "%s:%s", hr_node_op_name(n), hr_dtype_name(a.dt));
    for (int i = 0; i < n->nin; i++) k = put_tensor(buf, n_buf, k, g, n->in[i]);
    k = put(buf, n_buf, k, " ->");
    for (int i = 0; i < n->nout; i++) k = put_tensor(buf, n_buf, k, g, n->out[i]);
    const hr_attr *at = &n->a;
    if (at->kh || at->kw) k = put(buf, n_buf, k, " k%dx%d", at->kh, at->kw);
    if (at->sh || at->sw) k = put(buf, n_buf, k, " s%dx%d", at->sh, at->sw);
    if (at->ph || at->pw) k = put(buf, n_buf, k, " p%dx%d", at->ph, at->pw);
    if (at->train) k = put(buf, n_buf, k, " train");
    if (at->approx) k = put(buf, n_buf, k, " approx");
    bool acc = false;
    for (int i = 0; i < n->nout; i++) acc |= n->accum[i];
    if (acc) {
        k = put(buf, n_buf, k, " acc=");
        for (int i = 0; i < n->nout; i++) k = put(buf, n_buf, k, "%d", n->accum[i] ? 1 : 0);
    }
    if (in_place(g, n)) k = put(buf, n_buf, k, " inplace");
    return buf;
}

/* ---- estimates ------------------------------------------------------------------------- */
hr_work hr_cost_work(const hr_graph *g, const hr_node *n) {
    hr_work w = {0};
    const hr_op_desc *d = hr_op_desc_of(n->op);
    if (d->work) {
        d->work(g, n, &w);
        return w;
    }
    w.bytes = hr_work_io_bytes(g, n);
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] >= 0) w.flops += (double)hr_shape_numel(&g->t[n->out[i]].shape);
    return w;
}

static double roofline(const hr_peaks *pk, double flops, double bytes, bool tensor) {
    double f = flops / (tensor ? pk->half : pk->f32), b = bytes / pk->bw;
    return (f > b ? f : b) + pk->launch;
}

/* What the measured entries of class *cls (of every class for NULL) took
 * against their estimates, a geometric mean weighted toward those whose
 * estimate is near est; 0 when there are none. */
static double correction(const hr_cost_model *cm, const uint64_t *cls, double est) {
    double sw = 0, sl = 0;
    for (size_t i = 0; i < cm->cap; i++) {
        const hr_cost_entry *e = &cm->e[i];
        if (!e->key || e->sec < 0 || (cls && e->cls != *cls) || !strncmp(e->key, "pass ", 5)) continue;
        double ee = roofline(&cm->pk, e->flops, e->bytes, e->tensor), d = log(ee / est);
        double w = 1 / (1 + d * d);
        sw += w;
        sl += w * log((e->sec > 1e-9 ? e->sec : 1e-9) / ee);
    }
    return sw > 0 ? exp(sl / sw) : 0;
}

static bool tensor_op(const hr_graph *g, const hr_node *n, const hr_work *w) {
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    return w->matmul && hr_dtype_is_half(a.dt);
}

double hr_cost_estimate(const hr_cost_model *cm, const hr_graph *g, const hr_node *n) {
    hr_work w = hr_cost_work(g, n);
    return roofline(&cm->pk, w.flops, w.bytes, tensor_op(g, n, &w));
}

static const hr_cost_entry *lookup(const hr_cost_model *cm, const hr_graph *g, const hr_node *n, char *key) {
    hr_cost_key(g, n, key, KEY_MAX);
    const hr_cost_entry *e = find(cm, key, fnv(key, strlen(key)));
    return e && e->sec >= 0 ? e : NULL;
}

double hr_cost_node(const hr_cost_model *cm, const hr_graph *g, const hr_node *n) {
    char key[KEY_MAX];
    const hr_cost_entry *e = lookup(cm, g, n, key);
    if (e) return e->sec;
    uint64_t cls = class_of(key);
    double est = hr_cost_estimate(cm, g, n), f = correction(cm, &cls, est);
    if (f == 0) f = correction(cm, NULL, est);
    return est * (f > 0 ? f : 1);
}

bool hr_cost_node_measured(const hr_cost_model *cm, const hr_graph *g, const hr_node *n) {
    char key[KEY_MAX];
    return lookup(cm, g, n, key) != NULL;
}

void hr_cost_count(const hr_cost_model *cm, const hr_program *p, int *measured, int *estimated) {
    int m = 0, e = 0;
    for (int k = 0; k < p->n_step; k++) {
        if (hr_cost_node_measured(cm, &p->g, &p->g.n[k])) m++;
        else e++;
    }
    if (measured) *measured = m;
    if (estimated) *estimated = e;
}

/* K passes of forward and backward, then the update once (hr_train_step). */
/* The key of what a pass of p does between its nodes: its batch's bytes
 * and its number of nodes. */
static const char *pass_key(const hr_program *p, char *buf, size_t n) {
    const hr_graph *g = &p->g;
    snprintf(buf, n, "pass input=%.0f labels=%.0f nodes=%d", hr_work_tensor_bytes(g, p->input),
             p->label >= 0 ? hr_work_tensor_bytes(g, p->label) : 0.0, p->n_bwd_end);
    return buf;
}

hr_status hr_cost_record_pass(hr_cost_model *cm, const hr_program *p, double seconds) {
    char key[160];
    if (!(seconds >= 0)) seconds = 0;
    hr_cost_entry *e = insert(cm, pass_key(p, key, sizeof key));
    if (!e) return hr_error_prefix("cost model: recording a pass");
    e->sec = e->fresh ? (e->sec * e->fresh + seconds) / (e->fresh + 1) : seconds;
    e->fresh++;
    e->flops = e->bytes = 0;
    return HR_OK;
}

double hr_cost_step(const hr_cost_model *cm, const hr_program *p) {
    const hr_graph *g = &p->g;
    int K = p->cfg.accumulate > 1 ? p->cfg.accumulate : 1;
    double pass = 0, update = 0;
    for (int k = 0; k < p->n_step; k++) {
        double t = hr_cost_node(cm, g, &g->n[k]);
        if (k < p->n_bwd_end) pass += t;
        else update += t;
    }
    /* between a pass's nodes: what a measured step took beyond its nodes
     * (the batch's upload, launches, the loss read back), when this shape
     * of pass was measured; else on the CPU the batch copied into the
     * arena, on a GPU the loss read back */
    char key[160];
    pass_key(p, key, sizeof key); /* before its hash: a call's arguments have no order */
    const hr_cost_entry *e = find(cm, key, fnv(key, strlen(key)));
    double batch = hr_work_tensor_bytes(g, p->input) + hr_work_tensor_bytes(g, p->label);
    if (e && e->sec >= 0) pass += e->sec;
    else pass += cm->kind == HR_DEVICE_CUDA ? cm->pk.sync : batch / cm->pk.upload;
    return K * pass + update + (p->found_inf >= 0 ? cm->pk.sync : 0); /* fp16: found_inf read back */
}

hr_status hr_cost_record(hr_cost_model *cm, const hr_graph *g, const hr_node *n, double seconds) {
    if (!cm || !(seconds >= 0) || !isfinite(seconds))
        return hr_error_set(HR_ERR_INVALID_ARG, "cost record: %s for %s; a time must be finite and >= 0",
                            cm ? "bad seconds" : "no model", hr_node_op_name(n));
    char key[KEY_MAX];
    hr_cost_key(g, n, key, sizeof key);
    hr_cost_entry *e = insert(cm, key);
    if (!e) return hr_error_prefix("cost model: recording %s", hr_node_op_name(n));
    hr_work w = hr_cost_work(g, n);
    e->sec = e->fresh ? (e->sec * e->fresh + seconds) / (e->fresh + 1) : seconds;
    e->fresh++;
    e->flops = w.flops;
    e->bytes = w.bytes;
    e->tensor = tensor_op(g, n, &w);
    return HR_OK;
}

/* ---- the cache file ------------------------------------------------------------------ */
static void warn(const char *path, const char *what, const char *detail) {
    fprintf(stderr, "headroom: warning: cost cache %s: %s%s%s\n", path, what, detail ? ": " : "", detail ? detail : "");
}

/* One line "KEY\tSECONDS\tFLOPS\tBYTES\tMATMUL" (modified in place); false if malformed. */
static bool parse_line(char *line, hr_cost_entry *out) {
    char *f[5], *end;
    int nf = 0;
    for (char *p = line; nf < 5; p++) {
        f[nf++] = p;
        p = strchr(p, '\t');
        if (!p) break;
        *p = 0;
    }
    if (nf != 5 || !*f[0] || strchr(f[4], '\t')) return false;
    double v[3];
    for (int i = 0; i < 3; i++) {
        errno = 0;
        v[i] = strtod(f[1 + i], &end);
        if (end == f[1 + i] || *end || errno || !isfinite(v[i]) || v[i] < 0) return false;
    }
    if (strcmp(f[4], "0") && strcmp(f[4], "1")) return false;
    *out = (hr_cost_entry){.key = f[0], .sec = v[0], .flops = v[1], .bytes = v[2], .tensor = f[4][0] == '1'};
    return true;
}

/* Adds the file's times for keys that cm lacks. A missing file adds nothing;
 * an unreadable or corrupt one is a warning and adds nothing. HR_ERR_OOM
 * (error set) when out of memory. */
static hr_status load(hr_cost_model *cm, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { /* none there yet (or no folder: saving will say so) */
        bool absent = errno == ENOENT || errno == ENOTDIR;
        if (!absent && !cm->warned) warn(path, "cannot be read, ignored", strerror(errno));
        cm->warned |= !absent;
        return HR_OK;
    }
    char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (size < 0 || size > (64L << 20) || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        if (!cm->warned) warn(path, size > 0 ? "larger than 64 MiB, ignored" : "cannot be read, ignored", NULL);
        cm->warned = true;
        return HR_OK;
    }
    if (!(buf = hr_malloc((size_t)size + 1))) {
        fclose(f);
        return hr_error_prefix("reading the cost cache %s", path);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    bool read_ok = got == (size_t)size && !ferror(f);
    fclose(f);
    buf[got] = 0;
    hr_status st = HR_OK;
    char why[64] = "";
    if (!read_ok) snprintf(why, sizeof why, "a read failed");
    if (memchr(buf, 0, got)) snprintf(why, sizeof why, "not text");
    /* check every line first: a corrupt file is ignored whole */
    for (int pass = 0; pass < 2 && !why[0] && !st; pass++) {
        int lineno = 0;
        for (char *p = buf; *p && !why[0];) {
            char *nl = strchr(p, '\n'), *next = nl ? nl + 1 : p + strlen(p);
            size_t len = (size_t)(next - p) - (nl ? 1 : 0);
            lineno++;
            if (len && *p != '#') {
                char line[KEY_MAX + 128];
                hr_cost_entry e;
                if (len >= sizeof line) {
                    snprintf(why, sizeof why, "line %d is too long", lineno);
                    break;
                }
                memcpy(line, p, len);
                line[len] = 0;
                if (!parse_line(line, &e))
                    snprintf(why, sizeof why, "line %d is not KEY, 3 numbers and 0 or 1", lineno);
                else if (pass == 1) {
                    hr_cost_entry *x = insert(cm, e.key);
                    if (!x) {
                        st = hr_error_prefix("reading the cost cache %s", path);
                        break;
                    }
                    if (x->sec < 0) x->sec = e.sec, x->flops = e.flops, x->bytes = e.bytes, x->tensor = e.tensor;
                }
            }
            p = next;
        }
    }
    if (why[0] && !cm->warned) warn(path, "corrupt, ignored", why);
    cm->warned |= why[0] != 0;
    hr_free(buf);
    return st;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const hr_cost_entry *const *)a)->key, (*(const hr_cost_entry *const *)b)->key);
}

hr_status hr_cost_save(hr_cost_model *cm) {
    if (!cm) return hr_error_set(HR_ERR_INVALID_ARG, "cost save: the model is NULL");
    if (!cm->path) {
        fprintf(stderr, "headroom: warning: the cost cache is not saved: no HOME; set HR_CACHE_DIR\n");
        return hr_error_set(HR_ERR_IO, "cost cache: no directory (no HOME); set HR_CACHE_DIR");
    }
    if (!hr_make_dirs(cm->dir)) {
        warn(cm->dir, "cannot make the directory; times not saved", strerror(errno));
        return hr_error_set(HR_ERR_IO, "cost cache: cannot make %s: %s; set HR_CACHE_DIR to a writable folder",
                            cm->dir, strerror(errno));
    }
    hr_status st = load(cm, cm->path); /* what another run wrote since: ours win */
    if (st) return st;
    hr_cost_entry **list = hr_malloc(sizeof *list * (cm->count ? cm->count : 1));
    char *tmp = hr_malloc(strlen(cm->path) + 8);
    if (!list || !tmp) {
        hr_free(list);
        hr_free(tmp);
        return hr_error_prefix("saving the cost cache");
    }
    size_t n = 0;
    for (size_t i = 0; i < cm->cap; i++)
        if (cm->e[i].key && cm->e[i].sec >= 0) list[n++] = &cm->e[i];
    qsort(list, n, sizeof *list, by_key);
    FILE *f = hr_file_begin(cm->path, tmp, strlen(cm->path) + 8);
    bool ok = f != NULL;
    if (ok) {
        fprintf(f, "# headroom %s cost cache: KEY\tSECONDS\tFLOPS\tBYTES\tMATMUL (a half-type matrix product)\n",
                HR_VERSION);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\t%.9g\t%.9g\t%.9g\t%d\n", list[i]->key, list[i]->sec, list[i]->flops, list[i]->bytes,
                    list[i]->tensor ? 1 : 0);
        ok = hr_file_commit(f, tmp, cm->path) == HR_OK;
    }
    if (!ok) {
        char why[512];
        snprintf(why, sizeof why, "%s", hr_last_error());
        warn(cm->path, "cannot be written; times not saved", why);
        st = hr_error_set(HR_ERR_IO, "cost cache %s: cannot write it (%s); set HR_CACHE_DIR to a writable folder",
                          cm->path, why);
    }
    hr_free(list);
    hr_free(tmp);
    return st;
}

/* ---- making the model ------------------------------------------------------------------ */
/* "Intel(R) Xeon(R) ... (2 threads)": the CPU's model name and the threads
 * its kernels use. */
static void cpu_name(char *buf, size_t n) {
    char line[512];
    snprintf(buf, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !c) continue;
        c += 1 + strspn(c + 1, " \t");
        c[strcspn(c, "\n")] = 0;
        snprintf(buf, n, "%s", c);
        break;
    }
    if (f) fclose(f);
    int threads = 1; /* the kernels' OpenMP threads change their times */
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    size_t k = strlen(buf);
    if (k < n) snprintf(buf + k, n - k, " (%d thread%s)", threads, threads == 1 ? "" : "s");
}

hr_cost_model *hr_cost_model_new(hr_device dev_kind, const char *device_name, const char *driver) {
    hr_cost_model *cm = hr_calloc(1, sizeof *cm);
    if (!cm) return NULL;
    char name[256], dev[128], drv[64], file[300];
    if (device_name) snprintf(name, sizeof name, "%s", device_name);
    else if (dev_kind == HR_DEVICE_CUDA) snprintf(name, sizeof name, "cuda");
    else cpu_name(name, sizeof name);
    cm->kind = dev_kind == HR_DEVICE_CUDA ? HR_DEVICE_CUDA : HR_DEVICE_CPU;
    cm->pk = cpu_peaks;
    if (dev_kind == HR_DEVICE_CUDA)
        for (size_t i = 0; i < sizeof gpu_peaks / sizeof *gpu_peaks; i++)
            if (strstr(name, gpu_peaks[i].match)) {
                cm->pk = gpu_peaks[i];
                break;
            }
    hr_file_name_part(dev, name, sizeof dev);
    hr_file_name_part(drv, driver ? driver : "none", sizeof drv);
    /* the convolutions' algorithms change their times: a cuDNN mode other
     * than the default (HR_CUDNN_ALGO) keeps its times in a file of its own */
    static const char *modes[] = {"", "-deterministic", "-heuristic", "-fastest"};
    int mode = dev_kind == HR_DEVICE_CUDA ? hr_options_read().cudnn_algo : HR_ALGO_PRECISE;
    snprintf(file, sizeof file, "/costs-%s-%s-%s-%s%s.tsv", dev_kind == HR_DEVICE_CUDA ? "cuda" : "cpu", dev, drv,
             HR_VERSION, mode > 0 && mode < 4 ? modes[mode] : "");
    /* read once, here, where the model is made: never in a hot path */
    const char *env = getenv("HR_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if ((env && *env) || (xdg && *xdg) || (home && *home)) {
        cm->dir = hr_cache_dir();
        cm->path = cm->dir ? hr_malloc(strlen(cm->dir) + strlen(file) + 1) : NULL;
        if (!cm->path) {
            hr_cost_model_free(cm);
            return NULL;
        }
        sprintf(cm->path, "%s%s", cm->dir, file);
        if (load(cm, cm->path) != HR_OK) {
            hr_cost_model_free(cm);
            return NULL;
        }
    }
    return cm;
}

void hr_cost_model_free(hr_cost_model *cm) {
    if (!cm) return;
    for (size_t i = 0; i < cm->cap; i++) hr_free(cm->e[i].key);
    hr_free(cm->e);
    hr_free(cm->dir);
    hr_free(cm->path);
    hr_free(cm);
}

const char *hr_cost_cache_path(const hr_cost_model *cm) { return cm && cm->path ? cm->path : ""; }
