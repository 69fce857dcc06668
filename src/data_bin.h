// data_bin: the binary dataset that every other part reads (DESIGN §3).
//
// File layout (all integers little-endian, every section 4096-aligned so the file can be mapped):
//
//   offset 0     header, BP_DS_HEADER_SIZE bytes (layout in data_bin.c, checksummed)
//   off_label    uint8   label[rows]              0 or 1
//   off_dense    float32 dense[rows][n_dense]     already transformed (see `transform`)
//   off_sparse   uint32  sparse[rows][n_sparse]   per-table ids, sparse[r][f] < card[f]
//   off_prob     float32 prob[rows]               optional (BP_DS_HAS_PROB): the true click
//                                                 probability of a synthetic sample
//
// Rows are stored in training order.  The split is three consecutive row ranges:
// train [0, n_train), val [n_train, n_train + n_val), test [n_train + n_val, rows).
// A file is written under a temporary name and renamed into place only when complete, so a
// file under its final name is always whole; opening checks magic, version, header checksum,
// section sizes against the file size, and (with BP_DS_VERIFY) every section's CRC-32.
#ifndef BP_DATA_BIN_H
#define BP_DATA_BIN_H

#include <stddef.h>
#include <stdint.h>

#define BP_DS_MAGIC "BPDATA\r\n" // 8 bytes; the CR LF catches text-mode mangling
#define BP_DS_VERSION 1
#define BP_DS_HEADER_SIZE 4096
#define BP_DS_MAX_DENSE 64
#define BP_DS_MAX_SPARSE 64
#define BP_DS_ALIGN 4096

enum { BP_DS_HAS_PROB = 1u << 0 };

typedef enum { BP_TRANSFORM_NONE = 0, BP_TRANSFORM_LOG1P = 1 } bp_transform; // log(1 + max(x, 0))
typedef enum { BP_KIND_CUSTOM = 0, BP_KIND_CRITEO = 1, BP_KIND_AVAZU = 2, BP_KIND_SYNTH = 3 } bp_ds_kind;
typedef enum { BP_IDMAP_RAW = 0, BP_IDMAP_FREQ = 1, BP_IDMAP_HASH = 2 } bp_idmap;
typedef enum { BP_SPLIT_TRAIN = 0, BP_SPLIT_VAL = 1, BP_SPLIT_TEST = 2, BP_SPLIT_ALL = 3 } bp_split;

typedef struct {
    uint32_t version;
    uint64_t rows;
    uint32_t n_dense;              // Nd
    uint32_t n_sparse;             // F
    uint32_t transform;            // bp_transform applied to dense values
    uint32_t flags;                // BP_DS_HAS_PROB
    uint32_t kind;                 // bp_ds_kind
    uint32_t idmap;                // bp_idmap used to make sparse ids
    uint32_t min_count;            // BP_IDMAP_FREQ: values seen fewer times share one id
    uint64_t max_ind_range;        // BP_IDMAP_HASH: ids are value % max_ind_range
    uint64_t vocab_fp;             // BP_IDMAP_FREQ: digest of the vocabularies that numbered the ids
                                   // (prep; 0: not recorded, as in files written before it was);
                                   // BP_IDMAP_HASH: of the residues that prep --compact numbered
                                   // (0: ids are value % max_ind_range)
    uint64_t split[3];             // rows in train, val, test; sum = rows
    uint64_t card[BP_DS_MAX_SPARSE]; // rows of each table
    uint64_t seed;                 // synth seed (0 otherwise)
    char source[256];              // free text: command, preset, input files
    // Section layout, filled by the writer / checked by the reader.
    uint64_t off_label, off_dense, off_sparse, off_prob, file_size;
    uint32_t crc_label, crc_dense, crc_sparse, crc_prob;
} bp_ds_info;

// Encodes info into a BP_DS_HEADER_SIZE buffer (with its checksum) / decodes and validates it.
// decode checks magic, version, checksum and every field's range; `what` names the file in
// messages.  Returns 0 or BP_ECORRUPT / BP_EVERSION.
void bp_ds_header_encode(const bp_ds_info *info, uint8_t *buf);
int bp_ds_header_decode(bp_ds_info *info, const uint8_t *buf, size_t n, const char *what);
// Computes the section offsets and file size of info from rows, n_dense, n_sparse, flags.
void bp_ds_layout(bp_ds_info *info);

// ---------------------------------------------------------------------------------------------
// Streaming writer.  Rows are appended in batches; nothing appears under `path` until finish
// succeeds.  Memory use is bounded: when the row count is not known up front (prep), sections
// are spilled to unlinked temporary files and copied into place at finish; when it is
// (bp_ds_writer_open_sized, synth), each section is written straight to its final offset in the
// temporary file, so finish only writes the header and commits.
typedef struct bp_ds_writer bp_ds_writer;

// What the writer checks and records of a run of appended rows, computable by the thread that
// produced them (bp_ds_rows_summarize), so the writing thread only copies bytes.
typedef struct {
    uint32_t crc[4];                     // CRC-32 of the rows' label, dense, sparse, prob bytes
    uint32_t max_id1[BP_DS_MAX_SPARSE];  // per table: largest id + 1 (0: none; UINT32_MAX: id 2^32-1)
} bp_ds_rows_sum;

// Whether an output may replace what is at path (a raw log or its gzip given as the output by
// mistake is not): missing, empty or not a regular file is fine; else a dataset output (text = 0)
// replaces only a bagpipe dataset and a text output (text = 1) only text (no gzip data, dataset or
// NUL byte in its first 4 KiB; a raw text log is text too), a gzip text output (text = 2) text or
// gzip data, and a file that cannot be read is refused.  BP_EUSAGE naming path and what it holds.
// The writers below check it when they open.
int bp_ds_replace_check(const char *path, int text);
// `tmpl` gives n_dense, n_sparse, flags, transform, kind, idmap, min_count, max_ind_range, seed
// and source; rows, split, card and the layout are filled in at finish.
int bp_ds_writer_open(bp_ds_writer **w, const char *path, const bp_ds_info *tmpl);
// labels: (n), dense: (n, Nd), sparse: (n, F), prob: (n) or NULL when !BP_DS_HAS_PROB.
int bp_ds_writer_append(bp_ds_writer *w, size_t n, const uint8_t *labels, const float *dense,
                        const uint32_t *sparse, const float *prob);
// The same with the rows' summary computed beforehand; shape: the tmpl given to open (n_dense,
// n_sparse, flags).  Labels must be 0 or 1 (asserted).
void bp_ds_rows_summarize(const bp_ds_info *shape, size_t n, const uint8_t *labels, const float *dense,
                          const uint32_t *sparse, const float *prob, bp_ds_rows_sum *sum);
int bp_ds_writer_append_summed(bp_ds_writer *w, size_t n, const uint8_t *labels, const float *dense,
                               const uint32_t *sparse, const float *prob, const bp_ds_rows_sum *sum);
// A writer for exactly `rows` rows (finish fails naming the counts otherwise).
int bp_ds_writer_open_sized(bp_ds_writer **w, const char *path, const bp_ds_info *tmpl, uint64_t rows);
uint64_t bp_ds_writer_rows(const bp_ds_writer *w);
// Records the vocabularies' digest (bp_ds_info.vocab_fp), once they are known (before finish).
void bp_ds_writer_set_vocab_fp(bp_ds_writer *w, uint64_t fp);
// Renumbers the sparse ids as finish copies them into place (the writer of bp_ds_writer_open
// only): map(ctx, ids, n, first) rewrites ids[0, n), the values first .. first + n - 1 of the
// sparse section (row (first + i) / F, table (first + i) % F), each below the card given to
// finish, which then checks the renumbered ids (the appended ones may exceed it).
typedef void (*bp_ds_sparse_map)(void *ctx, uint32_t *ids, size_t n, uint64_t first);
void bp_ds_writer_map_sparse(bp_ds_writer *w, bp_ds_sparse_map map, void *ctx);
// card: (F) table sizes; every id written must be < card (checked).  split: rows per split, or
// NULL for "all train".  Commits the file atomically and frees w (also on failure).
int bp_ds_writer_finish(bp_ds_writer *w, const uint64_t *card, const uint64_t split[3]);
void bp_ds_writer_abort(bp_ds_writer *w); // discards everything; NULL is fine

// ---------------------------------------------------------------------------------------------
// Reader: maps the file read-only.
typedef struct {
    bp_ds_info info;
    const uint8_t *label;   // (rows)
    const float *dense;     // (rows, Nd)
    const uint32_t *sparse; // (rows, F)
    const float *prob;      // (rows) or NULL
    void *map;
    size_t map_size;
    char *path;
} bp_dataset;

enum { BP_DS_VERIFY = 1u << 0 }; // check every section's CRC-32 on open

int bp_ds_open(bp_dataset *ds, const char *path, unsigned flags);
void bp_ds_close(bp_dataset *ds); // safe on a zeroed or closed dataset
// Row range [*begin, *end) of a split.
void bp_ds_split_range(const bp_dataset *ds, bp_split s, uint64_t *begin, uint64_t *end);
// Split sizes when the last `last` of `rows` rows are halved: train = rows - last, val the first
// ceil(last / 2) of them, test the rest.
void bp_ds_split_last(uint64_t rows, uint64_t last, uint64_t split[3]);
// The Criteo Kaggle split of the DLRM reference, for prep and synth alike: 7 days, each rows / 7
// rows plus one for the first rows % 7 days; days 0-5 train, day 6 halved by bp_ds_split_last.
void bp_ds_split_kaggle(uint64_t rows, uint64_t split[3]);
// Split sizes of --split ratio:A,B,C, for prep and synth alike: train floor(rows A), val
// floor(rows B) (at most what is left), test the rest; a product within 1e-6 below an integer
// counts as that integer (0.29 x 100 is 28.999... in floating point).  A part whose fraction is
// 0 stays empty: with C = 0 the rest goes to val (to train if B = 0 too).
void bp_ds_split_ratio(uint64_t rows, const double ratio[3], uint64_t split[3]);
uint64_t bp_ds_total_card(const bp_ds_info *info); // sum of card[0..F)
const char *bp_ds_kind_name(uint32_t kind);
const char *bp_ds_idmap_name(uint32_t idmap); // "raw", "frequency", "hash"
const char *bp_split_name(bp_split s);

#endif
