// ckpt_run: checkpoints of a training run and resuming (ckpt_run.h, docs/checkpoints.md).
#include "ckpt_run.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "common.h"
#include "model.h"
#include "msg.h"
#include "optim.h"

static const char *const mode_names[] = {"local", "sync", "sharded", "static", "bagpipe", "async"};

static const char *mode_name(int mode) {
    return mode >= 0 && mode < (int)(sizeof mode_names / sizeof *mode_names) ? mode_names[mode] : "?";
}

// The keys a resumed run must agree on, with the flag that sets each.
static const struct {
    const char *key, *flag;
} compat[] = {
    {"mode", "--mode"},
    {"trainers", "--trainers"},
    {"servers", "--servers"},
    {"batch_size", "--batch-size"},
    {"model", "the model flags (--model, --arch-*)"},
    {"cardinalities", "the dataset's tables"},
    {"train_rows", "the dataset's train split"},
    {"data_crc", "the dataset's contents"},
    {"emb_optimizer", "--emb-optimizer"},
    {"dense_optimizer", "--optimizer"},
    {"learning_rate", "--emb-learning-rate"},
    {"dense_learning_rate", "--learning-rate"},
    {"lr_schedule", "--lr-num-warmup-steps, --lr-decay-start-step, --lr-num-decay-steps"},
    {"emb_seed", "--seed"},
    {"threads", "--threads (BLAS results differ across thread counts)"},
    {"static_rows", "--static-rows (0: 1% of the rows)"},
};

// Keys that only some runs record (static_rows: mode static) or that checkpoints written before
// them lack (data_crc): absent from either side, they are not compared.
static int mode_key(const char *key) { return strcmp(key, "static_rows") == 0 || strcmp(key, "data_crc") == 0; }

// The configuration keys of su (those in compat).
static void config_keys(ckpt_manifest *m, const train_setup *su) {
    char buf[CKPT_VAL_MAX];
    model_config_format(&su->mc, buf, sizeof buf);
    ckpt_set(m, "mode", "%s", mode_name(su->mode));
    ckpt_set(m, "trainers", "%d", su->mode == TRAIN_MODE_LOCAL ? 1 : su->trainers);
    ckpt_set(m, "servers", "%d", su->mode == TRAIN_MODE_LOCAL ? 0 : su->mode == TRAIN_MODE_SHARDED ? 0 : su->servers);
    ckpt_set(m, "batch_size", "%d", su->B);
    ckpt_set(m, "model", "%s", buf);
    size_t len = 0;
    for (int f = 0; f < su->lc.F; f++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%llu", f ? "," : "", (unsigned long long)su->lc.card[f]);
    BP_ASSERTF(len < sizeof buf, "cardinality list too long for the manifest");
    ckpt_set(m, "cardinalities", "%s", buf);
    ckpt_set(m, "train_rows", "%llu", (unsigned long long)(su->tr1 - su->tr0));
    // The contents, by the CRC-32s of the file's sections (the header holds them; the planted
    // probabilities of synthetic data are not trained on): another file of the same shape (the
    // wrong day, another seed) would train on from K with other samples.
    if (su->ds)
        ckpt_set(m, "data_crc", "%08x,%08x,%08x", su->ds->info.crc_label, su->ds->info.crc_dense,
                 su->ds->info.crc_sparse);
    ckpt_set(m, "emb_optimizer", "%s", emb_opt_kind_name(su->eopt.kind));
    ckpt_set(m, "dense_optimizer", "%s", su->dopt.kind == DENSE_OPT_SGD ? "sgd" : "adagrad");
    ckpt_set(m, "learning_rate", "%.9g", (double)su->eopt.lr);
    ckpt_set(m, "dense_learning_rate", "%.9g", su->lr);
    ckpt_set(m, "lr_schedule", "%lld,%lld,%lld", (long long)su->sched.warmup, (long long)su->sched.decay_start,
             (long long)su->sched.decay_steps);
    ckpt_set(m, "emb_seed", "%llu", (unsigned long long)su->lc.seed);
    ckpt_set(m, "threads", "%d", su->threads);
    if (su->mode == TRAIN_MODE_STATIC) ckpt_set(m, "static_rows", "%lld", (long long)su->static_rows);
}

static int config_check(const ckpt_manifest *have, const char *dir, const train_setup *su) {
    ckpt_manifest *want = bp_xmalloc(sizeof *want);
    ckpt_manifest_init(want);
    config_keys(want, su);
    int rc = 0;
    const char *kind = ckpt_get(have, "kind");
    if (!kind || strcmp(kind, "checkpoint") != 0)
        rc = bp_fail(BP_EMISMATCH, "%s/MANIFEST: not a training checkpoint (kind %s)", dir, kind ? kind : "(none)");
    for (size_t i = 0; i < sizeof compat / sizeof *compat && !rc; i++) {
        const char *h = ckpt_get(have, compat[i].key), *w = ckpt_get(want, compat[i].key);
        // Checkpoints written before schedules existed ran at a constant rate.
        if (!h && strcmp(compat[i].key, "lr_schedule") == 0) h = "0,0,0";
        // Name the flag the value came from: without --emb-learning-rate it is --learning-rate's.
        const char *flag = compat[i].flag;
        if (strcmp(compat[i].key, "learning_rate") == 0 && su->emb_lr_inherited)
            flag = "--emb-learning-rate, from --learning-rate";
        if (mode_key(compat[i].key) && (!h || !w)) continue;
        if (!h) rc = bp_fail(BP_ECORRUPT, "%s/MANIFEST: missing '%s'", dir, compat[i].key);
        else if (strcmp(h, w) != 0 && strcmp(compat[i].key, "data_crc") == 0)
            rc = bp_fail(BP_EMISMATCH, "%s/MANIFEST: the checkpoint was trained on %s, and %s has the same tables and "
                         "train split but other contents (data_crc %s, this run %s); resume with the dataset the run "
                         "began with", dir, ckpt_get(have, "dataset") ? ckpt_get(have, "dataset") : "another dataset",
                         su->data_path, h, w);
        else if (strcmp(h, w) != 0)
            rc = bp_fail(BP_EMISMATCH, "%s/MANIFEST: the checkpoint has %s = %s, this run %s (%s)", dir, compat[i].key,
                         h, w, flag);
    }
    free(want);
    return rc;
}

// 1 when the paths name the same existing directory.
static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int ckpt_run_setup(train_setup *su) {
    ckpt_opts *ck = &su->ck;
    ck->start_iter = 0, ck->from[0] = 0;
    const int want = ck->every > 0 || ck->minutes > 0;
    if (!ck->dir && want) ck->dir = ck->resume;
    if (want && !ck->dir)
        return bp_fail(BP_EUSAGE, "--checkpoint-every/--checkpoint-minutes: say where with --checkpoint-dir DIR");
    if (ck->dir && !want)
        return bp_fail(BP_EUSAGE, "--checkpoint-dir %s: say when with --checkpoint-every N or --checkpoint-minutes M",
                       ck->dir);
    if (ck->naive && su->mode != TRAIN_MODE_SYNC)
        return bp_fail(BP_EUSAGE, "--checkpoint-naive: measured in --mode sync only (docs/checkpoints.md)");
    if ((want || ck->resume) && su->mode == TRAIN_MODE_ASYNC)
        return bp_fail(BP_EUSAGE, "--%s: --mode async has no checkpoints (its caches hold rows older than the "
                       "servers'; docs/checkpoints.md)", ck->resume ? "resume" : "checkpoint-every/--checkpoint-minutes");
    // Checked now, not at the first checkpoint: a file in the way, or a place where nothing can
    // be created, is refused before any training.
    int rc = want ? ckpt_dir_check(ck->dir) : 0;
    if (want) { // this run's name in its manifests, which pruning tells from a skipped run's (ckpt_prune)
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(ck->run_id, sizeof ck->run_id, "%.32s-%ld-%lld.%09ld", host, (long)getpid(), (long long)ts.tv_sec,
                 ts.tv_nsec);
    }
    if (rc && ck->dir == ck->resume) // read it may be; the run writes its checkpoints there too
        return bp_fail(rc, "--resume %s (without --checkpoint-dir this run writes its checkpoints there too: give "
                       "--checkpoint-dir with an empty or new directory to write them elsewhere)", bp_errmsg(rc));
    if (rc) return bp_fail(rc, "--checkpoint-dir %s", bp_errmsg(rc));
    // A new run into another run's checkpoints would mix the two: pruning keeps the newest, which
    // may be the other run's (this run's own were removed as soon as written), and a --resume
    // after a failure would take them.  So would a resumed run writing into a directory other than
    // the one it resumes from.
    const int other_dir = want && (!ck->resume || !same_dir(ck->dir, ck->resume));
    int64_t old = other_dir ? ckpt_newest_valid(ck->dir) : -1;
    if (old >= 0 && !ck->resume)
        return bp_fail(BP_EUSAGE, "--checkpoint-dir %s: holds the checkpoints of an earlier run (the newest at iteration "
                       "%lld); continue that run with --resume %s, or give an empty or new directory", ck->dir,
                       (long long)old, ck->dir);
    if (old >= 0)
        return bp_fail(BP_EUSAGE, "--checkpoint-dir %s: holds the checkpoints of another run (the newest at iteration "
                       "%lld), and this run resumes from %s; give an empty or new directory, or leave "
                       "--checkpoint-dir out to write into %s", ck->dir, (long long)old, ck->resume, ck->resume);
    if (!ck->resume) return 0;
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    int64_t it = 0;
    rc = ckpt_latest(ck->resume, ck->from, sizeof ck->from, &it, m);
    if (rc && strstr(bp_errmsg(rc), ": no valid checkpoint among ")) // each damaged: say what is left to do
        rc = bp_fail(rc, "%s; nothing to resume from: train anew (without --resume) with an empty or new "
                     "--checkpoint-dir; these are left as they are", bp_errmsg(rc));
    if (!rc) rc = config_check(m, ck->from, su);
    if (!rc && it > su->total_iters)
        rc = bp_fail(BP_EUSAGE, "--resume %s: the checkpoint is at iteration %lld, beyond this run's %lld (--iters, "
                     "--epochs)", ck->from, (long long)it, (long long)su->total_iters);
    free(m);
    if (rc) return rc;
    ck->start_iter = it;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Schedule and accounting

void ckpt_sched_init(ckpt_sched *s, const ckpt_opts *ck) {
    memset(s, 0, sizeof *s);
    s->ck = ck, s->t_last = bp_now();
    s->prev_iter = ck->from[0] ? ck->start_iter : -1;
}

int ckpt_sched_due(const ckpt_sched *s, int64_t done, int64_t total) {
    const ckpt_opts *ck = s->ck;
    if (!ck->dir || done >= total) return 0;
    if (ck->every > 0 && done % ck->every == 0) return 1;
    return ck->minutes > 0 && bp_now() - s->t_last >= ck->minutes * 60.0;
}

int ckpt_sched_done(ckpt_sched *s, const train_setup *su, int64_t iter, int rc, double pause, jsonl_file *mf) {
    s->t_last = bp_now();
    char msg[1536] = ""; // taken before the metrics line, whose failure would replace it
    if (rc) snprintf(msg, sizeof msg, "%s", bp_errmsg(rc));
    jsonl j;
    jsonl_begin(&j);
    jsonl_str(&j, "event", "checkpoint");
    jsonl_int(&j, "iter", iter);
    jsonl_int(&j, "ok", rc == 0);
    jsonl_num(&j, "ckpt_pause_s", pause);
    jsonl_str(&j, "method", s->ck->naive ? "naive" : "parts");
    const int wrc = jsonl_end(&j, mf);
    if (!rc) {
        s->prev_iter = iter;
        s->n++, s->pause_sum += pause;
        s->pause_max = BP_MAX(s->pause_max, pause);
        return wrc;
    }
    s->failed++;
    char kept[96] = ""; // only where there is one: this run's last, or the one it resumed from
    if (s->prev_iter >= 0)
        snprintf(kept, sizeof kept, "; the previous checkpoint is kept (iteration %lld)", (long long)s->prev_iter);
    // A peer stalled or gone, or a model that is not finite (part_finite): no run can go on,
    // whatever --on-checkpoint-error says.
    if (rc == BP_EPEER || rc == BP_ERANGE)
        return bp_fail(rc, "checkpoint at iteration %lld failed: %s%s; stopping", (long long)iter, msg, kept);
    if (s->ck->on_error == CKPT_ON_ERROR_CONTINUE) {
        fprintf(stderr, "bagpipe: warning: checkpoint at iteration %lld failed: %s%s; training goes on "
                "(--on-checkpoint-error continue)\n", (long long)iter, msg, kept);
        return wrc;
    }
    return bp_fail(rc, "checkpoint at iteration %lld failed: %s%s; stopping (--on-checkpoint-error continue would "
                   "train on)", (long long)iter, msg, kept);
}

void ckpt_sched_json(jsonl *j, const ckpt_sched *s) {
    if (s->ck->dir) {
        jsonl_int(j, "ckpt_count", s->n);
        jsonl_int(j, "ckpt_failed", s->failed);
        jsonl_num(j, "ckpt_pause_s", s->pause_sum);
        jsonl_num(j, "ckpt_pause_max_s", s->pause_max);
    }
    // A resumed run that writes no checkpoints of its own (--resume alone) is resumed all the same.
    if (s->ck->start_iter) jsonl_int(j, "resumed_at", s->ck->start_iter);
}

void ckpt_sched_print(const ckpt_sched *s, double train_s) {
    if (!s->ck->dir || (!s->n && !s->failed)) return;
    char t[32];
    printf("checkpoints: %d written to %s%s, paused training %.3f s in all (%.2f%% of %s), at most %.3f s",
           s->n, s->ck->dir, s->ck->naive ? " (naive: every row through trainer 0)" : "", s->pause_sum,
           train_s > 0 ? 100.0 * s->pause_sum / train_s : 0.0, bp_fmt_seconds(t, sizeof t, train_s), s->pause_max);
    if (s->failed) printf("; %d failed", s->failed);
    printf("\n");
}

// ---------------------------------------------------------------------------------------------
// Writing

int ckpt_run_begin(const train_setup *su, int64_t iter, char *dir, size_t cap) {
    int rc = ckpt_dir_create(su->ck.dir, iter, dir, cap);
    if (rc) return rc;
    // A leftover of an earlier attempt at this iteration (a run that died before its commit, or
    // one resumed from an older checkpoint) must not describe the parts about to be rewritten.
    char path[4200];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    if (unlink(path) != 0 && errno != ENOENT) return bp_fail(BP_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

int ckpt_run_abandon(const char *dir, int rc) {
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", bp_errmsg(rc));
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    // Without a manifest it is no checkpoint, and removing it frees the space; one whose manifest
    // did get committed (a failure after the rename) is left alone.
    if (ckpt_manifest_load(dir, m) != 0 && ckpt_remove_dir(dir) != 0) bp_clear_error();
    free(m);
    return bp_fail(rc, "%s", msg);
}

// 0, or the error of a part that is not finite (its floats p[0, n)): a checkpoint of a model whose
// last update diverged is not written (the next iteration's loss would stop the run, too late
// for a checkpoint committed in between, then the newest a resume or eval takes).
static int part_finite(const char *dir, const char *name, const float *p, size_t n) {
    const size_t i = bp_first_nonfinite(p, n);
    if (i == n) return 0;
    return bp_fail(BP_ERANGE, "%s/%s: value %zu of %zu is %s: the model is not finite (its last update diverged; "
                   "%s), and is not checkpointed", dir, name, i, n, isnan(p[i]) ? "NaN" : "infinite", train_lr_hint());
}

int ckpt_run_write_dense(const trainer *tr, const char *dir, ckpt_file *f) {
    int rc = part_finite(dir, "dense.bin", tr->m.params, tr->m.n_params);
    if (!rc && tr->n_dstate) rc = part_finite(dir, "dense.bin (its optimizer state)", tr->dstate, tr->n_dstate);
    if (rc) return rc;
    const void *bufs[2] = {tr->m.params, tr->dstate};
    size_t lens[2] = {tr->m.n_params * sizeof(float), tr->n_dstate * sizeof(float)};
    return ckpt_write_part(dir, "dense.bin", bufs, lens, tr->n_dstate ? 2 : 1, f);
}

int ckpt_run_commit(const trainer *tr, const train_setup *su, int64_t iter, const char *dir, const ckpt_file *files,
                    int n) {
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    ckpt_manifest_init(m);
    trainer_manifest_fill(tr, m, su->ds, iter, iter * su->B, su->seed);
    ckpt_set(m, "kind", "checkpoint");
    ckpt_set(m, "run", "%s", su->ck.run_id);
    config_keys(m, su);
    for (int i = 0; i < n; i++) ckpt_add_file(m, &files[i]);
    int rc = ckpt_manifest_commit(dir, m);
    free(m);
    if (rc) return rc;
    const int64_t since = su->ck.from[0] ? su->ck.start_iter : -1;
    int removed = ckpt_prune(su->ck.dir, su->ck.keep, iter, since, su->ck.run_id);
    if (removed < 0) // the checkpoint is committed; a failed prune only leaves old ones behind
        fprintf(stderr, "bagpipe: warning: pruning old checkpoints: %s\n", bp_errmsg(removed));
    return 0;
}

int ckpt_run_write_all(const trainer *tr, const train_setup *su, int64_t iter, int rank) {
    char dir[4096] = "";
    ckpt_file f[2];
    int rc = ckpt_run_begin(su, iter, dir, sizeof dir);
    if (!rc) rc = ckpt_run_write_dense(tr, dir, &f[0]);
    if (!rc) {
        const void *ebuf[1] = {tr->table.data};
        size_t elen[1] = {(size_t)emb_layout_bytes(&tr->L)};
        rc = part_finite(dir, "emb.bin", tr->table.data, elen[0] / sizeof(float));
        if (!rc) rc = ckpt_write_part(dir, "emb.bin", ebuf, elen, 1, &f[1]);
    }
    if (rc) return dir[0] ? ckpt_run_abandon(dir, rc) : rc;
    ckpt_test_kill_point(rank, iter);
    rc = ckpt_run_commit(tr, su, iter, dir, f, 2);
    return rc ? ckpt_run_abandon(dir, rc) : 0;
}

int ckpt_run_write_shard(const train_setup *su, int64_t iter, int s, const float *rows, uint64_t n, int stride,
                         ckpt_file *f) {
    char dir[4096], name[CKPT_NAME_MAX];
    int rc = ckpt_dir_create(su->ck.dir, iter, dir, sizeof dir);
    if (rc) return rc;
    snprintf(name, sizeof name, "server-%d.bin", s);
    const void *bufs[1] = {rows};
    size_t lens[1] = {(size_t)n * (size_t)stride * sizeof(float)};
    if ((rc = part_finite(dir, name, rows, (size_t)n * (size_t)stride)) != 0) return rc;
    return ckpt_write_part(dir, name, bufs, lens, 1, f);
}

int ckpt_run_write_rows(const train_setup *su, int64_t iter, int i, const uint64_t *keys, const float *rows,
                        uint64_t n, int stride, ckpt_file *f) {
    char dir[4096], name[CKPT_NAME_MAX];
    int rc = ckpt_dir_create(su->ck.dir, iter, dir, sizeof dir);
    if (rc) return rc;
    snprintf(name, sizeof name, "trainer-%d.bin", i);
    const void *bufs[2] = {keys, rows};
    size_t lens[2] = {(size_t)n * sizeof *keys, (size_t)n * (size_t)stride * sizeof(float)};
    if ((rc = part_finite(dir, name, rows, (size_t)n * (size_t)stride)) != 0) return rc;
    return ckpt_write_part(dir, name, bufs, lens, 2, f);
}

int ckpt_run_report(int to, int64_t iter, int wrc, const ckpt_file *f) {
    uint64_t buf[(MSG_HEADER_BYTES + 16) / 8];
    msg_header h = {MSG_CKPT_PART, wrc ? MSG_F_FAILED : 0, (uint64_t)iter, wrc ? 0 : 1, 4};
    float *rec;
    msg_encode(buf, &h, NULL, &rec);
    if (!wrc) {
        uint8_t *r = (uint8_t *)rec;
        bp_put_u64(r, f->size), bp_put_u32(r + 8, f->crc), bp_put_u32(r + 12, 0);
    }
    comm_req q;
    int rc = comm_isend(buf, msg_bytes(MSG_CKPT_PART, h.n, 4), to, MSG_CKPT_PART, &q);
    return rc ? rc : comm_wait(&q, NULL);
}

int ckpt_run_gather(int64_t iter, int n, const int *ranks, ckpt_file *files, const char *dir, char *why, size_t cap) {
    for (int p = 0; p < n; p++) {
        uint64_t buf[(MSG_HEADER_BYTES + 16) / 8];
        size_t len = 0;
        int rc = comm_recv(buf, sizeof buf, ranks[p], MSG_CKPT_PART, &len);
        msg_expect ex = {.kind = MSG_CKPT_PART, .width = 4, .max_n = 1, .iter = iter};
        msg_header h;
        const float *rec;
        if (!rc) rc = msg_decode(buf, len, ranks[p], &ex, &h, NULL, &rec);
        if (rc) return rc;
        if ((h.flags & MSG_F_FAILED) || h.n != 1) {
            if (!why[0])
                snprintf(why, cap, "rank %d could not write %s/%s (its message is above)", ranks[p], dir, files[p].name);
            continue;
        }
        files[p].size = bp_get_u64((const uint8_t *)rec), files[p].crc = bp_get_u32((const uint8_t *)rec + 8);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Loading

int ckpt_run_load_dense(trainer *tr, const train_setup *su) {
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    int rc = ckpt_manifest_load(su->ck.from, m);
    if (!rc) {
        void *bufs[2] = {tr->m.params, tr->dstate};
        size_t lens[2] = {tr->m.n_params * sizeof(float), tr->n_dstate * sizeof(float)};
        rc = ckpt_read_part(su->ck.from, m, "dense.bin", bufs, lens, tr->n_dstate ? 2 : 1);
    }
    free(m);
    return rc;
}

// Rows of the keys of shard s of S (ascending) from a whole-table part (n_rows, stride).
static void gather_shard(const float *table, const emb_layout *L, int s, int S, float *rows, uint64_t n) {
    uint64_t j = 0;
    for (uint64_t k = 0; k < L->rows; k++)
        if (msg_server_of(k, S) == (uint32_t)s) {
            BP_ASSERT(j < n);
            memcpy(rows + j * (size_t)L->stride, table + k * (size_t)L->stride, (size_t)L->stride * sizeof(float));
            j++;
        }
    BP_ASSERT(j == n);
}

// Calls put(ctx, key, row) for every row of every trainer-<i>.bin part listed in m.
static int overlay_trainer_parts(const char *dir, const ckpt_manifest *m, const emb_layout *L,
                                 void (*put)(void *ctx, uint64_t key, const float *row), void *ctx) {
    const size_t per = 8 + (size_t)L->stride * sizeof(float);
    int rc = 0;
    for (int i = 0; i < m->n_files && !rc; i++) {
        const ckpt_file *f = &m->files[i];
        int idx;
        char tail;
        if (sscanf(f->name, "trainer-%d.bi%c", &idx, &tail) != 2 || tail != 'n') continue;
        // The size the file has, before allocating for the one the manifest says (a manifest edited
        // to a huge size used to abort with "out of memory").
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, f->name);
        if (stat(path, &st) != 0) return bp_fail(BP_EIO, "%s: cannot open: %s", path, strerror(errno));
        if ((uint64_t)st.st_size != f->size)
            return bp_fail(BP_ECORRUPT, "%s: %llu bytes, the manifest says %llu (truncated or replaced)", path,
                           (unsigned long long)st.st_size, (unsigned long long)f->size);
        if (f->size % per)
            return bp_fail(BP_ECORRUPT, "%s/%s: %llu bytes, not whole rows of %d floats with their keys", dir, f->name,
                           (unsigned long long)f->size, L->stride);
        const uint64_t n = f->size / per;
        uint64_t *keys = bp_xmalloc((n ? n : 1) * 8);
        float *rows = bp_xmalloc((n ? n : 1) * (size_t)L->stride * sizeof(float));
        void *bufs[2] = {keys, rows};
        size_t lens[2] = {(size_t)n * 8, (size_t)n * (size_t)L->stride * sizeof(float)};
        rc = ckpt_read_part(dir, m, f->name, bufs, lens, 2);
        for (uint64_t j = 0; j < n && !rc; j++) {
            if (keys[j] >= L->rows || (j && keys[j] <= keys[j - 1]))
                rc = bp_fail(BP_ECORRUPT, "%s/%s: key %llu out of order or range", dir, f->name,
                             (unsigned long long)keys[j]);
            else put(ctx, keys[j], rows + j * (size_t)L->stride);
        }
        free(keys), free(rows);
    }
    return rc;
}

typedef struct {
    const uint64_t *keys;
    float *rows;
    uint64_t n;
    int s, S, stride;
} shard_ctx;

static void put_shard(void *ctx, uint64_t key, const float *row) {
    shard_ctx *c = ctx;
    if (msg_server_of(key, c->S) != (uint32_t)c->s) return;
    uint64_t lo = 0, hi = c->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (c->keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    BP_ASSERT(lo < c->n && c->keys[lo] == key); // the shard holds every key it owns
    memcpy(c->rows + lo * (size_t)c->stride, row, (size_t)c->stride * sizeof(float));
}

static void put_table(void *ctx, uint64_t key, const float *row) {
    emb_table *t = ctx;
    memcpy(emb_table_row(t, key), row, (size_t)t->L.stride * sizeof(float));
}

int ckpt_run_load_shard(const train_setup *su, const emb_layout *L, int s, int S, const uint64_t *keys, float *rows,
                        uint64_t n) {
    const char *dir = su->ck.from;
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    int rc = ckpt_manifest_load(dir, m);
    char name[CKPT_NAME_MAX];
    snprintf(name, sizeof name, "server-%d.bin", s);
    if (!rc && ckpt_find(m, name)) {
        void *bufs[1] = {rows};
        size_t lens[1] = {(size_t)n * (size_t)L->stride * sizeof(float)};
        rc = ckpt_read_part(dir, m, name, bufs, lens, 1);
    } else if (!rc) { // a naive checkpoint: every row in emb.bin
        emb_table t;
        rc = emb_table_alloc(&t, L, 0);
        if (!rc) {
            void *bufs[1] = {t.data};
            size_t lens[1] = {(size_t)emb_layout_bytes(L)};
            rc = ckpt_read_part(dir, m, "emb.bin", bufs, lens, 1);
            if (!rc) gather_shard(t.data, L, s, S, rows, n);
            emb_table_free(&t);
        }
    }
    shard_ctx c = {keys, rows, n, s, S, L->stride};
    if (!rc) rc = overlay_trainer_parts(dir, m, L, put_shard, &c);
    free(m);
    return rc;
}

int ckpt_read_table(const char *dir, const ckpt_manifest *m, emb_table *t) {
    const emb_layout *L = &t->L;
    if (ckpt_find(m, "emb.bin")) {
        void *bufs[1] = {t->data};
        size_t lens[1] = {(size_t)emb_layout_bytes(L)};
        return ckpt_read_part(dir, m, "emb.bin", bufs, lens, 1);
    }
    int64_t S;
    int rc = ckpt_get_i64(m, dir, "servers", &S);
    if (rc) return rc;
    if (S < 0 || S > 1024 || (S > 0 && !ckpt_find(m, "server-0.bin")) || (S == 0 && !ckpt_find(m, "trainer-0.bin")))
        return bp_fail(BP_ECORRUPT, "%s/MANIFEST: lists neither emb.bin nor server or trainer parts", dir);
    const size_t row_bytes = (size_t)L->stride * sizeof(float);
    for (int s = 0; s < S && !rc; s++) {
        uint64_t n = 0;
        for (uint64_t k = 0; k < L->rows; k++) n += msg_server_of(k, (int)S) == (uint32_t)s;
        float *rows = bp_xmalloc((n ? n : 1) * row_bytes);
        char name[CKPT_NAME_MAX];
        snprintf(name, sizeof name, "server-%d.bin", s);
        void *bufs[1] = {rows};
        size_t lens[1] = {(size_t)n * row_bytes};
        rc = ckpt_read_part(dir, m, name, bufs, lens, 1);
        for (uint64_t k = 0, j = 0; !rc && k < L->rows; k++)
            if (msg_server_of(k, (int)S) == (uint32_t)s) memcpy(emb_table_row(t, k), rows + (j++) * L->stride, row_bytes);
        free(rows);
    }
    return rc ? rc : overlay_trainer_parts(dir, m, L, put_table, t);
}

// ---------------------------------------------------------------------------------------------
// Test hooks

void ckpt_test_pidfile(int rank) {
    const char *d = getenv("BAGPIPE_TEST_PID_DIR");
    if (!d || !*d) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.pid", d, rank);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
}

void ckpt_test_kill_point(int rank, int64_t iter) {
    const char *v = getenv("BAGPIPE_TEST_KILL_IN_CKPT");
    int r;
    long long k;
    if (v && sscanf(v, "%d:%lld", &r, &k) == 2 && r == rank && k == iter) {
        fprintf(stderr, "bagpipe: rank %d: test hook: killed inside checkpoint %lld\n", rank, k);
        fflush(stderr);
        raise(SIGKILL);
    }
}

int ckpt_run_load_rows(const train_setup *su, const char *name, const uint64_t *keys, float *rows, uint64_t n,
                       int stride) {
    const char *dir = su->ck.from;
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    uint64_t *got = bp_xmalloc((n ? n : 1) * sizeof *got);
    int rc = ckpt_manifest_load(dir, m);
    if (!rc) {
        void *bufs[2] = {got, rows};
        size_t lens[2] = {(size_t)n * sizeof *got, (size_t)n * (size_t)stride * sizeof(float)};
        rc = ckpt_read_part(dir, m, name, bufs, lens, 2);
    }
    if (!rc && n && memcmp(got, keys, (size_t)n * sizeof *got) != 0)
        rc = bp_fail(BP_EMISMATCH, "%s/%s: holds other rows than this trainer's", dir, name);
    free(got), free(m);
    return rc;
}

int ckpt_run_load_all(trainer *tr, const train_setup *su) {
    ckpt_manifest *m = bp_xmalloc(sizeof *m);
    int rc = ckpt_manifest_load(su->ck.from, m);
    if (!rc) rc = ckpt_run_load_dense(tr, su);
    if (!rc) rc = ckpt_read_table(su->ck.from, m, &tr->table);
    free(m);
    return rc;
}
