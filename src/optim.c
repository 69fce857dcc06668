// optim: row and dense optimizers.  Formulas in optim.h.
#include "optim.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "common.h"
#include "nn.h"

emb_opt emb_opt_make(emb_opt_kind kind, float lr, int E) {
    return (emb_opt){.kind = kind, .E = E, .lr = lr, .eps = OPT_ADAGRAD_EPS, .initial_acc = 0.0f};
}

int emb_opt_state_floats(const emb_opt *o) {
    switch (o->kind) {
    case EMB_OPT_SGD: return 0;
    case EMB_OPT_ADAGRAD: return o->E;
    case EMB_OPT_ROWWISE_ADAGRAD: return 1;
    }
    BP_ASSERTF(0, "optim: unknown row optimizer %d", (int)o->kind);
}

static const char *const kind_names[] = {"sgd", "adagrad", "rowwise_adagrad"};

int emb_opt_kind_parse(const char *name) {
    for (int k = 0; k < (int)BP_ARRAY_LEN(kind_names); k++)
        if (strcmp(name, kind_names[k]) == 0) return k;
    if (strcmp(name, "rowwise-adagrad") == 0) return EMB_OPT_ROWWISE_ADAGRAD;
    return -1;
}

const char *emb_opt_kind_name(emb_opt_kind kind) {
    return (unsigned)kind < BP_ARRAY_LEN(kind_names) ? kind_names[kind] : "?";
}

const char *emb_opt_kind_flag(emb_opt_kind kind) {
    return kind == EMB_OPT_ROWWISE_ADAGRAD ? "rowwise-adagrad" : emb_opt_kind_name(kind);
}

// ---------------------------------------------------------------------------------------------
// Row updates.  One body for a compile-time E (inlined into a function per specialised E) and a
// runtime-E fallback, as in emb.c's gather.

// Sum of g[j]^2 over j < E: four float partial sums by j mod 4 (each j ascending), then
// (s0 + s1) + (s2 + s3).  A fixed order, so the result is reproducible; four chains instead of
// one let the loop run at vector speed.
static inline __attribute__((always_inline)) float sum_sq(const float *g, const int E) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int j = 0;
    for (; j + 4 <= E; j += 4) {
        s0 += g[j] * g[j], s1 += g[j + 1] * g[j + 1];
        s2 += g[j + 2] * g[j + 2], s3 += g[j + 3] * g[j + 3];
    }
    if (j < E) s0 += g[j] * g[j];
    if (j + 1 < E) s1 += g[j + 1] * g[j + 1];
    if (j + 2 < E) s2 += g[j + 2] * g[j + 2];
    return (s0 + s1) + (s2 + s3);
}

// Loops below run in blocks of 4 with a fixed-count inner loop (which the compiler turns into
// vector code even at -O2) and a scalar tail.  sqrt4 is the correctly rounded square root of four
// floats at once: the same bits as sqrtf, which cannot be vectorised while it may set errno.
static inline __attribute__((always_inline)) void sqrt4(float *restrict s, const float *restrict a) {
#if defined(__SSE__)
    _mm_storeu_ps(s, _mm_sqrt_ps(_mm_loadu_ps(a)));
#else
    for (int k = 0; k < 4; k++) s[k] = sqrtf(a[k]);
#endif
}

static inline __attribute__((always_inline)) void update_row(emb_opt_kind kind, float lr, float eps,
                                                             float *restrict w,
                                                             const float *restrict g, const int E) {
    int j = 0;
    switch (kind) {
    case EMB_OPT_SGD:
        for (; j + 4 <= E; j += 4)
            for (int k = 0; k < 4; k++) w[j + k] -= lr * g[j + k];
        for (; j < E; j++) w[j] -= lr * g[j];
        break;
    case EMB_OPT_ADAGRAD: {
        float *restrict acc = w + E; // (E)
        for (; j + 4 <= E; j += 4) {
            float a[4], r[4];
            for (int k = 0; k < 4; k++) a[k] = acc[j + k] = acc[j + k] + g[j + k] * g[j + k];
            sqrt4(r, a);
            for (int k = 0; k < 4; k++) w[j + k] -= (lr * g[j + k]) / (r[k] + eps);
        }
        for (; j < E; j++) {
            acc[j] += g[j] * g[j];
            w[j] -= (lr * g[j]) / (sqrtf(acc[j]) + eps);
        }
        break;
    }
    case EMB_OPT_ROWWISE_ADAGRAD: {
        float acc = w[E] + sum_sq(g, E) / (float)E;
        w[E] = acc;
        float den = sqrtf(acc) + eps;
        for (; j + 4 <= E; j += 4)
            for (int k = 0; k < 4; k++) w[j + k] -= (lr * g[j + k]) / den;
        for (; j < E; j++) w[j] -= (lr * g[j]) / den;
        break;
    }
    }
}

void emb_opt_apply_row(const emb_opt *o, float *row, const float *grad) {
    update_row(o->kind, o->lr, o->eps, row, grad, o->E);
}

#define OPT_PREFETCH_ROWS 12

// Rows come either from an array of pointers (ptrs) or from a table (base + keys[i] * stride);
// with ptrs a constant NULL or not in each instance, the compiler drops the other path.
static inline __attribute__((always_inline)) void apply_body(const emb_opt *o, float *const *ptrs,
                                                             float *base, size_t stride,
                                                             const uint64_t *keys,
                                                             const float *grads, int i0, int i1,
                                                             const int E) {
    const emb_opt_kind kind = o->kind;
    const float lr = o->lr, eps = o->eps;
    const int row_bytes = (E + emb_opt_state_floats(o)) * (int)sizeof(float);
    for (int i = i0; i < i1; i++) {
        if (i + OPT_PREFETCH_ROWS < i1) {
            const int k = i + OPT_PREFETCH_ROWS;
            const char *p = (const char *)(ptrs ? ptrs[k] : base + keys[k] * stride);
            for (int b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b, 1, 3);
            __builtin_prefetch(p + row_bytes - 1, 1, 3);
        }
        float *row = ptrs ? ptrs[i] : base + keys[i] * stride;
        update_row(kind, lr, eps, row, grads + (size_t)i * E, E);
    }
}

#define OPT_SPECIALISED(X) X(16) X(17) X(32) X(33) X(64) X(65) X(128) X(129)

#define APPLY_DEF(EC)                                                                         \
    static void apply_ptrs_##EC(const emb_opt *o, float *const *rows, const float *grads,     \
                                int n) {                                                      \
        apply_body(o, rows, NULL, 0, NULL, grads, 0, n, EC);                                  \
    }                                                                                         \
    static void apply_table_##EC(const emb_opt *o, float *base, size_t stride,                \
                                 const uint64_t *keys, const float *grads, int i0, int i1) {  \
        apply_body(o, NULL, base, stride, keys, grads, i0, i1, EC);                           \
    }
OPT_SPECIALISED(APPLY_DEF)
#undef APPLY_DEF

void emb_opt_apply_rows(const emb_opt *o, float *const *rows, const float *grads, int n) {
    switch (o->E) {
#define APPLY_CASE(EC)                                                                        \
    case EC: apply_ptrs_##EC(o, rows, grads, n); break;
        OPT_SPECIALISED(APPLY_CASE)
#undef APPLY_CASE
    default: apply_body(o, rows, NULL, 0, NULL, grads, 0, n, o->E);
    }
}

void emb_opt_apply_table_range(const emb_opt *o, emb_table *t, const emb_grad *g, int i0, int i1) {
    BP_ASSERTF(o->E == t->L.E && g->E == t->L.E, "optim: E %d (optimizer) %d (table) %d (gradient)",
               o->E, t->L.E, g->E);
    BP_ASSERTF(emb_opt_state_floats(o) <= t->L.S, "optim: %s needs %d state floats per row, table has %d",
               emb_opt_kind_name(o->kind), emb_opt_state_floats(o), t->L.S);
    BP_ASSERT(0 <= i0 && i0 <= i1 && i1 <= g->n);
    if (i1 > i0) BP_ASSERT(g->keys[i1 - 1] < t->L.rows);
    const size_t stride = (size_t)t->L.stride;
    switch (o->E) {
#define APPLY_CASE(EC)                                                                        \
    case EC: apply_table_##EC(o, t->data, stride, g->keys, g->rows, i0, i1); break;
        OPT_SPECIALISED(APPLY_CASE)
#undef APPLY_CASE
    default: apply_body(o, NULL, t->data, stride, g->keys, g->rows, i0, i1, o->E);
    }
}

typedef struct {
    const emb_opt *o;
    emb_table *t;
    const emb_grad *g;
} apply_job;

static void apply_part(void *ctx, int p, int n) {
    const apply_job *j = ctx;
    emb_opt_apply_table_range(j->o, j->t, j->g, (int)nn_part_begin(j->g->n, p, n),
                              (int)nn_part_begin(j->g->n, p + 1, n));
}

// Rows per part below which another thread costs more than it saves.
enum { APPLY_MIN_PART_ROWS = 512 };

static int apply_parts(int nthreads, int rows) {
    const int n = BP_MIN(BP_MIN(nthreads, NN_POOL_MAX), rows / APPLY_MIN_PART_ROWS);
    return n < 1 ? 1 : n;
}

void emb_opt_apply_table(const emb_opt *o, emb_table *t, const emb_grad *g, int nthreads) {
    apply_job j = {o, t, g};
    nn_pool_run(apply_parts(nthreads, g->n), apply_part, &j);
}

typedef struct {
    const emb_opt *o;
    float *const *rows;
    const float *grads;
    int n;
} apply_ptrs_job;

static void apply_ptrs_part(void *ctx, int p, int n) {
    const apply_ptrs_job *j = ctx;
    const int i0 = (int)nn_part_begin(j->n, p, n), i1 = (int)nn_part_begin(j->n, p + 1, n);
    emb_opt_apply_rows(j->o, j->rows + i0, j->grads + (size_t)i0 * j->o->E, i1 - i0);
}

void emb_opt_apply_rows_pool(const emb_opt *o, float *const *rows, const float *grads, int n, int nthreads) {
    apply_ptrs_job j = {o, rows, grads, n};
    nn_pool_run(apply_parts(nthreads, n), apply_ptrs_part, &j);
}

// ---------------------------------------------------------------------------------------------
// Dense optimizers

dense_opt dense_opt_make(dense_opt_kind kind, float lr) {
    return (dense_opt){.kind = kind, .lr = lr, .eps = OPT_ADAGRAD_EPS, .initial_acc = 0.0f,
                       .weight_decay = 0.0f};
}

size_t dense_opt_state_floats(const dense_opt *o, size_t n) {
    return o->kind == DENSE_OPT_ADAGRAD ? n : 0;
}

void dense_opt_state_init(const dense_opt *o, float *state, size_t n) {
    for (size_t i = 0; i < dense_opt_state_floats(o, n); i++) state[i] = o->initial_acc;
}

static void dense_step_range(const dense_opt *o, float *restrict params, const float *restrict grads,
                             float *restrict state, size_t n) {
    const float lr = o->lr, wd = o->weight_decay, eps = o->eps;
    size_t i = 0;
    switch (o->kind) {
    case DENSE_OPT_SGD:
        if (wd != 0.0f) {
            for (; i + 8 <= n; i += 8)
                for (int k = 0; k < 8; k++) params[i + k] -= lr * (grads[i + k] + wd * params[i + k]);
            for (; i < n; i++) params[i] -= lr * (grads[i] + wd * params[i]);
        } else {
            for (; i + 8 <= n; i += 8)
                for (int k = 0; k < 8; k++) params[i + k] -= lr * grads[i + k];
            for (; i < n; i++) params[i] -= lr * grads[i];
        }
        return;
    case DENSE_OPT_ADAGRAD:
        BP_ASSERT(state || n == 0);
        for (; i + 4 <= n; i += 4) {
            float g[4], a[4], r[4];
            for (int k = 0; k < 4; k++) {
                g[k] = wd != 0.0f ? grads[i + k] + wd * params[i + k] : grads[i + k];
                a[k] = state[i + k] = state[i + k] + g[k] * g[k];
            }
            sqrt4(r, a);
            for (int k = 0; k < 4; k++) params[i + k] -= (lr * g[k]) / (r[k] + eps);
        }
        for (; i < n; i++) {
            float g = wd != 0.0f ? grads[i] + wd * params[i] : grads[i];
            state[i] += g * g;
            params[i] -= (lr * g) / (sqrtf(state[i]) + eps);
        }
        return;
    }
    BP_ASSERTF(0, "optim: unknown dense optimizer %d", (int)o->kind);
}

// The slab is cut over the pool (nn.h) into parts of at least DENSE_MIN_PART floats, on
// multiples of 16: every float's update is the same whichever part makes it.
enum { DENSE_MIN_PART = 1 << 16, DENSE_ALIGN = 16 };

typedef struct {
    const dense_opt *o;
    float *params, *state;
    const float *grads;
    size_t n;
} dense_job;

static void dense_part(void *ctx, int p, int n) {
    const dense_job *j = ctx;
    size_t blocks = (j->n + DENSE_ALIGN - 1) / DENSE_ALIGN;
    size_t i0 = BP_MIN(j->n, (size_t)nn_part_begin((long)blocks, p, n) * DENSE_ALIGN);
    size_t i1 = BP_MIN(j->n, (size_t)nn_part_begin((long)blocks, p + 1, n) * DENSE_ALIGN);
    dense_step_range(j->o, j->params + i0, j->grads + i0, j->state ? j->state + i0 : NULL, i1 - i0);
}

void dense_opt_step(const dense_opt *o, float *params, const float *grads, float *state, size_t n) {
    BP_ASSERT(o->kind == DENSE_OPT_SGD || state || n == 0);
    int parts = (int)BP_MIN((size_t)nn_threads(), n / DENSE_MIN_PART);
    dense_job j = {o, params, state, grads, n};
    nn_pool_run(parts < 1 ? 1 : parts, dense_part, &j);
}

// ---------------------------------------------------------------------------------------------
// Learning-rate schedule

// The reference's rate at step i when i is in the warmup or the decay phase (1), else 0.
static int lr_phase_rate(const lr_schedule *s, double lr, int64_t i, double *out) {
    if (i < s->warmup) {
        *out = lr * (1.0 - (double)(s->warmup - i) / (double)s->warmup);
        return 1;
    }
    if (s->decay_steps > 0 && s->decay_start <= i && i < s->decay_start + s->decay_steps) {
        const double f = (double)(s->decay_steps - (i - s->decay_start)) / (double)s->decay_steps;
        *out = BP_MAX(1e-7, lr * (f * f));
        return 1;
    }
    return 0;
}

float lr_schedule_rate(const lr_schedule *s, double lr, int64_t t) {
    const int64_t i = t + 1;
    double r;
    if (lr_phase_rate(s, lr, i, &r)) return (float)r;
    if (s->decay_steps == 0) return (float)lr;
    // Frozen at the last phase step before i: the decay's last step once it is over, else the
    // warmup's last step (i >= W here, and S >= W, so i lies between the two phases).
    const int64_t decay_end = s->decay_start + s->decay_steps;
    int64_t last = i >= decay_end ? decay_end - 1 : s->warmup - 1;
    if (last >= 1 && lr_phase_rate(s, lr, last, &r)) return (float)r;
    return (float)lr;
}
