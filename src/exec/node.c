/* node.c — one node on a backend: its kernel arguments unpacked from the node
 * by its op's descriptor, then the backend's kernel; workspace sizes; the
 * check that a backend has every op of a program before anything is allocated. */
#include "exec/session.h"

#include <string.h>

/* ---- half nodes on a backend that runs their op in F32 only ----------------
 * The node's half tensors get F32 copies at the front of its workspace
 * (planned: hr_node_workspace counts them), inputs converted in (and outputs
 * that the node adds into), the kernel runs on the copies, and the outputs
 * are rounded back. The result is the F32 computation of the half values,
 * rounded once: what autocast's half kernels approximate. A node counts as
 * half by its first activation input's type (ops.c), so an op with mixed
 * inputs says so in its unpack (Add sets a->dt to its half input's type);
 * the type fields an unpack fills (Add's ta and tb) still name the graph's
 * types, not the F32 copies', and an F32-only kernel must not read them. */
static bool native(hr_backend *be, const hr_kargs *a) {
    return a->dt == HR_F32 || a->op == HR_OP_CAST || (be->takes_half && be->takes_half(be, a->op, a->dt));
}

/* The node's distinct half tensors (inputs first) into t[]; their count. */
static int half_tensors(const hr_graph *g, const hr_node *n, int *t, bool *is_out) {
    int k = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int *io = pass ? n->out : n->in;
        for (int i = 0; i < (pass ? n->nout : n->nin); i++) {
            int x = io[i];
            if (x < 0 || !hr_dtype_is_half(g->t[x].dtype)) continue;
            int j = 0;
            while (j < k && t[j] != x) j++;
            if (j == k) {
                t[k] = x;
                is_out[k++] = false;
            }
            if (pass) is_out[j] = true;
        }
    }
    return k;
}

static size_t f32_bytes(const hr_graph *g, int t) {
    return hr_align_up((size_t)hr_shape_numel(&g->t[t].shape) * sizeof(float), HR_ALIGN);
}

static hr_status convert(hr_backend *be, const void *x, hr_dtype from, void *y, hr_dtype to, int64_t n) {
    hr_kargs c;
    memset(&c, 0, sizeof c);
    c.op = HR_OP_CAST;
    c.cast = (hr_cast_args){x, y, n, from, to, false};
    return be->run(be, &c);
}

static hr_status run_in_f32(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si,
                            hr_kargs *a) {
    int t[2 * HR_NODE_MAX_IO];
    bool is_out[2 * HR_NODE_MAX_IO], reads[2 * HR_NODE_MAX_IO];
    void *orig[2 * HR_NODE_MAX_IO];
    int k = half_tensors(g, n, t, is_out);
    char *ws = n->ws >= 0 ? ptr[n->ws] : NULL;
    size_t off = 0, total = n->ws >= 0 ? (size_t)hr_shape_numel(&g->t[n->ws].shape) : 0;
    hr_status st = HR_OK;
    for (int j = 0; j < k; j++) {
        size_t b = f32_bytes(g, t[j]);
        if (!ws || off + b > total)
            return hr_error_set(HR_ERR_INTERNAL, "%s: no room planned for its F32 copies", hr_op_name(n->op));
        orig[j] = ptr[t[j]];
        reads[j] = !is_out[j];
        for (int i = 0; i < n->nout; i++)
            if (n->out[i] == t[j] && n->accum[i]) reads[j] = true;
        if (reads[j] && !st)
            st = convert(be, orig[j], g->t[t[j]].dtype, ws + off, HR_F32, hr_shape_numel(&g->t[t[j]].shape));
        ptr[t[j]] = ws + off;
        off += b;
    }
    if (!st) {
        hr_op_unpack(g, n, ptr, si, a);
        a->dt = HR_F32;
        a->ws = total > off ? ws + off : NULL;
        a->ws_bytes = total - off;
        st = be->run(be, a);
    }
    for (int j = 0; j < k; j++) {
        if (is_out[j] && !st)
            st = convert(be, ptr[t[j]], HR_F32, orig[j], g->t[t[j]].dtype, hr_shape_numel(&g->t[t[j]].shape));
        ptr[t[j]] = orig[j];
    }
    return st;
}

hr_status hr_node_exec(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si,
                       hr_kargs *a) {
    hr_op_unpack(g, n, ptr, si, a);
    return native(be, a) ? be->run(be, a) : run_in_f32(be, g, n, ptr, si, a);
}

hr_status hr_node_run(hr_backend *be, const hr_graph *g, const hr_node *n, void **ptr, const hr_step_info *si) {
    hr_kargs a;
    return hr_node_exec(be, g, n, ptr, si, &a);
}

hr_status hr_node_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void **ptr,
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
    hr_kargs a;
    hr_op_unpack(g, n, NULL, NULL, &a);
    size_t ws = 0;
    if (!native(be, &a)) {
        int t[2 * HR_NODE_MAX_IO];
        bool is_out[2 * HR_NODE_MAX_IO];
        int k = half_tensors(g, n, t, is_out);
        for (int j = 0; j < k; j++) ws += f32_bytes(g, t[j]);
        a.dt = HR_F32;
    }
    return ws + (be->workspace_size ? be->workspace_size(be, &a) : 0);
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
