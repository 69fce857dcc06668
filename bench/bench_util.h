// Helpers shared by the benchmarks (the ones that run the bagpipe binary read its metrics file).
#ifndef BP_BENCH_UTIL_H
#define BP_BENCH_UTIL_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// -h or --help anywhere in argv: prints "usage: PROG ARGS" and what the bench measures, returns 1
// (main then returns 0); else 0.  The arguments are positional and optional.
static inline int bench_help(int argc, char **argv, const char *args, const char *what) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            const char *prog = strrchr(argv[0], '/');
            printf("usage: %s %s\n%s\n", prog ? prog + 1 : argv[0], args, what);
            return 1;
        }
    return 0;
}

// Positional argument i as a number of at least min (def when it is absent); -1 after a message
// naming it when it is not one (atoi read "abc" as 0 and "10x" as 10, and the bench ran on them).
static inline double bench_num_arg(int argc, char **argv, int i, double def, double min, const char *name) {
    if (i >= argc) return def;
    char *end;
    errno = 0;
    const double v = strtod(argv[i], &end);
    if (errno || end == argv[i] || *end || !(v >= min)) {
        const char *prog = strrchr(argv[0], '/');
        fprintf(stderr, "%s: %s: expected a number of at least %g, got '%s' (see --help)\n", prog ? prog + 1 : argv[0],
                name, min, argv[i]);
        return -1;
    }
    return v;
}

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
