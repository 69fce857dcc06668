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

// ckpt_verify reads each part in 1 MiB pieces: a part of several (an embedding table's) verifies
// whole, and a byte flipped past the first MiB is found.
TEST(ckpt_verify_reads_parts_of_several_mebibytes) {
    enum { N = 650000 }; // 2.6 MB of floats
    float *a = malloc(N * sizeof *a);
    ASSERT_TRUE(a != NULL);
    for (int i = 0; i < N; i++) a[i] = (float)i * 0.25f;
    uint8_t b[5] = {1, 2, 3, 4, 5};
    const char *dir = test_path("big");
    ASSERT_OK(save_two_parts(dir, a, N, b, 5));
    free(a);
    ckpt_manifest m;
    ASSERT_OK(ckpt_verify(dir, &m));
    ASSERT_EQ(test_run(NULL, 10, "printf Z | dd of=%s/dense.bin bs=1 seek=2000000 conv=notrunc status=none", dir), 0);
    ASSERT_EQ(ckpt_verify(dir, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "dense.bin: checksum mismatch");
}

// A checkpoint directory whose MANIFEST names another iteration (copied or renamed by hand) is
// skipped: resuming at the name's iteration with the other one's state would break the run.
TEST(ckpt_latest_skips_a_checkpoint_named_for_another_iteration) {
    char root[512], dir[600], copy[600];
    snprintf(root, sizeof root, "%s", test_path("root"));
    ASSERT_OK(ckpt_mkdir(root));
    ASSERT_OK(ckpt_dir_create(root, 50, dir, sizeof dir));
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_set(&m, "iteration", "%d", 50);
    ASSERT_OK(ckpt_manifest_commit(dir, &m));
    snprintf(copy, sizeof copy, "%s/ckpt-000000000060", root);
    ASSERT_EQ(test_run(NULL, 10, "cp -r %s %s", dir, copy), 0);
    char got[600];
    int64_t it = -1;
    ASSERT_OK(ckpt_latest(root, got, sizeof got, &it, &m));
    ASSERT_EQ(it, 50);
    ASSERT_STR_CONTAINS(got, "ckpt-000000000050");
    ASSERT_EQ(test_run(NULL, 10, "rm -r %s", dir), 0);
    ASSERT_EQ(ckpt_latest(root, got, sizeof got, &it, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "MANIFEST: iteration 50 does not match the directory name");
}

// Writes DIR/MANIFEST = body + a correct end line (crlf: every "\n" written as "\r\n", as a
// text-mode copy leaves it); returns ckpt_manifest_load's result.
static int manifest_try(const char *dir, const char *body, int crlf, ckpt_manifest *m) {
    char path[600];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -100;
    char end[32];
    snprintf(end, sizeof end, "end %08x\n", bp_crc32(0, body, strlen(body)));
    for (const char *s = body; *s; s++) fputs(*s == '\n' && crlf ? "\r\n" : (char[2]){*s, 0}, f);
    for (const char *s = end; *s; s++) fputs(*s == '\n' && crlf ? "\r\n" : (char[2]){*s, 0}, f);
    fclose(f);
    return ckpt_manifest_load(dir, m);
}

// A manifest of another format version is refused as such, naming both versions (it used to be
// "incomplete manifest (no end line)" or "checksum mismatch" when the other format ends
// otherwise); a CRLF copy is named; a setting or part given twice, and a size with a sign or one
// that overflows 64 bits, are refused (they used to load: the first of two counted, "-1" read as
// 2^64 - 1).
TEST(ckpt_manifest_versions_and_strict_entries) {
    static ckpt_manifest m;
    const char *dir = test_tmpdir();
    ASSERT_OK(manifest_try(dir, "bagpipe-manifest 1\nset a 1\nfile p.bin 18446744073709551615 0000abcd\n", 0, &m));
    ASSERT_EQ(m.files[0].size, UINT64_MAX);
    ASSERT_EQ(m.files[0].crc, 0xabcdu);

    char path[600];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fputs("bagpipe-manifest 2\nset a 1\nchecksum sha256 0123\n", f); // a future format, ending otherwise
    fclose(f);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_EVERSION);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EVERSION), "manifest format 'bagpipe-manifest 2', this build reads 'bagpipe-manifest 1'");
    ASSERT_EQ(manifest_try(dir, "bagpipe-manifest 2\nset a 1\n", 0, &m), BP_EVERSION);

    ASSERT_EQ(manifest_try(dir, "bagpipe-manifest 1\nset a 1\n", 1, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "CRLF line ends");

    ASSERT_EQ(manifest_try(dir, "bagpipe-manifest 1\nset a 1\nset a 2\n", 0, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), ":3: 'a' set twice");
    ASSERT_EQ(manifest_try(dir, "bagpipe-manifest 1\nfile p.bin 8 0000abcd\nfile p.bin 9 0000abcd\n", 0, &m),
              BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), ":3: 'p.bin' listed twice");
    static const char *const bad[] = {
        "file p.bin -1 0000abcd\n", "file p.bin +8 0000abcd\n", "file p.bin 18446744073709551616 0000abcd\n",
        "file p.bin 8 abcd\n", "file p.bin 8 0x00abcd\n", "file p.bin 8 0000abcd x\n", "file p.bin  8 0000abcd\n",
        "file p.bin 8 0000abcd0\n", "file p.bin\n",
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(bad); i++) {
        char body[200];
        snprintf(body, sizeof body, "bagpipe-manifest 1\n%s", bad[i]);
        ASSERT_EQ(manifest_try(dir, body, 0, &m), BP_ECORRUPT);
        ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), ":2: bad file entry");
    }
}

// A manifest is committed only when every part it lists is there at its size: a part another rank
// wrote where this process does not see it (a node-local disk) used to be committed as written,
// and the checkpoint was found unusable only at the resume.
TEST(ckpt_manifest_commit_needs_its_parts_here) {
    const char *dir = test_tmpdir();
    static ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_set(&m, "kind", "checkpoint");
    ckpt_file f = {.size = 4, .crc = 0};
    snprintf(f.name, sizeof f.name, "server-0.bin");
    ckpt_add_file(&m, &f);
    ASSERT_EQ(ckpt_manifest_commit(dir, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "server-0.bin: written (4 bytes) but not found here; every rank must see "
                                          "the one directory");
    char path[600];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    ASSERT_MSG(access(path, F_OK) != 0, "the manifest was committed");
    snprintf(path, sizeof path, "%s/server-0.bin", dir);
    FILE *p = fopen(path, "wb");
    ASSERT_TRUE(p != NULL);
    fputs("abc", p); // 3 bytes, where the rank wrote 4
    fclose(p);
    ASSERT_EQ(ckpt_manifest_commit(dir, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "but of another size here");
    p = fopen(path, "ab");
    ASSERT_TRUE(p != NULL);
    fputc('d', p);
    fclose(p);
    ASSERT_OK(ckpt_manifest_commit(dir, &m));
}

// Bytes appended after the end line are named as such, and a MANIFEST that cannot be opened for
// another reason than its absence (a symbolic link loop) says why: both used to read as
// "incomplete manifest (no end line)" and "no saved model or checkpoint here".
TEST(ckpt_manifest_appended_bytes_and_link_loop) {
    static ckpt_manifest m;
    const char *dir = test_tmpdir();
    ASSERT_OK(manifest_try(dir, "bagpipe-manifest 1\nset a 1\n", 0, &m));
    ASSERT_EQ(test_run(NULL, 10, "echo garbage >> %s/MANIFEST", dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "MANIFEST: 8 bytes after the end line (appended to the file)");
    ASSERT_EQ(test_run(NULL, 10, "head -c -1 %s/MANIFEST > %s/M && mv %s/M %s/MANIFEST", dir, dir, dir, dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_ECORRUPT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECORRUPT), "7 bytes after the end line");
    ASSERT_EQ(test_run(NULL, 10, "rm %s/MANIFEST && ln -s MANIFEST %s/MANIFEST", dir, dir), 0);
    ASSERT_EQ(ckpt_manifest_load(dir, &m), BP_EIO);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EIO), "MANIFEST: cannot open: Too many levels of symbolic links");
}
