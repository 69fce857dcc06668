// cachesim: cache policies compared on a trace (definitions in cachesim.h), and the
// `bagpipe analyze --cache` command that runs them over a dataset with sweeps, a table, JSON,
// CSV files and gnuplot charts.
#include "cachesim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "data_bin.h"
#include "jsonl.h"
#include "oracle.h"
#include "plan.h"

#define NO_RANK 0xFFFFFFFFu

struct cachesim {
    const uint32_t *ids; // (rows, F)
    uint64_t rows, K;
    uint32_t F;
    uint64_t *off;    // (F) first key of each table
    uint64_t *card;   // (F)
    uint32_t *rank;   // (K) frequency rank, 0 = hottest; NO_RANK if never used (built lazily)
    uint64_t touched; // keys used at least once (with rank)
    uint32_t *stamp;  // (K) dedupe within one trainer's slice of a batch
    uint32_t *gtag;   // (K) dedupe within a batch
    uint8_t *gusr;    // (K) first trainer using the key in the batch, | 0x80 if several
    uint8_t *holders; // (K) lru: trainers caching the key
    uint32_t seq, gseq;
    uint64_t *tkeys; // (B*F) unique keys of one slice
    uint64_t *ukeys; // (B*F) unique keys of one batch
    size_t scratch;  // capacity of tkeys/ukeys
};

const char *cachesim_policy_name(cachesim_policy pol) {
    static const char *names[CS_NPOLICY] = {"none", "static", "lru", "lookahead"};
    return pol < CS_NPOLICY ? names[pol] : "?";
}

// Per-key arrays are mapped: the kernel zero-fills pages on first touch.
static void *kalloc(uint64_t n, size_t size) { return bp_alloc_huge((size_t)(n * size)); }

int cachesim_open(cachesim **out, const uint32_t *ids, uint64_t rows, uint32_t F, const uint64_t *card) {
    *out = NULL;
    uint64_t K = 0;
    for (uint32_t f = 0; f < F; f++) K += card[f];
    if (F == 0 || K == 0) return bp_fail(BP_EINVAL, "cachesim: no tables");
    if (K >= NO_RANK) return bp_fail(BP_EINVAL, "cachesim: %llu keys, the simulator handles < 2^32", (unsigned long long)K);
    for (uint64_t r = 0; r < rows; r++)
        for (uint32_t f = 0; f < F; f++)
            if (ids[r * F + f] >= card[f])
                return bp_fail(BP_EINVAL, "cachesim: row %llu, feature %u: id %u >= table size %llu", (unsigned long long)r,
                               f, ids[r * F + f], (unsigned long long)card[f]);
    cachesim *cs = bp_xcalloc(1, sizeof *cs);
    cs->ids = ids, cs->rows = rows, cs->F = F, cs->K = K;
    cs->off = bp_xmalloc(F * sizeof *cs->off);
    cs->card = bp_xmalloc(F * sizeof *cs->card);
    uint64_t acc = 0;
    for (uint32_t f = 0; f < F; f++) cs->off[f] = acc, cs->card[f] = card[f], acc += card[f];
    cs->stamp = kalloc(K, sizeof *cs->stamp);
    cs->gtag = kalloc(K, sizeof *cs->gtag);
    cs->gusr = kalloc(K, 1);
    cs->holders = kalloc(K, 1);
    if (!cs->stamp || !cs->gtag || !cs->gusr || !cs->holders) {
        cachesim_close(cs);
        return bp_fail(BP_ENOMEM, "cachesim: cannot map per-key arrays for %llu keys", (unsigned long long)K);
    }
    *out = cs;
    return 0;
}

void cachesim_close(cachesim *cs) {
    if (!cs) return;
    uint64_t K = cs->K;
    bp_free_huge(cs->rank, K * sizeof *cs->rank);
    bp_free_huge(cs->stamp, K * sizeof *cs->stamp);
    bp_free_huge(cs->gtag, K * sizeof *cs->gtag);
    bp_free_huge(cs->gusr, K);
    bp_free_huge(cs->holders, K);
    free(cs->tkeys), free(cs->ukeys), free(cs->off), free(cs->card);
    free(cs);
}

// ---------------------------------------------------------------------------------------------
// Batches and slices

static void scratch_reserve(cachesim *cs, size_t n) {
    if (n <= cs->scratch) return;
    cs->tkeys = bp_xrealloc(cs->tkeys, n * sizeof *cs->tkeys);
    cs->ukeys = bp_xrealloc(cs->ukeys, n * sizeof *cs->ukeys);
    cs->scratch = n;
}

// Unique keys of samples [lo, hi) of the batch starting at row r0, in first-appearance order,
// into cs->tkeys.
static uint32_t slice_unique(cachesim *cs, uint64_t r0, uint32_t lo, uint32_t hi) {
    if (++cs->seq == 0) {
        memset(cs->stamp, 0, cs->K * sizeof *cs->stamp);
        cs->seq = 1;
    }
    uint32_t n = 0, F = cs->F;
    for (uint32_t s = lo; s < hi; s++) {
        const uint32_t *row = cs->ids + (r0 + s) * F;
        for (uint32_t f = 0; f < F; f++) {
            uint64_t k = cs->off[f] + row[f];
            if (cs->stamp[k] != cs->seq) cs->stamp[k] = cs->seq, cs->tkeys[n++] = k;
        }
    }
    return n;
}

static void batch_begin(cachesim *cs) {
    if (++cs->gseq == 0) {
        memset(cs->gtag, 0, cs->K * sizeof *cs->gtag);
        cs->gseq = 1;
    }
}

// Records that trainer i uses k in the current batch; returns the batch's unique count.
static inline void batch_mark(cachesim *cs, uint64_t k, uint32_t i, uint32_t *nu) {
    if (cs->gtag[k] != cs->gseq) {
        cs->gtag[k] = cs->gseq, cs->gusr[k] = (uint8_t)i, cs->ukeys[(*nu)++] = k;
    } else if ((cs->gusr[k] & 0x7F) != i) {
        cs->gusr[k] |= 0x80;
    }
}

// ---------------------------------------------------------------------------------------------
// Frequency profile (static): rank keys by (count desc, key asc).

typedef struct {
    uint32_t count;
    uint32_t key;
} kc;

static int kc_cmp(const void *a, const void *b) {
    const kc *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int build_rank(cachesim *cs) {
    if (cs->rank) return 0;
    cs->rank = kalloc(cs->K, sizeof *cs->rank);
    if (!cs->rank) return bp_fail(BP_ENOMEM, "cachesim: cannot map the frequency profile");
    uint32_t *cnt = cs->rank; // counts first, ranks after
    for (uint64_t r = 0; r < cs->rows; r++)
        for (uint32_t f = 0; f < cs->F; f++) {
            uint64_t k = cs->off[f] + cs->ids[r * cs->F + f];
            if (cnt[k] < NO_RANK - 1) cnt[k]++;
        }
    uint64_t n = 0;
    for (uint64_t k = 0; k < cs->K; k++) n += cnt[k] > 0;
    kc *v = bp_xmalloc((n ? n : 1) * sizeof *v);
    n = 0;
    for (uint64_t k = 0; k < cs->K; k++)
        if (cnt[k]) v[n++] = (kc){cnt[k], (uint32_t)k};
    qsort(v, n, sizeof *v, kc_cmp);
    for (uint64_t k = 0; k < cs->K; k++) cnt[k] = NO_RANK;
    for (uint64_t i = 0; i < n; i++) cs->rank[v[i].key] = (uint32_t)i;
    cs->touched = n;
    free(v);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// LRU cache of one trainer: nodes in a doubly linked recency list, found through an
// open-addressing table of node indices (linear probing, backward-shift deletion).

typedef struct {
    uint64_t C, n;
    uint64_t *nkey;        // (C)
    uint32_t *prev, *next; // (C) recency list, head = most recent
    uint32_t head, tail;
    uint32_t *h; // (hmask+1) node + 1, 0 = empty
    uint64_t hmask;
} lru;

#define LNIL 0xFFFFFFFFu

static int lru_init(lru *L, uint64_t C) {
    memset(L, 0, sizeof *L);
    if (C >= LNIL) return bp_fail(BP_EINVAL, "cachesim: lru capacity %llu too large", (unsigned long long)C);
    uint64_t hc = 16;
    while (hc < 2 * C) hc *= 2;
    L->C = C, L->hmask = hc - 1, L->head = L->tail = LNIL;
    L->nkey = kalloc(C, sizeof *L->nkey);
    L->prev = kalloc(C, sizeof *L->prev);
    L->next = kalloc(C, sizeof *L->next);
    L->h = kalloc(hc, sizeof *L->h);
    if (!L->nkey || !L->prev || !L->next || !L->h) return bp_fail(BP_ENOMEM, "cachesim: cannot map an lru of %llu rows", (unsigned long long)C);
    return 0;
}

static void lru_free(lru *L) {
    bp_free_huge(L->nkey, L->C * sizeof *L->nkey);
    bp_free_huge(L->prev, L->C * sizeof *L->prev);
    bp_free_huge(L->next, L->C * sizeof *L->next);
    bp_free_huge(L->h, (L->hmask + 1) * sizeof *L->h);
}

// Table position holding key, or of the empty slot where it would go.
static uint64_t lru_pos(const lru *L, uint64_t key) {
    uint64_t i = bp_mix64(key) & L->hmask;
    while (L->h[i] && L->nkey[L->h[i] - 1] != key) i = (i + 1) & L->hmask;
    return i;
}

static void lru_unlink(lru *L, uint32_t x) {
    if (L->prev[x] != LNIL) L->next[L->prev[x]] = L->next[x];
    else L->head = L->next[x];
    if (L->next[x] != LNIL) L->prev[L->next[x]] = L->prev[x];
    else L->tail = L->prev[x];
}

static void lru_push_front(lru *L, uint32_t x) {
    L->prev[x] = LNIL, L->next[x] = L->head;
    if (L->head != LNIL) L->prev[L->head] = x;
    L->head = x;
    if (L->tail == LNIL) L->tail = x;
}

static void lru_hdel(lru *L, uint64_t i) {
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & L->hmask;
        if (!L->h[j]) break;
        uint64_t home = bp_mix64(L->nkey[L->h[j] - 1]) & L->hmask;
        // Move h[j] back to the hole at i unless its home lies cyclically in (i, j].
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) L->h[i] = L->h[j], i = j;
    }
    L->h[i] = 0;
}

static int lru_has(const lru *L, uint64_t key) { return L->h[lru_pos(L, key)] != 0; }

// Looks key up; on a miss inserts it, evicting the least recent row into *evicted (returns 2),
// else returns 1 for a miss without eviction, 0 for a hit.
static int lru_access(lru *L, uint64_t key, uint64_t *evicted) {
    uint64_t i = lru_pos(L, key);
    if (L->h[i]) {
        uint32_t x = L->h[i] - 1;
        if (L->head != x) lru_unlink(L, x), lru_push_front(L, x);
        return 0;
    }
    int ret = 1;
    uint32_t x;
    if (L->n < L->C) {
        x = (uint32_t)L->n++;
    } else {
        x = L->tail;
        *evicted = L->nkey[x];
        lru_unlink(L, x);
        lru_hdel(L, lru_pos(L, *evicted));
        i = lru_pos(L, key); // the deletion may have moved entries
        ret = 2;
    }
    L->nkey[x] = key;
    L->h[i] = x + 1;
    lru_push_front(L, x);
    return ret;
}

// ---------------------------------------------------------------------------------------------
// Policies

// The batches of a run over `rows` rows in batches of B: iters of them in train's order, or one
// pass, its last batch possibly short.
static uint64_t trace_batches(uint64_t rows, uint32_t B, uint64_t iters) {
    return iters ? iters : (rows + B - 1) / B;
}

// Those of a simulation, and batch t's first row and size; cachesim_run has checked that an iters
// run has a whole batch.
static uint64_t sim_batches(const cachesim *cs, const cachesim_config *c) {
    return trace_batches(cs->rows, c->B, c->iters) - (c->iters ? c->start : 0);
}

static uint64_t sim_batch(const cachesim *cs, const cachesim_config *c, uint64_t t, uint32_t *n) {
    if (c->iters) return *n = c->B, ((c->start + t) % (cs->rows / c->B)) * c->B;
    const uint64_t r0 = t * c->B;
    *n = (uint32_t)BP_MIN((uint64_t)c->B, cs->rows - r0);
    return r0;
}

static int run_none_static(cachesim *cs, int is_static, const cachesim_config *c, cachesim_result *r) {
    if (is_static) {
        int rc = build_rank(cs);
        if (rc) return rc;
    }
    uint64_t C = is_static ? c->C : 0, max_transient = 0;
    for (uint64_t t = 0, nb = sim_batches(cs, c); t < nb; t++) {
        uint32_t n, nu = 0;
        const uint64_t r0 = sim_batch(cs, c, t, &n);
        batch_begin(cs);
        for (uint32_t i = 0; i < c->T; i++) {
            uint32_t m = slice_unique(cs, r0, (uint32_t)((uint64_t)i * n / c->T), (uint32_t)((uint64_t)(i + 1) * n / c->T));
            uint64_t miss = 0;
            for (uint32_t j = 0; j < m; j++) {
                uint64_t k = cs->tkeys[j];
                batch_mark(cs, k, i, &nu);
                if (is_static && cs->rank[k] < C) r->hits++;
                else miss++;
            }
            r->accesses += m, r->fetched_rows += miss, r->written_rows += miss;
            max_transient = BP_MAX(max_transient, miss);
        }
        if (is_static && c->T > 1) // one trainer has nobody to reduce with
            for (uint32_t j = 0; j < nu; j++) r->synced_rows += cs->rank[cs->ukeys[j]] < C;
        r->batches++;
    }
    uint64_t pinned = is_static ? BP_MIN(C, cs->touched) : 0;
    r->written_rows += pinned; // the pinned rows go back at the end
    r->peak_rows = pinned + max_transient;
    return 0;
}

static int run_lru(cachesim *cs, const cachesim_config *c, cachesim_result *r) {
    lru *L = bp_xcalloc(c->T, sizeof *L);
    int rc = 0;
    // A trainer never holds more rows than there are keys, or lookups in the rows simulated: a
    // larger cache behaves as one of that size, whose tables are sized by it (sized by C, a cache
    // far above the dataset's rows took minutes and gigabytes, or failed, for the same result).
    const uint64_t cap = BP_MAX(1, BP_MIN(c->C, BP_MIN(cs->K, cs->rows * cs->F)));
    for (uint32_t i = 0; i < c->T && !rc; i++) rc = lru_init(&L[i], cap);
    for (uint64_t t = 0, nb = sim_batches(cs, c); t < nb && !rc; t++) {
        uint32_t n, nu = 0;
        const uint64_t r0 = sim_batch(cs, c, t, &n);
        batch_begin(cs);
        for (uint32_t i = 0; i < c->T; i++) {
            uint32_t m = slice_unique(cs, r0, (uint32_t)((uint64_t)i * n / c->T), (uint32_t)((uint64_t)(i + 1) * n / c->T));
            r->accesses += m;
            for (uint32_t j = 0; j < m; j++) {
                uint64_t k = cs->tkeys[j], ev = 0;
                batch_mark(cs, k, i, &nu);
                int x = lru_access(&L[i], k, &ev);
                if (x == 0) {
                    r->hits++;
                    continue;
                }
                r->fetched_rows++;
                cs->holders[k]++;
                if (x == 2 && --cs->holders[ev] == 0) r->written_rows++;
            }
            // A trainer holds its slice's m rows while it computes, in the cache or beside it
            // when the cache is smaller (as the static policy's misses): peak rows count them.
            r->peak_rows = BP_MAX(r->peak_rows, BP_MAX(L[i].n, m));
        }
        // Replicas stay coherent: a row used in the batch is reduced among trainers when more
        // than one trainer uses or holds it, or when its one user no longer holds it.
        for (uint32_t j = 0; j < nu; j++) {
            uint64_t k = cs->ukeys[j];
            uint8_t u = cs->gusr[k];
            if ((u & 0x80) || cs->holders[k] >= 2 || (cs->holders[k] == 1 && !lru_has(&L[u], k))) r->synced_rows++;
        }
        r->batches++;
    }
    for (uint32_t i = 0; i < c->T; i++) {
        for (uint64_t x = 0; !rc && x < L[i].n; x++) {
            uint64_t k = L[i].nkey[x];
            if (cs->holders[k]) r->written_rows++, cs->holders[k] = 0; // flushed once at the end
        }
        lru_free(&L[i]);
    }
    free(L);
    return rc;
}

// The batch size the oracle is given: a trace shorter than B is one batch of its rows, planned
// the same (slices are cut from the samples a batch has), and the oracle's limit on B x F for a
// window applies to the batches there are.
static uint32_t lookahead_batch(uint64_t rows, uint32_t B, uint64_t iters) {
    return iters ? B : (uint32_t)BP_MIN((uint64_t)B, rows);
}

// The window the oracle is given: one beyond the trace's N batches sees nothing more (every step's
// horizon is the last batch either way, so the plan is the same), and the oracle keeps a slot per
// batch of its window (W = 65536 on a 40-batch trace took 30 s of page mapping for W = 40's plan).
static uint32_t lookahead_window(uint64_t rows, uint32_t B, uint32_t W, uint64_t iters) {
    return (uint32_t)BP_MIN((uint64_t)W, trace_batches(rows, B, iters));
}

int cachesim_lookahead_fits(uint64_t rows, uint32_t B, uint32_t F, uint32_t W, uint32_t P, int threads, uint64_t iters,
                            const char *flag) {
    const uint64_t n = lookahead_batch(rows, B, iters), ids = n * F;
    const uint64_t most = oracle_max_batch_ids(lookahead_window(rows, B, W, iters), P, threads);
    if (ids <= most) return 0;
    return bp_fail(BP_EUSAGE, "--%s %u: a window this long takes batches of at most %llu ids (samples x tables), and "
                   "batches of %llu samples x %u tables have %llu; use a shorter window or a smaller --batch-size",
                   flag, W, (unsigned long long)most, (unsigned long long)n, F, (unsigned long long)ids);
}

static int run_lookahead(cachesim *cs, const cachesim_config *c, cachesim_result *r) {
    oracle_config oc = {.T = c->T, .B = lookahead_batch(cs->rows, c->B, c->iters), .F = cs->F, .card = cs->card,
                        .W = lookahead_window(cs->rows, c->B, c->W, c->iters), .P = c->P, .C = c->C,
                        .threads = c->threads ? c->threads : 1, .borrow_input = 1, .groups = c->parts == 2 ? 2 : 1,
                        .iter_base = c->iters ? c->start : 0};
    oracle o;
    int rc = oracle_init(&o, &oc);
    if (rc) return rc;
    plan p;
    plan_init(&p);
    for (uint64_t t = 0, nb = sim_batches(cs, c); t < nb && !rc; t++) {
        uint32_t n;
        const uint64_t r0 = sim_batch(cs, c, t, &n);
        rc = oracle_push_samples(&o, cs->ids + r0 * cs->F, n);
        while (!rc && (rc = oracle_next_plan(&o, &p)) == 1) rc = 0;
    }
    if (!rc) rc = oracle_finish(&o);
    while (!rc && (rc = oracle_next_plan(&o, &p)) == 1) rc = 0;
    if (!rc) {
        oracle_stats st;
        oracle_get_stats(&o, &st);
        r->batches = st.batches, r->accesses = st.accesses, r->hits = st.hits;
        r->fetched_rows = st.fetches, r->written_rows = st.evictions;
        // The plan lists syncs for T = 1 too, but a lone trainer applies them without an exchange.
        r->synced_rows = c->T > 1 ? st.sync_now + st.sync_later : 0, r->peak_rows = st.peak_resident;
    }
    plan_free(&p);
    oracle_free(&o);
    return rc;
}

int cachesim_run(cachesim *cs, cachesim_policy pol, const cachesim_config *c, cachesim_result *r) {
    memset(r, 0, sizeof *r);
    if (c->T < 1 || c->T > ORACLE_MAX_TRAINERS || c->B < 1)
        return bp_fail(BP_EINVAL, "cachesim: %u trainers, batch %u", c->T, c->B);
    if (pol != CS_NONE && c->C < 1) return bp_fail(BP_EINVAL, "cachesim: cache of 0 rows");
    if (c->iters && cs->rows < c->B)
        return bp_fail(BP_EINVAL, "cachesim: %llu iterations of %u samples, from %llu rows: not one whole batch",
                       (unsigned long long)c->iters, c->B, (unsigned long long)cs->rows);
    if (c->start && c->start >= c->iters)
        return bp_fail(BP_EINVAL, "cachesim: start at iteration %llu of %llu", (unsigned long long)c->start,
                       (unsigned long long)c->iters);
    scratch_reserve(cs, (size_t)c->B * cs->F);
    switch (pol) {
    case CS_NONE: return run_none_static(cs, 0, c, r);
    case CS_STATIC: return run_none_static(cs, 1, c, r);
    case CS_LRU: return run_lru(cs, c, r);
    case CS_LOOKAHEAD: return run_lookahead(cs, c, r);
    default: return bp_fail(BP_EINVAL, "cachesim: unknown policy %d", (int)pol);
    }
}

// What the batch of the last BP_ECAPACITY needs, from the oracle's message (0 if it names none).
static uint64_t capacity_need(int rc) {
    static const char key[] = "minimum cache size for this batch is ";
    const char *m = strstr(bp_errmsg(rc), key);
    return m ? strtoull(m + sizeof key - 1, NULL, 10) : 0;
}

int cachesim_lookahead_min_cache(cachesim *cs, const cachesim_config *cfg, uint64_t *min) {
    cachesim_config c = *cfg;
    cachesim_result r;
    uint64_t bad = 0; // the largest size known to fail (0: none tried)
    for (c.C = 1;;) {
        int rc = cachesim_run(cs, CS_LOOKAHEAD, &c, &r);
        if (rc == 0) break;
        if (rc != BP_ECAPACITY) return rc;
        const uint64_t need = capacity_need(rc);
        bad = c.C;
        c.C = need > c.C ? need : c.C + 1;
        if (c.C > CACHESIM_MAX_CACHE)
            return bp_fail(BP_EINVAL, "cachesim: the lookahead policy needs more than %llu rows per trainer",
                           (unsigned long long)CACHESIM_MAX_CACHE);
    }
    uint64_t good = c.C;
    if (c.T == 1) bad = good - 1; // the batch that needed `good` rows needs them at any size
    while (good - bad > 1) {
        c.C = bad + (good - bad) / 2;
        int rc = cachesim_run(cs, CS_LOOKAHEAD, &c, &r);
        if (rc && rc != BP_ECAPACITY) return rc;
        if (rc) bad = c.C;
        else good = c.C;
    }
    *min = good;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The command

typedef struct {
    cachesim_policy pol;
    uint64_t C;
    uint32_t W; // lookahead only
    int rc;
    char err[256];
    uint64_t min_cache; // lookahead, rc BP_ECAPACITY: the smallest cache that works for W
    cachesim_result r;
} sim_run;

static double hit_rate(const cachesim_result *r) { return r->accesses ? (double)r->hits / (double)r->accesses : 0.0; }

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Sorted distinct values of list (parsed from s) plus extra.
static int value_list(const char *flag, const char *s, uint64_t extra, uint64_t *vals, int cap) {
    int n = 0;
    if (s) {
        n = cli_parse_u64_list(flag, s, vals, cap - 1);
        if (n < 0) return n;
    }
    vals[n++] = extra;
    qsort(vals, (size_t)n, sizeof *vals, u64_cmp);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || vals[i] != vals[m - 1]) vals[m++] = vals[i];
    return m;
}

static void json_run(FILE *f, const sim_run *s, uint32_t D, int last) {
    fprintf(f, "    {\"policy\": \"%s\", \"cache\": ", cachesim_policy_name(s->pol));
    if (s->pol == CS_NONE) fprintf(f, "null");
    else fprintf(f, "%llu", (unsigned long long)s->C);
    fprintf(f, ", \"lookahead\": ");
    if (s->pol == CS_LOOKAHEAD) fprintf(f, "%u", s->W);
    else fprintf(f, "null");
    if (s->rc) {
        fprintf(f, ", \"error\": ");
        jsonl_fput_string(f, s->err);
        if (s->min_cache) fprintf(f, ", \"min_cache\": %llu", (unsigned long long)s->min_cache);
        fprintf(f, "}%s\n", last ? "" : ",");
        return;
    }
    const cachesim_result *r = &s->r;
    fprintf(f,
            ", \"hit_rate\": %.6f, \"accesses\": %llu, \"hits\": %llu, \"fetched_rows\": %llu, \"fetched_bytes\": %llu, "
            "\"written_rows\": %llu, \"written_bytes\": %llu, \"synced_rows\": %llu, \"synced_bytes\": %llu, "
            "\"peak_rows\": %llu}%s\n",
            hit_rate(r), (unsigned long long)r->accesses, (unsigned long long)r->hits, (unsigned long long)r->fetched_rows,
            (unsigned long long)(r->fetched_rows * D * 4), (unsigned long long)r->written_rows,
            (unsigned long long)(r->written_rows * D * 4), (unsigned long long)r->synced_rows,
            (unsigned long long)(r->synced_rows * D * 4), (unsigned long long)r->peak_rows, last ? "" : ",");
}

typedef struct {
    const char *data;
    const char *split;
    uint64_t rows, batches;
    uint32_t B, T, P, D, W;
    uint64_t C;
    uint64_t start; // the first iteration simulated (--start-iter)
    uint32_t parts; // the lookahead planner's (--oracle-parts)
} sim_meta;

static void json_write(FILE *f, const sim_meta *m, const sim_run *runs, int n) {
    fprintf(f, "{\n  \"dataset\": ");
    jsonl_fput_string(f, m->data);
    fprintf(f,
            ",\n  \"split\": \"%s\", \"rows\": %llu, \"batches\": %llu, \"batch_size\": %u, \"trainers\": %u, "
            "\"prefetch\": %u, \"dim\": %u, \"row_bytes\": %u, \"cache\": %llu, \"lookahead\": %u, "
            "\"start_iter\": %llu, \"oracle_parts\": %u,\n  \"hit_definition\": "
            "\"(trainer, key, batch) accesses served from the trainer's cache without a fetch for that batch\",\n"
            "  \"runs\": [\n",
            m->split, (unsigned long long)m->rows, (unsigned long long)m->batches, m->B, m->T, m->P, m->D, m->D * 4,
            (unsigned long long)m->C, m->W, (unsigned long long)m->start, m->parts);
    for (int i = 0; i < n; i++) json_run(f, &runs[i], m->D, i == n - 1);
    fprintf(f, "  ]\n}\n");
}

static const sim_run *find_run(const sim_run *runs, int n, cachesim_policy pol, uint64_t C, uint32_t W) {
    for (int i = 0; i < n; i++)
        if (runs[i].pol == pol && (pol == CS_NONE || runs[i].C == C) && (pol != CS_LOOKAHEAD || runs[i].W == W))
            return &runs[i];
    return NULL;
}

static void csv_hit(FILE *f, const sim_run *s) {
    if (!s || s->rc) fprintf(f, ",NaN");
    else fprintf(f, ",%.4f", 100.0 * hit_rate(&s->r));
}

// A file of the --plot-dir and the function that writes its text.
typedef struct {
    const char *name;
    void (*fn)(FILE *, const void *);
} out_file;

// Writes dir/name for each file, every one or none: each is made whole in its temporary file
// first; then each file it replaces is kept under a second name (a hard link, or where the file
// system has none the file itself, renamed) until all are renamed into place, so that a rename or
// fsync failing partway puts the earlier ones back (a full disk or a bad name leaves the directory
// as it was, not this run's JSON beside an earlier run's CSV).  SIGINT, SIGTERM and SIGHUP wait
// for the end of that step (a few renames and fsyncs of small files), which they would cut in two.
static int write_files(const char *dir, const out_file *files, int n, const void *arg) {
    enum { MAX_FILES = 4 };
    bp_afile af[MAX_FILES];
    char target[MAX_FILES][4200], kept[MAX_FILES][4300];
    int had[MAX_FILES] = {0}, rc = 0, opened = 0, done = 0;
    BP_ASSERT(n <= MAX_FILES);
    for (; opened < n && !rc; opened++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[opened].name);
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        if (!mem) {
            rc = bp_fail(BP_ENOMEM, "analyze: cannot buffer %s", path);
            break;
        }
        files[opened].fn(mem, arg);
        fclose(mem);
        if (!(rc = bp_afile_open(&af[opened], path))) {
            snprintf(target[opened], sizeof target[opened], "%s", af[opened].target);
            rc = bp_afile_write(&af[opened], buf, len);
        }
        free(buf);
    }
    sigset_t stop, before;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT), sigaddset(&stop, SIGTERM), sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, &before);
    for (int i = 0; i < opened && !rc; i++) { // the files replaced, kept until every commit is done
        struct stat st;
        snprintf(kept[i], sizeof kept[i], "%.4199s.prev-%ld", target[i], (long)getpid());
        unlink(kept[i]);
        if (lstat(target[i], &st) != 0) continue; // none to keep
        had[i] = link(target[i], kept[i]) == 0 ? 1 : rename(target[i], kept[i]) == 0 ? 2 : 0; // 2: moved
        if (!had[i])
            rc = bp_fail(BP_EIO, "%s: cannot keep the file it replaces until the others are written: %s", target[i],
                         strerror(errno));
    }
    for (; done < opened && !rc; done++)
        if ((rc = bp_afile_commit(&af[done]))) break;
    for (int i = done; i < opened; i++) bp_afile_abort(&af[i]); // the failed one (freed already) and the rest
    for (int i = 0; i < opened; i++) {
        const int replaced = i < done; // its new file is in place
        if (rc && had[i] && (replaced || had[i] == 2)) { // back to what was there
            if (rename(kept[i], target[i]) != 0)
                bp_log(BP_LOG_WARN, "analyze: %s: cannot put back the file it replaced (%s)", target[i], kept[i]);
        } else if (rc && replaced && !had[i]) { // committed where there was none
            unlink(target[i]);
        } else if (had[i] == 1 || (had[i] == 2 && !rc)) { // the second name of a file kept, or the old one moved
            unlink(kept[i]);
        }
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    return rc;
}

typedef struct {
    const sim_meta *m;
    const sim_run *runs;
    int n;
    const uint64_t *caches;
    int nc;
    const uint64_t *windows;
    int nw;
} plot_data;

static void emit_json(FILE *f, const void *arg) {
    const plot_data *d = arg;
    json_write(f, d->m, d->runs, d->n);
}

static void emit_capacity_csv(FILE *f, const void *arg) {
    const plot_data *d = arg;
    fprintf(f, "# hit rate (%%) by cache rows per trainer; lookahead at W=%u\ncache,none,static,lru,lookahead\n", d->m->W);
    for (int i = 0; i < d->nc; i++) {
        fprintf(f, "%llu", (unsigned long long)d->caches[i]);
        csv_hit(f, find_run(d->runs, d->n, CS_NONE, 0, 0));
        csv_hit(f, find_run(d->runs, d->n, CS_STATIC, d->caches[i], 0));
        csv_hit(f, find_run(d->runs, d->n, CS_LRU, d->caches[i], 0));
        csv_hit(f, find_run(d->runs, d->n, CS_LOOKAHEAD, d->caches[i], d->m->W));
        fprintf(f, "\n");
    }
}

static void emit_lookahead_csv(FILE *f, const void *arg) {
    const plot_data *d = arg;
    fprintf(f, "# hit rate (%%) by lookahead window at %llu rows per trainer\nlookahead,lookahead_hit,lru,static,none\n",
            (unsigned long long)d->m->C);
    for (int i = 0; i < d->nw; i++) {
        fprintf(f, "%llu", (unsigned long long)d->windows[i]);
        csv_hit(f, find_run(d->runs, d->n, CS_LOOKAHEAD, d->m->C, (uint32_t)d->windows[i]));
        csv_hit(f, find_run(d->runs, d->n, CS_LRU, d->m->C, 0));
        csv_hit(f, find_run(d->runs, d->n, CS_STATIC, d->m->C, 0));
        csv_hit(f, find_run(d->runs, d->n, CS_NONE, 0, 0));
        fprintf(f, "\n");
    }
}

// tools/plot_cachesim.gp: $BAGPIPE_TOOLS, next to the binary (../tools, ../../tools), or ./tools.
static int find_plot_script(char *out, size_t cap) {
    const char *env = getenv("BAGPIPE_TOOLS");
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"/../tools/plot_cachesim.gp", "/../../tools/plot_cachesim.gp"};
    if (env && *env) {
        snprintf(out, cap, "%s/plot_cachesim.gp", env);
        if (access(out, R_OK) == 0) return 1;
    }
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        for (size_t i = 0; i < BP_ARRAY_LEN(rel); i++) {
            snprintf(out, cap, "%s%s", exe, rel[i]);
            if (access(out, R_OK) == 0) return 1;
        }
    }
    snprintf(out, cap, "tools/plot_cachesim.gp");
    return access(out, R_OK) == 0;
}

static const char *const chart_names[] = {"hit_vs_capacity.png", "hit_vs_capacity.svg", "hit_vs_lookahead.png",
                                           "hit_vs_lookahead.svg"};

// Removes the charts in dir: an earlier run's would otherwise stand beside this run's data when
// gnuplot is missing or fails, and a chart gnuplot could not finish is no chart.
static void remove_charts(const char *dir) {
    char path[4200];
    for (size_t i = 0; i < BP_ARRAY_LEN(chart_names); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, chart_names[i]);
        struct stat cs;
        if (lstat(path, &cs) == 0 && S_ISREG(cs.st_mode)) unlink(path);
    }
}

// 1 when the chart at path is whole: a PNG that ends in its IEND chunk, an SVG that ends in
// </svg>.  gnuplot exits 0 when it could not write its output (a full disk), leaving a PNG cut
// short or empty.
static int chart_complete(const char *path, int png) {
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    unsigned char tail[64];
    int fd = open(path, O_RDONLY | O_CLOEXEC), ok = 0;
    struct stat st;
    if (fd < 0) return 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof tail &&
        pread(fd, tail, sizeof tail, st.st_size - (off_t)sizeof tail) == (ssize_t)sizeof tail) {
        if (png) ok = memcmp(tail + sizeof tail - sizeof iend, iend, sizeof iend) == 0;
        else ok = memmem(tail, sizeof tail, "</svg>", 6) != NULL;
    }
    close(fd);
    return ok;
}

// Runs gnuplot on the CSV files in dir (the window chart's cache size C named in its title).
// Returns 1 if the charts were made, 0 if gnuplot is missing or failed (a warning; the data files
// are the result), and sets *rc when gnuplot ran but its charts are not whole: they are removed.
static int run_gnuplot(const char *dir, uint64_t C, int *rc) {
    char script[4096], arg[4200];
    if (!find_plot_script(script, sizeof script)) {
        bp_log(BP_LOG_WARN, "analyze: tools/plot_cachesim.gp not found (set BAGPIPE_TOOLS); the CSV files are in %s", dir);
        return 0;
    }
    if (strchr(dir, '\'')) {
        bp_log(BP_LOG_WARN, "analyze: --plot-dir contains a quote; skipping gnuplot");
        return 0;
    }
    snprintf(arg, sizeof arg, "dir='%s'; cache=%llu", dir, (unsigned long long)C);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        execlp("gnuplot", "gnuplot", "-e", arg, script, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        bp_log(BP_LOG_WARN, "analyze: gnuplot %s (try: gnuplot -e \"%s\" %s)",
               WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "is not installed" : "failed", arg, script);
        remove_charts(dir);
        return 0;
    }
    // Both charts, in the one format the script chose, each whole.
    char path[4200];
    for (int png = 1; png >= 0; png--) {
        int whole = 0, found = 0;
        for (size_t i = png ? 0 : 1; i < BP_ARRAY_LEN(chart_names); i += 2) {
            snprintf(path, sizeof path, "%s/%s", dir, chart_names[i]);
            if (access(path, F_OK) != 0) continue;
            found++;
            if (chart_complete(path, png)) whole++;
            else break;
        }
        if (found == 0) continue;
        if (whole == 2) return 1;
        break;
    }
    *rc = bp_fail(BP_EIO, "--plot-dir %s: gnuplot did not finish %s (is the disk full?); the charts are removed, "
                  "the JSON and CSV files are whole", dir, path);
    remove_charts(dir);
    return 0;
}

int cachesim_cmd(const cachesim_cmd_opts *o) {
    const uint64_t cache = o->cache, max_rows = o->rows;
    const int window = o->window, trainers = o->trainers, batch = o->batch, prefetch = o->prefetch, dim = o->dim;
    const uint64_t iters = o->iters, start = o->start;
    const int threads = BP_MIN(o->threads, 2), split = (int)o->split, json = o->json, parts = o->parts == 2 ? 2 : 1;
    const char *sweep_c = o->sweep_cache, *sweep_w = o->sweep_lookahead, *plot_dir = o->plot_dir, *path = o->path;
    int rc = 0;
    bp_dataset ds = {0};
    cachesim *cs = NULL;
    sim_run *runs = NULL;
    uint64_t caches[65], windows[65];
    int nc = 0, nw = 0, n = 0;
    BP_ASSERT(cache >= 1 && threads >= 1);
    if ((nc = value_list("sweep-cache", sweep_c, (uint64_t)cache, caches, 65)) < 0 ||
        (nw = value_list("sweep-lookahead", sweep_w, (uint64_t)window, windows, 65)) < 0) {
        rc = nc < 0 ? nc : nw;
        goto out;
    }
    for (int i = 0; i < nc; i++)
        if (caches[i] == 0 || caches[i] > CACHESIM_MAX_CACHE) {
            rc = bp_fail(BP_EUSAGE, "--sweep-cache: %llu is out of range [1, %llu] (as --cache)",
                         (unsigned long long)caches[i], (unsigned long long)CACHESIM_MAX_CACHE);
            goto out;
        }
    for (int i = 0; i < nw; i++)
        if (windows[i] > ORACLE_MAX_WINDOW) {
            rc = bp_fail(BP_EUSAGE, "--sweep-lookahead: %llu is above %d", (unsigned long long)windows[i], ORACLE_MAX_WINDOW);
            goto out;
        }
    if ((rc = cmd_open_dataset(&ds, path))) goto out;
    uint64_t b, e;
    bp_ds_split_range(&ds, (bp_split)split, &b, &e);
    if (max_rows && e - b > (uint64_t)max_rows) e = b + (uint64_t)max_rows;
    if (e == b) {
        rc = bp_fail(BP_EINVAL, "analyze: %s has no rows in the %s split", path, bp_split_name((bp_split)split));
        goto out;
    }
    if (start && start >= iters) {
        rc = bp_fail(BP_EUSAGE, "--start-iter %llu: %s", (unsigned long long)start,
                     iters ? "at or past the run's end (--iters)" : "needs --iters N, the run's iterations");
        goto out;
    }
    if (iters && e - b < (uint64_t)batch) { // train refuses it too: no whole batch to take
        rc = bp_fail(BP_EUSAGE, "--iters %llu: the %llu rows simulated hold no whole batch of %d (--batch-size)",
                     (unsigned long long)iters, (unsigned long long)(e - b), batch);
        goto out;
    }
    if ((uint64_t)trainers > e - b) { // a split smaller than the batch is one batch of its rows
        rc = bp_fail(BP_EUSAGE, "--trainers %d: more trainers than samples in a batch (the %llu rows simulated are "
                     "one batch)", trainers, (unsigned long long)(e - b));
        goto out;
    }
    if ((rc = cachesim_open(&cs, ds.sparse + b * ds.info.n_sparse, e - b, ds.info.n_sparse, ds.info.card))) goto out;
    // The oracle takes batches of fewer ids the longer its window: refused now, naming the flags,
    // rather than after the other policies have run.
    for (int i = 0; i < nw; i++)
        if ((rc = cachesim_lookahead_fits(e - b, (uint32_t)batch, ds.info.n_sparse, (uint32_t)windows[i],
                                          (uint32_t)prefetch, threads, iters,
                                          windows[i] == (uint64_t)window ? "lookahead" : "sweep-lookahead")))
            goto out;

    runs = bp_xcalloc((size_t)(1 + 3 * nc + nw), sizeof *runs);
    runs[n++] = (sim_run){.pol = CS_NONE};
    for (int i = 0; i < nc; i++) {
        runs[n++] = (sim_run){.pol = CS_STATIC, .C = caches[i]};
        runs[n++] = (sim_run){.pol = CS_LRU, .C = caches[i]};
        runs[n++] = (sim_run){.pol = CS_LOOKAHEAD, .C = caches[i], .W = (uint32_t)window};
    }
    for (int i = 0; i < nw; i++)
        if (windows[i] != (uint64_t)window) runs[n++] = (sim_run){.pol = CS_LOOKAHEAD, .C = (uint64_t)cache, .W = (uint32_t)windows[i]};
    for (int i = 0; i < n; i++) {
        cachesim_config c = {(uint32_t)trainers, (uint32_t)batch, runs[i].C, runs[i].W, (uint32_t)prefetch, threads,
                             parts, iters, start};
        runs[i].rc = cachesim_run(cs, runs[i].pol, &c, &runs[i].r);
        if (runs[i].rc == BP_ECAPACITY) {
            // The smallest size that works for this window, found once per window (a sweep's
            // sizes below it share it), instead of a batch's need that a rerun may exceed.
            for (int k = 0; k < i && !runs[i].min_cache; k++)
                if (runs[k].rc == BP_ECAPACITY && runs[k].W == runs[i].W) runs[i].min_cache = runs[k].min_cache;
            if (!runs[i].min_cache && (rc = cachesim_lookahead_min_cache(cs, &c, &runs[i].min_cache))) goto out;
            snprintf(runs[i].err, sizeof runs[i].err, "cache too small: the smallest that works is %llu rows",
                     (unsigned long long)runs[i].min_cache);
        } else if (runs[i].rc) {
            rc = runs[i].rc; // anything else is a real failure
            goto out;
        }
    }

    sim_meta meta = {path, bp_split_name((bp_split)split), e - b, runs[0].r.batches, (uint32_t)batch, (uint32_t)trainers,
                     (uint32_t)prefetch, (uint32_t)dim, (uint32_t)window, (uint64_t)cache, start, (uint32_t)parts};
    if (json) {
        json_write(stdout, &meta, runs, n);
    } else {
        char b1[32], b2[32];
        char from[96] = "";
        if (start)
            snprintf(from, sizeof from, " from iteration %llu (resumed there: the caches start empty)",
                     (unsigned long long)start);
        printf("cache simulation of %s: %s split, %llu rows in %llu %s of %d%s%s, %d trainer%s, prefetch %d%s, rows "
               "of %d floats (%s)\n",
               path, meta.split, (unsigned long long)meta.rows, (unsigned long long)meta.batches,
               iters ? "iterations" : "batches", batch, iters ? " (train's: the whole batches in turn)" : "", from,
               trainers, trainers == 1 ? "" : "s", prefetch, parts == 2 ? ", the lookahead planner split by tables" : "",
               dim, bp_fmt_bytes(b1, sizeof b1, dim * 4.0));
        printf("hit = (trainer, key, batch) accesses served from the trainer's cache without a fetch for that batch\n\n");
        printf("%-9s %10s %6s %8s %13s %11s %13s %13s %10s\n", "policy", "cache", "window", "hit", "fetched rows",
               "fetched", "written rows", "synced rows", "peak rows");
        for (int i = 0; i < n; i++) {
            const sim_run *s = &runs[i];
            char cbuf[24] = "-", wbuf[16] = "-";
            if (s->pol != CS_NONE) snprintf(cbuf, sizeof cbuf, "%llu", (unsigned long long)s->C);
            if (s->pol == CS_LOOKAHEAD) snprintf(wbuf, sizeof wbuf, "%u", s->W);
            printf("%-9s %10s %6s ", cachesim_policy_name(s->pol), cbuf, wbuf);
            if (s->rc) {
                printf("%s\n", s->err);
                continue;
            }
            const cachesim_result *r = &s->r;
            printf("%7.2f%% %13llu %11s %13llu %13llu %10llu\n", 100 * hit_rate(r), (unsigned long long)r->fetched_rows,
                   bp_fmt_bytes(b2, sizeof b2, (double)r->fetched_rows * dim * 4), (unsigned long long)r->written_rows,
                   (unsigned long long)r->synced_rows, (unsigned long long)r->peak_rows);
        }
    }
    if (plot_dir) {
        const int made = mkdir(plot_dir, 0777) == 0;
        if (!made && errno != EEXIST) {
            rc = bp_fail(BP_EIO, "--plot-dir %s: %s", plot_dir, strerror(errno));
            goto out;
        }
        plot_data d = {&meta, runs, n, caches, nc, windows, nw};
        static const out_file files[] = {{"cachesim.json", emit_json},
                                         {"cachesim_capacity.csv", emit_capacity_csv},
                                         {"cachesim_lookahead.csv", emit_lookahead_csv}};
        if ((rc = write_files(plot_dir, files, (int)BP_ARRAY_LEN(files), &d))) {
            if (made) rmdir(plot_dir); // the directory this run made, left empty
            goto out;
        }
        remove_charts(plot_dir); // this run's charts, or none: never an earlier run's beside this data
        int plotted = run_gnuplot(plot_dir, meta.C, &rc);
        if (rc) goto out;
        fprintf(json ? stderr : stdout, "\nwrote %s/cachesim.json, cachesim_capacity.csv, cachesim_lookahead.csv%s\n",
                plot_dir, plotted ? ", hit_vs_capacity and hit_vs_lookahead charts" : "");
    }
out:
    free(runs);
    cachesim_close(cs);
    bp_ds_close(&ds);
    return rc;
}
