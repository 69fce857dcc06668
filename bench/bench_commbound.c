// bench_commbound: a lower bound on the embedding bytes that any protocol training bit-identically
// to mode sync must move on given batches, next to what sync's protocol moves on them.
//
//   build/bench/bench_commbound DATA B T ITERS D [W]
//
// Batches as every distributed mode takes them: global batch t is the training split's rows
// [t B, (t + 1) B) (epochs wrap), trainer i gets samples [i B / T, (i + 1) B / T).
//
// The bound counts reads that need information from elsewhere.  Trainer b reading row k at
// iteration t can compute the row's value itself only if it has read k before and no other
// trainer has used k since b's last read (a use at the same iteration as b's last read counts:
// that trainer's partial gradient is in the update b must apply).  Otherwise the row's D model
// floats depend on values b has never seen (a first read: the initial row, held elsewhere; a later
// one: another trainer's gradient), so at least 4 D bytes must reach b, whatever the protocol
// (replicas, owners, gradients or rows; float vectors taken as incompressible).  Not counted,
// which only lowers the bound: keys and headers, optimizer state, the end of the run's
// write-backs, and the dense all-reduce (the same in every mode; add it to compare totals).
//
// Printed per iteration, summed over the trainers: the (trainer, key) reads, those that need
// bytes (first reads; reads after another trainer's update), the bound, and sync's embedding
// bytes on the same batches (each trainer requests its unique keys, 8 bytes each, receives their
// rows, pushes keys and gradients: 2 (8 + 4 D) per read), and how many reads are of keys that
// several trainers use at the same iteration.
//
// With W (the lookahead window, default 32) it also models mode bagpipe's GSYNC traffic on the
// batches: every read is synchronised except a private one (LRPP: the key is fetched for t, one
// trainer uses it at t, and it is not used again within W), each user sending (8 + 4 D) bytes to each of the T - 1 other
// trainers; a read by a key's only user at t whose next use within W is again by that user alone
// is "single-owner": its gradient reaches replicas that do not read it before the owner's next
// update, which a placement keeping such keys on one trainer (moving them when another trainer
// needs them) would not send.  And the same synchronised keys reduced through one trainer (the
// lowest-ranked user of the key at t receives the other users' partials and sends the sum to
// the T - 1 others): (u - 1) + (T - 1) messages per key with u users instead of u (T - 1).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common.h"
#include "data_bin.h"

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "DATA B T ITERS D [W]",
                   "a lower bound on the embedding bytes any protocol training bit-identically to sync must move "
                   "on the training split's batches (B samples, T trainers, ITERS iterations, rows of D floats), "
                   "next to sync's bytes and bagpipe's GSYNC traffic with window W (default 32)"))
        return 0;
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s DATA B T ITERS D [W]\n", argv[0]);
        return 2;
    }
    const int B = atoi(argv[2]), T = atoi(argv[3]), D = atoi(argv[5]);
    const long long iters = atoll(argv[4]);
    const long long W = argc == 7 ? atoll(argv[6]) : 32;
    if (B <= 0 || T <= 0 || T > B || T > 32 || iters <= 0 || iters > INT32_MAX || D <= 0 || W <= 0) {
        fprintf(stderr, "%s: B, T, ITERS, D and W must be positive, T <= B, T <= 32\n", argv[0]);
        return 2;
    }
    bp_dataset ds;
    int rc = bp_ds_open(&ds, argv[1], 0);
    if (rc) {
        fprintf(stderr, "%s: %s\n", argv[0], bp_errmsg(rc));
        return 1;
    }
    const int F = (int)ds.info.n_sparse;
    uint64_t tr0, tr1;
    bp_ds_split_range(&ds, BP_SPLIT_TRAIN, &tr0, &tr1);
    const uint64_t per_epoch = (tr1 - tr0) / (uint64_t)B;
    if (!per_epoch) {
        fprintf(stderr, "%s: the training split has fewer than %d rows\n", argv[0], B);
        return 1;
    }
    uint64_t off[BP_DS_MAX_SPARSE + 1] = {0}; // key = off[f] + id (emb.h)
    for (int f = 0; f < F; f++) off[f + 1] = off[f] + ds.info.card[f];
    const uint64_t rows = off[F];
    int32_t *last = bp_xmalloc((size_t)T * rows * sizeof *last); // (T, rows) iteration of the last use, -1: none
    for (uint64_t k = 0; k < (uint64_t)T * rows; k++) last[k] = -1;
    int32_t *seen = bp_xmalloc(rows * sizeof *seen); // (rows) the iteration whose trainer i touched it last
    int32_t *seen_by = bp_xmalloc(rows * sizeof *seen_by); // (rows) that trainer
    uint8_t *users = bp_xcalloc(rows, 1);  // (rows) trainers using it at the current iteration (saturating)
    int32_t *stamp = bp_xmalloc(rows * sizeof *stamp); // (rows) iteration of users[]
    uint32_t *umask = bp_xcalloc(rows, sizeof *umask); // (rows) trainers using it at the current iteration
    for (uint64_t k = 0; k < rows; k++) seen[k] = -1, stamp[k] = -1;
    uint64_t *uk = bp_xmalloc((size_t)B * F * sizeof *uk); // (B F) unique (trainer, key) reads of t
    int *ui = bp_xmalloc((size_t)B * F * sizeof *ui);       // (B F) their trainer
    uint64_t reads = 0, first = 0, after_other = 0, multi = 0;
    uint64_t *all_k = bp_xmalloc((size_t)iters * B * F * sizeof *all_k); // every read, by iteration
    uint8_t *all_i = bp_xmalloc((size_t)iters * B * F);                   // its trainer
    uint32_t *all_u = bp_xmalloc((size_t)iters * B * F * sizeof *all_u); // users of its key at t (mask)
    uint64_t *at = bp_xmalloc(((size_t)iters + 1) * sizeof *at);           // (iters + 1) offsets
    uint8_t *all_r = bp_xmalloc((size_t)iters * B * F);                   // its key was resident before t
    int32_t *prev = bp_xmalloc(rows * sizeof *prev); // (rows) the last iteration before t using the key
    for (uint64_t k = 0; k < rows; k++) prev[k] = -1;
    uint64_t na = 0;
    for (long long t = 0; t < iters; t++) {
        const uint64_t r0 = tr0 + (uint64_t)(t % (long long)per_epoch) * (uint64_t)B;
        int n = 0;
        for (int i = 0; i < T; i++) {
            const int b0 = (int)((long long)i * B / T), b1 = (int)((long long)(i + 1) * B / T);
            for (int b = b0; b < b1; b++)
                for (int f = 0; f < F; f++) {
                    const uint64_t key = off[f] + ds.sparse[(r0 + (uint64_t)b) * (uint64_t)F + (uint64_t)f];
                    if (seen[key] == (int32_t)t && seen_by[key] == i) continue; // trainer i read it already at t
                    // seen[] is reused per (t, i): a key touched by trainer i - 1 at t is re-stamped
                    seen[key] = (int32_t)t, seen_by[key] = i;
                    uk[n] = key, ui[n] = i, n++;
                    if (stamp[key] != (int32_t)t) stamp[key] = (int32_t)t, users[key] = 0, umask[key] = 0;
                    if (users[key] < 255) users[key]++;
                    umask[key] |= 1u << i;
                }
        }
        // every read of t against the uses before t
        for (int e = 0; e < n; e++) {
            const uint64_t key = uk[e];
            const int b = ui[e];
            const int32_t mine = last[(size_t)b * rows + key];
            int need = mine < 0;
            first += need;
            if (!need)
                for (int c = 0; c < T && !need; c++)
                    if (c != b && last[(size_t)c * rows + key] >= mine) need = 1, after_other++;
            reads++;
            multi += users[key] > 1;
        }
        at[t] = na;
        for (int e = 0; e < n; e++) {
            last[(size_t)ui[e] * rows + uk[e]] = (int32_t)t;
            all_k[na] = uk[e], all_i[na] = (uint8_t)ui[e], all_u[na] = umask[uk[e]];
            all_r[na++] = prev[uk[e]] >= 0 && t - prev[uk[e]] <= W;
        }
        for (int e = 0; e < n; e++) prev[uk[e]] = (int32_t)t;
    }
    at[iters] = na;
    // backwards: each read against its key's next use
    int32_t *next_t = seen;      // (rows) reused: next iteration using the key, -1: none
    uint32_t *next_m = umask;    // (rows) reused: its users
    for (uint64_t k = 0; k < rows; k++) next_t[k] = -1;
    uint64_t n_gsync = 0, n_single = 0, n_evicted_single = 0, n_owner = 0;
    for (long long t = iters - 1; t >= 0; t--) {
        for (uint64_t e = at[t]; e < at[t + 1]; e++) {
            const uint64_t key = all_k[e];
            const uint32_t mine = 1u << all_i[e];
            const int kept = next_t[key] >= 0 && next_t[key] - t <= W;
            if (all_u[e] != mine || kept || all_r[e]) { // private: fetched for t, one user, evicted
                n_gsync++;
                // reducer = the lowest-ranked user: it sends the sum to T - 1, the others one partial
                n_owner += (all_u[e] & (mine - 1)) ? 1 : (uint64_t)(T - 1);
            }
            if (all_u[e] == mine && kept && next_m[key] == mine) n_single++;
            if (all_u[e] == mine && !kept && !all_r[e]) n_evicted_single++;
        }
        for (uint64_t e = at[t]; e < at[t + 1]; e++) next_t[all_k[e]] = (int32_t)t, next_m[all_k[e]] = all_u[e];
    }
    const double it = (double)iters, row = 4.0 * D;
    const double lb = (double)(first + after_other) * row / it;
    const double sync_b = (double)reads * 2.0 * (8.0 + row) / it;
    printf("batches: %lld of %d (T = %d, %d per trainer), D = %d, %llu keys\n", iters, B, T, B / T, D,
           (unsigned long long)rows);
    printf("reads (trainer, unique key, iteration): %.1f per iteration, %.1f%% of them of keys several trainers use at that iteration\n",
           (double)reads / it, reads ? 100.0 * (double)multi / (double)reads : 0.0);
    printf("reads that need bytes: %.1f per iteration (first reads %.1f, after another trainer's update %.1f); %.1f%% of reads\n",
           (double)(first + after_other) / it, (double)first / it, (double)after_other / it,
           reads ? 100.0 * (double)(first + after_other) / (double)reads : 0.0);
    printf("lower bound, embeddings: %.0f B/it (4 D bytes per read that needs bytes)\n", lb);
    printf("sync's protocol, embeddings: %.0f B/it (2 (8 + 4 D) per read); bound / sync = %.3f\n", sync_b,
           sync_b > 0 ? lb / sync_b : 0.0);
    if (T > 1) {
        const double g = (double)n_gsync * (T - 1) * (8.0 + row) / it, a = (double)n_single * (T - 1) * (8.0 + row) / it;
        printf("bagpipe's GSYNC (modelled, W = %lld): %.0f B/it for %.1f synchronised reads per iteration; single-owner "
               "reads %.1f per iteration (%.0f B/it of it), private reads (fetched for t, one user, not used again within W) %.1f\n",
               W, g, (double)n_gsync / it, (double)n_single / it, a, (double)n_evicted_single / it);
        printf("the same keys reduced by their lowest-ranked user at t (partials to it, the sum from it to the T - 1 "
               "others): %.0f B/it (%.3f of GSYNC's)\n", (double)n_owner * (8.0 + row) / it,
               n_gsync ? (double)n_owner / ((double)n_gsync * (T - 1)) : 0.0);
    }
    free(last), free(seen), free(seen_by), free(users), free(stamp), free(umask), free(uk), free(ui);
    free(all_k), free(all_i), free(all_u), free(all_r), free(prev), free(at);
    bp_ds_close(&ds);
    return 0;
}
