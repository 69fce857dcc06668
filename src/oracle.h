// oracle: the lookahead planner (DESIGN §5, §6).  Pure computation: no MPI, no I/O except the
// dataset driver at the bottom.  Fed global batches in training order, it emits one plan record
// (plan.h) per batch.
//
// Model.  Batch t has B samples, trainer i trains samples [i*B/T, (i+1)*B/T).  Sample s, feature
// f with id x touches key offset[f] + x (offset = prefix sum of the table cardinalities).
// Fetches for batch u are issued at the start of iteration u - P (all of 0..P at iteration 0).
// Planning is a sequence of steps; step s happens at the boundary before iteration s and decides
//   (1) the evictions after iteration s-1 and (2) the fetches issued at iteration s (for s + P),
// knowing batches up to the horizon H(s) = s + P + W (W batches beyond the batch being fetched
// for) and nothing later.  Record t is complete after step t+1, so the oracle holds at most
// W + P + 3 batches (ORACLE_INDEX_AHEAD more with two threads: oracle_held_batches).
//
// Residency model (per trainer capacity C rows, counted from fetch issue to eviction):
//   shared key  - logically replicated: fetched once (one named trainer reads it from the servers
//                 and forwards it), held by every trainer, counts against every trainer's C;
//   private key - fetched for batch u, used by exactly one trainer at u, no further use visible
//                 in the window when fetched: only that trainer holds it (counts against its C
//                 only), updates it locally and writes it back after u.  Decided at fetch time
//                 and binding (a use that comes into view later is served by a new fetch).
//                 Needs W >= P: the window must show that batches u+1..u+P, whose fetches are
//                 decided while the key is in flight, do not use it; with W < P nothing is private
//                 except near the end of the input, where the window is cut at the last batch and
//                 shows all there is (so the last batches need no more cache than the others).
// Why this model: a shared row's gradient is applied identically on every replica, so every
// trainer's copy is valid and any trainer can serve, sync or write it back; charging it to every
// trainer's capacity keeps the accounting exact without tracking which replicas are "real".  A
// private row never leaves its trainer, so it costs one slot on one trainer and no sync at all,
// which is where most of the cold (fetched, used once, evicted) traffic goes.
// Step s: (a) every key used at s-1 that is private, or shared with no use in [s, H(s)], is
// evicted after s-1; (b) keys of batch s+P that are not resident are fetched; (c) if some
// trainer is over C, shared keys not needed by batches s..s+P are evicted, farthest next use
// first (Belady within the window; among keys of one next use v, with T > 1, first those used at v
// by one trainer and not again within H(s), which come back private; then in a fixed order);
// if that is not enough (T > 1, W >= P) shared keys next used at s+P by one trainer and not again
// within H(s) are demoted: evicted after s-1 and fetched at s, private to that trainer (one fetch
// more, a slot back on every other trainer), the fewest that bring every trainer within C; and
// (W >= P >= 1) when even a view of a step s1 in s+1..s+P at best for it (from what H(s) shows)
// leaves a trainer over C, step s demotes such keys of s+P ahead, as many as the steps s+1..s1
// cannot demote themselves.  If Belady and step s's own demotions are not enough, the oracle
// fails with BP_ECAPACITY naming the cache size this batch needs (shared + largest private pinned
// set, less what demotions could free; for T = 1 exactly
// the distinct keys of batches s..s+P).  A later batch may need more, and for T > 1 which keys
// are private depends on earlier decisions, so a rerun with the named size can stop later with a
// new, larger figure.
// Sync of the gradient of a shared key used at t: next use t+1 -> sync-now; next use v >= t+2
// -> sync-later, deadline v-1; evicted after t -> sync-later, deadline t+1 (PLAN_WB_NEXT: the
// owner applies that reduction before the write-back).  If a key is evicted under pressure while
// an earlier reduction is still pending, that reduction is restated with deadline = eviction + 1.
// Every eviction of t is gated for later fetches at t (the writer's write-backs through t), so
// the owner must write it back at the end of t, its reductions applied at t (plan.h).
// Fetchers of shared keys and write-back owners of shared evictions are assigned round-robin
// over the trainers (balanced to within one over the run).
//
// Memory.  Per-key state: one 8-byte word per key (its last eviction and write-back owner, or
// the index of its active record and its latest occurrence).  The key space fits a flat array
// when K <= 2^28 (2 GiB; Criteo Kaggle: 33.8M keys -> 270 MB, mapped lazily so untouched keys
// cost nothing); beyond that (hashed id spaces) an open-addressing hash map of touched keys,
// 16 bytes per entry at load <= 1/2, which doubles without a pause (the next table is faulted in
// ahead and the old one moved into it a few entries per insert: up to three tables' worth, 48
// bytes per entry of the current one, while that happens).  Active records (keys occurring in a
// held batch, which includes every resident key): 12 bytes (gate, free-list entry).
// Occurrences (one per unique key per held batch): 14 bytes when K <= 2^32, T <= 8 and at most
// 256 batches are held (4-byte key and back link, 1-byte users mask and next link), up to 28
// otherwise.  Belady bucket entries (resident keys not needed soon), 8 bytes each, exist only for
// the levels that capacity pressure has reached (a level's bucket is built from the back links of
// its batch when pressure reaches it, with the occurrences that can enter it later grouped by
// distance, 8 bytes each, for the next steps).  Indexer scratch: 4 bytes per unique key of one
// batch (pass 2's list) plus one transposed trainer slice (4 bytes per id).  The planner's two records (their
// lists about 72 bytes per unique key of a batch, grown by doubling) and its scratch; with two
// threads and copied input, the queue's copies of the batches (4 bytes per id).
// Only the per-key words grow with the run (with the distinct keys touched); the rest is bounded
// by the window: at B=16384, W=200 on a Criteo-like trace about 625-635 MiB with the flat keymap
// (0.27 GB of it the keymap), 1.1 GiB with the hash keymap (see bench_oracle, docs/oracle.md).
#ifndef BP_ORACLE_H
#define BP_ORACLE_H

#include <stdint.h>

#include "data_bin.h"
#include "plan.h"

#define ORACLE_MAX_TRAINERS 64 // users of a key at a batch are a 64-bit mask
#define ORACLE_MAX_WINDOW 65536

enum { ORACLE_KEYMAP_AUTO = 0, ORACLE_KEYMAP_FLAT = 1, ORACLE_KEYMAP_HASH = 2 };

// With two threads, who links each batch's occurrences to the previous occurrences of their keys
// (a third of the indexer's work, random writes): AUTO moves it, batch by batch, to the thread
// that waits (the indexer when it waits for input or ring space, the planner when it waits for
// the indexer); the others fix it, for tests and benchmarks.  Plans are the same whichever thread
// links.
enum { ORACLE_LINKS_AUTO = 0, ORACLE_LINKS_INDEXER = 1, ORACLE_LINKS_PLANNER = 2 };

typedef struct {
    uint32_t T;           // trainers, 1..ORACLE_MAX_TRAINERS
    uint32_t B;           // global batch size (samples); only the last batch may be shorter
    uint32_t F;           // sparse features (tables)
    const uint64_t *card; // (F) rows of each table
    uint32_t W;           // lookahead window (batches beyond the batch being fetched for)
    uint32_t P;           // prefetch distance (iterations)
    uint64_t C;           // cache capacity per trainer (rows)
    uint64_t row_base;    // dataset row of sample 0 of batch 0 (copied into the records)
    uint64_t iter_base;   // the training iteration of batch 0 (a resumed run's first): the messages count
                          // batches and iterations from it, the records from 0
    int threads;          // 1, or 2 (one thread indexes incoming batches while the caller plans)
    int keymap;           // ORACLE_KEYMAP_*
    int borrow_input;     // 1: pushed ids stay valid until oracle_free (no copy)
    int links;            // with two threads, which thread writes next-use links: ORACLE_LINKS_*
    int groups;           // 0 or 1: one planner over every table; 2: split by tables (below)
} oracle_config;
// A planner split by tables (groups = 2, F >= 2; with one table it is the planner in one part).
// Two planners, each over one of two groups of consecutive tables (balanced by bit_length(card)^2),
// share the capacity: each runs steps (a) and (b) on its own tables' keys, then step (c) runs over
// both (Belady, demotions and demotions ahead on the sum of their counts), and the record is the
// first part's with the second's behind it in each list (the private keys trainer by trainer and
// the sync-later groups merged in their order).  With threads = 2 the second part runs on a thread
// of its own, so that neither core reads the slots the other wrote, instead of the split by
// phases (indexer and planner); a bad id in its tables is then named by a later push or step, as
// the two-thread indexer's are.  The plans differ from the planner in one part's only in the order
// of entries and of Belady's ties among keys of one next use: the same contract and checker.
// Fetchers and write-back owners go round-robin in each part: each trainer's count is within two
// of any other's.  Plans do not depend on the thread count.  Not the default: its plans differ
// from the planner in one part's, and the product's plans depend on its planner flags, never on
// its thread count, so `train --oracle-parts 2` (and analyze's) chooses it, with one thread or
// two (on two threads the split measured 1.05x the split by phases with the host steady, at
// parity with it noisy: docs/oracle.md, round 20).

// The phases of the oracle's work, each timed in its thread by the monotonic clock read at its
// boundaries (oracle_stats.phase_s; ~25 reads per batch).  The indexer: retiring the keys of
// batches that left the window, transposing each trainer's slice of a batch, the dedupe (pass 1),
// back links, gates of keys new to the window and, when the indexer links, next links (pass 2).
// The planner: next links it writes itself (two threads), completing record s-1 (step a), the
// fetches for s+P (b), evictions under capacity pressure (c), and the record's private keys
// grouped by trainer and sync-later entries put in order.  The indexer's phases come first: those
// before ORACLE_PH_LINK run in the indexer's thread, the others in the planner's.
enum {
    ORACLE_PH_RETIRE, ORACLE_PH_TRANSPOSE, ORACLE_PH_DEDUPE, ORACLE_PH_BACKLINK,
    ORACLE_PH_LINK, ORACLE_PH_COMPLETE, ORACLE_PH_FETCH, ORACLE_PH_PRESSURE, ORACLE_PH_RECORD,
    ORACLE_PHASES
};
// A phase's short name ("retire", "transpose", "dedupe", "backlink", "link", "complete", "fetch",
// "pressure", "record").
const char *oracle_phase_name(int phase);

typedef struct {
    uint64_t batches, samples;
    uint64_t accesses;        // (trainer, key, batch) triples: sum over t, i of |keys of i's slice|
    uint64_t hits;            // of those, keys resident with no fetch issued for batch t
    uint64_t unique;          // sum over t of |U_t|
    uint64_t fetches, fetches_private;
    uint64_t evictions, evictions_private, evictions_pressure;
    uint64_t demotions;       // shared keys evicted under pressure and fetched back private at once
    uint64_t sync_now, sync_later, sync_restated;
    uint64_t peak_resident;   // max over steps and trainers of occupied slots
    uint64_t active_peak;     // most keys tracked at once (occurring in held batches or resident)
    uint64_t mem_bytes;       // the oracle's own data structures at their high-water mark
    uint64_t linked_indexer;  // with two threads: batches the indexer linked (the rest, the planner)
    uint32_t parts;           // 1, or 2 for a planner split by tables (oracle_parts)
    double cpu_index_s;       // CPU time spent indexing batches (dedupe, linking, retiring)
    double cpu_plan_s;        // CPU time spent planning (in oracle_next_plan)
    double phase_s[ORACLE_PHASES]; // seconds in each phase (ORACLE_PH_*; 0 for oracle_ref)
} oracle_stats;

typedef struct oracle_impl oracle_impl;
typedef struct {
    oracle_impl *impl;
} oracle;

// Validates cfg (messages name the field) and allocates.  Returns 0 or BP_EINVAL/BP_ENOMEM.
int oracle_init(oracle *o, const oracle_config *cfg);
// With two threads, how many batches the indexer may run ahead of the batches the planner's next
// step needs.  With one batch of slack the two halves (~2.7 ms of CPU each per batch, varying from
// batch to batch) waited on each other batch by batch, and a batch took 3.1 ms of wall time; with
// three, the halves overlap and the wall time is that of the slower half (docs/oracle.md).
#define ORACLE_INDEX_AHEAD 3
// The batches the oracle holds for window W, prefetch P and `threads` (1 or 2): W + P + 3, and
// ORACLE_INDEX_AHEAD more with two threads.
uint32_t oracle_held_batches(uint32_t W, uint32_t P, int threads);
// The most ids (B x F) one batch may hold for window W, prefetch P and `threads` (1 or 2): an
// occurrence id packs the batch's slot (oracle_held_batches slots) and the position in it into
// 32 bits, so a longer window takes smaller batches.  oracle_init refuses more.
uint64_t oracle_max_batch_ids(uint32_t W, uint32_t P, int threads);
// Feeds the next global batch: ids (B, F), row-major.  After each push, call oracle_next_plan
// until it returns 0 (the oracle holds a bounded window; pushing more without draining returns
// BP_EINVAL).  An id >= card[f] returns BP_ERANGE naming batch, sample and feature.
int oracle_push_batch(oracle *o, const uint32_t *ids);
// Same for a batch of n samples (1 <= n <= B); a batch shorter than B must be the last one.
int oracle_push_samples(oracle *o, const uint32_t *ids, uint32_t n);
// Declares the end of the input; then oracle_next_plan drains the remaining records.
int oracle_finish(oracle *o);
// Writes the next record into p (swapping buffers with it: p must come from plan_init).
// Returns 1 when a record was produced, 0 when more input is needed or everything was emitted
// (oracle_done), or a negative error (BP_ECAPACITY: cache too small; the oracle is then unusable).
int oracle_next_plan(oracle *o, plan *p);
int oracle_done(const oracle *o);
// 0: oracles initialised from now on transpose a slice of ids and scan next and back links without
// AVX2 (tests compare the two paths); 1 (the default): with AVX2 where the processor has it.
void oracle_set_simd(int on);
void oracle_get_stats(const oracle *o, oracle_stats *st);
void oracle_free(oracle *o); // safe on a zeroed or freed oracle
// What oracle_get_stats's mem_bytes will be, from cfg and two figures of the trace, without
// allocating: unique = the most distinct keys in one batch, distinct = the distinct keys of a
// window of W + P + 3 batches.  Resident keys are taken at T x C (a full cache); with a hash
// keymap the map is taken at its largest (three tables' worth while it grows) over the window's
// keys, though it grows with the run's.
// A planner split by tables: unique[k] and distinct[k] are those figures over part k's tables
// (oracle_parts), and the estimate is the parts' sum, the full caches' T x C keys shared between
// them in proportion to distinct[k].
uint64_t oracle_mem_estimate(const oracle_config *cfg, const uint64_t *unique, const uint64_t *distinct);
// How many parts cfg plans in: 2 for a planner split by tables (groups = 2, F >= 2), else 1; where
// grp is not NULL, grp[f] = the part of table f (F entries).
uint32_t oracle_parts(const oracle_config *cfg, uint8_t *grp);
// The two figures of the trace for oracle_mem_estimate: batch t of B samples = rows row0 +
// (t % per_epoch) B of ds (training order), t < nb (nb = W + P + 3, or the run's batches when fewer).
// grp NULL: one figure each over every table; else one per part, grp[f] naming table f's part
// (0 or 1, as oracle_parts gives it), in unique[0..1] and distinct[0..1].
// Counted with two bitmaps over the key space (K / 4 bytes); above 2^30 keys it gives the bounds
// (every id distinct) and returns 0, else 1.
int oracle_window_figures(const bp_dataset *ds, uint64_t row0, uint64_t per_epoch, uint32_t B, uint64_t nb,
                          const uint8_t *grp, uint64_t *unique, uint64_t *distinct);

// Trace driver: plans a split of a dataset in row order, batch t = rows [t*B, (t+1)*B) of the
// split, the final partial batch kept (it becomes the PLAN_LAST record).  cfg supplies T, B, W,
// P, C, threads, keymap; F, card and row_base come from the dataset.  max_rows limits the rows
// (0: all).  sink gets each record in order (return non-zero to stop with that code).
typedef int (*oracle_sink)(const plan *p, void *arg);
int oracle_run_dataset(const bp_dataset *ds, bp_split split, uint64_t max_rows, const oracle_config *cfg,
                       oracle_sink sink, void *arg, oracle_stats *st);

#endif
