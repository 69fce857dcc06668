// cachesim: compares embedding-cache policies on a trace at equal per-trainer capacity.
//
// Policies (capacity C rows per trainer, T trainers, global batch B split as in oracle.h):
//   none      no cache: every access reads its row from the servers and pushes its gradient.
//   static    FAE-style: the C most frequent rows of the whole trace (profiled first; ties by
//             key) are pinned and replicated on every trainer, initialised there from the seed
//             as mode static does (no fetch: their first use is a hit), and written back once at
//             the end; other rows are read per batch into a transient buffer (reported in
//             peak_rows, not counted against C).
//   lru       one LRU cache of C rows per trainer; a batch's rows are looked up in order of
//             first appearance in the trainer's slice; a miss is fetched and becomes the most
//             recently used; replicas on several trainers are kept coherent by synchronising.
//   lookahead the oracle (oracle.h) with window W and prefetch distance P.
//
// One definition for all: an access is a (trainer, key, batch) triple with key in the trainer's
// slice of the batch (each counted once per batch); it is a hit when the key is in that trainer's
// cache without a fetch issued for that batch.  Counters:
//   fetched_rows  rows read from the servers (the oracle fetches a shared row once for all
//                 trainers; lru/static/none once per trainer that misses)
//   written_rows  rows or row gradients sent to the servers: none/static push the gradient of
//                 every uncached access (static also writes its pinned rows at the end); lru
//                 writes a row back when its last replica is evicted or at the end; the oracle
//                 writes every evicted row once (the end flushes)
//   synced_rows   row gradients reduced among trainers: static, every pinned row used in a
//                 batch; lru, every row used in a batch that two or more trainers use or hold
//                 afterwards; the oracle, its sync-now plus sync-later entries; 0 when T = 1
//                 (a lone trainer applies its gradients without an exchange)
//   peak_rows     most rows one trainer holds at any point (in-flight prefetches included)
#ifndef BP_CACHESIM_H
#define BP_CACHESIM_H

#include <stdint.h>

#include "data_bin.h"

typedef enum { CS_NONE = 0, CS_STATIC = 1, CS_LRU = 2, CS_LOOKAHEAD = 3, CS_NPOLICY = 4 } cachesim_policy;

typedef struct {
    uint32_t T, B;   // trainers, global batch size
    uint64_t C;      // rows per trainer
    uint32_t W, P;   // lookahead only
    int threads;     // lookahead only: 1 or 2
    int parts;       // lookahead only: 1, or 2 for the planner split by tables (oracle_config.groups)
    uint64_t iters;  // 0: one pass over the trace, its last batch possibly short; else this many batches of
                     // B as training takes them: the trace's whole batches in turn, its partial last one dropped
    uint64_t start;  // with iters: simulate batches start..iters-1 only, the caches empty at start (as a
                     // run resumed there starts)
} cachesim_config;

typedef struct {
    uint64_t batches, accesses, hits;
    uint64_t fetched_rows, written_rows, synced_rows, peak_rows;
} cachesim_result;

typedef struct cachesim cachesim;

// A trace of rows x F ids in training order (borrowed; must outlive cs).  Returns 0, BP_EINVAL
// (an id outside its table, a key space too large for flat per-key arrays) or BP_ENOMEM.
int cachesim_open(cachesim **cs, const uint32_t *ids, uint64_t rows, uint32_t F, const uint64_t *card);
void cachesim_close(cachesim *cs); // NULL is fine
// Simulates one policy over the whole trace (batches of B, the last one possibly short).
// lookahead returns the oracle's BP_ECAPACITY when C is below what a batch needs.
int cachesim_run(cachesim *cs, cachesim_policy pol, const cachesim_config *cfg, cachesim_result *res);
const char *cachesim_policy_name(cachesim_policy pol);
// The smallest cache (rows per trainer) with which the lookahead policy plans the whole trace
// under cfg's T, B, W and P (cfg->C is not read): *min works and *min - 1 does not.  Each failing
// simulation names what the batch it stopped at needs, and the next tries that much; for T = 1
// that need does not depend on C (the distinct keys of batches s..s+P), so every smaller cache
// fails and the first size that works is the minimum.  For T > 1 which keys are private depends
// on earlier decisions, so the sizes between the last that failed and the first that worked are
// bisected.  Returns 0, or an error other than BP_ECAPACITY from the simulation.
int cachesim_lookahead_min_cache(cachesim *cs, const cachesim_config *cfg, uint64_t *min);
// Whether the lookahead policy can plan a trace of `rows` rows in batches of B samples x F tables
// with window W, prefetch P and `threads`: the oracle takes fewer ids per batch the longer its
// window (oracle_max_batch_ids); a trace shorter than B is one batch of its rows, and a window
// longer than the trace's batches is planned as one of that many (the same plan).  Returns 0 or
// BP_EUSAGE naming --flag ("lookahead", "sweep-lookahead"), so a command refuses before simulating.
int cachesim_lookahead_fits(uint64_t rows, uint32_t B, uint32_t F, uint32_t W, uint32_t P, int threads, uint64_t iters,
                            const char *flag);

// The largest cache size --cache and --sweep-cache take (rows per trainer).
#define CACHESIM_MAX_CACHE ((uint64_t)1 << 40)

// `bagpipe analyze --cache ROWS ...` once cmd_analyze has read the flags: simulates every policy
// and prints the table (or JSON, and the --plot-dir files).  Returns 0 or an error code (the
// message in bp_errmsg).
typedef struct {
    const char *path;            // the dataset
    bp_split split;
    int batch, json;
    int threads;                 // >= 1; the lookahead planner uses at most 2
    int parts;                   // the lookahead planner's parts: 1, or 2 (split by tables)
    uint64_t cache;              // rows per trainer, >= 1
    uint64_t rows;               // simulate only the first N rows of the split (0: all)
    int window, trainers, prefetch, dim;
    uint64_t iters;              // train's iterations (cachesim_config.iters; 0: one pass)
    uint64_t start;              // with iters: the iteration a resumed run starts at (cachesim_config.start)
    const char *sweep_cache, *sweep_lookahead, *plot_dir; // lists "a,b,c" and a directory, or NULL
} cachesim_cmd_opts;
int cachesim_cmd(const cachesim_cmd_opts *o);

#endif
