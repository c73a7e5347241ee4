/* hs_device: the operations through which a device span (span(..., device="cuda")) reaches
 * the device plug-in that records its events. The span types (hs_types.c) only call
 * through the struct below; the module's init installs the plug-in's (hs_cuda.c, the CUDA
 * driver API loaded at run time), so nothing below the module glue and the fork handlers
 * names the plug-in, and a build or platform without one installs none (device spans then
 * refuse at creation, as without CUDA).
 */
#ifndef HS_DEVICE_H
#define HS_DEVICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The stream a device span records on, fixed when the span object is made. */
typedef struct {
    int given;          /* 0: the current stream at enter (torch's when torch is loaded, else the default) */
    uint64_t handle;    /* the CUstream handle (0: the default stream) */
    uint64_t stream_id; /* what the rows name the stream by: torch's stream_id, else the handle */
} hs_stream_spec;

typedef struct hs_device_ops {
    const char *name; /* "cuda" */
    /* At span creation (cold): 0 when the device can be used, else -1 with a RuntimeError
     * naming the device and why (fn: the function asked, "span"). */
    int (*available)(const char *fn);
    /* Enter, right after the host span opened (its id, depth and record pair): record the
     * start event. -1 with an exception set when the driver refused. */
    int (*start)(const hs_stream_spec *stream, uint64_t host_id, uint32_t depth, uint32_t pair);
    /* Exit, before the host span's end timestamp: record the end event and queue the pair
     * for the drain. -1 with an exception set when the driver refused. */
    int (*stop)(uint64_t host_id, int64_t arg, int has_arg, int error);
} hs_device_ops;

/* Installs the CUDA plug-in's ops, whole (kept: a static const struct; NULL: none). Once,
 * at the module's init. */
void hs_device_set_ops(const hs_device_ops *cuda);
/* What hs_device_set_ops installed (NULL: none), read by the span types; written only by
 * hs_device_set_ops. */
extern const hs_device_ops *hs_device_cuda;

#endif
