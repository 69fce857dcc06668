// Synthetic data generation speed: criteo-kaggle rows per second, generated in memory (no
// writer), to the binary dataset and to Criteo TSV, with 1 and 2 generator threads.
//
//   build/bench/bench_synth [ROWS] [DIR]     (defaults: 2000000 rows, $TMPDIR or /tmp)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "data_synth.h"

typedef struct {
    const synth_model *m;
    uint64_t c0, c1; // chunks [c0, c1)
} gen_job;

static void *gen_only(void *arg) {
    gen_job *j = arg;
    synth_rows r;
    synth_rows_alloc(&r, synth_model_n_dense(j->m), synth_model_n_tables(j->m));
    for (uint64_t c = j->c0; c < j->c1; c++) synth_model_gen_chunk(j->m, c, &r);
    synth_rows_free(&r);
    return NULL;
}

// Rows per second of generation alone (no output) with T threads splitting the chunks.
static double gen_rate(const synth_model *m, uint64_t rows, int T) {
    uint64_t nchunks = (rows + SYNTH_CHUNK_ROWS - 1) / SYNTH_CHUNK_ROWS;
    pthread_t th[8];
    gen_job jobs[8];
    double t0 = bp_now();
    for (int t = 0; t < T; t++) {
        jobs[t] = (gen_job){m, nchunks * t / T, nchunks * (t + 1) / T};
        pthread_create(&th[t], NULL, gen_only, &jobs[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    return rows / (bp_now() - t0);
}

int main(int argc, char **argv) {
    uint64_t rows = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    const char *dir = argc > 2 ? argv[2] : getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/bench_synth.%d", dir, (int)getpid());

    synth_opts o;
    synth_opts_default(&o, SYNTH_PRESET_CRITEO_KAGGLE);
    o.rows = rows;
    o.out = path;
    if (synth_opts_check(&o)) return 1;
    double t0 = bp_now();
    synth_model *m;
    if (synth_model_init(&m, &o)) return 1;
    printf("bench_synth: criteo-kaggle, %llu rows; model set-up (calibration, bias) %.3f s\n",
           (unsigned long long)rows, bp_now() - t0);
    for (int T = 1; T <= 2; T++) printf("  generate only, %d thread%s  %6.2fM rows/s\n", T, T > 1 ? "s" : " ",
                                          gen_rate(m, rows, T) / 1e6);
    synth_model_free(m);

    for (int fmt = 0; fmt < 2; fmt++) {
        for (int T = 1; T <= 2; T++) {
            o.format = fmt ? SYNTH_FMT_TSV : SYNTH_FMT_BIN;
            o.threads = T;
            synth_report rep;
            int rc = synth_run(&o, &rep);
            unlink(path);
            if (rc) {
                fprintf(stderr, "synth_run: %s\n", bp_errmsg(rc));
                return 1;
            }
            printf("  %-3s %d thread%s  %6.2fM rows/s until the last append, %6.2fM rows/s with the commit "
                   "(%.0f MB/s, %.2f s)\n",
                   fmt ? "tsv" : "bin", T, T > 1 ? "s" : " ", rows / rep.gen_seconds / 1e6, rows / rep.seconds / 1e6,
                   rep.bytes / rep.seconds / 1e6, rep.seconds);
        }
    }
    return 0;
}
