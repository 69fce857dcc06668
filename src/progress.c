#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

void bp_progress_init(bp_progress *p, const char *what, const char *unit, uint64_t total) {
    // "0" disables, "1" forces it on stderr, "stdout" forces it there; unset or anything else: on
    // when stderr is a terminal ("true" used to turn it off).
    const char *env = getenv("BAGPIPE_PROGRESS");
    p->what = what, p->unit = unit, p->total = total, p->done = 0, p->base = 0;
    p->t_start = p->t_last = bp_now();
    p->out = env && strcmp(env, "stdout") == 0 ? stdout : stderr;
    const int off = env && strcmp(env, "0") == 0, forced = p->out == stdout || (env && strcmp(env, "1") == 0);
    p->enabled = !off && (forced || isatty(STDERR_FILENO));
    p->drawn = 0;
}

void bp_progress_start_at(bp_progress *p, uint64_t done) { p->base = p->done = done; }

static const char *si(char *buf, size_t cap, double x) {
    if (x >= 1e9) snprintf(buf, cap, "%.2fG", x / 1e9);
    else if (x >= 1e6) snprintf(buf, cap, "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(buf, cap, "%.1fk", x / 1e3);
    else snprintf(buf, cap, "%.0f", x);
    return buf;
}

int bp_progress_due(const bp_progress *p, uint64_t done) {
    return p->enabled && (!p->drawn || bp_now() - p->t_last >= 0.1 || (p->total && done >= p->total));
}

void bp_progress_update(bp_progress *p, uint64_t done, const char *note) {
    p->done = done;
    if (!p->enabled) return;
    double now = bp_now();
    if (p->drawn && now - p->t_last < 0.1 && (p->total == 0 || done < p->total)) return;
    p->t_last = now;
    double el = now - p->t_start, rate = el > 0 && done > p->base ? (double)(done - p->base) / el : 0;
    char a[16], b[16], r[16];
    if (p->total) {
        double frac = (double)done / (double)p->total;
        int filled = (int)(frac * 24);
        char bar[25];
        for (int i = 0; i < 24; i++) bar[i] = i < filled ? '#' : '.';
        bar[24] = 0;
        double eta = rate > 0 ? (double)(p->total - BP_MIN(done, p->total)) / rate : 0;
        fprintf(p->out, "\r%s [%s] %5.1f%% %s/%s %s %s/s eta %02d:%02d%s%s\033[K", p->what, bar, 100 * frac,
                si(a, sizeof a, (double)done), si(b, sizeof b, (double)p->total), p->unit, si(r, sizeof r, rate),
                (int)(eta / 60), (int)eta % 60, note ? "  " : "", note ? note : "");
    } else {
        fprintf(p->out, "\r%s %s %s %s/s%s%s\033[K", p->what, si(a, sizeof a, (double)done), p->unit,
                si(r, sizeof r, rate), note ? "  " : "", note ? note : "");
    }
    fflush(p->out);
    p->drawn = 1;
}

void bp_progress_finish(bp_progress *p) {
    if (p->enabled && p->drawn) fprintf(p->out, "\r\033[K"), fflush(p->out);
    p->drawn = 0;
}

double bp_progress_elapsed(const bp_progress *p) { return bp_now() - p->t_start; }
