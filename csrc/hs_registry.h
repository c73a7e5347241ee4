/* hs_registry: per-thread recording state, chain registration (the only lock a recording
 * thread ever takes, once per thread), span id ranges, global switches, and the drain-side
 * bookkeeping of a thread until its last record is drained (its name and drop counters;
 * an exited thread's drops outlive it in the exited threads' rows).
 *
 * Free of Python.h: native callers record through the same functions.
 */
#ifndef HS_REGISTRY_H
#define HS_REGISTRY_H

#include <stdatomic.h>
#include <stdint.h>

#include "hs_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Span ids: a process draws a random 64-bit base at its first span (and again in a forked
 * child) and hands its threads ranges of HS_ID_RANGE consecutive ids (base + k * range,
 * from a per-process counter) on their slow path. A span's id is its thread's sequence
 * number itself, so ids are unique across any number of threads of a process, and across
 * processes (forks, ranks) but for a chance of 2^-64 per pair of ranges. The two ranges
 * that hold 0 and 2^64 - 1 are never handed out: 0 means "no parent". */
#define HS_ID_RANGE_BITS 20
#define HS_ID_RANGE (1ull << HS_ID_RANGE_BITS)

typedef struct hs_thread_info {
    int64_t tid;                    /* OS thread id */
    char *name;                     /* registry lock */
    _Atomic uint64_t dropped_cap;   /* written by the owning thread only: the memory cap was reached */
    _Atomic uint64_t dropped_other; /* out of memory, or a slow path failed */
    uint64_t drain_seq;             /* drain lock: last full id seen */
    uint64_t batch_gen;             /* drain side: the batch whose thread slot batch_tix is */
    int32_t batch_tix;
    struct hs_self_state *self_state; /* drain side: open spans' closed children (hs_selftime.h) */
    _Atomic int alive;
    struct hs_thread_info *next;    /* registry list (registry lock) */
} hs_thread_info;

/* Drops of threads that exited and whose state was freed (registry lock). */
typedef struct hs_drop_row {
    int64_t tid;
    char *name;
    uint64_t cap, other;
} hs_drop_row;

typedef struct hs_frame {
    uint64_t start;
    uint64_t seq;
    const void *owner; /* the span object (or a sentinel) that opened the frame */
    int64_t arg;
    uint32_t pair;
    uint32_t path;
    uint32_t flags;
    uint32_t pad;
} hs_frame;

typedef struct hs_tstate {
    hs_writer w;              /* the current block: what the hot path writes through */
    uint64_t seq;             /* next span id (pre-order) */
    uint64_t seq_end;         /* end of the thread's id range */
    uint64_t last_pushed_seq; /* for the 2^30 window of hs_seq_extend */
    hs_chain *chain;
    hs_thread_info *info;
    uint32_t depth;
    uint32_t stack_cap;
    hs_frame *stack;
    /* Coroutines interleaving on one thread (asyncio tasks) each nest in a stack of their
     * own: the stack above is the one of the Python context `ctx` (each Task runs its steps
     * in its own contextvars context). ctx_slot points at the word that holds the thread's
     * current context (its PyThreadState's `context`), or at ctx_none (always NULL) on a
     * thread Python does not run on, so the hot path tells tasks apart with two loads and
     * one compare, and switches stacks (hs_ctx_switch, out of line) when they differ. */
    void *const *ctx_slot;
    void *ctx;
    void *ctx_none;
    void *stack_owner; /* NULL: the thread's own stack is current; else the glue's stack object */
    hs_frame *own_stack; /* the thread's own stack while another one is current */
    uint32_t own_depth;
    uint32_t own_cap;
    uint64_t serial; /* unique per registration: stack objects name their thread by it */
    /* The event loop's step hook (hs_tasks.c), never the hot path: the stack of the task
     * step running on the thread (a strong reference to the glue's stack object, or NULL),
     * and whether a step the hook saw begin is running. */
    void *step;
    int in_step;
    /* The thread's own stack object (strong): the thread may have been linked inside a
     * task's step (its context is then that task's) before the hook was installed. */
    void *base_stack;
} hs_tstate;

/* A span site: a (name, category) with its interned ids and a one-entry cache of the
 * pair it resolves to under the last parent path seen. Sites are never freed. */
typedef struct hs_site {
    uint32_t name;
    uint32_t category;
    uint32_t root_pair; /* the pair under no category path */
    uint32_t pad;
    _Atomic uint64_t nested; /* (parent path << 32) | pair; 0 = empty (paths are >= 1) */
} hs_site;

/* initial-exec: one direct %fs-relative load instead of a __tls_get_addr call; the
 * variable is one pointer, well within the static TLS surplus kept for dlopen. */
extern _Thread_local hs_tstate *hs_tls __attribute__((tls_model("initial-exec")));
extern _Atomic int hs_enabled;

/* Register the calling thread (its chain, and a first block when under the cap). NULL when
 * out of memory. */
hs_tstate *hs_tstate_register(void);
/* What the registry calls up into, so that it names none of the units above it: the
 * Python glue (a thread's name, its context), the drain (a thread started, one exited)
 * and the flight file (where a thread's state and first frames live). One struct,
 * installed whole at init (the module's, before any thread registers); a field left NULL
 * does nothing. */
typedef struct hs_registry_ops {
    /* Once per new thread at registration, outside any lock, to name it: a malloc'd
     * string or NULL (the glue: threading's name; it may run Python code). */
    char *(*thread_name)(void);
    /* Once per new thread at registration, after hs_tls is set: the glue points ctx_slot at
     * the thread's context (when Python runs on it). */
    void (*thread_link)(hs_tstate *t);
    /* The thread's current context is not its stack's (ctx_slot != ctx): the glue makes
     * the context's own stack current. Unset, or when it cannot, the current stack is kept. */
    void (*ctx_switch)(hs_tstate *t);
    /* The flight file keeps a thread's state and first frames in a slot of its file:
     * tstate_alloc gives a zeroed state with the slot's frames (NULL: none, allocate as
     * usual), tstate_release says whether the state was the file's (then not freed),
     * stack_kept whether frames are a slot's (never freed nor reallocated); thread_renamed
     * follows hs_set_thread_name. */
    hs_tstate *(*tstate_alloc)(int64_t tid, const char *name, hs_frame **frames, uint32_t *nframes);
    int (*tstate_release)(hs_tstate *t);
    int (*stack_kept)(const void *frames);
    void (*thread_renamed)(hs_tstate *t, const char *name);
    /* Around a slow path that rearranges a thread's current stack in place (an
     * out-of-order exit, an asyncio task's stack switch): the flight file's seqlock, so a
     * reader retries. */
    void (*stack_edit_begin)(hs_tstate *t);
    void (*stack_edit_end)(hs_tstate *t);
    /* A thread registered (the drain starts its thread if this process has none), and one
     * exited (the drain is woken to take what it left). */
    void (*thread_started)(void);
    void (*thread_exited)(void);
} hs_registry_ops;
/* Installs a copy of *ops (NULL: none). Once, before any thread registers. */
void hs_registry_set_ops(const hs_registry_ops *ops);
/* The ops' stack edits, for the units that rearrange a stack in place (the recorder's
 * out-of-order exit, the task glue's switch): slow paths only. */
void hs_stack_edit_begin(hs_tstate *t);
void hs_stack_edit_end(hs_tstate *t);
/* Out of line: the thread's context changed since its stack was made current (a task
 * step began or ended). The glue switches stacks (ops.ctx_switch); whatever it could not
 * do, the current stack is adopted for the new context, as before tasks had stacks of
 * their own. The hot path's hs_ctx_check calls it. */
void hs_ctx_switch(hs_tstate *t);
void hs_set_thread_name(hs_tstate *t, const char *name);
int hs_stack_grow(hs_tstate *t);
/* The thread's id range is used up: take the next one; returns its first id. */
uint64_t hs_seq_refill(hs_tstate *t);
/* This process's id base (drawn at the first registration, and again after fork). */
uint64_t hs_id_base(void);
/* A fresh range of HS_ID_RANGE span ids, unique in the process (as a thread's): ids for
 * rows the rings do not carry (device rows resolved at drain). */
uint64_t hs_take_id_range(void);

uint64_t hs_get_capacity(void);
uint64_t hs_get_memory_cap(void);
uint64_t hs_dropped_total(void);
/* Spans the drain side took and then lost (out of memory while handing them over): counted
 * with the drops for other causes, on no thread (the batch no longer knows its threads). */
void hs_count_lost(uint64_t spans);
/* Drops by cause, over every thread (exited ones included). */
void hs_dropped_by_cause(uint64_t *cap, uint64_t *other);

/* Registry walking (drain side). */
void hs_registry_lock(void);
void hs_registry_unlock(void);
hs_chain *hs_registry_chains(void);         /* registry lock held */
hs_thread_info *hs_registry_infos(void);    /* registry lock held */
/* A retired chain fully taken: unlink and free it, and unlink its thread's info, folding
 * its drop counts into the exited threads' (registry lock held). The info itself is freed
 * by the caller once nothing refers to it. */
void hs_registry_retire(hs_chain *ch);
/* Rows of exited threads that dropped spans (registry lock held). */
hs_drop_row *hs_registry_exited_drops(uint32_t *n);

/* fork(), in the child (locks held, one thread): forget every other thread; the calling
 * thread gets a fresh chain and the child a fresh id base (hs_fork.c calls it once the
 * inherited segments are discarded and the flight file let go). */
void hs_registry_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
