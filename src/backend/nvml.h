/* nvml.h — the GPUs as the NVIDIA driver sees them, through NVML loaded at run
 * time (dlopen libnvidia-ml.so.1: no build dependency, no CUDA headers, and a
 * plain "unavailable, because ..." where there is no driver). It is headroom's
 * independent witness of device memory: what the driver says a process holds,
 * beside what the planner said it would.
 *
 *     char why[256];
 *     hr_nvml *nv = hr_nvml_open(why, sizeof why);
 *     if (!nv) { printf("no NVIDIA driver (%s)\n", why); return; }
 *     for (int i = 0; i < hr_nvml_count(nv); i++) {
 *         hr_nvml_device d;
 *         if (hr_nvml_device_info(nv, i, &d) == HR_OK)
 *             printf("%d %s %llu of %llu MiB\n", i, d.name, d.mem_used >> 20, d.mem_total >> 20);
 *     }
 *     hr_nvml_close(nv);
 *
 *     // this process's memory on the GPU of a bus id (cudaDeviceGetPCIBusId),
 *     // read every 5 ms by a thread while the run goes on:
 *     hr_nvml_sampler *s = hr_nvml_sampler_start(NULL, bus_id, -1, 5);
 *     ... train ...
 *     hr_nvml_sample r;
 *     hr_nvml_sampler_stop(s, &r);  // !r.available without a driver: r.why says why
 *     printf("NVML: %llu bytes now, %llu at the peak\n", r.current, r.peak);
 */
#ifndef HR_BACKEND_NVML_H
#define HR_BACKEND_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef struct hr_nvml hr_nvml;

/* A byte count the driver does not give (NVML_VALUE_NOT_AVAILABLE: in some
 * containers, under MIG without rights, or a process it can't place). */
#define HR_NVML_UNKNOWN UINT64_MAX

/* ---- opening ----------------------------------------------------------------- */
/* NULL when there is no library or no driver, with the reason in why (the
 * loader's message, e.g. "libnvidia-ml.so.1: cannot open shared object file:
 * No such file or directory", or "nvmlInit: Driver Not Loaded"). */
hr_nvml *hr_nvml_open(char *why, size_t n);
hr_nvml *hr_nvml_open_lib(const char *lib, char *why, size_t n); /* another library file (tests) */
/* NVML's functions found by name through resolve(ctx, "nvmlInit_v2") instead
 * of dlsym, which may return NULL for any it lacks: tests stand in a fake
 * driver this way. */
typedef void *(*hr_nvml_resolve_fn)(void *ctx, const char *name);
hr_nvml *hr_nvml_open_from(hr_nvml_resolve_fn resolve, void *ctx, char *why, size_t n);
void hr_nvml_close(hr_nvml *h); /* h may be NULL */

int hr_nvml_count(const hr_nvml *h);               /* GPUs the driver sees; 0 for NULL */
const char *hr_nvml_driver(const hr_nvml *h);      /* "550.54.15", "" unknown */
/* The index of the GPU at a PCI bus id, in NVML's numbering (which need not be
 * CUDA's): "0000:65:00.0" (CUDA's spelling) or "00000000:65:00.0" (NVML's);
 * -1 with the error set when no GPU is there. */
int hr_nvml_find_bus(hr_nvml *h, const char *bus_id);

/* ---- one GPU ----------------------------------------------------------------- */
typedef struct {
    int index;
    char name[96];               /* "NVIDIA H100 80GB HBM3" */
    char bus_id[32];             /* "00000000:65:00.0" */
    uint64_t mem_total, mem_used, mem_free; /* bytes; used as nvidia-smi shows it */
    uint64_t mem_reserved;       /* the driver's own reservation, outside used (0 from older drivers) */
    int util_gpu;                /* percent of the last sample period with a kernel running; -1 unknown */
    int temp_c;                  /* -1 unknown */
    double power_w, power_limit_w; /* -1 unknown */
} hr_nvml_device;

/* Everything above for GPU index; a fact the GPU does not report is left
 * unknown, not an error. */
hr_status hr_nvml_device_info(hr_nvml *h, int index, hr_nvml_device *out);
/* Memory alone (cheaper): total, used as above, free. Any pointer may be NULL. */
hr_status hr_nvml_memory(hr_nvml *h, int index, uint64_t *total, uint64_t *used, uint64_t *free_bytes);

/* ---- processes ----------------------------------------------------------------- */
typedef struct {
    unsigned pid;    /* as the driver gives it: the host's PID from a container, with older drivers */
    uint64_t used;   /* bytes; HR_NVML_UNKNOWN when the driver does not say */
    char name[64];   /* /proc/PID/comm; "" when no such process is visible here */
} hr_nvml_proc;

/* The compute processes on GPU index: *out (hr_free it; NULL when none) and
 * *count. */
hr_status hr_nvml_processes(hr_nvml *h, int index, hr_nvml_proc **out, int *count);

/* How this process was found in the driver's list. */
typedef enum {
    HR_NVML_SELF_PID = 0,  /* listed under getpid() */
    HR_NVML_SELF_GUESS,    /* getpid() absent, but exactly one listed PID does not exist in this PID
                            * namespace: taken for this process, seen from the host (a container
                            * whose PIDs the driver does not translate; wrong if another container
                            * shares the GPU) */
    HR_NVML_SELF_ABSENT,   /* not listed and no candidate: no context on this GPU, 0 bytes */
    HR_NVML_SELF_UNKNOWN,  /* several candidates, or the list could not be read: can't tell */
} hr_nvml_self_how;
const char *hr_nvml_self_how_name(hr_nvml_self_how how); /* "pid", "guess", "absent", "unknown" */

/* The bytes this process holds on GPU index (HR_NVML_UNKNOWN when it can't
 * tell, or the driver does not say), and how it was found (how may be NULL). */
hr_status hr_nvml_self_used(hr_nvml *h, int index, uint64_t *used, hr_nvml_self_how *how);

/* ---- the sampler: this process's memory, followed by a thread ------------------ */
typedef struct hr_nvml_sampler hr_nvml_sampler;

typedef struct {
    bool available;        /* false: nothing was measured; why says why */
    char why[256];         /* when available: the last failed reading's error, "" if none */
    int period_ms;
    int64_t samples;       /* readings taken (one at start and one at stop included) */
    hr_nvml_self_how how;  /* of the last reading */
    uint64_t current, peak;               /* this process's bytes; HR_NVML_UNKNOWN: never known */
    uint64_t device_current, device_peak; /* every process's bytes on the GPU (used, as nvidia-smi) */
} hr_nvml_sample;

/* Reads this process's memory on one GPU at once and then every period_ms
 * (<= 0: 5 ms) on a thread of its own, keeping the current value and the
 * peak; a spike shorter than the period can be missed. The GPU: bus_id when
 * not NULL (see hr_nvml_find_bus), else NVML index `index`. h may be NULL:
 * the sampler then opens NVML itself and closes it at stop; a given h must
 * outlive the sampler. Never fails for want of a driver: the sampler is
 * then "unavailable" with the reason, and start/read/stop are harmless. NULL
 * only when host memory ran out (HR_ERR_OOM), which stop(NULL) reports too.
 * The sampler's own readings allocate with plain malloc, not hr_malloc: they
 * are diagnostics on a thread of their own, and counting them would make
 * fault injection's Nth allocation depend on timing. */
hr_nvml_sampler *hr_nvml_sampler_start(hr_nvml *h, const char *bus_id, int index, int period_ms);
void hr_nvml_sampler_read(hr_nvml_sampler *s, hr_nvml_sample *out); /* now, from any thread */
/* Stops the thread, takes a last reading, fills *out (may be NULL) and frees
 * s; s may be NULL. */
void hr_nvml_sampler_stop(hr_nvml_sampler *s, hr_nvml_sample *out);

#endif
