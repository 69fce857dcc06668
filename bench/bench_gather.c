// bench_gather: embedding gather, coalescing, optimizer apply and init throughput.
//
//   build/bench/bench_gather [GIB [SECONDS [SECTIONS]]]
//     GIB: table size (default 2), SECONDS: time per figure (default 0.4), SECTIONS: a
//     comma-separated subset of gather,padding,coalesce,apply,init (default all)
//
// Every gather figure is shown next to a bound measured in the same run on the same table and
// the same random rows: the simplest loop that copies rows of a compile-time size from
// precomputed addresses ("plain"), and the same loop with software prefetch ("plain+pf").
// Figures are aggregate rows per second over 1 or 2 threads; the machine is shared, so they are
// lower bounds and only the ratios side by side mean much.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "emb.h"
#include "optim.h"
#include "bench_util.h"

static const uint64_t kaggle_card[26] = {1460,    583,   10131227, 2202608, 305,    24,   12517,
                                         633,     3,     93145,    5683,    8351593, 3194, 27,
                                         14992,   5461306, 10,     5652,    2173,   4,    7046547,
                                         18,      15,    286181,   105,     142572};

// NB batches of ids per thread and NG gradients per thread, cycled: enough distinct rows (over
// 100 MiB per thread) that no figure is helped by rows left in the caches by an earlier call.
enum { F = 26, B = 1024, NB = 128, NG = 16, MAX_THREADS = 2 };
static double g_seconds = 0.4;

// ---------------------------------------------------------------------------------------------
// Side-by-side timing.  The variants being compared take turns call by call (each call is one
// batch, well under a millisecond to a few), with every thread running the same variant at the
// same time; so load from other jobs on a shared machine falls on all of them alike and their
// ratios hold even when the absolute figures drop.  fn(arg, thread, iter) returns rows moved.
typedef long (*work_fn)(void *arg, int thread, long iter);
typedef struct {
    work_fn fn; // NULL: not measured (NaN)
    void *arg;
} variant;

enum { MAX_VARIANTS = 6 };
typedef struct {
    pthread_barrier_t bar;
    int stop;     // set by thread 0 after its call; read by every thread at the next turn
    double t_end; // thread 0 stops the run at the first full turn after this time
} timing;
typedef struct {
    timing *tm;
    const variant *v;
    int nv, thread;
    double rows[MAX_VARIANTS], secs[MAX_VARIANTS];
} worker;

static void *worker_main(void *p) {
    worker *w = p;
    for (long it = 0;; it++) {
        pthread_barrier_wait(&w->tm->bar);
        int stop = w->tm->stop; // read between these two barriers, written only after the second
        pthread_barrier_wait(&w->tm->bar);
        if (stop) break;
        int vi = (int)(it % w->nv);
        if (w->v[vi].fn) {
            double t0 = bp_now();
            w->rows[vi] += (double)w->v[vi].fn(w->v[vi].arg, w->thread, it); // consecutive
            // calls, whatever their variant, use different rows
            w->secs[vi] += bp_now() - t0;
        }
        if (w->thread == 0 && vi == w->nv - 1 && bp_now() > w->tm->t_end) w->tm->stop = 1;
    }
    return NULL;
}

// rate[i] = rows per second of variant i summed over nthreads threads, each variant given about
// g_seconds in all.
static void measure(const variant *v, int nv, int nthreads, double *rate) {
    BP_ASSERT(nv <= MAX_VARIANTS && nthreads <= MAX_THREADS);
    timing tm = {.stop = 0, .t_end = bp_now() + g_seconds * nv};
    pthread_barrier_init(&tm.bar, NULL, (unsigned)nthreads);
    worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.tm = &tm, .v = v, .nv = nv, .thread = i};
        if (i) pthread_create(&tid[i], NULL, worker_main, &w[i]);
    }
    worker_main(&w[0]);
    for (int i = 1; i < nthreads; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&tm.bar);
    for (int k = 0; k < nv; k++) {
        rate[k] = v[k].fn ? 0 : NAN;
        for (int i = 0; i < nthreads && v[k].fn; i++) rate[k] += w[i].rows[k] / w[i].secs[k];
    }
}

// ---------------------------------------------------------------------------------------------
// Gather

typedef struct {
    emb_table *t;
    uint32_t *ids[MAX_THREADS];  // (NB, B, F) per thread
    uint64_t *keys[MAX_THREADS]; // (NB, B * F) the same rows as global keys
    float *out[MAX_THREADS];     // (B, F, E)
} gather_ctx;

#define PLAIN_DEF(DC)                                                                         \
    static long plain_##DC(void *arg, int th, long it) {                                      \
        gather_ctx *c = arg;                                                                  \
        const float *base = c->t->data;                                                       \
        const size_t stride = (size_t)c->t->L.stride;                                         \
        const uint64_t *k = c->keys[th] + (size_t)(it % NB) * B * F;                          \
        float *out = c->out[th];                                                              \
        for (size_t i = 0; i < (size_t)B * F; i++)                                            \
            memcpy(out + i * DC, base + k[i] * stride, DC * sizeof(float));                   \
        return (long)B * F;                                                                   \
    }                                                                                         \
    static long plainpf_##DC(void *arg, int th, long it) {                                    \
        gather_ctx *c = arg;                                                                  \
        const float *base = c->t->data;                                                       \
        const size_t stride = (size_t)c->t->L.stride, n = (size_t)B * F;                      \
        const uint64_t *k = c->keys[th] + (size_t)(it % NB) * B * F;                          \
        float *out = c->out[th];                                                              \
        for (size_t i = 0; i < n; i++) {                                                      \
            if (i + 16 < n)                                                                   \
                for (int o = 0; o < DC * 4; o += 64)                                          \
                    __builtin_prefetch((const char *)(base + k[i + 16] * stride) + o);        \
            memcpy(out + i * DC, base + k[i] * stride, DC * sizeof(float));                   \
        }                                                                                     \
        return (long)n;                                                                       \
    }
PLAIN_DEF(16)
PLAIN_DEF(64)

static long gather_work(void *arg, int th, long it) {
    gather_ctx *c = arg;
    emb_gather(c->t, c->ids[th] + (size_t)(it % NB) * B * F, B, c->out[th]);
    return (long)B * F;
}

// Uniform random ids over every table (the worst case: no reuse at all).
static void gather_ctx_init(gather_ctx *c, emb_table *t, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->t = t;
    bp_rng r;
    for (int th = 0; th < MAX_THREADS; th++) {
        bp_rng_seed(&r, seed, (uint64_t)th);
        c->ids[th] = bp_xmalloc((size_t)NB * B * F * sizeof(uint32_t));
        c->keys[th] = bp_xmalloc((size_t)NB * B * F * sizeof(uint64_t));
        c->out[th] = bp_xmalloc((size_t)B * F * t->L.E * sizeof(float));
        for (size_t i = 0; i < (size_t)NB * B * F; i++) {
            int f = (int)(i % F);
            c->ids[th][i] = (uint32_t)(bp_rng_u64(&r) % t->L.card[f]);
            c->keys[th][i] = emb_key(&t->L, f, c->ids[th][i]);
        }
    }
}

static void gather_ctx_free(gather_ctx *c) {
    for (int th = 0; th < MAX_THREADS; th++) free(c->ids[th]), free(c->keys[th]), free(c->out[th]);
}

// A layout of F equal tables holding about `bytes`.
static emb_layout layout_for_bytes(double bytes, int D, int E, int S, int align) {
    int stride = (E + S + align - 1) / align * align;
    uint64_t per = (uint64_t)(bytes / (stride * 4.0) / F);
    uint64_t card[F];
    for (int f = 0; f < F; f++) card[f] = per;
    emb_layout L;
    emb_layout_cfg cfg = {.F = F, .card = card, .D = D, .E = E, .S = S, .seed = 1, .row_align = align};
    BP_ASSERT(emb_layout_init(&L, &cfg) == 0);
    return L;
}

static int table_or_skip(emb_table *t, const emb_layout *L, int huge) {
    if (emb_table_alloc(t, L, huge)) {
        printf("  (skipped: %s)\n", bp_errmsg(BP_ENOMEM));
        return -1;
    }
    emb_table_fill(t, 2);
    return 0;
}

static void bench_gather_plain(double bytes) {
    printf("\n== gather vs plain random-row copy, %.1f GiB table, %d tables, uniform random ids, "
           "batches of %d x %d rows; huge-page and 4 KiB-page tables measured side by side ==\n",
           bytes / (1 << 30), F, B, F);
    printf("%-4s %-6s %-3s %14s %14s %14s %13s\n", "D", "pages", "thr", "plain Mrow/s", "plain+pf",
           "emb_gather", "gather/plain");
    for (int D = 16; D <= 64; D *= 4) {
        emb_layout L = layout_for_bytes(bytes, D, D, 0, 4);
        emb_table t[2]; // huge pages, 4 KiB pages
        gather_ctx c[2];
        if (table_or_skip(&t[0], &L, 1)) continue;
        if (table_or_skip(&t[1], &L, 0)) {
            emb_table_free(&t[0]);
            continue;
        }
        for (int h = 0; h < 2; h++) gather_ctx_init(&c[h], &t[h], 7);
        for (int nt = 1; nt <= 2; nt++) {
            variant v[6];
            for (int h = 0; h < 2; h++) {
                v[3 * h] = (variant){D == 16 ? plain_16 : plain_64, &c[h]};
                v[3 * h + 1] = (variant){D == 16 ? plainpf_16 : plainpf_64, &c[h]};
                v[3 * h + 2] = (variant){gather_work, &c[h]};
            }
            double m[6];
            measure(v, 6, nt, m);
            for (int h = 0; h < 2; h++)
                printf("%-4d %-6s %-3d %14.1f %14.1f %14.1f %12.2fx\n", D, h ? "4k" : "huge", nt,
                       m[3 * h] / 1e6, m[3 * h + 1] / 1e6, m[3 * h + 2] / 1e6, m[3 * h + 2] / m[3 * h]);
        }
        for (int h = 0; h < 2; h++) gather_ctx_free(&c[h]), emb_table_free(&t[h]);
    }
}

// Row padding: the same rows (row-wise Adagrad: E model floats + 1 accumulator) with stride
// rounded to 4 floats or to 16 (a cache line): gather rate and optimizer apply rate.
typedef struct {
    emb_table *t;
    const emb_opt *o;
    emb_grad g[MAX_THREADS][NG]; // thread th's gradients: keys in its half of the table
} apply_ctx;

static long apply_work(void *arg, int th, long it) {
    apply_ctx *c = arg;
    emb_grad *g = &c->g[th][it % NG];
    emb_opt_apply_table_range(c->o, c->t, g, 0, g->n);
    return g->n;
}

// A gradient of n distinct random keys (ascending) with small values, drawn from part `part`
// of `parts` equal parts of the key space (threads get disjoint rows).
static void random_grad(emb_grad *g, const emb_layout *L, int n, int part, int parts, uint64_t seed) {
    bp_rng r;
    bp_rng_seed(&r, seed, (uint64_t)part);
    uint64_t *keys = bp_xmalloc((size_t)n * sizeof *keys);
    uint64_t base = L->rows / parts * part, span = L->rows / parts;
    // n keys from n equal strata: distinct and ascending
    for (int i = 0; i < n; i++) {
        uint64_t lo = span * (uint64_t)i / (uint64_t)n, hi = span * (uint64_t)(i + 1) / (uint64_t)n;
        keys[i] = base + lo + bp_rng_u64(&r) % (hi - lo);
    }
    BP_ASSERT(emb_grad_set_keys(g, keys, n) == 0);
    for (size_t i = 0; i < (size_t)n * g->E; i++) g->rows[i] = (float)(bp_rng_uniform(&r) - 0.5) * 1e-3f;
    free(keys);
}

static apply_ctx *apply_ctx_new(emb_table *t, const emb_opt *o) {
    apply_ctx *c = bp_xcalloc(1, sizeof *c);
    c->t = t, c->o = o;
    for (int th = 0; th < MAX_THREADS; th++)
        for (int k = 0; k < NG; k++) {
            BP_ASSERT(emb_grad_init(&c->g[th][k], B * F, o->E) == 0);
            random_grad(&c->g[th][k], &t->L, B * F, th, MAX_THREADS, (uint64_t)k);
        }
    return c;
}

static void apply_ctx_free(apply_ctx *c) {
    for (int th = 0; th < MAX_THREADS; th++)
        for (int k = 0; k < NG; k++) emb_grad_free(&c->g[th][k]);
    free(c);
}

static void bench_padding(double bytes) {
    printf("\n== row padding: row-wise Adagrad rows (E + 1 floats), stride rounded to 4 or 16 floats; "
           "the same rows in both tables, measured side by side, huge pages ==\n");
    printf("%-4s %-7s %-3s %18s %18s %8s\n", "E", "strides", "thr", "gather Mrow/s", "apply Mrow/s",
           "memory");
    const int Es[] = {16, 17, 64, 65};
    for (int c = 0; c < 4; c++) {
        int E = Es[c], D = E & ~1;
        emb_layout L4 = layout_for_bytes(bytes, D, E, 1, 4);
        emb_table t[2];
        gather_ctx gc[2];
        apply_ctx *ac[2];
        emb_opt o = emb_opt_make(EMB_OPT_ROWWISE_ADAGRAD, 0.01f, E);
        int ok = 1;
        for (int a = 0; a < 2; a++) {
            emb_layout_cfg cfg = {.F = F, .card = L4.card, .D = D, .E = E, .S = 1, .seed = 1, .row_align = a ? 16 : 4};
            emb_layout L;
            BP_ASSERT(emb_layout_init(&L, &cfg) == 0);
            if (table_or_skip(&t[a], &L, 1)) {
                if (a) emb_table_free(&t[0]), gather_ctx_free(&gc[0]), apply_ctx_free(ac[0]);
                ok = 0;
                break;
            }
            gather_ctx_init(&gc[a], &t[a], 7);
            ac[a] = apply_ctx_new(&t[a], &o);
        }
        if (!ok) continue;
        for (int nt = 1; nt <= 2; nt++) {
            variant v[4] = {{gather_work, &gc[0]}, {gather_work, &gc[1]}, {apply_work, ac[0]}, {apply_work, ac[1]}};
            double m[4];
            measure(v, 4, nt, m);
            printf("%-4d %3d/%-3d %-3d %8.1f / %-7.1f %8.1f / %-7.1f %5.2fx\n", E, t[0].L.stride, t[1].L.stride, nt,
                   m[0] / 1e6, m[1] / 1e6, m[2] / 1e6, m[3] / 1e6, (double)t[1].L.stride / t[0].L.stride);
        }
        for (int a = 0; a < 2; a++) apply_ctx_free(ac[a]), gather_ctx_free(&gc[a]), emb_table_free(&t[a]);
    }
}

// ---------------------------------------------------------------------------------------------
// Coalescing, against a hash-grouping alternative written here for comparison: open addressing
// on the key gives each entry its unique index in first-seen order, rows are summed in sample
// order into those slots, then the unique keys are sorted and the rows permuted into key order.

typedef struct {
    int cap_pow2;
    uint64_t *hkeys;  // (cap_pow2) UINT64_MAX = empty
    int32_t *hidx;    // (cap_pow2)
    int32_t *slot;    // (N) unique index of each entry
    uint64_t *uk;     // (N) unique keys, first-seen order, then (key << 32 | index) sorted
    float *acc;       // (N, E)
} hash_ws;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void coalesce_hash(hash_ws *w, emb_grad *g, const emb_layout *L, const uint32_t *ids,
                          const float *d, int Bn) {
    const int E = g->E;
    const size_t N = (size_t)Bn * L->F;
    const uint64_t mask = (uint64_t)w->cap_pow2 - 1;
    memset(w->hkeys, 0xff, (size_t)w->cap_pow2 * sizeof *w->hkeys);
    int n = 0, f = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t key = L->offset[f] + ids[i];
        uint64_t h = bp_mix64(key) & mask;
        while (w->hkeys[h] != UINT64_MAX && w->hkeys[h] != key) h = (h + 1) & mask;
        if (w->hkeys[h] == UINT64_MAX) {
            w->hkeys[h] = key, w->hidx[h] = n;
            w->uk[n] = key;
            memcpy(w->acc + (size_t)n * E, d + i * E, (size_t)E * sizeof(float));
            w->slot[i] = n++;
        } else {
            float *a = w->acc + (size_t)w->hidx[h] * E;
            const float *s = d + i * E;
            for (int e = 0; e < E; e++) a[e] += s[e];
            w->slot[i] = w->hidx[h];
        }
        if (++f == L->F) f = 0;
    }
    for (int u = 0; u < n; u++) w->uk[u] = w->uk[u] << 24 | (uint64_t)u; // keys < 2^40, n < 2^24
    qsort(w->uk, (size_t)n, sizeof *w->uk, cmp_u64);
    for (int u = 0; u < n; u++) {
        int src = (int)(w->uk[u] & 0xffffff);
        g->keys[u] = w->uk[u] >> 24;
        memcpy(g->rows + (size_t)u * E, w->acc + (size_t)src * E, (size_t)E * sizeof(float));
    }
    g->n = n;
}

typedef struct {
    const emb_layout *L;
    const uint32_t *ids; // (Bn, F)
    const float *d;      // (Bn, F, E)
    int Bn;
    emb_grad g, g2;
    hash_ws w;
} coalesce_ctx;

static long radix_work(void *arg, int th, long it) {
    coalesce_ctx *c = arg;
    emb_grad_coalesce(&c->g, c->L, c->ids, c->d, c->Bn);
    return (long)c->Bn * F;
}

static long hash_work(void *arg, int th, long it) {
    coalesce_ctx *c = arg;
    coalesce_hash(&c->w, &c->g2, c->L, c->ids, c->d, c->Bn);
    return (long)c->Bn * F;
}

static void bench_coalesce(void) {
    emb_layout L;
    emb_layout_cfg cfg = {.F = F, .card = kaggle_card, .D = 16, .seed = 1};
    BP_ASSERT(emb_layout_init(&L, &cfg) == 0);
    printf("\n== coalesce (Kaggle cardinalities, %llu rows, E = 16, skewed ids: id = card * u^6) ==\n",
           (unsigned long long)L.rows);
    printf("%-7s %-9s %9s %16s %16s %8s\n", "B", "entries", "unique", "radix Mkeys/s", "hash Mkeys/s",
           "same");
    for (int Bn = 256; Bn <= 65536; Bn *= 8) {
        const int N = Bn * F, E = 16;
        uint32_t *ids = bp_xmalloc((size_t)N * sizeof *ids);
        float *d = bp_xmalloc((size_t)N * E * sizeof *d);
        bp_rng r;
        bp_rng_seed(&r, 3, (uint64_t)Bn);
        for (int i = 0; i < N; i++) {
            double u = bp_rng_uniform(&r);
            ids[i] = (uint32_t)(kaggle_card[i % F] * pow(u, 6));
        }
        for (size_t i = 0; i < (size_t)N * E; i++) d[i] = (float)bp_rng_normal(&r);
        coalesce_ctx c = {.L = &L, .ids = ids, .d = d, .Bn = Bn};
        emb_grad_init(&c.g, N, E);
        emb_grad_init(&c.g2, N, E);
        hash_ws *w = &c.w;
        w->cap_pow2 = 1;
        while (w->cap_pow2 < 2 * N) w->cap_pow2 *= 2;
        w->hkeys = bp_xmalloc((size_t)w->cap_pow2 * sizeof *w->hkeys);
        w->hidx = bp_xmalloc((size_t)w->cap_pow2 * sizeof *w->hidx);
        w->slot = bp_xmalloc((size_t)N * sizeof *w->slot);
        w->uk = bp_xmalloc((size_t)N * sizeof *w->uk);
        w->acc = bp_xmalloc((size_t)N * E * sizeof *w->acc);
        variant v[2] = {{radix_work, &c}, {hash_work, &c}};
        double m[2];
        measure(v, 2, 1, m);
        double radix = m[0], hash = m[1];
        emb_grad *g = &c.g, *g2 = &c.g2;
        int same = g->n == g2->n && memcmp(g->keys, g2->keys, (size_t)g->n * 8) == 0 &&
                   memcmp(g->rows, g2->rows, (size_t)g->n * E * 4) == 0;
        printf("%-7d %-9d %8.1f%% %16.1f %16.1f %8s\n", Bn, N, 100.0 * g->n / N, radix / 1e6, hash / 1e6,
               same ? "yes" : "NO");
        free(ids), free(d), free(w->hkeys), free(w->hidx), free(w->slot), free(w->uk), free(w->acc);
        emb_grad_free(&c.g), emb_grad_free(&c.g2);
    }
}

// ---------------------------------------------------------------------------------------------
// Optimizer apply on a large table, and initialisation of a Kaggle-sized table.

static void bench_apply(double bytes) {
    printf("\n== optimizer apply, D = 16, %.1f GiB of model floats, %d distinct random keys per call ==\n",
           bytes / (1 << 30), B * F);
    printf("%-16s %-6s %-3s %14s\n", "optimizer", "stride", "thr", "apply Mrow/s");
    for (int kind = 0; kind < 3; kind++) {
        emb_opt o = emb_opt_make((emb_opt_kind)kind, 0.01f, 16);
        emb_layout L0 = layout_for_bytes(bytes, 16, 16, 0, 4); // same rows for every optimizer
        emb_layout_cfg cfg = {.F = F, .card = L0.card, .D = 16, .S = emb_opt_state_floats(&o), .seed = 1};
        emb_layout L;
        BP_ASSERT(emb_layout_init(&L, &cfg) == 0);
        emb_table t;
        if (table_or_skip(&t, &L, 1)) continue;
        apply_ctx *ac = apply_ctx_new(&t, &o);
        for (int nt = 1; nt <= 2; nt++) {
            variant v[1] = {{apply_work, ac}};
            double m;
            measure(v, 1, nt, &m);
            printf("%-16s %-6d %-3d %14.1f\n", emb_opt_kind_name(o.kind), L.stride, nt, m / 1e6);
        }
        apply_ctx_free(ac);
        emb_table_free(&t);
    }
}

static void bench_init(void) {
    emb_layout L;
    emb_layout_cfg cfg = {.F = F, .card = kaggle_card, .D = 16, .seed = 1};
    BP_ASSERT(emb_layout_init(&L, &cfg) == 0);
    char b[32];
    printf("\n== init: Kaggle tables, D = 16, SGD rows (%llu rows, %s) ==\n", (unsigned long long)L.rows,
           bp_fmt_bytes(b, sizeof b, (double)emb_layout_bytes(&L)));
    emb_table t;
    if (emb_table_alloc(&t, &L, 1)) {
        printf("  (skipped: %s)\n", bp_errmsg(BP_ENOMEM));
        return;
    }
    // The first fill includes the page faults of fresh memory (slow on a VM whose host has not
    // backed the pages yet); the refills show the generator and the memory writes alone.
    const char *what[3] = {"first fill, 2 threads", "refill, 1 thread", "refill, 2 threads"};
    const int nts[3] = {2, 1, 2};
    for (int i = 0; i < 3; i++) {
        double t0 = bp_now();
        emb_table_fill(&t, nts[i]);
        double s = bp_now() - t0;
        printf("%-22s %6.2f s  %7.1f M rows/s\n", what[i], s, L.rows / s / 1e6);
    }
    emb_table_free(&t);
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[GIB [SECONDS [SECTIONS]]]",
                   "embedding gather, coalescing, optimizer apply and init throughput: GIB of table (default 2),\n"
                   "SECONDS per figure (0.4), SECTIONS a comma-separated subset of gather,padding,coalesce,apply,init"))
        return 0;
    const double gib = bench_num_arg(argc, argv, 1, 2.0, 0.001, "GIB");
    if (gib < 0 || (g_seconds = bench_num_arg(argc, argv, 2, g_seconds, 0.001, "SECONDS")) < 0) return 2;
    if (!(gib > 0) || !(g_seconds > 0)) {
        fprintf(stderr, "usage: bench_gather [GIB [SECONDS]]\n");
        return 2;
    }
    const char *sec = argc > 3 ? argv[3] : "gather,padding,coalesce,apply,init";
    double bytes = gib * (1 << 30);
    if (strstr(sec, "gather")) bench_gather_plain(bytes);
    if (strstr(sec, "padding")) bench_padding(bytes);
    if (strstr(sec, "coalesce")) bench_coalesce();
    if (strstr(sec, "apply")) bench_apply(bytes);
    if (strstr(sec, "init")) bench_init();
    return 0;
}
