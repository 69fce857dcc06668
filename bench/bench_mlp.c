// bench_mlp: throughput of the dense part.  Prints, for 1 and 2 OpenBLAS threads:
//   - the sgemm rate of a big square product (the reference "peak" of this run);
//   - forward + backward of the DLRM Criteo Kaggle MLPs (bottom 13-512-256-64-16, top
//     367-512-256-1) at batch 128 and 2048, in GFLOP/s and as a share of that peak, layer by layer
//     and as the model runs them (ReLU fused into the products, the backward pass as one stack);
//     with 2 threads also two independent single-threaded halves of the batch side by side (no
//     synchronisation, no reduction): the ceiling of any way to split the MLPs over the two threads;
//   - the dot interaction (F = 26, D = 16 and 64) against its 4-float path and a plain pair-by-pair loop;
//   - samples/s of the four models' forward + loss + backward on random embedding rows.
// OPENBLAS_CORETYPE is left as the environment sets it; the core OpenBLAS reports is printed.
// Each MLP figure is compared with the sgemm rate measured right before and right after it (their
// mean), so that a change in the machine's load between the two shows up as a spread, not as a
// wrong ratio.
// Usage: bench_mlp [seconds per measurement, default 0.5]
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common.h"
#include "model.h"
#include "nn.h"

extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int);

static double min_time = 0.5;

// Best seconds per call of fn over 5 rounds of at least min_time / 5 each.  The machine is shared:
// the best round is the one least disturbed by others.
static double time_best(void (*fn)(void *), void *ctx) {
    fn(ctx); // warm up
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        int n = 0;
        double t0 = bp_now(), t;
        do {
            fn(ctx);
            n++;
        } while ((t = bp_now() - t0) < min_time / 5);
        best = BP_MIN(best, t / n);
    }
    return best;
}

static float *randn(size_t n, bp_rng *rng, float scale) {
    float *p = bp_xmalloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = scale * (float)bp_rng_normal(rng);
    return p;
}

// ---------------------------------------------------------------------------------------------
// Square sgemm

typedef struct {
    int N;
    float *A, *B, *C;
} gemm_ctx;
static void gemm_run(void *p) {
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->N, g->N, g->N, 1.0f, g->A, g->N, g->B, g->N, 0.0f, g->C,
                g->N);
}

// ---------------------------------------------------------------------------------------------
// One MLP (ReLU after every layer but, when last_linear, the last), forward + backward.

typedef struct {
    int n, sizes[8], B, last_linear, input_grad;
    float *W[8], *b[8], *dW[8], *db[8], *a[8], *da[8], *x, *dx;
} mlp_ctx;

static void mlp_setup(mlp_ctx *m, const int *sizes, int n_sizes, int B, int last_linear, int input_grad, bp_rng *rng) {
    memset(m, 0, sizeof *m);
    m->n = n_sizes - 1, m->B = B, m->last_linear = last_linear, m->input_grad = input_grad;
    memcpy(m->sizes, sizes, (size_t)n_sizes * sizeof *sizes);
    m->x = randn((size_t)B * sizes[0], rng, 1.0f);
    m->dx = randn((size_t)B * sizes[0], rng, 1.0f);
    for (int l = 0; l < m->n; l++) {
        int in = sizes[l], out = sizes[l + 1];
        m->W[l] = randn((size_t)out * in, rng, sqrtf(2.0f / (in + out)));
        m->b[l] = randn(out, rng, 0.01f);
        m->dW[l] = bp_xcalloc((size_t)out * in, sizeof(float));
        m->db[l] = bp_xcalloc(out, sizeof(float));
        m->a[l] = bp_xcalloc((size_t)B * out, sizeof(float));
        m->da[l] = randn((size_t)B * out, rng, 0.01f);
    }
}

static void mlp_free(mlp_ctx *m) {
    free(m->x), free(m->dx);
    for (int l = 0; l < m->n; l++) free(m->W[l]), free(m->b[l]), free(m->dW[l]), free(m->db[l]), free(m->a[l]), free(m->da[l]);
}

static double mlp_flops(const mlp_ctx *m) {
    double f = 0;
    for (int l = 0; l < m->n; l++) {
        double mac = (double)m->sizes[l] * m->sizes[l + 1] * m->B;
        f += 2 * mac + 2 * mac + (l > 0 || m->input_grad ? 2 * mac : 0); // forward, dW, dx
    }
    return f;
}

static void mlp_run(void *p) {
    mlp_ctx *m = p;
    const float *x = m->x;
    for (int l = 0; l < m->n; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        nn_linear_forward(m->a[l], x, m->W[l], m->b[l], m->B, in, out);
        if (!(m->last_linear && l == m->n - 1)) nn_relu_forward(m->a[l], m->a[l], (size_t)m->B * out);
        x = m->a[l];
    }
    for (int l = m->n - 1; l >= 0; l--) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        if (!(m->last_linear && l == m->n - 1)) nn_relu_backward(m->da[l], m->da[l], m->a[l], (size_t)m->B * out);
        float *dx = l ? m->da[l - 1] : m->input_grad ? m->dx : NULL;
        nn_linear_backward(dx, m->dW[l], m->db[l], m->da[l], l ? m->a[l - 1] : m->x, m->W[l], m->B, in, out);
    }
}

// The same work as the model runs it: each hidden layer fused with its ReLU, the backward pass as
// one stack (on two threads, input and weight gradients as two chains side by side).
static void mlp_run_model(void *p) {
    mlp_ctx *m = p;
    const float *x = m->x;
    for (int l = 0; l < m->n; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        if (m->last_linear && l == m->n - 1) nn_linear_forward(m->a[l], x, m->W[l], m->b[l], m->B, in, out);
        else nn_linear_relu_forward(m->a[l], x, m->W[l], m->b[l], m->B, in, out);
        x = m->a[l];
    }
    const int top = m->n - 1;
    if (!m->last_linear) nn_relu_backward(m->da[top], m->da[top], m->a[top], (size_t)m->B * m->sizes[top + 1]);
    nn_linear_grad S[8];
    for (int l = top, i = 0; l >= 0; l--, i++)
        S[i] = (nn_linear_grad){.dx = l ? m->da[l - 1] : m->input_grad ? m->dx : NULL, .dW = m->dW[l], .db = m->db[l],
                                .dy = m->da[l], .x = l ? m->a[l - 1] : m->x, .W = m->W[l], .IN = m->sizes[l],
                                .OUT = m->sizes[l + 1], .x_relu = l > 0};
    nn_linear_stack_backward(S, m->n, m->B);
}

// The ceiling of any two-thread split at a batch: each of two threads runs the whole MLP, forward
// and backward, on its own half of the batch, single-threaded, into its own gradients, with no
// synchronisation between the layers and no reduction of the two halves' weight gradients (which
// a real split needs).  OpenBLAS is set to one thread around it, so each product is one sgemm.
typedef struct {
    mlp_ctx half[2];
} halves_ctx;
static void halves_part(void *p, int part, int n) { mlp_run(&((halves_ctx *)p)->half[part]); }
static void halves_run(void *p) { nn_pool_run(2, halves_part, p); }

// One row of the MLP table: seconds t for flops, as GFLOP/s and as a share of peak (GFLOP/s).
static void mlp_row(const char *what, int B, double t, double flops, double peak, const char *note) {
    printf("%-28s %6d %10.3f %9.1f %7.0f%%%s\n", what, B, t * 1e3, flops / t / 1e9, 100 * flops / t / 1e9 / peak, note);
}

// ---------------------------------------------------------------------------------------------
// Dot interaction: the kernel against a pair-by-pair loop over the same data.

typedef struct {
    int B, F, D;
    float *z, *emb, *out, *dout, *dz, *demb, *scratch;
} dot_ctx;

static void dot_kernel_run(void *p) {
    dot_ctx *c = p;
    nn_interact_dot_forward(c->out, c->z, c->emb, c->B, c->F, c->D, c->D, c->scratch);
    nn_interact_dot_backward(c->dz, c->demb, c->dout, c->z, c->emb, c->B, c->F, c->D, c->D, c->scratch);
}

static void dot_plain_run(void *p) {
    dot_ctx *c = p;
    const int B = c->B, F = c->F, D = c->D, W = nn_interact_dot_width(F, D);
    for (int s = 0; s < B; s++) {
        const float *T[65];
        T[0] = c->z + (size_t)s * D;
        for (int f = 0; f < F; f++) T[f + 1] = c->emb + ((size_t)s * F + f) * D;
        float *o = c->out + (size_t)s * W;
        memcpy(o, T[0], (size_t)D * sizeof *o);
        int n = D;
        for (int i = 1; i <= F; i++)
            for (int j = 0; j < i; j++) {
                float acc = 0;
                for (int k = 0; k < D; k++) acc += T[i][k] * T[j][k];
                o[n++] = acc;
            }
    }
    for (int s = 0; s < B; s++) {
        const float *T[65], *g = c->dout + (size_t)s * W;
        float *dT[65];
        T[0] = c->z + (size_t)s * D, dT[0] = c->dz + (size_t)s * D;
        for (int f = 0; f < F; f++) T[f + 1] = c->emb + ((size_t)s * F + f) * D, dT[f + 1] = c->demb + ((size_t)s * F + f) * D;
        memcpy(dT[0], g, (size_t)D * sizeof(float));
        int n = D;
        for (int i = 1; i <= F; i++)
            for (int j = 0; j < i; j++, n++)
                for (int k = 0; k < D; k++) dT[i][k] += g[n] * T[j][k], dT[j][k] += g[n] * T[i][k];
    }
}

// ---------------------------------------------------------------------------------------------
// A whole model step.

typedef struct {
    model m;
    int B;
    float *dense, *emb, *logit, *dlogit, *d_emb;
    uint8_t *label;
} step_ctx;

static void step_run(void *p) {
    step_ctx *s = p;
    model_forward(&s->m, s->dense, s->emb, s->B, s->logit);
    bce_with_logits(s->logit, s->label, s->B, 1.0f / s->B, s->dlogit);
    model_zero_grad(&s->m);
    model_backward(&s->m, s->dense, s->emb, s->dlogit, s->d_emb, NULL);
}

static double model_samples_per_s(const char *flags, int B, bp_rng *rng, double *gflops) {
    step_ctx s = {.B = B};
    model_config cfg;
    int rc = model_config_parse(&cfg, flags, 13, 26);
    if (rc == 0) rc = model_init(&s.m, &cfg, B);
    if (rc) {
        fprintf(stderr, "bench_mlp: %s\n", bp_errmsg(rc));
        exit(1);
    }
    model_init_params(&s.m, rng);
    s.dense = randn((size_t)B * cfg.Nd, rng, 1.0f);
    s.emb = randn((size_t)B * cfg.F * cfg.E, rng, 0.1f);
    s.logit = bp_xmalloc(B * sizeof(float)), s.dlogit = bp_xmalloc(B * sizeof(float));
    s.d_emb = bp_xmalloc((size_t)B * cfg.F * cfg.E * sizeof(float));
    s.label = bp_xmalloc(B);
    for (int i = 0; i < B; i++) s.label[i] = (uint8_t)(bp_rng_below(rng, 4) == 0);
    double t = time_best(step_run, &s);
    *gflops = model_flops_per_sample(&cfg, 1) * B / t / 1e9;
    model_free(&s.m);
    free(s.dense), free(s.emb), free(s.logit), free(s.dlogit), free(s.d_emb), free(s.label);
    return B / t;
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[MIN_SECONDS]",
                   "dense-part throughput: sgemm peak, the DLRM MLPs forward + backward, the dot "
                   "interaction, 1 and 2 OpenBLAS threads; MIN_SECONDS per measurement"))
        return 0;
    if ((min_time = bench_num_arg(argc, argv, 1, min_time, 0.001, "SECONDS")) < 0) return 2;
    if (!(min_time > 0)) min_time = 0.5;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("bench_mlp: OpenBLAS core %s (OPENBLAS_CORETYPE=%s), %.2f s per measurement, best of 5 rounds\n",
           openblas_get_corename(), ct ? ct : "(unset)", min_time);
    bp_rng rng;
    bp_rng_seed(&rng, 1, 0);

    gemm_ctx g = {.N = 2048};
    g.A = randn((size_t)g.N * g.N, &rng, 1.0f), g.B = randn((size_t)g.N * g.N, &rng, 1.0f);
    g.C = bp_xmalloc((size_t)g.N * g.N * sizeof(float));
    const int bot[] = {13, 512, 256, 64, 16}, top[] = {367, 512, 256, 1};
    const int batches[] = {128, 2048};
    const char *models[][2] = {{"dlrm", ""},
                               {"wdl", "--model wdl"},
                               {"deepfm", "--model deepfm"},
                               {"dcn", "--model dcn"},
                               {"dcn-r64", "--model dcn --dcn-rank 64"}};

    for (int threads = 1; threads <= 2; threads++) {
        openblas_set_num_threads(threads);
        printf("\n== %d BLAS thread%s ==\n", threads, threads > 1 ? "s" : "");
        const double gemm_flop = 2.0 * g.N * g.N * (double)g.N;
        printf("%-28s %6s %10s %9s %8s\n", "DLRM Kaggle MLP fwd+bwd", "batch", "ms", "GFLOP/s", "of peak");
        for (int bi = 0; bi < 2; bi++) {
            int B = batches[bi];
            mlp_ctx mb, mt;
            mlp_setup(&mb, bot, 5, B, 0, 0, &rng);
            mlp_setup(&mt, top, 4, B, 1, 1, &rng);
            double p0 = gemm_flop / time_best(gemm_run, &g) / 1e9;
            double tb = time_best(mlp_run, &mb), tt = time_best(mlp_run, &mt);
            double p1 = gemm_flop / time_best(gemm_run, &g) / 1e9, peak = (p0 + p1) / 2;
            printf("  sgemm %dx%dx%d before/after: %.1f / %.1f GFLOP/s (peak = their mean)\n", g.N, g.N, g.N, p0, p1);
            double fb = mlp_flops(&mb), ft = mlp_flops(&mt);
            mlp_row("  bottom 13-512-256-64-16", B, tb, fb, peak, "");
            mlp_row("  top 367-512-256-1", B, tt, ft, peak, "");
            mlp_row("  both", B, tb + tt, fb + ft, peak, "");
            double mbt = time_best(mlp_run_model, &mb), mtt = time_best(mlp_run_model, &mt);
            mlp_row("  both, model's path", B, mbt + mtt, fb + ft, peak,
                    "   (fused ReLU, backward as one stack: as the model runs it)");
            if (threads == 2) {
                halves_ctx hb, ht;
                for (int h = 0; h < 2; h++) {
                    mlp_setup(&hb.half[h], bot, 5, B / 2, 0, 0, &rng);
                    mlp_setup(&ht.half[h], top, 4, B / 2, 1, 1, &rng);
                }
                openblas_set_num_threads(1);
                double hbt = time_best(halves_run, &hb), htt = time_best(halves_run, &ht);
                openblas_set_num_threads(2);
                mlp_row("  both, halves", B, hbt + htt, fb + ft, peak,
                        "   (two independent halves: the ceiling of a split)");
                for (int h = 0; h < 2; h++) mlp_free(&hb.half[h]), mlp_free(&ht.half[h]);
            }
            mlp_free(&mb), mlp_free(&mt);
        }

        if (threads == 1) // single-threaded kernels: once is enough
            for (int D = 16; D <= 64; D *= 4) {
                dot_ctx c = {.B = 2048, .F = 26, .D = D};
                int W = nn_interact_dot_width(c.F, c.D), K = c.F + 1;
                c.z = randn((size_t)c.B * c.D, &rng, 1), c.emb = randn((size_t)c.B * c.F * c.D, &rng, 1);
                c.out = bp_xmalloc((size_t)c.B * W * sizeof(float)), c.dout = randn((size_t)c.B * W, &rng, 1);
                c.dz = bp_xmalloc((size_t)c.B * c.D * sizeof(float)), c.demb = randn((size_t)c.B * c.F * c.D, &rng, 1);
                c.scratch = bp_xmalloc(nn_interact_dot_scratch(c.F, c.D) * sizeof(float));
                double tk = time_best(dot_kernel_run, &c), tp = time_best(dot_plain_run, &c);
                nn_set_simd(0);
                double t4 = time_best(dot_kernel_run, &c);
                nn_set_simd(1);
                // useful flops: the pairs below the diagonal forward, the symmetric product backward
                double fl = 2.0 * c.B * D * ((double)c.F * (c.F + 1) / 2 + (double)K * K);
                printf("dot interaction F=26 D=%d B=2048 fwd+bwd: kernel %.3f ms (%.1f GFLOP/s), its 4-float path %.3f ms "
                       "(%.1fx), pair-by-pair loop %.3f ms (%.1fx)\n",
                       D, tk * 1e3, fl / tk / 1e9, t4 * 1e3, t4 / tk, tp * 1e3, tp / tk);
                free(c.z), free(c.emb), free(c.out), free(c.dout), free(c.dz), free(c.demb), free(c.scratch);
            }

        printf("%-28s %6s %12s %9s\n", "model step (fwd+loss+bwd)", "batch", "samples/s", "GFLOP/s");
        for (int k = 0; k < (int)BP_ARRAY_LEN(models); k++)
            for (int bi = 0; bi < 2; bi++) {
                double gf, sps = model_samples_per_s(models[k][1], batches[bi], &rng, &gf);
                printf("  %-26s %6d %12.0f %9.1f\n", models[k][0], batches[bi], sps, gf);
            }
    }
    free(g.A), free(g.B), free(g.C);
    return 0;
}
