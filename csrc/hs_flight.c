/* hs_flight: the flight file (see hs_flight.h). */
#define _GNU_SOURCE
#include "hs_flight.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hs_clock.h"
#include "hs_drain.h"
#include "hs_intern.h"

_Atomic int hs_flight_on = 0;

static pthread_mutex_t flight_lock = PTHREAD_MUTEX_INITIALIZER; /* slots, free blocks */
static char *base = NULL;    /* the mapping */
static uint64_t map_bytes = 0;
static hs_flight_header *hdr = NULL;
static hs_flight_slot *slots = NULL;
static char *blocks = NULL;
static char *file_path = NULL;
/* Free blocks: a stack of indices, and the never-used ones above `fresh`. Taken only when
 * the block pool is empty (hs_writer_switch's allocation, where a mapping would otherwise
 * be made) or by the drain thread's refill: a short lock there, never on the hot path. */
static uint32_t *free_idx = NULL;
static uint32_t nfree = 0, fresh = 0;
static int atexit_registered = 0;

#define ALIGN(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))

static void on_exit_clean(void) {
    if (hdr && atomic_load(&hs_flight_on)) {
        hs_flight_tick();
        atomic_store_explicit(&hdr->clean_exit, 1, memory_order_release);
    }
}

/* Under the intern lock (hs_intern_mirror): from here on, each of the ops below acts (they
 * were installed at init, and did nothing while no file was open). */
static void mirror_on(void) { atomic_store(&hs_flight_on, 1); }

int hs_flight_open(const char *path, int32_t rank, const char *version) {
    pthread_mutex_lock(&flight_lock);
    if (base) {
        int same = file_path && strcmp(file_path, path) == 0;
        pthread_mutex_unlock(&flight_lock);
        if (same) return 0;
        errno = EEXIST;
        return -1;
    }
    uint64_t records = atomic_load(&hs_block_records);
    uint64_t block_bytes = ALIGN(sizeof(hs_block) + records * sizeof(hs_record), 64);
    uint64_t cap = atomic_load(&hs_memory_cap);
    uint64_t nblocks = cap / (records * sizeof(hs_record));
    if (nblocks < 1) nblocks = 1;
    if (nblocks > (1u << 24)) nblocks = 1u << 24;
    uint64_t slots_off = ALIGN(sizeof(hs_flight_header), 4096);
    uint64_t strings_off = ALIGN(slots_off + (uint64_t)HS_FLIGHT_SLOTS * sizeof(hs_flight_slot), 4096);
    uint64_t pairs_off = ALIGN(strings_off + HS_FLIGHT_STRINGS, 4096);
    uint64_t blocks_off = ALIGN(pairs_off + (uint64_t)HS_FLIGHT_PAIRS * sizeof(hs_pair), 4096);
    uint64_t total = ALIGN(blocks_off + nblocks * block_bytes, 4096);
    uint32_t *fi = malloc(sizeof(uint32_t) * nblocks);
    char *copy = strdup(path);
    int fd = fi && copy ? open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (fd < 0) {
        int e = fi && copy ? errno : ENOMEM;
        free(fi);
        free(copy);
        pthread_mutex_unlock(&flight_lock);
        errno = e;
        return -1;
    }
    /* Sparse: tmpfs (or a disk) backs a page only once it is written. */
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)total) == 0) p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (p == MAP_FAILED) {
        free(fi);
        free(copy);
        pthread_mutex_unlock(&flight_lock);
        errno = e;
        return -1;
    }
    base = p;
    map_bytes = total;
    hdr = p;
    slots = (hs_flight_slot *)(base + slots_off);
    blocks = base + blocks_off;
    free_idx = fi;
    nfree = 0;
    fresh = 0;
    file_path = copy;
    hs_flight_header *h = hdr;
    h->format = HS_FLIGHT_FORMAT;
    h->header_bytes = sizeof(hs_flight_header);
    strncpy(h->version, version, sizeof h->version - 1);
    h->pid = getpid();
    h->rank = rank;
    h->clock_source = atomic_load(&hs_clock_kind);
    hs_clock_info clock_info;
    hs_clock_get_info(&clock_info);
    h->process_start_ns = clock_info.anchor_real_ns;
    h->file_bytes = total;
    h->slots_off = slots_off;
    h->nslots = HS_FLIGHT_SLOTS;
    h->slot_bytes = sizeof(hs_flight_slot);
    h->strings_off = strings_off;
    h->strings_cap = HS_FLIGHT_STRINGS;
    h->pairs_off = pairs_off;
    h->pairs_cap = HS_FLIGHT_PAIRS;
    h->frames_cap = HS_FLIGHT_FRAMES;
    h->blocks_off = blocks_off;
    h->nblocks = (uint32_t)nblocks;
    h->block_records = (uint32_t)records;
    h->block_bytes = block_bytes;
    h->off_slot_state = offsetof(hs_flight_slot, state);
    h->off_slot_tid = offsetof(hs_flight_slot, tid);
    h->off_slot_gen = offsetof(hs_flight_slot, gen);
    h->off_slot_name = offsetof(hs_flight_slot, name);
    h->off_slot_name_len = offsetof(hs_flight_slot, name_len);
    h->off_slot_frames_addr = offsetof(hs_flight_slot, frames_addr);
    h->off_slot_tstate = offsetof(hs_flight_slot, t);
    h->off_slot_frames = offsetof(hs_flight_slot, frames);
    h->off_t_depth = offsetof(hs_tstate, depth);
    h->off_t_stack = offsetof(hs_tstate, stack);
    h->off_t_seq = offsetof(hs_tstate, seq);
    h->off_t_own_stack = offsetof(hs_tstate, own_stack);
    h->off_t_own_depth = offsetof(hs_tstate, own_depth);
    h->off_t_stack_owner = offsetof(hs_tstate, stack_owner);
    h->frame_bytes = sizeof(hs_frame);
    h->off_f_start = offsetof(hs_frame, start);
    h->off_f_seq = offsetof(hs_frame, seq);
    h->off_f_arg = offsetof(hs_frame, arg);
    h->off_f_pair = offsetof(hs_frame, pair);
    h->off_f_flags = offsetof(hs_frame, flags);
    h->off_b_head = offsetof(hs_block, head);
    h->off_b_cap = offsetof(hs_block, cap);
    h->off_b_state = offsetof(hs_block, flight_state);
    h->off_b_tid = offsetof(hs_block, flight_tid);
    h->off_b_base = offsetof(hs_block, flight_base_seq);
    h->off_b_drained = offsetof(hs_block, flight_drained);
    h->off_b_recs = offsetof(hs_block, recs);
    for (uint32_t i = 0; i < HS_FLIGHT_SLOTS; i++) slots[i].frames_addr = (uint64_t)(uintptr_t)slots[i].frames;
    hs_flight_tick();
    /* The magic last: a reader never takes a half-written header for a file. */
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, HS_FLIGHT_MAGIC, 8);
    if (!atexit_registered) {
        atexit(on_exit_clean);
        atexit_registered = 1;
    }
    pthread_mutex_unlock(&flight_lock);
    /* Under the intern lock: every string so far, and each new one from now on. */
    hs_intern_mirror(mirror_on);
    return 0;
}

const char *hs_flight_path(void) { return atomic_load(&hs_flight_on) ? file_path : NULL; }

void hs_flight_set_rank(int32_t rank) {
    if (atomic_load(&hs_flight_on)) hdr->rank = rank;
}

/* ---- threads ---------------------------------------------------------------------------- */

static void put_name(hs_flight_slot *s, const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n > HS_FLIGHT_NAME) n = HS_FLIGHT_NAME;
    memcpy(s->name, name ? name : "", n);
    s->name_len = (uint32_t)n;
}

hs_tstate *hs_flight_tstate_alloc(int64_t tid, const char *name, hs_frame **frames, uint32_t *nframes) {
    if (!atomic_load(&hs_flight_on)) return NULL;
    hs_flight_slot *got = NULL;
    pthread_mutex_lock(&flight_lock);
    /* A free slot first, else one whose thread exited (its name then goes with it). */
    for (int pass = 0; pass < 2 && !got; pass++)
        for (uint32_t i = 0; i < HS_FLIGHT_SLOTS; i++) {
            uint32_t st = atomic_load(&slots[i].state);
            if (st == 0 || (pass == 1 && st == 2)) {
                got = &slots[i];
                break;
            }
        }
    if (got) {
        atomic_store(&got->state, 0);
        atomic_fetch_add(&got->gen, 1); /* odd: being set up */
        memset(&got->t, 0, sizeof got->t);
        got->tid = tid;
        put_name(got, name);
        atomic_fetch_add(&got->gen, 1);
        atomic_store_explicit(&got->state, 1, memory_order_release);
    }
    pthread_mutex_unlock(&flight_lock);
    if (!got) return NULL;
    *frames = got->frames;
    *nframes = HS_FLIGHT_FRAMES;
    return &got->t;
}

static hs_flight_slot *slot_of(const void *p) {
    if (!slots || (const char *)p < (const char *)slots ||
        (const char *)p >= (const char *)(slots + HS_FLIGHT_SLOTS))
        return NULL;
    return &slots[((const char *)p - (const char *)slots) / sizeof(hs_flight_slot)];
}

int hs_flight_owns(const void *p) { return slot_of(p) != NULL; }

int hs_flight_tstate_release(hs_tstate *t) {
    hs_flight_slot *s = slot_of(t);
    if (!s) return 0;
    atomic_store_explicit(&s->state, 2, memory_order_release);
    return 1;
}

void hs_flight_set_name(hs_tstate *t, const char *name) {
    hs_flight_slot *s = slot_of(t);
    if (!s) return;
    hs_flight_gen_begin(t);
    put_name(s, name);
    hs_flight_gen_end(t);
}

void hs_flight_gen_begin(hs_tstate *t) {
    hs_flight_slot *s = slot_of(t);
    if (!s) return;
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
    /* the odd count is visible before any change to the stack */
    atomic_thread_fence(memory_order_release);
}

void hs_flight_gen_end(hs_tstate *t) {
    hs_flight_slot *s = slot_of(t);
    if (!s) return;
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
}

/* ---- blocks ------------------------------------------------------------------------------ */

int hs_flight_providing(void) { return atomic_load_explicit(&hs_flight_on, memory_order_relaxed); }

hs_block *hs_flight_block_alloc(uint64_t records, uint64_t *bytes) {
    if (!atomic_load_explicit(&hs_flight_on, memory_order_relaxed) || records != hdr->block_records) return NULL;
    hs_block *b = NULL;
    pthread_mutex_lock(&flight_lock);
    if (nfree) b = (hs_block *)(blocks + (uint64_t)free_idx[--nfree] * hdr->block_bytes);
    else if (fresh < hdr->nblocks) b = (hs_block *)(blocks + (uint64_t)fresh++ * hdr->block_bytes);
    pthread_mutex_unlock(&flight_lock);
    *bytes = hdr->block_bytes;
    return b;
}

void hs_flight_block_free(hs_block *b) {
    atomic_store_explicit(&b->flight_state, 0, memory_order_release);
    pthread_mutex_lock(&flight_lock);
    free_idx[nfree++] = (uint32_t)(((char *)b - blocks) / hdr->block_bytes);
    pthread_mutex_unlock(&flight_lock);
}

void hs_flight_block_drained(hs_block *b, uint64_t upto) {
    if (b->mapped != HS_BLOCK_FLIGHT) return;
    if (upto > atomic_load_explicit(&b->flight_drained, memory_order_relaxed))
        atomic_store_explicit(&b->flight_drained, upto, memory_order_release);
}

/* ---- strings ----------------------------------------------------------------------------- */

/* Entries: u32 id, u32 length, the bytes, padded to 8. Published by strings_used (release)
 * once written: a reader reads up to it. */
void hs_flight_note_string(uint32_t id, const char *s, uint32_t len) {
    if (!atomic_load_explicit(&hs_flight_on, memory_order_relaxed)) return;
    uint64_t used = atomic_load_explicit(&hdr->strings_used, memory_order_relaxed);
    uint64_t need = ALIGN(8 + (uint64_t)len, 8);
    if (used + need > hdr->strings_cap) {
        atomic_fetch_add(&hdr->lost_strings, 1);
        return;
    }
    char *at = base + hdr->strings_off + used;
    memcpy(at, &id, 4);
    memcpy(at + 4, &len, 4);
    memcpy(at + 8, s, len);
    atomic_store_explicit(&hdr->nstrings, atomic_load(&hdr->nstrings) + 1, memory_order_relaxed);
    atomic_store_explicit(&hdr->strings_used, used + need, memory_order_release);
}

void hs_flight_note_pair(uint32_t id, uint32_t name, uint32_t path) {
    if (!atomic_load_explicit(&hs_flight_on, memory_order_relaxed)) return;
    if (id >= hdr->pairs_cap) {
        atomic_fetch_add(&hdr->lost_strings, 1);
        return;
    }
    hs_pair *pairs = (hs_pair *)(base + hdr->pairs_off);
    pairs[id].name = name;
    pairs[id].path = path;
    /* pairs are interned in id order: the count says which entries are written */
    atomic_store_explicit(&hdr->npairs, id + 1, memory_order_release);
}

/* ---- clock, exit, fork ------------------------------------------------------------------- */

/* The drain thread and the exit handler both tick: one at a time. */
static pthread_mutex_t tick_lock = PTHREAD_MUTEX_INITIALIZER;

void hs_flight_tick(void) {
    if (!hdr) return;
    pthread_mutex_lock(&tick_lock);
    hs_clock_seg seg;
    if (hs_clock_last_seg(&seg) == 0) {
        atomic_fetch_add_explicit(&hdr->clock_gen, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        hdr->clock_t0 = seg.t0;
        hdr->clock_n0 = seg.n0;
        hdr->clock_ns_per_tick = seg.ns_per_tick;
        hdr->clock_source = atomic_load(&hs_clock_kind);
        atomic_fetch_add_explicit(&hdr->clock_gen, 1, memory_order_release);
    }
    atomic_store_explicit(&hdr->last_seen_ticks, hs_ticks(), memory_order_release);
    pthread_mutex_unlock(&tick_lock);
}

void hs_flight_after_fork_child(void) {
    if (!base) return;
    /* The file and every block in it stay the parent's: the child records into memory of
     * its own (hs_block_discard_ref leaves flight blocks alone). */
    atomic_store(&hs_flight_on, 0); /* every op does nothing from now on (the ring's block_free
                                     * is never called for flight blocks here) */
    hs_tstate *t = hs_tls;
    hs_flight_slot *s = t ? slot_of(t) : NULL;
    if (s) {
        hs_tstate *mine = malloc(sizeof *mine);
        hs_frame *frames = NULL;
        int inline_stack = t->stack == s->frames;
        int inline_own = t->own_stack == s->frames;
        if (mine && (inline_stack || inline_own)) {
            frames = malloc(sizeof(hs_frame) * HS_FLIGHT_FRAMES);
            if (frames) memcpy(frames, s->frames, sizeof(hs_frame) * HS_FLIGHT_FRAMES);
        }
        if (mine && (frames || !(inline_stack || inline_own))) {
            memcpy(mine, t, sizeof *mine);
            if (inline_stack) mine->stack = frames;
            if (inline_own) mine->own_stack = frames;
            if (t->ctx_slot == (void *const *)&t->ctx_none) mine->ctx_slot = (void *const *)&mine->ctx_none;
            hs_tls = mine;
        } else { /* out of memory in the child: it records nothing */
            free(mine);
            free(frames);
            hs_tls = NULL;
        }
    }
    /* Still mapped (the discarded chains are walked through it), but nothing the child
     * does writes to the parent's file from now on. */
    hdr = NULL;
    slots = NULL;
}

void hs_flight_drain_tick(void) {
    if (atomic_load_explicit(&hs_flight_on, memory_order_relaxed)) hs_flight_tick();
}
