/* nvml.c — NVML loaded at run time: the driver's view of each GPU (memory,
 * load, temperature, power, processes) and a thread sampling this process's
 * device memory. NVML's types are declared here, as nvml.h lays them out. */
#include "backend/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- NVML's side (nvml.h, restated) ------------------------------------------- */
typedef int nvml_ret;
enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
typedef struct nvmlDevice_st *nvml_dev;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct { /* nvmlMemory_v2_t: version = sizeof | 2 << 24 */
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvml_memory_v2;
typedef struct {
    unsigned gpu, memory;
} nvml_util;
/* nvmlPciInfo_t (v2 and v3 alike): busIdLegacy[16], domain@16, bus@20,
 * device@24, pciDeviceId@28, pciSubSystemId@32, busId[32]@36; 68 bytes. */
enum { PCI_DOMAIN = 16, PCI_BUS = 20, PCI_DEVICE = 24, PCI_BUSID = 36, PCI_SIZE = 68 };
/* nvmlProcessInfo_t comes in three strides: v1 {pid, used} (16 bytes), v2
 * {pid, used, gpuInstanceId, computeInstanceId} (24), and the v3 of some R535
 * drivers with usedGpuCcProtectedMemory after them (32), behind the same _v3
 * symbol as the 24-byte one. pid@0 and used@8 in all: the stride is measured
 * (list_raw). */
enum { PROC_STRIDE_MAX = 48 };
#define NVML_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

struct hr_nvml {
    void *lib; /* dlopen's handle; NULL when opened through a resolver */
    int count;
    char driver[80];
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    const char *(*error_string)(nvml_ret);
    nvml_ret (*driver_version)(char *, unsigned);
    nvml_ret (*device_count)(unsigned *);
    nvml_ret (*by_index)(unsigned, nvml_dev *);
    nvml_ret (*name)(nvml_dev, char *, unsigned);
    nvml_ret (*pci)(nvml_dev, void *);
    nvml_ret (*memory_v2)(nvml_dev, nvml_memory_v2 *);
    nvml_ret (*memory)(nvml_dev, nvml_memory *);
    nvml_ret (*util)(nvml_dev, nvml_util *);
    nvml_ret (*temperature)(nvml_dev, int, unsigned *);
    nvml_ret (*power)(nvml_dev, unsigned *);
    nvml_ret (*power_limit)(nvml_dev, unsigned *);
    nvml_ret (*procs)(nvml_dev, unsigned *, void *);
};

/* Every function, by the names to try, newest first; "need": without it
 * the library is no NVML headroom can use. */
#define SLOT(f) offsetof(struct hr_nvml, f)
static const struct {
    size_t slot;
    bool need;
    const char *names[3];
} g_syms[] = {
    {SLOT(init), true, {"nvmlInit_v2", "nvmlInit"}},
    {SLOT(shutdown), true, {"nvmlShutdown"}},
    {SLOT(error_string), false, {"nvmlErrorString"}},
    {SLOT(driver_version), false, {"nvmlSystemGetDriverVersion"}},
    {SLOT(device_count), true, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}},
    {SLOT(by_index), true, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}},
    {SLOT(name), false, {"nvmlDeviceGetName"}},
    {SLOT(pci), false, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}},
    {SLOT(memory_v2), false, {"nvmlDeviceGetMemoryInfo_v2"}},
    {SLOT(memory), true, {"nvmlDeviceGetMemoryInfo"}},
    {SLOT(util), false, {"nvmlDeviceGetUtilizationRates"}},
    {SLOT(temperature), false, {"nvmlDeviceGetTemperature"}},
    {SLOT(power), false, {"nvmlDeviceGetPowerUsage"}},
    {SLOT(power_limit), false, {"nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"}},
    {SLOT(procs), false,
     {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
      "nvmlDeviceGetComputeRunningProcesses"}},
};
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym's pointers hold functions (POSIX)");

static void say(char *why, size_t n, const char *fmt, ...) HR_PRINTF(3, 4);
static void say(char *why, size_t n, const char *fmt, ...) {
    if (!why || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

static const char *errstr(const hr_nvml *h, nvml_ret r) {
    const char *s = h->error_string ? h->error_string(r) : NULL;
    if (s && *s) return s;
    switch (r) {
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 18: return "Driver/library version mismatch";
    default: return "an NVML error";
    }
}

/* ---- opening ------------------------------------------------------------------- */
static hr_nvml *open_with(hr_nvml_resolve_fn resolve, void *ctx, const char *what, char *why, size_t n) {
    hr_nvml *h = hr_calloc(1, sizeof *h);
    if (!h) {
        say(why, n, "%s", hr_last_error());
        return NULL;
    }
    for (size_t i = 0; i < sizeof g_syms / sizeof g_syms[0]; i++) {
        void *p = NULL;
        for (int k = 0; k < 3 && g_syms[i].names[k] && !p; k++) p = resolve(ctx, g_syms[i].names[k]);
        if (!p && g_syms[i].need) {
            say(why, n, "%s has no %s: not an NVML headroom can use", what, g_syms[i].names[0]);
            hr_free(h);
            return NULL;
        }
        memcpy((char *)h + g_syms[i].slot, &p, sizeof p);
    }
    nvml_ret r = h->init();
    if (r != NVML_SUCCESS) {
        say(why, n, "nvmlInit: %s", errstr(h, r));
        hr_free(h);
        return NULL;
    }
    unsigned c = 0;
    if ((r = h->device_count(&c)) != NVML_SUCCESS) {
        say(why, n, "nvmlDeviceGetCount: %s", errstr(h, r));
        h->shutdown();
        hr_free(h);
        return NULL;
    }
    h->count = c > INT_MAX ? INT_MAX : (int)c;
    if (!h->driver_version || h->driver_version(h->driver, sizeof h->driver) != NVML_SUCCESS) h->driver[0] = 0;
    h->driver[sizeof h->driver - 1] = 0;
    return h;
}

hr_nvml *hr_nvml_open_from(hr_nvml_resolve_fn resolve, void *ctx, char *why, size_t n) {
    return open_with(resolve, ctx, "the given NVML", why, n);
}

static void *dl_resolve(void *lib, const char *name) { return dlsym(lib, name); }

hr_nvml *hr_nvml_open_lib(const char *lib, char *why, size_t n) {
    dlerror();
    void *so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        const char *e = dlerror();
        say(why, n, "%s", e ? e : "cannot be loaded");
        return NULL;
    }
    hr_nvml *h = open_with(dl_resolve, so, lib, why, n);
    if (!h) {
        dlclose(so);
        return NULL;
    }
    h->lib = so;
    return h;
}

hr_nvml *hr_nvml_open(char *why, size_t n) { return hr_nvml_open_lib("libnvidia-ml.so.1", why, n); }

void hr_nvml_close(hr_nvml *h) {
    if (!h) return;
    h->shutdown();
    if (h->lib) dlclose(h->lib);
    hr_free(h);
}

int hr_nvml_count(const hr_nvml *h) { return h ? h->count : 0; }
const char *hr_nvml_driver(const hr_nvml *h) { return h ? h->driver : ""; }

/* ---- one GPU ---------------------------------------------------------------------- */
/* The internal functions write their error into err and leave the thread's
 * last error alone: the sampler reads from the caller's thread at start and
 * stop, and must not overwrite an error the caller is about to print. */
static hr_status dev_of(hr_nvml *h, int index, nvml_dev *d, char *err, size_t en) {
    if (!h || index < 0 || index >= h->count) {
        say(err, en, "NVML: there is no GPU %d (the driver sees %d)", index, h ? h->count : 0);
        return HR_ERR_INVALID_ARG;
    }
    nvml_ret r = h->by_index((unsigned)index, d);
    if (r != NVML_SUCCESS) {
        say(err, en, "NVML: nvmlDeviceGetHandleByIndex(%d): %s", index, errstr(h, r));
        return HR_ERR_DEVICE;
    }
    return HR_OK;
}

/* total, used (excluding the driver's reservation where the driver says it)
 * and free; any pointer may be NULL. */
static nvml_ret mem_of(hr_nvml *h, nvml_dev d, uint64_t *total, uint64_t *used, uint64_t *free_b, uint64_t *reserved) {
    uint64_t t, u, f, rs = 0;
    nvml_memory_v2 m2 = {.version = (unsigned)sizeof(nvml_memory_v2) | 2u << 24};
    nvml_ret r = h->memory_v2 ? h->memory_v2(d, &m2) : -1;
    if (r == NVML_SUCCESS) {
        t = m2.total, u = m2.used, f = m2.free, rs = m2.reserved;
    } else { /* older drivers (or 510's broken _v2): reserved counts as used */
        nvml_memory m;
        if ((r = h->memory(d, &m)) != NVML_SUCCESS) return r;
        t = m.total, u = m.used, f = m.free;
    }
    if (total) *total = t;
    if (used) *used = u;
    if (free_b) *free_b = f;
    if (reserved) *reserved = rs;
    return NVML_SUCCESS;
}

static bool bus_of(hr_nvml *h, nvml_dev d, char *out, size_t n) {
    unsigned char pci[128] = {0};
    if (!h->pci || h->pci(d, pci) != NVML_SUCCESS) return false;
    const char *s = (const char *)pci + PCI_BUSID;
    if (s[0] && memchr(s, 0, PCI_SIZE - PCI_BUSID)) {
        size_t k = strnlen(s, n - 1);
        memcpy(out, s, k);
        out[k] = 0;
    } else { /* an NVML that leaves busId empty: from the numbers (function 0) */
        unsigned dom, bus, dv;
        memcpy(&dom, pci + PCI_DOMAIN, 4), memcpy(&bus, pci + PCI_BUS, 4), memcpy(&dv, pci + PCI_DEVICE, 4);
        snprintf(out, n, "%08X:%02X:%02X.0", dom, bus, dv);
    }
    return true;
}

/* "0000:65:00.0", "00000000:65:00.0" or "65:00.0" into domain, bus, device, function */
static bool parse_bus(const char *s, unsigned v[4]) {
    char tail;
    if (sscanf(s, "%x:%x:%x.%x%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4) return true;
    v[0] = 0;
    return sscanf(s, "%x:%x.%x%c", &v[1], &v[2], &v[3], &tail) == 3;
}

static int find_bus(hr_nvml *h, const char *bus_id, char *err, size_t en) {
    unsigned want[4], got[4];
    if (!bus_id || !parse_bus(bus_id, want)) {
        say(err, en, "NVML: '%s' is not a PCI bus id (like 0000:65:00.0)", bus_id ? bus_id : "(null)");
        return -1;
    }
    if (!h || !h->pci) {
        say(err, en, "NVML: %s", h ? "this NVML cannot tell bus ids (no nvmlDeviceGetPciInfo)" : "not open");
        return -1;
    }
    for (int i = 0; i < h->count; i++) {
        nvml_dev d;
        char b[32];
        if (h->by_index((unsigned)i, &d) == NVML_SUCCESS && bus_of(h, d, b, sizeof b) && parse_bus(b, got) &&
            !memcmp(want, got, sizeof want))
            return i;
    }
    say(err, en, "NVML: no GPU at bus id %s among the %d the driver sees", bus_id, h->count);
    return -1;
}

int hr_nvml_find_bus(hr_nvml *h, const char *bus_id) {
    char err[256];
    int i = find_bus(h, bus_id, err, sizeof err);
    if (i < 0) hr_error_set(HR_ERR_INVALID_ARG, "%s", err);
    return i;
}

hr_status hr_nvml_device_info(hr_nvml *h, int index, hr_nvml_device *out) {
    char err[256];
    nvml_dev d;
    memset(out, 0, sizeof *out);
    out->index = index;
    out->util_gpu = out->temp_c = -1;
    out->power_w = out->power_limit_w = -1;
    hr_status st = dev_of(h, index, &d, err, sizeof err);
    if (st) return hr_error_set(st, "%s", err);
    nvml_ret r = mem_of(h, d, &out->mem_total, &out->mem_used, &out->mem_free, &out->mem_reserved);
    if (r != NVML_SUCCESS)
        return hr_error_set(HR_ERR_DEVICE, "NVML: nvmlDeviceGetMemoryInfo(GPU %d): %s", index, errstr(h, r));
    if (!h->name || h->name(d, out->name, sizeof out->name) != NVML_SUCCESS) out->name[0] = 0;
    out->name[sizeof out->name - 1] = 0;
    if (!bus_of(h, d, out->bus_id, sizeof out->bus_id)) out->bus_id[0] = 0;
    nvml_util u;
    unsigned v;
    if (h->util && h->util(d, &u) == NVML_SUCCESS) out->util_gpu = (int)u.gpu;
    if (h->temperature && h->temperature(d, 0 /* NVML_TEMPERATURE_GPU */, &v) == NVML_SUCCESS) out->temp_c = (int)v;
    if (h->power && h->power(d, &v) == NVML_SUCCESS) out->power_w = v / 1000.0; /* milliwatts */
    if (h->power_limit && h->power_limit(d, &v) == NVML_SUCCESS) out->power_limit_w = v / 1000.0;
    return HR_OK;
}

hr_status hr_nvml_memory(hr_nvml *h, int index, uint64_t *total, uint64_t *used, uint64_t *free_bytes) {
    char err[256];
    nvml_dev d;
    hr_status st = dev_of(h, index, &d, err, sizeof err);
    if (st) return hr_error_set(st, "%s", err);
    nvml_ret r = mem_of(h, d, total, used, free_bytes, NULL);
    if (r != NVML_SUCCESS)
        return hr_error_set(HR_ERR_DEVICE, "NVML: nvmlDeviceGetMemoryInfo(GPU %d): %s", index, errstr(h, r));
    return HR_OK;
}

/* ---- processes ----------------------------------------------------------------------- */
/* The driver's list of compute processes on d into *buf (grown as needed:
 * plain realloc for the sampler, hr_realloc otherwise), *n entries of *stride
 * bytes. The count is asked first; a process that starts in between makes
 * the list grow, so it is asked again. The buffer is filled with a sentinel
 * before the call, and the bytes the driver wrote tell the entries' stride. */
static hr_status list_raw(hr_nvml *h, nvml_dev d, bool plain, unsigned char **buf, size_t *cap, int *n,
                          size_t *stride, char *err, size_t en) {
    enum { SENTINEL = 0xA5 };
    *n = 0;
    *stride = 0;
    if (!h->procs) {
        say(err, en, "NVML: this driver cannot list processes (no nvmlDeviceGetComputeRunningProcesses)");
        return HR_ERR_UNSUPPORTED;
    }
    unsigned want = 0;
    nvml_ret r = h->procs(d, &want, NULL);
    if (r == NVML_SUCCESS) return HR_OK; /* nobody */
    for (int tries = 0; tries < 16 && r == NVML_ERROR_INSUFFICIENT_SIZE; tries++) {
        if (want == 0) want = 1;
        size_t bytes = (size_t)want * PROC_STRIDE_MAX;
        if (bytes > *cap) {
            void *p = plain ? realloc(*buf, bytes) : hr_realloc(*buf, bytes);
            if (!p) {
                say(err, en, "could not allocate %zu bytes for NVML's process list", bytes);
                return HR_ERR_OOM;
            }
            *buf = p;
            *cap = bytes;
        }
        memset(*buf, SENTINEL, bytes);
        unsigned got = want;
        r = h->procs(d, &got, *buf);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
            want = got > want ? got : want + 4;
            continue;
        }
        if (r != NVML_SUCCESS) break;
        if (got == 0) return HR_OK;
        if (got > want) got = want;
        size_t written = bytes;
        while (written > 0 && (*buf)[written - 1] == SENTINEL) written--;
        if (written == 0) {
            say(err, en, "NVML listed %u processes but wrote none of them", got);
            return HR_ERR_DEVICE;
        }
        static const size_t strides[] = {16, 24, 32};
        for (int k = 0; k < 3 && !*stride; k++)
            if (written <= got * strides[k]) *stride = strides[k];
        if (!*stride) {
            say(err, en, "NVML wrote %zu bytes for %u processes: a process struct headroom does not know", written,
                got);
            return HR_ERR_UNSUPPORTED;
        }
        *n = (int)got;
        return HR_OK;
    }
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        say(err, en, "NVML: the process list kept growing while it was read");
        return HR_ERR_DEVICE;
    }
    say(err, en, "NVML: nvmlDeviceGetComputeRunningProcesses: %s", errstr(h, r));
    return HR_ERR_DEVICE;
}

static void entry(const unsigned char *buf, size_t stride, int i, unsigned *pid, uint64_t *used) {
    unsigned long long u;
    memcpy(pid, buf + (size_t)i * stride, sizeof *pid);
    memcpy(&u, buf + (size_t)i * stride + 8, sizeof u);
    *used = u == NVML_NOT_AVAILABLE ? HR_NVML_UNKNOWN : (uint64_t)u;
}

/* A PID the driver gives that names no process here: another PID namespace's
 * (a container's host PIDs), or one just gone. */
static bool foreign(unsigned pid) {
    if (pid == 0 || pid > INT_MAX) return true; /* (kill would mean a process group) */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static hr_nvml_self_how find_self(const unsigned char *buf, size_t stride, int n, uint64_t *used) {
    unsigned me = (unsigned)getpid(), pid;
    bool mine = false;
    int others = 0;
    uint64_t sum = 0, other = 0, u;
    for (int i = 0; i < n; i++) {
        entry(buf, stride, i, &pid, &u);
        if (pid == me) { /* (one entry per MIG instance: summed) */
            mine = true;
            sum = sum == HR_NVML_UNKNOWN || u == HR_NVML_UNKNOWN ? HR_NVML_UNKNOWN : sum + u;
        } else if (foreign(pid)) {
            others++;
            other = u;
        }
    }
    if (mine) return *used = sum, HR_NVML_SELF_PID;
    if (others == 1) return *used = other, HR_NVML_SELF_GUESS;
    if (others == 0) return *used = 0, HR_NVML_SELF_ABSENT;
    return *used = HR_NVML_UNKNOWN, HR_NVML_SELF_UNKNOWN;
}

static void comm_of(unsigned pid, char *name, size_t n) {
    char path[64];
    name[0] = 0;
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = pid ? fopen(path, "r") : NULL;
    if (!f) return;
    if (fgets(name, (int)n, f)) name[strcspn(name, "\n")] = 0;
    fclose(f);
}

hr_status hr_nvml_processes(hr_nvml *h, int index, hr_nvml_proc **out, int *count) {
    char err[256];
    nvml_dev d;
    unsigned char *buf = NULL;
    size_t cap = 0, stride = 0;
    int n = 0;
    *out = NULL;
    *count = 0;
    hr_status st = dev_of(h, index, &d, err, sizeof err);
    if (!st) st = list_raw(h, d, false, &buf, &cap, &n, &stride, err, sizeof err);
    if (st) {
        hr_free(buf);
        return hr_error_set(st, "%s", err);
    }
    hr_nvml_proc *p = n ? hr_calloc((size_t)n, sizeof *p) : NULL;
    if (n && !p) {
        hr_free(buf);
        return HR_ERR_OOM;
    }
    for (int i = 0; i < n; i++) {
        entry(buf, stride, i, &p[i].pid, &p[i].used);
        comm_of(p[i].pid, p[i].name, sizeof p[i].name);
    }
    hr_free(buf);
    *out = p;
    *count = n;
    return HR_OK;
}

const char *hr_nvml_self_how_name(hr_nvml_self_how how) {
    switch (how) {
    case HR_NVML_SELF_PID: return "pid";
    case HR_NVML_SELF_GUESS: return "guess";
    case HR_NVML_SELF_ABSENT: return "absent";
    case HR_NVML_SELF_UNKNOWN: return "unknown";
    }
    return "?";
}

hr_status hr_nvml_self_used(hr_nvml *h, int index, uint64_t *used, hr_nvml_self_how *how) {
    char err[256];
    nvml_dev d;
    unsigned char *buf = NULL;
    size_t cap = 0, stride = 0;
    int n = 0;
    *used = HR_NVML_UNKNOWN;
    if (how) *how = HR_NVML_SELF_UNKNOWN;
    hr_status st = dev_of(h, index, &d, err, sizeof err);
    if (!st) st = list_raw(h, d, false, &buf, &cap, &n, &stride, err, sizeof err);
    if (st) {
        hr_free(buf);
        return hr_error_set(st, "%s", err);
    }
    hr_nvml_self_how w = find_self(buf, stride, n, used);
    if (how) *how = w;
    hr_free(buf);
    return HR_OK;
}

/* ---- the sampler -------------------------------------------------------------------- */
struct hr_nvml_sampler {
    hr_nvml *h;
    bool own; /* opened here: closed at stop */
    nvml_dev dev;
    pthread_mutex_t mu; /* guards st and stop */
    pthread_cond_t cv;  /* stop's wake-up call */
    bool stop, threaded;
    pthread_t thread;
    hr_nvml_sample st;
    unsigned char *buf; /* the readings' process list (plain malloc); one reader at a time */
    size_t cap;
};

static void reading(hr_nvml_sampler *s) {
    char err[256] = "";
    int n = 0;
    size_t stride = 0;
    uint64_t self = HR_NVML_UNKNOWN, dev = HR_NVML_UNKNOWN;
    hr_nvml_self_how how = HR_NVML_SELF_UNKNOWN;
    hr_status st = list_raw(s->h, s->dev, true, &s->buf, &s->cap, &n, &stride, err, sizeof err);
    if (st == HR_OK) how = find_self(s->buf, stride, n, &self);
    nvml_ret r = mem_of(s->h, s->dev, NULL, &dev, NULL, NULL);
    if (r != NVML_SUCCESS && !err[0]) say(err, sizeof err, "NVML: nvmlDeviceGetMemoryInfo: %s", errstr(s->h, r));
    pthread_mutex_lock(&s->mu);
    hr_nvml_sample *o = &s->st;
    if (st == HR_OK || r == NVML_SUCCESS) {
        o->samples++;
        o->how = how;
        o->current = self;
        if (self != HR_NVML_UNKNOWN && (o->peak == HR_NVML_UNKNOWN || self > o->peak)) o->peak = self;
        o->device_current = r == NVML_SUCCESS ? dev : HR_NVML_UNKNOWN;
        if (r == NVML_SUCCESS && (o->device_peak == HR_NVML_UNKNOWN || dev > o->device_peak)) o->device_peak = dev;
    }
    if (err[0]) snprintf(o->why, sizeof o->why, "%s", err);
    pthread_mutex_unlock(&s->mu);
}

static void *sampler_loop(void *arg) {
    hr_nvml_sampler *s = arg;
    long period_ns = (long)s->st.period_ms * 1000000L;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        next.tv_nsec += period_ns;
        next.tv_sec += next.tv_nsec / 1000000000L;
        next.tv_nsec %= 1000000000L;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &next) != ETIMEDOUT) {
        }
        if (s->stop) break;
        pthread_mutex_unlock(&s->mu);
        reading(s);
        struct timespec now; /* a reading slower than the period: no catching up */
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec)) next = now;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

hr_nvml_sampler *hr_nvml_sampler_start(hr_nvml *h, const char *bus_id, int index, int period_ms) {
    hr_nvml_sampler *s = hr_calloc(1, sizeof *s);
    if (!s) return NULL;
    hr_nvml_sample *o = &s->st;
    o->period_ms = period_ms > 0 ? period_ms : 5;
    o->current = o->peak = o->device_current = o->device_peak = HR_NVML_UNKNOWN;
    o->how = HR_NVML_SELF_UNKNOWN;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!h) {
        h = hr_nvml_open(o->why, sizeof o->why);
        if (!h) return s; /* unavailable, with the reason */
        s->own = true;
    }
    s->h = h;
    int i = bus_id ? find_bus(h, bus_id, o->why, sizeof o->why) : index;
    if (i < 0 || dev_of(h, i, &s->dev, o->why, sizeof o->why) != HR_OK) return s;
    reading(s);
    if (o->samples == 0) return s; /* (why says what failed) */
    o->available = true;
    int e = pthread_create(&s->thread, NULL, sampler_loop, s);
    if (e)
        snprintf(o->why, sizeof o->why, "no sampling thread (%s): the reading at start only", strerror(e));
    else
        s->threaded = true;
    return s;
}

void hr_nvml_sampler_read(hr_nvml_sampler *s, hr_nvml_sample *out) {
    if (!s) {
        memset(out, 0, sizeof *out);
        snprintf(out->why, sizeof out->why, "no sampler: host memory ran out when it was started");
        out->current = out->peak = out->device_current = out->device_peak = HR_NVML_UNKNOWN;
        out->how = HR_NVML_SELF_UNKNOWN;
        return;
    }
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void hr_nvml_sampler_stop(hr_nvml_sampler *s, hr_nvml_sample *out) {
    if (!s) {
        if (out) hr_nvml_sampler_read(NULL, out);
        return;
    }
    if (s->threaded) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->st.available) reading(s); /* the last word, after the thread */
    if (out) *out = s->st;
    free(s->buf);
    if (s->own) hr_nvml_close(s->h);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    hr_free(s);
}
