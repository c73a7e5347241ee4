/* hs_types: the hot Python types (hs_types.c), as the module glue (hs_module.c) sees them. */
#ifndef HS_TYPES_H
#define HS_TYPES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyTypeObject SpanType;       /* hotspan.span */
extern PyTypeObject TracedType;     /* hotspan.traced_function */
extern PyTypeObject SyncSpanType;   /* hotspan.span(..., sync=fn) */
extern PyTypeObject DeviceSpanType; /* hotspan.span(..., device="cuda") */
extern PyTypeObject NoopType;       /* hotspan._native.NoopContext: the benchmark floor */
/* What the types call up into, Python callables the glue hands over (each kept as a new
 * reference; NULL clears): hotspan._api._decorate_with(span, func) (_set_hooks; NULL:
 * decorate in C), and configure(sync=fn)'s function, which spans opened with sync=True
 * call (NULL: none). */
void hs_types_set_decorate(PyObject *fn);
void hs_types_set_default_sync(PyObject *fn);

/* After PyType_Ready(&SpanType), before its subtypes: span's allocation-free bound
 * __enter__/__exit__ (hs_types.c). 0, or -1 with an exception set. */
int hs_types_init(void);

/* Module functions of the hot path (their entries are in hs_module.c's method table). */
PyObject *py_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *py_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *py_end(PyObject *mod, PyObject *tok);
PyObject *py_set_arg(PyObject *mod, PyObject *v);
PyObject *py_instant(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *py_counter(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

#endif
