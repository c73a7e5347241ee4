/* hs_cuda: the CUDA plug-in of device spans (hs_cuda.c): the driver API loaded at run time,
 * pooled event pairs, resolved at drain. Installed by the module's init; its fork handlers
 * are called by hs_fork.c in the core's one order. */
#ifndef HS_CUDA_H
#define HS_CUDA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Sets hs_device_cuda (hs_device.h) and adds the drain side's functions (_cuda_*) to the
 * module. 0, or -1 with an exception set. */
int hs_cuda_install(PyObject *module);

/* Fork: its lock is a leaf (taken last, released first). The child forgets the parent's
 * pairs and driver state: CUDA contexts do not survive a fork. */
void hs_cuda_fork_prepare(void);
void hs_cuda_fork_parent(void);
void hs_cuda_fork_child(void);

#endif
