// Helpers shared by the tests: the multi-rank ones (test_dist.c, test_bagpipe.c, test_modes.c) and a few
// others (files and outputs compared).
#ifndef BP_TEST_DIST_UTIL_H
#define BP_TEST_DIST_UTIL_H

#include <stddef.h>
#include <stdint.h>

// Environment assignments for a job: the Open MPI settings launch.h lists and LeakSanitizer
// suppressions for Open MPI's own allocations (they matter to sanitizer builds only and hide
// nothing of bagpipe's).  A static buffer; the suppressions file lives in the test's directory.
const char *dist_test_env(void);
// A small dataset: 4 dense features, tables of 40, 300 and 2000 rows, ids drawn with a
// power-law-ish skew (id = card * u^3), labels from a planted logistic model; 80/10/10 split.
// (seed, stream) select the random numbers.
int dist_test_dataset(const char *path, uint64_t n, uint64_t seed, uint64_t stream);
// The whole file, NUL-terminated (malloc'd; NULL when unreadable); *len its size.
char *dist_test_slurp(const char *path, size_t *len);
// The number just before `what` in the line of out that starts with `line` (-1 if absent).
long dist_test_num_before(const char *out, const char *line, const char *what);
// 1 when msg occurs in out exactly once (a message that each rank used to print).
int dist_test_said_once(const char *out, const char *msg);
// 1 when files a and b can be read and are byte-identical.
int dist_test_files_equal(const char *a, const char *b);
// 1 when DIR_A/name and DIR_B/name exist, are not empty and are byte-identical.
int dist_test_same_file(const char *dir_a, const char *dir_b, const char *name);
// Runs `bagpipe train MODEL ARGS --save test_path(dir) DATA` under the job environment with a
// 60-second timeout; returns the exit code, the output in *out (may be NULL; caller frees).
int dist_test_train(char **out, const char *model, const char *data, const char *dir, const char *args);
// In a TEST: trains (dist_test_train) and fails the test, with the output, unless it exits 0.
#define DIST_TRAIN_OK(model, data, dir, args)                                                   \
    do {                                                                                      \
        char *o_ = NULL;                                                                      \
        int rc_ = dist_test_train(&o_, model, data, dir, args);                               \
        if (rc_ != 0) {                                                                       \
            test_fail(__FILE__, __LINE__, "train %s exited %d:\n%s", args, rc_, o_ ? o_ : ""); \
            free(o_);                                                                         \
            return;                                                                           \
        }                                                                                     \
        free(o_);                                                                             \
    } while (0)
// In a TEST: the saved models in test_path(a) and test_path(b) are byte-identical.
#define DIST_SAME_MODEL(a, b)                                                                                \
    do {                                                                                                     \
        ASSERT_MSG(dist_test_same_file(test_path(a), test_path(b), "dense.bin"), "dense.bin of %s and %s differ", a, b); \
        ASSERT_MSG(dist_test_same_file(test_path(a), test_path(b), "emb.bin"), "emb.bin of %s and %s differ", a, b);     \
    } while (0)
// The number after "key": in the last summary line of a metrics file (NaN when absent).
double dist_test_summary_num(const char *path, const char *key);
// The string value of "key" in that line into buf (cap bytes); 0, or -1 when absent.
int dist_test_summary_str(const char *path, const char *key, char *buf, size_t cap);

#endif
