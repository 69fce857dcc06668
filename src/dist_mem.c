// dist_mem: the memory plan of the distributed modes (dist.h).  Each figure follows the
// allocations of the role's init (role_server.c server_init, role_trainer.c ts_init,
// role_sharded.c, role_static.c, role_bagpipe.c bs_init / cache_init, role_async.c as_init,
// role_oracle.c with oracle.c's own accounting); small per-peer bookkeeping (a few words per
// rank) is left out.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "emb.h"
#include "model.h"
#include "msg.h"
#include "optim.h"
#include "oracle.h"
#include "role_loop.h"

// role_keydir_init's directory over K keys split in `parts`.
static uint64_t keydir_bytes(uint64_t K, int parts) {
    int shift = 3;
    while (((uint64_t)1 << shift) < 8 * (uint64_t)(parts > 0 ? parts : 1)) shift++;
    return ((K >> shift) + 2) * sizeof(uint64_t);
}

// Rows of the largest of `parts` shards of K keys split by bp_mix64: K / parts and a margin of
// four standard deviations (the split is binomial).
static uint64_t shard_rows(uint64_t K, int parts) {
    if (parts <= 1) return K;
    const double mean = (double)K / parts, sd = sqrt(mean * (1.0 - 1.0 / parts));
    return BP_MIN(K, (uint64_t)(mean + 4 * sd) + 1);
}

// The chunk buffer of a holder of n rows sending them to trainer 0 (server_dump, role_send_rows).
static uint64_t dump_bytes(uint64_t n, int stride) {
    const uint64_t per = BP_MAX((uint64_t)1, ((uint64_t)32 << 20) / (8 + (uint64_t)stride * 4));
    return msg_bytes(MSG_DUMP_ROWS, (uint32_t)BP_MIN(per, BP_MAX(n, 1)), (uint32_t)stride);
}

// A trainer replica (train_replica_init: trainer_init without tables) for batches of max_batch:
// the same terms as local mode's plan.
static int replica_bytes(const train_setup *su, int max_batch, uint64_t *out, size_t *n_params) {
    size_t n_acts; // counted, not allocated (a batch too large to fit took its memory to be refused)
    int rc = model_sizes(&su->mc, max_batch, n_params, &n_acts);
    if (rc) return rc;
    const int F = su->mc.F, E = su->mc.E;
    *out = (uint64_t)(*n_params * 2 + n_acts) * 4 + (uint64_t)dense_opt_state_floats(&su->dopt, *n_params) * 4 +
           emb_grad_bytes(max_batch * F, E) + 2ull * max_batch * F * E * 4;
    return 0;
}

int dist_gathers(const train_setup *su) {
    return su->do_eval || su->eval_every || su->save != NULL || (su->ck.dir && su->ck.naive);
}

int dist_mem_plan_compute(dist_mem_plan *p, const train_setup *su, const dist_layout *l) {
    memset(p, 0, sizeof *p);
    emb_layout L;
    int rc = emb_layout_init(&L, &su->lc);
    if (rc) return rc;
    const int S = l->S, T = l->T, F = su->mc.F, E = su->mc.E, stride = L.stride;
    const uint64_t K = L.rows, row = (uint64_t)stride * sizeof(float);
    const int bmax = (su->B + T - 1) / T;
    const uint32_t cap = (uint32_t)(bmax * F); // most keys of one trainer's slice
    p->S = S, p->T = T;

    // servers (server_init): the largest shard with its keys and directory, one request, reply
    // and push buffer per trainer (bagpipe's servers hold instead a ring of P + 4 FETCH messages
    // and replies per trainer, grown to the fetches of one iteration: mostly far fewer keys than
    // a slice has, so the same three buffers stand for them)
    const int gather = dist_gathers(su);
    if (S > 0) {
        const uint64_t n = shard_rows(K, S);
        p->server = n * (row + sizeof(uint64_t)) + keydir_bytes(K, S) + (gather ? dump_bytes(n, stride) : 0) +
                    (uint64_t)T * (msg_bytes(MSG_ROW_REQ, cap, 0) + msg_bytes(MSG_GRAD_PUSH, cap, (uint32_t)E) +
                                   msg_bytes(MSG_ROW_REPLY, cap, (uint32_t)stride));
    }

    // trainers: the dense replica and its batch buffers, the all-reduce scratch, then the rows
    // the mode keeps on a trainer
    size_t np = 0;
    uint64_t rep = 0, rep0 = 0;
    if ((rc = replica_bytes(su, bmax, &rep, &np))) return rc;
    const int writer_batch = su->do_eval || su->eval_every ? BP_MAX(bmax, su->eval_batch) : bmax;
    if ((rc = replica_bytes(su, writer_batch, &rep0, &np))) return rc;
    uint64_t common = (uint64_t)T * ((np + (uint64_t)T - 1) / T + 1) * sizeof(float); // ar_work
    uint64_t srv_bufs = (uint64_t)S * (msg_bytes(MSG_ROW_REQ, cap, 0) + msg_bytes(MSG_ROW_REPLY, cap, (uint32_t)E) +
                                       msg_bytes(MSG_GRAD_PUSH, cap, (uint32_t)E));
    uint64_t extra = 0, send_dump = 0;
    switch (l->mode) {
    case DIST_MODE_SYNC:
        extra = srv_bufs;
        break;
    case DIST_MODE_SHARDED: { // its shard of the rows, served to the T - 1 peers
        const uint64_t n = shard_rows(K, T);
        p->trainer_rows = n * row;
        extra = n * sizeof(uint64_t) + keydir_bytes(K, T) + (uint64_t)cap * E * sizeof(float) +
                (uint64_t)(T - 1) * (msg_bytes(MSG_ROW_REQ, cap, 0) + msg_bytes(MSG_ROW_REPLY, cap, (uint32_t)stride) +
                                     msg_bytes(MSG_GRAD_PUSH, cap, (uint32_t)E));
        send_dump = gather ? dump_bytes(n, stride) : 0; // trainers 1.. send their shards to trainer 0
        break;
    }
    case DIST_MODE_STATIC: { // the pinned rows on every trainer, their gradients from the peers
        const uint64_t n = BP_MIN(K, l->static_rows ? (uint64_t)l->static_rows : BP_MAX((uint64_t)1, K / 100));
        p->trainer_rows = n * row;
        extra = srv_bufs + n * sizeof(uint64_t) + keydir_bytes(K, 1) + (K / 64 + 1) * sizeof(uint64_t) +
                (uint64_t)T * msg_bytes(MSG_HOT_GRAD, cap, (uint32_t)E);
        break;
    }
    case DIST_MODE_BAGPIPE: { // cache_init: rows and 19 bytes of slot state; the key map
        const uint64_t C = su->cache_rows;
        uint64_t hcap = 16;
        while (hcap < 2 * C) hcap *= 2;
        const uint64_t hash = hcap * 16, direct = K * sizeof(uint32_t);
        // the cache: its rows, their slot state and the key map (what --cache-rows sets)
        p->trainer_rows = C * row + C * 19 +
                          (K <= (1u << 24) && direct <= BP_MAX(2 * hash, (uint64_t)1 << 20) ? direct : hash);
        extra = (uint64_t)2 * T * msg_bytes(MSG_GSYNC, cap, (uint32_t)E) + (uint64_t)cap * 24;
        send_dump = su->eval_every ? role_dump_cap(&L) : 0; // trainers 1..: dirty rows for trainer 0
        break;
    }
    case DIST_MODE_ASYNC: { // role_async_cache_init: model rows (E floats), 44 bytes of slot state, the key map
        const uint64_t C = su->cache_rows;
        uint64_t hcap = 16;
        while (hcap < 2 * C) hcap *= 2;
        p->trainer_rows = C * (uint64_t)E * sizeof(float) + C * 44 + hcap * 12; // the cache, as in bagpipe
        extra = srv_bufs;
        break;
    }
    }
    p->trainer = rep + common + p->trainer_rows + extra + send_dump;
    p->trainer0 = rep0 + common + p->trainer_rows + extra + (gather ? role_dump_cap(&L) : 0);
    // the writer gathers every row for evaluation or saving (dist_collect_rows; in bagpipe mode
    // the trainers' dirty rows too)
    if (gather) p->writer_table = emb_layout_bytes(&L);

    // the oracle (rank 0) plans in mode bagpipe
    if (l->mode == DIST_MODE_BAGPIPE) {
        oracle_config cfg = {.T = (uint32_t)T, .B = (uint32_t)su->B, .F = (uint32_t)F, .card = su->lc.card,
                             .W = (uint32_t)su->lookahead, .P = (uint32_t)su->prefetch, .C = su->cache_rows,
                             .threads = su->oracle_threads == 2 ? 2 : 1, .keymap = ORACLE_KEYMAP_AUTO,
                             .borrow_input = 1, .groups = su->oracle_parts == 2 ? 2 : 1};
        // the batches of the first window (a window longer than an epoch sees no more keys)
        const uint64_t R = oracle_held_batches((uint32_t)su->lookahead, (uint32_t)su->prefetch, cfg.threads);
        uint64_t U[2], D[2];
        uint8_t *grp = bp_xmalloc((size_t)F);
        const int split = oracle_parts(&cfg, grp) == 2;
        p->oracle_exact = oracle_window_figures(su->ds, su->tr0, su->per_epoch, (uint32_t)su->B,
                                                BP_MIN(BP_MIN(R, su->per_epoch), (uint64_t)BP_MAX(su->total_iters, 1)),
                                                split ? grp : NULL, U, D);
        free(grp);
        p->oracle = oracle_mem_estimate(&cfg, U, D);
    }
    p->dataset = su->ds ? su->ds->map_size : 0;
    p->total = (uint64_t)S * p->server + (uint64_t)(T - 1) * p->trainer + p->trainer0 + p->writer_table + p->oracle;
    return 0;
}

uint64_t dist_mem_available(void) {
    const char *s = getenv(DIST_MEM_AVAILABLE_ENV);
    if (s && *s) {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end == 0) return v;
    }
    return bp_mem_available();
}

void dist_mem_plan_print(const dist_mem_plan *p, uint64_t avail) {
    char a[32], b[32], c[32], d[32], e[32], f[32];
    printf("memory plan: ");
    if (p->S) printf("%d server%s x %s, ", p->S, p->S == 1 ? "" : "s", bp_fmt_bytes(a, sizeof a, (double)p->server));
    if (p->T > 1) printf("%d trainers x %s (trainer 0: %s)", p->T, bp_fmt_bytes(b, sizeof b, (double)p->trainer),
                         bp_fmt_bytes(c, sizeof c, (double)p->trainer0));
    else printf("1 trainer x %s", bp_fmt_bytes(b, sizeof b, (double)p->trainer0));
    if (p->writer_table) printf(", trainer 0's copy of the tables %s", bp_fmt_bytes(d, sizeof d, (double)p->writer_table));
    if (p->oracle) printf(", oracle %s%s", bp_fmt_bytes(e, sizeof e, (double)p->oracle), p->oracle_exact ? "" : " (bound)");
    if (avail) printf(": %s of %s available", bp_fmt_bytes(f, sizeof f, (double)p->total), bp_fmt_bytes(a, sizeof a, (double)avail));
    else printf(": %s in all", bp_fmt_bytes(f, sizeof f, (double)p->total));
    if (p->dataset) printf("; dataset %s mapped (page cache, shared)", bp_fmt_bytes(b, sizeof b, (double)p->dataset));
    printf("\n");
    fflush(stdout);
}

void dist_host_self(dist_host *h, int rank) {
    memset(h, 0, sizeof *h);
    h->avail = dist_mem_available();
    const char *list = getenv(DIST_TEST_HOSTS_ENV);
    if (list && *list) { // the rank-th comma-separated name
        for (int r = 0; r < rank && list; r++) {
            list = strchr(list, ',');
            if (list) list++;
        }
        if (list) {
            size_t len = strcspn(list, ",");
            snprintf(h->name, sizeof h->name, "%.*s", (int)BP_MIN(len, sizeof h->name - 1), list);
            return;
        }
    }
    if (gethostname(h->name, sizeof h->name - 1) != 0) snprintf(h->name, sizeof h->name, "unknown");
}

// The plan's parts held by a set of ranks, each with what reduces it.
enum { PART_SERVERS, PART_ROWS, PART_WRITER, PART_ORACLE, PART_REST, N_PARTS };

static void rank_parts(const dist_mem_plan *p, const dist_layout *l, int rank, uint64_t part[N_PARTS]) {
    int idx;
    const dist_role r = dist_role_of(l, rank, &idx);
    if (r == DIST_ORACLE) part[PART_ORACLE] += p->oracle;
    else if (r == DIST_SERVER) part[PART_SERVERS] += p->server;
    else {
        part[PART_ROWS] += p->trainer_rows;
        part[PART_REST] += (idx == 0 ? p->trainer0 : p->trainer) - p->trainer_rows;
        if (idx == 0) part[PART_WRITER] += p->writer_table;
    }
}

static const char *part_hint(const dist_layout *l, int k) {
    switch (k) {
    case PART_SERVERS:
        return "the servers' shards of the tables: smaller tables (prep --max-ind-range, below the dataset's "
               "own if it was hashed) or --arch-sparse-feature-size; more --servers split them but not on one host";
    case PART_ROWS:
        return l->mode == DIST_MODE_SHARDED
                   ? "the trainers' shards of the tables: smaller tables (prep --max-ind-range, below the "
                     "dataset's own if it was hashed) or --arch-sparse-feature-size"
               : l->mode == DIST_MODE_STATIC ? "the rows pinned on every trainer: a smaller --static-rows"
                                             : "the trainers' caches: a smaller --cache-rows";
    case PART_WRITER: return "trainer 0's copy of every row for evaluation and saving: --no-eval and no --save";
    case PART_ORACLE: return "the oracle's window: a smaller --lookahead or --batch-size";
    default:
        return "the trainers' models and batch buffers: a smaller --batch-size (or --eval-batch-size: trainer 0 "
               "evaluates) or fewer --trainers";
    }
}

// "ranks 0-1, 4" (or "rank 3") from a mask of ranks.
static void rank_list(const unsigned char *on, int n, char *buf, size_t cap) {
    char list[160] = "";
    size_t len = 0;
    int count = 0;
    for (int r = 0; r < n; r++) {
        if (!on[r] || (r > 0 && on[r - 1])) continue;
        int e = r;
        while (e + 1 < n && on[e + 1]) e++;
        count += e - r + 1;
        if (len >= sizeof list) continue;
        const char *sep = len ? ", " : "";
        len += (size_t)(e > r ? snprintf(list + len, sizeof list - len, "%s%d-%d", sep, r, e)
                              : snprintf(list + len, sizeof list - len, "%s%d", sep, r));
    }
    snprintf(buf, cap, "rank%s %s", count == 1 ? "" : "s", list);
}

int dist_mem_check_hosts(const dist_mem_plan *p, const dist_layout *l, const dist_host *hosts, uint64_t avail) {
    const int n = dist_ranks(l);
    int *group = bp_xmalloc((size_t)n * sizeof *group); // the first rank on each rank's host
    int n_hosts = 0;
    for (int r = 0; r < n; r++) {
        group[r] = r;
        for (int q = 0; hosts && q < r; q++)
            if (strcmp(hosts[q].name, hosts[r].name) == 0) {
                group[r] = group[q];
                break;
            }
        if (!hosts && r > 0) group[r] = 0;
        n_hosts += group[r] == r;
    }
    dist_mem_plan_print(p, n_hosts > 1 ? 0 : hosts ? hosts[0].avail : avail); // several: a line per host
    unsigned char *on = bp_xcalloc((size_t)n, 1);
    int rc = 0;
    for (int h = 0; h < n; h++) { // every host's line, then the first host short of memory
        if (group[h] != h) continue;
        uint64_t part[N_PARTS] = {0}, need = 0;
        for (int r = 0; r < n; r++) {
            on[r] = group[r] == h;
            if (on[r]) rank_parts(p, l, r, part);
        }
        for (int k = 0; k < N_PARTS; k++) need += part[k];
        const uint64_t there = hosts ? hosts[h].avail : avail;
        char ranks[192], b1[32], b2[32], b3[32];
        rank_list(on, n, ranks, sizeof ranks);
        if (n_hosts > 1)
            printf("  host %s (%s): %s of %s available\n", hosts[h].name, ranks, bp_fmt_bytes(b1, sizeof b1, (double)need),
                   bp_fmt_bytes(b2, sizeof b2, (double)there));
        if (rc || there == 0 || need <= there) continue;
        int big = 0;
        for (int k = 1; k < N_PARTS; k++)
            if (part[k] > part[big]) big = k;
        bp_fmt_bytes(b1, sizeof b1, (double)need), bp_fmt_bytes(b2, sizeof b2, (double)there);
        bp_fmt_bytes(b3, sizeof b3, (double)part[big]);
        if (!hosts)
            rc = bp_fail(BP_ENOMEM, "the job needs %s but only %s is available on this host; the largest part is %s (%s); "
                         "no rank was started", b1, b2, part_hint(l, big), b3);
        else
            rc = bp_fail(BP_ENOMEM, "host %s (%s) needs %s but only %s is available there; the largest part is %s (%s)",
                         hosts[h].name, ranks, b1, b2, part_hint(l, big), b3);
    }
    fflush(stdout);
    free(on), free(group);
    return rc;
}

int dist_mem_check(const train_setup *su, const dist_layout *l, const dist_host *hosts) {
    dist_mem_plan p;
    int rc = dist_mem_plan_compute(&p, su, l);
    return rc ? rc : dist_mem_check_hosts(&p, l, hosts, dist_mem_available());
}
