// Fuzz target: criteo_parse on every line of the input.  Each line is handed over as the line
// reader would (no '\n' inside, s[n] == '\n'); a parsed line must give a 0/1 label, finite
// non-negative dense values and keys <= CRITEO_MISSING.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data_criteo.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1); // (size + 1): the input plus the sentinel newline
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\n';
    size_t start = 0;
    while (start <= size) {
        char *nl = memchr(buf + start, '\n', size + 1 - start);
        size_t n = (size_t)(nl - (buf + start));
        uint8_t label = 0xAA;
        float dense[CRITEO_ND];
        uint64_t keys[CRITEO_F];
        lines_bad bad;
        memset(&bad, 0, sizeof bad);
        int rc = criteo_parse(buf + start, n, &label, dense, keys, &bad);
        FUZZ_CHECK(rc == 0 || rc == 1);
        if (rc == 0) {
            FUZZ_CHECK(label <= 1);
            for (int i = 0; i < CRITEO_ND; i++) FUZZ_CHECK(isfinite(dense[i]) && dense[i] >= 0.0f);
            for (int i = 0; i < CRITEO_F; i++) FUZZ_CHECK(keys[i] <= CRITEO_MISSING);
        } else {
            FUZZ_CHECK(bad.kind < LINES_BAD_N);
            FUZZ_CHECK(memchr(bad.msg, 0, sizeof bad.msg) != NULL);
        }
        start += n + 1;
    }
    free(buf);
    return 0;
}
