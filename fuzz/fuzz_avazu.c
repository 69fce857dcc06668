// Fuzz target: avazu_header_parse on the first line, then avazu_parse on every other line with
// that header (when it parsed).  Lines are handed over as the line reader would (s[n] == '\n').
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data_avazu.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1); // (size + 1): the input plus the sentinel newline
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\n';
    avazu_header h;
    int have_header = 0;
    size_t start = 0;
    while (start <= size) {
        char *nl = memchr(buf + start, '\n', size + 1 - start);
        size_t n = (size_t)(nl - (buf + start));
        lines_bad bad;
        memset(&bad, 0, sizeof bad);
        if (start == 0) {
            int rc = avazu_header_parse(&h, buf, n, &bad);
            FUZZ_CHECK(rc == 0 || rc == 1);
            if (rc == 0) {
                have_header = 1;
                FUZZ_CHECK(h.ncols > 0 && h.ncols <= AVAZU_MAX_COLS);
                int seen[AVAZU_F] = {0};
                for (int c = 0; c < h.ncols; c++) {
                    FUZZ_CHECK(h.role[c] >= AVAZU_ROLE_HOUR && h.role[c] < AVAZU_F && (h.role[c] < 0 || h.role[c] >= 2));
                    if (h.role[c] >= 2) seen[h.role[c]]++;
                }
                for (int f = 2; f < AVAZU_F; f++) FUZZ_CHECK(seen[f] == 1);
            }
        } else if (have_header) {
            uint8_t label = 0xAA;
            uint64_t keys[AVAZU_F];
            int rc = avazu_parse(&h, buf + start, n, &label, keys, &bad);
            FUZZ_CHECK(rc == 0 || rc == 1);
            if (rc == 0) {
                FUZZ_CHECK(label <= 1);
                FUZZ_CHECK(keys[0] < 24 && keys[1] < 7);
            } else {
                FUZZ_CHECK(bad.kind < LINES_BAD_N);
            }
        }
        start += n + 1;
    }
    free(buf);
    return 0;
}
