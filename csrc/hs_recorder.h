/* hs_recorder: the hot path. Enter pushes a frame on the thread's own stack; exit pops
 * it and writes one 32-byte record into the thread's current block. No lock, no
 * allocation, no Python: a thread's first span (registration), a stack deeper than ever
 * before, and a site's first use under a new parent path are slow paths taken once; a
 * full block (one CAS on the block pool) and a used-up id range (one atomic add) are taken
 * once every block or 2^20 spans.
 *
 * Free of Python.h.
 */
#ifndef HS_RECORDER_H
#define HS_RECORDER_H

#include "hs_clock.h"
#include "hs_compiler.h"
#include "hs_intern.h"
#include "hs_registry.h"
#include "hs_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A frame-only flag (bit 9, beyond the 8 bits of flags a record keeps: hs_push shifts it
 * out): the frame pushed an NVTX range, so its close pops one. Kept on the frame rather
 * than read from hs_nvtx_on at exit, so switching NVTX while spans are open never pops a
 * range that was not pushed. (hs_types.c's HS_FRAME_SYNC is bit 8.) */
#define HS_FRAME_NVTX 0x200u

/* NVTX passthrough, a plug-in (hs_nvtx.c): 1 while it is on. Off, the hot path pays one
 * load of hs_nvtx_on and a branch predicted not taken; on, it calls through the installed
 * ops below, so the recorder never names the plug-in. */
extern _Atomic int hs_nvtx_on;
/* What the recorder calls up into (the NVTX passthrough), only while hs_nvtx_on. One
 * struct, installed whole at init (the module's, before it can set hs_nvtx_on). */
typedef struct hs_recorder_ops {
    /* The frame just opened (pair, arg, flags set): push its range, mark the frame. */
    void (*enter)(hs_frame *f);
    /* A frame marked HS_FRAME_NVTX was closed. */
    void (*pop)(void);
    /* An instant: an NVTX mark. */
    void (*mark)(uint32_t pair, int64_t arg, uint32_t flags);
    /* A (name, path) pair was interned or resolved while NVTX is on. */
    void (*pair_seen)(uint32_t pair);
} hs_recorder_ops;
/* Installs a copy of *ops (NULL: none). Once, before hs_nvtx_on can be set. */
void hs_recorder_set_ops(const hs_recorder_ops *ops);
/* The installed copy, read by the inline paths below (one load, as a plain function
 * pointer would be: no extra indirection); written only by hs_recorder_set_ops. */
extern hs_recorder_ops hs_recorder_installed;

/* Owners of frames that no span object opened. */
extern const char hs_owner_begin[1];
extern const char hs_owner_native[1];

/* Frame bit: an asyncio task's stack was made under this frame (hs_tasks.c), so children
 * that close from now on may overlap one another: they carry HS_F_OVERLAP. The shift puts
 * the frame bit on the record bit with no branch. (HS_FRAME_SYNC is 0x100, HS_FRAME_NVTX
 * 0x200.) */
#define HS_FRAME_SPAWNED 0x400u
#define HS_FRAME_SPAWNED_SHIFT 6
_Static_assert((HS_FRAME_SPAWNED >> HS_FRAME_SPAWNED_SHIFT) == HS_F_OVERLAP, "frame bit -> record bit");
/* Frame bit: the creator's frame copied below a task's own frames (hs_tasks.c): a span
 * opened right above it is the task's root and carries HS_F_TASKROOT, by the same shift. */
#define HS_FRAME_FOREIGN 0x800u
_Static_assert((HS_FRAME_FOREIGN >> HS_FRAME_SPAWNED_SHIFT) == HS_F_TASKROOT, "frame bit -> record bit");
/* The record flags a child of the frame carries: one shift and one mask, no branch. */
#define HS_CHILD_FLAGS(parent_frame_flags) \
    (((parent_frame_flags) >> HS_FRAME_SPAWNED_SHIFT) & (HS_F_OVERLAP | HS_F_TASKROOT))

int hs_site_resolve_slow(hs_site *s, uint32_t parent_path, uint32_t *pair);
void hs_exit_slow(hs_tstate *t, const void *owner, uint64_t end, int error);
void hs_count_drop(hs_tstate *t);
hs_record *hs_push_switch(hs_tstate *t, uint64_t n);

/* The current stack must be the current context's (see hs_tstate.ctx_slot): a pointer
 * compare; sync code never takes the branch. */
HS_HOT void hs_ctx_check(hs_tstate *t) {
    if (HS_UNLIKELY(*t->ctx_slot != t->ctx)) hs_ctx_switch(t);
}

HS_HOT hs_tstate *hs_tstate_get(void) {
    hs_tstate *t = hs_tls;
    return HS_LIKELY(t != NULL) ? t : hs_tstate_register();
}

/* The pair and category path of a site entered under parent_path. */
HS_HOT int hs_site_resolve(hs_site *s, uint32_t parent_path, uint32_t *pair, uint32_t *path) {
    if (HS_LIKELY(parent_path == 0)) {
        *pair = s->root_pair;
        *path = s->category;
        return 0;
    }
    uint64_t c = atomic_load_explicit(&s->nested, memory_order_acquire);
    if (HS_LIKELY((uint32_t)(c >> 32) == parent_path)) {
        *pair = (uint32_t)c;
    } else if (hs_site_resolve_slow(s, parent_path, pair) < 0) {
        return -1;
    }
    *path = s->category ? hs_pair_path(*pair) : parent_path;
    return 0;
}

/* Open a span. Returns 1 when a frame was pushed (recording is on). */
HS_HOT int hs_enter(hs_site *s, const void *owner, int64_t arg, uint32_t flags) {
    if (HS_UNLIKELY(!atomic_load_explicit(&hs_enabled, memory_order_relaxed))) return 0;
    hs_tstate *t = hs_tstate_get();
    if (HS_UNLIKELY(!t)) return 0;
    hs_ctx_check(t);
    uint32_t d = t->depth;
    if (HS_UNLIKELY(d == t->stack_cap) && hs_stack_grow(t) < 0) {
        hs_count_drop(t);
        return 0;
    }
    hs_frame *f = &t->stack[d];
    uint32_t parent_path = d ? t->stack[d - 1].path : 0;
    if (HS_UNLIKELY(hs_site_resolve(s, parent_path, &f->pair, &f->path) < 0)) {
        hs_count_drop(t);
        return 0;
    }
    uint64_t seq = t->seq;
    if (HS_UNLIKELY(seq == t->seq_end)) seq = hs_seq_refill(t);
    /* For a reader of the stack in another process (the flight file, `hotspan top`): the
     * thread's next id changes before the frame is written and the depth after it, so a
     * reader that sees the same next id before and after copying the frames below the depth
     * it read copied no frame while it was rewritten (a seqlock whose counter is the id the
     * hot path bumps anyway: no extra store). The fence orders stores only: free on x86
     * (TSO; it just keeps the compiler from sinking the id's store), a dmb ishst on arm64. */
    t->seq = seq + 1;
    atomic_thread_fence(memory_order_release);
    f->owner = owner;
    f->arg = arg;
    f->flags = flags;
    f->seq = seq;
    /* NVTX passthrough: off, one load of a global and a branch predicted not taken; on, the
     * range is pushed (out of line) before the start timestamp, so its cost stays outside
     * the span. */
    if (HS_UNLIKELY(atomic_load_explicit(&hs_nvtx_on, memory_order_relaxed))) hs_recorder_installed.enter(f);
    f->start = hs_ticks(); /* last but the depth, so the span measures little of itself */
    __atomic_store_n(&t->depth, d + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Write the record of a frame that has just been popped (depth = its depth). */
HS_HOT void hs_push(hs_tstate *t, uint64_t start, uint64_t end, uint64_t seq, uint32_t pair,
                           int64_t arg, uint32_t flags, uint32_t depth, uint64_t parent_seq_plus1) {
    uint64_t dur = end > start ? end - start : 0;
    uint64_t pdelta = parent_seq_plus1 ? seq - (parent_seq_plus1 - 1) : 0;
    int64_t jump = (int64_t)(seq - t->last_pushed_seq);
    if (jump < 0) jump = -jump;
    int ext = (dur >> HS_DUR_BITS) | (pair >> HS_PAIR_BITS) | (depth >> HS_DEPTH_BITS) |
              (pdelta >> HS_PDELTA_BITS) | ((uint64_t)jump >= HS_SEQ_WINDOW);
    uint64_t n = ext ? 2 : 1;
    hs_record *rec = hs_writer_reserve(&t->w, n);
    if (HS_UNLIKELY(!rec)) {
        rec = hs_push_switch(t, n); /* the block is full: the next one */
        if (!rec) return;           /* dropped at the memory cap, counted */
    }
    rec->start = start;
    rec->arg = arg;
    if (HS_LIKELY(!ext)) {
        rec->w0 = dur | ((uint64_t)pair << 40) | ((uint64_t)flags << 56);
        rec->w1 = (uint32_t)seq | (pdelta << 32) | ((uint64_t)depth << 56);
    } else {
        rec->w0 = (uint64_t)(flags | HS_F_EXT) << 56;
        rec->w1 = (uint32_t)seq;
        hs_record_ext *x = (hs_record_ext *)(rec + 1);
        x->seq = seq;
        x->parent_seq_plus1 = parent_seq_plus1;
        x->dur = dur;
        x->depth = depth;
        x->pair = pair;
    }
    t->last_pushed_seq = seq;
    hs_writer_publish(&t->w, n);
}

/* Pop the innermost frame and write its record. */
HS_HOT void hs_close_top(hs_tstate *t, uint64_t end, int error) {
    uint32_t d = --t->depth;
    hs_frame *f = &t->stack[d];
    uint32_t flags = f->flags;
    /* The parent's id and (for self time) whether it created a task: the same frame, the
     * same cache line, one more load. */
    uint64_t parent_seq_plus1 = 0;
    uint32_t child_flags = 0;
    if (d) {
        parent_seq_plus1 = t->stack[d - 1].seq + 1;
        child_flags = HS_CHILD_FLAGS(t->stack[d - 1].flags);
    }
    hs_push(t, f->start, end, f->seq, f->pair, f->arg, flags | child_flags | (error ? HS_F_ERROR : 0), d,
            parent_seq_plus1);
    /* the frame's own flag, already loaded: a test and a branch predicted not taken */
    if (HS_UNLIKELY(flags & HS_FRAME_NVTX)) hs_recorder_installed.pop();
}

/* Close the innermost span opened by owner (normally the top frame). */
HS_HOT void hs_exit(const void *owner, int error) {
    uint64_t end = hs_ticks(); /* first, for the same reason as in hs_enter */
    hs_tstate *t = hs_tls;
    if (HS_UNLIKELY(!t)) return;
    hs_ctx_check(t);
    if (HS_UNLIKELY(!t->depth)) return;
    if (HS_UNLIKELY(t->stack[t->depth - 1].owner != owner)) {
        hs_exit_slow(t, owner, end, error);
        return;
    }
    hs_close_top(t, end, error);
}

/* A zero-duration marker under the current span. */
HS_HOT void hs_instant(hs_site *s, int64_t arg, uint32_t flags) {
    if (HS_UNLIKELY(!atomic_load_explicit(&hs_enabled, memory_order_relaxed))) return;
    hs_tstate *t = hs_tstate_get();
    if (HS_UNLIKELY(!t)) return;
    hs_ctx_check(t);
    uint32_t d = t->depth;
    uint32_t pair, path;
    if (HS_UNLIKELY(hs_site_resolve(s, d ? t->stack[d - 1].path : 0, &pair, &path) < 0)) {
        hs_count_drop(t);
        return;
    }
    uint64_t seq = t->seq;
    if (HS_UNLIKELY(seq == t->seq_end)) seq = hs_seq_refill(t);
    t->seq = seq + 1;
    if (HS_UNLIKELY(atomic_load_explicit(&hs_nvtx_on, memory_order_relaxed))) hs_recorder_installed.mark(pair, arg, flags);
    uint64_t now = hs_ticks();
    hs_push(t, now, now, seq, pair, arg, flags | HS_F_INSTANT, d, d ? t->stack[d - 1].seq + 1 : 0);
}

/* Counter records dropped at the memory cap (or out of memory), by the recording threads
 * (hs_counters.h adds the drain side's). */
extern _Atomic uint64_t hs_counter_drops;
hs_record *hs_counter_switch(hs_tstate *t);

/* A counter's value now (hs_counters.h): one record, HS_F_COUNTER, the name's pair (a
 * site's root_pair) in w1. No span id, no frame, no lock, no allocation, no system call. */
HS_HOT void hs_counter(uint32_t pair, double value) {
    if (HS_UNLIKELY(!atomic_load_explicit(&hs_enabled, memory_order_relaxed))) return;
    hs_tstate *t = hs_tstate_get();
    if (HS_UNLIKELY(!t)) return;
    hs_record *rec = hs_writer_reserve(&t->w, 1);
    if (HS_UNLIKELY(!rec)) {
        rec = hs_counter_switch(t); /* the block is full: the next one */
        if (!rec) return;           /* dropped at the memory cap, counted */
    }
    rec->start = hs_ticks();
    __builtin_memcpy(&rec->arg, &value, sizeof value);
    rec->w0 = (uint64_t)HS_F_COUNTER << 56;
    rec->w1 = pair;
    hs_writer_publish(&t->w, 1);
}

/* Sites: interned (name, category); NULL when out of memory. */
hs_site *hs_site_create(const char *name, size_t name_len, const char *category, size_t category_len);

#ifdef __cplusplus
}
#endif
#endif
