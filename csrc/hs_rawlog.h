/* hs_rawlog: the raw log, a run directory's live file of this process's records as the drain
 * thread moves them out of the rings (record(dir) while it runs).
 *
 * Why: a Parquet part a flush costs ~100 ns of flusher CPU a span and the interpreter lock,
 * while one thread records a span in ~60 ns: a flusher in Python falls behind threads that
 * record flat out. Here the drain thread (C, no interpreter lock) appends each segment's
 * 32-byte records as they are, plus the intern tables' and thread names' deltas and the
 * clock, to an append-only file: a few ns a span (a checksum and a write() into the page
 * cache). Parquet comes later, off the hot path: at stop() or `hotspan compact`
 * (src/hotspan/recording/_rawlog.py converts, formats/_rawlog.py reads a raw file while the run is live,
 * and after a SIGKILL, up to the last whole frame).
 *
 * File: a header (hs_rawlog_header), then frames: a 48-byte hs_rawlog_frame then its payload
 * (padded to 8 bytes with zeros). The frame's sum covers its first 40 bytes and the padded
 * payload, as 64-bit little-endian words w[0..n): with a = the sum of the words and b = the
 * sum of the running sums (Fletcher's, on words), sum = a + HS_RAWLOG_SUM_K * b, all mod
 * 2^64: a changed, moved or missing word changes it. A reader stops at the first frame that
 * is cut short or whose sum differs (a write the kill interrupted).
 *
 * Free of Python.h. Every function but hs_rawlog_after_fork_child is called with the drain
 * lock held (hs_drain.c: hs_drain_raw_open / hs_drain_raw_close, and its sweep).
 */
#ifndef HS_RAWLOG_H
#define HS_RAWLOG_H

#include <stdint.h>

#include "hs_clock.h"
#include "hs_registry.h"
#include "hs_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HS_RAWLOG_MAGIC "HSRAWLOG"
#define HS_RAWLOG_FORMAT 1u
#define HS_RAWLOG_FRAME_MAGIC 0x46525348u /* "HSRF" */
#define HS_RAWLOG_SUM_K 0x9e3779b97f4a7c15ull

enum {
    HS_RAW_RECORDS = 1, /* a = tid, b = full id before the first record, c = slots; payload: records */
    HS_RAW_STRING = 2,  /* a = id, b = bytes; payload: the bytes */
    HS_RAW_PAIR = 3,    /* a = pair id, b = name string id, c = category path string id */
    HS_RAW_THREAD = 4,  /* a = tid, b = bytes; payload: the thread's name */
    HS_RAW_CLOCK = 5,   /* a = clock source; payload: t0 (u64), n0 (i64), ns per tick (f64) */
    HS_RAW_END = 6,     /* closed by stop(): a = spans written, b = spans dropped at the cap */
    /* Right before the records frame of the same thread it belongs to, when some of its spans
     * ran in asyncio tasks whose steps were seen (hs_selftime.h's wait map): a = tid, b =
     * pairs; payload: (span id, ticks its task was suspended while it was innermost) pairs,
     * in the records' order. A reader converts through hs_self_step as drain() does. */
    HS_RAW_WAITS = 7,
};

typedef struct hs_rawlog_header {
    char magic[8];
    uint32_t format;
    uint32_t header_bytes;
    int64_t pid;
    int32_t rank;
    int32_t clock_source;
    uint64_t id_base;     /* the process's span id base */
    char version[32];     /* hotspan's version, NUL-padded */
} hs_rawlog_header;
_Static_assert(sizeof(hs_rawlog_header) == 72, "the raw log's header is 72 bytes");

typedef struct hs_rawlog_frame {
    uint32_t magic;
    uint32_t kind;
    uint64_t payload_bytes; /* before padding */
    uint64_t a, b, c;
    uint64_t sum;
} hs_rawlog_frame;
_Static_assert(sizeof(hs_rawlog_frame) == 48, "a raw log frame's header is 48 bytes");

typedef struct hs_rawlog_stats {
    uint64_t spans;        /* spans written to the file */
    uint64_t bytes;        /* bytes written to the file */
    uint64_t frames;
    uint64_t write_errors; /* write() failures (the spans of those frames are not in the file) */
    uint64_t lost_spans;   /* spans in frames that could not be written */
    int open;
} hs_rawlog_stats;

/* Whether a raw log is open in this process (relaxed: a hint for the drain side). */
int hs_rawlog_on(void);
/* Create the file (O_EXCL): 0, or -1 with errno (EEXIST: one is open already). Writes the
 * header, the clock, every string and pair interned so far. */
int hs_rawlog_open_locked(const char *path, int32_t rank, const char *version);
/* One segment of a thread's records (nspans spans among n slots). */
void hs_rawlog_segment_locked(hs_thread_info *info, const hs_record *recs, uint64_t n, uint64_t base_seq,
                              uint64_t nspans);
/* The end of a pass: new strings, pairs and clock first, then the segments, in one writev. */
void hs_rawlog_flush_locked(void);
/* Flush, write the end frame, close; the counts so far into out (may be NULL). */
int hs_rawlog_close_locked(hs_rawlog_stats *out);
void hs_rawlog_stats_locked(hs_rawlog_stats *out);
/* drain lock held: the wait map's entries of a segment's spans (one the raw log wrote and
 * no drain() will convert: shed from memory) forgotten, as drain() would have taken them. */
void hs_rawlog_forget_waits(const hs_record *recs, uint64_t n, uint64_t base_seq);

/* Reading (formats/_rawlog.py, while live, at stop() and in compact; no lock): a records
 * frame's payload offset in the file, its slots, the full id before its first record, the
 * clock segments written before it, its waits frame's payload offset and pairs (0: none),
 * its thread and the index of the thread's name in the table's dictionary. */
typedef struct hs_rawlog_span_frame {
    uint64_t offset, slots, base_seq, clocks, waits_offset, nwaits;
    int64_t tid, thread_index;
} hs_rawlog_span_frame;
/* The spans' columns as the span table holds them (SPAN_SCHEMA's order and types), cap rows
 * each; the bitmaps (Arrow's validity, LSB first) of (cap + 7) / 8 bytes. name and category
 * are dictionary indices from pair_name / pair_cat (by pair id; a category index < 0 or a
 * pair past npairs: null, name index 0). */
typedef struct hs_rawlog_columns {
    uint64_t *span_id, *parent_id;
    int64_t *start_ns, *end_ns, *duration_ns, *thread_id, *arg, *self_ns, *wait_ns;
    int32_t *name, *category, *depth, *thread_name;
    uint8_t *parent_valid, *category_valid, *arg_valid, *error;
    const int32_t *pair_name, *pair_cat;
    uint32_t npairs;
    uint64_t parents, categories, args; /* out: the valid values of the three bitmaps */
} hs_rawlog_columns;
/* A log's frames from byte `at` (past the header): each whole frame whose sum holds, as
 * (header offset, kind, payload bytes, a, b, c), into a malloc'd array (*out, *n frames; free
 * it); stops at the end (*why 0), at a frame cut short (1), at bytes that are no frame (2) or
 * at a frame whose sum differs (3), *stop_at the offset where it stopped. -1 out of memory. */
typedef struct hs_rawlog_frame_info {
    uint64_t at, kind, payload_bytes, a, b, c;
} hs_rawlog_frame_info;
int hs_rawlog_scan(const unsigned char *data, uint64_t size, uint64_t at, hs_rawlog_frame_info **out, uint64_t *n,
                   uint64_t *stop_at, int *why);
/* What a log's reader carries from piece to piece: each thread's hs_self_state (the closed
 * children of its open spans), so self and wait times are drain()'s whatever the pieces. */
typedef struct hs_rawlog_reader hs_rawlog_reader;
hs_rawlog_reader *hs_rawlog_reader_new(void);
void hs_rawlog_reader_free(hs_rawlog_reader *rd);
/* The spans of the frames (ids rebuilt, ticks converted as drain() converts them, counter
 * records skipped; self_ns and wait_ns by hs_self_step in each thread's close order, as
 * drain()'s columns, with rd's state: the frames of a log must come in order, each once);
 * returns the spans written, at most cap. A frame outside the data ends the decoding. */
uint64_t hs_rawlog_decode(hs_rawlog_reader *rd, const unsigned char *data, uint64_t data_bytes,
                          const hs_rawlog_span_frame *frames, uint64_t nframes, const hs_clock_seg *clocks,
                          uint64_t nclocks, hs_rawlog_columns *out, uint64_t cap);

/* fork(), in the child: the file is the parent's; the child writes nothing to it. */
void hs_rawlog_after_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
