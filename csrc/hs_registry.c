/* hs_registry: thread registration, ring renewal, thread exit and fork. */
#define _GNU_SOURCE
#include "hs_registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "hs_drain.h"

_Thread_local hs_tstate *hs_tls __attribute__((tls_model("initial-exec"))) = NULL;
_Atomic int hs_enabled = 1;
_Atomic uint64_t hs_ring_generation = 1;
char *(*hs_thread_name_hook)(void) = NULL;

#define DEFAULT_CAPACITY (1u << 16)          /* 2 MiB of records per thread */
#define DEFAULT_MEMORY_CAP (64ull << 20)     /* undrained segments */
#define INITIAL_STACK 64

static _Atomic uint64_t ring_capacity = DEFAULT_CAPACITY;
static _Atomic uint64_t memory_cap = DEFAULT_MEMORY_CAP;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hs_ring *ring_list = NULL, *ring_list_tail = NULL;
static hs_thread_info *info_list = NULL, *info_list_tail = NULL;
static uint32_t next_thread_index = 1;
static uint32_t fork_block_start = 0; /* the block set aside for the child of a fork in progress */

/* registry lock held */
static uint32_t take_thread_index(void) {
    uint32_t index = next_thread_index;
    next_thread_index = next_thread_index % HS_THREAD_INDEX_MASK + 1; /* 1..4095, wrapping */
    return index;
}
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

void hs_registry_lock(void) { pthread_mutex_lock(&registry_lock); }
void hs_registry_unlock(void) { pthread_mutex_unlock(&registry_lock); }
hs_ring *hs_registry_rings(void) { return ring_list; }
hs_thread_info *hs_registry_infos(void) { return info_list; }

static int64_t os_thread_id(void) {
#if defined(__linux__)
    return (int64_t)syscall(SYS_gettid);
#elif defined(__APPLE__)
    uint64_t id = 0;
    pthread_threadid_np(NULL, &id);
    return (int64_t)id;
#else
    return (int64_t)(uintptr_t)pthread_self();
#endif
}

/* registry lock held */
static void append_ring(hs_ring *r) {
    r->next = NULL;
    if (ring_list_tail) ring_list_tail->next = r;
    else ring_list = r;
    ring_list_tail = r;
}

void hs_registry_unlink_ring(hs_ring *r) {
    hs_ring *prev = NULL;
    for (hs_ring *it = ring_list; it; prev = it, it = it->next) {
        if (it != r) continue;
        if (prev) prev->next = it->next;
        else ring_list = it->next;
        if (ring_list_tail == it) ring_list_tail = prev;
        return;
    }
}

/* Thread exit: the ring is retired, drained and freed by the drain side; the frames
 * still open are lost with the thread (they never completed). */
static void on_thread_exit(void *p) {
    hs_tstate *t = p;
    if (!t) return;
    atomic_store_explicit(&t->ring->retired, 1, memory_order_release);
    atomic_store(&t->info->alive, 0);
    free(t->stack);
    free(t);
    hs_tls = NULL;
    hs_wake_drainer();
}

static void make_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

hs_tstate *hs_tstate_register(void) {
    pthread_once(&key_once, make_key);
    hs_tstate *t = calloc(1, sizeof(*t));
    hs_thread_info *info = calloc(1, sizeof(*info));
    hs_frame *stack = malloc(sizeof(hs_frame) * INITIAL_STACK);
    uint64_t gen = atomic_load(&hs_ring_generation);
    hs_ring *ring = hs_ring_create(atomic_load(&ring_capacity));
    if (!t || !info || !stack || !ring) {
        free(t);
        free(info);
        free(stack);
        hs_ring_destroy(ring);
        return NULL;
    }
    info->tid = os_thread_id();
    /* Named outside the lock: the hook may run Python code. */
    info->name = hs_thread_name_hook ? hs_thread_name_hook() : NULL;
    if (!info->name) {
        char buf[48];
        snprintf(buf, sizeof buf, "Thread-%lld", (long long)info->tid);
        info->name = strdup(buf);
    }
    atomic_init(&info->alive, 1);
    t->info = info;
    t->ring = ring;
    t->ring_gen = gen;
    t->stack = stack;
    t->stack_cap = INITIAL_STACK;
    ring->owner_info = info;

    pthread_mutex_lock(&registry_lock);
    info->index = take_thread_index();
    if (info_list_tail) info_list_tail->next = info;
    else info_list = info;
    info_list_tail = info;
    append_ring(ring);
    pthread_mutex_unlock(&registry_lock);

    hs_tls = t;
    pthread_setspecific(exit_key, t);
    hs_drainer_ensure();
    return t;
}

void hs_set_thread_name(hs_tstate *t, const char *name) {
    char *copy = strdup(name);
    if (!copy) return;
    pthread_mutex_lock(&registry_lock);
    char *old = t->info->name;
    t->info->name = copy;
    pthread_mutex_unlock(&registry_lock);
    free(old);
}

int hs_stack_grow(hs_tstate *t) {
    uint32_t nc = t->stack_cap * 2;
    hs_frame *ns = realloc(t->stack, sizeof(hs_frame) * nc);
    if (!ns) return -1;
    t->stack = ns;
    t->stack_cap = nc;
    return 0;
}

hs_ring *hs_ring_renew(hs_tstate *t) {
    uint64_t gen = atomic_load(&hs_ring_generation);
    hs_ring *ring = hs_ring_create(atomic_load(&ring_capacity));
    if (!ring) return NULL;
    ring->owner_info = t->info;
    hs_ring *old = t->ring;
    pthread_mutex_lock(&registry_lock);
    append_ring(ring); /* after the old one: the drain side visits them in this order */
    pthread_mutex_unlock(&registry_lock);
    atomic_store_explicit(&old->retired, 1, memory_order_release);
    t->ring = ring;
    t->ring_gen = gen;
    return ring;
}

void hs_configure(int64_t capacity, int64_t cap_bytes, int64_t drain_interval_us) {
    if (capacity > 0) {
        atomic_store(&ring_capacity, (uint64_t)capacity);
        /* every thread takes a ring of the new size at its next record */
        atomic_fetch_add(&hs_ring_generation, 1);
    }
    if (cap_bytes > 0) atomic_store(&memory_cap, (uint64_t)cap_bytes);
    if (drain_interval_us > 0) hs_drain_set_period_us((uint64_t)drain_interval_us);
}

uint64_t hs_get_capacity(void) { return atomic_load(&ring_capacity); }
uint64_t hs_get_memory_cap(void) { return atomic_load(&memory_cap); }

uint64_t hs_dropped_total(void) {
    uint64_t total = 0;
    pthread_mutex_lock(&registry_lock);
    for (hs_thread_info *i = info_list; i; i = i->next)
        total += atomic_load_explicit(&i->dropped_full, memory_order_relaxed) +
                 atomic_load_explicit(&i->dropped_other, memory_order_relaxed);
    pthread_mutex_unlock(&registry_lock);
    return total;
}

void hs_registry_before_fork(void) {
    fork_block_start = next_thread_index;
    for (uint32_t i = 0; i < HS_FORK_BLOCK; i++) take_thread_index();
}

void hs_registry_after_fork_child(void) {
    /* Only the forking thread exists now. Its undrained records were the parent's: the
     * child starts with an empty ring; every other thread's ring and info is dropped. */
    hs_tstate *me = hs_tls;
    hs_ring *r = ring_list;
    while (r) {
        hs_ring *next = r->next;
        if (!me || r != me->ring) hs_ring_destroy(r);
        r = next;
    }
    ring_list = ring_list_tail = NULL;
    hs_thread_info *i = info_list;
    while (i) {
        hs_thread_info *next = i->next;
        if (!me || i != me->info) {
            free(i->name);
            free(i);
        }
        i = next;
    }
    info_list = info_list_tail = NULL;
    next_thread_index = fork_block_start % HS_THREAD_INDEX_MASK + 1;
    if (me) {
        hs_ring *mine = me->ring;
        atomic_store(&mine->head, 0);
        atomic_store(&mine->tail, 0);
        mine->cached_tail = 0;
        mine->woke_at_tail = 0;
        append_ring(mine);
        me->info->next = NULL;
        me->info->tid = os_thread_id();
        /* The parent goes on with this thread's index and sequence numbers: the child's
         * spans take the first index of the block set aside for it. */
        me->info->index = fork_block_start;
        atomic_store(&me->info->dropped_full, 0);
        atomic_store(&me->info->dropped_other, 0);
        me->info->drain_seq = me->last_pushed_seq;
        info_list = info_list_tail = me->info;
    }
}
