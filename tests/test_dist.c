// Multi-rank tests of the distributed runtime (mode sync): bit-identity with the local trainer,
// reproducibility, optimizer state on the servers, wrong rank counts, dead ranks, bad input.
// Every job is started through the binary (it launches mpirun itself) under a timeout.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "data_bin.h"
#include "msg.h"
#include "dist_util.h"
#include "role_loop.h"
#include "test.h"

#define OMPI_ENV "%s"
#define TINY_MODEL                                                                                   \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 24 "         \
    "--learning-rate 0.05 --print-every 100 --eval-rows 200"

static int write_dataset(const char *path, uint64_t n, uint64_t seed) { return dist_test_dataset(path, n, seed, 7); }

// Trains and saves to DIR; returns the exit code and the output in *out (caller frees).
static int train(char **out, const char *data, const char *dir, const char *mode_args, const char *extra) {
    return test_run(out, 60, OMPI_ENV " %s train %s " TINY_MODEL " %s --save %s %s", dist_test_env(), test_bin(), mode_args, extra,
                    dir, data);
}

#define TRAIN_OK(data, dir, mode, extra)                                                          \
    do {                                                                                          \
        char *o_ = NULL;                                                                          \
        int rc_ = train(&o_, data, dir, mode, extra);                                             \
        if (rc_ != 0) {                                                                           \
            test_fail(__FILE__, __LINE__, "train %s exited %d:\n%s", mode, rc_, o_ ? o_ : "");    \
            free(o_);                                                                             \
            return;                                                                               \
        }                                                                                         \
        free(o_);                                                                                 \
    } while (0)

TEST(dist_msg_decode_validates) {
    // A well-formed push round-trips; truncation, wrong kind, unsorted keys, keys of another
    // server and out-of-range keys are refused.
    uint64_t buf[64] = {0};
    msg_header h = {MSG_GRAD_PUSH, 0, 5, 3, 2};
    uint64_t *k;
    float *r;
    msg_encode(buf, &h, &k, &r);
    uint64_t keys[3];
    int n = 0;
    for (uint64_t key = 0; n < 3; key++)
        if (msg_server_of(key, 2) == 1) keys[n++] = key;
    memcpy(k, keys, sizeof keys);
    for (int i = 0; i < 6; i++) r[i] = (float)i;
    size_t len = msg_bytes(MSG_GRAD_PUSH, 3, 2);
    msg_expect ex = {.kind = MSG_GRAD_PUSH, .width = 2, .max_n = 10, .iter = 5, .rows = 1000, .server = 1, .S = 2};
    msg_header g;
    const uint64_t *gk;
    const float *gr;
    ASSERT_OK(msg_decode(buf, len, 3, &ex, &g, &gk, &gr));
    ASSERT_EQ(g.n, 3);
    ASSERT_EQ(gk[2], keys[2]);
    ASSERT_TRUE(gr[5] == 5.0f);
    ASSERT_EQ(msg_decode(buf, len - 4, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    ASSERT_EQ(msg_decode(buf, 10, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    msg_expect ex2 = ex;
    ex2.iter = 6;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.kind = MSG_ROW_REQ;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.server = 0;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.rows = keys[2];
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.max_n = 2;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    k[1] = k[2];
    ASSERT_EQ(msg_decode(buf, len, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EFORMAT), "rank 3");
}

// (a) T = 1, S = 1 gives the local trainer's model bit for bit.
// The key directory of the servers' and trainers' row sets (role_loop.h) against a binary search,
// for every key of small key spaces and beyond them: hashed shards (as servers and sharded
// trainers hold), clustered sets (static's hottest rows), empty, full and one-key sets.
static int64_t bsearch_key(const uint64_t *keys, uint64_t n, uint64_t key) {
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && keys[lo] == key ? (int64_t)lo : -1;
}

// A message beyond what one MPI message carries (INT32_MAX bytes) is an error naming its size
// and kind, not an assertion; the check comes before MPI is touched.
TEST(comm_oversized_message_is_an_error) {
    comm_req r;
    size_t big = (size_t)INT32_MAX + 1;
    ASSERT_EQ(comm_isend(NULL, big, 1, MSG_FETCH_REPLY, &r), BP_ECAPACITY);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECAPACITY), "2147483648 bytes (rank 1 to take FETCH_REPLY)");
    ASSERT_EQ(comm_irecv(NULL, big, 2, MSG_PLAN, &r), BP_ECAPACITY);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_ECAPACITY), "(PLAN from rank 2)");
    ASSERT_EQ(comm_isend(NULL, (size_t)3 << 31, 0, MSG_GSYNC, &r), BP_ECAPACITY);
}

TEST(role_keydir_matches_binary_search) {
    const uint64_t Ks[] = {1, 7, 64, 1000, 100003};
    const int parts[] = {1, 2, 3, 8, 64};
    uint64_t *keys = malloc(100003 * sizeof *keys);
    for (size_t a = 0; a < sizeof Ks / sizeof *Ks; a++)
        for (size_t b = 0; b < sizeof parts / sizeof *parts; b++)
            for (int kind = 0; kind < 5; kind++) {
                const uint64_t K = Ks[a];
                const int P = parts[b];
                uint64_t n = 0;
                for (uint64_t k = 0; k < K; k++) {
                    int in = kind == 0   ? msg_server_of(k, P) == (uint32_t)(P - 1) // a hashed shard
                             : kind == 1 ? k % (K / 3 + 1) < (K / 3 + 1) / 10 + 1   // three clustered runs
                             : kind == 2 ? 0                                         // empty
                             : kind == 3 ? 1                                         // every key
                                         : k == K - 1;                               // the last key only
                    if (in) keys[n++] = k;
                }
                role_keydir d;
                role_keydir_init(&d, keys, n, K, P);
                uint64_t bad = 0;
                for (uint64_t k = 0; k < K + 100; k++) bad += role_keydir_find(&d, keys, k) != bsearch_key(keys, n, k);
                bad += role_keydir_find(&d, keys, UINT64_MAX >> 1) != -1;
                if (kind == 1 || kind == 3) { // a bucket holds at most 2^shift keys
                    for (uint64_t i = 0; i < d.n_dir; i++) bad += d.first[i + 1] - d.first[i] > ((uint64_t)1 << d.shift);
                }
                role_keydir_free(&d);
                if (bad) {
                    free(keys);
                    test_fail(__FILE__, __LINE__, "K %llu, parts %d, kind %d: %llu keys found wrong", (unsigned long long)K,
                              P, kind, (unsigned long long)bad);
                    return;
                }
            }
    free(keys);
}

TEST(dist_sync_t1_matches_local) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 3000, 1));
    char *lout = NULL;
    int rc = train(&lout, data, test_path("local"), "--mode local", "--iters 300");
    ASSERT_MSG(rc == 0, "local exited %d:\n%s", rc, lout);
    const char *lval = strstr(lout, "val   AUC");
    ASSERT_TRUE(lval != NULL);
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(lval, "\n"), lval);
    free(lout);
    char *out = NULL;
    rc = test_run(&out, 60, OMPI_ENV " %s train --mode sync --trainers 1 --servers 1 " TINY_MODEL
                      " --iters 300 --save %s --metrics %s %s", dist_test_env(), test_bin(), test_path("sync"), test_path("m.jsonl"), data);
    ASSERT_MSG(rc == 0, "sync exited %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "layout: 3 ranks");
    ASSERT_STR_CONTAINS(out, line); // the same evaluation result line as local
    free(out);
    ASSERT_TRUE(dist_test_same_file(test_path("local"), test_path("sync"), "dense.bin"));
    ASSERT_TRUE(dist_test_same_file(test_path("local"), test_path("sync"), "emb.bin"));
    size_t len;
    char *m = dist_test_slurp(test_path("m.jsonl"), &len);
    ASSERT_TRUE(m != NULL);
    ASSERT_STR_CONTAINS(m, "\"event\":\"summary\"");
    ASSERT_STR_CONTAINS(m, "\"bytes_row_fetch\"");
    ASSERT_STR_CONTAINS(m, "\"wait_rows_s\"");
    free(m);
}

// (b) For a given T the model is the same for any S, and a run repeats bit for bit.
TEST(dist_sync_reproducible) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 3000, 2));
    TRAIN_OK(data, test_path("t2s1"), "--mode sync --trainers 2 --servers 1", "--iters 150 --no-eval");
    TRAIN_OK(data, test_path("t2s2"), "--mode sync --trainers 2 --servers 2", "--iters 150 --no-eval");
    ASSERT_TRUE(dist_test_same_file(test_path("t2s1"), test_path("t2s2"), "dense.bin"));
    ASSERT_TRUE(dist_test_same_file(test_path("t2s1"), test_path("t2s2"), "emb.bin"));
    TRAIN_OK(data, test_path("t3a"), "--mode sync --trainers 3 --servers 2", "--iters 150 --no-eval");
    TRAIN_OK(data, test_path("t3b"), "--mode sync --trainers 3 --servers 2", "--iters 150 --no-eval");
    ASSERT_TRUE(dist_test_same_file(test_path("t3a"), test_path("t3b"), "dense.bin"));
    ASSERT_TRUE(dist_test_same_file(test_path("t3a"), test_path("t3b"), "emb.bin"));
    // A different T sums in a different order (and trains at all): the tables differ.
    ASSERT_TRUE(!dist_test_same_file(test_path("t2s1"), test_path("t3a"), "emb.bin"));
}

// (c) Adagrad and row-wise Adagrad keep their state inside the server's rows: T = 1 matches
// local (state included in emb.bin), and T = 2 gives the same model with 1 or 2 servers.
static void check_emb_optimizer(const char *opt) {
    char data[512], extra[128];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 3));
    snprintf(extra, sizeof extra, "--emb-optimizer %s --iters 120 --no-eval", opt);
    TRAIN_OK(data, test_path("local"), "--mode local", extra);
    TRAIN_OK(data, test_path("t1"), "--mode sync --trainers 1 --servers 1", extra);
    ASSERT_TRUE(dist_test_same_file(test_path("local"), test_path("t1"), "dense.bin"));
    ASSERT_TRUE(dist_test_same_file(test_path("local"), test_path("t1"), "emb.bin"));
    TRAIN_OK(data, test_path("t2s1"), "--mode sync --trainers 2 --servers 1", extra);
    TRAIN_OK(data, test_path("t2s2"), "--mode sync --trainers 2 --servers 2", extra);
    ASSERT_TRUE(dist_test_same_file(test_path("t2s1"), test_path("t2s2"), "dense.bin"));
    ASSERT_TRUE(dist_test_same_file(test_path("t2s1"), test_path("t2s2"), "emb.bin"));
    ASSERT_TRUE(!dist_test_same_file(test_path("t1"), test_path("t2s1"), "emb.bin"));
}

TEST(dist_sync_adagrad_state_on_servers) { check_emb_optimizer("adagrad"); }
TEST(dist_sync_rowwise_adagrad_state_on_servers) { check_emb_optimizer("rowwise-adagrad"); }

// (d) Under mpirun with the wrong number of ranks every rank says what is needed; no hang.
TEST(dist_wrong_rank_count) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 500, 4));
    char *out = NULL;
    int rc = test_run(&out, 30, OMPI_ENV " mpirun -np 3 --oversubscribe %s train --mode sync --trainers 2 --servers 1 "
                      TINY_MODEL " --iters 5 %s", dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
    const char *msg = "this job has 3 ranks, but --servers 1 --trainers 2 needs 1 + 1 + 2 = 4";
    ASSERT_MSG(dist_test_said_once(out, msg), "not said once:\n%s", out); // (each rank said it)
    free(out);
}

// (f) A dataset that cannot be read: one clear message from the job, no hang.
TEST(dist_unreadable_dataset) {
    const char *bad = test_path("bad.bin");
    FILE *f = fopen(bad, "w");
    ASSERT_TRUE(f != NULL);
    fputs("this is not a dataset\n", f);
    fclose(f);
    char *out = NULL;
    int rc = test_run(&out, 30, OMPI_ENV " %s train --mode sync --trainers 2 --servers 1 " TINY_MODEL " %s",
                      dist_test_env(), test_bin(), bad);
    ASSERT_MSG(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "bad.bin: not a bagpipe binary dataset");
    free(out);
    rc = test_run(&out, 30, OMPI_ENV " %s train --mode sync --trainers 1 --servers 2 " TINY_MODEL " %s",
                  dist_test_env(), test_bin(), test_path("missing.bin"));
    ASSERT_MSG(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "missing.bin");
    free(out);
}

// The pid of the process that is rank `rank` of an MPI job whose command line mentions `tag`.
static pid_t find_rank(int rank, const char *tag) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    char want[64];
    int wl = snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    pid_t found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char p[64];
        size_t len;
        snprintf(p, sizeof p, "/proc/%ld/cmdline", pid);
        char *cmd = dist_test_slurp(p, &len);
        int match = 0;
        if (cmd) {
            for (size_t i = 0; i + 1 < len; i++)
                if (!cmd[i]) cmd[i] = ' ';
            match = strstr(cmd, tag) && strstr(cmd, "train");
            free(cmd);
        }
        if (!match) continue;
        snprintf(p, sizeof p, "/proc/%ld/environ", pid);
        char *env = dist_test_slurp(p, &len);
        for (size_t i = 0; env && i < len; i += strlen(env + i) + 1)
            if (strncmp(env + i, want, (size_t)wl) == 0 && env[i + wl] == 0) found = (pid_t)pid;
        free(env);
    }
    closedir(d);
    return found;
}

// find_rank, polled every 0.1 s for up to 30 s while the job starts: the pid, or -1.
static pid_t await_rank(int rank, const char *tag) {
    pid_t pid = -1;
    for (double t0 = bp_now(); pid < 0 && bp_now() - t0 < 30;) {
        usleep(100000);
        pid = find_rank(rank, tag);
    }
    return pid;
}

// (e) kill -9 of one rank mid-run: the job ends within seconds, non-zero, naming rank and role.
// With SIGSTOP the rank stays alive but silent: the others' stall timeout (3 s here) ends the job,
// naming what they waited for: the silent rank itself where another rank waits for it by name
// (it used to be the oracle, waiting for the credits of a trainer that waited for the silent
// rank, that named that trainer).
static void check_signal_named(int rank, const char *role, int sig, const char *layout, int named) {
    char data[512], outp[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "exec timeout -k 5 60 env " OMPI_ENV " %s train %s " TINY_MODEL
             " --iters 1000000 --no-eval %s %s > %s 2>&1",
             dist_test_env(), test_bin(), layout, sig == SIGSTOP ? "--stall-timeout 3" : "", data, outp);
    pid_t job = fork();
    ASSERT_TRUE(job >= 0);
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    pid_t victim = await_rank(rank, data);
    if (victim < 0) kill(job, SIGKILL);
    ASSERT_MSG(victim > 0, "rank %d never appeared", rank);
    usleep(1500000); // let it train
    int st = 0;
    ASSERT_MSG(waitpid(job, &st, WNOHANG) == 0, "the job ended before the kill");
    ASSERT_EQ(kill(victim, sig), 0);
    double tk = bp_now();
    waitpid(job, &st, 0);
    double dt = bp_now() - tk;
    if (sig != SIGKILL) kill(victim, SIGKILL); // normally gone with the job already
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 124, "status %d:\n%s", st, out);
    // a rank killed: exit 1, as any failed job (mpirun's 137 read as the launcher itself killed)
    ASSERT_MSG(sig != SIGKILL || WEXITSTATUS(st) == 1, "exit %d for a killed rank:\n%s", WEXITSTATUS(st), out);
    ASSERT_MSG(dt < (sig == SIGSTOP ? 20 : 10), "the job took %.1f s to end after signal %d", dt, sig);
    char want[96];
    if (sig == SIGSTOP) snprintf(want, sizeof want, "with no progress (--stall-timeout 3): a peer is stopped");
    else snprintf(want, sizeof want, "rank %d (%s) was killed by signal 9", rank, role);
    ASSERT_STR_CONTAINS(out, want);
    if (named) {
        char from[32], take[32];
        snprintf(from, sizeof from, "from rank %d ", rank);
        snprintf(take, sizeof take, "for rank %d to take ", rank);
        ASSERT_MSG(strstr(out, from) || strstr(out, take), "rank %d (%s) not named:\n%s", rank, role, out);
    }
    free(out);
}
static void check_signal(int rank, const char *role, int sig, const char *layout) {
    check_signal_named(rank, role, sig, layout, 0);
}

#define SYNC_T2S2 "--mode sync --trainers 2 --servers 2"
TEST(dist_kill_oracle) { check_signal(0, "oracle", SIGKILL, SYNC_T2S2); }
TEST(dist_kill_server) { check_signal(2, "server 1", SIGKILL, SYNC_T2S2); }
TEST(dist_kill_trainer) { check_signal(3, "trainer 0", SIGKILL, SYNC_T2S2); }
TEST(dist_stop_trainer_stall_timeout) { check_signal_named(3, "trainer 0", SIGSTOP, SYNC_T2S2, 1); }
TEST(dist_stop_server_stall_timeout) { check_signal_named(2, "server 1", SIGSTOP, SYNC_T2S2, 1); }
// The only trainer: the servers, waiting for any message, are the ones to notice.
TEST(dist_stop_only_trainer_stall_timeout) { check_signal(3, "trainer 0", SIGSTOP, "--mode sync --trainers 1 --servers 2"); }
TEST(dist_stop_bagpipe_oracle_stall_timeout) {
    check_signal_named(0, "oracle", SIGSTOP, "--mode bagpipe --trainers 2 --servers 2", 1);
}
TEST(dist_stop_bagpipe_server_stall_timeout) {
    check_signal_named(1, "server 0", SIGSTOP, "--mode bagpipe --trainers 2 --servers 2", 1);
}
TEST(dist_stop_bagpipe_trainer_stall_timeout) {
    check_signal_named(4, "trainer 1", SIGSTOP, "--mode bagpipe --trainers 2 --servers 2", 1);
}

// The coordinator (rank 0) is idle through a run outside mode bagpipe: stopped once the job has
// started, nobody missed it until the final barrier, untimed, which then waited for it for ever
// after the model was saved.  The end's handshake with trainer 0 names it within the stall
// timeout; the model saved before is whole, and the job, its results written, is done (exit 0,
// with a warning naming the rank: it used to exit 1 and suggest a resume that redoes nothing).
TEST(dist_stop_idle_coordinator_stall_timeout) {
    char data[512], outp[512], piddir[512], mdir[512], cmd[4096];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    snprintf(piddir, sizeof piddir, "%s", test_path("pids"));
    snprintf(mdir, sizeof mdir, "%s", test_path("m"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    ASSERT_EQ(mkdir(piddir, 0755), 0);
    snprintf(cmd, sizeof cmd,
             "exec timeout -k 5 40 env BAGPIPE_TEST_PID_DIR=%s " OMPI_ENV " %s train %s " TINY_MODEL
             " --iters 3000 --no-eval --stall-timeout 3 --save %s " SYNC_T2S2 " > %s 2>&1",
             piddir, dist_test_env(), test_bin(), data, mdir, outp);
    pid_t job = fork();
    ASSERT_TRUE(job >= 0);
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    // rank 0 prints the layout once every rank has agreed to start
    char pidf[600];
    snprintf(pidf, sizeof pidf, "%s/rank-0.pid", piddir);
    pid_t victim = -1;
    for (double t0 = bp_now(); victim < 0 && bp_now() - t0 < 30; usleep(20000)) {
        size_t len;
        char *o = dist_test_slurp(outp, &len), *p = dist_test_slurp(pidf, &len);
        if (o && p && strstr(o, "layout:")) victim = (pid_t)atol(p);
        free(o), free(p);
    }
    if (victim <= 0) kill(job, SIGKILL);
    ASSERT_MSG(victim > 0, "the job never started");
    ASSERT_EQ(kill(victim, SIGSTOP), 0);
    int st = 0;
    waitpid(job, &st, 0);
    kill(victim, SIGKILL); // normally gone with the job already
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "waited 3 s for END from rank 0 with no progress (--stall-timeout 3)");
    ASSERT_STR_CONTAINS(out, "saved model to");
    ASSERT_STR_CONTAINS(out, "failed at the job's end, after its results were written (the summary and any --save "
                             "are complete): the job is done");
    free(out);
    char *ev = NULL;
    int rc = test_run(&ev, 60, "%s eval --load %s %s", test_bin(), mdir, data);
    ASSERT_MSG(rc == 0, "eval of the saved model exited %d:\n%s", rc, ev);
    free(ev);
}

// Trainer 0 silent after its part (as if stopped while saving) in mode sharded, where no server
// waits for its DONE: trainer 1 names it after 2 S (it used to wait in the final barrier for
// ever).  The test hook stops the rank where its part of the run is over.
TEST(dist_stop_writer_at_end_sharded_stall_timeout) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    char *out = NULL;
    double t0 = bp_now();
    int rc = test_run(&out, 40, "BAGPIPE_TEST_STOP_AT_END=1 " OMPI_ENV " %s train %s " TINY_MODEL
                      " --iters 200 --no-eval --stall-timeout 3 --mode sharded --trainers 2", dist_test_env(),
                      test_bin(), data);
    ASSERT_MSG(rc == 0, "exit %d after %.1f s:\n%s", rc, bp_now() - t0, out); // its results were written
    ASSERT_STR_CONTAINS(out, "rank 2 (trainer 1): comm: rank 2: waited 6 s for END from rank 1 with no progress");
    ASSERT_STR_CONTAINS(out, "after its results were written");
    free(out);
}

// Mode sharded with one trainer: the idle coordinator is the only other rank, so a silent trainer
// was missed by everyone, mid-run or at its end, and the job waited for ever.  The trainer's
// sign of life (END(3) every S / 2) lets the coordinator name it within 2 S either way.
TEST(dist_stop_lone_sharded_trainer_stall_timeout) {
    check_signal_named(1, "trainer 0", SIGSTOP, "--mode sharded --trainers 1", 1);
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    char *out = NULL;
    double t0 = bp_now();
    int rc = test_run(&out, 40, "BAGPIPE_TEST_STOP_AT_END=1 " OMPI_ENV " %s train %s " TINY_MODEL
                      " --iters 200 --no-eval --stall-timeout 3 --mode sharded --trainers 1", dist_test_env(),
                      test_bin(), data);
    ASSERT_MSG(rc == 0, "exit %d after %.1f s:\n%s", rc, bp_now() - t0, out); // its results were written
    ASSERT_STR_CONTAINS(out, "rank 0 (oracle): comm: rank 0: waited 6 s for END from rank 1 with no progress");
    ASSERT_STR_CONTAINS(out, "after its results were written");
    free(out);
    // Alive, it is not named: a run of several stall timeouts (300000 iterations of the tiny model,
    // 3-4 s on a quiet machine) with evaluations; the coordinator receives END(3) throughout.
    out = NULL;
    t0 = bp_now();
    rc = test_run(&out, 60, OMPI_ENV " %s train %s " TINY_MODEL " --iters 300000 --eval-every 100000 --eval-rows 500 "
                  "--stall-timeout 1 --mode sharded --trainers 1", dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out);
    ASSERT_MSG(bp_now() - t0 > 2, "the run took %.1f s, under 2 stall timeouts: it shows nothing", bp_now() - t0);
    free(out);
}

// A rank silent before the start (stopped while it opens the dataset or verifies the checkpoint it
// resumes from): rank 0, gathering the ranks' setup results, names it within S; a silent rank 0
// is named by the others within 2 S.  The all-gather that agreed on the start used to wait for
// it for ever.  The test hook stops the rank where it would report its setup.
TEST(dist_stop_at_start_stall_timeout) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    static const struct {
        int rank;
        const char *msg;
    } cases[] = {
        {4, "bagpipe: rank 0 (oracle): comm: rank 0: waited 3 s for START from rank 4 with no progress"},
        {0, "waited 6 s for START from rank 0 with no progress"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        char *out = NULL;
        int rc = test_run(&out, 40, "BAGPIPE_TEST_STOP_AT_START=%d " OMPI_ENV " %s train %s " TINY_MODEL
                          " --iters 200 --no-eval --stall-timeout 3 " SYNC_T2S2, cases[i].rank, dist_test_env(),
                          test_bin(), data);
        ASSERT_MSG(rc == 1, "rank %d stopped: exit %d:\n%s", cases[i].rank, rc, out);
        ASSERT_STR_CONTAINS(out, cases[i].msg);
        free(out);
    }
}

// A trainer stopped after its gradient exchange, before its push (BAGPIPE_TEST_STOP_BEFORE_PUSH:
// trainer 0 at iteration 50): the servers hold trainer 1's next request until that push comes, so
// trainer 1's wait for its rows used to time out first and name a server.  The servers now wait
// for the missing push by name, before the trainers give up on them (COMM_STALL_SERVER).  The
// first stall reported must be that push, and the job's failure must be a server's.  Trainer 1
// may still report its own wait 0.75 s later when the servers' abort takes longer than that to
// reach it (5 ranks on 2 loaded cores: seen once in CI), so its later line is allowed.
TEST(dist_stop_before_push_names_the_trainer) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    char *out = NULL;
    int rc = test_run(&out, 40, "BAGPIPE_TEST_STOP_BEFORE_PUSH=50 " OMPI_ENV " %s train %s " TINY_MODEL
                      " --iters 200 --no-eval --stall-timeout 3 " SYNC_T2S2, dist_test_env(), test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    const char *push = strstr(out, "waited 3 s for GRAD_PUSH from rank 3 (trainer 0) of iteration 50, which held "
                              "requests wait for");
    ASSERT_MSG(push, "the trainer's push was not named:\n%s", out);
    ASSERT_MSG(strstr(out, "waited ") == push, "a stall before the trainer's push was reported first:\n%s", out);
    ASSERT_MSG(!strstr(out, "job failed: rank 3") && !strstr(out, "job failed: rank 4"),
               "the job's failure is not a server's:\n%s", out);
    free(out);
}

// Starts a long sync job (T = 2, S = 2) on data as a child, its output to outp, with SIGINT ignored
// or not (a background job of a script ignores it) and, with `group`, in a process group of its
// own; lets it train for a second once rank 4 is up.  Returns the launcher's pid, or -1 (the job
// killed) when no rank came up.
// Runs cmd under sh in a child, with SIGINT ignored if int_ignored, in a process group of its
// own if group.  Returns the child's pid, or -1.
static pid_t spawn_sh(const char *cmd, int int_ignored, int group) {
    pid_t job = fork();
    if (job < 0) return -1;
    if (job == 0) {
        signal(SIGINT, int_ignored ? SIG_IGN : SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (group) setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return job;
}

static pid_t start_long_job(const char *data, const char *outp, int int_ignored, int group) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec env " OMPI_ENV " %s train %s " TINY_MODEL " --iters 1000000 --no-eval " SYNC_T2S2
             " > %s 2>&1", dist_test_env(), test_bin(), data, outp);
    pid_t job = spawn_sh(cmd, int_ignored, group);
    if (job < 0) return -1;
    if (await_rank(4, data) < 0) {
        kill(job, SIGKILL), waitpid(job, NULL, 0);
        return -1;
    }
    usleep(1000000); // let it train
    return job;
}

// Ctrl-C (SIGINT) or kill -TERM of the launcher: it forwards the signal to mpirun, which stops
// every rank; the launcher then says the job was interrupted and dies by that signal, as a
// single process does (it used to print "job failed: mpirun exited with code 1" and exit 1, as if
// a rank had failed).  With SIGINT ignored when the launcher starts (a background job of a
// script), a SIGINT changes nothing and the job trains on until the SIGTERM.  `group`: the
// signal goes to the launcher's whole process group, as a terminal's Ctrl-C or `timeout` sends
// it (mpirun used to get it twice, directly and forwarded, and Open MPI took the second one as
// "exit without waiting for the ranks", which trained on for a second or more after the
// launcher had said the job was stopped; with one signal mpirun still exits before its ranks,
// which the launcher now ends itself).  When the launcher has ended, no rank is left.
static void check_interrupt(int sig, int int_ignored, int group) {
    char data[512], outp[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    pid_t job = start_long_job(data, outp, int_ignored, group);
    ASSERT_MSG(job > 0, "the job never started");
    if (int_ignored) {
        ASSERT_EQ(kill(job, SIGINT), 0);
        usleep(1500000);
        const int gone = waitpid(job, NULL, WNOHANG) != 0;
        if (gone || find_rank(4, data) < 0) kill(job, SIGKILL), waitpid(job, NULL, 0);
        ASSERT_MSG(!gone, "a SIGINT the launcher was started with ignored stopped the job");
        ASSERT_MSG(find_rank(4, data) > 0, "a rank stopped after an ignored SIGINT");
    }
    ASSERT_EQ(kill(group ? -job : job, sig), 0);
    int st = 0;
    double t0 = bp_now();
    while (waitpid(job, &st, WNOHANG) == 0 && bp_now() - t0 < 20) usleep(50000);
    const int ended = bp_now() - t0 < 20;
    if (!ended) kill(job, SIGKILL), waitpid(job, &st, 0);
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(ended, "the job went on for 20 s after signal %d:\n%s", sig, out);
    ASSERT_MSG(WIFSIGNALED(st) && WTERMSIG(st) == sig, "status %d (expected death by signal %d):\n%s", st, sig, out);
    char want[64];
    snprintf(want, sizeof want, "bagpipe: interrupted by signal %d", sig);
    ASSERT_STR_CONTAINS(out, want);
    ASSERT_MSG(!strstr(out, "job failed"), "an interrupted job reported as failed:\n%s", out);
    free(out);
    for (int r = 0; r < 5; r++) {
        pid_t left = find_rank(r, data);
        if (left > 0) kill(left, SIGKILL);
        ASSERT_MSG(left < 0, "rank %d outlived the interrupted job", r);
    }
}
// kill -9 of the launcher: it cannot stop the job itself.  mpirun (PR_SET_PDEATHSIG) takes a second
// or more to end the ranks, and they used to train on meanwhile, writing metrics and checkpoints
// that a prompt --resume then raced with (it failed or hung on ranks that had picked different
// checkpoints); each rank now watches the launcher (a pidfd) and stops within milliseconds.
TEST(dist_kill_launcher_ends_the_ranks) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    pid_t job = start_long_job(data, "/dev/null", 0, 0);
    ASSERT_MSG(job > 0, "the job never started");
    ASSERT_EQ(kill(job, SIGKILL), 0);
    waitpid(job, NULL, 0);
    double t0 = bp_now(), gone_after = -1;
    while (bp_now() - t0 < 10 && gone_after < 0) {
        int alive = 0;
        for (int r = 0; r < 5; r++) alive += find_rank(r, data) > 0;
        if (!alive) gone_after = bp_now() - t0;
        else usleep(20000);
    }
    for (int r = 0; r < 5; r++) {
        pid_t left = find_rank(r, data);
        if (left > 0) kill(left, SIGKILL);
    }
    ASSERT_MSG(gone_after >= 0 && gone_after < 0.5, "the ranks outlived the launcher by %.2f s", gone_after);
}

// A Ctrl-C that comes once the job has finished (its model saved, every rank past the end of
// the job) stops nothing: the launcher says so and succeeds.  It used to report the job as
// interrupted and die by the signal, though the model was saved.  The hook stops the writer
// right after it has told the launcher (a line on stderr that the launcher keeps to itself).
TEST(dist_interrupt_after_the_job_is_done_succeeds) {
    char data[512], outp[512], saved[512], cmd[4096];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    snprintf(saved, sizeof saved, "%s", test_path("saved"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    snprintf(cmd, sizeof cmd,
             "exec env BAGPIPE_TEST_STOP_AFTER_DONE=1 " OMPI_ENV " %s train %s " TINY_MODEL " --iters 20 --no-eval "
             SYNC_T2S2 " --save %s > %s 2>&1", dist_test_env(), test_bin(), data, saved, outp);
    pid_t job = spawn_sh(cmd, 0, 0), stopped = -1;
    ASSERT_MSG(job > 0, "cannot start the job");
    for (double t0 = bp_now(); stopped < 0 && bp_now() - t0 < 60 && waitpid(job, NULL, WNOHANG) == 0;) {
        for (int r = 0; r < 5 && stopped < 0; r++) {
            pid_t pid = find_rank(r, data);
            char p[64], *stat;
            size_t len;
            snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
            if (pid > 0 && (stat = dist_test_slurp(p, &len))) {
                const char *paren = strrchr(stat, ')');
                if (paren && paren[1] == ' ' && paren[2] == 'T') stopped = pid;
                free(stat);
            }
        }
        if (stopped < 0) usleep(50000);
    }
    if (stopped < 0) kill(job, SIGKILL);
    else ASSERT_EQ(kill(job, SIGINT), 0);
    int st = 0;
    waitpid(job, &st, 0);
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(stopped > 0, "the writer never stopped after reporting the job done:\n%s", out);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d (expected success):\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: signal 2 (Interrupt) came after the job had finished: its results are written");
    ASSERT_MSG(!strstr(out, "interrupted") && !strstr(out, "launch: job done"), "output:\n%s", out);
    ASSERT_STR_CONTAINS(out, "saved model to");
    free(out);
    char manifest[600];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", saved);
    ASSERT_MSG(access(manifest, F_OK) == 0, "no saved model in %s", saved);
    for (int r = 0; r < 5; r++) {
        pid_t left = find_rank(r, data);
        if (left > 0) kill(left, SIGKILL);
        ASSERT_MSG(left < 0, "rank %d outlived the job", r);
    }
}

TEST(dist_interrupt_launcher_sigint) { check_interrupt(SIGINT, 0, 0); }
TEST(dist_interrupt_launcher_sigterm) { check_interrupt(SIGTERM, 0, 0); }
TEST(dist_interrupt_launcher_sigint_ignored) { check_interrupt(SIGTERM, 1, 0); }
TEST(dist_interrupt_process_group_sigint) { check_interrupt(SIGINT, 0, 1); }
TEST(dist_interrupt_process_group_sigterm) { check_interrupt(SIGTERM, 0, 1); }

// An interrupted job that checkpoints names its newest checkpoint and the --resume that goes on
// from it, as a failed one does (it said only that the job was stopped).
TEST(dist_interrupt_names_the_newest_checkpoint) {
    char data[512], outp[512], ck[512], cmd[4096];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    snprintf(ck, sizeof ck, "%s", test_path("ck"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    snprintf(cmd, sizeof cmd, "exec env " OMPI_ENV " %s train %s " TINY_MODEL " --iters 1000000 --no-eval " SYNC_T2S2
             " --checkpoint-every 200 --checkpoint-dir %s > %s 2>&1", dist_test_env(), test_bin(), data, ck, outp);
    pid_t job = spawn_sh(cmd, 0, 0);
    ASSERT_MSG(job > 0, "cannot start the job");
    char man[600];
    snprintf(man, sizeof man, "%s/ckpt-000000000200/MANIFEST", ck);
    for (double t0 = bp_now(); bp_now() - t0 < 60 && access(man, F_OK) != 0 && waitpid(job, NULL, WNOHANG) == 0;)
        usleep(20000);
    ASSERT_EQ(kill(job, SIGINT), 0);
    int st = 0;
    double t0 = bp_now();
    while (waitpid(job, &st, WNOHANG) == 0 && bp_now() - t0 < 30) usleep(50000);
    if (bp_now() - t0 >= 30) kill(job, SIGKILL), waitpid(job, &st, 0);
    size_t len;
    char *out = dist_test_slurp(outp, &len);
    ASSERT_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "status %d:\n%s", st, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: interrupted by signal 2 (Interrupt): the job is stopped\nbagpipe: the newest "
                             "checkpoint is ");
    char want[700];
    snprintf(want, sizeof want, "): the same flags with --resume %s go on from it", ck);
    ASSERT_STR_CONTAINS(out, want);
    free(out);
}

// A fake mpirun, the shell script `script`, as <tmp>/bin/mpirun; the directory (to put first on
// PATH) into dir.  Returns 0, or -1 when it cannot be written.
static int write_fake_mpirun(char *dir, size_t cap, const char *script) {
    char fake[600];
    snprintf(dir, cap, "%s", test_path("bin"));
    snprintf(fake, sizeof fake, "%s/mpirun", dir);
    FILE *f = mkdir(dir, 0755) == 0 ? fopen(fake, "w") : NULL;
    if (!f) return -1;
    fputs(script, f);
    return fclose(f) == 0 && chmod(fake, 0755) == 0 ? 0 : -1;
}

// mpirun sometimes loses an aborting rank's report and prints an ORTE_ERROR_LOG line about its help
// message instead.  A fake mpirun, first on PATH, prints what such a run printed and fails: the
// launcher drops that line and names the rank that reported an error of its own.
TEST(dist_launcher_names_the_reporting_rank_when_mpirun_loses_its_report) {
    char data[512], dir[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    ASSERT_OK(write_fake_mpirun(dir, sizeof dir,
                                "#!/bin/sh\n"
                                "echo 'bagpipe: rank 2 (trainer 0): trainer 0: a planted error' >&2\n"
                                "echo '[vm:1] [[115,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer "
                                "in file ../../../orte/util/show_help.c at line 501' >&2\n"
                                "exit 1\n"));
    char *out = NULL;
    int rc = test_run(&out, 60, "PATH=%s:\"$PATH\" %s train --mode sync --trainers 2 --servers 1 " TINY_MODEL " %s", dir,
                      test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: rank 2 (trainer 0): trainer 0: a planted error");
    ASSERT_STR_CONTAINS(out, "bagpipe: job failed: rank 2 (trainer 0) stopped the job after an error (message above)");
    ASSERT_MSG(strstr(out, "ORTE_ERROR_LOG") == NULL, "mpirun's noise was passed on:\n%s", out);
    free(out);
}

// A rank that reads another file at the dataset's path (a stale copy on its host: the hook
// BAGPIPE_TEST_DATA_AS makes rank 3 read one of the same shape and other samples) used to train
// on it silently, mixing the two (or fail on a plan's keys in bagpipe).  The start-up agreement
// compares the datasets' checksums and refuses before training, naming the rank and its host.
TEST(dist_ranks_must_read_the_same_dataset) {
    char data[512], other[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(other, sizeof other, "%s", test_path("e.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    ASSERT_OK(write_dataset(other, 2000, 6));
    char *out = NULL;
    int rc = test_run(&out, 60, "BAGPIPE_TEST_DATA_AS=3:%s %s train --mode sync --trainers 2 --servers 1 " TINY_MODEL
                      " %s", other, test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, ": rank 3 (trainer 1, host ");
    ASSERT_STR_CONTAINS(out, ") reads another dataset at this path than rank 0 (host ");
    ASSERT_MSG(!strstr(out, "trained"), "it trained:\n%s", out);
    free(out);
}

// `mpirun -np 3 bagpipe train D` without --mode: each rank trained a copy of the job in mode local,
// all into the same --save and metrics.  Refused once, saying what to give instead.
TEST(dist_local_mode_under_several_ranks_is_refused) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    char *out = NULL;
    int rc = test_run(&out, 60, "%s mpirun --oversubscribe -np 3 %s train " TINY_MODEL " -m %s %s", dist_test_env(),
                      test_bin(), test_path("m.jsonl"), data);
    ASSERT_MSG(rc != 0, "exit %d:\n%s", rc, out);
    const char *msg = "bagpipe: --mode local (the default) runs in one process, and this launcher started 3: give the "
                      "distributed mode";
    ASSERT_MSG(dist_test_said_once(out, msg), "not said once:\n%s", out);
    ASSERT_MSG(!strstr(out, "trained"), "it trained:\n%s", out);
    free(out);
}

// Under the user's own mpirun every rank parses the command line: a mistake in it was printed once
// per rank.  Rank 0 says it and exits 2 (a usage error); the others leave with 0, so that none
// of their exits lets mpirun end rank 0 before its message.  Likewise a layout's limits.
TEST(dist_own_mpirun_flag_error_said_once) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    const char *cases[][2] = {
        {"--mode sync --trainers 2 --servers 1 --learning-rat 0.1", "unknown flag '--learning-rat'"},
        {"--mode sync --trainers 2 --servers 1 --cache-rows 100", "--cache-rows"},
        {"--mode sync --trainers 2 --servers 1 --learning-rate -1", "--learning-rate"},
        {"--mode sync --trainers 4 --servers 1 --batch-size 2", "more trainers than samples in a batch"},
        {"--mode sharded --trainers 2 --servers 2", "--mode sharded keeps the rows on the trainers"},
        {"--mode sync --trainers 2 --servers 0", "needs at least one server rank"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        char *out = NULL;
        int rc = test_run(&out, 60, "%s mpirun --oversubscribe -np 3 %s train " TINY_MODEL " %s %s", dist_test_env(),
                          test_bin(), cases[i][0], data);
        ASSERT_MSG(rc != 0, "%s: exit %d:\n%s", cases[i][0], rc, out);
        ASSERT_MSG(dist_test_said_once(out, cases[i][1]), "%s: not said once:\n%s", cases[i][0], out);
        ASSERT_MSG(!strstr(out, "memory plan"), "%s: it started:\n%s", cases[i][0], out);
        free(out);
    }
}

// Under the user's own mpirun, a rank that cannot start (here its dataset is missing on its host:
// the hook BAGPIPE_TEST_DATA_AS) is named with its role (mpirun names only a number), and the
// --checkpoint-dir the job made is removed again (rank 0, which made it, exits 0 so that mpirun
// names the failing rank, and used to keep it).
TEST(dist_own_mpirun_start_failure_names_the_rank_and_leaves_no_dir) {
    char data[512], ck[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(ck, sizeof ck, "%s", test_path("ckn"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    char *out = NULL;
    int rc = test_run(&out, 60, "%s BAGPIPE_TEST_DATA_AS=3:%s/none.bin mpirun --oversubscribe -np 4 %s train --mode sync "
                      "--trainers 2 --servers 1 " TINY_MODEL " --checkpoint-every 20 --checkpoint-dir %s %s",
                      dist_test_env(), test_tmpdir(), test_bin(), ck, data);
    ASSERT_MSG(rc != 0, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: rank 3 (trainer 1): ");
    ASSERT_STR_CONTAINS(out, "none.bin");
    free(out);
    struct stat st;
    ASSERT_MSG(stat(ck, &st) != 0, "the failed job left %s", ck);
}

// mpirun itself killed (the OOM killer, kill -9): the launcher says so and exits 1, as for any
// failed job (it used to print "mpirun exited with code 137" and exit 137, read as itself killed).
TEST(dist_launcher_reports_mpirun_killed) {
    char data[512], dir[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    ASSERT_OK(write_fake_mpirun(dir, sizeof dir, "#!/bin/sh\nkill -9 $$\n"));
    char *out = NULL;
    int rc = test_run(&out, 60, "PATH=%s:\"$PATH\" %s train --mode sync --trainers 2 --servers 1 " TINY_MODEL " %s", dir,
                      test_bin(), data);
    ASSERT_MSG(rc == 1, "exit %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: job failed: mpirun was killed by signal 9 (Killed)");
    free(out);
}

// mpirun can hang after the launcher forwards it a signal (seen under load: its ranks ended, never
// reaped), and the launcher waited on it for good.  A fake mpirun that ignores SIGINT and SIGTERM
// stands for it: the launcher kills it after the grace (here 1 s), and says so.
TEST(dist_launcher_kills_an_mpirun_that_hangs_after_a_signal) {
    char data[512], dir[512], outp[512], cmd[4096];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    snprintf(outp, sizeof outp, "%s", test_path("out.txt"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    ASSERT_OK(write_fake_mpirun(dir, sizeof dir,
                                "#!/bin/sh\ntrap '' INT TERM\necho 'fake mpirun up' >&2\nwhile :; do sleep 0.1; done\n"));
    snprintf(cmd, sizeof cmd, "PATH=%s:\"$PATH\" BAGPIPE_TEST_STOP_GRACE_S=1 exec %s train --mode sync --trainers 2 "
             "--servers 1 " TINY_MODEL " %s > %s 2>&1", dir, test_bin(), data, outp);
    pid_t job = spawn_sh(cmd, 0, 0);
    ASSERT_MSG(job > 0, "cannot start the job");
    char *out = NULL;
    size_t len;
    for (double t0 = bp_now(); bp_now() - t0 < 30; usleep(20000)) { // the fake is up
        free(out);
        out = dist_test_slurp(outp, &len);
        if (out && strstr(out, "fake mpirun up")) break;
    }
    ASSERT_EQ(kill(job, SIGINT), 0);
    int st = 0;
    double t1 = bp_now();
    for (; bp_now() - t1 < 30 && waitpid(job, &st, WNOHANG) == 0; usleep(20000)) {
    }
    const double took = bp_now() - t1;
    if (took >= 30) kill(job, SIGKILL), waitpid(job, &st, 0);
    free(out);
    out = dist_test_slurp(outp, &len);
    ASSERT_MSG(took < 10, "the launcher took %.1f s:\n%s", took, out);
    ASSERT_STR_CONTAINS(out, "bagpipe: mpirun has not ended 1 s after signal 2; killing it");
    ASSERT_STR_CONTAINS(out, "bagpipe: interrupted by signal 2 (Interrupt): the job is stopped");
    ASSERT_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "status %d:\n%s", st, out);
    free(out);
}

// Runs cmd with its stdout and stderr on a new terminal (a pseudo-terminal, as in an interactive
// shell); *out gets what the terminal received.  Returns the exit status.
static int run_on_terminal(char **out, const char *cmd) {
    *out = NULL;
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) return -1;
    const char *slave = ptsname(m);
    pid_t job = fork();
    if (job == 0) {
        setsid();
        int s = open(slave, O_RDWR);
        if (s < 0) _exit(127);
        dup2(s, 1), dup2(s, 2), close(s), close(m);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = bp_xmalloc(cap);
    ssize_t got;
    while ((got = read(m, buf + len, cap - len - 1)) > 0 || (got < 0 && errno == EINTR)) {
        if (got > 0) len += (size_t)got;
        if (cap - len < 4096) buf = bp_xrealloc(buf, cap *= 2);
    }
    buf[len] = 0, *out = buf;
    close(m);
    int st = 0;
    waitpid(job, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// On a terminal a distributed job shows trainer 0's progress line, as a local run does (the
// ranks' stderr is a pipe to the launcher, so none was drawn), and nothing lands on that line:
// each redraw is followed by the next one or by the clearing of the line, never by a line of
// trainer 0's or another rank's (the oracle's figures used to come while the line was drawn).
TEST(dist_progress_line_on_a_terminal) {
    char data[512], cmd[4096];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 2000, 5));
    // (BAGPIPE_PROGRESS empty, as scripts/run.sh exports it, is unset: the terminal decides)
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 60 env BAGPIPE_PROGRESS= " OMPI_ENV " %s train %s " TINY_MODEL
             " --print-every 5 --iters 600 --mode bagpipe --trainers 2 --servers 1 --cache-rows 300", dist_test_env(),
             test_bin(), data);
    char *out = NULL;
    int rc = run_on_terminal(&out, cmd);
    ASSERT_MSG(rc == 0, "exit %d:\n%s", rc, out ? out : "");
    ASSERT_MSG(strstr(out, "\rtrain [") && strstr(out, "/s eta "),
               "no progress line:\n%s", out);
    ASSERT_STR_CONTAINS(out, "oracle: 600 records");
    for (const char *p = out; (p = strstr(p, "\033[K")); p++) {
        const char next = p[3];
        ASSERT_MSG(p == out || p[-1] == '\r' || next == '\r' || next == 0,
                   "output follows a drawn progress line: '%.60s'", p + 3);
    }
    free(out);
}
