// bench_bagpipe: time and bytes per iteration of `--mode sync` vs `--mode bagpipe` (T = 2, S = 1)
// on a small synthetic DLRM, measured side by side in one run through the bagpipe binary, with
// bagpipe's cache hit rate.
//
//   build/bench/bench_bagpipe [BAGPIPE_BIN] [ITERS] [CACHE_ROWS]
//
// Prints per mode: seconds per iteration (from the summary's train_s) and the split of a trainer's
// time (waiting for rows, embedding sync, dense all-reduce, compute), both with the first
// iteration left out (bench_steady_s), and the bytes per iteration
// of each kind (summed over trainers).  Figures are lower bounds on a shared machine; the ranks
// are oversubscribed when ranks > cores, so sync pays for that too.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#include "common.h"
#include "data_bin.h"

static int write_dataset(const char *path, uint64_t n) {
    bp_ds_info t = {0};
    t.n_dense = 13, t.n_sparse = 8, t.kind = BP_KIND_CUSTOM;
    snprintf(t.source, sizeof t.source, "bench_bagpipe");
    bp_ds_writer *w;
    int rc = bp_ds_writer_open(&w, path, &t);
    if (rc) return rc;
    const uint64_t card[8] = {1000, 5000, 20000, 100000, 100000, 300, 50, 200000};
    bp_rng rng;
    bp_rng_seed(&rng, 42, 0);
    for (uint64_t r = 0; r < n && !rc; r++) {
        float d[13];
        uint32_t s[8];
        double z = 0;
        for (int k = 0; k < 13; k++) d[k] = bp_rng_uniformf(&rng), z += 0.1 * (k - 6) * d[k];
        for (int f = 0; f < 8; f++) {
            double u = bp_rng_uniform(&rng);
            s[f] = (uint32_t)((double)card[f] * u * u * u * u); // skewed: a few rows take most accesses
            z += ((bp_mix64(s[f] + 7919u * f) & 255) / 255.0 - 0.5);
        }
        uint8_t lab = bp_rng_uniform(&rng) < 1.0 / (1.0 + exp(-z));
        rc = bp_ds_writer_append(w, 1, &lab, d, s, NULL);
    }
    if (rc) {
        bp_ds_writer_abort(w);
        return rc;
    }
    return bp_ds_writer_finish(w, card, NULL);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[BAGPIPE_BIN] [ITERS] [CACHE_ROWS]",
                   "time and bytes per iteration of --mode sync against --mode bagpipe (T = 2, S = 1); "
                   "defaults build/bagpipe, 300, 60000"))
        return 0;
    const char *bin = argc > 1 ? argv[1] : getenv("BAGPIPE_BIN") ? getenv("BAGPIPE_BIN") : "build/bagpipe";
    const int iters = (int)bench_num_arg(argc, argv, 2, 300, 1, "ITERS");
    const long cache = (long)bench_num_arg(argc, argv, 3, 60000, 1, "CACHE");
    if (iters < 0 || cache < 0) return 2;
    const char *dir = bench_scratch("/tmp", "bench-bagpipe");
    if (!dir) return 1;
    char data[600];
    snprintf(data, sizeof data, "%s/d.bin", dir);
    int rc = write_dataset(data, 200000);
    if (rc) {
        fprintf(stderr, "bench_bagpipe: %s\n", bp_errmsg(rc));
        return 1;
    }
    const char *model = "--arch-mlp-bot 13-64-16 --arch-mlp-top 64-1 --arch-sparse-feature-size 16 --batch-size 512 "
                        "--no-eval --print-every 100";
    char bp[256];
    snprintf(bp, sizeof bp, "--mode bagpipe --trainers 2 --servers 1 --cache-rows %ld --lookahead 32 --prefetch 2", cache);
    const char *modes[2][2] = {{"sync T=2 S=1", "--mode sync --trainers 2 --servers 1"}, {"bagpipe T=2 S=1", bp}};
    double spi[2];
    printf("bench_bagpipe: DLRM 13-64-16 / 64-1, D=16, 8 tables (426k rows), batch 512, %d iterations, cache %ld rows, "
           "binary %s\n", iters, cache, bin);
    printf("%-16s %8s %8s %8s %8s %8s %11s %11s %11s %11s %11s %11s %6s\n", "mode", "ms/iter", "wait_ms", "sync_ms",
           "allred_ms", "comp_ms", "fetch_B/it", "push_B/it", "fwd_B/it", "wb_B/it", "esync_B/it", "dense_B/it", "hit%");
    for (int m = 0; m < 2; m++) {
        char mpath[600], cmd[2048];
        snprintf(mpath, sizeof mpath, "%s/m%d.jsonl", dir, m);
        snprintf(cmd, sizeof cmd, "%s train %s %s --iters %d --metrics %s %s > /dev/null", bin, modes[m][1], model, iters,
                 mpath, data);
        if (bench_system(cmd) != 0) {
            fprintf(stderr, "bench_bagpipe: failed: %s\n", cmd);
            return 1;
        }
        spi[m] = bench_steady_s(mpath, "train_s", iters);
        double it = iters;
        double push = m == 0 ? bench_summary_num(mpath, "bytes_grad_push") / it : 0;
        double fwd = m == 1 ? bench_summary_num(mpath, "bytes_forward") / it : 0;
        double wb = m == 1 ? bench_summary_num(mpath, "bytes_write_back") / it : 0;
        double es = m == 1 ? bench_summary_num(mpath, "bytes_emb_sync") / it : 0;
        double hit = m == 1 ? 100 * bench_summary_num(mpath, "hit_rate") : 0;
        printf("%-16s %8.3f %8.3f %8.3f %8.3f %8.3f %11.0f %11.0f %11.0f %11.0f %11.0f %11.0f %6.1f\n", modes[m][0],
               1e3 * spi[m], 1e3 * bench_steady_s(mpath, "wait_rows_s", iters), 1e3 * bench_steady_s(mpath, "emb_sync_s", iters),
               1e3 * bench_steady_s(mpath, "allreduce_s", iters), 1e3 * bench_steady_s(mpath, "compute_s", iters),
               bench_summary_num(mpath, "bytes_row_fetch") / it, push, fwd, wb, es, bench_summary_num(mpath, "bytes_allreduce") / it,
               hit);
    }
    printf("time per iteration, bagpipe / sync (T=2, S=1): %.2fx\n", spi[1] / spi[0]);
    return 0;
}
