#include <stdlib.h>
#include <unistd.h>

#include "ckpt.h"
#include "common.h"
#include "test.h"

static int save_two_parts(const char *dir, float *a, size_t na, uint8_t *b, size_t nb) {
    int rc = ckpt_mkdir(dir);
    if (rc) return rc;
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_set(&m, "iteration", "%d", 42);
    ckpt_set(&m, "model", "dlrm");
    ckpt_file f;
    const void *bufs[2] = {a, b};
    size_t lens[2] = {na * sizeof *a, nb};
    if ((rc = ckpt_write_part(dir, "dense.bin", bufs, lens, 2, &f))) return rc;
    ckpt_add_file(&m, &f);
    if ((rc = ckpt_write_part(dir, "other.bin", bufs + 1, lens + 1, 1, &f))) return rc;
    ckpt_add_file(&m, &f);
    return ckpt_manifest_commit(dir, &m);
}

TEST(ckpt_roundtrip_and_damage) {
    float a[100];
    uint8_t b[37];
    for (int i = 0; i < 100; i++) a[i] = (float)i * 0.5f;
    for (int i = 0; i < 37; i++) b[i] = (uint8_t)i;
    const char *dir = test_path("save");
    ASSERT_OK(save_two_parts(dir, a, 100, b, 37));

    ckpt_manifest m;
    ASSERT_OK(ckpt_manifest_load(dir, &m));
    int64_t it;
    ASSERT_OK(ckpt_get_i64(&m, dir, "iteration", &it));
    ASSERT_EQ(it, 42);
    ASSERT_TRUE(strcmp(ckpt_get(&m, "model"), "dlrm") == 0);
    float a2[100];
    uint8_t b2[37];
    void *bufs[2] = {a2, b2};
    size_t lens[2] = {sizeof a2, sizeof b2};
    ASSERT_OK(ckpt_read_part(dir, &m, "dense.bin", bufs, lens, 2));
    ASSERT_TRUE(memcmp(a, a2, sizeof a) == 0 && memcmp(b, b2, sizeof b) == 0);

    // A wrong expected size is a configuration mismatch naming the file.
    size_t short_lens[1] = {sizeof a2};
    ASSERT_EQ(ckpt_read_part(dir, &m, "dense.bin", bufs, short_lens, 1), BP_EMISMATCH);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EMISMATCH), "dense.bin");

    // A flipped byte in a part.
    ASSERT_EQ(test_run(NULL, 10, "printf Z | dd of=%s/dense.bin bs=1 seek=7 conv=notrunc status=none", dir), 0);
    ASSERT_EQ(ckpt_read_part(dir, &m, "dense.bin", bufs, lens, 2), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "dense.bin: checksum mismatch");
    // A truncated part.
    ASSERT_EQ(test_run(NULL, 10, "truncate -s 10 %s/other.bin", dir), 0);
    ASSERT_EQ(ckpt_read_part(dir, &m, "other.bin", bufs + 1, lens + 1, 1), BP_ECORRUPT);
    // A damaged manifest, a truncated manifest.
    ASSERT_EQ(test_run(NULL, 10, "cp %s/MANIFEST %s/M.bak && sed -i s/42/43/ %s/MANIFEST", dir, dir, dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "checksum");
    ASSERT_EQ(test_run(NULL, 10, "head -c 30 %s/M.bak > %s/MANIFEST", dir, dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_ECORRUPT);
    // A missing one: with the parts still there, an incomplete save (its run stopped before the
    // commit); without them, nothing.
    ASSERT_EQ(test_run(NULL, 10, "rm %s/MANIFEST", dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "MANIFEST: missing, though the parts are there: an incomplete save");
    ASSERT_EQ(test_run(NULL, 10, "rm %s/*.bin", dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "no saved model");
}
