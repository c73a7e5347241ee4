/* hs_ring: one single-producer / single-consumer ring of 32-byte span records.
 *
 * Free of Python.h. The producer (the recording thread) writes records and publishes its
 * head with a release store; the consumer (the drain side) reads the head with acquire,
 * copies, and publishes its tail with release: the perf ring protocol. No lock, no
 * allocation on push.
 */
#ifndef HS_RING_H
#define HS_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One completed span, written when it ends (so a thread's records are in post-order).
 *
 *   start   raw ticks at enter
 *   arg     user payload, meaningful when HS_F_ARG
 *   w0      bits  0..39 duration in ticks | 40..55 pair id | 56..63 flags
 *   w1      bits  0..31 low 32 bits of the thread's span sequence number (taken at enter)
 *           bits 32..55 seq - parent's seq (0: a root) | 56..63 depth
 *
 * A field that does not fit (a span over 2^40 ticks, pair id >= 2^16, depth >= 256, a
 * parent more than 2^24 spans back, a sequence jump of 2^30 since the last pushed
 * record) sets HS_F_EXT and is carried in full by an extension record in the next slot,
 * published together with it. The consumer rebuilds the 64-bit sequence from the low bits
 * and the previous record's. Both stay 32 bytes: a cache line holds two records.
 */
typedef struct hs_record {
    uint64_t start;
    int64_t arg;
    uint64_t w0;
    uint64_t w1;
} hs_record;

typedef struct hs_record_ext {
    uint64_t seq;
    uint64_t parent_seq_plus1; /* 0: a root */
    uint64_t dur;
    uint32_t depth;
    uint32_t pair;
} hs_record_ext;

_Static_assert(sizeof(hs_record) == 32, "records are 32 bytes");
_Static_assert(sizeof(hs_record_ext) == 32, "extension records are 32 bytes");

enum {
    HS_F_ERROR = 1,   /* the span exited through an exception */
    HS_F_ARG = 2,     /* arg is set */
    HS_F_INSTANT = 4, /* a zero-duration marker */
    HS_F_EXT = 8,     /* an hs_record_ext follows in the next slot */
};

#define HS_DUR_BITS 40
#define HS_PAIR_BITS 16
#define HS_PDELTA_BITS 24
#define HS_DEPTH_BITS 8
#define HS_SEQ_WINDOW (1ull << 30)

static inline uint64_t hs_rec_dur(const hs_record *r) { return r->w0 & ((1ull << HS_DUR_BITS) - 1); }
static inline uint32_t hs_rec_pair(const hs_record *r) { return (uint32_t)((r->w0 >> 40) & 0xffff); }
static inline uint32_t hs_rec_flags(const hs_record *r) { return (uint32_t)(r->w0 >> 56); }
static inline uint32_t hs_rec_seq32(const hs_record *r) { return (uint32_t)r->w1; }
static inline uint32_t hs_rec_pdelta(const hs_record *r) { return (uint32_t)((r->w1 >> 32) & 0xffffff); }
static inline uint32_t hs_rec_depth(const hs_record *r) { return (uint32_t)(r->w1 >> 56); }

/* The 64-bit value nearest to prev whose low 32 bits are low (valid while the true
 * distance is under 2^31; the producer guarantees 2^30 or writes an extension). */
static inline uint64_t hs_seq_extend(uint64_t prev, uint32_t low) {
    int32_t diff = (int32_t)(low - (uint32_t)prev);
    return prev + (uint64_t)(int64_t)diff;
}

typedef struct hs_ring {
    /* producer side: only the recording thread writes these */
    _Alignas(64) _Atomic uint64_t head;
    uint64_t cached_tail;  /* producer's last view of tail: refreshed only when needed */
    uint64_t limit;        /* capacity in slots: exact, need not be a power of two */
    uint64_t mask;         /* storage is a power of two >= limit */
    hs_record *slots;
    uint64_t woke_at_tail; /* tail value at the last wake-up request (one per drain) */
    /* consumer side */
    _Alignas(64) _Atomic uint64_t tail;
    _Atomic int retired;   /* the owning thread exited or replaced this ring */
    void *owner_info;      /* registry back-pointer (opaque here) */
    struct hs_ring *next;  /* registry list (registry lock) */
} hs_ring;

/* capacity: records the ring holds (>= 2 so an extended record always fits). */
hs_ring *hs_ring_create(uint64_t capacity);
void hs_ring_destroy(hs_ring *r);

/* Producer: reserve n (1 or 2) slots; 0 when full (the record is dropped: drop newest). */
static inline int hs_ring_reserve(hs_ring *r, uint64_t n, uint64_t *pos) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head + n - r->cached_tail > r->limit) {
        r->cached_tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head + n - r->cached_tail > r->limit) return 0;
    }
    *pos = head;
    return 1;
}
static inline hs_record *hs_ring_slot(hs_ring *r, uint64_t pos) { return &r->slots[pos & r->mask]; }
static inline void hs_ring_publish(hs_ring *r, uint64_t new_head) {
    atomic_store_explicit(&r->head, new_head, memory_order_release);
}
/* Producer: the ring is past half full by its fresh view, and no wake-up was asked for
 * since the consumer last moved: the caller should wake the consumer. */
static inline int hs_ring_wants_wake(hs_ring *r, uint64_t head) {
    if (head - r->cached_tail <= r->limit / 2) return 0;
    r->cached_tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (head - r->cached_tail <= r->limit / 2 || r->woke_at_tail == r->cached_tail + 1) return 0;
    r->woke_at_tail = r->cached_tail + 1;
    return 1;
}

/* Consumer: the records published so far, as up to two contiguous runs. Call
 * hs_ring_release(r, count) once they are copied. */
typedef struct hs_ring_view {
    const hs_record *a;
    uint64_t na;
    const hs_record *b;
    uint64_t nb;
} hs_ring_view;
hs_ring_view hs_ring_peek(hs_ring *r);
void hs_ring_release(hs_ring *r, uint64_t count);
/* Records waiting (consumer's estimate). */
uint64_t hs_ring_pending(hs_ring *r);

#ifdef __cplusplus
}
#endif
#endif
