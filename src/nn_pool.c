// nn_pool: persistent workers for the kernels' parallel parts (contract in nn_pool.h).
//
// One job at a time.  The caller publishes (fn, ctx, n), bumps `gen` and runs part 0; every
// started worker sees the new generation, runs its part if it has one, and counts itself off in
// `pending` (all started workers do, with a part or without, so no worker can still be reading a
// finished job when the next one is published).  Waiting on either side spins briefly (a step's
// jobs come tens of microseconds apart) and then sleeps on a futex.
#include "nn_pool.h"

#include <cblas.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

enum { SPIN_ROUNDS = 1 << 13 };

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; // held by the one caller
static int started;                                            // workers running (under the lock)
static _Atomic unsigned gen;                                   // job generation
static _Atomic unsigned pending;                                   // started workers yet to finish
static _Atomic int caller_sleeping;
static nn_pool_fn job_fn; // the job: written by the caller before gen is bumped
static void *job_ctx;
static int job_n;
static unsigned start_gen[NN_POOL_MAX]; // gen when worker i was started
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

// A forked child has none of the workers: it starts its own on first use.
static void pool_atfork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pool_lock = fresh;
    started = 0;
    atomic_store(&pending, 0);
    atomic_store(&caller_sleeping, 0);
}
static void pool_atfork_register(void) { pthread_atfork(NULL, NULL, pool_atfork_child); }

static void futex_wait(_Atomic unsigned *addr, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic unsigned *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, NN_POOL_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg;
    unsigned seen = start_gen[id]; // the generation before its first job, read under the lock
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ROUNDS) cpu_relax();
            else futex_wait(&gen, seen);
        }
        seen = g;
        if (id < job_n) job_fn(job_ctx, id, job_n);
        // seq_cst on both sides: either the caller sees pending reach 0 or this sees it asleep.
        if (atomic_fetch_sub(&pending, 1) == 1 && atomic_load(&caller_sleeping))
            futex_wake(&pending);
    }
    return NULL;
}

int nn_threads(void) {
    int t = openblas_get_num_threads();
    return t < 1 ? 1 : t > NN_POOL_MAX ? NN_POOL_MAX : t;
}

static void run_serial(int n, nn_pool_fn fn, void *ctx) {
    for (int p = 0; p < n; p++) fn(ctx, p, n);
}

void nn_pool_run(int n, nn_pool_fn fn, void *ctx) {
    BP_ASSERT(n >= 1 && n <= NN_POOL_MAX);
    if (n == 1 || pthread_mutex_trylock(&pool_lock) != 0) {
        run_serial(n, fn, ctx);
        return;
    }
    pthread_once(&atfork_once, pool_atfork_register);
    while (started < n - 1) {
        pthread_t tid;
        start_gen[started + 1] = atomic_load(&gen);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&tid, &attr, worker_main, (void *)(intptr_t)(started + 1));
        pthread_attr_destroy(&attr);
        if (rc) break;
        started++;
    }
    if (started < n - 1) { // no threads to be had: the same parts, here
        pthread_mutex_unlock(&pool_lock);
        run_serial(n, fn, ctx);
        return;
    }
    job_fn = fn, job_ctx = ctx, job_n = n;
    atomic_store_explicit(&pending, (unsigned)started, memory_order_relaxed);
    atomic_fetch_add_explicit(&gen, 1, memory_order_release);
    futex_wake(&gen);
    fn(ctx, 0, n);
    int spins = 0;
    unsigned left;
    while ((left = atomic_load_explicit(&pending, memory_order_acquire)) != 0) {
        if (++spins < SPIN_ROUNDS) {
            cpu_relax();
            continue;
        }
        atomic_store(&caller_sleeping, 1);
        if (atomic_load(&pending) != 0) futex_wait(&pending, left);
        atomic_store(&caller_sleeping, 0);
    }
    pthread_mutex_unlock(&pool_lock);
}
