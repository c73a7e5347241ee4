/* hs_scan: see hs_scan.h. */
#include "hs_scan.h"

#include <string.h>

/* One field; returns 0 and sets *value / *null, or -1. */
static int scan_field(const uint8_t *p, uint32_t width, int kind, int nullable, int64_t *value, uint8_t *null) {
    uint32_t i = 0;
    while (i < width && p[i] == ' ') i++;
    *null = 0;
    if (kind == HS_SCAN_BOOL) {
        uint32_t rest = width - i;
        if (rest == 4 && memcmp(p + i, "true", 4) == 0) *value = 1;
        else if (rest == 5 && memcmp(p + i, "false", 5) == 0) *value = 0;
        else return -1;
        return 0;
    }
    if (nullable && width - i == 4 && memcmp(p + i, "null", 4) == 0) {
        *null = 1;
        *value = 0;
        return 0;
    }
    int negative = 0;
    if (i < width && p[i] == '-') {
        if (kind == HS_SCAN_UINT) return -1;
        negative = 1;
        i++;
    }
    uint32_t int_end = kind == HS_SCAN_DEC3 ? width - 4 : width;
    if (kind == HS_SCAN_DEC3) {
        if (width < 5 || p[width - 4] != '.') return -1;
        for (uint32_t k = width - 3; k < width; k++)
            if ((uint8_t)(p[k] - '0') > 9) return -1;
    }
    if (i >= int_end) return -1;                        /* no integer digits */
    if (p[i] == '0' && i + 1 < int_end) return -1;      /* a leading zero */
    uint64_t magnitude = 0;
    for (uint32_t k = i; k < int_end; k++) {
        uint8_t d = (uint8_t)(p[k] - '0');
        if (d > 9) return -1;
        if (magnitude > (UINT64_MAX - d) / 10) return -1; /* past 2^64 */
        magnitude = magnitude * 10 + d;
    }
    if (kind == HS_SCAN_DEC3) {
        uint64_t frac = (uint64_t)(p[width - 3] - '0') * 100 + (uint64_t)(p[width - 2] - '0') * 10 +
                        (uint64_t)(p[width - 1] - '0');
        if (magnitude > (UINT64_MAX - frac) / 1000) return -1;
        magnitude = magnitude * 1000 + frac;
    }
    if (kind == HS_SCAN_UINT) {
        *value = (int64_t)magnitude; /* the caller views it as uint64 */
        return 0;
    }
    if (negative) {
        if (magnitude > (uint64_t)INT64_MAX + 1) return -1;
        *value = (int64_t)(0 - magnitude);
    } else {
        if (magnitude > (uint64_t)INT64_MAX) return -1;
        *value = (int64_t)magnitude;
    }
    return 0;
}

int hs_scan_heads(const uint8_t *data, size_t size, const int64_t *starts, size_t n, const uint8_t *templ,
                  const uint8_t *mask, size_t width, const hs_scan_field *fields, size_t nfields, int64_t *values,
                  uint8_t *nulls) {
    for (size_t f = 0; f < nfields; f++)
        if (fields[f].offset + fields[f].width > width) return -1;
    /* The constant text as runs, each checked with one memcmp a line (a masked byte loop
     * with an early exit was most of the cost). */
    size_t run_at[64], run_len[64], nruns = 0;
    for (size_t k = 0; k < width;) {
        if (!mask[k]) {
            k++;
            continue;
        }
        size_t j = k;
        while (j < width && mask[j]) j++;
        if (nruns == 64) return -1;
        run_at[nruns] = k;
        run_len[nruns++] = j - k;
        k = j;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t start = starts[i];
        if (start < 0 || (size_t)start + width > size) return -1;
        const uint8_t *line = data + start;
        for (size_t r = 0; r < nruns; r++)
            if (memcmp(line + run_at[r], templ + run_at[r], run_len[r]) != 0) return -1;
        for (size_t f = 0; f < nfields; f++) {
            const hs_scan_field *fd = &fields[f];
            if (scan_field(line + fd->offset, fd->width, fd->kind, fd->nullable, &values[f * n + i],
                           &nulls[f * n + i]) < 0)
                return -1;
        }
    }
    return 0;
}
