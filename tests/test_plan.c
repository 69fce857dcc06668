// Plan record tests: encode/decode round trips and rejection of every kind of malformed record.
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "plan.h"
#include "test.h"

static int sync_order(const void *x, const void *y) {
    const plan_sync *a = x, *b = y;
    if (a->grad_iter != b->grad_iter) return a->grad_iter > b->grad_iter ? -1 : 1;
    return a->deadline < b->deadline ? -1 : a->deadline > b->deadline;
}

// A random valid record.  key space n_keys decides the key width.
static void random_plan(plan *p, bp_rng *r, uint64_t n_keys, uint32_t T) {
    plan_reset(p, T);
    p->iter = 3 + bp_rng_below(r, 1000), p->P = bp_rng_below(r, 4), p->W = bp_rng_below(r, 300);
    p->flags = bp_rng_below(r, 2) ? PLAN_LAST : 0;
    p->B = 1 + bp_rng_below(r, 500);
    p->row0 = bp_rng_u64(r) >> 20, p->capacity = 1 + bp_rng_below(r, 100000), p->n_keys = n_keys;
    for (uint32_t i = 0; i <= T; i++) p->slice[i] = (uint32_t)((uint64_t)i * p->B / T);
#define KEY() (bp_rng_u64(r) % n_keys)
    uint32_t nf = bp_rng_below(r, 20), ne = bp_rng_below(r, 20), np = bp_rng_below(r, 20);
    uint32_t nn = bp_rng_below(r, 20), nl = bp_rng_below(r, 20);
    for (uint32_t i = 0; i < nf; i++) {
        int never = bp_rng_below(r, 3) == 0;
        plan_add_fetch(p, (plan_fetch){KEY(), p->iter + p->P, never ? PLAN_NEVER : bp_rng_below(r, p->iter),
                                       (uint16_t)bp_rng_below(r, T), never ? PLAN_NO_WRITER : (uint16_t)bp_rng_below(r, T),
                                       (uint8_t)bp_rng_below(r, 2)});
    }
    static const uint8_t eflags[3] = {0, PLAN_PRIVATE, PLAN_WB_NEXT};
    for (uint32_t i = 0; i < ne; i++) plan_add_evict(p, (plan_evict){KEY(), (uint16_t)bp_rng_below(r, T), eflags[bp_rng_below(r, 3)]});
    plan_reserve_private(p, np);
    for (uint32_t i = 0; i < np; i++) p->priv_key[i] = KEY();
    p->n_private = np;
    for (uint32_t i = 1; i < T; i++) p->priv_off[i] = (uint32_t)((uint64_t)i * np / T);
    p->priv_off[T] = np;
    for (uint32_t i = 0; i < nn; i++) plan_add_sync_now(p, KEY());
    for (uint32_t i = 0; i < nl; i++)
        plan_add_sync_later(p, (plan_sync){KEY(), p->iter - bp_rng_below(r, 3), p->iter + 1 + bp_rng_below(r, p->P + p->W + 1)});
    qsort(p->sync_later, p->n_sync_later, sizeof *p->sync_later, sync_order); // the encoder's group order
#undef KEY
}

static int plans_equal(const plan *a, const plan *b) {
    if (a->iter != b->iter || a->flags != b->flags || a->T != b->T || a->P != b->P || a->W != b->W || a->B != b->B ||
        a->row0 != b->row0 || a->capacity != b->capacity || a->n_keys != b->n_keys || a->n_fetch != b->n_fetch ||
        a->n_evict != b->n_evict || a->n_private != b->n_private || a->n_sync_now != b->n_sync_now ||
        a->n_sync_later != b->n_sync_later)
        return 0;
    for (uint32_t i = 0; i <= a->T; i++)
        if (a->slice[i] != b->slice[i] || a->priv_off[i] != b->priv_off[i]) return 0;
    for (uint32_t i = 0; i < a->n_fetch; i++) {
        const plan_fetch *x = &a->fetch[i], *y = &b->fetch[i];
        if (x->key != y->key || x->for_iter != y->for_iter || x->evict_iter != y->evict_iter || x->fetcher != y->fetcher ||
            x->writer != y->writer || x->flags != y->flags)
            return 0;
    }
    for (uint32_t i = 0; i < a->n_evict; i++)
        if (a->evict[i].key != b->evict[i].key || a->evict[i].owner != b->evict[i].owner || a->evict[i].flags != b->evict[i].flags)
            return 0;
    for (uint32_t i = 0; i < a->n_private; i++)
        if (a->priv_key[i] != b->priv_key[i]) return 0;
    for (uint32_t i = 0; i < a->n_sync_now; i++)
        if (a->sync_now[i] != b->sync_now[i]) return 0;
    for (uint32_t i = 0; i < a->n_sync_later; i++)
        if (a->sync_later[i].key != b->sync_later[i].key || a->sync_later[i].grad_iter != b->sync_later[i].grad_iter ||
            a->sync_later[i].deadline != b->sync_later[i].deadline)
            return 0;
    return 1;
}

TEST(plan_roundtrip_both_key_widths) {
    bp_rng r;
    bp_rng_seed(&r, 1, 0);
    plan a, b;
    plan_init(&a), plan_init(&b);
    uint8_t *buf = NULL, *buf2 = NULL;
    for (int it = 0; it < 400; it++) {
        uint64_t n_keys = it % 2 ? 1 + bp_rng_below(&r, 1000000) : (1ull << 32) + bp_rng_below(&r, 1000000) * 7919ull;
        random_plan(&a, &r, n_keys, 1 + bp_rng_below(&r, 9));
        size_t n = plan_encoded_size(&a);
        buf = bp_xrealloc(buf, n), buf2 = bp_xrealloc(buf2, n);
        ASSERT_EQ(plan_encode(&a, buf, n), (int64_t)n);
        ASSERT_EQ(buf[6], it % 2 ? 4 : 8);
        uint32_t sz;
        ASSERT_OK(plan_peek_size(buf, PLAN_HEADER_SIZE, &sz));
        ASSERT_EQ(sz, n);
        ASSERT_OK(plan_decode(&b, buf, n));
        ASSERT_TRUE(plans_equal(&a, &b));
        ASSERT_EQ(plan_encode(&b, buf2, n), (int64_t)n);
        ASSERT_TRUE(memcmp(buf, buf2, n) == 0);
    }
    // A buffer one byte short is refused by the encoder.
    ASSERT_EQ(plan_encode(&a, buf, plan_encoded_size(&a) - 1), BP_EINVAL);
    free(buf), free(buf2);
    plan_free(&a), plan_free(&b);
    plan_free(&a); // twice is fine
}

// Encodes a fixed small record (T = 3, 4-byte keys, every list non-empty) into buf.
static size_t sample_record(plan *p, uint8_t *buf, size_t cap) {
    plan_reset(p, 3);
    p->iter = 10, p->P = 2, p->W = 5, p->B = 9, p->row0 = 90, p->capacity = 100, p->n_keys = 1000, p->flags = 0;
    for (uint32_t i = 0; i <= 3; i++) p->slice[i] = 3 * i;
    plan_add_fetch(p, (plan_fetch){7, 12, 4, 1, 2, 0});
    plan_add_fetch(p, (plan_fetch){8, 12, PLAN_NEVER, 2, PLAN_NO_WRITER, PLAN_PRIVATE});
    plan_add_evict(p, (plan_evict){9, 0, PLAN_WB_NEXT});
    plan_add_evict(p, (plan_evict){10, 2, PLAN_PRIVATE});
    plan_reserve_private(p, 2);
    p->priv_key[0] = 10, p->priv_key[1] = 11, p->n_private = 2;
    p->priv_off[0] = 0, p->priv_off[1] = 0, p->priv_off[2] = 1, p->priv_off[3] = 2;
    plan_add_sync_now(p, 12);
    plan_add_sync_later(p, (plan_sync){9, 10, 11});
    plan_add_sync_later(p, (plan_sync){13, 8, 11});
    int64_t n = plan_encode(p, buf, cap);
    BP_ASSERT(n > 0);
    return (size_t)n;
}

static void fix_crc(uint8_t *buf, size_t n) { bp_put_u32(buf + 12, bp_crc32(0, buf + 16, n - 16)); }

// Offsets in the sample record (T = 3, K = 4).
enum {
    O_SLICE = PLAN_HEADER_SIZE,
    O_FETCH = O_SLICE + 16,          // 2 x 14 bytes: key, for_iter - t, evict_iter, fetcher, writer, flags
    O_EVICT = O_FETCH + 2 * 14,      // 2 x 7
    O_POFF = O_EVICT + 2 * 7,        // 4 x 4
    O_PKEY = O_POFF + 16,            // 2 x 4
    O_SNOW = O_PKEY + 8,             // 1 x 4
    O_SGROUP = O_SNOW + 4,           // 2 groups x 12: grad_iter, deadline, count
    O_SKEY = O_SGROUP + 24,          // 2 x 4
    O_END = O_SKEY + 8,
};

typedef struct {
    const char *what;
    size_t off;
    int width; // 1, 2, 4, 8
    uint64_t value;
    const char *msg; // expected in the error message
} patch;

TEST(plan_rejects_malformed_records) {
    plan p, q;
    plan_init(&p), plan_init(&q);
    uint8_t good[512], bad[520];
    size_t n = sample_record(&p, good, sizeof good);
    ASSERT_EQ(n, O_END);
    ASSERT_OK(plan_decode(&q, good, n));
    ASSERT_TRUE(plans_equal(&p, &q));

    // Truncated at every length, and one byte too long.
    for (size_t k = 0; k < n; k++) ASSERT_MSG(plan_decode(&q, good, k) == BP_EFORMAT, "accepted %zu of %zu bytes", k, n);
    memcpy(bad, good, n), bad[n] = 0;
    ASSERT_EQ(plan_decode(&q, bad, n + 1), BP_EFORMAT);
    ASSERT_EQ(q.n_fetch, 0); // a failed decode leaves nothing to trust

    // A flipped bit anywhere is caught by the checksum (or the header checks before it).
    for (size_t k = 0; k < n; k++) {
        memcpy(bad, good, n);
        bad[k] ^= 0x10;
        ASSERT_MSG(plan_decode(&q, bad, n) == BP_EFORMAT, "flip at byte %zu accepted", k);
    }

    // Field by field, with the checksum recomputed so that each check is reached on its own.
    const patch patches[] = {
        {"magic", 0, 4, 0x4C505043, "magic"},
        {"version", 4, 2, 2, "version"},
        {"key width", 6, 1, 5, "key width"},
        {"key width for the key space", 6, 1, 8, "key width"},
        {"flags", 7, 1, 0x80, "flags"},
        {"size below header", 8, 4, 40, "smaller than the header"},
        {"zero trainers", 20, 2, 0, "trainers"},
        {"too many trainers", 20, 2, PLAN_MAX_TRAINERS + 1, "trainers"},
        {"empty batch", 28, 4, 0, "empty batch"},
        {"zero capacity", 40, 8, 0, "capacity"},
        {"zero key space", 48, 8, 0, "key width"},
        {"iteration overflow", 16, 4, 0xFFFFFFFAu, "iteration out of range"},
        {"fetch count overflow", 56, 4, 0xFFFFFFFFu, "do not match its size"},
        {"fetch count wraps 32 bits", 56, 4, 0x0F0F0F10u, "do not match its size"},
        {"evict count", 60, 4, 3, "do not match its size"},
        {"private count", 64, 4, 1u << 31, "do not match its size"},
        {"sync-now count", 68, 4, 2, "do not match its size"},
        {"sync-later count", 72, 4, 0x40000000u, "do not match its size"},
        {"sync group count above entries", 76, 4, 3, "sync-later groups"},
        {"no sync groups", 76, 4, 0, "sync-later groups"},
        {"sync group count off by one", 76, 4, 1, "do not match its size"},
        {"slice start", O_SLICE, 4, 1, "slices"},
        {"slice end", O_SLICE + 12, 4, 8, "slices"},
        {"slice reversed", O_SLICE + 4, 4, 7, "reversed"},
        {"fetch key out of range", O_FETCH, 4, 1000, "key 1000 out of range"},
        {"fetch for another iteration", O_FETCH + 4, 1, 3, "prefetch distance"},
        {"fetch gate after now", O_FETCH + 5, 4, 10, "consistency gate"},
        {"fetcher out of range", O_FETCH + 9, 2, 3, "trainer 3 out of range"},
        {"writer out of range", O_FETCH + 11, 2, 3, "consistency gate"},
        {"writer without eviction", O_FETCH + 14 + 11, 2, 1, "consistency gate"},
        {"fetch flags", O_FETCH + 13, 1, 4, "bad flags"},
        {"evict key out of range", O_EVICT, 4, 5000, "out of range"},
        {"evict owner out of range", O_EVICT + 4, 2, 7, "trainer 7 out of range"},
        {"evict private and delayed", O_EVICT + 6, 1, PLAN_PRIVATE | PLAN_WB_NEXT, "bad flags"},
        {"private offsets start", O_POFF, 4, 1, "private offsets"},
        {"private offsets end", O_POFF + 12, 4, 1, "private offsets"},
        {"private offsets reversed", O_POFF + 4, 4, 2, "reversed"},
        {"private key out of range", O_PKEY + 4, 4, 1000, "private key"},
        {"sync-now key out of range", O_SNOW, 4, 0xFFFFFFFFu, "sync-now"},
        {"sync-later key out of range", O_SKEY, 4, 1000, "sync-later"},
        {"sync-later future gradient", O_SGROUP, 4, 11, "sync-later group 0"},
        {"sync-later deadline passed", O_SGROUP + 4, 4, 10, "sync-later group 0"},
        {"sync-later deadline too far", O_SGROUP + 12 + 4, 4, 10 + 1 + 2 + 5 + 1, "sync-later group 1"},
        {"sync-later group count zero", O_SGROUP + 8, 4, 0, "bad count"},
        {"sync-later group count too big", O_SGROUP + 8, 4, 2, "bad count"},
        {"sync-later groups out of order", O_SGROUP + 12, 4, 10, "out of order"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(patches); i++) {
        const patch *pt = &patches[i];
        memcpy(bad, good, n);
        uint8_t *d = bad + pt->off;
        for (int b = 0; b < pt->width; b++) d[b] = (uint8_t)(pt->value >> (8 * b));
        fix_crc(bad, n);
        int rc = plan_decode(&q, bad, n);
        ASSERT_MSG(rc == BP_EFORMAT, "%s: accepted", pt->what);
        ASSERT_MSG(strstr(bp_errmsg(rc), pt->msg), "%s: message '%s' lacks '%s'", pt->what, bp_errmsg(rc), pt->msg);
        ASSERT_EQ(q.n_fetch + q.n_evict + q.n_private + q.n_sync_now + q.n_sync_later, 0);
    }
    // The first record may fetch for any of 0..P.
    memcpy(bad, good, n);
    bp_put_u32(bad + 16, 0);                     // iter 0
    bp_put_u32(bad + O_FETCH + 5, PLAN_NEVER);   // no earlier eviction can exist
    bp_put_u32(bad + O_FETCH + 9, 0xFFFF0001u);  // fetcher 1, writer none
    bad[O_FETCH + 4] = 1, bad[O_FETCH + 14 + 4] = 2;
    bp_put_u32(bad + O_SGROUP, 0), bp_put_u32(bad + O_SGROUP + 4, 1);
    bp_put_u32(bad + O_SGROUP + 12, 0), bp_put_u32(bad + O_SGROUP + 16, 2);
    fix_crc(bad, n);
    ASSERT_OK(plan_decode(&q, bad, n));
    ASSERT_TRUE(q.fetch[0].for_iter == 1 && q.fetch[1].for_iter == 2 && q.sync_later[1].deadline == 2);
    bad[O_FETCH + 4] = 3; // > P
    fix_crc(bad, n);
    ASSERT_EQ(plan_decode(&q, bad, n), BP_EFORMAT);
    // The encoder refuses sync-later entries out of group order.
    plan_swap(&p, &q);
    ASSERT_OK(plan_decode(&q, good, n));
    plan_sync t0 = q.sync_later[0];
    q.sync_later[0] = q.sync_later[1], q.sync_later[1] = t0;
    ASSERT_EQ(plan_encode(&q, bad, sizeof bad), BP_EINVAL);
    plan_free(&p), plan_free(&q);
}

// Random mutations with a valid checksum: the decoder either rejects or returns a record that
// re-encodes to exactly the same bytes, and never reads outside the buffer (ASan checks that).
TEST(plan_fuzz_decoder) {
    bp_rng r;
    bp_rng_seed(&r, 9, 0);
    plan p, q;
    plan_init(&p), plan_init(&q);
    uint8_t *buf = NULL, *re = NULL;
    int rejected = 0, accepted = 0;
    for (int it = 0; it < 3000; it++) {
        random_plan(&p, &r, 1 + bp_rng_below(&r, 5000), 1 + bp_rng_below(&r, 4));
        size_t n = plan_encoded_size(&p);
        buf = bp_xrealloc(buf, n + 8), re = bp_xrealloc(re, n + 8);
        ASSERT_EQ(plan_encode(&p, buf, n), (int64_t)n);
        int muts = 1 + (int)bp_rng_below(&r, 3);
        for (int m = 0; m < muts; m++) {
            size_t at = bp_rng_below(&r, (uint32_t)n);
            if (at < 16) at += 16; // keep magic/version/size/crc; the checksum is recomputed
            if (at >= n) at = n - 1;
            buf[at] = (uint8_t)bp_rng_u64(&r);
        }
        fix_crc(buf, n);
        if (plan_decode(&q, buf, n) == 0) {
            accepted++;
            ASSERT_EQ(plan_encode(&q, re, n), (int64_t)n);
            ASSERT_TRUE(memcmp(buf, re, n) == 0);
        } else {
            rejected++;
        }
    }
    ASSERT_MSG(rejected > 300 && accepted > 150, "rejected %d, accepted %d", rejected, accepted);
    free(buf), free(re);
    plan_free(&p), plan_free(&q);
}
