// Layer tests: every naive twin against central finite differences in double precision, and every
// float kernel against its naive twin, including the accumulate/overwrite conventions of nn.h.
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "nn.h"
#include "test.h"

// A layer under test: up to 8 variables (inputs and parameters), each with a gradient that the
// backward pass either accumulates into or overwrites, and one output.  The callbacks read the
// dims and variables from the case; the *_naive ones use the double arrays, the fast ones the
// float mirrors.
#define LC_MAXV 8
typedef struct lcase lcase;
struct lcase {
    const char *name;
    int nv;
    const char *vname[LC_MAXV];
    size_t n[LC_MAXV];
    int accum[LC_MAXV];   // 1: backward accumulates into the gradient; 0: overwrites it
    int away_from_0;      // draw inputs with |x| >= 0.05 (ReLU kinks)
    int skip_fd;          // big cases: only compare the float kernels with the twins
    int quiet;            // record a mismatch in t->why instead of failing the test
    char why[256];
    double *x[LC_MAXV], *g[LC_MAXV];
    float *xf[LC_MAXV], *gf[LC_MAXV];
    size_t nout;
    double *out, *c; // c: the weights of the scalar loss L = sum c * out (the output gradient)
    float *outf, *cf;
    int B, IN, OUT, F, D, E, Na, d, r; // whichever the layer uses
    float *scratch;
    void (*fwd_naive)(lcase *t);
    void (*bwd_naive)(lcase *t); // g[] receive the gradients of L for dy = c
    void (*fwd_fast)(lcase *t);
    void (*bwd_fast)(lcase *t);
};

static double lc_loss(lcase *t) {
    t->fwd_naive(t);
    double L = 0.0;
    for (size_t i = 0; i < t->nout; i++) L += t->c[i] * t->out[i];
    return L;
}

static double max_abs(const double *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

// Reports a mismatch (through test_fail, or into t->why when t->quiet) and evaluates to -1.
#define LC_FAIL(t, ...)                                                                     \
    ((t)->quiet ? (void)snprintf((t)->why, sizeof (t)->why, __VA_ARGS__)                    \
                : test_fail(__FILE__, __LINE__, __VA_ARGS__),                               \
     -1)

// Runs every check on t; returns 0, or -1 after reporting the first mismatch.
static int lc_run(lcase *t, uint64_t seed) {
    bp_rng rng;
    bp_rng_seed(&rng, seed, 0);
    int rc = 0;
    double *g0[LC_MAXV];
    for (int v = 0; v < t->nv; v++) {
        size_t n = t->n[v];
        t->x[v] = malloc(n * sizeof(double)), t->g[v] = malloc(n * sizeof(double));
        t->xf[v] = malloc(n * sizeof(float)), t->gf[v] = malloc(n * sizeof(float));
        g0[v] = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            double x = 2.0 * bp_rng_uniform(&rng) - 1.0;
            if (t->away_from_0 && fabs(x) < 0.05) x = x < 0 ? x - 0.05 : x + 0.05;
            t->x[v][i] = (float)x; // exactly representable, so both paths see the same inputs
            t->xf[v][i] = (float)x;
            g0[v][i] = t->accum[v] ? (float)(2.0 * bp_rng_uniform(&rng) - 1.0) : NAN;
        }
    }
    t->out = malloc(t->nout * sizeof(double)), t->c = malloc(t->nout * sizeof(double));
    t->outf = malloc(t->nout * sizeof(float)), t->cf = malloc(t->nout * sizeof(float));
    for (size_t i = 0; i < t->nout; i++) t->c[i] = t->cf[i] = (float)(2.0 * bp_rng_uniform(&rng) - 1.0);

    // 1. Naive backward against central differences of the naive forward.
    t->fwd_naive(t);
    for (int v = 0; v < t->nv; v++) memcpy(t->g[v], g0[v], t->n[v] * sizeof(double));
    t->bwd_naive(t);
    for (int v = 0; v < t->nv && !rc; v++)
        for (size_t i = 0; i < t->n[v]; i++) {
            if (t->accum[v]) t->g[v][i] -= g0[v][i];
            if (isnan(t->g[v][i])) {
                rc = LC_FAIL(t, "%s: naive d%s[%zu] not written", t->name, t->vname[v], i);
                break;
            }
        }
    const double h = 1e-5;
    for (int v = 0; v < t->nv && !rc && !t->skip_fd; v++)
        for (size_t i = 0; i < t->n[v]; i++) {
            double keep = t->x[v][i];
            t->x[v][i] = keep + h;
            double Lp = lc_loss(t);
            t->x[v][i] = keep - h;
            double Lm = lc_loss(t);
            t->x[v][i] = keep;
            double fd = (Lp - Lm) / (2 * h), an = t->g[v][i];
            if (fabs(fd - an) > 1e-7 * (1.0 + fabs(fd))) {
                rc = LC_FAIL(t, "%s: d%s[%zu]: finite difference %.12g, naive backward %.12g", t->name,
                          t->vname[v], i, fd, an);
                break;
            }
        }

    // 2. Float kernels against the twins (re-run the naive forward on unperturbed inputs).
    if (!rc) {
        t->fwd_naive(t);
        t->fwd_fast(t);
        double tol = 1e-5 * fmax(1.0, max_abs(t->out, t->nout));
        for (size_t i = 0; i < t->nout; i++)
            if (!(fabs(t->outf[i] - t->out[i]) <= tol)) {
                rc = LC_FAIL(t, "%s: out[%zu]: float %.9g, naive %.9g", t->name, i, t->outf[i],
                          t->out[i]);
                break;
            }
    }
    if (!rc) {
        for (int v = 0; v < t->nv; v++)
            for (size_t i = 0; i < t->n[v]; i++) t->gf[v][i] = (float)g0[v][i];
        t->bwd_fast(t);
        for (int v = 0; v < t->nv && !rc; v++) {
            double tol = 1e-5 * fmax(1.0, max_abs(t->g[v], t->n[v]));
            for (size_t i = 0; i < t->n[v]; i++) {
                double gf = t->accum[v] ? (double)t->gf[v][i] - g0[v][i] : t->gf[v][i];
                if (!(fabs(gf - t->g[v][i]) <= tol + (t->accum[v] ? 1e-6 * fabs(g0[v][i]) : 0.0))) {
                    rc = LC_FAIL(t, "%s: d%s[%zu]: float %.9g, naive %.9g (%s)", t->name,
                              t->vname[v], i, gf, t->g[v][i], t->accum[v] ? "accumulated" : "overwritten");
                    break;
                }
            }
        }
    }
    for (int v = 0; v < t->nv; v++) free(t->x[v]), free(t->g[v]), free(t->xf[v]), free(t->gf[v]), free(g0[v]);
    free(t->out), free(t->c), free(t->outf), free(t->cf);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Linear: vars x, W, b.

static void lin_fn(lcase *t) { nn_naive_linear_forward(t->out, t->x[0], t->x[1], t->x[2], t->B, t->IN, t->OUT); }
static void lin_bn(lcase *t) {
    nn_naive_linear_backward(t->g[0], t->g[1], t->g[2], t->c, t->x[0], t->x[1], t->B, t->IN, t->OUT);
}
static void lin_ff(lcase *t) { nn_linear_forward(t->outf, t->xf[0], t->xf[1], t->xf[2], t->B, t->IN, t->OUT); }
static void lin_bf(lcase *t) {
    nn_linear_backward(t->gf[0], t->gf[1], t->gf[2], t->cf, t->xf[0], t->xf[1], t->B, t->IN, t->OUT);
}

static lcase linear_case(int B, int IN, int OUT) {
    lcase t = {.name = "linear", .nv = 3, .vname = {"x", "W", "b"}, .n = {(size_t)B * IN, (size_t)OUT * IN, OUT},
               .accum = {0, 1, 1}, .nout = (size_t)B * OUT, .B = B, .IN = IN, .OUT = OUT,
               .fwd_naive = lin_fn, .bwd_naive = lin_bn, .fwd_fast = lin_ff, .bwd_fast = lin_bf};
    return t;
}

TEST(nn_linear_grad) {
    lcase t = linear_case(5, 7, 6);
    ASSERT_TRUE(lc_run(&t, 1) == 0);
}

TEST(nn_linear_blas_vs_naive_big) {
    lcase t = linear_case(70, 129, 65);
    t.skip_fd = 1;
    ASSERT_TRUE(lc_run(&t, 2) == 0);
    t = linear_case(33, 3, 1); // thin shapes: a 1-wide output, a 3-wide input
    ASSERT_TRUE(lc_run(&t, 3) == 0);
}

// Linear without a bias: b is NULL on both paths.
static void linnb_fn(lcase *t) { nn_naive_linear_forward(t->out, t->x[0], t->x[1], NULL, t->B, t->IN, t->OUT); }
static void linnb_bn(lcase *t) {
    nn_naive_linear_backward(t->g[0], t->g[1], NULL, t->c, t->x[0], t->x[1], t->B, t->IN, t->OUT);
}
static void linnb_ff(lcase *t) { nn_linear_forward(t->outf, t->xf[0], t->xf[1], NULL, t->B, t->IN, t->OUT); }
static void linnb_bf(lcase *t) {
    nn_linear_backward(t->gf[0], t->gf[1], NULL, t->cf, t->xf[0], t->xf[1], t->B, t->IN, t->OUT);
}

TEST(nn_linear_no_bias_grad) {
    lcase t = linear_case(4, 5, 3);
    t.nv = 2, t.fwd_naive = linnb_fn, t.bwd_naive = linnb_bn, t.fwd_fast = linnb_ff, t.bwd_fast = linnb_bf;
    ASSERT_TRUE(lc_run(&t, 4) == 0);
}

// ---------------------------------------------------------------------------------------------
// ReLU and sigmoid: var x; the naive backward needs the forward output, recomputed here.

static void relu_fn(lcase *t) { nn_naive_relu_forward(t->out, t->x[0], t->nout); }
static void relu_bn(lcase *t) {
    nn_naive_relu_forward(t->out, t->x[0], t->nout);
    nn_naive_relu_backward(t->g[0], t->c, t->out, t->nout);
}
static void relu_ff(lcase *t) { nn_relu_forward(t->outf, t->xf[0], t->nout); }
static void relu_bf(lcase *t) { nn_relu_backward(t->gf[0], t->cf, t->outf, t->nout); }
static void sig_fn(lcase *t) { nn_naive_sigmoid_forward(t->out, t->x[0], t->nout); }
static void sig_bn(lcase *t) {
    nn_naive_sigmoid_forward(t->out, t->x[0], t->nout);
    nn_naive_sigmoid_backward(t->g[0], t->c, t->out, t->nout);
}
static void sig_ff(lcase *t) { nn_sigmoid_forward(t->outf, t->xf[0], t->nout); }
static void sig_bf(lcase *t) { nn_sigmoid_backward(t->gf[0], t->cf, t->outf, t->nout); }

TEST(nn_relu_sigmoid_grad) {
    lcase t = {.name = "relu", .nv = 1, .vname = {"x"}, .n = {40}, .nout = 40, .away_from_0 = 1,
               .fwd_naive = relu_fn, .bwd_naive = relu_bn, .fwd_fast = relu_ff, .bwd_fast = relu_bf};
    ASSERT_TRUE(lc_run(&t, 5) == 0);
    lcase s = {.name = "sigmoid", .nv = 1, .vname = {"x"}, .n = {40}, .nout = 40,
               .fwd_naive = sig_fn, .bwd_naive = sig_bn, .fwd_fast = sig_ff, .bwd_fast = sig_bf};
    ASSERT_TRUE(lc_run(&s, 6) == 0);
}

TEST(nn_relu_in_place_and_nan) {
    float x[4] = {-1.0f, 2.0f, NAN, 0.0f}, dy[4] = {1, 1, 1, 1};
    nn_relu_forward(x, x, 4);
    ASSERT_TRUE(x[0] == 0.0f && x[1] == 2.0f && isnan(x[2]) && x[3] == 0.0f);
    nn_relu_backward(dy, dy, x, 4);
    ASSERT_TRUE(dy[0] == 0.0f && dy[1] == 1.0f && dy[3] == 0.0f);
    float big[2] = {-1000.0f, 1000.0f}, sg[2];
    nn_sigmoid_forward(sg, big, 2);
    ASSERT_TRUE(sg[0] == 0.0f && sg[1] == 1.0f); // no NaN from exp overflow
}

// ---------------------------------------------------------------------------------------------
// Dot interaction: vars z, emb.

static void dot_fn(lcase *t) {
    nn_naive_interact_dot_forward(t->out, t->x[0], t->x[1], t->B, t->F, t->D, t->E);
}
static void dot_bn(lcase *t) {
    nn_naive_interact_dot_backward(t->g[0], t->g[1], t->c, t->x[0], t->x[1], t->B, t->F, t->D, t->E);
}
static void dot_ff(lcase *t) {
    nn_interact_dot_forward(t->outf, t->xf[0], t->xf[1], t->B, t->F, t->D, t->E, t->scratch);
}
static void dot_bf(lcase *t) {
    nn_interact_dot_backward(t->gf[0], t->gf[1], t->cf, t->xf[0], t->xf[1], t->B, t->F, t->D, t->E, t->scratch);
}

static int dot_case_run(int B, int F, int D, int E, int skip_fd, uint64_t seed) {
    lcase t = {.name = "interact_dot", .nv = 2, .vname = {"z", "emb"}, .n = {(size_t)B * D, (size_t)B * F * E},
               .accum = {0, 1}, .nout = (size_t)B * nn_interact_dot_width(F, D), .B = B, .F = F, .D = D, .E = E,
               .skip_fd = skip_fd, .fwd_naive = dot_fn, .bwd_naive = dot_bn, .fwd_fast = dot_ff, .bwd_fast = dot_bf};
    t.scratch = malloc(nn_interact_dot_scratch(F, D) * sizeof(float));
    int rc = lc_run(&t, seed);
    free(t.scratch);
    return rc;
}

TEST(nn_interact_dot_grad) {
    ASSERT_TRUE(dot_case_run(3, 5, 3, 4, 0, 7) == 0);   // E > D: the extra element is left alone
    ASSERT_TRUE(dot_case_run(2, 26, 16, 16, 0, 8) == 0); // the Criteo Kaggle shape: K = 27 spans 4 blocks
    ASSERT_TRUE(dot_case_run(2, 7, 5, 5, 0, 9) == 0);   // K = 8, exactly one block
    ASSERT_TRUE(dot_case_run(2, 1, 2, 2, 0, 10) == 0);  // a single pair
    ASSERT_TRUE(dot_case_run(17, 40, 64, 65, 1, 11) == 0);
}

// The output order is the DLRM reference's: z, then for i = 1..F, j = 0..i-1 the pair (i, j).
TEST(nn_interact_dot_order) {
    enum { F = 3, D = 2 };
    // T_0 = z = (1, 0); e_1 = (0, 1); e_2 = (2, 3); e_3 = (5, 7)
    float z[D] = {1, 0}, emb[F * D] = {0, 1, 2, 3, 5, 7};
    float out[D + F * (F + 1) / 2], *scratch = malloc(nn_interact_dot_scratch(F, D) * sizeof(float));
    nn_interact_dot_forward(out, z, emb, 1, F, D, D, scratch);
    free(scratch);
    // (1,0)=0  (2,0)=2  (2,1)=3  (3,0)=5  (3,1)=7  (3,2)=10+21=31
    const float want[] = {1, 0, 0, 2, 3, 5, 7, 31};
    for (int i = 0; i < (int)BP_ARRAY_LEN(want); i++) ASSERT_NEAR(out[i], want[i], 0);
}

// ---------------------------------------------------------------------------------------------
// Concat: vars a, emb.

static void cat_fn(lcase *t) {
    nn_naive_concat_forward(t->out, t->x[0], t->x[1], t->B, t->Na, t->F, t->D, t->E);
}
static void cat_bn(lcase *t) {
    nn_naive_concat_backward(t->g[0], t->g[1], t->c, t->B, t->Na, t->F, t->D, t->E);
}
static void cat_ff(lcase *t) { nn_concat_forward(t->outf, t->xf[0], t->xf[1], t->B, t->Na, t->F, t->D, t->E); }
static void cat_bf(lcase *t) { nn_concat_backward(t->gf[0], t->gf[1], t->cf, t->B, t->Na, t->F, t->D, t->E); }

TEST(nn_concat_grad) {
    int B = 3, Na = 2, F = 3, D = 3, E = 5;
    lcase t = {.name = "concat", .nv = 2, .vname = {"a", "emb"}, .n = {(size_t)B * Na, (size_t)B * F * E},
               .accum = {0, 1}, .nout = (size_t)B * (Na + F * D), .B = B, .Na = Na, .F = F, .D = D, .E = E,
               .fwd_naive = cat_fn, .bwd_naive = cat_bn, .fwd_fast = cat_ff, .bwd_fast = cat_bf};
    ASSERT_TRUE(lc_run(&t, 12) == 0);
}

// ---------------------------------------------------------------------------------------------
// Cross, full rank: vars x0, xl, W, b; out = y.  u is recomputed by the naive backward.

static void cross_fn(lcase *t) {
    double *u = malloc(t->nout * sizeof(double));
    nn_naive_cross_forward(t->out, u, t->x[0], t->x[1], t->x[2], t->x[3], t->B, t->d);
    free(u);
}
static void cross_bn(lcase *t) {
    double *u = malloc(t->nout * sizeof(double)), *y = malloc(t->nout * sizeof(double));
    nn_naive_cross_forward(y, u, t->x[0], t->x[1], t->x[2], t->x[3], t->B, t->d);
    nn_naive_cross_backward(t->g[0], t->g[1], t->g[2], t->g[3], t->c, t->x[0], t->x[1], u, t->x[2], t->B, t->d);
    free(u), free(y);
}
static void cross_ff(lcase *t) {
    nn_cross_forward(t->outf, t->scratch, t->xf[0], t->xf[1], t->xf[2], t->xf[3], t->B, t->d);
}
static void cross_bf(lcase *t) { // uses u saved by cross_ff in scratch[0, B d)
    float *u = t->scratch, *du = u + t->nout;
    nn_cross_backward(t->gf[0], t->gf[1], t->gf[2], t->gf[3], du, t->cf, t->xf[0], t->xf[1], u, t->xf[2], t->B,
                      t->d);
}

static int cross_case_run(int B, int d, int skip_fd, uint64_t seed) {
    size_t n = (size_t)B * d;
    lcase t = {.name = "cross", .nv = 4, .vname = {"x0", "xl", "W", "b"}, .n = {n, n, (size_t)d * d, d},
               .accum = {1, 0, 1, 1}, .nout = n, .B = B, .d = d, .skip_fd = skip_fd,
               .fwd_naive = cross_fn, .bwd_naive = cross_bn, .fwd_fast = cross_ff, .bwd_fast = cross_bf};
    t.scratch = malloc(2 * n * sizeof(float));
    int rc = lc_run(&t, seed);
    free(t.scratch);
    return rc;
}

TEST(nn_cross_grad) {
    ASSERT_TRUE(cross_case_run(4, 6, 0, 13) == 0);
    ASSERT_TRUE(cross_case_run(40, 129, 1, 14) == 0);
}

// Cross, low rank: vars x0, xl, U, V, b.
static void crlr_fn(lcase *t) {
    double *u = malloc(t->nout * sizeof(double)), *p = malloc((size_t)t->B * t->r * sizeof(double));
    nn_naive_cross_lowrank_forward(t->out, u, p, t->x[0], t->x[1], t->x[2], t->x[3], t->x[4], t->B, t->d, t->r);
    free(u), free(p);
}
static void crlr_bn(lcase *t) {
    double *u = malloc(t->nout * sizeof(double)), *p = malloc((size_t)t->B * t->r * sizeof(double));
    double *y = malloc(t->nout * sizeof(double));
    nn_naive_cross_lowrank_forward(y, u, p, t->x[0], t->x[1], t->x[2], t->x[3], t->x[4], t->B, t->d, t->r);
    nn_naive_cross_lowrank_backward(t->g[0], t->g[1], t->g[2], t->g[3], t->g[4], t->c, t->x[0], t->x[1], u, p,
                                    t->x[2], t->x[3], t->B, t->d, t->r);
    free(u), free(p), free(y);
}
static void crlr_ff(lcase *t) {
    float *u = t->scratch, *p = u + t->nout;
    nn_cross_lowrank_forward(t->outf, u, p, t->xf[0], t->xf[1], t->xf[2], t->xf[3], t->xf[4], t->B, t->d, t->r);
}
static void crlr_bf(lcase *t) {
    float *u = t->scratch, *p = u + t->nout, *du = p + (size_t)t->B * t->r, *dp = du + t->nout;
    nn_cross_lowrank_backward(t->gf[0], t->gf[1], t->gf[2], t->gf[3], t->gf[4], du, dp, t->cf, t->xf[0], t->xf[1],
                              u, p, t->xf[2], t->xf[3], t->B, t->d, t->r);
}

static int crlr_case_run(int B, int d, int r, int skip_fd, uint64_t seed) {
    size_t n = (size_t)B * d;
    lcase t = {.name = "cross_lowrank", .nv = 5, .vname = {"x0", "xl", "U", "V", "b"},
               .n = {n, n, (size_t)d * r, (size_t)d * r, d}, .accum = {1, 0, 1, 1, 1}, .nout = n, .B = B, .d = d,
               .r = r, .skip_fd = skip_fd, .fwd_naive = crlr_fn, .bwd_naive = crlr_bn, .fwd_fast = crlr_ff,
               .bwd_fast = crlr_bf};
    t.scratch = malloc((2 * n + 2 * (size_t)B * r) * sizeof(float));
    int rc = lc_run(&t, seed);
    free(t.scratch);
    return rc;
}

TEST(nn_cross_lowrank_grad) {
    ASSERT_TRUE(crlr_case_run(4, 7, 3, 0, 15) == 0);
    ASSERT_TRUE(crlr_case_run(4, 5, 1, 0, 16) == 0);
    ASSERT_TRUE(crlr_case_run(50, 120, 17, 1, 17) == 0);
}

// Low rank with U V^T equal to a full W gives the full layer's output.
TEST(nn_cross_lowrank_matches_full) {
    enum { B = 3, d = 4, r = 2 };
    bp_rng rng;
    bp_rng_seed(&rng, 18, 0);
    float x0[B * d], xl[B * d], U[d * r], V[d * r], W[d * d], b[d], y1[B * d], y2[B * d], u[B * d], p[B * r];
    for (int i = 0; i < B * d; i++) x0[i] = bp_rng_uniformf(&rng), xl[i] = bp_rng_uniformf(&rng);
    for (int i = 0; i < d * r; i++) U[i] = bp_rng_uniformf(&rng), V[i] = bp_rng_uniformf(&rng);
    for (int i = 0; i < d; i++) b[i] = bp_rng_uniformf(&rng);
    for (int o = 0; o < d; o++)
        for (int i = 0; i < d; i++) W[o * d + i] = U[o * r] * V[i * r] + U[o * r + 1] * V[i * r + 1];
    nn_cross_forward(y1, u, x0, xl, W, b, B, d);
    nn_cross_lowrank_forward(y2, u, p, x0, xl, U, V, b, B, d, r);
    for (int i = 0; i < B * d; i++) ASSERT_NEAR(y1[i], y2[i], 1e-5);
}

// ---------------------------------------------------------------------------------------------
// FM (var emb) and wide (vars dense, emb, w, bias).

static void fm_fn(lcase *t) { nn_naive_fm_forward(t->out, t->x[0], t->B, t->F, t->D, t->E); }
static void fm_bn(lcase *t) { nn_naive_fm_backward(t->g[0], t->c, t->x[0], t->B, t->F, t->D, t->E); }
static void fm_ff(lcase *t) { nn_fm_forward(t->outf, t->xf[0], t->B, t->F, t->D, t->E); }
static void fm_bf(lcase *t) { nn_fm_backward(t->gf[0], t->cf, t->xf[0], t->B, t->F, t->D, t->E); }

TEST(nn_fm_grad) {
    int B = 3, F = 5, D = 4, E = 5;
    lcase t = {.name = "fm", .nv = 1, .vname = {"emb"}, .n = {(size_t)B * F * E}, .accum = {1}, .nout = B, .B = B,
               .F = F, .D = D, .E = E, .fwd_naive = fm_fn, .bwd_naive = fm_bn, .fwd_fast = fm_ff, .bwd_fast = fm_bf};
    ASSERT_TRUE(lc_run(&t, 19) == 0);
}

static void wide_fn(lcase *t) {
    nn_naive_wide_forward(t->out, t->x[0], t->x[1], t->x[2], t->x[3], t->B, t->IN, t->F, t->D, t->E);
}
static void wide_bn(lcase *t) {
    nn_naive_wide_backward(t->g[0], t->g[2], t->g[3], t->g[1], t->c, t->x[0], t->x[2], t->B, t->IN, t->F, t->D,
                           t->E);
}
static void wide_ff(lcase *t) {
    nn_wide_forward(t->outf, t->xf[0], t->xf[1], t->xf[2], t->xf[3], t->B, t->IN, t->F, t->D, t->E);
}
static void wide_bf(lcase *t) {
    nn_wide_backward(t->gf[0], t->gf[2], t->gf[3], t->gf[1], t->cf, t->xf[0], t->xf[2], t->B, t->IN, t->F, t->D,
                     t->E);
}

TEST(nn_wide_grad) {
    int B = 3, Nd = 4, F = 5, D = 3, E = 4;
    lcase t = {.name = "wide", .nv = 4, .vname = {"dense", "emb", "w", "bias"},
               .n = {(size_t)B * Nd, (size_t)B * F * E, Nd, 1}, .accum = {1, 1, 1, 1}, .nout = B, .B = B, .IN = Nd,
               .F = F, .D = D, .E = E, .fwd_naive = wide_fn, .bwd_naive = wide_bn, .fwd_fast = wide_ff,
               .bwd_fast = wide_bf};
    ASSERT_TRUE(lc_run(&t, 20) == 0);
}

// The checker itself must catch a wrong gradient: a backward that drops the bias gradient.
static void lin_bn_broken(lcase *t) {
    lin_bn(t);
    t->g[2][0] += 1e-3;
}

TEST(nn_gradcheck_catches_a_wrong_gradient) {
    lcase t = linear_case(3, 4, 2);
    t.name = "deliberately broken linear";
    t.bwd_naive = lin_bn_broken;
    t.quiet = 1;
    ASSERT_TRUE(lc_run(&t, 21) != 0);
    ASSERT_STR_CONTAINS(t.why, "db[0]: finite difference");
}

// ---------------------------------------------------------------------------------------------
// Threads: the pool, products cut into slices, the interaction split by samples.

extern void openblas_set_num_threads(int);

typedef struct {
    _Atomic int hits[NN_POOL_MAX];
    _Atomic int inner; // parts of nested runs
    int nest;
} pool_count;

static void count_inner(void *ctx, int p, int n) {
    pool_count *c = ctx;
    (void)p, (void)n;
    atomic_fetch_add(&c->inner, 1);
}
static void count_part(void *ctx, int p, int n) {
    pool_count *c = ctx;
    BP_ASSERT(p >= 0 && p < n);
    atomic_fetch_add(&c->hits[p], 1);
    if (c->nest) nn_pool_run(3, count_inner, c); // busy pool: runs here, one part after another
}

TEST(nn_pool_runs_every_part_once) {
    for (int rep = 0; rep < 40; rep++)
        for (int n = 1; n <= (rep < 2 ? NN_POOL_MAX : 4); n++) {
            pool_count c = {.nest = rep % 3 == 0};
            nn_pool_run(n, count_part, &c);
            for (int p = 0; p < NN_POOL_MAX; p++) ASSERT_MSG(c.hits[p] == (p < n), "rep %d n %d part %d", rep, n, p);
            ASSERT_EQ(c.inner, c.nest ? 3 * n : 0);
        }
}

// Runs that find the workers asleep (a pause longer than their spin) wake them: every part runs.
TEST(nn_pool_wakes_sleeping_workers) {
    for (int rep = 0; rep < 6; rep++) {
        usleep(rep % 2 ? 3000 : 20); // past the spin, or within it
        int n = 2 + rep % 3;
        pool_count c = {0};
        nn_pool_run(n, count_part, &c);
        for (int p = 0; p < NN_POOL_MAX; p++) ASSERT_MSG(c.hits[p] == (p < n), "rep %d part %d", rep, p);
    }
}

// With 3 threads every sliced product and the split interaction still match the naive twins.
TEST(nn_threads_kernels_match_naive) {
    openblas_set_num_threads(3);
    ASSERT_EQ(nn_threads(), 3);
    lcase t = linear_case(200, 129, 150); // every product cut by rows (dW with a transposed A)
    t.skip_fd = 1;
    ASSERT_TRUE(lc_run(&t, 31) == 0);
    t = linear_case(100, 200, 150); // every product cut by columns (forward with a transposed B)
    t.skip_fd = 1;
    ASSERT_TRUE(lc_run(&t, 32) == 0);
    t = linear_case(600, 8, 500); // bias gradient, bias fill and ReLU-sized outputs split too
    t.skip_fd = 1;
    ASSERT_TRUE(lc_run(&t, 38) == 0);
    ASSERT_TRUE(cross_case_run(128, 129, 1, 33) == 0);
    ASSERT_TRUE(crlr_case_run(400, 120, 40, 1, 34) == 0);
    ASSERT_TRUE(dot_case_run(50, 26, 16, 16, 1, 35) == 0);
    ASSERT_TRUE(dot_case_run(70, 5, 3, 4, 1, 36) == 0);
    openblas_set_num_threads(1);
}

// Split by samples: the interaction is bit-identical with 1, 2 and 3 threads; a sliced product
// is bit-identical run to run at a fixed thread count.
TEST(nn_threads_bit_identity) {
    enum { B = 67, F = 26, D = 16, E = 17, W = D + F * (F + 1) / 2, IN = 129, OUT = 200 };
    bp_rng rng;
    bp_rng_seed(&rng, 37, 0);
    float *z = malloc(B * D * sizeof(float)), *emb = malloc(B * F * E * sizeof(float));
    float *dout = malloc(B * W * sizeof(float)), *scratch = malloc(nn_interact_dot_scratch(F, D) * sizeof(float));
    float *x = malloc(B * IN * sizeof(float)), *Wt = malloc(OUT * IN * sizeof(float));
    for (int i = 0; i < B * D; i++) z[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int i = 0; i < B * F * E; i++) emb[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int i = 0; i < B * W; i++) dout[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int i = 0; i < B * IN; i++) x[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int i = 0; i < OUT * IN; i++) Wt[i] = bp_rng_uniformf(&rng) - 0.5f;
    float *out[3], *dz[3], *demb[3], *y[2];
    for (int k = 0; k < 3; k++) {
        openblas_set_num_threads(k + 1);
        out[k] = malloc(B * W * sizeof(float)), dz[k] = malloc(B * D * sizeof(float));
        demb[k] = calloc(B * F * E, sizeof(float));
        nn_interact_dot_forward(out[k], z, emb, B, F, D, E, scratch);
        nn_interact_dot_backward(dz[k], demb[k], dout, z, emb, B, F, D, E, scratch);
    }
    for (int k = 1; k < 3; k++) {
        ASSERT_MSG(memcmp(out[0], out[k], B * W * sizeof(float)) == 0, "forward, %d threads", k + 1);
        ASSERT_MSG(memcmp(dz[0], dz[k], B * D * sizeof(float)) == 0, "dz, %d threads", k + 1);
        ASSERT_MSG(memcmp(demb[0], demb[k], B * F * E * sizeof(float)) == 0, "demb, %d threads", k + 1);
    }
    openblas_set_num_threads(2);
    for (int k = 0; k < 2; k++) {
        y[k] = malloc(B * OUT * sizeof(float));
        nn_linear_forward(y[k], x, Wt, NULL, B, IN, OUT);
    }
    ASSERT_TRUE(memcmp(y[0], y[1], B * OUT * sizeof(float)) == 0);
    // ReLU split into parts: the same as one thread, including the tail past the last block.
    const size_t n = 400003; // three parts' worth
    float *a = malloc(n * sizeof(float)), *r[2], *dr[2];
    for (size_t i = 0; i < n; i++) a[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int k = 0; k < 2; k++) {
        openblas_set_num_threads(k ? 3 : 1);
        r[k] = malloc(n * sizeof(float)), dr[k] = malloc(n * sizeof(float));
        nn_relu_forward(r[k], a, n);
        nn_relu_backward(dr[k], a, r[k], n);
    }
    ASSERT_TRUE(memcmp(r[0], r[1], n * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(dr[0], dr[1], n * sizeof(float)) == 0);
    for (size_t i = 0; i < n; i++) ASSERT_TRUE(r[1][i] == (a[i] < 0 ? 0.0f : a[i]) && dr[1][i] == (a[i] > 0 ? a[i] : 0.0f));
    free(a), free(r[0]), free(r[1]), free(dr[0]), free(dr[1]);
    openblas_set_num_threads(1);
    for (int k = 0; k < 3; k++) free(out[k]), free(dz[k]), free(demb[k]);
    free(y[0]), free(y[1]), free(z), free(emb), free(dout), free(scratch), free(x), free(Wt);
}

// The fused layer kernels give the bits of the unfused sequence at the same thread count, for
// products cut by rows and by columns, with 1, 2 and 3 threads (and OpenBLAS's own threads).
TEST(nn_fused_layers_match_unfused) {
    static const int shapes[][3] = {{67, 129, 200}, {300, 150, 40}, {128, 13, 512}, {5, 7, 3}}; // B, IN, OUT
    bp_rng rng;
    bp_rng_seed(&rng, 41, 0);
    for (int si = 0; si < (int)BP_ARRAY_LEN(shapes); si++)
        for (int T = 1; T <= 4; T++) {
            const int B = shapes[si][0], IN = shapes[si][1], OUT = shapes[si][2];
            openblas_set_num_threads(T == 4 ? 2 : T);
            nn_set_gemm_split(T != 4);
            float *x = malloc((size_t)B * IN * sizeof(float)), *W = malloc((size_t)OUT * IN * sizeof(float));
            float *b = malloc(OUT * sizeof(float)), *y[2], *dy[2], *dx[2], *dW[2], *db[2];
            for (int i = 0; i < B * IN; i++) x[i] = bp_rng_uniformf(&rng) - 0.5f;
            for (int i = 0; i < B * IN; i += 3) x[i] = 0.0f; // x as a ReLU output: zeros in it
            for (int i = 0; i < OUT * IN; i++) W[i] = bp_rng_uniformf(&rng) - 0.5f;
            for (int i = 0; i < OUT; i++) b[i] = bp_rng_uniformf(&rng) - 0.5f;
            for (int k = 0; k < 2; k++) {
                y[k] = malloc((size_t)B * OUT * sizeof(float)), dy[k] = malloc((size_t)B * OUT * sizeof(float));
                dx[k] = malloc((size_t)B * IN * sizeof(float));
                dW[k] = calloc((size_t)OUT * IN, sizeof(float)), db[k] = calloc(OUT, sizeof(float));
                for (int i = 0; i < OUT; i++) db[k][i] = 0.25f; // accumulated into
            }
            nn_linear_forward(y[0], x, W, b, B, IN, OUT);
            nn_relu_forward(y[0], y[0], (size_t)B * OUT);
            nn_linear_relu_forward(y[1], x, W, b, B, IN, OUT);
            ASSERT_MSG(memcmp(y[0], y[1], (size_t)B * OUT * sizeof(float)) == 0, "forward %dx%dx%d T %d", B, IN, OUT, T);
            int zeros = 0;
            for (int i = 0; i < B * OUT; i++) zeros += y[1][i] == 0.0f;
            ASSERT_TRUE(zeros > 0 && zeros < B * OUT); // the ReLU did something, not everything
            for (int i = 0; i < B * OUT; i++) dy[0][i] = dy[1][i] = bp_rng_uniformf(&rng) - 0.5f;
            nn_linear_backward(dx[0], dW[0], db[0], dy[0], x, W, B, IN, OUT);
            nn_relu_backward(dx[0], dx[0], x, (size_t)B * IN);
            nn_relu_linear_backward(dx[1], dW[1], db[1], dy[1], x, W, B, IN, OUT);
            ASSERT_MSG(memcmp(dx[0], dx[1], (size_t)B * IN * sizeof(float)) == 0, "dx %dx%dx%d T %d", B, IN, OUT, T);
            ASSERT_TRUE(memcmp(dW[0], dW[1], (size_t)OUT * IN * sizeof(float)) == 0);
            ASSERT_TRUE(memcmp(db[0], db[1], OUT * sizeof(float)) == 0);
            for (int i = 0; i < B * IN; i++) ASSERT_TRUE(x[i] != 0.0f || dx[1][i] == 0.0f);
            free(x), free(W), free(b);
            for (int k = 0; k < 2; k++) free(y[k]), free(dy[k]), free(dx[k]), free(dW[k]), free(db[k]);
        }
    nn_set_gemm_split(1);
    openblas_set_num_threads(1);
}

// The dot interaction's AVX2 path (four Gram rows at once, 8 x 8 transposes, where the processor
// has AVX2) gives the bits of the 4-float one, forward and backward, for the Kaggle shape, D = 64,
// and odd ones: D not a multiple of 8, F + 1 not a multiple of 4 or 8, one table.
TEST(nn_interact_dot_simd_paths_identical) {
    static const int shapes[][4] = {{64, 26, 16, 17}, {33, 5, 3, 4},   {20, 40, 8, 8},  {7, 1, 1, 1},
                                    {19, 26, 64, 65}, {9, 13, 13, 14}, {5, 30, 21, 24}, {3, 2, 9, 9}}; // B, F, D, E
    bp_rng rng;
    bp_rng_seed(&rng, 43, 0);
    for (int si = 0; si < (int)BP_ARRAY_LEN(shapes); si++) {
        const int B = shapes[si][0], F = shapes[si][1], D = shapes[si][2], E = shapes[si][3];
        const int W = nn_interact_dot_width(F, D);
        float *z = malloc((size_t)B * D * sizeof(float)), *emb = malloc((size_t)B * F * E * sizeof(float));
        float *dout = malloc((size_t)B * W * sizeof(float)), *scratch = malloc(nn_interact_dot_scratch(F, D) * sizeof(float));
        float *out[2], *dz[2], *demb[2];
        for (int i = 0; i < B * D; i++) z[i] = bp_rng_uniformf(&rng) - 0.5f;
        for (int i = 0; i < B * F * E; i++) emb[i] = bp_rng_uniformf(&rng) - 0.5f;
        for (int i = 0; i < B * W; i++) dout[i] = bp_rng_uniformf(&rng) - 0.5f;
        for (int k = 0; k < 2; k++) {
            nn_set_simd(k);
            out[k] = malloc((size_t)B * W * sizeof(float)), dz[k] = malloc((size_t)B * D * sizeof(float));
            demb[k] = malloc((size_t)B * F * E * sizeof(float));
            for (int i = 0; i < B * F * E; i++) demb[k][i] = 0.125f; // accumulated into
            nn_interact_dot_forward(out[k], z, emb, B, F, D, E, scratch);
            nn_interact_dot_backward(dz[k], demb[k], dout, z, emb, B, F, D, E, scratch);
        }
        nn_set_simd(1);
        ASSERT_MSG(memcmp(out[0], out[1], (size_t)B * W * sizeof(float)) == 0, "forward, shape %d", si);
        ASSERT_MSG(memcmp(dz[0], dz[1], (size_t)B * D * sizeof(float)) == 0, "dz, shape %d", si);
        ASSERT_MSG(memcmp(demb[0], demb[1], (size_t)B * F * E * sizeof(float)) == 0, "demb, shape %d", si);
        free(z), free(emb), free(dout), free(scratch);
        for (int k = 0; k < 2; k++) free(out[k]), free(dz[k]), free(demb[k]);
    }
}

// Helpers for the two tests below: x uniform in [-0.5, 0.5) with every third value zero (a ReLU
// output), and signed zeros sprinkled in.
static void fill_mixed(float *a, size_t n, bp_rng *rng) {
    for (size_t i = 0; i < n; i++) a[i] = i % 3 == 0 ? 0.0f : i % 7 == 0 ? -0.0f : bp_rng_uniformf(rng) - 0.5f;
}

// Products cut by columns run in a per-thread buffer and outer products (K = 1) in a loop: both
// give the bits of the single-threaded sgemm calls on C in place that they replace (the slices
// of nn_part_begin over the columns; one call for an outer product).
TEST(nn_column_slices_and_outer_products_keep_sgemm_bits) {
    enum { B = 100, IN = 300, OUT = 150, B1 = 128 };
    bp_rng rng;
    bp_rng_seed(&rng, 43, 0);
    float *x = malloc(B * IN * sizeof(float)), *W = malloc(OUT * IN * sizeof(float)), *b = malloc(OUT * sizeof(float));
    float *dy = malloc(B * OUT * sizeof(float)), *y[2], *dx[2], *dW[2], *db[2];
    fill_mixed(x, B * IN, &rng), fill_mixed(W, OUT * IN, &rng), fill_mixed(dy, B * OUT, &rng);
    for (int i = 0; i < OUT; i++) b[i] = bp_rng_uniformf(&rng) - 0.5f;
    for (int k = 0; k < 2; k++) {
        y[k] = malloc(B * OUT * sizeof(float)), dx[k] = malloc(B * IN * sizeof(float));
        dW[k] = malloc(OUT * IN * sizeof(float)), db[k] = malloc(OUT * sizeof(float));
        for (int i = 0; i < OUT * IN; i++) dW[k][i] = 0.125f * (float)(i % 5); // accumulated into
        for (int i = 0; i < OUT; i++) db[k][i] = 0.0f;
    }
    openblas_set_num_threads(2);
    nn_linear_relu_forward(y[0], x, W, b, B, IN, OUT); // (100, 150): two column slices
    nn_relu_linear_backward(dx[0], dW[0], db[0], dy, x, W, B, IN, OUT); // dW (150, 300), dx (100, 300)
    openblas_set_num_threads(1);
    for (int p = 0; p < 2; p++) {
        int c0 = (int)nn_part_begin(OUT, p, 2), c1 = (int)nn_part_begin(OUT, p + 1, 2);
        for (int i = 0; i < B; i++) memcpy(y[1] + i * OUT + c0, b + c0, (size_t)(c1 - c0) * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, c1 - c0, IN, 1.0f, x, IN, W + (size_t)c0 * IN, IN,
                    1.0f, y[1] + c0, OUT);
        c0 = (int)nn_part_begin(IN, p, 2), c1 = (int)nn_part_begin(IN, p + 1, 2);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, c1 - c0, B, 1.0f, dy, OUT, x + c0, IN, 1.0f,
                    dW[1] + c0, IN);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, c1 - c0, OUT, 1.0f, dy, OUT, W + c0, IN, 0.0f,
                    dx[1] + c0, IN);
    }
    nn_relu_forward(y[1], y[1], B * OUT);
    nn_relu_backward(dx[1], dx[1], x, B * IN);
    ASSERT_TRUE(memcmp(y[0], y[1], B * OUT * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(dW[0], dW[1], OUT * IN * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(dx[0], dx[1], B * IN * sizeof(float)) == 0);
    // Outer products: a layer with one output, with and without the mask, 1 and 2 threads.
    float *d1 = malloc(B1 * sizeof(float)), *ref = malloc(B1 * IN * sizeof(float));
    fill_mixed(d1, B1, &rng);
    float *x1 = malloc(B1 * IN * sizeof(float)), *dW1 = calloc(IN, sizeof(float)), db1 = 0.0f;
    fill_mixed(x1, B1 * IN, &rng);
    for (int mask = 0; mask < 2; mask++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B1, IN, 1, 1.0f, d1, 1, W, IN, 0.0f, ref, IN);
        if (mask) nn_relu_backward(ref, ref, x1, B1 * IN);
        int negzero = 0;
        for (int i = 0; i < B1 * IN; i++) negzero += ref[i] == 0.0f && signbit(ref[i]);
        ASSERT_EQ(negzero, 0); // sgemm's a * b + 0: no -0 even from a zero times a negative
        for (int T = 1; T <= 2; T++) {
            openblas_set_num_threads(T);
            float *out = malloc(B1 * IN * sizeof(float));
            if (mask) nn_relu_linear_backward(out, dW1, &db1, d1, x1, W, B1, IN, 1);
            else nn_linear_backward(out, dW1, &db1, d1, x1, W, B1, IN, 1);
            ASSERT_MSG(memcmp(out, ref, B1 * IN * sizeof(float)) == 0, "outer, mask %d, %d threads", mask, T);
            free(out);
        }
    }
    openblas_set_num_threads(1);
    free(d1), free(ref), free(x1), free(dW1);
    for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(dW[k]), free(db[k]);
    free(x), free(W), free(b), free(dy);
}

// A stack's backward pass on two threads (input gradients and weight gradients as two chains of
// whole products) gives the bits of the layer-by-layer calls on one thread: every dx, dW and db,
// with the first layer's input gradient wanted and not.  With three threads it is those calls on
// three (sliced products: their bits need not be one thread's).
TEST(nn_stack_backward_two_chains_keep_one_thread_bits) {
    enum { B = 128, NL = 4 };
    const int width[NL + 1] = {37, 300, 150, 64, 1}; // layer l: width[l] -> width[l + 1]
    bp_rng rng;
    bp_rng_seed(&rng, 47, 0);
    float *x[NL], *W[NL], *dy_top = malloc(B * sizeof(float));
    for (int l = 0; l < NL; l++) {
        x[l] = malloc((size_t)B * width[l] * sizeof(float)), W[l] = malloc((size_t)width[l + 1] * width[l] * sizeof(float));
        fill_mixed(x[l], (size_t)B * width[l], &rng), fill_mixed(W[l], (size_t)width[l + 1] * width[l], &rng);
    }
    fill_mixed(dy_top, B, &rng);
    for (int want_dx0 = 0; want_dx0 < 2; want_dx0++) {
        for (int T = 2; T <= 3; T++) {
            float *dx[2][NL], *dW[2][NL], *db[2][NL];
            for (int k = 0; k < 2; k++) { // k = 0: the stack on T threads; 1: the calls
                openblas_set_num_threads(k && T == 2 ? 1 : T);
                nn_linear_grad S[NL];
                for (int l = NL - 1, i = 0; l >= 0; l--, i++) {
                    dx[k][l] = l || want_dx0 ? malloc((size_t)B * width[l] * sizeof(float)) : NULL;
                    dW[k][l] = malloc((size_t)width[l + 1] * width[l] * sizeof(float));
                    db[k][l] = malloc((size_t)width[l + 1] * sizeof(float));
                    for (int j = 0; j < width[l + 1] * width[l]; j++) dW[k][l][j] = 0.25f * (float)(j % 3);
                    for (int j = 0; j < width[l + 1]; j++) db[k][l][j] = 0.5f * (float)(j % 2);
                    S[i] = (nn_linear_grad){.dx = dx[k][l], .dW = dW[k][l], .db = db[k][l],
                                            .dy = l == NL - 1 ? dy_top : dx[k][l + 1], .x = x[l], .W = W[l],
                                            .IN = width[l], .OUT = width[l + 1], .x_relu = l > 0};
                }
                if (k == 0) {
                    nn_linear_stack_backward(S, NL, B);
                } else {
                    for (int i = 0; i < NL; i++) {
                        if (S[i].x_relu) nn_relu_linear_backward(S[i].dx, S[i].dW, S[i].db, S[i].dy, S[i].x, S[i].W, B,
                                                                 S[i].IN, S[i].OUT);
                        else nn_linear_backward(S[i].dx, S[i].dW, S[i].db, S[i].dy, S[i].x, S[i].W, B, S[i].IN,
                                                S[i].OUT);
                    }
                }
            }
            for (int l = 0; l < NL; l++) {
                if (dx[0][l]) ASSERT_MSG(memcmp(dx[0][l], dx[1][l], (size_t)B * width[l] * sizeof(float)) == 0,
                                         "dx of layer %d, %d threads", l, T);
                ASSERT_MSG(memcmp(dW[0][l], dW[1][l], (size_t)width[l + 1] * width[l] * sizeof(float)) == 0,
                           "dW of layer %d, %d threads", l, T);
                ASSERT_MSG(memcmp(db[0][l], db[1][l], (size_t)width[l + 1] * sizeof(float)) == 0,
                           "db of layer %d, %d threads", l, T);
                for (int k = 0; k < 2; k++) free(dx[k][l]), free(dW[k][l]), free(db[k][l]);
            }
        }
    }
    openblas_set_num_threads(1);
    for (int l = 0; l < NL; l++) free(x[l]), free(W[l]);
    free(dy_top);
}
