// `bagpipe synth`: runs the generator (data_synth_gen.c) over worker threads and writes the
// binary dataset, Criteo TSV or Avazu CSV, in row order and atomically.
#include "data_synth.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "cli.h"
#include "cmds.h"
#include "progress.h"

#define BLOCK_CHUNKS 8 // chunks per unit of work handed to a thread (32768 rows)

// ---------------------------------------------------------------------------------------------
// Avazu CSV columns

typedef enum { AV_HEX, AV_LIST, AV_OFFSET, AV_C20 } av_kind;
typedef struct {
    const char *name;
    av_kind kind;
    int base;         // AV_OFFSET: value = base + id
    const int *list;  // AV_LIST: value = list[id]
} av_column;

static const int av_c1[] = {1001, 1002, 1005, 1007, 1008, 1010, 1012};
static const int av_banner[] = {0, 1, 2, 3, 4, 5, 7};
static const int av_devtype[] = {0, 1, 2, 4, 5};
static const int av_conn[] = {0, 2, 3, 5};
static const int av_c15[] = {120, 216, 300, 320, 480, 728, 768, 1024};
static const int av_c16[] = {20, 36, 50, 90, 250, 320, 480, 768, 1024};
static const int av_c18[] = {0, 1, 2, 3};

// In table order 2..22; value ranges follow the real columns (C14 375.., C17 112.., C19 33..,
// C20 -1 or 100000.., C21 1..).
static const av_column av_cols[21] = {
    {"C1", AV_LIST, 0, av_c1},           {"banner_pos", AV_LIST, 0, av_banner},
    {"site_id", AV_HEX, 0, NULL},        {"site_domain", AV_HEX, 0, NULL},
    {"site_category", AV_HEX, 0, NULL},  {"app_id", AV_HEX, 0, NULL},
    {"app_domain", AV_HEX, 0, NULL},     {"app_category", AV_HEX, 0, NULL},
    {"device_id", AV_HEX, 0, NULL},      {"device_ip", AV_HEX, 0, NULL},
    {"device_model", AV_HEX, 0, NULL},   {"device_type", AV_LIST, 0, av_devtype},
    {"device_conn_type", AV_LIST, 0, av_conn}, {"C14", AV_OFFSET, 375, NULL},
    {"C15", AV_LIST, 0, av_c15},         {"C16", AV_LIST, 0, av_c16},
    {"C17", AV_OFFSET, 112, NULL},       {"C18", AV_LIST, 0, av_c18},
    {"C19", AV_OFFSET, 33, NULL},        {"C20", AV_C20, 0, NULL},
    {"C21", AV_OFFSET, 1, NULL},
};

static const char hexdig[] = "0123456789abcdef";

static inline char *put_hex8(char *p, uint32_t v) {
    for (int i = 7; i >= 0; i--) p[i] = hexdig[v & 15], v >>= 4;
    return p + 8;
}

static inline char *put_u64(char *p, uint64_t v) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

static inline char *put_i64(char *p, int64_t v) {
    if (v < 0) *p++ = '-', v = -v;
    return put_u64(p, (uint64_t)v);
}

const char *synth_avazu_column(uint32_t f) {
    BP_ASSERT(f >= 2 && f < 23);
    return av_cols[f - 2].name;
}

int synth_avazu_format(uint32_t f, uint32_t id, char *buf) {
    BP_ASSERT(f >= 2 && f < 23);
    const av_column *c = &av_cols[f - 2];
    char *p = buf;
    switch (c->kind) {
    case AV_HEX: p = put_hex8(p, synth_cat_hash32(f, id)); break;
    case AV_LIST: p = put_i64(p, c->list[id]); break;
    case AV_OFFSET: p = put_i64(p, (int64_t)c->base + id); break;
    case AV_C20: p = put_i64(p, id == 0 ? -1 : 100000 + (int64_t)id - 1); break;
    }
    return (int)(p - buf);
}

int synth_avazu_parse(uint32_t f, const char *s, size_t len, uint32_t *id) {
    if (f < 2 || f >= 23 || len == 0 || len > 15) return BP_EFORMAT;
    const av_column *c = &av_cols[f - 2];
    char buf[16];
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    if (c->kind == AV_HEX) {
        if (len != 8) return BP_EFORMAT;
        unsigned long v = strtoul(buf, &end, 16);
        if (*end) return BP_EFORMAT;
        *id = synth_cat_unhash32(f, (uint32_t)v);
        return 0;
    }
    long v = strtol(buf, &end, 10);
    if (*end) return BP_EFORMAT;
    uint32_t F;
    const uint64_t card = synth_preset_card(SYNTH_PRESET_AVAZU, &F)[f];
    if (c->kind == AV_LIST) {
        for (uint32_t i = 0; i < card; i++)
            if (c->list[i] == v) return *id = i, 0;
        return BP_EFORMAT;
    }
    if (c->kind == AV_OFFSET) v -= c->base;
    else v = v == -1 ? 0 : v < 100000 ? -1 : v - 100000 + 1;
    if (v < 0 || (uint64_t)v >= card) return BP_EFORMAT;
    *id = (uint32_t)v;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Text rows

static size_t text_row_max(const synth_opts *o) {
    if (o->format == SYNTH_FMT_CSV) return 21 + 2 + 9 + (size_t)o->n_tables * 12 + 1;
    return 2 + (size_t)o->n_dense * 11 + (size_t)o->n_tables * 9 + 1;
}

// Criteo: label, then Nd counts (empty when missing), then F categorical values as 8 hex digits,
// tab-separated.
static char *format_tsv(char *p, const synth_rows *r, uint32_t Nd, uint32_t F) {
    for (uint32_t i = 0; i < r->n; i++) {
        *p++ = (char)('0' + r->label[i]);
        const uint32_t *d = r->dense_raw + (size_t)i * Nd;
        for (uint32_t j = 0; j < Nd; j++) {
            *p++ = '\t';
            if (d[j] != SYNTH_DENSE_MISSING) p = put_u64(p, d[j]);
        }
        const uint32_t *s = r->sparse + (size_t)i * F;
        for (uint32_t f = 0; f < F; f++) {
            *p++ = '\t';
            p = put_hex8(p, synth_cat_hash32(f, s[f]));
        }
        *p++ = '\n';
    }
    return p;
}

static const char avazu_header[] =
    "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,"
    "device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21\n";

// Avazu: id, click, hour as YYMMDDHH (rows cover 2014-10-21 00h to 2014-10-30 23h in order), then
// the 21 categorical columns.
static char *format_csv(char *p, const synth_rows *r, uint64_t row0, const synth_opts *o) {
    const uint32_t F = o->n_tables;
    for (uint32_t i = 0; i < r->n; i++) {
        uint64_t row = row0 + i, hour = row * 240 / o->rows;
        p = put_u64(p, bp_hash2(o->seed ^ 0xa7a2d1dull, row));
        *p++ = ',';
        *p++ = (char)('0' + r->label[i]);
        *p++ = ',';
        p = put_u64(p, 14102100 + (hour / 24) * 100 + hour % 24);
        const uint32_t *s = r->sparse + (size_t)i * F;
        for (uint32_t f = 2; f < F; f++) {
            *p++ = ',';
            p += synth_avazu_format(f, s[f], p);
        }
        *p++ = '\n';
    }
    return p;
}

// ---------------------------------------------------------------------------------------------
// Checksums and id ranges of generated rows (what bp_ds_rows_summarize computes), fast: CRC-32
// by carry-less multiplication and per-table maxima with AVX-512 where the CPU has them.

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SYNTH_FAST_SUM 1
#define CLMUL_FN __attribute__((target("pclmul,sse4.1")))
#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl")))

// CRC-32 (zlib's: reflected 0xEDB88320, inverted in and out) of n >= 64 bytes, n a multiple of
// 16, from the inverted running value x (the register before the final inversion).  Four
// 128-bit lanes are folded over 64-byte steps, then into one, then reduced to 32 bits (Barrett).
// Fold constants are x^(k) mod P for the fold distances (512+64, 512, 128+64, 128, 64 bits)
// and the Barrett pair (P, floor(x^64 / P)), all bit-reflected.
static CLMUL_FN uint32_t crc32_fold(uint32_t x, const uint8_t *p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596ll, 0x0154442bd4ll);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009ell, 0x01751997d0ll);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124ll);
    const __m128i poly = _mm_set_epi64x(0x01f7011641ll, 0x01db710641ll);
    const __m128i lo32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)x));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16)), c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64, n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        __m128i a0 = _mm_clmulepi64_si128(a, k1k2, 0x00), b0 = _mm_clmulepi64_si128(b, k1k2, 0x00);
        __m128i c0 = _mm_clmulepi64_si128(c, k1k2, 0x00), d0 = _mm_clmulepi64_si128(d, k1k2, 0x00);
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k1k2, 0x11), a0), _mm_loadu_si128((const __m128i *)p));
        b = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(b, k1k2, 0x11), b0), _mm_loadu_si128((const __m128i *)(p + 16)));
        c = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(c, k1k2, 0x11), c0), _mm_loadu_si128((const __m128i *)(p + 32)));
        d = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(d, k1k2, 0x11), d0), _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    // Four lanes into one, then the remaining 16-byte blocks.
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), b);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), c);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), d);
    for (; n >= 16; p += 16, n -= 16)
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)),
                          _mm_loadu_si128((const __m128i *)p));
    // 128 -> 96 -> 64 bits, then Barrett reduction to 32.
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k3k4, 0x10));
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, lo32), k5, 0x00), _mm_srli_si128(a, 4));
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, lo32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, lo32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}

static int fast_sum_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

// The probe runs once for the process: synth's workers summarise their blocks at the same time.
static int fast_sum;
static pthread_once_t fast_sum_once = PTHREAD_ONCE_INIT;
static void fast_sum_probe(void) { fast_sum = fast_sum_supported(); }
static int fast_sum_on(void) {
    pthread_once(&fast_sum_once, fast_sum_probe);
    return fast_sum;
}

// Per table, the largest id + 1 over n rows of F ids (F <= 64: four 16-lane registers a row).
static AVX512_FN void max_ids(const uint32_t *sp, size_t n, uint32_t F, uint32_t *max_id1) {
    __m512i mx[4];
    __mmask16 mk[4];
    for (int k = 0; k < 4; k++) {
        uint32_t lanes = F > 16u * k ? BP_MIN(F - 16u * k, 16u) : 0;
        mk[k] = (__mmask16)((1u << lanes) - 1);
        mx[k] = _mm512_setzero_si512();
    }
    const int nv = (int)((F + 15) / 16);
    for (size_t i = 0; i < n; i++, sp += F)
        for (int k = 0; k < nv; k++) mx[k] = _mm512_max_epu32(mx[k], _mm512_maskz_loadu_epi32(mk[k], sp + 16 * k));
    uint32_t m[64];
    for (int k = 0; k < 4; k++) _mm512_storeu_si512(m + 16 * k, mx[k]);
    for (uint32_t f = 0; f < F; f++) max_id1[f] = n == 0 ? 0 : m[f] == UINT32_MAX ? UINT32_MAX : m[f] + 1;
}
#else
#define SYNTH_FAST_SUM 0
#endif

uint32_t synth_crc32(uint32_t crc, const void *buf, size_t n) {
#if SYNTH_FAST_SUM
    if (fast_sum_on() && n >= 64) {
        size_t head = n & ~(size_t)15;
        crc = ~crc32_fold(~crc, buf, head);
        buf = (const uint8_t *)buf + head, n -= head;
    }
#endif
    return bp_crc32(crc, buf, n);
}

void synth_rows_summarize(const bp_ds_info *shape, size_t n, const uint8_t *labels, const float *dense,
                          const uint32_t *sparse, const float *prob, bp_ds_rows_sum *sum) {
#if SYNTH_FAST_SUM
    if (fast_sum_on()) {
        const uint32_t F = shape->n_sparse, Nd = shape->n_dense;
        BP_ASSERT(F >= 1 && F <= BP_DS_MAX_SPARSE);
        memset(sum, 0, sizeof *sum);
        for (size_t i = 0; i < n; i++) BP_ASSERTF(labels[i] <= 1, "label %u is not 0 or 1", labels[i]);
        max_ids(sparse, n, F, sum->max_id1);
        sum->crc[0] = synth_crc32(0, labels, n);
        if (Nd) sum->crc[1] = synth_crc32(0, dense, n * Nd * sizeof(float));
        sum->crc[2] = synth_crc32(0, sparse, n * F * sizeof(uint32_t));
        if (shape->flags & BP_DS_HAS_PROB) {
            BP_ASSERT(prob);
            sum->crc[3] = synth_crc32(0, prob, n * sizeof(float));
        }
        return;
    }
#endif
    bp_ds_rows_summarize(shape, n, labels, dense, sparse, prob, sum);
}

// Text output: plain, or gzip when the name ends in ".gz" (as the Criteo and Avazu downloads come,
// and as prep reads them), compressed at level 1: the generator outruns anything slower.  Each
// block of rows is compressed by the worker that made it, as a gzip member of its own (RFC 1952:
// members in a row are one file, as gzip -d, zcat, zlib's gzread and prep read them), so the
// compression runs on every thread; the blocks are fixed by the row count, so the bytes do not
// depend on --threads.  (One stream compressed by the writing thread took 1.3x as long on 2 cores.)
static int gz_name(const char *path) {
    const size_t n = strlen(path);
    return n > 3 && strcmp(path + n - 3, ".gz") == 0;
}

// A whole gzip member of in[0, n) into *out (grown as needed; *cap its size), in z (made by
// deflateInit2 for gzip, reset here).  Returns its length.
static size_t gz_member(z_stream *z, const void *in, size_t n, unsigned char **out, size_t *cap) {
    BP_ASSERT(n <= UINT32_MAX); // (a block of text is far below 4 GiB)
    const int zr0 = deflateReset(z);
    BP_ASSERT(zr0 == Z_OK);
    const size_t need = deflateBound(z, (uLong)n);
    if (*cap < need) {
        free(*out);
        *out = bp_xmalloc(need), *cap = need;
    }
    z->next_in = (Bytef *)(uintptr_t)in, z->avail_in = (uInt)n;
    z->next_out = *out, z->avail_out = (uInt)*cap;
    const int zr = deflate(z, Z_FINISH);
    BP_ASSERT(zr == Z_STREAM_END); // (the bound holds the whole member)
    return *cap - z->avail_out;
}

static int gz_init(z_stream *z) {
    memset(z, 0, sizeof *z);
    return deflateInit2(z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -1;
}

// Text outside the blocks (the Avazu header; an empty member when there are no rows), as a member
// of its own when gz.
static int text_write(bp_afile *af, int gz, const char *p, size_t n) {
    if (!gz) return n ? bp_afile_write(af, p, n) : 0;
    z_stream z;
    if (gz_init(&z) != 0) return bp_fail(BP_ENOMEM, "%s: cannot start the gzip compressor", af->path);
    unsigned char *out = NULL;
    size_t cap = 0;
    const size_t len = gz_member(&z, p, n, &out, &cap);
    deflateEnd(&z);
    const int rc = bp_afile_write(af, out, len);
    free(out);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// The job: worker threads fill blocks of rows in any order; the calling thread hands them to the
// writer in row order.

typedef struct {
    uint64_t expect; // the block this slot holds next
    int ready;       // it holds block `expect`
    uint32_t rows;
    uint8_t *label;      // (R)
    uint32_t *dense_raw; // (R, Nd)
    float *dense;        // (R, Nd)
    uint32_t *sparse;    // (R, F)
    float *prob;         // (R)
    float *pair_fac;     // generator scratch, see synth_rows
    char *text;          // (R * text_row_max) for text formats
    size_t text_len;
    z_stream z;          // gzip output: the block's text as one member in gz[0, gz_len)
    int z_on;
    unsigned char *gz;
    size_t gz_cap, gz_len;
    bp_ds_rows_sum sum;  // binary format: checksums and id ranges, for the writer
    double sum_label, sum_prob;
} run_slot;

typedef struct {
    const synth_model *m;
    const synth_opts *o;
    bp_ds_info shape; // binary format: the dataset's shape (for bp_ds_rows_summarize)
    uint64_t nchunks, nblocks, next_block;
    int nslots, stop;
    run_slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} run_state;

static void fill_block(run_state *st, run_slot *sl, uint64_t b) {
    const uint32_t Nd = st->o->n_dense, F = st->o->n_tables;
    uint64_t c0 = b * BLOCK_CHUNKS, c1 = BP_MIN(c0 + BLOCK_CHUNKS, st->nchunks);
    uint32_t off = 0;
    char *p = sl->text;
    sl->sum_label = sl->sum_prob = 0;
    memset(&sl->sum, 0, sizeof sl->sum);
    for (uint64_t c = c0; c < c1; c++) {
        synth_rows v = {0, sl->label + off, sl->dense_raw + (size_t)off * Nd, sl->dense + (size_t)off * Nd,
                        sl->sparse + (size_t)off * F, sl->prob + off, sl->pair_fac};
        synth_model_gen_chunk(st->m, c, &v);
        for (uint32_t i = 0; i < v.n; i++) sl->sum_label += v.label[i], sl->sum_prob += v.prob[i];
        if (st->o->format == SYNTH_FMT_TSV) p = format_tsv(p, &v, Nd, F);
        else if (st->o->format == SYNTH_FMT_CSV) p = format_csv(p, &v, c * SYNTH_CHUNK_ROWS, st->o);
        if (st->o->format == SYNTH_FMT_BIN) {
            // Checksums of the chunk while it is in cache, appended to the block's.
            bp_ds_rows_sum cs;
            if (st->o->scalar) bp_ds_rows_summarize(&st->shape, v.n, v.label, v.dense, v.sparse, v.prob, &cs);
            else synth_rows_summarize(&st->shape, v.n, v.label, v.dense, v.sparse, v.prob, &cs);
            const size_t width[4] = {1, (size_t)Nd * sizeof(float), (size_t)F * sizeof(uint32_t), sizeof(float)};
            for (int s = 0; s < 4; s++) sl->sum.crc[s] = bp_crc32_combine(sl->sum.crc[s], cs.crc[s], v.n * width[s]);
            for (uint32_t f = 0; f < F; f++) sl->sum.max_id1[f] = BP_MAX(sl->sum.max_id1[f], cs.max_id1[f]);
        }
        off += v.n;
    }
    sl->rows = off;
    sl->text_len = (size_t)(p - sl->text);
    if (sl->z_on) sl->gz_len = gz_member(&sl->z, sl->text, sl->text_len, &sl->gz, &sl->gz_cap);
}

static void *run_worker(void *arg) {
    run_state *st = arg;
    pthread_mutex_lock(&st->mu);
    while (!st->stop && st->next_block < st->nblocks) {
        uint64_t b = st->next_block++;
        run_slot *sl = &st->slots[b % (uint64_t)st->nslots];
        while (!st->stop && sl->expect != b) pthread_cond_wait(&st->cv, &st->mu);
        if (st->stop) break;
        pthread_mutex_unlock(&st->mu);
        fill_block(st, sl, b);
        pthread_mutex_lock(&st->mu);
        sl->ready = 1;
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

// The shortest %g form that reads back as x, so a recorded flag gives the same value again.
static void fmt_exact(char *b, size_t cap, double x) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(b, cap, "%.*g", digits, x);
        if (strtod(b, NULL) == x) return;
    }
}

// The header's `source`: the command that regenerates these bytes (given -o FILE).  The skew is
// recorded exactly, so an auto skew need not be calibrated again.  A custom table list too long
// for the field is replaced by a pointer to the sizes that `bagpipe info` prints; a command that
// is too long even then is cut and ends in "...".
static void source_text(const synth_opts *o, const synth_model *m, char *buf, size_t cap) {
    static const char *names[] = {"custom", "criteo-kaggle", "avazu"};
    char skew[32], drift[32], ctr[32], r[3][32], split[112], shape[64 * 21 + 32];
    fmt_exact(skew, sizeof skew, synth_model_skew(m));
    fmt_exact(drift, sizeof drift, o->drift);
    fmt_exact(ctr, sizeof ctr, o->ctr);
    if (o->split == SYNTH_SPLIT_RATIO) {
        for (int i = 0; i < 3; i++) fmt_exact(r[i], sizeof r[i], o->ratio[i]);
        snprintf(split, sizeof split, "ratio:%s,%s,%s", r[0], r[1], r[2]);
    } else {
        snprintf(split, sizeof split, "%s", o->split == SYNTH_SPLIT_KAGGLE ? "kaggle" : "none");
    }
    shape[0] = 0;
    if (o->preset == SYNTH_PRESET_CUSTOM) {
        size_t n = (size_t)snprintf(shape, sizeof shape, " --dense %u --tables ", o->n_dense);
        for (uint32_t f = 0; f < o->n_tables; f++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%llu", f ? "," : "", (unsigned long long)o->card[f]);
    }
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = (size_t)snprintf(buf, cap, "bagpipe synth --preset %s%s --rows %llu --seed %llu --skew %s --drift %s "
                             "--ctr %s --pairs %d --split %s", names[o->preset], shape, (unsigned long long)o->rows,
                             (unsigned long long)o->seed, skew, drift, ctr, o->n_pairs, split);
        if (n < cap || o->preset != SYNTH_PRESET_CUSTOM) break; // (a preset's shape is its name)
        snprintf(shape, sizeof shape, " --dense %u --tables <the %u sizes on the tables line of bagpipe info>",
                 o->n_dense, o->n_tables);
    }
    if (n < cap) return;
    memcpy(buf + cap - 4, "...", 4); // still too long (flags with many digits): show it is cut
}

int synth_run(const synth_opts *opts, synth_report *rep) {
    memset(rep, 0, sizeof *rep);
    synth_opts o = *opts;
    int rc = synth_opts_check(&o);
    if (rc) return rc;
    if (!o.out || !*o.out) return bp_fail(BP_EUSAGE, "synth: an output file is required (-o FILE)");
    const double t0 = bp_now();
    synth_model *m;
    rc = synth_model_init(&m, &o);
    if (rc) return rc;
    if (o.scalar) synth_model_set_simd(m, 0);
    const uint32_t Nd = o.n_dense, F = o.n_tables;
    synth_split_sizes(&o, rep->split);

    bp_ds_writer *w = NULL;
    bp_afile af = {.fd = -1};
    const int gz = o.format != SYNTH_FMT_BIN && gz_name(o.out);
    bp_ds_info t;
    memset(&t, 0, sizeof t);
    if (o.format == SYNTH_FMT_BIN) {
        t.n_dense = Nd, t.n_sparse = F, t.transform = BP_TRANSFORM_LOG1P, t.flags = BP_DS_HAS_PROB;
        t.kind = BP_KIND_SYNTH, t.idmap = BP_IDMAP_RAW, t.seed = o.seed;
        source_text(&o, m, t.source, sizeof t.source);
        rc = bp_ds_writer_open_sized(&w, o.out, &t, o.rows);
    } else {
        rc = bp_ds_replace_check(o.out, gz_name(o.out) ? 2 : 1); // (gzip replaces gzip, as text replaces text)
        if (!rc) rc = bp_afile_open(&af, o.out);
        if (!rc && o.format == SYNTH_FMT_CSV) rc = text_write(&af, gz, avazu_header, sizeof avazu_header - 1);
        if (rc && af.fd >= 0) bp_afile_abort(&af);
    }
    if (rc) {
        synth_model_free(m);
        return rc;
    }

    run_state st;
    memset(&st, 0, sizeof st);
    st.m = m, st.o = &o, st.shape = t;
    st.nchunks = (o.rows + SYNTH_CHUNK_ROWS - 1) / SYNTH_CHUNK_ROWS;
    st.nblocks = (st.nchunks + BLOCK_CHUNKS - 1) / BLOCK_CHUNKS;
    st.nslots = o.threads <= 4 ? 2 * o.threads : o.threads + 4; // blocks in flight: all busy, some ready
    st.slots = bp_xcalloc((size_t)st.nslots, sizeof *st.slots);
    const size_t R = (size_t)BLOCK_CHUNKS * SYNTH_CHUNK_ROWS, Nd1 = Nd ? Nd : 1;
    for (int k = 0; k < st.nslots; k++) {
        run_slot *sl = &st.slots[k];
        sl->expect = (uint64_t)k;
        sl->label = bp_xmalloc(R);
        sl->dense_raw = bp_xmalloc(R * Nd1 * sizeof *sl->dense_raw);
        sl->dense = bp_xmalloc(R * Nd1 * sizeof *sl->dense);
        sl->sparse = bp_xmalloc(R * F * sizeof *sl->sparse);
        sl->prob = bp_xmalloc(R * sizeof *sl->prob);
        sl->pair_fac = bp_xmalloc(2 * SYNTH_MAX_PAIRS * SYNTH_CHUNK_ROWS * sizeof *sl->pair_fac);
        sl->text = o.format == SYNTH_FMT_BIN ? NULL : bp_xmalloc(R * text_row_max(&o));
        if (gz && !rc && gz_init(&sl->z) != 0) rc = bp_fail(BP_ENOMEM, "%s: cannot start the gzip compressor", o.out);
        sl->z_on = gz && !rc;
    }
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    pthread_t *th = bp_xcalloc((size_t)o.threads, sizeof *th);
    int started = 0;
    for (int k = 0; k < o.threads && !rc; k++, started++)
        if (pthread_create(&th[k], NULL, run_worker, &st) != 0) break;
    if (started == 0 && !rc) rc = bp_fail(BP_ENOMEM, "synth: cannot start a worker thread");

    bp_progress pg;
    bp_progress_init(&pg, "synth", "rows", o.rows);
    if (!o.progress) pg.enabled = 0;
    uint64_t done = 0;
    for (uint64_t b = 0; b < st.nblocks && !rc; b++) {
        run_slot *sl = &st.slots[b % (uint64_t)st.nslots];
        pthread_mutex_lock(&st.mu);
        while (!(sl->ready && sl->expect == b)) pthread_cond_wait(&st.cv, &st.mu);
        pthread_mutex_unlock(&st.mu);
        if (o.format == SYNTH_FMT_BIN) rc = bp_ds_writer_append_summed(w, sl->rows, sl->label, sl->dense, sl->sparse, sl->prob, &sl->sum);
        else if (gz) rc = bp_afile_write(&af, sl->gz, sl->gz_len);
        else if (sl->text_len) rc = bp_afile_write(&af, sl->text, sl->text_len);
        rep->mean_label += sl->sum_label, rep->mean_prob += sl->sum_prob;
        done += sl->rows;
        pthread_mutex_lock(&st.mu);
        sl->ready = 0;
        sl->expect = b + (uint64_t)st.nslots;
        if (rc) st.stop = 1;
        pthread_cond_broadcast(&st.cv);
        pthread_mutex_unlock(&st.mu);
        bp_progress_update(&pg, done, NULL);
    }
    if (rc) {
        pthread_mutex_lock(&st.mu);
        st.stop = 1;
        pthread_cond_broadcast(&st.cv);
        pthread_mutex_unlock(&st.mu);
    }
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    rep->gen_seconds = bp_now() - t0;
    if (!rc) {
        if (o.format == SYNTH_FMT_BIN) {
            rc = bp_ds_writer_finish(w, o.card, rep->split);
            w = NULL;
        } else {
            if (gz && af.written == 0) rc = text_write(&af, gz, "", 0); // no rows: an empty member, a gzip file still
            rep->bytes = af.written;
            if (!rc) rc = bp_afile_commit(&af);
        }
    }
    if (rc) {
        bp_ds_writer_abort(w);
        if (o.format != SYNTH_FMT_BIN) bp_afile_abort(&af);
    }
    bp_progress_finish(&pg);

    for (int k = 0; k < st.nslots; k++) {
        run_slot *sl = &st.slots[k];
        free(sl->label), free(sl->dense_raw), free(sl->dense), free(sl->sparse), free(sl->prob), free(sl->pair_fac), free(sl->text);
        if (sl->z_on) deflateEnd(&sl->z);
        free(sl->gz);
    }
    free(st.slots);
    free(th);
    pthread_mutex_destroy(&st.mu);
    pthread_cond_destroy(&st.cv);
    if (!rc) {
        rep->rows = o.rows;
        rep->mean_label /= (double)o.rows;
        rep->mean_prob /= (double)o.rows;
        rep->skew = synth_model_skew(m);
        rep->hot_share = synth_model_expected_top_share(m, 0.01);
        rep->bias = synth_model_bias(m);
        if (o.format == SYNTH_FMT_BIN) {
            t.rows = o.rows;
            bp_ds_layout(&t);
            rep->bytes = t.file_size;
        }
    }
    rep->seconds = bp_now() - t0;
    synth_model_free(m);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Command line

static int parse_split(const char *s, synth_opts *o) {
    if (strcmp(s, "kaggle") == 0) return o->split = SYNTH_SPLIT_KAGGLE, 0;
    if (strcmp(s, "none") == 0) return o->split = SYNTH_SPLIT_NONE, 0;
    if (strncmp(s, "ratio:", 6) == 0) {
        double r[3];
        char *end;
        const char *p = s + 6;
        for (int i = 0; i < 3; i++) {
            r[i] = cli_strtod(p, &end);
            if (end == p || (i < 2 && *end != ',') || (i == 2 && *end)) goto bad;
            p = end + 1;
        }
        o->split = SYNTH_SPLIT_RATIO;
        memcpy(o->ratio, r, sizeof r);
        return 0;
    }
bad:
    return bp_fail(BP_EUSAGE, "--split: expected ratio:TRAIN,VAL,TEST (e.g. ratio:0.8,0.1,0.1), kaggle or none, got '%s'", s);
}

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *tables = NULL, *skew = NULL, *split = NULL, *out = NULL, *ctr = NULL;
    int64_t rows, seed;
    int dense, pairs, threads, format;
    double hot_share, drift;
    const cli_opt opts[] = {
        CLI_STR("preset", 'p', &preset, NULL, "criteo-kaggle, avazu or custom (default criteo-kaggle; custom with --tables)"),
        CLI_STR("tables", 0, &tables, NULL, "custom: rows of each table, e.g. 1000,50,20000"),
        CLI_INT("dense", 0, &dense, 13, 0, BP_DS_MAX_DENSE, "custom: number of dense features"),
        CLI_I64("rows", 'n', &rows, 1000000, INT64_MIN, INT64_MAX, "samples to generate"),
        CLI_I64("seed", 's', &seed, 1, 0, INT64_MAX, "random seed (same flags and seed: same bytes)"),
        CLI_STR("skew", 0, &skew, "auto", "Zipf exponent of row popularity, or auto (calibrated to --hot-share)"),
        CLI_DBL("hot-share", 0, &hot_share, 0.90, -1e9, 1e9,
                "auto skew: share of accesses taken by the top 1% of rows"), // range: synth_opts_check
        CLI_DBL("drift", 0, &drift, 0, -1e9, 1e9, "popularity drift: fraction of each table's top 1% replaced per day"),
        CLI_STR("ctr", 0, &ctr, NULL, "base click rate of the planted model (default 0.256; avazu 0.17)"),
        CLI_INT("pairs", 0, &pairs, 4, 0, SYNTH_MAX_PAIRS, "planted pairwise interactions between tables"),
        CLI_STR("split", 0, &split, NULL, "ratio:TRAIN,VAL,TEST, kaggle or none (default kaggle for criteo-kaggle, "
                                          "ratio:0.8,0.1,0.1 otherwise)"),
        CLI_CHOICE("format", 'f', &format, 0, "bin|tsv|csv|raw", "output: binary dataset, Criteo TSV, Avazu CSV, "
                                                                  "or the preset's raw text format"),
        CLI_INT("threads", 't', &threads, 0, 0, 256, "generator threads (0: one per core)"),
        CLI_STR("out", 'o', &out, NULL, "output file (text formats: gzip when it ends in .gz; a dataset takes no .gz name)"),
        CLI_END,
    };
    char **pos;
    int npos;
    cli_given given;
    int rc = cli_parse_given("bagpipe synth", "[options] -o FILE", opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    cli_warn_overridden(&given);
    if (npos) {
        rc = bp_fail(BP_EUSAGE, "synth: unexpected argument '%s' (the output goes to -o FILE)", pos[0]);
        free(pos);
        return cmd_exit(rc);
    }
    free(pos);

    synth_preset p = SYNTH_PRESET_CRITEO_KAGGLE;
    if (!preset) p = tables ? SYNTH_PRESET_CUSTOM : SYNTH_PRESET_CRITEO_KAGGLE;
    else if (strcmp(preset, "criteo-kaggle") == 0) p = SYNTH_PRESET_CRITEO_KAGGLE;
    else if (strcmp(preset, "avazu") == 0) p = SYNTH_PRESET_AVAZU;
    else if (strcmp(preset, "custom") == 0) p = SYNTH_PRESET_CUSTOM;
    else return cmd_exit(bp_fail(BP_EUSAGE, "--preset: unknown preset '%s' (expected criteo-kaggle, avazu or custom)", preset));
    synth_opts o;
    synth_opts_default(&o, p);
    if (p == SYNTH_PRESET_CUSTOM) {
        if (!tables) return cmd_exit(bp_fail(BP_EUSAGE, "--preset custom needs --tables, e.g. --tables 1000,50,20000"));
        int n = cli_parse_u64_list("tables", tables, o.card, BP_DS_MAX_SPARSE);
        if (n < 0) return cmd_exit(n);
        o.n_tables = (uint32_t)n;
        o.n_dense = (uint32_t)dense;
    } else {
        if (tables) return cmd_exit(bp_fail(BP_EUSAGE, "--tables: only with --preset custom (the %s preset has its own)", preset));
        if (cli_was_given(&given, opts, "dense")) return cmd_exit(bp_fail(BP_EUSAGE, "--dense: only with --preset custom"));
    }
    if (rows < 1) return cmd_exit(bp_fail(BP_EUSAGE, "--rows: expected at least 1 sample, got %lld", (long long)rows));
    o.rows = (uint64_t)rows;
    o.seed = (uint64_t)seed;
    if (strcmp(skew, "auto") == 0) {
        o.skew = -1;
    } else if (cli_was_given(&given, opts, "hot-share")) {
        return cmd_exit(bp_fail(BP_EUSAGE, "--hot-share: only with --skew auto (it calibrates the exponent; --skew %s sets "
                                           "it)", skew));
    } else {
        char *end;
        o.skew = cli_strtod(skew, &end);
        if (end == skew || *end || !isfinite(o.skew))
            return cmd_exit(bp_fail(BP_EUSAGE, "--skew: expected a Zipf exponent (e.g. 1.05) or auto, got '%s'", skew));
        if (o.skew < 0)
            return cmd_exit(bp_fail(BP_EUSAGE, "--skew: the exponent must be >= 0 (0 is uniform), got %s", skew));
    }
    o.hot_share = hot_share;
    if (drift < 0) return cmd_exit(bp_fail(BP_EUSAGE, "--drift: expected a rate >= 0, got %g", drift));
    o.drift = drift;
    if (ctr) {
        char *end;
        o.ctr = cli_strtod(ctr, &end);
        if (end == ctr || *end) return cmd_exit(bp_fail(BP_EUSAGE, "--ctr: expected a click rate like 0.25, got '%s'", ctr));
    }
    o.n_pairs = pairs;
    if (split && (rc = parse_split(split, &o))) return cmd_exit(rc);
    if (format == 3) o.format = p == SYNTH_PRESET_AVAZU ? SYNTH_FMT_CSV : SYNTH_FMT_TSV;
    else o.format = (synth_format)format;
    // A text file holds no split (prep cuts one from it): a split asked of one would be ignored.
    if (split && o.format != SYNTH_FMT_BIN && o.split != SYNTH_SPLIT_NONE)
        return cmd_exit(bp_fail(BP_EUSAGE, "--split %s: only with --format bin; a text file holds no split: give "
                                "--split to prep when converting it", split));
    o.threads = bp_threads_resolve(threads, 64);
    o.progress = 1;
    o.out = out;
    if (!out) return cmd_exit(bp_fail(BP_EUSAGE, "synth: an output file is required (-o FILE)"));

    synth_report rep;
    rc = synth_run(&o, &rep);
    if (rc) return cmd_exit(rc);
    char b[32], rate[32], secs[32];
    char cut[96] = ""; // a binary dataset's split (a text file has none)
    if (o.format == SYNTH_FMT_BIN)
        snprintf(cut, sizeof cut, " (train %llu, val %llu, test %llu)", (unsigned long long)rep.split[0],
                 (unsigned long long)rep.split[1], (unsigned long long)rep.split[2]);
    printf("synth: %llu row%s%s -> %s (%s) in %s, %s rows/s\n", (unsigned long long)rep.rows, rep.rows == 1 ? "" : "s",
           cut, o.out, bp_fmt_bytes(b, sizeof b, (double)rep.bytes), bp_fmt_seconds(secs, sizeof secs, rep.seconds),
           bp_fmt_rate(rate, sizeof rate, rep.rows / rep.seconds));
    uint64_t total = 0;
    for (uint32_t f = 0; f < o.n_tables; f++) total += o.card[f];
    printf("  shape   %u dense, %u tables, %llu rows in all; seed %llu\n", o.n_dense, o.n_tables,
           (unsigned long long)total, (unsigned long long)o.seed);
    // An auto skew can fall short: small tables cap the share the hottest 1% can take (at the
    // largest exponent, 6, each table's top row takes almost all of its lookups).
    if (o.skew < 0 && rep.hot_share < o.hot_share - 0.005)
        printf("  skew    Zipf exponent %.4f (the largest: --hot-share %g is out of reach for these tables, whose "
               "hottest 1%% of rows take %.1f%% of the lookups at most)\n", rep.skew, o.hot_share, 100 * rep.hot_share);
    else if (o.skew < 0 && rep.hot_share > o.hot_share + 0.005 && rep.skew == 0) // below uniform's share
        printf("  skew    Zipf exponent 0 (uniform popularity: --hot-share %g is below what these tables give "
               "even then, their hottest 1%% of rows taking %.1f%% of the lookups)\n", o.hot_share,
               100 * rep.hot_share);
    else if (o.skew < 0 && rep.hot_share > o.hot_share + 0.005) // small tables: past it even when uniform
        printf("  skew    Zipf exponent %.4f (--hot-share %g is below what these tables give even with uniform "
               "popularity, so the exponent is the one calibrated on the Criteo Kaggle tables; their hottest 1%% of "
               "rows take %.1f%% of the lookups)\n", rep.skew, o.hot_share, 100 * rep.hot_share);
    else
        printf("  skew    Zipf exponent %.4f%s\n", rep.skew, o.skew < 0 ? " (calibrated to --hot-share)" : "");
    printf("  labels  base rate %.2f%%, mean true probability %.2f%%, logit bias %.4f\n", 100 * rep.mean_label,
           100 * rep.mean_prob, rep.bias);
    return 0;
}
