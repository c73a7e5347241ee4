/* hotspan.h: record hotspan spans from native code (C, C++, CUDA host code).
 *
 * The compiled module hotspan._native exports this table through a capsule; native
 * spans land in the same per-thread rings, nest with Python spans on the same thread and
 * come out of hotspan.drain() like any other.
 *
 *     #include <hotspan.h>
 *     const hotspan_api *hs = hotspan_import();       // with the GIL held, once
 *     void *site = hs->site("gemm", "compute");       // once per span site
 *     hs->begin(site, nbytes, 1);                     // any thread, no GIL needed
 *     ...
 *     hs->end(0);                                     // 1 if it failed
 */
#ifndef HOTSPAN_H
#define HOTSPAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOTSPAN_API_VERSION 1
#define HOTSPAN_CAPSULE_NAME "hotspan._native._C_API"

typedef struct hotspan_api {
    uint32_t version;
    /* An interned (name, category) site; category may be NULL. NULL when out of memory. */
    void *(*site)(const char *name, const char *category);
    /* Open a span on the calling thread; returns 1 when recording (0 when disabled). */
    int (*begin)(void *site, int64_t arg, int has_arg);
    /* Close the innermost span this API opened on the calling thread. */
    void (*end)(int error);
    /* A zero-duration marker. */
    void (*instant)(void *site, int64_t arg, int has_arg);
    int (*enabled)(void);
} hotspan_api;

#ifdef Py_PYTHON_H
/* Needs Python.h included first, and the GIL held. NULL with a Python error set on failure. */
static inline const hotspan_api *hotspan_import(void) {
    const hotspan_api *api = (const hotspan_api *)PyCapsule_Import(HOTSPAN_CAPSULE_NAME, 0);
    if (api && api->version < HOTSPAN_API_VERSION) {
        PyErr_SetString(PyExc_ImportError, "hotspan: the installed hotspan is older than hotspan.h");
        return NULL;
    }
    return api;
}
#endif

#ifdef __cplusplus
}
#endif
#endif
