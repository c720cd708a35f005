/* cpu_loss.c — CrossEntropyLoss and MSELoss on the CPU, means over the batch
 * as PyTorch's defaults, with sums in double. */
#include "backend/cpu/cpu.h"

#include <math.h>

/* in {logits (N,C), labels (N)}, out {loss} */
void hr_cpu_cross_entropy(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *s = &T_(n->in[0]).shape;
    int64_t N = s->d[0], C = s->d[1];
    const float *x = P_(n->in[0]);
    const int32_t *lab = ptr[n->in[1]];
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float mx = xi[0];
        for (int64_t j = 1; j < C; j++) mx = xi[j] > mx ? xi[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += exp((double)xi[j] - mx);
        total += (double)mx + log(sum) - xi[lab[i]];
    }
    P_(n->out[0])[0] = (float)(total / (double)N);
}

/* in {logits, labels}, out {dlogits} = (softmax - onehot) / N */
void hr_cpu_cross_entropy_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    const hr_shape *s = &T_(n->in[0]).shape;
    int64_t N = s->d[0], C = s->d[1];
    const float *x = P_(n->in[0]);
    const int32_t *lab = ptr[n->in[1]];
    float *dx = P_(n->out[0]);
    double invn = 1.0 / (double)N;
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * C;
        float *di = dx + i * C;
        float mx = xi[0];
        for (int64_t j = 1; j < C; j++) mx = xi[j] > mx ? xi[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += exp((double)xi[j] - mx);
        for (int64_t j = 0; j < C; j++) {
            float v = (float)((exp((double)xi[j] - mx) / sum - (j == lab[i])) * invn);
            di[j] = n->accum[0] ? di[j] + v : v;
        }
    }
}

/* in {pred, target}, out {loss} = mean (pred - target)^2 */
void hr_cpu_mse(const hr_graph *g, const hr_node *n, void *const *ptr) {
    int64_t N = hr_shape_numel(&T_(n->in[0]).shape);
    const float *p = P_(n->in[0]), *t = P_(n->in[1]);
    double s = 0;
    for (int64_t i = 0; i < N; i++) s += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
    P_(n->out[0])[0] = (float)(s / (double)N);
}

void hr_cpu_mse_bwd(const hr_graph *g, const hr_node *n, void *const *ptr) {
    int64_t N = hr_shape_numel(&T_(n->in[0]).shape);
    const float *p = P_(n->in[0]), *t = P_(n->in[1]);
    float *dx = P_(n->out[0]);
    float k = 2.0f / (float)N;
    for (int64_t i = 0; i < N; i++) {
        float v = k * (p[i] - t[i]);
        dx[i] = n->accum[0] ? dx[i] + v : v;
    }
}
