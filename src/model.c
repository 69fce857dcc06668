// model: configuration, parameter layout and the forward/backward passes of DLRM, Wide&Deep,
// DeepFM and DCN-v2 over the layers of nn.c.  See model.h for the architectures and the contract.
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emb.h"
#include "nn.h"

_Static_assert(MODEL_MAX_D == EMB_MAX_DIM, "the embedding layer stores rows of up to MODEL_MAX_D floats");

static const char *const kind_names[] = {"dlrm", "wdl", "deepfm", "dcn"};
static const char *const interaction_names[] = {"dot", "cat"};

const char *model_kind_name(model_kind kind) {
    return (unsigned)kind < BP_ARRAY_LEN(kind_names) ? kind_names[kind] : "?";
}

// ---------------------------------------------------------------------------------------------
// Configuration

enum { MODEL_MAX_SIZE = 1 << 20, MODEL_MAX_F = 4096 };

static int has_wide(model_kind k) { return k == MODEL_WDL || k == MODEL_DEEPFM; }

int model_config_top_in(const model_config *c) {
    switch (c->kind) {
    case MODEL_DLRM:
        return c->interaction == MODEL_INTERACT_DOT ? nn_interact_dot_width(c->F, c->D) : c->D + c->F * c->D;
    case MODEL_WDL:
    case MODEL_DEEPFM:
    case MODEL_DCN: return c->Nd + c->F * c->D;
    }
    return 0;
}

static int check_sizes(const char *flag, const int *sizes, int n) {
    if (n < 1 || n > MODEL_MAX_MLP)
        return bp_fail(BP_EUSAGE, "--%s: expected 1 to %d sizes, got %d", flag, MODEL_MAX_MLP, n);
    for (int i = 0; i < n; i++)
        if (sizes[i] < 1 || sizes[i] > MODEL_MAX_SIZE)
            return bp_fail(BP_EUSAGE, "--%s: size %d is out of range [1, %d]", flag, sizes[i], MODEL_MAX_SIZE);
    return 0;
}

int model_config_validate(const model_config *c) {
    int rc;
    if ((unsigned)c->kind >= BP_ARRAY_LEN(kind_names))
        return bp_fail(BP_EUSAGE, "--model: unknown model %d (expected dlrm|wdl|deepfm|dcn)", (int)c->kind);
    const char *name = model_kind_name(c->kind);
    if (c->Nd < 0 || c->Nd > MODEL_MAX_SIZE)
        return bp_fail(BP_EUSAGE, "model: the dataset's %d dense features are out of range", c->Nd);
    if (c->F < 1 || c->F > MODEL_MAX_F)
        return bp_fail(BP_EUSAGE, "model: the dataset's %d sparse features are out of range [1, %d]", c->F,
                       MODEL_MAX_F);
    if (c->D < 1 || c->D > MODEL_MAX_D)
        return bp_fail(BP_EUSAGE, "--arch-sparse-feature-size: %d is out of range [1, %d]", c->D, MODEL_MAX_D);
    int want_E = has_wide(c->kind) ? c->D + 1 : c->D;
    if (want_E > EMB_MAX_DIM) // the wide weight makes a row one float longer than D
        return bp_fail(BP_EUSAGE, "--arch-sparse-feature-size: %d is out of range [1, %d] for --model %s (its rows "
                       "hold D + 1 floats, the last the wide weight)", c->D, EMB_MAX_DIM - 1, name);
    if (c->E != want_E)
        return bp_fail(BP_EUSAGE, "model: --model %s with embedding size %d reads rows of %d floats, not %d", name,
                       c->D, want_E, c->E);
    if (c->kind == MODEL_DLRM) {
        if ((rc = check_sizes("arch-mlp-bot", c->bot, c->n_bot))) return rc;
        if (c->n_bot < 2)
            return bp_fail(BP_EUSAGE, "--arch-mlp-bot: expected at least two sizes (input and output), got %d",
                           c->n_bot);
        if (c->Nd == 0)
            return bp_fail(BP_EUSAGE, "--model dlrm: the dataset has no dense features for the bottom MLP "
                                      "(use --model wdl, deepfm or dcn)");
        if (c->bot[0] != c->Nd)
            return bp_fail(BP_EUSAGE, "--arch-mlp-bot: first size %d must equal the dataset's %d dense features "
                           "(the default, 13-512-256-64-16, is Criteo's; e.g. --arch-mlp-bot %d-64-%d)", c->bot[0],
                           c->Nd, c->Nd, c->D);
        if (c->bot[c->n_bot - 1] != c->D)
            return bp_fail(BP_EUSAGE, "--arch-mlp-bot: last size %d must equal --arch-sparse-feature-size %d",
                           c->bot[c->n_bot - 1], c->D);
        if ((unsigned)c->interaction >= BP_ARRAY_LEN(interaction_names))
            return bp_fail(BP_EUSAGE, "--arch-interaction-op: unknown operation %d (expected dot|cat)",
                           (int)c->interaction);
    } else if (c->n_bot != 0) {
        return bp_fail(BP_EUSAGE, "--arch-mlp-bot: only --model dlrm has a bottom MLP (this is --model %s)", name);
    }
    if ((rc = check_sizes("arch-mlp-top", c->top, c->n_top))) return rc;
    if (c->top[c->n_top - 1] != 1)
        return bp_fail(BP_EUSAGE, "--arch-mlp-top: last size %d must be 1 (the logit)", c->top[c->n_top - 1]);
    int top_in = model_config_top_in(c);
    if (top_in > MODEL_MAX_SIZE)
        return bp_fail(BP_EUSAGE, "--model %s: the top MLP's input would be %d wide (limit %d)", name, top_in,
                       MODEL_MAX_SIZE);
    if (c->kind == MODEL_DCN) {
        if (c->cross_layers < 0 || c->cross_layers > MODEL_MAX_CROSS)
            return bp_fail(BP_EUSAGE, "--dcn-cross-layers: %d is out of range [0, %d]", c->cross_layers,
                           MODEL_MAX_CROSS);
        int d = c->Nd + c->F * c->D;
        if (c->cross_rank < 0 || c->cross_rank >= d)
            return bp_fail(BP_EUSAGE,
                           "--dcn-rank: %d must be below the cross width %d (%d dense + %d x %d embedding); "
                           "use 0 for full rank",
                           c->cross_rank, d, c->Nd, c->F, c->D);
    }
    return 0;
}

int model_config_from_flags(model_config *cfg, const model_flags *f, int Nd, int F) {
    model_config c = {0};
    c.kind = (model_kind)f->kind;
    c.Nd = Nd, c.F = F, c.D = f->D;
    c.E = has_wide(c.kind) ? c.D + 1 : c.D;
    if (c.kind == MODEL_DLRM) c.interaction = (model_interaction)f->interaction;
    int n;
    if (c.kind == MODEL_DLRM) {
        const char *bot = f->mlp_bot ? f->mlp_bot : MODEL_DEFAULT_MLP_BOT;
        if ((n = cli_parse_dims("arch-mlp-bot", bot, c.bot, MODEL_MAX_MLP)) < 0) return n;
        c.n_bot = n;
    } else if (f->mlp_bot) {
        return bp_fail(BP_EUSAGE, "--arch-mlp-bot: only --model dlrm has a bottom MLP (this is --model %s)",
                       model_kind_name(c.kind));
    }
    if ((n = cli_parse_dims("arch-mlp-top", f->mlp_top ? f->mlp_top : MODEL_DEFAULT_MLP_TOP, c.top,
                            MODEL_MAX_MLP)) < 0)
        return n;
    c.n_top = n;
    if (c.kind == MODEL_DCN) c.cross_layers = f->cross_layers, c.cross_rank = f->cross_rank;
    int rc = model_config_validate(&c);
    if (rc) return rc;
    *cfg = c;
    return 0;
}

int model_flags_check_given(const model_flags *f, const cli_opt *opts, const cli_given *g) {
    static const struct {
        const char *flag;
        model_kind kind;
        const char *what;
    } own[] = {
        {"arch-interaction-op", MODEL_DLRM, "a feature interaction"},
        {"dcn-cross-layers", MODEL_DCN, "cross layers"},
        {"dcn-rank", MODEL_DCN, "cross layers"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(own); i++)
        if ((model_kind)f->kind != own[i].kind && cli_was_given(g, opts, own[i].flag))
            return bp_fail(BP_EUSAGE, "--%s: only --model %s has %s (this is --model %s)", own[i].flag,
                           model_kind_name(own[i].kind), own[i].what, model_kind_name((model_kind)f->kind));
    return 0;
}

int model_config_parse(model_config *cfg, const char *args, int Nd, int F) {
    model_flags f;
    const cli_opt opts[] = {MODEL_CLI_OPTS(&f), CLI_END};
    char *copy = bp_xstrdup(args ? args : "");
    char *argv[130];
    int argc = 0;
    argv[argc++] = "model";
    for (char *save = NULL, *tok = strtok_r(copy, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        if (argc == (int)BP_ARRAY_LEN(argv)) {
            free(copy);
            return bp_fail(BP_EUSAGE, "model: too many flags in '%s'", args);
        }
        argv[argc++] = tok;
    }
    char **pos = NULL;
    int npos = 0;
    cli_given given;
    int rc = cli_parse_given("model", "[flags]", opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) rc = bp_fail(BP_EUSAGE, "model: --help is not a model flag");
    if (rc == 0 && npos > 0) rc = bp_fail(BP_EUSAGE, "model: unexpected argument '%s' in '%s'", pos[0], args);
    if (rc == 0) rc = model_flags_check_given(&f, opts, &given);
    if (rc == 0) rc = model_config_from_flags(cfg, &f, Nd, F);
    free(pos);
    free(copy);
    return rc;
}

// Appends printf output to buf at *len, keeping track of the untruncated length.
static void fmt_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fmt_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *len += (size_t)k;
}

static void fmt_sizes(char *buf, size_t cap, size_t *len, const int *sizes, int n) {
    for (int i = 0; i < n; i++) fmt_add(buf, cap, len, i ? "-%d" : "%d", sizes[i]);
}

int model_config_format(const model_config *c, char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = 0;
    fmt_add(buf, cap, &len, "--model %s", model_kind_name(c->kind));
    if (c->kind == MODEL_DLRM) {
        fmt_add(buf, cap, &len, " --arch-mlp-bot ");
        fmt_sizes(buf, cap, &len, c->bot, c->n_bot);
    }
    fmt_add(buf, cap, &len, " --arch-mlp-top ");
    fmt_sizes(buf, cap, &len, c->top, c->n_top);
    fmt_add(buf, cap, &len, " --arch-sparse-feature-size %d", c->D);
    if (c->kind == MODEL_DLRM)
        fmt_add(buf, cap, &len, " --arch-interaction-op %s",
                (unsigned)c->interaction < 2 ? interaction_names[c->interaction] : "?");
    if (c->kind == MODEL_DCN) fmt_add(buf, cap, &len, " --dcn-cross-layers %d --dcn-rank %d", c->cross_layers, c->cross_rank);
    return (int)len;
}

double model_flops_per_sample(const model_config *c, int training) {
    double fwd = 0.0, bwd = 0.0; // multiply-adds
    if (c->kind == MODEL_DLRM) {
        for (int l = 0; l + 1 < c->n_bot; l++) {
            double mac = (double)c->bot[l] * c->bot[l + 1];
            fwd += mac;
            bwd += l == 0 ? mac : 2 * mac; // no gradient for the data itself
        }
        if (c->interaction == MODEL_INTERACT_DOT) {
            double mac = (double)c->F * (c->F + 1) / 2 * c->D;
            fwd += mac, bwd += 2 * mac;
        }
    }
    if (c->kind == MODEL_DCN) {
        double d = (double)c->Nd + (double)c->F * c->D;
        double mac = c->cross_rank ? 2.0 * d * c->cross_rank : d * d;
        fwd += c->cross_layers * mac, bwd += c->cross_layers * 2 * mac;
    }
    if (has_wide(c->kind)) fwd += c->Nd, bwd += c->Nd;
    if (c->kind == MODEL_DEEPFM) fwd += (double)c->F * c->D, bwd += (double)c->F * c->D;
    double in = model_config_top_in(c);
    for (int l = 0; l < c->n_top; l++) {
        fwd += in * c->top[l], bwd += 2 * in * c->top[l];
        in = c->top[l];
    }
    return 2.0 * (fwd + (training ? bwd : 0.0));
}

// ---------------------------------------------------------------------------------------------
// Layout.  Every tensor and activation starts on a 64-byte boundary.

enum { MODEL_ALIGN = 16 }; // floats
static size_t round_align(size_t n) { return (n + MODEL_ALIGN - 1) / MODEL_ALIGN * MODEL_ALIGN; }
#define MODEL_MAX_PTAB (4 * MODEL_MAX_MLP + 3 * MODEL_MAX_CROSS + 2)

static size_t param_add(model *m, int ndim, int rows, int cols, const char *fmt, int idx) {
    BP_ASSERT(m->n_ptab < MODEL_MAX_PTAB);
    model_param *p = &m->ptab[m->n_ptab++];
    snprintf(p->name, sizeof p->name, fmt, idx);
    p->off = m->n_params;
    p->ndim = ndim;
    p->shape[0] = rows, p->shape[1] = ndim == 2 ? cols : 1;
    p->n = (size_t)rows * p->shape[1];
    m->n_params += round_align(p->n);
    m->n_weights += p->n;
    return p->off;
}

static model_linear linear_add(model *m, const char *prefix, int l, int in, int out) {
    char fmt[32];
    model_linear L = {.in = in, .out = out};
    snprintf(fmt, sizeof fmt, "%s.%%d.W", prefix);
    L.W = param_add(m, 2, out, in, fmt, l);
    snprintf(fmt, sizeof fmt, "%s.%%d.b", prefix);
    L.b = param_add(m, 1, out, 0, fmt, l);
    return L;
}

// Carves activations out of one slab; with base NULL it only counts.
typedef struct {
    float *base;
    size_t n;
} carver;
static float *carve(carver *c, size_t n) {
    float *p = c->base ? c->base + c->n : NULL;
    c->n += round_align(n);
    return p;
}

static void layout_acts(model *m, carver *cv) {
    const model_config *c = &m->cfg;
    const size_t B = (size_t)m->max_batch;
    for (int l = 0; l < m->n_bot; l++) {
        m->bot_a[l] = carve(cv, B * m->bot[l].out);
        m->bot_da[l] = carve(cv, B * m->bot[l].out);
    }
    size_t x_w = c->kind == MODEL_DCN ? (size_t)m->d : (size_t)m->top_in;
    m->x_in = carve(cv, B * x_w);
    m->dx_in = carve(cv, B * x_w);
    if (c->kind == MODEL_DCN) {
        m->cx[0] = m->x_in, m->dcx[0] = m->dx_in;
        for (int l = 0; l < c->cross_layers; l++) {
            m->cx[l + 1] = carve(cv, B * m->d);
            m->dcx[l + 1] = carve(cv, B * m->d);
            m->cu[l] = carve(cv, B * m->d);
            m->cp[l] = c->cross_rank ? carve(cv, B * c->cross_rank) : NULL;
        }
        m->cdu = carve(cv, B * m->d);
        m->cdp = c->cross_rank ? carve(cv, B * c->cross_rank) : NULL;
        m->cdx0 = carve(cv, B * m->d);
    }
    if (has_wide(c->kind)) m->wide_out = carve(cv, B);
    if (c->kind == MODEL_DEEPFM) m->fm_out = carve(cv, B);
    for (int l = 0; l < m->n_top; l++) {
        m->top_a[l] = carve(cv, B * m->top[l].out);
        m->top_da[l] = carve(cv, B * m->top[l].out);
    }
    if (c->kind == MODEL_DLRM && c->interaction == MODEL_INTERACT_DOT)
        m->scratch = carve(cv, nn_interact_dot_scratch(c->F, c->D));
}

// Zeroed, 64-byte aligned floats, or NULL.
static float *alloc_floats(size_t n) {
    size_t bytes = round_align(n ? n : 1) * sizeof(float);
    float *p = aligned_alloc(MODEL_ALIGN * sizeof(float), bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

// model_init up to the sizes: the parameter table and the counts of parameters and activations.
static int model_layout(model *m, const model_config *cfg, int max_batch) {
    memset(m, 0, sizeof *m);
    int rc = model_config_validate(cfg);
    if (rc) return rc;
    BP_ASSERT(max_batch >= 1);
    const model_config *c = &m->cfg;
    m->cfg = *cfg;
    m->max_batch = max_batch;
    m->top_in = model_config_top_in(c);
    m->d = c->Nd + c->F * c->D;
    m->ptab = bp_xcalloc(MODEL_MAX_PTAB, sizeof *m->ptab);

    if (c->kind == MODEL_DLRM) {
        m->n_bot = c->n_bot - 1;
        for (int l = 0; l < m->n_bot; l++) m->bot[l] = linear_add(m, "bot", l, c->bot[l], c->bot[l + 1]);
    }
    if (has_wide(c->kind)) {
        m->wide_w = param_add(m, 1, c->Nd, 0, "wide.w", 0);
        m->wide_b = param_add(m, 1, 1, 0, "wide.b", 0);
    }
    if (c->kind == MODEL_DCN)
        for (int l = 0; l < c->cross_layers; l++) {
            model_cross *x = &m->cross[l];
            if (c->cross_rank == 0) {
                x->W = param_add(m, 2, m->d, m->d, "cross.%d.W", l);
            } else {
                x->U = param_add(m, 2, m->d, c->cross_rank, "cross.%d.U", l);
                x->V = param_add(m, 2, m->d, c->cross_rank, "cross.%d.V", l);
            }
            x->b = param_add(m, 1, m->d, 0, "cross.%d.b", l);
        }
    m->n_top = c->n_top;
    for (int l = 0, in = m->top_in; l < m->n_top; in = c->top[l], l++) m->top[l] = linear_add(m, "top", l, in, c->top[l]);

    carver count = {0};
    layout_acts(m, &count);
    m->n_acts = count.n;
    return 0;
}

int model_sizes(const model_config *cfg, int max_batch, size_t *n_params, size_t *n_acts) {
    model m;
    int rc = model_layout(&m, cfg, max_batch);
    if (!rc) *n_params = m.n_params, *n_acts = m.n_acts;
    model_free(&m);
    return rc;
}

int model_init(model *m, const model_config *cfg, int max_batch) {
    int rc = model_layout(m, cfg, max_batch);
    if (rc) return rc;
    m->params = alloc_floats(m->n_params);
    m->grads = alloc_floats(m->n_params);
    m->acts = alloc_floats(m->n_acts);
    if (!m->params || !m->grads || !m->acts) {
        char a[32], b[32];
        rc = bp_fail(BP_ENOMEM, "model: cannot allocate %s of parameters and %s of activations (max batch %d)",
                     bp_fmt_bytes(a, sizeof a, 2.0 * m->n_params * sizeof(float)),
                     bp_fmt_bytes(b, sizeof b, (double)m->n_acts * sizeof(float)), max_batch);
        model_free(m);
        return rc;
    }
    carver place = {.base = m->acts};
    layout_acts(m, &place);
    return 0;
}

void model_free(model *m) {
    if (!m) return;
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->ptab);
    memset(m, 0, sizeof *m);
}

static void fill_normal(float *p, size_t n, double std, bp_rng *rng) {
    for (size_t i = 0; i < n; i++) p[i] = (float)(std * bp_rng_normal(rng));
}

void model_init_params(model *m, bp_rng *rng) {
    memset(m->params, 0, m->n_params * sizeof *m->params);
    for (int i = 0; i < m->n_ptab; i++) {
        const model_param *p = &m->ptab[i];
        float *x = m->params + p->off;
        const char *kind = strrchr(p->name, '.') + 1;
        if (strncmp(p->name, "wide.", 5) == 0) continue; // zero
        if (strncmp(p->name, "cross.", 6) == 0) {
            if (strcmp(kind, "b") != 0) fill_normal(x, p->n, sqrt(2.0 / (p->shape[0] + p->shape[1])), rng);
            continue;
        }
        // bot.* and top.*: the DLRM reference's Linear initialisation.
        if (strcmp(kind, "W") == 0) fill_normal(x, p->n, sqrt(2.0 / (p->shape[0] + p->shape[1])), rng);
        else fill_normal(x, p->n, sqrt(1.0 / p->shape[0]), rng);
    }
}

// Zeroing the gradient slab (1.9 MB for the Kaggle DLRM) and the rows' gradients is split over
// the pool (nn.h) in parts of at least ZERO_MIN_PART floats: at batch 128 it was a few percent of
// a step.
enum { ZERO_MIN_PART = 1 << 14 };

typedef struct {
    float *p;
    size_t n;
} zero_job;

static void zero_part(void *ctx, int p, int n) {
    const zero_job *j = ctx;
    size_t i0 = (size_t)nn_part_begin((long)j->n, p, n), i1 = (size_t)nn_part_begin((long)j->n, p + 1, n);
    memset(j->p + i0, 0, (i1 - i0) * sizeof *j->p);
}

static void zero_floats(float *p, size_t n) {
    zero_job j = {p, n};
    int parts = (int)BP_MIN((size_t)nn_threads(), n / ZERO_MIN_PART);
    nn_pool_run(parts < 1 ? 1 : parts, zero_part, &j);
}

void model_zero_grad(model *m) { zero_floats(m->grads, m->n_params); }

const model_param *model_param_find(const model *m, const char *name) {
    for (int i = 0; i < m->n_ptab; i++)
        if (strcmp(m->ptab[i].name, name) == 0) return &m->ptab[i];
    return NULL;
}

void model_print(const model *m, FILE *out) {
    char cfg[512];
    model_config_format(&m->cfg, cfg, sizeof cfg);
    fprintf(out, "model: %s\n", cfg);
    for (int i = 0; i < m->n_ptab; i++) {
        const model_param *p = &m->ptab[i];
        char shape[32];
        if (p->ndim == 2) snprintf(shape, sizeof shape, "(%d, %d)", p->shape[0], p->shape[1]);
        else snprintf(shape, sizeof shape, "(%d)", p->shape[0]);
        fprintf(out, "  %-14s %-14s %10zu\n", p->name, shape, p->n);
    }
    fprintf(out, "  %-29s %10zu  (%.1f MFLOP per sample per training step)\n", "total", m->n_weights,
            model_flops_per_sample(&m->cfg, 1) / 1e6);
}

// ---------------------------------------------------------------------------------------------
// Forward and backward.  The layers run in the order below; backward runs them in reverse.

// Each layer with its ReLU is one pass over the thread pool (nn_linear_relu_forward); backward,
// each ReLU's mask is applied by the product that computes its gradient (nn_relu_linear_backward),
// so top_da[l] and bot_da[l] hold gradients at the layer's output before its ReLU.
static void top_forward(model *m, const float *x, int B) {
    const float *P = m->params;
    for (int l = 0; l < m->n_top; l++) {
        const model_linear *L = &m->top[l];
        if (l + 1 < m->n_top) nn_linear_relu_forward(m->top_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
        else nn_linear_forward(m->top_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
        x = m->top_a[l];
    }
}

// The backward pass of an MLP (layers lay, activations a, output gradients da) as a stack for
// nn_linear_stack_backward, last layer first: layer l > 0 takes layer l-1's ReLU output, layer 0
// takes x, and its input gradient goes to dx (NULL: not needed).
static void mlp_grads(nn_linear_grad *S, const model_linear *lay, int n, float *const *a, float *const *da,
                      const float *x, float *dx, const float *P, float *G) {
    for (int l = n - 1, i = 0; l >= 0; l--, i++) {
        const model_linear *L = &lay[l];
        S[i] = (nn_linear_grad){.dx = l ? da[l - 1] : dx, .dW = G + L->W, .db = G + L->b, .dy = da[l],
                                .x = l ? a[l - 1] : x, .W = P + L->W, .IN = L->in, .OUT = L->out, .x_relu = l > 0};
    }
}

// The top MLP's stack from dlogit (copied to its output gradient) to the gradient of its input
// x_in, written to dx_in.
static void top_grads(model *m, nn_linear_grad *S, const float *x_in, float *dx_in, const float *dlogit, int B) {
    memcpy(m->top_da[m->n_top - 1], dlogit, (size_t)B * sizeof *dlogit);
    mlp_grads(S, m->top, m->n_top, m->top_a, m->top_da, x_in, dx_in, m->params, m->grads);
}

// dlogit -> the gradient of the top MLP's input, written to dx_in.
static void top_backward(model *m, const float *x_in, float *dx_in, const float *dlogit, int B) {
    nn_linear_grad S[MODEL_MAX_MLP];
    top_grads(m, S, x_in, dx_in, dlogit, B);
    nn_linear_stack_backward(S, m->n_top, B);
}

void model_forward(model *m, const float *dense, const float *emb, int B, float *logit) {
    BP_ASSERTF(B >= 0 && B <= m->max_batch, "model_forward: batch %d exceeds max_batch %d", B, m->max_batch);
    m->B = B;
    if (B == 0) return;
    const model_config *c = &m->cfg;
    const float *P = m->params;
    const int Nd = c->Nd, F = c->F, D = c->D, E = c->E;
    const float *top_x = m->x_in;
    switch (c->kind) {
    case MODEL_DLRM: {
        const float *x = dense;
        for (int l = 0; l < m->n_bot; l++) {
            const model_linear *L = &m->bot[l];
            nn_linear_relu_forward(m->bot_a[l], x, P + L->W, P + L->b, B, L->in, L->out);
            x = m->bot_a[l];
        }
        if (c->interaction == MODEL_INTERACT_DOT) nn_interact_dot_forward(m->x_in, x, emb, B, F, D, E, m->scratch);
        else nn_concat_forward(m->x_in, x, emb, B, D, F, D, E);
        break;
    }
    case MODEL_WDL:
    case MODEL_DEEPFM:
        nn_concat_forward(m->x_in, dense, emb, B, Nd, F, D, E);
        nn_wide_forward(m->wide_out, dense, emb, P + m->wide_w, P + m->wide_b, B, Nd, F, D, E);
        if (c->kind == MODEL_DEEPFM) nn_fm_forward(m->fm_out, emb, B, F, D, E);
        break;
    case MODEL_DCN:
        nn_concat_forward(m->cx[0], dense, emb, B, Nd, F, D, E);
        for (int l = 0; l < c->cross_layers; l++) {
            const model_cross *X = &m->cross[l];
            if (c->cross_rank == 0)
                nn_cross_forward(m->cx[l + 1], m->cu[l], m->cx[0], m->cx[l], P + X->W, P + X->b, B, m->d);
            else
                nn_cross_lowrank_forward(m->cx[l + 1], m->cu[l], m->cp[l], m->cx[0], m->cx[l], P + X->U, P + X->V,
                                         P + X->b, B, m->d, c->cross_rank);
        }
        top_x = m->cx[c->cross_layers];
        break;
    }
    top_forward(m, top_x, B);
    const float *deep = m->top_a[m->n_top - 1]; // (B, 1)
    for (int s = 0; s < B; s++) {
        float z = deep[s];
        if (m->wide_out) z += m->wide_out[s];
        if (m->fm_out) z += m->fm_out[s];
        logit[s] = z;
    }
}

// DLRM's stage between its MLPs, for the samples [s0, s1): the interaction's backward pass (the
// gradients of the bottom MLP's output and of the rows) and the bottom MLP's last ReLU; on part
// p's share of the scratch.
typedef struct {
    model *m;
    const float *emb;
    float *d_emb;
} dlrm_mid_job;

static void dlrm_mid(void *ctx, int s0, int s1, int part) {
    const dlrm_mid_job *j = ctx;
    model *m = j->m;
    const model_config *c = &m->cfg;
    const int F = c->F, D = c->D, E = c->E, last = m->n_bot - 1, n = s1 - s0;
    float *dz = m->bot_da[last] + (size_t)s0 * D, *demb = j->d_emb + (size_t)s0 * F * E;
    const float *z = m->bot_a[last] + (size_t)s0 * D, *emb = j->emb + (size_t)s0 * F * E;
    const float *dout = m->dx_in + (size_t)s0 * m->top[0].in;
    if (c->interaction == MODEL_INTERACT_DOT)
        nn_interact_dot_backward(dz, demb, dout, z, emb, n, F, D, E,
                                 m->scratch + nn_interact_dot_scratch_part(F, D, part));
    else
        nn_concat_backward(dz, demb, dout, n, D, F, D, E);
    nn_relu_backward(dz, dz, z, (size_t)n * D);
}

void model_backward(model *m, const float *dense, const float *emb, const float *dlogit, float *d_emb,
                    float *d_dense) {
    const int B = m->B;
    if (B == 0) return;
    const model_config *c = &m->cfg;
    const float *P = m->params;
    float *G = m->grads;
    const int Nd = c->Nd, F = c->F, D = c->D, E = c->E;
    zero_floats(d_emb, (size_t)B * F * E);
    switch (c->kind) {
    case MODEL_DLRM: {
        nn_linear_grad up[MODEL_MAX_MLP], low[MODEL_MAX_MLP];
        top_grads(m, up, m->x_in, m->dx_in, dlogit, B);
        mlp_grads(low, m->bot, m->n_bot, m->bot_a, m->bot_da, dense, d_dense, P, G);
        dlrm_mid_job mid = {m, emb, d_emb};
        nn_stacks_backward(up, m->n_top, dlrm_mid, &mid, low, m->n_bot, B);
        break;
    }
    case MODEL_WDL:
    case MODEL_DEEPFM:
        top_backward(m, m->x_in, m->dx_in, dlogit, B);
        nn_concat_backward(d_dense, d_emb, m->dx_in, B, Nd, F, D, E);
        nn_wide_backward(d_dense, G + m->wide_w, G + m->wide_b, d_emb, dlogit, dense, P + m->wide_w, B, Nd, F, D, E);
        if (c->kind == MODEL_DEEPFM) nn_fm_backward(d_emb, dlogit, emb, B, F, D, E);
        break;
    case MODEL_DCN: {
        const int L = c->cross_layers, r = c->cross_rank;
        const size_t n = (size_t)B * m->d;
        top_backward(m, m->cx[L], m->dcx[L], dlogit, B);
        memset(m->cdx0, 0, n * sizeof *m->cdx0);
        for (int l = L - 1; l >= 0; l--) {
            const model_cross *X = &m->cross[l];
            if (r == 0)
                nn_cross_backward(m->cdx0, m->dcx[l], G + X->W, G + X->b, m->cdu, m->dcx[l + 1], m->cx[0], m->cx[l],
                                  m->cu[l], P + X->W, B, m->d);
            else
                nn_cross_lowrank_backward(m->cdx0, m->dcx[l], G + X->U, G + X->V, G + X->b, m->cdu, m->cdp,
                                          m->dcx[l + 1], m->cx[0], m->cx[l], m->cu[l], m->cp[l], P + X->U,
                                          P + X->V, B, m->d, r);
        }
        for (size_t i = 0; i < n; i++) m->dcx[0][i] += m->cdx0[i]; // x0 is also x_0 of the chain
        nn_concat_backward(d_dense, d_emb, m->dcx[0], B, Nd, F, D, E);
        break;
    }
    }
}

// ---------------------------------------------------------------------------------------------
// Loss

double bce_with_logits(const float *logit, const uint8_t *label, int B, float scale, float *dlogit) {
    double sum = 0.0;
    for (int i = 0; i < B; i++) {
        BP_ASSERT(label[i] <= 1);
        double z = logit[i], y = label[i];
        // log(1 + e^z) - y z, written so that neither exp can overflow.
        sum += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
        if (dlogit) {
            double p = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
            dlogit[i] = (float)(scale * (p - y));
        }
    }
    return sum;
}
