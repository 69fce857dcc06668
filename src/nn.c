// nn: dense layers on OpenBLAS sgemm, plus hand-written loops for the interactions.  Shapes and
// gradient conventions are documented in nn.h.
#include "nn.h"

#include <cblas.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "simd.h"

// Four floats: the vector every x86-64 (SSE2) and AArch64 (NEON) target has natively, so the
// compiler keeps these in registers at the project's plain -O2.  Loads and stores go through
// memcpy (one unaligned vector move).  The sums are written out in a fixed order and ISO C mode
// does not contract a * b + c into an FMA, so the bits do not depend on the instruction set.
typedef float v4f __attribute__((vector_size(16)));
static inline v4f v4_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v4_store(float *p, v4f v) { memcpy(p, &v, sizeof v); }

// ---------------------------------------------------------------------------------------------
// Thread pool (contract in nn.h).
//
// One job at a time.  The caller publishes (fn, ctx, n), bumps `gen` and runs part 0; every
// started worker sees the new generation, runs its part if it has one, and counts itself off in
// `pending` (all started workers do, with a part or without, so no worker can still be reading a
// finished job when the next one is published).  Waiting on either side spins briefly (a step's
// jobs come tens of microseconds apart) and then sleeps on a futex.  A worker counts itself in
// `sleepers` before it sleeps, and the caller makes the wake-up system call only when that count
// is not zero: a job that finds its workers spinning costs no system call (with a dozen or more
// jobs per training step at batch 128, the call was a measurable share of the step).

enum { SPIN_ROUNDS = 1 << 13 }; // about 0.15 ms of pause instructions on the reference machine

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; // held by the one caller
static int started;                                            // workers running (under the lock)
static _Atomic unsigned gen;                                   // job generation
static _Atomic unsigned pending;                               // started workers yet to finish
static _Atomic int caller_sleeping;
static _Atomic unsigned sleepers; // workers asleep on gen (or about to be)
static nn_pool_fn job_fn; // the job: written by the caller before gen is bumped
static void *job_ctx;
static int job_n;
static unsigned start_gen[NN_POOL_MAX]; // gen when worker i was started
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

// A forked child has none of the workers: it starts its own on first use.
static void pool_atfork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pool_lock = fresh;
    started = 0;
    atomic_store(&pending, 0);
    atomic_store(&caller_sleeping, 0);
    atomic_store(&sleepers, 0);
}
static void pool_atfork_register(void) { pthread_atfork(NULL, NULL, pool_atfork_child); }

static void futex_wait(_Atomic unsigned *addr, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic unsigned *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, NN_POOL_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg;
    unsigned seen = start_gen[id]; // the generation before its first job, read under the lock
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            // seq_cst on both sides: either the caller's gen bump is seen here (the futex
            // returns at once) or the caller sees this worker counted and wakes it.
            atomic_fetch_add(&sleepers, 1);
            futex_wait(&gen, seen);
            atomic_fetch_sub(&sleepers, 1);
        }
        seen = g;
        if (id < job_n) job_fn(job_ctx, id, job_n);
        // seq_cst on both sides: either the caller sees pending reach 0 or this sees it asleep.
        if (atomic_fetch_sub(&pending, 1) == 1 && atomic_load(&caller_sleeping))
            futex_wake(&pending);
    }
    return NULL;
}

int nn_threads(void) {
    int t = openblas_get_num_threads();
    return t < 1 ? 1 : t > NN_POOL_MAX ? NN_POOL_MAX : t;
}

static void run_serial(int n, nn_pool_fn fn, void *ctx) {
    for (int p = 0; p < n; p++) fn(ctx, p, n);
}

void nn_pool_run(int n, nn_pool_fn fn, void *ctx) {
    BP_ASSERT(n >= 1 && n <= NN_POOL_MAX);
    if (n == 1 || pthread_mutex_trylock(&pool_lock) != 0) {
        run_serial(n, fn, ctx);
        return;
    }
    pthread_once(&atfork_once, pool_atfork_register);
    while (started < n - 1) {
        pthread_t tid;
        start_gen[started + 1] = atomic_load(&gen);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&tid, &attr, worker_main, (void *)(intptr_t)(started + 1));
        pthread_attr_destroy(&attr);
        if (rc) break;
        started++;
    }
    if (started < n - 1) { // no threads to be had: the same parts, here
        pthread_mutex_unlock(&pool_lock);
        run_serial(n, fn, ctx);
        return;
    }
    job_fn = fn, job_ctx = ctx, job_n = n;
    atomic_store_explicit(&pending, (unsigned)started, memory_order_relaxed);
    atomic_fetch_add(&gen, 1);
    if (atomic_load(&sleepers) != 0) futex_wake(&gen);
    fn(ctx, 0, n);
    int spins = 0;
    unsigned left;
    while ((left = atomic_load_explicit(&pending, memory_order_acquire)) != 0) {
        if (++spins < SPIN_ROUNDS) {
            cpu_relax();
            continue;
        }
        atomic_store(&caller_sleeping, 1);
        if (atomic_load(&pending) != 0) futex_wait(&pending, left);
        atomic_store(&caller_sleeping, 0);
    }
    pthread_mutex_unlock(&pool_lock);
}

// ---------------------------------------------------------------------------------------------
// Matrix products.  C (M, N) = alpha op(A) op(B) + beta C, row-major, through OpenBLAS.  With one
// thread (nn_threads) that is one sgemm call.  With T > 1 the product is cut into up to T slices of
// C's rows or columns, each an sgemm on one OpenBLAS thread, run on the pool: every element of C
// keeps its whole sum over K in one call, so no partial sums are added across threads, and the
// cut depends only on (T, M, N, K).  OpenBLAS's own threads are switched off for the duration
// (they would each want all the cores) and back on afterwards.  Cutting the dimension whose other
// operand is smaller keeps the repacked data small: each slice packs all of the other operand.

// A product is cut only when every slice gets at least GEMM_MIN_SLICE rows or columns and
// GEMM_MIN_MACS multiply-adds, and K >= GEMM_MIN_K: with the pool's workers spinning a cut costs
// about a microsecond, so at batch 128 the first bottom layer's weight gradient (512 x 13 x 128)
// pays off cut, while its forward product (K = 13) ran slower in two slices than in one.
enum { GEMM_MIN_SLICE = 32, GEMM_MIN_MACS = 1 << 17, GEMM_MIN_K = 32 };
// An outer product (K = 1, gemm_outer) is cut when each slice gets OUTER_MIN_PART elements.
enum { OUTER_MIN_PART = 1 << 13 };

// Elementwise work and column sums are split over the pool in parts of at least this many floats
// (each float's arithmetic is the same whichever part computes it).
enum { ELEM_MIN_PART = 1 << 17, ELEM_ALIGN = 16 };

static int elem_parts(size_t n) {
    size_t by_size = n / ELEM_MIN_PART;
    int p = (int)BP_MIN((size_t)nn_threads(), by_size);
    return p < 1 ? 1 : p;
}

// Part p of n of [0, len), with inner bounds on multiples of ELEM_ALIGN.
static void elem_range(size_t len, int p, int n, size_t *i0, size_t *i1) {
    size_t blocks = (len + ELEM_ALIGN - 1) / ELEM_ALIGN;
    *i0 = BP_MIN(len, (size_t)nn_part_begin((long)blocks, p, n) * ELEM_ALIGN);
    *i1 = BP_MIN(len, (size_t)nn_part_begin((long)blocks, p + 1, n) * ELEM_ALIGN);
}

static void relu_forward_range(float *y, const float *x, size_t i, size_t n);
static void relu_backward_range(float *dx, const float *dy, const float *y, size_t i, size_t n);
static void bias_grad_range(float *db, const float *dy, int B, int OUT, int o0, int o1);

// One product and the work that goes with it in the same pass over the pool, so that a layer
// costs one fork/join and no serial elementwise pass:
//   before: C's rows start as bias (beta = 1), each slice filling its own;
//   after:  ReLU on the slice (relu), or the slice masked by mask > 0 (mask, laid out like C:
//           a ReLU's backward pass folded into the product that produces its gradient);
//   beside: db[o] += sum over the rows of dy[., o], part p taking its share of [0, OUT) by
//           elem_range (a bias gradient next to the weight gradient's product).
typedef struct {
    int split_rows; // 1: slices of M, 0: slices of N
    enum CBLAS_TRANSPOSE ta, tb;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    const float *bias;  // (N) or NULL
    int relu;
    const float *mask;  // (M, N) with leading dimension ldc, or NULL
    float *db;          // (OUT) or NULL
    const float *dy;    // (dB, OUT)
    int dB, OUT;
} gemm_job;

// C[i0..i1, j0..j1) = bias[j0..j1) on every row.
static void fill_bias(float *C, int ldc, const float *bias, int i0, int i1, int j0, int j1) {
    for (int i = i0; i < i1; i++) memcpy(C + (size_t)i * ldc + j0, bias + j0, (size_t)(j1 - j0) * sizeof *C);
}

// The "after" step on C[i0..i1, j0..j1).
static void gemm_after(const gemm_job *g, int i0, int i1, int j0, int j1) {
    for (int i = i0; i < i1; i++) {
        float *row = g->C + (size_t)i * g->ldc;
        if (g->relu) relu_forward_range(row, row, (size_t)j0, (size_t)j1);
        else if (g->mask) relu_backward_range(row, row, g->mask + (size_t)i * g->ldc, (size_t)j0, (size_t)j1);
    }
}

// C[r0..r1, c0..c1) = A[., 0] B[0, .] for a product with K = 1, alpha = 1, beta = 0 and neither
// operand transposed (a linear layer's input gradient from one output): each element is one
// product, a * b + 0 as OpenBLAS's kernels make it (the + 0 turns -0 into +0), without the
// call's overhead (at batch 128 the sgemm took twenty times the loop's time).
static int gemm_is_outer(const gemm_job *g) {
    return g->K == 1 && g->alpha == 1.0f && g->beta == 0.0f && !g->bias && g->ta == CblasNoTrans &&
           g->tb == CblasNoTrans;
}

static void gemm_outer(const gemm_job *g, int r0, int r1, int c0, int c1) {
    const v4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = r0; i < r1; i++) {
        const float a = g->A[(size_t)i * g->lda];
        const v4f va = {a, a, a, a};
        float *row = g->C + (size_t)i * g->ldc;
        int j = c0;
        for (; j + 4 <= c1; j += 4) v4_store(row + j, va * v4_load(g->B + j) + zero);
        for (; j < c1; j++) row[j] = a * g->B[j] + 0.0f;
    }
}

// A slice of C's columns is computed in part p's own buffer (ldc = its width) and then copied
// into C: two cores writing the two halves of the same rows of C at once ran each product a third
// slower than with the rows apart (the same call, only C's row stride differs, so the same bits).
// The buffer belongs to the thread (a pthread key, freed when the thread ends): callers on other
// threads run their parts serially on themselves when the pool is busy.
typedef struct {
    size_t cap; // floats
    float f[];
} slice_buf;
static pthread_key_t slice_key;
static pthread_once_t slice_once = PTHREAD_ONCE_INIT;
static void slice_key_make(void) {
    int rc = pthread_key_create(&slice_key, free);
    BP_ASSERT(rc == 0);
}

static float *slice_buf_get(size_t n) {
    pthread_once(&slice_once, slice_key_make);
    slice_buf *b = pthread_getspecific(slice_key);
    if (!b || b->cap < n) {
        free(b);
        b = bp_xmalloc(sizeof *b + n * sizeof(float));
        b->cap = n;
        int rc = pthread_setspecific(slice_key, b);
        BP_ASSERT(rc == 0);
    }
    return b->f;
}

static void gemm_slice_private(const gemm_job *g, int r0, int r1, int c0, int c1, int i0) {
    const int w = c1 - c0, rows = r1 - r0;
    float *buf = slice_buf_get((size_t)rows * w); // (rows, w)
    if (g->bias) {
        for (int i = 0; i < rows; i++) memcpy(buf + (size_t)i * w, g->bias + c0, (size_t)w * sizeof *buf);
    } else if (g->beta != 0.0f) {
        for (int i = 0; i < rows; i++)
            memcpy(buf + (size_t)i * w, g->C + (size_t)(r0 + i) * g->ldc + c0, (size_t)w * sizeof *buf);
    }
    const float *B = g->tb == CblasNoTrans ? g->B + i0 : g->B + (size_t)i0 * g->ldb;
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, rows, w, g->K, g->alpha, g->A, g->lda, B, g->ldb, g->beta, buf, w);
    for (int i = 0; i < rows; i++) {
        const float *src = buf + (size_t)i * w;
        float *dst = g->C + (size_t)(r0 + i) * g->ldc + c0;
        if (g->relu) relu_forward_range(dst, src, 0, (size_t)w);
        else if (g->mask) relu_backward_range(dst, src, g->mask + (size_t)(r0 + i) * g->ldc + c0, 0, (size_t)w);
        else memcpy(dst, src, (size_t)w * sizeof *dst);
    }
}

// Slice p of n of g's product (and part p of its bias gradient), as one single-threaded call.
static void gemm_slice(const gemm_job *g, int p, int n) {
    if (g->db) {
        size_t o0, o1;
        elem_range((size_t)g->OUT, p, n, &o0, &o1);
        bias_grad_range(g->db, g->dy, g->dB, g->OUT, (int)o0, (int)o1);
    }
    const int len = g->split_rows ? g->M : g->N;
    const int i0 = (int)nn_part_begin(len, p, n), i1 = (int)nn_part_begin(len, p + 1, n);
    if (i1 == i0) return;
    const int r0 = g->split_rows ? i0 : 0, r1 = g->split_rows ? i1 : g->M;
    const int c0 = g->split_rows ? 0 : i0, c1 = g->split_rows ? g->N : i1;
    if (gemm_is_outer(g)) {
        gemm_outer(g, r0, r1, c0, c1);
    } else if (!g->split_rows && n > 1) {
        gemm_slice_private(g, r0, r1, c0, c1, i0);
        return;
    } else {
        if (g->bias) fill_bias(g->C, g->ldc, g->bias, r0, r1, c0, c1);
        const float *A = g->A, *B = g->B;
        if (g->split_rows) A = g->ta == CblasNoTrans ? A + (size_t)i0 * g->lda : A + i0;
        else B = g->tb == CblasNoTrans ? B + i0 : B + (size_t)i0 * g->ldb;
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, r1 - r0, c1 - c0, g->K, g->alpha, A, g->lda, B, g->ldb, g->beta,
                    g->C + (size_t)r0 * g->ldc + c0, g->ldc);
    }
    gemm_after(g, r0, r1, c0, c1);
}

static void gemm_part(void *ctx, int p, int n) { gemm_slice(ctx, p, n); }

static int gemm_split = 1;
void nn_set_gemm_split(int on) { gemm_split = on; }

static void bias_grad_accumulate(float *db, const float *dy, int B, int OUT);

// g as one call on OpenBLAS's threads; the rest split as elementwise work.
static void gemm_whole(gemm_job *g) {
    const int M = g->M, N = g->N;
    if (g->db) bias_grad_accumulate(g->db, g->dy, g->dB, g->OUT);
    if (gemm_is_outer(g)) {
        gemm_outer(g, 0, M, 0, N);
    } else {
        if (g->bias) fill_bias(g->C, g->ldc, g->bias, 0, M, 0, N);
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, M, N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->C,
                    g->ldc);
    }
    if (g->relu || g->mask) {
        BP_ASSERT(g->ldc == N);
        if (g->relu) nn_relu_forward(g->C, g->C, (size_t)M * N);
        else nn_relu_backward(g->C, g->C, g->mask, (size_t)M * N);
    }
}

// The number of slices g is cut into on the pool (setting g->split_rows), or 0 when it runs as
// one call (gemm_whole): with one thread, or with the split switched off.
static int gemm_plan(gemm_job *g) {
    BP_ASSERT(!g->bias || g->beta == 1.0f);
    const int T = nn_threads(), M = g->M, N = g->N;
    if (T == 1 || !gemm_split) return 0;
    if (gemm_is_outer(g)) { // the loop's bits do not depend on the cut: columns, as C's mask was written
        g->split_rows = 0;
        int parts = BP_MIN(T, N / GEMM_MIN_SLICE);
        return (double)M * N < (double)OUTER_MIN_PART * T || parts < 1 ? 1 : parts;
    }
    g->split_rows = M > N;
    int len = g->split_rows ? M : N, parts = BP_MIN(T, len / GEMM_MIN_SLICE);
    if ((double)M * N * g->K < (double)GEMM_MIN_MACS * T || g->K < GEMM_MIN_K) parts = 1;
    return parts < 1 ? 1 : parts;
}

// Runs g (its split fields aside): with bias, beta must be 1.
static void gemm_run(gemm_job *g) {
    int parts = gemm_plan(g);
    if (!parts) {
        gemm_whole(g);
        return;
    }
    const int T = nn_threads();
    openblas_set_num_threads(1);
    nn_pool_run(parts, gemm_part, g);
    openblas_set_num_threads(T);
}

// Two independent products in one pass over the pool, each cut exactly as gemm_run cuts it (so
// the bits are the same): part p runs slice p of the first, then, counting from the last part,
// its slice of the second.  A layer's weight and input gradients go together this way: one
// fork/join instead of two, and a part that finishes its first slice early starts on the second.
typedef struct {
    const gemm_job *a, *b;
    int na, nb; // slices of each
} gemm_pair_job;

static void gemm_pair_part(void *ctx, int p, int n) {
    const gemm_pair_job *j = ctx;
    if (p < j->na) gemm_slice(j->a, p, j->na);
    int q = p - (n - j->nb);
    if (q >= 0) gemm_slice(j->b, q, j->nb);
}

// a then b, where b neither reads nor writes what a writes (and the other way round).
static void gemm_run_pair(gemm_job *a, gemm_job *b) {
    int na = gemm_plan(a), nb = gemm_plan(b);
    if (!na || !nb) {
        gemm_run(a);
        gemm_run(b);
        return;
    }
    const int T = nn_threads();
    gemm_pair_job j = {a, b, na, nb};
    openblas_set_num_threads(1);
    nn_pool_run(BP_MAX(na, nb), gemm_pair_part, &j);
    openblas_set_num_threads(T);
}

static void gemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_job g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha,
                  .beta = beta, .A = A, .B = B, .C = C};
    gemm_run(&g);
}

// ---------------------------------------------------------------------------------------------
// Linear

static void linear_forward(float *y, const float *x, const float *W, const float *b, int B, int IN, int OUT,
                           int relu) {
    BP_ASSERT(B >= 0 && IN >= 0 && OUT >= 0);
    if (B == 0 || OUT == 0) return;
    if (IN == 0) {
        if (b) fill_bias(y, OUT, b, 0, B, 0, OUT);
        else memset(y, 0, (size_t)B * OUT * sizeof *y);
        if (relu) nn_relu_forward(y, y, (size_t)B * OUT);
        return;
    }
    gemm_job g = {.ta = CblasNoTrans, .tb = CblasTrans, .M = B, .N = OUT, .K = IN, .lda = IN, .ldb = IN,
                  .ldc = OUT, .alpha = 1.0f, .beta = b ? 1.0f : 0.0f, .A = x, .B = W, .C = y, .bias = b,
                  .relu = relu};
    gemm_run(&g);
}

void nn_linear_forward(float *y, const float *x, const float *W, const float *b, int B, int IN, int OUT) {
    linear_forward(y, x, W, b, B, IN, OUT, 0);
}

void nn_linear_relu_forward(float *y, const float *x, const float *W, const float *b, int B, int IN, int OUT) {
    linear_forward(y, x, W, b, B, IN, OUT, 1);
}

// db[o] += sum_i dy[i, o] for o in [o0, o1), summed in batch order (four columns at a time: the
// same sums).
static void bias_grad_range(float *db, const float *dy, int B, int OUT, int o0, int o1) {
    for (int i = 0; i < B; i++) {
        const float *row = dy + (size_t)i * OUT;
        int o = o0;
        for (; o + 4 <= o1; o += 4) v4_store(db + o, v4_load(db + o) + v4_load(row + o));
        for (; o < o1; o++) db[o] += row[o];
    }
}

typedef struct {
    float *db;
    const float *dy;
    int B, OUT;
} bias_job;

static void bias_grad_part(void *ctx, int p, int n) {
    const bias_job *j = ctx;
    size_t o0, o1;
    elem_range((size_t)j->OUT, p, n, &o0, &o1);
    bias_grad_range(j->db, j->dy, j->B, j->OUT, (int)o0, (int)o1);
}

static void bias_grad_accumulate(float *db, const float *dy, int B, int OUT) {
    bias_job j = {db, dy, B, OUT};
    int parts = BP_MIN(elem_parts((size_t)B * OUT), (OUT + ELEM_ALIGN - 1) / ELEM_ALIGN);
    nn_pool_run(parts < 1 ? 1 : parts, bias_grad_part, &j);
}

// A layer's two gradient products: dW += dy^T x with db beside it, and dx = dy W, masked by
// x > 0 when x_relu.
static gemm_job linear_dw_job(const nn_linear_grad *l, int B) {
    return (gemm_job){.ta = CblasTrans, .tb = CblasNoTrans, .M = l->OUT, .N = l->IN, .K = B, .lda = l->OUT,
                      .ldb = l->IN, .ldc = l->IN, .alpha = 1.0f, .beta = 1.0f, .A = l->dy, .B = l->x, .C = l->dW,
                      .db = l->db, .dy = l->dy, .dB = B, .OUT = l->OUT};
}

static gemm_job linear_dx_job(const nn_linear_grad *l, int B) {
    return (gemm_job){.ta = CblasNoTrans, .tb = CblasNoTrans, .M = B, .N = l->IN, .K = l->OUT, .lda = l->OUT,
                      .ldb = l->IN, .ldc = l->IN, .alpha = 1.0f, .beta = 0.0f, .A = l->dy, .B = l->W, .C = l->dx,
                      .mask = l->x_relu ? l->x : NULL};
}

// One layer's backward pass: the weight gradient's product and the input gradient's in one pass
// over the pool.
static void linear_grad(const nn_linear_grad *l, int B) {
    const int IN = l->IN, OUT = l->OUT;
    BP_ASSERT(B >= 0 && IN >= 0 && OUT >= 0);
    if (B == 0 || OUT == 0) {
        if (l->dx && B > 0 && IN > 0) memset(l->dx, 0, (size_t)B * IN * sizeof *l->dx);
        return;
    }
    if (IN == 0) {
        if (l->db) bias_grad_accumulate(l->db, l->dy, B, OUT);
        return;
    }
    gemm_job gw = linear_dw_job(l, B);
    if (!l->dx) {
        gemm_run(&gw);
        return;
    }
    BP_ASSERT(l->dx != l->x && l->dx != l->dy);
    gemm_job gx = linear_dx_job(l, B);
    gemm_run_pair(&gw, &gx);
}

static void linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int B,
                            int IN, int OUT, int x_relu) {
    nn_linear_grad l = {.dx = dx, .dW = dW, .db = db, .dy = dy, .x = x, .W = W, .IN = IN, .OUT = OUT, .x_relu = x_relu};
    linear_grad(&l, B);
}

void nn_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int B,
                        int IN, int OUT) {
    linear_backward(dx, dW, db, dy, x, W, B, IN, OUT, 0);
}

void nn_relu_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int B,
                             int IN, int OUT) {
    linear_backward(dx, dW, db, dy, x, W, B, IN, OUT, 1);
}

// Two stacks' backward passes and the stage between them on two threads, as two chains of whole
// products (gemm_slice of one part: the bits of the one-thread calls, where the sliced products
// have their own).  Part 0 runs each stack's input gradients from its last layer down, each from
// the one before; part 1 runs the weight and bias gradients, layer i's as soon as its output
// gradient is written (counted in `ready`).  Between the stacks both parts take the middle
// stage's samples in chunks as they come free (part 0 first, while part 1 finishes the upper
// stack's first layer; none before the upper stack's last input gradient is written), and the
// lower stack starts when every sample is done.  Part 0 waits only for chunks part 1 has taken,
// so the pool's serial fallback (part 0, then part 1) gives the same results.  At batch 128 a
// layer's products are too small to cut in two without losing a third of each half's speed;
// side by side the chains keep each product whole.
enum { STAGE_CHUNK = 8 }; // samples the middle stage takes at a time

typedef struct {
    const nn_linear_grad *up, *low;
    int nup, nlow, B;
    nn_stage_fn mid;
    void *mid_ctx;
    _Atomic int ready_up, ready_low; // layers whose dy is written: i < ready
    _Atomic int next, done;          // the middle stage's next sample to take, samples finished
} stacks_job;

static void chain_dx(const nn_linear_grad *L, int n, int B, _Atomic int *ready) {
    for (int i = 0; i < n; i++) {
        if (L[i].dx) {
            gemm_job g = linear_dx_job(&L[i], B);
            gemm_slice(&g, 0, 1);
        }
        atomic_store_explicit(ready, i + 2, memory_order_release);
    }
}

static void chain_dw(const nn_linear_grad *L, int n, int B, _Atomic int *ready) {
    for (int i = 0; i < n; i++) {
        while (atomic_load_explicit(ready, memory_order_acquire) <= i) cpu_relax();
        gemm_job g = linear_dw_job(&L[i], B);
        gemm_slice(&g, 0, 1);
    }
}

static void stacks_middle(stacks_job *j, int p) {
    if (!j->mid) return;
    // The stage reads the upper stack's input gradient: part 1 can be here before part 0 wrote it.
    while (atomic_load_explicit(&j->ready_up, memory_order_acquire) <= j->nup) cpu_relax();
    int s0;
    while ((s0 = atomic_fetch_add(&j->next, STAGE_CHUNK)) < j->B) {
        int s1 = BP_MIN(j->B, s0 + STAGE_CHUNK);
        j->mid(j->mid_ctx, s0, s1, p);
        atomic_fetch_add_explicit(&j->done, s1 - s0, memory_order_release);
    }
    while (atomic_load_explicit(&j->done, memory_order_acquire) < j->B) cpu_relax();
}

static void stacks_part(void *ctx, int p, int n) {
    stacks_job *j = ctx;
    if (p == 0) {
        chain_dx(j->up, j->nup, j->B, &j->ready_up);
        stacks_middle(j, 0);
        chain_dx(j->low, j->nlow, j->B, &j->ready_low);
    } else if (p == 1) {
        chain_dw(j->up, j->nup, j->B, &j->ready_up);
        stacks_middle(j, 1);
        chain_dw(j->low, j->nlow, j->B, &j->ready_low);
    }
}

static void stack_check(const nn_linear_grad *L, int n) {
    for (int i = 0; i + 1 < n; i++)
        BP_ASSERTF(L[i].dx && L[i + 1].dy == L[i].dx && L[i + 1].OUT == L[i].IN,
                   "nn_stacks_backward: layer %d's dx is not layer %d's dy", i, i + 1);
}

static void stack_serial(const nn_linear_grad *L, int n, int B) {
    for (int i = 0; i < n; i++) linear_grad(&L[i], B);
}

static int stack_chainable(const nn_linear_grad *L, int n) {
    for (int i = 0; i < n; i++)
        if (L[i].IN <= 0 || L[i].OUT <= 0 || L[i].dx == L[i].x || L[i].dx == L[i].dy) return 0;
    return 1;
}

void nn_stacks_backward(const nn_linear_grad *up, int nup, nn_stage_fn mid, void *mid_ctx, const nn_linear_grad *low,
                        int nlow, int B) {
    BP_ASSERT(nup >= 0 && nlow >= 0 && B >= 0);
    stack_check(up, nup), stack_check(low, nlow);
    const int T = nn_threads();
    if (T != 2 || !gemm_split || B == 0 || !stack_chainable(up, nup) || !stack_chainable(low, nlow)) {
        stack_serial(up, nup, B);
        if (mid && B > 0) mid(mid_ctx, 0, B, 0);
        stack_serial(low, nlow, B);
        return;
    }
    stacks_job j = {.up = up, .low = low, .nup = nup, .nlow = nlow, .B = B, .mid = mid, .mid_ctx = mid_ctx};
    atomic_init(&j.ready_up, 1), atomic_init(&j.ready_low, 1);
    atomic_init(&j.next, 0), atomic_init(&j.done, 0);
    openblas_set_num_threads(1);
    nn_pool_run(2, stacks_part, &j);
    openblas_set_num_threads(T);
}

void nn_linear_stack_backward(const nn_linear_grad *L, int n, int B) {
    nn_stacks_backward(L, n, NULL, NULL, NULL, 0, B);
}

// ---------------------------------------------------------------------------------------------
// Elementwise

// Branch-free and four at a time: activations are positive or negative at random, so a branch
// per value mispredicts half the time (it made ReLU a quarter of a DLRM step).
typedef int32_t v4i __attribute__((vector_size(16)));

static void relu_forward_range(float *y, const float *x, size_t i, size_t n) {
    for (; i + 4 <= n; i += 4) {
        v4f v = v4_load(x + i);
        v4i keep = ~(v < 0.0f); // NaN and -0 pass through, as in the scalar tail
        v4_store(y + i, (v4f)((v4i)v & keep));
    }
    for (; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void relu_backward_range(float *dx, const float *dy, const float *y, size_t i, size_t n) {
    for (; i + 4 <= n; i += 4) {
        v4i on = v4_load(y + i) > 0.0f;
        v4_store(dx + i, (v4f)((v4i)v4_load(dy + i) & on));
    }
    for (; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

typedef struct {
    float *out;
    const float *a, *b; // forward: a = x; backward: a = dy, b = y
    size_t n;
} relu_job;

static void relu_forward_part(void *ctx, int p, int n) {
    const relu_job *j = ctx;
    size_t i0, i1;
    elem_range(j->n, p, n, &i0, &i1);
    relu_forward_range(j->out, j->a, i0, i1);
}

static void relu_backward_part(void *ctx, int p, int n) {
    const relu_job *j = ctx;
    size_t i0, i1;
    elem_range(j->n, p, n, &i0, &i1);
    relu_backward_range(j->out, j->a, j->b, i0, i1);
}

void nn_relu_forward(float *y, const float *x, size_t n) {
    relu_job j = {y, x, NULL, n};
    nn_pool_run(elem_parts(n), relu_forward_part, &j);
}

void nn_relu_backward(float *dx, const float *dy, const float *y, size_t n) {
    relu_job j = {dx, dy, y, n};
    nn_pool_run(elem_parts(n), relu_backward_part, &j);
}

void nn_sigmoid_forward(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (v >= 0.0f) {
            y[i] = 1.0f / (1.0f + expf(-v));
        } else {
            float e = expf(v);
            y[i] = e / (1.0f + e);
        }
    }
}

void nn_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

// ---------------------------------------------------------------------------------------------
// Dot interaction.
//
// Per sample the K = F+1 vectors are transposed into Tt (D, Kp), Kp = K rounded up to a multiple
// of 16 with zero columns.  Row i of the Gram matrix below the diagonal is then
//   G[i, 0..i) = sum_d T[i][d] * Tt[d][0..i)
// computed 16 columns at a time in four vector accumulators: no horizontal sums, no reductions
// across registers.  The backward pass builds the symmetric gradient matrix Gs (K, Kp) and
// computes dTt[d][:] = sum_j Tt[d][j] * Gs[j][:] the same way.  Tt, dTt and Gs stay in L1 for
// the usual sizes (F = 26, D = 16: 2 KiB + 2 KiB + 3.4 KiB).  With AVX2, four rows go together
// (eight independent sums instead of two) and the transposes run 8 x 8 in registers; every
// output is still the same multiply-then-add sequence, so both paths give the same bits.

enum { DOT_BLOCK = 16 };
static inline int pad_block(int n) { return (n + DOT_BLOCK - 1) / DOT_BLOCK * DOT_BLOCK; }

// One part's scratch: Tt, dTt (D, Kp) and Gs (K, Kp).
static size_t dot_part_scratch(int F, int D) {
    size_t Kp = (size_t)pad_block(F + 1);
    return 2 * (size_t)D * Kp + (size_t)(F + 1) * Kp;
}

size_t nn_interact_dot_scratch(int F, int D) { return NN_POOL_MAX * dot_part_scratch(F, D); }
size_t nn_interact_dot_scratch_part(int F, int D, int p) { return (size_t)p * dot_part_scratch(F, D); }

// Tt[d][k] = T_k[d], zero for k in [K, Kp).
static void interact_transpose(float *Tt, const float *z, const float *emb, int F, int D, int E, int Kp) {
    for (int d = 0; d < D; d++) {
        float *row = Tt + (size_t)d * Kp;
        row[0] = z[d];
        for (int f = 0; f < F; f++) row[f + 1] = emb[(size_t)f * E + d];
        for (int k = F + 1; k < Kp; k++) row[k] = 0.0f;
    }
}

// out[0..16) = sum_k a[k] * M[k * ldm + 0..16) over k in [0, n).
static inline void dot_block(float *out, const float *a, const float *M, size_t ldm, int n) {
    v4f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (int k = 0; k < n; k++) {
        const float *row = M + (size_t)k * ldm;
        float x = a[k];
        s0 += x * v4_load(row);
        s1 += x * v4_load(row + 4);
        s2 += x * v4_load(row + 8);
        s3 += x * v4_load(row + 12);
    }
    v4_store(out, s0), v4_store(out + 4, s1), v4_store(out + 8, s2), v4_store(out + 12, s3);
}

// The same sums 8 floats at a time where the processor has AVX2 (every x86-64 since 2013), for
// four rows at once: out[r][0..16) = sum_k a[r][k] * M[k][0..16).  Each output still takes
// a[r][k] * M[k][.] for k ascending in its own lane, a multiply then an add (no FMA: ISO C mode
// does not contract and this target does not enable it), so the bits are those of dot_block.
// Eight independent sums keep both vector units busy where one row's two would wait on the
// latency of their adds, and each row of M is loaded once for the four.  nn_set_simd(0) forces
// the 4-float path.
#if defined(__x86_64__) && defined(__GNUC__)
#define NN_AVX2 1
typedef float v8f __attribute__((vector_size(32)));
__attribute__((target("avx2"))) static inline void dot_block4_avx2(float out[4][DOT_BLOCK], const float *const a[4],
                                                                   const float *M, size_t ldm, int n) {
    v8f s00 = {0}, s01 = {0}, s10 = {0}, s11 = {0}, s20 = {0}, s21 = {0}, s30 = {0}, s31 = {0}, r0, r1;
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    for (int k = 0; k < n; k++) {
        const float *row = M + (size_t)k * ldm;
        memcpy(&r0, row, sizeof r0), memcpy(&r1, row + 8, sizeof r1);
        const float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        s00 += x0 * r0, s01 += x0 * r1;
        s10 += x1 * r0, s11 += x1 * r1;
        s20 += x2 * r0, s21 += x2 * r1;
        s30 += x3 * r0, s31 += x3 * r1;
    }
    memcpy(out[0], &s00, sizeof s00), memcpy(out[0] + 8, &s01, sizeof s01);
    memcpy(out[1], &s10, sizeof s10), memcpy(out[1] + 8, &s11, sizeof s11);
    memcpy(out[2], &s20, sizeof s20), memcpy(out[2] + 8, &s21, sizeof s21);
    memcpy(out[3], &s30, sizeof s30), memcpy(out[3] + 8, &s31, sizeof s31);
}

static const float zeros8[8];

// Hints for the next sample of the interaction: its rows (F x E floats, 6.5 KB at F = 26, E = 64)
// were written by the gather long before and sit in L3 or memory; the transposes read them
// through eight interleaved streams, which the hardware prefetchers do not follow, so every line
// was a stall.  One hint per cache line while the current sample computes; hints change no value.
static inline void prefetch_read(const float *p, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 3);
}
static inline void prefetch_write(float *p, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 1, 3);
}

// interact_transpose, eight vectors by eight dimensions at a time (the padding columns from zeros).
__attribute__((target("avx2"))) static void interact_transpose_avx2(float *Tt, const float *z, const float *emb, int F,
                                                                    int D, int E, int Kp) {
    const int K = F + 1, D8 = D / 8 * 8;
    for (int k0 = 0; k0 < Kp; k0 += 8) {
        const float *src[8];
        for (int r = 0; r < 8; r++) {
            int k = k0 + r;
            src[r] = k == 0 ? z : k < K ? emb + (size_t)(k - 1) * E : zeros8;
        }
        for (int d0 = 0; d0 < D8; d0 += 8) {
            bp_transpose8_avx2(src, Tt + (size_t)d0 * Kp + k0, (size_t)Kp);
            for (int r = 0; r < 8; r++)
                if (src[r] != zeros8) src[r] += 8;
        }
    }
    for (int d = D8; d < D; d++) { // the last D mod 8 dimensions
        float *row = Tt + (size_t)d * Kp;
        row[0] = z[d];
        for (int f = 0; f < F; f++) row[f + 1] = emb[(size_t)f * E + d];
        for (int k = K; k < Kp; k++) row[k] = 0.0f;
    }
}
#else
#define NN_AVX2 0
#endif

static int simd_on = 1;
void nn_set_simd(int on) { simd_on = on; }
static int use_avx2(void) {
#if NN_AVX2
    return simd_on && __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

// The interaction's arguments; parts of the pool take slices of samples, each with its own
// scratch, so every sample is computed exactly as by one thread.
typedef struct {
    float *out, *dz, *demb;
    const float *dout, *z, *emb;
    int B, F, D, E;
    float *scratch;
} dot_job;

enum { DOT_MIN_SAMPLES = 16 }; // per part

static int dot_parts(int B) { return BP_MAX(1, BP_MIN(nn_threads(), B / DOT_MIN_SAMPLES)); }
// The middle stage of the two-chain backward pass calls the dot interaction on chunks of
// STAGE_CHUNK samples from both pool parts at once, each with the scratch of its part p: a chunk
// must stay one part (dot_parts of it 1), or the two parts would write the same scratch.
_Static_assert(STAGE_CHUNK < 2 * DOT_MIN_SAMPLES, "a middle-stage chunk would split the dot interaction in parts");

#define DOT_FORWARD_PART(NAME, ATTR, BLOCK) \
ATTR static void NAME(void *ctx, int p, int n) {                                     \
    const dot_job *j = ctx;                                                          \
    const int F = j->F, D = j->D, E = j->E;                                          \
    const int Kp = pad_block(F + 1), W = nn_interact_dot_width(F, D);                \
    float *Tt = j->scratch + (size_t)p * dot_part_scratch(F, D); /* (D, Kp) */ \
    float row[DOT_BLOCK];                                                            \
    const int s1 = (int)nn_part_begin(j->B, p + 1, n);                               \
    for (int s = (int)nn_part_begin(j->B, p, n); s < s1; s++) {                      \
        const float *zs = j->z + (size_t)s * D, *es = j->emb + (size_t)s * F * E;    \
        float *os = j->out + (size_t)s * W;                                          \
        memcpy(os, zs, (size_t)D * sizeof *os);                                      \
        interact_transpose(Tt, zs, es, F, D, E, Kp);                                 \
        float *pairs = os + D;                                                       \
        for (int i = 1; i <= F; i++) {                                               \
            const float *Ti = es + (size_t)(i - 1) * E;                              \
            float *dst = pairs + (size_t)i * (i - 1) / 2; /* row i holds j = 0..i-1 */ \
            for (int c = 0; c < i; c += DOT_BLOCK) {                                 \
                int m = BP_MIN(DOT_BLOCK, i - c);                                    \
                if (m == DOT_BLOCK) {                                                \
                    BLOCK(dst + c, Ti, Tt + c, (size_t)Kp, D);                       \
                } else {                                                             \
                    BLOCK(row, Ti, Tt + c, (size_t)Kp, D);                           \
                    memcpy(dst + c, row, (size_t)m * sizeof *dst);                   \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    }                                                                                \
}
DOT_FORWARD_PART(dot_forward_part, , dot_block)
#undef DOT_FORWARD_PART

#if NN_AVX2
// The same sums with AVX2: rows i..i+3 of the Gram matrix together (dot_block4_avx2), each over
// the column blocks its last row needs; a row's values past its diagonal are computed and dropped.
__attribute__((target("avx2"))) static void dot_forward_part_avx2(void *ctx, int p, int n) {
    const dot_job *j = ctx;
    const int F = j->F, D = j->D, E = j->E;
    const int Kp = pad_block(F + 1), W = nn_interact_dot_width(F, D);
    float *Tt = j->scratch + (size_t)p * dot_part_scratch(F, D); // (D, Kp)
    float blk[4][DOT_BLOCK];
    const int s1 = (int)nn_part_begin(j->B, p + 1, n);
    for (int s = (int)nn_part_begin(j->B, p, n); s < s1; s++) {
        const float *zs = j->z + (size_t)s * D, *es = j->emb + (size_t)s * F * E;
        float *os = j->out + (size_t)s * W;
        if (s + 1 < s1) {
            prefetch_read(es + (size_t)F * E, (size_t)F * E);
            prefetch_write(os + W, (size_t)W);
        }
        memcpy(os, zs, (size_t)D * sizeof *os);
        interact_transpose_avx2(Tt, zs, es, F, D, E, Kp);
        float *pairs = os + D; // row i holds j = 0..i-1
        for (int i = 1; i <= F; i += 4) {
            const int ni = BP_MIN(4, F + 1 - i);
            const float *a[4];
            for (int r = 0; r < 4; r++) a[r] = es + (size_t)(i + BP_MIN(r, ni - 1) - 1) * E;
            for (int c = 0; c < i + ni - 1; c += DOT_BLOCK) {
                dot_block4_avx2(blk, a, Tt + c, (size_t)Kp, D);
                for (int r = 0; r < ni; r++) {
                    const int m = BP_MIN(DOT_BLOCK, i + r - c);
                    float *dst = pairs + (size_t)(i + r) * (i + r - 1) / 2 + c;
                    if (m == DOT_BLOCK) memcpy(dst, blk[r], sizeof blk[r]);
                    else for (int q = 0; q < m; q++) dst[q] = blk[r][q];
                }
            }
        }
    }
}
#endif

void nn_interact_dot_forward(float *out, const float *z, const float *emb, int B, int F, int D, int E,
                             float *scratch) {
    BP_ASSERT(B >= 0 && F >= 0 && D > 0 && E >= D);
    dot_job j = {.out = out, .z = z, .emb = emb, .B = B, .F = F, .D = D, .E = E, .scratch = scratch};
#if NN_AVX2
    if (use_avx2()) {
        nn_pool_run(dot_parts(B), dot_forward_part_avx2, &j);
        return;
    }
#endif
    nn_pool_run(dot_parts(B), dot_forward_part, &j);
}

#define DOT_BACKWARD_PART(NAME, ATTR, BLOCK) \
ATTR static void NAME(void *ctx, int p, int n) {                                                                 \
    const dot_job *j = ctx;                                                                                      \
    const int F = j->F, D = j->D, E = j->E;                                                                      \
    const int K = F + 1, Kp = pad_block(K), W = nn_interact_dot_width(F, D);                                     \
    float *Tt = j->scratch + (size_t)p * dot_part_scratch(F, D); /* (D, Kp) */ \
    float *dTt = Tt + (size_t)D * Kp;                              /* (D, Kp) */ \
    float *Gs = dTt + (size_t)D * Kp;                              /* (K, Kp), symmetric in its first K columns */ \
    const int s1 = (int)nn_part_begin(j->B, p + 1, n);                                                           \
    for (int s = (int)nn_part_begin(j->B, p, n); s < s1; s++) {                                                  \
        const float *zs = j->z + (size_t)s * D, *es = j->emb + (size_t)s * F * E;                                \
        const float *ds = j->dout + (size_t)s * W, *dpairs = ds + D;                                             \
        interact_transpose(Tt, zs, es, F, D, E, Kp);                                                             \
        for (int i = 0; i < K; i++) {                                                                            \
            float *gi = Gs + (size_t)i * Kp;                                                                     \
            const float *src = dpairs + (size_t)i * (i - 1) / 2;                                                 \
            if (i > 0) memcpy(gi, src, (size_t)i * sizeof *gi);                                                  \
            gi[i] = 0.0f;                                                                                        \
            for (int c = i + 1; c < K; c++) gi[c] = dpairs[(size_t)c * (c - 1) / 2 + i];                         \
            for (int k = K; k < Kp; k++) gi[k] = 0.0f;                                                           \
        }                                                                                                        \
        for (int d = 0; d < D; d++)                                                                              \
            for (int c = 0; c < Kp; c += DOT_BLOCK)                                                              \
                BLOCK(dTt + (size_t)d * Kp + c, Tt + (size_t)d * Kp, Gs + c, (size_t)Kp, K);                     \
        float *dzs = j->dz + (size_t)s * D, *des = j->demb + (size_t)s * F * E;                                  \
        for (int d = 0; d < D; d++) {                                                                            \
            const float *drow = dTt + (size_t)d * Kp;                                                            \
            dzs[d] = ds[d] + drow[0];                                                                            \
            for (int f = 0; f < F; f++) des[(size_t)f * E + d] += drow[f + 1];                                   \
        }                                                                                                        \
    }                                                                                                            \
}
DOT_BACKWARD_PART(dot_backward_part, , dot_block)
#undef DOT_BACKWARD_PART

#if NN_AVX2
// The same with AVX2: four rows of dTt together (dot_block4_avx2), and both transposes eight by
// eight in registers; every value is the same sum or the same single addition as above.
__attribute__((target("avx2"))) static void dot_backward_part_avx2(void *ctx, int p, int n) {
    const dot_job *j = ctx;
    const int F = j->F, D = j->D, E = j->E;
    const int K = F + 1, Kp = pad_block(K), W = nn_interact_dot_width(F, D), D8 = D / 8 * 8;
    float *Tt = j->scratch + (size_t)p * dot_part_scratch(F, D); // (D, Kp)
    float *dTt = Tt + (size_t)D * Kp;                             // (D, Kp)
    float *Gs = dTt + (size_t)D * Kp;                             // (K, Kp), symmetric in its first K columns
    float blk[4][DOT_BLOCK], tr[8][8];
    const int s1 = (int)nn_part_begin(j->B, p + 1, n);
    for (int s = (int)nn_part_begin(j->B, p, n); s < s1; s++) {
        const float *zs = j->z + (size_t)s * D, *es = j->emb + (size_t)s * F * E;
        const float *ds = j->dout + (size_t)s * W, *dpairs = ds + D;
        if (s + 1 < s1) {
            prefetch_read(es + (size_t)F * E, (size_t)F * E);
            prefetch_read(ds + W, (size_t)W);
            prefetch_write(j->demb + (size_t)(s + 1) * F * E, (size_t)F * E);
        }
        interact_transpose_avx2(Tt, zs, es, F, D, E, Kp);
        for (int i = 0; i < K; i++) {
            float *gi = Gs + (size_t)i * Kp;
            const float *src = dpairs + (size_t)i * (i - 1) / 2;
            if (i > 0) memcpy(gi, src, (size_t)i * sizeof *gi);
            gi[i] = 0.0f;
            for (int c = i + 1; c < K; c++) gi[c] = dpairs[(size_t)c * (c - 1) / 2 + i];
            for (int k = K; k < Kp; k++) gi[k] = 0.0f;
        }
        for (int d = 0; d < D; d += 4) {
            const int nd = BP_MIN(4, D - d);
            const float *a[4];
            for (int r = 0; r < 4; r++) a[r] = Tt + (size_t)(d + BP_MIN(r, nd - 1)) * Kp;
            for (int c = 0; c < Kp; c += DOT_BLOCK) {
                dot_block4_avx2(blk, a, Gs + c, (size_t)Kp, K);
                for (int r = 0; r < nd; r++) memcpy(dTt + (size_t)(d + r) * Kp + c, blk[r], sizeof blk[r]);
            }
        }
        float *dzs = j->dz + (size_t)s * D, *des = j->demb + (size_t)s * F * E;
        for (int d0 = 0; d0 < D8; d0 += 8)
            for (int k0 = 0; k0 < K; k0 += 8) {
                const float *src[8];
                for (int r = 0; r < 8; r++) src[r] = dTt + (size_t)(d0 + r) * Kp + k0;
                bp_transpose8_avx2(src, &tr[0][0], 8); // tr[c][r] = dTt[d0 + r][k0 + c]
                for (int c = 0; c < 8 && k0 + c < K; c++) {
                    const int k = k0 + c;
                    if (k == 0) {
                        for (int r = 0; r < 8; r++) dzs[d0 + r] = ds[d0 + r] + tr[0][r];
                    } else {
                        float *dst = des + (size_t)(k - 1) * E + d0;
                        for (int r = 0; r < 8; r++) dst[r] += tr[c][r];
                    }
                }
            }
        for (int d = D8; d < D; d++) { // the last D mod 8 dimensions
            const float *drow = dTt + (size_t)d * Kp;
            dzs[d] = ds[d] + drow[0];
            for (int f = 0; f < F; f++) des[(size_t)f * E + d] += drow[f + 1];
        }
    }
}
#endif

void nn_interact_dot_backward(float *dz, float *demb, const float *dout, const float *z, const float *emb, int B,
                              int F, int D, int E, float *scratch) {
    BP_ASSERT(B >= 0 && F >= 0 && D > 0 && E >= D);
    dot_job j = {.dz = dz, .demb = demb, .dout = dout, .z = z, .emb = emb, .B = B, .F = F, .D = D, .E = E,
                 .scratch = scratch};
#if NN_AVX2
    if (use_avx2()) {
        nn_pool_run(dot_parts(B), dot_backward_part_avx2, &j);
        return;
    }
#endif
    nn_pool_run(dot_parts(B), dot_backward_part, &j);
}

// ---------------------------------------------------------------------------------------------
// Concatenation

void nn_concat_forward(float *out, const float *a, const float *emb, int B, int Na, int F, int D, int E) {
    const size_t W = (size_t)Na + (size_t)F * D;
    for (int s = 0; s < B; s++) {
        float *o = out + (size_t)s * W;
        if (Na) memcpy(o, a + (size_t)s * Na, (size_t)Na * sizeof *o);
        const float *es = emb + (size_t)s * F * E;
        for (int f = 0; f < F; f++) memcpy(o + Na + (size_t)f * D, es + (size_t)f * E, (size_t)D * sizeof *o);
    }
}

void nn_concat_backward(float *da, float *demb, const float *dout, int B, int Na, int F, int D, int E) {
    const size_t W = (size_t)Na + (size_t)F * D;
    for (int s = 0; s < B; s++) {
        const float *g = dout + (size_t)s * W;
        if (da && Na) memcpy(da + (size_t)s * Na, g, (size_t)Na * sizeof *da);
        float *des = demb + (size_t)s * F * E;
        for (int f = 0; f < F; f++) {
            float *dr = des + (size_t)f * E;
            const float *gr = g + Na + (size_t)f * D;
            for (int k = 0; k < D; k++) dr[k] += gr[k];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cross layers

// y = x0 ⊙ u + xl over n values.
static void cross_combine(float *y, const float *x0, const float *u, const float *xl, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) v4_store(y + i, v4_load(x0 + i) * v4_load(u + i) + v4_load(xl + i));
    for (; i < n; i++) y[i] = x0[i] * u[i] + xl[i];
}

// du = dy ⊙ x0;  dx0 += dy ⊙ u;  dxl = dy.
static void cross_split_grad(float *du, float *dx0, float *dxl, const float *dy, const float *x0, const float *u,
                             size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f g = v4_load(dy + i);
        v4_store(du + i, g * v4_load(x0 + i));
        v4_store(dx0 + i, v4_load(dx0 + i) + g * v4_load(u + i));
        v4_store(dxl + i, g);
    }
    for (; i < n; i++) {
        du[i] = dy[i] * x0[i];
        dx0[i] += dy[i] * u[i];
        dxl[i] = dy[i];
    }
}

void nn_cross_forward(float *y, float *u, const float *x0, const float *xl, const float *W, const float *b, int B,
                      int d) {
    nn_linear_forward(u, xl, W, b, B, d, d);
    cross_combine(y, x0, u, xl, (size_t)B * d);
}

void nn_cross_backward(float *dx0, float *dxl, float *dW, float *db, float *du, const float *dy, const float *x0,
                       const float *xl, const float *u, const float *W, int B, int d) {
    if (B == 0 || d == 0) return;
    cross_split_grad(du, dx0, dxl, dy, x0, u, (size_t)B * d);
    gemm(CblasTrans, CblasNoTrans, d, d, B, 1.0f, du, d, xl, d, 1.0f, dW, d);
    bias_grad_accumulate(db, du, B, d);
    gemm(CblasNoTrans, CblasNoTrans, B, d, d, 1.0f, du, d, W, d, 1.0f, dxl, d);
}

void nn_cross_lowrank_forward(float *y, float *u, float *p, const float *x0, const float *xl, const float *U,
                              const float *V, const float *b, int B, int d, int r) {
    if (B == 0 || d == 0) return;
    BP_ASSERT(r > 0);
    gemm(CblasNoTrans, CblasNoTrans, B, r, d, 1.0f, xl, d, V, r, 0.0f, p, r);
    nn_linear_forward(u, p, U, b, B, r, d);
    cross_combine(y, x0, u, xl, (size_t)B * d);
}

void nn_cross_lowrank_backward(float *dx0, float *dxl, float *dU, float *dV, float *db, float *du, float *dp,
                               const float *dy, const float *x0, const float *xl, const float *u, const float *p,
                               const float *U, const float *V, int B, int d, int r) {
    if (B == 0 || d == 0) return;
    cross_split_grad(du, dx0, dxl, dy, x0, u, (size_t)B * d);
    nn_linear_backward(dp, dU, db, du, p, U, B, r, d);
    gemm(CblasTrans, CblasNoTrans, d, r, B, 1.0f, xl, d, dp, r, 1.0f, dV, r);
    gemm(CblasNoTrans, CblasTrans, B, d, r, 1.0f, dp, r, V, r, 1.0f, dxl, d);
}

// ---------------------------------------------------------------------------------------------
// FM and wide

void nn_fm_forward(float *out, const float *emb, int B, int F, int D, int E) {
    for (int s = 0; s < B; s++) {
        const float *es = emb + (size_t)s * F * E;
        float acc = 0.0f;
        for (int k = 0; k < D; k++) {
            float sum = 0.0f, sq = 0.0f;
            for (int f = 0; f < F; f++) {
                float v = es[(size_t)f * E + k];
                sum += v;
                sq += v * v;
            }
            acc += sum * sum - sq;
        }
        out[s] = 0.5f * acc;
    }
}

void nn_fm_backward(float *demb, const float *dout, const float *emb, int B, int F, int D, int E) {
    for (int s = 0; s < B; s++) {
        const float *es = emb + (size_t)s * F * E;
        float *des = demb + (size_t)s * F * E;
        for (int k = 0; k < D; k++) {
            float sum = 0.0f;
            for (int f = 0; f < F; f++) sum += es[(size_t)f * E + k];
            for (int f = 0; f < F; f++) des[(size_t)f * E + k] += dout[s] * (sum - es[(size_t)f * E + k]);
        }
    }
}

void nn_wide_forward(float *out, const float *dense, const float *emb, const float *w, const float *bias, int B,
                     int Nd, int F, int D, int E) {
    BP_ASSERT(E > D);
    for (int s = 0; s < B; s++) {
        const float *x = dense + (size_t)s * Nd, *es = emb + (size_t)s * F * E;
        float acc = bias[0];
        for (int i = 0; i < Nd; i++) acc += w[i] * x[i];
        for (int f = 0; f < F; f++) acc += es[(size_t)f * E + D];
        out[s] = acc;
    }
}

void nn_wide_backward(float *ddense, float *dw, float *dbias, float *demb, const float *dout, const float *dense,
                      const float *w, int B, int Nd, int F, int D, int E) {
    BP_ASSERT(E > D);
    for (int s = 0; s < B; s++) {
        const float g = dout[s], *x = dense + (size_t)s * Nd;
        for (int i = 0; i < Nd; i++) dw[i] += g * x[i];
        dbias[0] += g;
        float *des = demb + (size_t)s * F * E;
        for (int f = 0; f < F; f++) des[(size_t)f * E + D] += g;
        if (ddense)
            for (int i = 0; i < Nd; i++) ddense[(size_t)s * Nd + i] += g * w[i];
    }
}
