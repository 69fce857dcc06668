// data_criteo: one line of the Criteo Kaggle / Terabyte click logs.
//
//   label \t I1 .. I13 \t C1 .. C26        (40 tab-separated fields, no header)
//
// label is 0 or 1.  I1..I13 are decimal integers (an optional '-', digits, at most int64);
// empty means 0 and negative values clamp to 0; the dense output is log(1 + max(x, 0)) as
// float32.  C1..C26 are hex strings of 1-8 digits (the logs use exactly 8, lowercase) read as
// uint32; an empty field is its own value, CRITEO_MISSING = 2^32, one past every hex value.
#ifndef BP_DATA_CRITEO_H
#define BP_DATA_CRITEO_H

#include <stddef.h>
#include <stdint.h>

#include "data_lines.h"

enum { CRITEO_ND = 13, CRITEO_F = 26, CRITEO_FIELDS = 1 + CRITEO_ND + CRITEO_F };
#define CRITEO_MISSING ((uint64_t)1 << 32)

// Parses s[0, n) (s[n] readable, not a tab or digit, as data_lines guarantees).  Fills label,
// dense (CRITEO_ND) and keys (CRITEO_F) and returns 0, or returns 1 with bad filled in (the
// outputs are then garbage).
int criteo_parse(const char *s, size_t n, uint8_t *label, float *dense, uint64_t *keys, lines_bad *bad);
// log(1 + max(x, 0)) exactly as criteo_parse computes it (for tests and other writers).
float criteo_log1p(int64_t x);

#endif
