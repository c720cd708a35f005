/* same_states.h — two sessions of one model, compared bit for bit state by
 * state: a parameter, optimizer moment or buffer, and a parameter's
 * gradient too, where it has one (tests of rewrites that must not change a
 * bit). */
#ifndef SAME_STATES_H
#define SAME_STATES_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "headroom.h"

/* u's state i and f's of the same name hold the same bits (and, for a
 * parameter, so do their gradients); false when either cannot be read. */
static bool same_state(hr_session_t *f, hr_session_t *u, int i) {
    int64_t n = 1;
    for (int d = 0; d < hr_state_ndim(u, i); d++) n *= hr_state_dim(u, i, d);
    const char *nm = hr_state_name(u, i);
    int j = hr_state_find(f, nm);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    bool same = a && b && j >= 0 && hr_state_read(f, j, a) == HR_OK && hr_state_read(u, i, b) == HR_OK &&
                !memcmp(a, b, sizeof(float) * (size_t)n);
    if (same && hr_state_is_param(u, i)) { /* a frozen parameter has a gradient in neither */
        bool gf = hr_grad_read(f, nm, a) == HR_OK, gu = hr_grad_read(u, nm, b) == HR_OK;
        same = gf == gu && (!gf || !memcmp(a, b, sizeof(float) * (size_t)n));
    }
    free(a);
    free(b);
    return same;
}

/* Every state of u against f's, a CHECK each naming `what` and how the two
 * programs differ (`how`: "folded", "fused", ...); how many agreed. After
 * check.h. */
static int same_states(hr_session_t *f, hr_session_t *u, const char *what, const char *how) {
    int same = 0;
    for (int i = 0; i < hr_state_count(u); i++) {
        bool ok = same_state(f, u, i);
        CHECK(ok, "%s: %s (or its gradient) differs %s and not", what, hr_state_name(u, i), how);
        same += ok;
    }
    return same;
}

#endif
