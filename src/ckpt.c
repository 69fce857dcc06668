#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define MANIFEST_MAGIC "bagpipe-manifest 1"

static void join(char *buf, size_t cap, const char *dir, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
}

static int name_ok(const char *s) {
    if (!*s || strlen(s) >= CKPT_NAME_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return 0;
    return 1;
}

int ckpt_mkdir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return bp_fail(BP_EINVAL, "%s: exists and is not a directory", dir);
        return 0;
    }
    if (mkdir(dir, 0755) != 0) return bp_fail(BP_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    return 0;
}

int ckpt_dir_check(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return bp_fail(BP_EINVAL, "%s: exists and is not a directory", dir);
        if (access(dir, W_OK | X_OK) != 0)
            return bp_fail(BP_EIO, "%s: directory is not writable (%s)", dir, strerror(errno));
        return 0;
    }
    if (errno != ENOENT) return bp_fail(BP_EIO, "%s: %s", dir, strerror(errno));
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    if (stat(parent, &st) != 0)
        return bp_fail(BP_EIO, "%s: cannot create: directory '%s' does not exist", dir, parent);
    if (!S_ISDIR(st.st_mode)) return bp_fail(BP_EIO, "%s: cannot create: '%s' is not a directory", dir, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return bp_fail(BP_EIO, "%s: cannot create: directory '%s' is not writable (%s)", dir, parent, strerror(errno));
    return 0;
}

int ckpt_write_part(const char *dir, const char *name, const void *const *bufs, const size_t *lens, int n,
                    ckpt_file *out) {
    BP_ASSERT(name_ok(name));
    char path[4096];
    join(path, sizeof path, dir, name);
    bp_afile af;
    int rc = bp_afile_open(&af, path);
    if (rc) return rc;
    uint32_t crc = 0;
    uint64_t size = 0;
    for (int i = 0; i < n && !rc; i++) {
        crc = bp_crc32(crc, bufs[i], lens[i]);
        size += lens[i];
        rc = bp_afile_write(&af, bufs[i], lens[i]);
    }
    if (rc) {
        bp_afile_abort(&af);
        return rc;
    }
    rc = bp_afile_commit(&af);
    if (rc) return rc;
    snprintf(out->name, sizeof out->name, "%s", name);
    out->size = size;
    out->crc = crc;
    return 0;
}

void ckpt_manifest_init(ckpt_manifest *m) { memset(m, 0, sizeof *m); }

void ckpt_set(ckpt_manifest *m, const char *key, const char *fmt, ...) {
    BP_ASSERT(name_ok(key));
    int i;
    for (i = 0; i < m->n_kv; i++)
        if (strcmp(m->key[i], key) == 0) break;
    if (i == m->n_kv) {
        BP_ASSERT(m->n_kv < CKPT_MAX_KV);
        snprintf(m->key[m->n_kv++], CKPT_NAME_MAX, "%s", key);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->val[i], CKPT_VAL_MAX, fmt, ap);
    va_end(ap);
    BP_ASSERTF(!strchr(m->val[i], '\n'), "manifest value for %s has a newline", key);
}

void ckpt_add_file(ckpt_manifest *m, const ckpt_file *f) {
    for (int i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i].name, f->name) == 0) {
            m->files[i] = *f;
            return;
        }
    BP_ASSERT(m->n_files < CKPT_MAX_FILES);
    m->files[m->n_files++] = *f;
}

const char *ckpt_get(const ckpt_manifest *m, const char *key) {
    for (int i = 0; i < m->n_kv; i++)
        if (strcmp(m->key[i], key) == 0) return m->val[i];
    return NULL;
}

int ckpt_get_i64(const ckpt_manifest *m, const char *dir, const char *key, int64_t *v) {
    const char *s = ckpt_get(m, key);
    if (!s) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: missing '%s'", dir, key);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: '%s' is not an integer: %s", dir, key, s);
    *v = x;
    return 0;
}

const ckpt_file *ckpt_find(const ckpt_manifest *m, const char *name) {
    for (int i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i].name, name) == 0) return &m->files[i];
    return NULL;
}

int ckpt_manifest_commit(const char *dir, const ckpt_manifest *m) {
    size_t cap = 4096 + (size_t)m->n_kv * (CKPT_NAME_MAX + CKPT_VAL_MAX + 4) + (size_t)m->n_files * (CKPT_NAME_MAX + 48);
    char *buf = bp_xmalloc(cap);
    size_t len = (size_t)snprintf(buf, cap, "%s\n", MANIFEST_MAGIC);
    for (int i = 0; i < m->n_kv; i++) len += (size_t)snprintf(buf + len, cap - len, "set %s %s\n", m->key[i], m->val[i]);
    for (int i = 0; i < m->n_files; i++)
        len += (size_t)snprintf(buf + len, cap - len, "file %s %llu %08x\n", m->files[i].name,
                                (unsigned long long)m->files[i].size, m->files[i].crc);
    len += (size_t)snprintf(buf + len, cap - len, "end %08x\n", bp_crc32(0, buf, len));
    BP_ASSERT(len < cap);
    char path[4096];
    join(path, sizeof path, dir, "MANIFEST");
    bp_afile af;
    int rc = bp_afile_open(&af, path);
    if (!rc) rc = bp_afile_write(&af, buf, len);
    if (!rc) rc = bp_afile_commit(&af);
    else bp_afile_abort(&af);
    free(buf);
    return rc;
}

int ckpt_manifest_load(const char *dir, ckpt_manifest *m) {
    ckpt_manifest_init(m);
    char path[4096];
    join(path, sizeof path, dir, "MANIFEST");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bp_fail(BP_EIO, "%s: no saved model or checkpoint here (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 22)) {
        close(fd);
        return bp_fail(BP_ECORRUPT, "%s: not a manifest file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = bp_xmalloc(n + 1);
    int rc = bp_read_all(fd, buf, n, path);
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    // The last line is "end CRC" over everything before it.
    char *endl = n >= 13 ? buf + n - 13 : NULL; // "end XXXXXXXX\n"
    unsigned crc_want;
    if (!endl || strncmp(endl, "end ", 4) != 0 || buf[n - 1] != '\n' || sscanf(endl + 4, "%8x", &crc_want) != 1 ||
        (endl != buf && endl[-1] != '\n')) {
        free(buf);
        return bp_fail(BP_ECORRUPT, "%s: incomplete manifest (no end line)", path);
    }
    if (bp_crc32(0, buf, (size_t)(endl - buf)) != crc_want) {
        free(buf);
        return bp_fail(BP_ECORRUPT, "%s: manifest checksum mismatch (file damaged)", path);
    }
    // Every line before the end line is parsed: no format line, an empty line or a NUL byte
    // (which would end the line scan early and hide the lines after it) make the file invalid.
    if (endl == buf || memchr(buf, 0, (size_t)(endl - buf))) {
        free(buf);
        return bp_fail(BP_ECORRUPT, "%s: %s", path, endl == buf ? "no format line" : "NUL byte in the manifest");
    }
    *endl = 0;
    int lineno = 0;
    rc = 0;
    for (char *line = buf, *next; line < endl && !rc; line = next) {
        next = strchr(line, '\n'); // found: endl[-1] is a newline
        *next++ = 0;
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, MANIFEST_MAGIC) != 0) rc = bp_fail(BP_EVERSION, "%s:1: unknown manifest format '%s'", path, line);
            continue;
        }
        if (strncmp(line, "set ", 4) == 0) {
            char *key = line + 4, *sp = strchr(key, ' ');
            if (!sp) {
                rc = bp_fail(BP_ECORRUPT, "%s:%d: malformed line", path, lineno);
                break;
            }
            *sp = 0;
            if (!name_ok(key) || m->n_kv >= CKPT_MAX_KV || strlen(sp + 1) >= CKPT_VAL_MAX) {
                rc = bp_fail(BP_ECORRUPT, "%s:%d: bad setting", path, lineno);
                break;
            }
            snprintf(m->key[m->n_kv], CKPT_NAME_MAX, "%s", key);
            snprintf(m->val[m->n_kv], CKPT_VAL_MAX, "%s", sp + 1);
            m->n_kv++;
        } else if (strncmp(line, "file ", 5) == 0) {
            char name[CKPT_NAME_MAX + 1];
            unsigned long long size;
            unsigned crc;
            char extra;
            if (m->n_files >= CKPT_MAX_FILES ||
                sscanf(line + 5, "%64s %llu %8x %c", name, &size, &crc, &extra) != 3 || !name_ok(name)) {
                rc = bp_fail(BP_ECORRUPT, "%s:%d: bad file entry", path, lineno);
                break;
            }
            ckpt_file *f = &m->files[m->n_files++];
            memcpy(f->name, name, strlen(name) + 1); // name_ok: shorter than CKPT_NAME_MAX
            f->size = size, f->crc = crc;
        } else {
            rc = bp_fail(BP_ECORRUPT, "%s:%d: unknown line", path, lineno);
        }
    }
    free(buf);
    return rc;
}

int ckpt_read_part(const char *dir, const ckpt_manifest *m, const char *name, void *const *bufs, const size_t *lens,
                   int n) {
    char path[4096];
    join(path, sizeof path, dir, name);
    const ckpt_file *f = ckpt_find(m, name);
    if (!f) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: does not list '%s'", dir, name);
    uint64_t want = 0;
    for (int i = 0; i < n; i++) want += lens[i];
    if (want != f->size)
        return bp_fail(BP_EMISMATCH, "%s: holds %llu bytes, this configuration needs %llu", path,
                       (unsigned long long)f->size, (unsigned long long)want);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bp_fail(BP_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != f->size)
        rc = bp_fail(BP_ECORRUPT, "%s: size differs from the manifest (truncated or replaced)", path);
    uint32_t crc = 0;
    uint64_t off = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = bp_pread_all(fd, bufs[i], lens[i], off, path);
        crc = bp_crc32(crc, bufs[i], lens[i]);
        off += lens[i];
    }
    close(fd);
    if (!rc && crc != f->crc) rc = bp_fail(BP_ECORRUPT, "%s: checksum mismatch (file damaged)", path);
    return rc;
}
