/* gpus.h — measured facts about the GPUs headroom has run on, for plans made
 * where there is no GPU (`plan --device cuda --gpu h100` on a laptop). */
#ifndef HR_GPUS_H
#define HR_GPUS_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/ops.h"

typedef struct {
    const char *key;        /* what --gpu takes: "h100" */
    const char *name;       /* as the driver names it */
    size_t total_bytes;     /* cudaMemGetInfo's total */
    size_t overhead_bytes;  /* the runtime overhead headroom measured there: CUDA context, cuBLAS, cuDNN */
    const char *measured;   /* driver, CUDA, cuDNN and date of that measurement */
} hr_gpu_info;

/* The GPU --gpu names (case does not matter), or NULL. */
const hr_gpu_info *hr_gpu_find(const char *key);
/* The keys, ", "-separated, for messages. */
const char *hr_gpu_keys(void);
/* The ops the CUDA backend runs in BF16/F16 itself (its takes_half), known
 * without a GPU so that a plan for one made on the CPU has the GPU's bytes:
 * every op that autocast may hand a half type (its rule is not HR_AC_FP32). */
bool hr_gpu_takes_half(hr_op op, hr_dtype dt);

/* LinearCrossEntropy's piece of logits on the GPU (backend/cuda/cuda_gemm.c):
 * 512 MiB of rows at most unless HR_CE_PIECE_MIB says. */
#define HR_GPU_CE_PIECE_BYTES ((size_t)512 << 20)
/* The workspace the CUDA backend plans for a node, where its size needs no
 * GPU: LinearCrossEntropy's (the padded weight, the piece, each row's
 * log-sum-exp and loss term, cuBLAS's 4 MiB: 582 MiB for GPT-2's head at
 * batch 16); else 0. A plan for a GPU made on the CPU counts it. */
size_t hr_gpu_workspace(const hr_kargs *a);

#endif
