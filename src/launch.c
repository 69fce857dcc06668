// launch: see launch.h.  mpirun's own failure reports (Open MPI 4) are read from its stderr to
// find the rank:
//   "mpirun noticed that process rank R with PID P on node N exited on signal S (Killed)."
//   "MPI_ABORT was invoked on rank R in communicator ..."
//   "  Process name: [[J,1],R]" followed by "  Exit code:    C"
// and, where those are missing (mpirun sometimes loses the aborting rank's report, printing
// instead an ORTE_ERROR_LOG line about its help message, which is dropped here), the first
// rank that reported an error of its own ("bagpipe: rank R (role): ...").
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "launch.h"

int launch_under_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < BP_ARRAY_LEN(vars); i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int launch_world(int *rank) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    const char *me = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
    *rank = me ? atoi(me) : 0;
    return size ? atoi(size) : 0;
}

static volatile sig_atomic_t child_pid, got_signal;
static void (*interrupt_note)(const void *);
static const void *interrupt_arg;

void launch_on_interrupt(void (*fn)(const void *arg), const void *arg) { interrupt_note = fn, interrupt_arg = arg; }

// The value of LAUNCH_ENV_SELF: "PID@HOST" of the launcher.
static void launcher_id(char *buf, size_t cap) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(buf, cap, "%ld@%s", (long)getpid(), host);
}

// Ends this rank as a SIGTERM would (its handlers remove temporary files).
static void launcher_gone(void) {
    fprintf(stderr, "bagpipe: the launching bagpipe is gone: this rank stops\n");
    kill(getpid(), SIGTERM);
}

// Waits for the launcher (a pidfd) to end.
static void *watch_launcher(void *arg) {
    struct pollfd p = {.fd = (int)(intptr_t)arg, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    launcher_gone();
    return NULL;
}

void launch_watch_launcher(void) {
    const char *v = getenv(LAUNCH_ENV_SELF);
    char self_host[300], *at = v ? strchr(v, '@') : NULL;
    long pid = v ? strtol(v, NULL, 10) : 0;
    launcher_id(self_host, sizeof self_host);
    // Only a launcher on this host (its pid means nothing elsewhere).
    if (pid <= 1 || !at || strcmp(at, strchr(self_host, '@')) != 0) return;
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0) {
        if (errno == ESRCH) launcher_gone();
        return; // no pidfd (kernels before 5.3): mpirun's own shutdown is all there is
    }
    pthread_t th;
    if (pthread_create(&th, NULL, watch_launcher, (void *)(intptr_t)fd) == 0) pthread_detach(th);
    else close(fd);
#endif
}

static void forward_signal(int sig) {
    got_signal = sig;
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

// Seconds that mpirun has to end after a forwarded SIGINT or SIGTERM before it is killed.
enum { STOP_GRACE_S = 15 };

// What the launcher learnt about the failure from mpirun's stderr.
typedef struct {
    int rank;       // -1: unknown
    int signal;     // > 0: killed by this signal
    int exit_code;  // >= 0: exited with this code
    int aborted;    // called MPI_Abort
    int said;       // the first rank that printed an error of its own, -1: none
    int done;       // the writer reported the job done (launch_report_done)
    int results;    // the writer reported its results written (launch_report_results)
} failure;

// The lines launch_report_done and launch_report_results print; the launcher takes them out of
// the output.
#define DONE_LINE "bagpipe: launch: job done\n"
#define RESULTS_LINE "bagpipe: launch: results written\n"

void launch_report_results(void) {
    if (!getenv(LAUNCH_ENV_SELF)) return;
    fflush(stdout);
    fputs(RESULTS_LINE, stderr);
    fflush(stderr);
}

void launch_report_done(void) {
    if (!getenv(LAUNCH_ENV_SELF)) return;
    fflush(stdout);
    fputs(DONE_LINE, stderr);
    fflush(stderr);
    const char *stop = getenv("BAGPIPE_TEST_STOP_AFTER_DONE");
    if (stop && *stop == '1') raise(SIGSTOP);
}

// mpirun's own noise when it cannot unpack an aborting rank's help message: the rank's error is
// above it, and the line means nothing to a user.
static int noise_line(const char *line) {
    return strstr(line, "ORTE_ERROR_LOG: Data unpack would read past end of buffer") && strstr(line, "show_help.c");
}

static void scan_line(const char *line, failure *f) {
    const char *p;
    int r, pid, sig, j, one, code;
    char node[128];
    if ((p = strstr(line, "process rank ")) &&
        sscanf(p, "process rank %d with PID %d on node %127s exited on signal %d", &r, &pid, node, &sig) == 4) {
        if (f->rank < 0) f->rank = r, f->signal = sig;
    } else if ((p = strstr(line, "MPI_ABORT was invoked on rank ")) && sscanf(p, "MPI_ABORT was invoked on rank %d", &r) == 1) {
        if (f->rank < 0) f->rank = r, f->aborted = 1;
    } else if ((p = strstr(line, "Process name: [[")) && sscanf(p, "Process name: [[%d,%d],%d]", &j, &one, &r) == 3) {
        if (f->rank < 0) f->rank = r;
    } else if ((p = strstr(line, "Exit code:")) && sscanf(p, "Exit code: %d", &code) == 1) {
        if (f->exit_code < 0) f->exit_code = code;
    } else if ((p = strstr(line, "bagpipe: rank ")) == line) {
        int n = 0;
        if (sscanf(p, "bagpipe: rank %d (%n", &r, &n) == 1 && n > 0 && f->said < 0) f->said = r;
    }
}

// One of mpirun's output streams, passed on by segments: a line when its newline comes (or the
// buffer fills), a redraw of trainer 0's progress line (progress.c: "\r...\033[K", no newline)
// at once.
typedef struct {
    int fd;
    FILE *to;     // where its lines go
    int scan;     // stderr: lines are scanned for the failure and mpirun's noise dropped
    char buf[1024];
    size_t n;
} out_stream;

// Passes on the segment in s->buf.  Progress redraws go to our stderr, whichever stream they
// came on; any other line clears a progress line on show first, rather than being appended to it.
static void pass_segment(out_stream *s, int redraw, int *shown, failure *f) {
    s->buf[s->n] = 0, s->n = 0;
    if (redraw) {
        fputs(s->buf, stderr);
        *shown = strcmp(s->buf, "\r\033[K") != 0;
        return;
    }
    // The line may come after a prefix that the user's Open MPI settings add (orte_tag_output:
    // "[1,3]<stderr>:", timestamps).
    const size_t len = strlen(s->buf), dl = sizeof DONE_LINE - 1, rl = sizeof RESULTS_LINE - 1;
    if (s->scan && len >= dl && strcmp(s->buf + len - dl, DONE_LINE) == 0) {
        f->done = 1;
        return;
    }
    if (s->scan && len >= rl && strcmp(s->buf + len - rl, RESULTS_LINE) == 0) {
        f->results = 1;
        return;
    }
    if (s->scan) scan_line(s->buf, f);
    if (s->scan && noise_line(s->buf)) return;
    if (*shown) fputs("\r\033[K", stderr), *shown = 0;
    fputs(s->buf, s->to);
    fflush(s->to);
}

static void feed(out_stream *s, const char *p, size_t len, int *shown, failure *f) {
    for (size_t k = 0; k < len; k++) {
        s->buf[s->n++] = p[k];
        const int redraw = s->n >= 3 && memcmp(s->buf + s->n - 3, "\033[K", 3) == 0;
        if (p[k] == '\n' || redraw || s->n == sizeof s->buf - 1) pass_segment(s, redraw, shown, f);
    }
}

// mpirun can hang after a forwarded signal, its ranks ended but never reaped (seen under load:
// every rank a zombie, mpirun waiting on a futex): the launcher then waited on it for good.  Called
// while the launcher waits, it kills mpirun STOP_GRACE_S after the signal (end_orphans does the
// rest).
static void stop_watch(void) {
    static double signal_at; // when a forwarded signal was first seen here
    static int killed;
    if (!got_signal || killed || child_pid <= 0) return;
    if (!signal_at) signal_at = bp_now();
    const char *gv = getenv("BAGPIPE_TEST_STOP_GRACE_S"); // tests: a shorter grace
    const int grace = gv && atoi(gv) > 0 ? atoi(gv) : STOP_GRACE_S;
    if (bp_now() - signal_at <= grace) return;
    fprintf(stderr, "bagpipe: mpirun has not ended %d s after signal %d; killing it\n", grace, (int)got_signal);
    kill((pid_t)child_pid, SIGKILL);
    killed = 1;
}

// Copies mpirun's stderr and stdout to ours until both end; its stderr first when both have
// something (a progress line's last redraw before the line that follows it).
static void forward_output(int err_fd, int out_fd, failure *f) {
    out_stream st[2] = {{.fd = err_fd, .to = stderr, .scan = 1}, {.fd = out_fd, .to = stdout}};
    int shown = 0, open_n = 2;
    while (open_n > 0) {
        stop_watch();
        struct pollfd pf[2];
        for (int k = 0; k < 2; k++) pf[k] = (struct pollfd){.fd = st[k].fd, .events = POLLIN};
        if (poll(pf, 2, 250) < 0) { // (a timeout: a signal may come between stop_watch and poll)
            if (errno == EINTR) continue;
            break;
        }
        for (int k = 0; k < 2; k++) {
            if (st[k].fd < 0 || !(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char chunk[4096];
            ssize_t got = read(st[k].fd, chunk, sizeof chunk);
            if (got < 0 && errno == EINTR) continue;
            if (got > 0) {
                feed(&st[k], chunk, (size_t)got, &shown, f);
                continue;
            }
            if (st[k].n) pass_segment(&st[k], 0, &shown, f);
            close(st[k].fd);
            st[k].fd = -1, open_n--;
        }
    }
    for (int k = 0; k < 2; k++)
        if (st[k].fd >= 0) close(st[k].fd);
    if (shown) fputs("\r\033[K", stderr);
}

// This process's children, up to cap of them (from /proc/PID/stat: the parent is the field after
// the command's closing parenthesis and the state).  Returns how many.
static int list_children(pid_t *kids, int cap) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    const pid_t self = getpid();
    int n = 0;
    struct dirent *e;
    while (n < cap && (e = readdir(d))) {
        char *end, path[64], buf[512];
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got <= 0) continue;
        buf[got] = 0;
        const char *paren = strrchr(buf, ')');
        char state;
        int ppid;
        if (paren && sscanf(paren + 1, " %c %d", &state, &ppid) == 2 && ppid == self) kids[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

// Ends what mpirun left behind.  It can exit before its ranks (a signal that comes while it is
// starting them: the ranks then went on training, writing metrics and checkpoints, after the
// launcher had said the job was stopped); as this process is a child subreaper, they are its
// children by now.  Each gets SIGTERM, then SIGKILL after 3 s, and is reaped.  Returns how many
// there were.
static int end_orphans(void) {
    pid_t kids[256];
    int found = 0;
    for (int round = 0; round < 2; round++) {
        int n = list_children(kids, (int)BP_ARRAY_LEN(kids));
        if (round == 0) found = n;
        for (int i = 0; i < n; i++) kill(kids[i], round ? SIGKILL : SIGTERM);
        for (double t0 = bp_now(); n > 0 && bp_now() - t0 < 3.0;) {
            while (waitpid(-1, NULL, WNOHANG) > 0) {
            }
            n = list_children(kids, (int)BP_ARRAY_LEN(kids));
            if (n) usleep(20000);
        }
        if (n == 0) break;
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    return found;
}

int launch_job(int np, int argc, char **argv, launch_role_fn role, const void *ctx) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "bagpipe: cannot find this program's path (/proc/self/exe): %s\n", strerror(errno));
        return 1;
    }
    self[len] = 0;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 0);
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    char id[320];
    launcher_id(id, sizeof id);
    setenv(LAUNCH_ENV_SELF, id, 1);
    // The ranks' output comes through pipes to this process: trainer 0 draws its progress line
    // when our stderr is a terminal (or BAGPIPE_PROGRESS=1 says so), as one process does, on its
    // stdout, so that it comes in order with the lines trainer 0 prints (progress.h);
    // forward_output draws it on our stderr.
    const char *progress = getenv("BAGPIPE_PROGRESS"); // values as bp_progress_init reads them
    const int off = progress && strcmp(progress, "0") == 0, forced = progress && strcmp(progress, "1") == 0;
    if (!off && (forced || isatty(STDERR_FILENO))) setenv("BAGPIPE_PROGRESS", "stdout", 1);

    char npbuf[16];
    snprintf(npbuf, sizeof npbuf, "%d", np);
    char **av = bp_xcalloc((size_t)argc + 6, sizeof *av);
    int k = 0;
    av[k++] = "mpirun", av[k++] = "-np", av[k++] = npbuf, av[k++] = "--oversubscribe", av[k++] = self;
    for (int i = 0; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;

    int pfd[2], ofd[2];
    if (pipe(pfd) != 0 || pipe(ofd) != 0) {
        fprintf(stderr, "bagpipe: pipe: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    prctl(PR_SET_CHILD_SUBREAPER, 1); // ranks that outlive mpirun become our children: end_orphans
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "bagpipe: fork: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); // the job goes when the launcher goes
        // mpirun gets the user's signals from the launcher only, once: in the launcher's process
        // group, a Ctrl-C (or `timeout`, `kill -INT -PGID`) would reach it twice, directly and
        // forwarded, and Open MPI takes a second SIGINT as "kill the job without waiting for its
        // ranks": mpirun then exits at once and the ranks train on for a second or more after
        // the launcher has said the job is stopped (appending metrics, writing checkpoints).  Out
        // of the terminal's foreground group it must not read the terminal (SIGTTIN would stop
        // it), and no rank reads its standard input: /dev/null.
        setpgid(0, 0);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0), close(nul);
        close(pfd[0]), close(ofd[0]);
        dup2(pfd[1], 2), dup2(ofd[1], 1);
        close(pfd[1]), close(ofd[1]);
        execvp("mpirun", av);
        fprintf(stderr, "bagpipe: cannot run mpirun (is Open MPI installed and on PATH?): %s\n", strerror(errno));
        _exit(127);
    }
    free(av);
    setpgid(pid, 0); // also here, so that no signal can come before the child has moved (EACCES after its exec)
    close(pfd[1]), close(ofd[1]);
    child_pid = pid;
    // SIGINT and SIGTERM are forwarded to mpirun, except one the launcher was started with
    // ignored (a background job of a script: the shell ignores SIGINT for it), which stays ignored
    // as it would for any other program.
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    const int fwd[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < BP_ARRAY_LEN(fwd); i++)
        if (sigaction(fwd[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(fwd[i], &sa, NULL);

    failure f = {-1, 0, -1, 0, -1, 0, 0};
    forward_output(pfd[0], ofd[0], &f);
    int st = 0;
    for (pid_t w; (w = waitpid(pid, &st, WNOHANG)) == 0 || (w < 0 && errno == EINTR);) { // its pipes closed
        stop_watch();
        usleep(20000);
    }
    child_pid = 0;
    end_orphans();
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 0) return 0;
    if (got_signal && (f.done || f.results)) {
        // The signal came after the job's end, when its results were written: it stopped
        // nothing the user asked for, so the job succeeded.
        fprintf(stderr, "bagpipe: signal %d (%s) came after the job had finished: its results are written\n",
                got_signal, strsignal(got_signal));
        return 0;
    }
    if (got_signal) {
        // The user stopped the job (Ctrl-C, kill -INT/-TERM of the launcher): no rank failed, and
        // mpirun's own exit code (1) would say "job failed".  Die by the signal, as one process does.
        const int sig = got_signal;
        fprintf(stderr, "bagpipe: interrupted by signal %d (%s): the job is stopped\n", sig, strsignal(sig));
        if (interrupt_note) interrupt_note(interrupt_arg);
        fflush(stderr);
        signal(sig, SIG_DFL);
        raise(sig);
        return 128 + sig;
    }
    char what[96] = "a rank";
    const int reported = f.rank < 0 && f.signal <= 0 && !f.aborted && f.exit_code < 0 && f.said >= 0;
    if (reported) f.rank = f.said;
    if (f.rank >= 0) {
        char r[64] = "?";
        role(f.rank, ctx, r, sizeof r);
        snprintf(what, sizeof what, "rank %d (%s)", f.rank, r);
    }
    if (f.results) {
        // The writer had written the results (summary, metrics, --save) when a rank failed in the
        // job's end: nothing asked for is lost, and a resume would only redo finished work.
        if (f.signal > 0) snprintf(what + strlen(what), sizeof what - strlen(what), ", killed by signal %d", f.signal);
        fprintf(stderr, "bagpipe: warning: %s failed at the job's end, after its results were written (the summary "
                "and any --save are complete): the job is done\n", what);
        return 0;
    }
    if (f.signal > 0) { // exit 1, as any failed job: mpirun's 128 + signal read as this launcher killed
        fprintf(stderr, "bagpipe: job failed: %s was killed by signal %d (%s)\n", what, f.signal, strsignal(f.signal));
        return 1;
    }
    if (f.aborted || reported)
        fprintf(stderr, "bagpipe: job failed: %s stopped the job after an error (message above)\n", what);
    else if (f.exit_code >= 0)
        fprintf(stderr, "bagpipe: job failed: %s was the first to exit, with code %d (its message is above)\n", what,
                f.exit_code);
    else if (WIFSIGNALED(st)) { // mpirun itself killed (the OOM killer, kill -9): its 128 + signal
        fprintf(stderr, "bagpipe: job failed: mpirun was killed by signal %d (%s); the ranks stop with it\n",
                WTERMSIG(st), strsignal(WTERMSIG(st)));
        return 1; // not 128 + signal, which would read as this launcher killed
    } else
        fprintf(stderr, "bagpipe: job failed: mpirun exited with code %d\n", code);
    return code;
}
