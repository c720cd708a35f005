/* core.h — dtypes, shapes, status codes, error messages and the one allocation
 * function per memory kind that every other file goes through. */
#ifndef HR_CORE_H
#define HR_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "headroom.h"

#define HR_MAX_DIMS 4
#define HR_ALIGN 256 /* every planned tensor starts on this boundary (CUDA likes 256) */

#if defined(__GNUC__)
#define HR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HR_PRINTF(a, b)
#endif

/* ---- dtypes ---------------------------------------------------------------- */
typedef enum { HR_F32 = 0, HR_F16, HR_BF16, HR_I32, HR_U8, HR_DTYPE_COUNT } hr_dtype;
size_t hr_dtype_size(hr_dtype t);
const char *hr_dtype_name(hr_dtype t); /* safetensors spelling: F32, F16, BF16, I32, U8 */

/* ---- shapes ---------------------------------------------------------------- */
typedef struct {
    int ndim;
    int64_t d[HR_MAX_DIMS];
} hr_shape;

hr_shape hr_shape_make(int ndim, const int64_t *d);
int64_t hr_shape_numel(const hr_shape *s); /* -1 if the product overflows int64 */
bool hr_shape_eq(const hr_shape *a, const hr_shape *b);
/* "[64, 3, 32, 32]" into buf; returns buf */
const char *hr_shape_str(const hr_shape *s, char *buf, size_t n);

/* Checked arithmetic for sizes: false on overflow. Plans for batches of 10^12
 * must report, not wrap around. */
bool hr_mul_ok(int64_t a, int64_t b, int64_t *out);
bool hr_add_ok(int64_t a, int64_t b, int64_t *out);
size_t hr_align_up(size_t n, size_t a);

/* ---- errors ---------------------------------------------------------------- */
/* The last error of this thread: a status and a message that says what failed,
 * where, and what to do. Set by the function that detects it; callers add
 * context with hr_error_prefix. */
hr_status hr_error_set(hr_status st, const char *fmt, ...) HR_PRINTF(2, 3);
hr_status hr_error_prefix(const char *fmt, ...) HR_PRINTF(1, 2);
void hr_error_clear(void);

/* ---- allocation ------------------------------------------------------------ */
/* Every byte headroom takes goes through one of these, so a test can make the
 * Nth allocation of any kind fail (hr_fault_fail_at) and check that the failure
 * comes back as HR_ERR_OOM with nothing leaked. */
typedef enum { HR_MEM_HOST = 0, HR_MEM_ARENA_HOST, HR_MEM_DEVICE, HR_MEM_PINNED, HR_MEMKIND_COUNT } hr_memkind;

void *hr_malloc(size_t n);            /* bookkeeping; NULL + error on failure */
void *hr_calloc(size_t count, size_t size);
void *hr_realloc(void *p, size_t n);  /* on failure p is untouched */
void hr_free(void *p);
char *hr_strdup(const char *s);

/* Fault injection: returns true when the allocation about to happen must fail.
 * Backends call it before cudaMalloc / cudaHostAlloc too. */
bool hr_fault_should_fail(hr_memkind kind);

/* hr_mem_host_arena: the CPU backend's arena (64-byte aligned). */
void *hr_arena_host_alloc(size_t n);
void hr_arena_host_free(void *p);

#endif
