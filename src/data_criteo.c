#include "data_criteo.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "common.h"

// log1p of small integers, by far the most common dense values, from a table; and the value
// of each byte as a hex digit (0xff: not one).
#define LOG_TABLE 1024
static float log_table[LOG_TABLE];
static uint8_t hex_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
    for (int i = 0; i < LOG_TABLE; i++) log_table[i] = (float)log1p((double)i);
    for (int c = 0; c < 256; c++) {
        unsigned d = (unsigned)c - '0', l = (unsigned)(c | 0x20) - 'a';
        hex_table[c] = (uint8_t)(d < 10 ? d : l < 6 ? l + 10 : 0xff);
    }
}

float criteo_log1p(int64_t x) {
    pthread_once(&tables_once, tables_init);
    if (x <= 0) return 0.0f;
    return x < LOG_TABLE ? log_table[x] : (float)log1p((double)x);
}

static inline int hex_value(unsigned char c) { return hex_table[c] == 0xff ? -1 : hex_table[c]; }

// The common case of a categorical field: exactly 8 hex digits then a tab or the line's end
// (p[8] must be readable).  Returns 1 with the value, 0 to take the general path.
static inline int hex8(const unsigned char *p, uint32_t *v) {
    uint32_t a = hex_table[p[0]], b = hex_table[p[1]], c = hex_table[p[2]], d = hex_table[p[3]];
    uint32_t e = hex_table[p[4]], f = hex_table[p[5]], g = hex_table[p[6]], h = hex_table[p[7]];
    if (((a | b | c | d | e | f | g | h) & 0x80) || hex_table[p[8]] != 0xff) return 0;
    *v = a << 28 | b << 24 | c << 20 | d << 16 | e << 12 | f << 8 | g << 4 | h;
    return 1;
}

// Reads the digits d[0, n) as a magnitude that must fit in int64.
static int parse_magnitude(const char *d, size_t n, uint64_t *out) {
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned)(unsigned char)d[i] - '0';
        if (c >= 10 || x > ((uint64_t)INT64_MAX - c) / 10) return 0;
        x = x * 10 + c;
    }
    *out = x;
    return 1;
}

static const char *field_name(char *buf, size_t cap, int field) {
    if (field == 0) snprintf(buf, cap, "label");
    else if (field <= CRITEO_ND) snprintf(buf, cap, "I%d", field);
    else snprintf(buf, cap, "C%d", field - CRITEO_ND);
    return buf;
}

// Explains why s[0, n) is bad; `field` is where the fast scanner stopped (0-based).
static int criteo_bad(const char *s, size_t n, int field, lines_bad *bad) {
    const char *nul = memchr(s, 0, n);
    if (nul)
        return lines_bad_nul(s, nul, bad);
    if (n == 0)
        return lines_bad_set(bad, LINES_BAD_FIELDS, "empty line, expected %d tab-separated fields", CRITEO_FIELDS);
    size_t fields = 1;
    for (size_t i = 0; i < n; i++) fields += s[i] == '\t';
    if (fields != CRITEO_FIELDS) {
        lines_bad_set(bad, LINES_BAD_FIELDS, "%zu field%s, expected %d (label, I1-I13, C1-C26 separated by tabs)",
                      fields, fields == 1 ? "" : "s", CRITEO_FIELDS);
        // Criteo Kaggle's test.txt: the same columns without a label (a line cut short elsewhere
        // in a file is only a bad line)
        if (fields == CRITEO_FIELDS - 1)
            bad->first_line_hint = ": no label column (Kaggle's test.txt has no labels; prep train.txt, whose "
                                   "last week --split kaggle holds out)";
        size_t commas = 0;
        for (size_t i = 0; i < n; i++) commas += s[i] == ',';
        if (fields == 1 && commas >= 8) // an Avazu file (its header, or a row) given as Criteo
            bad->first_line_hint = ": comma-separated values, not Criteo's tabs: an Avazu CSV? (prep -f avazu)";
        return 1;
    }
    const char *f = s;
    for (int k = 0; k < field; k++) f = (const char *)memchr(f, '\t', (size_t)(s + n - f)) + 1;
    const char *fe = memchr(f, '\t', (size_t)(s + n - f));
    size_t len = fe ? (size_t)(fe - f) : (size_t)(s + n - f);
    char q[96], name[16];
    lines_quote(q, sizeof q, f, len, 32);
    field_name(name, sizeof name, field);
    if (field == 0 && len && ((f[0] | 0x20) >= 'a' && (f[0] | 0x20) <= 'z')) // a name where the label goes
        return lines_bad_set(bad, LINES_BAD_LABEL, "label '%s', expected 0 or 1: a header line? (Criteo files have "
                             "none; drop it, e.g. tail -n +2)", q);
    if (field == 0) return lines_bad_set(bad, LINES_BAD_LABEL, "label '%s', expected 0 or 1", q);
    if (field <= CRITEO_ND) {
        size_t neg = len && f[0] == '-';
        size_t digits = 0;
        while (neg + digits < len && f[neg + digits] >= '0' && f[neg + digits] <= '9') digits++;
        if (digits && neg + digits == len)
            return lines_bad_set(bad, LINES_BAD_INT, "%s '%s' is out of range, expected an integer within +-%lld", name,
                                 q, (long long)INT64_MAX);
        return lines_bad_set(bad, LINES_BAD_INT, "%s '%s' is not an integer, expected decimal digits with an "
                             "optional '-', or empty", name, q);
    }
    size_t hex = 0;
    while (hex < len && hex_value((unsigned char)f[hex]) >= 0) hex++;
    if (hex == len)
        return lines_bad_set(bad, LINES_BAD_CAT, "%s '%s' has %zu hex digits, expected at most 8", name, q, len);
    return lines_bad_set(bad, LINES_BAD_CAT, "%s '%s' is not a hex value, expected up to 8 hex digits, or empty",
                         name, q);
}

int criteo_parse(const char *s, size_t n, uint8_t *label, float *dense, uint64_t *keys, lines_bad *bad) {
    pthread_once(&tables_once, tables_init);
    const char *p = s, *end = s + n;
    if (n < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t') return criteo_bad(s, n, 0, bad);
    *label = (uint8_t)(p[0] - '0');
    p += 2;
    for (int i = 0; i < CRITEO_ND; i++) {
        int neg = *p == '-';
        const char *d = p + neg;
        p = d;
        uint64_t x = 0;
        unsigned c;
        while ((c = (unsigned)(unsigned char)*p - '0') < 10) x = x * 10 + c, p++;
        size_t nd = (size_t)(p - d);
        if (*p != '\t' || (neg && nd == 0)) return criteo_bad(s, n, 1 + i, bad);
        if (nd > 18 && !parse_magnitude(d, nd, &x)) return criteo_bad(s, n, 1 + i, bad); // may overflow
        if (neg) x = 0;
        dense[i] = x < LOG_TABLE ? log_table[x] : (float)log1p((double)x);
        p++;
    }
    for (int j = 0; j < CRITEO_F; j++) {
        const char *d = p;
        uint32_t v = 0;
        if (end - p >= 8 && hex8((const unsigned char *)p, &v)) {
            p += 8;
        } else {
            int h;
            while ((h = hex_value((unsigned char)*p)) >= 0) v = v << 4 | (uint32_t)h, p++;
        }
        size_t nd = (size_t)(p - d);
        if (nd > 8) return criteo_bad(s, n, 1 + CRITEO_ND + j, bad);
        if (j < CRITEO_F - 1) {
            if (*p != '\t') return criteo_bad(s, n, 1 + CRITEO_ND + j, bad);
            p++;
        } else if (p != end) {
            return criteo_bad(s, n, 1 + CRITEO_ND + j, bad);
        }
        keys[j] = nd ? v : CRITEO_MISSING;
    }
    return 0;
}
