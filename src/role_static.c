// role_static: a trainer of mode `static`, the FAE-style baseline (dist.h, msg.h).
//
// Start-up: every trainer counts the accesses of every key over the whole train split (the same
// data, the same counts on every trainer: no message needed) and pins the N most accessed rows
// (--static-rows N; 0: 1% of the rows, at least 1; never more than the rows accessed at all):
// by count descending, ties by key ascending.  The pinned rows are replicated on every trainer,
// initialised with emb_row_init; the servers keep every row (their copies of the pinned rows
// are never read nor updated).
//
// Iteration t, trainer i, slice [b0, b1):
//   1. unique keys of the slice; the pinned ones are read from the replica, the others are
//      fetched from the servers exactly as in sync (ROW_REQ(t) to every server, ROW_REPLY(t))
//   2. forward, BCE with scale 1/B, backward; dense all-reduce and step (as sync)
//   3. the coalesced row gradients: cold keys -> GRAD_PUSH(t) to their servers (as sync);
//      pinned keys -> one HOT_GRAD(t) to every other trainer; each trainer merges the T pinned
//      lists in trainer-rank order (first toucher copied, the later ones added in ascending
//      rank) and applies emb_opt_apply_row to its replica: every replica does the same float
//      operations on the same values, so replicas never diverge, and each row gets the update
//      the sync server would give it.  The model is sync's bit for bit.
// Collecting the model: trainer 0 dumps every server (DUMP_REQ, as sync), then writes its
// replica of the pinned rows over the servers' stale copies (the write-back).
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

#define HOT UINT32_MAX // u_srv of a pinned key

typedef struct {
    const train_setup *su;
    trainer tr;
    role_stats st;
    role_rows hot;        // the pinned rows (replica)
    uint64_t *hot_bits;   // (rows / 64 + 1) bit k: key k is pinned
    emb_grad gk;          // unique keys of the slice (rows unused, E = 1)
    emb_layout Lk;        // the row layout with E = 1, for gk
    float *zeros;         // (cap) zero "gradients" for gk
    int S, T, i, first_server, first_trainer, bmax;
    uint32_t cap;         // bmax * F: most keys in one message
    void **req, **reply, **push; // (S) server messages
    size_t req_cap, reply_cap, push_cap;
    void *hot_out;        // HOT_GRAD of this trainer
    void **hot_in;        // (T) HOT_GRAD of every other trainer
    size_t hot_cap;
    comm_req *rq;         // (2 S + 2 T)
    uint32_t *srv_n;      // (S) keys per server this iteration
    uint64_t **kout;      // (S)
    float **rout;         // (S)
    const float **rin;    // (S) rows of the replies
    uint32_t *u_srv, *u_pos; // (cap) per unique key: server (HOT: pinned) and position in its list
    const float **urow;   // (cap) per unique key: its row
    const float **erow;   // (cap) per (b, f) entry: its row
    const uint64_t **mk;  // (T) merge lists
    const float **mg;     // (T)
    uint32_t *mn, *cur;   // (T)
    float *sum;           // (E)
    float *ar_work;       // dense all-reduce scratch
    void *dump;           // trainer 0: dump receive buffer
    size_t dump_cap;
} ststate;

static int is_hot(const ststate *ss, uint64_t key) { return (int)((ss->hot_bits[key >> 6] >> (key & 63)) & 1); }

static int cmp_desc_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

// Counts the accesses of every key over the train split and picks the `want` most accessed
// (count descending, key ascending on ties; only keys accessed at least once).  *keys gets them
// ascending (malloc'd), *n their number, *share the share of the split's lookups they serve.
static int pick_hot(const train_setup *su, const emb_layout *L, int64_t want, uint64_t **keys, uint64_t *n,
                    double *share) {
    uint32_t *count = calloc(L->rows ? L->rows : 1, sizeof *count); // (rows)
    if (!count)
        return bp_fail(BP_ENOMEM, "--mode static: cannot allocate %llu access counters",
                       (unsigned long long)L->rows);
    const int F = L->F;
    const uint32_t *ids = su->ds->sparse;
    for (uint64_t r = su->tr0; r < su->tr1; r++)
        for (int f = 0; f < F; f++) {
            uint32_t *c = &count[emb_key(L, f, ids[r * F + f])];
            if (*c < UINT32_MAX) (*c)++;
        }
    uint64_t nz = 0;
    for (uint64_t k = 0; k < L->rows; k++) nz += count[k] != 0;
    uint64_t N = BP_MIN((uint64_t)want, nz);
    uint32_t thr = 0;
    uint64_t above = 0;
    if (N > 0) {
        uint32_t *v = malloc(nz * sizeof *v); // (nz) the non-zero counts
        if (!v) {
            free(count);
            return bp_fail(BP_ENOMEM, "--mode static: cannot allocate %llu counts", (unsigned long long)nz);
        }
        for (uint64_t k = 0, j = 0; k < L->rows; k++)
            if (count[k]) v[j++] = count[k];
        qsort(v, nz, sizeof *v, cmp_desc_u32);
        thr = v[N - 1];
        free(v);
        for (uint64_t k = 0; k < L->rows; k++) above += count[k] > thr;
    }
    uint64_t *out = bp_xmalloc((N ? N : 1) * sizeof *out), j = 0, ties = N - above;
    double hits = 0, total = (double)(su->tr1 - su->tr0) * F;
    for (uint64_t k = 0; k < L->rows && j < N; k++) {
        if (count[k] > thr || (count[k] == thr && ties > 0)) {
            if (count[k] == thr) ties--;
            out[j++] = k;
            hits += count[k];
        }
    }
    BP_ASSERT(j == N);
    free(count);
    *keys = out, *n = N, *share = total > 0 ? hits / total : 0;
    return 0;
}

static int st_init(ststate *ss, const train_setup *su, const dist_layout *l, int i) {
    memset(ss, 0, sizeof *ss);
    ss->su = su, ss->S = l->S, ss->T = l->T, ss->i = i;
    ss->first_server = dist_server_rank(l, 0), ss->first_trainer = dist_trainer_rank(l, 0);
    ss->bmax = (su->B + l->T - 1) / l->T;
    const int F = su->mc.F, E = su->mc.E, S = ss->S, T = ss->T;
    int rc = train_replica_init(&ss->tr, su, ss->bmax, i);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, su->seed, 0);
    model_init_params(&ss->tr.m, &rng); // the same draws on every trainer: identical replicas
    const emb_layout *L = &ss->tr.L;
    int64_t want = l->static_rows ? l->static_rows : (int64_t)BP_MAX((uint64_t)1, L->rows / 100);
    uint64_t *keys = NULL, n = 0;
    double share = 0;
    if ((rc = pick_hot(su, L, want, &keys, &n, &share))) return rc;
    if (n > MSG_MAX_N) {
        free(keys);
        return bp_fail(BP_EUSAGE, "--static-rows %lld: at most %d rows can be pinned", (long long)want, MSG_MAX_N);
    }
    if ((rc = role_rows_init(&ss->hot, L, keys, n, 1))) // the hottest rows: clustered
        return bp_fail(rc, "trainer %d: %llu pinned rows: %s", i, (unsigned long long)n, bp_errmsg(rc));
    if (su->ck.from[0] && // resuming: the pinned replica (trainer 0's part) and the dense replica
        ((rc = ckpt_run_load_rows(su, "trainer-0.bin", ss->hot.keys, ss->hot.rows, n, L->stride)) ||
         (rc = ckpt_run_load_dense(&ss->tr, su))))
        return rc;
    ss->hot_bits = bp_xcalloc(L->rows / 64 + 1, sizeof *ss->hot_bits);
    for (uint64_t j = 0; j < n; j++) ss->hot_bits[keys[j] >> 6] |= (uint64_t)1 << (keys[j] & 63);
    if (i == 0) {
        printf("static: %llu rows pinned on every trainer (%.2f%% of %llu rows; asked %lld), serving %.1f%% of the "
               "train split's lookups\n", (unsigned long long)n, 100.0 * (double)n / (double)L->rows,
               (unsigned long long)L->rows, (long long)want, 100.0 * share);
        fflush(stdout);
    }
    ss->cap = (uint32_t)(ss->bmax * F);
    if ((rc = emb_grad_init(&ss->gk, (int)ss->cap, 1))) return rc;
    ss->Lk = *L;
    ss->Lk.E = 1;
    ss->zeros = bp_xcalloc(ss->cap, sizeof(float));
    ss->req_cap = msg_bytes(MSG_ROW_REQ, ss->cap, 0);
    ss->reply_cap = msg_bytes(MSG_ROW_REPLY, ss->cap, (uint32_t)E);
    ss->push_cap = msg_bytes(MSG_GRAD_PUSH, ss->cap, (uint32_t)E);
    ss->hot_cap = msg_bytes(MSG_HOT_GRAD, ss->cap, (uint32_t)E);
    ss->req = bp_xcalloc((size_t)S, sizeof *ss->req);
    ss->reply = bp_xcalloc((size_t)S, sizeof *ss->reply);
    ss->push = bp_xcalloc((size_t)S, sizeof *ss->push);
    for (int s = 0; s < S; s++) {
        ss->req[s] = bp_xmalloc(ss->req_cap);
        ss->reply[s] = bp_xmalloc(ss->reply_cap);
        ss->push[s] = bp_xmalloc(ss->push_cap);
    }
    ss->hot_out = bp_xmalloc(ss->hot_cap);
    ss->hot_in = bp_xcalloc((size_t)T, sizeof *ss->hot_in);
    for (int p = 0; p < T; p++)
        if (p != i) ss->hot_in[p] = bp_xmalloc(ss->hot_cap);
    ss->rq = bp_xcalloc((size_t)2 * (S + T), sizeof *ss->rq);
    ss->srv_n = bp_xcalloc((size_t)S, sizeof *ss->srv_n);
    ss->kout = bp_xcalloc((size_t)S, sizeof *ss->kout);
    ss->rout = bp_xcalloc((size_t)S, sizeof *ss->rout);
    ss->rin = bp_xcalloc((size_t)S, sizeof *ss->rin);
    ss->u_srv = bp_xmalloc(ss->cap * sizeof *ss->u_srv);
    ss->u_pos = bp_xmalloc(ss->cap * sizeof *ss->u_pos);
    ss->urow = bp_xmalloc(ss->cap * sizeof *ss->urow);
    ss->erow = bp_xmalloc(ss->cap * sizeof *ss->erow);
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

static void st_free(ststate *ss) {
    for (int s = 0; ss->req && s < ss->S; s++) free(ss->req[s]), free(ss->reply[s]), free(ss->push[s]);
    for (int p = 0; ss->hot_in && p < ss->T; p++) free(ss->hot_in[p]);
    free(ss->req), free(ss->reply), free(ss->push), free(ss->hot_out), free(ss->hot_in), free(ss->rq);
    free(ss->srv_n), free(ss->kout), free(ss->rout), free(ss->rin), free(ss->u_srv), free(ss->u_pos);
    free(ss->urow), free(ss->erow), free(ss->mk), free(ss->mg), free(ss->mn), free(ss->cur), free(ss->sum);
    free(ss->ar_work), free(ss->dump), free(ss->zeros), free(ss->hot_bits);
    emb_grad_free(&ss->gk);
    role_rows_free(&ss->hot);
    trainer_free(&ss->tr);
    memset(ss, 0, sizeof *ss);
}

// Step 1: pinned rows from the replica, the others from the servers; fills erow.  ids: (Bi, F).
static int fetch_rows(void *ctx, int64_t t, const uint32_t *ids, int Bi) {
    ststate *ss = ctx;
    const emb_layout *L = &ss->tr.L;
    const int S = ss->S, F = L->F, E = L->E;
    emb_grad_coalesce(&ss->gk, &ss->Lk, ids, ss->zeros, Bi);
    const int U = ss->gk.n;
    const uint64_t *uk = ss->gk.keys; // (U) ascending
    memset(ss->srv_n, 0, (size_t)S * sizeof *ss->srv_n);
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_ROW_REQ, 0, (uint64_t)t, 0, (uint32_t)E};
        msg_encode(ss->req[s], &h, &ss->kout[s], NULL);
    }
    for (int u = 0; u < U; u++) {
        if (is_hot(ss, uk[u])) {
            int64_t slot = role_rows_slot(&ss->hot, uk[u]);
            BP_ASSERT(slot >= 0);
            ss->u_srv[u] = HOT, ss->urow[u] = role_rows_at(&ss->hot, slot);
            continue;
        }
        uint32_t s = msg_server_of(uk[u], S);
        ss->u_srv[u] = s, ss->u_pos[u] = ss->srv_n[s];
        ss->kout[s][ss->srv_n[s]++] = uk[u];
    }
    int rc = 0;
    for (int s = 0; s < S && !rc; s++) {
        bp_put_u32((uint8_t *)ss->req[s] + 16, ss->srv_n[s]); // n, now known
        rc = comm_irecv(ss->reply[s], ss->reply_cap, ss->first_server + s, MSG_ROW_REPLY, &ss->rq[s]);
        if (!rc)
            rc = comm_isend(ss->req[s], msg_bytes(MSG_ROW_REQ, ss->srv_n[s], 0), ss->first_server + s, MSG_ROW_REQ,
                            &ss->rq[S + s]);
    }
    for (int s = 0; s < S && !rc; s++) {
        size_t len = 0;
        if ((rc = comm_wait(&ss->rq[s], &len))) break;
        msg_expect ex = {.kind = MSG_ROW_REPLY, .width = (uint32_t)E, .max_n = ss->srv_n[s], .iter = t};
        msg_header h;
        if ((rc = msg_decode(ss->reply[s], len, ss->first_server + s, &ex, &h, NULL, &ss->rin[s]))) break;
        if (h.n != ss->srv_n[s])
            rc = bp_fail(BP_EFORMAT, "trainer %d: server rank %d answered %u rows for %u keys", ss->i,
                         ss->first_server + s, h.n, ss->srv_n[s]);
    }
    if (!rc) rc = comm_waitall(ss->rq + S, S);
    if (rc) return rc;
    for (int u = 0; u < U; u++)
        if (ss->u_srv[u] != HOT) ss->urow[u] = ss->rin[ss->u_srv[u]] + (size_t)ss->u_pos[u] * E;
    uint64_t hits = 0;
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
            hits += ss->u_srv[lo] == HOT;
        }
    ss->st.lookups += (uint64_t)Bi * F, ss->st.hot_hits += hits;
    return 0;
}

// Step 3: cold gradients to the servers, pinned ones to every trainer, and the replica's update.
static int push_grads(void *ctx, int64_t t) {
    ststate *ss = ctx;
    const emb_grad *g = &ss->tr.g;
    const emb_layout *L = &ss->tr.L;
    const int S = ss->S, T = ss->T, me = ss->i, E = g->E;
    uint32_t nh = 0;
    memset(ss->srv_n, 0, (size_t)S * sizeof *ss->srv_n);
    for (int k = 0; k < g->n; k++) {
        if (is_hot(ss, g->keys[k])) nh++;
        else ss->srv_n[msg_server_of(g->keys[k], S)]++;
    }
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_GRAD_PUSH, 0, (uint64_t)t, ss->srv_n[s], (uint32_t)E};
        msg_encode(ss->push[s], &h, &ss->kout[s], &ss->rout[s]);
    }
    msg_header hh = {MSG_HOT_GRAD, 0, (uint64_t)t, nh, (uint32_t)E};
    uint64_t *hk;
    float *hr;
    msg_encode(ss->hot_out, &hh, &hk, &hr);
    memset(ss->srv_n, 0, (size_t)S * sizeof *ss->srv_n);
    nh = 0;
    for (int k = 0; k < g->n; k++) {
        uint64_t *kd;
        float *rd;
        uint32_t j;
        if (is_hot(ss, g->keys[k])) {
            kd = hk, rd = hr, j = nh++;
        } else {
            uint32_t s = msg_server_of(g->keys[k], S);
            kd = ss->kout[s], rd = ss->rout[s], j = ss->srv_n[s]++;
        }
        kd[j] = g->keys[k];
        memcpy(rd + (size_t)j * E, g->rows + (size_t)k * E, (size_t)E * sizeof(float));
    }
    int rc = 0;
    comm_req *rq_push = ss->rq, *rq_hot_in = ss->rq + S, *rq_hot_out = ss->rq + S + T;
    for (int s = 0; s < S && !rc; s++)
        rc = comm_isend(ss->push[s], msg_bytes(MSG_GRAD_PUSH, ss->srv_n[s], (uint32_t)E), ss->first_server + s,
                        MSG_GRAD_PUSH, &rq_push[s]);
    const size_t hot_len = msg_bytes(MSG_HOT_GRAD, nh, (uint32_t)E);
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) continue;
        rc = comm_irecv(ss->hot_in[p], ss->hot_cap, ss->first_trainer + p, MSG_HOT_GRAD, &rq_hot_in[p]);
        if (!rc) rc = comm_isend(ss->hot_out, hot_len, ss->first_trainer + p, MSG_HOT_GRAD, &rq_hot_out[p]);
    }
    for (int p = 0; p < T && !rc; p++) {
        if (p == me) {
            ss->mk[p] = hk, ss->mg[p] = hr, ss->mn[p] = nh;
            continue;
        }
        const int from = ss->first_trainer + p;
        size_t len = 0;
        if ((rc = comm_wait(&rq_hot_in[p], &len))) break;
        msg_expect ex = {.kind = MSG_HOT_GRAD, .width = (uint32_t)E, .max_n = ss->cap, .iter = t, .rows = L->rows};
        msg_header h;
        if ((rc = msg_decode(ss->hot_in[p], len, from, &ex, &h, &ss->mk[p], &ss->mg[p]))) break;
        for (uint32_t k = 0; k < h.n && !rc; k++)
            if (!is_hot(ss, ss->mk[p][k]))
                rc = bp_fail(BP_EFORMAT, "trainer %d: HOT_GRAD from rank %d holds key %llu, which is not pinned", me,
                             from, (unsigned long long)ss->mk[p][k]);
        ss->mn[p] = h.n;
    }
    if (!rc) rc = comm_waitall(rq_push, S);
    for (int p = 0; p < T && !rc; p++)
        if (p != me) rc = comm_wait(&rq_hot_out[p], NULL);
    if (rc) return rc;
    const emb_opt eo = trainer_eopt_at(&ss->tr, t);
    role_merge_apply(&eo, &ss->hot, T, ss->mk, ss->mg, ss->mn, E, ss->cur, ss->sum);
    return 0;
}

// Trainer 0: every server's rows, then the pinned rows from the replica over them.
static int st_collect(void *ctx, int64_t iter) {
    ststate *ss = ctx;
    if (ss->i != 0) return 0;
    trainer *tr = &ss->tr;
    const emb_layout *L = &tr->L;
    int rc = 0;
    if (!tr->table.data && (rc = emb_table_alloc(&tr->table, L, 1))) return rc;
    const int S = ss->S;
    uint8_t (*reqbuf)[MSG_HEADER_BYTES] = bp_xcalloc((size_t)S, MSG_HEADER_BYTES); // (S) DUMP_REQ messages
    comm_req *rq = bp_xcalloc((size_t)S, sizeof *rq);
    for (int s = 0; s < S && !rc; s++) {
        msg_header h = {MSG_DUMP_REQ, 0, (uint64_t)iter, 0, 0};
        msg_encode(reqbuf[s], &h, NULL, NULL);
        rc = comm_isend(reqbuf[s], MSG_HEADER_BYTES, ss->first_server + s, MSG_DUMP_REQ, &rq[s]);
    }
    uint64_t total = 0;
    for (int s = 0; s < S && !rc; s++)
        rc = role_recv_rows(&tr->table, ss->dump, ss->dump_cap, ss->first_server + s, iter, s, S, &total);
    if (!rc) rc = comm_waitall(rq, S);
    free(reqbuf), free(rq);
    if (!rc && total != L->rows)
        rc = bp_fail(BP_EFORMAT, "trainer 0: the servers returned %llu rows, the tables have %llu",
                     (unsigned long long)total, (unsigned long long)L->rows);
    for (uint64_t j = 0; !rc && j < ss->hot.n; j++)
        memcpy(emb_table_row(&tr->table, ss->hot.keys[j]), role_rows_at(&ss->hot, (int64_t)j),
               (size_t)L->stride * sizeof(float));
    return rc;
}

static int st_finish(void *ctx, int64_t iters) {
    ststate *ss = ctx;
    const int S = ss->S;
    uint8_t (*buf)[MSG_HEADER_BYTES] = bp_xcalloc((size_t)S, MSG_HEADER_BYTES); // (S) DONE messages
    comm_req *rq = bp_xcalloc((size_t)S, sizeof *rq);
    int rc = 0;
    for (int s = 0; s < S && !rc; s++) {
        msg_header h = {MSG_DONE, 0, (uint64_t)iters, 0, 0};
        msg_encode(buf[s], &h, NULL, NULL);
        rc = comm_isend(buf[s], MSG_HEADER_BYTES, ss->first_server + s, MSG_DONE, &rq[s]);
    }
    if (!rc) rc = comm_waitall(rq, S);
    free(buf), free(rq);
    return rc;
}

// Checkpoint `iter` (ckpt_run.h), trainer 0 only (the replicas are identical): the servers write
// their shards (their copies of pinned rows are stale and overridden on loading), trainer 0 the
// dense part and the pinned replica as trainer-0.bin, then the manifest.
static int st_checkpoint(void *ctx, int64_t iter) {
    ststate *ss = ctx;
    if (ss->i != 0) return 0;
    const train_setup *su = ss->su;
    const int S = ss->S;
    const role_rows *r = &ss->hot;
    char dir[4096] = "";
    int own = ckpt_run_begin(su, iter, dir, sizeof dir);
    if (own) return own; // no server was asked
    uint8_t (*reqbuf)[MSG_HEADER_BYTES] = bp_xcalloc((size_t)S, MSG_HEADER_BYTES); // (S) DUMP_REQ messages
    comm_req *rq = bp_xcalloc((size_t)S, sizeof *rq);
    ckpt_file *files = bp_xmalloc((size_t)(S + 2) * sizeof *files);
    int rc = role_ckpt_ask_servers(iter, S, ss->first_server, rq, reqbuf);
    if (!rc) {
        own = ckpt_run_write_dense(&ss->tr, dir, &files[0]); // while the servers write theirs
        if (!own) own = ckpt_run_write_rows(su, iter, 0, r->keys, r->rows, r->n, r->stride, &files[1]);
        rc = role_ckpt_commit(su, &ss->tr, iter, dir, files, 2, S, ss->first_server, ss->T, ss->first_trainer, 0, own);
    }
    int wrc = comm_waitall(rq, S);
    free(reqbuf), free(rq), free(files);
    return rc ? rc : wrc;
}

int role_static_run(const train_setup *su, const dist_layout *l, int i) {
    BP_ASSERT(l->S > 0);
    openblas_set_num_threads(su->threads);
    ststate *ss = bp_xcalloc(1, sizeof *ss);
    int rc = st_init(ss, su, l, i);
    if (!rc) {
        role_loop rl = {.mode = "static", .ctx = ss, .tr = &ss->tr, .st = &ss->st, .S = l->S, .T = l->T, .i = i,
                        .first_trainer = ss->first_trainer, .report_hits = 1, .fetch = fetch_rows, .sync = push_grads,
                        .erow = (const float *const *)ss->erow, .ar_work = ss->ar_work,
                        .collect = st_collect, .finish = st_finish, .checkpoint = st_checkpoint};
        rc = role_loop_run(su, &rl);
    }
    st_free(ss);
    free(ss);
    return rc;
}
