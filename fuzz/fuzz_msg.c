// Fuzz target: msg_decode.  The first 32 bytes of the input describe what the receiver expects
// (kind, width, max_n, iter, rows, server, S); the rest is the message, copied into an 8-byte
// aligned buffer of exactly its length (one more byte misaligns it, bit 7 of byte 0).  A decoded
// message must satisfy every promise of msg.h: exact length, kind, n bound, keys ascending,
// unique, in range and owned.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_util.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 32) return 0;
    const uint8_t *e = data;
    msg_expect ex;
    memset(&ex, 0, sizeof ex);
    ex.kind = 1 + e[1] % (MSG_KINDS - 1);
    ex.width = e[2] < 128 ? e[2] : bp_get_u32(e + 4);
    ex.max_n = bp_get_u32(e + 8) % (MSG_MAX_N + 1u);
    ex.iter = (e[3] & 1) ? -1 : (int64_t)(bp_get_u64(e + 12) & INT64_MAX);
    ex.rows = (e[3] & 2) ? 0 : bp_get_u64(e + 20);
    ex.S = (e[3] & 4) ? 0 : 1 + e[28] % 8;
    ex.server = ex.S ? e[29] % ex.S : 0;
    int misalign = (e[0] & 0x80) != 0;
    size_t len = size - 32;
    uint64_t *store = malloc(len + 16); // (len + misalign) bytes, 8-byte aligned
    if (!store) return 0;
    uint8_t *buf = (uint8_t *)store + misalign;
    memcpy(buf, data + 32, len);
    msg_header h;
    const uint64_t *keys = NULL;
    const float *rows = NULL;
    int rc = msg_decode(buf, len, 3, &ex, &h, &keys, &rows);
    if (rc) {
        FUZZ_CHECK(rc < 0);
    } else {
        FUZZ_CHECK(!misalign);
        FUZZ_CHECK(h.kind == ex.kind && h.n <= ex.max_n && len == msg_bytes(h.kind, h.n, h.width));
        if (ex.iter >= 0) FUZZ_CHECK(h.iter == (uint64_t)ex.iter);
        if (ex.width && msg_has_rows(h.kind)) FUZZ_CHECK(h.width == ex.width);
        FUZZ_CHECK((keys != NULL) == (msg_has_keys(h.kind) != 0));
        FUZZ_CHECK((rows != NULL) == (msg_has_rows(h.kind) != 0));
        const uint8_t *endp = buf + len;
        if (keys) {
            FUZZ_CHECK((const uint8_t *)(keys + h.n) <= endp);
            for (uint32_t i = 0; i < h.n; i++) {
                if (i) FUZZ_CHECK(keys[i] > keys[i - 1]);
                if (ex.rows) FUZZ_CHECK(keys[i] < ex.rows);
                if (ex.S) FUZZ_CHECK(msg_server_of(keys[i], ex.S) == (uint32_t)ex.server);
            }
        }
        if (rows) {
            FUZZ_CHECK((const uint8_t *)(rows + (size_t)h.n * h.width) == endp);
            volatile float sink = 0;
            for (size_t i = 0; i < (size_t)h.n * h.width; i++) sink += rows[i];
            (void)sink;
        }
        // Re-encoding the header gives the same bytes.
        uint64_t *re = malloc(len + 8); // (len) bytes, 8-byte aligned
        FUZZ_CHECK(re != NULL);
        uint64_t *rk;
        float *rr;
        msg_encode(re, &h, &rk, &rr);
        FUZZ_CHECK(memcmp(re, buf, MSG_HEADER_BYTES) == 0);
        free(re);
    }
    free(store);
    return 0;
}
