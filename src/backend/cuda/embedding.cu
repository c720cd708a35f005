/* embedding.cu — Embedding and PositionEmbedding on the GPU: rows gathered
 * (and added) forward; backward, the table's gradient summed in token order
 * by one thread a channel (Embedding: no atomics, the same bits every run) or
 * over the batch by one thread a (position, channel). */
#include "backend/cuda/common.cuh"

__global__ void k_embed(const float *idx, const float *w, float *y, int64_t n, int64_t C) {
    HR_GRID_STRIDE(i, n * C) {
        int64_t r = i / C;
        y[i] = w[(int64_t)idx[r] * C + (i - r * C)];
    }
}

__global__ void k_pos_embed(const float *x, const float *w, float *y, int64_t n, int64_t T, int64_t C) {
    HR_GRID_STRIDE(i, n * C) {
        int64_t r = i / C;
        y[i] = x[i] + w[(r % T) * C + (i - r * C)];
    }
}

__global__ void k_embed_bwd(const float *idx, const float *dy, float *dw, int64_t n, int64_t C) {
    HR_GRID_STRIDE(c, C)
    for (int64_t i = 0; i < n; i++) dw[(int64_t)idx[i] * C + c] += dy[i * C + c];
}

__global__ void k_pos_embed_bwd(const float *dy, float *dw, int64_t N, int64_t T, int64_t C, bool acc) {
    HR_GRID_STRIDE(i, T * C) {
        float s = 0;
        for (int64_t b = 0; b < N; b++) s += dy[b * T * C + i];
        dw[i] = acc ? dw[i] + s : s;
    }
}

extern "C" {

hr_status hr_cuda_embedding(void *ctx, const hr_kargs *a) {
    const hr_embedding_args *e = &a->emb;
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    if (a->op == HR_OP_EMBEDDING) /* the ids were checked on the host as the batch came in */
        k_embed<<<hr_grid(e->n * e->C), HR_THREADS, 0, st>>>(e->idx, e->w, e->y, e->n, e->C);
    else
        k_pos_embed<<<hr_grid(e->n * e->C), HR_THREADS, 0, st>>>(e->x, e->w, e->y, e->n, e->T, e->C);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_embedding_bwd(void *ctx, const hr_kargs *a) {
    const hr_embedding_args *e = &a->emb;
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    if (a->op == HR_OP_POS_EMBEDDING_BWD) { /* the table's rows past the sequence get no gradient */
        if (!e->acc && e->V > e->T)
            HR_CU(cudaMemsetAsync(e->dw + e->T * e->C, 0, sizeof(float) * (size_t)((e->V - e->T) * e->C), st));
        k_pos_embed_bwd<<<hr_grid(e->T * e->C), HR_THREADS, 0, st>>>(e->dy, e->dw, e->N, e->T, e->C, e->acc);
    } else {
        if (!e->acc) HR_CU(cudaMemsetAsync(e->dw, 0, sizeof(float) * (size_t)(e->V * e->C), st));
        k_embed_bwd<<<hr_grid(e->C, 64), 64, 0, st>>>(e->idx, e->dy, e->dw, e->n, e->C);
    }
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
