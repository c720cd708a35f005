/* harness.h — what the files of build/tests/test_ops share: inputs, the one-node
 * harness, finite differences, float64 references, compare; and each part's entry. */
#ifndef HR_TESTS_OPS_HARNESS_H
#define HR_TESTS_OPS_HARNESS_H

#include "check.h"
#include "exec/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* check.h's tallies are static, one pair per file: every file of test_ops
 * hands its own over with OPS_TALLY(name), and main adds them to its own
 * before TEST_END, so that the binary prints one RESULT line for them all. */
#define OPS_TALLY(fn)                                                                                                  \
    void fn(int *pass, int *fail) {                                                                                    \
        *pass += check_pass;                                                                                           \
        *fail += check_fail;                                                                                           \
    }

/* ---- small helpers (harness.c) ------------------------------------------------ */
double urand(void);                  /* [0, 1), one sequence for the whole binary */
double frand(double lo, double hi);  /* uniform in [lo, hi), rounded to float */
void fill(double *a, int64_t n, double lo, double hi);
double *dalloc(int64_t n);           /* zeroed, at least one element */

/* r (float32) against the float64 reference f: passes (one CHECK) when
 * max|r - f| <= tol * max(1, max|f|), NaN in f not compared; the worst error
 * of each op is kept for report_worst. */
void compare(const char *op, const char *what, const float *got, const double *ref, int64_t n, double tol);
void report_worst(void);             /* the worst error of every op, and its bound */

/* ---- a one-node harness around the CPU backend ------------------------------ */
#define KT_MAX 48
typedef struct {
    hr_graph g;
    void *ptr[KT_MAX];
    bool owned[KT_MAX];
    hr_backend *be;
} kt;

void kt_init(kt *k);
int64_t kt_numel(kt *k, int t);
int kt_tensor(kt *k, hr_dtype dt, int ndim, const int64_t *d);
#define KT(k, ...) kt_tensor((k), HR_F32, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})
float *kf(kt *k, int t);
void kt_set(kt *k, int t, const double *v);
void kt_fillf(kt *k, int t, float v);
hr_step_info kt_si(void);
void kt_run_si(kt *k, hr_node *n, const hr_step_info *si);
void kt_run(kt *k, hr_node *n);
void kt_free(kt *k);

/* Nodes of each op that ran through the harness without error (the coverage
 * check in test_ops.c wants every op at least once). */
extern int op_runs[HR_OP_COUNT];

/* ---- finite differences, backward and in-place checks (harness.c) ------------ */
typedef double (*loss_fn)(void *ctx);
void fd_grad(loss_fn f, void *ctx, double *a, int64_t n, double *g);
int fd_grad_smooth(loss_fn f, void *ctx, double *a, int64_t n, double *g);
void check_backward(kt *k, const hr_node *tmpl, double *const *ref, const char *op, double tol, bool skippable);
bool check_inplace(kt *k, hr_node *n, const double *ref, const char *op, double tol);

/* ---- float64 references (harness.c) ------------------------------------------ */
void ref_linear(const double *x, const double *W, const double *b, int N, int in, int out, double *y);
void ref_conv(const double *x, const double *W, const double *b, int N, int C, int H, int Wd, int K, int k, int s,
              int p, double *y);
void ref_pool(const double *x, int NC, int H, int W, int kh, int kw, int s, bool max, double *y);
void ref_bn_train(const double *x, const double *gm, const double *bt, int N, int C, int HW, double eps, double *y,
                  double *mean, double *var_b, double *var_u);
void ref_softmax(const double *x, int N, int C, bool lg, double *y);
double ref_ce(const double *x, const int *lab, int N, int C);
double wsum(const double *w, const double *y, int64_t n);

/* ---- a model end to end through the public API (e2e.c) ------------------------ */
typedef struct {
    hr_session_t *s;
    int np;
    char names[16][32];
    double *p[16];
    int64_t n[16];
    double *x;
    int32_t *lab;
    double *tgt;
    int B;
    double (*fwd)(void *ctx); /* the model's loss in float64 from p[], x, lab/tgt */
} e2e;
double *P(e2e *e, const char *name); /* the parameter of that name */
/* One step (SGD, lr 0, keep_grads): the loss and every parameter's gradient
 * against fwd and its finite differences. labels: a sample's (0: MSE
 * targets of nclasses_or_outputs values); vocab > 0: the inputs are token ids
 * in [0, vocab). */
void e2e_check_model(const char *op, hr_model_t *m, int B, int64_t in_numel, int64_t labels, int nclasses_or_outputs,
                     int vocab, double (*fwd)(void *));

/* ---- the parts, run by test_ops.c's main in this order ----------------------- */
void test_norms(void);       /* norms.c: BatchNorm1d/2d, LayerNorm */
void test_activations(void); /* activations.c: LeakyReLU, GELU, SiLU, Sigmoid, Tanh */
void test_optimizers(void);  /* optim.c: SGD and Adam(W), with clipping (GradNorm) */
void test_e2e(void);         /* e2e.c: autodiff end to end through the public API */
void test_precision(void);   /* precision.c: bf16/f16 conversions, Cast, GradScaler.unscale */
void test_sequence(void);    /* sequence.c: Embedding, PositionEmbedding, causal self-attention */

void ops_tally_harness(int *pass, int *fail);
void ops_tally_norms(int *pass, int *fail);
void ops_tally_activations(int *pass, int *fail);
void ops_tally_optim(int *pass, int *fail);
void ops_tally_e2e(int *pass, int *fail);
void ops_tally_precision(int *pass, int *fail);
void ops_tally_sequence(int *pass, int *fail);

#endif
