// A small test harness: TEST(name) { ... } registers itself; ASSERT_* record a failure with
// file:line and end the test.  The runner (tests/main.c) prints one line per test and closes with
// "N passed, N failed".  `build/test_bagpipe PATTERN` runs the tests whose name contains PATTERN.
#ifndef BP_TEST_H
#define BP_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int test_failed(void);
void test_skip(const char *why); // marks the current test skipped (call, then return)

#define TEST(name)                                                                  \
    static void test_##name(void);                                                  \
    __attribute__((constructor)) static void test_register_##name(void) {           \
        test_register(#name, __FILE__, test_##name);                                \
    }                                                                               \
    static void test_##name(void)

#define ASSERT_TRUE(c)                                                              \
    do {                                                                            \
        if (!(c)) {                                                                 \
            test_fail(__FILE__, __LINE__, "expected %s", #c);                       \
            return;                                                                 \
        }                                                                           \
    } while (0)
#define ASSERT_MSG(c, ...)                                                          \
    do {                                                                            \
        if (!(c)) {                                                                 \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                             \
            return;                                                                 \
        }                                                                           \
    } while (0)
#define ASSERT_EQ(a, b)                                                             \
    do {                                                                            \
        long long a_ = (long long)(a), b_ = (long long)(b);                         \
        if (a_ != b_) {                                                             \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); \
            return;                                                                 \
        }                                                                           \
    } while (0)
#define ASSERT_NEAR(a, b, tol)                                                      \
    do {                                                                            \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);              \
        if (!(fabs(a_ - b_) <= t_)) {                                               \
            test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, t_); \
            return;                                                                 \
        }                                                                           \
    } while (0)
#define ASSERT_STR_CONTAINS(hay, needle)                                            \
    do {                                                                            \
        const char *h_ = (hay), *n_ = (needle);                                     \
        if (!h_ || !strstr(h_, n_)) {                                               \
            test_fail(__FILE__, __LINE__, "expected '%s' in: %s", n_, h_ ? h_ : "(null)"); \
            return;                                                                 \
        }                                                                           \
    } while (0)
#define ASSERT_STR_EQ(got, want)                                                    \
    do {                                                                            \
        const char *g_ = (got), *w_ = (want);                                       \
        if (!g_ || strcmp(g_, w_) != 0) {                                           \
            test_fail(__FILE__, __LINE__, "%s: '%s', expected '%s'", #got, g_ ? g_ : "(null)", w_); \
            return;                                                                 \
        }                                                                           \
    } while (0)
// Fail-fast on a bagpipe return code, printing its message.
#define ASSERT_OK(expr)                                                             \
    do {                                                                            \
        int rc_ = (expr);                                                           \
        if (rc_ != 0) {                                                             \
            test_fail(__FILE__, __LINE__, "%s returned %d: %s", #expr, rc_, bp_errmsg(rc_)); \
            return;                                                                 \
        }                                                                           \
    } while (0)

// A fresh temporary directory for the current test (removed after it passes).
const char *test_tmpdir(void);
// Path of a file inside test_tmpdir() (static buffer rotation: up to 8 live results).
const char *test_path(const char *name);
// The bagpipe binary under test (BAGPIPE_BIN, default build/bagpipe).
const char *test_bin(void);
// Runs a shell command with a timeout (seconds); captures stdout+stderr (malloc'd, caller
// frees) into *out if out is non-NULL; returns the exit status (124 on timeout, -1 if it could
// not run).
int test_run(char **out, int timeout_s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
