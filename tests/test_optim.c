#include <stdlib.h>

#include "common.h"
#include "emb.h"
#include "optim.h"
#include "test.h"

// Double-precision references of the three row optimizers (formulas in optim.h).
static void ref_step(emb_opt_kind kind, double lr, double eps, int E, double *w, double *acc,
                     const float *g) {
    if (kind == EMB_OPT_SGD) {
        for (int j = 0; j < E; j++) w[j] -= lr * g[j];
    } else if (kind == EMB_OPT_ADAGRAD) {
        for (int j = 0; j < E; j++) {
            acc[j] += (double)g[j] * g[j];
            w[j] -= lr * g[j] / (sqrt(acc[j]) + eps);
        }
    } else {
        double s = 0;
        for (int j = 0; j < E; j++) s += (double)g[j] * g[j];
        acc[0] += s / E;
        for (int j = 0; j < E; j++) w[j] -= lr * g[j] / (sqrt(acc[0]) + eps);
    }
}

TEST(optim_rows_match_double_reference) {
    const int Es[] = {16, 17, 64, 5, 129, 6, 7}; // every E % 4, which the unrolled sums treat apart
    bp_rng r;
    bp_rng_seed(&r, 21, 0);
    for (int kind = 0; kind < 3; kind++) {
        for (int c = 0; c < (int)BP_ARRAY_LEN(Es); c++) {
            const int E = Es[c];
            emb_opt o = emb_opt_make((emb_opt_kind)kind, 0.05f, E);
            o.initial_acc = kind ? 0.1f : 0.0f;
            if (c % 2) o.eps = 0.05f; // large enough to matter: where eps goes is checked
            const int S = emb_opt_state_floats(&o);
            ASSERT_EQ(S, kind == 0 ? 0 : kind == 1 ? E : 1);
            float row[129 + 129 + 3], g[129];
            double w[129], acc[129];
            for (int j = 0; j < E; j++) w[j] = row[j] = (float)(bp_rng_uniform(&r) - 0.5);
            for (int s = 0; s < S; s++) acc[s] = row[E + s] = o.initial_acc;
            row[E + S] = 12345.0f; // beyond the row's state: must stay
            for (int step = 0; step < 6; step++) {
                double scale = step == 3 ? 1e-3 : 1.0; // a small gradient among large ones
                for (int j = 0; j < E; j++) g[j] = (float)(scale * bp_rng_normal(&r));
                emb_opt_apply_row(&o, row, g);
                ref_step(o.kind, o.lr, o.eps, E, w, acc, g);
                for (int j = 0; j < E; j++)
                    ASSERT_MSG(fabs(row[j] - w[j]) <= 1e-6 * (1 + fabs(w[j])), "%s E=%d step %d [%d]: %.9g vs %.9g",
                               emb_opt_kind_name(o.kind), E, step, j, row[j], w[j]);
                for (int s = 0; s < S; s++)
                    ASSERT_MSG(fabs(row[E + s] - acc[s]) <= 1e-6 * acc[s], "%s acc[%d]", emb_opt_kind_name(o.kind), s);
            }
            ASSERT_TRUE(row[E + S] == 12345.0f);
        }
    }
}

// Adagrad's first step from a zero accumulator moves every weight by lr * g / |g| = lr (up to
// eps): the property that makes it insensitive to gradient scale.
TEST(optim_adagrad_first_step_is_lr) {
    emb_opt o = emb_opt_make(EMB_OPT_ADAGRAD, 0.01f, 16);
    float row[32] = {0}, g[16];
    for (int j = 0; j < 16; j++) g[j] = (j - 7.5f) * 1e-3f;
    emb_opt_apply_row(&o, row, g);
    for (int j = 0; j < 16; j++) ASSERT_NEAR(row[j], g[j] > 0 ? -0.01 : 0.01, 1e-8);
    // row-wise: all move by lr * g / rms(g)
    emb_opt rw = emb_opt_make(EMB_OPT_ROWWISE_ADAGRAD, 0.01f, 16);
    float row2[20] = {0};
    emb_opt_apply_row(&rw, row2, g);
    double rms = 0;
    for (int j = 0; j < 16; j++) rms += (double)g[j] * g[j] / 16;
    ASSERT_NEAR(row2[16], rms, 1e-12);
    for (int j = 0; j < 16; j++) ASSERT_NEAR(row2[j], -0.01 * g[j] / sqrt(rms), 1e-8);
}

static void fill_rows(bp_rng *r, float *rows, int n, int stride, int E, int S) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < E; j++) rows[(size_t)i * stride + j] = (float)bp_rng_normal(r);
        for (int s = 0; s < S; s++) rows[(size_t)i * stride + E + s] = (float)bp_rng_uniform(r);
    }
}

// emb_opt_apply_rows, the table-level apply and the pooled row apply (1 and 2 threads) give
// exactly what per-row applies give.
TEST(optim_apply_rows_and_table_exact) {
    uint64_t card[2] = {3000, 9000};
    bp_rng r;
    bp_rng_seed(&r, 8, 0);
    const int Es[] = {16, 33, 10};
    for (int kind = 0; kind < 3; kind++) {
        for (int c = 0; c < 3; c++) {
            int E = Es[c], D = E == 33 ? 32 : E;
            emb_opt o = emb_opt_make((emb_opt_kind)kind, 0.1f, E);
            emb_layout_cfg cfg = {.F = 2, .card = card, .D = D, .E = E, .S = emb_opt_state_floats(&o), .seed = 1};
            emb_layout L;
            ASSERT_OK(emb_layout_init(&L, &cfg));
            emb_table t1, t2;
            ASSERT_OK(emb_table_alloc(&t1, &L, 1));
            ASSERT_OK(emb_table_alloc(&t2, &L, 1));
            fill_rows(&r, t1.data, (int)L.rows, L.stride, E, L.S);
            memcpy(t2.data, t1.data, emb_layout_bytes(&L));
            // a gradient over 6000 distinct keys (enough for the threaded path)
            emb_grad g;
            ASSERT_OK(emb_grad_init(&g, 6000, E));
            uint64_t keys[6000];
            for (int i = 0; i < 6000; i++) keys[i] = (uint64_t)i * 2 + (i % 3 == 0);
            ASSERT_OK(emb_grad_set_keys(&g, keys, 6000));
            for (size_t i = 0; i < (size_t)6000 * E; i++) g.rows[i] = (float)bp_rng_normal(&r);
            for (int nt = 1; nt <= 2; nt++) {
                emb_opt_apply_table(&o, &t1, &g, nt);
                for (int i = 0; i < g.n; i++) emb_opt_apply_row(&o, emb_table_row(&t2, g.keys[i]), g.rows + (size_t)i * E);
                ASSERT_MSG(memcmp(t1.data, t2.data, emb_layout_bytes(&L)) == 0, "%s E=%d threads %d",
                           emb_opt_kind_name(o.kind), E, nt);
            }
            float **ptrs = bp_xmalloc(6000 * sizeof *ptrs);
            for (int i = 0; i < 6000; i++) ptrs[i] = emb_table_row(&t1, keys[5999 - i]);
            for (int nt = 0; nt <= 2; nt++) { // 0: emb_opt_apply_rows; 1, 2: on the pool
                if (nt) emb_opt_apply_rows_pool(&o, ptrs, g.rows, 6000, nt);
                else emb_opt_apply_rows(&o, ptrs, g.rows, 6000);
                for (int i = 0; i < 6000; i++)
                    emb_opt_apply_row(&o, emb_table_row(&t2, keys[5999 - i]), g.rows + (size_t)i * E);
                ASSERT_MSG(memcmp(t1.data, t2.data, emb_layout_bytes(&L)) == 0, "%s E=%d rows, threads %d",
                           emb_opt_kind_name(o.kind), E, nt);
            }
            free(ptrs);
            emb_grad_free(&g);
            emb_table_free(&t1), emb_table_free(&t2);
        }
    }
}

TEST(optim_names) {
    ASSERT_EQ(emb_opt_kind_parse("sgd"), EMB_OPT_SGD);
    ASSERT_EQ(emb_opt_kind_parse("adagrad"), EMB_OPT_ADAGRAD);
    ASSERT_EQ(emb_opt_kind_parse("rowwise_adagrad"), EMB_OPT_ROWWISE_ADAGRAD);
    ASSERT_EQ(emb_opt_kind_parse("rowwise-adagrad"), EMB_OPT_ROWWISE_ADAGRAD);
    ASSERT_EQ(emb_opt_kind_parse("adam"), -1);
    ASSERT_TRUE(strcmp(emb_opt_kind_name(EMB_OPT_ROWWISE_ADAGRAD), "rowwise_adagrad") == 0);
    emb_opt o = emb_opt_make(EMB_OPT_ADAGRAD, 0.1f, 16);
    ASSERT_TRUE(o.eps == 1e-10f && o.initial_acc == 0.0f);
}

// Dense SGD and Adagrad against the torch formulas written out per element in float (exact),
// and against double (close), for n not a multiple of the block size.
TEST(optim_dense_matches_formulas) {
    enum { n = 1003 };
    static float p[n], p0[n], g[n], st[n], pe[n], se[n];
    bp_rng r;
    bp_rng_seed(&r, 4, 0);
    for (int kind = 0; kind < 2; kind++) {
        for (int wdi = 0; wdi < 2; wdi++) {
            dense_opt o = dense_opt_make((dense_opt_kind)kind, 0.03f);
            o.weight_decay = wdi ? 0.01f : 0.0f;
            o.initial_acc = kind ? 0.5f : 0.0f;
            if (wdi) o.eps = 0.25f;
            ASSERT_EQ(dense_opt_state_floats(&o, n), kind ? n : 0);
            for (int i = 0; i < n; i++) p[i] = pe[i] = p0[i] = (float)bp_rng_normal(&r);
            dense_opt_state_init(&o, st, n);
            for (int i = 0; i < n; i++) se[i] = o.initial_acc;
            if (kind) ASSERT_TRUE(st[n - 1] == 0.5f);
            double pd[n], sd[n];
            for (int i = 0; i < n; i++) pd[i] = p0[i], sd[i] = o.initial_acc;
            for (int step = 0; step < 4; step++) {
                for (int i = 0; i < n; i++) g[i] = (float)bp_rng_normal(&r);
                dense_opt_step(&o, p, g, kind ? st : NULL, n);
                for (int i = 0; i < n; i++) {
                    float gi = g[i] + o.weight_decay * pe[i]; // torch: grad.add(param, alpha=wd)
                    if (!wdi) gi = g[i];
                    double gd = (double)g[i] + (double)o.weight_decay * pd[i];
                    if (kind == 0) {
                        pe[i] = pe[i] + (-o.lr) * gi; // torch: param.add_(grad, alpha=-lr)
                        pd[i] -= (double)o.lr * gd;
                    } else {
                        se[i] = se[i] + gi * gi;       // state_sum.addcmul_(grad, grad, value=1)
                        float std = sqrtf(se[i]) + o.eps; // state_sum.sqrt().add_(eps)
                        pe[i] = pe[i] + ((-o.lr) * gi) / std; // param.addcdiv_(grad, std, value=-clr)
                        sd[i] += gd * gd;
                        pd[i] -= (double)o.lr * gd / (sqrt(sd[i]) + o.eps);
                    }
                }
                ASSERT_MSG(memcmp(p, pe, sizeof p) == 0, "kind %d wd %d step %d", kind, wdi, step);
                if (kind) ASSERT_TRUE(memcmp(st, se, sizeof st) == 0);
                for (int i = 0; i < n; i++) ASSERT_NEAR(p[i], pd[i], 1e-5 * (1 + fabs(pd[i])));
            }
            if (kind == 0 && !wdi) ASSERT_TRUE(p[0] != p0[0]);
        }
    }
}

extern void openblas_set_num_threads(int);

// A slab big enough to be cut over the pool gets the same bits with 1 and 3 threads.
TEST(optim_dense_threads_identical) {
    const size_t n = 300007; // 4 parts' worth, and a tail past the last block of 16
    float *p[2], *st[2], *g = malloc(n * sizeof(float));
    bp_rng r;
    bp_rng_seed(&r, 9, 0);
    for (int kind = 0; kind < 2; kind++) {
        dense_opt o = dense_opt_make((dense_opt_kind)kind, 0.03f);
        o.weight_decay = 0.01f;
        for (int k = 0; k < 2; k++) {
            p[k] = malloc(n * sizeof(float)), st[k] = malloc(n * sizeof(float));
            dense_opt_state_init(&o, st[k], n);
        }
        for (size_t i = 0; i < n; i++) p[0][i] = p[1][i] = (float)bp_rng_normal(&r);
        for (int step = 0; step < 2; step++) {
            for (size_t i = 0; i < n; i++) g[i] = (float)bp_rng_normal(&r);
            for (int k = 0; k < 2; k++) {
                openblas_set_num_threads(k ? 3 : 1);
                dense_opt_step(&o, p[k], g, kind ? st[k] : NULL, n);
            }
        }
        openblas_set_num_threads(1);
        ASSERT_TRUE(memcmp(p[0], p[1], n * sizeof(float)) == 0);
        if (kind) ASSERT_TRUE(memcmp(st[0], st[1], n * sizeof(float)) == 0);
        ASSERT_TRUE(p[1][n - 1] != 0.0f); // the tail was updated (not left as the start value)
        for (int k = 0; k < 2; k++) free(p[k]), free(st[k]);
    }
    free(g);
}

// The DLRM reference's schedule as its scheduler runs it: stepped once per update from step 1,
// remembering the last rate it computed (the closed form in optim.c derives that rate instead).
typedef struct {
    int64_t w, s, n;
    double base, last;
} sched_twin;

static double twin_rate(sched_twin *z, int64_t i) {
    if (i < z->w) return z->last = z->base * (1.0 - (double)(z->w - i) / (double)z->w);
    if (z->s <= i && i < z->s + z->n) {
        double f = (double)(z->n - (i - z->s)) / (double)z->n;
        return z->last = BP_MAX(1e-7, z->base * (f * f));
    }
    return z->n > 0 ? z->last : z->base;
}

TEST(optim_lr_schedule_matches_stepped_twin) {
    bp_rng r;
    bp_rng_seed(&r, 11, 0);
    for (int run = 0; run < 400; run++) {
        lr_schedule s = {0, 0, 0};
        s.warmup = (int64_t)bp_rng_below(&r, 12);
        s.decay_steps = run % 4 == 0 ? 0 : (int64_t)bp_rng_below(&r, 15);
        s.decay_start = s.decay_steps ? s.warmup + (int64_t)bp_rng_below(&r, 10) : 0;
        const double lr = run % 7 == 0 ? 1e-9 : 1e-3 + 0.5 * bp_rng_uniform(&r); // some below the decay's 1e-7 floor
        sched_twin z = {s.warmup, s.decay_start, s.decay_steps, lr, lr};
        for (int64_t t = 0; t < 60; t++) {
            float want = (float)twin_rate(&z, t + 1), got = lr_schedule_rate(&s, lr, t);
            ASSERT_MSG(got == want, "W %lld S %lld N %lld, iteration %lld: %.9g, stepped %.9g", (long long)s.warmup,
                       (long long)s.decay_start, (long long)s.decay_steps, (long long)t + 1, (double)got, (double)want);
        }
    }
    // By hand: W 4, S 6, N 2, lr 1: 0.25, 0.5, 0.75, then 0.75 held, 1, 0.25, then 0.25 held.
    lr_schedule s = {4, 6, 2};
    const float want[] = {0.25f, 0.5f, 0.75f, 0.75f, 0.75f, 1.0f, 0.25f, 0.25f, 0.25f};
    for (int t = 0; t < 9; t++) ASSERT_EQ(lr_schedule_rate(&s, 1.0, t), want[t]);
    lr_schedule none = {0, 0, 0}, warm = {3, 0, 0};
    ASSERT_EQ(lr_schedule_rate(&none, 0.1, 12345), 0.1f);
    ASSERT_EQ(lr_schedule_rate(&warm, 0.3, 0), (float)(0.3 * (1.0 - 2.0 / 3.0)));
    ASSERT_EQ(lr_schedule_rate(&warm, 0.3, 2), 0.3f); // warmup alone: the base rate after it
    ASSERT_TRUE(!lr_schedule_on(&none) && lr_schedule_on(&warm) && lr_schedule_on(&s));
}
