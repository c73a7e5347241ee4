/* hs_selftime: what the closed children of a thread's open spans cover (see hs_selftime.h). */
#include "hs_selftime.h"

#include <stdlib.h>
#include <string.h>

typedef struct self_interval {
    int64_t start, end;
} self_interval;

/* One open span that has closed children: keyed by its id (0, never a span id, is empty). */
typedef struct self_entry {
    uint64_t key;
    int64_t sum;          /* children that overlap nothing: durations summed */
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
                     int overlap) {
    hs_self_state *st = *state;
    int64_t dur = end_ns > start_ns ? end_ns - start_ns : 0;
    int64_t covered = 0;
    if (st && st->count) {
        int64_t i = self_find(st, id);
        if (i >= 0) {
            covered = st->slots[i].sum + st->slots[i].merged_len;
            self_remove(st, (uint32_t)i);
        }
    }
    if (parent && dur > 0) {
        if (!st) {
            st = calloc(1, sizeof(*st));
            *state = st;
        }
        self_entry *e = st ? self_insert(st, parent) : NULL;
        if (e && (!overlap || merge_interval(e, start_ns, end_ns) < 0)) e->sum += dur;
    }
    int64_t self = dur - covered;
    return self > 0 ? self : 0;
}

void hs_self_state_free(hs_self_state *st) {
    if (!st) return;
    if (st->slots)
        for (uint32_t k = 0; k < (1u << st->bits); k++) free(st->slots[k].merged);
    free(st->slots);
    free(st);
}
