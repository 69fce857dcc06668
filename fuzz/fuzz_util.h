// fuzz_util: small helpers shared by the libFuzzer targets (fuzz/fuzz_*.c).
//
// Targets that need a file (the line reader, the dataset reader, the manifest loader) write the
// fuzzer's bytes into one private temporary directory per process, made on first use and removed
// at exit.  FUZZ_CHECK is the targets' own oracle: a broken invariant aborts, which libFuzzer
// reports as a crash with the input saved.
#ifndef BP_FUZZ_UTIL_H
#define BP_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static char fuzz_dir_path[512];

static inline void fuzz_dir_remove(void) {
    char cmd[600];
    if (!fuzz_dir_path[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

// The process's temporary directory (under $TMPDIR, else /dev/shm when present, else /tmp).
static inline const char *fuzz_dir(void) {
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/bpfuzz.XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

// Writes data[0, n) to fuzz_dir()/name and returns the path (a static buffer per call site's name).
static inline const char *fuzz_write_file(const char *name, const void *data, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(data, 1, n, f) != n) {
        perror(path);
        abort();
    }
    if (fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

#endif
