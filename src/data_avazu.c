#include "data_avazu.h"

#include <string.h>

#include "common.h"

const char *const avazu_feature_names[AVAZU_F] = {
    "hour_of_day", "day_of_week", "C1",        "banner_pos",   "site_id",      "site_domain",
    "site_category", "app_id",    "app_domain", "app_category", "device_id",   "device_ip",
    "device_model", "device_type", "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21",
};

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static inline uint64_t avazu_hash_final(uint64_t h) {
    h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27, h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t avazu_hash(const char *s, size_t n) {
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * FNV_PRIME;
    return avazu_hash_final(h);
}

int avazu_weekday(int yy, int mm, int dd) {
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y = 2000 + yy;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (yy < 0 || yy > 99 || mm < 1 || mm > 12 || dd < 1 || dd > mdays[mm - 1] + (mm == 2 && leap)) return -1;
    // Days since 2000-01-01 (a Saturday), counting March as the first month of the year.
    if (mm <= 2) y--, mm += 12;
    long days = 365L * y + y / 4 - y / 100 + y / 400 + (153 * (mm - 3) + 2) / 5 + dd;
    long ref = 365L * 1999 + 1999 / 4 - 1999 / 100 + 1999 / 400 + (153 * (13 - 3) + 2) / 5 + 1;
    long wd = (days - ref + 5) % 7; // 2000-01-01 is day 5 (Saturday) with Monday = 0
    return (int)(wd < 0 ? wd + 7 : wd);
}

int avazu_header_parse(avazu_header *h, const char *s, size_t n, lines_bad *bad) {
    static const char *const expect =
        "expected the Avazu header 'id,click,hour,C1,banner_pos,site_id,...,C21' (id optional, any order)";
    memset(h, 0, sizeof *h);
    int seen_click = 0, seen_hour = 0, seen_id = 0, seen_cat[AVAZU_NCAT] = {0};
    const char *p = s, *end = s + n;
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) p += 3; // a UTF-8 byte-order mark (spreadsheet exports)
    const char *first = p;
    for (;;) {
        const char *f = p;
        while (p < end && *p != ',') p++;
        size_t len = (size_t)(p - f);
        char q[80];
        lines_quote(q, sizeof q, f, len, 40);
        if (h->ncols == AVAZU_MAX_COLS)
            return lines_bad_set(bad, LINES_BAD_FIELDS, "header has over %d columns; %s", AVAZU_MAX_COLS, expect);
        int role = 0, *seen = NULL;
        if (len == 2 && !memcmp(f, "id", 2)) role = AVAZU_ROLE_ID, seen = &seen_id;
        else if (len == 5 && !memcmp(f, "click", 5)) role = AVAZU_ROLE_CLICK, seen = &seen_click;
        else if (len == 4 && !memcmp(f, "hour", 4)) role = AVAZU_ROLE_HOUR, seen = &seen_hour;
        else
            for (int c = 0; c < AVAZU_NCAT; c++)
                if (strlen(avazu_feature_names[2 + c]) == len && !memcmp(f, avazu_feature_names[2 + c], len))
                    role = 2 + c, seen = &seen_cat[c];
        if (!seen) {
            // What it likely is: no header at all, a stray comma, CR line ends.
            int digits = len > 0;
            for (size_t i = 0; i < len; i++) digits &= f[i] >= '0' && f[i] <= '9';
            const char *why = digits && f == first ? " (the first line looks like data: is the header line missing?)"
                              : first == end ? " (the first line is empty: the header must be the first line)"
                              : len == 0 ? " (an empty name: a doubled or trailing comma?)"
                              : memchr(f, '\r', len) ? " (it holds a carriage return: CR line ends? convert them to LF)"
                                                     : "";
            return lines_bad_set(bad, LINES_BAD_FIELDS, "unknown column '%s' in the header%s; %s", q, why, expect);
        }
        if (*seen) return lines_bad_set(bad, LINES_BAD_FIELDS, "column '%s' appears twice in the header", q);
        *seen = 1;
        h->role[h->ncols++] = (int8_t)role;
        if (p == end) break;
        p++;
    }
    if (!seen_click)
        return lines_bad_set(bad, LINES_BAD_FIELDS, "header has no 'click' column (the Avazu test file has no "
                             "labels; use the train file)");
    if (!seen_hour) return lines_bad_set(bad, LINES_BAD_FIELDS, "header has no 'hour' column; %s", expect);
    for (int c = 0; c < AVAZU_NCAT; c++)
        if (!seen_cat[c])
            return lines_bad_set(bad, LINES_BAD_FIELDS, "header has no '%s' column; %s", avazu_feature_names[2 + c],
                                 expect);
    return 0;
}

// Why s[0, n) is bad, for a failure in column col (0-based) spanning f[0, len).
static int avazu_bad(const avazu_header *h, const char *s, size_t n, int col, const char *f, size_t len,
                     lines_bad *bad) {
    const char *nul = memchr(s, 0, n);
    if (nul)
        return lines_bad_nul(s, nul, bad);
    size_t fields = 1;
    for (size_t i = 0; i < n; i++) fields += s[i] == ',';
    if (n == 0) return lines_bad_set(bad, LINES_BAD_FIELDS, "empty line, expected %d comma-separated fields", h->ncols);
    if (fields != (size_t)h->ncols)
        return lines_bad_set(bad, LINES_BAD_FIELDS, "%zu field%s, expected %d (as in the header line)", fields,
                             fields == 1 ? "" : "s", h->ncols);
    char q[80];
    lines_quote(q, sizeof q, f, len, 32);
    const char *own = h->role[col] == AVAZU_ROLE_CLICK ? "click" : "hour";
    if (len == strlen(own) && !memcmp(f, own, len)) // `cat a.csv b.csv` keeps b's header
        return lines_bad_set(bad, h->role[col] == AVAZU_ROLE_CLICK ? LINES_BAD_LABEL : LINES_BAD_HOUR,
                             "a header line again (%s '%s'), expected a data row: files joined with their headers?",
                             own, q);
    if (h->role[col] == AVAZU_ROLE_CLICK) return lines_bad_set(bad, LINES_BAD_LABEL, "click '%s', expected 0 or 1", q);
    return lines_bad_set(bad, LINES_BAD_HOUR, "hour '%s' is not a time, expected YYMMDDHH (e.g. 14102100)", q);
}

// hour YYMMDDHH -> (hour of day, day of week), or -1.
static int avazu_hour(const char *f, size_t len, uint64_t *hod, uint64_t *dow) {
    if (len != 8) return -1;
    int v[4];
    for (int i = 0; i < 4; i++) {
        unsigned a = (unsigned)(unsigned char)f[2 * i] - '0', b = (unsigned)(unsigned char)f[2 * i + 1] - '0';
        if (a > 9 || b > 9) return -1;
        v[i] = (int)(10 * a + b);
    }
    int wd = avazu_weekday(v[0], v[1], v[2]);
    if (wd < 0 || v[3] > 23) return -1;
    *hod = (uint64_t)v[3], *dow = (uint64_t)wd;
    return 0;
}

int avazu_parse(const avazu_header *h, const char *s, size_t n, uint8_t *label, uint64_t *keys, lines_bad *bad) {
    const char *p = s, *end = s + n;
    if (memchr(s, 0, n)) return avazu_bad(h, s, n, 0, s, 0, bad);
    for (int c = 0; c < h->ncols; c++) {
        const char *f = p;
        uint64_t x = FNV_OFFSET;
        while (p < end && *p != ',') x = (x ^ (unsigned char)*p) * FNV_PRIME, p++;
        size_t len = (size_t)(p - f);
        if (c < h->ncols - 1 ? p == end : p != end) return avazu_bad(h, s, n, c, f, len, bad);
        p++;
        int role = h->role[c];
        if (role >= 2) {
            keys[role] = avazu_hash_final(x);
        } else if (role == AVAZU_ROLE_CLICK) {
            if (len != 1 || (f[0] != '0' && f[0] != '1')) return avazu_bad(h, s, n, c, f, len, bad);
            *label = (uint8_t)(f[0] - '0');
        } else if (role == AVAZU_ROLE_HOUR) {
            if (avazu_hour(f, len, &keys[0], &keys[1])) return avazu_bad(h, s, n, c, f, len, bad);
        }
    }
    return 0;
}
