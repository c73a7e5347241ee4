/* hs_ring: allocation and the consumer side. */
#include "hs_ring.h"

#include <stdlib.h>
#include <string.h>

hs_ring *hs_ring_create(uint64_t capacity) {
    if (capacity < 2) capacity = 2;
    uint64_t storage = 1;
    while (storage < capacity) storage <<= 1;
    hs_ring *r = aligned_alloc(64, (sizeof(hs_ring) + 63) / 64 * 64);
    if (!r) return NULL;
    memset(r, 0, sizeof(*r));
    /* Not zeroed: pages are touched as the ring fills, so an idle thread costs little. */
    r->slots = aligned_alloc(64, storage * sizeof(hs_record));
    if (!r->slots) {
        free(r);
        return NULL;
    }
    r->limit = capacity;
    r->mask = storage - 1;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    atomic_init(&r->retired, 0);
    return r;
}

void hs_ring_destroy(hs_ring *r) {
    if (!r) return;
    free(r->slots);
    free(r);
}

hs_ring_view hs_ring_peek(hs_ring *r) {
    hs_ring_view v = {NULL, 0, NULL, 0};
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t n = head - tail;
    if (!n) return v;
    uint64_t storage = r->mask + 1;
    uint64_t at = tail & r->mask;
    uint64_t first = storage - at;
    if (first > n) first = n;
    v.a = &r->slots[at];
    v.na = first;
    if (n > first) {
        v.b = &r->slots[0];
        v.nb = n - first;
    }
    return v;
}

void hs_ring_release(hs_ring *r, uint64_t count) {
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, tail + count, memory_order_release);
}

uint64_t hs_ring_pending(hs_ring *r) {
    return atomic_load_explicit(&r->head, memory_order_acquire) -
           atomic_load_explicit(&r->tail, memory_order_relaxed);
}
