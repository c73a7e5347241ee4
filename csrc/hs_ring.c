/* hs_ring: block memory, the lock-free block pool, the producer's switch and the
 * consumer's walk of a chain. */
#define _GNU_SOURCE
#include "hs_ring.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_BLOCK_RECORDS 1024u      /* 32 KiB: a busy thread's blocks, once grown */
#define DEFAULT_MEMORY_CAP (64ull << 20)
#define MAP_MIN_BYTES (16u << 10)        /* smaller blocks (tests) come from malloc */

_Atomic uint64_t hs_block_records = DEFAULT_BLOCK_RECORDS;
_Atomic uint64_t hs_memory_cap = DEFAULT_MEMORY_CAP;
_Atomic uint64_t hs_first_block_records = HS_FIRST_BLOCK_RECORDS;

/* The block provider's operations (hs_ring.h): written once by hs_ring_set_ops. */
static hs_ring_ops ops;

void hs_ring_set_ops(const hs_ring_ops *given) {
    static const hs_ring_ops none;
    ops = given ? *given : none;
}

static _Atomic uint64_t held_bytes = 0;   /* every block allocated, pooled ones included */
static _Atomic uint64_t pooled_bytes = 0;
/* The blocks threads write into now, and how many threads have one (slow paths only: a
 * switch, a thread's exit), to tell the causes of a drop at the cap apart. */
static _Atomic uint64_t current_bytes = 0;
static _Atomic uint64_t live_writers = 0;
static _Atomic uint64_t cap_undrained = 0, cap_thread_blocks = 0, cap_last_live = 0;

uint64_t hs_blocks_current_bytes(void) { return atomic_load_explicit(&current_bytes, memory_order_relaxed); }

void hs_cap_drop_note(uint64_t own_bytes) {
    uint64_t held = hs_blocks_held_bytes(), pooled = hs_blocks_pool_bytes(), cur = hs_blocks_current_bytes();
    uint64_t rest = held > pooled + cur ? held - pooled - cur : 0;
    uint64_t others = cur > own_bytes ? cur - own_bytes : 0;
    /* What holds most of the cap: records waiting for drain() (sealed blocks, segments, and
     * the dropping thread's own block, full), or the blocks the other live threads are
     * writing into (their fill is not known here: many threads is the case to tell). */
    if (rest + own_bytes >= others) atomic_fetch_add_explicit(&cap_undrained, 1, memory_order_relaxed);
    else atomic_fetch_add_explicit(&cap_thread_blocks, 1, memory_order_relaxed);
    atomic_store_explicit(&cap_last_live, atomic_load_explicit(&live_writers, memory_order_relaxed),
                          memory_order_relaxed);
}

void hs_cap_causes_get(hs_cap_causes *out) {
    out->undrained = atomic_load(&cap_undrained);
    out->thread_blocks = atomic_load(&cap_thread_blocks);
    out->live_threads_at_last = atomic_load(&cap_last_live);
}

void hs_writer_retire(hs_writer *w) {
    if (!w->blk) return;
    atomic_fetch_sub_explicit(&current_bytes, w->blk->bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_writers, 1, memory_order_relaxed);
}

uint64_t hs_blocks_held_bytes(void) { return atomic_load_explicit(&held_bytes, memory_order_relaxed); }
uint64_t hs_blocks_pool_bytes(void) { return atomic_load_explicit(&pooled_bytes, memory_order_relaxed); }

/* Reserve bytes under the cap, exactly (a CAS loop: two threads near the cap never both
 * fail where one would fit). */
static int reserve(uint64_t bytes) {
    uint64_t cap = atomic_load_explicit(&hs_memory_cap, memory_order_relaxed);
    uint64_t held = atomic_load_explicit(&held_bytes, memory_order_relaxed);
    do {
        if (held + bytes > cap) return 0;
    } while (!atomic_compare_exchange_weak_explicit(&held_bytes, &held, held + bytes, memory_order_relaxed,
                                                    memory_order_relaxed));
    return 1;
}

/* Blocks of 16 KiB and up are their own mappings, so a trimmed pool really goes back to
 * the system; pages are touched as a block fills, so a thread that records little costs
 * little. */
static hs_block *block_alloc(uint64_t records) {
    size_t bytes = sizeof(hs_block) + records * sizeof(hs_record);
    hs_block *b;
    int mapped = bytes >= MAP_MIN_BYTES;
    /* With a flight file, blocks of its size are carved from it (MAP_SHARED: the kernel
     * keeps their records when the process dies); others, or when it is full, as usual. */
    uint64_t fbytes = 0;
    hs_block *fb = ops.block_alloc ? ops.block_alloc(records, &fbytes) : NULL;
    if (fb) {
        b = fb;
        bytes = fbytes;
        mapped = HS_BLOCK_FLIGHT;
    } else if (mapped) {
        bytes = (bytes + 4095) & ~(size_t)4095;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        b = p;
    } else {
        bytes = (bytes + 63) & ~(size_t)63;
        b = aligned_alloc(64, bytes);
        if (!b) return NULL;
    }
    b->cap = records;
    b->bytes = records * sizeof(hs_record);
    b->alloc = bytes;
    b->mapped = (uint32_t)mapped;
    b->refs = 0;
    atomic_init(&b->head, 0);
    atomic_init(&b->next, NULL);
    atomic_init(&b->flight_state, 0);
    atomic_init(&b->flight_drained, 0);
    b->flight_tid = 0;
    b->flight_base_seq = 0;
    return b;
}

static void block_release_memory(hs_block *b) {
    if (b->mapped == HS_BLOCK_FLIGHT) ops.block_free(b);
    else if (b->mapped) munmap(b, b->alloc);
    else free(b);
}

static void block_free(hs_block *b) {
    atomic_fetch_sub_explicit(&held_bytes, b->bytes, memory_order_relaxed);
    block_release_memory(b);
}

/* ---- the pool: a bounded lock-free MPMC queue (D. Vyukov's) ---------------------------------
 * Recording threads pop (on their switch), the drain side pushes. Each cell's sequence
 * number says whose turn it is, so there is no ABA and no lock. `turn` holds the sequence
 * minus the cell's index, so the zero-initialised array is the initial state. */
#define POOL_SLOTS 4096u
typedef struct {
    _Atomic uint64_t turn;
    hs_block *block;
} pool_cell;
static pool_cell pool[POOL_SLOTS];
static _Alignas(64) _Atomic uint64_t pool_enq = 0;
static _Alignas(64) _Atomic uint64_t pool_deq = 0;

static inline uint64_t cell_seq(pool_cell *c, uint64_t idx) {
    return atomic_load_explicit(&c->turn, memory_order_acquire) + idx;
}
static inline void cell_set(pool_cell *c, uint64_t idx, uint64_t seq) {
    atomic_store_explicit(&c->turn, seq - idx, memory_order_release);
}

static int pool_push(hs_block *b) {
    uint64_t pos = atomic_load_explicit(&pool_enq, memory_order_relaxed);
    pool_cell *c;
    for (;;) {
        uint64_t idx = pos & (POOL_SLOTS - 1);
        c = &pool[idx];
        int64_t dif = (int64_t)(cell_seq(c, idx) - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&pool_enq, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
        } else if (dif < 0) {
            return 0; /* full */
        } else {
            pos = atomic_load_explicit(&pool_enq, memory_order_relaxed);
        }
    }
    c->block = b;
    atomic_fetch_add_explicit(&pooled_bytes, b->bytes, memory_order_relaxed);
    cell_set(c, pos & (POOL_SLOTS - 1), pos + 1);
    return 1;
}

static hs_block *pool_pop(void) {
    uint64_t pos = atomic_load_explicit(&pool_deq, memory_order_relaxed);
    pool_cell *c;
    for (;;) {
        uint64_t idx = pos & (POOL_SLOTS - 1);
        c = &pool[idx];
        int64_t dif = (int64_t)(cell_seq(c, idx) - (pos + 1));
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&pool_deq, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
        } else if (dif < 0) {
            return NULL; /* empty */
        } else {
            pos = atomic_load_explicit(&pool_deq, memory_order_relaxed);
        }
    }
    hs_block *b = c->block;
    atomic_fetch_sub_explicit(&pooled_bytes, b->bytes, memory_order_relaxed);
    cell_set(c, pos & (POOL_SLOTS - 1), pos + POOL_SLOTS);
    return b;
}

void hs_block_put(hs_block *b) {
    /* nothing refers to it: its records were drained (or discarded), not to be recovered */
    if (b->mapped == HS_BLOCK_FLIGHT) atomic_store_explicit(&b->flight_state, 0, memory_order_release);
    /* Only full-size blocks are pooled: a smaller one is a thread's first few (growing), taken
     * once per thread, so pooling them would only keep memory no switch asks for. */
    else if (b->cap != atomic_load_explicit(&hs_block_records, memory_order_relaxed)) {
        block_free(b);
        return;
    }
    if (!pool_push(b)) block_free(b);
}

void hs_pool_trim(void) {
    hs_block *b;
    while ((b = pool_pop())) block_free(b);
}

void hs_pool_refill(uint32_t n) {
    uint64_t records = atomic_load_explicit(&hs_block_records, memory_order_relaxed);
    uint64_t bytes = records * sizeof(hs_record);
    while (hs_blocks_pool_bytes() < n * bytes) {
        if (!reserve(bytes)) return;
        hs_block *b = block_alloc(records);
        if (!b) {
            atomic_fetch_sub_explicit(&held_bytes, bytes, memory_order_relaxed);
            return;
        }
        hs_block_put(b);
    }
}

void hs_blocks_after_fork_child(void) {
    /* A recording thread of the parent may have been between its CAS and its cell update
     * when fork() copied the pool: the cells cannot be trusted, so the child starts with
     * an empty pool (the parent's pooled blocks stay mapped, shared copy-on-write, unused). */
    memset(pool, 0, sizeof pool);
    atomic_store(&pool_enq, 0);
    atomic_store(&pool_deq, 0);
    atomic_store(&pooled_bytes, 0);
    atomic_store(&held_bytes, 0);
    atomic_store(&current_bytes, 0);
    atomic_store(&live_writers, 0);
    atomic_store(&cap_undrained, 0);
    atomic_store(&cap_thread_blocks, 0);
    atomic_store(&cap_last_live, 0);
}

/* ---- producer --------------------------------------------------------------------------- */

/* The size of the writer's next block: the first is small and each next one twice the
 * last, up to the configured size (a flight file's blocks are all of that size). */
static uint64_t next_block_records(const hs_writer *w, uint64_t full) {
    if (ops.providing && ops.providing()) return full;
    uint64_t first = atomic_load_explicit(&hs_first_block_records, memory_order_relaxed);
    uint64_t want = w->blk ? w->blk->cap * 2 : first;
    if (want < first) want = first;
    return want < full ? want : full;
}

/* A pooled block of the configured size, or NULL (the pool is empty). */
static hs_block *pool_take(uint64_t full) {
    hs_block *nb = pool_pop();
    while (nb && nb->cap != full) { /* pooled before configure(capacity=...) changed it */
        block_free(nb);
        nb = pool_pop();
    }
    return nb;
}

int hs_writer_switch(hs_chain *ch, hs_writer *w) {
    uint64_t full = atomic_load_explicit(&hs_block_records, memory_order_relaxed);
    uint64_t records = next_block_records(w, full);
    hs_block *nb = records == full ? pool_take(full) : NULL;
    if (!nb) {
        if (reserve(records * sizeof(hs_record))) {
            nb = block_alloc(records);
            if (!nb) {
                atomic_fetch_sub_explicit(&held_bytes, records * sizeof(hs_record), memory_order_relaxed);
                return HS_SWITCH_NOMEM;
            }
        } else {
            /* At the cap, a growing thread takes a pooled full-size block rather than drop:
             * the pool's memory is counted in the cap already, so it is the room there is
             * (else a new thread dropped every span while the pool's blocks sat idle). */
            nb = records != full ? pool_take(full) : NULL;
            if (!nb) return HS_SWITCH_CAP;
        }
    }
    /* The block is ours alone until the release store below publishes it. */
    atomic_store_explicit(&nb->head, 0, memory_order_relaxed);
    atomic_store_explicit(&nb->next, NULL, memory_order_relaxed);
    nb->refs = 1; /* the chain's */
    atomic_fetch_add_explicit(&current_bytes, nb->bytes, memory_order_relaxed);
    if (w->blk) atomic_fetch_sub_explicit(&current_bytes, w->blk->bytes, memory_order_relaxed);
    else atomic_fetch_add_explicit(&live_writers, 1, memory_order_relaxed);
    if (w->blk) atomic_store_explicit(&w->blk->next, nb, memory_order_release);
    else atomic_store_explicit(&ch->rd, nb, memory_order_release);
    w->blk = nb;
    w->slots = nb->recs;
    w->pos = 0;
    w->limit = nb->cap;
    return HS_SWITCH_OK;
}

/* ---- consumer --------------------------------------------------------------------------- */

hs_chain *hs_chain_create(void) {
    hs_chain *ch = calloc(1, sizeof(*ch));
    if (!ch) return NULL;
    atomic_init(&ch->rd, NULL);
    atomic_init(&ch->retired, 0);
    return ch;
}

uint64_t hs_chain_peek(hs_chain *ch, hs_block **blk, const hs_record **recs) {
    for (;;) {
        hs_block *b = atomic_load_explicit(&ch->rd, memory_order_acquire);
        if (!b) return 0;
        /* next before head: once next is set, the head read after it is final */
        hs_block *nx = atomic_load_explicit(&b->next, memory_order_acquire);
        uint64_t head = atomic_load_explicit(&b->head, memory_order_acquire);
        if (head > ch->rd_pos) {
            *blk = b;
            *recs = &b->recs[ch->rd_pos];
            return head - ch->rd_pos;
        }
        if (!nx) return 0;
        atomic_store_explicit(&ch->rd, nx, memory_order_relaxed);
        ch->rd_pos = 0;
        hs_block_unref(b); /* sealed and fully taken */
    }
}

void hs_chain_advance(hs_chain *ch, uint64_t count) { ch->rd_pos += count; }

int hs_chain_empty(hs_chain *ch) {
    hs_block *b = atomic_load_explicit(&ch->rd, memory_order_acquire);
    if (!b) return 1;
    hs_block *nx = atomic_load_explicit(&b->next, memory_order_acquire);
    return !nx && atomic_load_explicit(&b->head, memory_order_acquire) == ch->rd_pos;
}

void hs_block_discard_ref(hs_block *b) {
    /* After fork, in the child: a flight block is the parent's, shared: never written. */
    if (b->mapped == HS_BLOCK_FLIGHT) return;
    if (--b->refs == 0) block_release_memory(b);
}

void hs_chain_discard(hs_chain *ch) {
    if (!ch) return;
    hs_block *b = atomic_load_explicit(&ch->rd, memory_order_acquire);
    while (b) {
        hs_block *nx = atomic_load_explicit(&b->next, memory_order_acquire);
        hs_block_discard_ref(b);
        b = nx;
    }
    free(ch);
}

void hs_chain_destroy(hs_chain *ch) {
    if (!ch) return;
    hs_block *b = atomic_load_explicit(&ch->rd, memory_order_acquire);
    while (b) {
        hs_block *nx = atomic_load_explicit(&b->next, memory_order_acquire);
        hs_block_unref(b);
        b = nx;
    }
    free(ch);
}
