/* hs_selftime: what the closed children of a thread's open spans cover (see hs_selftime.h). */
#include "hs_selftime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct self_interval {
    int64_t start, end;
} self_interval;

/* One open span that has closed children: keyed by its id (0, never a span id, is empty). */
typedef struct self_entry {
    uint64_t key;
    int64_t sum;          /* children that overlap nothing: durations summed */
    int64_t own_sum;      /* children on the span's own stack that may overlap task roots
                             (closed after it created a task): summed, as they never
                             overlap one another */
    int64_t merged_len;   /* the length of the union below */
    self_interval *merged; /* children that may overlap: disjoint, by start */
    uint32_t n, cap;
} self_entry;

struct hs_self_state {
    self_entry *slots;
    uint32_t bits, count;
};

/* Spans with closed children, open at once on one thread: a few per nesting level in any
 * sane program. Past this (parents whose records never come: dropped at the memory cap, or
 * tasks that outlive the span they were created under) a child's time is left to its
 * parent's own instead of growing the table without bound. */
#define SELF_MAX_ENTRIES (1u << 20)

static inline uint32_t slot_of(const hs_self_state *st, uint64_t key) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - st->bits));
}

static int64_t self_find(const hs_self_state *st, uint64_t key) {
    uint32_t mask = (1u << st->bits) - 1;
    for (uint32_t i = slot_of(st, key);; i = (i + 1) & mask) {
        if (st->slots[i].key == key) return i;
        if (!st->slots[i].key) return -1;
    }
}

/* Linear probing's deletion: later entries of the run move back into the hole, so lookups
 * never need tombstones. */
static void self_remove(hs_self_state *st, uint32_t i) {
    uint32_t mask = (1u << st->bits) - 1;
    free(st->slots[i].merged);
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask; st->slots[j].key; j = (j + 1) & mask) {
        uint32_t home = slot_of(st, st->slots[j].key);
        /* the entry at j may fill the hole if its home is not within (hole, j] */
        if ((j > hole && (home <= hole || home > j)) || (j < hole && home <= hole && home > j)) {
            st->slots[hole] = st->slots[j];
            hole = j;
        }
    }
    memset(&st->slots[hole], 0, sizeof(self_entry));
    st->count--;
}

static int self_grow(hs_self_state *st) {
    uint32_t old_cap = st->slots ? 1u << st->bits : 0;
    uint32_t bits = st->slots ? st->bits + 1 : 4;
    self_entry *slots = calloc((size_t)1 << bits, sizeof(self_entry));
    if (!slots) return -1;
    self_entry *old = st->slots;
    st->slots = slots;
    st->bits = bits;
    uint32_t mask = (1u << bits) - 1;
    for (uint32_t k = 0; k < old_cap; k++) {
        if (!old[k].key) continue;
        uint32_t i = slot_of(st, old[k].key);
        while (slots[i].key) i = (i + 1) & mask;
        slots[i] = old[k];
    }
    free(old);
    return 0;
}

static self_entry *self_insert(hs_self_state *st, uint64_t key) {
    if (st->slots) {
        int64_t i = self_find(st, key);
        if (i >= 0) return &st->slots[i];
    }
    if (st->count >= SELF_MAX_ENTRIES) return NULL;
    if ((!st->slots || (st->count + 1) * 2 > (1u << st->bits)) && self_grow(st) < 0) return NULL;
    uint32_t mask = (1u << st->bits) - 1, i = slot_of(st, key);
    while (st->slots[i].key) i = (i + 1) & mask;
    st->slots[i].key = key;
    st->count++;
    return &st->slots[i];
}

/* Add [start, end] to the entry's disjoint intervals. A thread's spans close in order, so
 * the new interval ends after every other and the merge happens at the tail (amortised
 * O(1)); an interval out of order is merged where it belongs all the same. */
static int merge_interval(self_entry *e, int64_t start, int64_t end) {
    uint32_t j = e->n;
    while (j > 0 && e->merged[j - 1].start > end) j--; /* entirely after the new one */
    uint32_t i = j;
    while (i > 0 && e->merged[i - 1].end >= start) i--; /* overlapping or touching it */
    if (i == j && e->n == e->cap) {
        uint32_t cap = e->cap ? e->cap * 2 : 4;
        self_interval *grown = realloc(e->merged, sizeof(self_interval) * cap);
        if (!grown) return -1;
        e->merged = grown;
        e->cap = cap;
    }
    for (uint32_t k = i; k < j; k++) {
        if (e->merged[k].start < start) start = e->merged[k].start;
        if (e->merged[k].end > end) end = e->merged[k].end;
        e->merged_len -= e->merged[k].end - e->merged[k].start;
    }
    /* [i, j) becomes one interval at i */
    memmove(&e->merged[i + 1], &e->merged[j], sizeof(self_interval) * (e->n - j));
    e->n = e->n - (j - i) + 1;
    e->merged[i].start = start;
    e->merged[i].end = end;
    e->merged_len += end - start;
    return 0;
}

int64_t hs_self_step(hs_self_state **state, uint64_t id, uint64_t parent, int64_t start_ns, int64_t end_ns,
                     int overlap, int task_root, int in_task, int64_t *wait_ns) {
    hs_self_state *st = *state;
    int64_t dur = end_ns > start_ns ? end_ns - start_ns : 0;
    int64_t covered = 0, own = 0;
    if (st && st->count) {
        int64_t i = self_find(st, id);
        if (i >= 0) {
            covered = st->slots[i].sum + st->slots[i].merged_len;
            own = st->slots[i].sum + st->slots[i].own_sum;
            self_remove(st, (uint32_t)i);
        }
    }
    if (parent && dur > 0) {
        if (!st) {
            st = calloc(1, sizeof(*st));
            *state = st;
        }
        self_entry *e = st ? self_insert(st, parent) : NULL;
        if (e) {
            if (!overlap || merge_interval(e, start_ns, end_ns) < 0) e->sum += dur;
            else if (!task_root) e->own_sum += dur;
        }
    }
    if (!in_task) {
        *wait_ns = 0;
        int64_t self = dur - covered;
        return self > 0 ? self : 0;
    }
    /* A task's span: what its own stack leaves it is its own code's time or its task's
     * suspension; the roots of tasks it created ran while its task was suspended. */
    int64_t innermost = dur - own;
    if (innermost < 0) innermost = 0;
    int64_t wait = *wait_ns < 0 ? 0 : *wait_ns > innermost ? innermost : *wait_ns;
    *wait_ns = wait;
    return innermost - wait;
}

/* ---------------------------------------------------------------- the wait map */

typedef struct wait_slot {
    uint64_t key; /* span id; 0: empty */
    uint64_t ticks;
} wait_slot;

static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static wait_slot *wait_slots = NULL;
static uint32_t wait_bits = 0, wait_count = 0;
static _Atomic uint32_t wait_any = 0;

static inline uint32_t wait_home(uint64_t key) { return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - wait_bits)); }

static int wait_grow(void) {
    uint32_t old_cap = wait_slots ? 1u << wait_bits : 0;
    uint32_t bits = wait_slots ? wait_bits + 1 : 6;
    if (bits > 26) return -1; /* 64 M open spans of suspended tasks: keep no more */
    wait_slot *slots = calloc((size_t)1 << bits, sizeof(wait_slot));
    if (!slots) return -1;
    wait_slot *old = wait_slots;
    wait_slots = slots;
    wait_bits = bits;
    uint32_t mask = (1u << bits) - 1;
    for (uint32_t k = 0; k < old_cap; k++) {
        if (!old[k].key) continue;
        uint32_t i = wait_home(old[k].key);
        while (slots[i].key) i = (i + 1) & mask;
        slots[i] = old[k];
    }
    free(old);
    return 0;
}

void hs_wait_add(uint64_t id, uint64_t ticks) {
    if (!id) return;
    pthread_mutex_lock(&wait_lock);
    if (wait_slots) {
        uint32_t mask = (1u << wait_bits) - 1;
        for (uint32_t i = wait_home(id); wait_slots[i].key; i = (i + 1) & mask)
            if (wait_slots[i].key == id) {
                wait_slots[i].ticks += ticks;
                pthread_mutex_unlock(&wait_lock);
                return;
            }
    }
    if ((!wait_slots || (wait_count + 1) * 2 > (1u << wait_bits)) && wait_grow() < 0) {
        pthread_mutex_unlock(&wait_lock);
        return;
    }
    uint32_t mask = (1u << wait_bits) - 1, i = wait_home(id);
    while (wait_slots[i].key) i = (i + 1) & mask;
    wait_slots[i].key = id;
    wait_slots[i].ticks = ticks;
    wait_count++;
    atomic_store_explicit(&wait_any, wait_count, memory_order_relaxed);
    pthread_mutex_unlock(&wait_lock);
}

int hs_wait_take(uint64_t id, uint64_t *ticks) {
    if (!id || !atomic_load_explicit(&wait_any, memory_order_relaxed)) return 0;
    int found = 0;
    pthread_mutex_lock(&wait_lock);
    if (wait_slots) {
        uint32_t mask = (1u << wait_bits) - 1;
        uint32_t i = wait_home(id);
        for (; wait_slots[i].key; i = (i + 1) & mask)
            if (wait_slots[i].key == id) break;
        if (wait_slots[i].key == id) {
            found = 1;
            *ticks = wait_slots[i].ticks;
            /* linear probing's deletion, as self_remove */
            uint32_t hole = i;
            for (uint32_t j = (i + 1) & mask; wait_slots[j].key; j = (j + 1) & mask) {
                uint32_t home = wait_home(wait_slots[j].key);
                if ((j > hole && (home <= hole || home > j)) || (j < hole && home <= hole && home > j)) {
                    wait_slots[hole] = wait_slots[j];
                    hole = j;
                }
            }
            wait_slots[hole].key = 0;
            wait_slots[hole].ticks = 0;
            wait_count--;
            atomic_store_explicit(&wait_any, wait_count, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&wait_lock);
    return found;
}

uint64_t hs_wait_peek(const uint64_t *ids, uint64_t n, uint64_t *pairs) {
    if (!n || !atomic_load_explicit(&wait_any, memory_order_relaxed)) return 0;
    uint64_t found = 0;
    pthread_mutex_lock(&wait_lock);
    if (wait_slots) {
        uint32_t mask = (1u << wait_bits) - 1;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t id = ids[k];
            if (!id) continue;
            for (uint32_t i = wait_home(id); wait_slots[i].key; i = (i + 1) & mask)
                if (wait_slots[i].key == id) {
                    pairs[2 * found] = id;
                    pairs[2 * found + 1] = wait_slots[i].ticks;
                    found++;
                    break;
                }
        }
    }
    pthread_mutex_unlock(&wait_lock);
    return found;
}

int hs_wait_any(void) { return atomic_load_explicit(&wait_any, memory_order_relaxed) != 0; }

void hs_wait_after_fork_child(void) {
    pthread_mutex_init(&wait_lock, NULL);
    free(wait_slots);
    wait_slots = NULL;
    wait_bits = wait_count = 0;
    atomic_store_explicit(&wait_any, 0, memory_order_relaxed);
}

void hs_self_state_free(hs_self_state *st) {
    if (!st) return;
    if (st->slots)
        for (uint32_t k = 0; k < (1u << st->bits); k++) free(st->slots[k].merged);
    free(st->slots);
    free(st);
}
