/* hs_rawlog: the raw log (see hs_rawlog.h). */
#define _GNU_SOURCE
#include "hs_rawlog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hs_clock.h"
#include "hs_intern.h"
#include "hs_selftime.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* A frame waiting for the pass's write: its header and payload (owned: freed once written;
 * else records in a block the caller's segment holds until the flush). */
typedef struct pending_frame {
    hs_rawlog_frame h;
    const void *payload;
    uint64_t padded;
    int owned;
} pending_frame;

static _Atomic int raw_on = 0;
static int fd = -1;
static uint64_t offset = 0; /* bytes of whole frames in the file: a failed write is cut back to it */
static hs_rawlog_stats stats;
static pending_frame *pend = NULL;
static uint64_t npend = 0, cap_pend = 0;
static uint64_t pend_spans = 0;
static uint32_t strings_sent = 1; /* string ids 1.. written (0 is "none") */
static uint32_t pairs_sent = 0;
static hs_clock_seg clock_sent;
static int clock_kind_sent = -1;
/* tid -> a hash of the name last written for it (open addressing; tid 0 never used as a key
 * since a real thread id is never 0: key 0 marks an empty slot) */
typedef struct name_slot {
    int64_t tid;
    uint64_t hash;
} name_slot;
static name_slot *names = NULL;
static uint64_t names_cap = 0, names_count = 0;
static const uint64_t zeros[1] = {0};

int hs_rawlog_on(void) { return atomic_load_explicit(&raw_on, memory_order_relaxed); }

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static void sum_words(const void *p, uint64_t bytes, uint64_t *a, uint64_t *b) {
    const unsigned char *c = p;
    uint64_t x = *a, y = *b, whole = bytes / 8;
    for (uint64_t i = 0; i < whole; i++) {
        uint64_t w;
        memcpy(&w, c + i * 8, 8); /* little-endian hosts only (x86-64, arm64): the reader's order */
        x += w;
        y += x;
    }
    if (bytes % 8) {
        uint64_t w = 0;
        memcpy(&w, c + whole * 8, bytes % 8);
        x += w;
        y += x;
    }
    *a = x;
    *b = y;
}

static void frame_sum(hs_rawlog_frame *h, const void *payload) {
    uint64_t a = 0, b = 0;
    sum_words(h, offsetof(hs_rawlog_frame, sum), &a, &b);
    if (h->payload_bytes) sum_words(payload, h->payload_bytes, &a, &b);
    h->sum = a + HS_RAWLOG_SUM_K * b;
}

/* Queue a frame; 0, or -1 out of memory (the frame is not written: counted as lost). */
static int queue(uint32_t kind, uint64_t a, uint64_t b, uint64_t c, const void *payload, uint64_t bytes, int owned) {
    if (npend == cap_pend) {
        uint64_t nc = cap_pend ? cap_pend * 2 : 64;
        pending_frame *grown = realloc(pend, nc * sizeof *grown);
        if (!grown) {
            if (owned) free((void *)payload);
            return -1;
        }
        pend = grown;
        cap_pend = nc;
    }
    pending_frame *f = &pend[npend++];
    memset(&f->h, 0, sizeof f->h);
    f->h.magic = HS_RAWLOG_FRAME_MAGIC;
    f->h.kind = kind;
    f->h.payload_bytes = bytes;
    f->h.a = a;
    f->h.b = b;
    f->h.c = c;
    frame_sum(&f->h, payload);
    f->payload = payload;
    f->padded = pad8(bytes);
    f->owned = owned;
    return 0;
}

static void queue_clock(void) {
    hs_clock_seg seg;
    if (hs_clock_last_seg(&seg) != 0) return;
    int kind = atomic_load(&hs_clock_kind);
    if (kind == clock_kind_sent && seg.t0 == clock_sent.t0 && seg.n0 == clock_sent.n0 &&
        seg.ns_per_tick == clock_sent.ns_per_tick)
        return;
    hs_clock_seg *copy = malloc(sizeof *copy);
    if (!copy) return; /* the next pass tries again */
    *copy = seg;
    if (queue(HS_RAW_CLOCK, (uint64_t)kind, 0, 0, copy, sizeof *copy, 1) == 0) {
        clock_sent = seg;
        clock_kind_sent = kind;
    }
}

static void queue_tables(void) {
    hs_pair *pairs = NULL;
    uint32_t np = hs_intern_pairs_snapshot(&pairs);
    /* strings after the pairs' snapshot: every string a pair names is interned before it */
    for (;;) {
        size_t len = 0;
        char *s = hs_intern_string_dup(strings_sent, &len);
        if (!s) break;
        if (queue(HS_RAW_STRING, strings_sent, len, 0, s, len, 1) != 0) break;
        strings_sent++;
    }
    for (; pairs && pairs_sent < np; pairs_sent++)
        if (queue(HS_RAW_PAIR, pairs_sent, pairs[pairs_sent].name, pairs[pairs_sent].path, NULL, 0, 0) != 0) break;
    free(pairs);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a; never 0 for a name written */
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h | 1;
}

static name_slot *name_find(int64_t tid) {
    if (names_count * 2 >= names_cap) {
        uint64_t nc = names_cap ? names_cap * 2 : 64;
        name_slot *grown = calloc(nc, sizeof *grown);
        if (!grown) return NULL;
        for (uint64_t i = 0; i < names_cap; i++) {
            if (!names[i].tid) continue;
            uint64_t k = (uint64_t)names[i].tid * 0x9e3779b97f4a7c15ull & (nc - 1);
            while (grown[k].tid) k = (k + 1) & (nc - 1);
            grown[k] = names[i];
        }
        free(names);
        names = grown;
        names_cap = nc;
    }
    uint64_t k = (uint64_t)tid * 0x9e3779b97f4a7c15ull & (names_cap - 1);
    while (names[k].tid && names[k].tid != tid) k = (k + 1) & (names_cap - 1);
    if (!names[k].tid) {
        names[k].tid = tid;
        names[k].hash = 0;
        names_count++;
    }
    return &names[k];
}

/* The thread's name, when it is new or changed since it was last written. */
static void queue_name(hs_thread_info *info) {
    hs_registry_lock(); /* a rename writes info->name under it */
    uint64_t h = hash_name(info->name);
    name_slot *slot = info->tid ? name_find(info->tid) : NULL;
    char *copy = NULL;
    size_t len = 0;
    if (slot && slot->hash != h) {
        len = info->name ? strlen(info->name) : 0;
        copy = malloc(len + 1);
        if (copy) {
            memcpy(copy, info->name ? info->name : "", len + 1);
            slot->hash = h;
        }
    }
    int64_t tid = info->tid;
    hs_registry_unlock();
    if (copy) queue(HS_RAW_THREAD, (uint64_t)tid, len, 0, copy, len, 1);
}

/* The queued frames, a writev per IOV_MAX / 3 of them; on a failure the file is cut back to
 * its last whole frame and the frames not written are counted. */
static void write_frames(void) {
    uint64_t i = 0, pass_start = offset, frames_before = stats.frames;
    while (i < npend) {
        struct iovec iov[IOV_MAX];
        int n = 0;
        uint64_t first = i, total = 0;
        while (i < npend && n + 3 <= IOV_MAX) {
            pending_frame *f = &pend[i++];
            iov[n].iov_base = &f->h;
            iov[n++].iov_len = sizeof f->h;
            total += sizeof f->h;
            if (f->h.payload_bytes) {
                iov[n].iov_base = (void *)f->payload;
                iov[n++].iov_len = f->h.payload_bytes;
                total += f->h.payload_bytes;
            }
            if (f->padded != f->h.payload_bytes) {
                iov[n].iov_base = (void *)zeros;
                iov[n++].iov_len = f->padded - f->h.payload_bytes;
                total += f->padded - f->h.payload_bytes;
            }
        }
        /* writev may write less than asked (a signal, a full disk): go on from there */
        uint64_t done = 0;
        int k = 0;
        while (done < total) {
            ssize_t w = writev(fd, iov + k, n - k);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            done += (uint64_t)w;
            while (k < n && (uint64_t)w >= iov[k].iov_len) {
                w -= (ssize_t)iov[k].iov_len;
                k++;
            }
            if (k < n && w) {
                iov[k].iov_base = (char *)iov[k].iov_base + w;
                iov[k].iov_len -= (size_t)w;
            }
        }
        if (done < total) {
            stats.write_errors++;
            /* O_APPEND: the next write goes to the new end */
            if (ftruncate(fd, (off_t)pass_start) != 0) stats.write_errors++;
            stats.bytes -= offset - pass_start;
            stats.frames = frames_before;
            offset = pass_start;
            /* the spans of this pass not written (a pass's frames are cut back whole) */
            stats.lost_spans += pend_spans;
            stats.spans -= pend_spans;
            pend_spans = 0;
            /* the tables, clock and names of the frames cut back go again with the next pass */
            strings_sent = 1;
            pairs_sent = 0;
            clock_kind_sent = -1;
            for (uint64_t j = 0; j < names_cap; j++) names[j].hash = 0;
            return;
        }
        offset += total;
        stats.bytes += total;
        stats.frames += i - first;
    }
    pend_spans = 0;
}

/* The span ids of a segment's records, in their order, into ids (room for n); returns how many. */
static uint64_t segment_ids(const hs_record *recs, uint64_t n, uint64_t seq, uint64_t *ids) {
    uint64_t k = 0;
    for (uint64_t i = 0; i < n;) {
        uint32_t flags = hs_rec_flags(&recs[i]);
        if (flags & HS_F_COUNTER) {
            i += 1;
            continue;
        }
        if (flags & HS_F_EXT) {
            if (i + 1 >= n) break;
            hs_record_ext x;
            memcpy(&x, &recs[i + 1], sizeof x);
            seq = x.seq;
            i += 2;
        } else {
            seq = hs_seq_extend(seq, hs_rec_seq32(&recs[i]));
            i += 1;
        }
        ids[k++] = seq;
    }
    return k;
}

/* The segment's spans that the wait map knows (asyncio tasks' spans), as a waits frame
 * queued before its records: peeked, not taken (drain() may convert the same records). */
static void queue_waits(int64_t tid, const hs_record *recs, uint64_t n, uint64_t base_seq) {
    uint64_t *ids = malloc(n * sizeof *ids);
    uint64_t *pairs = malloc(2 * n * sizeof *pairs);
    uint64_t found = 0;
    if (ids && pairs) found = hs_wait_peek(ids, segment_ids(recs, n, base_seq, ids), pairs);
    free(ids);
    if (!found) { /* none, or out of memory: the spans convert by the rule for sync code */
        free(pairs);
        return;
    }
    queue(HS_RAW_WAITS, (uint64_t)tid, found, 0, pairs, found * 2 * sizeof *pairs, 1);
}

void hs_rawlog_forget_waits(const hs_record *recs, uint64_t n, uint64_t base_seq) {
    if (!hs_wait_any() || !n) return;
    uint64_t *ids = malloc(n * sizeof *ids);
    if (!ids) return;
    uint64_t k = segment_ids(recs, n, base_seq, ids), ticks;
    for (uint64_t i = 0; i < k; i++) hs_wait_take(ids[i], &ticks);
    free(ids);
}

void hs_rawlog_segment_locked(hs_thread_info *info, const hs_record *recs, uint64_t n, uint64_t base_seq,
                              uint64_t nspans) {
    if (fd < 0 || !n) return;
    queue_name(info);
    if (hs_wait_any()) queue_waits(info->tid, recs, n, base_seq);
    if (queue(HS_RAW_RECORDS, (uint64_t)info->tid, base_seq, n, recs, n * sizeof(hs_record), 0) != 0) {
        stats.lost_spans += nspans;
        return;
    }
    stats.spans += nspans;
    pend_spans += nspans;
}

void hs_rawlog_flush_locked(void) {
    if (fd < 0) return;
    if (!npend) {
        queue_clock();
        if (!npend) return;
    }
    /* The tables and the clock the segments' records need, written before them: move the
     * queued segments behind them. */
    uint64_t segs = npend;
    queue_clock();
    queue_tables();
    if (npend > segs) {
        uint64_t extra = npend - segs;
        pending_frame *tmp = malloc(extra * sizeof *tmp);
        if (tmp) {
            memcpy(tmp, pend + segs, extra * sizeof *tmp);
            memmove(pend + extra, pend, segs * sizeof *tmp);
            memcpy(pend, tmp, extra * sizeof *tmp);
            free(tmp);
        }
    }
    write_frames();
    for (uint64_t j = 0; j < npend; j++)
        if (pend[j].owned) free((void *)pend[j].payload);
    npend = 0;
}

int hs_rawlog_open_locked(const char *path, int32_t rank, const char *version) {
    if (fd >= 0) {
        errno = EEXIST;
        return -1;
    }
    int f = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_APPEND, 0644);
    if (f < 0) return -1;
    hs_rawlog_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, HS_RAWLOG_MAGIC, 8);
    h.format = HS_RAWLOG_FORMAT;
    h.header_bytes = sizeof h;
    h.pid = getpid();
    h.rank = rank;
    h.clock_source = atomic_load(&hs_clock_kind);
    h.id_base = hs_id_base();
    strncpy(h.version, version, sizeof h.version - 1);
    if (write(f, &h, sizeof h) != (ssize_t)sizeof h) {
        int e = errno ? errno : EIO;
        close(f);
        unlink(path);
        errno = e;
        return -1;
    }
    fd = f;
    offset = sizeof h;
    memset(&stats, 0, sizeof stats);
    stats.bytes = sizeof h;
    stats.open = 1;
    strings_sent = 1;
    pairs_sent = 0;
    clock_kind_sent = -1;
    memset(&clock_sent, 0, sizeof clock_sent);
    free(names);
    names = NULL;
    names_cap = names_count = 0;
    npend = 0;
    pend_spans = 0;
    atomic_store(&raw_on, 1);
    return 0;
}

void hs_rawlog_stats_locked(hs_rawlog_stats *out) {
    *out = stats;
    out->open = fd >= 0;
}

int hs_rawlog_close_locked(hs_rawlog_stats *out) {
    if (fd < 0) {
        if (out) hs_rawlog_stats_locked(out);
        return -1;
    }
    hs_rawlog_flush_locked();
    queue(HS_RAW_END, stats.spans, hs_dropped_total(), 0, NULL, 0, 0);
    write_frames();
    npend = 0;
    close(fd);
    fd = -1;
    atomic_store(&raw_on, 0);
    stats.open = 0;
    if (out) *out = stats;
    return 0;
}

void hs_rawlog_after_fork_child(void) {
    /* the parent's file: the child records to a file of its own if it records (its own
     * record() opens one); the descriptor is closed, nothing written */
    if (fd >= 0) close(fd);
    fd = -1;
    for (uint64_t j = 0; j < npend; j++)
        if (pend[j].owned) free((void *)pend[j].payload);
    npend = 0;
    pend_spans = 0;
    memset(&stats, 0, sizeof stats);
    atomic_store(&raw_on, 0);
}

/* ---- reading (formats/_rawlog.py, at stop() and in compact: no lock) ---------------------- */

int hs_rawlog_scan(const unsigned char *data, uint64_t size, uint64_t at, hs_rawlog_frame_info **out, uint64_t *n,
                   uint64_t *stop_at, int *why) {
    hs_rawlog_frame_info *info = NULL;
    uint64_t count = 0, cap = 0;
    *why = 0;
    while (at < size) {
        if (size - at < sizeof(hs_rawlog_frame)) {
            *why = 1;
            break;
        }
        hs_rawlog_frame h;
        memcpy(&h, data + at, sizeof h);
        if (h.magic != HS_RAWLOG_FRAME_MAGIC) {
            *why = 2;
            break;
        }
        uint64_t body = at + sizeof h;
        if (h.payload_bytes > size - body || pad8(h.payload_bytes) > size - body) {
            *why = 1;
            break;
        }
        uint64_t a = 0, b = 0;
        sum_words(&h, offsetof(hs_rawlog_frame, sum), &a, &b);
        if (h.payload_bytes) sum_words(data + body, h.payload_bytes, &a, &b);
        if (a + HS_RAWLOG_SUM_K * b != h.sum) {
            *why = 3;
            break;
        }
        if (count == cap) {
            uint64_t nc = cap ? cap * 2 : 1024;
            hs_rawlog_frame_info *grown = realloc(info, nc * sizeof *grown);
            if (!grown) {
                free(info);
                return -1;
            }
            info = grown;
            cap = nc;
        }
        info[count++] = (hs_rawlog_frame_info){at, h.kind, h.payload_bytes, h.a, h.b, h.c};
        at = body + pad8(h.payload_bytes);
    }
    *out = info;
    *n = count;
    *stop_at = at;
    return 0;
}

/* tid -> that thread's self state (open addressing; used marks a slot taken) */
typedef struct reader_slot {
    int64_t tid;
    int used;
    hs_self_state *state;
} reader_slot;

struct hs_rawlog_reader {
    reader_slot *slots;
    uint64_t cap, count;
    hs_self_state *spare; /* out of memory for a slot: a state no thread keeps */
};

hs_rawlog_reader *hs_rawlog_reader_new(void) { return calloc(1, sizeof(hs_rawlog_reader)); }

void hs_rawlog_reader_free(hs_rawlog_reader *rd) {
    if (!rd) return;
    for (uint64_t i = 0; i < rd->cap; i++)
        if (rd->slots[i].used) hs_self_state_free(rd->slots[i].state);
    hs_self_state_free(rd->spare);
    free(rd->slots);
    free(rd);
}

static uint64_t reader_home(int64_t tid, uint64_t cap) { return ((uint64_t)tid * 0x9e3779b97f4a7c15ull) & (cap - 1); }

static hs_self_state **reader_state(hs_rawlog_reader *rd, int64_t tid) {
    if ((rd->count + 1) * 2 > rd->cap) {
        uint64_t nc = rd->cap ? rd->cap * 2 : 16;
        reader_slot *grown = calloc(nc, sizeof *grown);
        if (!grown) {
            hs_self_state_free(rd->spare); /* what it held belongs to no thread in particular */
            rd->spare = NULL;
            return &rd->spare;
        }
        for (uint64_t i = 0; i < rd->cap; i++) {
            if (!rd->slots[i].used) continue;
            uint64_t k = reader_home(rd->slots[i].tid, nc);
            while (grown[k].used) k = (k + 1) & (nc - 1);
            grown[k] = rd->slots[i];
        }
        free(rd->slots);
        rd->slots = grown;
        rd->cap = nc;
    }
    uint64_t k = reader_home(tid, rd->cap);
    while (rd->slots[k].used && rd->slots[k].tid != tid) k = (k + 1) & (rd->cap - 1);
    if (!rd->slots[k].used) {
        rd->slots[k].used = 1;
        rd->slots[k].tid = tid;
        rd->count++;
    }
    return &rd->slots[k].state;
}

uint64_t hs_rawlog_decode(hs_rawlog_reader *rd, const unsigned char *data, uint64_t data_bytes,
                          const hs_rawlog_span_frame *frames, uint64_t nframes, const hs_clock_seg *clocks,
                          uint64_t nclocks, hs_rawlog_columns *out, uint64_t cap) {
    uint64_t k = 0, parents = 0, categories = 0, args = 0;
    uint64_t bitmap_bytes = (cap + 7) / 8;
    memset(out->parent_valid, 0, bitmap_bytes);
    memset(out->category_valid, 0, bitmap_bytes);
    memset(out->arg_valid, 0, bitmap_bytes);
    memset(out->error, 0, bitmap_bytes);
    hs_self_state *scratch = NULL; /* without a reader: each call on its own */
    for (uint64_t f = 0; f < nframes; f++) {
        const hs_rawlog_span_frame *fr = &frames[f];
        if (fr->offset > data_bytes || fr->slots > (data_bytes - fr->offset) / sizeof(hs_record)) break;
        const hs_record *recs = (const hs_record *)(const void *)(data + fr->offset);
        uint32_t nclk = (uint32_t)(fr->clocks < nclocks ? fr->clocks : nclocks);
        uint64_t seq = fr->base_seq, n = fr->slots;
        hs_self_state **state = rd ? reader_state(rd, fr->tid) : &scratch;
        const int64_t tid = fr->tid;
        const int32_t thread_index = (int32_t)fr->thread_index;
        /* the frame's waits: (id, ticks) pairs in the records' order */
        const unsigned char *waits = NULL;
        uint64_t nwaits = 0, w = 0;
        if (fr->nwaits && fr->waits_offset <= data_bytes && fr->nwaits <= (data_bytes - fr->waits_offset) / 16) {
            waits = data + fr->waits_offset;
            nwaits = fr->nwaits;
        }
        for (uint64_t i = 0; i < n && k < cap;) {
            hs_record r;
            memcpy(&r, &recs[i], sizeof r); /* the mapping's alignment is the file's: 8 */
            uint32_t flags = hs_rec_flags(&r);
            if (flags & HS_F_COUNTER) { /* a counter's value, not a span */
                i += 1;
                continue;
            }
            uint64_t dur, parent;
            uint32_t depth, pair;
            int has_parent;
            if (flags & HS_F_EXT) {
                if (i + 1 >= n) break; /* an extension always follows in the same frame */
                hs_record_ext x;
                memcpy(&x, &recs[i + 1], sizeof x);
                seq = x.seq;
                has_parent = x.parent_seq_plus1 != 0;
                parent = has_parent ? x.parent_seq_plus1 - 1 : 0;
                dur = x.dur;
                depth = x.depth;
                pair = x.pair;
                i += 2;
            } else {
                seq = hs_seq_extend(seq, hs_rec_seq32(&r));
                uint32_t pd = hs_rec_pdelta(&r);
                has_parent = pd != 0;
                parent = seq - pd;
                dur = hs_rec_dur(&r);
                depth = hs_rec_depth(&r);
                pair = hs_rec_pair(&r);
                i += 1;
            }
            const uint64_t byte = k >> 3;
            const uint8_t bit = (uint8_t)(1u << (k & 7));
            out->span_id[k] = seq;
            out->parent_id[k] = parent;
            if (has_parent) {
                out->parent_valid[byte] |= bit;
                parents++;
            }
            int32_t name = 0, cat = -1;
            if (pair < out->npairs) {
                name = out->pair_name[pair];
                cat = out->pair_cat[pair];
            }
            out->name[k] = name;
            out->category[k] = cat < 0 ? 0 : cat;
            if (cat >= 0) {
                out->category_valid[byte] |= bit;
                categories++;
            }
            int64_t st, en;
            if (nclk) {
                st = hs_clock_convert(clocks, nclk, r.start);
                en = hs_clock_convert(clocks, nclk, r.start + dur);
            } else {
                st = (int64_t)r.start;
                en = (int64_t)(r.start + dur);
            }
            out->start_ns[k] = st;
            out->end_ns[k] = en;
            out->duration_ns[k] = en - st;
            out->depth[k] = (int32_t)depth;
            out->thread_id[k] = tid;
            out->thread_name[k] = thread_index;
            if (flags & HS_F_ARG) {
                out->arg[k] = r.arg;
                out->arg_valid[byte] |= bit;
                args++;
            } else {
                out->arg[k] = 0;
            }
            if (flags & HS_F_ERROR) out->error[byte] |= bit;
            /* self and wait as hs_columns.c's self_times() gives them */
            uint64_t wait_ticks = 0;
            int in_task = 0;
            if (w < nwaits) {
                uint64_t pair_id;
                memcpy(&pair_id, waits + w * 16, 8);
                if (pair_id == seq) {
                    memcpy(&wait_ticks, waits + w * 16 + 8, 8);
                    in_task = 1;
                    w++;
                }
            }
            int64_t wait = 0;
            if (in_task && dur > 0) wait = (int64_t)((__int128)wait_ticks * (en - st) / (int64_t)dur);
            out->self_ns[k] = hs_self_step(state, seq, has_parent ? parent : 0, st, en, (flags & HS_F_OVERLAP) != 0,
                                           (flags & HS_F_TASKROOT) != 0, in_task, &wait);
            out->wait_ns[k] = wait;
            k++;
        }
    }
    hs_self_state_free(scratch);
    out->parents = parents;
    out->categories = categories;
    out->args = args;
    return k;
}
