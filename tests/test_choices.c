/* test_choices.c — core/choices.c, the file of choices measured on this
 * machine (the CUDA backend keeps its timed convolution algorithms in one):
 * put, get, save and read back; a second writer's choices merged, ours
 * winning; every line that is not a choice skipped (garbage, a key too long,
 * a negative workspace, numbers out of range, a last line cut short, a NUL);
 * a folder that cannot be made is an error for the caller to ignore, and
 * nothing is written; every allocation failing in turn is NULL, false or
 * HR_ERR_OOM, never a crash. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/choices.h"

static char dir[] = "/tmp/hr_test_choices_XXXXXX";

static void write_file(const char *name, const char *text, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, n, f) == n, "writing %s", path);
    if (f) fclose(f);
}

static void test_roundtrip(void) {
    hr_choices *k = hr_choices_open(dir, "a.tsv");
    CHECK(k && hr_choices_count(k) == 0, "a missing file opens empty");
    int64_t v[3] = {7, -1, 4096}, got[3];
    CHECK(hr_choices_put(k, "precise graph F32 fwd n64", v), "put");
    int64_t w[3] = {1, 2, 0};
    CHECK(hr_choices_put(k, "fastest legacy F32 bwd_data n64", w), "put another");
    CHECK(hr_choices_get(k, "precise graph F32 fwd n64", got) && got[0] == 7 && got[1] == -1 && got[2] == 4096,
          "get what was put");
    CHECK(!hr_choices_get(k, "precise graph F32 fwd n65", got), "an unknown key");
    int64_t bad[3] = {1, 1, -5};
    CHECK(!hr_choices_put(k, "neg", bad), "a negative workspace is refused");
    CHECK(!hr_choices_put(k, "a\tb", v) && !hr_choices_put(k, "a\nb", v) && !hr_choices_put(k, "", v) &&
              !hr_choices_put(k, "#comment", v),
          "keys with a tab or newline, empty, or a comment's, are refused");
    char longkey[400];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK(!hr_choices_put(k, longkey, v), "a key of %zu bytes is refused", strlen(longkey));
    CHECK(hr_choices_save(k, "test") == HR_OK, "save: %s", hr_last_error());
    hr_choices_free(k);

    k = hr_choices_open(dir, "a.tsv");
    CHECK(k && hr_choices_count(k) == 2, "read back: %d choices", hr_choices_count(k));
    CHECK(hr_choices_get(k, "fastest legacy F32 bwd_data n64", got) && got[0] == 1 && got[1] == 2 && got[2] == 0,
          "read back the values");

    /* another run writes meanwhile: both kept, ours win where both have the key */
    hr_choices *other = hr_choices_open(dir, "a.tsv");
    int64_t o[3] = {99, 99, 99}, mine[3] = {3, 3, 3};
    CHECK(hr_choices_put(other, "from another run", o) && hr_choices_put(other, "precise graph F32 fwd n64", o),
          "put");
    CHECK(hr_choices_save(other, NULL) == HR_OK, "the other run saves");
    CHECK(hr_choices_put(k, "precise graph F32 fwd n64", mine) && hr_choices_save(k, "x") == HR_OK, "ours save");
    hr_choices_free(other);
    hr_choices_free(k);
    k = hr_choices_open(dir, "a.tsv");
    CHECK(hr_choices_count(k) == 3, "merged: %d choices", hr_choices_count(k));
    CHECK(hr_choices_get(k, "from another run", got) && got[0] == 99, "the other run's choice kept");
    CHECK(hr_choices_get(k, "precise graph F32 fwd n64", got) && got[0] == 3, "ours won: %lld", (long long)got[0]);
    hr_choices_free(k);
}

static void test_garbage(void) {
    static const char text[] = "# a comment\tnot a choice\t1\t2\t3\n"
                               "good one\t1\t2\t3\n"
                               "garbage\n"
                               "\t1\t2\t3\n"
                               "too few\t1\t2\n"
                               "too many\t1\t2\t3\t4\n"
                               "letters\t1\tx\t3\n"
                               "negative ws\t1\t2\t-3\n"
                               "huge\t1\t2\t99999999999999999999999\n"
                               "wraps to 1\t1\t2\t18446744073709551617\n" /* 2^64 + 1 */
                               "past int64\t9223372036854775808\t2\t3\n"
                               "space after\t1\t2\t3 \n"
                               "minus alone\t-\t2\t3\n"
                               "crlf\t1\t2\t3\r\n"
                               "good two\t-4\t0\t0\n"
                               "nul\0key\t1\t2\t3\n"
                               "good one\t9\t9\t9\n" /* a repeated key: the first stands */
                               "cut short\t1\t2\t3";
    write_file("g.tsv", text, sizeof text - 1);
    hr_choices *k = hr_choices_open(dir, "g.tsv");
    int64_t got[3];
    CHECK(k && hr_choices_count(k) == 2, "two good lines of many: %d", hr_choices_count(k));
    CHECK(hr_choices_get(k, "good one", got) && got[0] == 1 && got[2] == 3, "good one");
    CHECK(hr_choices_get(k, "good two", got) && got[0] == -4 && got[2] == 0, "good two");
    CHECK(!hr_choices_get(k, "cut short", got), "a last line without its newline is not read");
    hr_choices_free(k);

    char longline[700];
    memset(longline, 'a', 600);
    strcpy(longline + 600, "\t1\t2\t3\nok\t1\t1\t1\n");
    write_file("l.tsv", longline, strlen(longline));
    k = hr_choices_open(dir, "l.tsv");
    CHECK(k && hr_choices_count(k) == 1 && hr_choices_get(k, "ok", got), "a key past the limit skipped, the next read");
    hr_choices_free(k);
}

static void test_no_folder(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/file", dir);
    write_file("file", "x", 1);
    hr_choices *k = hr_choices_open(path, "c.tsv"); /* its folder is a file */
    int64_t v[3] = {1, 2, 3};
    CHECK(k && hr_choices_put(k, "key", v), "open and put");
    hr_status st = hr_choices_save(k, NULL);
    CHECK(st == HR_ERR_IO && strstr(hr_last_error(), path), "a folder that is a file: %s (%s)", hr_status_name(st),
          hr_last_error());
    hr_error_clear();
    hr_choices_free(k);
}

static void test_faults(void) {
    int64_t k = 1, allocs = 0;
    int failures = 0, bad = 0;
    for (; k < 1000; k++) {
        hr_fault_fail_at(k);
        hr_choices *c = hr_choices_open(dir, "a.tsv");
        int64_t v[3] = {5, 5, 5};
        bool ok = c && hr_choices_put(c, "fault key", v);
        hr_status st = ok ? hr_choices_save(c, "faults") : HR_OK;
        hr_choices_free(c);
        allocs = hr_fault_fail_at(0);
        if (allocs < k) break;
        failures++;
        bad += ok && st != HR_OK && st != HR_ERR_OOM;
        hr_error_clear();
    }
    printf("  faults: %d runs, each with one allocation failing, of %lld allocations\n", failures, (long long)allocs);
    CHECK(failures > 3 && bad == 0, "%d of %d failures were not OOM", bad, failures);
}

int main(void) {
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        TEST_END();
    }
    test_roundtrip();
    test_garbage();
    test_no_folder();
    test_faults();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleaning %s", dir);
    TEST_END();
}
