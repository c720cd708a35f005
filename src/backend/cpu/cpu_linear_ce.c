/* cpu_linear_ce.c — LinearCrossEntropy on the CPU: the logits a piece of rows
 * at a time in the node's scratch (OpenBLAS or oneDNN products), rounded to
 * the type the unfused Linear wrote them in, the cross-entropy of each row by
 * cpu_loss.c's statistics (hr_cpu_ce_row), then the piece turned into its
 * gradient (rounded as the logits: the unfused pair's dlogits) and its share
 * of dW and dx. */
#include "backend/cpu/cpu.h"

#include <math.h>

#define LCE_PIECE_BYTES ((size_t)8 << 20) /* the piece of logits, at most (one row at least) */

static int64_t piece_rows(const hr_linear_ce_args *l) {
    int64_t r = (int64_t)(LCE_PIECE_BYTES / (sizeof(float) * (size_t)(l->out > 0 ? l->out : 1)));
    if (r > l->N) r = l->N;
    return r > 0 ? r : 1;
}

size_t hr_cpu_linear_ce_workspace(const hr_kargs *a) {
    const hr_linear_ce_args *l = &a->lce;
    return sizeof(float) * (size_t)piece_rows(l) * (size_t)l->out;
}

/* v as the logits' type holds it (half types round; F32 is itself) */
static float as_logit(float v, hr_dtype t) {
    if (t == HR_BF16) return hr_bf16_to_f32(hr_f32_to_bf16(v));
    if (t == HR_F16) return hr_f16_to_f32(hr_f32_to_f16(v));
    return v;
}

/* rows [r0, r0 + m) of the logits into buf (m, out), rounded */
static void logits(const hr_linear_ce_args *l, int64_t r0, int64_t m, float *buf) {
    int in = (int)l->in, out = (int)l->out;
    hr_cpu_sgemm(false, true, (int)m, out, in, 1.0f, l->x + r0 * in, in, l->w, in, 0.0f, buf, out);
    if (l->logits_dt != HR_F32)
        for (int64_t i = 0; i < m * out; i++) buf[i] = as_logit(buf[i], l->logits_dt);
}

static float *scratch(const hr_kargs *a, hr_status *st) {
    if (a->ws && a->ws_bytes >= hr_cpu_linear_ce_workspace(a)) return a->ws;
    *st = hr_error_set(HR_ERR_INTERNAL, "LinearCrossEntropy: no room planned for its piece of logits");
    return NULL;
}

/* Each piece: its logits, each row's loss term, dlogits = (softmax - onehot)
 * scale / N in place, dW += dlogits^T x, its rows of dx = dlogits W. */
hr_status hr_cpu_linear_ce(void *ctx, const hr_kargs *a) {
    const hr_linear_ce_args *l = &a->lce;
    hr_status st = HR_OK;
    float *buf = scratch(a, &st);
    if (!buf) return st;
    int64_t R = piece_rows(l), C = l->out;
    int in = (int)l->in, out = (int)l->out;
    double total = 0, invn = (double)l->scale / (double)l->N;
    for (int64_t r0 = 0; r0 < l->N; r0 += R) {
        int64_t m = l->N - r0 < R ? l->N - r0 : R;
        logits(l, r0, m, buf);
        for (int64_t i = 0; i < m; i++) {
            float *xi = buf + i * C;
            double sum;
            float mx = hr_cpu_ce_row(xi, C, &sum);
            int32_t lab = l->labels[r0 + i];
            total += (double)mx + log(sum) - xi[lab];
            for (int64_t j = 0; j < C; j++)
                xi[j] = as_logit((float)((exp((double)xi[j] - mx) / sum - (j == lab)) * invn), l->logits_dt);
        }
        hr_cpu_sgemm(true, false, out, in, (int)m, 1.0f, buf, out, l->x + r0 * in, in, r0 > 0 ? 1.0f : 0.0f, l->dw,
                     in);
        if (l->dx) hr_cpu_sgemm(false, false, (int)m, in, out, 1.0f, buf, out, l->w, in, 0.0f, l->dx + r0 * in, in);
    }
    l->loss[0] = (float)(total / (double)l->N);
    return HR_OK;
}
