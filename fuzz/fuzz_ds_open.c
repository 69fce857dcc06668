// Fuzz target: bp_ds_open on a whole file made from the input.  Byte 0 picks the mode:
//   bit 0  recompute the header checksum (offset BP_DS_HEADER_SIZE - 4)
//   bit 1  open with BP_DS_VERIFY
//   bit 2  repair the file so only the row contents are fuzzed: when the header's fields decode,
//          pad or cut the file to the header's file_size (if <= 1 MiB), then stamp the section
//          checksums and the header checksum.
// An opened dataset must map exactly file_size bytes, every section must lie inside the map, and
// (verified) every label must be 0/1 and every id below its table's cardinality.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data_bin.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CRC_LABEL = 136, CRC_DENSE = 140, CRC_SPARSE = 144, CRC_PROB = 148 }; // header offsets (data_bin.c)

static void stamp_header_crc(uint8_t *f) {
    bp_put_u32(f + BP_DS_HEADER_SIZE - 4, bp_crc32(0, f, BP_DS_HEADER_SIZE - 4));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    unsigned mode = data[0];
    size_t n = size - 1;
    uint8_t *f = malloc(n > BP_DS_HEADER_SIZE ? n : BP_DS_HEADER_SIZE); // (n) the file's bytes
    if (!f) return 0;
    memcpy(f, data + 1, n);
    if ((mode & 1) && n >= BP_DS_HEADER_SIZE) stamp_header_crc(f);
    if ((mode & 4) && n >= BP_DS_HEADER_SIZE) {
        bp_ds_info hi;
        stamp_header_crc(f);
        if (bp_ds_header_decode(&hi, f, BP_DS_HEADER_SIZE, "fuzz") == 0 && hi.file_size <= (1u << 20)) {
            uint8_t *g = calloc(1, hi.file_size); // (file_size) the repaired file
            if (!g) {
                free(f);
                return 0;
            }
            memcpy(g, f, n < hi.file_size ? n : hi.file_size);
            free(f);
            f = g;
            n = hi.file_size;
            bp_put_u32(f + CRC_LABEL, bp_crc32(0, f + hi.off_label, hi.rows));
            bp_put_u32(f + CRC_DENSE, bp_crc32(0, f + hi.off_dense, hi.rows * hi.n_dense * 4));
            bp_put_u32(f + CRC_SPARSE, bp_crc32(0, f + hi.off_sparse, hi.rows * hi.n_sparse * 4));
            if (hi.flags & BP_DS_HAS_PROB) bp_put_u32(f + CRC_PROB, bp_crc32(0, f + hi.off_prob, hi.rows * 4));
            stamp_header_crc(f);
        }
    }
    char path[600];
    fuzz_write_file("ds.bin", f, n, path, sizeof path);
    free(f);
    bp_dataset ds;
    int rc = bp_ds_open(&ds, path, (mode & 2) ? BP_DS_VERIFY : 0);
    if (rc) {
        FUZZ_CHECK(rc < 0 && ds.map == NULL && ds.path == NULL);
        bp_ds_close(&ds);
        return 0;
    }
    const bp_ds_info *in = &ds.info;
    FUZZ_CHECK(ds.map_size == in->file_size && ds.map_size == n);
    const uint8_t *base = ds.map, *endp = base + ds.map_size;
    FUZZ_CHECK(ds.label >= base && ds.label + in->rows <= endp);
    FUZZ_CHECK((const uint8_t *)ds.dense >= base && (const uint8_t *)(ds.dense + in->rows * in->n_dense) <= endp);
    FUZZ_CHECK((const uint8_t *)ds.sparse >= base && (const uint8_t *)(ds.sparse + in->rows * in->n_sparse) <= endp);
    if (ds.prob) FUZZ_CHECK((const uint8_t *)ds.prob >= base && (const uint8_t *)(ds.prob + in->rows) <= endp);
    uint64_t total = 0;
    for (int s = BP_SPLIT_TRAIN; s <= BP_SPLIT_TEST; s++) {
        uint64_t b, e;
        bp_ds_split_range(&ds, (bp_split)s, &b, &e);
        FUZZ_CHECK(b <= e && e <= in->rows);
        total += e - b;
    }
    FUZZ_CHECK(total == in->rows);
    if (mode & 2) {
        for (uint64_t r = 0; r < in->rows; r++) {
            FUZZ_CHECK(ds.label[r] <= 1);
            for (uint32_t j = 0; j < in->n_sparse; j++) FUZZ_CHECK(ds.sparse[r * in->n_sparse + j] < in->card[j]);
        }
    }
    bp_ds_close(&ds);
    bp_ds_close(&ds); // safe twice
    return 0;
}
