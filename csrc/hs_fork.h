/* hs_fork: the core's one pthread_atfork. Each unit that holds a lock or per-process state
 * across fork() exposes its prepare / parent / child steps, and this unit calls them in one
 * written order (hs_fork.c), so that no registration order (import order, the first span,
 * NVTX switched on) decides it. Free of Python.h.
 */
#ifndef HS_FORK_H
#define HS_FORK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Register the handlers (idempotent). At import: a process that forks before it records
 * anything (a DataLoader's parent) still gives each child its own span id base. */
void hs_fork_init(void);

#ifdef __cplusplus
}
#endif
#endif
