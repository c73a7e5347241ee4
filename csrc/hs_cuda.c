/* hs_cuda: device spans on CUDA through the driver API, a plug-in behind hs_device.h.
 *
 * libcuda.so.1 (or $HOTSPAN_LIBCUDA: the tests' stand-in) is dlopen'ed at the first device
 * span made; nothing is linked or needed at build time, and a machine without it refuses
 * device spans at creation with a RuntimeError naming CUDA.
 *
 * Enter records a start event on the span's stream (given with stream=, else torch's
 * current stream when torch is loaded, else the default stream) and keeps the pair open;
 * exit records the end event on the same stream and queues the pair on its stream's FIFO.
 * The drain (_cuda_resolve) takes, on each stream, the pairs whose end event has completed
 * (cuEventQuery; a pending one stops that stream's queue: the ones behind complete after
 * it), never waiting, and turns them into rows through the calibration: an event recorded
 * on a side stream of ours (idle: it waits for none of the program's work) and
 * synchronized, then the host clock read at once; a row's times are that host time plus
 * cuEventElapsedTime(calibration, event). The calibration is re-taken when older than
 * recalibrate_ns at a span's start while no device span of that device is open (nested
 * spans share one: they nest exactly). Events come from a pool per context and go back to
 * it when their pair is resolved: a warm process creates none, and pairs are pooled too.
 *
 * One mutex guards the bookkeeping: device spans may open on many threads, and the two
 * event records (a few hundred ns each in the driver, which locks too) dwarf an
 * uncontended lock. The plain span's hot path never comes here.
 */
#include "hs_cuda.h" /* Python.h first */

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs_clock.h"
#include "hs_counters.h"
#include "hs_device.h"
#include "hs_recorder.h"

/* ---- the driver API, as much of it as we use ------------------------------------------ */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_NOT_READY = 600 };
enum { CU_EVENT_DEFAULT = 0, CU_STREAM_NON_BLOCKING = 1 };

typedef struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*MemGetInfo)(size_t *, size_t *); /* optional: configure(counters=)'s samples */
} cu_api;
static cu_api cu;

/* Symbols by their exported names (the _v2 ones are what cuda.h's macros call). */
static const struct {
    const char *name;
    size_t offset;
    int optional;
} cu_symbols[] = {
#define SYM(field, name, optional) {name, offsetof(cu_api, field), optional}
    SYM(Init, "cuInit", 0),
    SYM(DeviceGetCount, "cuDeviceGetCount", 0),
    SYM(DeviceGet, "cuDeviceGet", 0),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
    SYM(CtxGetCurrent, "cuCtxGetCurrent", 0),
    SYM(CtxSetCurrent, "cuCtxSetCurrent", 0),
    SYM(CtxGetDevice, "cuCtxGetDevice", 0),
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", 0),
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", 0),
    SYM(StreamCreate, "cuStreamCreate", 0),
    SYM(StreamSynchronize, "cuStreamSynchronize", 0),
    SYM(EventCreate, "cuEventCreate", 0),
    SYM(EventRecord, "cuEventRecord", 0),
    SYM(EventQuery, "cuEventQuery", 0),
    SYM(EventSynchronize, "cuEventSynchronize", 0),
    SYM(EventElapsedTime, "cuEventElapsedTime", 0),
    SYM(EventDestroy, "cuEventDestroy_v2", 0),
    SYM(GetErrorName, "cuGetErrorName", 1),
    SYM(MemGetInfo, "cuMemGetInfo_v2", 1),
#undef SYM
};

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state = 0;      /* 0: not tried; 1: loaded and initialised; -1: failed */
static char load_error[512];    /* why not, when -1 */
static char loaded_path[512];
static void *lib = NULL;

/* One line naming the driver call and its CUresult: "cuEventRecord failed: CUDA_ERROR_... (700)". */
static void set_driver_error(const char *call, CUresult rc) {
    const char *name = NULL;
    if (cu.GetErrorName && cu.GetErrorName(rc, &name) != CUDA_SUCCESS) name = NULL;
    PyErr_Format(PyExc_RuntimeError, "device span: %s failed: %s (CUresult %d)", call, name ? name : "CUDA error",
                 rc);
}

/* Loads and initialises the driver once; 0 or -1 (load_error says why). Under cuda_lock. */
static int load_driver(void) {
    if (load_state) return load_state > 0 ? 0 : -1;
    const char *path = getenv("HOTSPAN_LIBCUDA");
    if (!path || !*path) path = "libcuda.so.1";
    snprintf(loaded_path, sizeof loaded_path, "%s", path);
    load_state = -1;
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "%s could not be loaded (%s): no NVIDIA driver here", path,
                 e ? e : "?");
        return -1;
    }
    for (size_t i = 0; i < sizeof cu_symbols / sizeof cu_symbols[0]; i++) {
        void *f = dlsym(lib, cu_symbols[i].name);
        if (!f && !cu_symbols[i].optional) {
            snprintf(load_error, sizeof load_error, "%s has no %s: not a CUDA driver this build can use", path,
                     cu_symbols[i].name);
            return -1;
        }
        memcpy((char *)&cu + cu_symbols[i].offset, &f, sizeof f);
    }
    CUresult rc = cu.Init(0);
    int count = 0;
    if (rc == CUDA_SUCCESS) rc = cu.DeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count <= 0) {
        const char *name = NULL;
        if (rc != CUDA_SUCCESS && cu.GetErrorName) cu.GetErrorName(rc, &name);
        if (rc != CUDA_SUCCESS)
            snprintf(load_error, sizeof load_error, "cuInit/cuDeviceGetCount failed: %s (CUresult %d)",
                     name ? name : "CUDA error", rc);
        else
            snprintf(load_error, sizeof load_error, "the driver (%s) sees no CUDA device", path);
        return -1;
    }
    load_state = 1;
    return 0;
}

/* ---- bookkeeping ------------------------------------------------------------------------ */

static int64_t recalibrate_ns = 10000000000ll; /* _cuda_set_recalibrate_ns */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no syscall */
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

typedef struct event_pool {
    CUevent *events;
    size_t n, cap;
} event_pool;

typedef struct calibration {
    CUevent event;
    uint64_t ticks;   /* the core's raw ticks read right after it completed */
    int64_t mono;     /* when it was taken (host monotonic ns) */
    int64_t host_ns;  /* ticks on the table's clock; converted at the first drain that needs it */
    int host_valid;
    uint32_t refs;    /* pairs using it, plus 1 while it is its device's current one */
    struct device_state *dev;
} calibration;

typedef struct device_state {
    CUcontext ctx;
    int ordinal;
    CUstream side; /* ours, for the calibration */
    calibration *cal;
    uint32_t open; /* device spans of this context open now */
    event_pool pool;
} device_state;

typedef struct pair {
    struct pair *prev, *next; /* the open list, then the stream's FIFO (next only), then the free list */
    uint64_t host_id;
    uint32_t depth, pair;
    int64_t arg;
    int has_arg, error;
    CUevent start, end;
    CUstream stream;
    uint64_t stream_id;
    device_state *dev;
    calibration *cal;
} pair;

typedef struct stream_queue {
    device_state *dev;
    CUstream stream;
    uint64_t stream_id;
    pair *head, *tail;
    int64_t last_start, last_end; /* the last row resolved on it (0, 0: none) */
    int has_last;
} stream_queue;

#define MAX_DEVICES 64
static device_state *devices[MAX_DEVICES];
/* the counter pair of each device ordinal's memory in use (hs_cuda_memory_sample; 0: not
 * interned yet) */
static _Atomic uint32_t memory_pairs[MAX_DEVICES];
static int n_devices = 0;
static stream_queue **queues = NULL;
static size_t n_queues = 0, cap_queues = 0;
static pair *open_pairs = NULL; /* doubly linked: device spans open now, newest first */
static pair *free_pairs = NULL;
static uint64_t events_created = 0, pairs_created = 0;
static int used = 0; /* a device span was entered: drains ask for rows */

/* Pairs come in blocks that are never freed: a warm process allocates none. */
static pair *pair_get(void) {
    if (!free_pairs) {
        enum { BLOCK = 64 };
        pair *block = calloc(BLOCK, sizeof(pair));
        if (!block) return NULL;
        for (int i = 0; i < BLOCK; i++) {
            block[i].next = free_pairs;
            free_pairs = &block[i];
        }
        pairs_created += BLOCK;
    }
    pair *p = free_pairs;
    free_pairs = p->next;
    memset(p, 0, sizeof *p);
    return p;
}

static void pair_put(pair *p) {
    p->next = free_pairs;
    free_pairs = p;
}

/* An event of the device's pool, or a new one (the context current). NULL with *rc set. */
static CUevent event_get(device_state *d, CUresult *rc) {
    if (d->pool.n) return d->pool.events[--d->pool.n];
    CUevent e = NULL;
    *rc = cu.EventCreate(&e, CU_EVENT_DEFAULT);
    if (*rc != CUDA_SUCCESS) return NULL;
    events_created++;
    return e;
}

static void event_put(device_state *d, CUevent e) {
    if (!e) return;
    if (d->pool.n == d->pool.cap) {
        size_t cap = d->pool.cap ? 2 * d->pool.cap : 64;
        CUevent *grown = realloc(d->pool.events, cap * sizeof(CUevent));
        if (!grown) { /* keep going without it rather than fail a span */
            cu.EventDestroy(e);
            return;
        }
        d->pool.events = grown;
        d->pool.cap = cap;
    }
    d->pool.events[d->pool.n++] = e;
}

static void cal_release(calibration *c) {
    if (c && --c->refs == 0) {
        event_put(c->dev, c->event);
        free(c);
    }
}

/* The state of the current context (made current first if none is: device 0's primary
 * context, what the runtime would pick). NULL with *rc / *call set. */
static device_state *current_device(CUresult *rc, const char **call) {
    CUcontext ctx = NULL;
    if ((*rc = cu.CtxGetCurrent(&ctx)) != CUDA_SUCCESS) {
        *call = "cuCtxGetCurrent";
        return NULL;
    }
    if (!ctx) {
        CUdevice dev0;
        if ((*rc = cu.DeviceGet(&dev0, 0)) != CUDA_SUCCESS) {
            *call = "cuDeviceGet";
            return NULL;
        }
        if ((*rc = cu.DevicePrimaryCtxRetain(&ctx, dev0)) != CUDA_SUCCESS) {
            *call = "cuDevicePrimaryCtxRetain";
            return NULL;
        }
        if ((*rc = cu.CtxSetCurrent(ctx)) != CUDA_SUCCESS) {
            *call = "cuCtxSetCurrent";
            return NULL;
        }
    }
    for (int i = 0; i < n_devices; i++)
        if (devices[i]->ctx == ctx) return devices[i];
    CUdevice ordinal;
    if ((*rc = cu.CtxGetDevice(&ordinal)) != CUDA_SUCCESS) {
        *call = "cuCtxGetDevice";
        return NULL;
    }
    if (n_devices == MAX_DEVICES) {
        *rc = 1;
        *call = "a 65th CUDA context";
        return NULL;
    }
    device_state *d = calloc(1, sizeof *d);
    if (!d) {
        *rc = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
        *call = "malloc";
        return NULL;
    }
    d->ctx = ctx;
    d->ordinal = ordinal;
    devices[n_devices++] = d;
    return d;
}

/* The device's calibration for a span starting now (re-taken when old and no span of the
 * device is open). NULL with *rc / *call set. */
static calibration *calibration_for(device_state *d, CUresult *rc, const char **call) {
    int64_t now = mono_ns();
    calibration *c = d->cal;
    if (c && (now - c->mono < recalibrate_ns || d->open)) return c;
    if (!d->side && (*rc = cu.StreamCreate(&d->side, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        d->side = NULL;
        *call = "cuStreamCreate";
        return NULL;
    }
    calibration *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
        *rc = 2;
        *call = "malloc";
        return NULL;
    }
    fresh->dev = d;
    fresh->event = event_get(d, rc);
    if (!fresh->event) {
        free(fresh);
        *call = "cuEventCreate";
        return NULL;
    }
    /* On our idle side stream the event completes at once: one round trip, no stall. */
    if ((*rc = cu.EventRecord(fresh->event, d->side)) != CUDA_SUCCESS ||
        (*rc = cu.StreamSynchronize(d->side)) != CUDA_SUCCESS) {
        *call = *rc == CUDA_SUCCESS ? "cuStreamSynchronize" : "cuEventRecord";
        event_put(d, fresh->event);
        free(fresh);
        return NULL;
    }
    fresh->ticks = hs_ticks();
    fresh->mono = now;
    fresh->refs = 1;
    d->cal = fresh;
    cal_release(c); /* the old one lives on while pairs use it */
    return fresh;
}

static stream_queue *queue_for(device_state *d, CUstream stream, uint64_t stream_id) {
    for (size_t i = 0; i < n_queues; i++)
        if (queues[i]->dev == d && queues[i]->stream == stream && queues[i]->stream_id == stream_id) return queues[i];
    if (n_queues == cap_queues) {
        size_t cap = cap_queues ? 2 * cap_queues : 8;
        stream_queue **grown = realloc(queues, cap * sizeof *grown);
        if (!grown) return NULL;
        queues = grown;
        cap_queues = cap;
    }
    stream_queue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->dev = d;
    q->stream = stream;
    q->stream_id = stream_id;
    queues[n_queues++] = q;
    return q;
}

/* ---- torch's current stream, without calling Python per span ----------------------------
 *
 * c10::cuda::getCurrentCUDAStream(DeviceIndex = -1) returns a CUDAStream by value: a
 * trivially copyable {DeviceType (int8), DeviceIndex (int8), StreamId (int64)}, returned in
 * two registers; CUDAStream::stream() const gives its cudaStream_t. Both are looked up in
 * libc10_cuda.so once torch has loaded it (RTLD_NOLOAD: never loaded by us). A torch
 * without CUDA has no libc10_cuda: its programs run on the default stream. Should the
 * symbols not be found (another ABI), the current stream is asked of torch in Python. */
typedef struct {
    int8_t type;
    int8_t index;
    int64_t id;
} c10_stream;
static c10_stream (*torch_current)(int8_t) = NULL;
static void *(*torch_stream_handle)(const c10_stream *) = NULL;
enum { TORCH_UNKNOWN, TORCH_ABSENT, TORCH_C, TORCH_CPU, TORCH_PYTHON };
static int torch_state = TORCH_UNKNOWN;

static void torch_probe(void) {
    /* Asked at each device span until torch is seen: the interned name keeps its hash, so
     * the lookup is a probe of sys.modules, not a string built and hashed each time. */
    static PyObject *torch_name = NULL;
    if (!torch_name && !(torch_name = PyUnicode_InternFromString("torch"))) {
        PyErr_Clear();
        return;
    }
    PyObject *mods = PyImport_GetModuleDict();
    PyObject *t = mods ? PyDict_GetItemWithError(mods, torch_name) : NULL; /* borrowed; no import */
    if (!t) PyErr_Clear();
    if (!t || t == Py_None) { /* None: imports of it are blocked */
        torch_state = TORCH_ABSENT; /* asked again at the next span: torch may be imported later */
        return;
    }
    void *h = dlopen("libc10_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        torch_state = TORCH_CPU;
        return;
    }
    torch_current = (c10_stream(*)(int8_t))dlsym(h, "_ZN3c104cuda20getCurrentCUDAStreamEa");
    torch_stream_handle = (void *(*)(const c10_stream *))dlsym(h, "_ZNK3c104cuda10CUDAStream6streamEv");
    torch_state = torch_current && torch_stream_handle ? TORCH_C : TORCH_PYTHON;
}

/* The current stream: torch's when torch is loaded, else the default one. -1 with an
 * exception set (the Python fallback failed). */
static int current_stream(CUstream *stream, uint64_t *stream_id) {
    if (torch_state == TORCH_UNKNOWN || torch_state == TORCH_ABSENT) torch_probe();
    if (torch_state == TORCH_C) {
        c10_stream s = torch_current(-1);
        *stream = (CUstream)torch_stream_handle(&s);
        *stream_id = (uint64_t)s.id;
        return 0;
    }
    if (torch_state == TORCH_PYTHON) {
        PyObject *tc = PyImport_ImportModule("torch.cuda");
        PyObject *r = tc ? PyObject_CallMethod(tc, "current_stream", NULL) : NULL;
        Py_XDECREF(tc);
        if (!r) return -1;
        PyObject *h = PyObject_GetAttrString(r, "cuda_stream"), *id = PyObject_GetAttrString(r, "stream_id");
        Py_DECREF(r);
        int ok = h && id;
        if (ok) {
            *stream = (CUstream)PyLong_AsVoidPtr(h);
            *stream_id = PyLong_AsUnsignedLongLongMask(id);
        }
        Py_XDECREF(h);
        Py_XDECREF(id);
        return ok && !PyErr_Occurred() ? 0 : -1;
    }
    *stream = NULL;
    *stream_id = 0;
    return 0;
}

/* ---- the plug-in ------------------------------------------------------------------------ */

int hs_cuda_available(const char *fn) {
    pthread_mutex_lock(&cuda_lock);
    int rc = load_driver();
    pthread_mutex_unlock(&cuda_lock);
    if (rc == 0) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s(device='cuda'): CUDA is not available: %s", fn, load_error);
    return -1;
}

int hs_cuda_start(const hs_stream_spec *spec, uint64_t host_id, uint32_t depth, uint32_t pair_id) {
    CUstream stream;
    uint64_t stream_id;
    if (spec->given) {
        stream = (CUstream)(uintptr_t)spec->handle;
        stream_id = spec->stream_id;
    } else if (current_stream(&stream, &stream_id) < 0) {
        return -1;
    }
    CUresult rc = CUDA_SUCCESS;
    const char *call = NULL;
    pthread_mutex_lock(&cuda_lock);
    used = 1;
    device_state *d = current_device(&rc, &call);
    calibration *c = d ? calibration_for(d, &rc, &call) : NULL;
    pair *p = c ? pair_get() : NULL;
    if (c && !p) {
        rc = 2;
        call = "malloc";
    }
    if (p && !(p->start = event_get(d, &rc))) {
        call = "cuEventCreate";
        pair_put(p);
        p = NULL;
    }
    if (p) {
        p->host_id = host_id;
        p->depth = depth;
        p->pair = pair_id;
        p->stream = stream;
        p->stream_id = stream_id;
        p->dev = d;
        p->cal = c;
        c->refs++;
        d->open++;
        /* Recorded under the lock, as the end is: a stream's pairs are queued in the order
         * their events are recorded, which is the order it completes them. */
        rc = cu.EventRecord(p->start, stream);
        if (rc != CUDA_SUCCESS) {
            call = "cuEventRecord";
            d->open--;
            cal_release(c);
            event_put(d, p->start);
            pair_put(p);
            p = NULL;
        } else {
            p->prev = NULL;
            p->next = open_pairs;
            if (open_pairs) open_pairs->prev = p;
            open_pairs = p;
        }
    }
    pthread_mutex_unlock(&cuda_lock);
    if (p) return 0;
    set_driver_error(call, rc);
    return -1;
}

int hs_cuda_stop(uint64_t host_id, int64_t arg, int has_arg, int error) {
    CUresult rc = CUDA_SUCCESS;
    const char *call = NULL;
    pthread_mutex_lock(&cuda_lock);
    pair *p = open_pairs;
    while (p && p->host_id != host_id) p = p->next;
    if (!p) { /* opened before a fork or a reset: nothing of it here */
        pthread_mutex_unlock(&cuda_lock);
        return 0;
    }
    if (p->prev) p->prev->next = p->next;
    else open_pairs = p->next;
    if (p->next) p->next->prev = p->prev;
    device_state *d = p->dev;
    d->open--;
    p->arg = arg;
    p->has_arg = has_arg;
    p->error = error;
    stream_queue *q = NULL;
    if (!(p->end = event_get(d, &rc))) {
        call = "cuEventCreate";
    } else if ((rc = cu.EventRecord(p->end, p->stream)) != CUDA_SUCCESS) {
        call = "cuEventRecord";
    } else if (!(q = queue_for(d, p->stream, p->stream_id))) {
        rc = 2;
        call = "malloc";
    }
    if (q) {
        p->next = NULL;
        if (q->tail) q->tail->next = p;
        else q->head = p;
        q->tail = p;
    } else { /* the pair is dropped; the span closes as an error */
        event_put(d, p->start);
        event_put(d, p->end);
        cal_release(p->cal);
        pair_put(p);
    }
    pthread_mutex_unlock(&cuda_lock);
    if (q) return 0;
    set_driver_error(call, rc);
    return -1;
}

/* ---- drain side (module functions) --------------------------------------------------------- */

static int64_t cal_host(calibration *c, const hs_clock_seg *segs, uint32_t nsegs) {
    if (!c->host_valid) { /* the map converts a tick to the same ns ever after */
        c->host_ns = hs_clock_convert(segs, nsegs, c->ticks);
        c->host_valid = 1;
    }
    return c->host_ns;
}

static int64_t ms_to_ns(float ms) {
    double ns = (double)ms * 1e6;
    return (int64_t)(ns < 0 ? ns - 0.5 : ns + 0.5);
}

/* _cuda_resolve() -> [(host_id, depth, pair, device, stream_id, start_ns, end_ns, arg or
 * None, error), ...]: the pairs completed on the device, on the host clock of the drain;
 * their events go back to the pool. Never waits. */
static PyObject *py_cuda_resolve(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    PyObject *out = PyList_New(0);
    if (!out || !used) return out;
    hs_clock_update(0);
    hs_clock_seg *segs = NULL;
    uint32_t nsegs = hs_clock_snapshot(&segs);
    if (!nsegs) {
        free(segs);
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    CUresult bad = CUDA_SUCCESS;
    const char *bad_call = NULL;
    pthread_mutex_lock(&cuda_lock);
    for (size_t i = 0; i < n_queues && !bad_call; i++) {
        stream_queue *q = queues[i];
        if (!q->head) continue;
        CUcontext prev = NULL;
        int pushed = cu.CtxPushCurrent(q->dev->ctx) == CUDA_SUCCESS; /* the drain may run on any thread */
        while (q->head) {
            pair *p = q->head;
            CUresult rc = cu.EventQuery(p->end);
            if (rc == CUDA_ERROR_NOT_READY) break; /* the ones behind it complete after it */
            float ms_start = 0, ms_end = 0;
            if (rc == CUDA_SUCCESS && (rc = cu.EventElapsedTime(&ms_start, p->cal->event, p->start)) != CUDA_SUCCESS)
                bad_call = "cuEventElapsedTime";
            else if (rc == CUDA_SUCCESS && (rc = cu.EventElapsedTime(&ms_end, p->cal->event, p->end)) != CUDA_SUCCESS)
                bad_call = "cuEventElapsedTime";
            else if (rc != CUDA_SUCCESS)
                bad_call = "cuEventQuery";
            q->head = p->next;
            if (!q->head) q->tail = NULL;
            if (!bad_call) {
                int64_t base = cal_host(p->cal, segs, nsegs);
                int64_t start = base + ms_to_ns(ms_start), end = base + ms_to_ns(ms_end);
                if (end < start) end = start;
                /* A calibration change, not the device, made them overlap. */
                if (q->has_last && q->last_start < start && start < q->last_end && q->last_end < end)
                    start = q->last_end;
                q->last_start = start;
                q->last_end = end;
                q->has_last = 1;
                PyObject *row = Py_BuildValue("(KIIiKLLNO)", (unsigned long long)p->host_id, p->depth, p->pair,
                                              p->dev->ordinal, (unsigned long long)p->stream_id, (long long)start,
                                              (long long)end,
                                              p->has_arg ? PyLong_FromLongLong(p->arg) : Py_NewRef(Py_None),
                                              p->error ? Py_True : Py_False);
                if (!row || PyList_Append(out, row) < 0) bad_call = "";
                Py_XDECREF(row);
            } else {
                bad = rc;
            }
            event_put(p->dev, p->start);
            event_put(p->dev, p->end);
            cal_release(p->cal);
            pair_put(p);
            if (bad_call) break;
        }
        if (pushed) cu.CtxPopCurrent(&prev);
    }
    pthread_mutex_unlock(&cuda_lock);
    free(segs);
    if (bad_call) {
        if (*bad_call) set_driver_error(bad_call, bad); /* else: Python's own error is set */
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* _cuda_synchronize(): waits for the last pair queued on each stream (drain(wait_device=
 * True)): once per stream with pending pairs, nothing else. */
static PyObject *py_cuda_synchronize(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    if (!used) Py_RETURN_NONE;
    pthread_mutex_lock(&cuda_lock);
    size_t n = 0;
    struct { CUcontext ctx; CUevent ev; } *waits = n_queues ? malloc(n_queues * sizeof *waits) : NULL;
    for (size_t i = 0; waits && i < n_queues; i++)
        if (queues[i]->tail) {
            waits[n].ctx = queues[i]->dev->ctx;
            waits[n++].ev = queues[i]->tail->end;
        }
    pthread_mutex_unlock(&cuda_lock);
    CUresult rc = CUDA_SUCCESS;
    /* Waited for without the lock and without the GIL: spans open and close on other
     * threads meanwhile (a thread holding the GIL may wait for the lock: holding it here
     * while taking the GIL back would deadlock). Events are never destroyed, so one handed
     * back to the pool and recorded again meanwhile only makes this wait a little longer. */
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        CUcontext prev;
        int pushed = cu.CtxPushCurrent(waits[i].ctx) == CUDA_SUCCESS;
        rc = cu.EventSynchronize(waits[i].ev);
        if (pushed) cu.CtxPopCurrent(&prev);
    }
    Py_END_ALLOW_THREADS
    free(waits);
    if (rc != CUDA_SUCCESS) {
        set_driver_error("cuEventSynchronize", rc);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Forget every pair and calibration (under cuda_lock). driver: their events go back to
 * the pools; else (a forked child: the parent's events, contexts and driver state are not
 * its own) no driver call is made and the driver is loaded afresh at the next device span. */
static void forget(int driver) {
    for (pair *p = open_pairs; p;) {
        pair *next = p->next;
        if (driver) event_put(p->dev, p->start);
        pair_put(p);
        p = next;
    }
    open_pairs = NULL;
    for (size_t i = 0; i < n_queues; i++) {
        for (pair *p = queues[i]->head; p;) {
            pair *next = p->next;
            if (driver) {
                event_put(p->dev, p->start);
                event_put(p->dev, p->end);
            }
            pair_put(p);
            p = next;
        }
        free(queues[i]);
    }
    n_queues = 0;
    for (int i = 0; i < n_devices; i++) {
        device_state *d = devices[i];
        d->open = 0;
        if (d->cal && driver) event_put(d, d->cal->event);
        /* calibrations still named by forgotten pairs are forgotten with them */
        free(d->cal);
        d->cal = NULL;
        if (!driver) { /* the child's driver state is not the parent's: start over */
            free(d->pool.events);
            free(d);
        }
    }
    if (!driver) {
        n_devices = 0;
        for (int i = 0; i < MAX_DEVICES; i++) atomic_store(&memory_pairs[i], 0);
        load_state = 0;
        events_created = 0; /* of the driver loaded next */
    }
    used = 0;
}

/* _cuda_reset(driver): forget() (tests; driver=False also makes the next device span load
 * $HOTSPAN_LIBCUDA afresh). */
static PyObject *py_cuda_reset(PyObject *m, PyObject *arg) {
    (void)m;
    int driver = PyObject_IsTrue(arg);
    if (driver < 0) return NULL;
    pthread_mutex_lock(&cuda_lock);
    forget(driver);
    pthread_mutex_unlock(&cuda_lock);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_used(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyBool_FromLong(used);
}

/* _cuda_info() -> {"loaded": path or None, "used", "pending", "open", "events_created",
 * "pooled_events", "pairs_created", "torch"}: for tests and benchmarks. */
static PyObject *py_cuda_info(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    pthread_mutex_lock(&cuda_lock);
    unsigned long long pending = 0, open = 0, pooled = 0;
    for (size_t i = 0; i < n_queues; i++)
        for (pair *p = queues[i]->head; p; p = p->next) pending++;
    for (pair *p = open_pairs; p; p = p->next) open++;
    for (int i = 0; i < n_devices; i++) pooled += devices[i]->pool.n;
    static const char *torch_names[] = {"unknown", "absent", "c", "cpu", "python"};
    PyObject *r = Py_BuildValue("{sssOsKsKsKsKsKss}", "loaded", load_state > 0 ? loaded_path : NULL, "used",
                                used ? Py_True : Py_False, "pending", pending, "open", open, "events_created",
                                (unsigned long long)events_created, "pooled_events", pooled, "pairs_created",
                                (unsigned long long)pairs_created, "torch", torch_names[torch_state]);
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

/* _cuda_calibration(device) -> (event handle, host ns) of the device's calibration in
 * effect, or None before its first span. */
static PyObject *py_cuda_calibration(PyObject *m, PyObject *arg) {
    (void)m;
    long ordinal = PyLong_AsLong(arg);
    if (ordinal == -1 && PyErr_Occurred()) return NULL;
    hs_clock_update(0);
    hs_clock_seg *segs = NULL;
    uint32_t nsegs = hs_clock_snapshot(&segs);
    PyObject *r = NULL;
    pthread_mutex_lock(&cuda_lock);
    for (int i = 0; i < n_devices && !r; i++)
        if (devices[i]->ordinal == ordinal && devices[i]->cal && nsegs)
            r = Py_BuildValue("(KL)", (unsigned long long)(uintptr_t)devices[i]->cal->event,
                              (long long)cal_host(devices[i]->cal, segs, nsegs));
    pthread_mutex_unlock(&cuda_lock);
    free(segs);
    return r ? r : Py_NewRef(Py_None);
}

/* _cuda_set_recalibrate_ns(ns) -> the previous value. */
static PyObject *py_cuda_set_recalibrate_ns(PyObject *m, PyObject *arg) {
    (void)m;
    long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    pthread_mutex_lock(&cuda_lock);
    long long previous = recalibrate_ns;
    recalibrate_ns = ns;
    pthread_mutex_unlock(&cuda_lock);
    return PyLong_FromLongLong(previous);
}

static PyMethodDef cuda_methods[] = {
    {"_cuda_resolve", py_cuda_resolve, METH_NOARGS, NULL},
    {"_cuda_synchronize", py_cuda_synchronize, METH_NOARGS, NULL},
    {"_cuda_reset", py_cuda_reset, METH_O, NULL},
    {"_cuda_used", py_cuda_used, METH_NOARGS, NULL},
    {"_cuda_info", py_cuda_info, METH_NOARGS, NULL},
    {"_cuda_calibration", py_cuda_calibration, METH_O, NULL},
    {"_cuda_set_recalibrate_ns", py_cuda_set_recalibrate_ns, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

/* Taken across fork so the child never inherits it locked; the child forgets the parent's
 * pairs (its events are not the child's: CUDA contexts do not survive a fork). */
void hs_cuda_fork_prepare(void) { pthread_mutex_lock(&cuda_lock); }
void hs_cuda_fork_parent(void) { pthread_mutex_unlock(&cuda_lock); }
void hs_cuda_fork_child(void) {
    forget(0);
    pthread_mutex_unlock(&cuda_lock);
}

/* configure(counters=) (hs_counters_ops.device_memory, on the drain thread): the memory in use
 * (total - free, cuMemGetInfo: the whole device's) of each device hotspan's device spans
 * have a context for, as the counter "cuda:<ordinal> memory". Nothing before the driver is
 * loaded and a device span has run. */
int hs_cuda_memory_sample(hs_counter_sample *out, int max) {
    /* The names first, without cuda_lock (a leaf lock: interning takes the intern lock). */
    int missing[MAX_DEVICES], n_missing = 0, n = 0;
    pthread_mutex_lock(&cuda_lock);
    int usable = load_state > 0 && cu.MemGetInfo;
    for (int i = 0; usable && i < n_devices; i++) {
        int ordinal = devices[i]->ordinal;
        if (ordinal >= 0 && ordinal < MAX_DEVICES && !atomic_load(&memory_pairs[ordinal]))
            missing[n_missing++] = ordinal;
    }
    pthread_mutex_unlock(&cuda_lock);
    if (!usable) return 0;
    for (int j = 0; j < n_missing; j++) {
        char name[48];
        int len = snprintf(name, sizeof name, "cuda:%d memory", missing[j]);
        hs_site *site = hs_site_create(name, (size_t)len, NULL, 0);
        if (site) atomic_store(&memory_pairs[missing[j]], site->root_pair);
    }
    pthread_mutex_lock(&cuda_lock);
    for (int i = 0; load_state > 0 && i < n_devices && n < max; i++) {
        device_state *d = devices[i];
        if (d->ordinal < 0 || d->ordinal >= MAX_DEVICES) continue;
        uint32_t pair = atomic_load(&memory_pairs[d->ordinal]);
        if (!pair) continue;
        size_t free_b = 0, total_b = 0;
        CUcontext prev = NULL;
        if (cu.CtxPushCurrent(d->ctx) != CUDA_SUCCESS) continue;
        CUresult rc = cu.MemGetInfo(&free_b, &total_b);
        cu.CtxPopCurrent(&prev);
        if (rc != CUDA_SUCCESS || free_b > total_b) continue;
        out[n].ticks = hs_ticks();
        out[n].pair = pair;
        out[n].value = (double)(total_b - free_b);
        n++;
    }
    pthread_mutex_unlock(&cuda_lock);
    return n;
}

int hs_cuda_init(PyObject *module) { return PyModule_AddFunctions(module, cuda_methods); }
