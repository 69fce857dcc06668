// ckpt_run: checkpoints of a training run, and resuming from one (docs/checkpoints.md).
//
// A checkpoint at boundary K is the state after iterations 0..K-1, in ROOT/ckpt-<K>/ (ckpt.h):
//   dense.bin        dense parameters + dense optimizer state (one trainer writes it)
//   emb.bin          every row with its optimizer state (mode local; and --checkpoint-naive,
//                    where one writer collects every row first)
//   server-<s>.bin   modes sync, static and bagpipe: server s's shard, the rows of the keys k
//                    with msg_server_of(k, S) == s in ascending key order, written by that server
//   trainer-<i>.bin  n keys (u64, ascending) then their n rows, laid over the servers' copies on
//                    loading.  sharded: trainer i's shard; static: trainer 0's pinned replica;
//                    bagpipe: the dirty cached rows trainer i owns.  At an iteration boundary
//                    every dirty row is a shared row (a private row is evicted right after its
//                    one use), identical on every trainer; trainer i owns those with
//                    msg_server_of(key, T) == i, so each is written once
//   MANIFEST         the configuration (the saved-model keys of train.c plus mode, layout,
//                    batch size, learning rates, seeds, BLAS threads, the dataset's section
//                    CRCs), iteration K (the data
//                    cursor: batch K is next, in file order), and every part's size and CRC;
//                    committed last by the coordinator (the local process, or trainer 0) once
//                    every part is reported (MSG_CKPT_PART), then older checkpoints are pruned.
// Resuming loads every part back into its home (servers their shards, trainers the dense part)
// and continues at batch K: the run is deterministic given the state, so the final model is
// bit-identical to a run that never stopped.
#ifndef BP_CKPT_RUN_H
#define BP_CKPT_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "jsonl.h"
#include "train.h"

#define CKPT_CLI_OPTS(ck)                                                                                       \
    CLI_STR("checkpoint-dir", 0, &(ck)->dir, NULL,                                                              \
            "write checkpoints under this directory (ckpt-<iteration>/; default: the --resume directory)"),    \
    CLI_I64("checkpoint-every", 0, &(ck)->every, 0, 0, INT64_MAX / 2, "checkpoint every N iterations (0: off)"), \
    CLI_DBL("checkpoint-minutes", 0, &(ck)->minutes, 0, 0, 1e9,                                                 \
            "checkpoint once X minutes have passed since the last one (0: off)"),                               \
    CLI_INT("keep", 0, &(ck)->keep, 2, 1, 1 << 20, "keep the N newest valid checkpoints (older ones are pruned " \
            "after each commit)"),                                                                              \
    CLI_CHOICE("on-checkpoint-error", 0, &(ck)->on_error, 0, "stop|continue",                                   \
               "when a checkpoint cannot be written (disk full...): stop with an error, or warn and train on; "  \
               "a previous checkpoint is kept either way"),                                                     \
    CLI_FLAG("checkpoint-naive", 0, &(ck)->naive,                                                               \
             "--mode sync only: collect every row on trainer 0 and write it from there (the baseline)"),       \
    CLI_STR("resume", 0, &(ck)->resume, NULL, "resume from the newest valid checkpoint under this directory")

// Checks the flags against the mode; with --resume finds the newest valid checkpoint (every
// part's CRC checked), checks its configuration against su (a mismatch names the key, the flag
// and the file) and sets su->ck.start_iter / su->ck.from.
int ckpt_run_setup(train_setup *su);

// When to checkpoint, and what it cost.
typedef struct {
    const ckpt_opts *ck;
    double t_last;              // when the last checkpoint ended (or the run began)
    int n, failed;              // checkpoints committed / failed
    int64_t prev_iter;          // this run's newest checkpoint, or the one it resumed from (-1: none)
    double pause_sum, pause_max; // seconds the writer spent inside checkpoints
} ckpt_sched;
void ckpt_sched_init(ckpt_sched *s, const ckpt_opts *ck);
// 1 when a checkpoint is due after `done` iterations (never after the last: --save covers it).
int ckpt_sched_due(const ckpt_sched *s, int64_t done, int64_t total);
// Records a checkpoint attempt (rc: its result, pause: seconds), writes its JSON line
// ("event":"checkpoint", "ckpt_pause_s") and applies --on-checkpoint-error: returns 0 to train on,
// or rc (with the message extended) to stop.
int ckpt_sched_done(ckpt_sched *s, const train_setup *su, int64_t iter, int rc, double pause, jsonl_file *mf);
// The summary's fields (ckpt_count, ckpt_failed, ckpt_pause_s, ckpt_pause_max_s when checkpointing;
// resumed_at after any --resume) and a printed line.
void ckpt_sched_json(jsonl *j, const ckpt_sched *s);
void ckpt_sched_print(const ckpt_sched *s, double train_s);

// Writing, by the coordinator: begin (creates ROOT/ckpt-<iter>, drops a stale MANIFEST there),
// the dense part, the commit (manifest from tr and su plus the parts, then pruning).
int ckpt_run_begin(const train_setup *su, int64_t iter, char *dir, size_t cap);
// After a failed attempt (parts written, no manifest): removes dir and returns rc, its message kept.
int ckpt_run_abandon(const char *dir, int rc);
int ckpt_run_write_dense(const trainer *tr, const char *dir, ckpt_file *f);
int ckpt_run_commit(const trainer *tr, const train_setup *su, int64_t iter, const char *dir, const ckpt_file *files,
                    int n);
// The whole checkpoint of a process that holds everything (mode local, or trainer 0 after a
// naive collection): dense.bin + emb.bin + commit.
// rank: for the test hook.
int ckpt_run_write_all(const trainer *tr, const train_setup *su, int64_t iter, int rank);
// A server's part: the shard's rows (n, stride) into server-<s>.bin of ROOT/ckpt-<iter>.
int ckpt_run_write_shard(const train_setup *su, int64_t iter, int s, const float *rows, uint64_t n, int stride,
                         ckpt_file *f);
// A trainer's part: keys (n, ascending) and their rows (n, stride) into trainer-<i>.bin.
int ckpt_run_write_rows(const train_setup *su, int64_t iter, int i, const uint64_t *keys, const float *rows,
                        uint64_t n, int stride, ckpt_file *f);

// Messages (msg.h: CKPT_PART): rank's report of its part f (wrc != 0: it failed, f unused) to the
// coordinator `to`; the coordinator's collection of n reports from ranks[], whose part names the
// caller put in files[].name (sizes and CRCs filled in).  A failed part is described in why (the
// first one only); the return code is only for message failures.
int ckpt_run_report(int to, int64_t iter, int wrc, const ckpt_file *f);
int ckpt_run_gather(int64_t iter, int n, const int *ranks, ckpt_file *files, const char *dir, char *why, size_t cap);

// Loading from su->ck.from: the dense part into tr (parameters and optimizer state); a server's
// shard (keys (n) owned by s of S, ascending, and their rows (n, stride)) from server-<s>.bin or
// emb.bin, with the rows of the trainer parts it owns laid over it.
int ckpt_run_load_dense(trainer *tr, const train_setup *su);
int ckpt_run_load_shard(const train_setup *su, const emb_layout *L, int s, int S, const uint64_t *keys, float *rows,
                        uint64_t n);
// The rows (n, stride) of part `name` (keys + rows, as trainer-<i>.bin), whose keys must be keys.
int ckpt_run_load_rows(const train_setup *su, const char *name, const uint64_t *keys, float *rows, uint64_t n,
                       int stride);
// Dense part and every row (tr->table allocated) of a local checkpoint.
int ckpt_run_load_all(trainer *tr, const train_setup *su);
// Every row into t (allocated, layout L) from a manifest's emb.bin or server-<s>.bin parts.
int ckpt_read_table(const char *dir, const ckpt_manifest *m, emb_table *t);

// Test hooks (environment; docs/checkpoints.md): BAGPIPE_TEST_PID_DIR=D makes rank R write its
// pid to D/rank-R.pid; BAGPIPE_TEST_KILL_IN_CKPT=R:K makes rank R kill itself (SIGKILL) after
// writing its part of checkpoint K and before the checkpoint is committed.
void ckpt_test_pidfile(int rank);
void ckpt_test_kill_point(int rank, int64_t iter);

#endif
