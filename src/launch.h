// launch: starting a multi-rank job on this machine without a launcher, and telling who died.
//
// `bagpipe train --mode sync ...` run by hand (no mpirun/srun around it) re-executes its own
// binary under `mpirun -np N --oversubscribe`, with the Open MPI settings this machine needs set
// in the environment unless the user set them: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) (mpirun as root),
// OMPI_MCA_hwloc_base_binding_policy=none (else with np <= 2 each rank is pinned to one core),
// OMPI_MCA_mpi_yield_when_idle=1 (else a rank blocked in MPI spins and halves the others' compute),
// OMPI_MCA_btl_vader_single_copy_mechanism=none (CMA is 2-5x slower on this VM).  It forks mpirun as a child, forwards
// SIGINT/SIGTERM to it, copies its stderr through, and when the job fails prints one line naming
// the rank that died (or aborted) and its role.
#ifndef BP_LAUNCH_H
#define BP_LAUNCH_H

#include <stddef.h>

// Set (to "PID@HOST" of the launcher) in the environment of the job launch_job starts: its ranks
// know the launcher has checked the set-up and said what it had to say about it.
#define LAUNCH_ENV_SELF "BAGPIPE_SELF_LAUNCHED"

// In a rank of a job launch_job started on this host: a thread waits for the launcher to end (a
// pidfd) and then ends this rank by SIGTERM.  mpirun ends the ranks when the launcher goes too
// (PR_SET_PDEATHSIG), but after a second or more in which they trained on, writing metrics and
// checkpoints that a prompt --resume then raced with; this way they stop within milliseconds.
// Nothing happens under another launcher or without pidfds.
void launch_watch_launcher(void);

// 1 when this process is a rank of a launched job (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK,
// PMI_RANK or SLURM_PROCID... set), 0 otherwise.
int launch_under_mpi(void);
// The ranks of the launched job this process is one of, as its launcher says (OMPI_COMM_WORLD_SIZE,
// else PMI_SIZE; 0: not said), and in *rank its own (OMPI_COMM_WORLD_RANK, else PMI_RANK; 0: not said).
int launch_world(int *rank);

// In the rank that writes a launched job's results, once every rank has passed the job's end
// (its model, metrics and checkpoints written): tells the launcher, by a line on stderr that it
// keeps to itself, so that a Ctrl-C that comes after it is not reported as a stopped job.
// Nothing happens under another launcher.  Test hook: BAGPIPE_TEST_STOP_AFTER_DONE=1 stops the
// rank (SIGSTOP) right after.
void launch_report_done(void);
// In the same rank, as soon as its own part has written the job's results (its summary, metrics
// and --save), before the end of the job: a rank that fails after that (in the end-of-job
// handshake) stopped nothing that was asked for, and the launcher says so and returns 0.
void launch_report_results(void);

// What the launcher says after "interrupted by signal S: the job is stopped", before it dies by that
// signal (where a --resume would go on from): fn(arg).
void launch_on_interrupt(void (*fn)(const void *arg), const void *arg);

// Names the role of a rank into buf ("server 1").
typedef void (*launch_role_fn)(int rank, const void *ctx, char *buf, size_t cap);

// Runs `mpirun -np np --oversubscribe SELF argv[0..argc)` (argv as the subcommand got it) and
// waits.  Returns the process exit code for the whole job: 0 when every rank succeeded,
// otherwise mpirun's non-zero code (or 1), after printing "bagpipe: job failed: rank R (ROLE) ...".
// Stopped by a SIGINT/SIGTERM it forwarded (Ctrl-C), it says so and dies by that signal instead
// (or, when the job had reported itself done, launch_report_done, or its results written,
// launch_report_results, says that and returns 0, as after a rank failing then),
// once every rank has ended: mpirun (in a process group of its own, its standard input /dev/null)
// stops them, and any it leaves behind (this process is a child subreaper) get SIGTERM, then
// SIGKILL.
int launch_job(int np, int argc, char **argv, launch_role_fn role, const void *ctx);

#endif
