/* hs_compiler: the compiler hints every unit may use (macros only, below every unit).
 *
 * A header of its own so that a unit that wants HS_LIKELY does not include the hot path's
 * header (and everything that one includes) for it.
 */
#ifndef HS_COMPILER_H
#define HS_COMPILER_H

#define HS_LIKELY(x) __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The hot path is a handful of small functions; inlining them into each caller saves
 * the call, the spills and the argument shuffles (~25 instructions a span). */
#define HS_HOT static inline __attribute__((always_inline))
/* A rare path kept out of line, so its stack frame and saved registers stay off the hot one. */
#define HS_COLD __attribute__((noinline, cold))

#endif
