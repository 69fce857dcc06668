// The benchmark suite (bench/suite.sh) and its network-emulation helper (bench/netem.sh).
// `suite.sh --quick` must write every experiment's table and plot: each table a well-formed
// Markdown table of numbers, each plot a valid PNG or SVG, index.md linking them all, and the
// convergence experiment must find sync and bagpipe identical.  Timings are never checked.
// netem.sh must refuse to run without root, give the command's exit status, shape only its own
// namespace and remove that namespace on exit and on a signal.  netem_hosts.sh must place the
// ranks on its emulated hosts as asked, each behind its own shaped link, and remove every
// namespace it made.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_util.h"
#include "test.h"

// Every experiment's table and plots (without the extension: .png, or .svg without PNG support).
static const char *const suite_tables[] = {"01-skew.md",    "02-hitrate.md",     "03-modes.md", "04-bytes.md",
                                           "05-scaling.md", "06-convergence.md", "07-oracle.md"};
static const char *const suite_plots[] = {"01-skew",         "02-hitrate-cache",    "02-hitrate-window",
                                          "03-modes-shm",    "04-bytes",            "05-scaling-trainers",
                                          "05-scaling-servers", "06-convergence",   "07-oracle"};

// 1 when s (trimmed of spaces) is a finite number in full, like "12", "-0.5", "1.2e-07".
static int cell_is_number(const char *s, size_t n) {
    while (n && *s == ' ') s++, n--;
    while (n && s[n - 1] == ' ') n--;
    if (!n || n > 60) return 0;
    char buf[64], *end;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (strpbrk(buf, "nN") && !strpbrk(buf, "0123456789")) return 0; // nan, inf spelled out
    double v = strtod(buf, &end);
    return *end == 0 && v == v && v - v == 0;
}

// Splits a table line "| a | b |" into cells; returns the count, or -1 when it is not a row.
// Counts numeric cells into *numeric and flags an empty or NaN-like cell in *bad.
static int table_row(const char *line, int *numeric, int *bad) {
    size_t len = strcspn(line, "\n");
    if (len < 2 || line[0] != '|' || line[len - 1] != '|') return -1;
    int cells = 0;
    const char *p = line + 1, *end = line + len - 1;
    *numeric = 0;
    while (p <= end) {
        const char *q = memchr(p, '|', (size_t)(end - p + 1));
        if (!q) break;
        const char *a = p, *b = q;
        while (a < b && *a == ' ') a++;
        while (b > a && b[-1] == ' ') b--;
        size_t n = (size_t)(b - a);
        if (n == 0 || (n == 3 && (!strncasecmp(a, "nan", 3) || !strncasecmp(a, "inf", 3))) ||
            (n == 4 && !strncmp(a, "None", 4)))
            *bad = 1;
        if (cell_is_number(a, n)) ++*numeric;
        cells++;
        p = q + 1;
    }
    return cells;
}

// Checks that every Markdown table in text is well formed: a header, a |---| separator with as
// many columns, and data rows of that width, every cell non-empty and not NaN; unless text_ok,
// also every row with a number in it and at least half of all data cells numbers.  Counts the
// tables into *tables_found.  Returns NULL or a message.
static const char *check_tables_in(const char *text, int text_ok, int *tables_found) {
    static char why[256];
    *tables_found = 0;
    const char *line = text;
    while (*line) {
        int num, bad = 0;
        int cols = table_row(line, &num, &bad);
        const char *next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        if (cols < 0) {
            line = next;
            continue;
        }
        // A table starts here: header, separator, rows.
        int sepn, sepbad = 0;
        if (!*next || table_row(next, &sepn, &sepbad) != cols || strncmp(next, "|---", 4) != 0) {
            snprintf(why, sizeof why, "a table header without a matching |---| line: %.80s", line);
            return why;
        }
        line = strchr(next, '\n');
        line = line ? line + 1 : next + strlen(next);
        int rows = 0, cells = 0, numbers = 0;
        while (*line && (cols = table_row(line, &num, &bad)) >= 0) {
            int want, b2 = 0, n2;
            want = table_row(next, &n2, &b2);
            if (cols != want) {
                snprintf(why, sizeof why, "row with %d cells under %d columns: %.80s", cols, want, line);
                return why;
            }
            if (bad) {
                snprintf(why, sizeof why, "empty or NaN cell: %.100s", line);
                return why;
            }
            if (num == 0 && !text_ok) {
                snprintf(why, sizeof why, "row without a number: %.100s", line);
                return why;
            }
            rows++, cells += cols, numbers += num;
            line = strchr(line, '\n');
            line = line ? line + 1 : "";
        }
        if (rows == 0) return "a table without data rows";
        if (2 * numbers < cells && !text_ok) {
            snprintf(why, sizeof why, "only %d of %d cells are numbers", numbers, cells);
            return why;
        }
        ++*tables_found;
    }
    return NULL;
}

static const char *check_tables(const char *text, int *tables_found) {
    return check_tables_in(text, 0, tables_found);
}

// Returns NULL when dir/name.png is a PNG (signature, IHDR with a non-zero size, IEND at the end)
// or dir/name.svg an SVG document (an <svg root element, closed); else a message.  *which gets
// the file name found.
static const char *check_plot(const char *dir, const char *name, char *which, size_t cap) {
    static char why[1200];
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/%s.png", dir, name);
    unsigned char *d = (unsigned char *)dist_test_slurp(path, &len);
    if (d) {
        snprintf(which, cap, "%s.png", name);
        static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        const char *bad = NULL;
        if (len < 8 + 25 + 12 || memcmp(d, sig, 8) != 0) bad = "no PNG signature";
        else if (memcmp(d + 12, "IHDR", 4) != 0) bad = "first chunk is not IHDR";
        else {
            uint32_t w = (uint32_t)d[16] << 24 | (uint32_t)d[17] << 16 | (uint32_t)d[18] << 8 | d[19];
            uint32_t h = (uint32_t)d[20] << 24 | (uint32_t)d[21] << 16 | (uint32_t)d[22] << 8 | d[23];
            if (w == 0 || h == 0 || w > 10000 || h > 10000) bad = "implausible image size";
            else if (memcmp(d + len - 8, "IEND", 4) != 0) bad = "no IEND chunk at the end (truncated)";
        }
        free(d);
        if (bad) snprintf(why, sizeof why, "%s: %s", path, bad);
        return bad ? why : NULL;
    }
    snprintf(path, sizeof path, "%s/%s.svg", dir, name);
    char *s = dist_test_slurp(path, &len);
    if (!s) {
        snprintf(why, sizeof why, "%s/%s.png (or .svg) missing", dir, name);
        return why;
    }
    snprintf(which, cap, "%s.svg", name);
    int ok = strstr(s, "<svg") && strstr(s, "</svg>") && (strncmp(s, "<?xml", 5) == 0 || strncmp(s, "<svg", 4) == 0);
    free(s);
    if (!ok) snprintf(why, sizeof why, "%s: not an SVG document", path);
    return ok ? NULL : why;
}

TEST(suite_quick_writes_every_table_and_plot) {
    if (access("bench/suite.sh", X_OK) != 0) {
        test_fail(__FILE__, __LINE__, "bench/suite.sh not found: run the tests from the repository root");
        return;
    }
    if (test_run(NULL, 10, "command -v gnuplot") != 0) {
        test_skip("gnuplot is not installed (scripts/deps.sh installs gnuplot-nox); the suite draws with it");
        return;
    }
    const char *out = test_path("results");
    char *log = NULL;
    // About a minute on a quiet 2-core machine; the limit leaves room for a sanitizer build (each
    // of its ~14 training jobs then takes 20-50 s on a loaded machine).
    int rc = test_run(&log, 1200, "%s BAGPIPE_BIN=%s bench/suite.sh --quick --out %s", dist_test_env(), test_bin(), out);
    if (rc != 0) {
        test_fail(__FILE__, __LINE__, "bench/suite.sh --quick exited %d:\n%s", rc, log ? log : "");
        free(log);
        return;
    }
    free(log);
    size_t len;
    char path[1024];
    for (size_t i = 0; i < sizeof suite_tables / sizeof *suite_tables; i++) {
        snprintf(path, sizeof path, "%s/%s", out, suite_tables[i]);
        char *md = dist_test_slurp(path, &len);
        ASSERT_MSG(md, "%s missing", path);
        int found;
        const char *why = check_tables(md, &found);
        int heading = md[0] == '#';
        free(md);
        ASSERT_MSG(!why, "%s: %s", suite_tables[i], why);
        ASSERT_MSG(found >= 1, "%s: no table", suite_tables[i]);
        ASSERT_MSG(heading, "%s: no heading", suite_tables[i]);
    }
    snprintf(path, sizeof path, "%s/index.md", out);
    char *index = dist_test_slurp(path, &len);
    ASSERT_MSG(index, "%s missing", path);
    char link[256];
    const char *fail = NULL;
    for (size_t i = 0; i < sizeof suite_tables / sizeof *suite_tables && !fail; i++) {
        snprintf(link, sizeof link, "](%s)", suite_tables[i]);
        if (!strstr(index, link)) fail = suite_tables[i];
    }
    for (size_t i = 0; i < sizeof suite_plots / sizeof *suite_plots && !fail; i++) {
        char file[128];
        const char *why = check_plot(out, suite_plots[i], file, sizeof file);
        if (why) {
            free(index);
            ASSERT_MSG(0, "%s", why);
        }
        snprintf(link, sizeof link, "](%s)", file);
        if (!strstr(index, link)) fail = file;
    }
    int found;
    const char *why = check_tables_in(index, 1, &found); // the machine table is words
    int has_parts = strstr(index, "## Machine") && strstr(index, "## Commands") && strstr(index, "bagpipe train") &&
                    strstr(index, "| cores (nproc) | ");
    free(index);
    ASSERT_MSG(!fail, "index.md does not link %s", fail);
    ASSERT_MSG(!why, "index.md: %s", why);
    ASSERT_MSG(found >= 8, "index.md has %d tables (machine + the experiments')", found);
    ASSERT_MSG(has_parts, "index.md lacks the machine, the commands or their training runs");
    // Convergence is the suite's one exact claim: sync and bagpipe train the same model.
    snprintf(path, sizeof path, "%s/06-convergence.md", out);
    char *conv = dist_test_slurp(path, &len);
    ASSERT_MSG(conv, "%s missing", path);
    int same = strstr(conv, "| every logged loss and AUC equal | 1 |") && strstr(conv, "| saved models byte-identical | 1 |");
    free(conv);
    ASSERT_MSG(same, "06-convergence.md: sync and bagpipe differ");
    // --quick emulates no network, the async experiment's runs included (as root they used to go
    // through bench/netem.sh).
    snprintf(path, sizeof path, "%s/async.md", out);
    char *async_md = dist_test_slurp(path, &len);
    ASSERT_MSG(async_md, "%s missing", path);
    int unemulated = strstr(async_md, "| shared memory | sync |") != NULL;
    free(async_md);
    ASSERT_MSG(unemulated, "async.md: --quick timed the async experiment over an emulated network");
    // Raw data next to each table.
    const char *raw[] = {"01-skew.tsv", "02-hitrate-cache.tsv", "03-modes.jsonl", "04-bytes.tsv", "05-scaling.tsv",
                         "06-convergence.tsv", "07-oracle.tsv"};
    for (size_t i = 0; i < sizeof raw / sizeof *raw; i++) {
        snprintf(path, sizeof path, "%s/%s", out, raw[i]);
        char *r = dist_test_slurp(path, &len);
        int lines = 0;
        for (size_t k = 0; r && k < len; k++) lines += r[k] == '\n';
        free(r);
        ASSERT_MSG(lines >= 2, "%s: missing or without data (%d lines)", raw[i], lines);
    }
}

// An experiment name or number the suite does not have is refused before anything runs (a typo
// in --only used to run nothing and write an empty index with exit code 0).
TEST(suite_only_refuses_an_unknown_experiment) {
    const char *out = test_path("results");
    char *log = NULL;
    int rc = test_run(&log, 60, "%s BAGPIPE_BIN=%s bench/suite.sh --quick --only skew,hitrates --out %s",
                      dist_test_env(), test_bin(), out);
    int named = log && strstr(log, "--only skew,hitrates: no experiment hitrates") != NULL;
    char shown[300];
    snprintf(shown, sizeof shown, "%.250s", log ? log : "");
    free(log);
    ASSERT_MSG(rc == 2 && named, "exit %d:\n%s", rc, shown);
    ASSERT_MSG(access(out, F_OK) != 0, "%s was made", out);
}

// A soak run too short to judge says so with a sample count that is not negative (with no sample
// after the first minute it used to print "only -1 samples").
TEST(suite_soak_short_run_gives_a_verdict) {
    const char *out = test_path("soak");
    char *log = NULL;
    int rc = test_run(&log, 300, "%s BAGPIPE_BIN=%s bench/soak.sh --iters 60000 --every 1 --out %s", dist_test_env(),
                      test_bin(), out);
    ASSERT_MSG(rc == 0, "bench/soak.sh exited %d:\n%s", rc, log ? log : "");
    free(log);
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/verdict.txt", out);
    char *verdict = dist_test_slurp(path, &len);
    ASSERT_MSG(verdict, "%s missing", path);
    int negative = strstr(verdict, "only -") != NULL, judged = strstr(verdict, "verdict:") != NULL;
    char first[200];
    snprintf(first, sizeof first, "%.150s", verdict);
    free(verdict);
    ASSERT_MSG(judged && !negative, "verdict.txt: %s", first);
}

// The table checker itself: it must reject what the suite must never write.
TEST(suite_table_check_rejects_malformed_tables) {
    int n;
    ASSERT_TRUE(check_tables("# t\n\n| a | b |\n|---|---|\n| x | 1.5 |\n| y | 2e-07 |\n", &n) == NULL && n == 1);
    ASSERT_TRUE(check_tables("| a | b |\n| x | 1 |\n", &n) != NULL);            // no separator
    ASSERT_TRUE(check_tables("| a | b |\n|---|---|\n", &n) != NULL);             // no rows
    ASSERT_TRUE(check_tables("| a | b |\n|---|---|\n| x | 1 | 2 |\n", &n) != NULL); // ragged
    ASSERT_TRUE(check_tables("| a | b |\n|---|---|\n| x |  |\n", &n) != NULL);  // empty cell
    ASSERT_TRUE(check_tables("| a | b |\n|---|---|\n| x | nan |\n", &n) != NULL); // NaN
    ASSERT_TRUE(check_tables("| a | b |\n|---|---|\n| x | y |\n", &n) != NULL);  // no number
    ASSERT_TRUE(check_tables("| a | b | c |\n|---|---|---|\n| x | y | 1 |\n", &n) != NULL); // mostly words
    ASSERT_TRUE(check_tables("no table here\n", &n) == NULL && n == 0);
}

// netem.sh: root only; the command's status; a shaped loopback in its own namespace; the root
// namespace's loopback untouched; the namespace gone after a normal exit and after SIGTERM.
TEST(suite_netem_tears_down_and_refuses_non_root) {
    if (access("bench/netem.sh", X_OK) != 0) {
        test_fail(__FILE__, __LINE__, "bench/netem.sh not found: run the tests from the repository root");
        return;
    }
    char *out = NULL;
    int rc;
    if (geteuid() != 0) {
        rc = test_run(&out, 20, "bench/netem.sh 1gbit true");
    } else if (test_run(NULL, 10, "command -v setpriv") == 0) {
        rc = test_run(&out, 20, "setpriv --reuid=65534 --regid=65534 --clear-groups sh bench/netem.sh 1gbit true");
    } else {
        rc = -2;
    }
    if (rc != -2) {
        ASSERT_MSG(rc == 1 && out && strstr(out, "needs root"), "netem.sh as non-root: exit %d: %s", rc, out ? out : "");
        free(out), out = NULL;
    }
    if (geteuid() != 0 || test_run(NULL, 10, "ip netns list") != 0) {
        test_skip("not root or no ip netns: only the refusal was checked");
        return;
    }
    char *lo0 = NULL, *lo1 = NULL;
    ASSERT_EQ(test_run(&lo0, 10, "tc qdisc show dev lo"), 0);
    // Inside: its own namespace, a tbf qdisc at the rate on the namespace's loopback.
    rc = test_run(&out, 30, "bench/netem.sh 1gbit sh -c \"ip netns identify \\$\\$; tc qdisc show dev lo; exit 7\"");
    int inside_ok = rc == 7 && out && strstr(out, "bpnetem") && strstr(out, "tbf") && strstr(out, "1Gbit");
    char ns[64] = "";
    if (out && strstr(out, "bpnetem")) sscanf(strstr(out, "bpnetem"), "%63s", ns);
    char *o2 = NULL;
    ASSERT_EQ(test_run(&o2, 10, "tc qdisc show dev lo"), 0);
    lo1 = o2;
    int lo_same = lo0 && lo1 && strcmp(lo0, lo1) == 0;
    ASSERT_MSG(inside_ok, "netem.sh inside: exit %d (want 7): %s", rc, out ? out : "");
    ASSERT_MSG(lo_same, "the root namespace's lo qdisc changed: before %s after %s", lo0, lo1);
    free(out), free(lo0), free(lo1), out = NULL;
    rc = test_run(NULL, 10, "ip netns list | grep -qw %s", ns);
    ASSERT_MSG(rc != 0, "namespace %s still exists after netem.sh exited", ns);
    // A TERM while the command runs: the command is stopped and the namespace removed.
    rc = test_run(&out, 30,
                  "bench/netem.sh 1gbit sleep 30 & p=$!; i=0; "
                  "while ! ip netns list | grep -qw bpnetem$p; do i=$((i+1)); [ $i -gt 100 ] && exit 90; sleep 0.05; done; "
                  "kill -TERM $p; wait $p; st=$?; "
                  "if ip netns list | grep -qw bpnetem$p; then exit 91; fi; exit $st");
    ASSERT_MSG(rc == 143, "netem.sh under SIGTERM: exit %d (want 143; 90: no namespace seen, 91: left behind): %s", rc,
               out ? out : "");
    free(out);
}

// netem_hosts.sh: mpirun places the ranks on the emulated hosts in the order SLOTS gives (each
// host its own name, address and shaped link), the command's status comes back, and every
// namespace it made is gone afterwards.
TEST(suite_netem_hosts_places_ranks_and_tears_down) {
    if (access("bench/netem_hosts.sh", X_OK) != 0) {
        test_fail(__FILE__, __LINE__, "bench/netem_hosts.sh not found: run the tests from the repository root");
        return;
    }
    char *out = NULL;
    int rc = test_run(&out, 20, "bench/netem_hosts.sh 1gbit 2,,1 true");
    ASSERT_MSG(rc == 2 && out && strstr(out, "bad SLOTS"), "netem_hosts.sh with SLOTS 2,,1: exit %d: %s", rc,
               out ? out : "");
    free(out), out = NULL;
    rc = test_run(&out, 20, "HOST_CPUS=0x1 bench/netem_hosts.sh 1gbit 1,1 true");
    ASSERT_MSG(rc == 2 && out && strstr(out, "bad HOST_CPUS"), "netem_hosts.sh with HOST_CPUS 0x1: exit %d: %s", rc,
               out ? out : "");
    free(out), out = NULL;
    if (geteuid() != 0 || test_run(NULL, 10, "ip netns list") != 0 || test_run(NULL, 10, "command -v unshare") != 0 ||
        test_run(NULL, 10, "command -v taskset") != 0) {
        test_skip("not root, no ip netns, unshare or taskset: only the argument checks were checked");
        return;
    }
    // Each rank prints its host name, address, CPUs and qdisc on one line; ranks 0-1 on host 0 (CPU
    // 0), 2 on host 1 (the last CPU).
    const char *info = test_path("rank-info.sh"), *job = test_path("job.sh");
    FILE *f = fopen(info, "w");
    ASSERT_MSG(f != NULL, "cannot write %s", info);
    fprintf(f, "echo rank $OMPI_COMM_WORLD_RANK $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}') "
               "cpus=$(taskset -cp $$ | sed 's/.*: //') $(tc qdisc show dev eth0 | head -1)\n");
    fclose(f);
    f = fopen(job, "w");
    ASSERT_MSG(f != NULL, "cannot write %s", job);
    fprintf(f, "$MPIRUN -np 3 sh %s\nexit 7\n", info);
    fclose(f);
    const long last = sysconf(_SC_NPROCESSORS_ONLN) - 1;
    rc = test_run(&out, 60, "HOST_CPUS=0:%ld bench/netem_hosts.sh 1gbit 2,1 sh %s", last, job);
    char want[3][80];
    snprintf(want[0], sizeof want[0], "rank 0 host0 10.213.77.10/24 cpus=0 qdisc tbf");
    snprintf(want[1], sizeof want[1], "rank 1 host0 10.213.77.10/24 cpus=0 qdisc tbf");
    snprintf(want[2], sizeof want[2], "rank 2 host1 10.213.77.11/24 cpus=%ld qdisc tbf", last);
    int placed = rc == 7 && out;
    for (int i = 0; placed && i < 3; i++) placed = strstr(out, want[i]) != NULL;
    ASSERT_MSG(placed, "netem_hosts.sh: exit %d (want 7), want lines like '%s': %s", rc, want[2], out ? out : "");
    ASSERT_MSG(out && strstr(out, "rate 1Gbit"), "netem_hosts.sh: no 1Gbit tbf on the hosts' links: %s",
               out ? out : "");
    free(out), out = NULL;
    rc = test_run(&out, 10, "ip netns list | grep -E \"^bp[0-9]+(sw|l|h[0-9]+)( |\\$)\"");
    ASSERT_MSG(rc != 0, "namespaces left behind by netem_hosts.sh: %s", out ? out : "");
    free(out);
}
