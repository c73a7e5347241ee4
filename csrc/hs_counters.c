/* hs_counters: the store of drained counter values and the drain thread's memory samples
 * (see hs_counters.h). */
#define _GNU_SOURCE
#include "hs_counters.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hs_clock.h"
#include "hs_recorder.h"

/* drain lock */
static hs_counter_row *rows = NULL;
static uint64_t nrows = 0, caprows = 0;

static _Atomic uint64_t dropped = 0;
static _Atomic uint64_t interval_ns = 0;
static _Atomic uint32_t rss_pair = 0;
static uint64_t next_sample_ns = 0; /* drain thread only */

void hs_counters_count_drop(void) { atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed); }
void hs_counters_count_drops(uint64_t n) { atomic_fetch_add_explicit(&dropped, n, memory_order_relaxed); }
uint64_t hs_counters_dropped(void) {
    return atomic_load_explicit(&dropped, memory_order_relaxed) +
           atomic_load_explicit(&hs_counter_drops, memory_order_relaxed);
}

static hs_counter_row *room(void) {
    if (nrows == caprows) {
        if (caprows >= HS_COUNTERS_MAX_ROWS) return NULL;
        uint64_t nc = caprows ? caprows * 2 : 256;
        hs_counter_row *grown = realloc(rows, nc * sizeof(*rows));
        if (!grown) return NULL;
        rows = grown;
        caprows = nc;
    }
    return &rows[nrows++];
}

void hs_counters_note(const hs_record *r, int64_t tid) {
    hs_counter_row *row = room();
    if (!row) {
        hs_counters_count_drop();
        return;
    }
    row->ticks = r->start;
    memcpy(&row->value, &r->arg, sizeof(double));
    row->tid = tid;
    row->pair = (uint32_t)r->w1;
    row->pad = 0;
}

void hs_counters_add(uint64_t ticks, uint32_t pair, double value) {
    hs_counter_row *row = room();
    if (!row) {
        hs_counters_count_drop();
        return;
    }
    row->ticks = ticks;
    row->value = value;
    row->tid = 0;
    row->pair = pair;
    row->pad = 0;
}

uint64_t hs_counters_take(hs_counter_row **out) {
    uint64_t n = nrows;
    *out = rows;
    rows = NULL;
    nrows = caprows = 0;
    return n;
}

void hs_counters_set_sampling(uint64_t ns, uint32_t pair) {
    atomic_store(&rss_pair, pair);
    atomic_store(&interval_ns, ns);
}

uint64_t hs_counters_interval_ns(void) { return atomic_load(&interval_ns); }

int64_t hs_counters_rss_bytes(void) {
    /* opened each time: an fd kept open would name the parent's /proc entry after fork */
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = buf, *end;
    strtoull(p, &end, 10); /* size */
    if (end == p) return -1;
    p = end;
    unsigned long long resident = strtoull(p, &end, 10);
    if (end == p) return -1;
    return (int64_t)resident * (int64_t)sysconf(_SC_PAGESIZE);
}

/* The device plug-in's (hs_counters.h): written once by hs_counters_set_ops. */
static hs_counters_ops ops;

void hs_counters_set_ops(const hs_counters_ops *given) {
    static const hs_counters_ops none;
    ops = given ? *given : none;
}

int hs_counters_due(hs_counter_sample *out, int max) {
    uint64_t every = atomic_load_explicit(&interval_ns, memory_order_relaxed);
    if (!every || max < 1) {
        next_sample_ns = 0;
        return 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (next_sample_ns && now < next_sample_ns) return 0;
    next_sample_ns = now + every;
    int n = 0;
    int64_t rss = hs_counters_rss_bytes();
    if (rss >= 0) {
        out[n].ticks = hs_ticks();
        out[n].pair = atomic_load(&rss_pair);
        out[n].value = (double)rss;
        n++;
    }
    if (ops.device_memory && n < max) n += ops.device_memory(out + n, max - n);
    return n;
}

void hs_counters_after_fork_child(void) {
    nrows = 0;
    next_sample_ns = 0;
}
