/* hs_counters: values recorded at a time (hotspan.counter, and the drain thread's samples
 * of the process's memory), a table of their own.
 *
 * Free of Python.h. A counter travels like a span: one 32-byte record flagged
 * HS_F_COUNTER in the recording thread's own block (hs_recorder.h's hs_counter: no lock,
 * no allocation, no system call), so it costs what a span's record costs and is dropped,
 * counted, only where a span would be (the memory cap). The drain side's sweep copies
 * counter records out of the blocks into this store (the drain lock held), and
 * drain_counters() takes the store. The drain thread also samples the process's resident
 * set size every configure(counters=SECONDS) (off by default: 0).
 */
#ifndef HS_COUNTERS_H
#define HS_COUNTERS_H

#include <stdint.h>

#include "hs_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hs_counter_row {
    uint64_t ticks;
    double value;
    int64_t tid;
    uint32_t pair; /* the name: a pair under no category path */
    uint32_t pad;
} hs_counter_row;

/* Rows the store holds at most: beyond it counters are dropped, counted. */
#define HS_COUNTERS_MAX_ROWS (1u << 20) /* 32 MiB */

/* Drain lock held (the sweep): the counter record r, written by thread tid. */
void hs_counters_note(const hs_record *r, int64_t tid);
/* Drain lock held: a sample taken by hotspan itself (tid 0). */
void hs_counters_add(uint64_t ticks, uint32_t pair, double value);
/* Drain lock held: hand the rows over (caller frees *rows with free()). */
uint64_t hs_counters_take(hs_counter_row **rows);
/* Counters dropped so far: at the memory cap (hs_counter_drops, the recording thread's) or
 * at the store's limit. */
uint64_t hs_counters_dropped(void);
void hs_counters_count_drop(void);
/* n values dropped past the store: from a Python consumer's full queue (hotspan.counters). */
void hs_counters_count_drops(uint64_t n);
/* Sampling: every interval_ns (0: off); the pair the RSS samples carry. */
void hs_counters_set_sampling(uint64_t interval_ns, uint32_t rss_pair);
uint64_t hs_counters_interval_ns(void);
typedef struct hs_counter_sample {
    uint64_t ticks;
    uint32_t pair;
    double value;
} hs_counter_sample;
#define HS_COUNTERS_MAX_SAMPLES 17 /* RSS and up to 16 devices */
/* Drain thread, each pass (drain lock not held): the samples due now (RSS, and each device's
 * memory in use through the ops below), at most max; the caller adds them under the drain
 * lock. */
int hs_counters_due(hs_counter_sample *out, int max);
/* What the sampler calls up into: a device plug-in (hs_cuda.c). One struct, installed
 * whole at init (the module's); a field left NULL does nothing. */
typedef struct hs_counters_ops {
    /* Writes the memory in use of each device it has a context for (bytes; a counter per
     * device) and returns how many (0: none loaded). Called on the drain thread, without
     * the drain lock. */
    int (*device_memory)(hs_counter_sample *out, int max);
} hs_counters_ops;
/* Installs a copy of *ops (NULL: none). Once, before any thread records. */
void hs_counters_set_ops(const hs_counters_ops *ops);
/* The process's resident set size in bytes (-1: unknown). */
int64_t hs_counters_rss_bytes(void);
/* After fork, in the child (drain lock held, one thread): the parent's rows are not ours. */
void hs_counters_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
