// role_server: an embedding server of mode `sync` (dist.h, msg.h).
//
// The shard: the keys k with msg_server_of(k, S) == s, ascending (keys[slot]), and their rows
// (slot, stride) with the optimizer state inside each row, initialised with emb_row_init so that
// every value equals the local table's.  key -> slot is a directory over keys (role_keydir: one
// bucket read and a scan of about 8 keys): 8 bytes per row plus one byte per key of the whole
// space divided by S.
//
// Loop (modes sync, static and async): probe any message, receive it into the sender's buffer,
// handle it:
//   ROW_REQ(t) / DUMP_REQ(t)   answered once applied >= t, else held until applied == t (one
//                              per trainer at most); the reply carries the rows' iteration, the
//                              `applied` of the moment (t in sync and static, whose trainers never
//                              ask behind; async's may, within their staleness bound).  A
//                              DUMP_REQ(t) with t < applied is an error
//   GRAD_PUSH(t)               t must be the sender's next iteration (0, 1, 2, ...); queued per
//                              trainer.  Once every trainer's queue holds iteration `applied`, each
//                              key's partial gradients are summed in trainer-rank order (first
//                              copied) and applied with emb_opt_apply_row; applied + 1; held
//                              requests of the new `applied` are answered
//   DONE(n)                    the server returns after T of them, with nothing held.  A DONE
//                              must follow the sender's last push (pushes numbered up to n-1:
//                              from 0, or from the checkpoint's iteration in a resumed run),
//                              every trainer's must say the same n, and no push of iteration n
//                              or later may follow anyone's DONE: a trainer that ends early or
//                              disagrees on the run's length is an error that names it, not a
//                              wait for pushes that will never come
// In sync every trainer requests every iteration, so a push is never more than one iteration
// ahead of `applied`.  In async a trainer requests only when its cache misses and pushes without
// waiting, so a fast trainer's pushes may arrive before a slower one's (the dense all-reduce
// keeps them within a few iterations); the queues hold them until their turn.  An async trainer
// at iteration k with bound S asks for ROW_REQ(max(0, k - S)): answered at once unless this
// server is more than S iterations behind k, with rows at most S iterations old.
//
// Mode bagpipe (server_run_bagpipe): no gradients reach the servers; rows leave and come back
// whole (with their optimizer state).
//   FETCH(t)     queued per trainer (FIFO); the head is answered (FETCH_REPLY, full rows in the
//                request's key order) once every key's gate (evict_iter e, writer w) holds:
//                e == PLAN_NEVER, or wb_done[w] > e (the per-writer watermark, DESIGN §6)
//   WB(n)        rows replace the shard's copies; wb_done[writer] = n, which must grow by one
//                per message (every writer sends one per iteration, empty or not)
//   DUMP_REQ(n)  answered once every writer's wb_done >= n (all evictions through n-1 applied)
//   DONE(n)      as in sync, with write-backs in place of pushes (the last one is WB(n)); a
//                FETCH still gated on a finished writer's later write-back is an error
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "emb.h"
#include "msg.h"
#include "optim.h"
#include "plan.h"
#include "role_loop.h"

typedef struct {
    const train_setup *su;
    emb_layout L;
    int s, S, T, first_trainer;
    uint64_t n;      // rows in the shard
    uint64_t *keys;  // (n) ascending
    role_keydir dir; // over keys
    float *rows;     // (n, stride)
    size_t rows_bytes;
    uint32_t cap;    // most keys in one request or push
    // per trainer
    void **req;      // (T) buffers of a held or current request
    int *held;       // (T) 1 when req[p] holds a request not yet answered
    void **pq;       // (T, SERVER_PUSH_AHEAD) queued gradient pushes per trainer (ring; allocated on use)
    int *pq_head, *pq_n; // (T)
    int64_t *push_next;  // (T) iteration of the trainer's next push
    int64_t *req_iter;   // (T) iteration of the held request
    void **reply;    // (T) reply buffers
    comm_req *reply_req; // (T)
    int *reply_busy;
    size_t req_cap, push_cap, reply_cap;
    float *sum;      // (E) one key's summed gradient
    int *cur;        // (T) merge cursors
    int64_t applied; // iterations whose pushes are all applied
} server;

#define SERVER_PUSH_AHEAD 64 // most pushes of one trainer queued ahead of the others'

static int64_t slot_of(const server *sv, uint64_t key) { return role_keydir_find(&sv->dir, sv->keys, key); }

static int server_init(server *sv, const train_setup *su, const dist_layout *l, int s) {
    memset(sv, 0, sizeof *sv);
    int rc = emb_layout_init(&sv->L, &su->lc);
    if (rc) return rc;
    sv->su = su, sv->s = s, sv->S = l->S, sv->T = l->T, sv->first_trainer = dist_trainer_rank(l, 0);
    const emb_layout *L = &sv->L;
    uint64_t n = 0;
    for (uint64_t k = 0; k < L->rows; k++) n += msg_server_of(k, sv->S) == (uint32_t)s;
    sv->n = n;
    sv->keys = bp_xmalloc((n ? n : 1) * sizeof *sv->keys);
    sv->rows_bytes = (size_t)(n ? n : 1) * (size_t)L->stride * sizeof(float);
    sv->rows = bp_alloc_huge(sv->rows_bytes);
    if (!sv->rows) return bp_fail(BP_ENOMEM, "server %d: cannot map %zu bytes for %llu rows", s, sv->rows_bytes,
                                  (unsigned long long)n);
    uint64_t j = 0;
    for (uint64_t k = 0; k < L->rows; k++)
        if (msg_server_of(k, sv->S) == (uint32_t)s) {
            sv->keys[j] = k;
            emb_row_init(L, k, sv->rows + j * (size_t)L->stride);
            j++;
        }
    role_keydir_init(&sv->dir, sv->keys, n, L->rows, sv->S);
    if (su->ck.from[0]) { // resuming: the shard of the checkpoint, and its iteration
        if ((rc = ckpt_run_load_shard(su, L, s, sv->S, sv->keys, sv->rows, n))) return rc;
        sv->applied = su->ck.start_iter;
    }
    const int T = sv->T;
    sv->cap = (uint32_t)(((su->B + T - 1) / T) * L->F);
    // The request, push and reply buffers below serve the modes that pull rows every iteration;
    // bagpipe's servers keep their own queues (server_run_bagpipe).
    if (su->mode == TRAIN_MODE_BAGPIPE) return 0;
    sv->req_cap = msg_bytes(MSG_ROW_REQ, sv->cap, 0);
    sv->push_cap = msg_bytes(MSG_GRAD_PUSH, sv->cap, (uint32_t)L->E);
    sv->reply_cap = msg_bytes(MSG_ROW_REPLY, sv->cap, (uint32_t)L->stride);
    sv->req = bp_xcalloc((size_t)T, sizeof *sv->req);
    sv->pq = bp_xcalloc((size_t)T * SERVER_PUSH_AHEAD, sizeof *sv->pq);
    sv->reply = bp_xcalloc((size_t)T, sizeof *sv->reply);
    for (int p = 0; p < T; p++) {
        sv->req[p] = bp_xmalloc(sv->req_cap);
        sv->pq[(size_t)p * SERVER_PUSH_AHEAD] = bp_xmalloc(sv->push_cap);
        sv->reply[p] = bp_xmalloc(sv->reply_cap);
    }
    sv->held = bp_xcalloc((size_t)T, sizeof *sv->held);
    sv->pq_head = bp_xcalloc((size_t)T, sizeof *sv->pq_head);
    sv->pq_n = bp_xcalloc((size_t)T, sizeof *sv->pq_n);
    sv->push_next = bp_xcalloc((size_t)T, sizeof *sv->push_next);
    for (int p = 0; p < T; p++) sv->push_next[p] = sv->applied; // a resumed run's pushes start at its iteration
    sv->req_iter = bp_xcalloc((size_t)T, sizeof *sv->req_iter);
    sv->reply_req = bp_xcalloc((size_t)T, sizeof *sv->reply_req);
    sv->reply_busy = bp_xcalloc((size_t)T, sizeof *sv->reply_busy);
    sv->sum = bp_xmalloc((size_t)L->E * sizeof(float));
    sv->cur = bp_xcalloc((size_t)T, sizeof *sv->cur);
    return 0;
}

static void server_free(server *sv) {
    for (int p = 0; sv->req && p < sv->T; p++) free(sv->req[p]), free(sv->reply[p]);
    for (size_t q = 0; sv->pq && q < (size_t)sv->T * SERVER_PUSH_AHEAD; q++) free(sv->pq[q]);
    free(sv->req), free(sv->pq), free(sv->reply), free(sv->held), free(sv->pq_head), free(sv->pq_n);
    free(sv->push_next), free(sv->req_iter);
    free(sv->reply_req), free(sv->reply_busy), free(sv->sum), free(sv->cur), free(sv->keys);
    if (sv->rows) bp_free_huge(sv->rows, sv->rows_bytes);
    role_keydir_free(&sv->dir);
    memset(sv, 0, sizeof *sv);
}

static msg_expect expect(const server *sv, uint32_t kind, uint32_t width) {
    return (msg_expect){.kind = kind, .width = width, .max_n = sv->cap, .iter = -1, .rows = sv->L.rows,
                        .server = sv->s, .S = sv->S};
}

// Sends every row of the shard (keys and full rows with optimizer state) to rank `to` in chunks
// of at most ~32 MiB, the last one flagged.
static int server_dump(server *sv, int to, int64_t iter) {
    const int stride = sv->L.stride;
    const uint64_t per = BP_MAX((uint64_t)1, ((uint64_t)32 << 20) / (8 + (uint64_t)stride * 4));
    void *buf = bp_xmalloc(msg_bytes(MSG_DUMP_ROWS, (uint32_t)BP_MIN(per, sv->n ? sv->n : 1), (uint32_t)stride));
    uint64_t i = 0;
    int rc = 0;
    do {
        uint32_t n = (uint32_t)BP_MIN(per, sv->n - i);
        msg_header h = {MSG_DUMP_ROWS, i + n == sv->n ? MSG_F_LAST : 0, (uint64_t)iter, n, (uint32_t)stride};
        uint64_t *k;
        float *r;
        msg_encode(buf, &h, &k, &r);
        memcpy(k, sv->keys + i, (size_t)n * sizeof *k);
        memcpy(r, sv->rows + i * (size_t)stride, (size_t)n * stride * sizeof *r);
        comm_req q;
        rc = comm_isend(buf, msg_bytes(MSG_DUMP_ROWS, n, (uint32_t)stride), to, MSG_DUMP_ROWS, &q);
        if (!rc) rc = comm_wait(&q, NULL);
        i += n;
    } while (!rc && i < sv->n);
    free(buf);
    return rc;
}

// A checkpoint request: the shard as part server-<s>.bin of checkpoint `iter`, reported to `to`
// with CKPT_PART (flagged MSG_F_FAILED when it could not be written: training decides, the
// server goes on).
static int server_checkpoint(server *sv, int to, int64_t iter) {
    ckpt_file f;
    int wrc = ckpt_run_write_shard(sv->su, iter, sv->s, sv->rows, sv->n, sv->L.stride, &f);
    if (wrc) fprintf(stderr, "bagpipe: server %d: checkpoint %lld: %s\n", sv->s, (long long)iter, bp_errmsg(wrc));
    else ckpt_test_kill_point(comm_rank(), iter);
    return ckpt_run_report(to, iter, wrc, &f);
}

// Answers the request held in req[p] (a ROW_REQ or DUMP_REQ already validated).
static int server_answer(server *sv, int p) {
    const int from = sv->first_trainer + p;
    const uint8_t *b = sv->req[p];
    uint32_t kind = bp_get_u32(b), flags = bp_get_u32(b + 4);
    int64_t iter = (int64_t)bp_get_u64(b + 8);
    sv->held[p] = 0;
    if (kind == MSG_DUMP_REQ && (flags & MSG_F_CKPT)) return server_checkpoint(sv, from, iter);
    if (kind == MSG_DUMP_REQ) return server_dump(sv, from, iter);
    uint32_t n = bp_get_u32(b + 16), width = bp_get_u32(b + 20);
    const uint64_t *keys = (const uint64_t *)(b + MSG_HEADER_BYTES);
    if (sv->reply_busy[p]) {
        int rc = comm_wait(&sv->reply_req[p], NULL);
        if (rc) return rc;
        sv->reply_busy[p] = 0;
    }
    BP_ASSERT(iter <= sv->applied);
    msg_header h = {MSG_ROW_REPLY, 0, (uint64_t)sv->applied, n, width}; // the rows' iteration: >= iter
    float *out;
    msg_encode(sv->reply[p], &h, NULL, &out);
    const int stride = sv->L.stride;
    for (uint32_t i = 0; i < n; i++) {
        int64_t slot = slot_of(sv, keys[i]);
        BP_ASSERT(slot >= 0); // the decoder checked ownership, and the shard holds every owned key
        memcpy(out + (size_t)i * width, sv->rows + (size_t)slot * stride, (size_t)width * sizeof(float));
    }
    int rc = comm_isend(sv->reply[p], msg_bytes(MSG_ROW_REPLY, n, width), from, MSG_ROW_REPLY, &sv->reply_req[p]);
    if (!rc) sv->reply_busy[p] = 1;
    return rc;
}

// All T pushes of iteration `applied` are in (the queues' heads): merge the T ascending key
// lists; for each key, the partial gradients in trainer order (first copied, the rest added),
// then the row update.
static void server_apply(server *sv) {
    const int T = sv->T, E = sv->L.E, stride = sv->L.stride;
    const emb_opt eo = train_eopt_at(sv->su, sv->applied);
    const uint64_t *keys[1024];
    const float *grads[1024];
    uint32_t n[1024];
    BP_ASSERT(T <= 1024);
    for (int p = 0; p < T; p++) {
        const uint8_t *b = sv->pq[(size_t)p * SERVER_PUSH_AHEAD + sv->pq_head[p]];
        n[p] = bp_get_u32(b + 16);
        keys[p] = (const uint64_t *)(b + MSG_HEADER_BYTES);
        grads[p] = (const float *)(b + MSG_HEADER_BYTES + (size_t)n[p] * 8);
        sv->cur[p] = 0;
    }
    for (;;) {
        uint64_t k = UINT64_MAX;
        for (int p = 0; p < T; p++)
            if ((uint32_t)sv->cur[p] < n[p] && keys[p][sv->cur[p]] < k) k = keys[p][sv->cur[p]];
        if (k == UINT64_MAX) break;
        int first = 1;
        for (int p = 0; p < T; p++) {
            if ((uint32_t)sv->cur[p] >= n[p] || keys[p][sv->cur[p]] != k) continue;
            const float *g = grads[p] + (size_t)sv->cur[p] * E;
            if (first) memcpy(sv->sum, g, (size_t)E * sizeof(float)), first = 0;
            else
                for (int j = 0; j < E; j++) sv->sum[j] += g[j];
            sv->cur[p]++;
        }
        int64_t slot = slot_of(sv, k);
        BP_ASSERT(slot >= 0);
        emb_opt_apply_row(&eo, sv->rows + (size_t)slot * stride, sv->sum);
    }
}

// Applies every iteration whose pushes are all queued, answering the requests held for the
// iterations reached; *held counts the held requests.
static int server_advance(server *sv, int *held) {
    const int T = sv->T;
    for (;;) {
        for (int p = 0; p < T; p++)
            if (!sv->pq_n[p]) return 0;
        server_apply(sv);
        sv->applied++;
        for (int p = 0; p < T; p++) sv->pq_head[p] = (sv->pq_head[p] + 1) % SERVER_PUSH_AHEAD, sv->pq_n[p]--;
        for (int q = 0; q < T; q++)
            if (sv->held[q] && sv->req_iter[q] == sv->applied) {
                (*held)--;
                int rc = server_answer(sv, q);
                if (rc) return rc;
            }
    }
}


// DONE(n) from trainer rank `from`, which has sent `sent` iterations' messages (pushes in sync,
// write-backs in bagpipe): every trainer must end at the same n, after all of its messages.
static int server_note_done(int s, int from, int64_t n, int64_t sent, int64_t *done_at) {
    if (sent != n)
        return bp_fail(BP_EFORMAT, "server %d: rank %d ended the run after %lld iterations but sent the messages of "
                       "%lld", s, from, (long long)n, (long long)sent);
    if (*done_at >= 0 && *done_at != n)
        return bp_fail(BP_EFORMAT, "server %d: rank %d ended the run after %lld iterations, another trainer after "
                       "%lld", s, from, (long long)n, (long long)*done_at);
    *done_at = n;
    return 0;
}

// A message of iteration `it` from rank `from` after some trainer ended the run at done_at.
static int server_check_after_done(int s, int from, int64_t it, int64_t done_at) {
    if (done_at >= 0 && it >= done_at)
        return bp_fail(BP_EFORMAT, "server %d: rank %d sent iteration %lld, but a trainer ended the run after %lld "
                       "iterations", s, from, (long long)it, (long long)done_at);
    return 0;
}

typedef struct {
    int Q;            // queue slots per trainer
    msg_buf *q;          // (T, Q) queued FETCH messages
    int *qhead, *qn;  // (T)
    msg_buf *rep;        // (T, Q) reply buffers: trainer p's k-th reply goes out of rep[p Q + k % Q]
    comm_req *rep_rq; // (T, Q) their sends
    uint8_t *rep_busy; // (T, Q) a send is in flight
    int *rep_next;    // (T) k % Q of trainer p's next reply
    int64_t *wb_done; // (T) per-writer watermark: evictions of iterations < wb_done[w] are applied
    msg_buf wb;          // WB receive buffer
    int64_t *dump_iter; // (T) held DUMP_REQ iteration, -1: none
    uint32_t *dump_flags; // (T) its flags (MSG_F_CKPT: a checkpoint)
    uint64_t fetches, gated; // requests answered; of those, held for a watermark first
    long delay0_us;     // test hook (BAGPIPE_TEST_PEER_DELAY_US=N): a pause of N us before each reply
                        // to trainer 0, so the other trainers' forwards and GSYNCs overtake it
} bpserver;

static int gate_open(const server *sv, const bpserver *bs, const void *msg) {
    const uint8_t *b = msg;
    uint32_t n = bp_get_u32(b + 16);
    const uint32_t *gate = (const uint32_t *)(b + MSG_HEADER_BYTES + (size_t)n * 8); // (n, 2) evict_iter, writer
    for (uint32_t i = 0; i < n; i++)
        if (gate[2 * i] != PLAN_NEVER && bs->wb_done[gate[2 * i + 1]] <= (int64_t)gate[2 * i]) return 0;
    (void)sv;
    return 1;
}

// Answers trainer p's queued fetches, oldest first, while their gates are open.
static int bp_answer(server *sv, bpserver *bs, int p) {
    const int stride = sv->L.stride, from = sv->first_trainer + p;
    while (bs->qn[p] > 0) {
        msg_buf *m = &bs->q[(size_t)p * bs->Q + bs->qhead[p]];
        if (!gate_open(sv, bs, m->p)) return 0;
        const uint8_t *b = m->p;
        uint32_t n = bp_get_u32(b + 16);
        const uint64_t *keys = (const uint64_t *)(b + MSG_HEADER_BYTES);
        // A ring of Q reply buffers per trainer, so that a reply still in flight (the trainer has
        // not yet taken it: it is computing and not in MPI) does not hold up the next one, nor
        // the other trainers' fetches behind it.  The buffer reused is Q replies old: the trainer
        // has at most P + 1 fetches outstanding and has taken that reply long ago.
        const size_t r = (size_t)p * bs->Q + (size_t)bs->rep_next[p];
        if (bs->rep_busy[r]) {
            int rc = comm_wait(&bs->rep_rq[r], NULL);
            if (rc) return rc;
            bs->rep_busy[r] = 0;
        }
        void *out = msg_buf_fit(&bs->rep[r], msg_bytes(MSG_FETCH_REPLY, n, (uint32_t)stride));
        msg_header h = {MSG_FETCH_REPLY, 0, bp_get_u64(b + 8), n, (uint32_t)stride};
        float *rows;
        msg_encode(out, &h, NULL, &rows);
        for (uint32_t i = 0; i < n; i++) {
            int64_t slot = slot_of(sv, keys[i]);
            BP_ASSERT(slot >= 0);
            memcpy(rows + (size_t)i * stride, sv->rows + (size_t)slot * stride, (size_t)stride * sizeof(float));
        }
        if (p == 0) bp_sleep_ns(1000 * (int64_t)bs->delay0_us);
        int rc = comm_isend(out, msg_bytes(MSG_FETCH_REPLY, n, (uint32_t)stride), from, MSG_FETCH_REPLY,
                            &bs->rep_rq[r]);
        if (rc) return rc;
        bs->rep_busy[r] = 1, bs->rep_next[p] = (bs->rep_next[p] + 1) % bs->Q;
        bs->qhead[p] = (bs->qhead[p] + 1) % bs->Q, bs->qn[p]--;
    }
    return 0;
}

static int bp_try_dumps(server *sv, bpserver *bs) {
    int64_t low = INT64_MAX;
    for (int w = 0; w < sv->T; w++) low = BP_MIN(low, bs->wb_done[w]);
    for (int p = 0; p < sv->T; p++)
        if (bs->dump_iter[p] >= 0 && bs->dump_iter[p] <= low) {
            int64_t it = bs->dump_iter[p];
            bs->dump_iter[p] = -1;
            int rc = (bs->dump_flags[p] & MSG_F_CKPT) ? server_checkpoint(sv, sv->first_trainer + p, it)
                                                      : server_dump(sv, sv->first_trainer + p, it);
            if (rc) return rc;
        }
    return 0;
}

static int server_run_bagpipe(server *sv, int P) {
    const int T = sv->T, s = sv->s;
    bpserver bs = {0};
    bs.Q = P + 4;
    bs.q = bp_xcalloc((size_t)T * bs.Q, sizeof *bs.q);
    bs.qhead = bp_xcalloc((size_t)T, sizeof *bs.qhead);
    bs.qn = bp_xcalloc((size_t)T, sizeof *bs.qn);
    bs.rep = bp_xcalloc((size_t)T * bs.Q, sizeof *bs.rep);
    bs.rep_rq = bp_xcalloc((size_t)T * bs.Q, sizeof *bs.rep_rq);
    bs.rep_busy = bp_xcalloc((size_t)T * bs.Q, 1);
    bs.rep_next = bp_xcalloc((size_t)T, sizeof *bs.rep_next);
    bs.wb_done = bp_xcalloc((size_t)T, sizeof *bs.wb_done);
    // resumed at K: every row is home (the checkpoint's trainer rows merged into the shard), and
    // the first write-back of each writer will be WB(K + 1)
    for (int p = 0; p < T; p++) bs.wb_done[p] = sv->su->ck.start_iter;
    bs.dump_flags = bp_xcalloc((size_t)T, sizeof *bs.dump_flags);
    bs.dump_iter = bp_xmalloc((size_t)T * sizeof *bs.dump_iter);
    for (int p = 0; p < T; p++) bs.dump_iter[p] = -1;
    const char *pd = getenv("BAGPIPE_TEST_PEER_DELAY_US");
    bs.delay0_us = pd ? atol(pd) : 0;
    uint8_t small[MSG_HEADER_BYTES] __attribute__((aligned(8)));
    int rc = 0, dones = 0;
    int64_t done_at = -1;                          // the run's length, once a trainer said DONE
    uint8_t *done = bp_xcalloc((size_t)T, 1);      // (T) DONE received
    for (;;) {
        int busy = 0;
        for (int p = 0; p < T; p++) busy |= bs.qn[p] > 0 || bs.dump_iter[p] >= 0;
        if (dones == T && !busy) break;
        if (dones == T) { // only write-backs open gates, and none will come
            rc = bp_fail(BP_EFORMAT, "server %d: every trainer ended the run with fetches or dump requests still "
                         "waiting for write-backs", s);
            break;
        }
        int from, tag;
        size_t len;
        if ((rc = comm_probe(COMM_ANY, COMM_ANY, &from, &tag, &len))) break;
        const int p = from - sv->first_trainer;
        if (p < 0 || p >= T) {
            rc = bp_fail(BP_EFORMAT, "server %d: message (tag %d) from rank %d, which is not a trainer", s, tag, from);
            break;
        }
        msg_header h;
        if (tag == MSG_FETCH) {
            if (bs.qn[p] == bs.Q) {
                rc = bp_fail(BP_EFORMAT, "server %d: rank %d has more than %d fetches outstanding", s, from, bs.Q);
                break;
            }
            msg_buf *m = &bs.q[(size_t)p * bs.Q + (bs.qhead[p] + bs.qn[p]) % bs.Q];
            void *buf = msg_buf_fit(m, len ? len : 1);
            if ((rc = comm_recv(buf, m->cap, from, tag, &len))) break;
            msg_expect ex = {.kind = MSG_FETCH, .width = 2, .max_n = MSG_MAX_N, .iter = -1, .rows = sv->L.rows,
                             .server = s, .S = sv->S};
            const float *g;
            if ((rc = msg_decode(buf, len, from, &ex, &h, NULL, &g))) break;
            const uint32_t *gate = (const uint32_t *)g;
            for (uint32_t i = 0; i < h.n && !rc; i++)
                if (gate[2 * i] != PLAN_NEVER && gate[2 * i + 1] >= (uint32_t)T)
                    rc = bp_fail(BP_EFORMAT, "server %d: FETCH from rank %d gated on writer %u of %d trainers", s,
                                 from, gate[2 * i + 1], T);
            if (rc) break;
            bs.qn[p]++, bs.fetches++;
            rc = bp_answer(sv, &bs, p);
            bs.gated += bs.qn[p] > 0; // still queued: its gate (or an older request's) is closed
        } else if (tag == MSG_WB) {
            void *buf = msg_buf_fit(&bs.wb, len ? len : 1);
            if ((rc = comm_recv(buf, bs.wb.cap, from, tag, &len))) break;
            msg_expect ex = {.kind = MSG_WB, .width = (uint32_t)sv->L.stride, .max_n = MSG_MAX_N,
                             .iter = bs.wb_done[p] + 1, .rows = sv->L.rows, .server = s, .S = sv->S};
            const uint64_t *k;
            const float *r;
            if ((rc = msg_decode(buf, len, from, &ex, &h, &k, &r))) break;
            if ((rc = server_check_after_done(s, from, (int64_t)h.iter - 1, done_at))) break;
            const int stride = sv->L.stride;
            for (uint32_t i = 0; i < h.n; i++) {
                int64_t slot = slot_of(sv, k[i]);
                BP_ASSERT(slot >= 0);
                memcpy(sv->rows + (size_t)slot * stride, r + (size_t)i * stride, (size_t)stride * sizeof(float));
            }
            bs.wb_done[p] = (int64_t)h.iter;
            for (int q = 0; q < T && !rc; q++) rc = bp_answer(sv, &bs, q);
            if (!rc) rc = bp_try_dumps(sv, &bs);
        } else if (tag == MSG_DUMP_REQ || tag == MSG_DONE) {
            if (len > sizeof small) {
                rc = bp_fail(BP_EFORMAT, "server %d: %s of %zu bytes from rank %d", s, msg_kind_name((uint32_t)tag),
                             len, from);
                break;
            }
            if ((rc = comm_recv(small, sizeof small, from, tag, &len))) break;
            msg_expect ex = {.kind = (uint32_t)tag, .max_n = 0, .iter = -1};
            if ((rc = msg_decode(small, len, from, &ex, &h, NULL, NULL))) break;
            if (tag == MSG_DONE) {
                if (done[p]) {
                    rc = bp_fail(BP_EFORMAT, "server %d: rank %d ended the run twice", s, from);
                    break;
                }
                if ((rc = server_note_done(s, from, (int64_t)h.iter, bs.wb_done[p], &done_at))) break;
                done[p] = 1, dones++;
            } else {
                if (bs.dump_iter[p] >= 0) {
                    rc = bp_fail(BP_EFORMAT, "server %d: rank %d sent a second dump request", s, from);
                    break;
                }
                bs.dump_iter[p] = (int64_t)h.iter, bs.dump_flags[p] = h.flags;
                rc = bp_try_dumps(sv, &bs);
            }
        } else {
            rc = bp_fail(BP_EFORMAT, "server %d: unexpected message tag %d from rank %d", s, tag, from);
        }
        if (rc) break;
    }
    for (size_t r = 0; !rc && r < (size_t)T * bs.Q; r++)
        if (bs.rep_busy[r]) rc = comm_wait(&bs.rep_rq[r], NULL), bs.rep_busy[r] = 0;
    if (!rc) {
        printf("server %d: %llu fetch requests, %llu waited for a write-back watermark\n", s,
               (unsigned long long)bs.fetches, (unsigned long long)bs.gated);
        fflush(stdout);
    }
    for (size_t j = 0; j < (size_t)T * bs.Q; j++) free(bs.q[j].p);
    for (size_t r = 0; r < (size_t)T * bs.Q; r++) free(bs.rep[r].p);
    free(bs.rep_rq), free(bs.rep_busy), free(bs.rep_next);
    free(bs.q), free(bs.qhead), free(bs.qn), free(bs.rep), free(bs.wb_done), free(bs.dump_iter), free(bs.dump_flags), free(bs.wb.p);
    free(done);
    return rc;
}

int role_server_run(const train_setup *su, const dist_layout *l, int s) {
    server sv;
    int rc = server_init(&sv, su, l, s);
    if (!rc && su->mode == TRAIN_MODE_BAGPIPE) {
        rc = server_run_bagpipe(&sv, su->prefetch);
        if (rc && !strstr(bp_errmsg(rc), "server")) {
            char m[512];
            snprintf(m, sizeof m, "%s", bp_errmsg(rc));
            rc = bp_fail(rc, "server %d: %s", s, m);
        }
        server_free(&sv);
        return rc;
    }
    const int T = l->T;
    int dones = 0, held = 0;
    int64_t done_at = -1;                     // the run's length, once a trainer said DONE
    uint8_t *done = bp_xcalloc((size_t)T, 1); // (T) DONE received
    while (!rc && (dones < T || held)) {
        if (dones == T) { // only pushes release held requests, and none will come
            rc = bp_fail(BP_EFORMAT, "server %d: every trainer ended the run with requests still held", s);
            break;
        }
        int from, tag;
        size_t len;
        // Holding requests, the server waits for the pushes of iteration `applied` that have not
        // come: a stall names the first trainer missing (COMM_STALL_SERVER), not "any rank".
        int missing = -1;
        for (int q = 0; held && q < T && missing < 0; q++)
            if (!sv.pq_n[q] && !done[q]) missing = q;
        if (missing >= 0) {
            char what[160];
            snprintf(what, sizeof what, "GRAD_PUSH from rank %d (trainer %d) of iteration %lld, which held requests "
                     "wait for", sv.first_trainer + missing, missing, (long long)sv.applied);
            rc = comm_probe_blame(sv.first_trainer + missing, what, &from, &tag, &len);
        } else {
            rc = comm_probe(COMM_ANY, COMM_ANY, &from, &tag, &len);
        }
        if (rc) break;
        const int p = from - sv.first_trainer;
        if (p < 0 || p >= T) {
            rc = bp_fail(BP_EFORMAT, "server %d: message (tag %d) from rank %d, which is not a trainer", s, tag, from);
            break;
        }
        size_t cap = tag == MSG_GRAD_PUSH ? sv.push_cap : sv.req_cap;
        if (tag != MSG_ROW_REQ && tag != MSG_GRAD_PUSH && tag != MSG_DUMP_REQ && tag != MSG_DONE) {
            rc = bp_fail(BP_EFORMAT, "server %d: unexpected message tag %d from rank %d", s, tag, from);
            break;
        }
        if (len > cap) {
            rc = bp_fail(BP_EFORMAT, "server %d: %s of %zu bytes from rank %d exceeds the %zu a batch allows", s,
                         msg_kind_name((uint32_t)tag), len, from, cap);
            break;
        }
        if ((tag == MSG_ROW_REQ || tag == MSG_DUMP_REQ) && sv.held[p]) {
            rc = bp_fail(BP_EFORMAT, "server %d: rank %d sent a second request before the first was answered", s,
                         from);
            break;
        }
        if (tag == MSG_GRAD_PUSH && sv.pq_n[p] == SERVER_PUSH_AHEAD) {
            rc = bp_fail(BP_EFORMAT, "server %d: rank %d pushed iteration %lld, %d ahead of the %lld applied", s, from,
                         (long long)sv.push_next[p], SERVER_PUSH_AHEAD, (long long)sv.applied);
            break;
        }
        void **slot = &sv.pq[(size_t)p * SERVER_PUSH_AHEAD + (sv.pq_head[p] + sv.pq_n[p]) % SERVER_PUSH_AHEAD];
        if (tag == MSG_GRAD_PUSH && !*slot) *slot = bp_xmalloc(sv.push_cap);
        void *buf = tag == MSG_GRAD_PUSH ? *slot : sv.req[p];
        if ((rc = comm_recv(buf, cap, from, tag, &len))) break;
        msg_header h;
        msg_expect ex = expect(&sv, (uint32_t)tag, tag == MSG_GRAD_PUSH ? (uint32_t)sv.L.E : 0);
        if (tag == MSG_GRAD_PUSH) ex.iter = sv.push_next[p];
        if (tag == MSG_DUMP_REQ || tag == MSG_DONE) ex.max_n = 0;
        if ((rc = msg_decode(buf, len, from, &ex, &h, NULL, NULL))) break;
        if (tag == MSG_DONE) {
            if (done[p]) {
                rc = bp_fail(BP_EFORMAT, "server %d: rank %d ended the run twice", s, from);
                break;
            }
            if ((rc = server_note_done(s, from, (int64_t)h.iter, sv.push_next[p], &done_at))) break;
            done[p] = 1, dones++;
        } else if (tag == MSG_GRAD_PUSH) {
            if ((rc = server_check_after_done(s, from, sv.push_next[p], done_at))) break;
            sv.pq_n[p]++, sv.push_next[p]++;
            rc = server_advance(&sv, &held);
        } else {
            if (tag == MSG_ROW_REQ && h.width != (uint32_t)sv.L.E && h.width != (uint32_t)sv.L.stride) {
                rc = bp_fail(BP_EFORMAT, "server %d: rank %d asks for rows of %u floats (%d or %d)", s, from, h.width,
                             sv.L.E, sv.L.stride);
                break;
            }
            if ((int64_t)h.iter == sv.applied || (tag == MSG_ROW_REQ && (int64_t)h.iter < sv.applied)) {
                rc = server_answer(&sv, p);
            } else if ((int64_t)h.iter > sv.applied) {
                sv.held[p] = 1, sv.req_iter[p] = (int64_t)h.iter, held++;
            } else {
                rc = bp_fail(BP_EFORMAT, "server %d: rank %d asks for iteration %llu, but %lld are applied", s, from,
                             (unsigned long long)h.iter, (long long)sv.applied);
            }
        }
    }
    for (int p = 0; !rc && p < T; p++)
        if (sv.pq_n[p])
            rc = bp_fail(BP_EFORMAT, "server %d: rank %d's pushes of iterations %lld.. were never matched by every "
                         "trainer's", s, sv.first_trainer + p, (long long)sv.applied);
    for (int p = 0; !rc && p < T; p++)
        if (sv.reply_busy[p]) rc = comm_wait(&sv.reply_req[p], NULL);
    free(done);
    if (rc && !strstr(bp_errmsg(rc), "server")) {
        char m[512];
        snprintf(m, sizeof m, "%s", bp_errmsg(rc));
        rc = bp_fail(rc, "server %d: %s", s, m);
    }
    server_free(&sv);
    return rc;
}
