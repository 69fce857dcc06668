// oracle_ref: the planner as it was before the fast path (frozen reference for the fast oracle).
// Same contract and byte-identical plans as oracle.h; kept only so that tests and bench_oracle can
// compare the fast planner with it on any trace (naive twin vs fast path).  Not used by the runtime.
#include "oracle_ref.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define NIL 0xFFFFFFFFu
#define KM_ACTIVE (1ull << 63)
#define INQ 4 // input queue depth with two threads

enum { RES_NONE = 0, RES_SHARED = 1, RES_PRIVATE = 2 };

// A resident shared key waiting in the bucket of its next use.
typedef struct {
    uint32_t a;        // active index
    uint32_t last_use; // iteration of its pending gradient
    uint32_t sync_idx; // when last_use is the batch being completed: its sync-later entry there
    uint32_t nx;       // its occurrence in batch v (the slot's next link)
} bentry;

typedef struct {
    uint64_t *key;   // (cap) unique keys of the batch
    uint32_t *act;   // (cap) their active index
    uint32_t *next;  // (cap) next occurrence of the same key (atomic), NIL
    uint64_t *users; // (cap) trainers touching the key
    uint32_t n;      // unique keys in the batch
    uint32_t batch;  // which batch the slot holds
    uint32_t samples;
} slot;

typedef struct {
    uint64_t *keys; // (cap) key + 1, 0 = empty
    uint64_t *vals; // (cap)
    uint64_t cap, n;
} hmap;

typedef struct {
    const uint32_t *ids; // (n, F)
    uint32_t n;
} inbatch;

struct oref_impl {
    uint32_t T, B, F, W, P, R, NB, threads;
    uint64_t C, K, row_base, iter_base;
    uint64_t *offset; // (F) first key of each table
    uint64_t *card;   // (F)
    int borrow;

    // indexer side
    int km_flat;
    uint64_t *km; // (K) flat keymap
    size_t km_bytes;
    hmap hm;
    uint32_t *act_free; // (act_cap) stack of free indices
    uint64_t *act_key;  // (act_cap)
    uint32_t act_cap, act_hw, n_free;
    slot *slots; // (R)
    uint32_t pos_bits, pos_mask;
    uint32_t retire_done; // batches retired by the indexer
    uint64_t occ_hw;      // most occurrences in one batch
    int idx_err;          // sticky error of the indexer
    char idx_msg[512];

    // Planner state of active keys (initialised by the indexer when a key becomes active).
    uint8_t *act_state; // (act_cap) RES_*
    uint64_t *act_gate; // (act_cap) last eviction, in the keymap's inactive encoding

    // shared counters (under mu with two threads)
    uint32_t n_pushed, n_indexed, n_retired;
    uint32_t last_short; // a batch shorter than B was pushed (must be the last)
    int finished;

    // planner side
    uint32_t step;
    int done, err;
    uint64_t shared_count;
    uint64_t *priv_count; // (T)
    bentry **bucket;      // (NB) resident shared keys by next use
    uint32_t *bucket_n, *bucket_cap;
    bentry *part_tmp; // (part_cap) scratch of bucket_lone_last
    uint32_t part_cap;
    uint64_t *dm_cand, *dm_take; // (T) scratch of demote: candidates and keys to demote per trainer
    bentry *dm_list;             // (dm_cap) demote's candidates
    uint32_t *ah_prev, *ah_off;  // scratch of demote_ahead: previous uses (ah_cap), offsets per batch (P + 1)
    uint32_t ah_cap;
    uint32_t dm_n, dm_cap;
    uint32_t rr_fetch, rr_owner;
    plan rec[2];          // record s-1 being completed, record s collecting fetches
    uint64_t *pv_key;     // (pv_cap) private keys of the batch being completed
    uint16_t *pv_tr;      // (pv_cap) their trainers
    uint32_t pv_n, pv_cap;
    uint32_t *pv_cursor;  // (T) scratch for grouping private keys by trainer
    plan_sync *sync_tmp;  // (sync_cap) scratch for putting sync-later entries in group order
    uint32_t sync_cap;
    uint32_t *sync_cnt;   // (2 (P + W + 2)) counting-sort buckets
    oracle_stats st;
    uint64_t pub_acts, pub_occ, pub_hm_cap; // indexer memory high-water marks, published per batch
    double cpu_index, cpu_plan;             // CPU seconds of each half (thread CPU clocks)

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

// ---------------------------------------------------------------------------------------------
// Keymap

static void hmap_init(hmap *h, uint64_t cap) {
    h->cap = cap, h->n = 0;
    h->keys = bp_xcalloc(cap, sizeof *h->keys);
    h->vals = bp_xcalloc(cap, sizeof *h->vals);
}

static void hmap_free(hmap *h) {
    free(h->keys);
    free(h->vals);
    memset(h, 0, sizeof *h);
}

static uint64_t *hmap_slot(hmap *h, uint64_t key, int insert);

static void hmap_grow(hmap *h) {
    hmap old = *h;
    hmap_init(h, old.cap * 2);
    for (uint64_t i = 0; i < old.cap; i++)
        if (old.keys[i]) *hmap_slot(h, old.keys[i] - 1, 1) = old.vals[i];
    hmap_free(&old);
}

// The value slot of key; with insert, creates it (value 0) if absent, else returns NULL if absent.
static uint64_t *hmap_slot(hmap *h, uint64_t key, int insert) {
    uint64_t mask = h->cap - 1, i = bp_mix64(key) & mask;
    for (;;) {
        if (h->keys[i] == key + 1) return &h->vals[i];
        if (h->keys[i] == 0) {
            if (!insert) return NULL;
            if (2 * (h->n + 1) > h->cap) {
                hmap_grow(h);
                return hmap_slot(h, key, 1);
            }
            h->keys[i] = key + 1, h->vals[i] = 0, h->n++;
            return &h->vals[i];
        }
        i = (i + 1) & mask;
    }
}

// ---------------------------------------------------------------------------------------------
// Indexer: dedupe a batch into occurrences, link them to each key's previous occurrence, retire.

#define KM_ACT(v) ((uint32_t)((v) >> 32) & 0x7FFFFFFFu)

// A new active record for key, whose keymap word (inactive) is v.
static inline uint32_t act_new(oref_impl *o, uint64_t key, uint64_t v) {
    uint32_t a = o->n_free ? o->act_free[--o->n_free] : o->act_hw++;
    BP_ASSERTF(a < o->act_cap, "oracle: %u active keys exceed the bound %u", a, o->act_cap);
    o->act_key[a] = key;
    o->act_state[a] = RES_NONE;
    o->act_gate[a] = v;
    return a;
}

static inline uint32_t *occ_next(oref_impl *o, uint32_t occ) {
    return &o->slots[occ >> o->pos_bits].next[occ & o->pos_mask];
}

// Indexes batch number n_indexed (ids: (n, F)) into its slot.  The slot must be free.  `flat`
// is a constant at each call site, so the keymap test leaves the inner loop.
static inline __attribute__((always_inline)) int index_batch_impl(oref_impl *o, const uint32_t *ids, uint32_t n,
                                                                   const int flat) {
    uint32_t bnum = o->n_indexed, j = bnum % o->R;
    slot *sl = &o->slots[j];
    const uint32_t F = o->F, T = o->T, tag = j << o->pos_bits, pos_mask = o->pos_mask;
    const uint64_t *off = o->offset, *card = o->card;
    uint64_t *km = o->km, *skey = sl->key, *susers = sl->users;
    uint32_t *sact = sl->act, *snext = sl->next;
    sl->batch = bnum, sl->samples = n, sl->n = 0;
    uint32_t cnt = 0;
    // Trainer by trainer, table by table: the hot ids of one table are close together in the
    // keymap, and the cold ones are prefetched a few samples ahead.
    for (uint32_t i = 0; i < T; i++) {
        uint32_t lo = (uint32_t)((uint64_t)i * n / T), hi = (uint32_t)((uint64_t)(i + 1) * n / T);
        uint64_t bit = 1ull << i;
        for (uint32_t f = 0; f < F; f++) {
            const uint32_t *col = ids + f;
            const uint64_t base = off[f], c = card[f];
            for (uint32_t s = lo; s < hi; s++) {
                uint32_t id = col[(size_t)s * F];
                if (id >= c)
                    return bp_fail(BP_ERANGE, "oracle: batch %llu, sample %u, feature %u: id %u >= table size %llu",
                                   (unsigned long long)(o->iter_base + bnum), s, f, id, (unsigned long long)c);
                if (flat && s + 16 < hi) {
                    uint32_t ahead = col[(size_t)(s + 16) * F];
                    if (ahead < c) __builtin_prefetch(&km[base + ahead]);
                }
                uint64_t *w = flat ? &km[base + id] : hmap_slot(&o->hm, base + id, 1);
                uint64_t v = *w;
                if ((v & KM_ACTIVE) && ((uint32_t)v & ~pos_mask) == tag) {
                    susers[(uint32_t)v & pos_mask] |= bit; // seen earlier in this batch
                    continue;
                }
                uint32_t a = (v & KM_ACTIVE) ? KM_ACT(v) : act_new(o, base + id, v);
                uint32_t oc = cnt++;
                skey[oc] = base + id, sact[oc] = a, snext[oc] = NIL, susers[oc] = bit;
                if (v & KM_ACTIVE) __atomic_store_n(occ_next(o, (uint32_t)v), tag | oc, __ATOMIC_RELEASE);
                *w = KM_ACTIVE | (uint64_t)a << 32 | (tag | oc);
            }
        }
    }
    sl->n = cnt;
    if (cnt > o->occ_hw) o->occ_hw = cnt;
    return 0;
}

static int index_batch(oref_impl *o, const uint32_t *ids, uint32_t n) {
    return o->km_flat ? index_batch_impl(o, ids, n, 1) : index_batch_impl(o, ids, n, 0);
}

// Frees the active records of keys whose last held occurrence is in retired batch bnum.
static void retire_batch(oref_impl *o, uint32_t bnum) {
    uint32_t j = bnum % o->R, tag = j << o->pos_bits;
    slot *sl = &o->slots[j];
    BP_ASSERT(sl->batch == bnum);
    for (uint32_t oc = 0; oc < sl->n; oc++) {
        if (__atomic_load_n(&sl->next[oc], __ATOMIC_RELAXED) != NIL) continue;
        uint32_t a = sl->act[oc];
        uint64_t key = sl->key[oc];
        BP_ASSERTF(o->act_state[a] == RES_NONE, "oracle: key %llu resident with no use in the window",
                   (unsigned long long)key);
        uint64_t *w = o->km_flat ? &o->km[key] : hmap_slot(&o->hm, key, 0);
        BP_ASSERTF(w && *w == (KM_ACTIVE | (uint64_t)a << 32 | (tag | oc)), "oracle: keymap of key %llu",
                   (unsigned long long)key);
        *w = o->act_gate[a];
        o->act_free[o->n_free++] = a;
    }
    sl->n = 0;
}

// Retires what the planner has released, then indexes one batch.  (Either thread.)
static int indexer_run(oref_impl *o, const uint32_t *ids, uint32_t n, uint32_t retired) {
    while (o->retire_done < retired) retire_batch(o, o->retire_done++);
    BP_ASSERT(o->n_indexed < o->R + o->retire_done);
    return index_batch(o, ids, n);
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void publish_mem(oref_impl *o) {
    o->pub_acts = o->act_hw, o->pub_occ = o->occ_hw, o->pub_hm_cap = o->hm.cap;
}

static void *indexer_thread(void *arg) {
    oref_impl *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && !(o->in_count > 0 && o->n_indexed < o->R + o->n_retired && !o->idx_err))
            pthread_cond_wait(&o->cv, &o->mu);
        if (o->stop) break;
        inbatch in = o->inq[o->in_head % INQ];
        uint32_t retired = o->n_retired;
        pthread_mutex_unlock(&o->mu);
        double c0 = thread_cpu();
        int rc = indexer_run(o, in.ids, in.n, retired);
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

static inline uint32_t next_use(const oref_impl *o, const slot *sl, uint32_t oc) {
    uint32_t nx = __atomic_load_n(&sl->next[oc], __ATOMIC_ACQUIRE);
    return nx == NIL ? NIL : o->slots[nx >> o->pos_bits].batch;
}

static void bucket_push(oref_impl *o, uint32_t v, bentry e) {
    uint32_t j = v % o->NB;
    if (o->bucket_n[j] == o->bucket_cap[j]) {
        o->bucket_cap[j] = o->bucket_cap[j] ? 2 * o->bucket_cap[j] : 256;
        o->bucket[j] = bp_xrealloc(o->bucket[j], (size_t)o->bucket_cap[j] * sizeof **o->bucket);
    }
    o->bucket[j][o->bucket_n[j]++] = e;
}

static uint32_t rr_next(uint32_t *rr, uint32_t T) {
    uint32_t r = *rr;
    *rr = r + 1 == T ? 0 : r + 1;
    return r;
}

static inline uint32_t popcount64(uint64_t x) { // portable: no -mpopcnt in the build
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((x * 0x0101010101010101ull) >> 56);
}

static inline uint64_t gate_of(uint32_t owner, uint32_t evict_iter) {
    return (uint64_t)owner << 32 | ((uint64_t)evict_iter + 1);
}

static void private_push(oref_impl *o, uint64_t key, uint16_t tr) {
    if (o->pv_n == o->pv_cap) {
        o->pv_cap = o->pv_cap ? 2 * o->pv_cap : 1024;
        o->pv_key = bp_xrealloc(o->pv_key, o->pv_cap * sizeof *o->pv_key);
        o->pv_tr = bp_xrealloc(o->pv_tr, o->pv_cap * sizeof *o->pv_tr);
    }
    o->pv_key[o->pv_n] = key, o->pv_tr[o->pv_n++] = tr;
}

// Evicts the shared key of bucket entry e (next use v) after iteration s-1 under capacity
// pressure (record s-1).  Its gradient of e.last_use is still pending (deadline v-1 >= s): the
// owner writes it back after s once that reduction is applied, so the deadline becomes s.  (A
// demotion with P = 0 evicts a key next used at v = s, whose reduction is due at s-1: it is
// written back at the end of s-1, as any eviction.)
static void evict_pressure(oref_impl *o, bentry e, uint32_t v, uint32_t s, plan *prev) {
    BP_ASSERT(o->act_state[e.a] == RES_SHARED && s >= 1 && v >= s && e.last_use + 1 < v);
    uint64_t key = o->act_key[e.a];
    uint32_t owner = rr_next(&o->rr_owner, o->T);
    if (e.last_use == s - 1) {
        BP_ASSERT(prev->sync_later[e.sync_idx].key == key);
        prev->sync_later[e.sync_idx].deadline = s;
    } else if (v - 1 > s) {
        plan_add_sync_later(prev, (plan_sync){key, e.last_use, s});
        o->st.sync_restated++;
    }
    plan_add_evict(prev, (plan_evict){key, (uint16_t)owner, v > s ? PLAN_WB_NEXT : 0});
    o->act_state[e.a] = RES_NONE, o->act_gate[e.a] = gate_of(owner, s - 1);
    o->shared_count--;
    o->st.evictions++, o->st.evictions_pressure++;
}

// Belady's ties: every key of bucket v is next used at v, and evicting any one costs one fetch.
// With T > 1, one used at v by one trainer and not again in the window comes back private (a slot
// on that trainer) where another comes back shared (a slot on every trainer), so when the bucket
// is not evicted whole, those keys go first: a stable partition puts them at its end, popped
// first.  (With T = 1 both take the one trainer's slot, and the order is left as it was.)
// "Not again" is judged on the horizon H of this step (a use beyond it reads as none), so that
// the plan does not depend on how far the input was indexed ahead.
static void bucket_lone_last(oref_impl *o, uint32_t v, uint32_t H) {
    const uint32_t j = v % o->NB, n = o->bucket_n[j];
    bentry *bk = o->bucket[j];
    if (o->part_cap < n) {
        o->part_cap = BP_MAX(n, 2 * o->part_cap);
        o->part_tmp = bp_xrealloc(o->part_tmp, (size_t)o->part_cap * sizeof *o->part_tmp);
    }
    uint32_t k = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const slot *sv = &o->slots[bk[i].nx >> o->pos_bits];
        const uint32_t oc = bk[i].nx & o->pos_mask, nn = next_use(o, sv, oc);
        BP_ASSERT(sv->batch == v);
        if (popcount64(sv->users[oc]) == 1 && (nn == NIL || nn > H)) o->part_tmp[m++] = bk[i];
        else bk[k++] = bk[i];
    }
    memcpy(bk + k, o->part_tmp, (size_t)m * sizeof *bk);
}

// Demotions (T > 1).  When Belady has nothing left to evict (every resident shared key not needed
// by batches s..s+P is gone) and a trainer is still over capacity, a shared key next used at s+P
// by one trainer, and not again in view, can be evicted after s-1 and fetched back at s private to
// that trainer: one fetch more than keeping it, and a slot back on every other trainer.  The
// candidates are the bucket of s+P (keys last used before s-1, in the bucket's order: those that
// bucket_lone_last would put last), then, with P >= 1, the keys used at s-1 and next at s+P (in
// batch s-1's order), whose sync-later entry of s-1 becomes due at s, as for any eviction after
// s-1.  Demoting keys of trainer j leaves j's count as it is and lowers every other trainer's by
// one, so the fewest demotions that bring every trainer within C are found by water-filling on
// the counts: each goes to the trainer with the fewest private keys (then the lowest index) that
// still has a candidate.  The keys demoted are each trainer's last candidates.  Returns 0, or the
// most any trainer still needs after every useful demotion (nothing is changed then).
static int lone_at(const oref_impl *o, uint32_t nx, uint32_t v, uint32_t H, uint32_t *tr) {
    const slot *sv = &o->slots[nx >> o->pos_bits];
    const uint32_t oc = nx & o->pos_mask, nn = next_use(o, sv, oc);
    BP_ASSERT(sv->batch == v);
    *tr = (uint32_t)__builtin_ctzll(sv->users[oc]);
    return popcount64(sv->users[oc]) == 1 && (nn == NIL || nn > H);
}

static void dm_add(oref_impl *o, bentry e) {
    if (o->dm_n == o->dm_cap) {
        o->dm_cap = o->dm_cap ? 2 * o->dm_cap : 256;
        o->dm_list = bp_xrealloc(o->dm_list, (size_t)o->dm_cap * sizeof *o->dm_list);
    }
    o->dm_list[o->dm_n++] = e;
}

// The candidates of step s (dm_list, and their count per trainer in dm_cand): the keys still shared
// in the bucket of s+P, then the keys used at s-1 and next at s+P.
static void dm_collect(oref_impl *o, uint32_t s, uint32_t H, const plan *prev) {
    const uint32_t T = o->T, v = s + o->P, j = v % o->NB, n = o->bucket_n[j];
    const bentry *bk = o->bucket[j];
    uint32_t tr;
    memset(o->dm_cand, 0, T * sizeof *o->dm_cand);
    o->dm_n = 0;
    for (uint32_t i = 0; i < n; i++)
        if (o->act_state[bk[i].a] == RES_SHARED && lone_at(o, bk[i].nx, v, H, &tr)) dm_add(o, bk[i]), o->dm_cand[tr]++;
    const slot *sl = &o->slots[(s - 1) % o->R];
    for (uint32_t oc = 0; oc < sl->n && o->P >= 1; oc++) {
        const uint32_t a = sl->act[oc];
        if (o->act_state[a] != RES_SHARED || next_use(o, sl, oc) != v || !lone_at(o, sl->next[oc], v, H, &tr)) continue;
        uint32_t i = 0; // its sync-later entry of s-1 in record s-1 (in occurrence order, not yet sorted)
        while (!(prev->sync_later[i].key == sl->key[oc] && prev->sync_later[i].grad_iter == s - 1)) i++;
        dm_add(o, (bentry){a, s - 1, i, sl->next[oc]}), o->dm_cand[tr]++;
    }
}

// Demotes dm_take[i] keys of each trainer i: its last candidates.
static void dm_apply(oref_impl *o, uint32_t s, uint32_t H, plan *prev, plan *cur) {
    const uint32_t v = s + o->P, j = v % o->NB, n = o->bucket_n[j];
    bentry *bk = o->bucket[j];
    uint32_t tr;
    for (uint32_t i = o->dm_n; i-- > 0;) {
        const bentry e = o->dm_list[i];
        lone_at(o, e.nx, v, H, &tr);
        if (!o->dm_take[tr]) continue;
        o->dm_take[tr]--;
        evict_pressure(o, e, v, s, prev);
        const uint64_t g = o->act_gate[e.a];
        const slot *sv = &o->slots[e.nx >> o->pos_bits];
        const uint64_t key = sv->key[e.nx & o->pos_mask];
        plan_add_fetch(cur, (plan_fetch){key, v, (uint32_t)g - 1, (uint16_t)tr, (uint16_t)(g >> 32), PLAN_PRIVATE});
        o->act_state[e.a] = RES_PRIVATE, o->priv_count[tr]++;
        o->st.fetches++, o->st.fetches_private++, o->st.hits--, o->st.demotions++;
    }
    uint32_t k = 0; // the bucket keeps the keys still shared, in order
    for (uint32_t i = 0; i < n; i++)
        if (o->act_state[bk[i].a] == RES_SHARED) bk[k++] = bk[i];
    o->bucket_n[j] = k;
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

static uint64_t demote(oref_impl *o, uint32_t s, uint32_t H, plan *prev, plan *cur) {
    dm_collect(o, s, H, prev);
    const uint64_t worst = water_fill(o->T, o->shared_count, o->priv_count, o->dm_cand, o->dm_take, o->C);
    if (worst > o->C) return worst;
    dm_apply(o, s, H, prev, cur);
    return 0;
}

// Demotions ahead (T > 1, W >= P >= 1).  A step may run short where no demotion of its own can
// help, because the keys to demote are used too early for it (they would have had to be evicted
// before the step before it).  A demotion at s of a key of s+P frees a slot, on every trainer but
// the key's, at every step up to s+P.  So after its own work, step s looks at each step s1 =
// s+1..s+P whose batches s1..s1+P its horizon shows, and at best for it: a key of those batches
// not resident now is taken to come back private where its one use there is by one trainer with
// no later use within H(s) (the batches that later steps add can only make one shared), and the
// steps s+1..s1 as demoting all they could (shared keys whose one use f in s1..s1+P comes after
// s+P, by one trainer, with no later use within H(s) and none in f-P..f-1).  What a trainer needs
// at s1 after Belady is then at least the keys of s1..s1+P resident shared now and those that come
// back shared, plus its private keys (those for s1..s+P and the ones that come back private), less
// what those demotions could free.  Where water-filling over them cannot bring that within C, step
// s1 would refuse whatever the steps before it did; then step s demotes now, from its own
// candidates (keys of s+P, as demote), as many of each trainer's as a filling that may also take
// them takes beyond the later steps' (nothing where even that cannot, nor for a later s1; each s1
// counts those taken for the ones before it).  A plan that worked before is unchanged: this acts
// only where a later step would have refused.  Batches s1..s1+P with at most C distinct keys in
// all cannot run short.  The previous use of each occurrence of s+P+1..s+2P from s+1 on comes from
// the next links (ah_prev).
// The previous use (from s+1 on; 0: at s or before, or none) of each occurrence of batches
// s+P+1..min(s+2P, H), at ah_prev[ah_off[q - s - P - 1] + position], from the next links of s+1..
static void ahead_prev(oref_impl *o, uint32_t s, uint32_t H) {
    const uint32_t P = o->P, hi = BP_MIN(s + 2 * P, H);
    uint32_t *ah_off = o->ah_off, n_all = 0;
    for (uint32_t q = s + P + 1; q <= hi; q++) ah_off[q - s - P - 1] = n_all, n_all += o->slots[q % o->R].n;
    if (o->ah_cap < n_all) {
        o->ah_cap = BP_MAX(n_all, 2 * o->ah_cap);
        o->ah_prev = bp_xrealloc(o->ah_prev, (size_t)o->ah_cap * sizeof *o->ah_prev);
    }
    memset(o->ah_prev, 0, (size_t)n_all * sizeof *o->ah_prev);
    for (uint32_t q0 = s + 1; q0 < hi; q0++) {
        const slot *sq = &o->slots[q0 % o->R];
        for (uint32_t oc = 0; oc < sq->n; oc++) {
            const uint32_t v = next_use(o, sq, oc);
            if (v != NIL && v > s + P && v <= hi) o->ah_prev[ah_off[v - s - P - 1] + (sq->next[oc] & o->pos_mask)] = q0;
        }
    }
}

static void demote_ahead(oref_impl *o, uint32_t s, uint32_t H, plan *prev, plan *cur) {
    const uint32_t T = o->T, P = o->P;
    if (T < 2 || P < 1 || o->W < P || s < 1 || s + 1 + P > H) return;
    const uint32_t *ah_off = o->ah_off;
    uint64_t ext[ORACLE_MAX_TRAINERS] = {0}, n_ext = 0, take[ORACLE_MAX_TRAINERS], both[ORACLE_MAX_TRAINERS];
    int collected = 0, linked = 0;
    for (uint32_t s1 = s + 1; s1 <= s + P && s1 + P <= H; s1++) {
        const uint32_t u1 = s1 + P;
        uint64_t sum = 0;
        for (uint32_t q = s1; q <= u1; q++) sum += o->slots[q % o->R].n;
        if (sum <= o->C) continue;
        if (!linked) ahead_prev(o, s, H), linked = 1;
        uint64_t sh = 0, pv[ORACLE_MAX_TRAINERS] = {0}, c1[ORACLE_MAX_TRAINERS] = {0};
        for (uint32_t q = s1; q <= u1; q++) { // each key of s1..u1 at its last use there
            const slot *sq = &o->slots[q % o->R];
            for (uint32_t oc = 0; oc < sq->n; oc++) {
                const uint32_t nu = next_use(o, sq, oc), tr = (uint32_t)__builtin_ctzll(sq->users[oc]);
                if (nu != NIL && nu <= u1) continue;
                const uint8_t st = o->act_state[sq->act[oc]];
                if (q <= s + P) { // resident now
                    if (st == RES_PRIVATE) pv[tr]++;
                    else sh++;
                    continue;
                }
                const uint32_t pb = o->ah_prev[ah_off[q - s - P - 1] + oc];
                const int lone = popcount64(sq->users[oc]) == 1 && (nu == NIL || nu > H);
                if (st == RES_SHARED) sh++, c1[tr] += lone && pb + P < q;
                else if (pb < s1 && lone) pv[tr]++; // fetched for its one use in s1..u1: private
                else sh++;
            }
        }
        sh -= n_ext;
        for (uint32_t i = 0; i < T; i++) pv[i] += ext[i];
        if (water_fill(T, sh, pv, c1, take, o->C) <= o->C) continue; // step s1 manages on its own
        if (!collected) dm_collect(o, s, H, prev), collected = 1;
        for (uint32_t i = 0; i < T; i++) both[i] = c1[i] + o->dm_cand[i] - ext[i];
        if (water_fill(T, sh, pv, both, take, o->C) > o->C) break; // step s1 refuses whatever is done here
        for (uint32_t i = 0; i < T; i++) {
            const uint64_t add = take[i] > c1[i] ? take[i] - c1[i] : 0;
            ext[i] += add, n_ext += add;
        }
    }
    if (!n_ext) return;
    memcpy(o->dm_take, ext, T * sizeof *o->dm_take);
    dm_apply(o, s, H, prev, cur);
}

static uint64_t max_private(const oref_impl *o, uint32_t *who) {
    uint64_t m = 0;
    *who = 0;
    for (uint32_t i = 0; i < o->T; i++)
        if (o->priv_count[i] > m) m = o->priv_count[i], *who = i;
    return m;
}

// Puts record t's sync-later entries in group order (plan.h): gradients of t by deadline, then
// restatements of older gradients (all due at t + 1) from the newest to the oldest.  A stable
// counting sort: within a group, entries keep their occurrence order.
static void sort_sync(oref_impl *o, plan *r, uint32_t t) {
    uint32_t n = r->n_sync_later, span = o->P + o->W + 2, nb = 2 * span;
    if (n < 2) return;
    if (r->cap_sync_later > o->sync_cap) {
        o->sync_cap = r->cap_sync_later;
        o->sync_tmp = bp_xrealloc(o->sync_tmp, (size_t)o->sync_cap * sizeof *o->sync_tmp);
    }
    memset(o->sync_cnt, 0, (nb + 1) * sizeof *o->sync_cnt);
    const plan_sync *e = r->sync_later;
#define SYNC_BUCKET(x) ((x).grad_iter == t ? (x).deadline - (t + 1) : span + (t - 1 - (x).grad_iter))
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = SYNC_BUCKET(e[i]);
        BP_ASSERT(b < nb);
        o->sync_cnt[b + 1]++;
    }
    for (uint32_t b = 0; b < nb; b++) o->sync_cnt[b + 1] += o->sync_cnt[b];
    for (uint32_t i = 0; i < n; i++) o->sync_tmp[o->sync_cnt[SYNC_BUCKET(e[i])]++] = e[i];
#undef SYNC_BUCKET
    // The sorted copy becomes the record's list; the old list is the next scratch.
    plan_sync *old = r->sync_later;
    uint32_t old_cap = r->cap_sync_later;
    r->sync_later = o->sync_tmp, r->cap_sync_later = o->sync_cap;
    o->sync_tmp = old, o->sync_cap = old_cap;
}

static void fill_header(oref_impl *o, plan *r, uint32_t t) {
    const slot *sl = &o->slots[t % o->R];
    BP_ASSERT(sl->batch == t);
    r->iter = t, r->flags = (o->finished && t + 1 == o->n_pushed) ? PLAN_LAST : 0;
    r->P = o->P, r->W = o->W, r->B = sl->samples;
    r->row0 = o->row_base + (uint64_t)t * o->B;
    r->capacity = o->C, r->n_keys = o->K;
    r->key_bytes = o->K <= (1ull << 32) ? 4 : 8;
    for (uint32_t i = 0; i <= o->T; i++) r->slice[i] = (uint32_t)((uint64_t)i * sl->samples / o->T);
    // Private keys grouped by trainer, each group in occurrence order.
    memset(r->priv_off, 0, (size_t)(o->T + 1) * sizeof *r->priv_off);
    for (uint32_t k = 0; k < o->pv_n; k++) r->priv_off[o->pv_tr[k] + 1]++;
    for (uint32_t i = 0; i < o->T; i++) r->priv_off[i + 1] += r->priv_off[i];
    plan_reserve_private(r, o->pv_n);
    memcpy(o->pv_cursor, r->priv_off, o->T * sizeof *o->pv_cursor);
    for (uint32_t k = 0; k < o->pv_n; k++) r->priv_key[o->pv_cursor[o->pv_tr[k]]++] = o->pv_key[k];
    r->n_private = o->pv_n;
    sort_sync(o, r, t);
}

#define AHEAD 8 // prefetch distances (occurrences): residency state at 2 AHEAD, gate words at AHEAD

// One planning step s (see oracle.h).  Returns 1 if it completed record s-1 (in rec[(s-1)&1]),
// 0 if not (s = 0), or BP_ECAPACITY.
static int plan_step(oref_impl *o) {
    const uint32_t s = o->step, P = o->P, T = o->T;
    const uint32_t N = o->finished ? o->n_pushed : NIL;
    uint32_t H = s + P + o->W;
    if (o->finished && H > N - 1) H = N - 1; // N >= 1 here
    plan *prev = &o->rec[(s + 1) & 1], *cur = &o->rec[s & 1];
    uint8_t *state = o->act_state;

    uint64_t *gate = o->act_gate;
    uint64_t shared = o->shared_count;
    oracle_stats st = o->st; // counters kept in registers through the loops

    // (a) keys used at s-1: private ones and those with no use in [s, H] are evicted after s-1;
    // the others stay, and their gradient of s-1 is synchronised before the next use.
    if (s >= 1) {
        o->bucket_n[(s - 1) % o->NB] = 0;
        o->pv_n = 0;
        const slot *sl = &o->slots[(s - 1) % o->R];
        const uint32_t *sact = sl->act, *snext = sl->next, n = sl->n;
        const uint64_t *skey = sl->key;
        for (uint32_t oc = 0; oc < n; oc++) {
            if (oc + 2 * AHEAD < n) __builtin_prefetch(&state[sact[oc + 2 * AHEAD]], 1);
            if (oc + AHEAD < n) { // the gate word of a key that is likely to be evicted
                uint32_t a2 = sact[oc + AHEAD];
                if (state[a2] == RES_PRIVATE || __atomic_load_n(&snext[oc + AHEAD], __ATOMIC_RELAXED) == NIL)
                    __builtin_prefetch(&gate[a2], 1);
            }
            uint32_t a = sact[oc];
            uint64_t key = skey[oc];
            if (state[a] == RES_PRIVATE) {
                uint32_t tr = (uint32_t)__builtin_ctzll(sl->users[oc]);
                private_push(o, key, (uint16_t)tr);
                plan_add_evict(prev, (plan_evict){key, (uint16_t)tr, PLAN_PRIVATE});
                o->priv_count[tr]--;
                state[a] = RES_NONE, gate[a] = gate_of(tr, s - 1);
                st.evictions++, st.evictions_private++;
                continue;
            }
            BP_ASSERT(state[a] == RES_SHARED);
            uint32_t v = next_use(o, sl, oc);
            if (v == NIL || v > H) {
                uint32_t owner = rr_next(&o->rr_owner, T);
                plan_add_evict(prev, (plan_evict){key, (uint16_t)owner, PLAN_WB_NEXT});
                plan_add_sync_later(prev, (plan_sync){key, s - 1, s});
                state[a] = RES_NONE, gate[a] = gate_of(owner, s - 1);
                shared--;
                st.evictions++, st.sync_later++;
            } else if (v == s) {
                plan_add_sync_now(prev, key);
                st.sync_now++;
            } else {
                if (v > s + P) bucket_push(o, v, (bentry){a, s - 1, prev->n_sync_later, sl->next[oc]});
                plan_add_sync_later(prev, (plan_sync){key, s - 1, v - 1});
                st.sync_later++;
            }
        }
    }

    // (b) fetches issued at s: for batch s+P (all of 0..P at s = 0).
    uint32_t u0 = s == 0 ? 0 : s + P;
    for (uint32_t u = u0; u <= s + P && u < N; u++) {
        const slot *su = &o->slots[u % o->R];
        BP_ASSERT(su->batch == u && u <= H);
        const uint32_t *sact = su->act, n = su->n;
        const uint64_t *susers = su->users;
        for (uint32_t oc = 0; oc < n; oc++) {
            if (oc + 2 * AHEAD < n) __builtin_prefetch(&state[sact[oc + 2 * AHEAD]], 1);
            if (oc + AHEAD < n && state[sact[oc + AHEAD]] == RES_NONE) __builtin_prefetch(&gate[sact[oc + AHEAD]], 1);
            uint32_t a = sact[oc];
            uint64_t users = susers[oc];
            uint32_t nu = popcount64(users);
            st.accesses += nu;
            if (state[a] != RES_NONE) {
                st.hits += nu;
                continue;
            }
            uint64_t g = gate[a];
            plan_fetch f = {su->key[oc], u, (uint32_t)g - 1, 0, g ? (uint16_t)(g >> 32) : PLAN_NO_WRITER, 0};
            uint32_t v = next_use(o, su, oc);
            // Private needs the window to show that no fetch decision for u+1..u+P can see the
            // key resident: no use in (u, H] with H >= u + P, or with H the last batch (the
            // input has ended and the horizon was cut there: nothing comes after it).  The test
            // is on the cut, not on H = N - 1 alone: the step whose horizon is exactly the last
            // batch may run before oracle_finish, and plans must not depend on when it is called.
            if (nu == 1 && (v == NIL || v > H) && (H >= u + P || s + P + o->W >= N)) {
                uint32_t tr = (uint32_t)__builtin_ctzll(users);
                state[a] = RES_PRIVATE;
                o->priv_count[tr]++;
                f.fetcher = (uint16_t)tr, f.flags = PLAN_PRIVATE;
                st.fetches_private++;
            } else {
                state[a] = RES_SHARED;
                shared++;
                f.fetcher = (uint16_t)rr_next(&o->rr_fetch, T);
            }
            st.fetches++;
            plan_add_fetch(cur, f);
        }
        st.unique += n;
    }
    o->shared_count = shared;
    o->st = st;

    // (c) capacity: Belady among shared keys not needed by s..s+P.
    uint32_t who;
    uint64_t mp = max_private(o, &who);
    if (o->shared_count + mp > o->C) {
        uint64_t need = o->shared_count + mp - o->C;
        for (uint32_t v = H; v > s + P && need; v--) {
            uint32_t j = v % o->NB;
            if (need < o->bucket_n[j] && T > 1 && o->W >= P) bucket_lone_last(o, v, H);
            while (o->bucket_n[j] && need) {
                evict_pressure(o, o->bucket[j][--o->bucket_n[j]], v, s, prev);
                need--;
            }
        }
        uint64_t least = o->shared_count + mp; // the least this batch needs, as far as is known here
        if (need && s >= 1 && T > 1 && o->W >= P && (least = demote(o, s, H, prev, cur)) == 0) {
            mp = max_private(o, &who);
            need = 0;
        }
        if (need) {
            uint32_t ulo = s == 0 ? 0 : s + P, uhi = s + P < N ? s + P : N - 1;
            const unsigned long long base = o->iter_base; // a resumed run's numbers
            o->err = bp_fail(BP_ECAPACITY,
                             "oracle: cache too small: batch %llu cannot be prefetched at iteration %llu: trainer %u "
                             "needs %llu rows (%llu shared + %llu private, pinned for batches %llu..%llu) but the "
                             "cache holds %llu; the minimum cache size for this batch is %llu rows",
                             base + ulo, base + s, who, (unsigned long long)(o->shared_count + mp),
                             (unsigned long long)o->shared_count, (unsigned long long)mp, base + s, base + uhi,
                             (unsigned long long)o->C, (unsigned long long)least);
            return o->err;
        }
    }
    demote_ahead(o, s, H, prev, cur);
    mp = max_private(o, &who);
    if (o->shared_count + mp > o->st.peak_resident) o->st.peak_resident = o->shared_count + mp;

    if (s == 0) return 0;
    fill_header(o, prev, s - 1);
    o->st.batches++, o->st.samples += o->slots[(s - 1) % o->R].samples;
    return 1;
}

// ---------------------------------------------------------------------------------------------
// API

static void lock(oref_impl *o) {
    if (o->threads == 2) pthread_mutex_lock(&o->mu);
}
static void unlock(oref_impl *o) {
    if (o->threads == 2) pthread_mutex_unlock(&o->mu);
}

int oracle_ref_init(oracle_ref *out, const oracle_config *cfg) {
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
    uint64_t K = 0;
    for (uint32_t f = 0; f < cfg->F; f++) {
        if (cfg->card[f] == 0 || cfg->card[f] > (1ull << 32))
            return bp_fail(BP_EINVAL, "oracle: table %u has %llu rows (1..2^32)", f, (unsigned long long)cfg->card[f]);
        K += cfg->card[f];
    }
    uint32_t R = cfg->P + cfg->W + 3 + (cfg->threads == 2);
    uint32_t slot_bits = 1;
    while ((1u << slot_bits) <= R) slot_bits++; // R < 2^slot_bits, so no occurrence id is NIL
    uint32_t pos_bits = 32 - slot_bits;
    uint64_t per_batch = (uint64_t)cfg->B * cfg->F;
    if (per_batch >= (1ull << pos_bits))
        return bp_fail(BP_EINVAL, "oracle: batch of %u samples x %u features is too large for a window of %u batches",
                       cfg->B, cfg->F, R);

    oref_impl *o = bp_xcalloc(1, sizeof *o);
    o->T = cfg->T, o->B = cfg->B, o->F = cfg->F, o->W = cfg->W, o->P = cfg->P, o->C = cfg->C;
    o->R = R, o->NB = cfg->P + cfg->W + 2, o->threads = (uint32_t)cfg->threads, o->K = K;
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
    o->act_key = big_alloc((size_t)o->act_cap * sizeof *o->act_key);
    o->act_state = big_alloc((size_t)o->act_cap);
    o->act_gate = big_alloc((size_t)o->act_cap * sizeof *o->act_gate);
    o->act_free = big_alloc((size_t)o->act_cap * sizeof *o->act_free);
    o->slots = bp_xcalloc(R, sizeof *o->slots);
    size_t per = (size_t)per_batch;
    int oom = !o->act_free || !o->act_key || !o->act_state || !o->act_gate;
    for (uint32_t j = 0; j < R && !oom; j++) {
        o->slots[j].key = big_alloc(per * sizeof(uint64_t));
        o->slots[j].act = big_alloc(per * sizeof(uint32_t));
        o->slots[j].next = big_alloc(per * sizeof(uint32_t));
        o->slots[j].users = big_alloc(per * sizeof(uint64_t));
        o->slots[j].batch = NIL;
        oom = !o->slots[j].key || !o->slots[j].act || !o->slots[j].next || !o->slots[j].users;
    }
    o->km_flat = km == ORACLE_KEYMAP_FLAT;
    if (o->km_flat) {
        o->km_bytes = (size_t)K * sizeof *o->km;
        o->km = big_alloc(o->km_bytes);
        oom = oom || !o->km;
    } else {
        hmap_init(&o->hm, 1024);
    }
    out->impl = o;
    if (oom) {
        oracle_ref_free(out);
        return bp_fail(BP_ENOMEM, "oracle: cannot map memory for %llu keys and a window of %u batches of %u x %u",
                       (unsigned long long)K, R, cfg->B, cfg->F);
    }
    o->priv_count = bp_xcalloc(cfg->T, sizeof *o->priv_count);
    o->pv_cursor = bp_xcalloc(cfg->T, sizeof *o->pv_cursor);
    o->dm_cand = bp_xcalloc(cfg->T, sizeof *o->dm_cand);
    o->ah_off = bp_xcalloc(cfg->P + 1, sizeof *o->ah_off);
    o->dm_take = bp_xcalloc(cfg->T, sizeof *o->dm_take);
    o->sync_cnt = bp_xcalloc(2 * (o->P + o->W + 2) + 1, sizeof *o->sync_cnt);
    o->bucket = bp_xcalloc(o->NB, sizeof *o->bucket);
    o->bucket_n = bp_xcalloc(o->NB, sizeof *o->bucket_n);
    o->bucket_cap = bp_xcalloc(o->NB, sizeof *o->bucket_cap);
    plan_init(&o->rec[0]), plan_init(&o->rec[1]);
    plan_reset(&o->rec[0], o->T), plan_reset(&o->rec[1], o->T);
    if (o->threads == 2) {
        if (!o->borrow)
            for (int i = 0; i < INQ; i++) o->inbuf[i] = bp_xmalloc(per * sizeof(uint32_t));
        pthread_mutex_init(&o->mu, NULL);
        pthread_cond_init(&o->cv, NULL);
        o->mu_init = 1;
        if (pthread_create(&o->th, NULL, indexer_thread, o) != 0) {
            oracle_ref_free(out);
            return bp_fail(BP_ENOMEM, "oracle: cannot start the indexer thread");
        }
        o->th_started = 1;
    }
    return 0;
}

void oracle_ref_free(oracle_ref *out) {
    oref_impl *o = out ? out->impl : NULL;
    if (!o) return;
    if (o->th_started) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->th, NULL);
    }
    if (o->mu_init) {
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
    }
    for (int i = 0; i < INQ; i++) free(o->inbuf[i]);
    size_t per = (size_t)o->B * o->F;
    for (uint32_t j = 0; o->slots && j < o->R; j++) {
        big_free(o->slots[j].key, per * sizeof(uint64_t));
        big_free(o->slots[j].act, per * sizeof(uint32_t));
        big_free(o->slots[j].next, per * sizeof(uint32_t));
        big_free(o->slots[j].users, per * sizeof(uint64_t));
    }
    free(o->slots);
    big_free(o->act_free, (size_t)o->act_cap * sizeof *o->act_free);
    big_free(o->act_key, (size_t)o->act_cap * sizeof *o->act_key);
    big_free(o->act_state, (size_t)o->act_cap);
    big_free(o->act_gate, (size_t)o->act_cap * sizeof *o->act_gate);
    if (o->km) big_free(o->km, o->km_bytes);
    hmap_free(&o->hm);
    for (uint32_t j = 0; o->bucket && j < o->NB; j++) free(o->bucket[j]);
    free(o->bucket), free(o->bucket_n), free(o->bucket_cap);
    free(o->part_tmp);
    free(o->priv_count), free(o->pv_key), free(o->pv_tr), free(o->pv_cursor), free(o->sync_tmp), free(o->sync_cnt);
    free(o->dm_cand), free(o->dm_take), free(o->dm_list), free(o->ah_prev), free(o->ah_off);
    free(o->offset), free(o->card);
    plan_free(&o->rec[0]), plan_free(&o->rec[1]);
    free(o);
    out->impl = NULL;
}

int oracle_ref_push_samples(oracle_ref *out, const uint32_t *ids, uint32_t n) {
    oref_impl *o = out->impl;
    if (o->err) return o->err;
    if (n < 1 || n > o->B) return bp_fail(BP_EINVAL, "oracle: batch of %u samples, expected 1..%u", n, o->B);
    if (o->finished || o->last_short)
        return bp_fail(BP_EINVAL, "oracle: batch %u pushed after %s", o->n_pushed,
                       o->finished ? "oracle_ref_finish" : "a short batch (only the last batch may be short)");
    if (o->n_pushed >= NIL - o->P - o->W - 8) return bp_fail(BP_ERANGE, "oracle: too many batches");
    if (o->n_pushed >= o->R + o->n_retired)
        return bp_fail(BP_EINVAL, "oracle: window full: call oracle_ref_next_plan after each push");
    if (n < o->B) o->last_short = 1;
    if (o->threads == 1) {
        double c0 = thread_cpu();
        int rc = indexer_run(o, ids, n, o->n_retired);
        o->cpu_index += thread_cpu() - c0;
        if (rc) return o->err = rc;
        o->n_indexed++;
        publish_mem(o);
        o->n_pushed++;
        return 0;
    }
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

int oracle_ref_push_batch(oracle_ref *o, const uint32_t *ids) { return oracle_ref_push_samples(o, ids, o->impl->B); }

int oracle_ref_finish(oracle_ref *out) {
    oref_impl *o = out->impl;
    lock(o);
    o->finished = 1;
    unlock(o);
    return o->err;
}

int oracle_ref_done(const oracle_ref *o) { return o->impl->done; }

int oracle_ref_next_plan(oracle_ref *out, plan *p) {
    oref_impl *o = out->impl;
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
            if (o->n_pushed < need + (o->threads == 2)) return 0;
        }
        if (o->threads == 2) {
            pthread_mutex_lock(&o->mu);
            while (o->n_indexed < need && !o->idx_err) pthread_cond_wait(&o->cv, &o->mu);
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

void oracle_ref_get_stats(const oracle_ref *out, oracle_stats *st) {
    oref_impl *o = out->impl;
    lock(o);
    *st = o->st;
    uint64_t mem = o->pub_acts * (sizeof(uint32_t) + 2 * sizeof(uint64_t) + 1);
    mem += (uint64_t)o->R * o->pub_occ * (2 * sizeof(uint32_t) + 2 * sizeof(uint64_t));
    mem += o->km_flat ? o->km_bytes : o->pub_hm_cap * 16;
    for (uint32_t j = 0; j < o->NB; j++) mem += (uint64_t)o->bucket_cap[j] * sizeof(bentry);
    mem += (uint64_t)o->part_cap * sizeof(bentry);
    // counted as oracle.c counts them
    mem += plan_list_bytes(&o->rec[0]) + plan_list_bytes(&o->rec[1]);
    mem += (uint64_t)o->pv_cap * (sizeof *o->pv_key + sizeof *o->pv_tr) + (uint64_t)o->sync_cap * sizeof(plan_sync);
    if (o->threads == 2 && !o->borrow) mem += (uint64_t)INQ * o->B * o->F * sizeof(uint32_t);
    st->active_peak = o->pub_acts;
    st->cpu_index_s = o->cpu_index, st->cpu_plan_s = o->cpu_plan;
    unlock(o);
    st->mem_bytes = mem;
    st->parts = 1;
}
