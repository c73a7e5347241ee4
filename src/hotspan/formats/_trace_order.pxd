# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Trace order, shared by both trace codecs (``_chrome_codec``, ``_perfetto_codec``).

Both formats replay a thread's events in the same order: per thread (index in trace order
of the threads), by start time; at one time, first instants that close their parent (they
are recorded at the parent's last tick), deepest first; then openings, shallowest first,
an instant before a span of its own depth. :func:`trace_order` computes that permutation.

Only ``cdef inline`` functions live here: each codec compiles its own copy (a ``.pxd``
used as a header), so there is one implementation and no extra module to import.
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, int64_t, uint64_t, INT64_MIN
from libc.string cimport memcpy
from libc.stdlib cimport malloc, calloc, free


cdef inline int bit_length(uint64_t v) noexcept nogil:
    cdef int b = 0
    while v:
        b += 1
        v >>= 1
    return b


cdef inline uint64_t _hash(uint64_t key, int bits) noexcept nogil:
    return (key * <uint64_t>0x9E3779B97F4A7C15) >> (64 - bits)


cdef inline uint8_t* closing_instants_dense(Py_ssize_t n, const int64_t* start, const int64_t* duration,
                                            const uint64_t* span_id, const uint64_t* parent_id,
                                            const uint8_t* has_parent, uint64_t low,
                                            uint64_t high) except NULL:
    """``closing_instants`` for span ids within a range of at most ~2 n (a drained table's
    ids are 1, 2, ...): each id's row in an array indexed by the id, no hashing. The array
    is not cleared: an entry is believed only where the row it names has that id (an id no
    row has can name no such row); where rows share an id, the last one's, as the hash
    table keeps it."""
    cdef Py_ssize_t i, j
    cdef uint64_t p
    cdef uint32_t* row = <uint32_t*>malloc((high - low + 1) * sizeof(uint32_t))
    cdef uint8_t* result = <uint8_t*>calloc(n, 1)
    if row == NULL or result == NULL:
        free(row); free(result)
        raise MemoryError()
    for i in range(n):
        row[span_id[i] - low] = <uint32_t>i
    for i in range(n):
        if duration[i] == 0 and has_parent[i]:
            p = parent_id[i]
            j = row[p - low] if low <= p <= high else n
            if j < n and span_id[j] == p:
                result[i] = start[j] + duration[j] == start[i]
            else:
                result[i] = start[i] == INT64_MIN  # no parent here: as the hash table's answer
    free(row)
    return result


cdef inline uint8_t* closing_instants(Py_ssize_t n, const int64_t* start, const int64_t* duration,
                                      const uint64_t* span_id, const uint64_t* parent_id,
                                      const uint8_t* has_parent) except? NULL:
    """Per row 1 for an instant whose parent ends at the instant's own time (it must come
    before that end), else 0; NULL when there is none. The parents are found with a hash
    table of the instants' parent ids only (instants are few), behind a bit filter of
    them that fits in cache (most rows are no instant's parent)."""
    cdef Py_ssize_t i, m = 0
    cdef int bits = 1
    cdef uint64_t size, h, mask
    cdef uint64_t* keys
    cdef int64_t* ends
    cdef uint8_t* used
    cdef uint8_t* seen  # a bit per hash of the instants' parent ids: a filter before the table
    cdef uint64_t f
    cdef int filter_bits
    cdef uint8_t* result
    cdef uint64_t low = span_id[0], high = span_id[0]
    for i in range(n):
        if duration[i] == 0 and has_parent[i]:
            m += 1
        if span_id[i] < low: low = span_id[i]
        if span_id[i] > high: high = span_id[i]
    if m == 0:
        return NULL
    if high - low < <uint64_t>(2 * n + 4096):
        return closing_instants_dense(n, start, duration, span_id, parent_id, has_parent, low, high)
    while (<uint64_t>1 << bits) < <uint64_t>(2 * m):
        bits += 1
    size = <uint64_t>1 << bits
    mask = size - 1
    filter_bits = min(bits + 4, 24)
    keys = <uint64_t*>malloc(size * sizeof(uint64_t))
    ends = <int64_t*>malloc(size * sizeof(int64_t))
    used = <uint8_t*>calloc(size, 1)
    seen = <uint8_t*>calloc((<size_t>1 << filter_bits) // 8 + 1, 1)
    result = <uint8_t*>calloc(n, 1)
    if keys == NULL or ends == NULL or used == NULL or seen == NULL or result == NULL:
        free(keys); free(ends); free(used); free(seen); free(result)
        raise MemoryError()
    for i in range(n):
        if duration[i] == 0 and has_parent[i]:
            h = _hash(parent_id[i], bits)
            while used[h] and keys[h] != parent_id[i]:
                h = (h + 1) & mask
            used[h] = 1
            keys[h] = parent_id[i]
            ends[h] = INT64_MIN
            f = _hash(parent_id[i], filter_bits)
            seen[f >> 3] |= <uint8_t>(1 << (f & 7))
    for i in range(n):
        f = _hash(span_id[i], filter_bits)
        if not (seen[f >> 3] >> (f & 7)) & 1:
            continue  # no instant's parent: most rows, told apart without a probe
        h = _hash(span_id[i], bits)
        while used[h]:
            if keys[h] == span_id[i]:
                ends[h] = start[i] + duration[i]
                break
            h = (h + 1) & mask
    for i in range(n):
        if duration[i] == 0 and has_parent[i]:
            h = _hash(parent_id[i], bits)
            while keys[h] != parent_id[i]:
                h = (h + 1) & mask
            result[i] = ends[h] == start[i]
    free(keys); free(ends); free(used); free(seen)
    return result


cdef inline int radix_argsort(uint64_t* key, uint32_t* index, Py_ssize_t n, int bits) except -1:
    """Sort ``index`` (initially 0..n-1) by ``key``, stably: LSD radix on bytes (256
    buckets: the scatter's write positions stay in L1), every digit's histogram from one
    read of the keys, digits every key shares skipped. ``key`` is permuted along."""
    cdef uint64_t* k2 = <uint64_t*>malloc(n * sizeof(uint64_t) + 1)
    cdef uint32_t* i2 = <uint32_t*>malloc(n * sizeof(uint32_t) + 1)
    cdef Py_ssize_t (*count)[256]
    cdef Py_ssize_t i, total, c
    cdef int digits = (bits + 7) // 8, shift, d, v
    cdef uint64_t kv
    cdef uint64_t* tk
    cdef uint32_t* ti
    cdef bint swapped = False
    count = <Py_ssize_t (*)[256]>calloc(8 * 256, sizeof(Py_ssize_t))
    if k2 == NULL or i2 == NULL or count == NULL:
        free(k2); free(i2); free(count)
        raise MemoryError()
    with nogil:
        for i in range(n):
            kv = key[i]
            for d in range(digits):
                count[d][(kv >> (8 * d)) & 255] += 1
        for d in range(digits):
            shift = 8 * d
            if count[d][(key[0] >> shift) & 255] == n:
                continue  # every key has this byte: nothing moves
            total = 0
            for v in range(256):
                c = count[d][v]
                count[d][v] = total
                total += c
            for i in range(n):
                kv = key[i]
                v = (kv >> shift) & 255
                k2[count[d][v]] = kv
                i2[count[d][v]] = index[i]
                count[d][v] += 1
            tk = key; key = k2; k2 = tk
            ti = index; index = i2; i2 = ti
            swapped = not swapped
        if swapped:  # the result is in the scratch arrays: copy it back
            memcpy(k2, key, n * sizeof(uint64_t))
            memcpy(i2, index, n * sizeof(uint32_t))
            tk = key; key = k2; k2 = tk
            ti = index; index = i2; i2 = ti
    free(k2)
    free(i2)
    free(count)
    return 0


cdef struct Ranks:
    # A row's rank at its time, computed where it is needed (rank_of): an array of them is
    # 8 bytes a row of fresh memory, which only the Perfetto codec keeps (rank_out).
    const int64_t* duration
    const int32_t* depth
    const uint8_t* closing  # NULL: no closing instant
    int64_t min_depth
    int64_t max_depth


cdef inline int64_t rank_of(const Ranks* r, Py_ssize_t i) noexcept nogil:
    """Row ``i``'s rank among the rows at its time (see :func:`trace_order`)."""
    if r.closing != NULL and r.closing[i]:
        return r.max_depth - r.depth[i]
    return r.max_depth - r.min_depth + 1 + 2 * (r.depth[i] - r.min_depth) + (r.duration[i] > 0)


cdef inline int64_t* rank_array(const Ranks* r, Py_ssize_t n) except NULL:
    """Every row's rank (malloc'd; the caller frees it)."""
    cdef Py_ssize_t i
    cdef int64_t* rank = <int64_t*>malloc(n * sizeof(int64_t) + 1)
    if rank == NULL:
        raise MemoryError()
    for i in range(n):
        rank[i] = rank_of(r, i)
    return rank


cdef inline int keys_by_thread(Py_ssize_t n, const int32_t* thread, const int64_t* start,
                               const Ranks* rank, int64_t min_start, int bits_start, int bits_rank,
                               int32_t max_thread, uint64_t* key, uint32_t* order,
                               Py_ssize_t* starts) except -1:
    """Each row's sort key (thread, start - min start, rank packed, in that order of
    significance) into ``key`` and its row into ``order``, the rows grouped by thread
    (a counting sort on the key's top part: stable, one pass). ``starts`` (NULL: not
    wanted; else max_thread + 2 entries): where each thread's rows begin, and n last."""
    cdef Py_ssize_t i, j, total = 0, c
    cdef int32_t t
    cdef Py_ssize_t* at = <Py_ssize_t*>calloc(<size_t>max_thread + 1, sizeof(Py_ssize_t))
    if at == NULL:
        raise MemoryError()
    for i in range(n):
        at[thread[i]] += 1
    for t in range(max_thread + 1):
        c = at[t]
        at[t] = total
        total += c
    if starts != NULL:
        memcpy(starts, at, (<size_t>max_thread + 1) * sizeof(Py_ssize_t))
        starts[max_thread + 1] = n
    for i in range(n):
        t = thread[i]
        j = at[t]
        at[t] = j + 1
        key[j] = ((<uint64_t>t << bits_start) | <uint64_t>(start[i] - min_start)) << bits_rank | <uint64_t>rank_of(rank, i)
        order[j] = <uint32_t>i
    free(at)
    return 0


cdef inline bint insertion_argsort(uint64_t* key, uint32_t* index, Py_ssize_t n,
                                   Py_ssize_t budget) noexcept nogil:
    """Sort ``key`` (``index`` along) stably by insertion: as many moves as the keys have
    inversions, which rows nearly in order have few of. False as soon as more than
    ``budget`` moves were made: the keys are then left partly sorted (each with its index,
    equal keys in their first order), for another sort to finish."""
    cdef Py_ssize_t i, j, moves = 0
    cdef uint64_t kv
    cdef uint32_t iv
    for i in range(1, n):
        kv = key[i]
        if kv >= key[i - 1]:
            continue
        iv = index[i]
        j = i - 1
        while j >= 0 and key[j] > kv:
            key[j + 1] = key[j]
            index[j + 1] = index[j]
            j -= 1
        key[j + 1] = kv
        index[j + 1] = iv
        moves += i - 1 - j
        if moves > budget:
            return False
    return True


cdef inline bint in_trace_order(Py_ssize_t n, const int32_t* thread, const int64_t* start,
                                const Ranks* rank) noexcept nogil:
    """Whether the rows are in trace order already: (thread, start, rank) never decreasing
    from one row to the next, so that a stable sort by them leaves every row where it is
    (a loaded trace's rows, exported again; drained rows, per thread in end order, are
    told apart within a few rows)."""
    cdef Py_ssize_t i
    for i in range(1, n):
        if thread[i] != thread[i - 1]:
            if thread[i] < thread[i - 1]:
                return False
        elif start[i] != start[i - 1]:
            if start[i] < start[i - 1]:
                return False
        elif rank_of(rank, i) < rank_of(rank, i - 1):
            return False
    return True


cdef inline int sort_rows(uint64_t* key, uint32_t* index, Py_ssize_t n, int bits) except -1:
    """Sort ``index`` by ``key`` stably. Rows come mostly in end order per thread (drained,
    or loaded): a few moves each put them in start order; a radix sort only for rows far
    from it. (A stable sort's result is unique: sorting each thread's rows on their own
    gives what sorting all of them at once does.)"""
    if not insertion_argsort(key, index, n, 16 * n + 4096):
        radix_argsort(key, index, n, bits)
    return 0


cdef struct ThreadSort:
    # What trace_order leaves to a caller that sorts a thread at a time (sort_thread).
    uint64_t* key  # per row in the permutation's order, its sort key (NULL: nothing to sort)
    Py_ssize_t* starts  # per thread, its first row in the permutation; then n
    Py_ssize_t threads
    int bits  # the keys' significant bits


cdef inline Py_ssize_t sort_thread(ThreadSort* s, uint32_t* order, Py_ssize_t t) except -1:
    """Sort thread ``t``'s rows of ``order`` (trace_order's, grouped by thread) into trace
    order; returns where the thread's rows end."""
    cdef Py_ssize_t a = s.starts[t], b = s.starts[t + 1]
    if b - a > 1:
        sort_rows(s.key + a, order + a, b - a, s.bits)
    return b


cdef inline uint32_t* trace_order(Py_ssize_t n, const int64_t* start, const int64_t* duration,
                                  const int32_t* depth, const uint64_t* span_id, const uint64_t* parent_id,
                                  const uint8_t* has_parent, const int32_t* thread,
                                  int64_t** rank_out, uint8_t** closing_out, int64_t* max_depth_out,
                                  ThreadSort* by_thread=NULL) except NULL:
    """The permutation (malloc'd, the caller frees it) putting ``n`` (1 .. 2^32 - 2) rows
    in trace order (see the module's docstring), sorting a key packing (thread, start -
    min start, rank); ``thread`` holds indices in trace order of the
    threads. Optionally also hands out (malloc'd) each row's rank at its time (instants
    closing their parent: max depth - depth; openings: D + 1 + 2 * (depth - min depth) +
    is_span), the closing-instant flags (NULL: none) and the largest depth.

    ``by_thread`` (NULL: not wanted): where the rows must be sorted by key, the sort is
    left to the caller, a thread at a time (:func:`sort_thread`), so that it can write one
    thread's events while the next one's are not sorted yet: the permutation comes back
    grouped by thread only, and ``by_thread`` holds the keys and each thread's first row
    (``by_thread.key`` NULL: the permutation is final; else the caller frees ``key`` and
    ``starts``)."""
    cdef Py_ssize_t i
    cdef int64_t min_start = start[0], max_start = start[0], min_depth = depth[0], max_depth = depth[0]
    cdef int32_t max_thread = 0
    cdef uint8_t* closing = closing_instants(n, start, duration, span_id, parent_id, has_parent)
    cdef uint32_t* order = <uint32_t*>malloc(n * sizeof(uint32_t) + 1)
    cdef int64_t* rank = NULL
    cdef uint64_t* key = NULL
    cdef int64_t D
    cdef int bits_rank, bits_start, bits_thread
    cdef Ranks ranks
    try:
        if order == NULL:
            raise MemoryError()
        for i in range(n):
            if start[i] < min_start: min_start = start[i]
            if start[i] > max_start: max_start = start[i]
            if depth[i] < min_depth: min_depth = depth[i]
            if depth[i] > max_depth: max_depth = depth[i]
            if thread[i] > max_thread: max_thread = thread[i]
        D = max_depth - min_depth
        bits_rank = bit_length(<uint64_t>(3 * D + 2))  # the largest rank
        bits_start = bit_length(<uint64_t>(max_start - min_start))
        bits_thread = bit_length(<uint64_t>max_thread)
        ranks = Ranks(duration, depth, closing, min_depth, max_depth)
        if rank_out != NULL:
            rank = rank_array(&ranks, n)
        if in_trace_order(n, thread, start, &ranks):
            for i in range(n):  # what the stable sort below would give: no row moves
                order[i] = <uint32_t>i
        elif bits_thread + bits_start + bits_rank <= 64:
            key = <uint64_t*>malloc(n * sizeof(uint64_t) + 1)
            if key == NULL:
                raise MemoryError()
            if by_thread != NULL:
                by_thread.starts = <Py_ssize_t*>malloc((<size_t>max_thread + 2) * sizeof(Py_ssize_t))
                if by_thread.starts == NULL:
                    raise MemoryError()
            keys_by_thread(n, thread, start, &ranks, min_start, bits_start, bits_rank, max_thread,
                           key, order, NULL if by_thread == NULL else by_thread.starts)
            if by_thread != NULL:  # the caller sorts each thread's rows (sort_thread)
                by_thread.key = key
                by_thread.threads = max_thread + 1
                by_thread.bits = bits_thread + bits_start + bits_rank
                key = NULL
            else:
                sort_rows(key, order, n, bits_thread + bits_start + bits_rank)
        else:
            # Start times spread over more than 2^64 ns with thread and rank bits: rare
            # enough for numpy's general sort.
            import numpy as np
            if rank == NULL:
                rank = rank_array(&ranks, n)
            by = np.lexsort((np.asarray(<int64_t[:n]>rank), np.asarray(<int64_t[:n]><int64_t*>start),
                             np.asarray(<int32_t[:n]><int32_t*>thread))).astype(np.uint32)
            for i in range(n):
                order[i] = by[i]
    except BaseException:
        free(order); free(rank); free(closing); free(key)
        if by_thread != NULL:
            free(by_thread.starts)
            by_thread.starts = NULL
        raise
    free(key)
    if rank_out != NULL:
        rank_out[0] = rank
    else:
        free(rank)
    if closing_out != NULL:
        closing_out[0] = closing
    else:
        free(closing)
    if max_depth_out != NULL:
        max_depth_out[0] = max_depth
    return order


cdef inline tuple thread_codes_of(Py_ssize_t n, const int64_t* pid, const int32_t* rank, const int64_t* tid,
                                  const int32_t* thread_name):
    """Per row the index of its (pid, rank, tid) in ``keys`` (first-seen order), keys, and
    how many rows of each thread carry each thread name: {(thread, name code): rows},
    counted in runs (rows of a thread come in long runs), so Python sees only the changes."""
    import numpy as np
    cdef Py_ssize_t i, run = 0
    codes = np.empty(n, np.int32)
    cdef int32_t[::1] c = codes
    cdef int64_t lp = 0, lt = 0
    cdef int32_t lr = 0, last = -1, last_name = -1
    seen = {}
    names = {}
    for i in range(n):
        if last < 0 or pid[i] != lp or rank[i] != lr or tid[i] != lt or thread_name[i] != last_name:
            if run:
                names[last, last_name] = names.get((last, last_name), 0) + run
            lp, lr, lt, last_name = pid[i], rank[i], tid[i], thread_name[i]
            last = seen.setdefault((lp, lr, lt), len(seen))
            run = 0
        c[i] = last
        run += 1
    if run:
        names[last, last_name] = names.get((last, last_name), 0) + run
    return codes, list(seen), names
