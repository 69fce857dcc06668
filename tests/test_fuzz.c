// The short fuzz run (scripts/fuzz.sh run 2): every libFuzzer target of fuzz/ runs for 2 seconds
// from its seed corpus under ASan + UBSan, and none may crash, fail its invariants or hang.
// Skipped when clang with libFuzzer (Debian: clang-14 libclang-rt-14-dev) is not installed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "cli.h"
#include "common.h"
#include "test.h"

TEST(fuzz_short_run) {
    if (access("scripts/fuzz.sh", X_OK) != 0 || access("fuzz/corpus", R_OK) != 0) {
        test_skip("scripts/fuzz.sh or fuzz/corpus not found: run the tests from the repository root");
        return;
    }
    if (test_run(NULL, 60, "scripts/fuzz.sh check") != 0) {
        test_skip("no clang with libFuzzer (Debian packages clang-14 libclang-rt-14-dev): fuzz targets not run");
        return;
    }
    char *out = NULL;
    // Only the sources the targets link are compiled; 9 targets, 2 at a time, 2 s each.  The
    // timeout is a hang guard: compiling after a header change on a loaded machine took 300 s.
    int rc = test_run(&out, 900, "FUZZ_QUICK=1 FUZZ_JOBS=2 scripts/fuzz.sh run 2");
    if (rc != 0) fprintf(stderr, "%s\n", out ? out : "(no output)");
    ASSERT_MSG(rc == 0, "scripts/fuzz.sh run 2 exited %d (a crash's reproducer is under fuzz/crashes/)", rc);
    // Every target reports its figures: name, execs > 0, cov, ft, 0 crashes.
    static const char *const targets[] = {"avazu", "cli", "criteo", "ds_header", "ds_open",
                                          "lines", "manifest", "msg", "plan"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        const char *line = out;
        long long execs = -1, crashes = -1;
        while (line && *line) {
            char name[32];
            long long e, cov, ft, c;
            if (sscanf(line, "%31s %lld %lld %lld %lld", name, &e, &cov, &ft, &c) == 5 && !strcmp(name, targets[i]))
                execs = e, crashes = c;
            line = strchr(line, '\n');
            if (line) line++;
        }
        ASSERT_MSG(execs > 0 && crashes == 0, "target %s: execs %lld, crashes %lld in:\n%s", targets[i], execs, crashes, out);
    }
    free(out);
}

// Found by fuzz_cli: the list parsers let strtol/strtoull skip blanks and take a sign, so
// "1, -1" became 1 and 2^64 - 1, and "13- 5" or "+5" were accepted as sizes.
TEST(fuzz_regress_cli_lists_reject_blanks_and_signs) {
    uint64_t v[4];
    int d[4];
    ASSERT_EQ(cli_parse_u64_list("x", "1,2", v, 4), 2);
    ASSERT_EQ(cli_parse_u64_list("x", "1, -1", v, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_u64_list("x", " 5", v, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_u64_list("x", "+5", v, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_u64_list("x", "3,\n5", v, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_dims("x", "13-5", d, 4), 2);
    ASSERT_EQ(cli_parse_dims("x", "13- 5", d, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_dims("x", "+5", d, 4), BP_EUSAGE);
    ASSERT_EQ(cli_parse_dims("x", " 5", d, 4), BP_EUSAGE);
}

// Writes DIR/MANIFEST = body[0, n) + a correct end line; returns ckpt_manifest_load's result.
static int fuzz_manifest_try(const char *dir, const char *body, size_t n, ckpt_manifest *m) {
    char path[600];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -100;
    fwrite(body, 1, n, f);
    fprintf(f, "end %08x\n", bp_crc32(0, body, n));
    fclose(f);
    return ckpt_manifest_load(dir, m);
}

// Found by fuzz_manifest: a file holding only a correct end line loaded as a valid empty
// manifest (no format line), and an empty line or a NUL byte ended the line scan, so the
// settings and parts listed after it were dropped without an error.
TEST(fuzz_regress_manifest_nothing_skipped) {
    static ckpt_manifest m;
    const char *dir = test_tmpdir();
    static const char ok[] = "bagpipe-manifest 1\nset a 1\nfile p.bin 8 0000abcd\n";
    ASSERT_OK(fuzz_manifest_try(dir, ok, sizeof ok - 1, &m));
    ASSERT_EQ(m.n_kv, 1);
    ASSERT_EQ(m.n_files, 1);
    ASSERT_EQ(fuzz_manifest_try(dir, "", 0, &m), BP_ECORRUPT);
    static const char blank[] = "bagpipe-manifest 1\n\nfile p.bin 8 0000abcd\n";
    ASSERT_EQ(fuzz_manifest_try(dir, blank, sizeof blank - 1, &m), BP_ECORRUPT);
    static const char nul[] = "bagpipe-manifest 1\nset a 1\0x\nfile p.bin 8 0000abcd\n";
    ASSERT_EQ(fuzz_manifest_try(dir, nul, sizeof nul - 1, &m), BP_ECORRUPT);
}
