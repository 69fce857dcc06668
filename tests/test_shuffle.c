// bagpipe shuffle: the train rows of a dataset in a random order, val and test in place.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common.h"
#include "data_bin.h"
#include "dist_util.h"
#include "test.h"

// Row r of ds as bytes (label, dense, sparse, prob), into buf of row_bytes(ds).
static size_t row_bytes(const bp_dataset *ds) {
    return 1 + ds->info.n_dense * sizeof(float) + ds->info.n_sparse * sizeof(uint32_t) + (ds->prob ? sizeof(float) : 0);
}
static void row_get(const bp_dataset *ds, uint64_t r, uint8_t *buf) {
    const uint32_t Nd = ds->info.n_dense, F = ds->info.n_sparse;
    buf[0] = ds->label[r];
    memcpy(buf + 1, ds->dense + r * Nd, Nd * sizeof(float));
    memcpy(buf + 1 + Nd * sizeof(float), ds->sparse + r * F, F * sizeof(uint32_t));
    if (ds->prob) memcpy(buf + 1 + Nd * sizeof(float) + F * sizeof(uint32_t), ds->prob + r, sizeof(float));
}

static size_t cmp_len;
static int cmp_rows(const void *a, const void *b) { return memcmp(a, b, cmp_len); }

// The rows [r0, r1) of a dataset, sorted (a multiset to compare).
static uint8_t *sorted_rows(const bp_dataset *ds, uint64_t r0, uint64_t r1) {
    const size_t w = row_bytes(ds);
    uint8_t *all = bp_xmalloc((r1 - r0) * w + 1);
    for (uint64_t r = r0; r < r1; r++) row_get(ds, r, all + (r - r0) * w);
    cmp_len = w;
    qsort(all, r1 - r0, w, cmp_rows);
    return all;
}

// The train rows of the output are those of the input (as a multiset) in another order, val and
// test the same rows in the same places, the header's tables, split and kind unchanged; the same
// seed gives the same bytes, another seed another order; in place (-o the input) gives the same
// file as beside it.
TEST(shuffle_permutes_the_train_rows_only) {
    const char *in = test_path("d.bin"), *out = test_path("s.bin"), *again = test_path("s2.bin");
    const char *other = test_path("s3.bin"), *inplace = test_path("in.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth -n 30000 --split ratio:0.8,0.1,0.1 -o %s", test_bin(), in), 0);
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 60, "%s shuffle -o %s %s", test_bin(), out, in), 0);
    ASSERT_STR_CONTAINS(msg, "shuffled the 24000 train rows of");
    free(msg);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 1 -o %s %s", test_bin(), again, in), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 2 -o %s %s", test_bin(), other, in), 0);
    ASSERT_TRUE(dist_test_files_equal(out, again));
    ASSERT_TRUE(!dist_test_files_equal(out, other));
    ASSERT_EQ(test_run(NULL, 10, "cp %s %s", in, inplace), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle -o %s %s", test_bin(), inplace, inplace), 0);
    ASSERT_TRUE(dist_test_files_equal(out, inplace));

    bp_dataset a, b;
    ASSERT_OK(bp_ds_open(&a, in, BP_DS_VERIFY));
    ASSERT_OK(bp_ds_open(&b, out, BP_DS_VERIFY));
    const bp_ds_info *ia = &a.info, *ib = &b.info;
    ASSERT_EQ(ia->rows, ib->rows);
    ASSERT_TRUE(ia->split[0] == ib->split[0] && ia->split[1] == ib->split[1] && ia->split[2] == ib->split[2]);
    ASSERT_TRUE(memcmp(ia->card, ib->card, sizeof ia->card) == 0 && ia->kind == ib->kind && ia->idmap == ib->idmap);
    ASSERT_TRUE(a.prob && b.prob);
    ASSERT_STR_CONTAINS(ib->source, "shuffle --seed 1 of: bagpipe synth");
    const uint64_t nt = ia->split[0];
    const size_t w = row_bytes(&a);
    uint8_t *ra = bp_xmalloc(w), *rb = bp_xmalloc(w);
    uint64_t moved = 0;
    for (uint64_t r = 0; r < ia->rows; r++) {
        row_get(&a, r, ra), row_get(&b, r, rb);
        const int same = memcmp(ra, rb, w) == 0;
        if (r >= nt) ASSERT_MSG(same, "row %llu of val/test moved", (unsigned long long)r);
        else moved += !same;
    }
    ASSERT_MSG(moved > nt * 9 / 10, "only %llu of %llu train rows moved", (unsigned long long)moved,
               (unsigned long long)nt);
    uint8_t *sa = sorted_rows(&a, 0, nt), *sb = sorted_rows(&b, 0, nt);
    ASSERT_TRUE(memcmp(sa, sb, nt * w) == 0); // the same rows
    free(sa), free(sb), free(ra), free(rb);
    bp_ds_close(&a), bp_ds_close(&b);
}

// A wrong use is a usage error; an output that is not a dataset (a raw log given by mistake) is
// refused before anything is written, and the input is never changed.
TEST(shuffle_bad_input) {
    const char *in = test_path("d.bin"), *log = test_path("train.txt");
    ASSERT_EQ(test_run(NULL, 60, "%s synth -n 2000 -o %s", test_bin(), in), 0);
    FILE *f = fopen(log, "w");
    ASSERT_TRUE(f != NULL);
    fputs("1\t2\n", f);
    fclose(f);
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s shuffle %s", test_bin(), in), 2);
    ASSERT_STR_CONTAINS(out, "shuffle: expected -o OUT and one dataset file");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle -o %s %s", test_bin(), test_path("o.bin"), test_path("none.bin")), 1);
    ASSERT_STR_CONTAINS(out, "none.bin");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle -o %s %s", test_bin(), log, in), 2);
    ASSERT_STR_CONTAINS(out, "train.txt");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "cat %s", log), 0);
    ASSERT_STR_EQ(out, "1\t2\n");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle --seed -1 -o %s %s", test_bin(), test_path("o.bin"), in), 2);
    ASSERT_STR_CONTAINS(out, "--seed");
    free(out);
}

// Through buckets (--buckets K): output train row i is input row bp_shuffle_order(...)[i], the
// command's passes over files and the twin in memory giving the same order; val and test in
// place; the same K the same bytes, another K another order; --buckets 1 is the default's bytes;
// --memory picks the fewest buckets whose largest fits, says how many, and gives --buckets K's
// bytes; in place (-o the input) the same bytes; the temporary file is gone.
TEST(shuffle_through_buckets_is_the_twin_order) {
    char in[512], b5[512]; // (test_path's names are reused after eight)
    snprintf(in, sizeof in, "%s", test_path("d.bin"));
    snprintf(b5, sizeof b5, "%s", test_path("b5.bin"));
    const char *plain = test_path("p.bin"), *one = test_path("b1.bin");
    const char *b5b = test_path("b5b.bin"), *b6 = test_path("b6.bin"), *mem = test_path("m.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth -n 30000 --split ratio:0.8,0.1,0.1 -o %s", test_bin(), in), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 3 -o %s %s", test_bin(), plain, in), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 3 --buckets 1 -o %s %s", test_bin(), one, in), 0);
    ASSERT_TRUE(dist_test_files_equal(plain, one));
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 60, "%s shuffle --seed 3 --buckets 5 -o %s %s", test_bin(), b5, in), 0);
    ASSERT_STR_CONTAINS(msg, "5 buckets, the largest");
    free(msg);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 3 --buckets 5 -o %s %s", test_bin(), b5b, in), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 3 --buckets 6 -o %s %s", test_bin(), b6, in), 0);
    ASSERT_TRUE(dist_test_files_equal(b5, b5b));
    ASSERT_TRUE(!dist_test_files_equal(b5, b6) && !dist_test_files_equal(b5, plain));
    // 24,000 train rows of 161 bytes and a 4-byte order entry each: 3.96 MB, 5.04 times the three
    // quarters of 1 MiB that a bucket may take, so 6 buckets
    ASSERT_EQ(test_run(&msg, 60, "%s shuffle --seed 3 --memory 1 -o %s %s", test_bin(), mem, in), 0);
    ASSERT_STR_CONTAINS(msg, "--memory 1 MiB: 6 buckets (--buckets 6 gives the same bytes)");
    free(msg);
    ASSERT_TRUE(dist_test_files_equal(b6, mem));
    const char *inplace = test_path("in.bin"); // -o the input: replaced whole, the same bytes
    ASSERT_EQ(test_run(NULL, 10, "cp %s %s", in, inplace), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s shuffle --seed 3 --buckets 5 -o %s %s", test_bin(), inplace, inplace), 0);
    ASSERT_TRUE(dist_test_files_equal(b5, inplace));
    ASSERT_EQ(test_run(&msg, 10, "ls -a %s", test_path("")), 0);
    ASSERT_MSG(strstr(msg, ".shuffle.") == NULL, "a temporary file was left: %s", msg);
    free(msg);

    bp_dataset a, b;
    ASSERT_OK(bp_ds_open(&a, in, BP_DS_VERIFY));
    ASSERT_OK(bp_ds_open(&b, b5, BP_DS_VERIFY));
    ASSERT_STR_CONTAINS(b.info.source, "shuffle --seed 3 --buckets 5 of: bagpipe synth");
    const uint64_t nt = a.info.split[0];
    uint64_t *order = bp_xmalloc(nt * sizeof *order);
    bp_shuffle_order(nt, 5, 3, order);
    const size_t w = row_bytes(&a);
    uint8_t *ra = bp_xmalloc(w), *rb = bp_xmalloc(w);
    for (uint64_t r = 0; r < a.info.rows; r++) {
        row_get(&a, r < nt ? order[r] : r, ra), row_get(&b, r, rb);
        ASSERT_MSG(memcmp(ra, rb, w) == 0, "row %llu is not input row %llu", (unsigned long long)r,
                   (unsigned long long)(r < nt ? order[r] : r));
    }
    free(ra), free(rb), free(order);
    bp_ds_close(&a), bp_ds_close(&b);
}

// The twin order is a permutation, and every order of 5 rows is as likely through 1, 2, 3 or 7
// buckets (more than the rows: some stay empty): a chi-square test over the 120 orders from
// 36,000 seeds each (119 degrees of freedom: mean 119, standard deviation 15.4; the bound is
// over six deviations above).  Rows sent to bucket i % K instead, or buckets left in input order,
// give statistics above 80,000.
TEST(shuffle_orders_are_uniform) {
    const uint64_t Ks[] = {1, 2, 3, 7};
    enum { N = 5, ORDERS = 120, RUNS = 36000 };
    for (size_t q = 0; q < sizeof Ks / sizeof *Ks; q++) {
        uint32_t count[ORDERS] = {0};
        for (uint64_t seed = 0; seed < RUNS; seed++) {
            uint64_t o[N];
            bp_shuffle_order(N, Ks[q], seed, o);
            uint32_t seen = 0, rank = 0; // the order's Lehmer code
            for (int i = 0; i < N; i++) {
                ASSERT_TRUE(o[i] < N && !(seen >> o[i] & 1));
                uint32_t less = 0;
                for (int j = i + 1; j < N; j++) less += o[j] < o[i];
                seen |= 1u << o[i], rank = rank * (uint32_t)(N - i) + less;
            }
            count[rank]++;
        }
        double chi2 = 0, e = (double)RUNS / ORDERS;
        for (int k = 0; k < ORDERS; k++) chi2 += (count[k] - e) * (count[k] - e) / e;
        printf("    K = %llu: chi-square %.1f over %d orders\n", (unsigned long long)Ks[q], chi2, ORDERS);
        ASSERT_MSG(chi2 < 215, "K = %llu: chi-square %.1f", (unsigned long long)Ks[q], chi2);
    }
    uint64_t big[1000];
    bp_shuffle_order(1000, 9, 1, big);
    uint8_t hit[1000] = {0};
    for (int i = 0; i < 1000; i++) {
        ASSERT_TRUE(big[i] < 1000 && !hit[big[i]]);
        hit[big[i]] = 1;
    }
}

// A wrong use of the buckets is a usage error naming the flag; nothing is written.
TEST(shuffle_buckets_bad_input) {
    const char *in = test_path("d.bin"), *o = test_path("o.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth -n 2000 -o %s", test_bin(), in), 0);
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s shuffle --buckets 0 -o %s %s", test_bin(), o, in), 2);
    ASSERT_STR_CONTAINS(out, "--buckets");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle --buckets 70000 -o %s %s", test_bin(), o, in), 2);
    ASSERT_STR_CONTAINS(out, "--buckets");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle --buckets 4 --memory 100 -o %s %s", test_bin(), o, in), 2);
    ASSERT_STR_CONTAINS(out, "--memory and --buckets both given");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "%s shuffle --memory -3 -o %s %s", test_bin(), o, in), 2);
    ASSERT_STR_CONTAINS(out, "--memory");
    free(out);
    ASSERT_EQ(test_run(&out, 10, "ls %s", o), 2); // never written
    free(out);
}
