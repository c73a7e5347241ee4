/* Plain C tests of the ring and the clock, without Python (built and run by
 * tests/test_ring_c.py, also under ThreadSanitizer and AddressSanitizer). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hs_clock.h"
#include "hs_ring.h"

static int failures = 0;
#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                   \
            fprintf(stderr, "\n");                          \
            failures++;                                     \
        }                                                   \
    } while (0)

typedef struct {
    hs_ring *ring;
    uint64_t count;
    uint64_t pushed;
    uint64_t dropped;
    _Atomic int done;
} producer_args;

/* Records carry their index in start, arg = ~index, w0/w1 derived from it: a torn or
 * reordered record shows. Every 97th record is extended (two slots). */
static void *producer(void *p) {
    producer_args *a = p;
    for (uint64_t i = 0; i < a->count; i++) {
        int ext = i % 97 == 0;
        uint64_t pos;
        if (!hs_ring_reserve(a->ring, ext ? 2 : 1, &pos)) {
            a->dropped++;
            continue;
        }
        hs_record *r = hs_ring_slot(a->ring, pos);
        r->start = i;
        r->arg = (int64_t)~i;
        r->w0 = ((uint64_t)(ext ? HS_F_EXT : 0) << 56) | (i & 0xffffffffffull);
        r->w1 = i * 3;
        if (ext) {
            hs_record_ext *x = (hs_record_ext *)hs_ring_slot(a->ring, pos + 1);
            x->seq = i;
            x->parent_seq_plus1 = i + 1;
            x->dur = i * 7;
            x->depth = (uint32_t)i;
            x->pair = (uint32_t)(i >> 3);
        }
        hs_ring_publish(a->ring, pos + (ext ? 2 : 1));
        a->pushed++;
    }
    atomic_store(&a->done, 1);
    return NULL;
}

static void test_spsc(uint64_t capacity, uint64_t count, int consumer_sleeps) {
    producer_args a = {hs_ring_create(capacity), count, 0, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, producer, &a);
    uint64_t seen = 0, last = 0;
    int first = 1;
    for (;;) {
        int done = atomic_load(&a.done);
        hs_ring_view v = hs_ring_peek(a.ring);
        uint64_t n = v.na + v.nb;
        for (uint64_t i = 0; i < n;) {
            const hs_record *r = i < v.na ? &v.a[i] : &v.b[i - v.na];
            uint64_t idx = r->start;
            CHECK(first || idx > last, "order: %llu after %llu", (unsigned long long)idx, (unsigned long long)last);
            CHECK(r->arg == (int64_t)~idx, "torn arg at %llu", (unsigned long long)idx);
            CHECK(r->w1 == idx * 3, "torn w1 at %llu", (unsigned long long)idx);
            CHECK((r->w0 & 0xffffffffffull) == (idx & 0xffffffffffull), "torn w0 at %llu", (unsigned long long)idx);
            if (hs_rec_flags(r) & HS_F_EXT) {
                uint64_t j = i + 1;
                CHECK(j < n, "extension split from its record");
                const hs_record_ext *x = (const hs_record_ext *)(j < v.na ? &v.a[j] : &v.b[j - v.na]);
                CHECK(x->seq == idx && x->dur == idx * 7 && x->parent_seq_plus1 == idx + 1, "torn extension");
                i += 2;
            } else {
                CHECK(idx % 97 != 0, "lost extension flag");
                i += 1;
            }
            first = 0;
            last = idx;
            seen++;
        }
        hs_ring_release(a.ring, n);
        if (done && n == 0 && hs_ring_pending(a.ring) == 0) break;
        if (consumer_sleeps) usleep(50);
    }
    pthread_join(th, NULL);
    CHECK(seen == a.pushed, "seen %llu pushed %llu", (unsigned long long)seen, (unsigned long long)a.pushed);
    CHECK(a.pushed + a.dropped == count, "accounting %llu + %llu != %llu", (unsigned long long)a.pushed,
          (unsigned long long)a.dropped, (unsigned long long)count);
    hs_ring_destroy(a.ring);
    printf("spsc capacity=%llu count=%llu pushed=%llu dropped=%llu\n", (unsigned long long)capacity,
           (unsigned long long)count, (unsigned long long)a.pushed, (unsigned long long)a.dropped);
}

static void test_full_ring_drops_newest(void) {
    hs_ring *r = hs_ring_create(5); /* exact limit, not a power of two */
    uint64_t pos;
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        if (hs_ring_reserve(r, 1, &pos)) {
            hs_ring_slot(r, pos)->start = (uint64_t)i;
            hs_ring_publish(r, pos + 1);
            ok++;
        }
    }
    CHECK(ok == 5, "a 5-record ring took %d", ok);
    hs_ring_view v = hs_ring_peek(r);
    CHECK(v.na + v.nb == 5 && v.a[0].start == 0 && v.a[4].start == 4, "kept the oldest five");
    hs_ring_release(r, 2);
    CHECK(hs_ring_reserve(r, 2, &pos), "room after release");
    hs_ring_publish(r, pos + 2);
    CHECK(!hs_ring_reserve(r, 1, &pos), "full again");
    hs_ring_destroy(r);
}

static void test_seq_extend(void) {
    CHECK(hs_seq_extend(0, 5) == 5, "small");
    CHECK(hs_seq_extend(0xfffffff0ull, 0x10) == 0x100000010ull, "forward across 2^32");
    CHECK(hs_seq_extend(0x100000010ull, 0xfffffff0u) == 0xfffffff0ull, "backward across 2^32");
    CHECK(hs_seq_extend(0x500000000ull + 100, 50) == 0x500000000ull + 50, "backward near");
    CHECK(hs_seq_extend(0x5ffffff00ull, 0x10) == 0x600000010ull, "forward near");
}

static void test_clock_map_is_stable(void) {
    hs_clock_init();
    uint64_t ticks[6];
    int64_t first[6];
    hs_clock_seg *segs = NULL;
    for (int i = 0; i < 6; i++) {
        ticks[i] = hs_ticks();
        usleep(3000);
        hs_clock_update(1);
        uint32_t n = hs_clock_snapshot(&segs);
        first[i] = hs_clock_convert(segs, n, ticks[i]);
        /* every earlier tick converts exactly as it did when it was first converted */
        for (int j = 0; j < i; j++) {
            int64_t again = hs_clock_convert(segs, n, ticks[j]);
            CHECK(again == first[j], "tick %d moved by %lld ns", j, (long long)(again - first[j]));
            CHECK(first[j] < first[i], "not monotone");
        }
        free(segs);
    }
    int64_t real = hs_real_ns();
    uint32_t n = hs_clock_snapshot(&segs);
    int64_t now = hs_clock_convert(segs, n, hs_ticks());
    free(segs);
    CHECK(now - real < 1000000 && real - now < 1000000, "map is %lld ns off CLOCK_REALTIME", (long long)(now - real));
    printf("clock %s, map - realtime = %lld ns\n", hs_clock_source_name(atomic_load(&hs_clock_kind)),
           (long long)(now - real));
}

int main(void) {
    test_seq_extend();
    test_full_ring_drops_newest();
    test_spsc(1024, 2000000, 0);
    test_spsc(64, 200000, 1);
    test_clock_map_is_stable();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ring/clock C tests: 0 failures\n");
    return 0;
}
