/* A stand-in for libcuda.so: the few CUDA driver API functions hotspan's device spans call,
 * over device clocks the test moves by hand. The one thing these machines lack; the tests
 * build it (cc -shared) and point hotspan at it with HOTSPAN_LIBCUDA, and drive it through
 * the fake_* functions with ctypes (the same loaded library: one dlopen'ed path).
 *
 * Model: devices 0..n-1 (2 by default), each with a clock in ns that only fake_advance and
 * the synchronize calls move, started far from the host's (calibration must map them).
 * Work queued on a stream (fake_launch) runs in order; an event recorded on a stream
 * completes when its device's clock passes the point where the stream reached it;
 * cuEventElapsedTime refuses events not completed (CUDA_ERROR_NOT_READY), as CUDA does.
 * The current context is one per process (tests run on one thread): device d's context is
 * the pointer 0x1000 + d. fake_pending(1) keeps every event pending; fake_fail_next makes
 * the next call of a function return an error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef uintptr_t CUcontext;
typedef uintptr_t CUstream;
typedef struct fake_event *CUevent;
enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_NOT_INITIALIZED = 3, ERR_INVALID_CONTEXT = 201, ERR_INVALID_HANDLE = 400,
       ERR_NOT_READY = 600 };

#define MAX_DEVICES 4
#define MAX_STREAMS 256
#define CTX(d) ((CUcontext)(0x1000 + (d)))

struct fake_event {
    int device;
    int recorded;
    int64_t time; /* device ns at which its stream reaches it */
};

typedef struct {
    int device;
    CUstream handle;
    int64_t busy_until;
} fake_stream;

static int n_devices = 2;
static int initialised = 0;
static int64_t now_ns[MAX_DEVICES];
static fake_stream streams[MAX_STREAMS];
static int n_streams = 0;
static CUstream next_stream = 0x10000;
static int ctx_stack[16];
static int ctx_depth = 0; /* 0: no context current */
static int pending = 0;
static char fail_call[64];
static CUresult fail_code = 0;
static int64_t counters[8];
enum { EVENTS_CREATED, EVENTS_DESTROYED, RECORDS, QUERIES, EVENT_SYNCS, STREAM_SYNCS, CTX_SETS };
static const char *counter_names[] = {"events_created", "events_destroyed", "records", "queries", "event_syncs",
                                      "stream_syncs", "ctx_sets"};

static int failing(const char *call, CUresult *rc) {
    if (fail_code && strcmp(call, fail_call) == 0) {
        *rc = fail_code;
        fail_code = 0;
        return 1;
    }
    return 0;
}

/* fake_follow_host(1): the device clocks also run as the host's monotonic clock does (a real
 * GPU's clock runs while the host works: an event recorded on an idle stream gets a time
 * after the host recorded it); otherwise they move only by fake_advance. */
static int follow_host = 0;
static int64_t follow_t0, follow_base[MAX_DEVICES];

static int64_t host_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void tick(void) {
    if (!follow_host) return;
    int64_t elapsed = host_mono() - follow_t0;
    for (int d = 0; d < MAX_DEVICES; d++)
        if (now_ns[d] < follow_base[d] + elapsed) now_ns[d] = follow_base[d] + elapsed;
}

static int current_device(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : -1; }

/* The stream with this handle: one made by cuStreamCreate (its device), else the handle on
 * the current device (the default stream 0, or a handle the test names). */
static fake_stream *stream_of(CUstream handle) {
    int dev = current_device();
    for (int i = 0; i < n_streams; i++)
        if (streams[i].handle == handle && (handle >= 0x10000 || streams[i].device == dev)) return &streams[i];
    if (n_streams == MAX_STREAMS || dev < 0) return NULL;
    fake_stream *s = &streams[n_streams++];
    s->device = dev;
    s->handle = handle;
    s->busy_until = 0;
    return s;
}

/* ---- the test's controls ------------------------------------------------------------------ */

void fake_reset(int devices) {
    n_devices = devices;
    initialised = 0;
    for (int d = 0; d < MAX_DEVICES; d++) now_ns[d] = 5000000000ll + 4000000000ll * d;
    n_streams = 0;
    ctx_depth = 0;
    pending = 0;
    fail_code = 0;
    follow_host = 0;
    memset(counters, 0, sizeof counters);
}

void fake_follow_host(int on) {
    follow_host = on;
    follow_t0 = host_mono();
    memcpy(follow_base, now_ns, sizeof now_ns);
}

void fake_advance(int device, int64_t ns) { now_ns[device] += ns; }
int64_t fake_now(int device) { return now_ns[device]; }

/* Queue a kernel of ns device nanoseconds on a stream of a device. */
void fake_launch(int device, uint64_t handle, int64_t ns) {
    int saved = ctx_depth;
    ctx_stack[ctx_depth++] = device;
    fake_stream *s = stream_of(handle);
    ctx_depth = saved;
    if (!s) return;
    tick();
    int64_t from = s->busy_until > now_ns[device] ? s->busy_until : now_ns[device];
    s->busy_until = from + ns;
}

/* Make device the current context (as cudaSetDevice would); -1: none current. */
void fake_set_device(int device) {
    if (device < 0) ctx_depth = 0;
    else if (ctx_depth) ctx_stack[ctx_depth - 1] = device;
    else ctx_stack[ctx_depth++] = device;
}

void fake_pending(int on) { pending = on; }

void fake_fail_next(const char *call, int code) {
    strncpy(fail_call, call, sizeof fail_call - 1);
    fail_code = code;
}

/* The device time an event was recorded at, -1 if never recorded. */
int64_t fake_event_time(uintptr_t handle) {
    struct fake_event *e = (struct fake_event *)handle;
    return e->recorded ? e->time : -1;
}

int fake_event_device(uintptr_t handle) { return ((struct fake_event *)handle)->device; }

int64_t fake_counter(const char *name) {
    for (size_t i = 0; i < sizeof counter_names / sizeof counter_names[0]; i++)
        if (strcmp(name, counter_names[i]) == 0) return counters[i];
    return -1;
}

/* ---- the driver API ------------------------------------------------------------------------ */

CUresult cuInit(unsigned flags) {
    CUresult rc;
    if (failing("cuInit", &rc)) return rc;
    (void)flags;
    initialised = 1;
    return OK;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialised) return ERR_NOT_INITIALIZED;
    *count = n_devices;
    return OK;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= n_devices) return ERR_INVALID_VALUE;
    *dev = ordinal;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    if (dev < 0 || dev >= n_devices) return ERR_INVALID_VALUE;
    *ctx = CTX(dev);
    return OK;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    CUresult rc;
    if (failing("cuCtxGetCurrent", &rc)) return rc;
    *ctx = ctx_depth ? CTX(current_device()) : 0;
    return OK;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    counters[CTX_SETS]++;
    fake_set_device(ctx ? (int)(ctx - 0x1000) : -1);
    return OK;
}

CUresult cuCtxGetDevice(CUdevice *dev) {
    if (!ctx_depth) return ERR_INVALID_CONTEXT;
    *dev = current_device();
    return OK;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (ctx_depth == 16) return ERR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = (int)(ctx - 0x1000);
    return OK;
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
    if (!ctx_depth) return ERR_INVALID_CONTEXT;
    int d = ctx_stack[--ctx_depth];
    if (ctx) *ctx = CTX(d);
    return OK;
}

CUresult cuStreamCreate(CUstream *stream, unsigned flags) {
    (void)flags;
    int dev = current_device();
    if (dev < 0) return ERR_INVALID_CONTEXT;
    if (n_streams == MAX_STREAMS) return ERR_INVALID_VALUE;
    fake_stream *s = &streams[n_streams++];
    s->device = dev;
    s->handle = next_stream++;
    s->busy_until = 0;
    *stream = s->handle;
    return OK;
}

CUresult cuStreamSynchronize(CUstream stream) {
    CUresult rc;
    if (failing("cuStreamSynchronize", &rc)) return rc;
    fake_stream *s = stream_of(stream);
    if (!s) return ERR_INVALID_HANDLE;
    counters[STREAM_SYNCS]++;
    if (now_ns[s->device] < s->busy_until) now_ns[s->device] = s->busy_until;
    return OK;
}

CUresult cuEventCreate(CUevent *event, unsigned flags) {
    CUresult rc;
    if (failing("cuEventCreate", &rc)) return rc;
    (void)flags;
    if (current_device() < 0) return ERR_INVALID_CONTEXT;
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e) return 2;
    e->device = current_device();
    counters[EVENTS_CREATED]++;
    *event = e;
    return OK;
}

CUresult cuEventRecord(CUevent e, CUstream stream) {
    CUresult rc;
    if (failing("cuEventRecord", &rc)) return rc;
    fake_stream *s = stream_of(stream);
    if (!s) return ERR_INVALID_HANDLE;
    if (s->device != e->device) return ERR_INVALID_HANDLE; /* an event records in its own context */
    tick();
    counters[RECORDS]++;
    e->recorded = 1;
    e->time = s->busy_until > now_ns[s->device] ? s->busy_until : now_ns[s->device];
    s->busy_until = e->time;
    return OK;
}

static int completed(struct fake_event *e) { return !e->recorded || now_ns[e->device] >= e->time; }

CUresult cuEventQuery(CUevent e) {
    CUresult rc;
    if (failing("cuEventQuery", &rc)) return rc;
    tick();
    counters[QUERIES]++;
    return !pending && completed(e) ? OK : ERR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
    CUresult rc;
    if (failing("cuEventSynchronize", &rc)) return rc;
    counters[EVENT_SYNCS]++;
    if (e->recorded && now_ns[e->device] < e->time) now_ns[e->device] = e->time;
    return OK;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    CUresult rc;
    if (failing("cuEventElapsedTime", &rc)) return rc;
    if (!start->recorded || !end->recorded) return ERR_INVALID_HANDLE;
    if (pending || !completed(start) || !completed(end)) return ERR_NOT_READY;
    *ms = (float)((double)(end->time - start->time) / 1e6); /* float32 milliseconds, as CUDA gives them */
    return OK;
}

CUresult cuEventDestroy_v2(CUevent e) {
    counters[EVENTS_DESTROYED]++;
    free(e);
    return OK;
}

/* Memory: device d has 16 GiB, of which fake_set_memory_used(d, bytes) are in use. Needs a
 * current context, as CUDA does. */
static int64_t memory_used[MAX_DEVICES];
void fake_set_memory_used(int device, int64_t bytes) {
    if (device >= 0 && device < MAX_DEVICES) memory_used[device] = bytes;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    if (!ctx_depth) return ERR_INVALID_CONTEXT;
    *total_b = (size_t)16 << 30;
    *free_b = *total_b - (size_t)memory_used[current_device()];
    return OK;
}

CUresult cuGetErrorName(CUresult rc, const char **name) {
    switch (rc) {
    case OK: *name = "CUDA_SUCCESS"; return OK;
    case ERR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case ERR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return OK;
    case ERR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case ERR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    case ERR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return OK;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
    default: *name = NULL; return ERR_INVALID_VALUE;
    }
}

__attribute__((constructor)) static void fake_init(void) { fake_reset(2); }
