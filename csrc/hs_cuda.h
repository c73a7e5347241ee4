/* hs_cuda: the CUDA plug-in of device spans (hs_cuda.c): the driver API loaded at run time,
 * pooled event pairs, resolved at drain. Installed by the module's init; its fork handlers
 * are called by hs_fork.c in the core's one order. */
#ifndef HS_CUDA_H
#define HS_CUDA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "hs_counters.h"
#include "hs_device.h"

/* Adds the drain side's functions (_cuda_*) to the module. 0, or -1 with an exception set. */
int hs_cuda_init(PyObject *module);
/* The device ops (hs_device_ops, see hs_device.h for each) and the counters' device memory
 * (hs_counters_ops.device_memory), installed by the module's init. */
int hs_cuda_available(const char *fn);
int hs_cuda_start(const hs_stream_spec *stream, uint64_t host_id, uint32_t depth, uint32_t pair);
int hs_cuda_stop(uint64_t host_id, int64_t arg, int has_arg, int error);
int hs_cuda_memory_sample(hs_counter_sample *out, int max);

/* Fork: its lock is a leaf (taken last, released first). The child forgets the parent's
 * pairs and driver state: CUDA contexts do not survive a fork. */
void hs_cuda_fork_prepare(void);
void hs_cuda_fork_parent(void);
void hs_cuda_fork_child(void);

#endif
