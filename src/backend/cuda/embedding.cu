/* embedding.cu — Embedding and PositionEmbedding on the GPU: rows gathered
 * (and added) forward. Backward, Embedding: the token positions sorted by id
 * (a radix sort that keeps token order), then a thread a (row, channel) sums
 * its tokens' gradients in that order: no atomics, the CPU's bits. Position-
 * Embedding: one thread a (position, channel) sums over the batch. */
#include <cub/device/device_radix_sort.cuh>

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

/* The ids as ints and their positions 0..n-1, the keys and values of a
 * stable radix sort by id. */
__global__ void k_embed_keys(const float *idx, int64_t n, int *keys, int *vals) {
    HR_GRID_STRIDE(i, n) {
        keys[i] = (int)idx[i];
        vals[i] = (int)i;
    }
}

/* The first place in sorted[0..n) holding an id >= v. */
__device__ int lower_bound(const int *sorted, int n, int64_t v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sorted[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* A block a row v (grid-stride) and 128 channels (blockIdx.y), a thread a
 * channel: dw[v] (+)= the dy of v's tokens in token order (the sort is
 * stable), as the CPU adds them. A frequent token (a space in text: a sixth
 * of the positions) makes a long sum: each warp reads the next 32 of the
 * row's positions at once and has their 32 rows' values in flight before
 * it adds them, in order; one load at a time took milliseconds a step. */
enum { EMB_CH = 128, EMB_AHEAD = 32 };
__global__ void k_embed_bwd(const float *dy, float *dw, int64_t V, int64_t C, const int *keys, const int *pos, int n,
                            bool acc) {
    const int lane = threadIdx.x & 31;
    const int64_t c = (int64_t)blockIdx.y * EMB_CH + threadIdx.x;
    const bool mine = c < C;
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        int a = lower_bound(keys, n, v), b = lower_bound(keys, n, v + 1);
        float s = acc && mine ? dw[v * C + c] : 0.0f;
        for (int k = a; k < b; k += EMB_AHEAD) {
            int m = b - k < EMB_AHEAD ? b - k : EMB_AHEAD;
            int p = lane < m ? pos[k + lane] : 0;
            float x[EMB_AHEAD];
#pragma unroll
            for (int j = 0; j < EMB_AHEAD; j++) {
                int64_t r = __shfl_sync(0xffffffffu, p, j);
                x[j] = mine && j < m ? dy[r * C + c] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < EMB_AHEAD; j++)
                if (j < m) s += x[j]; /* skipped, not + 0: s may be -0 */
        }
        if (mine) dw[v * C + c] = s;
    }
}

__global__ void k_pos_embed_bwd(const float *dy, float *dw, int64_t N, int64_t T, int64_t C, bool acc) {
    HR_GRID_STRIDE(i, T * C) {
        float s = 0;
        for (int64_t b = 0; b < N; b++) s += dy[b * T * C + i];
        dw[i] = acc ? dw[i] + s : s;
    }
}

static int id_bits(int64_t V) { /* bits that hold every id < V */
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) < V) b++;
    return b;
}

/* CUB's scratch for a sort of n pairs */
static size_t sort_bytes(int64_t n, int64_t V) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int *)nullptr, (int *)nullptr, (const int *)nullptr,
                                    (int *)nullptr, (int)n, 0, id_bits(V));
    return bytes;
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

/* Embedding.backward's sort: keys and positions in and out (4 x n ints),
 * then CUB's scratch */
size_t hr_cuda_embedding_bwd_workspace(hr_cuda *c, const hr_kargs *a) {
    if (a->op != HR_OP_EMBEDDING_BWD || a->emb.n > INT_MAX) return 0;
    return hr_align_up(sizeof(int) * 4 * (size_t)a->emb.n, 256) + sort_bytes(a->emb.n, a->emb.V);
}

hr_status hr_cuda_embedding_bwd(void *ctx, const hr_kargs *a) {
    const hr_embedding_args *e = &a->emb;
    cudaStream_t st = ((hr_cuda *)ctx)->stream;
    if (a->op == HR_OP_POS_EMBEDDING_BWD) { /* the table's rows past the sequence get no gradient */
        if (!e->acc && e->V > e->T)
            HR_CU(cudaMemsetAsync(e->dw + e->T * e->C, 0, sizeof(float) * (size_t)((e->V - e->T) * e->C), st));
        k_pos_embed_bwd<<<hr_grid(e->T * e->C), HR_THREADS, 0, st>>>(e->dy, e->dw, e->N, e->T, e->C, e->acc);
    } else {
        if (e->n > INT_MAX) return hr_error_set(HR_ERR_UNSUPPORTED, "Embedding.backward: more than 2^31 tokens a step");
        if ((e->C + EMB_CH - 1) / EMB_CH > 65535)
            return hr_error_set(HR_ERR_UNSUPPORTED, "Embedding.backward: %lld channels, more than %d", (long long)e->C,
                                65535 * EMB_CH);
        int n = (int)e->n, *kin = (int *)a->ws, *vin = kin + n, *kout = vin + n, *vout = kout + n;
        void *tmp = (char *)a->ws + hr_align_up(sizeof(int) * 4 * (size_t)n, 256);
        size_t tmp_bytes = sort_bytes(n, e->V);
        k_embed_keys<<<hr_grid(n), HR_THREADS, 0, st>>>(e->idx, n, kin, vin);
        HR_CU(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, kin, kout, vin, vout, n, 0, id_bits(e->V), st));
        dim3 grid((unsigned)(e->V < HR_MAX_GRID ? e->V : HR_MAX_GRID), (unsigned)((e->C + EMB_CH - 1) / EMB_CH));
        k_embed_bwd<<<grid, EMB_CH, 0, st>>>(e->dy, e->dw, e->V, e->C, kout, vout, n, e->acc);
    }
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
