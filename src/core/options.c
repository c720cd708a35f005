/* options.c — the HR_* environment switches, read into one struct when a
 * session or backend is made (README, "Switches", has the table). */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static bool flag(const char *name, bool def) {
    const char *v = env(name);
    return v ? *v != '0' : def;
}

static long long number(const char *name, long long def) {
    const char *v = env(name);
    if (!v) return def;
    char *end;
    long long k = strtoll(v, &end, 10);
    return *end ? def : k;
}

hr_options hr_options_read(void) {
    hr_options o;
    memset(&o, 0, sizeof o);
    o.profile = (int)number("HR_PROFILE", 0);
    const char *algo = env("HR_CUDNN_ALGO");
    o.cudnn_algo = algo && !strcmp(algo, "deterministic") ? HR_ALGO_DETERMINISTIC
                   : algo && !strcmp(algo, "heuristic")   ? HR_ALGO_HEURISTIC
                   : algo && !strcmp(algo, "fastest")     ? HR_ALGO_FASTEST
                                                          : HR_ALGO_PRECISE;
    static bool warned; /* a misspelt mode would run precise without a word */
    if (algo && o.cudnn_algo == HR_ALGO_PRECISE && strcmp(algo, "precise") && !warned) {
        fprintf(stderr, "headroom: warning: HR_CUDNN_ALGO='%s' is not precise, deterministic, heuristic or fastest; "
                        "running precise\n", algo);
        warned = true;
    }
    o.cudnn_autotune = flag("HR_CUDNN_AUTOTUNE", true);
    o.cudnn_cache = flag("HR_CUDNN_CACHE", true);
    long long fw = number("HR_CUDNN_FASTEST_WS_MIB", 0);
    o.cudnn_fast_ws_mib = fw > 0 ? (fw > (1LL << 30) ? 1LL << 30 : fw) : 0; /* at most 1 PiB: MiB << 20 fits */
    const char *api = env("HR_CUDNN_API");
    o.cudnn_legacy = api && !strcmp(api, "legacy");
    o.cudnn_attention = flag("HR_CUDNN_ATTENTION", true);
    long long ag = number("HR_CUDNN_ATTENTION_GROUP", 0);
    o.cudnn_attention_group = ag > 0 ? ag : 0;
    o.cudnn_half_reduction = flag("HR_CUDNN_HALF_REDUCTION", false);
    o.cudnn_half_legacy = flag("HR_CUDNN_HALF_LEGACY", true);
    /* 0 (or not a number) turns split-K off; N > 0 sets the shortest k */
    const char *sk = env("HR_CUDA_SPLITK");
    long long k = sk ? atoll(sk) : HR_SPLITK_DEFAULT;
    o.splitk_min_k = k > 0 ? k : 0;
    o.no_lt = !flag("HR_CUDA_LT", true);
    long long gt = number("HR_CUDA_GEMM_TIME", HR_GEMM_TIME_DEFAULT);
    o.gemm_time_min = gt > 0 ? gt : 0;
    o.ce_two_pass = !flag("HR_CE_ONE_PASS", true);
    long long cp = number("HR_CE_PIECE_MIB", 0);
    o.ce_piece_mib = cp > 0 && cp <= (1LL << 20) ? cp : 0; /* at most 1 TiB */
    o.no_fold = !flag("HR_FOLD_CASTS", true);
    o.no_fuse_act = !flag("HR_FUSE_ACT", true);
    o.ln_two_kernels = !flag("HR_LN_ONE_PASS", true);
    o.no_fuse_add = !flag("HR_FUSE_ADD", true);
    o.no_fuse_bias = !flag("HR_FUSE_BIAS", true);
    o.no_hold = !flag("HR_HOLD_COPIES", true);
    long long pm = number("HR_CUDA_PIECE_MIN", 2LL << 20);
    o.piece_min = pm > 0 ? pm : 0;
    long long th = number("HR_STAGE_THREADS", 16);
    o.stage_threads = th > 0 && th <= 1024 ? (int)th : 16;
    o.cuda_verbose = flag("HR_CUDA_VERBOSE", false);
    o.cuda_graph = flag("HR_CUDA_GRAPH", true);
    o.device_accumulate = flag("HR_DEVICE_ACCUMULATE", true);
    o.cuda_poison = flag("HR_CUDA_POISON", false);
    long long mc = number("HR_CUDA_MAX_CALL_ELEMS", 0);
    o.max_call_elems = mc > 0 ? mc : 0;
    long long dn = number("HR_DNNL", 1);
    o.dnnl = dn >= 0 && dn <= 3 ? (int)dn : 1;
    const char *sg = env("HR_SGEMM");
    o.sgemm_dnnl = !(sg && !strcmp(sg, "openblas"));
    return o;
}
