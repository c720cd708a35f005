/* test_host_plan.c — the host memory plan (src/cli/host_plan.c): what is
 * available (HR_HOST_MEMORY caps it), the data's bytes from IDX headers alone,
 * the lower bound that refuses an absurd batch before any plan, and the
 * planned CPU job whose largest batch is checked by planning it and the next. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
/* The library holds no cli/, so the plan's source is compiled in here. */
#include "cli/host_plan.c"

static char tmp[256];

static void put_be32(unsigned char *p, uint32_t v) { p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = (unsigned char)v; }

static void write_raw(const char *name, const void *buf, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

static void expect_fail(hr_status st, hr_status want, const char *n1, const char *n2, const char *what) {
    const char *msg = hr_last_error();
    CHECK(st == want, "%s: got %s, want %s (%s)", what, hr_status_name(st), hr_status_name(want), msg);
    CHECK(strstr(msg, n1) != NULL, "%s: message lacks \"%s\": %s", what, n1, msg);
    if (n2) CHECK(strstr(msg, n2) != NULL, "%s: message lacks \"%s\": %s", what, n2, msg);
}

/* A Fashion-MNIST-shaped folder of headers only: 100 images of 4x5 and their
 * labels claimed, no pixels (a peek reads no further). */
enum { FN = 100, FH = 4, FW = 5 };
static const char *make_folder(void) {
    static char dir[300];
    unsigned char img[16], lab[8];
    put_be32(img, 0x803), put_be32(img + 4, FN), put_be32(img + 8, FH), put_be32(img + 12, FW);
    put_be32(lab, 0x801), put_be32(lab + 4, FN);
    snprintf(dir, sizeof dir, "%s/fm", tmp);
    mkdir(dir, 0755);
    write_raw("fm/train-images-idx3-ubyte", img, 16);
    write_raw("fm/train-labels-idx1-ubyte", lab, 8);
    write_raw("fm/t10k-images-idx3-ubyte", img, 16);
    write_raw("fm/t10k-labels-idx1-ubyte", lab, 8);
    return dir;
}

static void put_text(const char *name, const char *text) { write_raw(name, text, strlen(text)); }

/* The cgroup walk on fake trees: v2 with the limit one level up, v1 with
 * inactive file pages, a namespace whose path is not under the mount. */
static void test_cgroups(void) {
    char why[640], proc[300], root[300];
    size_t have = (size_t)4 << 30;
    snprintf(proc, sizeof proc, "%s/cg2.proc", tmp);
    snprintf(root, sizeof root, "%s/cg2", tmp);
    put_text("cg2.proc", "0::/a/b\n");
    mkdir(root, 0755);
    char d[400];
    snprintf(d, sizeof d, "%s/a", root), mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/a/b", root), mkdir(d, 0755);
    put_text("cg2/a/b/memory.max", "max\n");
    put_text("cg2/a/memory.max", "1073741824\n");
    put_text("cg2/a/memory.current", "536870912\n");
    put_text("cg2/a/memory.stat", "anon 1\nfile 2\ninactive_file 134217728\nactive_file 3\n");
    cgroup_room(proc, root, &have, why, sizeof why);
    CHECK(have == (size_t)640 << 20 && strstr(why, "cg2/a/memory.max"), "v2: 1 GiB less 512 MiB used, 128 MiB of it "
          "inactive file pages: %zu (%s)", have, why);

    have = (size_t)4 << 30;
    snprintf(proc, sizeof proc, "%s/cg1.proc", tmp);
    snprintf(root, sizeof root, "%s/cg1", tmp);
    put_text("cg1.proc", "12:cpu,cpuacct:/x\n4:memory:/c\n1:name=systemd:/\n0::/\n");
    mkdir(root, 0755);
    snprintf(d, sizeof d, "%s/memory", root), mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/memory/c", root), mkdir(d, 0755);
    put_text("cg1/memory/memory.limit_in_bytes", "9223372036854771712\n"); /* no limit, as v1 writes it */
    put_text("cg1/memory/c/memory.limit_in_bytes", "2147483648\n");
    put_text("cg1/memory/c/memory.usage_in_bytes", "1073741824\n");
    put_text("cg1/memory/c/memory.stat", "inactive_file 5\ntotal_inactive_file 268435456\n");
    cgroup_room(proc, root, &have, why, sizeof why);
    CHECK(have == (size_t)1280 << 20 && strstr(why, "cg1/memory/c/memory.limit_in_bytes"),
          "v1: 2 GiB less 1 GiB used, 256 MiB of it inactive: %zu (%s)", have, why);

    have = (size_t)4 << 30;
    snprintf(proc, sizeof proc, "%s/ns.proc", tmp);
    snprintf(root, sizeof root, "%s/ns", tmp);
    put_text("ns.proc", "0::/seen/from/the/host\n");
    mkdir(root, 0755);
    put_text("ns/memory.max", "300000000\n");
    put_text("ns/memory.current", "100000000\n");
    cgroup_room(proc, root, &have, why, sizeof why);
    CHECK(have == 200000000, "a cgroup namespace: the mount is the cgroup: %zu (%s)", have, why);
    have = 100;
    cgroup_room(proc, root, &have, why, sizeof why);
    CHECK(have == 100, "a smaller figure stands");
}

static hr_cli_opts host_opts(const char *data, int64_t samples) {
    hr_cli_opts o;
    memset(&o, 0, sizeof o);
    o.data = data;
    o.samples = samples;
    return o;
}

static void test_host_plan(void) {
    char why[640];
    setenv("HR_HOST_MEMORY", "1GiB", 1);
    CHECK(hr_host_available(why, sizeof why) == (size_t)1 << 30 && strstr(why, "HR_HOST_MEMORY"),
          "HR_HOST_MEMORY caps what is available: %s", why);
    unsetenv("HR_HOST_MEMORY");
    size_t have = hr_host_available(why, sizeof why);
    CHECK(have > 0 && have != SIZE_MAX, "this Linux host says what it has: %s", why);

    /* the data, from headers: synthetic holds nothing; the fixture folder its floats and labels */
    hr_cli_opts o = host_opts("synthetic", 100000000);
    hr_host_data d;
    CHECK(hr_host_data_peek(&o, 784, true, &d) == HR_OK && d.synthetic && d.bytes == 0 && d.train_n == 100000000 &&
              d.test_n == 25000000 && d.sample == 784, "synthetic data peeked");
    o = host_opts(make_folder(), 0);
    CHECK(hr_host_data_peek(&o, 1, true, &d) == HR_OK && d.train_n == FN && d.test_n == FN && d.sample == FH * FW,
          "the fixture folder peeked: %s", hr_last_error());
    size_t one = (size_t)FN * FH * FW * 4 + FN * 4;
    CHECK(d.bytes == 2 * one + ((size_t)1 << 20), "fixture: both sets and one read chunk, got %zu", d.bytes);
    o = host_opts("/no-such-folder", 0);
    expect_fail(hr_host_data_peek(&o, 1, true, &d), HR_ERR_IO, "no-such-folder", NULL, "peek a missing folder");

    /* an absurd batch before any plan: refused by arithmetic, with the largest batch whose loader fits */
    setenv("HR_HOST_MEMORY", "1GiB", 1);
    hr_config_t cfg = hr_config_default();
    cfg.batch = 100000000;
    hr_host_job job = {.cfg = &cfg, .loader_batch = cfg.batch, .eval_batch = 1000, .classes = 10};
    o = host_opts("synthetic", 100000000);
    hr_host_data_peek(&o, 784, true, &job.data);
    hr_host_plan p;
    expect_fail(hr_host_check(&job, &p), HR_ERR_OOM, "does not fit host memory", "largest batch that fits: at most",
                "absurd batch");
    /* 1 GiB less the 256 MiB margin; each sample 2 slots x (784 floats + a label) x 4 bytes; evaluation 1000 x 795 x 4 */
    int64_t want = ((int64_t)(768 << 20) - 1000 * 795 * 4) / (2 * 785 * 4);
    char needle[64];
    snprintf(needle, sizeof needle, "at most %lld ", (long long)want);
    CHECK(strstr(hr_last_error(), needle) != NULL, "the largest loader batch is %lld: %s", (long long)want, hr_last_error());
    CHECK(p.margin == 256 << 20 && p.available == 768 << 20 && p.bytes[HR_HOST_LOADER] == (size_t)2e8 * 785 * 4 &&
              p.bytes[HR_HOST_DATA] == 0 && !p.planned, "the lower bound's table");
    cfg.batch = job.loader_batch = want + 1;
    CHECK(hr_host_check(&job, &p) == HR_ERR_OOM, "one more than the largest does not fit");
    cfg.batch = job.loader_batch = want;
    CHECK(hr_host_check(&job, &p) == HR_OK, "the largest fits: %s", hr_last_error());

    /* planned on the CPU: the arena counts, and the largest batch is re-planned */
    hr_model_t *m = hr_model_new("mlp");
    int x = hr_input(m, "x", 1, (int64_t[]){784});
    x = hr_linear(m, NULL, x, 784, 256, true);
    x = hr_relu(m, NULL, x);
    x = hr_linear(m, NULL, x, 256, 10, true);
    hr_loss_cross_entropy(m, x, 10);
    cfg = hr_config_default();
    cfg.device = HR_DEVICE_CPU;
    cfg.batch = 200000;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "compile: %s", hr_last_error());
    if (!s) return;
    job.model = m, job.s = s, job.loader_batch = cfg.batch;
    o = host_opts("synthetic", 1000000);
    hr_host_data_peek(&o, 784, true, &job.data);
    size_t arena = hr_session_report(s)->arena_bytes, loader = (size_t)2 * 200000 * 785 * 4, eval = 1000 * 795 * 4;
    {
        hr_status st = hr_host_check(&job, &p);
        CHECK(p.planned && p.arena_on_host && p.bytes[HR_HOST_ARENA] == arena && p.bytes[HR_HOST_LOADER] == loader &&
                  p.bytes[HR_HOST_EVAL] == (size_t)eval && p.bytes[HR_HOST_PINNED] == 0 &&
                  p.total == arena + loader + (size_t)eval,
              "the CPU job's table: arena %zu, loader %zu", p.bytes[HR_HOST_ARENA], p.bytes[HR_HOST_LOADER]);
        CHECK(st == (p.total <= p.available ? HR_OK : HR_ERR_OOM), "fits iff the total is within what is available");
    }
    /* a cap it does not fit: the answer is the largest batch whose own plan fits (checked by planning it and the next) */
    char cap[32];
    snprintf(cap, sizeof cap, "%zu", (size_t)(256 << 20) + (arena + loader + (size_t)eval) / 2);
    setenv("HR_HOST_MEMORY", cap, 1);
    hr_status st = hr_host_check(&job, &p);
    const char *at = strstr(hr_last_error(), "largest batch that fits: ");
    long long got = at ? atoll(at + 25) : -1;
    CHECK(st == HR_ERR_OOM && got > 0 && got < 200000, "half the room: %s", hr_last_error());
    for (long long b = got; b <= got + 1 && got > 0; b++) {
        hr_config_t c = cfg;
        c.batch = b;
        hr_session_t *t = hr_compile(m, &c);
        size_t need = hr_session_report(t)->arena_bytes + (size_t)2 * (size_t)b * 785 * 4 + (size_t)eval;
        CHECK((need <= p.available) == (b == got), "batch %lld needs %zu of %zu", b, need, p.available);
        hr_session_free(t);
    }
    hr_session_free(s);
    hr_model_free(m);
    unsetenv("HR_HOST_MEMORY");
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/hr_test_host_plan.%d", (int)getpid());
    mkdir(tmp, 0755);
    test_cgroups();
    test_host_plan();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    TEST_END();
}
