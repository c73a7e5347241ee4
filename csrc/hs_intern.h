/* hs_intern: names, categories and category paths interned to small integer ids.
 *
 * Free of Python.h. Strings get ids (0 = none); a category path "sync/compute" is the
 * string of (parent path, category); a pair (name, path) gets the id that records carry.
 * Interning happens when a span object is made or the first time a span nests under a
 * new parent path (both cached on the span site afterwards), never per recorded span.
 *
 * Pair -> path lookups are lock-free: pairs live in fixed chunks that never move, and a
 * pair id is published (release) only after its entry is written.
 */
#ifndef HS_INTERN_H
#define HS_INTERN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HS_PAIR_CHUNK_BITS 12
#define HS_PAIR_CHUNK (1u << HS_PAIR_CHUNK_BITS)
#define HS_PAIR_MAX_CHUNKS 4096u /* 16 M pairs */

typedef struct hs_pair {
    uint32_t name;
    uint32_t path;
} hs_pair;

extern hs_pair *_Atomic hs_pair_chunks[HS_PAIR_MAX_CHUNKS];

/* UINT32_MAX on failure (out of memory, table full). */
uint32_t hs_intern_string(const char *s, size_t len);
uint32_t hs_intern_path(uint32_t parent_path, uint32_t category);
uint32_t hs_intern_pair(uint32_t name, uint32_t path);

static inline uint32_t hs_pair_path(uint32_t pair) {
    hs_pair *chunk = atomic_load_explicit(&hs_pair_chunks[pair >> HS_PAIR_CHUNK_BITS], memory_order_acquire);
    return chunk[pair & (HS_PAIR_CHUNK - 1)].path;
}

/* Drain side: copies of the tables (caller frees with free()). */
uint32_t hs_intern_pairs_snapshot(hs_pair **out);
/* Strings: a snapshot of (offset, length) into one byte blob. */
typedef struct hs_string_snapshot {
    char *blob;
    uint64_t *offsets; /* count + 1 entries */
    uint32_t count;
} hs_string_snapshot;
int hs_intern_strings_snapshot(hs_string_snapshot *out);
void hs_string_snapshot_free(hs_string_snapshot *s);

/* A malloc'd copy of one string (NULL for id 0 or out of memory). */
char *hs_intern_string_dup(uint32_t id, size_t *len);

/* What the tables call up into: a mirror of them (the flight file, hs_flight.c), told of
 * each string and pair as it is interned, under the intern lock. One struct, installed
 * whole at init (the module's, before any thread records); a field left NULL does
 * nothing; the mirror itself ignores what comes while it is off. */
typedef struct hs_intern_ops {
    void (*string)(uint32_t id, const char *s, uint32_t len);
    void (*pair)(uint32_t id, uint32_t name, uint32_t path);
} hs_intern_ops;
/* Installs a copy of *ops (NULL: none). Once, before any thread records. */
void hs_intern_set_ops(const hs_intern_ops *ops);
/* Under the intern lock: start() (the flight file turns its mirror on), then every string
 * and pair so far goes through the ops; new ones follow as interned. */
void hs_intern_mirror(void (*start)(void));

/* Lock-order participation for fork (see hs_registry.c). */
void hs_intern_lock(void);
void hs_intern_unlock(void);

#ifdef __cplusplus
}
#endif
#endif
