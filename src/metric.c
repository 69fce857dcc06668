// metric: AUC, logloss, accuracy.  Definitions in metric.h.
#include "metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

// Maps a float to a uint32 whose unsigned order is the float order (-0.0 folded onto +0.0).
static inline uint32_t float_order_key(float x) {
    if (x == 0.0f) x = 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#define AUC_RADIX_BITS 11

double metric_auc(const float *scores, const uint8_t *labels, size_t n, int *defined) {
    if (defined) *defined = 0;
    uint64_t P = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(scores[i])) return NAN;
        P += labels[i] != 0;
    }
    uint64_t N = n - P;
    if (P == 0 || N == 0) return NAN;

    // Items are (order key << 1 | label); a stable LSD radix sort on bits 1..32 in three passes.
    uint64_t *a = bp_xmalloc(n * sizeof *a), *b = bp_xmalloc(n * sizeof *b); // (n) each
    enum { W = AUC_RADIX_BITS, NB = 1 << AUC_RADIX_BITS, PASSES = 3 };
    uint64_t *hist = bp_xcalloc((size_t)PASSES * NB, sizeof *hist); // 64-bit: 2^32 rows and more
    for (size_t i = 0; i < n; i++) {
        uint64_t k = float_order_key(scores[i]);
        a[i] = k << 1 | (labels[i] != 0);
        for (int p = 0; p < PASSES; p++) hist[p * NB + ((k >> (p * W)) & (NB - 1))]++;
    }
    for (int p = 0; p < PASSES; p++) {
        uint64_t *h = hist + p * NB, sum = 0;
        int shift = 1 + p * W;
        if (h[(a[0] >> shift) & (NB - 1)] == n) continue;
        for (int d = 0; d < NB; d++) {
            uint64_t c = h[d];
            h[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) b[h[(a[i] >> shift) & (NB - 1)]++] = a[i];
        uint64_t *t = a;
        a = b, b = t;
    }
    // Walk groups of equal scores from the lowest: each positive of a group beats the negatives
    // below it and ties (1/2) with the negatives of its group.  u2 = 2 * U in integers, up to
    // 2 P N: 128 bits, since P N passes 2^63 from about 2^32 rows.
    unsigned __int128 u2 = 0;
    uint64_t neg_below = 0;
    for (size_t i = 0; i < n;) {
        uint64_t key = a[i] >> 1, pg = 0, ng = 0;
        for (; i < n && a[i] >> 1 == key; i++) {
            if (a[i] & 1) pg++;
            else ng++;
        }
        u2 += (unsigned __int128)pg * (2 * neg_below + ng);
        neg_below += ng;
    }
    free(a), free(b), free(hist);
    if (defined) *defined = 1;
    return (double)u2 / (2.0 * (double)P * (double)N);
}

double metric_logloss_prob(const float *p, const uint8_t *labels, size_t n) {
    if (n == 0) return NAN;
    const double lo = 1e-7, hi = 1.0 - 1e-7;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double q = p[i] < lo ? lo : p[i] > hi ? hi : p[i];
        sum -= labels[i] ? log(q) : log1p(-q);
    }
    return sum / (double)n;
}

double metric_logloss_logit(const float *z, const uint8_t *labels, size_t n) {
    if (n == 0) return NAN;
    double sum = 0;
    for (size_t i = 0; i < n; i++) { // softplus(x) for a 0, softplus(-x) for a 1: no inf - inf at |x| = inf
        double x = labels[i] ? -(double)z[i] : z[i];
        sum += (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
    }
    return sum / (double)n;
}

static double accuracy(const float *s, const uint8_t *labels, size_t n, float threshold) {
    if (n == 0) return NAN;
    uint64_t right = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(s[i])) return NAN; // no prediction (it used to count as "no click")
        right += (s[i] > threshold) == (labels[i] != 0);
    }
    return (double)right / (double)n;
}

double metric_accuracy_prob(const float *p, const uint8_t *labels, size_t n) {
    return accuracy(p, labels, n, 0.5f);
}

double metric_accuracy_logit(const float *z, const uint8_t *labels, size_t n) {
    return accuracy(z, labels, n, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Accumulator

void metric_acc_init(metric_acc *a, int is_logit, size_t cap_hint) {
    memset(a, 0, sizeof *a);
    a->is_logit = is_logit;
    a->cap = cap_hint ? cap_hint : 1024;
    a->scores = bp_xmalloc(a->cap * sizeof *a->scores);
    a->labels = bp_xmalloc(a->cap * sizeof *a->labels);
}

void metric_acc_free(metric_acc *a) {
    free(a->scores), free(a->labels);
    memset(a, 0, sizeof *a);
}

void metric_acc_reset(metric_acc *a) { a->n = 0; }

static void acc_reserve(metric_acc *a, size_t more) {
    if (a->n + more <= a->cap) return;
    size_t cap = a->cap * 2;
    if (cap < a->n + more) cap = a->n + more;
    a->scores = bp_xrealloc(a->scores, cap * sizeof *a->scores);
    a->labels = bp_xrealloc(a->labels, cap * sizeof *a->labels);
    a->cap = cap;
}

void metric_acc_add(metric_acc *a, const float *scores, const uint8_t *labels, size_t n) {
    acc_reserve(a, n);
    memcpy(a->scores + a->n, scores, n * sizeof *scores);
    for (size_t i = 0; i < n; i++) a->labels[a->n + i] = labels[i] != 0;
    a->n += n;
}

void metric_acc_add_f(metric_acc *a, const float *scores, const float *labels, size_t n) {
    acc_reserve(a, n);
    memcpy(a->scores + a->n, scores, n * sizeof *scores);
    for (size_t i = 0; i < n; i++) a->labels[a->n + i] = labels[i] > 0.5f;
    a->n += n;
}

void metric_acc_merge(metric_acc *dst, const metric_acc *src) {
    BP_ASSERT(dst->is_logit == src->is_logit);
    metric_acc_add(dst, src->scores, src->labels, src->n);
}

void metric_acc_compute(const metric_acc *a, metric_result *out) {
    memset(out, 0, sizeof *out);
    out->n = a->n;
    for (size_t i = 0; i < a->n; i++) out->pos += a->labels[i], out->n_nan += isnan(a->scores[i]);
    out->auc = metric_auc(a->scores, a->labels, a->n, &out->auc_defined);
    if (a->is_logit) {
        out->logloss = metric_logloss_logit(a->scores, a->labels, a->n);
        out->accuracy = metric_accuracy_logit(a->scores, a->labels, a->n);
    } else {
        out->logloss = metric_logloss_prob(a->scores, a->labels, a->n);
        out->accuracy = metric_accuracy_prob(a->scores, a->labels, a->n);
    }
}
