/* Plain C tests of the block chains and the clock, without Python (built and run by
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

/* Producers write through their own chain of blocks (switching on their own when a block
 * fills, from the shared lock-free pool); one consumer walks every chain, keeps what it
 * takes as "segments" (a reference on the block) for a while, then lets them go, as the
 * drain thread and drain() do. Records carry their index in start, arg = ~index, w0/w1
 * derived from it: a torn or reordered record shows. Every 97th record is extended. */
typedef struct {
    hs_chain *chain;
    hs_writer w;
    uint64_t count;
    uint64_t pushed;
    uint64_t dropped;
    _Atomic int done;
} producer_args;

static void *producer(void *p) {
    producer_args *a = p;
    for (uint64_t i = 0; i < a->count; i++) {
        int ext = i % 97 == 0;
        uint64_t n = ext ? 2 : 1;
        hs_record *r = hs_writer_reserve(&a->w, n);
        if (!r) {
            int rc = hs_writer_switch(a->chain, &a->w);
            if (rc != HS_SWITCH_OK) {
                a->dropped++;
                continue;
            }
            r = hs_writer_reserve(&a->w, n);
        }
        r->start = i;
        r->arg = (int64_t)~i;
        r->w0 = ((uint64_t)(ext ? HS_F_EXT : 0) << 56) | (i & 0xffffffffffull);
        r->w1 = i * 3;
        if (ext) {
            hs_record_ext *x = (hs_record_ext *)(r + 1);
            x->seq = i;
            x->parent_seq_plus1 = i + 1;
            x->dur = i * 7;
            x->depth = (uint32_t)i;
            x->pair = (uint32_t)(i >> 3);
        }
        hs_writer_publish(&a->w, n);
        a->pushed++;
    }
    atomic_store_explicit(&a->chain->retired, 1, memory_order_release);
    atomic_store(&a->done, 1);
    return NULL;
}

#define MAX_PRODUCERS 8
#define HELD_SEGMENTS 64

static void test_chains(int nprod, uint64_t block_records, uint64_t cap_bytes, uint64_t count, int consumer_sleeps) {
    atomic_store(&hs_block_records, block_records);
    atomic_store(&hs_memory_cap, cap_bytes);
    producer_args a[MAX_PRODUCERS];
    pthread_t th[MAX_PRODUCERS];
    uint64_t seen[MAX_PRODUCERS] = {0}, last[MAX_PRODUCERS] = {0};
    hs_block *held[HELD_SEGMENTS];
    int nheld = 0;
    for (int k = 0; k < nprod; k++) {
        memset(&a[k], 0, sizeof a[k]);
        a[k].chain = hs_chain_create();
        a[k].count = count;
        hs_writer_switch(a[k].chain, &a[k].w); /* a first block, as registration takes */
    }
    for (int k = 0; k < nprod; k++) pthread_create(&th[k], NULL, producer, &a[k]);
    int live = nprod;
    while (live) {
        live = 0;
        for (int k = 0; k < nprod; k++) {
            if (!a[k].chain) continue;
            int retired = atomic_load_explicit(&a[k].chain->retired, memory_order_acquire);
            hs_block *blk;
            const hs_record *v;
            uint64_t n;
            while ((n = hs_chain_peek(a[k].chain, &blk, &v))) {
                for (uint64_t i = 0; i < n;) {
                    const hs_record *r = &v[i];
                    uint64_t idx = r->start;
                    CHECK(!seen[k] || idx > last[k], "order: %llu after %llu", (unsigned long long)idx,
                          (unsigned long long)last[k]);
                    CHECK(r->arg == (int64_t)~idx, "torn arg at %llu", (unsigned long long)idx);
                    CHECK(r->w1 == idx * 3, "torn w1 at %llu", (unsigned long long)idx);
                    CHECK((r->w0 & 0xffffffffffull) == (idx & 0xffffffffffull), "torn w0 at %llu",
                          (unsigned long long)idx);
                    if (hs_rec_flags(r) & HS_F_EXT) {
                        CHECK(i + 1 < n, "extension split from its record");
                        const hs_record_ext *x = (const hs_record_ext *)&v[i + 1];
                        CHECK(x->seq == idx && x->dur == idx * 7 && x->parent_seq_plus1 == idx + 1, "torn extension");
                        i += 2;
                    } else {
                        CHECK(idx % 97 != 0, "lost extension flag");
                        i += 1;
                    }
                    last[k] = idx;
                    seen[k]++;
                }
                /* keep it a while, as a segment waiting for drain() */
                blk->refs++;
                held[nheld++] = blk;
                hs_chain_advance(a[k].chain, n);
                if (nheld >= 16) {
                    while (nheld) hs_block_unref(held[--nheld]);
                }
            }
            if (retired && hs_chain_empty(a[k].chain)) {
                hs_chain_destroy(a[k].chain);
                a[k].chain = NULL;
            } else {
                live++;
            }
        }
        if (nheld && (consumer_sleeps || !live)) {
            while (nheld) hs_block_unref(held[--nheld]);
        }
        if (consumer_sleeps) usleep(50);
    }
    uint64_t pushed = 0, dropped = 0;
    for (int k = 0; k < nprod; k++) {
        pthread_join(th[k], NULL);
        CHECK(seen[k] == a[k].pushed, "producer %d: seen %llu pushed %llu", k, (unsigned long long)seen[k],
              (unsigned long long)a[k].pushed);
        CHECK(a[k].pushed + a[k].dropped == count, "accounting %llu + %llu != %llu", (unsigned long long)a[k].pushed,
              (unsigned long long)a[k].dropped, (unsigned long long)count);
        pushed += a[k].pushed;
        dropped += a[k].dropped;
    }
    CHECK(hs_blocks_held_bytes() == hs_blocks_pool_bytes(), "every block back in the pool: held %llu pooled %llu",
          (unsigned long long)hs_blocks_held_bytes(), (unsigned long long)hs_blocks_pool_bytes());
    CHECK(hs_blocks_held_bytes() <= cap_bytes, "held %llu over the cap %llu", (unsigned long long)hs_blocks_held_bytes(),
          (unsigned long long)cap_bytes);
    hs_pool_trim();
    CHECK(hs_blocks_held_bytes() == 0 && hs_blocks_pool_bytes() == 0, "trimmed");
    printf("chains producers=%d block=%llu cap=%llu count=%llu pushed=%llu dropped=%llu\n", nprod,
           (unsigned long long)block_records, (unsigned long long)cap_bytes, (unsigned long long)count,
           (unsigned long long)pushed, (unsigned long long)dropped);
    if (cap_bytes >= (uint64_t)(nprod * 4 + HELD_SEGMENTS + 8) * block_records * sizeof(hs_record) * 2)
        CHECK(dropped == 0, "dropped %llu under a cap never reached", (unsigned long long)dropped);
}

/* At the cap a switch fails (the record is dropped) and the writer keeps its block; once a
 * block comes back, the switch takes it. */
static void test_cap_then_room(void) {
    atomic_store(&hs_block_records, 4);
    atomic_store(&hs_memory_cap, 2 * 4 * sizeof(hs_record)); /* two blocks */
    hs_chain *ch = hs_chain_create();
    hs_writer w = {0};
    CHECK(hs_writer_switch(ch, &w) == HS_SWITCH_OK, "first block");
    CHECK(hs_writer_switch(ch, &w) == HS_SWITCH_OK, "second block");
    hs_block *second = w.blk;
    CHECK(hs_writer_switch(ch, &w) == HS_SWITCH_CAP, "a third is over the cap");
    CHECK(w.blk == second, "the writer keeps its block at the cap");
    hs_block *blk;
    const hs_record *v;
    CHECK(hs_chain_peek(ch, &blk, &v) == 0, "nothing published");
    /* the consumer passes the sealed (empty) first block: it goes back to the pool */
    CHECK(hs_blocks_pool_bytes() == 4 * sizeof(hs_record), "the sealed block is pooled");
    CHECK(hs_writer_switch(ch, &w) == HS_SWITCH_OK && w.blk != second, "room again");
    hs_writer_retire(&w);
    hs_chain_destroy(ch);
    hs_pool_trim();
    CHECK(hs_blocks_held_bytes() == 0, "all given back");
}

/* A writer's first block is small and each switch doubles the next one's size up to the
 * configured capacity; only full-size blocks are pooled (the small ones are a thread's
 * first few, taken once). */
static void test_blocks_grow(void) {
    atomic_store(&hs_block_records, 1024);
    atomic_store(&hs_memory_cap, 64ull << 20);
    hs_chain *ch = hs_chain_create();
    hs_writer w = {0};
    uint64_t want = HS_FIRST_BLOCK_RECORDS;
    for (int k = 0; k < 8; k++) {
        CHECK(hs_writer_switch(ch, &w) == HS_SWITCH_OK, "switch %d", k);
        CHECK(w.limit == want, "block %d holds %llu records, not %llu", k, (unsigned long long)w.limit,
              (unsigned long long)want);
        CHECK(hs_blocks_current_bytes() == want * sizeof(hs_record), "current bytes");
        want = want * 2 > 1024 ? 1024 : want * 2;
    }
    hs_block *blk;
    const hs_record *v;
    CHECK(hs_chain_peek(ch, &blk, &v) == 0, "nothing published");
    /* the sealed blocks are passed: the small ones go back to the system, full ones pooled */
    CHECK(hs_blocks_pool_bytes() == 2 * 1024 * sizeof(hs_record), "pooled %llu",
          (unsigned long long)hs_blocks_pool_bytes());
    hs_writer_retire(&w);
    CHECK(hs_blocks_current_bytes() == 0, "retired");
    hs_chain_destroy(ch);
    hs_pool_trim();
    CHECK(hs_blocks_held_bytes() == 0, "all given back");
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
    test_cap_then_room();
    test_blocks_grow();
    test_chains(1, 1024, 64ull << 20, 2000000, 0);
    test_chains(1, 64, 64ull << 20, 200000, 1);
    test_chains(4, 16, 64ull << 20, 200000, 0);      /* many switches, the pool shared by 4 */
    test_chains(4, 16, 40 * 16 * 32, 100000, 0);     /* at the cap now and then: drops, exact */
    test_clock_map_is_stable();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("block/clock C tests: 0 failures\n");
    return 0;
}
