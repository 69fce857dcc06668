// role_sharded: a trainer of mode `sharded`, the TorchRec-style model-parallel baseline (dist.h,
// msg.h).  There are no server ranks (S = 0): trainer i of T owns the rows of the keys k with
// msg_server_of(k, T) == i (bp_mix64(k) % T), with their optimizer state, initialised with
// emb_row_init like every other holder of a row.
//
// Iteration t, trainer i, slice [b0, b1) of global batch t:
//   1. rows all-to-all: the slice's unique keys (ascending) split by owner; ROW_REQ(t) to every
//      other trainer (an empty one too), answer every peer's ROW_REQ(t) from the shard with a
//      ROW_REPLY(t) (model floats only), wait for the replies; the own keys are read in place
//   2. forward, BCE with scale 1/B, backward (as sync)
//   3. deterministic all-reduce of the dense gradients and the loss; the same dense step everywhere
//   4. gradient all-to-all: the coalesced row gradients split by owner, GRAD_PUSH(t) to every other
//      trainer; the owner merges the T partial lists in trainer-rank order (the first trainer
//      that touched a key is copied, the later ones added in ascending rank), then
//      emb_opt_apply_row: the server's rule of mode sync, so the model is sync's bit for bit
// No rank reads a row of iteration t + 1 before its owner has applied iteration t: the owner
// answers ROW_REQ(t + 1) only in its own iteration t + 1, after step 4 of t.
//
// Collecting the model (evaluation, --save): every trainer but 0 sends its shard to trainer 0
// as DUMP_ROWS chunks (unrequested: every trainer knows when); trainer 0 checks ownership and
// that every row arrived.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "emb.h"
#include "msg.h"
#include "optim.h"
#include "role_loop.h"
#include "train.h"

typedef struct {
    const train_setup *su;
    trainer tr;
    role_stats st;
    role_rows shard;      // the owned rows
    emb_grad gk;          // unique keys of the slice (rows unused, E = 1)
    emb_layout Lk;        // the row layout with E = 1, for gk
    float *zeros;         // (cap) zero "gradients" for gk
    int T, i, first_trainer, bmax;
    uint32_t cap;         // bmax * F: most keys in one message
    // per peer p (own index unused)
    void **req_out, **req_in, **reply_out, **reply_in, **push_out, **push_in;
    size_t req_cap, reply_cap, push_cap;
    comm_req *rq;         // (4 T) receives [0, 2T), sends [2T, 4T)
    uint32_t *own_n;      // (T) keys per owner this iteration
    uint64_t **kout;      // (T) key arrays of the messages being built
    float **rout;         // (T) row arrays of the messages being built
    const float **rin;    // (T) rows of the replies
    uint32_t *u_own, *u_pos; // (cap) per unique key: owner and position in its list
    const float **urow;   // (cap) per unique key: its row
    const float **erow;   // (cap) per (b, f) entry: its row
    uint64_t *mine_keys;  // (cap) own partial gradient: keys
    float *mine_grads;    // (cap, E) and rows
    const uint64_t **mk;  // (T) merge lists
    const float **mg;     // (T)
    uint32_t *mn, *cur;   // (T)
    float *sum;           // (E)
    float *ar_work;       // dense all-reduce scratch
    void *dump;           // trainer 0: dump receive buffer
    size_t dump_cap;
} sstate;

static int rank_of(const sstate *ss, int p) { return ss->first_trainer + p; }

static int ss_init(sstate *ss, const train_setup *su, const dist_layout *l, int i) {
    memset(ss, 0, sizeof *ss);
    ss->su = su, ss->T = l->T, ss->i = i, ss->first_trainer = dist_trainer_rank(l, 0);
    ss->bmax = (su->B + l->T - 1) / l->T;
    const int F = su->mc.F, E = su->mc.E, T = ss->T;
    int rc = train_replica_init(&ss->tr, su, ss->bmax, i);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, su->seed, 0);
    model_init_params(&ss->tr.m, &rng); // the same draws on every trainer: identical replicas
    const emb_layout *L = &ss->tr.L;
    uint64_t n = 0;
    for (uint64_t k = 0; k < L->rows; k++) n += msg_server_of(k, T) == (uint32_t)i;
    uint64_t *keys = bp_xmalloc((n ? n : 1) * sizeof *keys), j = 0;
    for (uint64_t k = 0; k < L->rows; k++)
        if (msg_server_of(k, T) == (uint32_t)i) keys[j++] = k;
    if ((rc = role_rows_init(&ss->shard, L, keys, n, T)))
        return bp_fail(rc, "trainer %d: shard of %llu rows: %s", i, (unsigned long long)n, bp_errmsg(rc));
    if (su->ck.from[0]) { // resuming: the shard and the dense replica of the checkpoint
        char name[CKPT_NAME_MAX];
        snprintf(name, sizeof name, "trainer-%d.bin", i);
        if ((rc = ckpt_run_load_rows(su, name, ss->shard.keys, ss->shard.rows, n, L->stride)) ||
            (rc = ckpt_run_load_dense(&ss->tr, su)))
            return rc;
    }
    ss->cap = (uint32_t)(ss->bmax * F);
    if ((rc = emb_grad_init(&ss->gk, (int)ss->cap, 1))) return rc;
    ss->Lk = *L;
    ss->Lk.E = 1;
    ss->zeros = bp_xcalloc(ss->cap, sizeof(float));
    ss->req_cap = msg_bytes(MSG_ROW_REQ, ss->cap, 0);
    ss->reply_cap = msg_bytes(MSG_ROW_REPLY, ss->cap, (uint32_t)E);
    ss->push_cap = msg_bytes(MSG_GRAD_PUSH, ss->cap, (uint32_t)E);
    void ***bufs[6] = {&ss->req_out, &ss->req_in, &ss->reply_out, &ss->reply_in, &ss->push_out, &ss->push_in};
    const size_t caps[6] = {ss->req_cap, ss->req_cap, ss->reply_cap, ss->reply_cap, ss->push_cap, ss->push_cap};
    for (int b = 0; b < 6; b++) {
        *bufs[b] = bp_xcalloc((size_t)T, sizeof(void *));
        for (int p = 0; p < T; p++)
            if (p != i) (*bufs[b])[p] = bp_xmalloc(caps[b]);
    }
    ss->rq = bp_xcalloc((size_t)4 * T, sizeof *ss->rq);
    ss->own_n = bp_xcalloc((size_t)T, sizeof *ss->own_n);
    ss->kout = bp_xcalloc((size_t)T, sizeof *ss->kout);
    ss->rout = bp_xcalloc((size_t)T, sizeof *ss->rout);
    ss->rin = bp_xcalloc((size_t)T, sizeof *ss->rin);
    ss->u_own = bp_xmalloc(ss->cap * sizeof *ss->u_own);
    ss->u_pos = bp_xmalloc(ss->cap * sizeof *ss->u_pos);
    ss->urow = bp_xmalloc(ss->cap * sizeof *ss->urow);
    ss->erow = bp_xmalloc(ss->cap * sizeof *ss->erow);
    ss->mine_keys = bp_xmalloc(ss->cap * sizeof *ss->mine_keys);
    ss->mine_grads = bp_xmalloc((size_t)ss->cap * E * sizeof(float));
    ss->mk = bp_xcalloc((size_t)T, sizeof *ss->mk);
    ss->mg = bp_xcalloc((size_t)T, sizeof *ss->mg);
    ss->mn = bp_xcalloc((size_t)T, sizeof *ss->mn);
    ss->cur = bp_xcalloc((size_t)T, sizeof *ss->cur);
    ss->sum = bp_xmalloc((size_t)E * sizeof(float));
    const size_t np = ss->tr.m.n_params;
    ss->ar_work = bp_xmalloc((size_t)T * ((np + (size_t)T - 1) / (size_t)T + 1) * sizeof(float));
    if (i == 0 && dist_gathers(su)) {
        ss->dump_cap = role_dump_cap(L);
        ss->dump = bp_xmalloc(ss->dump_cap);
    }
    return 0;
}

static void ss_free(sstate *ss) {
    void **bufs[6] = {ss->req_out, ss->req_in, ss->reply_out, ss->reply_in, ss->push_out, ss->push_in};
    for (int b = 0; b < 6; b++) {
        for (int p = 0; bufs[b] && p < ss->T; p++) free(bufs[b][p]);
        free(bufs[b]);
    }
    free(ss->rq), free(ss->own_n), free(ss->kout), free(ss->rout), free(ss->rin), free(ss->u_own), free(ss->u_pos);
    free(ss->urow), free(ss->erow), free(ss->mine_keys), free(ss->mine_grads), free(ss->mk), free(ss->mg);
    free(ss->mn), free(ss->cur), free(ss->sum), free(ss->ar_work), free(ss->dump), free(ss->zeros);
    emb_grad_free(&ss->gk);
    role_rows_free(&ss->shard);
    trainer_free(&ss->tr);
    memset(ss, 0, sizeof *ss);
}

// Waits for the sends of requests [2T, 4T) of every peer.
static int wait_sends(sstate *ss, int first, int count) {
    int rc = 0;
    for (int p = 0; p < ss->T && !rc; p++)
        if (p != ss->i)
            for (int c = 0; c < count && !rc; c++) rc = comm_wait(&ss->rq[(first + c) * ss->T + p], NULL);
    return rc;
}

// Step 1: the rows all-to-all; fills erow.  ids: (Bi, F).
static int fetch_rows(void *ctx, int64_t t, const uint32_t *ids, int Bi) {
    sstate *ss = ctx;
    const emb_layout *L = &ss->tr.L;
    const int T = ss->T, me = ss->i, F = L->F, E = L->E;
    ss->st.lookups += (uint64_t)Bi * F;
    emb_grad_coalesce(&ss->gk, &ss->Lk, ids, ss->zeros, Bi);
    const int U = ss->gk.n;
    const uint64_t *uk = ss->gk.keys; // (U) ascending
    memset(ss->own_n, 0, (size_t)T * sizeof *ss->own_n);
    for (int p = 0; p < T; p++)
        if (p != me) {
            msg_header h = {MSG_ROW_REQ, 0, (uint64_t)t, 0, (uint32_t)E};
            msg_encode(ss->req_out[p], &h, &ss->kout[p], NULL);
        }
    for (int u = 0; u < U; u++) {
        uint32_t o = msg_server_of(uk[u], T);
        ss->u_own[u] = o, ss->u_pos[u] = ss->own_n[o]++;
        if ((int)o != me) ss->kout[o][ss->u_pos[u]] = uk[u];
    }
    int rc = 0;
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) continue;
        bp_put_u32((uint8_t *)ss->req_out[p] + 16, ss->own_n[p]); // n, now known
        rc = comm_irecv(ss->req_in[p], ss->req_cap, rank_of(ss, p), MSG_ROW_REQ, &ss->rq[p]);
        if (!rc) rc = comm_irecv(ss->reply_in[p], ss->reply_cap, rank_of(ss, p), MSG_ROW_REPLY, &ss->rq[T + p]);
        if (!rc)
            rc = comm_isend(ss->req_out[p], msg_bytes(MSG_ROW_REQ, ss->own_n[p], 0), rank_of(ss, p), MSG_ROW_REQ,
                            &ss->rq[2 * T + p]);
    }
    // Answer every peer from the shard.
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) continue;
        size_t len = 0;
        if ((rc = comm_wait(&ss->rq[p], &len))) break;
        msg_expect ex = {.kind = MSG_ROW_REQ, .max_n = ss->cap, .iter = t, .rows = L->rows, .server = me, .S = T};
        msg_header h;
        const uint64_t *keys;
        if ((rc = msg_decode(ss->req_in[p], len, rank_of(ss, p), &ex, &h, &keys, NULL))) break;
        if (h.width != (uint32_t)E) {
            rc = bp_fail(BP_EFORMAT, "trainer %d: rank %d asks for rows of %u floats (%d)", me, rank_of(ss, p),
                         h.width, E);
            break;
        }
        msg_header r = {MSG_ROW_REPLY, 0, (uint64_t)t, h.n, (uint32_t)E};
        float *out;
        msg_encode(ss->reply_out[p], &r, NULL, &out);
        for (uint32_t k = 0; k < h.n; k++) {
            int64_t slot = role_rows_slot(&ss->shard, keys[k]);
            BP_ASSERT(slot >= 0); // ownership was checked, and the shard holds every owned key
            memcpy(out + (size_t)k * E, role_rows_at(&ss->shard, slot), (size_t)E * sizeof(float));
        }
        rc = comm_isend(ss->reply_out[p], msg_bytes(MSG_ROW_REPLY, h.n, (uint32_t)E), rank_of(ss, p),
                        MSG_ROW_REPLY, &ss->rq[3 * T + p]);
    }
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) continue;
        size_t len = 0;
        if ((rc = comm_wait(&ss->rq[T + p], &len))) break;
        msg_expect ex = {.kind = MSG_ROW_REPLY, .width = (uint32_t)E, .max_n = ss->own_n[p], .iter = t};
        msg_header h;
        if ((rc = msg_decode(ss->reply_in[p], len, rank_of(ss, p), &ex, &h, NULL, &ss->rin[p]))) break;
        if (h.n != ss->own_n[p])
            rc = bp_fail(BP_EFORMAT, "trainer %d: rank %d answered %u rows for %u keys", me, rank_of(ss, p), h.n,
                         ss->own_n[p]);
    }
    if (!rc) rc = wait_sends(ss, 2, 2);
    if (rc) return rc;
    for (int u = 0; u < U; u++) {
        if ((int)ss->u_own[u] == me) {
            int64_t slot = role_rows_slot(&ss->shard, uk[u]);
            BP_ASSERT(slot >= 0);
            ss->urow[u] = role_rows_at(&ss->shard, slot);
        } else {
            ss->urow[u] = ss->rin[ss->u_own[u]] + (size_t)ss->u_pos[u] * E;
        }
    }
    // Each (b, f) entry's row: its key's position among the unique keys (binary search).
    for (int b = 0, e = 0; b < Bi; b++)
        for (int f = 0; f < F; f++, e++) {
            uint64_t key = emb_key(L, f, ids[e]);
            int lo = 0, hi = U;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (uk[mid] < key) lo = mid + 1;
                else hi = mid;
            }
            BP_ASSERT(lo < U && uk[lo] == key);
            ss->erow[e] = ss->urow[lo];
        }
    return 0;
}

// Step 4: the gradient all-to-all and the owner's update of its shard.
static int exchange_grads(void *ctx, int64_t t) {
    sstate *ss = ctx;
    const emb_grad *g = &ss->tr.g;
    const emb_layout *L = &ss->tr.L;
    const int T = ss->T, me = ss->i, E = g->E;
    memset(ss->own_n, 0, (size_t)T * sizeof *ss->own_n);
    for (int k = 0; k < g->n; k++) ss->own_n[msg_server_of(g->keys[k], T)]++;
    for (int p = 0; p < T; p++)
        if (p != me) {
            msg_header h = {MSG_GRAD_PUSH, 0, (uint64_t)t, ss->own_n[p], (uint32_t)E};
            msg_encode(ss->push_out[p], &h, &ss->kout[p], &ss->rout[p]);
        }
    memset(ss->own_n, 0, (size_t)T * sizeof *ss->own_n);
    for (int k = 0; k < g->n; k++) {
        uint32_t o = msg_server_of(g->keys[k], T), j = ss->own_n[o]++;
        uint64_t *kd = (int)o == me ? ss->mine_keys : ss->kout[o];
        float *rd = (int)o == me ? ss->mine_grads : ss->rout[o];
        kd[j] = g->keys[k];
        memcpy(rd + (size_t)j * E, g->rows + (size_t)k * E, (size_t)E * sizeof(float));
    }
    int rc = 0;
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) continue;
        rc = comm_irecv(ss->push_in[p], ss->push_cap, rank_of(ss, p), MSG_GRAD_PUSH, &ss->rq[p]);
        if (!rc)
            rc = comm_isend(ss->push_out[p], msg_bytes(MSG_GRAD_PUSH, ss->own_n[p], (uint32_t)E), rank_of(ss, p),
                            MSG_GRAD_PUSH, &ss->rq[2 * T + p]);
    }
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) {
            ss->mk[p] = ss->mine_keys, ss->mg[p] = ss->mine_grads, ss->mn[p] = ss->own_n[me];
            continue;
        }
        size_t len = 0;
        if ((rc = comm_wait(&ss->rq[p], &len))) break;
        msg_expect ex = {.kind = MSG_GRAD_PUSH, .width = (uint32_t)E, .max_n = ss->cap, .iter = t, .rows = L->rows,
                         .server = me, .S = T};
        msg_header h;
        if ((rc = msg_decode(ss->push_in[p], len, rank_of(ss, p), &ex, &h, &ss->mk[p], &ss->mg[p]))) break;
        ss->mn[p] = h.n;
    }
    if (!rc) rc = wait_sends(ss, 2, 1);
    if (rc) return rc;
    const emb_opt eo = trainer_eopt_at(&ss->tr, t);
    role_merge_apply(&eo, &ss->shard, T, ss->mk, ss->mg, ss->mn, E, ss->cur, ss->sum);
    return 0;
}

// Every shard to trainer 0's table after `iter` iterations.
static int ss_collect(void *ctx, int64_t iter) {
    sstate *ss = ctx;
    if (ss->i != 0) return role_send_rows(&ss->shard, rank_of(ss, 0), iter);
    trainer *tr = &ss->tr;
    const emb_layout *L = &tr->L;
    int rc = 0;
    if (!tr->table.data && (rc = emb_table_alloc(&tr->table, L, 1))) return rc;
    for (uint64_t j = 0; j < ss->shard.n; j++)
        memcpy(emb_table_row(&tr->table, ss->shard.keys[j]), role_rows_at(&ss->shard, (int64_t)j),
               (size_t)L->stride * sizeof(float));
    uint64_t total = ss->shard.n;
    for (int p = 1; p < ss->T && !rc; p++)
        rc = role_recv_rows(&tr->table, ss->dump, ss->dump_cap, rank_of(ss, p), iter, p, ss->T, &total);
    if (!rc && total != L->rows)
        rc = bp_fail(BP_EFORMAT, "trainer 0: the trainers' shards hold %llu rows, the tables have %llu",
                     (unsigned long long)total, (unsigned long long)L->rows);
    return rc;
}

// Checkpoint `iter` (ckpt_run.h): every trainer writes its shard as trainer-<i>.bin (the shard is
// the rows' home); trainer 0 also the dense part, then the manifest once every part is reported.
static int ss_checkpoint(void *ctx, int64_t iter) {
    sstate *ss = ctx;
    const train_setup *su = ss->su;
    const role_rows *r = &ss->shard;
    if (ss->i != 0) {
        ckpt_file f;
        int wrc = ckpt_run_write_rows(su, iter, ss->i, r->keys, r->rows, r->n, r->stride, &f);
        if (wrc) fprintf(stderr, "bagpipe: trainer %d: checkpoint %lld: %s\n", ss->i, (long long)iter, bp_errmsg(wrc));
        else ckpt_test_kill_point(comm_rank(), iter);
        return ckpt_run_report(rank_of(ss, 0), iter, wrc, &f);
    }
    char dir[4096] = "";
    ckpt_file *files = bp_xmalloc((size_t)(ss->T + 1) * sizeof *files);
    int own = ckpt_run_begin(su, iter, dir, sizeof dir);
    if (!own) own = ckpt_run_write_dense(&ss->tr, dir, &files[0]);
    if (!own) own = ckpt_run_write_rows(su, iter, 0, r->keys, r->rows, r->n, r->stride, &files[1]);
    int rc = role_ckpt_commit(su, &ss->tr, iter, dir, files, 2, 0, 0, ss->T, ss->first_trainer, 1, own);
    free(files);
    return rc;
}

int role_sharded_run(const train_setup *su, const dist_layout *l, int i) {
    BP_ASSERT(l->S == 0);
    openblas_set_num_threads(su->threads);
    sstate *ss = bp_xcalloc(1, sizeof *ss);
    int rc = ss_init(ss, su, l, i);
    if (!rc) {
        role_loop rl = {.mode = "sharded", .ctx = ss, .tr = &ss->tr, .st = &ss->st, .S = 0, .T = l->T, .i = i,
                        .first_trainer = ss->first_trainer, .fetch = fetch_rows, .sync = exchange_grads,
                        .erow = (const float *const *)ss->erow, .ar_work = ss->ar_work, .collect = ss_collect,
                        .checkpoint = ss_checkpoint};
        rc = role_loop_run(su, &rl);
    }
    ss_free(ss);
    free(ss);
    return rc;
}
