/* hs_fork: the core's fork handlers, in one written order (see hs_fork.h).
 *
 * The locks are taken outermost first, in the order the units nest them while running
 * (a drain() holds the collect lock, then the drain lock, then the registry's and the
 * intern tables'), so taking them here never deadlocks against a thread in the middle of
 * one; the clock's and NVTX's are leaves. */
/* First: hs_cuda.h includes Python.h, whose pyconfig.h defines _POSIX_C_SOURCE; after a
 * system header has defined it another way, clang (-Werror, aarch64 glibc) refuses. */
#include "hs_cuda.h"
#include "hs_fork.h"

#include <pthread.h>

#include "hs_clock.h"
#include "hs_columns.h"
#include "hs_drain.h"
#include "hs_live.h"
#include "hs_flight.h"
#include "hs_intern.h"
#include "hs_nvtx.h"
#include "hs_rawlog.h"
#include "hs_registry.h"
#include "hs_selftime.h"

static void prepare(void) {
    hs_collect_lock();       /* first: a drain() in progress finishes before the fork */
    hs_drain_fork_prepare(); /* a drainer start, then a pass of the drain thread */
    hs_registry_lock();
    hs_intern_lock();
    hs_nvtx_fork_prepare();
    hs_clock_fork_prepare();
    hs_cuda_fork_prepare(); /* a leaf: nothing is taken while the CUDA plug-in holds it */
}

static void parent(void) {
    hs_cuda_fork_parent();
    hs_clock_fork_release();
    hs_nvtx_fork_release();
    hs_intern_unlock();
    hs_registry_unlock();
    hs_drain_fork_release();
    hs_collect_unlock();
}

/* One thread, every lock above held. */
static void child(void) {
    hs_cuda_fork_child(); /* forgets the parent's device pairs */
    hs_clock_fork_release();
    hs_nvtx_fork_release();
    hs_drain_after_fork_child();    /* the parent's segments and drain thread: not ours */
    hs_live_after_fork_child();     /* and the live log's queue (its writer is the parent's) */
    hs_rawlog_after_fork_child();   /* and the raw log (the parent's file) */
    hs_flight_after_fork_child();   /* then the file: the thread's state may be in the parent's */
    hs_registry_after_fork_child(); /* then every other thread; a fresh id base and chain */
    hs_wait_after_fork_child();     /* the parent's tasks' waits (a lock another thread may hold) */
    hs_intern_unlock();
    hs_registry_unlock();
    hs_drain_fork_release();
    hs_collect_unlock();
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void register_handlers(void) { pthread_atfork(prepare, parent, child); }

void hs_fork_init(void) { pthread_once(&once, register_handlers); }
