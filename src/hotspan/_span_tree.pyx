# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A span table's parent links, followed in one pass over its rows: each span's self time
(:func:`self_times`, for ``hotspan._selftime``) and the schema's rules a loader checks
(:func:`span_rules`, for ``formats.base.check_span_rules``).

A span's self time is its duration minus the length of the union of its children's
intervals (children on its own thread and process, each clipped to the span). Visited in
start order, a parent's children are merged as they come: what a child adds is the part of
it past the furthest end seen so far among its siblings. A loader's rows are already in
that order (per thread by start time: Chrome JSON, Perfetto); any other order is noticed on
the way (a child starting before a sibling already seen) and the caller passes the rows'
start order instead.

Parents are found by id through an array over the ids' range (a process's ids are a
counter under fixed high bits: linear, one 4-byte slot an id) or, for ids spread wider
(several ranks merged), an open-addressing hash table; either notices an id given twice
as it is built. The index is a :class:`SpanIndex`: a loader builds it once for both passes
(self time, then the schema's rules). Arithmetic wraps as numpy's does.
"""
from libc.stdint cimport uint8_t, int32_t, int64_t, uint64_t, INT64_MIN
from libc.stdlib cimport malloc, free

import numpy as np

# The widest id range (as a multiple of the number of rows) looked up through an array.
cdef enum:
    SPREAD = 4
DENSE_SPREAD = SPREAD


cdef struct IdIndex:
    uint64_t low        # dense: the smallest id
    uint64_t last       # dense: the largest id - low
    uint64_t mask       # hash: table size - 1 (0: dense)
    int bits
    int32_t* rows       # dense: row of id - low; hash: row at a slot (-1: empty)
    uint64_t* keys      # hash only


cdef inline uint64_t _slot(uint64_t key, int bits) noexcept nogil:
    return (key * <uint64_t>0x9E3779B97F4A7C15) >> (64 - bits)


cdef Py_ssize_t index_build(IdIndex* index, const uint64_t* ids, Py_ssize_t n) noexcept nogil:
    """The row of each id (its first row, for an id given twice). Returns the first row
    whose id an earlier row has (``-1``: none), ``-2`` out of memory."""
    cdef Py_ssize_t i, repeat = -1
    cdef uint64_t low = ids[0], high = ids[0], size, slot
    for i in range(n):
        if ids[i] < low:
            low = ids[i]
        if ids[i] > high:
            high = ids[i]
    index.keys = NULL
    if high - low < <uint64_t>(SPREAD * n):
        size = high - low + 1
        index.low, index.last, index.mask = low, high - low, 0
        index.rows = <int32_t*>malloc(size * sizeof(int32_t))
        if index.rows == NULL:
            return -2
        for i in range(<Py_ssize_t>size):
            index.rows[i] = -1
        for i in range(n):
            slot = ids[i] - low
            if index.rows[slot] < 0:
                index.rows[slot] = <int32_t>i
            elif repeat < 0:
                repeat = i
        return repeat
    index.bits = 1
    while (<uint64_t>1 << index.bits) < <uint64_t>(2 * n):
        index.bits += 1
    size = <uint64_t>1 << index.bits
    index.mask = size - 1
    index.rows = <int32_t*>malloc(size * sizeof(int32_t))
    index.keys = <uint64_t*>malloc(size * sizeof(uint64_t))
    if index.rows == NULL or index.keys == NULL:
        return -2
    for i in range(<Py_ssize_t>size):
        index.rows[i] = -1
    for i in range(n):
        slot = _slot(ids[i], index.bits)
        while index.rows[slot] >= 0 and index.keys[slot] != ids[i]:
            slot = (slot + 1) & index.mask
        if index.rows[slot] < 0:
            index.rows[slot] = <int32_t>i
            index.keys[slot] = ids[i]
        elif repeat < 0:
            repeat = i
    return repeat


cdef inline Py_ssize_t index_row(const IdIndex* index, uint64_t id) noexcept nogil:
    cdef uint64_t slot
    if index.mask == 0:
        if id < index.low or id - index.low > index.last:
            return -1
        return index.rows[id - index.low]
    slot = _slot(id, index.bits)
    while index.rows[slot] >= 0:
        if index.keys[slot] == id:
            return index.rows[slot]
        slot = (slot + 1) & index.mask
    return -1


cdef void index_free(IdIndex* index) noexcept nogil:
    free(index.rows)
    free(index.keys)
    index.rows = NULL
    index.keys = NULL


cdef class SpanIndex:
    """The row of each span id (its first row, for an id given twice), built once from a
    table's ``span_id`` (uint64) for every pass that follows its parent links:
    :func:`self_times` and :func:`span_rules` take it instead of building their own.
    ``repeat``: the first row whose id an earlier row has (``-1``: none)."""
    cdef IdIndex index
    cdef readonly Py_ssize_t rows
    cdef readonly Py_ssize_t repeat

    def __cinit__(self, const uint64_t[::1] span_id not None):
        cdef Py_ssize_t n = span_id.shape[0], built = -1
        self.index.rows = NULL
        self.index.keys = NULL
        self.rows = n
        self.repeat = -1
        if n >= 0x7FFFFFFF:
            raise ValueError("SpanIndex: more than 2**31 - 1 rows")
        if n == 0:
            return
        with nogil:
            built = index_build(&self.index, &span_id[0], n)
        if built == -2:
            index_free(&self.index)
            raise MemoryError("SpanIndex: no memory for the id index")
        self.repeat = built

    def __dealloc__(self):
        index_free(&self.index)


cdef SpanIndex _index_for(SpanIndex index, const uint64_t[::1] span_id, str who):
    """``index`` when given (it must be of as many rows), else one built from ``span_id``."""
    if index is None:
        return SpanIndex(span_id)
    if index.rows != span_id.shape[0]:
        raise ValueError(f"{who}: an index of {index.rows} rows for {span_id.shape[0]} rows")
    return index


cdef inline int64_t wrap_sub(int64_t a, int64_t b) noexcept nogil:
    return <int64_t>(<uint64_t>a - <uint64_t>b)


cdef int merge_children(Py_ssize_t n, const Py_ssize_t* order, const IdIndex* index,
                        const int64_t* start, const int64_t* end, const uint64_t* parent_id,
                        const uint8_t* has_parent, const int64_t* thread, const int64_t* pid,
                        int64_t* covered, int64_t* reach, int64_t* last_start) noexcept nogil:
    """``covered[p]``: the length of the union of p's children; 1 when a parent's children
    do not come in start order (nothing is then complete)."""
    cdef Py_ssize_t k, i, p
    cdef int64_t s, e
    for k in range(n):
        i = order[k] if order != NULL else k
        if not has_parent[i]:
            continue
        p = index_row(index, parent_id[i])
        if p < 0 or p == i or thread[i] != thread[p] or (pid != NULL and pid[i] != pid[p]):
            continue
        s = start[i]
        if s < last_start[p]:
            return 1
        last_start[p] = s
        if s < start[p]:
            s = start[p]
        e = end[i] if end[i] < end[p] else end[p]
        if reach[p] > s:
            s = reach[p]
        if e > s:
            covered[p] += wrap_sub(e, s)
            reach[p] = e
    return 0


def self_times(const int64_t[::1] start not None, const int64_t[::1] end not None,
               const uint64_t[::1] span_id not None, const uint64_t[::1] parent_id not None,
               const uint8_t[::1] has_parent not None, const int64_t[::1] thread not None,
               const int64_t[::1] pid=None, const Py_ssize_t[::1] order=None,
               SpanIndex index=None):
    """Each row's self time (int64 array), the rows visited in ``order`` (default: as they
    are); ``None`` when in that order some parent's children do not come by start time
    (then call again with the rows' start order: ``np.argsort(start, kind="stable")``).
    ``pid``: compared too when given; ``index``: :class:`SpanIndex` of ``span_id``, built
    here when not given. At most 2**31 - 1 rows."""
    cdef Py_ssize_t n = start.shape[0], i
    if not (end.shape[0] == span_id.shape[0] == parent_id.shape[0] == has_parent.shape[0]
            == thread.shape[0] == n):
        raise ValueError("self_times: columns of different lengths")
    if (pid is not None and pid.shape[0] != n) or (order is not None and order.shape[0] != n):
        raise ValueError("self_times: columns of different lengths")
    if n >= 0x7FFFFFFF:
        raise ValueError("self_times: more than 2**31 - 1 rows")
    if order is not None:
        for i in range(n):
            if order[i] < 0 or order[i] >= n:
                raise ValueError(f"self_times: order[{i}] = {order[i]} is not a row")
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    reach_array = np.full(n, INT64_MIN, np.int64)
    last_array = np.full(n, INT64_MIN, np.int64)
    cdef int64_t[::1] covered = out, reach = reach_array, last_start = last_array
    cdef SpanIndex ids = _index_for(index, span_id, "self_times")
    cdef int unsorted = 0
    cdef const int64_t* pid_ptr = &pid[0] if pid is not None else NULL
    cdef const Py_ssize_t* order_ptr = &order[0] if order is not None else NULL
    cdef int64_t duration
    with nogil:
        unsorted = merge_children(n, order_ptr, &ids.index, &start[0], &end[0], &parent_id[0],
                                  &has_parent[0], &thread[0], pid_ptr, &covered[0],
                                  &reach[0], &last_start[0])
    if unsorted:
        return None
    with nogil:
        for i in range(n):
            duration = wrap_sub(end[i], start[i])
            if duration < 0:
                duration = 0
            duration = wrap_sub(duration, covered[i])
            covered[i] = duration if duration > 0 else 0
    return out


def span_rules(const uint64_t[::1] span_id not None, const uint64_t[::1] parent_id not None,
               const uint8_t[::1] has_parent not None, const int64_t[::1] start not None,
               const int64_t[::1] end not None, const int64_t[::1] duration not None,
               const int32_t[::1] depth not None, SpanIndex index=None):
    """The first row breaking each of the schema's rules (``-1``: none), as a tuple:
    ``duration < 0``, ``end != start + duration`` (a wrapping add), ``depth < 0``, a
    ``span_id`` an earlier row has (then the row that has it first), a ``depth`` that is not
    its parent's + 1 where the parent is in the table (then the parent's row; looked for
    only when no id repeats). ``index``: :class:`SpanIndex` of ``span_id``, built here
    when not given."""
    cdef Py_ssize_t n = span_id.shape[0], i, p
    cdef Py_ssize_t negative = -1, unequal = -1, shallow = -1, repeat = -1, earlier = -1
    cdef Py_ssize_t deep = -1, deep_parent = -1
    if not (parent_id.shape[0] == has_parent.shape[0] == start.shape[0] == end.shape[0]
            == duration.shape[0] == depth.shape[0] == n):
        raise ValueError("span_rules: columns of different lengths")
    if n >= 0x7FFFFFFF:
        raise ValueError("span_rules: more than 2**31 - 1 rows")
    if n == 0:
        return (-1, -1, -1, -1, -1, -1, -1)
    cdef SpanIndex ids = _index_for(index, span_id, "span_rules")
    repeat = ids.repeat
    with nogil:
        for i in range(n):
            if negative < 0 and duration[i] < 0:
                negative = i
            if unequal < 0 and <uint64_t>end[i] != <uint64_t>start[i] + <uint64_t>duration[i]:
                unequal = i
            if shallow < 0 and depth[i] < 0:
                shallow = i
        if repeat >= 0:
            earlier = index_row(&ids.index, span_id[repeat])
        else:
            for i in range(n):
                if has_parent[i]:
                    p = index_row(&ids.index, parent_id[i])
                    if p >= 0 and <int64_t>depth[i] != <int64_t>depth[p] + 1:
                        deep, deep_parent = i, p
                        break
    return (negative, unequal, shallow, repeat, earlier, deep, deep_parent)
