/* conv.h — what the convolution's two files share: a plan for one shape
 * and element type (conv2d.c makes them) and the algorithm policy that
 * fills it (conv_algo.c). */
#ifndef HR_CUDA_CONV_H
#define HR_CUDA_CONV_H

#include "backend/cuda/cudnn_load.h"

/* One convolution shape (N is a chunk of the batch: cuDNN's legacy API takes
 * tensors of fewer than 2^31 elements) and the algorithms chosen for it. */
struct hr_cuda_conv {
    int N, C, H, W, K, kh, kw, sh, sw, ph, pw, OH, OW;
    int G, dh, dw; /* groups (the filter is K x C/G x kh x kw), dilation */
    int align; /* bytes every call's x and y pointers keep: 16, or one element where chunks start off a 16-byte line */
    bool tf32;
    hr_dtype dt; /* x, W and y (dy, dx, and the dW cuDNN writes): F32, BF16 or F16; FP32 arithmetic always */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo[3], math[3]; /* forward, backward data, backward filter; algo -1: not chosen */
    size_t ws[3];
    hr_cudnn_status err[3]; /* nonzero: no algorithm could be chosen */
    /* autotune: the precise candidates whose workspace the plan holds, timed
     * at the first run on the real buffers; tuned: the fastest was taken */
    int ncand[3];
    struct {
        int algo, math;
        size_t ws;
    } cand[3][8];
    bool tuned[3];
    /* through the graph API: one op per convolution and beta (0: write, 1: add) */
    hr_cudnn_op *gop[3][2];
    bool gtried[3][2];
    char gwhy[3][2][96]; /* why there is none */
    /* HR_CUDNN_ALGO=fastest where both APIs may win (FP32; half forward and
     * backward-data): the graph op's engines and the legacy algorithms are
     * timed against each other, and the loser is dropped. api: 0 not yet
     * decided (the plan holds both sides' workspace), 1 graph, 2 legacy. */
    bool dual[3];
    int8_t api[3];
};

/* Which convolution of a plan: cudnn_graph.h's numbering. */
enum { FWD = HR_CONV_FWD, BWD_DATA = HR_CONV_BWD_DATA, BWD_FILTER = HR_CONV_BWD_FILTER };

/* cuDNN's name for the plan's element type. */
static inline int hr_conv_dnn_type(hr_dtype dt) {
    return dt == HR_BF16 ? HR_CUDNN_DATA_BFLOAT16 : dt == HR_F16 ? HR_CUDNN_DATA_HALF : HR_CUDNN_DATA_FLOAT;
}
/* Tensor cores: with TF32 allowed, and always for half data, which they take
 * as it is (FP32 accumulation: no engine that reduces in lower precision). */
static inline bool hr_conv_tensor_ok(const hr_cuda_conv *p) { return p->tf32 || p->dt != HR_F32; }

/* ---- choice_cache.c: timed choices kept between runs ---- */
#define HR_CONV_KEY 256 /* core/choices.h's HR_CHOICE_KEY */
/* The key of convolution `which` of p (add: beta 1) on the graph API or the
 * legacy one, in this backend's mode. */
void hr_conv_cache_key(const hr_cuda *c, const hr_cuda_conv *p, int which, bool add, bool graph, char *key,
                       size_t n);
/* A choice made by an earlier run: true with a, b and its workspace. */
bool hr_conv_cache_get(hr_cuda *c, const char *key, int64_t *a, int64_t *b, size_t *ws);
/* Remembers a choice timing made (written when the backend closes). */
void hr_conv_cache_put(hr_cuda *c, const char *key, int64_t a, int64_t b, size_t ws);

/* ---- conv_algo.c ---- */
/* Of the convolution algorithms chosen so far (each plan's forward,
 * backward-data and backward-filter), how many wait to be timed. */
void hr_conv_algo_untimed(const hr_cuda *c, int *untimed, int *total);
/* The graph-API op for this convolution and beta (add: 1, else 0), made at
 * the first ask; NULL where the graph API is off or offers no acceptable
 * engine (the legacy algorithms run then). */
hr_cudnn_op *hr_conv_algo_graph_op(hr_cuda *c, hr_cuda_conv *p, int which, bool add);
/* Workspace of one convolution: the graph op's, else the legacy algorithm's
 * (with its autotune candidates' until they are timed); both sides' largest
 * while the fastest mode has not yet decided between them. */
size_t hr_conv_algo_workspace(hr_cuda *c, hr_cuda_conv *p, int which, bool add);
/* The legacy algorithm chosen, its math mode set, its workspace within `have`. */
hr_status hr_conv_algo_ready(hr_cuda *c, hr_cuda_conv *p, int which, size_t have);
/* Times the candidates on the real buffers a, b (inputs) and out (written:
 * before the node's real work) and keeps the fastest: the legacy algorithms
 * of p, or the engines of p's graph op for `which` and add (nothing to do,
 * HR_OK, when there is none or it is timed; in the fastest mode's dual case
 * the legacy algorithms too, and the graph op is freed when one of them
 * wins: fetch it again after). The choice goes to the cache (choice_cache.c). */
hr_status hr_conv_algo_tune(hr_cuda *c, hr_cuda_conv *p, int which, const void *a, const void *b, void *out, void *ws,
                            size_t wsz);
/* p's graph op for `which` and add exists, is timed, and has won (the
 * fastest mode's dual case): running it needs no timing. */
bool hr_conv_algo_op_timed(const hr_cuda_conv *p, int which, bool add);
hr_status hr_conv_algo_tune_op(hr_cuda *c, hr_cuda_conv *p, int which, bool add, const void *a, const void *b,
                               void *out, void *ws, size_t wsz);

#endif
