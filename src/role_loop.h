// role_loop: what the trainer roles share.  Every distributed mode: the dense part of an
// iteration (role_dense_step).  Modes `sharded` (role_sharded.c), `static` (role_static.c) and
// `async` (role_async.c) also: the training loop with its metrics, evaluation and --save (the same
// lines, JSON and saved model as mode sync's role_trainer.c), a row set kept by ascending key,
// the rank-order gradient merge, and the transfer of row sets to the writer.
//
// The loop calls, per iteration, the mode's step on every trainer; every print_every
// iterations it sums the window's counters over the trainers (deterministic all-reduce); for an
// evaluation or --save it calls the mode's collect on every trainer (a collective: trainer 0
// ends with every row in tr->table), then the mode's finish.
#ifndef BP_ROLE_LOOP_H
#define BP_ROLE_LOOP_H

#include <stdint.h>

#include "ckpt.h"
#include "comm.h"
#include "emb.h"
#include "jsonl.h"
#include "optim.h"
#include "train.h"

// Time and lookups of the current window, kept by the mode's step.
typedef struct {
    double t_wait, t_sync, t_ar, t_compute; // seconds: waiting for rows, row gradients, dense all-reduce, compute
    uint64_t lookups, hot_hits;             // (b, f) lookups, and those served by pinned rows (static)
                                            // or by the cache without a fetch (async)
} role_stats;

typedef struct {
    const char *mode;  // "sharded", "static", "async": the summary's "mode"
    void *ctx;         // the mode's state
    trainer *tr;       // dense replica; tr->table filled by collect on trainer 0
    role_stats *st;
    int S, T, i, first_trainer;
    int report_hits;   // write "hit_rate" (share of lookups served by pinned rows)
    // The iteration: either step, or the common one (role_loop_step) around fetch and sync.
    int (*step)(void *ctx, int64_t t, double *loss);
    // fetch: erow[e] for every (b, f) entry e of slice ids (Bi, F) of iteration t (timed as
    // t_wait); sync: the coalesced row gradients tr->g of t to where they are applied (t_sync).
    int (*fetch)(void *ctx, int64_t t, const uint32_t *ids, int Bi);
    int (*sync)(void *ctx, int64_t t);
    const float *const *erow; // (bmax * F) the rows fetch points to
    float *ar_work;           // dense all-reduce scratch (comm_allreduce_sum_f32)
    int (*collect)(void *ctx, int64_t iter); // every trainer calls it
    int (*finish)(void *ctx, int64_t iters); // may be NULL
    // The mode's own figures (both may be NULL): window is called by every trainer at the end of
    // every metrics window (a collective: it may all-reduce over the trainers); json by the
    // writer, to add the window's figures to its line (summary 0) or the run's to the summary
    // line (summary 1).
    int (*window)(void *ctx);
    void (*json)(void *ctx, jsonl *j, int summary);
    // Checkpoint `iter` (ckpt_run.h), called on every trainer at the same boundary; trainer 0
    // commits.  NULL: the mode has none.
    int (*checkpoint)(void *ctx, int64_t iter);
} role_loop;

// The common iteration of trainer rl->i: its slice [b0, b1) of global batch t; rl->fetch;
// role_dense_step; the row gradients coalesced into tr->g (sample order); rl->sync.  *loss gets
// the global batch's mean loss.
int role_loop_step(const train_setup *su, const role_loop *rl, int64_t t, double *loss);

// Trainer 0's commit of checkpoint iter after its own parts (files[0..nown)): the reports of the
// S servers (server-<s>.bin, asked with DUMP_REQ flagged MSG_F_CKPT beforehand) and of trainers
// 1..T-1 that write a part (trainer-<i>.bin, when `trainer_parts`), then the manifest.
int role_ckpt_commit(const train_setup *su, const trainer *tr, int64_t iter, const char *dir, ckpt_file *files,
                     int nown, int S, int first_server, int T, int first_trainer, int trainer_parts, int own_rc);
// Trainer 0: asks the S servers for their parts of checkpoint iter (rq, reqbuf: S each).
int role_ckpt_ask_servers(int64_t iter, int S, int first_server, comm_req *rq, uint8_t (*reqbuf)[24]);

// Runs su->total_iters iterations and the end of a run (result lines, metrics, --save on
// trainer 0).  Returns 0 or a negative code with a message.
int role_loop_run(const train_setup *su, const role_loop *rl);
// The summary's first_iter_wait_rows_s, first_iter_emb_sync_s, first_iter_allreduce_s and
// first_iter_compute_s: the first iteration's part of each time of the breakdown (p: wait, sync,
// all-reduce, compute), so that a steady rate leaves the warm-up out of the parts as of train_s.
void role_json_first_parts(jsonl *j, const double p[4]);

// Sum of the global batch's loss over the trainers (deterministic all-reduce).
int role_loss_allreduce(double *loss, int first_trainer, int T);

// Dataset row of sample b0 of global batch t (training order; epochs wrap).
static inline uint64_t role_batch_row(const train_setup *su, int64_t t, int b0) {
    return su->tr0 + (uint64_t)(t % (int64_t)su->per_epoch) * (uint64_t)su->B + (uint64_t)b0;
}

// The dense part of an iteration, the same in every distributed mode (sync, sharded, static,
// bagpipe): gather the Bi * F rows at erow into tr->emb, forward, loss of the slice scaled by
// 1 / B (B = the global batch), backward into tr->d_emb, rank-order all-reduce of the dense
// gradients (ar_work: comm's workspace) and of the loss, dense optimizer step.  *lsum gets the
// global batch's summed loss; *t_compute and *t_ar grow by the seconds spent computing and in
// the all-reduce.  t: the iteration (0-based), for its learning rate.  The caller coalesces and
// synchronises the row gradients.
int role_dense_step(trainer *tr, int64_t t, const float *const *erow, const float *dense /*(Bi, Nd)*/,
                    const uint8_t *label /*(Bi)*/, int Bi, int B, int first_trainer, int T, float *ar_work,
                    double *lsum, double *t_compute, double *t_ar);

// For every (b, f) entry e of a slice ids (Bi, F): the index u of its key in the slice's U
// unique keys uk (ascending), into idx (Bi * F).
void role_key_index(const emb_layout *L, const uint32_t *ids, int Bi, const uint64_t *uk, int U, uint32_t *idx);

// A key -> slot map of at most cap keys (linear probing, backward-shift deletion, at most half
// full): the caches' index.
typedef struct {
    uint64_t *keys;  // (mask + 1) ROLE_NO_KEY = free
    uint32_t *slots; // (mask + 1)
    uint64_t mask;
} role_keymap;
#define ROLE_NO_KEY UINT64_MAX
#define ROLE_NO_SLOT UINT32_MAX

void role_keymap_init(role_keymap *m, uint64_t cap);
void role_keymap_free(role_keymap *m); // safe on a zeroed one
// The slot of key, or ROLE_NO_SLOT.
uint32_t role_keymap_find(const role_keymap *m, uint64_t key);
void role_keymap_put(role_keymap *m, uint64_t key, uint32_t slot); // key must be absent
void role_keymap_del(role_keymap *m, uint64_t key);                // key must be present

// A directory over an ascending key list (a shard's keys, about 1/parts of the key space [0, K)):
// first[i] is the first position whose key is >= i << shift, with 2^shift >= 8 parts, so a
// lookup reads one pair of directory words and scans about 8 keys (one cache line) instead of a
// binary search's log2(n) dependent misses (22 for 4M keys; it was the servers' largest cost).
// 8 K / (8 parts) bytes: one byte per key of the space per part.
typedef struct {
    uint64_t *first; // (n_dir + 1); first[n_dir] = n
    uint64_t n_dir;  // (K >> shift) + 1
    int shift;
} role_keydir;

void role_keydir_init(role_keydir *d, const uint64_t *keys, uint64_t n, uint64_t K, int parts);
void role_keydir_free(role_keydir *d); // safe on a zeroed one
// Position of key in keys (the list the directory was built over), or -1.
static inline int64_t role_keydir_find(const role_keydir *d, const uint64_t *keys, uint64_t key) {
    uint64_t i = key >> d->shift;
    if (i >= d->n_dir) return -1;
    for (uint64_t j = d->first[i], e = d->first[i + 1]; j < e && keys[j] <= key; j++)
        if (keys[j] == key) return (int64_t)j;
    return -1;
}

// A set of rows by ascending key: a trainer's shard (sharded) or its pinned rows (static).
typedef struct {
    uint64_t n;      // rows
    uint64_t *keys;  // (n) ascending, unique
    float *rows;     // (n, stride), initialised with emb_row_init
    int stride;
    size_t bytes;    // of the rows mapping
    role_keydir dir; // over keys
} role_rows;

// Allocates and initialises the rows of the given keys (ascending, unique), about 1/parts of the
// key space spread evenly (a hashed shard; 1 for a set that may be clustered: a directory bucket
// holds at most 8 parts keys).  keys is taken over (freed by role_rows_free).  BP_ENOMEM with a
// message when the mapping fails.
int role_rows_init(role_rows *r, const emb_layout *L, uint64_t *keys, uint64_t n, int parts);
void role_rows_free(role_rows *r); // safe on a zeroed one
// Slot of key, or -1 when the set lacks it.
static inline int64_t role_rows_slot(const role_rows *r, uint64_t key) { return role_keydir_find(&r->dir, r->keys, key); }
static inline float *role_rows_at(const role_rows *r, int64_t slot) { return r->rows + (size_t)slot * r->stride; }

// The rank-order rule: T ascending key lists of partial gradients (list p = trainer p); for
// each key in ascending order, the first list that holds it is copied into sum, the later ones
// are added in list order, then emb_opt_apply_row on the key's row in dst (which must hold it).
// cur: (T) scratch; sum: (E) scratch.
void role_merge_apply(const emb_opt *o, role_rows *dst, int T, const uint64_t *const *keys,
                      const float *const *grads, const uint32_t *n, int E, uint32_t *cur, float *sum);

// Sends every row of r (keys and full rows) to rank `to` as DUMP_ROWS(iter) chunks of at most
// ~32 MiB, the last one flagged MSG_F_LAST.
int role_send_rows(const role_rows *r, int to, int64_t iter);
// Receives such a dump from rank `from` into table (owner `owner` of `owners`, by
// msg_server_of; owners 0: no check) and adds the rows received to *total.  buf: cap bytes.
int role_recv_rows(emb_table *table, void *buf, size_t cap, int from, int64_t iter, int owner, int owners,
                   uint64_t *total);
// Capacity role_recv_rows needs for rows of this layout.
size_t role_dump_cap(const emb_layout *L);

// A trainer's messages to the embedding servers of modes sync/static/async: ROW_REQ(t) /
// ROW_REPLY(t) and GRAD_PUSH(t) to S servers, up to cap keys per message.
typedef struct {
    int S, first_server, i; // servers, rank of server 0, this trainer's index (for messages)
    int E;
    uint32_t cap;           // most keys in one message
    void **req, **reply, **push; // (S) message buffers
    size_t req_cap, reply_cap, push_cap;
    comm_req *rq;           // (2 S) fetch requests in flight
    comm_req *pq;           // (S) pushes in flight (pushing = 1)
    int pushing;
    uint32_t *n;            // (S) keys per server of the current message
    uint64_t **kout;        // (S) keys of the message being built
    float **rout;           // (S)
    const float **rin;      // (S) rows of the replies
    int64_t *rin_iter;      // (S) the replies' iteration: their rows hold every update before it
} role_srv;

void role_srv_init(role_srv *c, int S, int first_server, int i, int E, uint32_t cap);
void role_srv_free(role_srv *c); // safe on a zeroed one
// Requests the rows (E floats) of the n ascending keys for iteration t from their servers and
// waits for every reply; srv[u], pos[u] (n) get key u's server and its position in that
// server's reply, c->rin[s] the reply's rows and c->rin_iter[s] their iteration, in [t, t_max]
// (a server answers a request behind it with its current rows).  skip_empty: servers owning
// none of the keys get no request (mode async); else every server gets one, empty or not.
int role_srv_fetch(role_srv *c, int64_t t, int64_t t_max, const uint64_t *keys, uint32_t n, int skip_empty,
                   uint32_t *srv, uint32_t *pos);
// GRAD_PUSH(t) of the coalesced gradient g to every server (empty or not).  With wait = 0 it
// returns with the sends in flight; the next push or role_srv_done completes them.
int role_srv_push(role_srv *c, int64_t t, const emb_grad *g, int wait);
// Completes the pushes in flight and sends DONE(iters) to every server.
int role_srv_done(role_srv *c, int64_t iters);

#endif
