/* hs_types: the hot Python types of hotspan._native: span (and its literal cache),
 * traced_function, begin/end/instant, and the benchmark floor (NoopContext). Everything a
 * recorded span goes through from Python lives here; the module glue (configuration,
 * drain, clock, hooks, live feed, module init) is in hs_module.c, which only runs cold.
 *
 * Speed notes (3.11, measured in benchmarks/bench_overhead.py):
 * - `with` looks up __enter__/__exit__ and binds them to the object; a span keeps both bound
 *   methods inside itself, so binding allocates nothing (see "bound methods without an
 *   allocation"): a span's `with` costs less than the same statement on a plain C context
 *   manager (the benchmark floor) on 3.10-3.13. Each call is one vectorcall into C.
 * - a literal `hotspan.span("x", "c")` goes through the type's vectorcall and a
 *   pointer-keyed cache of interned sites, so it never hashes or encodes the strings, and
 *   takes its (fresh) object from a free list, so a warm loop never calls the allocator.
 */
#include "hs_types.h"

#include "hs_device.h"
#include "hs_recorder.h"


#ifdef Py_GIL_DISABLED
static PyMutex lit_mutex;
#define LIT_LOCK() PyMutex_Lock(&lit_mutex)
#define LIT_UNLOCK() PyMutex_Unlock(&lit_mutex)
#else
#define LIT_LOCK()
#define LIT_UNLOCK()
#endif

/* ---- sites from Python strings -------------------------------------------------------- */

/* Direct-mapped, keyed by the str objects' addresses. An entry owns references to its
 * keys, so an address in the cache always is that very string; only str objects ever get
 * in, so a hit needs no type checks. (A literal's str is the same object on every pass of
 * a loop: the code object's constant.) */
typedef struct {
    PyObject *name;
    PyObject *category; /* NULL: none */
    hs_site *site;
} lit_entry;
#define LIT_SIZE 2048
static lit_entry lit_cache[LIT_SIZE];

static inline lit_entry *lit_slot(PyObject *name, PyObject *category) {
    size_t h = (((uintptr_t)name >> 4) ^ (((uintptr_t)category >> 4) * 0x9e3779b1u)) & (LIT_SIZE - 1);
    return &lit_cache[h];
}

/* name: a str; category: a str or NULL. Returns the (borrowed) entry, or NULL with an
 * exception set. */
static lit_entry *lit_fill(PyObject *name, PyObject *category) {
    Py_ssize_t nlen, clen = 0;
    const char *n = PyUnicode_AsUTF8AndSize(name, &nlen);
    if (!n) return NULL;
    const char *c = NULL;
    if (category) {
        c = PyUnicode_AsUTF8AndSize(category, &clen);
        if (!c) return NULL;
    }
    hs_site *site = hs_site_create(n, (size_t)nlen, c, (size_t)clen);
    if (!site) {
        PyErr_NoMemory();
        return NULL;
    }
    lit_entry *e = lit_slot(name, category);
    Py_INCREF(name);
    Py_XINCREF(category);
    LIT_LOCK();
    PyObject *old_name = e->name, *old_category = e->category;
    e->name = name;
    e->category = category;
    e->site = site;
    LIT_UNLOCK();
    Py_XDECREF(old_name);
    Py_XDECREF(old_category);
    return e;
}

#ifdef Py_GIL_DISABLED
/* Free-threaded: copy the entry out under the lock. */
static int lit_get(PyObject *name, PyObject *category, hs_site **site) {
    lit_entry *e = lit_slot(name, category);
    int hit = 0;
    LIT_LOCK();
    if (e->name == name && e->category == category && e->site) {
        *site = e->site;
        hit = 1;
    }
    LIT_UNLOCK();
    if (hit) return 0;
    if (!lit_fill(name, category)) return -1;
    return lit_get(name, category, site);
}
#else
/* With the GIL nothing changes an entry between the check and the use. */
static inline int lit_get(PyObject *name, PyObject *category, hs_site **site) {
    lit_entry *e = lit_slot(name, category);
    if (HS_UNLIKELY(e->name != name || e->category != category || !e->site)) {
        e = lit_fill(name, category);
        if (!e) return -1;
    }
    *site = e->site;
    return 0;
}
#endif

static hs_site *site_for(PyObject *name, PyObject *category) {
    hs_site *site;
    return lit_get(name, category, &site) < 0 ? NULL : site;
}

/* ---- argument checks ------------------------------------------------------------------ */

typedef struct {
    PyObject *name;
    PyObject *category; /* NULL: none */
    int64_t arg;
    uint32_t flags;
    PyObject *arg_obj; /* borrowed; NULL: none */
    PyObject *sync;    /* borrowed; NULL: none (None and False are none); Py_True: configure(sync=)'s */
    PyObject *device;  /* borrowed; NULL: none. 'cuda', checked (the plug-in is usable) */
    PyObject *stream;  /* borrowed; NULL: none (the current stream) */
    hs_stream_spec stream_spec;
} span_args;

/* Keywords beyond (name, category, arg) a function takes. */
enum { KW_SYNC = 1, KW_DEVICE = 2 };

/* configure(sync=fn): what spans opened with sync=True call (NULL: none configured). */
static PyObject *default_sync = NULL;

void hs_types_set_default_sync(PyObject *fn) { Py_XSETREF(default_sync, Py_XNewRef(fn)); }

static int check_span_args(const char *fn, PyObject *name, PyObject *category, PyObject *arg, span_args *out) {
    if (!name) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'name'", fn);
        return -1;
    }
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s(): name must be a str, not %.100s", fn, Py_TYPE(name)->tp_name);
        return -1;
    }
    if (category == Py_None) category = NULL;
    if (category && !PyUnicode_Check(category)) {
        PyErr_Format(PyExc_TypeError, "%s(): category must be a str or None, not %.100s", fn,
                     Py_TYPE(category)->tp_name);
        return -1;
    }
    out->name = name;
    out->category = category;
    out->arg = 0;
    out->flags = 0;
    out->arg_obj = NULL;
    out->sync = NULL;
    out->device = NULL;
    out->stream = NULL;
    memset(&out->stream_spec, 0, sizeof out->stream_spec);
    if (arg && arg != Py_None) {
        if (!PyLong_Check(arg)) {
            PyErr_Format(PyExc_TypeError, "%s(): arg must be an int or None, not %.100s", fn,
                         Py_TYPE(arg)->tp_name);
            return -1;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
        if (overflow) {
            PyErr_Format(PyExc_OverflowError, "%s(): arg does not fit in a signed 64-bit integer", fn);
            return -1;
        }
        if (v == -1 && PyErr_Occurred()) return -1;
        out->arg = v;
        out->flags = HS_F_ARG;
        out->arg_obj = arg;
    }
    return 0;
}

/* An unsigned 64-bit handle from an int (or an int-like, such as a ctypes pointer's value). */
static int stream_int(const char *fn, PyObject *v, uint64_t *out) {
    if (PyLong_Check(v)) {
        *out = PyLong_AsUnsignedLongLongMask(v);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "%s(): stream must be an int handle or an object with cuda_stream or __cuda_stream__ "
                 "(a torch, CuPy or numba stream), not %.100s", fn, Py_TYPE(v)->tp_name);
    return -1;
}

/* stream=: an int (a CUstream handle), an object with cuda_stream (torch: its stream_id
 * names the rows' stream), or one with __cuda_stream__ (CUDA's stream protocol: a method
 * returning (version, handle); CuPy, numba, cuda.core). Read once, here. */
static int parse_stream(const char *fn, PyObject *stream, hs_stream_spec *spec) {
    spec->given = 1;
    if (PyLong_Check(stream)) {
        if (stream_int(fn, stream, &spec->handle) < 0) return -1;
        spec->stream_id = spec->handle;
        return 0;
    }
    PyObject *h = NULL;
    if (PyObject_HasAttrString(stream, "cuda_stream")) {
        h = PyObject_GetAttrString(stream, "cuda_stream");
        if (!h) return -1;
        int rc = stream_int(fn, h, &spec->handle);
        Py_DECREF(h);
        if (rc < 0) return -1;
        spec->stream_id = spec->handle;
        PyObject *id = PyObject_HasAttrString(stream, "stream_id") ? PyObject_GetAttrString(stream, "stream_id") : NULL;
        if (id && PyLong_Check(id)) spec->stream_id = PyLong_AsUnsignedLongLongMask(id);
        Py_XDECREF(id);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyObject_HasAttrString(stream, "__cuda_stream__")) {
        h = PyObject_GetAttrString(stream, "__cuda_stream__");
        if (h && PyCallable_Check(h)) Py_SETREF(h, PyObject_CallNoArgs(h));
        if (!h) return -1;
        if (PyTuple_Check(h) && PyTuple_GET_SIZE(h) == 2) Py_SETREF(h, Py_NewRef(PyTuple_GET_ITEM(h, 1)));
        int rc = stream_int(fn, h, &spec->handle);
        Py_DECREF(h);
        spec->stream_id = spec->handle;
        return rc;
    }
    return stream_int(fn, stream, &spec->handle); /* the TypeError */
}

/* sync: a callable, True (configure(sync=)'s), or None/False (none). device: None, or
 * 'cuda' with the CUDA plug-in usable (driver loaded, a device seen): a RuntimeError
 * naming CUDA otherwise, raised at the span object's creation, never at enter or drain.
 * stream: with device= only. Last of the checks: nothing fails after it is set. */
static int check_sync_device(const char *fn, PyObject *sync, PyObject *device, PyObject *stream, span_args *out) {
    if (sync && sync != Py_None && sync != Py_False) {
        if (sync == Py_True) {
            if (!default_sync) {
                PyErr_Format(PyExc_RuntimeError,
                             "%s(sync=True) needs a sync function: hotspan.configure(sync=fn) first "
                             "(e.g. hotspan.sync.mlx), or pass sync=fn", fn);
                return -1;
            }
        } else if (!PyCallable_Check(sync)) {
            PyErr_Format(PyExc_TypeError, "%s(): sync must be a callable, True or None, not %.100s", fn,
                         Py_TYPE(sync)->tp_name);
            return -1;
        }
        out->sync = sync;
    }
    if (device == Py_None) device = NULL;
    if (stream == Py_None) stream = NULL;
    if (stream && !device) {
        PyErr_Format(PyExc_TypeError, "%s(): stream= is for device spans: pass device='cuda' too", fn);
        return -1;
    }
    if (device) {
        if (!PyUnicode_Check(device) || PyUnicode_CompareWithASCIIString(device, "cuda") != 0) {
            PyErr_Format(PyExc_ValueError, "%s(): device must be 'cuda' or None, not %R", fn, device);
            return -1;
        }
        if (stream && parse_stream(fn, stream, &out->stream_spec) < 0) return -1;
        if (!hs_device_cuda) {
            PyErr_Format(PyExc_RuntimeError, "%s(device='cuda'): CUDA is not available: this build has no CUDA plug-in",
                         fn);
            return -1;
        }
        if (hs_device_cuda->available(fn) < 0) return -1;
        out->device = device;
        out->stream = stream;
    }
    return 0;
}

/* (name, category=None, *, arg=None) from a vectorcall. */
static int parse_span_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           span_args *out, int extra) {
    PyObject *name = NULL, *category = NULL, *arg = NULL, *sync = NULL, *device = NULL, *stream = NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 2 positional arguments (name, category), %zd given",
                     fn, nargs);
        return -1;
    }
    if (nargs > 0) name = args[0];
    if (nargs > 1) category = args[1];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            PyObject *v = args[nargs + i];
            PyObject **slot = NULL;
            if (PyUnicode_CompareWithASCIIString(k, "arg") == 0) slot = &arg;
            else if (PyUnicode_CompareWithASCIIString(k, "category") == 0) slot = &category;
            else if (PyUnicode_CompareWithASCIIString(k, "name") == 0) slot = &name;
            else if ((extra & KW_SYNC) && PyUnicode_CompareWithASCIIString(k, "sync") == 0) slot = &sync;
            else if ((extra & KW_DEVICE) && PyUnicode_CompareWithASCIIString(k, "device") == 0) slot = &device;
            else if ((extra & KW_DEVICE) && PyUnicode_CompareWithASCIIString(k, "stream") == 0) slot = &stream;
            if (!slot) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, k);
                return -1;
            }
            if (*slot) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", fn, k);
                return -1;
            }
            *slot = v;
        }
    }
    if (check_span_args(fn, name, category, arg, out) < 0) return -1;
    return check_sync_device(fn, sync, device, stream, out);
}

/* ---- span ----------------------------------------------------------------------------- */

/* A span's bound __enter__ or __exit__, living inside the span object (see "bound methods
 * without an allocation" below). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *owner; /* the span it is part of; one reference to it while this one's count is > 0 */
} SpanBound;

typedef struct {
    PyObject_HEAD
    hs_site *site;
    int64_t arg;
    uint32_t flags;
    PyObject *name;
    PyObject *category; /* NULL: none */
    PyObject *arg_obj;  /* NULL: none */
    SpanBound bound_enter;
    SpanBound bound_exit;
} SpanObject;

typedef struct {
    PyObject_HEAD
    hs_site *site;
    int64_t arg;
    uint32_t flags;
    PyObject *func;
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *weakreflist;
    PyObject *name;
    PyObject *category;
} TracedObject;

/* A span with sync=: a subtype whose __exit__ calls the sync function first, so the plain
 * span's exit (the hot path) has no test for it at all. */
typedef struct {
    SpanObject base;
    PyObject *sync; /* a callable, or Py_True: default_sync at exit */
} SyncSpanObject;

static PyObject *decorate_with = NULL; /* hotspan._api._decorate_with(span, func) */

void hs_types_set_decorate(PyObject *fn) { Py_XSETREF(decorate_with, Py_XNewRef(fn)); }

/* ---- bound methods without an allocation ------------------------------------------------ */

/* Before 3.14, `with` binds __enter__ and __exit__ through their descriptors (BEFORE_WITH,
 * SETUP_WITH: _PyObject_LookupSpecial): for methods defined in C that is two new builtin
 * method objects a pass, each allocated, GC-tracked, untracked and freed again: ~600 of the
 * ~1300 instructions the no-op C `with` (the benchmark floor) costs on 3.11 (callgrind),
 * more than everything hotspan itself does for a span. A span keeps its two bound methods
 * inside itself instead: the descriptors below hand those out, reference-counted like any
 * object; the first holder also takes a reference to the span, and the last one's release
 * (the bound object's tp_dealloc) gives it back and frees nothing. Same methods, called the
 * same way, with the same errors; only `s.__enter__ is s.__enter__` is now True.
 * Off where it cannot hold or gains nothing: the free-threaded build (refused at import
 * anyway: its reference counts are not one field), debug builds that trace every object
 * (Py_TRACE_REFS: _Py_Dealloc would unlink an object that was never linked), and 3.14+,
 * whose LOAD_SPECIAL calls a C method descriptor unbound, allocating nothing. */
#if !defined(Py_GIL_DISABLED) && !defined(Py_TRACE_REFS) && PY_VERSION_HEX < 0x030E0000
#define HS_SPAN_INNER_BOUND 1
#endif

#ifdef HS_SPAN_INNER_BOUND
static PyTypeObject SpanBoundType;
static PyTypeObject SpanMethodType;
static PyObject *span_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
static PyObject *span_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static HS_COLD PyObject *no_keywords(const char *method) {
    PyErr_Format(PyExc_TypeError, "hotspan.span.%s() takes no keyword arguments", method);
    return NULL;
}

static PyObject *bound_enter_call(PyObject *b, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (HS_UNLIKELY(kwnames && PyTuple_GET_SIZE(kwnames))) return no_keywords("__enter__");
    return span_enter(((SpanBound *)b)->owner, args, PyVectorcall_NARGS(nargsf));
}

static PyObject *bound_exit_call(PyObject *b, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (HS_UNLIKELY(kwnames && PyTuple_GET_SIZE(kwnames))) return no_keywords("__exit__");
    return span_exit(((SpanBound *)b)->owner, args, PyVectorcall_NARGS(nargsf));
}

/* The last holder let go: give the span back its reference (the memory is the span's). */
static void span_bound_dealloc(SpanBound *b) { Py_DECREF(b->owner); }

static const char *span_bound_name(SpanBound *b) {
    return b->vectorcall == bound_enter_call ? "__enter__" : "__exit__";
}

static PyObject *span_bound_repr(SpanBound *b) {
    return PyUnicode_FromFormat("<bound method hotspan.span.%s of %R>", span_bound_name(b), b->owner);
}

static PyObject *span_bound_get_self(SpanBound *b, void *c) { (void)c; return Py_NewRef(b->owner); }
static PyObject *span_bound_get_name(SpanBound *b, void *c) {
    (void)c;
    return PyUnicode_FromString(span_bound_name(b));
}

static PyGetSetDef span_bound_getset[] = {
    {"__self__", (getter)span_bound_get_self, NULL, "The span.", NULL},
    {"__name__", (getter)span_bound_get_name, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanBoundType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.span_method",
    .tp_basicsize = sizeof(SpanBound),
    .tp_dealloc = (destructor)span_bound_dealloc,
    .tp_repr = (reprfunc)span_bound_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SpanBound, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A hotspan.span's __enter__ or __exit__, bound to it (kept inside the span: no allocation).",
    .tp_getset = span_bound_getset,
};

/* The descriptors in hotspan.span's dict for __enter__ and __exit__. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* unbound: hotspan.span.__exit__(s, *exc) */
    size_t offset;             /* where a span keeps this method bound to itself */
    const char *name;
    const char *doc;
} SpanMethod;

static PyObject *span_method_get(PyObject *descr, PyObject *obj, PyObject *type) {
    (void)type;
    SpanMethod *m = (SpanMethod *)descr;
    if (!obj) return Py_NewRef(descr); /* hotspan.span.__enter__: the unbound method */
    if (HS_UNLIKELY(!PyObject_TypeCheck(obj, &SpanType))) {
        PyErr_Format(PyExc_TypeError, "descriptor '%s' for 'hotspan.span' objects doesn't apply to a '%.100s' object",
                     m->name, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    SpanBound *b = (SpanBound *)((char *)obj + m->offset);
    if (Py_REFCNT(b) == 0) Py_INCREF(obj); /* its first holder: the span stays alive with it */
    Py_INCREF(b);
    return (PyObject *)b;
}

static PyObject *span_method_call(PyObject *descr, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    SpanMethod *m = (SpanMethod *)descr;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "unbound method hotspan.span.%s() needs an argument", m->name);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &SpanType)) {
        PyErr_Format(PyExc_TypeError, "descriptor '%s' for 'hotspan.span' objects doesn't apply to a '%.100s' object",
                     m->name, Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    SpanBound *b = (SpanBound *)((char *)args[0] + m->offset);
    return b->vectorcall((PyObject *)b, args + 1, nargs - 1, kwnames); /* the caller holds the span */
}

static PyObject *span_method_repr(SpanMethod *m) {
    return PyUnicode_FromFormat("<method '%s' of 'hotspan.span' objects>", m->name);
}
static PyObject *span_method_get_name(SpanMethod *m, void *c) { (void)c; return PyUnicode_FromString(m->name); }
static PyObject *span_method_get_qualname(SpanMethod *m, void *c) {
    (void)c;
    return PyUnicode_FromFormat("span.%s", m->name);
}
static PyObject *span_method_get_doc(SpanMethod *m, void *c) { (void)c; return PyUnicode_FromString(m->doc); }
static PyObject *span_method_get_objclass(SpanMethod *m, void *c) {
    (void)m;
    (void)c;
    return Py_NewRef((PyObject *)&SpanType);
}

static PyGetSetDef span_method_getset[] = {
    {"__name__", (getter)span_method_get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)span_method_get_qualname, NULL, NULL, NULL},
    {"__doc__", (getter)span_method_get_doc, NULL, NULL, NULL},
    {"__objclass__", (getter)span_method_get_objclass, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.span_method_descriptor",
    .tp_basicsize = sizeof(SpanMethod),
    .tp_repr = (reprfunc)span_method_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SpanMethod, vectorcall),
    /* METHOD_DESCRIPTOR: an explicit s.__exit__(...) is called unbound (LOAD_METHOD), no binding */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_getset = span_method_getset,
    .tp_descr_get = span_method_get,
};

static SpanMethod span_enter_method = {
    PyObject_HEAD_INIT(&SpanMethodType) span_method_call, offsetof(SpanObject, bound_enter), "__enter__",
    "Open the span on this thread.",
};
static SpanMethod span_exit_method = {
    PyObject_HEAD_INIT(&SpanMethodType) span_method_call, offsetof(SpanObject, bound_exit), "__exit__",
    "Close the span; an exception marks it error=True and propagates.",
};

#endif /* HS_SPAN_INNER_BOUND */

/* Every span object, once, when its memory is first set up (a recycled one keeps these). */
static inline void span_bound_init(SpanObject *o) {
#ifdef HS_SPAN_INNER_BOUND
    /* Count 0: nobody holds it. Zeroed by memset, not Py_SET_REFCNT: from 3.12 that leaves
     * alone a count that reads as immortal, which fresh memory's garbage may. */
    memset(&o->bound_enter, 0, sizeof o->bound_enter);
    Py_SET_TYPE(&o->bound_enter, &SpanBoundType);
    o->bound_enter.vectorcall = bound_enter_call;
    o->bound_enter.owner = (PyObject *)o;
    memset(&o->bound_exit, 0, sizeof o->bound_exit);
    Py_SET_TYPE(&o->bound_exit, &SpanBoundType);
    o->bound_exit.vectorcall = bound_exit_call;
    o->bound_exit.owner = (PyObject *)o;
#else
    (void)o;
#endif
}

int hs_types_init(void) {
#ifdef HS_SPAN_INNER_BOUND
    if (PyType_Ready(&SpanBoundType) < 0 || PyType_Ready(&SpanMethodType) < 0) return -1;
    /* over the method descriptors PyType_Ready made from span_methods (what other builds use) */
    if (PyDict_SetItemString(SpanType.tp_dict, "__enter__", (PyObject *)&span_enter_method) < 0 ||
        PyDict_SetItemString(SpanType.tp_dict, "__exit__", (PyObject *)&span_exit_method) < 0)
        return -1;
    PyType_Modified(&SpanType);
#endif
    return 0;
}

/* Plain span objects freed lately, kept for the next span(): a literal
 * `with hotspan.span("x", "c"):` makes and frees one object per pass, and the free list
 * turns that into two pointer moves instead of a trip through the allocator each way.
 * Each object handed out is still a fresh one (its own identity for its lifetime). With
 * the GIL only: the free-threaded build allocates (a shared list would need a lock). */
#ifndef Py_GIL_DISABLED
#define SPAN_FREE_MAX 64
static SpanObject *span_free_list[SPAN_FREE_MAX];
static int span_free_count = 0;
#endif

static inline SpanObject *span_alloc(void) {
#ifndef Py_GIL_DISABLED
    if (HS_LIKELY(span_free_count > 0)) {
        SpanObject *o = span_free_list[--span_free_count];
#if defined(Py_TRACE_REFS) || defined(Py_REF_DEBUG)
        (void)PyObject_Init((PyObject *)o, &SpanType); /* debug builds: count it again */
#else
        Py_SET_REFCNT(o, 1); /* its type is set already: PyObject_Init's call costs ~30 instructions */
#endif
        return o;
    }
#endif
    SpanObject *o = PyObject_New(SpanObject, &SpanType);
    if (o) span_bound_init(o);
    return o;
}

static PyObject *span_new_object(hs_site *site, PyObject *name, PyObject *category, int64_t arg, uint32_t flags,
                                 PyObject *arg_obj) {
    SpanObject *o = span_alloc();
    if (!o) return NULL;
    o->site = site;
    o->arg = arg;
    o->flags = flags;
    o->name = Py_NewRef(name);
    o->category = Py_XNewRef(category);
    o->arg_obj = Py_XNewRef(arg_obj);
    return (PyObject *)o;
}

static PyObject *sync_span_new(hs_site *site, span_args *a) {
    SyncSpanObject *o = PyObject_New(SyncSpanObject, &SyncSpanType);
    if (!o) return NULL;
    span_bound_init(&o->base);
    o->base.site = site;
    o->base.arg = a->arg;
    o->base.flags = a->flags;
    o->base.name = Py_NewRef(a->name);
    o->base.category = Py_XNewRef(a->category);
    o->base.arg_obj = Py_XNewRef(a->arg_obj);
    o->sync = Py_NewRef(a->sync);
    return (PyObject *)o;
}

static PyObject *device_span_new(hs_site *site, span_args *a);

static PyObject *span_make(span_args *a) {
    hs_site *site;
    if (a->device) {
        return lit_get(a->name, a->category, &site) < 0 ? NULL : device_span_new(site, a);
    }
    if (a->sync) {
        if (lit_get(a->name, a->category, &site) < 0) return NULL;
        return sync_span_new(site, a);
    }
    if (lit_get(a->name, a->category, &site) < 0) return NULL;
    return span_new_object(site, a->name, a->category, a->arg, a->flags, a->arg_obj);
}

/* The common call, span("x") or span("x", "c") with strings already in the cache: a
 * pointer compare stands for all the argument checks. */
static inline lit_entry *lit_hit_positional(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
#ifdef Py_GIL_DISABLED
    return NULL;
#else
    if (kwnames || nargs < 1 || nargs > 2) return NULL;
    PyObject *category = nargs == 2 && args[1] != Py_None ? args[1] : NULL;
    lit_entry *e = lit_slot(args[0], category);
    return e->name == args[0] && e->category == category && e->site ? e : NULL;
#endif
}

/* Every call but the warm cached literal: keywords, a first sight of (name, category),
 * sync= or device=, or an empty free list (hit: the cache entry when it matched). Out of line
 * (and cold) so that the hit path below is a leaf: no stack frame for the ~100-byte
 * span_args, no saved registers, no call (each costs instructions on every span). */
static HS_COLD PyObject *span_vectorcall_slow(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                              lit_entry *hit) {
    if (hit) return span_new_object(hit->site, hit->name, hit->category, 0, 0, NULL);
    span_args a;
    if (parse_span_args("span", args, nargs, kwnames, &a, KW_SYNC | KW_DEVICE) < 0) return NULL;
    return span_make(&a);
}

/* span(...) called from Python: CPython 3.11+ calls a static type's tp_vectorcall straight
 * from the specialised call instruction (PRECALL_BUILTIN_CLASS / CALL_BUILTIN_CLASS), with
 * no argument tuple, no type_call, no tp_new/tp_init. The literal's fast path: the identity
 * cache says (name, category) are known strings, the free list gives a recycled object, and
 * filling it is a few stores (the same fields span_new_object sets). */
static PyObject *span_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    (void)type;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    lit_entry *hit = lit_hit_positional(args, nargs, kwnames);
#if !defined(Py_GIL_DISABLED) && !defined(Py_TRACE_REFS) && !defined(Py_REF_DEBUG)
    if (HS_LIKELY(hit != NULL && span_free_count > 0)) {
        SpanObject *o = span_free_list[--span_free_count];
        Py_SET_REFCNT(o, 1); /* its type is set already (see span_alloc) */
        o->site = hit->site;
        o->arg = 0;
        o->flags = 0;
        o->name = Py_NewRef(hit->name);
        o->category = Py_XNewRef(hit->category);
        o->arg_obj = NULL;
        return (PyObject *)o;
    }
#endif
    return span_vectorcall_slow(args, nargs, kwnames, hit);
}

static PyObject *span_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"name", "category", "arg", "sync", "device", "stream", NULL};
    PyObject *name = NULL, *category = NULL, *arg = NULL, *sync = NULL, *device = NULL, *stream = NULL;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OOOO:span", kwlist, &name, &category, &arg, &sync, &device,
                                     &stream))
        return NULL;
    span_args a;
    if (check_span_args("span", name, category, arg, &a) < 0 ||
        check_sync_device("span", sync, device, stream, &a) < 0)
        return NULL;
    return span_make(&a);
}

static void span_dealloc(SpanObject *o) {
    Py_DECREF(o->name);
    Py_XDECREF(o->category);
    Py_XDECREF(o->arg_obj);
#ifndef Py_GIL_DISABLED
    /* subtypes (sync, device) have their own sizes: only plain spans are kept */
    if (HS_LIKELY(Py_IS_TYPE(o, &SpanType) && span_free_count < SPAN_FREE_MAX)) {
        span_free_list[span_free_count++] = o;
        return;
    }
#endif
    PyObject_Free(o);
}

static PyObject *span_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    (void)nargs;
    SpanObject *s = (SpanObject *)self;
    hs_enter(s->site, self, s->arg, s->flags);
    return Py_NewRef(self);
}

static PyObject *span_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    hs_exit(self, nargs > 0 && args[0] != Py_None);
    Py_RETURN_FALSE; /* never swallow the exception */
}

static PyObject *traced_make(hs_site *site, int64_t arg, uint32_t flags, PyObject *func, PyObject *name,
                             PyObject *category);

static PyObject *span_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    SpanObject *s = (SpanObject *)self;
    /* A classmethod object is not callable; the package's hook puts it back around the traced
       function, as it does a staticmethod. */
    if ((kwargs && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 1 ||
        !(PyCallable_Check(PyTuple_GET_ITEM(args, 0)) ||
          (decorate_with && PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), &PyClassMethod_Type)))) {
        PyErr_SetString(PyExc_TypeError, "a hotspan.span used as a decorator takes one callable");
        return NULL;
    }
    PyObject *func = PyTuple_GET_ITEM(args, 0);
    /* Decoration is rare: the package's hook copies __name__/__doc__ and handles async. */
    if (decorate_with) return PyObject_CallFunctionObjArgs(decorate_with, self, func, NULL);
    return traced_make(s->site, s->arg, s->flags, func, s->name, s->category);
}

static PyObject *span_repr(SpanObject *s) {
    if (s->arg_obj)
        return PyUnicode_FromFormat("hotspan.span(%R, %R, arg=%R)", s->name, s->category ? s->category : Py_None,
                                    s->arg_obj);
    return PyUnicode_FromFormat("hotspan.span(%R, %R)", s->name, s->category ? s->category : Py_None);
}

static PyObject *span_get_name(SpanObject *s, void *c) { (void)c; return Py_NewRef(s->name); }
static PyObject *span_get_category(SpanObject *s, void *c) {
    (void)c;
    return Py_NewRef(s->category ? s->category : Py_None);
}
static PyObject *span_get_arg(SpanObject *s, void *c) {
    (void)c;
    return Py_NewRef(s->arg_obj ? s->arg_obj : Py_None);
}

/* Pickled (and copied) as what made it: hotspan.span(name, category, arg=, sync=, device=,
 * stream=) again, a new span like this one (hotspan._api._unpickle_span), so that an object
 * holding a reused span goes to spawned workers, or through copy.deepcopy. Open or not,
 * the copy is closed: a span's open state belongs to the threads that entered it. */
static PyObject *span_reduce(PyObject *self, PyObject *unused) {
    (void)unused;
    SpanObject *s = (SpanObject *)self;
    static const char *const given[] = {"sync", "device", "stream"}; /* the subtypes' */
    PyObject *keywords = PyDict_New(), *api = NULL, *rebuild = NULL;
    if (!keywords) return NULL;
    if (s->arg_obj && PyDict_SetItemString(keywords, "arg", s->arg_obj) < 0) goto fail;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        if (!PyObject_HasAttrString(self, given[i])) continue; /* a plain span: none of them */
        PyObject *v = PyObject_GetAttrString(self, given[i]);
        if (!v) goto fail;
        int rc = v == Py_None ? 0 : PyDict_SetItemString(keywords, given[i], v);
        Py_DECREF(v);
        if (rc < 0) goto fail;
    }
    api = PyImport_ImportModule("hotspan._api");
    if (!api) goto fail;
    rebuild = PyObject_GetAttrString(api, "_unpickle_span");
    Py_DECREF(api);
    if (!rebuild) goto fail;
    return Py_BuildValue("(N(OON))", rebuild, s->name, s->category ? s->category : Py_None, keywords);
fail:
    Py_DECREF(keywords);
    return NULL;
}

static PyMethodDef span_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))span_enter, METH_FASTCALL, "Open the span on this thread."},
    {"__exit__", (PyCFunction)(void (*)(void))span_exit, METH_FASTCALL,
     "Close the span; an exception marks it error=True and propagates."},
    {"__reduce__", (PyCFunction)span_reduce, METH_NOARGS, "How pickle and copy send it: as the arguments that made it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef span_getset[] = {
    {"name", (getter)span_get_name, NULL, "The span's name.", NULL},
    {"category", (getter)span_get_category, NULL, "The span's own category (None: inherit the parent's path).", NULL},
    {"arg", (getter)span_get_arg, NULL, "The integer payload, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan.span",
    .tp_basicsize = sizeof(SpanObject),
    .tp_dealloc = (destructor)span_dealloc,
    .tp_repr = (reprfunc)span_repr,
    .tp_call = span_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "span(name, category=None, *, arg=None, sync=None, device=None, stream=None)\n--\n\n"
              "A named, timed interval: a context manager (reusable, re-entrant, usable from many\n"
              "threads at once) and a decorator.\n\n"
              "sync: a function called right before the span ends, while recording is on (e.g.\n"
              "hotspan.sync.mlx, so the span covers device work its body started); True: the one\n"
              "set by configure(sync=). An exception from it marks the span as an error and\n"
              "propagates.\n"
              "device: 'cuda' also records a CUDA event pair around the body, through the CUDA\n"
              "driver (no torch needed); drain() turns completed pairs into device rows (never\n"
              "waiting for the GPU). Without CUDA (no driver, or no GPU) a RuntimeError naming\n"
              "CUDA is raised here.\n"
              "stream: the stream the events are recorded on: an int handle, or an object with\n"
              "cuda_stream or __cuda_stream__ (torch, CuPy, numba); default: torch's current\n"
              "stream when torch is loaded, else the default stream.",
    .tp_methods = span_methods,
    .tp_getset = span_getset,
    .tp_new = span_new,
    .tp_vectorcall = span_vectorcall,
};

/* The sync function of a span (NULL: none now: sync=True with configure(sync=None)). */
static inline PyObject *sync_fn(PyObject *sync) { return sync == Py_True ? default_sync : sync; }

static PyObject *sync_span_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *fn = sync_fn(((SyncSpanObject *)self)->sync);
    /* disabled: no sync runs (the span was not recorded: nothing to wait for) */
    if (fn && atomic_load_explicit(&hs_enabled, memory_order_relaxed)) {
        PyObject *r = PyObject_CallNoArgs(fn);
        if (!r) {
            hs_exit(self, 1); /* the sync's exception propagates (chained to the body's) */
            return NULL;
        }
        Py_DECREF(r);
    }
    hs_exit(self, nargs > 0 && args[0] != Py_None); /* the end timestamp: after the sync */
    Py_RETURN_FALSE;
}

static void sync_span_dealloc(SyncSpanObject *o) {
    Py_DECREF(o->sync);
    span_dealloc(&o->base);
}

static PyObject *sync_span_get_sync(SyncSpanObject *s, void *c) { (void)c; return Py_NewRef(s->sync); }

static PyObject *sync_span_repr(SyncSpanObject *s) {
    return PyUnicode_FromFormat("hotspan.span(%R, %R, arg=%R, sync=%R)", s->base.name,
                                s->base.category ? s->base.category : Py_None,
                                s->base.arg_obj ? s->base.arg_obj : Py_None, s->sync);
}

static PyMethodDef sync_span_methods[] = {
    {"__exit__", (PyCFunction)(void (*)(void))sync_span_exit, METH_FASTCALL,
     "Call the sync function (recording on), then close the span."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sync_span_getset[] = {
    {"sync", (getter)sync_span_get_sync, NULL, "The sync function (True: configure(sync=)'s).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SyncSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.sync_span",
    .tp_basicsize = sizeof(SyncSpanObject),
    .tp_dealloc = (destructor)sync_span_dealloc,
    .tp_repr = (reprfunc)sync_span_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A hotspan.span made with sync=: calls its sync function right before it ends.",
    .tp_methods = sync_span_methods,
    .tp_getset = sync_span_getset,
    .tp_base = &SpanType,
};

/* ---- device spans ----------------------------------------------------------------------- */

/* A span made with device="cuda": a subtype whose __enter__/__exit__ also call the CUDA
 * plug-in (hs_device.h; hs_cuda.c records the event pair through the driver), in C: no
 * Python runs per device span; the plain span's enter/exit stay untouched. */
typedef struct {
    SpanObject base;
    PyObject *sync;          /* NULL: none; else as SyncSpanObject's */
    PyObject *stream_obj;    /* stream= as given (kept alive with the span), or NULL */
    hs_stream_spec stream;   /* read from it once, at creation */
} DeviceSpanObject;

static PyObject *device_span_new(hs_site *site, span_args *a) {
    DeviceSpanObject *o = PyObject_New(DeviceSpanObject, &DeviceSpanType);
    if (!o) return NULL;
    span_bound_init(&o->base);
    o->base.site = site;
    o->base.arg = a->arg;
    o->base.flags = a->flags;
    o->base.name = Py_NewRef(a->name);
    o->base.category = Py_XNewRef(a->category);
    o->base.arg_obj = Py_XNewRef(a->arg_obj);
    o->sync = Py_XNewRef(a->sync);
    o->stream_obj = Py_XNewRef(a->stream);
    o->stream = a->stream_spec;
    return (PyObject *)o;
}

/* The innermost open frame of this thread (task), if self opened it; NULL otherwise. */
static hs_frame *own_top_frame(PyObject *self) {
    hs_tstate *t = hs_tls;
    if (!t) return NULL;
    hs_ctx_check(t);
    if (!t->depth || t->stack[t->depth - 1].owner != self) return NULL;
    return &t->stack[t->depth - 1];
}

static PyObject *device_span_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    (void)nargs;
    DeviceSpanObject *s = (DeviceSpanObject *)self;
    if (!hs_enter(s->base.site, self, s->base.arg, s->base.flags)) return Py_NewRef(self); /* disabled */
    hs_tstate *t = hs_tls;
    hs_frame *f = &t->stack[t->depth - 1];
    /* The host span's id (its seq), depth and (name, category path) pair: the device row
     * takes them at drain. */
    if (hs_device_cuda->start(&s->stream, f->seq, t->depth - 1, f->pair) < 0) {
        hs_exit(self, 1); /* the host span closes as an error; the exception propagates */
        return NULL;
    }
    return Py_NewRef(self);
}

static PyObject *device_span_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    DeviceSpanObject *s = (DeviceSpanObject *)self;
    hs_frame *f = own_top_frame(self);
    if (f) { /* recorded at enter: the end event, then the sync (if any), then the end */
        if (hs_device_cuda->stop(f->seq, f->arg, (f->flags & HS_F_ARG) != 0, nargs > 0 && args[0] != Py_None) < 0) {
            hs_exit(self, 1);
            return NULL;
        }
        PyObject *r;
        PyObject *fn = s->sync ? sync_fn(s->sync) : NULL;
        if (fn && atomic_load_explicit(&hs_enabled, memory_order_relaxed)) {
            r = PyObject_CallNoArgs(fn);
            if (!r) {
                hs_exit(self, 1);
                return NULL;
            }
            Py_DECREF(r);
        }
    }
    hs_exit(self, nargs > 0 && args[0] != Py_None);
    Py_RETURN_FALSE;
}

static void device_span_dealloc(DeviceSpanObject *o) {
    Py_XDECREF(o->sync);
    Py_XDECREF(o->stream_obj);
    span_dealloc(&o->base);
}

static PyObject *device_span_get_device(DeviceSpanObject *s, void *c) { (void)s; (void)c; return PyUnicode_FromString("cuda"); }
static PyObject *device_span_get_stream(DeviceSpanObject *s, void *c) {
    (void)c;
    return Py_NewRef(s->stream_obj ? s->stream_obj : Py_None);
}
static PyObject *device_span_get_sync(DeviceSpanObject *s, void *c) {
    (void)c;
    return Py_NewRef(s->sync ? s->sync : Py_None);
}

static PyObject *device_span_repr(DeviceSpanObject *s) {
    return PyUnicode_FromFormat("hotspan.span(%R, %R, arg=%R, device='cuda')", s->base.name,
                                s->base.category ? s->base.category : Py_None,
                                s->base.arg_obj ? s->base.arg_obj : Py_None);
}

static PyMethodDef device_span_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))device_span_enter, METH_FASTCALL,
     "Open the span on this thread and record the start event on the current stream."},
    {"__exit__", (PyCFunction)(void (*)(void))device_span_exit, METH_FASTCALL,
     "Record the end event, then close the span."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef device_span_getset[] = {
    {"device", (getter)device_span_get_device, NULL, "The device whose time is recorded ('cuda').", NULL},
    {"sync", (getter)device_span_get_sync, NULL, "The sync function, or None.", NULL},
    {"stream", (getter)device_span_get_stream, NULL, "The stream given (None: the current one at enter).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject DeviceSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.device_span",
    .tp_basicsize = sizeof(DeviceSpanObject),
    .tp_dealloc = (destructor)device_span_dealloc,
    .tp_repr = (reprfunc)device_span_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A hotspan.span made with device='cuda': also records a CUDA event pair, resolved at drain.",
    .tp_methods = device_span_methods,
    .tp_getset = device_span_getset,
    .tp_base = &SpanType,
};

/* ---- traced functions ----------------------------------------------------------------- */

static PyObject *traced_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    TracedObject *t = (TracedObject *)self;
    int open = hs_enter(t->site, self, t->arg, t->flags);
    PyObject *res = PyObject_Vectorcall(t->func, args, nargsf, kwnames);
    if (open) hs_exit(self, res == NULL);
    return res;
}

static PyObject *traced_make(hs_site *site, int64_t arg, uint32_t flags, PyObject *func, PyObject *name,
                             PyObject *category) {
    TracedObject *t = PyObject_GC_New(TracedObject, &TracedType);
    if (!t) return NULL;
    t->site = site;
    t->arg = arg;
    t->flags = flags;
    t->func = Py_NewRef(func);
    t->vectorcall = traced_vectorcall;
    t->dict = NULL;
    t->weakreflist = NULL;
    t->name = Py_NewRef(name);
    t->category = Py_XNewRef(category);
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

static int traced_traverse(TracedObject *t, visitproc visit, void *arg) {
    Py_VISIT(t->func);
    Py_VISIT(t->dict);
    return 0;
}

static int traced_clear(TracedObject *t) {
    Py_CLEAR(t->func);
    Py_CLEAR(t->dict);
    return 0;
}

static void traced_dealloc(TracedObject *t) {
    PyObject_GC_UnTrack(t);
    if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
    traced_clear(t);
    Py_XDECREF(t->name);
    Py_XDECREF(t->category);
    PyObject_GC_Del(t);
}

static PyObject *traced_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static PyObject *traced_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *traced_repr(TracedObject *t) {
    return PyUnicode_FromFormat("<hotspan.traced %R of %R>", t->name, t->func);
}

static PyObject *traced_get_span_name(TracedObject *t, void *c) { (void)c; return Py_NewRef(t->name); }
static PyObject *traced_get_span_category(TracedObject *t, void *c) {
    (void)c;
    return Py_NewRef(t->category ? t->category : Py_None);
}

/* The object ``__module__`` and ``__qualname__`` name (the names update_wrapper copied from
 * the function), found where its module is loaded now; NULL, with no error set, where it
 * is not (a local function, a callable without them, a module not loaded). */
static PyObject *traced_named_object(PyObject *self) {
    PyObject *module_name = PyObject_GetAttrString(self, "__module__");
    PyObject *qualname = PyObject_GetAttrString(self, "__qualname__");
    PyObject *parts = NULL, *obj = NULL, *dot = NULL;
    if (!module_name || !qualname || !PyUnicode_Check(module_name) || !PyUnicode_Check(qualname)) goto done;
    obj = PyImport_GetModule(module_name); /* loaded, not imported here: no import at pickling */
    if (!obj) goto done;
    dot = PyUnicode_FromString(".");
    if (dot) parts = PyUnicode_Split(qualname, dot, -1);
    Py_XDECREF(dot);
    if (!parts) {
        Py_CLEAR(obj);
        goto done;
    }
    for (Py_ssize_t i = 0; obj && i < PyList_GET_SIZE(parts); i++) /* "<locals>": no such attribute */
        Py_SETREF(obj, PyObject_GetAttr(obj, PyList_GET_ITEM(parts, i)));
done:
    Py_XDECREF(module_name);
    Py_XDECREF(qualname);
    Py_XDECREF(parts);
    PyErr_Clear();
    return obj;
}

/* Pickled as a function is: by reference where its module's attribute of its qualified
 * name is this very object (the decorator's case; functools.lru_cache's wrapper does the
 * same), so multiprocessing can hand it to a pool's workers; hotspan._api._reduce_named_traced
 * says how (in __main__, as the function it wraps, for cloudpickle's sake). Elsewhere
 * (traced(f) kept under another name) by value: the function, itself by reference, and the
 * span's name, category and arg, wrapped again where it is unpickled
 * (hotspan._api._unpickle_traced). */
static PyObject *traced_reduce_ex(PyObject *self, PyObject *protocol) {
    TracedObject *t = (TracedObject *)self;
    PyObject *named = traced_named_object(self);
    Py_XDECREF(named);
    if (!t->func) {
        if (named == self) return PyObject_GetAttrString(self, "__qualname__");
        PyErr_SetString(PyExc_TypeError, "cannot pickle a cleared hotspan.traced_function");
        return NULL;
    }
    PyObject *api = PyImport_ImportModule("hotspan._api");
    if (!api) return NULL;
    PyObject *reduce = PyObject_GetAttrString(api, named == self ? "_reduce_named_traced" : "_unpickle_traced");
    Py_DECREF(api);
    if (!reduce) return NULL;
    PyObject *arg = (t->flags & HS_F_ARG) ? PyLong_FromLongLong(t->arg) : Py_NewRef(Py_None);
    if (!arg) {
        Py_DECREF(reduce);
        return NULL;
    }
    PyObject *category = t->category ? t->category : Py_None;
    if (named == self) {
        PyObject *how = PyObject_CallFunction(reduce, "OOOONO", self, t->func, t->name, category, arg, protocol);
        Py_DECREF(reduce);
        return how;
    }
    return Py_BuildValue("(N(OOON))", reduce, t->func, t->name, category, arg);
}

static PyMethodDef traced_methods[] = {
    {"__reduce_ex__", (PyCFunction)traced_reduce_ex, METH_O, "How pickle sends it: by reference, as a function."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"span_name", (getter)traced_get_span_name, NULL, "The name its spans are recorded under.", NULL},
    {"span_category", (getter)traced_get_span_category, NULL, "The category its spans are recorded under.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TracedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan.traced_function",
    .tp_basicsize = sizeof(TracedObject),
    .tp_dealloc = (destructor)traced_dealloc,
    .tp_vectorcall_offset = offsetof(TracedObject, vectorcall),
    .tp_repr = (reprfunc)traced_repr,
    .tp_call = traced_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A function recorded as a span on each call (made by hotspan.traced or a span used as a decorator).",
    .tp_traverse = (traverseproc)traced_traverse,
    .tp_clear = (inquiry)traced_clear,
    .tp_weaklistoffset = offsetof(TracedObject, weakreflist),
    .tp_getset = traced_getset,
    .tp_methods = traced_methods,
    .tp_descr_get = traced_descr_get,
    .tp_dictoffset = offsetof(TracedObject, dict),
};

/* _wrap(func, name, category=None, arg=None): a C traced function (no async check). */
PyObject *py_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)mod;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "_wrap(func, name, category=None, *, arg=None)");
        return NULL;
    }
    PyObject *func = args[0];
    if (!PyCallable_Check(func)) {
        PyErr_Format(PyExc_TypeError, "traced(): expected a callable, not %.100s", Py_TYPE(func)->tp_name);
        return NULL;
    }
    span_args a;
    if (parse_span_args("traced", args + 1, nargs - 1, kwnames, &a, 0) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    return traced_make(site, a.arg, a.flags, func, a.name, a.category);
}

/* ---- explicit begin / end, instants ----------------------------------------------------- */

/* Frames begun with sync=: their sync functions by span id (frame bit HS_FRAME_SYNC, never
 * written to a record). */
static PyObject *begin_syncs = NULL;
#define HS_FRAME_SYNC 0x100u

/* end(): the sync of a begun frame about to close (consumed); 0, or -1 with the sync's
 * exception set. */
static int run_begin_sync(hs_frame *f) {
    f->flags &= ~HS_FRAME_SYNC;
    PyObject *key = PyLong_FromUnsignedLongLong(f->seq);
    if (!key) return -1;
    PyObject *fn = begin_syncs ? PyDict_GetItemWithError(begin_syncs, key) : NULL;
    Py_XINCREF(fn);
    if (fn && PyDict_DelItem(begin_syncs, key) < 0) PyErr_Clear();
    Py_DECREF(key);
    if (!fn) return PyErr_Occurred() ? -1 : 0;
    PyObject *call = sync_fn(fn);
    int rc = 0;
    if (call && atomic_load_explicit(&hs_enabled, memory_order_relaxed)) {
        PyObject *r = PyObject_CallNoArgs(call);
        if (!r) rc = -1;
        Py_XDECREF(r);
    }
    Py_DECREF(fn);
    return rc;
}

PyObject *py_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)mod;
    lit_entry *hit = lit_hit_positional(args, nargs, kwnames);
    if (HS_LIKELY(hit != NULL)) {
        if (!hs_enter(hit->site, hs_owner_begin, 0, 0)) return PyLong_FromLong(-1);
        return PyLong_FromLong((long)hs_tls->depth - 1);
    }
    span_args a;
    if (parse_span_args("begin", args, nargs, kwnames, &a, KW_SYNC) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    if (!hs_enter(site, hs_owner_begin, a.arg, a.flags)) return PyLong_FromLong(-1);
    if (a.sync) {
        /* end() calls it: kept by the frame's id (unique), the frame marked for end(). */
        hs_frame *f = &hs_tls->stack[hs_tls->depth - 1];
        PyObject *key = PyLong_FromUnsignedLongLong(f->seq);
        if (!key || (!begin_syncs && !(begin_syncs = PyDict_New())) ||
            PyDict_SetItem(begin_syncs, key, a.sync) < 0) {
            Py_XDECREF(key);
            hs_close_top(hs_tls, hs_ticks(), 1);
            return NULL;
        }
        Py_DECREF(key);
        f->flags |= HS_FRAME_SYNC;
    }
    /* the token is the frame's depth: a small int, so no allocation for depth < 257 */
    return PyLong_FromLong((long)hs_tls->depth - 1);
}

PyObject *py_end(PyObject *mod, PyObject *tok) {
    (void)mod;
    uint64_t end = hs_ticks();
    if (!PyLong_Check(tok)) {
        PyErr_Format(PyExc_TypeError, "end(): token must be the int returned by begin(), not %.100s",
                     Py_TYPE(tok)->tp_name);
        return NULL;
    }
    long k = PyLong_AsLong(tok);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < 0) Py_RETURN_NONE; /* begun while recording was off */
    hs_tstate *t = hs_tls;
    if (t) hs_ctx_check(t); /* the token is a depth in this task's stack */
    if (!t || (unsigned long)k >= t->depth || t->stack[k].owner != hs_owner_begin) {
        PyErr_Format(PyExc_RuntimeError,
                     "end(): token %ld does not match a span opened by begin() and still open on this thread", k);
        return NULL;
    }
    /* spans opened after it and left open close with it */
    int failed = 0;
    while (t->depth > (uint32_t)k) {
        hs_frame *f = &t->stack[t->depth - 1];
        if (HS_UNLIKELY(f->flags & HS_FRAME_SYNC)) {
            int err = run_begin_sync(f) < 0;
            if (err && !failed) failed = 1; /* the first sync's exception is raised */
            else if (err) PyErr_Clear();
            hs_close_top(t, hs_ticks(), err);
            continue;
        }
        hs_close_top(t, end, 0);
    }
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* _set_arg(n): the arg of the calling task's innermost open span (for proxies' size=,
 * known only once the call returned). No open span: nothing to set. */
PyObject *py_set_arg(PyObject *mod, PyObject *v) {
    (void)mod;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "_set_arg(): n must be an int, not %.100s", Py_TYPE(v)->tp_name);
        return NULL;
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "_set_arg(): n does not fit in a signed 64-bit integer");
        return NULL;
    }
    if (n == -1 && PyErr_Occurred()) return NULL;
    hs_tstate *t = hs_tls;
    if (!t) Py_RETURN_NONE;
    hs_ctx_check(t);
    if (!t->depth) Py_RETURN_NONE;
    hs_frame *f = &t->stack[t->depth - 1];
    if (!f->owner) Py_RETURN_NONE; /* the creator's span under a task's roots: not this task's */
    f->arg = n;
    f->flags |= HS_F_ARG;
    Py_RETURN_NONE;
}

PyObject *py_instant(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)mod;
    lit_entry *hit = lit_hit_positional(args, nargs, kwnames);
    if (HS_LIKELY(hit != NULL)) {
        hs_instant(hit->site, 0, 0);
        Py_RETURN_NONE;
    }
    span_args a;
    if (parse_span_args("instant", args, nargs, kwnames, &a, 0) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    hs_instant(site, a.arg, a.flags);
    Py_RETURN_NONE;
}

/* counter(name, value): a value at a time (hs_recorder.h's hs_counter). The warm path: the
 * name's cached site (the same cache a span's literal hits) and a float or int value. */
PyObject *py_counter(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (HS_UNLIKELY(nargs != 2)) {
        PyErr_Format(PyExc_TypeError, "counter() takes 2 arguments (name, value), %zd given", nargs);
        return NULL;
    }
    PyObject *name = args[0], *v = args[1];
    double value;
    if (HS_LIKELY(PyFloat_CheckExact(v))) {
        value = PyFloat_AS_DOUBLE(v);
    } else if (PyLong_Check(v) && !PyBool_Check(v)) {
        value = PyLong_AsDouble(v);
        if (value == -1.0 && PyErr_Occurred()) return NULL;
    } else if (PyFloat_Check(v)) {
        value = PyFloat_AS_DOUBLE(v);
    } else {
        PyErr_Format(PyExc_TypeError, "counter(): value must be an int or a float, not %.100s", Py_TYPE(v)->tp_name);
        return NULL;
    }
    hs_site *site;
#ifndef Py_GIL_DISABLED
    lit_entry *e = lit_slot(name, NULL);
    if (HS_LIKELY(e->name == name && e->category == NULL && e->site)) {
        hs_counter(e->site->root_pair, value);
        Py_RETURN_NONE;
    }
#endif
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "counter(): name must be a str, not %.100s", Py_TYPE(name)->tp_name);
        return NULL;
    }
    site = site_for(name, NULL);
    if (!site) return NULL;
    hs_counter(site->root_pair, value);
    Py_RETURN_NONE;
}

/* ---- the benchmark floor -------------------------------------------------------------- */

/* A context manager whose __enter__/__exit__ do nothing, defined as any C type defines them
 * (METH_FASTCALL methods, no allocation of its own): what `with` itself costs on a C object,
 * the floor the benchmarks race. A span does less than this where it binds its methods
 * without allocating (see "bound methods without an allocation"). */
static PyObject *noop_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args; (void)nargs;
    return Py_NewRef(self);
}
static PyObject *noop_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self; (void)args; (void)nargs;
    Py_RETURN_FALSE;
}
static PyMethodDef noop_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))noop_enter, METH_FASTCALL, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))noop_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
PyTypeObject NoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.NoopContext",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A no-op C context manager: the benchmark floor.",
    .tp_methods = noop_methods,
    .tp_new = PyType_GenericNew,
};
