/* isolated.h — runs a piece of a test in a child process, so that a crash in
 * the library is one failure here, not the end of the test binary. */
#ifndef HR_TEST_ISOLATED_H
#define HR_TEST_ISOLATED_H

#include "check.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* fn(arg) in a child; its checks must all pass, and it must not crash. */
static inline void isolated(const char *label, void (*fn)(void *), void *arg) {
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int f0 = check_fail;
        fn(arg);
        fflush(stdout), fflush(stderr);
        _exit(check_fail > f0 ? 1 : 0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    if (WIFSIGNALED(ws))
        CHECK(0, "%s: crashed (signal %d, %s)", label, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s: failed (above)", label);
}

#endif
