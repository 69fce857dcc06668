// msg: encode/decode of the wire protocol (layout in msg.h).
#include "msg.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

int msg_has_keys(uint32_t kind) {
    return kind == MSG_ROW_REQ || kind == MSG_GRAD_PUSH || kind == MSG_DUMP_ROWS || kind == MSG_FETCH ||
           kind == MSG_WB || kind == MSG_FWD || kind == MSG_GSYNC || kind == MSG_HOT_GRAD;
}

int msg_has_rows(uint32_t kind) {
    return kind == MSG_ROW_REPLY || kind == MSG_GRAD_PUSH || kind == MSG_DUMP_ROWS || kind == MSG_FETCH ||
           kind == MSG_FETCH_REPLY || kind == MSG_WB || kind == MSG_FWD || kind == MSG_GSYNC || kind == MSG_HOT_GRAD ||
           kind == MSG_CKPT_PART;
}

const char *msg_kind_name(uint32_t kind) {
    static const char *const names[MSG_KINDS] = {"?",         "ROW_REQ", "ROW_REPLY", "GRAD_PUSH", "DUMP_REQ",
                                                 "DUMP_ROWS", "DONE",    "AR_RS",     "AR_AG",
                                                 "FETCH",     "FETCH_REPLY", "WB",    "FWD",       "GSYNC",
                                                 "PLAN",      "CREDIT",  "HOT_GRAD", "CKPT_PART", "END", "START"};
    return kind < MSG_KINDS ? names[kind] : "?";
}

void *msg_buf_fit(msg_buf *b, size_t n) {
    if (n > b->cap) {
        free(b->p);
        b->cap = n + n / 4 + 64;
        b->p = bp_xmalloc(b->cap);
    }
    return b->p;
}

size_t msg_bytes(uint32_t kind, uint32_t n, uint32_t width) {
    size_t b = MSG_HEADER_BYTES;
    if (msg_has_keys(kind)) b += (size_t)n * sizeof(uint64_t);
    if (msg_has_rows(kind)) b += (size_t)n * width * sizeof(float);
    return b;
}

uint32_t msg_server_of(uint64_t key, int S) { return (uint32_t)(bp_mix64(key) % (uint64_t)S); }

void msg_encode(void *buf, const msg_header *h, uint64_t **keys, float **rows) {
    BP_ASSERT(((uintptr_t)buf & 7) == 0 && h->n <= MSG_MAX_N);
    uint8_t *p = buf;
    bp_put_u32(p, h->kind), bp_put_u32(p + 4, h->flags), bp_put_u64(p + 8, h->iter);
    bp_put_u32(p + 16, h->n), bp_put_u32(p + 20, h->width);
    p += MSG_HEADER_BYTES;
    if (keys) *keys = msg_has_keys(h->kind) ? (uint64_t *)p : NULL;
    if (msg_has_keys(h->kind)) p += (size_t)h->n * sizeof(uint64_t);
    if (rows) *rows = msg_has_rows(h->kind) ? (float *)p : NULL;
}

int msg_decode(const void *buf, size_t len, int from, const msg_expect *ex, msg_header *h,
               const uint64_t **keys, const float **rows) {
    const char *kn = msg_kind_name(ex->kind);
    if (len < MSG_HEADER_BYTES)
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: %zu bytes, shorter than the header", kn, from, len);
    const uint8_t *p = buf;
    msg_header hh = {bp_get_u32(p), bp_get_u32(p + 4), bp_get_u64(p + 8), bp_get_u32(p + 16), bp_get_u32(p + 20)};
    if (hh.kind != ex->kind)
        return bp_fail(BP_EFORMAT, "msg: rank %d sent kind %u (%s) under tag %s", from, hh.kind,
                       msg_kind_name(hh.kind), kn);
    if (hh.n > ex->max_n || hh.n > MSG_MAX_N)
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: %u entries, at most %u expected", kn, from, hh.n, ex->max_n);
    if (ex->width && msg_has_rows(hh.kind) && hh.width != ex->width)
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: rows of %u floats, expected %u", kn, from, hh.width,
                       ex->width);
    if (hh.width > (1u << 20))
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: width %u out of range", kn, from, hh.width);
    if (ex->iter >= 0 && hh.iter != (uint64_t)ex->iter)
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: iteration %llu, expected %lld", kn, from,
                       (unsigned long long)hh.iter, (long long)ex->iter);
    size_t want = msg_bytes(hh.kind, hh.n, hh.width);
    if (len != want)
        return bp_fail(BP_EFORMAT, "msg: %s from rank %d: %zu bytes, the header promises %zu", kn, from, len, want);
    if (((uintptr_t)buf & 7) != 0) return bp_fail(BP_EFORMAT, "msg: %s from rank %d: unaligned buffer", kn, from);
    const uint64_t *k = msg_has_keys(hh.kind) ? (const uint64_t *)(p + MSG_HEADER_BYTES) : NULL;
    if (k) {
        for (uint32_t i = 0; i < hh.n; i++) {
            if (i && k[i] <= k[i - 1])
                return bp_fail(BP_EFORMAT, "msg: %s from rank %d: keys not ascending and unique at entry %u", kn,
                               from, i);
            if (ex->rows && k[i] >= ex->rows)
                return bp_fail(BP_EFORMAT, "msg: %s from rank %d: key %llu outside the %llu rows", kn, from,
                               (unsigned long long)k[i], (unsigned long long)ex->rows);
            if (ex->S > 0 && msg_server_of(k[i], ex->S) != (uint32_t)ex->server)
                return bp_fail(BP_EFORMAT, "msg: %s from rank %d: key %llu belongs to server %u, not %d", kn, from,
                               (unsigned long long)k[i], msg_server_of(k[i], ex->S), ex->server);
        }
    }
    *h = hh;
    if (keys) *keys = k;
    if (rows)
        *rows = msg_has_rows(hh.kind)
                    ? (const float *)(p + MSG_HEADER_BYTES + (k ? (size_t)hh.n * sizeof(uint64_t) : 0))
                    : NULL;
    return 0;
}
