// Test runner: runs every registered test in registration order, each in a forked child so a
// crash or abort fails one test, not the run.  With arguments, only the tests that match one of
// them: "=NAME" matches that name exactly, any other argument a name that contains it.
//   test_bagpipe [FILTER...]
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
// A test's child leaves with _exit, which skips LeakSanitizer's exit-time check: run it here, so
// memory a test (or the library under it) leaks fails that test.
static int test_leaked(void) { return __lsan_do_recoverable_leak_check() != 0; }
#else
static int test_leaked(void) { return 0; }
#endif

typedef struct {
    const char *name, *file;
    test_fn fn;
} test_case;

static test_case *tests;
static int n_tests, cap_tests;
static int cur_failed, cur_skipped;
static char tmpdir[256];

void test_register(const char *name, const char *file, test_fn fn) {
    if (n_tests == cap_tests) {
        cap_tests = cap_tests ? 2 * cap_tests : 64;
        tests = realloc(tests, (size_t)cap_tests * sizeof *tests);
    }
    tests[n_tests++] = (test_case){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cur_failed = 1;
}

int test_failed(void) { return cur_failed; }

void test_skip(const char *why) {
    fprintf(stderr, "    SKIP: %s\n", why);
    cur_skipped = 1;
}

// The running test's directory as the runner sees it (shared memory), to name it after a timeout.
static char *shared_tmpdir;

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/bagpipe-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        if (shared_tmpdir) snprintf(shared_tmpdir, 512, "%s", tmpdir);
    }
    return tmpdir;
}

const char *test_path(const char *name) {
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", test_tmpdir(), name);
    return b;
}

const char *test_bin(void) {
    const char *b = getenv("BAGPIPE_BIN");
    return b && *b ? b : "build/bagpipe";
}

int test_run(char **out, int timeout_s, const char *fmt, ...) {
    char cmd[8192], full[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "timeout -k 5 %d sh -c '%s' 2>&1", timeout_s, cmd);
    // cmd must not contain single quotes; the tests build their own commands.
    BP_ASSERTF(!strchr(cmd, '\''), "test_run: no single quotes allowed: %s", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t len = 0, cap = 4096;
    char *buf = bp_xmalloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (cap - len < 2) buf = bp_xrealloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void rm_rf(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

static int test_selected(const char *name, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (f[0] == '=' ? !strcmp(name, f + 1) : strstr(name, f) != NULL) return 1;
    }
    return 0;
}

// The runner's watch over the test running in its own process group (current): past the timeout
// it is killed with everything of it still in that group; a Ctrl-C or SIGTERM of the runner ends
// the group too (out of the terminal's foreground group it gets neither).
static volatile sig_atomic_t current, timed_out;

static void on_alarm(int sig) { timed_out = 1; }

static void on_stop(int sig) {
    if (current > 0) kill(-(pid_t)current, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: %s [FILTER...]\n"
                   "Runs every test, or those whose name contains a FILTER (=NAME: that test alone), each in a\n"
                   "process of its own; prints one line per test and \"N passed, N failed\" last.\n"
                   "BAGPIPE_TEST_TIMEOUT=S fails a test that runs past S seconds (default 1500);\n"
                   "BAGPIPE_BIN names the bagpipe binary the tests run (default build/bagpipe).\n", argv[0]);
            return 0;
        }
    // A test that hangs (a peer process that never ends) fails after this many seconds instead of
    // holding up the whole run; the longest set limits of their own of 900 s (fuzz_short_run, which
    // compiles) and 1200 s (suite_quick_writes_every_table_and_plot, under sanitizers).
    const char *tv = getenv("BAGPIPE_TEST_TIMEOUT");
    const unsigned timeout_s = tv && atoi(tv) > 0 ? (unsigned)atoi(tv) : 1500;
    shared_tmpdir = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_tmpdir == MAP_FAILED) shared_tmpdir = NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa); // no SA_RESTART: the alarm interrupts waitpid
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double t_all = bp_now();
    for (int i = 0; i < n_tests; i++) {
        test_case *t = &tests[i];
        if (!test_selected(t->name, argc, argv)) continue;
        double t0 = bp_now();
        fflush(stdout);
        fflush(stderr);
        if (shared_tmpdir) shared_tmpdir[0] = 0;
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) {
            setpgid(0, 0);
            signal(SIGALRM, SIG_DFL), signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
            tmpdir[0] = 0;
            cur_failed = cur_skipped = 0;
            t->fn();
            if (test_leaked()) {
                fprintf(stderr, "    memory leaked (LeakSanitizer report above)\n");
                cur_failed = 1;
            }
            int code = cur_failed ? 1 : cur_skipped ? 3 : 0;
            if (code == 0 && tmpdir[0]) rm_rf(tmpdir);
            else if (tmpdir[0]) fprintf(stderr, "    (files kept in %s)\n", tmpdir);
            fflush(stdout);
            fflush(stderr);
            _exit(code);
        }
        setpgid(pid, pid); // (also here: no signal may find it still in ours)
        current = pid, timed_out = 0;
        alarm(timeout_s);
        int st = 0, killed = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            if (timed_out && !killed) kill(-pid, SIGKILL), killed = 1;
        alarm(0);
        current = 0;
        double dt = bp_now() - t0;
        const char *verdict;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) verdict = "ok", passed++;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 3) verdict = "SKIP", skipped++;
        else {
            verdict = "FAIL";
            failed++;
            if (killed)
                fprintf(stderr, "    timed out after %u s (BAGPIPE_TEST_TIMEOUT); killed with its process group%s%s\n",
                        timeout_s, shared_tmpdir && shared_tmpdir[0] ? "; files kept in " : "",
                        shared_tmpdir ? shared_tmpdir : "");
            else if (WIFSIGNALED(st)) fprintf(stderr, "    killed by signal %d\n", WTERMSIG(st));
        }
        printf("%-4s %-48s %7.2fs  (%s)\n", verdict, t->name, dt, t->file);
        fflush(stdout);
    }
    if (passed + failed + skipped == 0 && argc > 1) {
        fprintf(stderr, "test_bagpipe: no test matches the filters given\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("\ntotal time %.1fs\n", bp_now() - t_all);
    if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
