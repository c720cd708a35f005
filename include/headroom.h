/* headroom.h — the one public header of headroom: build a model, plan every
 * byte of its training step before it runs, then allocate once and train.
 *
 * A whole use, start to finish:
 *
 *     hr_model_t *m = hr_model_new("mlp");
 *     int x = hr_input(m, "x", 1, (int64_t[]){784});
 *     x = hr_linear(m, NULL, x, 784, 256, true);     // layer "0": 0.weight, 0.bias
 *     x = hr_relu(m, NULL, x);                       // layer "1"
 *     x = hr_linear(m, NULL, x, 256, 10, true);      // layer "2"
 *     hr_loss_cross_entropy(m, x, 10);
 *
 *     hr_config_t cfg = hr_config_default();
 *     cfg.batch = 128; cfg.optim.kind = HR_OPTIM_ADAM; cfg.optim.lr = 1e-3f;
 *     hr_session_t *s = hr_compile(m, &cfg);          // plans; allocates nothing big
 *     if (!s) { fprintf(stderr, "%s\n", hr_last_error()); return 1; }
 *     hr_report_print(s, stdout);                     // bytes per category, peak
 *     if (hr_session_alloc(s) != HR_OK) { ... }       // the arena, once
 *     float loss;
 *     hr_train_step(s, images, labels, &loss);         // forward, backward, update
 *     hr_session_free(s); hr_model_free(m);
 *
 * Every call that can fail returns a status (or NULL / -1) and leaves a message
 * in hr_last_error(): what failed, where (layer, tensor, file:line) and what to
 * do about it. Nothing here aborts on bad input.
 *
 * Layers are named like PyTorch's nn.Sequential: the Nth layer is "N" unless a
 * name is given, so parameters are "0.weight", "0.bias", ... and a checkpoint
 * loads into the same PyTorch model with load_state_dict. */
#ifndef HEADROOM_H
#define HEADROOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HR_OK = 0,
    HR_ERR_INVALID_ARG,  /* a bad argument: batch 0, a negative size, NULL */
    HR_ERR_SHAPE,        /* shapes that do not fit together */
    HR_ERR_PARSE,        /* a model file that is not well-formed */
    HR_ERR_IO,           /* a file that cannot be opened, read or written */
    HR_ERR_FORMAT,       /* a data or checkpoint file that is corrupt or of another kind */
    HR_ERR_OOM,          /* host memory ran out */
    HR_ERR_DEVICE_OOM,   /* the plan does not fit the device (or an allocation failed there) */
    HR_ERR_NUMERIC,      /* a NaN or inf loss */
    HR_ERR_UNSUPPORTED,  /* a valid request this build cannot do (e.g. CUDA without a GPU) */
    HR_ERR_DEVICE,       /* a CUDA / cuBLAS / cuDNN call failed */
    HR_ERR_INTERNAL,
} hr_status;

const char *hr_status_name(hr_status st);

/* Element types of tensors (safetensors' names: F32, F16, BF16, I32, U8). */
typedef enum { HR_F32 = 0, HR_F16, HR_BF16, HR_I32, HR_U8, HR_DTYPE_COUNT } hr_dtype;
const char *hr_last_error(void); /* message of the last failure on this thread */
hr_status hr_last_status(void);   /* its status */

/* ---- building a model ------------------------------------------------------ */
typedef struct hr_model hr_model_t;

hr_model_t *hr_model_new(const char *name);
void hr_model_free(hr_model_t *m);
/* Where the next layers come from, for error messages ("mnist.model:7"). */
void hr_model_set_source(hr_model_t *m, const char *file, int line);

/* Every builder returns the id of its output tensor, or -1 with hr_last_error
 * set. `name` may be NULL: then the layer is named by its index. Shapes exclude
 * the batch dimension: an image input is (C, H, W). */
int hr_input(hr_model_t *m, const char *name, int ndim, const int64_t *dims);
int hr_linear(hr_model_t *m, const char *name, int x, int64_t in_features, int64_t out_features, bool bias);
/* A Linear whose weight is layer `tied_to`'s weight, (out_features, in_features),
 * one parameter with one gradient (weight tying: GPT's lm_head and its token
 * Embedding). Checkpoints hold it under both names, as PyTorch's state_dict. */
int hr_linear_tied(hr_model_t *m, const char *name, int x, int64_t in_features, int64_t out_features, bool bias,
                   const char *tied_to);
int hr_conv2d(hr_model_t *m, const char *name, int x, int64_t in_ch, int64_t out_ch, int kernel, int stride,
              int padding, bool bias);
/* nn.Conv2d's dilation (the kernel's taps that far apart; 1: adjacent) and
 * groups (in_ch and out_ch split into that many independent convolutions;
 * groups == in_ch: depthwise); the weight is (out_ch, in_ch / groups, k, k). */
int hr_conv2d_ex(hr_model_t *m, const char *name, int x, int64_t in_ch, int64_t out_ch, int kernel, int stride,
                 int padding, int dilation, int groups, bool bias);
int hr_relu(hr_model_t *m, const char *name, int x);
int hr_leaky_relu(hr_model_t *m, const char *name, int x, float negative_slope);
int hr_gelu(hr_model_t *m, const char *name, int x, bool tanh_approximation); /* approximate='tanh' */
int hr_silu(hr_model_t *m, const char *name, int x);
int hr_sigmoid(hr_model_t *m, const char *name, int x);
int hr_tanh(hr_model_t *m, const char *name, int x);
/* LayerNorm over the last ndim (1 to 3) dims, whose sizes normalized_shape
 * gives; weight and bias (with elementwise_affine; bias may be off) have that shape. */
int hr_layernorm(hr_model_t *m, const char *name, int x, int ndim, const int64_t *normalized_shape, float eps,
                 bool elementwise_affine, bool bias);
/* Sequences (per-sample shapes (T) of token ids, (T, C) of vectors):
 * Embedding looks up the model's input, token ids carried as floats
 * (nn.Embedding; weight (num_embeddings, dim), N(0, 1)); PositionEmbedding
 * adds a learned vector per position (GPT's wpe; weight (max_positions, dim));
 * causal self-attention takes the (T, 3C) projection q|k|v (nanoGPT's c_attn)
 * and gives (T, C), heads of C/heads channels, as scaled_dot_product_attention
 * with is_causal=True. Linear and LayerNorm act on the last dim. */
int hr_embedding(hr_model_t *m, const char *name, int x, int64_t num_embeddings, int64_t dim);
int hr_position_embedding(hr_model_t *m, const char *name, int x, int64_t max_positions, int64_t dim);
int hr_causal_attention(hr_model_t *m, const char *name, int qkv, int64_t heads);
/* The same with attention dropout (scaled_dot_product_attention's
 * dropout_p, GPT-2's attn_pdrop): in training each probability dropped with
 * probability attn_pdrop in [0, 1), the kept scaled by 1 / (1 - attn_pdrop). */
int hr_causal_attention_pdrop(hr_model_t *m, const char *name, int qkv, int64_t heads, float attn_pdrop);
/* nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
 * activation, layer_norm_eps, batch_first=True, norm_first, bias) called with
 * a causal mask, its parameters under PyTorch's names (<name>.self_attn.
 * in_proj_weight, .out_proj, .linear1, .linear2, .norm1, .norm2); dropout > 0
 * drops where PyTorch's module does: the attention probabilities, and
 * Dropout layers dropout1 (after out_proj), dropout (after the activation)
 * and dropout2 (after linear2). The block's output, (T, d_model) */
int hr_transformer_encoder_layer(hr_model_t *m, const char *name, int x, int64_t d_model, int64_t nhead, int64_t dim_ff,
                                 float dropout, bool gelu, float eps, bool norm_first, bool bias);
int hr_maxpool2d(hr_model_t *m, const char *name, int x, int kernel, int stride);
int hr_avgpool2d(hr_model_t *m, const char *name, int x, int kernel, int stride);
int hr_global_avgpool(hr_model_t *m, const char *name, int x); /* (C,H,W) -> (C,1,1), AdaptiveAvgPool2d(1) */
int hr_batchnorm(hr_model_t *m, const char *name, int x, int64_t features, float eps, float momentum);
int hr_dropout(hr_model_t *m, const char *name, int x, float p);
int hr_flatten(hr_model_t *m, const char *name, int x);
int hr_reshape(hr_model_t *m, const char *name, int x, int ndim, const int64_t *dims);
int hr_add(hr_model_t *m, const char *name, int a, int b);
int hr_concat(hr_model_t *m, const char *name, int n, const int *xs); /* along channels (dim 1) */
int hr_softmax(hr_model_t *m, const char *name, int x);
int hr_log_softmax(hr_model_t *m, const char *name, int x);
/* Losses end the model: labels (int32, one per sample) or targets are added as
 * inputs. The loss is a mean over the batch, as PyTorch's default. */
int hr_loss_cross_entropy(hr_model_t *m, int logits, int64_t num_classes);
int hr_loss_mse(hr_model_t *m, int pred);
/* Initial values: "pytorch" (each layer's default, nn.Linear's uniform, nn.Embedding's
 * N(0, 1), ...) or "gpt2" (GPT-2's and nanoGPT's: the weights of Linear and the
 * embeddings N(0, 0.02), biases 0, each residual projection's weight (a layer
 * named *c_proj right before an Add) N(0, 0.02 / sqrt(2 x the attention
 * layers)); norms as PyTorch's). A model file writes `init gpt2`. */
hr_status hr_model_set_init(hr_model_t *m, const char *scheme);
/* A frozen parameter gets no gradient and no optimizer state. */
hr_status hr_model_freeze(hr_model_t *m, const char *param_name);

/* Shape of a tensor (without batch), for tools and tests. */
int hr_tensor_ndim(const hr_model_t *m, int t);
int64_t hr_tensor_dim(const hr_model_t *m, int t, int i);
int hr_model_output(const hr_model_t *m); /* the tensor before the loss */
int hr_model_input(const hr_model_t *m);
/* Classes of a model ending in CrossEntropyLoss; 0 for any other loss (or none). */
int64_t hr_model_classes(const hr_model_t *m);

/* ---- compiling: the step program and its plan ------------------------------ */
typedef enum { HR_MODE_TRAIN = 0, HR_MODE_INFER } hr_mode;
typedef enum { HR_OPTIM_SGD = 0, HR_OPTIM_ADAM, HR_OPTIM_ADAMW } hr_optim_kind;
typedef enum { HR_DEVICE_CPU = 0, HR_DEVICE_CUDA, HR_DEVICE_AUTO } hr_device;
/* Mixed precision with torch.autocast's rules: parameters, gradients and
 * optimizer state stay fp32; matrix products and convolutions run in the half
 * type (fp32 accumulation), and what follows them stays half until an op that
 * autocast runs in fp32 (norms over features, softmax, losses). fp16 scales
 * the loss as torch.amp.GradScaler does. */
typedef enum { HR_PREC_FP32 = 0, HR_PREC_BF16, HR_PREC_FP16 } hr_precision;
const char *hr_precision_name(hr_precision p); /* "fp32", "bf16", "fp16" */

typedef struct {
    hr_optim_kind kind;
    float lr;
    float momentum, dampening; /* SGD */
    bool nesterov;             /* SGD */
    float beta1, beta2, eps;   /* Adam, AdamW */
    float weight_decay;        /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    bool decay_matrices_only;  /* weight decay only for parameters of 2 or more dims: biases and norm
                                  weights get none (GPT-2's and nanoGPT's optimizer groups) */
    float clip_norm;           /* > 0: clip by global gradient norm, as clip_grad_norm_ */
    /* The learning rate by step (nanoGPT's get_lr; none when both counts are 0):
     * step t (1-based) of the first warmup_steps takes lr t/(warmup_steps+1);
     * then a cosine from lr down to min_lr at step decay_steps + 1, min_lr after. */
    int64_t warmup_steps, decay_steps;
    float min_lr;
} hr_optim_t;
/* The learning rate of optimizer step t (1-based) under o's schedule. */
float hr_lr_at(const hr_optim_t *o, int64_t t);

typedef struct {
    int64_t batch;
    hr_mode mode;
    hr_optim_t optim;
    hr_device device;
    uint64_t seed;       /* initial weights and dropout masks */
    bool allow_tf32;     /* CUDA: TF32 matrix products (off, as in PyTorch) */
    bool keep_grads;     /* gradients outlive the update (hr_grad_read, accumulation); costs memory */
    bool keep_output;    /* training: the output (the loss's input) outlives the step, for
                            hr_read_output; costs memory (a language model's logits, which the
                            loss's gradient otherwise overwrites) */
    size_t device_budget; /* > 0: plan must fit this many bytes, whatever the device has */
    /* Training: also plan an evaluation pass (the forward pass in inference
     * mode) of this many samples, in the same arena: hr_eval_forward. 0: none;
     * -1: as many as a pass of the step (the batch, or the micro-batch with
     * accumulation; it follows the batch in a largest-batch search). */
    int64_t eval_batch;
    hr_precision precision;
    /* > 1: each optimizer step sums the gradients of `accumulate` micro-batches
     * of batch/accumulate samples (the batch must divide evenly); the update
     * equals the whole batch's. 0 or 1: none. */
    int accumulate;
    /* fp16's loss scaler (torch.amp.GradScaler): the initial scale (0: 2^16)
     * and the steps without inf/NaN after which it doubles (0: 2000). */
    float loss_scale;
    int scale_growth_interval;
    /* Activation recomputation (training): forward results of these layers
     * are not kept for the backward pass but computed again when it needs
     * them, which trades compute for memory with bit-identical gradients.
     * NULL, "" or "none": keep everything; "all": every layer that can be;
     * "1,3,4": layers by name; "auto": the cheapest choice (by predicted
     * time) whose device total fits device_budget, or what the device has
     * free without a budget; "min": the smallest arena the planner finds.
     * The string is copied at compile. */
    const char *recompute;
    /* Training: > 1 runs the layers from the input up to the first one that
     * mixes samples (a batch norm, the loss) on this many slices of the
     * batch, one after another, recomputing each slice's activations for its
     * backward pass: their full-batch activations never exist. The
     * gradients are the same sums in slices (equal up to rounding, as with
     * accumulation). Fewer slices where the batch is small; 0 or 1: none. */
    int chunks;
} hr_config_t;

hr_config_t hr_config_default(void); /* batch 64, train, Adam(1e-3, 0.9, 0.999, 1e-8), CPU, seed 0 */

typedef struct hr_session hr_session_t;

/* Builds the step program (forward, backward, update) and plans it. Allocates
 * only bookkeeping, whatever the batch: a plan for 10^7 samples is fine. */
hr_session_t *hr_compile(const hr_model_t *m, const hr_config_t *cfg);
void hr_session_free(hr_session_t *s);

/* ---- the plan's report ----------------------------------------------------- */
typedef enum {
    HR_CAT_PARAMS = 0,
    HR_CAT_GRADS,
    HR_CAT_OPTSTATE,
    HR_CAT_SAVED,      /* forward results kept for the backward pass */
    HR_CAT_TRANSIENT,  /* everything else that lives and dies within the step */
    HR_CAT_WORKSPACE,  /* kernels' scratch: im2col, cuDNN workspace */
    HR_CAT_INPUTS,     /* the batch and its labels */
    HR_CAT_WCOPY,      /* mixed precision: the weights' half copies that products and convolutions read */
    HR_CAT_COUNT
} hr_category;
const char *hr_category_name(hr_category c);

typedef struct {
    const char *name;  /* tensor name, e.g. "3.out" */
    const char *layer; /* layer name, e.g. "3" (Conv2d) */
    size_t bytes;
} hr_top_tensor;

typedef struct {
    size_t category_bytes[HR_CAT_COUNT]; /* bytes placed for each category (tensors rounded up to 256 bytes) */
    size_t category_at_peak[HR_CAT_COUNT]; /* what each category holds at the peak moment */
    size_t arena_bytes;      /* the device (or host) arena: the predicted peak of planned memory */
    size_t lower_bound;      /* largest sum of live bytes at any point of the schedule */
    size_t pinned_bytes;     /* pinned host staging buffers (CUDA) */
    size_t overhead_bytes;   /* runtime overhead measured on the device (context, library handles) */
    size_t device_total;     /* what the process holds for this plan, as nvidia-smi shows it: the arena
                                in the allocator's 2 MiB pages plus the overhead (CPU: the arena) */
    int64_t eval_batch;      /* the evaluation pass's batch (cfg.eval_batch), 0 without one */
    size_t step_arena_bytes; /* with an evaluation pass: the arena the step alone would need */
    int peak_step;           /* schedule index at which the live bytes are largest */
    const char *peak_op;     /* the op running there */
    int n_tensors, n_steps;
    int n_top;
    hr_top_tensor top[8];    /* largest tensors alive at the peak */
    /* activation recomputation (cfg.recompute) */
    const char *recompute;      /* the recomputed layers ("1,2,5"), NULL for none */
    int recompute_nodes;        /* forward nodes run again in the backward pass */
    size_t arena_no_recompute;  /* the arena the step would need keeping everything */
    double recompute_extra_ms;  /* predicted time the recomputation adds to a step */
    /* cfg.chunks: the slices the first layers ran in (0: none), their samples
     * (the last slice the rest) and those layers; arena_no_recompute is then
     * the arena with neither slices nor recomputation */
    int chunks;
    int64_t chunk_samples;
    int chunk_layers;
} hr_report_t;

const hr_report_t *hr_session_report(const hr_session_t *s);
void hr_report_print(const hr_session_t *s, FILE *f);
void hr_report_json(const hr_session_t *s, FILE *f);
/* The device memory a plan holds: the arena rounded up to the allocator's
 * 2 MiB pages, plus the runtime overhead (what nvidia-smi shows for the
 * process). The one test of fitting a budget, everywhere: total <= budget. */
size_t hr_device_total(size_t arena_bytes, size_t overhead_bytes);
/* Largest batch in [1, hi] whose plan fits `budget` bytes (on CUDA
 * hr_device_total of its arena and `overhead`, on the CPU arena plus
 * overhead); 0 if none does. Plans only; allocates nothing on any device. */
int64_t hr_largest_batch(const hr_model_t *m, const hr_config_t *cfg, size_t budget, size_t overhead, int64_t hi);
/* "1.50 GiB" */
const char *hr_format_bytes(size_t n, char *buf, size_t len);
/* "8GiB", "512MB", "1e9" -> bytes; false if malformed */
bool hr_parse_bytes(const char *s, size_t *out);

/* ---- running --------------------------------------------------------------- */
/* Allocates the arena(s) once and initialises the parameters (PyTorch's default
 * init, from cfg.seed). On a device that lacks the room, returns
 * HR_ERR_DEVICE_OOM having allocated nothing, with the category table, what is
 * free and the largest batch that fits in the message. */
hr_status hr_session_alloc(hr_session_t *s);
/* One training step on a full batch: x is (batch, input shape) float32, labels
 * int32 (cross-entropy) or targets float32 (MSE). loss may be NULL. */
hr_status hr_train_step(hr_session_t *s, const float *x, const void *labels, float *loss);
/* Steps queued ahead, so that the host stages batch t+1 while the device
 * runs step t: hr_train_submit queues a step on x and labels (theirs again
 * on return) and returns without waiting; hr_train_wait gives the oldest
 * queued step's loss, waiting for it. At most HR_STEP_QUEUE steps are queued;
 * hr_train_step, evaluating, reading state or output and saving need none
 * queued. Where the step needs the host between its passes (the CPU,
 * fp16's scaler, accumulation with HR_DEVICE_ACCUMULATE=0), submit runs it
 * at once (queued behind a non-finite loss: not at all); accumulation on a
 * GPU is queued like a step of one pass.
 * With the NaN stop, a step whose loss is not finite takes no update, and
 * neither do the steps queued behind it then: their losses come back NaN,
 * and hr_step_count counts none of them; steps submitted after that loss
 * came back update again. */
#define HR_STEP_QUEUE 2
hr_status hr_train_submit(hr_session_t *s, const float *x, const void *labels);
hr_status hr_train_wait(hr_session_t *s, float *loss);
int hr_train_queued(const hr_session_t *s);
/* Inference: out receives (batch, output shape) of the layer before the loss. */
hr_status hr_forward(hr_session_t *s, const float *x, float *out);
/* The evaluation pass of a training session compiled with cfg.eval_batch:
 * the forward pass in inference mode (running statistics, no dropout) of
 * eval_batch samples x, in the training arena, with the current parameters;
 * out receives (eval_batch, output shape). */
hr_status hr_eval_forward(hr_session_t *s, const float *x, float *out);
/* The outputs of the last forward, or of the last train step of a session
 * compiled with keep_output, copied to the host as float32. */
hr_status hr_read_output(hr_session_t *s, float *out);
int64_t hr_step_count(const hr_session_t *s);
/* fp16's loss scaler (torch.amp.GradScaler's rules): the scale, the good
 * steps since it last changed, and the steps skipped for inf/NaN gradients
 * (hr_step_count counts only the steps taken). Any pointer may be NULL;
 * the scale is 1 without fp16. Set: a checkpoint's values on resume. */
hr_status hr_loss_scale(const hr_session_t *s, float *scale, int64_t *growth, int64_t *skipped);
hr_status hr_set_loss_scale(hr_session_t *s, float scale, int64_t growth, int64_t skipped);
hr_status hr_set_step_count(hr_session_t *s, int64_t t);

/* Named state: parameters ("0.weight"), buffers ("1.running_mean"),
 * optimizer state ("0.weight.exp_avg", "0.weight.exp_avg_sq", "0.weight.momentum_buffer"). */
int hr_state_count(const hr_session_t *s);
const char *hr_state_name(const hr_session_t *s, int i);
int hr_state_ndim(const hr_session_t *s, int i);
int64_t hr_state_dim(const hr_session_t *s, int i, int d);
bool hr_state_is_param(const hr_session_t *s, int i); /* parameter or buffer, not optimizer state */
int hr_state_find(const hr_session_t *s, const char *name);
hr_status hr_state_read(hr_session_t *s, int i, float *dst);
hr_status hr_state_write(hr_session_t *s, int i, const float *src);
/* Gradients of the last train step, by parameter name. */
hr_status hr_grad_read(hr_session_t *s, const char *param_name, float *dst);

/* Device statistics in PyTorch's terms (CUDA; on the CPU: the host arena). */
typedef struct {
    size_t allocated, reserved, peak_allocated;
    size_t device_free, device_total;
    int64_t device_allocs; /* calls to the device allocator since the session began */
} hr_mem_stats_t;
hr_status hr_mem_stats(hr_session_t *s, hr_mem_stats_t *out);

/* Testing: make the Nth allocation (of any memory kind) from now fail; 0 turns
 * it off. Returns how many allocations were made since the last call. */
int64_t hr_fault_fail_at(int64_t n);

#ifdef __cplusplus
}
#endif
#endif
