/* hs_selftime: a span's self time (its duration minus the union of its children's
 * intervals), computed as drain() turns a thread's records into rows.
 *
 * A thread's records arrive in the order its spans closed, children before their parent,
 * and a child may reach drain() in an earlier batch than its parent (or its parent stay
 * open across many drains): so each thread keeps, between drains, what its open spans'
 * closed children cover (hs_thread_info.self_state), keyed by the parent's span id.
 *
 * Children on the parent's own stack never overlap one another: their durations are
 * summed (O(1) a row, whatever the number of children). Children that may overlap (the
 * roots of asyncio tasks created under the span, and the span's own children that closed
 * after it created a task: record flag HS_F_OVERLAP) are merged into a list of disjoint
 * intervals, so 100 tasks under a gather cover their union once, not 100 times.
 *
 * Free of Python.h; no lock (drain() converts one batch at a time, under its own lock).
 */
#ifndef HS_SELFTIME_H
#define HS_SELFTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hs_self_state hs_self_state;

/* The self time of the span (id, start_ns, end_ns) whose children the state has seen, and
 * the span added to its parent's children (parent 0: a root). overlap: the span may
 * overlap its siblings. Out of memory, what could not be kept is left out (a self time
 * then counts that child's time as the parent's own: never negative). */
int64_t hs_self_step(hs_self_state **state, uint64_t id, uint64_t parent, int64_t start_ns, int64_t end_ns,
                     int overlap);
void hs_self_state_free(hs_self_state *state);

#ifdef __cplusplus
}
#endif
#endif
