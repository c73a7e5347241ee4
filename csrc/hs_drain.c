/* hs_drain: the native drain thread and the segment store (the columnar conversion of
 * what it holds is in hs_columns.c). */
#define _GNU_SOURCE
#include "hs_drain.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* The drain thread's wake: a futex on Linux (no lock on either side); elsewhere (macOS,
 * the BSDs) a condition variable, which wakes as fast but takes a mutex on the waking side
 * (a thread's exit, configure(), never a span). HS_WAKE_CONDVAR forces it on Linux too, so
 * the fallback is built and tested where CI runs. */
#if defined(__linux__) && !defined(HS_WAKE_CONDVAR)
#define HS_WAKE_FUTEX 1
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "hs_clock.h"
#include "hs_compiler.h"
#include "hs_counters.h"
#include "hs_intern.h"
#include "hs_live.h"
#include "hs_rawlog.h"
#include "hs_selftime.h"


/* Segments are small descriptors of records left in place in their blocks (a block is
 * handed over as it is, never copied): each holds a reference on its block, dropped when
 * drain() has converted it. */
#define SEG_IDLE_TRIM_US 1000000
#define POOL_SPARE_BLOCKS 8 /* kept pooled while recording, so a switch rarely allocates */

static hs_segment *seg_new(void) { return malloc(sizeof(hs_segment)); }

uint64_t hs_drain_pool_bytes(void) { return hs_blocks_pool_bytes(); }

/* The drain lock makes whoever holds it the single consumer of every ring. */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static hs_segment *seg_head = NULL, *seg_tail = NULL;
static uint64_t seg_bytes = 0, seg_spans = 0, seg_count = 0;
/* Infos of exited threads whose chains are gone (drain lock): freed by the drain() that
 * takes their last segments. */
static hs_thread_info *graveyard = NULL;

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t drainer_pid = 0;
/* The drain thread says it runs its own code (hs_drainer_ensure waits for that, start_lock
 * held). Why: a thread still starting is inside the C library's and a sanitizer runtime's
 * thread set-up, which allocate; a fork() then (prepare takes start_lock, so never during
 * the wait) would copy their allocator's locks held into the child. ASan's runtime does not
 * lock its allocator around fork(): the child hung on its first malloc. */
static pthread_mutex_t started_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cond = PTHREAD_COND_INITIALIZER;
static pid_t started_pid = 0; /* under started_lock */
static _Atomic uint32_t wake_word = 0;
/* Adaptive: shorter when there is much to walk between passes, longer when idle. Nothing
 * depends on it being on time any more (threads move on to fresh blocks themselves): it
 * walks records ahead of drain() and feeds the live log. */
#define MIN_PERIOD_US 2000
#define MAX_PERIOD_US 20000
static _Atomic uint64_t period_us = 5000;
static _Atomic uint64_t fixed_period_us = 0; /* configure(drain_interval=...) */
static _Atomic int paused = 0;                /* configure(drain_thread=False) */

/* The units above (see hs_drain.h): written once by hs_drain_set_ops. */
static hs_drain_ops ops;

void hs_drain_set_ops(const hs_drain_ops *given) {
    static const hs_drain_ops none;
    ops = given ? *given : none;
}

void hs_drain_lock(void) { pthread_mutex_lock(&drain_lock); }
void hs_drain_unlock(void) { pthread_mutex_unlock(&drain_lock); }

uint64_t hs_drain_period_us(void) { return atomic_load(&period_us); }
void hs_drain_set_period_us(uint64_t us) {
    atomic_store(&fixed_period_us, us);
    atomic_store(&period_us, us);
    hs_wake_drainer();
}

void hs_drain_set_paused(int p) {
    atomic_store(&paused, p);
    hs_wake_drainer();
}
int hs_drain_paused(void) { return atomic_load(&paused); }

#if !defined(HS_WAKE_FUTEX)
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static void wake_cond_init(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
#if !defined(__APPLE__)
    /* timed waits on the monotonic clock: a step of the wall clock neither stalls the
     * drain thread nor spins it (macOS waits on a relative time instead, see below) */
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
#endif
    pthread_cond_init(&wake_cond, &attr);
    pthread_condattr_destroy(&attr);
}
#endif

void hs_wake_drainer(void) {
    atomic_fetch_add_explicit(&wake_word, 1, memory_order_release);
#if defined(HS_WAKE_FUTEX)
    syscall(SYS_futex, &wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
    pthread_once(&wake_once, wake_cond_init);
    /* the waiter compares wake_word under this lock before it sleeps: the increment above
     * is either seen there or followed by this signal, never lost between them */
    pthread_mutex_lock(&wake_lock);
    pthread_cond_signal(&wake_cond);
    pthread_mutex_unlock(&wake_lock);
#endif
}

static void wait_for_wake(uint32_t seen, uint64_t us) {
#if defined(HS_WAKE_FUTEX)
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    syscall(SYS_futex, &wake_word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else
    pthread_once(&wake_once, wake_cond_init);
    pthread_mutex_lock(&wake_lock);
    if (atomic_load_explicit(&wake_word, memory_order_acquire) == seen) {
#if defined(__APPLE__)
        struct timespec rel = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        pthread_cond_timedwait_relative_np(&wake_cond, &wake_lock, &rel);
#else
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (us % 1000000) * 1000;
        ts.tv_sec += (time_t)(us / 1000000 + ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&wake_cond, &wake_lock, &ts);
#endif
    }
    pthread_mutex_unlock(&wake_lock);
#endif
}

/* A fork while another thread held the wake lock leaves it held in the child, and the
 * parent's drain thread may have been waiting on the condition: both start afresh. */
static void wake_after_fork_child(void) {
#if !defined(HS_WAKE_FUTEX)
    pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_once_t fresh_once = PTHREAD_ONCE_INIT;
    wake_lock = fresh_lock;
    wake_once = fresh_once; /* the condition is made anew at its first use */
#endif
}

/* Walk n slots of records, advancing the thread's sequence; returns spans. */
/* The pairs the segments held now use (drain lock): the walk below marks them, so drain()
 * builds its dictionaries without reading every record once more. */
static uint64_t *used_pairs = NULL;
static uint32_t used_pairs_words = 0;
static int used_pairs_incomplete = 0; /* a mark was lost (out of memory): plan by reading */

static inline void mark_pair(uint32_t pair) {
    uint32_t word = pair >> 6;
    if (HS_UNLIKELY(word >= used_pairs_words)) {
        uint32_t nw = used_pairs_words ? used_pairs_words : 16;
        while (nw <= word) nw *= 2;
        uint64_t *grown = realloc(used_pairs, sizeof(uint64_t) * nw);
        if (!grown) {
            used_pairs_incomplete = 1;
            return;
        }
        memset(grown + used_pairs_words, 0, sizeof(uint64_t) * (nw - used_pairs_words));
        used_pairs = grown;
        used_pairs_words = nw;
    }
    used_pairs[word] |= 1ull << (pair & 63);
}

static uint64_t walk_records(hs_thread_info *info, const hs_record *a, uint64_t na, const hs_record *b,
                             uint64_t nb, int kept) {
    uint64_t spans = 0, seq = info->drain_seq;
    uint64_t i = 0, n = na + nb;
    int live = atomic_load_explicit(&hs_live_on, memory_order_relaxed);
    while (i < n) {
        const hs_record *r = i < na ? &a[i] : &b[i - na];
        uint32_t flags = hs_rec_flags(r);
        if (HS_UNLIKELY(flags & HS_F_COUNTER)) { /* not a span: into the counters' store */
            if (kept) hs_counters_note(r, info->tid);
            i += 1;
            continue;
        }
        if (flags & HS_F_EXT) {
            uint64_t j = i + 1;
            const hs_record_ext *x = (const hs_record_ext *)(j < na ? &a[j] : &b[j - na]);
            seq = x->seq;
            if (kept) mark_pair(x->pair);
            if (live) hs_live_offer(info, r->start, x->dur, r->arg, x->pair, x->depth, flags);
            i += 2;
        } else {
            seq = hs_seq_extend(seq, hs_rec_seq32(r));
            if (kept) mark_pair(hs_rec_pair(r));
            if (live) hs_live_offer(info, r->start, hs_rec_dur(r), r->arg, hs_rec_pair(r), hs_rec_depth(r), flags);
            i += 1;
        }
        spans++;
    }
    info->drain_seq = seq;
    return spans;
}

/* Spans the raw logs have that drain() will not see: shed from memory (below); counted
 * over the process's life (drain() says the increase). */
static uint64_t raw_shed_spans = 0;

static void segment_free_locked(hs_segment *s) {
    if (ops.block_drained) ops.block_drained(s->block, (uint64_t)(s->recs - s->block->recs) + s->nslots);
    hs_block_unref(s->block);
    free(s);
}

/* While a raw log is open every segment is in the file once swept: what waits for drain()
 * (a reader that may never come: record(dir) takes nothing from here) is held only up to a
 * quarter of the memory cap, the oldest going first (counted, as a hub reader that falls
 * behind loses its oldest tables), so that the recording threads never meet the cap. */
static void shed_written_locked(void) {
    uint64_t keep = atomic_load(&hs_memory_cap) / 4;
    while (seg_head && seg_head->in_raw && seg_bytes > keep) {
        hs_segment *s = seg_head;
        seg_head = s->next;
        if (!seg_head) seg_tail = NULL;
        seg_bytes -= s->nslots * sizeof(hs_record);
        seg_spans -= s->nspans;
        seg_count--;
        raw_shed_spans += s->nspans;
        hs_rawlog_forget_waits(s->recs, s->nslots, s->base_seq); /* no drain() takes them */
        segment_free_locked(s);
    }
}

/* drain lock held. Each chain's new records become segments that point into its blocks;
 * a retired chain with nothing left goes, and its info waits in the graveyard for the
 * drain() that takes its last segments. Returns records walked. */
static uint64_t sweep_locked(void) {
    uint64_t moved = 0;
    hs_registry_lock();
    hs_chain *ch = hs_registry_chains();
    hs_registry_unlock();
    /* The list only grows at its tail while we walk (registration), and only this side
     * (under the drain lock) unlinks: reading next under the registry lock is enough. */
    while (ch) {
        /* retired before walking: everything the thread published is then visible */
        int retired = atomic_load_explicit(&ch->retired, memory_order_acquire);
        hs_thread_info *info = ch->owner_info;
        hs_block *blk;
        const hs_record *recs;
        uint64_t n;
        while ((n = hs_chain_peek(ch, &blk, &recs))) {
            hs_segment *s = seg_new();
            if (!s) break; /* out of memory: the records wait in their block */
            s->next = NULL;
            s->info = info;
            s->block = blk;
            s->recs = recs;
            s->base_seq = info->drain_seq;
            s->nslots = n;
            s->nspans = walk_records(info, recs, n, NULL, 0, 1);
            /* record(dir): the records go to the raw log too, as they are (written at the
             * pass's end, below, while this segment holds the block) */
            s->in_raw = hs_rawlog_on();
            if (s->in_raw) hs_rawlog_segment_locked(info, recs, n, s->base_seq, s->nspans);
            blk->refs++;
            hs_chain_advance(ch, n);
            if (seg_tail) seg_tail->next = s;
            else seg_head = s;
            seg_tail = s;
            seg_bytes += n * sizeof(hs_record);
            seg_spans += s->nspans;
            seg_count++;
            moved += n;
        }
        hs_registry_lock();
        hs_chain *next = ch->next;
        if (retired && hs_chain_empty(ch)) {
            hs_registry_retire(ch); /* frees the chain, unlinks the info */
            info->next = graveyard;
            graveyard = info;
        }
        hs_registry_unlock();
        ch = next;
    }
    if (atomic_load_explicit(&hs_live_on, memory_order_relaxed)) hs_live_flush();
    if (hs_rawlog_on()) {
        hs_rawlog_flush_locked();
        shed_written_locked();
    }
    return moved;
}

void hs_drain_sweep(void) {
    pthread_mutex_lock(&drain_lock);
    sweep_locked();
    pthread_mutex_unlock(&drain_lock);
}

int hs_drain_raw_open(const char *path, int32_t rank, const char *version) {
    pthread_mutex_lock(&drain_lock);
    int rc = hs_rawlog_open_locked(path, rank, version);
    if (rc == 0) {
        /* what the core holds already (recorded before the recording started, not drained)
         * is the recording's too: a recorder started late still writes it */
        for (hs_segment *s = seg_head; s; s = s->next)
            if (!s->in_raw) { /* not an earlier recording's */
                hs_rawlog_segment_locked(s->info, s->recs, s->nslots, s->base_seq, s->nspans);
                s->in_raw = 1;
            }
        hs_rawlog_flush_locked();
    }
    pthread_mutex_unlock(&drain_lock);
    if (rc == 0) hs_drainer_ensure();
    return rc;
}

int hs_drain_raw_close(hs_rawlog_stats *out, uint64_t *shed) {
    pthread_mutex_lock(&drain_lock);
    if (hs_rawlog_on()) sweep_locked(); /* every span recorded so far goes in */
    int rc = hs_rawlog_close_locked(out);
    if (shed) *shed = raw_shed_spans;
    pthread_mutex_unlock(&drain_lock);
    return rc;
}

void hs_drain_raw_stats(hs_rawlog_stats *out, uint64_t *shed) {
    pthread_mutex_lock(&drain_lock);
    hs_rawlog_stats_locked(out);
    if (shed) *shed = raw_shed_spans;
    pthread_mutex_unlock(&drain_lock);
}

void hs_drain_pending(uint64_t *bytes, uint64_t *spans, uint64_t *segments) {
    pthread_mutex_lock(&drain_lock);
    /* every block in use: the threads' current ones, and those waiting for drain() */
    *bytes = hs_blocks_held_bytes() - hs_blocks_pool_bytes();
    *spans = seg_spans;
    *segments = seg_count;
    pthread_mutex_unlock(&drain_lock);
}

_Atomic uint64_t hs_drops_reported = 0;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Once a pass: drops not yet reported are signalled at once the first time, then at most
 * every HS_DROPS_SIGNAL_NS (a program dropping millions of spans a second is not
 * interrupted every pass; the report itself is rate-limited per thread in Python). */
static void signal_drops(uint64_t *last_signal_ns) {
    if (!ops.drops) return;
    uint64_t total = hs_dropped_total();
    if (total <= atomic_load_explicit(&hs_drops_reported, memory_order_relaxed)) return;
    uint64_t now = now_ns();
    if (*last_signal_ns && now - *last_signal_ns < HS_DROPS_SIGNAL_NS) return;
    *last_signal_ns = now;
    ops.drops();
}

static void *drainer_main(void *arg) {
    (void)arg; /* started with every signal blocked: see hs_thread_create_quiet */
    pid_t me = getpid();
    pthread_mutex_lock(&started_lock);
    started_pid = me;
    pthread_cond_broadcast(&started_cond);
    pthread_mutex_unlock(&started_lock);
    uint64_t idle_us = 0, drops_signal_ns = 0;
    uint32_t seen = 0;
    int first = 1;
    for (;;) {
        uint64_t waited_us = atomic_load(&period_us);
        /* The first pass at once: a thread that recorded and exited before this thread ran
         * (its wake came before there was a waiter) is not left for a whole period. */
        if (!first) wait_for_wake(seen, waited_us);
        first = 0;
        /* Read before the pass, not after it: a wake during the pass (a thread exiting
         * once its chain was walked) makes the next wait return at once. */
        seen = atomic_load_explicit(&wake_word, memory_order_acquire);
        if (atomic_load(&drainer_pid) != me) return NULL;
        /* the flight file's "last seen" (the end of spans open at a crash) and clock */
        if (ops.tick) ops.tick();
        { /* configure(counters=): the process's and the devices' memory, when due */
            hs_counter_sample samples[HS_COUNTERS_MAX_SAMPLES];
            int n = hs_counters_due(samples, HS_COUNTERS_MAX_SAMPLES);
            if (n > 0) {
                pthread_mutex_lock(&drain_lock);
                for (int k = 0; k < n; k++) hs_counters_add(samples[k].ticks, samples[k].pair, samples[k].value);
                pthread_mutex_unlock(&drain_lock);
            }
        }
        if (atomic_load(&paused)) continue; /* only drain() moves records now */
        pthread_mutex_lock(&drain_lock);
        uint64_t moved = sweep_locked();
        pthread_mutex_unlock(&drain_lock);
        /* how busy the pass was, as a fraction of a default block */
        double fill = (double)moved / 1024.0;
        if (moved) {
            idle_us = 0;
            hs_pool_refill(POOL_SPARE_BLOCKS);
        } else if (idle_us < SEG_IDLE_TRIM_US && (idle_us += waited_us) >= SEG_IDLE_TRIM_US) {
            hs_pool_trim(); /* idle for a second: give the pooled blocks back */
        }
        hs_clock_update(0);
        signal_drops(&drops_signal_ns);
        if (!atomic_load(&fixed_period_us)) {
            uint64_t p = atomic_load(&period_us);
            if (fill > 0.5 && p > MIN_PERIOD_US) p /= 2;
            else if (fill < 0.1 && p < MAX_PERIOD_US) p *= 2;
            atomic_store(&period_us, p);
        }
    }
    return NULL;
}

/* Signals belong to the program's own threads. A process-directed signal (a pool's
 * SIGTERM) goes to any thread that does not block it; one taken by a hotspan thread only
 * sets CPython's flag, and a main thread asleep in sem_wait (a pool worker waiting for a
 * task) is never woken to run its handler: the worker hangs. Blocking inside the new
 * thread leaves a window between its creation and that call, so the thread is created
 * with everything blocked (it inherits the mask) and the caller's mask is put back. */
int hs_thread_create_quiet(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(th, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* fork() (hs_fork.c calls these in its order): a drainer start and a pass finish first. */
void hs_drain_fork_prepare(void) {
    pthread_mutex_lock(&start_lock);
    pthread_mutex_lock(&drain_lock);
}
void hs_drain_fork_release(void) {
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&start_lock);
}

void hs_configure(int64_t capacity, int64_t cap_bytes, int64_t drain_interval_us) {
    /* every thread takes blocks of the new size from its next switch on */
    if (capacity > 0) atomic_store(&hs_block_records, (uint64_t)capacity);
    if (cap_bytes > 0) atomic_store(&hs_memory_cap, (uint64_t)cap_bytes);
    if (drain_interval_us > 0) hs_drain_set_period_us((uint64_t)drain_interval_us);
}

void hs_drainer_ensure(void) {
    pid_t me = getpid();
    if (atomic_load(&drainer_pid) == me) return;
    pthread_mutex_lock(&start_lock);
    if (atomic_load(&drainer_pid) != me) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        atomic_store(&drainer_pid, me);
        if (hs_thread_create_quiet(&th, &attr, drainer_main, NULL) != 0) {
            atomic_store(&drainer_pid, 0);
        } else {
            pthread_mutex_lock(&started_lock); /* once a process: see started_lock */
            while (started_pid != me) pthread_cond_wait(&started_cond, &started_lock);
            pthread_mutex_unlock(&started_lock);
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&start_lock);
}

/* fork(), in the child, locks held (hs_fork.c): only the forking thread exists. */
void hs_drain_after_fork_child(void) {
    /* the parent drains what it recorded: the child's copies of its segments go */
    hs_segment *s = seg_head;
    while (s) {
        hs_segment *next = s->next;
        hs_block_discard_ref(s->block);
        free(s);
        s = next;
    }
    seg_head = seg_tail = NULL;
    seg_bytes = seg_spans = seg_count = 0;
    hs_counters_after_fork_child();
    while (graveyard) {
        hs_thread_info *next = graveyard->next;
        hs_self_state_free(graveyard->self_state);
        free(graveyard->name);
        free(graveyard);
        graveyard = next;
    }
    free(used_pairs);
    used_pairs = NULL;
    used_pairs_words = 0;
    used_pairs_incomplete = 0;
    atomic_store(&drainer_pid, 0); /* the parent's drain thread does not exist here */
    atomic_store(&hs_drops_reported, 0); /* the child's drop counts start again */
    wake_after_fork_child();
}

void hs_drain_take(hs_drain_batch *out) {
    pthread_mutex_lock(&drain_lock);
    sweep_locked();
    out->segs = seg_head;
    out->spans = seg_spans;
    seg_head = seg_tail = NULL;
    seg_bytes = seg_spans = seg_count = 0;
    out->used_pairs = used_pairs;
    out->used_words = used_pairs_words;
    out->used_incomplete = used_pairs_incomplete || (!used_pairs && out->spans);
    used_pairs = NULL;
    used_pairs_words = 0;
    used_pairs_incomplete = 0;
    /* Every segment of a graveyard info is in this batch (its chain is gone): the infos go
     * with the batch. While the live log's entries may point at them (the log is on, or
     * stopped with lines its writer has not taken or is still formatting), they stay: a
     * drain() during live().close() freed them under the writer (a segfault). */
    out->dead = NULL;
    if (graveyard && !hs_live_holds_infos()) {
        out->dead = graveyard;
        graveyard = NULL;
    }
    pthread_mutex_unlock(&drain_lock);
}

void hs_drain_release(hs_drain_batch *batch) {
    pthread_mutex_lock(&drain_lock); /* block references are the drain side's */
    hs_segment *s = batch->segs;
    while (s) {
        hs_segment *next = s->next;
        /* converted: a recovery of the flight file must not give these spans again */
        segment_free_locked(s);
        s = next;
    }
    pthread_mutex_unlock(&drain_lock);
    batch->segs = NULL;
    while (batch->dead) {
        hs_thread_info *next = batch->dead->next;
        hs_self_state_free(batch->dead->self_state);
        free(batch->dead->name);
        free(batch->dead);
        batch->dead = next;
    }
}
