// plan: the oracle's per-batch instruction record (DESIGN §5) and its binary encoding.
//
// Record t says everything trainers do at iteration t; with the stream of records a trainer needs
// no other knowledge.  Little-endian, packed, no padding; K = key_bytes (4 or 8) per key.
//
//   off  size  field                   off  field (header, 80 bytes)
//   0    4     magic "BPPL"            40   u64 capacity     rows per trainer (C)
//   4    2     version (1)             48   u64 n_keys       key space; every key < n_keys
//   6    1     key_bytes (4 | 8)       56   u32 n_fetch      entry counts
//   7    1     flags (PLAN_LAST)       60   u32 n_evict
//   8    4     size of the record      64   u32 n_private
//   12   4     crc32 of [16, size)     68   u32 n_sync_now
//   16   4     iter t                  72   u32 n_sync_later
//   20   2     T trainers              76   u32 n_sync_groups
//   22   2     P prefetch distance
//   24   4     W lookahead window
//   28   4     B samples in batch t
//   32   8     row0: dataset row of sample 0 of batch t
//   then    slice      (T+1) u32         trainer i trains samples [slice[i], slice[i+1]) of batch t
//           fetch      n_fetch x (K key, u8 for_iter - t, u32 evict_iter, u16 fetcher, u16 writer, u8 flags)
//           evict      n_evict x (K key, u16 owner, u8 flags)
//           private    (T+1) u32 offsets, then n_private x K key (trainer i: [off[i], off[i+1]))
//           sync_now   n_sync_now x K key
//           sync_later n_sync_groups x (u32 grad_iter, u32 deadline, u32 count), then the
//                      n_sync_later keys group after group.  Groups run in strictly increasing
//                      (t - grad_iter, deadline): a trainer launches one reduction per group.
//
// Executing record t on trainer r (a shared key lives in every trainer's cache; a private one in
// its single user's cache only):
//  1. Start of t: for each fetch with fetcher == r, read the row (with its optimizer state) from
//     its server, passing (evict_iter, writer) so the server first applies that writer's
//     write-backs through evict_iter (PLAN_NEVER: nothing to wait for).  A shared row goes to
//     every trainer's cache, a private one (PLAN_PRIVATE) to r's only.  Every fetched row occupies
//     a cache slot from now on; it is needed at for_iter (t + P; record 0 also fetches for 0..P).
//  2. Train samples slice[r]..slice[r+1]: every row they use is in r's cache.
//  3. Gradients of t: r's private keys (private list) are updated locally, no sync.  sync_now keys
//     are summed over trainers in rank order and applied on every replica before t+1 starts.
//     sync_later (key, grad_iter, deadline): the sum of grad_iter's gradients of key is applied
//     on every replica that still holds key by the end of iteration deadline (background work).
//     An entry with grad_iter < t restates an earlier one with a tighter deadline (key evicted).
//     In memory the entries are a flat list in group order (the encoder requires that order).
//  4. End of t: each evicted key leaves the caches and its owner writes it back at the end of t.
//     PLAN_WB_NEXT marks a key whose gradient still has a sync-later entry (deadline t + 1): the
//     owner applies that reduction first, at t (the partial gradients of t are exchanged at t).
//     It must not wait for the deadline: a later fetch of the key is gated at t (evict_iter t:
//     the writer's write-backs through t), so a write-back at the end of t + 1 could arrive after
//     another trainer's refetch and the server would answer with the old row.
//     PLAN_PRIVATE evictions are written back by their only holder.
#ifndef BP_PLAN_H
#define BP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_MAGIC 0x4C505042u // "BPPL" little-endian
#define PLAN_VERSION 1
#define PLAN_HEADER_SIZE 80
#define PLAN_NEVER 0xFFFFFFFFu // evict_iter of a key never evicted
#define PLAN_NO_WRITER 0xFFFFu // writer of a key never evicted
#define PLAN_MAX_TRAINERS 4096

enum { PLAN_LAST = 1u << 0 };                          // record flag: the final batch
enum { PLAN_PRIVATE = 1u << 0, PLAN_WB_NEXT = 1u << 1 }; // fetch / evict flags

typedef struct {
    uint64_t key;
    uint32_t for_iter;   // the iteration that first uses the row
    uint32_t evict_iter; // consistency gate: iteration after which key was last evicted, or PLAN_NEVER
    uint16_t fetcher;    // the trainer that reads it from the servers
    uint16_t writer;     // the trainer that wrote it back then, or PLAN_NO_WRITER
    uint8_t flags;       // PLAN_PRIVATE
} plan_fetch;

typedef struct {
    uint64_t key;
    uint16_t owner; // the one trainer that writes it back
    uint8_t flags;  // PLAN_PRIVATE, PLAN_WB_NEXT
} plan_evict;

typedef struct {
    uint64_t key;
    uint32_t grad_iter; // whose gradient
    uint32_t deadline;  // applied by the end of this iteration
} plan_sync;

// A decoded record.  Arrays are owned and grow as needed (plan_init/plan_free); counts say how
// much is in use.
typedef struct {
    uint32_t iter, flags;
    uint32_t T, P, W, B;
    uint64_t row0, capacity, n_keys;
    uint32_t key_bytes; // encoding width: 4 when n_keys <= 2^32, else 8
    uint32_t *slice;    // (T+1)
    uint32_t *priv_off; // (T+1)
    uint32_t n_fetch, n_evict, n_private, n_sync_now, n_sync_later;
    plan_fetch *fetch;      // (n_fetch)
    plan_evict *evict;      // (n_evict)
    uint64_t *priv_key;     // (n_private)
    uint64_t *sync_now;     // (n_sync_now)
    plan_sync *sync_later;  // (n_sync_later)
    uint32_t cap_T, cap_fetch, cap_evict, cap_private, cap_sync_now, cap_sync_later;
} plan;

void plan_init(plan *p);
void plan_free(plan *p); // safe on a zeroed or freed plan
// Empties the lists and sizes slice/priv_off for T trainers (fields other than lists unchanged).
void plan_reset(plan *p, uint32_t T);
void plan_swap(plan *a, plan *b);

// Appenders (amortised growth; the steady state allocates nothing).
enum { PLAN_LIST_FETCH, PLAN_LIST_EVICT, PLAN_LIST_SYNC_NOW, PLAN_LIST_SYNC_LATER };
void plan_grow_list(plan *p, int list); // doubles one list's capacity
void plan_reserve(plan *p, int list, uint32_t n); // room for n more entries in one list
static inline void plan_add_fetch(plan *p, plan_fetch f) {
    if (p->n_fetch == p->cap_fetch) plan_grow_list(p, PLAN_LIST_FETCH);
    p->fetch[p->n_fetch++] = f;
}
static inline void plan_add_evict(plan *p, plan_evict e) {
    if (p->n_evict == p->cap_evict) plan_grow_list(p, PLAN_LIST_EVICT);
    p->evict[p->n_evict++] = e;
}
static inline void plan_add_sync_now(plan *p, uint64_t key) {
    if (p->n_sync_now == p->cap_sync_now) plan_grow_list(p, PLAN_LIST_SYNC_NOW);
    p->sync_now[p->n_sync_now++] = key;
}
static inline void plan_add_sync_later(plan *p, plan_sync s) {
    if (p->n_sync_later == p->cap_sync_later) plan_grow_list(p, PLAN_LIST_SYNC_LATER);
    p->sync_later[p->n_sync_later++] = s;
}
void plan_reserve_private(plan *p, uint32_t n);
// Bytes held by p's lists at their capacities (memory accounting).
uint64_t plan_list_bytes(const plan *p);

// Encoded size in bytes of p.
size_t plan_encoded_size(const plan *p);
// Writes the record into buf (cap bytes).  Returns the size, or BP_EINVAL if cap is too small or
// p is inconsistent (a bug in the caller, reported, not asserted, so fuzzers can call it).
int64_t plan_encode(const plan *p, uint8_t *buf, size_t cap);
// Reads the record size from the first PLAN_HEADER_SIZE bytes (for framing a stream); checks only
// magic, version and that size >= the header.  Returns 0 or BP_EFORMAT.
int plan_peek_size(const uint8_t *buf, size_t n, uint32_t *size);
// Decodes exactly one record of n bytes into p, validating everything: magic, version, size,
// checksum, counts against the size, trainer ids < T, keys < n_keys, iterations in range, flags,
// slice and private offsets monotone.  A malformed record returns BP_EFORMAT (message says which
// field) and leaves p's counts at zero.
int plan_decode(plan *p, const uint8_t *buf, size_t n);

#endif
