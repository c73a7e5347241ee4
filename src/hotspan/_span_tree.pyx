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

In a loader's order a parent is open when its children come: :func:`stacked_self_times`
keeps the open spans on a stack, each one's merge state there, and writes a self time when
its span closes. Where the rows are in another order (a parent on its thread closed before
a child comes) it gives up, and the parents are looked up by id for every row.

Parents are found by id through an array over the ids' range (a process's ids are a
counter under fixed high bits: linear, one 4-byte slot an id) or, for ids spread wider
(several ranks merged), an open-addressing hash table; either notices an id given twice
as it is built. The index is a :class:`SpanIndex`: a loader builds it once for both passes
(self time, then the schema's rules). Arithmetic wraps as numpy's does.
"""
from libc.stdint cimport uint8_t, int32_t, int64_t, uint64_t, INT64_MIN
from libc.stdlib cimport malloc, realloc, free

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


cdef inline bint merge_child(int64_t s, int64_t e, int64_t parent_start, int64_t parent_end,
                             int64_t* reach, int64_t* last_start, int64_t* covered) noexcept nogil:
    """A child [s, e) into its parent's union (``reach``: the furthest end merged so far,
    ``last_start``: the last sibling's start, ``covered``: the union's length), clipped to
    the parent; False when it starts before a sibling already merged (not in start order)."""
    if s < last_start[0]:
        return False
    last_start[0] = s
    if s < parent_start:
        s = parent_start
    if e > parent_end:
        e = parent_end
    if reach[0] > s:
        s = reach[0]
    if e > s:
        covered[0] += wrap_sub(e, s)
        reach[0] = e
    return True


cdef int merge_children(Py_ssize_t n, const Py_ssize_t* order, const IdIndex* index,
                        const int64_t* start, const int64_t* end, const uint64_t* parent_id,
                        const uint8_t* has_parent, const int64_t* thread, const int64_t* pid,
                        int64_t* covered, int64_t* reach, int64_t* last_start) noexcept nogil:
    """``covered[p]``: the length of the union of p's children; 1 when a parent's children
    do not come in start order (nothing is then complete)."""
    cdef Py_ssize_t k, i, p
    for k in range(n):
        i = order[k] if order != NULL else k
        if not has_parent[i]:
            continue
        p = index_row(index, parent_id[i])
        if p < 0 or p == i or thread[i] != thread[p] or (pid != NULL and pid[i] != pid[p]):
            continue
        if not merge_child(start[i], end[i], start[p], end[p], &reach[p], &last_start[p],
                           &covered[p]):
            return 1
    return 0


cdef struct OpenSpan:
    # A span whose children may still come (stack_self_times): the merge state
    # merge_children keeps per row, here only while the span is open.
    uint64_t span_id
    Py_ssize_t row
    int64_t reach, last_start, covered


cdef inline int64_t self_time(int64_t start, int64_t end, int64_t covered) noexcept nogil:
    """Duration (0 when negative) minus what the children cover, 0 at least."""
    cdef int64_t duration = wrap_sub(end, start)
    if duration < 0:
        duration = 0
    duration = wrap_sub(duration, covered)
    return duration if duration > 0 else 0


cdef inline Py_ssize_t close_spans(const OpenSpan* stack, Py_ssize_t depth, Py_ssize_t keep,
                                   const int64_t* start, const int64_t* end,
                                   int64_t* out) noexcept nogil:
    """The open spans above the first ``keep`` closed (their self times written); returns
    ``keep``, the new depth."""
    cdef Py_ssize_t k
    for k in range(keep, depth):
        out[stack[k].row] = self_time(start[stack[k].row], end[stack[k].row], stack[k].covered)
    return keep


cdef int stack_self_times(Py_ssize_t n, const IdIndex* index, const int64_t* start,
                          const int64_t* end, const uint64_t* span_id, const uint64_t* parent_id,
                          const uint8_t* has_parent, const int64_t* thread, const int64_t* pid,
                          int64_t* out) noexcept nogil:
    """Every row's self time into ``out`` (0), the rows taken as a loader's come: a thread at
    a time, by start, a parent before its children. The spans still open (the ancestors
    of the row at hand, and the last ones closed) are kept on a stack, so a parent is found
    at its top, its merge state is a few bytes there rather than two arrays the size of the
    table, and a row's self time is written once, when its span leaves the stack.

    The result is merge_children's, or the pass gives up (1; -2: no memory) and the caller
    runs merge_children: where a child's parent on its own thread is not on the stack (the
    rows are not in that order), or its children do not come by start. A parent on
    another thread or missing is skipped, as merge_children skips it (the index tells
    which); ids must be unique (the stack matches a parent by id, the index by first
    row)."""
    cdef Py_ssize_t i, p, k, depth = 0, size = 64
    cdef OpenSpan* top
    cdef OpenSpan* grown
    cdef OpenSpan* stack = <OpenSpan*>malloc(size * sizeof(OpenSpan))
    if stack == NULL:
        return -2
    for i in range(n):
        if i and (thread[i] != thread[i - 1] or (pid != NULL and pid[i] != pid[i - 1])):
            depth = close_spans(stack, depth, 0, start, end, out)  # another thread's
        k = -1
        if has_parent[i]:
            k = depth - 1
            while k >= 0 and stack[k].span_id != parent_id[i]:
                k -= 1
            if k < 0:
                p = index_row(index, parent_id[i])
                if p >= 0 and p != i and thread[i] == thread[p] and (pid == NULL or pid[i] == pid[p]):
                    free(stack)
                    return 1  # its parent, on its thread, is not open here
        # The spans above the parent (all of them, for a root) get no more children. (Most
        # rows close none; the call made unguarded cost self_times ~8%.)
        if depth > k + 1:
            depth = close_spans(stack, depth, k + 1, start, end, out)
        if k >= 0:  # merge_children's step, on the parent's stack entry
            top = &stack[k]
            if not merge_child(start[i], end[i], start[top.row], end[top.row], &top.reach,
                               &top.last_start, &top.covered):
                free(stack)
                return 1
        if depth == size:
            size *= 2
            grown = <OpenSpan*>realloc(stack, size * sizeof(OpenSpan))
            if grown == NULL:
                free(stack)
                return -2
            stack = grown
        stack[depth].span_id = span_id[i]
        stack[depth].row = i
        stack[depth].reach = INT64_MIN
        stack[depth].last_start = INT64_MIN
        stack[depth].covered = 0
        depth += 1
    close_spans(stack, depth, 0, start, end, out)
    free(stack)
    return 0


cdef int _check_lengths(Py_ssize_t n, Py_ssize_t end, Py_ssize_t span_id, Py_ssize_t parent_id,
                        Py_ssize_t has_parent, Py_ssize_t thread, Py_ssize_t pid,
                        Py_ssize_t order, str who) except -1:
    """ValueError unless every column given (-1: not given) has ``n`` rows, at most 2**31 - 1."""
    if not (end == span_id == parent_id == has_parent == thread == n) or pid not in (-1, n) \
            or order not in (-1, n):
        raise ValueError(f"{who}: columns of different lengths")
    if n >= 0x7FFFFFFF:
        raise ValueError(f"{who}: more than 2**31 - 1 rows")
    return 0


cdef object _stacked(SpanIndex ids, const int64_t[::1] start, const int64_t[::1] end,
                     const uint64_t[::1] span_id, const uint64_t[::1] parent_id,
                     const uint8_t[::1] has_parent, const int64_t[::1] thread,
                     const int64_t* pid):
    """stack_self_times over the rows (n > 0): the self times, or None where it gives up."""
    cdef Py_ssize_t n = start.shape[0]
    cdef int stacked
    cdef int64_t[::1] written
    if ids.repeat >= 0:
        return None  # an id twice: the stack would match a parent by id, the index by row
    out = np.empty(n, np.int64)
    written = out
    with nogil:
        stacked = stack_self_times(n, &ids.index, &start[0], &end[0], &span_id[0],
                                   &parent_id[0], &has_parent[0], &thread[0], pid, &written[0])
    if stacked == -2:
        raise MemoryError("self_times: no memory for the open spans")
    return out if stacked == 0 else None


def stacked_self_times(const int64_t[::1] start not None, const int64_t[::1] end not None,
                       const uint64_t[::1] span_id not None, const uint64_t[::1] parent_id not None,
                       const uint8_t[::1] has_parent not None, const int64_t[::1] thread not None,
                       const int64_t[::1] pid=None, SpanIndex index=None):
    """:func:`self_times`' first pass for rows in a loader's order (a thread at a time, by
    start, each parent before its children), which keeps only the open spans: the same
    array, or ``None`` where the pass gives up (rows in another order, an id given twice)
    and self_times follows the parent links through the index instead."""
    cdef Py_ssize_t n = start.shape[0]
    _check_lengths(n, end.shape[0], span_id.shape[0], parent_id.shape[0], has_parent.shape[0],
                   thread.shape[0], -1 if pid is None else pid.shape[0], -1, "stacked_self_times")
    if n == 0:
        return np.zeros(0, np.int64)
    return _stacked(_index_for(index, span_id, "stacked_self_times"), start, end, span_id,
                    parent_id, has_parent, thread, &pid[0] if pid is not None else NULL)


def self_times(const int64_t[::1] start not None, const int64_t[::1] end not None,
               const uint64_t[::1] span_id not None, const uint64_t[::1] parent_id not None,
               const uint8_t[::1] has_parent not None, const int64_t[::1] thread not None,
               const int64_t[::1] pid=None, const Py_ssize_t[::1] order=None,
               SpanIndex index=None):
    """Each row's self time (int64 array), the rows visited in ``order`` (default: as they
    are); ``None`` when in that order some parent's children do not come by start time
    (then call again with the rows' start order: ``np.argsort(start, kind="stable")``).
    ``pid``: compared too when given; ``index``: :class:`SpanIndex` of ``span_id``, built
    here when not given. At most 2**31 - 1 rows.

    Rows as they are go first through :func:`stacked_self_times` (a loader's rows: no
    arrays the size of the table but the result, ~40% less time a million rows); where it
    gives up, parents are looked up by id for every row, with each one's merge state in
    two more arrays."""
    cdef Py_ssize_t n = start.shape[0], i
    _check_lengths(n, end.shape[0], span_id.shape[0], parent_id.shape[0], has_parent.shape[0],
                   thread.shape[0], -1 if pid is None else pid.shape[0],
                   -1 if order is None else order.shape[0], "self_times")
    if order is not None:
        for i in range(n):
            if order[i] < 0 or order[i] >= n:
                raise ValueError(f"self_times: order[{i}] = {order[i]} is not a row")
    if n == 0:
        return np.zeros(0, np.int64)
    cdef SpanIndex ids = _index_for(index, span_id, "self_times")
    cdef const int64_t* pid_ptr = &pid[0] if pid is not None else NULL
    if order is None:
        out = _stacked(ids, start, end, span_id, parent_id, has_parent, thread, pid_ptr)
        if out is not None:
            return out
    out = np.zeros(n, np.int64)
    reach_array = np.full(n, INT64_MIN, np.int64)
    last_array = np.full(n, INT64_MIN, np.int64)
    cdef int64_t[::1] covered = out, reach = reach_array, last_start = last_array
    cdef int unsorted = 0
    cdef const Py_ssize_t* order_ptr = &order[0] if order is not None else NULL
    with nogil:
        unsorted = merge_children(n, order_ptr, &ids.index, &start[0], &end[0], &parent_id[0],
                                  &has_parent[0], &thread[0], pid_ptr, &covered[0],
                                  &reach[0], &last_start[0])
    if unsorted:
        return None
    with nogil:
        for i in range(n):
            covered[i] = self_time(start[i], end[i], covered[i])
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
