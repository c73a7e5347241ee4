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
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "hs_clock.h"
#include "hs_intern.h"
#include "hs_live.h"
#include "hs_recorder.h"


/* ---- segment memory -------------------------------------------------------------------- */

/* Segments are written once by the drain thread and freed by drain() a moment later. Fresh
 * pages cost a fault and a zeroing each: measured, 32 of the drain thread's 45 ns a span
 * (one fault per 4 KiB page, i.e. per 128 records), and that CPU is taken from the
 * recording threads on a small host. So blocks of 64 KiB and up come from mmap in
 * power-of-two sizes, and freed ones wait in a pool (up to SEG_POOL_MAX) for the next
 * sweep: a recorder drained at a steady pace reuses warm pages. The drain thread hands the
 * pool back to the system once recording has been idle for a second. */
#include <sys/mman.h>

#define SEG_MIN_CLASS 16 /* 64 KiB */
#define SEG_MAX_CLASS 34 /* 16 GiB: beyond any ring */
#define SEG_POOL_MAX (64ull << 20)
#define SEG_IDLE_TRIM_US 1000000

static pthread_mutex_t seg_pool_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf lock */
static void *seg_pool[SEG_MAX_CLASS + 1]; /* free blocks, linked through their first word */
static uint64_t seg_pool_bytes = 0;

static hs_segment *seg_alloc(uint64_t nslots) {
    size_t bytes = sizeof(hs_segment) + nslots * sizeof(hs_record);
    unsigned cls = SEG_MIN_CLASS;
    while (cls <= SEG_MAX_CLASS && ((size_t)1 << cls) < bytes) cls++;
    if (bytes < ((size_t)1 << SEG_MIN_CLASS) || cls > SEG_MAX_CLASS) {
        hs_segment *s = malloc(bytes);
        if (s) s->alloc_class = 0;
        return s;
    }
    /* A warm block up to 4x larger beats a fresh one: sweeps vary in size, and pages never
     * touched cost nothing. */
    void *block = NULL;
    pthread_mutex_lock(&seg_pool_lock);
    for (unsigned c = cls; c <= cls + 2 && c <= SEG_MAX_CLASS && !block; c++) {
        block = seg_pool[c];
        if (block) {
            memcpy(&seg_pool[c], block, sizeof(void *));
            seg_pool_bytes -= (uint64_t)1 << c;
            cls = c;
        }
    }
    pthread_mutex_unlock(&seg_pool_lock);
    if (!block) {
        block = mmap(NULL, (size_t)1 << cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (block == MAP_FAILED) return NULL;
    }
    hs_segment *s = block;
    s->alloc_class = cls;
    return s;
}

static void seg_free(hs_segment *s) {
    if (!s) return;
    if (!s->alloc_class) {
        free(s);
        return;
    }
    unsigned cls = (unsigned)s->alloc_class;
    uint64_t size = (uint64_t)1 << cls;
    void *block = s;
    pthread_mutex_lock(&seg_pool_lock);
    if (seg_pool_bytes + size <= SEG_POOL_MAX) {
        memcpy(block, &seg_pool[cls], sizeof(void *));
        seg_pool[cls] = block;
        seg_pool_bytes += size;
        block = NULL;
    }
    pthread_mutex_unlock(&seg_pool_lock);
    if (block) munmap(block, size);
}

static void seg_pool_trim(void) {
    void *lists[SEG_MAX_CLASS + 1];
    pthread_mutex_lock(&seg_pool_lock);
    memcpy(lists, seg_pool, sizeof lists);
    memset(seg_pool, 0, sizeof seg_pool);
    seg_pool_bytes = 0;
    pthread_mutex_unlock(&seg_pool_lock);
    for (unsigned cls = SEG_MIN_CLASS; cls <= SEG_MAX_CLASS; cls++) {
        void *block = lists[cls];
        while (block) {
            void *next;
            memcpy(&next, block, sizeof next);
            munmap(block, (size_t)1 << cls);
            block = next;
        }
    }
}

uint64_t hs_drain_pool_bytes(void) {
    pthread_mutex_lock(&seg_pool_lock);
    uint64_t bytes = seg_pool_bytes;
    pthread_mutex_unlock(&seg_pool_lock);
    return bytes;
}

/* The drain lock makes whoever holds it the single consumer of every ring. */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static hs_segment *seg_head = NULL, *seg_tail = NULL;
static uint64_t seg_bytes = 0, seg_spans = 0, seg_count = 0;

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t drainer_pid = 0;
static _Atomic uint32_t wake_word = 0;
/* Adaptive: shorter when rings fill up between passes, longer when idle. Producers past
 * half a ring wake it early, so the long idle period never costs records. */
#define MIN_PERIOD_US 2000
#define MAX_PERIOD_US 20000
static _Atomic uint64_t period_us = 5000;
static _Atomic uint64_t fixed_period_us = 0; /* configure(drain_interval=...) */
static _Atomic int paused = 0;                /* configure(drain_thread=False) */

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

void hs_wake_drainer(void) {
    atomic_fetch_add_explicit(&wake_word, 1, memory_order_release);
#if defined(__linux__)
    syscall(SYS_futex, &wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#endif
}

static void wait_for_wake(uint32_t seen, uint64_t us) {
#if defined(__linux__)
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    syscall(SYS_futex, &wake_word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else
    (void)seen;
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
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

/* The view minus its first k slots. */
static hs_ring_view view_from(const hs_ring_view *v, uint64_t k) {
    hs_ring_view out = {NULL, 0, NULL, 0};
    if (k < v->na) {
        out.a = v->a + k;
        out.na = v->na - k;
        out.b = v->b;
        out.nb = v->nb;
    } else {
        out.a = v->b + (k - v->na);
        out.na = v->nb - (k - v->na);
    }
    return out;
}

/* The most slots, at most room, that end on a record boundary (an extended record and
 * its extension are kept or dropped together). */
static uint64_t fit_slots(const hs_ring_view *v, uint64_t room) {
    uint64_t i = 0, n = v->na + v->nb;
    while (i < n) {
        const hs_record *r = i < v->na ? &v->a[i] : &v->b[i - v->na];
        uint64_t size = (hs_rec_flags(r) & HS_F_EXT) ? 2 : 1;
        if (i + size > room) break;
        i += size;
    }
    return i;
}

/* drain lock held */
static double sweep_locked(void) {
    double max_fill = 0;
    hs_ring *dead[64];
    int ndead = 0;
    hs_registry_lock();
    hs_ring *r = hs_registry_rings();
    hs_registry_unlock();
    /* The list only grows at its tail while we walk (registration), and only this side
     * (under the drain lock) unlinks: reading next under the registry lock is enough. */
    while (r) {
        int retired = atomic_load_explicit(&r->retired, memory_order_acquire);
        hs_thread_info *info = r->owner_info;
        hs_ring_view v = hs_ring_peek(r);
        uint64_t n = v.na + v.nb;
        if (n) {
            double fill = (double)n / (double)r->limit;
            if (fill > max_fill) max_fill = fill;
            /* Keep what fits under the memory cap, oldest first; the rest are the newest
             * records and are dropped, counted exactly. */
            uint64_t cap = hs_get_memory_cap();
            uint64_t room = seg_bytes < cap ? (cap - seg_bytes) / sizeof(hs_record) : 0;
            uint64_t keep = n <= room ? n : fit_slots(&v, room);
            hs_segment *s = keep ? seg_alloc(keep) : NULL;
            if (!s) keep = 0;
            if (s) {
                uint64_t ka = keep < v.na ? keep : v.na;
                s->next = NULL;
                s->info = info;
                s->base_seq = info->drain_seq;
                s->nslots = keep;
                memcpy(s->recs, v.a, ka * sizeof(hs_record));
                if (keep > ka) memcpy(s->recs + ka, v.b, (keep - ka) * sizeof(hs_record));
                s->nspans = walk_records(info, s->recs, keep, NULL, 0, 1);
                if (seg_tail) seg_tail->next = s;
                else seg_head = s;
                seg_tail = s;
                seg_bytes += keep * sizeof(hs_record);
                seg_spans += s->nspans;
                seg_count++;
            }
            if (keep < n) {
                hs_ring_view rest = view_from(&v, keep);
                uint64_t spans = walk_records(info, rest.a, rest.na, rest.b, rest.nb, 0);
                atomic_fetch_add_explicit(&info->dropped_other, spans, memory_order_relaxed);
            }
            hs_ring_release(r, n);
        }
        hs_registry_lock();
        hs_ring *next = r->next;
        if (retired && hs_ring_pending(r) == 0 && ndead < 64) {
            hs_registry_unlink_ring(r);
            dead[ndead++] = r;
        }
        hs_registry_unlock();
        r = next;
    }
    for (int i = 0; i < ndead; i++) hs_ring_destroy(dead[i]);
    if (atomic_load_explicit(&hs_live_on, memory_order_relaxed)) hs_live_flush();
    return max_fill;
}

void hs_drain_sweep(void) {
    pthread_mutex_lock(&drain_lock);
    sweep_locked();
    pthread_mutex_unlock(&drain_lock);
}

void hs_drain_pending(uint64_t *bytes, uint64_t *spans, uint64_t *segments) {
    pthread_mutex_lock(&drain_lock);
    *bytes = seg_bytes;
    *spans = seg_spans;
    *segments = seg_count;
    pthread_mutex_unlock(&drain_lock);
}

static void *drainer_main(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the program's threads */
    pid_t me = getpid();
    uint64_t idle_us = 0;
    for (;;) {
        uint32_t seen = atomic_load_explicit(&wake_word, memory_order_acquire);
        uint64_t waited_us = atomic_load(&period_us);
        wait_for_wake(seen, waited_us);
        if (atomic_load(&drainer_pid) != me) return NULL;
        if (atomic_load(&paused)) continue; /* only drain() moves records now */
        pthread_mutex_lock(&drain_lock);
        double fill = sweep_locked();
        pthread_mutex_unlock(&drain_lock);
        if (fill > 0) {
            idle_us = 0;
        } else if (idle_us < SEG_IDLE_TRIM_US && (idle_us += waited_us) >= SEG_IDLE_TRIM_US) {
            seg_pool_trim(); /* idle for a second: give the pooled segment memory back */
        }
        hs_clock_update(0);
        if (!atomic_load(&fixed_period_us)) {
            uint64_t p = atomic_load(&period_us);
            if (fill > 0.5 && p > MIN_PERIOD_US) p /= 2;
            else if (fill < 0.1 && p < MAX_PERIOD_US) p *= 2;
            atomic_store(&period_us, p);
        }
    }
    return NULL;
}

static void atfork_prepare(void) {
    pthread_mutex_lock(&start_lock);
    pthread_mutex_lock(&drain_lock);
    pthread_mutex_lock(&seg_pool_lock);
    hs_registry_lock();
    hs_registry_before_fork();
    hs_intern_lock();
}
static void atfork_parent(void) {
    pthread_mutex_unlock(&seg_pool_lock);
    hs_intern_unlock();
    hs_registry_unlock();
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&start_lock);
}
static void atfork_child(void) {
    pthread_mutex_unlock(&seg_pool_lock); /* first: the child frees its inherited segments */
    hs_drain_after_fork_child();
    hs_intern_unlock();
    hs_registry_unlock();
    pthread_mutex_unlock(&drain_lock);
    pthread_mutex_unlock(&start_lock);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

void hs_drainer_ensure(void) {
    pthread_once(&atfork_once, register_atfork);
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
        if (pthread_create(&th, &attr, drainer_main, NULL) != 0) atomic_store(&drainer_pid, 0);
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&start_lock);
}

/* Locks held (see atfork_prepare): only the forking thread exists. */
void hs_drain_after_fork_child(void) {
    hs_segment *s = seg_head;
    while (s) {
        hs_segment *next = s->next;
        seg_free(s);
        s = next;
    }
    seg_head = seg_tail = NULL;
    seg_bytes = seg_spans = seg_count = 0;
    free(used_pairs);
    used_pairs = NULL;
    used_pairs_words = 0;
    used_pairs_incomplete = 0;
    atomic_store(&drainer_pid, 0); /* the parent's drain thread does not exist here */
    hs_registry_after_fork_child();
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
    pthread_mutex_unlock(&drain_lock);
}

void hs_drain_release(hs_segment *segs) {
    while (segs) {
        hs_segment *next = segs->next;
        seg_free(segs);
        segs = next;
    }
}
