/* test_groups.c — what the session does for a backend with the optional
 * entries (run_group, mark/mark_ms), checked on the CPU: the CPU's table,
 * wrapped so that it takes update nodes as groups (running them one by one)
 * and keeps fake marks. Against the plain CPU backend: the same bits after
 * several steps for every optimizer; each step's update reaches the backend
 * as one group of every update node, with the step number of the update;
 * HR_PROFILE=2 marks every node or group once, then the end, and adds up the
 * times between marks; a failing group names its first node. */
#include "check.h"
#include "exec/session.h"

#include <stdlib.h>
#include <string.h>

/* ---- the wrapped backend ------------------------------------------------------ */
static hr_backend *inner;      /* the CPU backend that does the work */
static int groups, grouped;    /* run_group calls and the nodes they held */
static int bad_group;          /* groups that mixed ops, were empty or had a wrong step */
static int64_t want_t;         /* the step number an update must see */
static bool fail_groups;       /* run_group fails */
static int marks[4096], nmarks; /* slots marked, in order */

static hr_status w_run_group(hr_backend *be, const hr_graph *g, const hr_node *nodes, int count, void *const *ptr,
                             const hr_step_info *si) {
    groups++;
    grouped += count;
    if (fail_groups) return hr_error_set(HR_ERR_DEVICE, "the fake group launch failed");
    bool ok = count > 0 && (nodes[0].op == HR_OP_ADAM || nodes[0].op == HR_OP_SGD) && si->t == want_t;
    for (int i = 0; i < count && ok; i++) {
        ok = nodes[i].op == nodes[0].op;
        if (ok && inner->run(inner, g, &nodes[i], ptr, si) != HR_OK) return HR_ERR_INTERNAL;
    }
    bad_group += !ok;
    return HR_OK;
}

static hr_status w_mark(hr_backend *be, int slot) {
    if (nmarks < (int)(sizeof marks / sizeof marks[0])) marks[nmarks++] = slot;
    return HR_OK;
}
/* b - a milliseconds: a node's time is the number of nodes its mark covers */
static double w_mark_ms(hr_backend *be, int a, int b) { return (double)(b - a); }

static void w_free(hr_backend *be) {
    inner->free(inner);
    free(be);
}

static hr_backend *wrapped_cpu(const hr_config_t *cfg) {
    inner = hr_backend_cpu_new(cfg);
    hr_backend *be = malloc(sizeof *be);
    if (!inner || !be) abort();
    *be = *inner; /* same context: the CPU's functions only read be->ctx */
    be->name = "cpu-grouped";
    be->run_group = w_run_group;
    be->mark = w_mark;
    be->mark_ms = w_mark_ms;
    be->free = w_free;
    return be;
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
    hr_session_t *a = hr_compile(m, &c);
    setenv("HR_PROFILE", "2", 1);
    hr_session_t *b = hr_compile_on(m, &c, wrapped_cpu(&c));
    unsetenv("HR_PROFILE");
    CHECK(a && b, "%s: compile: %s", label, hr_last_error());
    if (!a || !b) return;
    CHECK(hr_session_alloc(a) == HR_OK && hr_session_alloc(b) == HR_OK, "%s: alloc: %s", label, hr_last_error());
    const hr_graph *g = &b->prog.g;
    int nupd = 0, first_upd = -1;
    for (int k = 0; k < g->nn; k++)
        if (g->n[k].op == HR_OP_ADAM || g->n[k].op == HR_OP_SGD) {
            if (first_upd < 0) first_upd = k;
            nupd++;
        }
    CHECK(nupd == 8 && first_upd + nupd == g->nn, "%s: %d update nodes from node %d of %d", label, nupd, first_upd,
          g->nn);
    CHECK(b->prof && b->prof_events, "%s: HR_PROFILE=2 did not choose the device marks", label);
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
        marks_ok = marks[i] == (j <= first_upd ? j : g->nn);
    }
    CHECK(marks_ok, "%s: %d marks, want %d: at nodes 0..%d and %d each step", label, nmarks, STEPS * per, first_upd,
          g->nn);
    if (b->prof) {
        double total = 0;
        for (int k = 0; k < g->nn; k++) total += b->prof[k];
        /* the first step is left out of the table */
        CHECK(b->prof_runs == STEPS - 1 && fabs(total - 1e-3 * (STEPS - 1) * g->nn) < 1e-9 &&
                  b->prof_span[first_upd] == nupd && fabs(b->prof[first_upd] - 1e-3 * (STEPS - 1) * nupd) < 1e-9,
              "%s: profile %.6f s in all, %.6f s in the group of %d", label, total, b->prof[first_upd],
              b->prof_span[first_upd]);
    }
    /* a failing group: the message names its first node */
    fail_groups = true;
    CHECK(hr_train_step(b, x, lab, NULL) != HR_OK, "%s: a failing group went unnoticed", label);
    char want[64];
    snprintf(want, sizeof want, "node %d (%s", first_upd, hr_op_name(g->n[first_upd].op));
    CHECK(strstr(hr_last_error(), want) && strstr(hr_last_error(), "fake group launch failed"),
          "%s: the message of a failing group: %s", label, hr_last_error());
    /* the table is for people: not printed here */
    free(b->prof);
    free(b->prof_span);
    b->prof = NULL;
    hr_session_free(a);
    hr_session_free(b);
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
    TEST_END();
}
