#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "metric.h"
#include "test.h"

// O(n^2) Mann-Whitney: 2U over all (positive, negative) pairs, ties 1.
static double auc_brute(const float *s, const uint8_t *y, int n) {
    uint64_t u2 = 0, P = 0, N = 0;
    for (int i = 0; i < n; i++) {
        if (y[i]) P++;
        else N++;
        if (!y[i]) continue;
        for (int j = 0; j < n; j++)
            if (!y[j]) u2 += s[i] > s[j] ? 2 : s[i] == s[j] ? 1 : 0;
    }
    return (double)u2 / (2.0 * (double)P * (double)N);
}

TEST(metric_auc_matches_brute_force_with_ties) {
    bp_rng r;
    bp_rng_seed(&r, 17, 0);
    enum { nmax = 3000 };
    static float s[nmax];
    static uint8_t y[nmax];
    for (int trial = 0; trial < 12; trial++) {
        int n = trial < 4 ? 2 + trial * 7 : nmax - trial * 100;
        int levels = trial % 3 == 0 ? 10 : trial % 3 == 1 ? 3 : 0; // 0: continuous
        for (int i = 0; i < n; i++) {
            double x = bp_rng_normal(&r);
            y[i] = bp_rng_uniform(&r) < 1 / (1 + exp(-x)); // informative scores
            double sc = x + 0.5 * bp_rng_normal(&r);
            s[i] = levels ? (float)floor(sc * levels / 4) : (float)(sc * 1e3); // negatives too
        }
        y[0] = 1, y[1] = 0; // both classes
        int def;
        double a = metric_auc(s, y, (size_t)n, &def);
        ASSERT_TRUE(def);
        ASSERT_MSG(a == auc_brute(s, y, n), "trial %d n %d: %.17g vs %.17g", trial, n, a, auc_brute(s, y, n));
        if (n > 1000) ASSERT_TRUE(a > 0.6 && a < 0.95);
    }
}

// Independent method at larger n: average ranks via qsort, AUC = (R+ - P(P+1)/2) / (P N).
typedef struct {
    float s;
    uint8_t y;
} sy;
static int sy_cmp(const void *a, const void *b) {
    float x = ((const sy *)a)->s, z = ((const sy *)b)->s;
    return x < z ? -1 : x > z;
}

TEST(metric_auc_matches_average_ranks_large) {
    enum { n = 200000 };
    static float s[n];
    static uint8_t y[n];
    static sy v[n];
    bp_rng r;
    bp_rng_seed(&r, 2, 0);
    for (int i = 0; i < n; i++) {
        double x = bp_rng_normal(&r) * 3;
        y[i] = bp_rng_uniform(&r) < 1 / (1 + exp(-x));
        s[i] = (float)(x + bp_rng_normal(&r));
        if (i % 5 == 0) s[i] = (float)(int)s[i]; // plenty of ties, around zero too
        v[i] = (sy){s[i], y[i]};
    }
    qsort(v, n, sizeof *v, sy_cmp);
    double rpos = 0, P = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && v[j].s == v[i].s) j++;
        double avg = (i + 1 + j) / 2.0; // ranks i+1..j
        for (int k = i; k < j; k++)
            if (v[k].y) rpos += avg, P++;
        i = j;
    }
    double expect = (rpos - P * (P + 1) / 2) / (P * (n - P));
    ASSERT_NEAR(metric_auc(s, y, n, NULL), expect, 1e-12);
}

TEST(metric_auc_edge_cases) {
    float s[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    uint8_t all1[6] = {1, 1, 1, 1, 1, 1}, all0[6] = {0}, sep[6] = {0, 0, 0, 1, 1, 1}, rev[6] = {1, 1, 1, 0, 0, 0};
    int def = 1;
    ASSERT_TRUE(isnan(metric_auc(s, all1, 6, &def)) && def == 0);
    def = 1;
    ASSERT_TRUE(isnan(metric_auc(s, all0, 6, &def)) && def == 0);
    def = 1;
    ASSERT_TRUE(isnan(metric_auc(s, sep, 0, &def)) && def == 0);
    ASSERT_TRUE(metric_auc(s, sep, 6, &def) == 1.0 && def == 1);
    ASSERT_TRUE(metric_auc(s, rev, 6, NULL) == 0.0);
    float same[6] = {0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f};
    ASSERT_TRUE(metric_auc(same, sep, 6, NULL) == 0.5);
    float zeros[2] = {-0.0f, 0.0f};
    uint8_t pn[2] = {1, 0};
    ASSERT_TRUE(metric_auc(zeros, pn, 2, NULL) == 0.5); // -0 and +0 tie
    float inf[2] = {INFINITY, -INFINITY};
    ASSERT_TRUE(metric_auc(inf, pn, 2, NULL) == 1.0);
    float nan[2] = {NAN, 1.0f};
    def = 1;
    ASSERT_TRUE(isnan(metric_auc(nan, pn, 2, &def)) && def == 0);
}

TEST(metric_logloss_and_accuracy) {
    bp_rng r;
    bp_rng_seed(&r, 9, 0);
    enum { n = 1000 };
    static float z[n], p[n];
    static uint8_t y[n];
    double direct = 0;
    for (int i = 0; i < n; i++) {
        z[i] = (float)(bp_rng_normal(&r) * 4);
        p[i] = (float)(1 / (1 + exp(-(double)z[i])));
        y[i] = bp_rng_below(&r, 2);
        double q = p[i];
        direct -= y[i] ? log(q) : log(1 - q);
    }
    direct /= n;
    ASSERT_NEAR(metric_logloss_prob(p, y, n), direct, 1e-12);
    ASSERT_NEAR(metric_logloss_logit(z, y, n), direct, 1e-6);
    // clamping and stability at the extremes
    float pe[4] = {0.0f, 1.0f, 0.0f, 1.0f};
    uint8_t ye[4] = {1, 0, 0, 1};
    ASSERT_NEAR(metric_logloss_prob(pe, ye, 4), (-log(1e-7) * 2 - log1p(-1e-7) * 2) / 4, 1e-9);
    float ze[2] = {100.0f, -100.0f};
    uint8_t y0[2] = {0, 0};
    ASSERT_NEAR(metric_logloss_logit(ze, y0, 2), 50.0, 1e-9); // (100 + ~0) / 2, no overflow
    float zbig[1] = {1e30f};
    uint8_t yb[1] = {1};
    ASSERT_NEAR(metric_logloss_logit(zbig, yb, 1), 0.0, 1e-12);
    ASSERT_TRUE(isnan(metric_logloss_prob(p, y, 0)));
    // accuracy: p > 0.5 (z > 0) is a click; exactly 0.5 is not
    float pa[4] = {0.5f, 0.51f, 0.2f, 0.9f}, za[4] = {0.0f, 0.1f, -2.0f, 3.0f};
    uint8_t ya[4] = {0, 1, 1, 0};
    ASSERT_NEAR(metric_accuracy_prob(pa, ya, 4), 0.5, 0);
    ASSERT_NEAR(metric_accuracy_logit(za, ya, 4), 0.5, 0);
    uint8_t yb2[4] = {1, 1, 0, 1};
    ASSERT_NEAR(metric_accuracy_prob(pa, yb2, 4), 0.75, 0);
}

// Scores of a model that overflowed: an infinite logit costs 0 where its label agrees and inf
// where it does not (the stable form's max(z, 0) - z * y made inf - inf = NaN of the first); a NaN
// score leaves accuracy undefined (it counted as "no click") and is counted in n_nan.
TEST(metric_infinite_and_nan_scores) {
    float zi[4] = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    uint8_t agree[4] = {1, 0, 1, 0}, disagree[4] = {0, 1, 1, 0};
    ASSERT_TRUE(metric_logloss_logit(zi, agree, 4) == 0.0);
    ASSERT_TRUE(isinf(metric_logloss_logit(zi, disagree, 4)) && metric_logloss_logit(zi, disagree, 4) > 0);
    ASSERT_NEAR(metric_accuracy_logit(zi, disagree, 4), 0.5, 0);
    // finite scores: the same bits as the textbook stable form
    bp_rng r;
    bp_rng_seed(&r, 5, 0);
    for (int i = 0; i < 1000; i++) {
        float z = (float)(bp_rng_normal(&r) * 30);
        uint8_t y = bp_rng_below(&r, 2);
        double x = z, textbook = (x > 0 ? x : 0) - (y ? x : 0) + log1p(exp(-fabs(x)));
        ASSERT_MSG(metric_logloss_logit(&z, &y, 1) == textbook, "z %.9g y %d", (double)z, y);
    }
    float zn[3] = {1.0f, NAN, -1.0f};
    uint8_t yn[3] = {1, 1, 0};
    ASSERT_TRUE(isnan(metric_accuracy_logit(zn, yn, 3)));
    ASSERT_TRUE(isnan(metric_logloss_logit(zn, yn, 3)));
    metric_acc a;
    metric_acc_init(&a, 1, 4);
    metric_acc_add(&a, zn, yn, 3);
    metric_result res;
    metric_acc_compute(&a, &res);
    ASSERT_EQ(res.n_nan, 1);
    ASSERT_TRUE(!res.auc_defined && isnan(res.accuracy));
    metric_acc_reset(&a);
    metric_acc_add(&a, zi, disagree, 4);
    metric_acc_compute(&a, &res);
    ASSERT_EQ(res.n_nan, 0);
    metric_acc_free(&a);
}

TEST(metric_acc_batches_equal_one_shot) {
    enum { n = 5000 };
    static float z[n], lf[n];
    static uint8_t y[n];
    bp_rng r;
    bp_rng_seed(&r, 10, 0);
    for (int i = 0; i < n; i++) {
        z[i] = (float)bp_rng_normal(&r);
        y[i] = bp_rng_uniform(&r) < 1 / (1 + exp(-2 * z[i]));
        lf[i] = y[i];
    }
    metric_acc a, b, c;
    metric_acc_init(&a, 1, 100); // grows past the hint
    metric_acc_init(&b, 1, n);
    metric_acc_init(&c, 1, 0);
    for (int i = 0; i < n; i += 128) metric_acc_add(&a, z + i, y + i, (size_t)BP_MIN(128, n - i));
    metric_acc_add_f(&b, z, lf, n / 2);
    metric_acc_add(&c, z + n / 2, y + n / 2, n - n / 2);
    metric_acc_merge(&b, &c);
    metric_result ra, rb;
    metric_acc_compute(&a, &ra);
    metric_acc_compute(&b, &rb);
    ASSERT_EQ(ra.n, n);
    ASSERT_TRUE(ra.auc_defined);
    ASSERT_TRUE(ra.auc == metric_auc(z, y, n, NULL));
    ASSERT_TRUE(ra.logloss == metric_logloss_logit(z, y, n));
    ASSERT_TRUE(ra.accuracy == metric_accuracy_logit(z, y, n));
    ASSERT_TRUE(memcmp(&ra, &rb, sizeof ra) == 0);
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) pos += y[i];
    ASSERT_EQ(ra.pos, pos);
    metric_acc_reset(&a);
    metric_acc_compute(&a, &ra);
    ASSERT_TRUE(ra.n == 0 && !ra.auc_defined && isnan(ra.logloss));
    metric_acc_free(&a), metric_acc_free(&b), metric_acc_free(&c);
    metric_acc_free(&c);
}
