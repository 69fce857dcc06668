// jsonl: machine-readable metrics, one JSON object per line.
//
//   jsonl_begin(&j);  jsonl_str(&j, "event", "train");  jsonl_int(&j, "iter", t);
//   jsonl_num(&j, "loss", loss);  jsonl_end(&j, f);
//
// Non-finite numbers are written as null (JSON has no NaN).  Each line is flushed whole and
// checked: the first write error (a full disk...) is reported naming the file and its flag, and
// returned by that jsonl_end, every later one and jsonl_close, so the run stops on it.
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
// Writes s to f as a JSON string literal: quoted, with '"', backslash and control characters escaped.
void jsonl_fput_string(FILE *f, const char *s);
// A JSON-lines file, opened for appending.  Zeroed (or opened with path NULL) it discards.
typedef struct {
    FILE *f;
    char *path;
    const char *flag; // the flag that named it, for messages ("--metrics")
    int created;      // this open created the file: removed at close if still empty
    int rc;           // the first write error, or 0
    int is_stdout;    // the path is this process's standard output: f is stdout, not closed
    char *first;      // jsonl_first's line, written before the next one, or NULL
} jsonl_file;

// A line (j, ended here) that goes into jf just before its next line, if one comes: a file that
// gets no other line stays as it was (a run that fails at once adds nothing).
void jsonl_first(jsonl *j, jsonl_file *jf);

int jsonl_open(jsonl_file *jf, const char *flag, const char *path);
// Refuses to append to an existing regular file that is not JSON lines (its first byte is not
// '{'): a dataset, a model part or a raw log named by mistake would be damaged by the lines.
// jsonl_open checks it too; commands call it before any work.  path NULL is fine.
int jsonl_check(const char *flag, const char *path);
// In a launcher whose stdout is the file at path (-m FILE > FILE): tells the processes it starts,
// whose stdout is a pipe to it, that path is their stdout too (JSONL_ENV_STDOUT), so that the
// lines go through it rather than through a second open of FILE.
#define JSONL_ENV_STDOUT "BAGPIPE_STDOUT_IS"
void jsonl_pass_stdout(const char *path);
// Flushes and closes; returns rc, the caller's own error, if set (a failure of the close then
// does not replace its message), else the first write error (0 if none).  Safe on a zeroed or
// closed file.
int jsonl_close(jsonl_file *jf, int rc);
int jsonl_end(jsonl *j, jsonl_file *jf); // writes the line and flushes; jf NULL discards

#endif
