/* json.c — a small strict JSON reader (RFC 8259) for safetensors headers:
 * builds a tree, validates UTF-8, reports the byte offset of every error. */
#include "io/io.h"

#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t len, pos, base;
    const char *what;
    hr_status status; /* HR_OK until the first failure */
} parser;

static bool fail(parser *p, size_t at, const char *msg) {
    if (p->status == HR_OK)
        p->status = hr_error_set(HR_ERR_FORMAT, "%s: byte %zu: invalid JSON: %s", p->what, p->base + at, msg);
    return false;
}

/* An allocation failure keeps its HR_ERR_OOM message: mark failed, say nothing. */
static bool oom(parser *p) {
    if (p->status == HR_OK) p->status = HR_ERR_OOM;
    return false;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, p->pos, "expected a JSON value");
    p->pos += n;
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool parse_number(parser *p, hr_json *out) {
    size_t start = p->pos, i = p->pos;
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || !is_digit(p->s[i])) return fail(p, start, "expected a digit in a number");
    if (p->s[i] == '0' && i + 1 < p->len && is_digit(p->s[i + 1]))
        return fail(p, i, "numbers may not have leading zeros");
    while (i < p->len && is_digit(p->s[i])) i++;
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (i >= p->len || !is_digit(p->s[i])) return fail(p, i, "expected a digit after the decimal point");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !is_digit(p->s[i])) return fail(p, i, "expected a digit in the exponent");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    out->type = HR_JSON_NUMBER;
    out->str = hr_malloc(i - start + 1);
    if (!out->str) return oom(p);
    memcpy(out->str, p->s + start, i - start);
    out->str[i - start] = 0;
    p->pos = i;
    return true;
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k;
    unsigned cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { k = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { k = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { k = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* Decodes the string at p->pos (which is at the opening quote) into *out. */
static bool parse_string(parser *p, char **out) {
    size_t start = p->pos++;
    /* The decoded text is never longer than the source. */
    size_t end = p->pos;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, start, "unterminated string");
    char *o = hr_malloc(end - p->pos + 1);
    if (!o) return oom(p);
    size_t k = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) { hr_free(o); return fail(p, p->pos, "control character in a string (escape it)"); }
        if (c != '\\') {
            size_t n = utf8_len((const unsigned char *)p->s + p->pos, end - p->pos);
            if (!n) { hr_free(o); return fail(p, p->pos, "invalid UTF-8 in a string"); }
            memcpy(o + k, p->s + p->pos, n);
            k += n;
            p->pos += n;
            continue;
        }
        size_t esc = p->pos;
        char e = p->s[p->pos + 1];
        p->pos += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[k++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') { hr_free(o); return fail(p, esc, "invalid escape in a string"); }
        int cp = p->pos + 4 <= end ? hex4(p->s + p->pos) : -1;
        if (cp < 0) { hr_free(o); return fail(p, esc, "expected four hex digits after \\u"); }
        p->pos += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate needs its low half */
            int lo =
                p->pos + 6 <= end && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' ? hex4(p->s + p->pos + 2) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) { hr_free(o); return fail(p, esc, "unpaired surrogate in \\u escape"); }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p->pos += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            hr_free(o);
            return fail(p, esc, "unpaired surrogate in \\u escape");
        } else if (cp == 0) {
            hr_free(o);
            return fail(p, esc, "\\u0000 is not allowed in names or values");
        }
        k += put_utf8(o + k, (unsigned)cp);
    }
    p->pos++;
    o[k] = 0;
    *out = o;
    return true;
}

static bool parse_value(parser *p, hr_json *out, int depth);

/* Appends one zeroed slot to an array or object; grows by doubling. */
static hr_json *push(parser *p, hr_json *v, int *cap) {
    if (v->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        hr_json *items = hr_realloc(v->items, (size_t)nc * sizeof *items);
        if (!items) { oom(p); return NULL; }
        v->items = items;
        if (v->type == HR_JSON_OBJECT) {
            char **keys = hr_realloc(v->keys, (size_t)nc * sizeof *keys);
            if (!keys) { oom(p); return NULL; }
            v->keys = keys;
        }
        *cap = nc;
    }
    hr_json *slot = &v->items[v->n];
    memset(slot, 0, sizeof *slot);
    if (v->type == HR_JSON_OBJECT) v->keys[v->n] = NULL;
    v->n++;
    return slot;
}

static bool parse_container(parser *p, hr_json *out, int depth) {
    bool is_obj = p->s[p->pos] == '{';
    char close = is_obj ? '}' : ']';
    int cap = 0;
    out->type = is_obj ? HR_JSON_OBJECT : HR_JSON_ARRAY;
    if (depth >= JSON_MAX_DEPTH) return fail(p, p->pos, "nesting deeper than 64 levels");
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return true; }
    for (;;) {
        skip_ws(p);
        hr_json *slot = push(p, out, &cap);
        if (!slot) return false;
        slot->offset = p->base + p->pos;
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, p->pos, "expected a member name in quotes");
            if (!parse_string(p, &out->keys[out->n - 1])) return false;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, p->pos, "expected ':' after a member name");
            p->pos++;
            skip_ws(p);
        }
        if (!parse_value(p, slot, depth + 1)) return false;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, p->pos, is_obj ? "unterminated object" : "unterminated array");
        char c = p->s[p->pos++];
        if (c == close) return true;
        if (c != ',') return fail(p, p->pos - 1, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool parse_value(parser *p, hr_json *out, int depth) {
    skip_ws(p);
    out->offset = p->base + p->pos;
    if (p->pos >= p->len) return fail(p, p->pos, "unexpected end, expected a JSON value");
    char c = p->s[p->pos];
    switch (c) {
    case '{': case '[': return parse_container(p, out, depth);
    case '"': out->type = HR_JSON_STRING; return parse_string(p, &out->str);
    case 't': out->type = HR_JSON_BOOL; out->boolean = true; return literal(p, "true");
    case 'f': out->type = HR_JSON_BOOL; return literal(p, "false");
    case 'n': out->type = HR_JSON_NULL; return literal(p, "null");
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, out);
        return fail(p, p->pos, "expected a JSON value");
    }
}

static void free_inner(hr_json *j) {
    hr_free(j->str);
    for (int i = 0; i < j->n; i++) {
        free_inner(&j->items[i]);
        if (j->keys) hr_free(j->keys[i]);
    }
    hr_free(j->items);
    hr_free(j->keys);
}

void hr_json_free(hr_json *j) {
    if (!j) return;
    free_inner(j);
    hr_free(j);
}

hr_status hr_json_parse(const char *text, size_t len, const char *what, size_t base, hr_json **out) {
    parser p = {.s = text, .len = len, .base = base, .what = what};
    *out = NULL;
    hr_json *root = hr_calloc(1, sizeof *root);
    if (!root) return HR_ERR_OOM;
    if (parse_value(&p, root, 0)) {
        skip_ws(&p);
        if (p.pos < p.len) fail(&p, p.pos, "unexpected text after the JSON value");
    }
    if (p.status != HR_OK) {
        hr_json_free(root);
        return p.status;
    }
    *out = root;
    return HR_OK;
}

const hr_json *hr_json_get(const hr_json *obj, const char *key) {
    if (!obj || obj->type != HR_JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

bool hr_json_uint(const hr_json *j, int64_t *out) {
    if (!j || j->type != HR_JSON_NUMBER || !is_digit(j->str[0])) return false;
    int64_t v = 0;
    for (const char *c = j->str; *c; c++) {
        if (!is_digit(*c)) return false; /* a fraction or an exponent: not an integer as written */
        if (!hr_mul_ok(v, 10, &v) || !hr_add_ok(v, *c - '0', &v)) return false;
    }
    *out = v;
    return true;
}
