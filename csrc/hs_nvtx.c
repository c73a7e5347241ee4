/* hs_nvtx: the NVTX passthrough, out of line (see hs_nvtx.h).
 *
 * NVTX3 is header-only: its headers (csrc/third_party/nvtx3, vendored from the
 * nvidia-nvtx wheel, Apache-2.0 WITH LLVM-exception, licence beside them) put the loader
 * in this file. With no tool attached (no NVTX_INJECTION64_PATH, no Nsight), every NVTX
 * call is a load of a null function pointer and a return; under `nsys profile` the tool's
 * injection library receives the ranges.
 *
 * Ids: the NVTX category of a span is its category path's interned string id (0, NVTX's
 * "no category", for a span under no category), named once with the path's text; the
 * message is the name registered once as an NVTX string handle. Both kept per string id in
 * chunks that never move, published with release stores, so the per-span lookup takes no
 * lock; the registration itself (once per string) takes one.
 */
#include "hs_nvtx.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hs_intern.h"
#include "hs_recorder.h"

/* Their warnings are theirs (-Wall -Wextra stay on for ours). */
#define NVTX_AS_SYSTEM_HEADER
#include "third_party/nvtx3/nvToolsExt.h"


enum { NAME_DONE = 1, CATEGORY_DONE = 2 };

typedef struct {
    nvtxStringHandle_t handle; /* NULL: the tool registers no strings: send text */
    char *text;                /* the name, kept while the process lives */
    _Atomic uint32_t state;    /* NAME_DONE | CATEGORY_DONE, released after the fields */
} nvtx_entry;

#define CHUNK_BITS 12
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096u /* 16 M strings; beyond, spans go without a message or category */

static nvtx_entry *_Atomic chunks[MAX_CHUNKS];
static nvtxDomainHandle_t _Atomic domain = NULL;
static pthread_mutex_t nvtx_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork() (hs_fork.c): a child forked while another thread registered a string would find
 * the lock held. */
void hs_nvtx_fork_prepare(void) { pthread_mutex_lock(&nvtx_lock); }
void hs_nvtx_fork_release(void) { pthread_mutex_unlock(&nvtx_lock); }

/* The entry of a string id, made under the lock when create; NULL past the table or out of
 * memory. */
static nvtx_entry *entry_of(uint32_t id, int create) {
    uint32_t c = id >> CHUNK_BITS;
    if (c >= MAX_CHUNKS) return NULL;
    nvtx_entry *chunk = atomic_load_explicit(&chunks[c], memory_order_acquire);
    if (!chunk && create) {
        chunk = calloc(CHUNK, sizeof(nvtx_entry));
        if (!chunk) return NULL;
        atomic_store_explicit(&chunks[c], chunk, memory_order_release);
    }
    return chunk ? &chunk[id & (CHUNK - 1)] : NULL;
}

/* Register what string id needs (its name handle, its category's name), once. */
static nvtx_entry *ensure(uint32_t id, uint32_t what) {
    nvtx_entry *e = entry_of(id, 0);
    if (e && (atomic_load_explicit(&e->state, memory_order_acquire) & what) == what) return e;
    nvtxDomainHandle_t dom = atomic_load_explicit(&domain, memory_order_acquire);
    pthread_mutex_lock(&nvtx_lock);
    e = entry_of(id, 1);
    uint32_t state = e ? atomic_load_explicit(&e->state, memory_order_relaxed) : 0;
    if (e && (state & what) != what) {
        size_t len = 0;
        char *text = hs_intern_string_dup(id, &len);
        if (text) {
            if ((what & NAME_DONE) && !(state & NAME_DONE)) {
                e->text = text;
                e->handle = nvtxDomainRegisterStringA(dom, text);
                state |= NAME_DONE;
                text = NULL; /* kept */
            }
            if ((what & CATEGORY_DONE) && !(state & CATEGORY_DONE)) {
                nvtxDomainNameCategoryA(dom, id, e->text ? e->text : text);
                state |= CATEGORY_DONE;
            }
            free(text);
            atomic_store_explicit(&e->state, state, memory_order_release);
        }
    }
    pthread_mutex_unlock(&nvtx_lock);
    return e && (state & NAME_DONE) ? e : NULL;
}

static inline hs_pair pair_of(uint32_t pair) {
    hs_pair *chunk = atomic_load_explicit(&hs_pair_chunks[pair >> HS_PAIR_CHUNK_BITS], memory_order_acquire);
    return chunk[pair & (HS_PAIR_CHUNK - 1)];
}

/* The attributes of a span or instant: normally two lock-free lookups, the registration
 * only for a pair interned while NVTX was being switched on. */
static void fill(nvtxEventAttributes_t *a, uint32_t pair, int64_t arg, uint32_t flags) {
    memset(a, 0, sizeof(*a));
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    hs_pair p = pair_of(pair);
    nvtx_entry *name = ensure(p.name, NAME_DONE);
    if (name && name->handle) {
        a->messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a->message.registered = name->handle;
    } else if (name) {
        a->messageType = NVTX_MESSAGE_TYPE_ASCII;
        a->message.ascii = name->text;
    }
    if (p.path && ensure(p.path, CATEGORY_DONE | NAME_DONE)) a->category = p.path;
    if (flags & HS_F_ARG) {
        a->payloadType = NVTX_PAYLOAD_TYPE_INT64;
        a->payload.llValue = arg;
    }
}

void hs_nvtx_enter(hs_frame *f) {
    nvtxEventAttributes_t a;
    fill(&a, f->pair, f->arg, f->flags);
    f->flags |= HS_FRAME_NVTX;
    nvtxDomainRangePushEx(atomic_load_explicit(&domain, memory_order_acquire), &a);
}

void hs_nvtx_pop(void) { nvtxDomainRangePop(atomic_load_explicit(&domain, memory_order_acquire)); }

void hs_nvtx_mark(uint32_t pair, int64_t arg, uint32_t flags) {
    nvtxEventAttributes_t a;
    fill(&a, pair, arg, flags);
    nvtxDomainMarkEx(atomic_load_explicit(&domain, memory_order_acquire), &a);
}

void hs_nvtx_pair_seen(uint32_t pair) {
    hs_pair p = pair_of(pair);
    ensure(p.name, NAME_DONE);
    if (p.path) ensure(p.path, CATEGORY_DONE | NAME_DONE);
}

int hs_nvtx_set(int on) {
    if (!on) {
        atomic_store(&hs_nvtx_on, 0);
        return 0;
    }
    pthread_mutex_lock(&nvtx_lock);
    if (!atomic_load(&domain)) {
        /* The first NVTX call: NVTX's loader looks for the tool's injection library here,
         * at configure time, not in a span. */
        atomic_store(&domain, nvtxDomainCreateA("hotspan"));
    }
    pthread_mutex_unlock(&nvtx_lock);
    /* Every pair interned so far, so spans never register anything; pairs interned from
     * now on register when they are interned (hs_nvtx_pair_seen). */
    hs_pair *pairs = NULL;
    uint32_t n = hs_intern_pairs_snapshot(&pairs);
    if (!pairs) return -1;
    for (uint32_t i = 0; i < n; i++) {
        if (pairs[i].name) ensure(pairs[i].name, NAME_DONE);
        if (pairs[i].path) ensure(pairs[i].path, CATEGORY_DONE | NAME_DONE);
    }
    free(pairs);
    atomic_store(&hs_nvtx_on, 1);
    return 0;
}

void hs_nvtx_init_from_env(void) {
    const char *v = getenv("HOTSPAN_NVTX");
    if (v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on") || !strcasecmp(v, "yes")))
        hs_nvtx_set(1);
}
