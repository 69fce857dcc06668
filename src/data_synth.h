// data_synth: synthetic click logs with the real shape (DESIGN §3): the tables and cardinalities
// of Criteo Kaggle or Avazu (or custom ones), per-table power-law access skew scattered over the
// id space by a seeded permutation, heavy-tailed dense counts, and labels drawn from a planted
// ground-truth model whose per-sample click probability is stored with the data, so the best
// achievable AUC is known.  docs/synth.md describes the model and where its numbers come from.
//
// Output is a pure function of the options: rows are generated in chunks of SYNTH_CHUNK_ROWS,
// chunk c from its own random stream (seed, c), so any number of threads writes the same bytes.
//
//   synth_opts o;
//   synth_opts_default(&o, SYNTH_PRESET_CRITEO_KAGGLE);
//   o.rows = 1000000, o.out = "kaggle.bin";
//   synth_report rep;
//   int rc = synth_run(&o, &rep);   // 0 or a negative BP_E* code (message in bp_errmsg)
#ifndef BP_DATA_SYNTH_H
#define BP_DATA_SYNTH_H

#include <stdint.h>

#include "common.h"
#include "data_bin.h"

#define SYNTH_CHUNK_ROWS 4096 // rows per random stream; changing it changes every output
#define SYNTH_MAX_PAIRS 8     // planted pairwise interactions
#define SYNTH_LAT 4           // latent dimension of an interaction
#define SYNTH_SCALE_BUCKETS 264 // rank buckets of the row-effect scale (8 per octave of rank+1)
#define SYNTH_DENSE_MISSING UINT32_MAX // raw dense value of an empty field

typedef enum { SYNTH_PRESET_CUSTOM = 0, SYNTH_PRESET_CRITEO_KAGGLE = 1, SYNTH_PRESET_AVAZU = 2 } synth_preset;
// bin: the binary dataset; tsv: Criteo's text format (label, I1.., C1..); csv: Avazu's CSV.
typedef enum { SYNTH_FMT_BIN = 0, SYNTH_FMT_TSV = 1, SYNTH_FMT_CSV = 2 } synth_format;
typedef enum { SYNTH_SPLIT_RATIO = 0, SYNTH_SPLIT_KAGGLE = 1, SYNTH_SPLIT_NONE = 2 } synth_split_kind;

typedef struct {
    synth_preset preset;
    uint32_t n_dense;                // Nd (custom only; presets set their own)
    uint32_t n_tables;               // F (custom only)
    uint64_t card[BP_DS_MAX_SPARSE]; // (F) rows per table (custom only)
    uint64_t rows;                   // samples to generate (>= 1)
    uint64_t seed;
    double skew;       // Zipf exponent s >= 0 of every sampled table; < 0: calibrate to hot_share
    double hot_share;  // calibration target: share of all accesses taken by the top 1% of all rows
    double drift;      // popularity drift: fraction of each table's top 1% replaced per day (0: none)
    double ctr;        // base click rate the bias is solved for (0.256; avazu 0.17)
    int n_pairs;       // planted pairwise interactions (capped at SYNTH_MAX_PAIRS and F/2)
    synth_split_kind split;
    double ratio[3];   // SYNTH_SPLIT_RATIO: train, val, test fractions (sum 1)
    synth_format format;
    int threads;       // generator threads (>= 1); the output does not depend on it
    int progress;      // draw a progress line (bp_progress; silent when stderr is not a terminal)
    int scalar;        // without AVX-512 or carry-less CRC (the previous path, for comparisons; same bytes)
    const char *out;   // output path
} synth_opts;

// Defaults of a preset: criteo-kaggle (13 dense, 26 Kaggle tables, split kaggle), avazu (0 dense,
// 23 tables, split 0.8/0.1/0.1), custom (n_tables = 0: the caller sets the tables).
void synth_opts_default(synth_opts *o, synth_preset p);
// The tables of a preset: (F) cardinalities, F in *F (0 tables for custom).
const uint64_t *synth_preset_card(synth_preset p, uint32_t *F);
// Checks o and fills in a preset's tables; returns 0 or BP_EUSAGE naming the flag.
int synth_opts_check(synth_opts *o);
// Rows of each split for o (split[0] + split[1] + split[2] = o->rows).
void synth_split_sizes(const synth_opts *o, uint64_t split[3]);

// ---------------------------------------------------------------------------------------------
// Seeded bijection of [0, n) that scatters popularity ranks over the id space, branch-free:
// first a keyed mix inside aligned blocks of 2^j ranks (j = min(16, log2 n); ranks in the last
// partial block stay), which breaks the order of the hot head, then an affine map
// (a x + b) mod n with gcd(a, n) = 1, which spreads the blocks over the whole table.
typedef struct {
    uint64_t n;
    uint64_t a, b, minv;    // affine step; minv = floor((2^64 - 1) / n) for the reduction
    uint64_t mask, full;    // block step: ranks below `full` are mixed within blocks of mask + 1
    uint64_t k, m1, m2;     // block mixer: xor key and odd multipliers (all < mask + 1)
    uint32_t h;             // block mixer shift
} synth_perm;
void synth_perm_init(synth_perm *p, uint64_t n, uint64_t key);
static inline uint64_t synth_perm_apply(const synth_perm *p, uint64_t rank) {
    uint64_t y = ((rank ^ p->k) * p->m1) & p->mask;
    y ^= y >> p->h;
    y = (y * p->m2) & p->mask;
    y ^= y >> p->h;
    uint64_t x = rank < p->full ? (rank & ~p->mask) | y : rank;
    x = x * p->a + p->b; // < 2^64: a, x, b < n <= 2^32
    x -= (uint64_t)(((unsigned __int128)x * p->minv) >> 64) * p->n; // now x < 3n
    x = x >= p->n ? x - p->n : x;
    return x >= p->n ? x - p->n : x;
}

// The 32-bit categorical value written to text for id of table f (a bijection of 32-bit ids
// for each table), and its inverse.  Criteo prints it as 8 lowercase hex digits.
uint32_t synth_cat_hash32(uint32_t f, uint32_t id);
uint32_t synth_cat_unhash32(uint32_t f, uint32_t h);

// Avazu CSV (tables 2.. of the avazu preset are its 21 categorical columns; tables 0 and 1, hour
// of day and day of week, come from the `hour` column).  Column name of table f >= 2; the text
// of id in that column (hex like "1fbe01fe" or an integer like "1005"), written to buf (>= 16
// bytes) with its length returned; and the inverse (0, or BP_EFORMAT for text it never writes).
const char *synth_avazu_column(uint32_t f);
int synth_avazu_format(uint32_t f, uint32_t id, char *buf);
int synth_avazu_parse(uint32_t f, const char *s, size_t len, uint32_t *id);

// ---------------------------------------------------------------------------------------------
// The generator.  Built once from checked options; read-only afterwards (threads share it).
typedef struct synth_model synth_model;

// One chunk of generated rows.  Buffers are (n, ...) with n <= SYNTH_CHUNK_ROWS; synth_rows_alloc
// sizes them for a whole chunk, and a caller may instead point them into larger arrays.
typedef struct {
    uint32_t n;
    uint8_t *label;     // (n)
    uint32_t *dense_raw; // (n, Nd) counts; SYNTH_DENSE_MISSING for an empty field
    float *dense;       // (n, Nd) log(1 + count); 0 for an empty field
    uint32_t *sparse;   // (n, F) ids, sparse[i*F+f] < card[f]
    float *prob;        // (n) true click probability
    float *pair_fac;    // (2 * SYNTH_MAX_PAIRS, SYNTH_CHUNK_ROWS) scratch of the generator
} synth_rows;

int synth_model_init(synth_model **m, const synth_opts *o); // o must have passed synth_opts_check
void synth_model_free(synth_model *m);                      // NULL is fine
uint32_t synth_model_n_dense(const synth_model *m);
uint32_t synth_model_n_tables(const synth_model *m);
const uint64_t *synth_model_card(const synth_model *m); // (F)
double synth_model_skew(const synth_model *m);          // the exponent in use (calibrated or given)
double synth_model_bias(const synth_model *m);          // the solved logit bias
// Expected share of all accesses that the top `frac` of all rows take (the calibration target).
double synth_model_expected_top_share(const synth_model *m, double frac);
// The permutation of table f (ids = perm(rank)).
const synth_perm *synth_model_perm(const synth_model *m, uint32_t f);
// Interaction pairs: n and (n, 2) table indices.
int synth_model_pairs(const synth_model *m, uint32_t pairs[][2]);

// Generation runs eight rows at a time with AVX-512 where the CPU has it (F, DQ, VL, BW), else
// one at a time; both write the same bytes.  A model starts with the fast path when supported;
// set_simd(m, 0) forces the scalar one (tests and benchmarks compare them), set_simd(m, 1) asks
// for the fast one (ignored where unsupported).  Set it before generating, not meanwhile.
int synth_simd_supported(void);
void synth_model_set_simd(synth_model *m, int on);
int synth_model_simd(const synth_model *m);

void synth_rows_alloc(synth_rows *r, uint32_t n_dense, uint32_t n_tables);
void synth_rows_free(synth_rows *r);
// Generates rows [chunk * SYNTH_CHUNK_ROWS, +n) of the dataset into r (n = the rows left in
// that chunk, at most SYNTH_CHUNK_ROWS).
void synth_model_gen_chunk(const synth_model *m, uint64_t chunk, synth_rows *r);

// ---------------------------------------------------------------------------------------------
// The whole job: generate o->rows rows and write them to o->out in o->format, atomically.
typedef struct {
    uint64_t rows;
    uint64_t split[3];
    double seconds;      // wall time, all of it (including the writer's commit)
    double gen_seconds;  // wall time until the last row was handed to the writer
    double skew;         // exponent used
    double bias;         // solved logit bias
    double mean_label;   // fraction of positive labels
    double mean_prob;    // mean true click probability
    uint64_t bytes;      // size of the file written
    double hot_share;    // expected share of lookups the hottest 1% of rows take at `skew`
} synth_report;

int synth_run(const synth_opts *o, synth_report *rep);

// zlib's CRC-32 (bp_crc32), by carry-less multiplication where the CPU has it (~10x faster).
uint32_t synth_crc32(uint32_t crc, const void *buf, size_t n);
// bp_ds_rows_summarize with synth_crc32 and vectorised per-table maxima; the same result.
void synth_rows_summarize(const bp_ds_info *shape, size_t n, const uint8_t *labels, const float *dense,
                          const uint32_t *sparse, const float *prob, bp_ds_rows_sum *sum);

#endif
