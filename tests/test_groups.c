/* test_groups.c — what the session does for a backend with the optional
 * entries (run_group, mark/mark_ms), checked on the CPU: the CPU's table,
 * wrapped so that it takes update nodes as groups (running them one by one)
 * and keeps fake marks. Against the plain CPU backend: the same bits after
 * several steps for every optimizer; each step's update reaches the backend
 * as one group of every update node, each with its own parameter's pointers
 * and the step number of the update; HR_PROFILE=2 marks every node or group
 * once, then the end, and the table adds up the times between marks; a
 * failing group names its first node. And a backend whose kernel table lacks
 * an op is refused at compile, naming the layer, before anything is allocated. */
#include "check.h"
#include "exec/internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the wrapped backend ------------------------------------------------------ */
static hr_backend *inner;      /* the CPU backend that does the work */
static int groups, grouped;    /* run_group calls and the nodes they held */
static int bad_group;          /* groups that mixed ops, were empty, had a wrong step or wrong pointers */
static int64_t want_t;         /* the step number an update must see */
static bool want_s1, want_clip; /* the update's state buffer 1 (Adam, SGD with momentum), clipping */
static bool fail_groups;       /* run_group fails */
static int marks[4096], nmarks; /* slots marked, in order */
static int arena_allocs;       /* arena_alloc calls */

/* a[0..count): one parameter's update each, all of one op, with that
 * parameter's own pointers and the update's step */
static bool group_ok(const hr_kargs *a, int count) {
    if (count <= 0 || (a[0].op != HR_OP_ADAM && a[0].op != HR_OP_SGD)) return false;
    for (int i = 0; i < count; i++) {
        const hr_optim_args *o = &a[i].opt;
        bool adam = a[0].op == HR_OP_ADAM;
        if (a[i].op != a[0].op || o->t != want_t || !o->p || !o->g || o->n <= 0 || (o->s1 != NULL) != want_s1 ||
            (o->s2 != NULL) != adam || (o->sqnorm != NULL) != want_clip)
            return false;
        for (int j = 0; j < i; j++)
            if (a[j].opt.p == o->p) return false;
    }
    return true;
}

static hr_status w_run_group(hr_backend *be, const hr_kargs *a, int count) {
    groups++;
    grouped += count;
    if (fail_groups) return hr_error_set(HR_ERR_DEVICE, "the fake group launch failed");
    bool ok = group_ok(a, count);
    for (int i = 0; i < count && ok; i++)
        if (inner->run(inner, &a[i]) != HR_OK) return HR_ERR_INTERNAL;
    bad_group += !ok;
    return HR_OK;
}

static hr_status w_mark(hr_backend *be, int slot) {
    if (nmarks < (int)(sizeof marks / sizeof marks[0])) marks[nmarks++] = slot;
    return HR_OK;
}
/* b - a milliseconds: a node's time is the number of nodes its mark covers */
static double w_mark_ms(hr_backend *be, int a, int b) { return (double)(b - a); }

static hr_status w_arena_alloc(hr_backend *be, size_t bytes, void **base) {
    arena_allocs++;
    return inner->arena_alloc(inner, bytes, base);
}

static void w_free(hr_backend *be) {
    inner->free(inner);
    free(be);
}

/* One at a time: `inner` is the latest one's. */
static hr_backend *wrapped_cpu(const hr_config_t *cfg) {
    inner = hr_backend_cpu_new(cfg);
    hr_backend *be = malloc(sizeof *be);
    if (!inner || !be) abort();
    *be = *inner; /* same context and kernels: the CPU's functions only read be->ctx */
    be->name = "cpu-grouped";
    be->run_group = w_run_group;
    be->mark = w_mark;
    be->mark_ms = w_mark_ms;
    be->arena_alloc = w_arena_alloc;
    be->free = w_free;
    return be;
}

/* hr_session_free(s) with stderr (the profile table) into buf; "" if that fails. */
static void free_capturing_stderr(hr_session_t *s, char *buf, size_t n) {
    buf[0] = 0;
    fflush(stderr);
    FILE *tf = tmpfile();
    int saved = dup(2);
    if (!tf || saved < 0 || dup2(fileno(tf), 2) < 0) {
        if (tf) fclose(tf);
        if (saved >= 0) close(saved);
        hr_session_free(s);
        return;
    }
    hr_session_free(s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tf);
    size_t got = fread(buf, 1, n - 1, tf);
    buf[got] = 0;
    fclose(tf);
}

/* The milliseconds of a table line: the number just before " ms"; -1 if none. */
static double line_ms(const char *line, const char *end) {
    const char *ms = strstr(line, " ms");
    if (!ms || ms >= end) return -1;
    const char *b = ms;
    while (b > line && (b[-1] == '.' || (b[-1] >= '0' && b[-1] <= '9'))) b--;
    return b < ms ? atof(b) : -1;
}

/* ---- the model and the runs --------------------------------------------------- */
static hr_model_t *small_cnn(void) {
    hr_model_t *m = hr_model_new("small_cnn");
    int x = hr_input(m, "x", 3, (int64_t[]){2, 8, 8});
    x = hr_conv2d(m, NULL, x, 2, 4, 3, 1, 1, true);
    x = hr_batchnorm(m, NULL, x, 4, 1e-5f, 0.1f);
    x = hr_relu(m, NULL, x);
    x = hr_maxpool2d(m, NULL, x, 2, 2);
    x = hr_flatten(m, NULL, x);
    x = hr_linear(m, NULL, x, 64, 16, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 16, 5, true);
    hr_loss_cross_entropy(m, x, 5);
    return m;
}

#define BATCH 4
#define STEPS 3

static void batch_of(int step, float *x, int32_t *lab) {
    for (int i = 0; i < BATCH * 128; i++) x[i] = (float)(((i + 7 * step) * 37) % 23) / 11.0f - 1.0f;
    for (int i = 0; i < BATCH; i++) lab[i] = (i + step) % 5;
}

static bool same_state(hr_session_t *a, hr_session_t *b, char *which, size_t wl) {
    for (int i = 0; i < hr_state_count(a); i++) {
        int64_t n = 1;
        for (int d = 0; d < hr_state_ndim(a, i); d++) n *= hr_state_dim(a, i, d);
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        bool same = va && vb && hr_state_read(a, i, va) == HR_OK && hr_state_read(b, i, vb) == HR_OK &&
                    memcmp(va, vb, sizeof(float) * (size_t)n) == 0;
        free(va), free(vb);
        if (!same) {
            snprintf(which, wl, "%s", hr_state_name(a, i));
            return false;
        }
    }
    return true;
}

static void test_variant(const hr_model_t *m, hr_config_t c, const char *label) {
    groups = grouped = bad_group = nmarks = 0;
    fail_groups = false;
    want_s1 = c.optim.kind != HR_OPTIM_SGD || c.optim.momentum != 0;
    want_clip = c.optim.clip_norm > 0;
    hr_session_t *a = hr_compile(m, &c);
    setenv("HR_PROFILE", "2", 1);
    hr_session_t *b = hr_compile_on(m, &c, wrapped_cpu(&c));
    unsetenv("HR_PROFILE");
    CHECK(a && b, "%s: compile: %s", label, hr_last_error());
    if (!a || !b) {
        hr_session_free(a);
        hr_session_free(b);
        return;
    }
    CHECK(hr_session_alloc(a) == HR_OK && hr_session_alloc(b) == HR_OK, "%s: alloc: %s", label, hr_last_error());
    const hr_graph *g = &hr_session_program(b)->g;
    const int nn = g->nn;
    int nupd = 0, first_upd = -1;
    for (int k = 0; k < nn; k++)
        if (g->n[k].op == HR_OP_ADAM || g->n[k].op == HR_OP_SGD) {
            if (first_upd < 0) first_upd = k;
            nupd++;
        }
    CHECK(nupd == 8 && first_upd + nupd == nn, "%s: %d update nodes from node %d of %d", label, nupd, first_upd, nn);
    const char *first_op = first_upd >= 0 ? hr_op_name(g->n[first_upd].op) : "?";
    CHECK(hr_session_profile_mode(b) == 2, "%s: HR_PROFILE=2 did not choose the device marks (mode %d)", label,
          hr_session_profile_mode(b));
    float x[BATCH * 128], la = 0, lb = 0;
    int32_t lab[BATCH];
    bool losses_same = true;
    for (int s = 0; s < STEPS; s++) {
        batch_of(s, x, lab);
        want_t = s + 1;
        CHECK(hr_train_step(a, x, lab, &la) == HR_OK && hr_train_step(b, x, lab, &lb) == HR_OK, "%s: step %d: %s",
              label, s, hr_last_error());
        losses_same &= memcmp(&la, &lb, sizeof la) == 0;
    }
    char which[300] = "";
    CHECK(losses_same, "%s: the losses differ (%.9g vs %.9g)", label, la, lb);
    CHECK(same_state(a, b, which, sizeof which), "%s: %s differs after %d steps", label, which, STEPS);
    CHECK(groups == STEPS && grouped == STEPS * nupd && bad_group == 0,
          "%s: %d groups holding %d nodes (%d bad); want %d of %d", label, groups, grouped, bad_group, STEPS, nupd);
    /* marks: each step, one at every node before the updates, one at the
     * group, one at the end */
    int per = first_upd + 2;
    bool marks_ok = nmarks == STEPS * per;
    for (int i = 0; i < nmarks && marks_ok; i++) {
        int j = i % per;
        marks_ok = marks[i] == (j <= first_upd ? j : nn);
    }
    CHECK(marks_ok, "%s: %d marks, want %d: at nodes 0..%d and %d each step", label, nmarks, STEPS * per, first_upd,
          nn);
    hr_session_free(a);
    /* the profile table, printed when the session ends (captured here): the
     * first step left out; a fake millisecond for each node a mark covers, so
     * every node before the updates 1 ms a step, the group (in its first
     * node) nupd ms, nn ms a step in all */
    static char table[1 << 16];
    free_capturing_stderr(b, table, sizeof table);
    long long runs = -1;
    double step_ms = -1, sum_ms = 0, group_ms = -1;
    int rows = 0, bad_rows = 0;
    const char *h = strstr(table, "profile: ");
    if (h) {
        const char *r = strstr(h, " runs, ");
        const char *p = r;
        while (p && p > h && p[-1] >= '0' && p[-1] <= '9') p--;
        if (r && p < r) runs = atoll(p), step_ms = atof(r + 7);
    }
    for (const char *line = h ? strchr(h, '\n') : NULL; line && line[1]; line = strchr(line + 1, '\n')) {
        const char *end = strchr(line + 1, '\n');
        if (!end) end = line + strlen(line);
        int k = -1;
        if (sscanf(line + 1, "%d", &k) != 1 || k != rows) break;
        rows++;
        char want[96];
        if (k < first_upd) {
            double ms = line_ms(line + 1, end);
            sum_ms += ms;
            bad_rows += fabs(ms - 1.0) > 1e-9;
        } else if (k == first_upd) {
            group_ms = line_ms(line + 1, end);
            sum_ms += group_ms;
            snprintf(want, sizeof want, "one launch for nodes %d-%d", first_upd, nn - 1);
            char *w = strstr(line + 1, want);
            bad_rows += !w || w > end;
        } else {
            snprintf(want, sizeof want, "(in node %d's launch)", first_upd);
            char *w = strstr(line + 1, want);
            bad_rows += !w || w > end;
        }
    }
    CHECK(runs == STEPS - 1 && fabs(step_ms - nn) < 1e-9 && rows == nn && bad_rows == 0 && fabs(sum_ms - nn) < 1e-9 &&
              fabs(group_ms - nupd) < 1e-9,
          "%s: profile of %lld runs, %.3f ms a step, %d rows (%d wrong), %.3f ms in all, %.3f ms in the group of %d:\n%s",
          label, runs, step_ms, rows, bad_rows, sum_ms, group_ms, nupd, table);
    /* a failing group: the message names its first node (a session of its
     * own, profiled as above) */
    fail_groups = true;
    setenv("HR_PROFILE", "2", 1);
    b = hr_compile_on(m, &c, wrapped_cpu(&c));
    unsetenv("HR_PROFILE");
    CHECK(b && hr_session_alloc(b) == HR_OK, "%s: compile and alloc: %s", label, hr_last_error());
    if (!b) return;
    want_t = 1;
    batch_of(0, x, lab);
    CHECK(hr_train_step(b, x, lab, NULL) != HR_OK, "%s: a failing group went unnoticed", label);
    char want[64];
    snprintf(want, sizeof want, "node %d (%s", first_upd, first_op);
    CHECK(strstr(hr_last_error(), want) && strstr(hr_last_error(), "fake group launch failed"),
          "%s: the message of a failing group: %s", label, hr_last_error());
    /* the table is for people: not printed here */
    free_capturing_stderr(b, table, sizeof table);
}

/* A backend whose kernel table lacks an op: hr_compile_on refuses a model
 * whose program runs it, naming the layer and the op, before anything is
 * allocated; the caller still owns the backend, and with the whole table the
 * same model compiles and runs. An op the program does not run (GELU's
 * backward in inference) is not asked for. */
static void test_missing_kernel(void) {
    hr_model_t *m = hr_model_new("gelu_mlp");
    int x = hr_input(m, "x", 1, (int64_t[]){6});
    x = hr_linear(m, NULL, x, 6, 8, true); /* layer 0 */
    x = hr_gelu(m, NULL, x, false);        /* layer 1 */
    x = hr_linear(m, NULL, x, 8, 3, true); /* layer 2 */
    CHECK(x >= 0 && hr_loss_cross_entropy(m, x, 3) >= 0, "building the GELU model: %s", hr_last_error());
    static const struct {
        hr_op op;
        hr_mode mode;
        bool refused;
    } cases[] = {
        {HR_OP_GELU, HR_MODE_TRAIN, true},
        {HR_OP_GELU, HR_MODE_INFER, true},
        {HR_OP_GELU_BWD, HR_MODE_TRAIN, true},
        {HR_OP_GELU_BWD, HR_MODE_INFER, false},
    };
    fail_groups = false;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hr_config_t c = hr_config_default(); /* Adam, no clipping */
        c.batch = BATCH;
        c.mode = cases[i].mode;
        want_t = 1, want_s1 = true, want_clip = false;
        bad_group = 0;
        const char *op = hr_op_name(cases[i].op);
        const char *mode = c.mode == HR_MODE_TRAIN ? "training" : "inference";
        hr_backend *be = wrapped_cpu(&c);
        hr_kernel_fn k[HR_OP_COUNT];
        memcpy(k, be->kernels, sizeof k);
        CHECK(k[cases[i].op] != NULL, "the CPU backend has no %s kernel", op);
        k[cases[i].op] = NULL;
        const hr_kernel_fn *full = be->kernels;
        be->kernels = k;
        arena_allocs = 0;
        hr_error_clear();
        hr_session_t *s = hr_compile_on(m, &c, be);
        if (cases[i].refused) {
            CHECK(!s, "%s without a %s kernel: compiled", mode, op);
            CHECK(hr_last_status() == HR_ERR_UNSUPPORTED,
                  "%s without a %s kernel: status %s, not HR_ERR_UNSUPPORTED (%s)", mode, op,
                  hr_status_name(hr_last_status()), hr_last_error());
            CHECK(strstr(hr_last_error(), "layer 1 (GELU") && strstr(hr_last_error(), op),
                  "%s without a %s kernel: the message names not both the layer (1, GELU) and the op: %s", mode, op,
                  hr_last_error());
            CHECK(arena_allocs == 0, "%s without a %s kernel: %d arena allocations", mode, op, arena_allocs);
            hr_session_free(s);
            /* the backend is still the caller's: with its whole table the model compiles */
            be->kernels = full;
            s = hr_compile_on(m, &c, be);
        }
        CHECK(s && hr_session_alloc(s) == HR_OK, "%s, %s kernel %s: %s", mode, op,
              cases[i].refused ? "back" : "missing but not run", hr_last_error());
        if (!s) { /* not taken over */
            be->free(be);
            continue;
        }
        float xb[BATCH * 6], out[BATCH * 3], loss = NAN;
        int32_t lab[BATCH] = {0, 1, 2, 1};
        for (int j = 0; j < BATCH * 6; j++) xb[j] = (float)(j % 7) / 3.0f - 1.0f;
        hr_status st = c.mode == HR_MODE_TRAIN ? hr_train_step(s, xb, lab, &loss) : hr_forward(s, xb, out);
        CHECK(st == HR_OK && arena_allocs == 1 && bad_group == 0, "%s, %s kernel %s: step: %s; %d arena allocations",
              mode, op, cases[i].refused ? "back" : "missing but not run", st ? hr_last_error() : "ok", arena_allocs);
        hr_session_free(s);
    }
    hr_model_free(m);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    hr_model_t *m = small_cnn();
    struct {
        const char *name;
        hr_optim_kind kind;
        float lr, momentum, wd, clip;
        bool nesterov;
    } v[] = {
        {"Adam", HR_OPTIM_ADAM, 1e-3f, 0, 0, 0, false},
        {"AdamW clip_norm", HR_OPTIM_ADAMW, 1e-3f, 0, 0.01f, 0.5f, false},
        {"SGD", HR_OPTIM_SGD, 0.1f, 0, 0, 0, false},
        {"SGD momentum weight decay", HR_OPTIM_SGD, 0.1f, 0.9f, 1e-4f, 0, false},
        {"SGD nesterov clip_norm", HR_OPTIM_SGD, 0.1f, 0.9f, 0, 1.0f, true},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        hr_config_t c = hr_config_default();
        c.batch = BATCH;
        c.optim.kind = v[i].kind;
        c.optim.lr = v[i].lr;
        c.optim.momentum = v[i].momentum;
        c.optim.weight_decay = v[i].wd;
        c.optim.clip_norm = v[i].clip;
        c.optim.nesterov = v[i].nesterov;
        int f0 = check_fail;
        test_variant(m, c, v[i].name);
        printf("  %-28s %s\n", v[i].name, check_fail == f0 ? "same bits, one group a step" : "FAILED");
    }
    hr_model_free(m);
    int f0 = check_fail;
    test_missing_kernel();
    printf("  %-28s %s\n", "a kernel missing", check_fail == f0 ? "refused at compile, naming the layer" : "FAILED");
    TEST_END();
}
