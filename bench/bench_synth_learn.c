// How learnable the planted model of `synth` is: on criteo-kaggle data (kaggle split), the test
// AUC of the true probability (Bayes-optimal), of the true logit without the pairwise
// interactions (what a model without feature crosses can reach at best), and of a logistic
// regression with one weight per table row plus the dense features, trained with Adagrad.
//
//   build/bench/bench_synth_learn [ROWS] [EPOCHS]     (defaults: 1000000 rows, 2 epochs)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common.h"
#include "data_synth.h"

typedef struct {
    uint32_t n_dense, n_tables;
    uint64_t rows;
    uint8_t *label;   // (rows)
    float *dense;     // (rows, Nd)
    uint32_t *sparse; // (rows, F)
    float *prob;      // (rows)
} dataset;

static void generate(dataset *d, synth_opts *o) {
    synth_model *m;
    if (synth_opts_check(o) || synth_model_init(&m, o)) {
        fprintf(stderr, "bad options\n");
        exit(1);
    }
    const uint32_t Nd = o->n_dense, F = o->n_tables;
    d->n_dense = Nd, d->n_tables = F, d->rows = o->rows;
    d->label = bp_xmalloc(o->rows);
    d->dense = bp_xmalloc(o->rows * Nd * sizeof(float));
    d->sparse = bp_xmalloc(o->rows * F * sizeof(uint32_t));
    d->prob = bp_xmalloc(o->rows * sizeof(float));
    synth_rows r;
    synth_rows_alloc(&r, Nd, F);
    for (uint64_t c = 0; c * SYNTH_CHUNK_ROWS < o->rows; c++) {
        synth_model_gen_chunk(m, c, &r);
        uint64_t at = c * SYNTH_CHUNK_ROWS;
        memcpy(d->label + at, r.label, r.n);
        memcpy(d->dense + at * Nd, r.dense, (size_t)r.n * Nd * sizeof(float));
        memcpy(d->sparse + at * F, r.sparse, (size_t)r.n * F * sizeof(uint32_t));
        memcpy(d->prob + at, r.prob, r.n * sizeof(float));
    }
    synth_rows_free(&r);
    synth_model_free(m);
}

typedef struct {
    float p;
    uint8_t y;
} scored;
static int scored_cmp(const void *a, const void *b) {
    float x = ((const scored *)a)->p, z = ((const scored *)b)->p;
    return x < z ? -1 : x > z;
}
static double auc(const float *p, const uint8_t *y, uint64_t n) {
    scored *s = bp_xmalloc(n * sizeof *s);
    for (uint64_t i = 0; i < n; i++) s[i] = (scored){p[i], y[i]};
    qsort(s, n, sizeof *s, scored_cmp);
    double pos = 0, neg = 0, rank_sum = 0;
    for (uint64_t i = 0; i < n;) {
        uint64_t j = i, np = 0;
        while (j < n && s[j].p == s[i].p) np += s[j++].y;
        rank_sum += np * 0.5 * (double)(i + 1 + j);
        pos += (double)np, neg += (double)(j - i - np);
        i = j;
    }
    free(s);
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[ROWS] [EPOCHS]",
                   "test AUC of synth's planted model: Bayes, without pairs, and a logistic regression; "
                   "defaults 1000000 rows, 2 epochs"))
        return 0;
    uint64_t rows = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int epochs = argc > 2 ? atoi(argv[2]) : 2;
    synth_opts o;
    synth_opts_default(&o, SYNTH_PRESET_CRITEO_KAGGLE);
    o.rows = rows;
    dataset d, dn;
    generate(&d, &o);
    o.n_pairs = 0; // same ids and dense values (pairs draw no random numbers), no crosses in the logit
    generate(&dn, &o);
    uint64_t split[3];
    synth_split_sizes(&o, split);
    const uint64_t tb = split[0] + split[1], te = rows, ntr = split[0];
    const uint32_t Nd = d.n_dense, F = d.n_tables;
    printf("bench_synth_learn: criteo-kaggle, %llu rows (train %llu, test %llu)\n", (unsigned long long)rows,
           (unsigned long long)ntr, (unsigned long long)(te - tb));
    double bayes = auc(d.prob + tb, d.label + tb, te - tb), nopair = auc(dn.prob + tb, d.label + tb, te - tb);
    printf("  Bayes-optimal AUC (true probability)          %.4f\n", bayes);
    printf("  true logit without the pairwise interactions   %.4f\n", nopair);

    // Logistic regression: one weight per table row, Nd dense weights, a bias; Adagrad.
    const uint64_t *card = o.card;
    uint64_t off[64], total = 0;
    for (uint32_t f = 0; f < F; f++) off[f] = total, total += card[f];
    float *w = bp_xcalloc(total + Nd + 1, sizeof *w), *g2 = bp_xcalloc(total + Nd + 1, sizeof *g2);
    const float lr = 0.02f, l2 = 1e-6f;
    float *pred = bp_xmalloc((te - tb) * sizeof *pred);
    for (int ep = 1; ep <= epochs; ep++) {
        double t0 = bp_now(), loss = 0;
        for (uint64_t i = 0; i < ntr; i++) {
            const uint32_t *s = d.sparse + i * F;
            const float *x = d.dense + i * Nd;
            float z = w[total + Nd];
            for (uint32_t f = 0; f < F; f++) z += w[off[f] + s[f]];
            for (uint32_t j = 0; j < Nd; j++) z += w[total + j] * x[j];
            float p = 1 / (1 + expf(-z)), g = p - d.label[i];
            loss -= d.label[i] ? log(p + 1e-12) : log(1 - p + 1e-12);
            for (uint32_t f = 0; f < F; f++) {
                uint64_t k = off[f] + s[f];
                float gk = g + l2 * w[k];
                g2[k] += gk * gk;
                w[k] -= lr * gk / sqrtf(g2[k] + 1e-8f);
            }
            for (uint32_t j = 0; j <= Nd; j++) {
                uint64_t k = total + j;
                float gk = j < Nd ? g * x[j] : g;
                g2[k] += gk * gk;
                w[k] -= lr * gk / sqrtf(g2[k] + 1e-8f);
            }
        }
        for (uint64_t i = tb; i < te; i++) {
            const uint32_t *s = d.sparse + i * F;
            const float *x = d.dense + i * Nd;
            float z = w[total + Nd];
            for (uint32_t f = 0; f < F; f++) z += w[off[f] + s[f]];
            for (uint32_t j = 0; j < Nd; j++) z += w[total + j] * x[j];
            pred[i - tb] = z;
        }
        printf("  logistic regression, epoch %d: train logloss %.4f, test AUC %.4f  (%.1f s)\n", ep, loss / ntr,
               auc(pred, d.label + tb, te - tb), bp_now() - t0);
    }
    return 0;
}
