// `bagpipe shuffle`: a dataset with its train rows in a random order (DESIGN §3: rows are stored in
// training order, so every mode trains them in the file's order).  The DLRM reference shuffles the
// train days when it preprocesses Criteo (its default --data-randomize total); a log in time order
// trained as it is learns day by day.  Val and test keep their rows, order and place, so a model
// evaluated on the shuffled dataset sees exactly the rows it saw before.
//
// Two ways, the same distribution (every order of the train rows equally likely):
// - in memory (the default, --buckets 1): a Fisher-Yates permutation, the rows read from the
//   mapped input in its order.  4 or 8 bytes per train row, and reads at random over the file:
//   fine while the file stays in the page cache, a disk seek per row when it does not (Criteo's
//   Terabyte log: 4.2G train rows, 34 GB of order and ~660 GB of rows);
// - through K buckets (--buckets K, or --memory MIB): each row goes to one of K buckets drawn
//   uniformly and independently, written in sequence to a temporary file beside the output; then
//   each bucket in turn is read back whole, put in a Fisher-Yates order and written.  Memory: the
//   largest bucket and its order, plus K write buffers (64 MiB in all at most); disk: one more copy
//   of the train rows, removed at the end (or by the system if the process dies: the file is
//   unlinked as soon as it is made); both reads of the input are sequential.  Given the bucket
//   sizes, every way of filling the buckets is equally likely and each bucket's order uniform, so
//   every order of the rows has the same probability, the sum over the size vectors of
//   K^-n / prod(n_k!), whatever the order.
// The bytes depend on the dataset, the seed and K (recorded in the header's source); bucket 0's
// order is drawn from the stream of --buckets 1, which is the case K = 1 of the same rule.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "data_bin.h"
#include "progress.h"

#define SHUF_STREAM 0x5348554646ull // "SHUFF": bucket k's order, stream SHUF_STREAM + (k << 40)
#define SHUF_ASSIGN 0x5348554641ull // "SHUFA": the bucket of each row, in row order
#define SHUF_MAX_BUCKETS 65536
#define SHUF_BUF_ALL ((size_t)64 << 20) // the write buffers of all buckets together, at most
#define SHUF_BUF_ONE ((size_t)256 << 10)

// Uniform in [0, n), unbiased (rejection of the top partial range), for n up to 2^64 - 1.
static uint64_t rng_below64(bp_rng *r, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        const uint64_t x = bp_rng_u64(r);
        if (x < limit) return x % n;
    }
}

// A permutation of [0, n): Fisher-Yates from the seed and bucket k's stream, the same on every
// machine (the generator is bagpipe's own).  4-byte entries below 2^32 rows (the Kaggle log's 39M
// train rows: 157 MB), else 8.
#define SHUFFLE_ORDER(T, name)                                                                     \
    static void name(uint64_t n, uint64_t seed, uint64_t k, T *order) {                            \
        for (uint64_t i = 0; i < n; i++) order[i] = (T)i;                                          \
        bp_rng r;                                                                                  \
        bp_rng_seed(&r, seed, SHUF_STREAM + (k << 40));                                            \
        for (uint64_t i = n; i > 1; i--) {                                                         \
            const uint64_t j = rng_below64(&r, i);                                                 \
            const T t = order[i - 1];                                                              \
            order[i - 1] = order[j], order[j] = t;                                                 \
        }                                                                                          \
    }
SHUFFLE_ORDER(uint32_t, order32)
SHUFFLE_ORDER(uint64_t, order64)

void bp_shuffle_order(uint64_t n, uint64_t K, uint64_t seed, uint64_t *order) {
    if (K <= 1) {
        order64(n, seed, 0, order);
        return;
    }
    uint64_t *start = bp_xcalloc(K + 1, sizeof *start), *bucket = bp_xmalloc((n ? n : 1) * sizeof *bucket);
    bp_rng r;
    bp_rng_seed(&r, seed, SHUF_ASSIGN);
    for (uint64_t i = 0; i < n; i++) bucket[i] = rng_below64(&r, K), start[bucket[i] + 1]++;
    for (uint64_t k = 0; k < K; k++) start[k + 1] += start[k];
    uint64_t *rows = bp_xmalloc((n ? n : 1) * sizeof *rows), *fill = bp_xmalloc(K * sizeof *fill), *perm = NULL;
    memcpy(fill, start, K * sizeof *fill);
    for (uint64_t i = 0; i < n; i++) rows[fill[bucket[i]]++] = i; // each bucket's rows in input order
    for (uint64_t k = 0; k < K; k++) {
        const uint64_t m = start[k + 1] - start[k];
        perm = realloc(perm, (m ? m : 1) * sizeof *perm);
        BP_ASSERT(perm != NULL);
        order64(m, seed, k, perm);
        for (uint64_t i = 0; i < m; i++) order[start[k] + i] = rows[start[k] + perm[i]];
    }
    free(start), free(bucket), free(rows), free(fill), free(perm);
}

// Row chunks on their way to the writer, and rows as bytes (label, dense, sparse, prob).
#define CHUNK 65536
typedef struct {
    uint64_t Nd, F;
    size_t rb; // bytes per row
    uint8_t *lab;
    float *dense, *prob;
    uint32_t *sparse;
} rows_buf;

static void rows_init(rows_buf *b, const bp_dataset *ds) {
    b->Nd = ds->info.n_dense, b->F = ds->info.n_sparse;
    b->rb = 1 + b->Nd * sizeof(float) + b->F * sizeof(uint32_t) + (ds->prob ? sizeof(float) : 0);
    b->lab = bp_xmalloc(CHUNK);
    b->dense = bp_xmalloc((size_t)CHUNK * (b->Nd ? b->Nd : 1) * sizeof *b->dense);
    b->sparse = bp_xmalloc((size_t)CHUNK * b->F * sizeof *b->sparse);
    b->prob = ds->prob ? bp_xmalloc((size_t)CHUNK * sizeof *b->prob) : NULL;
}
static void rows_free(rows_buf *b) { free(b->lab), free(b->dense), free(b->sparse), free(b->prob); }

// Input row r into slot k of the chunk.
static void rows_take(rows_buf *b, const bp_dataset *ds, uint64_t r, size_t k) {
    b->lab[k] = ds->label[r];
    memcpy(b->dense + k * b->Nd, ds->dense + r * b->Nd, b->Nd * sizeof *b->dense);
    memcpy(b->sparse + k * b->F, ds->sparse + r * b->F, b->F * sizeof *b->sparse);
    if (b->prob) b->prob[k] = ds->prob[r];
}
static void row_pack(const rows_buf *b, const bp_dataset *ds, uint64_t r, uint8_t *p) {
    p[0] = ds->label[r], p++;
    memcpy(p, ds->dense + r * b->Nd, b->Nd * sizeof(float)), p += b->Nd * sizeof(float);
    memcpy(p, ds->sparse + r * b->F, b->F * sizeof(uint32_t)), p += b->F * sizeof(uint32_t);
    if (b->prob) memcpy(p, ds->prob + r, sizeof(float));
}
static void row_unpack(rows_buf *b, const uint8_t *p, size_t k) {
    b->lab[k] = p[0], p++;
    memcpy(b->dense + k * b->Nd, p, b->Nd * sizeof(float)), p += b->Nd * sizeof(float);
    memcpy(b->sparse + k * b->F, p, b->F * sizeof(uint32_t)), p += b->F * sizeof(uint32_t);
    if (b->prob) memcpy(b->prob + k, p, sizeof(float));
}

// The in-memory way: the order of the n train rows, then every row read in it.
static int shuffle_in_memory(const bp_dataset *ds, bp_ds_writer *w, rows_buf *b, uint64_t n, uint64_t seed,
                             bp_progress *pg) {
    const int wide = n > UINT32_MAX;
    const size_t ew = wide ? sizeof(uint64_t) : sizeof(uint32_t);
    void *order = NULL;
    if (n && !(order = malloc(n * ew))) {
        char m[32];
        return bp_fail(BP_ENOMEM, "shuffle: out of memory: the order of %" PRIu64 " train rows needs %s (--memory or "
                       "--buckets bound it)", n, bp_fmt_bytes(m, sizeof m, (double)n * ew));
    }
    if (n && wide) order64(n, seed, 0, order);
    else if (n) order32(n, seed, 0, order);
    int rc = 0;
    for (uint64_t r0 = 0; !rc && r0 < n; r0 += CHUNK) {
        const size_t m = (size_t)BP_MIN((uint64_t)CHUNK, n - r0);
        for (size_t k = 0; k < m; k++)
            rows_take(b, ds, wide ? ((uint64_t *)order)[r0 + k] : ((uint32_t *)order)[r0 + k], k);
        rc = bp_ds_writer_append(w, m, b->lab, b->dense, b->sparse, b->prob);
        bp_progress_update(pg, r0 + m, NULL);
    }
    free(order);
    return rc;
}

// The bucketed way (K > 1; header above).  *largest: the largest bucket's rows.
static int shuffle_buckets(const bp_dataset *ds, bp_ds_writer *w, rows_buf *b, uint64_t n, uint64_t K, uint64_t seed,
                           const char *out, bp_progress *pg, uint64_t *largest) {
    const size_t rb = b->rb;
    uint64_t *start = bp_xcalloc(K + 1, sizeof *start);
    bp_rng r;
    bp_rng_seed(&r, seed, SHUF_ASSIGN);
    for (uint64_t i = 0; i < n; i++) start[rng_below64(&r, K) + 1]++; // the sizes first: one file, K regions
    *largest = 0;
    for (uint64_t k = 0; k < K; k++) *largest = BP_MAX(*largest, start[k + 1]), start[k + 1] += start[k];
    if (*largest > UINT32_MAX) { // (a bucket's order has 4-byte entries; such a bucket would not fit anyway)
        free(start);
        return bp_fail(BP_EUSAGE, "shuffle: %" PRIu64 " buckets leave one of %" PRIu64 " rows, more than 2^32: use "
                       "more buckets", K, *largest);
    }

    size_t nt = strlen(out) + 48;
    char *tmp = bp_xmalloc(nt), *what = bp_xmalloc(nt);
    snprintf(tmp, nt, "%s.shuffle.XXXXXX", out);
    snprintf(what, nt, "%s (the shuffle's temporary file beside it)", out);
    const int fd = mkstemp(tmp);
    int rc = 0;
    if (fd < 0)
        rc = bp_fail(BP_EIO, "%s: cannot create the shuffle's temporary file beside it: %s", out, strerror(errno));
    else unlink(tmp); // lives until closed: a crash leaves nothing behind
    free(tmp);
    if (!rc && n) {
        const int e = posix_fallocate(fd, 0, (off_t)(n * rb));
        char m[32];
        if (e == ENOSPC || e == EFBIG)
            rc = bp_fail(BP_EIO, "%s: no room beside it for the shuffle's temporary copy of the %" PRIu64 " train rows "
                         "(%s): %s", out, n, bp_fmt_bytes(m, sizeof m, (double)(n * rb)), strerror(e));
    }

    // Pass 1: each row, in input order, appended to its bucket's region through a buffer.
    const size_t per = BP_MAX((size_t)1, BP_MIN(SHUF_BUF_ONE, SHUF_BUF_ALL / K) / rb); // rows per buffer
    uint8_t *buf = rc ? NULL : bp_xmalloc(K * per * rb);
    uint64_t *fill = bp_xcalloc(K, sizeof *fill), *put = bp_xmalloc(K * sizeof *put);
    memcpy(put, start, K * sizeof *put);
    bp_rng_seed(&r, seed, SHUF_ASSIGN);
    for (uint64_t i = 0; !rc && i < n; i++) {
        const uint64_t k = rng_below64(&r, K);
        row_pack(b, ds, i, buf + (k * per + fill[k]) * rb);
        if (++fill[k] == per)
            rc = bp_pwrite_all(fd, buf + k * per * rb, per * rb, put[k] * rb, what), put[k] += per, fill[k] = 0;
        if ((i & 0xffff) == 0) bp_progress_update(pg, i, NULL);
    }
    for (uint64_t k = 0; !rc && k < K; k++)
        if (fill[k]) rc = bp_pwrite_all(fd, buf + k * per * rb, fill[k] * rb, put[k] * rb, what), put[k] += fill[k];
    for (uint64_t k = 0; !rc && k < K; k++) BP_ASSERT(put[k] == start[k + 1]);
    free(buf), free(fill), free(put);

    // Pass 2: each bucket read back whole and written in its own order.
    uint8_t *rows = rc ? NULL : malloc(*largest * rb + 1);
    uint32_t *perm = rc ? NULL : malloc((*largest ? *largest : 1) * sizeof *perm);
    if (!rc && (!rows || !perm)) {
        char m[32];
        rc = bp_fail(BP_ENOMEM, "shuffle: out of memory: the largest of %" PRIu64 " buckets, %" PRIu64 " rows, needs "
                     "%s; more buckets make it smaller (--buckets, or --memory)", K, *largest,
                     bp_fmt_bytes(m, sizeof m, (double)*largest * (double)(rb + sizeof *perm)));
    }
    for (uint64_t k = 0; !rc && k < K; k++) {
        const uint64_t m = start[k + 1] - start[k];
        if (!m) continue;
        rc = bp_pread_all(fd, rows, m * rb, start[k] * rb, what);
        order32(m, seed, k, perm);
        for (uint64_t r0 = 0; !rc && r0 < m; r0 += CHUNK) {
            const size_t c = (size_t)BP_MIN((uint64_t)CHUNK, m - r0);
            for (size_t j = 0; j < c; j++) row_unpack(b, rows + (size_t)perm[r0 + j] * rb, j);
            rc = bp_ds_writer_append(w, c, b->lab, b->dense, b->sparse, b->prob);
        }
        bp_progress_update(pg, n + start[k + 1], NULL);
    }
    free(rows), free(perm), free(start), free(what);
    if (fd >= 0) close(fd);
    return rc;
}

int cmd_shuffle(int argc, char **argv) {
    const char *out = NULL;
    int64_t seed, buckets, mem_mib;
    const cli_opt opts[] = {
        CLI_STR("out", 'o', &out, NULL, "output dataset (may be the input: it is replaced whole at the end)"),
        CLI_I64("seed", 's', &seed, 1, 0, INT64_MAX, "seed of the order (same dataset, seed and buckets: same bytes)"),
        CLI_I64("buckets", 0, &buckets, 1, 1, SHUF_MAX_BUCKETS,
                "shuffle through this many buckets in a temporary file beside the output: memory for the largest "
                "bucket instead of the whole order, and sequential reads (1: in memory)"),
        CLI_I64("memory", 0, &mem_mib, 0, 0, INT64_MAX / (1 << 20),
                "MiB the shuffle may hold: the fewest buckets whose largest fits (printed; 0: --buckets decides)"),
        CLI_END,
    };
    char **pos = NULL;
    int npos;
    cli_given given;
    int rc = cli_parse_given("bagpipe shuffle", "[options] -o OUT DATASET", opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    cli_warn_overridden(&given);
    if (npos != 1 || !out) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "shuffle: expected -o OUT and one dataset file (see 'bagpipe shuffle "
                                           "--help')"));
    }
    if (mem_mib && cli_was_given(&given, opts, "buckets")) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "shuffle: --memory and --buckets both given: --memory chooses the buckets"));
    }
    bp_dataset ds;
    rc = cmd_open_dataset(&ds, pos[0]);
    free(pos);
    if (rc) return cmd_exit(rc);
    const bp_ds_info *in = &ds.info;
    const uint64_t n_train = in->split[0];
    rows_buf b;
    rows_init(&b, &ds);
    char m1[32], m2[32];
    uint64_t K = (uint64_t)buckets;
    if (mem_mib) { // a bucket of n/K rows holds 4 + rb bytes per row; a quarter left for its excess and the rest
        const double room = (double)mem_mib * (1 << 20) * 0.75, need = (double)n_train * (double)(b.rb + 4);
        K = need <= room ? 1 : (uint64_t)(need / room) + 1;
        if (K > SHUF_MAX_BUCKETS) {
            rows_free(&b), bp_ds_close(&ds);
            return cmd_exit(bp_fail(BP_EUSAGE, "shuffle: --memory %" PRId64 ": the %" PRIu64 " train rows (%s) need "
                                    "more than %d buckets of that size; give more memory", mem_mib, n_train,
                                    bp_fmt_bytes(m1, sizeof m1, need), SHUF_MAX_BUCKETS));
        }
        fprintf(stderr, "shuffle: --memory %" PRId64 " MiB: %" PRIu64 " bucket%s (--buckets %" PRIu64 " gives the same "
                "bytes)\n", mem_mib, K, K == 1 ? "" : "s", K);
    } else if (K == 1 && (double)n_train * (double)b.rb > (double)bp_mem_available()) {
        fprintf(stderr, "shuffle: note: the %" PRIu64 " train rows (%s) exceed the memory available (%s): they are "
                "read in random order from the file; --memory or --buckets reads them in sequence\n", n_train,
                bp_fmt_bytes(m1, sizeof m1, (double)n_train * (double)b.rb),
                bp_fmt_bytes(m2, sizeof m2, (double)bp_mem_available()));
    }
    if (K > BP_MAX(n_train, (uint64_t)1)) K = BP_MAX(n_train, (uint64_t)1); // (an empty bucket changes no byte)
    const double t0 = bp_now();
    bp_ds_info tmpl = *in;
    char head[64]; // the source says what was done, then what it was done to (cut at the field's size)
    int hn = K > 1 ? snprintf(head, sizeof head, "shuffle --seed %" PRId64 " --buckets %" PRIu64 " of: ", seed, K)
                   : snprintf(head, sizeof head, "shuffle --seed %" PRId64 " of: ", seed);
    snprintf(tmpl.source, sizeof tmpl.source, "%s%.*s", head, (int)(sizeof tmpl.source - 1 - (size_t)hn), in->source);
    bp_ds_writer *w = NULL;
    if ((rc = bp_ds_writer_open_sized(&w, out, &tmpl, in->rows)) != 0) { // the output is checked first
        rows_free(&b), bp_ds_close(&ds);
        return cmd_exit(rc);
    }
    bp_progress pg;
    bp_progress_init(&pg, "shuffle", "rows", in->rows + (K > 1 ? n_train : 0));
    uint64_t largest = n_train;
    rc = K > 1 ? shuffle_buckets(&ds, w, &b, n_train, K, (uint64_t)seed, out, &pg, &largest)
               : shuffle_in_memory(&ds, w, &b, n_train, (uint64_t)seed, &pg);
    const uint64_t done = K > 1 ? n_train : 0; // (the progress counts the bucketed train rows twice)
    for (uint64_t r0 = n_train; !rc && r0 < in->rows; r0 += CHUNK) { // val and test stay in place
        const size_t m = (size_t)BP_MIN((uint64_t)CHUNK, in->rows - r0);
        for (size_t k = 0; k < m; k++) rows_take(&b, &ds, r0 + k, k);
        rc = bp_ds_writer_append(w, m, b.lab, b.dense, b.sparse, b.prob);
        bp_progress_update(&pg, done + r0 + m, NULL);
    }
    bp_progress_finish(&pg);
    if (!rc) {
        rc = bp_ds_writer_finish(w, in->card, in->split);
        w = NULL;
    }
    bp_ds_writer_abort(w);
    if (!rc && K > 1)
        printf("shuffled the %" PRIu64 " train rows of %s (seed %" PRId64 ", %" PRIu64 " buckets, the largest %" PRIu64
               " rows: %s in memory; val %" PRIu64 " and test %" PRIu64 " rows in place) into %s in %.1f s\n", n_train,
               ds.path, seed, K, largest, bp_fmt_bytes(m1, sizeof m1, (double)largest * (double)(b.rb + 4)),
               in->split[1], in->split[2], out, bp_now() - t0);
    else if (!rc)
        printf("shuffled the %" PRIu64 " train rows of %s (seed %" PRId64 "; val %" PRIu64 " and test %" PRIu64
               " rows in place) into %s in %.1f s\n", n_train, ds.path, seed, in->split[1], in->split[2], out,
               bp_now() - t0);
    rows_free(&b);
    bp_ds_close(&ds);
    return cmd_exit(rc);
}
