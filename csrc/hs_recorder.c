/* hs_recorder: the slow paths of the hot path, and span sites. */
#include "hs_recorder.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const char hs_owner_begin[1] = {0};
const char hs_owner_native[1] = {0};

/* NVTX passthrough's switch (set by hs_nvtx.c) and the ops it calls (see hs_recorder.h). */
_Atomic int hs_nvtx_on = 0;
hs_recorder_ops hs_recorder_installed = {0};

void hs_recorder_set_ops(const hs_recorder_ops *given) {
    static const hs_recorder_ops none;
    hs_recorder_installed = given ? *given : none;
}

/* Sites by (name, category) ids, so every object for the same span shares one site and
 * its nested-path cache. */
static pthread_mutex_t site_lock = PTHREAD_MUTEX_INITIALIZER;
static hs_site **site_slots = NULL;
static uint32_t site_cap = 0, site_count = 0;

static uint32_t site_hash(uint32_t name, uint32_t category) {
    uint64_t x = ((uint64_t)name << 32) | category;
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 32);
}

static int site_grow(void) {
    uint32_t nc = site_cap ? site_cap * 2 : 256;
    hs_site **ns = calloc(nc, sizeof(*ns));
    if (!ns) return -1;
    for (uint32_t j = 0; j < site_cap; j++) {
        hs_site *s = site_slots[j];
        if (!s) continue;
        uint32_t i = site_hash(s->name, s->category) & (nc - 1);
        while (ns[i]) i = (i + 1) & (nc - 1);
        ns[i] = s;
    }
    free(site_slots);
    site_slots = ns;
    site_cap = nc;
    return 0;
}

hs_site *hs_site_create(const char *name, size_t name_len, const char *category, size_t category_len) {
    uint32_t name_id = hs_intern_string(name, name_len);
    uint32_t cat_id = category ? hs_intern_string(category, category_len) : 0;
    if (name_id == UINT32_MAX || cat_id == UINT32_MAX) return NULL;
    uint32_t pair = hs_intern_pair(name_id, cat_id);
    if (pair == UINT32_MAX) return NULL;
    hs_site *out = NULL;
    pthread_mutex_lock(&site_lock);
    if ((site_count + 1) * 2 > site_cap && site_grow() < 0) goto done;
    uint32_t i = site_hash(name_id, cat_id) & (site_cap - 1);
    while (site_slots[i]) {
        hs_site *s = site_slots[i];
        if (s->name == name_id && s->category == cat_id) {
            out = s;
            goto done;
        }
        i = (i + 1) & (site_cap - 1);
    }
    out = calloc(1, sizeof(hs_site));
    if (!out) goto done;
    out->name = name_id;
    out->category = cat_id;
    out->root_pair = pair;
    atomic_init(&out->nested, 0);
    site_slots[i] = out;
    site_count++;
done:
    pthread_mutex_unlock(&site_lock);
    /* NVTX on: the site's name and category are registered now, never in a span */
    if (out && atomic_load_explicit(&hs_nvtx_on, memory_order_relaxed)) hs_recorder_installed.pair_seen(pair);
    return out;
}

int hs_site_resolve_slow(hs_site *s, uint32_t parent_path, uint32_t *pair) {
    uint32_t path = hs_intern_path(parent_path, s->category);
    if (path == UINT32_MAX) return -1;
    uint32_t p = hs_intern_pair(s->name, path);
    if (p == UINT32_MAX) return -1;
    *pair = p;
    if (atomic_load_explicit(&hs_nvtx_on, memory_order_relaxed)) hs_recorder_installed.pair_seen(p); /* a new path: named now */
    /* One entry: a site nested under alternating parents pays this lock each time; the
     * common case (a site always under the same parent path) pays it once. */
    atomic_store_explicit(&s->nested, ((uint64_t)parent_path << 32) | p, memory_order_release);
    return 0;
}

/* The thread's next block, claimed, and n records reserved in it; *rc says why not (the
 * caller counts the drop as its own: a span's or a counter's). */
static inline hs_record *next_block(hs_tstate *t, uint64_t n, int *rc) {
    *rc = hs_writer_switch(t->chain, &t->w);
    if (HS_UNLIKELY(*rc != HS_SWITCH_OK)) {
        if (*rc == HS_SWITCH_CAP) hs_cap_drop_note(t->w.blk ? t->w.blk->bytes : 0);
        return NULL;
    }
    hs_block_claim(t->w.blk, t->info->tid, t->last_pushed_seq);
    return hs_writer_reserve(&t->w, n);
}

/* Out of line: the current block is full. A fresh one from the pool (or allocated under
 * the memory cap); at the cap the record is dropped and counted as such (the owning
 * thread is the counter's only writer: no read-modify-write needed). */
__attribute__((noinline)) hs_record *hs_push_switch(hs_tstate *t, uint64_t n) {
    int rc;
    hs_record *rec = next_block(t, n, &rc);
    if (HS_LIKELY(rc == HS_SWITCH_OK)) return rec;
    if (rc == HS_SWITCH_CAP) {
        atomic_store_explicit(&t->info->dropped_cap,
                              atomic_load_explicit(&t->info->dropped_cap, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    } else {
        hs_count_drop(t);
    }
    return NULL;
}

_Atomic uint64_t hs_counter_drops = 0;

/* hs_push_switch for a counter: a drop is counted as a counter's, not the thread's span
 * drops (dropped() counts spans). */
__attribute__((noinline)) hs_record *hs_counter_switch(hs_tstate *t) {
    int rc;
    hs_record *rec = next_block(t, 1, &rc);
    if (HS_LIKELY(rc == HS_SWITCH_OK)) return rec;
    atomic_fetch_add_explicit(&hs_counter_drops, 1, memory_order_relaxed);
    return NULL;
}

void hs_count_drop(hs_tstate *t) {
    atomic_fetch_add_explicit(&t->info->dropped_other, 1, memory_order_relaxed);
}

/* The frame closed is not the innermost: spans were left open in between (an explicit
 * begin without end, or coroutines interleaving on one thread). Close the owner's frame
 * and keep the ones above it open, one level shallower. */
void hs_exit_slow(hs_tstate *t, const void *owner, uint64_t end, int error) {
    uint32_t k = t->depth;
    while (k > 0 && t->stack[k - 1].owner != owner) k--;
    if (k == 0) return; /* opened while recording was off: nothing to close */
    k--;
    hs_frame f = t->stack[k];
    hs_stack_edit_begin(t); /* frames move under a reader's feet: it retries */
    memmove(&t->stack[k], &t->stack[k + 1], sizeof(hs_frame) * (t->depth - k - 1));
    t->depth--;
    hs_stack_edit_end(t);
    hs_push(t, f.start, end, f.seq, f.pair, f.arg,
            f.flags | (k ? HS_CHILD_FLAGS(t->stack[k - 1].flags) : 0) | (error ? HS_F_ERROR : 0), k,
            k ? t->stack[k - 1].seq + 1 : 0);
    /* NVTX ranges are a per-thread stack: this pops the innermost one, whichever span it
     * belongs to (pushes and pops stay balanced; the names of ranges closed out of order
     * are NVTX's innermost, not these). */
    if (f.flags & HS_FRAME_NVTX) hs_recorder_installed.pop();
}
