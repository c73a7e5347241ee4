/* hs_columns: the columnar conversion. drain() takes every segment the drain side holds
 * (hs_drain.c) and turns them into Arrow-ready column buffers with one pass in C, on two
 * threads for large batches. Free of Python.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "hs_columns.h"

#include "hs_clock.h"
#include "hs_compiler.h"
#include "hs_drain.h"
#include "hs_intern.h"
#include "hs_selftime.h"

/* ---- column buffers -------------------------------------------------------------------- */

/* Columns are written once, then owned by Arrow until the table goes. Fresh pages cost a
 * fault and a zeroing each (as much as the conversion itself at 90 bytes a span), so large
 * buffers are whole 2 MiB mappings, and freed ones are kept in a small pool (128 MiB) for
 * the next drain. (Advising them as huge pages made the first drain twice as slow here:
 * the kernel compacts memory on the fault.) A 64-byte header before the data says how the
 * buffer was allocated. */

#define BUF_HEADER 64
#define BUF_LARGE (1u << 20)
#define BUF_HUGE (2u << 20)
#define BUF_POOL_MAX (128ull << 20)
#define BUF_POOL_SLOTS 64

typedef struct { uint64_t size; uint64_t kind; } buf_header;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool_ptr[BUF_POOL_SLOTS];
static uint64_t pool_size[BUF_POOL_SLOTS];
static uint32_t pool_count = 0;
static uint64_t pool_bytes = 0;

void *hs_buf_alloc(size_t bytes) {
    uint64_t total = (uint64_t)bytes + BUF_HEADER;
    char *base = NULL;
    buf_header h;
    if (total < BUF_LARGE) {
        total = (total + 63) & ~63ull;
        base = aligned_alloc(64, total);
        if (!base) return NULL;
        h.size = total;
        h.kind = 0;
    } else {
        total = (total + BUF_HUGE - 1) & ~(uint64_t)(BUF_HUGE - 1);
        /* A recorder's drains differ in size from one flush to the next (by a third and
         * more), so a pooled buffer of exactly the size was rarely there, and each miss
         * faulted in fresh pages (issue 21: ~13 faults a thousand spans, half the drain's
         * CPU in a busy recording). So: the smallest pooled buffer that holds it, up to twice
         * its size; and a fresh one is mapped half as large again, for a later, larger drain
         * (pages never written are never faulted in: the headroom costs address space, not
         * memory). The buffer keeps its own size in its header, and goes back to the pool
         * whole. */
        uint64_t most = 2 * total;
        uint32_t best = UINT32_MAX;
        pthread_mutex_lock(&pool_lock);
        for (uint32_t i = 0; i < pool_count; i++) {
            int fits = pool_size[i] >= total && pool_size[i] <= most;
            if (fits && (best == UINT32_MAX || pool_size[i] < pool_size[best])) best = i;
        }
        if (best != UINT32_MAX) {
            base = pool_ptr[best];
            total = pool_size[best];
            pool_bytes -= total;
            pool_ptr[best] = pool_ptr[--pool_count];
            pool_size[best] = pool_size[pool_count];
        } else {
            total = (total + total / 2 + BUF_HUGE - 1) & ~(uint64_t)(BUF_HUGE - 1);
        }
        pthread_mutex_unlock(&pool_lock);
        if (!base) {
            char *raw = mmap(NULL, total + BUF_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (raw == MAP_FAILED) return NULL;
            uintptr_t aligned = ((uintptr_t)raw + BUF_HUGE - 1) & ~(uintptr_t)(BUF_HUGE - 1);
            if (aligned > (uintptr_t)raw) munmap(raw, aligned - (uintptr_t)raw);
            uintptr_t end = (uintptr_t)raw + total + BUF_HUGE;
            if (end > aligned + total) munmap((void *)(aligned + total), end - (aligned + total));
            base = (char *)aligned;
        }
        h.size = total;
        h.kind = 1;
    }
    memcpy(base, &h, sizeof h);
    return base + BUF_HEADER;
}

void *hs_buf_calloc(size_t bytes) {
    void *p = hs_buf_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void hs_buf_free(void *p) {
    if (!p) return;
    char *base = (char *)p - BUF_HEADER;
    buf_header h;
    memcpy(&h, base, sizeof h);
    if (h.kind == 0) {
        free(base);
        return;
    }
    pthread_mutex_lock(&pool_lock);
    if (pool_count < BUF_POOL_SLOTS && pool_bytes + h.size <= BUF_POOL_MAX) {
        pool_ptr[pool_count] = base;
        pool_size[pool_count++] = h.size;
        pool_bytes += h.size;
        base = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    if (base) munmap(base, h.size);
}

/* ---- conversion ---------------------------------------------------------------------- */

static int build_dictionary(const hs_string_snapshot *strs, const uint32_t *ids, uint32_t n, char **blob,
                            int32_t **offsets) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += strs->offsets[ids[i] + 1] - strs->offsets[ids[i]];
    if (total > INT32_MAX) return -1;
    *blob = hs_buf_alloc(total ? total : 1);
    *offsets = hs_buf_alloc(sizeof(int32_t) * (n + 1));
    if (!*blob || !*offsets) return -1;
    int32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len = strs->offsets[ids[i] + 1] - strs->offsets[ids[i]];
        (*offsets)[i] = at;
        memcpy(*blob + at, strs->blob + strs->offsets[ids[i]], len);
        at += (int32_t)len;
    }
    (*offsets)[n] = at;
    return 0;
}

/* span_id: the span's sequence number in its thread's id range, itself unique (see
 * hs_registry.h); parent_id the parent's. */

typedef struct segment_plan {
    hs_segment *seg;
    uint64_t row; /* its first row in the batch */
    int32_t tix;  /* its thread's slot in the thread dictionary */
} segment_plan;

typedef struct convert_ctx {
    hs_columns *c;
    const segment_plan *plan;
    const hs_clock_seg *clk;
    uint32_t nclk;
    const int32_t *pair_name, *pair_cat;
    uint32_t npairs;
    int32_t rank;
    int64_t pid;
} convert_ctx;

/* The validity and error bitmaps of a part's first and last bytes, when another part
 * shares them (parts split at segment boundaries, not at multiples of 8 rows). */
typedef struct bitmap_edge {
    uint64_t byte;
    uint8_t parent, category, arg, error;
    int used;
} bitmap_edge;

typedef struct convert_part {
    const convert_ctx *ctx;
    uint64_t seg_from, seg_to;
    bitmap_edge edges[2];
} convert_part;

#define PARALLEL_MIN_ROWS 200000u

static void put_bits(hs_columns *c, convert_part *part, uint64_t byte, uint64_t first_row, uint64_t end_row,
                     uint8_t p, uint8_t cat, uint8_t a, uint8_t e) {
    /* A byte this part covers in full is its own; an edge byte is merged after the join. */
    if ((byte << 3) >= first_row && (byte << 3) + 8 <= end_row) {
        c->parent_valid[byte] = p;
        c->category_valid[byte] = cat;
        c->arg_valid[byte] = a;
        c->error[byte] = e;
        return;
    }
    bitmap_edge *edge = part->edges[0].used && part->edges[0].byte != byte ? &part->edges[1] : &part->edges[0];
    edge->byte = byte;
    edge->parent |= p;
    edge->category |= cat;
    edge->arg |= a;
    edge->error |= e;
    edge->used = 1;
}

static void merge_edges(hs_columns *c, const convert_part *part, uint64_t rows) {
    for (int i = 0; i < 2; i++) {
        const bitmap_edge *edge = &part->edges[i];
        if (!edge->used || (edge->byte << 3) >= rows) continue;
        c->parent_valid[edge->byte] |= edge->parent;
        c->category_valid[edge->byte] |= edge->category;
        c->arg_valid[edge->byte] |= edge->arg;
        c->error[edge->byte] |= edge->error;
    }
}

/* One pass over the part's segments, every column written in order. Validity bits gather
 * in a register and go out a byte at a time (a read-modify-write per row would chain on
 * one byte). The bitmaps were zeroed, so edge bytes only need OR-ing in afterwards. */
static void convert_range(convert_part *part) {
    const convert_ctx *x = part->ctx;
    hs_columns *c = x->c;
    if (part->seg_from >= part->seg_to) return;
    const uint64_t first_row = x->plan[part->seg_from].row;
    uint64_t end_row = first_row;
    for (uint64_t k = part->seg_from; k < part->seg_to; k++) end_row += x->plan[k].seg->nspans;
    uint64_t row = first_row;
    uint32_t pbits = 0, cbits = 0, abits = 0, ebits = 0;
    /* Columns in restrict locals: through `c` the compiler must assume each store may
     * change the pointers and reloads all fifteen every row. */
    uint64_t *restrict span_id = c->span_id, *restrict parent_id = c->parent_id;
    int32_t *restrict name_idx = c->name_idx, *restrict category_idx = c->category_idx;
    int64_t *restrict start_ns = c->start_ns, *restrict end_ns = c->end_ns, *restrict duration_ns = c->duration_ns;
    int64_t *restrict self_ns = c->self_ns, *restrict wait_ns = c->wait_ns;
    int32_t *restrict depth_col = c->depth, *restrict thread_idx = c->thread_idx;
    int64_t *restrict thread_id = c->thread_id, *restrict arg_col = c->arg;
    const int32_t *restrict pair_name = x->pair_name, *restrict pair_cat = x->pair_cat;
    const hs_clock_seg *clk = x->clk;
    const uint32_t nclk = x->nclk, npairs = x->npairs;
    for (uint64_t k = part->seg_from; k < part->seg_to; k++) {
        const hs_segment *s = x->plan[k].seg;
        const int32_t tix = x->plan[k].tix;
        const int64_t tid = s->info->tid;
        uint64_t seq = s->base_seq;
        for (uint64_t i = 0; i < s->nslots; row++) {
            const hs_record *r = &s->recs[i];
            uint32_t flags = hs_rec_flags(r), depth, pair;
            uint64_t dur, parent_plus1;
            if (HS_UNLIKELY(flags & HS_F_COUNTER)) { /* not a span (hs_counters.h): no row */
                i += 1;
                row--; /* the loop's increment */
                continue;
            }
            if (HS_LIKELY(!(flags & HS_F_EXT))) {
                seq = hs_seq_extend(seq, hs_rec_seq32(r));
                uint32_t pdelta = hs_rec_pdelta(r);
                parent_plus1 = pdelta ? seq - pdelta + 1 : 0;
                dur = hs_rec_dur(r);
                depth = hs_rec_depth(r);
                pair = hs_rec_pair(r);
                i += 1;
            } else {
                const hs_record_ext *e = (const hs_record_ext *)&s->recs[i + 1];
                seq = e->seq;
                parent_plus1 = e->parent_seq_plus1;
                dur = e->dur;
                depth = e->depth;
                pair = e->pair;
                i += 2;
            }
            if (HS_UNLIKELY(pair >= npairs)) pair = 0;
            uint32_t bit = (uint32_t)(row & 7);
            span_id[row] = seq;
            parent_id[row] = parent_plus1 ? parent_plus1 - 1 : 0;
            pbits |= (uint32_t)(parent_plus1 != 0) << bit;
            name_idx[row] = pair_name[pair];
            int32_t ci = pair_cat[pair];
            category_idx[row] = ci < 0 ? 0 : ci;
            cbits |= (uint32_t)(ci >= 0) << bit;
            int64_t st = hs_clock_convert(clk, nclk, r->start);
            int64_t en = hs_clock_convert(clk, nclk, r->start + dur);
            start_ns[row] = st;
            end_ns[row] = en;
            duration_ns[row] = en - st;
            /* for now only whether the span may overlap its siblings (and is a task's
             * root), and its duration in ticks: self_times() below turns them into the self
             * and wait times, thread by thread in close order */
            self_ns[row] = flags & (HS_F_OVERLAP | HS_F_TASKROOT);
            wait_ns[row] = (int64_t)dur;
            depth_col[row] = (int32_t)depth;
            thread_id[row] = tid;
            thread_idx[row] = tix;
            arg_col[row] = (flags & HS_F_ARG) ? r->arg : 0;
            abits |= (uint32_t)((flags & HS_F_ARG) != 0) << bit;
            ebits |= (uint32_t)((flags & HS_F_ERROR) != 0) << bit;
            if (bit == 7) {
                put_bits(c, part, row >> 3, first_row, end_row, (uint8_t)pbits, (uint8_t)cbits, (uint8_t)abits,
                         (uint8_t)ebits);
                pbits = cbits = abits = ebits = 0;
            }
        }
    }
    if (row & 7)
        put_bits(c, part, row >> 3, first_row, end_row, (uint8_t)pbits, (uint8_t)cbits, (uint8_t)abits,
                 (uint8_t)ebits);
}

/* Self times, after the conversion (which may split one thread's segments between two
 * threads): each thread's rows in the order its spans closed, with what its open spans'
 * children covered carried from drain to drain on the thread's info. Exact in the table's
 * own nanoseconds. */
static void self_times(hs_columns *c, const segment_plan *plan, uint64_t nsegs) {
    /* Waits exist only where asyncio tasks' steps were seen: else one load per batch. */
    const int waits = hs_wait_any();
    for (uint64_t k = 0; k < nsegs; k++) {
        hs_thread_info *info = plan[k].seg->info;
        uint64_t end_row = plan[k].row + plan[k].seg->nspans;
        for (uint64_t row = plan[k].row; row < end_row; row++) {
            uint64_t parent = (c->parent_valid[row >> 3] >> (row & 7)) & 1 ? c->parent_id[row] : 0;
            int flags = (int)c->self_ns[row];
            int64_t dur_ticks = c->wait_ns[row], wait = 0;
            uint64_t wait_ticks = 0;
            int in_task = waits && hs_wait_take(c->span_id[row], &wait_ticks);
            if (in_task && dur_ticks > 0) /* ticks to the span's own ns */
                wait = (int64_t)((__int128)wait_ticks * c->duration_ns[row] / dur_ticks);
            c->self_ns[row] = hs_self_step(&info->self_state, c->span_id[row], parent, c->start_ns[row],
                                           c->end_ns[row], (flags & HS_F_OVERLAP) != 0, (flags & HS_F_TASKROOT) != 0,
                                           in_task, &wait);
            c->wait_ns[row] = wait;
        }
    }
}

static void *convert_thread(void *arg) {
    convert_range(arg);
    return NULL;
}

/* A pair's dictionary indices (name, category path), first seen first. */
typedef struct dictionary_plan {
    hs_columns *c;
    const hs_pair *pairs;
    uint32_t npairs;
    int32_t *pair_name, *pair_cat, *str_name_idx, *str_cat_idx;
    uint32_t *name_ids, *cat_ids;
} dictionary_plan;

static void plan_pair(dictionary_plan *p, uint32_t pair) {
    if (pair >= p->npairs || p->pair_name[pair] != -2) return; /* out of range cannot happen */
    uint32_t nm = p->pairs[pair].name, pt = p->pairs[pair].path;
    if (p->str_name_idx[nm] < 0) {
        p->str_name_idx[nm] = (int32_t)p->c->n_names;
        p->name_ids[p->c->n_names++] = nm;
    }
    p->pair_name[pair] = p->str_name_idx[nm];
    if (pt && p->str_cat_idx[pt] < 0) {
        p->str_cat_idx[pt] = (int32_t)p->c->n_categories;
        p->cat_ids[p->c->n_categories++] = pt;
    }
    p->pair_cat[pair] = pt ? p->str_cat_idx[pt] : -1;
}

/* One collect at a time: a batch frees the infos of exited threads it took, which an
 * earlier batch still converting may point at, and thread slots are tagged per batch. */
static pthread_mutex_t collect_lock = PTHREAD_MUTEX_INITIALIZER;
static int drain_collect_locked(hs_columns *c, int32_t rank);
void hs_collect_lock(void) { pthread_mutex_lock(&collect_lock); }
void hs_collect_unlock(void) { pthread_mutex_unlock(&collect_lock); }

int hs_drain_collect(hs_columns *c, int32_t rank) {
    pthread_mutex_lock(&collect_lock);
    int rc = drain_collect_locked(c, rank);
    pthread_mutex_unlock(&collect_lock);
    return rc;
}

static int drain_collect_locked(hs_columns *c, int32_t rank) {
    memset(c, 0, sizeof(*c));
    hs_drain_batch batch;
    hs_drain_take(&batch);
    hs_segment *segs = batch.segs;
    uint64_t n = batch.spans;
    uint64_t *used = batch.used_pairs;
    uint32_t used_words = batch.used_words;
    int used_incomplete = batch.used_incomplete;

    int rc = -1;
    hs_clock_seg *clk = NULL;
    uint32_t nclk = hs_clock_snapshot(&clk);
    hs_pair *pairs = NULL;
    uint32_t npairs = hs_intern_pairs_snapshot(&pairs);
    hs_string_snapshot strs = {0};
    int32_t *pair_name = NULL, *pair_cat = NULL, *str_name_idx = NULL, *str_cat_idx = NULL;
    uint32_t *name_ids = NULL, *cat_ids = NULL;
    hs_thread_info **tinfos = NULL;
    segment_plan *plan = NULL;
    if (!nclk || !pairs || hs_intern_strings_snapshot(&strs) < 0) goto fail;

    c->n = n;
    size_t rows = n ? n : 1, bits = (rows + 7) / 8;
    c->span_id = hs_buf_alloc(rows * 8);
    c->parent_id = hs_buf_alloc(rows * 8);
    c->parent_valid = hs_buf_calloc(bits);
    c->name_idx = hs_buf_alloc(rows * 4);
    c->category_idx = hs_buf_alloc(rows * 4);
    c->category_valid = hs_buf_calloc(bits);
    c->start_ns = hs_buf_alloc(rows * 8);
    c->end_ns = hs_buf_alloc(rows * 8);
    c->duration_ns = hs_buf_alloc(rows * 8);
    c->self_ns = hs_buf_alloc(rows * 8);
    c->wait_ns = hs_buf_alloc(rows * 8);
    c->depth = hs_buf_alloc(rows * 4);
    c->thread_id = hs_buf_alloc(rows * 8);
    c->thread_idx = hs_buf_alloc(rows * 4);
    c->arg = hs_buf_alloc(rows * 8);
    c->arg_valid = hs_buf_calloc(bits);
    c->error = hs_buf_calloc(bits);
    /* Dictionaries hold only what this batch uses, in first-use order. */
    pair_name = malloc(sizeof(int32_t) * (npairs ? npairs : 1));
    pair_cat = malloc(sizeof(int32_t) * (npairs ? npairs : 1));
    str_name_idx = malloc(sizeof(int32_t) * strs.count);
    str_cat_idx = malloc(sizeof(int32_t) * strs.count);
    name_ids = malloc(sizeof(uint32_t) * strs.count);
    cat_ids = malloc(sizeof(uint32_t) * strs.count);
    if (!c->span_id || !c->parent_id || !c->parent_valid || !c->name_idx || !c->category_idx ||
        !c->category_valid || !c->start_ns || !c->end_ns || !c->duration_ns || !c->self_ns || !c->wait_ns || !c->depth || !c->thread_id ||
        !c->thread_idx || !c->arg || !c->arg_valid || !c->error || !pair_name || !pair_cat || !str_name_idx ||
        !str_cat_idx || !name_ids || !cat_ids)
        goto fail;
    for (uint32_t i = 0; i < npairs; i++) pair_name[i] = pair_cat[i] = -2; /* -2: not seen yet */
    for (uint32_t i = 0; i < strs.count; i++) str_name_idx[i] = str_cat_idx[i] = -1;

    uint32_t tcap = 16;
    tinfos = malloc(sizeof(*tinfos) * tcap);
    if (!tinfos) goto fail;

    /* Plan, in one cheap pass: each segment's first row and thread slot, and every pair's
     * dictionary indices (only what this batch uses, in first-use order). */
    uint64_t nsegs = 0;
    for (hs_segment *s = segs; s; s = s->next) nsegs++;
    plan = malloc(sizeof(*plan) * (nsegs ? nsegs : 1));
    if (!plan) goto fail;
    uint64_t row = 0, k = 0;
    /* A thread's slot is kept on its info, tagged with this batch: one look-up a segment,
     * however many threads (a batch after 20 K short threads has 20 K). Only drain()
     * (under its own lock) plans batches. */
    static uint64_t batch_gen = 0;
    uint64_t gen = ++batch_gen;
    for (hs_segment *s = segs; s; s = s->next, k++) {
        int32_t tix = s->info->batch_gen == gen ? s->info->batch_tix : -1;
        if (tix < 0) {
            if (c->n_threads == tcap) {
                tcap *= 2;
                hs_thread_info **nt = realloc(tinfos, sizeof(*tinfos) * tcap);
                if (!nt) goto fail;
                tinfos = nt;
            }
            tix = (int32_t)c->n_threads;
            tinfos[c->n_threads++] = s->info;
            s->info->batch_gen = gen;
            s->info->batch_tix = tix;
        }
        plan[k].seg = s;
        plan[k].row = row;
        plan[k].tix = tix;
        row += s->nspans;
    }
    /* Dictionaries: only the pairs these segments use (marked as the drain side walked
     * them), in pair order; if a mark was lost (the bitmap could not grow: out of memory),
     * by reading the records. */
    dictionary_plan dp = {c, pairs, npairs, pair_name, pair_cat, str_name_idx, str_cat_idx, name_ids, cat_ids};
    for (uint32_t w = 0; w < used_words; w++)
        for (uint64_t bits = used[w]; bits; bits &= bits - 1) plan_pair(&dp, w * 64 + (uint32_t)__builtin_ctzll(bits));
    if (used_incomplete) {
        for (hs_segment *s = segs; s; s = s->next)
            for (uint64_t i = 0; i < s->nslots;) {
                const hs_record *r = &s->recs[i];
                uint32_t pair = hs_rec_pair(r);
                if (hs_rec_flags(r) & HS_F_COUNTER) { /* not a span: not in the dictionaries */
                    i += 1;
                    continue;
                }
                if (hs_rec_flags(r) & HS_F_EXT) {
                    const hs_record_ext *x = (const hs_record_ext *)(const void *)&s->recs[i + 1];
                    pair = x->pair;
                    i += 2;
                } else {
                    i += 1;
                }
                plan_pair(&dp, pair);
            }
    }

    /* Convert: large batches in two halves on two threads (split at a segment boundary),
     * small ones here. */
    convert_ctx ctx = {c, plan, clk, nclk, pair_name, pair_cat, npairs, rank, (int64_t)getpid()};
    uint64_t split = nsegs;
    if (row >= PARALLEL_MIN_ROWS && nsegs >= 2) {
        split = 1;
        while (split < nsegs - 1 && plan[split].row < row / 2) split++;
    }
    convert_part second = {&ctx, split, nsegs, {{0}}};
    pthread_t helper;
    int threaded = split < nsegs && hs_thread_create_quiet(&helper, NULL, convert_thread, &second) == 0;
    convert_part first = {&ctx, 0, threaded ? split : nsegs, {{0}}};
    convert_range(&first);
    if (threaded) pthread_join(helper, NULL);
    merge_edges(c, &first, row);
    if (threaded) merge_edges(c, &second, row);
    c->n = row;
    self_times(c, plan, nsegs);
    if (build_dictionary(&strs, name_ids, c->n_names, &c->names_blob, &c->names_offsets) < 0) goto fail;
    if (build_dictionary(&strs, cat_ids, c->n_categories, &c->categories_blob, &c->categories_offsets) < 0)
        goto fail;

    /* thread rows: names and cumulative drops, under the registry lock */
    hs_registry_lock();
    c->threads = calloc(c->n_threads ? c->n_threads : 1, sizeof(hs_thread_row));
    uint32_t nall = 0, nexited = 0;
    for (hs_thread_info *i = hs_registry_infos(); i; i = i->next) nall++;
    hs_drop_row *exited = hs_registry_exited_drops(&nexited);
    c->all_threads = calloc(nall + nexited ? nall + nexited : 1, sizeof(hs_thread_row));
    if (c->threads && c->all_threads) {
        for (uint32_t k = 0; k < c->n_threads; k++) {
            c->threads[k].tid = tinfos[k]->tid;
            c->threads[k].name = strdup(tinfos[k]->name ? tinfos[k]->name : "");
        }
        for (hs_thread_info *i = hs_registry_infos(); i; i = i->next) {
            hs_thread_row *t = &c->all_threads[c->n_all_threads++];
            t->tid = i->tid;
            t->name = strdup(i->name ? i->name : "");
            t->dropped_cap = atomic_load(&i->dropped_cap);
            t->dropped = t->dropped_cap + atomic_load(&i->dropped_other);
        }
        for (uint32_t k = 0; k < nexited; k++) {
            hs_thread_row *t = &c->all_threads[c->n_all_threads++];
            t->tid = exited[k].tid;
            t->name = strdup(exited[k].name ? exited[k].name : "");
            t->dropped_cap = exited[k].cap;
            t->dropped = exited[k].cap + exited[k].other;
        }
    }
    hs_registry_unlock();
    c->id_base = hs_id_base();
    if (!c->threads || !c->all_threads) goto fail;
    rc = 0;
fail:
    if (rc < 0) {
        /* Out of memory while converting: what was taken is lost, so it is counted. */
        for (hs_segment *s = segs; s; s = s->next)
            atomic_fetch_add_explicit(&s->info->dropped_other, s->nspans, memory_order_relaxed);
    }
    hs_drain_release(&batch);
    free(clk);
    free(pairs);
    hs_string_snapshot_free(&strs);
    free(pair_name);
    free(pair_cat);
    free(str_name_idx);
    free(str_cat_idx);
    free(name_ids);
    free(cat_ids);
    free(tinfos);
    free(plan);
    free(used);
    if (rc < 0) hs_columns_free(c);
    return rc;
}

void hs_columns_free(hs_columns *c) {
    void *bufs[] = {c->span_id, c->parent_id, c->parent_valid, c->name_idx, c->category_idx, c->category_valid,
                    c->start_ns, c->end_ns, c->duration_ns, c->self_ns, c->wait_ns, c->depth, c->thread_id, c->thread_idx,
                    c->arg, c->arg_valid, c->error};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) hs_buf_free(bufs[i]);
    hs_buf_free(c->names_blob);
    hs_buf_free(c->names_offsets);
    hs_buf_free(c->categories_blob);
    hs_buf_free(c->categories_offsets);
    if (c->threads)
        for (uint32_t k = 0; k < c->n_threads; k++) free(c->threads[k].name);
    if (c->all_threads)
        for (uint32_t k = 0; k < c->n_all_threads; k++) free(c->all_threads[k].name);
    free(c->threads);
    free(c->all_threads);
    memset(c, 0, sizeof(*c));
}
