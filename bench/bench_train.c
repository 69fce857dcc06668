// Training-step throughput of the local trainer on the DLRM Criteo Kaggle configuration
// (bot 13-512-256-64-16, top 512-256-1, D = 16, 26 tables with the Kaggle cardinalities,
// 33.8M rows = 2.1 GiB), fed pre-generated batches with a power-law id distribution, so the
// figure is the trainer's own speed.  Prints one JSON line per (batch, threads), the same shape
// as tools/torch_dlrm_bench.py, so bench/compare_torch.sh can put them side by side.
//
//   build/bench/bench_train [ITERS] [BATCHES] [THREADS] [stages,ab,wall]      e.g. 50 128,2048 1,2
// With "ab", each thread count above 1 is also timed with the products on OpenBLAS's own threads
// (nn_set_gemm_split(0)), alternating with the default, and printed as impl "bagpipe_blas_threads".
// With "stages" it also prints, per (batch, threads), the mean milliseconds of each stage of a
// step (the DLRM dot path of model_forward and trainer_step, run stage by stage through the same
// calls; model_backward as one stage, since on two threads its MLPs and interaction overlap) as
// one JSON line, in process CPU time: on a loaded machine that counts
// what this process ran, not the time others held the cores (with 2 threads it also counts a
// BLAS thread's spinning while it waits for work).  With "wall" as well the stages are timed by
// the wall clock instead (what each stage adds to a step on a quiet machine).
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common.h"
#include "nn.h"
#include "train.h"
#include "bench_util.h"

enum { ST_GATHER, ST_BOT_F, ST_INT_F, ST_TOP_F, ST_LOSS, ST_ZERO, ST_BWD, ST_DOPT, ST_COAL, ST_SOPT, ST_N };
static const char *const st_names[ST_N] = {"gather",    "bot_fwd",  "interact_fwd", "top_fwd",   "loss",
                                           "zero_grad", "backward", "dense_opt",    "coalesce", "sparse_opt"};

static clockid_t stage_clock = CLOCK_PROCESS_CPUTIME_ID; // CLOCK_MONOTONIC with "wall"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(stage_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// trainer_step for DLRM with a dot interaction, one stage at a time; adds each stage's seconds to t.
static void step_stages(trainer *tr, const float *dense, const uint32_t *ids, const uint8_t *label, int B,
                        double *t) {
    model *m = &tr->m;
    const model_config *c = &m->cfg;
    const float *P = m->params;
    double t0 = cpu_now(), t1;
#define LAP(k) (t1 = cpu_now(), t[k] += t1 - t0, t0 = t1)
    emb_gather(&tr->table, ids, B, tr->emb);
    LAP(ST_GATHER);
    const float *x = dense;
    for (int l = 0; l < m->n_bot; l++) {
        const model_linear *L = &m->bot[l];
        nn_linear_relu_forward(m->bot_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
        x = m->bot_a[l];
    }
    LAP(ST_BOT_F);
    nn_interact_dot_forward(m->x_in, x, tr->emb, B, c->F, c->D, c->E, m->scratch);
    LAP(ST_INT_F);
    x = m->x_in;
    for (int l = 0; l < m->n_top; l++) {
        const model_linear *L = &m->top[l];
        if (l + 1 < m->n_top) nn_linear_relu_forward(m->top_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
        else nn_linear_forward(m->top_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
        x = m->top_a[l];
    }
    m->B = B;
    LAP(ST_TOP_F);
    bce_with_logits(m->top_a[m->n_top - 1], label, B, 1.0f / (float)B, tr->dlogit);
    LAP(ST_LOSS);
    model_zero_grad(m);
    LAP(ST_ZERO);
    model_backward(m, dense, tr->emb, tr->dlogit, tr->d_emb, NULL); // the MLPs and the interaction: one stage
    LAP(ST_BWD);
    dense_opt_step(&tr->dopt, m->params, m->grads, tr->dstate, m->n_params);
    LAP(ST_DOPT);
    emb_grad_coalesce(&tr->g, &tr->L, ids, tr->d_emb, B);
    LAP(ST_COAL);
    emb_opt_apply_table(&tr->eopt, &tr->table, &tr->g, nn_threads());
    LAP(ST_SOPT);
#undef LAP
}

static const uint64_t kaggle[26] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                                    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

// Seconds of the last n - warm of n steps over consecutive batches.
static double time_steps(trainer *tr, const float *dense, const uint32_t *ids, const uint8_t *lab, int B, int n,
                         int warm) {
    const int F = tr->m.cfg.F, Nd = tr->m.cfg.Nd;
    double t0 = 0;
    for (int i = 0; i < n; i++) {
        if (i == warm) t0 = bp_now();
        size_t r = (size_t)i * B;
        trainer_step(tr, i, dense + r * Nd, ids + r * F, lab + r, B);
    }
    return bp_now() - t0;
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[ITERS] [BATCHES] [THREADS] [stages,ab,wall]",
                   "training-step throughput of the local trainer on the DLRM Kaggle configuration, one JSON line per\n"
                   "(batch, threads); e.g. 50 128,2048 1,2.  stages: per-stage milliseconds; ab: also products on\n"
                   "OpenBLAS's threads; wall: with stages, the stages timed by the wall clock instead of CPU time\n"
                   "(the comment at the top of bench/bench_train.c says more)"))
        return 0;
    int iters = (int)bench_num_arg(argc, argv, 1, 50, 1, "ITERS"), warm = 5;
    if (iters < 0) return 2;
    uint64_t bl[8], tl[8];
    int nb = cli_parse_u64_list("batches", argc > 2 ? argv[2] : "128,2048", bl, 8);
    int nt = cli_parse_u64_list("threads", argc > 3 ? argv[3] : "1,2", tl, 8);
    const char *mode = argc > 4 ? argv[4] : "";
    int stages = strstr(mode, "stages") != NULL, ab = strstr(mode, "ab") != NULL;
    if (strstr(mode, "wall")) stage_clock = CLOCK_MONOTONIC;
    if (nb <= 0 || nt <= 0 || iters <= 0 || (argc > 4 && !stages && !ab)) {
        fprintf(stderr, "usage: bench_train [ITERS] [BATCHES] [THREADS] [stages,ab,wall]\n");
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
            // With "ab" and T > 1: best of two alternating runs with the products cut into
            // single-threaded slices (the default) and with OpenBLAS's own threads.
            int variants = ab && tl[ti] > 1 ? 2 : 1;
            double best[2] = {1e30, 1e30};
            for (int round = 0; round < (variants > 1 ? 2 : 1); round++)
                for (int v = 0; v < variants; v++) {
                    nn_set_gemm_split(v == 0);
                    double dt = time_steps(&tr, dense, ids, lab, B, n, warm);
                    best[v] = BP_MIN(best[v], dt);
                }
            nn_set_gemm_split(1);
            for (int v = 0; v < variants; v++) {
                double dt = best[v];
                printf("{\"impl\":\"%s\",\"batch\":%d,\"threads\":%d,\"samples_per_s\":%.1f,\"ms_per_iter\":%.3f,"
                       "\"blas\":\"%s\"}\n", v ? "bagpipe_blas_threads" : "bagpipe", B, (int)tl[ti], (double)iters * B / dt,
                       1000 * dt / iters, openblas_get_corename());
            }
            fflush(stdout);
            if (!stages) continue;
            double t[ST_N] = {0};
            for (int i = 0; i < n; i++) {
                if (i == warm) memset(t, 0, sizeof t);
                size_t r = (size_t)i * B;
                step_stages(&tr, dense + r * Nd, ids + r * F, lab + r, B, t);
            }
            double total = 0;
            printf("{\"stages_ms\":{\"batch\":%d,\"threads\":%d", B, (int)tl[ti]);
            for (int k = 0; k < ST_N; k++) {
                printf(",\"%s\":%.3f", st_names[k], 1000 * t[k] / iters);
                total += t[k];
            }
            printf(",\"total\":%.3f}}\n", 1000 * total / iters);
            fflush(stdout);
        }
    }
    free(dense), free(ids), free(lab);
    trainer_free(&tr);
    return 0;
}
