/* test_data.c — IDX loading against values read independently from the real
 * Fashion-MNIST files, every error path on generated bad files, synthetic data
 * statistics, the loader's order and resume semantics, and OOM injection. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "data/data.h"

/* Read from the files with Python's gzip + struct, not with this code. */
#define FM_MEAN 0.2860
#define FM_STD 0.3530
static const int fm_train_first10[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
#define FM_TRAIN_IMG0_SUM 76247     /* raw pixel sum of train image 0 */
#define FM_TRAIN_LAST_SUM 16684     /* ... of train image 59999 */
#define FM_TEST_IMG0_SUM 33456      /* ... of t10k image 0 */
#define FM_TRAIN_IMG0_PX406 217     /* row 14, column 14 */
#define FM_TRAIN_IMG0_PX417 255
#define FM_TRAIN_NORM_MEAN 0.000115006 /* of all 47040000 normalised train pixels */
#define FM_TRAIN_NORM_STD 1.00006868

static char tmp[256];

static const char *tpath(const char *name) {
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp, name);
    return b;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = (unsigned char)v;
}

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

static void write_gz(const char *path, const void *buf, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g || gzwrite(g, buf, (unsigned)n) != (int)n) { perror(path); exit(2); }
    gzclose(g);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) { perror(path); exit(2); }
    fclose(f);
    return b;
}

static void expect_fail(hr_status st, hr_status want, const char *n1, const char *n2, const char *what) {
    const char *msg = hr_last_error();
    CHECK(st == want, "%s: got %s, want %s (%s)", what, hr_status_name(st), hr_status_name(want), msg);
    CHECK(strstr(msg, n1) != NULL, "%s: message lacks \"%s\": %s", what, n1, msg);
    if (n2) CHECK(strstr(msg, n2) != NULL, "%s: message lacks \"%s\": %s", what, n2, msg);
}

/* ---- a small IDX fixture: 100 images of 4x5 -------------------------------- */
enum { FN = 100, FH = 4, FW = 5, FIMG = 16 + FN * FH * FW, FLAB = 8 + FN };
static unsigned char fimg[FIMG], flab[FLAB];

/* Hashed, so that gzip cannot squeeze it to nothing. */
static unsigned char fpix(int i, int j) { return (unsigned char)(((uint32_t)i * 2654435761u + (uint32_t)j * 40503u) >> 13); }

static void make_fixture(void) {
    put_be32(fimg, 0x803), put_be32(fimg + 4, FN), put_be32(fimg + 8, FH), put_be32(fimg + 12, FW);
    for (int i = 0; i < FN; i++)
        for (int j = 0; j < FH * FW; j++) fimg[16 + i * FH * FW + j] = fpix(i, j);
    put_be32(flab, 0x801), put_be32(flab + 4, FN);
    for (int i = 0; i < FN; i++) flab[8 + i] = (unsigned char)(i * 7 % 10);
    write_raw(tpath("img"), fimg, FIMG);
    write_gz(tpath("img.gz"), fimg, FIMG);
    write_raw(tpath("lab"), flab, FLAB);
    write_gz(tpath("lab.gz"), flab, FLAB);
}

static void check_fixture(const hr_dataset *d, float mean, float std, const char *what) {
    CHECK(d->n == FN && d->c == 1 && d->h == FH && d->w == FW && d->nclasses == 10, "%s: shape", what);
    if (d->n != FN) return;
    int bad = 0;
    for (int i = 0; i < FN; i++) {
        bad += d->labels[i] != i * 7 % 10;
        for (int j = 0; j < FH * FW; j++) {
            double want = (fpix(i, j) / 255.0 - mean) / std;
            bad += fabs(d->images[i * FH * FW + j] - want) > 1e-5;
        }
    }
    CHECK(bad == 0, "%s: %d values differ from the fixture", what, bad);
}

static void test_idx_fixture(void) {
    hr_dataset d;
    const char *imgs[] = {"img", "img.gz", "img", "img.gz"}, *labs[] = {"lab", "lab.gz", "lab.gz", "lab"};
    for (int k = 0; k < 4; k++) {
        hr_status st = hr_idx_load(tpath(imgs[k]), tpath(labs[k]), 10, 0.5f, 0.25f, &d);
        CHECK(st == HR_OK, "load %s + %s: %s", imgs[k], labs[k], hr_last_error());
        check_fixture(&d, 0.5f, 0.25f, imgs[k]);
        hr_dataset_free(&d);
    }
    CHECK(d.images == NULL && d.labels == NULL && d.n == 0, "free zeroes the struct");
    hr_dataset_free(&d); /* twice is fine */

    expect_fail(hr_idx_load(tpath("img"), tpath("lab"), 0, 0.5f, 0.25f, &d), HR_ERR_INVALID_ARG, "nclasses", NULL,
                "nclasses 0");
    expect_fail(hr_idx_load(tpath("img"), tpath("lab"), 10, 0.5f, 0.0f, &d), HR_ERR_INVALID_ARG, "std", NULL, "std 0");
}

static void test_idx_bad_files(void) {
    hr_dataset d;
    unsigned char img[FIMG], lab[FLAB];
    const char *p;

    /* a .gz cut in half */
    size_t gzn;
    unsigned char *gz = read_all(tpath("img.gz"), &gzn);
    write_raw(p = tpath("half.gz"), gz, gzn / 2);
    free(gz);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "expected", "truncated gz");
    CHECK(d.images == NULL && d.n == 0, "a failed load leaves a zeroed dataset");

    /* the same file whole but for its 8-byte gzip trailer; and with its
     * checksum wrong: the data all arrives, only the trailer tells */
    gz = read_all(tpath("img.gz"), &gzn);
    write_raw(p = tpath("notrailer.gz"), gz, gzn - 8);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "trailer", "gzip trailer cut off");
    gz[gzn - 8] ^= 0x5a; /* the CRC-32's first byte */
    write_raw(p = tpath("badcrc.gz"), gz, gzn);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "incorrect data check", "gzip CRC wrong");
    /* cut inside the gzip header: not "empty" */
    write_raw(p = tpath("gzhead.gz"), gz, 5);
    free(gz);
    hr_status gst = hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d);
    CHECK(gst == HR_ERR_FORMAT && !strstr(hr_last_error(), "empty"), "a gzip header cut off is not called empty: %s",
          hr_last_error());
    /* more data than the header says */
    unsigned char *longer = malloc(FIMG + 3);
    memcpy(longer, fimg, FIMG);
    memset(longer + FIMG, 7, 3);
    write_gz(p = tpath("longer.gz"), longer, FIMG + 3);
    free(longer);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "goes on past", "data past the end");

    /* a raw file cut after 1000 pixel bytes */
    write_raw(p = tpath("cut"), fimg, 16 + 1000);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "expected 2000", "truncated raw");
    CHECK(strstr(hr_last_error(), "got 1000") != NULL, "truncated raw says how much came: %s", hr_last_error());

    /* a raw file cut inside its header */
    write_raw(p = tpath("cuthdr"), fimg, 10);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "header", "truncated header");

    /* wrong magic; a labels file given as images */
    memcpy(img, fimg, FIMG);
    put_be32(img, 0x804);
    write_raw(p = tpath("magic"), img, FIMG);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "0x00000804", "wrong magic");
    expect_fail(hr_idx_load(tpath("lab"), tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, tpath("lab"),
                "0x00000801", "labels as images");
    expect_fail(hr_idx_load(tpath("img"), tpath("img"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, tpath("img"),
                "0x00000803", "images as labels");

    /* a zero dimension */
    memcpy(img, fimg, FIMG);
    put_be32(img + 8, 0);
    write_raw(p = tpath("zerodim"), img, FIMG);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "dimension 1", "zero dim");

    /* 99 labels for 100 images */
    memcpy(lab, flab, FLAB);
    put_be32(lab + 4, FN - 1);
    write_raw(p = tpath("lab99"), lab, FLAB - 1);
    expect_fail(hr_idx_load(tpath("img"), p, 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "99 labels", "count mismatch");

    /* a header claiming a billion images (with as many labels): a truncation error, not an attempt to allocate 80 GB */
    memcpy(img, fimg, FIMG);
    put_be32(img + 4, 1000000000);
    write_raw(p = tpath("huge"), img, FIMG);
    memcpy(lab, flab, FLAB);
    put_be32(lab + 4, 1000000000);
    write_raw(tpath("hugelab"), lab, FLAB);
    expect_fail(hr_idx_load(p, tpath("hugelab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, tpath("hugelab"),
                "expected 1000000000", "huge header");

    /* label 10 at sample 37 when there are 10 classes */
    memcpy(lab, flab, FLAB);
    lab[8 + 37] = 10;
    write_gz(p = tpath("badlab.gz"), lab, FLAB);
    expect_fail(hr_idx_load(tpath("img"), p, 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "sample 37", "label range");
    CHECK(strstr(hr_last_error(), "label 10") != NULL, "names the bad label: %s", hr_last_error());

    /* empty files, raw and gzip'd */
    write_raw(p = tpath("empty"), "", 0);
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "empty", "empty raw");
    write_gz(p = tpath("empty.gz"), "", 0);
    expect_fail(hr_idx_load(tpath("img"), p, 10, 0.5f, 0.25f, &d), HR_ERR_FORMAT, p, "empty", "empty gz");

    /* missing files */
    p = tpath("no-such-file");
    expect_fail(hr_idx_load(p, tpath("lab"), 10, 0.5f, 0.25f, &d), HR_ERR_IO, p, "No such file", "missing images");
    expect_fail(hr_idx_load(tpath("img"), p, 10, 0.5f, 0.25f, &d), HR_ERR_IO, p, NULL, "missing labels");
}

static void test_fashion_folder(void) {
    hr_dataset tr, te;
    const char *dir = tpath("fm");
    mkdir(dir, 0755);
    /* a mix of raw and gzip'd files, as different mirrors ship them */
    write_gz(tpath("fm/train-images-idx3-ubyte.gz"), fimg, FIMG);
    write_raw(tpath("fm/train-labels-idx1-ubyte"), flab, FLAB);
    write_raw(tpath("fm/t10k-images-idx3-ubyte"), fimg, FIMG);
    hr_status st = hr_fashion_load(dir, &tr, &te);
    expect_fail(st, HR_ERR_IO, "t10k-labels-idx1-ubyte", "dataset-fashion-mnist", "folder lacks a file");
    write_gz(tpath("fm/t10k-labels-idx1-ubyte.gz"), flab, FLAB);
    st = hr_fashion_load(dir, &tr, &te);
    CHECK(st == HR_OK, "fixture folder: %s", hr_last_error());
    check_fixture(&tr, FM_MEAN, FM_STD, "fixture train");
    check_fixture(&te, FM_MEAN, FM_STD, "fixture test");
    hr_dataset_free(&tr);
    hr_dataset_free(&te);

    const char *none = tpath("no-such-folder");
    expect_fail(hr_fashion_load(none, &tr, &te), HR_ERR_IO, none, "dataset-fashion-mnist", "missing folder");
    CHECK(strstr(hr_last_error(), "--data") != NULL, "the hint names --data: %s", hr_last_error());
}

/* The headers alone: the shape and the bytes a load will hold, for files that
 * load and for one whose header claims a billion images it does not have. */
static void test_idx_peek(void) {
    hr_idx_info in;
    const size_t bytes = (size_t)FN * FH * FW * 4 + FN * 4;
    const char *imgs[] = {"img", "img.gz"}, *labs[] = {"lab.gz", "lab"};
    for (int k = 0; k < 2; k++) {
        CHECK(hr_idx_peek(tpath(imgs[k]), tpath(labs[k]), &in) == HR_OK, "peek %s: %s", imgs[k], hr_last_error());
        CHECK(in.n == FN && in.h == FH && in.w == FW && in.bytes == bytes && in.peak_bytes == bytes + (1 << 20),
              "peek %s: n %lld, %dx%d, %zu bytes", imgs[k], (long long)in.n, in.h, in.w, in.bytes);
    }
    hr_dataset d;
    CHECK(hr_idx_load(tpath("img"), tpath("lab"), 10, 0.5f, 0.25f, &d) == HR_OK && hr_dataset_host_bytes(&d) == bytes,
          "the load holds what the peek said");
    hr_dataset_free(&d);
    /* the "huge" pair of test_idx_bad_files: the peek believes the header, the plan refuses 84 GB before any read */
    CHECK(hr_idx_peek(tpath("huge"), tpath("hugelab"), &in) == HR_OK && in.n == 1000000000 &&
              in.bytes == (size_t)1000000000 * (FH * FW + 1) * 4, "peek at a header that claims 10^9 images");
    expect_fail(hr_idx_peek(tpath("magic"), tpath("lab"), &in), HR_ERR_FORMAT, "0x00000804", NULL, "peek: wrong magic");
    CHECK(in.n == 0 && in.bytes == 0, "a failed peek leaves a zeroed info");
    expect_fail(hr_idx_peek(tpath("img"), tpath("lab99"), &in), HR_ERR_FORMAT, "99 labels", NULL, "peek: count mismatch");
    expect_fail(hr_idx_peek(tpath("cuthdr"), tpath("lab"), &in), HR_ERR_FORMAT, "header", NULL, "peek: cut header");
    expect_fail(hr_idx_peek(tpath("no-such-file"), tpath("lab"), &in), HR_ERR_IO, "no-such-file", NULL, "peek: missing");
    hr_idx_info tr, te;
    CHECK(hr_fashion_peek(tpath("fm"), &tr, &te) == HR_OK && tr.n == FN && te.n == FN && tr.bytes == bytes,
          "peek the fixture folder: %s", hr_last_error());
    CHECK(hr_fashion_peek(tpath("fm"), NULL, &te) == HR_OK && te.n == FN, "peek its test set alone");
    expect_fail(hr_fashion_peek(tpath("no-such-folder"), &tr, &te), HR_ERR_IO, "no-such-folder", NULL, "peek: no folder");
}

static long raw_sum(const float *img, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += lround((img[i] * FM_STD + FM_MEAN) * 255.0);
    return s;
}

static void test_real_fashion(void) {
    struct stat sb;
    if (stat(HR_FASHION_DIR, &sb) != 0) {
        printf("note: %s is absent (install dataset-fashion-mnist): real-data checks skipped\n", HR_FASHION_DIR);
        return;
    }
    hr_dataset tr, te;
    hr_status st = hr_fashion_load(NULL, &tr, &te);
    CHECK(st == HR_OK, "hr_fashion_load: %s", hr_last_error());
    if (st != HR_OK) return;
    CHECK(tr.n == 60000 && tr.c == 1 && tr.h == 28 && tr.w == 28 && tr.nclasses == 10, "train shape");
    CHECK(te.n == 10000 && te.c == 1 && te.h == 28 && te.w == 28 && te.nclasses == 10, "test shape");
    for (int i = 0; i < 10; i++) CHECK(tr.labels[i] == fm_train_first10[i], "train label %d", i);
    CHECK(tr.labels[59999] == 5 && te.labels[0] == 9 && te.labels[9999] == 5, "last / test labels");
    {   /* the test set alone (what eval reads) is the same test set */
        hr_dataset only;
        CHECK(hr_fashion_load(NULL, NULL, &only) == HR_OK, "test set alone: %s", hr_last_error());
        CHECK(only.n == 10000 && only.labels[0] == 9 && only.labels[9999] == 5 &&
                  memcmp(only.images, te.images, sizeof(float) * 784) == 0,
              "the test set alone differs from the one loaded with the training set");
        hr_dataset_free(&only);
    }
    int64_t cnt[2][10] = {{0}};
    for (int64_t i = 0; i < tr.n; i++) cnt[0][tr.labels[i]]++;
    for (int64_t i = 0; i < te.n; i++) cnt[1][te.labels[i]]++;
    for (int c = 0; c < 10; c++)
        CHECK(cnt[0][c] == 6000 && cnt[1][c] == 1000, "class %d: %lld train, %lld test", c, (long long)cnt[0][c],
              (long long)cnt[1][c]);
    CHECK(raw_sum(tr.images, 784) == FM_TRAIN_IMG0_SUM, "train image 0 sum %ld", raw_sum(tr.images, 784));
    CHECK(raw_sum(tr.images + 59999 * 784, 784) == FM_TRAIN_LAST_SUM, "train image 59999 sum");
    CHECK(raw_sum(te.images, 784) == FM_TEST_IMG0_SUM, "test image 0 sum");
    CHECK_CLOSE(tr.images[406], (FM_TRAIN_IMG0_PX406 / 255.0 - FM_MEAN) / FM_STD, 1e-5, 0, "pixel 406");
    CHECK_CLOSE(tr.images[417], (FM_TRAIN_IMG0_PX417 / 255.0 - FM_MEAN) / FM_STD, 1e-5, 0, "pixel 417");
    CHECK_CLOSE(tr.images[0], (0 - FM_MEAN) / FM_STD, 1e-5, 0, "pixel 0");
    double s = 0, ss = 0;
    int64_t np = tr.n * 784;
    for (int64_t i = 0; i < np; i++) s += tr.images[i], ss += (double)tr.images[i] * tr.images[i];
    double mean = s / np;
    CHECK_CLOSE(mean, FM_TRAIN_NORM_MEAN, 2e-6, 0, "normalised train mean");
    CHECK_CLOSE(sqrt(ss / np - mean * mean), FM_TRAIN_NORM_STD, 0, 2e-6, "normalised train std");

    /* the loader over the real set: 468 full batches of 128, each sample at most once */
    hr_loader *l = hr_loader_new(&tr, 128, true, true, 42);
    CHECK(l && hr_loader_batches_per_epoch(l) == 468, "real loader: %s", hr_last_error());
    if (l && hr_loader_start_epoch(l, 0, 0) == HR_OK) {
        const float *x;
        const int32_t *y;
        int64_t n, total = 0, batches = 0;
        while (hr_loader_next(l, &x, &y, &n) == HR_OK && n > 0) total += n, batches++;
        CHECK(batches == 468 && total == 468 * 128, "real epoch: %lld batches, %lld samples", (long long)batches,
              (long long)total);
    }
    hr_loader_free(l);

    /* the real .gz cut in half */
    size_t gzn;
    unsigned char *gz = read_all(HR_FASHION_DIR "/train-images-idx3-ubyte.gz", &gzn);
    if (gz) {
        const char *p = tpath("fm-half.gz");
        hr_dataset half;
        write_raw(p, gz, gzn / 2);
        free(gz);
        expect_fail(hr_idx_load(p, HR_FASHION_DIR "/train-labels-idx1-ubyte.gz", 10, 0.286f, 0.353f, &half),
                    HR_ERR_FORMAT, p, "expected 47040000", "real truncated gz");
        unlink(p);
    }
    hr_dataset_free(&tr);
    hr_dataset_free(&te);
}

/* ---- synthetic data -------------------------------------------------------- */
/* Written by an independent Python implementation of the spec in data.h and
 * synthetic.c (splitmix64 keys, xoshiro256**, Box-Muller, rejection for the
 * labels), not by this code: sample i of (seed, shape, classes). */
static const struct {
    uint64_t seed;
    int64_t i;
    int per, classes, label;
    float x[5];
} synth_ref[] = {
    {1234, 0, 5, 7, 0, {-0x1.2c1f02p-2f, -0x1.658adap+0f, -0x1.24844ep-7f, 0x1.1c7ca4p-1f, -0x1.5d70e4p-1f}},
    {1234, 19999, 5, 7, 6, {0x1.c1a382p+0f, 0x1.8322e6p-4f, -0x1.699196p+0f, -0x1.0412f6p-1f, -0x1.14dd1ep+0f}},
    {7, 999999999999LL, 3, 10, 6, {0x1.baea1p-3f, -0x1.b4ce32p-2f, 0x1.3c16d6p-3f}},
};

static long rss_kib(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    if (f) fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_synthetic(void) {
    hr_dataset a, b, c;
    enum { N = 20000, W = 5, T = N * W };
    static float xa[T], xb[T], xc[T], one[W];
    static int32_t ya[N], yb[N], yc[N];
    hr_fault_fail_at(0);
    CHECK(hr_synthetic_make(N, 1, 1, W, 7, 1234, &a) == HR_OK, "%s", hr_last_error());
    CHECK(hr_fault_fail_at(0) == 0 && a.images == NULL && a.labels == NULL && a.synthetic && a.n == N,
          "a synthetic set allocates nothing and holds no arrays");
    CHECK(hr_dataset_host_bytes(&a) == 0, "a synthetic set holds no bytes");
    CHECK(hr_synthetic_make(N, 1, 1, W, 7, 1234, &b) == HR_OK, "%s", hr_last_error());
    CHECK(hr_synthetic_make(N, 1, 1, W, 7, 1235, &c) == HR_OK, "%s", hr_last_error());
    CHECK(hr_dataset_read(&a, 0, N, xa, ya) == HR_OK && hr_dataset_read(&b, 0, N, xb, yb) == HR_OK &&
              hr_dataset_read(&c, 0, N, xc, yc) == HR_OK, "read: %s", hr_last_error());
    CHECK(memcmp(xa, xb, sizeof xa) == 0 && memcmp(ya, yb, sizeof ya) == 0, "same seed, same data");
    CHECK(memcmp(xa, xc, sizeof xa) != 0 && memcmp(ya, yc, sizeof ya) != 0, "another seed, other data");

    /* the reference's bytes, whether read alone, in a range or backwards */
    for (size_t k = 0; k < sizeof synth_ref / sizeof *synth_ref; k++) {
        hr_dataset r;
        float x[5] = {0};
        int32_t y = -1;
        hr_synthetic_make(synth_ref[k].i + 1, 1, 1, synth_ref[k].per, synth_ref[k].classes, synth_ref[k].seed, &r);
        CHECK(hr_dataset_sample(&r, synth_ref[k].i, x, &y) == HR_OK, "sample: %s", hr_last_error());
        CHECK(memcmp(x, synth_ref[k].x, sizeof(float) * (size_t)synth_ref[k].per) == 0 && y == synth_ref[k].label,
              "seed %llu sample %lld differs from the Python reference: %a %a ... label %d",
              (unsigned long long)synth_ref[k].seed, (long long)synth_ref[k].i, x[0], x[1], y);
    }
    int bad = 0;
    for (int64_t i = N - 1; i >= 0; i -= 7) {
        int32_t y;
        hr_dataset_sample(&a, i, one, &y);
        bad += memcmp(one, xa + i * W, sizeof one) != 0 || y != ya[i];
    }
    CHECK(bad == 0, "%d samples read alone (backwards) differ from the same samples read as a range", bad);
    CHECK(hr_dataset_read(&a, 123, 77, xb, yb) == HR_OK && memcmp(xb, xa + 123 * W, sizeof(float) * 77 * W) == 0 &&
              memcmp(yb, ya + 123, 4 * 77) == 0, "a range from the middle");
    expect_fail(hr_dataset_sample(&a, N, one, NULL), HR_ERR_INVALID_ARG, "sample 20000", NULL, "sample past the end");
    expect_fail(hr_dataset_read(&a, N - 2, 3, xb, NULL), HR_ERR_INVALID_ARG, "20000", NULL, "range past the end");

    /* Moments and the N(0,1) mass within 1 and 2 sigma; tolerances are ~4 standard errors. */
    double s = 0, ss = 0, sxy = 0;
    int in1 = 0, in2 = 0;
    for (int i = 0; i < T; i++) {
        double v = xa[i];
        s += v, ss += v * v, in1 += fabs(v) < 1, in2 += fabs(v) < 2;
    }
    CHECK_CLOSE(s / T, 0.0, 0.013, 0, "mean");
    CHECK_CLOSE(sqrt(ss / T - (s / T) * (s / T)), 1.0, 0.009, 0, "std");
    CHECK_CLOSE((double)in1 / T, 0.682689, 0.006, 0, "P(|x|<1)");
    CHECK_CLOSE((double)in2 / T, 0.954500, 0.003, 0, "P(|x|<2)");
    /* neighbouring samples are independent: their keys share nothing (sd of the correlation 0.007) */
    for (int i = 0; i + 1 < N; i++) sxy += (double)xa[i * W] * xa[(i + 1) * W];
    CHECK_CLOSE(sxy / (N - 1), 0.0, 0.03, 0, "correlation of sample i's and i+1's first value");
    /* the labels: in range, each class ~N/7 (sd 49), and a chi-square over 6 degrees of freedom below 22.5 (p = 0.001) */
    int cnt[7] = {0}, out = 0;
    for (int i = 0; i < N; i++) {
        if (ya[i] < 0 || ya[i] >= 7) out++;
        else cnt[ya[i]]++;
    }
    CHECK(out == 0, "%d labels out of range", out);
    double chi2 = 0;
    for (int k = 0; k < 7; k++) {
        CHECK(fabs(cnt[k] - N / 7.0) < 200, "label %d: %d times, expected about %.0f", k, cnt[k], N / 7.0);
        chi2 += (cnt[k] - N / 7.0) * (cnt[k] - N / 7.0) / (N / 7.0);
    }
    CHECK(chi2 < 22.46, "labels' chi-square %.2f over 6 degrees of freedom", chi2);
    /* the labels do not depend on the shape */
    hr_synthetic_make(N, 3, 2, 2, 7, 1234, &b);
    hr_dataset_read(&b, 0, 100, xb, yb);
    CHECK(memcmp(ya, yb, 4 * 100) == 0, "another shape, the same labels");
    hr_dataset_free(&a);
    hr_dataset_free(&b);
    hr_dataset_free(&c);

    CHECK(hr_synthetic_make(3, 1, 1, 3, 2, 5, &a) == HR_OK && hr_dataset_read(&a, 0, 3, xa, ya) == HR_OK &&
              isfinite(xa[2]) && isfinite(xa[8]), "odd count");
    hr_dataset_free(&a);
    expect_fail(hr_synthetic_make(0, 1, 1, 1, 2, 5, &a), HR_ERR_INVALID_ARG, "n=0", NULL, "n 0");
    expect_fail(hr_synthetic_make(1LL << 40, 1 << 20, 1 << 20, 1, 2, 5, &a), HR_ERR_INVALID_ARG, "overflow", NULL,
                "overflow");
}

/* Runs one epoch of a loader over a synthetic set of n samples (n small), maps
 * each row back to its sample by its first value, and checks each row is that
 * sample's bytes and label. order[] gets the indices; returns the rows seen. */
static int64_t synth_epoch(hr_loader *l, const hr_dataset *d, int64_t epoch, const float *all, int64_t *order) {
    int64_t per = (int64_t)d->c * d->h * d->w, k = 0, n;
    const float *x;
    const int32_t *y;
    int bad = 0;
    hr_loader_start_epoch(l, epoch, 0);
    while (hr_loader_next(l, &x, &y, &n) == HR_OK && n > 0)
        for (int64_t i = 0; i < n; i++, k++) {
            int64_t j = 0;
            while (j < d->n && all[j * per] != x[i * per]) j++;
            float want[16];
            int32_t wl = -1;
            if (j < d->n) hr_dataset_sample(d, j, want, &wl);
            bad += j == d->n || memcmp(want, x + i * per, sizeof(float) * (size_t)per) != 0 || wl != y[i];
            order[k] = j;
        }
    CHECK(bad == 0, "%d rows are not their sample's bytes", bad);
    return k;
}

static bool a_permutation(const int64_t *order, int64_t n) {
    char seen[1000] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n || seen[order[i]]) return false;
        seen[order[i]] = 1;
    }
    return true;
}

static void test_synthetic_loader(void) {
    static float all[1000 * 6];
    static int64_t o0[1000], o1[1000], o[1000];
    /* sizes around the Feistel ranges' edges: 4^k - 1, 4^k, 4^k + 1, and others */
    const int64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 103, 1000};
    for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        int64_t n = sizes[t];
        hr_dataset d;
        hr_synthetic_make(n, 1, 2, 3, 5, 77 + (uint64_t)t, &d);
        hr_dataset_read(&d, 0, n, all, NULL);
        hr_loader *l = hr_loader_new(&d, 7, true, false, 99);
        CHECK(l != NULL, "loader over a synthetic set: %s", hr_last_error());
        if (!l) continue;
        int64_t k0 = synth_epoch(l, &d, 0, all, o0), k1 = synth_epoch(l, &d, 1, all, o1);
        CHECK(k0 == n && a_permutation(o0, n) && k1 == n && a_permutation(o1, n), "n=%lld: every sample once an epoch",
              (long long)n);
        if (n >= 5) CHECK(memcmp(o0, o1, sizeof(int64_t) * (size_t)n) != 0, "n=%lld: epochs differ", (long long)n);
        hr_loader_free(l);
        /* another batch size, a fresh loader: the same order (seed, epoch) and the same bytes */
        l = hr_loader_new(&d, 64, true, false, 99);
        synth_epoch(l, &d, 1, all, o);
        CHECK(memcmp(o, o1, sizeof(int64_t) * (size_t)n) == 0, "n=%lld: the order is the batch size's business",
              (long long)n);
        hr_loader_free(l);
        l = hr_loader_new(&d, 3, false, false, 99);
        synth_epoch(l, &d, 4, all, o);
        bool ident = true;
        for (int64_t i = 0; i < n; i++) ident = ident && o[i] == i;
        CHECK(ident, "n=%lld: unshuffled, the order is 0..n-1", (long long)n);
        hr_loader_free(l);
    }
    /* resume mid-epoch: the rest equals the uninterrupted epoch's */
    hr_dataset d;
    hr_synthetic_make(103, 1, 2, 3, 5, 3, &d);
    hr_dataset_read(&d, 0, 103, all, NULL);
    hr_loader *l = hr_loader_new(&d, 10, true, true, 5);
    synth_epoch(l, &d, 2, all, o0);
    hr_loader_start_epoch(l, 2, 4);
    const float *x;
    const int32_t *y;
    int64_t n;
    CHECK(hr_loader_next(l, &x, &y, &n) == HR_OK && n == 10, "resumed batch");
    float want[6];
    hr_dataset_sample(&d, o0[40], want, NULL);
    CHECK(memcmp(x, want, sizeof want) == 0, "batch 4 resumed is batch 4 of the whole epoch");
    hr_loader_free(l);
}

/* A set of 10^12 samples: made, a batch loaded from its end, freed, and the
 * memory it took is the loader's two slots. */
static void test_huge_synthetic(void) {
    hr_dataset d;
    long rss0 = rss_kib();
    hr_fault_fail_at(0);
    CHECK(hr_synthetic_make(1000000000000LL, 1, 28, 28, 10, 7, &d) == HR_OK, "10^12 samples: %s", hr_last_error());
    CHECK(hr_fault_fail_at(0) == 0, "10^12 samples made without an allocation");
    CHECK(hr_loader_bytes(d.n, 784, 1, true, 4) == 2 * 4 * (784 + 1) * 4, "its loader's bytes: two slots of 4 samples");
    CHECK(hr_loader_bytes(d.n, 784, 1, false, 4) == (size_t)2 * 4 * 785 * 4 + 8000000000000ULL,
          "held, it would need an order of 8 TB");
    CHECK(hr_loader_bytes(INT64_MAX, INT64_MAX / 2, 1, true, INT64_MAX) == SIZE_MAX &&
              hr_loader_bytes(10, INT64_MAX, 1, true, 1) == SIZE_MAX && hr_loader_bytes(10, 5, INT64_MAX, true, 1) == SIZE_MAX, "overflow: SIZE_MAX");
    hr_loader *l = hr_loader_new(&d, 4, true, false, 1);
    CHECK(l != NULL, "a loader over 10^12 samples: %s", hr_last_error());
    CHECK(hr_fault_fail_at(0) == 5, "the loader allocates itself and two slots, no order");
    if (l) {
        const float *x;
        const int32_t *y;
        int64_t n, last = hr_loader_batches_per_epoch(l) - 1;
        CHECK(last == 250000000000LL - 1, "2.5e11 batches");
        float first[4 * 784];
        hr_loader_start_epoch(l, 0, 0);
        CHECK(hr_loader_next(l, &x, &y, &n) == HR_OK && n == 4, "first batch");
        memcpy(first, x, sizeof first);
        hr_loader_start_epoch(l, 3, last);
        CHECK(hr_loader_next(l, &x, &y, &n) == HR_OK && n == 4, "the last batch of epoch 3");
        int bad = 0;
        for (int i = 0; i < 4 * 784; i++) bad += !isfinite(x[i]) || fabsf(x[i]) > 8;
        for (int i = 0; i < 4; i++) bad += y[i] < 0 || y[i] >= 10;
        CHECK(bad == 0 && memcmp(first, x, sizeof first) != 0, "the last batch: %d bad values", bad);
        hr_loader_start_epoch(l, 0, 0);
        CHECK(hr_loader_next(l, &x, &y, &n) == HR_OK && memcmp(first, x, sizeof first) == 0, "epoch 0 again");
    }
    hr_loader_free(l);
    /* unshuffled, batch b is samples 4b..4b+3, made where they are asked for */
    l = hr_loader_new(&d, 4, false, false, 1);
    if (l) {
        const float *x;
        const int32_t *y;
        int64_t n;
        float want[4 * 784];
        int32_t wl[4];
        hr_loader_start_epoch(l, 0, 123456789012LL);
        hr_loader_next(l, &x, &y, &n);
        CHECK(hr_dataset_read(&d, 4 * 123456789012LL, 4, want, wl) == HR_OK && memcmp(want, x, sizeof want) == 0 &&
                  memcmp(wl, y, sizeof wl) == 0, "batch 123456789012 is samples 493827156048..51");
    }
    hr_loader_free(l);
    hr_dataset_free(&d);
    long grew = rss_kib() - rss0;
    CHECK(grew < 4096, "10^12 synthetic samples cost %ld KiB of resident memory", grew);
}

/* ---- the loader ------------------------------------------------------------ */
enum { LN = 103, LS = 6 }; /* samples, floats per sample */
static float limg[LN * LS];
static int32_t llab[LN];
static const hr_dataset ld = {.n = LN, .c = 1, .h = 2, .w = 3, .images = limg, .labels = llab, .nclasses = LN};

/* Runs an epoch from first_batch; order[] gets the sample indices in order,
 * sizes[] the batch sizes. Returns the number of batches, checking that each
 * batch's rows are the samples its labels name. */
static int run_epoch(hr_loader *l, int64_t epoch, int64_t first, int64_t *order, int64_t *sizes) {
    CHECK(hr_loader_start_epoch(l, epoch, first) == HR_OK, "start_epoch: %s", hr_last_error());
    const float *x;
    const int32_t *y;
    int64_t n, k = 0;
    int nb = 0, bad = 0;
    while (hr_loader_next(l, &x, &y, &n) == HR_OK && n > 0) {
        for (int64_t i = 0; i < n; i++) {
            order[k++] = y[i];
            for (int j = 0; j < LS; j++) bad += x[i * LS + j] != (float)(y[i] * LS + j);
        }
        sizes[nb++] = n;
    }
    CHECK(bad == 0, "rows and labels disagree in %d places", bad);
    CHECK(hr_loader_next(l, &x, &y, &n) == HR_OK && n == 0 && x == NULL, "stays at the end");
    return nb;
}

static bool once_each(const int64_t *order, int64_t n, int64_t want_distinct) {
    char seen[LN] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= LN || seen[order[i]]) return false;
        seen[order[i]] = 1;
    }
    return n == want_distinct;
}

static void test_loader(void) {
    for (int i = 0; i < LN * LS; i++) limg[i] = (float)i;
    for (int i = 0; i < LN; i++) llab[i] = i;
    int64_t o0[LN], o1[LN], o[LN], s0[LN], s[LN];

    hr_loader *l = hr_loader_new(&ld, 10, true, false, 99);
    CHECK(l && hr_loader_batches_per_epoch(l) == 11, "11 batches of 10 for 103");
    if (!l) return;
    const float *x;
    const int32_t *y;
    int64_t n;
    expect_fail(hr_loader_next(l, &x, &y, &n), HR_ERR_INVALID_ARG, "start_epoch", NULL, "next before an epoch");
    int nb = run_epoch(l, 0, 0, o0, s0);
    CHECK(nb == 11 && s0[0] == 10 && s0[9] == 10 && s0[10] == 3, "batch sizes 10 x 10 + 3");
    CHECK(once_each(o0, LN, LN), "epoch 0: every sample once");
    run_epoch(l, 1, 0, o1, s);
    CHECK(once_each(o1, LN, LN), "epoch 1: every sample once");
    CHECK(memcmp(o0, o1, sizeof o0) != 0, "epochs 0 and 1 differ");
    run_epoch(l, 0, 0, o, s);
    CHECK(memcmp(o0, o, sizeof o0) == 0, "epoch 0 again gives the same order");

    /* resume: batches 4.. equal the uninterrupted epoch's, for odd and even skips */
    for (int first = 3; first <= 4; first++) {
        nb = run_epoch(l, 1, first, o, s);
        CHECK(nb == 11 - first && memcmp(o, o1 + first * 10, sizeof(int64_t) * (LN - first * 10)) == 0,
              "skip %d batches", first);
    }
    /* abandon an epoch halfway, then restart it */
    hr_loader_start_epoch(l, 1, 0);
    for (int i = 0; i < 3; i++) hr_loader_next(l, &x, &y, &n);
    run_epoch(l, 1, 0, o, s);
    CHECK(memcmp(o, o1, sizeof o1) == 0, "a restarted epoch is the same");
    CHECK(hr_loader_start_epoch(l, 1, 11) == HR_OK && hr_loader_next(l, &x, &y, &n) == HR_OK && n == 0,
          "first_batch = batches per epoch: an empty rest");
    expect_fail(hr_loader_start_epoch(l, 1, 12), HR_ERR_INVALID_ARG, "first batch", NULL, "first_batch too big");
    expect_fail(hr_loader_start_epoch(l, -1, 0), HR_ERR_INVALID_ARG, "epoch", NULL, "negative epoch");
    hr_loader_free(l);

    /* a fresh loader with the same seed goes straight to epoch 1: no hidden state */
    l = hr_loader_new(&ld, 10, true, false, 99);
    run_epoch(l, 1, 0, o, s);
    CHECK(memcmp(o, o1, sizeof o1) == 0, "(seed, epoch) alone fixes the order");
    hr_loader_free(l);
    l = hr_loader_new(&ld, 10, true, false, 100);
    run_epoch(l, 0, 0, o, s);
    CHECK(memcmp(o, o0, sizeof o0) != 0, "another seed, another order");
    hr_loader_free(l);

    /* no shuffle: the file's order */
    l = hr_loader_new(&ld, 7, false, false, 99);
    nb = run_epoch(l, 5, 0, o, s);
    bool ident = nb == 15 && s[14] == 103 - 14 * 7;
    for (int i = 0; i < LN; i++) ident = ident && o[i] == i;
    CHECK(ident, "unshuffled order is 0..n-1");
    hr_loader_free(l);

    /* drop_last: 10 full batches, 3 samples left out, none twice */
    l = hr_loader_new(&ld, 10, true, true, 99);
    CHECK(hr_loader_batches_per_epoch(l) == 10, "drop_last: 10 batches");
    nb = run_epoch(l, 0, 0, o, s);
    CHECK(nb == 10 && s[9] == 10 && once_each(o, 100, 100), "drop_last epoch");
    CHECK(memcmp(o, o0, 100 * sizeof(int64_t)) == 0, "drop_last drops the tail of the same order");
    hr_loader_free(l);
    l = hr_loader_new(&ld, LN, true, true, 99);
    CHECK(l && run_epoch(l, 0, 0, o, s) == 1 && s[0] == LN, "batch = n with drop_last: one batch");
    hr_loader_free(l);

    /* bad batches; a batch larger than n without drop_last is one short batch, as in PyTorch */
    CHECK(hr_loader_new(&ld, 0, true, false, 1) == NULL, "batch 0");
    expect_fail(HR_ERR_INVALID_ARG, HR_ERR_INVALID_ARG, "batch 0", NULL, "batch 0 message");
    CHECK(hr_loader_new(&ld, -5, true, false, 1) == NULL, "batch -5");
    CHECK(hr_loader_new(&ld, LN + 1, true, true, 1) == NULL, "batch > n with drop_last");
    expect_fail(HR_ERR_INVALID_ARG, HR_ERR_INVALID_ARG, "drop_last", NULL, "batch > n message");
    l = hr_loader_new(&ld, LN + 1, true, false, 1);
    CHECK(l && run_epoch(l, 0, 0, o, s) == 1 && s[0] == LN && once_each(o, LN, LN), "batch > n: one batch of n");
    hr_loader_free(l);
    CHECK(hr_loader_new(NULL, 1, true, false, 1) == NULL, "NULL dataset");
    hr_loader_free(NULL);

    /* Fisher-Yates is uniform: 1200 epochs over 4 samples give each of the 24 orders ~50 times (sd 7) */
    static const hr_dataset d4 = {.n = 4, .c = 1, .h = 2, .w = 3, .images = limg, .labels = llab, .nclasses = 4};
    int hist[256] = {0};
    l = hr_loader_new(&d4, 4, true, false, 7);
    for (int e = 0; e < 1200 && l; e++) {
        hr_loader_start_epoch(l, e, 0);
        hr_loader_next(l, &x, &y, &n);
        hist[y[0] * 64 + y[1] * 16 + y[2] * 4 + y[3]]++;
    }
    hr_loader_free(l);
    int orders = 0, lo = 1200, hi = 0;
    for (int i = 0; i < 256; i++)
        if (hist[i]) orders++, lo = hist[i] < lo ? hist[i] : lo, hi = hist[i] > hi ? hist[i] : hi;
    CHECK(orders == 24 && lo >= 22 && hi <= 80, "permutations: %d seen, counts %d..%d", orders, lo, hi);
}

/* Fails the 1st, 2nd, ... allocation of load + loader + epoch until one run
 * makes no allocation fail; each failure must be a clean HR_ERR_OOM (valgrind
 * checks that nothing leaks). */
static void test_faults(void) {
    int injected = 0, k;
    for (k = 1; k < 1000; k++) {
        hr_fault_fail_at(k);
        hr_dataset d = {0}, tr = {0}, te = {0};
        hr_loader *l = NULL;
        hr_status st = hr_synthetic_make(50, 1, 2, 2, 3, 7, &d);
        if (st == HR_OK) st = hr_idx_load(tpath("img.gz"), tpath("lab"), 10, 0.5f, 0.25f, &tr);
        hr_dataset_free(&tr);
        if (st == HR_OK) st = hr_fashion_load(tpath("fm"), &tr, &te);
        /* hr_loader_new returns no status: its message tells an OOM */
        if (st == HR_OK && !(l = hr_loader_new(&d, 8, true, false, 1)))
            st = strstr(hr_last_error(), "could not allocate") ? HR_ERR_OOM : HR_ERR_INTERNAL;
        int64_t total = 0;
        if (l && (st = hr_loader_start_epoch(l, 0, 0)) == HR_OK) {
            const float *x;
            const int32_t *y;
            int64_t n;
            while ((st = hr_loader_next(l, &x, &y, &n)) == HR_OK && n > 0) total += n;
        }
        hr_loader_free(l);
        hr_dataset_free(&d);
        hr_dataset_free(&tr);
        hr_dataset_free(&te);
        int64_t made = hr_fault_fail_at(0);
        if (made < k) { /* nothing was failed: the whole run must have worked */
            CHECK(st == HR_OK && total == 50, "run without faults: %s", hr_last_error());
            break;
        }
        injected++;
        CHECK(st == HR_ERR_OOM, "allocation %d failed, got %s: %s", k, hr_status_name(st), hr_last_error());
    }
    CHECK(injected >= 8 && k < 1000, "%d allocations failed in turn", injected);
    printf("fault injection: %d allocations failed one at a time, each cleanly\n", injected);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/hr_test_data.%d", (int)getpid());
    mkdir(tmp, 0755);
    make_fixture();
    test_idx_fixture();
    test_idx_bad_files();
    test_fashion_folder();
    test_idx_peek();
    test_real_fashion();
    test_synthetic();
    test_synthetic_loader();
    test_huge_synthetic();
    test_loader();
    test_faults();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    TEST_END();
}
