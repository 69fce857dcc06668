// dist: rank layout, start-up agreement, role dispatch.  Contracts in dist.h.
#include "dist.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_run.h"
#include "comm.h"
#include "common.h"
#include "launch.h"
#include "model.h"
#include "msg.h"
#include "optim.h"

dist_role dist_role_of(const dist_layout *l, int rank, int *index) {
    if (rank == 0) {
        if (index) *index = 0;
        return DIST_ORACLE;
    }
    if (rank <= l->S) {
        if (index) *index = rank - 1;
        return DIST_SERVER;
    }
    if (index) *index = rank - 1 - l->S;
    return DIST_TRAINER;
}

const char *dist_mode_name(dist_mode m) {
    return m == DIST_MODE_SHARDED ? "sharded" : m == DIST_MODE_STATIC ? "static" : m == DIST_MODE_BAGPIPE ? "bagpipe"
         : m == DIST_MODE_ASYNC ? "async" : "sync";
}

void dist_role_name(int rank, const void *ctx, char *buf, size_t cap) {
    const dist_layout *l = ctx;
    int idx;
    if (rank < 0 || rank >= dist_ranks(l)) {
        snprintf(buf, cap, "not in the layout");
        return;
    }
    dist_role r = dist_role_of(l, rank, &idx);
    if (r == DIST_ORACLE) snprintf(buf, cap, "oracle");
    else snprintf(buf, cap, "%s %d", r == DIST_SERVER ? "server" : "trainer", idx);
}

int dist_begin(const dist_layout *l) {
    int rc = comm_init(NULL, NULL);
    if (rc) {
        fprintf(stderr, "bagpipe: %s\n", bp_errmsg(rc));
        return rc;
    }
    if (comm_size() != dist_ranks(l)) { // said once, by rank 0, before the barrier (see dist.h)
        if (comm_rank() == 0)
            fprintf(stderr,
                    "bagpipe: this job has %d ranks, but --servers %d --trainers %d needs 1 + %d + %d = %d "
                    "(mpirun -np %d, or run bagpipe without mpirun to start the job itself)\n",
                    comm_size(), l->S, l->T, l->S, l->T, dist_ranks(l), dist_ranks(l));
        (void)comm_barrier();
        comm_finalize();
        return BP_EMISMATCH;
    }
    return 0;
}

// n ranks from `first` in one role: "rank 1 server 0", "ranks 1-2 servers 0-1".
static const char *rank_span(char *buf, size_t cap, int first, int n, const char *role) {
    if (n == 1) snprintf(buf, cap, "rank %d %s 0", first, role);
    else snprintf(buf, cap, "ranks %d-%d %ss 0-%d", first, first + n - 1, role, n - 1);
    return buf;
}

static void print_layout(const train_setup *su, const dist_layout *l) {
    char sv[64], tr[64];
    rank_span(tr, sizeof tr, l->S + 1, l->T, "trainer");
    if (l->S > 0)
        printf("layout: %d ranks: rank 0 oracle (coordinator), %s, %s\n", dist_ranks(l),
               rank_span(sv, sizeof sv, 1, l->S, "server"), tr);
    else
        printf("layout: %d ranks: rank 0 oracle (coordinator), %s (rows sharded over the trainers)\n", dist_ranks(l),
               tr);
    char arch[512];
    model_config_format(&su->mc, arch, sizeof arch);
    char sched[128];
    printf("model: %s (%d-float rows, %s/%s optimizers, lr %g%s)\n", arch, su->mc.E,
           su->dopt.kind == DENSE_OPT_SGD ? "sgd" : "adagrad", emb_opt_kind_flag(su->eopt.kind), su->lr,
           train_lr_note(su, sched, sizeof sched));
    printf("data: %s, train %llu rows, %lld iteration%s of %d (%.2f epochs), mode %s\n", su->data_path,
           (unsigned long long)(su->tr1 - su->tr0), (long long)su->total_iters, su->total_iters == 1 ? "" : "s", su->B,
           (double)su->total_iters / (double)su->per_epoch, dist_mode_name(l->mode));
    if (su->mode == TRAIN_MODE_BAGPIPE)
        printf("cache: %llu rows per trainer, lookahead %d, prefetch %d%s%s%s\n", (unsigned long long)su->cache_rows,
               su->lookahead, su->prefetch, su->oracle_parts == 2 || su->oracle_threads == 2 ? ", oracle" : "",
               su->oracle_parts == 2 ? " split by tables in 2 parts" : "", su->oracle_threads == 2 ? " on 2 threads" : "");
    if (l->mode == DIST_MODE_ASYNC)
        printf("cache: %llu rows per trainer, %s, staleness bound %d iterations\n", (unsigned long long)su->cache_rows,
               su->cache_policy == TRAIN_CACHE_LFU ? "LFU" : "LRU", su->staleness);
    fflush(stdout);
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM), 0 when missing.
static uint64_t status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    const size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

enum { END_ALIVE = 3 }; // END's phase of the lone trainer's sign of life (dist_alive)

static int end_send(int to, uint64_t phase, comm_req *q, uint64_t *buf) {
    msg_header h = {MSG_END, 0, phase, 0, 0};
    msg_encode(buf, &h, NULL, NULL);
    return comm_isend(buf, MSG_HEADER_BYTES, to, MSG_END, q);
}

// Receives END(phase) from `from`; phase -1: any phase, which *got receives.
static int end_recv_any(int from, int64_t phase, uint64_t *got) {
    uint64_t buf[MSG_HEADER_BYTES / 8];
    size_t len = 0;
    int rc = comm_recv(buf, sizeof buf, from, MSG_END, &len);
    msg_expect ex = {.kind = MSG_END, .max_n = 0, .iter = phase};
    msg_header h;
    if (!rc) rc = msg_decode(buf, len, from, &ex, &h, NULL, NULL);
    if (!rc && got) *got = h.iter;
    return rc;
}
static int end_recv(int from, uint64_t phase) { return end_recv_any(from, (int64_t)phase, NULL); }

void dist_alive_init(dist_alive *a, int T, int S, int i) {
    memset(a, 0, sizeof *a);
    a->on = T == 1 && S == 0 && i == 0 && comm_stall_timeout() > 0;
    a->last = bp_now();
}

int dist_alive_tick(dist_alive *a, int force) {
    if (!a->on || (!force && bp_now() - a->last < 0.5 * comm_stall_timeout())) return 0;
    int rc = a->live ? comm_wait(&a->q, NULL) : 0;
    a->live = 0;
    if (!rc && (rc = end_send(0, END_ALIVE, &a->q, a->buf)) == 0) a->live = 1;
    a->last = bp_now();
    return rc;
}

int dist_alive_finish(dist_alive *a) {
    int rc = a->live ? comm_wait(&a->q, NULL) : 0;
    a->live = 0;
    return rc;
}

// The end of a job.  The final barrier cannot be timed: a rank that is done waits there while
// trainer 0 (the writer) evaluates and saves.  But a rank stopped or cut off meanwhile would
// hang the barrier for ever, and the coordinator (rank 0, idle through the run outside mode
// bagpipe) is the one rank nobody exchanges messages with before it.  So the barrier is preceded
// by a handshake with the writer, under the stall timeout (MSG_END, msg.h):
//   every other rank sends END(0) to the writer once its part is over;
//   the writer, its own part over, receives them (naming a rank that does not finish), sends
//   END(1) to every rank and receives END(2) back from each (naming a rank that is done but no
//   longer answers);
//   the others wait for END(1) for COMM_STALL_INDIRECT x S (the writer evaluates and saves
//   meanwhile, as a server waiting for its DONE allows), the idle coordinator for ever (it waits
//   from the start), and answer with END(2).
// With one trainer and no servers (mode sharded) nobody else would miss a silent writer, so it
// sends the idle coordinator END(3) every S / 2 seconds while it trains and once when it is done
// (dist_alive, dist.h), and the coordinator waits for each of those, then END(1), for
// COMM_STALL_INDIRECT x S (a boundary's evaluation and checkpoint, or the final evaluation and
// save, come between two).
// END(0) goes first so that END(1) reaches a server only after its loop, which takes any tag, is
// over.  Test hook: BAGPIPE_TEST_STOP_AT_END=R stops rank R here (SIGSTOP), past its END(0).
static int dist_end(const dist_layout *l, int me, int idle) {
    const int writer = dist_trainer_rank(l, 0), n = comm_size();
    const char *stop = getenv("BAGPIPE_TEST_STOP_AT_END");
    const int stop_here = stop && *stop && atoi(stop) == me;
    uint64_t buf[MSG_HEADER_BYTES / 8];
    comm_req q;
    int rc = 0;
    if (me != writer) {
        rc = end_send(writer, 0, &q, buf);
        if (!rc) rc = comm_wait(&q, NULL);
        if (stop_here) raise(SIGSTOP);
        const int alive = idle && l->T == 1 && l->S == 0 && comm_stall_timeout() > 0; // dist_alive_init's case
        comm_set_patience(writer, idle && !alive ? 0 : COMM_STALL_INDIRECT);
        uint64_t phase = END_ALIVE;
        while (!rc && phase == END_ALIVE) {
            rc = end_recv_any(writer, alive ? -1 : 1, &phase);
            if (!rc && phase != 1 && phase != END_ALIVE)
                rc = bp_fail(BP_EFORMAT, "rank %d: END(%llu) from the writer (rank %d), expected END(1)", me,
                             (unsigned long long)phase, writer);
        }
        if (!rc) rc = end_send(writer, 2, &q, buf);
        return rc ? rc : comm_wait(&q, NULL);
    }
    if (stop_here) raise(SIGSTOP);
    for (int r = 0; r < n && !rc; r++)
        if (r != writer) rc = end_recv(r, 0);
    uint64_t *bufs = bp_xmalloc((size_t)n * MSG_HEADER_BYTES);
    comm_req *qs = bp_xcalloc((size_t)n, sizeof *qs);
    int sent = 0;
    for (int r = 0; r < n && !rc; r++)
        if (r != writer) rc = end_send(r, 1, &qs[sent], bufs + (size_t)sent * (MSG_HEADER_BYTES / 8)), sent++;
    for (int r = 0; r < n && !rc; r++)
        if (r != writer) rc = end_recv(r, 2);
    if (!rc) rc = comm_waitall(qs, sent);
    free(bufs), free(qs);
    return rc;
}

// The start-up agreement: every rank sends rank 0 its setup result and its host (MSG_START, a
// start_msg); rank 0 then finishes its own setup, which needs them (the memory plan held against
// each host under the user's launcher, and in mode bagpipe the oracle), and sends each rank the
// lowest failing rank and its result (out[0] = -1: none).  Under the stall timeout: a rank
// stopped or cut off while it sets up (opens the dataset, verifies the checkpoint it resumes
// from) is named by rank 0 within S, a silent rank 0 by the others within COMM_STALL_INDIRECT x S
// (it waits for the slowest rank meanwhile); an all-gather used to wait for it for ever.  Test
// hook: BAGPIPE_TEST_STOP_AT_START=R stops rank R here (SIGSTOP), before it reports.
typedef struct {
    int32_t rc;
    int32_t start; // the iteration its --resume checkpoint is at (0: none; -1: beyond 32 bits, not compared)
    dist_host host;
    uint64_t data; // its dataset's contents (data_print; 0: none, not compared)
} start_msg;
_Static_assert(sizeof(start_msg) == 88, "tests/test_badinput.c's stand-in peer sends an 88-byte START");

static int32_t start_field(const train_setup *su) {
    return su->ck.start_iter <= INT32_MAX ? (int32_t)su->ck.start_iter : -1;
}

// The dataset a rank reads, by its header's section checksums and its rows (never 0), or 0 where
// its setup did not open one.
static uint64_t data_print(const train_setup *su) {
    if (!su->ds) return 0;
    const bp_ds_info *in = &su->ds->info;
    uint64_t h = (uint64_t)in->crc_label << 32 ^ in->crc_dense;
    h = h * 0x9E3779B97F4A7C15ull ^ in->crc_sparse ^ in->rows << 20;
    return h | 1;
}

static int dist_agree(const train_setup *su, const dist_layout *l, int me, int n, int *setup_rc, role_oracle **ro,
                      int32_t out[2]) {
    const char *stop = getenv("BAGPIPE_TEST_STOP_AT_START");
    if (stop && *stop && atoi(stop) == me) raise(SIGSTOP);
    size_t len = 0;
    int rc = 0;
    comm_req q;
    if (me != 0) {
        start_msg mine = {.rc = *setup_rc, .start = start_field(su), .data = *setup_rc ? 0 : data_print(su)};
        dist_host_self(&mine.host, me);
        rc = comm_isend(&mine, sizeof mine, 0, MSG_START, &q);
        if (!rc) rc = comm_wait(&q, NULL);
        comm_set_patience(0, COMM_STALL_INDIRECT);
        if (!rc) rc = comm_recv(out, 2 * sizeof *out, 0, MSG_START, &len);
        comm_set_patience(0, 1);
        if (!rc && len != 2 * sizeof *out)
            rc = bp_fail(BP_EFORMAT, "msg: START from rank 0: %zu bytes, expected %zu", len, 2 * sizeof *out);
        return rc;
    }
    dist_host *hosts = bp_xcalloc((size_t)n, sizeof *hosts);
    dist_host_self(&hosts[0], 0);
    out[0] = *setup_rc ? 0 : -1, out[1] = *setup_rc;
    for (int r = 1; r < n && !rc; r++) {
        start_msg m;
        rc = comm_recv(&m, sizeof m, r, MSG_START, &len);
        if (!rc && len != sizeof m)
            rc = bp_fail(BP_EFORMAT, "msg: START from rank %d: %zu bytes, expected %zu", r, len, sizeof m);
        if (rc) break;
        hosts[r] = m.host;
        hosts[r].name[sizeof hosts[r].name - 1] = 0;
        if (m.rc && out[0] < 0) out[0] = r, out[1] = m.rc;
        // Every rank must resume from the same checkpoint: ranks that see the --resume directory
        // differently (node-local disks, a stale NFS view) each took their own newest, and the job
        // then hung or failed on a message of the wrong iteration.
        const int32_t s0 = start_field(su);
        const uint64_t d0 = *setup_rc ? 0 : data_print(su);
        if (!m.rc && !*setup_rc && out[0] < 0 && m.data && d0 && m.data != d0) {
            // A stale or other copy of the dataset at the same path on the rank's host: it trained
            // on other samples than the rest of the job, silently (or failed on a plan's keys).
            char rr[64];
            dist_role_name(r, l, rr, sizeof rr);
            *setup_rc = bp_fail(BP_EMISMATCH, "%s: rank %d (%s, host %s) reads another dataset at this path than rank "
                                "0 (host %s): their headers' checksums or rows differ; every rank must read the same "
                                "file (a stale copy on one host?)", su->data_path, r, rr, hosts[r].name,
                                hosts[0].name);
        }
        if (!m.rc && !*setup_rc && out[0] < 0 && m.start != s0 && m.start >= 0 && s0 >= 0) {
            char rr[64];
            dist_role_name(r, l, rr, sizeof rr);
            *setup_rc = bp_fail(BP_EMISMATCH, "--resume %s: rank %d (%s) resumes from the checkpoint at iteration %d, "
                                "rank 0 from the one at %d: the ranks do not see the same checkpoint directory; every "
                                "rank must see one directory, on a shared file system", su->ck.resume, r, rr, m.start,
                                s0);
        }
    }
    // Rank 0's own setup, once every rank could start: the launcher has checked the memory of a
    // job it started itself (every rank on this host); under the user's mpirun/srun the ranks may
    // be on several hosts, each held to its own memory here.
    if (!rc && out[0] < 0 && !*setup_rc && !getenv(LAUNCH_ENV_SELF)) *setup_rc = dist_mem_check(su, l, hosts);
    if (!rc && out[0] < 0 && !*setup_rc && su->mode == TRAIN_MODE_BAGPIPE) *setup_rc = role_oracle_prepare(ro, su, l);
    if (!rc && out[0] < 0 && *setup_rc) out[0] = 0, out[1] = *setup_rc;
    free(hosts);
    comm_req *qs = bp_xcalloc((size_t)n, sizeof *qs);
    int sent = 0;
    for (int r = 1; r < n && !rc; r++) rc = comm_isend(out, 2 * sizeof *out, r, MSG_START, &qs[sent++]);
    if (!rc) rc = comm_waitall(qs, sent);
    free(qs);
    return rc;
}

static int failed_at_start; // dist_failed_at_start

int dist_failed_at_start(void) { return failed_at_start; }

int dist_run(const train_setup *su, const dist_layout *l, int setup_rc) {
    const int me = comm_rank(), n = comm_size();
    // test hook (tests/test_dist_mem.c): each rank reports its peak resident memory above what it
    // held when it got here, for comparison with the memory plan
    const char *mem_hook = getenv("BAGPIPE_TEST_MEM_REPORT");
    const int mem_report = mem_hook && *mem_hook == '1';
    const uint64_t rss0 = mem_report ? status_bytes("VmRSS") : 0, file0 = mem_report ? status_bytes("RssFile") : 0;
    ckpt_test_pidfile(me);
    char role[64];
    dist_role_name(me, l, role, sizeof role);
    role_oracle *ro = NULL; // rank 0 in mode bagpipe: prepared in dist_agree
    int idx;
    const dist_role role_kind = dist_role_of(l, me, &idx);
    if (!setup_rc && role_kind == DIST_TRAINER && l->mode == DIST_MODE_ASYNC) setup_rc = role_async_check(su, l, idx);
    int32_t agreed[2];
    int rc = dist_agree(su, l, me, n, &setup_rc, &ro, agreed);
    if (rc) {
        fprintf(stderr, "bagpipe: rank %d (%s): %s\n", me, role, bp_errmsg(rc));
        comm_abort(1);
    }
    const int first_bad = agreed[0], code = agreed[1];
    failed_at_start = first_bad >= 0;
    if (first_bad >= 0) {
        // The lowest failing rank reports and alone exits non-zero, so that mpirun (and the
        // launcher's "job failed: rank R (ROLE)" line) names it, not whichever rank left first;
        // every rank leaves cleanly.
        // Under the user's own mpirun (or srun) nothing else names the rank: the launcher's line
        // does that for a job it started.
        if (me == first_bad && getenv(LAUNCH_ENV_SELF)) fprintf(stderr, "bagpipe: %s\n", bp_errmsg(setup_rc));
        else if (me == first_bad) fprintf(stderr, "bagpipe: rank %d (%s): %s\n", me, role, bp_errmsg(setup_rc));
        role_oracle_free(ro);
        train_drop_made_roots(); // before the barrier: the failing rank's exit may end this one
        (void)comm_barrier();
        comm_finalize();
        return me != first_bad ? 0 : code == BP_EUSAGE ? 2 : 1;
    }
    if (me == 0) print_layout(su, l);
    const dist_role r = role_kind;
    if (r == DIST_TRAINER) { // see COMM_STALL_TRAINER and COMM_STALL_SERVER
        for (int i = 0; i < l->T; i++)
            if (dist_trainer_rank(l, i) != me) comm_set_patience(dist_trainer_rank(l, i), COMM_STALL_TRAINER);
        for (int s = 0; s < l->S && l->mode != DIST_MODE_BAGPIPE; s++)
            comm_set_patience(dist_server_rank(l, s), COMM_STALL_SERVER);
    }
    if (r == DIST_SERVER) rc = role_server_run(su, l, idx);
    else if (r == DIST_TRAINER && su->mode == TRAIN_MODE_BAGPIPE) rc = role_bagpipe_trainer_run(su, l, idx);
    else if (r == DIST_TRAINER && l->mode == DIST_MODE_SHARDED) rc = role_sharded_run(su, l, idx);
    else if (r == DIST_TRAINER && l->mode == DIST_MODE_STATIC) rc = role_static_run(su, l, idx);
    else if (r == DIST_TRAINER && l->mode == DIST_MODE_ASYNC) rc = role_async_run(su, l, idx);
    else if (r == DIST_TRAINER) rc = role_trainer_run(su, l, idx);
    else if (ro) rc = role_oracle_run(ro);
    // Summary, metrics and --save are written: a rank failing from here on, or a Ctrl-C, stops nothing
    // that was asked for (the launcher says so and exits 0), though rank 0's oracle report below
    // may then be cut off.
    if (!rc && me == dist_trainer_rank(l, 0)) launch_report_results();
    if (rc) {
        fprintf(stderr, "bagpipe: rank %d (%s): %s\n", me, role, bp_errmsg(rc));
        comm_abort(1);
    }
    rc = dist_end(l, me, me == 0 && !ro);
    // The oracle's report goes out before the barrier after which the writer tells the launcher
    // that the job is done (launch_report_done): a Ctrl-C after that does not cut it off.
    if (!rc && ro) role_oracle_report(ro), fflush(stdout);
    if (!rc) rc = comm_barrier();
    if (rc) {
        fprintf(stderr, "bagpipe: rank %d (%s): %s\n", me, role, bp_errmsg(rc));
        comm_abort(1);
    }
    if (mem_report) {
        // less the dataset's pages read meanwhile (file-backed, still mapped: RssFile only grows)
        const uint64_t file = status_bytes("RssFile") - file0;
        printf("memory used: rank %d (%s): %lld bytes\n", me, role, (long long)(status_bytes("VmHWM") - rss0 - file));
        fflush(stdout);
    }
    role_oracle_free(ro);
    fflush(stdout);
    if (me == dist_trainer_rank(l, 0)) launch_report_done();
    comm_finalize();
    return 0;
}
