// Helpers shared by the multi-rank tests (test_dist.c, test_bagpipe.c, test_modes.c).
#ifndef BP_TEST_DIST_UTIL_H
#define BP_TEST_DIST_UTIL_H

#include <stddef.h>
#include <stdint.h>

// Environment assignments for a job: the Open MPI settings of ENV-NOTES and LeakSanitizer
// suppressions for Open MPI's own allocations (they matter to sanitizer builds only and hide
// nothing of bagpipe's).  A static buffer; the suppressions file lives in the test's directory.
const char *dist_test_env(void);
// A small dataset: 4 dense features, tables of 40, 300 and 2000 rows, ids drawn with a
// power-law-ish skew (id = card * u^3), labels from a planted logistic model; 80/10/10 split.
// (seed, stream) select the random numbers.
int dist_test_dataset(const char *path, uint64_t n, uint64_t seed, uint64_t stream);
// The whole file, NUL-terminated (malloc'd; NULL when unreadable); *len its size.
char *dist_test_slurp(const char *path, size_t *len);
// 1 when DIR_A/name and DIR_B/name exist, are not empty and are byte-identical.
int dist_test_same_file(const char *dir_a, const char *dir_b, const char *name);

#endif
