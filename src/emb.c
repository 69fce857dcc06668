// emb: tables, initialisation, gather, coalesced sparse gradients.  Layout and contracts in emb.h.
#include "emb.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "nn.h"

// ---------------------------------------------------------------------------------------------
// Layout

int emb_layout_init(emb_layout *L, const emb_layout_cfg *c) {
    if (c->F < 1 || c->F > EMB_MAX_TABLES)
        return bp_fail(BP_EINVAL, "emb: %d tables; expected 1..%d", c->F, EMB_MAX_TABLES);
    if (c->D < 1 || c->D > EMB_MAX_DIM)
        return bp_fail(BP_EINVAL, "emb: embedding dimension %d; expected 1..%d", c->D, EMB_MAX_DIM);
    int E = c->E ? c->E : c->D;
    if (E != c->D && E != c->D + 1)
        return bp_fail(BP_EINVAL, "emb: %d model floats per row with dimension %d; expected D or D+1",
                       E, c->D);
    if (c->S < 0 || c->S > EMB_MAX_DIM + 1)
        return bp_fail(BP_EINVAL, "emb: %d optimizer-state floats per row", c->S);
    int align = c->row_align ? c->row_align : EMB_ROW_ALIGN;
    if (align < 1 || align > 64 || (align & (align - 1)))
        return bp_fail(BP_EINVAL, "emb: row alignment %d; expected a power of two <= 64", align);
    memset(L, 0, sizeof *L);
    L->F = c->F, L->D = c->D, L->E = E, L->S = c->S;
    L->stride = (E + c->S + align - 1) / align * align;
    L->state_init = c->state_init;
    L->seed = c->seed;
    L->wide_uniform = c->wide_uniform;
    for (int f = 0; f < c->F; f++) {
        if (c->card[f] < 1 || c->card[f] > ((uint64_t)1 << 40))
            return bp_fail(BP_EINVAL, "emb: table %d has %llu rows; expected 1..2^40", f,
                           (unsigned long long)c->card[f]);
        L->card[f] = c->card[f];
        L->offset[f + 1] = L->offset[f] + c->card[f];
        L->bound[f] = (float)sqrt(1.0 / (double)c->card[f]);
    }
    L->rows = L->offset[c->F];
    return 0;
}

int emb_layout_table_of(const emb_layout *L, uint64_t key) {
    BP_ASSERT(key < L->rows);
    int lo = 0, hi = L->F - 1; // offset[lo] <= key < offset[hi + 1]
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->offset[mid] <= key) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

uint64_t emb_layout_bytes(const emb_layout *L) { return L->rows * (uint64_t)L->stride * sizeof(float); }

const char *emb_layout_describe(const emb_layout *L, char *buf, size_t cap) {
    char b[32];
    snprintf(buf, cap, "%d tables, %llu rows x %d floats (%d model + %d state + %d padding) = %s", L->F,
             (unsigned long long)L->rows, L->stride, L->E, L->S, L->stride - L->E - L->S,
             bp_fmt_bytes(b, sizeof b, (double)emb_layout_bytes(L)));
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Initialisation.  Row `key` has its own seed h = hash(seed, key); its k-th 64-bit draw is
// splitmix64's k-th output from h (bp_mix64(h + k * golden)), and each draw gives two 24-bit
// uniforms: model float 2k from bits 40..63, float 2k+1 from bits 8..31.  A 24-bit u maps to
// (2u - 2^24) / 2^24 in [-1, 1) exactly in float, then times the table's bound, so |w| <= bound.

static inline float init_scale(uint64_t u24, float bound) {
    return (float)((int32_t)(u24 << 1) - (1 << 24)) * 0x1p-24f * bound;
}

static void row_init_f(const emb_layout *L, int f, uint64_t key, float *row) {
    const uint64_t h = bp_hash2(L->seed, key);
    const float bound = L->bound[f];
    const int E = L->E, n_uniform = (E > L->D && !L->wide_uniform) ? L->D : E;
    int j = 0;
    for (uint64_t k = 0; j + 1 < n_uniform; k++, j += 2) {
        uint64_t r = bp_mix64(h + k * 0x9e3779b97f4a7c15ull);
        row[j] = init_scale(r >> 40, bound);
        row[j + 1] = init_scale((r >> 8) & 0xffffff, bound);
    }
    if (j < n_uniform) { // odd count: the last one takes the first half of its draw
        uint64_t r = bp_mix64(h + (uint64_t)(j / 2) * 0x9e3779b97f4a7c15ull);
        row[j++] = init_scale(r >> 40, bound);
    }
    for (; j < E; j++) row[j] = 0.0f; // the wide weight when not drawn
    for (int s = 0; s < L->S; s++) row[E + s] = L->state_init;
    for (int p = E + L->S; p < L->stride; p++) row[p] = 0.0f;
}

void emb_row_init(const emb_layout *L, uint64_t key, float *row) {
    row_init_f(L, emb_layout_table_of(L, key), key, row);
}

void emb_rows_init(const emb_layout *L, uint64_t key0, uint64_t n, float *rows) {
    if (n == 0) return;
    BP_ASSERT(key0 + n <= L->rows);
    int f = emb_layout_table_of(L, key0);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t key = key0 + i;
        while (key >= L->offset[f + 1]) f++;
        row_init_f(L, f, key, rows + i * (size_t)L->stride);
    }
}

// ---------------------------------------------------------------------------------------------
// Tables

int emb_table_alloc(emb_table *t, const emb_layout *L, int huge) {
    memset(t, 0, sizeof *t);
    uint64_t need = emb_layout_bytes(L), avail = bp_mem_available();
    char b1[32], b2[32];
    if (need > (uint64_t)SIZE_MAX / 2 || (avail && need > avail))
        return bp_fail(BP_ENOMEM,
                       "emb: tables need %s (%llu rows x %d floats) but only %s is available; "
                       "use a smaller --arch-sparse-feature-size or hash ids into fewer rows",
                       bp_fmt_bytes(b1, sizeof b1, (double)need), (unsigned long long)L->rows,
                       L->stride, bp_fmt_bytes(b2, sizeof b2, (double)avail));
    size_t bytes = need ? (size_t)need : 1;
    float *p;
    if (huge) {
        p = bp_alloc_huge(bytes);
    } else {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) p = NULL;
        else madvise(p, bytes, MADV_NOHUGEPAGE);
    }
    if (!p)
        return bp_fail(BP_ENOMEM, "emb: cannot map %s for the tables",
                       bp_fmt_bytes(b1, sizeof b1, (double)need));
    t->L = *L;
    t->data = p;
    t->bytes = bytes;
    return 0;
}

typedef struct {
    emb_table *t;
    uint64_t begin, end;
} fill_job;

static void *fill_main(void *arg) {
    fill_job *j = arg;
    emb_rows_init(&j->t->L, j->begin, j->end - j->begin, emb_table_row(j->t, j->begin));
    return NULL;
}

void emb_table_fill(emb_table *t, int nthreads) {
    nthreads = bp_threads_resolve(nthreads, 64);
    uint64_t rows = t->L.rows;
    if ((uint64_t)nthreads > rows) nthreads = (int)rows;
    fill_job jobs[64];
    pthread_t tid[64];
    for (int i = 0; i < nthreads; i++)
        jobs[i] = (fill_job){t, rows * i / nthreads, rows * (i + 1) / nthreads};
    int started = 1; // job 0 runs on this thread
    for (int i = 1; i < nthreads; i++, started++)
        if (pthread_create(&tid[i], NULL, fill_main, &jobs[i])) break;
    for (int i = started; i < nthreads; i++) fill_main(&jobs[i]); // could not start: do it here
    fill_main(&jobs[0]);
    for (int i = 1; i < started; i++) pthread_join(tid[i], NULL);
}

int emb_table_init(emb_table *t, const emb_layout *L, int nthreads) {
    int rc = emb_table_alloc(t, L, 1);
    if (rc) return rc;
    emb_table_fill(t, nthreads);
    return 0;
}

void emb_table_free(emb_table *t) {
    if (t->data) bp_free_huge(t->data, t->bytes);
    t->data = NULL;
    t->bytes = 0;
}

// ---------------------------------------------------------------------------------------------
// Gather.  The body is written once for a compile-time E (always inlined into one function per
// specialised E, so memcpy becomes a fixed run of vector moves) and once more for runtime E.
// The build is plain x86-64 (16-byte SSE moves): AVX2 or AVX-512 clones of the copy measured no
// faster on a table larger than the caches (the loop waits on memory, not on moves) and slower
// on a cache-resident one, so there are none.

#define EMB_PREFETCH_ROWS 16 // rows ahead: enough misses in flight to cover DRAM latency

static __attribute__((noinline, noreturn, cold)) void bad_id(int f, uint32_t id, uint64_t card) {
    bp_panic(__FILE__, __LINE__, "emb: id %u of table %d is outside its %llu rows", id, f,
             (unsigned long long)card);
}

// Prefetches the lines of E floats from row; `unaligned`: the row may not start a cache line, so
// its last float can lie one line further.
static inline __attribute__((always_inline)) void prefetch_row(const float *row, int E, int unaligned) {
    const char *p = (const char *)row;
    for (int o = 0; o < E * (int)sizeof(float); o += 64) __builtin_prefetch(p + o, 0, 3);
    if (unaligned) __builtin_prefetch(p + E * sizeof(float) - 1, 0, 3);
}

static inline __attribute__((always_inline)) void gather_body(const emb_table *t,
                                                              const uint32_t *ids, size_t n,
                                                              float *restrict out, const int E) {
    const int F = t->L.F;
    const size_t stride = (size_t)t->L.stride;
    const float *base = t->data;
    const uint64_t *off = t->L.offset, *card = t->L.card;
    const int unaligned = (stride * sizeof(float)) % 64 != 0; // (the table starts a page)
    size_t n_pf = n > EMB_PREFETCH_ROWS ? n - EMB_PREFETCH_ROWS : 0;
    int f = 0, pf = EMB_PREFETCH_ROWS % F;
    size_t i = 0;
    for (; i < n_pf; i++) {
        prefetch_row(base + (off[pf] + ids[i + EMB_PREFETCH_ROWS]) * stride, E, unaligned);
        uint32_t id = ids[i];
        if (__builtin_expect(id >= card[f], 0)) bad_id(f, id, card[f]);
        memcpy(out + i * E, base + (off[f] + id) * stride, (size_t)E * sizeof(float));
        if (++f == F) f = 0;
        if (++pf == F) pf = 0;
    }
    for (; i < n; i++) {
        uint32_t id = ids[i];
        if (__builtin_expect(id >= card[f], 0)) bad_id(f, id, card[f]);
        memcpy(out + i * E, base + (off[f] + id) * stride, (size_t)E * sizeof(float));
        if (++f == F) f = 0;
    }
}

static inline __attribute__((always_inline)) void gather_rows_body(const float *const *rows,
                                                                   size_t n, float *restrict out,
                                                                   const int E) {
    size_t n_pf = n > EMB_PREFETCH_ROWS ? n - EMB_PREFETCH_ROWS : 0, i = 0;
    for (; i < n_pf; i++) {
        prefetch_row(rows[i + EMB_PREFETCH_ROWS], E, 1);
        memcpy(out + i * E, rows[i], (size_t)E * sizeof(float));
    }
    for (; i < n; i++) memcpy(out + i * E, rows[i], (size_t)E * sizeof(float));
}

#define EMB_SPECIALISED(X) X(16) X(17) X(32) X(33) X(64) X(65) X(128) X(129)

#define GATHER_DEF(EC)                                                                        \
    static void gather_##EC(const emb_table *t, const uint32_t *ids, size_t n, float *out) {  \
        gather_body(t, ids, n, out, EC);                                                      \
    }                                                                                         \
    static void gather_rows_##EC(const float *const *rows, size_t n, float *out) {            \
        gather_rows_body(rows, n, out, EC);                                                   \
    }
EMB_SPECIALISED(GATHER_DEF)
#undef GATHER_DEF

static void gather_generic(const emb_table *t, const uint32_t *ids, size_t n, float *out) {
    gather_body(t, ids, n, out, t->L.E);
}

static void gather_run(const emb_table *t, const uint32_t *ids, size_t n, float *out) {
    switch (t->L.E) {
#define GATHER_CASE(EC)                                                                       \
    case EC: gather_##EC(t, ids, n, out); break;
        EMB_SPECIALISED(GATHER_CASE)
#undef GATHER_CASE
    default: gather_generic(t, ids, n, out);
    }
}

static void gather_rows_run(const float *const *rows, size_t n, int E, float *out) {
    switch (E) {
#define GATHER_CASE(EC)                                                                       \
    case EC: gather_rows_##EC(rows, n, out); break;
        EMB_SPECIALISED(GATHER_CASE)
#undef GATHER_CASE
    default: gather_rows_body(rows, n, out, E);
    }
}

// A gather is split over the pool (nn.h) by whole samples, at least this many rows a part:
// a copy is a copy whichever thread makes it, and more misses are in flight at once.
enum { GATHER_MIN_PART_ROWS = 1024 };

typedef struct {
    const emb_table *t;
    const float *const *rows;
    const uint32_t *ids;
    size_t samples;
    int F, E;
    float *out;
} gather_job;

static void gather_part(void *ctx, int p, int n) {
    const gather_job *j = ctx;
    size_t s0 = (size_t)nn_part_begin((long)j->samples, p, n), s1 = (size_t)nn_part_begin((long)j->samples, p + 1, n);
    size_t r0 = s0 * (size_t)j->F, nr = (s1 - s0) * (size_t)j->F;
    if (j->t) gather_run(j->t, j->ids + r0, nr, j->out + r0 * (size_t)j->E);
    else gather_rows_run(j->rows + r0, nr, j->E, j->out + r0 * (size_t)j->E);
}

static int gather_parts(size_t samples, int F) {
    size_t by_size = samples * (size_t)F / GATHER_MIN_PART_ROWS;
    int n = (int)BP_MIN((size_t)nn_threads(), BP_MIN(by_size, samples));
    return n < 1 ? 1 : n;
}

void emb_gather(const emb_table *t, const uint32_t *ids, int B, float *out) {
    BP_ASSERT(B >= 0);
    gather_job j = {.t = t, .ids = ids, .samples = (size_t)B, .F = t->L.F, .E = t->L.E, .out = out};
    nn_pool_run(gather_parts((size_t)B, t->L.F), gather_part, &j);
}

void emb_gather_rows(const float *const *rows, int n, int E, float *out) {
    BP_ASSERT(n >= 0 && E >= 1);
    gather_job j = {.rows = rows, .samples = (size_t)n, .F = 1, .E = E, .out = out};
    nn_pool_run(gather_parts((size_t)n, 1), gather_part, &j);
}

// ---------------------------------------------------------------------------------------------
// Sparse gradients

uint64_t emb_grad_bytes(int cap, int E) {
    return (uint64_t)cap * (3 * sizeof(uint64_t) + (uint64_t)E * sizeof(float)) +
           ((uint64_t)EMB_GRAD_MAX_PASSES << EMB_GRAD_RADIX_BITS) * sizeof(uint32_t);
}

int emb_grad_init(emb_grad *g, int cap, int E) {
    memset(g, 0, sizeof *g);
    if (cap < 1 || E < 1 || E > EMB_MAX_DIM)
        return bp_fail(BP_EINVAL, "emb: sparse gradient of %d entries x %d floats", cap, E);
    g->E = E;
    g->cap = cap;
    g->keys = bp_xmalloc((size_t)cap * sizeof *g->keys);
    g->rows = bp_xmalloc((size_t)cap * (size_t)E * sizeof *g->rows);
    g->pairs = bp_xmalloc((size_t)cap * sizeof *g->pairs);
    g->tmp = bp_xmalloc((size_t)cap * sizeof *g->tmp);
    g->hist = bp_xmalloc(((size_t)EMB_GRAD_MAX_PASSES << EMB_GRAD_RADIX_BITS) * sizeof *g->hist);
    return 0;
}

void emb_grad_free(emb_grad *g) {
    free(g->keys), free(g->rows), free(g->pairs), free(g->tmp), free(g->hist);
    memset(g, 0, sizeof *g);
}

static int bits_for(uint64_t max_value) { return max_value ? 64 - __builtin_clzll(max_value) : 0; }

// Sorts g->pairs[0..n) by bits [lo, lo + kbits) with a stable LSD radix sort whose histograms
// were filled by the caller (w bits per pass); returns the buffer holding the result.
static uint64_t *radix_sort(emb_grad *g, size_t n, int lo, int passes, int w) {
    uint64_t *src = g->pairs, *dst = g->tmp;
    const uint64_t mask = ((uint64_t)1 << w) - 1;
    for (int p = 0; p < passes; p++) {
        uint32_t *h = g->hist + ((size_t)p << EMB_GRAD_RADIX_BITS);
        int shift = lo + p * w;
        if (h[(src[0] >> shift) & mask] == n) continue; // one digit value: already in order
        uint32_t sum = 0;
        for (uint64_t d = 0; d <= mask; d++) {
            uint32_t c = h[d];
            h[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[h[(src[i] >> shift) & mask]++] = src[i];
        uint64_t *s = src;
        src = dst, dst = s;
    }
    return src;
}

// d[0..E) += s[0..E) in blocks of 4 (vector code at -O2) and a scalar tail.
static inline __attribute__((always_inline)) void add_row(float *restrict d, const float *restrict s,
                                                          const int E) {
    int j = 0;
    for (; j + 4 <= E; j += 4)
        for (int k = 0; k < 4; k++) d[j + k] += s[j + k];
    for (; j < E; j++) d[j] += s[j];
}

static inline __attribute__((always_inline)) void group_body(emb_grad *g, const float *d_emb, const int E) {
    const uint64_t *s = g->sorted;
    const size_t N = g->n_entries;
    const int pbits = g->pos_bits;
    const uint64_t pmask = ((uint64_t)1 << pbits) - 1;
    float *restrict rows = g->rows;
    int n = -1;
    uint64_t prev = 0;
    for (size_t i = 0; i < N; i++) {
        if (i + 8 < N) __builtin_prefetch(d_emb + (s[i + 8] & pmask) * E);
        uint64_t key = s[i] >> pbits;
        const float *src = d_emb + (s[i] & pmask) * E;
        if (n < 0 || key != prev) {
            n++;
            prev = key;
            memcpy(rows + (size_t)n * E, src, (size_t)E * sizeof(float));
        } else {
            add_row(rows + (size_t)n * E, src, E);
        }
    }
    BP_ASSERT(n + 1 == g->n);
}

#define GROUP_DEF(EC)                                                                         \
    static void group_##EC(emb_grad *g, const float *d) { group_body(g, d, EC); }
EMB_SPECIALISED(GROUP_DEF)
#undef GROUP_DEF

void emb_grad_sort(emb_grad *g, const emb_layout *L, const uint32_t *ids, int B) {
    BP_ASSERT(B >= 0 && g->E == L->E);
    const int F = L->F;
    const size_t N = (size_t)B * (size_t)F;
    BP_ASSERTF(N <= (size_t)g->cap, "emb: %zu gradient entries exceed the workspace of %d", N,
               g->cap);
    g->n = 0, g->n_entries = N, g->sorted = g->pairs, g->pos_bits = 0;
    if (N == 0) return;
    const int pbits = bits_for(N - 1), kbits = bits_for(L->rows - 1);
    BP_ASSERTF(pbits + kbits <= 64, "emb: %d key bits + %d position bits exceed 64", kbits, pbits);
    int passes = (kbits + EMB_GRAD_RADIX_BITS - 1) / EMB_GRAD_RADIX_BITS;
    int w = passes ? (kbits + passes - 1) / passes : 0;
    BP_ASSERT(passes <= EMB_GRAD_MAX_PASSES);
    memset(g->hist, 0, ((size_t)passes << EMB_GRAD_RADIX_BITS) * sizeof *g->hist);
    const uint64_t wmask = ((uint64_t)1 << w) - 1;
    uint32_t *h0 = g->hist, *h1 = g->hist + (1 << EMB_GRAD_RADIX_BITS),
             *h2 = g->hist + (2 << EMB_GRAD_RADIX_BITS);
    int f = 0;
    for (size_t i = 0; i < N; i++) {
        uint32_t id = ids[i];
        if (__builtin_expect(id >= L->card[f], 0)) bad_id(f, id, L->card[f]);
        uint64_t key = L->offset[f] + id;
        g->pairs[i] = key << pbits | i;
        if (passes <= 3) { // the common case (keys < 2^33), unrolled
            if (passes > 0) h0[key & wmask]++;
            if (passes > 1) h1[(key >> w) & wmask]++;
            if (passes > 2) h2[(key >> 2 * w) & wmask]++;
        } else {
            for (int p = 0; p < passes; p++)
                g->hist[((size_t)p << EMB_GRAD_RADIX_BITS) + ((key >> p * w) & wmask)]++;
        }
        if (++f == F) f = 0;
    }
    const uint64_t *s = radix_sort(g, N, pbits, passes, w);
    g->sorted = s, g->pos_bits = pbits;
    uint64_t *keys = g->keys;
    int n = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t key = s[i] >> pbits;
        if (n == 0 || key != keys[n - 1]) keys[n++] = key;
    }
    g->n = n;
}

void emb_grad_sum(emb_grad *g, const float *d_emb) {
    if (g->n_entries == 0) return;
    switch (g->E) {
#define GROUP_CASE(EC)                                                                        \
    case EC: group_##EC(g, d_emb); break;
        EMB_SPECIALISED(GROUP_CASE)
#undef GROUP_CASE
    default: group_body(g, d_emb, g->E);
    }
}

void emb_grad_coalesce(emb_grad *g, const emb_layout *L, const uint32_t *ids, const float *d_emb,
                       int B) {
    emb_grad_sort(g, L, ids, B);
    emb_grad_sum(g, d_emb);
}

int emb_grad_sum_into(emb_grad *dst, const emb_grad *src) {
    if (dst->E != src->E)
        return bp_fail(BP_EMISMATCH, "emb: summing gradients of %d and %d floats per row", src->E,
                       dst->E);
    // First check that every key of src is in dst (both ascending), then add.
    for (int pass = 0; pass < 2; pass++) {
        int j = 0;
        for (int k = 0; k < src->n; k++) {
            uint64_t key = src->keys[k];
            while (j < dst->n && dst->keys[j] < key) j++;
            if (j == dst->n || dst->keys[j] != key)
                return bp_fail(BP_EMISMATCH, "emb: partial gradient has key %llu outside the sum's keys",
                               (unsigned long long)key);
            if (pass == 1) add_row(dst->rows + (size_t)j * dst->E, src->rows + (size_t)k * src->E, dst->E);
        }
    }
    return 0;
}

int emb_grad_set_keys(emb_grad *g, const uint64_t *keys, int n) {
    if (n < 0 || n > g->cap) return bp_fail(BP_ECAPACITY, "emb: %d keys exceed the gradient's %d", n, g->cap);
    for (int i = 1; i < n; i++)
        if (keys[i] <= keys[i - 1])
            return bp_fail(BP_EINVAL, "emb: gradient keys not ascending and unique at %d", i);
    memcpy(g->keys, keys, (size_t)n * sizeof *keys);
    memset(g->rows, 0, (size_t)n * (size_t)g->E * sizeof *g->rows);
    g->n = n;
    return 0;
}
