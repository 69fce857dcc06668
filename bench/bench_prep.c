// bench_prep: raw Criteo TSV -> binary dataset throughput of prep_run().
//
//   build/bench/bench_prep [MB [DIR [THREADS]]]   (default 200 MB of text, DIR = $TMPDIR or /tmp,
//                                                 THREADS one per core, at most 16)
//
// Generates a Criteo-shaped TSV (Kaggle's 26 table sizes, log-uniform "power-law" categorical
// ranks, heavy-tailed integers, Kaggle-like shares of empty fields, ~250 bytes a line), a gzip
// copy of it, then times in one run: read+parse only, prep with hashed ids, prep with frequency
// ids (two passes), and prep of the gzip copy with hashed ids, each on one thread and then on
// THREADS (prep_opts.threads), with the ratio of the two wall times.  Prints MB/s of text and
// rows/s over wall time (which includes writing and fsyncing the output), and the CPU time used.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "data_criteo.h"
#include "data_lines.h"
#include "data_prep.h"
#include "bench_util.h"

static const uint32_t kaggle_card[CRITEO_F] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
};
// Shares of empty fields, roughly those of the Kaggle training file.
static const double int_empty[CRITEO_ND] = {0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.77, 0.22};
static const double cat_empty[CRITEO_F] = {0,    0,    0.03, 0.03, 0, 0.12, 0,    0, 0,    0,    0, 0.03, 0,
                                           0,    0,    0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44};
// Integer scales: values are exp(U * ln(scale)) - 1, so most are small and a few are large.
static const double int_scale[CRITEO_ND] = {50, 800, 200, 60, 60000, 900, 80, 120, 600, 6, 60, 30, 120};

static char *put_u64(char *p, uint64_t x) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + x % 10), x /= 10;
    while (x);
    while (n) *p++ = tmp[--n];
    return p;
}

// Writes about `bytes` of text to path (and a gzip copy to gz_path); returns the row count.
static uint64_t generate(const char *path, const char *gz_path, uint64_t bytes) {
    FILE *f = fopen(path, "wb");
    gzFile gz = gzopen(gz_path, "wb6");
    BP_ASSERTF(f && gz, "cannot create %s / %s", path, gz_path);
    static const char hex[] = "0123456789abcdef";
    size_t cap = 1 << 20;
    char *buf = bp_xmalloc(cap + 1024); // one block of lines
    bp_rng rng;
    bp_rng_seed(&rng, 42, 0);
    uint64_t rows = 0, written = 0;
    while (written < bytes) {
        char *p = buf;
        while (p < buf + cap && written + (uint64_t)(p - buf) < bytes) {
            *p++ = bp_rng_uniform(&rng) < 0.25 ? '1' : '0';
            for (int i = 0; i < CRITEO_ND; i++) {
                *p++ = '\t';
                if (bp_rng_uniform(&rng) < int_empty[i]) continue;
                if (i == 1 && bp_rng_uniform(&rng) < 0.05) {
                    *p++ = '-', *p++ = '1';
                    continue;
                }
                double x = exp(bp_rng_uniform(&rng) * log(int_scale[i])) - 1;
                p = put_u64(p, (uint64_t)x);
            }
            for (int j = 0; j < CRITEO_F; j++) {
                *p++ = '\t';
                if (bp_rng_uniform(&rng) < cat_empty[j]) continue;
                uint64_t rank = (uint64_t)(exp(bp_rng_uniform(&rng) * log((double)kaggle_card[j])) - 1);
                uint32_t v = (uint32_t)bp_hash2((uint64_t)j + 1, rank);
                for (int k = 7; k >= 0; k--) *p++ = hex[(v >> (4 * k)) & 15];
            }
            *p++ = '\n';
            rows++;
        }
        size_t n = (size_t)(p - buf);
        BP_ASSERT(fwrite(buf, 1, n, f) == n);
        BP_ASSERT(gzwrite(gz, buf, (unsigned)n) == (int)n);
        written += n;
    }
    BP_ASSERT(fclose(f) == 0 && gzclose(gz) == Z_OK);
    free(buf);
    return rows;
}

// Reads and parses every line without writing anything: the scanner's own speed.
static void bench_parse(const char *path, uint64_t bytes) {
    lines_reader r;
    if (lines_open(&r, path, 1)) {
        fprintf(stderr, "%s\n", bp_errmsg(BP_EIO));
        exit(1);
    }
    uint8_t label;
    float dense[CRITEO_ND];
    uint64_t keys[CRITEO_F], sum = 0, rows = 0;
    lines_bad bad;
    const char *s;
    size_t n;
    double t0 = bp_now();
    while (lines_next(&r, &s, &n) == 1) {
        if (criteo_parse(s, n, &label, dense, keys, &bad) == 0) rows++, sum += keys[3] + label;
    }
    double dt = bp_now() - t0;
    lines_close(&r);
    printf("%-34s %8.1f MB/s %10.0f rows/s   (checksum %llu)\n", "read+parse only (no ids, no writer)",
           (double)bytes / 1e6 / dt, (double)rows / dt, (unsigned long long)(sum & 0xffff));
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

// One prep run; returns its wall time.
static double bench_prep(const char *what, const char *in, const char *out, uint64_t min_count, uint64_t max_ind,
                         int threads) {
    prep_opts o;
    prep_opts_default(&o);
    o.inputs = &in;
    o.n_inputs = 1;
    o.out = out;
    o.min_count = (uint32_t)min_count;
    o.max_ind_range = max_ind;
    o.split = PREP_SPLIT_KAGGLE;
    o.threads = threads;
    prep_stats st;
    double cpu0 = cpu_seconds();
    int rc = prep_run(&o, &st);
    double cpu = cpu_seconds() - cpu0;
    if (rc) {
        fprintf(stderr, "prep failed: %s\n", bp_errmsg(rc));
        exit(1);
    }
    char name[80];
    snprintf(name, sizeof name, "%s, %d thread%s", what, threads, threads == 1 ? "" : "s");
    printf("%-46s %8.1f MB/s %10.0f rows/s   %.2f s wall, %.2f s cpu (%.0f MB/s per cpu-second)", name,
           (double)st.bytes_text / 1e6 / st.seconds, (double)st.rows / st.seconds, st.seconds, cpu,
           (double)st.bytes_text / 1e6 / cpu);
    if (st.bytes_file != st.bytes_text) printf(", %.1f MB/s of gzip", (double)st.bytes_file / 1e6 / st.seconds);
    if (!max_ind) {
        char b[32];
        printf(", count pass %.2f s, %llu distinct, vocab %s (%.1f B/value)", st.seconds_count,
               (unsigned long long)st.distinct, bp_fmt_bytes(b, sizeof b, (double)st.vocab_bytes),
               (double)st.vocab_bytes / (double)st.distinct);
    }
    printf("\n");
    unlink(out);
    return st.seconds;
}

// The same prep on one thread and on `threads`, back to back, and the ratio of their wall times.
static void bench_pair(const char *what, const char *in, const char *out, uint64_t min_count, uint64_t max_ind,
                       int threads) {
    double t1 = bench_prep(what, in, out, min_count, max_ind, 1);
    if (threads == 1) return;
    double tn = bench_prep(what, in, out, min_count, max_ind, threads);
    printf("%-46s %.2fx\n", "  speed-up", t1 / tn);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[MB [DIR [THREADS]]]",
                   "raw Criteo TSV -> binary dataset throughput of prep: MB of generated text (default 200) in DIR\n"
                   "($TMPDIR or /tmp); read+parse, hashed ids, frequency ids and a gzip copy, in MB/s and rows/s,\n"
                   "each on one thread and on THREADS (default: one per core, at most 16) back to back"))
        return 0;
    const double mb = bench_num_arg(argc, argv, 1, 200, 1, "MB");
    if (mb < 0) return 2;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    const double th = bench_num_arg(argc, argv, 3, (double)(nc < 1 ? 1 : nc > 16 ? 16 : nc), 1, "THREADS");
    if (th < 0) return 2;
    const int threads = th < 1 ? 1 : th > 16 ? 16 : (int)th;
    if (!(mb > 0)) {
        fprintf(stderr, "usage: bench_prep [MB [DIR [THREADS]]]\n");
        return 2;
    }
    const char *dir = bench_scratch(argc > 2 ? argv[2] : NULL, "bench_prep");
    if (!dir) return 1;
    char txt[600], gz[600], out[600];
    snprintf(txt, sizeof txt, "%s/day.tsv", dir);
    snprintf(gz, sizeof gz, "%s/day.tsv.gz", dir);
    snprintf(out, sizeof out, "%s/day.bin", dir);
    double t0 = bp_now();
    uint64_t bytes = (uint64_t)(mb * 1e6);
    uint64_t rows = generate(txt, gz, bytes);
    FILE *g = fopen(gz, "rb");
    fseek(g, 0, SEEK_END);
    long gz_bytes = ftell(g);
    fclose(g);
    printf("generated %llu rows, %.1f MB text (%.1f bytes/line), %.1f MB gzip, in %.1f s\n", (unsigned long long)rows,
           (double)bytes / 1e6, (double)bytes / (double)rows, (double)gz_bytes / 1e6, bp_now() - t0);
    bench_parse(txt, bytes);
    bench_pair("prep, hashed ids (mod 10M)", txt, out, 1, 10000000, threads);
    bench_pair("prep, frequency ids (min count 1)", txt, out, 1, 0, threads);
    bench_pair("prep, frequency ids (min count 4)", txt, out, 4, 0, threads);
    bench_pair("prep gzip input, hashed ids", gz, out, 1, 10000000, threads);
    return 0;
}
