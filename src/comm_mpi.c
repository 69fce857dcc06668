// comm over MPI: the only file that includes mpi.h.  Contracts in comm.h.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "common.h"
#include "msg.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((comm_req *)0)->opaque), "comm_req too small for MPI_Request");

static uint64_t bytes_sent[COMM_MAX_TAGS], bytes_recv[COMM_MAX_TAGS];
static int my_rank = -1, n_ranks = 0;
static double *patience; // (n_ranks) comm_set_patience's factors, NULL before comm_init

static MPI_Request *req_of(comm_req *r) { return (MPI_Request *)(void *)r->opaque; }

static int mpi_fail(int err, const char *what, int peer) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    return bp_fail(BP_EPEER, "comm: rank %d: %s (peer %d): %s", my_rank, what, peer, s);
}

// The stall timeout (comm_set_stall_timeout): 0 waits forever.
static double stall_s = 0;

void comm_set_stall_timeout(double seconds) { stall_s = seconds > 0 ? seconds : 0; }
double comm_stall_timeout(void) { return stall_s; }

// "GSYNC from rank 3", "rank 3 to take FETCH", "a message from any rank": what a wait on
// (peer, tag) of a receive (recv = 1) or a send is for.
static void wait_what(char *b, size_t n, int recv, int peer, int tag) {
    char kind[48] = "a message";
    if (tag >= 0) snprintf(kind, sizeof kind, "%s", msg_kind_name((uint32_t)tag));
    if (peer < 0) snprintf(b, n, "%s from any rank", kind);
    else if (recv) snprintf(b, n, "%s from rank %d", kind, peer);
    else snprintf(b, n, "rank %d to take %s", peer, kind);
}

// Seconds waited once `limit` seconds have passed since *since, else 0 (the first call starts
// the clock).
static double stalled_for(double *since, double limit) {
    if (limit <= 0) return 0;
    const double now = bp_now();
    if (*since <= 0) {
        *since = now;
        return 0;
    }
    return now - *since >= limit ? now - *since : 0;
}

static int stall_fail(double waited, const char *what) {
    return bp_fail(BP_EPEER, "comm: rank %d: waited %.0f s for %s with no progress (--stall-timeout %g): a peer "
                   "is stopped, deadlocked or cut off", my_rank, waited, what, stall_s);
}

void comm_set_patience(int peer, double factor) {
    if (patience && peer >= 0 && peer < n_ranks) patience[peer] = factor;
}

// The stall limit of a wait on `peer` (COMM_ANY or negative: any rank).
static double limit_for(int peer) {
    if (peer < 0) return COMM_STALL_INDIRECT * stall_s;
    return (patience && peer < n_ranks ? patience[peer] : 1.0) * stall_s;
}

int comm_stall_check(double *since, int peer, const char *what) {
    const double w = stalled_for(since, limit_for(peer));
    return w > 0 ? stall_fail(w, what) : 0;
}

int comm_stall_check_indirect(double *since, const char *what) {
    const double w = stalled_for(since, COMM_STALL_INDIRECT * stall_s);
    return w > 0 ? stall_fail(w, what) : 0;
}

// Poll pacing: spin briefly, then sleep with exponential back-off up to COMM_MAX_SLEEP_US; the
// stall clock starts with the first sleep and is read every 64 polls.  The collective operation
// (comm_barrier: no peer, no tag, not a receive; the final barrier) is not timed: a rank that is
// done waits there for as long as the others train, evaluate and save, and a stalled peer is
// caught by the ranks that exchange messages with it (servers waiting for any message included),
// or, if it is silent only at the end, by the handshake that precedes the final barrier (dist.c).
typedef struct {
    int polls;
    long sleep_ns;
    double since;
} pacer;

// blame, blame_what: the rank the wait is for and what it waits for, when the wait itself is on
// any rank (comm_probe_blame); else -1 and NULL.
static int pacer_pause_blame(pacer *p, int recv, int peer, int tag, int blame, const char *blame_what) {
    if (++p->polls < 64) return 0;
    p->sleep_ns = p->sleep_ns ? BP_MIN(p->sleep_ns * 2, (long)COMM_MAX_SLEEP_US * 1000) : 2000;
    bp_sleep_ns(p->sleep_ns);
    if (stall_s <= 0 || (p->polls & 63) != 0 || (!recv && peer < 0 && tag < 0)) return 0;
    const double w = stalled_for(&p->since, limit_for(blame >= 0 ? blame : peer));
    if (w <= 0) return 0;
    if (blame_what) return stall_fail(w, blame_what);
    char what[128];
    wait_what(what, sizeof what, recv, peer, tag);
    return stall_fail(w, what);
}

static int pacer_pause(pacer *p, int recv, int peer, int tag) {
    return pacer_pause_blame(p, recv, peer, tag, -1, NULL);
}

int comm_init(int *argc, char ***argv) {
    int provided = 0;
    int err = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (err != MPI_SUCCESS) return bp_fail(BP_EPEER, "comm: MPI_Init_thread failed (%d)", err);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n_ranks);
    patience = bp_xmalloc((size_t)n_ranks * sizeof *patience);
    for (int r = 0; r < n_ranks; r++) patience[r] = 1.0;
    return 0;
}

void comm_finalize(void) {
    MPI_Finalize();
    free(patience), patience = NULL;
}
int comm_rank(void) { return my_rank; }
int comm_size(void) { return n_ranks; }

_Noreturn void comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); // MPI_Abort does not return; keep the compiler sure of it
}

static int tag_index(int tag) { return tag >= 0 && tag < COMM_MAX_TAGS ? tag : 0; }

// MPI counts are ints: one message carries at most INT32_MAX bytes.  A larger one (a fetch reply
// or plan of an enormous batch) is a configuration this job cannot run, reported as such.
static int too_big(size_t bytes, int recv, int peer, int tag) {
    char what[128];
    wait_what(what, sizeof what, recv, peer, tag);
    return bp_fail(BP_ECAPACITY, "comm: rank %d: a message of %zu bytes (%s) exceeds the %d bytes one message can "
                   "carry; a smaller --batch-size, or more servers for row messages, makes smaller messages",
                   my_rank, bytes, what, INT32_MAX);
}

int comm_isend(const void *buf, size_t bytes, int dst, int tag, comm_req *r) {
    if (bytes > (size_t)INT32_MAX) return too_big(bytes, 0, dst, tag);
    r->peer = dst, r->tag = tag, r->cap = 0;
    int err = MPI_Isend(buf, (int)bytes, MPI_BYTE, dst, tag, MPI_COMM_WORLD, req_of(r));
    if (err != MPI_SUCCESS) return mpi_fail(err, "send", dst);
    bytes_sent[tag_index(tag)] += bytes;
    return 0;
}

int comm_irecv(void *buf, size_t cap, int src, int tag, comm_req *r) {
    if (cap > (size_t)INT32_MAX) return too_big(cap, 1, src, tag);
    r->peer = src, r->tag = tag, r->cap = cap ? cap : 1;
    int err = MPI_Irecv(buf, (int)cap, MPI_BYTE, src == COMM_ANY ? MPI_ANY_SOURCE : src,
                        tag == COMM_ANY ? MPI_ANY_TAG : tag, MPI_COMM_WORLD, req_of(r));
    if (err != MPI_SUCCESS) return mpi_fail(err, "receive", src);
    return 0;
}

int comm_test(comm_req *r, int *done, size_t *bytes) {
    MPI_Status st;
    int flag = 0;
    int err = MPI_Test(req_of(r), &flag, &st);
    if (err != MPI_SUCCESS) return mpi_fail(err, r->cap ? "receive" : "send", r->peer);
    *done = flag;
    if (flag && r->cap) {
        int cnt = 0;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        bytes_recv[tag_index(st.MPI_TAG)] += (uint64_t)cnt;
        if (bytes) *bytes = (size_t)cnt;
    }
    return 0;
}

int comm_wait(comm_req *r, size_t *bytes) {
    pacer p = {0, 0, 0};
    for (;;) {
        int done = 0, rc = comm_test(r, &done, bytes);
        if (rc || done) return rc;
        if ((rc = pacer_pause(&p, r->cap != 0, r->peer, r->tag))) return rc;
    }
}

int comm_waitall(comm_req *r, int n) {
    for (int i = 0; i < n; i++) {
        int rc = comm_wait(&r[i], NULL);
        if (rc) return rc;
    }
    return 0;
}

static int probe_impl(int src, int tag, int blame, const char *blame_what, int *from, int *got_tag, size_t *bytes) {
    pacer p = {0, 0, 0};
    for (;;) {
        MPI_Status st;
        int flag = 0;
        int err = MPI_Iprobe(src == COMM_ANY ? MPI_ANY_SOURCE : src, tag == COMM_ANY ? MPI_ANY_TAG : tag,
                             MPI_COMM_WORLD, &flag, &st);
        if (err != MPI_SUCCESS) return mpi_fail(err, "probe", src);
        if (flag) {
            int cnt = 0;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            if (from) *from = st.MPI_SOURCE;
            if (got_tag) *got_tag = st.MPI_TAG;
            if (bytes) *bytes = (size_t)cnt;
            return 0;
        }
        int rc = pacer_pause_blame(&p, 1, src, tag, blame, blame_what);
        if (rc) return rc;
    }
}

int comm_probe(int src, int tag, int *from, int *got_tag, size_t *bytes) {
    return probe_impl(src, tag, -1, NULL, from, got_tag, bytes);
}

int comm_probe_blame(int blame, const char *what, int *from, int *got_tag, size_t *bytes) {
    return probe_impl(COMM_ANY, COMM_ANY, blame, what, from, got_tag, bytes);
}

int comm_recv(void *buf, size_t cap, int src, int tag, size_t *bytes) {
    comm_req r;
    int rc = comm_irecv(buf, cap, src, tag, &r);
    return rc ? rc : comm_wait(&r, bytes);
}

int comm_barrier(void) {
    comm_req r = {.peer = -1, .tag = -1, .cap = 0};
    int err = MPI_Ibarrier(MPI_COMM_WORLD, req_of(&r));
    if (err != MPI_SUCCESS) return mpi_fail(err, "barrier", -1);
    return comm_wait(&r, NULL);
}

// The all-reduce over raw bytes: chunk c of participant p is sent to participant c; the owner
// sums its chunk's np contributions in participant order; then every owner sends its result to
// all others.  copy_add(dst, src, n): dst[i] += src[i] in the element type.
static int allreduce_bytes(void *buf, size_t n, size_t esz, int first, int np, void *work,
                           void (*copy_add)(void *dst, const void *src, size_t n)) {
    const int me = my_rank - first;
    BP_ASSERTF(me >= 0 && me < np, "comm: rank %d is not among the all-reduce's ranks [%d, %d)", my_rank, first,
               first + np);
    if (np == 1 || n == 0) return 0;
    enum { MAXP = 1024 };
    BP_ASSERT(np <= MAXP);
    comm_req reqs[2 * MAXP];
    char *b = buf, *w = work;
    const size_t cmax = (n + (size_t)np - 1) / (size_t)np;
#define CH0(c) ((size_t)(c) * n / (size_t)np)
#define CHN(c) (CH0((c) + 1) - CH0(c))
    // Reduce-scatter: receive the others' parts of my chunk into work[p], send my parts.
    int nr = 0;
    for (int p = 0; p < np; p++) {
        if (p == me) continue;
        int rc = comm_irecv(w + (size_t)p * cmax * esz, CHN(me) * esz, first + p, MSG_AR_RS, &reqs[nr++]);
        if (rc) return rc;
    }
    for (int p = 0; p < np; p++) {
        if (p == me) continue;
        int rc = comm_isend(b + CH0(p) * esz, CHN(p) * esz, first + p, MSG_AR_RS, &reqs[nr++]);
        if (rc) return rc;
    }
    for (int i = 0; i < nr; i++) {
        size_t got = 0;
        int rc = comm_wait(&reqs[i], &got);
        if (rc) return rc;
        if (reqs[i].cap && got != CHN(me) * esz)
            return bp_fail(BP_EFORMAT, "comm: all-reduce chunk of %zu bytes from rank %d, expected %zu", got,
                           reqs[i].peer, CHN(me) * esz);
    }
    // My chunk: contributions in participant order, the first one copied.
    char *mine = b + CH0(me) * esz;
    const size_t cn = CHN(me);
    if (me != 0) {
        // participant 0's part is in work[0]; start from it, then add 1..np-1 (mine in place).
        char *tmp = w + (size_t)me * cmax * esz; // my own slot in work is unused: hold my part there
        memcpy(tmp, mine, cn * esz);
        memcpy(mine, w, cn * esz);
        for (int p = 1; p < np; p++) copy_add(mine, w + (size_t)p * cmax * esz, cn);
    } else {
        for (int p = 1; p < np; p++) copy_add(mine, w + (size_t)p * cmax * esz, cn);
    }
    // All-gather: send my reduced chunk to everyone, receive theirs in place.
    nr = 0;
    for (int p = 0; p < np; p++) {
        if (p == me) continue;
        int rc = comm_irecv(b + CH0(p) * esz, CHN(p) * esz, first + p, MSG_AR_AG, &reqs[nr++]);
        if (rc) return rc;
    }
    for (int p = 0; p < np; p++) {
        if (p == me) continue;
        int rc = comm_isend(mine, cn * esz, first + p, MSG_AR_AG, &reqs[nr++]);
        if (rc) return rc;
    }
    for (int i = 0; i < nr; i++) {
        size_t got = 0;
        int rc = comm_wait(&reqs[i], &got);
        if (rc) return rc;
        if (reqs[i].cap && got != CHN(reqs[i].peer - first) * esz)
            return bp_fail(BP_EFORMAT, "comm: all-gather chunk of %zu bytes from rank %d, expected %zu", got,
                           reqs[i].peer, CHN(reqs[i].peer - first) * esz);
    }
#undef CH0
#undef CHN
    return 0;
}

static void add_f32(void *dst, const void *src, size_t n) {
    float *d = dst;
    const float *s = src;
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

static void add_f64(void *dst, const void *src, size_t n) {
    double *d = dst;
    const double *s = src;
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

int comm_allreduce_sum_f32(float *buf, size_t n, int first, int np, float *work) {
    return allreduce_bytes(buf, n, sizeof(float), first, np, work, add_f32);
}

int comm_allreduce_sum_f64(double *buf, size_t n, int first, int np, double *work) {
    return allreduce_bytes(buf, n, sizeof(double), first, np, work, add_f64);
}

uint64_t comm_bytes_sent(int tag) { return bytes_sent[tag_index(tag)]; }
uint64_t comm_bytes_recv(int tag) { return bytes_recv[tag_index(tag)]; }
void comm_bytes_reset(void) {
    memset(bytes_sent, 0, sizeof bytes_sent);
    memset(bytes_recv, 0, sizeof bytes_recv);
}
