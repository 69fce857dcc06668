#include "data_vocab.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

#define VOCAB_INIT_BITS 10
#define VOCAB_MAX_BITS 34  // 2^34 slots: far beyond any table, and ids must fit uint32 anyway
#define VOCAB_PREFETCH 16  // keys ahead whose slot is prefetched
#define VOCAB_HI 0xffffffff00000000ull

static inline uint64_t vocab_hash(uint64_t key, uint32_t bits) { return (key * 0x9e3779b97f4a7c15ull) >> (64 - bits); }

static inline uint32_t slot_val(const vocab *v, size_t j) {
    return v->wide ? v->s64[j].val : (uint32_t)(v->s32[j] >> 32);
}
static inline void slot_set(vocab *v, size_t j, uint64_t key, uint32_t val) {
    if (v->wide) v->s64[j].key = key, v->s64[j].val = val;
    else v->s32[j] = (uint32_t)key | (uint64_t)val << 32;
}
static inline void slot_set_val(vocab *v, size_t j, uint32_t val) {
    if (v->wide) v->s64[j].val = val;
    else v->s32[j] = (uint32_t)v->s32[j] | (uint64_t)val << 32;
}

// The slot that holds key, or the empty slot where it would go.
static inline size_t vocab_find(const vocab *v, uint64_t key) {
    const uint64_t mask = ((uint64_t)1 << v->bits) - 1;
    uint64_t j = vocab_hash(key, v->bits);
    if (v->wide) {
        for (;; j = (j + 1) & mask)
            if (!v->s64[j].val || v->s64[j].key == key) return j;
    }
    for (;; j = (j + 1) & mask) {
        uint64_t x = v->s32[j];
        if (!(x >> 32) || (uint32_t)x == key) return j;
    }
}

static inline void vocab_prefetch(const vocab *v, uint64_t key) {
    uint64_t j = vocab_hash(key, v->bits);
    if (v->wide) __builtin_prefetch(&v->s64[j]);
    else __builtin_prefetch(&v->s32[j]);
}

static size_t vocab_slot_bytes(const vocab *v) { return v->wide ? sizeof(vocab_wslot) : sizeof(uint64_t); }

// Zeroed slots from anonymous memory (huge pages for big tables: probes are random, and the
// TLB misses of 4 KiB pages would double their cost).
// Out of memory (BP_ENOMEM), or past VOCAB_MAX_BITS (BP_ERANGE): v unchanged.
static int vocab_alloc(vocab *v, uint32_t bits) {
    if (bits > VOCAB_MAX_BITS)
        return bp_fail(BP_ERANGE, "a vocabulary of more than 2^%d slots (%llu distinct values so far)", VOCAB_MAX_BITS,
                       (unsigned long long)v->n);
    size_t bytes = ((size_t)1 << bits) * vocab_slot_bytes(v);
    void *p = bp_alloc_huge(bytes);
    if (!p) {
        char b[32];
        return bp_fail(BP_ENOMEM, "out of memory: its vocabulary needs a table of %s (%llu distinct values so far)",
                       bp_fmt_bytes(b, sizeof b, (double)bytes), (unsigned long long)v->n);
    }
    v->bits = bits;
    if (v->wide) v->s64 = p;
    else v->s32 = p;
    return 0;
}

static void vocab_release(vocab *v) {
    size_t bytes = ((size_t)1 << v->bits) * vocab_slot_bytes(v);
    bp_free_huge(v->wide ? (void *)v->s64 : (void *)v->s32, bytes);
    v->s32 = NULL, v->s64 = NULL;
}

int vocab_init(vocab *v, int wide) {
    memset(v, 0, sizeof *v);
    v->wide = wide;
    v->extra_id = UINT32_MAX;
    return vocab_alloc(v, VOCAB_INIT_BITS);
}

void vocab_free(vocab *v) {
    if (v->s32 || v->s64) vocab_release(v);
    memset(v, 0, sizeof *v);
}

// Doubles the slot count.  Slots are visited in order, and a key's home slot in the new table is
// about twice its old one (the hash takes the top bits), so the reinsertion streams.
static int vocab_grow(vocab *v) {
    vocab old = *v;
    int rc = vocab_alloc(v, old.bits + 1);
    if (rc) return rc; // v is old
    for (size_t j = 0; j < (size_t)1 << old.bits; j++) {
        if (old.wide ? !old.s64[j].val : !(old.s32[j] >> 32)) continue;
        uint64_t key = old.wide ? old.s64[j].key : (uint32_t)old.s32[j];
        size_t k = vocab_find(v, key);
        if (v->wide) v->s64[k] = old.s64[j];
        else v->s32[k] = old.s32[j];
    }
    vocab_release(&old);
    return 0;
}

static inline int vocab_count_one(vocab *v, uint64_t key) {
    if (!v->wide && key > UINT32_MAX) {
        BP_ASSERTF(key == VOCAB_KEY_EXTRA, "narrow vocabulary key %llu out of range", (unsigned long long)key);
        v->extra_count++;
        return 0;
    }
    size_t j = vocab_find(v, key);
    uint32_t c = slot_val(v, j);
    if (c) {
        if (c != UINT32_MAX) slot_set_val(v, j, c + 1);
        return 0;
    }
    if ((v->n + 1) * 4 > ((uint64_t)3 << v->bits)) {
        int rc = vocab_grow(v);
        if (rc) return rc;
        j = vocab_find(v, key);
    }
    slot_set(v, j, key, 1);
    v->n++;
    return 0;
}

int vocab_count(vocab *v, const uint64_t *keys, size_t stride, size_t n) {
    BP_ASSERT(!v->ranked);
    for (size_t i = 0; i < n; i++) {
        if (i + VOCAB_PREFETCH < n) vocab_prefetch(v, keys[(i + VOCAB_PREFETCH) * stride]);
        int rc = vocab_count_one(v, keys[i * stride]);
        if (rc) return rc;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Ranking

static int rank_oom(size_t bytes) {
    char b[32];
    return bp_fail(BP_ENOMEM, "out of memory: ranking its vocabulary needs %s more",
                   bp_fmt_bytes(b, sizeof b, (double)bytes));
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Sorts a[0, n) ascending: LSD radix sort on 16-bit digits (skipping digits that are the same
// everywhere), qsort for small n.
static int sort_u64(uint64_t *a, size_t n) {
    if (n < 4096) {
        qsort(a, n, sizeof *a, cmp_u64);
        return 0;
    }
    uint64_t *tmp = malloc(n * sizeof *tmp);
    size_t *count = malloc(65536 * sizeof *count);
    if (!tmp || !count) {
        free(tmp), free(count);
        return rank_oom(n * sizeof *tmp);
    }
    uint64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++) count[(src[i] >> shift) & 0xffff]++;
        if (count[(src[0] >> shift) & 0xffff] == n) continue;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 0xffff]++] = src[i];
        uint64_t *t = src;
        src = dst, dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof *a);
    free(count);
    free(tmp);
    return 0;
}

typedef struct {
    uint64_t count, key;
} wide_rank;

static int cmp_wide_rank(const void *a, const void *b) {
    const wide_rank *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

// Fills *out[0, kept) with the values counted at least min_count times, in ranking order (count
// descending, key ascending), the extra key included.  0, or BP_ENOMEM.
static int vocab_ranked_keys(const vocab *v, uint32_t min_count, uint64_t **out, size_t *kept_out) {
    const size_t cap = (size_t)1 << v->bits;
    size_t kept = 0;
    uint64_t *keys;
    if (v->wide) {
        wide_rank *w = malloc((v->n + 1) * sizeof *w);
        if (!w) return rank_oom((v->n + 1) * sizeof *w);
        for (size_t j = 0; j < cap; j++)
            if (v->s64[j].val >= min_count) w[kept++] = (wide_rank){v->s64[j].val, v->s64[j].key};
        qsort(w, kept, sizeof *w, cmp_wide_rank);
        keys = malloc((kept + 1) * sizeof *keys);
        if (!keys) {
            free(w);
            return rank_oom((kept + 1) * sizeof *keys);
        }
        for (size_t r = 0; r < kept; r++) keys[r] = w[r].key;
        free(w);
    } else {
        // (2^32 - 1 - count) << 32 | key sorts as the ranking wants: flip the count half.
        keys = malloc((v->n + 1) * sizeof *keys);
        if (!keys) return rank_oom((v->n + 1) * sizeof *keys);
        for (size_t j = 0; j < cap; j++)
            if ((v->s32[j] >> 32) >= min_count) keys[kept++] = v->s32[j] ^ VOCAB_HI;
        int rc = sort_u64(keys, kept);
        if (rc) {
            free(keys);
            return rc;
        }
        // The extra key goes after every value counted at least as often (it is the largest key).
        size_t pos = kept;
        if (v->extra_count >= min_count) {
            size_t lo = 0, hi = kept; // first entry with count < extra_count
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if ((uint64_t)(UINT32_MAX - (keys[mid] >> 32)) >= v->extra_count) lo = mid + 1;
                else hi = mid;
            }
            pos = lo;
        }
        for (size_t r = 0; r < kept; r++) keys[r] = (uint32_t)keys[r];
        if (v->extra_count >= min_count) {
            memmove(keys + pos + 1, keys + pos, (kept - pos) * sizeof *keys);
            keys[pos] = VOCAB_KEY_EXTRA;
            kept++;
        }
    }
    *out = keys, *kept_out = kept;
    return 0;
}

int vocab_rank(vocab *v, uint32_t min_count) {
    BP_ASSERT(!v->ranked && min_count >= 1);
    size_t kept = 0;
    uint64_t *keys = NULL; // (kept) in id order
    int rc = vocab_ranked_keys(v, min_count, &keys, &kept);
    if (rc) return rc;
    BP_ASSERT(kept < UINT32_MAX);
    const uint32_t rare = (uint32_t)kept; // the rare bucket's id when min_count > 1
    // Rare values first, while kept slots still hold counts >= min_count.
    const size_t cap = (size_t)1 << v->bits;
    for (size_t j = 0; j < cap; j++) {
        uint32_t c = slot_val(v, j);
        if (c && c < min_count) slot_set_val(v, j, rare + 1);
    }
    if (v->extra_count && v->extra_count < min_count) v->extra_id = rare;
    for (size_t r = 0; r < kept; r++) {
        if (r + VOCAB_PREFETCH < kept) vocab_prefetch(v, keys[r + VOCAB_PREFETCH]);
        if (!v->wide && keys[r] == VOCAB_KEY_EXTRA) {
            v->extra_id = (uint32_t)r;
            continue;
        }
        size_t j = vocab_find(v, keys[r]);
        BP_ASSERT(slot_val(v, j) != 0);
        slot_set_val(v, j, (uint32_t)r + 1);
    }
    free(keys);
    v->min_count = min_count;
    v->kept = kept;
    v->card = kept + (min_count > 1);
    v->ranked = 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Mapping

static inline int vocab_lookup(const vocab *v, uint64_t key, uint32_t *id) {
    if (!v->wide && key > UINT32_MAX) {
        if (key != VOCAB_KEY_EXTRA || v->extra_id == UINT32_MAX) return 0;
        *id = v->extra_id;
        return 1;
    }
    uint32_t c = slot_val(v, vocab_find(v, key));
    if (!c) return 0;
    *id = c - 1;
    return 1;
}

size_t vocab_map(const vocab *v, const uint64_t *keys, size_t stride, size_t n, uint32_t *ids, size_t ostride) {
    BP_ASSERT(v->ranked);
    for (size_t i = 0; i < n; i++) {
        if (i + VOCAB_PREFETCH < n) vocab_prefetch(v, keys[(i + VOCAB_PREFETCH) * stride]);
        if (!vocab_lookup(v, keys[i * stride], &ids[i * ostride])) return i;
    }
    return n;
}

uint64_t vocab_fingerprint(const vocab *v) {
    BP_ASSERT(v->ranked);
    uint64_t sum = 0; // a sum: the slots' order (the table's size, its history of growth) drops out
    const size_t cap = (size_t)1 << v->bits;
    for (size_t j = 0; j < cap; j++) {
        const uint32_t c = slot_val(v, j);
        if (c) sum += bp_hash2(v->wide ? v->s64[j].key : (uint32_t)v->s32[j], c - 1);
    }
    if (v->extra_id != UINT32_MAX) sum += bp_hash2(VOCAB_KEY_EXTRA, v->extra_id);
    return bp_hash2(sum, v->card);
}

uint64_t vocab_distinct(const vocab *v) { return v->n + (v->extra_count > 0); }

uint64_t vocab_mem_bytes(const vocab *v) {
    if (!v->s32 && !v->s64) return 0;
    return ((uint64_t)1 << v->bits) * vocab_slot_bytes(v);
}
