// plan: the per-batch record (layout in plan.h): list growth, encoding, validating decoding.
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

void plan_init(plan *p) { memset(p, 0, sizeof *p); }

void plan_free(plan *p) {
    if (!p) return;
    free(p->slice);
    free(p->priv_off);
    free(p->fetch);
    free(p->evict);
    free(p->priv_key);
    free(p->sync_now);
    free(p->sync_later);
    memset(p, 0, sizeof *p);
}

void plan_swap(plan *a, plan *b) {
    plan t = *a;
    *a = *b;
    *b = t;
}

// Grows *arr (element size `size`) so that it holds at least `need` elements.
static void grow(void **arr, uint32_t *cap, uint64_t need, size_t size) {
    if (need <= *cap) return;
    BP_ASSERTF(need <= UINT32_MAX, "plan list of %llu entries", (unsigned long long)need);
    uint64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    if (c > UINT32_MAX) c = UINT32_MAX;
    *arr = bp_xrealloc(*arr, (size_t)c * size);
    *cap = (uint32_t)c;
}

void plan_reset(plan *p, uint32_t T) {
    BP_ASSERT(T >= 1);
    if (T + 1 > p->cap_T) {
        p->slice = bp_xrealloc(p->slice, (size_t)(T + 1) * sizeof *p->slice);
        p->priv_off = bp_xrealloc(p->priv_off, (size_t)(T + 1) * sizeof *p->priv_off);
        p->cap_T = T + 1;
    }
    p->T = T;
    memset(p->slice, 0, (size_t)(T + 1) * sizeof *p->slice);
    memset(p->priv_off, 0, (size_t)(T + 1) * sizeof *p->priv_off);
    p->n_fetch = p->n_evict = p->n_private = p->n_sync_now = p->n_sync_later = 0;
}

void plan_reserve(plan *p, int list, uint32_t n) {
    switch (list) {
    case PLAN_LIST_FETCH: grow((void **)&p->fetch, &p->cap_fetch, (uint64_t)p->n_fetch + n, sizeof *p->fetch); break;
    case PLAN_LIST_EVICT: grow((void **)&p->evict, &p->cap_evict, (uint64_t)p->n_evict + n, sizeof *p->evict); break;
    case PLAN_LIST_SYNC_NOW:
        grow((void **)&p->sync_now, &p->cap_sync_now, (uint64_t)p->n_sync_now + n, sizeof *p->sync_now);
        break;
    case PLAN_LIST_SYNC_LATER:
        grow((void **)&p->sync_later, &p->cap_sync_later, (uint64_t)p->n_sync_later + n, sizeof *p->sync_later);
        break;
    default: BP_ASSERT(0);
    }
}

void plan_grow_list(plan *p, int list) { plan_reserve(p, list, 1); }

uint64_t plan_list_bytes(const plan *p) {
    return (uint64_t)p->cap_fetch * sizeof *p->fetch + (uint64_t)p->cap_evict * sizeof *p->evict +
           (uint64_t)p->cap_private * sizeof *p->priv_key + (uint64_t)p->cap_sync_now * sizeof *p->sync_now +
           (uint64_t)p->cap_sync_later * sizeof *p->sync_later;
}

void plan_reserve_private(plan *p, uint32_t n) {
    grow((void **)&p->priv_key, &p->cap_private, n, sizeof *p->priv_key);
}

// ---------------------------------------------------------------------------------------------
// Encoding

enum { FETCH_REST = 1 + 4 + 2 + 2 + 1, EVICT_REST = 2 + 1, GROUP_SIZE = 3 * 4 };

// Size of a record with these counts (64-bit: no count can overflow it).
static uint64_t record_size(uint64_t T, uint64_t kb, uint64_t nf, uint64_t ne, uint64_t np, uint64_t nn,
                            uint64_t nl, uint64_t ng) {
    return PLAN_HEADER_SIZE + (T + 1) * 4 + nf * (kb + FETCH_REST) + ne * (kb + EVICT_REST) + (T + 1) * 4 +
           np * kb + nn * kb + ng * GROUP_SIZE + nl * kb;
}

// Sync-later groups: maximal runs of equal (grad_iter, deadline).  Returns the number of groups,
// or -1 if the list is not in group order (strictly increasing (iter - grad_iter, deadline)).
static int64_t sync_groups(const plan *p) {
    int64_t ng = 0;
    for (uint32_t i = 0; i < p->n_sync_later; i++) {
        const plan_sync *a = &p->sync_later[i];
        if (i == 0) {
            ng = 1;
            continue;
        }
        const plan_sync *b = &p->sync_later[i - 1];
        if (a->grad_iter == b->grad_iter && a->deadline == b->deadline) continue;
        if (a->grad_iter > b->grad_iter || (a->grad_iter == b->grad_iter && a->deadline < b->deadline)) return -1;
        ng++;
    }
    return ng;
}

static uint32_t key_width(uint64_t n_keys) { return n_keys <= ((uint64_t)1 << 32) ? 4 : 8; }

size_t plan_encoded_size(const plan *p) {
    int64_t ng = sync_groups(p);
    return (size_t)record_size(p->T, key_width(p->n_keys), p->n_fetch, p->n_evict, p->n_private, p->n_sync_now,
                               p->n_sync_later, ng < 0 ? 0 : (uint64_t)ng);
}

static inline uint8_t *put_key(uint8_t *q, uint64_t k, uint32_t kb) {
    if (kb == 4) bp_put_u32(q, (uint32_t)k);
    else bp_put_u64(q, k);
    return q + kb;
}
static inline uint8_t *put16(uint8_t *q, uint16_t v) {
    q[0] = (uint8_t)v, q[1] = (uint8_t)(v >> 8);
    return q + 2;
}
static inline uint8_t *put32(uint8_t *q, uint32_t v) {
    bp_put_u32(q, v);
    return q + 4;
}

int64_t plan_encode(const plan *p, uint8_t *buf, size_t cap) {
    if (p->T < 1 || p->T > PLAN_MAX_TRAINERS || p->n_keys == 0)
        return bp_fail(BP_EINVAL, "plan_encode: record %u has T=%u, n_keys=%llu", p->iter, p->T,
                       (unsigned long long)p->n_keys);
    int64_t ng = sync_groups(p);
    if (ng < 0) return bp_fail(BP_EINVAL, "plan_encode: record %u: sync-later entries are not in group order", p->iter);
    size_t size = plan_encoded_size(p);
    if (size > UINT32_MAX) return bp_fail(BP_EINVAL, "plan_encode: record %u needs %zu bytes (> 4 GiB)", p->iter, size);
    if (cap < size) return bp_fail(BP_EINVAL, "plan_encode: record %u needs %zu bytes, buffer has %zu", p->iter, size, cap);
    uint32_t kb = key_width(p->n_keys);
    uint8_t *q = buf;
    q = put32(q, PLAN_MAGIC);
    q = put16(q, PLAN_VERSION);
    *q++ = (uint8_t)kb;
    *q++ = (uint8_t)p->flags;
    q = put32(q, (uint32_t)size);
    q = put32(q, 0); // crc, filled last
    q = put32(q, p->iter);
    q = put16(q, (uint16_t)p->T);
    q = put16(q, (uint16_t)p->P);
    q = put32(q, p->W);
    q = put32(q, p->B);
    bp_put_u64(q, p->row0), q += 8;
    bp_put_u64(q, p->capacity), q += 8;
    bp_put_u64(q, p->n_keys), q += 8;
    q = put32(q, p->n_fetch);
    q = put32(q, p->n_evict);
    q = put32(q, p->n_private);
    q = put32(q, p->n_sync_now);
    q = put32(q, p->n_sync_later);
    q = put32(q, (uint32_t)ng);
    BP_ASSERT(q - buf == PLAN_HEADER_SIZE);
    for (uint32_t i = 0; i <= p->T; i++) q = put32(q, p->slice[i]);
    for (uint32_t i = 0; i < p->n_fetch; i++) {
        const plan_fetch *f = &p->fetch[i];
        if (f->for_iter < p->iter || f->for_iter - p->iter > 255)
            return bp_fail(BP_EINVAL, "plan_encode: record %u: fetch for iteration %u", p->iter, f->for_iter);
        q = put_key(q, f->key, kb);
        *q++ = (uint8_t)(f->for_iter - p->iter);
        q = put32(q, f->evict_iter);
        q = put16(q, f->fetcher);
        q = put16(q, f->writer);
        *q++ = f->flags;
    }
    for (uint32_t i = 0; i < p->n_evict; i++) {
        q = put_key(q, p->evict[i].key, kb);
        q = put16(q, p->evict[i].owner);
        *q++ = p->evict[i].flags;
    }
    for (uint32_t i = 0; i <= p->T; i++) q = put32(q, p->priv_off[i]);
    for (uint32_t i = 0; i < p->n_private; i++) q = put_key(q, p->priv_key[i], kb);
    for (uint32_t i = 0; i < p->n_sync_now; i++) q = put_key(q, p->sync_now[i], kb);
    for (uint32_t i = 0, start = 0; i < p->n_sync_later; i++) { // group headers
        const plan_sync *a = &p->sync_later[i];
        if (i + 1 < p->n_sync_later && a[1].grad_iter == a->grad_iter && a[1].deadline == a->deadline) continue;
        q = put32(q, a->grad_iter);
        q = put32(q, a->deadline);
        q = put32(q, i + 1 - start);
        start = i + 1;
    }
    for (uint32_t i = 0; i < p->n_sync_later; i++) q = put_key(q, p->sync_later[i].key, kb);
    BP_ASSERT((size_t)(q - buf) == size);
    bp_put_u32(buf + 12, bp_crc32(0, buf + 16, size - 16));
    return (int64_t)size;
}

// ---------------------------------------------------------------------------------------------
// Decoding: every field is checked before it is trusted.

static inline uint16_t get16(const uint8_t *q) { return (uint16_t)(q[0] | q[1] << 8); }
static inline uint64_t get_key(const uint8_t *q, uint32_t kb) { return kb == 4 ? bp_get_u32(q) : bp_get_u64(q); }

int plan_peek_size(const uint8_t *buf, size_t n, uint32_t *size) {
    if (n < PLAN_HEADER_SIZE) return bp_fail(BP_EFORMAT, "plan record: %zu bytes, shorter than its header", n);
    if (bp_get_u32(buf) != PLAN_MAGIC) return bp_fail(BP_EFORMAT, "plan record: bad magic");
    if (get16(buf + 4) != PLAN_VERSION)
        return bp_fail(BP_EFORMAT, "plan record: version %u, expected %u", get16(buf + 4), PLAN_VERSION);
    uint32_t s = bp_get_u32(buf + 8);
    if (s < PLAN_HEADER_SIZE) return bp_fail(BP_EFORMAT, "plan record: size %u smaller than the header", s);
    *size = s;
    return 0;
}

#define BAD(...) (p->n_fetch = p->n_evict = p->n_private = p->n_sync_now = p->n_sync_later = 0, \
                  bp_fail(BP_EFORMAT, __VA_ARGS__))

int plan_decode(plan *p, const uint8_t *buf, size_t n) {
    p->n_fetch = p->n_evict = p->n_private = p->n_sync_now = p->n_sync_later = 0;
    uint32_t size;
    int rc = plan_peek_size(buf, n, &size);
    if (rc) return rc;
    if (size != n) return BAD("plan record: size field says %u bytes, got %zu", size, n);
    if (bp_get_u32(buf + 12) != bp_crc32(0, buf + 16, n - 16)) return BAD("plan record: checksum mismatch");
    uint32_t kb = buf[6], flags = buf[7];
    uint32_t iter = bp_get_u32(buf + 16), T = get16(buf + 20), P = get16(buf + 22);
    uint32_t W = bp_get_u32(buf + 24), B = bp_get_u32(buf + 28);
    uint64_t row0 = bp_get_u64(buf + 32), capacity = bp_get_u64(buf + 40), n_keys = bp_get_u64(buf + 48);
    uint32_t nf = bp_get_u32(buf + 56), ne = bp_get_u32(buf + 60), np = bp_get_u32(buf + 64);
    uint32_t nn = bp_get_u32(buf + 68), nl = bp_get_u32(buf + 72), ng = bp_get_u32(buf + 76);
    if (kb != 4 && kb != 8) return BAD("plan record %u: key width %u, expected 4 or 8", iter, kb);
    if (flags & ~(uint32_t)PLAN_LAST) return BAD("plan record %u: unknown flags 0x%x", iter, flags);
    if (T < 1 || T > PLAN_MAX_TRAINERS) return BAD("plan record %u: %u trainers (1..%d)", iter, T, PLAN_MAX_TRAINERS);
    if (n_keys == 0 || kb != key_width(n_keys))
        return BAD("plan record %u: key width %u does not fit key space %llu", iter, kb, (unsigned long long)n_keys);
    if (B == 0 || capacity == 0) return BAD("plan record %u: empty batch or zero capacity", iter);
    if ((uint64_t)iter + P + W + 1 >= PLAN_NEVER) return BAD("plan record %u: iteration out of range", iter);
    if (ng > nl || (nl > 0 && ng == 0))
        return BAD("plan record %u: %u sync-later groups for %u entries", iter, ng, nl);
    if (record_size(T, kb, nf, ne, np, nn, nl, ng) != size)
        return BAD("plan record %u: counts (%u fetch, %u evict, %u private, %u sync-now, %u sync-later in %u groups) "
                   "do not match its size %u", iter, nf, ne, np, nn, nl, ng, size);

    plan_reset(p, T);
    p->iter = iter, p->flags = flags, p->P = P, p->W = W, p->B = B;
    p->row0 = row0, p->capacity = capacity, p->n_keys = n_keys, p->key_bytes = kb;
    const uint8_t *q = buf + PLAN_HEADER_SIZE;
    for (uint32_t i = 0; i <= T; i++, q += 4) p->slice[i] = bp_get_u32(q);
    if (p->slice[0] != 0 || p->slice[T] != B) return BAD("plan record %u: slices do not cover the batch", iter);
    for (uint32_t i = 0; i < T; i++)
        if (p->slice[i] > p->slice[i + 1]) return BAD("plan record %u: slice of trainer %u is reversed", iter, i);

    grow((void **)&p->fetch, &p->cap_fetch, nf, sizeof *p->fetch);
    for (uint32_t i = 0; i < nf; i++) {
        plan_fetch *f = &p->fetch[i];
        f->key = get_key(q, kb), q += kb;
        f->for_iter = iter + *q++;
        f->evict_iter = bp_get_u32(q), q += 4;
        f->fetcher = get16(q), q += 2;
        f->writer = get16(q), q += 2;
        f->flags = *q++;
        if (f->key >= n_keys) return BAD("plan record %u: fetch %u: key %llu out of range", iter, i, (unsigned long long)f->key);
        if (f->fetcher >= T) return BAD("plan record %u: fetch %u: trainer %u out of range", iter, i, f->fetcher);
        if (f->flags & ~(unsigned)PLAN_PRIVATE) return BAD("plan record %u: fetch %u: bad flags 0x%x", iter, i, f->flags);
        if (iter == 0 ? f->for_iter > P : f->for_iter != iter + P)
            return BAD("plan record %u: fetch %u: for iteration %u, prefetch distance is %u", iter, i, f->for_iter, P);
        if (f->evict_iter == PLAN_NEVER ? f->writer != PLAN_NO_WRITER : (f->evict_iter >= iter || f->writer >= T))
            return BAD("plan record %u: fetch %u: bad consistency gate (evicted after %u by %u)", iter, i,
                       f->evict_iter, f->writer);
    }
    p->n_fetch = nf;
    grow((void **)&p->evict, &p->cap_evict, ne, sizeof *p->evict);
    for (uint32_t i = 0; i < ne; i++) {
        plan_evict *e = &p->evict[i];
        e->key = get_key(q, kb), q += kb;
        e->owner = get16(q), q += 2;
        e->flags = *q++;
        if (e->key >= n_keys) return BAD("plan record %u: evict %u: key %llu out of range", iter, i, (unsigned long long)e->key);
        if (e->owner >= T) return BAD("plan record %u: evict %u: trainer %u out of range", iter, i, e->owner);
        if ((e->flags & ~(unsigned)(PLAN_PRIVATE | PLAN_WB_NEXT)) || e->flags == (PLAN_PRIVATE | PLAN_WB_NEXT))
            return BAD("plan record %u: evict %u: bad flags 0x%x", iter, i, e->flags);
    }
    p->n_evict = ne;
    for (uint32_t i = 0; i <= T; i++, q += 4) p->priv_off[i] = bp_get_u32(q);
    if (p->priv_off[0] != 0 || p->priv_off[T] != np) return BAD("plan record %u: private offsets do not add up", iter);
    for (uint32_t i = 0; i < T; i++)
        if (p->priv_off[i] > p->priv_off[i + 1]) return BAD("plan record %u: private offsets of trainer %u reversed", iter, i);
    plan_reserve_private(p, np);
    for (uint32_t i = 0; i < np; i++, q += kb) {
        p->priv_key[i] = get_key(q, kb);
        if (p->priv_key[i] >= n_keys) return BAD("plan record %u: private key %u out of range", iter, i);
    }
    p->n_private = np;
    grow((void **)&p->sync_now, &p->cap_sync_now, nn, sizeof *p->sync_now);
    for (uint32_t i = 0; i < nn; i++, q += kb) {
        p->sync_now[i] = get_key(q, kb);
        if (p->sync_now[i] >= n_keys) return BAD("plan record %u: sync-now key %u out of range", iter, i);
    }
    p->n_sync_now = nn;
    grow((void **)&p->sync_later, &p->cap_sync_later, nl, sizeof *p->sync_later);
    uint64_t filled = 0;
    for (uint32_t g = 0; g < ng; g++, q += GROUP_SIZE) {
        uint32_t gi = bp_get_u32(q), dl = bp_get_u32(q + 4), cnt = bp_get_u32(q + 8);
        if (gi > iter || dl <= iter || (uint64_t)dl > (uint64_t)iter + 1 + P + W)
            return BAD("plan record %u: sync-later group %u: gradient of %u due by %u", iter, g, gi, dl);
        if (cnt == 0 || filled + cnt > nl) return BAD("plan record %u: sync-later group %u: bad count %u", iter, g, cnt);
        if (g > 0) {
            const plan_sync *prv = &p->sync_later[filled - 1];
            if (gi > prv->grad_iter || (gi == prv->grad_iter && dl <= prv->deadline))
                return BAD("plan record %u: sync-later group %u out of order", iter, g);
        }
        for (uint32_t k = 0; k < cnt; k++) p->sync_later[filled + k].grad_iter = gi, p->sync_later[filled + k].deadline = dl;
        filled += cnt;
    }
    if (filled != nl) return BAD("plan record %u: sync-later groups hold %llu of %u entries", iter, (unsigned long long)filled, nl);
    for (uint32_t i = 0; i < nl; i++, q += kb) {
        p->sync_later[i].key = get_key(q, kb);
        if (p->sync_later[i].key >= n_keys) return BAD("plan record %u: sync-later %u: key out of range", iter, i);
    }
    p->n_sync_later = nl;
    BP_ASSERT(q == buf + n);
    return 0;
}
