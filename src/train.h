// train: the single-process trainer (`--mode local`), the reference for every other mode.
#ifndef BP_TRAIN_H
#define BP_TRAIN_H

#include <stdint.h>

#include "data_bin.h"
#include "emb.h"
#include "metric.h"
#include "model.h"
#include "optim.h"

typedef struct {
    model m;          // dense part, params/grads slabs
    emb_layout L;     // row layout and key space
    emb_table table;  // every embedding row, with its optimizer state
    emb_grad g;       // coalesced row gradients of the current batch
    emb_opt eopt;
    dense_opt dopt;
    float *dstate;    // (n_dstate) dense optimizer state
    size_t n_dstate;
    float *emb;       // (max_batch, F, E) gathered rows
    float *d_emb;     // (max_batch, F, E) their gradients
    float *logit;     // (max_batch)
    float *dlogit;    // (max_batch)
} trainer;

// Builds the model (parameters zero until model_init_params), the table (initialised from
// lc->seed unless alloc_only), buffers for batches up to max_batch.
int trainer_init(trainer *tr, const model_config *mc, const emb_layout_cfg *lc, const dense_opt *dopt,
                 const emb_opt *eopt, int max_batch, int alloc_only);
void trainer_free(trainer *tr); // safe on a zeroed one
// One SGD/Adagrad step on B samples; returns the mean loss of the batch (before the update).
// dense: (B, Nd)  ids: (B, F)  label: (B)
double trainer_step(trainer *tr, const float *dense, const uint32_t *ids, const uint8_t *label, int B);
// Metrics of the model over rows [r0, r1) of ds in batches of B (<= max_batch); bayes (may be
// NULL) gets the metrics of the dataset's true probabilities when it has them (else NaN).
void trainer_eval(trainer *tr, const bp_dataset *ds, uint64_t r0, uint64_t r1, int B, metric_result *res,
                  metric_result *bayes);
int trainer_save(const trainer *tr, const char *dir, const bp_dataset *ds, int64_t iter, int64_t samples,
                 uint64_t seed);
int trainer_load(trainer *tr, const char *dir, const bp_dataset *ds, int max_batch);

#endif
