// oracle: the lookahead planner.  Model and contract in oracle.h; record layout in plan.h.
//
// Data structures (all allocated at init; the steady state allocates nothing):
//   keymap   key -> 64-bit word: KM_ACTIVE | active index << 32 | latest occurrence (the
//            dedupe test reads this one word), or the key's last eviction
//            ((writer << 32) | (evict_iter + 1); 0 = never evicted).  Flat array or hash map.
//   actives  one record per key with an occurrence in a held batch (every resident key has one):
//            its consistency gate (the last eviction, 8 bytes).  The key itself is in the slots.
//   slots    ring of R held batches; a batch's occurrences are its unique keys in first-appearance
//            order: (key, active index, previous occurrence of the same key, users mask, and the
//            distance in batches to its next occurrence), 14 bytes (4-byte keys when K <= 2^32,
//            1-byte masks when T <= 8, 1-byte distances when R <= 256; else 8, 8 and 4 bytes, 28 in
//            all), and two bits (miss, private).
//            An occurrence id is (slot << pos_bits) | position; next links make "next use" O(1).
//            Residency is not a per-key state: it follows from the back link and a miss bit per
//            occurrence ("Residency" below), so the planner reads only the slot, in order.
//   buckets  ring of lists of resident shared keys by next use (batch), for Belady eviction;
//            only keys that can become candidates (next use beyond the pinned batches) enter,
//            8 bytes each (bentry).  Lazy: a bucket is built and brought up to date (bucket_fill,
//            from its batch's back links and miss bits) only when capacity pressure reaches its
//            level, so without pressure no entry is ever written.
//   scratch  of the indexer: one trainer's slice transposed (F columns, ~B/T ids each), and the
//            positions of the batch's occurrences that have a previous one (pass 2's list, 4 bytes).
//
// Speed (docs/oracle.md has the profile).  The work is a few random memory touches per id and per
// unique key, so the code is arranged for memory-level parallelism: the indexer reads a slice's ids
// once (transposing them so each table's ids are consecutive and can be prefetched into the keymap
// ahead of use), dedupes in a first pass that touches the keymap, the new slot and the gate of each
// fresh active record (the free list says which records come next, so their lines are asked for
// ahead), and in a second pass writes the scattered next links of the previous occurrences (one
// mapping on huge pages) with prefetches a few occurrences ahead; the batch's miss bits follow from
// its back links, 64 at a time.  The passes after the dedupe run at about three instructions per
// cycle (docs/oracle.md, round 12), so their loops also keep in locals what their stores would have
// them read again through the oracle (linkmap, key_at), and the second pass is a function of its
// own, which first lists the occurrences that have a previous one so that its store loop does not
// branch on it.  The planner reads residency from the slots in order, not per key: the fetch step
// visits only the miss bits, and the completion step writes each occurrence's outcome as bits and
// then fills each list from its bits, so no step branches on unpredictable outcomes per key (with
// one thread, 64 outcomes at a time in vector registers); it prefetches the gate words of keys it
// is about to fetch or evict.  Retiring reads the keys that leave the window from a list the planner
// wrote in place when it completed their batch, with their write-back trainers, and prefetches
// their keymap words (with one thread and the flat keymap the planner retires each such key where
// it evicts it: retire_key).  Entries are as narrow as the key space, T and R allow, since much of
// the cost is bytes moved to and from memory.  oracle_ref.c keeps the planner before these changes;
// tests require byte-identical plans.
//
// Two halves.  The indexer (dedupe + linking + retiring held batches) owns keymap, tails, the
// free list and the slots being filled; the planner owns the gates and miss and private bits of
// published keys, buckets and records, and a batch's slot from its completion until it is
// released (the list of keys to retire goes there).  With threads = 2 the indexer runs on its own
// thread: batches are published and released through a mutex (release/acquire) and the only field
// both touch concurrently, an occurrence's next link, is atomic; the thread that waits for the
// other writes the next links and the batch's far list (the indexer in pass 2, or the planner,
// link_batch, from the back links), and retiring tests the keymap word, not only a missing link,
// for a later occurrence.  The planner never looks past its horizon H(s), so its output does not
// depend on how far ahead the indexer is: plans are identical with one or two threads.
#include "oracle.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common.h"
#include "simd.h"

#define NIL 0xFFFFFFFFu
#define KM_ACTIVE (1ull << 63)
#define INQ (ORACLE_INDEX_AHEAD + 3) // input queue depth with two threads

// Residency is not stored per key: whether a key is resident when its occurrence at u is fetched
// for follows from its previous occurrence lu (the back link) and one bit per occurrence, the miss
// bit.  After its use at lu a key stays resident exactly when it was fetched shared there and its
// next use u is within the horizon of step lu + 1 (u - lu <= P + W + 1), until a pressure eviction.
// (A previous occurrence at distance <= P is still in use: resident, and shared, since a private
// fetch needs no use within P batches.)  So the occurrence at u misses iff it is new to the window,
// or u - lu > P + W + 1 (both known when u is indexed: pass 2 sets the bit), or lu was private, or
// the key was evicted under pressure before u (the planner sets the bit then: at step lu + 1 for
// the first, before u - P for the second, so always before the step that fetches for u).  A key
// is resident at a step s' in (lu, u - P] iff it has a previous occurrence and no miss bit.  The
// fetch step visits only the set bits; a second bit per occurrence says it was fetched private.

// A resident shared key waiting in the bucket of its next use v, packed in 8 bytes (under pressure
// the buckets take an entry per use of most such keys, so their size is much of the memory traffic):
//   bits [0, pos_bits)   position of its occurrence in batch v (whose slot is v % R): active index, key
//   bits [pos_bits, 32)  v - last_use, with last_use the iteration of its pending gradient
//                        (v <= H(last_use + 1) = last_use + 1 + P + W < last_use + R < 2^slot_bits)
//   bits [32, 64)        when last_use is the batch being completed: its sync-later entry there
typedef uint64_t bentry;

typedef struct {
    void *key;       // (cap) unique keys of the batch: uint32_t when the key space fits, else uint64_t
    uint32_t *act;   // (cap) their active index
    uint32_t *prev;  // (cap) previous occurrence of the same key, NIL for a key new to the window
    void *users;     // (cap) trainers touching the key: uint8_t masks when T <= 8, else uint64_t
    uint64_t *miss;  // (cap / 64 + 1) bit oc: occurrence oc is not resident when its batch is fetched for
    uint64_t *priv;  // (cap / 64 + 1) bit oc: occurrence oc was fetched private (0 when indexed)
    uint64_t accesses; // (key, trainer) pairs of the batch: the sum of its users' bits
    uint32_t n;      // unique keys in the batch
    uint32_t n_last; // once the planner has completed the batch (without planner_retires): the
                     // occurrences with no later use linked then, listed at the front of prev
                     // (positions), key, act and users (the trainer that writes each back), for
                     // retire_batch
    uint32_t batch;  // which batch the slot holds
    uint32_t samples;
    int linked;      // 1: the indexer linked the previous occurrences to these (pass 2)
} slot;

// The hash keymap: open addressing with linear probing, key and value side by side so that a
// probe that finds its key reads one cache line (four entries a line), at load <= 1/2.  It grows
// without a pause: the next table is faulted in a page at a time from load 1/4 (hmap_prefault),
// and at load 1/2 the old table is moved into it a few entries per insert (hmap_grow, hmap_move),
// so the indexer never stops for a whole rehash or for the page faults of a fresh table.
typedef struct {
    uint64_t key; // key + 1, 0 = empty
    uint64_t val;
} hent;

typedef struct {
    hent *e;          // (cap) the table new keys go to
    uint64_t cap, mask;
    uint64_t live;    // keys in both tables
    hent *old;        // (old_cap) the table being moved into e, NULL when none
    uint64_t old_cap, old_mask;
    uint64_t moved;   // old[0, moved) has been copied to e (and is stale there)
    hent *next;       // (2 cap) the next doubling's table, being faulted in ahead of use, or NULL
    size_t next_touched; // its bytes [0, next_touched) are faulted in
} hmap;

typedef struct {
    const uint32_t *ids; // (n, F)
    uint32_t n;
} inbatch;

// The next links' array and what locates a link in it (see next_index), fixed at init.  The hot
// loops copy it into a local: their stores (one-byte users masks and links, record fields) may alias
// the oracle's fields, so whatever they read through o is loaded again after each store.
typedef struct {
    void *p;                     // every slot's links, in blocks; one mapping, on huge pages
    size_t row;                  // R NEXT_BLOCK links: one block row (block b of every slot)
    uint32_t lw;                 // bytes per link: 1 when R <= 256, else 4
    uint32_t pos_bits, pos_mask; // an occurrence id is its slot << pos_bits | its position (as in o)
    uint32_t far_lo, far_hi;     // a link of more than W and at most P + W + 1 batches is far (far_push)
} linkmap;

struct oracle_impl {
    uint32_t T, B, F, W, P, R, threads;
    int links; // ORACLE_LINKS_* (two threads)
    uint64_t C, K, row_base, iter_base;
    uint64_t *offset; // (F) first key of each table
    uint64_t *card;   // (F)
    uint32_t *tabs, nt; // the tables this part of the planner dedupes, consecutive (all F unless split)
    int borrow;

    // indexer side
    int km_flat;
    uint64_t *km; // (K) flat keymap
    size_t km_bytes;
    hmap hm;
    uint32_t *cols;     // (F, COLS_LD(B / T + 1)) one trainer's slice of a batch, transposed
    uint32_t *dist;     // (COLS_LD(B / T + 1)) the distinct ids of a tiny table's column (tiny_distinct)
    uint32_t *back_tab; // (R) back_links's distances by slot
    uint32_t *card32;   // (F) card - 1: the largest valid id of each table
    uint32_t *bl_list;  // (B F) back_links's occurrences with a previous one
    uint32_t *act_free; // (act_cap) stack of free indices
    uint32_t act_cap, act_hw, n_free;
    slot *slots; // (R)
    // Slots whose arrays are small (below MAP_MIN each) have them carved from one mapping per
    // array, all slots' together (slot_pool[k], slot_pool_bytes[k]); else each is its own.
    char *slot_pool[6];
    size_t slot_pool_bytes[6];
    int avx2;          // AVX2 for the planner's scans (outcome64_avx2, back_in_range_avx2)
    int avx2_cols;     // and transpose_avx2 for the slices (F >= 8)
    int key32, users8; // slot entry widths: 4-byte keys (K <= 2^32), 1-byte users masks (T <= 8)
    uint32_t pos_bits, pos_mask;
    linkmap lk;         // the next links of every slot
    size_t nexts_bytes;
    uint64_t **far;     // (R) of each linked batch v: its links that reach back more than W batches (far_push)
    uint32_t *far_n, *far_cap;
    uint32_t *far_pos;  // (per batch) far_map's scratch
    uint32_t retire_done; // batches retired by the indexer
    uint64_t occ_hw;      // most occurrences in one batch
    int idx_err;          // sticky error of the indexer
    char idx_msg[512];

    // The planner's record of each active key (initialised by the indexer when a key becomes active).
    uint64_t *act_gate; // (act_cap) last eviction, in the keymap's inactive encoding

    // shared counters (under mu with two threads)
    uint32_t n_pushed, n_indexed, n_retired;
    int idx_links; // with ORACLE_LINKS_AUTO, 1: the indexer links the batches it indexes
    uint32_t last_short; // a batch shorter than B was pushed (must be the last)
    int finished;

    // planner side
    uint32_t step;
    uint32_t n_linked; // with two threads: batches whose links the planner has written or found
    int done, err;
    uint64_t shared_count;
    uint64_t *priv_count; // (T)
    bentry **bucket;      // (R) resident shared keys by next use v, at v's slot v % R
    uint32_t *bucket_n, *bucket_cap;
    uint32_t *bucket_upto; // (R) the bucket holds its entries from uses before this step (bucket_fill)
    uint64_t **grp;        // (R) of a filled bucket's batch v: the occurrences that can enter later, with v - lu
    uint32_t *grp_cap;     //     in [grp_lo, grp_hi), grouped by v - lu: position in lu << 32 | in v (bucket_fill)
    uint32_t *grp_lo, *grp_hi, *grp_off; // (R), (R), (R grp_stride) offsets of the groups
    uint32_t grp_stride, grp_span; // grp_off's per slot, and how many distances a scan groups
    uint64_t *gtmp;        // (gtmp_cap) scratch of bucket_fill
    uint32_t gtmp_cap;
    uint32_t *lz_sync;    // (per batch) sync-later index of each occurrence of s-1 kept for later
    uint32_t *cand;       // (per batch) positions of the misses of the batch being fetched for, or of
                          // the evictions of the batch being completed
    uint64_t *bits_ev, *bits_now, *bits_last; // (per batch / 64 + 1) outcomes of the batch being completed
    bentry *part_tmp;     // (part_cap) scratch of bucket_lone_last, and demote's candidates
    uint32_t part_cap;
    uint64_t *dm_cand, *dm_take; // (T) scratch of demote: candidates and keys to demote per trainer
    uint64_t *lz_tmp;     // (lz_cap) scratch of bucket_fill
    uint32_t lz_cap;
    uint32_t rr_fetch, rr_owner;
    plan rec[2];          // record s-1 being completed, record s collecting fetches (rec_prev, rec_cur)
    uint64_t *pv_key;     // (pv_cap) private keys of the batch being completed
    uint16_t *pv_tr;      // (pv_cap) their trainers
    uint32_t pv_n, pv_cap;
    uint32_t *pv_cursor;  // (T) scratch for grouping private keys by trainer
    plan_sync *sync_tmp;  // (sync_cap) scratch for putting sync-later entries in group order
    uint32_t sync_cap;
    uint32_t *sync_bk;    // (sync_bk_cap) the group of each sync-later entry of the record being completed
    uint32_t sync_bk_cap;
    uint32_t *sync_cnt;   // (2 (P + W + 2) + 1) their counts by group, from index 1 (sync_note)
    uint32_t *sync_cur;   // (2 (P + W + 2)) sync_scatter's cursors
    oracle_stats st;
    uint64_t pub_acts, pub_occ, pub_hm_cap; // indexer memory high-water marks, published per batch
    uint64_t mem_peak;                      // the largest mem_bytes reported (the plan lists swap sizes)
    double cpu_index, cpu_plan;             // CPU seconds of each half (thread CPU clocks)
    double ph_idx[ORACLE_PHASES], ph_idx_t; // the indexer's phase seconds, the last boundary (its thread)
    double ph_pub[ORACLE_PHASES];           // the same, published with the memory marks
    double ph_plan[ORACLE_PHASES], ph_plan_t; // the planner's phase seconds, the last boundary

    // a planner split by tables (oracle_config.groups = 2): the oracle's impl is part 0
    struct oracle_impl *peer; // part 0: part 1 (NULL without a split)
    struct split_sync *sp;    // both parts: what they share (split_sync; part 0 owns it)
    oracle_stats st_pub;      // part 1 on its own thread: its stats as of its last step (split_thread)

    // two threads
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int mu_init, th_started, stop;
    inbatch inq[INQ];
    uint32_t *inbuf[INQ]; // (B, F) copies unless borrowed
    uint32_t in_head, in_count;
};

// ---------------------------------------------------------------------------------------------
// Memory: large arrays are mapped (zero pages cost nothing until touched); small ones come from
// the heap, so that small oracles (tests, short traces) do not pay for mappings.

#define MAP_MIN ((size_t)1 << 20)

static void *big_alloc(size_t n) { return n >= MAP_MIN ? bp_alloc_huge(n) : calloc(1, n ? n : 1); }

static void big_free(void *p, size_t n) {
    if (n >= MAP_MIN) bp_free_huge(p, n);
    else free(p);
}

// The bytes of a slot's six arrays for n entries (key, act, prev, users, miss, priv: slot), with
// keys of kw and users masks of uw bytes; and the step of one slot's part of a pool of such arrays.
static void slot_arrays(uint64_t n, uint64_t kw, uint64_t uw, uint64_t out[6]) {
    const uint64_t bits = (n / 64 + 1) * sizeof(uint64_t);
    const uint64_t a[6] = {n * kw, n * sizeof(uint32_t), n * sizeof(uint32_t), n * uw, bits, bits};
    memcpy(out, a, sizeof a);
}

static uint64_t pool_step(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

// A pool of small slot arrays (oracle_init): mapped on 4 KiB pages even when large, since each slot
// writes only the start of its part (with transparent huge pages every slot's first write made a
// 2 MiB page resident: 1.5 GiB for a window that holds a page a slot).  Small pools: the heap.
static void *pool_alloc(size_t n) {
    if (n < MAP_MIN) return calloc(1, n ? n : 1);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, n, MADV_NOHUGEPAGE);
    return p;
}

// ---------------------------------------------------------------------------------------------
// Keymap

// Large tables are mapped (huge pages from 32 MiB on: the probes are random); out of memory aborts,
// like the other allocations of the steady state.
static hent *hent_alloc(uint64_t cap) {
    hent *e = big_alloc((size_t)cap * sizeof *e);
    if (!e) bp_panic(__FILE__, __LINE__, "oracle: out of memory for a keymap of %llu entries", (unsigned long long)cap);
    return e;
}

static void hmap_init(hmap *h, uint64_t cap) {
    memset(h, 0, sizeof *h);
    h->cap = cap, h->mask = cap - 1;
    h->e = hent_alloc(cap);
}

static void hmap_free(hmap *h) {
    if (h->e) big_free(h->e, (size_t)h->cap * sizeof *h->e);
    if (h->old) big_free(h->old, (size_t)h->old_cap * sizeof *h->old);
    if (h->next) big_free(h->next, (size_t)h->cap * 2 * sizeof *h->next);
    memset(h, 0, sizeof *h);
}

// Entries moved from the old table per insert while a doubling is under way.  The old table has at
// most cap/4 keys (the new one's cap/2 load bound, halved) and is cap/2 entries long, so it is
// empty after cap/(2 HMAP_MOVE) inserts, when the new table holds at most cap/4 + cap/(2 HMAP_MOVE)
// keys: below its own doubling point (cap/2) for HMAP_MOVE >= 2.
#define HMAP_MOVE 16

// The entry of key in table e (mask), or the empty entry where its probe ends.
static inline hent *hent_probe(hent *e, uint64_t mask, uint64_t key, uint64_t *at) {
    uint64_t i = bp_mix64(key) & mask;
    while (e[i].key != key + 1 && e[i].key != 0) i = (i + 1) & mask;
    *at = i;
    return &e[i];
}

// Starts loading, for writing, the lines where key's probes begin (its entry, nearly always).
static inline void hmap_prefetch(const hmap *h, uint64_t key) {
    uint64_t x = bp_mix64(key);
    __builtin_prefetch(&h->e[x & h->mask], 1);
    if (h->old) __builtin_prefetch(&h->old[x & h->old_mask], 1);
}

// The value of key where it lives now, or NULL.  A key found in the old table below `moved` has
// been copied to the new one, which holds its current value.
static uint64_t *hmap_find(hmap *h, uint64_t key) {
    uint64_t at;
    if (h->old) {
        hent *o = hent_probe(h->old, h->old_mask, key, &at);
        if (o->key && at >= h->moved) return &o->val;
    }
    hent *e = hent_probe(h->e, h->mask, key, &at);
    return e->key ? &e->val : NULL;
}

// Copies up to n entries of the old table into the new one; frees the old table when done.
static void hmap_move(hmap *h, uint64_t n) {
    uint64_t end = BP_MIN(h->old_cap, h->moved + n), at;
    for (; h->moved < end; h->moved++) {
        const hent *o = &h->old[h->moved];
        if (!o->key) continue;
        hent *e = hent_probe(h->e, h->mask, o->key - 1, &at);
        BP_ASSERT(e->key == 0);
        *e = *o;
    }
    if (h->moved == h->old_cap) {
        big_free(h->old, (size_t)h->old_cap * sizeof *h->old);
        h->old = NULL, h->old_cap = h->old_mask = h->moved = 0;
    }
}

// Starts a doubling: the full table becomes the old one, moved over by later inserts.
static void hmap_grow(hmap *h) {
    BP_ASSERT(!h->old);
    h->old = h->e, h->old_cap = h->cap, h->old_mask = h->mask, h->moved = 0;
    h->e = h->next ? h->next : hent_alloc(h->cap * 2);
    h->next = NULL, h->next_touched = 0;
    h->cap *= 2, h->mask = h->cap - 1;
}

// Faults in the next doubling's table a page at a time, from load 1/4 on, so that the new
// table's pages are mapped before inserts land on them at random: a first touch costs a page
// fault (on this VM 5-13 ms per 2 MiB huge page, more than a batch's planning), and a fresh table
// would take them all in the first batch after the doubling.  The 32 cap bytes of the next table
// are spread over the inserts from load 1/4 on, 256 bytes each, so they are all mapped at about
// load 3/8 (or somewhat later when the previous doubling was still moving entries at load 1/4).
static void hmap_prefault(hmap *h) {
    if (h->old || 4 * h->live < h->cap) return;
    size_t bytes = (size_t)h->cap * 2 * sizeof *h->next;
    if (!h->next) h->next = hent_alloc(h->cap * 2), h->next_touched = 0;
    size_t end = BP_MIN(bytes, h->next_touched + 256);
    for (size_t b = (h->next_touched + 4095) / 4096 * 4096; b < end; b += 4096) ((volatile char *)h->next)[b] = 0;
    h->next_touched = end;
}

// The value slot of key, created (value 0) if absent.
static uint64_t *hmap_upsert_slow(hmap *h, uint64_t key) {
    uint64_t *v = hmap_find(h, key);
    if (v) return v;
    if (h->old) hmap_move(h, HMAP_MOVE);
    else if (2 * (h->live + 1) > h->cap) hmap_grow(h), hmap_move(h, HMAP_MOVE);
    else hmap_prefault(h);
    BP_ASSERT(2 * (h->live + 1) <= h->cap);
    uint64_t at;
    hent *e = hent_probe(h->e, h->mask, key, &at);
    e->key = key + 1, e->val = 0, h->live++;
    return &e->val;
}

// hmap_upsert_slow with the common case (no doubling under way, the key at its home) inline.
static inline uint64_t *hmap_upsert(hmap *h, uint64_t key) {
    hent *e = &h->e[bp_mix64(key) & h->mask];
    return e->key == key + 1 && !h->old ? &e->val : hmap_upsert_slow(h, key);
}

// ---------------------------------------------------------------------------------------------
// Indexer: dedupe a batch into occurrences, link them to each key's previous occurrence, retire.

#define KM_ACT(v) ((uint32_t)((v) >> 32) & 0x7FFFFFFFu)

// A free active record index (its fields are filled by the caller).
static inline uint32_t act_take(oracle_impl *o) {
    uint32_t a = o->n_free ? o->act_free[--o->n_free] : o->act_hw++;
    BP_ASSERTF(a < o->act_cap, "oracle: %u active keys exceed the bound %u", a, o->act_cap);
    return a;
}

// Ends phase k (ORACLE_PH_*) of one thread: its seconds since the last boundary *t go to acc[k].
// Through memory, not locals, so that no register is held across the loops between boundaries.
static void phase_end(double *acc, double *t, int k) {
    double now = bp_now();
    acc[k] += now - *t;
    *t = now;
}

static inline uint32_t popcount64(uint64_t x) { // portable: no -mpopcnt in the build
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((x * 0x0101010101010101ull) >> 56);
}

// Bits set in each byte: the users masks of T <= 8 trainers (a table: the build has no popcnt).
static const uint8_t pop8[256] = {
#define P2(n) n, n + 1, n + 1, n + 2
#define P4(n) P2(n), P2(n + 1), P2(n + 1), P2(n + 2)
#define P6(n) P4(n), P4(n + 1), P4(n + 1), P4(n + 2)
    P6(0), P6(1), P6(1), P6(2)
#undef P2
#undef P4
#undef P6
};

// Slot entry accessors (the widths are fixed at init, so the branches are always predicted):
// key_at and users_at for the loops that keep the arrays and widths in locals (see linkmap).
static inline uint64_t key_at(const void *keys, int key32, uint32_t oc) {
    return key32 ? ((const uint32_t *)keys)[oc] : ((const uint64_t *)keys)[oc];
}
static inline uint64_t users_at(const void *users, int users8, uint32_t oc) {
    return users8 ? ((const uint8_t *)users)[oc] : ((const uint64_t *)users)[oc];
}
static inline uint64_t slot_key(const oracle_impl *o, const slot *sl, uint32_t oc) {
    return key_at(sl->key, o->key32, oc);
}
static inline uint64_t slot_users(const oracle_impl *o, const slot *sl, uint32_t oc) {
    return users_at(sl->users, o->users8, oc);
}

// Marks the occurrence at pos of sl as a miss when its batch is fetched for: its previous occurrence
// was private, or it was evicted under pressure (the planner's thread, before that step).
static inline void occ_miss(const slot *sl, uint32_t pos) { sl->miss[pos >> 6] |= 1ull << (pos & 63); }
static inline int occ_bit(const uint64_t *bits, uint32_t pos) { return (int)(bits[pos >> 6] >> (pos & 63) & 1); }

// The next link of an occurrence: how many batches later the same key occurs next (atomic; 0 for
// no later occurrence yet).  Both occurrences are held, so the distance is below R and the link
// takes one byte when R <= 256 (W up to ~250), else four (lw).  The planner needs only the batch
// of the next use, for its two scans; the position in that batch it needs in two rare cases, which
// have their own means: a Belady bucket is filled from its batch's back links (bucket_fill), and a
// private key that comes back within the horizon is found in the far list of the batch it comes
// back in (far_push).  One byte makes the links' ring a quarter of the size (21 against 85 MB at
// the headline's size) and the planner's scans read a quarter of the bytes; the indexer's
// scattered link stores did not get cheaper (their lines stay cold: docs/oracle.md, round 11).
// The links of all slots live in one array, in blocks of NEXT_BLOCK: block b of slot j at b R + j,
// so that a block row holds block b of every slot.  One mapping on huge pages spares most of the
// stores a TLB miss; blocks keep the touched part dense (a batch's ~100K unique keys of a capacity
// of B x F), where slots side by side would each fault in whole huge pages.
#define NEXT_BITS 10
#define NEXT_BLOCK (1u << NEXT_BITS)
static inline size_t next_index(const linkmap *l, uint32_t j, uint32_t oc) {
    return (size_t)(oc >> NEXT_BITS) * l->row + ((size_t)j << NEXT_BITS) + (oc & (NEXT_BLOCK - 1));
}
static inline uint32_t link_width(uint64_t R) { return R <= 256 ? 1 : 4; }
// The link at index i of the array (link_at), and the next link of occurrence oc of slot j
// (next_d).  With two threads the planner may read a link being stored, from a batch beyond its
// horizon, which reads as no use there either way; the links it needs were stored before their
// batch was published (or by itself), so the loads and stores are atomic and relaxed: no other
// memory is read through a link.
static inline uint32_t link_at(const linkmap *l, size_t i) {
    return l->lw == 1 ? __atomic_load_n((const uint8_t *)l->p + i, __ATOMIC_RELAXED)
                      : __atomic_load_n((const uint32_t *)l->p + i, __ATOMIC_RELAXED);
}
static inline uint32_t next_d(const linkmap *l, uint32_t j, uint32_t oc) { return link_at(l, next_index(l, j, oc)); }
// The index of occurrence occ's link; the link at index i set to d, or its line asked for.
static inline size_t occ_index(const linkmap *l, uint32_t occ) {
    return next_index(l, occ >> l->pos_bits, occ & l->pos_mask);
}
static inline void link_set(const linkmap *l, size_t i, uint32_t d) {
    if (l->lw == 1) __atomic_store_n((uint8_t *)l->p + i, (uint8_t)d, __ATOMIC_RELAXED);
    else __atomic_store_n((uint32_t *)l->p + i, d, __ATOMIC_RELAXED);
}
static inline void link_prefetch(const linkmap *l, size_t i) { __builtin_prefetch((const char *)l->p + i * l->lw, 1); }
// Slot j's links [0, n) set to none.
static void next_clear(const linkmap *l, uint32_t j, uint32_t n) {
    for (uint32_t b = 0; b < n; b += NEXT_BLOCK)
        memset((char *)l->p + next_index(l, j, b) * l->lw, 0, (size_t)BP_MIN(NEXT_BLOCK, n - b) * l->lw);
}
// Bytes of the blocks of n occurrences a slot in each of R slots.
static size_t nexts_bytes(uint64_t n, uint64_t R) {
    return (size_t)(((n + NEXT_BLOCK - 1) >> NEXT_BITS) * R << NEXT_BITS) * link_width(R);
}
// How many batches back from slot j slot k lies (slot_back) or the occurrence occ does (occ_back):
// (j - its slot) mod R, in [1, R) for an occurrence of another held batch (no division: both slot
// numbers are below R).
static inline uint32_t slot_back(uint32_t k, uint32_t j, uint32_t R) { return j >= k ? j - k : j + R - k; }
static inline uint32_t occ_back(uint32_t occ, uint32_t j, uint32_t R, uint32_t pos_bits) {
    return slot_back(occ >> pos_bits, j, R);
}

// The positions k < n of the back links prev[k] that are not NIL and reach back d batches from
// slot j with lo <= d <= hi, into out, in order (bucket_fill's scan: most links are nearer).
static uint32_t back_in_range(const uint32_t *prev, uint32_t n, uint32_t j, uint32_t R, uint32_t pos_bits, uint32_t lo,
                              uint32_t hi, uint32_t *out, int avx2);

// The miss bit that the back link pr of an occurrence of slot j sets (see "Residency"): new to the
// window, or its previous occurrence farther back than keep = P + W + 1 batches.
static inline uint64_t miss_bit(uint32_t pr, uint32_t j, uint32_t R, uint32_t pos_bits, uint32_t keep) {
    return pr == NIL || occ_back(pr, j, R, pos_bits) > keep;
}

// Bits set in a users mask: the trainers that use a key at its batch.
static inline uint32_t users_bits(int users8, uint64_t users) { return users8 ? pop8[users] : popcount64(users); }

static void slot_misses(const oracle_impl *o, slot *sl, uint32_t j, uint32_t n);

// A link of batch v (slot j) that reaches back more than W batches, to the occurrence `back` at
// distance d: if that occurrence is fetched private (no use in the W batches after it) and d <=
// P + W + 1, its completion must set this occurrence's miss bit (plan_step, step (a)), which needs
// the position here (oc), not in the link.  Few links reach that far at the W of real runs (those
// within P + 1 batches of the horizon), so each batch keeps them in a list, written by whoever
// links the batch and read once it is published (far_map).
static void far_push(oracle_impl *o, uint32_t j, uint32_t back, uint32_t oc) {
    if (o->far_n[j] == o->far_cap[j]) {
        o->far_cap[j] = o->far_cap[j] ? 2 * o->far_cap[j] : 64;
        o->far[j] = bp_xrealloc(o->far[j], (size_t)o->far_cap[j] * sizeof **o->far);
    }
    o->far[j][o->far_n[j]++] = (uint64_t)back << 32 | oc;
}
// Whether a link of d batches goes into a far list (far_push).
static inline int link_far(const linkmap *l, uint32_t d) { return d > l->far_lo && d <= l->far_hi; }
// Links the previous occurrence pr (its link at index i), d batches back, to occurrence oc of the
// batch of slot j being linked (pass 2 or link_batch), with a far-list entry when the link is far
// (link_far: more than W batches back but within the horizon of pr's completion).
static inline void link_prev(oracle_impl *o, const linkmap *l, uint32_t j, uint32_t pr, uint32_t oc, uint32_t d,
                             size_t i, int far) {
    link_set(l, i, d);
    if (__builtin_expect(far, 0)) far_push(o, j, pr, oc);
}
// For the completion of batch t = s - 1 (slot jl), at its first private key that comes back: the
// position of the next occurrence of each occurrence of t whose link reaches more than W batches
// ahead, within the horizon H, into map (indexed by the position in t).  One pass over the far
// lists of batches t + W + 1 .. min(H, t + P + W + 1), which hold links to P + 1 batches each.
static void far_map(const oracle_impl *o, uint32_t t, uint32_t H, uint32_t *map) {
    const uint32_t R = o->R, jl = t % R, pos_bits = o->pos_bits, pos_mask = o->pos_mask;
    for (uint32_t v = t + o->W + 1; v <= H && v <= t + o->P + o->W + 1; v++) {
        const uint32_t jv = v % R;
        const uint64_t *f = o->far[jv];
        for (uint32_t k = 0; k < o->far_n[jv]; k++)
            if ((uint32_t)(f[k] >> 32) >> pos_bits == jl) map[(uint32_t)(f[k] >> 32) & pos_mask] = (uint32_t)f[k];
    }
}

// Prefetch distances of the indexer: keymap words (ids), the previous occurrence's link
// (occurrences), a fresh active record's gate (records taken).
#define IDX_AHEAD_KM 32
#define IDX_AHEAD_LINK 12
#define IDX_AHEAD_GATE 16

// Column stride of the transposed slice: room for IDX_AHEAD_KM ids of padding after each column (so
// the prefetch ahead needs no bounds test), and not a multiple of 4 KiB, so columns do not alias in L1.
#define COLS_LD(len) (((len) + 15) / 16 * 16 + IDX_AHEAD_KM + 16)

// The error of the first bad id of a batch in indexing order (trainer, feature, sample), or 0.
static int index_check(const oracle_impl *o, const uint32_t *ids, uint32_t n) {
    const uint32_t F = o->F, T = o->T;
    for (uint32_t i = 0; i < T; i++) {
        uint32_t lo = (uint32_t)((uint64_t)i * n / T), hi = (uint32_t)((uint64_t)(i + 1) * n / T);
        for (uint32_t f = 0; f < F; f++)
            for (uint32_t s = lo; s < hi; s++)
                if (ids[(size_t)s * F + f] >= o->card[f])
                    return bp_fail(BP_ERANGE, "oracle: batch %llu, sample %u, feature %u: id %u >= table size %llu",
                                   (unsigned long long)(o->iter_base + o->n_indexed), s, f, ids[(size_t)s * F + f],
                                   (unsigned long long)o->card[f]);
    }
    return 0;
}

static int simd_on = 1;
void oracle_set_simd(int on) { simd_on = on; }

#if BP_SIMD_AVX2
// The transposition of index_batch_impl for the rows [0, len / 8 * 8) of a slice (ids: (len, F),
// F >= 8) and the features [fa, fb_end), eight rows by eight features at a time, the last block of
// features overlapping the one before (or features before fa) when fb_end - fa is not a multiple of 8; each id is checked against its table's largest (maxid) and
// *bad set for one beyond.  Returns the rows done; the scalar loop does the rest.  0.3 -> 0.15 ms
// per batch of 16384 x 26 here.
__attribute__((target("avx2"))) static uint32_t transpose_avx2(const uint32_t *ids, uint32_t len, uint32_t F,
                                                               uint32_t fa, uint32_t fb_end, uint32_t *cols,
                                                               uint32_t ld, const uint32_t *maxid, uint32_t *bad) {
    const uint32_t L8 = len / 8 * 8;
    __m256i over = _mm256_setzero_si256(); // nonzero lanes: an id above its table's largest
    for (uint32_t fb = fa; fb < fb_end; fb += 8) {
        const uint32_t f0 = fb + 8 <= fb_end ? fb : fb_end >= 8 ? fb_end - 8 : 0;
        const __m256i mx = _mm256_loadu_si256((const __m256i *)(maxid + f0));
        for (uint32_t s = 0; s < L8; s += 8) {
            const uint32_t *r = ids + (size_t)s * F + f0;
            const float *src[8];
            for (int k = 0; k < 8; k++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(r + (size_t)k * F));
                over = _mm256_or_si256(over, _mm256_xor_si256(_mm256_max_epu32(x, mx), mx));
                src[k] = (const float *)(r + (size_t)k * F);
            }
            bp_transpose8_avx2(src, (float *)(cols + (size_t)f0 * ld + s), ld);
        }
    }
    *bad |= !_mm256_testz_si256(over, over);
    return L8;
}

#endif

// The completion step's outcome bits of 64 next links (plan_step, step (a)): bit k of ev for no
// use within hd batches (d - 1 >= hd, unsigned: d = 0 wraps), of now for a use in the next (d = 1),
// of last for no later use linked (d = 0).
typedef struct {
    uint64_t ev, now, last;
} outcome64;

#if BP_SIMD_AVX2
// outcome64 of the links at p (lw bytes each), in vector registers.
__attribute__((target("avx2"))) static outcome64 outcome64_avx2(const void *p, uint32_t lw, uint32_t hd) {
    outcome64 r = {0, 0, 0};
    const __m256i zero = _mm256_setzero_si256();
    if (lw == 1) { // hd < R - 1 <= 255
        const __m256i one = _mm256_set1_epi8(1), h = _mm256_set1_epi8((char)hd);
        for (int k = 0; k < 2; k++) {
            const __m256i d = _mm256_loadu_si256((const __m256i *)((const uint8_t *)p + 32 * k));
            const __m256i x = _mm256_sub_epi8(d, one);
            r.ev |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(x, h), x)) << 32 * k;
            r.now |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(d, one)) << 32 * k;
            r.last |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(d, zero)) << 32 * k;
        }
    } else {
        const __m256i one = _mm256_set1_epi32(1), h = _mm256_set1_epi32((int)hd);
        for (int k = 0; k < 8; k++) {
            const __m256i d = _mm256_loadu_si256((const __m256i *)((const uint32_t *)p + 8 * k));
            const __m256i x = _mm256_sub_epi32(d, one);
            const __m256i e = _mm256_cmpeq_epi32(_mm256_max_epu32(x, h), x), nb = _mm256_cmpeq_epi32(d, one);
            r.ev |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(e)) << 8 * k;
            r.now |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(nb)) << 8 * k;
            r.last |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(d, zero))) << 8 * k;
        }
    }
    return r;
}

// occ_back of 8 back links p (not NIL) from slot j (vj), with R (vr) and pos_bits (sh).
__attribute__((target("avx2"))) static inline __m256i occ_back_avx2(__m256i p, __m256i vj, __m256i vr, __m128i sh) {
    const __m256i k = _mm256_srl_epi32(p, sh);
    const __m256i d = _mm256_sub_epi32(vj, k); // slot numbers < 2^31: signed compares are exact
    return _mm256_add_epi32(d, _mm256_and_si256(_mm256_cmpgt_epi32(k, vj), vr));
}

// back_in_range for the links [0, n / 8 * 8), 8 at a time; back_in_range does the rest.
__attribute__((target("avx2"))) static uint32_t back_in_range_avx2(const uint32_t *prev, uint32_t n, uint32_t j,
                                                                  uint32_t R, uint32_t pos_bits, uint32_t lo,
                                                                  uint32_t hi, uint32_t *out) {
    const __m256i vj = _mm256_set1_epi32((int)j), vr = _mm256_set1_epi32((int)R), nil = _mm256_set1_epi32(-1);
    const __m256i vlo = _mm256_set1_epi32((int)lo), span = _mm256_set1_epi32((int)(hi - lo));
    const __m128i sh = _mm_cvtsi32_si128((int)pos_bits);
    uint32_t m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i p = _mm256_loadu_si256((const __m256i *)(prev + i)), d = occ_back_avx2(p, vj, vr, sh);
        const __m256i x = _mm256_sub_epi32(d, vlo), in = _mm256_cmpeq_epi32(_mm256_max_epu32(x, span), span);
        const __m256i ok = _mm256_andnot_si256(_mm256_cmpeq_epi32(p, nil), in);
        uint32_t mask = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(ok));
        for (; mask; mask &= mask - 1) out[m++] = i + (uint32_t)__builtin_ctz(mask);
    }
    return m;
}

// slot_misses for the words [0, nw) of the miss bits (64 back links each), in vector registers.
__attribute__((target("avx2"))) static void misses_avx2(const uint32_t *prev, uint32_t nw, uint32_t j, uint32_t R,
                                                        uint32_t pos_bits, uint32_t keep, uint64_t *miss) {
    const __m256i vj = _mm256_set1_epi32((int)j), vr = _mm256_set1_epi32((int)R), nil = _mm256_set1_epi32(-1);
    const __m256i vk = _mm256_set1_epi32((int)keep);
    const __m128i sh = _mm_cvtsi32_si128((int)pos_bits);
    for (uint32_t w = 0; w < nw; w++) {
        uint64_t word = 0;
        for (uint32_t q = 0; q < 8; q++) {
            const __m256i p = _mm256_loadu_si256((const __m256i *)(prev + 64 * w + 8 * q));
            const __m256i far = _mm256_cmpgt_epi32(occ_back_avx2(p, vj, vr, sh), vk); // d < R: signed is exact
            const __m256i m = _mm256_or_si256(_mm256_cmpeq_epi32(p, nil), far);
            word |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m)) << 8 * q;
        }
        miss[w] = word;
    }
}

// The bits set in the one-byte users masks [0, n / 32 * 32), 32 at a time (a nibble table, then
// sums of eight bytes).
__attribute__((target("avx2"))) static uint64_t users_count_avx2(const uint8_t *users, uint32_t n) {
    const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2,
                                         2, 3, 2, 3, 3, 4);
    const __m256i low = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
    __m256i sum = zero;
    for (uint32_t i = 0; i + 32 <= n; i += 32) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(users + i));
        const __m256i c = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(x, low)),
                                          _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), low)));
        sum = _mm256_add_epi64(sum, _mm256_sad_epu8(c, zero));
    }
    uint64_t s4[4];
    _mm256_storeu_si256((__m256i *)s4, sum);
    return s4[0] + s4[1] + s4[2] + s4[3];
}
#endif

// The miss bits of a batch of n occurrences (slot j), from its back links, with its private bits
// cleared, and its (key, trainer) pairs counted for the hit rate.  Whoever links the batch writes
// them.  An occurrence misses when the step that fetches for its batch cannot find the key
// resident whatever happens before: new to the window, or last used more than keep = P + W + 1
// batches back, too far to have been kept (see "Residency" above; the planner sets the bits of the
// rarer misses it causes itself later).
static void slot_misses(const oracle_impl *o, slot *sl, uint32_t j, uint32_t n) {
    const uint32_t R = o->R, pos_bits = o->pos_bits, keep = o->P + o->W + 1, *prev = sl->prev, nw = (n + 63) / 64;
    uint32_t w = 0, i = 0;
    uint64_t acc = 0;
#if BP_SIMD_AVX2
    if (o->avx2) {
        w = n / 64, misses_avx2(prev, w, j, R, pos_bits, keep, sl->miss);
        if (o->users8) i = n / 32 * 32, acc = users_count_avx2(sl->users, i);
    }
#endif
    for (; w < nw; w++) {
        uint64_t word = 0;
        for (uint32_t k = 0; k < 64 && 64 * w + k < n; k++)
            word |= miss_bit(prev[64 * w + k], j, R, pos_bits, keep) << k;
        sl->miss[w] = word;
    }
    memset(sl->priv, 0, nw * sizeof *sl->priv);
    for (; i < n; i++) acc += users_bits(o->users8, slot_users(o, sl, i));
    sl->accesses = acc;
}

static uint32_t back_in_range(const uint32_t *prev, uint32_t n, uint32_t j, uint32_t R, uint32_t pos_bits, uint32_t lo,
                              uint32_t hi, uint32_t *out, int avx2) {
    uint32_t m = 0, i = 0;
#if BP_SIMD_AVX2
    if (avx2) i = n / 8 * 8, m = back_in_range_avx2(prev, i, j, R, pos_bits, lo, hi, out);
#endif
    (void)avx2;
    for (; i < n; i++) {
        const uint32_t d = occ_back(prev[i], j, R, pos_bits);
        out[m] = i, m += (prev[i] != NIL) & (d - lo <= hi - lo);
    }
    return m;
}

// The second pass of index_batch over the n occurrences of the batch in slot j, whose back links the
// dedupe wrote (and the gates of its new active records): clears the batch's next links and, if
// `link`, links each previous occurrence to the new one (else the planner's thread does:
// link_batch).  Whoever links the batch also writes its miss bits (slot_misses).  Whether a key is
// new to the window is not predictable (one in five), so the occurrences with a previous one are
// first listed without a branch (in bl_list: a plain compaction, which measured 0.04-0.09 ms per
// batch faster here than back_in_range over every distance), and the link stores, scattered over
// the ring, are asked for IDX_AHEAD_LINK occurrences ahead.  Not inlined into index_batch_impl,
// whose many live values would crowd its registers; `link` and the link width lw are constants at
// each call site (back_links).
#define BACK_FAR 0x80000000u // in back_tab: a link from that slot is far (link_far)
static inline __attribute__((always_inline)) void back_links_impl(oracle_impl *o, slot *sl, uint32_t j, uint32_t n,
                                                                  const int link, const uint32_t lw) {
    linkmap lk = o->lk;
    lk.lw = lw;
    next_clear(&lk, j, n); // no later occurrence yet
    if (!link) return;
    const uint32_t R = o->R, pos_bits = o->pos_bits, *sprev = sl->prev;
    uint32_t *back = o->back_tab, *lst = o->bl_list, no = 0;
    for (uint32_t k = 0; k < R; k++) {
        const uint32_t d = slot_back(k, j, R);
        back[k] = d | (link_far(&lk, d) ? BACK_FAR : 0);
    }
    o->far_n[j] = 0;
    for (uint32_t oc = 0; oc < n; oc++) lst[no] = oc, no += sprev[oc] != NIL;
    for (uint32_t k = 0; k < no; k++) {
        if (k + IDX_AHEAD_LINK < no) link_prefetch(&lk, occ_index(&lk, sprev[lst[k + IDX_AHEAD_LINK]]));
        const uint32_t oc = lst[k], pr = sprev[oc], b = back[pr >> pos_bits];
        link_prev(o, &lk, j, pr, oc, b & ~BACK_FAR, occ_index(&lk, pr), (b & BACK_FAR) != 0);
    }
    slot_misses(o, sl, j, n);
}
static __attribute__((noinline)) void back_links(oracle_impl *o, slot *sl, uint32_t j, uint32_t n, int link) {
    if (o->lk.lw == 1) link ? back_links_impl(o, sl, j, n, 1, 1) : back_links_impl(o, sl, j, n, 0, 1);
    else link ? back_links_impl(o, sl, j, n, 1, 4) : back_links_impl(o, sl, j, n, 0, 4);
}

// The distinct ids of a tiny table's column col[0, len) (its ids below 64: 7 of Criteo's 26
// tables), in order of first appearance, into out, padded with IDX_AHEAD_KM zeros; returns how
// many.  Within one trainer's slice a repeat only sets the users bit that the id's first appearance
// set, so the dedupe needs each id once, and a bitmap in a register finds them for less than the
// keymap word and users mask of every appearance cost (dedupe 1.51 -> 1.48 ms per batch; a bitmap
// in L1 for the tables up to 4096 ids made it slower, 1.50 -> 1.70: its branch is not predictable).
// The set of ids comes first, from a pass without branches or dependent steps (four bitmaps), so
// that the ordered scan can stop at the last first appearance, usually within the first few dozen
// ids of the 2048 (the scan to the end cost 0.8% of the dedupe per tiny table, 2.5 cycles an id).
#define TINY_IDS 64
static uint32_t tiny_distinct(const uint32_t *col, uint32_t len, uint32_t *out) {
    uint64_t b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    uint32_t s = 0;
    for (; s + 4 <= len; s += 4)
        b0 |= 1ull << col[s], b1 |= 1ull << col[s + 1], b2 |= 1ull << col[s + 2], b3 |= 1ull << col[s + 3];
    for (; s < len; s++) b0 |= 1ull << col[s];
    const uint64_t all = b0 | b1 | b2 | b3;
    uint32_t m = 0;
    uint64_t seen = 0;
    for (s = 0; seen != all; s++) {
        const uint64_t b = 1ull << col[s];
        if (!(seen & b)) seen |= b, out[m++] = col[s];
    }
    memset(out + m, 0, IDX_AHEAD_KM * sizeof *out);
    return m;
}

// Indexes batch number n_indexed (ids: (n, F)) into its slot.  The slot must be free.  `flat`,
// `k32` and `u8` (keymap kind, slot entry widths) are constants at each call site, so their tests
// leave the inner loop.
static inline __attribute__((always_inline)) int index_batch_impl(oracle_impl *o, const uint32_t *ids, uint32_t n,
                                                                   int link, const int flat, const int k32,
                                                                   const int u8) {
    uint32_t bnum = o->n_indexed, j = bnum % o->R;
    slot *sl = &o->slots[j];
    const uint32_t F = o->F, T = o->T, tag = j << o->pos_bits, pos_mask = o->pos_mask;
    const uint64_t *off = o->offset;
    uint64_t *km = o->km;
    uint32_t *skey32 = sl->key;
    uint64_t *skey64 = sl->key;
    uint8_t *susers8 = sl->users;
    uint64_t *susers64 = sl->users;
    uint32_t *sact = sl->act, *cols = o->cols;
    uint32_t *sprev = sl->prev;
    uint64_t *gate = o->act_gate;
    const uint32_t *maxid = o->card32, *tabs = o->tabs, nt = o->nt, fa = tabs[0], fz = tabs[nt - 1] + 1;
    sl->batch = bnum, sl->samples = n, sl->n = 0, sl->linked = link;
    uint32_t cnt = 0;
    o->ph_idx_t = bp_now();
    // Trainer by trainer, table by table (the occurrence order): the trainer's slice is first
    // transposed into cols (F, len) so that each table's ids are read in sequence; the hot ids of
    // one table are close together in the keymap, and the cold ones are prefetched ahead.
    for (uint32_t i = 0; i < T; i++) {
        uint32_t lo = (uint32_t)((uint64_t)i * n / T), hi = (uint32_t)((uint64_t)(i + 1) * n / T), len = hi - lo;
        uint32_t ld = COLS_LD(len);
        uint64_t bit = 1ull << i;
        uint32_t bad = 0;
        uint32_t s0 = 0;
        // The part's columns [fa, fz): every column without a split.
#if BP_SIMD_AVX2
        if (o->avx2_cols) s0 = transpose_avx2(ids + (size_t)lo * F, len, F, fa, fz, cols, ld, maxid, &bad);
#endif
        for (uint32_t s = s0; s < len; s++) {
            const uint32_t *row = ids + (size_t)(lo + s) * F;
            for (uint32_t f = fa; f < fz; f++) cols[(size_t)f * ld + s] = row[f], bad |= row[f] > maxid[f];
        }
        if (bad) return index_check(o, ids, n); // the first bad id in indexing order (trainer i's slice)
        for (uint32_t f = fa; f < fz; f++) memset(cols + (size_t)f * ld + len, 0, IDX_AHEAD_KM * sizeof *cols);
        phase_end(o->ph_idx, &o->ph_idx_t, ORACLE_PH_TRANSPOSE);
        // A repeat within the batch (the common case: three ids in four) is one masked compare of
        // the keymap word: active, and its latest occurrence in this batch's slot.
        const uint64_t rep_mask = KM_ACTIVE | (uint32_t)~pos_mask, rep_val = KM_ACTIVE | tag;
        for (uint32_t x = 0; x < nt; x++) { // the part's tables (every table without a split)
            const uint32_t f = tabs[x];
            const uint32_t *col = cols + (size_t)f * ld;
            const uint64_t base = off[f];
            uint64_t *kmb = flat ? km + base : NULL; // the table's part of the flat keymap
            uint32_t m = len;
            if (maxid[f] < TINY_IDS) m = tiny_distinct(col, len, o->dist), col = o->dist;
            const uint32_t *ahead = col + IDX_AHEAD_KM; // the padding reads id 0
            for (size_t s = 0; s < m; s++) {             // (size_t: addresses without extensions)
                uint32_t id = col[s];
                if (flat) __builtin_prefetch(&kmb[ahead[s]]);
                else hmap_prefetch(&o->hm, base + ahead[s]);
                uint64_t *w = flat ? &kmb[id] : hmap_upsert(&o->hm, base + id);
                uint64_t v = *w;
                if (__builtin_expect((v & rep_mask) == rep_val, 1)) { // laid out in line
                    if (u8) susers8[(uint32_t)v & pos_mask] |= (uint8_t)bit; // seen earlier in this batch
                    else susers64[(uint32_t)v & pos_mask] |= bit;
                    continue;
                }
                // A new occurrence: its back link, or for a key new to the window a fresh active
                // record, whose gate is the key's last eviction (the inactive word).  The free
                // list is a stack filled before the dedupe, so the record IDX_AHEAD_GATE takes
                // later is known, and its gate's line is asked for now.
                uint32_t a, pr;
                if (v & KM_ACTIVE) a = KM_ACT(v), pr = (uint32_t)v;
                else {
                    a = act_take(o), pr = NIL, gate[a] = v;
                    if (o->n_free > IDX_AHEAD_GATE)
                        __builtin_prefetch(&gate[o->act_free[o->n_free - IDX_AHEAD_GATE]], 1);
                }
                uint32_t oc = cnt++;
                if (k32) skey32[oc] = (uint32_t)(base + id);
                else skey64[oc] = base + id;
                if (u8) susers8[oc] = (uint8_t)bit;
                else susers64[oc] = bit;
                sact[oc] = a, sprev[oc] = pr;
                *w = KM_ACTIVE | (uint64_t)a << 32 | (tag | oc);
            }
        }
        phase_end(o->ph_idx, &o->ph_idx_t, ORACLE_PH_DEDUPE);
    }
    back_links(o, sl, j, cnt, link);
    sl->n = cnt;
    if (cnt > o->occ_hw) o->occ_hw = cnt;
    phase_end(o->ph_idx, &o->ph_idx_t, ORACLE_PH_BACKLINK);
    return 0;
}

// With two threads: links the occurrences of batch b (indexed, published, not linked by the
// indexer) to the previous occurrences of their keys, in the planner's thread, which is the one
// that reads the links.  This moves a third of the indexer's work to the planner when the indexer
// is the slower half (without capacity pressure it is; with much pressure the planner is, and the
// indexer keeps the links: ORACLE_LINKS_AUTO decides batch by batch).  Links into batches before
// lo are skipped: the planner no longer reads them, and their slots may be retired and refilled
// by the indexer meanwhile (retire_batch then sees, in the keymap, that the key has a later
// occurrence).
static void link_batch(oracle_impl *o, uint32_t b, uint32_t lo) {
    const uint32_t R = o->R, j = b % R, pos_bits = o->pos_bits;
    slot *sl = &o->slots[j];
    const uint32_t *sprev = sl->prev, n = sl->n, dmax = b - lo; // links: b - lu <= dmax
    const linkmap lk = o->lk;
    BP_ASSERT(sl->batch == b && lo <= b);
    o->far_n[j] = 0;
    for (uint32_t oc = 0; oc < n; oc++) {
        if (oc + IDX_AHEAD_LINK < n) {
            uint32_t p2 = sprev[oc + IDX_AHEAD_LINK];
            if (p2 != NIL) link_prefetch(&lk, occ_index(&lk, p2));
        }
        uint32_t pr = sprev[oc];
        if (pr == NIL) continue;
        const uint32_t d = occ_back(pr, j, R, pos_bits);
        if (d > dmax) continue; // b - lu > dmax: no longer read
        link_prev(o, &lk, j, pr, oc, d, occ_index(&lk, pr), link_far(&lk, d));
    }
    slot_misses(o, sl, j, n);
}

// Links batch n_linked (link_batch, into the batches from step - 1 on), or counts it where the
// indexer linked it, and moves n_linked past it.  (The planner's thread.)
static void link_next(oracle_impl *o) {
    uint32_t b = o->n_linked, s = o->step;
    if (o->slots[b % o->R].linked) {
        o->st.linked_indexer++;
    } else {
        double t0 = bp_now();
        link_batch(o, b, s ? s - 1 : 0);
        o->ph_plan[ORACLE_PH_LINK] += bp_now() - t0;
    }
    o->n_linked = b + 1;
}

static int index_batch(oracle_impl *o, const uint32_t *ids, uint32_t n, int link) {
    int v = o->km_flat << 2 | o->key32 << 1 | o->users8;
    switch (v) {
    case 0: return index_batch_impl(o, ids, n, link, 0, 0, 0);
    case 1: return index_batch_impl(o, ids, n, link, 0, 0, 1);
    case 2: return index_batch_impl(o, ids, n, link, 0, 1, 0);
    case 3: return index_batch_impl(o, ids, n, link, 0, 1, 1);
    case 4: return index_batch_impl(o, ids, n, link, 1, 0, 0);
    case 5: return index_batch_impl(o, ids, n, link, 1, 0, 1);
    case 6: return index_batch_impl(o, ids, n, link, 1, 1, 0);
    default: return index_batch_impl(o, ids, n, link, 1, 1, 1);
    }
}

#define RETIRE_AHEAD 16

// With one thread and the flat keymap the planner retires keys where it evicts them (step (a),
// retire_key); otherwise the indexer does, when their last held batch leaves the ring.
static inline int planner_retires(const oracle_impl *o) { return o->threads == 1 && o->km_flat; }

static inline uint64_t gate_of(uint32_t owner, uint32_t evict_iter) {
    return (uint64_t)owner << 32 | ((uint64_t)evict_iter + 1);
}

// The keymap word of key, whose active record is a (asserted).
static inline uint64_t *km_active(oracle_impl *o, uint64_t key, uint32_t a) {
    uint64_t *w = o->km_flat ? &o->km[key] : hmap_find(&o->hm, key);
    BP_ASSERTF(w && (*w & KM_ACTIVE) && KM_ACT(*w) == a, "oracle: keymap of key %llu", (unsigned long long)key);
    return w;
}

// Frees active record a, whose key's keymap word w becomes its last eviction g (the inactive
// encoding).
static inline void retire_key(oracle_impl *o, uint64_t *w, uint32_t a, uint64_t g) {
    *w = g;
    o->act_free[o->n_free++] = a;
}

// Frees the active records of keys whose last held occurrence is in retired batch bnum.
static void retire_batch(oracle_impl *o, uint32_t bnum) {
    uint32_t j = bnum % o->R, tag = j << o->pos_bits;
    slot *sl = &o->slots[j];
    BP_ASSERT(sl->batch == bnum);
    if (planner_retires(o)) { // the planner retired them at step bnum + 1
        sl->n = 0;
        return;
    }
    // The occurrences with no later use linked when the planner completed the batch: it listed
    // them at the front of the slot's arrays (n_last: position, key, active index, write-back
    // trainer), read here in sequence, and their scattered targets (keymap words) are prefetched a
    // few ahead.  With two threads a later occurrence may not be linked yet (link_batch): the
    // keymap word, which names the key's latest occurrence, is the test.  The gate is the
    // planner's eviction of the batch.
    const uint32_t *last = sl->prev, m = sl->n_last;
    BP_ASSERT(m <= sl->n);
    for (uint32_t k = 0; k < m; k++) {
        if (k + RETIRE_AHEAD < m) {
            if (o->km_flat) __builtin_prefetch(&o->km[slot_key(o, sl, k + RETIRE_AHEAD)], 1);
            else hmap_prefetch(&o->hm, slot_key(o, sl, k + RETIRE_AHEAD));
        }
        const uint32_t oc = last[k], a = sl->act[k];
        uint64_t *w = km_active(o, slot_key(o, sl, k), a);
        if ((uint32_t)*w != (tag | oc)) { // a later occurrence, not linked yet
            BP_ASSERT(o->threads == 2);
            continue;
        }
        retire_key(o, w, a, gate_of((uint32_t)slot_users(o, sl, k), bnum));
    }
    sl->n = 0;
}

// Retires what the planner has released, then indexes one batch.  (Either thread.)
static int indexer_run(oracle_impl *o, const uint32_t *ids, uint32_t n, uint32_t retired, int link) {
    double t0 = bp_now();
    while (o->retire_done < retired) retire_batch(o, o->retire_done++);
    o->ph_idx[ORACLE_PH_RETIRE] += bp_now() - t0;
    BP_ASSERT(o->n_indexed < o->R + o->retire_done);
    return index_batch(o, ids, n, link);
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void publish_mem(oracle_impl *o) {
    memcpy(o->ph_pub, o->ph_idx, sizeof o->ph_pub);
    o->pub_acts = o->act_hw, o->pub_occ = o->occ_hw;
    const uint64_t hm_now = o->hm.cap + o->hm.old_cap + o->hm.next_touched / sizeof(hent);
    o->pub_hm_cap = BP_MAX(o->pub_hm_cap, hm_now); // a high-water mark: the old table's free lowers it

}

static void *indexer_thread(void *arg) {
    oracle_impl *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && !(o->in_count > 0 && o->n_indexed < o->R + o->n_retired && !o->idx_err)) {
            // Waiting for input or for ring space: the planner's thread (which also pushes) lags.
            if (!o->idx_err) o->idx_links = 1;
            pthread_cond_wait(&o->cv, &o->mu);
        }
        if (o->stop) break;
        inbatch in = o->inq[o->in_head % INQ];
        uint32_t retired = o->n_retired;
        int link = o->links == ORACLE_LINKS_INDEXER || (o->links == ORACLE_LINKS_AUTO && o->idx_links);
        pthread_mutex_unlock(&o->mu);
        double c0 = thread_cpu();
        int rc = indexer_run(o, in.ids, in.n, retired, link);
        double dc = thread_cpu() - c0;
        if (rc) snprintf(o->idx_msg, sizeof o->idx_msg, "%s", bp_errmsg(rc));
        pthread_mutex_lock(&o->mu);
        if (rc) o->idx_err = rc;
        else o->n_indexed++;
        publish_mem(o);
        o->cpu_index += dc;
        o->in_head++, o->in_count--;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Planner

// 1 when occurrence oc of batch u (slot j) has no next use in (u, H].
static inline int no_use_until(const linkmap *l, uint32_t u, uint32_t j, uint32_t oc, uint32_t H) {
    const uint32_t d = next_d(l, j, oc);
    return d == 0 || u + d > H;
}

// Prefetch distance (occurrences) of the planner's scans: the gate word of a key that is likely to be
// read or written.
#define AHEAD_GATE 16
#define EVICT_AHEAD 16 // pressure evictions: occurrence fields at EVICT_AHEAD, then the gate at half

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Sorts x[0, n) ascending: insertion for the few entries of one group, qsort beyond.
static void sort_small(uint64_t *x, uint32_t n) {
    if (n > 32) {
        qsort(x, n, sizeof *x, cmp_u64);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        uint64_t e = x[i];
        uint32_t k = i;
        for (; k > 0 && x[k - 1] > e; k--) x[k] = x[k - 1];
        x[k] = e;
    }
}

// Lazy buckets.  The buckets are read only under capacity pressure, from the farthest next use
// down, and most steps have none; a push per use of every resident key not needed soon was the
// planner's largest cost (docs/oracle.md).  So no step pushes: a bucket is brought up to date when
// pressure reaches its level, and bucket_fill makes exactly the entries that eager pushes would
// have made.  The push for a key kept resident (shared) after its use lu with next use v > lu + 1 +
// P would happen at step lu + 1, in step order and within a step in batch lu's occurrence order;
// the key then stays resident until v unless a pressure eviction pops that entry (and leaves it
// not resident).  So at step s the bucket of v holds the occurrences of batch v whose previous
// occurrence (the back link of the dedupe) lies in a batch lu <= s - 1 and whose key is resident
// (shared), in (lu, position in lu) order.
//
// The first fill of a bucket (bucket_upto 0) scans batch v's back links for those with lu <= s - 1.
// A bucket filled up to step s' holds the entries with lu < s', so a later fill at step s appends
// those with s' <= lu <= s - 1.  Pressure walks down ~30 levels a step, each needing the few
// entries whose previous use is the batch just completed; a scan of the batch per level and step
// cost 4 ms per step here.  So a scan also groups by d = v - lu the occurrences with d among the
// next distances below the ones it takes (grp), and later fills take their groups, each in the order of
// the position in lu (a short sort), until they need a distance below the groups, which takes
// another scan.  A level is reached for about as many steps as pressure walks levels, so the span
// is the levels the last step walked and a quarter more (grp_span: 64 to GRP_SPAN_MAX; ~210 at W =
// 400 here): each distance more takes the occurrences that lie that far back into the groups.
// A slot's groups hold at most GRP_CAP entries, an eighth of its batch's occurrences (8 bytes
// each: one byte per occurrence of the ring at most), the smallest distances dropped.  Pops take
// the last entries, and between two fills of a level no pop touches it, so the order is the
// pushes' (after bucket_lone_last's partition of a level evicted in part, which the reference
// planner makes at the same point, on the same order).  Entries are sorted by (lu, position in lu)
// as an occurrence id would order them (R - d < 2^slot_bits).
#define GRP_SPAN_MIN 64
#define GRP_SPAN_MAX 512
#define GRP_CAP(n) BP_MAX(16u, (uint32_t)((n) / 8)) // group entries of a batch of n occurrences, at most
static void bucket_fill(oracle_impl *o, uint32_t v, uint32_t s) {
    const uint32_t R = o->R, jv = v % R, pos_bits = o->pos_bits, pos_mask = o->pos_mask;
    const slot *sv = &o->slots[jv];
    const uint32_t n = sv->n, dmin = v - s + 1; // v - lu for lu = s - 1: smaller distances are uses in s..v-1
    const uint32_t upto = o->bucket_upto[jv], dtop = upto ? v - upto : R - 1; // new entries: dmin <= d <= dtop
    const uint32_t *sprev = sv->prev;
    const uint64_t *smiss = sv->miss;
    uint32_t *off = &o->grp_off[(size_t)jv * o->grp_stride];
    BP_ASSERT(sv->batch == v && v > s && upto < s && dmin >= o->P + 1); // P + 1: demote's fill
    o->bucket_upto[jv] = s;
    uint32_t m = 0;
    if (upto == 0 || dmin < o->grp_lo[jv]) {
        // A scan: it takes d in [dmin, dtop] and groups [gl, dmin): first the positions with d in
        // [gl, dtop] (in vector registers), then those without a branch (whether one is taken or
        // grouped is not predictable).
        const uint32_t span = o->grp_span, gh = dmin;
        const uint32_t gl = BP_MIN(dmin, BP_MAX(o->P + 2, dmin > span ? dmin - span : 0)); // dmin: demote's fill
        if (o->lz_cap < n + 1) {
            o->lz_cap = n + 1;
            o->lz_tmp = bp_xrealloc(o->lz_tmp, (size_t)o->lz_cap * sizeof *o->lz_tmp);
        }
        if (o->gtmp_cap < n + 1) {
            o->gtmp_cap = n + 1;
            o->gtmp = bp_xrealloc(o->gtmp, (size_t)o->gtmp_cap * sizeof *o->gtmp);
        }
        uint64_t *lz = o->lz_tmp, *gt = o->gtmp;
        uint32_t *in = o->cand, ng = 0; // (the fetch step's scratch, free here)
        const uint32_t nin = back_in_range(sprev, n, jv, R, pos_bits, gl, dtop, in, o->avx2);
        for (uint32_t k = 0; k < nin; k++) {
            const uint32_t oc = in[k], pr = sprev[oc], d = occ_back(pr, jv, R, pos_bits), later = d < gh;
            // resident now: kept after lu and not evicted since (the miss bit, above)
            lz[m] = (uint64_t)((R - d) << pos_bits | (pr & pos_mask)) << 32 | oc;
            m += !later & !occ_bit(smiss, oc);
            gt[ng] = (uint64_t)(d - gl) << 32 | oc;
            ng += later;
        }
        memset(off, 0, (span + 1) * sizeof *off);
        for (uint32_t k = 0; k < ng; k++) off[(gt[k] >> 32) + 1]++;
        for (uint32_t d = 0; d < span; d++) off[d + 1] += off[d];
        // At most GRP_CAP(n) entries (the memory bound): the smallest distances, needed last, are
        // dropped first.
        uint32_t t = 0;
        while (off[span] - off[t] > GRP_CAP(n)) t++;
        const uint32_t base = off[t], span2 = span - t, kept = off[span] - base;
        for (uint32_t x = 0; x <= span2; x++) off[x] = off[x + t] - base;
        if (kept > o->grp_cap[jv]) {
            o->grp_cap[jv] = BP_MIN(GRP_CAP(n), BP_MAX(kept, 2 * o->grp_cap[jv]));
            o->grp[jv] = bp_xrealloc(o->grp[jv], (size_t)o->grp_cap[jv] * sizeof **o->grp);
        }
        uint64_t *g = o->grp[jv];
        for (uint32_t k = 0; k < ng; k++) { // in order of the position in v within each group
            const uint32_t oc = (uint32_t)gt[k], x = (uint32_t)(gt[k] >> 32);
            if (x >= t) g[off[x - t]++] = (uint64_t)(sprev[oc] & pos_mask) << 32 | oc;
        }
        for (uint32_t d = span2; d > 0; d--) off[d] = off[d - 1]; // the scatter moved each start to the next
        off[0] = 0;
        o->grp_lo[jv] = gl + t, o->grp_hi[jv] = gh;
        if (m > 1) qsort(lz, m, sizeof *lz, cmp_u64);
    } else { // the groups of d from dtop down to dmin: lu = v - d from upto to s - 1, in order
        const uint32_t gl = o->grp_lo[jv];
        const uint64_t *g = o->grp[jv];
        BP_ASSERT(dmin >= gl && dtop < o->grp_hi[jv]);
        for (uint32_t d = dtop; d >= dmin; d--) {
            const uint32_t m0 = m, k0 = off[d - gl], k1 = off[d - gl + 1];
            if (o->lz_cap < m + (k1 - k0)) {
                o->lz_cap = BP_MAX(m + (k1 - k0), 2 * o->lz_cap);
                o->lz_tmp = bp_xrealloc(o->lz_tmp, (size_t)o->lz_cap * sizeof *o->lz_tmp);
            }
            for (uint32_t k = k0; k < k1; k++) {
                const uint32_t oc = (uint32_t)g[k];
                if (k + 8 < k1) __builtin_prefetch(&smiss[(uint32_t)g[k + 8] >> 6]);
                o->lz_tmp[m] = (uint64_t)((R - d) << pos_bits | (uint32_t)(g[k] >> 32)) << 32 | oc;
                m += !occ_bit(smiss, oc);
            }
            sort_small(o->lz_tmp + m0, m - m0);
        }
    }
    const uint32_t j = jv, n0 = o->bucket_n[j];
    if (n0 + m > o->bucket_cap[j]) {
        o->bucket_cap[j] = BP_MAX(n0 + m, 2 * o->bucket_cap[j]);
        o->bucket[j] = bp_xrealloc(o->bucket[j], (size_t)o->bucket_cap[j] * sizeof **o->bucket);
    }
    for (uint32_t k = 0; k < m; k++) {
        uint32_t hi = (uint32_t)(o->lz_tmp[k] >> 32), oc = (uint32_t)o->lz_tmp[k], d = R - (hi >> pos_bits);
        // Only an entry last used at s - 1 reads it (evict_pressure); demote's fill to s - 1 (P = 0)
        // reads a stale index for those last used at s - 2, which nothing uses.
        uint32_t sync = d == dmin ? o->lz_sync[hi & pos_mask] : 0;
        o->bucket[j][n0 + k] = (bentry)sync << 32 | d << pos_bits | oc;
    }
    o->bucket_n[j] = n0 + m;
}

static uint32_t rr_next(uint32_t *rr, uint32_t T) {
    uint32_t r = *rr;
    *rr = r + 1 == T ? 0 : r + 1;
    return r;
}

static void private_push(oracle_impl *o, uint64_t key, uint16_t tr) {
    if (o->pv_n == o->pv_cap) {
        o->pv_cap = o->pv_cap ? 2 * o->pv_cap : 1024;
        o->pv_key = bp_xrealloc(o->pv_key, o->pv_cap * sizeof *o->pv_key);
        o->pv_tr = bp_xrealloc(o->pv_tr, o->pv_cap * sizeof *o->pv_tr);
    }
    o->pv_key[o->pv_n] = key, o->pv_tr[o->pv_n++] = tr;
}

// Record t = s - 1's sync-later entries go into group order (plan.h) by a counting sort
// (sort_sync) whose groups and counts are kept by the steps that append or change entries:
// sync_note for entry i appended in group b, sync_move when it changes group.  The groups:
// gradients of t by deadline (t + 1 + b), then restatements of older gradients (all due at t + 1)
// from the newest to the oldest (b = span + t - 1 - the gradient's iteration, span = sync_span).
static inline uint32_t sync_span(const oracle_impl *o) { return o->P + o->W + 2; } // groups: 2 span
static void sync_room(oracle_impl *o, uint32_t cap) {
    if (cap > o->sync_bk_cap) {
        o->sync_bk_cap = cap;
        o->sync_bk = bp_xrealloc(o->sync_bk, (size_t)cap * sizeof *o->sync_bk);
    }
}
static inline void sync_note(oracle_impl *o, uint32_t i, uint32_t b) {
    BP_ASSERT(b < 2 * sync_span(o));
    o->sync_bk[i] = b, o->sync_cnt[b + 1]++;
}
static inline void sync_move(oracle_impl *o, uint32_t i, uint32_t b) {
    o->sync_cnt[o->sync_bk[i] + 1]--;
    sync_note(o, i, b);
}

// Evicts the shared key of bucket entry e (next use v) after iteration s-1 under capacity
// pressure (record s-1).  Its gradient of e.last_use is still pending (deadline v-1 >= s): the
// owner writes it back after s once that reduction is applied, so the deadline becomes s.  (A
// demotion with P = 0 evicts a key next used at v = s, whose reduction is due at s-1: it is
// written back at the end of s-1, as any eviction.)
static void evict_pressure(oracle_impl *o, bentry e, uint32_t v, uint32_t s, plan *prev) {
    const slot *sv = &o->slots[v % o->R];
    uint32_t pos = (uint32_t)e & o->pos_mask, last_use = v - ((uint32_t)e >> o->pos_bits);
    uint32_t sync_idx = (uint32_t)(e >> 32);
    uint32_t a = sv->act[pos];
    uint64_t key = slot_key(o, sv, pos);
    BP_ASSERT(sv->batch == v && !occ_bit(sv->miss, pos) && s >= 1 && v >= s && last_use + 1 < v);
    uint32_t owner = rr_next(&o->rr_owner, o->T);
    if (last_use == s - 1) {
        BP_ASSERT(prev->sync_later[sync_idx].key == key);
        prev->sync_later[sync_idx].deadline = s;
        sync_move(o, sync_idx, 0);
    } else if (v - 1 > s) {
        plan_add_sync_later(prev, (plan_sync){key, last_use, s});
        sync_room(o, prev->cap_sync_later);
        sync_note(o, prev->n_sync_later - 1, sync_span(o) + (s - 2 - last_use));
        o->st.sync_restated++;
    }
    plan_add_evict(prev, (plan_evict){key, (uint16_t)owner, v > s ? PLAN_WB_NEXT : 0});
    occ_miss(sv, pos), o->act_gate[a] = gate_of(owner, s - 1);
    o->shared_count--;
    o->st.evictions++, o->st.evictions_pressure++;
}

// Belady's ties: every key of bucket v is next used at v, and evicting any one costs one fetch.
// With T > 1, one used at v by one trainer and not again in the window comes back private (a slot
// on that trainer) where another comes back shared (a slot on every trainer), so when the bucket
// is not evicted whole, those keys go first: a stable partition puts them at its end, popped
// first.  (With T = 1 both take the one trainer's slot, and the order is left as it was.)
// "Not again" is judged on the horizon H of this step (a link beyond it reads as none), so that
// the plan does not depend on how far the input was indexed ahead.  The reference planner does
// the same.  Returns how many keys it put at the end.
static uint32_t bucket_lone_last(oracle_impl *o, uint32_t v, uint32_t H) {
    const uint32_t j = v % o->R, n = o->bucket_n[j];
    const slot *sv = &o->slots[j];
    bentry *bk = o->bucket[j];
    BP_ASSERT(sv->batch == v);
    if (n == 0) return 0; // (a part of a split planner with nothing at this level)
    if (o->part_cap < n) {
        o->part_cap = BP_MAX(n, 2 * o->part_cap);
        o->part_tmp = bp_xrealloc(o->part_tmp, (size_t)o->part_cap * sizeof *o->part_tmp);
    }
    uint32_t k = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t pos = (uint32_t)bk[i] & o->pos_mask;
        if (users_bits(o->users8, slot_users(o, sv, pos)) == 1 && no_use_until(&o->lk, v, j, pos, H))
            o->part_tmp[m++] = bk[i];
        else bk[k++] = bk[i];
    }
    memcpy(bk + k, o->part_tmp, (size_t)m * sizeof *bk);
    return m;
}

// The candidates of step s (part_tmp; their count per trainer in dm_cand; returns how many): the
// bucket of v = s+P brought up to date, less the keys demoted at this step already (miss bit).
static uint32_t dm_collect(oracle_impl *o, uint32_t s, uint32_t H) {
    const uint32_t T = o->T, v = s + o->P, jv = v % o->R, upto = o->P ? s : s - 1;
    const slot *sv = &o->slots[jv];
    if (o->bucket_upto[jv] < upto) bucket_fill(o, v, upto);
    const uint32_t n = o->bucket_n[jv];
    const bentry *bk = o->bucket[jv];
    if (o->part_cap < n) {
        o->part_cap = BP_MAX(n, 2 * o->part_cap);
        o->part_tmp = bp_xrealloc(o->part_tmp, (size_t)o->part_cap * sizeof *o->part_tmp);
    }
    memset(o->dm_cand, 0, T * sizeof *o->dm_cand);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t pos = (uint32_t)bk[i] & o->pos_mask;
        const uint64_t users = slot_users(o, sv, pos);
        if (!occ_bit(sv->miss, pos) && users_bits(o->users8, users) == 1 && no_use_until(&o->lk, v, jv, pos, H))
            o->part_tmp[m++] = bk[i], o->dm_cand[__builtin_ctzll(users)]++;
    }
    return m;
}

// Demotes dm_take[i] of each trainer i's candidates (the first m of part_tmp): its last ones.
static void dm_apply(oracle_impl *o, uint32_t s, uint32_t m, plan *prev, plan *cur) {
    const uint32_t v = s + o->P;
    const slot *sv = &o->slots[v % o->R];
    for (uint32_t i = m; i-- > 0;) {
        const bentry e = o->part_tmp[i];
        const uint32_t pos = (uint32_t)e & o->pos_mask, a = sv->act[pos];
        const uint32_t tr = (uint32_t)__builtin_ctzll(slot_users(o, sv, pos));
        if (!o->dm_take[tr]) continue;
        o->dm_take[tr]--;
        evict_pressure(o, e, v, s, prev);
        const uint64_t g = o->act_gate[a];
        plan_add_fetch(cur, (plan_fetch){slot_key(o, sv, pos), v, (uint32_t)g - 1, (uint16_t)tr, (uint16_t)(g >> 32),
                                         PLAN_PRIVATE});
        sv->priv[pos >> 6] |= 1ull << (pos & 63);
        o->priv_count[tr]++;
        o->st.fetches++, o->st.fetches_private++, o->st.hits--, o->st.demotions++;
    }
}

// Water-filling over demotion candidates: each demotion of a key of trainer i takes a row from
// every trainer's shared count and gives one to i's private count, so the next goes to the
// trainer with the fewest private keys (with those taken; then the lowest index) that has a
// candidate left (at most cand[i]), until every trainer holds at most C or none is left.  Sets
// take[i] and returns the most any trainer then holds.
static uint64_t water_fill(uint32_t T, uint64_t shared, const uint64_t *priv, const uint64_t *cand, uint64_t *take,
                           uint64_t C) {
    uint64_t worst;
    memset(take, 0, T * sizeof *take);
    for (;;) {
        worst = 0;
        uint32_t pick = T;
        for (uint32_t i = 0; i < T; i++) {
            worst = BP_MAX(worst, shared + priv[i] + take[i]);
            if (take[i] < cand[i] && (pick == T || priv[i] + take[i] < priv[pick] + take[pick])) pick = i;
        }
        if (worst <= C || pick == T) return worst;
        take[pick]++, shared--;
    }
}

// The records step s works on: record s-1 being completed and record s collecting fetches.
static inline plan *rec_prev(oracle_impl *o, uint32_t s) { return &o->rec[(s + 1) & 1]; }
static inline plan *rec_cur(oracle_impl *o, uint32_t s) { return &o->rec[s & 1]; }

// Capacity over the parts of a planner split by tables (one part when it is not): a trainer holds
// the shared keys of every part and its own private keys of each, so the counts add up.  The
// pressure functions below take the parts in a fixed order; where they choose among the keys of
// several parts, the choice is the one a single list would give with the parts' lists one after
// the other (part 0 first), and each part's own order kept.  With one part that is the order of
// the reference planner.
static uint64_t parts_shared(oracle_impl *const *ps, int np) {
    uint64_t n = 0;
    for (int q = 0; q < np; q++) n += ps[q]->shared_count;
    return n;
}
static uint64_t parts_private(oracle_impl *const *ps, int np, uint64_t *priv, uint32_t *who) {
    const uint32_t T = ps[0]->T;
    uint64_t m = 0;
    *who = 0;
    for (uint32_t i = 0; i < T; i++) {
        uint64_t x = 0;
        for (int q = 0; q < np; q++) x += ps[q]->priv_count[i];
        if (priv) priv[i] = x;
        if (x > m) m = x, *who = i;
    }
    return m;
}

// Splits take[i] demotions of trainer i over the parts' candidates (dm_cand, from dm_collect): a
// single list takes its last ones, so the last part's first.  Into each part's dm_take.
static void parts_take(oracle_impl *const *ps, int np, const uint64_t *take) {
    for (uint32_t i = 0; i < ps[0]->T; i++) {
        uint64_t left = take[i];
        for (int q = np - 1; q >= 0; q--) {
            const uint64_t k = BP_MIN(left, ps[q]->dm_cand[i]);
            ps[q]->dm_take[i] = k, left -= k;
        }
        BP_ASSERT(left == 0);
    }
}

// The candidates of every part (dm_collect; m[q] each), their counts per trainer summed in cand.
static void parts_collect(oracle_impl *const *ps, int np, uint32_t s, uint32_t H, uint32_t *m, uint64_t *cand) {
    const uint32_t T = ps[0]->T;
    memset(cand, 0, T * sizeof *cand);
    for (int q = 0; q < np; q++) {
        m[q] = dm_collect(ps[q], s, H);
        for (uint32_t i = 0; i < T; i++) cand[i] += ps[q]->dm_cand[i];
    }
}

// Demotions (T > 1), as in the reference planner (oracle_ref.c, demote): when Belady has nothing
// left to evict and a trainer is still over capacity, shared keys next used at v = s+P by one
// trainer, and not again in view, are evicted after s-1 and fetched back at s private to that
// trainer, the fewest that bring every trainer within C (water-filling on the counts).  The
// candidates are the bucket of v brought up to date to the keys last used at s-1 (P >= 1; with P
// = 0 a key used at s-1 and s is synchronised now, so to s-2): bucket_fill's order is the eager
// pushes', so the planners take the same keys.  Nothing reads that bucket after this step.
// Returns 0, or the most any trainer still needs after every useful demotion (nothing is changed).
static uint64_t demote(oracle_impl *const *ps, int np, uint32_t s, uint32_t H) {
    const uint32_t T = ps[0]->T;
    uint32_t m[2], who;
    uint64_t cand[ORACLE_MAX_TRAINERS], priv[ORACLE_MAX_TRAINERS], take[ORACLE_MAX_TRAINERS];
    parts_collect(ps, np, s, H, m, cand);
    parts_private(ps, np, priv, &who);
    const uint64_t worst = water_fill(T, parts_shared(ps, np), priv, cand, take, ps[0]->C);
    if (worst > ps[0]->C) return worst;
    parts_take(ps, np, take);
    for (int q = 0; q < np; q++) dm_apply(ps[q], s, m[q], rec_prev(ps[q], s), rec_cur(ps[q], s));
    return 0;
}

// Whether the key of occurrence oc of batch q > s+P is resident and shared at step s: from its
// first use after s+P (back links), the previous one lu is in s..s+P (resident: shared unless
// fetched private for lu), or before s (resident unless its miss bit says otherwise), or none.
static int ahead_shared(const oracle_impl *o, uint32_t s, uint32_t q, uint32_t oc) {
    for (;;) {
        const uint32_t jq = q % o->R, pr = o->slots[jq].prev[oc];
        if (pr == NIL) return 0;
        const uint32_t lu = q - occ_back(pr, jq, o->R, o->pos_bits), pos = pr & o->pos_mask;
        if (lu > s + o->P) {
            q = lu, oc = pos;
            continue;
        }
        return lu >= s ? !occ_bit(o->slots[lu % o->R].priv, pos) : !occ_bit(o->slots[jq].miss, oc);
    }
}

// demote_ahead's view of step s1 from one part's keys: each key of s1..u1 = s1+P at its last use
// there, counted as shared (sh), private to trainer i (pv[i]), and as a candidate of step s1's
// own demotions (c1[i]).
static void ahead_view(const oracle_impl *o, uint32_t s, uint32_t s1, uint32_t H, uint64_t *sh, uint64_t *pv,
                       uint64_t *c1) {
    const uint32_t P = o->P, R = o->R, u1 = s1 + P;
    for (uint32_t q = s1; q <= u1; q++) {
        const uint32_t jq = q % R;
        const slot *sq = &o->slots[jq];
        for (uint32_t oc = 0; oc < sq->n; oc++) {
            if (!no_use_until(&o->lk, q, jq, oc, u1)) continue;
            const uint64_t users = slot_users(o, sq, oc);
            const uint32_t tr = (uint32_t)__builtin_ctzll(users);
            if (q <= s + P) { // resident now
                if (occ_bit(sq->priv, oc)) pv[tr]++;
                else (*sh)++;
                continue;
            }
            const uint32_t pr = sq->prev[oc], d = pr == NIL ? q : occ_back(pr, jq, R, o->pos_bits);
            const uint32_t pb = q - d > s ? q - d : 0; // the previous use from s+1 on, or 0
            const int lone = users_bits(o->users8, users) == 1 && no_use_until(&o->lk, q, jq, oc, H);
            if (ahead_shared(o, s, q, oc)) (*sh)++, c1[tr] += lone && pb + P < q;
            else if (pb < s1 && lone) pv[tr]++; // fetched for its one use in s1..u1: private
            else (*sh)++;
        }
    }
}

// Demotions ahead, as in the reference planner (oracle_ref.c, demote_ahead): where even a view of
// a step s1 in s+1..s+P at best for it (from what H(s) shows: keys not resident come back private
// where they can, and the steps s+1..s1 demote all they could) leaves a trainer over C, step s
// demotes keys of s+P now, beyond its own need, as many of each trainer's as water-filling takes
// beyond the later steps' candidates.  What is resident at a batch beyond s+P follows from the
// back links (ahead_shared); the previous use from s+1 on, from the back link too.  Cheap to rule
// out: batches s1..s1+P with at most C distinct keys in all cannot run short.
static void demote_ahead(oracle_impl *const *ps, int np, uint32_t s, uint32_t H) {
    const oracle_impl *o = ps[0];
    const uint32_t T = o->T, P = o->P, R = o->R;
    if (T < 2 || P < 1 || o->W < P || s < 1 || s + 1 + P > H) return;
    uint64_t ext[ORACLE_MAX_TRAINERS] = {0}, n_ext = 0, take[ORACLE_MAX_TRAINERS], both[ORACLE_MAX_TRAINERS];
    uint64_t cand[ORACLE_MAX_TRAINERS];
    uint32_t m[2] = {0, 0};
    int collected = 0;
    for (uint32_t s1 = s + 1; s1 <= s + P && s1 + P <= H; s1++) {
        const uint32_t u1 = s1 + P;
        uint64_t sum = 0;
        for (int x = 0; x < np; x++)
            for (uint32_t q = s1; q <= u1; q++) sum += ps[x]->slots[q % R].n;
        if (sum <= o->C) continue;
        uint64_t sh = 0, pv[ORACLE_MAX_TRAINERS] = {0}, c1[ORACLE_MAX_TRAINERS] = {0};
        for (int x = 0; x < np; x++) ahead_view(ps[x], s, s1, H, &sh, pv, c1);
        sh -= n_ext;
        for (uint32_t i = 0; i < T; i++) pv[i] += ext[i];
        if (water_fill(T, sh, pv, c1, take, o->C) <= o->C) continue; // step s1 manages on its own
        if (!collected) parts_collect(ps, np, s, H, m, cand), collected = 1;
        for (uint32_t i = 0; i < T; i++) both[i] = c1[i] + cand[i] - ext[i];
        if (water_fill(T, sh, pv, both, take, o->C) > o->C) break; // step s1 refuses whatever is done here
        for (uint32_t i = 0; i < T; i++) {
            const uint64_t add = take[i] > c1[i] ? take[i] - c1[i] : 0;
            ext[i] += add, n_ext += add;
        }
    }
    if (!n_ext) return;
    parts_take(ps, np, ext);
    for (int x = 0; x < np; x++) dm_apply(ps[x], s, m[x], rec_prev(ps[x], s), rec_cur(ps[x], s));
}

// Record t's sync-later entries go into group order (see sync_note) by a stable counting sort:
// within a group, entries keep their occurrence order.  sync_scatter stores a part's entries e[0,
// m) into out (n entries in all), each at its group's cursor cur[group], advanced.
static void sync_scatter(const oracle_impl *o, const plan_sync *e, uint32_t m, uint32_t *cur, plan_sync *out,
                         uint32_t n) {
    const uint32_t nb = 2 * sync_span(o), *cnt = o->sync_cnt, *bk = o->sync_bk;
    // The scratch list was last written batches ago, so its lines are cold, and the stores go to
    // ~2 (P + W) places at once, which the hardware's stream prefetch does not follow: each group's
    // store line is asked for two lines ahead (the record phase 0.3 -> 0.2 ms per batch here).
    for (uint32_t b = 0; b < nb; b++)
        if (cnt[b + 1]) __builtin_prefetch(&out[cur[b]], 1), __builtin_prefetch(&out[BP_MIN(cur[b] + 4, n - 1)], 1);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t c = cur[bk[i]]++;
        out[c] = e[i];
        __builtin_prefetch(&out[BP_MIN(c + 8, n - 1)], 1);
    }
}

// Room for n entries in o's scratch list, which becomes record r's (sync_swap).
static void sync_room_tmp(oracle_impl *o, const plan *r, uint32_t n) {
    if (BP_MAX(n, r->cap_sync_later) > o->sync_cap) {
        o->sync_cap = BP_MAX(n, r->cap_sync_later);
        o->sync_tmp = bp_xrealloc(o->sync_tmp, (size_t)o->sync_cap * sizeof *o->sync_tmp);
    }
}

// The sorted copy (n entries) becomes the record's list; the old list is the next scratch.
static void sync_swap(oracle_impl *o, plan *r, uint32_t n) {
    plan_sync *old = r->sync_later;
    uint32_t old_cap = r->cap_sync_later;
    r->sync_later = o->sync_tmp, r->cap_sync_later = o->sync_cap, r->n_sync_later = n;
    o->sync_tmp = old, o->sync_cap = old_cap;
}

static void sort_sync(oracle_impl *o, plan *r) {
    const uint32_t n = r->n_sync_later, nb = 2 * sync_span(o);
    if (n < 2) return;
    sync_room_tmp(o, r, n);
    uint32_t start = 0;
    for (uint32_t b = 0; b < nb; b++) o->sync_cur[b] = start, start += o->sync_cnt[b + 1];
    BP_ASSERT(start == n); // every entry noted
    sync_scatter(o, r->sync_later, n, o->sync_cur, o->sync_tmp, n);
    sync_swap(o, r, n);
}

// Record t's header fields.
static void record_header(const oracle_impl *o, plan *r, uint32_t t) {
    const slot *sl = &o->slots[t % o->R];
    BP_ASSERT(sl->batch == t);
    r->iter = t, r->flags = (o->finished && t + 1 == o->n_pushed) ? PLAN_LAST : 0;
    r->P = o->P, r->W = o->W, r->B = sl->samples;
    r->row0 = o->row_base + (uint64_t)t * o->B;
    r->capacity = o->C, r->n_keys = o->K;
    r->key_bytes = o->K <= (1ull << 32) ? 4 : 8;
    for (uint32_t i = 0; i <= o->T; i++) r->slice[i] = (uint32_t)((uint64_t)i * sl->samples / o->T);
}

// Stores part o's private keys into r at the cursors pv_cursor[trainer], advanced.
static void private_scatter(oracle_impl *o, plan *r) {
    for (uint32_t k = 0; k < o->pv_n; k++) r->priv_key[o->pv_cursor[o->pv_tr[k]]++] = o->pv_key[k];
}

// Record t's header, its private keys grouped by trainer (each group in occurrence order) and its
// sync-later entries in group order.
static void fill_header(oracle_impl *o, plan *r, uint32_t t) {
    record_header(o, r, t);
    memset(r->priv_off, 0, (size_t)(o->T + 1) * sizeof *r->priv_off);
    for (uint32_t k = 0; k < o->pv_n; k++) r->priv_off[o->pv_tr[k] + 1]++;
    for (uint32_t i = 0; i < o->T; i++) r->priv_off[i + 1] += r->priv_off[i];
    plan_reserve_private(r, o->pv_n);
    memcpy(o->pv_cursor, r->priv_off, o->T * sizeof *o->pv_cursor);
    private_scatter(o, r);
    r->n_private = o->pv_n;
    sort_sync(o, r);
}

// The horizon of step s: the last batch the step may look at.
static uint32_t step_horizon(const oracle_impl *o) {
    const uint32_t s = o->step, H = s + o->P + o->W;
    return o->finished && H > o->n_pushed - 1 ? o->n_pushed - 1 : H; // n_pushed >= 1 here
}

// One planning step s (see oracle.h), in three parts: step_ab, its steps (a) and (b) on one part of
// the planner (every table, or a group of them); step_c, step (c) and the demotions ahead, over all
// parts (their capacity is shared); step_end, the record s-1 of one part.
static void step_ab(oracle_impl *o) {
    const uint32_t s = o->step, P = o->P, T = o->T;
    const uint32_t N = o->finished ? o->n_pushed : NIL;
    const uint32_t H = step_horizon(o);
    // The links this step reads (those into batches s-1 .. H) are in by now; with two threads, the
    // planner writes them itself.  A link from a batch beyond H (the indexer may run ahead, and the
    // planner links what is published before its step needs it: link_published) reads as no use
    // in the window: v > H.
    if (o->threads == 2) {
        while (o->n_linked <= H) link_next(o);
    }
    plan *prev = rec_prev(o, s), *cur = rec_cur(o, s);

    uint64_t *gate = o->act_gate;
    uint64_t shared = o->shared_count;
    oracle_stats st = o->st; // counters kept in registers through the loops
    const linkmap lk = o->lk;
    o->ph_plan_t = bp_now();

    // (a) keys used at s-1: private ones and those with no use in [s, H] are evicted after s-1;
    // the others stay, and their gradient of s-1 is synchronised before the next use.
    if (s >= 1) {
        o->bucket_n[(s - 1) % o->R] = 0, o->bucket_upto[(s - 1) % o->R] = 0;
        o->pv_n = 0;
        slot *sl = &o->slots[(s - 1) % o->R];
        slot *slots = o->slots;
        const uint32_t jl = (s - 1) % o->R, n = sl->n;
        uint32_t *sact = sl->act; // (written only by the retire list below)
        const uint64_t *spriv = sl->priv;
        void *skeys = sl->key, *susers = sl->users;
        const int k32 = o->key32, u8 = o->users8;
        uint32_t *lz_sync = o->lz_sync;
        // The lists are appended to through local cursors (room for every occurrence reserved
        // first): through the record's own counters, each append would reload and store them.
        plan_reserve(prev, PLAN_LIST_EVICT, n), plan_reserve(prev, PLAN_LIST_SYNC_NOW, n);
        plan_reserve(prev, PLAN_LIST_SYNC_LATER, n);
        BP_ASSERT(prev->n_sync_later == 0);
        sync_room(o, prev->cap_sync_later);
        uint32_t *sbk = o->sync_bk, *scnt = o->sync_cnt; // sync_note's, in locals
        memset(scnt, 0, (2 * sync_span(o) + 1) * sizeof *scnt);
        plan_evict *ev = prev->evict + prev->n_evict;
        uint64_t *now = prev->sync_now + prev->n_sync_now;
        plan_sync *const later0 = prev->sync_later;
        plan_sync *later = later0 + prev->n_sync_later;
        // With one thread and the flat keymap, a key whose occurrence at s-1 is its last in the held
        // batches (no next link: every indexed batch is linked) is retired here, as retire_batch
        // would retire it when batch s-1 leaves the ring (nothing is indexed in between): its
        // eviction goes straight into its keymap word instead of through the gate of its active
        // record, which is freed, and retire_batch has nothing left to do.  The word is stored
        // without being read first (km_active would check it): a load of that cold line would hold
        // the loop until it arrives, while a store waits in the store buffer.
        const int retire = planner_retires(o);
        uint64_t *km = o->km;
        // The outcome of each occurrence first, as bits (a branch-free scan of the next links: the
        // four outcomes, 11 / 27 / 29 / 36% of the occurrences here, are not predictable), then each
        // list from its bits, in occurrence order: evicted (private, or no use in [s, H]), used
        // again at s (sync now), and the rest, shared (sync later: by the next use, or by s).
        // With next link d (v = s - 1 + d), "no use in [s, H]" is d - 1 >= H - (s - 1) in unsigned
        // arithmetic (d = 0, none, wraps), and "used at s" is d = 1.
        const uint32_t nw = (n + 63) / 64, hd = H - (s - 1), R = o->R;
        uint64_t *bev = o->bits_ev, *bnow = o->bits_now, *blast = o->bits_last;
        for (uint32_t w = 0; w < nw; w++) {
            uint32_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
            uint64_t e = 0, nb = 0, la = 0;
#if BP_SIMD_AVX2
            // In vector registers with one thread (with two, the indexer may be storing links from
            // beyond H into these, which only atomic loads may read).
            if (o->avx2 && o->threads == 1) { // 64 | NEXT_BLOCK: the links are consecutive
                const outcome64 r = outcome64_avx2((const char *)lk.p + next_index(&lk, jl, lo) * lk.lw, lk.lw, hd);
                e = r.ev, nb = r.now, la = r.last;
                const uint64_t in = hi - lo < 64 ? (1ull << (hi - lo)) - 1 : ~0ull;
                e &= in, nb &= in, la &= in;
            } else
#endif
            {
                const size_t i0 = next_index(&lk, jl, lo);
                for (uint32_t k = 0; k < hi - lo; k++) {
                    uint32_t d = link_at(&lk, i0 + k);
                    e |= (uint64_t)(d - 1 >= hd) << k, nb |= (uint64_t)(d == 1) << k, la |= (uint64_t)(d == 0) << k;
                }
            }
            bev[w] = e | spriv[w], bnow[w] = nb & ~spriv[w], blast[w] = la;
        }
        uint32_t *cand = o->cand, m = 0;
        for (uint32_t w = 0; w < nw; w++)
            for (uint64_t b = bev[w]; b; b &= b - 1) cand[m++] = w * 64 + (uint32_t)__builtin_ctzll(b);
        int far_ready = 0; // far_pos holds this batch's far links
        uint64_t *pcount = o->priv_count;
        uint32_t rr = o->rr_owner;
        // Without planner_retires, the occurrences with no later use (linked now) are listed for
        // retire_batch at the front of the slot's arrays, which nothing reads after this step
        // (n_last): positions in prev, active indices in act, write-back trainers in users, keys
        // in key (below).
        uint32_t *rlist = sl->prev, nl = 0;
        for (uint32_t k = 0; k < m; k++) {
            if (k + AHEAD_GATE < m) { // the keymap word of a key to retire, or its gate
                uint32_t oc2 = cand[k + AHEAD_GATE];
                if (retire && occ_bit(blast, oc2))
                    __builtin_prefetch(&km[key_at(skeys, k32, oc2)], 1);
                else
                    __builtin_prefetch(&gate[sact[oc2]], 1);
            }
            uint32_t oc = cand[k], a = sact[oc];
            uint64_t key = key_at(skeys, k32, oc);
            const int last = occ_bit(blast, oc); // no later use: d = 0
            uint32_t wb; // the trainer that writes it back
            if (occ_bit(spriv, oc)) {
                uint32_t tr = (uint32_t)__builtin_ctzll(users_at(susers, u8, oc));
                wb = tr;
                private_push(o, key, (uint16_t)tr);
                *ev++ = (plan_evict){key, (uint16_t)tr, PLAN_PRIVATE};
                pcount[tr]--;
                if (retire && last) {
                    retire_key(o, &km[key], a, gate_of(tr, s - 1));
                } else {
                    gate[a] = gate_of(tr, s - 1);
                    // A next use within the horizon would read the key as kept: tell it (rare: a
                    // private fetch saw no use within W batches, so the link is in a far list).
                    const uint32_t d = last ? 0 : next_d(&lk, jl, oc);
                    if (d && d <= hd) {
                        const uint32_t jv = jl + d < R ? jl + d : jl + d - R;
                        BP_ASSERT(d > o->W); // private: no use within W batches
                        if (!far_ready) far_map(o, s - 1, H, o->far_pos), far_ready = 1;
                        occ_miss(&slots[jv], o->far_pos[oc]);
                    }
                }
                st.evictions_private++;
            } else {
                uint32_t owner = rr_next(&rr, T);
                wb = owner;
                *ev++ = (plan_evict){key, (uint16_t)owner, PLAN_WB_NEXT};
                if (retire && last) retire_key(o, &km[key], a, gate_of(owner, s - 1));
                else gate[a] = gate_of(owner, s - 1);
                shared--;
            }
            if (!retire) { // (nl <= oc, and later iterations read positions after oc)
                rlist[nl] = oc, sact[nl] = a;
                if (u8) ((uint8_t *)susers)[nl] = (uint8_t)wb;
                else ((uint64_t *)susers)[nl] = wb;
                nl += (uint32_t)last;
            }
        }
        sl->n_last = nl;
        o->rr_owner = rr;
        st.evictions += m;
        for (uint32_t w = 0; w < nw; w++)
            for (uint64_t b = bnow[w]; b; b &= b - 1)
                *now++ = key_at(skeys, k32, w * 64 + (uint32_t)__builtin_ctzll(b));
        for (uint32_t w = 0; w < nw; w++) {
            uint64_t b = ~(spriv[w] | bnow[w]);
            if (w == nw - 1 && (n & 63)) b &= (1ull << (n & 63)) - 1;
            const size_t i0 = next_index(&lk, jl, w * 64) - w * 64; // 64 | NEXT_BLOCK: one block
            for (; b; b &= b - 1) {
                uint32_t oc = w * 64 + (uint32_t)__builtin_ctzll(b);
                uint32_t d = link_at(&lk, i0 + oc);
                const uint32_t i = (uint32_t)(later - later0);
                // Evicted (group 0): its gradient of s-1 is written back after s; else its deadline
                // is the step before its next use v = s - 1 + d: s + (d - 2).  Without a branch:
                // which of the two is not predictable.
                const uint32_t g = d - 1 >= hd ? 0 : d - 2;
                *later++ = (plan_sync){key_at(skeys, k32, oc), s - 1, s + g};
                sbk[i] = g, scnt[g + 1]++;
                lz_sync[oc] = i; // for bucket_fill at this step (read where v > s + P, or v = s + P by demote)
            }
        }
        st.sync_now += (uint64_t)(now - (prev->sync_now + prev->n_sync_now));
        st.sync_later += (uint64_t)(later - (later0 + prev->n_sync_later));
        prev->n_evict = (uint32_t)(ev - prev->evict), prev->n_sync_now = (uint32_t)(now - prev->sync_now);
        prev->n_sync_later = (uint32_t)(later - later0);
        if (!retire) { // the listed keys too, now that the loops above have read theirs
            const int pf = o->threads == 2 && km;
            for (uint32_t k = 0; k < nl; k++) {
                const uint64_t key = key_at(skeys, k32, rlist[k]);
                if (k32) ((uint32_t *)skeys)[k] = (uint32_t)key;
                else ((uint64_t *)skeys)[k] = key;
                // With two threads the indexer retires these keys when it next runs, and their
                // keymap words have not been touched for W batches: asked for here, from the
                // planner's idle time, the lines come to the indexer from the shared cache, not
                // from memory (retire 0.31 -> 0.18 ms per batch).  A prefetch only moves lines, so
                // the keymap stays the indexer's.
                if (pf) __builtin_prefetch(&km[key]);
            }
        }
    }

    phase_end(o->ph_plan, &o->ph_plan_t, ORACLE_PH_COMPLETE);
    // (b) fetches issued at s: for batch s+P (all of 0..P at s = 0).
    uint32_t u0 = s == 0 ? 0 : s + P;
    for (uint32_t u = u0; u <= s + P && u < N; u++) {
        const uint32_t ju = u % o->R;
        const slot *su = &o->slots[ju];
        BP_ASSERT(su->batch == u && u <= H);
        const uint32_t *sact = su->act, n = su->n;
        const uint64_t *smiss = su->miss;
        uint64_t *spriv = su->priv;
        const void *skeys = su->key, *susers = su->users;
        const int k32 = o->key32, u8 = o->users8;
        // The misses, in occurrence order, from the slot's miss bits: every other occurrence is a
        // hit (see "Residency" above), so only these are visited.
        uint32_t *cand = o->cand, m = 0;
        for (uint32_t w = 0; w < (n + 63) / 64; w++)
            for (uint64_t b = smiss[w]; b; b &= b - 1) cand[m++] = w * 64 + (uint32_t)__builtin_ctzll(b);
        plan_reserve(cur, PLAN_LIST_FETCH, m);
        plan_fetch *fe = cur->fetch + cur->n_fetch; // a local cursor, as in (a)
        uint64_t miss_users = 0, *pcount = o->priv_count;
        uint32_t rr = o->rr_fetch;
        const int covered = H >= u + P || s + P + o->W >= N; // the horizon shows u + 1 .. u + P (below)
        for (uint32_t k = 0; k < m; k++) {
            if (k + AHEAD_GATE < m) __builtin_prefetch(&gate[sact[cand[k + AHEAD_GATE]]], 1);
            uint32_t oc = cand[k], a = sact[oc];
            uint64_t users = users_at(susers, u8, oc);
            uint32_t nu = users_bits(u8, users);
            miss_users += nu;
            uint64_t g = gate[a];
            plan_fetch f = {key_at(skeys, k32, oc), u, (uint32_t)g - 1, 0, g ? (uint16_t)(g >> 32) : PLAN_NO_WRITER, 0};
            // Private needs the window to show that no fetch decision for u+1..u+P can see the
            // key resident: no use in (u, H] with H >= u + P, or with H the last batch (the
            // input has ended and the horizon was cut there: nothing comes after it).  The test
            // is on the cut, not on H = N - 1 alone: the step whose horizon is exactly the last
            // batch may run before oracle_finish, and plans must not depend on when it is called.
            if (nu == 1 && no_use_until(&lk, u, ju, oc, H) && covered) {
                uint32_t tr = (uint32_t)__builtin_ctzll(users);
                spriv[oc >> 6] |= 1ull << (oc & 63);
                pcount[tr]++;
                f.fetcher = (uint16_t)tr, f.flags = PLAN_PRIVATE;
                st.fetches_private++;
            } else {
                shared++;
                f.fetcher = (uint16_t)rr_next(&rr, T);
            }
            st.fetches++;
            *fe++ = f;
        }
        o->rr_fetch = rr;
        cur->n_fetch = (uint32_t)(fe - cur->fetch);
        st.unique += n, st.accesses += su->accesses, st.hits += su->accesses - miss_users;
    }
    o->shared_count = shared;
    o->st = st;

    phase_end(o->ph_plan, &o->ph_plan_t, ORACLE_PH_FETCH);
}

// Pops up to k entries (and at most *need) from the end of bucket v of part o: evictions after s-1.
static void evict_level(oracle_impl *o, uint32_t v, uint32_t s, uint32_t k, uint64_t *need) {
    const uint32_t j = v % o->R;
    plan *prev = rec_prev(o, s);
    // Each eviction reads the key, active index and miss bit of an occurrence of batch v,
    // then that record's gate: dependent misses, so both levels are prefetched ahead.
    const slot *sv = &o->slots[j];
    const bentry *bk = o->bucket[j];
    for (; k && *need; k--, (*need)--) {
        uint32_t bn = o->bucket_n[j];
        if (bn > EVICT_AHEAD && *need > EVICT_AHEAD) {
            uint32_t p1 = (uint32_t)bk[bn - 1 - EVICT_AHEAD] & o->pos_mask;
            __builtin_prefetch(&sv->act[p1]), __builtin_prefetch(&sv->miss[p1 >> 6], 1);
            __builtin_prefetch((const char *)sv->key + (size_t)p1 * (o->key32 ? 4 : 8));
        }
        if (bn > EVICT_AHEAD / 2 && *need > EVICT_AHEAD / 2) {
            uint32_t a2 = sv->act[(uint32_t)bk[bn - 1 - EVICT_AHEAD / 2] & o->pos_mask];
            __builtin_prefetch(&o->act_gate[a2], 1);
        }
        evict_pressure(o, bk[--o->bucket_n[j]], v, s, prev);
    }
}

// (c) capacity, over the parts ps[0, np) at step s with horizon H: Belady among shared keys not
// needed by s..s+P, then demotions, then demotions ahead.  Returns 0 or BP_ECAPACITY.
static int step_c(oracle_impl *const *ps, int np, uint32_t s, uint32_t H) {
    oracle_impl *o = ps[0];
    const uint32_t P = o->P, T = o->T;
    const uint32_t N = o->finished ? o->n_pushed : NIL;
    uint32_t who;
    uint64_t mp = parts_private(ps, np, NULL, &who);
    const uint64_t held = parts_shared(ps, np) + mp;
    if (held > o->C) {
        uint64_t need = held - o->C;
        uint32_t levels = 0;
        for (uint32_t v = H; v > s + P && need; v--, levels++) {
            const uint32_t j = v % o->R;
            uint64_t tot = 0;
            for (int q = 0; q < np; q++) {
                if (ps[q]->bucket_upto[j] < s) bucket_fill(ps[q], v, s);
                tot += ps[q]->bucket_n[j];
            }
            // Pops from the end of the parts' buckets as from one list (part 0's first), the last
            // part's first; a level evicted in part gives up its keys that come back private
            // first (bucket_lone_last), each part's, before the others.
            uint32_t lone[2] = {0, 0};
            const int in_part = need < tot && T > 1 && o->W >= P;
            for (int q = 0; q < np && in_part; q++) lone[q] = bucket_lone_last(ps[q], v, H);
            for (int pass = in_part ? 0 : 1; pass < 2 && need; pass++)
                for (int q = np - 1; q >= 0 && need; q--)
                    evict_level(ps[q], v, s, pass == 0 ? lone[q] : ps[q]->bucket_n[j], &need);
        }
        for (int q = 0; q < np; q++)
            ps[q]->grp_span = BP_MIN(ps[q]->grp_stride - 1, BP_MAX(GRP_SPAN_MIN, levels + levels / 4));
        uint64_t least = parts_shared(ps, np) + mp; // the least this batch needs, after the evictions
        if (need && s >= 1 && T > 1 && o->W >= P && (least = demote(ps, np, s, H)) == 0) need = 0;
        if (need) {
            const uint64_t shared = parts_shared(ps, np);
            mp = parts_private(ps, np, NULL, &who);
            uint32_t ulo = s == 0 ? 0 : s + P, uhi = s + P < N ? s + P : N - 1;
            const unsigned long long base = o->iter_base; // a resumed run's numbers
            o->err = bp_fail(BP_ECAPACITY,
                             "oracle: cache too small: batch %llu cannot be prefetched at iteration %llu: trainer %u "
                             "needs %llu rows (%llu shared + %llu private, pinned for batches %llu..%llu) but the "
                             "cache holds %llu; the minimum cache size for this batch is %llu rows",
                             base + ulo, base + s, who, (unsigned long long)(shared + mp),
                             (unsigned long long)shared, (unsigned long long)mp, base + s, base + uhi,
                             (unsigned long long)o->C, (unsigned long long)least);
            return o->err;
        }
    }
    demote_ahead(ps, np, s, H);
    const uint64_t after = parts_shared(ps, np) + parts_private(ps, np, NULL, &who);
    if (after > o->st.peak_resident) o->st.peak_resident = after;
    return 0;
}

static void split_fill(oracle_impl *o, plan *r, uint32_t t);

// The end of step s on one part: its record s-1.  Returns 1 if it completed that record, 0 if
// not (s = 0).  Part 0 of a split planner fills the record's header only (split_next_plan).
static int step_end(oracle_impl *o, int split) {
    const uint32_t s = o->step;
    phase_end(o->ph_plan, &o->ph_plan_t, ORACLE_PH_PRESSURE);
    if (s == 0) return 0;
    if (split) split_fill(o, rec_prev(o, s), s - 1);
    else fill_header(o, rec_prev(o, s), s - 1);
    phase_end(o->ph_plan, &o->ph_plan_t, ORACLE_PH_RECORD);
    o->st.batches++, o->st.samples += o->slots[(s - 1) % o->R].samples;
    return 1;
}

// One planning step of a planner in one part.  Returns 1 if it completed record s-1 (rec_prev),
// 0 if not (s = 0), or BP_ECAPACITY.
static int plan_step(oracle_impl *o) {
    step_ab(o);
    const int rc = step_c(&o, 1, o->step, step_horizon(o));
    return rc < 0 ? rc : step_end(o, 0);
}

// ---------------------------------------------------------------------------------------------
// API

static void lock(oracle_impl *o) {
    if (o->threads == 2) pthread_mutex_lock(&o->mu);
}
static void unlock(oracle_impl *o) {
    if (o->threads == 2) pthread_mutex_unlock(&o->mu);
}

uint32_t oracle_held_batches(uint32_t W, uint32_t P, int threads) {
    return P + W + 3 + (threads == 2 ? ORACLE_INDEX_AHEAD : 0);
}

// The bits of an occurrence id that name its slot, for R slots: R < 2^bits, so no id is NIL.
static uint32_t slot_bits_for(uint32_t R) {
    uint32_t bits = 1;
    while ((1u << bits) <= R) bits++;
    return bits;
}

uint64_t oracle_max_batch_ids(uint32_t W, uint32_t P, int threads) {
    return (1ull << (32 - slot_bits_for(oracle_held_batches(W, P, threads)))) - 1;
}

// One planner over the tables f with grp[f] == part (every table when grp is NULL), holding the
// batches that `held` threads hold (oracle_held_batches: a split planner takes as many batches
// pushed ahead as the planner in one part).
static int init_part(oracle *out, const oracle_config *cfg, const uint8_t *grp, uint8_t part, int held) {
    out->impl = NULL;
    if (cfg->T < 1 || cfg->T > ORACLE_MAX_TRAINERS)
        return bp_fail(BP_EINVAL, "oracle: %u trainers, expected 1..%d", cfg->T, ORACLE_MAX_TRAINERS);
    if (cfg->B < 1 || cfg->F < 1 || !cfg->card)
        return bp_fail(BP_EINVAL, "oracle: batch size %u, %u features: both must be >= 1", cfg->B, cfg->F);
    if (cfg->W > ORACLE_MAX_WINDOW || cfg->P > 255)
        return bp_fail(BP_EINVAL, "oracle: lookahead %u (max %d) or prefetch distance %u (max 255) too large", cfg->W,
                       ORACLE_MAX_WINDOW, cfg->P);
    if (cfg->C < 1) return bp_fail(BP_EINVAL, "oracle: cache capacity must be at least 1 row");
    if (cfg->threads != 1 && cfg->threads != 2) return bp_fail(BP_EINVAL, "oracle: threads must be 1 or 2");
    if (cfg->links < ORACLE_LINKS_AUTO || cfg->links > ORACLE_LINKS_PLANNER)
        return bp_fail(BP_EINVAL, "oracle: links must be ORACLE_LINKS_AUTO, _INDEXER or _PLANNER (%d)", cfg->links);
    uint64_t K = 0;
    for (uint32_t f = 0; f < cfg->F; f++) {
        if (cfg->card[f] == 0 || cfg->card[f] > (1ull << 32))
            return bp_fail(BP_EINVAL, "oracle: table %u has %llu rows (1..2^32)", f, (unsigned long long)cfg->card[f]);
        K += cfg->card[f];
    }
    uint32_t R = oracle_held_batches(cfg->W, cfg->P, held);
    uint32_t pos_bits = 32 - slot_bits_for(R);
    uint64_t per_batch = (uint64_t)cfg->B * cfg->F;
    if (per_batch >= (1ull << pos_bits))
        return bp_fail(BP_EINVAL, "oracle: batch of %u samples x %u features is too large for a window of %u batches",
                       cfg->B, cfg->F, R);

    oracle_impl *o = bp_xcalloc(1, sizeof *o);
    o->T = cfg->T, o->B = cfg->B, o->F = cfg->F, o->W = cfg->W, o->P = cfg->P, o->C = cfg->C;
    o->R = R, o->threads = (uint32_t)cfg->threads, o->K = K;
    o->links = cfg->links;
    o->row_base = cfg->row_base, o->iter_base = cfg->iter_base, o->borrow = cfg->borrow_input;
    o->pos_bits = pos_bits, o->pos_mask = (1u << pos_bits) - 1;
    o->offset = bp_xmalloc(cfg->F * sizeof *o->offset);
    o->card = bp_xmalloc(cfg->F * sizeof *o->card);
    uint64_t acc = 0;
    for (uint32_t f = 0; f < cfg->F; f++) o->offset[f] = acc, o->card[f] = cfg->card[f], acc += cfg->card[f];

    int km = cfg->keymap;
    if (km == ORACLE_KEYMAP_AUTO) km = K <= (1ull << 28) ? ORACLE_KEYMAP_FLAT : ORACLE_KEYMAP_HASH;
    uint64_t act_cap64 = BP_MIN(K, (uint64_t)R * per_batch);
    if (act_cap64 > 0x7FFFFFFFu) act_cap64 = 0x7FFFFFFFu; // 31 bits in the keymap word
    o->act_cap = (uint32_t)act_cap64;
    o->act_gate = big_alloc((size_t)o->act_cap * sizeof *o->act_gate);
    o->act_free = big_alloc((size_t)o->act_cap * sizeof *o->act_free);
    o->slots = bp_xcalloc(R, sizeof *o->slots);
    size_t per = (size_t)per_batch;
    o->nexts_bytes = nexts_bytes(per, R);
    o->lk = (linkmap){big_alloc(o->nexts_bytes), (size_t)R << NEXT_BITS, link_width(R), pos_bits, o->pos_mask,
                      cfg->W, cfg->P + cfg->W + 1};
    o->key32 = K <= (1ull << 32), o->users8 = cfg->T <= 8;
#if BP_SIMD_AVX2
    o->avx2 = simd_on && __builtin_cpu_supports("avx2");
    o->avx2_cols = o->avx2 && cfg->F >= 8;
#endif
    size_t kw = o->key32 ? 4 : 8, uw = o->users8 ? 1 : 8;
    int oom = !o->act_free || !o->act_gate || !o->lk.p;
    uint64_t arr[6];
    slot_arrays(per, kw, uw, arr);
    if (arr[0] < MAP_MIN) {
        // Small batches: each slot's arrays from heap blocks were all resident (calloc clears what
        // it reuses), gigabytes for a long window of batches with few keys (W = 4000 of 30000 ids:
        // 1 GiB for 23 MiB of entries); from one mapping per array, only the pages written are.
        for (int k = 0; k < 6 && !oom; k++) {
            o->slot_pool_bytes[k] = pool_step(arr[k]) * R;
            oom = !(o->slot_pool[k] = pool_alloc(o->slot_pool_bytes[k]));
        }
        for (uint32_t j = 0; j < R && !oom; j++) {
            void *at[6];
            for (int k = 0; k < 6; k++) at[k] = o->slot_pool[k] + j * pool_step(arr[k]);
            o->slots[j] = (slot){.key = at[0], .act = at[1], .prev = at[2], .users = at[3], .miss = at[4],
                                 .priv = at[5], .batch = NIL};
        }
    }
    for (uint32_t j = 0; j < R && !oom && !o->slot_pool[0]; j++) {
        o->slots[j].key = big_alloc(arr[0]);
        o->slots[j].act = big_alloc(arr[1]);
        o->slots[j].prev = big_alloc(arr[2]);
        o->slots[j].users = big_alloc(arr[3]);
        o->slots[j].miss = big_alloc(arr[4]);
        o->slots[j].priv = big_alloc(arr[5]);
        o->slots[j].batch = NIL;
        oom = !o->slots[j].key || !o->slots[j].act || !o->slots[j].prev || !o->slots[j].users ||
              !o->slots[j].miss || !o->slots[j].priv;
    }
    o->km_flat = km == ORACLE_KEYMAP_FLAT;
    if (o->km_flat) {
        o->km_bytes = (size_t)K * sizeof *o->km;
        o->km = big_alloc(o->km_bytes);
        oom = oom || !o->km;
    } else {
        hmap_init(&o->hm, 16);
    }
    out->impl = o;
    if (oom) {
        oracle_free(out);
        return bp_fail(BP_ENOMEM, "oracle: cannot map memory for %llu keys and a window of %u batches of %u x %u",
                       (unsigned long long)K, R, cfg->B, cfg->F);
    }
    o->cols = bp_xmalloc((size_t)COLS_LD(cfg->B / cfg->T + 1) * cfg->F * sizeof *o->cols);
    o->dist = bp_xmalloc((size_t)COLS_LD(cfg->B / cfg->T + 1) * sizeof *o->dist);
    o->back_tab = bp_xmalloc(R * sizeof *o->back_tab);
    o->card32 = bp_xmalloc(cfg->F * sizeof *o->card32);
    o->tabs = bp_xmalloc(cfg->F * sizeof *o->tabs);
    for (uint32_t f = 0; f < cfg->F; f++)
        if (!grp || grp[f] == part) o->tabs[o->nt++] = f;
    for (uint32_t f = 0; f < cfg->F; f++) o->card32[f] = (uint32_t)(cfg->card[f] - 1);
    o->bl_list = big_alloc(per * sizeof *o->bl_list);
    o->lz_sync = big_alloc(per * sizeof *o->lz_sync);
    o->cand = big_alloc(per * sizeof *o->cand);
    o->far_pos = big_alloc(per * sizeof *o->far_pos);
    o->bits_ev = big_alloc((per / 64 + 1) * sizeof *o->bits_ev);
    o->bits_now = big_alloc((per / 64 + 1) * sizeof *o->bits_now);
    o->bits_last = big_alloc((per / 64 + 1) * sizeof *o->bits_last);
    if (!o->bl_list || !o->lz_sync || !o->cand || !o->far_pos || !o->bits_ev || !o->bits_now ||
        !o->bits_last) {
        oracle_free(out);
        return bp_fail(BP_ENOMEM, "oracle: cannot map %zu bytes",
                       per * (sizeof *o->bl_list + sizeof *o->lz_sync + sizeof *o->cand +
                              sizeof *o->far_pos));
    }
    o->priv_count = bp_xcalloc(cfg->T, sizeof *o->priv_count);
    o->pv_cursor = bp_xcalloc(cfg->T, sizeof *o->pv_cursor);
    o->dm_cand = bp_xcalloc(cfg->T, sizeof *o->dm_cand);
    o->dm_take = bp_xcalloc(cfg->T, sizeof *o->dm_take);
    o->sync_cnt = bp_xcalloc(2 * sync_span(o) + 1, sizeof *o->sync_cnt);
    o->sync_cur = bp_xcalloc(2 * sync_span(o), sizeof *o->sync_cur);
    o->bucket = bp_xcalloc(o->R, sizeof *o->bucket);
    o->bucket_n = bp_xcalloc(o->R, sizeof *o->bucket_n);
    o->bucket_cap = bp_xcalloc(o->R, sizeof *o->bucket_cap);
    o->bucket_upto = bp_xcalloc(o->R, sizeof *o->bucket_upto);
    o->grp = bp_xcalloc(o->R, sizeof *o->grp);
    o->grp_cap = bp_xcalloc(o->R, sizeof *o->grp_cap);
    o->grp_lo = bp_xcalloc(o->R, sizeof *o->grp_lo);
    o->grp_hi = bp_xcalloc(o->R, sizeof *o->grp_hi);
    o->grp_stride = BP_MIN(GRP_SPAN_MAX, o->R) + 1, o->grp_span = BP_MIN(GRP_SPAN_MIN, o->R);
    o->grp_off = bp_xcalloc((size_t)o->R * o->grp_stride, sizeof *o->grp_off);
    o->far = bp_xcalloc(o->R, sizeof *o->far);
    o->far_n = bp_xcalloc(o->R, sizeof *o->far_n);
    o->far_cap = bp_xcalloc(o->R, sizeof *o->far_cap);
    plan_init(&o->rec[0]), plan_init(&o->rec[1]);
    plan_reset(&o->rec[0], o->T), plan_reset(&o->rec[1], o->T);
    if (o->threads == 2) {
        if (!o->borrow)
            for (int i = 0; i < INQ; i++) o->inbuf[i] = bp_xmalloc(per * sizeof(uint32_t));
        pthread_mutex_init(&o->mu, NULL);
        pthread_cond_init(&o->cv, NULL);
        o->mu_init = 1;
        if (pthread_create(&o->th, NULL, indexer_thread, o) != 0) {
            oracle_free(out);
            return bp_fail(BP_ENOMEM, "oracle: cannot start the indexer thread");
        }
        o->th_started = 1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// A planner split by tables (oracle_config.groups = 2).
//
// Two planners, the parts, each over one of two groups of consecutive tables (split_tables): each
// dedupes, links and plans its own tables' keys, whose state (keymap words, active records, slots,
// buckets, gates) is its own.  The keys of two tables never meet, so the parts share nothing but
// the capacity: at each step both run steps (a) and (b) (step_ab), then part 0 runs step (c) over
// both (step_c: Belady, demotions and demotions ahead over the two parts' counts and buckets), and
// each stores its entries into the one record, part 0's (split_prepare, below).  With threads = 2
// part 1 runs on a thread of its own, a step at most ahead of the caller's part 0: part 1 posts
// its steps (a) and (b), the caller step (c), part 1 its part of the record (split_sync), and
// part 1 goes on to its next step while the caller ends this one.  Each core then reads and writes
// its own part's lines only (but for part 1's buckets and counts, which part 0's step (c) reads,
// and the record), where the split by phases
// (the indexer and the planner) moves every slot from one core to the other: on this VM a line
// the other core holds comes slower than one from memory (docs/oracle.md, rounds 19-20).
//
// The plans differ from those of the planner in one part only in order: every list holds part 0's
// entries, then part 1's (within each trainer's private keys and each sync-later group), and where
// step (c) chooses among keys of both parts, it takes them in that order (step_c).  Fetchers and
// write-back owners go round-robin in each part, so each trainer's count of them is within two of
// another's, not one.

static void stats_of(oracle_impl *o, oracle_stats *st);

// Tells a thread waiting on cv (under mu) for *stop to end, and joins it: the indexer's thread and
// a split planner's part 1.
static void stop_thread(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th) {
    pthread_mutex_lock(mu);
    *stop = 1;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
    pthread_join(th, NULL);
}

#define SPLIT_Q 8     // batches pushed and not yet indexed by part 1
#define SPLIT_SPIN 20000 // polls of a counter before sleeping on the condition variable

typedef struct split_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int threads; // 2: part 1 on a thread of its own
    pthread_t th;
    int th_started;
    const uint32_t *q_ids[SPLIT_Q]; // pushed batches that part 1 has not indexed yet
    uint32_t q_n[SPLIT_Q], q_head, q_count;
    uint32_t *q_buf[SPLIT_Q]; // (B, F) their copies, unless the input is borrowed
    // Input: the batches pushed, and fin once the input has ended (oracle_finish).  Steps: ab = s
    // + 1 when part 1 has run its (a) and (b), c = s + 1 when part 0 has run (c), end = s + 1
    // when part 1 has stored its part of record s - 1, whose counts are then in n1.
    uint32_t pushed, ab, c, end;
    uint32_t n1_fetch, n1_evict, n1_sync_now, n1_private;
    int fin, stop, err;
    char msg[512]; // part 1's error (a bad id in its tables' columns)
    plan *dst;          // with c: part 0's record s - 1, where part 1 stores its own (split_end1)
    plan_sync *sync_out; // and part 0's sorted sync-later list, sync_n entries in all
    uint32_t sync_n;
} split_sync;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void sp_post(split_sync *g, uint32_t *at, uint32_t v) {
    pthread_mutex_lock(&g->mu);
    __atomic_store_n(at, v, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

// Waits until *at >= v: polls first (the other part is usually microseconds away), then sleeps.
// Returns 0, or -1 when the split stopped or failed first.
static int sp_wait(split_sync *g, const uint32_t *at, uint32_t v) {
    for (int k = 0; k < SPLIT_SPIN; k++) {
        if (__atomic_load_n(at, __ATOMIC_ACQUIRE) >= v) return 0;
        cpu_relax();
    }
    pthread_mutex_lock(&g->mu);
    while (__atomic_load_n(at, __ATOMIC_ACQUIRE) < v && !g->stop && !g->err) pthread_cond_wait(&g->cv, &g->mu);
    const int r = __atomic_load_n(at, __ATOMIC_ACQUIRE) >= v ? 0 : -1;
    pthread_mutex_unlock(&g->mu);
    return r;
}

// The two groups of tables (grp[f] = 0 or 1): tables [0, k) and [k, F), so that each part reads
// and transposes only its own columns of a batch (transpose_avx2), balanced by
// bit_length(card)^2, the weight that follows a table's dedupe cost within a few percent here
// (docs/oracle.md, round 15); part 0, whose thread also runs step (c) and sets the record's
// cursors, takes the lighter group.  (On the Kaggle tables: 0-11 and 12-25, weights
// 2674 and 2536.)
static void split_tables(uint32_t F, const uint64_t *card, uint8_t *grp) {
    uint64_t total = 0, best = UINT64_MAX, acc = 0;
    uint32_t k = 1;
    for (uint32_t f = 0; f < F; f++) {
        uint64_t bits = 0;
        for (uint64_t c = card[f]; c; c >>= 1) bits++;
        grp[f] = (uint8_t)bits; // (the weight's root, for the second pass)
        total += bits * bits;
    }
    for (uint32_t f = 0; f + 1 < F; f++) {
        acc += (uint64_t)grp[f] * grp[f];
        const uint64_t diff = acc > total - acc ? 2 * acc - total : total - 2 * acc;
        if (diff < best) best = diff, k = f + 1;
    }
    acc = 0;
    for (uint32_t f = 0; f < k; f++) acc += (uint64_t)grp[f] * grp[f];
    const uint8_t first = acc > total - acc; // the lighter side is part 0
    for (uint32_t f = 0; f < F; f++) grp[f] = f < k ? first : (uint8_t)!first;
}

// The one-thread push, after its checks: indexes the batch now.
static int index_pushed(oracle_impl *o, const uint32_t *ids, uint32_t n) {
    double c0 = thread_cpu();
    int rc = indexer_run(o, ids, n, o->n_retired, 1);
    o->cpu_index += thread_cpu() - c0;
    if (rc) return o->err = rc;
    o->n_indexed++;
    publish_mem(o);
    o->n_pushed++;
    return 0;
}

// The record of a split planner is part 0's, each part writing its own entries into it at
// once: once step (c) has fixed both parts' counts, part 0 makes room in its record and sets each
// part's cursors (split_prepare): the fetches, evictions and sync-now keys of part 1 after part
// 0's, and within each trainer's private keys and each group of sync-later entries, part 0's then
// part 1's.  Part 0 then fills its header and stores its private keys and sync-later entries
// (split_fill), while part 1 copies its lists and stores its own (split_end1).
static void split_prepare(oracle_impl *o, oracle_impl *q, uint32_t s) {
    split_sync *g = o->sp;
    plan *r0 = rec_prev(o, s), *r1 = rec_prev(q, s);
    g->dst = r0;
    if (s == 0) return;
    plan_reserve(r0, PLAN_LIST_FETCH, r1->n_fetch), plan_reserve(r0, PLAN_LIST_EVICT, r1->n_evict);
    plan_reserve(r0, PLAN_LIST_SYNC_NOW, r1->n_sync_now);
    const uint32_t T = o->T, nb = 2 * sync_span(o), n = r0->n_sync_later + r1->n_sync_later;
    memset(r0->priv_off, 0, (size_t)(T + 1) * sizeof *r0->priv_off);
    memset(q->pv_cursor, 0, T * sizeof *q->pv_cursor);
    for (uint32_t k = 0; k < o->pv_n; k++) r0->priv_off[o->pv_tr[k] + 1]++;
    for (uint32_t k = 0; k < q->pv_n; k++) q->pv_cursor[q->pv_tr[k]]++;
    for (uint32_t i = 0; i < T; i++) {
        const uint32_t mine = r0->priv_off[i + 1];
        r0->priv_off[i + 1] = r0->priv_off[i] + mine + q->pv_cursor[i];
        o->pv_cursor[i] = r0->priv_off[i], q->pv_cursor[i] = r0->priv_off[i] + mine;
    }
    plan_reserve_private(r0, o->pv_n + q->pv_n);
    sync_room_tmp(o, r0, n);
    g->sync_out = o->sync_tmp, g->sync_n = n;
    uint32_t start = 0;
    for (uint32_t b = 0; b < nb; b++) {
        o->sync_cur[b] = start, q->sync_cur[b] = start + o->sync_cnt[b + 1];
        start += o->sync_cnt[b + 1] + q->sync_cnt[b + 1];
    }
    BP_ASSERT(start == n); // every entry noted
}

static void split_fill(oracle_impl *o, plan *r, uint32_t t) {
    record_header(o, r, t);
    private_scatter(o, r);
    sync_scatter(o, r->sync_later, r->n_sync_later, o->sync_cur, o->sp->sync_out, o->sp->sync_n);
}

// The end of step s on part 1 of a split planner: its part of the record (above) into dst, part
// 0's record, and into part 0's sorted sync-later list (sync_tmp, n entries in all).  Returns 1
// if there was a record.
static int split_end1(oracle_impl *q, plan *dst, plan_sync *sync_out, uint32_t n) {
    const uint32_t s = q->step;
    phase_end(q->ph_plan, &q->ph_plan_t, ORACLE_PH_PRESSURE);
    if (s == 0) return 0;
    const plan *b = rec_prev(q, s);
    // (lists never used are NULL: no copy, no offset)
    if (b->n_fetch) memcpy(dst->fetch + dst->n_fetch, b->fetch, (size_t)b->n_fetch * sizeof *b->fetch);
    if (b->n_evict) memcpy(dst->evict + dst->n_evict, b->evict, (size_t)b->n_evict * sizeof *b->evict);
    if (b->n_sync_now)
        memcpy(dst->sync_now + dst->n_sync_now, b->sync_now, (size_t)b->n_sync_now * sizeof *b->sync_now);
    private_scatter(q, dst);
    sync_scatter(q, b->sync_later, b->n_sync_later, q->sync_cur, sync_out, n);
    phase_end(q->ph_plan, &q->ph_plan_t, ORACLE_PH_RECORD);
    return 1;
}

// Part 1 after its split_end1 of step s (r: it stored a record): the counts of its entries into g,
// for part 0 to add to its record's once end is posted (part 1 may be planning its next step by
// then), its record reset, and its next step.
static void split_end1_done(oracle_impl *q, split_sync *g, uint32_t s, int r) {
    plan *r1 = rec_prev(q, s);
    g->n1_fetch = r1->n_fetch, g->n1_evict = r1->n_evict, g->n1_sync_now = r1->n_sync_now, g->n1_private = q->pv_n;
    plan_reset(r1, q->T);
    q->step = s + 1;
    if (r) q->n_retired = s;
}

// Part 1's thread: indexes each batch as it is pushed (ahead of the steps when the caller pushes
// ahead), and runs step s as soon as it holds the batches the step reads (at the end of the input,
// every batch pushed: the horizon is cut at the last one), as part 0 does: the two compute the
// same horizon, whichever sees the end of the input first (step_horizon's cut is never needed
// before a batch that exists is missing).  So part 1 may start step s + 1 while part 0 ends step
// s.  A step that can run goes first.
static void *split_thread(void *arg) {
    oracle_impl *q = arg;
    split_sync *g = q->sp;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        const uint32_t s = q->step;
        int ready = 0;
        while (!g->stop && !g->err) {
            const int fin = g->fin && q->n_pushed == g->pushed;
            ready = fin ? q->n_pushed >= 1 && s <= q->n_pushed : q->n_pushed >= s + q->P + q->W + 1;
            if (ready) q->finished = fin;
            if (ready || (g->q_count > 0 && q->n_pushed < q->R + q->n_retired)) break;
            pthread_cond_wait(&g->cv, &g->mu);
        }
        if (g->stop || g->err) break;
        if (!ready) {
            const uint32_t *ids = g->q_ids[g->q_head], n = g->q_n[g->q_head];
            pthread_mutex_unlock(&g->mu);
            const int rc = index_pushed(q, ids, n);
            pthread_mutex_lock(&g->mu);
            g->q_head = (g->q_head + 1) % SPLIT_Q, g->q_count--;
            if (rc) g->err = rc, snprintf(g->msg, sizeof g->msg, "%s", bp_errmsg(rc));
            pthread_cond_broadcast(&g->cv);
            continue;
        }
        pthread_mutex_unlock(&g->mu);
        double c0 = thread_cpu();
        step_ab(q);
        q->cpu_plan += thread_cpu() - c0;
        sp_post(g, &g->ab, s + 1);
        if (sp_wait(g, &g->c, s + 1)) {
            pthread_mutex_lock(&g->mu);
            break;
        }
        c0 = thread_cpu();
        q->ph_plan_t = bp_now();
        split_end1_done(q, g, s, split_end1(q, g->dst, g->sync_out, g->sync_n)); // (read once end is posted)
        q->cpu_plan += thread_cpu() - c0;
        pthread_mutex_lock(&g->mu);
        stats_of(q, &q->st_pub);
        __atomic_store_n(&g->end, s + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

// Part 1's error, reported in the caller's thread (a bad id in its tables' columns, found where it
// indexes the batch: at a later push or step than the batch's own, as the two-thread indexer's).
static int split_failed(split_sync *g) {
    pthread_mutex_lock(&g->mu);
    const int e = g->err ? g->err : BP_EINVAL;
    char m[sizeof g->msg];
    snprintf(m, sizeof m, "%s", g->err ? g->msg : "oracle: the second part of the split planner stopped");
    pthread_mutex_unlock(&g->mu);
    return bp_fail(e, "%s", m);
}

static int split_push(oracle_impl *o, const uint32_t *ids, uint32_t n) {
    split_sync *g = o->sp;
    if (g->threads == 1) {
        const int rc = index_pushed(o, ids, n);
        return rc ? rc : (o->err = index_pushed(o->peer, ids, n));
    }
    pthread_mutex_lock(&g->mu);
    while (g->q_count == SPLIT_Q && !g->err) pthread_cond_wait(&g->cv, &g->mu);
    if (g->err) {
        pthread_mutex_unlock(&g->mu);
        return o->err = split_failed(g);
    }
    const uint32_t k = (g->q_head + g->q_count) % SPLIT_Q;
    const uint32_t *mine = ids;
    if (!o->borrow) {
        memcpy(g->q_buf[k], ids, (size_t)n * o->F * sizeof *ids);
        ids = g->q_buf[k];
    }
    g->q_ids[k] = ids, g->q_n[k] = n, g->q_count++, g->pushed++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return index_pushed(o, mine, n);
}

static int split_next_plan(oracle_impl *o, plan *p) {
    oracle_impl *q = o->peer, *const ps[2] = {o, q};
    split_sync *g = o->sp;
    for (;;) {
        if (o->err) return o->err;
        if (o->done) return 0;
        const uint32_t s = o->step;
        if (o->finished) {
            if (o->n_pushed == 0 || s > o->n_pushed) {
                o->done = 1;
                return 0;
            }
        } else if (o->n_pushed < s + o->P + o->W + 1 + (g->threads == 2 ? ORACLE_INDEX_AHEAD : 0)) {
            return 0; // (with two threads, part 1 indexes the batches pushed ahead while it waits)
        }
        double c0 = thread_cpu();
        if (g->threads == 1) q->finished = o->finished;
        step_ab(o);
        if (g->threads == 1) step_ab(q);
        else if (sp_wait(g, &g->ab, s + 1))
            return o->err = split_failed(g);
        o->ph_plan_t = bp_now(); // (with one thread, part 1's (a) and (b) ran since part 0's)
        int rc = step_c(ps, 2, s, step_horizon(o));
        if (rc < 0) {
            if (g->threads == 2) {
                pthread_mutex_lock(&g->mu);
                g->err = rc;
                pthread_cond_broadcast(&g->cv);
                pthread_mutex_unlock(&g->mu);
            }
            return rc;
        }
        plan *r0 = rec_prev(o, s), *r1 = rec_prev(q, s);
        split_prepare(o, q, s);
        const uint32_t n_sync = s ? r0->n_sync_later + r1->n_sync_later : 0;
        if (g->threads == 2) sp_post(g, &g->c, s + 1);
        const int r = step_end(o, 1);
        if (g->threads == 1) {
            q->ph_plan_t = bp_now();
            split_end1_done(q, g, s, split_end1(q, r0, o->sync_tmp, n_sync));
        } else if (sp_wait(g, &g->end, s + 1)) {
            return o->err = split_failed(g);
        }
        o->step = s + 1;
        if (r == 1) { // (part 1 may be planning its next step: its counts come from g)
            r0->n_fetch += g->n1_fetch, r0->n_evict += g->n1_evict, r0->n_sync_now += g->n1_sync_now;
            r0->n_private = o->pv_n + g->n1_private;
            sync_swap(o, r0, n_sync);
            plan_swap(p, r0);
            plan_reset(r0, o->T);
            o->n_retired = s;
        }
        o->cpu_plan += thread_cpu() - c0;
        if (r == 1) {
            if (o->finished && s == o->n_pushed) {
                BP_ASSERTF(o->shared_count == 0 && q->shared_count == 0,
                           "oracle: %llu + %llu shared keys resident after the last batch",
                           (unsigned long long)o->shared_count, (unsigned long long)q->shared_count);
                for (uint32_t i = 0; i < o->T; i++) BP_ASSERT(o->priv_count[i] == 0 && q->priv_count[i] == 0);
                o->done = 1;
            }
            return 1;
        }
    }
}

// Starts part 1 (q) next to part 0 (o): with threads = 2 on a thread of its own.
static int split_start(oracle_impl *o, oracle_impl *q, int threads) {
    split_sync *g = bp_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->threads = threads;
    o->peer = q, o->sp = q->sp = g;
    if (threads == 1) return 0;
    if (!o->borrow)
        for (int k = 0; k < SPLIT_Q; k++) g->q_buf[k] = bp_xmalloc((size_t)o->B * o->F * sizeof(uint32_t));
    if (pthread_create(&g->th, NULL, split_thread, q) != 0)
        return bp_fail(BP_ENOMEM, "oracle: cannot start the thread of the planner's second part");
    g->th_started = 1;
    return 0;
}

static void split_stop(oracle_impl *o) {
    split_sync *g = o->sp;
    if (g->th_started) stop_thread(&g->mu, &g->cv, &g->stop, g->th);
    oracle part1 = {o->peer};
    o->peer = NULL;
    oracle_free(&part1);
    for (int k = 0; k < SPLIT_Q; k++) free(g->q_buf[k]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
    o->sp = NULL;
}

int oracle_init(oracle *out, const oracle_config *cfg) {
    out->impl = NULL;
    if (cfg->groups < 0 || cfg->groups > 2) return bp_fail(BP_EINVAL, "oracle: groups must be 0, 1 or 2 (%d)", cfg->groups);
    if (cfg->groups < 2 || cfg->F < 2) return init_part(out, cfg, NULL, 0, cfg->threads);
    if (cfg->threads != 1 && cfg->threads != 2) return bp_fail(BP_EINVAL, "oracle: threads must be 1 or 2");
    uint8_t *grp = bp_xmalloc(cfg->F);
    split_tables(cfg->F, cfg->card, grp);
    oracle_config c1 = *cfg;
    c1.threads = 1, c1.groups = 1;
    oracle a = {NULL}, b = {NULL};
    int rc = init_part(&a, &c1, grp, 0, cfg->threads);
    if (!rc) rc = init_part(&b, &c1, grp, 1, cfg->threads);
    free(grp);
    if (rc) {
        oracle_free(&a);
        return rc;
    }
    out->impl = a.impl;
    if ((rc = split_start(a.impl, b.impl, cfg->threads)) != 0) {
        if (!a.impl->peer) oracle_free(&b);
        oracle_free(out);
        return rc;
    }
    return 0;
}

void oracle_free(oracle *out) {
    oracle_impl *o = out ? out->impl : NULL;
    if (!o) return;
    if (o->peer) split_stop(o);
    if (o->th_started) stop_thread(&o->mu, &o->cv, &o->stop, o->th);
    if (o->mu_init) {
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
    }
    for (int i = 0; i < INQ; i++) free(o->inbuf[i]);
    size_t per = (size_t)o->B * o->F, kw = o->key32 ? 4 : 8, uw = o->users8 ? 1 : 8;
    for (int k = 0; k < 6; k++)
        if (o->slot_pool[k]) big_free(o->slot_pool[k], o->slot_pool_bytes[k]);
    uint64_t arr[6];
    slot_arrays(per, kw, uw, arr);
    for (uint32_t j = 0; o->slots && j < o->R && !o->slot_pool[0]; j++) {
        big_free(o->slots[j].key, arr[0]);
        big_free(o->slots[j].act, arr[1]);
        big_free(o->slots[j].prev, arr[2]);
        big_free(o->slots[j].users, arr[3]);
        big_free(o->slots[j].miss, arr[4]);
        big_free(o->slots[j].priv, arr[5]);
    }
    free(o->slots);
    big_free(o->act_free, (size_t)o->act_cap * sizeof *o->act_free);
    big_free(o->act_gate, (size_t)o->act_cap * sizeof *o->act_gate);
    big_free(o->lk.p, o->nexts_bytes);
    if (o->km) big_free(o->km, o->km_bytes);
    hmap_free(&o->hm);
    for (uint32_t j = 0; o->bucket && j < o->R; j++) free(o->bucket[j]);
    free(o->bucket), free(o->bucket_n), free(o->bucket_cap), free(o->bucket_upto), free(o->lz_tmp);
    free(o->part_tmp), free(o->dm_cand), free(o->dm_take);
    if (o->grp)
        for (uint32_t j = 0; j < o->R; j++) free(o->grp[j]);
    free(o->grp), free(o->grp_cap), free(o->grp_lo), free(o->grp_hi), free(o->grp_off), free(o->gtmp);
    if (o->far)
        for (uint32_t j = 0; j < o->R; j++) free(o->far[j]);
    free(o->far), free(o->far_n), free(o->far_cap);
    big_free(o->lz_sync, per * sizeof *o->lz_sync);
    big_free(o->cand, per * sizeof *o->cand);
    big_free(o->far_pos, per * sizeof *o->far_pos);
    big_free(o->bits_ev, (per / 64 + 1) * sizeof *o->bits_ev);
    big_free(o->bits_now, (per / 64 + 1) * sizeof *o->bits_now);
    big_free(o->bits_last, (per / 64 + 1) * sizeof *o->bits_last);
    free(o->priv_count), free(o->pv_key), free(o->pv_tr), free(o->pv_cursor), free(o->sync_tmp), free(o->sync_bk),
        free(o->sync_cnt), free(o->sync_cur);
    free(o->offset), free(o->card), free(o->tabs), free(o->cols), free(o->dist), free(o->back_tab), free(o->card32);
    big_free(o->bl_list, per * sizeof *o->bl_list);
    plan_free(&o->rec[0]), plan_free(&o->rec[1]);
    free(o);
    out->impl = NULL;
}

int oracle_push_samples(oracle *out, const uint32_t *ids, uint32_t n) {
    oracle_impl *o = out->impl;
    if (o->err) return o->err;
    if (n < 1 || n > o->B) return bp_fail(BP_EINVAL, "oracle: batch of %u samples, expected 1..%u", n, o->B);
    if (o->finished || o->last_short)
        return bp_fail(BP_EINVAL, "oracle: batch %u pushed after %s", o->n_pushed,
                       o->finished ? "oracle_finish" : "a short batch (only the last batch may be short)");
    if (o->n_pushed >= NIL - o->P - o->W - 8) return bp_fail(BP_ERANGE, "oracle: too many batches");
    if (o->n_pushed >= o->R + o->n_retired)
        return bp_fail(BP_EINVAL, "oracle: window full: call oracle_next_plan after each push");
    if (n < o->B) o->last_short = 1;
    if (o->peer) return split_push(o, ids, n);
    if (o->threads == 1) return index_pushed(o, ids, n);
    pthread_mutex_lock(&o->mu);
    while (o->in_count == INQ && !o->idx_err) pthread_cond_wait(&o->cv, &o->mu);
    if (o->idx_err) {
        pthread_mutex_unlock(&o->mu);
        return o->err = bp_fail(o->idx_err, "%s", o->idx_msg);
    }
    uint32_t k = (o->in_head + o->in_count) % INQ;
    if (!o->borrow) {
        memcpy(o->inbuf[k], ids, (size_t)n * o->F * sizeof *ids);
        ids = o->inbuf[k];
    }
    o->inq[k] = (inbatch){ids, n};
    o->in_count++;
    o->n_pushed++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return 0;
}

int oracle_push_batch(oracle *o, const uint32_t *ids) { return oracle_push_samples(o, ids, o->impl->B); }

int oracle_finish(oracle *out) {
    oracle_impl *o = out->impl;
    lock(o);
    o->finished = 1;
    unlock(o);
    if (o->sp) { // a split planner: part 1 learns it too
        pthread_mutex_lock(&o->sp->mu);
        o->sp->fin = 1;
        pthread_cond_broadcast(&o->sp->cv);
        pthread_mutex_unlock(&o->sp->mu);
    }
    return o->err;
}

int oracle_done(const oracle *o) { return o->impl->done; }

// With two threads, called (mu held) where the planner would otherwise return or wait: links the
// batches the indexer has published so far (link_batch), one at a time with mu released.  At the
// start the whole window is indexed before step 0 can run, and step 0 would otherwise link it all
// at once (~150 ms at W = 200).  Returns 1 if it linked a batch.
static int link_published(oracle_impl *o) {
    if (o->n_linked >= o->n_indexed || o->idx_err) return 0;
    pthread_mutex_unlock(&o->mu);
    double c0 = thread_cpu();
    link_next(o);
    o->cpu_plan += thread_cpu() - c0;
    pthread_mutex_lock(&o->mu);
    return 1;
}

int oracle_next_plan(oracle *out, plan *p) {
    oracle_impl *o = out->impl;
    if (o->peer) return split_next_plan(o, p);
    for (;;) {
        if (o->err) return o->err;
        if (o->done) return 0;
        uint32_t s = o->step, need; // batches that must be indexed before step s
        if (o->finished) {
            if (o->n_pushed == 0 || s > o->n_pushed) {
                o->done = 1;
                return 0;
            }
            need = BP_MIN(s + o->P + o->W + 1, o->n_pushed);
        } else {
            need = s + o->P + o->W + 1;
            if (o->n_pushed < need + (o->threads == 2 ? ORACLE_INDEX_AHEAD : 0)) {
                if (o->threads == 2) { // link what is published meanwhile, without waiting
                    pthread_mutex_lock(&o->mu);
                    while (link_published(o)) {}
                    pthread_mutex_unlock(&o->mu);
                }
                return 0;
            }
        }
        if (o->threads == 2) {
            pthread_mutex_lock(&o->mu);
            if (o->n_indexed < need && !o->idx_err) o->idx_links = 0; // the indexer lags: link here
            while (o->n_indexed < need && !o->idx_err)
                if (!link_published(o)) pthread_cond_wait(&o->cv, &o->mu);
            int e = o->idx_err;
            pthread_mutex_unlock(&o->mu);
            if (e) return o->err = bp_fail(e, "%s", o->idx_msg);
        }
        double c0 = thread_cpu();
        int rc = plan_step(o);
        o->cpu_plan += thread_cpu() - c0;
        if (rc < 0) return rc;
        o->step++;
        if (rc == 1) {
            uint32_t t = s - 1;
            plan *r = &o->rec[t & 1];
            plan_swap(p, r);
            plan_reset(r, o->T);
            lock(o);
            o->n_retired = s; // batch s-1 is no longer needed by the planner
            if (o->threads == 2) pthread_cond_broadcast(&o->cv);
            unlock(o);
            if (o->finished && s == o->n_pushed) {
                BP_ASSERTF(o->shared_count == 0, "oracle: %llu shared keys resident after the last batch",
                           (unsigned long long)o->shared_count);
                for (uint32_t i = 0; i < o->T; i++) BP_ASSERT(o->priv_count[i] == 0);
                o->done = 1;
            }
            return 1;
        }
    }
}

const char *oracle_phase_name(int phase) {
    static const char *const names[ORACLE_PHASES] = {"retire", "transpose", "dedupe",   "backlink", "link",
                                                     "complete", "fetch",   "pressure", "record"};
    return phase >= 0 && phase < ORACLE_PHASES ? names[phase] : "?";
}

// The slots' arrays when a batch has up to occ unique keys, of per entries each (B x F): their
// entries, where each slot's arrays are their own mappings or heap blocks of at least a megabyte
// (oracle_init); where they are carved from one mapping per array, a page at least per slot and
// array (only the pages written are resident), or all of it where that mapping is a heap block.
static uint64_t slots_bytes(uint64_t R, uint64_t per, uint64_t occ, uint64_t kw, uint64_t uw) {
    uint64_t arr[6], used[6], sum = 0;
    slot_arrays(per, kw, uw, arr), slot_arrays(occ, kw, uw, used);
    for (int k = 0; k < 6; k++) {
        const uint64_t step = pool_step(arr[k]);
        if (arr[0] >= MAP_MIN) sum += R * used[k];
        else if (R * step < MAP_MIN) sum += R * step;
        else sum += R * BP_MAX((uint64_t)4096, (used[k] + 4095) / 4096 * 4096);
    }
    return sum;
}

// The lists of a record, each grown to one batch's unique keys or more (oracle_mem_estimate).
#define PLAN_BYTES_PER_KEY (sizeof(plan_fetch) + sizeof(plan_evict) + 2 * sizeof(uint64_t) + sizeof(plan_sync))

// The stats of one part (locks are the caller's).
static void stats_of(oracle_impl *o, oracle_stats *st) {
    *st = o->st;
    uint64_t mem = o->pub_acts * (sizeof(uint32_t) + sizeof(uint64_t));
    mem += slots_bytes(o->R, (uint64_t)o->B * o->F, o->pub_occ, o->key32 ? 4 : 8, o->users8 ? 1 : 8);
    mem += nexts_bytes(o->pub_occ, o->R);
    uint64_t words = 0; // the flat keymap's words of this part's tables (untouched pages cost nothing)
    for (uint32_t x = 0; x < o->nt; x++) words += o->card[o->tabs[x]];
    mem += o->km_flat ? words * sizeof *o->km : o->pub_hm_cap * 16;
    // lz_sync, cand, far_pos and bl_list
    mem += (uint64_t)o->pub_occ * 4 * sizeof(uint32_t);
    mem += (uint64_t)COLS_LD(o->B / o->T + 1) * o->F * sizeof(uint32_t);
    for (uint32_t j = 0; j < o->R; j++) mem += (uint64_t)o->bucket_cap[j] * sizeof(bentry);
    mem += (uint64_t)o->lz_cap * sizeof(uint64_t) + (uint64_t)o->part_cap * sizeof(bentry);
    for (uint32_t j = 0; j < o->R; j++) mem += (uint64_t)o->grp_cap[j] * sizeof(uint64_t);
    mem += (uint64_t)o->gtmp_cap * sizeof(uint64_t) + (uint64_t)o->R * (o->grp_stride + 2) * sizeof(uint32_t);
    // The planner's two records and its scratch for private keys and sorted sync-later lists, and
    // the input copies of the two-thread queue.
    mem += plan_list_bytes(&o->rec[0]) + plan_list_bytes(&o->rec[1]);
    mem += (uint64_t)o->pv_cap * (sizeof *o->pv_key + sizeof *o->pv_tr) + (uint64_t)o->sync_cap * sizeof(plan_sync) +
           (uint64_t)o->sync_bk_cap * sizeof(uint32_t);
    if (o->threads == 2 && !o->borrow) mem += (uint64_t)INQ * o->B * o->F * sizeof(uint32_t);
    o->mem_peak = mem = BP_MAX(o->mem_peak, mem);
    st->active_peak = o->pub_acts;
    st->cpu_index_s = o->cpu_index, st->cpu_plan_s = o->cpu_plan;
    for (int k = 0; k < ORACLE_PHASES; k++) st->phase_s[k] = o->ph_pub[k] + o->ph_plan[k];
    st->mem_bytes = mem;
    st->parts = 1;
}

void oracle_get_stats(const oracle *out, oracle_stats *st) {
    oracle_impl *o = out->impl;
    lock(o);
    stats_of(o, st);
    unlock(o);
    if (!o->peer) return;
    // A split planner: the parts' counts add up; batches, samples and the peak residency (over
    // both parts, kept by part 0's step (c)) are part 0's.
    oracle_stats b;
    if (o->sp->threads == 2) {
        pthread_mutex_lock(&o->sp->mu);
        b = o->peer->st_pub;
        pthread_mutex_unlock(&o->sp->mu);
    } else {
        stats_of(o->peer, &b);
    }
    st->accesses += b.accesses, st->hits += b.hits, st->unique += b.unique;
    st->fetches += b.fetches, st->fetches_private += b.fetches_private;
    st->evictions += b.evictions, st->evictions_private += b.evictions_private;
    st->evictions_pressure += b.evictions_pressure, st->demotions += b.demotions;
    st->sync_now += b.sync_now, st->sync_later += b.sync_later, st->sync_restated += b.sync_restated;
    st->active_peak += b.active_peak, st->mem_bytes += b.mem_bytes;
    if (o->sp->threads == 2 && !o->borrow) st->mem_bytes += (uint64_t)SPLIT_Q * o->B * o->F * sizeof(uint32_t); // q_buf
    st->cpu_index_s += b.cpu_index_s, st->cpu_plan_s += b.cpu_plan_s;
    for (int k = 0; k < ORACLE_PHASES; k++) st->phase_s[k] += b.phase_s[k];
    st->parts = 2;
}

uint32_t oracle_parts(const oracle_config *cfg, uint8_t *grp) {
    const uint32_t parts = cfg->groups == 2 && cfg->F >= 2 ? 2 : 1;
    if (grp && parts == 2) split_tables(cfg->F, cfg->card, grp);
    else if (grp) memset(grp, 0, cfg->F);
    return parts;
}

int oracle_window_figures(const bp_dataset *ds, uint64_t row0, uint64_t per_epoch, uint32_t B, uint64_t nb,
                          const uint8_t *grp, uint64_t *unique, uint64_t *distinct) {
    const uint64_t F = ds->info.n_sparse, K = bp_ds_total_card(&ds->info);
    const int parts = grp ? 2 : 1;
    for (int k = 0; k < parts; k++) { // the bounds: every id of the part's tables distinct
        uint64_t nf = 0, card = 0;
        for (uint64_t f = 0; f < F; f++)
            if (!grp || grp[f] == k) nf++, card += ds->info.card[f];
        unique[k] = (uint64_t)B * nf, distinct[k] = BP_MIN(card, nb * B * nf);
    }
    if (K > (1ull << 30) || per_epoch == 0 || nb == 0) return 0;
    uint64_t *off = bp_xmalloc((F ? F : 1) * sizeof *off), acc = 0;
    for (uint64_t f = 0; f < F; f++) off[f] = acc, acc += ds->info.card[f];
    uint64_t *win = calloc(K / 64 + 1, sizeof *win), *one = calloc(K / 64 + 1, sizeof *one);
    if (!win || !one) {
        free(win), free(one), free(off);
        return 0;
    }
    uint64_t U[2] = {0, 0}, D[2] = {0, 0};
    for (uint64_t t = 0; t < nb; t++) {
        const uint32_t *ids = ds->sparse + (row0 + (t % per_epoch) * B) * F;
        uint64_t u[2] = {0, 0};
        for (uint64_t j = 0; j < (uint64_t)B * F; j++) {
            const uint64_t k = off[j % F] + ids[j], bit = (uint64_t)1 << (k & 63);
            const int g = grp ? grp[j % F] : 0;
            if (!(one[k >> 6] & bit)) one[k >> 6] |= bit, u[g]++;
            if (!(win[k >> 6] & bit)) win[k >> 6] |= bit, D[g]++;
        }
        for (uint64_t j = 0; j < (uint64_t)B * F; j++) {
            const uint64_t k = off[j % F] + ids[j];
            one[k >> 6] &= ~((uint64_t)1 << (k & 63));
        }
        for (int g = 0; g < parts; g++) U[g] = BP_MAX(U[g], u[g]);
    }
    free(win), free(one), free(off);
    for (int g = 0; g < parts; g++) unique[g] = U[g], distinct[g] = D[g];
    return 1;
}

// One part's share of oracle_mem_estimate: its K_part keys (the flat keymap's words it touches),
// the most unique keys of one batch and the distinct keys of a window in its tables, and the
// resident keys it holds.
static uint64_t part_mem_estimate(const oracle_config *cfg, uint64_t K, uint64_t K_part, uint64_t unique,
                                  uint64_t distinct, uint64_t resident) {
    const uint64_t R = oracle_held_batches(cfg->W, cfg->P, cfg->threads), per_batch = (uint64_t)cfg->B * cfg->F;
    const uint64_t act_cap = BP_MIN(BP_MIN(K, R * per_batch), (uint64_t)0x7FFFFFFF);
    const uint64_t acts = BP_MIN(act_cap, BP_MIN(K_part, distinct + resident));
    const int km = cfg->keymap == ORACLE_KEYMAP_AUTO ? (K <= (1ull << 28) ? ORACLE_KEYMAP_FLAT : ORACLE_KEYMAP_HASH)
                                                     : cfg->keymap;
    // the same terms as oracle_get_stats, at these high-water marks
    uint64_t mem = acts * (sizeof(uint32_t) + sizeof(uint64_t));
    mem += slots_bytes(R, per_batch, unique, K <= (1ull << 32) ? 4 : 8, cfg->T <= 8 ? 1 : 8);
    mem += nexts_bytes(unique, R);
    mem += km == ORACLE_KEYMAP_FLAT ? K_part * sizeof(uint64_t) : 48 * acts; // hash: up to three tables while it grows
    mem += unique * 4 * sizeof(uint32_t);
    mem += (uint64_t)COLS_LD(cfg->B / cfg->T + 1) * cfg->F * sizeof(uint32_t);
    mem += resident * (sizeof(bentry) + sizeof(uint64_t)); // the buckets and bucket_fill's scratch at most
    mem += 2 * unique * sizeof(bentry); // bucket_lone_last's scratch: doubled up to one bucket (a batch's keys)
    mem += R * (GRP_CAP(unique) * sizeof(uint64_t) + (BP_MIN(GRP_SPAN_MAX, R) + 3) * sizeof(uint32_t)); // groups
    uint64_t lists = 1024; // the lists and the scratch double up to a batch's unique keys (and pv from 1024)
    while (lists < unique) lists *= 2;
    mem += lists * (2 * PLAN_BYTES_PER_KEY + sizeof(uint64_t) + sizeof(uint16_t) + sizeof(plan_sync) +
                    sizeof(uint32_t));
    return mem;
}

uint64_t oracle_mem_estimate(const oracle_config *cfg, const uint64_t *unique, const uint64_t *distinct) {
    uint64_t K = 0, Kp[2] = {0, 0};
    uint8_t *grp = bp_xmalloc(cfg->F ? cfg->F : 1);
    const uint32_t parts = oracle_parts(cfg, grp);
    for (uint32_t f = 0; f < cfg->F; f++) K += cfg->card[f], Kp[grp[f]] += cfg->card[f];
    free(grp);
    const uint64_t resident = BP_MIN((uint64_t)cfg->T * cfg->C, K), per_batch = (uint64_t)cfg->B * cfg->F;
    const double all = parts == 2 ? (double)distinct[0] + (double)distinct[1] : 0;
    uint64_t mem = 0;
    for (uint32_t k = 0; k < parts; k++) {
        const uint64_t res = parts == 1 || all == 0 ? resident / parts : (uint64_t)((double)resident * distinct[k] / all);
        mem += part_mem_estimate(cfg, K, Kp[k], unique[k], distinct[k], BP_MIN(res, Kp[k]));
    }
    // the input copies: the two-thread indexer's queue, or the second part's
    if (cfg->threads == 2 && !cfg->borrow_input)
        mem += (uint64_t)(parts == 2 ? SPLIT_Q : INQ) * per_batch * sizeof(uint32_t);
    return mem;
}

// ---------------------------------------------------------------------------------------------
// Trace driver

int oracle_run_dataset(const bp_dataset *ds, bp_split split, uint64_t max_rows, const oracle_config *cfg0,
                       oracle_sink sink, void *arg, oracle_stats *st) {
    uint64_t begin, end;
    bp_ds_split_range(ds, split, &begin, &end);
    if (max_rows && end - begin > max_rows) end = begin + max_rows;
    oracle_config cfg = *cfg0;
    cfg.F = ds->info.n_sparse, cfg.card = ds->info.card, cfg.row_base = begin, cfg.borrow_input = 1;
    oracle o;
    int rc = oracle_init(&o, &cfg);
    if (rc) return rc;
    plan p;
    plan_init(&p);
    const uint32_t F = cfg.F;
    for (uint64_t r = begin; r < end && !rc; r += cfg.B) {
        uint32_t n = (uint32_t)BP_MIN((uint64_t)cfg.B, end - r);
        rc = oracle_push_samples(&o, ds->sparse + r * F, n);
        while (!rc && (rc = oracle_next_plan(&o, &p)) == 1) rc = sink ? sink(&p, arg) : 0;
    }
    if (!rc) rc = oracle_finish(&o);
    while (!rc && (rc = oracle_next_plan(&o, &p)) == 1) rc = sink ? sink(&p, arg) : 0;
    if (st) oracle_get_stats(&o, st);
    plan_free(&p);
    oracle_free(&o);
    return rc;
}
