// role_trainer: a trainer of mode `sync` (dist.h, msg.h).
//
// Iteration t, trainer i of T, slice [b0, b1) of global batch t (Bi = b1 - b0 samples):
//   1. unique keys of the slice (ascending), split by owning server; ROW_REQ(t) to every server
//      (an empty one too: the message says "nothing this time"), wait for every ROW_REPLY(t)
//   2. gather the slice's rows from the replies into emb (Bi, F, E); forward; BCE with scale
//      1/B (B global); backward
//   3. deterministic all-reduce of the dense gradients and of the loss (comm.h); the same dense
//      optimizer step on every trainer, so the replicas stay bit-identical
//   4. coalesce the row gradients (emb_grad_coalesce), split by server, GRAD_PUSH(t) to every
//      server
// Trainer 0 is the writer: it collects every row from the servers (DUMP_REQ) for evaluation and
// --save, prints the result lines and writes the metrics file.
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "emb.h"
#include "jsonl.h"
#include "metric.h"
#include "model.h"
#include "msg.h"
#include "optim.h"
#include "progress.h"
#include "role_loop.h"
#include "train.h"

typedef struct {
    const train_setup *su;
    trainer tr;
    int64_t stop_before_push; // test hook: trainer 0 stops (SIGSTOP) before its push of this iteration
    emb_grad gk;         // unique keys of the slice (rows unused, E = 1)
    emb_layout Lk;       // the row layout with E = 1, for gk
    float *zeros;        // (cap) zero "gradients" for gk
    int S, T, i, me, first_server, first_trainer;
    int bmax;            // most samples in one slice
    uint32_t cap;        // bmax * F: most keys in one message
    void **req, **reply, **push; // (S) message buffers
    size_t req_cap, reply_cap, push_cap;
    comm_req *rq;        // (2 S) requests in flight
    uint32_t *srv_n;     // (S) keys per server this iteration
    uint32_t *u_srv, *u_pos; // (cap) per unique key: owning server and position in its list
    const float **erow;  // (cap) per (b, f) entry: its row in a reply
    float *ar_work;      // all-reduce scratch
    size_t ar_work_n;
    void *dump;          // dump receive buffer
    size_t dump_cap;
    // timings of the current window (seconds)
    double t_wait, t_sync, t_ar, t_compute;
} tstate;

static int ts_init(tstate *ts, const train_setup *su, const dist_layout *l, int i) {
    memset(ts, 0, sizeof *ts);
    ts->su = su, ts->S = l->S, ts->T = l->T, ts->i = i, ts->me = dist_trainer_rank(l, i);
    ts->first_server = dist_server_rank(l, 0), ts->first_trainer = dist_trainer_rank(l, 0);
    ts->bmax = (su->B + l->T - 1) / l->T;
    const int F = su->mc.F, E = su->mc.E;
    int rc = train_replica_init(&ts->tr, su, ts->bmax, i);
    if (rc) return rc;
    bp_rng rng;
    bp_rng_seed(&rng, su->seed, 0);
    model_init_params(&ts->tr.m, &rng); // the same draws on every trainer: identical replicas
    if (su->ck.from[0] && (rc = ckpt_run_load_dense(&ts->tr, su))) return rc; // resuming: every replica
    ts->cap = (uint32_t)(ts->bmax * F);
    if ((rc = emb_grad_init(&ts->gk, (int)ts->cap, 1))) return rc;
    ts->Lk = ts->tr.L;
    ts->Lk.E = 1;
    ts->zeros = bp_xcalloc(ts->cap, sizeof(float));
    const int S = ts->S;
    ts->req_cap = msg_bytes(MSG_ROW_REQ, ts->cap, 0);
    ts->reply_cap = msg_bytes(MSG_ROW_REPLY, ts->cap, (uint32_t)E);
    ts->push_cap = msg_bytes(MSG_GRAD_PUSH, ts->cap, (uint32_t)E);
    ts->req = bp_xcalloc((size_t)S, sizeof *ts->req);
    ts->reply = bp_xcalloc((size_t)S, sizeof *ts->reply);
    ts->push = bp_xcalloc((size_t)S, sizeof *ts->push);
    for (int s = 0; s < S; s++) {
        ts->req[s] = bp_xmalloc(ts->req_cap);
        ts->reply[s] = bp_xmalloc(ts->reply_cap);
        ts->push[s] = bp_xmalloc(ts->push_cap);
    }
    ts->rq = bp_xcalloc((size_t)2 * S, sizeof *ts->rq);
    ts->srv_n = bp_xcalloc((size_t)S, sizeof *ts->srv_n);
    ts->u_srv = bp_xmalloc(ts->cap * sizeof *ts->u_srv);
    ts->u_pos = bp_xmalloc(ts->cap * sizeof *ts->u_pos);
    ts->erow = bp_xmalloc(ts->cap * sizeof *ts->erow);
    const size_t n = ts->tr.m.n_params;
    ts->ar_work_n = (size_t)ts->T * ((n + (size_t)ts->T - 1) / (size_t)ts->T + 1);
    ts->ar_work = bp_xmalloc(ts->ar_work_n * sizeof(float));
    const char *stop = getenv("BAGPIPE_TEST_STOP_BEFORE_PUSH"); // tests/test_dist.c
    ts->stop_before_push = stop && *stop && i == 0 ? atoll(stop) : -1;
    if (i == 0 && dist_gathers(su)) {
        ts->dump_cap = role_dump_cap(&ts->tr.L);
        ts->dump = bp_xmalloc(ts->dump_cap);
    }
    return 0;
}

static void ts_free(tstate *ts) {
    for (int s = 0; ts->req && s < ts->S; s++) free(ts->req[s]), free(ts->reply[s]), free(ts->push[s]);
    free(ts->req), free(ts->reply), free(ts->push), free(ts->rq), free(ts->srv_n);
    free(ts->u_srv), free(ts->u_pos), free(ts->erow), free(ts->ar_work), free(ts->dump), free(ts->zeros);
    emb_grad_free(&ts->gk);
    trainer_free(&ts->tr);
    memset(ts, 0, sizeof *ts);
}

// Step 1: fetch the slice's rows; fills erow.  ids: (Bi, F).
static int fetch_rows(tstate *ts, int64_t t, const uint32_t *ids, int Bi) {
    const emb_layout *L = &ts->tr.L;
    const int S = ts->S, F = L->F, E = L->E;
    emb_grad_coalesce(&ts->gk, &ts->Lk, ids, ts->zeros, Bi);
    const int U = ts->gk.n;
    const uint64_t *uk = ts->gk.keys; // (U) ascending
    memset(ts->srv_n, 0, (size_t)S * sizeof *ts->srv_n);
    uint64_t *kout[1024];
    BP_ASSERT(S <= 1024);
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_ROW_REQ, 0, (uint64_t)t, 0, (uint32_t)E};
        msg_encode(ts->req[s], &h, &kout[s], NULL);
    }
    for (int u = 0; u < U; u++) {
        uint32_t s = msg_server_of(uk[u], S);
        ts->u_srv[u] = s, ts->u_pos[u] = ts->srv_n[s];
        kout[s][ts->srv_n[s]++] = uk[u];
    }
    int rc = 0, nr = 0;
    for (int s = 0; s < S && !rc; s++) {
        bp_put_u32((uint8_t *)ts->req[s] + 16, ts->srv_n[s]); // n, now known
        rc = comm_irecv(ts->reply[s], ts->reply_cap, ts->first_server + s, MSG_ROW_REPLY, &ts->rq[nr++]);
    }
    for (int s = 0; s < S && !rc; s++)
        rc = comm_isend(ts->req[s], msg_bytes(MSG_ROW_REQ, ts->srv_n[s], 0), ts->first_server + s, MSG_ROW_REQ,
                        &ts->rq[nr++]);
    const float *rows[1024];
    for (int q = 0; q < nr && !rc; q++) {
        size_t len = 0;
        if ((rc = comm_wait(&ts->rq[q], &len))) break;
        if (q >= S) continue; // a send
        msg_expect ex = {.kind = MSG_ROW_REPLY, .width = (uint32_t)E, .max_n = ts->srv_n[q], .iter = t};
        msg_header h;
        if ((rc = msg_decode(ts->reply[q], len, ts->first_server + q, &ex, &h, NULL, &rows[q]))) break;
        if (h.n != ts->srv_n[q])
            rc = bp_fail(BP_EFORMAT, "trainer %d: server rank %d answered %u rows for %u keys", ts->i,
                         ts->first_server + q, h.n, ts->srv_n[q]);
    }
    if (rc) return rc;
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
            ts->erow[e] = rows[ts->u_srv[lo]] + (size_t)ts->u_pos[lo] * E;
        }
    return 0;
}

// Step 4: push the coalesced row gradients (tr.g) to their servers.
static int push_grads(tstate *ts, int64_t t) {
    const emb_grad *g = &ts->tr.g;
    const int S = ts->S, E = g->E;
    uint64_t *kout[1024];
    float *rout[1024];
    memset(ts->srv_n, 0, (size_t)S * sizeof *ts->srv_n);
    for (int k = 0; k < g->n; k++) ts->srv_n[msg_server_of(g->keys[k], S)]++;
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_GRAD_PUSH, 0, (uint64_t)t, ts->srv_n[s], (uint32_t)E};
        msg_encode(ts->push[s], &h, &kout[s], &rout[s]);
    }
    memset(ts->srv_n, 0, (size_t)S * sizeof *ts->srv_n);
    for (int k = 0; k < g->n; k++) {
        uint32_t s = msg_server_of(g->keys[k], S), j = ts->srv_n[s]++;
        kout[s][j] = g->keys[k];
        memcpy(rout[s] + (size_t)j * E, g->rows + (size_t)k * E, (size_t)E * sizeof(float));
    }
    int rc = 0;
    for (int s = 0; s < S && !rc; s++)
        rc = comm_isend(ts->push[s], msg_bytes(MSG_GRAD_PUSH, ts->srv_n[s], (uint32_t)E), ts->first_server + s,
                        MSG_GRAD_PUSH, &ts->rq[s]);
    return rc ? rc : comm_waitall(ts->rq, S);
}

// One iteration; *loss gets the global batch's mean loss.
static int ts_step(tstate *ts, int64_t t, double *loss) {
    const train_setup *su = ts->su;
    const bp_dataset *ds = su->ds;
    const int Nd = su->mc.Nd, F = su->mc.F, B = su->B;
    const int b0 = dist_slice_begin(B, ts->T, ts->i), Bi = dist_slice_begin(B, ts->T, ts->i + 1) - b0;
    const uint64_t r = role_batch_row(su, t, b0);
    const uint32_t *ids = ds->sparse + r * F;
    trainer *tr = &ts->tr;

    double t0 = bp_now();
    int rc = fetch_rows(ts, t, ids, Bi);
    if (rc) return rc;
    ts->t_wait += bp_now() - t0;
    double lsum;
    rc = role_dense_step(tr, t, (const float *const *)ts->erow, ds->dense + r * Nd, ds->label + r, Bi, B,
                         ts->first_trainer, ts->T, ts->ar_work, &lsum, &ts->t_compute, &ts->t_ar);
    if (rc) return rc;
    double t4 = bp_now();
    emb_grad_coalesce(&tr->g, &tr->L, ids, tr->d_emb, Bi);
    if (t == ts->stop_before_push) raise(SIGSTOP);
    rc = push_grads(ts, t);
    double t5 = bp_now();
    ts->t_sync += t5 - t4;
    *loss = lsum / B;
    return rc;
}

int dist_collect_rows(trainer *tr, int S, int first_server, void *buf, size_t cap, int64_t iter) {
    const emb_layout *L = &tr->L;
    int rc = 0;
    if (!tr->table.data && (rc = emb_table_alloc(&tr->table, L, 1))) return rc;
    comm_req rq[1024];
    uint8_t reqbuf[1024][MSG_HEADER_BYTES] __attribute__((aligned(8)));
    BP_ASSERT(S <= 1024);
    for (int s = 0; s < S && !rc; s++) {
        msg_header h = {MSG_DUMP_REQ, 0, (uint64_t)iter, 0, 0};
        msg_encode(reqbuf[s], &h, NULL, NULL);
        rc = comm_isend(reqbuf[s], MSG_HEADER_BYTES, first_server + s, MSG_DUMP_REQ, &rq[s]);
    }
    uint64_t total = 0;
    for (int s = 0; s < S && !rc; s++) {
        const int from = first_server + s;
        uint64_t last = 0;
        int any = 0;
        for (;;) {
            size_t len = 0;
            if ((rc = comm_recv(buf, cap, from, MSG_DUMP_ROWS, &len))) break;
            msg_expect ex = {.kind = MSG_DUMP_ROWS, .width = (uint32_t)L->stride, .max_n = MSG_MAX_N, .iter = iter,
                             .rows = L->rows, .server = s, .S = S};
            msg_header h;
            const uint64_t *k;
            const float *rows;
            if ((rc = msg_decode(buf, len, from, &ex, &h, &k, &rows))) break;
            if (h.n && any && k[0] <= last) {
                rc = bp_fail(BP_EFORMAT, "trainer 0: dump chunks of server rank %d out of key order", from);
                break;
            }
            for (uint32_t j = 0; j < h.n; j++)
                memcpy(emb_table_row(&tr->table, k[j]), rows + (size_t)j * L->stride, (size_t)L->stride * sizeof(float));
            if (h.n) last = k[h.n - 1], any = 1;
            total += h.n;
            if (h.flags & MSG_F_LAST) break;
        }
    }
    if (!rc) rc = comm_waitall(rq, S);
    if (!rc && total != L->rows)
        rc = bp_fail(BP_EFORMAT, "trainer 0: the servers returned %llu rows, the tables have %llu",
                     (unsigned long long)total, (unsigned long long)L->rows);
    return rc;
}

// Writer: every row of every server after `iter` iterations into tr.table.
static int ts_collect(tstate *ts, int64_t iter) {
    return dist_collect_rows(&ts->tr, ts->S, ts->first_server, ts->dump, ts->dump_cap, iter);
}

// Writer: checkpoint `iter` (ckpt_run.h).  Each server writes its shard (DUMP_REQ flagged
// MSG_F_CKPT, answered once the state after iter iterations is there) while this trainer writes
// the dense part; then the manifest.  Naive (--checkpoint-naive): every row comes here first and
// is written from here.  The other trainers take no part: their next all-reduce waits.
static int ts_checkpoint(tstate *ts, int64_t iter) {
    const train_setup *su = ts->su;
    if (su->ck.naive) {
        int rc = ts_collect(ts, iter);
        return rc ? rc : ckpt_run_write_all(&ts->tr, su, iter, ts->me);
    }
    const int S = ts->S;
    char dir[4096];
    int rc = ckpt_run_begin(su, iter, dir, sizeof dir);
    if (rc) return rc; // no server was asked
    uint8_t (*reqbuf)[MSG_HEADER_BYTES] = bp_xcalloc((size_t)S, MSG_HEADER_BYTES); // (S) DUMP_REQ messages
    comm_req *rq = bp_xcalloc((size_t)S, sizeof *rq);
    ckpt_file *files = bp_xmalloc((size_t)(S + 1) * sizeof *files);
    rc = role_ckpt_ask_servers(iter, S, ts->first_server, rq, reqbuf);
    if (!rc) {
        int own = ckpt_run_write_dense(&ts->tr, dir, &files[0]); // while the servers write theirs
        rc = role_ckpt_commit(su, &ts->tr, iter, dir, files, 1, S, ts->first_server, ts->T, ts->first_trainer, 0, own);
    }
    int wrc = comm_waitall(rq, S);
    free(reqbuf), free(rq), free(files);
    return rc ? rc : wrc;
}

static int send_done(tstate *ts, int64_t iters) {
    uint8_t buf[1024][MSG_HEADER_BYTES] __attribute__((aligned(8)));
    comm_req rq[1024];
    int rc = 0;
    for (int s = 0; s < ts->S && !rc; s++) {
        msg_header h = {MSG_DONE, 0, (uint64_t)iters, 0, 0};
        msg_encode(buf[s], &h, NULL, NULL);
        rc = comm_isend(buf[s], MSG_HEADER_BYTES, ts->first_server + s, MSG_DONE, &rq[s]);
    }
    return rc ? rc : comm_waitall(rq, ts->S);
}

// Bytes of each kind this trainer moved since the last call (sent + received), summed over all
// trainers: [row fetch, gradient push, dense all-reduce, dump].
static int window_bytes(tstate *ts, double out[4]) {
    static uint64_t prev[4];
    uint64_t now[4] = {comm_bytes_sent(MSG_ROW_REQ) + comm_bytes_recv(MSG_ROW_REPLY), comm_bytes_sent(MSG_GRAD_PUSH),
                       comm_bytes_sent(MSG_AR_RS) + comm_bytes_sent(MSG_AR_AG),
                       comm_bytes_sent(MSG_DUMP_REQ) + comm_bytes_recv(MSG_DUMP_ROWS)};
    for (int k = 0; k < 4; k++) out[k] = (double)(now[k] - prev[k]);
    int rc = comm_allreduce_sum_f64(out, 4, ts->first_trainer, ts->T, (double *)ts->ar_work);
    // the counters' own all-reduce is not counted
    prev[0] = now[0], prev[1] = now[1], prev[3] = now[3];
    prev[2] = comm_bytes_sent(MSG_AR_RS) + comm_bytes_sent(MSG_AR_AG);
    return rc;
}

static void json_window(jsonl *j, const tstate *ts, const double bytes[4], int64_t iters) {
    jsonl_num(j, "wait_rows_s", ts->t_wait);
    jsonl_num(j, "emb_sync_s", ts->t_sync);
    jsonl_num(j, "allreduce_s", ts->t_ar);
    jsonl_num(j, "compute_s", ts->t_compute);
    jsonl_num(j, "bytes_row_fetch", bytes[0]);
    jsonl_num(j, "bytes_grad_push", bytes[1]);
    jsonl_num(j, "bytes_allreduce", bytes[2]);
    if (iters > 0) jsonl_num(j, "bytes_per_iter", (bytes[0] + bytes[1] + bytes[2]) / (double)iters);
    jsonl_int(j, "trainers", ts->T);
    jsonl_int(j, "servers", ts->S);
}

int role_trainer_run(const train_setup *su, const dist_layout *l, int i) {
    tstate ts;
    openblas_set_num_threads(su->threads);
    int rc = ts_init(&ts, su, l, i);
    jsonl_file mf = {0};
    const int writer = i == 0;
    if (!rc) rc = jsonl_open(&mf, "--metrics", writer ? su->metrics : NULL);
    if (rc) {
        ts_free(&ts);
        return rc;
    }
    train_json_start(&mf, su);
    const int B = su->B;
    bp_progress prog;
    bp_progress_init(&prog, "train", "it", writer ? (uint64_t)su->total_iters : 0);
    if (!writer) prog.enabled = 0;
    bp_progress_start_at(&prog, (uint64_t)su->ck.start_iter);
    double t_start = bp_now(), t_window = t_start, t_eval = 0, win_loss = 0, first_s = 0;
    double tot_wait = 0, tot_sync = 0, tot_ar = 0, tot_compute = 0, tot_bytes[4] = {0}, first_parts[4] = {0};
    int64_t win_n = 0;
    metric_result res = {0}, bayes = {0};
    ckpt_sched cks;
    ckpt_sched_init(&cks, &su->ck);
    if (writer && su->ck.from[0])
    {
        printf("resumed from %s at iteration %lld\n", su->ck.from, (long long)su->ck.start_iter);
        fflush(stdout);
    }
    for (int64_t t = su->ck.start_iter; t < su->total_iters && !rc; t++) {
        double loss = 0;
        if ((rc = ts_step(&ts, t, &loss))) break;
        if ((rc = train_loss_check(t, loss))) break;
        if (t == su->ck.start_iter) { // the window's times hold this iteration's alone
            first_s = bp_now() - t_start;
            first_parts[0] = ts.t_wait, first_parts[1] = ts.t_sync, first_parts[2] = ts.t_ar;
            first_parts[3] = ts.t_compute;
        }
        win_loss += loss, win_n++;
        train_progress_window(&prog, t, win_loss / (double)win_n); // every iteration: redrawn at most 10 times a second
        if ((t + 1) % su->print_every == 0 || t + 1 == su->total_iters) {
            double bytes[4];
            if ((rc = window_bytes(&ts, bytes))) break;
            for (int k = 0; k < 4; k++) tot_bytes[k] += bytes[k];
            tot_wait += ts.t_wait, tot_sync += ts.t_sync, tot_ar += ts.t_ar, tot_compute += ts.t_compute;
            if (writer) {
                double now = bp_now();
                jsonl j;
                train_json_window(&j, su, t, win_loss / (double)win_n, (double)win_n * B / (now - t_window));
                json_window(&j, &ts, bytes, win_n);
                if ((rc = jsonl_end(&j, &mf))) break;
            }
            ts.t_wait = ts.t_sync = ts.t_ar = ts.t_compute = 0;
            win_loss = 0, win_n = 0, t_window = bp_now();
        }
        if (writer && train_eval_due(su, t + 1)) {
            double e0 = bp_now();
            if ((rc = ts_collect(&ts, t + 1))) break;
            trainer_eval(&ts.tr, su->ds, su->ev0, su->ev1, su->eval_batch, &res, &bayes);
            t_eval += bp_now() - e0;
            if ((rc = train_json_eval(&mf, su->eval_split, t + 1, B, &res))) break;
            train_print_eval(&prog, su->eval_split, t + 1, &res);
            t_window += bp_now() - e0;
        }
        if (writer && ckpt_sched_due(&cks, t + 1, su->total_iters)) {
            double c0 = bp_now();
            rc = ts_checkpoint(&ts, t + 1);
            rc = ckpt_sched_done(&cks, su, t + 1, rc, bp_now() - c0, &mf);
        }
    }
    bp_progress_finish(&prog);
    const int64_t iters = su->total_iters, run_iters = iters - su->ck.start_iter;
    double train_s = bp_now() - t_start - t_eval;
    if (!rc && writer) {
        double sps = (double)run_iters * B / train_s;
        train_print_trained(run_iters, B, train_s);
        ckpt_sched_print(&cks, train_s);
        if (su->do_eval || su->save) rc = ts_collect(&ts, iters);
        if (!rc) rc = train_final_eval(&ts.tr, su, iters, &res, &bayes);
        if (!rc) {
            jsonl j;
            jsonl_begin(&j);
            jsonl_str(&j, "event", "summary");
            jsonl_str(&j, "mode", "sync");
            jsonl_str(&j, "model", model_kind_name(su->mc.kind));
            jsonl_int(&j, "iters", iters);
            jsonl_int(&j, "samples", iters * B);
            jsonl_num(&j, "train_s", train_s);
            jsonl_num(&j, "first_iter_s", first_s);
            jsonl_num(&j, "samples_per_s", sps);
            ckpt_sched_json(&j, &cks);
            ts.t_wait = tot_wait, ts.t_sync = tot_sync, ts.t_ar = tot_ar, ts.t_compute = tot_compute;
            json_window(&j, &ts, tot_bytes, run_iters);
            role_json_first_parts(&j, first_parts);
            train_json_summary_result(&j, su, &res, &bayes);
            rc = jsonl_end(&j, &mf);
        }
        if (!rc && su->save) {
            rc = trainer_save(&ts.tr, su->save, su->ds, iters, iters * B, su->seed);
            if (!rc) printf("saved model to %s\n", su->save);
        }
        fflush(stdout);
    }
    if (!rc) rc = send_done(&ts, iters);
    rc = jsonl_close(&mf, rc);
    ts_free(&ts);
    return rc;
}
