/* core.c — dtypes, shapes, checked size arithmetic, the thread's last error,
 * and the allocation functions with their fault injection. */
#include "core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes ---------------------------------------------------------------- */
size_t hr_dtype_size(hr_dtype t) {
    switch (t) {
    case HR_F32: case HR_I32: return 4;
    case HR_F16: case HR_BF16: return 2;
    case HR_U8: return 1;
    default: return 0;
    }
}

const char *hr_dtype_name(hr_dtype t) {
    static const char *names[] = {"F32", "F16", "BF16", "I32", "U8"};
    return (unsigned)t < HR_DTYPE_COUNT ? names[t] : "?";
}

/* ---- half types ---------------------------------------------------------- */
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t hr_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even; a carry into the exponent is right */
    return (uint16_t)(u >> 16);
}

float hr_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t hr_f32_to_f16(float f) {
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds past 65504: inf */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        /* the value in units of 2^-24, rounded to nearest even */
        float v = bits_f32(a) * 16777216.0f;                  /* exact: a power-of-two scale */
        uint32_t q = (uint32_t)v;
        float r = v - (float)q;
        if (r > 0.5f || (r == 0.5f && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, round the 13 dropped mantissa bits to even */
    uint32_t m = a + ((uint32_t)(15 - 127) << 23);
    m += 0xfffu + ((m >> 13) & 1);
    return (uint16_t)(sign | (m >> 13));
}

float hr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 127 - 15) << 23) | (m << 13));
}

/* ---- shapes ---------------------------------------------------------------- */
hr_shape hr_shape_make(int ndim, const int64_t *d) {
    hr_shape s = {0};
    s.ndim = ndim;
    for (int i = 0; i < ndim && i < HR_MAX_DIMS; i++) s.d[i] = d[i];
    return s;
}

int64_t hr_shape_numel(const hr_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        if (!hr_mul_ok(n, s->d[i], &n)) return -1;
    return n;
}

bool hr_shape_eq(const hr_shape *a, const hr_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

const char *hr_shape_str(const hr_shape *s, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < s->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)s->d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

bool hr_mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    return !__builtin_mul_overflow(a, b, out);
}

bool hr_add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

size_t hr_align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- errors ---------------------------------------------------------------- */
static _Thread_local char err_msg[4096];
static _Thread_local hr_status err_status;

hr_status hr_error_set(hr_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    err_status = st;
    return st;
}

hr_status hr_error_prefix(const char *fmt, ...) {
    char pre[512], old[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t keep = strnlen(err_msg, sizeof old - 1);
    memcpy(old, err_msg, keep);
    old[keep] = 0;
    size_t k = strlen(pre);
    if (k > sizeof err_msg - 3) k = sizeof err_msg - 3;
    memcpy(err_msg, pre, k);
    memcpy(err_msg + k, ": ", 2);
    size_t rest = sizeof err_msg - k - 3, ol = strlen(old);
    if (ol > rest) ol = rest;
    memcpy(err_msg + k + 2, old, ol);
    err_msg[k + 2 + ol] = 0;
    return err_status;
}

void hr_error_clear(void) {
    err_msg[0] = 0;
    err_status = HR_OK;
}

const char *hr_last_error(void) { return err_msg[0] ? err_msg : "no error"; }
hr_status hr_last_status(void) { return err_status; }

const char *hr_status_name(hr_status st) {
    switch (st) {
    case HR_OK: return "ok";
    case HR_ERR_INVALID_ARG: return "invalid argument";
    case HR_ERR_SHAPE: return "shape error";
    case HR_ERR_PARSE: return "parse error";
    case HR_ERR_IO: return "I/O error";
    case HR_ERR_FORMAT: return "format error";
    case HR_ERR_OOM: return "out of host memory";
    case HR_ERR_DEVICE_OOM: return "out of device memory";
    case HR_ERR_NUMERIC: return "numeric error";
    case HR_ERR_UNSUPPORTED: return "unsupported";
    case HR_ERR_DEVICE: return "device error";
    case HR_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

/* ---- allocation with fault injection ------------------------------------- */
/* Counting is global (not per thread): the loader thread's allocations are
 * made to fail too. A plain counter is enough since tests inject faults from
 * one thread while nothing else allocates. */
static int64_t fault_count, fault_at;

int64_t hr_fault_fail_at(int64_t n) {
    int64_t made = fault_count;
    fault_count = 0;
    fault_at = n;
    return made;
}

bool hr_fault_should_fail(hr_memkind kind) {
    (void)kind;
    int64_t k = __atomic_add_fetch(&fault_count, 1, __ATOMIC_RELAXED);
    return fault_at > 0 && k == fault_at;
}

static const char *memkind_name(hr_memkind k) {
    static const char *n[] = {"host", "host arena", "device", "pinned host"};
    return (unsigned)k < HR_MEMKIND_COUNT ? n[k] : "?";
}

static void *oom(hr_memkind k, size_t n) {
    hr_error_set(HR_ERR_OOM, "could not allocate %zu bytes of %s memory; free some memory or plan a smaller batch",
                 n, memkind_name(k));
    return NULL;
}

void *hr_malloc(size_t n) {
    if (hr_fault_should_fail(HR_MEM_HOST)) return oom(HR_MEM_HOST, n);
    void *p = malloc(n ? n : 1);
    return p ? p : oom(HR_MEM_HOST, n);
}

void *hr_calloc(size_t count, size_t size) {
    if (hr_fault_should_fail(HR_MEM_HOST)) return oom(HR_MEM_HOST, count * size);
    void *p = calloc(count ? count : 1, size ? size : 1);
    return p ? p : oom(HR_MEM_HOST, count * size);
}

void *hr_realloc(void *p, size_t n) {
    if (hr_fault_should_fail(HR_MEM_HOST)) return oom(HR_MEM_HOST, n);
    void *q = realloc(p, n ? n : 1);
    return q ? q : oom(HR_MEM_HOST, n);
}

void hr_free(void *p) { free(p); }

char *hr_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = hr_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *hr_arena_host_alloc(size_t n) {
    if (hr_fault_should_fail(HR_MEM_ARENA_HOST)) return oom(HR_MEM_ARENA_HOST, n);
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? hr_align_up(n, 64) : 64) != 0) return oom(HR_MEM_ARENA_HOST, n);
    return p;
}

void hr_arena_host_free(void *p) { free(p); }

const char *hr_precision_name(hr_precision p) {
    return p == HR_PREC_FP32 ? "fp32" : p == HR_PREC_BF16 ? "bf16" : p == HR_PREC_FP16 ? "fp16" : "?";
}

FILE *hr_file_begin(const char *path, char *tmp, size_t n) {
    snprintf(tmp, n, "%s.XXXXXX", path); /* mkstemp's template: it fills the six X's */
    int fd = mkstemp(tmp);
    if (fd < 0) {
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash == path ? 1 : slash - path) : 1;
        hr_error_set(HR_ERR_IO, "cannot write %s: cannot create a file in %.*s: %s%s", path, dl, slash ? path : ".",
                     strerror(errno), errno == ENOENT ? " (make the directory first)" : "");
        return NULL;
    }
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um); /* mkstemp makes 0600 */
    FILE *f = fdopen(fd, "w");
    if (!f) {
        hr_error_set(HR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
    }
    return f;
}

hr_status hr_file_commit(FILE *f, const char *tmp, const char *path) {
    hr_status st = HR_OK;
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) st = hr_error_set(HR_ERR_IO, "writing %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == HR_OK) st = hr_error_set(HR_ERR_IO, "closing %s: %s", tmp, strerror(errno));
    if (st == HR_OK && rename(tmp, path) != 0)
        st = hr_error_set(HR_ERR_IO, "renaming %s to %s: %s", tmp, path, strerror(errno));
    if (st != HR_OK) unlink(tmp); /* the previous file, if any, is untouched */
    return st;
}

char *hr_cache_dir(void) {
    const char *env = getenv("HR_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *base = env && *env ? env : xdg && *xdg ? xdg : home && *home ? home : NULL;
    const char *sub = env && *env ? "" : xdg && *xdg ? "/headroom" : "/.cache/headroom";
    if (!base) return NULL;
    char *dir = hr_malloc(strlen(base) + strlen(sub) + 1);
    if (dir) sprintf(dir, "%s%s", base, sub);
    return dir;
}

bool hr_make_dirs(const char *dir) {
    char p[4096];
    size_t n = strlen(dir);
    if (n >= sizeof p) return errno = ENAMETOOLONG, false;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return false;
        p[i] = c;
    }
    struct stat sb;
    return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? true : (errno = ENOTDIR, false);
}

void hr_file_name_part(char *dst, const char *src, size_t n) {
    size_t k = 0;
    for (; *src && k + 1 < n; src++, k++) {
        char c = *src;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
        dst[k] = ok ? c : '_';
    }
    if (n) dst[k] = 0;
}
