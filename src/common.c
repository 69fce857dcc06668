#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

// ---------------------------------------------------------------------------------------------
// Errors

_Noreturn void bp_panic(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "bagpipe: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

const char *bp_strerror(int code) {
    switch (code) {
    case 0: return "success";
#define BP_ERR_CASE(name, val, msg) \
    case val: return msg;
        BP_ERRORS(BP_ERR_CASE)
#undef BP_ERR_CASE
    }
    return "unknown error";
}

static _Thread_local char err_buf[1024];

int bp_fail(int code, const char *fmt, ...) {
    // Formats into a copy first, so a message may quote the previous one (bp_errmsg).
    char tmp[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(err_buf, tmp, sizeof err_buf);
    return code;
}

const char *bp_errmsg(int code) { return err_buf[0] ? err_buf : bp_strerror(code); }
void bp_clear_error(void) { err_buf[0] = 0; }

// ---------------------------------------------------------------------------------------------
// Logging

int bp_log_level = BP_LOG_INFO;

void bp_log_write(int level, const char *fmt, ...) {
    static const char *names[] = {"error", "warning", "info", "debug"};
    va_list ap;
    if (level < BP_LOG_INFO) fprintf(stderr, "bagpipe: %s: ", names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

double bp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bp_sleep_ns(int64_t ns) {
    if (ns <= 0) return;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
}

// ---------------------------------------------------------------------------------------------
// Random numbers

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bp_rng_seed(bp_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ bp_mix64(stream + 0x5851f42d4c957f2dull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t bp_rng_u64(bp_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint32_t bp_rng_below(bp_rng *r, uint32_t n) {
    // Lemire's multiply-shift with rejection: unbiased.
    BP_ASSERT(n > 0);
    uint64_t m = (uint64_t)(uint32_t)(bp_rng_u64(r) >> 32) * n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t thresh = (uint32_t)(-n) % n;
        while (lo < thresh) {
            m = (uint64_t)(uint32_t)(bp_rng_u64(r) >> 32) * n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double bp_rng_uniform(bp_rng *r) { return (double)(bp_rng_u64(r) >> 11) * 0x1.0p-53; }
float bp_rng_uniformf(bp_rng *r) { return (float)(bp_rng_u64(r) >> 40) * 0x1.0p-24f; }

double bp_rng_normal(bp_rng *r) {
    double u1 = 1.0 - bp_rng_uniform(r); // (0, 1]
    double u2 = bp_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// ---------------------------------------------------------------------------------------------
// Memory

void *bp_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) bp_panic(__FILE__, __LINE__, "out of memory allocating %zu bytes", n);
    return p;
}

void *bp_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) bp_panic(__FILE__, __LINE__, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *bp_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) bp_panic(__FILE__, __LINE__, "out of memory reallocating %zu bytes", n);
    return q;
}

char *bp_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(bp_xmalloc(n), s, n);
}

void *bp_alloc_huge(size_t n) {
    if (n == 0) n = 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (n >= (size_t)32 << 20) madvise(p, n, MADV_HUGEPAGE);
    return p;
}

void bp_free_huge(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

static uint64_t meminfo_field(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

uint64_t bp_mem_total(void) { return meminfo_field("MemTotal"); }
uint64_t bp_mem_available(void) { return meminfo_field("MemAvailable"); }

int bp_threads_resolve(int threads, int max) {
    if (threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc < 1 ? 1 : nc > max ? max : (int)nc;
    }
    return threads < 1 ? 1 : threads > max ? max : threads;
}

const char *bp_fmt_bytes(char *buf, size_t cap, double bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, u++;
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

const char *bp_fmt_seconds(char *buf, size_t cap, double seconds) {
    // (%.3g of 999.5 ms and more reads "1e+03": those are 1.00 s, as 9.995 s and more are 10.0 s)
    if (seconds < 0.9995) snprintf(buf, cap, "%.3g ms", seconds * 1e3);
    else snprintf(buf, cap, "%.*f s", seconds < 9.995 ? 2 : 1, seconds);
    return buf;
}

const char *bp_fmt_rate(char *buf, size_t cap, double per_s) {
    if (per_s >= 1e5) snprintf(buf, cap, "%.2fM", per_s / 1e6);
    else snprintf(buf, cap, "%.0f", per_s);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// I/O

int bp_write_all(int fd, const void *buf, size_t n, const char *what) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return bp_fail(BP_EIO, "%s: write failed: %s", what, strerror(errno));
        }
        p += k, n -= (size_t)k;
    }
    return 0;
}

int bp_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return bp_fail(BP_EIO, "%s: write failed: %s", what, strerror(errno));
        }
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

int bp_read_all(int fd, void *buf, size_t n, const char *what) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return bp_fail(BP_EIO, "%s: read failed: %s", what, strerror(errno));
        }
        if (k == 0) return bp_fail(BP_ECORRUPT, "%s: unexpected end of file", what);
        p += k, n -= (size_t)k;
    }
    return 0;
}

int bp_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return bp_fail(BP_EIO, "%s: read failed: %s", what, strerror(errno));
        }
        if (k == 0) return bp_fail(BP_ECORRUPT, "%s: unexpected end of file", what);
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

int bp_fsync_dir(const char *path) {
    char *copy = bp_xstrdup(path);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = 0;
    if (fd < 0 || fsync(fd) != 0) rc = bp_fail(BP_EIO, "%s: cannot sync directory: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(copy);
    return rc;
}

const char *bp_file_kind(unsigned m) {
    return S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "an unknown kind";
}

// 1 when path names an open file descriptor (/dev/fd/N, /proc/PID/fd/N; /dev/stdout leads there).
static int names_fd(const char *p) {
    if (strncmp(p, "/dev/fd/", 8) == 0) return 1;
    if (strncmp(p, "/proc/", 6) != 0) return 0;
    const char *slash = strchr(p + 6, '/');
    return slash && slash > p + 6 && strncmp(slash, "/fd/", 4) == 0;
}

int bp_afile_target(const char *path, char **target) {
    *target = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) return bp_fail(BP_EINVAL, "%s: is a directory, expected a file name", path);
        return bp_fail(BP_EINVAL, "%s: not a regular file (%s); refusing to replace it", path, bp_file_kind(st.st_mode));
    }
    size_t len = strlen(path);
    if (len && path[len - 1] == '/') // a directory that does not exist yet
        return bp_fail(BP_EINVAL, "%s: a directory name (it ends in '/'), expected a file name", path);
    // Follow the links one by one rather than with realpath: a dangling link names the file to
    // create.
    char *p = bp_xstrdup(path);
    for (int hops = 0; lstat(p, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
        if (names_fd(p)) { // a shell's redirection: the rename would unlink the file it writes to
            free(p);
            return bp_fail(BP_EINVAL, "%s: names an open file descriptor (standard output or a redirection); this "
                           "output is written whole and then takes its file's place, which would lose what else "
                           "goes there: give the file's own name", path);
        }
        char link[4096];
        ssize_t n = hops < 40 ? readlink(p, link, sizeof link - 1) : -1;
        if (n < 0) {
            int rc = bp_fail(BP_EIO, "%s: cannot follow the symbolic link: %s", path,
                             hops < 40 ? strerror(errno) : "too many levels of links");
            free(p);
            return rc;
        }
        link[n] = 0;
        char *next;
        if (link[0] == '/') {
            next = bp_xstrdup(link);
        } else { // relative to the link's directory
            char *copy = bp_xstrdup(p);
            const char *dir = dirname(copy);
            size_t cap = strlen(dir) + (size_t)n + 2;
            next = bp_xmalloc(cap);
            snprintf(next, cap, "%s/%s", dir, link);
            free(copy);
        }
        free(p);
        p = next;
    }
    *target = p;
    return 0;
}

// A named temporary file (from the start where O_TMPFILE cannot be used, or from its naming at
// commit until the rename): SIGINT, SIGTERM and SIGHUP (when the program leaves them at their
// default action) remove the live ones, then end the process as the signal would have.
#define AFILE_LIVE_MAX 64
static char *afile_live[AFILE_LIVE_MAX]; // tmp_path of each named temporary file open, or NULL

static char *signal_dir;  // bp_signal_remove_dir's, or NULL
// bp_signal_remove_file's, in place: a handler on another thread may read one while it is
// withdrawn, so a path is never freed, only marked off (and rewritten only while off).
static char signal_file[BP_SIGNAL_FILES][4096];
static int signal_file_on[BP_SIGNAL_FILES];
static char *signal_note; // bp_signal_note's, or NULL
static pthread_once_t afile_signals_once = PTHREAD_ONCE_INIT;

// Removes dir's entries (files; readdir is not async-signal-safe, getdents64 is a system call),
// then dir.
static void remove_dir_in_signal(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    struct entry { // the kernel's linux_dirent64
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
    };
    static _Alignas(8) char buf[4096];
    for (long n; (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;)
        for (long off = 0; off < n;) {
            const struct entry *e = (const struct entry *)(buf + off);
            const char *name = e->name;
            if (!(name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))) unlinkat(fd, name, 0);
            off += e->reclen;
        }
    close(fd);
    rmdir(dir);
}

static void afile_on_signal(int sig) {
    for (int i = 0; i < AFILE_LIVE_MAX; i++) {
        const char *p = __atomic_load_n(&afile_live[i], __ATOMIC_ACQUIRE);
        if (p) unlink(p);
    }
    for (int i = 0; i < BP_SIGNAL_FILES; i++)
        if (__atomic_load_n(&signal_file_on[i], __ATOMIC_ACQUIRE)) unlink(signal_file[i]);
    const char *d = __atomic_load_n(&signal_dir, __ATOMIC_ACQUIRE);
    if (d) remove_dir_in_signal(d);
    const char *note = __atomic_load_n(&signal_note, __ATOMIC_ACQUIRE);
    if (note) {
        ssize_t k = write(STDERR_FILENO, note, strlen(note));
        (void)k;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void afile_signals_install(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < BP_ARRAY_LEN(sigs); i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = afile_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static void afile_live_add(char *tmp_path) {
    pthread_once(&afile_signals_once, afile_signals_install);
    for (int i = 0; i < AFILE_LIVE_MAX; i++) {
        char *none = NULL;
        if (__atomic_compare_exchange_n(&afile_live[i], &none, tmp_path, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) return;
    }
    // More at once than slots: this one is left behind by a signal, as before.
}

void bp_signal_cleanup_init(void) { pthread_once(&afile_signals_once, afile_signals_install); }

void bp_signal_remove_dir(const char *dir) {
    pthread_once(&afile_signals_once, afile_signals_install);
    char *next = dir ? bp_xstrdup(dir) : NULL;
    free(__atomic_exchange_n(&signal_dir, next, __ATOMIC_ACQ_REL));
}

void bp_signal_remove_file(int i, const char *path) {
    BP_ASSERT(i >= 0 && i < BP_SIGNAL_FILES);
    pthread_once(&afile_signals_once, afile_signals_install);
    __atomic_store_n(&signal_file_on[i], 0, __ATOMIC_RELEASE);
    if (!path || strlen(path) >= sizeof signal_file[i]) return; // (no file has a longer path)
    snprintf(signal_file[i], sizeof signal_file[i], "%s", path);
    __atomic_store_n(&signal_file_on[i], 1, __ATOMIC_RELEASE);
}

void bp_signal_note(const char *note) {
    pthread_once(&afile_signals_once, afile_signals_install);
    char *next = note ? bp_xstrdup(note) : NULL;
    free(__atomic_exchange_n(&signal_note, next, __ATOMIC_ACQ_REL));
}

static void afile_live_remove(char *tmp_path) {
    for (int i = 0; i < AFILE_LIVE_MAX; i++) {
        char *p = tmp_path;
        if (__atomic_compare_exchange_n(&afile_live[i], &p, NULL, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) return;
    }
}

int bp_afile_open(bp_afile *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->fd = -1;
    char *target;
    int rc = bp_afile_target(path, &target);
    if (rc) return rc;
    size_t n = strlen(target) + 32;
    af->tmp_path = bp_xmalloc(n);
    snprintf(af->tmp_path, n, "%s.tmp.%ld", target, (long)getpid());
    // An unnamed file is named at commit through /proc/self/fd (AT_EMPTY_PATH, the other way,
    // needs a capability before Linux 6.10): without /proc it would fail after all the work.
    // BAGPIPE_TEST_NAMED_TMP=1 (tests) forces the named temporary file.
    const char *force_named = getenv("BAGPIPE_TEST_NAMED_TMP");
    const int try_unnamed = !(force_named && atoi(force_named)) && access("/proc/self/fd", X_OK) == 0;
    if (try_unnamed) {
        char *copy = bp_xstrdup(target);
        af->fd = open(dirname(copy), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        free(copy);
    }
    af->unnamed = af->fd >= 0;
    if (af->fd < 0 && (!try_unnamed || errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        afile_live_add(af->tmp_path), af->live = 1;
        af->fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (af->fd < 0) afile_live_remove(af->tmp_path), af->live = 0;
    }
    if (af->fd < 0) {
        rc = bp_fail(BP_EIO, "%s: cannot create: %s", path, strerror(errno));
        free(target), free(af->tmp_path);
        af->tmp_path = NULL;
        return rc;
    }
    af->path = bp_xstrdup(path);
    af->target = target;
    return 0;
}

int bp_afile_write(bp_afile *af, const void *buf, size_t n) {
    int rc = bp_write_all(af->fd, buf, n, af->path);
    if (rc == 0) af->written += n;
    return rc;
}

int bp_afile_pwrite(bp_afile *af, const void *buf, size_t n, uint64_t off) {
    return bp_pwrite_all(af->fd, buf, n, off, af->path);
}

// Gives the unnamed temporary file its name, through /proc (any user) or AT_EMPTY_PATH (needs
// CAP_DAC_READ_SEARCH) where /proc is missing.
static int afile_link(bp_afile *af) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", af->fd);
    for (int tries = 0; tries < 2; tries++) {
        if (linkat(AT_FDCWD, proc, AT_FDCWD, af->tmp_path, AT_SYMLINK_FOLLOW) == 0) return 0;
        if (errno == ENOENT && linkat(af->fd, "", AT_FDCWD, af->tmp_path, AT_EMPTY_PATH) == 0) return 0;
        if (errno != EEXIST) break;
        unlink(af->tmp_path); // left by an earlier process of the same pid, killed inside a commit
    }
    return bp_fail(BP_EIO, "%s: cannot name the temporary file %s: %s", af->path, af->tmp_path, strerror(errno));
}

static void afile_free(bp_afile *af) {
    if (af->live) afile_live_remove(af->tmp_path);
    af->live = 0;
    free(af->path), free(af->target), free(af->tmp_path);
    af->path = af->target = af->tmp_path = NULL;
    af->fd = -1;
}

int bp_afile_commit(bp_afile *af) {
    BP_ASSERT(af->fd >= 0);
    int rc = 0, named = !af->unnamed;
    if (fsync(af->fd) != 0) rc = bp_fail(BP_EIO, "%s: fsync failed: %s", af->path, strerror(errno));
    // test hook (tests/test_cachesim.c): BAGPIPE_TEST_AFILE_FAIL=SUFFIX fails the commit of a file whose
    // name ends in SUFFIX, as a full disk fails its fsync
    const char *hook = getenv("BAGPIPE_TEST_AFILE_FAIL");
    const size_t hl = hook ? strlen(hook) : 0, tl = strlen(af->target);
    if (rc == 0 && hl && tl >= hl && strcmp(af->target + tl - hl, hook) == 0)
        rc = bp_fail(BP_EIO, "%s: fsync failed: %s (test hook)", af->path, strerror(ENOSPC));
    if (rc == 0 && !named) { // named from here to the rename: listed for the signal cleanup first
        afile_live_add(af->tmp_path), af->live = 1;
        named = (rc = afile_link(af)) == 0;
    }
    if (close(af->fd) != 0 && rc == 0) rc = bp_fail(BP_EIO, "%s: close failed: %s", af->path, strerror(errno));
    af->fd = -1;
    if (rc == 0 && rename(af->tmp_path, af->target) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot rename into place: %s", af->path, strerror(errno));
    if (rc == 0) rc = bp_fsync_dir(af->target);
    if (rc != 0 && named) unlink(af->tmp_path);
    afile_free(af);
    return rc;
}

void bp_afile_abort(bp_afile *af) {
    if (af->fd >= 0) close(af->fd);
    if (af->tmp_path && !af->unnamed) unlink(af->tmp_path);
    afile_free(af);
}

size_t bp_first_nonfinite(const float *p, size_t n) {
    // by the exponent bits, in blocks without an exit so that the loop vectorises
    enum { BLOCK = 4096 };
    for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
        const size_t i1 = n - i0 < BLOCK ? n : i0 + BLOCK;
        uint32_t any = 0;
        for (size_t i = i0; i < i1; i++) {
            uint32_t u;
            memcpy(&u, p + i, sizeof u);
            any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (any)
            for (size_t i = i0; i < i1; i++)
                if (!isfinite(p[i])) return i;
    }
    return n;
}

uint32_t bp_crc32(uint32_t crc, const void *buf, size_t n) {
    return (uint32_t)crc32_z(crc, buf, n);
}

uint32_t bp_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);
}
