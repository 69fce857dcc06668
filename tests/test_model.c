// Model tests: flags and validation, parameter layout and initialisation, and whole-model checks
// of all four models against an independent double-precision composition of the naive twins
// (forward values, and the float backward against central differences of that reference).
#include <stdlib.h>

#include "cli.h"
#include "common.h"
#include "model.h"
#include "nn.h"
#include "test.h"

// ---------------------------------------------------------------------------------------------
// The reference: the model's forward pass in double, composed here from the naive twins and the
// parameter table, independently of model.c's own composition.

static const double *ref_param(const model *m, const double *P, const char *fmt, int idx) {
    char name[32];
    snprintf(name, sizeof name, fmt, idx);
    const model_param *p = model_param_find(m, name);
    BP_ASSERTF(p, "no parameter %s", name);
    return P + p->off;
}

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

// The smallest |pre-activation| any ReLU of the last ref_forward saw.  A unit that close to its
// kink can sit on different sides of it in float and in double, and then the float gradient
// and the finite difference legitimately disagree; model_check draws inputs away from that.
static double ref_margin;
static void ref_relu(double *y, size_t n) {
    for (size_t i = 0; i < n; i++) ref_margin = fmin(ref_margin, fabs(y[i]));
    nn_naive_relu_forward(y, y, n);
}

// Runs the top MLP over x (B, in) and returns its output (B) in a new array.
static double *ref_top(const model *m, const double *P, const double *x_in, int B, int in) {
    const model_config *c = &m->cfg;
    double *x = dalloc((size_t)B * in);
    memcpy(x, x_in, (size_t)B * in * sizeof *x);
    for (int l = 0; l < c->n_top; l++) {
        double *y = dalloc((size_t)B * c->top[l]);
        nn_naive_linear_forward(y, x, ref_param(m, P, "top.%d.W", l), ref_param(m, P, "top.%d.b", l), B, in,
                                c->top[l]);
        if (l + 1 < c->n_top) ref_relu(y, (size_t)B * c->top[l]);
        free(x);
        x = y, in = c->top[l];
    }
    return x;
}

static void ref_forward(const model *m, const double *P, const double *dense, const double *emb, int B,
                        double *logit) {
    const model_config *c = &m->cfg;
    const int Nd = c->Nd, F = c->F, D = c->D, E = c->E;
    double *deep = NULL, *extra = dalloc(B);
    ref_margin = INFINITY;
    if (c->kind == MODEL_DLRM) {
        double *x = dalloc((size_t)B * Nd);
        memcpy(x, dense, (size_t)B * Nd * sizeof *x);
        for (int l = 0; l + 1 < c->n_bot; l++) {
            double *y = dalloc((size_t)B * c->bot[l + 1]);
            nn_naive_linear_forward(y, x, ref_param(m, P, "bot.%d.W", l), ref_param(m, P, "bot.%d.b", l), B,
                                    c->bot[l], c->bot[l + 1]);
            ref_relu(y, (size_t)B * c->bot[l + 1]);
            free(x);
            x = y;
        }
        int W = c->interaction == MODEL_INTERACT_DOT ? nn_interact_dot_width(F, D) : D + F * D;
        double *t = dalloc((size_t)B * W);
        if (c->interaction == MODEL_INTERACT_DOT) nn_naive_interact_dot_forward(t, x, emb, B, F, D, E);
        else nn_naive_concat_forward(t, x, emb, B, D, F, D, E);
        deep = ref_top(m, P, t, B, W);
        free(x), free(t);
    } else {
        int d = Nd + F * D;
        double *x0 = dalloc((size_t)B * d);
        nn_naive_concat_forward(x0, dense, emb, B, Nd, F, D, E);
        if (c->kind == MODEL_DCN) {
            double *x = dalloc((size_t)B * d), *y = dalloc((size_t)B * d), *u = dalloc((size_t)B * d);
            double *p = dalloc((size_t)B * (c->cross_rank + 1));
            memcpy(x, x0, (size_t)B * d * sizeof *x);
            for (int l = 0; l < c->cross_layers; l++) {
                if (c->cross_rank)
                    nn_naive_cross_lowrank_forward(y, u, p, x0, x, ref_param(m, P, "cross.%d.U", l),
                                                   ref_param(m, P, "cross.%d.V", l), ref_param(m, P, "cross.%d.b", l),
                                                   B, d, c->cross_rank);
                else
                    nn_naive_cross_forward(y, u, x0, x, ref_param(m, P, "cross.%d.W", l),
                                           ref_param(m, P, "cross.%d.b", l), B, d);
                memcpy(x, y, (size_t)B * d * sizeof *x);
            }
            deep = ref_top(m, P, x, B, d);
            free(x), free(y), free(u), free(p);
        } else {
            deep = ref_top(m, P, x0, B, d);
            nn_naive_wide_forward(extra, dense, emb, ref_param(m, P, "wide.w", 0), ref_param(m, P, "wide.b", 0), B,
                                  Nd, F, D, E);
            if (c->kind == MODEL_DEEPFM) {
                double *fm = dalloc(B);
                nn_naive_fm_forward(fm, emb, B, F, D, E);
                for (int s = 0; s < B; s++) extra[s] += fm[s];
                free(fm);
            }
        }
        free(x0);
    }
    for (int s = 0; s < B; s++) logit[s] = deep[s] + extra[s];
    free(deep), free(extra);
}

// ---------------------------------------------------------------------------------------------
// Whole-model gradient check.

typedef struct {
    const model *m;
    double *P, *dense, *emb, *c, *logit;
    int B;
} ref_ctx;

static double ref_loss(ref_ctx *r) {
    ref_forward(r->m, r->P, r->dense, r->emb, r->B, r->logit);
    double L = 0.0;
    for (int s = 0; s < r->B; s++) L += r->c[s] * r->logit[s];
    return L;
}

// Central difference of the reference loss in *x.
static double ref_fd(ref_ctx *r, double *x, double h) {
    double keep = *x;
    *x = keep + h;
    double Lp = ref_loss(r);
    *x = keep - h;
    double Lm = ref_loss(r);
    *x = keep;
    return (Lp - Lm) / (2 * h);
}

// Checks model m (float forward and backward) against the reference at batch B: every parameter,
// dense value and embedding value when samples is 0, else `samples` random entries of each
// parameter tensor and of each input (big models).  Returns 0 or fails the test with a message.
static int model_check(const char *what, model *m, int B, int samples, uint64_t seed) {
    const model_config *c = &m->cfg;
    bp_rng rng;
    bp_rng_seed(&rng, seed, 1);
    model_init_params(m, &rng);
    // Non-zero wide weights and cross biases, so that their paths carry signal.
    for (int i = 0; i < m->n_ptab; i++)
        if (strncmp(m->ptab[i].name, "wide.", 5) == 0 || strncmp(m->ptab[i].name, "cross.", 6) == 0)
            for (size_t k = 0; k < m->ptab[i].n; k++)
                if (m->params[m->ptab[i].off + k] == 0.0f) m->params[m->ptab[i].off + k] = 0.1f * (float)bp_rng_normal(&rng);
    size_t nd = (size_t)B * c->Nd, ne = (size_t)B * c->F * c->E;
    float *dense = malloc((nd + 1) * sizeof(float)), *emb = malloc(ne * sizeof(float));
    float *logit = malloc(B * sizeof(float)), *dlogit = malloc(B * sizeof(float));
    float *d_emb = malloc(ne * sizeof(float)), *d_dense = malloc((nd + 1) * sizeof(float));
    ref_ctx r = {.m = m, .B = B};
    r.P = dalloc(m->n_params), r.dense = dalloc(nd), r.emb = dalloc(ne), r.c = dalloc(B), r.logit = dalloc(B);
    for (size_t i = 0; i < m->n_params; i++) r.P[i] = m->params[i];
    for (int s = 0; s < B; s++) r.c[s] = dlogit[s] = (float)(2.0 * bp_rng_uniform(&rng) - 1.0);
    for (int tries = 0; tries < 20; tries++) { // inputs that keep every ReLU 1e-5 away from its kink
        for (size_t i = 0; i < nd; i++) r.dense[i] = dense[i] = (float)bp_rng_normal(&rng);
        for (size_t i = 0; i < ne; i++) r.emb[i] = emb[i] = (float)(bp_rng_uniform(&rng) - 0.5);
        ref_forward(m, r.P, r.dense, r.emb, B, r.logit);
        if (ref_margin > 1e-5) break;
    }
    int rc = 0;

    // Forward values.
    model_forward(m, dense, emb, B, logit);
    ref_forward(m, r.P, r.dense, r.emb, B, r.logit);
    double lscale = 1.0;
    for (int s = 0; s < B; s++) lscale = fmax(lscale, fabs(r.logit[s]));
    for (int s = 0; s < B && !rc; s++)
        if (!(fabs(logit[s] - r.logit[s]) <= 1e-4 * lscale)) {
            test_fail(__FILE__, __LINE__, "%s: logit[%d]: float %.9g, reference %.9g", what, s, logit[s], r.logit[s]);
            rc = -1;
        }

    // Backward: d_emb and d_dense are overwritten (pre-filled with NaN), grads accumulate.
    for (size_t i = 0; i < ne; i++) d_emb[i] = NAN;
    for (size_t i = 0; i < nd; i++) d_dense[i] = NAN;
    model_zero_grad(m);
    model_backward(m, dense, emb, dlogit, d_emb, d_dense);

    // Each kind of variable: the float gradient against central differences of the reference.
    struct {
        const char *name;
        double *x;
        const float *g;
        size_t n;
    } vars[3] = {{"param", r.P, m->grads, m->n_params}, {"dense", r.dense, d_dense, nd}, {"emb", r.emb, d_emb, ne}};
    for (int v = 0; v < 3 && !rc; v++) {
        size_t n = vars[v].n, k = 0;
        double *fd = dalloc(n), scale = 0.0;
        size_t *idx = malloc((n + 1) * sizeof *idx);
        // Which entries: all of them, or `samples` random ones of each parameter tensor / input.
        if (samples == 0) {
            for (size_t i = 0; i < n; i++) idx[k++] = i;
        } else if (v == 0) {
            for (int t = 0; t < m->n_ptab; t++)
                for (int j = 0; j < samples; j++)
                    idx[k++] = m->ptab[t].off + bp_rng_below(&rng, (uint32_t)m->ptab[t].n);
        } else {
            for (int j = 0; j < samples && n > 0; j++) idx[k++] = bp_rng_below(&rng, (uint32_t)n);
        }
        for (size_t j = 0; j < k; j++) {
            fd[j] = ref_fd(&r, &vars[v].x[idx[j]], 1e-6);
            scale = fmax(scale, fabs(fd[j]));
        }
        for (size_t j = 0; j < k && !rc; j++) {
            double g = vars[v].g[idx[j]];
            if (!(fabs(g - fd[j]) <= 2e-4 * fabs(fd[j]) + 2e-5 * fmax(scale, 1e-3))) {
                const char *pname = "";
                if (v == 0)
                    for (int t = 0; t < m->n_ptab; t++)
                        if (idx[j] >= m->ptab[t].off && idx[j] < m->ptab[t].off + m->ptab[t].n) pname = m->ptab[t].name;
                test_fail(__FILE__, __LINE__, "%s: d%s[%zu] %s: backward %.9g, finite difference %.9g", what,
                          vars[v].name, idx[j], pname, g, fd[j]);
                rc = -1;
            }
        }
        free(fd), free(idx);
    }

    // Accumulation: a second backward adds the same gradients again.
    if (!rc) {
        float *g1 = malloc(m->n_params * sizeof(float));
        memcpy(g1, m->grads, m->n_params * sizeof(float));
        model_backward(m, dense, emb, dlogit, d_emb, d_dense);
        for (size_t i = 0; i < m->n_params && !rc; i++)
            if (!(fabs(m->grads[i] - 2.0 * g1[i]) <= 1e-5 * (fabs(g1[i]) + 1e-3))) {
                test_fail(__FILE__, __LINE__, "%s: grads[%zu] after two backward passes: %.9g, expected 2 x %.9g", what,
                          i, m->grads[i], g1[i]);
                rc = -1;
            }
        free(g1);
    }
    free(dense), free(emb), free(logit), free(dlogit), free(d_emb), free(d_dense);
    free(r.P), free(r.dense), free(r.emb), free(r.c), free(r.logit);
    return rc;
}

static int check_flags(const char *what, const char *flags, int Nd, int F, int B, int samples, uint64_t seed) {
    model_config cfg;
    int rc = model_config_parse(&cfg, flags, Nd, F);
    if (rc) {
        test_fail(__FILE__, __LINE__, "%s: %s", what, bp_errmsg(rc));
        return rc;
    }
    model m;
    if ((rc = model_init(&m, &cfg, B))) {
        test_fail(__FILE__, __LINE__, "%s: %s", what, bp_errmsg(rc));
        return rc;
    }
    rc = model_check(what, &m, B, samples, seed);
    model_free(&m);
    return rc;
}

TEST(model_grad_dlrm) {
    ASSERT_OK(check_flags("dlrm dot", "--arch-mlp-bot 3-8-4 --arch-mlp-top 8-4-1 --arch-sparse-feature-size 4",
                          3, 4, 3, 0, 1));
    ASSERT_OK(check_flags("dlrm cat",
                          "--arch-mlp-bot 3-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --arch-interaction-op cat",
                          3, 4, 3, 0, 2));
    ASSERT_OK(check_flags("dlrm one-layer", "--arch-mlp-bot 2-3 --arch-mlp-top 1 --arch-sparse-feature-size 3",
                          2, 1, 2, 0, 3));
}

TEST(model_grad_wdl) {
    ASSERT_OK(check_flags("wdl", "--model wdl --arch-mlp-top 8-4-1 --arch-sparse-feature-size 3", 3, 4, 3, 0, 4));
    ASSERT_OK(check_flags("wdl no dense", "--model wdl --arch-mlp-top 5-1 --arch-sparse-feature-size 2", 0, 3, 2, 0, 5));
}

TEST(model_grad_deepfm) {
    ASSERT_OK(check_flags("deepfm", "--model deepfm --arch-mlp-top 8-4-1 --arch-sparse-feature-size 3", 3, 4, 3, 0, 6));
}

TEST(model_grad_dcn) {
    ASSERT_OK(check_flags("dcn full", "--model dcn --arch-mlp-top 6-1 --arch-sparse-feature-size 3 --dcn-cross-layers 2",
                          3, 4, 3, 0, 7));
    ASSERT_OK(check_flags("dcn low rank",
                          "--model dcn --arch-mlp-top 6-1 --arch-sparse-feature-size 3 --dcn-cross-layers 3 --dcn-rank 4",
                          3, 4, 3, 0, 8));
    ASSERT_OK(check_flags("dcn no cross", "--model dcn --arch-mlp-top 6-1 --arch-sparse-feature-size 3 --dcn-cross-layers 0",
                          3, 4, 3, 0, 9));
}

// The Criteo Kaggle shapes (13 dense, 26 sparse, D = 16) through the BLAS paths, sampled.
TEST(model_grad_kaggle_shapes) {
    ASSERT_OK(check_flags("dlrm kaggle", "", 13, 26, 3, 6, 10));
    ASSERT_OK(check_flags("dlrm kaggle cat", "--arch-interaction-op cat", 13, 26, 3, 6, 11));
    ASSERT_OK(check_flags("wdl kaggle", "--model wdl", 13, 26, 3, 6, 12));
    ASSERT_OK(check_flags("deepfm kaggle", "--model deepfm", 13, 26, 3, 6, 13));
    ASSERT_OK(check_flags("dcn kaggle", "--model dcn", 13, 26, 3, 6, 14));
    ASSERT_OK(check_flags("dcn kaggle rank 64", "--model dcn --dcn-rank 64", 13, 26, 3, 6, 15));
}

// ---------------------------------------------------------------------------------------------
// Flags and validation

TEST(model_config_defaults_are_dlrm_kaggle) {
    model_config c;
    ASSERT_OK(model_config_parse(&c, "", 13, 26));
    ASSERT_EQ(c.kind, MODEL_DLRM);
    ASSERT_EQ(c.n_bot, 5);
    const int bot[] = {13, 512, 256, 64, 16}, top[] = {512, 256, 1};
    for (int i = 0; i < 5; i++) ASSERT_EQ(c.bot[i], bot[i]);
    ASSERT_EQ(c.n_top, 3);
    for (int i = 0; i < 3; i++) ASSERT_EQ(c.top[i], top[i]);
    ASSERT_EQ(c.D, 16);
    ASSERT_EQ(c.E, 16);
    ASSERT_EQ(c.interaction, MODEL_INTERACT_DOT);
    ASSERT_EQ(model_config_top_in(&c), 16 + 26 * 27 / 2);
    // Forward multiply-adds: bottom 13*512 + 512*256 + 256*64 + 64*16, interaction 351 pairs x 16,
    // top 367*512 + 512*256 + 256*1.
    double bot_mac = 13 * 512 + 512 * 256 + 256 * 64 + 64 * 16, top_mac = 367 * 512 + 512 * 256 + 256;
    ASSERT_NEAR(model_flops_per_sample(&c, 0), 2 * (bot_mac + 351 * 16 + top_mac), 0);
    ASSERT_NEAR(model_flops_per_sample(&c, 1),
                2 * (bot_mac + 351 * 16 + top_mac) + 2 * (2 * bot_mac - 13 * 512 + 2 * 351 * 16 + 2 * top_mac), 0);

    model m;
    ASSERT_OK(model_init(&m, &c, 8));
    size_t want = (13 * 512 + 512) + (512 * 256 + 256) + (256 * 64 + 64) + (64 * 16 + 16) + (367 * 512 + 512) +
                  (512 * 256 + 256) + (256 + 1);
    ASSERT_EQ(m.n_weights, want);
    ASSERT_EQ(m.n_ptab, 14);
    const model_param *p = model_param_find(&m, "top.0.W");
    ASSERT_TRUE(p && p->ndim == 2 && p->shape[0] == 512 && p->shape[1] == 367);
    p = model_param_find(&m, "bot.3.b");
    ASSERT_TRUE(p && p->ndim == 1 && p->shape[0] == 16);
    ASSERT_TRUE(model_param_find(&m, "wide.w") == NULL);
    model_free(&m);
    model_free(&m); // twice is fine
}

TEST(model_config_rows_per_kind) {
    model_config c;
    ASSERT_OK(model_config_parse(&c, "--model wdl --arch-sparse-feature-size 8", 13, 26));
    ASSERT_EQ(c.E, 9);
    ASSERT_EQ(model_config_top_in(&c), 13 + 26 * 8);
    ASSERT_OK(model_config_parse(&c, "--model deepfm", 13, 26));
    ASSERT_EQ(c.E, 17);
    ASSERT_OK(model_config_parse(&c, "--model dcn --dcn-cross-layers 2 --dcn-rank 32", 13, 26));
    ASSERT_EQ(c.E, 16);
    ASSERT_EQ(c.cross_layers, 2);
    ASSERT_EQ(c.cross_rank, 32);
    ASSERT_OK(model_config_parse(&c, "--arch-interaction-op cat", 13, 26));
    ASSERT_EQ(model_config_top_in(&c), 16 + 26 * 16);
}

static void expect_usage(const char *flags, int Nd, int F, const char *msg) {
    model_config c;
    int rc = model_config_parse(&c, flags, Nd, F);
    if (rc != BP_EUSAGE) {
        test_fail(__FILE__, __LINE__, "'%s': expected a usage error, got %d", flags, rc);
        return;
    }
    if (!strstr(bp_errmsg(rc), msg)) test_fail(__FILE__, __LINE__, "'%s': expected '%s' in: %s", flags, msg, bp_errmsg(rc));
}

TEST(model_config_errors_name_the_flag) {
    expect_usage("--arch-mlp-bot 12-64-16", 13, 26, "--arch-mlp-bot: first size 12 must equal the dataset's 13 dense features");
    expect_usage("--arch-mlp-bot 13-64-8", 13, 26, "--arch-mlp-bot: last size 8 must equal --arch-sparse-feature-size 16");
    expect_usage("--arch-sparse-feature-size 32", 13, 26, "last size 16 must equal --arch-sparse-feature-size 32");
    expect_usage("--arch-mlp-bot 13", 13, 26, "--arch-mlp-bot: expected at least two sizes");
    expect_usage("--arch-mlp-top 512-256-2", 13, 26, "--arch-mlp-top: last size 2 must be 1 (the logit)");
    expect_usage("--arch-mlp-top 512-x-1", 13, 26, "--arch-mlp-top: expected sizes like");
    expect_usage("--model svm", 13, 26, "--model: expected one of dlrm|wdl|deepfm|dcn");
    expect_usage("--arch-interaction-op sum", 13, 26, "--arch-interaction-op: expected one of dot|cat");
    expect_usage("--model wdl --arch-mlp-bot 13-16", 13, 26, "--arch-mlp-bot: only --model dlrm has a bottom MLP");
    // A flag of another model is refused, not ignored, even at its default value.
    expect_usage("--model wdl --arch-interaction-op cat", 13, 26,
                 "--arch-interaction-op: only --model dlrm has a feature interaction (this is --model wdl)");
    expect_usage("--model dcn --arch-interaction-op dot", 13, 26, "--arch-interaction-op: only --model dlrm");
    expect_usage("--model wdl --dcn-rank 4", 13, 26, "--dcn-rank: only --model dcn has cross layers (this is --model wdl)");
    expect_usage("--model deepfm --dcn-cross-layers 3", 13, 26, "--dcn-cross-layers: only --model dcn has cross layers");
    expect_usage("--dcn-rank 0", 13, 26, "--dcn-rank: only --model dcn has cross layers (this is --model dlrm)");
    expect_usage("--model dcn --dcn-rank 429", 13, 26, "--dcn-rank: 429 must be below the cross width 429");
    expect_usage("--model dcn --dcn-cross-layers 99", 13, 26, "--dcn-cross-layers");
    expect_usage("", 0, 22, "the dataset has no dense features");
    expect_usage("--arch-sparse-feature-size 0", 13, 26, "--arch-sparse-feature-size");
    expect_usage("--batch-size 5", 13, 26, "unknown flag '--batch-size'");
    expect_usage("dlrm", 13, 26, "unexpected argument 'dlrm'");
    expect_usage("", 13, 0, "sparse features");
}

TEST(model_config_format_round_trips) {
    const char *cases[] = {"", "--arch-interaction-op cat --arch-mlp-top 64-1", "--model wdl --arch-sparse-feature-size 8",
                           "--model deepfm --arch-mlp-top 400-400-400-1", "--model dcn --dcn-rank 16 --dcn-cross-layers 4"};
    for (int i = 0; i < (int)BP_ARRAY_LEN(cases); i++) {
        model_config a, b;
        char buf[512];
        ASSERT_OK(model_config_parse(&a, cases[i], 13, 26));
        int n = model_config_format(&a, buf, sizeof buf);
        ASSERT_TRUE(n > 0 && n < (int)sizeof buf);
        ASSERT_OK(model_config_parse(&b, buf, 13, 26));
        ASSERT_MSG(memcmp(&a, &b, sizeof a) == 0, "'%s' -> '%s' did not round-trip", cases[i], buf);
    }
    model_config a;
    ASSERT_OK(model_config_parse(&a, "", 13, 26));
    char small[10];
    int n = model_config_format(&a, small, sizeof small);
    ASSERT_TRUE(n > 9 && strlen(small) == 9); // truncated, length reported
}

// The flags live in a subcommand's own table next to its other options.
TEST(model_cli_opts_in_a_larger_table) {
    model_flags mf;
    int batch;
    const cli_opt opts[] = {CLI_INT("batch-size", 'b', &batch, 128, 1, 1 << 20, "batch"), MODEL_CLI_OPTS(&mf), CLI_END};
    char *argv[] = {"train", "-b", "256", "--model", "dcn", "--arch-mlp-top=128-1", "--dcn-rank", "8", "data.bin"};
    char **pos;
    int npos;
    ASSERT_OK(cli_parse("bagpipe train", "[options] DATA", opts, (int)BP_ARRAY_LEN(argv), argv, &pos, &npos));
    ASSERT_EQ(npos, 1);
    free(pos);
    ASSERT_EQ(batch, 256);
    model_config c;
    ASSERT_OK(model_config_from_flags(&c, &mf, 13, 26));
    ASSERT_EQ(c.kind, MODEL_DCN);
    ASSERT_EQ(c.cross_layers, 3);
    ASSERT_EQ(c.cross_rank, 8);
    ASSERT_EQ(c.n_top, 2);
    ASSERT_EQ(c.top[0], 128);
}

// ---------------------------------------------------------------------------------------------
// Layout, initialisation, determinism, loss

TEST(model_param_table_layout) {
    const char *cases[] = {"", "--model wdl", "--model deepfm", "--model dcn", "--model dcn --dcn-rank 8"};
    for (int k = 0; k < (int)BP_ARRAY_LEN(cases); k++) {
        model_config c;
        model m;
        ASSERT_OK(model_config_parse(&c, cases[k], 13, 26));
        ASSERT_OK(model_init(&m, &c, 4));
        size_t end = 0, total = 0;
        for (int i = 0; i < m.n_ptab; i++) {
            const model_param *p = &m.ptab[i];
            ASSERT_MSG(p->off % 16 == 0 && p->off >= end, "%s: %s at %zu", cases[k], p->name, p->off);
            ASSERT_EQ(p->n, (size_t)p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1));
            ASSERT_TRUE(model_param_find(&m, p->name) == p);
            end = p->off + p->n, total += p->n;
        }
        ASSERT_TRUE(end <= m.n_params);
        ASSERT_EQ(total, m.n_weights);
        ASSERT_TRUE((uintptr_t)m.params % 64 == 0 && (uintptr_t)m.grads % 64 == 0);
        model_free(&m);
    }
    model_config c;
    model m;
    ASSERT_OK(model_config_parse(&c, "--model dcn --dcn-rank 8 --dcn-cross-layers 2", 13, 26));
    ASSERT_OK(model_init(&m, &c, 4));
    const model_param *u = model_param_find(&m, "cross.1.U"), *v = model_param_find(&m, "cross.1.V");
    ASSERT_TRUE(u && v && u->shape[0] == 429 && u->shape[1] == 8 && v->shape[0] == 429 && v->shape[1] == 8);
    ASSERT_TRUE(model_param_find(&m, "cross.0.W") == NULL);
    ASSERT_TRUE(model_param_find(&m, "top.0.W")->shape[1] == 429);
    model_free(&m);
}

static double sample_std(const float *x, size_t n, double *mean) {
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++) s += x[i], q += (double)x[i] * x[i];
    *mean = s / n;
    return sqrt(q / n - *mean * *mean);
}

TEST(model_init_params_statistics) {
    model_config c;
    model m;
    ASSERT_OK(model_config_parse(&c, "--model deepfm", 13, 26));
    ASSERT_OK(model_init(&m, &c, 1));
    bp_rng rng;
    bp_rng_seed(&rng, 42, 0);
    model_init_params(&m, &rng);
    const model_param *p = model_param_find(&m, "top.0.W"); // (512, 429)
    double mean, sd = sample_std(m.params + p->off, p->n, &mean);
    ASSERT_NEAR(sd, sqrt(2.0 / (512 + 429)), 0.01 * sqrt(2.0 / (512 + 429)));
    ASSERT_NEAR(mean, 0.0, 0.001);
    p = model_param_find(&m, "top.0.b");
    sd = sample_std(m.params + p->off, p->n, &mean);
    ASSERT_NEAR(sd, sqrt(1.0 / 512), 0.15 * sqrt(1.0 / 512));
    p = model_param_find(&m, "wide.w");
    for (size_t i = 0; i < p->n; i++) ASSERT_TRUE(m.params[p->off + i] == 0.0f);
    // Same seed, same parameters, bit for bit.
    float *copy = malloc(m.n_params * sizeof(float));
    memcpy(copy, m.params, m.n_params * sizeof(float));
    bp_rng_seed(&rng, 42, 0);
    model_init_params(&m, &rng);
    ASSERT_TRUE(memcmp(copy, m.params, m.n_params * sizeof(float)) == 0);
    free(copy);
    model_free(&m);
}

extern void openblas_set_num_threads(int);

// Same inputs, same BLAS threads: bit-identical logits, gradients and row gradients, with one
// BLAS thread and with two (the batch is big enough for OpenBLAS to split the products).
TEST(model_deterministic) {
    const char *cases[] = {"", "--model wdl", "--model deepfm", "--model dcn"};
    for (int k = 0; k < 2 * (int)BP_ARRAY_LEN(cases); k++) {
        openblas_set_num_threads(1 + k / (int)BP_ARRAY_LEN(cases));
        model_config c;
        model m;
        ASSERT_OK(model_config_parse(&c, cases[k % BP_ARRAY_LEN(cases)], 13, 26));
        const int B = 256;
        ASSERT_OK(model_init(&m, &c, B));
        bp_rng rng;
        bp_rng_seed(&rng, 5, 0);
        model_init_params(&m, &rng);
        size_t ne = (size_t)B * c.F * c.E;
        float *dense = malloc(B * 13 * sizeof(float)), *emb = malloc(ne * sizeof(float));
        float *logit[2], *dlogit = malloc(B * sizeof(float)), *demb[2], *grads[2];
        for (int i = 0; i < B * 13; i++) dense[i] = bp_rng_uniformf(&rng);
        for (size_t i = 0; i < ne; i++) emb[i] = bp_rng_uniformf(&rng) - 0.5f;
        uint8_t label[256];
        for (int i = 0; i < B; i++) label[i] = (uint8_t)(i % 3 == 0);
        for (int t = 0; t < 2; t++) {
            logit[t] = malloc(B * sizeof(float)), demb[t] = malloc(ne * sizeof(float));
            grads[t] = malloc(m.n_params * sizeof(float));
            model_forward(&m, dense, emb, B, logit[t]);
            bce_with_logits(logit[t], label, B, 1.0f / B, dlogit);
            model_zero_grad(&m);
            model_backward(&m, dense, emb, dlogit, demb[t], NULL);
            memcpy(grads[t], m.grads, m.n_params * sizeof(float));
        }
        ASSERT_TRUE(memcmp(logit[0], logit[1], B * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(demb[0], demb[1], ne * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(grads[0], grads[1], m.n_params * sizeof(float)) == 0);
        // A smaller batch after a bigger one uses the same buffers correctly.  (Its bits may
        // differ from the same samples inside the bigger batch: BLAS picks kernels by shape.)
        model_forward(&m, dense, emb, 3, logit[1]);
        for (int i = 0; i < 3; i++) ASSERT_NEAR(logit[1][i], logit[0][i], 1e-5 * (1 + fabs(logit[0][i])));
        model_forward(&m, dense, emb, 0, logit[1]); // empty batch: nothing to do
        model_backward(&m, dense, emb, dlogit, demb[1], NULL);
        for (int t = 0; t < 2; t++) free(logit[t]), free(demb[t]), free(grads[t]);
        free(dense), free(emb), free(dlogit);
        model_free(&m);
    }
}

// Two threads cut the forward pass's products into slices (nn.c): every sample's logit is written,
// and agrees with the one-thread pass, for each model and for batches that split unevenly or not
// at all.
TEST(model_forward_on_two_threads_matches_one_thread) {
    const char *cases[] = {"", "--arch-interaction-op cat", "--model wdl", "--model deepfm", "--model dcn",
                           "--model dcn --dcn-rank 8"};
    const int batches[] = {256, 37, 31, 1};
    for (int k = 0; k < (int)BP_ARRAY_LEN(cases); k++) {
        model_config c;
        model m;
        ASSERT_OK(model_config_parse(&c, cases[k], 13, 26));
        ASSERT_OK(model_init(&m, &c, 256));
        bp_rng rng;
        bp_rng_seed(&rng, 11, 0);
        model_init_params(&m, &rng);
        size_t ne = (size_t)256 * c.F * c.E;
        float *dense = malloc(256 * 13 * sizeof(float)), *emb = malloc(ne * sizeof(float));
        float *logit[2] = {malloc(257 * sizeof(float)), malloc(257 * sizeof(float))};
        for (int i = 0; i < 256 * 13; i++) dense[i] = bp_rng_uniformf(&rng);
        for (size_t i = 0; i < ne; i++) emb[i] = bp_rng_uniformf(&rng) - 0.5f;
        for (int b = 0; b < (int)BP_ARRAY_LEN(batches); b++) {
            const int B = batches[b];
            for (int t = 0; t < 2; t++) {
                for (int i = 0; i <= 256; i++) logit[t][i] = NAN;
                openblas_set_num_threads(1 + t);
                model_forward(&m, dense, emb, B, logit[t]);
            }
            openblas_set_num_threads(1);
            for (int i = 0; i < B; i++) {
                ASSERT_TRUE(isfinite(logit[1][i]));
                ASSERT_NEAR(logit[1][i], logit[0][i], 1e-5 * (1 + fabs(logit[0][i])));
            }
            ASSERT_TRUE(isnan(logit[1][B])); // and nothing past the batch
        }
        free(dense), free(emb), free(logit[0]), free(logit[1]);
        model_free(&m);
    }
}

TEST(model_bce_with_logits) {
    float z[6] = {0.0f, 2.0f, -3.0f, 100.0f, -100.0f, 40.0f};
    uint8_t y[6] = {1, 0, 1, 0, 0, 1};
    float dz[6];
    double L = bce_with_logits(z, y, 6, 0.5f, dz);
    double want = 0;
    double p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = 1.0 / (1.0 + exp(-(double)z[i]));
        double li = y[i] ? -log(p[i]) : -log1p(-p[i]);
        if (i == 3) li = 100.0; // -log(1 - p) with p rounded to 1: the exact value
        if (i == 5) li = log1p(exp(-40.0));
        want += li;
        ASSERT_NEAR(dz[i], 0.5 * (p[i] - y[i]), 1e-7);
    }
    ASSERT_NEAR(L, want, 1e-9 * want);
    ASSERT_TRUE(isfinite(L));
    // The gradient is the derivative of the loss.
    for (int i = 0; i < 3; i++) {
        float zp = z[i] + 1e-2f, zm = z[i] - 1e-2f;
        double fd = (bce_with_logits(&zp, &y[i], 1, 1, NULL) - bce_with_logits(&zm, &y[i], 1, 1, NULL)) / (zp - zm);
        ASSERT_NEAR(2 * dz[i], fd, 1e-4);
    }
}
