// Helpers shared by the benchmarks (the ones that run the bagpipe binary read its metrics file).
#ifndef BP_BENCH_UTIL_H
#define BP_BENCH_UTIL_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(last, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

// Seconds per iteration of the summary's time `key` (train_s, or a part of a trainer's breakdown
// such as compute_s), with the first iteration left out where the summary gives its part
// (first_iter_s, first_iter_<key>) and more than one ran: it connects and warms every cache (50 ms
// to 1 s against 8-25 ms later on a 2-core machine), which is no part of a steady rate.
static inline double bench_steady_s(const char *path, const char *key, int iters) {
    char first[96];
    snprintf(first, sizeof first, "first_iter_%s", strcmp(key, "train_s") == 0 ? "s" : key);
    const double v = bench_summary_num(path, key), f = bench_summary_num(path, first);
    return iters > 1 && !isnan(f) ? (v - f) / (iters - 1) : v / iters;
}

// The bench's scratch folder, made by bench_scratch and removed at exit whatever the path out (a
// failure, Ctrl-C or SIGTERM, also during a command that bench_system runs), unless
// bench_keep_scratch said that it is kept for its logs.
static char bench_scratch_dir[512];
static volatile sig_atomic_t bench_scratch_kept, bench_child; // bench_child: bench_system's command

// rm -rf by fork and exec, which a signal handler may call.
static void bench_scratch_rm(void) {
    if (!bench_scratch_dir[0] || bench_scratch_kept) return;
    const pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", bench_scratch_dir, (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid > 0) waitpid(pid, &st, 0);
}

static void bench_scratch_signal(int sig) {
    if (bench_child > 0) { // still writing into the folder: ended first (a signal to the bench alone)
        kill((pid_t)bench_child, SIGTERM);
        int st;
        waitpid((pid_t)bench_child, &st, 0);
    }
    bench_scratch_rm();
    signal(sig, SIG_DFL);
    raise(sig);
}

// mkdtemp of BASE/NAME-XXXXXX (BASE: $TMPDIR, else /tmp, when base is NULL); NULL after a message.
static inline const char *bench_scratch(const char *base, const char *name) {
    if (!base) base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(bench_scratch_dir, sizeof bench_scratch_dir, "%s/%s-XXXXXX", base, name);
    if (!mkdtemp(bench_scratch_dir)) {
        perror(bench_scratch_dir);
        bench_scratch_dir[0] = 0;
        return NULL;
    }
    atexit(bench_scratch_rm);
    signal(SIGINT, bench_scratch_signal);
    signal(SIGTERM, bench_scratch_signal);
    return bench_scratch_dir;
}

static inline void bench_keep_scratch(void) {
    bench_scratch_kept = 1;
    fprintf(stderr, "output kept in %s\n", bench_scratch_dir);
}

// system(cmd) (its status as system() gives it), except that the bench keeps its handlers: a
// Ctrl-C or SIGTERM ends the command, then removes the scratch folder and ends the bench by that
// signal (system() ignores SIGINT in the caller, which then reported a failure and went on).  A
// command ended by SIGINT or SIGTERM alone ends the bench too, with 128 + the signal.
static inline int bench_system(const char *cmd) {
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    bench_child = pid;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return bench_child = 0, -1;
    bench_child = 0;
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    if (!sig && WIFEXITED(st) && WEXITSTATUS(st) > 128) sig = WEXITSTATUS(st) - 128; // through sh
    if (sig == SIGINT || sig == SIGTERM) exit(128 + sig);
    return st;
}

#endif
