// msg: the whole wire protocol of the distributed modes on one screen.
//
// Ranks (dist.h): 0 = oracle/coordinator, 1..S = embedding servers, S+1..S+T = trainers.
// Every message is one MPI message whose tag is its kind.  Layout: a 24-byte header, then arrays.
//
//   header   u32 kind | u32 flags | u64 iter | u32 n | u32 width       (little-endian)
//   keys     u64[n]            ascending, unique, each < rows and owned by the receiving server
//   rows     f32[n][width]     row values or gradients, in key order
//
//  tag  kind            from -> to              iter                 n / width / body
//  ---  --------------  ----------------------  -------------------  ------------------------------
//   1   MSG_ROW_REQ     trainer -> server       batch t to be read   n keys; width = floats wanted
//                                                                    (E: model part; stride: with
//                                                                    optimizer state); keys only
//   2   MSG_ROW_REPLY   server -> trainer       the rows' iteration  n rows of `width`, in the
//                           (>= the request's t: updates of every    request's key order; no keys
//                           iteration before it are in the rows)
//   3   MSG_GRAD_PUSH   trainer -> server       batch t of the grad  n keys + n rows of E floats:
//                                                                    the trainer's coalesced partial
//   4   MSG_DUMP_REQ    writer -> server        state after t iters  n = 0: every row of the shard
//   5   MSG_DUMP_ROWS   server -> writer        same t               n keys + n rows of stride
//                                                                    floats; flags MSG_F_LAST on
//                                                                    the shard's last chunk
//   6   MSG_DONE        trainer -> server       iterations run       n = 0: no more messages
//   7   MSG_AR_RS       trainer -> trainer      (raw, no header)     all-reduce reduce-scatter chunk
//   8   MSG_AR_AG       trainer -> trainer      (raw, no header)     all-reduce all-gather chunk
//
// Mode sharded (no server ranks) reuses kinds 1, 2, 3 and 5 between trainers: trainer i owns
// the keys with msg_server_of(key, T) == i and plays the server's part for them (ROW_REQ /
// ROW_REPLY per peer per iteration, GRAD_PUSH per peer per iteration, DUMP_ROWS to trainer 0
// when the model is collected, unrequested).
//
// Mode bagpipe (plan.h says when each is sent):
//   9   MSG_FETCH       trainer -> server       record t issuing it  n keys + n gates of width 2
//                                                                    32-bit words (evict_iter,
//                                                                    writer) stored in the rows
//  10   MSG_FETCH_REPLY server -> trainer       same t               n rows of stride floats, in
//                                                                    the request's key order
//  11   MSG_WB          trainer -> server       t + 1 after t        n keys + rows of stride: the
//                                                                    written-back rows; iter = how
//                                                                    many iterations' evictions of
//                                                                    this writer are now written
//  12   MSG_FWD         trainer -> trainer      record t             n keys + rows of stride: shared
//                                                                    rows fetched once, forwarded
//  13   MSG_GSYNC       trainer -> trainer      batch t of the grad  n keys + rows of E: the
//                                                                    sender's partial gradients of
//                                                                    t's shared keys
//  14   MSG_PLAN        oracle -> trainer       (raw plan record, plan.h)
//  15   MSG_CREDIT      trainer -> oracle       iterations finished  n = 0 (flow control)
// and, at an evaluation boundary K (--eval-every), kind 5 between trainers: DUMP_ROWS(K) from
// every trainer i > 0 to trainer 0, unrequested: the dirty cached rows with msg_server_of(key, T)
// == i, in chunks, the last (possibly empty) flagged MSG_F_LAST (role_bagpipe.c).
//
// Mode static:
//  16   MSG_HOT_GRAD    trainer -> trainer      batch t of the grad  n keys (pinned rows only) +
//                                                                    n rows of E floats
//
// Checkpoints (ckpt_run.h): a DUMP_REQ(k) flagged MSG_F_CKPT asks a server to write its shard as
// part server-<s>.bin of checkpoint k (answered in the same order as a dump: once the state after
// k iterations is there) instead of sending the rows; the server reports the part with
//  17   MSG_CKPT_PART   server -> writer        k                    n = 1 row of width 4: the
//                                                                    16-byte record u64 size |
//                                                                    u32 CRC-32 | u32 0 of the
//                                                                    part; flags MSG_F_FAILED
//                                                                    and n = 0 when it could not
//                                                                    write it (message on stderr)
//
// The end of every distributed job (dist.c), a handshake with trainer 0 (the writer):
//  18   MSG_END         rank <-> writer         0: done (to the     n = 0
//                                               writer), 1: the end
//                                               (from it), 2: answer,
//                                               3: alive (a lone
//                                               trainer to rank 0)
// and its start, the agreement on every rank's setup (dist.c), raw, no header:
//  19   MSG_START       rank -> rank 0          (raw)                80 bytes: i32 the rank's setup
//                                                                    result, i32 0, its host
//                                                                    (dist_host: name[64], u64
//                                                                    available memory)
//                       rank 0 -> rank          (raw)                i32[2]: the lowest failing
//                                                                    rank (-1: none), its result
//
// Mode async reuses kinds 1-6 with the servers of sync: at iteration k a trainer with staleness
// bound S sends ROW_REQ(max(0, k - S)) only to the servers that own a row it misses (or must
// refresh), so requests may skip iterations and lag behind the server; the reply's iteration a
// (k - S <= a <= k) dates the rows.  It pushes GRAD_PUSH(k) to every server every iteration
// (empty or not) without waiting, so pushes may run ahead of a slower trainer's (the server
// queues them).
//
// Ordering (sync, static, async): a server answers ROW_REQ(t) and DUMP_REQ(t) only once it has
// applied the GRAD_PUSH(t') of every trainer for every t' < t, so a read of t+1 sees all updates
// of t (ROW_REQ(t) behind the server is answered at once, with every update applied so far;
// DUMP_REQ(t) must not be behind); a trainer's pushes carry t = 0, 1, 2, ... in order.  It
// sums the partial gradients of a key in trainer-rank order: the first trainer that touches the
// key gives the starting value (a copy), the others are added in ascending rank; then
// emb_opt_apply_row.  With T = 1 the applied gradient is the trainer's own, bit for bit.
//
// Decoding validates before anything is used: the byte length must equal the header's promise
// exactly, kind and width must be what the receiver expects, n within its bound, keys ascending,
// unique, in range and owned by the receiver.  A malformed message is an error (BP_EFORMAT with
// the sender named), never trusted.  Arrays are in host order; only little-endian hosts are
// supported (checked at compile time).
#ifndef BP_MSG_H
#define BP_MSG_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire protocol assumes a little-endian host"
#endif

enum {
    MSG_ROW_REQ = 1,
    MSG_ROW_REPLY = 2,
    MSG_GRAD_PUSH = 3,
    MSG_DUMP_REQ = 4,
    MSG_DUMP_ROWS = 5,
    MSG_DONE = 6,
    MSG_AR_RS = 7,
    MSG_AR_AG = 8,
    MSG_FETCH = 9,
    MSG_FETCH_REPLY = 10,
    MSG_WB = 11,
    MSG_FWD = 12,
    MSG_GSYNC = 13,
    MSG_PLAN = 14,
    MSG_CREDIT = 15,
    MSG_HOT_GRAD = 16,
    MSG_CKPT_PART = 17,
    MSG_END = 18,
    MSG_START = 19,
    MSG_KINDS = 20, // tags are < MSG_KINDS (<= COMM_MAX_TAGS)
};

enum { MSG_F_LAST = 1u << 0, MSG_F_CKPT = 1u << 1, MSG_F_FAILED = 1u << 2 };

#define MSG_HEADER_BYTES 24
#define MSG_MAX_N (1 << 28) // bound on n in any message (keeps every size within size_t and int)

typedef struct {
    uint32_t kind, flags;
    uint64_t iter;
    uint32_t n, width;
} msg_header;

// Which arrays a kind carries.
int msg_has_keys(uint32_t kind);
int msg_has_rows(uint32_t kind);
const char *msg_kind_name(uint32_t kind);

// A growable message buffer (malloc-aligned): msg_buf_fit gives room for n bytes, reallocating
// (without keeping the contents) when it has less.  Zero-initialised is empty; free(b.p) frees it.
typedef struct {
    void *p;
    size_t cap;
} msg_buf;
void *msg_buf_fit(msg_buf *b, size_t n);
// Bytes of a message of this kind with n entries of width floats.
size_t msg_bytes(uint32_t kind, uint32_t n, uint32_t width);

// Writes the header into buf and returns pointers to where the keys and rows go (NULL when the
// kind has none).  buf must hold msg_bytes(kind, n, width) bytes and be 8-byte aligned.
void msg_encode(void *buf, const msg_header *h, uint64_t **keys, float **rows);

// What the receiver expects; fields at 0 / -1 are not checked.
typedef struct {
    uint32_t kind;      // required
    uint32_t width;     // 0: any
    uint32_t max_n;     // bound on n (required, <= MSG_MAX_N)
    int64_t iter;       // -1: any
    uint64_t rows;      // keys must be < rows (0: no keys to check)
    int server, S;      // S > 0: keys must hash to this server (msg_server_of)
} msg_expect;

// Validates a received buffer of len bytes from rank `from` against ex and fills h, keys, rows
// (pointers into buf).  Returns 0 or BP_EFORMAT with a message naming the sender, the kind and
// what is wrong.
int msg_decode(const void *buf, size_t len, int from, const msg_expect *ex, msg_header *h,
               const uint64_t **keys, const float **rows);

// The server that owns key among S servers (0-based): bp_mix64(key) % S.
uint32_t msg_server_of(uint64_t key, int S);

#endif
