/* hs_registry: per-thread recording state, ring registration (the only lock a recording
 * thread ever takes, once per thread), global switches, and the drain-side bookkeeping
 * that outlives a thread (its id, name and drop counters).
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

/* Thread indices (part of span ids) are 12 bits, 1..4095; a forked child takes the
 * indices of a block its parent sets aside at the fork. */
#define HS_THREAD_INDEX_MASK 0xfffu
#define HS_FORK_BLOCK 8u

typedef struct hs_thread_info {
    uint32_t index;                 /* 1..4095: registration order in this process, wrapping */
    int64_t tid;                    /* OS thread id */
    char *name;                     /* registry lock */
    _Atomic uint64_t dropped_full;  /* written by the owning thread only: its ring was full */
    _Atomic uint64_t dropped_other; /* drain side (memory cap) or slow-path failures */
    uint64_t drain_seq;             /* drain lock: last full sequence number seen */
    _Atomic int alive;
    struct hs_thread_info *next;
} hs_thread_info;

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
    hs_ring *ring;
    hs_thread_info *info;
    uint64_t seq;             /* next span sequence number (pre-order) */
    uint64_t last_pushed_seq; /* for the 2^30 window of hs_seq_extend */
    uint64_t ring_gen;
    uint32_t depth;
    uint32_t stack_cap;
    hs_frame *stack;
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
extern _Atomic uint64_t hs_ring_generation;

/* Register the calling thread (allocates its ring). NULL when out of memory. */
hs_tstate *hs_tstate_register(void);
/* Called once per new thread at registration, outside any lock, to name it; returns a
 * malloc'd string or NULL. Set by the Python glue. */
extern char *(*hs_thread_name_hook)(void);
void hs_set_thread_name(hs_tstate *t, const char *name);
int hs_stack_grow(hs_tstate *t);
/* The ring generation changed (configure): retire the ring, take a new one. */
hs_ring *hs_ring_renew(hs_tstate *t);

void hs_configure(int64_t capacity, int64_t memory_cap, int64_t drain_interval_us);
uint64_t hs_get_capacity(void);
uint64_t hs_get_memory_cap(void);
uint64_t hs_dropped_total(void);

/* Registry walking (drain side). */
void hs_registry_lock(void);
void hs_registry_unlock(void);
hs_ring *hs_registry_rings(void);          /* registry lock held */
hs_thread_info *hs_registry_infos(void);   /* registry lock held */
void hs_registry_unlink_ring(hs_ring *r);  /* registry lock held */

/* fork(): the parent sets a block of thread indices aside for the child (registry lock
 * held); in the child, forget everything but the calling thread, which takes the block's
 * first index (hs_drain.c calls both from its atfork handlers). */
void hs_registry_before_fork(void);
void hs_registry_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
