/* check.h — the tests' tiny harness: CHECK counts passes and failures and
 * prints every failure with file:line; TEST_END prints the tally that
 * tests/run.sh adds up. A test binary exits non-zero when anything failed. */
#ifndef HR_CHECK_H
#define HR_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_pass, check_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            check_pass++;                                                  \
        } else {                                                           \
            check_fail++;                                                  \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, atol, rtol, ...)                                                  \
    do {                                                                                    \
        double ca_ = (double)(a), cb_ = (double)(b);                                        \
        if (fabs(ca_ - cb_) <= (atol) + (rtol)*fabs(cb_)) {                                 \
            check_pass++;                                                                   \
        } else {                                                                            \
            check_fail++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: %.9g vs %.9g: ", __FILE__, __LINE__, ca_, cb_);    \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, "\n");                                                          \
        }                                                                                   \
    } while (0)

#define TEST_END()                                                         \
    do {                                                                   \
        printf("RESULT %s %d %d\n", __FILE__, check_pass, check_fail);     \
        return check_fail ? 1 : 0;                                         \
    } while (0)

#endif
