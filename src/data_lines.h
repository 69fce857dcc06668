// data_lines: reads a raw text input (plain or gzip, told apart by the gzip magic bytes 1f 8b)
// in big blocks and splits it into lines, counting line numbers for messages; and the
// vocabulary of "bad line" kinds that the format parsers (data_criteo, data_avazu) report.
//
// A line is returned as (s, n) without its '\n' (and without a '\r' before it).  s points into
// the reader's block buffer and stays valid until the next call.  s[n] is always readable and
// is '\n' or '\r', so a scanner may stop on any byte that is not part of a field without
// checking the end first.
#ifndef BP_DATA_LINES_H
#define BP_DATA_LINES_H

#include <stddef.h>
#include <stdint.h>

#define LINES_BLOCK (4u << 20) // bytes read per refill
#define LINES_MAX (64u << 10)  // longest accepted line, without its newline

// Kinds of bad input lines, counted separately with --skip-bad.
typedef enum {
    LINES_BAD_FIELDS = 0, // wrong number of fields
    LINES_BAD_LABEL,      // label not 0 or 1
    LINES_BAD_INT,        // integer field not a number, or out of range
    LINES_BAD_CAT,        // categorical field not hex, or longer than 8 digits
    LINES_BAD_HOUR,       // Avazu hour not YYMMDDHH
    LINES_BAD_LONG,       // line longer than LINES_MAX
    LINES_BAD_BINARY,     // NUL byte: binary data, not text
    LINES_BAD_N
} lines_bad_kind;

typedef struct {
    lines_bad_kind kind;
    char msg[224]; // what was wrong and what was expected, without file:line
    // When this is the first line of its file: what the file likely is instead (every line would be
    // bad), said after msg instead of the --skip-bad hint; NULL: nothing.  On a later line, after
    // good ones, the file is not of that kind and msg alone is said.
    const char *first_line_hint;
} lines_bad;

const char *lines_bad_name(lines_bad_kind kind); // "wrong field count", ...
// Records kind and a formatted message in bad; returns 1 (the parsers' "bad line" result).
int lines_bad_set(lines_bad *bad, lines_bad_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// The LINES_BAD_BINARY explanation of a line s holding a NUL byte at nul (the Criteo and Avazu
// parsers'); returns 1.
int lines_bad_nul(const char *s, const char *nul, lines_bad *bad);
// Writes at most `max` bytes of s[0, n) into out (cap bytes) with non-printable bytes as \xNN,
// and "..." when cut.  For quoting a field in a message.
const char *lines_quote(char *out, size_t cap, const char *s, size_t n, size_t max);

typedef struct {
    const char *path;
    int fd;
    void *gz;            // the inflate state (data_lines.c) when the input is gzip, else NULL
    char *buf;           // (LINES_BLOCK + LINES_MAX + 1) bytes
    size_t cap;          // usable bytes of buf; one more is kept for the sentinel
    size_t pos, len;     // unread text is buf[pos, len)
    int eof;
    uint64_t line_no;    // 1-based number of the line last returned
    uint64_t bytes_text; // text bytes read so far (after decompression)
    uint64_t bytes_file; // bytes of the file read so far (compressed size for gzip)
    uint64_t file_size;  // size on disk (0 when not a regular file)
} lines_reader;

enum { LINES_LONG = 2 }; // lines_next: a line over LINES_MAX was skipped

// Opens path for reading.  Fails with a message for a missing or unreadable path, a directory,
// an empty file, (with need_regular) anything but a regular file, and an input that starts as an
// archive (tar, zip) or another compressor's data (bzip2, xz, zstd), after gzip decompression.
int lines_open(lines_reader *r, const char *path, int need_regular);
// The same checks, reading only the first bytes of a regular file and nothing of anything else
// (a pipe keeps its data); *size = size on disk or 0.
int lines_check(const char *path, int need_regular, uint64_t *size);
// The next line: 1 with (s, n); 0 at the end of the input; LINES_LONG when the line was longer
// than LINES_MAX (it is skipped and counted); negative BP_E* on a read error or a truncated or
// damaged gzip stream (the message names the file and the line reached).
int lines_next(lines_reader *r, const char **s, size_t *n);
// Whether lines_next has a line (or the end) without reading: a newline in the text buffered, or
// the input's end reached.  With nothing buffered, a read of a pipe may wait for its writer.
int lines_pending(const lines_reader *r);
void lines_close(lines_reader *r); // safe on a closed or failed reader

#endif
