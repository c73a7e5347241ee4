/* hs_clock: source detection, calibration and the ticks -> epoch-ns map. */
#define _GNU_SOURCE
#include "hs_clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

_Atomic int hs_clock_kind = HS_CLOCK_MONOTONIC;
_Atomic uint64_t hs_fake_now = 0;
uint64_t hs_fake_step = 1;

static int real_kind = HS_CLOCK_MONOTONIC;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct { uint64_t ticks; int64_t mono; int64_t real; } anchor_t;
static anchor_t first_anchor;
static double est_ns_per_tick = 1.0;
static hs_clock_seg *segs = NULL;
static uint32_t nsegs = 0, cap_segs = 0;
static int64_t last_update_mono = 0;
static int64_t update_interval_ns = 10 * 1000000ll;
static int64_t last_error_ns = 0;

#define MAX_SEGMENTS 65536u
#define MAX_INTERVAL_NS 1000000000ll
/* Steering: the map is pulled towards CLOCK_REALTIME by at most 500 ppm. */
#define MAX_SLEW 5e-4

const char *hs_clock_source_name(int source) {
    switch (source) {
    case HS_CLOCK_TSC: return "tsc";
    case HS_CLOCK_CNTVCT: return "cntvct";
    case HS_CLOCK_FAKE: return "fake";
    default: return "monotonic";
    }
}

#if defined(__x86_64__) || defined(_M_X64)
static int tsc_is_invariant(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
    __cpuid(0x80000007u, a, b, c, d);
    return (d >> 8) & 1; /* EDX bit 8: invariant TSC */
}
#endif

/* Read ticks, monotonic and realtime as close together as possible: of a few tries,
 * keep the one whose two tick reads bracket the clock reads most tightly. */
static anchor_t take_anchor(void) {
    anchor_t best = {0, 0, 0};
    uint64_t best_gap = UINT64_MAX;
    for (int i = 0; i < 7; i++) {
        uint64_t t1 = hs_ticks();
        int64_t m = (int64_t)hs_mono_ns();
        int64_t r = hs_real_ns();
        uint64_t t2 = hs_ticks();
        if (t2 - t1 < best_gap) {
            best_gap = t2 - t1;
            best.ticks = t1 + (t2 - t1) / 2;
            best.mono = m;
            best.real = r;
        }
    }
    return best;
}

/* fork(): hold the lock across it so the child never inherits it mid-update. */
void hs_clock_fork_prepare(void) { pthread_mutex_lock(&clock_lock); }
void hs_clock_fork_release(void) { pthread_mutex_unlock(&clock_lock); }

void hs_clock_init(void) {
    int kind = HS_CLOCK_MONOTONIC;
    const char *forced = getenv("HOTSPAN_CLOCK");
#if defined(__x86_64__) || defined(_M_X64)
    if (tsc_is_invariant()) kind = HS_CLOCK_TSC;
#elif defined(__aarch64__)
    kind = HS_CLOCK_CNTVCT; /* architected generic timer: constant rate by definition */
#endif
    if (forced && strcmp(forced, "monotonic") == 0) kind = HS_CLOCK_MONOTONIC;
#if defined(__x86_64__) || defined(_M_X64)
    if (forced && strcmp(forced, "tsc") == 0) kind = HS_CLOCK_TSC;
#endif
    pthread_mutex_lock(&clock_lock);
    real_kind = kind;
    atomic_store(&hs_clock_kind, kind);
    first_anchor = take_anchor();
    nsegs = 0;
    last_update_mono = first_anchor.mono;
    update_interval_ns = 10 * 1000000ll;
    est_ns_per_tick = 1.0;
    pthread_mutex_unlock(&clock_lock);
}

static void push_seg(uint64_t t0, int64_t n0, double npt) {
    if (nsegs == MAX_SEGMENTS) {
        /* Forget the oldest half: only ticks older than every kept segment (spans open
         * for a very long time) are then extrapolated from the oldest kept one. */
        memmove(segs, segs + MAX_SEGMENTS / 2, sizeof(*segs) * (MAX_SEGMENTS / 2));
        nsegs = MAX_SEGMENTS / 2;
    }
    if (nsegs == cap_segs) {
        uint32_t nc = cap_segs ? cap_segs * 2 : 64;
        hs_clock_seg *ns = realloc(segs, sizeof(*segs) * nc);
        if (!ns) return; /* keep extrapolating the last segment: still consistent */
        segs = ns;
        cap_segs = nc;
    }
    segs[nsegs].t0 = t0;
    segs[nsegs].n0 = n0;
    segs[nsegs].ns_per_tick = npt;
    nsegs++;
}

void hs_clock_update(int force) {
    if (atomic_load(&hs_clock_kind) == HS_CLOCK_FAKE) return;
    pthread_mutex_lock(&clock_lock);
    int64_t now = (int64_t)hs_mono_ns();
    if (!force && nsegs > 0 && now - last_update_mono < update_interval_ns) {
        pthread_mutex_unlock(&clock_lock);
        return;
    }
    anchor_t b = take_anchor();
    if (real_kind == HS_CLOCK_MONOTONIC) {
        est_ns_per_tick = 1.0;
    } else {
        if (b.mono - first_anchor.mono < 1000000) {
            /* Too short a baseline for a rate: wait it out once (only when the first
             * drain comes within 1 ms of the first anchor). */
            while ((int64_t)hs_mono_ns() - first_anchor.mono < 1000000) {
            }
            b = take_anchor();
        }
        est_ns_per_tick = (double)(b.mono - first_anchor.mono) / (double)(b.ticks - first_anchor.ticks);
    }
    if (nsegs == 0) {
        /* The first segment interpolates between the init anchor and now: exact at both. */
        push_seg(first_anchor.ticks, first_anchor.real, est_ns_per_tick);
        last_error_ns = 0;
    } else {
        hs_clock_seg *last = &segs[nsegs - 1];
        if (b.ticks > last->t0) {
            int64_t mapped = hs_clock_convert(segs, nsegs, b.ticks);
            int64_t err = mapped - b.real;
            double slew = -(double)err / (double)update_interval_ns;
            if (slew > MAX_SLEW) slew = MAX_SLEW;
            if (slew < -MAX_SLEW) slew = -MAX_SLEW;
            /* Continuity: the new segment starts where the last one is now, so no tick
             * read before this moment ever converts differently. */
            push_seg(b.ticks, mapped, est_ns_per_tick * (1.0 + slew));
            last_error_ns = err;
        }
    }
    last_update_mono = b.mono;
    if (update_interval_ns < MAX_INTERVAL_NS) update_interval_ns *= 2;
    pthread_mutex_unlock(&clock_lock);
}

uint32_t hs_clock_snapshot(hs_clock_seg **out) {
    if (atomic_load(&hs_clock_kind) == HS_CLOCK_FAKE) {
        hs_clock_seg *s = malloc(sizeof(*s));
        if (!s) return 0;
        s->t0 = 0; s->n0 = 0; s->ns_per_tick = 1.0; /* fake ticks are epoch ns */
        *out = s;
        return 1;
    }
    hs_clock_update(0);
    pthread_mutex_lock(&clock_lock);
    if (nsegs == 0) {
        pthread_mutex_unlock(&clock_lock);
        hs_clock_update(1);
        pthread_mutex_lock(&clock_lock);
    }
    uint32_t n = nsegs;
    hs_clock_seg *s = n ? malloc(sizeof(*s) * n) : NULL;
    if (s) memcpy(s, segs, sizeof(*s) * n);
    pthread_mutex_unlock(&clock_lock);
    *out = s;
    return s ? n : 0;
}

void hs_clock_set_fake(int64_t start_ns, uint64_t step_ns) {
    hs_fake_step = step_ns;
    atomic_store(&hs_fake_now, (uint64_t)start_ns);
    atomic_store(&hs_clock_kind, HS_CLOCK_FAKE);
}

void hs_clock_set_real(void) {
    hs_clock_init();
}

void hs_clock_get_info(hs_clock_info *out) {
    pthread_mutex_lock(&clock_lock);
    out->source = atomic_load(&hs_clock_kind);
    out->ns_per_tick = out->source == HS_CLOCK_FAKE ? 1.0 : est_ns_per_tick;
    out->anchor_ticks = first_anchor.ticks;
    out->anchor_mono_ns = first_anchor.mono;
    out->anchor_real_ns = first_anchor.real;
    out->segments = nsegs;
    out->last_error_ns = last_error_ns;
    pthread_mutex_unlock(&clock_lock);
}


int hs_clock_last_seg(hs_clock_seg *out) {
    if (atomic_load(&hs_clock_kind) == HS_CLOCK_FAKE) {
        out->t0 = 0; out->n0 = 0; out->ns_per_tick = 1.0; /* fake ticks are epoch ns */
        return 0;
    }
    hs_clock_update(0);
    pthread_mutex_lock(&clock_lock);
    int rc = -1;
    if (nsegs) {
        *out = segs[nsegs - 1];
        rc = 0;
    }
    pthread_mutex_unlock(&clock_lock);
    if (rc < 0) {
        hs_clock_update(1);
        pthread_mutex_lock(&clock_lock);
        if (nsegs) {
            *out = segs[nsegs - 1];
            rc = 0;
        }
        pthread_mutex_unlock(&clock_lock);
    }
    return rc;
}
