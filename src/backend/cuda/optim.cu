/* optim.cu — SGD and Adam(W) on the GPU with the CPU's arithmetic, a few
 * multi-tensor launches a step, and the squared gradient norm for clipping.
 * Under mixed precision an update writes its weight's held half copy too
 * (plan/autocast.c: hr_autocast_hold), so no forward casts a weight. */

/* The library is built without FMA contraction, so the same inputs give the
 * CPU's bits. One launch updates up to HR_MT_MAX parameters (a table passed
 * by value), so a step's update costs a few launches, not one a parameter;
 * the session hands the backend the whole run of update nodes. */
#include "backend/cuda/common.cuh"

#include <math.h>
#include <stddef.h>

/* A launch's tensors: the table travels as a kernel parameter, under 4 KB. */
#define HR_MT_MAX 48
typedef struct {
    float *p;       /* parameter */
    const float *g; /* its gradient */
    float *s1, *s2; /* Adam: exp_avg, exp_avg_sq; SGD: momentum_buffer or NULL, - */
    int64_t n;
    float wd;       /* its weight decay: AdamW's groups leave biases and norm weights at 0 */
    int copy_dt;    /* the copy's type (HR_BF16 or HR_F16) */
    void *copy;     /* the weight's held half copy, written from the new value; NULL: none */
} hr_mt_tensor;

/* The held half copy of value i (four from i4 on): rounded as a Cast rounds. */
__device__ __forceinline__ void copy_one(void *c, int dt, int64_t i, float v) {
    if (dt == HR_BF16)
        ((__nv_bfloat16 *)c)[i] = hr_to<__nv_bfloat16>(v);
    else
        ((__half *)c)[i] = hr_to<__half>(v);
}
template <typename H> __device__ __forceinline__ void copy_four_as(void *c, int64_t i4, float4 v) {
    hr_vec<H, 4> h;
    h.v[0] = hr_to<H>(v.x), h.v[1] = hr_to<H>(v.y), h.v[2] = hr_to<H>(v.z), h.v[3] = hr_to<H>(v.w);
    ((hr_vec<H, 4> *)c)[i4] = h;
}
__device__ __forceinline__ void copy_four(void *c, int dt, int64_t i4, float4 v) {
    if (dt == HR_BF16)
        copy_four_as<__nv_bfloat16>(c, i4, v);
    else
        copy_four_as<__half>(c, i4, v);
}

/* As torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)), read
 * on the device so that no step waits for the host. */
__device__ __forceinline__ float clip_scale(const float *sqnorm, float clip) {
    if (!sqnorm || clip <= 0) return 1.0f;
    float norm = sqrtf(sqnorm[0]);
    float c = clip / (norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

__global__ void k_sqnorm(const float *g, int64_t n, double *part) {
    __shared__ double sh[32];
    double s = 0;
    HR_GRID_STRIDE(i, n) s += (double)g[i] * g[i];
    s = hr_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* The NaN stop on the device (stop): a non-finite loss skips this step's
 * update, and those of the steps queued behind it, until one says clear.
 * Without the stop nothing is skipped. */
static_assert(offsetof(hr_step_vars, skip) == HR_STEP_VARS_HOST, "the host writes the step's scalars up to skip");
__global__ void k_step_check(const float *loss, hr_step_vars *v, bool stop) {
    if (v->clear) v->stopped = 0;
    uint32_t bad = stop && (!isfinite(loss[0]) || v->stopped);
    v->skip = bad;
    v->stopped = bad;
}

/* Accumulation's loss: micro-batch k of K adds its loss (in double, as the
 * host summed it), the last gives the mean. */
__global__ void k_loss_add(const float *loss, hr_step_vars *v, int k, int K) {
    double sum = (k ? v->loss_sum : 0.0) + (double)loss[0];
    v->loss_sum = sum;
    if (k == K - 1) v->loss_mean = (float)(sum / K);
}

/* ---- multi-tensor updates ---------------------------------------------------
 * Tensor k gets hr_grid(n) blocks, as its own launch would, starting at block
 * start[k] (start[count] is the grid); a block finds its tensor by binary
 * search and strides over it with its tensor's share of the grid. The table
 * is a __grid_constant__ parameter: read where the launch put it, never
 * copied to local memory by the dynamic index. */
struct mt_table {
    hr_mt_tensor t[HR_MT_MAX];
    int start[HR_MT_MAX + 1];
    int count;
};
/* kernel parameters must fit 4 KB (the table and the step's scalars) */
static_assert(sizeof(mt_table) + 128 <= 4096, "the multi-tensor table must leave room in 4 KB of parameters");

/* the tensor of block b: the last k with start[k] <= b (starts strictly increase) */
__device__ __forceinline__ int mt_find(const mt_table &tab, int b) {
    int lo = 0, hi = tab.count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tab.start[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__global__ void k_sgd_mt(const __grid_constant__ mt_table tab, const float *sqnorm, float clip, float lr, float mom,
                         float damp, bool nesterov, bool first, const hr_step_vars *dv) {
    if (dv) {
        if (dv->skip) return;
        lr = dv->lr, first = dv->sgd_first != 0;
    }
    int k = mt_find(tab, (int)blockIdx.x);
    float *p = tab.t[k].p, *buf = tab.t[k].s1, wd = tab.t[k].wd;
    const float *g = tab.t[k].g;
    int64_t n = tab.t[k].n, stride = (int64_t)(tab.start[k + 1] - tab.start[k]) * blockDim.x;
    float cs = clip_scale(sqnorm, clip);
    for (int64_t i = (int64_t)((int)blockIdx.x - tab.start[k]) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i] * cs + wd * p[i];
        if (buf) {
            buf[i] = first ? d : mom * buf[i] + (1.0f - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
        if (tab.t[k].copy) copy_one(tab.t[k].copy, tab.t[k].copy_dt, i, p[i]);
    }
}

/* Adam's float4 form: the tensor's length and every pointer allow it. The
 * host sizes the grid by it too (mt_launch), so no block is launched idle. */
__host__ __device__ static inline bool adam_fours(const hr_mt_tensor &t) {
    return (t.n & 3) == 0 && hr_al(t.p, 16) && hr_al(t.s1, 16) && hr_al(t.s2, 16) && hr_al(t.g, 16) &&
           hr_al(t.copy, 8);
}

__global__ void k_adam_mt(const __grid_constant__ mt_table tab, const float *sqnorm, float clip, float lr, float b1,
                          float b2, float eps, bool decoupled, float step, float bc2s, const hr_step_vars *dv) {
    if (dv) {
        if (dv->skip) return;
        lr = dv->lr, step = dv->adam_step, bc2s = dv->adam_bc2s;
    }
    int k = mt_find(tab, (int)blockIdx.x);
    float *p = tab.t[k].p, *m = tab.t[k].s1, *v = tab.t[k].s2, wd = tab.t[k].wd;
    const float *g = tab.t[k].g;
    int64_t n = tab.t[k].n, stride = (int64_t)(tab.start[k + 1] - tab.start[k]) * blockDim.x;
    int64_t i0 = (int64_t)((int)blockIdx.x - tab.start[k]) * blockDim.x + threadIdx.x;
    void *cp = tab.t[k].copy;
    int cdt = tab.t[k].copy_dt;
    float cs = clip_scale(sqnorm, clip);
    /* one value's update, the same arithmetic in either loop */
    auto one = [&](float &pi, float &mi, float &vi, float gi) {
        gi *= cs;
        if (decoupled)
            pi *= 1.0f - lr * wd;
        else
            gi += wd * pi;
        mi = b1 * mi + (1.0f - b1) * gi;
        vi = b2 * vi + (1.0f - b2) * gi * gi;
        pi = pi - step * mi / (sqrtf(vi) / bc2s + eps);
    };
    /* float4s where the tensor allows (every parameter tensor of a GPT), else one value a thread */
    if (adam_fours(tab.t[k])) {
        for (int64_t i = i0; i < n / 4; i += stride) {
            float4 pv = ((float4 *)p)[i], mv = ((float4 *)m)[i], vv = ((float4 *)v)[i], gv = ((const float4 *)g)[i];
            one(pv.x, mv.x, vv.x, gv.x), one(pv.y, mv.y, vv.y, gv.y);
            one(pv.z, mv.z, vv.z, gv.z), one(pv.w, mv.w, vv.w, gv.w);
            ((float4 *)m)[i] = mv, ((float4 *)v)[i] = vv, ((float4 *)p)[i] = pv;
            if (cp) copy_four(cp, cdt, i, pv);
        }
        return;
    }
    for (int64_t i = i0; i < n; i += stride) {
        one(p[i], m[i], v[i], g[i]);
        if (cp) copy_one(cp, cdt, i, p[i]);
    }
}

/* Cuts t[0..count) into tables of up to HR_MT_MAX non-empty tensors and calls
 * launch(table, blocks) for each, in order. A tensor gets the blocks for its
 * items, fours(t) ? n / 4 : n, a thread each (the kernels' loops stride
 * over the rest). GPT-2's AdamW launched blocks for n, three in four of
 * them finding nothing to do in every tensor but the embedding's. */
template <typename Fours, typename Launch>
static cudaError_t mt_launch(const hr_mt_tensor *t, int count, Fours fours, Launch launch) {
    mt_table tab{}; /* the unused tail is passed too: zeros, not stack garbage */
    for (int i = 0; i < count;) {
        int blocks = 0;
        tab.count = 0;
        for (; i < count && tab.count < HR_MT_MAX; i++) {
            if (t[i].n <= 0) continue;
            tab.t[tab.count] = t[i];
            tab.start[tab.count++] = blocks;
            blocks += (int)hr_grid(fours(t[i]) ? t[i].n / 4 : t[i].n); /* at most HR_MT_MAX * HR_MAX_GRID */
        }
        if (tab.count == 0) break;
        tab.start[tab.count] = blocks;
        launch(tab, (unsigned)blocks);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* Multi-tensor updates: t[0..count) in launches of up to HR_MT_MAX tensors,
 * in order; empty tensors are skipped. The step's scalars are shared by all.
 * sqnorm NULL (or clip <= 0): no clipping. */
static cudaError_t hrk_sgd_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip,
                              float lr, float mom, float damp, bool nesterov, bool first, const hr_step_vars *dv) {
    return mt_launch(t, count, [](const hr_mt_tensor &) { return false; }, [&](const mt_table &tab, unsigned blocks) {
        k_sgd_mt<<<blocks, HR_THREADS, 0, s>>>(tab, sqnorm, clip, lr, mom, damp, nesterov, first, dv);
    });
}

static cudaError_t hrk_adam_mt(cudaStream_t s, const hr_mt_tensor *t, int count, const float *sqnorm, float clip,
                               float lr, float b1, float b2, float eps, bool decoupled, float step, float bc2s,
                               const hr_step_vars *dv) {
    return mt_launch(t, count, adam_fours, [&](const mt_table &tab, unsigned blocks) {
        k_adam_mt<<<blocks, HR_THREADS, 0, s>>>(tab, sqnorm, clip, lr, b1, b2, eps, decoupled, step, bc2s, dv);
    });
}

extern "C" {

/* ---- the kernel entries ---- */
size_t hr_cuda_grad_sqnorm_workspace(hr_cuda *c, const hr_kargs *a) { return HR_CUDA_RED_BYTES; }

/* sum(g^2) into out[0]: block partials in the node's workspace, then one
 * block adds them in order (loss.cu's hr_finish_launch). */
hr_status hr_cuda_grad_sqnorm(void *ctx, const hr_kargs *a) {
    const hr_sqnorm_args *p = &a->sq;
    cudaStream_t s = ((hr_cuda *)ctx)->stream;
    if (!a->ws || a->ws_bytes < HR_CUDA_RED_BYTES)
        return hr_error_set(HR_ERR_INTERNAL, "grad_sqnorm: no workspace was planned");
    int64_t b = (p->n + HR_THREADS * 4 - 1) / (HR_THREADS * 4);
    unsigned nb = (unsigned)(b < 1 ? 1 : b > HR_CUDA_RED_BLOCKS ? HR_CUDA_RED_BLOCKS : b);
    k_sqnorm<<<nb, HR_THREADS, 0, s>>>(p->g, p->n, (double *)a->ws);
    HR_CU(cudaGetLastError());
    HR_CU(hr_finish_launch(s, (const double *)a->ws, (int)nb, p->out, p->acc, 1.0));
    return HR_OK;
}

/* Updates a[0..count), all SGD or all Adam, in launches of up to HR_MT_MAX
 * parameters; the step's scalars (a[0]'s, the same in all) are made once, on
 * the host, exactly as the CPU makes them. The weight decay is each node's
 * own (decay_matrices_only gives a bias 0 beside a decayed weight). */
hr_status hr_cuda_optim_group(hr_cuda *c, const hr_kargs *a, int count) {
    if (count <= 0) return HR_OK;
    const hr_optim_args *f = &a[0].opt;
    const hr_optim_t *o = &f->o;
    const float *sq = f->sqnorm && o->clip_norm > 0 ? f->sqnorm : NULL;
    bool sgd = a[0].op == HR_OP_SGD;
    hr_step_vars v = hr_step_vars_make(o, f->t, f->lr); /* the same bits as the CPU's */
    hr_mt_tensor t[HR_MT_MAX];
    for (int k0 = 0; k0 < count; k0 += HR_MT_MAX) {
        int m = count - k0 < HR_MT_MAX ? count - k0 : HR_MT_MAX;
        for (int j = 0; j < m; j++) {
            const hr_kargs *k = &a[k0 + j];
            if (k->op != a[0].op)
                return hr_error_set(HR_ERR_INTERNAL, "cuda backend: a group of %s nodes holds a %s",
                                    hr_op_name(a[0].op), hr_op_name(k->op));
            t[j] = hr_mt_tensor{k->opt.p, k->opt.g, k->opt.s1, sgd ? NULL : k->opt.s2, k->opt.n, k->opt.o.weight_decay,
                                (int)k->opt.copy_dt, k->opt.copy};
        }
        if (sgd)
            HR_CU(hrk_sgd_mt(c->stream, t, m, sq, o->clip_norm, v.lr, o->momentum, o->dampening, o->nesterov,
                             v.sgd_first != 0, f->dv));
        else
            HR_CU(hrk_adam_mt(c->stream, t, m, sq, o->clip_norm, v.lr, o->beta1, o->beta2, o->eps,
                              o->kind == HR_OPTIM_ADAMW, v.adam_step, v.adam_bc2s, f->dv));
    }
    return HR_OK;
}

hr_status hr_cuda_step_check(hr_cuda *c, const float *loss, hr_step_vars *v, bool stop) {
    k_step_check<<<1, 1, 0, c->stream>>>(loss, v, stop);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_loss_add(hr_cuda *c, const float *loss, hr_step_vars *v, int k, int K) {
    k_loss_add<<<1, 1, 0, c->stream>>>(loss, v, k, K);
    HR_CU(cudaGetLastError());
    return HR_OK;
}

hr_status hr_cuda_sgd(void *ctx, const hr_kargs *a) { return hr_cuda_optim_group((hr_cuda *)ctx, a, 1); }
hr_status hr_cuda_adam(void *ctx, const hr_kargs *a) { return hr_cuda_optim_group((hr_cuda *)ctx, a, 1); }

} /* extern "C" */
