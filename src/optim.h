// optim: row optimizers for embedding rows (state inside the row, emb.h) and dense optimizers
// over flat parameter slabs.
//
// Formulas (g: gradient, w: weight, acc: accumulator; every operation in float, in this order):
//
//   SGD                 w -= lr * g                                   (torch.optim.SGD, momentum 0,
//                                                                      dampening 0, nesterov off)
//   Adagrad             acc += g * g                                  (torch.optim.Adagrad with
//                       w -= (lr * g) / (sqrt(acc) + eps)              lr_decay 0; eps default 1e-10,
//                                                                      initial_accumulator_value 0)
//   row-wise Adagrad    acc += (sum_j g[j] * g[j]) / E                (one acc per row, as FBGEMM's
//                       w[j] -= (lr * g[j]) / (sqrt(acc) + eps)        rowwise Adagrad / DLRM)
//
// The sum in row-wise Adagrad runs over the row's E model floats (the wide weight included when
// E = D + 1), j ascending, in one float accumulator.  PyTorch computes Adagrad's update as
// addcdiv(w, g, std, value=-lr) = w + (-lr * g) / std, which is the same float arithmetic as the
// form above; SGD's add(g, alpha=-lr) likewise.  Dense weight decay (torch's weight_decay)
// adds wd * w to g before the update; sparse rows take none (torch refuses weight decay with
// sparse gradients).  lr_decay, momentum and the other torch options are not offered.
#ifndef BP_OPTIM_H
#define BP_OPTIM_H

#include <stddef.h>

#include "emb.h"

typedef enum { EMB_OPT_SGD = 0, EMB_OPT_ADAGRAD = 1, EMB_OPT_ROWWISE_ADAGRAD = 2 } emb_opt_kind;

#define OPT_ADAGRAD_EPS 1e-10f // torch.optim.Adagrad's default

// A row optimizer for rows of E model floats.
typedef struct {
    emb_opt_kind kind;
    int E;             // model floats per row
    float lr;          // learning rate
    float eps;         // Adagrad denominator term
    float initial_acc; // Adagrad accumulator start (emb_layout_cfg.state_init)
} emb_opt;

// kind, lr and E with the defaults above for the rest.
emb_opt emb_opt_make(emb_opt_kind kind, float lr, int E);
// Optimizer-state floats per row (emb_layout_cfg.S): 0, E or 1.
int emb_opt_state_floats(const emb_opt *o);
// Parses "sgd", "adagrad", "rowwise_adagrad" (also "rowwise-adagrad"); -1 when unknown.
int emb_opt_kind_parse(const char *name);
const char *emb_opt_kind_name(emb_opt_kind kind);
// The same as --emb-optimizer spells it ("rowwise-adagrad"), for what a user reads and copies.
const char *emb_opt_kind_flag(emb_opt_kind kind);

// Updates one row wherever it lives: row = [E model floats | state], grad = (E).
void emb_opt_apply_row(const emb_opt *o, float *row, const float *grad);
// rows[i] += update from grads[i] for i < n (rows anywhere, e.g. cache slots), prefetching
// ahead.  The rows must be distinct (a coalesced gradient has unique keys).
void emb_opt_apply_rows(const emb_opt *o, float *const *rows /*(n)*/, const float *grads /*(n, E)*/,
                        int n);
// The same in up to nthreads parts on the pool (nn.h), as emb_opt_apply_table.
void emb_opt_apply_rows_pool(const emb_opt *o, float *const *rows /*(n)*/, const float *grads /*(n, E)*/,
                             int n, int nthreads);
// Applies entries [i0, i1) of a coalesced gradient to a local table; the keys are unique, so
// disjoint entry ranges may run on different threads at once.
void emb_opt_apply_table_range(const emb_opt *o, emb_table *t, const emb_grad *g, int i0, int i1);
// The whole gradient in up to nthreads parts on the pool (nn.h; 1: this thread only).
void emb_opt_apply_table(const emb_opt *o, emb_table *t, const emb_grad *g, int nthreads);

// ---------------------------------------------------------------------------------------------
// Dense optimizers over one parameter slab.

typedef enum { DENSE_OPT_SGD = 0, DENSE_OPT_ADAGRAD = 1 } dense_opt_kind;

typedef struct {
    dense_opt_kind kind;
    float lr;
    float eps;          // Adagrad
    float initial_acc;  // Adagrad
    float weight_decay; // g += weight_decay * w before the update (0: off)
} dense_opt;

dense_opt dense_opt_make(dense_opt_kind kind, float lr);
// State floats for n parameters (0 for SGD, n for Adagrad) and their initial values.
size_t dense_opt_state_floats(const dense_opt *o, size_t n);
void dense_opt_state_init(const dense_opt *o, float *state, size_t n);
// One step: params (n), grads (n), state (dense_opt_state_floats; NULL for SGD).  Element-wise,
// so a slab may be split into ranges across threads; a big one is, over nn_threads() threads of
// the pool (nn.h), with the same result.
void dense_opt_step(const dense_opt *o, float *params, const float *grads, float *state, size_t n);

// ---------------------------------------------------------------------------------------------
// Learning-rate schedule: the DLRM reference's (its LRPolicyScheduler, flags
// --lr-num-warmup-steps W, --lr-decay-start-step S, --lr-num-decay-steps N), one rate per
// iteration for both optimizers.  Iteration i (1-based, the step the reference's scheduler has
// counted when that iteration's update runs) uses, from the base rate lr:
//   i < W                    lr * (1 - (W - i) / W)                          linear warmup
//   S <= i < S + N           max(1e-7, lr * ((N - (i - S)) / N)^2)           quadratic decay
//   otherwise, N = 0         lr
//   otherwise, N > 0         the last rate of the two phases above (the reference's "freeze"):
//                            after the decay its last value; between the warmup and the decay
//                            the warmup's last one, lr * (1 - 1 / W); with neither reached, lr
// in double, rounded to float once, as the reference's Python floats reach torch's float32 step.
// The reference requires S >= W; so does the trainer's flag check (with N > 0).  Every mode
// applies the gradients of iteration i with the rate of i, wherever and whenever it applies them
// (servers, peers' replicas, a background exchange one iteration later), so schedules keep
// every mode bit-identical.
typedef struct {
    int64_t warmup, decay_start, decay_steps; // W, S, N (0, 0, 0: a constant rate)
} lr_schedule;

// The rate for iteration t (0-based: the reference's step t + 1) from the base rate lr.
float lr_schedule_rate(const lr_schedule *s, double lr, int64_t t);
// 1 when the schedule changes the rate at some iteration.
static inline int lr_schedule_on(const lr_schedule *s) { return s->warmup > 1 || s->decay_steps > 0; }

#endif
