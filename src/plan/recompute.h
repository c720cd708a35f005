/* recompute.h — activation recomputation: forward results that the backward
 * pass reads are not kept from the forward pass but computed again, from kept
 * ones, just before the backward pass first needs them. */
#ifndef HR_RECOMPUTE_H
#define HR_RECOMPUTE_H

#include "plan/program.h"

/* Whether layer l of p has forward nodes that may be recomputed (not the
 * loss, not the model's output, not the weights' half copies). */
bool hr_recompute_layer_ok(const hr_program *p, int l);

/* Reads a layer list into sel (one bool a layer of p->g): "" or "none" for
 * no layer, "all" for every layer that may be recomputed, or layer names
 * separated by commas. An unknown name or one that may not be recomputed is
 * an error naming it. */
hr_status hr_recompute_parse(const hr_program *p, const char *list, bool *sel);

/* "1,2,5" from sel, into buf ("" for none); buf's length must be at least
 * hr_recompute_list_len(p) */
const char *hr_recompute_list(const hr_program *p, const bool *sel, char *buf, size_t n);
size_t hr_recompute_list_len(const hr_program *p);

/* Rewrites the backward pass of a built program: for every forward node of a
 * selected layer, the backward nodes read a copy of it (a clone node with
 * a.recompute set, its own outputs and workspace) made just before the first
 * backward node that needs it, from kept tensors or other clones. The
 * forward pass is unchanged; the backward, update and evaluation ranges move
 * by the clones added. */
hr_status hr_recompute_apply(hr_program *p, const bool *sel);

/* The clone nodes of a program (a.recompute), and the layers they recompute. */
int hr_recompute_count(const hr_program *p);

#endif
