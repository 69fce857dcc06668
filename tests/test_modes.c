// Multi-rank tests of the baseline modes `sharded` (rows partitioned over the trainers) and
// `static` (hottest rows pinned on every trainer): each must give mode sync's model bit for bit
// at the same T (and local's at T = 1), with SGD and Adagrad rows, uneven slices, mid-run
// evaluations, every row pinned; bad flags are clear usage errors.  Every job is started
// through the binary (it launches mpirun itself) under a timeout.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist_util.h"
#include "test.h"

#define MODES_MODEL                                                                                  \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --learning-rate 0.05 "    \
    "--print-every 100 --eval-rows 200"

// A small skewed dataset (Zipf rows, planted labels) from `bagpipe synth`: 3 tables, 4 dense.
static int make_data(char *path, size_t cap, uint64_t seed) {
    snprintf(path, cap, "%s", test_path("d.bin"));
    char *out = NULL;
    int rc = test_run(&out, 30, "%s synth --preset custom --tables 40,300,2000 --dense 4 -n 4000 --seed %llu -t 1 -o %s",
                      test_bin(), (unsigned long long)seed, path);
    if (rc) fprintf(stderr, "synth exited %d:\n%s\n", rc, out ? out : "");
    free(out);
    return rc;
}

// Trains with `args`, saving to test_path(dir); returns the exit code, output in *out (may be NULL).
static int run_train(char **out, const char *data, const char *dir, const char *args) {
    return dist_test_train(out, MODES_MODEL, data, dir, args);
}
#define TRAIN_OK(data, dir, args) DIST_TRAIN_OK(MODES_MODEL, data, dir, args)
#define SAME_MODEL(a, b) DIST_SAME_MODEL(a, b)
#define summary_num dist_test_summary_num

// Iterations of the runs compared bit for bit (about six passes over the 4000-sample data).
#define MODES_ITERS 1000

// T = 1: sharded and static give the local trainer's model and evaluation line.
static void check_t1(const char *opt) {
    char data[512], args[256];
    ASSERT_OK(make_data(data, sizeof data, 11));
    snprintf(args, sizeof args, "--batch-size 24 --iters %d --emb-optimizer %s", MODES_ITERS, opt);
    char *lout = NULL, a[512];
    snprintf(a, sizeof a, "--mode local %s", args);
    int rc = run_train(&lout, data, "local", a);
    ASSERT_MSG(rc == 0, "local exited %d:\n%s", rc, lout);
    const char *lval = strstr(lout, "val   AUC");
    ASSERT_TRUE(lval != NULL);
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(lval, "\n"), lval);
    free(lout);
    const char *modes[2][2] = {{"sharded", "--mode sharded --trainers 1 --servers 0"},
                               {"static", "--mode static --trainers 1 --servers 1 --static-rows 30"}};
    for (int m = 0; m < 2; m++) {
        char *out = NULL;
        snprintf(a, sizeof a, "%s %s", modes[m][1], args);
        rc = run_train(&out, data, modes[m][0], a);
        ASSERT_MSG(rc == 0, "%s exited %d:\n%s", modes[m][0], rc, out);
        ASSERT_STR_CONTAINS(out, line);
        free(out);
        SAME_MODEL("local", modes[m][0]);
    }
}

TEST(modes_t1_match_local_sgd) { check_t1("sgd"); }
TEST(modes_t1_match_local_adagrad) { check_t1("adagrad"); }

// T = 2: sharded and static (S = 1 and 2, some rows pinned or every row) match sync; the
// metrics carry the bytes of each kind and static's hit rate.
static void check_t2(const char *opt, const char *more) {
    char data[512], args[256], a[512];
    ASSERT_OK(make_data(data, sizeof data, 12));
    snprintf(args, sizeof args, "--batch-size 24 --iters %d --no-eval --emb-optimizer %s %s", MODES_ITERS, opt, more);
    snprintf(a, sizeof a, "--mode sync --trainers 2 --servers 1 %s", args);
    TRAIN_OK(data, "sync", a);
    snprintf(a, sizeof a, "--mode sharded --trainers 2 %s --metrics %s", args, test_path("sh.jsonl"));
    TRAIN_OK(data, "sharded", a);
    SAME_MODEL("sync", "sharded");
    snprintf(a, sizeof a, "--mode static --trainers 2 --servers 2 --static-rows 25 %s --metrics %s", args,
             test_path("st.jsonl"));
    TRAIN_OK(data, "static", a);
    SAME_MODEL("sync", "static");
    // More rows than the tables hold: every accessed row is pinned, the servers see empty messages.
    snprintf(a, sizeof a, "--mode static --trainers 2 --servers 1 --static-rows 1000000 %s --metrics %s", args,
             test_path("all.jsonl"));
    TRAIN_OK(data, "all", a);
    SAME_MODEL("sync", "all");
    const char *sh = test_path("sh.jsonl"), *st = test_path("st.jsonl"), *all = test_path("all.jsonl");
    ASSERT_TRUE(summary_num(sh, "bytes_row_fetch") > 0);
    ASSERT_TRUE(summary_num(sh, "bytes_grad_push") > 0);
    ASSERT_TRUE(summary_num(sh, "bytes_allreduce") > 0);
    ASSERT_TRUE(summary_num(sh, "servers") == 0);
    double hit = summary_num(st, "hit_rate");
    ASSERT_MSG(hit > 0.3 && hit < 1, "static hit rate %g", hit); // skewed data: 25 rows serve much
    ASSERT_TRUE(summary_num(st, "bytes_hot_sync") > 0);
    ASSERT_TRUE(summary_num(st, "lookups") == (double)MODES_ITERS * 24 * 3);
    ASSERT_TRUE(summary_num(all, "hit_rate") == 1);
    // every row pinned: only empty requests and pushes (headers) go to the server
    ASSERT_TRUE(summary_num(all, "bytes_row_fetch") == (double)MODES_ITERS * 2 * 2 * 24);
}

// The embeddings at a rate of their own (the servers of sync take it from the run's setup, the
// trainers of sharded and static from their trainer's).
TEST(modes_t2_match_sync_sgd) { check_t2("sgd", "--emb-learning-rate 0.3"); }
// Under a learning-rate schedule (warmup, hold, decay, hold within the run).
TEST(modes_t2_match_sync_adagrad) {
    check_t2("adagrad", "--lr-num-warmup-steps 200 --lr-decay-start-step 350 --lr-num-decay-steps 500");
}

// T = 3 with uneven slices (batch 25), mid-run evaluations (collections of the model) and a
// learning-rate schedule (warmup, hold, decay, hold: the servers, the shard owners and the hot
// replicas apply each iteration's gradients at its rate).
TEST(modes_t3_match_sync) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 13));
    const char *common = "--batch-size 25 --iters 1000 --eval-every 250 --emb-optimizer rowwise-adagrad "
                         "--lr-num-warmup-steps 200 --lr-decay-start-step 300 --lr-num-decay-steps 400";
    char a[512];
    snprintf(a, sizeof a, "--mode sync --trainers 3 --servers 2 %s", common);
    TRAIN_OK(data, "sync", a);
    snprintf(a, sizeof a, "--mode sharded --trainers 3 --servers 0 %s", common);
    TRAIN_OK(data, "sharded", a);
    SAME_MODEL("sync", "sharded");
    snprintf(a, sizeof a, "--mode static --trainers 3 --servers 2 --static-rows 40 %s", common);
    TRAIN_OK(data, "static", a);
    SAME_MODEL("sync", "static");
    snprintf(a, sizeof a, "--mode static --trainers 3 --servers 1 %s", common); // default: 1% of the rows
    TRAIN_OK(data, "static1", a);
    SAME_MODEL("sync", "static1");
}

// Flags that do not fit a mode are usage errors (exit 2) with a message naming the flag, before
// any rank starts (a flag another mode reads used to be ignored silently).
TEST(modes_bad_flags) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 14));
    struct {
        const char *args, *msg;
    } bad[] = {
        {"--mode sharded --trainers 2 --servers 2", "--servers 2: --mode sharded keeps the rows on the trainers"},
        {"--mode static --trainers 2 --servers 0", "--servers 0: --mode static needs at least one server"},
        {"--mode sync --servers 0", "--servers 0: --mode sync needs at least one server"},
        {"--mode static --static-rows -5", "--static-rows"},
        {"--mode sync --static-rows 10", "--static-rows: only --mode static reads it (this is --mode sync)"},
        {"--mode local --static-rows 10", "--static-rows: only --mode static reads it (this is --mode local)"},
        {"--mode sharded --static-rows 0", "--static-rows: only --mode static reads it (this is --mode sharded)"},
        {"--mode sync --cache-rows 100", "--cache-rows: only --mode bagpipe or --mode async reads it (this is --mode sync)"},
        {"--mode static --lookahead 32", "--lookahead: only --mode bagpipe reads it (this is --mode static)"},
        {"--mode async --prefetch 1", "--prefetch: only --mode bagpipe reads it (this is --mode async)"},
        {"--mode local --trainers 1", "--trainers: only the distributed modes"},
        {"--mode local --servers 2", "--servers: only the distributed modes"},
        {"--mode local --stall-timeout 5", "--stall-timeout: only the distributed modes"},
        {"--mode bagpipe --trainers 65", "--trainers: at most 64 with --mode bagpipe"},
        {"--mode sharded --trainers 30 --batch-size 24", "--trainers 30: more trainers than samples"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *out = NULL;
        int rc = test_run(&out, 30, "%s %s train " MODES_MODEL " --iters 5 %s %s", dist_test_env(), test_bin(),
                          bad[k].args, data);
        ASSERT_MSG(rc == 2, "%s: exit %d:\n%s", bad[k].args, rc, out);
        ASSERT_STR_CONTAINS(out, bad[k].msg);
        ASSERT_MSG(!strstr(out, "layout:"), "%s: a job started:\n%s", bad[k].args, out);
        free(out);
    }
    // The default --servers 1 is read as 0 by sharded: the job has 1 + T ranks.
    char *out = NULL;
    int rc = test_run(&out, 60, "%s %s train " MODES_MODEL " --mode sharded --trainers 2 --iters 5 --no-eval %s",
                      dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "layout: 3 ranks");
    free(out);
}

// The `eval` lines of a metrics file, concatenated (malloc'd; "" when none), and their count.
static char *eval_lines(const char *path, int *n) {
    size_t len;
    char *all = dist_test_slurp(path, &len), *out = calloc(1, len + 1);
    *n = 0;
    for (char *p = all; p && *p;) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p + 1) : strlen(p);
        if (strstr(p, "\"event\":\"eval\"") && strstr(p, "\"event\":\"eval\"") < p + l) strncat(out, p, l), (*n)++;
        p += l;
    }
    free(all);
    return out;
}

// Every mode, as the evaluation tests below run it: a name (for the metrics file) and its flags;
// sync's model is sharded's, static's and bagpipe's at every boundary.
static const char *const modes[][2] = {
    {"local", "--mode local"},
    {"sync", "--mode sync --trainers 2 --servers 1"},
    {"sharded", "--mode sharded --trainers 2"},
    {"static", "--mode static --trainers 2 --servers 1 --static-rows 20"},
    {"bagpipe", "--mode bagpipe --trainers 2 --servers 1 --cache-rows 300 --lookahead 8"},
    {"async", "--mode async --trainers 2 --servers 1 --cache-rows 300"},
};

// --no-eval skips only the final evaluation: the --eval-every ones still happen, in every mode
// (they used to be skipped too, and then the one on the last iteration still was), and the
// summary carries no metrics.
TEST(modes_no_eval_keeps_eval_every) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 15));
    const char *common = "--batch-size 24 --iters 200 --eval-every 50 --no-eval";
    char *sync_evals = NULL;
    for (size_t m = 0; m < BP_ARRAY_LEN(modes); m++) {
        char a[1024], mpath[600];
        snprintf(mpath, sizeof mpath, "%s/%s.jsonl", test_tmpdir(), modes[m][0]);
        snprintf(a, sizeof a, "%s %s -m %s", modes[m][1], common, mpath);
        char *out = NULL;
        int rc = run_train(&out, data, modes[m][0], a);
        ASSERT_MSG(rc == 0, "%s exited %d:\n%s", modes[m][0], rc, out);
        ASSERT_MSG(!strstr(out, "val   AUC"), "%s evaluated at the end despite --no-eval:\n%s", modes[m][0], out);
        free(out);
        int n;
        char *ev = eval_lines(mpath, &n);
        ASSERT_MSG(n == 4, "%s: %d eval lines, expected 4 (iterations 50, 100, 150, 200):\n%s", modes[m][0], n, ev);
        ASSERT_STR_CONTAINS(ev, "\"iter\":150");
        ASSERT_STR_CONTAINS(ev, "\"iter\":200");
        ASSERT_TRUE(isnan(dist_test_summary_num(mpath, "auc")));
        if (m == 1) sync_evals = ev, ev = NULL;
        else if (m > 1 && m < 5) // sharded, static and bagpipe give sync's model at every boundary
            ASSERT_MSG(strcmp(ev, sync_evals) == 0, "%s's evaluations differ from sync's:\n%s\n%s", modes[m][0], ev,
                       sync_evals);
        free(ev);
    }
    free(sync_evals);
}

// The value of "key" in the eval line of iteration iter among the lines ev (NAN: none).
static double eval_num(const char *ev, int iter, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"iter\":%d,", iter);
    const char *l = strstr(ev, pat), *nl = l ? strchr(l, '\n') : NULL;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = l ? strstr(l, pat) : NULL;
    return p && (!nl || p < nl) ? strtod(p + strlen(pat), NULL) : NAN;
}

// The --eval-every evaluation that falls on the last iteration is done once, in every mode: the
// final evaluation stands for it (the summary's figures, no eval line), and with --no-eval, which
// leaves that one out, it is an eval line, printed, with the same figures (the same model).  With
// --no-eval it used to be skipped as well: 20 iterations with --eval-every 10 evaluated at 10 only.
TEST(modes_eval_every_on_the_last_iteration_is_done_once) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 15));
    for (size_t m = 0; m < BP_ARRAY_LEN(modes); m++) {
        char *out[2] = {NULL, NULL}, *ev[2] = {NULL, NULL}, mpath[2][600];
        int n[2];
        for (int no_eval = 0; no_eval < 2; no_eval++) {
            char a[1600], dir[64];
            snprintf(mpath[no_eval], sizeof mpath[no_eval], "%s/%s%d.jsonl", test_tmpdir(), modes[m][0], no_eval);
            snprintf(dir, sizeof dir, "%s%d", modes[m][0], no_eval);
            snprintf(a, sizeof a, "%s --batch-size 24 --iters 20 --eval-every 10 %s -m %s", modes[m][1],
                     no_eval ? "--no-eval" : "", mpath[no_eval]);
            int rc = run_train(&out[no_eval], data, dir, a);
            ASSERT_MSG(rc == 0, "%s exited %d:\n%s", a, rc, out[no_eval]);
            ev[no_eval] = eval_lines(mpath[no_eval], &n[no_eval]);
        }
        // the final evaluation: at 20, not an eval line nor an "iteration 20:" line besides
        ASSERT_MSG(n[0] == 1 && strstr(ev[0], "\"iter\":10,"), "%s: eval lines:\n%s", modes[m][0], ev[0]);
        ASSERT_MSG(strstr(out[0], "val   AUC") && !strstr(out[0], "iteration 20:"), "%s:\n%s", modes[m][0], out[0]);
        // --no-eval: the one at 20 is an eval line, printed
        ASSERT_MSG(n[1] == 2 && strncmp(ev[1], ev[0], strlen(ev[0])) == 0 && strstr(ev[1], "\"iter\":20,"),
                   "%s --no-eval: eval lines:\n%s", modes[m][0], ev[1]);
        ASSERT_MSG(strstr(out[1], "iteration 20: val AUC") && !strstr(out[1], "val   AUC"), "%s --no-eval:\n%s",
                   modes[m][0], out[1]);
        ASSERT_TRUE(isnan(summary_num(mpath[1], "auc")));
        static const char *const keys[] = {"auc", "logloss", "accuracy"};
        for (size_t k = 0; k < BP_ARRAY_LEN(keys); k++)
            ASSERT_MSG(eval_num(ev[1], 20, keys[k]) == summary_num(mpath[0], keys[k]), "%s: %s at 20 %.9g, final %.9g",
                       modes[m][0], keys[k], eval_num(ev[1], 20, keys[k]), summary_num(mpath[0], keys[k]));
        for (int k = 0; k < 2; k++) free(out[k]), free(ev[k]);
    }
}

// Every mode's summary gives the first iteration's time (first_iter_s, within train_s), and the
// distributed modes each part of it (first_iter_compute_s within compute_s, ...): it connects and
// warms the caches, and a rate or breakdown over the rest of the run leaves it out.
TEST(modes_summary_gives_the_first_iterations_time) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 11));
    const char *runs[][2] = {{"local", "--mode local"},
                              {"sync", "--mode sync --trainers 2 --servers 1"},
                              {"sharded", "--mode sharded --trainers 2 --servers 0"},
                              {"bagpipe", "--mode bagpipe --trainers 2 --servers 1 --cache-rows 1000"},
                              {"async", "--mode async --trainers 2 --servers 1 --cache-rows 1000"}};
    for (size_t m = 0; m < BP_ARRAY_LEN(runs); m++) {
        char a[1024], mpath[600];
        snprintf(mpath, sizeof mpath, "%s/%s.jsonl", test_tmpdir(), runs[m][0]);
        snprintf(a, sizeof a, "%s --batch-size 24 --iters 30 --no-eval -m %s", runs[m][1], mpath);
        TRAIN_OK(data, runs[m][0], a);
        const double first = summary_num(mpath, "first_iter_s"), all = summary_num(mpath, "train_s");
        ASSERT_MSG(first > 0 && first <= all, "%s: first_iter_s %g, train_s %g", runs[m][0], first, all);
        if (m == 0) continue; // the distributed modes' breakdown gives each time's first-iteration part too
        const char *parts[] = {"wait_rows_s", "emb_sync_s", "allreduce_s", "compute_s"};
        for (size_t k = 0; k < BP_ARRAY_LEN(parts); k++) {
            char key[64];
            snprintf(key, sizeof key, "first_iter_%s", parts[k]);
            const double f = summary_num(mpath, key), w = summary_num(mpath, parts[k]);
            ASSERT_MSG(f >= 0 && f <= w && (k < 3 || f > 0), "%s: %s %g, %s %g", runs[m][0], key, f, parts[k], w);
        }
    }
}
