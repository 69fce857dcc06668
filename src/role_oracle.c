// role_oracle: rank 0 of mode bagpipe (dist.h).  Reads the train split in training order (batch
// t = rows tr0 + (t mod per_epoch) * B), runs the planner (oracle.h) and streams the encoded
// records (plan.h) to every trainer as MSG_PLAN messages.
//
// Flow control: trainer i reports with MSG_CREDIT how many iterations it has finished (every
// ROLE_CREDIT_EVERY iterations and at the end).  Record t is sent only when t < min_done + A,
// A = ROLE_ORACLE_AHEAD(P); encoded records wait in a ring of A buffers.  The planner therefore
// holds at most W + P + 3 batches and the ring A records, whatever the length of the run, and it
// is never on the critical path while it plans faster than the trainers train (it plans A
// records before the trainers start).
//
// Resuming at iteration K (ckpt_run.h): the planner starts afresh at batch K with empty caches
// (its state is the data cursor K: every row is home on the servers).  Its records are numbered
// from 0 (record 0 is the one that may fetch for several iterations) and the trainers shift every
// iteration field by K on receipt; the oracle's own counters (made, sent, credits) and each record's
// row0 (the dataset row of its batch, which trainers check) are absolute.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "common.h"
#include "dist.h"
#include "msg.h"
#include "oracle.h"
#include "plan.h"

struct role_oracle {
    const train_setup *su;
    int T, first_trainer, A;
    oracle o;
    plan p;
    int64_t N;           // records (iterations): the run ends at iteration N
    int64_t K;           // the first record (resumed at K; 0 otherwise)
    int64_t pushed;      // batches fed to the planner
    int64_t made, sent;  // records encoded into the ring / sent
    uint64_t refetches;  // fetches of keys evicted before
    uint8_t **ring;      // (A) encoded records
    size_t *ring_cap;    // (A)
    uint32_t *ring_len;  // (A)
    comm_req *ring_rq;   // (A, T) sends of each ring record
    int *ring_busy;      // (A)
    int64_t *done;       // (T) iterations each trainer has finished
    uint8_t (*credit)[MSG_HEADER_BYTES]; // (T) credit receive buffers
    comm_req *credit_rq; // (T)
};

void role_oracle_free(role_oracle *ro) {
    if (!ro) return;
    for (int j = 0; ro->ring && j < ro->A; j++) free(ro->ring[j]);
    free(ro->ring), free(ro->ring_cap), free(ro->ring_len), free(ro->ring_rq), free(ro->ring_busy);
    free(ro->done), free(ro->credit), free(ro->credit_rq);
    plan_free(&ro->p);
    oracle_free(&ro->o);
    free(ro);
}

// Encodes the next record into the ring.  Returns 1 when one was made, 0 when none is left, or
// a negative error (BP_ECAPACITY from the planner).
static int produce(role_oracle *ro) {
    const train_setup *su = ro->su;
    const int F = su->mc.F;
    for (;;) {
        int rc = oracle_next_plan(&ro->o, &ro->p);
        if (rc == BP_ECAPACITY) { // the planner's words, the flag that sets its capacity, and how to find the size
            static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+=,:@";
            const int plain = strspn(su->data_path, safe) == strlen(su->data_path); // else quoted, for a shell
            // Resumed, the caches start empty at K: the plan from there is not the uninterrupted
            // run's, and may need a little more cache; the model is the same at any cache size.
            char resumed[320] = "", start[48] = "";
            if (ro->K) {
                snprintf(resumed, sizeof resumed, "; this run resumed at iteration %lld with empty caches, so its plan "
                         "from there is not the one of the run it continues, which may have fitted (the model is "
                         "the same at any cache size)", (long long)ro->K);
                snprintf(start, sizeof start, " --start-iter %lld", (long long)ro->K);
            }
            return bp_fail(rc, "%s (--cache-rows %llu: give at least that minimum; a later batch may need more: "
                           "`bagpipe analyze --cache %llu --trainers %d --batch-size %d --lookahead %d --prefetch %d%s "
                           "--iters %lld%s %s%s%s` simulates this run's batches and names the smallest cache that "
                           "works%s)",
                           bp_errmsg(rc), (unsigned long long)su->cache_rows, (unsigned long long)su->cache_rows,
                           su->trainers, su->B, su->lookahead, su->prefetch,
                           su->oracle_parts == 2 ? " --oracle-parts 2" : "", (long long)su->total_iters, start,
                           plain ? "" : "\"", su->data_path, plain ? "" : "\"", resumed);
        }
        if (rc < 0) return rc;
        if (rc == 1) break;
        if (oracle_done(&ro->o)) return 0;
        if (ro->pushed < ro->N) {
            const uint64_t r = su->tr0 + (uint64_t)(ro->pushed % (int64_t)su->per_epoch) * (uint64_t)su->B;
            if ((rc = oracle_push_batch(&ro->o, su->ds->sparse + r * F))) return rc;
            ro->pushed++;
        } else if ((rc = oracle_finish(&ro->o))) {
            return rc;
        }
    }
    BP_ASSERT(ro->p.iter + ro->K == ro->made);
    // The planner numbers batches from its first one and knows no epochs: the dataset row of batch
    // `made` in training order is set here (it wraps at each epoch and starts at K when resumed).
    ro->p.row0 = su->tr0 + (uint64_t)(ro->made % (int64_t)su->per_epoch) * (uint64_t)su->B;
    for (uint32_t k = 0; k < ro->p.n_fetch; k++) ro->refetches += ro->p.fetch[k].evict_iter != PLAN_NEVER;
    const int j = (int)(ro->made % ro->A);
    BP_ASSERT(!ro->ring_busy[j]);
    size_t need = plan_encoded_size(&ro->p);
    if (need > ro->ring_cap[j]) {
        free(ro->ring[j]);
        ro->ring_cap[j] = need + need / 4 + 256;
        ro->ring[j] = bp_xmalloc(ro->ring_cap[j]);
    }
    int64_t len = plan_encode(&ro->p, ro->ring[j], ro->ring_cap[j]);
    if (len < 0) return (int)len;
    ro->ring_len[j] = (uint32_t)len;
    ro->made++;
    return 1;
}

int role_oracle_prepare(role_oracle **out, const train_setup *su, const dist_layout *l) {
    role_oracle *ro = bp_xcalloc(1, sizeof *ro);
    *out = ro;
    ro->su = su, ro->T = l->T, ro->first_trainer = dist_trainer_rank(l, 0);
    ro->A = ROLE_ORACLE_AHEAD(su->prefetch);
    ro->N = su->total_iters;
    ro->K = su->ck.start_iter;
    ro->pushed = ro->made = ro->sent = ro->K;
    plan_init(&ro->p);
    oracle_config cfg = {.T = (uint32_t)l->T, .B = (uint32_t)su->B, .F = (uint32_t)su->mc.F, .card = su->ds->info.card,
                         .W = (uint32_t)su->lookahead, .P = (uint32_t)su->prefetch, .C = su->cache_rows,
                         .row_base = su->tr0, .iter_base = (uint64_t)ro->K,
                         .threads = su->oracle_threads == 2 ? 2 : 1, .keymap = ORACLE_KEYMAP_AUTO, .borrow_input = 1,
                         .groups = su->oracle_parts == 2 ? 2 : 1};
    int rc = oracle_init(&ro->o, &cfg);
    if (rc) return rc;
    const int A = ro->A, T = ro->T;
    ro->ring = bp_xcalloc((size_t)A, sizeof *ro->ring);
    ro->ring_cap = bp_xcalloc((size_t)A, sizeof *ro->ring_cap);
    ro->ring_len = bp_xcalloc((size_t)A, sizeof *ro->ring_len);
    ro->ring_rq = bp_xcalloc((size_t)A * T, sizeof *ro->ring_rq);
    ro->ring_busy = bp_xcalloc((size_t)A, sizeof *ro->ring_busy);
    ro->done = bp_xcalloc((size_t)T, sizeof *ro->done);
    for (int p = 0; p < T; p++) ro->done[p] = ro->K;
    ro->credit = bp_xcalloc((size_t)T, sizeof *ro->credit);
    ro->credit_rq = bp_xcalloc((size_t)T, sizeof *ro->credit_rq);
    while (ro->made < ro->K + A && (rc = produce(ro)) == 1) {
    }
    return rc < 0 ? rc : 0;
}

int role_oracle_run(role_oracle *ro) {
    const int T = ro->T, A = ro->A;
    int rc = 0;
    for (int p = 0; p < T && !rc; p++)
        rc = comm_irecv(ro->credit[p], MSG_HEADER_BYTES, ro->first_trainer + p, MSG_CREDIT, &ro->credit_rq[p]);
    int64_t min_done = 0;
    int idle = 0;
    long idle_ns = 0;
    double since = 0; // the stall clock (comm_stall_check), restarted by any progress
    while (!rc) {
        int progress = 0;
        // credits
        for (int p = 0; p < T && !rc; p++) {
            if (ro->done[p] >= ro->N) continue;
            int fin = 0;
            size_t len = 0;
            if ((rc = comm_test(&ro->credit_rq[p], &fin, &len)) || !fin) continue;
            msg_header h;
            msg_expect ex = {.kind = MSG_CREDIT, .max_n = 0, .iter = -1};
            if ((rc = msg_decode(ro->credit[p], len, ro->first_trainer + p, &ex, &h, NULL, NULL))) break;
            if ((int64_t)h.iter < ro->done[p] || (int64_t)h.iter > ro->N) {
                rc = bp_fail(BP_EFORMAT, "oracle: trainer %d reports %llu iterations done (had %lld, run %lld)", p,
                             (unsigned long long)h.iter, (long long)ro->done[p], (long long)ro->N);
                break;
            }
            ro->done[p] = (int64_t)h.iter, progress = 1;
            if (ro->done[p] < ro->N)
                rc = comm_irecv(ro->credit[p], MSG_HEADER_BYTES, ro->first_trainer + p, MSG_CREDIT, &ro->credit_rq[p]);
        }
        if (rc) break;
        min_done = ro->N;
        for (int p = 0; p < T; p++) min_done = BP_MIN(min_done, ro->done[p]);
        if (min_done == ro->N && ro->sent == ro->N) break;
        // send what the credits allow
        while (!rc && ro->sent < ro->made && ro->sent < min_done + A) {
            const int j = (int)(ro->sent % A);
            for (int p = 0; p < T && !rc; p++)
                rc = comm_isend(ro->ring[j], ro->ring_len[j], ro->first_trainer + p, MSG_PLAN, &ro->ring_rq[(size_t)j * T + p]);
            ro->ring_busy[j] = 1, ro->sent++, progress = 1;
        }
        // plan ahead into free ring buffers
        if (!rc && ro->made < ro->N && ro->made < ro->sent + A) {
            const int j = (int)(ro->made % A);
            int free_now = !ro->ring_busy[j];
            if (!free_now) {
                free_now = 1;
                for (int p = 0; p < T && !rc && free_now; p++) {
                    comm_req *q = &ro->ring_rq[(size_t)j * T + p];
                    int fin = 1;
                    if (q->peer >= 0) rc = comm_test(q, &fin, NULL);
                    if (fin) q->peer = -1; // completed (a completed MPI request is inactive: mark it)
                    else free_now = 0;
                }
                if (free_now) ro->ring_busy[j] = 0;
            }
            if (!rc && free_now) {
                int got = produce(ro);
                if (got < 0) rc = got;
                else progress |= got;
            }
        }
        // Idle: nothing to plan until a credit or a send frees a ring buffer.  Back off, leaving
        // the cores to the trainers and servers, but no longer than any waiting rank does
        // (COMM_MAX_SLEEP_US): a record is larger than MPI's eager limit, so it moves only while
        // this rank calls into MPI after its trainer has posted the receive.  With a 2 ms cap a
        // trainer waited about 1 ms per iteration for its record (T = 1, D = 64, batch 1024).
        if (progress) idle = 0, idle_ns = 0, since = 0;
        else if (++idle > 16) {
            idle_ns = idle_ns ? BP_MIN(2 * idle_ns, COMM_MAX_SLEEP_US * 1000L) : 20000;
            bp_sleep_ns(idle_ns);
            int slow = 0; // the trainer furthest behind: the one the ring waits for
            for (int p = 1; p < T; p++)
                if (ro->done[p] < ro->done[slow]) slow = p;
            char what[128];
            snprintf(what, sizeof what, "CREDIT from rank %d (trainer %d, %lld iterations done)", ro->first_trainer + slow,
                     slow, (long long)ro->done[slow]);
            rc = comm_stall_check_indirect(&since, what);
        }
    }
    for (int j = 0; !rc && j < A; j++)
        for (int p = 0; !rc && ro->ring_busy[j] && p < T; p++)
            if (ro->ring_rq[(size_t)j * T + p].peer >= 0) rc = comm_wait(&ro->ring_rq[(size_t)j * T + p], NULL);
    return rc;
}

void role_oracle_report(const role_oracle *ro) {
    oracle_stats st;
    oracle_get_stats(&ro->o, &st);
    printf("oracle: %llu records, %llu fetches (%llu private, %llu refetches), %llu evictions (%llu under "
           "pressure, %llu demoted), sync %llu now / %llu later (%llu restated), peak %llu of %llu rows%s\n",
           (unsigned long long)st.batches, (unsigned long long)st.fetches, (unsigned long long)st.fetches_private,
           (unsigned long long)ro->refetches, (unsigned long long)st.evictions,
           (unsigned long long)st.evictions_pressure, (unsigned long long)st.demotions, (unsigned long long)st.sync_now,
           (unsigned long long)st.sync_later, (unsigned long long)st.sync_restated,
           (unsigned long long)st.peak_resident, (unsigned long long)ro->su->cache_rows,
           st.parts == 2 ? "; planned in 2 parts (split by tables)" : "");
    fflush(stdout);
}
