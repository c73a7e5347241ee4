/* hs_nvtx: NVTX passthrough (configure(nvtx=True), HOTSPAN_NVTX=1). Every recorded span is
 * also an NVTX push/pop range in the domain "hotspan" (message: the span's name, category:
 * its category path, payload: its arg), every instant an NVTX mark, so Nsight Systems
 * shows hotspan's spans beside the kernels.
 *
 * The hot path only reads hs_nvtx_on (one predictable branch at enter) and a frame flag at
 * exit; everything else is out of line in hs_nvtx.c, the one file that includes the NVTX3
 * headers. Names are registered (nvtxDomainRegisterStringA) and category paths named
 * (nvtxDomainNameCategoryA) when their (name, path) pair is interned, or all at once when
 * NVTX is switched on, never per span.
 *
 * Free of Python.h.
 */
#ifndef HS_NVTX_H
#define HS_NVTX_H

#include <stdatomic.h>
#include <stdint.h>

#include "hs_recorder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* HS_FRAME_NVTX and hs_nvtx_on: hs_recorder.h (the hot path tests them). */

/* fork() (hs_fork.c): hold the registration lock across it. */
void hs_nvtx_fork_prepare(void);
void hs_nvtx_fork_release(void);
/* The recorder's hs_recorder_ops (installed by the module's init), called only while
 * hs_nvtx_on. The frame just opened (pair, arg, flags set): push its range, mark the frame. */
void hs_nvtx_enter(hs_frame *f);
/* A frame marked HS_FRAME_NVTX was closed. */
void hs_nvtx_pop(void);
/* An instant: an NVTX mark. */
void hs_nvtx_mark(uint32_t pair, int64_t arg, uint32_t flags);
/* A (name, path) pair was interned or resolved while NVTX is on: register its strings
 * now (once each), off the hot path. */
void hs_nvtx_pair_seen(uint32_t pair);
/* Switch the passthrough on or off. On: creates the domain (loading the NVTX injection
 * library a tool such as Nsight Systems names, if any) and registers every pair interned
 * so far. 0, or -1 when out of memory. */
int hs_nvtx_set(int on);
/* HOTSPAN_NVTX=1 (or true/on/yes) in the environment: switch it on. */
void hs_nvtx_init_from_env(void);

#ifdef __cplusplus
}
#endif
#endif
