// role_bagpipe: a trainer of mode bagpipe (DESIGN §5-§6, plan.h, msg.h).
//
// Iteration t, trainer r of T (record t from the oracle says everything):
//   1. receive record t (MSG_PLAN, in order; the oracle runs ahead under credits)
//   2. issue its fetches: every row it names takes a cache slot now (a shared row on every
//      trainer, a private one on its user); r sends one FETCH per server for the rows it is the
//      fetcher of, gated (evict_iter, writer), and posts the receives of the replies and of the
//      other fetchers' forwards
//   3. wait until every fetch group issued at or before max(0, t - P) is complete (rows installed;
//      as a fetcher, shared rows forwarded to the other trainers in one FWD per group, groups in
//      order); while waiting, every later group makes progress too
//   4. gather the slice's rows from the cache slots, forward, BCE (scale 1/B global), backward;
//      dense all-reduce (deterministic, rank order) and the dense step, as mode sync
//   5. row gradients: coalesced; r's private keys updated in place; the partial gradients of
//      t's shared keys (sync-now and sync-later of grad_iter t) exchanged with every other
//      trainer (GSYNC) and summed per key in trainer-rank order, the first toucher copied, the
//      rest added (the servers' order in mode sync), then applied on every replica.  Sync-now keys
//      and the sync-later keys that record t evicts are reduced on the critical path; the other
//      sync-later keys of t (next use t + 2 or later) in the background: their exchange is posted
//      at once and applied at the end of t + 1, before its evictions (every deadline is >= t + 1)
//      (BAGPIPE_SYNC_LATER_NOW=1 reduces them with the sync-now ones, for comparisons).
//   6. evictions of record t leave the cache; r writes back the ones it owns (one WB per server
//      per iteration, empty or not, whose iter t + 1 advances r's watermark on the servers).
//      With every reduction of an evicted key done at t, a PLAN_WB_NEXT row is final at the end
//      of t and is written back then, as the gate of its next fetch (at t) requires (plan.h).
//   7. every ROLE_CREDIT_EVERY iterations, a CREDIT to the oracle.
// After the last iteration every cache is empty (the last record evicts everything) and the
// servers hold the whole model; trainer 0 collects it (DUMP_REQ after all write-backs) for the
// evaluation and --save, as in mode sync.
//
// Checkpoint at boundary K (ckpt_run.h; every trainer at the same boundary): each trainer writes
// the dirty rows of its cache that it owns (trainer-<i>.bin), each server its shard once every
// write-back through K - 1 is applied (DUMP_REQ flagged MSG_F_CKPT), trainer 0 the dense part and,
// with every part reported, the manifest.  Trainer 0 starts iteration K only after the servers
// have written, so no write-back of K reaches a shard before it is written.  Resuming, every row
// starts at home on the servers and every cache empty; the oracle plans from batch K.
//
// Evaluation at boundary K (--eval-every N, K a multiple of N below the last iteration; every
// trainer at the same boundary, before a checkpoint of K): the model after K iterations is read,
// nothing is written.  Each trainer sends trainer 0 the dirty rows of its cache that it owns
// (msg_server_of(key, T) == i, the checkpoint's partition; DUMP_ROWS(K) in chunks, the last
// flagged MSG_F_LAST, one empty message when it owns none); trainer 0 reads every shard
// (DUMP_REQ(K), answered once every write-back through K - 1 is applied), then lays the trainers'
// rows over it and evaluates.  Why that is the model of mode sync after K iterations, row by row:
//   - a row in no cache is on its server, written back by its last eviction (<= K - 1) in a
//     WB(<= K), applied before the dump is answered; nothing wrote it since.
//   - a cached row that is not dirty (fetched, not updated since; or its fetch still in flight)
//     has the value its server holds: the fetch read it after its gate, and only the row's next
//     eviction writes it back.
//   - a dirty row is a shared one (a private row is fetched for one iteration t, updated at t and
//     evicted at the end of t: never dirty at a boundary), so every trainer holds it, and holds the
//     same value (every reduction of t is applied on every replica at t); its owner sends it.
// No trainer passes iteration K's dense all-reduce before trainer 0 has the rows, so no
// write-back of K reaches a shard before the dump.  The caches, their dirty marks, the watermarks
// and the plan stay as they were; the only change is that write-backs held back by the test hook
// leave now (as at a checkpoint), which the watermarks make harmless.
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "emb.h"
#include "jsonl.h"
#include "metric.h"
#include "model.h"
#include "msg.h"
#include "nn.h"
#include "optim.h"
#include "plan.h"
#include "progress.h"
#include "role_loop.h"
#include "train.h"

#define EMPTY_KEY UINT64_MAX


// ---------------------------------------------------------------------------------------------
// The row cache: C slots of stride floats (rows with their optimizer state), a free stack and a
// key -> slot map.  Where the key space is at most DIRECT_MAX_KEYS and the array takes at most
// twice the hash map's memory (or 1 MiB) the map is an array indexed by key (slot + 1, 0: not
// resident): a lookup is one load, and the trainer looks keys up in ascending order
// (emb_grad_sort), which the hardware prefetchers follow through the array.  Otherwise (the
// hashed Terabyte ids, the Kaggle tables, a small cache over many keys) it is a hash map: linear
// probing, backward-shift deletion, at most half full; key and slot in one 16-byte entry, so a
// lookup touches one cache line.
enum { DIRECT_MAX_KEYS = 1 << 24 }; // 64 MB of map at most
typedef struct {
    uint64_t key;
    uint32_t slot;
} centry;

typedef struct {
    uint64_t C;
    int stride;
    float *rows;        // (C, stride)
    uint32_t *free_s;   // (C) stack of free slots
    uint64_t n_free;
    uint32_t *slot_for; // (C) for_iter of the fetch that filled the slot (hit accounting)
    uint8_t *ready;     // (C) the row has arrived
    uint8_t *dirty;     // (C) updated since it arrived (differs from the server's copy)
    uint32_t *mark_t;   // (C) the iteration + 1 whose record marked the slot's key (mark_k), 0: none
    uint8_t *mark_k;    // (C) MARK_* bits: what that record does with the key
    uint32_t *later_t;  // (C) grad_iter + 1 of the background reduction the key awaits, 0: none
    uint32_t *direct;   // (n_keys) slot + 1 of each key, 0: not resident; NULL: the hash map below
    uint64_t n_keys;
    centry *h;          // (mask + 1) the key -> slot map (key EMPTY_KEY: free), linear probing
    uint64_t mask;
    size_t rows_bytes;
} cache;

static int cache_init(cache *c, uint64_t C, int stride, uint64_t n_keys) {
    memset(c, 0, sizeof *c);
    if (C > UINT32_MAX) return bp_fail(BP_EINVAL, "--cache-rows %llu: at most %u", (unsigned long long)C, UINT32_MAX);
    c->C = C, c->stride = stride;
    c->rows_bytes = (size_t)C * stride * sizeof(float);
    c->rows = bp_alloc_huge(c->rows_bytes);
    if (!c->rows) return bp_fail(BP_ENOMEM, "--cache-rows %llu: cannot map %zu bytes", (unsigned long long)C, c->rows_bytes);
    c->free_s = bp_xmalloc(C * sizeof *c->free_s);
    for (uint64_t i = 0; i < C; i++) c->free_s[i] = (uint32_t)(C - 1 - i);
    c->n_free = C;
    c->slot_for = bp_xcalloc(C, sizeof *c->slot_for);
    c->ready = bp_xcalloc(C, 1);
    c->dirty = bp_xcalloc(C, 1);
    c->mark_t = bp_xcalloc(C, sizeof *c->mark_t);
    c->mark_k = bp_xcalloc(C, 1);
    c->later_t = bp_xcalloc(C, sizeof *c->later_t);
    c->n_keys = n_keys;
    uint64_t cap = 16;
    while (cap < 2 * C) cap *= 2;
    const uint64_t hash_bytes = cap * sizeof *c->h, direct_bytes = n_keys * sizeof *c->direct;
    const char *hook = getenv("BAGPIPE_TEST_HASH_MAP"); // test hook: the hash map at any key space
    const int direct = n_keys <= DIRECT_MAX_KEYS && direct_bytes <= BP_MAX(2 * hash_bytes, (uint64_t)1 << 20);
    if (direct && !(hook && *hook == '1')) {
        c->direct = bp_xcalloc(n_keys, sizeof *c->direct);
        return 0;
    }
    c->mask = cap - 1;
    c->h = bp_xmalloc(cap * sizeof *c->h);
    for (uint64_t i = 0; i < cap; i++) c->h[i].key = EMPTY_KEY;
    return 0;
}

static void cache_free(cache *c) {
    if (c->rows) bp_free_huge(c->rows, c->rows_bytes);
    free(c->free_s), free(c->slot_for), free(c->ready), free(c->dirty), free(c->mark_t), free(c->mark_k), free(c->later_t),
        free(c->direct), free(c->h);
    memset(c, 0, sizeof *c);
}

static int64_t cache_find(const cache *c, uint64_t key) {
    if (c->direct) return key < c->n_keys ? (int64_t)c->direct[key] - 1 : -1;
    for (uint64_t i = bp_mix64(key) & c->mask;; i = (i + 1) & c->mask) {
        if (c->h[i].key == key) return c->h[i].slot;
        if (c->h[i].key == EMPTY_KEY) return -1;
    }
}

static float *cache_row(const cache *c, uint32_t slot) { return c->rows + (size_t)slot * c->stride; }

// The map entries cache_find(c, key) reads first: for loops over many keys, PREFETCH_AHEAD ahead
// (the map is larger than the caches; a lookup is a memory access).
enum { PREFETCH_AHEAD = 16 };
static void cache_prefetch(const cache *c, uint64_t key) {
    if (c->direct) {
        if (key < c->n_keys) __builtin_prefetch(&c->direct[key]);
        return;
    }
    const uint64_t i = bp_mix64(key) & c->mask;
    __builtin_prefetch(&c->h[i]);
}

// What record t says of a resident key, as bits on its slot (one hash lookup per key, instead of
// sorted lists searched for every gradient): a mark of an older record reads as none.
enum { MARK_PRIVATE = 1, MARK_NOW = 2, MARK_LATER = 4, MARK_EVICT = 8 };
static void slot_mark(cache *c, uint32_t slot, int64_t t, uint8_t bits) {
    const uint32_t stamp = (uint32_t)t + 1;
    if (c->mark_t[slot] != stamp) c->mark_t[slot] = stamp, c->mark_k[slot] = 0;
    c->mark_k[slot] |= bits;
}
static void cache_mark(cache *c, uint64_t key, int64_t t, uint8_t bits) {
    int64_t slot = cache_find(c, key);
    if (slot >= 0) slot_mark(c, (uint32_t)slot, t, bits); // else not held here (another trainer's private key)
}
static uint8_t cache_marks(const cache *c, uint32_t slot, int64_t t) {
    return c->mark_t[slot] == (uint32_t)t + 1 ? c->mark_k[slot] : 0;
}

// A slot for key (not resident); -1 when the cache is full.
static int64_t cache_insert(cache *c, uint64_t key) {
    if (!c->n_free) return -1;
    uint32_t slot = c->free_s[--c->n_free];
    c->ready[slot] = 0, c->dirty[slot] = 0;
    if (c->direct) {
        BP_ASSERT(key < c->n_keys && c->direct[key] == 0);
        c->direct[key] = slot + 1;
        return slot;
    }
    uint64_t i = bp_mix64(key) & c->mask;
    while (c->h[i].key != EMPTY_KEY) {
        BP_ASSERT(c->h[i].key != key);
        i = (i + 1) & c->mask;
    }
    c->h[i] = (centry){key, slot};
    return slot;
}

// Removes key; returns its slot (now free) or -1 when it was not resident.
static int64_t cache_remove(cache *c, uint64_t key) {
    if (c->direct) {
        if (key >= c->n_keys || c->direct[key] == 0) return -1;
        const uint32_t slot = c->direct[key] - 1;
        c->direct[key] = 0;
        c->free_s[c->n_free++] = slot;
        return slot;
    }
    uint64_t i = bp_mix64(key) & c->mask;
    while (c->h[i].key != key) {
        if (c->h[i].key == EMPTY_KEY) return -1;
        i = (i + 1) & c->mask;
    }
    uint32_t slot = c->h[i].slot;
    for (uint64_t j = i;;) { // backward shift
        j = (j + 1) & c->mask;
        if (c->h[j].key == EMPTY_KEY) break;
        uint64_t h = bp_mix64(c->h[j].key) & c->mask;
        int movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (movable) c->h[i] = c->h[j], i = j;
    }
    c->h[i].key = EMPTY_KEY;
    c->free_s[c->n_free++] = slot;
    return slot;
}

static int cmp_u64(const void *a, const void *b);

// The resident keys whose rows are dirty and whose write-back owner I am (trainer me of T: the
// key's server rule), ascending, into out (NULL: only counted); returns how many.
static uint64_t cache_dirty_owned(const cache *c, int T, int me, uint64_t *out) {
    uint64_t n = 0;
    if (c->direct) {
        for (uint64_t k = 0; k < c->n_keys; k++)
            if (c->direct[k] && c->dirty[c->direct[k] - 1] && msg_server_of(k, T) == (uint32_t)me) {
                if (out) out[n] = k;
                n++;
            }
        return n;
    }
    for (uint64_t h = 0; h <= c->mask; h++)
        if (c->h[h].key != EMPTY_KEY && c->dirty[c->h[h].slot] && msg_server_of(c->h[h].key, T) == (uint32_t)me) {
            if (out) out[n] = c->h[h].key;
            n++;
        }
    if (out) qsort(out, n, sizeof *out, cmp_u64);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Fetch groups: the fetches of one record, from issue until every row is installed.
typedef struct {
    uint64_t key;
    uint32_t evict_iter, writer, flags, server;
} myfetch;

typedef struct {
    int64_t iter;       // the record that issued them, -1: slot unused
    int replies_left;   // server replies not yet installed
    int fwd_left;       // forwards from other fetchers not yet installed
    int forwarded;      // my shared rows sent on (or nothing to send)
    myfetch *mf;        // (mcap) my fetches, sorted by (server, key)
    uint32_t mn, mcap;
    msg_buf *req, *rep; // (S) FETCH messages and their replies
    uint32_t *req_n;    // (S)
    uint32_t *req_off;  // (S) first entry of server s in mf
    comm_req *req_rq, *rep_rq; // (S)
    uint8_t *req_live, *rep_live; // (S)
    msg_buf fwd;        // my forward
    comm_req *fwd_rq;   // (T)
    uint8_t *fwd_live;  // (T)
    msg_buf *fin;       // (T) forwards received
    comm_req *fin_rq;   // (T)
    uint32_t *fin_n;    // (T) rows expected from each fetcher
    uint8_t *fin_live;  // (T)
} fgroup;

typedef struct {
    const train_setup *su;
    trainer tr;
    cache c;
    int S, T, me, rank, first_server, first_trainer, P, G;
    int bmax, cap_keys;
    plan p;
    msg_buf planbuf;
    fgroup *g;          // (G) ring by record
    int64_t fwd_next;   // the record whose forward goes out next (forwards leave in record order)
    const float **erow; // (cap_keys) per (b, f) entry: its cache row
    uint32_t *gslot;    // (cap_keys) the cache slot of each key of my gradients tr.g
    float **urow;       // (cap_keys) their rows (T = 1: the in-place update)
    msg_buf gout;       // my GSYNC message
    msg_buf *gin;       // (T) the others' GSYNC messages
    comm_req *grq;      // (2 T)
    uint32_t *gcur;     // (T) merge cursors
    // the background reduction (sync-later keys of later_iter, sync_grads)
    int background;     // 1: sync-later keys reduced in the background (0: with the sync-now ones,
                        // BAGPIPE_SYNC_LATER_NOW=1, for comparisons)
    int64_t later_iter; // its iteration, -1: none in flight
    uint32_t lmine;     // keys in my message lout (its keys: the slots with later_t = later_iter + 1)
    msg_buf lout;       // my GSYNC message of later_iter
    msg_buf *lin;       // (T) the others'
    comm_req *lrq;      // (2 T)
    int lnr;            // requests posted in lrq
    float *gsum;        // (E)
    myfetch *wbl;       // (wbl_cap) my write-backs of t (key, slot in evict_iter), sorted
    uint32_t wbl_cap;
    msg_buf *wb;        // (2, S) WB messages, by iteration parity
    size_t *wb_len;     // (2, S)
    comm_req *wb_rq;    // (2, S)
    uint8_t *wb_live;   // (2, S)
    long wb_delay_us;   // test hook (BAGPIPE_TEST_WB_DELAY_US=N): send t's write-backs at the end of
                        // t + 1 after an N us pause, so peers' fetches reach the servers first
                        // and must wait for the watermark
    int64_t wb_held;    // iteration whose write-backs are built but not sent, -1: none
    long peer_delay_us; // test hook (BAGPIPE_TEST_PEER_DELAY_US=N): trainer 1 pauses N us before each
                        // forward, the last trainer before each GSYNC send (the servers pause
                        // before each reply to trainer 0), so messages of other peers overtake them
    int64_t wrong_key_iter; // test hook (BAGPIPE_TEST_WRONG_KEY=N): in record N as I receive it, one
                        // key listed for me (my first private key, else the first sync-now key)
                        // becomes a key outside the tables, so my plan check must fail
    uint8_t credit[MSG_HEADER_BYTES] __attribute__((aligned(8)));
    comm_req credit_rq;
    int credit_live;
    float *ar_work;
    size_t ar_work_n;
    void *dump;         // (dump_cap bytes) DUMP_ROWS messages: trainer 0, or any trainer with --eval-every
    size_t dump_cap;
    uint64_t *ekeys;    // (C) with --eval-every: the dirty rows I own at an evaluation boundary, ascending
    // metrics of the current window: seconds blocked on the record and the rows (steps 1-3), in
    // the row exchange and updates (5-7), in the dense all-reduce, and computing (4, with the
    // cache lookups that place each row)
    double t_wait, t_sync, t_ar, t_compute;
    uint64_t accesses, misses, resident_sum, resident_max, iters;
    uint64_t sync_now_keys, sync_bg_keys; // my partial gradients sent on the critical path / in the background (run)
} bstate;

static int cmp_myfetch(const void *a, const void *b) {
    const myfetch *x = a, *y = b;
    if (x->server != y->server) return x->server < y->server ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int bs_init(bstate *bs, const train_setup *su, const dist_layout *l, int i) {
    memset(bs, 0, sizeof *bs);
    bs->su = su, bs->S = l->S, bs->T = l->T, bs->me = i, bs->rank = dist_trainer_rank(l, i);
    bs->first_server = dist_server_rank(l, 0), bs->first_trainer = dist_trainer_rank(l, 0);
    bs->P = su->prefetch, bs->G = su->prefetch + 2;
    bs->fwd_next = su->ck.start_iter; // the first record: 0, or K when resumed at K
    bs->bmax = (su->B + l->T - 1) / l->T;
    const int F = su->mc.F, E = su->mc.E, S = bs->S, T = bs->T;
    int rc = train_replica_init(&bs->tr, su, bs->bmax, i);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, su->seed, 0);
    model_init_params(&bs->tr.m, &rng); // the same draws on every trainer: identical replicas
    if (su->ck.from[0] && (rc = ckpt_run_load_dense(&bs->tr, su))) return rc; // resuming: every replica
    if ((rc = cache_init(&bs->c, su->cache_rows, bs->tr.L.stride, bs->tr.L.rows))) return rc;
    plan_init(&bs->p);
    bs->cap_keys = bs->bmax * F;
    bs->erow = bp_xmalloc((size_t)bs->cap_keys * sizeof *bs->erow);
    bs->gslot = bp_xmalloc((size_t)bs->cap_keys * sizeof *bs->gslot);
    bs->urow = bp_xmalloc((size_t)bs->cap_keys * sizeof *bs->urow);
    bs->g = bp_xcalloc((size_t)bs->G, sizeof *bs->g);
    for (int k = 0; k < bs->G; k++) {
        fgroup *g = &bs->g[k];
        g->iter = -1;
        g->req = bp_xcalloc((size_t)S, sizeof *g->req), g->rep = bp_xcalloc((size_t)S, sizeof *g->rep);
        g->req_n = bp_xcalloc((size_t)S, sizeof *g->req_n), g->req_off = bp_xcalloc((size_t)S, sizeof *g->req_off);
        g->req_rq = bp_xcalloc((size_t)S, sizeof *g->req_rq), g->rep_rq = bp_xcalloc((size_t)S, sizeof *g->rep_rq);
        g->req_live = bp_xcalloc((size_t)S, 1), g->rep_live = bp_xcalloc((size_t)S, 1);
        g->fwd_rq = bp_xcalloc((size_t)T, sizeof *g->fwd_rq), g->fwd_live = bp_xcalloc((size_t)T, 1);
        g->fin = bp_xcalloc((size_t)T, sizeof *g->fin), g->fin_rq = bp_xcalloc((size_t)T, sizeof *g->fin_rq);
        g->fin_n = bp_xcalloc((size_t)T, sizeof *g->fin_n), g->fin_live = bp_xcalloc((size_t)T, 1);
    }
    msg_buf_fit(&bs->gout, msg_bytes(MSG_GSYNC, (uint32_t)bs->cap_keys, (uint32_t)E));
    bs->gin = bp_xcalloc((size_t)T, sizeof *bs->gin);
    for (int p = 0; p < T; p++)
        if (p != i) msg_buf_fit(&bs->gin[p], msg_bytes(MSG_GSYNC, (uint32_t)bs->cap_keys, (uint32_t)E));
    bs->grq = bp_xcalloc((size_t)2 * T, sizeof *bs->grq);
    bs->gcur = bp_xcalloc((size_t)T, sizeof *bs->gcur);
    msg_buf_fit(&bs->lout, msg_bytes(MSG_GSYNC, (uint32_t)bs->cap_keys, (uint32_t)E));
    bs->lin = bp_xcalloc((size_t)T, sizeof *bs->lin);
    for (int p = 0; p < T; p++)
        if (p != i) msg_buf_fit(&bs->lin[p], msg_bytes(MSG_GSYNC, (uint32_t)bs->cap_keys, (uint32_t)E));
    bs->lrq = bp_xcalloc((size_t)2 * T, sizeof *bs->lrq);
    const char *ln = getenv("BAGPIPE_SYNC_LATER_NOW");
    bs->background = !(ln && atoi(ln)), bs->later_iter = -1;
    bs->gsum = bp_xmalloc((size_t)E * sizeof *bs->gsum);
    bs->wb = bp_xcalloc((size_t)2 * S, sizeof *bs->wb);
    bs->wb_len = bp_xcalloc((size_t)2 * S, sizeof *bs->wb_len);
    bs->wb_rq = bp_xcalloc((size_t)2 * S, sizeof *bs->wb_rq);
    bs->wb_live = bp_xcalloc((size_t)2 * S, 1);
    const char *d = getenv("BAGPIPE_TEST_WB_DELAY_US");
    bs->wb_delay_us = d ? atol(d) : 0, bs->wb_held = -1;
    const char *pd = getenv("BAGPIPE_TEST_PEER_DELAY_US");
    bs->peer_delay_us = pd ? atol(pd) : 0;
    const char *dk = getenv("BAGPIPE_TEST_WRONG_KEY");
    bs->wrong_key_iter = dk ? atol(dk) : -1;
    const size_t n = bs->tr.m.n_params;
    bs->ar_work_n = (size_t)T * ((n + (size_t)T - 1) / (size_t)T + 1);
    bs->ar_work_n = BP_MAX(bs->ar_work_n, (size_t)2 * (T + 16)); // also T * ceil(n / T) doubles for n <= 16
    bs->ar_work = bp_xmalloc(bs->ar_work_n * sizeof(float));
    if ((i == 0 && dist_gathers(su)) || su->eval_every) {
        bs->dump_cap = role_dump_cap(&bs->tr.L);
        bs->dump = bp_xmalloc(bs->dump_cap);
    }
    if (su->eval_every) bs->ekeys = bp_xmalloc((size_t)BP_MAX(su->cache_rows, 1) * sizeof *bs->ekeys);
    return 0;
}

static void bs_free(bstate *bs) {
    for (int k = 0; bs->g && k < bs->G; k++) {
        fgroup *g = &bs->g[k];
        for (int s = 0; s < bs->S; s++) free(g->req[s].p), free(g->rep[s].p);
        for (int p = 0; p < bs->T; p++) free(g->fin[p].p);
        free(g->mf), free(g->req), free(g->rep), free(g->req_n), free(g->req_off), free(g->req_rq), free(g->rep_rq);
        free(g->req_live), free(g->rep_live), free(g->fwd.p), free(g->fwd_rq), free(g->fwd_live), free(g->fin);
        free(g->fin_rq), free(g->fin_n), free(g->fin_live);
    }
    for (int p = 0; bs->gin && p < bs->T; p++) free(bs->gin[p].p);
    for (int p = 0; bs->lin && p < bs->T; p++) free(bs->lin[p].p);
    free(bs->lout.p), free(bs->lin), free(bs->lrq);
    for (int s = 0; bs->wb && s < 2 * bs->S; s++) free(bs->wb[s].p);
    free(bs->g), free(bs->erow), free(bs->gslot), free(bs->urow), free(bs->gout.p), free(bs->gin), free(bs->grq);
    free(bs->gcur), free(bs->gsum), free(bs->wbl), free(bs->wb), free(bs->wb_len), free(bs->wb_rq), free(bs->wb_live);
    free(bs->ar_work), free(bs->dump), free(bs->ekeys), free(bs->planbuf.p);
    plan_free(&bs->p);
    cache_free(&bs->c);
    trainer_free(&bs->tr);
    memset(bs, 0, sizeof *bs);
}

// Waits for a live request and clears its flag.
static int wait_live(comm_req *q, uint8_t *live) {
    if (!*live) return 0;
    *live = 0;
    return comm_wait(q, NULL);
}

// ---------------------------------------------------------------------------------------------
// Step 2: issue the fetches of record p (in bs->p) as group p.iter.
static int issue_fetches(bstate *bs) {
    const plan *p = &bs->p;
    const int S = bs->S, T = bs->T, me = bs->me, stride = bs->c.stride;
    fgroup *g = &bs->g[p->iter % (uint32_t)bs->G];
    int rc = 0;
    if (g->iter >= 0) { // the group of record iter - G: complete long ago; release its sends
        BP_ASSERT(!g->replies_left && !g->fwd_left && g->forwarded);
        for (int s = 0; s < S && !rc; s++) rc = wait_live(&g->req_rq[s], &g->req_live[s]);
        for (int q = 0; q < T && !rc; q++) rc = wait_live(&g->fwd_rq[q], &g->fwd_live[q]);
        if (rc) return rc;
    }
    g->iter = p->iter, g->mn = 0, g->forwarded = 0, g->replies_left = 0, g->fwd_left = 0;
    memset(g->fin_n, 0, (size_t)T * sizeof *g->fin_n);
    for (uint32_t k = 0; k < p->n_fetch; k++) {
        const plan_fetch *f = &p->fetch[k];
        const int shared = !(f->flags & PLAN_PRIVATE);
        if (shared || f->fetcher == me) {
            int64_t slot = cache_insert(&bs->c, f->key);
            if (slot < 0)
                return bp_fail(BP_ECAPACITY, "trainer %d: record %u fetches key %llu but all %llu cache slots are taken",
                               me, p->iter, (unsigned long long)f->key, (unsigned long long)bs->c.C);
            bs->c.slot_for[slot] = f->for_iter;
        }
        if (f->fetcher == me) {
            if (g->mn == g->mcap) {
                g->mcap = g->mcap ? 2 * g->mcap : 1024;
                g->mf = bp_xrealloc(g->mf, (size_t)g->mcap * sizeof *g->mf);
            }
            g->mf[g->mn++] = (myfetch){f->key, f->evict_iter, f->writer, f->flags, msg_server_of(f->key, S)};
        } else if (shared) {
            g->fin_n[f->fetcher]++;
        }
    }
    if (g->mn) qsort(g->mf, g->mn, sizeof *g->mf, cmp_myfetch); // (g->mf is NULL until a first fetch of mine)
    memset(g->req_n, 0, (size_t)S * sizeof *g->req_n);
    for (uint32_t k = 0; k < g->mn; k++) g->req_n[g->mf[k].server]++;
    for (int s = 0, off = 0; s < S; s++) g->req_off[s] = (uint32_t)off, off += (int)g->req_n[s];
    // receives first, then the requests
    for (int s = 0; s < S && !rc; s++) {
        if (!g->req_n[s]) continue;
        void *rb = msg_buf_fit(&g->rep[s], msg_bytes(MSG_FETCH_REPLY, g->req_n[s], (uint32_t)stride));
        rc = comm_irecv(rb, msg_bytes(MSG_FETCH_REPLY, g->req_n[s], (uint32_t)stride), bs->first_server + s,
                        MSG_FETCH_REPLY, &g->rep_rq[s]);
        g->rep_live[s] = 1, g->replies_left++;
    }
    for (int q = 0; q < T && !rc; q++) {
        if (!g->fin_n[q]) continue;
        size_t len = msg_bytes(MSG_FWD, g->fin_n[q], (uint32_t)stride);
        rc = comm_irecv(msg_buf_fit(&g->fin[q], len), len, bs->first_trainer + q, MSG_FWD, &g->fin_rq[q]);
        g->fin_live[q] = 1, g->fwd_left++;
    }
    for (int s = 0; s < S && !rc; s++) {
        if (!g->req_n[s]) continue;
        size_t len = msg_bytes(MSG_FETCH, g->req_n[s], 2);
        void *b = msg_buf_fit(&g->req[s], len);
        msg_header h = {MSG_FETCH, 0, p->iter, g->req_n[s], 2};
        uint64_t *keys;
        float *gf;
        msg_encode(b, &h, &keys, &gf);
        uint32_t *gate = (uint32_t *)gf; // (n, 2) evict_iter, writer
        const myfetch *m = g->mf + g->req_off[s];
        for (uint32_t k = 0; k < g->req_n[s]; k++)
            keys[k] = m[k].key, gate[2 * k] = m[k].evict_iter, gate[2 * k + 1] = m[k].writer;
        rc = comm_isend(b, len, bs->first_server + s, MSG_FETCH, &g->req_rq[s]);
        g->req_live[s] = 1;
    }
    return rc;
}

// Copies n received rows (keys, rows) into their slots, which must be waiting for them.
static int install_rows(bstate *bs, const uint64_t *keys, const float *rows, uint32_t n, int from) {
    const int stride = bs->c.stride;
    for (uint32_t k = 0; k < n; k++) {
        int64_t slot = cache_find(&bs->c, keys[k]);
        if (slot < 0 || bs->c.ready[slot])
            return bp_fail(BP_EFORMAT, "trainer %d: rank %d sent row %llu, which no fetch of this trainer awaits", bs->me,
                           from, (unsigned long long)keys[k]);
        memcpy(cache_row(&bs->c, (uint32_t)slot), rows + (size_t)k * stride, (size_t)stride * sizeof(float));
        bs->c.ready[slot] = 1;
    }
    return 0;
}

// Moves group g forward without blocking.
static int group_progress(bstate *bs, fgroup *g) {
    const int S = bs->S, T = bs->T, stride = bs->c.stride;
    int rc = 0;
    for (int s = 0; s < S && !rc && g->replies_left; s++) {
        if (!g->rep_live[s]) continue;
        int fin = 0;
        size_t len = 0;
        if ((rc = comm_test(&g->rep_rq[s], &fin, &len)) || !fin) continue;
        g->rep_live[s] = 0, g->replies_left--;
        msg_expect ex = {.kind = MSG_FETCH_REPLY, .width = (uint32_t)stride, .max_n = g->req_n[s], .iter = g->iter};
        msg_header h;
        const float *rows;
        if ((rc = msg_decode(g->rep[s].p, len, bs->first_server + s, &ex, &h, NULL, &rows))) break;
        if (h.n != g->req_n[s]) {
            rc = bp_fail(BP_EFORMAT, "trainer %d: server rank %d answered %u rows for %u keys", bs->me,
                         bs->first_server + s, h.n, g->req_n[s]);
            break;
        }
        const myfetch *m = g->mf + g->req_off[s];
        for (uint32_t k = 0; k < h.n; k++) {
            int64_t slot = cache_find(&bs->c, m[k].key);
            BP_ASSERT(slot >= 0 && !bs->c.ready[slot]);
            memcpy(cache_row(&bs->c, (uint32_t)slot), rows + (size_t)k * stride, (size_t)stride * sizeof(float));
            bs->c.ready[slot] = 1;
        }
    }
    if (!rc && !g->replies_left && !g->forwarded && g->iter == bs->fwd_next) {
        uint32_t n = 0;
        for (uint32_t k = 0; k < g->mn; k++) n += !(g->mf[k].flags & PLAN_PRIVATE);
        if (n && T > 1) {
            size_t len = msg_bytes(MSG_FWD, n, (uint32_t)stride);
            void *b = msg_buf_fit(&g->fwd, len);
            msg_header h = {MSG_FWD, 0, (uint64_t)g->iter, n, (uint32_t)stride};
            uint64_t *keys;
            float *rows;
            msg_encode(b, &h, &keys, &rows);
            // ascending keys: merge the per-server runs (each ascending) by a sort of the copies
            uint32_t j = 0;
            for (uint32_t k = 0; k < g->mn; k++)
                if (!(g->mf[k].flags & PLAN_PRIVATE)) keys[j++] = g->mf[k].key;
            qsort(keys, n, sizeof *keys, cmp_u64);
            for (uint32_t k = 0; k < n; k++) {
                int64_t slot = cache_find(&bs->c, keys[k]);
                BP_ASSERT(slot >= 0);
                memcpy(rows + (size_t)k * stride, cache_row(&bs->c, (uint32_t)slot), (size_t)stride * sizeof(float));
            }
            if (bs->me == 1) bp_sleep_ns(1000 * (int64_t)bs->peer_delay_us);
            for (int q = 0; q < T && !rc; q++) {
                if (q == bs->me) continue;
                rc = comm_isend(b, len, bs->first_trainer + q, MSG_FWD, &g->fwd_rq[q]);
                g->fwd_live[q] = 1;
            }
        }
        g->forwarded = 1, bs->fwd_next++;
    }
    for (int q = 0; q < T && !rc && g->fwd_left; q++) {
        if (!g->fin_live[q]) continue;
        int fin = 0;
        size_t len = 0;
        if ((rc = comm_test(&g->fin_rq[q], &fin, &len)) || !fin) continue;
        g->fin_live[q] = 0, g->fwd_left--;
        msg_expect ex = {.kind = MSG_FWD, .width = (uint32_t)stride, .max_n = g->fin_n[q], .iter = g->iter,
                         .rows = bs->tr.L.rows};
        msg_header h;
        const uint64_t *keys;
        const float *rows;
        if ((rc = msg_decode(g->fin[q].p, len, bs->first_trainer + q, &ex, &h, &keys, &rows))) break;
        if (h.n != g->fin_n[q]) {
            rc = bp_fail(BP_EFORMAT, "trainer %d: trainer %d forwarded %u rows, the plan says %u", bs->me, q, h.n,
                         g->fin_n[q]);
            break;
        }
        rc = install_rows(bs, keys, rows, h.n, bs->first_trainer + q);
    }
    return rc;
}

static int group_complete(const fgroup *g) { return !g->replies_left && !g->fwd_left && g->forwarded; }

// What wait_groups waits for: the first reply or forward still open for a record at or before
// upto, by the rank that owes it (returned; -1 when none is open).
static int awaited(const bstate *bs, int64_t upto, int64_t issued, char *what, size_t cap) {
    snprintf(what, cap, "the rows of iteration %lld (fetches and forwards)", (long long)upto);
    for (int64_t r = BP_MAX((int64_t)0, issued - bs->G + 1); r <= BP_MIN(upto, issued); r++) {
        const fgroup *g = &bs->g[r % bs->G];
        if (g->iter != r || group_complete(g)) continue;
        for (int s = 0; s < bs->S; s++)
            if (g->rep_live[s]) {
                snprintf(what, cap, "the rows of iteration %lld: FETCH_REPLY from rank %d (server %d)", (long long)r,
                         bs->first_server + s, s);
                return bs->first_server + s;
            }
        for (int q = 0; q < bs->T; q++)
            if (g->fin_live[q]) {
                snprintf(what, cap, "the rows of iteration %lld: FWD from rank %d (trainer %d)", (long long)r,
                         bs->first_trainer + q, q);
                return bs->first_trainer + q;
            }
    }
    return -1;
}

// Step 3: every group issued at or before `upto` complete; the others progress meanwhile.
// upto < 0 makes one pass without waiting (replies installed, forwards sent as far as possible).
static int wait_groups(bstate *bs, int64_t upto, int64_t issued) {
    int polls = 0;
    long sleep_ns = 0;
    double since = 0;  // the stall clock (comm_stall_check), restarted when anything arrives
    long open_was = -1; // replies, forwards and sends still open after the previous pass
    for (;;) {
        int all = 1, rc = 0;
        long open = 0;
        for (int64_t r = BP_MAX((int64_t)0, issued - bs->G + 1); r <= issued && !rc; r++) {
            fgroup *g = &bs->g[r % bs->G];
            if (g->iter != r || group_complete(g)) continue;
            rc = group_progress(bs, g);
            if (!rc && r <= upto && !group_complete(g)) all = 0;
            open += g->replies_left + g->fwd_left + !g->forwarded;
        }
        if (rc || all || upto < 0) return rc; // upto < 0: one non-blocking pass
        if (open != open_was) since = 0, open_was = open;
        if (++polls > 32) { // back off (2 us doubling to 100 us): a sleeping waiter frees a core
            sleep_ns = sleep_ns ? BP_MIN(2 * sleep_ns, 100000L) : 2000;
            bp_sleep_ns(sleep_ns);
            if ((polls & 63) == 0) {
                char what[128];
                int owner = awaited(bs, upto, issued, what, sizeof what);
                if ((rc = comm_stall_check(&since, owner, what))) return rc;
            }
        }
    }
}

// Step 1: record t.
static int recv_plan(bstate *bs, int64_t t) {
    int from, tag;
    size_t len;
    int rc = comm_probe(0, MSG_PLAN, &from, &tag, &len);
    if (rc) return rc;
    void *b = msg_buf_fit(&bs->planbuf, len ? len : 1);
    if ((rc = comm_recv(b, bs->planbuf.cap, 0, MSG_PLAN, &len))) return rc;
    if ((rc = plan_decode(&bs->p, b, len))) return rc;
    if (bs->su->ck.start_iter) { // resumed at K: the oracle numbers its records from 0 (role_oracle.c)
        plan *q = &bs->p;
        const uint32_t K = (uint32_t)bs->su->ck.start_iter;
        q->iter += K;
        for (uint32_t k = 0; k < q->n_fetch; k++) {
            q->fetch[k].for_iter += K;
            if (q->fetch[k].evict_iter != PLAN_NEVER) q->fetch[k].evict_iter += K;
        }
        for (uint32_t k = 0; k < q->n_sync_later; k++) q->sync_later[k].grad_iter += K, q->sync_later[k].deadline += K;
    }
    const plan *p = &bs->p;
    if (p->iter != (uint32_t)t || p->T != (uint32_t)bs->T || p->B != (uint32_t)bs->su->B || p->P != (uint32_t)bs->P ||
        p->capacity != bs->c.C || p->n_keys != bs->tr.L.rows)
        return bp_fail(BP_EFORMAT, "trainer %d: plan record %u (T %u, B %u, P %u, C %llu) does not fit iteration %lld", bs->me,
                       p->iter, p->T, p->B, p->P, (unsigned long long)p->capacity, (long long)t);
    if (p->row0 != role_batch_row(bs->su, t, 0))
        return bp_fail(BP_EFORMAT, "trainer %d: plan record %u is for the batch at dataset row %llu, iteration %lld "
                       "trains the one at row %llu", bs->me, p->iter, (unsigned long long)p->row0, (long long)t,
                       (unsigned long long)role_batch_row(bs->su, t, 0));
    if (((p->flags & PLAN_LAST) != 0) != (t + 1 == bs->su->total_iters))
        return bp_fail(BP_EFORMAT, "trainer %d: plan record %u: last-record flag wrong", bs->me, p->iter);
    for (int q = 0; q <= bs->T; q++)
        if (p->slice[q] != (uint32_t)dist_slice_begin(bs->su->B, bs->T, q))
            return bp_fail(BP_EFORMAT, "trainer %d: plan record %u slices the batch differently", bs->me, p->iter);
    if (t == bs->wrong_key_iter) {
        plan *q = &bs->p;
        if (q->priv_off[bs->me + 1] > q->priv_off[bs->me]) q->priv_key[q->priv_off[bs->me]] = q->n_keys;
        else if (q->n_sync_now) q->sync_now[0] = q->n_keys;
    }
    return 0;
}

// One GSYNC exchange with every other trainer: receives into in[q], sends out (len bytes);
// rq: (2 T) the receives first, then the sends; *nr gets how many are posted.
static int gsync_post(bstate *bs, const void *out, size_t len, msg_buf *in, comm_req *rq, int *nr) {
    const int T = bs->T, me = bs->me;
    int rc = 0, n = 0;
    for (int q = 0; q < T && !rc && T > 1; q++) {
        if (q == me) continue;
        rc = comm_irecv(in[q].p, in[q].cap, bs->first_trainer + q, MSG_GSYNC, &rq[n++]);
    }
    if (me == T - 1) bp_sleep_ns(1000 * (int64_t)bs->peer_delay_us);
    for (int q = 0; q < T && !rc && T > 1; q++) {
        if (q == me) continue;
        rc = comm_isend(out, len, bs->first_trainer + q, MSG_GSYNC, &rq[n++]);
    }
    *nr = n;
    return rc;
}

// Completes an exchange posted by gsync_post for the gradients of t: the sync-now one (later 0,
// its keys marked MARK_NOW for t) or the background one (later 1, its keys' later_t = t + 1);
// mine: my message (n keys).  Each key's partials in trainer-rank order, the first copied, the
// rest added; then the update on my replica.
static int gsync_finish(bstate *bs, int64_t t, int later, void *mine, uint32_t n, msg_buf *in, comm_req *rq, int nr) {
    const int T = bs->T, me = bs->me, E = bs->tr.g.E;
    const emb_opt eopt = trainer_eopt_at(&bs->tr, t), *eo = &eopt; // t's rate, also in the background
    const uint64_t *keys[1024];
    const float *rows[1024];
    uint32_t cnt[1024];
    BP_ASSERT(T <= 1024);
    msg_header h = {MSG_GSYNC, 0, (uint64_t)t, n, (uint32_t)E};
    uint64_t *mk;
    float *mr;
    msg_encode(mine, &h, &mk, &mr); // (the header it already holds) its keys and rows
    keys[me] = mk, rows[me] = mr, cnt[me] = n;
    int rc = 0;
    for (int k = 0, q = 0; k < nr && !rc; k++) {
        size_t got = 0;
        if ((rc = comm_wait(&rq[k], &got))) break;
        if (k >= T - 1) continue; // a send
        if (q == me) q++;
        msg_expect ex = {.kind = MSG_GSYNC, .width = (uint32_t)E, .max_n = (uint32_t)bs->cap_keys, .iter = t,
                         .rows = bs->tr.L.rows};
        msg_header hh;
        if ((rc = msg_decode(in[q].p, got, bs->first_trainer + q, &ex, &hh, &keys[q], &rows[q]))) break;
        cnt[q] = hh.n;
        q++;
    }
    if (rc) return rc;
    for (int q = 0; q < T; q++) bs->gcur[q] = 0;
    for (;;) {
        uint64_t key = UINT64_MAX;
        for (int q = 0; q < T; q++)
            if (bs->gcur[q] < cnt[q] && keys[q][bs->gcur[q]] < key) key = keys[q][bs->gcur[q]];
        if (key == UINT64_MAX) break;
        int first = 1;
        for (int q = 0; q < T; q++) {
            if (bs->gcur[q] >= cnt[q] || keys[q][bs->gcur[q]] != key) continue;
            const float *gr = rows[q] + (size_t)bs->gcur[q] * E;
            if (first) memcpy(bs->gsum, gr, (size_t)E * sizeof(float)), first = 0;
            else
                for (int j = 0; j < E; j++) bs->gsum[j] += gr[j];
            bs->gcur[q]++;
        }
        cache *c = &bs->c;
        int64_t slot = cache_find(c, key);
        if (slot < 0)
            return bp_fail(BP_EFORMAT, "trainer %d: shared key %llu of iteration %lld is not in the cache", me,
                           (unsigned long long)key, (long long)t);
        int listed = later ? c->later_t[slot] == (uint32_t)t + 1 : (cache_marks(c, (uint32_t)slot, t) & MARK_NOW) != 0;
        if (!listed)
            return bp_fail(BP_EFORMAT, "trainer %d: a peer synchronised key %llu, which record %lld does not list%s", me,
                           (unsigned long long)key, (long long)t, later ? " for the background" : "");
        if (later) c->later_t[slot] = 0;
        emb_opt_apply_row(eo, cache_row(c, (uint32_t)slot), bs->gsum);
        c->dirty[slot] = 1;
    }
    return 0;
}

// The background reduction in flight (sync-later keys of iteration later_iter): completed and
// applied.  Called at the end of later_iter + 1 before its evictions (every sync-later deadline
// is at least grad_iter + 1), and before anything that reads the cache whole (a checkpoint, the
// end of the run).
static int later_drain(bstate *bs) {
    if (bs->later_iter < 0) return 0;
    const int64_t t = bs->later_iter;
    bs->later_iter = -1;
    return gsync_finish(bs, t, 1, bs->lout.p, bs->lmine, bs->lin, bs->lrq, bs->lnr);
}

// Appends my partial gradient of key (row gr, E floats) to a GSYNC message being built.
static void gsync_add(uint64_t *k, float *r, uint32_t *n, uint64_t key, const float *gr, int E) {
    k[*n] = key;
    memcpy(r + (size_t)*n * E, gr, (size_t)E * sizeof(float));
    (*n)++;
}

// Step 5 with one trainer: a reduction is my one partial, so every update goes in place now, with
// the values the exchange would give (the sum of one partial is that partial, and a background
// key is not read before the end of t + 1, where it would be applied).  The record's lists place
// nothing here; they are checked: my gradients' keys must be exactly its private keys, its
// sync-now keys and its sync-later keys of t (with one trainer these are disjoint and every one
// has my gradient), compared by count and by two order-free sums of mixed keys, one pass over
// each list instead of a map lookup per key.
static int sync_grads_alone(bstate *bs, int64_t t) {
    const plan *p = &bs->p;
    const emb_grad *g = &bs->tr.g;
    cache *c = &bs->c;
    uint64_t n = 0, sum = 0, xsum = 0;
    for (uint32_t k = p->priv_off[0]; k < p->priv_off[1]; k++) {
        const uint64_t m = bp_mix64(p->priv_key[k]);
        n++, sum += m, xsum ^= m;
    }
    for (uint32_t k = 0; k < p->n_sync_now; k++) {
        const uint64_t m = bp_mix64(p->sync_now[k]);
        n++, sum += m, xsum ^= m;
    }
    for (uint32_t k = 0; k < p->n_sync_later; k++) {
        if (p->sync_later[k].grad_iter != (uint32_t)t) continue; // a restatement of an earlier reduction
        const uint64_t m = bp_mix64(p->sync_later[k].key);
        n++, sum += m, xsum ^= m;
    }
    for (int k = 0; k < g->n; k++) {
        const uint64_t m = bp_mix64(g->keys[k]);
        n--, sum -= m, xsum ^= m;
        const uint32_t slot = bs->gslot[k];
        bs->urow[k] = cache_row(c, slot);
        c->dirty[slot] = 1;
        bs->misses += c->slot_for[slot] == (uint32_t)t; // fetched for t: a miss (hit-rate figures)
    }
    if (n || sum || xsum)
        return bp_fail(BP_EFORMAT, "trainer %d: the keys of iteration %lld's gradients are not the private and "
                       "synchronised keys of its plan record (%d gradient keys, %lld listed)", bs->me, (long long)t, g->n,
                       (long long)(g->n + (int64_t)n));
    bs->accesses += (uint64_t)g->n;
    const emb_opt eo = trainer_eopt_at(&bs->tr, t);
    emb_opt_apply_rows_pool(&eo, bs->urow, g->rows, g->n, nn_threads());
    return 0;
}

// Step 5: gradients of t (in tr.g).  The keys reduced now: sync-now, and the sync-later keys of
// t that record t evicts (their owner writes them back at the end of t).  The other sync-later
// keys of t (next use t + 2 or later) are exchanged in the background and applied at the end of
// t + 1 (later_drain), before their deadline (>= t + 1) and before t + 1's evictions.  A key is
// never in both the background set of t and the gradients of t + 1 (it is not used at t + 1), nor
// private at t + 1 (not fetched for it), so every row sees its updates in iteration order, as in
// mode sync.  Order: the sync-now exchange is posted first, then t - 1's background set is
// completed, then t's is posted (every trainer posts them in this order, so the messages match).
static int sync_grads(bstate *bs, int64_t t) {
    const plan *p = &bs->p;
    const emb_grad *g = &bs->tr.g;
    const int me = bs->me, E = g->E;
    if (bs->T == 1) return sync_grads_alone(bs, t);
    const emb_opt eopt = trainer_eopt_at(&bs->tr, t), *eo = &eopt;
    cache *c = &bs->c;
    // record t's evicted keys and my private keys, marked on their slots
    for (uint32_t k = 0; k < p->n_evict; k++) {
        if (k + PREFETCH_AHEAD < p->n_evict) cache_prefetch(c, p->evict[k + PREFETCH_AHEAD].key);
        cache_mark(c, p->evict[k].key, t, MARK_EVICT);
    }
    for (uint32_t k = p->priv_off[me]; k < p->priv_off[me + 1]; k++) {
        if (k + PREFETCH_AHEAD < p->priv_off[me + 1]) cache_prefetch(c, p->priv_key[k + PREFETCH_AHEAD]);
        cache_mark(c, p->priv_key[k], t, MARK_PRIVATE);
    }
    // record t's sync lists, marked: the sync-now keys and the sync-later keys of t reduced now
    // (MARK_NOW); the other sync-later keys of t, reduced in the background (MARK_LATER, and
    // later_t until applied).  A peer's message is checked against these marks.
    for (uint32_t k = 0; k < p->n_sync_now; k++) {
        if (k + PREFETCH_AHEAD < p->n_sync_now) cache_prefetch(c, p->sync_now[k + PREFETCH_AHEAD]);
        cache_mark(c, p->sync_now[k], t, MARK_NOW);
    }
    for (uint32_t k = 0; k < p->n_sync_later; k++) {
        const plan_sync *sl = &p->sync_later[k];
        if (k + PREFETCH_AHEAD < p->n_sync_later) cache_prefetch(c, p->sync_later[k + PREFETCH_AHEAD].key);
        if (sl->grad_iter != (uint32_t)t) continue; // a restatement: its reduction is done (by grad_iter + 1)
        int64_t slot = cache_find(c, sl->key);
        if (slot < 0) continue; // not held here: a peer that sends it fails the check
        int evicted = (cache_marks(c, (uint32_t)slot, t) & MARK_EVICT) != 0;
        if (bs->background && sl->deadline > (uint32_t)t && !evicted) {
            slot_mark(c, (uint32_t)slot, t, MARK_LATER);
            c->later_t[slot] = (uint32_t)t + 1;
        } else {
            slot_mark(c, (uint32_t)slot, t, MARK_NOW);
        }
    }
    // what the record says of each of my gradients (its slot: resolve_rows), the message sizes first
    uint32_t n_now = 0, n_later = 0;
    for (int k = 0; k < g->n; k++) {
        const uint64_t key = g->keys[k];
        const uint32_t slot = bs->gslot[k];
        const uint8_t m = cache_marks(c, slot, t);
        if (m & MARK_PRIVATE) {
        } else if (m & MARK_NOW) {
            n_now++;
        } else if (m & MARK_LATER) {
            n_later++;
        } else {
            return bp_fail(BP_EFORMAT, "trainer %d: key %llu used at iteration %lld is neither private nor synchronised "
                           "in the plan", me, (unsigned long long)key, (long long)t);
        }
        bs->misses += c->slot_for[slot] == (uint32_t)t; // fetched for t: a miss (hit-rate figures)
    }
    bs->accesses += (uint64_t)g->n;
    bs->sync_now_keys += n_now, bs->sync_bg_keys += n_later;
    // private keys in place; the sync-now ones into my GSYNC message
    msg_header h = {MSG_GSYNC, 0, (uint64_t)t, n_now, (uint32_t)E};
    uint64_t *ok;
    float *orow;
    msg_encode(bs->gout.p, &h, &ok, &orow);
    uint32_t n = 0;
    for (int k = 0; k < g->n; k++) {
        const uint32_t slot = bs->gslot[k];
        const uint8_t m = cache_marks(c, slot, t);
        const float *gr = g->rows + (size_t)k * E;
        if (m & MARK_PRIVATE) {
            emb_opt_apply_row(eo, cache_row(c, slot), gr);
            c->dirty[slot] = 1;
        } else if (m & MARK_NOW) {
            gsync_add(ok, orow, &n, g->keys[k], gr, E);
        }
    }
    int nr = 0;
    int rc = gsync_post(bs, bs->gout.p, msg_bytes(MSG_GSYNC, n_now, (uint32_t)E), bs->gin, bs->grq, &nr);
    if (!rc) rc = later_drain(bs); // t - 1's background set, while the sync-now exchange runs
    if (!rc && bs->background) {   // t's background set
        uint64_t *lkey;
        float *lrow;
        h.n = n_later;
        msg_encode(bs->lout.p, &h, &lkey, &lrow);
        n = 0;
        for (int k = 0; k < g->n; k++)
            if (cache_marks(c, bs->gslot[k], t) & MARK_LATER)
                gsync_add(lkey, lrow, &n, g->keys[k], g->rows + (size_t)k * E, E);
        rc = gsync_post(bs, bs->lout.p, msg_bytes(MSG_GSYNC, n_later, (uint32_t)E), bs->lin, bs->lrq, &bs->lnr);
        bs->later_iter = t, bs->lmine = n_later;
    }
    if (!rc) rc = gsync_finish(bs, t, 0, bs->gout.p, n_now, bs->gin, bs->grq, nr);
    return rc;
}

// Sends the write-back messages built for iteration wb_held.
static int send_write_backs(bstate *bs) {
    const int S = bs->S, set = (int)(bs->wb_held & 1) * S;
    int rc = 0;
    for (int s = 0; s < S && !rc; s++) {
        rc = comm_isend(bs->wb[set + s].p, bs->wb_len[set + s], bs->first_server + s, MSG_WB, &bs->wb_rq[set + s]);
        bs->wb_live[set + s] = 1;
    }
    bs->wb_held = -1;
    return rc;
}

// Step 6: evictions of record t; write-backs of mine.
static int evict_and_write_back(bstate *bs, int64_t t) {
    const plan *p = &bs->p;
    const int S = bs->S, me = bs->me, stride = bs->c.stride;
    if (p->n_evict > bs->wbl_cap)
        bs->wbl_cap = p->n_evict + 1024, bs->wbl = bp_xrealloc(bs->wbl, (size_t)bs->wbl_cap * sizeof *bs->wbl);
    uint32_t n = 0;
    for (uint32_t k = 0; k < p->n_evict; k++) {
        const plan_evict *e = &p->evict[k];
        if (k + PREFETCH_AHEAD < p->n_evict) cache_prefetch(&bs->c, p->evict[k + PREFETCH_AHEAD].key);
        if ((e->flags & PLAN_PRIVATE) && e->owner != me) continue;
        int64_t slot = cache_find(&bs->c, e->key);
        if (slot < 0)
            return bp_fail(BP_EFORMAT, "trainer %d: record %lld evicts key %llu, which is not in the cache", me,
                           (long long)t, (unsigned long long)e->key);
        if (e->owner == me) // (the slot travels in the evict_iter field)
            bs->wbl[n++] = (myfetch){e->key, (uint32_t)slot, 0, 0, msg_server_of(e->key, S)};
        else cache_remove(&bs->c, e->key); // a replica: just leaves
    }
    if (n) qsort(bs->wbl, n, sizeof *bs->wbl, cmp_myfetch); // (bs->wbl is NULL until a first eviction)
    int rc = 0;
    const int set = (int)(t & 1) * S;
    for (uint32_t k0 = 0, s = 0; s < (uint32_t)S && !rc; s++) {
        uint32_t k1 = k0;
        while (k1 < n && bs->wbl[k1].server == s) k1++;
        if ((rc = wait_live(&bs->wb_rq[set + s], &bs->wb_live[set + s]))) break;
        const size_t len = msg_bytes(MSG_WB, k1 - k0, (uint32_t)stride);
        void *b = msg_buf_fit(&bs->wb[set + s], len);
        bs->wb_len[set + s] = len;
        msg_header h = {MSG_WB, 0, (uint64_t)t + 1, k1 - k0, (uint32_t)stride};
        uint64_t *keys;
        float *rows;
        msg_encode(b, &h, &keys, &rows);
        for (uint32_t k = k0; k < k1; k++) {
            if (k + PREFETCH_AHEAD < k1) {
                const myfetch *a = &bs->wbl[k + PREFETCH_AHEAD];
                const char *row = (const char *)cache_row(&bs->c, a->evict_iter);
                for (int o = 0; o < stride * (int)sizeof(float); o += 64) __builtin_prefetch(row + o);
                cache_prefetch(&bs->c, a->key);
            }
            keys[k - k0] = bs->wbl[k].key;
            memcpy(rows + (size_t)(k - k0) * stride, cache_row(&bs->c, bs->wbl[k].evict_iter),
                   (size_t)stride * sizeof(float));
            cache_remove(&bs->c, bs->wbl[k].key);
        }
        k0 = k1;
    }
    if (!rc && bs->wb_held >= 0) {
        bp_sleep_ns(1000 * (int64_t)bs->wb_delay_us);
        rc = send_write_backs(bs);
    }
    bs->wb_held = t;
    if (!rc && bs->wb_delay_us <= 0) rc = send_write_backs(bs);
    return rc;
}

// Step 4: the cache row of every (b, f) entry of my slice, one map lookup per key of the batch
// (tr.g's keys, from emb_grad_sort; their slots kept in gslot for the gradients of step 5).
static int resolve_rows(bstate *bs, int64_t t) {
    const emb_grad *g = &bs->tr.g;
    const uint64_t *s = g->sorted, pmask = ((uint64_t)1 << g->pos_bits) - 1;
    cache *c = &bs->c;
    const float *row = NULL;
    for (size_t i = 0, k = 0; i < g->n_entries; i++) {
        const uint64_t key = s[i] >> g->pos_bits;
        if (!row || key != g->keys[k - 1]) { // the first entry of keys[k]
            if (k + PREFETCH_AHEAD < (size_t)g->n) cache_prefetch(c, g->keys[k + PREFETCH_AHEAD]);
            const int64_t slot = cache_find(c, key);
            if (slot < 0 || !c->ready[slot])
                return bp_fail(BP_EFORMAT, "trainer %d: iteration %lld reads key %llu, which the plan did not bring",
                               bs->me, (long long)t, (unsigned long long)key);
            bs->gslot[k++] = (uint32_t)slot;
            row = cache_row(c, (uint32_t)slot);
        }
        bs->erow[s[i] & pmask] = row;
    }
    return 0;
}

// One iteration; *loss gets the global batch's mean loss.
static int bs_step(bstate *bs, int64_t t, double *loss) {
    const train_setup *su = bs->su;
    const bp_dataset *ds = su->ds;
    const int Nd = su->mc.Nd, F = su->mc.F, B = su->B;
    trainer *tr = &bs->tr;
    double t0 = bp_now();
    int rc = recv_plan(bs, t);
    if (!rc) rc = issue_fetches(bs);
    if (!rc) rc = wait_groups(bs, BP_MAX(su->ck.start_iter, t - bs->P), t); // the first record fetches for P + 1
    if (rc) return rc;
    double t1 = bp_now();
    bs->t_wait += t1 - t0;
    const int b0 = (int)bs->p.slice[bs->me], Bi = (int)bs->p.slice[bs->me + 1] - b0;
    const uint64_t r = role_batch_row(su, t, b0);
    const uint32_t *ids = ds->sparse + r * F;
    emb_grad_sort(&tr->g, &tr->L, ids, Bi); // the batch's keys now, its gradients after the backward pass
    if ((rc = resolve_rows(bs, t))) return rc;
    bs->resident_sum += bs->c.C - bs->c.n_free;
    bs->resident_max = BP_MAX(bs->resident_max, bs->c.C - bs->c.n_free);
    bs->t_compute += bp_now() - t1; // the gather's addresses: local work, not a wait
    double lsum;
    rc = role_dense_step(tr, t, (const float *const *)bs->erow, ds->dense + r * Nd, ds->label + r, Bi, B,
                         bs->first_trainer, bs->T, bs->ar_work, &lsum, &bs->t_compute, &bs->t_ar);
    if (rc) return rc;
    double t3 = bp_now();
    emb_grad_sum(&tr->g, tr->d_emb);
    double t4 = bp_now();
    rc = wait_groups(bs, -1, t); // rows that arrived during compute: forward them now, not next iteration
    if (!rc) rc = sync_grads(bs, t);
    if (!rc) rc = evict_and_write_back(bs, t);
    if (!rc && ((t + 1) % ROLE_CREDIT_EVERY == 0 || t + 1 == su->total_iters)) {
        if (bs->credit_live && (rc = comm_wait(&bs->credit_rq, NULL))) return rc;
        msg_header h = {MSG_CREDIT, 0, (uint64_t)t + 1, 0, 0};
        msg_encode(bs->credit, &h, NULL, NULL);
        rc = comm_isend(bs->credit, MSG_HEADER_BYTES, 0, MSG_CREDIT, &bs->credit_rq);
        bs->credit_live = 1;
    }
    double t5 = bp_now();
    bs->t_compute += t4 - t3, bs->t_sync += t5 - t4;
    bs->iters++;
    *loss = lsum / B;
    return rc;
}

static int send_done(bstate *bs, int64_t iters) {
    uint8_t buf[1024][MSG_HEADER_BYTES] __attribute__((aligned(8)));
    comm_req rq[1024];
    int rc = 0;
    for (int s = 0; s < bs->S && !rc; s++) {
        msg_header h = {MSG_DONE, 0, (uint64_t)iters, 0, 0};
        msg_encode(buf[s], &h, NULL, NULL);
        rc = comm_isend(buf[s], MSG_HEADER_BYTES, bs->first_server + s, MSG_DONE, &rq[s]);
    }
    return rc ? rc : comm_waitall(rq, bs->S);
}

// Window figures summed over the trainers: bytes [fetch, forward, write-back, sync, dense,
// dump], then accesses, misses, resident sum, resident max (max taken as a sum of maxima / T is
// not meaningful: reported as the sum; the caller divides), iterations.
#define NFIG 10
static int window_figures(bstate *bs, double out[NFIG]) {
    static uint64_t prev[6];
    uint64_t now[6] = {comm_bytes_sent(MSG_FETCH) + comm_bytes_recv(MSG_FETCH_REPLY), comm_bytes_sent(MSG_FWD),
                       comm_bytes_sent(MSG_WB), comm_bytes_sent(MSG_GSYNC),
                       comm_bytes_sent(MSG_AR_RS) + comm_bytes_sent(MSG_AR_AG),
                       comm_bytes_sent(MSG_DUMP_REQ) + comm_bytes_recv(MSG_DUMP_ROWS)};
    for (int k = 0; k < 6; k++) out[k] = (double)(now[k] - prev[k]);
    out[6] = (double)bs->accesses, out[7] = (double)bs->misses, out[8] = (double)bs->resident_sum;
    out[9] = (double)bs->resident_max;
    int rc = comm_allreduce_sum_f64(out, NFIG, bs->first_trainer, bs->T, (double *)bs->ar_work);
    memcpy(prev, now, sizeof prev);
    prev[4] = comm_bytes_sent(MSG_AR_RS) + comm_bytes_sent(MSG_AR_AG); // the figures' own all-reduce is not counted
    bs->accesses = bs->misses = bs->resident_sum = bs->resident_max = 0;
    return rc;
}

static void json_window(jsonl *j, const bstate *bs, const double fig[NFIG], int64_t iters) {
    jsonl_num(j, "wait_rows_s", bs->t_wait);
    jsonl_num(j, "emb_sync_s", bs->t_sync);
    jsonl_num(j, "allreduce_s", bs->t_ar);
    jsonl_num(j, "compute_s", bs->t_compute);
    jsonl_num(j, "bytes_row_fetch", fig[0]);
    jsonl_num(j, "bytes_forward", fig[1]);
    jsonl_num(j, "bytes_write_back", fig[2]);
    jsonl_num(j, "bytes_emb_sync", fig[3]);
    jsonl_num(j, "bytes_allreduce", fig[4]);
    if (iters > 0) jsonl_num(j, "bytes_per_iter", (fig[0] + fig[1] + fig[2] + fig[3] + fig[4]) / (double)iters);
    jsonl_num(j, "accesses", fig[6]);
    jsonl_num(j, "misses", fig[7]);
    jsonl_num(j, "hit_rate", fig[6] > 0 ? 1.0 - fig[7] / fig[6] : 0.0);
    if (iters > 0) jsonl_num(j, "resident_mean", fig[8] / (double)iters / bs->T);
    jsonl_num(j, "cache_rows", (double)bs->c.C);
    jsonl_num(j, "sync_now_keys", (double)bs->sync_now_keys); // trainer 0's, whole run so far
    jsonl_num(j, "sync_background_keys", (double)bs->sync_bg_keys);
    jsonl_int(j, "trainers", bs->T);
    jsonl_int(j, "servers", bs->S);
}

// Checkpoint `iter` at the boundary before iteration iter, on every trainer (the file comment).
static int bs_checkpoint(bstate *bs, int64_t iter) {
    const train_setup *su = bs->su;
    const int T = bs->T, S = bs->S, me = bs->me, stride = bs->c.stride;
    int rc = 0;
    if ((rc = later_drain(bs))) return rc; // my rows whole
    if (bs->wb_held >= 0 && (rc = send_write_backs(bs))) return rc; // (test hook) the shards need WB(iter)
    // my part: the dirty rows I own, by ascending key
    const cache *c = &bs->c;
    uint64_t n = cache_dirty_owned(c, T, me, NULL);
    uint64_t *keys = bp_xmalloc((n ? n : 1) * sizeof *keys);
    float *rows = bp_xmalloc((n ? n : 1) * (size_t)stride * sizeof *rows); // (n, stride)
    n = cache_dirty_owned(c, T, me, keys);
    for (uint64_t k = 0; k < n; k++)
        memcpy(rows + k * (size_t)stride, cache_row(c, (uint32_t)cache_find(c, keys[k])), (size_t)stride * sizeof(float));
    ckpt_file f;
    if (me != 0) { // write, then report to trainer 0, which decides
        int wrc = ckpt_run_write_rows(su, iter, me, keys, rows, n, stride, &f);
        if (wrc) fprintf(stderr, "bagpipe: trainer %d: checkpoint %lld: %s\n", me, (long long)iter, bp_errmsg(wrc));
        else ckpt_test_kill_point(bs->rank, iter);
        rc = ckpt_run_report(bs->first_trainer, iter, wrc, &f);
        goto out;
    }
    char dir[4096] = "";
    if ((rc = ckpt_run_begin(su, iter, dir, sizeof dir))) {
        // the other trainers' reports are still collected, so none is left for the next one
        ckpt_file *tf = bp_xmalloc((size_t)T * sizeof *tf);
        rc = role_ckpt_commit(su, &bs->tr, iter, dir, tf, 0, 0, 0, T, bs->first_trainer, 1, rc);
        free(tf);
        goto out;
    }
    uint8_t (*reqbuf)[MSG_HEADER_BYTES] = bp_xcalloc((size_t)S, MSG_HEADER_BYTES); // (S) DUMP_REQ messages
    comm_req *rq = bp_xcalloc((size_t)S, sizeof *rq);
    ckpt_file *files = bp_xmalloc((size_t)(S + T + 1) * sizeof *files); // dense, trainer 0, servers, trainers 1..
    rc = role_ckpt_ask_servers(iter, S, bs->first_server, rq, reqbuf); // the servers write while we do
    if (!rc) {
        int own = ckpt_run_write_dense(&bs->tr, dir, &files[0]);
        if (!own) own = ckpt_run_write_rows(su, iter, 0, keys, rows, n, stride, &files[1]);
        rc = role_ckpt_commit(su, &bs->tr, iter, dir, files, 2, S, bs->first_server, T, bs->first_trainer, 1, own);
    }
    int wrc = comm_waitall(rq, S);
    free(reqbuf), free(rq), free(files);
    if (!rc) rc = wrc;
out:
    free(keys), free(rows);
    return rc;
}

// Evaluation at the boundary before iteration iter, on every trainer (the file comment): trainer
// 0's tr.table gets the model after iter iterations.
static int bs_eval_rows(bstate *bs, int64_t iter) {
    const int T = bs->T, me = bs->me, stride = bs->c.stride;
    const cache *c = &bs->c;
    const emb_layout *L = &bs->tr.L;
    const size_t row_bytes = (size_t)stride * sizeof(float);
    int rc = 0;
    if ((rc = later_drain(bs))) return rc; // my rows whole: t - 1's background sync applied
    if (bs->wb_held >= 0 && (rc = send_write_backs(bs))) return rc; // (test hook) the dump needs WB(iter)
    const uint64_t n = cache_dirty_owned(c, T, me, bs->ekeys);
    // rows per DUMP_ROWS message: what a dump buffer holds (role_dump_cap)
    const uint32_t per = (uint32_t)((bs->dump_cap - MSG_HEADER_BYTES) / (sizeof(uint64_t) + row_bytes));
    BP_ASSERT(per >= 1 && msg_bytes(MSG_DUMP_ROWS, per, (uint32_t)stride) <= bs->dump_cap);
    if (me != 0) {
        uint64_t k0 = 0;
        do {
            const uint32_t m = (uint32_t)BP_MIN((uint64_t)per, n - k0);
            msg_header h = {MSG_DUMP_ROWS, k0 + m == n ? MSG_F_LAST : 0, (uint64_t)iter, m, (uint32_t)stride};
            uint64_t *keys;
            float *rows;
            msg_encode(bs->dump, &h, &keys, &rows);
            for (uint32_t k = 0; k < m; k++) {
                keys[k] = bs->ekeys[k0 + k];
                memcpy(rows + (size_t)k * stride, cache_row(c, (uint32_t)cache_find(c, keys[k])), row_bytes);
            }
            comm_req q;
            rc = comm_isend(bs->dump, msg_bytes(MSG_DUMP_ROWS, m, (uint32_t)stride), bs->first_trainer,
                            MSG_DUMP_ROWS, &q);
            if (!rc) rc = comm_wait(&q, NULL);
            k0 += m;
        } while (!rc && k0 < n);
        return rc;
    }
    // trainer 0: every shard, then the dirty cached rows over it (mine, then the others')
    if ((rc = dist_collect_rows(&bs->tr, bs->S, bs->first_server, bs->dump, bs->dump_cap, iter))) return rc;
    for (uint64_t k = 0; k < n; k++) {
        const float *row = cache_row(c, (uint32_t)cache_find(c, bs->ekeys[k]));
        memcpy(emb_table_row(&bs->tr.table, bs->ekeys[k]), row, row_bytes);
    }
    for (int q = 1; q < T && !rc; q++) {
        const int from = bs->first_trainer + q;
        uint64_t last = 0;
        int any = 0;
        for (;;) {
            size_t len = 0;
            if ((rc = comm_recv(bs->dump, bs->dump_cap, from, MSG_DUMP_ROWS, &len))) break;
            msg_expect ex = {.kind = MSG_DUMP_ROWS, .width = (uint32_t)stride, .max_n = per, .iter = iter,
                             .rows = L->rows, .server = q, .S = T};
            msg_header h;
            const uint64_t *k;
            const float *rows;
            if ((rc = msg_decode(bs->dump, len, from, &ex, &h, &k, &rows))) break;
            if (h.n && any && k[0] <= last) {
                rc = bp_fail(BP_EFORMAT, "trainer 0: evaluation rows of trainer %d out of key order", q);
                break;
            }
            for (uint32_t j = 0; j < h.n; j++)
                memcpy(emb_table_row(&bs->tr.table, k[j]), rows + (size_t)j * stride, row_bytes);
            if (h.n) last = k[h.n - 1], any = 1;
            if (h.flags & MSG_F_LAST) break;
        }
    }
    return rc;
}

int role_bagpipe_trainer_run(const train_setup *su, const dist_layout *l, int i) {
    bstate bs;
    openblas_set_num_threads(su->threads);
    int rc = bs_init(&bs, su, l, i);
    jsonl_file mf = {0};
    const int writer = i == 0;
    if (!rc) rc = jsonl_open(&mf, "--metrics", writer ? su->metrics : NULL);
    if (!rc) train_json_start(&mf, su);
    if (rc) {
        bs_free(&bs);
        return rc;
    }
    const int B = su->B;
    bp_progress prog;
    bp_progress_init(&prog, "train", "it", writer ? (uint64_t)su->total_iters : 0);
    if (!writer) prog.enabled = 0;
    bp_progress_start_at(&prog, (uint64_t)su->ck.start_iter);
    double t_start = bp_now(), t_window = t_start, t_eval = 0, win_loss = 0, first_s = 0;
    double tot_wait = 0, tot_sync = 0, tot_ar = 0, tot_compute = 0, tot[NFIG] = {0}, first_parts[4] = {0};
    int64_t win_n = 0;
    ckpt_sched cks;
    ckpt_sched_init(&cks, &su->ck);
    if (writer && su->ck.from[0]) {
        printf("resumed from %s at iteration %lld (caches start empty)\n", su->ck.from, (long long)su->ck.start_iter);
        fflush(stdout);
    }
    for (int64_t t = su->ck.start_iter; t < su->total_iters && !rc; t++) {
        double loss = 0;
        if ((rc = bs_step(&bs, t, &loss))) break;
        if ((rc = train_loss_check(t, loss))) break;
        if (t == su->ck.start_iter) { // the window's times hold this iteration's alone
            first_s = bp_now() - t_start;
            first_parts[0] = bs.t_wait, first_parts[1] = bs.t_sync, first_parts[2] = bs.t_ar;
            first_parts[3] = bs.t_compute;
        }
        win_loss += loss, win_n++;
        train_progress_window(&prog, t, win_loss / (double)win_n); // every iteration: redrawn at most 10 times a second
        if ((t + 1) % su->print_every == 0 || t + 1 == su->total_iters) {
            double fig[NFIG];
            if ((rc = window_figures(&bs, fig))) break;
            for (int k = 0; k < NFIG; k++) tot[k] += fig[k];
            tot_wait += bs.t_wait, tot_sync += bs.t_sync, tot_ar += bs.t_ar, tot_compute += bs.t_compute;
            if (writer) {
                double now = bp_now();
                jsonl j;
                train_json_window(&j, su, t, win_loss / (double)win_n, (double)win_n * B / (now - t_window));
                json_window(&j, &bs, fig, win_n);
                if ((rc = jsonl_end(&j, &mf))) break;
            }
            bs.t_wait = bs.t_sync = bs.t_ar = bs.t_compute = 0;
            win_loss = 0, win_n = 0, t_window = bp_now();
        }
        if (train_eval_due(su, t + 1)) {
            double e0 = bp_now(); // every trainer takes part: its dirty rows are part of the model
            if ((rc = bs_eval_rows(&bs, t + 1))) break;
            if (writer) {
                metric_result res = {0};
                trainer_eval(&bs.tr, su->ds, su->ev0, su->ev1, su->eval_batch, &res, NULL);
                if ((rc = train_json_eval(&mf, su->eval_split, t + 1, B, &res))) break;
                train_print_eval(&prog, su->eval_split, t + 1, &res);
            }
            t_eval += bp_now() - e0;
            t_window += bp_now() - e0;
        }
        if (su->ck.dir) { // every trainer takes part: they agree on the boundary
            double due = ckpt_sched_due(&cks, t + 1, su->total_iters);
            if (su->ck.minutes > 0) { // a clock decides: trainer 0's
                due = writer ? due : 0;
                if ((rc = role_loss_allreduce(&due, bs.first_trainer, bs.T))) break;
            }
            if (due > 0) {
                double c0 = bp_now();
                rc = bs_checkpoint(&bs, t + 1);
                if (writer) rc = ckpt_sched_done(&cks, su, t + 1, rc, bp_now() - c0, &mf);
            }
        }
    }
    bp_progress_finish(&prog);
    const int64_t iters = su->total_iters, run_iters = iters - su->ck.start_iter;
    double train_s = bp_now() - t_start - t_eval;
    if (!rc) rc = later_drain(&bs);
    if (!rc && bs.c.n_free != bs.c.C)
        rc = bp_fail(BP_EFORMAT, "trainer %d: %llu rows still cached after the last record", i,
                     (unsigned long long)(bs.c.C - bs.c.n_free));
    if (!rc && bs.wb_held >= 0) rc = send_write_backs(&bs);
    for (int s = 0; s < 2 * bs.S && !rc; s++) rc = wait_live(&bs.wb_rq[s], &bs.wb_live[s]);
    if (!rc && bs.credit_live) rc = comm_wait(&bs.credit_rq, NULL), bs.credit_live = 0;
    for (int k = 0; k < bs.G && !rc; k++) {
        fgroup *g = &bs.g[k];
        for (int s = 0; s < bs.S && !rc; s++) rc = wait_live(&g->req_rq[s], &g->req_live[s]);
        for (int q = 0; q < bs.T && !rc; q++) rc = wait_live(&g->fwd_rq[q], &g->fwd_live[q]);
    }
    if (!rc && writer) {
        metric_result res = {0}, bayes = {0};
        double sps = (double)run_iters * B / train_s;
        train_print_trained(run_iters, B, train_s);
        ckpt_sched_print(&cks, train_s);
        printf("cache: hit rate %.1f%% (%.0f of %.0f row accesses fetched for their batch), mean residency %.0f of "
               "%llu rows\n", tot[6] > 0 ? 100.0 * (1.0 - tot[7] / tot[6]) : 0.0, tot[7], tot[6],
               run_iters > 0 ? tot[8] / (double)run_iters / bs.T : 0.0, (unsigned long long)bs.c.C);
        if (su->do_eval || su->save) rc = dist_collect_rows(&bs.tr, bs.S, bs.first_server, bs.dump, bs.dump_cap, iters);
        if (!rc) rc = train_final_eval(&bs.tr, su, iters, &res, &bayes);
        if (!rc) {
            jsonl j;
            jsonl_begin(&j);
            jsonl_str(&j, "event", "summary");
            jsonl_str(&j, "mode", "bagpipe");
            jsonl_str(&j, "model", model_kind_name(su->mc.kind));
            jsonl_int(&j, "iters", iters);
            jsonl_int(&j, "samples", iters * B);
            jsonl_num(&j, "train_s", train_s);
            jsonl_num(&j, "first_iter_s", first_s);
            jsonl_num(&j, "samples_per_s", sps);
            ckpt_sched_json(&j, &cks);
            bs.t_wait = tot_wait, bs.t_sync = tot_sync, bs.t_ar = tot_ar, bs.t_compute = tot_compute;
            json_window(&j, &bs, tot, run_iters);
            role_json_first_parts(&j, first_parts);
            train_json_summary_result(&j, su, &res, &bayes);
            rc = jsonl_end(&j, &mf);
        }
        if (!rc && su->save) {
            rc = trainer_save(&bs.tr, su->save, su->ds, iters, iters * B, su->seed);
            if (!rc) printf("saved model to %s\n", su->save);
        }
        fflush(stdout);
    }
    if (!rc) rc = send_done(&bs, iters);
    rc = jsonl_close(&mf, rc);
    bs_free(&bs);
    return rc;
}
