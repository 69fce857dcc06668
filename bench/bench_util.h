// Helpers shared by the benchmarks that run the bagpipe binary and read its metrics file.
#ifndef BP_BENCH_UTIL_H
#define BP_BENCH_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The number after "key": in the last line of the metrics file at path that contains "summary"
// (NaN when absent).
static inline double bench_summary_num(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    char line[8192], last[8192] = "";
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"summary\"")) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(last, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

#endif
