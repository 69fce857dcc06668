// emb: embedding tables, the row layout every holder of a row shares (local table, trainer cache,
// server shard, message, checkpoint), deterministic row initialisation, gather, and sparse
// (coalesced) gradients.
//
// Keys.  F tables with card[f] rows each.  Row `id` of table f has the global key
//     key = offset[f] + id,   offset[0] = 0,  offset[f+1] = offset[f] + card[f],
// so keys run over [0, rows) with rows = offset[F].  Keys are uint64 everywhere: hashed Terabyte
// configurations exceed 2^32 rows.  Per-table ids (what the dataset stores) are uint32.
//
// Row layout.  A row is `stride` floats:
//
//     [ model: E floats | optimizer state: S floats | padding: stride - E - S floats (zero) ]
//
//   - E = D, or D + 1 where element D is the row's first-order ("wide") weight used by
//     Wide&Deep and DeepFM.  The model decides; this module only moves E floats.
//   - S depends on the row optimizer (optim.h, emb_opt_state_floats): 0 for SGD, E for Adagrad
//     (one accumulator per model float, acc[j] at row[E + j]), 1 for row-wise Adagrad (one
//     accumulator per row, at row[E]).  The state is part of the row: it moves, is cached,
//     written back and checkpointed with it.
//   - stride = E + S rounded up to a multiple of row_align floats (EMB_ROW_ALIGN by default).
//     EMB_ROW_ALIGN is 4 (16 bytes): every row starts 16-byte aligned, the padding is at most 3
//     floats.  Rounding to 16 floats (a 64-byte line) would put the model part of an E = 16 row
//     in one line, but costs up to 60% more memory (E = 16, S = 1: 32 instead of 20 floats) and
//     is not faster: `bench_gather 2 0.4 padding` (row-wise Adagrad rows, the same random rows in
//     both tables, measured side by side) gathered at 0.95-1.0x (E = 16), 1.1-1.4x (E = 17) the
//     rate of stride 32 with stride 20, applied the optimizer 1.3-1.4x faster, and at E = 64, 65
//     (68 vs 80 floats) stayed within the noise of a shared machine.
//
// Initialisation (the DLRM reference's): model float j of a row of table f is uniform in
// [-sqrt(1/card[f]), +sqrt(1/card[f])]; with E = D + 1 the wide weight (element D) is 0 unless
// wide_uniform is set, in which case it is drawn like the others.  Optimizer-state floats are
// state_init (Adagrad's initial accumulator, default 0), padding is 0.  Each row's values are a
// pure function of (seed, key): a counter-based generator (splitmix64 of a per-row seed), so
// any process initialises any row, or any set of rows, identically, whatever the thread count.
#ifndef BP_EMB_H
#define BP_EMB_H

#include <stddef.h>
#include <stdint.h>

#define EMB_MAX_TABLES 64 // = BP_DS_MAX_SPARSE
#define EMB_MAX_DIM 1024  // bound on E (sanity check for user input)
#define EMB_ROW_ALIGN 4   // default: stride is a multiple of this many floats

// What emb_layout_init needs; fields left zero take their defaults.
typedef struct {
    int F;                // tables, 1..EMB_MAX_TABLES
    const uint64_t *card; // (F) rows of each table, >= 1
    int D;                // embedding dimension, >= 1
    int E;                // model floats per row: D (default when 0) or D + 1
    int S;                // optimizer-state floats per row (emb_opt_state_floats)
    float state_init;     // initial value of every state float (Adagrad initial_accumulator_value)
    uint64_t seed;        // initialisation seed
    int wide_uniform;     // E = D + 1: draw element D like the others (1) or set it to 0 (0)
    int row_align;        // stride is a multiple of this (floats, a power of two); 0: EMB_ROW_ALIGN
} emb_layout_cfg;

// The shape of every row and the key space: small, self-contained (no pointers), copyable.
typedef struct {
    int F, D, E, S;
    int stride;                           // floats per row, >= E + S
    uint64_t rows;                        // total rows = offset[F]
    uint64_t card[EMB_MAX_TABLES];        // (F)
    uint64_t offset[EMB_MAX_TABLES + 1];  // (F + 1) prefix sums of card
    float bound[EMB_MAX_TABLES];          // (F) init bound sqrt(1 / card[f])
    float state_init;
    uint64_t seed;
    int wide_uniform;
} emb_layout;

// Validates cfg (a user error gets BP_EINVAL with a message naming the field) and fills L.
int emb_layout_init(emb_layout *L, const emb_layout_cfg *cfg);

static inline uint64_t emb_key(const emb_layout *L, int f, uint32_t id) { return L->offset[f] + id; }
// The table that holds key (binary search over offset); key < rows.
int emb_layout_table_of(const emb_layout *L, uint64_t key);
// Bytes of one table allocation holding every row (rows * stride floats).
uint64_t emb_layout_bytes(const emb_layout *L);
// One line for a memory plan, e.g. "26 tables, 33762577 rows x 20 floats (16 model + 1 state
// + 3 padding) = 2.5 GiB"; returns buf.
const char *emb_layout_describe(const emb_layout *L, char *buf, size_t cap);

// Writes the initial value of row `key` (stride floats) / of the n consecutive rows
// [key0, key0 + n) into rows (n, stride).  Pure functions of (L->seed, key).
void emb_row_init(const emb_layout *L, uint64_t key, float *row);
void emb_rows_init(const emb_layout *L, uint64_t key0, uint64_t n, float *rows);

// ---------------------------------------------------------------------------------------------
// A whole table in local memory: one allocation of rows * stride floats, transparent huge pages
// when large.
typedef struct {
    emb_layout L;
    float *data;  // (L.rows, L.stride)
    size_t bytes; // size of the mapping
} emb_table;

// Maps the table without initialising the values (e.g. before loading a checkpoint).  Refuses
// with BP_ENOMEM (message with the figures) when the table is larger than the memory the
// system reports available, or when the mapping fails.  huge = 0 asks for no huge pages
// (benchmarks); otherwise bp_alloc_huge's policy applies.
int emb_table_alloc(emb_table *t, const emb_layout *L, int huge);
// Initialises every row (emb_rows_init) with nthreads threads (<= 0: one per online CPU).
void emb_table_fill(emb_table *t, int nthreads);
// alloc + fill.
int emb_table_init(emb_table *t, const emb_layout *L, int nthreads);
void emb_table_free(emb_table *t); // safe on a zeroed or freed table

static inline float *emb_table_row(const emb_table *t, uint64_t key) {
    return t->data + (size_t)key * (size_t)t->L.stride;
}

// ---------------------------------------------------------------------------------------------
// Gather.  out[b][f][0..E) = model floats of row (f, ids[b][f]).  Specialised copies for
// E in {16, 17, 32, 33, 64, 65, 128, 129}, a generic loop otherwise; software prefetch a few
// rows ahead.  An id >= card[f] is a bug (the dataset is validated on open) and aborts.
// A big gather (1024 rows or more a part) is split by samples over nn_threads() threads of the
// pool (nn.h); the output does not depend on the split.  Slices of samples may also be
// gathered separately: emb_gather(t, ids + b0 * F, b1 - b0, out + (size_t)b0 * F * E).
void emb_gather(const emb_table *t, const uint32_t *ids /*(B, F)*/, int B, float *out /*(B, F, E)*/);
// Same copy from rows wherever they live (a cache's slots, received buffers): out[i] = rows[i][0..E).
void emb_gather_rows(const float *const *rows /*(n)*/, int n, int E, float *out /*(n, E)*/);

// ---------------------------------------------------------------------------------------------
// Sparse gradient: unique keys in ascending order and the sum of their gradient rows.
//
// emb_grad_coalesce sums the rows of duplicates in sample order (b ascending, then f), so the
// result is bit-reproducible and independent of anything but its inputs.  It never touches a
// table-sized buffer: all workspace is sized by `cap` (the most (b, f) entries of one call,
// B * F) and allocated once by emb_grad_init.
typedef struct {
    int E;          // floats per gradient row
    int cap;        // most entries (B * F) one coalesce may take, and most unique keys
    int n;          // unique keys held now
    uint64_t *keys; // (cap) ascending
    float *rows;    // (cap, E) rows[i] = summed gradient of keys[i]
    // workspace
    uint64_t *pairs, *tmp; // (cap) packed (key << pos_bits | pos) for the radix sort
    uint32_t *hist;        // (EMB_GRAD_MAX_PASSES << EMB_GRAD_RADIX_BITS) digit histograms
    // after emb_grad_sort: the (b, f) entries in key order, ties in sample order
    const uint64_t *sorted; // (n_entries) pairs or tmp
    size_t n_entries;       // B * F
    int pos_bits;           // an entry is sorted[i] >> pos_bits (key), sorted[i] & pos_mask (b F + f)
} emb_grad;

#define EMB_GRAD_RADIX_BITS 11
#define EMB_GRAD_MAX_PASSES 6

// Bytes emb_grad_init allocates for (cap, E): for the memory plan.
uint64_t emb_grad_bytes(int cap, int E);
int emb_grad_init(emb_grad *g, int cap, int E); // BP_EINVAL on a bad size
void emb_grad_free(emb_grad *g);                // safe on a zeroed or freed one
// g = coalesce(ids, d_emb).  B * F <= g->cap, E == g->E; an id >= card[f] aborts.
void emb_grad_coalesce(emb_grad *g, const emb_layout *L, const uint32_t *ids /*(B, F)*/,
                       const float *d_emb /*(B, F, E)*/, int B);
// The same in two steps, for a caller that wants the batch's unique keys before its gradients
// exist (to look each up once): emb_grad_sort sets g->keys, g->n and g->sorted from the ids alone
// (g->rows untouched), emb_grad_sum then fills g->rows from d_emb.  Together they give the bits
// of emb_grad_coalesce.
void emb_grad_sort(emb_grad *g, const emb_layout *L, const uint32_t *ids /*(B, F)*/, int B);
void emb_grad_sum(emb_grad *g, const float *d_emb /*(B, F, E)*/);
// dst.rows[k] += src.rows[k] for every key of src, which must all be in dst (dst's key set may
// be larger: a synchronisation list whose partial gradients are summed in trainer-rank order,
//     emb_grad_sum_into(total, part[1]); emb_grad_sum_into(total, part[2]); ...
// starting from total = part[0] or a zeroed row set).  Returns BP_EMISMATCH, leaving dst
// unchanged, when src holds a key dst lacks or E differs.
int emb_grad_sum_into(emb_grad *dst, const emb_grad *src);
// Sets g to the given keys (ascending, unique; n <= cap) with zero rows: the starting point of
// a sum over a key list decided elsewhere (a synchronisation list from the plan).
int emb_grad_set_keys(emb_grad *g, const uint64_t *keys, int n);

#endif
