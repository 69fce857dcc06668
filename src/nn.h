// nn: the dense layers of the models, as forward/backward pairs over raw float arrays.
//
// Dimension names: B batch, IN/OUT layer widths, Nd dense features, F sparse features (one
// embedding row each), D embedding size, E floats per embedding row as stored (E >= D; only the
// first D take part in interactions, element D is the row's scalar first-order weight when the
// model has one), d the width of a DCN cross layer, r its rank.
//
// Gradient conventions, the same for every layer here:
//   - parameter gradients (dW, db, dU, ...) are ACCUMULATED (+=): the caller zeroes them once
//     per step;
//   - embedding-row gradients (demb, shape (B, F, E)) are ACCUMULATED: several parts of a model
//     read the same rows;
//   - input gradients (dx, dz, da) are OVERWRITTEN, except where a function says otherwise (an
//     input that the model also feeds elsewhere: cross's dx0, wide's ddense).
// Threads: the thread count is OpenBLAS's (nn_threads(), below; the trainer's --threads).
// With more than one, each matrix product is cut into slices of its output rows or columns, one
// single-threaded sgemm each, run on the pool (nn.c explains the cut); the dot interaction is
// split by samples.  With exactly two, an MLP's backward pass runs its input gradients on one
// thread and its weight gradients on the other, each product whole (nn_stacks_backward).  No
// partial sum is ever added across threads, so results are bit-identical run to run for a fixed
// BLAS kernel and thread count (the interaction for any thread count).
//
// nn_naive_* (nn_naive.c) are straightforward double-precision twins of every kernel with the
// same conventions; the tests check the float kernels against them and the twins against finite
// differences.
#ifndef BP_NN_H
#define BP_NN_H

#include <stddef.h>

// With on = 0, products use OpenBLAS's own threads instead of the slices above (for benchmarks
// that compare the two; every training mode must run with the same setting).  Default 1.
void nn_set_gemm_split(int on);
// With on = 0, the dot interaction uses its 4-float vector code even where AVX2 is available (the
// default uses 8-float vectors there, with bit-identical results: for tests and benchmarks).
void nn_set_simd(int on);

// ---------------------------------------------------------------------------------------------
// Threads: a small persistent pool for the per-step kernels (sliced products, the per-sample
// interaction, ReLU and bias sums here; gather and row updates in emb.c, the dense optimizer in
// optim.c).
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
// The kernels themselves expect one thread of a process at a time (the trainer's): a sliced
// product switches OpenBLAS to one thread while it runs, which another thread's product would
// read as its thread count.
#define NN_POOL_MAX 16 // most parts of one run (and threads of the pool, the caller included)

typedef void (*nn_pool_fn)(void *ctx, int part, int nparts);

// OpenBLAS's thread count, clamped to [1, NN_POOL_MAX].
int nn_threads(void);
// Runs fn(ctx, p, n) for p in [0, n), 1 <= n <= NN_POOL_MAX.
void nn_pool_run(int n, nn_pool_fn fn, void *ctx);

// Part p of n of the range [0, len): [len * p / n, len * (p + 1) / n).
static inline long nn_part_begin(long len, int p, int n) { return len * p / n; }


// ---------------------------------------------------------------------------------------------
// Linear: y = x W^T + b.   x: (B, IN)  W: (OUT, IN)  b: (OUT) or NULL  y: (B, OUT)
void nn_linear_forward(float *y, const float *x, const float *W, const float *b, int B, int IN, int OUT);
// dW += dy^T x;  db += sum over the batch of dy (db NULL when there is no bias);
// dx = dy W (overwritten; NULL skips it).   dy: (B, OUT)  dx: (B, IN)
void nn_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int B,
                        int IN, int OUT);
// A layer with its ReLU, fused: y = relu(x W^T + b), each slice of y finished by the thread that
// computed it (the same values as nn_linear_forward then nn_relu_forward).
void nn_linear_relu_forward(float *y, const float *x, const float *W, const float *b, int B, int IN, int OUT);
// nn_linear_backward for a layer whose input x is the output of a ReLU: dx is the gradient at the
// ReLU's input, (dy W) masked by x > 0 (the same values as nn_linear_backward then
// nn_relu_backward(dx, dx, x, B * IN)).  db is summed in the pass that computes dW.
void nn_relu_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int B,
                             int IN, int OUT);
// A stack of layers backward, L[0] the last layer: for each i in order, nn_linear_backward (or
// nn_relu_linear_backward when x_relu) with L[i]'s arguments, where L[i + 1].dy is L[i].dx
// (only the last entry's dx may be NULL).  The same values as those calls; on two threads the
// input gradients and the weight gradients run side by side, each product whole (nn.c).
typedef struct {
    float *dx, *dW, *db;
    const float *dy, *x, *W;
    int IN, OUT, x_relu;
} nn_linear_grad;
void nn_linear_stack_backward(const nn_linear_grad *L, int n, int B);
// Two stacks with a stage between them: nn_linear_stack_backward(up), then mid(mid_ctx, s0, s1,
// part) over the samples [0, B) (cut into ranges, each sample once; part 0 or 1 names the thread,
// for private scratch: with one range, [0, B) and part 0, mid may use the pool), then
// nn_linear_stack_backward(low).  mid must give each sample the same values however [0, B) is
// cut.  On two threads both run as two chains side by side (nn.c).
typedef void (*nn_stage_fn)(void *ctx, int s0, int s1, int part);
void nn_stacks_backward(const nn_linear_grad *up, int nup, nn_stage_fn mid, void *mid_ctx, const nn_linear_grad *low,
                        int nlow, int B);

// Elementwise, over n values.  y may alias x; dx may alias dy.
void nn_relu_forward(float *y, const float *x, size_t n);
void nn_relu_backward(float *dx, const float *dy, const float *y, size_t n); // dx = dy * (y > 0)
void nn_sigmoid_forward(float *y, const float *x, size_t n);
void nn_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n); // dx = dy * y (1 - y)

// ---------------------------------------------------------------------------------------------
// DLRM dot interaction.  Per sample, T = [z; e_1 .. e_F] (F+1 vectors of D), and
//   out = [z, <T_i, T_j> for i in 1..F, for j in 0..i-1]          (B, D + F(F+1)/2)
// which is the DLRM reference's order (pairs below the diagonal, no self-interaction).
//   z: (B, D)  emb: (B, F, E), first D of each row used
// scratch: nn_interact_dot_scratch(F, D) floats (room for every part of the split), any content.
size_t nn_interact_dot_scratch(int F, int D);
// Where part p's share of that scratch starts (in floats): a call on one thread (nn_threads() = 1)
// uses only part 0's share of the scratch it is given.
size_t nn_interact_dot_scratch_part(int F, int D, int p);
static inline int nn_interact_dot_width(int F, int D) { return D + F * (F + 1) / 2; }
void nn_interact_dot_forward(float *out, const float *z, const float *emb, int B, int F, int D, int E,
                             float *scratch);
// dz: (B, D) overwritten;  demb: (B, F, E) accumulated on the first D of each row.
void nn_interact_dot_backward(float *dz, float *demb, const float *dout, const float *z, const float *emb, int B,
                              int F, int D, int E, float *scratch);

// Concatenation of a dense block with the flattened embeddings (DLRM "cat" interaction with
// a = z; the deep tower input of Wide&Deep, DeepFM and DCN with a = dense features):
//   out = [a, emb[:, 0, :D], .., emb[:, F-1, :D]]                   (B, Na + F D)
void nn_concat_forward(float *out, const float *a, const float *emb, int B, int Na, int F, int D, int E);
// da: (B, Na) overwritten (NULL skips it);  demb accumulated on the first D of each row.
void nn_concat_backward(float *da, float *demb, const float *dout, int B, int Na, int F, int D, int E);

// ---------------------------------------------------------------------------------------------
// DCN-v2 cross layer, full rank:  u = xl W^T + b;  y = x0 ⊙ u + xl.
//   x0, xl, y, u: (B, d)  W: (d, d)  b: (d).  u is an output kept for the backward pass.
void nn_cross_forward(float *y, float *u, const float *x0, const float *xl, const float *W, const float *b, int B,
                      int d);
// With du = dy ⊙ x0:  dW += du^T xl;  db += sum du;  dx0 += dy ⊙ u (ACCUMULATED: every cross
// layer reads x0);  dxl = dy + du W (overwritten).  du: (B, d) scratch.
void nn_cross_backward(float *dx0, float *dxl, float *dW, float *db, float *du, const float *dy, const float *x0,
                       const float *xl, const float *u, const float *W, int B, int d);

// Low-rank cross layer, W = U V^T (the DCN-v2 "mixture" with one expert):
//   p = xl V;  u = p U^T + b;  y = x0 ⊙ u + xl.
//   U, V: (d, r)  p: (B, r), kept for the backward pass with u.
void nn_cross_lowrank_forward(float *y, float *u, float *p, const float *x0, const float *xl, const float *U,
                              const float *V, const float *b, int B, int d, int r);
// With du = dy ⊙ x0, dp = du U:  dU += du^T p;  dV += xl^T dp;  db += sum du;
// dx0 += dy ⊙ u (accumulated);  dxl = dy + dp V^T (overwritten).  du: (B, d), dp: (B, r) scratch.
void nn_cross_lowrank_backward(float *dx0, float *dxl, float *dU, float *dV, float *db, float *du, float *dp,
                               const float *dy, const float *x0, const float *xl, const float *u, const float *p,
                               const float *U, const float *V, int B, int d, int r);

// ---------------------------------------------------------------------------------------------
// Factorization machine, second order over the F embedding vectors v_f = emb[b, f, :D]:
//   out[b] = 0.5 * sum_k ((sum_f v_fk)^2 - sum_f v_fk^2)               out: (B)
void nn_fm_forward(float *out, const float *emb, int B, int F, int D, int E);
// demb[b, f, k] += dout[b] * (sum_g v_gk - v_fk)
void nn_fm_backward(float *demb, const float *dout, const float *emb, int B, int F, int D, int E);

// Wide / first-order part:  out[b] = w . dense[b] + bias + sum_f emb[b, f, D]
// (element D of each row is its first-order weight, so E > D).   w: (Nd)  bias: (1)  out: (B)
void nn_wide_forward(float *out, const float *dense, const float *emb, const float *w, const float *bias, int B,
                     int Nd, int F, int D, int E);
// dw += dout^T dense;  dbias += sum dout;  demb[b, f, D] += dout[b];
// ddense += dout w (ACCUMULATED: the dense features also feed the deep tower; NULL skips it).
void nn_wide_backward(float *ddense, float *dw, float *dbias, float *demb, const float *dout, const float *dense,
                      const float *w, int B, int Nd, int F, int D, int E);

// ---------------------------------------------------------------------------------------------
// Double-precision naive twins (nn_naive.c), same shapes and conventions; scratch not needed.
void nn_naive_linear_forward(double *y, const double *x, const double *W, const double *b, int B, int IN, int OUT);
void nn_naive_linear_backward(double *dx, double *dW, double *db, const double *dy, const double *x,
                              const double *W, int B, int IN, int OUT);
void nn_naive_relu_forward(double *y, const double *x, size_t n);
void nn_naive_relu_backward(double *dx, const double *dy, const double *y, size_t n);
void nn_naive_sigmoid_forward(double *y, const double *x, size_t n);
void nn_naive_sigmoid_backward(double *dx, const double *dy, const double *y, size_t n);
void nn_naive_interact_dot_forward(double *out, const double *z, const double *emb, int B, int F, int D, int E);
void nn_naive_interact_dot_backward(double *dz, double *demb, const double *dout, const double *z,
                                    const double *emb, int B, int F, int D, int E);
void nn_naive_concat_forward(double *out, const double *a, const double *emb, int B, int Na, int F, int D, int E);
void nn_naive_concat_backward(double *da, double *demb, const double *dout, int B, int Na, int F, int D, int E);
void nn_naive_cross_forward(double *y, double *u, const double *x0, const double *xl, const double *W,
                            const double *b, int B, int d);
void nn_naive_cross_backward(double *dx0, double *dxl, double *dW, double *db, const double *dy, const double *x0,
                             const double *xl, const double *u, const double *W, int B, int d);
void nn_naive_cross_lowrank_forward(double *y, double *u, double *p, const double *x0, const double *xl,
                                    const double *U, const double *V, const double *b, int B, int d, int r);
void nn_naive_cross_lowrank_backward(double *dx0, double *dxl, double *dU, double *dV, double *db,
                                     const double *dy, const double *x0, const double *xl, const double *u,
                                     const double *p, const double *U, const double *V, int B, int d, int r);
void nn_naive_fm_forward(double *out, const double *emb, int B, int F, int D, int E);
void nn_naive_fm_backward(double *demb, const double *dout, const double *emb, int B, int F, int D, int E);
void nn_naive_wide_forward(double *out, const double *dense, const double *emb, const double *w,
                           const double *bias, int B, int Nd, int F, int D, int E);
void nn_naive_wide_backward(double *ddense, double *dw, double *dbias, double *demb, const double *dout,
                            const double *dense, const double *w, int B, int Nd, int F, int D, int E);

#endif
