/* hs_registry: thread registration, span id ranges, thread exit and fork. */
#define _GNU_SOURCE
#include "hs_registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#include <sys/syscall.h>
#endif

#include "hs_selftime.h"

_Thread_local hs_tstate *hs_tls __attribute__((tls_model("initial-exec"))) = NULL;
_Atomic int hs_enabled = 1;
/* The units above (hs_registry.h): written once by hs_registry_set_ops, read after. */
static hs_registry_ops ops;

void hs_registry_set_ops(const hs_registry_ops *given) {
    static const hs_registry_ops none;
    ops = given ? *given : none;
}

void hs_stack_edit_begin(hs_tstate *t) {
    if (ops.stack_edit_begin) ops.stack_edit_begin(t);
}

void hs_stack_edit_end(hs_tstate *t) {
    if (ops.stack_edit_end) ops.stack_edit_end(t);
}

__attribute__((noinline)) void hs_ctx_switch(hs_tstate *t) {
    if (ops.ctx_switch) ops.ctx_switch(t);
    if (*t->ctx_slot != t->ctx) t->ctx = *t->ctx_slot;
}
static _Atomic uint64_t next_serial = 1;

#define INITIAL_STACK 64
#define MAX_EXITED_DROP_ROWS 10000 /* beyond: counted in the totals only */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hs_chain *chain_list = NULL, *chain_list_tail = NULL;
static hs_thread_info *info_list = NULL, *info_list_tail = NULL;
/* exited threads whose state is gone: their drops (registry lock) */
static uint64_t exited_cap = 0, exited_other = 0;
static hs_drop_row *exited_rows = NULL;
static uint32_t exited_nrows = 0, exited_rows_cap = 0;

static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

void hs_registry_lock(void) { pthread_mutex_lock(&registry_lock); }
void hs_registry_unlock(void) { pthread_mutex_unlock(&registry_lock); }
hs_chain *hs_registry_chains(void) { return chain_list; }
hs_thread_info *hs_registry_infos(void) { return info_list; }
hs_drop_row *hs_registry_exited_drops(uint32_t *n) {
    *n = exited_nrows;
    return exited_rows;
}

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

/* ---- span ids ------------------------------------------------------------------------------ */

static _Atomic uint64_t id_base = 0;
static _Atomic uint64_t id_next_range = 0;
static pthread_once_t id_once = PTHREAD_ONCE_INIT;

static uint64_t random_u64(void) {
    uint64_t x = 0;
#if defined(__linux__)
    if (getrandom(&x, sizeof x, 0) == (ssize_t)sizeof x) return x;
#endif
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        size_t got = fread(&x, sizeof x, 1, f);
        fclose(f);
        if (got == 1) return x;
    }
    /* No entropy source: the clock, the pid and an address, mixed (splitmix64). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 48) ^ (uint64_t)(uintptr_t)&x;
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static _Atomic pid_t id_pid = 0; /* the process that drew id_base */

static void draw_id_base(void) {
    /* aligned to the range size, so the ranges holding 0 and 2^64 - 1 are whole ranges */
    atomic_store(&id_base, random_u64() & ~(HS_ID_RANGE - 1));
    atomic_store(&id_next_range, 0);
    atomic_store(&id_pid, getpid());
}

uint64_t hs_id_base(void) {
    pthread_once(&id_once, draw_id_base);
    /* A child forked before this process's fork handlers were registered (they are, at its
     * first span): a DataLoader parent that drained, and so drew its base, before recording
     * anything handed that base to every worker, and two workers wrote the same ids. Called
     * on slow paths only (a thread's next id range, a drain): the getpid() costs nothing. */
    if (atomic_load(&id_pid) != getpid()) draw_id_base();
    return atomic_load(&id_base);
}

static uint64_t take_id_range(void) {
    uint64_t base = hs_id_base();
    for (;;) {
        uint64_t k = atomic_fetch_add_explicit(&id_next_range, 1, memory_order_relaxed);
        uint64_t start = base + (k << HS_ID_RANGE_BITS);
        if (start != 0 && start != (uint64_t)0 - HS_ID_RANGE) return start;
    }
}

uint64_t hs_take_id_range(void) { return take_id_range(); }

uint64_t hs_seq_refill(hs_tstate *t) {
    uint64_t start = take_id_range();
    t->seq = start;
    t->seq_end = start + HS_ID_RANGE;
    return start;
}

/* ---- threads ------------------------------------------------------------------------------ */

/* registry lock held */
static void append_chain(hs_chain *ch) {
    ch->next = NULL;
    if (chain_list_tail) chain_list_tail->next = ch;
    else chain_list = ch;
    chain_list_tail = ch;
}

/* Thread exit: the chain is retired; the drain side takes what is left in it, then frees
 * it and the thread's info. The frames still open are lost with the thread (they never
 * completed). */
static void on_thread_exit(void *p) {
    hs_tstate *t = p;
    if (!t) return;
    hs_chain *chain = t->chain;
    atomic_store(&t->info->alive, 0);
    hs_writer_retire(&t->w);
    /* Another context's stack (owned by its stack object) may be current: free our own
     * (unless it is a flight file slot's, which stays with the slot). */
    hs_frame *own = t->stack_owner ? t->own_stack : t->stack;
    if (!(ops.stack_kept && ops.stack_kept(own))) free(own);
    if (!(ops.tstate_release && ops.tstate_release(t))) free(t);
    hs_tls = NULL;
    /* Last: once retired, the drain side may free the chain and (after a drain()) the
     * info at any moment. */
    atomic_store_explicit(&chain->retired, 1, memory_order_release);
    if (ops.thread_exited) ops.thread_exited();
}

static void make_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

hs_tstate *hs_tstate_register(void) {
    pthread_once(&key_once, make_key);
    hs_thread_info *info = calloc(1, sizeof(*info));
    hs_chain *chain = hs_chain_create();
    if (!info || !chain) {
        free(info);
        free(chain);
        return NULL;
    }
    info->tid = os_thread_id();
    /* Named outside the lock: the glue may run Python code. */
    info->name = ops.thread_name ? ops.thread_name() : NULL;
    if (!info->name) {
        char buf[48];
        snprintf(buf, sizeof buf, "Thread-%lld", (long long)info->tid);
        info->name = strdup(buf);
    }
    /* With a flight file, the thread's state and first frames live in a slot of it, so
     * its open spans outlive the process and can be read from outside. */
    hs_frame *stack = NULL;
    uint32_t stack_cap = INITIAL_STACK;
    hs_tstate *t = ops.tstate_alloc ? ops.tstate_alloc(info->tid, info->name, &stack, &stack_cap) : NULL;
    if (!t) {
        t = calloc(1, sizeof(*t));
        stack = malloc(sizeof(hs_frame) * INITIAL_STACK);
        stack_cap = INITIAL_STACK;
        if (!t || !stack) {
            free(t);
            free(stack);
            free(info->name);
            free(info);
            free(chain);
            return NULL;
        }
    }
    atomic_init(&info->alive, 1);
    info->batch_tix = -1;
    t->info = info;
    t->chain = chain;
    t->stack = stack;
    t->stack_cap = stack_cap;
    t->ctx_slot = (void *const *)&t->ctx_none; /* until the glue links a Python thread */
    t->serial = atomic_fetch_add(&next_serial, 1);
    hs_seq_refill(t);
    t->last_pushed_seq = t->seq;
    info->drain_seq = t->seq;
    chain->owner_info = info;
    /* A first block now (small: it grows as the thread records), so the first span does not
     * take the slow path; at the cap the thread has none yet, and its records are dropped
     * (counted) until a block frees up. */
    hs_writer_switch(chain, &t->w);
    hs_block_claim(t->w.blk, info->tid, t->last_pushed_seq);

    pthread_mutex_lock(&registry_lock);
    if (info_list_tail) info_list_tail->next = info;
    else info_list = info;
    info_list_tail = info;
    append_chain(chain);
    pthread_mutex_unlock(&registry_lock);

    hs_tls = t;
    pthread_setspecific(exit_key, t);
    if (ops.thread_started) ops.thread_started();
    if (ops.thread_link) ops.thread_link(t);
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
    if (ops.thread_renamed) ops.thread_renamed(t, name);
}

int hs_stack_grow(hs_tstate *t) {
    uint32_t nc = t->stack_cap * 2;
    hs_frame *ns;
    if (ops.stack_kept && ops.stack_kept(t->stack)) {
        /* A flight slot's frames stay in place (the slot keeps them): deeper stacks move to
         * memory of their own, and the file shows the thread's stack as too deep. */
        ns = malloc(sizeof(hs_frame) * nc);
        if (ns) memcpy(ns, t->stack, sizeof(hs_frame) * t->stack_cap);
    } else {
        ns = realloc(t->stack, sizeof(hs_frame) * nc);
    }
    if (!ns) return -1;
    t->stack = ns;
    t->stack_cap = nc;
    return 0;
}

/* registry lock held */
void hs_registry_retire(hs_chain *ch) {
    hs_chain *prev = NULL;
    for (hs_chain *it = chain_list; it; prev = it, it = it->next) {
        if (it != ch) continue;
        if (prev) prev->next = it->next;
        else chain_list = it->next;
        if (chain_list_tail == it) chain_list_tail = prev;
        break;
    }
    hs_thread_info *info = ch->owner_info;
    hs_thread_info *iprev = NULL;
    for (hs_thread_info *it = info_list; it; iprev = it, it = it->next) {
        if (it != info) continue;
        if (iprev) iprev->next = it->next;
        else info_list = it->next;
        if (info_list_tail == it) info_list_tail = iprev;
        break;
    }
    uint64_t cap = atomic_load(&info->dropped_cap), other = atomic_load(&info->dropped_other);
    exited_cap += cap;
    exited_other += other;
    if ((cap || other) && exited_nrows < MAX_EXITED_DROP_ROWS) {
        if (exited_nrows == exited_rows_cap) {
            uint32_t nc = exited_rows_cap ? exited_rows_cap * 2 : 16;
            hs_drop_row *grown = realloc(exited_rows, sizeof(*grown) * nc);
            if (grown) {
                exited_rows = grown;
                exited_rows_cap = nc;
            }
        }
        if (exited_nrows < exited_rows_cap) {
            hs_drop_row *row = &exited_rows[exited_nrows++];
            row->tid = info->tid;
            row->name = strdup(info->name ? info->name : "");
            row->cap = cap;
            row->other = other;
        }
    }
    hs_chain_destroy(ch);
}

uint64_t hs_get_capacity(void) { return atomic_load(&hs_block_records); }
uint64_t hs_get_memory_cap(void) { return atomic_load(&hs_memory_cap); }

void hs_dropped_by_cause(uint64_t *cap, uint64_t *other) {
    pthread_mutex_lock(&registry_lock);
    uint64_t c = exited_cap, o = exited_other;
    for (hs_thread_info *i = info_list; i; i = i->next) {
        c += atomic_load_explicit(&i->dropped_cap, memory_order_relaxed);
        o += atomic_load_explicit(&i->dropped_other, memory_order_relaxed);
    }
    pthread_mutex_unlock(&registry_lock);
    *cap = c;
    *other = o;
}

void hs_count_lost(uint64_t spans) {
    pthread_mutex_lock(&registry_lock);
    exited_other += spans;
    pthread_mutex_unlock(&registry_lock);
}

uint64_t hs_dropped_total(void) {
    uint64_t cap, other;
    hs_dropped_by_cause(&cap, &other);
    return cap + other;
}

void hs_registry_after_fork_child(void) {
    /* Only the forking thread exists now. Every record not yet drained was the parent's
     * (the parent drains it): every chain goes, the calling thread's too, and every other
     * thread's info. */
    hs_tstate *me = hs_tls;
    if (me) pthread_setspecific(exit_key, me);
    hs_chain *ch = chain_list;
    while (ch) {
        hs_chain *next = ch->next;
        hs_chain_discard(ch);
        ch = next;
    }
    chain_list = chain_list_tail = NULL;
    hs_thread_info *i = info_list;
    while (i) {
        hs_thread_info *next = i->next;
        if (!me || i != me->info) {
            hs_self_state_free(i->self_state);
            free(i->name);
            free(i);
        }
        i = next;
    }
    info_list = info_list_tail = NULL;
    for (uint32_t k = 0; k < exited_nrows; k++) free(exited_rows[k].name);
    free(exited_rows);
    exited_rows = NULL;
    exited_nrows = exited_rows_cap = 0;
    exited_cap = exited_other = 0;
    hs_blocks_after_fork_child();
    /* A fresh id base: the child's ids never meet the parent's, nor a sibling's. (The once
     * first, so that a base the parent never drew is not drawn again over this one.) */
    pthread_once(&id_once, draw_id_base);
    draw_id_base();
    if (!me) return;
    me->chain = hs_chain_create();
    if (!me->chain) { /* out of memory in the child: it records nothing */
        hs_tls = NULL;
        return;
    }
    me->chain->owner_info = me->info;
    memset(&me->w, 0, sizeof me->w);
    hs_writer_switch(me->chain, &me->w);
    hs_block_claim(me->w.blk, os_thread_id(), me->last_pushed_seq);
    append_chain(me->chain);
    me->info->next = NULL;
    me->info->tid = os_thread_id();
    atomic_store(&me->info->dropped_cap, 0);
    atomic_store(&me->info->dropped_other, 0);
    me->info->batch_gen = 0;
    me->info->batch_tix = -1;
    /* the parent's open spans take new ids here: what their children covered is the parent's */
    hs_self_state_free(me->info->self_state);
    me->info->self_state = NULL;
    info_list = info_list_tail = me->info;
    /* Spans open across the fork close in both processes: in the child they take new ids
     * (in order, so their nesting holds), or the parent's and the child's records of them
     * would share ids. */
    uint64_t seq = hs_seq_refill(me);
    me->last_pushed_seq = seq;
    me->info->drain_seq = seq;
    for (uint32_t d = 0; d < me->depth; d++) me->stack[d].seq = me->seq++;
}
