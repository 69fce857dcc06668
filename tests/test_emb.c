#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "emb.h"
#include "test.h"

static int make_layout(emb_layout *L, int F, const uint64_t *card, int D, int E, int S, uint64_t seed) {
    emb_layout_cfg c = {.F = F, .card = card, .D = D, .E = E, .S = S, .seed = seed};
    return emb_layout_init(L, &c);
}

TEST(emb_layout_keys_and_stride) {
    uint64_t card[3] = {10, 1, 7};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 3, card, 16, 17, 1, 1));
    ASSERT_EQ(L.rows, 18);
    ASSERT_EQ(L.offset[1], 10);
    ASSERT_EQ(L.offset[2], 11);
    ASSERT_EQ(emb_key(&L, 2, 3), 14);
    ASSERT_EQ(L.stride, 20); // 17 + 1 rounded up to a multiple of 4
    ASSERT_EQ(emb_layout_table_of(&L, 0), 0);
    ASSERT_EQ(emb_layout_table_of(&L, 9), 0);
    ASSERT_EQ(emb_layout_table_of(&L, 10), 1);
    ASSERT_EQ(emb_layout_table_of(&L, 11), 2);
    ASSERT_EQ(emb_layout_table_of(&L, 17), 2);
    ASSERT_EQ(emb_layout_bytes(&L), 18 * 20 * 4);
    char buf[128];
    ASSERT_STR_CONTAINS(emb_layout_describe(&L, buf, sizeof buf), "3 tables, 18 rows x 20 floats (17 model + 1 state + 2 padding)");
    emb_layout_cfg c = {.F = 3, .card = card, .D = 16, .S = 16, .row_align = 16};
    ASSERT_OK(emb_layout_init(&L, &c));
    ASSERT_EQ(L.E, 16);
    ASSERT_EQ(L.stride, 32);
    // bad configurations are refused with a message
    ASSERT_EQ(make_layout(&L, 3, card, 16, 18, 0, 1), BP_EINVAL);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EINVAL), "D or D+1");
    ASSERT_EQ(make_layout(&L, 0, card, 16, 16, 0, 1), BP_EINVAL);
    uint64_t zero[2] = {5, 0};
    ASSERT_EQ(make_layout(&L, 2, zero, 16, 16, 0, 1), BP_EINVAL);
    c.row_align = 3;
    ASSERT_EQ(emb_layout_init(&L, &c), BP_EINVAL);
}

TEST(emb_init_values_bound_and_state) {
    uint64_t card[4] = {3, 100, 5000, 1};
    emb_layout_cfg c = {.F = 4, .card = card, .D = 8, .E = 9, .S = 1, .state_init = 0.25f, .seed = 42};
    emb_layout L;
    ASSERT_OK(emb_layout_init(&L, &c));
    ASSERT_EQ(L.stride, 12);
    float *rows = bp_xmalloc(L.rows * L.stride * sizeof(float));
    emb_rows_init(&L, 0, L.rows, rows);
    int quart[4] = {0};
    double sum = 0, maxabs = 0;
    long cnt = 0;
    for (uint64_t k = 0; k < L.rows; k++) {
        const float *r = rows + k * L.stride;
        int f = emb_layout_table_of(&L, k);
        float bound = (float)sqrt(1.0 / (double)card[f]);
        for (int j = 0; j < 8; j++) {
            ASSERT_MSG(fabsf(r[j]) <= bound, "row %llu [%d] = %g > %g", (unsigned long long)k, j, r[j], bound);
            double u = r[j] / bound; // in [-1, 1]
            quart[BP_MIN(3, (int)((u + 1) * 2))]++;
            sum += u, cnt++;
            if (fabs(u) > maxabs) maxabs = fabs(u);
        }
        ASSERT_TRUE(r[8] == 0.0f);  // the wide weight starts at zero by default
        ASSERT_TRUE(r[9] == 0.25f); // the accumulator
        ASSERT_TRUE(r[10] == 0.0f && r[11] == 0.0f);
        float one[12];
        emb_row_init(&L, k, one);
        ASSERT_TRUE(memcmp(one, r, sizeof one) == 0);
    }
    // roughly uniform: each quarter of [-1, 1] holds 25% +- 2% of ~41k draws, mean near 0
    for (int q = 0; q < 4; q++) ASSERT_NEAR(quart[q] / (double)cnt, 0.25, 0.02);
    ASSERT_NEAR(sum / cnt, 0.0, 0.02);
    ASSERT_TRUE(maxabs > 0.99);
    // wide_uniform draws element D too; another seed gives other values
    c.wide_uniform = 1;
    emb_layout L2;
    ASSERT_OK(emb_layout_init(&L2, &c));
    float r2[12];
    emb_row_init(&L2, 200, r2);
    ASSERT_TRUE(r2[8] != 0.0f && fabsf(r2[8]) <= L2.bound[2]);
    ASSERT_TRUE(memcmp(r2, rows + 200 * 12, 8 * sizeof(float)) == 0); // elements < D unchanged
    // the documented scheme, value for value: draw k = splitmix64's k-th output from the row's seed,
    // float 2k from bits 40..63, 2k + 1 from bits 8..31; an odd last one (element 8 here) takes
    // the first half of draw 4 (runs with one --seed must keep their values across versions)
    const uint64_t h = bp_hash2(42, 200);
    for (int j = 0; j < 9; j++) {
        const uint64_t r = bp_mix64(h + (uint64_t)(j / 2) * 0x9e3779b97f4a7c15ull);
        const uint64_t u = j % 2 ? (r >> 8) & 0xffffff : r >> 40;
        const float want = (float)((double)((int64_t)u * 2 - (1 << 24)) / (1 << 24)) * L2.bound[2];
        ASSERT_MSG(r2[j] == want, "element %d: %.9g, the scheme gives %.9g", j, (double)r2[j], (double)want);
    }
    c.seed = 43;
    ASSERT_OK(emb_layout_init(&L2, &c));
    emb_row_init(&L2, 200, r2);
    ASSERT_TRUE(memcmp(r2, rows + 200 * 12, 8 * sizeof(float)) != 0);
    free(rows);
}

TEST(emb_table_fill_thread_independent) {
    uint64_t card[5] = {1000, 37, 20000, 5, 3001};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 5, card, 7, 7, 7, 9)); // odd D: half-used draws
    emb_table t1, t2, t3;
    ASSERT_OK(emb_table_init(&t1, &L, 1));
    ASSERT_OK(emb_table_init(&t2, &L, 2));
    ASSERT_OK(emb_table_alloc(&t3, &L, 0));
    emb_table_fill(&t3, 3);
    size_t bytes = emb_layout_bytes(&L);
    ASSERT_TRUE(memcmp(t1.data, t2.data, bytes) == 0);
    ASSERT_TRUE(memcmp(t1.data, t3.data, bytes) == 0);
    // any row range, initialised anywhere, matches
    ASSERT_EQ(L.stride, 16);
    float buf[100 * 16];
    emb_rows_init(&L, 20990, 100, buf); // spans tables 2, 3 and 4
    ASSERT_TRUE(memcmp(buf, emb_table_row(&t1, 20990), sizeof buf) == 0);
    emb_table_free(&t1), emb_table_free(&t2), emb_table_free(&t3);
    emb_table_free(&t3); // twice is safe
}

TEST(emb_table_memory_refused_when_too_big) {
    uint64_t card[2] = {(uint64_t)1 << 40, (uint64_t)1 << 40};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 2, card, 64, 64, 64, 1));
    ASSERT_EQ(emb_layout_bytes(&L), ((uint64_t)2 << 40) * 128 * 4);
    emb_table t;
    int rc = emb_table_init(&t, &L, 1);
    ASSERT_EQ(rc, BP_ENOMEM);
    ASSERT_STR_CONTAINS(bp_errmsg(rc), "available");
    ASSERT_TRUE(t.data == NULL);
    emb_table_free(&t);
    ASSERT_EQ(emb_grad_bytes(1000, 16), 1000 * (24 + 64) + 6 * 2048 * 4);
}

// naive reference: out[b][f] = row(f, ids[b][f])[0..E)
static void gather_naive(const emb_table *t, const uint32_t *ids, int B, float *out) {
    const emb_layout *L = &t->L;
    for (int b = 0; b < B; b++)
        for (int f = 0; f < L->F; f++)
            for (int e = 0; e < L->E; e++)
                out[((size_t)b * L->F + f) * L->E + e] =
                    emb_table_row(t, emb_key(L, f, ids[b * L->F + f]))[e];
}

TEST(emb_gather_matches_naive) {
    const int Ds[] = {16, 16, 32, 32, 64, 64, 128, 128, 5, 5, 48, 200};
    const int Es[] = {16, 17, 32, 33, 64, 65, 128, 129, 5, 6, 48, 200}; // specialised, then generic
    uint64_t card[3] = {50, 7, 1000};
    const int F = 3, Bmax = 40;
    uint32_t ids[40 * 3];
    bp_rng r;
    bp_rng_seed(&r, 5, 0);
    for (int b = 0; b < Bmax; b++)
        for (int f = 0; f < F; f++) ids[b * F + f] = bp_rng_below(&r, (uint32_t)card[f]);
    for (int c = 0; c < (int)BP_ARRAY_LEN(Es); c++) {
        emb_layout L;
        ASSERT_OK(make_layout(&L, F, card, Ds[c], Es[c], 1, 3));
        emb_table t;
        ASSERT_OK(emb_table_init(&t, &L, 1));
        size_t n = (size_t)Bmax * F * L.E;
        float *a = bp_xmalloc(n * sizeof(float)), *b = bp_xmalloc(n * sizeof(float));
        const float **ptrs = bp_xmalloc((size_t)Bmax * F * sizeof *ptrs);
        for (int B = 0; B <= Bmax; B += B < 3 ? 1 : 37) { // below and above the prefetch distance
            memset(a, 0xff, n * sizeof(float));
            emb_gather(&t, ids, B, a);
            gather_naive(&t, ids, B, b);
            ASSERT_MSG(memcmp(a, b, (size_t)B * F * L.E * sizeof(float)) == 0, "E=%d B=%d", L.E, B);
            ASSERT_TRUE(B == Bmax || isnan(a[(size_t)B * F * L.E])); // nothing written past the end
            for (int i = 0; i < B * F; i++) ptrs[i] = emb_table_row(&t, emb_key(&L, i % F, ids[i]));
            memset(a, 0, n * sizeof(float));
            emb_gather_rows(ptrs, B * F, L.E, a);
            ASSERT_MSG(memcmp(a, b, (size_t)B * F * L.E * sizeof(float)) == 0, "rows E=%d B=%d", L.E, B);
        }
        free(a), free(b), free(ptrs);
        emb_table_free(&t);
    }
}

extern void openblas_set_num_threads(int);

// A gather big enough to be split over the pool (3 threads) gives the naive rows, as one thread.
TEST(emb_gather_threads_identical) {
    uint64_t card[3] = {5000, 70, 100000};
    enum { F = 3, B = 3001 };
    emb_layout L;
    ASSERT_OK(make_layout(&L, F, card, 16, 17, 1, 3));
    emb_table t;
    ASSERT_OK(emb_table_init(&t, &L, 1));
    uint32_t *ids = bp_xmalloc((size_t)B * F * sizeof *ids);
    bp_rng r;
    bp_rng_seed(&r, 6, 0);
    for (int i = 0; i < B * F; i++) ids[i] = bp_rng_below(&r, (uint32_t)card[i % F]);
    size_t n = (size_t)B * F * L.E;
    float *a = bp_xmalloc(n * sizeof(float)), *b = bp_xmalloc(n * sizeof(float));
    const float **ptrs = bp_xmalloc((size_t)B * F * sizeof *ptrs);
    for (int i = 0; i < B * F; i++) ptrs[i] = emb_table_row(&t, emb_key(&L, i % F, ids[i]));
    gather_naive(&t, ids, B, b);
    openblas_set_num_threads(3);
    memset(a, 0xff, n * sizeof(float));
    emb_gather(&t, ids, B, a);
    ASSERT_TRUE(memcmp(a, b, n * sizeof(float)) == 0);
    memset(a, 0xff, n * sizeof(float));
    emb_gather_rows(ptrs, B * F, L.E, a);
    ASSERT_TRUE(memcmp(a, b, n * sizeof(float)) == 0);
    openblas_set_num_threads(1);
    free(a), free(b), free(ptrs), free(ids);
    emb_table_free(&t);
}

// Runs fn in a child process and reports whether it died of SIGABRT.
static int aborts(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        fn();
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

// Gathers B samples of ids from two tables of 10 rows.
static void gather_two_tables(const uint32_t *ids, int B) {
    uint64_t card[2] = {10, 10};
    emb_layout L;
    make_layout(&L, 2, card, 16, 16, 0, 1);
    emb_table t;
    emb_table_init(&t, &L, 1);
    float out[64 * 16];
    emb_gather(&t, ids, B, out);
}

static void gather_bad_id(void) {
    static const uint32_t ids[4] = {1, 2, 3, 10}; // table 1 has ids 0..9
    gather_two_tables(ids, 2);
}

// The same early in a batch long enough for the gather's prefetching loop (the one above reaches
// only its tail loop): an id equal to the table's size.
static void gather_bad_id_early(void) {
    static const uint32_t ids[64] = {1, 10}; // the rest 0
    gather_two_tables(ids, 32);
}

static void coalesce_bad_id(void) {
    uint64_t card[2] = {10, 10};
    emb_layout L;
    make_layout(&L, 2, card, 16, 16, 0, 1);
    emb_grad g;
    emb_grad_init(&g, 4, 16);
    uint32_t ids[4] = {1, 2, 11, 1};
    float d[4 * 16] = {0};
    emb_grad_coalesce(&g, &L, ids, d, 2);
}

TEST(emb_bad_id_aborts) {
    ASSERT_TRUE(aborts(gather_bad_id));
    ASSERT_TRUE(aborts(gather_bad_id_early));
    ASSERT_TRUE(aborts(coalesce_bad_id));
}

// Brute force: every (b, f) entry as (key, position), sorted by key then position with a simple
// insertion into a sorted list; rows summed in that order in float.
typedef struct {
    uint64_t key;
    int pos;
} kp;
static int kp_cmp(const void *a, const void *b) {
    const kp *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->pos - y->pos;
}

static int coalesce_brute(const emb_layout *L, const uint32_t *ids, const float *d, int B,
                          uint64_t *keys, float *rows) {
    int N = B * L->F, n = 0, E = L->E;
    kp *a = bp_xmalloc((size_t)N * sizeof *a + 1);
    for (int i = 0; i < N; i++) a[i] = (kp){emb_key(L, i % L->F, ids[i]), i};
    qsort(a, (size_t)N, sizeof *a, kp_cmp);
    for (int i = 0; i < N; i++) {
        if (i == 0 || a[i].key != a[i - 1].key) {
            keys[n] = a[i].key;
            for (int e = 0; e < E; e++) rows[(size_t)n * E + e] = d[(size_t)a[i].pos * E + e];
            n++;
        } else {
            for (int e = 0; e < E; e++) rows[(size_t)(n - 1) * E + e] += d[(size_t)a[i].pos * E + e];
        }
    }
    free(a);
    return n;
}

static void random_batch(bp_rng *r, const emb_layout *L, int B, uint32_t *ids, float *d) {
    for (int b = 0; b < B; b++)
        for (int f = 0; f < L->F; f++) {
            uint64_t c = L->card[f];
            // skewed: half the draws from the first 8 ids, so duplicates are many
            uint64_t id = bp_rng_below(r, 2) ? bp_rng_u64(r) % (c < 8 ? c : 8) : bp_rng_u64(r) % c;
            ids[b * L->F + f] = (uint32_t)id;
        }
    for (size_t i = 0; i < (size_t)B * L->F * L->E; i++) d[i] = (float)bp_rng_normal(r);
}

TEST(emb_coalesce_matches_brute_force) {
    const int Es[] = {16, 17, 7, 64};
    uint64_t card_small[4] = {5, 100, 3000, 1}, card_big[3] = {(uint64_t)1 << 34, 4000000000u, 77};
    bp_rng r;
    bp_rng_seed(&r, 11, 0);
    for (int big = 0; big < 2; big++) {
        for (int c = 0; c < (int)BP_ARRAY_LEN(Es); c++) {
            emb_layout L;
            int E = Es[c], D = E == 17 ? 16 : E;
            ASSERT_OK(make_layout(&L, big ? 3 : 4, big ? card_big : card_small, D, E, 0, 1));
            const int Bmax = 300, cap = Bmax * L.F;
            emb_grad g;
            ASSERT_OK(emb_grad_init(&g, cap, E));
            uint32_t *ids = bp_xmalloc((size_t)cap * sizeof *ids);
            float *d = bp_xmalloc((size_t)cap * E * sizeof *d), *rows = bp_xmalloc((size_t)cap * E * sizeof *rows);
            uint64_t *keys = bp_xmalloc((size_t)cap * sizeof *keys);
            for (int B = 1; B <= Bmax; B += 299) {
                random_batch(&r, &L, B, ids, d);
                int n = coalesce_brute(&L, ids, d, B, keys, rows);
                emb_grad_coalesce(&g, &L, ids, d, B);
                ASSERT_EQ(g.n, n);
                ASSERT_TRUE(B == 1 || n < B * L.F); // duplicates happened
                ASSERT_TRUE(memcmp(g.keys, keys, (size_t)n * sizeof *keys) == 0);
                ASSERT_MSG(memcmp(g.rows, rows, (size_t)n * E * sizeof *rows) == 0, "E=%d B=%d big=%d", E, B, big);
                // determinism: again, on a workspace now holding other data
                memset(g.pairs, 0xab, (size_t)cap * sizeof *g.pairs);
                emb_grad_coalesce(&g, &L, ids, d, B);
                ASSERT_EQ(g.n, n);
                ASSERT_TRUE(memcmp(g.rows, rows, (size_t)n * E * sizeof *rows) == 0);
            }
            emb_grad_coalesce(&g, &L, ids, d, 0);
            ASSERT_EQ(g.n, 0);
            free(ids), free(d), free(rows), free(keys);
            emb_grad_free(&g);
            emb_grad_free(&g);
        }
    }
}

// Summation order is sample order: with values whose float sum depends on the order, the
// result is exactly ((a + b) + c) for three occurrences in samples 0, 1, 2: here 1, where the
// reverse order or any other gives 0.
TEST(emb_coalesce_sums_in_sample_order) {
    uint64_t card[1] = {4};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 1, card, 16, 16, 0, 1));
    emb_grad g;
    ASSERT_OK(emb_grad_init(&g, 5, 16));
    uint32_t ids[5] = {2, 0, 2, 3, 2}; // key 2 in samples 0, 2, 4, other keys between
    float d[5 * 16];
    for (int e = 0; e < 16; e++)
        d[e] = 1e8f, d[16 + e] = 7.0f, d[32 + e] = -1e8f, d[48 + e] = 7.0f, d[64 + e] = 1.0f;
    emb_grad_coalesce(&g, &L, ids, d, 5);
    ASSERT_EQ(g.n, 3);
    ASSERT_TRUE(g.keys[0] == 0 && g.keys[1] == 2 && g.keys[2] == 3);
    ASSERT_TRUE((1.0f + -1e8f) + 1e8f == 0.0f && (1e8f + 1.0f) + -1e8f == 0.0f); // other orders
    for (int e = 0; e < 16; e++) ASSERT_TRUE(g.rows[16 + e] == 1.0f);
    emb_grad_free(&g);
}

TEST(emb_grad_sum_into_rank_order) {
    emb_grad total, part;
    ASSERT_OK(emb_grad_init(&total, 8, 3));
    ASSERT_OK(emb_grad_init(&part, 8, 3));
    uint64_t keys[5] = {1, 4, 9, 10, 1ull << 35};
    ASSERT_OK(emb_grad_set_keys(&total, keys, 5));
    for (int i = 0; i < 15; i++) ASSERT_TRUE(total.rows[i] == 0.0f);
    uint64_t pk[2] = {4, 1ull << 35};
    ASSERT_OK(emb_grad_set_keys(&part, pk, 2));
    for (int i = 0; i < 6; i++) part.rows[i] = (float)(i + 1);
    ASSERT_OK(emb_grad_sum_into(&total, &part));
    ASSERT_OK(emb_grad_sum_into(&total, &part));
    ASSERT_TRUE(total.rows[3] == 2.0f && total.rows[5] == 6.0f && total.rows[12] == 8.0f);
    ASSERT_TRUE(total.rows[0] == 0.0f && total.rows[6] == 0.0f);
    // a key outside the sum's keys: refused, total unchanged
    float before[15];
    memcpy(before, total.rows, sizeof before);
    uint64_t bad[2] = {4, 5};
    ASSERT_OK(emb_grad_set_keys(&part, bad, 2));
    part.rows[0] = 100;
    ASSERT_EQ(emb_grad_sum_into(&total, &part), BP_EMISMATCH);
    ASSERT_TRUE(memcmp(before, total.rows, sizeof before) == 0);
    // keys not ascending, too many
    uint64_t unsorted[2] = {5, 4};
    ASSERT_EQ(emb_grad_set_keys(&part, unsorted, 2), BP_EINVAL);
    ASSERT_EQ(emb_grad_set_keys(&part, keys, 9), BP_ECAPACITY);
    emb_grad other;
    ASSERT_OK(emb_grad_init(&other, 8, 4));
    ASSERT_EQ(emb_grad_sum_into(&total, &other), BP_EMISMATCH);
    emb_grad_free(&total), emb_grad_free(&part), emb_grad_free(&other);
}

// Two trainers' halves of a batch, coalesced separately and summed in rank order over the union
// of their keys, equal the sum the plan's synchronisation computes: each key's rows added
// trainer 0 first.  Checked against the brute force per trainer.
TEST(emb_grad_partials_sum_over_union) {
    uint64_t card[3] = {20, 3, 500};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 3, card, 16, 16, 0, 1));
    const int B = 64, half = B / 2, cap = B * 3;
    bp_rng r;
    bp_rng_seed(&r, 3, 1);
    uint32_t ids[64 * 3];
    float d[64 * 3 * 16];
    random_batch(&r, &L, B, ids, d);
    emb_grad p0, p1, total;
    ASSERT_OK(emb_grad_init(&p0, cap, 16));
    ASSERT_OK(emb_grad_init(&p1, cap, 16));
    ASSERT_OK(emb_grad_init(&total, cap, 16));
    emb_grad_coalesce(&p0, &L, ids, d, half);
    emb_grad_coalesce(&p1, &L, ids + half * 3, d + half * 3 * 16, half);
    // union of keys
    uint64_t u[64 * 3];
    int n = 0, i = 0, j = 0;
    while (i < p0.n || j < p1.n) {
        uint64_t k = j == p1.n || (i < p0.n && p0.keys[i] < p1.keys[j]) ? p0.keys[i] : p1.keys[j];
        if (i < p0.n && p0.keys[i] == k) i++;
        if (j < p1.n && p1.keys[j] == k) j++;
        u[n++] = k;
    }
    ASSERT_OK(emb_grad_set_keys(&total, u, n));
    ASSERT_OK(emb_grad_sum_into(&total, &p0));
    ASSERT_OK(emb_grad_sum_into(&total, &p1));
    for (int k = 0; k < n; k++) {
        for (int e = 0; e < 16; e++) {
            float s0 = 0.0f, s1 = 0.0f;
            int h0 = 0, h1 = 0;
            for (int x = 0; x < B * 3; x++)
                if (emb_key(&L, x % 3, ids[x]) == u[k]) {
                    if (x < half * 3) s0 = h0++ ? s0 + d[x * 16 + e] : d[x * 16 + e];
                    else s1 = h1++ ? s1 + d[x * 16 + e] : d[x * 16 + e];
                }
            ASSERT_TRUE(total.rows[k * 16 + e] == (0.0f + s0) + s1);
        }
    }
    emb_grad_free(&p0), emb_grad_free(&p1), emb_grad_free(&total);
}

// One row in all (no key bits to sort on) and one entry (no position bits).
TEST(emb_coalesce_degenerate_sizes) {
    uint64_t card[1] = {1};
    emb_layout L;
    ASSERT_OK(make_layout(&L, 1, card, 16, 17, 0, 1));
    emb_grad g;
    ASSERT_OK(emb_grad_init(&g, 4, 17));
    uint32_t ids[4] = {0, 0, 0, 0};
    float d[4 * 17];
    for (int i = 0; i < 4 * 17; i++) d[i] = (float)i;
    emb_grad_coalesce(&g, &L, ids, d, 4);
    ASSERT_EQ(g.n, 1);
    ASSERT_EQ(g.keys[0], 0);
    for (int e = 0; e < 17; e++) ASSERT_TRUE(g.rows[e] == ((d[e] + d[17 + e]) + d[34 + e]) + d[51 + e]);
    emb_grad_coalesce(&g, &L, ids, d + 17, 1);
    ASSERT_EQ(g.n, 1);
    ASSERT_TRUE(g.rows[0] == 17.0f);
    emb_grad_free(&g);
}
