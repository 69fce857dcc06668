#include "jsonl.h"

#include <math.h>
#include <string.h>

#include "common.h"

void jsonl_begin(jsonl *j) {
    j->buf[0] = '{';
    j->len = 1;
    j->n = 0;
}

static void put(jsonl *j, const char *s, size_t n) {
    BP_ASSERTF(j->len + n + 3 < sizeof j->buf, "jsonl line too long");
    memcpy(j->buf + j->len, s, n);
    j->len += n;
}

static void put_string(jsonl *j, const char *s) {
    put(j, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, put(j, esc, 2);
        else if (c < 0x20) put(j, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
        else put(j, (const char *)&c, 1);
    }
    put(j, "\"", 1);
}

static void put_key(jsonl *j, const char *key) {
    if (j->n++) put(j, ",", 1);
    put_string(j, key);
    put(j, ":", 1);
}

void jsonl_str(jsonl *j, const char *key, const char *val) {
    put_key(j, key);
    put_string(j, val);
}

void jsonl_int(jsonl *j, const char *key, int64_t val) {
    char b[32];
    put_key(j, key);
    put(j, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)val));
}

void jsonl_num(jsonl *j, const char *key, double val) {
    char b[40];
    put_key(j, key);
    if (!isfinite(val)) put(j, "null", 4);
    else put(j, b, (size_t)snprintf(b, sizeof b, "%.9g", val));
}

void jsonl_end(jsonl *j, FILE *f) {
    put(j, "}\n", 2);
    if (f) {
        fwrite(j->buf, 1, j->len, f);
        fflush(f);
    }
}
