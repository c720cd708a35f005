/* program.h — the step program: forward, backward and update nodes in one
 * linear schedule, built from a model for a batch size, mode and optimizer. */
#ifndef HR_PROGRAM_H
#define HR_PROGRAM_H

#include "backend/backend.h"
#include "graph/graph.h"

typedef struct {
    hr_graph g;
    hr_config_t cfg;
    int n_fwd;      /* nodes [0, n_fwd) are the forward pass */
    int n_bwd_end;  /* nodes [n_fwd, n_bwd_end) the backward pass; the rest update */
    int input, label, loss, output;
    int sqnorm;     /* squared gradient norm (clipping), -1 */
} hr_program;

/* Builds the program; be answers workspace sizes. On failure p is freed. */
hr_status hr_program_build(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be, hr_program *p);
void hr_program_free(hr_program *p);

#endif
