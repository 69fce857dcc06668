// progress: a one-line progress display on a terminal (rate, ETA, a caller's note), silent when
// stderr is not a terminal or when disabled.  Redraws at most 10 times a second.  The environment
// decides: BAGPIPE_PROGRESS=0 disables it, =1 draws on stderr even when it is not a terminal,
// =stdout draws on stdout (the launcher of a distributed job sets it: the rank's stdout and stderr
// reach it through separate pipes, and only one stream keeps the line in order with what the rank
// prints; the launcher draws it on its own stderr).
#ifndef BP_PROGRESS_H
#define BP_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *what;  // "prep", "train", ...
    const char *unit;  // "rows", "samples", ...
    uint64_t total;    // 0 when unknown
    uint64_t done;
    uint64_t base;     // done at the start (a resumed run): the rate and ETA count from it
    double t_start, t_last;
    FILE *out;         // stderr, or stdout (BAGPIPE_PROGRESS=stdout)
    int enabled;
    int drawn;
} bp_progress;

void bp_progress_init(bp_progress *p, const char *what, const char *unit, uint64_t total);
// The count the work starts from (a resumed run's first iteration): the rate and the ETA are
// those of the work done since, not of the whole count over this run's time.
void bp_progress_start_at(bp_progress *p, uint64_t done);
// Sets done and redraws if due; note (may be NULL) is appended, e.g. "loss 0.4512".
void bp_progress_update(bp_progress *p, uint64_t done, const char *note);
// Whether bp_progress_update(p, done, ...) would redraw now (a caller's note can be skipped if not).
int bp_progress_due(const bp_progress *p, uint64_t done);
// Clears the line (the caller prints its own summary).
void bp_progress_finish(bp_progress *p);
// Elapsed seconds since init.
double bp_progress_elapsed(const bp_progress *p);

#endif
