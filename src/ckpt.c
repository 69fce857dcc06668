#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define MANIFEST_MAGIC "bagpipe-manifest 1"

// The length of dir without trailing slashes ("ck/" and "ck" name one directory; "/" stays "/"
// as the empty prefix of "/name"), so that joined paths read "ck/name", not "ck//name".
static int dir_len(const char *dir) {
    size_t n = strlen(dir);
    while (n > 0 && dir[n - 1] == '/') n--;
    return (int)n;
}

static void join(char *buf, size_t cap, const char *dir, const char *name) {
    snprintf(buf, cap, "%.*s/%s", dir_len(dir), dir, name);
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

// Whether a directory can really be made in dir: access() answers yes to root on a virtual
// filesystem such as /proc, where nothing can be created.  A uniquely named directory is made and
// removed, so the checks of concurrent processes (every rank of a job) do not meet.
static int dir_probe(const char *dir) {
    char tmpl[4200];
    snprintf(tmpl, sizeof tmpl, "%s/.bagpipe-probe-XXXXXX", dir);
    if (!mkdtemp(tmpl)) return -1;
    rmdir(tmpl);
    return 0;
}

static int not_writable(int err) { return err == EACCES || err == EPERM || err == EROFS; }

int ckpt_dir_check(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return bp_fail(BP_EINVAL, "%s: exists and is not a directory", dir);
        if (dir_probe(dir) != 0)
            return bp_fail(BP_EIO, "%s: directory is not writable (%s)", dir, strerror(errno));
        return 0;
    }
    if (errno != ENOENT) return bp_fail(BP_EIO, "%s: %s", dir, strerror(errno));
    char target[4096], link[4096];
    snprintf(link, sizeof link, "%s", dir);
    for (size_t k = strlen(link); k > 1 && link[k - 1] == '/';) link[--k] = 0; // "L/" names the link L too
    ssize_t tn = readlink(link, target, sizeof target - 1);
    if (tn >= 0) // a dangling link: mkdir would fail on it after the work
        return bp_fail(BP_EIO, "%s: a symbolic link to '%.*s', which does not exist: make that directory or choose "
                       "another", dir, (int)tn, target);
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
    if (dir_probe(parent) != 0) {
        if (not_writable(errno))
            return bp_fail(BP_EIO, "%s: cannot create: directory '%s' is not writable (%s)", dir, parent, strerror(errno));
        return bp_fail(BP_EIO, "%s: cannot create: no directory can be made in '%s' (%s)", dir, parent, strerror(errno));
    }
    return 0;
}

int ckpt_save_dir_check(const char *dir) {
    static const char magic[] = "bagpipe-manifest"; // any version's first line
    char path[4200];
    join(path, sizeof path, dir, "MANIFEST");
    struct stat st;
    if (lstat(path, &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0)) {
        // No model here: a file under a part's name is not one (it may be the dataset itself, or
        // a part of a save killed before its MANIFEST), and the save would replace it unasked.
        static const char *const parts[] = {"dense.bin", "emb.bin"};
        for (size_t i = 0; i < BP_ARRAY_LEN(parts); i++) {
            join(path, sizeof path, dir, parts[i]);
            if (lstat(path, &st) == 0)
                return bp_fail(BP_EUSAGE, "%s: exists, and no bagpipe MANIFEST beside it makes it a saved model's "
                               "part; the save would replace it: move it away or choose another directory", path);
        }
        return 0;
    }
    char head[sizeof magic - 1];
    int fd = S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    int ours = fd >= 0 && read(fd, head, sizeof head) == (ssize_t)sizeof head && memcmp(head, magic, sizeof head) == 0;
    if (fd >= 0) close(fd);
    if (ours) return 0;
    return bp_fail(BP_EUSAGE, "%s: exists and is not a bagpipe manifest (it does not start with '%s'); the saved "
                   "model's MANIFEST would take its place: choose another directory", path, magic);
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

int ckpt_manifest_write(const char *dir, const ckpt_manifest *m) {
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

int ckpt_manifest_commit(const char *dir, const ckpt_manifest *m) {
    // Every part it lists is here, at its size: a rank that wrote its part into a directory this
    // process does not see (a node-local disk in a multi-host job) used to have its checkpoints
    // committed, listed as written, and then found unusable at the resume.
    char part[4200];
    for (int i = 0; i < m->n_files; i++) {
        struct stat st;
        join(part, sizeof part, dir, m->files[i].name);
        const int found = stat(part, &st) == 0;
        if (!found || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != m->files[i].size)
            return bp_fail(BP_EIO, "%s: written (%llu bytes) but %s here; every rank must see the one directory "
                           "(on a shared file system), and nothing else may change it", part,
                           (unsigned long long)m->files[i].size, found ? "of another size" : "not found");
    }
    return ckpt_manifest_write(dir, m);
}

// 1 when dir holds a part (a *.bin file): parts without a MANIFEST are a save or checkpoint whose
// run stopped before committing it.
static int holds_parts(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        const size_t n = strlen(e->d_name);
        found = n > 4 && strcmp(e->d_name + n - 4, ".bin") == 0;
    }
    closedir(d);
    return found;
}

// "NAME SIZE CRC" exactly as ckpt_manifest_commit writes it: SIZE decimal digits that fit in 64
// bits (no sign: sscanf's %llu takes "-1" as 2^64 - 1), CRC 8 hex digits, single spaces.
static int parse_file_entry(const char *s, char *name, uint64_t *size, uint32_t *crc) {
    const char *sp = strchr(s, ' ');
    if (!sp || sp == s || (size_t)(sp - s) >= CKPT_NAME_MAX) return -1;
    memcpy(name, s, (size_t)(sp - s)), name[sp - s] = 0;
    if (!name_ok(name)) return -1;
    const char *d = sp + 1;
    uint64_t v = 0;
    int nd = 0;
    for (; *d >= '0' && *d <= '9'; d++, nd++) {
        if (v > (UINT64_MAX - (uint64_t)(*d - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(*d - '0');
    }
    if (nd == 0 || *d != ' ') return -1;
    d++;
    uint32_t c = 0;
    for (int i = 0; i < 8; i++, d++) {
        const int h = *d >= '0' && *d <= '9' ? *d - '0' : *d >= 'a' && *d <= 'f' ? *d - 'a' + 10 : -1;
        if (h < 0) return -1;
        c = c << 4 | (uint32_t)h;
    }
    if (*d) return -1;
    *size = v, *crc = c;
    return 0;
}

int ckpt_manifest_load(const char *dir, ckpt_manifest *m) {
    ckpt_manifest_init(m);
    char path[4096];
    join(path, sizeof path, dir, "MANIFEST");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && holds_parts(dir))
        return bp_fail(BP_EIO, "%s: missing, though the parts are there: an incomplete save or checkpoint (its run "
                       "stopped before committing it)", path);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        return bp_fail(BP_EIO, "%s: no saved model or checkpoint here (%s)", path, strerror(errno));
    if (fd < 0) return bp_fail(BP_EIO, "%s: cannot open: %s", path, strerror(errno)); // a symbolic link loop...
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
    // The format line first: a manifest of another format version may end otherwise, and is
    // refused as such, not as damaged.  A copy converted to CRLF line ends is named too.
    const size_t ml = strlen(MANIFEST_MAGIC);
    const char *nl = memchr(buf, '\n', n);
    const size_t l1 = nl ? (size_t)(nl - buf) : n;
    if (nl && l1 == ml + 1 && buf[ml] == '\r' && memcmp(buf, MANIFEST_MAGIC, ml) == 0) {
        free(buf);
        return bp_fail(BP_ECORRUPT, "%s: CRLF line ends (converted by a text-mode copy?); its checksum is over LF "
                       "line ends: convert it back (dos2unix)", path);
    }
    if (n > 17 && memcmp(buf, "bagpipe-manifest ", 17) == 0 && (l1 != ml || memcmp(buf, MANIFEST_MAGIC, ml) != 0)) {
        rc = bp_fail(BP_EVERSION, "%s:1: manifest format '%.*s', this build reads '%s' (written by another version "
                     "of bagpipe)", path, (int)BP_MIN(l1, (size_t)64), buf, MANIFEST_MAGIC);
        free(buf);
        return rc;
    }
    // The last line is "end CRC" over everything before it.
    char *endl = n >= 13 ? buf + n - 13 : NULL; // "end XXXXXXXX\n"
    unsigned crc_want;
    if (!endl || strncmp(endl, "end ", 4) != 0 || buf[n - 1] != '\n' || sscanf(endl + 4, "%8x", &crc_want) != 1 ||
        (endl != buf && endl[-1] != '\n')) {
        // An end line followed by more: something appended to the file.
        const char *e = n >= 13 && strncmp(buf, "end ", 4) == 0 ? buf : NULL;
        for (const char *p = buf; !e && (p = strstr(p, "\nend ")) != NULL; p++)
            if (strspn(p + 5, "0123456789abcdef") == 8 && p[13] == '\n') e = p + 1;
        const size_t extra = e ? n - (size_t)(e + 13 - buf) : 0;
        free(buf);
        if (e && extra > 0)
            return bp_fail(BP_ECORRUPT, "%s: %zu byte%s after the end line (appended to the file)", path, extra,
                           extra == 1 ? "" : "s");
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
            if (ckpt_get(m, key)) { // which one would count?
                rc = bp_fail(BP_ECORRUPT, "%s:%d: '%s' set twice", path, lineno, key);
                break;
            }
            snprintf(m->key[m->n_kv], CKPT_NAME_MAX, "%s", key);
            snprintf(m->val[m->n_kv], CKPT_VAL_MAX, "%s", sp + 1);
            m->n_kv++;
        } else if (strncmp(line, "file ", 5) == 0) {
            char name[CKPT_NAME_MAX + 1];
            uint64_t size;
            uint32_t crc;
            if (m->n_files >= CKPT_MAX_FILES || parse_file_entry(line + 5, name, &size, &crc) != 0) {
                rc = bp_fail(BP_ECORRUPT, "%s:%d: bad file entry", path, lineno);
                break;
            }
            if (ckpt_find(m, name)) {
                rc = bp_fail(BP_ECORRUPT, "%s:%d: '%s' listed twice", path, lineno, name);
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

// ---------------------------------------------------------------------------------------------
// Training checkpoints

void ckpt_dir_path(char *buf, size_t cap, const char *root, int64_t iter) {
    snprintf(buf, cap, "%.*s/" CKPT_DIR_PREFIX "%012lld", dir_len(root), root, (long long)iter);
}

static int mkdir_shared(const char *dir) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return ckpt_mkdir(dir); // ckpt_mkdir checks it is a directory
    return bp_fail(BP_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
}

int ckpt_dir_create(const char *root, int64_t iter, char *dir, size_t cap) {
    int rc = mkdir_shared(root);
    if (rc) return rc;
    ckpt_dir_path(dir, cap, root, iter);
    return mkdir_shared(dir);
}

int ckpt_verify(const char *dir, ckpt_manifest *m) {
    int rc = ckpt_manifest_load(dir, m);
    if (rc) return rc;
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = NULL;
    char path[4096];
    for (int i = 0; i < m->n_files && !rc; i++) {
        const ckpt_file *f = &m->files[i];
        join(path, sizeof path, dir, f->name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = bp_fail(BP_ECORRUPT, "%s: listed in the manifest but missing (%s)", path, strerror(errno));
            break;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != f->size) {
            close(fd);
            rc = bp_fail(BP_ECORRUPT, "%s: %llu bytes, the manifest says %llu (truncated or replaced)", path,
                         (unsigned long long)st.st_size, (unsigned long long)f->size);
            break;
        }
        if (!buf) buf = bp_xmalloc(CHUNK);
        uint32_t crc = 0;
        for (uint64_t off = 0; off < f->size && !rc; off += CHUNK) {
            size_t n = (size_t)BP_MIN((uint64_t)CHUNK, f->size - off);
            rc = bp_pread_all(fd, buf, n, off, path);
            crc = bp_crc32(crc, buf, n);
        }
        close(fd);
        if (!rc && crc != f->crc) rc = bp_fail(BP_ECORRUPT, "%s: checksum mismatch (file damaged)", path);
    }
    free(buf);
    return rc;
}

// Iterations of root's ckpt-<12 digits> entries, ascending; *n of them (malloc'd list).
static int list_ckpts(const char *root, int64_t **out, int *n) {
    *out = NULL, *n = 0;
    DIR *d = opendir(root);
    if (!d) return bp_fail(BP_EIO, "%s: cannot read the checkpoint directory: %s", root, strerror(errno));
    int cap = 0;
    int64_t *v = NULL;
    struct dirent *e;
    const size_t pl = strlen(CKPT_DIR_PREFIX);
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (strncmp(s, CKPT_DIR_PREFIX, pl) != 0 || strlen(s) != pl + 12) continue;
        int64_t it = 0;
        int ok = 1;
        for (const char *c = s + pl; *c; c++) {
            if (*c < '0' || *c > '9') ok = 0;
            else it = it * 10 + (*c - '0');
        }
        if (!ok) continue;
        if (*n == cap) v = bp_xrealloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *v);
        v[(*n)++] = it;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) // insertion sort: a handful of entries
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int64_t x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    *out = v;
    return 0;
}

// The lock files this process holds (ckpt_lock_root), and whether it created them: one it created
// is no sign of an earlier run in the root (no_ckpt_here), and goes at a normal exit if the root
// holds no checkpoint then (ckpt_drop_created_locks).  So a lock file left in a root without
// checkpoints says that a run was killed there before its first one.
static struct {
    dev_t dev;
    ino_t ino;
    int created;
    char *path; // when created
} held[4];
static int n_held;

void ckpt_drop_created_locks(void) {
    for (int i = 0; i < n_held; i++) {
        if (!held[i].created) continue;
        held[i].created = 0; // once
        char *root = bp_xstrdup(held[i].path);
        char *slash = strrchr(root, '/');
        if (slash) *slash = 0;
        int64_t *its = NULL;
        int n = 0;
        if (list_ckpts(root, &its, &n) == 0 && n == 0) unlink(held[i].path);
        bp_clear_error();
        free(its), free(root);
    }
}

// The entry of held[] for the file st describes, or -1.
static int held_find(const struct stat *st) {
    for (int i = 0; i < n_held; i++)
        if (held[i].dev == st->st_dev && held[i].ino == st->st_ino) return i;
    return -1;
}

static int lock_created_here(const char *path) {
    struct stat st;
    const int i = stat(path, &st) == 0 ? held_find(&st) : -1;
    return i >= 0 && held[i].created;
}

// ROOT holds no ckpt-* directory.  It may be one checkpoint (ck/ckpt-000000000500, the form eval
// --load also takes) or a saved model (--save): both have a MANIFEST, and the message says what
// to give instead.  Or a run's --checkpoint-dir that wrote none (its .lock is there, and not
// created by this job).
static int no_ckpt_here(const char *root) {
    char path[4200], parent[4096];
    snprintf(path, sizeof path, "%s/MANIFEST", root);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/.lock", root);
        if (access(path, F_OK) == 0 && !lock_created_here(path))
            return bp_fail(BP_EIO, "%s: no checkpoint here yet (no " CKPT_DIR_PREFIX "* directory): a run used it "
                           "(%s) but was stopped before its first checkpoint; start it again without --resume", root,
                           path);
        return bp_fail(BP_EIO, "%s: no checkpoint here (no " CKPT_DIR_PREFIX "* directory)", root);
    }
    snprintf(parent, sizeof parent, "%s", root);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    if (strncmp(base, CKPT_DIR_PREFIX, strlen(CKPT_DIR_PREFIX)) == 0) {
        if (slash == parent) parent[1] = 0;
        else if (slash) *slash = 0;
        else snprintf(parent, sizeof parent, ".");
        return bp_fail(BP_EIO, "%s: no checkpoint here (no " CKPT_DIR_PREFIX "* directory): this is one checkpoint; "
                       "give the directory that holds them (%s): the newest valid one there is taken", root, parent);
    }
    return bp_fail(BP_EIO, "%s: no checkpoint here (no " CKPT_DIR_PREFIX "* directory): this is a saved model "
                   "(--save); a run resumes from the checkpoints that --checkpoint-every or --checkpoint-minutes "
                   "write under --checkpoint-dir", root);
}

// 1 when another live process holds root's lock: a job writing checkpoints there now, whose newest
// one may be unfinished (no MANIFEST yet) or pruned while it is read.
// Judged by taking the lock shared for an instant (the pid the holder wrote into the file may be
// another process's by now, or another host's); a job starting at that instant retries its own
// exclusive lock for a moment (ckpt_lock_root), so it is not refused for it.
static int root_busy(const char *root) {
    char path[4200], who[32] = "";
    join(path, sizeof path, root, ".lock");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    const int mine = fstat(fd, &st) == 0 && held_find(&st) >= 0;
    // The job's flock says it is alive, where the pid in the file may have been reused by another
    // process (or be another host's): a shared lock taken at once means no job holds the root.
    if (!mine && flock(fd, LOCK_SH | LOCK_NB) == 0) {
        close(fd);
        return 0;
    }
    const int taken = !mine && (errno == EWOULDBLOCK || errno == EAGAIN);
    const ssize_t got = taken ? 0 : pread(fd, who, sizeof who - 1, 0);
    close(fd);
    if (mine || taken) return taken;
    const long pid = got > 0 ? strtol(who, NULL, 10) : 0; // no flock here (ENOLCK): the pid's process
    return pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

int ckpt_latest(const char *root, char *dir, size_t cap, int64_t *iter, ckpt_manifest *m) {
    int64_t *its;
    int n, rc = list_ckpts(root, &its, &n);
    if (rc) return rc;
    char first_bad[1200] = "";
    for (int i = n - 1; i >= 0; i--) {
        ckpt_dir_path(dir, cap, root, its[i]);
        int64_t it = -1;
        rc = ckpt_verify(dir, m);
        if (!rc && (rc = ckpt_get_i64(m, dir, "iteration", &it)) == 0 && it != its[i])
            rc = bp_fail(BP_ECORRUPT, "%s/MANIFEST: iteration %lld does not match the directory name", dir, (long long)it);
        if (!rc) {
            *iter = its[i];
            free(its);
            return 0;
        }
        // once per job: the ranks of a job scan too, with warnings off (train.c).  A checkpoint that a
        // live job is writing is not one whose run stopped before committing it.
        char man[4200];
        join(man, sizeof man, dir, "MANIFEST");
        char busy[600] = ""; // what is wrong, when a live job is still writing it (else rc's message)
        if (i == n - 1 && access(man, F_OK) != 0 && root_busy(root))
            snprintf(busy, sizeof busy, "not complete yet (a running job is writing into %s)", root);
        if (bp_log_level >= BP_LOG_WARN)
            fprintf(stderr, "bagpipe: skipping checkpoint %s: %s\n", dir, busy[0] ? busy : bp_errmsg(rc));
        if (!first_bad[0] && busy[0]) snprintf(first_bad, sizeof first_bad, "%s: %s", dir, busy);
        else if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s", bp_errmsg(rc));
    }
    free(its);
    if (n == 0) return no_ckpt_here(root);
    return bp_fail(BP_EIO, "%s: no valid checkpoint among %d (newest: %s)", root, n, first_bad);
}

int ckpt_latest_wait(const char *root, char *dir, size_t cap, int64_t *iter, ckpt_manifest *m, double wait_s) {
    const int level = bp_log_level;
    const double t0 = bp_now();
    int rc, said = 0, rescanned = 0;
    for (;;) {
        rc = ckpt_latest(root, dir, cap, iter, m);
        if (!rc || !root_busy(root)) break;
        // Worth waiting for only while the newest is unfinished (no MANIFEST: the job is writing
        // it); committed since the scan, one more scan takes it.  Checkpoints that are all
        // damaged are not waited for.
        int64_t *its;
        int n;
        if (list_ckpts(root, &its, &n)) break;
        char newest[4200] = "";
        if (n) ckpt_dir_path(newest, sizeof newest, root, its[n - 1]);
        free(its);
        if (!n) break;
        char man[4300];
        join(man, sizeof man, newest, "MANIFEST");
        const int committed = access(man, F_OK) == 0;
        if (committed && rescanned) break;
        rescanned = committed;
        if (!committed && bp_now() - t0 > wait_s) break;
        if (!committed && !said++)
            fprintf(stderr, "bagpipe: %s: waiting for the running job to commit its checkpoint (up to %.0f s)\n", root,
                    wait_s);
        bp_log_level = BP_LOG_ERROR; // each skip was reported once already
        bp_clear_error();
        if (!committed) usleep(100000);
    }
    bp_log_level = level;
    return rc;
}

int ckpt_latest_committed(const char *root, char *dir, size_t cap, int64_t *iter) {
    int64_t *its;
    int n, rc = list_ckpts(root, &its, &n);
    if (rc) return rc;
    for (int i = n - 1; i >= 0; i--) {
        ckpt_manifest m;
        int64_t it = -1;
        ckpt_dir_path(dir, cap, root, its[i]);
        if (ckpt_manifest_load(dir, &m) == 0 && ckpt_get_i64(&m, dir, "iteration", &it) == 0 && it == its[i]) {
            *iter = it;
            free(its);
            return 0;
        }
        bp_clear_error();
    }
    free(its);
    return bp_fail(BP_EIO, "%s: no committed checkpoint", root);
}

int ckpt_remove_dir(const char *dir) {
    char path[4096];
    // The manifest first: a removal stopped half way (a kill) must not leave a committed manifest
    // over missing parts, a checkpoint that says it is whole.
    join(path, sizeof path, dir, "MANIFEST");
    if (unlink(path) != 0 && errno != ENOENT && errno != ENOTDIR)
        return bp_fail(BP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return bp_fail(BP_EIO, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        join(path, sizeof path, dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT && !rc)
            rc = bp_fail(BP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(dir) != 0) rc = bp_fail(BP_EIO, "%s: cannot remove: %s", dir, strerror(errno));
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Staged replacement of a saved model (ckpt.h)

// dir without its trailing slashes is dir[0, *n); returns where its last component starts.
static const char *dir_base(const char *dir, size_t *n) {
    size_t k = strlen(dir);
    while (k > 1 && dir[k - 1] == '/') k--;
    const char *base = dir + k;
    while (base > dir && base[-1] != '/') base--;
    *n = k;
    return base;
}

// Makes the staging directory <dir's first n bytes>.saving-<pid> (its path in stage) by mkdir with
// mode, a leftover of this pid removed first.  0; or stage empty and -1 (errno says why), -2 where
// the path does not fit in cap.
static int stage_mkdir(const char *dir, size_t n, char *stage, size_t cap, mode_t mode) {
    if ((size_t)snprintf(stage, cap, "%.*s.saving-%ld", (int)n, dir, (long)getpid()) >= cap) return stage[0] = 0, -2;
    struct stat st;
    if (lstat(stage, &st) == 0 && ckpt_remove_dir(stage) != 0) bp_clear_error(); // a leftover of this pid
    if (mkdir(stage, mode) != 0) {
        const int e = errno;
        stage[0] = 0;
        errno = e;
        return -1;
    }
    return 0;
}

int ckpt_stage_begin(const char *dir, char *stage, size_t cap) {
    stage[0] = 0;
    struct stat st;
    size_t n;
    const char *base = dir_base(dir, &n);
    size_t blen = (size_t)(dir + n - base);
    if ((blen == 1 && base[0] == '.') || (blen == 2 && base[0] == '.' && base[1] == '.')) return 0;
    char trimmed[4096];
    if (n >= sizeof trimmed) return 0;
    memcpy(trimmed, dir, n), trimmed[n] = 0;
    if (lstat(trimmed, &st) != 0 || !S_ISDIR(st.st_mode)) return 0; // a symbolic link: written in place
    const mode_t mode = st.st_mode & 07777;
    if (stage_mkdir(trimmed, n, stage, cap, 0700) != 0) return 0;
    if (chmod(stage, mode) != 0) { // it takes dir's place: with dir's permissions
        ckpt_stage_abort(stage);
        return stage[0] = 0, 0;
    }
    return 1;
}

int ckpt_stage_new(const char *dir, char *stage, size_t cap) {
    size_t n;
    dir_base(dir, &n); // (n: dir without its trailing slashes)
    const int rc = stage_mkdir(dir, n, stage, cap, 0755);
    if (rc == -2) return bp_fail(BP_EINVAL, "%s: path too long", dir);
    if (rc) return bp_fail(BP_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    return 0;
}

int ckpt_stage_commit_new(const char *dir, const char *stage) {
    if (renameat2(AT_FDCWD, stage, AT_FDCWD, dir, RENAME_NOREPLACE) == 0) return 0;
    if (errno == EEXIST) return ckpt_stage_commit(dir, stage); // made meanwhile
    if (rename(stage, dir) == 0) return 0; // no renameat2 here (it replaces only an empty directory)
    const int e = errno;
    return bp_fail(BP_EIO, "%s: cannot rename into place: %s (the model is in %s)", dir, strerror(e), stage);
}

int ckpt_stage_warn_leftovers(const char *dir) {
    size_t n;
    const char *base = dir_base(dir, &n);
    char parent[4096], prefix[4200];
    size_t plen = (size_t)(base - dir), blen = (size_t)(dir + n - base);
    if (blen == 0 || plen >= sizeof parent || blen + 16 >= sizeof prefix) return 0;
    if (plen) memcpy(parent, dir, plen), parent[plen] = 0;
    else snprintf(parent, sizeof parent, ".");
    snprintf(prefix, sizeof prefix, "%.*s.saving-", (int)blen, base);
    const size_t k = strlen(prefix);
    DIR *d = opendir(parent);
    if (!d) return 0;
    int named = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, k) != 0 || !e->d_name[k]) continue;
        char *end;
        long pid = strtol(e->d_name + k, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; // alive, or not ours to judge
        char path[8400]; // parent ends in '/' when dir names one
        snprintf(path, sizeof path, "%s%s", plen ? parent : "", e->d_name);
        DIR *l = opendir(path);
        if (!l) continue;
        int files = 0, others = 0; // others: not a model part, so the user's, from dir before the exchange
        struct dirent *f;
        while ((f = readdir(l))) {
            const char *nm = f->d_name;
            if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
            files++;
            others += !(strcmp(nm, "MANIFEST") == 0 || strcmp(nm, "dense.bin") == 0 || strcmp(nm, "emb.bin") == 0 ||
                        strstr(nm, ".tmp."));
        }
        closedir(l);
        // Killed before the exchange, it holds the new model's parts; after it, the old directory's
        // entries on their way back: either way dir holds a whole model (the exchange is one step).
        // Where the file system has no exchange, the new parts move into dir one by one, MANIFEST
        // last: killed then, dir's model does not verify and the rest of the new one is here.
        char dname[4096];
        snprintf(dname, sizeof dname, "%.*s", (int)n, dir);
        ckpt_manifest *m = bp_xmalloc(sizeof *m);
        const int whole = ckpt_verify(dname, m) == 0;
        free(m);
        bp_clear_error();
        struct stat st;
        char part[8400];
        int parts_in_dir = 0; // the new model's parts moved in, where there is no exchange
        for (int i = 0; i < 2; i++) {
            join(part, sizeof part, dname, i ? "emb.bin" : "dense.bin");
            parts_in_dir += lstat(part, &st) == 0;
        }
        if (!others && stat(dname, &st) != 0) // a save into a new directory, killed before its rename
            fprintf(stderr, "bagpipe: warning: %s is left from a save into %s that was interrupted (process %ld "
                    "is gone) before it was complete: it holds only model files (%d), and %s was never made; "
                    "remove it\n", path, dname, pid, files, dname);
        else if (!whole && !others && !parts_in_dir) // into a directory of no model, killed before the exchange
            fprintf(stderr, "bagpipe: warning: %s is left from a save into %s that was interrupted (process %ld "
                    "is gone) before its model took %s's place, which holds none: it holds only model files (%d); "
                    "remove it\n", path, dname, pid, dname, files);
        else if (!whole && !others)
            fprintf(stderr, "bagpipe: warning: %s is left from a save into %s that was interrupted (process %ld "
                    "is gone) while it moved the new model in file by file: %s's model is incomplete and the rest "
                    "is here (%d file%s): move them into %s, MANIFEST last, then remove it\n", path, dname, pid,
                    dname, files, files == 1 ? "" : "s", dname);
        else if (others)
            fprintf(stderr, "bagpipe: warning: %s is left from a save into %s that was interrupted (process %ld "
                    "is gone): it holds %d entr%s that were in %s before that save; move back what you need (not "
                    "MANIFEST, dense.bin or emb.bin: %s holds a whole model), then remove it\n", path, dname, pid,
                    others, others == 1 ? "y" : "ies", dname, dname);
        else
            fprintf(stderr, "bagpipe: warning: %s is left from a save into %s that was interrupted (process %ld "
                    "is gone): it holds only model files (%d), none of yours, and %s holds a whole model: remove "
                    "it\n", path, dname, pid, files, dname);
        named++;
    }
    closedir(d);
    return named;
}

void ckpt_stage_abort(const char *stage) {
    if (stage[0] && ckpt_remove_dir(stage) != 0) bp_clear_error();
}

// Renames dir/name into to/name, unless to/name exists.
static int move_entry(const char *from, const char *to, const char *name) {
    char a[4200], b[4200];
    join(a, sizeof a, from, name), join(b, sizeof b, to, name);
    struct stat st;
    if (lstat(b, &st) == 0) return -1;
    return rename(a, b);
}

int ckpt_stage_commit(const char *dir, const char *stage) {
    DIR *d;
    struct dirent *e;
    char path[4200];
    if (renameat2(AT_FDCWD, stage, AT_FDCWD, dir, RENAME_EXCHANGE) != 0) {
        // No exchange here: the new files one by one, the MANIFEST last (the old model is invalid
        // from the first rename until that last one).
        if (!(d = opendir(stage))) return bp_fail(BP_EIO, "%s: cannot open: %s", stage, strerror(errno));
        int rc = 0;
        while (!rc && (e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, "MANIFEST") == 0)
                continue;
            char b[4200];
            join(path, sizeof path, stage, e->d_name), join(b, sizeof b, dir, e->d_name);
            if (rename(path, b) != 0) rc = bp_fail(BP_EIO, "%s: cannot move into %s: %s", path, dir, strerror(errno));
        }
        closedir(d);
        char b[4200];
        join(path, sizeof path, stage, "MANIFEST"), join(b, sizeof b, dir, "MANIFEST");
        if (!rc && rename(path, b) != 0) rc = bp_fail(BP_EIO, "%s: cannot move into %s: %s", path, dir, strerror(errno));
        if (!rc) ckpt_stage_abort(stage);
        return rc;
    }
    // stage now holds the old directory: its model goes, anything else goes back.
    ckpt_manifest *old = bp_xmalloc(sizeof *old);
    int have = ckpt_manifest_load(stage, old) == 0;
    bp_clear_error();
    int kept = 0;
    if ((d = opendir(stage))) {
        while ((e = readdir(d))) {
            const char *name = e->d_name;
            if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
            int model = strcmp(name, "MANIFEST") == 0 || strstr(name, ".tmp.") || (have && ckpt_find(old, name));
            join(path, sizeof path, stage, name);
            if (model ? unlink(path) != 0 : move_entry(stage, dir, name) != 0) kept++;
        }
        closedir(d);
    }
    free(old);
    if (kept || rmdir(stage) != 0)
        fprintf(stderr, "bagpipe: warning: the model in %s replaced the one before; %s keeps %d file%s that could "
                "not be moved back or removed\n", dir, stage, kept, kept == 1 ? "" : "s");
    return 0;
}

// A checkpoint whose manifest loads and whose parts all have the sizes it lists (the cheap test:
// CRCs are checked when a checkpoint is loaded).
// A manifest that loads, and parts of the sizes it lists; and, given run_id, written by that run.
static int looks_valid(const char *dir, const char *run_id) {
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    int ok = ckpt_manifest_load(dir, m) == 0;
    if (ok && run_id) ok = ckpt_get(m, "run") && strcmp(ckpt_get(m, "run"), run_id) == 0;
    char path[4200];
    for (int i = 0; ok && i < m->n_files; i++) {
        struct stat st;
        join(path, sizeof path, dir, m->files[i].name);
        ok = stat(path, &st) == 0 && (uint64_t)st.st_size == m->files[i].size;
    }
    free(m);
    bp_clear_error();
    return ok;
}

int64_t ckpt_newest_valid(const char *root) {
    int64_t *its, newest = -1;
    int n;
    if (list_ckpts(root, &its, &n)) {
        bp_clear_error();
        return -1;
    }
    char dir[4096];
    for (int i = n - 1; i >= 0 && newest < 0; i--) {
        ckpt_dir_path(dir, sizeof dir, root, its[i]);
        if (looks_valid(dir, NULL)) newest = its[i];
    }
    free(its);
    return newest;
}

int ckpt_prune(const char *root, int keep, int64_t committed, int64_t since, const char *run_id) {
    BP_ASSERT(keep >= 1);
    int64_t *its;
    int n, rc = list_ckpts(root, &its, &n);
    if (rc) return rc;
    char dir[4096];
    int kept = 0, removed = 0;
    int64_t newest_valid = -1;
    int *valid = bp_xcalloc((size_t)(n ? n : 1), sizeof *valid);
    for (int i = n - 1; i >= 0; i--) {
        if (committed >= 0 && its[i] > committed) continue; // not this run's history: left alone
        ckpt_dir_path(dir, sizeof dir, root, its[i]);
        valid[i] = looks_valid(dir, run_id && its[i] > since ? run_id : NULL) || its[i] == committed;
        if (valid[i] && newest_valid < 0) newest_valid = its[i];
    }
    for (int i = n - 1; i >= 0 && !rc; i--) {
        if (committed >= 0 && its[i] > committed) continue;
        ckpt_dir_path(dir, sizeof dir, root, its[i]);
        if (valid[i] && kept < keep) {
            kept++;
            continue;
        }
        if (newest_valid < 0 || its[i] >= newest_valid) continue; // newer leftovers are not ours to judge
        if ((rc = ckpt_remove_dir(dir)) == 0) removed++;
    }
    free(valid);
    free(its);
    return rc ? rc : removed;
}

int ckpt_is_root(const char *dir) {
    char path[4096];
    join(path, sizeof path, dir, "MANIFEST");
    if (access(path, F_OK) == 0) return 0;
    int64_t *its;
    int n;
    if (list_ckpts(dir, &its, &n)) {
        bp_clear_error();
        return 0;
    }
    free(its);
    return n > 0;
}

int ckpt_lock_root(const char *root, int create, const char *flag) {
    if (create && mkdir(root, 0777) != 0 && errno != EEXIST) return 0; // the checks that follow say why
    char path[4200];
    join(path, sizeof path, root, ".lock");
    int created = 0, fd = open(path, O_RDWR | O_CLOEXEC);
    for (int tries = 0; fd < 0 && errno == ENOENT && tries < 3; tries++) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        created = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = open(path, O_RDWR | O_CLOEXEC); // another job's, just now
        if (fd >= 0 || errno != ENOENT || !create) break;
        // ENOENT: the directory went between its mkdir and this open (a refused job removing the
        // empty root it made, at its exit): make it again
        if (mkdir(root, 0777) != 0 && errno != EEXIST) break;
        errno = ENOENT;
    }
    if (fd < 0) return 0; // missing (nothing to guard yet) or not writable: the checks that follow say why
    // A root this process holds already (--resume and --checkpoint-dir naming one directory in two
    // spellings): the lock file is the same file.
    struct stat st;
    const int known = fstat(fd, &st) == 0;
    if (known && held_find(&st) >= 0) return close(fd), 0;
    // A reader (root_busy) may hold it shared for an instant: a holder for 0.2 s is a job.
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    for (int tries = 0; !locked && errno == EWOULDBLOCK && tries < 20; tries++) {
        usleep(10000);
        locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    }
    if (!locked) {
        char who[32] = "";
        ssize_t got = pread(fd, who, sizeof who - 1, 0);
        who[got > 0 ? got : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        close(fd);
        return bp_fail(BP_EUSAGE, "%s %s: in use by another bagpipe job (pid %s holds %s); wait for it to end, or "
                       "choose another directory", flag, root, who[0] ? who : "?", path);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n) {
    }
    if (known && n_held < (int)BP_ARRAY_LEN(held)) {
        held[n_held].dev = st.st_dev, held[n_held].ino = st.st_ino, held[n_held].created = created;
        held[n_held++].path = created ? bp_xstrdup(path) : NULL;
        static int registered;
        if (created && !registered) registered = atexit(ckpt_drop_created_locks) == 0;
    }
    return 0; // fd stays open: the lock lasts as long as this process
}
