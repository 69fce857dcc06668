// bagpipe shuffle: the train rows of a dataset in a random order, val and test in place.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
