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
 * Self and wait (DESIGN.md): a span of an asyncio task whose steps the event loop's hook
 * saw (hs_tasks.c) gets, in `wait`, the time its task spent suspended while it was the
 * task's innermost open span (hs_wait_add, read back by the drain with hs_wait_take). Its
 * self time is then its duration minus its children *on its own stack* (the roots of
 * tasks it created, record flag HS_F_TASKROOT, run in other tasks: while they run, its
 * own task is suspended and that time is already in `wait`) minus the wait. Every other
 * span keeps the rule above.
 *
 * Free of Python.h; the state has no lock (drain() converts one batch at a time, under its
 * own lock); the wait map has one (written by the step hook, read by the drain).
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
 * overlap its siblings; task_root: it is the root of a task created under its parent (on
 * another stack). in_task: the span is on a task's stack whose suspensions were seen, with
 * *wait_ns the time its task was suspended while it was innermost (clipped to what its own
 * stack leaves it; 0 otherwise). Out of memory, what could not be kept is left out (a self
 * time then counts that child's time as the parent's own: never negative). */
int64_t hs_self_step(hs_self_state **state, uint64_t id, uint64_t parent, int64_t start_ns, int64_t end_ns,
                     int overlap, int task_root, int in_task, int64_t *wait_ns);
void hs_self_state_free(hs_self_state *state);

/* The wait map: span id -> time (clock ticks) its task was suspended while it was the
 * task's innermost open span. hs_wait_add(id, 0) marks the span as one of a task whose
 * steps are seen (so its self time follows the task rule). Out of memory: not kept. */
void hs_wait_add(uint64_t id, uint64_t ticks);
/* Whether the span has an entry (removed, its ticks in *ticks). Cheap when the map is empty. */
int hs_wait_take(uint64_t id, uint64_t *ticks);
/* The raw log (hs_rawlog.h) writes a segment's waits without taking them (drain() may still
 * convert the same records): for each of the n ids with an entry, (id, ticks) into pairs
 * (2 words each, room for n); returns how many. One lock for the lot. */
uint64_t hs_wait_peek(const uint64_t *ids, uint64_t n, uint64_t *pairs);
/* Whether the map has any entry (an atomic load: a drain of sync spans asks nothing more). */
int hs_wait_any(void);
/* fork(), in the child: a fresh lock, the parent's entries forgotten. */
void hs_wait_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
