// metric: evaluation metrics for click prediction: exact AUC, logloss, accuracy, and an
// accumulator that collects (score, label) pairs over the batches of an evaluation.
//
// Scores are either logits z (the model's output before the sigmoid) or probabilities p.
//   - AUC: the probability that a random positive scores above a random negative, ties counted
//     1/2 (the Mann-Whitney U statistic / (P * N); the same as ranking with average ranks for
//     ties).  Exact over the whole set: sort by score (O(n) radix sort of the float bits), count
//     in integers, one division at the end.  AUC depends only on the order of the scores, so it
//     is computed on the stored scores themselves; keeping logits avoids the ties that float
//     sigmoid creates by saturating (z = 20 and z = 25 both give p = 1.0f).
//     Undefined when the set holds one class only (or nothing): auc = NaN, auc_defined = 0.
//     -0.0 and +0.0 are one score; a NaN score makes the AUC NaN (auc_defined = 0).
//   - logloss: mean binary cross-entropy in double.  From probabilities, p is clamped to
//     [1e-7, 1 - 1e-7]; from logits, the stable form softplus(x) = max(x, 0) + log1p(exp(-|x|))
//     of x = z for a 0 and x = -z for a 1 (equal to max(z, 0) - z * y + log1p(exp(-|z|)) for a
//     finite z, and right at z = +-inf: 0 where the label agrees, inf where it does not).
//   - accuracy: predicted click iff p > 0.5 (z > 0); p = 0.5 counts as no click, as
//     round-half-to-even in the DLRM reference does.  NaN when a score is NaN.
#ifndef BP_METRIC_H
#define BP_METRIC_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t n;        // samples
    uint64_t pos;      // samples with label 1
    double auc;        // NaN when undefined
    int auc_defined;   // 0 when one class only, no samples, or a NaN score
    double logloss;    // NaN when n = 0
    double accuracy;   // NaN when n = 0 or a score is NaN
    uint64_t n_nan;    // NaN scores (a model that is not finite)
} metric_result;

// One-shot functions over arrays.  labels are 0 or 1.
double metric_auc(const float *scores, const uint8_t *labels, size_t n, int *defined /*may be NULL*/);
double metric_logloss_prob(const float *p, const uint8_t *labels, size_t n);
double metric_logloss_logit(const float *z, const uint8_t *labels, size_t n);
double metric_accuracy_prob(const float *p, const uint8_t *labels, size_t n);
double metric_accuracy_logit(const float *z, const uint8_t *labels, size_t n);

// Streaming accumulator: add each evaluation batch, compute once at the end.
typedef struct {
    int is_logit;    // scores are logits (1) or probabilities (0)
    size_t n, cap;
    float *scores;   // (cap)
    uint8_t *labels; // (cap)
} metric_acc;

// cap_hint: expected number of samples (the evaluation set size), allocated up front; adding
// beyond it grows the buffers.
void metric_acc_init(metric_acc *a, int is_logit, size_t cap_hint);
void metric_acc_free(metric_acc *a); // safe on a zeroed or freed one
void metric_acc_reset(metric_acc *a);
// labels as the dataset stores them (uint8 0/1) or as float targets (0.0/1.0): use one.
void metric_acc_add(metric_acc *a, const float *scores /*(n)*/, const uint8_t *labels /*(n)*/, size_t n);
void metric_acc_add_f(metric_acc *a, const float *scores /*(n)*/, const float *labels /*(n)*/, size_t n);
// Appends src's pairs to dst (gathering trainers' partial evaluation sets); same is_logit.
void metric_acc_merge(metric_acc *dst, const metric_acc *src);
// All metrics over everything added.  Allocates its sort workspace (16 bytes per sample) for the
// duration of the call.
void metric_acc_compute(const metric_acc *a, metric_result *out);

#endif
