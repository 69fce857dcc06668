// Training-step throughput of the local trainer on the DLRM Criteo Kaggle configuration
// (bot 13-512-256-64-16, top 512-256-1, D = 16, 26 tables with the Kaggle cardinalities,
// 33.8M rows = 2.1 GiB), fed pre-generated batches with a power-law id distribution, so the
// figure is the trainer's own speed.  Prints one JSON line per (batch, threads), the same shape
// as tools/torch_dlrm_bench.py, so bench/compare_torch.sh can put them side by side.
//
//   build/bench/bench_train [ITERS] [BATCHES] [THREADS]      e.g. 50 128,2048 1,2
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "train.h"

static const uint64_t kaggle[26] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                                    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 50, warm = 5;
    uint64_t bl[8], tl[8];
    int nb = cli_parse_u64_list("batches", argc > 2 ? argv[2] : "128,2048", bl, 8);
    int nt = cli_parse_u64_list("threads", argc > 3 ? argv[3] : "1,2", tl, 8);
    if (nb <= 0 || nt <= 0 || iters <= 0) {
        fprintf(stderr, "usage: bench_train [ITERS] [BATCHES] [THREADS]\n");
        return 2;
    }
    const int F = 26, Nd = 13;
    int maxB = 0;
    for (int i = 0; i < nb; i++) maxB = BP_MAX(maxB, (int)bl[i]);
    model_config mc;
    if (model_config_parse(&mc, "--model dlrm", Nd, F)) {
        fprintf(stderr, "%s\n", bp_errmsg(-1));
        return 1;
    }
    emb_opt eopt = emb_opt_make(EMB_OPT_SGD, 0.1f, mc.E);
    dense_opt dopt = dense_opt_make(DENSE_OPT_SGD, 0.1f);
    emb_layout_cfg lc = {.F = F, .card = kaggle, .D = mc.D, .E = mc.E, .S = 0, .seed = 1};
    trainer tr;
    int rc = trainer_init(&tr, &mc, &lc, &dopt, &eopt, maxB, 0);
    if (rc) {
        fprintf(stderr, "%s\n", bp_errmsg(rc));
        return 1;
    }
    bp_rng rng;
    bp_rng_seed(&rng, 1, 0);
    model_init_params(&tr.m, &rng);
    const int n = iters + warm;
    float *dense = bp_xmalloc((size_t)n * maxB * Nd * sizeof(float));
    uint32_t *ids = bp_xmalloc((size_t)n * maxB * F * sizeof(uint32_t));
    uint8_t *lab = bp_xmalloc((size_t)n * maxB);
    for (size_t i = 0; i < (size_t)n * maxB; i++) {
        for (int d = 0; d < Nd; d++) dense[i * Nd + d] = log1pf((float)bp_rng_below(&rng, 100));
        for (int f = 0; f < F; f++) {
            // Zipf-like rank (exponent 1.1) scattered over the table, as tools/torch_dlrm_bench.py.
            double c = (double)kaggle[f], u = bp_rng_uniform(&rng), a = 1.1;
            double r = pow((pow(c + 1.0, 1 - a) - 1) * u + 1, 1.0 / (1 - a));
            uint64_t rank = (uint64_t)r;
            if (rank < 1) rank = 1;
            if (rank > kaggle[f]) rank = kaggle[f];
            ids[i * F + f] = (uint32_t)(((rank - 1) * 2654435761ull) % kaggle[f]);
        }
        lab[i] = bp_rng_uniform(&rng) < 0.25;
    }
    for (int bi = 0; bi < nb; bi++) {
        int B = (int)bl[bi];
        for (int ti = 0; ti < nt; ti++) {
            openblas_set_num_threads((int)tl[ti]);
            double t0 = 0;
            for (int i = 0; i < n; i++) {
                if (i == warm) t0 = bp_now();
                size_t r = (size_t)i * B;
                trainer_step(&tr, dense + r * Nd, ids + r * F, lab + r, B);
            }
            double dt = bp_now() - t0;
            printf("{\"impl\":\"bagpipe\",\"batch\":%d,\"threads\":%d,\"samples_per_s\":%.1f,\"ms_per_iter\":%.3f,"
                   "\"blas\":\"%s\"}\n", B, (int)tl[ti], (double)iters * B / dt, 1000 * dt / iters, openblas_get_corename());
            fflush(stdout);
        }
    }
    free(dense), free(ids), free(lab);
    trainer_free(&tr);
    return 0;
}
