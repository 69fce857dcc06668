// comm: the message layer of the distributed modes, a thin layer over MPI (comm_mpi.c is the only
// file that includes mpi.h).
//
// Threading: exactly one thread per process calls into comm (Open MPI 4.1 is pathological when
// several threads block in MPI at once).  Waiting never blocks inside MPI: comm_wait polls
// MPI_Test / MPI_Iprobe and, after a short spin, sleeps between polls (backing off up to
// COMM_MAX_SLEEP_US), so an idle rank leaves the cores to the ranks that compute, which matters
// when ranks outnumber cores.
//
// Errors: MPI errors are returned (MPI_ERRORS_RETURN), turned into BP_EPEER with a message naming
// the operation and the peer.  A dead peer usually takes the whole job down through mpirun first.
// A live peer that stops taking part (stopped, deadlocked, cut off) is caught by the stall
// timeout: a wait that sees no progress for that long fails with BP_EPEER, naming what it waited
// for (`train --stall-timeout`, like the timeout of PyTorch's process groups).
//
// Byte counters: every send and receive adds its bytes to the counter of its tag (the message
// kind, msg.h); the all-reduce counts under MSG_AR_RS / MSG_AR_AG.
#ifndef BP_COMM_H
#define BP_COMM_H

#include <stddef.h>
#include <stdint.h>

#define COMM_MAX_TAGS 32
#define COMM_MAX_SLEEP_US 200
#define COMM_ANY (-1) // any source / any tag

typedef struct {
    uint64_t opaque[2]; // an MPI_Request
    int peer, tag;      // for messages and the receive counter
    size_t cap;         // receive capacity (0 for sends)
} comm_req;

// MPI_Init (thread level FUNNELED: only the main thread calls MPI) and MPI_Finalize.
int comm_init(int *argc, char ***argv);
void comm_finalize(void);
int comm_rank(void);
int comm_size(void);
// Ends every rank of the job with exit code `code` (MPI_Abort).  For the top of a role only.
_Noreturn void comm_abort(int code);

// The stall timeout in seconds (0, the default: wait forever).  comm_wait and comm_probe apply
// it; a role's own polling loop calls comm_stall_check(&since, what) on each idle pass, with
// since = 0 at the start of the wait and after any progress.
void comm_set_stall_timeout(double seconds);
double comm_stall_timeout(void);
// A wait on rank `peer` (a role's own polling loop; comm_wait and comm_probe apply the same).
int comm_stall_check(double *since, int peer, const char *what);
// A wait that no single peer can end (a receive from any rank, the oracle's credits, which the
// slowest trainer sends only when its own peers let it go on) is allowed COMM_STALL_INDIRECT
// times the timeout: a stalled rank is then reported by a rank that waits for it by name.
#define COMM_STALL_INDIRECT 2
int comm_stall_check_indirect(double *since, const char *what);
// Waits on one peer time out after factor x the timeout (1 unless set, after comm_init; 0: never).  A
// trainer waits COMM_STALL_TRAINER x on the other trainers: a trainer it waits for (a forward, a
// gradient exchange) may itself be waiting for a stopped server, which the ranks waiting on that
// server directly (1x) must name first; a stopped trainer is still named by its peers before any
// wait that names no one fires (COMM_STALL_INDIRECT).
#define COMM_STALL_TRAINER 1.5
// A trainer of the modes that pull rows from servers every iteration (sync, static, async) waits
// COMM_STALL_SERVER x on the servers: a server holds a trainer's request until every trainer's push
// of the iteration before has come, and while it holds one it waits (1x) for the missing push by
// name (comm_probe_blame), so a stopped trainer is named by the servers before its peers, waiting
// for their rows, name the server.  Below COMM_STALL_TRAINER: a stopped server is still named by
// the trainers waiting on it before a trainer waiting on one of them names that one.
#define COMM_STALL_SERVER 1.25
void comm_set_patience(int peer, double factor);

// Non-blocking point to point.  The buffer must stay valid until the request completes.  One
// message carries at most INT32_MAX bytes; a larger one fails with BP_ECAPACITY (nothing is sent).
int comm_isend(const void *buf, size_t bytes, int dst, int tag, comm_req *r);
int comm_irecv(void *buf, size_t cap, int src, int tag, comm_req *r);
// *done = 1 when complete; for a receive, *bytes (may be NULL) gets the received length.
int comm_test(comm_req *r, int *done, size_t *bytes);
int comm_wait(comm_req *r, size_t *bytes);
int comm_waitall(comm_req *r, int n);
// Waits for a message matching (src, tag) (COMM_ANY for either) and reports who sent it, its tag
// and its length, without receiving it.
int comm_probe(int src, int tag, int *from, int *got_tag, size_t *bytes);
// comm_probe of any message whose wait is for rank `blame` (a server holding requests until that
// trainer's push comes): the stall limit is blame's, and a stall names `what` ("GRAD_PUSH from
// rank 3 ...") instead of "a message from any rank".
int comm_probe_blame(int blame, const char *what, int *from, int *got_tag, size_t *bytes);
// Receives exactly one message from (src, tag) into buf (cap bytes); longer is an error.
int comm_recv(void *buf, size_t cap, int src, int tag, size_t *bytes);

// A barrier over every rank (non-blocking barrier + polling).
int comm_barrier(void);

// Deterministic sum of buf (n elements of float or double) over the `np` consecutive ranks
// [first, first + np), this rank among them; every participant ends with the same bits.
// Reduce-scatter by chunks (participant c owns [c n / np, (c + 1) n / np)), where the owner adds
// the contributions in participant order 0..np-1 (the first copied), then all-gather.  The
// result therefore depends only on the inputs and np, never on the MPI library's reduction
// order.  work: np * ceil(n / np) elements of scratch.
int comm_allreduce_sum_f32(float *buf, size_t n, int first, int np, float *work);
int comm_allreduce_sum_f64(double *buf, size_t n, int first, int np, double *work);

// Byte counters per tag (sent and received by this rank) and their reset.
uint64_t comm_bytes_sent(int tag);
uint64_t comm_bytes_recv(int tag);
void comm_bytes_reset(void);

#endif
