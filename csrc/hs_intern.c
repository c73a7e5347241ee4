/* hs_intern: the intern tables, behind one mutex (only taken when a new combination
 * appears: at span-object creation or a cache miss on a new parent path). */
#include "hs_intern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

hs_pair *_Atomic hs_pair_chunks[HS_PAIR_MAX_CHUNKS];

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;

/* The mirror's operations (hs_intern.h): written once by hs_intern_set_ops, called under
 * intern_lock. */
static hs_intern_ops ops;

void hs_intern_set_ops(const hs_intern_ops *given) {
    static const hs_intern_ops none;
    ops = given ? *given : none;
}

/* strings: id 0 is "none" */
static char **str_text = NULL;
static uint32_t *str_len = NULL;
static uint32_t str_count = 1, str_cap = 0;
static uint32_t *str_slots = NULL; /* open addressing: string id, 0 = empty */
static uint32_t str_slots_cap = 0;

/* u64 key -> u32 value maps for paths and pairs */
typedef struct { uint64_t key; uint32_t val; uint32_t used; } kv_slot;
typedef struct { kv_slot *slots; uint32_t cap, count; } kv_map;
static kv_map path_map, pair_map;
static uint32_t pair_count = 0;

void hs_intern_lock(void) { pthread_mutex_lock(&intern_lock); }
void hs_intern_unlock(void) { pthread_mutex_unlock(&intern_lock); }

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int str_slots_grow(void) {
    uint32_t nc = str_slots_cap ? str_slots_cap * 2 : 1024;
    uint32_t *ns = calloc(nc, sizeof(uint32_t));
    if (!ns) return -1;
    for (uint32_t id = 1; id < str_count; id++) {
        uint64_t h = hash_bytes(str_text[id], str_len[id]);
        uint32_t i = (uint32_t)h & (nc - 1);
        while (ns[i]) i = (i + 1) & (nc - 1);
        ns[i] = id;
    }
    free(str_slots);
    str_slots = ns;
    str_slots_cap = nc;
    return 0;
}

static uint32_t intern_string_locked(const char *s, size_t len) {
    if (len > UINT32_MAX) return UINT32_MAX;
    if ((uint64_t)(str_count + 1) * 2 > str_slots_cap && str_slots_grow() < 0) return UINT32_MAX;
    uint64_t h = hash_bytes(s, len);
    uint32_t i = (uint32_t)h & (str_slots_cap - 1);
    while (str_slots[i]) {
        uint32_t id = str_slots[i];
        if (str_len[id] == len && memcmp(str_text[id], s, len) == 0) return id;
        i = (i + 1) & (str_slots_cap - 1);
    }
    if (str_count == UINT32_MAX - 1) return UINT32_MAX;
    if (str_count >= str_cap) {
        uint32_t nc = str_cap ? str_cap * 2 : 1024;
        char **nt = realloc(str_text, sizeof(char *) * nc);
        if (!nt) return UINT32_MAX;
        str_text = nt;
        uint32_t *nl = realloc(str_len, sizeof(uint32_t) * nc);
        if (!nl) return UINT32_MAX;
        str_len = nl;
        str_cap = nc;
        str_text[0] = NULL;
        str_len[0] = 0;
    }
    char *copy = malloc(len + 1);
    if (!copy) return UINT32_MAX;
    memcpy(copy, s, len);
    copy[len] = 0;
    uint32_t id = str_count++;
    str_text[id] = copy;
    str_len[id] = (uint32_t)len;
    str_slots[i] = id;
    if (ops.string) ops.string(id, copy, (uint32_t)len);
    return id;
}

uint32_t hs_intern_string(const char *s, size_t len) {
    pthread_mutex_lock(&intern_lock);
    uint32_t id = intern_string_locked(s, len);
    pthread_mutex_unlock(&intern_lock);
    return id;
}

static int kv_grow(kv_map *m) {
    uint32_t nc = m->cap ? m->cap * 2 : 256;
    kv_slot *ns = calloc(nc, sizeof(kv_slot));
    if (!ns) return -1;
    for (uint32_t j = 0; j < m->cap; j++) {
        if (!m->slots[j].used) continue;
        uint32_t i = (uint32_t)hash_u64(m->slots[j].key) & (nc - 1);
        while (ns[i].used) i = (i + 1) & (nc - 1);
        ns[i] = m->slots[j];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = nc;
    return 0;
}

/* Returns the slot for key (found or empty), NULL when out of memory. */
static kv_slot *kv_find(kv_map *m, uint64_t key) {
    if ((m->count + 1) * 2 > m->cap && kv_grow(m) < 0) return NULL;
    uint32_t i = (uint32_t)hash_u64(key) & (m->cap - 1);
    while (m->slots[i].used && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

uint32_t hs_intern_path(uint32_t parent_path, uint32_t category) {
    if (category == 0) return parent_path;
    if (parent_path == 0 || parent_path == category) return category;
    pthread_mutex_lock(&intern_lock);
    uint32_t out = UINT32_MAX;
    uint64_t key = ((uint64_t)parent_path << 32) | category;
    kv_slot *slot = kv_find(&path_map, key);
    size_t a = str_len[parent_path], b = str_len[category];
    if (slot && slot->used) {
        out = slot->val;
    } else if (slot && a > b && str_text[parent_path][a - b - 1] == '/' &&
               !memcmp(str_text[parent_path] + a - b, str_text[category], b)) {
        /* The category is the parent's own (its last part): recursion stays in one
         * category, "a/cat", instead of growing "a/cat/cat/cat" level by level. */
        out = parent_path;
        slot->key = key;
        slot->val = out;
        slot->used = 1;
        path_map.count++;
    } else if (slot) {
        char *buf = malloc(a + b + 1);
        if (buf) {
            memcpy(buf, str_text[parent_path], a);
            buf[a] = '/';
            memcpy(buf + a + 1, str_text[category], b);
            out = intern_string_locked(buf, a + b + 1);
            free(buf);
            if (out != UINT32_MAX) {
                /* kv_find may have been invalidated by nothing: the string table is separate */
                slot->key = key;
                slot->val = out;
                slot->used = 1;
                path_map.count++;
            }
        }
    }
    pthread_mutex_unlock(&intern_lock);
    return out;
}

uint32_t hs_intern_pair(uint32_t name, uint32_t path) {
    pthread_mutex_lock(&intern_lock);
    uint32_t out = UINT32_MAX;
    uint64_t key = ((uint64_t)name << 32) | path;
    kv_slot *slot = kv_find(&pair_map, key);
    if (slot && slot->used) {
        out = slot->val;
    } else if (slot && pair_count < HS_PAIR_CHUNK * HS_PAIR_MAX_CHUNKS) {
        uint32_t id = pair_count;
        uint32_t c = id >> HS_PAIR_CHUNK_BITS;
        hs_pair *chunk = atomic_load_explicit(&hs_pair_chunks[c], memory_order_relaxed);
        if (!chunk) {
            chunk = calloc(HS_PAIR_CHUNK, sizeof(hs_pair));
            if (chunk) atomic_store_explicit(&hs_pair_chunks[c], chunk, memory_order_release);
        }
        if (chunk) {
            chunk[id & (HS_PAIR_CHUNK - 1)].name = name;
            chunk[id & (HS_PAIR_CHUNK - 1)].path = path;
            pair_count++;
            if (ops.pair) ops.pair(id, name, path);
            slot->key = key;
            slot->val = id;
            slot->used = 1;
            pair_map.count++;
            out = id;
        }
    }
    pthread_mutex_unlock(&intern_lock);
    return out;
}

uint32_t hs_intern_pairs_snapshot(hs_pair **out) {
    pthread_mutex_lock(&intern_lock);
    uint32_t n = pair_count;
    hs_pair *p = malloc(sizeof(hs_pair) * (n ? n : 1));
    if (p) {
        for (uint32_t c = 0; c * HS_PAIR_CHUNK < n; c++) {
            uint32_t k = n - c * HS_PAIR_CHUNK;
            if (k > HS_PAIR_CHUNK) k = HS_PAIR_CHUNK;
            memcpy(p + c * HS_PAIR_CHUNK, hs_pair_chunks[c], sizeof(hs_pair) * k);
        }
    }
    pthread_mutex_unlock(&intern_lock);
    *out = p;
    return p ? n : 0;
}

int hs_intern_strings_snapshot(hs_string_snapshot *out) {
    pthread_mutex_lock(&intern_lock);
    uint32_t n = str_count;
    uint64_t total = 0;
    for (uint32_t i = 1; i < n; i++) total += str_len[i];
    out->blob = malloc(total ? total : 1);
    out->offsets = malloc(sizeof(uint64_t) * (n + 1));
    if (!out->blob || !out->offsets) {
        pthread_mutex_unlock(&intern_lock);
        free(out->blob);
        free(out->offsets);
        return -1;
    }
    uint64_t at = 0;
    out->offsets[0] = 0;
    for (uint32_t i = 1; i < n; i++) {
        out->offsets[i] = at;
        memcpy(out->blob + at, str_text[i], str_len[i]);
        at += str_len[i];
    }
    out->offsets[n] = at;
    out->offsets[0] = 0; /* id 0: the empty "none" string */
    out->count = n;
    pthread_mutex_unlock(&intern_lock);
    return 0;
}

void hs_string_snapshot_free(hs_string_snapshot *s) {
    free(s->blob);
    free(s->offsets);
    s->blob = NULL;
    s->offsets = NULL;
}

char *hs_intern_string_dup(uint32_t id, size_t *len) {
    char *out = NULL;
    pthread_mutex_lock(&intern_lock);
    if (id > 0 && id < str_count) {
        out = malloc(str_len[id] + 1);
        if (out) {
            memcpy(out, str_text[id], str_len[id] + 1);
            *len = str_len[id];
        }
    }
    pthread_mutex_unlock(&intern_lock);
    return out;
}

void hs_intern_mirror(void (*start)(void)) {
    pthread_mutex_lock(&intern_lock);
    start(); /* from here on, each new string and pair is mirrored as it is interned */
    for (uint32_t id = 1; id < str_count && ops.string; id++) ops.string(id, str_text[id], str_len[id]);
    for (uint32_t id = 0; id < pair_count; id++) {
        hs_pair *chunk = hs_pair_chunks[id >> HS_PAIR_CHUNK_BITS];
        if (ops.pair) ops.pair(id, chunk[id & (HS_PAIR_CHUNK - 1)].name, chunk[id & (HS_PAIR_CHUNK - 1)].path);
    }
    pthread_mutex_unlock(&intern_lock);
}
