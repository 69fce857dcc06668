#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze.h"
#include "common.h"
#include "data_bin.h"
#include "test.h"

// A small dataset with skewed ids: n rows, tables of 5, 40, 300 and 150000 rows (the last spans
// several of analyze's row partitions), split 60/20/20%.
#define NT 4
#define TOTAL (5 + 40 + 300 + 150000)
static const uint64_t card[NT] = {5, 40, 300, 150000};
static int write_tiny(const char *path, uint64_t n) {
    bp_ds_info t = {0};
    t.n_dense = 0, t.n_sparse = NT;
    bp_ds_writer *w;
    int rc = bp_ds_writer_open(&w, path, &t);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, 17, 0);
    uint8_t *lab = bp_xcalloc(n, 1);
    uint32_t *s = bp_xmalloc(n * NT * sizeof *s); // (n, NT)
    for (uint64_t i = 0; i < n; i++)
        for (int f = 0; f < NT; f++) {
            // Cubing a uniform draw favours small ids; some rows are never drawn.
            double u = bp_rng_uniform(&rng);
            s[i * NT + f] = (uint32_t)(u * u * u * (double)card[f]);
        }
    rc = bp_ds_writer_append(w, n, lab, NULL, s, NULL);
    free(lab), free(s);
    if (rc) {
        bp_ds_writer_abort(w);
        return rc;
    }
    uint64_t split[3] = {n * 6 / 10, n * 2 / 10, n - n * 6 / 10 - n * 2 / 10};
    return bp_ds_writer_finish(w, card, split);
}

static int u64_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Share of lookups the k busiest rows take, from a plain sorted copy of the counts.
typedef struct {
    uint64_t *sorted; // (n) counts, largest first
    uint64_t n, total;
} sorted_counts;
static sorted_counts sort_counts(const uint64_t *cnt, uint64_t n) {
    sorted_counts s = {bp_xmalloc(n * sizeof(uint64_t)), n, 0};
    memcpy(s.sorted, cnt, n * sizeof *cnt);
    qsort(s.sorted, n, sizeof *s.sorted, u64_desc);
    for (uint64_t i = 0; i < n; i++) s.total += s.sorted[i];
    return s;
}
static double brute_top(const sorted_counts *s, uint64_t k) {
    uint64_t top = 0;
    for (uint64_t i = 0; i < k && i < s->n; i++) top += s->sorted[i];
    return s->total ? (double)top / (double)s->total : 0;
}

static void check_against_brute_force(const bp_dataset *ds, bp_split split, int B, int threads) {
    analyze_opts o = {B, split, threads};
    analyze_result r;
    ASSERT_OK(analyze_run(ds, &o, &r));
    uint64_t begin, end;
    bp_ds_split_range(ds, split, &begin, &end);
    const uint32_t F = NT;
    const uint64_t total = TOTAL, n = end - begin;
    uint64_t off[NT] = {0, 5, 45, 345};
    uint64_t *cnt = bp_xcalloc(TOTAL, sizeof *cnt);
    int64_t *last = bp_xmalloc(TOTAL * sizeof *last);
    for (int i = 0; i < TOTAL; i++) last[i] = -1;
    uint64_t reuse[ANALYZE_REUSE_BUCKETS] = {0}, same = 0, first = 0;
    uint64_t nb = (n + (uint64_t)B - 1) / (uint64_t)B;
    uint64_t *uniq = bp_xcalloc(nb, sizeof *uniq);
    for (uint64_t i = begin; i < end; i++) {
        int64_t b = (int64_t)((i - begin) / (uint64_t)B);
        for (uint32_t f = 0; f < F; f++) {
            uint64_t k = off[f] + ds->sparse[i * F + f];
            cnt[k]++;
            if (last[k] == b) {
                same++;
                continue;
            }
            uniq[b]++;
            if (last[k] < 0) first++;
            else {
                int64_t d = b - last[k];
                int j = 0;
                while (((int64_t)2 << j) <= d) j++;
                reuse[j]++;
            }
            last[k] = b;
        }
    }
    ASSERT_EQ(r.samples, n);
    ASSERT_EQ(r.batches, nb);
    ASSERT_EQ(r.reuse_same, same);
    ASSERT_EQ(r.reuse_first, first);
    for (int j = 0; j < ANALYZE_REUSE_BUCKETS; j++) ASSERT_EQ(r.reuse[j], reuse[j]);
    uint64_t full = n / (uint64_t)B, used = full ? full : nb, sum = 0, mn = UINT64_MAX, mx = 0;
    for (uint64_t b = 0; b < used; b++) sum += uniq[b], mn = BP_MIN(mn, uniq[b]), mx = BP_MAX(mx, uniq[b]);
    ASSERT_EQ(r.uniq_min, mn);
    ASSERT_EQ(r.uniq_max, mx);
    ASSERT_NEAR(r.uniq_mean, (double)sum / (double)used, 1e-9);
    // Skew, overall and per table, against sorting the counts; k = ceil(frac * rows).
    uint64_t touched = 0;
    for (uint64_t k = 0; k < total; k++) touched += cnt[k] > 0;
    ASSERT_EQ(r.overall.touched, touched);
    ASSERT_EQ(r.overall.accesses, n * F);
    sorted_counts all = sort_counts(cnt, total), per[NT];
    for (uint32_t f = 0; f < F; f++) per[f] = sort_counts(cnt + off[f], card[f]);
    for (int j = 0; j < ANALYZE_NFRAC; j++) {
        uint64_t k = (uint64_t)ceil(analyze_fracs[j] * total), kt = (uint64_t)ceil(analyze_fracs[j] * touched);
        ASSERT_EQ(r.overall.top_rows[j], k);
        ASSERT_NEAR(r.overall.top_share[j], brute_top(&all, k), 1e-12);
        ASSERT_NEAR(r.overall.top_share_touched[j], brute_top(&all, kt), 1e-12);
        for (uint32_t f = 0; f < F; f++) {
            uint64_t rows = card[f], tf = 0;
            for (uint64_t x = 0; x < rows; x++) tf += cnt[off[f] + x] > 0;
            ASSERT_EQ(r.table[f].touched, tf);
            uint64_t kf = (uint64_t)ceil(analyze_fracs[j] * rows), kft = (uint64_t)ceil(analyze_fracs[j] * tf);
            ASSERT_NEAR(r.table[f].top_share[j], brute_top(&per[f], kf), 1e-12);
            ASSERT_NEAR(r.table[f].top_share_touched[j], brute_top(&per[f], kft), 1e-12);
        }
    }
    free(all.sorted);
    for (uint32_t f = 0; f < F; f++) free(per[f].sorted);
    free(uniq), free(cnt), free(last);
    analyze_result_free(&r);
}

TEST(analyze_matches_brute_force) {
    const char *path = test_path("t.bin");
    ASSERT_OK(write_tiny(path, 90001)); // several of analyze's windows (32768 samples)
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, path, BP_DS_VERIFY));
    check_against_brute_force(&ds, BP_SPLIT_ALL, 7, 1);
    if (test_failed()) return;
    check_against_brute_force(&ds, BP_SPLIT_ALL, 7, 2);
    if (test_failed()) return;
    check_against_brute_force(&ds, BP_SPLIT_TRAIN, 64, 3);
    if (test_failed()) return;
    check_against_brute_force(&ds, BP_SPLIT_VAL, 1, 2);
    if (test_failed()) return;
    check_against_brute_force(&ds, BP_SPLIT_TEST, 50000, 1); // one partial batch
    bp_ds_close(&ds);
}

TEST(analyze_cli_text_and_json) {
    const char *path = test_path("t.bin");
    ASSERT_OK(write_tiny(path, 2000));
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 30, "%s analyze --batch-size 16 %s", test_bin(), path), 0);
    ASSERT_STR_CONTAINS(out, "train split, 1200 samples, 4 tables, 150345 rows in all");
    ASSERT_STR_CONTAINS(out, "unique rows per batch (B = 16: 64 lookups)");
    ASSERT_STR_CONTAINS(out, "never before");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --json --split all -b 16 %s", test_bin(), path), 0);
    ASSERT_TRUE(out[0] == '{');
    ASSERT_STR_CONTAINS(out, "\"split\": \"all\", \"samples\": 2000");
    ASSERT_STR_CONTAINS(out, "\"per_table\": [");
    ASSERT_STR_CONTAINS(out, "\"reuse\": {\"same_batch\": ");
    // One object: braces and brackets balance and close at the end, nothing after it.
    int depth = 0, closed_at_end = 0, in_str = 0;
    for (const char *p = out; *p; p++) {
        if (*p == '"' && p[-1] != '\\') in_str = !in_str;
        if (in_str) continue;
        if (*p == '{' || *p == '[') depth++;
        if (*p == '}' || *p == ']') {
            depth--;
            ASSERT_TRUE(depth >= 0);
            if (depth == 0) closed_at_end = strspn(p + 1, " \n") == strlen(p + 1);
        }
    }
    ASSERT_TRUE(depth == 0 && closed_at_end);
    free(out);
}

// A batch larger than the split is one partial batch: its unique rows are a share of the
// lookups it has (they were a share of B*F).  An empty split is an error, as for the simulation.
TEST(analyze_partial_batch_and_empty_split) {
    const char *path = test_path("t.bin");
    ASSERT_OK(write_tiny(path, 2000)); // train: 1200 samples, 4800 lookups
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 30, "%s analyze -b 100000 %s", test_bin(), path), 0);
    ASSERT_STR_CONTAINS(out, "the split's 1200 samples are one partial batch: 4800 lookups");
    ASSERT_STR_CONTAINS(out, "over 1 partial batch");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --json -b 100000 %s", test_bin(), path), 0);
    ASSERT_STR_CONTAINS(out, "\"lookups_per_batch\": 4800,");
    const char *m = strstr(out, "\"unique_per_batch\": {\"batches\": 1, \"mean\": ");
    ASSERT_TRUE(m != NULL);
    double mean = strtod(m + strlen("\"unique_per_batch\": {\"batches\": 1, \"mean\": "), NULL);
    const char *fr = strstr(m, "\"mean_frac\": ");
    ASSERT_TRUE(fr != NULL && mean > 0);
    ASSERT_NEAR(strtod(fr + strlen("\"mean_frac\": "), NULL), mean / 4800, 1e-6);
    free(out);

    const char *small = test_path("small.bin");
    ASSERT_OK(write_tiny(small, 3)); // splits of 1, 0 and 2 samples
    ASSERT_EQ(test_run(&out, 30, "%s analyze --split val %s", test_bin(), small), 1);
    ASSERT_STR_CONTAINS(out, "small.bin has no rows in the val split");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --split val --cache 5 %s", test_bin(), small), 1);
    ASSERT_STR_CONTAINS(out, "small.bin has no rows in the val split");
    free(out);
}

TEST(analyze_cli_errors_and_cachesim_hook) {
    char *out = NULL;
    const char *path = test_path("t.bin");
    ASSERT_OK(write_tiny(path, 100));
    ASSERT_EQ(test_run(&out, 30, "%s analyze %s.missing", test_bin(), path), 1);
    ASSERT_STR_CONTAINS(out, "t.bin.missing");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --batch-size 0 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--batch-size");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --split nope %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--split");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze %s %s", test_bin(), path, path), 2);
    free(out);
    // One flag table: --help shows both analyses' flags; a simulation flag needs --cache.
    ASSERT_EQ(test_run(&out, 30, "%s analyze --help", test_bin()), 0);
    static const char *const flags[] = {"--batch-size", "--split", "--json", "--threads", "cache simulation (--cache ROWS",
                                        "--cache N", "--lookahead", "--trainers", "--prefetch", "--dim",
                                        "--sweep-cache", "--sweep-lookahead", "--rows", "--plot-dir"};
    for (size_t k = 0; k < BP_ARRAY_LEN(flags); k++) ASSERT_STR_CONTAINS(out, flags[k]);
    free(out);
    static const char *const sim_only[] = {"--lookahead 200", "--trainers 2", "--prefetch 0", "--dim 8",
                                           "--sweep-cache 5,10", "--sweep-lookahead 1,2", "--rows 10", "--plot-dir p"};
    for (size_t k = 0; k < BP_ARRAY_LEN(sim_only); k++) {
        ASSERT_EQ(test_run(&out, 30, "%s analyze %s %s", test_bin(), sim_only[k], path), 2);
        ASSERT_STR_CONTAINS(out, "a cache-simulation flag; it needs --cache ROWS");
        char flag[32];
        snprintf(flag, sizeof flag, "%.*s:", (int)strcspn(sim_only[k], " "), sim_only[k]);
        ASSERT_STR_CONTAINS(out, flag);
        free(out);
    }
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 0 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--cache: 0 is out of range");
    free(out);
    // --threads 0 is one per core in both (the simulation used to refuse it).
    ASSERT_EQ(test_run(&out, 30, "%s analyze --threads 0 %s", test_bin(), path), 0);
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --threads 0 --cache 50 --trainers 2 -b 10 %s", test_bin(), path), 0);
    ASSERT_STR_CONTAINS(out, "lookahead");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --threads 65 --cache 50 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--threads: 65 is out of range [0, 64]");
    free(out);
    // More trainers than samples in a batch: refused as train refuses it (it used to simulate
    // trainers with no samples).
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 --trainers 4 -b 2 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--trainers 4: more trainers than samples in a batch (--batch-size 2)");
    free(out);
    // ... and where the rows simulated are fewer than the batch size (one batch of them).
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 --trainers 4 -b 100 --rows 3 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--trainers 4: more trainers than samples in a batch (the 3 rows simulated are one "
                             "batch)");
    free(out);
    // train's iterations need a whole batch, as train does
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 --trainers 1 -b 100 --rows 3 --iters 2 %s", test_bin(), path),
              2);
    ASSERT_STR_CONTAINS(out, "--iters 2: the 3 rows simulated hold no whole batch of 100 (--batch-size)");
    free(out);
    // a resumed run's start needs the run's iterations, and to be before their end
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 --trainers 1 -b 2 --start-iter 3 %s", test_bin(), path), 2);
    ASSERT_STR_CONTAINS(out, "--start-iter 3: needs --iters N, the run's iterations");
    free(out);
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 --trainers 1 -b 2 --iters 3 --start-iter 3 %s", test_bin(),
                       path), 2);
    ASSERT_STR_CONTAINS(out, "--start-iter 3: at or past the run's end (--iters)");
    free(out);
}

// --plot-dir is checked before the simulation, as train checks --save before training: a file in
// the way, or a parent that does not exist, used to fail only after every policy had run (on a
// real dataset, minutes), and the message of a file did not name the flag.
TEST(analyze_plot_dir_checked_before_simulating) {
    char *out = NULL;
    const char *path = test_path("t.bin");
    ASSERT_OK(write_tiny(path, 100));
    static const char *const bad[][2] = {
        {"t.bin", "--plot-dir %s: exists and is not a directory"},
        {"no/such/dir", "--plot-dir %s: cannot create: directory"},
        {"dangling", "--plot-dir %s: a symbolic link to 'nowhere', which does not exist"}, // passed the check
        {"dangling/", "--plot-dir %s: a symbolic link to 'nowhere', which does not exist"},
    };
    ASSERT_EQ(symlink("nowhere", test_path("dangling")), 0);
    for (size_t k = 0; k < BP_ARRAY_LEN(bad); k++) {
        char dir[600], want[700];
        snprintf(dir, sizeof dir, "%s", test_path(bad[k][0]));
        snprintf(want, sizeof want, bad[k][1], dir);
        ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 -b 10 --plot-dir %s %s", test_bin(), dir, path), 1);
        ASSERT_STR_CONTAINS(out, want);
        ASSERT_MSG(!strstr(out, "cache simulation of"), "it simulated before refusing: %s", out);
        free(out);
    }
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 50 -b 10 --plot-dir %s %s", test_bin(), test_path("plots"), path), 0);
    ASSERT_STR_CONTAINS(out, "cachesim.json");
    // One capacity and one window (no sweeps): the charts get a range around the point, where
    // gnuplot used to warn of an "empty x range" on stderr.
    ASSERT_MSG(!strstr(out, "empty x range"), "%s", out);
    free(out);
    // A cache too small for the lookahead policy: its line is left empty with a title that says so,
    // where gnuplot used to warn twice of a data file "with no valid points".
    ASSERT_EQ(test_run(&out, 30, "%s analyze --cache 1 -b 10 --plot-dir %s %s", test_bin(), test_path("plots1"), path), 0);
    ASSERT_STR_CONTAINS(out, "cache too small");
    ASSERT_MSG(!strstr(out, "warning"), "%s", out);
    free(out);
}
