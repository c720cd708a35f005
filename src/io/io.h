/* io.h — files headroom reads and writes: safetensors (weights, checkpoints),
 * model files (one PyTorch-named layer a line) and the JSON of their headers. */
#ifndef HR_IO_H
#define HR_IO_H

#include "core/core.h"

/* ---- JSON (json.c): a strict reader, just enough for safetensors headers --- */
typedef enum {
    HR_JSON_NULL = 0,
    HR_JSON_BOOL,
    HR_JSON_NUMBER,
    HR_JSON_STRING,
    HR_JSON_ARRAY,
    HR_JSON_OBJECT
} hr_json_type;

typedef struct hr_json hr_json;
struct hr_json {
    hr_json_type type;
    size_t offset;   /* byte offset of the value in the text, for messages */
    bool boolean;    /* HR_JSON_BOOL */
    char *str;       /* STRING: the decoded UTF-8 text; NUMBER: the number as written */
    int n;           /* ARRAY/OBJECT: number of elements or members */
    hr_json *items;  /* ARRAY: elements; OBJECT: member values */
    char **keys;     /* OBJECT: member names, decoded */
};

/* Parses exactly one JSON value (RFC 8259; surrounding whitespace allowed,
 * nothing else) into *out. Errors: HR_ERR_FORMAT "WHAT: byte N: invalid JSON:
 * ...", N counted from `base` (so a caller can report file offsets), or
 * HR_ERR_OOM. Strings must be valid UTF-8 without \u0000; nesting is limited
 * to 64 levels. */
hr_status hr_json_parse(const char *text, size_t len, const char *what, size_t base, hr_json **out);
void hr_json_free(hr_json *j);
const hr_json *hr_json_get(const hr_json *obj, const char *key); /* first member named key, or NULL */
/* A NUMBER that is an integer in [0, 2^63): true and *out; false otherwise. */
bool hr_json_uint(const hr_json *j, int64_t *out);

/* ---- safetensors (safetensors.c) ------------------------------------------ */
/* Layout: u64 little-endian N, N bytes of JSON header, then the data buffer.
 * {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
 *  "__metadata__": {"key": "value"}}; offsets count from the buffer's start. */
#define HR_ST_MAX_DIMS 8
#define HR_ST_MAX_HEADER 100000000 /* the reference implementation's limit */

typedef struct {
    char *name;
    char dtype[8];     /* as in the file: "F32", "BF16", "I64", ... */
    int hr_dtype;      /* the matching hr_dtype, or -1 for one headroom has not */
    size_t elsize;     /* bytes per element */
    int ndim;          /* 0 for a scalar */
    int64_t dims[HR_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range in the data buffer */
} hr_st_tensor;

typedef struct hr_safetensors hr_safetensors_t;

/* Reads and validates the header; the data stays in the file and is read on
 * demand. Any inconsistency (header past the end of the file, bad JSON, an
 * unknown dtype, shape x dtype size != byte range, ranges out of the buffer,
 * overlapping or leaving gaps, duplicate names) is HR_ERR_FORMAT naming the
 * file and the tensor. NULL on error. */
hr_safetensors_t *hr_safetensors_open(const char *path);
/* The same on a whole file already in memory; `buf` must outlive the table. */
hr_safetensors_t *hr_safetensors_open_memory(const void *buf, size_t len, const char *name_for_errors);
void hr_safetensors_free(hr_safetensors_t *f);

int hr_safetensors_count(const hr_safetensors_t *f);
const hr_st_tensor *hr_safetensors_at(const hr_safetensors_t *f, int i); /* in header order */
const char *hr_safetensors_path(const hr_safetensors_t *f);
/* NULL with HR_ERR_FORMAT "no tensor 'x' in f.safetensors (it has: ...)". */
const hr_st_tensor *hr_safetensors_find(const hr_safetensors_t *f, const char *name);
/* find + checks: dtype (NULL: any of F32, F16, BF16, F64, which read_f32
 * converts) and shape. "tensor '0.weight' in ckpt.safetensors has shape
 * [10, 20], the model expects [20, 10]". */
const hr_st_tensor *hr_safetensors_expect(const hr_safetensors_t *f, const char *name, const char *dtype, int ndim,
                                          const int64_t *dims);
/* The value of a __metadata__ key, or NULL. Keys are also listed in order. */
const char *hr_safetensors_meta(const hr_safetensors_t *f, const char *key);
int hr_safetensors_meta_count(const hr_safetensors_t *f);
const char *hr_safetensors_meta_key(const hr_safetensors_t *f, int i);
/* The raw bytes of a tensor (t->end - t->begin of them). */
hr_status hr_safetensors_read(hr_safetensors_t *f, const hr_st_tensor *t, void *dst);
/* numel floats, converted from F32, F16, BF16 or F64. */
hr_status hr_safetensors_read_f32(hr_safetensors_t *f, const hr_st_tensor *t, float *dst);

/* One tensor to write. `data` holds nbytes; or, when NULL, the writer asks
 * fill(ctx, index, dst) for the bytes (so a checkpoint needs one scratch
 * buffer, not a copy of the whole model). */
typedef struct {
    const char *name;
    const char *dtype;     /* "F32", "I64", ... */
    int ndim;
    const int64_t *dims;
    const void *data;
} hr_st_entry;
typedef hr_status (*hr_st_fill_fn)(void *ctx, int index, void *dst);

/* Writes a temporary file of its own beside PATH (mkstemp's), flushes and
 * fsyncs it, renames it to PATH (a symlink's file, the link kept) and fsyncs
 * the directory: a crash or a failure midway leaves the previous PATH as it was.
 * meta: n_meta key/value pairs (keys[i], values[i]), written as __metadata__.
 * As the reference implementation does, the header is padded with spaces to a
 * multiple of 8 bytes and the data is laid out by element size, largest first,
 * so every tensor is aligned (the header keeps the caller's order). Checked
 * with safetensors 0.8.0: safetensors.torch.load_file reads these files. */
hr_status hr_safetensors_write(const char *path, const hr_st_entry *t, int n, const char *const *keys,
                               const char *const *values, int n_meta, hr_st_fill_fn fill, void *ctx);
/* Whether hr_safetensors_write could write PATH, asked before any work that
 * would be lost (train --save): PATH is a regular file or absent, a symlink
 * is followed to its file (which the write replaces, the link stays), and its
 * directory exists and takes a new file (one is made and removed). The
 * error says what and where. */
hr_status hr_safetensors_check_writable(const char *path);

/* ---- checkpoints (checkpoint.c) ------------------------------------------- */
/* A checkpoint is a safetensors file: parameters and buffers under their names
 * ("0.weight", "1.running_mean": PyTorch's load_state_dict takes them; each
 * layer with running statistics also gets PyTorch's "N.num_batches_tracked"), optimizer state
 * under "optim." + its name ("optim.0.weight.exp_avg"), and this struct in
 * __metadata__ as "headroom.*" strings. */
typedef struct {
    char model[128];       /* model name, for people */
    int64_t epoch;         /* epochs completed */
    int64_t batch;         /* batches completed within the current epoch */
    int64_t step;          /* optimizer steps taken (hr_step_count) */
    uint64_t seed;
    char fingerprint[96];  /* names and shapes of the parameters and buffers, hashed */
    /* How the run trained (the session's own on save; on load what the file
     * says, or fp32, 1 and 0 for files written before these keys). */
    hr_precision precision; /* headroom.precision: fp32, bf16, fp16 */
    int64_t accumulate;     /* headroom.accumulate: micro-batches a step */
    int64_t batch_size;     /* headroom.batch_size: samples a step (0: not a training run's, or not said) */
    /* fp16's loss scaler (GradScaler), restored on load into an fp16 session:
     * headroom.loss_scale (the float exactly, as C's "%a"), headroom.scale_growth
     * (good steps since it last changed), headroom.steps_skipped. */
    float loss_scale;
    int64_t scale_growth, steps_skipped;
    /* What the model's inputs were, so that its evaluation can be redone in
     * PyTorch from the file alone: headroom.input, for people ("": not said),
     * and headroom.input_mean, headroom.input_std (the floats as C's "%.9g"):
     * pixels v became (v/255 - mean) / std; both 0 when the inputs were not
     * normalised (synthetic data) or the file does not say. Optional on load. */
    char input[128];
    float input_mean, input_std;
} hr_ckpt_meta;

/* The session's fingerprint, "N tensors, M values, fnv1a64 " and the 64-bit
 * FNV-1a hash in 16 hex digits, over the names and shapes of parameters and
 * buffers (not optimizer state). */
void hr_checkpoint_fingerprint(const hr_session_t *s, char *buf, size_t n);
/* Saves every state tensor atomically (see hr_safetensors_write). The
 * fingerprint, step, precision, accumulation, batch size and loss scaler
 * stored are the session's own: of meta, only model, epoch, batch, seed and
 * the input's description (when set) are written. */
hr_status hr_checkpoint_save(hr_session_t *s, const char *path, const hr_ckpt_meta *meta);
/* Checkpoints written in the background (train's per-epoch saves): a save
 * copies the state to host memory (hr_checkpoint_state_bytes, a buffer kept
 * for the next save) while the caller waits, then a thread writes the file as
 * hr_checkpoint_save does (a temporary file, fsync, rename: the previous
 * checkpoint stays whole until the new one is). A save waits for the write
 * before it and returns its error, if any; so does wait. Without room for the
 * copy a save writes the file at once. */
typedef struct hr_ckpt_writer hr_ckpt_writer;
hr_ckpt_writer *hr_ckpt_writer_new(void);
size_t hr_checkpoint_state_bytes(const hr_session_t *s);
hr_status hr_ckpt_writer_save(hr_ckpt_writer *w, hr_session_t *s, const char *path, const hr_ckpt_meta *meta);
hr_status hr_ckpt_writer_wait(hr_ckpt_writer *w);
void hr_ckpt_writer_free(hr_ckpt_writer *w); /* waits first */
/* Checks the whole file against the session before changing anything: the
 * fingerprint, then every tensor's presence, dtype and shape; then writes the
 * state and restores the step count, and fp16's loss scaler when both the
 * file and the session are fp16 (another precision loads the weights alone:
 * whether to allow that is the caller's call, with meta->precision). meta (may be NULL) receives the file's
 * metadata; if meta->model is set on entry it names this session's model in
 * messages. Optimizer state loads when the file has the session's (all of
 * it, or it is an error); a session without any (inference, plain SGD) just
 * takes the weights. A plain safetensors file of weights (no headroom
 * metadata, e.g. saved from PyTorch: F32, F16, BF16 or F64) loads too; then
 * the step count is left alone. */
hr_status hr_checkpoint_load(hr_session_t *s, const char *path, hr_ckpt_meta *meta);
/* The metadata alone (how the run trained, where it stopped), without a
 * session: what `train --fit` needs before it plans a resumed run. A plain
 * weights file gives fp32, 1 and zeros. */
hr_status hr_checkpoint_peek(const char *path, hr_ckpt_meta *meta);

/* ---- model files (modelfile.c) -------------------------------------------- */
/* One layer a line, as in PyTorch (see docs/model-files.md):
 *     input 1 28 28
 *     Conv2d(1, 32, 3, padding=1)
 *     ReLU()
 *     Flatten()
 *     Linear(25088, 10)
 *     loss CrossEntropyLoss
 * NULL on error, with "file:line: what was wrong and what was expected". */
hr_model_t *hr_modelfile_load(const char *path);
hr_model_t *hr_modelfile_parse(const char *text, const char *name_for_errors);
/* The same with its `input T` read as `input context` (a model of token ids:
 * the context length the plan, fit and train use; PositionEmbedding's table
 * bounds it); context 0: as written. */
hr_model_t *hr_modelfile_load_context(const char *path, int64_t context);

#endif
