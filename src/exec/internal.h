/* internal.h — the one small header through which tests and tools reach
 * inside headroom: a session's program, plan, backend and tensor data, a
 * session on a backend of one's own, and one node run by itself. */
#ifndef HR_EXEC_INTERNAL_H
#define HR_EXEC_INTERNAL_H

#include "backend/backend.h"
#include "plan/plan.h"

/* Compiles on a backend the caller made (the session takes it over only on
 * success); the largest batch that fits, planned on that backend. */
hr_session_t *hr_compile_on(const hr_model_t *m, const hr_config_t *cfg, hr_backend *be);
int64_t hr_largest_batch_on(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi,
                            hr_backend *be);

/* What this session's process may hold on its device now, overhead
 * included (what is free, less what the driver keeps, plus the overhead
 * held already): the budget that hr_session_alloc's fit test uses and the
 * largest-batch search should use. SIZE_MAX where the backend cannot tell. */
size_t hr_session_device_room(const hr_session_t *s);

const hr_program *hr_session_program(const hr_session_t *s);
const hr_plan *hr_session_plan(const hr_session_t *s);
hr_backend *hr_session_backend(const hr_session_t *s);
/* Per tensor of the program: its data in the arena; NULL before hr_session_alloc. */
void **hr_session_ptrs(const hr_session_t *s);
size_t hr_session_overhead(const hr_session_t *s); /* measured at hr_session_alloc */
bool hr_session_allocated(const hr_session_t *s);
/* The session's profile mode: 0 off, 1 host times, 2 device events. */
int hr_session_profile_mode(const hr_session_t *s);

/* One node of graph g on backend be: its kernel arguments unpacked from the
 * node (ptr[i]: tensor i's data) into *a, then the backend's kernel; half
 * tensors of an op the backend runs in F32 only go through F32 copies in the
 * node's workspace (ptr's entries are changed for the call and restored). */
hr_status hr_node_exec(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si,
                       hr_kargs *a);
/* The same with arguments of its own. */
hr_status hr_node_run(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si);
/* nodes[0..count), all of one update op, as the backend's group launch (or
 * one by one where it has none). */
hr_status hr_node_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void **ptr,
                            const hr_step_info *si);
/* Scratch bytes node n needs on be (0: none). */
size_t hr_node_workspace(hr_backend *be, const hr_graph *g, const hr_node *n);

#endif
