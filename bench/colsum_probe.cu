/* colsum_probe.cu — how fast can a bias gradient's column sums run? For the
 * (16,384 x C) bf16 dy of GPT-2's Linears (C = 768, 2304, 3072), forms of
 * the split column sum (block (b, k): 256 columns, rows [k N / S, (k+1) N /
 * S), 8 warps of row groups, then a finish kernel adding the S partials in
 * order), each timed with events (median of 25 after 5 warm-ups):
 *   d1  every element widened to double and added (src/backend/cuda/channel.cu's k_col_part at the time)
 *   fR  R rows' loads in flight, added in float in row order, the run's sum into the double
 *   rR  a block a slice of whole rows (C / 8 threads, each row one contiguous load), runs of R rows as fR
 * at several block counts. Every form's sums are fixed by the shape (no
 * atomics); the probe prints each form's largest difference from d1's.
 * A diagnostic for choosing the library's kernel, not part of the library.
 *   nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -o colsum_probe bench/colsum_probe.cu
 *   ./colsum_probe [rows]                               (default 16384) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                                        \
    do {                                                                                                             \
        cudaError_t e_ = (x);                                                                                        \
        if (e_ != cudaSuccess) {                                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                    \
            exit(1);                                                                                                 \
        }                                                                                                            \
    } while (0)

typedef __nv_bfloat16 bf;
struct alignas(16) vec8 {
    bf v[8];
};

/* R = 0: the double form; else runs of R rows in float */
template <int R>
__global__ void __launch_bounds__(256) k_part(const bf *dy, double *part, long N, long C, long S) {
    __shared__ double sh[8][257];
    int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    long k = blockIdx.y, c0 = (long)blockIdx.x * 256 + lane * 8;
    long n0 = k * N / S, n1 = (k + 1) * N / S;
    double s[8];
    for (int v = 0; v < 8; v++) s[v] = 0;
    if (c0 < C) {
        long n = n0 + g;
        if (R == 0) {
            for (; n + 24 < n1; n += 32) {
                vec8 w0 = *(const vec8 *)(dy + n * C + c0), w1 = *(const vec8 *)(dy + (n + 8) * C + c0);
                vec8 w2 = *(const vec8 *)(dy + (n + 16) * C + c0), w3 = *(const vec8 *)(dy + (n + 24) * C + c0);
#pragma unroll
                for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w0.v[v]);
#pragma unroll
                for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w1.v[v]);
#pragma unroll
                for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w2.v[v]);
#pragma unroll
                for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w3.v[v]);
            }
        } else {
            constexpr int RR = R > 0 ? R : 1;
            for (; n + 8 * (RR - 1) < n1; n += 8 * RR) {
                vec8 w[RR];
#pragma unroll
                for (int q = 0; q < RR; q++) w[q] = *(const vec8 *)(dy + (n + 8 * q) * C + c0);
#pragma unroll
                for (int v = 0; v < 8; v++) {
                    float f = 0;
#pragma unroll
                    for (int q = 0; q < RR; q++) f += __bfloat162float(w[q].v[v]);
                    s[v] += f;
                }
            }
        }
        for (; n < n1; n += 8) {
            vec8 w = *(const vec8 *)(dy + n * C + c0);
#pragma unroll
            for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w.v[v]);
        }
    }
#pragma unroll
    for (int v = 0; v < 8; v++) sh[g][lane * 8 + v] = s[v];
    __syncthreads();
    for (int j = threadIdx.x; j < 256; j += blockDim.x) {
        long c = (long)blockIdx.x * 256 + j;
        if (c >= C) continue;
        double t = 0;
        for (int q = 0; q < 8; q++) t += sh[q][j];
        part[k * C + c] = t;
    }
}

/* a block a slice of whole rows: thread t owns columns 8t .. 8t+7 (blockDim = C / 8), R rows' loads in flight
 * (each a contiguous row), added in float in row order, the run into the double; part written directly */
template <int R> __global__ void k_rows(const bf *dy, double *part, long N, long C, long S) {
    long k = blockIdx.y, c0 = (long)threadIdx.x * 8;
    long n0 = k * N / S, n1 = (k + 1) * N / S, n = n0;
    double s[8];
    for (int v = 0; v < 8; v++) s[v] = 0;
    for (; n + R - 1 < n1; n += R) {
        vec8 w[R];
#pragma unroll
        for (int q = 0; q < R; q++) w[q] = *(const vec8 *)(dy + (n + q) * C + c0);
#pragma unroll
        for (int v = 0; v < 8; v++) {
            float f = 0;
#pragma unroll
            for (int q = 0; q < R; q++) f += __bfloat162float(w[q].v[v]);
            s[v] += f;
        }
    }
    for (; n < n1; n++) {
        vec8 w = *(const vec8 *)(dy + n * C + c0);
#pragma unroll
        for (int v = 0; v < 8; v++) s[v] += (double)__bfloat162float(w.v[v]);
    }
#pragma unroll
    for (int v = 0; v < 8; v++) part[k * C + c0 + v] = s[v];
}

__global__ void k_finish(const double *part, float *db, long C, long S) {
    __shared__ double sh[8][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    long c = (long)blockIdx.x * 32 + tx;
    double t = 0;
    if (c < C)
        for (long k = ty; k < S; k += 8) t += part[k * C + c];
    sh[ty][tx] = t;
    __syncthreads();
    if (ty || c >= C) return;
    t = 0;
    for (int q = 0; q < 8; q++) t += sh[q][tx];
    db[c] = (float)t;
}

typedef void (*part_fn)(const bf *, double *, long, long, long);

static float run(part_fn f, const bf *dy, double *part, float *db, long N, long C, long blocks, bool fin,
                 bool rows = false) {
    long cb = rows ? 1 : (C + 255) / 256, S = blocks / cb;
    if (S > N / 64) S = N / 64;
    if (S < 1) S = 1;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int it = 0; it < 30; it++) {
        CK(cudaEventRecord(a));
        f<<<dim3((unsigned)cb, (unsigned)S), rows ? (unsigned)(C / 8) : 256>>>(dy, part, N, C, S);
        if (fin) k_finish<<<(unsigned)((C + 31) / 32), 256>>>(part, db, C, S);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        if (it >= 5) ms.push_back(t);
    }
    CK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0f;
}

int main(int argc, char **argv) {
    long N = argc > 1 ? atol(argv[1]) : 16384;
    long Cs[3] = {768, 2304, 3072};
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("# %s, %d SMs; rows %ld; us (median of 25): the part kernel alone / with the finish\n", pr.name,
           pr.multiProcessorCount, N);
    bf *dy;
    double *part;
    float *db, *ref;
    size_t n = (size_t)N * 3072;
    CK(cudaMalloc(&dy, n * 2));
    CK(cudaMalloc(&part, (size_t)4096 * 3072 * 8));
    CK(cudaMalloc(&db, 3072 * 4));
    std::vector<bf> h(n);
    srand(1);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16((rand() / (float)RAND_MAX - 0.5f) * 1e-3f);
    CK(cudaMemcpy(dy, h.data(), n * 2, cudaMemcpyHostToDevice));
    ref = (float *)malloc(3072 * 4);
    float *got = (float *)malloc(3072 * 4);
    struct {
        const char *name;
        part_fn f;
        bool rows;
    } forms[] = {{"d1", k_part<0>, false}, {"f4", k_part<4>, false}, {"f8", k_part<8>, false},
                 {"r4", k_rows<4>, true},  {"r8", k_rows<8>, true},   {"r16", k_rows<16>, true}};
    long blocks[] = {132, 264, 396, 528, 1056};
    for (int ci = 0; ci < 3; ci++) {
        long C = Cs[ci];
        printf("C %ld (%.1f MB):\n", C, N * C * 2 / 1e6);
        run(forms[0].f, dy, part, db, N, C, 660, true);
        CK(cudaMemcpy(ref, db, C * 4, cudaMemcpyDeviceToHost));
        for (int fi = 0; fi < 6; fi++) {
            printf("  %-3s", forms[fi].name);
            for (long bl : blocks) {
                float t1 = run(forms[fi].f, dy, part, db, N, C, bl, false, forms[fi].rows);
                float t2 = run(forms[fi].f, dy, part, db, N, C, bl, true, forms[fi].rows);
                CK(cudaMemcpy(got, db, C * 4, cudaMemcpyDeviceToHost));
                double e = 0;
                for (long c = 0; c < C; c++) e = fmax(e, fabs((double)got[c] - ref[c]) / (fabs(ref[c]) + 1e-9));
                printf("  %4ld: %5.1f/%5.1f (%.0e)", bl, t1, t2, e);
            }
            printf("\n");
        }
    }
    return 0;
}
