#include "jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

void jsonl_begin(jsonl *j) {
    j->buf[0] = '{';
    j->len = 1;
    j->n = 0;
}

static void put(jsonl *j, const char *s, size_t n) {
    BP_ASSERTF(j->len + n + 3 < sizeof j->buf, "jsonl line too long");
    memcpy(j->buf + j->len, s, n);
    j->len += n;
}

// The length of the well-formed UTF-8 sequence at s (1-4 bytes), or 0 where s starts none
// (a stray continuation byte, an overlong form, a surrogate, a code point above U+10FFFF, or a
// sequence cut short, by the NUL that ends s among others).
static size_t utf8_len(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0; // overlong, surrogate
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0; // overlong, > U+10FFFF
    return n;
}

// The start of s as it goes into a JSON string literal: out gets the bytes to write (their count
// returned) and *used the bytes of s they stand for.  '"', backslash and control characters are
// escaped; a byte that is not UTF-8 (a file name in another encoding) becomes U+FFFD, so that the
// line stays valid JSON.
static size_t escape_next(const char *s, char out[8], size_t *used) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = utf8_len(u);
    *used = n ? n : 1;
    if (n == 0) return memcpy(out, "\\ufffd", 6), 6;
    if (n > 1) return memcpy(out, s, n), n;
    if (u[0] == '"' || u[0] == '\\') return out[0] = '\\', out[1] = (char)u[0], 2;
    if (u[0] < 0x20) return (size_t)snprintf(out, 8, "\\u%04x", u[0]);
    return out[0] = (char)u[0], 1;
}

static void put_string(jsonl *j, const char *s) {
    char esc[8];
    size_t used;
    put(j, "\"", 1);
    for (; *s; s += used) put(j, esc, escape_next(s, esc, &used));
    put(j, "\"", 1);
}

void jsonl_fput_string(FILE *f, const char *s) {
    char esc[8];
    size_t used;
    fputc('"', f);
    for (; *s; s += used) fwrite(esc, 1, escape_next(s, esc, &used), f);
    fputc('"', f);
}

static void put_key(jsonl *j, const char *key) {
    if (j->n++) put(j, ",", 1);
    put_string(j, key);
    put(j, ":", 1);
}

void jsonl_str(jsonl *j, const char *key, const char *val) {
    put_key(j, key);
    put_string(j, val);
}

void jsonl_int(jsonl *j, const char *key, int64_t val) {
    char b[32];
    put_key(j, key);
    put(j, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)val));
}

void jsonl_num(jsonl *j, const char *key, double val) {
    char b[40];
    put_key(j, key);
    if (!isfinite(val)) put(j, "null", 4);
    else put(j, b, (size_t)snprintf(b, sizeof b, "%.9g", val));
}

// 1 when path is this process's standard output (-m /dev/stdout, or its file by name): the lines
// then go through stdout itself.  A second open of a redirected stdout's file would write at its
// own offset, over the text that stdout writes at the other, and its content (that text) is no
// reason to refuse it.  A distributed job's ranks write to a pipe to the launcher, whose stdout
// the file is: the launcher names the path in JSONL_ENV_STDOUT (jsonl_pass_stdout).
static int names_stdout(const char *path) {
    struct stat a, b;
    if (stat(path, &a) == 0 && fstat(STDOUT_FILENO, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 1;
    const char *via = getenv(JSONL_ENV_STDOUT);
    return via && strcmp(via, path) == 0;
}

void jsonl_pass_stdout(const char *path) {
    if (path && names_stdout(path)) setenv(JSONL_ENV_STDOUT, path, 1);
}

int jsonl_check(const char *flag, const char *path) {
    if (!path || names_stdout(path)) return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0; // missing (created later) or unreadable: jsonl_open says why
    struct stat st;
    unsigned char c = '{';
    // Only regular files are read: a FIFO or a terminal (-m /dev/stdout) is appended to as it is.
    int bad = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && read(fd, &c, 1) == 1 && c != '{' &&
              c != '\n';
    close(fd);
    if (bad)
        return bp_fail(BP_EUSAGE, "%s %s: exists and is not a JSON-lines metrics file (it does not start with '{'); "
                       "metrics are appended only to such a file: choose another name", flag, path);
    return 0;
}

int jsonl_open(jsonl_file *jf, const char *flag, const char *path) {
    memset(jf, 0, sizeof *jf);
    jf->flag = flag;
    if (!path) return 0;
    int chk = jsonl_check(flag, path);
    if (chk) return chk;
    if (names_stdout(path)) {
        fflush(stdout);
        jf->f = stdout, jf->is_stdout = 1, jf->path = bp_xstrdup(path);
        return 0;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    jf->created = fd >= 0;
    // EEXIST: an existing file is appended to; so is a symbolic link, whose target is created if
    // it does not exist yet (O_EXCL never follows a link).
    if (fd < 0 && errno == EEXIST) fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || !(jf->f = fdopen(fd, "a"))) {
        int rc = bp_fail(BP_EIO, "%s %s: cannot open: %s", flag, path, strerror(errno));
        if (fd >= 0) close(fd);
        if (jf->created) unlink(path);
        memset(jf, 0, sizeof *jf);
        return rc;
    }
    // A last line without its newline (a run killed mid-line, a full disk) would swallow the
    // first new one: start on a line of its own.
    struct stat st;
    char last = '\n';
    int rd = jf->created ? -1 : open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); // fd is write-only
    if (rd >= 0 && fstat(rd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        if (pread(rd, &last, 1, st.st_size - 1) != 1) last = '\n';
    if (rd >= 0) close(rd);
    if (last != '\n') {
        fprintf(stderr, "bagpipe: warning: %s %s: its last line is cut short (no newline at the end); the new "
                "lines start on a line of their own\n", flag, path);
        fputc('\n', jf->f);
    }
    jf->path = bp_xstrdup(path);
    return 0;
}

// quiet: the caller already failed with its own message, which this one must not replace.
static int write_failed(jsonl_file *jf, int err, int quiet) {
    if (!jf->rc)
        jf->rc = quiet ? BP_EIO
                       : bp_fail(BP_EIO, "%s %s: cannot write: %s", jf->flag, jf->path, strerror(err ? err : EIO));
    return jf->rc;
}

void jsonl_first(jsonl *j, jsonl_file *jf) {
    put(j, "}\n", 2);
    if (!jf || !jf->f) return;
    free(jf->first);
    jf->first = bp_xmalloc(j->len + 1);
    memcpy(jf->first, j->buf, j->len);
    jf->first[j->len] = 0;
}

int jsonl_end(jsonl *j, jsonl_file *jf) {
    put(j, "}\n", 2);
    if (!jf || !jf->f) return 0;
    if (jf->rc) return jf->rc;
    errno = 0;
    if (jf->first) {
        const size_t n = strlen(jf->first);
        const int bad = fwrite(jf->first, 1, n, jf->f) != n;
        free(jf->first), jf->first = NULL;
        if (bad) return write_failed(jf, errno, 0);
    }
    if (fwrite(j->buf, 1, j->len, jf->f) != j->len || fflush(jf->f) != 0 || ferror(jf->f))
        return write_failed(jf, errno, 0);
    return 0;
}

int jsonl_close(jsonl_file *jf, int rc) {
    free(jf->first), jf->first = NULL;
    if (!jf->f) return rc ? rc : jf->rc;
    errno = 0;
    if (fflush(jf->f) != 0 || ferror(jf->f)) write_failed(jf, errno, rc != 0);
    if (jf->is_stdout) { // stdout stays open for the rest of the output
        if (!rc) rc = jf->rc;
        free(jf->path);
        memset(jf, 0, sizeof *jf);
        return rc;
    }
    // A file this run created and never wrote to (it failed first) is not left behind.
    struct stat st, now;
    if (jf->created && fstat(fileno(jf->f), &st) == 0 && st.st_size == 0 && stat(jf->path, &now) == 0 &&
        now.st_dev == st.st_dev && now.st_ino == st.st_ino)
        unlink(jf->path);
    errno = 0;
    if (fclose(jf->f) != 0) write_failed(jf, errno, rc != 0);
    if (!rc) rc = jf->rc;
    free(jf->path);
    memset(jf, 0, sizeof *jf);
    return rc;
}
