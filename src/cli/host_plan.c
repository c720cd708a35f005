/* host_plan.c — the host side of a command's memory: the data held in RAM, the
 * loader's slots, pinned staging, a CPU arena and evaluation's buffers, planned
 * before any data is read and held against what the host (and its cgroup) has. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "data/data.h"
#include "exec/internal.h"

#define MIB ((size_t)1 << 20)

static size_t add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static size_t mul_sat(size_t a, size_t b) { return b && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

/* ---- what the host has ----------------------------------------------------- */
/* One number from a file: the first field, or "key value" in a stat file. */
static bool read_u64(const char *path, const char *key, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    bool ok = false;
    size_t kl = key ? strlen(key) : 0;
    while (!ok && fgets(line, sizeof line, f)) {
        if (key && (strncmp(line, key, kl) != 0 || (line[kl] != ' ' && line[kl] != ':'))) continue;
        char *p = line + kl + (key ? 1 : 0), *end;
        while (*p == ' ') p++;
        unsigned long long x = strtoull(p, &end, 10);
        ok = end != p; /* "max" (no limit) reads as no number */
        *v = x;
        if (!key) break;
    }
    fclose(f);
    return ok;
}

static void note(char *why, size_t len, size_t have, const char *src) {
    char a[32];
    snprintf(why, len, "%s %s", src, hr_format_bytes(have, a, sizeof a));
}

/* The room under the memory limits of this process's cgroup and of every
 * cgroup above it, up to the mount: limit - (usage - inactive file pages),
 * since the kernel reclaims those before it kills (docker's "usage" does the
 * same). v2: memory.max/current; v1: memory.limit_in_bytes/usage_in_bytes. */
static void cgroup_room(const char *proc_cgroup, const char *root, size_t *have, char *why, size_t len) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return;
    char line[1024], v2[512] = "", v1[512] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* "id:controllers:path"; v2's line is "0::path" */
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL, *save = NULL;
        if (!b) continue;
        *a = *b = 0;
        if (!strcmp(line, "0") && !a[1]) snprintf(v2, sizeof v2, "%s", b + 1);
        for (char *c = strtok_r(a + 1, ",", &save); c; c = strtok_r(NULL, ",", &save))
            if (!strcmp(c, "memory")) snprintf(v1, sizeof v1, "%s", b + 1);
    }
    fclose(f);
    const struct {
        const char *mount, *path, *limit, *usage, *inactive;
    } kinds[] = {
        {"", v2, "memory.max", "memory.current", "inactive_file"},
        {"/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"},
    };
    for (int k = 0; k < 2; k++) {
        if (!kinds[k].path[0]) continue;
        char mount[512], dir[1024], file[1100];
        snprintf(mount, sizeof mount, "%s%s", root, kinds[k].mount);
        snprintf(dir, sizeof dir, "%s%s", mount, strcmp(kinds[k].path, "/") ? kinds[k].path : "");
        if (access(dir, F_OK) != 0) snprintf(dir, sizeof dir, "%s", mount); /* a cgroup namespace */
        for (;;) {
            uint64_t limit, usage, inactive = 0;
            snprintf(file, sizeof file, "%s/%s", dir, kinds[k].limit);
            if (read_u64(file, NULL, &limit) && limit < ((uint64_t)1 << 62)) {
                snprintf(file, sizeof file, "%s/%s", dir, kinds[k].usage);
                if (!read_u64(file, NULL, &usage)) usage = 0;
                snprintf(file, sizeof file, "%s/memory.stat", dir);
                read_u64(file, kinds[k].inactive, &inactive);
                usage = usage > inactive ? usage - inactive : 0;
                size_t room = limit > usage ? (size_t)(limit - usage) : 0;
                if (room < *have) {
                    *have = room;
                    snprintf(file, sizeof file, "room under the cgroup limit %s/%s", dir, kinds[k].limit);
                    note(why, len, room, file);
                }
            }
            size_t ml = strlen(mount);
            char *slash = strrchr(dir, '/');
            if (strlen(dir) <= ml || !slash) break;
            *slash = 0;
        }
    }
}

size_t hr_host_available(char *why, size_t len) {
    size_t have = SIZE_MAX;
    uint64_t kib;
    snprintf(why, len, "no limit known (no /proc/meminfo)");
    if (read_u64("/proc/meminfo", "MemAvailable", &kib)) {
        have = (size_t)kib << 10;
        note(why, len, have, "MemAvailable");
    }
    cgroup_room("/proc/self/cgroup", "/sys/fs/cgroup", &have, why, len);
    struct rlimit rl;
    uint64_t vm_pages;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && read_u64("/proc/self/statm", NULL, &vm_pages)) {
        size_t used = (size_t)vm_pages * (size_t)sysconf(_SC_PAGESIZE);
        size_t room = rl.rlim_cur > used ? (size_t)rl.rlim_cur - used : 0;
        if (room < have) have = room, note(why, len, room, "room under the address-space limit (ulimit -v)");
    }
    /* a cap a user sets to share the machine, and that tests use */
    const char *cap = getenv("HR_HOST_MEMORY");
    size_t c;
    if (cap && *cap && hr_parse_bytes(cap, &c) && c < have) have = c, note(why, len, c, "HR_HOST_MEMORY");
    return have;
}

/* Room kept free beyond the plan: the larger of 256 MiB and 5% of what is
 * available. 256 MiB bounds what the process takes besides the planned
 * items: its code and libraries, the model and plan bookkeeping, thread
 * stacks, OpenBLAS's per-thread packing buffers (up to 32 MiB each, touched
 * as used). Measured: `train examples/fashion.model --data synthetic --batch
 * 64 --device cpu` with 2 threads peaks at 35.6 MiB resident for 29.2 MiB
 * planned. 5% because MemAvailable is the kernel's estimate (it counts page
 * cache and slab as reclaimable, not all of which comes back) and other
 * processes move while this one runs; on a large host it covers the 256 MiB
 * many times over. */
static size_t margin_for(size_t have) {
    size_t m = have / 20;
    return m > 256 * MIB ? m : 256 * MIB;
}

/* ---- the data, from headers ------------------------------------------------ */
hr_status hr_host_data_peek(const hr_cli_opts *o, int64_t sample, bool train, hr_host_data *out) {
    memset(out, 0, sizeof *out);
    out->sample = sample;
    out->labels = 1;
    if (hr_text_spec(o->data)) { /* windows of the model's input length; both sets held, and the stream while loading */
        hr_text_info ti;
        hr_status st = hr_text_peek(o->data, &ti);
        if (st) return st;
        int64_t ntr, nva;
        hr_text_split(ti.ntokens, sample, HR_TEXT_VAL_FRACTION, &ntr, &nva);
        out->labels = sample;
        out->train_n = train && ntr > 0 ? (ntr - 1) / sample : 0;
        out->test_n = nva > 0 ? (nva - 1) / sample : 0;
        out->bytes = mul_sat(ti.bytes, 2);
        return HR_OK;
    }
    if (!strcmp(o->data, "synthetic")) {
        out->synthetic = true;
        out->train_n = train ? o->samples : 0;
        out->test_n = o->samples / 4 > 0 ? o->samples / 4 : 1;
        return HR_OK;
    }
    hr_idx_info tr, te;
    hr_status st = hr_fashion_peek(!strcmp(o->data, "fashion-mnist") ? NULL : o->data, train ? &tr : NULL, &te);
    if (st) return st;
    out->train_n = train ? tr.n : 0;
    out->test_n = te.n;
    out->sample = (int64_t)te.h * te.w;
    /* the sets are loaded one after the other: both held, one load's buffers at a time */
    size_t extra = te.peak_bytes - te.bytes;
    if (train && tr.peak_bytes - tr.bytes > extra) extra = tr.peak_bytes - tr.bytes;
    out->bytes = add_sat(add_sat(train ? tr.bytes : 0, te.bytes), extra);
    return HR_OK;
}

/* ---- the plan -------------------------------------------------------------- */
static const char *item_name[HR_HOST_COUNT] = {"data sets",  "loader slots", "pinned staging",
                                               "host arena", "evaluation",   "checkpoint copy"};

static bool arena_on_host(const hr_session_t *s) {
    return s && hr_session_backend(s)->arena_kind == HR_MEM_ARENA_HOST;
}

/* The evaluation batch when training at batch b. */
static int64_t eval_at(const hr_host_job *job, int64_t b) {
    if (!job->eval_follows) return job->eval_batch;
    return b < job->data.test_n ? b : job->data.test_n;
}

/* The CPU arena's bytes at batch b: a plan on the CPU backend (which is
 * where this arena lives), nothing allocated. SIZE_MAX if b cannot be planned. */
static size_t arena_at(const hr_host_job *job, int64_t b) {
    if (b == job->cfg->batch) return hr_session_report(job->s)->arena_bytes;
    hr_config_t c = *job->cfg;
    c.batch = b;
    if (job->loader_batch > 0 && job->eval_follows) c.eval_batch = eval_at(job, b);
    c.device = HR_DEVICE_CPU;
    hr_session_t *s = hr_compile(job->model, &c);
    size_t a = s ? hr_session_report(s)->arena_bytes : SIZE_MAX;
    hr_session_free(s);
    return a;
}

/* Every item at training (or, for eval, evaluation) batch b. */
static void fill(const hr_host_job *job, int64_t b, hr_host_plan *p) {
    const hr_host_data *d = &job->data;
    bool eval_only = job->loader_batch <= 0;
    memset(p->bytes, 0, sizeof p->bytes);
    p->bytes[HR_HOST_DATA] = d->bytes;
    p->bytes[HR_HOST_CKPT] = job->ckpt_bytes;
    if (!eval_only) p->bytes[HR_HOST_LOADER] = hr_loader_bytes(d->train_n, d->sample, d->labels, d->synthetic, b);
    int64_t eb = eval_only ? b : eval_at(job, b);
    if (eb > 0) /* evaluation's inputs, labels and outputs (4 bytes each); eval's confusion matrix (not for text) */
        p->bytes[HR_HOST_EVAL] =
            add_sat(mul_sat((size_t)eb, ((size_t)d->sample + (size_t)d->labels * (1 + (size_t)job->classes)) * 4),
                    eval_only && d->labels == 1 ? (size_t)job->classes * (size_t)job->classes * 8 : 0);
    if (job->s) {
        size_t pinned = hr_session_report(job->s)->pinned_bytes;
        if (pinned && b != job->cfg->batch) /* as the session stages them: two slots of the batch and its labels */
            pinned = mul_sat(2, add_sat(hr_align_up(mul_sat((size_t)b, (size_t)d->sample * 4), 256),
                                        hr_align_up(mul_sat((size_t)b, (size_t)d->labels * 4), 256)));
        p->bytes[HR_HOST_PINNED] = pinned;
        if (p->arena_on_host) p->bytes[HR_HOST_ARENA] = arena_at(job, b);
    }
    p->total = 0;
    for (int k = 0; k < HR_HOST_COUNT; k++) p->total = add_sat(p->total, p->bytes[k]);
}

static void table(const hr_host_plan *p, char *buf, size_t len) {
    char a[32], b[32], c[32];
    size_t k = 0;
    for (int i = 0; i < HR_HOST_COUNT && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "\n  %-18s %12s%s", item_name[i], hr_format_bytes(p->bytes[i], a, sizeof a),
                              !p->planned && (i == HR_HOST_PINNED || i == HR_HOST_ARENA) ? "   (not planned yet)" : "");
    if (k < len)
        snprintf(buf + k, len - k, "\n  %-18s %12s\n  %-18s %12s   (%s, less a margin of %s)", "total",
                 hr_format_bytes(p->total, a, sizeof a), "available", hr_format_bytes(p->available, b, sizeof b),
                 p->source, hr_format_bytes(p->margin, c, sizeof c));
}

hr_status hr_host_check(const hr_host_job *job, hr_host_plan *out) {
    memset(out, 0, sizeof *out);
    if (!job || !job->cfg || (job->s && !job->model))
        return hr_error_set(HR_ERR_INVALID_ARG, "hr_host_check: the job, its config (and with a session, its model) "
                            "must not be NULL");
    size_t have = hr_host_available(out->source, sizeof out->source);
    out->margin = have == SIZE_MAX ? 0 : margin_for(have);
    out->available = have > out->margin ? have - out->margin : 0;
    out->arena_on_host = arena_on_host(job->s);
    out->planned = job->s != NULL;
    int64_t batch = job->loader_batch > 0 ? job->loader_batch : job->cfg->batch;
    fill(job, batch, out);
    if (out->total <= out->available) return HR_OK;

    /* Every batch-dependent item grows with the batch, so a binary search
     * finds the largest that fits: loader and pinned bytes are arithmetic, a
     * CPU arena one plan a probe (at most 41 for the largest batch a plan takes). */
    hr_host_plan probe = *out;
    int64_t lo = 0, hi = batch;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        fill(job, mid, &probe);
        if (probe.total <= out->available) lo = mid;
        else hi = mid;
    }
    char a[32], b[32], tab[2048], fit[256];
    table(out, tab, sizeof tab);
    if (lo > 0)
        snprintf(fit, sizeof fit, "%s%lld (use --batch)", job->s ? "" : "at most ", (long long)lo);
    else
        snprintf(fit, sizeof fit, "none: %s alone take more than is available",
                 job->loader_batch > 0 ? "the data and a batch of 1" : "the data and an evaluation batch of 1");
    return hr_error_set(HR_ERR_OOM,
                        "batch %lld does not fit host memory: the job needs %s of RAM and %s is available%s%s\n"
                        "  largest batch that fits: %s",
                        (long long)batch, hr_format_bytes(out->total, a, sizeof a),
                        hr_format_bytes(out->available, b, sizeof b),
                        job->s ? "." : " (before the model's plan: a lower bound).", tab, fit);
}

void hr_host_plan_print(const hr_host_plan *p, FILE *f) {
    char tab[2048];
    table(p, tab, sizeof tab);
    fprintf(f, "host memory (RAM):%s\n", tab);
}
