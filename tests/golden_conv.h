/* golden_conv.h — the Conv2d cases (groups, depthwise, dilation) of
 * scripts/make_golden_ops.py's CONV_CASES, shared by tests/test_golden_ops.c
 * (CPU) and tests/gpu/test_cuda_golden.c (CUDA): the same order and streams.
 * x = 2u - 1 on `stream`, the weight (K, C/groups, k, k) = (2u - 1) / 2 on
 * stream + 1, the bias = 2u - 1 on stream + 2, dy = 2u - 1 on stream + 3;
 * stored: "<name>.x_head" (x's first 16 values), .y, .dx, .dweight, .dbias. */
#ifndef HR_GOLDEN_CONV_H
#define HR_GOLDEN_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/graph.h"

typedef struct {
    const char *name;
    int64_t N, C, H, W, K;
    int k, stride, pad, dil, groups;
    bool bias;
    uint64_t stream;
} convcase;

static const convcase CONV_CASES[] = {
    {"conv_g2", 2, 4, 7, 7, 6, 3, 1, 1, 1, 2, true, 3200},
    {"conv_dw", 2, 8, 9, 9, 8, 3, 1, 1, 1, 8, true, 3210},
    {"conv_dw_x2", 2, 4, 8, 8, 8, 3, 2, 1, 1, 4, false, 3220},
    {"conv_dil2", 2, 3, 11, 10, 5, 3, 2, 2, 2, 1, true, 3230},
    {"conv_dw_dil2", 2, 6, 9, 9, 6, 3, 1, 2, 2, 6, true, 3240},
    {"conv_g3_dil3", 2, 6, 10, 10, 9, 2, 1, 1, 3, 3, true, 3250},
};
#define NCONV (int)(sizeof CONV_CASES / sizeof CONV_CASES[0])

/* x, the weight and y (N, K, OH, OW) of case c, as nn.Conv2d shapes them. */
static inline void conv_case_dims(const convcase *c, int64_t xd[4], int64_t wd[4], int64_t yd[4]) {
    int64_t ke = (int64_t)c->dil * (c->k - 1) + 1;
    xd[0] = c->N, xd[1] = c->C, xd[2] = c->H, xd[3] = c->W;
    wd[0] = c->K, wd[1] = c->C / c->groups, wd[2] = wd[3] = c->k;
    yd[0] = c->N, yd[1] = c->K, yd[2] = (c->H + 2 * c->pad - ke) / c->stride + 1;
    yd[3] = (c->W + 2 * c->pad - ke) / c->stride + 1;
}

/* The node as hr_conv2d_ex makes it: forward in {x, W, b?} out {y}. */
static inline void conv_case_attrs(const convcase *c, hr_node *f) {
    f->a.in_f = c->C, f->a.out_f = c->K, f->a.kh = f->a.kw = c->k, f->a.sh = f->a.sw = c->stride;
    f->a.ph = f->a.pw = c->pad, f->a.dil_h = f->a.dil_w = c->dil, f->a.groups = c->groups, f->a.bias = c->bias;
}

#endif
