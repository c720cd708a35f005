/* test_html.c — `headroom plan --html` (issue 13): the page's embedded data read
 * back with the JSON reader (one entry per planned storage group, category sums
 * equal to the report's), then the page opened in headless Chromium: the script
 * drew one rectangle per group, its legend adds up to the report and its
 * highest stack of live bytes is the plan's lower bound; render times printed.
 * Chromium missing is a failure that names scripts/deps.sh, not a skip. */
#include "check.h"
#include "exec/internal.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char headroom_bin[4096];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a random graph of residual Adds and Concats (as test_plan_scale's) ---- */
static uint64_t prng_s;
static int below(int n) {
    uint64_t x = (prng_s += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return (int)((x ^ (x >> 31)) % (uint64_t)n);
}

static hr_model_t *random_graph(int blocks, int64_t F, uint64_t seed) {
    prng_s = seed;
    hr_model_t *m = hr_model_new("random graph");
    int *outs = malloc(sizeof(int) * (size_t)(blocks + 1)), n = 0;
    int x = hr_input(m, "x", 1, &F);
    outs[n++] = x;
    for (int i = 0; i < blocks && x >= 0; i++) {
        int far = below(16) == 0 ? n : n < 8 ? n : 8;
        switch (below(8)) {
        case 0: case 1: case 2:
            x = hr_linear(m, NULL, x, F, F, below(4) != 0);
            if (x >= 0 && below(2)) x = hr_relu(m, NULL, x);
            break;
        case 3: case 4: case 5: x = hr_add(m, NULL, x, outs[n - 1 - below(far)]); break;
        default: {
            int k = 2 + below(2), xs[3] = {x, outs[n - 1 - below(far)], outs[n - 1 - below(far)]};
            x = hr_concat(m, NULL, k, xs);
            if (x >= 0) x = hr_linear(m, NULL, x, k * F, F, true);
            break;
        }
        }
        outs[n++] = x;
    }
    free(outs);
    if (x >= 0) x = hr_linear(m, NULL, x, F, 10, true);
    if (x >= 0) x = hr_loss_cross_entropy(m, x, 10);
    CHECK(x >= 0, "random graph of %d blocks: %s", blocks, hr_last_error());
    if (x < 0) hr_model_free(m), m = NULL;
    return m;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
    if (s) s[n] = 0, *len = (size_t)n;
    fclose(f);
    return s;
}

static int64_t num(const hr_json *j) {
    int64_t v = -1;
    if (j && j->type == HR_JSON_NUMBER && !hr_json_uint(j, &v)) v = strtoll(j->str, NULL, 10);
    return v;
}

/* Reads the page's data back with the strict JSON reader and checks it
 * against the session's plan; returns the groups. */
static int check_data(const hr_session_t *s, const char *label, const char *page, size_t len) {
    const hr_plan *pl = hr_session_plan(s);
    const hr_program *p = hr_session_program(s);
    const hr_report_t *r = hr_session_report(s);
    int groups = 0;
    for (int i = 0; i < p->g.nt; i++) groups += pl->root[i] == i;
    const char *open = "<script type=\"application/json\" id=\"plan-data\">";
    const char *a = strstr(page, open), *b = a ? strstr(a, "</script>") : NULL;
    CHECK(a && b, "%s: no plan-data block", label);
    if (!a || !b) return groups;
    a += strlen(open);
    hr_json *j = NULL;
    hr_status st = hr_json_parse(a, (size_t)(b - a), label, 0, &j);
    CHECK(st == HR_OK, "%s: the embedded data is not JSON: %s", label, hr_last_error());
    if (st != HR_OK) return groups;
    const hr_json *t = hr_json_get(j, "t");
    CHECK(t && t->type == HR_JSON_ARRAY && t->n == groups, "%s: %d tensor entries, the plan has %d groups", label,
          t ? t->n : -1, groups);
    size_t sum[HR_CAT_COUNT] = {0};
    int bad = 0;
    for (int i = 0; t && i < t->n; i++) {
        const hr_json *e = &t->items[i];
        if (e->type != HR_JSON_ARRAY || e->n != 7) {
            bad++;
            continue;
        }
        int64_t first = num(&e->items[0]), last = num(&e->items[1]), off = num(&e->items[2]), bytes = num(&e->items[3]),
                cat = num(&e->items[4]);
        if (cat < 0 || cat >= HR_CAT_COUNT || first < 0 || last < first || last >= p->g.nn || bytes <= 0 ||
            (size_t)(off + bytes) > pl->arena_bytes || e->items[6].type != HR_JSON_STRING) {
            bad++;
            continue;
        }
        sum[cat] += (size_t)bytes;
    }
    CHECK(bad == 0, "%s: %d malformed or out-of-arena entries", label, bad);
    for (int k = 0; k < HR_CAT_COUNT; k++)
        CHECK(sum[k] == r->category_bytes[k], "%s: %s: the page's entries sum to %zu, the report says %zu", label,
              hr_category_name((hr_category)k), sum[k], r->category_bytes[k]);
    const hr_json *nodes = hr_json_get(j, "nodes");
    CHECK(nodes && nodes->n == p->g.nn, "%s: %d nodes in the page, %d in the program", label, nodes ? nodes->n : -1,
          p->g.nn);
    CHECK(num(hr_json_get(j, "peak_step")) == r->peak_step && (size_t)num(hr_json_get(j, "arena")) == r->arena_bytes,
          "%s: peak step or arena differ from the report", label);
    hr_json_free(j);
    (void)len;
    return groups;
}

/* Appended to a copy of a page: mouse moves over a grid of the arena until
 * the tooltip shows, its text left on <body> as data-tip; then the wheel
 * zooms in 12 times (data-zoomed: the rectangles drawn then). */
static const char hover_probe[] =
    "<script>(function(){var c=document.getElementById('arena'),r=c.getBoundingClientRect(),"
    "tip=document.getElementById('tip'),n=0;for(var i=1;i<60&&!n;i++)for(var j=1;j<30&&!n;j++){"
    "c.dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+r.width*i/60,clientY:r.top+r.height*j/30}));"
    "n=tip.style.display=='block';}document.body.dataset.tip=n?tip.textContent.replace(/\\n/g,' | '):'none';"
    "for(i=0;i<12;i++)c.dispatchEvent(new WheelEvent('wheel',{deltaY:-100,clientX:r.left+r.width/2,"
    "clientY:r.top+r.height/2,cancelable:true}));document.body.dataset.zoomed=document.body.dataset.visible;})();"
    "</script>";

typedef struct {
    long drawn, render_ms, zoomed;
    size_t legend, live_max;
    double wall;
    char tip[512];
    bool ok;
} dom_result;

static bool attr(const char *body, const char *name, char *out, size_t n) {
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(body, key);
    if (!p) return false;
    p += strlen(key);
    size_t k = strcspn(p, "\"");
    snprintf(out, n, "%.*s", (int)(k < n ? k : n - 1), p);
    return true;
}

static bool have_chromium(void) { return system("command -v chromium >/dev/null 2>&1") == 0; }

/* The DOM of the page after its scripts ran, as headless Chromium dumps it. */
static dom_result browse(const char *page, const char *label) {
    dom_result d = {-1, -1, -1, 0, 0, 0, "", false};
    char cmd[2048], out[600];
    snprintf(out, sizeof out, "%s.dom", page);
    snprintf(cmd, sizeof cmd,
             "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=%s/profile "
             "--dump-dom 'file://%s' > '%s' 2> '%s.err'",
             dir, page, out, out);
    double t0 = now();
    int rc = system(cmd);
    d.wall = now() - t0;
    CHECK(rc == 0, "%s: chromium exited with %d (its messages: %s.err)", label, rc, out);
    size_t len = 0;
    char *dom = slurp(out, &len);
    const char *body = dom ? strstr(dom, "<body") : NULL;
    CHECK(body, "%s: no <body> in chromium's DOM dump %s", label, out);
    char v[64];
    if (body && attr(body, "data-drawn", v, sizeof v)) d.drawn = atol(v);
    if (body && attr(body, "data-render-ms", v, sizeof v)) d.render_ms = atol(v);
    if (body && attr(body, "data-legend-bytes", v, sizeof v)) d.legend = (size_t)strtoull(v, NULL, 10);
    if (body && attr(body, "data-live-max", v, sizeof v)) d.live_max = (size_t)strtoull(v, NULL, 10);
    if (body) attr(body, "data-tip", d.tip, sizeof d.tip);
    if (body && attr(body, "data-zoomed", v, sizeof v)) d.zoomed = atol(v);
    d.ok = body && d.drawn >= 0;
    CHECK(d.ok, "%s: the page's script did not run (no data-drawn on <body>)", label);
    free(dom);
    return d;
}

/* Writes s's page, checks its data and, in Chromium, its drawing; returns
 * the in-page render time in ms (-1 without one). */
static long check_page(const hr_session_t *s, const char *name, size_t max_bytes, const char *must) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.html", dir, name);
    hr_status st = hr_plan_html(s, path);
    CHECK(st == HR_OK, "%s: %s", name, hr_last_error());
    if (st != HR_OK) return -1;
    size_t len = 0;
    char *page = slurp(path, &len);
    CHECK(page, "%s: cannot read %s back", name, path);
    if (!page) return -1;
    CHECK(!strstr(page, "http://") && !strstr(page, "https://") && !strstr(page, "<script src") &&
              !strstr(page, "<link"),
          "%s: the page refers to something outside itself", name);
    if (max_bytes) CHECK(len < max_bytes, "%s: the page is %zu bytes, the target is under %zu", name, len, max_bytes);
    if (must) CHECK(strstr(page, must) != NULL, "%s: the page does not say \"%s\"", name, must);
    int groups = check_data(s, name, page, len);
    free(page);
    const hr_report_t *r = hr_session_report(s);
    size_t total = 0;
    for (int k = 0; k < HR_CAT_COUNT; k++) total += r->category_bytes[k];
    if (!have_chromium()) {
        CHECK(0, "%s: chromium is not installed: the browser checks need it (scripts/deps.sh test installs it)", name);
        printf("%-28s %8zu bytes, %5d groups (no browser)\n", name, len, groups);
        return -1;
    }
    dom_result d = browse(path, name);
    if (!d.ok) return -1;
    CHECK(d.drawn == groups, "%s: the script drew %ld rectangles for %d groups", name, d.drawn, groups);
    CHECK(d.legend == total, "%s: the legend adds up to %zu bytes, the report to %zu", name, d.legend, total);
    CHECK(d.live_max == r->lower_bound, "%s: the live-bytes stack tops at %zu, the plan's lower bound is %zu", name,
          d.live_max, r->lower_bound);
    /* the tooltip, from mouse events on a copy of the page */
    char probe[600];
    snprintf(probe, sizeof probe, "%s.hover.html", path);
    FILE *f = fopen(probe, "w");
    page = slurp(path, &len);
    if (f && page) {
        char *end = strstr(page, "</body>");
        if (end) *end = 0;
        fprintf(f, "%s%s</body></html>\n", page, hover_probe);
    }
    if (f) fclose(f);
    free(page);
    dom_result h = browse(probe, name);
    CHECK(strstr(h.tip, " | layer ") && strstr(h.tip, " bytes) at offset ") && strstr(h.tip, " steps): from ") &&
              strstr(h.tip, " to "),
          "%s: hovering the arena shows no tensor's name, layer, size and lifetime: '%s'", name, h.tip);
    CHECK(h.zoomed > 0 && h.zoomed < d.drawn, "%s: zoomed in, the page drew %ld of %ld rectangles", name, h.zoomed,
          d.drawn);
    printf("  hover: %s\n  zoomed in 12 wheel steps: %ld of %ld rectangles drawn\n", h.tip, h.zoomed, d.drawn);
    printf("%-28s %8zu bytes, %5d groups, rendered in %4ld ms (chromium, start to exit: %.2f s)\n", name, len, groups,
           d.render_ms, d.wall);
    return d.render_ms;
}

static hr_session_t *compile_file(const char *file, hr_config_t *cfg, hr_model_t **m) {
    *m = hr_modelfile_load(file);
    CHECK(*m, "%s: %s", file, hr_last_error());
    if (!*m) return NULL;
    hr_session_t *s = hr_compile(*m, cfg);
    CHECK(s, "%s: compile: %s", file, hr_last_error());
    return s;
}

static void test_examples(void) {
    hr_model_t *m;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 64;
    cfg.eval_batch = -1; /* as `headroom plan examples/deep_cnn.model --batch 64`: with its evaluation pass */
    hr_session_t *s = compile_file("examples/deep_cnn.model", &cfg, &m);
    if (s) {
        long ms = check_page(s, "deep_cnn_b64", 300 * 1024, NULL);
        if (ms >= 0) CHECK(ms < 1000, "deep_cnn batch 64 renders in %ld ms, the target is under 1 s", ms);
        /* errors name the path */
        char bad[600];
        snprintf(bad, sizeof bad, "%s/no/such/dir/p.html", dir);
        CHECK(hr_plan_html(s, bad) == HR_ERR_IO && strstr(hr_last_error(), bad), "unwritable path: %s",
              hr_last_error());
        CHECK(hr_plan_html(s, dir) == HR_ERR_IO && strstr(hr_last_error(), "directory"), "a directory: %s",
              hr_last_error());
        hr_session_free(s);
    }
    if (m) hr_model_free(m);
    cfg.accumulate = 4;
    s = compile_file("examples/deep_cnn.model", &cfg, &m);
    if (s) check_page(s, "deep_cnn_b64_accumulate4", 300 * 1024, "Accumulation: 4 micro-batches");
    hr_session_free(s);
    if (m) hr_model_free(m);
    cfg = hr_config_default();
    cfg.batch = 64;
    cfg.recompute = "min";
    s = compile_file("examples/resnet_tiny.model", &cfg, &m);
    if (s) {
        CHECK(hr_session_report(s)->recompute, "resnet_tiny recompute min recomputes something");
        check_page(s, "resnet_tiny_recompute_min", 0, "Recomputation: layers");
        bool named = false;
        const hr_program *p = hr_session_program(s);
        for (int i = 0; i < p->g.nt; i++) {
            size_t n = strlen(p->g.t[i].name);
            named |= n > 11 && !strcmp(p->g.t[i].name + n - 11, ".recomputed");
        }
        CHECK(named, "recomputed tensors end in .recomputed");
    }
    hr_session_free(s);
    if (m) hr_model_free(m);
}

static void test_random(void) {
    hr_model_t *m = random_graph(420, 32, 7);
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s, "random graph: compile: %s", hr_last_error());
    if (s) {
        const hr_plan *pl = hr_session_plan(s);
        int nt = hr_session_program(s)->g.nt, groups = 0;
        for (int i = 0; i < nt; i++) groups += pl->root[i] == i;
        CHECK(groups >= 2000, "the random model has %d storage groups (%d tensors), the test wants 2000", groups, nt);
        long ms = check_page(s, "random_graph", 0, NULL);
        if (ms >= 0) CHECK(ms < 3000, "the %d-tensor random model renders in %ld ms, the target is under 3 s", nt, ms);
        hr_session_free(s);
    }
    hr_model_free(m);
}

/* The command line: plan --html writes the page; other commands refuse it. */
static void test_cli(const char *argv0) {
    ssize_t n = readlink("/proc/self/exe", headroom_bin, sizeof headroom_bin - 16);
    if (n > 0) headroom_bin[n] = 0;
    else snprintf(headroom_bin, sizeof headroom_bin - 16, "%s", argv0);
    char *slash = strrchr(headroom_bin, '/');
    if (slash) *slash = 0, slash = strrchr(headroom_bin, '/'); /* BUILD/tests/test_html -> BUILD */
    if (!slash) return;
    strcpy(slash + 1, "headroom");
    if (access(headroom_bin, X_OK) != 0) {
        CHECK(0, "%s not built", headroom_bin);
        return;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' plan examples/deep_cnn.model --batch 8 --html %s/cli.html >/dev/null 2>&1",
             headroom_bin, dir);
    int rc = system(cmd);
    struct stat sb;
    char page[600];
    snprintf(page, sizeof page, "%s/cli.html", dir);
    CHECK(rc == 0 && stat(page, &sb) == 0 && sb.st_size > 1000, "plan --html: status %d", rc);
    snprintf(cmd, sizeof cmd, "'%s' train examples/deep_cnn.model --html %s/x.html >/dev/null 2>&1", headroom_bin, dir);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "train --html: status %d, expected 2", rc);
    snprintf(cmd, sizeof cmd, "'%s' plan examples/deep_cnn.model --html %s/no/dir/x.html >/dev/null 2>&1",
             headroom_bin, dir);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "plan --html to a missing directory: status %d, expected 1", rc);
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/hr_test_html.XXXXXX");
    CHECK(mkdtemp(dir), "mkdtemp");
    test_examples();
    test_random();
    test_cli(argc > 0 ? argv[0] : "");
    if (!check_fail) { /* keep the pages of a failure for a look */
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "pages kept in %s\n", dir);
    }
    TEST_END();
}
