#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data_bin.h"
#include "test.h"

// Writes a small dataset with known content: n rows, 3 dense, 4 sparse, optional prob.
// sized: the writer is told the row count up front (sections written in place); sized > 1 tells
// it one row more than is written.
static int write_small_as(const char *path, uint64_t n, int with_prob, int sized) {
    bp_ds_info t = {0};
    t.n_dense = 3, t.n_sparse = 4, t.kind = BP_KIND_CUSTOM, t.flags = with_prob ? BP_DS_HAS_PROB : 0;
    snprintf(t.source, sizeof t.source, "unit test");
    bp_ds_writer *w;
    int rc = sized ? bp_ds_writer_open_sized(&w, path, &t, n + (sized > 1)) : bp_ds_writer_open(&w, path, &t);
    if (rc) return rc;
    for (uint64_t r = 0; r < n && !rc; r++) {
        uint8_t lab = r % 3 == 0;
        float d[3] = {(float)r, 0.5f, -1.0f};
        uint32_t s[4] = {(uint32_t)(r % 10), (uint32_t)(r % 7), 0, (uint32_t)(r % 100)};
        float p = 0.25f;
        rc = bp_ds_writer_append(w, 1, &lab, d, s, &p);
    }
    if (rc) {
        bp_ds_writer_abort(w);
        return rc;
    }
    uint64_t card[4] = {10, 7, 1, 100}, split[3] = {n / 2, n / 4, n - n / 2 - n / 4};
    return bp_ds_writer_finish(w, card, split);
}
static int write_small(const char *path, uint64_t n, int with_prob) { return write_small_as(path, n, with_prob, 0); }

// The sized writer (sections written in place) produces the same bytes as the spilling one, and
// refuses a row count other than the one it was promised, leaving nothing under the name.
TEST(data_bin_sized_writer_same_bytes) {
    char *out = NULL;
    for (int with_prob = 0; with_prob < 2; with_prob++) {
        ASSERT_OK(write_small_as(test_path("spill.bin"), 3001, with_prob, 0));
        ASSERT_OK(write_small_as(test_path("sized.bin"), 3001, with_prob, 1));
        ASSERT_EQ(test_run(&out, 10, "cmp %s %s", test_path("spill.bin"), test_path("sized.bin")), 0);
        free(out);
    }
    ASSERT_EQ(write_small_as(test_path("short.bin"), 100, 1, 2), BP_EINVAL);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EINVAL), "100 rows written to a dataset sized for 101");
    ASSERT_TRUE(access(test_path("short.bin"), F_OK) != 0);
    ASSERT_EQ(test_run(&out, 10, "ls %s | grep -c short.bin.tmp || true", test_tmpdir()), 0);
    ASSERT_STR_CONTAINS(out, "0");
    free(out);
}

TEST(data_bin_roundtrip) {
    const char *path = test_path("a.bin");
    ASSERT_OK(write_small(path, 1000, 1));
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, path, BP_DS_VERIFY));
    ASSERT_EQ(ds.info.rows, 1000);
    ASSERT_EQ(ds.info.card[3], 100);
    ASSERT_EQ(ds.sparse[123 * 4 + 3], 23);
    ASSERT_NEAR(ds.dense[999 * 3], 999.0, 0);
    ASSERT_EQ(ds.label[3], 1);
    ASSERT_TRUE(ds.prob && ds.prob[5] == 0.25f);
    uint64_t b, e;
    bp_ds_split_range(&ds, BP_SPLIT_VAL, &b, &e);
    ASSERT_EQ(b, 500);
    ASSERT_EQ(e, 750);
    bp_ds_close(&ds);
}

TEST(data_bin_id_outside_card_refused) {
    bp_ds_info t = {0};
    t.n_dense = 0, t.n_sparse = 1;
    bp_ds_writer *w;
    ASSERT_OK(bp_ds_writer_open(&w, test_path("b.bin"), &t));
    uint8_t lab = 0;
    uint32_t id = 5;
    ASSERT_OK(bp_ds_writer_append(w, 1, &lab, NULL, &id, NULL));
    uint64_t card = 5;
    ASSERT_EQ(bp_ds_writer_finish(w, &card, NULL), BP_ERANGE);
    ASSERT_TRUE(access(test_path("b.bin"), F_OK) != 0); // nothing under the final name
}

// A header whose version field is damaged is called damaged, not a dataset of another version;
// one of another version with an intact checksum is named by its version.
TEST(data_bin_damaged_version_is_not_another_version) {
    bp_ds_info info;
    memset(&info, 0, sizeof info);
    info.rows = 10, info.n_dense = 1, info.n_sparse = 1, info.card[0] = 5, info.split[0] = 10;
    bp_ds_layout(&info);
    uint8_t b[BP_DS_HEADER_SIZE];
    bp_ds_header_encode(&info, b);
    bp_ds_info out;
    ASSERT_OK(bp_ds_header_decode(&out, b, sizeof b, "d.bin"));
    b[9] ^= 0x40; // the version field, as a flipped bit or a stray write leaves it
    ASSERT_EQ(bp_ds_header_decode(&out, b, sizeof b, "d.bin"), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "d.bin: header checksum mismatch (file damaged");
    bp_put_u32(b + 8, 2);
    bp_put_u32(b + BP_DS_HEADER_SIZE - 4, bp_crc32(0, b, BP_DS_HEADER_SIZE - 4));
    ASSERT_EQ(bp_ds_header_decode(&out, b, sizeof b, "d.bin"), BP_EVERSION);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EVERSION), "d.bin: dataset version 2, this build reads version 1");
}

TEST(data_bin_truncated_and_corrupted_detected) {
    const char *path = test_path("c.bin");
    ASSERT_OK(write_small(path, 5000, 0));
    char *out = NULL;
    // Flip one byte in the sparse section: header and sizes are fine, the checksum is not.
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, path, 0));
    uint64_t off = ds.info.off_sparse + 100;
    bp_ds_close(&ds);
    ASSERT_EQ(test_run(NULL, 10, "cp %s %s.bak && printf x | dd of=%s bs=1 seek=%llu conv=notrunc status=none", path,
                       path, path, (unsigned long long)off), 0);
    ASSERT_EQ(bp_ds_open(&ds, path, BP_DS_VERIFY), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "sparse section checksum");
    // Truncated: the size check catches it even without verification.
    ASSERT_EQ(test_run(NULL, 10, "cp %s.bak %s && truncate -s -1000 %s", path, path, path), 0);
    ASSERT_EQ(bp_ds_open(&ds, path, 0), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "truncated");
    // Damaged header.
    ASSERT_EQ(test_run(NULL, 10, "cp %s.bak %s && printf 7 | dd of=%s bs=1 seek=20 conv=notrunc status=none", path,
                       path, path), 0);
    ASSERT_EQ(bp_ds_open(&ds, path, 0), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "header checksum");
    // Not a dataset at all, and the CLI's message names the file.
    ASSERT_EQ(test_run(&out, 10, "echo hello > %s.txt && %s info %s.txt", path, test_bin(), path), 1);
    ASSERT_STR_CONTAINS(out, "c.bin.txt");
    free(out);
    // The intact copy still reads through the CLI.
    ASSERT_EQ(test_run(&out, 10, "%s info %s.bak", test_bin(), path), 0);
    ASSERT_STR_CONTAINS(out, "checksums verified");
    free(out);
}
