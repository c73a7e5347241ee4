/* hs_clock: raw ticks on the hot path, nanoseconds since the Unix epoch at drain time.
 *
 * Free of Python.h: the ring and the clock are tested on their own and serve native callers.
 *
 * The hot path reads one of: rdtsc (x86-64 with an invariant TSC), cntvct_el0 (arm64),
 * clock_gettime(CLOCK_MONOTONIC) otherwise, or a fake clock injected by tests. Conversion
 * goes through a continuous, monotone, piecewise-linear map (hs_clock_map) whose new
 * segments only ever start at "now": a tick converted once always converts to the same
 * nanosecond later, so a parent drained after its children never moves relative to them.
 */
#ifndef HS_CLOCK_H
#define HS_CLOCK_H

#include <stdint.h>
#include <stdatomic.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hs_clock_source {
    HS_CLOCK_MONOTONIC = 0, /* clock_gettime(CLOCK_MONOTONIC): ticks are ns */
    HS_CLOCK_TSC = 1,       /* rdtsc, invariant TSC */
    HS_CLOCK_CNTVCT = 2,    /* arm64 virtual counter */
    HS_CLOCK_FAKE = 3,      /* tests: ticks are epoch ns, advanced by a fixed step per read */
};

/* Chosen once by hs_clock_init(); read (relaxed) on every tick: a predictable branch. */
extern _Atomic int hs_clock_kind;
extern _Atomic uint64_t hs_fake_now;
extern uint64_t hs_fake_step;

static inline uint64_t hs_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int64_t hs_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + (int64_t)ts.tv_nsec;
}

static inline uint64_t hs_ticks(void) {
    int kind = atomic_load_explicit(&hs_clock_kind, memory_order_relaxed);
#if defined(__x86_64__) || defined(_M_X64)
    if (__builtin_expect(kind == HS_CLOCK_TSC, 1)) {
        /* rdtsc, not rdtscp: ordering against neighbouring instructions does not matter
         * at span granularity, and rdtscp costs ~2x. */
        uint32_t lo, hi;
        __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
        return ((uint64_t)hi << 32) | lo;
    }
#elif defined(__aarch64__)
    if (__builtin_expect(kind == HS_CLOCK_CNTVCT, 1)) {
        uint64_t v;
        __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
        return v;
    }
#endif
    if (kind == HS_CLOCK_FAKE)
        return atomic_fetch_add_explicit(&hs_fake_now, hs_fake_step, memory_order_relaxed);
    return hs_mono_ns();
}

/* One segment of the ticks -> epoch-ns map: ns = n0 + (ticks - t0) * ns_per_tick. */
typedef struct hs_clock_seg {
    uint64_t t0;
    int64_t n0;
    double ns_per_tick;
} hs_clock_seg;

typedef struct hs_clock_info {
    int source;
    double ns_per_tick;      /* best current estimate (from the longest baseline) */
    uint64_t anchor_ticks;   /* calibration anchor: ticks, CLOCK_MONOTONIC, CLOCK_REALTIME */
    int64_t anchor_mono_ns;
    int64_t anchor_real_ns;
    uint32_t segments;
    int64_t last_error_ns;   /* map minus CLOCK_REALTIME at the last update */
} hs_clock_info;

/* Pick the source (env HOTSPAN_CLOCK=tsc|monotonic may force one) and take the anchor. */
void hs_clock_init(void);
/* fork() (hs_fork.c): hold the clock's lock across it so the child never inherits it
 * mid-update. */
void hs_clock_fork_prepare(void);
void hs_clock_fork_release(void);
/* Tests: ticks become epoch ns starting at start_ns, advancing by step_ns per read. */
void hs_clock_set_fake(int64_t start_ns, uint64_t step_ns);
/* Back to the real source chosen at init. */
void hs_clock_set_real(void);
const char *hs_clock_source_name(int source);

/* Extend the map to "now" (thread-safe; cheap when called often: it rate-limits itself
 * unless force). Must be called before converting ticks read up to now. */
void hs_clock_update(int force);
/* Snapshot of the map for conversion; caller frees *segs with free(). Returns count. */
uint32_t hs_clock_snapshot(hs_clock_seg **segs);
/* Convert with a snapshot (segments sorted by t0). */
static inline int64_t hs_clock_convert(const hs_clock_seg *segs, uint32_t n, uint64_t ticks) {
    const hs_clock_seg *s = &segs[n - 1];
    if (__builtin_expect(ticks < s->t0, 0)) {
        /* an old tick (a long-open parent): binary search the segment that holds it */
        uint32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            uint32_t mid = (lo + hi + 1) / 2;
            if (segs[mid].t0 <= ticks) lo = mid; else hi = mid - 1;
        }
        s = &segs[lo];
    }
    int64_t d = (int64_t)(ticks - s->t0);
    if (s->ns_per_tick == 1.0) return s->n0 + d;
    return s->n0 + (int64_t)((double)d * s->ns_per_tick);
}
void hs_clock_get_info(hs_clock_info *out);
/* The newest segment of the map (the flight file keeps it): 0, or -1 when there is none. */
int hs_clock_last_seg(hs_clock_seg *out);

#ifdef __cplusplus
}
#endif
#endif
