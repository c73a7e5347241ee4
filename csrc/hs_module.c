/* hs_module: the cold Python glue of hotspan._native, the one compiled module that owns all
 * shared state (rings, registry, intern tables live in the C files beside it): configuration,
 * drain, clock, hooks, the live feed, the C API capsule and module init. The hot types a
 * span goes through (span, traced_function, begin/end/instant) are in hs_types.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hs_columns.h"
#include "hs_counters.h"
#include "hs_cuda.h"
#include "hs_drain.h"
#include "hs_flight.h"
#include "hs_fork.h"
#include "hs_live.h"
#include "hs_nvtx.h"
#include "hs_recorder.h"
#include "hs_signals.h"
#include "hs_tasks.h"
#include "hs_types.h"
#include "include/hotspan.h"

/* ---- switches and configuration ------------------------------------------------------- */

static PyObject *py_enable(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    atomic_store(&hs_enabled, 1);
    Py_RETURN_NONE;
}
static PyObject *py_disable(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    atomic_store(&hs_enabled, 0);
    Py_RETURN_NONE;
}
static PyObject *py_enabled(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyBool_FromLong(atomic_load(&hs_enabled));
}

static PyObject *py_set_thread_name(PyObject *m, PyObject *name) {
    (void)m;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "set_thread_name(): name must be a str, not %.100s", Py_TYPE(name)->tp_name);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(name);
    if (!s) return NULL;
    hs_tstate *t = hs_tstate_get();
    if (!t) return PyErr_NoMemory();
    hs_set_thread_name(t, s);
    Py_RETURN_NONE;
}

static PyObject *py_configure(PyObject *m, PyObject *args) {
    (void)m;
    long long capacity, memory_cap, interval_us;
    int drain_thread;
    if (!PyArg_ParseTuple(args, "LLLi:_configure", &capacity, &memory_cap, &interval_us, &drain_thread))
        return NULL;
    hs_configure(capacity, memory_cap, interval_us);
    if (drain_thread >= 0) hs_drain_set_paused(!drain_thread);
    Py_RETURN_NONE;
}

/* _flight_open(path, rank, version): the flight file (hs_flight.h); OSError naming the path. */
static PyObject *py_flight_open(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *path_obj;
    int rank;
    const char *version;
    if (!PyArg_ParseTuple(args, "O&is:_flight_open", PyUnicode_FSConverter, &path_obj, &rank, &version)) return NULL;
    const char *path = PyBytes_AS_STRING(path_obj);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hs_flight_open(path, rank, version);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        if (errno == EEXIST) {
            const char *cur = hs_flight_path();
            PyErr_Format(PyExc_ValueError, "configure(): the flight file is %s already; one a process", cur ? cur : "?");
        } else {
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        }
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_DECREF(path_obj);
    hs_drainer_ensure(); /* it keeps the file's "last seen" time */
    Py_RETURN_NONE;
}

/* record(dir)'s raw log (hs_rawlog.h): the drain thread appends the records to it. */
static PyObject *py_raw_open(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *path_obj;
    int rank;
    const char *version;
    if (!PyArg_ParseTuple(args, "O&is:_raw_open", PyUnicode_FSConverter, &path_obj, &rank, &version)) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hs_drain_raw_open(PyBytes_AS_STRING(path_obj), rank, version);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_DECREF(path_obj);
    Py_RETURN_NONE;
}

static PyObject *raw_stats_dict(const hs_rawlog_stats *st, uint64_t shed) {
    return Py_BuildValue("{sKsKsKsKsKsKsO}", "spans", (unsigned long long)st->spans, "bytes",
                         (unsigned long long)st->bytes, "frames", (unsigned long long)st->frames, "write_errors",
                         (unsigned long long)st->write_errors, "lost_spans", (unsigned long long)st->lost_spans,
                         "shed_from_memory", (unsigned long long)shed, "open", st->open ? Py_True : Py_False);
}

static PyObject *py_raw_close(PyObject *m, PyObject *a) {
    (void)m;
    (void)a;
    hs_rawlog_stats st;
    uint64_t shed = 0;
    Py_BEGIN_ALLOW_THREADS
    hs_drain_raw_close(&st, &shed);
    Py_END_ALLOW_THREADS
    return raw_stats_dict(&st, shed);
}

static PyObject *py_raw_stats(PyObject *m, PyObject *a) {
    (void)m;
    (void)a;
    hs_rawlog_stats st;
    uint64_t shed = 0;
    Py_BEGIN_ALLOW_THREADS
    hs_drain_raw_stats(&st, &shed);
    Py_END_ALLOW_THREADS
    return raw_stats_dict(&st, shed);
}

/* _raw_reader() -> a capsule holding what a raw log's reading carries from piece to piece
 * (each thread's self state: hs_rawlog_reader), freed with the capsule. */
#define RAW_READER_CAPSULE "hotspan._native.raw_reader"
static void raw_reader_destroy(PyObject *cap) {
    hs_rawlog_reader_free(PyCapsule_GetPointer(cap, RAW_READER_CAPSULE));
}

static PyObject *py_raw_reader(PyObject *m, PyObject *a) {
    (void)m;
    (void)a;
    hs_rawlog_reader *rd = hs_rawlog_reader_new();
    if (!rd) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(rd, RAW_READER_CAPSULE, raw_reader_destroy);
    if (!cap) hs_rawlog_reader_free(rd);
    return cap;
}

/* _raw_scan(data, at) -> (frames, stop_at, why): a raw log's whole frames from byte `at`, each
 * sum checked, as packed hs_rawlog_frame_info (6 little-endian uint64: header offset, kind,
 * payload bytes, a, b, c); why: 0 the end, 1 a frame cut short, 2 no frame, 3 a sum differs. */
static PyObject *py_raw_scan(PyObject *m, PyObject *args) {
    (void)m;
    Py_buffer data;
    unsigned long long at;
    if (!PyArg_ParseTuple(args, "y*K:_raw_scan", &data, &at)) return NULL;
    hs_rawlog_frame_info *info = NULL;
    uint64_t n = 0, stop_at = 0;
    int why = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hs_rawlog_scan(data.buf, (uint64_t)data.len, at, &info, &n, &stop_at, &why);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc < 0) return PyErr_NoMemory();
    PyObject *frames = PyBytes_FromStringAndSize((const char *)info, (Py_ssize_t)(n * sizeof *info));
    free(info);
    if (!frames) return NULL;
    return Py_BuildValue("(NKi)", frames, (unsigned long long)stop_at, why);
}

/* _raw_decode(reader, data, frames, clocks, pair_name, pair_cat) -> (columns, spans, parents,
 * categories, args): the spans of a raw log's records frames (packed hs_rawlog_span_frame)
 * with its clock segments (packed hs_clock_seg) and the dictionary indices of each pair's name
 * and category path (int32 by pair id; a category < 0: none), as the span table's columns,
 * cap = the frames' slots rows each: span_id, parent_id, start_ns, end_ns, duration_ns,
 * thread_id, arg, self_ns, wait_ns (8 bytes a row, from 0), name, category, depth,
 * thread_name (4 bytes, from 72 * cap), then the bitmaps of parent_id, category and arg
 * validity and of error ((cap + 7) / 8 bytes each, from 88 * cap); parents, categories and
 * args count the valid values. The reader (_raw_reader) carries each thread's self state to
 * the next call: a log's frames are handed over in order, each once. One call at a time per
 * reader (the GIL is released; a second call on the same reader meanwhile is refused). */
static PyObject *py_raw_decode(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *cap_obj;
    Py_buffer data, frames, clocks, pair_name, pair_cat;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*:_raw_decode", &cap_obj, &data, &frames, &clocks, &pair_name,
                          &pair_cat))
        return NULL;
    PyObject *out = NULL;
    hs_rawlog_reader *rd = PyCapsule_GetPointer(cap_obj, RAW_READER_CAPSULE);
    if (!rd) goto done;
    if (PyCapsule_GetContext(cap_obj)) {
        PyErr_SetString(PyExc_RuntimeError, "_raw_decode: this reader is decoding on another thread");
        goto done;
    }
    if (pair_name.len != pair_cat.len || pair_name.len % 4) {
        PyErr_SetString(PyExc_ValueError, "_raw_decode: pair_name and pair_cat are int32 arrays of one length");
        goto done;
    }
    uint64_t nframes = (uint64_t)frames.len / sizeof(hs_rawlog_span_frame), cap = 0;
    const hs_rawlog_span_frame *fr = frames.buf;
    for (uint64_t i = 0; i < nframes; i++) {
        if (fr[i].slots > (uint64_t)data.len / sizeof(hs_record)) {
            PyErr_SetString(PyExc_ValueError, "_raw_decode: a frame larger than the data");
            goto done;
        }
        cap += fr[i].slots;
    }
    uint64_t bm = (cap + 7) / 8;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cap * 88 + 4 * bm));
    if (!out) goto done;
    char *p = PyBytes_AS_STRING(out);
#define COL8(i) ((void *)(p + (i) * cap * 8))
#define COL4(j) ((void *)(p + cap * 72 + (j) * cap * 4))
#define BITS(b) ((uint8_t *)(p + cap * 88 + (b) * bm))
    hs_rawlog_columns cols = {
        .span_id = COL8(0), .parent_id = COL8(1), .start_ns = COL8(2), .end_ns = COL8(3),
        .duration_ns = COL8(4), .thread_id = COL8(5), .arg = COL8(6), .self_ns = COL8(7), .wait_ns = COL8(8),
        .name = COL4(0), .category = COL4(1), .depth = COL4(2), .thread_name = COL4(3),
        .parent_valid = BITS(0), .category_valid = BITS(1), .arg_valid = BITS(2), .error = BITS(3),
        .pair_name = pair_name.buf, .pair_cat = pair_cat.buf, .npairs = (uint32_t)(pair_name.len / 4),
    };
#undef COL8
#undef COL4
#undef BITS
    uint64_t k;
    PyCapsule_SetContext(cap_obj, rd); /* busy */
    Py_BEGIN_ALLOW_THREADS
    k = hs_rawlog_decode(rd, data.buf, (uint64_t)data.len, fr, nframes, clocks.buf,
                         (uint64_t)clocks.len / sizeof(hs_clock_seg), &cols, cap);
    Py_END_ALLOW_THREADS
    PyCapsule_SetContext(cap_obj, NULL);
    PyObject *res = Py_BuildValue("(NKKKK)", out, (unsigned long long)k, (unsigned long long)cols.parents,
                                  (unsigned long long)cols.categories, (unsigned long long)cols.args);
    out = res;
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&clocks);
    PyBuffer_Release(&pair_name);
    PyBuffer_Release(&pair_cat);
    return out;
}

static PyObject *py_flight_path(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    const char *p = hs_flight_path();
    if (!p) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(p);
}

static PyObject *py_flight_set_rank(PyObject *m, PyObject *arg) {
    (void)m;
    long rank = PyLong_AsLong(arg);
    if (rank == -1 && PyErr_Occurred()) return NULL;
    hs_flight_set_rank((int32_t)rank);
    Py_RETURN_NONE;
}

/* _set_nvtx(on): NVTX passthrough (configure(nvtx=)). */
static PyObject *py_set_nvtx(PyObject *m, PyObject *on) {
    (void)m;
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    if (hs_nvtx_set(v) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_nvtx(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyBool_FromLong(atomic_load(&hs_nvtx_on));
}

/* What helps against the drops counted so far, in one sentence ("" when none): the cause
 * that dropped most at the cap decides (records not drained yet: drain more often; the
 * blocks live threads write into: a bigger cap or smaller blocks). */
static void drop_advice(char *out, size_t n, uint64_t cap, uint64_t other, const hs_cap_causes *c) {
    out[0] = 0;
    char cap_text[240] = "", size[32];
    uint64_t bytes = hs_get_memory_cap();
    if (bytes >= (1u << 20)) snprintf(size, sizeof size, "%.1f MiB", (double)bytes / (1 << 20));
    else snprintf(size, sizeof size, "%.1f KiB", (double)bytes / 1024);
    if (cap && c->thread_blocks > c->undrained)
        snprintf(cap_text, sizeof cap_text,
                 "at the memory cap (%s), filled by the blocks of %llu live threads: raise "
                 "configure(memory_cap=) or lower configure(capacity=)",
                 size, (unsigned long long)c->live_threads_at_last);
    else if (cap)
        snprintf(cap_text, sizeof cap_text,
                 "at the memory cap (%s), filled by spans not drained yet: drain more often "
                 "(record(flush_interval=), drain()) or raise configure(memory_cap=)",
                 size);
    const char *other_text = "for other causes (out of memory, or too many distinct names or paths)";
    if (cap && other)
        snprintf(out, n, "%llu %s; %llu %s", (unsigned long long)cap, cap_text, (unsigned long long)other, other_text);
    else if (cap)
        snprintf(out, n, "%s", cap_text);
    else if (other)
        snprintf(out, n, "%s", other_text);
}

/* dropped(detail=False): the total, or {"total", "memory_cap", "other", "threads": {tid:
 * {"name", "memory_cap", "other"}}, "memory_cap_causes": {"undrained", "thread_blocks"},
 * "advice"} for the threads that dropped any (exited ones too). */
static PyObject *py_dropped(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *kwlist[] = {"detail", NULL};
    int detail = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:dropped", kwlist, &detail)) return NULL;
    if (!detail) return PyLong_FromUnsignedLongLong(hs_dropped_total());
    PyObject *threads = PyDict_New();
    if (!threads) return NULL;
    int bad = 0;
    hs_registry_lock(); /* one consistent view: totals and rows together */
    uint32_t nexited = 0;
    hs_drop_row *exited = hs_registry_exited_drops(&nexited);
    for (uint32_t k = 0; k < nexited && !bad; k++) {
        PyObject *row = Py_BuildValue("{sssKsK}", "name", exited[k].name ? exited[k].name : "", "memory_cap",
                                      (unsigned long long)exited[k].cap, "other", (unsigned long long)exited[k].other);
        PyObject *key = PyLong_FromLongLong(exited[k].tid);
        if (!row || !key || PyDict_SetItem(threads, key, row) < 0) bad = 1;
        Py_XDECREF(row);
        Py_XDECREF(key);
    }
    for (hs_thread_info *i = hs_registry_infos(); i && !bad; i = i->next) {
        uint64_t c = atomic_load(&i->dropped_cap), o = atomic_load(&i->dropped_other);
        if (!c && !o) continue;
        PyObject *row = Py_BuildValue("{sssKsK}", "name", i->name ? i->name : "", "memory_cap", (unsigned long long)c,
                                      "other", (unsigned long long)o);
        PyObject *key = PyLong_FromLongLong(i->tid);
        if (!row || !key || PyDict_SetItem(threads, key, row) < 0) bad = 1;
        Py_XDECREF(row);
        Py_XDECREF(key);
    }
    hs_registry_unlock();
    if (bad) {
        Py_DECREF(threads);
        return NULL;
    }
    /* exited threads beyond the kept rows count in the totals only */
    uint64_t all_cap, all_other;
    hs_dropped_by_cause(&all_cap, &all_other);
    hs_cap_causes causes;
    hs_cap_causes_get(&causes);
    char advice[400];
    drop_advice(advice, sizeof advice, all_cap, all_other, &causes);
    /* counters (hotspan.counter) are not spans: their drops are counted apart, here */
    return Py_BuildValue("{sKsKsKsNs{sKsK}sssK}", "total", (unsigned long long)(all_cap + all_other), "memory_cap",
                         (unsigned long long)all_cap, "other", (unsigned long long)all_other, "threads", threads,
                         "memory_cap_causes", "undrained", (unsigned long long)causes.undrained, "thread_blocks",
                         (unsigned long long)causes.thread_blocks, "advice", advice, "counters",
                         (unsigned long long)hs_counters_dropped());
}

/* ---- drain ---------------------------------------------------------------------------- */

/* A malloc'd block exposed through the buffer protocol (pyarrow.py_buffer takes it
 * without a copy) and freed with the last reference. */
typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t len;
} BufferObject;

static void buffer_dealloc(BufferObject *b) {
    hs_buf_free(b->ptr);
    PyObject_Free(b);
}

static int buffer_getbuffer(BufferObject *b, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)b, b->ptr, b->len, 1, flags);
}

static PyBufferProcs buffer_as_buffer = {(getbufferproc)buffer_getbuffer, NULL};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory drained from the rings, owned until the last reference goes.",
};

/* Takes ownership of *ptr (set to NULL). */
static int put_buffer(PyObject *dict, const char *key, void *ptrp, Py_ssize_t len) {
    void **p = (void **)ptrp;
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) return -1;
    b->ptr = *p;
    b->len = len;
    *p = NULL;
    int rc = PyDict_SetItemString(dict, key, (PyObject *)b);
    Py_DECREF(b);
    return rc;
}

static PyObject *thread_rows(hs_thread_row *rows, uint32_t n, int with_dropped) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        /* A name is NULL when its copy failed (out of memory): an empty name, not None. */
        const char *name = rows[i].name ? rows[i].name : "";
        PyObject *row = with_dropped
                            ? Py_BuildValue("(LsKK)", (long long)rows[i].tid, name,
                                            (unsigned long long)rows[i].dropped, (unsigned long long)rows[i].dropped_cap)
                            : Py_BuildValue("(Ls)", (long long)rows[i].tid, name);
        if (!row) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, row);
    }
    return list;
}

/* pid and rank are the same on every row: one buffer of the value, grown as drains grow and
 * shared by every table (Arrow reads the first n), instead of 12 bytes a row written anew. */
typedef struct {
    BufferObject *buffer;
    int64_t value;
    Py_ssize_t rows;
} constant_column;
static constant_column const_pid = {NULL, 0, 0}, const_rank = {NULL, 0, 0};

static int put_constant(PyObject *dict, const char *key, constant_column *col, int64_t value, size_t size,
                        Py_ssize_t n) {
    if (!col->buffer || col->value != value || col->rows < n) {
        Py_ssize_t rows = n < 4096 ? 4096 : n + n / 4;
        void *mem = hs_buf_alloc((size_t)rows * size);
        if (!mem) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < rows; i++) {
            if (size == 8) ((int64_t *)mem)[i] = value;
            else ((int32_t *)mem)[i] = (int32_t)value;
        }
        BufferObject *b = PyObject_New(BufferObject, &BufferType);
        if (!b) {
            hs_buf_free(mem);
            return -1;
        }
        b->ptr = mem;
        b->len = rows * (Py_ssize_t)size;
        Py_XSETREF(col->buffer, b);
        col->value = value;
        col->rows = rows;
    }
    return PyDict_SetItemString(dict, key, (PyObject *)col->buffer);
}

static PyObject *py_drain(PyObject *m, PyObject *rank_obj) {
    (void)m;
    long rank = PyLong_AsLong(rank_obj);
    if (rank == -1 && PyErr_Occurred()) return NULL;
    hs_columns c;
    int rc;
    /* No Python object is touched while converting: let recording threads run. */
    Py_BEGIN_ALLOW_THREADS
    rc = hs_drain_collect(&c, (int32_t)rank);
    Py_END_ALLOW_THREADS
    if (rc < 0) return PyErr_NoMemory();
    Py_ssize_t n = (Py_ssize_t)c.n, bits = (n + 7) / 8;
    PyObject *d = PyDict_New();
    if (!d) goto fail;
    PyObject *v;
    if (!(v = PyLong_FromSsize_t(n)) || PyDict_SetItemString(d, "n", v) < 0) { Py_XDECREF(v); goto fail; }
    Py_DECREF(v);
    if (put_buffer(d, "span_id", &c.span_id, n * 8) < 0 || put_buffer(d, "parent_id", &c.parent_id, n * 8) < 0 ||
        put_buffer(d, "parent_valid", &c.parent_valid, bits) < 0 || put_buffer(d, "name_idx", &c.name_idx, n * 4) < 0 ||
        put_buffer(d, "category_idx", &c.category_idx, n * 4) < 0 ||
        put_buffer(d, "category_valid", &c.category_valid, bits) < 0 ||
        put_buffer(d, "start_ns", &c.start_ns, n * 8) < 0 || put_buffer(d, "end_ns", &c.end_ns, n * 8) < 0 ||
        put_buffer(d, "duration_ns", &c.duration_ns, n * 8) < 0 ||
        put_buffer(d, "self_ns", &c.self_ns, n * 8) < 0 || put_buffer(d, "wait_ns", &c.wait_ns, n * 8) < 0 ||
        put_buffer(d, "depth", &c.depth, n * 4) < 0 ||
        put_buffer(d, "thread_id", &c.thread_id, n * 8) < 0 || put_buffer(d, "thread_idx", &c.thread_idx, n * 4) < 0 ||
        put_constant(d, "pid", &const_pid, (int64_t)getpid(), 8, n) < 0 ||
        put_constant(d, "rank", &const_rank, rank, 4, n) < 0 ||
        put_buffer(d, "arg", &c.arg, n * 8) < 0 || put_buffer(d, "arg_valid", &c.arg_valid, bits) < 0 ||
        put_buffer(d, "error", &c.error, bits) < 0)
        goto fail;
    /* The dictionaries go out as Arrow string buffers (offsets, UTF-8 data) too: building
     * them from Python lists would have pyarrow import pandas on the first drain. */
    Py_ssize_t names_len = c.names_offsets[c.n_names], categories_len = c.categories_offsets[c.n_categories];
    if (put_buffer(d, "names_offsets", &c.names_offsets, (Py_ssize_t)(c.n_names + 1) * 4) < 0 ||
        put_buffer(d, "names_data", &c.names_blob, names_len) < 0 ||
        put_buffer(d, "categories_offsets", &c.categories_offsets, (Py_ssize_t)(c.n_categories + 1) * 4) < 0 ||
        put_buffer(d, "categories_data", &c.categories_blob, categories_len) < 0)
        goto fail;
    struct { const char *key; PyObject *val; } items[] = {
        {"n_names", PyLong_FromUnsignedLong(c.n_names)},
        {"n_categories", PyLong_FromUnsignedLong(c.n_categories)},
        {"threads", thread_rows(c.threads, c.n_threads, 0)},
        {"all_threads", thread_rows(c.all_threads, c.n_all_threads, 1)},
        {"id_base", PyLong_FromUnsignedLongLong(c.id_base)},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
        if (!items[i].val || PyDict_SetItemString(d, items[i].key, items[i].val) < 0) bad = 1;
        Py_XDECREF(items[i].val);
    }
    if (bad) goto fail;
    hs_columns_free(&c);
    return d;
fail:
    /* Out of memory handing the batch over: its spans left the rings and are lost, so they
     * are counted (hotspan.dropped()), never silently gone. */
    hs_count_lost(c.n);
    Py_XDECREF(d);
    hs_columns_free(&c);
    return NULL;
}

static PyObject *py_count_lost(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    hs_count_lost(n);
    Py_RETURN_NONE;
}

static PyObject *py_pending(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    uint64_t bytes, spans, segments;
    hs_drain_pending(&bytes, &spans, &segments);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsN}", "bytes", (unsigned long long)bytes, "held_bytes",
                         (unsigned long long)hs_blocks_held_bytes(), "spans", (unsigned long long)spans,
                         "segments", (unsigned long long)segments, "pool_bytes",
                         (unsigned long long)hs_drain_pool_bytes(), "capacity",
                         (unsigned long long)hs_get_capacity(), "memory_cap",
                         (unsigned long long)hs_get_memory_cap(), "drain_period_us",
                         (unsigned long long)hs_drain_period_us(), "drain_thread", PyBool_FromLong(!hs_drain_paused()));
}

/* ---- clock ---------------------------------------------------------------------------- */

static PyObject *py_clock_info(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_clock_update(0);
    hs_clock_info ci;
    hs_clock_get_info(&ci);
    return Py_BuildValue("{sssdsKsLsLsIsL}", "source", hs_clock_source_name(ci.source), "ns_per_tick",
                         ci.ns_per_tick, "anchor_ticks", (unsigned long long)ci.anchor_ticks, "anchor_mono_ns",
                         (long long)ci.anchor_mono_ns, "anchor_real_ns", (long long)ci.anchor_real_ns, "segments",
                         (unsigned int)ci.segments, "last_error_ns", (long long)ci.last_error_ns);
}

static PyObject *py_set_fake_clock(PyObject *m, PyObject *args) {
    (void)m;
    long long start;
    unsigned long long step;
    if (!PyArg_ParseTuple(args, "LK:_set_fake_clock", &start, &step)) return NULL;
    hs_clock_set_fake(start, step);
    Py_RETURN_NONE;
}

static PyObject *py_set_real_clock(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_clock_set_real();
    Py_RETURN_NONE;
}

/* _set_default_sync(fn or None): what spans opened with sync=True call. */
static PyObject *py_set_default_sync(PyObject *m, PyObject *fn) {
    (void)m;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "configure(): sync must be a callable or None, not %.100s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    hs_types_set_default_sync(fn == Py_None ? NULL : fn);
    Py_RETURN_NONE;
}

/* ---- the glue's callbacks (a thread's name, drops): installed by install_layer_ops ---- */

static PyObject *thread_name_hook = NULL;
/* Set by the first _set_hooks (hotspan._api's import): drops are reported from then on. */
static _Atomic int glue_ready = 0;

static char *call_thread_name_hook(void) {
    if (!thread_name_hook || !PyGILState_Check()) return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    char *out = NULL;
    PyObject *r = PyObject_CallNoArgs(thread_name_hook);
    if (r && PyUnicode_Check(r)) {
        const char *s = PyUnicode_AsUTF8(r);
        if (s) out = strdup(s);
    }
    Py_XDECREF(r);
    PyErr_Clear(); /* naming a thread never fails a span */
    PyErr_Restore(type, value, tb);
    return out;
}

/* Drops said while the program runs: the drain thread (which never takes the GIL) starts a
 * short-lived thread that takes it and calls hotspan._core_drops.report(), so the drain
 * thread never waits for the interpreter. One at a time; the drain thread signals at most
 * every HS_DROPS_SIGNAL_NS. (Py_AddPendingCall would be lighter, but before 3.12 a call
 * added from a thread other than the main one does not wake the main thread's eval loop:
 * it ran at exit.) */
static _Atomic int drops_call_queued = 0;

static int interpreter_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

static void *drops_thread_main(void *arg) {
    (void)arg;
    if (Py_IsInitialized() && !interpreter_finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        if (!interpreter_finalizing()) {
            PyObject *mod = PyImport_ImportModule("hotspan._core_drops");
            PyObject *res = mod ? PyObject_CallMethod(mod, "report", NULL) : NULL;
            if (!res) PyErr_WriteUnraisable(NULL);
            Py_XDECREF(res);
            Py_XDECREF(mod);
        }
        PyGILState_Release(g);
    }
    atomic_store(&drops_call_queued, 0);
    return NULL;
}

static void drops_hook(void) {
    if (!atomic_load(&glue_ready) || atomic_exchange(&drops_call_queued, 1)) return;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (hs_thread_create_quiet(&th, &attr, drops_thread_main, NULL) != 0) atomic_store(&drops_call_queued, 0);
    pthread_attr_destroy(&attr);
}

/* _drops_reported(n): the drops reported so far (the drain thread signals while the total
 * is above it). */
static PyObject *py_drops_reported(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    atomic_store(&hs_drops_reported, (uint64_t)n);
    Py_RETURN_NONE;
}

static PyObject *py_set_hooks(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *name_hook, *deco_hook;
    if (!PyArg_ParseTuple(args, "OO:_set_hooks", &name_hook, &deco_hook)) return NULL;
    Py_XSETREF(thread_name_hook, name_hook == Py_None ? NULL : Py_NewRef(name_hook));
    hs_types_set_decorate(deco_hook == Py_None ? NULL : deco_hook);
    atomic_store(&glue_ready, 1);
    Py_RETURN_NONE;
}

static PyObject *py_after_fork_child(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    atomic_store(&drops_call_queued, 0); /* a call the parent had queued is the parent's */
    if (hs_tls) hs_drainer_ensure(); /* the forking thread records on: it needs a drainer */
    Py_RETURN_NONE;
}

/* ---- SIGTERM under HOTSPAN_OUT (hs_signals.h says why it is C) ------------------------ */

static PyObject *py_sigterm_install(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    int rc = hs_sigterm_install();
    if (rc < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(rc);
}

static PyObject *py_sigterm_uninstall(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_sigterm_uninstall();
    Py_RETURN_NONE;
}

static PyObject *py_sigterm_installed(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyBool_FromLong(hs_sigterm_installed());
}

static PyObject *py_sigterm_received(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyBool_FromLong(hs_sigterm_installed() && hs_sigterm_received());
}

static PyObject *py_sigterm_wait(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    int got;
    Py_BEGIN_ALLOW_THREADS
    got = hs_sigterm_wait();
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(got);
}

static PyObject *py_sigterm_die(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    Py_BEGIN_ALLOW_THREADS
    hs_sigterm_die();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_sigterm_after_fork_child(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    if (hs_sigterm_after_fork_child() < 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *py_forward_signal(PyObject *m, PyObject *args) {
    (void)m;
    int pid, sig;
    if (!PyArg_ParseTuple(args, "ii:_forward_signal", &pid, &sig)) return NULL;
    if (hs_forward_signal(pid, sig) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *py_sigint_filter_install(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    int rc = hs_sigint_filter_install();
    if (rc < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(rc);
}

/* ---- live log feed -------------------------------------------------------------------- */

static PyObject *py_live_start(PyObject *m, PyObject *args) {
    (void)m;
    unsigned long long min_ticks;
    unsigned int capacity;
    if (!PyArg_ParseTuple(args, "KI:_live_start", &min_ticks, &capacity)) return NULL;
    if (hs_live_start(min_ticks, capacity) < 0) return PyErr_NoMemory();
    hs_drainer_ensure();
    Py_RETURN_NONE;
}

/* Hand the pooled blocks back to the system now (tests: an exact budget under the cap). */
static PyObject *py_trim(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_pool_trim();
    Py_RETURN_NONE;
}

static PyObject *py_sweep(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    Py_BEGIN_ALLOW_THREADS
    hs_drain_sweep();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_live_stop(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_live_stop();
    Py_RETURN_NONE;
}

static PyObject *pair_strings(uint32_t pair, PyObject *cache) {
    PyObject *key = PyLong_FromUnsignedLong(pair);
    if (!key) return NULL;
    PyObject *hit = PyDict_GetItemWithError(cache, key);
    if (hit || PyErr_Occurred()) {
        Py_DECREF(key);
        return hit ? Py_NewRef(hit) : NULL;
    }
    hs_pair *chunk = atomic_load_explicit(&hs_pair_chunks[pair >> HS_PAIR_CHUNK_BITS], memory_order_acquire);
    uint32_t name_id = chunk ? chunk[pair & (HS_PAIR_CHUNK - 1)].name : 0;
    uint32_t path_id = chunk ? chunk[pair & (HS_PAIR_CHUNK - 1)].path : 0;
    size_t len = 0;
    char *name = hs_intern_string_dup(name_id, &len);
    PyObject *pyname = PyUnicode_DecodeUTF8(name ? name : "", name ? (Py_ssize_t)len : 0, "replace");
    free(name);
    PyObject *pycat = Py_NewRef(Py_None);
    if (path_id) {
        char *cat = hs_intern_string_dup(path_id, &len);
        Py_DECREF(pycat);
        pycat = PyUnicode_DecodeUTF8(cat ? cat : "", cat ? (Py_ssize_t)len : 0, "replace");
        free(cat);
    }
    PyObject *value = pyname && pycat ? PyTuple_Pack(2, pyname, pycat) : NULL;
    Py_XDECREF(pyname);
    Py_XDECREF(pycat);
    if (value && PyDict_SetItem(cache, key, value) < 0) Py_CLEAR(value);
    Py_DECREF(key);
    return value;
}

/* _now_ticks() -> the core's clock now, in raw ticks (what a span's start holds), and
 * _ticks_ns(ticks) -> those ticks on the table's clock (ns since the epoch), through the
 * same map as drained spans: device rows are placed on the host spans' own clock (the
 * fake one in tests too). */
static PyObject *py_now_ticks(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyLong_FromUnsignedLongLong(hs_ticks());
}

static PyObject *py_ticks_ns(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long long ticks = PyLong_AsUnsignedLongLong(arg);
    if (ticks == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    hs_clock_update(0);
    hs_clock_seg *segs = NULL;
    uint32_t n = hs_clock_snapshot(&segs);
    if (!n) {
        free(segs);
        return PyErr_NoMemory();
    }
    int64_t ns = hs_clock_convert(segs, n, ticks);
    free(segs);
    return PyLong_FromLongLong(ns);
}

/* _pair_strings(pair) -> (name, category path or None): what a record's pair id names
 * (device rows, resolved at drain, carry the pair of their host span's frame). */
static PyObject *py_pair_strings(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long pair = PyLong_AsUnsignedLong(arg);
    if (pair == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (pair >= (unsigned long)HS_PAIR_CHUNK * HS_PAIR_MAX_CHUNKS) {
        PyErr_Format(PyExc_ValueError, "_pair_strings(): pair id %lu out of range", pair);
        return NULL;
    }
    PyObject *cache = PyDict_New();
    if (!cache) return NULL;
    PyObject *out = pair_strings((uint32_t)pair, cache);
    Py_DECREF(cache);
    return out;
}

/* _counters_take() -> (time_ns bytes, value bytes, pair bytes, thread_id bytes, n): the
 * counter values drained so far (a sweep first), oldest first per thread; the Python side
 * names the pairs and builds the table. */
static PyObject *py_counters_take(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    hs_counter_row *rows = NULL;
    uint64_t n;
    hs_clock_seg *segs = NULL;
    uint32_t nseg;
    Py_BEGIN_ALLOW_THREADS
    hs_drain_sweep();
    hs_drain_lock();
    n = hs_counters_take(&rows);
    hs_drain_unlock();
    hs_clock_update(0);
    nseg = hs_clock_snapshot(&segs);
    Py_END_ALLOW_THREADS
    if (!nseg) {
        free(segs);
        free(rows);
        return PyErr_NoMemory();
    }
    PyObject *t = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *v = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *p = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    PyObject *d = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    if (!t || !v || !p || !d) {
        Py_XDECREF(t); Py_XDECREF(v); Py_XDECREF(p); Py_XDECREF(d);
        free(segs);
        free(rows);
        return NULL;
    }
    int64_t *tc = (int64_t *)PyBytes_AS_STRING(t), *dc = (int64_t *)PyBytes_AS_STRING(d);
    double *vc = (double *)PyBytes_AS_STRING(v);
    uint32_t *pc = (uint32_t *)PyBytes_AS_STRING(p);
    for (uint64_t i = 0; i < n; i++) {
        tc[i] = hs_clock_convert(segs, nseg, rows[i].ticks);
        vc[i] = rows[i].value;
        pc[i] = rows[i].pair;
        dc[i] = rows[i].tid;
    }
    free(segs);
    free(rows);
    return Py_BuildValue("(NNNNK)", t, v, p, d, (unsigned long long)n);
}

/* _counters_count_drops(n): n counter values dropped past the core (a consumer's full queue
 * in hotspan.counters), counted with the core's own in dropped(detail=True)["counters"]. */
static PyObject *py_counters_count_drops(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    hs_counters_count_drops((uint64_t)n);
    Py_RETURN_NONE;
}

/* _counters_sampling(interval_ns, rss_name): the drain thread samples the process's RSS
 * every interval_ns (0: off) as a counter named rss_name. */
static PyObject *py_counters_sampling(PyObject *m, PyObject *args) {
    (void)m;
    unsigned long long ns;
    const char *name;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "Ks#:_counters_sampling", &ns, &name, &len)) return NULL;
    hs_site *site = hs_site_create(name, (size_t)len, NULL, 0);
    if (!site) return PyErr_NoMemory();
    hs_counters_set_sampling(ns, site->root_pair);
    if (ns) hs_drainer_ensure();
    Py_RETURN_NONE;
}

static PyObject *py_counters_info(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return Py_BuildValue("{sKsKsL}", "dropped", (unsigned long long)hs_counters_dropped(), "interval_ns",
                         (unsigned long long)hs_counters_interval_ns(), "rss_bytes",
                         (long long)hs_counters_rss_bytes());
}

/* _take_id_range() -> (first id, count): span ids no thread will use (device rows). */
static PyObject *py_take_id_range(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return Py_BuildValue("(KK)", (unsigned long long)hs_take_id_range(), (unsigned long long)HS_ID_RANGE);
}

/* _live_take(timeout_ms) -> ([(start_ns, duration_ns, thread_id, thread_name, name,
 * category, arg, error, depth), ...], skipped). Waits without the GIL. */
static PyObject *py_live_take(PyObject *m, PyObject *arg) {
    (void)m;
    long timeout_ms = PyLong_AsLong(arg);
    if (timeout_ms == -1 && PyErr_Occurred()) return NULL;
    hs_live_entry *entries = NULL;
    uint64_t skipped = 0;
    uint32_t n;
    Py_BEGIN_ALLOW_THREADS
    n = hs_live_take(&entries, &skipped, timeout_ms < 0 ? 0 : (uint32_t)timeout_ms);
    Py_END_ALLOW_THREADS
    hs_clock_seg *clk = NULL;
    uint32_t nclk = n ? hs_clock_snapshot(&clk) : 0;
    PyObject *list = PyList_New(0), *cache = PyDict_New(), *out = NULL;
    if (!list || !cache || (n && !nclk)) goto done;
    for (uint32_t i = 0; i < n; i++) {
        hs_live_entry *e = &entries[i];
        PyObject *strings = pair_strings(e->pair, cache);
        if (!strings) goto done;
        int64_t st = hs_clock_convert(clk, nclk, e->start);
        int64_t en = hs_clock_convert(clk, nclk, e->start + e->dur);
        hs_registry_lock();
        PyObject *tname = PyUnicode_DecodeUTF8(e->info->name ? e->info->name : "",
                                               e->info->name ? (Py_ssize_t)strlen(e->info->name) : 0, "replace");
        int64_t tid = e->info->tid;
        hs_registry_unlock();
        PyObject *row = tname ? Py_BuildValue("(LLLOOON" "Ni)", (long long)st, (long long)(en - st), (long long)tid,
                                              tname, PyTuple_GET_ITEM(strings, 0), PyTuple_GET_ITEM(strings, 1),
                                              (e->flags & HS_F_ARG) ? PyLong_FromLongLong(e->arg) : Py_NewRef(Py_None),
                                              PyBool_FromLong(e->flags & HS_F_ERROR), (int)e->depth)
                              : NULL;
        Py_XDECREF(tname);
        Py_DECREF(strings);
        if (!row || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            goto done;
        }
        Py_DECREF(row);
    }
    out = Py_BuildValue("(OK)", list, (unsigned long long)skipped);
done:
    free(entries);
    if (n) hs_live_done(); /* the entries' thread infos are not read any more */
    free(clk);
    Py_XDECREF(list);
    Py_XDECREF(cache);
    return out;
}


/* ---- the C API capsule ----------------------------------------------------------------- */

static void *capi_site(const char *name, const char *category) {
    return hs_site_create(name, strlen(name), category, category ? strlen(category) : 0);
}
static int capi_begin(void *site, int64_t arg, int has_arg) {
    return hs_enter((hs_site *)site, hs_owner_native, arg, has_arg ? HS_F_ARG : 0);
}
static void capi_end(int error) { hs_exit(hs_owner_native, error); }
static void capi_instant(void *site, int64_t arg, int has_arg) {
    hs_instant((hs_site *)site, arg, has_arg ? HS_F_ARG : 0);
}
static int capi_enabled(void) { return atomic_load(&hs_enabled); }

static const hotspan_api capi = {HOTSPAN_API_VERSION, capi_site, capi_begin, capi_end, capi_instant, capi_enabled};

/* ---- module --------------------------------------------------------------------------- */

static PyObject *py_tasks_seen(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(hs_tasks_seen());
}

static PyMethodDef module_methods[] = {
    {"begin", (PyCFunction)(void (*)(void))py_begin, METH_FASTCALL | METH_KEYWORDS,
     "begin(name, category=None, *, arg=None, sync=None)\n--\n\nOpen a span on this thread (task); returns the token (an int) to pass to end(), which calls sync first."},
    {"end", (PyCFunction)py_end, METH_O, "end(token)\n--\n\nClose the span begin() opened (and any left open inside it)."},
    {"instant", (PyCFunction)(void (*)(void))py_instant, METH_FASTCALL | METH_KEYWORDS,
     "instant(name, category=None, *, arg=None)\n--\n\nRecord a zero-duration marker."},
    {"enable", py_enable, METH_NOARGS, "enable()\n--\n\nTurn recording on (everywhere, decorated functions too)."},
    {"disable", py_disable, METH_NOARGS, "disable()\n--\n\nTurn recording off."},
    {"enabled", py_enabled, METH_NOARGS, "enabled()\n--\n\nWhether recording is on (a bool)."},
    {"set_thread_name", py_set_thread_name, METH_O, "set_thread_name(name)\n--\n\nName the calling thread in traces."},
    {"_drops_reported", py_drops_reported, METH_O,
     "_drops_reported(n)\n--\n\nThe spans dropped that were reported so far (internal: hotspan._core_drops)."},
    {"dropped", (PyCFunction)(void (*)(void))py_dropped, METH_VARARGS | METH_KEYWORDS,
     "dropped(*, detail=False)\n--\n\nSpans dropped so far in this process, exactly; with detail=True, a dict: the\n"
     "total, how many at the memory cap and how many for other causes, the same per thread,\n"
     "what held the cap at each drop (memory_cap_causes: undrained, thread_blocks), advice:\n"
     "one sentence on what helps, and counters: the counter values (hotspan.counter) dropped,\n"
     "counted apart from the spans."},
    {"_wrap", (PyCFunction)(void (*)(void))py_wrap, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_tasks_seen", py_tasks_seen, METH_NOARGS, NULL},
    {"_set_arg", py_set_arg, METH_O, "_set_arg(n)\n--\n\nSet the arg of the calling thread's (task's) innermost open span."},
    {"_set_default_sync", py_set_default_sync, METH_O, NULL},
    {"_configure", py_configure, METH_VARARGS, NULL},
    {"_set_nvtx", py_set_nvtx, METH_O, NULL},
    {"_nvtx", py_nvtx, METH_NOARGS, NULL},
    {"_drain", py_drain, METH_O, NULL},
    {"_count_lost", py_count_lost, METH_O, "_count_lost(n)\n--\n\nCount n drained spans lost before any reader had them (out of memory)."},
    {"_flight_open", py_flight_open, METH_VARARGS, NULL},
    {"_flight_path", py_flight_path, METH_NOARGS, NULL},
    {"_raw_open", py_raw_open, METH_VARARGS, NULL},
    {"_raw_close", py_raw_close, METH_NOARGS, NULL},
    {"_raw_stats", py_raw_stats, METH_NOARGS, NULL},
    {"_raw_reader", py_raw_reader, METH_NOARGS, NULL},
    {"_raw_scan", py_raw_scan, METH_VARARGS, NULL},
    {"_raw_decode", py_raw_decode, METH_VARARGS, NULL},
    {"_flight_set_rank", py_flight_set_rank, METH_O, NULL},
    {"_pending", py_pending, METH_NOARGS, NULL},
    {"_clock_info", py_clock_info, METH_NOARGS, NULL},
    {"_set_fake_clock", py_set_fake_clock, METH_VARARGS, NULL},
    {"_set_real_clock", py_set_real_clock, METH_NOARGS, NULL},
    {"_set_hooks", py_set_hooks, METH_VARARGS, NULL},
    {"_after_fork_child", py_after_fork_child, METH_NOARGS, NULL},
    {"_sigterm_install", py_sigterm_install, METH_NOARGS, NULL},
    {"_sigterm_uninstall", py_sigterm_uninstall, METH_NOARGS, NULL},
    {"_sigterm_installed", py_sigterm_installed, METH_NOARGS, NULL},
    {"_sigterm_wait", py_sigterm_wait, METH_NOARGS, NULL},
    {"_sigterm_received", py_sigterm_received, METH_NOARGS, NULL},
    {"_sigterm_die", py_sigterm_die, METH_NOARGS, NULL},
    {"_sigterm_after_fork_child", py_sigterm_after_fork_child, METH_NOARGS, NULL},
    {"_forward_signal", py_forward_signal, METH_VARARGS, NULL},
    {"_sigint_filter_install", py_sigint_filter_install, METH_NOARGS, NULL},
    {"_live_start", py_live_start, METH_VARARGS, NULL},
    {"_live_stop", py_live_stop, METH_NOARGS, NULL},
    {"_sweep", py_sweep, METH_NOARGS, NULL},
    {"_trim", py_trim, METH_NOARGS, NULL},
    {"_live_take", py_live_take, METH_O, NULL},
    {"_pair_strings", py_pair_strings, METH_O, NULL},
    {"_take_id_range", py_take_id_range, METH_NOARGS, NULL},
    {"counter", (PyCFunction)(void (*)(void))py_counter, METH_FASTCALL,
     "counter(name, value)\n--\n\nRecord a counter's value (an int or a float) now."},
    {"_counters_take", py_counters_take, METH_NOARGS, NULL},
    {"_counters_count_drops", py_counters_count_drops, METH_O, NULL},
    {"_counters_sampling", py_counters_sampling, METH_VARARGS, NULL},
    {"_counters_info", py_counters_info, METH_NOARGS, NULL},
    {"_now_ticks", py_now_ticks, METH_NOARGS, NULL},
    {"_ticks_ns", py_ticks_ns, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

/* ---- the layers joined ------------------------------------------------------------------- */

/* Each layer that the units above call back into declares one operations struct in its
 * header; here, and only here, each is written whole, naming the functions of the units
 * that implement it, and installed once at init, before any thread records (no global
 * function pointer is set from another unit; tests/test_c_layout.py holds this). A field
 * left out does nothing. */
static const hs_ring_ops ring_ops = {
    /* the flight file's blocks, while one is open */
    .providing = hs_flight_providing,
    .block_alloc = hs_flight_block_alloc,
    .block_free = hs_flight_block_free,
};
static const hs_intern_ops intern_ops = {
    /* the flight file's copy of the tables, while one is open */
    .string = hs_flight_note_string,
    .pair = hs_flight_note_pair,
};
static const hs_registry_ops registry_ops = {
    /* the Python glue */
    .thread_name = call_thread_name_hook,
    .thread_link = hs_tasks_link_thread,
    .ctx_switch = hs_tasks_ctx_switch,
    /* the flight file's thread slots, while one is open */
    .tstate_alloc = hs_flight_tstate_alloc,
    .tstate_release = hs_flight_tstate_release,
    .stack_kept = hs_flight_owns,
    .thread_renamed = hs_flight_set_name,
    .stack_edit_begin = hs_flight_gen_begin,
    .stack_edit_end = hs_flight_gen_end,
    /* the drain */
    .thread_started = hs_drainer_ensure,
    .thread_exited = hs_wake_drainer,
};
static const hs_recorder_ops recorder_ops = {
    /* the NVTX passthrough, while hs_nvtx_on */
    .enter = hs_nvtx_enter,
    .pop = hs_nvtx_pop,
    .mark = hs_nvtx_mark,
    .pair_seen = hs_nvtx_pair_seen,
};
static const hs_counters_ops counters_ops = {
    .device_memory = hs_cuda_memory_sample,
};
static const hs_drain_ops drain_ops = {
    .tick = hs_flight_drain_tick,
    .block_drained = hs_flight_block_drained,
    .drops = drops_hook, /* the Python glue, from hotspan._api's import */
};
static const hs_device_ops device_ops = {
    .name = "cuda",
    .available = hs_cuda_available,
    .start = hs_cuda_start,
    .stop = hs_cuda_stop,
};

static void install_layer_ops(void) {
    hs_ring_set_ops(&ring_ops);
    hs_intern_set_ops(&intern_ops);
    hs_registry_set_ops(&registry_ops);
    hs_recorder_set_ops(&recorder_ops);
    hs_counters_set_ops(&counters_ops);
    hs_drain_set_ops(&drain_ops);
    hs_device_set_ops(&device_ops);
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native", "hotspan's C core: rings, clock, registry and drain.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
#ifdef Py_GIL_DISABLED
    /* The free-threaded build (3.13t, 3.14t): the task stacks (hs_tasks.c) and the span
     * objects assume the GIL serialises Python-level calls on shared objects, which was
     * never checked there. Refuse in one line rather than record wrong trees. */
    PyErr_SetString(PyExc_ImportError,
                    "hotspan does not support the free-threaded CPython build (" PY_VERSION
                    "t) yet: use the default (GIL) build of CPython");
    return NULL;
#endif
    if (PyType_Ready(&SpanType) < 0 || hs_types_init() < 0 || PyType_Ready(&SyncSpanType) < 0 || PyType_Ready(&DeviceSpanType) < 0 || PyType_Ready(&TracedType) < 0 || PyType_Ready(&BufferType) < 0 ||
        PyType_Ready(&NoopType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    /* The layers joined, once, before any thread records; then the one set of fork
     * handlers. */
    install_layer_ops();
    hs_fork_init();
    hs_clock_init();
    if (hs_tasks_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    const char *env = getenv("HOTSPAN");
    if (env && (!strcmp(env, "0") || !strcasecmp(env, "false") || !strcasecmp(env, "off") || !strcasecmp(env, "no")))
        atomic_store(&hs_enabled, 0);
    hs_nvtx_init_from_env(); /* HOTSPAN_NVTX=1 */
    if (hs_cuda_init(m) < 0) { /* device spans' plug-in: the driver loads at the first one */
        Py_DECREF(m);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New((void *)&capi, HOTSPAN_CAPSULE_NAME, NULL);
    if (PyModule_AddObjectRef(m, "span", (PyObject *)&SpanType) < 0 ||
        PyModule_AddObjectRef(m, "traced_function", (PyObject *)&TracedType) < 0 ||
        PyModule_AddObjectRef(m, "NoopContext", (PyObject *)&NoopType) < 0 || !capsule ||
        PyModule_AddObject(m, "_C_API", capsule) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_BYTES", (long)sizeof(hs_record)) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
