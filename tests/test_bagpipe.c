// Multi-rank tests of mode bagpipe (oracle + lookahead cache + prefetch + LRPP sync): the saved
// model is bit-identical to mode sync at the same T (and to local at T = 1) with a cache small
// enough to force evictions, refetches and capacity pressure, also with the oracle on two threads
// (--oracle-threads 2) and split by tables (--oracle-parts 2); a cache too small is a clear error.
// Every job goes through the binary (it launches mpirun itself) under a timeout.
#include <stdlib.h>

#include "common.h"
#include "data_bin.h"
#include "dist_util.h"
#include "test.h"

// 1000 iterations of 16 samples; tables of 40, 300 and 2000 rows with skewed ids.
#define BP_MODEL                                                                                  \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 16 "      \
    "--learning-rate 0.05 --print-every 250 --eval-rows 200 --iters 1000"
// Caches a little above the planner's minimum for this data (which grows with P and with the
// rows a trainer's slice touches): thousands of evictions under pressure and refetches happen
// (checked from the oracle's summary line).

static int bagpipe_dataset(const char *path, uint64_t n, uint64_t seed) { return dist_test_dataset(path, n, seed, 11); }

static const char *job_env = ""; // environment assignments before every job's command

static int job(char **out, const char *data, const char *dir, const char *mode, const char *extra) {
    return test_run(out, 60, "%s %s %s train %s " BP_MODEL " %s --save %s %s", job_env, dist_test_env(), test_bin(), mode,
                    extra, dir, data);
}

#define JOB_OK(out, data, dir, mode, extra)                                                            \
    do {                                                                                               \
        int rc_ = job(out, data, dir, mode, extra);                                                    \
        ASSERT_MSG(rc_ == 0, "train %s %s exited %d:\n%s", mode, extra, rc_, *(out) ? *(out) : "");    \
    } while (0)

// A bagpipe job must have been under pressure: refetches and evictions forced by capacity.
#define ASSERT_PRESSURE(out)                                                                           \
    do {                                                                                               \
        ASSERT_MSG(dist_test_num_before(out, "oracle:", "under pressure") > 0, "no pressure evictions:\n%s", out); \
        ASSERT_MSG(dist_test_num_before(out, "oracle:", "refetches") > 0, "no refetches:\n%s", out);             \
    } while (0)

#define ASSERT_SAME_MODEL(a, b)                                                                        \
    do {                                                                                               \
        ASSERT_MSG(dist_test_same_file(a, b, "dense.bin"), "dense.bin differs: %s vs %s", a, b);                      \
        ASSERT_MSG(dist_test_same_file(a, b, "emb.bin"), "emb.bin differs: %s vs %s", a, b);                          \
    } while (0)

// T = 1 gives the local trainer's model and evaluation line; then T = 2 and 3 against sync at
// the same T, over S = 1 and 2, with prefetch distances 0..2.  more: further flags for every job.
static void check_optimizer(const char *opt, const char *more) {
    char data[512], extra[256], l[512], s2[512], s3[512], b[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 20000, 5));
    snprintf(extra, sizeof extra, "--emb-optimizer %s %s", opt, more);
    snprintf(l, sizeof l, "%s", test_path("local"));
    snprintf(s2, sizeof s2, "%s", test_path("sync2"));
    snprintf(s3, sizeof s3, "%s", test_path("sync3"));
    snprintf(b, sizeof b, "%s", test_path("bp"));
    char *out = NULL;
    JOB_OK(&out, data, l, "--mode local", extra);
    const char *val = strstr(out, "val   AUC");
    ASSERT_TRUE(val != NULL);
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(val, "\n"), val);
    free(out), out = NULL;
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 1 --servers 2 --prefetch 2 --lookahead 16 --cache-rows 125", extra);
    ASSERT_STR_CONTAINS(out, line);
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(l, b);
    JOB_OK(&out, data, s2, "--mode sync --trainers 2 --servers 1", extra);
    free(out), out = NULL;
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 2 --servers 1 --prefetch 1 --lookahead 16 --cache-rows 80", extra);
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s2, b);
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 2 --servers 2 --prefetch 0 --lookahead 16 --cache-rows 60", extra);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s2, b);
    JOB_OK(&out, data, s3, "--mode sync --trainers 3 --servers 2", extra);
    free(out), out = NULL;
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 3 --servers 2 --prefetch 2 --lookahead 16 --cache-rows 100", extra);
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s3, b);
    // The oracle's indexer on its own thread: the same plans, so the same model.
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 3 --servers 1 --prefetch 1 --lookahead 16 --cache-rows 80 --oracle-threads 2",
           extra);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s3, b);
    // The planner split by tables, its second part on the caller's thread and on its own: other
    // plans (their order and Belady's ties), the same model.
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 2 --servers 1 --prefetch 1 --lookahead 16 --cache-rows 80 --oracle-parts 2",
           extra);
    ASSERT_STR_CONTAINS(out, "prefetch 1, oracle split by tables in 2 parts\n");
    ASSERT_STR_CONTAINS(out, " rows; planned in 2 parts (split by tables)\n"); // the oracle's own word
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s2, b);
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 3 --servers 2 --prefetch 1 --lookahead 16 --cache-rows 80 --oracle-parts 2 "
           "--oracle-threads 2", extra);
    ASSERT_STR_CONTAINS(out, "prefetch 1, oracle split by tables in 2 parts on 2 threads\n");
    ASSERT_STR_CONTAINS(out, " rows; planned in 2 parts (split by tables)\n");
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s3, b);
}

TEST(bagpipe_sgd_matches_local_and_sync) { check_optimizer("sgd", ""); }
// Under the DLRM learning-rate schedule, whose rate changes at nearly every iteration (warmup to
// 300, held to 500, decay to 900, held after): every rank must apply each iteration's gradients
// at that iteration's rate, the background exchange's one iteration late included.
TEST(bagpipe_adagrad_matches_local_and_sync) {
    check_optimizer("adagrad", "--lr-num-warmup-steps 300 --lr-decay-start-step 500 --lr-num-decay-steps 400");
}
// With the trainers' key -> slot map as a hash map (the test hook; these tables are small enough
// for the direct map, which the other tests use).
TEST(bagpipe_rowwise_adagrad_matches_local_and_sync) {
    job_env = "BAGPIPE_TEST_HASH_MAP=1";
    check_optimizer("rowwise-adagrad", "");
}

// The arguments of the `bagpipe analyze ...` command that a "cache too small" message names, in
// args; 0, or -1 when it names none.
static int named_analyze_args(const char *out, char *args, size_t cap) {
    const char *a = strstr(out, "`bagpipe analyze "), *z = a ? strchr(a + 1, '`') : NULL;
    if (!a || !z) return -1;
    snprintf(args, cap, "%.*s", (int)(z - a - 17), a + 17);
    return 0;
}

// The smallest working cache that `bagpipe analyze --json ARGS` names, or 0.
static unsigned long long analyze_min_cache(const char *args) {
    char *out = NULL;
    unsigned long long min = 0;
    if (test_run(&out, 60, "%s analyze --json %s", test_bin(), args) == 0) {
        const char *m = out ? strstr(out, "\"min_cache\": ") : NULL;
        if (m) min = strtoull(m + 13, NULL, 10);
    }
    free(out);
    return min;
}

// A cache smaller than the first batches need: the planner's error, with the minimum, and every
// rank stops (no hang: the timeout would give 124).  The same with the oracle on two threads, and
// split by tables on two threads, whose smallest cache is its own (analyze --oracle-parts 2).
TEST(bagpipe_cache_too_small) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 4000, 6));
    for (int run = 0; run < 3; run++) {
        const int threads = run ? 2 : 1, parts = run == 2 ? 2 : 1;
        char *out = NULL;
        int rc = test_run(&out, 30, "%s %s train --mode bagpipe --trainers 2 --servers 1 --cache-rows 5 --oracle-threads %d "
                          "--oracle-parts %d " BP_MODEL " %s", dist_test_env(), test_bin(), threads, parts, data);
        ASSERT_MSG(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
        ASSERT_STR_CONTAINS(out, "cache too small");
        ASSERT_STR_CONTAINS(out, "the minimum cache size for this batch is");
        ASSERT_STR_CONTAINS(out, "holds 5");
        // The error names the analysis of this run's batches (1000 iterations: several epochs); run
        // as given, it names the smallest cache, with which the run trains, and one row less fails.
        char args[1024];
        ASSERT_MSG(named_analyze_args(out, args, sizeof args) == 0, "no analyze command in:\n%s", out);
        free(out);
        ASSERT_STR_CONTAINS(args, parts == 2 ? "--cache 5 --trainers 2 --batch-size 16 --lookahead 32 --prefetch 2 "
                                               "--oracle-parts 2 --iters 1000 "
                                             : "--cache 5 --trainers 2 --batch-size 16 --lookahead 32 --prefetch 2 --iters 1000 ");
        const unsigned long long min = analyze_min_cache(args);
        ASSERT_MSG(min > 5, "analyze %s: smallest cache %llu", args, min);
        for (unsigned long long c = min - 1; c <= min; c++) {
            rc = test_run(&out, 60, "%s %s train --mode bagpipe --trainers 2 --servers 1 --cache-rows %llu "
                          "--oracle-threads %d --oracle-parts %d " BP_MODEL " %s", dist_test_env(), test_bin(), c,
                          threads, parts, data);
            ASSERT_MSG(c == min ? rc == 0 : rc != 0 && strstr(out, "cache too small"),
                       "--cache-rows %llu (analyze's smallest: %llu): exit %d:\n%s", c, min, rc, out);
            free(out);
        }
    }
}

// A run resumed from a checkpoint starts its caches empty, so its plan from there is not the one
// of the run it continues, and at the smallest cache of the uninterrupted run (analyze's) it can
// need a row more (found by a review: this data, T = 2, W = 32, P = 8, resumed at 18).  The
// error counts the run's own iterations (it counted from the resume point: "batch 19 at
// iteration 11" for batch 37 at 29), says why, and names the analysis of the resumed batches
// (analyze --start-iter, which used to simulate from 0 and call the failing size enough); at the
// size it names, the resumed run trains the uninterrupted run's model.
TEST(bagpipe_resume_at_the_smallest_cache) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s synth -p custom --tables 1000,50,2000,300,5000,20 -n 5000 -o %s", test_bin(),
                       data), 0);
    free(out);
#define RS_FLAGS "--arch-mlp-bot 13-16-8 --arch-mlp-top 16-1 --arch-sparse-feature-size 8 -b 65 --mode bagpipe " \
                 "--trainers 2 --servers 2 --lookahead 32 --prefetch 8 --no-eval"
    char args[1024];
    snprintf(args, sizeof args, "--cache 1 --trainers 2 --batch-size 65 --lookahead 32 --prefetch 8 --iters 100 %s",
             data);
    const unsigned long long min = analyze_min_cache(args);
    ASSERT_MSG(min > 1, "analyze %s: smallest cache %llu", args, min);
    const char *ck = test_path("ck");
    int rc = test_run(&out, 120, "%s %s train " RS_FLAGS " --cache-rows %llu --iters 100 --save %s %s", dist_test_env(),
                      test_bin(), min, test_path("full"), data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    free(out);
    rc = test_run(&out, 120, "%s %s train " RS_FLAGS " --cache-rows %llu --iters 20 --checkpoint-every 9 "
                  "--checkpoint-dir %s %s", dist_test_env(), test_bin(), min, ck, data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    free(out);
    rc = test_run(&out, 120, "%s %s train " RS_FLAGS " --cache-rows %llu --iters 100 --resume %s --save %s %s",
                  dist_test_env(), test_bin(), min, ck, test_path("res"), data);
    ASSERT_MSG(rc != 0 && rc != 124, "resumed at %llu rows: exit %d (this data needed more):\n%s", min, rc, out);
    ASSERT_STR_CONTAINS(out, "cache too small: batch 37 cannot be prefetched at iteration 29: ");
    ASSERT_STR_CONTAINS(out, "this run resumed at iteration 18 with empty caches");
    ASSERT_MSG(named_analyze_args(out, args, sizeof args) == 0, "no analyze command in:\n%s", out);
    free(out);
    ASSERT_STR_CONTAINS(args, "--iters 100 --start-iter 18 ");
    const unsigned long long resumed_min = analyze_min_cache(args);
    ASSERT_MSG(resumed_min > min, "analyze --start-iter 18: %llu rows, the failing size %llu", resumed_min, min);
    rc = test_run(&out, 120, "%s %s train " RS_FLAGS " --cache-rows %llu --iters 100 --resume %s --save %s %s",
                  dist_test_env(), test_bin(), resumed_min, ck, test_path("res"), data);
    ASSERT_MSG(rc == 0, "resumed at %llu rows: exit %d:\n%s", resumed_min, rc, out);
    free(out);
    DIST_SAME_MODEL("full", "res");
#undef RS_FLAGS
}

// A plan record that does not list a key the trainer has a gradient for (the test hook
// BAGPIPE_TEST_WRONG_KEY=N swaps one key listed for trainer 0 in record N for a key outside the
// tables): the trainer's check fails with a message naming it and the iteration, and every rank
// stops.  T = 1 checks the lists by sums, T = 2 key by key.
TEST(bagpipe_plan_missing_a_gradient_key_fails) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 4000, 6));
    for (int T = 1; T <= 2; T++) {
        char *out = NULL;
        int rc = test_run(&out, 60, "BAGPIPE_TEST_WRONG_KEY=7 %s %s train --mode bagpipe --trainers %d --servers 1 "
                          "--cache-rows 400 " BP_MODEL " %s", dist_test_env(), test_bin(), T, data);
        ASSERT_MSG(rc != 0 && rc != 124, "T = %d: exit %d:\n%s", T, rc, out);
        ASSERT_STR_CONTAINS(out, "trainer 0:");
        ASSERT_STR_CONTAINS(out, "iteration 7");
        ASSERT_STR_CONTAINS(out, T == 1 ? "are not the private and synchronised keys of its plan record"
                                        : "is neither private nor synchronised in the plan");
        free(out);
    }
}

// Write-backs held back (the test hook BAGPIPE_TEST_WB_DELAY_US sends t's write-backs at the end
// of t + 1, after a pause), so the fetches of rows evicted just before reach the server ahead of
// their write-back: the server must hold them for the per-writer watermark (DESIGN §6).  A
// lookahead of 2 with prefetch 2 refetches rows issued one iteration after their eviction.  The
// server reports such waits, and the model stays the one of mode sync.
TEST(bagpipe_watermark_waits_keep_the_model) {
    char data[512], s2[512], b[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 8000, 7));
    snprintf(s2, sizeof s2, "%s", test_path("sync2"));
    snprintf(b, sizeof b, "%s", test_path("bp"));
    char *out = NULL;
    JOB_OK(&out, data, s2, "--mode sync --trainers 2 --servers 1", "--iters 400");
    free(out), out = NULL;
    int rc = test_run(&out, 60, "BAGPIPE_TEST_WB_DELAY_US=3000 %s %s train --mode bagpipe --trainers 2 --servers 1 "
                      "--prefetch 2 --lookahead 2 --cache-rows 120 " BP_MODEL " --iters 400 --save %s %s",
                      dist_test_env(), test_bin(), b, data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_MSG(dist_test_num_before(out, "oracle:", "refetches") > 0, "no refetches:\n%s", out);
    long waited = dist_test_num_before(out, "server 0:", "waited for a write-back watermark");
    ASSERT_MSG(waited > 0, "no fetch waited for a watermark (%ld):\n%s", waited, out);
    free(out);
    ASSERT_SAME_MODEL(s2, b);
}

// Message orderings that MPI allows but a quiet machine rarely produces, all at once (the test
// hooks): trainer 1's forwards, the last trainer's GSYNCs and the servers' replies to trainer 0
// come late, so the other peers' messages overtake them, and write-backs come an iteration late,
// so fetches wait for watermarks; with evaluations and checkpoints at boundaries where prefetches
// are in flight.  The model stays the one of mode sync.
TEST(bagpipe_late_peers_keep_the_model) {
    char data[512], s3[512], b[512], ck[512], extra[1200];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 8000, 7));
    snprintf(s3, sizeof s3, "%s", test_path("sync3"));
    snprintf(b, sizeof b, "%s", test_path("bp"));
    snprintf(ck, sizeof ck, "%s", test_path("ck"));
    char *out = NULL;
    JOB_OK(&out, data, s3, "--mode sync --trainers 3 --servers 2", "--iters 400");
    free(out), out = NULL;
    job_env = "BAGPIPE_TEST_WB_DELAY_US=1000 BAGPIPE_TEST_PEER_DELAY_US=700";
    snprintf(extra, sizeof extra, "--iters 400 --eval-every 50 --checkpoint-every 70 --checkpoint-dir %s", ck);
    JOB_OK(&out, data, b, "--mode bagpipe --trainers 3 --servers 2 --prefetch 2 --lookahead 2 --cache-rows 110", extra);
    job_env = "";
    ASSERT_STR_CONTAINS(out, "iteration 350: val AUC");
    long waited = dist_test_num_before(out, "server 0:", "waited for a write-back watermark") +
                  dist_test_num_before(out, "server 1:", "waited for a write-back watermark");
    ASSERT_MSG(waited > 0, "no fetch waited for a watermark (%ld):\n%s", waited, out);
    free(out);
    ASSERT_SAME_MODEL(s3, b);
}

// A run longer than an epoch (200 batches here), checkpointed, and resumed from its checkpoint in
// the second epoch: batch t is the one at row t mod 200 of the train split, which every plan
// record names (trainers check it against the batch they read), and the model stays sync's.
TEST(bagpipe_second_epoch_and_resume_keep_the_model) {
    char data[512], s2[512], b[512], ck[512], extra[1200];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(bagpipe_dataset(data, 4000, 8));
    snprintf(s2, sizeof s2, "%s", test_path("sync2"));
    snprintf(b, sizeof b, "%s", test_path("bp"));
    snprintf(ck, sizeof ck, "%s", test_path("ck"));
    char *out = NULL;
    JOB_OK(&out, data, s2, "--mode sync --trainers 2 --servers 1", "--iters 450");
    free(out), out = NULL;
    const char *bp = "--mode bagpipe --trainers 2 --servers 2 --prefetch 2 --lookahead 16 --cache-rows 100";
    snprintf(extra, sizeof extra, "--iters 450 --checkpoint-every 150 --checkpoint-dir %s", ck);
    JOB_OK(&out, data, b, bp, extra);
    ASSERT_PRESSURE(out);
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s2, b);
    snprintf(extra, sizeof extra, "--iters 450 --checkpoint-every 150 --checkpoint-dir %s --resume %s", ck, ck);
    JOB_OK(&out, data, b, bp, extra);
    ASSERT_STR_CONTAINS(out, "at iteration 300");
    free(out), out = NULL;
    ASSERT_SAME_MODEL(s2, b);
}

// Demotions at run time: a shared row next used by one trainer is evicted after s-1 and fetched
// back private at s (the oracle's demote), so its write-back of s-1 and the refetch of s meet at
// the gate; write-backs are held back (BAGPIPE_TEST_WB_DELAY_US), so the refetch waits for its
// watermark.  The batches of one oracle test (one table of `rows` rows, T trainers, batch B) are
// repeated `reps` times; the model is mode sync's, with the oracle on one thread and on two (there
// with --oracle-parts 2, which one table cannot split: a warning, and the planner in one part).
static void demotions_keep_the_model(const uint32_t *ids, uint32_t len, uint32_t rows, uint32_t reps, int T, int B,
                                     const char *plan_flags, long demotions) {
    const uint32_t n = reps * len;
    char data[512], sync[512], b[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(sync, sizeof sync, "%s", test_path("sync"));
    snprintf(b, sizeof b, "%s", test_path("bp"));
    bp_ds_info t = {0};
    t.n_dense = 4, t.n_sparse = 1, t.kind = BP_KIND_CUSTOM;
    bp_ds_writer *w;
    ASSERT_OK(bp_ds_writer_open(&w, data, &t));
    bp_rng r;
    bp_rng_seed(&r, 77, 0);
    for (uint32_t i = 0; i < n + 60; i++) {
        float d[4];
        for (int k = 0; k < 4; k++) d[k] = bp_rng_uniformf(&r);
        const uint32_t id = i < n ? ids[i % len] : i % rows;
        const uint8_t lab = bp_rng_uniform(&r) < 0.3 + 0.1 * id;
        ASSERT_OK(bp_ds_writer_append(w, 1, &lab, d, &id, NULL));
    }
    const uint64_t card[1] = {rows}, split[3] = {n, 60, 0};
    ASSERT_OK(bp_ds_writer_finish(w, card, split));
    char model[256];
    snprintf(model, sizeof model, "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size %d "
             "--learning-rate 0.05 --no-eval", B);
    char *out = NULL;
    int rc = test_run(&out, 60, "%s %s train --mode sync --trainers %d --servers 2 %s --save %s %s", dist_test_env(),
                      test_bin(), T, model, sync, data);
    ASSERT_MSG(rc == 0, "sync: exit %d:\n%s", rc, out);
    free(out);
    for (int threads = 1; threads <= 2; threads++) {
        rc = test_run(&out, 60, "BAGPIPE_TEST_WB_DELAY_US=2000 %s %s train --mode bagpipe --trainers %d --servers 2 "
                      "%s --oracle-threads %d --oracle-parts %d %s --save %s %s", dist_test_env(), test_bin(), T,
                      plan_flags, threads, threads, model, b, data);
        ASSERT_MSG(rc == 0, "bagpipe, %d oracle threads: exit %d:\n%s", threads, rc, out);
        if (threads == 2) {
            ASSERT_STR_CONTAINS(out, "has one table, so the planner runs in one part");
            ASSERT_MSG(!strstr(out, "split by tables"), "%s", out);
        }
        ASSERT_MSG(dist_test_num_before(out, "oracle:", "demoted") == demotions, "not %ld demotions:\n%s", demotions,
                   out);
        const long waited = dist_test_num_before(out, "server 0:", "waited for a write-back watermark") +
                            dist_test_num_before(out, "server 1:", "waited for a write-back watermark");
        ASSERT_MSG(waited > 0, "no fetch waited for a watermark:\n%s", out);
        free(out);
        ASSERT_SAME_MODEL(sync, b);
    }
}

// One table of 4 rows, T = 3, B = 6, P = 1, W = 2, C = 3: each repeat of the oracle test's nine
// batches makes one demotion (the run was refused before demotions: it needed 4 rows).
TEST(bagpipe_demotions_keep_the_model) {
    static const uint32_t ids[] = {0, 0, 3, 0, 3, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0,
                                   2, 0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 0, 3, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    demotions_keep_the_model(ids, 54, 4, 40, 3, 6, "--prefetch 1 --lookahead 2 --cache-rows 3", 40);
}

// Demotions a step ahead: one table of 5 rows, T = 2, B = 2, P = 1, W = 2, C = 2, the batches of
// the oracle test whose step 6 runs short where only step 5 can demote (it was refused there).
TEST(bagpipe_demotions_ahead_keep_the_model) {
    static const uint32_t ids[] = {0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 4, 0, 0, 0};
    demotions_keep_the_model(ids, 18, 5, 40, 2, 2, "--prefetch 1 --lookahead 2 --cache-rows 2", 40);
}

// Three trainers, P = 2: one table of 5 rows, B = 5, W = 2, C = 4, a pattern of eight batches
// with a demotion in each repeat (some of them ahead: without those the run is refused).
TEST(bagpipe_demotions_ahead_three_trainers_keep_the_model) {
    static const uint32_t ids[] = {0, 3, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 0,
                                   0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 3, 0, 1, 4, 3, 0, 0, 0};
    demotions_keep_the_model(ids, 40, 5, 40, 3, 5, "--prefetch 2 --lookahead 2 --cache-rows 4", 40);
}

// Two steps ahead: T = 2, P = 2, W = 2, C = 4, one table of 5 rows, eleven batches of four samples
// repeated 40 times: 39 demotions, some of them two steps before the step that would run short
// (with a view of one step only the run is refused).
TEST(bagpipe_demotions_two_steps_ahead_keep_the_model) {
    static const uint32_t ids[] = {0, 1, 1, 0, 1, 0, 0, 0, 3, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 3,
                                   1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0, 0, 3, 1, 0, 0, 0, 0, 2};
    demotions_keep_the_model(ids, 44, 5, 40, 2, 4, "--prefetch 2 --lookahead 2 --cache-rows 4", 39);
}
