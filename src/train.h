// train: the single-process trainer (`--mode local`), the reference for every other mode.
#ifndef BP_TRAIN_H
#define BP_TRAIN_H

#include <stdint.h>

#include "ckpt.h"
#include "data_bin.h"
#include "emb.h"
#include "jsonl.h"
#include "metric.h"
#include "model.h"
#include "optim.h"
#include "progress.h"

typedef struct {
    model m;          // dense part, params/grads slabs
    emb_layout L;     // row layout and key space
    emb_table table;  // every embedding row, with its optimizer state
    emb_grad g;       // coalesced row gradients of the current batch
    emb_opt eopt;     // eopt.lr, dopt.lr: the rates of a run without a schedule
    dense_opt dopt;
    lr_schedule sched; // the rate of each iteration from lr / emb_lr (trainer_init: none)
    double lr, emb_lr; // base rates, as given (trainer_init: dopt.lr, eopt.lr)
    float *dstate;    // (n_dstate) dense optimizer state
    size_t n_dstate;
    float *emb;       // (max_batch, F, E) gathered rows
    float *d_emb;     // (max_batch, F, E) their gradients
    float *logit;     // (max_batch)
    float *dlogit;    // (max_batch)
} trainer;

// Builds the model (parameters zero until model_init_params), the table (initialised from
// lc->seed unless alloc_only; not even allocated when alloc_only == TRAINER_NO_TABLE, for
// trainers whose rows live elsewhere), buffers for batches up to max_batch.
#define TRAINER_NO_TABLE 2
int trainer_init(trainer *tr, const model_config *mc, const emb_layout_cfg *lc, const dense_opt *dopt,
                 const emb_opt *eopt, int max_batch, int alloc_only);
void trainer_free(trainer *tr); // safe on a zeroed one
// The optimizers with the rates of iteration t (0-based) under tr->sched.
emb_opt trainer_eopt_at(const trainer *tr, int64_t t);
dense_opt trainer_dopt_at(const trainer *tr, int64_t t);
// One SGD/Adagrad step on B samples, iteration t (0-based: its learning rates); returns the mean
// loss of the batch (before the update).   dense: (B, Nd)  ids: (B, F)  label: (B)
double trainer_step(trainer *tr, int64_t t, const float *dense, const uint32_t *ids, const uint8_t *label, int B);
// Metrics of the model over rows [r0, r1) of ds in batches of B (<= max_batch); bayes (may be
// NULL) gets the metrics of the dataset's true probabilities when it has them (else NaN).
void trainer_eval(trainer *tr, const bp_dataset *ds, uint64_t r0, uint64_t r1, int B, metric_result *res,
                  metric_result *bayes);
// trainer_eval that also hands each batch's logits (rows [row0, row0 + n)) to sink, which returns
// 0 or an error that stops the evaluation and is returned.
typedef int (*trainer_eval_sink)(void *ctx, uint64_t row0, const float *logit, int n);
int trainer_eval_to(trainer *tr, const bp_dataset *ds, uint64_t r0, uint64_t r1, int B, metric_result *res,
                    metric_result *bayes, trainer_eval_sink sink, void *ctx);
int trainer_save(const trainer *tr, const char *dir, const bp_dataset *ds, int64_t iter, int64_t samples,
                 uint64_t seed);
// dir: a saved model, a checkpoint (ckpt-<iteration>/), or a --checkpoint-dir root (its newest
// valid checkpoint is loaded).
int trainer_load(trainer *tr, const char *dir, const bp_dataset *ds, int max_batch);
// The saved-model keys of a manifest (model, layout, optimizers, seeds, iteration...).
void trainer_manifest_fill(const trainer *tr, ckpt_manifest *m, const bp_dataset *ds, int64_t iter, int64_t samples,
                           uint64_t seed);

// Everything a training run needs once the flags and the dataset are read: the local trainer and
// every distributed mode (dist.h) start from it.
typedef struct {
    const char *data_path;
    const bp_dataset *ds;
    model_config mc;
    emb_layout_cfg lc;          // lc.card points into ds
    emb_opt eopt;
    dense_opt dopt;
    int B;                      // global batch size
    int eval_batch, print_every, threads;
    int eval_every;             // evaluate every N iterations (0: never; 0 too when the split is empty)
    int do_eval;                // the final evaluation (not with --no-eval or an empty split)
    bp_split eval_split;
    int64_t total_iters;
    uint64_t per_epoch;         // iterations per epoch
    uint64_t tr0, tr1, ev0, ev1; // train rows and evaluation rows
    uint64_t seed;
    double lr, emb_lr;          // base rates (--learning-rate, --emb-learning-rate or --learning-rate)
    lr_schedule sched;          // --lr-num-warmup-steps, --lr-decay-start-step, --lr-num-decay-steps
    int emb_lr_inherited;       // the embedding rate is --learning-rate's (no --emb-learning-rate)
    const char *save;
    const char *metrics;        // metrics file (JSON lines) or NULL
    int trainers, servers;      // distributed modes
    int mode;                   // TRAIN_MODE_*
    uint64_t cache_rows;        // bagpipe: cache capacity per trainer (rows)
    int lookahead, prefetch;    // bagpipe: window W and prefetch distance P (iterations)
    int oracle_threads;         // bagpipe: 1, or 2 (the planner's indexer, or its second part, on its own thread)
    int oracle_parts;           // bagpipe: 1, or 2 (the planner split by tables: oracle_config.groups)
    int staleness;              // async: a cached row may be read up to this many iterations old
    int cache_policy;           // async: TRAIN_CACHE_LRU or TRAIN_CACHE_LFU
    int64_t static_rows;        // static: rows asked to pin (--static-rows, its 0 resolved to 1% of the rows)
    ckpt_opts ck;               // checkpoints and --resume (ckpt_run.h); training starts at ck.start_iter
} train_setup;

// The --mode choices, in their flag order.
enum { TRAIN_MODE_LOCAL = 0, TRAIN_MODE_SYNC = 1, TRAIN_MODE_SHARDED = 2, TRAIN_MODE_STATIC = 3, TRAIN_MODE_BAGPIPE = 4,
       TRAIN_MODE_ASYNC = 5 };
// The --cache-policy choices (mode async).
enum { TRAIN_CACHE_LRU = 0, TRAIN_CACHE_LFU = 1 };

// The printed / JSON forms of evaluation results, shared with the distributed modes.
void train_print_result(const char *label, const metric_result *r, const metric_result *bayes);
// An --eval-every evaluation on stdout, "iteration 500: val AUC ...", in place of a progress line
// on show (its next update draws it again below).
void train_print_eval(bp_progress *prog, bp_split split, int64_t iter, const metric_result *r);
// "trained N iterations (M samples) in T: R samples/s", singular for one, T by bp_fmt_seconds.
void train_print_trained(int64_t iters, int B, double seconds);
// A distributed mode's replica of trainer i (no table: the rows live elsewhere), with room for
// its slice of at most bmax samples and, on trainer 0 when the run evaluates (--eval-every or at
// the end), for an evaluation batch.
int train_replica_init(trainer *tr, const train_setup *su, int bmax, int i);
// The embedding optimizer with the rate of iteration t (0-based), for ranks without a trainer
// (the servers of the baseline modes).
emb_opt train_eopt_at(const train_setup *su, int64_t t);
// ", warmup W, decay from S over N" (the parts the schedule has) or "", in buf.
const char *train_lr_note(const train_setup *su, char *buf, size_t cap);
// The "start" line of the metrics file (mf may be inactive; written before the run's first line,
// jsonl_first): the run's first iteration (and resumed_at), so that the lines after it supersede
// an interrupted run's beyond that point.
void train_json_start(jsonl_file *mf, const train_setup *su);
// Begins the "train" metrics line of the window that ends with iteration t (0-based; named
// t + 1): iter, samples, epoch, the window's mean loss, the rates of iteration t ("lr", dense, and
// the embeddings' unless --emb-learning-rate was given, then "emb_lr") and samples_per_s.  Every
// mode writes its own fields after these.
void train_json_window(jsonl *j, const train_setup *su, int64_t t, double loss, double samples_per_s);
// The progress line's update for that window: iterations done and "loss X".
void train_progress_window(bp_progress *p, int64_t t, double loss);
// 0, or the error of a loss that is not finite at iteration t (0-based; named 1-based, as the
// iterations of the metrics lines).
int train_loss_check(int64_t t, double loss);
// What a diverged run should lower ("lower --learning-rate", naming --emb-learning-rate too where
// the embeddings have a rate of their own), for the messages of train_loss_check and the others.
const char *train_lr_hint(void);
// 0, or the error of a model whose parameters (dense, embedding rows, optimizer state) are not all
// finite after `iter` iterations: the last update diverged, which no loss shows (each loss comes
// before its update).  Checked before a run's final evaluation and save.
int trainer_check_finite(const trainer *tr, int64_t iter);
// The end of a run, in trainer 0 with the whole model (every mode): before the final evaluation and
// save, trainer_check_finite, and with --no-eval the scores of the first train rows; then the
// final evaluation (--no-eval: none), printed.  0, or the error of a model that is not finite or
// scores NaN (nothing is printed or saved then).
int train_final_eval(trainer *tr, const train_setup *su, int64_t iter, metric_result *res, metric_result *bayes);
// The final evaluation's fields of the "summary" line (none with --no-eval).
void train_json_summary_result(jsonl *j, const train_setup *su, const metric_result *res, const metric_result *bayes);
void train_json_result(jsonl *j, const char *prefix, const metric_result *r);
// One "eval" line of the metrics file (mf may be NULL): the split, iteration, samples and result;
// a result with NaN scores is not written: an error naming them instead (a run with it fails).
int train_json_eval(jsonl_file *mf, bp_split split, int64_t iter, int B, const metric_result *r);
// Whether an --eval-every evaluation (an "eval" line) falls after `done` iterations, in every mode.
// After the last iteration the final evaluation (the summary's) stands for it, unless --no-eval
// leaves that out: then it is done as at every other multiple of N.
int train_eval_due(const train_setup *su, int64_t done);
// A distributed job that failed at start-up: the lock file and --checkpoint-dir that this process
// created go now, not at its exit, which comes after its peers' and may never run: mpirun ends
// the other ranks once the failing one exits non-zero.  dist_run calls it before its barrier.
void train_drop_made_roots(void);

#endif
