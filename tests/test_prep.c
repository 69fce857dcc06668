// prep: raw Criteo / Avazu text -> binary dataset, end to end, with exact expected values.
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "data_avazu.h"
#include "data_bin.h"
#include "data_criteo.h"
#include "data_lines.h"
#include "data_prep.h"
#include "data_synth.h"
#include "data_vocab.h"
#include "dist_util.h"
#include "test.h"

// ---------------------------------------------------------------------------------------------
// Helpers

// test_path() rotates 8 buffers; the paths a test holds on to live here (64 slots).
static const char *tpath(const char *name) {
    static char ring[64][512];
    static int next;
    char *b = ring[next++ % 64];
    snprintf(b, sizeof ring[0], "%s", test_path(name));
    return b;
}

static const char *write_bytes(const char *name, const char *data, size_t n) {
    const char *path = tpath(name);
    FILE *f = fopen(path, "wb");
    BP_ASSERTF(f, "cannot create %s", path);
    BP_ASSERT(fwrite(data, 1, n, f) == n);
    BP_ASSERT(fclose(f) == 0);
    return path;
}

static const char *write_text(const char *name, const char *text) { return write_bytes(name, text, strlen(text)); }

static const char *write_gz(const char *name, const char *data, size_t n) {
    const char *path = tpath(name);
    gzFile gz = gzopen(path, "wb6");
    BP_ASSERT(gz);
    BP_ASSERT(n == 0 || gzwrite(gz, data, (unsigned)n) == (int)n);
    BP_ASSERT(gzclose(gz) == Z_OK);
    return path;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

// A growing text buffer.
typedef struct {
    char *s;
    size_t n, cap;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (t->s && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        t->cap = 2 * (t->cap + (size_t)k + 64);
        t->s = bp_xrealloc(t->s, t->cap);
    }
}

// Row r of a deterministic Criteo file: label r%3==0; I1 = r, I2 = -r (clamps to 0), I3 empty
// on odd rows, I4 = 1000003 * r, I5..I13 = i; C1 = r%4, C2 empty when r%3==0 else 0xabcd,
// C3 = r, C4..C26 = j + 1 (all written as 8 hex digits).
static int64_t crow_int(int r, int i) {
    switch (i) {
    case 0: return r;
    case 1: return -r;
    case 2: return r % 2 ? -1 : 7 * r; // -1 marks empty
    case 3: return 1000003LL * r;
    default: return i;
    }
}
static uint64_t crow_key(int r, int j) {
    switch (j) {
    case 0: return (uint64_t)(r % 4);
    case 1: return r % 3 == 0 ? CRITEO_MISSING : 0xabcd;
    case 2: return (uint64_t)r;
    default: return (uint64_t)j + 1;
    }
}
static void crow(text *t, int r) {
    text_add(t, "%d", r % 3 == 0);
    for (int i = 0; i < CRITEO_ND; i++) {
        int64_t x = crow_int(r, i);
        if (i == 2 && x < 0) text_add(t, "\t");
        else text_add(t, "\t%lld", (long long)x);
    }
    for (int j = 0; j < CRITEO_F; j++) {
        uint64_t k = crow_key(r, j);
        if (k == CRITEO_MISSING) text_add(t, "\t");
        else text_add(t, "\t%08llx", (unsigned long long)k);
    }
    text_add(t, "\n");
}

static const char *criteo_file(const char *name, int first, int rows) {
    text t = {0};
    for (int r = first; r < first + rows; r++) crow(&t, r);
    const char *path = write_bytes(name, t.s, t.n);
    free(t.s);
    return path;
}

static int run_prep(prep_format fmt, const char *const *inputs, int n, const char *out, uint32_t min_count,
                    uint64_t max_ind, prep_stats *st) {
    prep_opts o;
    prep_opts_default(&o);
    o.format = fmt;
    o.inputs = inputs;
    o.n_inputs = n;
    o.out = out;
    o.min_count = min_count;
    o.max_ind_range = max_ind;
    return prep_run(&o, st);
}

// Expected frequency ids of column vals (n values): count desc, value asc; with K > 1 values
// seen fewer than K times get the last id.  Brute force, independent of data_vocab.
static void expected_freq_ids(const uint64_t *vals, int n, uint32_t K, uint32_t *ids, uint64_t *card) {
    uint64_t *dv = bp_xmalloc((size_t)n * sizeof *dv);
    int *cnt = bp_xcalloc((size_t)n, sizeof *cnt);
    int nd = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < nd && dv[k] != vals[i]) k++;
        if (k == nd) dv[nd++] = vals[i];
        cnt[k]++;
    }
    uint64_t kept = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (dv[k] != vals[i]) k++;
        if ((uint32_t)cnt[k] < K) continue;
        uint32_t rank = 0; // distinct values ahead of this one
        for (int m = 0; m < nd; m++)
            if ((uint32_t)cnt[m] >= K && (cnt[m] > cnt[k] || (cnt[m] == cnt[k] && dv[m] < dv[k]))) rank++;
        ids[i] = rank;
    }
    for (int m = 0; m < nd; m++) kept += (uint32_t)cnt[m] >= K;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (dv[k] != vals[i]) k++;
        if ((uint32_t)cnt[k] < K) ids[i] = (uint32_t)kept;
    }
    *card = kept + (K > 1);
    free(dv);
    free(cnt);
}

// ---------------------------------------------------------------------------------------------
// Criteo values

TEST(prep_criteo_hashed_values_exact) {
    // A hand-written line: a huge integer, a negative one, uppercase and short hex, empty fields.
    const char *line = "1\t0\t-5\t\t123456789012\t1\t2\t3\t4\t5\t6\t7\t8\t9"
                       "\t68fd1e64\tFFFFFFFF\t1f\t\t0\t00000001\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504"
                       "\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9"
                       "\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\t\n";
    text t = {0};
    text_add(&t, "%s", line);
    for (int r = 1; r <= 40; r++) crow(&t, r);
    const char *in = write_bytes("h.tsv", t.s, t.n);
    free(t.s);
    const char *out = tpath("h.bin");
    const uint64_t N = 1000003;
    prep_stats st;
    ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, 1, N, &st));
    ASSERT_EQ(st.rows, 41);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    const bp_ds_info *in_ = &ds.info;
    ASSERT_TRUE(in_->kind == BP_KIND_CRITEO && in_->idmap == BP_IDMAP_HASH && in_->max_ind_range == N);
    ASSERT_TRUE(in_->transform == BP_TRANSFORM_LOG1P && in_->n_dense == 13 && in_->n_sparse == 26);
    ASSERT_EQ(in_->rows, 41);
    for (int f = 0; f < 26; f++) ASSERT_EQ(in_->card[f], N);
    // Row 0, by hand.
    ASSERT_EQ(ds.label[0], 1);
    const double want_dense[13] = {0, 0, 0, 123456789012.0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 0; i < 13; i++) ASSERT_TRUE(ds.dense[i] == (float)log1p(want_dense[i]));
    ASSERT_EQ(ds.sparse[0], 0x68fd1e64ull % N);
    ASSERT_EQ(ds.sparse[1], 0xffffffffull % N);
    ASSERT_EQ(ds.sparse[2], 0x1f);
    ASSERT_EQ(ds.sparse[3], ((uint64_t)1 << 32) % N); // empty: the missing value 2^32
    ASSERT_EQ(ds.sparse[4], 0);
    ASSERT_EQ(ds.sparse[5], 1);
    ASSERT_EQ(ds.sparse[25], ((uint64_t)1 << 32) % N);
    // The generated rows.
    for (int r = 1; r <= 40; r++) {
        ASSERT_EQ(ds.label[r], r % 3 == 0);
        for (int i = 0; i < 13; i++) {
            int64_t x = crow_int(r, i);
            ASSERT_TRUE(ds.dense[r * 13 + i] == (float)log1p((double)(x > 0 ? x : 0)));
        }
        for (int j = 0; j < 26; j++) ASSERT_EQ(ds.sparse[r * 26 + j], crow_key(r, j) % N);
    }
    bp_ds_close(&ds);
    // A modulus above 2^32 - 1 takes the 64-bit path: same ids as plain `%`.
    ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, 1, (uint64_t)1 << 32, &st));
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_EQ(ds.sparse[1], 0xffffffffull);
    ASSERT_EQ(ds.sparse[3], 0); // 2^32 mod 2^32
    bp_ds_close(&ds);
}

// --compact: each table's residues (value mod N) present, numbered 0..k-1 in their order, k rows;
// checked against a brute-force rank of the uncompacted file's ids, table by table.  The other
// sections are the uncompacted file's; a table with every residue present keeps its ids, and
// with every table so (N = 1 here) the file records no digest.
TEST(prep_compact_numbers_the_residues_present) {
    const char *in = criteo_file("cmp.tsv", 0, 3000), *plain = tpath("cmp_plain.bin"), *comp = tpath("cmp.bin");
    for (int k = 0; k < 2; k++) {
        const uint64_t N = k ? 1 : 9973;
        prep_opts o;
        prep_opts_default(&o);
        o.inputs = &in, o.n_inputs = 1, o.max_ind_range = N;
        prep_stats st;
        o.out = plain;
        ASSERT_OK(prep_run(&o, &st));
        o.out = comp, o.compact = 1;
        ASSERT_OK(prep_run(&o, &st));
        bp_dataset a, b;
        ASSERT_OK(bp_ds_open(&a, plain, BP_DS_VERIFY));
        ASSERT_OK(bp_ds_open(&b, comp, BP_DS_VERIFY)); // (the renumbered section's CRC)
        ASSERT_TRUE(b.info.idmap == BP_IDMAP_HASH && b.info.max_ind_range == N && a.info.vocab_fp == 0);
        ASSERT_EQ(b.info.rows, 3000);
        ASSERT_TRUE(memcmp(a.label, b.label, 3000) == 0 && memcmp(a.dense, b.dense, 3000 * 13 * sizeof(float)) == 0);
        uint8_t *seen = bp_xcalloc(N, 1);
        int smaller = 0;
        for (int f = 0; f < 26; f++) {
            memset(seen, 0, N);
            for (int r = 0; r < 3000; r++) seen[a.sparse[r * 26 + f]] = 1;
            uint64_t distinct = 0;
            for (uint64_t x = 0; x < N; x++) distinct += seen[x];
            ASSERT_EQ(b.info.card[f], distinct);
            smaller += distinct < N;
            for (int r = 0; r < 3000 && distinct == N; r++) ASSERT_EQ(b.sparse[r * 26 + f], a.sparse[r * 26 + f]);
            for (int r = 0; r < 3000; r++) {
                const uint32_t x = a.sparse[r * 26 + f];
                uint32_t below = 0;
                for (uint32_t y = 0; y < x; y++) below += seen[y];
                ASSERT_EQ(b.sparse[r * 26 + f], below);
            }
        }
        free(seen);
        if (k == 0) ASSERT_TRUE(smaller > 0 && b.info.vocab_fp != 0);
        else ASSERT_TRUE(smaller == 0 && b.info.vocab_fp == 0);
        bp_ds_close(&a), bp_ds_close(&b);
    }
    // Another day, prepped apart: other residues, another digest.
    const char *in2 = criteo_file("cmp2.tsv", 5000, 3000), *comp2 = tpath("cmp2.bin");
    uint64_t fp[2];
    for (int k = 0; k < 2; k++) {
        prep_opts o;
        prep_opts_default(&o);
        o.inputs = k ? &in2 : &in, o.n_inputs = 1, o.max_ind_range = 9973, o.compact = 1, o.out = k ? comp2 : comp;
        ASSERT_OK(prep_run(&o, NULL));
        bp_dataset d;
        ASSERT_OK(bp_ds_open(&d, o.out, 0));
        fp[k] = d.info.vocab_fp;
        bp_ds_close(&d);
    }
    ASSERT_TRUE(fp[0] != fp[1]);
    // A model of one such file is not evaluated on the other, even where their tables have the
    // same sizes (one value per table: one row each).
    char *msg = NULL;
    const char *one[2] = {tpath("one_a.bin"), tpath("one_b.bin")}, *model = tpath("one_model");
    for (int k = 0; k < 2; k++) {
        text t = {0};
        for (int r = 0; r < 4; r++) {
            text_add(&t, "1");
            for (int i = 0; i < 13; i++) text_add(&t, "\t1");
            for (int j = 0; j < 26; j++) text_add(&t, "\t%08x", k + 1);
            text_add(&t, "\n");
        }
        const char *tsv = write_bytes(k ? "one_b.tsv" : "one_a.tsv", t.s, t.n);
        free(t.s);
        ASSERT_EQ(test_run(NULL, 20, "%s prep -q --max-ind-range 1000 --compact -o %s %s", test_bin(), one[k], tsv), 0);
    }
    ASSERT_EQ(test_run(NULL, 60, "%s train %s --batch-size 2 --iters 1 --no-eval --save %s", test_bin(), one[0], model),
              0);
    ASSERT_EQ(test_run(&msg, 60, "%s eval --load %s %s", test_bin(), model, one[1]), 1);
    ASSERT_STR_CONTAINS(msg, "trained on hashed ids compacted over other residues than those of dataset");
    free(msg);
    // The flag alone is refused, naming what it needs.
    ASSERT_EQ(test_run(&msg, 20, "%s prep --compact -o %s %s", test_bin(), tpath("cmp3.bin"), in), 2);
    ASSERT_STR_CONTAINS(msg, "--compact renumbers hashed ids: give --max-ind-range N too");
    free(msg);
}

TEST(prep_criteo_log1p_table_matches_libm) {
    for (int64_t x = -3; x < 5000; x++) ASSERT_TRUE(criteo_log1p(x) == (float)log1p((double)(x > 0 ? x : 0)));
    ASSERT_TRUE(criteo_log1p(INT64_MAX) == (float)log1p((double)INT64_MAX));
}

TEST(prep_criteo_frequency_ids_rare_bucket_and_ties) {
    // Column C1 by hand: b, c twice each (tie: 0xb < 0xc), a, d once (tie: a < d); C2 has the
    // missing value 3 times and 0x5 twice; C3 ties the missing value with 0xffffffff.
    static const char *c1[] = {"0000000c", "0000000b", "0000000a", "0000000b", "0000000d", "0000000c"};
    static const char *c2[] = {"", "00000005", "", "00000005", "", "00000009"};
    static const char *c3[] = {"", "ffffffff", "00000001", "00000002", "00000003", "00000004"};
    text t = {0};
    for (int r = 0; r < 6; r++) {
        text_add(&t, "0\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t%s\t%s\t%s", c1[r], c2[r], c3[r]);
        for (int j = 3; j < 26; j++) text_add(&t, "\t%08x", r % 2 ? j : 0);
        text_add(&t, "\n");
    }
    const char *in = write_bytes("f.tsv", t.s, t.n);
    free(t.s);
    const char *out = tpath("f.bin");
    prep_stats st;
    bp_dataset ds;
    // min count 1: every value its own id.
    ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, 1, 0, &st));
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_TRUE(ds.info.idmap == BP_IDMAP_FREQ && ds.info.min_count == 1 && ds.info.max_ind_range == 0);
    const uint32_t want_c1[6] = {1, 0, 2, 0, 3, 1}; // b=0, c=1, a=2, d=3
    const uint32_t want_c2[6] = {0, 1, 0, 1, 0, 2}; // missing=0, 5=1, 9=2
    const uint32_t want_c3[6] = {5, 4, 0, 1, 2, 3}; // all once: by value, missing (2^32) last
    for (int r = 0; r < 6; r++) {
        ASSERT_EQ(ds.sparse[r * 26 + 0], want_c1[r]);
        ASSERT_EQ(ds.sparse[r * 26 + 1], want_c2[r]);
        ASSERT_EQ(ds.sparse[r * 26 + 2], want_c3[r]);
    }
    ASSERT_EQ(ds.info.card[0], 4);
    ASSERT_EQ(ds.info.card[1], 3);
    ASSERT_EQ(ds.info.card[2], 6);
    bp_ds_close(&ds);
    // min count 2: a, d, 9 and all of C3 fall into the rare bucket, the last id.
    ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, 2, 0, &st));
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_EQ(ds.info.min_count, 2);
    const uint32_t want2_c1[6] = {1, 0, 2, 0, 2, 1};
    const uint32_t want2_c2[6] = {0, 1, 0, 1, 0, 2};
    for (int r = 0; r < 6; r++) {
        ASSERT_EQ(ds.sparse[r * 26 + 0], want2_c1[r]);
        ASSERT_EQ(ds.sparse[r * 26 + 1], want2_c2[r]);
        ASSERT_EQ(ds.sparse[r * 26 + 2], 0);
    }
    ASSERT_EQ(ds.info.card[0], 3);
    ASSERT_EQ(ds.info.card[1], 3);
    ASSERT_EQ(ds.info.card[2], 1); // only the rare bucket
    ASSERT_EQ(ds.info.card[3], 3); // 0 three times, 3 three times: both kept, plus the bucket
    bp_ds_close(&ds);
}

TEST(prep_criteo_frequency_matches_brute_force) {
    const int R = 300;
    const char *in = criteo_file("bf.tsv", 0, R);
    const char *out = tpath("bf.bin");
    uint64_t *col = bp_xmalloc(R * sizeof *col);
    uint32_t *ids = bp_xmalloc(R * sizeof *ids);
    for (uint32_t K = 1; K <= 3; K += 2) {
        prep_stats st;
        ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, K, 0, &st));
        bp_dataset ds;
        ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
        for (int j = 0; j < 26; j++) {
            for (int r = 0; r < R; r++) col[r] = crow_key(r, j);
            uint64_t card;
            expected_freq_ids(col, R, K, ids, &card);
            ASSERT_EQ(ds.info.card[j], card);
            for (int r = 0; r < R; r++) ASSERT_EQ(ds.sparse[r * 26 + j], ids[r]);
        }
        bp_ds_close(&ds);
    }
    free(col);
    free(ids);
}

TEST(prep_vocab_grows_and_ranks_like_a_sort) {
    // Enough distinct keys to grow the table several times, narrow and wide.
    for (int wide = 0; wide <= 1; wide++) {
        vocab v;
        ASSERT_OK(vocab_init(&v, wide));
        const int n = 100000;
        uint64_t *keys = bp_xmalloc(n * sizeof *keys);
        uint32_t *ids = bp_xmalloc(n * sizeof *ids);
        bp_rng rng;
        bp_rng_seed(&rng, 7, (uint64_t)wide);
        for (int i = 0; i < n; i++) {
            uint64_t k = (uint64_t)bp_rng_below(&rng, 8000) * 2654435761u % 4294967291u; // ~8000 distinct
            // The extra key about as often as the others: it ranks somewhere in the middle.
            keys[i] = wide ? bp_mix64(k) : (i % 8000 == 0 ? VOCAB_KEY_EXTRA : k);
        }
        ASSERT_OK(vocab_count(&v, keys, 1, n));
        uint64_t distinct = vocab_distinct(&v);
        ASSERT_TRUE(distinct > 7900 && distinct <= 8001);
        ASSERT_TRUE(v.bits > 10); // grew
        ASSERT_OK(vocab_rank(&v, 5));
        ASSERT_TRUE(v.kept > 4096); // the radix sort, not the small-array qsort
        if (!wide) ASSERT_TRUE(v.extra_id > 0 && v.extra_id < v.kept - 1);
        ASSERT_EQ(vocab_map(&v, keys, 1, n, ids, 1), n);
        // Check the order: an id is smaller exactly when (count desc, key asc) says so.
        uint32_t *cnt = bp_xcalloc(v.card, sizeof *cnt);
        uint64_t *key_of = bp_xcalloc(v.card, sizeof *key_of);
        for (int i = 0; i < n; i++) {
            ASSERT_TRUE(ids[i] < v.card);
            cnt[ids[i]]++;
            if (ids[i] < v.kept) {
                ASSERT_TRUE(key_of[ids[i]] == 0 || key_of[ids[i]] == keys[i] + 1); // one key per kept id
                key_of[ids[i]] = keys[i] + 1;
            }
        }
        for (uint64_t r = 0; r < v.kept; r++) ASSERT_TRUE(cnt[r] >= 5);
        for (uint64_t r = 1; r < v.kept; r++)
            ASSERT_TRUE(cnt[r - 1] > cnt[r] || (cnt[r - 1] == cnt[r] && key_of[r - 1] < key_of[r]));
        ASSERT_EQ(v.card, v.kept + 1);
        // A key never counted is reported.
        uint64_t unseen = wide ? 12345 : 4294967295u;
        ASSERT_EQ(vocab_map(&v, &unseen, 1, 1, ids, 1), 0);
        free(cnt);
        free(key_of);
        free(keys);
        free(ids);
        vocab_free(&v);
    }
}

// The vocabulary digest follows the value -> id map, not the order the values were counted in
// nor the table's growth: the same keys counted reversed and in two runs give the same digest; one
// value more, a value counted often enough to rank first, or another rare threshold, another.
TEST(prep_vocab_fingerprint_follows_the_id_map) {
    for (int wide = 0; wide <= 1; wide++) {
        const int n = 20000;
        uint64_t *keys = bp_xmalloc(n * sizeof *keys), *rev = bp_xmalloc(n * sizeof *rev);
        bp_rng rng;
        bp_rng_seed(&rng, 11, (uint64_t)wide);
        for (int i = 0; i < n; i++) {
            const uint64_t k = bp_rng_below(&rng, 3000) * 2654435761u % 4294967291u;
            keys[i] = wide ? bp_mix64(k) : (i % 500 == 0 ? VOCAB_KEY_EXTRA : k);
        }
        for (int i = 0; i < n; i++) rev[i] = keys[n - 1 - i];
        uint64_t fp[5], distinct[5];
        for (int c = 0; c < 5; c++) {
            vocab v;
            ASSERT_OK(vocab_init(&v, wide));
            if (c == 1) { // reversed, in two runs
                ASSERT_OK(vocab_count(&v, rev, 1, n / 2));
                ASSERT_OK(vocab_count(&v, rev + n / 2, 1, n - n / 2));
            } else {
                ASSERT_OK(vocab_count(&v, keys, 1, n));
            }
            const uint64_t extra = wide ? 77 : 4294967290u; // a value not drawn (checked below)
            if (c == 2) ASSERT_OK(vocab_count(&v, &extra, 1, 1));
            if (c == 3)
                for (int k = 0; k < 100; k++) ASSERT_OK(vocab_count(&v, &keys[1], 1, 1));
            ASSERT_OK(vocab_rank(&v, c == 4 ? 3 : 1));
            fp[c] = vocab_fingerprint(&v), distinct[c] = vocab_distinct(&v);
            vocab_free(&v);
        }
        ASSERT_EQ(fp[0], fp[1]);
        ASSERT_EQ(distinct[2], distinct[0] + 1); // the extra value is a new one
        for (int c = 2; c < 5; c++) ASSERT_MSG(fp[c] != fp[0], "wide %d case %d", wide, c);
        free(keys), free(rev);
    }
}

// ---------------------------------------------------------------------------------------------
// Avazu

static const char *avazu_hdr = "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,"
                               "app_category,device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,"
                               "C16,C17,C18,C19,C20,C21\n";
static const char *avazu_rows[] = {
    "1000009418151094273,0,14102100,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,"
    "ddd2926e,44956a24,1,2,15706,320,50,1722,0,35,-1,79\n",
    "10000169349117863715,1,14102623,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,"
    "96809ac8,711ee120,1,0,15704,320,50,1722,0,35,100084,79\n",
    "10000371904215119486,0,14103005,1002,1,,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,"
    "b3cf8def,8a4875bd,1,0,15704,320,50,1722,0,35,100084,79\n",
};

TEST(prep_avazu_weekday) {
    ASSERT_EQ(avazu_weekday(0, 1, 1), 5);   // 2000-01-01 Saturday
    ASSERT_EQ(avazu_weekday(14, 10, 21), 1); // 2014-10-21 Tuesday (first day of Avazu's train)
    ASSERT_EQ(avazu_weekday(14, 10, 26), 6); // Sunday
    ASSERT_EQ(avazu_weekday(14, 10, 27), 0); // Monday
    ASSERT_EQ(avazu_weekday(24, 2, 29), 3);  // leap day, Thursday
    ASSERT_EQ(avazu_weekday(23, 2, 29), -1);
    ASSERT_EQ(avazu_weekday(14, 13, 1), -1);
    ASSERT_EQ(avazu_weekday(14, 4, 31), -1);
}

TEST(prep_avazu_hashed_and_frequency) {
    text t = {0};
    text_add(&t, "%s", avazu_hdr);
    for (int r = 0; r < 3; r++) text_add(&t, "%s", avazu_rows[r]);
    const char *in = write_bytes("a.csv", t.s, t.n);
    free(t.s);
    const char *out = tpath("a.bin");
    const uint64_t N = 1000;
    prep_stats st;
    ASSERT_OK(run_prep(PREP_AVAZU, &in, 1, out, 1, N, &st));
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_TRUE(ds.info.kind == BP_KIND_AVAZU && ds.info.n_dense == 0 && ds.info.n_sparse == 23);
    ASSERT_EQ(ds.info.rows, 3);
    ASSERT_EQ(ds.info.card[0], 24);
    ASSERT_EQ(ds.info.card[1], 7);
    ASSERT_EQ(ds.info.card[2], N);
    ASSERT_TRUE(ds.label[0] == 0 && ds.label[1] == 1 && ds.label[2] == 0);
    const uint32_t hod[3] = {0, 23, 5}, dow[3] = {1, 6, 3}; // Tue, Sun, Thu 2014-10-30
    for (int r = 0; r < 3; r++) {
        ASSERT_EQ(ds.sparse[r * 23 + 0], hod[r]);
        ASSERT_EQ(ds.sparse[r * 23 + 1], dow[r]);
    }
    ASSERT_EQ(ds.sparse[0 * 23 + 2], avazu_hash("1005", 4) % N);  // C1
    ASSERT_EQ(ds.sparse[2 * 23 + 2], avazu_hash("1002", 4) % N);
    ASSERT_EQ(ds.sparse[2 * 23 + 4], avazu_hash("", 0) % N);      // empty site_id
    ASSERT_EQ(ds.sparse[0 * 23 + 11], avazu_hash("ddd2926e", 8) % N); // device_ip
    ASSERT_EQ(ds.sparse[1 * 23 + 21], avazu_hash("100084", 6) % N);   // C20
    ASSERT_EQ(ds.sparse[0 * 23 + 21], avazu_hash("-1", 2) % N);
    bp_ds_close(&ds);

    // Frequency ids: C1 has 1005 twice, 1002 once; C20 has 100084 twice, -1 once.
    ASSERT_OK(run_prep(PREP_AVAZU, &in, 1, out, 1, 0, &st));
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_EQ(ds.info.card[0], 3);
    ASSERT_EQ(ds.info.card[1], 3);
    ASSERT_EQ(ds.info.card[2], 2);
    ASSERT_TRUE(ds.sparse[0 * 23 + 2] == 0 && ds.sparse[1 * 23 + 2] == 0 && ds.sparse[2 * 23 + 2] == 1);
    ASSERT_TRUE(ds.sparse[1 * 23 + 21] == 0 && ds.sparse[2 * 23 + 21] == 0 && ds.sparse[0 * 23 + 21] == 1);
    // hour of day: 0, 23, 5 once each -> by value
    ASSERT_TRUE(ds.sparse[0 * 23 + 0] == 0 && ds.sparse[1 * 23 + 0] == 2 && ds.sparse[2 * 23 + 0] == 1);
    // site_id: 1fbe01fe twice (id 0), empty once (id 1)
    ASSERT_TRUE(ds.sparse[0 * 23 + 4] == 0 && ds.sparse[2 * 23 + 4] == 1);
    ASSERT_EQ(ds.info.card[22], 1); // C21 always 79
    bp_ds_close(&ds);
}

TEST(prep_avazu_header_locates_columns) {
    // The same data with the columns in another order and no id column gives the same dataset.
    const char *in1;
    {
        text t = {0};
        text_add(&t, "%s", avazu_hdr);
        for (int r = 0; r < 3; r++) text_add(&t, "%s", avazu_rows[r]);
        in1 = write_bytes("o1.csv", t.s, t.n);
        free(t.s);
    }
    text t = {0};
    text_add(&t, "C21,hour,click,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,"
                 "device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20\r\n");
    for (int r = 0; r < 3; r++) {
        // split the original: id, click, hour, rest..., C21
        char line[512];
        snprintf(line, sizeof line, "%s", avazu_rows[r]);
        line[strcspn(line, "\n")] = 0;
        char *f[24];
        int nf = 0;
        for (char *p = line; nf < 24;) {
            f[nf++] = p;
            char *c = strchr(p, ',');
            if (!c) break;
            *c = 0;
            p = c + 1;
        }
        ASSERT_EQ(nf, 24);
        text_add(&t, "%s,%s,%s", f[23], f[2], f[1]);
        for (int k = 3; k < 23; k++) text_add(&t, ",%s", f[k]);
        text_add(&t, "\r\n");
    }
    const char *in2 = write_bytes("o2.csv", t.s, t.n);
    free(t.s);
    prep_stats st;
    ASSERT_OK(run_prep(PREP_AVAZU, &in1, 1, test_path("o1.bin"), 1, 0, &st));
    ASSERT_OK(run_prep(PREP_AVAZU, &in2, 1, test_path("o2.bin"), 1, 0, &st));
    bp_dataset a, b;
    ASSERT_OK(bp_ds_open(&a, test_path("o1.bin"), BP_DS_VERIFY));
    ASSERT_OK(bp_ds_open(&b, test_path("o2.bin"), BP_DS_VERIFY));
    ASSERT_TRUE(memcmp(a.label, b.label, 3) == 0 && memcmp(a.sparse, b.sparse, 3 * 23 * 4) == 0);
    ASSERT_TRUE(memcmp(a.info.card, b.info.card, sizeof a.info.card) == 0);
    bp_ds_close(&a);
    bp_ds_close(&b);

    // Headers that are wrong.
    char *out = NULL;
    const char *nolabel = write_text("nl.csv", "id,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,"
                                     "app_domain,app_category,device_id,device_ip,device_model,device_type,"
                                     "device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21\n1,14102100\n");
    ASSERT_EQ(test_run(&out, 20, "%s prep -q --format avazu -o %s %s", test_bin(), test_path("x.bin"), nolabel), 1);
    ASSERT_STR_CONTAINS(out, "nl.csv:1: header has no 'click' column");
    free(out);
    const char *unknown = write_text("uk.csv", "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,"
                                     "app_domain,app_category,device_id,device_ip,device_model,device_type,"
                                     "device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21,extra\n");
    ASSERT_EQ(test_run(&out, 20, "%s prep -q -f avazu -o %s %s", test_bin(), test_path("x.bin"), unknown), 1);
    ASSERT_STR_CONTAINS(out, "uk.csv:1: unknown column 'extra'");
    free(out);
    // A Criteo file given as Avazu.
    const char *crit = criteo_file("c.tsv", 0, 3);
    ASSERT_EQ(test_run(&out, 20, "%s prep -q -f avazu -o %s %s", test_bin(), test_path("x.bin"), crit), 1);
    ASSERT_STR_CONTAINS(out, "c.tsv:1: unknown column");
    free(out);
    // Header only: no rows.
    const char *hdr_only = write_text("ho.csv", avazu_hdr);
    ASSERT_EQ(test_run(&out, 20, "%s prep -q -f avazu -o %s %s", test_bin(), test_path("x.bin"), hdr_only), 1);
    ASSERT_STR_CONTAINS(out, "ho.csv: no data rows in the input (0 bad lines skipped)");
    free(out);
    // Two of them: the message used to name the first as if it were the only input.
    ASSERT_EQ(test_run(&out, 20, "%s prep -q -f avazu -o %s %s %s", test_bin(), test_path("x.bin"), hdr_only,
                       write_text("ho2.csv", avazu_hdr)),
              1);
    ASSERT_STR_CONTAINS(out, "ho.csv: no data rows in the input (nor in the 1 other input)");
    free(out);
    ASSERT_TRUE(!file_exists(test_path("x.bin")));
}

// ---------------------------------------------------------------------------------------------
// Inputs: gzip, several files, line endings

static int same_dataset(const char *p1, const char *p2) {
    bp_dataset a, b;
    if (bp_ds_open(&a, p1, BP_DS_VERIFY)) return 0;
    if (bp_ds_open(&b, p2, BP_DS_VERIFY)) {
        bp_ds_close(&a);
        return 0;
    }
    const bp_ds_info *x = &a.info, *y = &b.info;
    int same = x->rows == y->rows && x->n_dense == y->n_dense && x->n_sparse == y->n_sparse &&
               !memcmp(x->card, y->card, sizeof x->card) && !memcmp(x->split, y->split, sizeof x->split) &&
               !memcmp(a.label, b.label, x->rows) &&
               !memcmp(a.dense, b.dense, x->rows * x->n_dense * 4) &&
               !memcmp(a.sparse, b.sparse, x->rows * x->n_sparse * 4);
    bp_ds_close(&a);
    bp_ds_close(&b);
    return same;
}

TEST(prep_gzip_equals_plain) {
    text t = {0};
    for (int r = 0; r < 500; r++) crow(&t, r);
    const char *plain = write_bytes("g.tsv", t.s, t.n);
    const char *gz = write_gz("g.tsv.gz", t.s, t.n);
    // Two gzip members back to back (as `cat a.gz b.gz`) read as one stream.
    size_t half = t.n / 2;
    while (t.s[half - 1] != '\n') half--;
    const char *m1 = write_gz("m1.gz", t.s, half);
    const char *m2 = write_gz("m2.gz", t.s + half, t.n - half);
    ASSERT_EQ(test_run(NULL, 10, "cat %s %s > %s", m1, m2, test_path("m.gz")), 0);
    const char *multi = tpath("m.gz");
    free(t.s);
    for (int hashed = 0; hashed <= 1; hashed++) {
        uint64_t N = hashed ? 777 : 0;
        ASSERT_OK(run_prep(PREP_CRITEO, &plain, 1, test_path("p.bin"), 2, N, NULL));
        prep_stats st;
        ASSERT_OK(run_prep(PREP_CRITEO, &gz, 1, test_path("z.bin"), 2, N, &st));
        ASSERT_TRUE(st.bytes_file < st.bytes_text); // it really was compressed
        ASSERT_TRUE(same_dataset(test_path("p.bin"), test_path("z.bin")));
        ASSERT_OK(run_prep(PREP_CRITEO, &multi, 1, test_path("z.bin"), 2, N, NULL));
        ASSERT_TRUE(same_dataset(test_path("p.bin"), test_path("z.bin")));
    }
    // Zero bytes after the last member (padding) are skipped, as gzip -d does.
    ASSERT_EQ(test_run(NULL, 10, "cat %s > %s && head -c 5000 /dev/zero >> %s", gz, test_path("pad.gz"),
                       test_path("pad.gz")),
              0);
    const char *pad = tpath("pad.gz");
    ASSERT_OK(run_prep(PREP_CRITEO, &plain, 1, test_path("p.bin"), 2, 0, NULL));
    ASSERT_OK(run_prep(PREP_CRITEO, &pad, 1, test_path("z.bin"), 2, 0, NULL));
    ASSERT_TRUE(same_dataset(test_path("p.bin"), test_path("z.bin")));
    // gzip through a pipe (hashed ids read it once).
    char *msg = NULL;
    ASSERT_OK(run_prep(PREP_CRITEO, &plain, 1, test_path("p.bin"), 1, 777, NULL));
    ASSERT_EQ(test_run(&msg, 20, "cat %s | %s prep -q --max-ind-range 777 -o %s /dev/stdin", multi, test_bin(),
                       test_path("z.bin")),
              0);
    free(msg);
    ASSERT_TRUE(same_dataset(test_path("p.bin"), test_path("z.bin")));
    // "-" names the standard input, as "/dev/stdin" does.
    msg = NULL;
    ASSERT_EQ(test_run(&msg, 20, "cat %s | %s prep -q --max-ind-range 777 -o %s -", multi, test_bin(), test_path("z.bin")), 0);
    free(msg);
    ASSERT_TRUE(same_dataset(test_path("p.bin"), test_path("z.bin")));
    // Anything else after the gzip data (a plain file appended to it) is an error: zlib's gzread
    // ignored it, and those lines were lost without a word.
    struct stat sb;
    ASSERT_EQ(stat(gz, &sb), 0);
    for (int zeros = 0; zeros <= 1; zeros++) {
        ASSERT_EQ(test_run(NULL, 10, "cat %s > %s && head -c %d /dev/zero >> %s && cat %s >> %s", gz,
                           test_path("cat.gz"), zeros ? 7 : 0, test_path("cat.gz"), plain, test_path("cat.gz")),
                  0);
        for (int hashed = 0; hashed <= 1; hashed++) {
            ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s -o %s %s", test_bin(), hashed ? "--max-ind-range 9" : "",
                               test_path("c.bin"), test_path("cat.gz")),
                      1);
            char want[128];
            snprintf(want, sizeof want, "cat.gz:501: the file goes on after its gzip data with bytes that are not "
                     "gzip (from byte %lld;", (long long)sb.st_size + (zeros ? 7 : 0));
            ASSERT_STR_CONTAINS(msg, want);
            free(msg);
            ASSERT_TRUE(!file_exists(test_path("c.bin")));
        }
    }
}

TEST(prep_several_inputs_in_order_and_line_endings) {
    const char *a = criteo_file("d0.tsv", 0, 30);
    const char *b = criteo_file("d1.tsv", 30, 25);
    // The third file: CRLF line endings and no '\n' after the last line's '\r'.
    text t = {0}, crlf = {0};
    for (int r = 55; r < 75; r++) crow(&t, r);
    for (size_t i = 0; i < t.n; i++) text_add(&crlf, t.s[i] == '\n' ? "\r\n" : "%c", t.s[i]);
    const char *c = write_bytes("d2.tsv", crlf.s, crlf.n - 1);
    free(t.s);
    free(crlf.s);
    const char *all = criteo_file("all.tsv", 0, 75);
    const char *ins[3] = {a, b, c};
    prep_stats st;
    ASSERT_OK(run_prep(PREP_CRITEO, ins, 3, test_path("three.bin"), 1, 0, &st));
    ASSERT_EQ(st.rows, 75);
    ASSERT_OK(run_prep(PREP_CRITEO, &all, 1, test_path("one.bin"), 1, 0, &st));
    ASSERT_TRUE(same_dataset(test_path("three.bin"), test_path("one.bin")));
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, test_path("three.bin"), 0));
    ASSERT_STR_CONTAINS(ds.info.source, "d0.tsv d1.tsv d2.tsv");
    bp_ds_close(&ds);
}

// ---------------------------------------------------------------------------------------------
// Bad input

typedef struct {
    const char *raw;     // the whole bad line (without newline), or NULL
    int field;           // else: all 40 fields empty but label 1 and this field = value
    const char *value;
    lines_bad_kind kind;
    const char *message; // expected in the error
} bad_case;

enum { CASE_NUL = -1, CASE_LONG = -2 };

static const bad_case criteo_bad_cases[] = {
    {"1\t2\t3", 0, NULL, LINES_BAD_FIELDS, "3 fields, expected 40"},
    {"abc", 0, NULL, LINES_BAD_FIELDS, ": 1 field, expected 40"},
    {"", 0, NULL, LINES_BAD_FIELDS, "empty line"},
    {NULL, 0, "2", LINES_BAD_LABEL, "label '2', expected 0 or 1"},
    {NULL, 0, "label", LINES_BAD_LABEL, "label 'label', expected 0 or 1: a header line? (Criteo files have none"},
    {NULL, 3, "12x", LINES_BAD_INT, "I3 '12x' is not an integer"},
    {NULL, 1, "99999999999999999999", LINES_BAD_INT, "I1 '99999999999999999999' is out of range"},
    {NULL, 2, "9223372036854775808", LINES_BAD_INT, "I2 '9223372036854775808' is out of range"}, // INT64_MAX + 1
    {NULL, 15, "zz123456", LINES_BAD_CAT, "C2 'zz123456' is not a hex value"},
    {NULL, 39, "123456789", LINES_BAD_CAT, "C26 '123456789' has 9 hex digits, expected at most 8"},
    {NULL, CASE_NUL, NULL, LINES_BAD_BINARY, "NUL byte at column 5"},
    {NULL, CASE_LONG, NULL, LINES_BAD_LONG, "line longer than 65536 bytes"},
};

// Appends the bad line of case bc (with its newline); r is the row it replaces.
static void add_bad(text *t, const bad_case *bc, int r) {
    if (bc->raw) {
        text_add(t, "%s\n", bc->raw);
    } else if (bc->field == CASE_NUL) {
        size_t at = t->n;
        crow(t, r);
        t->s[at + 4] = 0; // inside I2
    } else if (bc->field == CASE_LONG) {
        for (int i = 0; i < 7000; i++) text_add(t, "0123456789");
        text_add(t, "\n");
    } else {
        for (int f = 0; f < CRITEO_FIELDS; f++)
            text_add(t, "%s%s", f ? "\t" : "", f == bc->field ? bc->value : f == 0 ? "1" : "");
        text_add(t, "\n");
    }
}

// Writes 4 good lines, the bad case as line 5, then 3 good lines.
static const char *write_with_bad(const char *name, const bad_case *bc) {
    text t = {0};
    for (int r = 0; r < 4; r++) crow(&t, r);
    add_bad(&t, bc, 4);
    for (int r = 5; r < 8; r++) crow(&t, r);
    const char *path = write_bytes(name, t.s, t.n);
    free(t.s);
    return path;
}

TEST(prep_bad_lines_fail_with_file_line_or_are_skipped) {
    const char *outdir = tpath("out");
    ASSERT_EQ(mkdir(outdir, 0755), 0);
    const char *out = tpath("out/bad.bin");
    char *msg = NULL;
    for (size_t i = 0; i < BP_ARRAY_LEN(criteo_bad_cases); i++) {
        const bad_case *bc = &criteo_bad_cases[i];
        char name[32];
        snprintf(name, sizeof name, "bad%zu.tsv", i);
        const char *in = write_with_bad(name, bc);
        // Default: fails, names file:line and what was wrong, leaves nothing behind.
        for (int hashed = 0; hashed <= 1; hashed++) {
            int rc = test_run(&msg, 20, "%s prep -q %s -o %s %s", test_bin(), hashed ? "--max-ind-range 100" : "",
                              out, in);
            ASSERT_MSG(rc == 1, "case %zu: exit %d: %s", i, rc, msg);
            char where[64];
            snprintf(where, sizeof where, "%s:5: ", name);
            ASSERT_STR_CONTAINS(msg, where);
            ASSERT_STR_CONTAINS(msg, bc->message);
            ASSERT_STR_CONTAINS(msg, "--skip-bad");
            free(msg);
            ASSERT_EQ(test_run(&msg, 10, "ls -A %s", outdir), 0);
            ASSERT_MSG(msg[0] == 0, "case %zu left files behind: %s", i, msg);
            free(msg);
        }
        // --skip-bad: the 7 good rows are written and the bad line is counted by kind.
        ASSERT_EQ(test_run(&msg, 20, "%s prep --skip-bad -o %s %s", test_bin(), out, in), 0);
        ASSERT_STR_CONTAINS(msg, "bad lines skipped: 1 (");
        ASSERT_STR_CONTAINS(msg, lines_bad_name(bc->kind));
        ASSERT_STR_CONTAINS(msg, "prep: 7 rows");
        free(msg);
        prep_opts o;
        prep_opts_default(&o);
        o.inputs = &in, o.n_inputs = 1, o.out = out, o.skip_bad = 1;
        prep_stats st;
        ASSERT_OK(prep_run(&o, &st));
        ASSERT_EQ(st.bad_total, 1);
        ASSERT_EQ(st.bad[bc->kind], 1);
        ASSERT_EQ(st.rows, 7);
        bp_dataset ds;
        ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
        ASSERT_TRUE(ds.dense[4 * 13 + 0] == (float)log1p(5.0)); // row 4 is the line after the bad one
        bp_ds_close(&ds);
        unlink(out);
    }
}

// Criteo Kaggle's test.txt (the same columns without the label): the message says so, and does not
// suggest --skip-bad, which would skip every line.  A line with one field missing after good lines
// is only a bad line (it used to be blamed on test.txt, without the --skip-bad hint).
TEST(prep_kaggle_test_file_is_explained) {
    const char *in = tpath("test.txt");
    FILE *f = fopen(in, "w");
    ASSERT_TRUE(f != NULL);
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 39; k++) fprintf(f, "%s%s", k ? "\t" : "", k < 13 ? "1" : "68fd1e64");
        fprintf(f, "\n");
    }
    fclose(f);
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), tpath("t.bin"), in), 1);
    ASSERT_STR_CONTAINS(msg, "test.txt:1: 39 fields, expected 40 (label, I1-I13, C1-C26 separated by tabs): no label "
                             "column (Kaggle's test.txt has no labels");
    ASSERT_MSG(!strstr(msg, "--skip-bad"), "%s", msg);
    free(msg);
    const char *cut = tpath("cut.tsv");
    f = fopen(cut, "w");
    ASSERT_TRUE(f != NULL);
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < (r == 1 ? 39 : 40); k++) fprintf(f, "%s%s", k ? "\t" : "", k < 14 ? "1" : "68fd1e64");
        fprintf(f, "\n");
    }
    fclose(f);
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), tpath("t.bin"), cut), 1);
    ASSERT_STR_CONTAINS(msg, "cut.tsv:2: 39 fields, expected 40 (label, I1-I13, C1-C26 separated by tabs) (or "
                             "--skip-bad to skip bad lines)");
    ASSERT_MSG(!strstr(msg, "test.txt"), "%s", msg);
    free(msg);
    // an Avazu CSV without -f avazu: the hint was --skip-bad, which would skip every line
    const char *av = tpath("train.csv");
    ASSERT_EQ(test_run(NULL, 20, "%s synth -p avazu -n 20 -f csv -o %s", test_bin(), av), 0);
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), tpath("t.bin"), av), 1);
    ASSERT_STR_CONTAINS(msg, "train.csv:1: 1 field, expected 40 (label, I1-I13, C1-C26 separated by tabs): "
                             "comma-separated values, not Criteo's tabs: an Avazu CSV? (prep -f avazu)");
    ASSERT_MSG(!strstr(msg, "--skip-bad"), "%s", msg);
    free(msg);
}

TEST(prep_skip_bad_counts_every_kind) {
    text t = {0};
    for (size_t i = 0; i < BP_ARRAY_LEN(criteo_bad_cases); i++) {
        const bad_case *bc = &criteo_bad_cases[i];
        crow(&t, (int)i);
        add_bad(&t, bc, (int)i);
    }
    const char *in = write_bytes("every.tsv", t.s, t.n);
    free(t.s);
    prep_opts o;
    prep_opts_default(&o);
    o.inputs = &in, o.n_inputs = 1, o.out = tpath("every.bin"), o.skip_bad = 1;
    prep_stats st;
    ASSERT_OK(prep_run(&o, &st));
    ASSERT_EQ(st.rows, BP_ARRAY_LEN(criteo_bad_cases));
    ASSERT_EQ(st.bad_total, BP_ARRAY_LEN(criteo_bad_cases));
    ASSERT_EQ(st.bad[LINES_BAD_FIELDS], 3);
    ASSERT_EQ(st.bad[LINES_BAD_LABEL], 2);
    ASSERT_EQ(st.bad[LINES_BAD_INT], 3);
    ASSERT_EQ(st.bad[LINES_BAD_CAT], 2);
    ASSERT_EQ(st.bad[LINES_BAD_BINARY], 1);
    ASSERT_EQ(st.bad[LINES_BAD_LONG], 1);
    // Hashing (one pass) counts the same.
    o.max_ind_range = 50;
    ASSERT_OK(prep_run(&o, &st));
    ASSERT_EQ(st.bad_total, BP_ARRAY_LEN(criteo_bad_cases));
    ASSERT_EQ(st.bad[LINES_BAD_INT], 3);
}

TEST(prep_avazu_bad_lines) {
    static const struct {
        const char *line, *message;
    } cases[] = {
        {"1,2,14102100,1005", "4 fields, expected 24"},
        {"1,x,14102100,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "click 'x', expected 0 or 1"},
        {"1,1,14102199,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "hour '14102199' is not a time"},
        {"1,1,14102124,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "hour '14102124' is not a time"},
        {"1,1,14023100,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "hour '14023100' is not a time"},
        {"1,1,2014102,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "hour '2014102' is not a time"},
        // A second header (`cat a.csv b.csv`) is named as one.
        {"id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,device_id,"
         "device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21",
         "a header line again (click 'click'), expected a data row: files joined with their headers?"},
        {"1,1,hour,1005,0,a,b,c,d,e,f,g,h,i,1,2,3,4,5,6,7,8,9,10", "a header line again (hour 'hour')"},
    };
    char *msg = NULL;
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        text t = {0};
        text_add(&t, "%s%s%s\n%s", avazu_hdr, avazu_rows[0], cases[i].line, avazu_rows[1]);
        char name[32];
        snprintf(name, sizeof name, "ab%zu.csv", i);
        const char *in = write_bytes(name, t.s, t.n);
        free(t.s);
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q -f avazu -o %s %s", test_bin(), test_path("ab.bin"), in), 1);
        char where[64];
        snprintf(where, sizeof where, "%s:3: ", name);
        ASSERT_STR_CONTAINS(msg, where);
        ASSERT_STR_CONTAINS(msg, cases[i].message);
        free(msg);
        ASSERT_TRUE(!file_exists(test_path("ab.bin")));
        ASSERT_EQ(test_run(&msg, 20, "%s prep --skip-bad -f avazu -o %s %s", test_bin(), test_path("ab.bin"), in), 0);
        ASSERT_STR_CONTAINS(msg, "prep: 2 rows");
        ASSERT_STR_CONTAINS(msg, "bad lines skipped: 1");
        free(msg);
        unlink(test_path("ab.bin"));
    }
}

TEST(prep_truncated_gzip_fails_even_with_skip_bad) {
    text t = {0};
    for (int r = 0; r < 3000; r++) crow(&t, r);
    const char *gz = write_gz("t.tsv.gz", t.s, t.n);
    free(t.s);
    struct stat sb;
    ASSERT_EQ(stat(gz, &sb), 0);
    ASSERT_EQ(truncate(gz, sb.st_size / 2), 0);
    const char *out = tpath("t.bin");
    char *msg = NULL;
    for (int skip = 0; skip <= 1; skip++)
        for (int hashed = 0; hashed <= 1; hashed++) {
            ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s %s -o %s %s", test_bin(), skip ? "--skip-bad" : "",
                               hashed ? "--max-ind-range 99" : "", out, gz), 1);
            ASSERT_STR_CONTAINS(msg, "t.tsv.gz:");
            ASSERT_STR_CONTAINS(msg, "truncated gzip stream");
            free(msg);
            ASSERT_TRUE(!file_exists(out));
        }
    // Damaged compressed data (not just cut short) is an error too.
    text u = {0};
    for (int r = 0; r < 3000; r++) crow(&u, r);
    const char *gz2 = write_gz("d.tsv.gz", u.s, u.n);
    free(u.s);
    ASSERT_EQ(test_run(NULL, 10, "printf XXXXXXXX | dd of=%s bs=1 seek=2000 conv=notrunc status=none", gz2), 0);
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --skip-bad -o %s %s", test_bin(), out, gz2), 1);
    ASSERT_STR_CONTAINS(msg, "d.tsv.gz: damaged gzip data (");
    ASSERT_STR_CONTAINS(msg, "of the file; check it with gzip -t");
    ASSERT_TRUE(strstr(msg, "<fd:") == NULL); // zlib's name for the descriptor, not the file's
    free(msg);
    ASSERT_TRUE(!file_exists(out));
    // A damaged check value at the end (the data is whole): no line number, which used to name a
    // line that the text read ahead of the parser happened to be at.
    text w = {0};
    for (int r = 0; r < 3000; r++) crow(&w, r);
    gz2 = write_gz("c.tsv.gz", w.s, w.n);
    free(w.s);
    ASSERT_EQ(stat(gz2, &sb), 0);
    FILE *cf = fopen(gz2, "r+b");
    ASSERT_TRUE(cf != NULL);
    ASSERT_EQ(fseek(cf, (long)sb.st_size - 8, SEEK_SET), 0); // the CRC-32 of the trailer
    ASSERT_EQ(fwrite("\0\0\0\0", 1, 4, cf), 4);
    ASSERT_EQ(fclose(cf), 0);
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), out, gz2), 1);
    ASSERT_STR_CONTAINS(msg, "c.tsv.gz: damaged gzip data (incorrect data check), found at byte ");
    free(msg);
    ASSERT_TRUE(!file_exists(out));
}

TEST(prep_bad_inputs_and_outputs) {
    const char *good = criteo_file("good.tsv", 0, 10);
    const char *empty = write_text("empty.tsv", "");
    const char *empty_gz = write_gz("empty.tsv.gz", "", 0);
    const char *dir = tpath("adir");
    ASSERT_EQ(mkdir(dir, 0755), 0);
    const char *out = tpath("o.bin");
    char *msg = NULL;
    struct {
        const char *input, *message;
    } cases[] = {
        {empty, "empty.tsv: empty input file"},
        {empty_gz, "empty.tsv.gz: empty input file"},
        {dir, "adir: is a directory"},
        {tpath("nope.tsv"), "nope.tsv: cannot open input: No such file or directory"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        // The bad input second: every input is checked before any work starts.
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s %s", test_bin(), out, good, cases[i].input), 1);
        ASSERT_STR_CONTAINS(msg, cases[i].message);
        free(msg);
        ASSERT_TRUE(!file_exists(out));
    }
    // Output in a directory that does not exist, or under a file.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), test_path("no/such/dir/o.bin"), good), 1);
    ASSERT_STR_CONTAINS(msg, "does not exist");
    free(msg);
    ASSERT_TRUE(!file_exists(test_path("no")));
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s/o.bin %s", test_bin(), good, good), 1);
    ASSERT_STR_CONTAINS(msg, "is not a directory");
    free(msg);
    // One input given twice, by its name or through a link: its rows would be there twice.
    ASSERT_EQ(symlink(good, test_path("link.tsv")), 0);
    for (int hashed = 0; hashed <= 1; hashed++) {
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s --split days -o %s %s %s", test_bin(),
                           hashed ? "--max-ind-range 9" : "", out, good, good), 2);
        ASSERT_STR_CONTAINS(msg, "good.tsv: the same file as input 1");
        free(msg);
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s -o %s %s %s", test_bin(), hashed ? "--max-ind-range 9" : "", out,
                           good, test_path("link.tsv")),
                  2);
        ASSERT_STR_CONTAINS(msg, "link.tsv: the same file as input 1");
        free(msg);
        ASSERT_TRUE(!file_exists(out));
    }
    // Output over an input.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), good, good), 2);
    ASSERT_STR_CONTAINS(msg, "the output is also an input");
    free(msg);
    // Output is a directory.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), dir, good), 1);
    ASSERT_STR_CONTAINS(msg, "is a directory");
    free(msg);
    if (geteuid() != 0) { // root writes anywhere
        const char *ro = tpath("ro");
        ASSERT_EQ(mkdir(ro, 0555), 0);
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s/o.bin %s", test_bin(), ro, good), 1);
        ASSERT_STR_CONTAINS(msg, "not writable");
        free(msg);
    }
    // The frequency mapping needs regular files (two passes); hashing reads a pipe.
    ASSERT_EQ(test_run(&msg, 20, "cat %s | %s prep -q -o %s /dev/stdin", good, test_bin(), out), 1);
    ASSERT_STR_CONTAINS(msg, "not a regular file");
    free(msg);
    ASSERT_EQ(test_run(&msg, 20, "cat %s | %s prep --max-ind-range 10 -o %s /dev/stdin", good, test_bin(), out), 0);
    ASSERT_STR_CONTAINS(msg, "prep: 10 rows");
    free(msg);
}

// An archive (Criteo's Kaggle download is dac.tar.gz; Avazu's comes zipped) or another
// compressor's data is refused by name, even with --skip-bad: read as text, the tar headers used
// to be skipped as bad lines and the lines of the files inside became rows.
TEST(prep_archives_and_other_compressors_are_refused) {
    text t = {0};
    for (int r = 0; r < 20; r++) crow(&t, r);
    // A tar archive of one member, train.txt: a 512-byte header, then the text.
    size_t tar_n = 512 + (t.n + 511) / 512 * 512 + 1024; // header, text in blocks, two zero blocks
    char *tar = bp_xcalloc(1, tar_n);
    snprintf(tar, 100, "train.txt");
    snprintf(tar + 100, 8, "0000644");
    snprintf(tar + 124, 12, "%011o", (unsigned)t.n);
    memcpy(tar + 257, "ustar", 6);
    memcpy(tar + 512, t.s, t.n);
    struct {
        const char *name, *message;
        const char *data;
        size_t n;
        int gz;
    } cases[] = {
        {"dac.tar", "dac.tar: a tar archive, not text lines", tar, tar_n, 0},
        {"dac.tar.gz", "dac.tar.gz: a tar archive inside the gzip stream", tar, tar_n, 1},
        {"a.zip", "a.zip: a zip archive", "PK\x03\x04\x14\x00\x00\x00\x08\x00", 10, 0},
        {"a.bz2", "a.bz2: bzip2 data", "BZh91AY&SY\x61\x04\x30\x6c\x00\x00", 16, 0},
        {"a.xz", "a.xz: xz data", "\xfd" "7zXZ\x00\x00\x04\xe6\xd6\xb4\x46", 12, 0},
        {"a.zst", "a.zst: zstd data", "\x28\xb5\x2f\xfd\x24\x05\x29\x00", 8, 0},
        // prep's own output, given again (it used to be "1 field, expected 40")
        {"d.bin",
         "d.bin: a bagpipe dataset (the output of prep or synth), not text lines; prep reads plain or gzip text: "
         "it is prepared already",
         "BPDATA\r\n\x01\x00\x00\x00", 12, 0},
        {"d.bin.gz",
         "d.bin.gz: a bagpipe dataset (the output of prep or synth) inside the gzip stream, not text lines; "
         "prep reads plain or gzip text: it is prepared already; decompress it (gzip -d) and give it to train",
         "BPDATA\r\n\x01\x00\x00\x00", 12, 1},
    };
    const char *good = criteo_file("good.tsv", 0, 10);
    const char *out = tpath("o.bin");
    char *msg = NULL;
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        const char *in = cases[i].gz ? write_gz(cases[i].name, cases[i].data, cases[i].n)
                                     : write_bytes(cases[i].name, cases[i].data, cases[i].n);
        for (int skip = 0; skip <= 1; skip++)
            for (int hashed = 0; hashed <= 1; hashed++) {
                // The archive second: every input is checked before any work starts.
                ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s %s -o %s %s %s", test_bin(), skip ? "--skip-bad" : "",
                                   hashed ? "--max-ind-range 99" : "", out, good, in), 1);
                ASSERT_STR_CONTAINS(msg, cases[i].message);
                ASSERT_STR_CONTAINS(msg, "prep reads plain or gzip text");
                free(msg);
                ASSERT_TRUE(!file_exists(out));
            }
        // Through a pipe (hashed ids read it once) it is caught as well.
        ASSERT_EQ(test_run(&msg, 20, "cat %s | %s prep -q --max-ind-range 99 -o %s /dev/stdin", in, test_bin(), out),
                  1);
        ASSERT_STR_CONTAINS(msg, strchr(cases[i].message, ' ') + 1);
        free(msg);
        ASSERT_TRUE(!file_exists(out));
    }
    // Text that merely starts like one of them (no control bytes) is read as text.
    const char *bz_text = write_text("bz.tsv", "BZh91AY&SY\n");
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s", test_bin(), out, bz_text), 1);
    ASSERT_STR_CONTAINS(msg, "bz.tsv:1: 1 field, expected 40");
    free(msg);
    free(tar);
    free(t.s);
}

TEST(prep_cli_flags) {
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 10, "%s prep --help", test_bin()), 0);
    static const char *flags[] = {"--format",   "--out",      "--min-count", "--max-ind-range", "--compact",
                                  "--split",    "--skip-bad", "--max-rows",  "--quiet"};
    for (size_t i = 0; i < BP_ARRAY_LEN(flags); i++) ASSERT_STR_CONTAINS(msg, flags[i]);
    free(msg);
    const char *good = criteo_file("good.tsv", 0, 10);
    const char *out = tpath("o.bin");
    ASSERT_EQ(test_run(&msg, 10, "%s prep %s", test_bin(), good), 2);
    ASSERT_STR_CONTAINS(msg, "--out");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s prep -o %s", test_bin(), out), 2);
    ASSERT_STR_CONTAINS(msg, "no input files");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s prep --min-count 3 --max-ind-range 10 -o %s %s", test_bin(), out, good), 2);
    ASSERT_STR_CONTAINS(msg, "give one");
    free(msg);
    // --min-count given at all, even at its default, names the frequency mapping (it used to be
    // ignored at 1 beside --max-ind-range, which docs/data.md says cannot be combined with it).
    ASSERT_EQ(test_run(&msg, 10, "%s prep --min-count 1 --max-ind-range 10 -o %s %s", test_bin(), out, good), 2);
    ASSERT_STR_CONTAINS(msg, "give one");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s prep -q --min-count 3 --max-ind-range 0 -o %s %s", test_bin(), out, good), 0);
    free(msg);
    ASSERT_EQ(unlink(out), 0);
    ASSERT_EQ(test_run(&msg, 10, "%s prep --split ratio:0.5,0.2,0.2 -o %s %s", test_bin(), out, good), 2);
    ASSERT_STR_CONTAINS(msg, "add up to 0.9");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s prep --split weekly -o %s %s", test_bin(), out, good), 2);
    ASSERT_STR_CONTAINS(msg, "expected none, kaggle, days or ratio");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s prep --split days -o %s %s", test_bin(), out, good), 2);
    ASSERT_STR_CONTAINS(msg, "one input file per day");
    free(msg);
    ASSERT_TRUE(!file_exists(out));
    // --max-rows and the summary.
    ASSERT_EQ(test_run(&msg, 10, "%s prep --max-rows 4 --split kaggle -o %s %s", test_bin(), out, good), 0);
    ASSERT_STR_CONTAINS(msg, "prep: 4 rows (train 4, val 0, test 0)");
    // the input's size is that of the 4 lines taken, not of the block read ahead (the whole file here)
    char *head = NULL, want[64], b[32];
    ASSERT_EQ(test_run(&head, 10, "head -n 4 %s | wc -c", good), 0);
    snprintf(want, sizeof want, "input: %s text in ", bp_fmt_bytes(b, sizeof b, strtod(head, NULL)));
    free(head);
    ASSERT_STR_CONTAINS(msg, want);
    ASSERT_STR_CONTAINS(msg, "ids: by frequency, min count 1; 26 tables");
    free(msg);
    ASSERT_EQ(test_run(&msg, 10, "%s info %s", test_bin(), out), 0);
    ASSERT_STR_CONTAINS(msg, "frequency (min count 1)");
    free(msg);
}

// ---------------------------------------------------------------------------------------------
// Splits

TEST(prep_split_sizes_by_rule) {
    prep_opts o;
    prep_opts_default(&o);
    uint64_t s[3];
    prep_split_sizes(&o, 100, NULL, 0, s);
    ASSERT_TRUE(s[0] == 100 && s[1] == 0 && s[2] == 0);
    // kaggle: 7 days of equal rows, the first rows % 7 days one longer; day 6 halved.
    ASSERT_OK(prep_split_parse(&o, "kaggle"));
    prep_split_sizes(&o, 100, NULL, 0, s); // days 15,15,14,14,14,14 | 14
    ASSERT_TRUE(s[0] == 86 && s[1] == 7 && s[2] == 7);
    prep_split_sizes(&o, 20, NULL, 0, s); // 3,3,3,3,3,3 | 2
    ASSERT_TRUE(s[0] == 18 && s[1] == 1 && s[2] == 1);
    prep_split_sizes(&o, 45840617, NULL, 0, s); // the Kaggle training file
    ASSERT_TRUE(s[0] == 39291958 && s[1] == 3274330 && s[2] == 3274329);
    prep_split_sizes(&o, 6, NULL, 0, s);
    ASSERT_TRUE(s[0] == 6 && s[1] == 0 && s[2] == 0);
    // ratio: a part asked for with 0 stays empty (the rest used to go to test: 999 / 1 / 1 for
    // ratio:0.999,0.001,0).
    static const struct {
        const char *spec;
        uint64_t rows, train, val, test;
    } ratios[] = {
        {"ratio:0.8,0.1,0.1", 10, 8, 1, 1},        {"ratio:0.29,0.71,0", 100, 29, 71, 0},
        {"ratio:0.999,0.001,0", 1001, 999, 2, 0}, {"ratio:0.8,0.2,0", 1001, 800, 201, 0},
        {"ratio:0.7,0,0.3", 1001, 700, 0, 301},   {"ratio:0.999,0,0.001", 1001, 999, 0, 2},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(ratios); i++) {
        ASSERT_OK(prep_split_parse(&o, ratios[i].spec));
        prep_split_sizes(&o, ratios[i].rows, NULL, 0, s);
        ASSERT_MSG(s[0] == ratios[i].train && s[1] == ratios[i].val && s[2] == ratios[i].test,
                   "%s of %llu rows: %llu / %llu / %llu", ratios[i].spec, (unsigned long long)ratios[i].rows,
                   (unsigned long long)s[0], (unsigned long long)s[1], (unsigned long long)s[2]);
    }
    ASSERT_OK(prep_split_parse(&o, "days"));
    const uint64_t per_file[3] = {5, 6, 7};
    prep_split_sizes(&o, 18, per_file, 3, s);
    ASSERT_TRUE(s[0] == 11 && s[1] == 4 && s[2] == 3);
    ASSERT_EQ(prep_split_parse(&o, "ratio:0.8,0.1"), BP_EUSAGE);
    ASSERT_EQ(prep_split_parse(&o, "ratio:0.8,0.1,0.1,0"), BP_EUSAGE);
    ASSERT_EQ(prep_split_parse(&o, "ratio:1.5,-0.5,0"), BP_EUSAGE);
}

// synth --split kaggle and prep --split kaggle cut n rows alike, and as the DLRM reference does:
// per-day counts n / 7 plus one for the first n % 7 days, day 6 halved with the larger half first.
TEST(prep_and_synth_kaggle_splits_agree) {
    prep_opts po;
    prep_opts_default(&po);
    ASSERT_OK(prep_split_parse(&po, "kaggle"));
    synth_opts so;
    synth_opts_default(&so, SYNTH_PRESET_CRITEO_KAGGLE);
    ASSERT_EQ(so.split, SYNTH_SPLIT_KAGGLE);
    static const uint64_t extra_n[] = {100, 7000, 7001, 7006, 20000, 1000000, 2000000, 45840617};
    for (size_t k = 0; k < 20 + BP_ARRAY_LEN(extra_n); k++) {
        const uint64_t n = k < 20 ? k + 1 : extra_n[k - 20];
        uint64_t day[7], p[3], s[3];
        for (int d = 0; d < 7; d++) day[d] = n / 7 + ((uint64_t)d < n % 7);
        const uint64_t want[3] = {n - day[6], (day[6] + 1) / 2, day[6] / 2};
        prep_split_sizes(&po, n, NULL, 0, p);
        so.rows = n;
        synth_split_sizes(&so, s);
        for (int i = 0; i < 3; i++) {
            ASSERT_MSG(p[i] == want[i], "n %llu: prep split %d is %llu, expected %llu", (unsigned long long)n, i,
                       (unsigned long long)p[i], (unsigned long long)want[i]);
            ASSERT_MSG(s[i] == p[i], "n %llu: synth split %d is %llu, prep's %llu", (unsigned long long)n, i,
                       (unsigned long long)s[i], (unsigned long long)p[i]);
        }
    }
    uint64_t t[3];
    so.rows = 20000; // synth once cut 17142 / 1429 / 1429 here
    synth_split_sizes(&so, t);
    ASSERT_TRUE(t[0] == 17143 && t[1] == 1429 && t[2] == 1428);
}

// synth --split ratio:A,B,C and prep --split ratio:A,B,C cut n rows alike (docs/data.md, docs/synth.md:
// train floor(n A), val floor(n B), test the rest), also where n A falls just below an integer in
// floating point (0.29 x 100 = 28.999...): synth used to cut 28 / 71 / 1 there, a test split of one
// row from a ratio that asks for none.
TEST(prep_and_synth_ratio_splits_agree) {
    static const char *const ratios[] = {"0.29,0.71,0", "0.57,0.43,0", "0.8,0.1,0.1", "0.7,0.2,0.1", "0.1,0.1,0.8",
                                         "0.33,0.33,0.34", "1,0,0", "0,1,0", "0.9,0.1,0"};
    for (size_t r = 0; r < BP_ARRAY_LEN(ratios); r++) {
        char spec[64];
        snprintf(spec, sizeof spec, "ratio:%s", ratios[r]);
        prep_opts po;
        prep_opts_default(&po);
        ASSERT_OK(prep_split_parse(&po, spec));
        synth_opts so;
        synth_opts_default(&so, SYNTH_PRESET_CUSTOM);
        so.split = SYNTH_SPLIT_RATIO;
        memcpy(so.ratio, po.ratio, sizeof so.ratio);
        for (uint64_t n = 1; n <= 1000; n++) {
            uint64_t p[3], s[3];
            prep_split_sizes(&po, n, NULL, 0, p);
            so.rows = n;
            synth_split_sizes(&so, s);
            for (int i = 0; i < 3; i++)
                ASSERT_MSG(s[i] == p[i], "%s, n %llu: synth split %d is %llu, prep's %llu", spec, (unsigned long long)n,
                           i, (unsigned long long)s[i], (unsigned long long)p[i]);
        }
    }
    synth_opts so;
    synth_opts_default(&so, SYNTH_PRESET_CUSTOM);
    so.split = SYNTH_SPLIT_RATIO;
    so.ratio[0] = 0.29, so.ratio[1] = 0.71, so.ratio[2] = 0;
    so.rows = 100;
    uint64_t t[3];
    synth_split_sizes(&so, t);
    ASSERT_TRUE(t[0] == 29 && t[1] == 71 && t[2] == 0);
}

TEST(prep_splits_in_the_dataset) {
    const char *d[3] = {criteo_file("s0.tsv", 0, 40), criteo_file("s1.tsv", 40, 30), criteo_file("s2.tsv", 70, 31)};
    const char *out = tpath("s.bin");
    static const struct {
        const char *flag;
        uint64_t train, val, test;
    } cases[] = {
        {"none", 101, 0, 0},
        {"kaggle", 87, 7, 7},      // 101 = 7*14 + 3: days 15,15,15,14,14,14 | 14
        {"ratio:0.8,0.1,0.1", 80, 10, 11},
        {"days", 70, 16, 15},      // the last file (31 rows) halved
    };
    char *msg = NULL;
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q --max-ind-range 1000 --split %s -o %s %s %s %s", test_bin(),
                           cases[i].flag, out, d[0], d[1], d[2]), 0);
        free(msg);
        bp_dataset ds;
        ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
        ASSERT_MSG(ds.info.split[0] == cases[i].train && ds.info.split[1] == cases[i].val &&
                       ds.info.split[2] == cases[i].test,
                   "%s: %llu/%llu/%llu", cases[i].flag, (unsigned long long)ds.info.split[0],
                   (unsigned long long)ds.info.split[1], (unsigned long long)ds.info.split[2]);
        uint64_t b, e;
        bp_ds_split_range(&ds, BP_SPLIT_TEST, &b, &e);
        ASSERT_EQ(e, 101);
        bp_ds_close(&ds);
    }
    // days with --max-rows: the last file reached is halved.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --max-rows 50 --split days -o %s %s %s %s", test_bin(), out, d[0], d[1],
                       d[2]), 0);
    free(msg);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_TRUE(ds.info.rows == 50 && ds.info.split[0] == 40 && ds.info.split[1] == 5 && ds.info.split[2] == 5);
    bp_ds_close(&ds);
}

// days with a --max-rows that ends inside the first file: that file would be the one halved, and
// no day is left for train.  Refused (with either id mapping, after the first pass), nothing
// written; it used to write a dataset of train 0 rows that `train` then refused.
TEST(prep_days_max_rows_inside_the_first_file) {
    const char *d[2] = {criteo_file("s0.tsv", 0, 40), criteo_file("s1.tsv", 40, 30)};
    const char *out = tpath("s.bin");
    static const char *const ids[] = {"", "--max-ind-range 1000"};
    char *msg = NULL;
    for (size_t i = 0; i < BP_ARRAY_LEN(ids); i++) {
        ASSERT_EQ(test_run(&msg, 20, "%s prep -q %s --max-rows 40 --split days -o %s %s %s", test_bin(), ids[i], out,
                           d[0], d[1]), 2);
        ASSERT_STR_CONTAINS(msg, "--split days: --max-rows 40 ends inside the first input");
        ASSERT_STR_CONTAINS(msg, "s0.tsv");
        free(msg);
        ASSERT_TRUE(!file_exists(out));
    }
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --max-rows 41 --split days -o %s %s %s", test_bin(), out, d[0], d[1]), 0);
    free(msg);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_TRUE(ds.info.split[0] == 40 && ds.info.split[1] == 1 && ds.info.split[2] == 0);
    bp_ds_close(&ds);
}

// --split days with a last day that gives no rows (every line bad, skipped) is refused: its halves
// are val and test, which were written empty without a word.  A day given twice is named as such,
// with no warning that the days are out of order before it.  A --max-rows that stops before the
// last input says how many inputs it read.
TEST(prep_days_empty_last_day_repeated_day_and_inputs_read) {
    const char *d[3] = {criteo_file("day_0", 0, 40), criteo_file("day_1", 40, 30), write_text("day_2", "x\nx\n")};
    const char *out = tpath("s.bin");
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --skip-bad --split days -o %s %s %s %s", test_bin(), out, d[0], d[1],
                       d[2]), 1);
    ASSERT_STR_CONTAINS(msg, "--split days: the last day reached (");
    ASSERT_STR_CONTAINS(msg, "day_2) gave no rows (every line skipped as bad, or a header only)");
    free(msg);
    ASSERT_TRUE(!file_exists(out));
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s %s", test_bin(), out, d[0], d[0]), 2);
    ASSERT_STR_CONTAINS(msg, "the same file as input 1");
    ASSERT_TRUE(strstr(msg, "comes after") == NULL);
    free(msg);
    ASSERT_EQ(test_run(&msg, 20, "%s prep --max-rows 50 -o %s %s %s %s", test_bin(), out, d[0], d[1], d[2]), 0);
    ASSERT_STR_CONTAINS(msg, "prep: 50 rows (train 50, val 0, test 0) from 2 of 3 input files");
    free(msg);
}

// A chunk boundary (PREP_CHUNK rows) and a read-block boundary inside one run, with frequency
// ids: the result must equal a brute-force mapping of a file that spans both.
// Terabyte days given as a shell glob (day_*) come in text order, day_10 before day_2: with
// --split days the last of them (day_9 of the real set) used to be held out without a word.
TEST(prep_days_out_of_order) {
    const char *d[4];
    const int day[4] = {0, 1, 10, 2}; // the order day_* sorts them in
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "day_%d", day[i]);
        d[i] = criteo_file(name, 10 * i, 10);
    }
    const char *out = tpath("o.bin");
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --split days -o %s %s %s %s %s", test_bin(), out, d[0], d[1], d[2], d[3]),
              2);
    ASSERT_STR_CONTAINS(msg, "--split days: ");
    ASSERT_STR_CONTAINS(msg, "day_2 comes after ");
    ASSERT_STR_CONTAINS(msg, "day_10: the inputs are not in day order");
    free(msg);
    ASSERT_TRUE(!file_exists(out));
    // Without --split days: a warning, and the rows in the order given.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q -o %s %s %s %s %s", test_bin(), out, d[0], d[1], d[2], d[3]), 0);
    ASSERT_STR_CONTAINS(msg, "warning: ");
    ASSERT_STR_CONTAINS(msg, "the rows are stored in the order given");
    free(msg);
    // In day order: no word.
    ASSERT_EQ(test_run(&msg, 20, "%s prep -q --split days -o %s %s %s %s %s", test_bin(), out, d[0], d[1], d[3], d[2]),
              0);
    ASSERT_TRUE(strstr(msg, "day order") == NULL);
    free(msg);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    ASSERT_EQ(ds.info.split[0], 30); // day_0, day_1, day_2; day_10 halved
    ASSERT_EQ(ds.info.split[1], 5);
    bp_ds_close(&ds);
}

TEST(prep_large_input_spans_chunks_and_blocks) {
    const int R = PREP_CHUNK + 4000; // ~ 19 MB: crosses the 4 MiB read blocks several times
    const char *in = criteo_file("big.tsv", 0, R);
    const char *out = tpath("big.bin");
    prep_stats st;
    ASSERT_OK(run_prep(PREP_CRITEO, &in, 1, out, 3, 0, &st));
    ASSERT_EQ(st.rows, (uint64_t)R);
    bp_dataset ds;
    ASSERT_OK(bp_ds_open(&ds, out, BP_DS_VERIFY));
    // C1 = r % 4: four values with counts R/4 (ties by value) -> id = r % 4.
    // C3 = r: every value once, all rare with K = 3 -> the single bucket, id 0.
    // C2: missing on r % 3 == 0 (R/3 + 1 times) vs 0xabcd (the rest, more): abcd = 0, missing = 1.
    for (int r = 0; r < R; r += 97) {
        ASSERT_EQ(ds.sparse[(size_t)r * 26 + 0], r % 4);
        ASSERT_EQ(ds.sparse[(size_t)r * 26 + 1], r % 3 == 0 ? 1 : 0);
        ASSERT_EQ(ds.sparse[(size_t)r * 26 + 2], 0);
        ASSERT_TRUE(ds.dense[(size_t)r * 13 + 3] == (float)log1p(1000003.0 * r));
    }
    ASSERT_EQ(ds.info.card[2], 1);
    bp_ds_close(&ds);
}

// A Criteo TSV of `rows` random lines (test_path(name), returned to be freed): dense values below
// 1000 and 32-bit hex categoricals, so nearly every categorical value is distinct.
static char *write_random_criteo(const char *name, int rows, uint64_t seed) {
    char *path = bp_xstrdup(test_path(name));
    FILE *f = fopen(path, "w");
    BP_ASSERT(f != NULL);
    bp_rng r;
    bp_rng_seed(&r, seed, 0);
    for (int i = 0; i < rows; i++) {
        fprintf(f, "%d", i & 1);
        for (int k = 0; k < 13; k++) fprintf(f, "\t%d", (int)bp_rng_below(&r, 1000));
        for (int k = 0; k < 26; k++) fprintf(f, "\t%08x", (unsigned)bp_rng_u64(&r));
        fputc('\n', f);
    }
    BP_ASSERT(fclose(f) == 0);
    return path;
}

// A vocabulary that runs out of memory (frequency ids of a log with many distinct values in a
// small address space) is an error naming the table and what needs no vocabulary, exit 1 with
// nothing written; it was an internal-error abort (SIGABRT, a core).  The limit is found from the
// binary's own start-up size: the smallest of 50 MB, 75 MB, ... at which a one-line log preps,
// plus 25 MB, under which 26 vocabularies of 150,000 distinct values (2 MiB each) cannot fit.
// One BLAS thread: OpenBLAS's worker threads each map a buffer (64-128 MB), and at a limit below
// them its worker spins, so that the process never exits (OpenBLAS's, not prep's; prep does no BLAS).
TEST(prep_vocabulary_out_of_memory_is_an_error) {
#if defined(__SANITIZE_ADDRESS__)
    test_skip("AddressSanitizer's shadow memory does not fit an address-space limit");
    return;
#endif
    const char *tiny = write_text("tiny.txt", "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf\t1\t2"
                                              "\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t14\t15\t16\t17\t18\t19\t20\n");
    char *path = write_random_criteo("distinct.txt", 150000, 5);
    char *out = NULL;
    int limit_mb = 50;
    for (; limit_mb <= 2000; limit_mb += 25) {
        free(out);
        if (test_run(&out, 20, "ulimit -v %d; OPENBLAS_NUM_THREADS=1 %s prep -q -o %s %s", limit_mb * 1024, test_bin(),
                     test_path("t.bin"), tiny) == 0)
            break;
    }
    ASSERT_MSG(limit_mb <= 2000, "a one-line log does not prep under 2 GB:\n%s", out);
    free(out);
    const char *x = test_path("x.bin");
    int rc = test_run(&out, 120, "ulimit -v %d; OPENBLAS_NUM_THREADS=1 %s prep -q -o %s %s", (limit_mb + 25) * 1024,
                      test_bin(), x, path);
    ASSERT_MSG(rc == 1, "exit %d under %d MB:\n%s", rc, limit_mb + 25, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: table C");
    ASSERT_STR_CONTAINS(out, ": out of memory: ");
    ASSERT_STR_CONTAINS(out, "--max-ind-range");
    ASSERT_MSG(!strstr(out, "internal error"), "%s", out);
    free(out);
    ASSERT_MSG(access(x, F_OK) != 0, "%s was left", x);
    // Hashed ids need no vocabulary: the same log preps under the same limit.
    rc = test_run(&out, 120, "ulimit -v %d; OPENBLAS_NUM_THREADS=1 %s prep -q --max-ind-range 1000000 -o %s %s",
                  (limit_mb + 25) * 1024, test_bin(), x, path);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    free(out);
    free(path);
}

// A dataset needs its own size on the disk, not twice: prep spills each section to a temporary
// file beside the output and copies it into place at the end, giving each copied piece's space
// back (a punched hole).  It used to fail with "No space left on device" on a disk with room for
// the dataset but not for the dataset and its spills.  A 300 KiB tmpfs in a private mount
// namespace (root only) holds the 213 KB dataset of 1300 rows; pieces of 8 KiB (the test hook
// BAGPIPE_TEST_COPY_PIECE) stand for 16 MiB pieces of a large dataset.
TEST(prep_needs_the_dataset_size_on_disk_not_twice) {
    if (geteuid() != 0 || test_run(NULL, 10, "unshare -m true") != 0) {
        test_skip("needs root and unshare -m for a small tmpfs");
        return;
    }
    char *path = write_random_criteo("a.txt", 1300, 9);
    const char *ref = test_path("ref.bin");
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s prep -q -o %s %s", test_bin(), ref, path), 0);
    free(out);
    struct stat st;
    ASSERT_EQ(stat(ref, &st), 0);
    ASSERT_MSG(st.st_size > 200000 && st.st_size < 250000, "%lld bytes", (long long)st.st_size);
    char mnt[512];
    snprintf(mnt, sizeof mnt, "%s", test_path("mnt"));
    ASSERT_EQ(mkdir(mnt, 0755), 0);
    char script[4096];
    snprintf(script, sizeof script, "mount -t tmpfs -o size=300k tmpfs %s && BAGPIPE_TEST_COPY_PIECE=8192 %s prep -q "
             "-o %s/x.bin %s && cmp %s/x.bin %s\n", mnt, test_bin(), mnt, path, mnt, ref);
    const char *sh = write_text("in_tmpfs.sh", script);
    int rc = test_run(&out, 60, "unshare -m sh %s", sh);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    free(out);
    free(path);
}

// The line limit (LINES_MAX bytes) is the text's, without its line end: a CRLF file reads as its
// LF twin, a line of exactly LINES_MAX bytes passes with either end or none (the last line), and
// one byte more is long with each.  A CRLF line of LINES_MAX bytes used to be refused.
TEST(prep_line_limit_counts_the_text_not_its_line_end) {
    static const char *const ends[] = {"\n", "\r\n", ""};
    for (int len = LINES_MAX - 1; len <= (int)LINES_MAX + 1; len++)
        for (size_t e = 0; e < BP_ARRAY_LEN(ends); e++) {
            const char *path = test_path("long.txt");
            FILE *f = fopen(path, "wb");
            ASSERT_TRUE(f != NULL);
            fprintf(f, "a%s", ends[e][0] ? ends[e] : "\n"); // a short first line
            for (int i = 0; i < len; i++) fputc('x', f);
            fputs(ends[e], f);
            fprintf(f, "b%s", ends[e]); // and a short one after it (none after a last line without end)
            fclose(f);
            if (!ends[e][0]) { // the long line last, without a line end
                f = fopen(path, "wb");
                fputs("a\n", f);
                for (int i = 0; i < len; i++) fputc('x', f);
                fclose(f);
            }
            lines_reader r;
            ASSERT_OK(lines_open(&r, path, 1));
            const char *s;
            size_t n;
            ASSERT_EQ(lines_next(&r, &s, &n), 1);
            ASSERT_TRUE(n == 1 && s[0] == 'a');
            const int k = lines_next(&r, &s, &n);
            if (len <= (int)LINES_MAX) {
                ASSERT_MSG(k == 1 && n == (size_t)len, "length %d, end %zu: %d (%zu bytes)", len, e, k, n);
            } else {
                ASSERT_MSG(k == LINES_LONG, "length %d, end %zu: %d", len, e, k);
            }
            ASSERT_EQ(r.line_no, 2);
            if (ends[e][0]) {
                ASSERT_EQ(lines_next(&r, &s, &n), 1);
                ASSERT_TRUE(n == 1 && s[0] == 'b');
            }
            ASSERT_EQ(lines_next(&r, &s, &n), 0);
            lines_close(&r);
        }
}

// --sub-sample-rate (the DLRM reference's --data-sub-sample-rate): each no-click row of the train
// days is dropped where prep_keeps says, in one pass (hashed ids) and in both passes of the
// frequency ids: the dataset equals the prep of the days with those lines removed by hand (so
// the vocabulary counts the rows kept).  The clicks and the last day (val and test) stay whole,
// the share dropped is the rate's (binomial, within five deviations), and the summary counts
// them.  From the command line: the same seed gives the same bytes, another seed other rows, the
// reference's name is the same flag, and the header records rate and seed.
TEST(prep_sub_sample_drops_train_negatives) {
    enum { PER = 3000 };
    const char *days[3], *kept[3];
    char name[32];
    for (int d = 0; d < 3; d++) snprintf(name, sizeof name, "day_%d", d), days[d] = criteo_file(name, d * PER, PER);
    for (int map = 0; map < 2; map++) { // hashed, then frequency ids
        prep_opts o;
        prep_opts_default(&o);
        o.inputs = days, o.n_inputs = 3, o.split = PREP_SPLIT_DAYS, o.sub_sample_rate = 0.75, o.seed = 7;
        if (map == 0) o.max_ind_range = 1000;
        else o.min_count = 2;
        o.out = tpath(map ? "sf.bin" : "sh.bin");
        prep_stats st;
        ASSERT_OK(prep_run(&o, &st));
        uint64_t negatives = 0, dropped = 0;
        for (int d = 0; d < 3; d++) {
            text t = {0};
            for (int r = d * PER; r < (d + 1) * PER; r++) {
                const int label = r % 3 == 0;
                negatives += !label && d < 2;
                if (prep_keeps(&o, d, (uint64_t)(r - d * PER + 1), label)) {
                    crow(&t, r);
                } else {
                    ASSERT_MSG(!label && d < 2, "row %d (day %d, label %d) dropped", r, d, label);
                    dropped++;
                }
            }
            snprintf(name, sizeof name, "kept_%d", d);
            kept[d] = write_bytes(name, t.s, t.n);
            free(t.s);
        }
        ASSERT_EQ(st.sub_negatives, negatives);
        ASSERT_EQ(st.sub_dropped, dropped);
        ASSERT_EQ(st.rows, 3 * PER - dropped);
        ASSERT_EQ(st.split[1] + st.split[2], PER); // the last day whole
        ASSERT_MSG(dropped > 2863 && dropped < 3137, "%llu of %llu no-click rows dropped at 0.75 (sd 27)",
                   (unsigned long long)dropped, (unsigned long long)negatives);
        prep_opts k = o;
        k.inputs = kept, k.sub_sample_rate = 0, k.out = tpath(map ? "kf.bin" : "kh.bin");
        ASSERT_OK(prep_run(&k, NULL));
        ASSERT_MSG(same_dataset(o.out, k.out), "%s ids: the sub-sampled dataset differs from the days filtered by hand",
                   map ? "frequency" : "hashed");
    }

    const char *a = tpath("a.bin"), *b = tpath("b.bin"), *c = tpath("c.bin"), *e = tpath("e.bin");
    char *msg = NULL;
    ASSERT_EQ(test_run(&msg, 30, "%s prep --split days --sub-sample-rate 0.5 --seed 3 -o %s %s %s %s", test_bin(), a,
                       days[0], days[1], days[2]), 0);
    ASSERT_STR_CONTAINS(msg, "no-click train rows dropped (0.");
    ASSERT_STR_CONTAINS(msg, "of the 4000 no-click train rows");
    free(msg);
    ASSERT_EQ(test_run(NULL, 30, "%s prep -q --split days --data-sub-sample-rate=0.5 --seed 3 -o %s %s %s %s",
                       test_bin(), b, days[0], days[1], days[2]), 0);
    ASSERT_EQ(test_run(NULL, 30, "%s prep -q --split days --sub-sample-rate 0.5 --seed 4 -o %s %s %s %s", test_bin(),
                       c, days[0], days[1], days[2]), 0);
    ASSERT_TRUE(dist_test_files_equal(a, b));
    ASSERT_TRUE(!same_dataset(a, c));
    ASSERT_EQ(test_run(&msg, 10, "%s info %s", test_bin(), a), 0);
    ASSERT_STR_CONTAINS(msg, "day_2 --sub-sample-rate 0.5 --seed 3");
    free(msg);
    // Wrong uses: 2, naming why, nothing written.
    static const struct {
        const char *flags, *want;
    } bad[] = {
        {"--split days --sub-sample-rate 1", "--sub-sample-rate: 1 is not in [0, 1)"},
        {"--split days --sub-sample-rate -0.1", "--sub-sample-rate: -0.1 is not in [0, 1)"},
        {"--split kaggle --sub-sample-rate 0.5", "with --split kaggle which rows are train is known only at the end"},
        {"--split ratio:0.8,0.1,0.1 --sub-sample-rate 0.5", "with --split ratio which rows are train"},
        {"--split days --max-rows 100 --sub-sample-rate 0.5", "--max-rows may stop before it"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(bad); i++) {
        ASSERT_EQ(test_run(&msg, 10, "%s prep %s -o %s %s %s %s", test_bin(), bad[i].flags, e, days[0], days[1],
                           days[2]), 2);
        ASSERT_STR_CONTAINS(msg, bad[i].want);
        free(msg);
        ASSERT_TRUE(!file_exists(e));
    }
}

// prep parses on every thread (--threads), a thread of its own reading the next lines meanwhile,
// and counts or maps the tables in parallel; what it writes and says must not depend on the number
// of threads.  A log of 3.5 chunks of lines (16,384 each) with bad lines of every kind, some on the
// lines where chunks meet, with sub-sampling; frequency ids, hashed ids with --compact, gzip input.
TEST(prep_threads_give_the_same_dataset_and_messages) {
    const int R = 57000;
    const int at[] = {4, 16383, 16384, 16385, 20000, 32767, 32768, 40001, 49151, 56999};
    text t = {0};
    size_t len_at_stop = 0; // text bytes up to and with line 16390 (--max-rows below)
    int nb = 0, lines = 0;
    for (int r = 0; r < R; r++) {
        if (nb < (int)BP_ARRAY_LEN(at) && r == at[nb]) {
            add_bad(&t, &criteo_bad_cases[(size_t)nb % BP_ARRAY_LEN(criteo_bad_cases)], r);
            nb++;
        } else {
            crow(&t, r);
        }
        if (++lines == 16390) len_at_stop = t.n;
    }
    const char *in = write_bytes("threads.tsv", t.s, t.n);
    const char *gz = write_gz("threads.tsv.gz", t.s, t.n);
    free(t.s);
    const int threads[] = {1, 2, 3, 16};
    const int level = bp_log_level;
    bp_log_level = BP_LOG_ERROR; // (the bad lines skipped, shown: compared below, by the command)
    for (int mode = 0; mode < 3; mode++) { // frequency ids, hashed with --compact, gzip input
        prep_stats st[4];
        const char *out[4];
        for (int k = 0; k < 4; k++) {
            char name[32];
            snprintf(name, sizeof name, "threads%d_%d.bin", mode, k);
            out[k] = tpath(name);
            prep_opts o;
            prep_opts_default(&o);
            o.inputs = mode == 2 ? &gz : &in;
            o.n_inputs = 1;
            o.out = out[k];
            o.min_count = 2;
            o.max_ind_range = mode == 1 ? 5000 : 0;
            o.compact = mode == 1;
            o.skip_bad = 1;
            o.sub_sample_rate = 0.3, o.seed = 11;
            o.threads = threads[k];
            ASSERT_OK(prep_run(&o, &st[k]));
            ASSERT_EQ(st[k].bad_total, BP_ARRAY_LEN(at));
            ASSERT_EQ(st[k].lines, (uint64_t)R);
            ASSERT_TRUE(st[k].sub_dropped > 5000);
            ASSERT_EQ(st[k].rows + st[k].sub_dropped + st[k].bad_total, (uint64_t)R);
            if (k == 0) continue;
            ASSERT_MSG(same_dataset(out[0], out[k]), "mode %d: %d threads wrote another dataset", mode, threads[k]);
            ASSERT_EQ(st[k].rows, st[0].rows);
            ASSERT_EQ(st[k].sub_dropped, st[0].sub_dropped);
            ASSERT_EQ(st[k].bytes_text, st[0].bytes_text);
            ASSERT_EQ(st[k].bytes_file, st[0].bytes_file);
            ASSERT_EQ(st[k].distinct, st[0].distinct);
            ASSERT_TRUE(memcmp(st[k].bad, st[0].bad, sizeof st[0].bad) == 0);
            ASSERT_TRUE(memcmp(st[k].card, st[0].card, sizeof st[0].card) == 0);
        }
    }
    bp_log_level = level;
    // The first bad line fails the run on any number of threads, though the lines after it were
    // read and parsed; --max-rows stops at its row, and the text counted is the text up to it.
    int rc;
    for (int k = 0; k < 4; k++) {
        char *msg = NULL;
        ASSERT_EQ(test_run(&msg, 30, "%s prep -q -t %d -o %s %s", test_bin(), threads[k], tpath("x.bin"), in), 1);
        ASSERT_STR_CONTAINS(msg, "threads.tsv:5: 3 fields, expected 40");
        free(msg);
        ASSERT_TRUE(!file_exists(tpath("x.bin")));
        prep_opts o;
        prep_opts_default(&o);
        o.inputs = &in;
        o.n_inputs = 1;
        o.out = tpath("m.bin");
        o.max_ind_range = 1000;
        o.skip_bad = 1;
        o.max_rows = 16390 - 4; // the bad lines 5, 16384, 16385 and 16386 are not rows
        o.threads = threads[k];
        prep_stats st;
        bp_log_level = BP_LOG_ERROR;
        rc = prep_run(&o, &st);
        bp_log_level = level;
        ASSERT_OK(rc);
        ASSERT_EQ(st.rows, o.max_rows);
        ASSERT_EQ(st.lines, 16390);
        ASSERT_EQ(st.bad_total, 4);
        ASSERT_EQ(st.bytes_text, (uint64_t)len_at_stop);
    }
    // What --skip-bad shows (the first three bad lines) is the same too.
    char *one = NULL, *two = NULL;
    ASSERT_EQ(test_run(&one, 30, "%s prep -q --skip-bad -t 1 --max-ind-range 99 -o %s %s 2>&1", test_bin(),
                       tpath("y.bin"), in), 0);
    ASSERT_EQ(test_run(&two, 30, "%s prep -q --skip-bad -t 3 --max-ind-range 99 -o %s %s 2>&1", test_bin(),
                       tpath("y.bin"), in), 0);
    ASSERT_STR_CONTAINS(one, "skipping ");
    ASSERT_STR_CONTAINS(one, "threads.tsv:16385: ");
    ASSERT_STR_EQ(one, two);
    free(one);
    free(two);
}

// A read error after a bad line: the bad line is said, as when one thread read and parsed each
// line in turn, though the error was met while the lines before it were parsed: among the lines of
// the bad one's chunk (a log of 10,000 lines), or in a chunk read ahead (30,000).
TEST(prep_bad_line_is_said_before_a_later_read_error) {
    for (int run = 0; run < 4; run++) {
        const int th = 1 + run % 2;
        text t = {0};
        for (int r = 0; r < (run < 2 ? 10000 : 30000); r++) {
            if (r == 100) add_bad(&t, &criteo_bad_cases[0], r);
            else crow(&t, r);
        }
        const char *gz = write_gz("late.tsv.gz", t.s, t.n);
        free(t.s);
        struct stat sb;
        ASSERT_EQ(stat(gz, &sb), 0);
        ASSERT_EQ(truncate(gz, sb.st_size * 3 / 4), 0);
        char *msg = NULL;
        ASSERT_EQ(test_run(&msg, 30, "%s prep -q -t %d -o %s %s", test_bin(), th, tpath("z.bin"), gz), 1);
        ASSERT_STR_CONTAINS(msg, "late.tsv.gz:101: 3 fields, expected 40");
        ASSERT_TRUE(strstr(msg, "truncated") == NULL);
        free(msg);
        ASSERT_EQ(test_run(&msg, 30, "%s prep -q -t %d --skip-bad -o %s %s", test_bin(), th, tpath("z.bin"), gz), 1);
        ASSERT_STR_CONTAINS(msg, "truncated gzip stream");
        free(msg);
        ASSERT_TRUE(!file_exists(tpath("z.bin")));
    }
}

// A pipe whose writer stalls after the rows asked for: prep stops as soon as it has them (or has
// met a bad line).  Its reading thread, waiting in read() for more, is stopped; and lines are
// taken as they come, not after a chunk's worth (16,384): prep used to wait for the writer in both
// ways (hashed ids read a pipe; `timeout` tells a wait from an exit).  Before the writer stalls:
// 3,000 lines, less than a chunk, or 20,000, a chunk and some.
TEST(prep_stops_reading_a_stalled_pipe) {
    for (int run = 0; run < 8; run++) {
        const int lines = run < 4 ? 3000 : 20000, threads = 1 + run % 2, bad = (run / 2) % 2;
        text t = {0};
        for (int r = 0; r < lines; r++) {
            if (r == 500) add_bad(&t, &criteo_bad_cases[0], r);
            else crow(&t, r);
        }
        const char *in = write_bytes("pipe.tsv", t.s, t.n);
        free(t.s);
        char name[16];
        snprintf(name, sizeof name, "fifo%d", run);
        const char *fifo = tpath(name);
        ASSERT_EQ(mkfifo(fifo, 0600), 0);
        char *msg = NULL;
        int rc = test_run(&msg, 60, "(cat %s; exec sleep 30) > %s 2>/dev/null & w=$!; timeout 10 %s prep -q -t %d %s "
                          "--max-ind-range 100 -o %s %s; rc=$?; kill $w; exit $rc", in, fifo, test_bin(), threads,
                          bad ? "" : "--max-rows 100", tpath("p.bin"), fifo);
        ASSERT_MSG(rc == bad, "%d lines, %d threads: exit %d (124: still reading after 10 s):\n%s", lines, threads, rc,
                   msg);
        if (bad) ASSERT_STR_CONTAINS(msg, ":501: 3 fields, expected 40");
        free(msg);
    }
}
