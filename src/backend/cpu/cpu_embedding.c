/* cpu_embedding.c — Embedding and PositionEmbedding on the CPU: rows copied
 * (and added) forward; the table's gradient summed in token order backward,
 * each thread owning a range of channels, so the bits never depend on the
 * thread count. */
#include "backend/cpu/cpu.h"

#include <string.h>

hr_status hr_cpu_embedding(void *ctx, const hr_kargs *a) {
    const hr_embedding_args *e = &a->emb;
    int64_t n = e->n, C = e->C, T = e->T;
    if (a->op == HR_OP_EMBEDDING) {
        for (int64_t i = 0; i < n; i++) { /* the ids were checked as the batch came in */
            int64_t id = (int64_t)e->idx[i];
            if (id < 0 || id >= e->V)
                return hr_error_set(HR_ERR_INVALID_ARG, "token id %.9g at position %lld is outside [0, %lld)",
                                    (double)e->idx[i], (long long)i, (long long)e->V);
        }
#pragma omp parallel for schedule(static) if (n * C > 65536)
        for (int64_t i = 0; i < n; i++) memcpy(e->y + i * C, e->w + (int64_t)e->idx[i] * C, sizeof(float) * (size_t)C);
        return HR_OK;
    }
#pragma omp parallel for schedule(static) if (n * C > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *x = e->x + i * C, *p = e->w + (i % T) * C;
        float *y = e->y + i * C;
        for (int64_t c = 0; c < C; c++) y[c] = x[c] + p[c];
    }
    return HR_OK;
}

hr_status hr_cpu_embedding_bwd(void *ctx, const hr_kargs *a) {
    const hr_embedding_args *e = &a->emb;
    int64_t n = e->n, C = e->C, T = e->T;
    bool pos = a->op == HR_OP_POS_EMBEDDING_BWD;
    /* the whole table: positions past the sequence get no gradient */
    if (!e->acc) memset(e->dw, 0, sizeof(float) * (size_t)(e->V * C));
    /* blocks of 16 channels: a thread's writes never meet another's */
#pragma omp parallel for schedule(static) if (n * C > 65536)
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        int64_t c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = pos ? i % T : (int64_t)e->idx[i];
            const float *g = e->dy + i * C;
            float *d = e->dw + r * C;
            for (int64_t c = c0; c < c1; c++) d[c] += g[c];
        }
    }
    return HR_OK;
}
