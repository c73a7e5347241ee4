/* hs_live: the live log's feed. While on, the drain side copies every record it moves
 * whose duration reaches a threshold (and every error) into a bounded queue, which a
 * writer on the Python side empties; recording threads never see it. Free of Python.h.
 */
#ifndef HS_LIVE_H
#define HS_LIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "hs_registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hs_live_entry {
    uint64_t start;
    uint64_t dur;
    int64_t arg;
    hs_thread_info *info;
    uint32_t pair;
    uint32_t depth;
    uint32_t flags;
    uint32_t pad;
} hs_live_entry;

extern _Atomic int hs_live_on;

/* Start (min_ticks threshold, queue capacity in entries) or stop the feed. */
int hs_live_start(uint64_t min_ticks, uint32_t capacity);
void hs_live_stop(void);
/* Drain side: offer one record (cheap when below the threshold). */
void hs_live_offer(hs_thread_info *info, uint64_t start, uint64_t dur, int64_t arg, uint32_t pair, uint32_t depth,
                   uint32_t flags);
/* Drain side: wake the writer after a sweep that offered entries. */
void hs_live_flush(void);
/* Writer: wait up to timeout_ms for entries, then take them all (caller frees *out).
 * Returns the count; *skipped gets the entries lost to a full queue since the last take. */
uint32_t hs_live_take(hs_live_entry **out, uint64_t *skipped, uint32_t timeout_ms);
/* Writer: done reading the entries of a take that returned some (their infos may go). */
void hs_live_done(void);
/* Drain side: whether entries (queued, or taken and still being read) may point at thread
 * infos: while so, the infos of exited threads are not freed. The feed being off is not
 * enough: live().close() stops it, then its writer takes and reads what was queued. */
int hs_live_holds_infos(void);
/* fork(), in the child: the feed off and empty (the parent's writer is not here). */
void hs_live_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
