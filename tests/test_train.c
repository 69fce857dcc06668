// Single-process training end to end, through the binary: learning against a planted model,
// determinism, save/eval, the four models, metrics, and bad input.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "common.h"
#include "dist_util.h"
#include "metric.h"
#include "test.h"

#define SMALL_ARCH "--arch-mlp-bot 13-64-16 --arch-mlp-top 64-1"
#define TABLES "1000,500,20000,5000,300,50,10000,800,3,30000,4000,20000"

static int synth(const char *out, long rows, const char *extra) {
    return test_run(NULL, 120, "%s synth --preset custom --tables " TABLES " --dense 13 -n %ld --split ratio:0.9,0.1,0 %s -o %s",
                    test_bin(), rows, extra, out);
}

// Reads "KEY value" from the first line of text containing KEY.
static double number_after(const char *text, const char *key) {
    const char *p = text ? strstr(text, key) : NULL;
    return p ? atof(p + strlen(key)) : NAN;
}

TEST(train_learns_planted_model) {
    // One pass over ~2M samples must come within 0.01 AUC of the Bayes-optimal AUC of the data's
    // planted click model (the true probabilities are in the dataset).
    const char *data = test_path("learn.bin");
    ASSERT_EQ(synth(data, 2200000, ""), 0);
    char *out = NULL;
    int st = test_run(&out, 300, "%s train %s " SMALL_ARCH " --batch-size 256 --emb-optimizer adagrad --optimizer adagrad "
                      "--learning-rate 0.05", test_bin(), data);
    ASSERT_MSG(st == 0, "train failed: %s", out);
    double auc = number_after(out, "val   AUC "), bayes = number_after(out, "Bayes-optimal AUC ");
    printf("    val AUC %.4f, Bayes-optimal %.4f, gap %.4f\n", auc, bayes, bayes - auc);
    ASSERT_MSG(bayes - auc < 0.01 && auc > 0.75, "AUC %.4f vs Bayes-optimal %.4f", auc, bayes);
    free(out);
}

TEST(train_is_deterministic_and_eval_reloads) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 60000, ""), 0);
    const char *common = SMALL_ARCH " --batch-size 64 --emb-optimizer rowwise-adagrad --optimizer adagrad --learning-rate 0.05";
    char *out1 = NULL, *out2 = NULL, *out3 = NULL;
    ASSERT_EQ(test_run(&out1, 120, "%s train %s %s --seed 3 --save %s/m1 -m %s/m.jsonl", test_bin(), data, common,
                       test_tmpdir(), test_tmpdir()), 0);
    ASSERT_EQ(test_run(&out2, 120, "%s train %s %s --seed 3 --save %s/m2", test_bin(), data, common, test_tmpdir()), 0);
    ASSERT_EQ(test_run(NULL, 120, "%s train %s %s --seed 4 --save %s/m3", test_bin(), data, common, test_tmpdir()), 0);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/m1/dense.bin", test_tmpdir()), snprintf(b, sizeof b, "%s/m2/dense.bin", test_tmpdir());
    ASSERT_TRUE(dist_test_files_equal(a, b));
    snprintf(a, sizeof a, "%s/m1/emb.bin", test_tmpdir()), snprintf(b, sizeof b, "%s/m2/emb.bin", test_tmpdir());
    ASSERT_TRUE(dist_test_files_equal(a, b));
    snprintf(b, sizeof b, "%s/m3/emb.bin", test_tmpdir());
    ASSERT_TRUE(!dist_test_files_equal(a, b)); // another seed, another model: the comparison can fail

    // eval --load of the saved model prints the same validation line as training did.
    ASSERT_EQ(test_run(&out3, 120, "%s eval --load %s/m1 --split val %s", test_bin(), test_tmpdir(), data), 0);
    const char *l1 = strstr(out1, "val   AUC"), *l3 = strstr(out3, "val   AUC");
    ASSERT_TRUE(l1 && l3);
    ASSERT_TRUE(strncmp(l1, l3, strcspn(l1, "\n")) == 0);

    // The metrics file has train events and a summary, each a JSON object per line.
    char *m = NULL;
    ASSERT_EQ(test_run(&m, 10, "cat %s/m.jsonl", test_tmpdir()), 0);
    ASSERT_STR_CONTAINS(m, "{\"event\":\"train\",\"iter\":100,");
    ASSERT_STR_CONTAINS(m, "\"event\":\"summary\"");
    ASSERT_STR_CONTAINS(m, "\"auc\":");
    free(m);

    // A damaged part of the save is named; a model for another dataset is refused.
    ASSERT_EQ(test_run(NULL, 10, "printf X | dd of=%s/m1/emb.bin bs=1 seek=100 conv=notrunc status=none", test_tmpdir()), 0);
    free(out3);
    ASSERT_EQ(test_run(&out3, 60, "%s eval --load %s/m1 %s", test_bin(), test_tmpdir(), data), 1);
    ASSERT_STR_CONTAINS(out3, "emb.bin: checksum mismatch");
    free(out3);
    const char *other = test_path("other.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth --preset custom --tables 10,20 --dense 13 -n 1000 -o %s", test_bin(), other), 0);
    ASSERT_EQ(test_run(&out3, 60, "%s eval --load %s/m2 %s", test_bin(), test_tmpdir(), other), 1);
    ASSERT_STR_CONTAINS(out3, "sparse features");
    free(out1), free(out2), free(out3);
}

// --save over a saved model: the new one takes the old one's place as a whole.  A save that fails
// between its parts (the test hook BAGPIPE_TEST_SAVE_FAIL=1, as a full disk would) leaves the old
// model loadable and nothing beside it; other files in the directory stay.
TEST(train_save_replaces_a_model_whole) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    const char *arch = SMALL_ARCH " --batch-size 64 --learning-rate 0.05";
    char dir[600], *out = NULL, *ev = NULL;
    snprintf(dir, sizeof dir, "%s/model", test_tmpdir());
    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 20 --seed 1 --save %s", test_bin(), data, arch, dir), 0);
    const char *va = strstr(out, "val   AUC");
    ASSERT_TRUE(va != NULL);
    char line_a[256];
    snprintf(line_a, sizeof line_a, "%.*s", (int)strcspn(va, "\n"), va);
    free(out), out = NULL;
    ASSERT_EQ(test_run(NULL, 10, "echo mine > %s/notes.txt", dir), 0);

    // The hook =1 fails the save between its parts; =2 interrupts it there (SIGINT, as a Ctrl-C):
    // it ends by the signal, and the staged directory is gone (it used to stay, with the new
    // dense.bin).  Either way the old model loads.
    for (int hook = 1; hook <= 2; hook++) {
        int rc = test_run(&out, 120, "BAGPIPE_TEST_SAVE_FAIL=%d %s train %s %s --iters 30 --seed 2 --save %s", hook,
                          test_bin(), data, arch, dir);
        ASSERT_MSG(rc == (hook == 1 ? 1 : 128 + SIGINT), "hook %d: exit %d:\n%s", hook, rc, out);
        if (hook == 1) ASSERT_STR_CONTAINS(out, "the model saved before in");
        if (hook == 2) { // it says so (it ended without a word), after the results printed before it
            ASSERT_STR_CONTAINS(out, "interrupted while saving the model to ");
            ASSERT_STR_CONTAINS(out, ": the model saved there before is kept, the new one is not saved");
            ASSERT_STR_CONTAINS(out, "val   AUC");
        }
        free(out), out = NULL;
        ASSERT_EQ(test_run(&ev, 60, "%s eval --load %s --split val %s", test_bin(), dir, data), 0);
        ASSERT_STR_CONTAINS(ev, line_a);
        free(ev), ev = NULL;
        ASSERT_EQ(test_run(&out, 10, "ls -a %s", test_tmpdir()), 0);
        ASSERT_MSG(!strstr(out, ".saving-"), "hook %d: a staged directory was left:\n%s", hook, out);
        free(out), out = NULL;
    }

    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 30 --seed 2 --save %s", test_bin(), data, arch, dir), 0);
    const char *vb = strstr(out, "val   AUC");
    ASSERT_TRUE(vb != NULL);
    char line_b[256];
    snprintf(line_b, sizeof line_b, "%.*s", (int)strcspn(vb, "\n"), vb);
    ASSERT_TRUE(strcmp(line_a, line_b) != 0); // another model: the checks below can fail
    free(out), out = NULL;
    ASSERT_EQ(test_run(&ev, 60, "%s eval --load %s --split val %s", test_bin(), dir, data), 0);
    ASSERT_STR_CONTAINS(ev, line_b);
    free(ev), ev = NULL;
    ASSERT_EQ(test_run(&out, 10, "cat %s/notes.txt; ls -a %s; ls %s", dir, test_tmpdir(), dir), 0);
    ASSERT_STR_CONTAINS(out, "mine");
    ASSERT_MSG(!strstr(out, ".saving-"), "a staged directory was left:\n%s", out);
    free(out);
}

// `train DATA` of a small model for 5 iterations, saved to dir with the save's test hook
// BAGPIPE_TEST_SAVE_FAIL=hook (0: none): its exit status, its output into *out.
static int small_save(char **out, int hook, const char *data, const char *dir) {
    return test_run(out, 120, "BAGPIPE_TEST_SAVE_FAIL=%d %s train %s " SMALL_ARCH " --batch-size 64 --iters 5 "
                    "--no-eval --save %s", hook, test_bin(), data, dir);
}

// A save that fails where there was no model (a full disk: the hook BAGPIPE_TEST_SAVE_FAIL=1)
// leaves nothing: the parts it wrote without a MANIFEST are no model, only space taken, and a
// directory it would have made is not made (they used to stay); a directory that was there stays.
TEST(train_failed_save_leaves_nothing) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 2000, ""), 0);
    char dir[600], *out = NULL;
    snprintf(dir, sizeof dir, "%s/new", test_tmpdir());
    int rc = small_save(&out, 1, data, dir);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    // (written beside it under a staging name, renamed into place once whole)
    char want[700];
    snprintf(want, sizeof want, "emb.bin: cannot write: test failure (the model is not saved to %s)", dir);
    ASSERT_STR_CONTAINS(out, "/new.saving-");
    ASSERT_STR_CONTAINS(out, want);
    free(out);
    struct stat st;
    ASSERT_MSG(stat(dir, &st) != 0, "%s was left behind", dir);
    ASSERT_EQ(test_run(&out, 10, "ls -A %s", test_tmpdir()), 0);
    ASSERT_MSG(!strstr(out, "new.saving-"), "left: %s", out);
    free(out);
    ASSERT_EQ(mkdir(dir, 0755), 0);
    rc = small_save(&out, 1, data, dir);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    free(out);
    ASSERT_EQ(test_run(&out, 10, "ls -A %s", dir), 0);
    ASSERT_MSG(out[0] == 0, "left in the directory: %s", out);
    free(out);
}

// A --save into a directory that holds no model, interrupted between its parts (the hook
// BAGPIPE_TEST_SAVE_FAIL=2, a SIGINT there) or just after its MANIFEST (=3): what it wrote is
// removed, so the same save (the run again, or a resumed one) is not refused over it ("exists, and
// no bagpipe MANIFEST beside it makes it a saved model's part"); a file of the user's in the
// directory stays, and a directory the save made goes.
TEST(train_save_interrupted_into_a_new_dir_leaves_no_part) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    const char *arch = SMALL_ARCH " --batch-size 64 --learning-rate 0.05";
    for (int hook_at = 0; hook_at < 4; hook_at++) {
        const int mine = hook_at >> 1;
        char dir[600], *out = NULL;
        snprintf(dir, sizeof dir, "%s/model%d", test_tmpdir(), hook_at);
        if (mine) ASSERT_EQ(test_run(NULL, 10, "mkdir %s && echo mine > %s/notes.txt", dir, dir), 0);
        // =2: between the parts; =3: just after the MANIFEST, which goes too (the parts alone went,
        // leaving a MANIFEST that named them, and the note said the model was not saved)
        int rc = test_run(&out, 120, "BAGPIPE_TEST_SAVE_FAIL=%d %s train %s %s --iters 20 --save %s", 2 + (hook_at & 1),
                          test_bin(), data, arch, dir);
        ASSERT_MSG(rc == 128 + SIGINT, "exit %d:\n%s", rc, out);
        ASSERT_STR_CONTAINS(out, "interrupted while saving the model to ");
        ASSERT_STR_CONTAINS(out, ": it is not saved (the parts written are removed)");
        free(out), out = NULL;
        if (mine) {
            ASSERT_EQ(test_run(&out, 10, "ls -a %s", dir), 0);
            ASSERT_MSG(!strstr(out, "dense.bin") && !strstr(out, "emb.bin") && !strstr(out, "MANIFEST") &&
                           !strstr(out, ".tmp."), "left:\n%s", out);
            ASSERT_STR_CONTAINS(out, "notes.txt");
            free(out), out = NULL;
        } else { // the directory the save made goes with its files
            ASSERT_EQ(test_run(&out, 10, "ls -a %s/", test_tmpdir()), 0);
            char name[32];
            snprintf(name, sizeof name, "model%d", hook_at);
            ASSERT_MSG(!strstr(out, name), "left:\n%s", out);
            free(out), out = NULL;
        }
        ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 20 --save %s", test_bin(), data, arch, dir), 0);
        free(out), out = NULL;
        ASSERT_EQ(test_run(&out, 60, "%s eval --load %s --split val %s", test_bin(), dir, data), 0);
        free(out);
    }
}

// A save into a new directory killed (kill -9: the hook BAGPIPE_TEST_SAVE_FAIL=4, just after its
// MANIFEST) leaves nothing under that name, only <dir>.saving-<pid>: it is written there and
// renamed into place whole (it used to be written in place, and a kill left its parts without a
// MANIFEST, which eval and the next save refused).  The next save names the leftover and saves.
// The same into an existing directory of no model: it is left as it was.
TEST(train_save_killed_into_a_new_dir_leaves_no_dir) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 2000, ""), 0);
    char dir[600], *out = NULL;
    snprintf(dir, sizeof dir, "%s/killed", test_tmpdir());
    int rc = small_save(&out, 4, data, dir);
    ASSERT_MSG(rc == 128 + SIGKILL, "exit %d:\n%s", rc, out);
    free(out);
    struct stat st;
    ASSERT_MSG(stat(dir, &st) != 0, "%s was made", dir);
    ASSERT_EQ(test_run(&out, 10, "ls %s", test_tmpdir()), 0);
    ASSERT_STR_CONTAINS(out, "killed.saving-");
    free(out);
    rc = small_save(&out, 0, data, dir);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "that was interrupted (process ");
    ASSERT_STR_CONTAINS(out, "before it was complete: it holds only model files (3), and ");
    ASSERT_STR_CONTAINS(out, "was never made; remove it");
    free(out);
    ASSERT_EQ(test_run(&out, 60, "%s eval --load %s --split val %s", test_bin(), dir, data), 0);
    free(out);
    snprintf(dir, sizeof dir, "%s/mine", test_tmpdir());
    ASSERT_EQ(test_run(NULL, 10, "mkdir %s && echo mine > %s/notes.txt", dir, dir), 0);
    rc = small_save(&out, 4, data, dir);
    ASSERT_MSG(rc == 128 + SIGKILL, "exit %d:\n%s", rc, out);
    free(out);
    ASSERT_EQ(test_run(&out, 10, "ls -A %s", dir), 0);
    ASSERT_MSG(strcmp(out, "notes.txt\n") == 0, "in %s: %s", dir, out);
    free(out);
    rc = small_save(&out, 0, data, dir);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "before its model took ");
    ASSERT_STR_CONTAINS(out, "'s place, which holds none: it holds only model files (3); remove it");
    free(out);
    ASSERT_EQ(test_run(&out, 60, "%s eval --load %s --split val %s", test_bin(), dir, data), 0);
    free(out);
    ASSERT_EQ(test_run(&out, 10, "cat %s/notes.txt", dir), 0);
    ASSERT_STR_CONTAINS(out, "mine");
    free(out);
}

// A save killed between the exchange of the directories and the end of the commit leaves
// <dir>.saving-<pid> holding what dir held before.  The next save into dir names it, with its
// number of entries, and touches nothing in it; one of a process that still runs is not named.
// One killed before the exchange holds the new model's parts only, and is named as such; one of a
// save that moved its parts in one by one and was killed half way, with dir's model incomplete.
TEST(train_save_names_leftover_of_interrupted_save) {
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 2000, ""), 0);
    const char *arch = SMALL_ARCH " --batch-size 64";
    char dir[600], left[700], live[700], *out = NULL;
    snprintf(dir, sizeof dir, "%s/model", test_tmpdir());
    pid_t child = fork(); // a process that is gone
    if (child == 0) _exit(0);
    ASSERT_TRUE(child > 0 && waitpid(child, NULL, 0) == child);
    long gone = (long)child;
    snprintf(left, sizeof left, "%s.saving-%ld", dir, gone);
    snprintf(live, sizeof live, "%s.saving-%ld", dir, (long)getpid());
    ASSERT_EQ(test_run(NULL, 10, "mkdir -p %s %s && echo mine > %s/notes.txt", left, live, left), 0);
    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 5 --no-eval --save %s/", test_bin(), data, arch, dir), 0);
    char want[4000];
    snprintf(want, sizeof want, "warning: %s is left from a save into %s that was interrupted (process %ld is gone): "
             "it holds 1 entry", left, dir, gone);
    ASSERT_STR_CONTAINS(out, want);
    ASSERT_MSG(!strstr(out, live), "a staged directory of a live process was named:\n%s", out);
    free(out), out = NULL;
    ASSERT_EQ(test_run(&out, 10, "cat %s/notes.txt", left), 0);
    ASSERT_STR_CONTAINS(out, "mine");
    free(out), out = NULL;
    // Killed before the exchange: the new model's parts alone, which must not be moved back (a
    // dense.bin of another model breaks dir's); it was told to move them back.
    ASSERT_EQ(test_run(NULL, 10, "rm -r %s && mkdir %s && echo partial > %s/dense.bin", left, left, left), 0);
    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 5 --no-eval --save %s", test_bin(), data, arch, dir), 0);
    snprintf(want, sizeof want, "warning: %s is left from a save into %s that was interrupted (process %ld is gone): "
             "it holds only model files (1), none of yours, and %s holds a whole model: remove it", left, dir, gone,
             dir);
    ASSERT_STR_CONTAINS(out, want);
    free(out), out = NULL;
    // Killed while it moved the new parts in one by one (no directory exchange on the file system):
    // dir's model does not verify (here: a part of another model in it), the rest is left over.
    ASSERT_EQ(test_run(NULL, 10, "cp %s/dense.bin %s/dense.bin", left, dir), 0);
    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --iters 5 --no-eval --save %s", test_bin(), data, arch, dir), 0);
    snprintf(want, sizeof want, "warning: %s is left from a save into %s that was interrupted (process %ld is gone) "
             "while it moved the new model in file by file: %s's model is incomplete and the rest is here (1 file): "
             "move them into %s, MANIFEST last, then remove it", left, dir, gone, dir, dir);
    ASSERT_STR_CONTAINS(out, want);
    free(out);
}

TEST(train_four_models_learn) {
    const char *data = test_path("m.bin");
    ASSERT_EQ(synth(data, 200000, ""), 0);
    static const char *models[] = {
        "--model dlrm --arch-mlp-bot 13-64-8 --arch-mlp-top 64-1",
        "--model dlrm --arch-interaction-op cat --arch-mlp-bot 13-64-8 --arch-mlp-top 64-1",
        "--model wdl --arch-mlp-top 64-1",
        "--model deepfm --arch-mlp-top 64-1",
        "--model dcn --arch-mlp-top 64-1 --dcn-cross-layers 2",
        "--model dcn --arch-mlp-top 64-1 --dcn-cross-layers 2 --dcn-rank 8",
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(models); i++) {
        char *out = NULL;
        int st = test_run(&out, 120, "%s train %s %s --batch-size 128 --emb-optimizer adagrad --optimizer adagrad "
                          "--learning-rate 0.05 --arch-sparse-feature-size 8", test_bin(), data, models[i]);
        double auc = number_after(out, "val   AUC ");
        printf("    %-60s val AUC %.4f\n", models[i], auc);
        ASSERT_MSG(st == 0 && auc > 0.72, "%s: %s", models[i], out);
        free(out);
    }
}

// `train --model dcn` with every rate left at its default trains: its cross layers diverge at
// their initialisation, at the DLRM default 0.1 within ten iterations of 128 samples, and with few
// tables already at 0.02, the default before the warmup; the default is 0.03 after a 200-iteration
// warmup (src/train.c), which a decay that starts sooner ends there.
TEST(train_dcn_defaults_do_not_diverge) {
    const char *data = test_path("dcn.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    char *out = NULL;
    int st = test_run(&out, 120, "%s train %s --model dcn --iters 250", test_bin(), data);
    ASSERT_MSG(st == 0 && number_after(out, "val   AUC ") > 0.6, "%s", out);
    ASSERT_STR_CONTAINS(out, "lr 0.03, embeddings 0.1, warmup 200)");
    free(out);
    st = test_run(&out, 120, "%s train %s --model dcn --iters 60 --learning-rate 0.1", test_bin(), data);
    ASSERT_MSG(st == 1 && strstr(out, "lower --learning-rate"), "%s", out);
    free(out);
    // Five tables and 13 dense features: a cross layer of 93 floats.  2.5 epochs, past the warmup.
    const char *few = test_path("dcn5.bin");
    ASSERT_EQ(test_run(NULL, 120, "%s synth --preset custom --tables 100000,10,500,40000,7 --dense 13 -n 30000 "
                       "--split ratio:0.8,0.1,0.1 -o %s", test_bin(), few), 0);
    st = test_run(&out, 120, "%s train %s --model dcn --iters 470", test_bin(), few);
    ASSERT_MSG(st == 0 && number_after(out, "val   AUC ") > 0.78, "%s", out);
    free(out);
    st = test_run(&out, 120, "%s train %s --model dcn --iters 470 --learning-rate 0.02 --emb-learning-rate 0.1",
                  test_bin(), few);
    ASSERT_MSG(st == 1 && strstr(out, "lower --learning-rate"), "%s", out);
    free(out);
    st = test_run(&out, 120, "%s train %s --model dcn --iters 60 --lr-decay-start-step 40 --lr-num-decay-steps 20",
                  test_bin(), few);
    ASSERT_MSG(st == 0 && strstr(out, "lr 0.03, embeddings 0.1, warmup 40, decay from 40 over 20)"), "%s", out);
    free(out);
}

// Runs a command into out and asserts its exit status, showing the output when it differs.
#define RUN_EXPECT(rc, timeout, ...)                                                \
    do {                                                                            \
        int st_ = test_run(&out, timeout, __VA_ARGS__);                             \
        ASSERT_MSG(st_ == (rc), "exit %d, expected %d:\n%s", st_, rc, out ? out : ""); \
    } while (0)

// An evaluation batch above the rows evaluated takes buffers for those rows only (same scores):
// -b 1048576 for 100 rows took 13 GB in eval, and in train before its memory plan could refuse.
// Under a 2 GB address-space limit both used to fail to allocate.  And a memory plan that refuses
// names the batch flags when the buffers are what does not fit.
TEST(eval_batch_above_the_rows_takes_their_memory_only) {
#if defined(__SANITIZE_ADDRESS__)
    test_skip("AddressSanitizer's shadow memory does not fit an address-space limit");
    return;
#endif
    const char *data = test_path("d.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    char *out = NULL;
    const char *m = test_path("m");
    RUN_EXPECT(0, 120, "%s train %s --iters 20 --no-eval --save %s", test_bin(), data, m);
    free(out);
    RUN_EXPECT(0, 120, "ulimit -v 2000000; %s eval --load %s --split val --rows 100 -b 1048576 %s", test_bin(), m, data);
    ASSERT_STR_CONTAINS(out, "val   AUC");
    free(out);
    RUN_EXPECT(0, 120, "ulimit -v 2000000; %s train %s --iters 2 --eval-batch-size 1048576 --eval-rows 100", test_bin(),
               data);
    ASSERT_STR_CONTAINS(out, "(100 samples");
    free(out);
    RUN_EXPECT(1, 120, "BAGPIPE_MEM_AVAILABLE=100000000 %s train %s --iters 2 --batch-size 16000", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "most of it is the model's buffers for batches of that size: a smaller --batch-size or "
                             "--eval-batch-size");
    free(out);
}

// A model whose rows are laid out otherwise than this build lays them out for its settings (here:
// a manifest that says sgd for rows saved with Adagrad's state) is refused naming both layouts;
// this build's used to print as (0, 0), read after the trainer was freed.
TEST(eval_row_layout_mismatch_names_both) {
    const char *data = test_path("d.bin"), *m = test_path("m");
    ASSERT_EQ(synth(data, 4000, ""), 0);
    char *out = NULL;
    RUN_EXPECT(0, 120, "%s train %s " SMALL_ARCH " --iters 5 --no-eval --emb-optimizer adagrad --save %s", test_bin(),
               data, m);
    free(out);
    static ckpt_manifest man;
    ASSERT_OK(ckpt_manifest_load(m, &man));
    ckpt_set(&man, "emb_optimizer", "sgd");
    ASSERT_OK(ckpt_manifest_commit(m, &man));
    RUN_EXPECT(1, 60, "%s eval --load %s %s", test_bin(), m, data);
    ASSERT_STR_CONTAINS(out, "row layout (stride ");
    ASSERT_STR_CONTAINS(out, "differs from this build's (");
    ASSERT_MSG(!strstr(out, "(0, 0)"), "%s", out);
    free(out);
}

// eval --predictions writes one CSV line per evaluated row, from which the printed AUC, logloss
// and accuracy are recomputed; it replaces a previous predictions file whole, and refuses to
// replace anything else (the dataset given by mistake stays as it was).
TEST(eval_writes_predictions) {
    const char *data = test_path("p.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    char *out = NULL;
    RUN_EXPECT(0, 120, "%s train %s " SMALL_ARCH " --iters 100 --no-eval --save %s/pm", test_bin(), data, test_tmpdir());
    free(out);
    const char *csv = test_path("pred.csv");
    RUN_EXPECT(0, 60, "%s eval --load %s/pm --split val %s --predictions %s", test_bin(), test_tmpdir(), data, csv);
    double auc = number_after(out, "val   AUC "), ll = number_after(out, "logloss "), acc = number_after(out, "accuracy ");
    const char *paren = strstr(out, "  (");
    ASSERT_TRUE(paren != NULL);
    long n_printed = atol(paren + 3);
    ASSERT_STR_CONTAINS(out, "wrote 2000 predictions to");
    free(out);

    FILE *f = fopen(csv, "r");
    ASSERT_TRUE(f != NULL);
    char line[256];
    ASSERT_TRUE(fgets(line, sizeof line, f) && strcmp(line, "row,label,probability,logit\n") == 0);
    float *p = bp_xmalloc(2000 * sizeof *p);
    uint8_t *y = bp_xmalloc(2000);
    long n = 0;
    unsigned long long row, row0 = 0;
    int label;
    double prob;
    float logit;
    while (n < 2000 && fscanf(f, "%llu,%d,%lf,%f\n", &row, &label, &prob, &logit) == 4) {
        if (n == 0) row0 = row;
        ASSERT_MSG(row == row0 + (unsigned long long)n && (label == 0 || label == 1) && prob > 0 && prob < 1,
                   "line %ld: %llu,%d,%g", n + 2, row, label, prob);
        ASSERT_NEAR(prob, 1.0 / (1.0 + exp(-(double)logit)), 1e-8);
        p[n] = (float)prob, y[n] = (uint8_t)label, n++;
    }
    ASSERT_TRUE(feof(f) || fgetc(f) == EOF);
    fclose(f);
    ASSERT_EQ(n, n_printed);
    ASSERT_EQ(row0, 18000); // the val split follows the train split's 18000 rows
    ASSERT_NEAR(metric_auc(p, y, (size_t)n, NULL), auc, 5e-5);
    ASSERT_NEAR(metric_logloss_prob(p, y, (size_t)n), ll, 5e-5);
    ASSERT_NEAR(metric_accuracy_prob(p, y, (size_t)n), acc, 5e-5);
    free(p), free(y);

    // A second run replaces the file whole (10 rows now), also one written before the logit column.
    f = fopen(csv, "w");
    ASSERT_TRUE(f && fputs("row,label,probability\n18000,0,0.5\n", f) >= 0 && fclose(f) == 0);
    RUN_EXPECT(0, 60, "%s eval --load %s/pm --split val --rows 10 %s -p %s", test_bin(), test_tmpdir(), data, csv);
    free(out);
    RUN_EXPECT(0, 10, "wc -l < %s", csv);
    ASSERT_EQ(atoi(out), 11);
    free(out);
    // The dataset given as the predictions file is refused before anything runs, and unchanged.
    RUN_EXPECT(0, 10, "cksum < %s", data);
    char *sum = out;
    RUN_EXPECT(2, 60, "%s eval --load %s/pm --split val %s -p %s", test_bin(), test_tmpdir(), data, data);
    ASSERT_STR_CONTAINS(out, "--predictions");
    ASSERT_STR_CONTAINS(out, "is not a predictions file");
    free(out);
    RUN_EXPECT(0, 10, "cksum < %s", data);
    ASSERT_TRUE(strcmp(out, sum) == 0);
    free(out), free(sum);
    // "-" is not standard output here (it used to be a file named "-"); one row is "1 prediction".
    char bin[4096];
    ASSERT_TRUE(realpath(test_bin(), bin) != NULL);
    RUN_EXPECT(2, 60, "cd %s && %s eval --load pm --split val %s -p -", test_tmpdir(), bin, data);
    ASSERT_STR_CONTAINS(out, "--predictions -: expected a file name");
    free(out);
    RUN_EXPECT(0, 60, "%s eval --load %s/pm --split val --rows 1 %s -p %s", test_bin(), test_tmpdir(), data, csv);
    ASSERT_STR_CONTAINS(out, "wrote 1 prediction to ");
    free(out);
    // A place where it cannot be written: the error names the flag, and nothing is left.
    RUN_EXPECT(1, 60, "%s eval --load %s/pm --split val %s -p %s/no/such/dir/p.csv", test_bin(), test_tmpdir(), data, test_tmpdir());
    ASSERT_STR_CONTAINS(out, "--predictions: ");
    free(out);
}

// Exact ranks and scores, from the predictions of a confident model: its positives' probabilities
// round to 1 at 9 digits (from logit ~21), so recomputed from them the AUC had ties that the
// logits lack (0.557 against the printed 0.537) and the logloss clamped losses of up to ~40 per row
// (0.070 against 0.105).  The logit column gives the metrics that training wrote, digit for digit.
TEST(eval_predictions_give_the_exact_metrics) {
    const char *data = test_path("c.bin");
    ASSERT_EQ(synth(data, 30000, "--ctr 0.995"), 0);
    char *out = NULL;
    const char *m = test_path("m.jsonl");
    RUN_EXPECT(0, 120, "%s train %s " SMALL_ARCH " --iters 1000 --batch-size 256 --optimizer adagrad --emb-optimizer "
               "adagrad --learning-rate 0.3 --save %s/cm -m %s", test_bin(), data, test_tmpdir(), m);
    free(out);
    const char *csv = test_path("pred.csv");
    RUN_EXPECT(0, 60, "%s eval --load %s/cm --split val %s -p %s", test_bin(), test_tmpdir(), data, csv);
    free(out);
    FILE *f = fopen(csv, "r");
    ASSERT_TRUE(f != NULL);
    char line[256];
    ASSERT_TRUE(fgets(line, sizeof line, f) && strcmp(line, "row,label,probability,logit\n") == 0);
    float *z = bp_xmalloc(3000 * sizeof *z);
    uint8_t *y = bp_xmalloc(3000);
    long n = 0, ones = 0;
    unsigned long long row;
    int label;
    double prob;
    while (n < 3000 && fscanf(f, "%llu,%d,%lf,%f\n", &row, &label, &prob, &z[n]) == 4) y[n++] = (uint8_t)label, ones += prob == 1;
    fclose(f);
    ASSERT_EQ(n, 3000);
    ASSERT_MSG(ones > 100, "only %ld probabilities print as 1: the model is not confident enough to test this", ones);
    double auc = dist_test_summary_num(m, "auc"), ll = dist_test_summary_num(m, "logloss"),
           acc = dist_test_summary_num(m, "accuracy");
    ASSERT_NEAR(metric_auc(z, y, (size_t)n, NULL), auc, 1e-9 * auc);
    ASSERT_NEAR(metric_logloss_logit(z, y, (size_t)n), ll, 1e-8 * ll);
    ASSERT_NEAR(metric_accuracy_logit(z, y, (size_t)n), acc, 1e-9);
    free(z), free(y);
}

TEST(train_bad_input_is_explained) {
    const char *data = test_path("b.bin");
    ASSERT_EQ(synth(data, 5000, ""), 0);
    char *out = NULL;
    // An architecture that does not fit the dataset names the flag.
    RUN_EXPECT(2, 30, "%s train %s --arch-mlp-bot 12-64-16 --arch-mlp-top 64-1", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "--arch-mlp-bot: first size 12 must equal the dataset's 13 dense features");
    free(out);
    RUN_EXPECT(2, 30, "%s train %s --arch-mlp-bot 13-64-8 --arch-sparse-feature-size 16", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "--arch-mlp-bot");
    free(out);
    // A raw log instead of a binary dataset: the message says how to convert it.
    RUN_EXPECT(1, 30, "printf \"0\\t1\\t2\\t68fd1e64\\t80e26c9b\\n\" > %s/raw.txt && %s train %s/raw.txt", test_tmpdir(), test_bin(),
                       test_tmpdir());
    ASSERT_STR_CONTAINS(out, "bagpipe prep");
    free(out);
    // A batch larger than the train split, a bad flag value, a missing file.
    RUN_EXPECT(2, 30, "%s train %s --batch-size 100000", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "--batch-size");
    free(out);
    RUN_EXPECT(2, 30, "%s train %s --learning-rate -1", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "--learning-rate");
    free(out);
    RUN_EXPECT(1, 30, "%s train %s/missing.bin", test_bin(), test_tmpdir());
    ASSERT_STR_CONTAINS(out, "missing.bin");
    free(out);
    // A learning rate that diverges is stopped with a message, not trained into NaN.
    RUN_EXPECT(1, 60, "%s train %s " SMALL_ARCH " --learning-rate 1e5 --batch-size 32", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "lower --learning-rate");
    free(out);
}

// The iteration a diverging run stops at is counted from 1, as the metrics lines count: the
// last train line written (every iteration here) is the one just before it, in local and in a
// distributed mode.
TEST(train_nan_names_the_metrics_iteration) {
    const char *data = test_path("nan.bin");
    ASSERT_EQ(synth(data, 3000, ""), 0);
    static const char *const modes[] = {"--mode local", "--mode sync --trainers 2 --servers 1"};
    for (size_t m = 0; m < BP_ARRAY_LEN(modes); m++) {
        char metrics[600];
        snprintf(metrics, sizeof metrics, "%s/nan%zu.jsonl", test_tmpdir(), m);
        char *out = NULL;
        RUN_EXPECT(1, 120, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s train %s " SMALL_ARCH
                   " %s --learning-rate 1e5 --batch-size 32 --print-every 1 --no-eval -m %s",
                   test_bin(), data, modes[m], metrics);
        const char *e = strstr(out, "iteration "); // "bagpipe: [rank R (trainer I): ]iteration K: ..."
        ASSERT_MSG(e != NULL, "%s: no iteration named:\n%s", modes[m], out);
        long bad = atol(e + strlen("iteration "));
        ASSERT_STR_CONTAINS(e, "the loss is");
        free(out);
        FILE *f = fopen(metrics, "r");
        ASSERT_TRUE(f != NULL);
        char line[4096];
        long last = 0;
        while (fgets(line, sizeof line, f)) {
            const char *it = strstr(line, "\"event\":\"train\",\"iter\":");
            if (it) last = atol(it + strlen("\"event\":\"train\",\"iter\":"));
        }
        fclose(f);
        ASSERT_MSG(bad >= 2 && last == bad - 1, "%s: the error names iteration %ld, the last metrics line is %ld",
                   modes[m], bad, last);
    }
}

// A run whose last update diverged (each loss, computed before its update, is finite) used to
// print "AUC nan logloss -nan", exit 0 and save the model; it now fails at the evaluation, in
// every mode and at an --eval-every one (with --no-eval, at a probe of the first train rows), and
// saves nothing.  eval refuses such a model (here a checkpoint's) and writes no predictions.
TEST(train_diverged_last_update_saves_nothing) {
    const char *data = test_path("div.bin");
    ASSERT_EQ(synth(data, 3000, ""), 0);
    static const char *const runs[] = {"--mode local", "--mode local --no-eval --eval-every 2",
                                       "--mode sync --trainers 2 --servers 1", "--mode bagpipe --trainers 2 --servers 1"};
    for (size_t m = 0; m < BP_ARRAY_LEN(runs); m++) {
        char metrics[600], saved[600];
        snprintf(metrics, sizeof metrics, "%s/div%zu.jsonl", test_tmpdir(), m);
        snprintf(saved, sizeof saved, "%s/div%zu", test_tmpdir(), m);
        char *out = NULL;
        RUN_EXPECT(1, 120, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s train %s " SMALL_ARCH
                   " %s --learning-rate 1e5 --batch-size 32 --iters 2 -m %s --save %s", test_bin(), data, runs[m],
                   metrics, saved);
        ASSERT_STR_CONTAINS(out, "iteration 2: the model scores NaN on 300 of 300 val samples (its parameters or "
                                 "activations are not finite: training diverged); lower --learning-rate");
        ASSERT_MSG(!strstr(out, "AUC nan") && !strstr(out, "saved model"), "%s:\n%s", runs[m], out);
        free(out);
        struct stat st;
        ASSERT_MSG(stat(saved, &st) != 0, "%s: %s saved", runs[m], saved);
        ASSERT_EQ(test_run(NULL, 10, "grep -q -e summary -e nan %s", metrics), 1);
    }
    char *out = NULL;
    // --no-eval and --save: a probe of the first train rows shows it (it saved a model that scores NaN)
    static const char *const quiet[] = {"--mode local", "--mode bagpipe --trainers 2 --servers 1"};
    for (size_t m = 0; m < BP_ARRAY_LEN(quiet); m++) {
        char saved[600];
        snprintf(saved, sizeof saved, "%s/divq%zu", test_tmpdir(), m);
        RUN_EXPECT(1, 120, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s train %s " SMALL_ARCH
                   " %s --learning-rate 1e5 --batch-size 32 --iters 2 --no-eval --save %s", test_bin(), data, quiet[m],
                   saved);
        ASSERT_STR_CONTAINS(out, "after iteration 2 the model scores NaN on ");
        ASSERT_STR_CONTAINS(out, " train samples (its parameters or activations are not finite: training diverged)");
        free(out), out = NULL;
        ASSERT_TRUE(access(saved, F_OK) != 0);
    }
    // where the embeddings have a rate of their own, the hint names it too
    RUN_EXPECT(1, 120, "%s train %s " SMALL_ARCH " --learning-rate 0.01 --emb-learning-rate 1e5 --batch-size 32 "
               "--iters 20", test_bin(), data);
    ASSERT_STR_CONTAINS(out, "lower --learning-rate (the dense part's, 0.01) or --emb-learning-rate (the embeddings', "
                             "100000)");
    free(out), out = NULL;
    const char *ck = test_path("divck");
    RUN_EXPECT(1, 120, "%s train %s " SMALL_ARCH " --learning-rate 1e5 --batch-size 32 --iters 3 --checkpoint-every 1 "
               "--checkpoint-dir %s", test_bin(), data, ck);
    free(out), out = NULL;
    char pred[600];
    snprintf(pred, sizeof pred, "%s/div.csv", test_tmpdir());
    RUN_EXPECT(1, 60, "%s eval --load %s --split val -p %s %s", test_bin(), ck, pred, data);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000002 (iteration 2)");
    ASSERT_STR_CONTAINS(out, "the model scores NaN on 300 of 300 samples (its parameters or activations are not "
                             "finite: its training diverged); nothing is written");
    free(out);
    ASSERT_TRUE(access(pred, F_OK) != 0);
}

// Writes at path a gnuplot stand-in that keeps the script it is given in $GP_SCRIPT and writes a
// one-line "image" where the script says.
static int write_gnuplot_keeper(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "#!/bin/sh\ncat > \"$GP_SCRIPT\"\n"
               "out=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$GP_SCRIPT\" | head -1)\n"
               "echo image > \"$out\"\n");
    fclose(f);
    return chmod(path, 0755);
}

// The plot tests that need no real gnuplot: python3 (else the test is skipped: returns 0) and the
// stand-in above as <tmp>/gpfake/gnuplot, to put first on PATH.
static int plot_tool_setup(void) {
    if (test_run(NULL, 10, "command -v python3") != 0) {
        test_skip("python3 missing: plot tool not checked");
        return 0;
    }
    char fake[600];
    snprintf(fake, sizeof fake, "%s/gpfake", test_tmpdir());
    int ok = mkdir(fake, 0755) == 0;
    snprintf(fake + strlen(fake), sizeof fake - strlen(fake), "/gnuplot");
    ok = ok && write_gnuplot_keeper(fake) == 0;
    if (!ok) test_fail(__FILE__, __LINE__, "cannot write the gnuplot stand-in %s", fake);
    return ok;
}

TEST(train_metrics_plot) {
    if (test_run(NULL, 10, "command -v gnuplot && command -v python3") != 0) {
        test_skip("gnuplot or python3 missing: plot tool not checked");
        return;
    }
    const char *data = test_path("p.bin");
    ASSERT_EQ(synth(data, 30000, ""), 0);
    ASSERT_EQ(test_run(NULL, 60, "%s train %s " SMALL_ARCH " --batch-size 64 --eval-every 100 --print-every 20 "
                       "--lr-num-warmup-steps 100 -m %s/p.jsonl", test_bin(), data, test_tmpdir()), 0);
    char *out = NULL;
    int st = test_run(&out, 60, "python3 tools/plot_metrics.py %s/p.jsonl -o %s/p.png && head -c 8 %s/p.png | od -c | head -1",
                      test_tmpdir(), test_tmpdir(), test_tmpdir());
    ASSERT_MSG(st == 0, "plot failed: %s", out);
    ASSERT_STR_CONTAINS(out, "P   N   G");
    free(out);
    // Without --eval-every: the final evaluation (the summary line) is the one AUC point; with
    // --no-eval as well, the loss alone (both used to fail in gnuplot, leaving a broken image).
    const char *const runs[] = {"", "--no-eval"};
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(test_run(NULL, 60, "%s train %s " SMALL_ARCH " --batch-size 64 --iters 200 --print-every 20 %s -m %s/q%d.jsonl",
                           test_bin(), data, runs[k], test_tmpdir(), k), 0);
        st = test_run(&out, 60, "python3 tools/plot_metrics.py %s/q%d.jsonl -o %s/q%d.png && head -c 8 %s/q%d.png | od -c | head -1",
                      test_tmpdir(), k, test_tmpdir(), k, test_tmpdir(), k);
        ASSERT_MSG(st == 0, "plot of '%s' failed: %s", runs[k], out);
        ASSERT_STR_CONTAINS(out, "P   N   G");
        free(out);
    }
    // gnuplot failing after writing part of the image: no output, no temporary file or directory.
    char fake[600];
    snprintf(fake, sizeof fake, "%s/fake", test_tmpdir());
    ASSERT_EQ(test_run(NULL, 10, "mkdir -p %s %s/tmp", fake, test_tmpdir()), 0);
    snprintf(fake, sizeof fake, "%s/fake/gnuplot", test_tmpdir());
    FILE *f = fopen(fake, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f, "#!/bin/sh\nout=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" | head -1)\n"
               "echo partial > \"$out\"\necho broken >&2\nexit 1\n");
    fclose(f);
    chmod(fake, 0755);
    st = test_run(&out, 60, "PATH=%s/fake:$PATH TMPDIR=%s/tmp python3 tools/plot_metrics.py %s/q0.jsonl -o %s/bad.png",
                  test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir());
    ASSERT_MSG(st == 1, "exit %d with a failing gnuplot: %s", st, out);
    ASSERT_STR_CONTAINS(out, "gnuplot failed: broken");
    free(out);
    st = test_run(&out, 10, "cd %s && ls -A tmp; ls -A | grep -c bad.png", test_tmpdir());
    ASSERT_MSG(st == 1 && strcmp(out, "0\n") == 0, "left behind:\n%s", out);
    free(out);
    // The scheduled run's rate is drawn on the right-hand axis; the constant-rate run has none
    // (a gnuplot that keeps the script it is given).
    ASSERT_EQ(write_gnuplot_keeper(fake), 0);
    for (int k = 0; k < 2; k++) {
        st = test_run(&out, 60, "GP_SCRIPT=%s/gp%d.txt PATH=%s/fake:$PATH python3 tools/plot_metrics.py %s/%s.jsonl -o %s/s%d.png "
                      "&& grep -c \"axes x1y2\" %s/gp%d.txt", test_tmpdir(), k, test_tmpdir(), test_tmpdir(), k ? "q0" : "p",
                      test_tmpdir(), k, test_tmpdir(), k);
        ASSERT_MSG(k ? st != 0 && strstr(out, "0\n") : st == 0 && strstr(out, "1\n"), "run %d: rate curves: %s", k, out);
        free(out);
    }
}

TEST(train_refuses_a_model_that_does_not_fit) {
    // Hashed ids modulo 2^32 give 26 tables of 2^32 rows: terabytes of embeddings.  The memory
    // plan is printed and training refuses before allocating anything.
    const char *raw = test_path("tiny.txt"), *data = test_path("huge.bin");
    FILE *f = fopen(raw, "w");
    ASSERT_TRUE(f != NULL);
    for (int i = 0; i < 3; i++) {
        fprintf(f, "%d", i & 1);
        for (int k = 0; k < 13; k++) fprintf(f, "\t%d", k + i);
        for (int k = 0; k < 26; k++) fprintf(f, "\t%08x", (unsigned)(0x9e3779b9u * (unsigned)(k + 7 * i)));
        fputc('\n', f);
    }
    fclose(f);
    ASSERT_EQ(test_run(NULL, 30, "%s prep -q --max-ind-range 4294967296 -o %s %s", test_bin(), data, raw), 0);
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 30, "%s train %s --batch-size 2 --no-eval", test_bin(), data), 1);
    ASSERT_STR_CONTAINS(out, "memory plan: embedding tables");
    ASSERT_STR_CONTAINS(out, "but only");
    // hashed already: the cure is --compact or a smaller range than its own (the hint named the flag alone)
    ASSERT_STR_CONTAINS(out, "a dataset with smaller tables (prep --compact, or --max-ind-range below this dataset's "
                             "4294967296)");
    free(out);
}

// Output sent to a file (`bagpipe train ... > log`): the set-up lines (memory plan, model, data)
// are in the log while the run trains, not only at its end; they used to sit in stdio's buffer,
// so a long run's log stayed empty and a run killed (or crashed) lost them.
TEST(train_log_file_shows_the_setup_while_training) {
    const char *data = test_path("log.bin");
    ASSERT_EQ(synth(data, 20000, ""), 0);
    const char *log = test_path("log.txt");
    char *out = NULL;
    int st = test_run(&out, 60,
                      "%s train %s " SMALL_ARCH " --epochs 100000 --no-eval > %s 2>&1 & p=$!; i=0; "
                      "while [ $i -lt 200 ] && ! grep -q ^data: %s; do sleep 0.05; i=$((i+1)); done; "
                      "kill -0 $p && echo still-training; kill -9 $p; wait $p; "
                      "echo lines=$(grep -c -e ^model: -e ^data: %s)",
                      test_bin(), data, log, log, log);
    ASSERT_MSG(st == 0 && strstr(out, "still-training") && strstr(out, "lines=2"), "the log of a running job:\n%s",
               out);
    free(out);
}

// The samples axis of a multi-million-sample run: each tick labelled exactly (the SI format
// '%.0s%c' used to round 1.5M and 2.5M to "2M", giving 0, 500k, 1M, 2M, 2M, 2M, 3M).  A gnuplot
// stand-in keeps the script it is given.
TEST(train_metrics_plot_sample_axis_labels) {
    if (!plot_tool_setup()) return;
    char path[600];
    snprintf(path, sizeof path, "%s/big.jsonl", test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    for (int i = 1; i <= 40; i++)
        fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.5,\"lr\":%g}\n", i * 500, i * 64000,
                0.1 / i);
    fclose(f);
    char *out = NULL;
    int st = test_run(&out, 60, "GP_SCRIPT=%s/gpbig.txt PATH=%s/gpfake:$PATH python3 tools/plot_metrics.py %s "
                      "-o %s/big.png && grep ^set.xtics %s/gpbig.txt", test_tmpdir(), test_tmpdir(), path, test_tmpdir(),
                      test_tmpdir());
    ASSERT_MSG(st == 0, "plot failed: %s", out);
    const char *const want[] = {"'0' 0,", "'500k' 500000,", "'1M' 1000000,", "'1.5M' 1500000,", "'2M' 2000000,",
                                "'2.5M' 2500000,", "'3M' 3000000)"};
    for (size_t i = 0; i < BP_ARRAY_LEN(want); i++)
        ASSERT_MSG(strstr(out, want[i]), "no tick %s in: %s", want[i], out);
    free(out);
}

// The image's format follows -o: a name that is neither .png nor .svg is refused before drawing
// (it used to get PNG bytes: curves.jpg, curves.SVG), and a directory is named as such (it used
// to end in a Python traceback after the image was drawn).
TEST(train_metrics_plot_output_names) {
    if (!plot_tool_setup()) return;
    char path[600];
    snprintf(path, sizeof path, "%s/m.jsonl", test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    for (int i = 1; i <= 3; i++) fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.5}\n", i, 64 * i);
    fclose(f);
    ASSERT_EQ(test_run(NULL, 10, "mkdir -p %s/adir", test_tmpdir()), 0);
    char *out = NULL;
    int st = test_run(&out, 60, "PATH=%s/gpfake:$PATH python3 tools/plot_metrics.py %s -o %s/adir", test_tmpdir(), path,
                      test_tmpdir());
    ASSERT_MSG(st == 1 && strstr(out, "adir: is a directory, expected an image file name") && !strstr(out, "Traceback"),
               "exit %d: %s", st, out);
    free(out);
    static const char *const bad[] = {"c.jpg", "curves"};
    for (size_t i = 0; i < BP_ARRAY_LEN(bad); i++) {
        char img[700];
        snprintf(img, sizeof img, "%s/%s", test_tmpdir(), bad[i]);
        st = test_run(&out, 60, "PATH=%s/gpfake:$PATH python3 tools/plot_metrics.py %s -o %s", test_tmpdir(), path, img);
        ASSERT_MSG(st == 2, "exit %d: %s", st, out);
        ASSERT_STR_CONTAINS(out, "expected a .png or .svg file name");
        ASSERT_MSG(access(img, F_OK) != 0, "%s was written", img);
        free(out);
    }
    st = test_run(&out, 60, "GP_SCRIPT=%s/gp.txt PATH=%s/gpfake:$PATH python3 tools/plot_metrics.py %s -o %s/C.SVG && "
                  "grep ^set.terminal %s/gp.txt", test_tmpdir(), test_tmpdir(), path, test_tmpdir(), test_tmpdir());
    ASSERT_MSG(st == 0, "exit %d: %s", st, out);
    ASSERT_STR_CONTAINS(out, "set terminal svg");
    free(out);
}

// A run killed after iteration 500 and resumed from its checkpoint at 300, appending to the same
// metrics file: the resumed lines replace the killed run's from 400 on (the curve used to run
// back from 500 to 400 and forward again), and the tool says so.
TEST(train_metrics_plot_resumed_run_replaces_lines) {
    if (test_run(NULL, 10, "command -v python3") != 0) {
        test_skip("python3 missing: plot tool not checked");
        return;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/res.jsonl", test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    for (int i = 1; i <= 5; i++) {
        fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.9}\n", i * 100, i * 1000);
        if (i % 2 == 0)
            fprintf(f, "{\"event\":\"eval\",\"iter\":%d,\"samples\":%d,\"logloss\":0.9,\"auc\":0.6}\n", i * 100,
                    i * 1000);
    }
    for (int i = 4; i <= 6; i++) {
        fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.5}\n", i * 100, i * 1000);
        if (i % 2 == 0)
            fprintf(f, "{\"event\":\"eval\",\"iter\":%d,\"samples\":%d,\"logloss\":0.5,\"auc\":0.7}\n", i * 100,
                    i * 1000);
    }
    fclose(f);
    char *out = NULL;
    int st = test_run(&out, 30, "python3 -c \"import sys; sys.path.insert(0, sys.argv[2]); "
                      "import plot_metrics as p; t, e, s = p.load(sys.argv[1]); "
                      "print([(x[0], x[1]) for x in t], [(x[0], x[2]) for x in e])\" %s tools",
                      path);
    ASSERT_MSG(st == 0, "load failed: %s", out);
    ASSERT_STR_CONTAINS(out, "[(1000, 0.9), (2000, 0.9), (3000, 0.9), (4000, 0.5), (5000, 0.5), (6000, 0.5)] "
                             "[(2000, 0.6), (4000, 0.7), (6000, 0.7)]");
    ASSERT_STR_CONTAINS(out, "res.jsonl:8: a point at 4000 samples, not after the previous one's 5000");
    free(out);
    // A run resumed at iteration 300 whose first line (450) is after the interrupted run's last
    // (400): its "start" line says where it went back, and the point at 400 goes (it stayed).  A
    // figure that is not finite (null) leaves its point out, and a line cut short is skipped (the
    // file was refused for either).
    snprintf(path, sizeof path, "%s/res2.jsonl", test_tmpdir());
    f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f, "{\"event\":\"start\",\"iter\":0,\"samples\":0}\n");
    for (int i = 1; i <= 4; i++)
        fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.9}\n", i * 100, i * 1000);
    fprintf(f, "{\"event\":\"eval\",\"iter\":400,\"samples\":4000,\"logloss\":0.9,\"auc\":null}\n");
    fprintf(f, "{\"event\":\"train\",\"iter\":41\n"); // killed mid-line; train -m goes on below
    fprintf(f, "{\"event\":\"start\",\"iter\":300,\"samples\":3000,\"resumed_at\":300}\n");
    for (int i = 450; i <= 600; i += 150)
        fprintf(f, "{\"event\":\"train\",\"iter\":%d,\"samples\":%d,\"loss\":0.5}\n", i, i * 10);
    fprintf(f, "{\"event\":\"summary\",\"iter\":600,\"samples\":6000,\"logloss\":0.5,\"auc\":0.7}\n");
    fclose(f);
    st = test_run(&out, 30, "python3 -c \"import sys; sys.path.insert(0, sys.argv[2]); "
                  "import plot_metrics as p; t, e, s = p.load(sys.argv[1]); "
                  "print([(x[0], x[1]) for x in t], [(x[0], x[2]) for x in e])\" %s tools", path);
    ASSERT_MSG(st == 0, "load failed: %s", out);
    ASSERT_STR_CONTAINS(out, "[(1000, 0.9), (2000, 0.9), (3000, 0.9), (4500, 0.5), (6000, 0.5)] [(6000, 0.7)]");
    ASSERT_STR_CONTAINS(out, "res2.jsonl:7: a line cut short, skipped");
    ASSERT_STR_CONTAINS(out, "res2.jsonl:8: a run starting at 3000 samples (resumed, or run again)");
    free(out);
}
