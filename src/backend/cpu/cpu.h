/* cpu.h — the CPU backend's kernels, one for each kernel name of HR_OP_LIST;
 * each reads only its typed arguments (graph/op_list.h), never the graph. */
#ifndef HR_CPU_H
#define HR_CPU_H

#include "backend/backend.h"

/* The kernels' ctx. */
typedef struct {
    int nthreads;
    int dnnl_mode;     /* HR_DNNL: 0 headroom's kernels only, 1 the faster way per shape, 2/3 oneDNN plain/blocked */
    bool dnnl_verbose; /* HR_PROFILE: say which path each conv shape took, and the times */
    void *dnnl_stream; /* the oneDNN stream (dnnl_lib.h), made on first use */
} hr_cpu;

/* Ops that share a kernel repeat its prototype, which C allows. */
#define HR_X_CPU_DECL(E, id, k, name) hr_status hr_cpu_##k(void *ctx, const hr_kargs *a);
HR_OP_LIST(HR_X_CPU_DECL)
#undef HR_X_CPU_DECL

/* cpu_gemm.c: row-major C = alpha op(A) op(B) + beta C, split over our threads. */
void hr_cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);
/* cpu_gemm.c: the same on the calling thread alone (for kernels that run
 * tasks on threads of their own, as attention's heads) */
void hr_cpu_sgemm_one(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc);
/* cpu_gemm.c: scratch bytes of a node, from its arguments alone (pointers
 * NULL while planning): the matrix products' and, below, the others'. */
size_t hr_cpu_workspace_size(const hr_cpu *c, const hr_kargs *a);
/* cpu_norm.c: the norms' scratch bytes (a backward's rows of a half dy
 * widened to floats, one row a thread); 0 for the other ops */
size_t hr_cpu_norm_workspace(const hr_cpu *c, const hr_kargs *a);
/* cpu_loss.c: a row of C logits' maximum, and sum of exp(x - max) in double
 * (*sum): the cross-entropy's statistics, shared with LinearCrossEntropy */
float hr_cpu_ce_row(const float *xi, int64_t C, double *sum);
/* cpu_attention.c: a block of scores a thread (two backward) */
size_t hr_cpu_attention_workspace(const hr_cpu *c, const hr_kargs *a);
/* cpu_linear_ce.c: LinearCrossEntropy's piece of logits */
size_t hr_cpu_linear_ce_workspace(const hr_kargs *a);

/* cpu_dnnl_conv.c: runs a Conv2d node through oneDNN when that is the faster
 * path for its shape (its first call times both) and returns true with the
 * status in *st; false: the caller runs im2col. */
bool hr_cpu_dnnl_conv(void *ctx, const hr_kargs *a, hr_status *st);
/* the oneDNN path's scratch bytes (0: it cannot run the node); the backend
 * plans the larger of the two paths */
size_t hr_cpu_dnnl_workspace_size(hr_cpu *c, const hr_kargs *a);
/* cpu_norm.c: the same for a norm node (its planned workspace holds both
 * ways'; false: the kernel runs its own way) */
bool hr_cpu_norm_dnnl(void *ctx, const hr_kargs *a, hr_status *st);
/* cpu_dnnl.c: row-major C = alpha op(A) op(B) + beta C by oneDNN's sgemm on
 * this thread; false (nothing written) when oneDNN is not loaded or fails */
bool hr_cpu_dnnl_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc);
/* why oneDNN is not used (NULL: it is loaded) */
const char *hr_cpu_dnnl_why(void);
void hr_cpu_dnnl_close(hr_cpu *c);

#endif
