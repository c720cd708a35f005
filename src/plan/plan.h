/* plan.h — lifetimes, placement and the report: where every byte of the step
 * program lives, decided before anything is allocated. */
#ifndef HR_PLAN_H
#define HR_PLAN_H

#include "plan/program.h"

typedef struct {
    size_t arena_bytes;  /* the one arena of the backend's memory kind */
    size_t lower_bound;  /* max over the schedule of the live bytes */
    int peak_step;
    int *root;           /* per tensor: the tensor whose storage it uses (itself unless aliased), -1 unused */
    hr_report_t report;
    /* names for the report's top list, owned here */
    char top_names[8][128];
    char top_layers[8][64];
    char peak_op[96];
} hr_plan;

/* Fills lifetimes, aliases, categories and offsets of p's tensors. */
hr_status hr_plan_make(hr_program *p, hr_plan *plan);
void hr_plan_free(hr_plan *plan);

/* Independent check used by the tests: no two tensors whose lifetimes
 * overlap share a byte. Returns false and describes the first clash. */
bool hr_plan_verify(const hr_program *p, const hr_plan *plan, char *why, size_t n);

#endif
