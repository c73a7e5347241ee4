# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The statistics' per-batch kernels, each one pass over a batch's columns in C (numpy did
the same in a dozen passes, each with its temporaries: most of the CPU of ``hotspan stats``
past the Parquet decoding).

- :func:`dense_codes`: rows numbered by their combination of key codes, 0 .. G-1 in the
  order of the combined code (what ``_columns.densify`` gives), and a row of each group.
- :func:`group_aggregates`: per group the counts and exact sums of ``queries.STAT_AGGREGATES``
  (``n``, ``self_total``, ``wait_total``, ``errors``, ``instants``, ``args``, ``arg_sum``,
  ``arg_time``, and ``total``, ``lo``, ``hi``) and, if asked, the durations ordered by group
  (rows in their order within a group: a counting sort), in 4 bytes where they all fit.
- :func:`select_ranks`: the values at given ranks of a group's durations, held in pieces
  (the batches'), by a histogram of their top bits: what numpy's partition of the pieces put
  together gives, without putting them together.

Sums are taken modulo 2**64 and read as int64, as numpy's integer additions wrap.
"""
from libc.stdint cimport uint8_t, int32_t, int64_t, uint64_t, INT64_MAX, INT64_MIN

import numpy as np

#: The most combined codes :func:`dense_codes` numbers through a table (4 bytes each).
DENSE_LIMIT = 1 << 22


def dense_codes(list codes, list sizes):
    """Per row its group, 0 .. G-1 (int32), over the combinations of ``codes`` (one int32
    array a key, its values in [0, size)), numbered in the order of the combined code
    ``((c0 * s1 + c1) * s2 + c2) ...``; and per group the index of one of its rows (int64).
    The product of ``sizes`` must be at most :data:`DENSE_LIMIT`."""
    cdef Py_ssize_t n = len(codes[0]) if codes else 0
    cdef Py_ssize_t i, j, size = 1
    for s in sizes:
        size *= max(<Py_ssize_t>s, 1)
    if size > DENSE_LIMIT:
        raise ValueError(f"{size} combined codes: more than {DENSE_LIMIT}")
    group_array = np.empty(n, np.int32)
    cdef int32_t[::1] group = group_array
    cdef const int32_t[::1] key
    cdef int32_t k
    if not codes:
        group_array[:] = 0
    for j in range(len(codes)):
        key = codes[j]
        if key.shape[0] != n:
            raise ValueError("the key codes differ in length")
        if j == 0:
            with nogil:
                for i in range(n):
                    group[i] = key[i]
        else:
            k = max(<int32_t>sizes[j], 1)
            with nogil:
                for i in range(n):
                    group[i] = group[i] * k + key[i]
    table_array = np.zeros(size, np.int32)
    cdef int32_t[::1] table = table_array
    cdef int32_t count = 0
    with nogil:
        for i in range(n):
            table[group[i]] = 1
        for i in range(size):
            if table[i]:
                table[i] = count
                count += 1
    representative_array = np.empty(count, np.int64)
    cdef int64_t[::1] representative = representative_array
    with nogil:
        for i in range(n):
            group[i] = table[group[i]]
            representative[group[i]] = i
    return group_array, representative_array


def group_aggregates(
    const int32_t[::1] group,
    Py_ssize_t groups,
    const int64_t[::1] duration,
    self_ns=None,
    self_valid=None,
    wait=None,
    wait_valid=None,
    error=None,
    arg=None,
    arg_valid=None,
    bint ordered=False,
):
    """Per group (``group``: a code in [0, groups) per row) the aggregates named in the
    module doc, as int64 arrays in a dict; with ``ordered`` also ``ordered`` (the durations
    by group, rows in order within a group; int32 where every duration fits) and ``starts``
    (each group's first place in it). ``self_ns``, ``wait``, ``arg``: int64 values,
    ``*_valid`` and ``error``: uint8 (or bool) per row, None for none (all valid, no error);
    a null ``self_ns`` or ``wait`` adds 0, a null ``arg`` is not counted."""
    cdef Py_ssize_t n = group.shape[0], i, g
    if duration.shape[0] != n:
        raise ValueError("group and duration differ in length")
    cdef const int64_t[::1] self_v = _values(self_ns, n)
    cdef const uint8_t[::1] self_ok = _flags(self_valid, n)
    cdef const int64_t[::1] wait_v = _values(wait, n)
    cdef const uint8_t[::1] wait_ok = _flags(wait_valid, n)
    cdef const uint8_t[::1] err = _flags(error, n)
    cdef const int64_t[::1] arg_v = _values(arg, n)
    cdef const uint8_t[::1] arg_ok = _flags(arg_valid, n)
    cdef bint has_self = self_ns is not None, has_wait = wait is not None
    cdef bint has_error = error is not None, has_arg = arg is not None
    cdef bint self_all = self_valid is None, wait_all = wait_valid is None
    cdef bint arg_all = arg_valid is None

    out = {
        name: np.zeros(groups, np.int64)
        for name in (
            "n", "total", "self_total", "wait_total", "errors", "instants", "args", "arg_sum",
            "arg_time",
        )
    }
    out["lo"] = np.full(groups, INT64_MAX, np.int64)
    out["hi"] = np.full(groups, INT64_MIN, np.int64)
    cdef int64_t[::1] count = out["n"], errors = out["errors"], instants = out["instants"]
    cdef int64_t[::1] args = out["args"], lo = out["lo"], hi = out["hi"]
    # sums as uint64: they wrap as numpy's int64 additions do, without C's undefined overflow
    cdef uint64_t[::1] total = out["total"].view(np.uint64)
    cdef uint64_t[::1] self_total = out["self_total"].view(np.uint64)
    cdef uint64_t[::1] wait_total = out["wait_total"].view(np.uint64)
    cdef uint64_t[::1] arg_sum = out["arg_sum"].view(np.uint64)
    cdef uint64_t[::1] arg_time = out["arg_time"].view(np.uint64)
    cdef int64_t d, least = INT64_MAX, most = INT64_MIN
    with nogil:
        for i in range(n):
            g = group[i]
            d = duration[i]
            count[g] += 1
            total[g] += <uint64_t>d
            if d < lo[g]:
                lo[g] = d
            if d > hi[g]:
                hi[g] = d
            if d == 0:
                instants[g] += 1
            if has_self and (self_all or self_ok[i]):
                self_total[g] += <uint64_t>self_v[i]
            if has_wait and (wait_all or wait_ok[i]):
                wait_total[g] += <uint64_t>wait_v[i]
            if has_error and err[i]:
                errors[g] += 1
            if has_arg and (arg_all or arg_ok[i]):
                args[g] += 1
                arg_sum[g] += <uint64_t>arg_v[i]
                arg_time[g] += <uint64_t>d
            if d < least:
                least = d
            if d > most:
                most = d
    if not ordered:
        return out
    starts_array = np.zeros(groups, np.int64)
    cdef int64_t[::1] starts = starts_array
    cdef int64_t at = 0
    for g in range(groups):
        starts[g] = at
        at += count[g]
    place_array = starts_array.copy()
    cdef int64_t[::1] place = place_array
    cdef int32_t[::1] narrow
    cdef int64_t[::1] wide
    if n == 0 or (-(<int64_t>1 << 31) <= least and most < (<int64_t>1 << 31)):
        ordered_array = np.empty(n, np.int32)
        narrow = ordered_array
        with nogil:
            for i in range(n):
                g = group[i]
                narrow[place[g]] = <int32_t>duration[i]
                place[g] += 1
    else:
        ordered_array = np.empty(n, np.int64)
        wide = ordered_array
        with nogil:
            for i in range(n):
                g = group[i]
                wide[place[g]] = duration[i]
                place[g] += 1
    out["ordered"] = ordered_array
    out["starts"] = starts_array
    return out


cdef const int64_t[::1] _values(object column, Py_ssize_t n):
    if column is None:
        return np.zeros(1, np.int64)
    cdef const int64_t[::1] values = column
    if values.shape[0] != n:
        raise ValueError("a column differs in length from the groups")
    return values


cdef const uint8_t[::1] _flags(object column, Py_ssize_t n):
    if column is None:
        return np.zeros(1, np.uint8)
    array = np.asarray(column)
    if array.dtype == np.bool_:
        array = array.view(np.uint8)
    cdef const uint8_t[::1] flags = array
    if flags.shape[0] != n:
        raise ValueError("a column differs in length from the groups")
    return flags


#: Buckets of the first pass of :func:`select_ranks` (the top bits of a value's offset from
#: the group's least).
cdef enum:
    SELECT_BUCKETS = 1 << 16


def select_ranks(list pieces, ranks, least_known=None, most_known=None):
    """The values at 0-based ``ranks`` (int64, each in [0, n)) of the n values held in
    ``pieces`` (int32 or int64 arrays, in any order), as int64: what sorting them all and
    indexing would give, without putting them together. Three passes over the pieces: their
    least and greatest; a histogram of 65,536 buckets (the top bits of each value's offset
    from the least), whose cumulative counts place each rank in a bucket; the values of those
    few buckets gathered, each bucket's then partitioned by numpy at the ranks within it.
    ``least_known`` and ``most_known``, where given (the group's least and greatest value,
    which the aggregates hold), save the first pass."""
    wanted = np.ascontiguousarray(ranks, np.int64)
    cdef const int64_t[::1] rank = wanted
    cdef Py_ssize_t r, b, p, i, m, count = 0
    cdef int64_t least = INT64_MAX, most = INT64_MIN, v
    cdef const int32_t[::1] narrow
    cdef const int64_t[::1] wide
    views = []
    for piece in pieces:
        array = np.asarray(piece)
        if array.dtype != np.int32:
            array = np.ascontiguousarray(array, np.int64)
        else:
            array = np.ascontiguousarray(array)
        views.append(array)
        count += len(array)
    result = np.zeros(len(wanted), np.int64)
    if count == 0:
        return result
    for r in range(rank.shape[0]):
        if rank[r] < 0 or rank[r] >= count:
            raise IndexError(f"rank {rank[r]} of {count} values")
    if least_known is not None and most_known is not None:
        least, most = least_known, most_known
        views_to_scan = []
    else:
        views_to_scan = views
    for array in views_to_scan:
        if array.dtype == np.int32:
            narrow = array
            m = narrow.shape[0]
            with nogil:
                for i in range(m):
                    v = narrow[i]
                    if v < least:
                        least = v
                    if v > most:
                        most = v
        else:
            wide = array
            m = wide.shape[0]
            with nogil:
                for i in range(m):
                    v = wide[i]
                    if v < least:
                        least = v
                    if v > most:
                        most = v
    # the shift that puts every offset (most - least: at most 2**64 - 1) in a bucket
    cdef int shift = 0
    cdef uint64_t span = <uint64_t>most - <uint64_t>least
    while (span >> shift) >= SELECT_BUCKETS:
        shift += 1
    histogram_array = np.zeros(SELECT_BUCKETS, np.int64)
    cdef int64_t[::1] histogram = histogram_array
    cdef uint64_t bucket_at
    cdef bint outside = False  # a value past the extremes given
    for array in views:
        if array.dtype == np.int32:
            narrow = array
            m = narrow.shape[0]
            with nogil:
                for i in range(m):
                    bucket_at = (<uint64_t>(<int64_t>narrow[i]) - <uint64_t>least) >> shift
                    if bucket_at < SELECT_BUCKETS:
                        histogram[bucket_at] += 1
                    else:
                        outside = True
        else:
            wide = array
            m = wide.shape[0]
            with nogil:
                for i in range(m):
                    bucket_at = (<uint64_t>wide[i] - <uint64_t>least) >> shift
                    if bucket_at < SELECT_BUCKETS:
                        histogram[bucket_at] += 1
                    else:
                        outside = True
    if outside or (<uint64_t>most - <uint64_t>least) != span:
        raise ValueError(f"a value outside [{least}, {most}], the extremes given")
    # each rank's bucket, and its place among the bucket's values
    before_array = np.cumsum(histogram_array) - histogram_array  # the counts before each bucket
    cdef const int64_t[::1] before = before_array
    bucket_of = np.searchsorted(np.cumsum(histogram_array), wanted, side="right")
    targets = np.unique(bucket_of)
    # a slot per target bucket (1-based; 0: not wanted), and where its values go
    slot_array = np.zeros(SELECT_BUCKETS, np.int32)
    slot_array[targets] = np.arange(1, len(targets) + 1, dtype=np.int32)
    cdef const int32_t[::1] slot = slot_array
    sizes = histogram_array[targets]
    offsets_array = np.concatenate(([0], np.cumsum(sizes)))
    place_array = offsets_array[: len(sizes)].copy()  # all but the last, no negative index
    cdef int64_t[::1] place = place_array
    # the total is offsets_array's last, read without a negative index (wraparound=False)
    gathered_array = np.empty(int(sizes.sum()), np.int64)
    cdef int64_t[::1] gathered = gathered_array
    cdef int32_t s
    for array in views:
        if array.dtype == np.int32:
            narrow = array
            m = narrow.shape[0]
            with nogil:
                for i in range(m):
                    v = narrow[i]
                    s = slot[(<uint64_t>v - <uint64_t>least) >> shift]
                    if s:
                        gathered[place[s - 1]] = v
                        place[s - 1] += 1
        else:
            wide = array
            m = wide.shape[0]
            with nogil:
                for i in range(m):
                    v = wide[i]
                    s = slot[(<uint64_t>v - <uint64_t>least) >> shift]
                    if s:
                        gathered[place[s - 1]] = v
                        place[s - 1] += 1
    for t, bucket in enumerate(targets):
        here = bucket_of == bucket
        within = wanted[here] - before[bucket]
        values = gathered_array[offsets_array[t] : offsets_array[t + 1]]
        values.partition(np.unique(within))
        result[here] = values[within]
    return result
