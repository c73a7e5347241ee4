/* hs_flight: the flight file, a MAP_SHARED file that holds the recorder's blocks, each
 * thread's state and stack of open spans, and a mirror of the string tables, so that the
 * kernel keeps them when the process dies (SIGKILL, SIGSEGV, abort(), the OOM killer):
 * `hotspan recover` rebuilds the spans from it, and `hotspan top` reads the stacks of a
 * running process from outside without stopping it.
 *
 * Nothing is copied on the hot path: the flight file IS where the recorder keeps that
 * state. A thread's hs_tstate (its writer, depth and stack pointer) and its first
 * HS_FLIGHT_FRAMES frames live in a slot of the file, and blocks of the configured size are
 * carved from it; enter/exit run the same instructions either way (only the memory is a
 * shared mapping), so the flight file costs nothing per span. Slow paths (a thread's
 * registration and exit, a block switch, a new string) write the rest.
 *
 * Free of Python.h. The layout is described in the header (struct offsets included), so a
 * reader (src/hotspan/recording/flight.py) checks every count and offset against the file.
 */
#ifndef HS_FLIGHT_H
#define HS_FLIGHT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hs_registry.h"
#include "hs_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HS_FLIGHT_MAGIC "HSFLIGHT"
#define HS_FLIGHT_FORMAT 1u
#define HS_FLIGHT_FRAMES 256u  /* frames a slot holds: deeper stacks are not in the file */
#define HS_FLIGHT_SLOTS 256u   /* threads with a slot; later ones record, stacks unseen */
#define HS_FLIGHT_NAME 96u
#define HS_FLIGHT_STRINGS (2u << 20) /* bytes of mirrored strings */
#define HS_FLIGHT_PAIRS (1u << 18)   /* (name, category path) pairs mirrored */

typedef struct hs_flight_header {
    char magic[8];
    uint32_t format;
    uint32_t header_bytes;
    char version[32]; /* hotspan's version, NUL-padded */
    int64_t pid;
    int32_t rank;
    int32_t clock_source;
    uint64_t file_bytes;
    /* layout */
    uint64_t slots_off;
    uint32_t nslots, slot_bytes;
    uint64_t strings_off, strings_cap;
    uint64_t pairs_off;
    uint32_t pairs_cap, frames_cap;
    uint64_t blocks_off;
    uint32_t nblocks, block_records;
    uint64_t block_bytes;
    /* struct offsets (slot, tstate within the slot, frame, block) for the reader */
    uint32_t off_slot_state, off_slot_tid, off_slot_gen, off_slot_name, off_slot_name_len, off_slot_frames_addr,
        off_slot_tstate, off_slot_frames;
    uint32_t off_t_depth, off_t_stack, off_t_seq, off_t_own_stack, off_t_own_depth, off_t_stack_owner;
    uint32_t frame_bytes, off_f_start, off_f_seq, off_f_arg, off_f_pair, off_f_flags;
    uint32_t off_b_head, off_b_cap, off_b_state, off_b_tid, off_b_base, off_b_drained, off_b_recs;
    uint32_t pad0;
    /* Written while the process runs. The clock segment (ticks -> epoch ns) is guarded by
     * clock_gen (a seqlock: odd while it is rewritten). */
    _Atomic uint64_t clock_gen;
    uint64_t clock_t0;
    int64_t clock_n0;
    double clock_ns_per_tick;
    _Atomic uint64_t last_seen_ticks; /* bumped by the drain thread on each pass */
    _Atomic uint32_t clean_exit;      /* 1: the process exited normally */
    _Atomic uint32_t nstrings;        /* strings mirrored so far */
    _Atomic uint64_t strings_used;    /* bytes of the strings area published */
    _Atomic uint32_t npairs;          /* pairs 0..npairs-1 published */
    _Atomic uint32_t lost_strings;    /* strings or pairs that did not fit */
    /* CLOCK_REALTIME ns when hotspan's clock was first calibrated in this process (its
     * start, as far as spans go): no span starts earlier, so `recover` drops a record
     * whose times a damaged byte moved before it. */
    int64_t process_start_ns;
} hs_flight_header;
/* The reader unpacks the header field by field, with no padding between them. */
_Static_assert(sizeof(hs_flight_header) == offsetof(hs_flight_header, process_start_ns) + 8,
               "hs_flight_header has no padding");

/* One thread. gen is a seqlock over the rearrangements of the stack that the hot path
 * does not make (an out-of-order exit's memmove, an asyncio task's stack switch, a rename):
 * odd while one is under way. The hot path's own pushes are detected by the reader through
 * the thread's next span id (tstate.seq), stored before a frame is written (hs_enter). */
typedef struct hs_flight_slot {
    _Atomic uint32_t state; /* 0 free, 1 a live thread, 2 the thread exited */
    uint32_t name_len;
    int64_t tid;
    _Atomic uint64_t gen;
    uint64_t frames_addr; /* &frames[0] in the writer: tstate.stack == it while it is current */
    char name[HS_FLIGHT_NAME];
    _Alignas(64) hs_tstate t;
    _Alignas(64) hs_frame frames[HS_FLIGHT_FRAMES];
} hs_flight_slot;

/* Whether this process writes a flight file now (read on slow paths only). */
extern _Atomic int hs_flight_on;

/* Create (truncate) and map the file; 0, or -1 with errno (EEXIST: one is open already
 * at another path). version: hotspan's. Strings and pairs interned so far are copied. */
int hs_flight_open(const char *path, int32_t rank, const char *version);
const char *hs_flight_path(void);
void hs_flight_set_rank(int32_t rank);

/* Threads (the registry's hs_registry_ops). A zeroed hs_tstate in a free slot, with the
 * slot's frames as its stack (NULL: no flight file, or every slot taken). */
hs_tstate *hs_flight_tstate_alloc(int64_t tid, const char *name, hs_frame **frames, uint32_t *nframes);
/* Thread exit: 1 when t lives in the file (the slot is marked exited, not freed). */
int hs_flight_tstate_release(hs_tstate *t);
/* Whether frames are a slot's (never freed nor reallocated). */
int hs_flight_owns(const void *p);
void hs_flight_set_name(hs_tstate *t, const char *name);
/* Around a slow path that rearranges t's current stack in place (seqlock, see above). */
void hs_flight_gen_begin(hs_tstate *t);
void hs_flight_gen_end(hs_tstate *t);

/* Blocks (the ring's hs_ring_ops): whether a file is open (its blocks are all of one size),
 * a free block of `records` records from the file (NULL: none of that size left, or no file
 * open), and one back to it. */
int hs_flight_providing(void);
hs_block *hs_flight_block_alloc(uint64_t records, uint64_t *bytes);
void hs_flight_block_free(hs_block *b);
/* drain() converted the block's slots up to `upto` (the drain's hs_drain_ops). */
void hs_flight_block_drained(hs_block *b, uint64_t upto);

/* The intern tables (the intern's hs_intern_ops, intern lock held; nothing while no file is
 * open). */
void hs_flight_note_string(uint32_t id, const char *s, uint32_t len);
void hs_flight_note_pair(uint32_t id, uint32_t name, uint32_t path);

/* The last time the process was seen, and the clock (at open and at exit). */
void hs_flight_tick(void);
/* The drain thread, each pass (the drain's hs_drain_ops.tick): hs_flight_tick while a file
 * is open. */
void hs_flight_drain_tick(void);

/* fork(), in the child (one thread, locks held): the file stays the parent's. The calling
 * thread's state moves to private memory; the child writes nothing to the file. */
void hs_flight_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
