// train / eval: single-process training (`--mode local`, the reference every other mode must
// match bit for bit), evaluation, and saved models.
//
// One iteration over global batch t (rows [t*B, (t+1)*B) of the train split, file order):
//   gather rows -> model forward -> BCE (mean over the batch) -> model backward ->
//   dense optimizer step -> coalesce row gradients (ascending keys, sample order) -> row optimizer.
// The last partial batch of an epoch is dropped, as the DLRM reference's loader does with
// drop_last, so every iteration has exactly B samples.
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_run.h"
#include "cli.h"
#include "cmds.h"
#include "comm.h"
#include "common.h"
#include "data_bin.h"
#include "dist.h"
#include "emb.h"
#include "jsonl.h"
#include "launch.h"
#include "metric.h"
#include "model.h"
#include "msg.h"
#include "nn.h"
#include "optim.h"
#include "oracle.h"
#include "progress.h"
#include "train.h"

#define SAVE_FORMAT "1"
// --learning-rate's default (the DLRM Kaggle benchmark's), and DCN's for its dense part with the
// warmup it comes with (cmd_train).
#define DEFAULT_LR 0.1
#define DCN_DEFAULT_DENSE_LR 0.03
#define DCN_DEFAULT_WARMUP 200

// ---------------------------------------------------------------------------------------------
// The trainer state shared by train and eval.

int trainer_init(trainer *tr, const model_config *mc, const emb_layout_cfg *lc, const dense_opt *dopt,
                 const emb_opt *eopt, int max_batch, int alloc_only) {
    memset(tr, 0, sizeof *tr);
    tr->dopt = *dopt;
    tr->eopt = *eopt;
    tr->lr = dopt->lr, tr->emb_lr = eopt->lr;
    int rc = emb_layout_init(&tr->L, lc);
    if (rc) return rc;
    rc = model_init(&tr->m, mc, max_batch);
    if (rc) return rc;
    const int B = max_batch, F = mc->F, E = mc->E;
    rc = emb_grad_init(&tr->g, B * F, E);
    if (rc) goto fail;
    if (alloc_only != TRAINER_NO_TABLE) {
        rc = alloc_only ? emb_table_alloc(&tr->table, &tr->L, 1) : emb_table_init(&tr->table, &tr->L, 0);
        if (rc) goto fail;
    }
    tr->emb = bp_xmalloc((size_t)B * F * E * sizeof(float));
    tr->d_emb = bp_xmalloc((size_t)B * F * E * sizeof(float));
    tr->logit = bp_xmalloc((size_t)B * sizeof(float));
    tr->dlogit = bp_xmalloc((size_t)B * sizeof(float));
    tr->n_dstate = dense_opt_state_floats(dopt, tr->m.n_params);
    tr->dstate = tr->n_dstate ? bp_xmalloc(tr->n_dstate * sizeof(float)) : NULL;
    if (tr->dstate) dense_opt_state_init(dopt, tr->dstate, tr->n_dstate);
    return 0;
fail:
    trainer_free(tr);
    return rc;
}

void trainer_free(trainer *tr) {
    model_free(&tr->m);
    emb_table_free(&tr->table);
    emb_grad_free(&tr->g);
    free(tr->emb), free(tr->d_emb), free(tr->logit), free(tr->dlogit), free(tr->dstate);
    memset(tr, 0, sizeof *tr);
}

emb_opt trainer_eopt_at(const trainer *tr, int64_t t) {
    emb_opt o = tr->eopt;
    o.lr = lr_schedule_rate(&tr->sched, tr->emb_lr, t);
    return o;
}

dense_opt trainer_dopt_at(const trainer *tr, int64_t t) {
    dense_opt o = tr->dopt;
    o.lr = lr_schedule_rate(&tr->sched, tr->lr, t);
    return o;
}

double trainer_step(trainer *tr, int64_t t, const float *dense, const uint32_t *ids, const uint8_t *label, int B) {
    model *m = &tr->m;
    const dense_opt dopt = trainer_dopt_at(tr, t);
    const emb_opt eopt = trainer_eopt_at(tr, t);
    emb_gather(&tr->table, ids, B, tr->emb);
    model_forward(m, dense, tr->emb, B, tr->logit);
    double loss = bce_with_logits(tr->logit, label, B, 1.0f / (float)B, tr->dlogit);
    model_zero_grad(m);
    model_backward(m, dense, tr->emb, tr->dlogit, tr->d_emb, NULL);
    dense_opt_step(&dopt, m->params, m->grads, tr->dstate, m->n_params);
    emb_grad_coalesce(&tr->g, &tr->L, ids, tr->d_emb, B);
    emb_opt_apply_table(&eopt, &tr->table, &tr->g, nn_threads());
    return loss / B;
}

void trainer_eval(trainer *tr, const bp_dataset *ds, uint64_t r0, uint64_t r1, int B, metric_result *res,
                  metric_result *bayes) {
    trainer_eval_to(tr, ds, r0, r1, B, res, bayes, NULL, NULL);
}

int trainer_eval_to(trainer *tr, const bp_dataset *ds, uint64_t r0, uint64_t r1, int B, metric_result *res,
                    metric_result *bayes, trainer_eval_sink sink, void *ctx) {
    const int Nd = (int)ds->info.n_dense, F = (int)ds->info.n_sparse;
    metric_acc acc, truth;
    metric_acc_init(&acc, 1, r1 - r0);
    metric_acc_init(&truth, 0, ds->prob && bayes ? r1 - r0 : 1);
    int rc = 0;
    for (uint64_t r = r0; r < r1 && !rc; r += (uint64_t)B) {
        int n = (int)BP_MIN((uint64_t)B, r1 - r);
        emb_gather(&tr->table, ds->sparse + r * F, n, tr->emb);
        model_forward(&tr->m, ds->dense + r * Nd, tr->emb, n, tr->logit);
        metric_acc_add(&acc, tr->logit, ds->label + r, (size_t)n);
        if (ds->prob && bayes) metric_acc_add(&truth, ds->prob + r, ds->label + r, (size_t)n);
        if (sink) rc = sink(ctx, r, tr->logit, n);
    }
    metric_acc_compute(&acc, res);
    if (bayes) {
        memset(bayes, 0, sizeof *bayes);
        bayes->auc = bayes->logloss = bayes->accuracy = NAN;
        if (ds->prob) metric_acc_compute(&truth, bayes);
    }
    metric_acc_free(&acc);
    metric_acc_free(&truth);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Saved models: MANIFEST (configuration) + dense.bin (parameters, dense optimizer state) +
// emb.bin (every embedding row with its optimizer state).

// How a dataset's ids were made, as a manifest records it: "frequency", "raw" or "hash N".
static const char *id_mapping_name(const bp_ds_info *in, char *buf, size_t n) {
    if (in->idmap == BP_IDMAP_HASH) snprintf(buf, n, "hash %llu", (unsigned long long)in->max_ind_range);
    else snprintf(buf, n, "%s", bp_ds_idmap_name(in->idmap));
    return buf;
}

void trainer_manifest_fill(const trainer *tr, ckpt_manifest *m, const bp_dataset *ds, int64_t iter, int64_t samples,
                           uint64_t seed) {
    ckpt_manifest man = {0}; // built here, copied out: the keys stay in this order
    char buf[CKPT_VAL_MAX];
    model_config_format(&tr->m.cfg, buf, sizeof buf);
    ckpt_set(&man, "format", SAVE_FORMAT);
    ckpt_set(&man, "kind", "model");
    ckpt_set(&man, "model", "%s", buf);
    ckpt_set(&man, "dense_features", "%d", tr->m.cfg.Nd);
    ckpt_set(&man, "sparse_features", "%d", tr->m.cfg.F);
    size_t len = 0;
    for (int f = 0; f < tr->L.F; f++) len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%llu", f ? "," : "", (unsigned long long)tr->L.card[f]);
    BP_ASSERTF(len < sizeof buf, "cardinality list too long for the manifest");
    ckpt_set(&man, "cardinalities", "%s", buf);
    ckpt_set(&man, "row_stride", "%d", tr->L.stride);
    ckpt_set(&man, "row_state", "%d", tr->L.S);
    ckpt_set(&man, "emb_seed", "%llu", (unsigned long long)tr->L.seed);
    ckpt_set(&man, "emb_optimizer", "%s", emb_opt_kind_name(tr->eopt.kind));
    ckpt_set(&man, "dense_optimizer", "%s", tr->dopt.kind == DENSE_OPT_SGD ? "sgd" : "adagrad");
    ckpt_set(&man, "learning_rate", "%.9g", (double)tr->eopt.lr);
    ckpt_set(&man, "seed", "%llu", (unsigned long long)seed);
    ckpt_set(&man, "iteration", "%lld", (long long)iter);
    ckpt_set(&man, "samples", "%lld", (long long)samples);
    // The dataset's path, for messages only: a manifest value is one line, so a newline or other
    // control character in the name becomes '?' (a path with a newline used to abort the run at
    // its save, after training).
    char path[CKPT_VAL_MAX];
    snprintf(path, sizeof path, "%s", ds ? ds->path : "");
    for (char *c = path; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    ckpt_set(&man, "dataset", "%s", path);
    if (ds) // its split, so that eval can tell the same rows split otherwise (trainer_load)
        ckpt_set(&man, "dataset_split", "%llu,%llu,%llu", (unsigned long long)ds->info.split[0],
                 (unsigned long long)ds->info.split[1], (unsigned long long)ds->info.split[2]);
    if (ds) { // and how its ids were made, with its frequency ids' vocabularies (trainer_load)
        char im[48];
        ckpt_set(&man, "id_mapping", "%s", id_mapping_name(&ds->info, im, sizeof im));
        if (ds->info.vocab_fp)
            ckpt_set(&man, "vocab_fingerprint", "%016llx", (unsigned long long)ds->info.vocab_fp);
    }
    ckpt_set(&man, "n_params", "%zu", tr->m.n_params);
    for (int i = 0; i < man.n_kv; i++) ckpt_set(m, man.key[i], "%s", man.val[i]);
}

// Writes the parts into dir and fills *man, whose commit makes them a model (trainer_save).
static int trainer_save_parts(const trainer *tr, const char *dir, const bp_dataset *ds, int64_t iter, int64_t samples,
                              uint64_t seed, ckpt_manifest *out) {
    ckpt_manifest man;
    ckpt_manifest_init(&man);
    trainer_manifest_fill(tr, &man, ds, iter, samples, seed);
    ckpt_file f;
    const void *dbufs[2] = {tr->m.params, tr->dstate};
    size_t dlens[2] = {tr->m.n_params * sizeof(float), tr->n_dstate * sizeof(float)};
    int rc = ckpt_write_part(dir, "dense.bin", dbufs, dlens, tr->n_dstate ? 2 : 1, &f);
    if (rc) return rc;
    ckpt_add_file(&man, &f);
    // BAGPIPE_TEST_SAVE_FAIL=1 (tests): a save that fails between its parts, as a full disk would;
    // =2: one interrupted there, as by a Ctrl-C (SIGINT).
    const char *fail = getenv("BAGPIPE_TEST_SAVE_FAIL");
    if (fail && *fail == '1') return bp_fail(BP_EIO, "%s/emb.bin: cannot write: test failure", dir);
    if (fail && *fail == '2') raise(SIGINT);
    const void *ebuf[1] = {tr->table.data};
    size_t elen[1] = {(size_t)emb_layout_bytes(&tr->L)};
    rc = ckpt_write_part(dir, "emb.bin", ebuf, elen, 1, &f);
    if (rc) return rc;
    ckpt_add_file(&man, &f);
    *out = man;
    return 0;
}

// The new model is written beside dir and then takes its place as a whole (ckpt_stage_begin; a new
// directory is renamed into place, ckpt_stage_new): an old model stays valid until the new one is
// complete, and not even a kill -9 leaves dir with parts and no MANIFEST.  Where the model is
// written into dir itself (a symbolic link, or a sibling that cannot be made), a save that fails
// (a full disk) removes the parts it wrote: without a MANIFEST they are no model, only space taken.
int trainer_save(const trainer *tr, const char *dir, const bp_dataset *ds, int64_t iter, int64_t samples,
                 uint64_t seed) {
    struct stat st;
    char path[4200];
    const int made = stat(dir, &st) != 0;
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    const int fresh = lstat(path, &st) != 0;
    char stage[4200], note[4400];
    int rc = made ? 0 : ckpt_mkdir(dir); // (an existing dir: that it is a directory)
    if (rc) return rc;
    ckpt_stage_warn_leftovers(dir);
    if (made && (rc = ckpt_stage_new(dir, stage, sizeof stage))) return rc;
    const int staged = made || ckpt_stage_begin(dir, stage, sizeof stage);
    // A Ctrl-C removes the parts written (a resume's save would refuse to replace them), and the
    // MANIFEST too: one that comes just after its commit leaves no model, as the note says, where
    // the parts alone would leave a MANIFEST naming files that are gone.
    static const char *const parts[] = {"dense.bin", "emb.bin", "MANIFEST"};
    if (staged) bp_signal_remove_dir(stage); // until it takes dir's place: a Ctrl-C removes it
    else if (fresh)
        for (size_t i = 0; i < BP_ARRAY_LEN(parts); i++) {
            snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
            bp_signal_remove_file((int)i, path);
        }
    // A Ctrl-C here says what it left (it ended the run without a word), and the lines printed so
    // far (the results) are out of stdio's buffer first, which the signal would lose.
    snprintf(note, sizeof note, "bagpipe: interrupted while saving the model to %s: %s\n", dir,
             staged && !fresh ? "the model saved there before is kept, the new one is not saved"
                    : fresh ? "it is not saved (the parts written are removed)"
                            : "it is not saved (no MANIFEST: the parts written are no model)");
    fflush(stdout);
    bp_signal_note(note);
    ckpt_manifest *man = bp_xmalloc(sizeof *man);
    rc = trainer_save_parts(tr, staged ? stage : dir, ds, iter, samples, seed, man);
    if (!rc) rc = ckpt_manifest_commit(staged ? stage : dir, man);
    free(man);
    const char *hook = getenv("BAGPIPE_TEST_SAVE_FAIL"); // =3 (tests): interrupted just after the commit
    if (!rc && hook && *hook == '3') raise(SIGINT);
    if (!rc && hook && *hook == '4') raise(SIGKILL); // =4: killed there, as by kill -9
    bp_signal_note(NULL);
    if (staged) bp_signal_remove_dir(NULL);
    for (size_t i = 0; i < BP_ARRAY_LEN(parts); i++) bp_signal_remove_file((int)i, NULL);
    if (rc && (staged || fresh)) {
        char msg[1536];
        snprintf(msg, sizeof msg, "%s", bp_errmsg(rc));
        if (staged) {
            ckpt_stage_abort(stage);
            if (fresh) return bp_fail(rc, "%s (the model is not saved to %s)", msg, dir);
            return bp_fail(rc, "%s (the model saved before in %s is kept)", msg, dir);
        }
        for (size_t i = 0; i < 2; i++) { // the parts (a MANIFEST is never left by a failure)
            snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
            unlink(path);
        }
        return bp_fail(rc, "%s (the model is not saved)", msg);
    }
    if (rc) return rc;
    return made ? ckpt_stage_commit_new(dir, stage) : staged ? ckpt_stage_commit(dir, stage) : 0;
}

static int trainer_load_dir(trainer *tr, const char *dir, const bp_dataset *ds, int max_batch);

int trainer_load(trainer *tr, const char *dir, const bp_dataset *ds, int max_batch) {
    if (!ckpt_is_root(dir)) return trainer_load_dir(tr, dir, ds, max_batch);
    // A --checkpoint-dir root: its newest valid checkpoint.  A job still writing there may prune that
    // one while it is read (--keep): the newest is then another, and is taken instead; and when none
    // is valid at the moment of the scan, the job's next commit is awaited (ckpt_latest_wait).
    for (int attempt = 0;; attempt++) {
        ckpt_manifest man;
        char latest[4096];
        int64_t it;
        int rc = ckpt_latest_wait(dir, latest, sizeof latest, &it, &man, 60);
        if (rc) return rc;
        printf("loading checkpoint %s (iteration %lld)\n", latest, (long long)it);
        rc = trainer_load_dir(tr, latest, ds, max_batch);
        char man_path[4200]; // pruning removes the MANIFEST first
        snprintf(man_path, sizeof man_path, "%s/MANIFEST", latest);
        if (!rc || attempt == 4 || access(man_path, F_OK) == 0) return rc; // a failure of a checkpoint still there
        fprintf(stderr, "bagpipe: %s was removed while it was read (a job writing into %s pruned it); taking the "
                "newest again\n", latest, dir);
    }
}

// Reads a saved model's configuration (dir: a saved model or one checkpoint), checks it against the
// dataset, builds the trainer and loads the parameters.
static int trainer_load_dir(trainer *tr, const char *dir, const bp_dataset *ds, int max_batch) {
    ckpt_manifest man;
    int rc = ckpt_manifest_load(dir, &man);
    if (rc) return rc;
    const char *fmt = ckpt_get(&man, "format"), *model_flags_s = ckpt_get(&man, "model"),
               *cards = ckpt_get(&man, "cardinalities"), *eo = ckpt_get(&man, "emb_optimizer"),
               *dop = ckpt_get(&man, "dense_optimizer");
    if (!fmt || strcmp(fmt, SAVE_FORMAT) != 0)
        return bp_fail(BP_EVERSION, "%s/MANIFEST: saved-model format '%s', this build reads %s", dir,
                       fmt ? fmt : "(none)", SAVE_FORMAT);
    if (!model_flags_s || !cards || !eo || !dop)
        return bp_fail(BP_ECORRUPT, "%s/MANIFEST: model, cardinalities or optimizers missing", dir);
    int64_t nd, nf, stride, state, seed;
    if ((rc = ckpt_get_i64(&man, dir, "dense_features", &nd)) || (rc = ckpt_get_i64(&man, dir, "sparse_features", &nf)) ||
        (rc = ckpt_get_i64(&man, dir, "row_stride", &stride)) || (rc = ckpt_get_i64(&man, dir, "row_state", &state)) ||
        (rc = ckpt_get_i64(&man, dir, "emb_seed", &seed)))
        return rc;
    const bp_ds_info *in = &ds->info;
    if (nd != in->n_dense || nf != in->n_sparse)
        return bp_fail(BP_EMISMATCH, "%s: model expects %lld dense and %lld sparse features, dataset %s has %u and %u",
                       dir, (long long)nd, (long long)nf, ds->path, in->n_dense, in->n_sparse);
    uint64_t card[BP_DS_MAX_SPARSE];
    int n = cli_parse_u64_list("cardinalities", cards, card, BP_DS_MAX_SPARSE);
    if (n != (int)nf) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: bad cardinality list", dir);
    // Frequency ids number each table's values by their counts in the files prepped together: a
    // dataset prepped apart (a test day) numbers them its own way, which its table sizes show.
    const char *apart = in->idmap != BP_IDMAP_FREQ ? ""
                                                   : " (its ids are frequency ids, numbered by the counts of the files "
                                                     "prepped with it: prep the training and evaluation files in one "
                                                     "run, e.g. --split days, or hash both with one --max-ind-range)";
    for (int f = 0; f < n; f++)
        if (card[f] != in->card[f])
            return bp_fail(BP_EMISMATCH, "%s: table %d has %llu rows in the model but %llu in dataset %s%s", dir, f,
                           (unsigned long long)card[f], (unsigned long long)in->card[f], ds->path, apart);
    // Tables of the same sizes whose ids were made otherwise (hashed against frequency ids, or
    // frequency ids of other counts): the ids stand for other values, and the model would score
    // the rows through other values' embeddings, silently.  (A side written before these were
    // recorded, or a damaged value, has nothing to compare.)
    const char *im = ckpt_get(&man, "id_mapping");
    char ds_im[48];
    id_mapping_name(in, ds_im, sizeof ds_im);
    if (im && strcmp(im, ds_im) != 0)
        return bp_fail(BP_EMISMATCH, "%s: trained on %s ids, and dataset %s has %s ids (the tables have the same sizes, "
                       "but the ids stand for other values); prep the evaluation files as the training files were",
                       dir, im, ds->path, ds_im);
    const char *vfp = ckpt_get(&man, "vocab_fingerprint");
    char *end = NULL;
    const uint64_t mfp = vfp ? strtoull(vfp, &end, 16) : 0;
    const int other_ids = vfp && end == vfp + 16 && !*end && in->vocab_fp && mfp != in->vocab_fp;
    if (other_ids && in->idmap == BP_IDMAP_HASH)
        return bp_fail(BP_EMISMATCH, "%s: trained on hashed ids compacted over other residues than those of dataset "
                       "%s (digest %s, the dataset's %016llx; prep --compact): the tables have the same sizes, but "
                       "the ids stand for other values; prep the training and evaluation files in one run, e.g. "
                       "--split days, or hash both without --compact", dir, ds->path, vfp,
                       (unsigned long long)in->vocab_fp);
    if (other_ids)
        return bp_fail(BP_EMISMATCH, "%s: trained on frequency ids numbered by other counts than those of dataset %s "
                       "(vocabulary digest %s, the dataset's %016llx): the tables have the same sizes, but the ids "
                       "stand for other values; prep the training and evaluation files in one run, e.g. --split days, "
                       "or hash both with one --max-ind-range", dir, ds->path, vfp, (unsigned long long)in->vocab_fp);
    // The same rows split otherwise (prep or synth with another --split): the evaluation split may
    // hold rows the model trained on, which nothing else shows.
    const char *sp = ckpt_get(&man, "dataset_split");
    uint64_t split[3];
    const int ns = sp ? cli_parse_u64_list("dataset_split", sp, split, 3) : 0;
    if (ns < 0) bp_clear_error(); // a damaged value: nothing to compare
    if (ns == 3 && split[0] + split[1] + split[2] == in->rows && memcmp(split, in->split, sizeof split) != 0) {
        bp_log(BP_LOG_WARN, "%s: trained on a dataset of %llu rows split %llu / %llu / %llu (train / val / test); %s "
               "has as many rows split %llu / %llu / %llu: if they are the same rows, its val and test may hold rows "
               "the model trained on", dir, (unsigned long long)in->rows, (unsigned long long)split[0],
               (unsigned long long)split[1], (unsigned long long)split[2], ds->path,
               (unsigned long long)in->split[0], (unsigned long long)in->split[1], (unsigned long long)in->split[2]);
    }
    model_config mc;
    rc = model_config_parse(&mc, model_flags_s, (int)nd, (int)nf);
    if (rc) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: bad model line: %s", dir, bp_errmsg(rc));
    int ek = emb_opt_kind_parse(eo);
    if (ek < 0) return bp_fail(BP_ECORRUPT, "%s/MANIFEST: unknown embedding optimizer '%s'", dir, eo);
    emb_opt eopt = emb_opt_make((emb_opt_kind)ek, 0.0f, mc.E);
    dense_opt dopt = dense_opt_make(strcmp(dop, "adagrad") == 0 ? DENSE_OPT_ADAGRAD : DENSE_OPT_SGD, 0.0f);
    emb_layout_cfg lc = {.F = (int)nf, .card = card, .D = mc.D, .E = mc.E, .S = emb_opt_state_floats(&eopt),
                         .seed = (uint64_t)seed};
    rc = trainer_init(tr, &mc, &lc, &dopt, &eopt, max_batch, 1);
    if (rc) return rc;
    if (tr->L.stride != stride || tr->L.S != state) {
        const int have_stride = tr->L.stride, have_state = tr->L.S; // before trainer_free zeroes them
        trainer_free(tr);
        return bp_fail(BP_EMISMATCH, "%s: row layout (stride %lld, state %lld) differs from this build's (%d, %d)", dir,
                       (long long)stride, (long long)state, have_stride, have_state);
    }
    void *dbufs[2] = {tr->m.params, tr->dstate};
    size_t dlens[2] = {tr->m.n_params * sizeof(float), tr->n_dstate * sizeof(float)};
    rc = ckpt_read_part(dir, &man, "dense.bin", dbufs, dlens, tr->n_dstate ? 2 : 1);
    if (!rc) rc = ckpt_read_table(dir, &man, &tr->table); // emb.bin, or a checkpoint's server shards
    if (rc) trainer_free(tr);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Commands

typedef struct {
    model_flags mf;
    int mode, trainers, servers, lookahead, prefetch, oracle_threads, oracle_parts;
    int64_t cache_rows;
    int staleness, cache_policy;
    int batch, eval_batch, epochs, threads, eval_every, print_every, eval_split, dense_opt, emb_opt;
    int64_t iters, eval_rows, static_rows;
    double lr, emb_lr, stall_timeout;
    int64_t lr_warmup, lr_decay_start, lr_decay_steps;
    int64_t seed;
    const char *save, *metrics;
    int no_eval;
    const char *unread_eval; // an evaluation flag this run does not read (unread_eval_flag), or NULL
    int dense_only_adagrad;  // --optimizer adagrad without --emb-optimizer: the embeddings stay on SGD
    int dlrm_loss, dlrm_round; // the DLRM reference's --loss-function bce, --round-targets: taken, nothing to do
    char overridden[192];    // cli_given.overridden: one option given two values under two names, or ""
    ckpt_opts ck;
} train_flags;

// The AUC as printed: undefined for a set of one class.
static const char *fmt_auc(char *buf, size_t cap, const metric_result *r) {
    if (!r->auc_defined && (r->pos == 0 || r->pos == r->n)) snprintf(buf, cap, "n/a (one class)");
    else snprintf(buf, cap, "%.4f", r->auc);
    return buf;
}

void train_print_eval(bp_progress *prog, bp_split split, int64_t iter, const metric_result *r) {
    char auc[32];
    bp_progress_finish(prog);
    printf("iteration %lld: %s AUC %s  logloss %.4f  accuracy %.4f  (%llu sample%s)\n", (long long)iter,
           bp_split_name(split), fmt_auc(auc, sizeof auc, r), r->logloss, r->accuracy, (unsigned long long)r->n,
           r->n == 1 ? "" : "s");
    fflush(stdout);
}

void train_print_result(const char *label, const metric_result *r, const metric_result *bayes) {
    char auc[32];
    fmt_auc(auc, sizeof auc, r);
    printf("%-5s AUC %s  logloss %.4f  accuracy %.4f  (%llu sample%s, %.1f%% clicks)", label, auc, r->logloss,
           r->accuracy, (unsigned long long)r->n, r->n == 1 ? "" : "s",
           r->n ? 100.0 * (double)r->pos / (double)r->n : 0.0);
    if (bayes && bayes->auc_defined) printf("\n      Bayes-optimal AUC %.4f  logloss %.4f (planted model)", bayes->auc, bayes->logloss);
    printf("\n");
}

void train_print_trained(int64_t iters, int B, double seconds) {
    char t[32];
    bp_fmt_seconds(t, sizeof t, seconds);
    printf("trained %lld iteration%s (%lld sample%s) in %s: %.0f samples/s\n", (long long)iters,
           iters == 1 ? "" : "s", (long long)iters * B, iters * B == 1 ? "" : "s", t, (double)iters * B / seconds);
}

int train_replica_init(trainer *tr, const train_setup *su, int bmax, int i) {
    const int max_batch = i == 0 && (su->do_eval || su->eval_every) ? BP_MAX(bmax, su->eval_batch) : bmax;
    int rc = trainer_init(tr, &su->mc, &su->lc, &su->dopt, &su->eopt, max_batch, TRAINER_NO_TABLE);
    if (!rc) tr->sched = su->sched, tr->lr = su->lr, tr->emb_lr = su->emb_lr;
    return rc;
}

const char *train_lr_note(const train_setup *su, char *buf, size_t cap) {
    const lr_schedule *s = &su->sched;
    size_t n = 0;
    buf[0] = 0;
    if (!su->emb_lr_inherited) n += (size_t)snprintf(buf, cap, ", embeddings %g", su->emb_lr);
    if (s->warmup > 1 && n < cap) n += (size_t)snprintf(buf + n, cap - n, ", warmup %lld", (long long)s->warmup);
    if (s->decay_steps > 0 && n < cap)
        snprintf(buf + n, cap - n, ", decay from %lld over %lld", (long long)s->decay_start, (long long)s->decay_steps);
    return buf;
}

void train_json_start(jsonl_file *mf, const train_setup *su) {
    jsonl j;
    jsonl_begin(&j);
    jsonl_str(&j, "event", "start");
    jsonl_int(&j, "iter", su->ck.start_iter);
    jsonl_int(&j, "samples", su->ck.start_iter * su->B);
    if (su->ck.start_iter) jsonl_int(&j, "resumed_at", su->ck.start_iter);
    jsonl_first(&j, mf);
}

void train_json_window(jsonl *j, const train_setup *su, int64_t t, double loss, double samples_per_s) {
    jsonl_begin(j);
    jsonl_str(j, "event", "train");
    jsonl_int(j, "iter", t + 1);
    jsonl_int(j, "samples", (t + 1) * su->B);
    jsonl_num(j, "epoch", (double)(t + 1) / (double)su->per_epoch);
    jsonl_num(j, "loss", loss);
    jsonl_num(j, "lr", lr_schedule_rate(&su->sched, su->lr, t));
    if (!su->emb_lr_inherited) jsonl_num(j, "emb_lr", lr_schedule_rate(&su->sched, su->emb_lr, t));
    jsonl_num(j, "samples_per_s", samples_per_s);
}

void train_progress_window(bp_progress *p, int64_t t, double loss) {
    if (!bp_progress_due(p, (uint64_t)(t + 1))) { // called every iteration: the note is made only to draw
        p->done = (uint64_t)(t + 1);
        return;
    }
    char note[64];
    snprintf(note, sizeof note, "loss %.4f", loss);
    bp_progress_update(p, (uint64_t)(t + 1), note);
}

emb_opt train_eopt_at(const train_setup *su, int64_t t) {
    emb_opt o = su->eopt;
    o.lr = lr_schedule_rate(&su->sched, su->emb_lr, t);
    return o;
}

// What a diverged run should lower: the embeddings' rate too where it is their own (set up by
// setup_build in every process of a run).
static char lr_hint[160] = "lower --learning-rate";

int train_loss_check(int64_t t, double loss) {
    if (isfinite(loss)) return 0;
    return bp_fail(BP_ERANGE, "iteration %lld: the loss is %s; %s", (long long)t + 1,
                   isnan(loss) ? "not a number (NaN)" : loss > 0 ? "infinite" : "-infinite", lr_hint);
}

const char *train_lr_hint(void) { return lr_hint; }

static const char *nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "infinite" : "-infinite"; }

int trainer_check_finite(const trainer *tr, int64_t iter) {
    const struct {
        const char *what;
        const float *p;
        size_t n;
    } parts[] = {{"dense parameter", tr->m.params, tr->m.n_params},
                 {"dense optimizer state value", tr->dstate, tr->n_dstate},
                 {"embedding table value", tr->table.data, (size_t)emb_layout_bytes(&tr->L) / sizeof(float)}};
    for (size_t k = 0; k < BP_ARRAY_LEN(parts); k++) {
        const size_t i = parts[k].p ? bp_first_nonfinite(parts[k].p, parts[k].n) : parts[k].n;
        if (i < parts[k].n)
            return bp_fail(BP_ERANGE, "after iteration %lld the model is not finite (%s %zu of %zu is %s): the last "
                           "update diverged; %s", (long long)iter, parts[k].what, i, parts[k].n,
                           nonfinite_name(parts[k].p[i]), lr_hint);
    }
    return 0;
}

void train_json_result(jsonl *j, const char *prefix, const metric_result *r) {
    char k[64];
    snprintf(k, sizeof k, "%sauc", prefix), jsonl_num(j, k, r->auc);
    snprintf(k, sizeof k, "%slogloss", prefix), jsonl_num(j, k, r->logloss);
    snprintf(k, sizeof k, "%saccuracy", prefix), jsonl_num(j, k, r->accuracy);
}

// trainer_check_finite, and where no final evaluation follows (--no-eval), the scores of the first
// train rows.
static int train_check_final(trainer *tr, const train_setup *su, int64_t iter) {
    int rc = trainer_check_finite(tr, iter);
    if (rc || su->do_eval || su->tr1 == su->tr0) return rc;
    // No evaluation follows to show a model whose parameters are finite but whose activations are
    // not (parameters huge after a diverged update): a probe of the first train rows does.
    const int b = BP_MIN(tr->m.max_batch, 256); // the trainer's buffers hold a training slice
    const uint64_t r1 = su->tr0 + BP_MIN(su->tr1 - su->tr0, (uint64_t)b);
    metric_result res, bayes;
    trainer_eval(tr, su->ds, su->tr0, r1, b, &res, &bayes);
    if (!res.n_nan) return 0;
    return bp_fail(BP_ERANGE, "after iteration %lld the model scores NaN on %llu of the first %llu train samples (its "
                   "parameters or activations are not finite: training diverged); %s", (long long)iter,
                   (unsigned long long)res.n_nan, (unsigned long long)res.n, lr_hint);
}

// 0, or the error of an evaluation after `iter` iterations with NaN scores.
static int train_eval_check(int64_t iter, bp_split split, const metric_result *r) {
    if (!r->n_nan) return 0;
    return bp_fail(BP_ERANGE, "iteration %lld: the model scores NaN on %llu of %llu %s samples (its parameters or "
                   "activations are not finite: training diverged); %s", (long long)iter,
                   (unsigned long long)r->n_nan, (unsigned long long)r->n, bp_split_name(split), lr_hint);
}

int train_final_eval(trainer *tr, const train_setup *su, int64_t iter, metric_result *res, metric_result *bayes) {
    if (!su->do_eval && !su->save) return 0;
    int rc = train_check_final(tr, su, iter);
    if (rc || !su->do_eval) return rc;
    trainer_eval(tr, su->ds, su->ev0, su->ev1, su->eval_batch, res, bayes);
    if ((rc = train_eval_check(iter, su->eval_split, res))) return rc;
    train_print_result(bp_split_name(su->eval_split), res, bayes);
    return 0;
}

void train_json_summary_result(jsonl *j, const train_setup *su, const metric_result *res, const metric_result *bayes) {
    if (!su->do_eval) return;
    jsonl_str(j, "split", bp_split_name(su->eval_split));
    train_json_result(j, "", res);
    if (bayes->auc_defined) train_json_result(j, "bayes_", bayes);
}

int train_json_eval(jsonl_file *mf, bp_split split, int64_t iter, int B, const metric_result *r) {
    int rc = train_eval_check(iter, split, r);
    if (rc) return rc;
    jsonl j;
    jsonl_begin(&j);
    jsonl_str(&j, "event", "eval");
    jsonl_str(&j, "split", bp_split_name(split));
    jsonl_int(&j, "iter", iter);
    jsonl_int(&j, "samples", iter * B);
    train_json_result(&j, "", r);
    return jsonl_end(&j, mf);
}

int train_eval_due(const train_setup *su, int64_t done) {
    return su->eval_every && done % su->eval_every == 0 && (done < su->total_iters || !su->do_eval);
}

// Opens the dataset and derives everything a run needs from the flags (no output but warnings).
static int setup_build(train_setup *su, const train_flags *fl, bp_dataset *ds, const char *data_path) {
    memset(su, 0, sizeof *su);
    memset(ds, 0, sizeof *ds);
    int rc = cmd_open_dataset(ds, data_path);
    if (rc) return rc;
    const bp_ds_info *in = &ds->info;
    su->data_path = data_path, su->ds = ds;
    if ((rc = model_config_from_flags(&su->mc, &fl->mf, (int)in->n_dense, (int)in->n_sparse))) return rc;
    bp_ds_split_range(ds, BP_SPLIT_TRAIN, &su->tr0, &su->tr1);
    su->per_epoch = (su->tr1 - su->tr0) / (uint64_t)fl->batch;
    if (su->per_epoch == 0)
        return bp_fail(BP_EUSAGE, "--batch-size %d: the train split of %s has only %llu rows", fl->batch, data_path,
                       (unsigned long long)(su->tr1 - su->tr0));
    su->total_iters = fl->iters ? fl->iters : (int64_t)su->per_epoch * fl->epochs;
    // The oracle numbers batches, and plan records iterations, in 32 bits (oracle.c, plan.h).
    const int64_t max_planned = (int64_t)UINT32_MAX - fl->prefetch - fl->lookahead - 8;
    if (fl->mode == TRAIN_MODE_BAGPIPE && su->total_iters > max_planned)
        return bp_fail(BP_EUSAGE, "%s: %lld iterations; --mode bagpipe plans at most %lld (its plan records count "
                       "iterations in 32 bits)", fl->iters ? "--iters" : "--epochs", (long long)su->total_iters,
                       (long long)max_planned);
    // ... and a batch's occurrences in 32 bits shared with the window's slots (oracle.h).
    const uint64_t max_ids = oracle_max_batch_ids((uint32_t)fl->lookahead, (uint32_t)fl->prefetch, fl->oracle_threads);
    if (fl->mode == TRAIN_MODE_BAGPIPE && (uint64_t)fl->batch * in->n_sparse > max_ids)
        return bp_fail(BP_EUSAGE, "--lookahead %d with --batch-size %d: the oracle holds at most %llu ids (samples x "
                       "%u tables) per batch with this window; a shorter --lookahead or a smaller --batch-size fits",
                       fl->lookahead, fl->batch, (unsigned long long)max_ids, (unsigned)in->n_sparse);
    su->eval_split = (bp_split)fl->eval_split;
    bp_ds_split_range(ds, su->eval_split, &su->ev0, &su->ev1);
    if (fl->eval_rows && su->ev1 - su->ev0 > (uint64_t)fl->eval_rows) su->ev1 = su->ev0 + (uint64_t)fl->eval_rows;
    // --no-eval skips the final evaluation only; --eval-every evaluations still take place.
    const int have_rows = su->ev1 > su->ev0;
    su->do_eval = !fl->no_eval && have_rows;
    if ((!fl->no_eval || fl->eval_every) && !have_rows)
        bp_log(BP_LOG_WARN, "the %s split of %s is empty: no evaluation", bp_split_name(su->eval_split), data_path);
    if (fl->unread_eval)
        bp_log(BP_LOG_WARN, "--%s has no effect: this run evaluates nothing (--no-eval, and no --eval-every N)",
               fl->unread_eval);
    if (fl->overridden[0]) bp_log(BP_LOG_WARN, "%s", fl->overridden);
    // The DLRM reference's --optimizer adagrad covers the embeddings too; here it is the dense part's.
    if (fl->dense_only_adagrad)
        bp_log(BP_LOG_WARN, "--optimizer adagrad: the dense part's optimizer; the embeddings keep --emb-optimizer sgd "
               "(the DLRM reference's --optimizer adagrad covers both: add --emb-optimizer adagrad)");
    su->emb_lr = fl->emb_lr >= 0 ? fl->emb_lr : fl->lr;
    static const emb_opt_kind ekinds[] = {EMB_OPT_SGD, EMB_OPT_ADAGRAD, EMB_OPT_ROWWISE_ADAGRAD};
    su->eopt = emb_opt_make(ekinds[fl->emb_opt], (float)su->emb_lr, su->mc.E);
    su->dopt = dense_opt_make(fl->dense_opt ? DENSE_OPT_ADAGRAD : DENSE_OPT_SGD, (float)fl->lr);
    su->lc = (emb_layout_cfg){.F = su->mc.F, .card = in->card, .D = su->mc.D, .E = su->mc.E,
                              .S = emb_opt_state_floats(&su->eopt), .seed = (uint64_t)fl->seed};
    su->B = fl->batch, su->eval_every = have_rows ? fl->eval_every : 0;
    // Evaluation buffers for the batches there are (the scores do not depend on the batch size): a
    // --eval-batch-size above the rows evaluated was planned, and allocated, at its whole size.
    su->eval_batch = have_rows && (uint64_t)fl->eval_batch > su->ev1 - su->ev0 ? (int)(su->ev1 - su->ev0) : fl->eval_batch;
    su->print_every = fl->print_every, su->threads = fl->threads;
    su->seed = (uint64_t)fl->seed, su->lr = fl->lr, su->save = fl->save, su->metrics = fl->metrics;
    su->emb_lr_inherited = fl->emb_lr < 0;
    if (su->emb_lr_inherited) snprintf(lr_hint, sizeof lr_hint, "lower --learning-rate");
    else
        snprintf(lr_hint, sizeof lr_hint, "lower --learning-rate (the dense part's, %g) or --emb-learning-rate (the "
                 "embeddings', %g)", fl->lr, su->emb_lr);
    // A warmup of 0 or 1 iteration changes no rate: both are recorded as none (a resume compares them).
    su->sched = (lr_schedule){fl->lr_warmup > 1 ? fl->lr_warmup : 0, fl->lr_decay_start, fl->lr_decay_steps};
    su->trainers = fl->trainers, su->servers = fl->servers, su->mode = fl->mode;
    su->cache_rows = (uint64_t)fl->cache_rows, su->lookahead = fl->lookahead, su->prefetch = fl->prefetch;
    su->oracle_threads = fl->oracle_threads, su->oracle_parts = fl->oracle_parts;
    if (su->oracle_parts == 2 && in->n_sparse < 2) { // a split by tables needs two tables
        bp_log(BP_LOG_WARN, "--oracle-parts 2: %s has one table, so the planner runs in one part", data_path);
        su->oracle_parts = 1;
    }
    su->staleness = fl->staleness, su->cache_policy = fl->cache_policy;
    if (fl->mode == TRAIN_MODE_STATIC) { // role_static.c pins min(N, the rows) rows in messages of at most MSG_MAX_N
        uint64_t rows = bp_ds_total_card(in), want = fl->static_rows ? (uint64_t)fl->static_rows : BP_MAX(1, rows / 100);
        if (BP_MIN(want, rows) > MSG_MAX_N)
            return bp_fail(BP_EUSAGE, "--static-rows %llu: at most %d rows can be pinned", (unsigned long long)want,
                           MSG_MAX_N);
        su->static_rows = (int64_t)want;
    }
    su->ck = fl->ck;
    rc = ckpt_run_setup(su);
    if (rc) return rc;
    // Checkpoints are taken at boundaries within the run, never after its last iteration (--save
    // keeps the final model): a run that checkpoints without --save ends with its model lost, and a
    // --resume without a checkpoint schedule writes none of its own.  (After the checkpoint flags
    // are found right: a refused run says only why.)
    const int writes_ckpt = fl->ck.every || fl->ck.minutes > 0;
    if (writes_ckpt && !fl->save)
        bp_log(BP_LOG_WARN, "checkpoints are taken within the run, never after its last iteration: without --save "
               "DIR the final model is not kept");
    if (fl->ck.resume && !writes_ckpt)
        bp_log(BP_LOG_WARN, "--resume: this run writes no checkpoint of its own (give --checkpoint-every N or "
               "--checkpoint-minutes M to go on checkpointing)");
    return 0;
}

// The schedule's flags (optim.h): the decay must not start inside the warmup (the DLRM reference
// refuses it too), and a decay start without a decay would be ignored.
static int check_lr_flags(const train_flags *fl) {
    if (fl->emb_lr < 0 && fl->emb_lr != -1) // it used to mean -1, silently
        return bp_fail(BP_EUSAGE, "--emb-learning-rate: %g is neither -1 (the --learning-rate) nor a rate of at "
                       "least 0", fl->emb_lr);
    if (fl->lr_decay_steps == 0 && fl->lr_decay_start)
        return bp_fail(BP_EUSAGE, "--lr-decay-start-step %lld: there is no decay without --lr-num-decay-steps",
                       (long long)fl->lr_decay_start);
    if (fl->lr_decay_steps > 0 && fl->lr_decay_start < fl->lr_warmup)
        return bp_fail(BP_EUSAGE, "--lr-decay-start-step %lld: the warmup (--lr-num-warmup-steps %lld) must end "
                       "before the decay starts", (long long)fl->lr_decay_start, (long long)fl->lr_warmup);
    return 0;
}

// Flags that only some modes read (a mask of TRAIN_MODE_*): given to another mode they would be
// ignored, so they are refused, naming the modes that read them.
#define MODE_BIT(m) (1u << TRAIN_MODE_##m)
#define MODES_DIST (MODE_BIT(SYNC) | MODE_BIT(SHARDED) | MODE_BIT(STATIC) | MODE_BIT(BAGPIPE) | MODE_BIT(ASYNC))
static const struct {
    const char *flag;
    unsigned modes;
} mode_flags[] = {
    {"trainers", MODES_DIST},
    {"servers", MODES_DIST},
    {"stall-timeout", MODES_DIST},
    {"cache-rows", MODE_BIT(BAGPIPE) | MODE_BIT(ASYNC)},
    {"lookahead", MODE_BIT(BAGPIPE)},
    {"prefetch", MODE_BIT(BAGPIPE)},
    {"oracle-threads", MODE_BIT(BAGPIPE)},
    {"oracle-parts", MODE_BIT(BAGPIPE)},
    {"staleness", MODE_BIT(ASYNC)},
    {"cache-policy", MODE_BIT(ASYNC)},
    {"static-rows", MODE_BIT(STATIC)},
};
_Static_assert(ORACLE_MAX_TRAINERS == 64, "the --trainers help states the limit of --mode bagpipe");
static const char *const train_mode_names[] = {"local", "sync", "sharded", "static", "bagpipe", "async"};

// How to evaluate, in a run that evaluates nothing (--no-eval, no --eval-every): the first such
// flag given (as typed), for a warning (not an error: a script's fixed flags plus --no-eval are
// a common way to turn evaluation off), or NULL.
static const char *unread_eval_flag(const train_flags *fl, const cli_opt *opts, const cli_given *g) {
    static const char *const eval_flags[] = {"eval-split", "eval-rows", "eval-batch-size"};
    for (size_t i = 0; i < BP_ARRAY_LEN(eval_flags) && fl->no_eval && !fl->eval_every; i++)
        if (cli_was_given(g, opts, eval_flags[i])) return cli_given_name(g, opts, eval_flags[i]);
    return NULL;
}

static int check_mode_flags(const train_flags *fl, const cli_opt *opts, const cli_given *g) {
    const char *mode = train_mode_names[fl->mode];
    for (size_t i = 0; i < BP_ARRAY_LEN(mode_flags); i++) {
        if ((mode_flags[i].modes & (1u << fl->mode)) || !cli_was_given(g, opts, mode_flags[i].flag)) continue;
        if (mode_flags[i].modes == MODES_DIST)
            return bp_fail(BP_EUSAGE, "--%s: only the distributed modes (sync, sharded, static, bagpipe, async) read "
                           "it; --mode %s is one process", mode_flags[i].flag, mode);
        char names[128] = "";
        size_t len = 0;
        for (int m = 0, k = 0; m < (int)BP_ARRAY_LEN(train_mode_names); m++)
            if (mode_flags[i].modes & (1u << m))
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", k++ ? " or --mode " : "--mode ",
                                        train_mode_names[m]);
        return bp_fail(BP_EUSAGE, "--%s: only %s reads it (this is --mode %s)", mode_flags[i].flag, names, mode);
    }
    // --iters replaces the epochs (it may run past them): an --epochs beside it would be ignored.
    if (fl->iters && cli_was_given(g, opts, "epochs"))
        return bp_fail(BP_EUSAGE, "--%s %d: --iters %lld sets the run's length instead (it may run past the epochs "
                       "or stop inside one); give one of them", cli_given_name(g, opts, "epochs"), fl->epochs,
                       (long long)fl->iters);
    // How to keep and write checkpoints: a run that writes none (no --checkpoint-every or
    // --checkpoint-minutes; a --resume alone writes none) would ignore these.
    static const char *const ckpt_write_flags[] = {"keep", "on-checkpoint-error", "checkpoint-naive"};
    for (size_t i = 0; i < BP_ARRAY_LEN(ckpt_write_flags) && !fl->ck.every && !(fl->ck.minutes > 0); i++)
        if (cli_was_given(g, opts, ckpt_write_flags[i]))
            return bp_fail(BP_EUSAGE, "--%s: only a run that writes checkpoints reads it (--checkpoint-every N or "
                           "--checkpoint-minutes M; --resume alone writes none)", ckpt_write_flags[i]);
    // Limits of one mode, checked here so that no job starts only to fail in its ranks.
    if (fl->mode == TRAIN_MODE_BAGPIPE && fl->trainers > ORACLE_MAX_TRAINERS)
        return bp_fail(BP_EUSAGE, "--trainers: at most %d with --mode bagpipe (the oracle tracks a key's users in a "
                       "64-bit mask), got %d", ORACLE_MAX_TRAINERS, fl->trainers);
    return 0;
}

// Opens the metrics file as trainer 0 will, and closes it (removing it if this made it): a path
// where it cannot be made is one message before the job starts, not a trainer's abort.
static int metrics_probe(const char *path) {
    jsonl_file jf;
    int rc = jsonl_open(&jf, "--metrics", path);
    return rc ? rc : jsonl_close(&jf, 0);
}

// The --checkpoint-dir that this process created to lock it (train_lock_roots), and whether the run
// ended well (cmd_train).  The lock comes before the flags, the dataset and the root itself are
// checked (the root is read under it), so a refused run has made the directory already.
static struct {
    char *path;
    int ok;
} made_root;

// At exit: a run that failed leaves no --checkpoint-dir that it made itself.  rmdir removes only an
// empty directory, so nothing goes that holds a checkpoint, a part of one or another file.  It runs
// after ckpt.c's removal of the lock file this run created (an atexit handler registered after
// this one, when the lock file is made), which empties a root without checkpoints.
static void drop_made_root(void) {
    if (made_root.path && !made_root.ok) rmdir(made_root.path);
}

void train_drop_made_roots(void) {
    ckpt_drop_created_locks();
    drop_made_root();
    free(made_root.path), made_root.path = NULL;
}

// After a failed job: where a --resume would go on from once the cause is dealt with, if the run
// has a checkpoint (its --checkpoint-dir, or the root it resumed from).
// Its MANIFEST is read, not its parts (a large model's would take long to check here; --resume
// checks them).
static void train_resume_hint(const train_flags *fl, int interrupted) {
    const char *const roots[] = {fl->ck.dir, fl->ck.resume}; // this run's own first, then where it came from
    for (size_t i = 0; i < BP_ARRAY_LEN(roots); i++) {
        char latest[4096];
        int64_t it;
        if (!roots[i] || !ckpt_is_root(roots[i])) continue;
        if (ckpt_latest_committed(roots[i], latest, sizeof latest, &it)) {
            bp_clear_error();
            continue;
        }
        fprintf(stderr, "bagpipe: the newest checkpoint is %s (iteration %lld): %sthe same flags with --resume %s go "
                "on from it\n", latest, (long long)it, interrupted ? "" : "once the cause is dealt with, ", roots[i]);
        return;
    }
}

static void resume_hint_interrupted(const void *fl) { train_resume_hint(fl, 1); }

// A local run's training loop, interrupted (SIGINT, SIGTERM, SIGHUP): the loop stops at the next
// iteration and says so, with where a --resume goes on from, as the launcher does for a
// distributed job (a local run used to die in silence).
// A second signal at least half a second after the first ends the run at once, by the action
// the loop replaced (the temporary files' clean-up, or the default); one sooner is the same
// signal delivered twice (timeout(1) sends it to the process and to its group), not a second
// Ctrl-C.  The handler uses only async-signal-safe calls (clock_gettime, sigaction, raise).
static volatile sig_atomic_t local_stop;
static struct timespec local_first;
static const int local_sigs[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction local_old[3]; // the actions the loop replaced

static void local_on_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!local_stop) {
        local_first = now, local_stop = sig;
        return;
    }
    const double since =
        (double)(now.tv_sec - local_first.tv_sec) + 1e-9 * (double)(now.tv_nsec - local_first.tv_nsec);
    if (since < 0.5) return;
    for (int i = 0; i < 3; i++)
        if (local_sigs[i] == sig) sigaction(sig, &local_old[i], NULL);
    raise(sig);
}

// install: the loop's handlers (the previous actions into local_old); else the previous ones back
// (once: again, nothing).
static void local_signals(int install) {
    static int installed;
    if (install == installed) return;
    installed = install;
    for (int i = 0; i < 3; i++) {
        if (!install) {
            sigaction(local_sigs[i], &local_old[i], NULL);
            continue;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = local_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(local_sigs[i], &sa, &local_old[i]);
        if (local_old[i].sa_handler == SIG_IGN) sigaction(local_sigs[i], &local_old[i], NULL); // nohup: left ignored
    }
}

// After the loop stopped for signal sig at iteration t: the message and the hint, then the
// signal's own end (the previous actions are back: a named temporary file is removed).
static void local_interrupted(const train_flags *fl, int sig, int64_t t) {
    fprintf(stderr, "bagpipe: interrupted by signal %d (%s) at iteration %lld: the run is stopped\n", sig,
            strsignal(sig), (long long)t);
    train_resume_hint(fl, 1);
    fflush(stderr), fflush(stdout);
    raise(sig);
}

// Locks the run's checkpoint roots (ckpt_lock_root), in the one process of the job that holds them.
static int train_lock_roots(const train_flags *fl) {
    int rc = 0;
    if (fl->ck.dir && !made_root.path && mkdir(fl->ck.dir, 0777) == 0) { // never one that existed before
        made_root.path = bp_xstrdup(fl->ck.dir);
        atexit(drop_made_root);
    }
    if (fl->ck.dir) rc = ckpt_lock_root(fl->ck.dir, 1, "--checkpoint-dir");
    if (!rc && fl->ck.resume && (!fl->ck.dir || strcmp(fl->ck.resume, fl->ck.dir) != 0))
        rc = ckpt_lock_root(fl->ck.resume, 0, "--resume");
    return rc;
}

// --mode sync|sharded|static|bagpipe: without a launcher, start the job (launch.h); under one,
// become a rank.  sharded runs no server ranks (the rows live on the trainers): it takes
// --servers 0, and the default --servers 1 is read as 0; more servers are an error.
// The value of a test hook NAME=R:VALUE when this process is rank R, else NULL.
static const char *test_hook_for_rank(const char *name) {
    const char *v = getenv(name), *colon = v ? strchr(v, ':') : NULL;
    return colon && atoi(v) == comm_rank() ? colon + 1 : NULL;
}

// An error in the command line itself (or a layout's limits, train_distributed).  Under the
// user's mpirun or srun every rank parses the same line and printed the same message, once per
// rank: rank 0 says it and exits with the error's status, the others leave with 0.  Were they to
// fail too, mpirun would end rank 0 at the first one's exit, maybe before its message.
static int flags_exit(int rc) {
    int rank;
    if (launch_world(&rank) > 1 && rank != 0) {
        bp_clear_error();
        return 0;
    }
    return cmd_exit(rc);
}

static int train_distributed(const train_flags *fl, const char *data_path, int argc, char **argv) {
    static const dist_mode modes[] = {[TRAIN_MODE_SYNC] = DIST_MODE_SYNC, [TRAIN_MODE_SHARDED] = DIST_MODE_SHARDED,
                                      [TRAIN_MODE_STATIC] = DIST_MODE_STATIC, [TRAIN_MODE_BAGPIPE] = DIST_MODE_BAGPIPE,
                                      [TRAIN_MODE_ASYNC] = DIST_MODE_ASYNC};
    const dist_mode mode = modes[fl->mode];
    if (fl->trainers > fl->batch)
        return flags_exit(bp_fail(BP_EUSAGE, "--trainers %d: more trainers than samples in a batch (--batch-size %d)",
                                  fl->trainers, fl->batch));
    if (mode == DIST_MODE_SHARDED && fl->servers > 1)
        return flags_exit(bp_fail(BP_EUSAGE, "--servers %d: --mode sharded keeps the rows on the trainers and runs no "
                                  "server ranks (leave --servers out or pass --servers 0)", fl->servers));
    if (mode != DIST_MODE_SHARDED && fl->servers < 1)
        return flags_exit(bp_fail(BP_EUSAGE, "--servers %d: --mode %s needs at least one server rank", fl->servers,
                                  dist_mode_name(mode)));
    dist_layout lay = {.S = mode == DIST_MODE_SHARDED ? 0 : fl->servers, .T = fl->trainers, .mode = mode,
                       .static_rows = fl->static_rows};
    bp_dataset ds;
    train_setup su;
    if (!launch_under_mpi()) {
        // Flags, dataset and checkpoint are checked here first, so that a mistake is one message
        // and no job starts; the ranks check them again (under a launcher this is where they are).
        int rc = setup_build(&su, fl, &ds, data_path);
        if (!rc) rc = dist_mem_check(&su, &lay, NULL);
        bp_ds_close(&ds);
        if (!rc) rc = metrics_probe(fl->metrics);
        if (rc) return cmd_exit(rc);
        launch_on_interrupt(resume_hint_interrupted, fl);
        jsonl_pass_stdout(fl->metrics);
        const int code = launch_job(dist_ranks(&lay), argc, argv, dist_role_name, &lay);
        if (code) train_resume_hint(fl, 0);
        return code;
    }
    comm_set_stall_timeout(fl->stall_timeout);
    launch_watch_launcher();
    int rc = dist_begin(&lay);
    if (rc) return rc != BP_EMISMATCH ? 1 : comm_rank() == 0 ? 2 : 0; // rank 0 said why (dist_begin)
    // Set-up warnings (an empty evaluation split) once per job: the launcher has given them
    // already when it started the job; under the user's mpirun/srun, rank 0 gives them.
    const int level = bp_log_level;
    if (getenv(LAUNCH_ENV_SELF) || comm_rank() != 0) bp_log_level = BP_LOG_ERROR;
    // One job per checkpoint root: under the user's mpirun/srun, rank 0 holds the lock that the
    // launcher holds otherwise (cmd_train), before it reads the root; a refusal is its set-up
    // error, which the start-up agreement reports (the lowest rank's), whatever the other ranks
    // made of a root that another job is writing.
    memset(&ds, 0, sizeof ds), memset(&su, 0, sizeof su);
    rc = !getenv(LAUNCH_ENV_SELF) && comm_rank() == 0 ? train_lock_roots(fl) : 0;
    // test hooks (tests/test_ckpt_run.c, tests/test_dist.c): BAGPIPE_TEST_RESUME_AS=R:DIR makes rank
    // R resume from DIR, BAGPIPE_TEST_DATA_AS=R:FILE read the dataset FILE, as a rank that sees the
    // --resume directory or the dataset's path otherwise (a node-local disk, a stale copy) would
    train_flags own = *fl;
    const char *resume_as = test_hook_for_rank("BAGPIPE_TEST_RESUME_AS");
    const char *data_as = test_hook_for_rank("BAGPIPE_TEST_DATA_AS");
    if (resume_as && own.ck.resume) own.ck.resume = resume_as;
    if (data_as) data_path = data_as;
    if (!rc) rc = setup_build(&su, &own, &ds, data_path);
    bp_log_level = level;
    // under the user's launcher, rank 0 holds the memory plan against each host in dist_run
    rc = dist_run(&su, &lay, rc);
    bp_ds_close(&ds);
    return rc;
}

// The DLRM reference's (dlrm_s_pytorch.py) flags: those that mean what a flag here means are
// aliases in the table (DLRM_NAME); those that mean something else, or are done elsewhere, are
// refused with what to use instead.
#define DLRM_NAME "the DLRM reference's name"
#define DLRM_DATA_HINT                                                                                     \
    "the dataset is the DATA argument, a binary dataset made once from raw Criteo/Avazu files by "       \
    "'bagpipe prep' (or a synthetic one by 'bagpipe synth'): 'bagpipe train [options] DATA'"
#define DLRM_LOADER_HINT                                                                                   \
    "the dataset is mapped and read in place, with no loader processes (its conversion is 'bagpipe "     \
    "prep', done once); leave the flag out"
#define DLRM_ONE_ID_HINT                                                                                   \
    "the reference's random data; here every sparse feature has one id per sample (Criteo's and "         \
    "Avazu's fields); leave the flag out"
#define DLRM_THRESHOLD_HINT                                                                                \
    "not supported: a run ends after --iters N or --epochs E; --eval-every N evaluates on the way and "   \
    "-m FILE records each AUC"
#define DLRM_TABLES_HINT                                                                                   \
    "not supported: one full-size embedding row per id (no quotient-remainder or mixed-dimension "       \
    "tables, no weighted pooling); leave the flag out"
#define DLRM_TRAIN_HINTS                                                                                   \
    CLI_HINT("num-batches", "the DLRM reference's batches per epoch; here --iters N (-n) runs N "          \
             "iterations in all, across epochs (the reference's --nepochs 1 --num-batches N is --iters N alone), or --epochs E "  \
             "runs E whole passes"),                                                                        \
    CLI_HINT("print-freq", "use --print-every N: the train loss every N iterations, on the progress line " \
             "of a terminal and as a line of the -m metrics file"),                                         \
    CLI_HINT("data-set", DLRM_DATA_HINT), CLI_HINT("raw-data-file", DLRM_DATA_HINT),                        \
    CLI_HINT("processed-data-file", DLRM_DATA_HINT), CLI_HINT("data-generation", DLRM_DATA_HINT),          \
    CLI_HINT("max-ind-range", "ids are hashed modulo a range once, when the dataset is made: "             \
             "'bagpipe prep --max-ind-range N'"),                                                           \
    CLI_HINT("arch-embedding-size", "the table sizes are the dataset's ('bagpipe info DATA' lists them); " \
             "synthetic tables of chosen sizes: 'bagpipe synth --tables 1000,50,...'"),                     \
    CLI_HINT("numpy-rand-seed", "use --seed N (parameter initialisation; the data order is the dataset's)"), \
    CLI_HINT("save-model", "use --save DIR (-o): a directory that 'bagpipe eval --load DIR' reads"),      \
    CLI_HINT("load-model", "to evaluate a saved model: 'bagpipe eval --load DIR DATA'; to continue a run: " \
             "--resume DIR (its --checkpoint-dir)"),                                                         \
    CLI_HINT("inference-only", "use 'bagpipe eval --load DIR DATA'"),                                      \
    CLI_HINT("use-gpu", "training runs on CPUs: --threads N sets the BLAS threads, --mode and --trainers " \
             "the ranks"),                                                                                  \
    CLI_HINT("print-time", "each --print-every window's rate is on the progress line and in the -m "      \
             "metrics file (samples_per_s); leave the flag out"),                                           \
    CLI_HINT("num-workers", DLRM_LOADER_HINT), CLI_HINT("test-num-workers", DLRM_LOADER_HINT),             \
    CLI_HINT("dataset-multiprocessing", DLRM_LOADER_HINT), CLI_HINT("memory-map", DLRM_LOADER_HINT),       \
    CLI_HINT("mlperf-logging", "metrics go to a JSON-lines file: -m FILE (docs/metrics.md)"),              \
    CLI_HINT("loss-threshold", "not supported: a run ends after --iters N or --epochs E"),                 \
    CLI_HINT("arch-interaction-itself", "not supported: the dot interaction takes each pair of two "      \
             "distinct features (the reference's default); leave the flag out"),                            \
    CLI_HINT("data-size", "the DLRM reference's random data; a synthetic dataset here: "                   \
             "'bagpipe synth -n ROWS -o DATA'"),                                                            \
    CLI_HINT("data-randomize", "the model learns from the rows in the dataset's order, every epoch the "  \
             "same; the reference's default, total, shuffles the train days when it preprocesses them, "     \
             "which 'bagpipe shuffle -o OUT DATA' does once"),                                              \
    CLI_HINT("data-sub-sample-rate", "the reference drops that share of the no-click train rows when it " \
             "preprocesses them: 'bagpipe prep --sub-sample-rate R --split days' does it once"),            \
    CLI_HINT("num-indices-per-lookup", DLRM_ONE_ID_HINT), CLI_HINT("num-indices-per-lookup-fixed", DLRM_ONE_ID_HINT), \
    CLI_HINT("mlperf-auc-threshold", DLRM_THRESHOLD_HINT), CLI_HINT("mlperf-acc-threshold", DLRM_THRESHOLD_HINT), \
    CLI_HINT("mlperf-bin-loader", DLRM_LOADER_HINT), CLI_HINT("mlperf-bin-shuffle", DLRM_LOADER_HINT),    \
    CLI_HINT("weighted-pooling", DLRM_TABLES_HINT), CLI_HINT("qr-flag", DLRM_TABLES_HINT),                \
    CLI_HINT("md-flag", DLRM_TABLES_HINT),                                                                  \
    CLI_HINT("activation-function", "the MLPs use ReLU (the reference's default, relu); leave the flag out"), \
    CLI_HINT("loss-weights", "not supported: the loss is unweighted binary cross-entropy; leave the flag out")

static int train_cmd(int argc, char **argv);

int cmd_train(int argc, char **argv) {
    const int code = train_cmd(argc, argv);
    // A failed run's new --checkpoint-dir goes at exit (drop_made_root); under the user's mpirun a
    // rank that did not cause a start-up failure exits 0, and rank 0 holds the directory.
    made_root.ok = code == 0 && !dist_failed_at_start();
    return code;
}

static int train_cmd(int argc, char **argv) {
    train_flags fl;
    const cli_opt opts[] = {
        CLI_CHOICE("mode", 0, &fl.mode, 0, "local|sync|sharded|static|bagpipe|async",
                   "training mode (local: one process, all tables in memory; sync: parameter servers, "
                   "no cache; sharded: rows partitioned over the trainers, all-to-all per iteration; "
                   "static: the hottest rows pinned on every trainer, the rest on servers; "
                   "bagpipe: oracle-planned lookahead cache, prefetch and LRPP sync; "
                   "async: per-trainer LRU/LFU caches read rows up to --staleness iterations old). Every mode prints its "
                   "memory plan first and refuses one beyond the memory of a host (distributed: each host's ranks "
                   "against that host's memory, also under your mpirun/srun)"),
        CLI_I64("cache-rows", 0, &fl.cache_rows, 65536, 1, UINT32_MAX - 1, "bagpipe, async: cache capacity per trainer (rows)"),
        CLI_INT("staleness", 0, &fl.staleness, 0, 0, 1000000,
                "async: read a cached row up to this many iterations old, its age counted from the server "
                "iteration its fetch returned (0: as sync; above 0 with 2 or more trainers, runs are not "
                "bit-reproducible: ages depend on timing)"),
        CLI_CHOICE("cache-policy", 0, &fl.cache_policy, 0, "lru|lfu", "async: which row a full cache evicts"),
        CLI_INT("lookahead", 0, &fl.lookahead, 32, 0, 65536, "bagpipe: lookahead window W (batches)"),
        CLI_INT("prefetch", 0, &fl.prefetch, 2, 0, 255, "bagpipe: prefetch distance P (iterations)"),
        CLI_INT("oracle-threads", 0, &fl.oracle_threads, 1, 1, 2,
                "bagpipe: threads of the oracle's planner (2: a second thread indexes the coming batches, or "
                "with --oracle-parts 2 plans the second part; the same plans either way)"),
        CLI_INT("oracle-parts", 0, &fl.oracle_parts, 1, 1, 2,
                "bagpipe: 2 splits the planner by tables into two parts that share the cache capacity (on two "
                "threads each part has a core to itself, where one part has an indexer thread: docs/oracle.md "
                "compares them; the plans differ from one part's in their order and Belady's ties, the model does "
                "not)"),
        CLI_INT("trainers", 0, &fl.trainers, 1, 1, 1024, "trainer ranks (distributed modes; at most 64 with --mode bagpipe)"),
        CLI_INT("servers", 0, &fl.servers, 1, 0, 1024,
                "embedding server ranks (sync, static, bagpipe, async; sharded runs none: 0, and 1 is read as 0)"),
        CLI_I64("static-rows", 0, &fl.static_rows, 0, 0, INT64_MAX / 2,
                "static: rows to pin on every trainer, the most accessed in the train split (0: 1% of the rows; "
                "at most the rows the split accesses)"),
        CLI_DBL("stall-timeout", 0, &fl.stall_timeout, 3600, 0, 1e9,
                "distributed modes: a rank that waits this many seconds without progress (a peer stopped, "
                "deadlocked or cut off) ends the job with an error naming what it waited for; keep it above "
                "the longest evaluation plus checkpoint at one boundary, half the final evaluation and save, a "
                "rank's setup and the servers' start-up (0: wait forever)"),
        MODEL_CLI_OPTS(&fl.mf),
        CLI_INT("batch-size", 'b', &fl.batch, 128, 1, 1 << 20, "global mini-batch size (samples)"),
        CLI_ALIAS("mini-batch-size", "batch-size", DLRM_NAME),
        CLI_DBL("learning-rate", 0, &fl.lr, DEFAULT_LR, 0, 1e6,
                "learning rate (--model dcn: when not given, 0.03 for the dense part and 0.1 for the embeddings, "
                "after a warmup of 200 iterations)"),
        CLI_DBL("emb-learning-rate", 0, &fl.emb_lr, -1, -1, 1e6, "embedding learning rate (-1: --learning-rate)"),
        CLI_I64("lr-num-warmup-steps", 0, &fl.lr_warmup, 0, 0, INT64_MAX / 4,
                "learning rates rise linearly over the first N iterations (the DLRM reference's schedule; "
                "--model dcn: 200 when --learning-rate is not given)"),
        CLI_I64("lr-decay-start-step", 0, &fl.lr_decay_start, 0, 0, INT64_MAX / 4,
                "iteration where the quadratic decay starts (at or after the warmup's end)"),
        CLI_I64("lr-num-decay-steps", 0, &fl.lr_decay_steps, 0, 0, INT64_MAX / 4,
                "iterations of the decay to 1e-7 at the least; the last rate holds after it (0: no decay)"),
        CLI_CHOICE("optimizer", 0, &fl.dense_opt, 0, "sgd|adagrad",
                   "dense optimizer only (the embeddings': --emb-optimizer; the DLRM reference's --optimizer "
                   "adagrad is --optimizer adagrad --emb-optimizer adagrad here)"),
        CLI_CHOICE("emb-optimizer", 0, &fl.emb_opt, 0, "sgd|adagrad|rowwise-adagrad", "embedding optimizer (state travels with each row)"),
        CLI_INT("epochs", 0, &fl.epochs, 1, 1, 100000, "passes over the train split"),
        CLI_ALIAS("nepochs", "epochs", DLRM_NAME),
        // The reference's Kaggle command gives these two; they say what training does here already.
        CLI_CHOICE("loss-function", 0, &fl.dlrm_loss, 0, "bce",
                   "the DLRM reference's loss: bce, binary cross-entropy, the one loss here (its mse and wbce "
                   "are not supported)"),
        CLI_CHOICE("round-targets", 0, &fl.dlrm_round, 1, "True|False|true|false|1|0",
                   "the DLRM reference's rounding of the labels: they are 0 or 1 already (prep writes them so), "
                   "either value is taken"),
        CLI_I64("iters", 'n', &fl.iters, 0, 0, INT64_MAX / 2, "run this many iterations instead of --epochs, past them or inside one (0: run the epochs)"),
        CLI_I64("seed", 0, &fl.seed, 1, 0, INT64_MAX, "seed for parameter initialisation"),
        CLI_INT("threads", 0, &fl.threads, 1, 1, 256, "BLAS threads (results are bit-reproducible for a fixed count, "
                "except async's with --staleness above 0)"),
        CLI_INT("eval-every", 0, &fl.eval_every, 0, 0, INT32_MAX, "evaluate every N iterations, printed and in the -m metrics file (0: only at the end; --no-eval "
                "leaves these)"),
        CLI_ALIAS_NEG_UNSET("test-freq", "eval-every", DLRM_NAME),
        CLI_CHOICE("eval-split", 0, &fl.eval_split, 1, "train|val|test", "split to evaluate on"),
        CLI_I64("eval-rows", 0, &fl.eval_rows, 0, 0, INT64_MAX, "evaluate on at most this many rows (0: all)"),
        CLI_INT("eval-batch-size", 0, &fl.eval_batch, 4096, 1, 1 << 20, "batch size for evaluation"),
        CLI_ALIAS_NEG_UNSET("test-mini-batch-size", "eval-batch-size", DLRM_NAME),
        CLI_FLAG("no-eval", 0, &fl.no_eval, "skip the final evaluation (--eval-every ones still run)"),
        CLI_INT("print-every", 0, &fl.print_every, 100, 1, INT32_MAX,
                "every N iterations, the mean train loss since the last: a line of the -m metrics file and the "
                "progress line's loss on a terminal (nothing is printed into a log)"),
        CLI_STR("metrics", 'm', &fl.metrics, NULL, "append JSON-lines metrics to this file"),
        CLI_STR("save", 'o', &fl.save, NULL, "save the trained model to this directory"),
        CKPT_CLI_OPTS(&fl.ck),
        DLRM_TRAIN_HINTS,
        CLI_END,
    };
    char **pos = NULL;
    int npos;
    cli_given given;
    int rc = cli_parse_given("bagpipe train", "[options] DATA", opts, argc, argv, &pos, &npos, &given);
    if (rc == 1) return 0;
    if (rc) return flags_exit(rc);
    if (npos != 1) {
        free(pos);
        return flags_exit(bp_fail(BP_EUSAGE, "train: expected one dataset file (see 'bagpipe train --help')"));
    }
    // Before any rank starts: a flag the mode or model does not read, a limit of the mode.
    if ((rc = check_mode_flags(&fl, opts, &given)) || (rc = model_flags_check_given(&fl.mf, opts, &given))) {
        free(pos);
        return flags_exit(rc);
    }
    const char *data_path = pos[0];
    free(pos);
    fl.unread_eval = unread_eval_flag(&fl, opts, &given);
    fl.dense_only_adagrad = fl.dense_opt == 1 && !cli_was_given(&given, opts, "emb-optimizer");
    memcpy(fl.overridden, given.overridden, sizeof fl.overridden);
    if ((rc = check_lr_flags(&fl))) return flags_exit(rc);
    // DCN's cross layers multiply the raw dense features (log counts, up to ~14) into each other,
    // and at their initialisation plain SGD diverges within ten iterations: on Criteo-shaped data
    // from a dense rate of about 0.065 (the DLRM default 0.1 does), and with fewer tables (a
    // narrower cross layer, whose Glorot weights are larger) from 0.014 or less.  A linear warmup
    // over the first 200 iterations lifts that edge 2-7x (most where it was lowest), to 0.07-0.2 on
    // every dataset measured (docs/models.md).  So DCN's dense part defaults to 0.03 after such a
    // warmup (unless --lr-num-warmup-steps is given; a decay that starts sooner ends it there); the
    // embeddings keep the common default, and warm up with it.
    if (fl.mf.kind == MODEL_DCN && !cli_was_given(&given, opts, "learning-rate")) {
        fl.lr = DCN_DEFAULT_DENSE_LR;
        if (!cli_was_given(&given, opts, "emb-learning-rate")) fl.emb_lr = DEFAULT_LR;
        if (!cli_was_given(&given, opts, "lr-num-warmup-steps")) {
            fl.lr_warmup = DCN_DEFAULT_WARMUP;
            if (fl.lr_decay_steps > 0 && fl.lr_decay_start < fl.lr_warmup) fl.lr_warmup = fl.lr_decay_start;
        }
    }
    // A model that cannot be saved is refused before training, not after.
    if (fl.save && ((rc = ckpt_dir_check(fl.save)) || (rc = ckpt_save_dir_check(fl.save))))
        return cmd_exit(bp_fail(rc, "--save %s", bp_errmsg(rc)));
    // Nor is a metrics file that is something else (the dataset itself, a model part).
    if ((rc = jsonl_check("--metrics", fl.metrics))) return cmd_exit(rc);
    // Mode local is one process: under a launcher of several ranks (mpirun -np 4 without --mode)
    // each rank trained a copy of the job, all into the same --save, metrics and checkpoints.
    // Refused, by the first rank only (the others leave quietly with 0, as in flags_exit).
    int rank;
    const int world = launch_world(&rank);
    if (fl.mode == TRAIN_MODE_LOCAL && world > 1) {
        if (rank != 0) return 0;
        fprintf(stderr, "bagpipe: --mode local (the default) runs in one process, and this launcher started %d: "
                "give the distributed mode (--mode sync, sharded, static, bagpipe or async), or start one "
                "process (-np 1)\n", world);
        return 2;
    }
    // One job per checkpoint root (the ranks of a job are covered by their launcher's lock, or
    // under the user's launcher by rank 0's: train_distributed; mode local is one process).
    if ((!launch_under_mpi() || fl.mode == TRAIN_MODE_LOCAL) && (rc = train_lock_roots(&fl))) return cmd_exit(rc);
    if (fl.mode != TRAIN_MODE_LOCAL) return train_distributed(&fl, data_path, argc, argv);

    bp_dataset ds;
    jsonl_file mf = {0};
    trainer tr;
    memset(&tr, 0, sizeof tr);
    train_setup su;
    if ((rc = setup_build(&su, &fl, &ds, data_path))) {
        bp_ds_close(&ds);
        return cmd_exit(rc);
    }
    const bp_ds_info *in = &ds.info;
    const model_config mc = su.mc;
    const uint64_t tr0 = su.tr0, tr1 = su.tr1, per_epoch = su.per_epoch, ev0 = su.ev0, ev1 = su.ev1;
    const int64_t total_iters = su.total_iters;
    const int do_eval = su.do_eval, eval_every = su.eval_every;
    const emb_opt eopt = su.eopt;
    const dense_opt dopt = su.dopt;
    const emb_layout_cfg lc = su.lc;
    emb_layout L;
    if ((rc = emb_layout_init(&L, &lc))) goto out;
    const int max_batch = BP_MAX(fl.batch, do_eval || eval_every ? su.eval_batch : 1);
    {
        char b1[32], b2[32], b3[32], b4[32];
        double tbytes = (double)emb_layout_bytes(&L);
        double gbytes = (double)emb_grad_bytes(max_batch * mc.F, mc.E) + 2.0 * max_batch * mc.F * mc.E * 4;
        size_t n_params, n_acts; // counted, not allocated: a batch too large to fit is refused below
        if ((rc = model_sizes(&mc, max_batch, &n_params, &n_acts))) goto out;
        double mbytes = (double)(n_params * 2 + n_acts) * 4 + (double)dense_opt_state_floats(&dopt, n_params) * 4;
        double need = tbytes + gbytes + mbytes, avail = (double)dist_mem_available();
        printf("memory plan: embedding tables %s (%llu rows x %d floats), model %s, buffers %s; %s available\n",
               bp_fmt_bytes(b1, sizeof b1, tbytes), (unsigned long long)L.rows, L.stride,
               bp_fmt_bytes(b2, sizeof b2, mbytes), bp_fmt_bytes(b3, sizeof b3, gbytes),
               bp_fmt_bytes(b4, sizeof b4, avail));
        if (avail > 0 && need > avail) {
            // The largest term names the cure: the tables, or the model's batch buffers.
            const int buffers = mbytes + gbytes > tbytes;
            char tables[160];
            if (in->idmap == BP_IDMAP_HASH && !in->vocab_fp) // hashed already: compacted, or a smaller range
                snprintf(tables, sizeof tables, "prep --compact, or --max-ind-range below this dataset's %llu",
                         (unsigned long long)in->max_ind_range);
            else if (in->idmap == BP_IDMAP_HASH)
                snprintf(tables, sizeof tables, "prep --max-ind-range below this dataset's %llu",
                         (unsigned long long)in->max_ind_range);
            else snprintf(tables, sizeof tables, "prep --max-ind-range");
            if (buffers)
                rc = bp_fail(BP_ENOMEM, "training needs %s but only %s is available; most of it is the model's "
                             "buffers for batches of that size: a smaller --batch-size or --eval-batch-size, or a "
                             "smaller model", bp_fmt_bytes(b1, sizeof b1, need), bp_fmt_bytes(b2, sizeof b2, avail));
            else
                rc = bp_fail(BP_ENOMEM, "training needs %s but only %s is available; use a smaller model, "
                             "--arch-sparse-feature-size, or a dataset with smaller tables (%s)",
                             bp_fmt_bytes(b1, sizeof b1, need), bp_fmt_bytes(b2, sizeof b2, avail), tables);
            goto out;
        }
    }
    openblas_set_num_threads(fl.threads);
    if ((rc = jsonl_open(&mf, "--metrics", fl.metrics))) goto out;
    train_json_start(&mf, &su);
    if ((rc = trainer_init(&tr, &mc, &lc, &dopt, &eopt, max_batch, 0))) goto out;
    tr.sched = su.sched, tr.lr = su.lr, tr.emb_lr = su.emb_lr;
    bp_rng rng;
    bp_rng_seed(&rng, (uint64_t)fl.seed, 0);
    model_init_params(&tr.m, &rng);
    const int64_t t0_iter = su.ck.start_iter;
    if (su.ck.from[0]) {
        if ((rc = ckpt_run_load_all(&tr, &su))) goto out;
        printf("resumed from %s at iteration %lld\n", su.ck.from, (long long)t0_iter);
        fflush(stdout);
    }
    ckpt_test_pidfile(0);
    {
        char arch[512];
        model_config_format(&mc, arch, sizeof arch);
        char sched[128];
        printf("model: %s (%zu dense parameters, %d-float rows, %s/%s optimizers, lr %g%s)\n", arch, tr.m.n_weights,
               mc.E, dopt.kind == DENSE_OPT_SGD ? "sgd" : "adagrad", emb_opt_kind_flag(eopt.kind), fl.lr,
               train_lr_note(&su, sched, sizeof sched));
        printf("data: %s, train %llu rows, %lld iteration%s of %d (%.2f epochs), BLAS %s x%d\n", data_path,
               (unsigned long long)(tr1 - tr0), (long long)total_iters, total_iters == 1 ? "" : "s", fl.batch,
               (double)total_iters / (double)per_epoch, openblas_get_corename(), fl.threads);
        fflush(stdout); // a log file (stdout not a terminal) shows the run's set-up now, not at its end
    }

    bp_progress prog;
    bp_progress_init(&prog, "train", "it", (uint64_t)total_iters);
    bp_progress_start_at(&prog, (uint64_t)t0_iter);
    const int Nd = (int)in->n_dense, F = (int)in->n_sparse, B = fl.batch;
    double t_start = bp_now(), t_window = t_start, t_eval = 0, win_loss = 0, first_s = 0;
    int64_t win_n = 0;
    metric_result res = {0}, bayes = {0};
    ckpt_sched cks;
    ckpt_sched_init(&cks, &su.ck);
    local_stop = 0;
    bp_signal_cleanup_init(); // the temporary files' clean-up, restored after the loop
    local_signals(1);
    int64_t t_stop = -1;
    // BAGPIPE_TEST_SIGNAL_AT=T (tests): a SIGINT during iteration T, as a Ctrl-C would be.
    const char *sig_hook = getenv("BAGPIPE_TEST_SIGNAL_AT");
    const int64_t sig_at = sig_hook ? strtoll(sig_hook, NULL, 10) : -1;
    for (int64_t t = t0_iter; t < total_iters; t++) {
        if (local_stop) {
            t_stop = t;
            break;
        }
        uint64_t r = tr0 + (uint64_t)(t % (int64_t)per_epoch) * (uint64_t)B;
        double loss = trainer_step(&tr, t, ds.dense + r * Nd, ds.sparse + r * F, ds.label + r, B);
        if (t == sig_at) raise(SIGINT);
        if ((rc = train_loss_check(t, loss))) break;
        if (t == t0_iter) first_s = bp_now() - t_start;
        win_loss += loss, win_n++;
        train_progress_window(&prog, t, win_loss / (double)win_n); // every iteration: redrawn at most 10 times a second
        if ((t + 1) % fl.print_every == 0 || t + 1 == total_iters) {
            double now = bp_now();
            jsonl j;
            train_json_window(&j, &su, t, win_loss / (double)win_n, (double)win_n * B / (now - t_window));
            if ((rc = jsonl_end(&j, &mf))) break;
            win_loss = 0, win_n = 0, t_window = bp_now();
        }
        if (train_eval_due(&su, t + 1)) {
            double t0 = bp_now();
            trainer_eval(&tr, &ds, ev0, ev1, su.eval_batch, &res, &bayes);
            if ((rc = train_json_eval(&mf, (bp_split)fl.eval_split, t + 1, B, &res))) break;
            train_print_eval(&prog, (bp_split)fl.eval_split, t + 1, &res);
            // evaluation, its line and its printing kept out of the throughput figures (the
            // windows' and the summary's alike; the summary's counted the last two)
            const double dt = bp_now() - t0;
            t_eval += dt, t_window += dt;
        }
        if (ckpt_sched_due(&cks, t + 1, total_iters)) {
            double c0 = bp_now();
            rc = ckpt_run_write_all(&tr, &su, t + 1, 0);
            double pause = bp_now() - c0;
            if ((rc = ckpt_sched_done(&cks, &su, t + 1, rc, pause, &mf))) break;
        }
    }
    bp_progress_finish(&prog);
    // A signal during the last iteration came with the training done: the run goes on to its final
    // evaluation and save, where it used to stop with the model trained and not saved.  The loop's
    // handlers stay until then, so that a second signal ends it at once (its temporary files
    // removed) and the same one delivered twice does not.
    if (t_stop < 0 && local_stop && !rc)
        fprintf(stderr, "bagpipe: signal %d (%s) during the last iteration: the training is complete, so the run "
                "goes on to its final evaluation and save (a second signal ends it now)\n", (int)local_stop,
                strsignal((int)local_stop));
    else local_signals(0);
    if (t_stop >= 0) {
        local_interrupted(&fl, local_stop, t_stop);
        if (!rc) rc = bp_fail(BP_EIO, "interrupted by signal %d", (int)local_stop); // its action did not end us
    }
    if (rc) goto out;
    double train_s = bp_now() - t_start - t_eval;
    const int64_t run_iters = total_iters - t0_iter;
    double sps = (double)run_iters * B / train_s;
    train_print_trained(run_iters, B, train_s);
    ckpt_sched_print(&cks, train_s);
    if ((rc = train_final_eval(&tr, &su, total_iters, &res, &bayes))) goto out;
    {
        jsonl j;
        jsonl_begin(&j);
        jsonl_str(&j, "event", "summary");
        jsonl_str(&j, "mode", "local");
        jsonl_str(&j, "model", model_kind_name(mc.kind));
        jsonl_int(&j, "iters", total_iters);
        jsonl_int(&j, "samples", total_iters * B);
        jsonl_num(&j, "train_s", train_s);
        jsonl_num(&j, "first_iter_s", first_s);
        jsonl_num(&j, "samples_per_s", sps);
        ckpt_sched_json(&j, &cks);
        train_json_summary_result(&j, &su, &res, &bayes);
        if ((rc = jsonl_end(&j, &mf))) goto out;
    }
    if (fl.save) {
        rc = trainer_save(&tr, fl.save, &ds, total_iters, total_iters * B, (uint64_t)fl.seed);
        if (!rc) printf("saved model to %s\n", fl.save);
    }
out:
    local_signals(0); // (after a signal in the last iteration: see above)
    trainer_free(&tr);
    rc = jsonl_close(&mf, rc);
    bp_ds_close(&ds);
    return cmd_exit(rc);
}

// eval --predictions FILE: a CSV of the evaluated rows, "row,label,probability,logit" (the row's
// index in the dataset, its label, the model's click probability to 9 digits, and the score it
// comes from, the float the metrics are computed from, exactly: a probability rounds to 1 from
// logit ~21 on, so ranks and losses recomputed from it alone can differ from the printed ones),
// written atomically: until the evaluation ends well nothing exists under FILE, and a previous
// FILE stays as it was.  Only a file that starts with "row,label,probability" (this header, or
// the one before the logit column) is replaced, never the dataset or anything else given by
// mistake.
#define PRED_HEADER "row,label,probability,logit\n"
#define PRED_HEADER_PREFIX "row,label,probability"

static int pred_check(const char *path) {
    if (strcmp(path, "-") == 0) // it would be a file named "-"
        return bp_fail(BP_EUSAGE, "--predictions -: expected a file name (the predictions are written to a file, "
                       "which takes their place whole at the end; not to standard output)");
    char *target; // what the commit would replace: /dev/stdout's file is refused now, not after the work
    int rc = bp_afile_target(path, &target);
    if (rc) return bp_fail(rc, "--predictions %s", bp_errmsg(rc));
    free(target);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0; // missing (created at the end) or unreadable: bp_afile_open says why
    struct stat st;
    char head[sizeof PRED_HEADER_PREFIX - 1];
    int bad = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
              !(read(fd, head, sizeof head) == (ssize_t)sizeof head && memcmp(head, PRED_HEADER_PREFIX, sizeof head) == 0);
    close(fd);
    if (bad)
        return bp_fail(BP_EUSAGE, "--predictions %s: exists and is not a predictions file (it does not start with "
                       "\"row,label,probability\"); only such a file is replaced: choose another name", path);
    return 0;
}

typedef struct {
    bp_afile af;
    const uint8_t *label;
    char *buf;
    size_t len;
    uint64_t rows;
} pred_out;

enum { PRED_BUF = 1 << 20 };

static int pred_flush(pred_out *p) {
    int rc = bp_afile_write(&p->af, p->buf, p->len);
    p->len = 0;
    return rc;
}

static int pred_sink(void *ctx, uint64_t row0, const float *logit, int n) {
    pred_out *p = ctx;
    for (int i = 0; i < n; i++) {
        if (p->len > PRED_BUF - 64) {
            int rc = pred_flush(p);
            if (rc) return rc;
        }
        double z = logit[i], prob = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
        p->len += (size_t)snprintf(p->buf + p->len, PRED_BUF - p->len, "%llu,%d,%.9g,%.9g\n",
                                   (unsigned long long)(row0 + (uint64_t)i), p->label[row0 + (uint64_t)i], prob, z);
    }
    p->rows += (uint64_t)n;
    return 0;
}

#define TRAIN_NAME "train's name for it"

int cmd_eval(int argc, char **argv) {
    const char *load = NULL, *pred = NULL;
    int split, batch, threads;
    int64_t rows;
    const cli_opt opts[] = {
        CLI_STR("load", 'l', &load, NULL,
                "directory of a saved model (train --save), a checkpoint, or a --checkpoint-dir (its newest valid "
                "checkpoint)"),
        CLI_CHOICE("split", 0, &split, 2, "train|val|test|all", "rows to evaluate"),
        CLI_I64("rows", 0, &rows, 0, 0, INT64_MAX, "evaluate at most this many rows (0: all)"),
        CLI_INT("batch-size", 'b', &batch, 4096, 1, 1 << 20,
                "evaluation batch size (the scores' last bits depend on it and on --threads: a training run's "
                "figures come back with its --eval-batch-size and --threads, and its rows: --split val, --rows)"),
        CLI_ALIAS_NEG_UNSET("test-mini-batch-size", "batch-size", DLRM_NAME),
        CLI_ALIAS("eval-split", "split", TRAIN_NAME),
        CLI_ALIAS("eval-rows", "rows", TRAIN_NAME),
        CLI_ALIAS("eval-batch-size", "batch-size", TRAIN_NAME),
        CLI_INT("threads", 0, &threads, 1, 1, 256, "BLAS threads"),
        CLI_STR("predictions", 'p', &pred, NULL,
                "write a CSV of the evaluated rows, \"row,label,probability,logit\" (row: index in the dataset; logit: "
                "the model's score exactly, which the metrics are computed from), "
                "replacing it whole at the end"),
        CLI_HINT("load-model", "use --load DIR (-l)"),
        CLI_HINT("data-set", "the dataset is the DATA argument: 'bagpipe eval --load DIR DATA'"),
        CLI_END,
    };
    char **pos = NULL;
    int npos;
    int rc = cli_parse("bagpipe eval", "--load DIR [options] DATA", opts, argc, argv, &pos, &npos);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    if (npos != 1 || !load) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "eval: expected --load DIR and one dataset file (see 'bagpipe eval --help')"));
    }
    if (pred && (rc = pred_check(pred))) {
        free(pos);
        return cmd_exit(rc);
    }
    bp_dataset ds;
    rc = cmd_open_dataset(&ds, pos[0]);
    free(pos);
    if (rc) return cmd_exit(rc);
    openblas_set_num_threads(threads);
    uint64_t r0, r1;
    bp_ds_split_range(&ds, (bp_split)split, &r0, &r1);
    if (rows && r1 - r0 > (uint64_t)rows) r1 = r0 + (uint64_t)rows;
    // Buffers for the batches there are: -b above the rows evaluated took memory for its whole size
    // (13 GB and half a minute to evaluate 100 rows with -b 1048576); the scores are the same.
    if (r1 > r0 && (uint64_t)batch > r1 - r0) batch = (int)(r1 - r0);
    trainer tr;
    rc = trainer_load(&tr, load, &ds, batch);
    if (!rc) {
        if (r1 == r0) {
            rc = bp_fail(BP_EUSAGE, "--split %s: no rows in %s", bp_split_name((bp_split)split), ds.path);
        } else {
            metric_result res, bayes;
            double t0 = bp_now();
            pred_out po = {.label = ds.label};
            if (pred && !(rc = bp_afile_open(&po.af, pred))) {
                po.buf = bp_xmalloc(PRED_BUF);
                rc = bp_afile_write(&po.af, PRED_HEADER, sizeof PRED_HEADER - 1);
            }
            if (!rc) rc = trainer_eval_to(&tr, &ds, r0, r1, batch, &res, &bayes, pred ? pred_sink : NULL, &po);
            if (pred && !rc && !(rc = pred_flush(&po)) && !res.n_nan) rc = bp_afile_commit(&po.af);
            if (pred && (rc || res.n_nan)) {
                bp_afile_abort(&po.af);
                if (rc) rc = bp_fail(rc, "--predictions: %s", bp_errmsg(rc));
            }
            if (!rc && res.n_nan) // a model of a run that diverged (saves and checkpoints refuse most of them)
                rc = bp_fail(BP_ERANGE, "%s: the model scores NaN on %llu of %llu samples (its parameters or "
                             "activations are not finite: its training diverged); nothing is written", load,
                             (unsigned long long)res.n_nan, (unsigned long long)res.n);
            free(po.buf);
            if (!rc) {
                train_print_result(bp_split_name((bp_split)split), &res, &bayes);
                const double s = bp_now() - t0;
                char t[32];
                printf("evaluated in %s (%.0f samples/s)\n", bp_fmt_seconds(t, sizeof t, s), (double)(r1 - r0) / s);
                if (pred)
                    printf("wrote %llu prediction%s to %s\n", (unsigned long long)po.rows, po.rows == 1 ? "" : "s",
                           pred);
            }
        }
        trainer_free(&tr);
    }
    bp_ds_close(&ds);
    return cmd_exit(rc);
}
