/* modelfile.c — reads model files: one PyTorch-named layer a line, `input`
 * and `loss` lines, `name = Layer(...)` and references for graphs. The
 * layers, their signatures and builders come from the op registry. */
#include "io/io.h"
#include "ops/ops.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_ARGS 16
#define MAX_FILE (16 << 20)

/* ---- values and calls, as parsed from one line -------------------------------- */
typedef enum { V_INT, V_FLOAT, V_BOOL, V_NONE, V_NAME, V_STR, V_TUPLE } vkind;

typedef struct {
    vkind kind;
    int64_t i;       /* V_INT, V_BOOL */
    double f;        /* V_FLOAT (and V_INT, converted) */
    int n;           /* V_TUPLE: how many ints */
    int64_t tup[4];
    const char *src; /* the text as written, for messages and names */
    int len;
} value;

typedef struct {
    const char *type;
    int type_len;
    int npos, nkw;
    value pos[MAX_ARGS], kw[MAX_ARGS];
    const char *kw_name[MAX_ARGS];
    int kw_len[MAX_ARGS];
    bool has_from; /* Layer(...)(name): applied to layer name's output, not the previous one */
    value from;
} call;

typedef struct {
    const char *file;
    int line;
    const char *p, *end; /* the rest of the current line */
} lexer;

static hr_status errf(const lexer *lx, hr_status st, const char *fmt, ...) HR_PRINTF(3, 4);
static hr_status errf(const lexer *lx, hr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hr_error_set(st, "%s:%d: %s", lx->file, lx->line, msg);
}

static void skip_space(lexer *lx) {
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r')) lx->p++;
}

static bool is_ident_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* Is the next character c (after spaces)? Consumes it if so. */
static bool accept(lexer *lx, char c) {
    skip_space(lx);
    if (lx->p < lx->end && *lx->p == c) { lx->p++; return true; }
    return false;
}

static int ident(lexer *lx) {
    skip_space(lx);
    const char *s = lx->p;
    if (s >= lx->end || !is_ident_start(*s)) return 0;
    while (lx->p < lx->end && is_ident(*lx->p)) lx->p++;
    return (int)(lx->p - s);
}

/* A name, dotted as PyTorch's module paths are: ident ("." [A-Za-z0-9_]+)*
 * (transformer.h.0.attn), so that a layer's parameters take its state_dict
 * names. Returns its length, 0 if none. */
static int dotted(lexer *lx) {
    int n = ident(lx);
    if (!n) return 0;
    const char *s = lx->p - n;
    while (lx->p + 1 < lx->end && lx->p[0] == '.' && is_ident(lx->p[1])) {
        lx->p++;
        while (lx->p < lx->end && is_ident(*lx->p)) lx->p++;
    }
    return (int)(lx->p - s);
}

static bool same(const char *s, int len, const char *word) {
    return (int)strlen(word) == len && !strncmp(s, word, (size_t)len);
}

/* What comes next, quoted for a message: "'xyz'" or "the end of the line". */
static const char *next_text(const lexer *lx, char *buf, size_t n) {
    if (lx->p >= lx->end) return "the end of the line";
    int k = (int)(lx->end - lx->p) < 24 ? (int)(lx->end - lx->p) : 24;
    snprintf(buf, n, "'%.*s'", k, lx->p);
    return buf;
}

static hr_status parse_value(lexer *lx, value *v, bool in_tuple) {
    char buf[40];
    skip_space(lx);
    memset(v, 0, sizeof *v);
    v->src = lx->p;
    if (lx->p < lx->end && (*lx->p == '\'' || *lx->p == '"')) {
        char q = *lx->p++;
        while (lx->p < lx->end && *lx->p != q) lx->p++;
        if (lx->p >= lx->end) return errf(lx, HR_ERR_PARSE, "unterminated string %.20s", v->src);
        lx->p++;
        v->kind = V_STR;
    } else if (!in_tuple && accept(lx, '(')) { /* a tuple of ints: kernel_size=(3, 3) */
        v->kind = V_TUPLE;
        do {
            value e;
            hr_status st = parse_value(lx, &e, true);
            if (st != HR_OK) return st;
            if (e.kind != V_INT)
                return errf(lx, HR_ERR_PARSE, "a tuple may hold only integers, got '%.*s'", e.len, e.src);
            if (v->n == 4) return errf(lx, HR_ERR_PARSE, "a tuple of more than 4 sizes");
            v->tup[v->n++] = e.i;
        } while (accept(lx, ',') && (skip_space(lx), lx->p < lx->end && *lx->p != ')'));
        if (!accept(lx, ')'))
            return errf(lx, HR_ERR_PARSE, "expected ')' to close the tuple, found %s", next_text(lx, buf, sizeof buf));
    } else if (dotted(lx)) {
        int n = (int)(lx->p - v->src);
        if (same(v->src, n, "True") || same(v->src, n, "true")) v->kind = V_BOOL, v->i = 1;
        else if (same(v->src, n, "False") || same(v->src, n, "false")) v->kind = V_BOOL;
        else if (same(v->src, n, "None")) v->kind = V_NONE;
        else v->kind = V_NAME;
    } else {
        const char *s = lx->p;
        while (lx->p < lx->end && (is_ident(*lx->p) || strchr("+-.", *lx->p))) lx->p++;
        if (lx->p == s) return errf(lx, HR_ERR_PARSE, "expected a value, found %s", next_text(lx, buf, sizeof buf));
        char num[64];
        snprintf(num, sizeof num, "%.*s", (int)(lx->p - s), s);
        char *e;
        errno = 0;
        long long i = strtoll(num, &e, 10);
        if (!*e && (int)(lx->p - s) < 63) {
            if (errno) return errf(lx, HR_ERR_PARSE, "integer %s is too large", num);
            v->kind = V_INT, v->i = i, v->f = (double)i;
        } else {
            v->f = strtod(num, &e);
            if (*e || (int)(lx->p - s) >= 63 || !isfinite(v->f))
                return errf(lx, HR_ERR_PARSE, "'%s' is not a number", num);
            v->kind = V_FLOAT;
        }
    }
    v->len = (int)(lx->p - v->src);
    return HR_OK;
}

static hr_status parse_args(lexer *lx, call *c);

/* TYPE [ "(" args ")" [ "(" name ")" ] ] — args are positional values, then
 * name=value. */
static hr_status parse_call(lexer *lx, call *c) {
    char buf[40];
    memset(c, 0, sizeof *c);
    skip_space(lx);
    c->type = lx->p;
    c->type_len = ident(lx);
    if (c->type_len && same(c->type, c->type_len, "nn") && accept(lx, '.')) { /* nn.Conv2d, as pasted from PyTorch */
        c->type = lx->p;
        c->type_len = ident(lx);
    }
    if (!c->type_len)
        return errf(lx, HR_ERR_PARSE, "expected a layer such as Linear(784, 10), found %s",
                    next_text(lx, buf, sizeof buf));
    if (!accept(lx, '(')) return HR_OK;
    if (!accept(lx, ')')) {
        hr_status st = parse_args(lx, c);
        if (st != HR_OK) return st;
    }
    if (accept(lx, '(')) { /* Conv2d(16, 16, 1)(stem) */
        c->has_from = true;
        if (parse_value(lx, &c->from, false) != HR_OK) return HR_ERR_PARSE;
        if (!accept(lx, ')'))
            return errf(lx, HR_ERR_PARSE, "expected ')' after the name of the layer to apply to, found %s",
                        next_text(lx, buf, sizeof buf));
    }
    return HR_OK;
}

static hr_status parse_args(lexer *lx, call *c) {
    char buf[40];
    do {
        if (c->npos + c->nkw == MAX_ARGS) return errf(lx, HR_ERR_PARSE, "more than %d arguments", MAX_ARGS);
        lexer save = *lx;
        int n = ident(lx);
        if (n && accept(lx, '=')) {
            skip_space(&save);
            c->kw_name[c->nkw] = save.p;
            c->kw_len[c->nkw] = n;
            for (int k = 0; k < c->nkw; k++)
                if (c->kw_len[k] == n && !strncmp(c->kw_name[k], save.p, (size_t)n))
                    return errf(lx, HR_ERR_PARSE, "keyword argument '%.*s' given twice", n, save.p);
            hr_status st = parse_value(lx, &c->kw[c->nkw++], false);
            if (st != HR_OK) return st;
        } else {
            *lx = save;
            if (c->nkw) return errf(lx, HR_ERR_PARSE, "a positional argument follows a keyword argument");
            hr_status st = parse_value(lx, &c->pos[c->npos++], false);
            if (st != HR_OK) return st;
        }
    } while (accept(lx, ',') && (skip_space(lx), lx->p < lx->end && *lx->p != ')'));
    if (!accept(lx, ')'))
        return errf(lx, HR_ERR_PARSE, "expected ',' or ')' in the arguments, found %s", next_text(lx, buf, sizeof buf));
    return HR_OK;
}

/* ---- binding arguments to a layer's signature (src/ops/<family>.c) ------------------ */
typedef hr_layer_sig spec;
typedef hr_arg_spec param;

static int n_params(const spec *s) {
    int n = 0;
    while (n < HR_LAYER_MAX_ARGS && s->args[n].name) n++;
    return n;
}

static const char *type_desc(hr_arg_type t) {
    switch (t) {
    case HR_ARG_SIZE: return "a positive integer";
    case HR_ARG_NONNEG: return "an integer >= 0";
    case HR_ARG_OPTSIZE: return "a positive integer or None";
    case HR_ARG_FLOAT: return "a number";
    case HR_ARG_BOOL: return "True or False";
    case HR_ARG_PAD: return "an integer >= 0, 'same' or 'valid'";
    case HR_ARG_INT: return "an integer";
    case HR_ARG_STR: return "a string";
    case HR_ARG_SHAPE: return "a positive integer or a tuple of up to 3";
    }
    return "?";
}

/* Checks v against the type; a tuple of equal sizes stands for one size. */
static hr_status check_type(const lexer *lx, const spec *s, const param *p, value *v) {
    if (p->type == HR_ARG_SHAPE) { /* one size, or a tuple of them */
        bool ok = v->kind == V_INT ? v->i > 0 : v->kind == V_TUPLE && v->n >= 1 && v->n <= 3;
        for (int i = 0; ok && v->kind == V_TUPLE && i < v->n; i++) ok = v->tup[i] > 0;
        if (!ok)
            return errf(lx, HR_ERR_PARSE, "%s argument %s must be %s, got %.*s", s->name, p->name, type_desc(p->type),
                        v->len, v->src);
        if (v->kind == V_INT) v->n = 1, v->tup[0] = v->i;
        return HR_OK;
    }
    if (v->kind == V_TUPLE && (p->type == HR_ARG_SIZE || p->type == HR_ARG_NONNEG || p->type == HR_ARG_OPTSIZE || p->type == HR_ARG_PAD)) {
        for (int i = 1; i < v->n; i++)
            if (v->tup[i] != v->tup[0])
                return errf(lx, HR_ERR_UNSUPPORTED, "%s %s=%.*s: headroom supports only square kernels and equal "
                            "strides, paddings and dilations; write one number", s->name, p->name, v->len, v->src);
        if (v->n > 2)
            return errf(lx, HR_ERR_PARSE, "%s %s=%.*s: expected 1 or 2 sizes", s->name, p->name, v->len, v->src);
        v->kind = V_INT;
        v->i = v->tup[0];
        v->f = (double)v->i;
    }
    bool ok;
    switch (p->type) {
    case HR_ARG_SIZE: ok = v->kind == V_INT && v->i > 0; break;
    case HR_ARG_NONNEG: ok = v->kind == V_INT && v->i >= 0; break;
    case HR_ARG_OPTSIZE: ok = v->kind == V_NONE || (v->kind == V_INT && v->i > 0); break;
    case HR_ARG_FLOAT: ok = v->kind == V_INT || v->kind == V_FLOAT; break;
    case HR_ARG_BOOL: ok = v->kind == V_BOOL; break;
    case HR_ARG_PAD: ok = (v->kind == V_INT && v->i >= 0) || v->kind == V_STR; break;
    case HR_ARG_INT: ok = v->kind == V_INT; break;
    case HR_ARG_STR: ok = v->kind == V_STR || v->kind == V_NONE; break; /* None: not given (tied_to) */
    default: ok = false;
    }
    if (!ok)
        return errf(lx, HR_ERR_PARSE, "%s argument %s must be %s, got %.*s", s->name, p->name, type_desc(p->type),
                    v->len, v->src);
    return HR_OK;
}

static bool value_eq(const value *a, const value *b) {
    if (a->kind == V_STR || b->kind == V_STR)
        return a->kind == b->kind && a->len == b->len && !strncmp(a->src + 1, b->src + 1, (size_t)a->len - 2);
    if (a->kind == V_NONE || b->kind == V_NONE) return a->kind == b->kind;
    return a->f == b->f && (a->kind == V_BOOL) == (b->kind == V_BOOL) && a->i == b->i;
}

/* Matches the call's arguments to the spec's parameters as Python would;
 * out[i] receives each parameter's value (given or default). */
static hr_status bind(const lexer *lx, const spec *s, call *c, value *out) {
    int np = n_params(s);
    if (c->npos > np)
        return errf(lx, HR_ERR_PARSE, "%s takes at most %d positional argument%s but %d were given", s->name, np,
                    np == 1 ? "" : "s", c->npos);
    bool given[HR_LAYER_MAX_ARGS] = {0};
    for (int i = 0; i < c->npos; i++) out[i] = c->pos[i], given[i] = true;
    for (int k = 0; k < c->nkw; k++) {
        int i = 0;
        while (i < np && !same(c->kw_name[k], c->kw_len[k], s->args[i].name)) i++;
        if (i == np) {
            char known[200] = "";
            for (int j = 0; j < np; j++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", s->args[j].name);
            return errf(lx, HR_ERR_PARSE, "%s has no argument '%.*s'; its arguments are: %s", s->name, c->kw_len[k],
                        c->kw_name[k], np ? known : "(none)");
        }
        if (given[i]) return errf(lx, HR_ERR_PARSE, "%s got two values for argument '%s'", s->name, s->args[i].name);
        out[i] = c->kw[k];
        given[i] = true;
    }
    for (int i = 0; i < np; i++) {
        const param *p = &s->args[i];
        value def;
        if (p->def) {
            lexer dl = {lx->file, lx->line, p->def, p->def + strlen(p->def)};
            parse_value(&dl, &def, false);
        }
        if (!given[i]) {
            if (!p->def)
                return errf(lx, HR_ERR_PARSE, "%s is missing its argument '%s' (%s)", s->name, p->name,
                            type_desc(p->type));
            out[i] = def;
            continue;
        }
        hr_status st = check_type(lx, s, p, &out[i]);
        if (st != HR_OK) return st;
        if (p->fixed && !value_eq(&out[i], &def))
            return errf(lx, HR_ERR_UNSUPPORTED, "%s with %s=%.*s is not supported by headroom (only %s=%s)", s->name,
                        p->name, out[i].len, out[i].src, p->name, p->def);
    }
    return HR_OK;
}

/* ---- building the model ----------------------------------------------------------- */
typedef struct {
    char *name;
    int tensor, line;
} named;

typedef struct {
    hr_model_t *m;
    lexer lx;
    int input, prev, loss_line, n_layers;
    named *names;
    int n_names, cap_names;
    int64_t context; /* > 0: replaces the T of `input T` (hr_modelfile_load_context) */
} builder;

static hr_status add_name(builder *b, const char *name, int tensor) {
    if (b->n_names == b->cap_names) {
        int nc = b->cap_names ? 2 * b->cap_names : 16;
        named *p = hr_realloc(b->names, (size_t)nc * sizeof *p);
        if (!p) return HR_ERR_OOM;
        b->names = p;
        b->cap_names = nc;
    }
    if (!(b->names[b->n_names].name = hr_strdup(name))) return HR_ERR_OOM;
    b->names[b->n_names].tensor = tensor;
    b->names[b->n_names++].line = b->lx.line;
    return HR_OK;
}

static const named *find_name(const builder *b, const char *s, int len) {
    for (int i = 0; i < b->n_names; i++)
        if ((int)strlen(b->names[i].name) == len && !strncmp(b->names[i].name, s, (size_t)len)) return &b->names[i];
    return NULL;
}

/* A reference to an earlier layer: its name, its index, or `input`. */
static hr_status resolve(builder *b, const char *layer, const value *v, int *tensor) {
    const named *n = (v->kind == V_NAME || v->kind == V_INT) ? find_name(b, v->src, v->len) : NULL;
    if (n) { *tensor = n->tensor; return HR_OK; }
    char known[300] = "";
    for (int i = 0; i < b->n_names && strlen(known) < 250; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", b->names[i].name);
    return errf(&b->lx, HR_ERR_PARSE, "%s refers to '%.*s', which is not a layer defined above (names so far: %s)",
                layer, v->len, v->src, known);
}

/* Errors of build_layer, which returns a tensor id or -1. */
#define FAIL(...) return (errf(lx, __VA_ARGS__), -1)

/* The parsed value as the layer's builder takes it. */
static hr_arg to_arg(const value *v) {
    hr_arg r;
    memset(&r, 0, sizeof r);
    r.none = v->kind == V_NONE;
    r.is_str = v->kind == V_STR;
    r.is_float = v->kind == V_FLOAT;
    r.i = v->i;
    r.f = v->f;
    r.n = v->n;
    memcpy(r.tup, v->tup, sizeof r.tup);
    r.src = v->src;
    r.len = v->len;
    return r;
}

/* Binds the call to the layer's signature and gathers its inputs: the
 * previous output (or the layer named in Layer(...)(name)), then, for layers
 * that join others, the layers named as arguments. */
static int build_layer(builder *b, const spec *s, call *c, const char *name) {
    value a[HR_LAYER_MAX_ARGS];
    hr_arg args[HR_LAYER_MAX_ARGS];
    int xs[MAX_ARGS + 1], nx = 0;
    int64_t ints[MAX_ARGS];
    int nints = 0;
    lexer *lx = &b->lx;
    int x = b->prev;
    if (c->has_from && s->inputs == HR_LAYER_REFS)
        FAIL(HR_ERR_PARSE, "%s takes the layers it joins as its arguments, not as (%.*s)", s->name, c->from.len,
             c->from.src);
    if (c->has_from && resolve(b, s->name, &c->from, &x) != HR_OK) return -1;
    xs[nx++] = x;
    if (s->inputs == HR_LAYER_ONE || s->inputs == HR_LAYER_LOSS) {
        if (bind(lx, s, c, a) != HR_OK) return -1;
        for (int i = 0; i < n_params(s); i++) args[i] = to_arg(&a[i]);
    } else {
        if (c->nkw) FAIL(HR_ERR_PARSE, "%s takes no keyword arguments, got '%.*s'", s->name, c->kw_len[0], c->kw_name[0]);
        for (int i = 0; i < c->npos; i++) {
            const value *v = &c->pos[i];
            if (s->inputs == HR_LAYER_REFS) {
                if (resolve(b, s->name, v, &xs[nx++]) != HR_OK) return -1;
            } else if (v->kind != V_INT) {
                FAIL(HR_ERR_PARSE, "%s sizes must be positive integers (one may be -1), got %.*s", s->name, v->len, v->src);
            } else {
                ints[nints++] = v->i;
            }
        }
    }
    hr_layer_call lc = {xs, nx, args, ints, nints};
    return s->build(b->m, name, &lc);
}

#undef FAIL

/* An unknown name: the known ones, and the one that differs only in case. */
static hr_status unknown(const lexer *lx, const call *c, bool loss) {
    char known[600], hint[120] = "";
    hr_layer_names(loss, known, sizeof known);
    for (int op = 0; op < HR_OP_COUNT; op++)
        for (const hr_layer_sig *l = hr_op_descs[op]->layers; l && l->name; l++)
            if ((l->inputs == HR_LAYER_LOSS) == loss && (int)strlen(l->name) == c->type_len &&
                !strncasecmp(l->name, c->type, (size_t)c->type_len))
                snprintf(hint, sizeof hint, " (did you mean %s?)", l->name);
    return errf(lx, HR_ERR_PARSE, "unknown %s '%.*s'%s; known %s: %s", loss ? "loss" : "layer", c->type_len, c->type,
                hint, loss ? "losses" : "layers", known);
}

/* After a layer: nothing, or one comma (a line pasted from nn.Sequential). */
static hr_status line_end(lexer *lx) {
    char buf[40];
    accept(lx, ',');
    skip_space(lx);
    if (lx->p < lx->end) return errf(lx, HR_ERR_PARSE, "unexpected %s after the layer", next_text(lx, buf, sizeof buf));
    return HR_OK;
}

/* Builder messages carry file:line when the source was set; add it if not. */
static hr_status builder_failed(builder *b) {
    char msg[2048], where[300];
    snprintf(msg, sizeof msg, "%s", hr_last_error());
    hr_status st = hr_error_prefix("-"); /* only to learn the status; the message is put back below */
    snprintf(where, sizeof where, "%s:%d:", b->lx.file, b->lx.line);
    if (strstr(msg, where)) return hr_error_set(st, "%s", msg);
    return hr_error_set(st, "%s %s", where, msg);
}

static hr_status input_line(builder *b) {
    lexer *lx = &b->lx;
    int64_t d[4];
    int n = 0;
    if (b->input >= 0) return errf(lx, HR_ERR_PARSE, "a second input line; a model has one input");
    for (;;) {
        value v;
        skip_space(lx);
        if (lx->p >= lx->end) break;
        if (parse_value(lx, &v, false) != HR_OK) return HR_ERR_PARSE;
        if (v.kind != V_INT || v.i <= 0)
            return errf(lx, HR_ERR_PARSE, "input sizes must be positive integers, got %.*s", v.len, v.src);
        if (n == 3)
            return errf(lx, HR_ERR_PARSE, "input takes 1 size (features) or 3 (channels height width), got more");
        d[n++] = v.i;
    }
    if (n != 1 && n != 3)
        return errf(lx, HR_ERR_PARSE, "input takes 1 size (features) or 3 (channels height width), got %d", n);
    if (b->context > 0 && n != 1)
        return errf(lx, HR_ERR_PARSE, "a context length (%lld) is for a model of token ids (`input T`), not of images",
                    (long long)b->context);
    if (b->context > 0) d[0] = b->context;
    hr_model_set_source(b->m, lx->file, lx->line);
    b->input = b->prev = hr_input(b->m, "input", n, d);
    if (b->input < 0) return builder_failed(b);
    return add_name(b, "input", b->input);
}

/* `init gpt2` (or `init pytorch`, the default): the model's initial values */
static hr_status init_line(builder *b) {
    lexer *lx = &b->lx;
    char buf[40];
    int n = ident(lx);
    const char *w = lx->p - n;
    if (!n || (!same(w, n, "gpt2") && !same(w, n, "pytorch")))
        return errf(lx, HR_ERR_PARSE, "init takes gpt2 (GPT-2's initial values) or pytorch (each layer's default), "
                    "found %s", n ? (snprintf(buf, sizeof buf, "%.*s", n < 30 ? n : 30, w), buf) : next_text(lx, buf, sizeof buf));
    if (line_end(lx) != HR_OK) return HR_ERR_PARSE;
    return same(w, n, "gpt2") ? hr_model_set_init(b->m, "gpt2") : hr_model_set_init(b->m, "pytorch");
}

static hr_status statement(builder *b) {
    lexer *lx = &b->lx;
    lexer save = *lx;
    int n = dotted(lx);
    const char *word = lx->p - n;
    skip_space(lx);
    bool call_or_label = lx->p < lx->end && (*lx->p == '(' || *lx->p == '=');
    if (n && same(word, n, "input") && !call_or_label) return input_line(b);
    if (n && same(word, n, "init") && !call_or_label) return init_line(b);
    if (b->loss_line) return errf(lx, HR_ERR_PARSE, "nothing may follow the loss line (line %d)", b->loss_line);
    call c;
    if (n && same(word, n, "loss") && !call_or_label) {
        if (parse_call(lx, &c) != HR_OK || line_end(lx) != HR_OK) return HR_ERR_PARSE;
        const spec *s = hr_layer_find(c.type, c.type_len, true);
        if (!s) return unknown(lx, &c, true);
        if (b->input < 0) return errf(lx, HR_ERR_PARSE, "the loss comes before the input line");
        b->loss_line = lx->line;
        hr_model_set_source(b->m, lx->file, lx->line);
        return build_layer(b, s, &c, "loss") < 0 ? builder_failed(b) : HR_OK;
    }
    char label[64] = "";
    if (n && accept(lx, '=')) {
        if (n >= (int)sizeof label) return errf(lx, HR_ERR_PARSE, "layer name '%.*s' is too long", n, word);
        snprintf(label, sizeof label, "%.*s", n, word);
        static const char *reserved[] = {"input", "loss", "True", "False", "true", "false", "None", "nn"};
        for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
            if (!strcmp(label, reserved[i])) return errf(lx, HR_ERR_PARSE, "'%s' cannot name a layer", label);
        const named *old = find_name(b, label, n);
        if (old) return errf(lx, HR_ERR_PARSE, "layer name '%s' is already used at line %d", label, old->line);
    } else {
        *lx = save;
    }
    if (parse_call(lx, &c) != HR_OK) return HR_ERR_PARSE;
    const spec *s = hr_layer_find(c.type, c.type_len, false);
    if (!s) return unknown(lx, &c, false);
    if (line_end(lx) != HR_OK) return HR_ERR_PARSE;
    if (b->input < 0)
        return errf(lx, HR_ERR_PARSE, "%s comes before the input line; begin the model with `input C H W` (images) "
                    "or `input F` (features)", s->name);
    char index[24];
    snprintf(index, sizeof index, "%d", b->n_layers);
    const char *name = label[0] ? label : index;
    hr_model_set_source(b->m, lx->file, lx->line);
    int out = build_layer(b, s, &c, name);
    if (out < 0) return builder_failed(b);
    b->n_layers++;
    b->prev = out;
    if (label[0] && add_name(b, label, out) != HR_OK) return HR_ERR_OOM;
    return add_name(b, index, out);
}

/* ---- the file ------------------------------------------------------------------------ */
static hr_model_t *parse(const char *text, const char *name_for_errors, int64_t context) {
    const char *file = name_for_errors ? name_for_errors : "model";
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file, *dot = strrchr(base, '.');
    char mname[128];
    snprintf(mname, sizeof mname, "%.*s", dot && dot > base ? (int)(dot - base) : (int)strlen(base), base);
    builder b = {.input = -1, .prev = -1, .context = context};
    if (!(b.m = hr_model_new(mname))) return NULL;
    hr_status st = HR_OK;
    int line = 0;
    for (const char *p = text; *p && st == HR_OK;) {
        const char *eol = strchr(p, '\n'), *end = p;
        if (!eol) eol = p + strlen(p);
        char quote = 0; /* a '#' starts a comment, unless it is inside a string */
        for (; end < eol; end++) {
            if (quote) { if (*end == quote) quote = 0; }
            else if (*end == '\'' || *end == '"') quote = *end;
            else if (*end == '#') break;
        }
        b.lx = (lexer){file, ++line, p, end};
        skip_space(&b.lx);
        if (b.lx.p < b.lx.end) st = statement(&b);
        p = *eol ? eol + 1 : eol;
    }
    b.lx = (lexer){file, line > 0 ? line : 1, NULL, NULL};
    if (st == HR_OK && b.input < 0)
        st = errf(&b.lx, HR_ERR_PARSE, "the model has no input line; begin it with `input C H W` (images) or "
                  "`input F` (features)");
    if (st == HR_OK && !b.loss_line)
        st = errf(&b.lx, HR_ERR_PARSE, "the model has no loss line; end it with `loss CrossEntropyLoss` "
                  "(classification) or `loss MSELoss` (regression)");
    for (int i = 0; i < b.n_names; i++) hr_free(b.names[i].name);
    hr_free(b.names);
    if (st != HR_OK) {
        hr_model_free(b.m);
        return NULL;
    }
    return b.m;
}

hr_model_t *hr_modelfile_parse(const char *text, const char *name_for_errors) {
    return parse(text, name_for_errors, 0);
}

/* A context length for m as written: its input must be token ids (an
 * Embedding reads them) and no longer than its PositionEmbedding's table. */
static hr_status context_fits(const hr_model_t *m, const char *path, int64_t context) {
    const hr_graph *g = &m->g;
    bool ids = false;
    for (int i = 0; i < g->nn; i++) {
        const hr_node *n = &g->n[i];
        ids |= n->op == HR_OP_EMBEDDING && g->t[n->in[0]].kind == HR_T_INPUT;
        if (n->op == HR_OP_POS_EMBEDDING && n->a.in_f < context)
            return hr_error_set(HR_ERR_INVALID_ARG, "%s: a context of %lld positions is longer than layer %s's "
                                "table of %lld (PositionEmbedding); give at most %lld", path, (long long)context,
                                g->l[n->layer].name, (long long)n->a.in_f, (long long)n->a.in_f);
    }
    if (!ids)
        return hr_error_set(HR_ERR_INVALID_ARG, "%s: a context length is for a model of token ids (`input T` read by "
                            "an Embedding); this model's input is features or images", path);
    return HR_OK;
}

hr_model_t *hr_modelfile_load(const char *path) { return hr_modelfile_load_context(path, 0); }

hr_model_t *hr_modelfile_load_context(const char *path, int64_t context) {
    if (context < 0 || context > ((int64_t)1 << 31)) {
        hr_error_set(HR_ERR_INVALID_ARG, "a context length is a number of positions in [1, 2^31], got %lld",
                     (long long)context);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        hr_error_set(HR_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        hr_error_set(HR_ERR_IO, "cannot read model file %s: %s", path, strerror(errno));
    } else if (size > MAX_FILE) {
        hr_error_set(HR_ERR_PARSE, "%s is %ld bytes; a model file is a short text (at most 16 MiB)", path, size);
    } else if ((text = hr_malloc((size_t)size + 1))) {
        size_t got = fread(text, 1, (size_t)size, f);
        text[got] = 0;
        if (got != (size_t)size) {
            hr_error_set(HR_ERR_IO, "cannot read model file %s: %s", path,
                         ferror(f) ? strerror(errno) : "it got shorter");
            hr_free(text);
            text = NULL;
        } else if (strlen(text) != got) {
            hr_error_set(HR_ERR_PARSE, "%s: byte %zu is a NUL; is this a text model file?", path, strlen(text));
            hr_free(text);
            text = NULL;
        }
    }
    fclose(f);
    if (!text) return NULL;
    hr_model_t *m = parse(text, path, 0);
    if (m && context > 0 && context_fits(m, path, context) != HR_OK) {
        hr_model_free(m);
        m = NULL;
    }
    if (m && context > 0) { /* again at that length */
        hr_model_free(m);
        m = parse(text, path, context);
    }
    hr_free(text);
    return m;
}
