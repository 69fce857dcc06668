// bench_plan: the oracle's planning throughput on a dataset's own trace, swept over the lookahead
// window W (at a fixed T) and over the trainers T (at a fixed W), one run per configuration, all
// in one process on the same ids (paged in before any timing).
//
//   build/bench/bench_plan DATA [--windows 10,25,50,100] [--trainers 1,2,4,8] [-b 2048] [--parts 2] [...]
//
// Prints one tab-separated line per run (header first): the sweep it belongs to, W, T, B, planner
// threads, samples planned, wall seconds, samples/s, ms per batch, CPU ms per batch (indexing and
// planning), hit rate, fetches per batch and the oracle's memory.  The wall figures are this
// machine's under whatever else runs on it; the CPU split and the hit rate do not depend on load.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "data_bin.h"
#include "oracle.h"

enum { MAX_SWEEP = 32 };

// Plans the trace once with these settings and prints its line (none when sweep is NULL: a warm-up).
static int run_one(const bp_dataset *ds, uint64_t rows, const char *sweep, uint32_t W, uint32_t T, uint32_t B,
                   uint32_t P, uint64_t C, int threads, int parts) {
    oracle_config cfg = {.T = T, .B = B, .W = W, .P = P, .C = C, .threads = threads, .groups = parts};
    oracle_stats st;
    double t0 = bp_now();
    int rc = oracle_run_dataset(ds, BP_SPLIT_TRAIN, rows, &cfg, NULL, NULL, &st);
    double dt = bp_now() - t0;
    if (rc) {
        fprintf(stderr, "bench_plan: W=%u T=%u: %s\n", W, T, bp_errmsg(rc));
        return rc;
    }
    if (!sweep) return 0;
    double nb = (double)st.batches;
    printf("%s\t%u\t%u\t%u\t%d\t%llu\t%.4f\t%.0f\t%.3f\t%.3f\t%.3f\t%.6f\t%.1f\t%llu\n", sweep, W, T, B, threads,
           (unsigned long long)st.samples, dt, (double)st.samples / dt, 1e3 * dt / nb, 1e3 * st.cpu_index_s / nb,
           1e3 * st.cpu_plan_s / nb, st.accesses ? (double)st.hits / (double)st.accesses : 0.0,
           (double)st.fetches / nb, (unsigned long long)st.mem_bytes);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    const char *wl = NULL, *tl = NULL;
    int batch, prefetch, threads, parts, w_fixed, t_fixed;
    int64_t rows, cache;
    const cli_opt opts[] = {
        CLI_STR("windows", 0, &wl, "10,25,50,100", "lookahead windows W to sweep (at --fixed-trainers)"),
        CLI_STR("trainers", 0, &tl, "1,2,4,8", "trainer counts T to sweep (at --fixed-window)"),
        CLI_INT("fixed-window", 0, &w_fixed, 50, 0, ORACLE_MAX_WINDOW, "W of the trainer sweep"),
        CLI_INT("fixed-trainers", 0, &t_fixed, 8, 1, ORACLE_MAX_TRAINERS, "T of the window sweep"),
        CLI_INT("batch-size", 'b', &batch, 2048, 1, 1 << 24, "global batch size B"),
        CLI_INT("prefetch", 0, &prefetch, 2, 0, 1024, "prefetch distance P"),
        CLI_I64("cache", 0, &cache, 400000, 1, INT64_MAX, "cache rows per trainer C"),
        CLI_I64("rows", 0, &rows, 0, 0, INT64_MAX, "plan only the first N rows of the train split (0: all)"),
        CLI_INT("threads", 't', &threads, 1, 1, 2, "planner threads"),
        CLI_INT("parts", 0, &parts, 1, 1, 2, "the planner in one part, or split by tables in 2 (train's --oracle-parts)"),
        CLI_END,
    };
    char **pos = NULL; // (cli_parse leaves it unset when it fails)
    int npos;
    int rc = cli_parse("bench_plan", "[options] DATASET", opts, argc, argv, &pos, &npos);
    if (rc == 1) return 0;
    if (rc || npos != 1) {
        fprintf(stderr, "bench_plan: %s\n", rc ? bp_errmsg(rc) : "expected one dataset (see --help)");
        free(pos);
        return 2;
    }
    uint64_t ws[MAX_SWEEP], ts[MAX_SWEEP];
    int nw = cli_parse_u64_list("windows", wl, ws, MAX_SWEEP);
    int nt = cli_parse_u64_list("trainers", tl, ts, MAX_SWEEP);
    if (nw < 0 || nt < 0) {
        fprintf(stderr, "bench_plan: %s\n", bp_errmsg(nw < 0 ? nw : nt));
        free(pos);
        return 2;
    }
    bp_dataset ds;
    if ((rc = bp_ds_open(&ds, pos[0], 0))) {
        fprintf(stderr, "bench_plan: %s\n", bp_errmsg(rc));
        free(pos);
        return 1;
    }
    // Page the ids in so that the first configuration does not pay for reading the file.
    uint64_t sum = 0, n = ds.info.rows * ds.info.n_sparse;
    for (uint64_t i = 0; i < n; i += 1024) sum += ds.sparse[i];
    printf("# bench_plan: %s, B=%d, P=%d, C=%lld rows per trainer, %d planner thread%s, %d part%s (checksum %llu)\n",
           pos[0], batch, prefetch, (long long)cache, threads, threads > 1 ? "s" : "", parts, parts > 1 ? "s" : "",
           (unsigned long long)(sum & 0xff));
    printf("sweep\tW\tT\tB\tthreads\tsamples\tseconds\tsamples_per_s\tms_per_batch\tcpu_index_ms\tcpu_plan_ms\t"
           "hit_rate\tfetches_per_batch\tmem_bytes\n");
    // One untimed run first: the first planning of a process also pays for faulting in the
    // allocator's pages, which would otherwise fall on whichever configuration comes first.
    rc = run_one(&ds, (uint64_t)rows, NULL, (uint32_t)w_fixed, (uint32_t)t_fixed, (uint32_t)batch, (uint32_t)prefetch,
                 (uint64_t)cache, threads, parts);
    for (int i = 0; i < nw && !rc; i++)
        rc = run_one(&ds, (uint64_t)rows, "window", (uint32_t)ws[i], (uint32_t)t_fixed, (uint32_t)batch,
                     (uint32_t)prefetch, (uint64_t)cache, threads, parts);
    for (int i = 0; i < nt && !rc; i++)
        rc = run_one(&ds, (uint64_t)rows, "trainers", (uint32_t)w_fixed, (uint32_t)ts[i], (uint32_t)batch,
                     (uint32_t)prefetch, (uint64_t)cache, threads, parts);
    bp_ds_close(&ds);
    free(pos);
    return rc ? 1 : 0;
}
