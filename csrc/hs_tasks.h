/* hs_tasks: a span stack per Python context (asyncio tasks), the glue behind
 * hs_ctx_check's slow path (hs_tasks.c). */
#ifndef HS_TASKS_H
#define HS_TASKS_H

#include <Python.h>

#include "hs_registry.h"

/* The task types; 0, or -1 with an exception set. */
int hs_tasks_init(PyObject *m);
/* The registry's thread_link and ctx_switch (hs_registry_ops, installed by the module):
 * point a new thread's ctx_slot at its Python context, and make the current context's own
 * stack current. */
void hs_tasks_link_thread(hs_tstate *t);
void hs_tasks_ctx_switch(hs_tstate *t);
/* Whether spans ran in a task's (a copied context's) own stack: trees may overlap. */
int hs_tasks_seen(void);

#endif
