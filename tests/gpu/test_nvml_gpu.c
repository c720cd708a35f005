/* test_nvml_gpu.c — src/backend/nvml.c against the real driver: NVML sees the
 * CUDA device (by its PCI bus id), this process appears in the device's list
 * once it holds a context, a cudaMalloc of 256 MiB grows what the driver
 * says it holds by at least that, and the sampler's peak covers it. The
 * numbers come from the CUDA runtime and the size allocated, not from NVML. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/nvml.h"
#include "check.h"

#ifdef HR_CUDA
#include <cuda_runtime.h>

#define MiB ((uint64_t)1 << 20)

static void ms_sleep(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }

static void list(hr_nvml *nv, int i) {
    hr_nvml_proc *p = NULL;
    int n = 0;
    if (hr_nvml_processes(nv, i, &p, &n) != HR_OK) {
        printf("  (no list: %s)\n", hr_last_error());
        return;
    }
    for (int k = 0; k < n; k++)
        printf("  pid %u (%s) %llu MiB\n", p[k].pid, p[k].name[0] ? p[k].name : "not visible here",
               p[k].used == HR_NVML_UNKNOWN ? 0ull : (unsigned long long)(p[k].used >> 20));
    hr_free(p);
}

int main(void) {
    char why[256] = "";
    hr_nvml *nv = hr_nvml_open(why, sizeof why);
    CHECK(nv, "NVML did not open on the GPU machine: %s", why);
    if (!nv) TEST_END();
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0, "no CUDA device");
    CHECK(hr_nvml_count(nv) >= ndev, "NVML sees %d GPUs, CUDA %d", hr_nvml_count(nv), ndev);
    if (ndev < 1) TEST_END();

    /* the device, by CUDA's bus id */
    char bus[64] = "";
    CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, 0) == cudaSuccess, "cudaDeviceGetPCIBusId");
    int i = hr_nvml_find_bus(nv, bus);
    CHECK(i >= 0, "NVML has no GPU at CUDA device 0's bus id %s: %s", bus, hr_last_error());
    if (i < 0) TEST_END();
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    hr_nvml_device d;
    CHECK(hr_nvml_device_info(nv, i, &d) == HR_OK, "device_info: %s", hr_last_error());
    printf("CUDA device 0: %s at %s; NVML GPU %d: %s at %s, driver %s\n", prop.name, bus, i, d.name, d.bus_id,
           hr_nvml_driver(nv));
    printf("  memory %llu / %llu MiB (reserved %llu), util %d %%, %d C, %.0f W / %.0f W\n",
           (unsigned long long)(d.mem_used >> 20), (unsigned long long)(d.mem_total >> 20),
           (unsigned long long)(d.mem_reserved >> 20), d.util_gpu, d.temp_c, d.power_w, d.power_limit_w);
    CHECK(d.name[0] && d.bus_id[0], "a name and a bus id");
    CHECK(d.mem_used + d.mem_free + d.mem_reserved <= d.mem_total + MiB && d.mem_total > d.mem_free,
          "used + free + reserved <= total");

    /* the sampler, started before this process has a context */
    hr_nvml_sampler *s = hr_nvml_sampler_start(nv, bus, -1, 5);
    hr_nvml_sample r0;
    hr_nvml_sampler_read(s, &r0);
    CHECK(r0.available, "the sampler: %s", r0.why);

    CHECK(cudaSetDevice(0) == cudaSuccess && cudaFree(NULL) == cudaSuccess, "context");
    size_t free0 = 0, total0 = 0;
    cudaMemGetInfo(&free0, &total0);
    uint64_t gap = d.mem_total > total0 ? d.mem_total - total0 : total0 - d.mem_total;
    CHECK(gap < d.mem_total / 20,
          "NVML's total %llu MiB vs CUDA's %zu MiB (within 5 %%)", (unsigned long long)(d.mem_total >> 20),
          total0 >> 20);
    ms_sleep(50);
    uint64_t before = 0, after = 0, dev_before = 0, dev_after = 0;
    hr_nvml_self_how how = HR_NVML_SELF_UNKNOWN;
    CHECK(hr_nvml_self_used(nv, i, &before, &how) == HR_OK, "self_used: %s", hr_last_error());
    hr_nvml_memory(nv, i, NULL, &dev_before, NULL);
    printf("with a context: this process (pid %d) %llu MiB, found by %s; the list:\n", (int)getpid(),
           before == HR_NVML_UNKNOWN ? 0ull : (unsigned long long)(before >> 20), hr_nvml_self_how_name(how));
    list(nv, i);
    /* by PID where the driver shares (or translates) this PID namespace; in
     * a container whose PIDs it does not translate, by elimination */
    CHECK(how == HR_NVML_SELF_PID || how == HR_NVML_SELF_GUESS, "this process is in the list (found by %s)",
          hr_nvml_self_how_name(how));
    CHECK(before != HR_NVML_UNKNOWN && before > 0, "with a context it holds memory");

    void *p = NULL;
    const size_t big = 256 * MiB;
    CHECK(cudaMalloc(&p, big) == cudaSuccess && cudaMemset(p, 1, big) == cudaSuccess &&
              cudaDeviceSynchronize() == cudaSuccess,
          "cudaMalloc of 256 MiB");
    ms_sleep(100); /* twenty periods */
    CHECK(hr_nvml_self_used(nv, i, &after, &how) == HR_OK, "self_used: %s", hr_last_error());
    hr_nvml_memory(nv, i, NULL, &dev_after, NULL);
    printf("after cudaMalloc(256 MiB): this process %llu MiB (+%lld MiB), the GPU %llu MiB (+%lld MiB)\n",
           (unsigned long long)(after >> 20), (long long)((int64_t)(after - before) >> 20),
           (unsigned long long)(dev_after >> 20), (long long)((int64_t)(dev_after - dev_before) >> 20));
    CHECK(after != HR_NVML_UNKNOWN && before != HR_NVML_UNKNOWN && after >= before + big,
          "this process grew by at least 256 MiB: %llu -> %llu", (unsigned long long)before, (unsigned long long)after);
    CHECK(dev_after >= dev_before + big, "the GPU's used memory grew by at least 256 MiB");

    hr_nvml_sample r;
    hr_nvml_sampler_read(s, &r);
    CHECK(r.available && r.peak != HR_NVML_UNKNOWN && r.peak >= after && r.peak >= before + big,
          "the sampler's peak %llu covers %llu", (unsigned long long)r.peak, (unsigned long long)after);
    CHECK(r.device_peak >= dev_after, "the sampler's device peak covers the GPU's used memory");
    cudaFree(p);
    cudaDeviceSynchronize();
    ms_sleep(50);
    hr_nvml_sampler_stop(s, &r);
    printf("sampler: %lld samples every %d ms, peak %llu MiB, now %llu MiB (found by %s)%s%s\n", (long long)r.samples,
           r.period_ms, (unsigned long long)(r.peak >> 20),
           r.current == HR_NVML_UNKNOWN ? 0ull : (unsigned long long)(r.current >> 20), hr_nvml_self_how_name(r.how),
           r.why[0] ? "; last error: " : "", r.why);
    CHECK(r.samples >= 10, "at least 10 readings in 200 ms at 5 ms (%lld)", (long long)r.samples);
    CHECK(r.peak >= before + big, "the peak stays after the free");
    CHECK(r.current != HR_NVML_UNKNOWN && r.current + big <= r.peak, "after the free, current is 256 MiB below the peak");
    hr_nvml_close(nv);
    TEST_END();
}
#else
int main(void) {
    printf("SKIP test_nvml_gpu: built without CUDA\n");
    TEST_END();
}
#endif
