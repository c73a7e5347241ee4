/* hs_columns: the columnar conversion of the drain's segments (hs_drain.h): one pass in C
 * turns them into Arrow-ready column buffers. Free of Python.h.
 */
#ifndef HS_COLUMNS_H
#define HS_COLUMNS_H

#include <stddef.h>
#include <stdint.h>

#include "hs_drain.h"

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
    int64_t *self_ns; /* the time its own code ran (hs_selftime.h) */
    int64_t *wait_ns; /* the time its asyncio task was suspended while it was innermost */
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

/* Sweep, then convert every segment into columns (caller frees with hs_columns_free). */
int hs_drain_collect(hs_columns *out, int32_t rank);
/* Column buffers (64-byte aligned; large ones huge-page backed and pooled). */
void *hs_buf_alloc(size_t bytes);
void *hs_buf_calloc(size_t bytes);
void hs_buf_free(void *p);
void hs_columns_free(hs_columns *c);
/* Held by hs_drain_collect (taken before the drain lock; hs_fork.c's handlers take it too). */
void hs_collect_lock(void);
void hs_collect_unlock(void);

#ifdef __cplusplus
}
#endif
#endif
