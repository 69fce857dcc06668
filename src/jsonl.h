// jsonl: machine-readable metrics, one JSON object per line.
//
//   jsonl_begin(&j);  jsonl_str(&j, "event", "train");  jsonl_int(&j, "iter", t);
//   jsonl_num(&j, "loss", loss);  jsonl_end(&j, f);
//
// Non-finite numbers are written as null (JSON has no NaN).  Each line is flushed whole.
#ifndef BP_JSONL_H
#define BP_JSONL_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    char buf[4096];
    size_t len;
    int n;
} jsonl;

void jsonl_begin(jsonl *j);
void jsonl_str(jsonl *j, const char *key, const char *val);
void jsonl_int(jsonl *j, const char *key, int64_t val);
void jsonl_num(jsonl *j, const char *key, double val);
void jsonl_end(jsonl *j, FILE *f); // writes the line and flushes; f may be NULL (discards)

#endif
