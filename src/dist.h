// dist: the distributed training modes' rank layout, start-up agreement and role dispatch.
//
// Rank layout (N = 1 + S + T ranks):
//
//   rank 0              oracle: coordinator (prints the layout); in `bagpipe` mode the planner.
//                       In the other modes it only takes part in start-up and the end.
//   ranks 1 .. S        embedding servers 0..S-1; server s owns the keys k with
//                       bp_mix64(k) % S == s (msg_server_of), rows with their optimizer state
//   ranks S+1 .. S+T    trainers 0..T-1; trainer i takes samples [i B / T, (i + 1) B / T) of
//                       every global batch of B samples; trainer 0 is also the writer (saved
//                       model, evaluation, metrics, result lines) and commits checkpoints
//                       (ckpt_run.h)
//
// Start-up: every rank reads the flags and the dataset header itself; a failure on any rank is
// agreed on collectively (no rank trains unless all could start) and reported once, by the
// lowest failing rank, with its role.  Errors after start-up print the rank and role and abort
// the whole job (MPI_Abort), so no peer is left waiting.
#ifndef BP_DIST_H
#define BP_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "msg.h"
#include "train.h"

// Which trainer role the ranks run (role_trainer.c, role_sharded.c, role_static.c).
//   sync      servers hold every row; trainers fetch and push per iteration
//   sharded   no server ranks (S = 0): trainer i owns the keys with bp_mix64(k) % T == i
//   static    servers hold the cold rows; the hottest static_rows rows are replicated on
//             every trainer
//   async     servers as in sync; each trainer reads rows from its own bounded LRU/LFU cache
//             while they are at most su->staleness iterations old (role_async.c)
typedef enum { DIST_MODE_SYNC = 0, DIST_MODE_SHARDED = 1, DIST_MODE_STATIC = 2, DIST_MODE_BAGPIPE = 3,
               DIST_MODE_ASYNC = 4 } dist_mode;

typedef struct {
    int S, T;            // servers, trainers
    dist_mode mode;      // zero: sync
    int64_t static_rows; // static: rows to pin (0: 1% of the rows, at least 1)
} dist_layout;

typedef enum { DIST_ORACLE = 0, DIST_SERVER = 1, DIST_TRAINER = 2 } dist_role;

static inline int dist_ranks(const dist_layout *l) { return 1 + l->S + l->T; }
static inline int dist_server_rank(const dist_layout *l, int s) { return 1 + s; }
static inline int dist_trainer_rank(const dist_layout *l, int i) { return 1 + l->S + i; }
// The role of a rank and its index within the role.
dist_role dist_role_of(const dist_layout *l, int rank, int *index);
// "oracle", "server 1", "trainer 0" (a launch_role_fn; ctx is the dist_layout).
void dist_role_name(int rank, const void *ctx, char *buf, size_t cap);

// Joins the job (comm_init) and checks the rank count against the layout.  On a mismatch rank 0
// prints a clear error (every rank printed it), the ranks meet at a barrier and leave MPI, and
// all return BP_EMISMATCH: rank 0 exits 2 and the others 0, so that no peer's exit lets mpirun
// end rank 0 before its message (train_distributed).
int dist_begin(const dist_layout *l);
// Agrees on setup_rc across ranks (a gather by rank 0 under the stall timeout), then runs this rank's role in mode l->mode, the end (a
// handshake with trainer 0 under the stall timeout, then a barrier) and MPI_Finalize.  Returns the process exit code.
int dist_run(const train_setup *su, const dist_layout *l, int setup_rc);
// 1 after dist_run when the start-up agreement found a rank that could not start: the job failed,
// though this rank (not the one named) exits 0 so that mpirun names that one.
int dist_failed_at_start(void);

// The roles (role_server.c, role_trainer.c, role_oracle.c, role_bagpipe.c).  Return 0 or a
// negative code with a message.  role_server_run serves mode sync or bagpipe (su->mode).
int role_server_run(const train_setup *su, const dist_layout *l, int s);
int role_trainer_run(const train_setup *su, const dist_layout *l, int i);
int role_bagpipe_trainer_run(const train_setup *su, const dist_layout *l, int i);

// The oracle rank of mode bagpipe.  prepare (before the start-up agreement) builds the planner
// and plans the first records, so a cache too small for the first batches is a start-up error
// reported once; run streams the records to the trainers under flow control (at most
// ROLE_ORACLE_AHEAD(P) records beyond the slowest trainer's progress).
typedef struct role_oracle role_oracle;
#define ROLE_ORACLE_AHEAD(P) (16 + (P))
#define ROLE_CREDIT_EVERY 4 // a trainer reports its progress every this many iterations (and at the end)
int role_oracle_prepare(role_oracle **out, const train_setup *su, const dist_layout *l);
int role_oracle_run(role_oracle *ro);
// Prints the planner's figures; called after the final barrier, once every trainer is done (a
// line printed while trainer 0 draws its progress line would land on it).
void role_oracle_report(const role_oracle *ro);
void role_oracle_free(role_oracle *ro); // safe on NULL

// Writer: every row of every server after `iter` iterations into tr->table (allocated if
// needed).  buf: a receive buffer of cap bytes (role_dump_cap).
int dist_collect_rows(trainer *tr, int S, int first_server, void *buf, size_t cap, int64_t iter);
// The lone trainer's sign of life.  In mode sharded with one trainer, trainer 0 is the only rank
// besides the idle coordinator (rank 0), so no peer would miss it if it stopped: it sends END(3)
// (msg.h) to rank 0 at an iteration boundary once S / 2 seconds have passed since the last one,
// and once more when its iterations are over; rank 0 waits for them, and then for END(1), under
// the stall timeout (dist.c dist_end).  Nothing is sent in every other layout or when the stall
// timeout is 0.
typedef struct {
    int on;
    double last; // bp_now() of the last send
    comm_req q;
    int live; // q is pending
    uint64_t buf[MSG_HEADER_BYTES / 8];
} dist_alive;
void dist_alive_init(dist_alive *a, int T, int S, int i);
// At an iteration boundary; force: send whatever the time (the last one).
int dist_alive_tick(dist_alive *a, int force);
// Completes the last send.
int dist_alive_finish(dist_alive *a);

// Whether trainer 0 gathers every row at some point of the run (an evaluation, --save, or a
// --checkpoint-naive checkpoint): only then does it hold a receive buffer for the rows
// (role_dump_cap) and the tables' copy.
int dist_gathers(const train_setup *su);
int role_sharded_run(const train_setup *su, const dist_layout *l, int i);
int role_static_run(const train_setup *su, const dist_layout *l, int i);
// Mode async.  check (before the start-up agreement): the cache of trainer i must hold the
// unique rows of each of its slices; a smaller --cache-rows is a usage error naming the minimum.
int role_async_check(const train_setup *su, const dist_layout *l, int i);
int role_async_run(const train_setup *su, const dist_layout *l, int i);
const char *dist_mode_name(dist_mode m);

// The memory plan: the bytes each rank will hold, from the configuration and the dataset (read,
// not allocated), before any rank starts.  Per role kind: a server (the largest shard of rows
// with optimizer state, keys, directory, message buffers), a trainer (dense replica, batch and
// message buffers, the rows its mode keeps: sharded's shard, static's pinned rows, bagpipe's and
// async's caches), trainer 0 (the writer: its larger evaluation batch, and writer_table, every
// row gathered for evaluation or saving), the oracle of mode bagpipe (oracle_mem_estimate over the
// first window of the train split).  The dataset is mapped read-only by every rank: page cache,
// shared and reclaimable, so it is shown and not added.  Each rank's runtime (MPI, BLAS buffers,
// code: some tens of MiB) is not counted either.
typedef struct {
    int S, T;
    uint64_t server, trainer, trainer0, writer_table, oracle;
    uint64_t trainer_rows; // of trainer: the rows of its mode (shard, pinned rows, cache: with its slot
                           // state and key map)
    int oracle_exact;      // 0: the oracle figure is a bound (key space too large to count)
    uint64_t dataset;      // bytes of the dataset's mapping (not in total)
    uint64_t total;        // every rank of the job
} dist_mem_plan;
int dist_mem_plan_compute(dist_mem_plan *p, const train_setup *su, const dist_layout *l);
// "memory plan: 2 servers x 1.1 GiB, 4 trainers x ...: 3.7 GiB of 20 GiB available" on stdout
// ("3.7 GiB in all" when avail is 0: unknown, or given host by host).
void dist_mem_plan_print(const dist_mem_plan *p, uint64_t avail);
// The memory the plans compare with: bp_mem_available(), or the bytes in the environment
// variable BAGPIPE_MEM_AVAILABLE (for tests of the refusals).
#define DIST_MEM_AVAILABLE_ENV "BAGPIPE_MEM_AVAILABLE"
uint64_t dist_mem_available(void);

// One rank's host and the memory available there, gathered from every rank under the user's
// mpirun/srun so that rank 0 can hold the plan against each host.
typedef struct {
    char name[64];
    uint64_t avail;
} dist_host;
// This rank's entry: gethostname() and dist_mem_available(); under the test hook
// BAGPIPE_TEST_HOSTS="a,a,b,..." (one name per rank) the rank-th name of the list.
#define DIST_TEST_HOSTS_ENV "BAGPIPE_TEST_HOSTS"
void dist_host_self(dist_host *h, int rank);
// Prints the plan and holds it against the memory of each host: hosts[r] is rank r's (every
// rank of the layout), or NULL when every rank runs on this host, which has `avail` (the
// launcher's check, before it starts the job).  With several hosts, a line per host follows the
// plan.  Returns 0, or BP_ENOMEM naming the first host short of memory, its ranks, and its
// largest part with the flag that reduces it.
int dist_mem_check_hosts(const dist_mem_plan *p, const dist_layout *l, const dist_host *hosts, uint64_t avail);
// dist_mem_plan_compute, then dist_mem_check_hosts against dist_mem_available().
int dist_mem_check(const train_setup *su, const dist_layout *l, const dist_host *hosts);

// Samples of trainer i in a global batch of B: [dist_slice_begin(B, T, i), ..(B, T, i + 1)).
static inline int dist_slice_begin(int B, int T, int i) { return (int)((long long)i * B / T); }

#endif
