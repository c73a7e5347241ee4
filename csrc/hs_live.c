/* hs_live: a bounded queue between the drain side and the live log's writer. */
#include "hs_live.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs_ring.h"

_Atomic int hs_live_on = 0;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cond = PTHREAD_COND_INITIALIZER;
static hs_live_entry *queue = NULL;
static uint32_t queue_cap = 0, queue_len = 0, offered = 0;
static uint64_t min_dur = 0, skipped_count = 0;
/* Takes whose entries the writer is still reading (their infos must stay): hs_live_done. */
static uint32_t takes_out = 0;

int hs_live_start(uint64_t min_ticks, uint32_t capacity) {
    hs_live_entry *q = malloc(sizeof(hs_live_entry) * (capacity ? capacity : 1));
    if (!q) return -1;
    pthread_mutex_lock(&live_lock);
    free(queue);
    queue = q;
    queue_cap = capacity;
    queue_len = 0;
    skipped_count = 0;
    min_dur = min_ticks;
    atomic_store(&hs_live_on, 1);
    pthread_mutex_unlock(&live_lock);
    return 0;
}

void hs_live_stop(void) {
    pthread_mutex_lock(&live_lock);
    atomic_store(&hs_live_on, 0);
    pthread_cond_broadcast(&live_cond);
    pthread_mutex_unlock(&live_lock);
}

void hs_live_offer(hs_thread_info *info, uint64_t start, uint64_t dur, int64_t arg, uint32_t pair, uint32_t depth,
                   uint32_t flags) {
    if (dur < min_dur && !(flags & HS_F_ERROR)) return;
    pthread_mutex_lock(&live_lock);
    if (atomic_load(&hs_live_on)) {
        if (queue_len < queue_cap) {
            hs_live_entry *e = &queue[queue_len++];
            e->start = start;
            e->dur = dur;
            e->arg = arg;
            e->info = info;
            e->pair = pair;
            e->depth = depth;
            e->flags = flags;
            offered = 1;
        } else {
            skipped_count++; /* the writer fell behind: counted, never waited for */
        }
    }
    pthread_mutex_unlock(&live_lock);
}

void hs_live_flush(void) {
    pthread_mutex_lock(&live_lock);
    if (offered) pthread_cond_signal(&live_cond);
    offered = 0;
    pthread_mutex_unlock(&live_lock);
}

uint32_t hs_live_take(hs_live_entry **out, uint64_t *skipped, uint32_t timeout_ms) {
    *out = NULL;
    pthread_mutex_lock(&live_lock);
    if (queue_len == 0 && atomic_load(&hs_live_on) && timeout_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&live_cond, &live_lock, &ts);
    }
    uint32_t n = queue_len;
    if (n) {
        hs_live_entry *copy = malloc(sizeof(hs_live_entry) * n);
        if (copy) {
            memcpy(copy, queue, sizeof(hs_live_entry) * n);
            *out = copy;
            takes_out++;
        } else {
            skipped_count += n;
            n = 0;
        }
        queue_len = 0;
    }
    *skipped = skipped_count;
    skipped_count = 0;
    pthread_mutex_unlock(&live_lock);
    return n;
}

void hs_live_done(void) {
    pthread_mutex_lock(&live_lock);
    if (takes_out) takes_out--;
    pthread_mutex_unlock(&live_lock);
}

int hs_live_holds_infos(void) {
    pthread_mutex_lock(&live_lock);
    int held = atomic_load(&hs_live_on) || queue_len > 0 || takes_out > 0;
    pthread_mutex_unlock(&live_lock);
    return held;
}

void hs_live_after_fork_child(void) {
    /* Only the forking thread exists: no writer, and the queue's entries point at the
     * parent's thread infos, which the child frees. The feed is off until live() again. */
    pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    live_lock = fresh_lock;
    live_cond = fresh_cond;
    atomic_store(&hs_live_on, 0);
    queue_len = 0;
    offered = 0;
    takes_out = 0;
    skipped_count = 0;
}
