// data_avazu: the Avazu CTR CSV (train file: a header line, then one ad impression per line).
//
//   id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,
//   device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21
//
// The header locates the columns (any order); it must name click, hour and the 21 categorical
// columns once each, may name id (dropped), and nothing else.  click is the label (0 or 1).
// hour is YYMMDDHH (20YY) and becomes two features.  Output features, in this order (F = 23,
// no dense features):
//
//   0 hour_of_day (0-23)   1 day_of_week (0 = Monday .. 6 = Sunday)
//   2 C1  3 banner_pos  4 site_id  5 site_domain  6 site_category  7 app_id  8 app_domain
//   9 app_category  10 device_id  11 device_ip  12 device_model  13 device_type
//   14 device_conn_type  15 C14  16 C15  17 C16  18 C17  19 C18  20 C19  21 C20  22 C21
//
// Keys: hour_of_day and day_of_week are their numbers; the 21 string columns are avazu_hash()
// of the field's bytes (an empty field is the empty string).
#ifndef BP_DATA_AVAZU_H
#define BP_DATA_AVAZU_H

#include <stddef.h>
#include <stdint.h>

#include "data_lines.h"

enum {
    AVAZU_NCAT = 21,            // categorical string columns
    AVAZU_F = 2 + AVAZU_NCAT,   // output features
    AVAZU_MAX_COLS = 64,
};

extern const char *const avazu_feature_names[AVAZU_F];

typedef struct {
    int ncols;
    int8_t role[AVAZU_MAX_COLS]; // per column: AVAZU_ROLE_* or the output feature index (>= 2)
} avazu_header;

enum { AVAZU_ROLE_ID = -1, AVAZU_ROLE_CLICK = -2, AVAZU_ROLE_HOUR = -3 };

// Parses the header line; returns 0, or 1 with bad filled in (kind LINES_BAD_FIELDS).
int avazu_header_parse(avazu_header *h, const char *s, size_t n, lines_bad *bad);
// Parses one data line into label and keys (AVAZU_F); returns 0, or 1 with bad filled in.
int avazu_parse(const avazu_header *h, const char *s, size_t n, uint8_t *label, uint64_t *keys, lines_bad *bad);
// The fixed 64-bit hash of a string value: FNV-1a over the bytes, then a splitmix64 finaliser
// so that the low bits are usable for `mod N`.
uint64_t avazu_hash(const char *s, size_t n);
// Day of the week (0 = Monday) of 20yy-mm-dd; -1 if not a calendar date.
int avazu_weekday(int yy, int mm, int dd);

#endif
