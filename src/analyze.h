// analyze: how a dataset's embedding lookups are distributed, the facts a row cache lives on.
//
// For the samples of one split, in training order, cut into batches of B:
//   - skew: the share of all lookups taken by the hottest 0.1% / 1% / 10% of rows, counting
//     either all rows of the tables (their cardinalities) or only the rows actually touched;
//     overall (all tables together) and per table;
//   - unique rows per batch (what a batch must have resident), also as a fraction of the B*F
//     lookups (of the samples' lookups when the split is one partial batch);
//   - reuse distance: for each lookup, the batches since the previous lookup of the same row
//     (0 = earlier in the same batch; buckets 1, 2-3, 4-7, ...; or never looked up before).
//
// Memory: 8 bytes of state per table row (a uint32 count and the uint32 last batch), in one
// flat array sized by the total cardinality (270 MB for Criteo Kaggle's 33.8M rows), plus a
// uint32 per batch and thread.  Tables are split among threads; results do not depend on it.
#ifndef BP_ANALYZE_H
#define BP_ANALYZE_H

#include <stdint.h>
#include <stdio.h>

#include "data_bin.h"

#define ANALYZE_NFRAC 3          // top 0.1%, 1%, 10%
#define ANALYZE_REUSE_BUCKETS 40 // bucket i: 2^i <= distance < 2^(i+1) batches

extern const double analyze_fracs[ANALYZE_NFRAC]; // 0.001, 0.01, 0.1

typedef struct {
    int batch;      // B, samples per batch
    bp_split split; // which rows (BP_SPLIT_ALL: all, in file order)
    int threads;    // >= 1
} analyze_opts;

typedef struct {
    uint64_t rows;     // rows of the table(s)
    uint64_t accesses; // lookups
    uint64_t touched;  // distinct rows looked up
    uint64_t top_rows[ANALYZE_NFRAC];          // k = ceil(frac * rows)
    double top_share[ANALYZE_NFRAC];           // share of lookups taken by the k hottest rows
    uint64_t top_rows_touched[ANALYZE_NFRAC];  // k = ceil(frac * touched)
    double top_share_touched[ANALYZE_NFRAC];
} analyze_skew;

typedef struct {
    uint64_t samples, batches, full_batches;
    uint32_t batch, n_tables;
    analyze_skew overall;
    analyze_skew *table; // (F)
    // Unique rows per batch over the full batches (the last, partial batch only when it is the
    // only one).
    double uniq_mean;
    uint64_t uniq_min, uniq_max;
    uint64_t reuse_same;  // lookups of a row already looked up earlier in the same batch
    uint64_t reuse_first; // lookups of a row never looked up before
    uint64_t reuse[ANALYZE_REUSE_BUCKETS];
    uint64_t state_bytes; // per-row state allocated
    double seconds;       // all of it: allocation, the pass over the lookups, the skew
    double pass_seconds, skew_seconds;
} analyze_result;

// Runs the analysis of ds.  Returns 0, BP_ENOMEM (state does not fit), or BP_EINVAL (also for a
// split without rows).
int analyze_run(const bp_dataset *ds, const analyze_opts *o, analyze_result *r);
void analyze_result_free(analyze_result *r); // safe on a zeroed result
// Lookups of the batches the unique-row figures are over: B*F, or the samples' when the split
// is one partial batch (B larger than the split).
uint64_t analyze_batch_lookups(const analyze_result *r);
void analyze_print_text(FILE *f, const analyze_result *r, const char *path, bp_split split);
void analyze_print_json(FILE *f, const analyze_result *r, const char *path, bp_split split);

#endif
