/* node.c — one node on a backend: its kernel arguments unpacked from the node
 * by its op's descriptor, then the backend's kernel; workspace sizes; the
 * check that a backend has every op of a program before anything is allocated. */
#include "exec/session.h"

#include <string.h>

hr_status hr_node_run(hr_backend *be, const hr_graph *g, const hr_node *n, void *const *ptr, const hr_step_info *si) {
    hr_kargs a;
    hr_op_unpack(g, n, ptr, si, &a);
    return be->run(be, &a);
}

hr_status hr_node_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void *const *ptr,
                            const hr_step_info *si) {
    if (!be->run_group) {
        for (int k = 0; k < count; k++) {
            hr_status st = hr_node_run(be, g, &nodes[k], ptr, si);
            if (st) return st;
        }
        return HR_OK;
    }
    hr_kargs *a = hr_malloc(sizeof *a * (size_t)(count > 0 ? count : 1));
    if (!a) return hr_error_prefix("running a group of %d nodes", count);
    for (int k = 0; k < count; k++) hr_op_unpack(g, &nodes[k], ptr, si, &a[k]);
    hr_status st = be->run_group(be, a, count);
    hr_free(a);
    return st;
}

size_t hr_node_workspace(hr_backend *be, const hr_graph *g, const hr_node *n) {
    if (!be->workspace_size) return 0;
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    return be->workspace_size(be, &a);
}

size_t hr_exec_workspace(void *be, const hr_graph *g, const hr_node *n) { return hr_node_workspace(be, g, n); }

hr_status hr_exec_check_support(hr_backend *be, const hr_program *p) {
    const hr_graph *g = &p->g;
    for (int s = 0; s < g->nn; s++) {
        const hr_node *n = &g->n[s];
        char why[256] = "", where[300] = "";
        bool ok = be->kernels && be->kernels[n->op];
        if (ok && be->supports) {
            hr_kargs a;
            hr_op_unpack(g, n, NULL, NULL, &a);
            ok = be->supports(be, &a, why, sizeof why);
        }
        if (ok) continue;
        hr_graph_layer_where(g, n->layer, where, sizeof where);
        return hr_error_set(HR_ERR_UNSUPPORTED, "%s: the %s backend has no kernel for %s%s%s; run it on another device",
                            where, be->name, hr_op_name(n->op), why[0] ? ": " : "", why);
    }
    return HR_OK;
}
