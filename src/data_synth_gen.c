// The synthetic data generator: presets, option checks, the popularity sampler, the id
// permutation and the planted ground-truth model.  data_synth.c drives it (threads, writers).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_criteo.h"
#include "data_synth.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SYNTH_HAVE_AVX512 1
#else
#define SYNTH_HAVE_AVX512 0
#endif

// ---------------------------------------------------------------------------------------------
// Presets

// Criteo Kaggle (Display Advertising Challenge): rows of each of the 26 categorical tables as
// the DLRM reference's preprocessing counts them; 33,762,577 rows in all.
static const uint64_t criteo_kaggle_card[26] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
};

// Avazu: hour of day and day of week (from the `hour` column), then the 21 categorical columns
// with their numbers of distinct values in train.csv (40,428,967 rows); see docs/synth.md.
static const uint64_t avazu_card[23] = {
    24, 7, 7, 7, 4737, 7745, 26, 8552, 559, 36, 2686408, 6729486, 8251, 5, 4, 2626, 8, 9, 435, 4, 68, 172, 60,
};
enum { AVAZU_T_HOUR = 0, AVAZU_T_DOW = 1, AVAZU_DAYS = 10, CRITEO_DAYS = 7 };

const uint64_t *synth_preset_card(synth_preset p, uint32_t *F) {
    if (p == SYNTH_PRESET_CRITEO_KAGGLE) return *F = 26, criteo_kaggle_card;
    if (p == SYNTH_PRESET_AVAZU) return *F = 23, avazu_card;
    *F = 0;
    return NULL;
}

void synth_opts_default(synth_opts *o, synth_preset p) {
    memset(o, 0, sizeof *o);
    o->preset = p;
    o->rows = 1000000;
    o->seed = 1;
    o->skew = -1;
    o->hot_share = 0.90;
    o->drift = 0;
    o->ctr = p == SYNTH_PRESET_AVAZU ? 0.17 : 0.256; // Avazu's and Criteo Kaggle's click rates
    o->n_pairs = 4;
    o->split = p == SYNTH_PRESET_CRITEO_KAGGLE ? SYNTH_SPLIT_KAGGLE : SYNTH_SPLIT_RATIO;
    o->ratio[0] = 0.8, o->ratio[1] = 0.1, o->ratio[2] = 0.1;
    o->format = SYNTH_FMT_BIN;
    o->threads = 2;
    if (p == SYNTH_PRESET_CRITEO_KAGGLE) {
        o->n_dense = 13, o->n_tables = 26;
        memcpy(o->card, criteo_kaggle_card, sizeof criteo_kaggle_card);
    } else if (p == SYNTH_PRESET_AVAZU) {
        o->n_dense = 0, o->n_tables = 23;
        memcpy(o->card, avazu_card, sizeof avazu_card);
    }
}

int synth_opts_check(synth_opts *o) {
    if (o->preset == SYNTH_PRESET_CRITEO_KAGGLE) {
        o->n_dense = 13, o->n_tables = 26;
        memcpy(o->card, criteo_kaggle_card, sizeof criteo_kaggle_card);
    } else if (o->preset == SYNTH_PRESET_AVAZU) {
        o->n_dense = 0, o->n_tables = 23;
        memcpy(o->card, avazu_card, sizeof avazu_card);
    }
    if (o->rows == 0) return bp_fail(BP_EUSAGE, "--rows: must be at least 1");
    if (o->rows > ((uint64_t)1 << 40)) return bp_fail(BP_EUSAGE, "--rows: %llu is more than 2^40", (unsigned long long)o->rows);
    if (o->n_tables == 0 || o->n_tables > BP_DS_MAX_SPARSE)
        return bp_fail(BP_EUSAGE, "--tables: expected 1-%d table sizes, got %u", BP_DS_MAX_SPARSE, o->n_tables);
    if (o->n_dense > BP_DS_MAX_DENSE) return bp_fail(BP_EUSAGE, "--dense: at most %d, got %u", BP_DS_MAX_DENSE, o->n_dense);
    for (uint32_t f = 0; f < o->n_tables; f++)
        if (o->card[f] == 0 || o->card[f] > ((uint64_t)1 << 32))
            return bp_fail(BP_EUSAGE, "--tables: table %u has %llu rows; expected 1 to 2^32", f, (unsigned long long)o->card[f]);
    if (!(o->skew < 0) && !(o->skew <= 8))
        return bp_fail(BP_EUSAGE, "--skew: expected an exponent in [0, 8] or 'auto'");
    if (!(o->hot_share > 0.01 && o->hot_share < 1))
        return bp_fail(BP_EUSAGE, "--hot-share: expected a share in (0.01, 1), got %.15g", o->hot_share);
    if (!(o->drift >= 0 && o->drift <= 100))
        return bp_fail(BP_EUSAGE, "--drift: expected a rate in [0, 100], got %.15g", o->drift);
    if (!(o->ctr > 0.001 && o->ctr < 0.999))
        return bp_fail(BP_EUSAGE, "--ctr: expected a rate in (0.001, 0.999), got %.15g", o->ctr);
    if (o->n_pairs < 0 || o->n_pairs > SYNTH_MAX_PAIRS)
        return bp_fail(BP_EUSAGE, "--pairs: expected 0-%d, got %d", SYNTH_MAX_PAIRS, o->n_pairs);
    if (o->split == SYNTH_SPLIT_RATIO) {
        double s = o->ratio[0] + o->ratio[1] + o->ratio[2];
        if (!(o->ratio[0] >= 0 && o->ratio[1] >= 0 && o->ratio[2] >= 0) || fabs(s - 1) > 1e-6)
            return bp_fail(BP_EUSAGE, "--split: ratios must be non-negative and add up to 1 (got %g,%g,%g)",
                           o->ratio[0], o->ratio[1], o->ratio[2]);
    }
    if (o->format == SYNTH_FMT_CSV && o->preset != SYNTH_PRESET_AVAZU)
        return bp_fail(BP_EUSAGE, "--format csv: the Avazu CSV layout needs --preset avazu (Criteo-shaped data is tsv)");
    if (o->format == SYNTH_FMT_TSV && o->preset == SYNTH_PRESET_AVAZU)
        return bp_fail(BP_EUSAGE, "--format tsv: Avazu's raw format is CSV; use --format csv (or raw)");
    // prep reads Criteo's layout only; a TSV of another shape would be a file nothing reads.
    if (o->format == SYNTH_FMT_TSV && (o->n_dense != CRITEO_ND || o->n_tables != CRITEO_F))
        return bp_fail(BP_EUSAGE, "--format tsv: Criteo's layout has 13 dense and 26 tables, the only one prep "
                                  "reads; this shape has %u and %u (use --format bin, or --dense 13 and 26 tables)",
                       o->n_dense, o->n_tables);
    if (o->threads < 1 || o->threads > 256) return bp_fail(BP_EUSAGE, "--threads: expected 1-256, got %d", o->threads);
    return 0;
}

void synth_split_sizes(const synth_opts *o, uint64_t split[3]) {
    uint64_t n = o->rows;
    if (o->split == SYNTH_SPLIT_NONE) {
        split[0] = n, split[1] = split[2] = 0;
    } else if (o->split == SYNTH_SPLIT_KAGGLE) {
        bp_ds_split_kaggle(n, split); // the rule prep uses, so both cut the same rows alike
    } else {
        bp_ds_split_ratio(n, o->ratio, split); // prep's rule too
    }
}

// ---------------------------------------------------------------------------------------------
// Permutation and categorical hashing

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

void synth_perm_init(synth_perm *p, uint64_t n, uint64_t key) {
    BP_ASSERT(n >= 1 && n <= ((uint64_t)1 << 32));
    memset(p, 0, sizeof *p);
    p->n = n;
    p->minv = UINT64_MAX / n;
    uint32_t j = 0;
    while (j < 16 && ((uint64_t)2 << j) <= n) j++; // largest j <= 16 with 2^j <= n
    p->mask = ((uint64_t)1 << j) - 1;
    p->full = n / (p->mask + 1) * (p->mask + 1);
    p->h = j > 1 ? (j + 1) / 2 : 1;
    uint64_t k = bp_mix64(key);
    p->k = k & p->mask;
    p->m1 = (bp_mix64(k + 1) | 1) & p->mask;
    p->m2 = (bp_mix64(k + 2) | 1) & p->mask;
    // A multiplier coprime with n, away from the small values that would keep neighbours close.
    // (for n >= 8 in [n/4, 3n/4); a = 1 always qualifies, so small n end quickly).
    uint64_t a = n == 1 ? 0 : 1;
    for (uint64_t i = 3; n > 2 && i < 1000; i++) {
        uint64_t c = n >= 8 ? n / 4 + bp_mix64(k + i) % (n / 2) : 1 + bp_mix64(k + i) % (n - 1);
        if (gcd64(c, n) == 1) {
            a = c;
            break;
        }
    }
    p->a = a;
    p->b = bp_mix64(k + 4) % n;
}

// A 32-bit mixer made of invertible steps (xor-shift, odd multiply) keyed per table.
#define CAT_M1 0x7feb352du
#define CAT_M2 0x846ca68bu
static uint32_t inv_odd32(uint32_t a) {
    uint32_t x = a; // Newton's iteration doubles the correct low bits each step
    for (int i = 0; i < 5; i++) x *= 2 - a * x;
    return x;
}
static uint32_t cat_key(uint32_t f) { return (uint32_t)bp_mix64(0xc47e0000ull + f); }

uint32_t synth_cat_hash32(uint32_t f, uint32_t id) {
    uint32_t x = id ^ cat_key(f);
    x ^= x >> 16;
    x *= CAT_M1;
    x ^= x >> 15;
    x *= CAT_M2;
    x ^= x >> 16;
    return x;
}

uint32_t synth_cat_unhash32(uint32_t f, uint32_t x) {
    x ^= x >> 16;
    x *= inv_odd32(CAT_M2);
    x ^= (x >> 15) ^ (x >> 30);
    x *= inv_odd32(CAT_M1);
    x ^= x >> 16;
    return x ^ cat_key(f);
}

// ---------------------------------------------------------------------------------------------
// Model

#define NORM_BITS 12     // standard normal quantiles: 4096 midpoints, looked up by hash bits
#define DENSE_QBITS 10   // dense count quantile table: 1024 intervals, linearly interpolated
#define LOG1P_TAB 65536  // log(1 + x) for counts below (97% of the largest feature's)
#define GEN_SUB 256      // rows generated column by column at a time (part of the output's definition)
#define BIN_RATIO_SHIFT 6 // popularity bins grow by 1/64 of their start: density varies < 2% within

// Variance budget of the logit and the scaling of rare rows: a row's effect std is
// sigma_f * sqrt(m / (m + M0)), m its expected number of lookups in NREF samples, so rows too
// rare to be learned from ~1M samples carry little signal.  Tuned with bench_synth_learn: on 1M
// criteo-kaggle rows the Bayes AUC is ~0.80 and a per-row logistic regression gets within 0.01.
#define V_ROW 5.0    // sum over tables of sigma_f^2
#define V_DENSE 0.5  // variance of the dense term
#define V_PAIR 0.15  // variance of the interactions between the hottest rows
#define NREF 1e6
#define M0 1e4

typedef struct {
    uint32_t thr; // keep the column's own bin when the low 32 random bits are below this, else the alias
    struct {
        uint32_t start, width; // first rank and ranks of the own (0) / alias (1) bin
    } half[2];
} alias_entry;

enum { T_SAMPLED = 0, T_HOUR = 1, T_DOW = 2 };

typedef struct {
    int kind;              // T_SAMPLED, or a time table of the avazu preset
    uint64_t n;            // card
    uint32_t nbins;
    alias_entry *alias;    // (nbins)
    double *bin_mass;      // (nbins) probability of each bin
    uint32_t *bin_start;   // (nbins) first rank of each bin
    synth_perm perm;
    uint64_t key;          // row-effect hash key
    double drift_rate;     // rank shift per row
    uint64_t shift_max;    // the shift reached at the last row, modulo n
    int all_wrap;          // that shift is >= n: every row reaches the top at some point
    float fac[SYNTH_SCALE_BUCKETS];   // rank factor sqrt(m / (m + M0)) by rank bucket
    float eff[SYNTH_SCALE_BUCKETS];   // sigma * fac
    float eff_fac[SYNTH_SCALE_BUCKETS][2]; // (eff, fac) pairs, for one load of both
    int pair_slot;         // row of pair_fac holding this table's factors, -1 if in no pair
    // AVX-512 path, tables of up to SIMD_LUT_MAX rows without drift: everything a rank leads to.
    uint64_t *lut;         // (n) per rank: the float bits of eff * z (low half), the id (high half)
    float *lut_fac;        // (n) per rank: fac, for tables in a pair (else NULL)
    uint32_t *tiny;        // tables of up to 32 rows (all bins single ranks): (5, 32) per bin its alias
                           // threshold and alias rank, per rank the bits of eff * z, the id, fac
} synth_table;

typedef struct {
    float miss;        // probability of an empty field
    float mu, sigma;   // log(1 + count) ~ N(mu, sigma) before flooring at 0
} dense_profile;

// Thirteen profiles shaped like Criteo's I1..I13 (rate of empty fields, typical size, spread);
// custom configurations cycle through them.
static const dense_profile dense_profiles[13] = {
    {0.45f, 0.69f, 1.3f}, {0.00f, 1.40f, 1.8f}, {0.21f, 2.08f, 1.3f}, {0.22f, 1.79f, 0.9f},
    {0.026f, 7.90f, 1.6f}, {0.22f, 3.58f, 1.5f}, {0.043f, 1.39f, 1.6f}, {0.0005f, 2.20f, 1.0f},
    {0.043f, 3.71f, 1.3f}, {0.45f, 0.50f, 0.5f}, {0.043f, 0.69f, 1.0f}, {0.77f, 0.30f, 1.0f},
    {0.22f, 1.79f, 0.9f},
};

struct synth_model {
    synth_opts o;
    uint32_t F, Nd;
    uint64_t rows;
    double skew, bias;
    int days;
    synth_table *tab;              // (F)
    float normtab[1 << NORM_BITS]; // standard normal quantiles
    float *log1p_tab;              // (LOG1P_TAB)
    float *dense_q;                // (Nd, 2^DENSE_QBITS + 1) count quantiles
    uint32_t *dense_miss;          // (Nd) empty-field threshold on 32 random bits
    float *dense_w, *dense_mean;   // (Nd) weight on log(1 + count), its mean
    int n_pairs;
    uint32_t pair[SYNTH_MAX_PAIRS][2];
    uint64_t pair_key[SYNTH_MAX_PAIRS][2];
    float pair_sigma;
    int simd;                      // generate with the AVX-512 passes (same bytes)
};

// Fast xoshiro256** on a local copy of a bp_rng (same sequence as bp_rng_u64).
static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3];
    s[2] ^= t, s[3] = rotl64(s[3], 45);
    return r;
}

static double norm_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double norm_quantile(double p) {
    // Bisection to ~1e-6, then Newton steps on cdf(x) - p to full precision.
    double lo = -12, hi = 12;
    for (int i = 0; i < 25; i++) {
        double mid = 0.5 * (lo + hi);
        if (norm_cdf(mid) < p) lo = mid;
        else hi = mid;
    }
    double x = 0.5 * (lo + hi);
    for (int i = 0; i < 2; i++) x -= (norm_cdf(x) - p) / (exp(-0.5 * x * x) * 0.3989422804014327);
    return x;
}

// Bucket of a rank for the row-effect scale: the top 8 bits of the float (rank + 1) past its
// exponent's bias, i.e. 8 buckets per octave.
static inline uint32_t rank_bucket(uint64_t rank) {
    float x = (float)(rank + 1);
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (b >> 20) - (127u << 3);
}

// Sum of (k+1)^-s over ranks k in [a, a + w).
static double zipf_mass(uint64_t a, uint64_t w, double s) {
    if (w <= 8) {
        double m = 0;
        for (uint64_t k = a; k < a + w; k++) m += pow((double)(k + 1), -s);
        return m;
    }
    double lo = (double)a + 0.5, hi = (double)(a + w) + 0.5, t = 1 - s;
    if (fabs(t) < 1e-12) return log(hi / lo);
    return pow(lo, t) * expm1(t * log(hi / lo)) / t; // (hi^t - lo^t) / t without cancellation
}

static void table_bins(synth_table *t) {
    uint32_t nb = 0;
    for (uint64_t r = 0; r < t->n; nb++) {
        uint64_t w = r >> BIN_RATIO_SHIFT;
        r += w ? w : 1;
    }
    t->nbins = nb;
    t->bin_start = bp_xmalloc((size_t)nb * sizeof *t->bin_start);
    t->bin_mass = bp_xmalloc((size_t)nb * sizeof *t->bin_mass);
    t->alias = bp_xmalloc((size_t)nb * sizeof *t->alias);
    uint64_t r = 0;
    for (uint32_t b = 0; b < nb; b++) {
        t->bin_start[b] = (uint32_t)r;
        uint64_t w = r >> BIN_RATIO_SHIFT;
        r += w ? w : 1;
        if (r > t->n) r = t->n;
    }
    BP_ASSERT(r == t->n);
}

static uint64_t bin_width(const synth_table *t, uint32_t b) {
    return b + 1 < t->nbins ? (uint64_t)t->bin_start[b + 1] - t->bin_start[b] : t->n - t->bin_start[b];
}

// Bin probabilities for exponent s (they sum to 1).
static void table_masses(synth_table *t, double s) {
    double total = 0;
    for (uint32_t b = 0; b < t->nbins; b++) total += t->bin_mass[b] = zipf_mass(t->bin_start[b], bin_width(t, b), s);
    for (uint32_t b = 0; b < t->nbins; b++) t->bin_mass[b] /= total;
}

// Walker's alias table over the bins (Vose's construction), deterministic.
static void table_alias(synth_table *t) {
    uint32_t nb = t->nbins;
    double *p = bp_xmalloc(nb * sizeof *p);
    uint32_t *small = bp_xmalloc(nb * sizeof *small), *large = bp_xmalloc(nb * sizeof *large);
    uint32_t ns = 0, nl = 0;
    for (uint32_t b = 0; b < nb; b++) {
        p[b] = t->bin_mass[b] * nb;
        if (p[b] < 1) small[ns++] = b;
        else large[nl++] = b;
    }
    for (uint32_t b = 0; b < nb; b++) {
        alias_entry *e = &t->alias[b];
        e->half[0].start = e->half[1].start = t->bin_start[b];
        e->half[0].width = e->half[1].width = (uint32_t)bin_width(t, b);
        e->thr = UINT32_MAX;
    }
    while (ns && nl) {
        uint32_t s = small[--ns], l = large[--nl];
        alias_entry *e = &t->alias[s];
        e->thr = (uint32_t)(p[s] * 4294967296.0);
        e->half[1].start = t->bin_start[l];
        e->half[1].width = (uint32_t)bin_width(t, l);
        p[l] -= 1 - p[s];
        if (p[l] < 1) small[ns++] = l;
        else large[nl++] = l;
    }
    // Leftovers are 1 up to rounding: they always keep their own bin (thr = UINT32_MAX and the
    // alias is the bin itself).
    free(p), free(small), free(large);
}

// Expected share of all accesses taken by the top `frac` of all rows, for the current masses.
typedef struct {
    double p;   // probability of one rank (per access of its table)
    double cnt; // ranks with that probability
} rank_class;
static int rank_class_desc(const void *a, const void *b) {
    double x = ((const rank_class *)a)->p, y = ((const rank_class *)b)->p;
    return x < y ? 1 : x > y ? -1 : 0;
}
static double top_share(const synth_model *m, double frac) {
    size_t n = 0;
    for (uint32_t f = 0; f < m->F; f++) n += m->tab[f].kind == T_SAMPLED ? m->tab[f].nbins : 1;
    rank_class *c = bp_xmalloc(n * sizeof *c);
    double total_rows = 0;
    size_t i = 0;
    for (uint32_t f = 0; f < m->F; f++) {
        const synth_table *t = &m->tab[f];
        total_rows += (double)t->n;
        if (t->kind != T_SAMPLED) {
            c[i++] = (rank_class){1.0 / (double)t->n / m->F, (double)t->n};
            continue;
        }
        for (uint32_t b = 0; b < t->nbins; b++) {
            double w = (double)bin_width(t, b);
            c[i++] = (rank_class){t->bin_mass[b] / w / m->F, w};
        }
    }
    qsort(c, n, sizeof *c, rank_class_desc);
    double k = ceil(frac * total_rows), share = 0;
    for (i = 0; i < n && k > 0; i++) {
        double take = c[i].cnt < k ? c[i].cnt : k;
        share += take * c[i].p;
        k -= take;
    }
    free(c);
    return share;
}

static void set_skew(synth_model *m, double s) {
    for (uint32_t f = 0; f < m->F; f++)
        if (m->tab[f].kind == T_SAMPLED) table_masses(&m->tab[f], s);
}

static double calibrate_skew(synth_model *m, double target, int fallback);

// The exponent calibrated on the Criteo Kaggle tables, where the target was measured.
static double reference_skew(double target) {
    synth_model r;
    memset(&r, 0, sizeof r);
    r.F = 26;
    r.tab = bp_xcalloc(r.F, sizeof *r.tab);
    for (uint32_t f = 0; f < r.F; f++) {
        r.tab[f].n = criteo_kaggle_card[f];
        r.tab[f].kind = T_SAMPLED;
        table_bins(&r.tab[f]);
    }
    double s = calibrate_skew(&r, target, 0);
    for (uint32_t f = 0; f < r.F; f++) free(r.tab[f].alias), free(r.tab[f].bin_mass), free(r.tab[f].bin_start);
    free(r.tab);
    return s;
}

// Bisection for the exponent whose top-1% share is the target (the share grows with s).  When
// the table sizes alone already give the target (in Avazu 21 of 23 tables are tiny, so their
// rows are the top 1% whatever the exponent), the share says nothing about the exponent: then
// the exponent calibrated on the Criteo Kaggle tables is used (0 there, or without fallback).
static double calibrate_skew(synth_model *m, double target, int fallback) {
    double lo = 0, hi = 6;
    set_skew(m, hi);
    if (top_share(m, 0.01) < target) return hi;
    set_skew(m, lo);
    if (top_share(m, 0.01) >= target) return fallback ? reference_skew(target) : lo;
    for (int it = 0; it < 30; it++) { // to 6 / 2^30
        double mid = 0.5 * (lo + hi);
        set_skew(m, mid);
        if (top_share(m, 0.01) < target) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// Per-rank access probability of rank r (for the row-effect scale).
static double rank_prob(const synth_table *t, double rank) {
    if (t->kind != T_SAMPLED) return 1.0 / (double)t->n;
    // Find the bin by bisection on bin_start.
    uint64_t r = (uint64_t)rank;
    uint32_t lo = 0, hi = t->nbins - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (t->bin_start[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return t->bin_mass[lo] / (double)bin_width(t, lo);
}

static void model_dense_init(synth_model *m, bp_rng *rng) {
    uint32_t Nd = m->Nd, Q = 1u << DENSE_QBITS;
    m->dense_q = bp_xcalloc((size_t)Nd * (Q + 1), sizeof *m->dense_q);
    m->dense_miss = bp_xcalloc(Nd ? Nd : 1, sizeof *m->dense_miss);
    m->dense_w = bp_xcalloc(Nd ? Nd : 1, sizeof *m->dense_w);
    m->dense_mean = bp_xcalloc(Nd ? Nd : 1, sizeof *m->dense_mean);
    double *z = bp_xmalloc((Q + 1) * sizeof *z); // (Q + 1) standard normal quantiles i / Q
    for (uint32_t i = 0; i <= Q && Nd; i++) z[i] = i == 0 ? -12 : i == Q ? 4.75 : norm_quantile((double)i / Q);
    for (uint32_t j = 0; j < Nd; j++) {
        const dense_profile *pr = &dense_profiles[j % 13];
        float *q = m->dense_q + (size_t)j * (Q + 1);
        for (uint32_t i = 0; i <= Q; i++) {
            double v = expm1(pr->mu + pr->sigma * z[i]);
            q[i] = (float)(v < 0 ? 0 : v > 2e9 ? 2e9 : v);
        }
        m->dense_miss[j] = (uint32_t)(pr->miss * 4294967296.0);
        // Mean and spread of the stored value log(1 + count), from the quantile table.
        double s1 = 0, s2 = 0;
        const int sub = 4;
        for (uint32_t i = 0; i < Q * sub; i++) {
            double u = (i + 0.5) / (Q * sub), pos = u * Q;
            uint32_t k = (uint32_t)pos;
            double c = floor(q[k] + (pos - k) * (q[k + 1] - q[k]));
            double l = log1p(c);
            s1 += l, s2 += l * l;
        }
        double present = 1 - pr->miss, mean = present * s1 / (Q * sub);
        double var = present * s2 / (Q * sub) - mean * mean;
        m->dense_mean[j] = (float)mean;
        m->dense_w[j] = (float)(sqrt(V_DENSE / Nd) * bp_rng_normal(rng) / sqrt(var > 1e-6 ? var : 1e-6));
    }
    free(z);
}

static void model_tables_init(synth_model *m, bp_rng *rng) {
    uint32_t F = m->F;
    m->tab = bp_xcalloc(F, sizeof *m->tab);
    for (uint32_t f = 0; f < F; f++) {
        synth_table *t = &m->tab[f];
        t->n = m->o.card[f];
        t->kind = T_SAMPLED;
        if (m->o.preset == SYNTH_PRESET_AVAZU && f == AVAZU_T_HOUR) t->kind = T_HOUR;
        if (m->o.preset == SYNTH_PRESET_AVAZU && f == AVAZU_T_DOW) t->kind = T_DOW;
        t->key = bp_hash2(m->o.seed, 0x7ab1e000ull + f);
        synth_perm_init(&t->perm, t->n, bp_hash2(m->o.seed, 0x9e4d0000ull + f));
        if (t->kind == T_SAMPLED) table_bins(t);
    }
    m->skew = m->o.skew >= 0 ? m->o.skew : calibrate_skew(m, m->o.hot_share, 1);
    set_skew(m, m->skew);
    // Per-table importance: lognormal weights normalised so their squares add up to F.
    double g[BP_DS_MAX_SPARSE], g2 = 0;
    for (uint32_t f = 0; f < F; f++) g[f] = exp(0.5 * bp_rng_normal(rng)), g2 += g[f] * g[f];
    for (uint32_t f = 0; f < F; f++) {
        synth_table *t = &m->tab[f];
        if (t->kind == T_SAMPLED) table_alias(t);
        double sigma = sqrt(V_ROW / F) * g[f] * sqrt(F / g2);
        double hot = ceil(0.01 * (double)t->n);
        t->drift_rate = m->o.drift * hot * m->days / (double)m->rows;
        uint64_t shift_end = (uint64_t)(t->drift_rate * (double)(m->rows - 1));
        t->shift_max = shift_end % t->n;
        t->all_wrap = shift_end >= t->n;
        for (uint32_t b = 0; b < SYNTH_SCALE_BUCKETS; b++) {
            // Middle rank of the bucket: rank + 1 = 2^(b/8 + 1/16).
            double rank = exp2((b + 0.5) / 8.0) - 1;
            double mm = NREF * rank_prob(t, rank < (double)t->n ? rank : (double)t->n - 1);
            double fac = sqrt(mm / (mm + M0));
            t->fac[b] = (float)fac;
            t->eff[b] = (float)(sigma * fac);
            t->eff_fac[b][0] = t->eff[b], t->eff_fac[b][1] = t->fac[b];
        }
    }
}

static void model_pairs_init(synth_model *m, bp_rng *rng) {
    int want = m->o.n_pairs;
    if (want > (int)m->F / 2) want = (int)m->F / 2;
    m->n_pairs = 0;
    while (m->n_pairs < want) {
        uint32_t a = bp_rng_below(rng, m->F), b = bp_rng_below(rng, m->F);
        if (a == b) continue;
        if (a > b) { uint32_t t = a; a = b; b = t; }
        int dup = 0;
        for (int p = 0; p < m->n_pairs; p++) dup |= m->pair[p][0] == a && m->pair[p][1] == b;
        if (dup) continue;
        int p = m->n_pairs++;
        m->pair[p][0] = a, m->pair[p][1] = b;
        m->pair_key[p][0] = bp_hash2(m->o.seed, 0x9a110000ull + 2 * (uint64_t)p);
        m->pair_key[p][1] = bp_hash2(m->o.seed, 0x9a110001ull + 2 * (uint64_t)p);
    }
    m->pair_sigma = m->n_pairs ? (float)sqrt(V_PAIR / m->n_pairs) : 0;
    int slots = 0;
    for (uint32_t f = 0; f < m->F; f++) m->tab[f].pair_slot = -1;
    for (int p = 0; p < m->n_pairs; p++)
        for (int k = 0; k < 2; k++)
            if (m->tab[m->pair[p][k]].pair_slot < 0) m->tab[m->pair[p][k]].pair_slot = slots++;
}

// Generates n rows starting at absolute row `row0` from the stream in rng.  logit: (n) receives
// the logit without the bias; with `finish`, labels and probabilities are drawn/filled too.
// Rows go in sub-blocks of GEN_SUB; inside one, work goes column by column (one table over the
// sub-block's rows, then the next), so each pass keeps one table's sampler hot and its
// iterations are independent, while the sub-block's output stays in L1.  The stream is consumed
// in that order: per sub-block and sampled table, per two rows, 2 draws for their bins and 1 for
// their ranks inside the bins; then 1 per row for each dense feature; then 1 per row for the label.
// The per-table constants of a pass, in locals so that the output stores (which may alias as far
// as the compiler knows) do not force them to be reloaded on every row.
typedef struct {
    const alias_entry *alias;
    uint64_t nbins, n, shift_max, key;
    int all_wrap;
    double drift_rate;
    const float *eff, *fac;
} pass_consts;

// One row of a sampled table: u picks the bin (high 32 bits: column, low 32 bits: own or alias),
// v (32 bits) the rank inside it; then the drift shift, the id, and the row's effect.
static inline __attribute__((always_inline)) void table_row(const pass_consts c, const synth_perm *perm,
                                                            const float *normtab, uint64_t u, uint64_t v,
                                                            uint64_t row, int drift, float *logit, uint32_t *sp,
                                                            float *pf) {
    const alias_entry *e = &c.alias[((u >> 32) * c.nbins) >> 32];
    uint32_t sel = (uint32_t)u >= e->thr;
    // Uniform within the bin (width 1 for the head: adds 0); branch-free, the width is unpredictable.
    uint64_t rank = e->half[sel].start + ((v * e->half[sel].width) >> 32), eff = rank;
    if (drift) {
        // The row that held base rank r0 at row 0 holds rank r0 + shift now: new rows rise to the
        // top and old favourites sink slowly.  Effects follow a row's best rank over the dataset
        // (see docs/synth.md).
        uint64_t shift = (uint64_t)(c.drift_rate * (double)row) % c.n;
        rank = rank >= shift ? rank - shift : rank + c.n - shift;
        // A row that wraps to the top during the dataset counts with its rank at the end.
        uint64_t end = rank + c.shift_max >= c.n ? rank + c.shift_max - c.n : rank + c.shift_max;
        eff = c.all_wrap || rank + c.shift_max >= c.n ? end : rank;
    }
    uint64_t id = synth_perm_apply(perm, rank);
    uint32_t bk = rank_bucket(eff);
    *logit += c.eff[bk] * normtab[bp_mix64(id ^ c.key) >> (64 - NORM_BITS)];
    *sp = (uint32_t)id;
    *pf = c.fac[bk];
}

// A sampled table over the n rows of a block: per two rows, two draws pick the bins and one the
// ranks inside them.  `drift` is a constant at each call, so each variant compiles without it.
static inline __attribute__((always_inline)) void table_pass(const synth_table *t, const float *normtab,
                                                             uint64_t s[4], uint64_t row0, uint32_t n,
                                                             uint32_t F, float *restrict logit,
                                                             uint32_t *restrict sp, float *restrict pf,
                                                             size_t pf_step, int drift) {
    const synth_perm perm = t->perm;
    const pass_consts c = {t->alias, t->nbins, t->n, t->shift_max, t->key, t->all_wrap, t->drift_rate, t->eff, t->fac};
    uint32_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t u0 = rng_next(s), u1 = rng_next(s), v = rng_next(s);
        table_row(c, &perm, normtab, u0, v >> 32, row0 + i, drift, logit + i, sp + (size_t)i * F, pf + i * pf_step);
        table_row(c, &perm, normtab, u1, v & 0xffffffffu, row0 + i + 1, drift, logit + i + 1,
                  sp + (size_t)(i + 1) * F, pf + (i + 1) * pf_step);
    }
    if (i < n) {
        uint64_t u0 = rng_next(s), v = rng_next(s);
        table_row(c, &perm, normtab, u0, v >> 32, row0 + i, drift, logit + i, sp + (size_t)i * F, pf + i * pf_step);
    }
}

static void gen_block(const synth_model *m, uint64_t s[4], uint64_t row0, uint32_t n, synth_rows *out,
                      float *restrict logit, float *pair_fac, int finish) {
    const uint32_t F = m->F, Nd = m->Nd, Q = 1u << DENSE_QBITS;
    for (uint32_t i = 0; i < n; i++) logit[i] = 0;
    const float *restrict normtab = m->normtab;
    float sink; // where the rank factors of tables in no interaction go
    for (uint32_t f = 0; f < F; f++) {
        const synth_table *t = &m->tab[f];
        uint32_t *restrict sp = out->sparse + f;
        float *pf = t->pair_slot >= 0 ? pair_fac + (size_t)t->pair_slot * GEN_SUB : &sink;
        size_t pf_step = t->pair_slot >= 0;
        if (t->kind == T_SAMPLED) {
            if (t->drift_rate > 0) table_pass(t, normtab, s, row0, n, F, logit, sp, pf, pf_step, 1);
            else table_pass(t, normtab, s, row0, n, F, logit, sp, pf, pf_step, 0);
        } else {
            for (uint32_t i = 0; i < n; i++) {
                uint64_t hour = (row0 + i) * (AVAZU_DAYS * 24) / m->rows; // rows cover 10 days in order
                uint64_t id = t->kind == T_HOUR ? hour % 24 : (1 + hour / 24) % 7; // day 0 is a Tuesday
                logit[i] += t->eff[0] * normtab[bp_mix64(id ^ t->key) >> (64 - NORM_BITS)];
                sp[(size_t)i * F] = (uint32_t)id;
                pf[i * pf_step] = t->fac[0];
            }
        }
    }
    for (int p = 0; p < m->n_pairs; p++) {
        const uint32_t a = m->pair[p][0], b = m->pair[p][1];
        const float *fa = pair_fac + (size_t)m->tab[a].pair_slot * GEN_SUB;
        const float *fb = pair_fac + (size_t)m->tab[b].pair_slot * GEN_SUB;
        const uint64_t ka = m->pair_key[p][0], kb = m->pair_key[p][1];
        // Each side's latent vector is the 4 signed 16-bit words of a hash of its id (uniform,
        // variance 2^30/3 each); the dot product of two has variance 4 (2^30/3)^2, so scaling
        // it by 3/2^30 gives variance 4, and the 0.5 in front makes it 1.
        const float scale = m->pair_sigma * 0.5f * (3.0f / 1073741824.0f);
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t *sp = out->sparse + (size_t)i * F;
            uint64_t ha = bp_mix64(sp[a] ^ ka), hb = bp_mix64(sp[b] ^ kb);
            int64_t dot = 0;
            for (int d = 0; d < SYNTH_LAT; d++) dot += (int64_t)(int16_t)(ha >> (16 * d)) * (int16_t)(hb >> (16 * d));
            logit[i] += scale * fa[i] * fb[i] * (float)dot;
        }
    }
    for (uint32_t j = 0; j < Nd; j++) {
        const float *q = m->dense_q + (size_t)j * (Q + 1);
        const float w = m->dense_w[j], mean = m->dense_mean[j];
        const uint32_t miss_thr = m->dense_miss[j];
        uint32_t *dr = out->dense_raw + j;
        float *dv = out->dense + j;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t x = rng_next(s);
            uint32_t k = (uint32_t)(x >> (64 - DENSE_QBITS));
            float frac = (float)((x >> 32) & ((1u << (32 - DENSE_QBITS)) - 1)) * (1.0f / (1u << (32 - DENSE_QBITS)));
            uint32_t c = (uint32_t)(q[k] + frac * (q[k + 1] - q[k]));
            float l = c < LOG1P_TAB ? m->log1p_tab[c] : (float)log1p((double)c);
            // An empty field, applied by masks (as a branch it would be mispredicted often).
            uint32_t miss = 0u - (uint32_t)((uint32_t)x < miss_thr), lb;
            dr[(size_t)i * Nd] = c | miss; // SYNTH_DENSE_MISSING is all ones
            memcpy(&lb, &l, sizeof lb);
            lb &= ~miss;
            memcpy(&l, &lb, sizeof l);
            dv[(size_t)i * Nd] = l;
            logit[i] += w * (l - mean);
        }
    }
    if (finish) {
        for (uint32_t i = 0; i < n; i++) {
            float p = (float)(1.0 / (1.0 + exp(-(m->bias + (double)logit[i]))));
            out->prob[i] = p;
            out->label[i] = (float)(rng_next(s) >> 40) * 0x1.0p-24f < p;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The same generator with AVX-512, eight rows at a time; it writes the same bytes as gen_block
// (tests compare the two).  The stream is drawn ahead of each pass in the same order into small
// buffers, every step keeps the scalar code's integer arithmetic and float operations in the
// same order (no fused multiply-add: ISO C mode compiles without contraction), and results go
// to per-column buffers that are transposed into the row-major output at the end of a block.
// Tables that do not fit its arithmetic (more than 2^26 rows, drift, the avazu time tables) run
// the scalar pass into the same buffers.
#if SYNTH_HAVE_AVX512

#define AVX512_FN __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"), noinline))
#define AVX512_INL __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"), always_inline)) static inline
#define SIMD_MAX_CARD ((uint64_t)1 << 26) // (a x + b) < 2^52: exact in a double for the reduction
#define SIMD_LUT_MAX 32768 // tables up to this many rows get per-rank tables (8 bytes a row, 12 in a pair)

// Scratch of one block, carved from the caller's pair_fac buffer (see synth_rows).
typedef struct {
    float pair_fac[2 * SYNTH_MAX_PAIRS][GEN_SUB];
    float logit[GEN_SUB];
    uint64_t draw[GEN_SUB];                     // bin draws, or one draw per row
    uint32_t vdraw[GEN_SUB];                    // in-bin draws (32 bits)
    uint32_t sparse[BP_DS_MAX_SPARSE][GEN_SUB]; // (F, n) ids, column-major
    uint32_t dense_raw[BP_DS_MAX_DENSE][GEN_SUB]; // (Nd, n) counts
    float dense[BP_DS_MAX_DENSE][GEN_SUB];     // (Nd, n) log1p values; transposed as uint32
} simd_scratch;
_Static_assert(sizeof(simd_scratch) <= 2 * SYNTH_MAX_PAIRS * SYNTH_CHUNK_ROWS * sizeof(float),
               "the generator's scratch must fit in synth_rows.pair_fac");

AVX512_INL __m512i mix64_x8(__m512i x) {
    x = _mm512_add_epi64(x, _mm512_set1_epi64((long long)0x9e3779b97f4a7c15ull));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), _mm512_set1_epi64((long long)0xbf58476d1ce4e5b9ull));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), _mm512_set1_epi64((long long)0x94d049bb133111ebull));
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
}

// The alias draw of 8 rows at once: the bin of u's high half ((u >> 32) nbins) >> 32, its own or
// alias half by u's low half against the threshold, and the rank start + (v width) >> 32 within
// it (synth_alias_sample's arithmetic, lane by lane).
#define AVX512_INLINE __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"), always_inline)) static inline
AVX512_INLINE __m256i alias_rank_avx512(const int *alias, __m512i nbins, __m512i u, const uint32_t *V) {
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    __m256i bin = _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(u, 32), nbins), 32));
    __m256i at = _mm256_add_epi32(_mm256_slli_epi32(bin, 2), bin);
    __m256i thr = _mm256_i32gather_epi32(alias, at, 4);
    __mmask8 sel = _mm256_cmpge_epu32_mask(_mm512_cvtepi64_epi32(u), thr);
    at = _mm256_mask_add_epi32(_mm256_add_epi32(at, one), sel, _mm256_add_epi32(at, one), two);
    __m512i sw = _mm512_i32gather_epi64(at, alias, 4); // (start, width) of the chosen half
    __m512i v = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)V));
    __m512i off = _mm512_srli_epi64(_mm512_mul_epu32(v, _mm512_srli_epi64(sw, 32)), 32);
    return _mm256_add_epi32(_mm512_cvtepi64_epi32(sw), _mm512_cvtepi64_epi32(off));
}

// table_pass for a sampled table without drift and with card <= SIMD_MAX_CARD, over n8 rows (a
// multiple of 8; draws past n are zero and their results unused).  The draws are in draw/vdraw.
static AVX512_FN void table_pass_avx512(const synth_table *t, const float *normtab, const uint64_t *U,
                                        const uint32_t *V, uint32_t n8, float *logit, uint32_t *col,
                                        float *pf) {
    const synth_perm *p = &t->perm;
    const int *alias = (const int *)t->alias; // (nbins, 5) uint32: thr, then start, width of each half
    const __m512i nbins = _mm512_set1_epi64((long long)t->nbins);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i pk = _mm256_set1_epi32((int)p->k), pm1 = _mm256_set1_epi32((int)p->m1);
    const __m256i pm2 = _mm256_set1_epi32((int)p->m2), pmask = _mm256_set1_epi32((int)p->mask);
    const __m256i pfull = _mm256_set1_epi32((int)p->full);
    const __m128i ph = _mm_cvtsi32_si128((int)p->h);
    const __m512i pa = _mm512_set1_epi64((long long)p->a), pb = _mm512_set1_epi64((long long)p->b);
    const __m512i pn = _mm512_set1_epi64((long long)p->n), key = _mm512_set1_epi64((long long)t->key);
    const __m512d pnd = _mm512_set1_pd((double)p->n), pinv = _mm512_set1_pd(1.0 / (double)p->n);
    const __m256i bias_bk = _mm256_set1_epi32(127 << 3);
    for (uint32_t i = 0; i < n8; i += 8) {
        __m512i u = _mm512_loadu_si512(U + i);
        __m256i rank = alias_rank_avx512(alias, nbins, u, V + i);
        // synth_perm_apply: the block mix keeps only the low 16 bits, so 32-bit products agree.
        __m256i y = _mm256_and_si256(_mm256_mullo_epi32(_mm256_xor_si256(rank, pk), pm1), pmask);
        y = _mm256_xor_si256(y, _mm256_srl_epi32(y, ph));
        y = _mm256_and_si256(_mm256_mullo_epi32(y, pm2), pmask);
        y = _mm256_xor_si256(y, _mm256_srl_epi32(y, ph));
        __mmask8 in_full = _mm256_cmplt_epu32_mask(rank, pfull);
        __m256i xb = _mm256_mask_mov_epi32(rank, in_full, _mm256_or_si256(_mm256_andnot_si256(pmask, rank), y));
        __m512i x = _mm512_add_epi64(_mm512_mullo_epi64(_mm512_cvtepu32_epi64(xb), pa), pb); // < 2^52
        // x mod n: the quotient from doubles is off by at most one, fixed in integers.
        __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(_mm512_cvtepu64_pd(x), pinv), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        __m512i id = _mm512_sub_epi64(x, _mm512_mullo_epi64(_mm512_cvttpd_epi64(q), pn));
        id = _mm512_mask_add_epi64(id, _mm512_cmplt_epi64_mask(id, _mm512_setzero_si512()), id, pn);
        id = _mm512_mask_sub_epi64(id, _mm512_cmpge_epi64_mask(id, pn), id, pn);
        (void)pnd;
        // rank_bucket: the float (rank + 1) (exact rounding as the scalar conversion).
        __m256i bk = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_add_epi32(rank, one))), 20), bias_bk);
        __m512i h = _mm512_srli_epi64(mix64_x8(_mm512_xor_si512(id, key)), 64 - NORM_BITS);
        __m256 z = _mm512_i64gather_ps(h, normtab, 4);
        __m256 eff;
        if (pf) { // eff and fac side by side: one 64-bit load
            __m512i ef = _mm512_i32gather_epi64(bk, t->eff_fac, 8);
            eff = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(ef));
            _mm256_storeu_ps(pf + i, _mm256_castsi256_ps(_mm512_cvtepi64_epi32(_mm512_srli_epi64(ef, 32))));
        } else {
            eff = _mm256_i32gather_ps(t->eff, bk, 4);
        }
        _mm256_storeu_ps(logit + i, _mm256_add_ps(_mm256_loadu_ps(logit + i), _mm256_mul_ps(eff, z)));
        _mm256_storeu_si256((__m256i *)(col + i), _mm512_cvtepi64_epi32(id));
    }
}

// The dense features over n8 rows: one draw per row in X (see gen_block).
static AVX512_FN void dense_pass_avx512(const synth_model *m, uint32_t j, const uint64_t *X, uint32_t n8,
                                        float *logit, uint32_t *raw, float *val) {
    const uint32_t Q = 1u << DENSE_QBITS;
    const float *q = m->dense_q + (size_t)j * (Q + 1);
    const __m256 w = _mm256_set1_ps(m->dense_w[j]), mean = _mm256_set1_ps(m->dense_mean[j]);
    const __m256i miss_thr = _mm256_set1_epi32((int)m->dense_miss[j]);
    const __m256i tab_n = _mm256_set1_epi32(LOG1P_TAB), frac_mask = _mm256_set1_epi32((1 << (32 - DENSE_QBITS)) - 1);
    const __m256 frac_scale = _mm256_set1_ps(1.0f / (1u << (32 - DENSE_QBITS)));
    for (uint32_t i = 0; i < n8; i += 8) {
        __m512i x = _mm512_loadu_si512(X + i);
        __m256i k = _mm512_cvtepi64_epi32(_mm512_srli_epi64(x, 64 - DENSE_QBITS));
        __m256i hi = _mm512_cvtepi64_epi32(_mm512_srli_epi64(x, 32));
        __m256 frac = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(hi, frac_mask)), frac_scale);
        __m512i qq = _mm512_i32gather_epi64(k, q, 4); // q[k] and q[k + 1] in one 64-bit load
        __m256 q0 = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(qq));
        __m256 q1 = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(_mm512_srli_epi64(qq, 32)));
        // Quantiles are in [0, 2e9], so the signed truncation is the scalar (uint32_t) cast.
        __m256i c = _mm256_cvttps_epi32(_mm256_add_ps(q0, _mm256_mul_ps(frac, _mm256_sub_ps(q1, q0))));
        __mmask8 small = _mm256_cmplt_epu32_mask(c, tab_n);
        __m256 l = _mm256_mmask_i32gather_ps(_mm256_setzero_ps(), small, c, m->log1p_tab, 4);
        if (small != 0xff) { // counts past the table (a few % of one feature's)
            float lv[8];
            uint32_t cv[8];
            _mm256_storeu_ps(lv, l);
            _mm256_storeu_si256((__m256i *)cv, c);
            for (int e = 0; e < 8; e++)
                if (!(small >> e & 1)) lv[e] = (float)log1p((double)cv[e]);
            l = _mm256_loadu_ps(lv);
        }
        __mmask8 miss = _mm256_cmplt_epu32_mask(_mm512_cvtepi64_epi32(x), miss_thr);
        _mm256_storeu_si256((__m256i *)(raw + i), _mm256_mask_mov_epi32(c, miss, _mm256_set1_epi32(-1)));
        l = _mm256_mask_mov_ps(l, miss, _mm256_setzero_ps());
        _mm256_storeu_ps(val + i, l);
        _mm256_storeu_ps(logit + i, _mm256_add_ps(_mm256_loadu_ps(logit + i), _mm256_mul_ps(w, _mm256_sub_ps(l, mean))));
    }
}

// One interaction pair over n8 rows (ids of both tables in columns a and b).
static AVX512_FN void pair_pass_avx512(const uint32_t *ida, const uint32_t *idb, uint64_t ka, uint64_t kb,
                                       const float *fa, const float *fb, float scale, uint32_t n8, float *logit) {
    const __m512i vka = _mm512_set1_epi64((long long)ka), vkb = _mm512_set1_epi64((long long)kb);
    const __m512i int_min = _mm512_set1_epi64((long long)0xffffffff80000000ull);
    const __m512i two32 = _mm512_set1_epi64((long long)1 << 32);
    const __m256 sc = _mm256_set1_ps(scale);
    for (uint32_t i = 0; i < n8; i += 8) {
        __m512i ha = mix64_x8(_mm512_xor_si512(_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(ida + i))), vka));
        __m512i hb = mix64_x8(_mm512_xor_si512(_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(idb + i))), vkb));
        // Words 0,1 and 2,3 of each lane summed in pairs; a pair sum of 2^31 (all four words
        // -32768) wraps to INT32_MIN, the only way that value arises, and is put back.
        __m512i pr = _mm512_madd_epi16(ha, hb);
        __m512i lo = _mm512_srai_epi64(_mm512_slli_epi64(pr, 32), 32), hi = _mm512_srai_epi64(pr, 32);
        lo = _mm512_mask_add_epi64(lo, _mm512_cmpeq_epi64_mask(lo, int_min), lo, two32);
        hi = _mm512_mask_add_epi64(hi, _mm512_cmpeq_epi64_mask(hi, int_min), hi, two32);
        __m256 dot = _mm512_cvtepi64_ps(_mm512_add_epi64(lo, hi));
        __m256 term = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(sc, _mm256_loadu_ps(fa + i)), _mm256_loadu_ps(fb + i)), dot);
        _mm256_storeu_ps(logit + i, _mm256_add_ps(_mm256_loadu_ps(logit + i), term));
    }
}

// out (n, ncol) row-major from cols (ncol, GEN_SUB) column-major: 8x8 blocks transposed in
// registers, the columns and rows past the last full block one by one.
static AVX512_FN void transpose_avx512(const uint32_t (*cols)[GEN_SUB], uint32_t ncol, uint32_t n, uint32_t *out) {
    const uint32_t n8 = n & ~7u, c8 = ncol & ~7u;
    for (uint32_t i = 0; i < n8; i += 8) {
        for (uint32_t c = 0; c < c8; c += 8) {
            __m256i r[8], t[8], u[8];
            for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_si256((const __m256i *)(cols[c + k] + i));
            for (int k = 0; k < 8; k += 2) {
                t[k] = _mm256_unpacklo_epi32(r[k], r[k + 1]);
                t[k + 1] = _mm256_unpackhi_epi32(r[k], r[k + 1]);
            }
            for (int k = 0; k < 8; k += 4) {
                u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
                u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
                u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
                u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
            }
            for (int k = 0; k < 4; k++) {
                _mm256_storeu_si256((__m256i *)(out + (size_t)(i + k) * ncol + c), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
                _mm256_storeu_si256((__m256i *)(out + (size_t)(i + k + 4) * ncol + c), _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
            }
        }
        for (uint32_t k = 0; k < 8; k++)
            for (uint32_t c = c8; c < ncol; c++) out[(size_t)(i + k) * ncol + c] = cols[c][i + k];
    }
    for (uint32_t i = n8; i < n; i++)
        for (uint32_t c = 0; c < ncol; c++) out[(size_t)i * ncol + c] = cols[c][i];
}

// table_pass_avx512 for a table with a per-rank table (lut): the bin and rank as there, then
// one load gives the row effect and the id.
static AVX512_FN void table_pass_lut_avx512(const synth_table *t, const uint64_t *U, const uint32_t *V, uint32_t n8,
                                            float *logit, uint32_t *col, float *pf) {
    const int *alias = (const int *)t->alias;
    const __m512i nbins = _mm512_set1_epi64((long long)t->nbins);
    for (uint32_t i = 0; i < n8; i += 8) {
        __m512i u = _mm512_loadu_si512(U + i);
        __m256i rank = alias_rank_avx512(alias, nbins, u, V + i);
        __m512i e = _mm512_i32gather_epi64(rank, (const long long *)t->lut, 8);
        __m256 contrib = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(e));
        _mm256_storeu_ps(logit + i, _mm256_add_ps(_mm256_loadu_ps(logit + i), contrib));
        _mm256_storeu_si256((__m256i *)(col + i), _mm512_cvtepi64_epi32(_mm512_srli_epi64(e, 32)));
        if (pf) _mm256_storeu_ps(pf + i, _mm256_i32gather_ps(t->lut_fac, rank, 4));
    }
}

// table_pass_lut_avx512 for a table of up to 32 rows: its alias entries and per-rank values
// fit in pairs of registers, so permutes replace the loads.
static AVX512_FN void table_pass_tiny_avx512(const synth_table *t, const uint64_t *U, uint32_t n8, float *logit,
                                             uint32_t *col, float *pf) {
    const uint32_t *w = t->tiny;
    __m512i lo[5], hi[5];
    for (int k = 0; k < 5; k++) lo[k] = _mm512_loadu_si512(w + 32 * k), hi[k] = _mm512_loadu_si512(w + 32 * k + 16);
    const __m512i nbins = _mm512_set1_epi64((long long)t->nbins);
    for (uint32_t i = 0; i < n8; i += 8) {
        __m512i u = _mm512_loadu_si512(U + i);
        __m512i bin = _mm512_castsi256_si512(
            _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(u, 32), nbins), 32)));
        __m256i thr = _mm512_castsi512_si256(_mm512_permutex2var_epi32(lo[0], bin, hi[0]));
        __mmask16 sel = _mm256_cmpge_epu32_mask(_mm512_cvtepi64_epi32(u), thr);
        // Bins of one rank: the in-bin offset (v * 1) >> 32 is 0 and the own rank is the bin.
        __m512i rank = _mm512_mask_mov_epi32(bin, sel, _mm512_permutex2var_epi32(lo[1], bin, hi[1]));
        __m256 contrib = _mm256_castsi256_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi32(lo[2], rank, hi[2])));
        _mm256_storeu_ps(logit + i, _mm256_add_ps(_mm256_loadu_ps(logit + i), contrib));
        _mm256_storeu_si256((__m256i *)(col + i), _mm512_castsi512_si256(_mm512_permutex2var_epi32(lo[3], rank, hi[3])));
        if (pf) _mm256_storeu_si256((__m256i *)(pf + i), _mm512_castsi512_si256(_mm512_permutex2var_epi32(lo[4], rank, hi[4])));
    }
}

static int simd_table_ok(const synth_table *t) {
    return t->kind == T_SAMPLED && t->drift_rate == 0 && t->n <= SIMD_MAX_CARD;
}

// gen_block with the AVX-512 passes; same arguments, same output, same stream consumption.
static void gen_block_avx512(const synth_model *m, uint64_t s[4], uint64_t row0, uint32_t n, synth_rows *out,
                             float *logit_out, simd_scratch *sc, int finish) {
    const uint32_t F = m->F, Nd = m->Nd, n8 = (n + 7) & ~7u;
    float *logit = sc->logit;
    for (uint32_t i = 0; i < n8; i++) logit[i] = 0;
    float sink[GEN_SUB];
    for (uint32_t f = 0; f < F; f++) {
        const synth_table *t = &m->tab[f];
        float *pf = t->pair_slot >= 0 ? sc->pair_fac[t->pair_slot] : NULL;
        if (simd_table_ok(t)) {
            uint64_t st[4] = {s[0], s[1], s[2], s[3]}; // in registers: the draw stores may alias s
            uint32_t i = 0;
            for (; i + 1 < n; i += 2) {
                uint64_t u0 = rng_next(st), u1 = rng_next(st), v = rng_next(st);
                sc->draw[i] = u0, sc->draw[i + 1] = u1;
                sc->vdraw[i] = (uint32_t)(v >> 32), sc->vdraw[i + 1] = (uint32_t)v;
            }
            if (i < n) {
                sc->draw[i] = rng_next(st);
                sc->vdraw[i] = (uint32_t)(rng_next(st) >> 32);
                i++;
            }
            memcpy(s, st, sizeof st);
            for (; i < n8; i++) sc->draw[i] = 0, sc->vdraw[i] = 0;
            if (t->tiny) table_pass_tiny_avx512(t, sc->draw, n8, logit, sc->sparse[f], pf);
            else if (t->lut) table_pass_lut_avx512(t, sc->draw, sc->vdraw, n8, logit, sc->sparse[f], pf);
            else table_pass_avx512(t, m->normtab, sc->draw, sc->vdraw, n8, logit, sc->sparse[f], pf);
        } else if (t->kind == T_SAMPLED) {
            float *pfs = pf ? pf : sink;
            size_t step = pf != NULL;
            if (t->drift_rate > 0) table_pass(t, m->normtab, s, row0, n, 1, logit, sc->sparse[f], pfs, step, 1);
            else table_pass(t, m->normtab, s, row0, n, 1, logit, sc->sparse[f], pfs, step, 0);
        } else {
            for (uint32_t i = 0; i < n; i++) {
                uint64_t hour = (row0 + i) * (AVAZU_DAYS * 24) / m->rows;
                uint64_t id = t->kind == T_HOUR ? hour % 24 : (1 + hour / 24) % 7;
                logit[i] += t->eff[0] * m->normtab[bp_mix64(id ^ t->key) >> (64 - NORM_BITS)];
                sc->sparse[f][i] = (uint32_t)id;
                if (pf) pf[i] = t->fac[0];
            }
        }
        for (uint32_t i = n; i < n8; i++) sc->sparse[f][i] = 0;
    }
    const float pscale = m->pair_sigma * 0.5f * (3.0f / 1073741824.0f); // as in gen_block
    for (int p = 0; p < m->n_pairs; p++) {
        const uint32_t a = m->pair[p][0], b = m->pair[p][1];
        pair_pass_avx512(sc->sparse[a], sc->sparse[b], m->pair_key[p][0], m->pair_key[p][1],
                         sc->pair_fac[m->tab[a].pair_slot], sc->pair_fac[m->tab[b].pair_slot], pscale, n8, logit);
    }
    for (uint32_t j = 0; j < Nd; j++) {
        uint64_t st[4] = {s[0], s[1], s[2], s[3]};
        uint32_t i = 0;
        for (; i < n; i++) sc->draw[i] = rng_next(st);
        for (; i < n8; i++) sc->draw[i] = 0;
        memcpy(s, st, sizeof st);
        dense_pass_avx512(m, j, sc->draw, n8, logit, sc->dense_raw[j], sc->dense[j]);
    }
    // Column buffers to the row-major output.
    transpose_avx512((const uint32_t (*)[GEN_SUB])sc->sparse, F, n, out->sparse);
    transpose_avx512((const uint32_t (*)[GEN_SUB])sc->dense_raw, Nd, n, out->dense_raw);
    transpose_avx512((const uint32_t (*)[GEN_SUB])sc->dense, Nd, n, (uint32_t *)out->dense);
    memcpy(logit_out, logit, n * sizeof *logit);
    if (finish) {
        uint64_t st[4] = {s[0], s[1], s[2], s[3]};
        for (uint32_t i = 0; i < n; i++) {
            float p = (float)(1.0 / (1.0 + exp(-(m->bias + (double)logit[i]))));
            out->prob[i] = p;
            out->label[i] = (float)(rng_next(st) >> 40) * 0x1.0p-24f < p;
        }
        memcpy(s, st, sizeof st);
    }
}
#endif

// Per-rank tables of the AVX-512 path for the small tables: the same products as table_row.
static void model_luts_init(synth_model *m) {
#if SYNTH_HAVE_AVX512
    for (uint32_t f = 0; f < m->F; f++) {
        synth_table *t = &m->tab[f];
        if (!simd_table_ok(t) || t->n > SIMD_LUT_MAX) continue;
        t->lut = bp_xmalloc(t->n * sizeof *t->lut);
        t->lut_fac = t->pair_slot >= 0 ? bp_xmalloc(t->n * sizeof *t->lut_fac) : NULL;
        for (uint64_t r = 0; r < t->n; r++) {
            uint64_t id = synth_perm_apply(&t->perm, r);
            uint32_t bk = rank_bucket(r), bits;
            float contrib = t->eff[bk] * m->normtab[bp_mix64(id ^ t->key) >> (64 - NORM_BITS)];
            memcpy(&bits, &contrib, sizeof bits);
            t->lut[r] = bits | id << 32;
            if (t->lut_fac) t->lut_fac[r] = t->fac[bk];
        }
        if (t->n > 32) continue;
        uint32_t *w = t->tiny = bp_xcalloc(5 * 32, sizeof *t->tiny);
        for (uint32_t b = 0; b < t->nbins; b++) {
            BP_ASSERT(t->alias[b].half[0].width == 1 && t->alias[b].half[1].width == 1);
            w[b] = t->alias[b].thr, w[32 + b] = t->alias[b].half[1].start;
        }
        for (uint64_t r = 0; r < t->n; r++) {
            w[64 + r] = (uint32_t)t->lut[r], w[96 + r] = (uint32_t)(t->lut[r] >> 32);
            if (t->lut_fac) memcpy(&w[128 + r], &t->lut_fac[r], sizeof(float));
        }
    }
#else
    (void)m;
#endif
}

static void gen_rows(const synth_model *m, bp_rng *rng, uint64_t row0, uint32_t n, synth_rows *out, float *logit,
                     float *pair_fac, int finish) {
    BP_ASSERT(n <= SYNTH_CHUNK_ROWS);
    const uint32_t F = m->F, Nd = m->Nd;
    uint64_t s[4];
    memcpy(s, rng->s, sizeof s);
    for (uint32_t b = 0; b < n; b += GEN_SUB) {
        uint32_t k = n - b < GEN_SUB ? n - b : GEN_SUB;
        synth_rows v = {k, out->label + b, out->dense_raw + (size_t)b * Nd, out->dense + (size_t)b * Nd,
                        out->sparse + (size_t)b * F, out->prob + b, NULL};
#if SYNTH_HAVE_AVX512
        if (m->simd) {
            gen_block_avx512(m, s, row0 + b, k, &v, logit + b, (simd_scratch *)pair_fac, finish);
            continue;
        }
#endif
        gen_block(m, s, row0 + b, k, &v, logit + b, pair_fac, finish);
    }
    memcpy(rng->s, s, sizeof s);
}

// Solves for the bias that gives the target base rate on a pilot sample spread over the
// dataset (its own random streams, so the result does not depend on threads).
static void model_solve_bias(synth_model *m) {
    // 1024 pieces of 32 rows at evenly spaced positions, so that row-position effects (the hours
    // and days of the avazu preset, drift) are represented evenly.
    enum { PILOT_PIECES = 1024 };
    const uint32_t n = 32;
    synth_rows r;
    synth_rows_alloc(&r, m->Nd, m->F);
    float *lg = bp_xmalloc((size_t)PILOT_PIECES * n * sizeof *lg); // (PILOT_PIECES * n)
    for (uint32_t c = 0; c < PILOT_PIECES; c++) {
        bp_rng rng;
        bp_rng_seed(&rng, m->o.seed, ~(uint64_t)c); // streams far from the data's chunk indices
        uint64_t row0 = m->rows * c / PILOT_PIECES;
        gen_rows(m, &rng, row0, n, &r, lg + (size_t)c * n, r.pair_fac, 0);
    }
    // Newton's method on mean(sigmoid(b + logit)) = ctr: the mean grows with b, its slope is
    // mean(p (1 - p)); steps are capped so a poor start cannot overshoot far.
    const uint32_t N = PILOT_PIECES * n;
    double b = log(m->o.ctr / (1 - m->o.ctr));
    for (int it = 0; it < 100; it++) {
        double mean = 0, slope = 0;
        for (uint32_t i = 0; i < N; i++) {
            double p = 1 / (1 + exp(-(b + lg[i])));
            mean += p, slope += p * (1 - p);
        }
        double step = (mean / N - m->o.ctr) / (slope / N + 1e-12);
        step = step > 4 ? 4 : step < -4 ? -4 : step;
        b -= step;
        if (fabs(step) < 1e-10) break;
    }
    m->bias = b;
    free(lg);
    synth_rows_free(&r);
}

int synth_model_init(synth_model **out, const synth_opts *o) {
    synth_model *m = bp_xcalloc(1, sizeof *m);
    m->o = *o;
    m->o.out = NULL;
    m->F = o->n_tables, m->Nd = o->n_dense, m->rows = o->rows;
    m->days = o->preset == SYNTH_PRESET_AVAZU ? AVAZU_DAYS : CRITEO_DAYS;
    m->simd = synth_simd_supported();
    for (uint32_t i = 0; i < (1u << NORM_BITS); i++)
        m->normtab[i] = (float)norm_quantile((i + 0.5) / (1u << NORM_BITS));
    m->log1p_tab = bp_xmalloc(LOG1P_TAB * sizeof *m->log1p_tab);
    for (uint32_t c = 0; c < LOG1P_TAB; c++) m->log1p_tab[c] = (float)log1p((double)c);
    bp_rng rng;
    bp_rng_seed(&rng, o->seed, 0x5eedull << 40);
    model_tables_init(m, &rng);
    model_dense_init(m, &rng);
    model_pairs_init(m, &rng);
    model_luts_init(m);
    model_solve_bias(m);
    *out = m;
    return 0;
}

void synth_model_free(synth_model *m) {
    if (!m) return;
    for (uint32_t f = 0; f < m->F && m->tab; f++) {
        free(m->tab[f].alias);
        free(m->tab[f].bin_mass);
        free(m->tab[f].bin_start);
        free(m->tab[f].lut);
        free(m->tab[f].lut_fac);
        free(m->tab[f].tiny);
    }
    free(m->tab);
    free(m->dense_q), free(m->dense_miss), free(m->dense_w), free(m->dense_mean), free(m->log1p_tab);
    free(m);
}

int synth_simd_supported(void) {
#if SYNTH_HAVE_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}
void synth_model_set_simd(synth_model *m, int on) { m->simd = on && synth_simd_supported(); }
int synth_model_simd(const synth_model *m) { return m->simd; }
uint32_t synth_model_n_dense(const synth_model *m) { return m->Nd; }
uint32_t synth_model_n_tables(const synth_model *m) { return m->F; }
const uint64_t *synth_model_card(const synth_model *m) { return m->o.card; }
double synth_model_skew(const synth_model *m) { return m->skew; }
double synth_model_bias(const synth_model *m) { return m->bias; }
double synth_model_expected_top_share(const synth_model *m, double frac) { return top_share(m, frac); }
const synth_perm *synth_model_perm(const synth_model *m, uint32_t f) { return &m->tab[f].perm; }
int synth_model_pairs(const synth_model *m, uint32_t pairs[][2]) {
    for (int p = 0; p < m->n_pairs; p++) pairs[p][0] = m->pair[p][0], pairs[p][1] = m->pair[p][1];
    return m->n_pairs;
}

void synth_rows_alloc(synth_rows *r, uint32_t Nd, uint32_t F) {
    size_t n = SYNTH_CHUNK_ROWS;
    r->n = 0;
    r->label = bp_xmalloc(n);
    r->dense_raw = bp_xmalloc(n * (Nd ? Nd : 1) * sizeof *r->dense_raw);
    r->dense = bp_xmalloc(n * (Nd ? Nd : 1) * sizeof *r->dense);
    r->sparse = bp_xmalloc(n * F * sizeof *r->sparse);
    r->prob = bp_xmalloc(n * sizeof *r->prob);
    r->pair_fac = bp_xmalloc(2 * SYNTH_MAX_PAIRS * n * sizeof *r->pair_fac);
}

void synth_rows_free(synth_rows *r) {
    free(r->label), free(r->dense_raw), free(r->dense), free(r->sparse), free(r->prob), free(r->pair_fac);
    memset(r, 0, sizeof *r);
}

void synth_model_gen_chunk(const synth_model *m, uint64_t chunk, synth_rows *r) {
    uint64_t row0 = chunk * SYNTH_CHUNK_ROWS;
    BP_ASSERT(row0 < m->rows);
    uint64_t left = m->rows - row0;
    r->n = left < SYNTH_CHUNK_ROWS ? (uint32_t)left : SYNTH_CHUNK_ROWS;
    bp_rng rng;
    bp_rng_seed(&rng, m->o.seed, chunk);
    gen_rows(m, &rng, row0, r->n, r, r->prob, r->pair_fac, 1); // prob doubles as the logit scratch
}
