/* hs_module: the Python glue of hotspan._native, the one compiled module that owns all
 * shared state (rings, registry, intern tables live in the C files beside it).
 *
 * Speed notes (3.11, measured in benchmarks/bench_overhead.py):
 * - `with` costs a bound-method lookup per __enter__/__exit__ whatever we do; we keep each
 *   to one METH_FASTCALL C call (METH_NOARGS costs ~9 ns more) and allocate nothing.
 * - a literal `hotspan.span("x", "c")` goes through the type's vectorcall and a
 *   pointer-keyed cache of interned sites, so it never hashes or encodes the strings.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hs_live.h"
#include "hs_recorder.h"
#include "include/hotspan.h"

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
 * in, so a hit needs no type checks. An entry also holds the span object for those
 * strings with no arg: spans are immutable and their nesting lives with the thread, so a
 * literal `with hotspan.span("x", "c"):` can hand back that one object instead of
 * allocating (and freeing) one per iteration. */
typedef struct {
    PyObject *name;
    PyObject *category; /* NULL: none */
    hs_site *site;
    PyObject *span;     /* span(name, category) with no arg */
} lit_entry;
#define LIT_SIZE 2048
static lit_entry lit_cache[LIT_SIZE];

static inline lit_entry *lit_slot(PyObject *name, PyObject *category) {
    size_t h = (((uintptr_t)name >> 4) ^ (((uintptr_t)category >> 4) * 0x9e3779b1u)) & (LIT_SIZE - 1);
    return &lit_cache[h];
}

static PyObject *span_new_object(hs_site *site, PyObject *name, PyObject *category, int64_t arg, uint32_t flags,
                                 PyObject *arg_obj);

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
    PyObject *obj = span_new_object(site, name, category, 0, 0, NULL);
    if (!obj) return NULL;
    lit_entry *e = lit_slot(name, category);
    Py_INCREF(name);
    Py_XINCREF(category);
    LIT_LOCK();
    PyObject *old_name = e->name, *old_category = e->category, *old_span = e->span;
    e->name = name;
    e->category = category;
    e->site = site;
    e->span = obj;
    LIT_UNLOCK();
    Py_XDECREF(old_name);
    Py_XDECREF(old_category);
    Py_XDECREF(old_span);
    return e;
}

#ifdef Py_GIL_DISABLED
/* Free-threaded: copy the entry out under the lock. */
static int lit_get(PyObject *name, PyObject *category, hs_site **site, PyObject **span) {
    lit_entry *e = lit_slot(name, category);
    int hit = 0;
    LIT_LOCK();
    if (e->name == name && e->category == category && e->site) {
        *site = e->site;
        if (span) *span = Py_NewRef(e->span);
        hit = 1;
    }
    LIT_UNLOCK();
    if (hit) return 0;
    if (!lit_fill(name, category)) return -1;
    return lit_get(name, category, site, span);
}
#else
/* With the GIL nothing changes an entry between the check and the use. */
static inline int lit_get(PyObject *name, PyObject *category, hs_site **site, PyObject **span) {
    lit_entry *e = lit_slot(name, category);
    if (HS_UNLIKELY(e->name != name || e->category != category || !e->site)) {
        e = lit_fill(name, category);
        if (!e) return -1;
    }
    *site = e->site;
    if (span) *span = Py_NewRef(e->span);
    return 0;
}
#endif

static hs_site *site_for(PyObject *name, PyObject *category) {
    hs_site *site;
    return lit_get(name, category, &site, NULL) < 0 ? NULL : site;
}

/* ---- argument checks ------------------------------------------------------------------ */

typedef struct {
    PyObject *name;
    PyObject *category; /* NULL: none */
    int64_t arg;
    uint32_t flags;
    PyObject *arg_obj; /* borrowed; NULL: none */
} span_args;

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

/* (name, category=None, *, arg=None) from a vectorcall. */
static int parse_span_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           span_args *out) {
    PyObject *name = NULL, *category = NULL, *arg = NULL;
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
    return check_span_args(fn, name, category, arg, out);
}

/* ---- span ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    hs_site *site;
    int64_t arg;
    uint32_t flags;
    PyObject *name;
    PyObject *category; /* NULL: none */
    PyObject *arg_obj;  /* NULL: none */
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

static PyTypeObject SpanType;
static PyTypeObject TracedType;
static PyObject *decorate_hook = NULL; /* hotspan._api._decorate_with(span, func) */
static PyObject *thread_name_hook = NULL;

static PyObject *span_new_object(hs_site *site, PyObject *name, PyObject *category, int64_t arg, uint32_t flags,
                                 PyObject *arg_obj) {
    SpanObject *o = PyObject_New(SpanObject, &SpanType);
    if (!o) return NULL;
    o->site = site;
    o->arg = arg;
    o->flags = flags;
    o->name = Py_NewRef(name);
    o->category = Py_XNewRef(category);
    o->arg_obj = Py_XNewRef(arg_obj);
    return (PyObject *)o;
}

static PyObject *span_make(span_args *a) {
    hs_site *site;
    PyObject *shared;
    if (!a->arg_obj) return lit_get(a->name, a->category, &site, &shared) < 0 ? NULL : shared;
    if (lit_get(a->name, a->category, &site, NULL) < 0) return NULL;
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

static PyObject *span_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    (void)type;
    lit_entry *hit = lit_hit_positional(args, PyVectorcall_NARGS(nargsf), kwnames);
    if (HS_LIKELY(hit != NULL)) return Py_NewRef(hit->span);
    span_args a;
    if (parse_span_args("span", args, PyVectorcall_NARGS(nargsf), kwnames, &a) < 0) return NULL;
    return span_make(&a);
}

static PyObject *span_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"name", "category", "arg", NULL};
    PyObject *name = NULL, *category = NULL, *arg = NULL;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$O:span", kwlist, &name, &category, &arg)) return NULL;
    span_args a;
    if (check_span_args("span", name, category, arg, &a) < 0) return NULL;
    return span_make(&a);
}

static void span_dealloc(SpanObject *o) {
    Py_DECREF(o->name);
    Py_XDECREF(o->category);
    Py_XDECREF(o->arg_obj);
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
    if ((kwargs && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 1 ||
        !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "a hotspan.span used as a decorator takes one callable");
        return NULL;
    }
    PyObject *func = PyTuple_GET_ITEM(args, 0);
    /* Decoration is rare: the package's hook copies __name__/__doc__ and handles async. */
    if (decorate_hook) return PyObject_CallFunctionObjArgs(decorate_hook, self, func, NULL);
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

static PyMethodDef span_methods[] = {
    {"__enter__", (PyCFunction)(void (*)(void))span_enter, METH_FASTCALL, "Open the span on this thread."},
    {"__exit__", (PyCFunction)(void (*)(void))span_exit, METH_FASTCALL,
     "Close the span; an exception marks it error=True and propagates."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef span_getset[] = {
    {"name", (getter)span_get_name, NULL, "The span's name.", NULL},
    {"category", (getter)span_get_category, NULL, "The span's own category (None: inherit the parent's path).", NULL},
    {"arg", (getter)span_get_arg, NULL, "The integer payload, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan.span",
    .tp_basicsize = sizeof(SpanObject),
    .tp_dealloc = (destructor)span_dealloc,
    .tp_repr = (reprfunc)span_repr,
    .tp_call = span_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "span(name, category=None, *, arg=None)\n--\n\n"
              "A named, timed interval: a context manager (reusable, re-entrant, usable from many\n"
              "threads at once) and a decorator.",
    .tp_methods = span_methods,
    .tp_getset = span_getset,
    .tp_new = span_new,
    .tp_vectorcall = span_vectorcall,
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

static PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"span_name", (getter)traced_get_span_name, NULL, "The name its spans are recorded under.", NULL},
    {"span_category", (getter)traced_get_span_category, NULL, "The category its spans are recorded under.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TracedType = {
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
    .tp_descr_get = traced_descr_get,
    .tp_dictoffset = offsetof(TracedObject, dict),
};

/* _wrap(func, name, category=None, arg=None): a C traced function (no async check). */
static PyObject *py_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
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
    if (parse_span_args("traced", args + 1, nargs - 1, kwnames, &a) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    return traced_make(site, a.arg, a.flags, func, a.name, a.category);
}

/* ---- explicit begin / end, instants ----------------------------------------------------- */

static PyObject *py_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)mod;
    lit_entry *hit = lit_hit_positional(args, nargs, kwnames);
    if (HS_LIKELY(hit != NULL)) {
        if (!hs_enter(hit->site, hs_owner_begin, 0, 0)) return PyLong_FromLong(-1);
        return PyLong_FromLong((long)hs_tls->depth - 1);
    }
    span_args a;
    if (parse_span_args("begin", args, nargs, kwnames, &a) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    if (!hs_enter(site, hs_owner_begin, a.arg, a.flags)) return PyLong_FromLong(-1);
    /* the token is the frame's depth: a small int, so no allocation for depth < 257 */
    return PyLong_FromLong((long)hs_tls->depth - 1);
}

static PyObject *py_end(PyObject *mod, PyObject *tok) {
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
    if (!t || (unsigned long)k >= t->depth || t->stack[k].owner != hs_owner_begin) {
        PyErr_Format(PyExc_RuntimeError,
                     "end(): token %ld does not match a span opened by begin() and still open on this thread", k);
        return NULL;
    }
    /* spans opened after it and left open close with it */
    while (t->depth > (uint32_t)k) hs_close_top(t, end, 0);
    Py_RETURN_NONE;
}

static PyObject *py_instant(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)mod;
    lit_entry *hit = lit_hit_positional(args, nargs, kwnames);
    if (HS_LIKELY(hit != NULL)) {
        hs_instant(hit->site, 0, 0);
        Py_RETURN_NONE;
    }
    span_args a;
    if (parse_span_args("instant", args, nargs, kwnames, &a) < 0) return NULL;
    hs_site *site = site_for(a.name, a.category);
    if (!site) return NULL;
    hs_instant(site, a.arg, a.flags);
    Py_RETURN_NONE;
}

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

static PyObject *py_dropped(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    return PyLong_FromUnsignedLongLong(hs_dropped_total());
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
        PyObject *row = with_dropped
                            ? Py_BuildValue("(Lsk)", (long long)rows[i].tid, rows[i].name, (unsigned long)rows[i].dropped)
                            : Py_BuildValue("(Ls)", (long long)rows[i].tid, rows[i].name);
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
        put_buffer(d, "duration_ns", &c.duration_ns, n * 8) < 0 || put_buffer(d, "depth", &c.depth, n * 4) < 0 ||
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
    Py_XDECREF(d);
    hs_columns_free(&c);
    return NULL;
}

static PyObject *py_pending(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    uint64_t bytes, spans, segments;
    hs_drain_pending(&bytes, &spans, &segments);
    return Py_BuildValue("{sKsKsKsKsKsKsKsN}", "bytes", (unsigned long long)bytes, "spans", (unsigned long long)spans,
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

/* ---- hooks ---------------------------------------------------------------------------- */

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

static PyObject *py_set_hooks(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *name_hook, *deco_hook;
    if (!PyArg_ParseTuple(args, "OO:_set_hooks", &name_hook, &deco_hook)) return NULL;
    Py_XSETREF(thread_name_hook, name_hook == Py_None ? NULL : Py_NewRef(name_hook));
    Py_XSETREF(decorate_hook, deco_hook == Py_None ? NULL : Py_NewRef(deco_hook));
    hs_thread_name_hook = call_thread_name_hook;
    Py_RETURN_NONE;
}

static PyObject *py_after_fork_child(PyObject *m, PyObject *a) {
    (void)m; (void)a;
    if (hs_tls) hs_drainer_ensure(); /* the forking thread records on: it needs a drainer */
    Py_RETURN_NONE;
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
    free(clk);
    Py_XDECREF(list);
    Py_XDECREF(cache);
    return out;
}

/* ---- the benchmark floor -------------------------------------------------------------- */

/* A context manager whose __enter__/__exit__ do nothing, built exactly like span's
 * (METH_FASTCALL, no allocation): what `with` itself costs, the floor benchmarks race. */
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
static PyTypeObject NoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native.NoopContext",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A no-op C context manager: the benchmark floor.",
    .tp_methods = noop_methods,
    .tp_new = PyType_GenericNew,
};

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

static PyMethodDef module_methods[] = {
    {"begin", (PyCFunction)(void (*)(void))py_begin, METH_FASTCALL | METH_KEYWORDS,
     "begin(name, category=None, *, arg=None) -> int\n--\n\nOpen a span on this thread; pass the token to end()."},
    {"end", (PyCFunction)py_end, METH_O, "end(token)\n--\n\nClose the span begin() opened (and any left open inside it)."},
    {"instant", (PyCFunction)(void (*)(void))py_instant, METH_FASTCALL | METH_KEYWORDS,
     "instant(name, category=None, *, arg=None)\n--\n\nRecord a zero-duration marker."},
    {"enable", py_enable, METH_NOARGS, "enable()\n--\n\nTurn recording on (everywhere, decorated functions too)."},
    {"disable", py_disable, METH_NOARGS, "disable()\n--\n\nTurn recording off."},
    {"enabled", py_enabled, METH_NOARGS, "enabled() -> bool\n--\n\nWhether recording is on."},
    {"set_thread_name", py_set_thread_name, METH_O, "set_thread_name(name)\n--\n\nName the calling thread in traces."},
    {"dropped", py_dropped, METH_NOARGS, "dropped() -> int\n--\n\nSpans dropped so far in this process, exactly."},
    {"_wrap", (PyCFunction)(void (*)(void))py_wrap, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_configure", py_configure, METH_VARARGS, NULL},
    {"_drain", py_drain, METH_O, NULL},
    {"_pending", py_pending, METH_NOARGS, NULL},
    {"_clock_info", py_clock_info, METH_NOARGS, NULL},
    {"_set_fake_clock", py_set_fake_clock, METH_VARARGS, NULL},
    {"_set_real_clock", py_set_real_clock, METH_NOARGS, NULL},
    {"_set_hooks", py_set_hooks, METH_VARARGS, NULL},
    {"_after_fork_child", py_after_fork_child, METH_NOARGS, NULL},
    {"_live_start", py_live_start, METH_VARARGS, NULL},
    {"_live_stop", py_live_stop, METH_NOARGS, NULL},
    {"_sweep", py_sweep, METH_NOARGS, NULL},
    {"_live_take", py_live_take, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native", "hotspan's C core: rings, clock, registry and drain.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&SpanType) < 0 || PyType_Ready(&TracedType) < 0 || PyType_Ready(&BufferType) < 0 ||
        PyType_Ready(&NoopType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    hs_clock_init();
    const char *env = getenv("HOTSPAN");
    if (env && (!strcmp(env, "0") || !strcasecmp(env, "false") || !strcasecmp(env, "off") || !strcasecmp(env, "no")))
        atomic_store(&hs_enabled, 0);
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
