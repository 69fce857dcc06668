#include "data_vocab.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

#define VOCAB_INIT_BITS 10
#define VOCAB_MAX_BITS 31   // slot indices and the ranking's index array stay in uint32
#define VOCAB_PREFETCH 16   // keys ahead whose slot is prefetched
#define EXTRA_INDEX UINT32_MAX

static inline uint64_t vocab_slot(uint64_t key, uint32_t bits) {
    return (key * 0x9e3779b97f4a7c15ull) >> (64 - bits);
}

static void vocab_alloc(vocab *v, uint32_t bits) {
    size_t cap = (size_t)1 << bits;
    v->bits = bits;
    v->val = bp_xcalloc(cap, sizeof *v->val);
    if (v->wide) v->k64 = bp_xmalloc(cap * sizeof *v->k64);
    else v->k32 = bp_xmalloc(cap * sizeof *v->k32);
}

void vocab_init(vocab *v, int wide) {
    memset(v, 0, sizeof *v);
    v->wide = wide;
    v->extra_id = UINT32_MAX;
    vocab_alloc(v, VOCAB_INIT_BITS);
}

void vocab_free(vocab *v) {
    free(v->k32);
    free(v->k64);
    free(v->val);
    memset(v, 0, sizeof *v);
}

static inline uint64_t vocab_key(const vocab *v, size_t i) { return v->wide ? v->k64[i] : v->k32[i]; }

// Doubles the slot count and reinserts every key.
static void vocab_grow(vocab *v) {
    BP_ASSERTF(v->bits < VOCAB_MAX_BITS, "vocabulary table over 2^%d slots (%llu distinct values)", VOCAB_MAX_BITS,
               (unsigned long long)v->n);
    vocab old = *v;
    vocab_alloc(v, old.bits + 1);
    uint64_t mask = ((uint64_t)1 << v->bits) - 1;
    for (size_t i = 0; i < (size_t)1 << old.bits; i++) {
        if (!old.val[i]) continue;
        uint64_t key = vocab_key(&old, i);
        uint64_t j = vocab_slot(key, v->bits);
        while (v->val[j]) j = (j + 1) & mask;
        v->val[j] = old.val[i];
        if (v->wide) v->k64[j] = key;
        else v->k32[j] = (uint32_t)key;
    }
    free(old.k32);
    free(old.k64);
    free(old.val);
}

static inline void vocab_prefetch(const vocab *v, uint64_t key) {
    uint64_t j = vocab_slot(key, v->bits);
    __builtin_prefetch(&v->val[j]);
    if (v->wide) __builtin_prefetch(&v->k64[j]);
    else __builtin_prefetch(&v->k32[j]);
}

static void vocab_count_one(vocab *v, uint64_t key) {
    if (!v->wide && key > UINT32_MAX) {
        BP_ASSERTF(key == VOCAB_KEY_EXTRA, "narrow vocabulary key %llu out of range", (unsigned long long)key);
        v->extra_count++;
        return;
    }
    for (;;) {
        uint64_t mask = ((uint64_t)1 << v->bits) - 1;
        uint64_t j = vocab_slot(key, v->bits);
        for (;;) {
            uint32_t c = v->val[j];
            if (!c) break;
            if (vocab_key(v, j) == key) {
                if (c != UINT32_MAX) v->val[j] = c + 1;
                return;
            }
            j = (j + 1) & mask;
        }
        if ((v->n + 1) * 4 > ((uint64_t)3 << v->bits)) {
            vocab_grow(v);
            continue; // probe again in the bigger table
        }
        v->val[j] = 1;
        if (v->wide) v->k64[j] = key;
        else v->k32[j] = (uint32_t)key;
        v->n++;
        return;
    }
}

void vocab_count(vocab *v, const uint64_t *keys, size_t stride, size_t n) {
    BP_ASSERT(!v->ranked);
    for (size_t i = 0; i < n; i++) {
        if (i + VOCAB_PREFETCH < n) vocab_prefetch(v, keys[(i + VOCAB_PREFETCH) * stride]);
        vocab_count_one(v, keys[i * stride]);
    }
}

// Ranking order: count descending, then key ascending.  Slot EXTRA_INDEX is the extra key.
static int vocab_rank_cmp(const void *a, const void *b, void *arg) {
    const vocab *v = arg;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    uint64_t ca = ia == EXTRA_INDEX ? v->extra_count : v->val[ia];
    uint64_t cb = ib == EXTRA_INDEX ? v->extra_count : v->val[ib];
    if (ca != cb) return ca > cb ? -1 : 1;
    uint64_t ka = ia == EXTRA_INDEX ? VOCAB_KEY_EXTRA : vocab_key(v, ia);
    uint64_t kb = ib == EXTRA_INDEX ? VOCAB_KEY_EXTRA : vocab_key(v, ib);
    return ka < kb ? -1 : ka > kb;
}

void vocab_rank(vocab *v, uint32_t min_count) {
    BP_ASSERT(!v->ranked && min_count >= 1);
    size_t cap = (size_t)1 << v->bits;
    uint32_t *idx = bp_xmalloc((v->n + 1) * sizeof *idx); // (kept) slots in ranking order
    size_t kept = 0;
    for (size_t i = 0; i < cap; i++)
        if (v->val[i] >= min_count) idx[kept++] = (uint32_t)i;
    if (v->extra_count >= min_count) idx[kept++] = EXTRA_INDEX;
    qsort_r(idx, kept, sizeof *idx, vocab_rank_cmp, v);
    BP_ASSERT(kept < UINT32_MAX);
    uint32_t rare = (uint32_t)kept; // the rare bucket's id when min_count > 1
    // Rare values first, while kept slots still hold counts >= min_count.
    for (size_t i = 0; i < cap; i++)
        if (v->val[i] && v->val[i] < min_count) v->val[i] = rare + 1;
    if (v->extra_count && v->extra_count < min_count) v->extra_id = rare;
    for (size_t r = 0; r < kept; r++) {
        if (idx[r] == EXTRA_INDEX) v->extra_id = (uint32_t)r;
        else v->val[idx[r]] = (uint32_t)r + 1;
    }
    free(idx);
    v->min_count = min_count;
    v->kept = kept;
    v->card = kept + (min_count > 1);
    v->ranked = 1;
}

static inline int vocab_lookup(const vocab *v, uint64_t key, uint32_t *id) {
    if (!v->wide && key > UINT32_MAX) {
        if (key != VOCAB_KEY_EXTRA || v->extra_id == UINT32_MAX) return 0;
        *id = v->extra_id;
        return 1;
    }
    uint64_t mask = ((uint64_t)1 << v->bits) - 1;
    uint64_t j = vocab_slot(key, v->bits);
    for (;;) {
        uint32_t c = v->val[j];
        if (!c) return 0;
        if (vocab_key(v, j) == key) {
            *id = c - 1;
            return 1;
        }
        j = (j + 1) & mask;
    }
}

size_t vocab_map(const vocab *v, const uint64_t *keys, size_t stride, size_t n, uint32_t *ids, size_t ostride) {
    BP_ASSERT(v->ranked);
    for (size_t i = 0; i < n; i++) {
        if (i + VOCAB_PREFETCH < n) vocab_prefetch(v, keys[(i + VOCAB_PREFETCH) * stride]);
        if (!vocab_lookup(v, keys[i * stride], &ids[i * ostride])) return i;
    }
    return n;
}

uint64_t vocab_distinct(const vocab *v) { return v->n + (v->extra_count > 0); }

uint64_t vocab_mem_bytes(const vocab *v) {
    if (!v->val) return 0;
    return ((uint64_t)1 << v->bits) * (sizeof(uint32_t) + (v->wide ? sizeof(uint64_t) : sizeof(uint32_t)));
}
