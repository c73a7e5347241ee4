/* hs_drain: the native drain thread (hs_drain.c) and the columnar conversion (hs_columns.c).
 *
 * The drain thread never takes the GIL: it moves records from every ring into segments
 * (32 bytes a span, plus a small header a batch) so recording threads never wait on
 * Python. hs_drain_collect() turns the segments into Arrow-ready column buffers with one
 * pass in C. Free of Python.h.
 */
#ifndef HS_DRAIN_H
#define HS_DRAIN_H

#include <pthread.h>
#include <stdint.h>

#include "hs_registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hs_thread_row {
    int64_t tid;
    char *name;       /* malloc'd copy */
    uint64_t dropped;     /* cumulative, every cause */
    uint64_t dropped_cap; /* of which at the memory cap */
} hs_thread_row;

typedef struct hs_columns {
    uint64_t n;
    uint64_t *span_id;
    uint64_t *parent_id;
    uint8_t *parent_valid; /* Arrow validity bitmaps: bit i set = row i valid */
    int32_t *name_idx;
    int32_t *category_idx;
    uint8_t *category_valid;
    int64_t *start_ns;
    int64_t *end_ns;
    int64_t *duration_ns;
    int64_t *self_ns; /* duration minus the union of its children's intervals (hs_selftime.h) */
    int32_t *depth;
    int64_t *thread_id;
    int32_t *thread_idx;
    /* pid and rank are the same on every row: the Python glue hands out one shared buffer */
    int64_t *arg;
    uint8_t *arg_valid;
    uint8_t *error; /* Arrow boolean bitmap */
    /* dictionaries: UTF-8 strings as (blob, offsets[count + 1]) */
    uint32_t n_names, n_categories;
    char *names_blob, *categories_blob;
    int32_t *names_offsets, *categories_offsets;
    uint32_t n_threads;    /* threads that have rows in this batch */
    hs_thread_row *threads;
    uint32_t n_all_threads; /* threads of this process, for drop accounting: every live one,
                               and the exited ones that dropped spans */
    hs_thread_row *all_threads;
    uint64_t id_base;       /* this process's span id base */
} hs_columns;

/* Records taken off a thread's chain, left in place in their block, waiting for drain(). */
typedef struct hs_segment {
    struct hs_segment *next;
    hs_thread_info *info;
    hs_block *block;       /* holds a reference (drain lock) */
    const hs_record *recs; /* in block */
    uint64_t base_seq;     /* info->drain_seq before this segment's first record */
    uint64_t nslots;
    uint64_t nspans;
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

/* Start the drain thread if this process has none (after fork, or at first use). */
void hs_drainer_ensure(void);
void hs_wake_drainer(void);
/* Move everything recorded so far into segments (drain lock taken inside). */
void hs_drain_sweep(void);
/* Sweep, then convert every segment into columns (caller frees with hs_columns_free). */
int hs_drain_collect(hs_columns *out, int32_t rank);
/* Column buffers (64-byte aligned; large ones huge-page backed and pooled). */
void *hs_buf_alloc(size_t bytes);
void *hs_buf_calloc(size_t bytes);
void hs_buf_free(void *p);
void hs_columns_free(hs_columns *c);
/* Held by hs_drain_collect (taken before the drain lock; the atfork handlers take it too). */
void hs_collect_lock(void);
void hs_collect_unlock(void);
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
void hs_drain_after_fork_child(void);
/* Register the fork handlers (idempotent): a child gets its own span id base and state. */
void hs_drain_init_atfork(void);
/* pthread_create for hotspan's own threads: the new thread starts with every signal
 * blocked, so signals reach the program's threads (see hs_drain.c). */
int hs_thread_create_quiet(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

#ifdef __cplusplus
}
#endif
#endif
