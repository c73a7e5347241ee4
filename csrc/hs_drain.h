/* hs_drain: the native drain thread and the segment store (the columnar conversion of
 * the segments is hs_columns.h's).
 *
 * The drain thread never takes the GIL: it moves records from every ring into segments
 * (32 bytes a span, plus a small header a batch) so recording threads never wait on
 * Python. hs_drain_collect() turns the segments into Arrow-ready column buffers with one
 * pass in C (hs_columns.c). Free of Python.h.
 */
#ifndef HS_DRAIN_H
#define HS_DRAIN_H

#include <pthread.h>
#include <stdint.h>

#include "hs_rawlog.h"
#include "hs_registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records taken off a thread's chain, left in place in their block, waiting for drain(). */
typedef struct hs_segment {
    struct hs_segment *next;
    hs_thread_info *info;
    hs_block *block;       /* holds a reference (drain lock) */
    const hs_record *recs; /* in block */
    uint64_t base_seq;     /* info->drain_seq before this segment's first record */
    uint64_t nslots;
    uint64_t nspans;
    int in_raw; /* written to a raw log already (hs_rawlog.h): a later one does not take it */
} hs_segment;

/* What drain() takes from the drain side at once: every segment, and the pairs they use. */
typedef struct hs_drain_batch {
    hs_segment *segs;
    uint64_t spans;
    uint64_t *used_pairs; /* bitmap (malloc'd): pairs the segments use */
    uint32_t used_words;
    int used_incomplete;  /* a mark was lost: read the records for the pairs */
    hs_thread_info *dead; /* exited threads' infos, freed with the batch */
} hs_drain_batch;
/* Sweep, then take every segment (drain lock taken inside). */
void hs_drain_take(hs_drain_batch *out);
/* Give the batch back once converted (blocks to the pool, dead infos freed). */
void hs_drain_release(hs_drain_batch *batch);

/* Drops not yet reported (see hs_drain_ops.drops): the glue says how many it has reported. */
extern _Atomic uint64_t hs_drops_reported;
#define HS_DROPS_SIGNAL_NS 200000000ull

/* Start the drain thread if this process has none (after fork, or at first use). */
void hs_drainer_ensure(void);
void hs_wake_drainer(void);
/* Move everything recorded so far into segments (drain lock taken inside). */
void hs_drain_sweep(void);
/* The raw log (hs_rawlog.h) of record(dir): open it (0, or -1 with errno), and every
 * segment not yet drained goes in first; close it once everything recorded so far is in;
 * its counts, and the spans shed from memory because it had them (drain() will not see
 * them: see shed_written_locked in hs_drain.c). */
int hs_drain_raw_open(const char *path, int32_t rank, const char *version);
int hs_drain_raw_close(hs_rawlog_stats *out, uint64_t *shed);
void hs_drain_raw_stats(hs_rawlog_stats *out, uint64_t *shed);
/* Bytes and spans held in segments, not yet collected. */
void hs_drain_pending(uint64_t *bytes, uint64_t *spans, uint64_t *segments);
/* Bytes of freed segment memory kept for reuse (returned to the system after a second idle). */
uint64_t hs_drain_pool_bytes(void);
uint64_t hs_drain_period_us(void);
void hs_drain_set_period_us(uint64_t us);
/* Paused: the drain thread idles and only hs_drain_collect() moves records. */
void hs_drain_set_paused(int paused);
int hs_drain_paused(void);

void hs_drain_lock(void);
void hs_drain_unlock(void);
/* fork() (hs_fork.c): the start and drain locks held across it; in the child, the
 * parent's segments and drain thread forgotten (locks held, one thread). */
void hs_drain_fork_prepare(void);
void hs_drain_fork_release(void);
void hs_drain_after_fork_child(void);

/* Block size, memory cap (the ring's) and the drain thread's period (0 or less: unchanged). */
void hs_configure(int64_t capacity, int64_t memory_cap, int64_t drain_interval_us);
/* What the drain calls up into: the flight file (tick, block_drained) and the Python glue
 * (drops). One struct, installed whole at init (the module's, before any thread records);
 * a field left NULL does nothing. (The registry's thread_started and thread_exited are
 * hs_drainer_ensure and hs_wake_drainer: a new thread starts the drain thread if there is
 * none; an exited one wakes it.) */
typedef struct hs_drain_ops {
    /* On each pass of the drain thread (the flight file's "last seen" and clock). */
    void (*tick)(void);
    /* drain() converted a block's slots up to `upto` (drain lock held). */
    void (*block_drained)(hs_block *b, uint64_t upto);
    /* Drops said while the program runs: the drain thread calls this (never holding a
     * lock) at its first pass after the dropped count changed, then at most every
     * HS_DROPS_SIGNAL_NS while drops stay unreported (hs_drops_reported below the total).
     * The Python glue hands the report to the interpreter. */
    void (*drops)(void);
} hs_drain_ops;
/* Installs a copy of *ops (NULL: none). Once, before any thread records. */
void hs_drain_set_ops(const hs_drain_ops *ops);
/* pthread_create for hotspan's own threads: the new thread starts with every signal
 * blocked, so signals reach the program's threads (see hs_drain.c). */
int hs_thread_create_quiet(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

#ifdef __cplusplus
}
#endif
#endif
