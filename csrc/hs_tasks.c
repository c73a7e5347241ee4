/* hs_tasks: one span stack per Python context, so coroutines interleaving on one thread
 * (asyncio tasks: each runs its steps in its own contextvars context) nest in their own
 * task, never in another's.
 *
 * The hot path compares the thread's current context with its stack's (hs_ctx_check, two
 * loads and a compare); this file is the slow path behind it, run when a task step begins
 * or ends, and the thread's linking at registration. Sync code never comes here.
 *
 * A context's stack is a stack object stored in the context itself, in a ContextVar. A
 * context copied from another (a Task's context is a copy of its creator's) inherits the
 * creator's stack object, which names a different context: so the first span of the copy
 * makes it a stack of its own whose first slot below the roots is the creator's innermost
 * open span at that moment, and the task's root spans get it as their parent (and its
 * depth + 1), with no change to the hot path: roots of a task stack are pushed at depth
 * b, the creator's depth, and read their parent from frame b - 1 as any nested span does.
 * Frames below that hold no owner, so nothing ever closes them from the task.
 *
 * Self and wait (hs_selftime.h): a task's span is not running while its task is suspended.
 * The switches of the hot path happen at span events only, so the moments a task resumes
 * and suspends come from the event loop: every asyncio handle (a task step among them) runs
 * through asyncio.events.Handle._run, which hotspan._asyncio_steps replaces (when a thread
 * or a task records its first span, asyncio loaded) by a _StepRunner that notes the step's
 * beginning and end around the original. At a step's end, the task's
 * innermost open span of its own is noted with the time; when the task resumes, the time
 * between is added to that span's wait (hs_wait_add). Sync code and Context.run never
 * come here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hs_recorder.h"
#include "hs_selftime.h"
#include "hs_tasks.h"

/* hs_tasks_link_thread reads PyThreadState.context, a field of CPython's non-limited thread state
 * (Include/cpython/pystate.h): the current contextvars context, swapped by Context.run and
 * every asyncio task step. It is there, with that meaning, from 3.7 through 3.14; a newer
 * CPython must be checked against its pystate.h before this range is widened. */
#if PY_VERSION_HEX < 0x030A0000
#error "hotspan needs CPython 3.10 or newer"
#elif PY_VERSION_HEX >= 0x030F0000
#error "hs_tasks.c reads PyThreadState.context: check it in this CPython's Include/cpython/pystate.h, then widen the range here"
#endif

typedef struct {
    PyObject_HEAD
    hs_frame *frames; /* owned, except for a thread's own stack (is_base): hs_tstate's */
    uint32_t depth;
    uint32_t cap;
    uint64_t serial;  /* the thread it belongs to (hs_tstate.serial) */
    PyObject *ctx;    /* the context it is the stack of (a strong reference: no reuse of
                         the address while the object lives; the cycle through the
                         context's variables is the collector's) */
    int is_base;      /* the thread's own stack (frames in hs_tstate.own_*) */
    uint32_t base;    /* frames below are the creator's (owner NULL), from here the task's own */
    int observed;     /* a step of it ran inside the loop's step hook: its waits are known */
    uint64_t susp_since; /* ticks when its task was suspended with a span of its own open (0: not) */
    uint64_t susp_seq;   /* that span's id */
} StackObject;

static int stack_traverse(StackObject *s, visitproc visit, void *arg) {
    Py_VISIT(s->ctx);
    return 0;
}
static int stack_clear(StackObject *s) {
    Py_CLEAR(s->ctx);
    return 0;
}
static void stack_dealloc(StackObject *s) {
    PyObject_GC_UnTrack(s);
    stack_clear(s);
    if (!s->is_base) free(s->frames);
    PyObject_GC_Del(s);
}

static PyTypeObject StackType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native._TaskStack",
    .tp_basicsize = sizeof(StackObject),
    .tp_dealloc = (destructor)stack_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The open spans of one contextvars context on one thread (internal).",
    .tp_traverse = (traverseproc)stack_traverse,
    .tp_clear = (inquiry)stack_clear,
};

/* Kept in the thread's dict: when Python deletes the thread state (a foreign thread's
 * PyGILState_Release, a thread's exit), the thread is unlinked before ctx_slot dangles. */
typedef struct {
    PyObject_HEAD
    hs_tstate *t; /* compared with hs_tls before any use: may be gone */
    uint64_t serial;
} LinkObject;

static PyObject *stack_var = NULL; /* ContextVar: the context's StackObject */
/* Set once spans ran in a second context on a thread (asyncio tasks, Context.run): only
 * then can span trees overlap on one thread. The exports lay such
 * trees on lanes of their own (formats/lanes.py) and skip that work for every other
 * table; the drain puts this in the table's metadata. */
static _Atomic int tasks_seen = 0;
int hs_tasks_seen(void) { return atomic_load_explicit(&tasks_seen, memory_order_relaxed); }

/* Make `target` (NULL: the thread's own stack) current, saving the current one. Pure C
 * but for the final release of the previous owner (which may run Python: everything is
 * consistent by then). */
static void swap_to(hs_tstate *t, StackObject *target, void *ctx) {
    StackObject *old = t->stack_owner;
    hs_stack_edit_begin(t); /* a reader of the flight file retries across the switch */
    if (old) {
        old->frames = t->stack;
        old->depth = t->depth;
        old->cap = t->stack_cap;
    } else {
        t->own_stack = t->stack;
        t->own_depth = t->depth;
        t->own_cap = t->stack_cap;
    }
    if (target && !target->is_base) {
        t->stack = target->frames;
        t->depth = target->depth;
        t->stack_cap = target->cap;
        t->stack_owner = Py_NewRef(target);
    } else {
        t->stack = t->own_stack;
        t->depth = t->own_depth;
        t->stack_cap = t->own_cap;
        t->stack_owner = NULL;
    }
    t->ctx = ctx;
    hs_stack_edit_end(t);
    Py_XDECREF(old);
}

/* A new stack for ctx, its roots under the innermost open span of creator (a stack of
 * this thread, or NULL). */
static StackObject *stack_new(hs_tstate *t, StackObject *creator, PyObject *ctx) {
    hs_frame *cf = NULL;
    uint32_t cd = 0;
    if (creator) {
        if ((creator->is_base && !t->stack_owner) || (void *)creator == t->stack_owner) {
            cf = t->stack; /* current: its live state */
            cd = t->depth;
        } else if (creator->is_base) {
            cf = t->own_stack;
            cd = t->own_depth;
        } else {
            cf = creator->frames;
            cd = creator->depth;
        }
    }
    uint32_t cap = cd + 16;
    hs_frame *frames = calloc(cap, sizeof(hs_frame));
    if (!frames) return NULL;
    if (cd) {
        /* The creator's span now has children that may overlap (this task's roots, and its
         * own children that close from now on): for self time (hs_selftime.h). */
        cf[cd - 1].flags |= HS_FRAME_SPAWNED;
        frames[cd - 1] = cf[cd - 1];
        frames[cd - 1].owner = NULL; /* the creator's to close, never this task's */
        frames[cd - 1].flags &= ~HS_FRAME_NVTX; /* so its NVTX range too */
        frames[cd - 1].flags |= HS_FRAME_FOREIGN; /* this task's roots: HS_F_TASKROOT */
        /* A span of a task whose steps the hook sees: its self time follows the task rule
         * (the roots created under it run while its task is suspended). */
        if (creator && creator->observed && cd > creator->base)
            hs_wait_add(cf[cd - 1].seq, 0);
    }
    StackObject *s = PyObject_GC_New(StackObject, &StackType);
    if (!s) {
        free(frames);
        return NULL;
    }
    s->frames = frames;
    s->depth = cd;
    s->cap = cap;
    s->serial = t->serial;
    s->ctx = Py_NewRef(ctx);
    s->is_base = 0;
    s->base = cd;
    s->observed = t->in_step;
    s->susp_since = s->susp_seq = 0;
    PyObject_GC_Track(s);
    return s;
}

/* --------------------------------------------------------------- the step hook */

static int steps_installed = 0;

/* Once, at the first task stack: wrap asyncio's handles (hotspan._asyncio_steps), if asyncio
 * is loaded at all (Context.run alone needs no loop). Any failure: no waits, today's rule. */
static void install_steps(void) {
    PyObject *name = PyUnicode_FromString("asyncio");
    PyObject *asyncio = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    if (asyncio) {
        steps_installed = 1;
        PyObject *mod = PyImport_ImportModule("hotspan._asyncio_steps");
        PyObject *r = mod ? PyObject_CallMethod(mod, "install", NULL) : NULL;
        Py_XDECREF(r);
        Py_XDECREF(mod);
        Py_DECREF(asyncio);
    }
    PyErr_Clear();
}

/* The step running on the thread has ended (at `now`): its task is suspended, with its
 * innermost open span of its own (if any) waiting from now. */
static void stack_suspend(hs_tstate *t, StackObject *so, uint64_t now) {
    /* the stack's frames: live on the thread while it is current; the thread's own stack
     * (a task's context can be the one the thread was linked in) keeps them on the thread */
    int current = so->is_base ? t->stack_owner == NULL : (void *)so == t->stack_owner;
    hs_frame *frames = current ? t->stack : so->is_base ? t->own_stack : so->frames;
    uint32_t depth = current ? t->depth : so->is_base ? t->own_depth : so->depth;
    if (depth > so->base && frames) {
        so->susp_since = now;
        so->susp_seq = frames[depth - 1].seq;
    } else {
        so->susp_since = 0;
    }
}

static void step_suspend(hs_tstate *t, uint64_t now) {
    StackObject *so = (StackObject *)t->step;
    t->step = NULL;
    if (!so) return;
    stack_suspend(t, so, now);
    Py_DECREF(so);
}

/* A handle starts running in ctx on the thread: the task whose context it is (if it has a
 * stack of its own here) resumes. Never raises. */
static void step_begin(hs_tstate *t, PyObject *ctx) {
    uint64_t now = hs_ticks();
    if (t->step) step_suspend(t, now); /* a step whose end was not seen (before the hook) */
    t->in_step = 1;
    if (!ctx || !PyContext_CheckExact(ctx)) return;
    PyObject *val = PyObject_GetItem(ctx, stack_var); /* KeyError: a context with no stack */
    if (!val) {
        PyErr_Clear();
        return;
    }
    if (Py_IS_TYPE(val, &StackType)) {
        StackObject *so = (StackObject *)val;
        /* the task's own stack on this thread (a copy of another's context has none yet;
         * the thread's own stack is a task's when the thread was linked in its step) */
        if (so->ctx == ctx && so->serial == t->serial) {
            if (so->susp_since) {
                if (now > so->susp_since) hs_wait_add(so->susp_seq, now - so->susp_since);
                so->susp_since = 0;
            }
            so->observed = 1;
            t->step = Py_NewRef(so);
        }
    }
    Py_DECREF(val);
}

/* The handle has ended: its task (if any) is suspended from now. Never raises. */
static void step_end(hs_tstate *t) {
    t->in_step = 0;
    if (t->step) step_suspend(t, hs_ticks());
}

/* hotspan._asyncio_steps puts one in place of asyncio.events.Handle._run: a method
 * descriptor (no bound method made per call) that runs the original _run between
 * step_begin and step_end, so the loop pays two C calls a handle and no Python frame. */
typedef struct {
    PyObject_HEAD
    PyObject *original;
    vectorcallfunc vectorcall;
} StepRunObject;

static PyObject *context_name = NULL; /* "_context": the handle's contextvars context */

static PyObject *steprun_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *original = ((StepRunObject *)self)->original;
    hs_tstate *t = hs_tls;
    if (!t || PyVectorcall_NARGS(nargsf) != 1 || kwnames) return PyObject_Vectorcall(original, args, nargsf, kwnames);
    PyObject *ctx = PyObject_GetAttr(args[0], context_name);
    if (!ctx) PyErr_Clear();
    step_begin(t, ctx);
    Py_XDECREF(ctx);
    PyObject *result = PyObject_Vectorcall(original, args, nargsf, kwnames);
    t = hs_tls;
    if (t && (t->step || t->in_step)) {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb); /* releasing the task's stack may run a finalizer */
        step_end(t);
        PyErr_Restore(et, ev, etb);
    }
    return result;
}

static PyObject *steprun_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (!obj || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *steprun_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *original;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "_StepRunner(original) takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O:_StepRunner", &original)) return NULL;
    if (!PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "_StepRunner(original): original must be callable");
        return NULL;
    }
    StepRunObject *o = (StepRunObject *)type->tp_alloc(type, 0);
    if (!o) return NULL;
    o->original = Py_NewRef(original);
    o->vectorcall = steprun_vectorcall;
    return (PyObject *)o;
}

static void steprun_dealloc(StepRunObject *o) {
    PyObject_GC_UnTrack(o);
    Py_CLEAR(o->original);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int steprun_traverse(StepRunObject *o, visitproc visit, void *arg) {
    Py_VISIT(o->original);
    return 0;
}

static PyMemberDef steprun_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(StepRunObject, original), READONLY, "The method it runs."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StepRunType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native._StepRunner",
    .tp_basicsize = sizeof(StepRunObject),
    .tp_dealloc = (destructor)steprun_dealloc,
    .tp_vectorcall_offset = offsetof(StepRunObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "_StepRunner(original)\n--\n\nasyncio.events.Handle._run with the task's resume and suspend noted "
              "(hotspan._asyncio_steps; internal).",
    .tp_traverse = (traverseproc)steprun_traverse,
    .tp_members = steprun_members,
    .tp_descr_get = steprun_get,
    .tp_new = steprun_new,
};

void hs_tasks_ctx_switch(hs_tstate *t) {
    if (!PyGILState_Check()) return; /* a native thread without the GIL: keep the stack */
    uint64_t now = hs_ticks();
    PyObject *ctx = (PyObject *)*t->ctx_slot;
    if (!ctx) { /* no context (left by a Context.run entered before the link): our own */
        swap_to(t, NULL, NULL);
        return;
    }
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb); /* a traced call may be exiting with an exception set */
    PyObject *val = NULL;
    StackObject *target = NULL, *made = NULL;
    if (PyContextVar_Get(stack_var, NULL, &val) < 0) goto fail;
    StackObject *so = val && Py_IS_TYPE(val, &StackType) ? (StackObject *)val : NULL;
    if (so && so->serial != t->serial) so = NULL; /* another thread's: roots here */
    if (so && so->ctx == ctx) {
        target = so;
    } else {
        /* A second context on this thread (a task, a Context.run): its spans may overlap
         * the other contexts' on this thread, whether or not its creator ever had a span
         * (two tasks gathered before the thread's first span overlap just the same). */
        atomic_store_explicit(&tasks_seen, 1, memory_order_relaxed);
        made = stack_new(t, so, ctx);
        if (!made) goto fail;
        PyObject *tok = PyContextVar_Set(stack_var, (PyObject *)made);
        if (!tok) goto fail;
        Py_DECREF(tok);
        target = made;
    }
    /* The calls above may have run a finalizer that recorded spans (and switched): the
     * swap saves whatever is current now. The context pointer is unchanged by them. */
    swap_to(t, target, ctx);
    /* The step running now is this task's (the hook saw the step begin before the task had
     * a stack, or never saw it begin: then its next step_begin on this thread ends it). */
    if (!t->step && !target->is_base) t->step = Py_NewRef(target);
    /* A task's first span in a step the hook did not see begin (it is not installed yet):
     * the thread's own stack may be a task's (the thread was linked in its step), which is
     * suspended now, since this other task runs: noted as of this switch. */
    if (made && !t->in_step && t->base_stack && t->base_stack != (void *)target)
        stack_suspend(t, (StackObject *)t->base_stack, now);
    int first = made != NULL && !steps_installed;
    Py_XDECREF(made);
    Py_XDECREF(val);
    if (first) install_steps();
    PyErr_Restore(et, ev, etb);
    return;
fail:
    /* out of memory: stay on the current stack (hs_ctx_switch adopts it) */
    Py_XDECREF(made);
    Py_XDECREF(val);
    PyErr_Clear();
    PyErr_Restore(et, ev, etb);
}

static void link_dealloc(LinkObject *o) {
    hs_tstate *t = hs_tls;
    /* On the thread itself (Python deletes a thread state on its own thread, but at
     * finalization): back to its own stack, and no context to follow any more. */
    if (t && t == o->t && t->serial == o->serial) {
        PyObject *step = t->step, *base = t->base_stack;
        t->step = t->base_stack = NULL;
        t->in_step = 0;
        Py_XDECREF(step);
        Py_XDECREF(base);
        swap_to(t, NULL, NULL);
        t->ctx_slot = (void *const *)&t->ctx_none;
        t->ctx = NULL;
    }
    PyObject_Free(o);
}

static PyTypeObject LinkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hotspan._native._ThreadLink",
    .tp_basicsize = sizeof(LinkObject),
    .tp_dealloc = (destructor)link_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Unlinks hotspan's thread state from Python's when Python deletes it (internal).",
};

void hs_tasks_link_thread(hs_tstate *t) {
    if (!PyGILState_Check()) return; /* a native thread: no contexts, one stack */
    PyThreadState *ts = PyThreadState_Get();
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    StackObject *base = PyObject_GC_New(StackObject, &StackType);
    if (base) { /* every field set before anything can fail (the failure path frees it) */
        base->frames = NULL;
        base->depth = base->cap = 0;
        base->serial = t->serial;
        base->ctx = NULL;
        base->is_base = 1;
        base->base = 0;
        base->observed = 0;
        base->susp_since = base->susp_seq = 0;
        PyObject_GC_Track(base);
    }
    LinkObject *link = PyObject_New(LinkObject, &LinkType);
    if (link) {
        link->t = t;
        link->serial = t->serial;
    }
    PyObject *dict = PyThreadState_GetDict();
    if (!base || !link || !dict) goto fail;
    if (PyDict_SetItemString(dict, "hotspan._native._ThreadLink", (PyObject *)link) < 0) goto fail;
    /* Sets the variable in the thread's current context, making one if it has none yet:
     * from then on this context is the one of the thread's own stack. */
    PyObject *tok = PyContextVar_Set(stack_var, (PyObject *)base);
    if (!tok) goto fail;
    Py_DECREF(tok);
    base->ctx = Py_XNewRef(ts->context);
    t->ctx = ts->context;
    t->base_stack = Py_NewRef(base);
    t->ctx_slot = (void *const *)&ts->context; /* last: switching starts here */
    /* The thread's first span may be in an asyncio task's step (its context is then this
     * one): the hook goes in now if asyncio is loaded, and the step running is this
     * stack's, whose end the hook's first callback notes (hotspan._asyncio_steps). */
    if (!t->step) t->step = Py_NewRef(base);
    if (!steps_installed) install_steps();
    Py_DECREF(base);
    Py_DECREF(link);
    PyErr_Restore(et, ev, etb);
    return;
fail:
    Py_XDECREF(base);
    if (link) {
        link->t = NULL; /* never unlinks anything */
        Py_DECREF(link);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, etb);
}

int hs_tasks_init(PyObject *m) {
    if (PyType_Ready(&StackType) < 0 || PyType_Ready(&LinkType) < 0) return -1;
    stack_var = PyContextVar_New("hotspan.task_stack", NULL);
    if (!stack_var) return -1;
    if (PyType_Ready(&StepRunType) < 0) return -1;
    context_name = PyUnicode_InternFromString("_context");
    if (!context_name) return -1;
    return PyModule_AddType(m, &StepRunType);
}
