/* cpu.h — the CPU backend's kernels, one function per node kind; each reads
 * its node's tensors through ptr[] as the op's comment in src/ops/ lays out. */
#ifndef HR_CPU_H
#define HR_CPU_H

#include "backend/backend.h"

typedef struct {
    int nthreads;
} hr_cpu;

#define T_(i) (g->t[(i)])
#define P_(i) ((float *)ptr[(i)])

/* cpu_gemm.c */
void hr_cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);
void hr_cpu_linear(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_linear_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
size_t hr_cpu_conv_workspace(const hr_cpu *c, const hr_graph *g, const hr_node *n);
void hr_cpu_conv2d(const hr_cpu *c, const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_conv2d_bwd(const hr_cpu *c, const hr_graph *g, const hr_node *n, void *const *ptr);
/* cpu_elementwise.c */
void hr_cpu_relu(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_relu_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_dropout(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si);
void hr_cpu_dropout_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_add(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_copy(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_concat(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_concat_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_softmax(const hr_graph *g, const hr_node *n, void *const *ptr, bool log);
void hr_cpu_softmax_bwd(const hr_graph *g, const hr_node *n, void *const *ptr, bool log);
/* cpu_pool.c */
void hr_cpu_maxpool(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_maxpool_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_avgpool(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_avgpool_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
/* cpu_norm.c */
void hr_cpu_batchnorm(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_batchnorm_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
/* cpu_loss.c */
void hr_cpu_cross_entropy(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_cross_entropy_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_mse(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_mse_bwd(const hr_graph *g, const hr_node *n, void *const *ptr);
/* cpu_optim.c */
void hr_cpu_grad_sqnorm(const hr_graph *g, const hr_node *n, void *const *ptr);
void hr_cpu_sgd(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si);
void hr_cpu_adam(const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si);

float hr_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i);
/* Dropout's keep decision for element i: the same on every backend. */
static inline uint64_t hr_dropout_stream(uint64_t layer_seed, int64_t t) { return (layer_seed << 32) ^ (uint64_t)t; }

#endif
