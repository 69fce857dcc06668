// The distributed modes' memory plan (dist.h dist_mem_plan): its figures against what the ranks
// hold, the oracle's estimate against its own accounting, the refusal before any rank starts, and
// the plan under the user's own mpirun (held against each host the ranks run on).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data_bin.h"
#include "dist_util.h"
#include "oracle.h"
#include "plan.h"
#include "test.h"

// Tables large enough that the rows, not each rank's runtime, make the figures: 1M rows of 16
// floats (61 MiB), 20000 samples (1.4 MiB).
static const char *big_tables(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s", test_path("big.bin"));
    if (test_run(NULL, 60, "test -s %s || %s synth -p custom --tables 600000,400000,1000,50 -n 20000 -t 1 -o %s",
                 path, test_bin(), path) != 0)
        return NULL;
    return path;
}

// The bytes of "<after>V U" in the plan line of out (the first "memory plan:" line), -1 if absent.
static double plan_figure(const char *out, const char *after) {
    const char *l = strstr(out, "memory plan:");
    if (!l) return -1;
    const char *end = strchr(l, '\n'), *p = strstr(l, after);
    if (!p || (end && p > end)) return -1;
    double v;
    char unit[8];
    if (sscanf(p + strlen(after), "%lf %7s", &v, unit) != 2) return -1;
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    for (int u = 0; u < 5; u++) {
        if (strncmp(unit, units[u], strlen(units[u])) == 0 && (unit[strlen(units[u])] == 0 || unit[strlen(units[u])] == ',' ||
                                                              unit[strlen(units[u])] == ')' || unit[strlen(units[u])] == ':'))
            return v * pow(1024, u);
    }
    return -1;
}

// The "memory used" figure of the rank whose role is `role` ("server 0", "trainer 1"), -1 if absent.
static double used(const char *out, const char *role) {
    char key[64];
    snprintf(key, sizeof key, "(%s): ", role);
    for (const char *p = out; (p = strstr(p, "memory used: rank ")); p++) {
        const char *k = strstr(p, key), *end = strchr(p, '\n');
        if (k && (!end || k < end)) return atof(k + strlen(key));
    }
    return -1;
}

// Plan and resident growth agree within 10% + 4 MiB.  The plan counts allocations, the
// resident figure pages touched: bp_alloc_huge rounds mappings up to 2 MiB pages, MPI and BLAS
// allocate lazily after start (a few MiB), and a buffer allocated at capacity and only partly
// written counts less.  The figures here are 5-160 MiB; an error of a missing table copy or of
// a factor of two is far outside.
#define CLOSE(plan, got, what)                                                                                \
    ASSERT_MSG((got) >= 0 && (plan) >= 0 && fabs((got) - (plan)) <= 0.10 * (plan) + 4.0 * 1048576, \
               "%s: plan %.1f MiB, resident %.1f MiB:\n%s", what, (plan) / 1048576.0, (got) / 1048576.0, out)

static void check_mode(const char *data, const char *mode_args, int S, int bagpipe) {
    char *out = NULL;
    int rc = test_run(&out, 90, "%s BAGPIPE_TEST_MEM_REPORT=1 %s train %s --trainers 2 --batch-size 256 --iters 20 %s",
                      dist_test_env(), test_bin(), mode_args, data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    const double trainer = plan_figure(out, "2 trainers x "), trainer0 = plan_figure(out, "(trainer 0: ");
    const double table = plan_figure(out, "trainer 0's copy of the tables ");
    CLOSE(trainer, used(out, "trainer 1"), "trainer 1");
    CLOSE(trainer0 + table, used(out, "trainer 0"), "trainer 0 with the gathered tables");
    if (S) {
        const double server = plan_figure(out, S == 1 ? "1 server x " : "2 servers x ");
        CLOSE(server, used(out, "server 0"), "server 0");
        if (S > 1) CLOSE(server, used(out, "server 1"), "server 1");
    }
    if (bagpipe) CLOSE(plan_figure(out, "oracle "), used(out, "oracle"), "oracle");
    else ASSERT_MSG(used(out, "oracle") < 4.0 * 1048576, "rank 0 holds more than its plan (none):\n%s", out);
    free(out);
}

TEST(dist_mem_plan_matches_what_the_ranks_hold) {
    const char *data = big_tables();
    ASSERT_TRUE(data != NULL);
    check_mode(data, "--mode sync --servers 2", 2, 0);
    check_mode(data, "--mode bagpipe --servers 2 --cache-rows 50000", 2, 1);
    check_mode(data, "--mode sharded", 0, 0);
    check_mode(data, "--mode static --servers 1 --static-rows 5000", 1, 0);
}

// The plan's oracle figure against the planner's own accounting (oracle_stats.mem_bytes) on
// traces whose window, not the key map, dominates, with caches that fill (the estimate takes
// them full).  Within 20%: the estimate takes the most distinct keys of one batch over the first
// window, the planner's high-water is over the whole run (at B = 256 about 20% more; at
// B = 16384 on the Kaggle-sized synthetic trace the two agree within 2%).  The same for the
// planner split by tables (--oracle-parts 2), from each part's figures, on one thread and two
// (where one part's estimate, from the figures over every table, came 37-40% under).
TEST(oracle_mem_estimate_matches_its_accounting) {
    const char *path = test_path("win.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth -p custom --tables 30000,8000,300,20 -n 60000 -t 1 -o %s", test_bin(), path), 0);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, path, 0));
    uint64_t r0, r1;
    bp_ds_split_range(&ds, BP_SPLIT_TRAIN, &r0, &r1);
    const struct { uint32_t B, W, T; uint64_t C; } cases[] = {{1024, 16, 2, 1500}, {512, 40, 4, 800}, {2048, 4, 1, 3500}, {256, 100, 2, 600}};
    for (size_t c = 0; c < 3 * BP_ARRAY_LEN(cases); c++) {
        const size_t k = c % BP_ARRAY_LEN(cases);
        const int parts = c < BP_ARRAY_LEN(cases) ? 1 : 2, threads = c < 2 * BP_ARRAY_LEN(cases) ? 1 : 2;
        oracle_config cfg = {.T = cases[k].T, .B = cases[k].B, .F = (uint32_t)ds.info.n_sparse, .card = ds.info.card,
                             .W = cases[k].W, .P = 2, .C = cases[k].C, .threads = threads, .groups = parts,
                             .borrow_input = 1}; // as oracle_run_dataset's
        const uint64_t per_epoch = (r1 - r0) / cfg.B;
        uint64_t U[2], D[2];
        uint8_t grp[4];
        ASSERT_EQ(oracle_parts(&cfg, grp), (uint32_t)parts);
        ASSERT_EQ(oracle_window_figures(&ds, r0, per_epoch, cfg.B, BP_MIN((uint64_t)cfg.W + cfg.P + 3, per_epoch),
                                        parts == 2 ? grp : NULL, U, D), 1);
        const double est = (double)oracle_mem_estimate(&cfg, U, D);
        oracle_stats st;
        int rc = oracle_run_dataset(&ds, BP_SPLIT_TRAIN, per_epoch * cfg.B, &cfg, NULL, NULL, &st);
        ASSERT_MSG(rc == 0, "case %zu: %s", c, bp_errmsg(rc));
        ASSERT_MSG(fabs(est - (double)st.mem_bytes) <= 0.20 * (double)st.mem_bytes,
                   "case %zu (%d parts, %d threads): estimate %.0f, accounting %llu (U %llu D %llu)", k, parts,
                   threads, est, (unsigned long long)st.mem_bytes, (unsigned long long)U[0], (unsigned long long)D[0]);
    }
    bp_ds_close(&ds);
}

// A plan beyond the available memory (BAGPIPE_MEM_AVAILABLE, or a cache of 4e9 rows against the
// machine's real figure) is refused by the launcher, exit 1, naming its largest part, before
// mpirun starts: no rank prints the layout or its memory.
TEST(dist_refuses_a_job_that_does_not_fit) {
    const char *data = big_tables();
    ASSERT_TRUE(data != NULL);
    char *out = NULL;
    int rc = test_run(&out, 60, "%s BAGPIPE_TEST_MEM_REPORT=1 BAGPIPE_MEM_AVAILABLE=50000000 %s train --mode sync --trainers 2 "
                      "--servers 2 --batch-size 256 --iters 5 %s", dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "memory plan: 2 servers x ");
    ASSERT_STR_CONTAINS(out, "of 47.7 MiB available");
    ASSERT_STR_CONTAINS(out, "but only 47.7 MiB is available on this host; the largest part is the servers' shards");
    ASSERT_STR_CONTAINS(out, "no rank was started");
    ASSERT_MSG(!strstr(out, "layout:") && !strstr(out, "memory used:"), "a rank started:\n%s", out);
    free(out);
    out = NULL;
    rc = test_run(&out, 60, "%s BAGPIPE_TEST_MEM_REPORT=1 %s train --mode bagpipe --trainers 2 --servers 1 --batch-size 256 "
                  "--iters 5 --cache-rows 4000000000 %s", dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "the largest part is the trainers' caches: a smaller --cache-rows");
    ASSERT_MSG(!strstr(out, "layout:") && !strstr(out, "memory used:"), "a rank started:\n%s", out);
    free(out);
    out = NULL; // async's cache too: its slot state outweighs small rows (it named the batch buffers)
    rc = test_run(&out, 60, "%s %s train --mode async --trainers 2 --servers 1 --batch-size 256 --iters 5 "
                  "--arch-sparse-feature-size 8 --arch-mlp-bot 13-16-8 --cache-rows 400000000 %s", dist_test_env(),
                  test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "the largest part is the trainers' caches: a smaller --cache-rows");
    free(out);
    out = NULL; // local mode's plan compares with the same figure
    rc = test_run(&out, 60, "BAGPIPE_MEM_AVAILABLE=1000000 %s train --batch-size 256 --iters 5 %s", test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "but only 976.6 KiB is available");
    free(out);
}

// Under the user's own mpirun (ranks possibly on several hosts) every rank reports its host, and
// rank 0 prints the plan once and holds it against each host (BAGPIPE_TEST_HOSTS names a host
// per rank).  Layout: rank 0 oracle, ranks 1-2 servers 0-1, ranks 3-4 trainers 0-1; host a runs
// ranks 0, 1 and 4, host b ranks 2 and 3, so each holds about half of the job (a shard each).
TEST(dist_mem_plan_per_host_under_an_external_launcher) {
    const char *data = big_tables();
    ASSERT_TRUE(data != NULL);
    char base[2048];
    snprintf(base, sizeof base, "%s mpirun -np 5 --oversubscribe %s train --mode sync --trainers 2 --servers 2 "
             "--batch-size 256 --iters 5 --no-eval %s", dist_test_env(), test_bin(), data);
    char *out = NULL;
    int rc = test_run(&out, 90, "BAGPIPE_TEST_HOSTS=a,a,b,b,a BAGPIPE_MEM_AVAILABLE=100000000000 %s", base);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    const char *first = strstr(out, "memory plan: 2 servers x ");
    ASSERT_MSG(first && !strstr(first + 1, "memory plan:"), "one plan line expected:\n%s", out);
    ASSERT_MSG(!strstr(out, "trainer 0's copy"), "--no-eval: no gathered tables expected:\n%s", out);
    ASSERT_STR_CONTAINS(out, " in all; dataset "); // the hosts' memory is on their own lines
    ASSERT_STR_CONTAINS(out, "\n  host a (ranks 0-1, 4): ");
    ASSERT_STR_CONTAINS(out, "\n  host b (ranks 2-3): ");
    const double total = plan_figure(out, "): ");
    ASSERT_MSG(total > 60e6, "plan total %.0f:\n%s", total, out);
    free(out);
    out = NULL;
    // More than either host needs, less than the whole job: it runs (all on one host, the
    // launcher would have refused it).
    rc = test_run(&out, 90, "BAGPIPE_TEST_HOSTS=a,a,b,b,a BAGPIPE_MEM_AVAILABLE=%.0f %s", 0.7 * total, base);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "trained 5 iterations");
    free(out);
    out = NULL;
    // Less than either host needs: refused by rank 0 before training, naming the first host short.
    rc = test_run(&out, 90, "BAGPIPE_TEST_HOSTS=a,a,b,b,a BAGPIPE_MEM_AVAILABLE=%.0f %s", 0.3 * total, base);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "\n  host b (ranks 2-3): "); // every host's line, then the refusal
    ASSERT_STR_CONTAINS(out, "host a (ranks 0-1, 4) needs ");
    ASSERT_STR_CONTAINS(out, "is available there; the largest part is the servers' shards of the tables");
    ASSERT_MSG(!strstr(out, "trained "), "it trained:\n%s", out);
    free(out);
    out = NULL;
    // Every rank on one host (no hook): the whole job against that host.
    rc = test_run(&out, 90, "BAGPIPE_MEM_AVAILABLE=%.0f %s", 0.7 * total, base);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, " (ranks 0-4) needs ");
    ASSERT_MSG(!strstr(out, "\n  host "), "one host: no line per host expected:\n%s", out);
    free(out);
}

// Trainer 0 holds a receive buffer for the gathered rows (up to 32 MiB) and the tables' copy only
// when the run gathers them: an evaluation or --save.  With --no-eval and neither, trainer 0's
// plan is every other trainer's.  The plan is printed and refused before any rank starts.
TEST(dist_mem_plan_trainer0_gathers_only_for_eval_or_save) {
    const char *data = big_tables();
    ASSERT_TRUE(data != NULL);
    const char *modes[] = {"--mode sync --servers 1", "--mode bagpipe --servers 1 --cache-rows 50000", "--mode sharded",
                           "--mode static --servers 1 --static-rows 5000"};
    for (size_t m = 0; m < BP_ARRAY_LEN(modes); m++) {
        for (int eval = 0; eval < 2; eval++) {
            char *out = NULL;
            int rc = test_run(&out, 60, "%s BAGPIPE_MEM_AVAILABLE=1000 %s train %s --trainers 2 --batch-size 256 --iters 5 %s %s",
                              dist_test_env(), test_bin(), modes[m], eval ? "" : "--no-eval", data);
            ASSERT_MSG(rc == 1, "%s: exit %d:\n%s", modes[m], rc, out);
            const double trainer = plan_figure(out, "2 trainers x "), trainer0 = plan_figure(out, "(trainer 0: ");
            ASSERT_MSG(trainer > 0 && trainer0 > 0, "%s: no plan:\n%s", modes[m], out);
            if (eval) {
                ASSERT_STR_CONTAINS(out, "trainer 0's copy of the tables");
            } else {
                ASSERT_MSG(trainer0 == trainer, "%s --no-eval: trainer 0 above the others:\n%s", modes[m], out);
                ASSERT_MSG(!strstr(out, "copy of the tables"), "%s --no-eval: %s", modes[m], out);
            }
            free(out);
        }
    }
}
