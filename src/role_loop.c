// role_loop: the loop and helpers shared by the sharded, static and async trainer roles (role_loop.h).
#include "role_loop.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "jsonl.h"
#include "metric.h"
#include "msg.h"
#include "progress.h"

int role_loss_allreduce(double *loss, int first_trainer, int T) {
    double w[128]; // T * ceil(1 / T) = T elements
    double *work = T <= 128 ? w : bp_xmalloc((size_t)T * sizeof(double));
    int rc = comm_allreduce_sum_f64(loss, 1, first_trainer, T, work);
    if (work != w) free(work);
    return rc;
}

int role_dense_step(trainer *tr, int64_t t, const float *const *erow, const float *dense, const uint8_t *label, int Bi,
                    int B, int first_trainer, int T, float *ar_work, double *lsum, double *t_compute, double *t_ar) {
    model *m = &tr->m;
    double t0 = bp_now();
    emb_gather_rows(erow, Bi * m->cfg.F, m->cfg.E, tr->emb);
    model_forward(m, dense, tr->emb, Bi, tr->logit);
    *lsum = bce_with_logits(tr->logit, label, Bi, 1.0f / (float)B, tr->dlogit);
    model_zero_grad(m);
    model_backward(m, dense, tr->emb, tr->dlogit, tr->d_emb, NULL);
    double t1 = bp_now();
    int rc = comm_allreduce_sum_f32(m->grads, m->n_params, first_trainer, T, ar_work);
    if (!rc) rc = role_loss_allreduce(lsum, first_trainer, T);
    if (rc) return rc;
    double t2 = bp_now();
    const dense_opt dopt = trainer_dopt_at(tr, t);
    dense_opt_step(&dopt, m->params, m->grads, tr->dstate, m->n_params);
    *t_compute += (t1 - t0) + (bp_now() - t2);
    *t_ar += t2 - t1;
    return 0;
}

int role_loop_step(const train_setup *su, const role_loop *rl, int64_t t, double *loss) {
    const bp_dataset *ds = su->ds;
    const int Nd = su->mc.Nd, F = su->mc.F, B = su->B;
    const int b0 = dist_slice_begin(B, rl->T, rl->i), Bi = dist_slice_begin(B, rl->T, rl->i + 1) - b0;
    const uint64_t r = role_batch_row(su, t, b0);
    const uint32_t *ids = ds->sparse + r * F;
    trainer *tr = rl->tr;
    role_stats *st = rl->st;
    double t0 = bp_now();
    int rc = rl->fetch(rl->ctx, t, ids, Bi);
    if (rc) return rc;
    st->t_wait += bp_now() - t0;
    double lsum;
    rc = role_dense_step(tr, t, rl->erow, ds->dense + r * Nd, ds->label + r, Bi, B, rl->first_trainer, rl->T,
                         rl->ar_work, &lsum, &st->t_compute, &st->t_ar);
    if (rc) return rc;
    double t1 = bp_now();
    emb_grad_coalesce(&tr->g, &tr->L, ids, tr->d_emb, Bi);
    rc = rl->sync(rl->ctx, t);
    st->t_sync += bp_now() - t1;
    *loss = lsum / B;
    return rc;
}

void role_key_index(const emb_layout *L, const uint32_t *ids, int Bi, const uint64_t *uk, int U, uint32_t *idx) {
    const int F = L->F;
    for (int b = 0, e = 0; b < Bi; b++)
        for (int f = 0; f < F; f++, e++) {
            const uint64_t key = emb_key(L, f, ids[e]);
            int lo = 0, hi = U;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (uk[mid] < key) lo = mid + 1;
                else hi = mid;
            }
            BP_ASSERT(lo < U && uk[lo] == key);
            idx[e] = (uint32_t)lo;
        }
}

// ---------------------------------------------------------------------------------------------
// Key -> slot maps

void role_keymap_init(role_keymap *m, uint64_t cap) {
    uint64_t size = 16;
    while (size < 2 * cap) size *= 2;
    m->mask = size - 1;
    m->keys = bp_xmalloc(size * sizeof *m->keys);
    m->slots = bp_xmalloc(size * sizeof *m->slots);
    for (uint64_t i = 0; i < size; i++) m->keys[i] = ROLE_NO_KEY;
}

void role_keymap_free(role_keymap *m) {
    free(m->keys), free(m->slots);
    memset(m, 0, sizeof *m);
}

uint32_t role_keymap_find(const role_keymap *m, uint64_t key) {
    for (uint64_t i = bp_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) return m->slots[i];
        if (m->keys[i] == ROLE_NO_KEY) return ROLE_NO_SLOT;
    }
}

void role_keymap_put(role_keymap *m, uint64_t key, uint32_t slot) {
    uint64_t i = bp_mix64(key) & m->mask;
    for (; m->keys[i] != ROLE_NO_KEY; i = (i + 1) & m->mask) BP_ASSERT(m->keys[i] != key);
    m->keys[i] = key, m->slots[i] = slot;
}

void role_keymap_del(role_keymap *m, uint64_t key) {
    uint64_t i = bp_mix64(key) & m->mask;
    for (; m->keys[i] != key; i = (i + 1) & m->mask) BP_ASSERT(m->keys[i] != ROLE_NO_KEY);
    for (uint64_t j = i;;) { // backward shift: later entries of the run move into the hole
        j = (j + 1) & m->mask;
        if (m->keys[j] == ROLE_NO_KEY) break;
        uint64_t home = bp_mix64(m->keys[j]) & m->mask;
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) { // home is not in (i, j]
            m->keys[i] = m->keys[j], m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->keys[i] = ROLE_NO_KEY;
}

// ---------------------------------------------------------------------------------------------
// Row sets

void role_keydir_init(role_keydir *d, const uint64_t *keys, uint64_t n, uint64_t K, int parts) {
    int shift = 3;
    while (((uint64_t)1 << shift) < 8 * (uint64_t)(parts > 0 ? parts : 1)) shift++;
    d->shift = shift, d->n_dir = (K >> shift) + 1;
    BP_ASSERT(n == 0 || keys[n - 1] < K);
    d->first = bp_xmalloc((d->n_dir + 1) * sizeof *d->first);
    uint64_t j = 0;
    for (uint64_t i = 0; i <= d->n_dir; i++) {
        while (j < n && (keys[j] >> shift) < i) j++;
        d->first[i] = j;
    }
}

void role_keydir_free(role_keydir *d) {
    free(d->first);
    memset(d, 0, sizeof *d);
}

int role_rows_init(role_rows *r, const emb_layout *L, uint64_t *keys, uint64_t n, int parts) {
    memset(r, 0, sizeof *r);
    r->keys = keys, r->n = n, r->stride = L->stride;
    r->bytes = (size_t)(n ? n : 1) * (size_t)L->stride * sizeof(float);
    role_keydir_init(&r->dir, keys, n, L->rows, parts);
    r->rows = bp_alloc_huge(r->bytes);
    if (!r->rows) return bp_fail(BP_ENOMEM, "cannot map %zu bytes for %llu rows", r->bytes, (unsigned long long)n);
    for (uint64_t j = 0; j < n; j++) emb_row_init(L, keys[j], role_rows_at(r, (int64_t)j));
    return 0;
}

void role_rows_free(role_rows *r) {
    free(r->keys);
    if (r->rows) bp_free_huge(r->rows, r->bytes);
    role_keydir_free(&r->dir);
    memset(r, 0, sizeof *r);
}

void role_merge_apply(const emb_opt *o, role_rows *dst, int T, const uint64_t *const *keys,
                      const float *const *grads, const uint32_t *n, int E, uint32_t *cur, float *sum) {
    memset(cur, 0, (size_t)T * sizeof *cur);
    for (;;) {
        uint64_t k = UINT64_MAX;
        for (int p = 0; p < T; p++)
            if (cur[p] < n[p] && keys[p][cur[p]] < k) k = keys[p][cur[p]];
        if (k == UINT64_MAX) break;
        int first = 1;
        for (int p = 0; p < T; p++) {
            if (cur[p] >= n[p] || keys[p][cur[p]] != k) continue;
            const float *g = grads[p] + (size_t)cur[p] * E;
            if (first) memcpy(sum, g, (size_t)E * sizeof(float)), first = 0;
            else
                for (int j = 0; j < E; j++) sum[j] += g[j];
            cur[p]++;
        }
        int64_t slot = role_rows_slot(dst, k);
        BP_ASSERT(slot >= 0); // the lists were validated against dst's key set
        emb_opt_apply_row(o, role_rows_at(dst, slot), sum);
    }
}

// ---------------------------------------------------------------------------------------------
// Row transfers to the writer

static uint64_t dump_per_chunk(int stride) {
    return BP_MAX((uint64_t)1, ((uint64_t)32 << 20) / (8 + (uint64_t)stride * 4));
}

size_t role_dump_cap(const emb_layout *L) {
    return msg_bytes(MSG_DUMP_ROWS, (uint32_t)BP_MIN(dump_per_chunk(L->stride), L->rows), (uint32_t)L->stride);
}

int role_send_rows(const role_rows *r, int to, int64_t iter) {
    const int stride = r->stride;
    const uint64_t per = dump_per_chunk(stride);
    void *buf = bp_xmalloc(msg_bytes(MSG_DUMP_ROWS, (uint32_t)BP_MIN(per, r->n ? r->n : 1), (uint32_t)stride));
    uint64_t i = 0;
    int rc = 0;
    do {
        uint32_t n = (uint32_t)BP_MIN(per, r->n - i);
        msg_header h = {MSG_DUMP_ROWS, i + n == r->n ? MSG_F_LAST : 0, (uint64_t)iter, n, (uint32_t)stride};
        uint64_t *k;
        float *rows;
        msg_encode(buf, &h, &k, &rows);
        memcpy(k, r->keys + i, (size_t)n * sizeof *k);
        memcpy(rows, r->rows + i * (size_t)stride, (size_t)n * stride * sizeof *rows);
        comm_req q;
        rc = comm_isend(buf, msg_bytes(MSG_DUMP_ROWS, n, (uint32_t)stride), to, MSG_DUMP_ROWS, &q);
        if (!rc) rc = comm_wait(&q, NULL);
        i += n;
    } while (!rc && i < r->n);
    free(buf);
    return rc;
}

int role_recv_rows(emb_table *table, void *buf, size_t cap, int from, int64_t iter, int owner, int owners,
                   uint64_t *total) {
    const emb_layout *L = &table->L;
    uint64_t last = 0;
    int any = 0, rc = 0;
    for (;;) {
        size_t len = 0;
        if ((rc = comm_recv(buf, cap, from, MSG_DUMP_ROWS, &len))) return rc;
        msg_expect ex = {.kind = MSG_DUMP_ROWS, .width = (uint32_t)L->stride, .max_n = MSG_MAX_N, .iter = iter,
                         .rows = L->rows, .server = owner, .S = owners};
        msg_header h;
        const uint64_t *k;
        const float *rows;
        if ((rc = msg_decode(buf, len, from, &ex, &h, &k, &rows))) return rc;
        if (h.n && any && k[0] <= last)
            return bp_fail(BP_EFORMAT, "trainer 0: row dump chunks of rank %d out of key order", from);
        for (uint32_t j = 0; j < h.n; j++)
            memcpy(emb_table_row(table, k[j]), rows + (size_t)j * L->stride, (size_t)L->stride * sizeof(float));
        if (h.n) last = k[h.n - 1], any = 1;
        *total += h.n;
        if (h.flags & MSG_F_LAST) return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

int role_ckpt_ask_servers(int64_t iter, int S, int first_server, comm_req *rq, uint8_t (*reqbuf)[24]) {
    int rc = 0;
    for (int s = 0; s < S && !rc; s++) {
        msg_header h = {MSG_DUMP_REQ, MSG_F_CKPT, (uint64_t)iter, 0, 0};
        msg_encode(reqbuf[s], &h, NULL, NULL);
        rc = comm_isend(reqbuf[s], MSG_HEADER_BYTES, first_server + s, MSG_DUMP_REQ, &rq[s]);
    }
    return rc;
}

int role_ckpt_commit(const train_setup *su, const trainer *tr, int64_t iter, const char *dir, ckpt_file *files,
                     int nown, int S, int first_server, int T, int first_trainer, int trainer_parts, int own_rc) {
    const int n = S + (trainer_parts ? T - 1 : 0);
    int *ranks = bp_xmalloc((size_t)(n ? n : 1) * sizeof *ranks);
    for (int p = 0; p < n; p++) {
        ranks[p] = p < S ? first_server + p : first_trainer + (p - S + 1);
        if (p < S) snprintf(files[nown + p].name, CKPT_NAME_MAX, "server-%d.bin", p);
        else snprintf(files[nown + p].name, CKPT_NAME_MAX, "trainer-%d.bin", p - S + 1);
    }
    char why[1536] = "", others[768] = ""; // this rank's reason, then the first other rank's
    if (own_rc) snprintf(why, sizeof why, "%s", bp_errmsg(own_rc));
    int rc = ckpt_run_gather(iter, n, ranks, files + nown, dir, others, sizeof others);
    free(ranks);
    if (rc) return rc; // a message failure ends the run whatever --on-checkpoint-error says
    if (why[0] && others[0]) snprintf(why + strlen(why), sizeof why - strlen(why), "; %s", others);
    else if (others[0]) snprintf(why, sizeof why, "%s", others);
    if (why[0]) return ckpt_run_abandon(dir, bp_fail(own_rc ? own_rc : BP_EIO, "%s", why));
    ckpt_test_kill_point(comm_rank(), iter);
    rc = ckpt_run_commit(tr, su, iter, dir, files, nown + n);
    return rc ? ckpt_run_abandon(dir, rc) : 0;
}

// ---------------------------------------------------------------------------------------------
// The loop

enum { W_FETCH, W_PUSH, W_AR, W_HOT, W_DUMP, W_LOOKUPS, W_HITS, W_N };

// Bytes of the dense all-reduce sent so far (this process).
static uint64_t ar_bytes(void) { return comm_bytes_sent(MSG_AR_RS) + comm_bytes_sent(MSG_AR_AG); }

// The window's counters summed over the trainers: bytes sent + received of each kind (row
// fetch, gradient push, dense all-reduce, pinned-row gradients, dumps), lookups, pinned hits.
static int window_counters(const role_loop *rl, uint64_t prev[W_N], double out[W_N]) {
    uint64_t now[W_N] = {comm_bytes_sent(MSG_ROW_REQ) + comm_bytes_recv(MSG_ROW_REPLY),
                         comm_bytes_sent(MSG_GRAD_PUSH),
                         ar_bytes(),
                         comm_bytes_sent(MSG_HOT_GRAD),
                         comm_bytes_sent(MSG_DUMP_REQ) + comm_bytes_recv(MSG_DUMP_ROWS),
                         rl->st->lookups,
                         rl->st->hot_hits};
    for (int k = 0; k < W_N; k++) out[k] = (double)(now[k] - prev[k]);
    double work[W_N * 2 + 2]; // T * ceil(W_N / T) <= W_N + T - 1 ... bounded below for T <= W_N + 2
    double *w = rl->T <= W_N + 2 ? work : bp_xmalloc((size_t)rl->T * 2 * sizeof(double));
    int rc = comm_allreduce_sum_f64(out, W_N, rl->first_trainer, rl->T, w);
    if (w != work) free(w);
    // the counters' own all-reduce is not counted
    for (int k = 0; k < W_N; k++) prev[k] = now[k];
    prev[W_AR] = ar_bytes();
    return rc;
}

void role_json_first_parts(jsonl *j, const double p[4]) {
    jsonl_num(j, "first_iter_wait_rows_s", p[0]);
    jsonl_num(j, "first_iter_emb_sync_s", p[1]);
    jsonl_num(j, "first_iter_allreduce_s", p[2]);
    jsonl_num(j, "first_iter_compute_s", p[3]);
}

static void json_window(jsonl *j, const role_loop *rl, const role_stats *st, const double c[W_N], int64_t iters) {
    jsonl_num(j, "wait_rows_s", st->t_wait);
    jsonl_num(j, "emb_sync_s", st->t_sync);
    jsonl_num(j, "allreduce_s", st->t_ar);
    jsonl_num(j, "compute_s", st->t_compute);
    jsonl_num(j, "bytes_row_fetch", c[W_FETCH]);
    jsonl_num(j, "bytes_grad_push", c[W_PUSH]);
    jsonl_num(j, "bytes_allreduce", c[W_AR]);
    jsonl_num(j, "bytes_hot_sync", c[W_HOT]);
    if (iters > 0)
        jsonl_num(j, "bytes_per_iter", (c[W_FETCH] + c[W_PUSH] + c[W_AR] + c[W_HOT]) / (double)iters);
    if (rl->report_hits) {
        jsonl_num(j, "lookups", c[W_LOOKUPS]);
        jsonl_num(j, "hit_rate", c[W_LOOKUPS] > 0 ? c[W_HITS] / c[W_LOOKUPS] : 0.0);
    }
    jsonl_int(j, "trainers", rl->T);
    jsonl_int(j, "servers", rl->S);
}

int role_loop_run(const train_setup *su, const role_loop *rl) {
    jsonl_file mf;
    const int writer = rl->i == 0;
    int rc = jsonl_open(&mf, "--metrics", writer ? su->metrics : NULL);
    if (rc) return rc;
    train_json_start(&mf, su);
    role_stats *st = rl->st;
    trainer *tr = rl->tr;
    const int B = su->B;
    bp_progress prog;
    bp_progress_init(&prog, "train", "it", writer ? (uint64_t)su->total_iters : 0);
    if (!writer) prog.enabled = 0;
    bp_progress_start_at(&prog, (uint64_t)su->ck.start_iter);
    double t_start = bp_now(), t_window = t_start, t_eval = 0, win_loss = 0, first_s = 0, first_parts[4] = {0};
    role_stats tot = {0};
    double tot_c[W_N] = {0};
    uint64_t prev[W_N] = {0};
    int64_t win_n = 0;
    metric_result res = {0}, bayes = {0};
    ckpt_sched cks;
    ckpt_sched_init(&cks, &su->ck);
    dist_alive alive; // a lone trainer's sign of life to the coordinator (dist.h)
    dist_alive_init(&alive, rl->T, rl->S, rl->i);
    if (writer && su->ck.from[0]) {
        printf("resumed from %s at iteration %lld\n", su->ck.from, (long long)su->ck.start_iter);
        fflush(stdout);
    }
    for (int64_t t = su->ck.start_iter; t < su->total_iters && !rc; t++) {
        double loss = 0;
        if ((rc = rl->step ? rl->step(rl->ctx, t, &loss) : role_loop_step(su, rl, t, &loss))) break;
        if ((rc = train_loss_check(t, loss)) || (rc = dist_alive_tick(&alive, 0))) break;
        if (t == su->ck.start_iter) { // the window's times hold this iteration's alone
            first_s = bp_now() - t_start;
            first_parts[0] = st->t_wait, first_parts[1] = st->t_sync, first_parts[2] = st->t_ar;
            first_parts[3] = st->t_compute;
        }
        win_loss += loss, win_n++;
        train_progress_window(&prog, t, win_loss / (double)win_n); // every iteration: redrawn at most 10 times a second
        if ((t + 1) % su->print_every == 0 || t + 1 == su->total_iters) {
            double c[W_N];
            if ((rc = window_counters(rl, prev, c))) break;
            if (rl->window) { // the mode's own figures (async: an all-reduce of them), not counted either
                if ((rc = rl->window(rl->ctx))) break;
                prev[W_AR] = ar_bytes();
            }
            for (int k = 0; k < W_N; k++) tot_c[k] += c[k];
            tot.t_wait += st->t_wait, tot.t_sync += st->t_sync, tot.t_ar += st->t_ar, tot.t_compute += st->t_compute;
            if (writer) {
                double now = bp_now();
                jsonl j;
                train_json_window(&j, su, t, win_loss / (double)win_n, (double)win_n * B / (now - t_window));
                json_window(&j, rl, st, c, win_n);
                if (rl->json) rl->json(rl->ctx, &j, 0);
                if ((rc = jsonl_end(&j, &mf))) break;
            }
            st->t_wait = st->t_sync = st->t_ar = st->t_compute = 0;
            win_loss = 0, win_n = 0, t_window = bp_now();
        }
        if (train_eval_due(su, t + 1)) {
            double e0 = bp_now();
            if ((rc = rl->collect(rl->ctx, t + 1))) break;
            if (writer) {
                trainer_eval(tr, su->ds, su->ev0, su->ev1, su->eval_batch, &res, &bayes);
                if ((rc = train_json_eval(&mf, su->eval_split, t + 1, B, &res))) break;
                train_print_eval(&prog, su->eval_split, t + 1, &res);
            }
            t_eval += bp_now() - e0;
            t_window += bp_now() - e0;
        }
        if (su->ck.dir) { // every trainer calls the mode's checkpoint at the same boundary
            double due = ckpt_sched_due(&cks, t + 1, su->total_iters);
            if (su->ck.minutes > 0) { // a clock decides: trainer 0's
                due = writer ? due : 0;
                if ((rc = role_loss_allreduce(&due, rl->first_trainer, rl->T))) break;
            }
            if (due > 0) {
                double c0 = bp_now();
                rc = rl->checkpoint(rl->ctx, t + 1);
                if (writer) rc = ckpt_sched_done(&cks, su, t + 1, rc, bp_now() - c0, &mf);
            }
        }
    }
    bp_progress_finish(&prog);
    if (!rc) rc = dist_alive_tick(&alive, 1);
    int rc_alive = dist_alive_finish(&alive);
    if (!rc) rc = rc_alive;
    const int64_t iters = su->total_iters, run_iters = iters - su->ck.start_iter;
    double train_s = bp_now() - t_start - t_eval;
    double sps = (double)run_iters * B / train_s;
    if (!rc && writer) {
        train_print_trained(run_iters, B, train_s);
        ckpt_sched_print(&cks, train_s);
    }
    if (!rc && (su->do_eval || su->save)) rc = rl->collect(rl->ctx, iters);
    if (!rc && writer) {
        rc = train_final_eval(tr, su, iters, &res, &bayes);
        if (!rc) {
            jsonl j;
            jsonl_begin(&j);
            jsonl_str(&j, "event", "summary");
            jsonl_str(&j, "mode", rl->mode);
            jsonl_str(&j, "model", model_kind_name(su->mc.kind));
            jsonl_int(&j, "iters", iters);
            jsonl_int(&j, "samples", iters * B);
            jsonl_num(&j, "train_s", train_s);
            jsonl_num(&j, "first_iter_s", first_s);
            jsonl_num(&j, "samples_per_s", sps);
            ckpt_sched_json(&j, &cks);
            json_window(&j, rl, &tot, tot_c, run_iters);
            role_json_first_parts(&j, first_parts);
            if (rl->json) rl->json(rl->ctx, &j, 1);
            train_json_summary_result(&j, su, &res, &bayes);
            rc = jsonl_end(&j, &mf);
        }
        if (!rc && su->save) {
            rc = trainer_save(tr, su->save, su->ds, iters, iters * B, su->seed);
            if (!rc) printf("saved model to %s\n", su->save);
        }
        fflush(stdout);
    }
    if (!rc && rl->finish) rc = rl->finish(rl->ctx, iters);
    rc = jsonl_close(&mf, rc);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Messages to the servers

void role_srv_init(role_srv *c, int S, int first_server, int i, int E, uint32_t cap) {
    memset(c, 0, sizeof *c);
    c->S = S, c->first_server = first_server, c->i = i, c->E = E, c->cap = cap;
    c->req_cap = msg_bytes(MSG_ROW_REQ, cap, 0);
    c->reply_cap = msg_bytes(MSG_ROW_REPLY, cap, (uint32_t)E);
    c->push_cap = msg_bytes(MSG_GRAD_PUSH, cap, (uint32_t)E);
    c->req = bp_xcalloc((size_t)S, sizeof *c->req);
    c->reply = bp_xcalloc((size_t)S, sizeof *c->reply);
    c->push = bp_xcalloc((size_t)S, sizeof *c->push);
    for (int s = 0; s < S; s++) {
        c->req[s] = bp_xmalloc(c->req_cap);
        c->reply[s] = bp_xmalloc(c->reply_cap);
        c->push[s] = bp_xmalloc(c->push_cap);
    }
    c->rq = bp_xcalloc((size_t)2 * S, sizeof *c->rq);
    c->pq = bp_xcalloc((size_t)S, sizeof *c->pq);
    c->n = bp_xcalloc((size_t)S, sizeof *c->n);
    c->kout = bp_xcalloc((size_t)S, sizeof *c->kout);
    c->rout = bp_xcalloc((size_t)S, sizeof *c->rout);
    c->rin = bp_xcalloc((size_t)S, sizeof *c->rin);
    c->rin_iter = bp_xcalloc((size_t)S, sizeof *c->rin_iter);
}

void role_srv_free(role_srv *c) {
    for (int s = 0; c->req && s < c->S; s++) free(c->req[s]), free(c->reply[s]), free(c->push[s]);
    free(c->req), free(c->reply), free(c->push), free(c->rq), free(c->pq), free(c->n), free(c->kout), free(c->rout);
    free(c->rin), free(c->rin_iter);
    memset(c, 0, sizeof *c);
}

int role_srv_fetch(role_srv *c, int64_t t, int64_t t_max, const uint64_t *keys, uint32_t n, int skip_empty,
                   uint32_t *srv, uint32_t *pos) {
    const int S = c->S;
    BP_ASSERT(n <= c->cap);
    memset(c->n, 0, (size_t)S * sizeof *c->n);
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_ROW_REQ, 0, (uint64_t)t, 0, (uint32_t)c->E};
        msg_encode(c->req[s], &h, &c->kout[s], NULL);
    }
    for (uint32_t u = 0; u < n; u++) {
        uint32_t s = msg_server_of(keys[u], S);
        srv[u] = s, pos[u] = c->n[s];
        c->kout[s][c->n[s]++] = keys[u];
    }
    int rc = 0;
    for (int s = 0; s < S && !rc; s++) {
        c->rin[s] = NULL;
        if (skip_empty && !c->n[s]) continue;
        bp_put_u32((uint8_t *)c->req[s] + 16, c->n[s]); // n, now known
        rc = comm_irecv(c->reply[s], c->reply_cap, c->first_server + s, MSG_ROW_REPLY, &c->rq[2 * s]);
        if (!rc)
            rc = comm_isend(c->req[s], msg_bytes(MSG_ROW_REQ, c->n[s], 0), c->first_server + s, MSG_ROW_REQ,
                            &c->rq[2 * s + 1]);
    }
    for (int s = 0; s < S && !rc; s++) {
        if (skip_empty && !c->n[s]) continue;
        size_t len = 0;
        if ((rc = comm_wait(&c->rq[2 * s], &len))) break;
        msg_expect ex = {.kind = MSG_ROW_REPLY, .width = (uint32_t)c->E, .max_n = c->n[s], .iter = -1};
        msg_header h;
        if ((rc = msg_decode(c->reply[s], len, c->first_server + s, &ex, &h, NULL, &c->rin[s]))) break;
        c->rin_iter[s] = (int64_t)h.iter;
        if (h.n != c->n[s])
            rc = bp_fail(BP_EFORMAT, "trainer %d: server rank %d answered %u rows for %u keys", c->i,
                         c->first_server + s, h.n, c->n[s]);
        else if (c->rin_iter[s] < t || c->rin_iter[s] > t_max)
            rc = bp_fail(BP_EFORMAT, "trainer %d: server rank %d answered a request of iteration %lld with rows of "
                         "iteration %lld (expected %lld..%lld)", c->i, c->first_server + s, (long long)t,
                         (long long)c->rin_iter[s], (long long)t, (long long)t_max);
        if (!rc) rc = comm_wait(&c->rq[2 * s + 1], NULL);
    }
    return rc;
}

int role_srv_push(role_srv *c, int64_t t, const emb_grad *g, int wait) {
    const int S = c->S, E = g->E;
    BP_ASSERT(E == c->E && (uint32_t)g->n <= c->cap);
    int rc = 0;
    if (c->pushing && (rc = comm_waitall(c->pq, S))) return rc; // the buffers are reused
    c->pushing = 0;
    memset(c->n, 0, (size_t)S * sizeof *c->n);
    for (int k = 0; k < g->n; k++) c->n[msg_server_of(g->keys[k], S)]++;
    for (int s = 0; s < S; s++) {
        msg_header h = {MSG_GRAD_PUSH, 0, (uint64_t)t, c->n[s], (uint32_t)E};
        msg_encode(c->push[s], &h, &c->kout[s], &c->rout[s]);
    }
    memset(c->n, 0, (size_t)S * sizeof *c->n);
    for (int k = 0; k < g->n; k++) {
        uint32_t s = msg_server_of(g->keys[k], S), j = c->n[s]++;
        c->kout[s][j] = g->keys[k];
        memcpy(c->rout[s] + (size_t)j * E, g->rows + (size_t)k * E, (size_t)E * sizeof(float));
    }
    for (int s = 0; s < S && !rc; s++)
        rc = comm_isend(c->push[s], msg_bytes(MSG_GRAD_PUSH, c->n[s], (uint32_t)E), c->first_server + s,
                        MSG_GRAD_PUSH, &c->pq[s]);
    if (rc) return rc;
    c->pushing = 1;
    if (wait) {
        rc = comm_waitall(c->pq, S);
        c->pushing = 0;
    }
    return rc;
}

int role_srv_done(role_srv *c, int64_t iters) {
    const int S = c->S;
    int rc = 0;
    if (c->pushing && (rc = comm_waitall(c->pq, S))) return rc;
    c->pushing = 0;
    for (int s = 0; s < S && !rc; s++) { // the request buffers are free: DONE is a header
        msg_header h = {MSG_DONE, 0, (uint64_t)iters, 0, 0};
        msg_encode(c->req[s], &h, NULL, NULL);
        rc = comm_isend(c->req[s], MSG_HEADER_BYTES, c->first_server + s, MSG_DONE, &c->rq[s]);
    }
    return rc ? rc : comm_waitall(c->rq, S);
}
