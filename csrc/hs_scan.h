/* hs_scan: the fixed-width heads of the event lines hotspan's Chrome JSON exporter writes,
 * checked and parsed in one pass per line (the loader's fast path). Free of Python.h.
 *
 * A field holds what JSON would write, right-aligned in blanks: an optional minus (not for
 * unsigned fields), digits without a leading zero, and for a decimal field a point and
 * exactly three digits (the value is read in thousandths); a nullable field may hold
 * `null`; a boolean field `true` or `false`. Anything else, or a byte of the constant text
 * between the fields that differs from the template, fails the whole block (the caller
 * then falls back to its general JSON reader).
 */
#ifndef HS_SCAN_H
#define HS_SCAN_H

#include <stddef.h>
#include <stdint.h>

enum { HS_SCAN_INT = 0, HS_SCAN_UINT = 1, HS_SCAN_DEC3 = 2, HS_SCAN_BOOL = 3 };

typedef struct hs_scan_field {
    uint32_t offset, width;
    int kind;
    int nullable;
} hs_scan_field;

/* values[f * n + i], nulls[f * n + i]: field f of line i. Returns 0, or -1 on any
 * departure from the layout. */
int hs_scan_heads(const uint8_t *data, size_t size, const int64_t *starts, size_t n, const uint8_t *templ,
                  const uint8_t *mask, size_t width, const hs_scan_field *fields, size_t nfields, int64_t *values,
                  uint8_t *nulls);

#endif
