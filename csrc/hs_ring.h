/* hs_ring: a thread's records, as a chain of fixed-size blocks (the perf/LTTng sub-buffer
 * switch; Perfetto's shared-memory chunks).
 *
 * Free of Python.h. A recording thread (the single producer of its chain) writes records
 * into its current block and publishes the block's head with a release store. When the
 * block is full, the thread itself moves on to a fresh block taken from a lock-free pool
 * (an out-of-line slow path: one CAS, no lock, no system call while the pool has blocks),
 * links it after the full one with a release store, and never touches the full one again:
 * the drain side (the single consumer, under its lock) reads each block up to its head,
 * follows the link once the block is sealed, and gives blocks back to the pool when nothing
 * refers to them any more. So a thread never waits for the drain side and never drops a
 * record because the drain thread did not get a core: a record is dropped only when every
 * block the recorder may hold (the memory cap, counting the pool too) is taken.
 */
#ifndef HS_RING_H
#define HS_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One completed span, written when it ends (so a thread's records are in post-order).
 *
 *   start   raw ticks at enter
 *   arg     user payload, meaningful when HS_F_ARG
 *   w0      bits  0..39 duration in ticks | 40..55 pair id | 56..63 flags
 *   w1      bits  0..31 low 32 bits of the span's id (its sequence number, taken at enter)
 *           bits 32..55 id - parent's id (0: a root) | 56..63 depth
 *
 * A field that does not fit (a span over 2^40 ticks, pair id >= 2^16, depth >= 256, a
 * parent more than 2^24 ids back, an id jump of 2^30 since the last pushed record, as
 * when a thread takes a new id range) sets HS_F_EXT and is carried in full by an extension
 * record in the next slot, published together with it. The consumer rebuilds the 64-bit id
 * from the low bits and the previous record's. Both stay 32 bytes: a cache line holds two.
 */
typedef struct hs_record {
    uint64_t start;
    int64_t arg;
    uint64_t w0;
    uint64_t w1;
} hs_record;

typedef struct hs_record_ext {
    uint64_t seq;
    uint64_t parent_seq_plus1; /* 0: a root */
    uint64_t dur;
    uint32_t depth;
    uint32_t pair;
} hs_record_ext;

_Static_assert(sizeof(hs_record) == 32, "records are 32 bytes");
_Static_assert(sizeof(hs_record_ext) == 32, "extension records are 32 bytes");

enum {
    HS_F_ERROR = 1,   /* the span exited through an exception */
    HS_F_ARG = 2,     /* arg is set */
    HS_F_INSTANT = 4, /* a zero-duration marker */
    HS_F_EXT = 8,     /* an hs_record_ext follows in the next slot */
    /* The span's parent had created an asyncio task when the span closed (or the span is
     * the root of such a task): it may overlap its siblings, so drain() merges it into
     * their union instead of summing it (hs_selftime.h). */
    HS_F_OVERLAP = 16,
    /* The span is the root of an asyncio task's stack: its parent (the creator's innermost
     * span) is on another stack, suspended or busy elsewhere while this one runs
     * (hs_selftime.h: a task's span does not count its tasks' roots as covering it). */
    HS_F_TASKROOT = 32,
    /* Not a span: a counter's value at a time (hs_counters.h). start: raw ticks, arg: the
     * value's IEEE-754 bits, w0: only the flags, w1: the name's pair. It takes no span id
     * (readers skip it when rebuilding ids) and never carries HS_F_EXT. */
    HS_F_COUNTER = 64,
};

#define HS_DUR_BITS 40
#define HS_PAIR_BITS 16
#define HS_PDELTA_BITS 24
#define HS_DEPTH_BITS 8
#define HS_SEQ_WINDOW (1ull << 30)

static inline uint64_t hs_rec_dur(const hs_record *r) { return r->w0 & ((1ull << HS_DUR_BITS) - 1); }
static inline uint32_t hs_rec_pair(const hs_record *r) { return (uint32_t)((r->w0 >> 40) & 0xffff); }
static inline uint32_t hs_rec_flags(const hs_record *r) { return (uint32_t)(r->w0 >> 56); }
static inline uint32_t hs_rec_seq32(const hs_record *r) { return (uint32_t)r->w1; }
static inline uint32_t hs_rec_pdelta(const hs_record *r) { return (uint32_t)((r->w1 >> 32) & 0xffffff); }
static inline uint32_t hs_rec_depth(const hs_record *r) { return (uint32_t)(r->w1 >> 56); }

/* The 64-bit value nearest to prev whose low 32 bits are low (valid while the true
 * distance is under 2^31; the producer guarantees 2^30 or writes an extension). */
static inline uint64_t hs_seq_extend(uint64_t prev, uint32_t low) {
    int32_t diff = (int32_t)(low - (uint32_t)prev);
    return prev + (uint64_t)(int64_t)diff;
}

/* ---- blocks ------------------------------------------------------------------------------ */

typedef struct hs_block {
    /* producer: slots written so far (release); final once next is set */
    _Alignas(64) _Atomic uint64_t head;
    /* producer: the block that follows, set (release) once this one is sealed */
    _Atomic(struct hs_block *) next;
    uint64_t cap;   /* slots */
    uint64_t bytes; /* counted against the memory cap: cap * sizeof(hs_record) */
    uint64_t alloc; /* bytes allocated (header included) */
    uint32_t refs;  /* consumer side only (under its lock): the chain's + each segment's */
    uint32_t mapped; /* 0: malloc'd, 1: its own mapping, HS_BLOCK_FLIGHT: in the flight file */
    /* The flight file's view of the block (hs_flight.h), for a process that recovers the
     * file after this one died; never read by this process's drain side. */
    _Atomic uint32_t flight_state; /* 1 while a thread's chain holds it, 0 in the pool */
    uint32_t flight_pad;
    int64_t flight_tid;            /* the OS thread id of the thread writing it */
    uint64_t flight_base_seq;      /* the full id before the block's first record */
    _Atomic uint64_t flight_drained; /* slots drain() has converted (the rest is recovered) */
    _Alignas(64) hs_record recs[];
} hs_block;

#define HS_BLOCK_FLIGHT 2u

/* What the ring calls up into: a provider of block memory (the flight file, hs_flight.c;
 * the ring stays free of it). One struct, installed whole at init (the module's, before
 * any thread records); a field left NULL does nothing. */
typedef struct hs_ring_ops {
    /* Whether blocks come from the provider now: every block is then of the configured
     * size (a flight file's are all of it). */
    int (*providing)(void);
    /* A free block of `records` records (NULL: none of that size left, or not providing:
     * allocate as usual); *bytes: the block's size in the provider. */
    hs_block *(*block_alloc)(uint64_t records, uint64_t *bytes);
    /* A block it gave (mapped == HS_BLOCK_FLIGHT) goes back to it. */
    void (*block_free)(hs_block *b);
} hs_ring_ops;
/* Installs a copy of *ops (NULL: none). Once, before any thread records. */
void hs_ring_set_ops(const hs_ring_ops *ops);

/* A block taken by the thread tid whose last pushed id is base_seq (slow path: after a
 * switch, before its first record is published). Only flight file blocks keep it. */
static inline void hs_block_claim(hs_block *b, int64_t tid, uint64_t base_seq) {
    if (!b || b->mapped != HS_BLOCK_FLIGHT) return;
    b->flight_tid = tid;
    b->flight_base_seq = base_seq;
    atomic_store_explicit(&b->flight_drained, 0, memory_order_relaxed);
    atomic_store_explicit(&b->flight_state, 1, memory_order_release);
}

/* Records per block and the memory cap on every block held (in use, waiting for the
 * drain side, or pooled): set by configure, read on the slow path only. */
extern _Atomic uint64_t hs_block_records;
extern _Atomic uint64_t hs_memory_cap;
/* A thread's first block holds this many records (1 KiB); each switch doubles the next
 * block's size up to hs_block_records. So a thread that records a few spans holds 1 KiB,
 * not a full block: 10,000 live threads fit in 10 MiB where full blocks took 320 MiB and
 * filled the cap with empty memory. A thread recording flat out reaches the full size after
 * log2(hs_block_records / 32) switches and stays there (the steady state is unchanged). With
 * a flight file every block is full size: the file's blocks are all of one size. */
#define HS_FIRST_BLOCK_RECORDS 32u
extern _Atomic uint64_t hs_first_block_records;

/* Why records were dropped at the cap, classified at each drop (slow path, at the cap
 * only): the blocks that threads are writing into (many live threads) filled most of it,
 * or records not drained yet (sealed blocks, and segments the drain thread took for
 * drain()) did. */
typedef struct hs_cap_causes {
    uint64_t undrained;     /* drain more often, or raise the cap */
    uint64_t thread_blocks; /* raise the cap, or lower capacity */
    uint64_t live_threads_at_last; /* threads writing into a block at the last drop */
} hs_cap_causes;
/* A record was dropped at the cap by a thread whose current block (full) is own_bytes. */
void hs_cap_drop_note(uint64_t own_bytes);
void hs_cap_causes_get(hs_cap_causes *out);
/* Bytes of the blocks threads are writing into now (one per live thread). */
uint64_t hs_blocks_current_bytes(void);

/* Bytes of blocks held (all of them) and pooled (free, kept for reuse). */
uint64_t hs_blocks_held_bytes(void);
uint64_t hs_blocks_pool_bytes(void);
/* Give a block nothing refers to any more back to the pool (or the system). */
void hs_block_put(hs_block *b);
/* Hand every pooled block back to the system. */
void hs_pool_trim(void);
/* Keep up to n blocks of the current size pooled while under the memory cap, so that a
 * recording thread's switch finds one without a system call (drain side). */
void hs_pool_refill(uint32_t n);
/* After fork, in the child (one thread), once every inherited chain and segment is
 * discarded: forget the pool and every count (a pool cell may have been half-updated at
 * the fork). */
void hs_blocks_after_fork_child(void);

/* ---- a thread's chain --------------------------------------------------------------------- */

/* The producer's side, kept in the recording thread's own state: the hot path reads only
 * these four words. */
typedef struct hs_writer {
    hs_record *slots;
    uint64_t pos;   /* slots written in the current block */
    uint64_t limit; /* the current block's capacity (0: no block yet) */
    hs_block *blk;
} hs_writer;

/* The consumer's side. */
typedef struct hs_chain {
    _Atomic(hs_block *) rd; /* the block being read; set by the producer only from NULL */
    uint64_t rd_pos;        /* slots of rd already taken */
    _Atomic int retired;    /* the owning thread exited (after its last publish) */
    void *owner_info;       /* registry back-pointer (opaque here) */
    struct hs_chain *next;  /* registry list (registry lock) */
} hs_chain;

/* A thread with a current block exits (its owner, once, before retiring its chain). */
void hs_writer_retire(hs_writer *w);

enum { HS_SWITCH_OK = 0, HS_SWITCH_CAP = 1, HS_SWITCH_NOMEM = 2 };

/* Producer: room for n (1 or 2) slots in the current block, else NULL (switch first). */
static inline hs_record *hs_writer_reserve(hs_writer *w, uint64_t n) {
    return w->pos + n <= w->limit ? &w->slots[w->pos] : NULL;
}
static inline void hs_writer_publish(hs_writer *w, uint64_t n) {
    w->pos += n;
    atomic_store_explicit(&w->blk->head, w->pos, memory_order_release);
}
/* Producer, slow path: move on to a fresh block (pooled, else allocated under the memory
 * cap) and link it after the current one: twice the current one's size (the first:
 * hs_first_block_records) up to hs_block_records. HS_SWITCH_CAP: the cap is reached (the
 * record is dropped; the current block stays). */
int hs_writer_switch(hs_chain *ch, hs_writer *w);

hs_chain *hs_chain_create(void);
/* Consumer: the next run of published records not taken yet: returns the slot count (0:
 * none now) with *blk and *recs; the caller takes a reference on *blk if it keeps the
 * records, then calls hs_chain_advance. Sealed blocks passed over are unreferenced. */
uint64_t hs_chain_peek(hs_chain *ch, hs_block **blk, const hs_record **recs);
void hs_chain_advance(hs_chain *ch, uint64_t count);
/* Consumer: nothing published is left untaken (after a retire: the chain can go). */
int hs_chain_empty(hs_chain *ch);
/* Consumer: drop the chain's reference on its blocks and free it. */
void hs_chain_destroy(hs_chain *ch);
/* After fork, in the child: the same, handing memory straight back to the system (the
 * pool and its counts are reset afterwards). */
void hs_chain_discard(hs_chain *ch);
void hs_block_discard_ref(hs_block *b);
/* Consumer side: a reference is dropped (the block goes back to the pool at 0). */
static inline void hs_block_unref(hs_block *b) {
    if (--b->refs == 0) hs_block_put(b);
}

#ifdef __cplusplus
}
#endif
#endif
