// Checkpoints of training runs (ckpt_run.h, docs/checkpoints.md): resume bit-identical after a
// kill -9 of the local process, a trainer, a server or the oracle (at a random moment, or inside a
// checkpoint through the BAGPIPE_TEST_KILL_IN_CKPT hook); damaged checkpoint directories; a
// configuration mismatch; pruning; a full disk (a small tmpfs, mounted when the test runs as
// root; skipped otherwise).
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_run.h"
#include "common.h"
#include "dist_util.h"
#include "test.h"

#define MODEL                                                                                         \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 24 "          \
    "--learning-rate 0.05 --emb-optimizer adagrad --optimizer adagrad --print-every 100 --no-eval"
#define SYNC "--mode sync --trainers 2 --servers 2" // ranks: 0 oracle, 1-2 servers 0-1, 3-4 trainers 0-1
// The same layout; a cache small enough to evict and refetch all the time; a learning-rate
// schedule whose rate changes at most iterations of the 1000 (a resumed run must go on at the
// rate of its iteration).
#define BAGPIPE                                                                                       \
    "--mode bagpipe --trainers 2 --servers 2 --cache-rows 300 --lookahead 8 --lr-num-warmup-steps 150 " \
    "--lr-decay-start-step 250 --lr-num-decay-steps 600"

static char data_path[512];

static int make_data(void) {
    snprintf(data_path, sizeof data_path, "%s", test_path("d.bin"));
    return dist_test_dataset(data_path, 4000, 11, 3); // 3200 train rows: 133 iterations per epoch
}

// Runs `bagpipe train MODEL ARGS DATA` (in the multi-rank environment) in the foreground; env:
// extra assignments (hooks).
static int train(char **out, const char *env, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int train(char **out, const char *env, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_run(out, 150, "%s %s %s train " MODEL " %s %s", dist_test_env(), env, test_bin(), args, data_path);
}

#define TRAIN_OK(env, ...)                                                                   \
    do {                                                                                     \
        char *o_ = NULL;                                                                     \
        int rc_ = train(&o_, env, __VA_ARGS__);                                              \
        if (rc_ != 0) {                                                                      \
            test_fail(__FILE__, __LINE__, "train exited %d:\n%s", rc_, o_ ? o_ : "");         \
            free(o_);                                                                        \
            return;                                                                          \
        }                                                                                    \
        free(o_);                                                                            \
    } while (0)

// The same in the background, output to outp; env: extra assignments (hooks).
static pid_t train_bg(const char *outp, const char *env, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 150 env %s %s %s train " MODEL " %s %s > %s 2>&1", dist_test_env(),
             env, test_bin(), args, data_path, outp);
    pid_t job = fork();
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return job;
}

static int wait_status(pid_t job) {
    int st = 0;
    if (waitpid(job, &st, 0) != job) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The newest iteration under root whose manifest loads (-1: none).
static int64_t newest_committed(const char *root) {
    DIR *d = opendir(root);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent *e;
    ckpt_manifest *m = malloc(sizeof *m);
    while ((e = readdir(d))) {
        long long it;
        char dir[4096];
        if (sscanf(e->d_name, CKPT_DIR_PREFIX "%lld", &it) != 1) continue;
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        if (ckpt_manifest_load(dir, m) == 0 && it > best) best = it;
    }
    free(m);
    bp_clear_error();
    closedir(d);
    return best;
}

static int ckpt_valid(const char *root, int64_t iter) {
    char dir[4096];
    ckpt_dir_path(dir, sizeof dir, root, iter);
    ckpt_manifest *m = malloc(sizeof *m);
    int ok = ckpt_verify(dir, m) == 0;
    free(m);
    bp_clear_error();
    return ok;
}

static int ckpt_exists(const char *root, int64_t iter) {
    char dir[4096];
    struct stat st;
    ckpt_dir_path(dir, sizeof dir, root, iter);
    return stat(dir, &st) == 0;
}

static pid_t read_pid(const char *piddir, int rank) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.pid", piddir, rank);
    FILE *f = fopen(path, "r");
    long pid = -1;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1) pid = -1;
        fclose(f);
    }
    return (pid_t)pid;
}

static int same_model(const char *a, const char *b) {
    return dist_test_same_file(a, b, "dense.bin") && dist_test_same_file(a, b, "emb.bin");
}

static void damage(const char *root, int64_t iter, const char *name, int truncate_it) {
    char path[4096];
    ckpt_dir_path(path, sizeof path, root, iter);
    size_t l = strlen(path);
    snprintf(path + l, sizeof path - l, "/%s", name);
    if (truncate_it) {
        if (truncate(path, 100) != 0) test_fail(__FILE__, __LINE__, "truncate %s", path);
        return;
    }
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 77, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 77, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

// Starts job (args) with the pid files in piddir, waits until a checkpoint at or after
// min_iter is committed, sleeps a random 0..max_ms ms, kills rank `rank` with SIGKILL and waits
// for the job.  Returns the job's status (-2: no checkpoint came, -3: the rank had no pid file,
// -4: the job ended before the kill); *out gets its output.  max_ms stays well under what is left
// of the job: the bagpipe jobs here run 100 iterations in about 25 ms on a fast host.
static int kill_after_commit(char **out, const char *args, const char *root, int64_t min_iter, int rank, int max_ms) {
    char outp[512], piddir[512], env[1024];
    snprintf(outp, sizeof outp, "%s", test_path("job.txt"));
    snprintf(piddir, sizeof piddir, "%s", test_path("pids"));
    mkdir(piddir, 0755);
    for (int r = 0; r < 8; r++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/rank-%d.pid", piddir, r);
        unlink(p);
    }
    snprintf(env, sizeof env, "BAGPIPE_TEST_PID_DIR=%s", piddir);
    pid_t job = train_bg(outp, env, args);
    double t0 = bp_now();
    int rc = 0;
    while (newest_committed(root) < min_iter) {
        if (waitpid(job, NULL, WNOHANG) == job) {
            rc = -4;
            break;
        }
        if (bp_now() - t0 > 60) {
            rc = -2;
            break;
        }
        usleep(20000);
    }
    if (!rc) {
        unsigned seed = (unsigned)(bp_now() * 1e6);
        int delay_ms = (int)(rand_r(&seed) % (unsigned)max_ms);
        usleep((useconds_t)delay_ms * 1000);
        pid_t victim = read_pid(piddir, rank);
        if (victim <= 0) rc = -3;
        else if (waitpid(job, NULL, WNOHANG) == job) rc = -4;
        else {
            printf("      killing rank %d %d ms after checkpoint %lld was committed\n", rank, delay_ms,
                   (long long)newest_committed(root));
            kill(victim, SIGKILL);
        }
    }
    if (rc) {
        kill(job, SIGKILL);
        waitpid(job, NULL, 0);
    } else {
        rc = wait_status(job);
    }
    size_t len;
    *out = dist_test_slurp(outp, &len);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Unit: pruning

static int fake_ckpt(const char *root, int64_t iter, int commit) {
    char dir[4096];
    int rc = ckpt_dir_create(root, iter, dir, sizeof dir);
    if (rc) return rc;
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_set(&m, "kind", "checkpoint");
    ckpt_set(&m, "iteration", "%lld", (long long)iter);
    float x[16] = {(float)iter};
    const void *bufs[1] = {x};
    size_t lens[1] = {sizeof x};
    ckpt_file f;
    if ((rc = ckpt_write_part(dir, "dense.bin", bufs, lens, 1, &f))) return rc;
    ckpt_add_file(&m, &f);
    return commit ? ckpt_manifest_commit(dir, &m) : 0;
}

TEST(ckpt_prune_keeps_newest_valid) {
    const char *root = test_path("ck");
    ASSERT_OK(fake_ckpt(root, 10, 1));
    ASSERT_OK(fake_ckpt(root, 20, 0)); // an older leftover without a manifest
    ASSERT_OK(fake_ckpt(root, 30, 1));
    ASSERT_OK(fake_ckpt(root, 40, 1));
    ASSERT_OK(fake_ckpt(root, 50, 0)); // newer than every valid one: not pruning's to judge
    damage(root, 40, "dense.bin", 1);  // wrong size: not counted among the kept
    ASSERT_EQ(ckpt_prune(root, 1, -1, -1, NULL), 2);  // 10 and 20 go; 30 is the newest valid, 40 and 50 are newer
    ASSERT_TRUE(!ckpt_exists(root, 10) && !ckpt_exists(root, 20));
    ASSERT_TRUE(ckpt_valid(root, 30) && ckpt_exists(root, 40) && ckpt_exists(root, 50));
    char dir[4096];
    int64_t it;
    ckpt_manifest m;
    ASSERT_OK(ckpt_latest(root, dir, sizeof dir, &it, &m));
    ASSERT_EQ(it, 30);
    ASSERT_EQ(ckpt_prune(root, 1, -1, -1, NULL), 0);
    ASSERT_TRUE(ckpt_valid(root, 30));
}

// A resumed run that skipped a damaged checkpoint (a flipped byte: sizes intact) and then writes
// its own on both sides of it keeps --keep valid ones: the skipped one is not its own, so pruning
// does not count it (it used to keep the damaged 90 and 91, removing 84 and 80: one valid left).
TEST(ckpt_prune_does_not_count_what_the_resume_skipped) {
    ASSERT_OK(make_data());
    const char *root = test_path("ck");
    TRAIN_OK("", "--iters 100 --checkpoint-every 10 --keep 2 --checkpoint-dir %s", root);
    damage(root, 90, "emb.bin", 0);
    char *out = NULL;
    int st = train(&out, "", "--iters 95 --resume %s --checkpoint-every 7", root);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000090: ");
    free(out);
    ASSERT_TRUE(ckpt_valid(root, 84) && ckpt_valid(root, 91));
    ASSERT_MSG(!ckpt_exists(root, 90), "the damaged checkpoint was kept in place of a valid one");
}

// Ctrl-C in a local run stops it at the next iteration and says so, with the --resume that goes on
// (a local run used to die in silence, where a distributed job's launcher says both); it still
// ends by the signal.  The resumed run ends with the model of a run never interrupted.
TEST(ckpt_local_interrupt_says_where_to_resume) {
    ASSERT_OK(make_data());
    const char *root = test_path("ck"), *outp = test_path("out.txt"), *ref = test_path("ref"), *res = test_path("res");
    char args[4200];
    snprintf(args, sizeof args, "--iters 100000 --checkpoint-every 10 --checkpoint-dir %s", root);
    pid_t job = train_bg(outp, "", args);
    ASSERT_TRUE(job > 0);
    for (double t0 = bp_now(); bp_now() - t0 < 60 && newest_committed(root) < 20; usleep(20000)) {
    }
    // Twice at once (job is timeout(1), which passes each on twice: to the process and its group):
    // one interruption, said; a second Ctrl-C, ending the run at once, is one half a second later.
    ASSERT_EQ(kill(job, SIGINT), 0);
    ASSERT_EQ(kill(job, SIGINT), 0);
    const int st = wait_status(job);
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(st == 128 + SIGINT || st == 130, "status %d:\n%s", st, out ? out : "");
    ASSERT_STR_CONTAINS(out, "bagpipe: interrupted by signal 2 (Interrupt) at iteration ");
    ASSERT_STR_CONTAINS(out, "bagpipe: the newest checkpoint is ");
    char want[4300];
    snprintf(want, sizeof want, "the same flags with --resume %s go on from it", root);
    ASSERT_STR_CONTAINS(out, want);
    free(out);
    const int64_t k = newest_committed(root);
    TRAIN_OK("", "--iters %lld --resume %s --save %s", (long long)k + 25, root, res);
    TRAIN_OK("", "--iters %lld --save %s", (long long)k + 25, ref);
    ASSERT_TRUE(same_model(ref, res));
}

// A signal during the last iteration comes with the training done: the run says so, saves the
// model, the uninterrupted run's, and succeeds (it used to stop without saving it).  One in an
// earlier iteration still stops the run, by the signal, with nothing saved.
TEST(ckpt_local_signal_in_the_last_iteration_still_saves) {
    ASSERT_OK(make_data());
    const char *ref = test_path("ref"), *sig = test_path("sig"), *early = test_path("early");
    TRAIN_OK("", "--iters 30 --save %s", ref);
    char *out = NULL;
    int st = train(&out, "BAGPIPE_TEST_SIGNAL_AT=29", "--iters 30 --save %s", sig);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: signal 2 (Interrupt) during the last iteration: the training is complete, "
                             "so the run goes on to its final evaluation and save");
    ASSERT_STR_CONTAINS(out, "saved model to ");
    free(out);
    ASSERT_TRUE(same_model(ref, sig));
    st = train(&out, "BAGPIPE_TEST_SIGNAL_AT=10", "--iters 30 --save %s", early);
    ASSERT_MSG(st == 128 + SIGINT, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: interrupted by signal 2 (Interrupt) at iteration 11");
    free(out);
    struct stat sb;
    ASSERT_TRUE(stat(early, &sb) != 0);
}

// Ranks that see the --resume directory differently (node-local disks, a stale NFS view) take
// different checkpoints: the job used to hang (sync) or fail on a message of the wrong iteration
// (bagpipe).  The start-up agreement compares them and refuses, naming the rank, before training.
TEST(ckpt_resume_ranks_must_agree_on_the_checkpoint) {
    ASSERT_OK(make_data());
    const char *root = test_path("ck"), *other = test_path("ck2");
    TRAIN_OK("", SYNC " --iters 30 --checkpoint-every 10 --keep 3 --checkpoint-dir %s", root);
    ASSERT_EQ(test_run(NULL, 10, "cp -r %s %s && rm -r %s/ckpt-000000000020", root, other, other), 0);
    char *out = NULL, env[700];
    snprintf(env, sizeof env, "BAGPIPE_TEST_RESUME_AS=3:%s", other); // rank 3: trainer 0
    double t0 = bp_now();
    int st = train(&out, env, SYNC " --iters 40 --resume %s", root);
    ASSERT_MSG(st == 1 && bp_now() - t0 < 60, "status %d after %.0f s:\n%s", st, bp_now() - t0, out);
    ASSERT_STR_CONTAINS(out, "rank 3 (trainer 0) resumes from the checkpoint at iteration 10, rank 0 from the one at "
                             "20: the ranks do not see the same checkpoint directory");
    ASSERT_MSG(!strstr(out, "resumed from"), "it trained:\n%s", out);
    free(out);
}

// A run that resumed from an older checkpoint (the newer one was damaged past what its sizes show:
// a CRC mismatch, which pruning does not read) commits newer ones of its own: with --keep 1 it
// used to keep the damaged newer checkpoint as "the newest valid" and delete the one it had just
// committed, leaving nothing to resume from.  Now what is newer than the commit is left alone and
// the commit is kept.
TEST(ckpt_prune_keeps_the_commit_over_a_newer_damaged_one) {
    const char *root = test_path("ck");
    static const int64_t its[] = {100, 130, 160, 200};
    for (size_t i = 0; i < BP_ARRAY_LEN(its); i++) ASSERT_OK(fake_ckpt(root, its[i], 1));
    ASSERT_EQ(ckpt_prune(root, 1, 160, -1, NULL), 2); // 100 and 130 go
    ASSERT_TRUE(!ckpt_exists(root, 100) && !ckpt_exists(root, 130));
    ASSERT_TRUE(ckpt_valid(root, 160) && ckpt_exists(root, 200));
}

// One job per checkpoint root: a second job writing (--checkpoint-dir) or resuming (--resume) the
// root another holds is refused before it starts, naming the holder's pid (two jobs started
// together on one root used to be both accepted and prune each other's checkpoints).  Here the
// test process holds the lock; local and distributed runs (the launcher's lock) are refused.
TEST(ckpt_root_is_locked_by_its_job) {
    ASSERT_OK(make_data());
    char root[512], fresh[512]; // one with a checkpoint to resume from, one new
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(fresh, sizeof fresh, "%s", test_path("new"));
    TRAIN_OK("", "--iters 20 --checkpoint-every 10 --checkpoint-dir %s", root);
    ASSERT_OK(ckpt_lock_root(root, 1, "--checkpoint-dir"));
    ASSERT_OK(ckpt_lock_root(fresh, 1, "--checkpoint-dir"));
    char want[128];
    snprintf(want, sizeof want, "in use by another bagpipe job (pid %ld holds", (long)getpid());
    static const char *const runs[] = {"--iters 30 --checkpoint-every 10 --checkpoint-dir %s", "--iters 30 --resume %s",
                                       SYNC " --iters 30 --checkpoint-every 10 --checkpoint-dir %s"};
    for (size_t k = 0; k < BP_ARRAY_LEN(runs); k++) {
        char args[600];
        snprintf(args, sizeof args, runs[k], k == 1 ? root : fresh);
        char *out = NULL;
        int rc = train(&out, "", "%s", args);
        ASSERT_MSG(rc == 2 && out && strstr(out, want) && !strstr(out, "memory plan"), "%s: exit %d:\n%s", args, rc,
                   out ? out : "");
        free(out);
    }
    // Under the user's own mpirun (no bagpipe launcher) rank 0 takes the lock (it used to be taken
    // by nobody there), before it reads the root, and the job ends in its start-up agreement; a
    // local run under mpirun takes it too.
    static const char *const under[][2] = {
        {"mpirun -np 5 --oversubscribe", SYNC " --iters 30 --checkpoint-every 10 --checkpoint-dir %s"},
        {"mpirun -np 5 --oversubscribe", SYNC " --iters 30 --resume %s"},
        {"mpirun -np 1", "--iters 30 --checkpoint-every 10 --checkpoint-dir %s"},
    };
    for (size_t k = 0; k < BP_ARRAY_LEN(under); k++)
        for (int r = 0; r < 2; r++) { // the fresh root, and the one with checkpoints (read before the lock)
            char args[600];
            snprintf(args, sizeof args, under[k][1], k == 1 || r ? root : fresh);
            char *out = NULL;
            int rc = train(&out, under[k][0], "%s", args);
            ASSERT_MSG(rc != 0 && out && strstr(out, want) && !strstr(out, "trained"), "%s %s: exit %d:\n%s",
                       under[k][0], args, rc, out ? out : "");
            free(out);
        }
    ASSERT_TRUE(ckpt_valid(root, 10) && !ckpt_exists(root, 20) && !ckpt_exists(root, 30) && !ckpt_is_root(fresh));
}

// A refused run leaves no --checkpoint-dir behind.  The launcher (the process of a local run, rank
// 0 under the user's mpirun) makes the directory to lock it before the flags, the dataset and the
// root are checked, and a run refused there used to leave it, empty; so did one whose ranks failed
// before its first checkpoint.  A directory that existed before stays, empty or not, and so does
// the new one of a run that wrote a checkpoint into it before it failed.
TEST(ckpt_refused_run_leaves_no_checkpoint_dir) {
    ASSERT_OK(make_data());
    char ck[512], none[512];
    snprintf(ck, sizeof ck, "%s", test_path("newck"));
    snprintf(none, sizeof none, "%s", test_path("none"));
    static const struct {
        const char *env, *args; // args: printf format of the root (%s), then of a missing --resume root
        int code;               // exit status, or -1: any but 0 (under mpirun, the failing rank's)
    } refused[] = {
        {"", "--batch-size 99999 --checkpoint-every 5 --checkpoint-dir %s", 2},
        {"", "--arch-mlp-bot 13-8-4 --checkpoint-every 5 --checkpoint-dir %s", 2},
        {"", "--checkpoint-every 5 --checkpoint-dir %s --resume %s", 1},
        {"", "--checkpoint-dir %s", 2},
        {"", SYNC " --batch-size 99999 --checkpoint-every 5 --checkpoint-dir %s", 2},
        {"", BAGPIPE " --cache-rows 1 --iters 20 --checkpoint-every 10 --checkpoint-dir %s", 1}, // fails in its ranks
        {"mpirun -np 5 --oversubscribe", SYNC " --batch-size 99999 --checkpoint-every 5 --checkpoint-dir %s", -1},
        {"mpirun -np 1", "--batch-size 99999 --checkpoint-every 5 --checkpoint-dir %s", -1},
    };
    struct stat st;
    for (size_t k = 0; k < BP_ARRAY_LEN(refused); k++) {
        char args[1200];
        snprintf(args, sizeof args, refused[k].args, ck, none);
        char *out = NULL;
        int rc = train(&out, refused[k].env, "%s", args);
        ASSERT_MSG(refused[k].code < 0 ? rc != 0 : rc == refused[k].code, "%s %s: exit %d:\n%s", refused[k].env, args,
                   rc, out ? out : "");
        ASSERT_MSG(stat(ck, &st) != 0, "%s %s: left %s behind:\n%s", refused[k].env, args, ck, out ? out : "");
        free(out);
    }
    // Directories that were there: an empty one, one with a file of the user's.
    char old[512], kept[600];
    snprintf(old, sizeof old, "%s", test_path("old"));
    snprintf(kept, sizeof kept, "%s/notes.txt", old);
    ASSERT_TRUE(mkdir(old, 0755) == 0);
    for (int with_file = 0; with_file < 2; with_file++) {
        FILE *f = with_file ? fopen(kept, "w") : NULL;
        if (f) fclose(f);
        char *out = NULL;
        int rc = train(&out, "", "--batch-size 99999 --checkpoint-every 5 --checkpoint-dir %s", old);
        ASSERT_MSG(rc == 2, "exit %d:\n%s", rc, out ? out : "");
        free(out);
        ASSERT_MSG(stat(old, &st) == 0 && S_ISDIR(st.st_mode), "%s: removed", old);
        ASSERT_TRUE(!with_file || stat(kept, &st) == 0);
    }
    // A new directory with a checkpoint in it, of a run that failed at its end (its --save).
    char *out = NULL;
    int rc = train(&out, "BAGPIPE_TEST_SAVE_FAIL=1", "--iters 20 --checkpoint-every 10 --checkpoint-dir %s --save %s",
                   ck, test_path("m"));
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out ? out : "");
    free(out);
    ASSERT_TRUE(ckpt_valid(ck, 10));
}

// Shell text that stands for a running job on a checkpoint root (its three %s: the root): a
// process holding the flock of ROOT/.lock (a sleep that inherits the locked descriptor), whose pid
// the file names, as a job's; DROP_LOCK ends it.
#define HOLD_LOCK                                                                                   \
    "sh -c \"exec 9>>%s/.lock; flock -x 9; exec sleep 60\" & p=$!; "                                 \
    "while flock -n -s %s/.lock true; do sleep 0.02; done; echo $p > %s/.lock; "
#define DROP_LOCK "kill $p; wait $p; "

// eval --load (root_busy) takes a root's lock shared for an instant to see whether a job holds it;
// a job starting at that instant waits a moment for it instead of being refused as if another
// job held the root.  Here a reader holds it for 0.1 s as the job starts.
TEST(ckpt_job_start_waits_out_a_reader_of_the_lock) {
    ASSERT_OK(make_data());
    const char *ck = test_path("ckr");
    ASSERT_EQ(mkdir(ck, 0777), 0);
    char *out = NULL;
    char args[4200];
    snprintf(args, sizeof args, "--iters 20 --checkpoint-every 10 --checkpoint-dir %s", ck);
    int rc = test_run(&out, 60, "touch %s/.lock; flock -s %s/.lock sleep 0.1 & sleep 0.02; %s %s train " MODEL " %s %s",
                      ck, ck, dist_test_env(), test_bin(), args, data_path);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_MSG(!strstr(out, "in use by another bagpipe job"), "%s", out);
    free(out);
}

// eval --load of a root that a running job holds (the flock of its .lock, held here by flock(1)): the newest
// checkpoint directory without its MANIFEST is one being written, not "an incomplete save or
// checkpoint (its run stopped before committing it)", as the skip used to say; the newest valid
// one is loaded.  (A checkpoint pruned while it is read is taken again from the newest: that race
// is not reproducible here; the next test waits for a commit.)
TEST(ckpt_eval_of_a_root_being_written) {
    ASSERT_OK(make_data());
    const char *ck = test_path("ckb");
    char *out = NULL;
    ASSERT_EQ(train(&out, "", "--iters 12 --checkpoint-every 5 --checkpoint-dir %s --save %s", ck, test_path("mb")), 0);
    free(out), out = NULL;
    ASSERT_EQ(test_run(NULL, 10, "mkdir %s/ckpt-000000000015 && echo x > %s/ckpt-000000000015/dense.bin", ck, ck), 0);
    // a live holder: its pid in the lock file, as a job writes it
    ASSERT_EQ(test_run(&out, 60, HOLD_LOCK "%s eval --load %s %s; rc=$?; " DROP_LOCK "exit $rc", ck, ck, ck, test_bin(),
                       ck, data_path),
              0);
    ASSERT_STR_CONTAINS(out, "skipping checkpoint");
    ASSERT_STR_CONTAINS(out, "ckpt-000000000015: not complete yet (a running job is writing into");
    ASSERT_STR_CONTAINS(out, "loading checkpoint");
    ASSERT_STR_CONTAINS(out, "ckpt-000000000010 (iteration 10)");
    free(out), out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s eval --load %s %s", test_bin(), ck, data_path), 0); // no job: as before
    ASSERT_STR_CONTAINS(out, "its run stopped before committing it");
    free(out), out = NULL;
    // A live process whose pid the lock file names but that holds no lock (the pid reused after the
    // job ended, or another host's): no job; it used to be taken for one (and eval waited 60 s).
    ASSERT_EQ(test_run(&out, 60, "sleep 60 & p=$!; echo $p > %s/.lock; %s eval --load %s %s; rc=$?; kill $p; wait $p; "
                       "exit $rc", ck, test_bin(), ck, data_path),
              0);
    ASSERT_STR_CONTAINS(out, "its run stopped before committing it");
    ASSERT_TRUE(strstr(out, "a running job") == NULL);
    free(out);
}

// eval --load of a root that a running job holds, where no checkpoint is valid at the moment of the
// scan: the job's newest is unfinished and the one before was pruned while it was read (1 eval of 40
// failed so beside a job checkpointing every 20 iterations with --keep 1).  eval waits for the
// job's commit and loads it; without a live job it fails at once, as before.
TEST(ckpt_eval_waits_for_the_commit_of_a_running_job) {
    ASSERT_OK(make_data());
    const char *ck = test_path("ckc"), *side = test_path("ckc-MANIFEST");
    char *out = NULL;
    ASSERT_EQ(train(&out, "", "--iters 12 --checkpoint-every 5 --keep 1 --checkpoint-dir %s --save %s", ck,
                    test_path("mc")), 0);
    free(out), out = NULL;
    // the one checkpoint, uncommitted: its MANIFEST comes back once eval says it waits
    const char *log = test_path("ckc-eval.txt");
    ASSERT_EQ(test_run(NULL, 10, "mv %s/ckpt-000000000010/MANIFEST %s", ck, side), 0);
    ASSERT_EQ(test_run(NULL, 60, HOLD_LOCK
                       "(i=0; until grep -q \"waiting for\" %s 2>/dev/null || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); "
                       "done; mv %s %s/ckpt-000000000010/MANIFEST) & "
                       "%s eval --load %s %s > %s 2>&1; rc=$?; " DROP_LOCK "wait; exit $rc", ck, ck, ck, log, side, ck,
                       test_bin(), ck, data_path, log),
              0);
    size_t len;
    out = dist_test_slurp(log, &len);
    ASSERT_TRUE(out != NULL);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000010: not complete yet (a running job is writing into");
    ASSERT_STR_CONTAINS(out, "waiting for the running job to commit its checkpoint");
    ASSERT_STR_CONTAINS(out, "loading checkpoint");
    ASSERT_STR_CONTAINS(out, "ckpt-000000000010 (iteration 10)");
    free(out), out = NULL;
    ASSERT_EQ(test_run(NULL, 10, "mv %s/ckpt-000000000010/MANIFEST %s", ck, side), 0);
    double t0 = bp_now();
    ASSERT_TRUE(test_run(&out, 60, "%s eval --load %s %s", test_bin(), ck, data_path) != 0); // no job: no wait
    ASSERT_MSG(bp_now() - t0 < 5, "took %.1f s", bp_now() - t0);
    ASSERT_STR_CONTAINS(out, "no valid checkpoint among 1");
    ASSERT_TRUE(strstr(out, "waiting for") == NULL);
    free(out), out = NULL;
    // a live job, but the newest committed and damaged: nothing to wait for
    ASSERT_EQ(test_run(NULL, 10, "mv %s %s/ckpt-000000000010/MANIFEST && truncate -s 8 %s/ckpt-000000000010/dense.bin",
                       side, ck, ck), 0);
    t0 = bp_now();
    ASSERT_TRUE(test_run(&out, 60, HOLD_LOCK "%s eval --load %s %s; rc=$?; " DROP_LOCK "exit $rc", ck, ck, ck,
                         test_bin(), ck, data_path) != 0);
    ASSERT_MSG(bp_now() - t0 < 5, "took %.1f s", bp_now() - t0);
    ASSERT_STR_CONTAINS(out, "no valid checkpoint among 1");
    ASSERT_TRUE(strstr(out, "waiting for") == NULL);
    free(out);
}

// Checkpoints are never taken after the last iteration, so a run that checkpoints without --save
// ends with its final model lost, and a --resume without a schedule writes no checkpoint: each says
// so, once, where both used to be silent (the README's own example lost the final model).
TEST(ckpt_warns_where_the_final_model_or_later_checkpoints_are_not_kept) {
    ASSERT_OK(make_data());
    const char *ck = test_path("ckw"), *saved = test_path("mw");
    const char *lost = "warning: checkpoints are taken within the run, never after its last iteration: without "
                       "--save DIR the final model is not kept";
    const char *none = "warning: --resume: this run writes no checkpoint of its own";
    char *out = NULL;
    ASSERT_EQ(train(&out, "", "--iters 20 --checkpoint-every 10 --checkpoint-dir %s", ck), 0);
    ASSERT_STR_CONTAINS(out, lost);
    ASSERT_TRUE(strstr(strstr(out, lost) + 1, lost) == NULL);
    free(out), out = NULL;
    ASSERT_EQ(train(&out, "", "--iters 30 --resume %s --save %s", ck, saved), 0);
    ASSERT_STR_CONTAINS(out, none);
    ASSERT_TRUE(strstr(out, lost) == NULL);
    free(out), out = NULL;
    ASSERT_EQ(train(&out, "", "--iters 40 --resume %s --checkpoint-every 35 --save %s", ck, saved), 0);
    ASSERT_TRUE(strstr(out, lost) == NULL && strstr(out, none) == NULL);
    free(out);
}

// ---------------------------------------------------------------------------------------------
// Mode local

// A kill inside a checkpoint (between its parts and its manifest), then a kill -9 at a random
// moment; each time the job resumes from the newest valid checkpoint; the final model equals the
// uninterrupted run's byte for byte.  Iterations cross epoch boundaries (133 per epoch).
TEST(ckpt_local_kill_resume_identical) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    TRAIN_OK("", "--iters 12000 --save %s", ref);
    char *out = NULL;
    int st = train(&out, "BAGPIPE_TEST_KILL_IN_CKPT=0:250", "--iters 12000 --checkpoint-every 50 --keep 2 "
                   "--checkpoint-dir %s --save %s", root, res);
    ASSERT_MSG(st == 137, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "killed inside checkpoint 250");
    free(out);
    ASSERT_TRUE(ckpt_valid(root, 200) && ckpt_valid(root, 150));
    ASSERT_TRUE(ckpt_exists(root, 250) && !ckpt_valid(root, 250) && !ckpt_exists(root, 100));
    // resume (checkpoints go on into the same directory), killed at a random moment
    char args[2048];
    snprintf(args, sizeof args, "--iters 12000 --checkpoint-every 250 --keep 2 --resume %s --save %s", root, res);
    st = kill_after_commit(&out, args, root, 500, 0, 100);
    ASSERT_MSG(st == 137, "status %d:\n%s", st, out ? out : "");
    ASSERT_STR_CONTAINS(out, "resumed from");
    ASSERT_STR_CONTAINS(out, "ckpt-000000000200 at iteration 200");
    free(out);
    int64_t last = newest_committed(root);
    ASSERT_TRUE(last >= 500);
    // (given with a trailing slash, which the paths it prints do not double)
    st = train(&out, "", "--iters 12000 --resume %s/ --save %s", root, res);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    char want[640];
    snprintf(want, sizeof want, "resumed from %s/" CKPT_DIR_PREFIX "%012lld at iteration %lld", root, (long long)last,
             (long long)last);
    ASSERT_STR_CONTAINS(out, want);
    free(out);
    ASSERT_MSG(same_model(ref, res), "the resumed model differs from the uninterrupted run's");
    // time-driven checkpoints (every 6 ms here)
    char root2[512];
    snprintf(root2, sizeof root2, "%s", test_path("ck2"));
    TRAIN_OK("", "--iters 3000 --checkpoint-minutes 0.0001 --keep 1000 --checkpoint-dir %s", root2);
    DIR *d = opendir(root2);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strncmp(e->d_name, CKPT_DIR_PREFIX, 5) == 0;
    if (d) closedir(d);
    ASSERT_MSG(n >= 2, "%d time-driven checkpoints", n);
    // eval reads a checkpoint root (its newest valid checkpoint)
    ASSERT_EQ(test_run(&out, 30, "%s eval --load %s %s", test_bin(), root, data_path), 0);
    ASSERT_STR_CONTAINS(out, "AUC");
    free(out);
}

// Damaged checkpoints: resume skips each (naming the file and the problem) and picks the newest
// valid one; with none valid it fails clearly and deletes nothing.
TEST(ckpt_damaged_picks_newest_valid) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    TRAIN_OK("", "--iters 300 --save %s", ref);
    TRAIN_OK("", "--iters 300 --checkpoint-every 50 --keep 4 --checkpoint-dir %s", root);
    for (int64_t k = 100; k <= 250; k += 50) ASSERT_TRUE(ckpt_valid(root, k));
    ASSERT_TRUE(!ckpt_exists(root, 50) && !ckpt_exists(root, 300));
    static const struct {
        int64_t iter;
        const char *file;
        int truncate_it;
        const char *why;
    } cases[] = {{250, "emb.bin", 0, "emb.bin: checksum mismatch"},
                 {200, "dense.bin", 1, "dense.bin: 100 bytes, the manifest says"},
                 {150, "MANIFEST", 2, "MANIFEST: missing, though the parts are there: an incomplete save or checkpoint"}};
    for (int c = 0; c < 3; c++) {
        if (cases[c].truncate_it == 2) {
            char p[4096];
            ckpt_dir_path(p, sizeof p, root, cases[c].iter);
            strcat(p, "/MANIFEST");
            ASSERT_EQ(unlink(p), 0);
        } else {
            damage(root, cases[c].iter, cases[c].file, cases[c].truncate_it);
        }
        char *out = NULL;
        int st = train(&out, "", "--iters 300 --resume %s --save %s", root, res);
        ASSERT_MSG(st == 0, "case %d: status %d:\n%s", c, st, out);
        ASSERT_STR_CONTAINS(out, cases[c].why);
        char want[128];
        snprintf(want, sizeof want, "at iteration %lld", (long long)cases[c].iter - 50);
        ASSERT_STR_CONTAINS(out, want);
        free(out);
        ASSERT_MSG(same_model(ref, res), "case %d: the resumed model differs", c);
    }
    damage(root, 100, "MANIFEST", 0);
    char *out = NULL;
    int st = train(&out, "", "--iters 300 --resume %s --save %s", root, res);
    ASSERT_MSG(st != 0, "resumed from nothing valid:\n%s", out);
    ASSERT_STR_CONTAINS(out, "no valid checkpoint among 4");
    ASSERT_STR_CONTAINS(out, "manifest checksum mismatch");
    // and what is left to do (a new run into the same directory is refused, as it holds checkpoints)
    ASSERT_STR_CONTAINS(out, "nothing to resume from: train anew (without --resume) with an empty or new "
                             "--checkpoint-dir; these are left as they are");
    free(out);
    for (int64_t k = 100; k <= 250; k += 50) ASSERT_TRUE(ckpt_exists(root, k));
    // eval on a single damaged checkpoint names the file
    char dir[4096];
    ckpt_dir_path(dir, sizeof dir, root, 250);
    st = test_run(&out, 30, "%s eval --load %s %s", test_bin(), dir, data_path);
    ASSERT_TRUE(st != 0);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000250/emb.bin: checksum mismatch");
    free(out);
}

// A checkpoint of another configuration is refused, naming the key, the flag and the file.
TEST(ckpt_config_mismatch_is_refused) {
    ASSERT_OK(make_data());
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    TRAIN_OK("", "--iters 120 --checkpoint-every 100 --checkpoint-dir %s", root);
    // Each flag with the message its refusal gives.  The embedding rate inherits --learning-rate:
    // the message names where the value came from.
    static const char *const refused[][2] = {
        {"--batch-size 32", "ckpt-000000000100/MANIFEST: the checkpoint has batch_size = 24, this run 32 (--batch-size)"},
        {"--emb-optimizer sgd", "emb_optimizer = adagrad, this run sgd"},
        {"--learning-rate 0.5", "this run 0.5 (--emb-learning-rate, from --learning-rate)"},
        {"--emb-learning-rate 0.5", "this run 0.5 (--emb-learning-rate)"},
        {"--lr-num-warmup-steps 10", "lr_schedule = 0,0,0, this run 10,0,0 (--lr-num-warmup-steps, "
                                     "--lr-decay-start-step, --lr-num-decay-steps)"},
    };
    char *out = NULL;
    int st;
    for (size_t i = 0; i < BP_ARRAY_LEN(refused); i++) {
        st = train(&out, "", "--iters 200 --resume %s %s", root, refused[i][0]);
        ASSERT_MSG(st != 0, "%s: resumed:\n%s", refused[i][0], out);
        ASSERT_STR_CONTAINS(out, refused[i][1]);
        free(out);
    }
    // A warmup of one iteration changes no rate: the same configuration as none.
    st = train(&out, "", "--iters 130 --resume %s --lr-num-warmup-steps 1", root);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    free(out);
    st = train(&out, "", "--iters 200 --resume %s", test_tmpdir());
    ASSERT_TRUE(st != 0);
    ASSERT_STR_CONTAINS(out, "no checkpoint here");
    free(out);
    st = train(&out, "", "--iters 200 --checkpoint-every 10");
    ASSERT_TRUE(st != 0);
    ASSERT_STR_CONTAINS(out, "--checkpoint-dir");
    free(out);
}

// A damaged checkpoint skipped by a distributed resume is reported once: every rank scans the
// checkpoints too, and each used to print the same line (1 + 1 + S + T lines per checkpoint).
TEST(ckpt_skipped_checkpoint_reported_once_per_job) {
    ASSERT_OK(make_data());
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    TRAIN_OK("", SYNC " --iters 120 --checkpoint-every 50 --keep 3 --checkpoint-dir %s", root);
    damage(root, 100, "server-0.bin", 1);
    char *out = NULL;
    int st = train(&out, "", SYNC " --iters 130 --resume %s", root);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "resumed from ");
    int n = 0;
    for (const char *p = out; (p = strstr(p, "bagpipe: skipping checkpoint ")); p++) n++;
    ASSERT_MSG(n == 1, "the skipped checkpoint reported %d times:\n%s", n, out);
    free(out);
}

// A dataset of the same shape (tables, train split) but other rows is refused on resume: it used
// to be taken, training on from iteration K with other samples.  The same file under another name
// (moved, copied) is the same data and resumes.
TEST(ckpt_resume_on_other_data_is_refused) {
    ASSERT_OK(make_data());
    char root[512], other[512], copy[512];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(other, sizeof other, "%s", test_path("other.bin"));
    snprintf(copy, sizeof copy, "%s", test_path("copy.bin"));
    ASSERT_OK(dist_test_dataset(other, 4000, 12, 3));
    TRAIN_OK("", "--iters 120 --checkpoint-every 100 --checkpoint-dir %s", root);
    char *out = NULL;
    int st = test_run(&out, 150, "%s %s train " MODEL " --iters 200 --resume %s %s", dist_test_env(), test_bin(), root,
                      other);
    ASSERT_MSG(st == 1, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000100/MANIFEST: the checkpoint was trained on ");
    ASSERT_STR_CONTAINS(out, "other.bin has the same tables and train split but other contents (data_crc ");
    free(out);
    st = test_run(&out, 30, "cp %s %s", data_path, copy);
    ASSERT_EQ(st, 0);
    free(out);
    st = test_run(&out, 150, "%s %s train " MODEL " --iters 200 --resume %s %s", dist_test_env(), test_bin(), root,
                  copy);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "resumed from");
    free(out);
}

// A new run (no --resume) whose --checkpoint-dir holds another run's checkpoints is refused before
// training: it used to train, and its pruning kept the newest checkpoints, the other run's, so
// its own were removed as soon as written and a --resume after a failure took the other run's.
// A leftover without a manifest (a run killed inside its first checkpoint) is no checkpoint and
// does not stop a new run.
TEST(ckpt_new_run_into_another_runs_checkpoints_is_refused) {
    ASSERT_OK(make_data());
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    TRAIN_OK("", "--iters 120 --checkpoint-every 50 --checkpoint-dir %s", root);
    ASSERT_TRUE(ckpt_valid(root, 50) && ckpt_valid(root, 100));
    char *out = NULL;
    int st = train(&out, "", "--iters 60 --checkpoint-every 25 --learning-rate 0.5 --checkpoint-dir %s", root);
    ASSERT_MSG(st == 2, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "--checkpoint-dir");
    ASSERT_STR_CONTAINS(out, "holds the checkpoints of an earlier run (the newest at iteration 100); continue "
                             "that run with --resume");
    ASSERT_MSG(!strstr(out, "trained"), "it trained before refusing: %s", out);
    free(out);
    ASSERT_TRUE(ckpt_valid(root, 50) && ckpt_valid(root, 100) && !ckpt_exists(root, 25));
    // --resume continues into the same directory as before
    TRAIN_OK("", "--iters 160 --checkpoint-every 50 --resume %s", root);
    ASSERT_TRUE(ckpt_valid(root, 150));
    char left[512];
    snprintf(left, sizeof left, "%s", test_path("left"));
    ASSERT_OK(fake_ckpt(left, 25, 0));
    TRAIN_OK("", "--iters 60 --checkpoint-every 25 --checkpoint-dir %s", left);
    ASSERT_TRUE(ckpt_valid(left, 50));
}

// Disk full while checkpointing: a 128 KiB tmpfs holds one checkpoint (about 84 KiB in pages) but
// not two at once.  Default: the run stops with the reason, non-zero; --on-checkpoint-error
// continue trains on; the previous checkpoint stays valid and resumable either way.  A run whose
// first checkpoint fails has no previous one to speak of.
TEST(ckpt_disk_full) {
    ASSERT_OK(make_data());
    char mnt[512], ref[512], res[512];
    snprintf(mnt, sizeof mnt, "%s", test_path("tmpfs"));
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    ASSERT_EQ(mkdir(mnt, 0755), 0);
    if (geteuid() != 0 || mount("tmpfs", mnt, "tmpfs", 0, "size=128k") != 0) {
        test_skip("cannot mount a small tmpfs (needs root)");
        return;
    }
    char root[600];
    snprintf(root, sizeof root, "%s/ck", mnt);
    char *out1 = NULL, *out2 = NULL, *out3 = NULL, *out4 = NULL;
    int st1 = train(&out1, "", "--iters 300 --checkpoint-every 50 --keep 1 --checkpoint-dir %s", root);
    int v50 = ckpt_valid(root, 50), e100 = ckpt_exists(root, 100);
    int st4 = train(&out4, "", "--iters 300 --checkpoint-every 50 --checkpoint-dir %s/first", mnt); // no room left
    char d50[4096];
    ckpt_dir_path(d50, sizeof d50, root, 50);
    ckpt_remove_dir(d50); // room for the next run's one checkpoint
    int st2 = train(&out2, "", "--iters 300 --checkpoint-every 50 --keep 1 --on-checkpoint-error continue "
                    "--checkpoint-dir %s/ck2 --save %s", mnt, res);
    int st3 = train(&out3, "", "--iters 300 --save %s", ref);
    umount2(mnt, MNT_DETACH);
    ASSERT_MSG(st1 != 0, "the run went on after a failed checkpoint:\n%s", out1);
    ASSERT_STR_CONTAINS(out1, "checkpoint at iteration 100 failed");
    ASSERT_STR_CONTAINS(out1, "No space left on device");
    ASSERT_STR_CONTAINS(out1, "the previous checkpoint is kept (iteration 50); stopping");
    ASSERT_TRUE(v50 && !e100);
    ASSERT_MSG(st4 != 0, "the run went on after a failed checkpoint:\n%s", out4);
    ASSERT_STR_CONTAINS(out4, "checkpoint at iteration 50 failed");
    ASSERT_MSG(!strstr(out4, "previous checkpoint"), "a previous checkpoint that does not exist:\n%s", out4);
    ASSERT_MSG(st2 == 0 && st3 == 0, "status %d / %d:\n%s", st2, st3, out2);
    ASSERT_STR_CONTAINS(out2, "training goes on (--on-checkpoint-error continue)");
    ASSERT_STR_CONTAINS(out2, "checkpoints: 1 written");
    ASSERT_MSG(same_model(ref, res), "a failed checkpoint changed the model");
    free(out1), free(out2), free(out3), free(out4);
}

// ---------------------------------------------------------------------------------------------
// Mode sync (oracle, 2 servers, 2 trainers)

// Starts the uninterrupted reference run in the background (it shares the cores with the test's
// jobs: only its bytes matter).
static pid_t reference(const char *mode, const char *ref, int64_t iters) {
    char args[1024];
    snprintf(args, sizeof args, "%s --iters %lld --save %s", mode, (long long)iters, ref);
    return train_bg(test_path("ref.txt"), "", args);
}

// Bytes of part `name` of checkpoint iter (-1: absent).
static long part_size(const char *root, int64_t iter, const char *name) {
    char p[4200];
    ckpt_dir_path(p, sizeof p, root, iter);
    size_t l = strlen(p);
    snprintf(p + l, sizeof p - l, "/%s", name);
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

// A server dies after writing its part of checkpoint 200, before the commit: the job fails
// naming it; resume picks 150 and ends bit-identical.
TEST(ckpt_sync_kill_server) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    pid_t rj = reference(SYNC, ref, 400);
    char *out = NULL;
    int st = train(&out, "BAGPIPE_TEST_KILL_IN_CKPT=1:200", SYNC " --iters 400 --checkpoint-every 50 --checkpoint-dir %s",
                   root);
    ASSERT_MSG(st != 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "rank 1 (server 0) was killed by signal 9");
    // and where a resume goes on from (the failure used to leave that to the user)
    ASSERT_STR_CONTAINS(out, "ckpt-000000000150 (iteration 150): once the cause is dealt with, the same flags with "
                             "--resume");
    free(out);
    ASSERT_TRUE(ckpt_valid(root, 150) && !ckpt_valid(root, 200));
    st = train(&out, "", SYNC " --iters 400 --resume %s --save %s", root, res);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "at iteration 150");
    free(out);
    ASSERT_EQ(wait_status(rj), 0);
    ASSERT_MSG(same_model(ref, res), "the resumed model differs from the uninterrupted run's");
}

// --checkpoint-naive (every row through trainer 0, written there as one emb.bin), in a run that
// neither evaluates nor saves: the checkpoint gathers the rows all the same (trainer 0 used to
// hold no buffer for them then).  Resuming from it ends bit-identical.
TEST(ckpt_sync_naive_resume) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    pid_t rj = reference(SYNC, ref, 200);
    TRAIN_OK("", SYNC " --iters 120 --checkpoint-every 100 --checkpoint-naive --checkpoint-dir %s", root);
    ASSERT_TRUE(ckpt_valid(root, 100) && part_size(root, 100, "emb.bin") > 0);
    char *out = NULL;
    int st = train(&out, "", SYNC " --iters 200 --resume %s --save %s", root, res);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "at iteration 100");
    free(out);
    ASSERT_EQ(wait_status(rj), 0);
    ASSERT_MSG(same_model(ref, res), "the model resumed from a naive checkpoint differs from the uninterrupted run's");
}

// Mode bagpipe.  Trainer 1 dies right after writing its dirty rows of checkpoint 200, before the
// commit; the resumed run (checkpointing on) loses trainer 0 to kill -9 at a random moment; the
// second resume ends bit-identical to the uninterrupted run.
TEST(ckpt_bagpipe_kill_trainer) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    pid_t rj = reference(BAGPIPE, ref, 1000);
    char *out = NULL;
    int st = train(&out, "BAGPIPE_TEST_KILL_IN_CKPT=4:200", BAGPIPE " --iters 1000 --checkpoint-every 100 "
                   "--checkpoint-dir %s", root);
    ASSERT_MSG(st != 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "rank 4 (trainer 1) was killed by signal 9");
    free(out);
    ASSERT_TRUE(ckpt_valid(root, 100) && !ckpt_valid(root, 200) && part_size(root, 200, "trainer-1.bin") >= 0);
    // the cached rows are part of the state: some are dirty at every boundary here
    ASSERT_TRUE(part_size(root, 100, "trainer-0.bin") > 0 && part_size(root, 100, "trainer-1.bin") > 0);
    char args[2048];
    snprintf(args, sizeof args, BAGPIPE " --iters 1000 --checkpoint-every 100 --resume %s", root);
    st = kill_after_commit(&out, args, root, 300, 3, 50);
    ASSERT_MSG(st > 0, "status %d:\n%s", st, out ? out : "");
    ASSERT_STR_CONTAINS(out, "rank 3 (trainer 0) was killed by signal 9");
    ASSERT_STR_CONTAINS(out, "at iteration 100");
    free(out);
    st = train(&out, "", BAGPIPE " --iters 1000 --resume %s --save %s", root, res);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    free(out);
    ASSERT_EQ(wait_status(rj), 0);
    ASSERT_MSG(same_model(ref, res), "the resumed model differs from the uninterrupted run's");
}

// Mode bagpipe: kill -9 of the oracle (the planner) at a random moment after a commit; the
// resumed oracle plans from the checkpoint's batch.
TEST(ckpt_bagpipe_kill_oracle) {
    ASSERT_OK(make_data());
    char ref[512], root[512], res[512];
    snprintf(ref, sizeof ref, "%s", test_path("ref"));
    snprintf(root, sizeof root, "%s", test_path("ck"));
    snprintf(res, sizeof res, "%s", test_path("res"));
    pid_t rj = reference(BAGPIPE, ref, 1000);
    char args[2048], *out = NULL;
    snprintf(args, sizeof args, BAGPIPE " --iters 1000 --checkpoint-every 100 --checkpoint-minutes 1000 "
             "--checkpoint-dir %s", root);
    int st = kill_after_commit(&out, args, root, 200, 0, 50);
    ASSERT_MSG(st > 0, "status %d:\n%s", st, out ? out : "");
    ASSERT_STR_CONTAINS(out, "rank 0 (oracle) was killed by signal 9");
    free(out);
    int64_t last = newest_committed(root);
    st = train(&out, "", BAGPIPE " --iters 1000 --resume %s --save %s", root, res);
    ASSERT_MSG(st == 0, "status %d:\n%s", st, out);
    char want[128];
    snprintf(want, sizeof want, "at iteration %lld", (long long)last);
    ASSERT_STR_CONTAINS(out, want);
    free(out);
    ASSERT_EQ(wait_status(rj), 0);
    ASSERT_MSG(same_model(ref, res), "the resumed model differs from the uninterrupted run's");
}

// Modes sharded (every trainer's shard is a part) and static (servers' shards plus trainer 0's
// pinned replica): a run with checkpoints, then a resume from its older checkpoint, end with the
// same bytes.  The two modes' jobs run side by side.
TEST(ckpt_sharded_static_resume) {
    ASSERT_OK(make_data());
    static const char *const modes[] = {"--mode sharded --trainers 3 --servers 0",
                                        "--mode static --trainers 2 --servers 2 --static-rows 50"};
    char a[2][512], b[2][512], root[2][512], outp[2][512], args[4096];
    pid_t job[2];
    for (int m = 0; m < 2; m++) {
        snprintf(a[m], sizeof a[m], "%s", test_path(m ? "a1" : "a0"));
        snprintf(b[m], sizeof b[m], "%s", test_path(m ? "b1" : "b0"));
        snprintf(root[m], sizeof root[m], "%s", test_path(m ? "ck1" : "ck0"));
        snprintf(outp[m], sizeof outp[m], "%s", test_path(m ? "o1.txt" : "o0.txt"));
        // (--checkpoint-minutes: never due here, but the trainers agree on trainer 0's clock every iteration)
        snprintf(args, sizeof args, "%s --iters 300 --checkpoint-every 100 --checkpoint-minutes 1000 --keep 2 "
                 "--checkpoint-dir %s --save %s", modes[m], root[m], a[m]);
        job[m] = train_bg(outp[m], "", args);
    }
    int st[2] = {wait_status(job[0]), wait_status(job[1])};
    for (int m = 0; m < 2; m++) {
        ASSERT_MSG(st[m] == 0, "%s: status %d", modes[m], st[m]);
        ASSERT_TRUE(ckpt_valid(root[m], 100) && ckpt_valid(root[m], 200) && part_size(root[m], 100, "trainer-0.bin") > 0);
        char d200[4096];
        ckpt_dir_path(d200, sizeof d200, root[m], 200);
        ASSERT_OK(ckpt_remove_dir(d200));
        snprintf(args, sizeof args, "%s --iters 300 --resume %s --save %s", modes[m], root[m], b[m]);
        job[m] = train_bg(outp[m], "", args);
    }
    st[0] = wait_status(job[0]), st[1] = wait_status(job[1]);
    for (int m = 0; m < 2; m++) {
        size_t len;
        char *out = dist_test_slurp(outp[m], &len);
        ASSERT_MSG(st[m] == 0, "%s: status %d:\n%s", modes[m], st[m], out ? out : "");
        ASSERT_STR_CONTAINS(out, "at iteration 100");
        free(out);
        ASSERT_MSG(same_model(a[m], b[m]), "%s: the resumed model differs", modes[m]);
    }
}

// A run resumed without checkpointing of its own (--resume alone) still says in its summary where
// it resumed (docs/checkpoints.md: "the summary has resumed_at"); it used to leave the field out
// unless --checkpoint-every/--checkpoint-minutes was given too.  Local, and a distributed mode
// of each summary writer (sync: role_trainer, sharded: role_loop, bagpipe: role_bagpipe).
TEST(ckpt_resume_alone_reports_resumed_at) {
    ASSERT_OK(make_data());
    static const char *const modes[] = {"", SYNC, "--mode sharded --trainers 2 --servers 0", BAGPIPE};
    for (int m = 0; m < 4; m++) {
        char root[512], mf[512];
        snprintf(root, sizeof root, "%s/ck%d", test_path("r"), m);
        snprintf(mf, sizeof mf, "%s/m%d.jsonl", test_path("r"), m);
        mkdir(test_path("r"), 0755);
        TRAIN_OK("", "%s --iters 120 --checkpoint-every 50 --checkpoint-dir %s", modes[m], root);
        TRAIN_OK("", "%s --iters 150 --resume %s -m %s", modes[m], root, mf);
        const double at = dist_test_summary_num(mf, "resumed_at");
        ASSERT_MSG(at == 100, "mode '%s': resumed_at %g, expected 100", modes[m], at);
        ASSERT_MSG(dist_test_summary_num(mf, "iters") == 150, "mode '%s': iters", modes[m]);
    }
}

// The number after "key": in the first line of a metrics file that holds `event` (NaN if none).
static double event_num(const char *path, const char *event, const char *key) {
    size_t len;
    char *m = dist_test_slurp(path, &len), pat[96];
    double v = NAN;
    for (char *line = m; line && *line && isnan(v);) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        snprintf(pat, sizeof pat, "\"event\":\"%s\"", event);
        if (strstr(line, pat)) {
            snprintf(pat, sizeof pat, "\"%s\":", key);
            const char *p = strstr(line, pat);
            if (p) v = strtod(p + strlen(pat), NULL);
        }
        line = end ? end + 1 : NULL;
    }
    free(m);
    return v;
}

// A resumed run's summary gives its per-iteration figures over the iterations it ran, as its
// train lines do: here one train line covers the whole resumed run (iterations 100..149), so the
// two agree.  Sync and bagpipe used to divide by the run's last iteration (150), not the 50 run.
TEST(ckpt_resumed_summary_figures_per_iteration_run) {
    ASSERT_OK(make_data());
    static const char *const modes[] = {SYNC, "--mode sharded --trainers 2 --servers 0", BAGPIPE};
    mkdir(test_path("r"), 0755);
    for (int m = 0; m < 3; m++) {
        char root[512], mf[512];
        snprintf(root, sizeof root, "%s/ck%d", test_path("r"), m);
        snprintf(mf, sizeof mf, "%s/m%d.jsonl", test_path("r"), m);
        TRAIN_OK("", "%s --iters 120 --checkpoint-every 100 --checkpoint-dir %s", modes[m], root);
        TRAIN_OK("", "%s --iters 150 --resume %s -m %s", modes[m], root, mf);
        static const char *const keys[] = {"bytes_per_iter", "resident_mean"};
        for (int k = 0; k < (m == 2 ? 2 : 1); k++) {
            const double line = event_num(mf, "train", keys[k]), sum = dist_test_summary_num(mf, keys[k]);
            ASSERT_MSG(line > 0 && fabs(sum - line) <= 1e-6 * line, "mode '%s': %s %g in the summary, %g in the "
                       "train line of iterations 100..149", modes[m], keys[k], sum, line);
        }
    }
}

// The rate of the last progress line in out ("... 1.2k/s eta ..."; the units of progress.c), -1 if none.
static double progress_rate(const char *out) {
    const char *p = NULL;
    for (const char *q = out; (q = strstr(q, "/s eta ")); q++) p = q;
    if (!p) return -1;
    const char *b = p;
    while (b > out && b[-1] != ' ') b--;
    char *end;
    double v = strtod(b, &end);
    return v * (*end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 1);
}

// A resumed run's progress line gives the rate of the iterations it ran (and an ETA from it), as
// its "trained ... samples/s" line does; it used to count the iterations before the checkpoint
// too (a run resumed at 90% of the way showed ten times its rate and an ETA of 0).  Local and
// sync (the progress line is drawn by trainer 0).
TEST(ckpt_resumed_progress_rate) {
    ASSERT_OK(make_data());
    static const char *const modes[] = {"", SYNC};
    static const int64_t at[] = {18000, 1800}; // resumed at 90% of the way; a few tens of ms to go
    mkdir(test_path("p"), 0755);
    for (int m = 0; m < 2; m++) {
        char root[512], trained[64];
        snprintf(root, sizeof root, "%s/ck%d", test_path("p"), m);
        TRAIN_OK("", "%s --iters %lld --checkpoint-every %lld --checkpoint-dir %s", modes[m], (long long)at[m] + 1,
                 (long long)at[m], root);
        char *out = NULL;
        int rc = train(&out, "BAGPIPE_PROGRESS=1", "%s --iters %lld --print-every 10 --resume %s", modes[m],
                       (long long)at[m] * 10 / 9, root);
        ASSERT_MSG(rc == 0, "resume exited %d:\n%s", rc, out ? out : "");
        snprintf(trained, sizeof trained, "trained %lld iterations", (long long)at[m] / 9);
        const char *t = strstr(out, trained);
        const double shown = progress_rate(out), sps = t ? dist_test_num_before(t, "trained", " samples/s") : -1;
        const double rate = sps / 24; // iterations per second (MODEL's batch of 24)
        ASSERT_MSG(shown > 0 && rate > 0 && shown < 2 * rate && shown > rate / 2,
                   "mode '%s': progress %g it/s, trained at %g it/s:\n%s", modes[m], shown, rate, out);
        free(out);
    }
}

// The progress line is drawn from the first iteration on (then at most 10 times a second), not
// first at --print-every (default 100: a slow run showed nothing for its first hundred
// iterations).  Local and sync (drawn by trainer 0).
TEST(ckpt_progress_from_the_first_iteration) {
    ASSERT_OK(make_data());
    static const char *const modes[] = {"", SYNC};
    for (int m = 0; m < 2; m++) {
        char *out = NULL;
        int rc = train(&out, "BAGPIPE_PROGRESS=1", "%s --iters 50 --print-every 1000", modes[m]);
        ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out ? out : "");
        ASSERT_MSG(strstr(out, " 1/50 it "), "mode '%s': no progress line at iteration 1:\n%s", modes[m], out);
        free(out);
    }
}

// Mode static checkpoints the pinned rows it chose (trainer 0's replica): a resume that would pin
// another number of rows (another --static-rows, or none given: 1% of the rows) is refused before
// any rank starts, naming the flag, as other configuration changes are.  It used to start the job
// and fail on a trainer with "trainer-0.bin: holds 2000 bytes, this configuration needs 2400".
TEST(ckpt_static_resume_with_other_static_rows_is_refused) {
    ASSERT_OK(make_data());
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    const char *mode = "--mode static --trainers 2 --servers 1";
    TRAIN_OK("", "%s --static-rows 50 --iters 120 --checkpoint-every 100 --checkpoint-dir %s", mode, root);
    static const char *const refused[][2] = {
        {"--static-rows 60", "ckpt-000000000100/MANIFEST: the checkpoint has static_rows = 50, this run 60 (--static-rows"},
        {"", "the checkpoint has static_rows = 50, this run 23 (--static-rows (0: 1% of the rows))"}, // 2340 rows
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(refused); i++) {
        char *out = NULL;
        int st = train(&out, "", "%s %s --iters 150 --resume %s", mode, refused[i][0], root);
        ASSERT_MSG(st == 1, "'%s': status %d:\n%s", refused[i][0], st, out);
        ASSERT_STR_CONTAINS(out, refused[i][1]);
        ASSERT_MSG(!strstr(out, "job failed"), "'%s': refused by a rank, not before the job:\n%s", refused[i][0], out);
        free(out);
    }
    TRAIN_OK("", "%s --static-rows 50 --iters 150 --resume %s", mode, root);
}

// A checkpoint that trainer 0 and another rank both fail to write (a file where its directory
// goes) is reported with both reasons apart; the other rank's used to be glued onto trainer 0's
// ("... is not a directoryrank 2 could not write ...").
TEST(ckpt_failed_by_two_ranks_names_both) {
    ASSERT_OK(make_data());
    char root[512], blocker[600];
    snprintf(root, sizeof root, "%s", test_path("ck"));
    ASSERT_EQ(mkdir(root, 0755), 0);
    snprintf(blocker, sizeof blocker, "%s/ckpt-000000000100", root);
    FILE *f = fopen(blocker, "w");
    ASSERT_TRUE(f != NULL);
    fclose(f);
    char *out = NULL;
    int st = train(&out, "", "--mode sharded --trainers 2 --servers 0 --iters 150 --checkpoint-every 100 "
                   "--checkpoint-dir %s", root);
    ASSERT_MSG(st == 1, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "ckpt-000000000100: exists and is not a directory; rank 2 could not write ");
    free(out);
}

// A resumed run that writes its checkpoints into another directory than the one it resumes from
// is refused when that directory holds another run's checkpoints: pruning kept the newest (the
// other run's) and removed each of this run's as soon as it was written, while the summary said
// they were written.  The resume directory itself, under another spelling, and a new directory
// are accepted.
TEST(ckpt_resumed_run_into_another_runs_checkpoints_is_refused) {
    ASSERT_OK(make_data());
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s", test_path("a"));
    snprintf(b, sizeof b, "%s", test_path("b"));
    snprintf(c, sizeof c, "%s", test_path("c"));
    TRAIN_OK("", "--iters 60 --checkpoint-every 50 --checkpoint-dir %s", a);
    TRAIN_OK("", "--iters 310 --seed 7 --checkpoint-every 300 --checkpoint-dir %s", b);
    char *out = NULL;
    int st = train(&out, "", "--iters 200 --checkpoint-every 50 --keep 2 --resume %s --checkpoint-dir %s", a, b);
    ASSERT_MSG(st == 2, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "holds the checkpoints of another run (the newest at iteration 300), and this run "
                             "resumes from ");
    free(out);
    ASSERT_TRUE(ckpt_valid(b, 300) && !ckpt_exists(b, 100));
    TRAIN_OK("", "--iters 200 --checkpoint-every 50 --keep 2 --resume %s --checkpoint-dir %s/.", a, a);
    ASSERT_TRUE(ckpt_valid(a, 100) && ckpt_valid(a, 150));
    TRAIN_OK("", "--iters 260 --checkpoint-every 50 --keep 2 --resume %s --checkpoint-dir %s", a, c);
    ASSERT_TRUE(ckpt_valid(c, 200) && ckpt_valid(c, 250)); // resumed at 150
}

// A trainer part whose manifest size is huge (a manifest edited, its end line recomputed): `eval
// --load` of that checkpoint is refused naming the sizes, before allocating for it (it used to
// abort with "internal error ... out of memory allocating ... bytes", exit 134).
TEST(ckpt_trainer_part_huge_manifest_size_is_refused) {
    ASSERT_OK(make_data());
    const char *root = test_path("ck");
    TRAIN_OK("", "--mode sharded --trainers 2 --servers 0 --iters 20 --checkpoint-every 10 --checkpoint-dir %s", root);
    char dir[4096], path[4200];
    ckpt_dir_path(dir, sizeof dir, root, 10);
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    size_t len;
    char *text = dist_test_slurp(path, &len);
    ASSERT_TRUE(text != NULL);
    char *f = strstr(text, "file trainer-0.bin "), *e = strstr(text, "\nend ");
    ASSERT_TRUE(f && e);
    FILE *w = fopen(path, "wb");
    ASSERT_TRUE(w != NULL);
    // 2^56 rows of 4 floats (adagrad: 4 more) with their keys: whole rows, 2^62 bytes of keys
    fprintf(w, "%.*sfile trainer-0.bin %llu", (int)(f - text), text, 40ull << 56);
    const char *rest = strchr(f + 19, ' ');
    fprintf(w, "%.*s\n", (int)(e - rest), rest);
    fclose(w);
    free(text);
    text = dist_test_slurp(path, &len);
    w = fopen(path, "ab");
    fprintf(w, "end %08x\n", bp_crc32(0, text, len));
    fclose(w);
    free(text);
    char *out = NULL;
    int rc = test_run(&out, 60, "%s eval --load %s %s", test_bin(), dir, data_path);
    ASSERT_MSG(rc == 1, "eval exited %d:\n%s", rc, out ? out : "");
    ASSERT_STR_CONTAINS(out, "trainer-0.bin: 46880 bytes, the manifest says 2882303761517117440 (truncated or replaced)");
    free(out);
}

// A model whose last update left a NaN or infinity in it (the loss, computed before each update,
// is finite) is neither checkpointed nor evaluated and saved at a run's end: the checkpoint
// directory begun for it is removed, and the error names the part and the value.
TEST(ckpt_a_model_that_is_not_finite_is_not_checkpointed) {
    model_config mc;
    ASSERT_OK(model_config_parse(&mc, "--model wdl --arch-sparse-feature-size 4", 3, 2));
    uint64_t card[2] = {10, 20};
    emb_opt eopt = emb_opt_make(EMB_OPT_ADAGRAD, 0.1f, mc.E);
    dense_opt dopt = dense_opt_make(DENSE_OPT_SGD, 0.1f);
    emb_layout_cfg lc = {.F = 2, .card = card, .D = mc.D, .E = mc.E, .S = emb_opt_state_floats(&eopt), .seed = 1};
    trainer tr;
    ASSERT_OK(trainer_init(&tr, &mc, &lc, &dopt, &eopt, 8, 0));
    ASSERT_OK(trainer_check_finite(&tr, 5));
    train_setup su;
    memset(&su, 0, sizeof su);
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("ckf"));
    ASSERT_TRUE(mkdir(root, 0755) == 0);
    su.ck.dir = root, su.ck.keep = 2;
    const size_t table_n = (size_t)emb_layout_bytes(&tr.L) / sizeof(float);
    for (int k = 0; k < 2; k++) {
        float *at = k == 0 ? &tr.m.params[3] : &tr.table.data[table_n - 1];
        const float was = *at;
        *at = k == 0 ? NAN : -INFINITY;
        int rc = trainer_check_finite(&tr, 5);
        ASSERT_TRUE(rc != 0);
        ASSERT_STR_CONTAINS(bp_errmsg(rc), k == 0 ? "after iteration 5 the model is not finite (dense parameter 3 of "
                                                  : "after iteration 5 the model is not finite (embedding table value ");
        ASSERT_STR_CONTAINS(bp_errmsg(rc), k == 0 ? " is NaN): the last update diverged; lower --learning-rate"
                                                  : " is -infinite): the last update diverged");
        rc = ckpt_run_write_all(&tr, &su, 5, 0);
        ASSERT_TRUE(rc != 0);
        ASSERT_STR_CONTAINS(bp_errmsg(rc), k == 0 ? "ckpt-000000000005/dense.bin: value 3 of "
                                                  : "ckpt-000000000005/emb.bin: value ");
        ASSERT_STR_CONTAINS(bp_errmsg(rc), "the model is not finite (its last update diverged; lower --learning-rate), "
                                           "and is not checkpointed");
        ASSERT_EQ(test_run(NULL, 10, "test -z \"$(ls -A %s)\"", root), 0); // the begun checkpoint is gone
        // it stops the run whatever --on-checkpoint-error says (going on would train a diverged model)
        su.ck.on_error = CKPT_ON_ERROR_CONTINUE;
        ckpt_sched cks;
        ckpt_sched_init(&cks, &su.ck);
        rc = ckpt_sched_done(&cks, &su, 5, rc, 0.0, NULL);
        ASSERT_TRUE(rc != 0);
        ASSERT_STR_CONTAINS(bp_errmsg(rc), "checkpoint at iteration 5 failed: ");
        ASSERT_STR_CONTAINS(bp_errmsg(rc), "and is not checkpointed; stopping");
        ASSERT_TRUE(strstr(bp_errmsg(rc), "--on-checkpoint-error") == NULL);
        *at = was;
    }
    trainer_free(&tr);
}
