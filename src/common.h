// common: asserts, error codes, logging, time, random numbers, hashing, memory, atomic files.
// Every module includes this; it depends on nothing but libc.
#ifndef BP_COMMON_H
#define BP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---------------------------------------------------------------------------------------------
// Tier 1: bugs.  Always on, print file:line and abort the whole process (and with it the MPI
// job, since mpirun kills the peers of a rank that dies).
#define BP_ASSERT(cond)                                                                       \
    do {                                                                                      \
        if (!(cond)) bp_panic(__FILE__, __LINE__, "assertion failed: %s", #cond);             \
    } while (0)
#define BP_ASSERTF(cond, ...)                                                                 \
    do {                                                                                      \
        if (!(cond)) bp_panic(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)
_Noreturn void bp_panic(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// ---------------------------------------------------------------------------------------------
// Tier 2: runtime failures.  Functions return 0 or a negative BP_E* code; the detailed message
// (naming the file, line, flag, peer...) is recorded once, where the failure is first detected,
// with bp_fail(), and read at the top with bp_errmsg().
#define BP_ERRORS(X)                                                  \
    X(BP_EINVAL, -1, "invalid argument")                              \
    X(BP_EIO, -2, "I/O error")                                        \
    X(BP_ENOMEM, -3, "out of memory")                                 \
    X(BP_EFORMAT, -4, "malformed input")                              \
    X(BP_ECORRUPT, -5, "corrupted or truncated file")                 \
    X(BP_EVERSION, -6, "unsupported version")                         \
    X(BP_ERANGE, -7, "value out of range")                            \
    X(BP_ECAPACITY, -8, "capacity exceeded")                          \
    X(BP_EPEER, -9, "peer failure")                                   \
    X(BP_EMISMATCH, -10, "configuration mismatch")                    \
    X(BP_EUSAGE, -11, "usage error")

enum {
#define BP_ERR_ENUM(name, val, msg) name = val,
    BP_ERRORS(BP_ERR_ENUM)
#undef BP_ERR_ENUM
};

const char *bp_strerror(int code);
// Records a message for the current thread's last error and returns code.
int bp_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The last recorded message, or bp_strerror(code) if none was recorded.
const char *bp_errmsg(int code);
void bp_clear_error(void);

// ---------------------------------------------------------------------------------------------
// Logging to stderr.  The macro checks the level before any argument is evaluated.
enum { BP_LOG_ERROR = 0, BP_LOG_WARN = 1, BP_LOG_INFO = 2, BP_LOG_DEBUG = 3 };
extern int bp_log_level;
#define bp_log(level, ...)                                                                    \
    do {                                                                                      \
        if ((level) <= bp_log_level) bp_log_write((level), __VA_ARGS__);                      \
    } while (0)
void bp_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---------------------------------------------------------------------------------------------
// Time.
double bp_now(void); // monotonic seconds
void bp_sleep_ns(int64_t ns); // sleeps ns nanoseconds (nothing when ns <= 0)

// ---------------------------------------------------------------------------------------------
// Random numbers: xoshiro256** seeded through splitmix64.  (seed, stream) pairs give independent,
// reproducible streams; no global state.
typedef struct {
    uint64_t s[4];
} bp_rng;
void bp_rng_seed(bp_rng *r, uint64_t seed, uint64_t stream);
uint64_t bp_rng_u64(bp_rng *r);
uint32_t bp_rng_below(bp_rng *r, uint32_t n); // uniform in [0, n), unbiased
double bp_rng_uniform(bp_rng *r);             // [0, 1), 53 bits
float bp_rng_uniformf(bp_rng *r);             // [0, 1), 24 bits
double bp_rng_normal(bp_rng *r);              // standard normal (Box-Muller, one value per call)

// Stateless 64-bit mixers (splitmix64 finaliser) for hashing ids.
static inline uint64_t bp_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static inline uint64_t bp_hash2(uint64_t a, uint64_t b) { return bp_mix64(a ^ bp_mix64(b)); }

// ---------------------------------------------------------------------------------------------
// Memory.  bp_xmalloc & co abort with a message on failure (for start-up allocations whose size
// was already checked against the memory plan); bp_alloc_huge maps anonymous memory, advises
// transparent huge pages when the size is large, and returns NULL on failure.
void *bp_xmalloc(size_t n);
void *bp_xcalloc(size_t n, size_t size);
void *bp_xrealloc(void *p, size_t n);
char *bp_xstrdup(const char *s);
void *bp_alloc_huge(size_t n);
void bp_free_huge(void *p, size_t n);
// Total and available physical memory in bytes (from /proc/meminfo; 0 when unknown).
uint64_t bp_mem_total(void);
uint64_t bp_mem_available(void);
// A thread count asked for: 0 or less takes one per online core; the result is within [1, max].
int bp_threads_resolve(int threads, int max);
// Human-readable byte count into buf ("1.5 GiB").
const char *bp_fmt_bytes(char *buf, size_t cap, double bytes);
// Human-readable duration into buf: under a second in ms to three significant digits ("37.8 ms",
// "0.0699 ms"), then "2.41 s", "58.0 s" (a short run is not "0.0 s").
const char *bp_fmt_seconds(char *buf, size_t cap, double seconds);
// A rate into buf: "2.41M" from 10^5 up, else whole units ("8178"; a small run is not "0.00M").
const char *bp_fmt_rate(char *buf, size_t cap, double per_s);

// ---------------------------------------------------------------------------------------------
// Atomic files: write to a temporary file next to the target, then fsync + rename + fsync of
// the directory on commit.  Until commit nothing exists under the final name; abort, a crash or
// a kill leaves the previous file, if any, untouched.  The temporary file is unnamed (O_TMPFILE)
// and named "<target>.tmp.<pid>" only just before the rename, so nothing is left behind, even by
// SIGKILL.  Where it could not be named later (no O_TMPFILE, or no /proc to link it through) it
// has that name from the start: SIGINT, SIGTERM and SIGHUP then remove it (when the program
// leaves them at their default action), a crash or SIGKILL leaves it.  The target is the path,
// or the file a symlink at path points to (the link stays); a path that exists and is not a
// regular file (a device, FIFO, socket, directory) is refused, never replaced.
typedef struct {
    int fd;
    char *path;     // the name given, for messages
    char *target;   // the file replaced at commit
    char *tmp_path; // its temporary name
    int unnamed;    // fd is an O_TMPFILE file, linked as tmp_path at commit
    int live;       // tmp_path exists and is listed for the signal cleanup
    uint64_t written;
} bp_afile;
// The file an atomic write of path replaces (*target, malloc'd), or an error naming path when
// it exists and is not a regular file, or when it names an open descriptor (/dev/stdout,
// /proc/self/fd/N: replacing its file would lose what else is written there).  Nothing is created.
int bp_afile_target(const char *path, char **target);
// What a file that is not regular nor a directory is, for messages: "a FIFO", "a character device"...
const char *bp_file_kind(unsigned m); // m: st_mode
int bp_afile_open(bp_afile *af, const char *path);
int bp_afile_write(bp_afile *af, const void *buf, size_t n);
int bp_afile_pwrite(bp_afile *af, const void *buf, size_t n, uint64_t off);
int bp_afile_commit(bp_afile *af);
void bp_afile_abort(bp_afile *af); // safe after commit or a failed open
// A directory of this process's own files (a --save's staging directory before it takes the
// model's place) that SIGINT, SIGTERM and SIGHUP remove with its entries, as they remove named
// temporary files (when the program leaves them at their default action); NULL: none any more.
void bp_signal_remove_dir(const char *dir);
// The same for one file of this process's own (slot i < BP_SIGNAL_FILES: a part of a --save into a
// directory that held no model, which a later save would refuse to replace); NULL: none any more.
#define BP_SIGNAL_FILES 4
void bp_signal_remove_file(int i, const char *path);
// A line those signals print on standard error after the clean-up, before the process ends by
// them (what an interruption leaves: "interrupted while saving ..."); NULL: none any more.
void bp_signal_note(const char *note);
// Installs now the signal actions that remove those (where SIGINT, SIGTERM, SIGHUP are at their
// default), which the first temporary file installs otherwise: before a caller puts actions of its
// own in place for a while (the installation sees those and leaves them) and restores these.
void bp_signal_cleanup_init(void);

// Full-length I/O wrappers that retry on EINTR/short counts; they return 0 or BP_EIO with a
// message naming `what` (a path).
int bp_write_all(int fd, const void *buf, size_t n, const char *what);
int bp_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what);
int bp_read_all(int fd, void *buf, size_t n, const char *what);
int bp_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what);
int bp_fsync_dir(const char *path); // fsync the directory that contains path

// CRC-32 (zlib's polynomial) of a buffer of any size, continuing from crc (start with 0).
uint32_t bp_crc32(uint32_t crc, const void *buf, size_t n);
// The CRC-32 of A followed by B from crc_a, crc_b and B's length.
uint32_t bp_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Index of the first NaN or infinite value of p[0, n) (n when all are finite): a model or
// checkpoint part is checked with it before it is written.
size_t bp_first_nonfinite(const float *p, size_t n);

// Little-endian field access for on-disk and on-wire formats.
static inline void bp_put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t bp_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void bp_put_u64(uint8_t *p, uint64_t v) {
    bp_put_u32(p, (uint32_t)v), bp_put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t bp_get_u64(const uint8_t *p) {
    return (uint64_t)bp_get_u32(p) | (uint64_t)bp_get_u32(p + 4) << 32;
}

#define BP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define BP_MAX(a, b) ((a) > (b) ? (a) : (b))
#define BP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
