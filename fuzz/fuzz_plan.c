// Fuzz target: plan_decode on one record.  Byte 0 bit 0 stamps the size field and the checksum
// (so mutations reach the field checks instead of dying at the CRC).  A failed decode must leave
// the counts at zero; a decoded record must encode (plan_encode) to a record that decodes to the
// same plan, and re-encoding that gives the same bytes.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_util.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int plan_same(const plan *a, const plan *b) {
    if (a->iter != b->iter || a->flags != b->flags || a->T != b->T || a->P != b->P || a->W != b->W || a->B != b->B ||
        a->row0 != b->row0 || a->capacity != b->capacity || a->n_keys != b->n_keys || a->n_fetch != b->n_fetch ||
        a->n_evict != b->n_evict || a->n_private != b->n_private || a->n_sync_now != b->n_sync_now ||
        a->n_sync_later != b->n_sync_later)
        return 0;
    for (uint32_t i = 0; i <= a->T; i++)
        if (a->slice[i] != b->slice[i] || a->priv_off[i] != b->priv_off[i]) return 0;
    for (uint32_t i = 0; i < a->n_fetch; i++) {
        const plan_fetch *x = &a->fetch[i], *y = &b->fetch[i];
        if (x->key != y->key || x->for_iter != y->for_iter || x->evict_iter != y->evict_iter ||
            x->fetcher != y->fetcher || x->writer != y->writer || x->flags != y->flags)
            return 0;
    }
    for (uint32_t i = 0; i < a->n_evict; i++)
        if (a->evict[i].key != b->evict[i].key || a->evict[i].owner != b->evict[i].owner ||
            a->evict[i].flags != b->evict[i].flags)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    size_t n = size - 1;
    uint8_t *rec = malloc(n ? n : 1); // (n) the record, exactly sized so overreads are caught
    if (!rec) return 0;
    memcpy(rec, data + 1, n);
    if ((mode & 1) && n >= 16 && n <= UINT32_MAX) {
        bp_put_u32(rec + 8, (uint32_t)n);
        bp_put_u32(rec + 12, bp_crc32(0, rec + 16, n - 16));
    }
    uint32_t peek;
    int prc = plan_peek_size(rec, n, &peek);
    FUZZ_CHECK(prc == 0 || prc < 0);
    plan p, q;
    plan_init(&p);
    plan_init(&q);
    int rc = plan_decode(&p, rec, n);
    if (rc) {
        FUZZ_CHECK(rc < 0);
        FUZZ_CHECK(p.n_fetch == 0 && p.n_evict == 0 && p.n_private == 0 && p.n_sync_now == 0 && p.n_sync_later == 0);
    } else {
        FUZZ_CHECK(prc == 0 && peek == n);
        size_t sz = plan_encoded_size(&p);
        FUZZ_CHECK(sz == n);
        uint8_t *enc = malloc(sz); // (sz) the re-encoded record
        FUZZ_CHECK(enc != NULL);
        FUZZ_CHECK(plan_encode(&p, enc, sz - 1) < 0); // too small a buffer is refused
        FUZZ_CHECK(plan_encode(&p, enc, sz) == (int64_t)sz);
        FUZZ_CHECK(plan_decode(&q, enc, sz) == 0);
        FUZZ_CHECK(plan_same(&p, &q));
        FUZZ_CHECK(memcmp(enc, rec, n) == 0); // the encoding is canonical
        free(enc);
    }
    plan_free(&p);
    plan_free(&q);
    free(rec);
    return 0;
}
