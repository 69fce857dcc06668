// Fuzz target: ckpt_manifest_load on DIR/MANIFEST holding the input.  Byte 0 bit 0 appends a
// correct "end CRC" line (so mutations reach the line parser instead of dying at the checksum).
// A loaded manifest must commit and load back to the same settings and file entries.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "common.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ckpt_manifest m1, m2; // large (~80 KiB): static, not on the stack

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    unsigned mode = data[0];
    size_t n = size - 1;
    char dir[600], dir2[600], path[700];
    snprintf(dir, sizeof dir, "%s/a", fuzz_dir());
    snprintf(dir2, sizeof dir2, "%s/b", fuzz_dir());
    mkdir(dir, 0700);
    mkdir(dir2, 0700);
    char *buf = malloc(n + 32); // (n + 32): the body plus a possible end line
    if (!buf) return 0;
    memcpy(buf, data + 1, n);
    size_t len = n;
    if (mode & 1) len += (size_t)snprintf(buf + n, 32, "end %08x\n", bp_crc32(0, buf, n));
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *fp = fopen(path, "wb");
    FUZZ_CHECK(fp && (len == 0 || fwrite(buf, 1, len, fp) == len) && fclose(fp) == 0);
    free(buf);
    int rc = ckpt_manifest_load(dir, &m1);
    if (rc) {
        FUZZ_CHECK(rc < 0);
        return 0;
    }
    FUZZ_CHECK(m1.n_kv >= 0 && m1.n_kv <= CKPT_MAX_KV && m1.n_files >= 0 && m1.n_files <= CKPT_MAX_FILES);
    // Nothing is skipped silently: the file starts with the format line and every line between
    // it and the end line became a setting or a file entry.
    static const char magic[] = "bagpipe-manifest 1\n";
    FUZZ_CHECK(len >= sizeof magic - 1 && memcmp(data + 1, magic, sizeof magic - 1) == 0);
    size_t lines = 0;
    for (size_t i = 0; i + 13 < len; i++) lines += data[1 + i] == '\n';
    FUZZ_CHECK(lines == 1 + (size_t)m1.n_kv + (size_t)m1.n_files);
    for (int i = 0; i < m1.n_kv; i++) {
        FUZZ_CHECK(memchr(m1.key[i], 0, CKPT_NAME_MAX) && memchr(m1.val[i], 0, CKPT_VAL_MAX));
        FUZZ_CHECK(ckpt_get(&m1, m1.key[i]) != NULL);
        int64_t v;
        (void)ckpt_get_i64(&m1, dir, m1.key[i], &v);
    }
    for (int i = 0; i < m1.n_files; i++) {
        FUZZ_CHECK(memchr(m1.files[i].name, 0, CKPT_NAME_MAX));
        FUZZ_CHECK(ckpt_find(&m1, m1.files[i].name) != NULL);
    }
    // Round trip through the writer.
    FUZZ_CHECK(ckpt_manifest_write(dir2, &m1) == 0); // its parts are not there: the write alone
    rc = ckpt_manifest_load(dir2, &m2);
    if (rc) fprintf(stderr, "%s\n", bp_errmsg(rc));
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(m2.n_kv == m1.n_kv && m2.n_files == m1.n_files);
    for (int i = 0; i < m1.n_kv; i++) FUZZ_CHECK(!strcmp(m1.key[i], m2.key[i]) && !strcmp(m1.val[i], m2.val[i]));
    for (int i = 0; i < m1.n_files; i++)
        FUZZ_CHECK(!strcmp(m1.files[i].name, m2.files[i].name) && m1.files[i].size == m2.files[i].size &&
                   m1.files[i].crc == m2.files[i].crc);
    return 0;
}
