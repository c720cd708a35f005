/* embedding.cu — Embedding and PositionEmbedding on the GPU: rows gathered
 * (and added) forward. Backward, Embedding: the token positions sorted by id
 * (a radix sort that keeps token order), then a thread a (row, channel) sums
 * its tokens' gradients in that order: no atomics, the CPU's bits. Position-
 * Embedding: one thread a (position, channel) sums over the batch. Rows a
 * multiple of 4 wide go four channels a thread (float4). */
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

/* The same four channels a thread (C a multiple of 4, the tensors 16-byte
 * aligned): a quarter of the divisions, 16-byte loads and stores. */
__global__ void k_embed4(const float *idx, const float4 *w, float4 *y, int64_t n, int64_t c4) {
    HR_GRID_STRIDE(i, n * c4) {
        int64_t r = i / c4;
        y[i] = w[(int64_t)idx[r] * c4 + (i - r * c4)];
    }
}

__global__ void k_pos_embed4(const float4 *x, const float4 *w, float4 *y, int64_t n, int64_t T, int64_t c4) {
    HR_GRID_STRIDE(i, n * c4) {
        int64_t r = i / c4;
        float4 a = x[i], b = w[(r % T) * c4 + (i - r * c4)];
        y[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
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

/* A block a run of equal ids in the sorted keys (the blocks of positions
 * that start no run leave at once) and 128 channels (blockIdx.y), a thread a
 * channel: dw[v] (+)= the dy of v's tokens in token order (the sort is
 * stable), as the CPU adds them. Rows no token has are not visited (zeroed
 * before, unless accumulating). A frequent token (a space in text: a sixth of
 * the positions) makes a long sum: each warp reads the next 32 of the run's
 * positions at once and has their 32 values in flight before it adds them,
 * in order. */
enum { EMB_CH = 128, EMB_AHEAD = 32 };
__global__ void k_embed_bwd(const float *dy, float *dw, int64_t C, const int *keys, const int *pos, int n, bool acc) {
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x;
    if (i > 0 && keys[i - 1] == keys[i]) return; /* not the start of a run */
    const int v = keys[i];
    const int64_t c = (int64_t)blockIdx.y * EMB_CH + threadIdx.x;
    const bool mine = c < C;
    float s = acc && mine ? dw[(int64_t)v * C + c] : 0.0f;
    for (int k = i; k < n; k += EMB_AHEAD) {
        int key = k + lane < n ? keys[k + lane] : -1;
        unsigned same = __ballot_sync(0xffffffffu, key == v);
        int m = __ffs(~same) - 1; /* the run's positions among these 32: a prefix */
        if (m < 0) m = 32;
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
        if (m < EMB_AHEAD) break;
    }
    if (mine) dw[(int64_t)v * C + c] = s;
}

/* The same with four channels a thread (float4; C a multiple of 4, at most
 * 4096): a block a run, its C / 4 threads rounded up to whole warps, and
 * EMB_AHEAD4 positions' rows in flight at once; each channel's sum in the
 * same order, so the same bits. A step of random tokens is some 16,000 runs
 * of one: a sixth of the blocks the kernel above takes. */
enum { EMB_AHEAD4 = 8 };
__global__ void k_embed_bwd4(const float *dy, float *dw, int64_t C, const int *keys, const int *pos, int n, bool acc) {
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x;
    if (i > 0 && keys[i - 1] == keys[i]) return; /* not the start of a run */
    const int v = keys[i];
    const int64_t c4 = C / 4, c = threadIdx.x;
    const bool mine = c < c4;
    const float4 *dy4 = (const float4 *)dy;
    float4 *row = (float4 *)dw + (int64_t)v * c4;
    float4 s = acc && mine ? row[c] : make_float4(0, 0, 0, 0);
    for (int k = i; k < n; k += EMB_AHEAD4) {
        int key = lane < EMB_AHEAD4 && k + lane < n ? keys[k + lane] : -1;
        unsigned same = __ballot_sync(0xffffffffu, key == v) & ((1u << EMB_AHEAD4) - 1);
        int m = __ffs(~same) - 1; /* the run's positions among these: a prefix, at most EMB_AHEAD4 */
        int p = lane < m ? pos[k + lane] : 0;
        float4 x[EMB_AHEAD4];
#pragma unroll
        for (int j = 0; j < EMB_AHEAD4; j++) {
            int64_t r = __shfl_sync(0xffffffffu, p, j);
            x[j] = mine && j < m ? dy4[r * c4 + c] : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < EMB_AHEAD4; j++)
            if (j < m) s.x += x[j].x, s.y += x[j].y, s.z += x[j].z, s.w += x[j].w; /* skipped, not + 0: -0 stays */
        if (m < EMB_AHEAD4) break;
    }
    if (mine) row[c] = s;
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
    bool four = e->C % 4 == 0 && hr_al(e->w, 16) && hr_al(e->y, 16) && (a->op == HR_OP_EMBEDDING || hr_al(e->x, 16));
    int64_t c4 = e->C / 4;
    if (a->op == HR_OP_EMBEDDING && four) /* the ids were checked on the host as the batch came in */
        k_embed4<<<hr_grid(e->n * c4), HR_THREADS, 0, st>>>(e->idx, (const float4 *)e->w, (float4 *)e->y, e->n, c4);
    else if (a->op == HR_OP_EMBEDDING)
        k_embed<<<hr_grid(e->n * e->C), HR_THREADS, 0, st>>>(e->idx, e->w, e->y, e->n, e->C);
    else if (four)
        k_pos_embed4<<<hr_grid(e->n * c4), HR_THREADS, 0, st>>>((const float4 *)e->x, (const float4 *)e->w,
                                                                (float4 *)e->y, e->n, e->T, c4);
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
        if (!e->acc) HR_CU(cudaMemsetAsync(e->dw, 0, sizeof(float) * (size_t)(e->V * e->C), st)); /* rows no token has */
        dim3 grid((unsigned)n, (unsigned)((e->C + EMB_CH - 1) / EMB_CH));
        bool four = e->C % 4 == 0 && e->C <= 4096 && hr_al(e->dy, 16) && hr_al(e->dw, 16);
        unsigned th = (unsigned)((e->C / 4 + 31) / 32 * 32);
        if (n > 0 && four)
            k_embed_bwd4<<<(unsigned)n, th, 0, st>>>(e->dy, e->dw, e->C, kout, vout, n, e->acc);
        else if (n > 0)
            k_embed_bwd<<<grid, EMB_CH, 0, st>>>(e->dy, e->dw, e->C, kout, vout, n, e->acc);
    }
    HR_CU(cudaGetLastError());
    return HR_OK;
}

} /* extern "C" */
