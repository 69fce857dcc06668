// Access analysis speed: samples per second of analyze_run over criteo-kaggle synthetic data
// (26 tables, 33.8M rows: 270 MB of per-row state), with 1 and 2 threads, held in memory, after
// one untimed run.
//
//   build/bench/bench_analyze [ROWS]     (default 4000000)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "bench_util.h"
#include "common.h"
#include "data_synth.h"

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[ROWS]",
                   "access analysis speed (samples/s of analyze_run) on criteo-kaggle synthetic data, 1 and "
                   "2 threads; ROWS default 4000000"))
        return 0;
    const double rows_arg = bench_num_arg(argc, argv, 1, 4000000, 1, "ROWS");
    if (rows_arg < 0) return 2;
    uint64_t rows = (uint64_t)rows_arg;
    synth_opts o;
    synth_opts_default(&o, SYNTH_PRESET_CRITEO_KAGGLE);
    o.rows = rows;
    synth_model *m;
    if (synth_opts_check(&o) || synth_model_init(&m, &o)) return 1;
    const uint32_t F = o.n_tables;
    uint32_t *sparse = bp_xmalloc(rows * F * sizeof *sparse); // (rows, F)
    synth_rows r;
    synth_rows_alloc(&r, o.n_dense, F);
    for (uint64_t c = 0; c * SYNTH_CHUNK_ROWS < rows; c++) {
        synth_model_gen_chunk(m, c, &r);
        memcpy(sparse + c * SYNTH_CHUNK_ROWS * F, r.sparse, (size_t)r.n * F * sizeof *sparse);
    }
    synth_rows_free(&r);
    synth_model_free(m);

    bp_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.info.rows = rows, ds.info.n_sparse = F, ds.info.split[0] = rows;
    memcpy(ds.info.card, o.card, F * sizeof *o.card);
    ds.sparse = sparse;
    ds.path = "(memory)";
    printf("bench_analyze: criteo-kaggle, %llu samples, batch 2048\n", (unsigned long long)rows);
    { // an untimed run first: the first one faults in the state's pages and the allocator's, which
      // the 1-thread run, timed first, used to take alone (2 threads then looked 10x faster)
        analyze_opts ao = {2048, BP_SPLIT_ALL, 1};
        analyze_result res;
        if (analyze_run(&ds, &ao, &res)) return 1;
        analyze_result_free(&res);
    }
    for (int T = 1; T <= 2; T++) {
        analyze_opts ao = {2048, BP_SPLIT_ALL, T};
        analyze_result res;
        double t0 = bp_now();
        if (analyze_run(&ds, &ao, &res)) return 1;
        double dt = bp_now() - t0;
        printf("  %d thread%s  %6.1fM samples/s (%.2f s: pass over the lookups %.2f s = %.1fM samples/s, skew %.2f s, "
               "the rest is allocating the state); top 1%% of rows take %.1f%%\n",
               T, T > 1 ? "s" : " ", rows / dt / 1e6, dt, res.pass_seconds, rows / res.pass_seconds / 1e6,
               res.skew_seconds, 100 * res.overall.top_share[1]);
        analyze_result_free(&res);
    }
    free(sparse);
    return 0;
}
