// Periodic evaluation in mode bagpipe (--eval-every N, role_bagpipe.c): at every boundary it
// writes the evaluation lines of mode sync at the same T (the model after K iterations, read from
// the servers and the trainers' dirty cached rows), and the trained model stays the one of sync
// and of the run without --eval-every, byte for byte.  Caches small enough for evictions under
// pressure and refetches; also with write-backs held back (watermark waits), with a checkpoint at
// every evaluation boundary, and resumed from one.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist_util.h"
#include "test.h"

#define BPE_MODEL                                                                                 \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 16 "      \
    "--learning-rate 0.05 --print-every 100 --eval-rows 300 --iters 300"

// Runs `bagpipe train BPE_MODEL ARGS -m test_path(name).jsonl --save test_path(name) DATA` with
// env prepended (may be "") under a timeout sized for a sanitizer build on a loaded machine (a
// job takes 1-2 s quiet); returns the exit code, the output in *out (caller frees).
static int bpe_train(char **out, const char *env, const char *data, const char *name, const char *args) {
    char m[512], dir[512];
    snprintf(m, sizeof m, "%s.jsonl", test_path(name));
    snprintf(dir, sizeof dir, "%s", test_path(name));
    remove(m);
    return test_run(out, 120, "%s %s %s train " BPE_MODEL " %s -m %s --save %s %s", env, dist_test_env(), test_bin(),
                    args, m, dir, data);
}

#define TRAIN_OK(env, data, name, args)                                                         \
    do {                                                                                        \
        char *o_ = NULL;                                                                        \
        int rc_ = bpe_train(&o_, env, data, name, args);                                        \
        ASSERT_MSG(rc_ == 0, "%s: train %s exited %d:\n%s", name, args, rc_, o_ ? o_ : "");     \
        free(o_);                                                                               \
    } while (0)

// The "event":"eval" lines of test_path(name).jsonl, each whole (they hold no timings), in file
// order, newline-terminated, with iter > from (malloc'd; "" when none).  *n gets their count.
static char *eval_lines(const char *name, long from, int *n) {
    char m[512];
    snprintf(m, sizeof m, "%s.jsonl", test_path(name));
    size_t len = 0;
    char *s = dist_test_slurp(m, &len), *out = bp_xcalloc(len + 1, 1);
    size_t o = 0;
    *n = 0;
    for (char *l = s; l && *l;) {
        char *e = strchr(l, '\n');
        if (e) *e = 0; // one line at a time
        const char *it = strstr(l, "\"iter\":");
        if (strstr(l, "\"event\":\"eval\"") && it && strtol(it + 7, NULL, 10) > from) {
            o += (size_t)sprintf(out + o, "%s\n", l);
            (*n)++;
        }
        l = e ? e + 1 : NULL;
    }
    free(s);
    return out;
}

// The evaluation lines of runs a and b (iterations above from) are the same and there are n of them.
#define SAME_EVALS(a, b, from, n)                                                                       \
    do {                                                                                                \
        int na_, nb_;                                                                                   \
        char *ea_ = eval_lines(a, from, &na_), *eb_ = eval_lines(b, from, &nb_);                        \
        int ok_ = na_ == (n) && nb_ == (n) && !strcmp(ea_, eb_);                                        \
        if (!ok_) test_fail(__FILE__, __LINE__, "eval lines of %s (%d) and %s (%d), %d expected:\n%s--\n%s", a, na_, b, \
                            nb_, (int)(n), ea_, eb_);                                                   \
        free(ea_), free(eb_);                                                                           \
        if (!ok_) return;                                                                               \
    } while (0)

#define SAME_MODEL(a, b)                                                                                \
    do {                                                                                                \
        char a_[512];                                                                                   \
        snprintf(a_, sizeof a_, "%s", test_path(a));                                                    \
        ASSERT_MSG(dist_test_same_file(a_, test_path(b), "dense.bin"), "dense.bin of %s and %s differ", a, b); \
        ASSERT_MSG(dist_test_same_file(a_, test_path(b), "emb.bin"), "emb.bin of %s and %s differ", a, b);     \
    } while (0)

// A bagpipe job under pressure with --eval-every; the oracle's summary must show evictions forced
// by capacity and refetches.
#define BAGPIPE_OK(env, data, name, args)                                                                    \
    do {                                                                                                     \
        char *o_ = NULL;                                                                                     \
        int rc_ = bpe_train(&o_, env, data, name, args);                                                     \
        ASSERT_MSG(rc_ == 0, "%s: train %s exited %d:\n%s", name, args, rc_, o_ ? o_ : "");                  \
        ASSERT_MSG(dist_test_num_before(o_, "oracle:", "under pressure") > 0 && dist_test_num_before(o_, "oracle:", "refetches") > 0, \
                   "%s: no pressure evictions or refetches:\n%s", name, o_);                                 \
        free(o_);                                                                                            \
    } while (0)

static int bpe_data(char *path, size_t cap, uint64_t seed) {
    snprintf(path, cap, "%s", test_path("d.bin"));
    return dist_test_dataset(path, 8000, seed, 21);
}

// T = 1 and 2, S = 1 and 2: the lines of sync, every 50 iterations (5 of them before the end).
TEST(bpeval_matches_sync) {
    char data[512];
    ASSERT_OK(bpe_data(data, sizeof data, 31));
    const char *ev = "--eval-every 50 --emb-optimizer adagrad";
    char a[512];
    snprintf(a, sizeof a, "--mode sync --trainers 1 --servers 1 %s", ev);
    TRAIN_OK("", data, "sync1", a);
    snprintf(a, sizeof a, "--mode bagpipe --trainers 1 --servers 2 --prefetch 2 --lookahead 16 --cache-rows 125 %s", ev);
    BAGPIPE_OK("", data, "bp1", a);
    SAME_EVALS("sync1", "bp1", 0, 5);
    SAME_MODEL("sync1", "bp1");
    snprintf(a, sizeof a, "--mode sync --trainers 2 --servers 1 %s", ev);
    TRAIN_OK("", data, "sync2", a);
    snprintf(a, sizeof a, "--mode bagpipe --trainers 2 --servers 1 --prefetch 1 --lookahead 16 --cache-rows 80 %s", ev);
    BAGPIPE_OK("", data, "bp2", a);
    SAME_EVALS("sync2", "bp2", 0, 5);
    SAME_MODEL("sync2", "bp2");
    snprintf(a, sizeof a, "--mode bagpipe --trainers 2 --servers 2 --prefetch 0 --lookahead 16 --cache-rows 60 %s", ev);
    BAGPIPE_OK("", data, "bp2s2", a);
    SAME_EVALS("sync2", "bp2s2", 0, 5);
    SAME_MODEL("sync2", "bp2s2");
    TRAIN_OK("", data, "bp2plain", "--mode bagpipe --trainers 2 --servers 1 --prefetch 1 --lookahead 16 --cache-rows 80 "
                                   "--emb-optimizer adagrad");
    SAME_MODEL("bp2", "bp2plain");
    // the evaluations differ from one boundary to the next (a test of something that moves)
    int n;
    char *e = eval_lines("bp2", 0, &n);
    char *l2 = strchr(e, '\n') + 1, *auc1 = strstr(e, "\"auc\":"), *auc2 = strstr(l2, "\"auc\":");
    ASSERT_TRUE(auc1 && auc2 && strncmp(auc1, auc2, (size_t)(strchr(auc1, ',') - auc1)) != 0);
    free(e);
}

// Write-backs held back one iteration (test hook): the boundary must send them before trainer 0
// reads the shards (else the dump waits forever for the watermark); three trainers, uneven
// slices, a fetch held for a watermark on the way.
TEST(bpeval_held_write_backs) {
    char data[512];
    ASSERT_OK(bpe_data(data, sizeof data, 32));
    const char *ev = "--eval-every 40 --batch-size 17";
    char a[512];
    snprintf(a, sizeof a, "--mode sync --trainers 3 --servers 1 %s", ev);
    TRAIN_OK("", data, "sync3", a);
    snprintf(a, sizeof a, "--mode bagpipe --trainers 3 --servers 2 --prefetch 2 --lookahead 2 --cache-rows 130 %s", ev);
    char *out = NULL;
    int rc = bpe_train(&out, "BAGPIPE_TEST_WB_DELAY_US=2000", data, "bp3", a);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    long waited = dist_test_num_before(out, "server 0:", "waited for a write-back watermark") +
                  dist_test_num_before(out, "server 1:", "waited for a write-back watermark");
    ASSERT_MSG(waited > 0, "no fetch waited for a watermark:\n%s", out);
    free(out);
    SAME_EVALS("sync3", "bp3", 0, 7);
    SAME_MODEL("sync3", "bp3");
}

// A checkpoint at every other evaluation boundary (the evaluation first, as in sync), then a run
// resumed from the newest checkpoint (200): its evaluation at 250 is sync's, and so is its model.
TEST(bpeval_with_checkpoints) {
    char data[512];
    ASSERT_OK(bpe_data(data, sizeof data, 33));
    char a[1024], ck[512];
    snprintf(ck, sizeof ck, "%s", test_path("ck"));
    TRAIN_OK("", data, "sync2", "--mode sync --trainers 2 --servers 2 --eval-every 50");
    const char *bp = "--mode bagpipe --trainers 2 --servers 2 --prefetch 1 --lookahead 16 --cache-rows 80 --eval-every 50";
    snprintf(a, sizeof a, "%s --checkpoint-every 100 --checkpoint-dir %s", bp, ck);
    BAGPIPE_OK("", data, "bp2", a);
    SAME_EVALS("sync2", "bp2", 0, 5);
    SAME_MODEL("sync2", "bp2");
    snprintf(a, sizeof a, "%s --resume %s", bp, ck);
    char *out = NULL;
    int rc = bpe_train(&out, "", data, "bp2res", a);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "at iteration 200");
    free(out);
    SAME_EVALS("sync2", "bp2res", 200, 1);
    SAME_MODEL("sync2", "bp2res");
}
