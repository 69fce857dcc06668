// prep: raw Criteo / Avazu logs -> binary dataset.  See data_prep.h and docs/data.md.
#include "data_prep.h"

#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "data_avazu.h"
#include "data_criteo.h"
#include "data_vocab.h"
#include "dist.h"
#include "nn.h"
#include "progress.h"

enum { PASS_COUNT, PASS_WRITE };

// Lines are read in chunks of at most CHUNK_LINES lines or about CHUNK_TEXT bytes of text, copied
// out of the reader by a thread of their own (with more than one thread) up to CHUNK_RING chunks
// ahead, and parsed by every thread into the rows gathered for the writer (up to PREP_CHUNK,
// handed on early when a chunk might not fit).  The ring adds ~17 MB to prep's memory.
enum { CHUNK_LINES = 16384, CHUNK_TEXT = 4 << 20, PARSE_BLOCK = 256, CHUNK_RING = 4 };
enum { ENTRY_LINE = 0, ENTRY_LONG = 1 }; // a line to parse, or one over LINES_MAX (skipped, no text)

// Consecutive lines of one input, from line first_line on.
typedef struct {
    char *text;             // each line followed by '\n' (the parsers' sentinel)
    size_t text_len;
    size_t n;               // entries
    size_t *off;            // (CHUNK_LINES) where entry i's text starts
    uint32_t *len;          // its length
    uint8_t *kind;          // ENTRY_*
    uint64_t *end;          // the input's text position after entry i (bytes_text; --max-rows)
    uint64_t first_line;
    uint64_t bytes_file;    // the reader's bytes_file after the last entry (progress)
    int end_rc;             // after the entries: 0 more lines follow, 1 the end of the input, < 0 a
    char err[256];          //   read error, whose message is err (read on another thread, maybe)
} prep_chunk;

typedef struct {
    const prep_opts *o;
    prep_stats st;
    uint32_t F, Nd;
    vocab *voc;            // (F) frequency mapping; NULL when hashing
    uint8_t *label;        // (PREP_CHUNK)
    float *dense;          // (PREP_CHUNK, Nd)
    uint64_t *keys;        // (PREP_CHUNK, F) values before id mapping
    uint32_t *ids;         // (PREP_CHUNK, F)
    size_t n;              // rows in the current chunk
    int pass;
    int count_bad;         // this pass records bad lines (the first pass does)
    int shown_bad;         // bad lines already shown with --skip-bad
    uint64_t rows;         // rows parsed in this pass
    uint64_t *file_rows;   // (n_inputs) rows per input in this pass
    int files_read;        // inputs reached in this pass (--max-rows may stop early)
    uint64_t total_bytes;  // size of all inputs on disk (progress)
    uint64_t bytes_before; // file bytes of the inputs finished in this pass
    bp_progress prog;
    avazu_header hdr;
    bp_ds_writer *w;
    bp_ds_info shape;      // the dataset's template (bp_ds_rows_summarize)
    uint64_t **seen;       // --compact: (F) per 64 residues a word of those present, and (after the
                           // pass) a word of how many are present before them: one line for both
    int threads;           // parts of each parallel step (nn_pool_run)
    prep_chunk chunk[CHUNK_RING]; // the chunk parsed and those read ahead of it (chunk_feed)
    size_t at;             // a chunk's line i is parsed into row at + i of label, dense and keys
    uint8_t *bad;          // (CHUNK_LINES) per line of the chunk parsed: 0, or 1 + the lines_bad kind
                           // of a bad line (its message is made again, by parsing the line once
                           // more, when it is shown)
} prep_ctx;

void prep_opts_default(prep_opts *o) {
    memset(o, 0, sizeof *o);
    o->format = PREP_CRITEO;
    o->min_count = 1;
    o->split = PREP_SPLIT_NONE;
    o->seed = 1;
}

// Whether --sub-sample-rate may drop rows of input fi: not the last day, val and test, with --split days.
static int sub_train_input(const prep_opts *o, int fi) {
    return !(o->split == PREP_SPLIT_DAYS && fi == o->n_inputs - 1);
}

// The draw that drops a no-click train row: from (seed, fi, line) alone.
static int sub_drawn(const prep_opts *o, int fi, uint64_t line) {
    const uint64_t h = bp_hash2(bp_hash2(o->seed, 0x5355425341ull /* "SUBSA" */), ((uint64_t)fi << 40) ^ line);
    return (double)(h >> 11) * 0x1.0p-53 < o->sub_sample_rate;
}

int prep_keeps(const prep_opts *o, int fi, uint64_t line, int label) {
    return label || !(o->sub_sample_rate > 0) || !sub_train_input(o, fi) || !sub_drawn(o, fi, line);
}

int prep_split_parse(prep_opts *o, const char *s) {
    if (!strcmp(s, "none")) o->split = PREP_SPLIT_NONE;
    else if (!strcmp(s, "kaggle")) o->split = PREP_SPLIT_KAGGLE;
    else if (!strcmp(s, "days")) o->split = PREP_SPLIT_DAYS;
    else if (!strncmp(s, "ratio:", 6)) {
        const char *p = s + 6;
        double sum = 0;
        for (int i = 0; i < 3; i++) {
            char *end;
            errno = 0;
            double x = cli_strtod(p, &end);
            if (end == p || errno || !(x >= 0 && x <= 1) || *end != (i < 2 ? ',' : '\0'))
                return bp_fail(BP_EUSAGE, "--split: '%s' is not ratio:A,B,C with three fractions in [0, 1] "
                               "(e.g. ratio:0.8,0.1,0.1)", s);
            o->ratio[i] = x;
            sum += x;
            p = end + 1;
        }
        if (sum < 1 - 1e-6 || sum > 1 + 1e-6)
            return bp_fail(BP_EUSAGE, "--split: the fractions of '%s' add up to %g, expected 1", s, sum);
        o->split = PREP_SPLIT_RATIO;
    } else {
        return bp_fail(BP_EUSAGE, "--split: expected none, kaggle, days or ratio:A,B,C, got '%s'", s);
    }
    return 0;
}

void prep_split_sizes(const prep_opts *o, uint64_t rows, const uint64_t *rows_per_file, int n_files,
                      uint64_t split[3]) {
    split[0] = rows, split[1] = split[2] = 0;
    switch (o->split) {
    case PREP_SPLIT_NONE: return;
    case PREP_SPLIT_RATIO: bp_ds_split_ratio(rows, o->ratio, split); return;
    case PREP_SPLIT_KAGGLE: bp_ds_split_kaggle(rows, split); return;
    case PREP_SPLIT_DAYS: bp_ds_split_last(rows, n_files > 0 ? rows_per_file[n_files - 1] : 0, split); return;
    }
}

// ---------------------------------------------------------------------------------------------

// Checks that the output can be replaced and its directory (that of the file a symlink points
// to) exists and is writable, for a clear message up front.
static int prep_check_out(const char *out) {
    char *copy;
    int rc = bp_afile_target(out, &copy);
    if (rc) return rc;
    const char *dir = dirname(copy);
    struct stat st;
    if (stat(dir, &st) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot write the output: directory '%s' %s", out, dir,
                     errno == ENOENT ? "does not exist" : strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = bp_fail(BP_EIO, "%s: cannot write the output: '%s' is not a directory", out, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot write the output: directory '%s' is not writable (%s)", out, dir,
                     strerror(errno));
    free(copy);
    return rc;
}

// A vocabulary that ran out of memory (vocab_*'s message): which table, and what needs none.
static int vocab_fail(const prep_ctx *c, uint32_t f, int rc) {
    char table[48], held[32];
    if (c->o->format == PREP_AVAZU) snprintf(table, sizeof table, "'%s'", avazu_feature_names[f]);
    else snprintf(table, sizeof table, "C%u", f + 1);
    uint64_t bytes = 0;
    for (uint32_t g = 0; g < c->F; g++) bytes += vocab_mem_bytes(&c->voc[g]);
    return bp_fail(rc, "table %s: %s, with %s held by the vocabularies of all tables; hashed ids need none "
                   "(--max-ind-range N: 10000000 is the DLRM reference's for Terabyte)%s", table, bp_errmsg(rc),
                   bp_fmt_bytes(held, sizeof held, (double)bytes), rc == BP_ENOMEM ? ", or give prep more memory" : "");
}

// The values of one table of a chunk of rows, counted or mapped to ids, as a part of a parallel
// step: the parts take tables in turn, the largest vocabularies first (their lookups miss the
// caches most), and each table's work is what one thread did alone.
typedef struct {
    prep_ctx *c;
    size_t n;
    uint32_t order[BP_DS_MAX_SPARSE];
    _Atomic uint32_t next;
    int rc[BP_DS_MAX_SPARSE];        // vocab_count's failure, per table
    size_t mapped[BP_DS_MAX_SPARSE]; // vocab_map's rows mapped, per table
    char err[BP_DS_MAX_SPARSE][256]; // the failure's message (bp_fail's text is the thread's own)
} table_job;

static void table_part(void *ctx, int p, int parts) {
    (void)p, (void)parts;
    table_job *j = ctx;
    prep_ctx *c = j->c;
    const uint32_t F = c->F;
    for (uint32_t k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < F;) {
        const uint32_t f = j->order[k];
        if (c->pass == PASS_COUNT) {
            if ((j->rc[f] = vocab_count(&c->voc[f], c->keys + f, F, j->n)) != 0)
                snprintf(j->err[f], sizeof j->err[f], "%s", bp_errmsg(j->rc[f]));
        } else {
            j->mapped[f] = vocab_map(&c->voc[f], c->keys + f, F, j->n, c->ids + f, F);
        }
    }
}

// Tables by distinct values so far, most first (ties by index).
static int cmp_distinct_desc(const void *a, const void *b, void *ctx) {
    const vocab *voc = ctx;
    const uint32_t f = *(const uint32_t *)a, g = *(const uint32_t *)b;
    const uint64_t x = vocab_distinct(&voc[f]), y = vocab_distinct(&voc[g]);
    return x != y ? (x < y) - (x > y) : (f > g) - (f < g);
}

// Hashed ids of rows [i0, i1) (every table), a part of a parallel step.
typedef struct {
    prep_ctx *c;
    size_t n;
} hash_job;

static void hash_part(void *ctx, int p, int parts) {
    const hash_job *j = ctx;
    const prep_ctx *c = j->c;
    const uint64_t N = c->o->max_ind_range;
    const size_t F = c->F, i0 = (size_t)nn_part_begin((long)j->n, p, parts) * F,
                 i1 = (size_t)nn_part_begin((long)j->n, p + 1, parts) * F;
    if (N <= UINT32_MAX) {
        // Keys below 2^32 (all Criteo values but the missing one) take Lemire's remainder
        // by multiplication: k mod N = ((M k mod 2^64) N) >> 64 with M = ceil(2^64 / N).
        const uint64_t M = UINT64_MAX / N + 1;
        for (size_t i = i0; i < i1; i++) {
            uint64_t k = c->keys[i];
            c->ids[i] = k <= UINT32_MAX ? (uint32_t)(((unsigned __int128)(M * k) * N) >> 64) : (uint32_t)(k % N);
        }
    } else {
        for (size_t i = i0; i < i1; i++) c->ids[i] = (uint32_t)(c->keys[i] % N);
    }
}

// The dataset's summary of rows [i0, i1) (checksums, largest ids), a part of a parallel step;
// the parts' are combined in order, so the summary is the one of the rows in one piece.
typedef struct {
    const prep_ctx *c;
    size_t n;
    bp_ds_rows_sum part[NN_POOL_MAX];
} sum_job;

static void sum_part(void *ctx, int p, int parts) {
    sum_job *j = ctx;
    const prep_ctx *c = j->c;
    const size_t i0 = (size_t)nn_part_begin((long)j->n, p, parts);
    const size_t i1 = (size_t)nn_part_begin((long)j->n, p + 1, parts);
    bp_ds_rows_summarize(&c->shape, i1 - i0, c->label + i0, c->Nd ? c->dense + i0 * c->Nd : NULL,
                         c->ids + i0 * c->F, NULL, &j->part[p]);
}

static int prep_append(prep_ctx *c, size_t n) {
    sum_job *j = bp_xmalloc(sizeof *j);
    j->c = c, j->n = n;
    const int parts = n >= 8192 ? c->threads : 1;
    nn_pool_run(parts, sum_part, j);
    bp_ds_rows_sum sum = j->part[0];
    const size_t width[4] = {1, (size_t)c->Nd * sizeof(float), (size_t)c->F * sizeof(uint32_t), 0}; // (crc[])
    for (int p = 1; p < parts; p++) {
        const size_t rows = (size_t)(nn_part_begin((long)n, p + 1, parts) - nn_part_begin((long)n, p, parts));
        for (int s = 0; s < 4; s++)
            if (width[s]) sum.crc[s] = bp_crc32_combine(sum.crc[s], j->part[p].crc[s], rows * width[s]);
        for (uint32_t f = 0; f < c->F; f++) sum.max_id1[f] = BP_MAX(sum.max_id1[f], j->part[p].max_id1[f]);
    }
    free(j);
    return bp_ds_writer_append_summed(c->w, n, c->label, c->Nd ? c->dense : NULL, c->ids, NULL, &sum);
}

// Hands the rows gathered on: counts values (first pass of the frequency mapping) or maps them
// to ids and appends the rows to the dataset.
static int prep_flush(prep_ctx *c) {
    size_t n = c->n;
    const uint32_t F = c->F;
    c->n = 0;
    if (!n) return 0;
    if (c->voc) {
        table_job *j = bp_xcalloc(1, sizeof *j);
        j->c = c, j->n = n;
        for (uint32_t f = 0; f < F; f++) j->order[f] = f;
        qsort_r(j->order, F, sizeof *j->order, cmp_distinct_desc, c->voc);
        nn_pool_run(BP_MIN(c->threads, (int)F), table_part, j);
        int rc = 0;
        for (uint32_t f = 0; f < F && !rc; f++) {
            if (j->rc[f]) {
                bp_fail(j->rc[f], "%s", j->err[f]);
                rc = vocab_fail(c, f, j->rc[f]);
            } else if (c->pass == PASS_WRITE && j->mapped[f] < n) {
                rc = bp_fail(BP_EMISMATCH, "an input changed between the counting and the writing pass "
                             "(table %u has a value the first pass never saw)", f);
            }
        }
        free(j);
        if (rc || c->pass == PASS_COUNT) return rc;
    } else {
        hash_job j = {c, n};
        nn_pool_run(n >= 4096 ? c->threads : 1, hash_part, &j);
        if (c->seen)
            for (size_t r = 0; r < n; r++)
                for (uint32_t f = 0; f < F; f++) {
                    const uint32_t id = c->ids[r * F + f];
                    if (r + 4 < n) __builtin_prefetch(&c->seen[f][2 * (c->ids[(r + 4) * F + f] >> 6)], 1);
                    c->seen[f][2 * (id >> 6)] |= 1ull << (id & 63);
                }
    }
    return prep_append(c, n);
}

// Reads the next lines of r into ch (the input's header, if any, already read).  From an input
// that may block (a pipe), the lines to be had without waiting, once there are some: a writer that
// trickles or stalls gets its lines taken as they come, not after a chunk's worth.
static void chunk_read(lines_reader *r, prep_chunk *ch, int blocking) {
    ch->n = 0, ch->text_len = 0;
    ch->first_line = r->line_no + 1;
    ch->end_rc = 0;
    while (ch->n < CHUNK_LINES && ch->text_len < CHUNK_TEXT) {
        if (blocking && ch->n > 0 && !lines_pending(r)) {
            struct pollfd p = {.fd = r->fd, .events = POLLIN};
            if (poll(&p, 1, 0) == 0) break;
        }
        const char *s;
        size_t len;
        int k = lines_next(r, &s, &len);
        if (k <= 0) {
            ch->end_rc = k < 0 ? k : 1;
            if (k < 0) snprintf(ch->err, sizeof ch->err, "%s", bp_errmsg(k));
            break;
        }
        const size_t i = ch->n++;
        ch->off[i] = ch->text_len;
        ch->end[i] = r->bytes_text - (r->len - r->pos);
        if (k == LINES_LONG) {
            ch->kind[i] = ENTRY_LONG, ch->len[i] = 0;
            continue;
        }
        ch->kind[i] = ENTRY_LINE, ch->len[i] = (uint32_t)len;
        memcpy(ch->text + ch->text_len, s, len);
        ch->text[ch->text_len + len] = '\n';
        ch->text_len += len + 1;
    }
    ch->bytes_file = r->bytes_file;
}

// Parses line i of ch into row c->at + i; nonzero (bad filled) for a bad line.
static int chunk_parse_line(const prep_ctx *c, const prep_chunk *ch, size_t i, lines_bad *bad) {
    const char *s = ch->text + ch->off[i];
    const size_t r = c->at + i;
    return c->o->format == PREP_CRITEO
               ? criteo_parse(s, ch->len[i], &c->label[r], &c->dense[r * c->Nd], &c->keys[r * c->F], bad)
               : avazu_parse(&c->hdr, s, ch->len[i], &c->label[r], &c->keys[r * c->F], bad);
}

// The chunks of one input, in order: read by a thread of their own into a ring of n chunks, or
// (one thread, or no thread to be had) by the caller when it asks for the next.
typedef struct {
    lines_reader *r;
    prep_chunk *ring;
    unsigned n;
    unsigned taken;    // chunks handed to the caller (the next is ring[taken % n])
    int threaded;
    pthread_t th;
    pthread_mutex_t mu; // the three below, with a threaded feed
    pthread_cond_t cv;
    unsigned filled;    // chunks read and not yet released by the caller
    int cancel;         // the caller needs no more
    int blocking;       // the input is no regular file: a read may wait for its writer
} chunk_feed;

// The reading thread can be cancelled while it reads (feed_stop), and only then: a pipe whose
// writer stalls would otherwise hold it in read() after the caller needs no more lines.  (A
// regular file is never cancelled: its reads end, and the unwinding a cancellation needs loads a
// library, which under a tight memory limit can fail, and abort.)
static void *feed_main(void *arg) {
    chunk_feed *f = arg;
    int was;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &was);
    for (unsigned k = 0;; k = (k + 1) % f->n) {
        pthread_mutex_lock(&f->mu);
        while (f->filled == f->n && !f->cancel) pthread_cond_wait(&f->cv, &f->mu);
        const int cancel = f->cancel;
        pthread_mutex_unlock(&f->mu);
        if (cancel) break;
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &was);
        chunk_read(f->r, &f->ring[k], f->blocking);
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &was);
        pthread_mutex_lock(&f->mu);
        f->filled++;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        if (f->ring[k].end_rc != 0) break;
    }
    return NULL;
}

static void feed_start(chunk_feed *f, lines_reader *r, prep_chunk *ring, int threads) {
    memset(f, 0, sizeof *f);
    f->r = r, f->ring = ring;
    f->n = threads > 1 ? CHUNK_RING : 1;
    struct stat st;
    f->blocking = fstat(r->fd, &st) != 0 || !S_ISREG(st.st_mode);
    if (threads > 1) {
        pthread_mutex_init(&f->mu, NULL);
        pthread_cond_init(&f->cv, NULL);
        f->threaded = pthread_create(&f->th, NULL, feed_main, f) == 0;
        if (!f->threaded) {
            pthread_mutex_destroy(&f->mu);
            pthread_cond_destroy(&f->cv);
        }
    }
}

// The next chunk (after feed_release of the one before).
static prep_chunk *feed_next(chunk_feed *f) {
    prep_chunk *ch = &f->ring[f->taken % f->n];
    if (f->threaded) {
        pthread_mutex_lock(&f->mu);
        while (f->filled == 0) pthread_cond_wait(&f->cv, &f->mu);
        pthread_mutex_unlock(&f->mu);
    } else {
        chunk_read(f->r, ch, f->blocking);
    }
    return ch;
}

static void feed_release(chunk_feed *f) {
    f->taken++;
    if (!f->threaded) return;
    pthread_mutex_lock(&f->mu);
    f->filled--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

// Stops the reading thread (it may be ahead, waiting in read(), or done) and waits for it: r is
// the caller's again, to close (a cancelled read leaves it fit for nothing else).
static void feed_stop(chunk_feed *f) {
    if (!f->threaded) return;
    pthread_mutex_lock(&f->mu);
    f->cancel = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (f->blocking) pthread_cancel(f->th);
    pthread_join(f->th, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    f->threaded = 0;
}

// One parallel step: every part parses blocks of ch's lines.
typedef struct {
    prep_ctx *c;
    const prep_chunk *ch;
    _Atomic size_t block;
} parse_job;

static void parse_part(void *ctx, int p, int parts) {
    (void)p, (void)parts;
    parse_job *j = ctx;
    const prep_chunk *ch = j->ch;
    for (size_t b; (b = atomic_fetch_add_explicit(&j->block, 1, memory_order_relaxed) * PARSE_BLOCK) < ch->n;) {
        const size_t e = BP_MIN(ch->n, b + PARSE_BLOCK);
        for (size_t i = b; i < e; i++) {
            lines_bad bad;
            j->c->bad[i] = ch->kind[i] == ENTRY_LONG ? (uint8_t)(1 + LINES_BAD_LONG)
                             : chunk_parse_line(j->c, ch, i, &bad) ? (uint8_t)(1 + bad.kind)
                                                                   : 0;
        }
    }
}

// What is wrong with the bad line i of ch (its kind is c->bad[i]).
static void chunk_bad_message(const prep_ctx *c, const prep_chunk *ch, size_t i, lines_bad *bad) {
    if (ch->kind[i] == ENTRY_LONG)
        lines_bad_set(bad, LINES_BAD_LONG, "line longer than %u bytes, expected text lines of at most that "
                      "(is this %s file?)", LINES_MAX, c->o->format == PREP_AVAZU ? "an Avazu CSV" : "a Criteo TSV");
    else
        chunk_parse_line(c, ch, i, bad); // again, for its message (its row is taken by no line)
}

// The bad line i of ch: fails, naming it, or (--skip-bad) counts it and shows the first three.
// Its message is made only when it is said, since a skipped line is otherwise only counted.
static int prep_bad_line(prep_ctx *c, const char *path, const prep_chunk *ch, size_t i) {
    const uint64_t line = ch->first_line + i;
    lines_bad bad;
    if (!c->o->skip_bad) {
        chunk_bad_message(c, ch, i, &bad);
        const char *hint = bad.first_line_hint && line == 1 ? bad.first_line_hint : NULL;
        return bp_fail(BP_EFORMAT, "%s:%llu: %s%s", path, (unsigned long long)line, bad.msg,
                       hint ? hint : " (or --skip-bad to skip bad lines)");
    }
    if (c->count_bad) {
        c->st.bad[c->bad[i] - 1]++;
        c->st.bad_total++;
        if (c->shown_bad++ < 3) {
            chunk_bad_message(c, ch, i, &bad);
            bp_log(BP_LOG_WARN, "skipping %s:%llu: %s", path, (unsigned long long)line, bad.msg);
        }
    }
    return 0;
}

// Takes ch's parsed lines in order: bad lines, sub-sampling, --max-rows; the rows kept are moved
// down over those not (rows c->at + i to c->n).  *taken = entries taken (all, unless *stop).
static int chunk_take(prep_ctx *c, int fi, const char *path, const prep_chunk *ch, size_t *taken, int *stop) {
    const prep_opts *o = c->o;
    const uint32_t F = c->F, Nd = c->Nd;
    int rc = 0;
    size_t i = 0;
    while (i < ch->n && !rc) {
        const size_t e = i++;
        const uint64_t line = ch->first_line + e;
        const size_t from = c->at + e, r = c->n;
        if (c->bad[e]) {
            rc = prep_bad_line(c, path, ch, e);
            continue;
        }
        if (o->sub_sample_rate > 0 && c->label[from] == 0 && sub_train_input(o, fi)) {
            c->st.sub_negatives++;
            if (sub_drawn(o, fi, line)) {
                c->st.sub_dropped++;
                continue;
            }
        }
        if (r != from) {
            c->label[r] = c->label[from];
            memcpy(&c->dense[r * Nd], &c->dense[from * Nd], Nd * sizeof *c->dense);
            memcpy(&c->keys[r * F], &c->keys[from * F], F * sizeof *c->keys);
        }
        c->n++, c->rows++, c->file_rows[fi]++;
        if (o->max_rows && c->rows >= o->max_rows) {
            *stop = 1;
            break;
        }
    }
    *taken = i;
    return rc;
}

// Reads input fi to the end (or to --max-rows): sets *stop when the row limit is reached.
static int prep_file(prep_ctx *c, int fi, int *stop) {
    const prep_opts *o = c->o;
    lines_reader r;
    int rc = lines_open(&r, o->inputs[fi], c->voc != NULL);
    if (rc) return rc;
    c->files_read = fi + 1;
    uint64_t nlines = 0, stop_end = 0;
    int lines_follow = 1;
    if (o->format == PREP_AVAZU) {
        // The header names the columns of this file; a bad one is fatal even with --skip-bad.
        const char *s;
        size_t len;
        lines_bad bad;
        int k = lines_next(&r, &s, &len);
        if (k < 0) rc = k;
        else if (k > 0) nlines++;
        if (k == LINES_LONG)
            rc = bp_fail(BP_EFORMAT, "%s:%llu: header line longer than %u bytes; expected the Avazu header",
                         r.path, (unsigned long long)r.line_no, LINES_MAX);
        else if (k == 1 && avazu_header_parse(&c->hdr, s, len, &bad))
            rc = bp_fail(BP_EFORMAT, "%s:%llu: %s", r.path, (unsigned long long)r.line_no, bad.msg);
        lines_follow = k > 0 && !rc; // (an empty file: said below)
    }
    chunk_feed feed;
    if (lines_follow) feed_start(&feed, &r, c->chunk, c->threads);
    while (lines_follow) {
        prep_chunk *ch = feed_next(&feed);
        if (c->n + ch->n > PREP_CHUNK && (rc = prep_flush(c)) != 0) break;
        c->at = c->n;
        parse_job j = {c, ch, 0};
        nn_pool_run(ch->n >= 2 * PARSE_BLOCK ? c->threads : 1, parse_part, &j);
        size_t taken = 0;
        rc = chunk_take(c, fi, r.path, ch, &taken, stop);
        nlines += taken;
        if (rc) break;
        if (*stop) {
            stop_end = ch->end[taken - 1];
            break;
        }
        if (c->prog.enabled) {
            char note[48];
            snprintf(note, sizeof note, "%llu rows", (unsigned long long)c->rows);
            bp_progress_update(&c->prog, c->bytes_before + ch->bytes_file, note);
        }
        const int end = ch->end_rc != 0;
        if (ch->end_rc < 0) rc = bp_fail(ch->end_rc, "%s", ch->err);
        feed_release(&feed);
        if (end) break;
    }
    if (lines_follow) feed_stop(&feed);
    if (!rc && nlines == 0)
        rc = bp_fail(BP_EFORMAT, "%s: empty input file%s", r.path, r.gz ? " (no lines after decompression)" : "");
    if (*stop) { // --max-rows: the text read ahead of the last line taken is not input taken
        r.bytes_text = stop_end;
        r.bytes_file = r.bytes_text; // (gzip: the compressed bytes of those lines are not known)
    }
    c->st.bytes_file += r.bytes_file;
    c->st.bytes_text += r.bytes_text;
    c->st.lines += nlines;
    c->bytes_before += r.bytes_file;
    lines_close(&r);
    return rc;
}

// --split days halves the last input reached: a --max-rows that ends inside the first input
// leaves no day for train (the dataset used to be written with an empty train split).  Checked
// after the first pass, before the second.
static int days_check(const prep_ctx *c) {
    const prep_opts *o = c->o;
    if (o->split != PREP_SPLIT_DAYS) return 0;
    // A last day without a row (every line bad, skipped) would leave val and test empty unsaid.
    if (c->files_read >= 2 && c->file_rows[c->files_read - 1] == 0)
        return bp_fail(BP_EFORMAT, "--split days: the last day reached (%s) gave no rows (%s), and its halves are val "
                       "and test: both would be empty; give a day with rows last", o->inputs[c->files_read - 1],
                       o->skip_bad ? "every line skipped as bad, or a header only" : "no data lines");
    if (c->files_read >= 2) return 0;
    return bp_fail(BP_EUSAGE, "--split days: --max-rows %llu ends inside the first input (%s), the day that would "
                   "be halved into val and test: no day is left for train; raise --max-rows or use --split ratio:A,B,C",
                   (unsigned long long)o->max_rows, o->inputs[0]);
}

static int prep_pass(prep_ctx *c, int pass) {
    const prep_opts *o = c->o;
    c->pass = pass;
    c->rows = 0, c->n = 0, c->bytes_before = 0;
    c->st.bytes_file = c->st.bytes_text = c->st.lines = c->st.sub_dropped = c->st.sub_negatives = 0;
    memset(c->file_rows, 0, (size_t)o->n_inputs * sizeof *c->file_rows);
    if (o->progress)
        bp_progress_init(&c->prog, pass == PASS_COUNT ? "prep: counting" : "prep", "bytes", c->total_bytes);
    else
        c->prog.enabled = 0;
    int rc = 0, stop = 0;
    for (int fi = 0; fi < o->n_inputs && !rc && !stop; fi++) rc = prep_file(c, fi, &stop);
    if (!rc) rc = days_check(c);
    if (!rc) rc = prep_flush(c);
    bp_progress_finish(&c->prog);
    return rc;
}

static void prep_source(const prep_opts *o, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "prep %s", o->format == PREP_AVAZU ? "avazu" : "criteo");
    for (int i = 0; i < o->n_inputs && k < cap; i++) {
        const char *base = strrchr(o->inputs[i], '/');
        k += (size_t)snprintf(buf + k, cap - k, " %s", base ? base + 1 : o->inputs[i]);
    }
    if (o->sub_sample_rate > 0 && k < cap)
        snprintf(buf + k, cap - k, " --sub-sample-rate %.17g --seed %llu", o->sub_sample_rate,
                 (unsigned long long)o->seed);
}

// The day of a Criteo Terabyte file name (day_N, day_N.gz, day_N.txt ...), or -1.
static long day_number(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "day_", 4) != 0 || base[4] < '0' || base[4] > '9') return -1;
    char *end;
    long d = strtol(base + 4, &end, 10);
    return *end == '\0' || *end == '.' ? d : -1;
}

// Terabyte days named out of order: a shell glob (day_*) sorts names as text, day_10 before
// day_2, and --split days would hold out whichever file came last.  Refused with --split days,
// a warning otherwise (the rows are stored in the order given).
static int days_order_check(const prep_opts *o) {
    for (int i = 0; i < o->n_inputs; i++)
        if (day_number(o->inputs[i]) < 0) return 0;
    for (int i = 1; i < o->n_inputs; i++) {
        if (day_number(o->inputs[i]) > day_number(o->inputs[i - 1])) continue;
        const char *fmt = "%s%s comes after %s: the inputs are not in day order (a shell glob such as day_* sorts "
                          "names as text, day_10 before day_2); give them in order, e.g. day_{0..23}.gz%s";
        if (o->split == PREP_SPLIT_DAYS)
            return bp_fail(BP_EUSAGE, fmt, "--split days: ", o->inputs[i], o->inputs[i - 1],
                           " (--split days holds out the last one given)");
        bp_log(BP_LOG_WARN, fmt, "", o->inputs[i], o->inputs[i - 1], "; the rows are stored in the order given");
        return 0;
    }
    return 0;
}

// The input format's number of tables.
static uint32_t prep_tables(const prep_opts *o) { return o->format == PREP_AVAZU ? AVAZU_F : CRITEO_F; }

static int prep_check_opts(const prep_opts *o) {
    if (o->n_inputs < 1) return bp_fail(BP_EUSAGE, "prep: no input files given");
    if (!o->out || !*o->out) return bp_fail(BP_EUSAGE, "prep: no output file given (--out FILE)");
    if (o->max_ind_range == 0 && o->min_count < 1) return bp_fail(BP_EUSAGE, "--min-count: expected at least 1");
    if (o->max_ind_range > ((uint64_t)1 << 32))
        return bp_fail(BP_EUSAGE, "--max-ind-range: %llu is over 2^32, the largest table a dataset can hold",
                       (unsigned long long)o->max_ind_range);
    if (o->compact && !o->max_ind_range)
        return bp_fail(BP_EUSAGE, "--compact renumbers hashed ids: give --max-ind-range N too (frequency ids, the "
                       "default, have compact tables already)");
    if (o->compact) { // a bit per residue and a count per 64, for every table
        const uint32_t F = prep_tables(o);
        const uint64_t need = F * ((o->max_ind_range + 63) / 64) * 16, avail = dist_mem_available();
        char a[32], b[32];
        if (avail && need > avail)
            return bp_fail(BP_ENOMEM, "--compact --max-ind-range %llu: the residues of %u tables take %s and %s is "
                           "available; a smaller --max-ind-range, or leave out --compact",
                           (unsigned long long)o->max_ind_range, F, bp_fmt_bytes(a, sizeof a, (double)need),
                           bp_fmt_bytes(b, sizeof b, (double)avail));
    }
    if (!(o->sub_sample_rate >= 0 && o->sub_sample_rate < 1))
        return bp_fail(BP_EUSAGE, "--sub-sample-rate: %g is not in [0, 1), the share of no-click train rows dropped",
                       o->sub_sample_rate);
    if (o->sub_sample_rate > 0 && (o->split == PREP_SPLIT_KAGGLE || o->split == PREP_SPLIT_RATIO))
        return bp_fail(BP_EUSAGE, "--sub-sample-rate drops no-click rows of the train split as they are read, and "
                       "with --split %s which rows are train is known only at the end: use --split days (the last "
                       "day, val and test, is kept whole) or none", o->split == PREP_SPLIT_KAGGLE ? "kaggle" : "ratio");
    if (o->sub_sample_rate > 0 && o->split == PREP_SPLIT_DAYS && o->max_rows)
        return bp_fail(BP_EUSAGE, "--sub-sample-rate with --split days keeps the last day whole, and --max-rows may "
                       "stop before it, making another day val and test; leave out one of them");
    if (o->split == PREP_SPLIT_DAYS && o->n_inputs < 2)
        return bp_fail(BP_EUSAGE, "--split days: expected one input file per day (at least 2), got %d", o->n_inputs);
    // One file given twice (by one name or two) would repeat its rows, with --split days in
    // train and in val/test both.  Before the day order, which a repeated day would break.
    for (int i = 1; i < o->n_inputs; i++) {
        struct stat a, b;
        for (int j = 0; j < i && stat(o->inputs[i], &a) == 0; j++)
            if (stat(o->inputs[j], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                return bp_fail(BP_EUSAGE, "%s: the same file as input %d (%s); give each input once (its rows "
                               "would be there twice)", o->inputs[i], j + 1, o->inputs[j]);
    }
    return days_order_check(o);
}

// --compact: each table's ids (residues value mod N) renumbered 0..k-1 in their order as the
// writer copies them into place (bp_ds_writer_map_sparse): the id of residue x is the number of
// residues present below it, a word's count plus a popcount.  The order of residues is kept, so
// k = N (every residue present) leaves the ids as they are.
static void compact_map(void *ctx, uint32_t *ids, size_t n, uint64_t first) {
    const prep_ctx *c = ctx;
    const uint32_t F = c->F, ahead = 4 * F; // the same table four rows on
    uint32_t f = (uint32_t)(first % F);
    for (size_t i = 0; i < n; i++) {
        if (i + ahead < n) __builtin_prefetch(&c->seen[f][2 * (ids[i + ahead] >> 6)]);
        const uint32_t x = ids[i];
        const uint64_t *e = &c->seen[f][2 * (x >> 6)], below = e[0] & ((1ull << (x & 63)) - 1);
        ids[i] = (uint32_t)e[1] + (uint32_t)__builtin_popcountll(below);
        if (++f == F) f = 0;
    }
}

// The residues' counts into card, the ranks, and the digest of the residue sets (0 when every
// table holds every residue: the ids are then value mod N).
static uint64_t compact_rank(prep_ctx *c, uint64_t *card) {
    const uint64_t N = c->o->max_ind_range, words = (N + 63) / 64;
    uint64_t fp = bp_mix64(c->F ^ 0x636f6d70616374ull), all = 1;
    for (uint32_t f = 0; f < c->F; f++) {
        uint64_t k = 0, h = bp_mix64(f), *e = c->seen[f];
        for (uint64_t w = 0; w < words; w++) {
            e[2 * w + 1] = k;
            k += (uint64_t)__builtin_popcountll(e[2 * w]);
            if (e[2 * w]) h = bp_hash2(h, bp_hash2(w, e[2 * w]));
        }
        card[f] = k;
        c->st.distinct += k;
        all &= k == N;
        fp = bp_hash2(fp, h);
    }
    return all ? 0 : fp ? fp : 1;
}

int prep_run(const prep_opts *o, prep_stats *st_out) {
    double t0 = bp_now();
    int rc = prep_check_opts(o);
    if (rc) return rc;
    prep_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.F = prep_tables(o);
    c.Nd = o->format == PREP_AVAZU ? 0 : CRITEO_ND;
    // Every input must open before any work starts.
    for (int i = 0; i < o->n_inputs; i++) {
        uint64_t size;
        if ((rc = lines_check(o->inputs[i], o->max_ind_range == 0, &size)) != 0) return rc;
        c.total_bytes += size;
    }
    if ((rc = prep_check_out(o->out)) != 0) return rc;
    struct stat so, si;
    for (int i = 0; i < o->n_inputs && stat(o->out, &so) == 0; i++)
        if (stat(o->inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return bp_fail(BP_EUSAGE, "%s: the output is also an input; choose another --out", o->out);

    bp_ds_info tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.n_dense = c.Nd, tmpl.n_sparse = c.F;
    tmpl.transform = c.Nd ? BP_TRANSFORM_LOG1P : BP_TRANSFORM_NONE;
    tmpl.kind = o->format == PREP_AVAZU ? BP_KIND_AVAZU : BP_KIND_CRITEO;
    tmpl.idmap = o->max_ind_range ? BP_IDMAP_HASH : BP_IDMAP_FREQ;
    tmpl.min_count = o->max_ind_range ? 0 : o->min_count;
    tmpl.max_ind_range = o->max_ind_range;
    if (o->source) snprintf(tmpl.source, sizeof tmpl.source, "%s", o->source);
    else prep_source(o, tmpl.source, sizeof tmpl.source);
    if ((rc = bp_ds_writer_open(&c.w, o->out, &tmpl)) != 0) return rc;
    c.shape = tmpl;

    c.label = bp_xmalloc(PREP_CHUNK);
    c.dense = bp_xmalloc((size_t)PREP_CHUNK * (c.Nd ? c.Nd : 1) * sizeof *c.dense);
    c.keys = bp_xmalloc((size_t)PREP_CHUNK * c.F * sizeof *c.keys);
    c.ids = bp_xmalloc((size_t)PREP_CHUNK * c.F * sizeof *c.ids);
    c.file_rows = bp_xcalloc((size_t)o->n_inputs, sizeof *c.file_rows);
    c.threads = bp_threads_resolve(o->threads, NN_POOL_MAX);
    for (int k = 0; k < (c.threads > 1 ? CHUNK_RING : 1); k++) {
        prep_chunk *ch = &c.chunk[k];
        ch->text = bp_xmalloc(CHUNK_TEXT + LINES_MAX + 1);
        ch->off = bp_xmalloc(CHUNK_LINES * sizeof *ch->off);
        ch->len = bp_xmalloc(CHUNK_LINES * sizeof *ch->len);
        ch->kind = bp_xmalloc(CHUNK_LINES);
        ch->end = bp_xmalloc(CHUNK_LINES * sizeof *ch->end);
    }
    c.bad = bp_xmalloc(CHUNK_LINES);
    c.st.n_dense = c.Nd, c.st.n_sparse = c.F;
    c.count_bad = 1;

    if (!o->max_ind_range) {
        // Avazu's hour and weekday features have small integer keys: narrow tables.
        c.voc = bp_xcalloc(c.F, sizeof *c.voc);
        for (uint32_t f = 0; f < c.F && !rc; f++)
            if ((rc = vocab_init(&c.voc[f], o->format == PREP_AVAZU && f >= 2))) rc = vocab_fail(&c, f, rc);
        if (!rc) rc = prep_pass(&c, PASS_COUNT);
        c.st.seconds_count = bp_now() - t0;
        for (uint32_t f = 0; f < c.F && !rc; f++) {
            c.st.vocab_bytes += vocab_mem_bytes(&c.voc[f]);
            c.st.distinct += vocab_distinct(&c.voc[f]);
            if ((rc = vocab_rank(&c.voc[f], o->min_count))) rc = vocab_fail(&c, f, rc);
            c.st.card[f] = c.voc[f].card;
        }
        // The vocabularies' digest, so that a model is not evaluated on frequency ids numbered
        // by other counts (a test day prepped apart) whose tables happen to have its sizes.  Of
        // the map alone: --min-count shows in it only where it changes an id.
        uint64_t fp = bp_mix64(c.F);
        for (uint32_t f = 0; f < c.F && !rc; f++) fp = bp_hash2(fp, vocab_fingerprint(&c.voc[f]));
        if (!rc) bp_ds_writer_set_vocab_fp(c.w, fp ? fp : 1);
        c.count_bad = 0;
    } else {
        for (uint32_t f = 0; f < c.F; f++) c.st.card[f] = o->max_ind_range;
        if (o->format == PREP_AVAZU) {
            c.st.card[0] = BP_MIN(o->max_ind_range, 24);
            c.st.card[1] = BP_MIN(o->max_ind_range, 7);
        }
        if (o->compact) {
            c.seen = bp_xcalloc(c.F, sizeof *c.seen);
            const uint64_t words = (o->max_ind_range + 63) / 64;
            for (uint32_t f = 0; f < c.F; f++) c.seen[f] = bp_xcalloc(2 * words, sizeof **c.seen);
        }
    }
    if (!rc) rc = prep_pass(&c, PASS_WRITE);
    if (!rc && c.seen && c.rows) {
        bp_ds_writer_set_vocab_fp(c.w, compact_rank(&c, c.st.card));
        bp_ds_writer_map_sparse(c.w, compact_map, &c);
    }
    if (!rc && c.rows == 0) {
        char more[48] = "";
        if (o->n_inputs > 1)
            snprintf(more, sizeof more, " (nor in the %d other input%s)", o->n_inputs - 1, o->n_inputs > 2 ? "s" : "");
        rc = bp_fail(BP_EFORMAT, "%s: no data rows in the input%s (%llu bad lines skipped)", o->inputs[0], more,
                     (unsigned long long)c.st.bad_total);
    }
    if (!rc) {
        c.st.rows = c.rows, c.st.inputs_read = c.files_read;
        prep_split_sizes(o, c.rows, c.file_rows, c.files_read, c.st.split);
        rc = bp_ds_writer_finish(c.w, c.st.card, c.st.split); // frees the writer
        c.w = NULL;
    }
    bp_ds_writer_abort(c.w);
    if (c.voc)
        for (uint32_t f = 0; f < c.F; f++) vocab_free(&c.voc[f]);
    free(c.voc);
    free(c.label);
    free(c.dense);
    free(c.keys);
    free(c.ids);
    free(c.file_rows);
    for (int k = 0; k < CHUNK_RING; k++) {
        free(c.chunk[k].text);
        free(c.chunk[k].off);
        free(c.chunk[k].len);
        free(c.chunk[k].kind);
        free(c.chunk[k].end);
    }
    free(c.bad);
    for (uint32_t f = 0; c.seen && f < c.F; f++) free(c.seen[f]);
    free(c.seen);
    c.st.seconds = bp_now() - t0;
    if (st_out) *st_out = c.st;
    return rc;
}

// ---------------------------------------------------------------------------------------------
// CLI

static void prep_print_summary(const prep_opts *o, const prep_stats *st) {
    char a[32], b[32];
    double mb = (double)st->bytes_text / 1e6, secs = st->seconds > 0 ? st->seconds : 1e-9;
    char of[48] = ""; // --max-rows may stop before the last input
    if (st->inputs_read < o->n_inputs) snprintf(of, sizeof of, "%d of ", st->inputs_read);
    printf("prep: %llu row%s (train %llu, val %llu, test %llu) from %s%d input file%s\n", (unsigned long long)st->rows,
           st->rows == 1 ? "" : "s", (unsigned long long)st->split[0], (unsigned long long)st->split[1], (unsigned long long)st->split[2],
           of, o->n_inputs, o->n_inputs == 1 ? "" : "s");
    printf("input: %s text", bp_fmt_bytes(a, sizeof a, (double)st->bytes_text));
    if (st->bytes_file != st->bytes_text) printf(" (%s compressed)", bp_fmt_bytes(b, sizeof b, (double)st->bytes_file));
    char t1[32], t2[32];
    printf(" in %s: %.1f MB/s, %.0f rows/s", bp_fmt_seconds(t1, sizeof t1, st->seconds), mb / secs,
           (double)st->rows / secs);
    if (!o->max_ind_range) printf(" (two passes; counting took %s)", bp_fmt_seconds(t2, sizeof t2, st->seconds_count));
    printf("\n");
    uint64_t total = 0;
    for (uint32_t f = 0; f < st->n_sparse; f++) total += st->card[f];
    if (o->max_ind_range && o->compact)
        printf("ids: hashed, value mod %llu, the residues present numbered in order (--compact); %u tables, %llu "
               "rows in all:", (unsigned long long)o->max_ind_range, st->n_sparse, (unsigned long long)total);
    else if (o->max_ind_range)
        printf("ids: hashed, value mod %llu; %u tables, %llu rows in all:", (unsigned long long)o->max_ind_range,
               st->n_sparse, (unsigned long long)total);
    else
        printf("ids: by frequency, min count %u; %u tables, %llu rows in all (%llu distinct values, %s of "
               "vocabulary):", o->min_count, st->n_sparse, (unsigned long long)total,
               (unsigned long long)st->distinct, bp_fmt_bytes(a, sizeof a, (double)st->vocab_bytes));
    for (uint32_t f = 0; f < st->n_sparse; f++) printf("%s%llu", f ? "," : " ", (unsigned long long)st->card[f]);
    printf("\n");
    if (o->sub_sample_rate > 0)
        printf("sub-sampled: %llu of the %llu no-click train rows dropped (%.4f; --sub-sample-rate %g, seed %llu)\n",
               (unsigned long long)st->sub_dropped, (unsigned long long)st->sub_negatives,
               st->sub_negatives ? (double)st->sub_dropped / (double)st->sub_negatives : 0.0, o->sub_sample_rate,
               (unsigned long long)o->seed);
    if (st->bad_total) {
        printf("bad lines skipped: %llu (", (unsigned long long)st->bad_total);
        int first = 1;
        for (int k = 0; k < LINES_BAD_N; k++)
            if (st->bad[k]) {
                printf("%s%s %llu", first ? "" : ", ", lines_bad_name((lines_bad_kind)k), (unsigned long long)st->bad[k]);
                first = 0;
            }
        printf(")\n");
    }
    printf("wrote %s\n", o->out);
}

#define PREP_STR_(x) #x
#define PREP_STR(x) PREP_STR_(x)

int cmd_prep(int argc, char **argv) {
    int format = 0, skip_bad = 0, quiet = 0, compact = 0, threads = 0;
    const char *out = NULL, *split = NULL;
    int64_t min_count = 1, max_ind_range = 0, max_rows = 0, seed = 1;
    double sub_rate = 0;
    const cli_opt opts[] = {
        CLI_CHOICE("format", 'f', &format, 0, "criteo|avazu",
                   "input format: Criteo TSV (Kaggle or Terabyte days) or Avazu CSV with its header"),
        CLI_STR("out", 'o', &out, NULL, "output dataset file (required; written atomically)"),
        CLI_I64("min-count", 0, &min_count, 1, 1, UINT32_MAX,
                "frequency ids (two passes): most frequent value = id 0; values seen fewer than N times "
                "share the last id"),
        CLI_I64("max-ind-range", 0, &max_ind_range, 0, 0, (int64_t)1 << 32,
                "hashed ids instead (one pass): id = value mod N, 0 = off"),
        CLI_FLAG("compact", 0, &compact,
                 "with --max-ind-range: each table's residues present renumbered 0..k-1 in their order, k rows "
                 "instead of N (the DLRM reference's table sizes; files prepped apart no longer share ids)"),
        CLI_STR("split", 0, &split, "none",
                "none | kaggle (7 equal days: 0-5 train, 6 halved val/test) | days (one file per day, last "
                "halved) | ratio:A,B,C"),
        CLI_FLAG("skip-bad", 0, &skip_bad, "skip malformed lines (counted per kind) instead of failing"),
        CLI_I64("max-rows", 0, &max_rows, 0, 0, INT64_MAX, "stop after N rows (0 = all)"),
        CLI_DBL("sub-sample-rate", 0, &sub_rate, 0, -1e9, 1e9, // (range: prep_check_opts)
                "drop each no-click row of the train days with this probability (the DLRM reference's "
                "--data-sub-sample-rate; its Terabyte runs use 0.875); --split days or none, the last day kept whole"),
        CLI_ALIAS("data-sub-sample-rate", "sub-sample-rate", "the DLRM reference's name for --sub-sample-rate"),
        CLI_I64("seed", 's', &seed, 1, 0, INT64_MAX, "seed of the rows --sub-sample-rate drops"),
        CLI_INT("threads", 't', &threads, 0, 0, NN_POOL_MAX,
                "threads that parse lines and count or map the tables' values (0: one per core, at most "
                PREP_STR(NN_POOL_MAX) "); the output is the same on any number"),
        CLI_FLAG("quiet", 'q', &quiet, "no progress line and no summary"),
        // The DLRM reference's names for what the arguments and --format say here.
        CLI_HINT("raw-data-file", "the raw files are the INPUT arguments, in order: 'bagpipe prep -o OUT INPUT...'"),
        CLI_HINT("processed-data-file", "use -o OUT (--out): the binary dataset to write"),
        CLI_HINT("data-set", "use --format criteo (Kaggle or Terabyte days) or --format avazu, and --split kaggle "
                 "for the Kaggle split"),
        CLI_END,
    };
    char **pos = NULL;
    int npos = 0;
    cli_given given;
    int rc = cli_parse_given("bagpipe prep", "[options] -o OUT INPUT...  (inputs in order: plain or gzip; - reads stdin)",
                             opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    cli_warn_overridden(&given);
    prep_opts o;
    prep_opts_default(&o);
    o.format = format == 1 ? PREP_AVAZU : PREP_CRITEO;
    static char std_in[] = "/dev/stdin"; // "-": the standard input, as other tools take it
    for (int i = 0; i < npos; i++)
        if (strcmp(pos[i], "-") == 0) pos[i] = std_in;
    o.inputs = (const char *const *)pos;
    o.n_inputs = npos;
    o.out = out;
    o.min_count = (uint32_t)min_count;
    o.max_ind_range = (uint64_t)max_ind_range;
    o.compact = compact;
    o.skip_bad = skip_bad;
    o.max_rows = (uint64_t)max_rows;
    o.sub_sample_rate = sub_rate, o.seed = (uint64_t)seed;
    o.progress = !quiet;
    o.threads = threads;
    if (max_ind_range && cli_was_given(&given, opts, "min-count"))
        rc = bp_fail(BP_EUSAGE, "--min-count and --max-ind-range choose two different id mappings; give one");
    if (!rc) rc = prep_split_parse(&o, split);
    if (!rc && !out) rc = bp_fail(BP_EUSAGE, "prep: --out FILE is required (see 'bagpipe prep --help')");
    if (!rc && npos < 1) rc = bp_fail(BP_EUSAGE, "prep: no input files given (see 'bagpipe prep --help')");
    prep_stats st;
    if (!rc) rc = prep_run(&o, &st);
    if (!rc && !quiet) prep_print_summary(&o, &st);
    free(pos);
    return cmd_exit(rc);
}
