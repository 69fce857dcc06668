// bench_memlat: the random-access floor of this machine's memory, which bounds the oracle's
// dedupe (one keymap line per new occurrence of a key, most of them cold: docs/oracle.md).
//
//   build/bench/bench_memlat [MIB [CHAINS]]
//     MIB: region size (default 270, the headline trace's flat keymap), CHAINS: independent
//     pointer chains per thread (default 16)
//
// A region of MIB is filled with one random cyclic permutation of its 64-byte lines (each line
// holds the offset of the next).  Figures, in ns per line read:
//   chase    one chain: each read waits for the one before (the latency)
//   chains   CHAINS chains interleaved on one thread (what prefetching ahead can reach)
//   2 thr    the same on each of two threads, aggregate (what two cores reach together)
//   pf t0    a stream of random lines (their indices read in sequence, as the dedupe reads ids),
//            each asked for 64 reads ahead by __builtin_prefetch(p, 0, 3) (prefetcht0), then read
//   pf t2    the same with locality 1 (prefetcht2), which on this machine's cores keeps more
//            lines in flight; docs/oracle.md, round 18, for why the dedupe does not gain from it
// with the region on huge pages and on 4 KiB pages.  The machine is shared: run it a few times.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

enum { MAX_CHAINS = 64, READS = 1 << 21 };
static volatile size_t g_sink; // keeps the reads

typedef struct {
    const char *p;
    size_t start[MAX_CHAINS];
    int chains;
    double seconds;
    size_t sink;
} walk;

static void *walk_run(void *arg) {
    walk *w = arg;
    size_t c[MAX_CHAINS];
    memcpy(c, w->start, sizeof c);
    const int k = w->chains, rounds = READS / k;
    double t0 = bp_now();
    for (int r = 0; r < rounds; r++)
        for (int q = 0; q < k; q++) c[q] = *(const size_t *)(w->p + c[q]);
    w->seconds = bp_now() - t0;
    for (int q = 0; q < k; q++) w->sink += c[q];
    return NULL;
}

// ns per line read of a stream of random lines, each prefetched PF_AHEAD reads ahead with the
// locality hint LOC (3: prefetcht0, 1: prefetcht2), then read.
enum { PF_AHEAD = 64 };
#define PF_STREAM(LOC)                                                                             \
    for (size_t i = 0; i < n; i++) {                                                               \
        __builtin_prefetch(p + (size_t)idx[i + PF_AHEAD] * 64, 0, LOC);                            \
        sink += *(const size_t *)(p + (size_t)idx[i] * 64);                                        \
    }
static double pf_run(const char *p, const uint32_t *idx, size_t n, int loc) {
    size_t sink = 0;
    double t0 = bp_now();
    if (loc == 3) PF_STREAM(3) else PF_STREAM(1)
    double t = bp_now() - t0;
    g_sink += sink;
    return 1e9 * t / (double)n;
}

// ns per line read with `chains` chains on each of `threads` threads (aggregate).
static double run(const char *p, const size_t *order, size_t lines, int chains, int threads) {
    walk w[2];
    pthread_t th[2];
    for (int t = 0; t < threads; t++) {
        w[t] = (walk){.p = p, .chains = chains};
        for (int q = 0; q < chains; q++) // spread the starting points over the cycle
            w[t].start[q] = order[((size_t)(t * chains + q) * (lines / (size_t)(2 * chains))) % lines] * 64;
        if (pthread_create(&th[t], NULL, walk_run, &w[t]) != 0) {
            fprintf(stderr, "bench_memlat: cannot start a thread\n");
            exit(1);
        }
    }
    double worst = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        worst = BP_MAX(worst, w[t].seconds), g_sink += w[t].sink;
    }
    return 1e9 * worst / ((double)(READS / chains * chains) * threads);
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bench_memlat [MIB [CHAINS]]  (defaults 270 and 16; CHAINS 1..%d)\n", MAX_CHAINS);
        return 0;
    }
    const size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 270;
    const int chains = argc > 2 ? atoi(argv[2]) : 16;
    if (mib < 1 || mib > 65536 || chains < 1 || chains > MAX_CHAINS) {
        fprintf(stderr, "bench_memlat: MIB must be 1..65536 and CHAINS 1..%d\n", MAX_CHAINS);
        return 2;
    }
    const size_t bytes = mib << 20, lines = bytes / 64;
    size_t *order = bp_xmalloc(lines * sizeof *order);
    for (size_t i = 0; i < lines; i++) order[i] = i;
    bp_rng rng;
    bp_rng_seed(&rng, 12345, 0);
    for (size_t i = lines - 1; i > 0; i--) { // Fisher-Yates: one random cycle through every line
        size_t j = (size_t)(bp_rng_u64(&rng) % (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    const size_t n_pf = READS; // the prefetched stream's line indices, PF_AHEAD more as padding
    uint32_t *idx = bp_xmalloc((n_pf + PF_AHEAD) * sizeof *idx);
    for (size_t i = 0; i < n_pf + PF_AHEAD; i++) idx[i] = (uint32_t)(bp_rng_u64(&rng) % lines);
    printf("region %zu MiB (%zu lines), %d chains per thread; ns per line read\n", mib, lines, chains);
    for (int huge = 1; huge >= 0; huge--) {
        char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "bench_memlat: cannot map %zu MiB\n", mib);
            return 1;
        }
        madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (size_t i = 0; i < lines; i++) *(size_t *)(p + order[i] * 64) = order[(i + 1) % lines] * 64;
        const double chase = run(p, order, lines, 1, 1), one = run(p, order, lines, chains, 1);
        const double two = run(p, order, lines, chains, 2);
        const double pf0 = pf_run(p, idx, n_pf, 3), pf2 = pf_run(p, idx, n_pf, 1);
        printf("%-10s chase %6.1f   chains %5.1f   2 thr %5.1f   (2 threads / 1: %.2fx the reads per second)"
               "   pf t0 %5.1f   pf t2 %5.1f\n",
               huge ? "huge pages" : "4 KiB", chase, one, two, one / two, pf0, pf2);
        munmap(p, bytes);
    }
    free(order), free(idx);
    return 0;
}
