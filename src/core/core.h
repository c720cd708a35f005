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
/* CUDA training: a batch input below this size is uploaded into a second
 * buffer while the step before it runs, and the step is one graph; larger
 * inputs go up in pieces that the first node takes as they land (that hides
 * the transfer better than a graph saves: backend/cuda/graph.c). */
#define HR_STAGED_INPUT_MAX ((size_t)32 << 20)
#define HR_DEVICE_PAGE ((size_t)2 << 20) /* cudaMalloc hands out memory in pages of this size */
/* What cudaMemGetInfo calls free that the driver still keeps for itself when
 * the arena is allocated (docs/benchmarks.md, largest batch): fit tests
 * leave it out of what is free. */
#define HR_DEVICE_RESERVE ((size_t)32 << 20)

#if defined(__GNUC__)
#define HR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HR_PRINTF(a, b)
#endif

/* ---- dtypes ---------------------------------------------------------------- */
/* hr_dtype itself is in headroom.h (the kernels' arguments carry it). */
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

/* headroom's version, part of the caches' keys (plan/cost.c,
 * backend/cuda/conv_cache.c): bump it when kernels change speed, so that what
 * was measured with the old ones is not used. */
#ifndef HR_VERSION
#define HR_VERSION "0.5.3"
#endif

/* A text file written whole or not at all: hr_file_begin opens a temporary
 * file beside path (mkstemp; tmp receives its name, n >= strlen(path) + 8),
 * with a plain file's mode; hr_file_commit flushes, syncs and renames it
 * over path, or removes it and leaves path as it was. NULL / a status, with
 * the error set naming the path. */
FILE *hr_file_begin(const char *path, char *tmp, size_t n);
hr_status hr_file_commit(FILE *f, const char *tmp, const char *path);
/* The folder of headroom's caches (what was measured on this machine):
 * $HR_CACHE_DIR, else $XDG_CACHE_HOME/headroom, else $HOME/.cache/headroom;
 * hr_malloc'd, NULL when none is set (or out of memory). */
char *hr_cache_dir(void);
/* mkdir -p: false with errno set when dir is not a folder at the end. */
bool hr_make_dirs(const char *dir);
/* src as a piece of a file name (a device's name, a driver): letters,
 * digits, '.' and '-' as they are, anything else '_'; at most n - 1 bytes. */
void hr_file_name_part(char *dst, const char *src, size_t n);

/* Fault injection: returns true when the allocation about to happen must fail.
 * Backends call it before cudaMalloc / cudaHostAlloc too. */
bool hr_fault_should_fail(hr_memkind kind);

/* ---- random numbers -------------------------------------------------------- */
/* A function nvcc compiles for the GPU's kernels too: one definition for the
 * host's and the device's draws. */
#ifdef __CUDACC__
#define HR_HOST_DEVICE __host__ __device__
#else
#define HR_HOST_DEVICE
#endif

/* The counter-based generator shared by init, random masks and the golden tests:
 * splitmix64 of a stream-keyed counter (see docs/golden.md). */
HR_HOST_DEVICE static inline uint64_t hr_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
/* The key of stream `stream` of generator `seed`. */
HR_HOST_DEVICE static inline uint64_t hr_rng_key(uint64_t seed, uint64_t stream) {
    return (seed * 0x100000001B3ULL) ^ (stream * 0x9E3779B97F4A7C15ULL);
}
/* Uniform [0, 1) from (seed, stream, i), as scripts/hr_rng.py computes it:
 * a multiple of 2^-24, the same bits on the host and the device. */
HR_HOST_DEVICE static inline float hr_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    return (float)(hr_mix64(hr_rng_key(seed, stream) + i) >> 40) * (1.0f / 16777216.0f);
}

/* Attention's drop draws (docs/golden.md), cheap enough for a kernel to make
 * one per probability: a 32-bit key per head and 65536 x 65536 block of
 * (query i, key j) pairs from the generator above, then a 32-bit avalanche
 * of the key xor the pair's low bits (a bijection: no two pairs of a block
 * draw alike). hr_hash32 is Wellons' "lowbias32". */
HR_HOST_DEVICE static inline uint32_t hr_hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}
HR_HOST_DEVICE static inline uint32_t hr_attn_block_key(uint64_t seed, uint64_t stream, uint64_t n, uint64_t h,
                                                        uint64_t H, uint64_t i, uint64_t j) {
    return (uint32_t)(hr_mix64(hr_rng_key(seed, stream) + (((n * H + h) << 32) | ((i >> 16) << 16) | (j >> 16))) >> 32);
}
/* u in [0, 1), a multiple of 2^-24, for pair (i, j) of the block keyed bkey */
HR_HOST_DEVICE static inline float hr_attn_uniform(uint32_t bkey, uint64_t i, uint64_t j) {
    uint32_t x = hr_hash32(bkey ^ (uint32_t)(((i & 0xffffU) << 16) | (j & 0xffffU)));
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* ---- half types: round to nearest even, NaN stays NaN, overflow gives inf -- */
uint16_t hr_f32_to_bf16(float f);
float hr_bf16_to_f32(uint16_t h);
uint16_t hr_f32_to_f16(float f);
float hr_f16_to_f32(uint16_t h);
/* Element i of an F32, BF16 or F16 array as a float, and the reverse. */
static inline float hr_load_f(const void *p, hr_dtype t, int64_t i) {
    return t == HR_BF16 ? hr_bf16_to_f32(((const uint16_t *)p)[i])
         : t == HR_F16  ? hr_f16_to_f32(((const uint16_t *)p)[i])
                        : ((const float *)p)[i];
}
static inline void hr_store_f(void *p, hr_dtype t, int64_t i, float v) {
    if (t == HR_BF16) ((uint16_t *)p)[i] = hr_f32_to_bf16(v);
    else if (t == HR_F16) ((uint16_t *)p)[i] = hr_f32_to_f16(v);
    else ((float *)p)[i] = v;
}
static inline bool hr_dtype_is_half(hr_dtype t) { return t == HR_BF16 || t == HR_F16; }

/* ---- options --------------------------------------------------------------- */
/* Every HR_* environment switch, read in one place (core/options.c) when a
 * session or a backend is made, never in a hot path; README's table of
 * switches documents them. Unset or malformed: the default. */
typedef struct {
    int profile;            /* HR_PROFILE: 0 off, 1 host time per node, 2 device events */
    int cudnn_algo;         /* HR_CUDNN_ALGO: HR_ALGO_PRECISE (default), _DETERMINISTIC, _HEURISTIC, _FASTEST */
    bool cudnn_autotune;    /* HR_CUDNN_AUTOTUNE (default on; 0 off) */
    bool cudnn_cache;       /* HR_CUDNN_CACHE (default on; 0: timed choices not kept between runs) */
    long long cudnn_fast_ws_mib; /* HR_CUDNN_FASTEST_WS_MIB: a fastest-mode algorithm's largest workspace
                                    (0: the backend's default) */
    bool cudnn_legacy;      /* HR_CUDNN_API=legacy */
    bool cudnn_attention;   /* HR_CUDNN_ATTENTION (default on; 0 off): half causal attention by cuDNN's fused
                               flash attention where it has an engine */
    int64_t cudnn_attention_group; /* HR_CUDNN_ATTENTION_GROUP: at most this many sequences a cuDNN attention
                                      call (tests; 0: as many as 64 MiB of F32 dQ sums hold) */
    bool cudnn_half_reduction; /* HR_CUDNN_HALF_REDUCTION: half convolutions may reduce in the half type */
    bool cudnn_half_legacy; /* HR_CUDNN_HALF_LEGACY (default on; 0 off): half forward and backward-data
                               convolutions on the legacy API's algorithms */
    int64_t splitk_min_k;   /* HR_CUDA_SPLITK: shortest k split (default HR_SPLITK_DEFAULT); 0 off */
    bool no_lt;             /* HR_CUDA_LT=0: Linear's bias filled before the product, not in cuBLASLt's epilogue;
                               no product through cuBLASLt */
    int64_t gemm_time_min;  /* HR_CUDA_GEMM_TIME: the multiply-adds from which a product's algorithms are timed
                               (default HR_GEMM_TIME_DEFAULT); 0 never */
    int64_t ce_piece_mib;   /* HR_CE_PIECE_MIB: LinearCrossEntropy's piece of logits on the GPU, MiB (0: the
                               default, 512; larger pieces: fewer passes over its F32 dW, more workspace) */
    bool ce_two_pass;       /* HR_CE_ONE_PASS=0: LinearCrossEntropy's pieces read twice (statistics, then the
                               gradient), not staged a row a block in shared memory */
    bool no_fuse_act;       /* HR_FUSE_ACT=0: an activation stays a node of its own each way rather than going
                               into the epilogue of the Linear before it (ops/activation.c says which do) */
    bool no_fuse_add;       /* HR_FUSE_ADD=0: in training, a residual Add stays a node of its own rather than going
                               into the layer norm that reads its sum */
    bool no_fuse_bias;      /* HR_FUSE_BIAS=0: in mixed-precision training, a Linear's bias gradient stays its own
                               pass over dy rather than going into the layer norm backward that writes dy */
    bool no_hold;           /* HR_HOLD_COPIES=0: mixed precision casts each weight to half in every forward rather
                               than holding the half copy from step to step, written by the update */
    bool ln_two_kernels;    /* HR_LN_ONE_PASS=0: the layer norm's backward on the GPU as two kernels (dx, then the column
                               sums), not one pass reading x and dy once */
    bool no_fold;           /* HR_FOLD_CASTS=0: mixed precision keeps a norm's cast to half (half_out) a node of its own */
    int64_t piece_min;      /* HR_CUDA_PIECE_MIN: smallest input sent in pieces, bytes (default 2 MiB); 0 never */
    int stage_threads;      /* HR_STAGE_THREADS: threads staging a batch (default 16) */
    bool cuda_verbose;      /* HR_CUDA_VERBOSE: the engines considered and timed */
    bool cuda_graph;        /* HR_CUDA_GRAPH (default on; 0 off): a training step captured once and replayed */
    bool device_accumulate; /* HR_DEVICE_ACCUMULATE (default on; 0 off): accumulation's micro-batches queued
                               one after another, their losses summed on the device (off: the host reads
                               each one's loss before the next) */
    bool cuda_poison;       /* HR_CUDA_POISON: the arena starts as NaN (tests) */
    int64_t max_call_elems; /* HR_CUDA_MAX_CALL_ELEMS: elements a library call takes (tests lower it); 0: INT_MAX */
    int dnnl;               /* HR_DNNL: CPU convolutions 0 im2col only, 1 (default) the fastest way per shape
                               (im2col or oneDNN), 2 oneDNN on plain layouts, 3 oneDNN on its blocked layouts */
    bool sgemm_dnnl;        /* HR_SGEMM: the CPU's matrix products by oneDNN's sgemm where it loads (default),
                               or by OpenBLAS (HR_SGEMM=openblas) */
} hr_options;
#define HR_GEMM_TIME_DEFAULT ((int64_t)1 << 30)
enum { HR_ALGO_PRECISE = 0, HR_ALGO_DETERMINISTIC, HR_ALGO_HEURISTIC, HR_ALGO_FASTEST };
#define HR_SPLITK_DEFAULT 2048
hr_options hr_options_read(void);

/* hr_mem_host_arena: the CPU backend's arena (64-byte aligned). */
void *hr_arena_host_alloc(size_t n);
void hr_arena_host_free(void *p);

#endif
