// Fuzz target: bp_ds_header_decode on a BP_DS_HEADER_SIZE buffer built from the input.  Byte 0
// picks the mode: bit 0 set stamps the magic and version, bit 1 recomputes the header checksum
// (so mutations reach the field checks instead of dying at the CRC).  A decoded header must
// re-encode to a header that decodes to the same values.
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "data_bin.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    static uint8_t b[BP_DS_HEADER_SIZE]; // one header
    memset(b, 0, sizeof b);
    size_t n = size - 1 < sizeof b ? size - 1 : sizeof b;
    memcpy(b, data + 1, n);
    if (mode & 1) {
        memcpy(b, BP_DS_MAGIC, 8);
        bp_put_u32(b + 8, BP_DS_VERSION);
        bp_put_u32(b + 12, BP_DS_HEADER_SIZE);
    }
    if (mode & 2) bp_put_u32(b + BP_DS_HEADER_SIZE - 4, bp_crc32(0, b, BP_DS_HEADER_SIZE - 4));
    // Short buffers are part of the contract too.
    size_t len = (mode & 4) ? n : sizeof b;
    bp_ds_info info;
    memset(&info, 0x5A, sizeof info);
    int rc = bp_ds_header_decode(&info, b, len, "fuzz");
    if (rc) {
        FUZZ_CHECK(rc < 0);
        return 0;
    }
    FUZZ_CHECK(info.n_sparse >= 1 && info.n_sparse <= BP_DS_MAX_SPARSE && info.n_dense <= BP_DS_MAX_DENSE);
    FUZZ_CHECK(info.split[0] + info.split[1] + info.split[2] == info.rows);
    FUZZ_CHECK(info.off_label >= BP_DS_HEADER_SIZE && info.file_size >= info.off_label);
    FUZZ_CHECK(memchr(info.source, 0, sizeof info.source) != NULL);
    static uint8_t b2[BP_DS_HEADER_SIZE];
    bp_ds_header_encode(&info, b2);
    bp_ds_info again;
    memset(&again, 0, sizeof again);
    FUZZ_CHECK(bp_ds_header_decode(&again, b2, sizeof b2, "fuzz-reencoded") == 0);
    FUZZ_CHECK(again.rows == info.rows && again.n_dense == info.n_dense && again.n_sparse == info.n_sparse &&
               again.file_size == info.file_size && again.off_prob == info.off_prob &&
               memcmp(again.card, info.card, info.n_sparse * sizeof info.card[0]) == 0 &&
               strcmp(again.source, info.source) == 0);
    return 0;
}
