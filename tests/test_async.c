// The cache of mode async (role_async.h): LRU and LFU eviction orders with their ties, rows read
// in the same iteration never evicted, the staleness bound's hits and refreshes.
// Multi-rank tests of mode `async` (role_async.c): with --staleness 0 it gives mode sync's model
// bit for bit (T = 1, 2, 3; 1 and 2 servers; SGD and Adagrad; LRU and LFU caches
// small enough to evict); with a bound S > 0 no row read is older than S iterations (the
// metrics' measured ages, which a test-only slack in the refresh decision shows can exceed the
// bound), and the cache never holds more than --cache-rows rows; a cache smaller than a slice's
// distinct rows is a start-up error naming the exact minimum.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist_util.h"
#include "role_async.h"
#include "test.h"

#define ASYNC_MODEL                                                                                  \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --learning-rate 0.05 "    \
    "--print-every 50 --eval-rows 200"

static int make_data(char *path, size_t cap, uint64_t seed) {
    snprintf(path, cap, "%s", test_path("d.bin"));
    return dist_test_dataset(path, 4000, seed, 0);
}

// S = 0: every row read is fetched in its own iteration; the model is sync's (local's at T = 1).
static void check_s0(const char *opt, const char *const runs[][3], int n) {
    char data[512], a[512];
    ASSERT_OK(make_data(data, sizeof data, 21));
    for (int k = 0; k < n; k++) {
        // runs[k]: reference mode flags, async flags, batch flags
        char ref[32], asy[32];
        snprintf(ref, sizeof ref, "ref-%s-%d", opt, k), snprintf(asy, sizeof asy, "async-%s-%d", opt, k);
        snprintf(a, sizeof a, "%s %s --emb-optimizer %s", runs[k][0], runs[k][2], opt);
        DIST_TRAIN_OK(ASYNC_MODEL, data, ref, a);
        snprintf(a, sizeof a, "--mode async --staleness 0 %s %s --emb-optimizer %s --metrics %s", runs[k][1],
                 runs[k][2], opt, test_path("m.jsonl"));
        DIST_TRAIN_OK(ASYNC_MODEL, data, asy, a);
        DIST_SAME_MODEL(ref, asy);
        const char *m = test_path("m.jsonl");
        ASSERT_TRUE(dist_test_summary_num(m, "staleness_max") == 0);
        ASSERT_TRUE(dist_test_summary_num(m, "hit_rate") == 0);
        ASSERT_MSG(dist_test_summary_num(m, "cache_evictions") > 0, "%s: no evictions", runs[k][1]);
        remove(m);
    }
}

TEST(async_s0_matches_sync_sgd) {
    const char *const runs[][3] = {
        {"--mode local", "--trainers 1 --servers 1 --cache-rows 80", "--batch-size 24 --iters 200 --no-eval"},
        {"--mode sync --trainers 2 --servers 1", "--trainers 2 --servers 2 --cache-rows 50 --cache-policy lfu",
         "--batch-size 24 --iters 200 --no-eval"},
        {"--mode sync --trainers 3 --servers 2", "--trainers 3 --servers 1 --cache-rows 30",
         "--batch-size 25 --iters 200 --no-eval"},
    };
    check_s0("sgd", runs, 3);
}

TEST(async_s0_matches_sync_adagrad) {
    // under a learning-rate schedule (every phase within the 200 iterations)
    const char *const runs[][3] = {
        {"--mode sync --trainers 2 --servers 2", "--trainers 2 --servers 1 --cache-rows 50",
         "--batch-size 24 --iters 200 --no-eval --lr-num-warmup-steps 50 --lr-decay-start-step 80 "
         "--lr-num-decay-steps 90"},
        // uneven slices and mid-run evaluations (collections of the model from the servers)
        {"--mode sync --trainers 3 --servers 1", "--trainers 3 --servers 2 --cache-rows 30 --cache-policy lfu",
         "--batch-size 25 --iters 200 --eval-every 100 --lr-num-warmup-steps 50 --lr-decay-start-step 80 "
         "--lr-num-decay-steps 90"},
    };
    check_s0("adagrad", runs, 2);
}

// Parses "age:count,lo-hi:count,.." (ages measured at every read); *max_age the largest age
// (a range's upper end), *total the lookups.
static int parse_hist(const char *h, long long *max_age, double *total) {
    *max_age = -1, *total = 0;
    for (const char *p = h; *p;) {
        char *e;
        long long lo = strtoll(p, &e, 10), hi = lo;
        if (e == p) return -1;
        if (*e == '-') {
            p = e + 1;
            hi = *p == ':' ? (long long)1 << 62 : strtoll(p, &e, 10);
        }
        if (*e != ':') return -1;
        double c = strtod(e + 1, &e);
        *max_age = hi > *max_age ? hi : *max_age, *total += c;
        p = *e == ',' ? e + 1 : e;
    }
    return 0;
}

// S = 4 with caches under pressure: every read is at most 4 iterations old, and with skewed
// data the bound is reached; the cache never holds more than its rows; the model is not sync's.
// With the refresh decision loosened by 2 (test-only), the same measurement reports reads older
// than the bound: the check can fail.
TEST(async_staleness_bounded) {
    char data[512], a[512];
    ASSERT_OK(make_data(data, sizeof data, 22));
    const char *run = "--batch-size 24 --iters 200 --no-eval --emb-optimizer adagrad";
    snprintf(a, sizeof a, "--mode sync --trainers 2 --servers 2 %s", run);
    DIST_TRAIN_OK(ASYNC_MODEL, data, "sync", a);
    const char *pol[2] = {"lru", "lfu"};
    for (int k = 0; k < 2; k++) {
        const char *m = test_path(k ? "lfu.jsonl" : "lru.jsonl");
        snprintf(a, sizeof a, "--mode async --staleness 4 --cache-policy %s --cache-rows 40 --trainers 2 --servers 2 %s "
                 "--metrics %s", pol[k], run, m);
        DIST_TRAIN_OK(ASYNC_MODEL, data, pol[k], a);
        ASSERT_MSG(!dist_test_same_file(test_path("sync"), test_path(pol[k]), "emb.bin"),
                   "%s: stale reads left the model unchanged", pol[k]);
        ASSERT_TRUE(dist_test_summary_num(m, "staleness_bound") == 4);
        double smax = dist_test_summary_num(m, "staleness_max"), peak = dist_test_summary_num(m, "cache_peak_rows");
        ASSERT_MSG(smax == 4, "%s: oldest read %g iterations, bound 4", pol[k], smax);
        ASSERT_MSG(peak <= 40 && peak >= 30, "%s: peak residency %g of 40 rows", pol[k], peak);
        ASSERT_MSG(dist_test_summary_num(m, "cache_evictions") > 100, "%s: too few evictions", pol[k]);
        ASSERT_TRUE(dist_test_summary_num(m, "cache_refreshes") > 0);
        double hit = dist_test_summary_num(m, "hit_rate");
        ASSERT_MSG(hit > 0.2 && hit < 1, "%s: hit rate %g", pol[k], hit);
        char h[2048];
        ASSERT_OK(dist_test_summary_str(m, "staleness_hist", h, sizeof h));
        long long hmax;
        double total;
        ASSERT_OK(parse_hist(h, &hmax, &total));
        ASSERT_MSG(hmax == 4, "%s: histogram %s", pol[k], h);
        ASSERT_MSG(total == 200.0 * 24 * 3 && total == dist_test_summary_num(m, "lookups"), "%s: histogram %s", pol[k], h);
    }
    // The two policies evict differently under pressure.
    ASSERT_TRUE(!dist_test_same_file(test_path("lru"), test_path("lfu"), "emb.bin"));
    const char *m = test_path("slack.jsonl");
    char *out = NULL;
    snprintf(a, sizeof a, "--mode async --staleness 4 --cache-rows 40 --trainers 2 --servers 1 %s --metrics %s", run, m);
    int rc = test_run(&out, 60, "BAGPIPE_TEST_STALENESS_SLACK=2 %s %s train " ASYNC_MODEL " %s %s", dist_test_env(),
                      test_bin(), a, data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    free(out);
    ASSERT_MSG(dist_test_summary_num(m, "staleness_max") == 6, "slack 2: oldest read %g",
               dist_test_summary_num(m, "staleness_max"));
}

// The metrics' bytes are the training's: the all-reduce of async's own figures (staleness,
// cache counters) at every window is not counted as dense all-reduce bytes, so at S = 0 the
// dense all-reduce bytes are sync's in every window and in the summary.
TEST(async_bytes_exclude_figures) {
    char data[512], a[512];
    ASSERT_OK(make_data(data, sizeof data, 25));
    const char *run = "--trainers 2 --servers 1 --batch-size 24 --iters 20 --print-every 5 --no-eval";
    const char *ms = test_path("sync.jsonl"), *ma = test_path("async.jsonl");
    snprintf(a, sizeof a, "--mode sync %s --metrics %s", run, ms);
    DIST_TRAIN_OK(ASYNC_MODEL, data, "sync", a);
    snprintf(a, sizeof a, "--mode async --staleness 0 --cache-rows 60 %s --metrics %s", run, ma);
    DIST_TRAIN_OK(ASYNC_MODEL, data, "async", a);
    const double s = dist_test_summary_num(ms, "bytes_allreduce"), v = dist_test_summary_num(ma, "bytes_allreduce");
    ASSERT_MSG(s > 0 && v == s, "dense all-reduce bytes: async %g, sync %g", v, s);
}

// A cache smaller than some slice's distinct rows is a usage error naming the minimum, which is
// exact: that many rows train, one fewer is refused.
TEST(async_cache_minimum) {
    char data[512], a[512];
    ASSERT_OK(make_data(data, sizeof data, 23));
    const char *run = "--mode async --staleness 2 --trainers 2 --servers 1 --batch-size 24 --iters 100 --no-eval";
    char *out = NULL;
    snprintf(a, sizeof a, "%s --cache-rows 5", run);
    int rc = dist_test_train(&out, ASYNC_MODEL, data, "small", a);
    ASSERT_MSG(rc == 2, "exit %d:\n%s", rc, out);
    const char *p = out ? strstr(out, "mode async needs --cache-rows ") : NULL;
    ASSERT_MSG(p, "no minimum named:\n%s", out);
    long need = strtol(p + strlen("mode async needs --cache-rows "), NULL, 10);
    free(out);
    ASSERT_MSG(need > 10 && need <= 36, "minimum %ld rows for 12 samples of 3 features", need);
    snprintf(a, sizeof a, "%s --cache-rows %ld --metrics %s", run, need, test_path("m.jsonl"));
    DIST_TRAIN_OK(ASYNC_MODEL, data, "exact", a);
    ASSERT_TRUE(dist_test_summary_num(test_path("m.jsonl"), "cache_peak_rows") == need);
    snprintf(a, sizeof a, "%s --cache-rows %ld", run, need - 1);
    out = NULL;
    rc = dist_test_train(&out, ASYNC_MODEL, data, "less", a);
    ASSERT_MSG(rc == 2, "--cache-rows %ld: exit %d:\n%s", need - 1, rc, out);
    free(out);
}

// Flags of mode async elsewhere are usage errors (exit 2) naming the flag.
TEST(async_bad_flags) {
    char data[512];
    ASSERT_OK(make_data(data, sizeof data, 24));
    struct {
        const char *args, *msg;
    } bad[] = {
        {"--mode sync --staleness 3", "--staleness: only --mode async reads it (this is --mode sync)"},
        {"--mode local --cache-policy lfu", "--cache-policy: only --mode async reads it (this is --mode local)"},
        {"--mode bagpipe --staleness 0", "--staleness: only --mode async reads it (this is --mode bagpipe)"},
        {"--mode async --cache-policy fifo", "--cache-policy"},
        {"--mode async --servers 0", "--servers 0: --mode async needs at least one server"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *out = NULL;
        int rc = test_run(&out, 60, "%s %s train " ASYNC_MODEL " --iters 5 %s %s", dist_test_env(), test_bin(),
                          bad[k].args, data);
        ASSERT_MSG(rc == 2, "%s: exit %d:\n%s", bad[k].args, rc, out);
        ASSERT_STR_CONTAINS(out, bad[k].msg);
        free(out);
    }
}

// Reads keys (ascending, n of them) at iteration t as the trainer does: the keys to fetch get
// their slots' fetch iteration.  Returns how many were to fetch.
static uint32_t cache_read(role_async_cache *c, int64_t t, int64_t bound, const uint64_t *keys, int n) {
    uint32_t uslot[8], fu[8];
    uint32_t nf = role_async_cache_read(c, t, keys, n, bound, uslot, fu);
    for (uint32_t f = 0; f < nf; f++) c->fetched[uslot[fu[f]]] = t;
    for (int u = 0; u < n; u++)
        if (c->key[uslot[u]] != keys[u]) return UINT32_MAX; // every key must sit in its slot
    return nf;
}

#define READ(c, t, bound, ...) cache_read(c, t, bound, (const uint64_t[]){__VA_ARGS__}, \
                                           (int)(sizeof((uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t)))
static int resident(const role_async_cache *c, uint64_t key) { return role_keymap_find(&c->map, key) != ROLE_NO_SLOT; }

TEST(async_cache_lru) {
    role_async_cache c;
    ASSERT_OK(role_async_cache_init(&c, 3, 4, 0));
    ASSERT_EQ(READ(&c, 0, 10, 1, 2, 3), 3);
    ASSERT_EQ(READ(&c, 1, 10, 2), 0);    // a hit
    ASSERT_EQ(READ(&c, 2, 10, 3, 4), 1); // 4 evicts 1, read least recently (t = 0)
    ASSERT_TRUE(!resident(&c, 1) && resident(&c, 2) && resident(&c, 3) && resident(&c, 4));
    ASSERT_EQ(READ(&c, 3, 10, 1), 1);    // evicts 2 (t = 1); 3 and 4 were read at t = 2
    ASSERT_TRUE(!resident(&c, 2));
    ASSERT_EQ(READ(&c, 4, 10, 5), 1);    // 3 and 4 tie at t = 2: the smaller key leaves
    ASSERT_TRUE(!resident(&c, 3) && resident(&c, 4) && resident(&c, 1) && resident(&c, 5));
    ASSERT_EQ(READ(&c, 5, 10, 6, 7), 2); // two evictions in one read: 4, then 1
    ASSERT_TRUE(resident(&c, 5) && resident(&c, 6) && resident(&c, 7));
    ASSERT_EQ(c.evictions, 5);
    ASSERT_EQ(c.misses, 8);
    ASSERT_EQ(c.peak, 3);
    role_async_cache_free(&c);
}

TEST(async_cache_lfu) {
    role_async_cache c;
    ASSERT_OK(role_async_cache_init(&c, 3, 4, 1));
    ASSERT_EQ(READ(&c, 0, 10, 1, 2, 3), 3);
    ASSERT_EQ(READ(&c, 1, 10, 1, 2), 0);
    ASSERT_EQ(READ(&c, 2, 10, 1, 2), 0); // reads: 1 and 2 three times, 3 once
    // 3 (read twice now) is the least often read but is read at t = 3: it stays; 1 and 2 tie,
    // the smaller key leaves
    ASSERT_EQ(READ(&c, 3, 10, 3, 4), 1);
    ASSERT_TRUE(!resident(&c, 1) && resident(&c, 2) && resident(&c, 3) && resident(&c, 4));
    // Two misses: 5 evicts 4 (read once); 5, new and read once, is read at t = 4 and stays:
    // 6 evicts 3 (twice) before 2 (three times)
    ASSERT_EQ(READ(&c, 4, 10, 5, 6), 2);
    ASSERT_TRUE(resident(&c, 2) && resident(&c, 5) && resident(&c, 6) && !resident(&c, 3) && !resident(&c, 4));
    ASSERT_EQ(c.evictions, 3);
    role_async_cache_free(&c);
}

TEST(async_cache_staleness) {
    role_async_cache c;
    ASSERT_OK(role_async_cache_init(&c, 4, 4, 0));
    ASSERT_EQ(READ(&c, 0, 2, 7), 1);
    ASSERT_EQ(READ(&c, 1, 2, 7), 0);
    ASSERT_EQ(READ(&c, 2, 2, 7), 0); // 2 iterations old: within the bound
    ASSERT_EQ(READ(&c, 3, 2, 7), 1); // 3 > 2: refreshed in its slot
    ASSERT_EQ(c.fetched[role_keymap_find(&c.map, 7)], 3);
    ASSERT_EQ(READ(&c, 4, 0, 7), 1); // bound 0: every read fetches
    ASSERT_EQ(c.refreshes, 2);
    ASSERT_EQ(c.misses, 1);
    ASSERT_EQ(c.n, 1);
    role_async_cache_free(&c);
}

// Random reads against a plain model of the policy (a list scanned for the row to evict): the
// same rows fetched and the same rows resident after every read, LRU and LFU, several bounds.
TEST(async_cache_matches_model) {
    enum { KEYS = 16 };
    bp_rng rng;
    bp_rng_seed(&rng, 7, 0);
    for (int run = 0; run < 40; run++) {
        const int C = 2 + run % 5, lfu = run & 1;
        const int64_t bound = run % 3;
        role_async_cache c;
        ASSERT_OK(role_async_cache_init(&c, (uint64_t)C, 4, lfu));
        int in[KEYS] = {0}, n = 0;
        int64_t used[KEYS], fetched[KEYS];
        uint64_t freq[KEYS];
        for (int64_t t = 0; t < 200; t++) {
            uint64_t keys[8];
            int U = 0;
            const int want = 1 + (int)(bp_rng_uniform(&rng) * C);
            for (uint64_t k = 0; k < KEYS && U < want; k++)
                if (bp_rng_uniform(&rng) < (double)want / KEYS * (k < 4 ? 3 : 1)) keys[U++] = k;
            if (U == 0) keys[U++] = (uint64_t)t % KEYS;
            uint32_t fetch = 0;
            for (int u = 0; u < U; u++) { // resident rows: read at t; refreshed beyond the bound
                const uint64_t k = keys[u];
                if (!in[k]) continue;
                used[k] = t, freq[k]++;
                if (t - fetched[k] > bound) fetch++, fetched[k] = t;
            }
            for (int u = 0; u < U; u++) {
                const uint64_t k = keys[u];
                if (in[k] && used[k] == t) continue;
                if (n == C) { // the first of (priority, key) among the rows not read at t
                    int v = -1;
                    for (int j = 0; j < KEYS; j++) {
                        if (!in[j] || used[j] == t) continue;
                        const uint64_t pj = lfu ? freq[j] : (uint64_t)used[j];
                        if (v < 0 || pj < (lfu ? freq[v] : (uint64_t)used[v])) v = j; // ties: the smaller key
                    }
                    ASSERT_TRUE(v >= 0);
                    in[v] = 0, n--;
                }
                in[k] = 1, n++, used[k] = t, freq[k] = 1, fetched[k] = t, fetch++;
            }
            ASSERT_EQ(cache_read(&c, t, bound, keys, U), fetch);
            for (int k = 0; k < KEYS; k++)
                ASSERT_MSG(resident(&c, (uint64_t)k) == in[k], "run %d t %lld key %d", run, (long long)t, k);
            ASSERT_TRUE(c.n == (uint64_t)n && c.n <= (uint64_t)C);
        }
        role_async_cache_free(&c);
    }
}
