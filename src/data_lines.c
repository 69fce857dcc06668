#include "data_lines.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "data_bin.h"

const char *lines_bad_name(lines_bad_kind kind) {
    static const char *names[LINES_BAD_N] = {
        "wrong field count", "bad label", "bad integer", "bad categorical",
        "bad hour",          "over-long line", "binary data",
    };
    return (unsigned)kind < LINES_BAD_N ? names[kind] : "unknown";
}

int lines_bad_set(lines_bad *bad, lines_bad_kind kind, const char *fmt, ...) {
    bad->kind = kind, bad->first_line_hint = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bad->msg, sizeof bad->msg, fmt, ap);
    va_end(ap);
    return 1;
}

int lines_bad_nul(const char *s, const char *nul, lines_bad *bad) {
    return lines_bad_set(bad, LINES_BAD_BINARY, "NUL byte at column %zu: binary data, expected a text line",
                         (size_t)(nul - s) + 1);
}

const char *lines_quote(char *out, size_t cap, const char *s, size_t n, size_t max) {
    BP_ASSERT(cap >= 8);
    size_t o = 0;
    for (size_t i = 0; i < n && i < max && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    if (n > max && o + 4 < cap) memcpy(out + o, "...", 3), o += 3;
    out[o] = 0;
    return out;
}

// Opens path read-only and checks that it is something prep can read.
static int lines_open_fd(const char *path, int need_regular, int *fd_out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bp_fail(BP_EIO, "%s: cannot open input: %s", path, strerror(errno));
    int rc = 0;
    if (fstat(fd, st) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot stat input: %s", path, strerror(errno));
    else if (S_ISDIR(st->st_mode))
        rc = bp_fail(BP_EINVAL, "%s: is a directory, expected a Criteo/Avazu text file (plain or gzip)", path);
    else if (need_regular && !S_ISREG(st->st_mode)) // ("-" stands for /dev/stdin)
        rc = bp_fail(BP_EINVAL, "%s: not a regular file; the frequency id mapping reads every input twice "
                     "(use a file, or --max-ind-range N for one pass)",
                     strcmp(path, "/dev/stdin") == 0 ? "the standard input (- or /dev/stdin)" : path);
    else if (S_ISREG(st->st_mode) && st->st_size == 0)
        rc = bp_fail(BP_EFORMAT, "%s: empty input file", path);
    if (rc) close(fd);
    else *fd_out = fd;
    return rc;
}

int lines_check(const char *path, int need_regular, uint64_t *size) {
    struct stat st;
    if (!need_regular && stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        *size = 0; // a pipe or device: opening it now could block or lose data; lines_open checks it
        return 0;
    }
    lines_reader r; // reads the first bytes only, to refuse an archive before any work
    int rc = lines_open(&r, path, need_regular);
    if (rc) return rc;
    *size = r.file_size;
    lines_close(&r);
    return 0;
}

static int lines_sniff(lines_reader *r);

#define LINES_GZ_IN (1u << 20) // compressed bytes read at a time

typedef struct {
    z_stream zs;
    unsigned char *in; // (LINES_GZ_IN) compressed input; zs.next_in points into it
    uint64_t in_total; // bytes read from the file
    int in_eof;        // the file has no more bytes
    int member_end;    // the last inflate ended a gzip member
    int zero_tail;     // zero bytes followed it: nothing else may come
} lines_gz;

int lines_open(lines_reader *r, const char *path, int need_regular) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->path = path;
    struct stat st;
    int fd = -1;
    int rc = lines_open_fd(path, need_regular, &fd, &st);
    if (rc) return rc;
    r->fd = fd;
    r->file_size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    r->cap = LINES_BLOCK + LINES_MAX;
    r->buf = bp_xmalloc(r->cap + 1);
    // Sniff the gzip magic; the bytes read stay in the buffer for a plain file.
    ssize_t k = 0, got;
    while (k < 2 && ((got = read(fd, r->buf + k, (size_t)(2 - k))) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0) k += got;
    if (k < 2 && got < 0) {
        int e = errno;
        lines_close(r);
        return bp_fail(BP_EIO, "%s: cannot read input: %s", path, strerror(e));
    }
    if (k == 2 && (unsigned char)r->buf[0] == 0x1f && (unsigned char)r->buf[1] == 0x8b) {
        lines_gz *g = bp_xcalloc(1, sizeof *g);
        g->in = bp_xmalloc(LINES_GZ_IN);
        if (inflateInit2(&g->zs, 15 + 16) != Z_OK) { // 16: gzip wrapper only
            free(g->in), free(g);
            lines_close(r);
            return bp_fail(BP_ENOMEM, "%s: cannot start gzip decompression", path);
        }
        memcpy(g->in, r->buf, 2); // the magic bytes read: no seek, so a pipe works too
        g->zs.next_in = g->in, g->zs.avail_in = 2;
        g->in_total = 2;
        r->gz = g;
    } else {
        r->len = (size_t)k;
        r->bytes_text = r->bytes_file = (uint64_t)k;
    }
    if ((rc = lines_sniff(r)) != 0) lines_close(r);
    return rc;
}

// Inflates up to `want` bytes of text after buf[len), member after member: concatenated gzip
// members are one stream, as gzip -d reads them.  Unlike zlib's gzread, which ignores whatever
// follows a member that is not another one, bytes after the last member are an error: a plain
// file appended to a gzip one (`cat a.gz b.txt`) would otherwise lose its lines without a word.
static int gz_fill(lines_reader *r, size_t want) {
    lines_gz *g = r->gz;
    z_stream *zs = &g->zs;
    zs->next_out = (unsigned char *)r->buf + r->len;
    zs->avail_out = (uInt)want;
    while (zs->avail_out == want) { // until some text comes out, or the end
        if (zs->avail_in == 0 && !g->in_eof) {
            ssize_t k;
            do k = read(r->fd, g->in, LINES_GZ_IN);
            while (k < 0 && errno == EINTR);
            if (k < 0)
                return bp_fail(BP_EIO, "%s:%llu: read error: %s", r->path, (unsigned long long)r->line_no + 1,
                               strerror(errno));
            if (k == 0) g->in_eof = 1;
            zs->next_in = g->in, zs->avail_in = (uInt)k;
            g->in_total += (uint64_t)k;
        }
        if (g->member_end) {
            // Zero bytes after the last member (padding to a block size) hide nothing: skipped, as
            // gzip -d does.  Anything else must start another member: 1f 8b (inflate checks the 8b).
            while (zs->avail_in && zs->next_in[0] == 0) zs->next_in++, zs->avail_in--, g->zero_tail = 1;
            if (zs->avail_in == 0) {
                if (!g->in_eof) continue; // read on
                r->eof = 1;
                break;
            }
            if (zs->next_in[0] != 0x1f || g->zero_tail)
                return bp_fail(BP_ECORRUPT, "%s:%llu: the file goes on after its gzip data with bytes that are not "
                               "gzip (from byte %llu; data appended to the .gz file?); check it with gzip -t",
                               r->path, (unsigned long long)r->line_no + 1,
                               (unsigned long long)(g->in_total - zs->avail_in));
            inflateReset(zs);
            g->member_end = 0;
        }
        if (zs->avail_in == 0 && g->in_eof)
            return bp_fail(BP_ECORRUPT, "%s:%llu: truncated gzip stream (the file ends inside compressed data; "
                           "re-download or re-compress it)", r->path, (unsigned long long)r->line_no + 1);
        int ret = inflate(zs, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) g->member_end = 1;
        else if (ret != Z_OK && (ret != Z_BUF_ERROR || zs->avail_in)) // Z_BUF_ERROR: it needs more input
            // Where inflate noticed, in the compressed file: the text is read ahead of the lines
            // parsed, so no line number says where the damage is (and a failed check at a
            // member's end says only that it is somewhere in the member).
            return bp_fail(BP_ECORRUPT, "%s: damaged gzip data (%s), found at byte %llu of the file; check it with "
                           "gzip -t, and re-download or re-compress it", r->path, zs->msg ? zs->msg : "zlib error",
                           (unsigned long long)(g->in_total - zs->avail_in));
    }
    size_t k = want - zs->avail_out;
    r->len += k;
    r->bytes_text += k;
    r->bytes_file = g->in_total - zs->avail_in;
    return 0;
}

// Reads up to `want` more bytes of text after buf[len); sets eof at the end of the input.
static int lines_fill(lines_reader *r, size_t want) {
    BP_ASSERT(want > 0 && want <= r->cap - r->len);
    if (r->gz) return gz_fill(r, want);
    ssize_t k;
    do k = read(r->fd, r->buf + r->len, want);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return bp_fail(BP_EIO, "%s:%llu: read error: %s", r->path, (unsigned long long)r->line_no + 1, strerror(errno));
    if (k == 0) r->eof = 1;
    r->len += (size_t)k;
    r->bytes_text += (uint64_t)k;
    r->bytes_file += (uint64_t)k;
    return 0;
}

// Refuses an input whose first bytes (after gzip decompression) are an archive or another
// compressor's stream: read as text, its bytes would be bad lines, and with --skip-bad the lines
// of the text files inside an archive (Criteo's Kaggle download, dac.tar.gz, holds train.txt,
// test.txt and a readme) would quietly become rows.
static int lines_sniff(lines_reader *r) {
    enum { SNIFF = 512 }; // a tar header block
    while (r->len < SNIFF && !r->eof) {
        int rc = lines_fill(r, SNIFF - r->len);
        if (rc) return rc;
    }
    static const struct {
        const char *magic;
        size_t off, n;
        const char *what, *how;
    } kinds[] = {
        {"ustar", 257, 5, "a tar archive", "extract it (tar xf) and give the text files inside, e.g. train.txt"},
        {"PK\x03\x04", 0, 4, "a zip archive", "extract it (unzip) and give the files inside (a .gz is read as it is)"},
        {"BZh", 0, 3, "bzip2 data", "decompress it first (bzip2 -d) or re-compress it with gzip"},
        {"\xfd" "7zXZ", 0, 5, "xz data", "decompress it first (xz -d) or re-compress it with gzip"},
        {"\x28\xb5\x2f\xfd", 0, 4, "zstd data", "decompress it first (zstd -d) or re-compress it with gzip"},
        {"7z\xbc\xaf\x27\x1c", 0, 6, "a 7-zip archive", "extract it (7z x) and give the files inside"},
        {"\x1f\x8b", 0, 2, "gzip data", // (inside the gzip stream: a plain file starting so is read as gzip)
         "the file was compressed twice; decompress it once (gunzip -c FILE > ONCE.gz) and give that"},
        {BP_DS_MAGIC, 0, 8, "a bagpipe dataset (the output of prep or synth)",
         "it is prepared already; give it to train, eval, analyze or info as it is"},
    };
    // Text that happens to start like one of these has no control bytes; the real ones do.
    int binary = 0;
    for (size_t i = 0; i < r->len && !binary; i++) {
        unsigned char c = (unsigned char)r->buf[i];
        binary = (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
    }
    for (size_t i = 0; i < BP_ARRAY_LEN(kinds) && binary; i++)
        if (r->len >= kinds[i].off + kinds[i].n && !memcmp(r->buf + kinds[i].off, kinds[i].magic, kinds[i].n)) {
            // a compressed dataset: the other commands read it only decompressed
            const int ds_gz = r->gz && !strcmp(kinds[i].magic, BP_DS_MAGIC);
            return bp_fail(BP_EFORMAT, "%s: %s%s, not text lines; prep reads plain or gzip text: %s", r->path,
                           kinds[i].what, r->gz ? " inside the gzip stream" : "",
                           ds_gz ? "it is prepared already; decompress it (gzip -d) and give it to train, eval, "
                                   "analyze or info" : kinds[i].how);
        }
    return 0;
}

// Moves the unread tail to the front of the buffer and refills after it.
static int lines_refill(lines_reader *r) {
    size_t avail = r->len - r->pos;
    if (r->pos) memmove(r->buf, r->buf + r->pos, avail);
    r->pos = 0, r->len = avail;
    return lines_fill(r, r->cap - r->len);
}

int lines_pending(const lines_reader *r) {
    return r->eof || memchr(r->buf + r->pos, '\n', r->len - r->pos) != NULL;
}

int lines_next(lines_reader *r, const char **s, size_t *n) {
    for (;;) {
        char *start = r->buf + r->pos;
        size_t avail = r->len - r->pos;
        char *nl = memchr(start, '\n', avail);
        if (nl) {
            size_t len = (size_t)(nl - start);
            r->pos += len + 1;
            r->line_no++;
            if (len && start[len - 1] == '\r') len--; // the limit is the text's: a CRLF file reads as its LF twin
            if (len > LINES_MAX) return LINES_LONG;
            *s = start, *n = len;
            return 1;
        }
        if (avail > LINES_MAX + 1) { // (+ 1: a line of LINES_MAX bytes and its '\r')
            // Over-long: drop text until the next newline (or the end).
            r->line_no++;
            for (;;) {
                r->pos = r->len;
                if (r->eof) return LINES_LONG;
                int rc = lines_refill(r);
                if (rc) return rc;
                nl = memchr(r->buf, '\n', r->len);
                if (nl) {
                    r->pos = (size_t)(nl - r->buf) + 1;
                    return LINES_LONG;
                }
            }
        }
        if (r->eof) {
            if (avail == 0) return 0;
            // The last line has no newline: give it the sentinel one.
            r->buf[r->len] = '\n';
            r->pos = r->len;
            r->line_no++;
            if (start[avail - 1] == '\r') avail--;
            if (avail > LINES_MAX) return LINES_LONG;
            *s = start, *n = avail;
            return 1;
        }
        int rc = lines_refill(r);
        if (rc) return rc;
    }
}

void lines_close(lines_reader *r) {
    if (r->gz) {
        lines_gz *g = r->gz;
        inflateEnd(&g->zs);
        free(g->in);
        free(g);
    }
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    r->gz = NULL, r->fd = -1, r->buf = NULL;
}
