/* hs_tasks: a span stack per Python context (asyncio tasks), the glue behind
 * hs_ctx_check's slow path (hs_tasks.c). */
#ifndef HS_TASKS_H
#define HS_TASKS_H

#include <Python.h>

/* Sets the core's link and switch hooks; 0, or -1 with an exception set. */
int hs_tasks_init(PyObject *m);
/* Whether spans ran in a task's (a copied context's) own stack: trees may overlap. */
int hs_tasks_seen(void);

#endif
