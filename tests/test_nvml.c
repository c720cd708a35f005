/* test_nvml.c — src/backend/nvml.c without a GPU: the no-driver path (the API
 * says "unavailable" and why, `headroom smi` says so in one sentence with exit
 * status 0, the sampler is harmless), and everything above the loader against
 * a fake NVML whose numbers the test sets: process-struct strides 16/24/32,
 * a list that grows while it is read, this process found by PID or by
 * elimination, memory v2 vs v1, bus ids in CUDA's spelling, the sampler's
 * peak of values changed while it runs, and host allocation failures. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/nvml.h"
#include "check.h"
#include "io/io.h"

#define MiB (1ull << 20)

/* ---- a fake NVML: two GPUs, per-GPU process lists the test writes ------------ */
typedef struct nvmlDevice_st *fake_dev;
typedef struct {
    unsigned pid;
    unsigned long long used;
} fake_proc;
static struct {
    int init_ret;
    unsigned ngpu;
    int v3_stride;               /* 24, or 32 as some R535 drivers write */
    int grow_once;               /* the next fetch finds one more process (it just started) */
    fake_proc procs[2][8];
    unsigned nprocs[2];
    unsigned long long dev_used; /* GPU 0's used memory (atomics: the sampler reads it) */
    int open_count;
    const char *hide[8];         /* names the resolver says are missing */
} fake;

static unsigned dev_index(fake_dev d) { return (unsigned)((uintptr_t)d - 1); }
static int f_init(void) {
    if (!fake.init_ret) fake.open_count++;
    return fake.init_ret;
}
static int f_shutdown(void) { return fake.open_count--, 0; }
static int f_driver(char *b, unsigned n) { return snprintf(b, n, "999.01.02"), 0; }
static int f_count(unsigned *c) { return *c = fake.ngpu, 0; }
static int f_by_index(unsigned i, fake_dev *d) {
    if (i >= fake.ngpu) return 2;
    *d = (fake_dev)(uintptr_t)(i + 1);
    return 0;
}
static int f_name(fake_dev d, char *b, unsigned n) { return snprintf(b, n, "Fake GPU %u", dev_index(d)), 0; }
static int f_pci(fake_dev d, void *p) { /* nvmlPciInfo_t as nvml.h lays it out */
    unsigned char *b = p;
    unsigned dom = 0, bus = dev_index(d) ? 0xB3 : 0x65, dv = 0;
    memset(b, 0, 68);
    memcpy(b + 16, &dom, 4), memcpy(b + 20, &bus, 4), memcpy(b + 24, &dv, 4);
    snprintf((char *)b + 36, 32, "00000000:%02X:00.0", bus);
    return 0;
}
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} fake_mem_v2;
typedef struct {
    unsigned long long total, free, used;
} fake_mem;
static unsigned long long used_of(fake_dev d) {
    return dev_index(d) ? 5 * MiB : __atomic_load_n(&fake.dev_used, __ATOMIC_RELAXED);
}
static int f_mem_v2(fake_dev d, fake_mem_v2 *m) {
    if (m->version != (sizeof *m | 2u << 24)) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m->total = 80 * 1024 * MiB, m->reserved = 500 * MiB, m->used = used_of(d);
    m->free = m->total - m->reserved - m->used;
    return 0;
}
static int f_mem(fake_dev d, fake_mem *m) { /* v1: the reservation counts as used */
    m->total = 80 * 1024 * MiB, m->used = used_of(d) + 500 * MiB, m->free = m->total - m->used;
    return 0;
}
static int f_util(fake_dev d, unsigned *u) { return u[0] = 37, u[1] = 5, 0; }
static int f_temp(fake_dev d, int sensor, unsigned *t) { return *t = sensor == 0 ? 41 : 0, 0; }
static int f_power(fake_dev d, unsigned *mw) { return *mw = 123456, 0; }
static int f_limit(fake_dev d, unsigned *mw) { return *mw = 700000, 0; }
static int procs_with(fake_dev d, unsigned *count, void *infos, int stride) {
    unsigned g = dev_index(d);
    if (fake.grow_once && infos && *count >= fake.nprocs[g]) { /* one starts between the two calls */
        fake.grow_once = 0;
        fake.procs[g][fake.nprocs[g]++] = (fake_proc){(unsigned)getppid(), 77 * MiB};
    }
    unsigned n = fake.nprocs[g];
    if (*count < n) return *count = n, 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    unsigned char *b = infos;
    for (unsigned i = 0; i < n; i++) {
        unsigned char e[32];
        unsigned ff = 0xFFFFFFFFu;
        unsigned long long used = __atomic_load_n(&fake.procs[g][i].used, __ATOMIC_RELAXED), cc = 0;
        memset(e, 0, sizeof e);
        memcpy(e, &fake.procs[g][i].pid, 4), memcpy(e + 8, &used, 8);
        memcpy(e + 16, &ff, 4), memcpy(e + 20, &ff, 4), memcpy(e + 24, &cc, 8);
        memcpy(b + (size_t)i * stride, e, (size_t)stride);
    }
    *count = n;
    return 0;
}
static int f_procs_v3(fake_dev d, unsigned *c, void *p) { return procs_with(d, c, p, fake.v3_stride); }
static int f_procs_v2(fake_dev d, unsigned *c, void *p) { return procs_with(d, c, p, 24); }
static int f_procs_v1(fake_dev d, unsigned *c, void *p) { return procs_with(d, c, p, 16); }

static const struct {
    const char *name;
    void *fn;
} fake_syms[] = {
    {"nvmlInit_v2", (void *)f_init},
    {"nvmlShutdown", (void *)f_shutdown},
    {"nvmlSystemGetDriverVersion", (void *)f_driver},
    {"nvmlDeviceGetCount_v2", (void *)f_count},
    {"nvmlDeviceGetHandleByIndex_v2", (void *)f_by_index},
    {"nvmlDeviceGetName", (void *)f_name},
    {"nvmlDeviceGetPciInfo_v3", (void *)f_pci},
    {"nvmlDeviceGetMemoryInfo_v2", (void *)f_mem_v2},
    {"nvmlDeviceGetMemoryInfo", (void *)f_mem},
    {"nvmlDeviceGetUtilizationRates", (void *)f_util},
    {"nvmlDeviceGetTemperature", (void *)f_temp},
    {"nvmlDeviceGetPowerUsage", (void *)f_power},
    {"nvmlDeviceGetEnforcedPowerLimit", (void *)f_limit},
    {"nvmlDeviceGetComputeRunningProcesses_v3", (void *)f_procs_v3},
    {"nvmlDeviceGetComputeRunningProcesses_v2", (void *)f_procs_v2},
    {"nvmlDeviceGetComputeRunningProcesses", (void *)f_procs_v1},
};

static void *fake_resolve(void *ctx, const char *name) {
    for (int i = 0; i < 8 && fake.hide[i]; i++)
        if (!strcmp(fake.hide[i], name)) return NULL;
    for (size_t i = 0; i < sizeof fake_syms / sizeof fake_syms[0]; i++)
        if (!strcmp(fake_syms[i].name, name)) return fake_syms[i].fn;
    return NULL;
}

/* PIDs: this process; its parent (exists here, not ours); none anywhere here */
#define FOREIGN1 0x7ffffff0u
#define FOREIGN2 0x7ffffff1u
static void fake_reset(void) {
    memset(&fake, 0, sizeof fake);
    fake.ngpu = 2;
    fake.v3_stride = 24;
    fake.dev_used = 1000 * MiB;
    fake.procs[0][0] = (fake_proc){(unsigned)getppid(), 300 * MiB};
    fake.procs[0][1] = (fake_proc){(unsigned)getpid(), 600 * MiB};
    fake.procs[0][2] = (fake_proc){FOREIGN1, 0xFFFFFFFFFFFFFFFFull}; /* NVML_VALUE_NOT_AVAILABLE */
    fake.nprocs[0] = 3;
}

static hr_nvml *fake_open(void) {
    char why[256] = "";
    hr_nvml *h = hr_nvml_open_from(fake_resolve, NULL, why, sizeof why);
    CHECK(h, "fake NVML did not open: %s", why);
    return h;
}

static void ms_sleep(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- no driver ------------------------------------------------------------------ */
static void test_no_driver(void) {
    char why[256] = "";
    hr_nvml *h = hr_nvml_open_lib("libnvidia-ml-headroom-test-absent.so.1", why, sizeof why);
    CHECK(!h, "a library that does not exist opened");
    CHECK(strstr(why, "libnvidia-ml-headroom-test-absent.so.1") && strstr(why, "cannot open shared object file"),
          "the reason names the library and the loader's words: '%s'", why);
    CHECK(hr_nvml_count(NULL) == 0 && !strcmp(hr_nvml_driver(NULL), ""), "a NULL handle has no GPU");
    hr_nvml_close(NULL);
    hr_nvml_device d;
    CHECK(hr_nvml_device_info(NULL, 0, &d) == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "no GPU 0"),
          "device_info without a driver: %s", hr_last_error());
    hr_nvml_proc *p = (hr_nvml_proc *)1;
    int n = -1;
    CHECK(hr_nvml_processes(NULL, 0, &p, &n) == HR_ERR_INVALID_ARG && !p && n == 0, "processes without a driver");
    uint64_t u = 0;
    hr_nvml_self_how how = HR_NVML_SELF_PID;
    CHECK(hr_nvml_self_used(NULL, 0, &u, &how) == HR_ERR_INVALID_ARG && u == HR_NVML_UNKNOWN &&
              how == HR_NVML_SELF_UNKNOWN, "self_used without a driver");
    CHECK(hr_nvml_find_bus(NULL, "0000:65:00.0") == -1, "find_bus without a driver");

    /* the default library: absent on a CPU machine, where the sampler says why */
    char why2[256] = "";
    hr_nvml *sys = hr_nvml_open(why2, sizeof why2);
    if (sys) {
        printf("SKIP test_nvml: this machine has an NVIDIA driver (%s): no-driver checks of the default library\n",
               hr_nvml_driver(sys));
        hr_nvml_close(sys);
        return;
    }
    CHECK(strstr(why2, "libnvidia-ml.so.1") || strstr(why2, "nvmlInit"), "the default library's reason: '%s'", why2);
    hr_nvml_sampler *s = hr_nvml_sampler_start(NULL, "0000:65:00.0", -1, 5);
    CHECK(s, "the sampler starts without a driver");
    hr_nvml_sample r;
    hr_nvml_sampler_read(s, &r);
    CHECK(!r.available && !strcmp(r.why, why2) && r.samples == 0, "read: unavailable, '%s'", r.why);
    memset(&r, 0x5A, sizeof r);
    hr_nvml_sampler_stop(s, &r);
    CHECK(!r.available && !strcmp(r.why, why2) && r.samples == 0 && r.current == HR_NVML_UNKNOWN &&
              r.peak == HR_NVML_UNKNOWN && r.device_peak == HR_NVML_UNKNOWN && r.period_ms == 5,
          "stop: unavailable, nothing measured");
    hr_nvml_sampler_stop(hr_nvml_sampler_start(NULL, NULL, 0, 0), NULL); /* no output wanted */
}

/* ---- headroom smi, the binary beside this test's folder -------------------------- */
static char out[1 << 16];
static int run(const char *cmd) {
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_smi(void) {
    char exe[4096], cmd[4200];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* BUILD/tests */
    slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* BUILD */
    snprintf(cmd, sizeof cmd, "%s/headroom", exe);
    if (access(cmd, X_OK) != 0) {
        CHECK(0, "%s is missing: build it (make all)", cmd);
        return;
    }
    char why[256] = "";
    hr_nvml *sys = hr_nvml_open(why, sizeof why);
    int nsys = hr_nvml_count(sys);
    hr_nvml_close(sys);

    snprintf(cmd, sizeof cmd, "%s/headroom smi 2>&1", exe);
    int rc = run(cmd);
    CHECK(rc == 0, "headroom smi: exit status %d (0: an answer, driver or not)", rc);
    if (!sys) {
        char want[512];
        snprintf(want, sizeof want, "headroom smi: no NVIDIA driver found (%s); there is no GPU to show\n", why);
        CHECK(!strcmp(out, want), "headroom smi without a driver printed:\n%s", out);
    } else {
        CHECK(!strncmp(out, "headroom smi: NVIDIA driver ", 28) && strstr(out, "processes"), "smi's table:\n%s", out);
    }

    snprintf(cmd, sizeof cmd, "%s/headroom smi --json 2>/dev/null", exe);
    rc = run(cmd);
    hr_json *j = NULL;
    CHECK(rc == 0 && hr_json_parse(out, strlen(out), "smi --json", 0, &j) == HR_OK,
          "smi --json: status %d, JSON: %s\n%s", rc, hr_last_error(), out);
    if (j) {
        const hr_json *drv = hr_json_get(j, "driver"), *gpus = hr_json_get(j, "gpus"), *ps = hr_json_get(j, "processes");
        CHECK(drv && gpus && ps && gpus->type == HR_JSON_ARRAY && ps->type == HR_JSON_ARRAY, "smi --json's keys");
        if (!sys) {
            const hr_json *w = hr_json_get(j, "why");
            CHECK(drv && drv->type == HR_JSON_NULL && w && w->type == HR_JSON_STRING && !strcmp(w->str, why) && gpus &&
                      gpus->n == 0,
                  "smi --json without a driver: driver null, the reason, no GPU");
        } else {
            CHECK(gpus && gpus->n == nsys, "smi --json lists every GPU");
        }
        hr_json_free(j);
    }

    snprintf(cmd, sizeof cmd, "%s/headroom smi --bogus 2>&1", exe);
    CHECK(run(cmd) == 2 && strstr(out, "unknown option '--bogus'"), "a bad option: status 2, says which: %s", out);
    snprintf(cmd, sizeof cmd, "%s/headroom --help 2>&1", exe);
    CHECK(run(cmd) == 0 && strstr(out, "smi [--json]"), "the usage text describes smi");
}

/* ---- the fake driver --------------------------------------------------------------- */
static void test_open_failures(void) {
    char why[256] = "";
    fake_reset();
    fake.hide[0] = "nvmlInit_v2";
    CHECK(!hr_nvml_open_from(fake_resolve, NULL, why, sizeof why) && strstr(why, "nvmlInit_v2"),
          "a library without nvmlInit: '%s'", why);
    fake_reset();
    fake.init_ret = 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    CHECK(!hr_nvml_open_from(fake_resolve, NULL, why, sizeof why) && !strcmp(why, "nvmlInit: Driver Not Loaded"),
          "a library whose driver is not loaded: '%s'", why);
    CHECK(fake.open_count == 0, "nothing left initialised");
}

static void test_devices(void) {
    fake_reset();
    hr_nvml *h = fake_open();
    if (!h) return;
    CHECK(hr_nvml_count(h) == 2 && !strcmp(hr_nvml_driver(h), "999.01.02"), "count and driver");
    hr_nvml_device d;
    CHECK(hr_nvml_device_info(h, 1, &d) == HR_OK, "device_info: %s", hr_last_error());
    CHECK(d.index == 1 && !strcmp(d.name, "Fake GPU 1") && !strcmp(d.bus_id, "00000000:B3:00.0"), "name %s, bus %s",
          d.name, d.bus_id);
    CHECK(d.mem_total == 80 * 1024 * MiB && d.mem_used == 5 * MiB && d.mem_reserved == 500 * MiB &&
              d.mem_free == 80 * 1024 * MiB - 505 * MiB,
          "memory v2: used %llu reserved %llu", (unsigned long long)d.mem_used, (unsigned long long)d.mem_reserved);
    CHECK(d.util_gpu == 37 && d.temp_c == 41, "util %d, temp %d", d.util_gpu, d.temp_c);
    CHECK_CLOSE(d.power_w, 123.456, 1e-9, 0, "power in W from mW");
    CHECK_CLOSE(d.power_limit_w, 700, 1e-9, 0, "power limit");
    CHECK(hr_nvml_device_info(h, 2, &d) == HR_ERR_INVALID_ARG && strstr(hr_last_error(), "no GPU 2"),
          "a GPU past the count: %s", hr_last_error());
    /* bus ids: CUDA's spelling (4-digit domain, lower case), NVML's, short */
    CHECK(hr_nvml_find_bus(h, "0000:b3:00.0") == 1, "CUDA's spelling");
    CHECK(hr_nvml_find_bus(h, "00000000:65:00.0") == 0, "NVML's spelling");
    CHECK(hr_nvml_find_bus(h, "65:00.0") == 0, "no domain");
    CHECK(hr_nvml_find_bus(h, "0000:17:00.0") == -1 && strstr(hr_last_error(), "no GPU at bus id 0000:17:00.0"),
          "an absent bus: %s", hr_last_error());
    CHECK(hr_nvml_find_bus(h, "gpu0") == -1 && strstr(hr_last_error(), "not a PCI bus id"), "garbage");
    hr_nvml_close(h);
    CHECK(fake.open_count == 0, "close shuts NVML down");

    /* an older driver: memory v1 only (used includes the reservation), no
     * util, temperature or power */
    fake_reset();
    fake.hide[0] = "nvmlDeviceGetMemoryInfo_v2";
    fake.hide[1] = "nvmlDeviceGetUtilizationRates";
    fake.hide[2] = "nvmlDeviceGetTemperature";
    fake.hide[3] = "nvmlDeviceGetPowerUsage";
    fake.hide[4] = "nvmlDeviceGetEnforcedPowerLimit";
    fake.hide[5] = "nvmlDeviceGetPowerManagementLimit";
    if (!(h = fake_open())) return;
    uint64_t t = 0, u = 0, f = 0;
    CHECK(hr_nvml_memory(h, 0, &t, &u, &f) == HR_OK && u == 1500 * MiB && t == 80 * 1024 * MiB && f == t - u,
          "memory v1: used %llu", (unsigned long long)u);
    CHECK(hr_nvml_device_info(h, 0, &d) == HR_OK && d.util_gpu == -1 && d.temp_c == -1 && d.power_w < 0 &&
              d.power_limit_w < 0 && d.mem_reserved == 0,
          "facts a GPU does not give are unknown, not errors");
    hr_nvml_close(h);
}

/* The list under each process-struct stride, and while it grows. */
static void check_list(const char *label) {
    hr_nvml *h = fake_open();
    if (!h) return;
    hr_nvml_proc *p = NULL;
    int n = 0;
    CHECK(hr_nvml_processes(h, 0, &p, &n) == HR_OK, "%s: %s", label, hr_last_error());
    CHECK(n == (int)fake.nprocs[0] && p, "%s: %d processes, want %u", label, n, fake.nprocs[0]);
    for (int i = 0; i < n && p && i < 8; i++) {
        unsigned long long want = fake.procs[0][i].used;
        CHECK(p[i].pid == fake.procs[0][i].pid && p[i].used == (want == ~0ull ? HR_NVML_UNKNOWN : want),
              "%s: process %d: pid %u used %llu", label, i, p[i].pid, (unsigned long long)p[i].used);
    }
    if (n >= 3 && p) {
        char comm[64] = "";
        FILE *f = fopen("/proc/self/comm", "r");
        if (f && fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        if (f) fclose(f);
        CHECK(!strcmp(p[1].name, comm), "%s: this process's name '%s' (want '%s')", label, p[1].name, comm);
        CHECK(p[2].name[0] == 0, "%s: a PID not visible here has no name", label);
    }
    hr_free(p);
    hr_nvml_proc *q = (hr_nvml_proc *)1;
    CHECK(hr_nvml_processes(h, 1, &q, &n) == HR_OK && n == 0 && !q, "%s: an idle GPU", label);
    hr_nvml_close(h);
}

static void test_processes(void) {
    fake_reset();
    check_list("v3, 24-byte entries");
    fake_reset();
    fake.v3_stride = 32; /* R535's usedGpuCcProtectedMemory */
    check_list("v3, 32-byte entries");
    fake_reset();
    fake.hide[0] = "nvmlDeviceGetComputeRunningProcesses_v3";
    check_list("v2");
    fake_reset();
    fake.hide[0] = "nvmlDeviceGetComputeRunningProcesses_v3";
    fake.hide[1] = "nvmlDeviceGetComputeRunningProcesses_v2";
    check_list("v1, 16-byte entries");
    fake_reset();
    fake.grow_once = 1;
    fake.v3_stride = 32;
    check_list("a process starting while the list is read");
    CHECK(fake.nprocs[0] == 4, "the fake grew the list");

    fake_reset();
    fake.hide[0] = "nvmlDeviceGetComputeRunningProcesses_v3";
    fake.hide[1] = "nvmlDeviceGetComputeRunningProcesses_v2";
    fake.hide[2] = "nvmlDeviceGetComputeRunningProcesses";
    hr_nvml *h = fake_open();
    hr_nvml_proc *p;
    int n;
    CHECK(h && hr_nvml_processes(h, 0, &p, &n) == HR_ERR_UNSUPPORTED && strstr(hr_last_error(), "cannot list"),
          "a driver without a process list: %s", hr_last_error());
    hr_nvml_close(h);
}

static void check_self(const char *label, uint64_t want, hr_nvml_self_how want_how) {
    hr_nvml *h = fake_open();
    uint64_t u = 0;
    hr_nvml_self_how how = (hr_nvml_self_how)-1;
    CHECK(h && hr_nvml_self_used(h, 0, &u, &how) == HR_OK && u == want && how == want_how,
          "%s: %llu bytes, found by %s (want %llu, %s)", label, (unsigned long long)u, hr_nvml_self_how_name(how),
          (unsigned long long)want, hr_nvml_self_how_name(want_how));
    hr_nvml_close(h);
}

static void test_self(void) {
    fake_reset();
    check_self("listed under getpid()", 600 * MiB, HR_NVML_SELF_PID);
    fake_reset(); /* a container: our PID is the host's, the one PID not visible here */
    fake.procs[0][1] = fake.procs[0][0];
    fake.procs[0][0] = (fake_proc){FOREIGN2, 640 * MiB};
    fake.nprocs[0] = 2;
    check_self("the one PID of another namespace", 640 * MiB, HR_NVML_SELF_GUESS);
    fake.procs[0][2] = (fake_proc){FOREIGN1, 10 * MiB};
    fake.nprocs[0] = 3;
    check_self("two PIDs of other namespaces", HR_NVML_UNKNOWN, HR_NVML_SELF_UNKNOWN);
    fake.nprocs[0] = 0;
    check_self("an empty list", 0, HR_NVML_SELF_ABSENT);
    fake.procs[0][0] = (fake_proc){(unsigned)getppid(), 5 * MiB};
    fake.nprocs[0] = 1;
    check_self("only processes visible here, not this one", 0, HR_NVML_SELF_ABSENT);
}

/* The sampler sees values the test changes while it runs. */
static bool wait_for(hr_nvml_sampler *s, uint64_t current, int64_t min_samples) {
    hr_nvml_sample r;
    for (double t0 = now_s(); now_s() - t0 < 5;) {
        hr_nvml_sampler_read(s, &r);
        if (r.current == current && r.samples >= min_samples) return true;
        ms_sleep(1);
    }
    return false;
}

static void test_sampler(void) {
    fake_reset();
    hr_nvml *h = fake_open();
    if (!h) return;
    fake_proc *me = &fake.procs[0][1];
    __atomic_store_n(&me->used, 100 * MiB, __ATOMIC_RELAXED);
    hr_nvml_sampler *s = hr_nvml_sampler_start(h, "0000:65:00.0", -1, 1);
    hr_nvml_sample r;
    hr_nvml_sampler_read(s, &r);
    CHECK(s && r.available && r.samples >= 1 && r.current == 100 * MiB && r.how == HR_NVML_SELF_PID && !r.why[0],
          "a reading at start: %s", r.why);
    CHECK(wait_for(s, 100 * MiB, 3), "the thread samples");
    __atomic_store_n(&me->used, 356 * MiB, __ATOMIC_RELAXED);
    __atomic_store_n(&fake.dev_used, 1256 * MiB, __ATOMIC_RELAXED);
    CHECK(wait_for(s, 356 * MiB, 4), "the sampler sees the rise");
    __atomic_store_n(&me->used, 100 * MiB, __ATOMIC_RELAXED);
    __atomic_store_n(&fake.dev_used, 1000 * MiB, __ATOMIC_RELAXED);
    CHECK(wait_for(s, 100 * MiB, 5), "and the fall");
    hr_nvml_sampler_stop(s, &r);
    CHECK(r.available && r.peak == 356 * MiB && r.current == 100 * MiB && r.device_peak == 1256 * MiB &&
              r.device_current == 1000 * MiB && r.samples >= 5 && r.period_ms == 1,
          "peak %llu current %llu device peak %llu, %lld samples", (unsigned long long)r.peak,
          (unsigned long long)r.current, (unsigned long long)r.device_peak, (long long)r.samples);

    /* by index; a long period still stops at once */
    double t0 = now_s();
    s = hr_nvml_sampler_start(h, NULL, 1, 10000);
    hr_nvml_sampler_stop(s, &r);
    CHECK(now_s() - t0 < 2, "stop does not wait out a 10 s period (%.1f s)", now_s() - t0);
    CHECK(r.available && r.samples == 2 && r.current == 0 && r.how == HR_NVML_SELF_ABSENT && r.device_peak == 5 * MiB,
          "GPU 1 by index: nothing of ours, %lld samples", (long long)r.samples);

    /* a GPU NVML does not have: unavailable, with the reason */
    s = hr_nvml_sampler_start(h, "0000:17:00.0", -1, 5);
    hr_nvml_sampler_stop(s, &r);
    CHECK(!r.available && strstr(r.why, "no GPU at bus id 0000:17:00.0") && r.samples == 0, "absent bus: '%s'", r.why);
    hr_error_set(HR_ERR_IO, "the caller's error");
    s = hr_nvml_sampler_start(h, NULL, 7, 5);
    hr_nvml_sampler_stop(s, &r);
    CHECK(!r.available && strstr(r.why, "no GPU 7"), "absent index: '%s'", r.why);
    CHECK(hr_last_status() == HR_ERR_IO && !strcmp(hr_last_error(), "the caller's error"),
          "the sampler leaves the caller's last error alone");
    hr_nvml_close(h);
}

/* Every host allocation failing in turn: an error or a success, never a crash. */
static void test_faults(void) {
    for (int64_t k = 1; k < 100; k++) {
        fake_reset();
        hr_fault_fail_at(k);
        char why[256] = "";
        hr_nvml *h = hr_nvml_open_from(fake_resolve, NULL, why, sizeof why);
        bool ok = true;
        if (!h) ok = strstr(why, "could not allocate") != NULL;
        hr_nvml_proc *p = NULL;
        int n;
        hr_status st = h ? hr_nvml_processes(h, 0, &p, &n) : HR_OK;
        ok = ok && (st == HR_OK || st == HR_ERR_OOM);
        hr_free(p);
        uint64_t u;
        st = h ? hr_nvml_self_used(h, 0, &u, NULL) : HR_OK;
        ok = ok && (st == HR_OK || st == HR_ERR_OOM);
        if (h) { /* (without h the sampler would open the machine's own NVML) */
            hr_nvml_sampler *s = hr_nvml_sampler_start(h, NULL, 0, 5);
            hr_nvml_sample r;
            hr_nvml_sampler_stop(s, &r);
            ok = ok && (s ? r.available && r.peak == 600 * MiB : !r.available && strstr(r.why, "memory"));
        }
        hr_nvml_close(h);
        int64_t made = hr_fault_fail_at(0);
        CHECK(ok && fake.open_count == 0, "allocation %lld failing: handled", (long long)k);
        if (made < k) break; /* every allocation has failed once */
    }
}

int main(void) {
    test_no_driver();
    test_smi();
    test_open_failures();
    test_devices();
    test_processes();
    test_self();
    test_sampler();
    test_faults();
    TEST_END();
}
