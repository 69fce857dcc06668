// role_async: a trainer of mode `async`, the HET-style baseline with bounded staleness
// (dist.h, msg.h, DESIGN §7).  The one mode that gives up synchronous semantics on purpose.
//
// Each trainer keeps its own bounded cache of C = --cache-rows rows (model part, E floats).  A
// cached row carries the iteration j of the rows that filled it: the server's value with every
// trainer's gradients of the iterations < j applied (the reply's iteration), so read at
// iteration k the row is k - j iterations old.
//
// Iteration k, trainer i, slice [b0, b1) of global batch k (S = the bound):
//   1. unique keys of the slice (ascending).  A resident key with k - j <= bound (--staleness)
//      is a hit; an older one is refreshed; a missing one takes a free slot or evicts, by
//      --cache-policy, the resident row that is least recently read (LRU: last iteration read,
//      ties by key) or least often read (LFU: iterations it was read since it entered, ties by
//      key) among the rows the slice does not read.  The cache never holds more than C rows;
//      a slice reading more than C distinct rows is a start-up error (role_async_check).
//   2. one ROW_REQ(max(0, k - S)) to each server owning a key to fetch (none when everything
//      hits), wait for the replies.  The servers' gate is sync's: a request of iteration j is
//      answered once every update before j is applied, with the rows as they are then (the
//      reply says their iteration a, k - S <= a <= k).  So a miss waits only while its server
//      is more than S iterations behind; with S = 0 it waits for every update of k - 1, as in
//      sync.  The rows enter their slots with j = a.
//   3. gather from the cache slots; forward, BCE (scale 1/B), backward, dense all-reduce and
//      step: the dense parameters stay synchronous, as in HET (role_dense_step)
//   4. coalesced row gradients -> GRAD_PUSH(k) to every server (empty or not), sent without
//      waiting: the next iteration completes them.  The servers sum them in trainer-rank order
//      and apply them, exactly as in sync.
// A trainer never applies its own gradient to its cached copy: a cached row is always a value
// the server held (after iterations < j), so its age is exact, the servers hold the one model,
// and with bound 0 every row read is fetched in its own iteration after every update of the
// previous one: the model is sync's bit for bit.  (HET's servers likewise own the authoritative rows; a local update would make the
// cache a second, diverging copy whose age is no longer a single number.)
//
// Figures (role_loop's window and summary lines): the age of every (b, f) lookup's row (a
// histogram: ages 0..64 exact, then power-of-two ranges), its mean and maximum, cache hits
// (lookups of rows not fetched in that iteration: "hit_rate"), misses, refreshes, evictions and the peak
// residency of the fullest trainer's cache.  The ages are measured at the read, from the slot's
// fetch iteration, independently of the refresh decision; BAGPIPE_TEST_STALENESS_SLACK=n (tests
// only) lets the decision accept rows n iterations beyond the bound, so a test can show that
// the measurement catches an over-age read.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "common.h"
#include "dist.h"
#include "emb.h"
#include "jsonl.h"
#include "msg.h"
#include "role_async.h"
#include "role_loop.h"
#include "train.h"

// Age histogram buckets: ages 0..AGE_EXACT one each, then [2^j, 2^(j+1)) for j = 6.., the last
// bucket open-ended.
enum { AGE_EXACT = 64, AGE_BUCKETS = AGE_EXACT + 1 + 32 };

static int age_bucket(int64_t age) {
    if (age <= AGE_EXACT) return (int)age;
    int j = 63 - __builtin_clzll((unsigned long long)age); // floor(log2(age)) >= 6
    return BP_MIN(AGE_EXACT + 1 + (j - 6), AGE_BUCKETS - 1);
}

// ---------------------------------------------------------------------------------------------
// The cache (role_async.h).  The eviction order is a binary min-heap of the resident slots by
// (priority, key), priority = the last iteration read (LRU) or the iterations read (LFU).

int role_async_cache_init(role_async_cache *c, uint64_t C, int E, int lfu) {
    memset(c, 0, sizeof *c);
    if (C > UINT32_MAX - 1) return bp_fail(BP_EUSAGE, "--cache-rows %llu: at most %u", (unsigned long long)C, UINT32_MAX - 1);
    c->C = C, c->E = E, c->lfu = lfu;
    c->rows_bytes = (size_t)C * E * sizeof(float);
    c->rows = bp_alloc_huge(c->rows_bytes);
    if (!c->rows) return bp_fail(BP_ENOMEM, "--cache-rows %llu: cannot map %zu bytes", (unsigned long long)C, c->rows_bytes);
    c->key = bp_xmalloc(C * sizeof *c->key);
    c->fetched = bp_xmalloc(C * sizeof *c->fetched);
    c->used = bp_xmalloc(C * sizeof *c->used);
    c->freq = bp_xmalloc(C * sizeof *c->freq);
    c->heap = bp_xmalloc(C * sizeof *c->heap);
    c->hpos = bp_xmalloc(C * sizeof *c->hpos);
    c->stash = bp_xmalloc(C * sizeof *c->stash);
    role_keymap_init(&c->map, C);
    return 0;
}

void role_async_cache_free(role_async_cache *c) {
    if (c->rows) bp_free_huge(c->rows, c->rows_bytes);
    free(c->key), free(c->fetched), free(c->used), free(c->freq), free(c->heap), free(c->hpos), free(c->stash);
    role_keymap_free(&c->map);
    memset(c, 0, sizeof *c);
}

// 1 when slot a leaves before slot b.
static int ac_before(const role_async_cache *c, uint32_t a, uint32_t b) {
    uint64_t pa = c->lfu ? c->freq[a] : (uint64_t)c->used[a], pb = c->lfu ? c->freq[b] : (uint64_t)c->used[b];
    return pa != pb ? pa < pb : c->key[a] < c->key[b];
}

static void ac_swap(role_async_cache *c, uint64_t i, uint64_t j) {
    uint32_t x = c->heap[i];
    c->heap[i] = c->heap[j], c->heap[j] = x;
    c->hpos[c->heap[i]] = (uint32_t)i, c->hpos[c->heap[j]] = (uint32_t)j;
}

static void ac_up(role_async_cache *c, uint64_t i) {
    while (i > 0 && ac_before(c, c->heap[i], c->heap[(i - 1) / 2])) ac_swap(c, i, (i - 1) / 2), i = (i - 1) / 2;
}

static void ac_down(role_async_cache *c, uint64_t i) {
    for (;;) {
        uint64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->hn && ac_before(c, c->heap[l], c->heap[m])) m = l;
        if (r < c->hn && ac_before(c, c->heap[r], c->heap[m])) m = r;
        if (m == i) return;
        ac_swap(c, i, m), i = m;
    }
}

static void ac_push(role_async_cache *c, uint32_t slot) {
    c->heap[c->hn] = slot, c->hpos[slot] = (uint32_t)c->hn;
    ac_up(c, c->hn++);
}

static uint32_t ac_pop(role_async_cache *c) {
    BP_ASSERT(c->hn > 0);
    uint32_t s = c->heap[0];
    c->heap[0] = c->heap[--c->hn], c->hpos[c->heap[0]] = 0;
    ac_down(c, 0);
    return s;
}

// ---------------------------------------------------------------------------------------------
// The trainer

// Window figures, all-reduced over the trainers: the age histogram, then these, then one entry
// per trainer for its largest age in the window and its peak residency.
enum { F_AGE_SUM = AGE_BUCKETS, F_HITS, F_MISS, F_REFRESH, F_EVICT, F_N };

typedef struct {
    const train_setup *su;
    trainer tr;
    role_stats st;
    role_srv srv;
    role_async_cache cache;
    emb_grad gk;             // unique keys of the slice (rows unused, E = 1)
    emb_layout Lk;           // the row layout with E = 1, for gk
    float *zeros;            // (cap) zero "gradients" for gk
    int S, T, i, first_server, first_trainer, bmax;
    int64_t bound, slack;    // --staleness; the test-only slack of the refresh decision
    uint32_t cap;            // bmax * F: most keys in one slice
    uint32_t *uslot;         // (cap) per unique key: its cache slot
    uint32_t *fu, *fsrv, *fpos; // (cap) per key fetched: unique-key index, server, reply position
    uint8_t *ufetched;       // (cap) per unique key: fetched in this iteration
    uint64_t *fkeys;         // (cap) keys fetched this iteration, ascending
    const float **erow;      // (cap) per (b, f) entry: its row
    uint32_t *eidx;          // (cap) per (b, f) entry: its key's index among the unique keys
    float *ar_work;          // dense all-reduce scratch
    void *dump;              // trainer 0: dump receive buffer
    size_t dump_cap;
    uint64_t hist[AGE_BUCKETS]; // this window's lookups by age bucket
    uint64_t age_sum, hits; // this window's: ages summed over the lookups; lookups served without a fetch
    uint64_t prev_miss, prev_refresh, prev_evict; // the cache's counters at the window's start
    int64_t age_max;         // this window's largest age
    size_t nfig;             // F_N + 2 T
    double *win, *tot;       // (nfig) the last window's figures and the run's, over all trainers
    double *fwork;           // all-reduce scratch
} astate;

static int as_init(astate *as, const train_setup *su, const dist_layout *l, int i) {
    memset(as, 0, sizeof *as);
    as->su = su, as->S = l->S, as->T = l->T, as->i = i;
    as->first_server = dist_server_rank(l, 0), as->first_trainer = dist_trainer_rank(l, 0);
    as->bmax = (su->B + l->T - 1) / l->T;
    as->bound = su->staleness;
    const char *slack = getenv("BAGPIPE_TEST_STALENESS_SLACK");
    as->slack = slack ? strtoll(slack, NULL, 10) : 0;
    const int F = su->mc.F, E = su->mc.E, T = as->T;
    int rc = train_replica_init(&as->tr, su, as->bmax, i);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, su->seed, 0);
    model_init_params(&as->tr.m, &rng); // the same draws on every trainer: identical replicas
    if ((rc = role_async_cache_init(&as->cache, su->cache_rows, E, su->cache_policy == TRAIN_CACHE_LFU))) return rc;
    as->cap = (uint32_t)(as->bmax * F);
    if ((rc = emb_grad_init(&as->gk, (int)as->cap, 1))) return rc;
    as->Lk = as->tr.L;
    as->Lk.E = 1;
    as->zeros = bp_xcalloc(as->cap, sizeof(float));
    role_srv_init(&as->srv, as->S, as->first_server, i, E, as->cap);
    as->uslot = bp_xmalloc(as->cap * sizeof *as->uslot);
    as->fu = bp_xmalloc(as->cap * sizeof *as->fu);
    as->fsrv = bp_xmalloc(as->cap * sizeof *as->fsrv);
    as->fpos = bp_xmalloc(as->cap * sizeof *as->fpos);
    as->fkeys = bp_xmalloc(as->cap * sizeof *as->fkeys);
    as->ufetched = bp_xmalloc(as->cap);
    as->erow = bp_xmalloc(as->cap * sizeof *as->erow);
    as->eidx = bp_xmalloc(as->cap * sizeof *as->eidx);
    const size_t np = as->tr.m.n_params;
    as->ar_work = bp_xmalloc((size_t)T * ((np + (size_t)T - 1) / (size_t)T + 1) * sizeof(float));
    as->nfig = F_N + 2 * (size_t)T;
    as->win = bp_xcalloc(as->nfig, sizeof *as->win);
    as->tot = bp_xcalloc(as->nfig, sizeof *as->tot);
    as->fwork = bp_xmalloc((size_t)T * ((as->nfig + (size_t)T - 1) / (size_t)T + 1) * sizeof(double));
    if (i == 0 && dist_gathers(su)) {
        as->dump_cap = role_dump_cap(&as->tr.L);
        as->dump = bp_xmalloc(as->dump_cap);
    }
    return 0;
}

static void as_free(astate *as) {
    free(as->zeros), free(as->uslot), free(as->fu), free(as->fsrv), free(as->fpos), free(as->fkeys), free(as->ufetched);
    free(as->erow), free(as->eidx), free(as->ar_work), free(as->win), free(as->tot), free(as->fwork), free(as->dump);
    role_srv_free(&as->srv);
    emb_grad_free(&as->gk);
    role_async_cache_free(&as->cache);
    trainer_free(&as->tr);
    memset(as, 0, sizeof *as);
}

uint32_t role_async_cache_read(role_async_cache *c, int64_t t, const uint64_t *uk, int U, int64_t bound,
                               uint32_t *uslot, uint32_t *fu) {
    uint32_t nf = 0, ns = 0;
    for (int u = 0; u < U; u++) {
        uint32_t slot = role_keymap_find(&c->map, uk[u]);
        uslot[u] = slot;
        if (slot != ROLE_NO_SLOT) {
            c->used[slot] = t, c->freq[slot]++;
            ac_down(c, c->hpos[slot]); // its priority grew
            if (t - c->fetched[slot] <= bound) continue; // a hit
            c->refreshes++;
        } else {
            c->misses++;
        }
        fu[nf++] = (uint32_t)u;
    }
    for (uint32_t f = 0; f < nf; f++) {
        const int u = (int)fu[f];
        if (uslot[u] != ROLE_NO_SLOT) continue; // a refresh keeps its slot
        uint32_t slot;
        if (c->n < c->C) {
            slot = (uint32_t)c->n++;
        } else {
            for (;;) { // the rows read at t stay (U <= C: role_async_check)
                slot = ac_pop(c);
                if (c->used[slot] != t) break;
                c->stash[ns++] = slot;
            }
            role_keymap_del(&c->map, c->key[slot]);
            c->evictions++;
        }
        c->key[slot] = uk[u], c->used[slot] = t, c->freq[slot] = 1, c->fetched[slot] = -1;
        role_keymap_put(&c->map, uk[u], slot);
        uslot[u] = slot;
        c->stash[ns++] = slot;
    }
    for (uint32_t k = 0; k < ns; k++) ac_push(c, c->stash[k]);
    BP_ASSERT(c->n <= c->C && c->hn == c->n);
    c->peak = BP_MAX(c->peak, c->n);
    return nf;
}

// Steps 1-2 and the reads: erow of every (b, f) entry of the slice.  ids: (Bi, F).
static int as_fetch(void *ctx, int64_t t, const uint32_t *ids, int Bi) {
    astate *as = ctx;
    const emb_layout *L = &as->tr.L;
    const int F = L->F, E = L->E;
    role_async_cache *c = &as->cache;
    emb_grad_coalesce(&as->gk, &as->Lk, ids, as->zeros, Bi);
    const int U = as->gk.n;
    const uint64_t *uk = as->gk.keys; // (U) ascending
    const uint32_t nf = role_async_cache_read(c, t, uk, U, as->bound + as->slack, as->uslot, as->fu);
    memset(as->ufetched, 0, (size_t)U);
    for (uint32_t f = 0; f < nf; f++) as->fkeys[f] = uk[as->fu[f]], as->ufetched[as->fu[f]] = 1;
    if (nf) {
        // Rows at most `bound` iterations old will do: a server at least that far along answers
        // at once (bound 0: after every update of t - 1, as in sync).
        int rc = role_srv_fetch(&as->srv, BP_MAX(0, t - as->bound), t, as->fkeys, nf, 1, as->fsrv, as->fpos);
        if (rc) return rc;
        for (uint32_t f = 0; f < nf; f++) {
            const uint32_t slot = as->uslot[as->fu[f]], s = as->fsrv[f];
            memcpy(c->rows + (size_t)slot * E, as->srv.rin[s] + (size_t)as->fpos[f] * E, (size_t)E * sizeof(float));
            c->fetched[slot] = as->srv.rin_iter[s];
        }
    }
    role_key_index(L, ids, Bi, uk, U, as->eidx);
    uint64_t hits = 0;
    for (int e = 0; e < Bi * F; e++) {
        const uint32_t u = as->eidx[e], slot = as->uslot[u];
        const int64_t age = t - c->fetched[slot];
        BP_ASSERT(age >= 0);
        as->erow[e] = c->rows + (size_t)slot * E;
        as->hist[age_bucket(age)]++, as->age_sum += (uint64_t)age, as->age_max = BP_MAX(as->age_max, age);
        hits += !as->ufetched[u];
    }
    as->st.lookups += (uint64_t)Bi * F, as->st.hot_hits += hits, as->hits += hits;
    return 0;
}

static int as_push(void *ctx, int64_t t) {
    astate *as = ctx;
    return role_srv_push(&as->srv, t, &as->tr.g, 0);
}

// Writer: every row of every server after `iter` iterations (the servers hold the model).
static int as_collect(void *ctx, int64_t iter) {
    astate *as = ctx;
    if (as->i != 0) return 0;
    return dist_collect_rows(&as->tr, as->S, as->first_server, as->dump, as->dump_cap, iter);
}

// The window's figures over all trainers into win, added to tot.
static int as_window(void *ctx) {
    astate *as = ctx;
    const int T = as->T;
    double *v = as->win;
    memset(v, 0, as->nfig * sizeof *v);
    for (int k = 0; k < AGE_BUCKETS; k++) v[k] = (double)as->hist[k];
    const role_async_cache *c = &as->cache;
    v[F_AGE_SUM] = (double)as->age_sum, v[F_HITS] = (double)as->hits, v[F_MISS] = (double)(c->misses - as->prev_miss);
    v[F_REFRESH] = (double)(c->refreshes - as->prev_refresh), v[F_EVICT] = (double)(c->evictions - as->prev_evict);
    v[F_N + as->i] = (double)as->age_max, v[F_N + T + as->i] = (double)as->cache.peak;
    int rc = comm_allreduce_sum_f64(v, as->nfig, as->first_trainer, T, as->fwork);
    if (rc) return rc;
    for (size_t k = 0; k < F_N; k++) as->tot[k] += v[k];
    for (size_t k = F_N; k < as->nfig; k++) as->tot[k] = BP_MAX(as->tot[k], v[k]);
    memset(as->hist, 0, sizeof as->hist);
    as->age_sum = as->hits = 0, as->age_max = 0;
    as->prev_miss = c->misses, as->prev_refresh = c->refreshes, as->prev_evict = c->evictions;
    return 0;
}

static double fig_max(const double *v, int n) {
    double m = 0;
    for (int k = 0; k < n; k++) m = BP_MAX(m, v[k]);
    return m;
}

// "0:120,1:40,..,65-127:3": lookups by age, the non-empty buckets.
static void hist_format(const double *h, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < AGE_BUCKETS && len < cap; k++) {
        if (h[k] == 0) continue;
        const char *sep = len ? "," : "";
        if (k <= AGE_EXACT) len += (size_t)snprintf(buf + len, cap - len, "%s%d:%.0f", sep, k, h[k]);
        else {
            const int j = k - AGE_EXACT - 1 + 6;
            unsigned long long lo = BP_MAX(1ull << j, (unsigned long long)AGE_EXACT + 1), hi = (2ull << j) - 1;
            if (k == AGE_BUCKETS - 1) len += (size_t)snprintf(buf + len, cap - len, "%s%llu-:%.0f", sep, lo, h[k]);
            else len += (size_t)snprintf(buf + len, cap - len, "%s%llu-%llu:%.0f", sep, lo, hi, h[k]);
        }
    }
    BP_ASSERTF(len < cap, "staleness histogram longer than its buffer");
}

static void as_json(void *ctx, jsonl *j, int summary) {
    astate *as = ctx;
    const double *v = summary ? as->tot : as->win;
    double lookups = 0;
    for (int k = 0; k < AGE_BUCKETS; k++) lookups += v[k];
    jsonl_num(j, "staleness_max", fig_max(v + F_N, as->T));
    jsonl_num(j, "staleness_mean", lookups > 0 ? v[F_AGE_SUM] / lookups : 0.0);
    jsonl_num(j, "cache_misses", v[F_MISS]);
    jsonl_num(j, "cache_refreshes", v[F_REFRESH]);
    jsonl_num(j, "cache_evictions", v[F_EVICT]);
    jsonl_num(j, "cache_peak_rows", fig_max(v + F_N + as->T, as->T));
    if (!summary) return;
    char h[2048];
    hist_format(v, h, sizeof h);
    jsonl_str(j, "staleness_hist", h);
    jsonl_int(j, "staleness_bound", as->bound);
    jsonl_str(j, "cache_policy", as->cache.lfu ? "lfu" : "lru");
    jsonl_int(j, "cache_rows", (int64_t)as->cache.C);
}

static int as_finish(void *ctx, int64_t iters) {
    astate *as = ctx;
    if (as->i == 0) {
        const double *v = as->tot;
        double lookups = 0;
        for (int k = 0; k < AGE_BUCKETS; k++) lookups += v[k];
        printf("async: %s cache of %llu rows per trainer, peak %.0f; rows read up to %.0f iterations old (bound %lld), "
               "mean %.2f; %.1f%% of lookups from the cache; %.0f misses, %.0f refreshes, %.0f evictions\n",
               as->cache.lfu ? "LFU" : "LRU", (unsigned long long)as->cache.C, fig_max(v + F_N + as->T, as->T),
               fig_max(v + F_N, as->T), (long long)as->bound, lookups > 0 ? v[F_AGE_SUM] / lookups : 0.0,
               lookups > 0 ? 100.0 * v[F_HITS] / lookups : 0.0, v[F_MISS], v[F_REFRESH], v[F_EVICT]);
        fflush(stdout);
    }
    return role_srv_done(&as->srv, iters);
}

// ---------------------------------------------------------------------------------------------
// Start-up: the cache must hold every slice's distinct rows.  Trainer 0 checks every trainer's
// slices (the lowest failing rank reports, so the message names the minimum over all of them);
// the others have nothing to do.

int role_async_check(const train_setup *su, const dist_layout *l, int i) {
    if (i != 0) return 0;
    emb_layout L;
    int rc = emb_layout_init(&L, &su->lc);
    if (rc) return rc;
    const int T = l->T, F = L.F, B = su->B;
    const uint32_t cap = (uint32_t)((B + T - 1) / T * F);
    uint64_t size = 16;
    while (size < 2 * (uint64_t)cap) size *= 2;
    uint64_t *set = bp_xmalloc(size * sizeof *set);   // (size) keys of the current slice
    uint32_t *gen = bp_xcalloc(size, sizeof *gen);    // (size) the slice that put the key there
    uint32_t g = 0, most = 0;
    int64_t most_t = 0;
    int most_i = 0;
    const int64_t iters = BP_MIN(su->total_iters, (int64_t)su->per_epoch); // later epochs repeat them
    for (int64_t t = 0; t < iters; t++)
        for (int p = 0; p < T; p++) {
            const int b0 = dist_slice_begin(B, T, p), Bi = dist_slice_begin(B, T, p + 1) - b0;
            const uint32_t *ids = su->ds->sparse + role_batch_row(su, t, b0) * F;
            uint32_t u = 0;
            if (++g == 0) memset(gen, 0, size * sizeof *gen), g = 1;
            for (int e = 0; e < Bi * F; e++) {
                const uint64_t key = emb_key(&L, e % F, ids[e]);
                uint64_t h = bp_mix64(key) & (size - 1);
                while (gen[h] == g && set[h] != key) h = (h + 1) & (size - 1);
                if (gen[h] != g) gen[h] = g, set[h] = key, u++;
            }
            if (u > most) most = u, most_t = t, most_i = p;
        }
    free(set), free(gen);
    if (most > su->cache_rows)
        return bp_fail(BP_EUSAGE, "--cache-rows %llu: trainer %d's slice of batch %lld reads %u distinct rows; mode "
                       "async needs --cache-rows %u or more (the most distinct rows of any slice)",
                       (unsigned long long)su->cache_rows, most_i, (long long)most_t, most, most);
    return 0;
}

int role_async_run(const train_setup *su, const dist_layout *l, int i) {
    BP_ASSERT(l->S > 0);
    openblas_set_num_threads(su->threads);
    astate *as = bp_xcalloc(1, sizeof *as);
    int rc = as_init(as, su, l, i);
    if (!rc) {
        role_loop rl = {.mode = "async", .ctx = as, .tr = &as->tr, .st = &as->st, .S = l->S, .T = l->T, .i = i,
                        .first_trainer = as->first_trainer, .report_hits = 1, .fetch = as_fetch,
                        .sync = as_push, .erow = as->erow, .ar_work = as->ar_work, .collect = as_collect, .finish = as_finish, .window = as_window, .json = as_json};
        rc = role_loop_run(su, &rl);
    }
    as_free(as);
    free(as);
    return rc;
}
