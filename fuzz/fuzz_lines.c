// Fuzz target: the line reader (lines_open / lines_next) over a file holding the input.  The
// first byte picks the mode: bit 0 set writes the rest gzip-compressed with zlib (a valid stream,
// so the reader's gzip path splits real text), otherwise the rest is written as is (which may
// itself start with the gzip magic: a damaged stream).  Every returned line must hold no '\n',
// have s[n] == '\n' or '\r', and for plain input the lines must rebuild the input exactly.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common.h"
#include "data_lines.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Writes text[0, n) gzip-compressed to path.
static void write_gzip(const char *path, const uint8_t *text, size_t n) {
    gzFile gz = gzopen(path, "wb");
    FUZZ_CHECK(gz != NULL);
    if (n) FUZZ_CHECK(gzwrite(gz, text, (unsigned)n) == (int)n);
    FUZZ_CHECK(gzclose(gz) == Z_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    int gzip = data[0] & 1;
    const uint8_t *text = data + 1;
    size_t tn = size - 1;
    char path[600];
    if (gzip) {
        snprintf(path, sizeof path, "%s/in.gz", fuzz_dir());
        write_gzip(path, text, tn);
    } else {
        fuzz_write_file("in.txt", text, tn, path, sizeof path);
    }
    lines_reader r;
    int rc = lines_open(&r, path, 1);
    if (rc) {
        FUZZ_CHECK(rc < 0);
        lines_close(&r);
        return 0;
    }
    int plain = !(tn >= 2 && text[0] == 0x1f && text[1] == 0x8b) && !gzip;
    size_t off = 0; // how much of text the lines returned so far account for (plain input)
    int exact = plain;
    uint64_t lines = 0;
    for (;;) {
        const char *s;
        size_t n;
        rc = lines_next(&r, &s, &n);
        if (rc == 0 || rc < 0) break;
        lines++;
        FUZZ_CHECK(lines == r.line_no);
        if (rc == LINES_LONG) {
            exact = 0;
            continue;
        }
        FUZZ_CHECK(rc == 1);
        FUZZ_CHECK(n <= LINES_MAX);
        FUZZ_CHECK(memchr(s, '\n', n) == NULL);
        FUZZ_CHECK(s[n] == '\n' || s[n] == '\r');
        if (exact) {
            // The line is text[off, off + n), then "\n", "\r\n" or the end of the input.
            FUZZ_CHECK(off + n <= tn && memcmp(text + off, s, n) == 0);
            off += n;
            if (off + 1 < tn && text[off] == '\r' && text[off + 1] == '\n') off += 2;
            else if (off < tn && text[off] == '\n') off += 1;
            else if (off < tn && text[off] == '\r' && off + 1 == tn) off += 1;
            else FUZZ_CHECK(off == tn);
        }
    }
    if (gzip) FUZZ_CHECK(rc == 0); // our own valid stream must read to the end
    if (exact && rc == 0) FUZZ_CHECK(off == tn);
    lines_close(&r);
    lines_close(&r); // safe twice
    return 0;
}
