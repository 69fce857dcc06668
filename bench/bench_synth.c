// Synthetic data generation speed: criteo-kaggle rows per second, generated in memory (no
// writer), to the binary dataset and to Criteo TSV, with 1 and 2 generator threads.  Where the
// CPU has AVX-512, the previous path ("scalar": the one-row-at-a-time generator and, for binary
// output, data_bin's summary with zlib's CRC-32; same bytes) runs beside the current one
// ("avx512": the AVX-512 generator and synth_rows_summarize) in the same process, alternating,
// so their ratio is measured under the same load.
//
//   build/bench/bench_synth [ROWS] [DIR]     (defaults: 2000000 rows, $TMPDIR or /tmp)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
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

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Rows per second of generation alone (no output) with T threads splitting the chunks; *per_cpu
// gets rows per CPU-second (less sensitive to other load on a shared machine).
static double gen_rate(const synth_model *m, uint64_t rows, int T, double *per_cpu) {
    uint64_t nchunks = (rows + SYNTH_CHUNK_ROWS - 1) / SYNTH_CHUNK_ROWS;
    pthread_t th[8];
    gen_job jobs[8];
    double t0 = bp_now(), c0 = cpu_seconds();
    for (int t = 0; t < T; t++) {
        jobs[t] = (gen_job){m, nchunks * t / T, nchunks * (t + 1) / T};
        pthread_create(&th[t], NULL, gen_only, &jobs[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    *per_cpu = rows / (cpu_seconds() - c0);
    return rows / (bp_now() - t0);
}

// Rows per second of the binary writer alone (appending one pre-generated chunk over and over,
// then committing): the ceiling of `synth` to binary whatever the generator does.
static void writer_rate(const synth_model *m, const synth_opts *o, const char *path, int sized) {
    synth_rows r;
    synth_rows_alloc(&r, o->n_dense, o->n_tables);
    synth_model_gen_chunk(m, 0, &r);
    bp_ds_info t;
    memset(&t, 0, sizeof t);
    t.n_dense = o->n_dense, t.n_sparse = o->n_tables, t.transform = BP_TRANSFORM_LOG1P, t.flags = BP_DS_HAS_PROB;
    bp_ds_writer *w;
    const uint64_t rows = o->rows / r.n * r.n;
    double t0 = bp_now();
    if ((sized ? bp_ds_writer_open_sized(&w, path, &t, rows) : bp_ds_writer_open(&w, path, &t))) return;
    uint64_t done = 0;
    while (done < rows) {
        if (bp_ds_writer_append(w, r.n, r.label, r.dense, r.sparse, r.prob)) return;
        done += r.n;
    }
    double t1 = bp_now();
    if (bp_ds_writer_finish(w, o->card, NULL)) return;
    double t2 = bp_now();
    unlink(path);
    printf("  writer only, %-8s               %6.2fM rows/s appending, %6.2fM rows/s with the commit (%.2f s of it)\n",
           sized ? "sized" : "spilled", done / (t1 - t0) / 1e6, done / (t2 - t0) / 1e6, t2 - t1);
    synth_rows_free(&r);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[ROWS] [DIR]",
                   "synthetic data generation speed (rows/s) in memory, to the binary dataset and to Criteo "
                   "TSV, 1 and 2 threads; defaults 2000000 rows, $TMPDIR or /tmp"))
        return 0;
    const double rows_arg = bench_num_arg(argc, argv, 1, 2000000, 1, "ROWS");
    if (rows_arg < 0) return 2;
    uint64_t rows = (uint64_t)rows_arg;
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
    const int simd = synth_model_simd(m);
    printf("bench_synth: criteo-kaggle, %llu rows; model set-up (calibration, bias) %.3f s; AVX-512 path %s\n",
           (unsigned long long)rows, bp_now() - t0, simd ? "available" : "not available (scalar only)");
    static const char *path_name[2] = {"scalar", "avx512"};
    for (int T = 1; T <= 2; T++) {
        double r[2] = {0, 0}, cpu[2] = {0, 0};
        for (int p = simd ? 0 : 1; p < 2; p++) {
            synth_model_set_simd(m, p);
            r[p] = gen_rate(m, rows, T, &cpu[p]);
            printf("  generate only, %d thread%s, %s  %6.2fM rows/s (%.2fM rows per CPU-second)\n", T,
                   T > 1 ? "s" : " ", path_name[synth_model_simd(m)], r[p] / 1e6, cpu[p] / 1e6);
        }
        if (simd) printf("    avx512 / scalar: %.2fx wall, %.2fx per CPU-second\n", r[1] / r[0], cpu[1] / cpu[0]);
    }
    writer_rate(m, &o, path, 0);
    writer_rate(m, &o, path, 1);
    synth_model_free(m);

    for (int fmt = 0; fmt < 2; fmt++) {
        for (int T = 1; T <= 2; T++) {
            double with_commit[2] = {0, 0}, per_cpu[2] = {0, 0};
            for (int p = simd ? 0 : 1; p < 2; p++) {
                o.format = fmt ? SYNTH_FMT_TSV : SYNTH_FMT_BIN;
                o.threads = T;
                o.scalar = !p;
                synth_report rep;
                double c0 = cpu_seconds();
                int rc = synth_run(&o, &rep);
                per_cpu[p] = rows / (cpu_seconds() - c0);
                unlink(path);
                if (rc) {
                    fprintf(stderr, "synth_run: %s\n", bp_errmsg(rc));
                    return 1;
                }
                with_commit[p] = rows / rep.seconds;
                printf("  %-3s %d thread%s, %s  %6.2fM rows/s until the last append, %6.2fM rows/s with the commit "
                       "(%.0f MB/s, %.2f s); %.2fM rows per CPU-second\n",
                       fmt ? "tsv" : "bin", T, T > 1 ? "s" : " ", path_name[p], rows / rep.gen_seconds / 1e6,
                       rows / rep.seconds / 1e6, rep.bytes / rep.seconds / 1e6, rep.seconds, per_cpu[p] / 1e6);
            }
            if (simd)
                printf("    avx512 / scalar: %.2fx with the commit, %.2fx per CPU-second (all threads of the job)\n",
                       with_commit[1] / with_commit[0], per_cpu[1] / per_cpu[0]);
        }
    }
    return 0;
}
