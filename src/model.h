// model: the dense part of the four recommendation models (DLRM, Wide&Deep, DeepFM, DCN-v2) as a
// forward/backward pass over a batch of dense features and already-gathered embedding rows.
//
// The model owns no embedding table.  The caller gathers, for each sample and each sparse feature,
// the row of E floats the feature's id points to, and passes them as emb (B, F, E); backward
// returns their gradients in d_emb (B, F, E), which the caller scatters/applies.  E is the model's:
//   DLRM, DCN            E = D
//   Wide&Deep, DeepFM    E = D + 1; element D of each row is that row's first-order (wide) weight
//
// Architectures (DLRM reference flags; see MODEL_CLI_OPTS):
//   DLRM    z = bot_mlp(dense) (ReLU after every layer, last size D);
//           logit = top_mlp(interaction(z, emb)), dot: [z, <T_i,T_j> for i > j] or cat: [z, emb]
//   WDL     logit = wide(dense, emb) + top_mlp([dense, emb])
//   DeepFM  logit = wide(dense, emb) + fm(emb) + top_mlp([dense, emb])
//   DCN     x0 = [dense, emb];  x_{l+1} = x0 ⊙ (W_l x_l + b_l) + x_l  (W_l = U_l V_l^T when ranked);
//           logit = top_mlp(x_L)
// where [dense, emb] concatenates the dense features with the first D floats of every row, wide is
// w . dense + b + sum of the rows' first-order weights, fm is the second-order FM term over the F
// embedding vectors, and top_mlp has ReLU after every layer but the last, whose one output is a
// logit.  The loss (bce_with_logits) is the caller's.
//
// One step of the training loop:
//   model_forward(&m, dense, emb, B, logit);
//   loss += bce_with_logits(logit, label, B, 1.0f / B_global, dlogit);
//   model_zero_grad(&m);
//   model_backward(&m, dense, emb, dlogit, d_emb, NULL);
//   ... all-reduce m.grads (m.n_params floats), apply the optimizer to m.params ...
#ifndef BP_MODEL_H
#define BP_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "common.h"

typedef enum { MODEL_DLRM = 0, MODEL_WDL = 1, MODEL_DEEPFM = 2, MODEL_DCN = 3 } model_kind;
typedef enum { MODEL_INTERACT_DOT = 0, MODEL_INTERACT_CAT = 1 } model_interaction;

#define MODEL_MAX_MLP 16   // sizes in one MLP flag
#define MODEL_MAX_CROSS 16 // DCN cross layers
#define MODEL_MAX_D 1024 // = EMB_MAX_DIM: rows hold at most that many floats (D, or D + 1 with a wide weight)

typedef struct {
    model_kind kind;
    int Nd, F;             // dense features and sparse features of the dataset
    int D;                 // embedding size (--arch-sparse-feature-size)
    int E;                 // floats per embedding row the model reads (D or D + 1, see above)
    int n_bot;             // DLRM only: bottom MLP sizes, input included: bot[0] = Nd, bot[n_bot-1] = D
    int bot[MODEL_MAX_MLP];
    int n_top;             // top MLP / deep tower sizes without its input: top[n_top-1] = 1
    int top[MODEL_MAX_MLP];
    model_interaction interaction; // DLRM only
    int cross_layers;      // DCN only
    int cross_rank;        // DCN only; 0 = full rank
} model_config;

// ---------------------------------------------------------------------------------------------
// Flags.  Put MODEL_CLI_OPTS(&flags) in a subcommand's cli_opt table, call cli_parse, then
// model_config_from_flags with the dataset's Nd and F.  --arch-mlp-bot has no stored default
// (NULL) so that giving it to a model without a bottom MLP is an error; for DLRM NULL means
// MODEL_DEFAULT_MLP_BOT.
#define MODEL_DEFAULT_MLP_BOT "13-512-256-64-16"
#define MODEL_DEFAULT_MLP_TOP "512-256-1"
typedef struct {
    int kind;              // index into "dlrm|wdl|deepfm|dcn" (= model_kind)
    const char *mlp_bot;   // NULL: the default
    const char *mlp_top;
    int D;
    int interaction;       // index into "dot|cat" (= model_interaction)
    int cross_layers, cross_rank;
} model_flags;

#define MODEL_CLI_OPTS(f)                                                                           \
    CLI_CHOICE("model", 0, &(f)->kind, MODEL_DLRM, "dlrm|wdl|deepfm|dcn", "model architecture"),    \
    CLI_STR("arch-mlp-bot", 0, &(f)->mlp_bot, NULL,                                                 \
            "DLRM bottom MLP sizes: dense features first, embedding size last (default "            \
            MODEL_DEFAULT_MLP_BOT ")"),                                                             \
    CLI_STR("arch-mlp-top", 0, &(f)->mlp_top, MODEL_DEFAULT_MLP_TOP,                                \
            "top MLP (DLRM) / deep tower sizes after its input, ending in 1"),                      \
    CLI_INT("arch-sparse-feature-size", 0, &(f)->D, 16, 1, MODEL_MAX_D, "embedding size D"),        \
    CLI_CHOICE("arch-interaction-op", 0, &(f)->interaction, MODEL_INTERACT_DOT, "dot|cat",          \
               "DLRM feature interaction"),                                                         \
    CLI_INT("dcn-cross-layers", 0, &(f)->cross_layers, 3, 0, MODEL_MAX_CROSS, "DCN cross layers"),  \
    CLI_INT("dcn-rank", 0, &(f)->cross_rank, 0, 0, 1 << 20, "DCN cross layer rank (0 = full)")

// After cli_parse_given on a table holding MODEL_CLI_OPTS: refuses a flag given to a model
// without what it sets (--arch-interaction-op but not --model dlrm, --dcn-* but not --model dcn),
// which would otherwise be ignored.  0 or BP_EUSAGE naming the flag and the model.
int model_flags_check_given(const model_flags *f, const cli_opt *opts, const cli_given *g);
// Fills cfg from parsed flags and checks it against the dataset (Nd dense, F sparse features).
// Returns 0 or BP_EUSAGE with a message naming the flag and what was expected, e.g.
// "--arch-mlp-bot: first size 12 must equal the dataset's 13 dense features".
int model_config_from_flags(model_config *cfg, const model_flags *f, int Nd, int F);
// The same from a string of flags ("--model dcn --dcn-rank 64"); flags not given keep their
// defaults.  Handy for tests and for configs stored in checkpoints.
int model_config_parse(model_config *cfg, const char *args, int Nd, int F);
// Checks every cross-field rule (model_config_from_flags calls it); 0 or BP_EUSAGE.
int model_config_validate(const model_config *cfg);
// The flags that reproduce cfg, e.g. "--model dlrm --arch-mlp-bot 13-512-256-64-16 ...":
// model_config_parse(format(cfg)) gives cfg back.  Returns the length (truncated to cap).
int model_config_format(const model_config *cfg, char *buf, size_t cap);
const char *model_kind_name(model_kind kind);
// Width of the top MLP's input, derived from the architecture.
int model_config_top_in(const model_config *cfg);
// Floating-point operations per sample of the matrix work (linear, cross, interaction, FM):
// the forward pass, or forward + backward when training (the first bottom layer computes no input
// gradient).  Elementwise work is not counted.
double model_flops_per_sample(const model_config *cfg, int training);

// ---------------------------------------------------------------------------------------------
// The model.

typedef struct {
    char name[24];         // "bot.0.W", "top.2.b", "cross.1.U", "wide.w", ...
    size_t off;            // offset in floats into params (and grads)
    int ndim;              // 1 or 2
    int shape[2];          // (rows, cols) or (n)
    size_t n;              // floats
} model_param;

typedef struct {
    size_t W, b;           // offsets of W (out, in) and b (out)
    int in, out;
} model_linear;

typedef struct {
    size_t W, U, V, b;     // full: W (d, d); low rank: U, V (d, r); b (d)
} model_cross;

typedef struct {
    model_config cfg;
    int max_batch;
    int B;                 // batch of the last forward pass
    int top_in;            // width of the top MLP's input
    int d;                 // DCN: cross width Nd + F D

    // Parameters and their gradients: one slab each, same layout, every tensor 64-byte aligned.
    size_t n_params;       // floats in each slab (including alignment gaps, which stay zero)
    size_t n_weights;      // floats that are parameters
    float *params, *grads;
    model_param *ptab;     // one entry per tensor, in slab order
    int n_ptab;

    model_linear bot[MODEL_MAX_MLP], top[MODEL_MAX_MLP];
    int n_bot, n_top;      // layers (not sizes)
    model_cross cross[MODEL_MAX_CROSS];
    size_t wide_w, wide_b; // WDL and DeepFM: w (Nd), b (1)

    // Activations for up to max_batch samples (one slab) and their gradients.
    float *acts;
    size_t n_acts;
    float *bot_a[MODEL_MAX_MLP], *bot_da[MODEL_MAX_MLP]; // (B, bot[l+1]) after ReLU
    float *top_a[MODEL_MAX_MLP], *top_da[MODEL_MAX_MLP]; // (B, top[l]), ReLU but for the last
    float *x_in, *dx_in;   // (B, top_in) or, for DCN, x0 (B, d): the concatenation / interaction
    float *cx[MODEL_MAX_CROSS + 1], *dcx[MODEL_MAX_CROSS + 1]; // DCN x_l (B, d); cx[0] = x_in
    float *cu[MODEL_MAX_CROSS], *cp[MODEL_MAX_CROSS];          // DCN u_l (B, d), p_l (B, r)
    float *cdu, *cdp, *cdx0; // DCN scratch du (B, d), dp (B, r), and the gradient sum for x0 (B, d)
    float *wide_out, *fm_out, *dsum; // (B)
    float *scratch;        // interaction scratch
} model;

// Allocates parameters, gradients and activations for batches up to max_batch.  Parameters are
// zero until model_init_params.  Returns 0, BP_EUSAGE (invalid cfg) or BP_ENOMEM.
int model_init(model *m, const model_config *cfg, int max_batch);
// The parameters and activations (floats) model_init would allocate, without allocating them (a
// memory plan for a batch too large to fit must not take that memory to find out).
int model_sizes(const model_config *cfg, int max_batch, size_t *n_params, size_t *n_acts);
void model_free(model *m); // safe on a zeroed or freed model
// DLRM reference initialisation: Linear W ~ N(0, sqrt(2 / (out + in))), b ~ N(0, sqrt(1 / out));
// cross W, U, V Glorot-normal with b = 0; wide weights and bias 0.  Draws in parameter-table order.
void model_init_params(model *m, bp_rng *rng);
void model_zero_grad(model *m);

// dense: (B, Nd)  emb: (B, F, E)  logit: (B), B <= max_batch.
void model_forward(model *m, const float *dense, const float *emb, int B, float *logit);
// After model_forward on the same dense and emb: ACCUMULATES parameter gradients into m->grads,
// OVERWRITES d_emb (B, F, E) with the gradients of the rows, and, when d_dense (B, Nd) is not
// NULL, overwrites it with the dense input's gradient.  dlogit: (B), d(loss)/d(logit).
void model_backward(model *m, const float *dense, const float *emb, const float *dlogit, float *d_emb,
                    float *d_dense);

const model_param *model_param_find(const model *m, const char *name);
// One line per tensor: name, shape, count; then the total.
void model_print(const model *m, FILE *out);

// Binary cross-entropy on logits, numerically stable: returns sum_i loss_i (in double) and, when
// dlogit is not NULL, writes dlogit_i = scale * (sigmoid(logit_i) - label_i).  label: 0 or 1.
double bce_with_logits(const float *logit, const uint8_t *label, int B, float scale, float *dlogit);

#endif
