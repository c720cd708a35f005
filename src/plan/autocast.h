/* autocast.h — mixed precision's rewrite of a pass of the step program
 * (torch.autocast's rules, in each op descriptor's `autocast`). */
#ifndef HR_AUTOCAST_H
#define HR_AUTOCAST_H

#include "ops/ops.h"

/* Rewrites nodes [from, g->nn) — the forward pass, or the evaluation pass
 * appended last — for precision `prec` (nothing for fp32): tensor types and
 * Cast nodes. The copies of parameters are named with `prefix` first. The
 * pass's output keeps the type its layer computes (the host widens it). */
hr_status hr_autocast(hr_graph *g, int from, hr_precision prec, const char *prefix);
/* After hr_autocast on [from, g->nn): a Cast to half whose F32 input only it
 * reads, made by an op with half_out (a norm over features), goes; the op writes the
 * half tensor itself. The batch's input, when a Cast to half is its only
 * reader, becomes that half tensor (the host rounds it as the Cast did).
 * `keep` (the pass's output) is never folded. HR_FOLD_CASTS=0 leaves the
 * casts (for comparisons). */
hr_status hr_autocast_fold(hr_graph *g, int from, int keep);
/* After autodiff, on the backward nodes [from, g->nn): a Cast to half of an
 * F32 gradient goes into the op with half_dx_copy that last wrote it (a
 * norm's backward writing the residual stream's gradient, which a half
 * product's backward then reads): it writes the half copy too. The same
 * bits; HR_FOLD_CASTS=0 leaves the casts. */
hr_status hr_autocast_fold_grads(hr_graph *g, int from);
/* In training, after the update nodes [from, to) are built: each weight's
 * half copy that a forward Cast (before n_fwd) makes from a parameter one of
 * them updates is held from step to step instead: the update writes it, the
 * Cast goes (*removed of them, all before n_fwd). The session makes the
 * copies itself whenever the parameters come from the host (initialisation,
 * hr_state_write). HR_HOLD_COPIES=0 keeps the Casts. */
hr_status hr_autocast_hold(hr_graph *g, int n_fwd, int from, int to, int *removed);

#endif
