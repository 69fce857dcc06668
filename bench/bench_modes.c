// bench_modes: time and bytes per iteration of the baselines side by side in one run, through
// the bagpipe binary: `local`, `sync` (T = 2, S = 1), `sharded` (T = 2, no servers) and
// `static` (T = 2, S = 1, 1% of the rows pinned), on a small synthetic DLRM whose rows follow
// `bagpipe synth`'s Zipf popularity (the top 1% of rows take ~90% of the accesses).
//
//   build/bench/bench_modes [BAGPIPE_BIN] [ITERS]
//
// Prints per mode: milliseconds per iteration (the summary's train_s / iterations, the first
// iteration left out: bench_steady_s), the split of a trainer's time, and the bytes per iteration of each kind summed over the trainers (row fetch
// = requests + replies, gradient push, dense all-reduce, pinned-row gradients), plus static's
// hit rate.  Figures are lower bounds on a shared machine; with 3-4 ranks on 2 cores the
// distributed modes also pay for oversubscription.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

// Prints v with the format, or "-" right-aligned in the same width when v is NaN (no such figure).
static void cell(const char *fmt, int width, double v) {
    if (isnan(v)) printf(" %*s", width, "-");
    else printf(fmt, v);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[BAGPIPE_BIN] [ITERS]",
                   "time and bytes per iteration of local, sync, sharded and static side by side; defaults "
                   "build/bagpipe, 300"))
        return 0;
    const char *bin = argc > 1 ? argv[1] : getenv("BAGPIPE_BIN") ? getenv("BAGPIPE_BIN") : "build/bagpipe";
    const int iters = (int)bench_num_arg(argc, argv, 2, 300, 1, "ITERS");
    if (iters < 0) return 2;
    const char *dir = bench_scratch("/tmp", "bench-modes");
    if (!dir) return 1;
    char data[600], cmd[2048];
    snprintf(data, sizeof data, "%s/d.bin", dir);
    snprintf(cmd, sizeof cmd,
             "%s synth --preset custom --tables 1000,5000,20000,100000,100000,300,50,200000 --dense 13 -n 200000 "
             "--seed 42 -o %s > /dev/null", bin, data);
    if (bench_system(cmd) != 0) {
        fprintf(stderr, "bench_modes: failed: %s\n", cmd);
        return 1;
    }
    const char *model = "--arch-mlp-bot 13-64-16 --arch-mlp-top 64-1 --arch-sparse-feature-size 16 --batch-size 512 "
                        "--no-eval --print-every 100";
    enum { NM = 4 };
    const char *modes[NM][2] = {{"local", "--mode local"},
                                {"sync T=2 S=1", "--mode sync --trainers 2 --servers 1"},
                                {"sharded T=2", "--mode sharded --trainers 2 --servers 0"},
                                {"static T=2 S=1", "--mode static --trainers 2 --servers 1"}};
    double spi[NM];
    printf("bench_modes: DLRM 13-64-16 / 64-1, D=16, 8 tables (426k rows, Zipf), batch 512, %d iterations, "
           "binary %s\n", iters, bin);
    printf("%-15s %8s %8s %8s %8s %8s %11s %11s %11s %11s %11s %6s\n", "mode", "ms/iter", "wait_ms", "sync_ms",
           "ar_ms", "comp_ms", "fetch_B/it", "push_B/it", "allred_B/it", "hot_B/it", "total_B/it", "hit");
    for (int m = 0; m < NM; m++) {
        char mpath[600];
        snprintf(mpath, sizeof mpath, "%s/m%d.jsonl", dir, m);
        snprintf(cmd, sizeof cmd, "%s train %s %s --iters %d --metrics %s %s > /dev/null", bin, modes[m][1], model,
                 iters, mpath, data);
        if (bench_system(cmd) != 0) {
            fprintf(stderr, "bench_modes: failed: %s\n", cmd);
            return 1;
        }
        const double it = iters;
        spi[m] = bench_steady_s(mpath, "train_s", iters);
        double b[4] = {bench_summary_num(mpath, "bytes_row_fetch"), bench_summary_num(mpath, "bytes_grad_push"),
                       bench_summary_num(mpath, "bytes_allreduce"), bench_summary_num(mpath, "bytes_hot_sync")};
        double total = 0;
        for (int k = 0; k < 4; k++) total += isnan(b[k]) ? 0 : b[k];
        printf("%-15s %8.3f", modes[m][0], 1e3 * spi[m]);
        const char *tk[4] = {"wait_rows_s", "emb_sync_s", "allreduce_s", "compute_s"};
        for (int k = 0; k < 4; k++) cell(" %8.3f", 8, 1e3 * bench_steady_s(mpath, tk[k], iters));
        for (int k = 0; k < 4; k++) cell(" %11.0f", 11, b[k] / it);
        cell(" %11.0f", 11, m == 0 ? NAN : total / it);
        cell(" %6.3f", 6, bench_summary_num(mpath, "hit_rate"));
        printf("\n");
    }
    printf("time per iteration / sync T=2: local %.2fx, sharded %.2fx, static %.2fx\n", spi[0] / spi[1],
           spi[2] / spi[1], spi[3] / spi[1]);
    return 0;
}
