/* cpu_loss.c — CrossEntropyLoss and MSELoss on the CPU, means over the batch
 * as PyTorch's defaults, with sums in double. */
#include "backend/cpu/cpu.h"

#include <math.h>

float hr_cpu_ce_row(const float *xi, int64_t C, double *sum) {
    float mx = xi[0];
    for (int64_t j = 1; j < C; j++) mx = xi[j] > mx ? xi[j] : mx;
    double s = 0;
    for (int64_t j = 0; j < C; j++) s += exp((double)xi[j] - mx);
    *sum = s;
    return mx;
}

/* CE: logits (N,C), labels (N) -> loss */
static void cross_entropy(const hr_loss_args *l) {
    int64_t N = l->N, C = l->C;
    const float *x = l->x;
    const int32_t *lab = l->labels;
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        double sum;
        float mx = hr_cpu_ce_row(xi, C, &sum);
        total += (double)mx + log(sum) - xi[lab[i]];
    }
    l->loss[0] = (float)(total / (double)N);
}

/* dlogits = (p - onehot) / N, p the row's probabilities */
static void cross_entropy_bwd(const hr_loss_args *l) {
    int64_t N = l->N, C = l->C;
    const float *x = l->x;
    const int32_t *lab = l->labels;
    float *dx = l->dx;
    double invn = (double)l->scale / (double)N;
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float *di = dx + i * C;
        double sum;
        float mx = hr_cpu_ce_row(xi, C, &sum);
        for (int64_t j = 0; j < C; j++) {
            float v = (float)((exp((double)xi[j] - mx) / sum - (j == lab[i])) * invn);
            di[j] = l->acc ? di[j] + v : v;
        }
    }
}

/* MSE: mean (pred - target)^2 */
static void mse(const hr_loss_args *l) {
    int64_t N = l->n;
    const float *p = l->x, *t = l->target;
    double s = 0;
    for (int64_t i = 0; i < N; i++) s += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
    l->loss[0] = (float)(s / (double)N);
}

static void mse_bwd(const hr_loss_args *l) {
    int64_t N = l->n;
    const float *p = l->x, *t = l->target;
    float *dx = l->dx;
    float k = 2.0f * l->scale / (float)N;
    for (int64_t i = 0; i < N; i++) {
        float v = k * (p[i] - t[i]);
        dx[i] = l->acc ? dx[i] + v : v;
    }
}

hr_status hr_cpu_loss(void *ctx, const hr_kargs *a) {
    switch (a->op) {
    case HR_OP_CROSS_ENTROPY: cross_entropy(&a->loss); break;
    case HR_OP_MSE: mse(&a->loss); break;
    default: return hr_error_set(HR_ERR_INTERNAL, "cpu loss kernel: not a loss (%s)", hr_op_name(a->op));
    }
    return HR_OK;
}

hr_status hr_cpu_loss_bwd(void *ctx, const hr_kargs *a) {
    switch (a->op) {
    case HR_OP_CROSS_ENTROPY_BWD: cross_entropy_bwd(&a->loss); break;
    case HR_OP_MSE_BWD: mse_bwd(&a->loss); break;
    default: return hr_error_set(HR_ERR_INTERNAL, "cpu loss kernel: not a loss's backward (%s)", hr_op_name(a->op));
    }
    return HR_OK;
}
