/* hs_signals: the SIGTERM that HOTSPAN_OUT turns into "flush, then die of SIGTERM".
 *
 * Why not a Python handler (signal.signal): Python runs a handler only when the main thread
 * next executes bytecode. A pool worker blocked in its queue's lock (sem_wait, no timeout)
 * never does if the signal lands between CPython's check for pending signals and the
 * futex wait: the C-level handler only sets a flag, sem_wait blocks on, and terminate()
 * waits for that worker forever (about one pool in 20-40 here; CPython issue 73945 is the
 * same race). So the handler is C: it writes a byte to a pipe (async-signal-safe), and a
 * hotspan thread blocked on that pipe flushes and then kills the process with SIGTERM's
 * default action, whatever the main thread is blocked in. Free of Python.h.
 */
#ifndef HS_SIGNALS_H
#define HS_SIGNALS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Install the handler where SIGTERM's action is the default (the program has no handler
 * of its own, in Python or C). 1: installed (or already ours); 0: the program has its own,
 * left alone; -1: errno set. */
int hs_sigterm_install(void);
/* The default action back (if ours is installed) and the pipe closed: a waiter returns 0. */
void hs_sigterm_uninstall(void);
/* Whether SIGTERM's action is ours right now. */
int hs_sigterm_installed(void);
/* Whether our handler has taken a SIGTERM (since it was installed, or since the fork). */
int hs_sigterm_received(void);
/* Block until a SIGTERM arrived (1), or the handler was uninstalled (0). Call without the
 * GIL, from a thread that blocks SIGTERM. */
int hs_sigterm_wait(void);
/* SIGTERM's default action back, then die of it (returns only if SIGTERM is blocked in
 * every thread, or the process survived it somehow). */
void hs_sigterm_die(void);
/* A launcher (`hotspan run`) passing a signal on to the program it runs: the signal is
 * queued with a mark (sigqueue, where there is one; a plain kill elsewhere) that the
 * handlers below recognise. Signalled as a group (kill -TERM -PGID, a terminal), launcher
 * and program both receive the signal, and the launcher's copy reaches the program a
 * moment after its own: a second SIGTERM, which would kill at once, before the flush. A
 * marked signal that follows one the program received directly is that same signal again
 * and is dropped. 0, or -1 with errno set. */
int hs_forward_signal(int pid, int sig);
/* In the program a launcher runs: SIGINT's current handler (Python's) keeps running, behind
 * a filter that drops the launcher's copy of a SIGINT the program received directly (within
 * HS_ECHO_WINDOW_NS). 1: installed; 0: SIGINT is not handled by a plain handler (ignored, a
 * siginfo handler), left alone; -1: errno set. */
int hs_sigint_filter_install(void);

/* In a forked child: a pipe of its own (the inherited one is the parent's: a byte written
 * here would wake the parent's waiter). Keeps the handler; see hs_sigterm_uninstall. */
int hs_sigterm_after_fork_child(void);

#ifdef __cplusplus
}
#endif

#endif
