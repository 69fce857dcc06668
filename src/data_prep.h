// data_prep: raw click logs (Criteo TSV, Avazu CSV; plain or gzip) -> the binary dataset of
// data_bin.h.  `bagpipe prep` is a thin CLI over prep_run(); docs/data.md describes the formats,
// the id mappings and the splits.
//
// Rows stream through in chunks of PREP_CHUNK: parse -> (count | map ids) -> bp_ds_writer_append,
// so memory is bounded apart from the frequency vocabularies (data_vocab.h).  The frequency
// mapping reads the inputs twice (count, then map); hashing reads them once.  A thread reads the
// lines ahead while every thread (o->threads) parses them, and the tables are counted or mapped in
// parallel, a table per thread at a time; bad lines, sub-sampling and --max-rows are taken in the
// input's order, so the output and every message are the same on any number of threads.
#ifndef BP_DATA_PREP_H
#define BP_DATA_PREP_H

#include <stdint.h>

#include "data_bin.h"
#include "data_lines.h"

#define PREP_CHUNK 65536 // rows per batch handed to the writer

typedef enum { PREP_CRITEO = 0, PREP_AVAZU = 1 } prep_format;
typedef enum { PREP_SPLIT_NONE = 0, PREP_SPLIT_KAGGLE, PREP_SPLIT_DAYS, PREP_SPLIT_RATIO } prep_split_kind;

typedef struct {
    prep_format format;
    const char *const *inputs; // (n_inputs) read in this order
    int n_inputs;
    const char *out;
    uint32_t min_count;        // frequency mapping (used when max_ind_range == 0); >= 1
    uint64_t max_ind_range;    // > 0: id = value mod max_ind_range (at most 2^32)
    int compact;               // with max_ind_range: each table's residues present renumbered
                               // 0..k-1 in their order, k rows (bp_ds_info.vocab_fp their digest)
    prep_split_kind split;
    double ratio[3];           // PREP_SPLIT_RATIO: train, val, test fractions (sum 1)
    int skip_bad;              // skip bad lines (counted) instead of failing
    uint64_t max_rows;         // stop after this many rows; 0 = all
    double sub_sample_rate;    // each no-click row of a train input dropped with this probability
                               // (the DLRM reference's --data-sub-sample-rate); 0 = none
    uint64_t seed;             // of those drops (prep_keeps)
    int threads;               // threads that parse, count and map (0: one per core, at most
                               // NN_POOL_MAX); the output does not depend on it
    int progress;              // draw a progress line (bp_progress) when stderr is a terminal
    const char *source;        // free text for the header; NULL = made from the options
} prep_opts;

typedef struct {
    uint64_t rows;
    uint64_t split[3];         // train, val, test rows
    uint64_t bytes_file;       // bytes read from the input files, one pass (compressed for gzip)
    uint64_t bytes_text;       // text bytes parsed, one pass (after decompression)
    uint64_t lines;            // input lines, one pass (headers and bad lines included)
    uint64_t bad[LINES_BAD_N]; // skipped bad lines per kind (--skip-bad)
    uint64_t bad_total;
    uint64_t sub_dropped;      // no-click train rows dropped (sub_sample_rate), one pass
    uint64_t sub_negatives;    // no-click train rows read, dropped or not, one pass
    uint32_t n_dense, n_sparse;
    uint64_t card[BP_DS_MAX_SPARSE];
    uint64_t vocab_bytes;      // memory held by the vocabularies at their peak
    uint64_t distinct;         // distinct values over all tables (frequency mapping), or residues
                               // (hashed ids: of value mod max_ind_range, counted with --compact)
    double seconds;            // whole run
    double seconds_count;      // the counting pass (frequency mapping)
    int inputs_read;           // inputs reached (fewer than given when --max-rows stops early)
} prep_stats;

// Whether row `line` (the line number in its file, from 1) of input fi, whose label is `label`,
// is kept: the rows of the val/test input (--split days: the last) and the clicks always; a
// no-click row of a train input with probability 1 - o->sub_sample_rate, drawn from a hash of
// (seed, fi, line) alone, so both passes of the frequency ids, and any chunking, drop the same rows.
int prep_keeps(const prep_opts *o, int fi, uint64_t line, int label);
// Sets o to the defaults (criteo, min_count 1, no hashing, split none, seed 1).
void prep_opts_default(prep_opts *o);
// Parses a --split value: "none", "kaggle", "days" or "ratio:A,B,C".  BP_EUSAGE on error.
int prep_split_parse(prep_opts *o, const char *s);
// Runs the whole conversion.  On failure nothing is left under o->out and the message (naming
// the file and line for bad input) is in bp_errmsg.  st may be NULL.
int prep_run(const prep_opts *o, prep_stats *st);
// Rows per split for `rows` rows: kaggle and ratio as in docs/data.md; days uses rows_per_file
// (n_files entries).  split[0] + split[1] + split[2] = rows.
void prep_split_sizes(const prep_opts *o, uint64_t rows, const uint64_t *rows_per_file, int n_files,
                      uint64_t split[3]);

#endif
