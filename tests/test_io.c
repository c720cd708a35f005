/* test_io.c — safetensors and JSON: round trips, files written by Python's
 * json+struct (the format's reference layout), every corrupt case, atomic
 * writes, fault injection over every allocation; then checkpoints. */
#include "check.h"
#include "io/io.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Files in the test directory named `name` + "." + anything: the writes'
 * temporary files that a finished write must not leave behind. */
static int leftovers(const char *name) {
    DIR *d = opendir(dir);
    int k = 0;
    size_t n = strlen(name);
    for (struct dirent *e; d && (e = readdir(d));)
        k += strncmp(e->d_name, name, n) == 0 && e->d_name[n] == '.';
    if (d) closedir(d);
    return k;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    p[*n] = 0;
    fclose(f);
    return p;
}

/* A safetensors file from a header text and a data buffer; `n_override`
 * replaces the header length field when nonzero. */
static const char *make_st(const char *name, const char *header, const void *data, size_t data_len,
                           uint64_t n_override) {
    size_t hl = strlen(header), total = 8 + hl + data_len;
    unsigned char *b = malloc(total);
    uint64_t n = n_override ? n_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data_len) memcpy(b + 8 + hl, data, data_len);
    const char *path = tmp_path(name);
    write_file(path, b, total);
    free(b);
    return path;
}

/* Opens a file that must be rejected with `want` and a message with both needles. */
static void expect_bad(const char *path, hr_status want, const char *needle1, const char *needle2, int line) {
    hr_error_clear();
    hr_safetensors_t *f = hr_safetensors_open(path);
    const char *msg = hr_last_error();
    CHECK(f == NULL, "line %d: %s should be rejected", line, path);
    CHECK(strstr(msg, path) != NULL, "line %d: message should name the file: %s", line, msg);
    CHECK(strstr(msg, needle1) != NULL, "line %d: message should contain '%s': %s", line, needle1, msg);
    CHECK(!needle2 || strstr(msg, needle2) != NULL, "line %d: message should contain '%s': %s", line, needle2, msg);
    hr_safetensors_free(f);
    (void)want; /* the status is HR_ERR_FORMAT for all: checked through the message's shape */
}

static void test_json(void) {
    hr_json *j;
    const char *ok = " {\"a\": [1, -2.5e3, true, false, null], \"b\\u00e9\\ud83d\\ude00\": \"x\\n\\\"y\", \"c\": {}} ";
    CHECK(hr_json_parse(ok, strlen(ok), "t", 0, &j) == HR_OK, "valid JSON: %s", hr_last_error());
    if (j) {
        CHECK(j->type == HR_JSON_OBJECT && j->n == 3, "object of 3");
        const hr_json *a = hr_json_get(j, "a");
        CHECK(a && a->type == HR_JSON_ARRAY && a->n == 5, "array of 5");
        int64_t v;
        CHECK(a && hr_json_uint(&a->items[0], &v) && v == 1, "1 is an integer");
        CHECK(a && !hr_json_uint(&a->items[1], &v), "-2.5e3 is not a size");
        CHECK(a && a->items[2].type == HR_JSON_BOOL && a->items[2].boolean, "true");
        CHECK(a && a->items[4].type == HR_JSON_NULL, "null");
        CHECK(strcmp(j->keys[1], "b\xc3\xa9\xf0\x9f\x98\x80") == 0, "escapes decode to UTF-8");
        CHECK(strcmp(j->items[1].str, "x\n\"y") == 0, "string escapes");
        hr_json_free(j);
    }
    static const struct { const char *text, *needle; } bad[] = {
        {"{\"a\": 1,}", "expected a member name"}, {"[1, 2,]", "expected a JSON value"},
        {"{\"a\": 01}", "leading zeros"},           {"{\"a\": \"\\x\"}", "invalid escape"},
        {"{\"a\": \"\\ud800\"}", "unpaired surrogate"}, {"{\"a\": \"\xc3\x28\"}", "invalid UTF-8"},
        {"{\"a\": \"\xc0\xaf\"}", "invalid UTF-8"},  {"{\"a\": 1} x", "unexpected text"},
        {"{\"a\" 1}", "expected ':'"},              {"{\"a\": \"b}", "unterminated string"},
        {"[1, 2", "unterminated array"},            {"", "unexpected end"},
        {"{\"a\": tru}", "expected a JSON value"},  {"{\"a\": \"\\u0000\"}", "\\u0000"},
        {"{\"a\": 1.}", "decimal point"},           {"{\"a\": \"tab\there\"}", "control character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hr_status st = hr_json_parse(bad[i].text, strlen(bad[i].text), "hdr", 8, &j);
        CHECK(st == HR_ERR_FORMAT && j == NULL, "bad JSON %zu accepted: %s", i, bad[i].text);
        CHECK(strstr(hr_last_error(), bad[i].needle) && strstr(hr_last_error(), "hdr: byte "),
              "bad JSON %zu: '%s' not in '%s'", i, bad[i].needle, hr_last_error());
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    CHECK(hr_json_parse(deep, 200, "deep", 0, &j) == HR_ERR_FORMAT && strstr(hr_last_error(), "64 levels"),
          "nesting limit: %s", hr_last_error());
}

/* ---- safetensors: round trip ----------------------------------------------- */
static const float W[6] = {-1.0f, -0.75f, 0.5f, 0.25f, 3.0f, 1e-3f};
static const int32_t L[4] = {7, -8, 9, 2147483647};

static hr_status fill_counting(void *ctx, int i, void *dst) {
    int *fail_at = ctx;
    if (*fail_at == i) return hr_error_set(HR_ERR_IO, "simulated failure");
    memcpy(dst, W, sizeof W);
    return HR_OK;
}

static hr_status write_sample(const char *path, int fail_at) {
    int64_t d23[2] = {2, 3}, d4[1] = {4}, d0[1] = {0};
    uint8_t empty = 0;
    hr_st_entry t[] = {
        {"0.weight", "F32", 2, d23, W}, {"labels", "I32", 1, d4, L},
        {"filled", "F32", 2, d23, NULL}, {"empty", "U8", 1, d0, &empty},
        {"scalar", "F32", 0, NULL, &W[4]},
    };
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "quote \" and\nnewline, h\xc3\xa9"};
    return hr_safetensors_write(path, t, 5, keys, vals, 2, fill_counting, &fail_at);
}

static void check_sample(hr_safetensors_t *f) {
    CHECK(hr_safetensors_count(f) == 5, "5 tensors, got %d", hr_safetensors_count(f));
    const hr_st_tensor *w = hr_safetensors_expect(f, "0.weight", "F32", 2, (int64_t[]){2, 3});
    CHECK(w != NULL, "0.weight: %s", hr_last_error());
    float buf[6] = {0};
    CHECK(w && hr_safetensors_read_f32(f, w, buf) == HR_OK && !memcmp(buf, W, sizeof W), "0.weight values");
    const hr_st_tensor *filled = hr_safetensors_expect(f, "filled", NULL, 2, (int64_t[]){2, 3});
    memset(buf, 0, sizeof buf);
    CHECK(filled && hr_safetensors_read(f, filled, buf) == HR_OK && !memcmp(buf, W, sizeof W), "filled values");
    const hr_st_tensor *l = hr_safetensors_expect(f, "labels", "I32", 1, (int64_t[]){4});
    int32_t lb[4] = {0};
    CHECK(l && hr_safetensors_read(f, l, lb) == HR_OK && !memcmp(lb, L, sizeof L), "labels values");
    const hr_st_tensor *e = hr_safetensors_expect(f, "empty", "U8", 1, (int64_t[]){0});
    CHECK(e && e->numel == 0 && e->begin == e->end, "empty tensor");
    const hr_st_tensor *s = hr_safetensors_expect(f, "scalar", "F32", 0, NULL);
    CHECK(s && s->numel == 1 && hr_safetensors_read_f32(f, s, buf) == HR_OK && buf[0] == 3.0f, "scalar");
    CHECK(hr_safetensors_meta(f, "format") && !strcmp(hr_safetensors_meta(f, "format"), "pt"), "meta format");
    const char *note = hr_safetensors_meta(f, "note");
    CHECK(note && !strcmp(note, "quote \" and\nnewline, h\xc3\xa9"), "meta note escaped and back: %s", note);
    CHECK(hr_safetensors_meta(f, "nope") == NULL, "absent key");
    CHECK(hr_safetensors_meta_count(f) == 2 && !strcmp(hr_safetensors_meta_key(f, 1), "note"), "meta keys");
}

static void test_round_trip(void) {
    const char *path = tmp_path("rt.safetensors");
    CHECK(write_sample(path, -1) == HR_OK, "write: %s", hr_last_error());
    size_t n;
    char *bytes = read_file(path, &n);
    CHECK(bytes && n >= 8, "file written");
    if (!bytes) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (unsigned char)bytes[i];
    CHECK(hl % 8 == 0 && bytes[8] == '{' && (bytes[8 + hl - 1] == ' ' || bytes[8 + hl - 1] == '}'),
          "header padded with spaces to a multiple of 8 (%llu)", (unsigned long long)hl);
    CHECK(n == 8 + hl + 24 + 16 + 24 + 0 + 4, "file size %zu", n);
    CHECK(leftovers("rt.safetensors") == 0, "no temporary file left behind");
    hr_safetensors_t *f = hr_safetensors_open(path);
    CHECK(f != NULL, "open: %s", hr_last_error());
    if (f) check_sample(f), hr_safetensors_free(f);
    f = hr_safetensors_open_memory(bytes, n, "mem");
    CHECK(f != NULL, "open_memory: %s", hr_last_error());
    if (f) check_sample(f), hr_safetensors_free(f);
    free(bytes);
}

/* F16, BF16 and F64 convert to F32 when read as floats. */
static void test_convert(void) {
    uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7C00}; /* 1, -2, smallest subnormal, inf */
    uint16_t bf[2] = {0x3FC0, 0xC120};                /* 1.5, -10 */
    double d[2] = {0.1, -1e10};
    int64_t d4[1] = {4}, d2[1] = {2};
    hr_st_entry t[] = {{"h", "F16", 1, d4, h}, {"bf", "BF16", 1, d2, bf}, {"d", "F64", 1, d2, d}};
    const char *path = tmp_path("conv.safetensors");
    CHECK(hr_safetensors_write(path, t, 3, NULL, NULL, 0, NULL, NULL) == HR_OK, "write: %s", hr_last_error());
    hr_safetensors_t *f = hr_safetensors_open(path);
    CHECK(f != NULL, "open: %s", hr_last_error());
    if (!f) return;
    float o[4];
    for (int i = 0; i < hr_safetensors_count(f); i++) {
        const hr_st_tensor *ti = hr_safetensors_at(f, i);
        CHECK(ti->begin % ti->elsize == 0, "tensor %s at %llu is aligned to its element size", ti->name,
              (unsigned long long)ti->begin);
    }
    CHECK(hr_safetensors_find(f, "d")->begin == 0, "the 8-byte tensor comes first");
    CHECK(hr_safetensors_read_f32(f, hr_safetensors_find(f, "h"), o) == HR_OK, "read h");
    CHECK(o[0] == 1.0f && o[1] == -2.0f && o[2] == 5.9604645e-8f && isinf(o[3]), "f16: %g %g %g %g", o[0], o[1], o[2],
          o[3]);
    CHECK(hr_safetensors_read_f32(f, hr_safetensors_find(f, "bf"), o) == HR_OK && o[0] == 1.5f && o[1] == -10.0f,
          "bf16");
    CHECK(hr_safetensors_read_f32(f, hr_safetensors_find(f, "d"), o) == HR_OK && o[0] == 0.1f && o[1] == -1e10f, "f64");
    hr_safetensors_free(f);
}

/* A file written by the reference implementation itself: safetensors 0.8.0,
 * save_file({"a": torch.arange(6.).reshape(2, 3), "n": torch.tensor(3)}, f, {"k": "v"}). */
static const char ref_file[] =
    "\210\000\000\000\000\000\000\000"
    "{\042__metadata__\042:{\042k\042:\042v\042},\042n\042:{\042dtype\042:\042I64\042,\042shape\042:[],\042data_offset"
    "s\042:[0,8]},\042a\042:{\042dtype\042:\042F32\042,\042shape\042:[2,3],\042data_offsets\042:[8,32]}}  "
    "\003\000\000\000\000\000\000\000\000\000\000\000\000\000\200\077\000\000\000@\000\000@@\000\000\200@\000\000\240@";

static void test_reference_file(void) {
    const char *path = tmp_path("ref.safetensors");
    write_file(path, ref_file, sizeof ref_file - 1);
    hr_safetensors_t *f = hr_safetensors_open(path);
    CHECK(f != NULL, "the reference writer's file opens: %s", hr_last_error());
    if (!f) return;
    float a[6];
    int64_t n = 0;
    const hr_st_tensor *t = hr_safetensors_expect(f, "a", "F32", 2, (int64_t[]){2, 3});
    CHECK(t && hr_safetensors_read_f32(f, t, a) == HR_OK && a[0] == 0 && a[5] == 5, "a = arange(6)");
    t = hr_safetensors_expect(f, "n", "I64", 0, NULL);
    CHECK(t && hr_safetensors_read(f, t, &n) == HR_OK && n == 3, "n = 3");
    CHECK(hr_safetensors_meta(f, "k") && !strcmp(hr_safetensors_meta(f, "k"), "v"), "metadata");
    hr_safetensors_free(f);
}

/* ---- files written and checked by Python's json + struct -------------------- */
static const char *py_writer =
    "import json, struct, sys\n"
    "T = {'b.bias': ('F32', [3], struct.pack('<3f', 0.5, -1.25, 3.0)),\n"
    "     'a.weight': ('F32', [2, 2], struct.pack('<4f', 1, 2, 3, 4)),\n"
    "     'count': ('I64', [], struct.pack('<q', 7)),\n"
    "     'mask': ('U8', [4], bytes([1, 0, 255, 3])),\n"
    "     'h': ('F16', [2], struct.pack('<2e', 1.5, -2.0))}\n"
    "size = {'F32': 4, 'I64': 8, 'U8': 1, 'F16': 2}\n"
    "order = sorted(T, key=lambda k: (-size[T[k][0]], k))\n"
    "hdr, off = {'__metadata__': {'format': 'pt', 'who': 'caf\\u00e9'}}, 0\n"
    "for k in order:\n"
    "    d, s, b = T[k]; hdr[k] = {'dtype': d, 'shape': s, 'data_offsets': [off, off + len(b)]}; off += len(b)\n"
    "h = json.dumps(hdr, separators=(',', ':')).encode()\n"
    "h += b' ' * ((8 - len(h) % 8) % 8)\n"
    "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(T[k][2] for k in order))\n";

/* The reference reader's checks, then the values of write_sample's file. */
static const char *py_checker =
    "import json, struct, sys\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "assert n % 8 == 0 and 8 + n <= len(b), 'header length'\n"
    "text = b[8:8 + n].decode('utf-8'); assert text.startswith('{')\n"
    "hdr = json.loads(text); meta = hdr.pop('__metadata__')\n"
    "assert meta == {'format': 'pt', 'note': 'quote \" and\\nnewline, h\\u00e9'}, meta\n"
    "data = b[8 + n:]; end = 0\n"
    "size = {'F32': 4, 'I32': 4, 'U8': 1}\n"
    "for k, v in sorted(hdr.items(), key=lambda kv: kv[1]['data_offsets']):\n"
    "    s, e = v['data_offsets']; assert s == end, (k, s, end); end = e\n"
    "    numel = 1\n"
    "    for d in v['shape']: numel *= d\n"
    "    assert e - s == numel * size[v['dtype']], k\n"
    "assert end == len(data), 'buffer fully covered'\n"
    "def get(k, fmt):\n"
    "    s, e = hdr[k]['data_offsets']; return list(struct.unpack('<' + fmt * ((e - s) // struct.calcsize(fmt)), "
    "data[s:e]))\n"
    "assert hdr['0.weight']['shape'] == [2, 3] and hdr['scalar']['shape'] == [] and hdr['empty']['shape'] == [0]\n"
    "assert get('0.weight', 'f') == [struct.unpack('<f', struct.pack('<f', x))[0] for x in (-1, -0.75, 0.5, 0.25, 3, "
    "1e-3)]\n"
    "assert get('labels', 'i') == [7, -8, 9, 2147483647] and get('scalar', 'f') == [3.0]\n"
    "print('VERIFIED')\n";

static void test_python(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("note: /usr/bin/python3 not found; skipping the Python reference files\n");
        return;
    }
    const char *script = tmp_path("w.py"), *ref = tmp_path("py.safetensors");
    char cmd[1024];
    write_file(script, py_writer, strlen(py_writer));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, ref);
    CHECK(system(cmd) == 0, "python writer ran");
    hr_safetensors_t *f = hr_safetensors_open(ref);
    CHECK(f != NULL, "open Python's file: %s", hr_last_error());
    if (f) {
        float v[4];
        const hr_st_tensor *t = hr_safetensors_expect(f, "b.bias", "F32", 1, (int64_t[]){3});
        CHECK(t && hr_safetensors_read_f32(f, t, v) == HR_OK && v[0] == 0.5f && v[1] == -1.25f && v[2] == 3.0f,
              "b.bias");
        t = hr_safetensors_expect(f, "a.weight", "F32", 2, (int64_t[]){2, 2});
        CHECK(t && hr_safetensors_read_f32(f, t, v) == HR_OK && v[0] == 1 && v[3] == 4, "a.weight");
        t = hr_safetensors_expect(f, "count", "I64", 0, NULL);
        int64_t c = 0;
        CHECK(t && t->hr_dtype == -1 && hr_safetensors_read(f, t, &c) == HR_OK && c == 7, "I64 scalar");
        t = hr_safetensors_expect(f, "mask", "U8", 1, (int64_t[]){4});
        uint8_t m[4] = {0};
        CHECK(t && hr_safetensors_read(f, t, m) == HR_OK && m[2] == 255, "U8");
        t = hr_safetensors_expect(f, "h", NULL, 1, (int64_t[]){2});
        CHECK(t && hr_safetensors_read_f32(f, t, v) == HR_OK && v[0] == 1.5f && v[1] == -2.0f, "F16");
        CHECK(hr_safetensors_meta(f, "who") && !strcmp(hr_safetensors_meta(f, "who"), "caf\xc3\xa9"), "meta");
        hr_safetensors_free(f);
    }
    const char *ours = tmp_path("ours.safetensors"), *out = tmp_path("py.out");
    CHECK(write_sample(ours, -1) == HR_OK, "write: %s", hr_last_error());
    write_file(script, py_checker, strlen(py_checker));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s 2>&1", script, ours, out);
    int rc = system(cmd);
    size_t n;
    char *txt = read_file(out, &n);
    CHECK(rc == 0 && txt && strstr(txt, "VERIFIED"), "Python's checks of our file: %s", txt ? txt : "(no output)");
    free(txt);
}

/* ---- corrupt files ------------------------------------------------------------ */
static void test_corrupt(void) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    const char *p;
    p = tmp_path("short.safetensors");
    write_file(p, "abc", 3);
    expect_bad(p, HR_ERR_FORMAT, "too short", NULL, __LINE__);
    p = make_st("past.safetensors", "{}", NULL, 0, 1000);
    expect_bad(p, HR_ERR_FORMAT, "header length 1000 runs past the end of the file", NULL, __LINE__);
    p = make_st("huge.safetensors", "{}", NULL, 0, (uint64_t)1 << 62);
    expect_bad(p, HR_ERR_FORMAT, "runs past the end", NULL, __LINE__);
    p = make_st("json.safetensors", "{\"a\": {\"dtype\": \"F32\",}}", NULL, 0, 0);
    expect_bad(p, HR_ERR_FORMAT, "invalid JSON", "byte 30", __LINE__);
    p = make_st("arr.safetensors", "[1, 2]  ", NULL, 0, 0);
    expect_bad(p, HR_ERR_FORMAT, "must be a JSON object", NULL, __LINE__);
    p = make_st("dtype.safetensors", "{\"w\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'w'", "unknown dtype 'F128'", __LINE__);
    p = make_st("numel.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", data, 12,
                0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'w'", "shape [2, 2] of F32 needs 16 bytes but data_offsets [0, 12] hold 12",
               __LINE__);
    p = make_st("range.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", data, 16, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'w'", "run past the end of the data (16 bytes)", __LINE__);
    p = make_st("overlap.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}", data, 20, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'b'", "overlap tensor 'a'", __LINE__);
    p = make_st("gap.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", data, 12, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'b'", "unused", __LINE__);
    p = make_st("trail.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 8, 0);
    expect_bad(p, HR_ERR_FORMAT, "cover 4 bytes of data but the file holds 8", NULL, __LINE__);
    p = make_st("dup.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'a' appears twice", NULL, __LINE__);
    p = make_st("neg.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", data, 4, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'a'", "integer >= 0", __LINE__);
    p = make_st("rev.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", data, 4, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'a'", "end before they begin", __LINE__);
    p = make_st("ovf.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", data, 4, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'a'", "overflow", __LINE__);
    p = make_st("field.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"offsets\":[0,4]}}", data, 4, 0);
    expect_bad(p, HR_ERR_FORMAT, "tensor 'a'", "unknown field", __LINE__);
    p = make_st("meta.safetensors", "{\"__metadata__\":{\"k\":1}}", NULL, 0, 0);
    expect_bad(p, HR_ERR_FORMAT, "__metadata__ values must be strings", NULL, __LINE__);
    hr_safetensors_t *f = hr_safetensors_open(tmp_path("does-not-exist.safetensors"));
    CHECK(!f && strstr(hr_last_error(), "cannot open") && strstr(hr_last_error(), "does-not-exist"),
          "missing file: %s", hr_last_error());

    /* Lookups: missing tensor, wrong shape, wrong dtype. */
    p = make_st("ok.safetensors", "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", data,
                24, 0);
    f = hr_safetensors_open(p);
    CHECK(f != NULL, "valid file: %s", hr_last_error());
    if (!f) return;
    CHECK(!hr_safetensors_find(f, "1.weight") && strstr(hr_last_error(), "no tensor '1.weight'") &&
              strstr(hr_last_error(), "'0.weight'") && strstr(hr_last_error(), p),
          "missing tensor: %s", hr_last_error());
    char want[512];
    snprintf(want, sizeof want, "tensor '0.weight' in %s has shape [2, 3], the model expects [3, 2]", p);
    CHECK(!hr_safetensors_expect(f, "0.weight", "F32", 2, (int64_t[]){3, 2}) && !strcmp(hr_last_error(), want),
          "shape message: %s", hr_last_error());
    CHECK(!hr_safetensors_expect(f, "0.weight", "F16", 2, (int64_t[]){2, 3}) &&
              strstr(hr_last_error(), "has dtype F32, expected F16"), "dtype message: %s", hr_last_error());
    hr_safetensors_free(f);
}

/* ---- atomic writes ------------------------------------------------------------- */
static void test_atomic(void) {
    const char *path = tmp_path("atomic.safetensors");
    CHECK(write_sample(path, -1) == HR_OK, "first write: %s", hr_last_error());
    size_t n0 = 0, n1 = 0;
    char *before = read_file(path, &n0);
    /* The data source fails at tensor 2, after the header and a tensor are written. */
    hr_status st = write_sample(path, 2);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "simulated failure") && strstr(hr_last_error(), "'filled'"),
          "failing fill reported: %s", hr_last_error());
    char *after = read_file(path, &n1);
    CHECK(after && n0 == n1 && !memcmp(before, after, n0), "previous file intact after a failed write");
    CHECK(leftovers("atomic.safetensors") == 0, "no temporary file left behind");
    free(after);
    /* Every allocation of the writer fails in turn: OOM, old file intact. */
    int k;
    for (k = 1; k < 1000; k++) {
        hr_fault_fail_at(k);
        st = write_sample(path, 99);
        hr_fault_fail_at(0);
        if (st == HR_OK) break;
        CHECK(st == HR_ERR_OOM, "alloc %d: status %s: %s", k, hr_status_name(st), hr_last_error());
        after = read_file(path, &n1);
        CHECK(after && n0 == n1 && !memcmp(before, after, n0), "alloc %d: previous file intact", k);
        free(after);
    }
    CHECK(k > 1 && k < 1000, "writer fault loop ended at %d", k);
    free(before);
    st = write_sample(tmp_path("no/such/dir/x.safetensors"), -1);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "cannot create") && strstr(hr_last_error(), "no/such/dir"),
          "write into a missing directory: %s", hr_last_error());
    int64_t d[1] = {1};
    hr_st_entry dup[] = {{"a", "F32", 1, d, W}, {"a", "F32", 1, d, W}};
    CHECK(hr_safetensors_write(path, dup, 2, NULL, NULL, 0, NULL, NULL) == HR_ERR_INVALID_ARG &&
              strstr(hr_last_error(), "listed twice"), "duplicate names refused: %s", hr_last_error());
    hr_st_entry bad[] = {{"a", "Q8", 1, d, W}};
    CHECK(hr_safetensors_write(path, bad, 1, NULL, NULL, 0, NULL, NULL) == HR_ERR_INVALID_ARG, "unknown dtype refused");
}

/* Every allocation of open fails in turn: NULL with HR_ERR_OOM, nothing leaked
 * (run under valgrind to see the leaks). */
static void test_open_faults(void) {
    const char *path = tmp_path("faults.safetensors");
    CHECK(write_sample(path, -1) == HR_OK, "write: %s", hr_last_error());
    int k;
    for (k = 1; k < 1000; k++) {
        hr_fault_fail_at(k);
        hr_safetensors_t *f = hr_safetensors_open(path);
        hr_fault_fail_at(0);
        if (f) { check_sample(f); hr_safetensors_free(f); break; }
        CHECK(strstr(hr_last_error(), "could not allocate"), "alloc %d: %s", k, hr_last_error());
    }
    CHECK(k > 10 && k < 1000, "open fault loop ended at %d", k);
}

void test_checkpoints(void);

/* ---- where a write goes -------------------------------------------------------- */
/* A symlink is written through (its file replaced, the link kept); a
 * directory, a missing directory or a dangling link is refused, by the
 * pre-flight check and by the write alike, naming the path. */
static void test_write_paths(void) {
    const char *file = tmp_path("target.safetensors"), *link = tmp_path("link.safetensors");
    CHECK(write_sample(file, -1) == HR_OK, "write: %s", hr_last_error());
    CHECK(symlink(file, link) == 0, "symlink");
    CHECK(hr_safetensors_check_writable(link) == HR_OK, "a link to a file is writable: %s", hr_last_error());
    CHECK(write_sample(link, -1) == HR_OK, "write through a link: %s", hr_last_error());
    struct stat ls;
    CHECK(lstat(link, &ls) == 0 && S_ISLNK(ls.st_mode), "the link is still a link after the write");
    hr_safetensors_t *f = hr_safetensors_open(link);
    CHECK(f != NULL, "the file behind the link reads back: %s", hr_last_error());
    hr_safetensors_free(f);
    CHECK(leftovers("target.safetensors") == 0 && leftovers("link.safetensors") == 0, "no temporary file left");
    const char *sub = tmp_path("a_dir");
    CHECK(mkdir(sub, 0755) == 0, "mkdir");
    hr_status st = hr_safetensors_check_writable(sub);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "is a directory"), "a directory refused: %s", hr_last_error());
    st = write_sample(sub, -1);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "is a directory"), "writing a directory refused: %s",
          hr_last_error());
    const char *missing = tmp_path("no_such_dir/x.safetensors");
    st = hr_safetensors_check_writable(missing);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "no_such_dir") && strstr(hr_last_error(), "make the directory"),
          "a missing directory named: %s", hr_last_error());
    const char *dangling = tmp_path("dangling.safetensors");
    CHECK(symlink(tmp_path("nowhere/x"), dangling) == 0, "symlink");
    st = hr_safetensors_check_writable(dangling);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), "symbolic link"), "a dangling link refused: %s", hr_last_error());
    CHECK(hr_safetensors_check_writable("") == HR_ERR_IO, "an empty path refused");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hr_test_io.XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    test_json();
    test_round_trip();
    test_convert();
    test_reference_file();
    test_python();
    test_corrupt();
    test_atomic();
    test_write_paths();
    test_open_faults();
    test_checkpoints();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    TEST_END();
}

#ifdef TEST_IO_NO_CHECKPOINTS
void test_checkpoints(void) { printf("note: checkpoints not tested in this build\n"); }
#else
/* ---- checkpoints ------------------------------------------------------------- */
/* input 1x6x6 -> Conv2d(1, 2, 3, padding=1) -> BatchNorm2d(2) -> ReLU -> Flatten -> Linear(72, classes) */
static hr_model_t *small_model(const char *name, int64_t classes) {
    hr_model_t *m = hr_model_new(name);
    int x = hr_input(m, "x", 3, (int64_t[]){1, 6, 6});
    x = hr_conv2d(m, NULL, x, 1, 2, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 2, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 72, classes, true);
    if (hr_loss_cross_entropy(m, x, classes) < 0) {
        printf("small model: %s\n", hr_last_error());
        hr_model_free(m);
        return NULL;
    }
    return m;
}

static hr_session_t *small_session(hr_model_t *m, hr_optim_kind kind, uint64_t seed) {
    hr_config_t cfg = hr_config_default();
    cfg.batch = 4;
    cfg.seed = seed;
    cfg.optim.kind = kind;
    cfg.optim.momentum = kind == HR_OPTIM_SGD ? 0.9f : cfg.optim.momentum;
    hr_session_t *s = m ? hr_compile(m, &cfg) : NULL;
    if (s && hr_session_alloc(s) != HR_OK) { hr_session_free(s); s = NULL; }
    if (!s) printf("small session: %s\n", hr_last_error());
    return s;
}

static float batch_x[4 * 36];
static int32_t batch_y[4] = {0, 2, 1, 2};

typedef struct {
    int n;
    char *names[64];
    float *data[64];
    int64_t numel[64];
} snapshot;

static void snap(hr_session_t *s, snapshot *sn) {
    sn->n = hr_state_count(s) < 64 ? hr_state_count(s) : 64;
    for (int i = 0; i < sn->n; i++) {
        sn->numel[i] = 1;
        for (int d = 0; d < hr_state_ndim(s, i); d++) sn->numel[i] *= hr_state_dim(s, i, d);
        sn->names[i] = strdup(hr_state_name(s, i));
        sn->data[i] = calloc((size_t)sn->numel[i], sizeof(float));
        hr_state_read(s, i, sn->data[i]);
    }
}

/* Does the session hold the snapshot's values (only its parameters and buffers
 * if params_only), tensor by tensor, by name? */
static bool same_state(hr_session_t *s, const snapshot *sn, bool params_only) {
    bool ok = params_only || hr_state_count(s) == sn->n;
    for (int i = 0; ok && i < hr_state_count(s); i++) {
        if (params_only && !hr_state_is_param(s, i)) continue;
        int j = 0;
        while (j < sn->n && strcmp(sn->names[j], hr_state_name(s, i))) j++;
        if (j == sn->n) return false;
        float *v = calloc((size_t)sn->numel[j], sizeof(float));
        hr_state_read(s, i, v);
        ok = !memcmp(v, sn->data[j], (size_t)sn->numel[j] * sizeof(float));
        free(v);
    }
    return ok;
}

static void snap_free(snapshot *sn) {
    for (int i = 0; i < sn->n; i++) free(sn->names[i]), free(sn->data[i]);
}

/* PyTorch's own nn.Sequential must take the checkpoint with load_state_dict(strict=True). */
static const char *py_torch_load =
    "import json, struct, sys, torch, torch.nn as nn\n"
    "b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
    "hdr = json.loads(b[8:8 + n]); meta = hdr.pop('__metadata__'); data = b[8 + n:]\n"
    "fmt = {'F32': ('f', torch.float32), 'I64': ('q', torch.int64)}\n"
    "sd = {}\n"
    "for k, v in hdr.items():\n"
    "    if k.startswith('optim.'): continue\n"
    "    s, e = v['data_offsets']; c, dt = fmt[v['dtype']]\n"
    "    vals = struct.unpack('<%d%s' % ((e - s) // struct.calcsize(c), c), data[s:e])\n"
    "    sd[k] = torch.tensor(vals, dtype=dt).reshape(v['shape'])\n"
    "m = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(72, 3))\n"
    "m.load_state_dict(sd, strict=True)\n"
    "assert int(sd['1.num_batches_tracked']) == int(meta['headroom.step'])\n"
    "print('LOADED', meta['headroom.model'], meta['headroom.epoch'])\n";

static void test_ckpt_pytorch(const char *path) {
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("note: no PyTorch at /usr/bin/python3; skipping load_state_dict of a checkpoint\n");
        return;
    }
    const char *script = tmp_path("load.py"), *out = tmp_path("load.out");
    char cmd[1024];
    write_file(script, py_torch_load, strlen(py_torch_load));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s 2>&1", script, path, out);
    int rc = system(cmd);
    size_t n;
    char *txt = read_file(out, &n);
    CHECK(rc == 0 && txt && strstr(txt, "LOADED small 3"), "PyTorch load_state_dict: %s", txt ? txt : "(no output)");
    free(txt);
}

void test_checkpoints(void) {
    for (int i = 0; i < 4 * 36; i++) batch_x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    hr_model_t *m = small_model("small", 3);
    hr_session_t *s = small_session(m, HR_OPTIM_ADAM, 1);
    if (!s) { CHECK(0, "cannot build the checkpoint test's session"); hr_model_free(m); return; }
    float loss;
    for (int i = 0; i < 2; i++) CHECK(hr_train_step(s, batch_x, batch_y, &loss) == HR_OK, "train: %s", hr_last_error());
    snapshot before;
    snap(s, &before);
    const char *path = tmp_path("ckpt.safetensors");
    hr_ckpt_meta meta = {.model = "small", .epoch = 3, .batch = 7, .seed = 1};
    CHECK(hr_checkpoint_save(s, path, &meta) == HR_OK, "save: %s", hr_last_error());

    /* What the file holds, as any safetensors reader sees it. */
    hr_safetensors_t *f = hr_safetensors_open(path);
    CHECK(f != NULL, "checkpoint opens: %s", hr_last_error());
    if (f) {
        CHECK(hr_safetensors_expect(f, "0.weight", "F32", 4, (int64_t[]){2, 1, 3, 3}) != NULL, "0.weight: %s",
              hr_last_error());
        CHECK(hr_safetensors_expect(f, "1.running_var", "F32", 1, (int64_t[]){2}) != NULL, "buffer: %s",
              hr_last_error());
        CHECK(hr_safetensors_expect(f, "optim.4.weight.exp_avg_sq", "F32", 2, (int64_t[]){3, 72}) != NULL,
              "optimizer state under optim.: %s", hr_last_error());
        const hr_st_tensor *t = hr_safetensors_expect(f, "1.num_batches_tracked", "I64", 0, NULL);
        int64_t nbt = -1;
        CHECK(t && hr_safetensors_read(f, t, &nbt) == HR_OK && nbt == 2, "num_batches_tracked = steps: %lld",
              (long long)nbt);
        const char *v = hr_safetensors_meta(f, "headroom.batch");
        CHECK(v && !strcmp(v, "7"), "batch in metadata");
        hr_safetensors_free(f);
    }
    test_ckpt_pytorch(path);

    /* Load into a fresh session of the same model: same state, step, meta; same next step. */
    hr_session_t *s2 = small_session(m, HR_OPTIM_ADAM, 2);
    hr_ckpt_meta got;
    memset(&got, 0, sizeof got);
    CHECK(s2 && !same_state(s2, &before, true), "a different seed gives different weights");
    CHECK(s2 && hr_checkpoint_load(s2, path, &got) == HR_OK, "load: %s", hr_last_error());
    CHECK(s2 && same_state(s2, &before, false), "every state tensor restored");
    CHECK(s2 && hr_step_count(s2) == 2, "step count restored");
    CHECK(!strcmp(got.model, "small") && got.epoch == 3 && got.batch == 7 && got.step == 2 && got.seed == 1,
          "meta read back: %s %lld %lld %lld", got.model, (long long)got.epoch, (long long)got.batch,
          (long long)got.step);
    float l1 = 0, l2 = -1;
    CHECK(hr_train_step(s, batch_x, batch_y, &l1) == HR_OK && s2 && hr_train_step(s2, batch_x, batch_y, &l2) == HR_OK,
          "train after load: %s", hr_last_error());
    CHECK(l1 == l2, "resumed session takes the same step: %.9g vs %.9g", l1, l2);

    /* Another model: refused before anything changes, naming both and the difference. */
    hr_model_t *m4 = small_model("other", 4);
    hr_session_t *s4 = small_session(m4, HR_OPTIM_ADAM, 1);
    if (s4) {
        snapshot other;
        snap(s4, &other);
        hr_ckpt_meta who = {.model = "other"};
        CHECK(hr_checkpoint_load(s4, path, &who) == HR_ERR_FORMAT, "other model refused");
        const char *msg = hr_last_error();
        CHECK(strstr(msg, "was written for model 'small'") && strstr(msg, "but this is model 'other'") &&
                  strstr(msg, "'4.weight' is [3, 72] in the checkpoint, [4, 72] here") && strstr(msg, path),
              "mismatch message: %s", msg);
        CHECK(same_state(s4, &other, false) && hr_step_count(s4) == 0, "refused load changed nothing");
        snap_free(&other);
    }
    hr_session_free(s4);
    hr_model_free(m4);

    /* Same model, other optimizer: the optimizer state does not fit. */
    hr_session_t *sgd = small_session(m, HR_OPTIM_SGD, 1);
    CHECK(sgd && hr_checkpoint_load(sgd, path, NULL) == HR_ERR_FORMAT && strstr(hr_last_error(), "optimizer"),
          "SGD session refuses Adam state: %s", hr_last_error());

    /* Sessions without optimizer state take the weights and leave the rest. */
    hr_config_t icfg = hr_config_default();
    icfg.batch = 4;
    icfg.mode = HR_MODE_INFER;
    hr_session_t *inf = hr_compile(m, &icfg);
    CHECK(inf && hr_session_alloc(inf) == HR_OK, "inference session: %s", hr_last_error());
    CHECK(inf && hr_checkpoint_load(inf, path, NULL) == HR_OK, "load into inference: %s", hr_last_error());
    CHECK(inf && same_state(inf, &before, true), "inference session has the weights");
    hr_session_free(inf);
    icfg.mode = HR_MODE_TRAIN;
    icfg.optim.kind = HR_OPTIM_SGD;
    icfg.optim.momentum = 0;
    hr_session_t *plain = hr_compile(m, &icfg);
    CHECK(plain && hr_session_alloc(plain) == HR_OK, "plain SGD session: %s", hr_last_error());
    CHECK(plain && hr_checkpoint_load(plain, path, NULL) == HR_OK, "load into plain SGD: %s", hr_last_error());
    CHECK(plain && hr_step_count(plain) == 2, "step count restored");
    hr_session_free(plain);

    /* Plain weights (as PyTorch's save_file writes them): parameters and buffers only. */
    hr_st_entry w[64];
    int64_t dims[64][4];
    int nw = 0;
    for (int i = 0; i < hr_state_count(s2) && nw < 63; i++) {
        if (!hr_state_is_param(s2, i)) continue;
        for (int d = 0; d < hr_state_ndim(s2, i); d++) dims[nw][d] = hr_state_dim(s2, i, d);
        w[nw] = (hr_st_entry){before.names[i], "F32", hr_state_ndim(s2, i), dims[nw], before.data[i]};
        nw++;
    }
    const char *wpath = tmp_path("weights.safetensors");
    CHECK(hr_safetensors_write(wpath, w, nw, NULL, NULL, 0, NULL, NULL) == HR_OK, "write weights: %s", hr_last_error());
    hr_session_t *s3 = small_session(m, HR_OPTIM_ADAM, 3);
    CHECK(s3 && hr_checkpoint_load(s3, wpath, NULL) == HR_OK, "load plain weights: %s", hr_last_error());
    CHECK(s3 && same_state(s3, &before, true) && hr_step_count(s3) == 0, "weights loaded, step untouched");
    w[nw] = (hr_st_entry){"fc.weight", "F32", 1, dims[0], before.data[0]};
    CHECK(hr_safetensors_write(wpath, w, nw + 1, NULL, NULL, 0, NULL, NULL) == HR_OK, "write weights");
    CHECK(s3 && hr_checkpoint_load(s3, wpath, NULL) == HR_ERR_FORMAT && strstr(hr_last_error(), "'fc.weight'"),
          "an unknown tensor is refused: %s", hr_last_error());

    /* Every allocation of save and load fails in turn. */
    size_t n0 = 0, n1 = 0;
    char *good = read_file(path, &n0);
    int k;
    for (k = 1; k < 10000; k++) {
        hr_fault_fail_at(k);
        hr_status st = hr_checkpoint_save(s2, path, &meta);
        hr_fault_fail_at(0);
        if (st == HR_OK) break;
        CHECK(st == HR_ERR_OOM, "save alloc %d: %s", k, hr_last_error());
        char *now = read_file(path, &n1);
        CHECK(now && n1 == n0 && !memcmp(now, good, n0), "save alloc %d: previous checkpoint intact", k);
        free(now);
    }
    CHECK(k > 3 && k < 10000, "save fault loop ended at %d", k);
    for (k = 1; k < 10000; k++) {
        hr_fault_fail_at(k);
        hr_status st = hr_checkpoint_load(s3, path, &got);
        hr_fault_fail_at(0);
        if (st == HR_OK) break;
        CHECK(st == HR_ERR_OOM, "load alloc %d: %s", k, hr_last_error());
    }
    CHECK(k > 10 && k < 10000, "load fault loop ended at %d", k);
    /* A NaN in a saved tensor (a diverged run): refused by name, nothing loaded. */
    const char *bad = tmp_path("nan.safetensors");
    int wi = hr_state_find(s, "4.bias");
    float bias[3];
    CHECK(wi >= 0 && hr_state_read(s, wi, bias) == HR_OK, "read 4.bias");
    float keep = bias[1];
    bias[1] = NAN;
    CHECK(hr_state_write(s, wi, bias) == HR_OK && hr_checkpoint_save(s, bad, &meta) == HR_OK, "save with a NaN: %s",
          hr_last_error());
    bias[1] = keep;
    hr_state_write(s, wi, bias);
    snapshot mid;
    snap(s3, &mid);
    hr_status nst = hr_checkpoint_load(s3, bad, &got);
    CHECK(nst == HR_ERR_FORMAT && strstr(hr_last_error(), "'4.bias'") && strstr(hr_last_error(), "NaN at element 1"),
          "a NaN in the file refused, naming the tensor: %s", hr_last_error());
    CHECK(same_state(s3, &mid, false), "the refused file left the session's state untouched");
    snap_free(&mid);
    free(good);
    snap_free(&before);
    hr_session_free(s3);
    hr_session_free(sgd);
    hr_session_free(s2);
    hr_session_free(s);
    hr_model_free(m);
}
#endif
