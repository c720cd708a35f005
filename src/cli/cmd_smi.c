/* cmd_smi.c — `headroom smi`: each GPU and the compute processes on it as the
 * NVIDIA driver reports them (NVML), like nvidia-smi; says so plainly when
 * there is no driver, which is an answer (exit status 0), not an error. */
#include <stdio.h>
#include <string.h>

#include "backend/nvml.h"
#include "cli/cli.h"

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_u64(uint64_t v) {
    if (v == HR_NVML_UNKNOWN) printf("null");
    else printf("%llu", (unsigned long long)v);
}

static void json_num(double v, int known) { /* -1: unknown */
    if (!known) printf("null");
    else if (v == (double)(long long)v) printf("%lld", (long long)v);
    else printf("%.3f", v);
}

static void mib(char *buf, size_t n, uint64_t v) {
    if (v == HR_NVML_UNKNOWN) snprintf(buf, n, "-");
    else snprintf(buf, n, "%llu MiB", (unsigned long long)(v >> 20));
}

/* One GPU a line; its error instead when NVML fails for it. */
static bool print_gpus(hr_nvml *nv, bool json) {
    bool ok = true;
    int n = hr_nvml_count(nv);
    if (!json) {
        printf("headroom smi: NVIDIA driver %s, %d GPU%s\n", *hr_nvml_driver(nv) ? hr_nvml_driver(nv) : "(version unknown)",
               n, n == 1 ? "" : "s");
        if (n) printf("%3s  %-28s  %-16s  %19s  %5s  %5s  %15s\n", "GPU", "name", "bus id", "memory used / total",
                      "util", "temp", "power / limit");
    }
    for (int i = 0; i < n; i++) {
        hr_nvml_device d;
        hr_status st = hr_nvml_device_info(nv, i, &d);
        ok = ok && st == HR_OK;
        if (json) {
            printf("%s\n    {\"index\": %d, ", i ? "," : "", i);
            if (st) {
                printf("\"error\": ");
                json_str(hr_last_error());
                printf("}");
                continue;
            }
            printf("\"name\": ");
            json_str(d.name);
            printf(", \"bus_id\": ");
            json_str(d.bus_id);
            printf(", \"memory_total\": %llu, \"memory_used\": %llu, \"memory_free\": %llu, \"memory_reserved\": %llu, ",
                   (unsigned long long)d.mem_total, (unsigned long long)d.mem_used, (unsigned long long)d.mem_free,
                   (unsigned long long)d.mem_reserved);
            printf("\"utilization_gpu\": ");
            json_num(d.util_gpu, d.util_gpu >= 0);
            printf(", \"temperature_c\": ");
            json_num(d.temp_c, d.temp_c >= 0);
            printf(", \"power_w\": ");
            json_num(d.power_w, d.power_w >= 0);
            printf(", \"power_limit_w\": ");
            json_num(d.power_limit_w, d.power_limit_w >= 0);
            printf("}");
            continue;
        }
        if (st) {
            printf("%3d  NVML: %s\n", i, hr_last_error());
            continue;
        }
        char mem[48], util[16] = "-", temp[16] = "-", pw[16] = "-", lim[16] = "-", power[40];
        snprintf(mem, sizeof mem, "%llu / %llu MiB", (unsigned long long)(d.mem_used >> 20),
                 (unsigned long long)(d.mem_total >> 20));
        if (d.util_gpu >= 0) snprintf(util, sizeof util, "%d %%", d.util_gpu);
        if (d.temp_c >= 0) snprintf(temp, sizeof temp, "%d C", d.temp_c);
        if (d.power_w >= 0) snprintf(pw, sizeof pw, "%.0f W", d.power_w);
        if (d.power_limit_w >= 0) snprintf(lim, sizeof lim, "%.0f W", d.power_limit_w);
        snprintf(power, sizeof power, "%s / %s", pw, lim);
        printf("%3d  %-28.28s  %-16s  %19s  %5s  %5s  %15s\n", i, d.name[0] ? d.name : "?", d.bus_id[0] ? d.bus_id : "?",
               mem, util, temp, power);
    }
    return ok;
}

/* Every GPU's compute processes: GPU, PID, name, used memory. */
static bool print_procs(hr_nvml *nv, bool json) {
    bool ok = true;
    int shown = 0;
    if (!json) printf("\nprocesses\n%3s  %8s  %-24s  %12s\n", "GPU", "PID", "name", "used");
    for (int i = 0; i < hr_nvml_count(nv); i++) {
        hr_nvml_proc *p;
        int n;
        if (hr_nvml_processes(nv, i, &p, &n) != HR_OK) {
            ok = false;
            if (json) {
                printf("%s\n    {\"gpu\": %d, \"error\": ", shown++ ? "," : "", i);
                json_str(hr_last_error());
                printf("}");
            } else {
                printf("%3d  NVML: %s\n", i, hr_last_error());
            }
            continue;
        }
        for (int k = 0; k < n; k++) {
            if (json) {
                printf("%s\n    {\"gpu\": %d, \"pid\": %u, \"name\": ", shown++ ? "," : "", i, p[k].pid);
                json_str(p[k].name);
                printf(", \"used\": ");
                json_u64(p[k].used);
                printf("}");
            } else {
                char used[32];
                mib(used, sizeof used, p[k].used);
                /* a name missing here: a PID of another namespace (a container's host PID) */
                printf("%3d  %8u  %-24.24s  %12s\n", i, p[k].pid, p[k].name[0] ? p[k].name : "(not visible here)", used);
                shown++;
            }
        }
        hr_free(p);
    }
    if (!json && !shown) printf("  no compute processes\n");
    return ok;
}

int hr_cmd_smi(int argc, char **argv) {
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: headroom smi [--json]\n");
            return HR_EXIT_OK;
        } else {
            fprintf(stderr, "headroom smi: unknown option '%s' (headroom smi [--json])\n", argv[i]);
            return HR_EXIT_USAGE;
        }
    }
    char why[512];
    hr_nvml *nv = hr_nvml_open(why, sizeof why);
    if (!nv) {
        if (json) {
            printf("{\"driver\": null, \"why\": ");
            json_str(why);
            printf(", \"gpus\": [], \"processes\": []}\n");
        } else {
            printf("headroom smi: no NVIDIA driver found (%s); there is no GPU to show\n", why);
        }
        return HR_EXIT_OK;
    }
    if (json) {
        printf("{\"driver\": ");
        json_str(hr_nvml_driver(nv));
        printf(", \"gpus\": [");
    }
    bool ok = print_gpus(nv, json);
    if (json) printf("%s], \"processes\": [", hr_nvml_count(nv) ? "\n  " : "");
    if (hr_nvml_count(nv)) ok = print_procs(nv, json) && ok;
    if (json) printf("\n  ]}\n");
    hr_nvml_close(nv);
    return ok ? HR_EXIT_OK : HR_EXIT_ERROR;
}
