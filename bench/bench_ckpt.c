// bench_ckpt: what checkpoints cost and what they save, through the bagpipe binary, side by side
// in one run: mode sync with T = 2 trainers and S = 2 servers, checkpoints as parts (each server
// writes its shard, trainer 0 the dense part, then the manifest) against the naive alternative
// (--checkpoint-naive: every row is first collected on trainer 0, which writes everything),
// measured the same way.
//
//   build/bench/bench_ckpt [BAGPIPE_BIN] [ITERS] [ROWS]
//
// Prints, per method and interval: the checkpoints' share of training time (the summary's
// ckpt_pause_s over train_s, and the train_s difference against a run without checkpoints),
// the pause per checkpoint (mean and max, seconds trainer 0 spent inside one while the other
// ranks waited), and for a kill -9 of server 0 a random moment after the second commit: time from
// the kill to the job's end (failure detected), from the resume command to the resumed run's
// first iteration, the sum, and the iterations lost (last iteration finished before the kill
// minus the checkpoint resumed from).  The process ids come from the BAGPIPE_TEST_PID_DIR hook
// (docs/checkpoints.md).  Timings are lower bounds on a shared machine.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *bin, *dir;
static char data[600];
#define MODEL                                                                                               \
    "--mode sync --trainers 2 --servers 2 --arch-mlp-bot 13-64-16 --arch-mlp-top 64-1 "                      \
    "--arch-sparse-feature-size 16 --emb-optimizer adagrad --batch-size 512 --no-eval"

// Runs cmd with its standard error appended to DIR/stderr.log (the warnings of the runs would
// interleave with the table), shown when it fails.
static int run(const char *cmd) {
    char full[8192];
    snprintf(full, sizeof full, "{ %s; } 2>> %s/stderr.log", cmd, dir);
    int st = bench_system(full);
    if (st != 0) {
        fprintf(stderr, "bench_ckpt: failed (%d): %s\n", st, cmd);
        snprintf(full, sizeof full, "tail -5 %s/stderr.log >&2", dir);
        if (bench_system(full) != 0) fprintf(stderr, "bench_ckpt: see %s/stderr.log\n", dir);
    }
    return st;
}

// The last "iter" of a line containing "\"train\"" in a metrics file (-1: none).
static long last_train_iter(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[8192];
    long it = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"event\":\"train\"");
        const char *q = p ? strstr(line, "\"iter\":") : NULL;
        if (q) it = strtol(q + 7, NULL, 10);
    }
    fclose(f);
    return it;
}

// The newest committed checkpoint iteration under root (-1: none).
static long newest(const char *root) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -d %s/ckpt-*/MANIFEST 2>/dev/null | sed 's|.*/ckpt-0*\\([0-9]*\\)/MANIFEST|\\1|' | "
             "sort -n | tail -1", root);
    FILE *p = popen(cmd, "r");
    long it = -1;
    if (p) {
        if (fscanf(p, "%ld", &it) != 1) it = -1;
        pclose(p);
    }
    return it;
}

typedef struct {
    double detect_s, restart_s;
    long lost, at;
} recovery;

// Starts a checkpointing run, kills server 0 (rank 1) a random moment after the second commit,
// then resumes and times until the resumed run's first iteration begins.  Each method's files are
// its own (DIR/recp*, DIR/recn*: the runs' output, metrics and checkpoints), kept when it fails.
static int measure_recovery(const char *extra, int every, int iters, recovery *r, unsigned *seed) {
    char root[512], pids[512], metrics[512], cmd[4096];
    const char *tag = strstr(extra, "naive") ? "n" : "p";
    snprintf(root, sizeof root, "%s/rec%s", dir, tag);
    snprintf(pids, sizeof pids, "%s/pids", dir);
    snprintf(metrics, sizeof metrics, "%s/rec%s.jsonl", dir, tag);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s; mkdir -p %s", root, pids, metrics, pids);
    if (run(cmd)) return -1;
    snprintf(cmd, sizeof cmd,
             "exec env BAGPIPE_TEST_PID_DIR=%s %s train " MODEL " --iters %d --print-every 1 -m %s "
             "--checkpoint-every %d --checkpoint-dir %s %s %s > %s/rec%s.out 2>&1",
             pids, bin, iters, metrics, every, root, extra, data, dir, tag);
    pid_t job = fork();
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    double t0 = now();
    while (newest(root) < 2L * every && now() - t0 < 300) {
        if (waitpid(job, NULL, WNOHANG) == job) {
            fprintf(stderr, "bench_ckpt: the run ended before the kill (more iterations?)\n");
            return -1;
        }
        usleep(5000);
    }
    usleep((useconds_t)(rand_r(seed) % 1000) * 1000); // 0-1 s after the commit
    char pidf[600];
    snprintf(pidf, sizeof pidf, "%s/rank-1.pid", pids);
    FILE *f = fopen(pidf, "r");
    long pid = -1;
    if (!f || fscanf(f, "%ld", &pid) != 1) {
        if (f) fclose(f);
        kill(job, SIGKILL);
        return -1;
    }
    fclose(f);
    kill((pid_t)pid, SIGKILL);
    double tk = now();
    waitpid(job, NULL, 0);
    r->detect_s = now() - tk;
    long done = last_train_iter(metrics);
    r->at = newest(root);
    r->lost = done - r->at;
    // The resumed run goes on checkpointing the same way (--checkpoint-naive alone, on a run that
    // writes none, is refused): the restart reads either kind of checkpoint.
    snprintf(cmd, sizeof cmd, "%s train " MODEL " --iters %d --resume %s --checkpoint-dir %s --checkpoint-every %d %s "
             "%s 2>&1", bin, iters, root, root, every, extra, data);
    char outp[600];
    snprintf(outp, sizeof outp, "%s/rec%s-resumed.out", dir, tag);
    FILE *out = fopen(outp, "w");
    double tr = now();
    FILE *p = popen(cmd, "r");
    if (!p) {
        if (out) fclose(out);
        return -1;
    }
    char line[4096];
    r->restart_s = NAN;
    while (fgets(line, sizeof line, p)) {
        if (isnan(r->restart_s) && strstr(line, "resumed from")) r->restart_s = now() - tr;
        if (out) fputs(line, out);
    }
    if (out) fclose(out);
    return pclose(p) == 0 && !isnan(r->restart_s) ? 0 : -1;
}

int main(int argc, char **argv) {
    if (bench_help(argc, argv, "[BAGPIPE_BIN] [ITERS] [ROWS]",
                   "checkpoint pauses (parts against naive) and recovery from kill -9 of a server, mode sync "
                   "T = 2 S = 2; defaults build/bagpipe, 600, 1000000"))
        return 0;
    bin = argc > 1 ? argv[1] : getenv("BAGPIPE_BIN") ? getenv("BAGPIPE_BIN") : "build/bagpipe";
    const int iters = (int)bench_num_arg(argc, argv, 2, 600, 1, "ITERS");
    const long rows = (long)bench_num_arg(argc, argv, 3, 1000000, 8, "ROWS"); // table rows in all (8 tables)
    if (iters < 0 || rows < 0) return 2;
    if (!(dir = bench_scratch("/tmp", "bench-ckpt"))) return 1;
    char cmd[4096];
    snprintf(data, sizeof data, "%s/d.bin", dir);
    snprintf(cmd, sizeof cmd,
             "%s synth --preset custom --tables %ld,%ld,%ld,%ld,%ld,%ld,300,50 --dense 13 -n 400000 --seed 42 -o %s "
             "> /dev/null", bin, rows / 20, rows / 10, rows / 5, rows / 5, rows / 5, rows / 20 * 3, data);
    if (run(cmd)) return 1;
    const double mib = (double)rows * 32 * 4 / (1 << 20); // D = 16 + Adagrad state: 32 floats per row
    printf("bench_ckpt: sync T=2 S=2, DLRM 13-64-16 / 64-1, D=16 + Adagrad state, ~%ld rows (%.0f MiB of rows), "
           "batch 512, %d iterations, binary %s\n", rows, mib, iters, bin);
    // the baseline without checkpoints
    char m0[600];
    snprintf(m0, sizeof m0, "%s/m0.jsonl", dir);
    snprintf(cmd, sizeof cmd, "%s train " MODEL " --iters %d -m %s %s > /dev/null", bin, iters, m0, data);
    if (run(cmd)) return 1;
    const double base = bench_summary_num(m0, "train_s");
    printf("no checkpoints: train %.2f s (%.2f ms/iter)\n\n", base, 1e3 * base / iters);
    printf("%-7s %6s %6s %10s %11s %12s %12s\n", "method", "every", "ckpts", "pause_%", "train_+%", "pause_mean_s",
           "pause_max_s");
    const int every[] = {iters / 6, iters / 3};
    const char *methods[2][2] = {{"parts", ""}, {"naive", "--checkpoint-naive"}};
    for (int e = 0; e < 2; e++)
        for (int m = 0; m < 2; m++) {
            char mp[600], root[600];
            snprintf(mp, sizeof mp, "%s/m_%d_%d.jsonl", dir, e, m);
            snprintf(root, sizeof root, "%s/ck_%d_%d", dir, e, m);
            snprintf(cmd, sizeof cmd, "%s train " MODEL " --iters %d -m %s --checkpoint-every %d --keep 1 "
                     "--checkpoint-dir %s %s %s > /dev/null", bin, iters, mp, every[e], root, methods[m][1], data);
            if (run(cmd)) return 1;
            double ts = bench_summary_num(mp, "train_s"), ps = bench_summary_num(mp, "ckpt_pause_s");
            double n = bench_summary_num(mp, "ckpt_count"), pm = bench_summary_num(mp, "ckpt_pause_max_s");
            printf("%-7s %6d %6.0f %9.1f%% %10.1f%% %12.3f %12.3f\n", methods[m][0], every[e], n, 100 * ps / ts,
                   100 * (ts - base) / base, n > 0 ? ps / n : NAN, pm);
            snprintf(cmd, sizeof cmd, "rm -rf %s", root);
            run(cmd);
        }
    printf("\nrecovery from kill -9 of server 0 (checkpoint every %d):\n", every[0]);
    printf("%-7s %10s %10s %12s %10s %10s\n", "method", "detect_s", "restart_s", "to_train_s", "resumed_at", "lost_iters");
    unsigned seed = (unsigned)time(NULL);
    int failed = 0;
    for (int m = 0; m < 2; m++) {
        recovery r;
        if (measure_recovery(methods[m][1], every[0], iters * 3, &r, &seed)) {
            printf("%-7s failed\n", methods[m][0]);
            failed = 1;
            continue;
        }
        printf("%-7s %10.2f %10.2f %12.2f %10ld %10ld\n", methods[m][0], r.detect_s, r.restart_s,
               r.detect_s + r.restart_s, r.at, r.lost);
    }
    if (failed) {
        bench_keep_scratch(); // the runs' output and metrics say why
        return 1;
    }
    return 0;
}
