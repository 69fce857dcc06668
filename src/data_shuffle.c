// `bagpipe shuffle`: a dataset with its train rows in a random order (DESIGN §3: rows are stored in
// training order, so every mode trains them in the file's order).  The DLRM reference shuffles the
// train days when it preprocesses Criteo (its default --data-randomize total); a log in time order
// trained as it is learns day by day.  Val and test keep their rows, order and place, so a model
// evaluated on the shuffled dataset sees exactly the rows it saw before.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "data_bin.h"
#include "progress.h"

// Uniform in [0, n), unbiased (rejection of the top partial range), for n up to 2^64 - 1.
static uint64_t rng_below64(bp_rng *r, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        const uint64_t x = bp_rng_u64(r);
        if (x < limit) return x % n;
    }
}

// The permutation of [0, n) that the train rows are written in: Fisher-Yates from the seed, the
// same on every machine (the generator is bagpipe's own).  4-byte entries below 2^32 rows (the
// Kaggle log's 39M train rows: 157 MB), else 8.
#define SHUFFLE_ORDER(T, name)                                                                     \
    static void name(uint64_t n, uint64_t seed, T *order) {                                        \
        for (uint64_t i = 0; i < n; i++) order[i] = (T)i;                                          \
        bp_rng r;                                                                                  \
        bp_rng_seed(&r, seed, 0x5348554646ull); /* "SHUFF": a stream of its own */                 \
        for (uint64_t i = n; i > 1; i--) {                                                         \
            const uint64_t j = rng_below64(&r, i);                                                 \
            const T t = order[i - 1];                                                              \
            order[i - 1] = order[j], order[j] = t;                                                 \
        }                                                                                          \
    }
SHUFFLE_ORDER(uint32_t, order32)
SHUFFLE_ORDER(uint64_t, order64)

#define CHUNK 65536 // rows gathered per append

int cmd_shuffle(int argc, char **argv) {
    const char *out = NULL;
    int64_t seed;
    const cli_opt opts[] = {
        CLI_STR("out", 'o', &out, NULL, "output dataset (may be the input: it is replaced whole at the end)"),
        CLI_I64("seed", 's', &seed, 1, 0, INT64_MAX, "seed of the order (same dataset and seed: same bytes)"),
        CLI_END,
    };
    char **pos = NULL;
    int npos;
    int rc = cli_parse("bagpipe shuffle", "[options] -o OUT DATASET", opts, argc, argv, &pos, &npos);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    if (npos != 1 || !out) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "shuffle: expected -o OUT and one dataset file (see 'bagpipe shuffle "
                                           "--help')"));
    }
    bp_dataset ds;
    rc = cmd_open_dataset(&ds, pos[0]);
    free(pos);
    if (rc) return cmd_exit(rc);
    const bp_ds_info *in = &ds.info;
    const uint64_t n_train = in->split[0], Nd = in->n_dense, F = in->n_sparse;
    const double t0 = bp_now();
    bp_ds_info tmpl = *in;
    char head[64]; // the source says what was done, then what it was done to (cut at the field's size)
    int hn = snprintf(head, sizeof head, "shuffle --seed %" PRId64 " of: ", seed);
    snprintf(tmpl.source, sizeof tmpl.source, "%s%.*s", head, (int)(sizeof tmpl.source - 1 - (size_t)hn), in->source);
    bp_ds_writer *w = NULL;
    if ((rc = bp_ds_writer_open_sized(&w, out, &tmpl, in->rows)) != 0) { // the output is checked first
        bp_ds_close(&ds);
        return cmd_exit(rc);
    }
    const int wide = n_train > UINT32_MAX;
    const size_t ew = wide ? sizeof(uint64_t) : sizeof(uint32_t);
    void *order = NULL;
    if (n_train && !(order = malloc(n_train * ew))) {
        char b[32];
        rc = bp_fail(BP_ENOMEM, "shuffle: out of memory: the order of %" PRIu64 " train rows needs %s", n_train,
                     bp_fmt_bytes(b, sizeof b, (double)n_train * ew));
        bp_ds_writer_abort(w);
        bp_ds_close(&ds);
        return cmd_exit(rc);
    }
    if (n_train && wide) order64(n_train, (uint64_t)seed, order);
    else if (n_train) order32(n_train, (uint64_t)seed, order);
    uint8_t *lab = bp_xmalloc(CHUNK);
    float *dense = bp_xmalloc((size_t)CHUNK * (Nd ? Nd : 1) * sizeof *dense);
    uint32_t *sparse = bp_xmalloc((size_t)CHUNK * (F ? F : 1) * sizeof *sparse);
    float *prob = ds.prob ? bp_xmalloc((size_t)CHUNK * sizeof *prob) : NULL;
    bp_progress pg;
    bp_progress_init(&pg, "shuffle", "rows", in->rows);
    for (uint64_t r0 = 0; !rc && r0 < in->rows; r0 += CHUNK) {
        const size_t n = (size_t)BP_MIN((uint64_t)CHUNK, in->rows - r0);
        for (size_t k = 0; k < n; k++) {
            const uint64_t r = r0 + k; // val and test stay in place
            const uint64_t src_row = r >= n_train ? r : wide ? ((uint64_t *)order)[r] : ((uint32_t *)order)[r];
            lab[k] = ds.label[src_row];
            memcpy(dense + k * Nd, ds.dense + src_row * Nd, Nd * sizeof *dense);
            memcpy(sparse + k * F, ds.sparse + src_row * F, F * sizeof *sparse);
            if (prob) prob[k] = ds.prob[src_row];
        }
        rc = bp_ds_writer_append(w, n, lab, dense, sparse, prob);
        bp_progress_update(&pg, r0 + n, NULL);
    }
    bp_progress_finish(&pg);
    if (!rc) {
        rc = bp_ds_writer_finish(w, in->card, in->split);
        w = NULL;
    }
    bp_ds_writer_abort(w);
    if (!rc)
        printf("shuffled the %" PRIu64 " train rows of %s (seed %" PRId64 "; val %" PRIu64 " and test %" PRIu64
               " rows in place) into %s in %.1f s\n", n_train, ds.path, seed, in->split[1], in->split[2], out,
               bp_now() - t0);
    free(order), free(lab), free(dense), free(sparse), free(prob);
    bp_ds_close(&ds);
    return cmd_exit(rc);
}
