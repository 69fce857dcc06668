// nn_pool: a small persistent thread pool for the per-step kernels (split GEMMs, per-sample
// interaction, gather, row updates).
//
// Thread count.  The trainer's --threads flag sets OpenBLAS's thread count
// (openblas_set_num_threads); nn_threads() reads it back, so every caller of the kernels gets the
// same count without another setting.  The kernels split work into parts whose number and bounds
// depend only on that count and on the shapes, never on which thread runs a part or when: results
// are bit-identical run to run for a fixed count (and, for work split by samples or by output
// elements, for any count).
//
// nn_pool_run(n, fn, ctx) runs fn(ctx, 0..n-1) and returns when all are done: part 0 on the
// calling thread, part p on worker p (started on first use, then waiting for work: a short spin,
// then a futex sleep).  One caller at a time: a call from another thread while the pool is busy,
// or from inside a part, runs its parts one after the other on the calling thread (same results).
#ifndef BP_NN_POOL_H
#define BP_NN_POOL_H

#define NN_POOL_MAX 16 // most parts of one run (and threads of the pool, the caller included)

typedef void (*nn_pool_fn)(void *ctx, int part, int nparts);

// OpenBLAS's thread count, clamped to [1, NN_POOL_MAX].
int nn_threads(void);
// Runs fn(ctx, p, n) for p in [0, n), 1 <= n <= NN_POOL_MAX.
void nn_pool_run(int n, nn_pool_fn fn, void *ctx);

// Part p of n of the range [0, len): [len * p / n, len * (p + 1) / n).
static inline long nn_part_begin(long len, int p, int n) { return len * p / n; }

#endif
