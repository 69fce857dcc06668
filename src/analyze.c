// `bagpipe analyze`: access skew, unique rows per batch and reuse distances of a dataset.
#include "analyze.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cachesim.h"
#include "ckpt.h"
#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "jsonl.h"
#include "oracle.h"
#include "progress.h"

const double analyze_fracs[ANALYZE_NFRAC] = {0.001, 0.01, 0.1};

#define HIST_CAP 65536       // counts below this go to a histogram, larger ones to a sorted list

// ---------------------------------------------------------------------------------------------
// The pass over the lookups.  State per row: count in the low 32 bits, (last batch + 1) in the
// high 32 bits (0 = never looked up).
//
// Looking rows up in sample order would touch the state at random (hot rows are scattered over
// the id space, so even the hot set spans far more cache lines than it fills), and each lookup
// would wait on memory.  Instead each window of samples is cut by row range: its lookups are
// scattered into partitions of PART_ROWS consecutive rows (512 KiB of state, which stays in L2),
// keeping sample order inside each partition, and then applied partition by partition.  A row's
// state depends only on its own lookups in time order, and everything else is a sum, so the
// results are those of the plain sample-order pass.

#define PART_BITS 16
#define PART_ROWS (1u << PART_BITS)
#define WINDOW 32768 // samples per window
#define PREFETCH_AHEAD 24 // lookups ahead whose state is prefetched

typedef struct {
    const bp_dataset *ds;
    uint64_t begin, end;     // sample range
    uint32_t B;
    uint64_t *state;         // (total rows)
    const uint64_t *offset;  // (F) first row of each table in state
    uint32_t tables[BP_DS_MAX_SPARSE]; // this worker's tables
    uint32_t n_tables;
    uint32_t *uniq;          // (batches) unique rows per batch in this worker's tables
    uint64_t reuse[ANALYZE_REUSE_BUCKETS];
    uint64_t same, first;
    bp_progress *progress;   // worker 0 (the calling thread) draws the progress line
} pass_worker;

static void *pass_run(void *arg) {
    pass_worker *w = arg;
    const uint32_t F = w->ds->info.n_sparse, nt = w->n_tables, B = w->B;
    const uint32_t *sparse = w->ds->sparse;
    // Partitions: table k's rows [j PART_ROWS, (j+1) PART_ROWS) are partition pbase[k] + j.
    uint32_t pbase[BP_DS_MAX_SPARSE], col[BP_DS_MAX_SPARSE], np = 0;
    for (uint32_t k = 0; k < nt; k++) {
        col[k] = w->tables[k];
        pbase[k] = np;
        np += (uint32_t)((w->ds->info.card[col[k]] + PART_ROWS - 1) >> PART_BITS);
    }
    uint64_t *pstate = bp_xmalloc(np * sizeof *pstate); // (np) first state row of each partition
    for (uint32_t k = 0; k < nt; k++)
        for (uint64_t j = 0; pbase[k] + j < (k + 1 < nt ? pbase[k + 1] : np); j++)
            pstate[pbase[k] + j] = w->offset[col[k]] + (j << PART_BITS);
    uint32_t *pos = bp_xmalloc(((size_t)np + 1) * sizeof *pos); // (np + 1) partition starts in lk
    uint64_t *lk = bp_xmalloc((size_t)WINDOW * nt * sizeof *lk); // (WINDOW * nt) (row in partition) << 32 | batch + 1
    uint64_t reuse[ANALYZE_REUSE_BUCKETS] = {0}, same = 0, first = 0;
    uint64_t *state = w->state;
    uint32_t *uniq = w->uniq;

    for (uint64_t ws = w->begin; ws < w->end; ws += WINDOW) {
        const uint64_t we = BP_MIN(ws + WINDOW, w->end);
        memset(pos, 0, ((size_t)np + 1) * sizeof *pos);
        for (uint64_t i = ws; i < we; i++) {
            const uint32_t *row = sparse + i * F;
            for (uint32_t k = 0; k < nt; k++) pos[pbase[k] + (row[col[k]] >> PART_BITS) + 1]++;
        }
        for (uint32_t p = 0; p < np; p++) pos[p + 1] += pos[p];
        uint64_t b1 = (ws - w->begin) / B + 1, in_batch = (ws - w->begin) % B; // batch index + 1
        for (uint64_t i = ws; i < we; i++) {
            const uint32_t *row = sparse + i * F;
            for (uint32_t k = 0; k < nt; k++) {
                uint32_t id = row[col[k]];
                lk[pos[pbase[k] + (id >> PART_BITS)]++] = ((uint64_t)(id & (PART_ROWS - 1)) << 32) | b1;
            }
            if (++in_batch == B) in_batch = 0, b1++;
        }
        // pos[p] is now the end of partition p (= the start of p + 1).
        for (uint32_t p = 0, at = 0; p < np; at = pos[p], p++) {
            uint64_t *st = state + pstate[p];
            for (uint32_t x = at; x < pos[p]; x++) {
                // Rows of the big tables are mostly cold: ask for them well ahead.
                if (x + PREFETCH_AHEAD < pos[p]) __builtin_prefetch(st + (lk[x + PREFETCH_AHEAD] >> 32), 1);
                const uint32_t b = (uint32_t)lk[x];
                uint64_t *e = st + (lk[x] >> 32);
                uint64_t v = *e;
                uint32_t last = (uint32_t)(v >> 32);
                if (last == b) {
                    same++;
                } else {
                    uniq[b - 1]++;
                    if (last == 0) first++;
                    else reuse[63 - __builtin_clzll((uint64_t)(b - last))]++;
                }
                *e = ((uint64_t)b << 32) | (uint32_t)(v + 1);
            }
        }
        if (w->progress) bp_progress_update(w->progress, we - w->begin, NULL);
    }
    memcpy(w->reuse, reuse, sizeof reuse);
    w->same = same, w->first = first;
    free(pstate), free(pos), free(lk);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Top-k sums of counts: a histogram for counts below HIST_CAP and a list of the larger ones.

typedef struct {
    uint64_t *hist;  // (HIST_CAP) rows with each count
    uint32_t *big;   // counts >= HIST_CAP
    size_t nbig, capbig;
    uint64_t touched, accesses;
} count_hist;

static void hist_reset(count_hist *h) {
    memset(h->hist, 0, HIST_CAP * sizeof *h->hist);
    h->nbig = 0, h->touched = 0, h->accesses = 0;
}

static inline void hist_add(count_hist *h, uint32_t c) {
    if (c == 0) return;
    h->touched++, h->accesses += c;
    if (c < HIST_CAP) {
        h->hist[c]++;
        return;
    }
    if (h->nbig == h->capbig) {
        h->capbig = h->capbig ? 2 * h->capbig : 1024;
        h->big = bp_xrealloc(h->big, h->capbig * sizeof *h->big);
    }
    h->big[h->nbig++] = c;
}

static int u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Sum of the k largest counts.
static uint64_t hist_top(const count_hist *h, uint64_t k) {
    uint64_t sum = 0;
    for (size_t i = 0; i < h->nbig && k; i++, k--) sum += h->big[i];
    for (uint32_t c = HIST_CAP - 1; c > 0 && k; c--) {
        uint64_t take = h->hist[c] < k ? h->hist[c] : k;
        sum += take * c, k -= take;
    }
    return sum;
}

static void hist_skew(count_hist *h, uint64_t rows, analyze_skew *s) {
    if (h->nbig) qsort(h->big, h->nbig, sizeof *h->big, u32_desc);
    s->rows = rows, s->accesses = h->accesses, s->touched = h->touched;
    for (int j = 0; j < ANALYZE_NFRAC; j++) {
        uint64_t k = (uint64_t)ceil(analyze_fracs[j] * (double)rows);
        uint64_t kt = (uint64_t)ceil(analyze_fracs[j] * (double)h->touched);
        s->top_rows[j] = k, s->top_rows_touched[j] = kt;
        s->top_share[j] = h->accesses ? (double)hist_top(h, k) / (double)h->accesses : 0;
        s->top_share_touched[j] = h->accesses ? (double)hist_top(h, kt) / (double)h->accesses : 0;
    }
}

// ---------------------------------------------------------------------------------------------

int analyze_run(const bp_dataset *ds, const analyze_opts *o, analyze_result *r) {
    memset(r, 0, sizeof *r);
    const bp_ds_info *in = &ds->info;
    const uint32_t F = in->n_sparse;
    if (o->batch < 1) return bp_fail(BP_EINVAL, "--batch-size: must be at least 1, got %d", o->batch);
    if (o->threads < 1) return bp_fail(BP_EINVAL, "--threads: must be at least 1, got %d", o->threads);
    uint64_t begin, end;
    bp_ds_split_range(ds, o->split, &begin, &end);
    const uint64_t n = end - begin;
    if (n == 0) // as the cache simulation: all-zero tables would read as a dataset never looked up
        return bp_fail(BP_EINVAL, "analyze: %s has no rows in the %s split", ds->path, bp_split_name(o->split));
    if (n >= UINT32_MAX)
        return bp_fail(BP_ERANGE, "%s: %llu samples in the %s split; analyze counts in 32 bits (at most %u)", ds->path,
                       (unsigned long long)n, bp_split_name(o->split), UINT32_MAX - 1);
    const double t0 = bp_now();
    const uint64_t total = bp_ds_total_card(in);
    r->state_bytes = total * sizeof(uint64_t);
    uint64_t *state = bp_alloc_huge(r->state_bytes); // zeroed anonymous memory
    if (!state) {
        char b[32];
        return bp_fail(BP_ENOMEM, "%s: cannot allocate %s of per-row state (8 B x %llu table rows)", ds->path,
                       bp_fmt_bytes(b, sizeof b, (double)r->state_bytes), (unsigned long long)total);
    }
    uint64_t offset[BP_DS_MAX_SPARSE];
    offset[0] = 0;
    for (uint32_t f = 1; f < F; f++) offset[f] = offset[f - 1] + in->card[f - 1];

    r->samples = n, r->batch = (uint32_t)o->batch, r->n_tables = F;
    r->batches = (n + (uint64_t)o->batch - 1) / (uint64_t)o->batch;
    r->full_batches = n / (uint64_t)o->batch;
    const int T = o->threads < (int)F ? o->threads : (int)F;
    pass_worker *w = bp_xcalloc((size_t)T, sizeof *w);
    // Tables go round-robin to workers in order of size, so the large (cache-missing) ones spread.
    uint32_t order[BP_DS_MAX_SPARSE];
    for (uint32_t f = 0; f < F; f++) order[f] = f;
    for (uint32_t a = 1; a < F; a++)
        for (uint32_t b = a; b > 0 && in->card[order[b]] > in->card[order[b - 1]]; b--) {
            uint32_t t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    bp_progress pg;
    bp_progress_init(&pg, "analyze", "samples", n);
    for (int t = 0; t < T; t++) {
        w[t].ds = ds, w[t].begin = begin, w[t].end = end, w[t].B = (uint32_t)o->batch;
        w[t].state = state, w[t].offset = offset;
        w[t].uniq = bp_xcalloc(r->batches ? r->batches : 1, sizeof *w[t].uniq);
        w[t].progress = t == 0 ? &pg : NULL;
    }
    for (uint32_t k = 0; k < F; k++) {
        pass_worker *x = &w[k % (uint32_t)T];
        x->tables[x->n_tables++] = order[k];
    }
    pthread_t th[BP_DS_MAX_SPARSE];
    int started = 0, rc = 0;
    for (int t = 1; t < T; t++, started++)
        if (pthread_create(&th[t], NULL, pass_run, &w[t]) != 0) break;
    const double t_pass = bp_now();
    pass_run(&w[0]); // the calling thread does worker 0's share

    bp_progress_update(&pg, n, NULL);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    bp_progress_finish(&pg);
    if (started < T - 1) {
        // A worker could not start: do its tables here.
        for (int t = started + 1; t < T; t++) pass_run(&w[t]);
    }

    // Merge the per-worker counters in worker order (integers: exact whatever the split).
    uint32_t *uniq = w[0].uniq;
    for (int t = 0; t < T; t++) {
        if (t) for (uint64_t b = 0; b < r->batches; b++) uniq[b] += w[t].uniq[b];
        for (int j = 0; j < ANALYZE_REUSE_BUCKETS; j++) r->reuse[j] += w[t].reuse[j];
        r->reuse_same += w[t].same, r->reuse_first += w[t].first;
    }
    uint64_t nb = r->full_batches ? r->full_batches : r->batches;
    if (nb) {
        uint64_t sum = 0, mn = UINT64_MAX, mx = 0;
        for (uint64_t b = 0; b < nb; b++) {
            sum += uniq[b];
            mn = BP_MIN(mn, (uint64_t)uniq[b]);
            mx = BP_MAX(mx, (uint64_t)uniq[b]);
        }
        r->uniq_mean = (double)sum / (double)nb, r->uniq_min = mn, r->uniq_max = mx;
    }
    for (int t = 0; t < T; t++) free(w[t].uniq);
    free(w);

    r->pass_seconds = bp_now() - t_pass;
    const double t_skew = bp_now();
    // Skew from the counts: per table, and overall through one histogram of every row.
    r->table = bp_xcalloc(F, sizeof *r->table);
    count_hist ht = {bp_xmalloc(HIST_CAP * sizeof(uint64_t)), NULL, 0, 0, 0, 0};
    count_hist ha = {bp_xmalloc(HIST_CAP * sizeof(uint64_t)), NULL, 0, 0, 0, 0};
    hist_reset(&ha);
    for (uint32_t f = 0; f < F; f++) {
        hist_reset(&ht);
        const uint64_t *s = state + offset[f];
        for (uint64_t i = 0; i < in->card[f]; i++) {
            uint32_t c = (uint32_t)s[i];
            hist_add(&ht, c);
            hist_add(&ha, c);
        }
        hist_skew(&ht, in->card[f], &r->table[f]);
    }
    hist_skew(&ha, total, &r->overall);
    free(ht.hist), free(ht.big), free(ha.hist), free(ha.big);
    r->skew_seconds = bp_now() - t_skew;
    bp_free_huge(state, r->state_bytes);
    r->seconds = bp_now() - t0;
    return rc;
}

uint64_t analyze_batch_lookups(const analyze_result *r) {
    return (r->full_batches ? (uint64_t)r->batch : r->samples) * r->n_tables;
}

void analyze_result_free(analyze_result *r) {
    free(r->table);
    memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------------------------------------
// Output

static void print_skew_row(FILE *f, const char *name, const analyze_skew *s) {
    fprintf(f, "  %-12s %11llu %12llu %10llu ", name, (unsigned long long)s->rows, (unsigned long long)s->accesses,
            (unsigned long long)s->touched);
    for (int j = 0; j < ANALYZE_NFRAC; j++) fprintf(f, " %6.1f%%", 100 * s->top_share[j]);
    fprintf(f, "   ");
    for (int j = 0; j < ANALYZE_NFRAC; j++) fprintf(f, " %6.1f%%", 100 * s->top_share_touched[j]);
    fprintf(f, "\n");
}

static int reuse_last_bucket(const analyze_result *r) {
    int last = -1;
    for (int j = 0; j < ANALYZE_REUSE_BUCKETS; j++)
        if (r->reuse[j]) last = j;
    return last;
}

void analyze_print_text(FILE *f, const analyze_result *r, const char *path, bp_split split) {
    char b[32], secs[32], rate[32];
    const uint64_t lookups = r->samples * r->n_tables;
    fprintf(f, "analyze %s: %s split, %llu samples, %u tables, %llu rows in all\n", path, bp_split_name(split),
            (unsigned long long)r->samples, r->n_tables, (unsigned long long)r->overall.rows);
    fprintf(f, "  %s (%s samples/s); per-row state 8 B x %llu rows = %s\n\n",
            bp_fmt_seconds(secs, sizeof secs, r->seconds),
            bp_fmt_rate(rate, sizeof rate, r->seconds > 0 ? r->samples / r->seconds : 0),
            (unsigned long long)r->overall.rows, bp_fmt_bytes(b, sizeof b, (double)r->state_bytes));

    fprintf(f, "skew: share of lookups taken by the hottest rows, of all rows | of the rows touched\n");
    fprintf(f, "  %-12s %11s %12s %10s  %7s %7s %7s    %7s %7s %7s\n", "", "rows", "lookups", "touched", "0.1%", "1%",
            "10%", "0.1%", "1%", "10%");
    print_skew_row(f, "all tables", &r->overall);
    for (uint32_t t = 0; t < r->n_tables; t++) {
        char name[24];
        snprintf(name, sizeof name, "table %u", t);
        print_skew_row(f, name, &r->table[t]);
    }

    const double bf = (double)analyze_batch_lookups(r);
    if (r->full_batches)
        fprintf(f, "\nunique rows per batch (B = %u: %.0f lookups)\n", r->batch, bf);
    else
        fprintf(f, "\nunique rows per batch (B = %u, but the split's %llu samples are one partial batch: %.0f lookups)\n",
                r->batch, (unsigned long long)r->samples, bf);
    fprintf(f, "  mean %.1f (%.2f%%), min %llu (%.2f%%), max %llu (%.2f%%) over %llu %s\n", r->uniq_mean,
            100 * r->uniq_mean / bf, (unsigned long long)r->uniq_min, 100 * (double)r->uniq_min / bf,
            (unsigned long long)r->uniq_max, 100 * (double)r->uniq_max / bf,
            (unsigned long long)(r->full_batches ? r->full_batches : r->batches),
            r->full_batches ? "full batches" : "partial batch");

    fprintf(f, "\nreuse distance: batches since the previous lookup of the same row\n");
    fprintf(f, "  %-22s %14s %8s %11s\n", "distance", "lookups", "share", "cumulative");
    double cum = 0;
    const double L = lookups ? (double)lookups : 1;
    cum += r->reuse_same / L;
    fprintf(f, "  %-22s %14llu %7.2f%% %10.2f%%\n", "0 (same batch)", (unsigned long long)r->reuse_same,
            100 * r->reuse_same / L, 100 * cum);
    int last = reuse_last_bucket(r);
    for (int j = 0; j <= last; j++) {
        char range[48];
        uint64_t lo = (uint64_t)1 << j, hi = ((uint64_t)2 << j) - 1;
        if (lo == hi) snprintf(range, sizeof range, "%llu", (unsigned long long)lo);
        else snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)lo, (unsigned long long)hi);
        cum += r->reuse[j] / L;
        fprintf(f, "  %-22s %14llu %7.2f%% %10.2f%%\n", range, (unsigned long long)r->reuse[j], 100 * r->reuse[j] / L,
                100 * cum);
    }
    cum += r->reuse_first / L;
    fprintf(f, "  %-22s %14llu %7.2f%% %10.2f%%\n", "never before", (unsigned long long)r->reuse_first,
            100 * r->reuse_first / L, 100 * cum);
}

static void json_skew(FILE *f, const analyze_skew *s) {
    fprintf(f, "{\"rows\": %llu, \"lookups\": %llu, \"touched\": %llu, \"top\": [", (unsigned long long)s->rows,
            (unsigned long long)s->accesses, (unsigned long long)s->touched);
    for (int j = 0; j < ANALYZE_NFRAC; j++)
        fprintf(f, "%s{\"frac\": %g, \"rows\": %llu, \"share\": %.6f, \"rows_of_touched\": %llu, \"share_of_touched\": %.6f}",
                j ? ", " : "", analyze_fracs[j], (unsigned long long)s->top_rows[j], s->top_share[j],
                (unsigned long long)s->top_rows_touched[j], s->top_share_touched[j]);
    fprintf(f, "]}");
}

void analyze_print_json(FILE *f, const analyze_result *r, const char *path, bp_split split) {
    fprintf(f, "{\"dataset\": ");
    jsonl_fput_string(f, path);
    fprintf(f, ", \"split\": \"%s\", \"samples\": %llu, \"batch_size\": %u, \"batches\": %llu, \"tables\": %u, "
               "\"seconds\": %.3f, \"state_bytes\": %llu,\n \"overall\": ",
            bp_split_name(split), (unsigned long long)r->samples, r->batch, (unsigned long long)r->batches,
            r->n_tables, r->seconds, (unsigned long long)r->state_bytes);
    json_skew(f, &r->overall);
    fprintf(f, ",\n \"per_table\": [");
    for (uint32_t t = 0; t < r->n_tables; t++) {
        fprintf(f, "%s\n  ", t ? "," : "");
        json_skew(f, &r->table[t]);
    }
    const double bf = (double)analyze_batch_lookups(r);
    fprintf(f, "],\n \"unique_per_batch\": {\"batches\": %llu, \"mean\": %.3f, \"min\": %llu, \"max\": %llu, "
               "\"lookups_per_batch\": %.0f, \"mean_frac\": %.6f, \"min_frac\": %.6f, \"max_frac\": %.6f},\n",
            (unsigned long long)(r->full_batches ? r->full_batches : r->batches), r->uniq_mean,
            (unsigned long long)r->uniq_min, (unsigned long long)r->uniq_max, bf, r->uniq_mean / bf,
            (double)r->uniq_min / bf, (double)r->uniq_max / bf);
    fprintf(f, " \"reuse\": {\"same_batch\": %llu, \"never_before\": %llu, \"buckets\": [",
            (unsigned long long)r->reuse_same, (unsigned long long)r->reuse_first);
    int last = reuse_last_bucket(r);
    for (int j = 0; j <= last; j++)
        fprintf(f, "%s{\"min\": %llu, \"max\": %llu, \"lookups\": %llu}", j ? ", " : "", (unsigned long long)1 << j,
                ((unsigned long long)2 << j) - 1, (unsigned long long)r->reuse[j]);
    fprintf(f, "]}}\n");
}

// ---------------------------------------------------------------------------------------------
// Command

int cmd_analyze(int argc, char **argv) {
    int batch, split, json, threads;
    int64_t cache, max_rows, iters, start;
    int window, trainers, prefetch, dim, parts;
    const char *sweep_c, *sweep_w, *plot_dir;
    const cli_opt opts[] = {
        CLI_GROUP("the access analysis (the default: skew, unique rows per batch, reuse distances) and the cache "
                  "simulation"),
        CLI_INT("batch-size", 'b', &batch, 2048, 1, 1 << 24,
                "samples per (global) batch; a split smaller than this is one partial batch"),
        CLI_CHOICE("split", 0, &split, 0, "train|val|test|all", "which samples, in training order"),
        CLI_FLAG("json", 0, &json, "print JSON instead of tables"),
        CLI_INT("threads", 't', &threads, 0, 0, 64,
                "worker threads (0: one per core); the simulation's lookahead planner uses at most 2"),
        CLI_GROUP("cache simulation (--cache ROWS turns it on; the flags below need it)"),
        CLI_I64("cache", 0, &cache, 0, 1, (int64_t)CACHESIM_MAX_CACHE,
                "simulate caches of this many rows per trainer: none, static, LRU and lookahead compared"),
        CLI_INT("lookahead", 0, &window, 32, 0, ORACLE_MAX_WINDOW,
                "lookahead window W in batches (the default is train's, so that the two agree)"),
        CLI_INT("trainers", 0, &trainers, 4, 1, ORACLE_MAX_TRAINERS, "trainers T sharing each global batch"),
        CLI_INT("prefetch", 0, &prefetch, 2, 0, 255, "lookahead: iterations between a fetch and its use (as train's)"),
        CLI_INT("oracle-parts", 0, &parts, 1, 1, 2,
                "lookahead: the planner in one part, or split by tables in 2 (as train's --oracle-parts; its "
                "smallest cache can differ by a few rows)"),
        CLI_INT("dim", 0, &dim, 16, 1, 1 << 16, "embedding dimension D (row bytes = 4 D) for the byte counts"),
        CLI_STR("sweep-cache", 0, &sweep_c, NULL, "also simulate these cache sizes (a,b,c)"),
        CLI_STR("sweep-lookahead", 0, &sweep_w, NULL, "also run the lookahead policy with these windows (a,b,c)"),
        CLI_I64("rows", 0, &max_rows, 0, 0, INT64_MAX, "simulate only the first N rows of the split (0: all)"),
        CLI_I64("iters", 'n', &iters, 0, 0, INT64_MAX,
                "simulate N iterations as train takes them: the split's whole batches in turn, across epochs, "
                "its partial last batch dropped (0: one pass, with it)"),
        CLI_I64("start-iter", 0, &start, 0, 0, INT64_MAX,
                "with --iters N: simulate a run resumed at this iteration (train --resume): its batches up to N, "
                "the caches empty at the start"),
        CLI_STR("plot-dir", 0, &plot_dir, NULL, "write JSON, CSV and gnuplot charts into this directory"),
        CLI_END,
    };
    char **pos;
    int npos;
    cli_given given;
    int rc = cli_parse_given("bagpipe analyze", "[options] DATASET", opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    cli_warn_overridden(&given);
    if (npos != 1) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "analyze: expected one dataset file (see 'bagpipe analyze --help')"));
    }
    // The flags after --cache in the table are the simulation's own, which only --cache turns on.
    const int simulate = cli_was_given(&given, opts, "cache");
    for (size_t k = 0, past_cache = 0; !simulate && opts[k].type != CLI_T_END; k++) {
        if (opts[k].type == CLI_T_GROUP) continue;
        if (past_cache && cli_was_given(&given, opts, opts[k].name)) {
            free(pos);
            return cmd_exit(bp_fail(BP_EUSAGE, "--%s: a cache-simulation flag; it needs --cache ROWS (see 'bagpipe "
                                    "analyze --help')", opts[k].name));
        }
        past_cache = past_cache || strcmp(opts[k].name, "cache") == 0;
    }
    static const bp_split splits[] = {BP_SPLIT_TRAIN, BP_SPLIT_VAL, BP_SPLIT_TEST, BP_SPLIT_ALL};
    threads = bp_threads_resolve(threads, 64);
    if (simulate) {
        if (trainers > batch) { // as train refuses it: some trainers would get no samples
            free(pos);
            return cmd_exit(bp_fail(BP_EUSAGE, "--trainers %d: more trainers than samples in a batch (--batch-size %d)",
                                    trainers, batch));
        }
        // The chart directory is checked now, not after a simulation that may take minutes.
        if (plot_dir && (rc = ckpt_dir_check(plot_dir))) {
            free(pos);
            return cmd_exit(bp_fail(rc, "--plot-dir %s", bp_errmsg(rc)));
        }
        cachesim_cmd_opts so = {.path = pos[0], .split = splits[split], .batch = batch, .json = json,
                                .threads = threads, .cache = (uint64_t)cache, .rows = (uint64_t)max_rows,
                                .window = window, .trainers = trainers, .prefetch = prefetch, .dim = dim,
                                .parts = parts, .iters = (uint64_t)iters, .start = (uint64_t)start,
                                .sweep_cache = sweep_c, .sweep_lookahead = sweep_w, .plot_dir = plot_dir};
        rc = cachesim_cmd(&so);
        free(pos);
        return cmd_exit(rc);
    }
    analyze_opts o = {batch, splits[split], threads};
    bp_dataset ds;
    rc = cmd_open_dataset(&ds, pos[0]);
    if (!rc) {
        analyze_result r;
        rc = analyze_run(&ds, &o, &r);
        if (!rc) {
            if (json) analyze_print_json(stdout, &r, pos[0], o.split);
            else analyze_print_text(stdout, &r, pos[0], o.split);
        }
        analyze_result_free(&r);
        bp_ds_close(&ds);
    }
    free(pos);
    return cmd_exit(rc);
}
