# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Perfetto protobuf (TrackEvent) codec: one encoder, one streaming decoder.

Wire layout (what :func:`encode` writes and :class:`Decoder` reads, in any field order):

* ``TrackDescriptor`` packets on sequence 1: per process (pid, cmdline, name, labels
  ``hotspan.rank=N``, ``hotspan.pid=P`` and, on the first one, ``hotspan.meta=<JSON of the
  table's schema metadata>``), per thread (parent process track, pid, tid, name);
* per thread one trusted packet sequence (2 + thread index) whose first packet clears the
  incremental state and interns the debug annotation names; a name or category is interned
  on a sequence just before the first event that uses it there;
* counters (``export(..., counters=)``, ``formats/_perfetto_counters.py``): counter track
  descriptors and ``COUNTER`` events on a sequence of their own, after the spans; the
  decoder skips them;
* per span a ``SLICE_BEGIN``/``SLICE_END`` pair, per instant (``duration_ns == 0``) an
  ``INSTANT``, on the thread's track, in the order a viewer replays them (by start time;
  at one time, instants that close their parent first, ends before the spans opening then,
  a parent before its children); each opening carries debug annotations ``span_id``,
  ``parent_id``, ``depth``, ``arg``, ``error`` (only when true) and ``thread_name`` (only for
  the rare span whose thread was renamed mid-trace), and a span with a device row on
  another track (``codec_inputs.device_flows``) a flow (``flow_ids`` on the host span,
  ``terminating_flow_ids`` on the device row: Perfetto draws the arrow; the decoder skips
  both, the rows' ``parent_id`` already says it); the ranks' spans of one collective
  instance (``codec_inputs.collective_flows``) one flow, ``flow_ids`` on each but the last
  to start, ``terminating_flow_ids`` on the last: a chain in arrival order.

The decoder reads a packet in exactly the layout the encoder writes (``put_begin``,
``put_end``: each field once, in that order, under our annotation ids) by a fast path
(``our_packet``), and any other packet, valid or not, by the general path, field by tag
(``any_packet``): both store rows through the same ``add_slice``/``close_slice``, and
``Decoder(fast=False)`` reads by the general path alone (the tests compare the two). Its
columns are buffers of Arrow's memory pool, handed to the table without a copy.

The codec only receives buffers: the caller (``formats/_perfetto.py``) turns the table's
columns into contiguous numpy arrays and back. Every read is bounds-checked: a bad file is a
:class:`CodecError` (a ``ValueError``) with the byte offset, never a crash.
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, int64_t, uint64_t, uintptr_t, INT64_MIN
from libc.string cimport memcpy, memmove, memset
from libc.stdlib cimport malloc, realloc, free, calloc
from libc.errno cimport errno, EINTR
from posix.unistd cimport read as c_read, lseek, SEEK_CUR
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize

cimport cython

from ._trace_order cimport trace_order, thread_codes_of
from ._block_writer cimport hs_writer, hs_writer_start, hs_writer_submit, hs_writer_stop

import json
import os

import numpy as np
import pyarrow as pa


class CodecError(ValueError):
    """A byte stream that is not a Perfetto trace this codec reads."""


# Field numbers and constants of the wire format (TracePacket, TrackEvent, DebugAnnotation,
# InternedData), the debug annotation ids we write (A_*), and the decoder's row flags.
cdef enum:
    F_TIMESTAMP = 8
    F_SEQUENCE_ID = 10
    F_TRACK_EVENT = 11
    F_INTERNED_DATA = 12
    F_SEQUENCE_FLAGS = 13
    F_TRACK_DESCRIPTOR = 60
    STATE_CLEARED = 1
    NEEDS_STATE = 2
    F_EVENT_CATEGORY_IIDS = 3
    F_EVENT_ANNOTATIONS = 4
    F_EVENT_TYPE = 9
    F_EVENT_NAME_IID = 10
    F_EVENT_TRACK_UUID = 11
    SLICE_BEGIN = 1
    SLICE_END = 2
    INSTANT = 3
    COUNTER = 4  # a counter track's value: hotspan.counters reads those (perfetto_counters.py)
    F_ANNOTATION_NAME_IID = 1
    F_ANNOTATION_BOOL = 2
    F_ANNOTATION_UINT = 3
    F_ANNOTATION_INT = 4
    F_ANNOTATION_STRING = 6
    F_INTERNED_CATEGORIES = 1
    F_INTERNED_NAMES = 2
    F_INTERNED_ANNOTATION_NAMES = 3
    A_SPAN_ID = 1
    A_PARENT_ID = 2
    A_DEPTH = 3
    A_ARG = 4
    A_ERROR = 5
    A_THREAD_NAME = 6
    HAS_PARENT = 1
    HAS_ARG = 2
    HAS_CATEGORY = 4
    ERROR = 8
    HAS_SPAN_ID = 16
    HAS_DEPTH = 32
    MAX_PACKET_BYTES = 64 << 20

#: The decoder's columns: name, bytes a value, numpy type (Decoder.columns()).
COLUMNS = (("start", 8, np.int64), ("end", 8, np.int64), ("duration", 8, np.int64), ("span_id", 8, np.uint64),
           ("parent_id", 8, np.uint64), ("arg", 8, np.int64), ("depth", 4, np.int32), ("name", 4, np.uint32),
           ("category", 4, np.uint32), ("track", 4, np.int32), ("flags", 1, np.uint8))
# Debug annotation names (their iids on every sequence we write) and their meaning.
ANNOTATIONS = ("span_id", "parent_id", "depth", "arg", "error", "thread_name")
#: Bits of a decoded row's flags (Decoder.columns()["flags"]).
ROW_HAS_PARENT, ROW_HAS_ARG, ROW_HAS_CATEGORY, ROW_ERROR = HAS_PARENT, HAS_ARG, HAS_CATEGORY, ERROR
#: The largest packet the reader takes (the writer refuses strings that would need more).
PACKET_LIMIT = MAX_PACKET_BYTES

# Track/Process/Thread descriptor fields
TRACK_UUID, TRACK_PARENT_UUID, TRACK_PROCESS, TRACK_THREAD = 1, 5, 3, 4
PROCESS_PID, PROCESS_CMDLINE, PROCESS_NAME, PROCESS_LABELS = 1, 2, 6, 8
THREAD_PID, THREAD_TID, THREAD_NAME = 1, 2, 5
DESCRIPTOR_SEQUENCE = 1

#: MAX_PACKET_BYTES: no packet we write comes near it; a larger one is refused rather than
#: buffered, so a corrupt length never makes the reader hold more than this beside its block.


# =========================================================================== varints


cdef inline int varint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint8_t* put_varint(uint8_t* p, uint64_t v) noexcept nogil:
    """``v`` as a protobuf varint at ``p``; the position after it."""
    cdef uint64_t w
    if v >= <uint64_t>1 << 56:
        # Nine or ten bytes (every timestamp: epoch nanoseconds): the first eight groups of
        # seven bits spread into one word with their continuation bits, and stored at once
        # (little-endian, as the flow ids are), rather than a byte a dependent step.
        w = ((v & 0x7F) | (v << 1 & 0x7F00) | (v << 2 & 0x7F0000) | (v << 3 & 0x7F000000)
             | (v << 4 & <uint64_t>0x7F00000000) | (v << 5 & <uint64_t>0x7F0000000000)
             | (v << 6 & <uint64_t>0x7F000000000000) | (v << 7 & <uint64_t>0x7F00000000000000))
        w |= <uint64_t>0x8080808080808080
        memcpy(p, &w, 8)
        p += 8
        v >>= 56
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        v >>= 7
        p += 1
    p[0] = <uint8_t>v
    return p + 1


cdef inline uint8_t* close_len(uint8_t* lenpos, uint8_t* end) noexcept nogil:
    """A length-delimited field whose body was written after one reserved length byte at
    ``lenpos``: fill the length in (moving the body when it needs more than one byte)."""
    cdef uint64_t n = end - (lenpos + 1)
    cdef int k
    if n < 0x80:
        lenpos[0] = <uint8_t>n
        return end
    k = varint_size(n)
    memmove(lenpos + k, lenpos + 1, n)
    put_varint(lenpos, n)
    return end + k - 1


# Python-level helpers for the few descriptor packets.


def field_varint(int number, value) -> bytes:
    cdef uint8_t tmp[24]
    cdef uint8_t* p = put_varint(tmp, <uint64_t>(number << 3))
    p = put_varint(p, <uint64_t>(int(value) & 0xFFFFFFFFFFFFFFFF))
    return PyBytes_FromStringAndSize(<char*>tmp, p - tmp)


def field_bytes(int number, data) -> bytes:
    if isinstance(data, str):
        data = data.encode()
    cdef uint8_t tmp[24]
    cdef uint8_t* p = put_varint(tmp, <uint64_t>((number << 3) | 2))
    p = put_varint(p, <uint64_t>len(data))
    return PyBytes_FromStringAndSize(<char*>tmp, p - tmp) + data


def packet(bytes body) -> bytes:
    return field_bytes(1, body)


# =========================================================================== encoder


cdef class _Out:
    """A byte buffer written to a file descriptor from a thread of its own
    (``_block_writer``): one buffer is filled while the thread writes the other."""
    cdef uint8_t* buf  # the buffer being filled
    cdef uint8_t* spare  # the other: the thread may be writing it
    cdef Py_ssize_t pos, cap, spare_cap
    cdef hs_writer writer
    cdef bint writing

    def __cinit__(self, int fd, Py_ssize_t cap):
        cdef long long offset = lseek(fd, 0, SEEK_CUR)
        cdef int failed
        self.cap = self.spare_cap = cap
        self.pos = 0
        self.buf = <uint8_t*>malloc(cap)
        self.spare = <uint8_t*>malloc(cap)
        if self.buf == NULL or self.spare == NULL:
            raise MemoryError()
        failed = hs_writer_start(&self.writer, fd, offset if offset >= 0 else 0)
        if failed:
            raise OSError(failed, os.strerror(failed))
        self.writing = True

    def __dealloc__(self):
        self.stop()  # after an encode that failed half way: the thread ends before the buffers go
        free(self.buf)
        free(self.spare)

    cdef int flush(self) except -1:
        """Hand the filled buffer to the thread (once it has written the previous one) and
        fill the other from now on."""
        cdef int failed
        cdef uint8_t* other = self.spare
        cdef Py_ssize_t other_cap = self.spare_cap
        if self.pos == 0:
            return 0
        with nogil:
            failed = hs_writer_submit(&self.writer, <const char*>self.buf, self.pos)
        if failed:
            raise OSError(failed, os.strerror(failed))
        self.spare, self.spare_cap = self.buf, self.cap
        self.buf, self.cap = other, other_cap
        self.pos = 0
        return 0

    cdef int stop(self) noexcept:
        """End the thread once it has written what it was given: 0, or its first write
        error (an errno)."""
        cdef int failed = 0
        if self.writing:
            self.writing = False
            with nogil:
                failed = hs_writer_stop(&self.writer)
        return failed

    cdef int finish(self) except -1:
        """Every byte written and the thread ended (the first write error raised)."""
        cdef int failed
        self.flush()
        failed = self.stop()
        if failed:
            raise OSError(failed, os.strerror(failed))
        return 0

    cdef inline uint8_t* room(self, Py_ssize_t n) except NULL:
        """A pointer where ``n`` bytes may be written (flushing or growing first)."""
        if self.pos + n > self.cap:
            self.flush()
            if n > self.cap:
                free(self.buf)
                self.buf = <uint8_t*>malloc(n)
                if self.buf == NULL:
                    raise MemoryError()
                self.cap = n
        return self.buf + self.pos

    cdef inline void done(self, uint8_t* p) noexcept:
        self.pos = p - self.buf

    def write(self, bytes data):
        cdef Py_ssize_t n = len(data)
        cdef uint8_t* p = self.room(n)
        memcpy(p, PyBytes_AS_STRING(data), n)
        self.done(p + n)


cdef inline uint8_t* put_interned(uint8_t* p, int field, uint64_t iid, bytes text) noexcept:
    """One InternedString/EventName/EventCategory entry (iid = 1, the string = 2)."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(text)
    cdef uint8_t* lenpos
    p[0] = <uint8_t>((field << 3) | 2)
    lenpos = p + 1
    p += 2
    p[0] = 0x08
    p = put_varint(p + 1, iid)
    p[0] = 0x12
    p = put_varint(p + 1, <uint64_t>n)
    memcpy(p, PyBytes_AS_STRING(text), n)
    return close_len(lenpos, p + n)


cdef inline uint8_t* put_annotation(uint8_t* p, uint8_t iid, uint8_t tag, uint64_t value) noexcept nogil:
    cdef uint8_t* q
    p[0] = (F_EVENT_ANNOTATIONS << 3) | 2
    p[2] = (F_ANNOTATION_NAME_IID << 3)
    p[3] = iid
    p[4] = tag
    q = put_varint(p + 5, value)
    p[1] = <uint8_t>(q - (p + 2))  # at most 14 bytes
    return q


cdef int interned_packet(_Out out, int64_t sequence, int flags, list categories, list names, bint annotation_names) except -1:
    """A packet on ``sequence`` interning the given (iid, bytes) categories and names."""
    cdef Py_ssize_t need = 64
    cdef uint8_t* p
    cdef uint8_t* start
    cdef uint8_t* lp1
    cdef uint8_t* lp2
    cdef int i
    for iid, text in categories:
        need += len(text) + 32
    for iid, text in names:
        need += len(text) + 32
    if annotation_names:
        need += 6 * 32
    p = out.room(need)
    p[0] = 0x0A
    lp1 = p + 1
    p += 2
    p[0] = F_SEQUENCE_ID << 3
    p = put_varint(p + 1, <uint64_t>sequence)
    p[0] = F_SEQUENCE_FLAGS << 3
    p[1] = <uint8_t>flags
    p += 2
    p[0] = (F_INTERNED_DATA << 3) | 2
    lp2 = p + 1
    p += 2
    for iid, text in categories:
        p = put_interned(p, F_INTERNED_CATEGORIES, iid, text)
    for iid, text in names:
        p = put_interned(p, F_INTERNED_NAMES, iid, text)
    if annotation_names:
        for i in range(6):
            p = put_interned(p, F_INTERNED_ANNOTATION_NAMES, i + 1, ANNOTATIONS[i].encode())
    p = close_len(lp2, p)
    p = close_len(lp1, p)
    out.done(p)
    return 0


# --------------------------------------------------------------------------- threads


def thread_codes(const int64_t[::1] pid, const int32_t[::1] rank, const int64_t[::1] tid,
                 const int32_t[::1] thread_name):
    """Per row its thread's index, the threads (pid, rank, tid) and their names' row
    counts: see ``_trace_order.thread_codes_of`` (shared with the Chrome JSON codec)."""
    cdef Py_ssize_t n = pid.shape[0]
    if n == 0:
        return np.empty(0, np.int32), [], {}
    return thread_codes_of(n, &pid[0], &rank[0], &tid[0], &thread_name[0])


# --------------------------------------------------------------------------- heap of ends


cdef struct End:
    int64_t time
    int64_t rank
    int64_t seq
    int64_t row


cdef inline bint end_before(End* a, End* b) noexcept nogil:
    if a.time != b.time:
        return a.time < b.time
    if a.rank != b.rank:
        return a.rank < b.rank
    return a.seq < b.seq


cdef inline void heap_push(End* heap, Py_ssize_t n, End e) noexcept nogil:
    cdef Py_ssize_t i = n, parent
    while i > 0:
        parent = (i - 1) >> 1
        if not end_before(&e, &heap[parent]):
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = e


cdef inline End heap_pop(End* heap, Py_ssize_t n) noexcept nogil:
    """Remove and return the smallest of ``n`` (> 0) entries."""
    cdef End top = heap[0]
    cdef End last = heap[n - 1]
    cdef Py_ssize_t i = 0, child
    n -= 1
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and end_before(&heap[child + 1], &heap[child]):
            child += 1
        if not end_before(&heap[child], &last):
            break
        heap[i] = heap[child]
        i = child
    if n > 0:
        heap[i] = last
    return top


# --------------------------------------------------------------------------- the encoder


cdef inline uint8_t* put_end(uint8_t* p, int64_t time, uint64_t track, uint64_t sequence) noexcept nogil:
    cdef uint8_t* lp1
    cdef uint8_t* lp2
    p[0] = 0x0A
    lp1 = p + 1
    p[2] = F_TIMESTAMP << 3
    p = put_varint(p + 3, <uint64_t>time)
    p[0] = (F_TRACK_EVENT << 3) | 2
    lp2 = p + 1
    p[2] = F_EVENT_TYPE << 3
    p[3] = SLICE_END
    p[4] = F_EVENT_TRACK_UUID << 3
    p = put_varint(p + 5, track)
    lp2[0] = <uint8_t>(p - (lp2 + 1))
    p[0] = F_SEQUENCE_ID << 3
    p = put_varint(p + 1, sequence)
    p[0] = F_SEQUENCE_FLAGS << 3
    p[1] = NEEDS_STATE
    p += 2
    lp1[0] = <uint8_t>(p - (lp1 + 1))
    return p


cdef struct Spans:
    # The columns encode writes, as pointers (trace order aside).
    const int64_t* start
    const int64_t* duration
    const int32_t* depth
    const uint64_t* span_id
    const uint64_t* parent_id
    const uint8_t* has_parent
    const int64_t* arg
    const uint8_t* has_arg
    const uint8_t* error
    const uint64_t* flow_out
    const uint64_t* flow_in
    const int32_t* name
    const int32_t* category
    const int32_t* thread
    const int32_t* thread_name
    const int32_t* own_name


def encode(int fd, bytes header, Py_ssize_t buffer_size,
           const int64_t[::1] start, const int64_t[::1] duration, const int32_t[::1] depth,
           const uint64_t[::1] span_id, const uint64_t[::1] parent_id, const uint8_t[::1] has_parent,
           const int64_t[::1] arg, const uint8_t[::1] has_arg, const uint8_t[::1] error,
           const uint64_t[::1] flow_out, const uint64_t[::1] flow_in,
           const int32_t[::1] name, const int32_t[::1] category, const int32_t[::1] thread,
           const int32_t[::1] thread_name, const int32_t[::1] own_name, list names, list categories,
           list thread_names, int64_t first_thread_uuid, progress=None):
    """Write the header (descriptor packets) and every span's events to ``fd``.

    Rows may come in any order: they are put in trace order here (per thread by start time,
    see the module's docstring) by the sort the Chrome codec shares, and each span's end is emitted from a
    heap of open ends when the next opening comes after it. ``thread`` holds indices in
    trace order of the threads (rank, pid, tid); ``name``/``category``/``thread_name``
    codes into ``names``/``categories``/``thread_names`` (bytes; category -1: none), and
    ``own_name`` per thread its name (a row with another carries it as an annotation).
    ``flow_out``/``flow_in``: per row the id of a flow that starts / ends at its slice
    (0: none): the arrow from a host span to its device row; both empty: no row has one
    (the usual table: two columns of zeros the loop then never reads).
    """
    cdef Py_ssize_t n = start.shape[0]
    cdef _Out out = _Out(fd, buffer_size)
    cdef _Events events
    cdef Spans s
    try:
        out.write(header)
        if n == 0:
            out.finish()
            return
        if n >= 0xFFFFFFFF:
            raise ValueError("a Perfetto export holds at most 4,294,967,294 spans")
        s = Spans(&start[0], &duration[0], &depth[0], &span_id[0], &parent_id[0], &has_parent[0],
                  &arg[0], &has_arg[0], &error[0], NULL, NULL, &name[0], &category[0],
                  &thread[0], &thread_name[0], &own_name[0])
        if flow_out.shape[0] or flow_in.shape[0]:
            if flow_out.shape[0] != n or flow_in.shape[0] != n:
                raise ValueError("encode: flow_out and flow_in hold a value per row, or none")
            s.flow_out, s.flow_in = &flow_out[0], &flow_in[0]
        events = _Events(out, names, categories, thread_names, first_thread_uuid)
        events.s = s
        # Trace order (shared with the Chrome JSON codec, ``_trace_order.pxd``): the
        # permutation, each row's rank at its time and the instants closing their parent.
        events.order = trace_order(n, &start[0], &duration[0], &depth[0], &span_id[0], &parent_id[0],
                                   &has_parent[0], &thread[0], &events.rank, &events.closing,
                                   &events.max_depth)
        events.write(n, progress)
        out.finish()
    finally:
        out.stop()  # the thread never outlives the call (nor the file)


@cython.final
cdef class _Events:
    """The encoder's loop and its state: the thread (sequence) being written, its heap of
    open ends, and which names and categories each sequence has interned."""
    cdef _Out out
    cdef list names, categories, thread_names
    cdef Spans s
    cdef uint32_t* order
    cdef int64_t* rank
    cdef uint8_t* closing
    cdef int64_t max_depth, first_thread_uuid
    cdef End* heap
    cdef Py_ssize_t heap_n, heap_cap
    cdef int32_t t
    cdef uint64_t track, sequence
    # Which thread each name/category was last interned on: a thread's events are
    # contiguous, so "interned on this sequence" is "last interned on this thread".
    cdef int32_t* name_sent
    cdef int32_t* category_sent

    def __cinit__(self, _Out out, list names, list categories, list thread_names, int64_t first_thread_uuid):
        cdef Py_ssize_t k
        self.out, self.names, self.categories, self.thread_names = out, names, categories, thread_names
        self.first_thread_uuid = first_thread_uuid
        self.t = -1
        self.heap_cap = 64
        self.heap = <End*>malloc(self.heap_cap * sizeof(End))
        self.name_sent = <int32_t*>malloc((len(names) + 1) * sizeof(int32_t))
        self.category_sent = <int32_t*>malloc((len(categories) + 1) * sizeof(int32_t))
        if self.heap == NULL or self.name_sent == NULL or self.category_sent == NULL:
            raise MemoryError()
        for k in range(len(names)):
            self.name_sent[k] = -1
        for k in range(len(categories)):
            self.category_sent[k] = -1

    def __dealloc__(self):
        free(self.order)
        free(self.rank)
        free(self.closing)
        free(self.heap)
        free(self.name_sent)
        free(self.category_sent)

    cdef int write(self, Py_ssize_t n, progress) except -1:
        """Every row's events in trace order, each thread's open ends at its last row."""
        cdef Py_ssize_t k, i
        for k in range(n):
            i = self.order[k]
            if self.s.thread[i] != self.t:
                self.pop_ends(0, 0, True)
                self.start_thread(self.s.thread[i])
            # Ends due before this opening: (time, rank) strictly smaller.
            self.pop_ends(self.s.start[i], self.rank[i], False)
            self.intern(i)
            self.begin(i)
            if self.s.duration[i] > 0:
                self.push_end(k, i)
            if progress is not None and (k & 0xFFFFF) == 0xFFFFF:
                progress(0x100000)
        self.pop_ends(0, 0, True)
        return 0

    cdef int start_thread(self, int32_t t) except -1:
        self.t = t
        self.track = <uint64_t>(self.first_thread_uuid + t)
        self.sequence = <uint64_t>(DESCRIPTOR_SEQUENCE + 1 + t)
        interned_packet(self.out, self.sequence, STATE_CLEARED, [], [], True)
        return 0

    cdef inline int pop_ends(self, int64_t time, int64_t rank, bint everything) except -1:
        """The end events of open spans whose (time, rank) is before (time, rank), or of
        all of them."""
        cdef End e
        cdef uint8_t* p = self.out.room(self.heap_n * 48 + 64)
        while self.heap_n and (everything or self.heap[0].time < time
                               or (self.heap[0].time == time and self.heap[0].rank < rank)):
            e = heap_pop(self.heap, self.heap_n)
            self.heap_n -= 1
            p = put_end(p, e.time, self.track, self.sequence)
        self.out.done(p)
        return 0

    cdef inline int push_end(self, Py_ssize_t k, Py_ssize_t i) except -1:
        cdef End e
        cdef End* grown
        if self.heap_n == self.heap_cap:
            grown = <End*>realloc(self.heap, 2 * self.heap_cap * sizeof(End))
            if grown == NULL:
                raise MemoryError()
            self.heap = grown
            self.heap_cap *= 2
        e.time = self.s.start[i] + self.s.duration[i]
        e.rank = self.max_depth - self.s.depth[i]
        e.seq = k
        e.row = i
        heap_push(self.heap, self.heap_n, e)
        self.heap_n += 1
        return 0

    cdef inline int intern(self, Py_ssize_t i) except -1:
        """Row i's name and category interned on this sequence when they are not yet."""
        cdef int32_t nm = self.s.name[i], c = self.s.category[i], t = self.t
        if self.name_sent[nm] == t and (c < 0 or self.category_sent[c] == t):
            return 0
        interned_packet(
            self.out, self.sequence, NEEDS_STATE,
            [(c + 1, self.categories[c])] if c >= 0 and self.category_sent[c] != t else [],
            [(nm + 1, self.names[nm])] if self.name_sent[nm] != t else [], False)
        self.name_sent[nm] = t
        if c >= 0:
            self.category_sent[c] = t
        return 0

    cdef inline int begin(self, Py_ssize_t i) except -1:
        """Row i's opening event (an instant's only one)."""
        cdef const char* text = NULL
        cdef Py_ssize_t length = 0
        cdef int32_t code = self.s.thread_name[i]
        if code != self.s.own_name[self.t]:
            item = self.thread_names[code]
            text = PyBytes_AS_STRING(item)
            length = PyBytes_GET_SIZE(item)
        cdef uint8_t* p = self.out.room(184 + (length + 16 if text != NULL else 0))
        self.out.done(put_begin(p, &self.s, i, self.track, self.sequence, text, length))
        return 0


cdef inline uint8_t* put_begin(uint8_t* p, const Spans* s, Py_ssize_t i, uint64_t track, uint64_t sequence,
                               const char* text, Py_ssize_t length) noexcept nogil:
    """A TracePacket with row i's TrackEvent (a slice's begin, or an instant) on ``track``;
    ``text`` (not NULL): the thread name it carries as an annotation."""
    cdef uint8_t* lp1
    cdef uint8_t* lp2
    cdef int32_t c = s.category[i]
    p[0] = 0x0A
    lp1 = p + 1
    p[2] = F_TIMESTAMP << 3
    p = put_varint(p + 3, <uint64_t>s.start[i])
    p[0] = (F_TRACK_EVENT << 3) | 2
    lp2 = p + 1
    p[2] = F_EVENT_TYPE << 3
    p[3] = SLICE_BEGIN if s.duration[i] > 0 else INSTANT
    p[4] = F_EVENT_TRACK_UUID << 3
    p = put_varint(p + 5, track)
    if c >= 0:
        p[0] = F_EVENT_CATEGORY_IIDS << 3
        p = put_varint(p + 1, <uint64_t>(c + 1))
    p[0] = F_EVENT_NAME_IID << 3
    p = put_varint(p + 1, <uint64_t>(s.name[i] + 1))
    p = put_annotations(p, s, i, text, length)
    p = close_len(lp2, p)
    p[0] = F_SEQUENCE_ID << 3
    p = put_varint(p + 1, sequence)
    p[0] = F_SEQUENCE_FLAGS << 3
    p[1] = NEEDS_STATE
    return close_len(lp1, p + 2)


cdef inline uint8_t* put_annotations(uint8_t* p, const Spans* s, Py_ssize_t i, const char* text,
                                     Py_ssize_t length) noexcept nogil:
    """Row i's columns as debug annotations, then its flows."""
    cdef uint8_t* lp
    p = put_annotation(p, A_SPAN_ID, F_ANNOTATION_UINT << 3, s.span_id[i])
    if s.has_parent[i]:
        p = put_annotation(p, A_PARENT_ID, F_ANNOTATION_UINT << 3, s.parent_id[i])
    p = put_annotation(p, A_DEPTH, F_ANNOTATION_INT << 3, <uint64_t><int64_t>s.depth[i])
    if s.has_arg[i]:
        p = put_annotation(p, A_ARG, F_ANNOTATION_INT << 3, <uint64_t>s.arg[i])
    if s.error[i]:
        p = put_annotation(p, A_ERROR, F_ANNOTATION_BOOL << 3, 1)
    if text != NULL:
        p[0] = (F_EVENT_ANNOTATIONS << 3) | 2
        lp = p + 1
        p[2] = F_ANNOTATION_NAME_IID << 3
        p[3] = A_THREAD_NAME
        p[4] = (F_ANNOTATION_STRING << 3) | 2
        p = put_varint(p + 5, <uint64_t>length)
        memcpy(p, text, length)
        p = close_len(lp, p + length)
    # Flows as TrackEvent.flow_ids (47) / terminating_flow_ids (48), fixed64 (wire
    # type 1): the two-byte tags precomputed, the id copied little-endian (the
    # protobuf order, and every platform's we build for).
    if s.flow_out == NULL:
        return p
    if s.flow_out[i]:
        p[0] = 0xF9
        p[1] = 0x02
        memcpy(p + 2, &s.flow_out[i], 8)
        p += 10
    if s.flow_in[i]:
        p[0] = 0x81
        p[1] = 0x03
        memcpy(p + 2, &s.flow_in[i], 8)
        p += 10
    return p


# =========================================================================== decoder


cdef inline const uint8_t* get_varint(const uint8_t* p, const uint8_t* end, uint64_t* out) noexcept nogil:
    """The varint at ``p`` (NULL when it runs past ``end`` or past ten bytes)."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef uint64_t w
    if p < end and p[0] < 0x80:  # most varints in a trace are one byte (tags, small ids)
        out[0] = p[0]
        return p + 1
    if end - p >= 9:
        memcpy(&w, p, 8)
        if (w & <uint64_t>0x8080808080808080) == <uint64_t>0x8080808080808080:
            # Nine or ten bytes (every timestamp): the first eight groups gathered from one
            # word (little-endian), as put_varint stores them, rather than a byte a step.
            v = ((w & 0x7F) | (w >> 1 & 0x3F80) | (w >> 2 & 0x1FC000) | (w >> 3 & 0xFE00000)
                 | (w >> 4 & <uint64_t>0x7F0000000) | (w >> 5 & <uint64_t>0x3F800000000)
                 | (w >> 6 & <uint64_t>0x1FC0000000000) | (w >> 7 & <uint64_t>0xFE000000000000))
            p += 8
            shift = 56
    while p < end and shift < 70:
        b = p[0]
        p += 1
        v |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            out[0] = v
            return p
        shift += 7
    return NULL


cdef struct Track:
    uint64_t uuid
    int64_t* stack  # rows of the slices open on this track
    Py_ssize_t depth, cap


# Row flags


cdef struct Slice:
    # A TrackEvent's fields, as the decoder's scanner found them.
    uint64_t kind, track_uuid, name_iid, category_iid
    bint has_track, has_name, has_category
    const uint8_t* ann[32]
    const uint8_t* ann_end[32]
    int n_ann


cdef struct Annotation:
    uint64_t iid, value
    bint has_value
    const uint8_t* string
    uint64_t string_len


cdef struct Row:
    # A slice's columns from its annotations.
    uint8_t flags
    int64_t depth, argv
    uint64_t span, parent


cdef inline const uint8_t* our_annotation(const uint8_t* p, const uint8_t* end, uint8_t iid, uint8_t field,
                                         uint64_t* value) noexcept nogil:
    """One debug annotation as ``put_annotation`` writes it (its name's iid, then one varint
    of ``field``): the position after it, or NULL when the bytes at ``p`` are not that."""
    cdef const uint8_t* a_end
    cdef uint64_t v
    if (end - p < 6 or p[0] != (F_EVENT_ANNOTATIONS << 3) | 2 or p[1] >= 0x80
            or p[2] != F_ANNOTATION_NAME_IID << 3 or p[3] != iid or p[4] != field << 3):
        return NULL
    a_end = p + 2 + p[1]
    if a_end > end or get_varint(p + 5, a_end, &v) != a_end:
        return NULL
    value[0] = v
    return a_end


cdef inline const uint8_t* our_event(const uint8_t* p, const uint8_t* end, Slice* f, Row* r) noexcept nogil:
    """A slice's opening past its type and track, in ``put_begin``'s layout: category,
    name, the annotations of ``put_annotations`` in its order (span_id, parent_id, depth,
    arg, error; no thread_name), its flows. Fills ``f`` and ``r`` as ``scan_event`` and
    ``annotate`` would; the position after it, or NULL where the bytes are not that."""
    cdef uint64_t v
    cdef const uint8_t* q
    r.flags = 0
    r.parent = r.argv = 0
    f.category_iid = 0
    if p < end and p[0] == F_EVENT_CATEGORY_IIDS << 3:
        p = get_varint(p + 1, end, &f.category_iid)
        r.flags = HAS_CATEGORY
    if p == NULL or p >= end or p[0] != F_EVENT_NAME_IID << 3:
        return NULL
    p = get_varint(p + 1, end, &f.name_iid)
    if p == NULL or f.name_iid > <uint64_t>0xFFFFFFFF or f.category_iid > <uint64_t>0xFFFFFFFF:
        return NULL
    p = our_annotation(p, end, A_SPAN_ID, F_ANNOTATION_UINT, &r.span)
    if p == NULL:
        return NULL
    r.flags |= HAS_SPAN_ID
    q = our_annotation(p, end, A_PARENT_ID, F_ANNOTATION_UINT, &r.parent)
    if q != NULL:
        p, r.flags = q, r.flags | HAS_PARENT
    p = our_annotation(p, end, A_DEPTH, F_ANNOTATION_INT, &v)
    if p == NULL or <int64_t>v < -2147483648 or <int64_t>v > 2147483647:
        return NULL
    r.depth, r.flags = <int64_t>v, r.flags | HAS_DEPTH
    q = our_annotation(p, end, A_ARG, F_ANNOTATION_INT, &v)
    if q != NULL:
        p, r.argv, r.flags = q, <int64_t>v, r.flags | HAS_ARG
    q = our_annotation(p, end, A_ERROR, F_ANNOTATION_BOOL, &v)
    if q != NULL:
        p, r.flags = q, r.flags | (ERROR if v else 0)
    # Flows (TrackEvent.flow_ids, terminating_flow_ids: fixed64), which the decoder skips.
    if end - p >= 10 and p[0] == 0xF9 and p[1] == 0x02:
        p += 10
    if end - p >= 10 and p[0] == 0x81 and p[1] == 0x03:
        p += 10
    return p


@cython.final  # direct calls between its parts (no vtable), which the C compiler inlines
cdef class Decoder:
    """Reads a trace block by block (never the whole file) into span columns: each
    opening event becomes a row when it is read, each SLICE_END closes the last slice open
    on its track. Descriptors and interned strings are kept as Python objects (few)."""
    # Row columns (in ``buffers``: see ``grow``)
    cdef int64_t* start
    cdef int64_t* end
    cdef int64_t* duration
    cdef uint64_t* span_id
    cdef uint64_t* parent_id
    cdef int64_t* arg
    cdef int32_t* depth
    cdef uint32_t* name
    cdef uint32_t* category
    cdef int32_t* track
    cdef uint8_t* flags
    cdef Py_ssize_t n, cap
    cdef list buffers
    cdef int64_t file_size
    # Tracks with events: uuid, open slices
    cdef Track* tracks
    cdef Py_ssize_t n_tracks, tracks_cap
    cdef object track_index  # uuid -> index
    cdef int64_t last_track_index
    cdef uint64_t last_track_uuid
    # Annotation iid -> meaning (A_*), 0 unknown; ids beyond the array in a dict.
    cdef uint8_t annotation_kind[64]
    # Annotation ids 1-5 mean span_id, parent_id, depth, arg and error, as on every sequence
    # our encoder writes: only then may a packet take the fast path (``our_packet``).
    cdef bint ours
    cdef bint fast  # False: every packet by the general path (tests compare the two)
    cdef public dict names, categories, annotation_names, renamed, processes, threads
    cdef public int64_t offset
    #: How many packets took the fast path (``our_packet``).
    cdef readonly int64_t our_packets

    def __cinit__(self, bint fast=True):
        self.fast = fast
        self.cap = 0
        self.n = 0
        self.tracks_cap = 0
        self.n_tracks = 0
        self.last_track_index = -1
        self.track_index = {}
        memset(self.annotation_kind, 0, 64)
        self.names, self.categories, self.annotation_names = {}, {}, {}
        self.renamed, self.processes, self.threads = {}, {}, {}

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.n_tracks):
            free(self.tracks[i].stack)
        free(self.tracks)

    cdef fail(self, str problem, const uint8_t* at=NULL, const uint8_t* base=NULL):
        if at != NULL:
            raise CodecError(f"byte {self.offset + (at - base)}: {problem}")
        raise CodecError(problem)

    # ------------------------------------------------------------------ storage

    cdef void** slot(self, int column) noexcept:
        """Where the pointer to column ``column`` (its index in ``COLUMNS``) is kept."""
        if column == 0: return <void**>&self.start
        if column == 1: return <void**>&self.end
        if column == 2: return <void**>&self.duration
        if column == 3: return <void**>&self.span_id
        if column == 4: return <void**>&self.parent_id
        if column == 5: return <void**>&self.arg
        if column == 6: return <void**>&self.depth
        if column == 7: return <void**>&self.name
        if column == 8: return <void**>&self.category
        if column == 9: return <void**>&self.track
        return <void**>&self.flags

    cdef int grow(self, Py_ssize_t rows=0) except -1:
        """Room for ``rows`` rows (0: twice as many as now). The columns live in buffers of
        Arrow's memory pool, which become the table's own (no copy), and which the pool
        keeps for the next load rather than handing the pages back to the system (a new
        page costs a fault and its zeroing: most of a load's time once the packets are
        read fast)."""
        cdef Py_ssize_t cap = rows if rows > self.cap else (self.cap * 2 if self.cap else 4096)
        cdef int i
        cdef void** slot
        buffers = []
        for i in range(len(COLUMNS)):
            itemsize = COLUMNS[i][1]
            buffer = pa.allocate_buffer(cap * itemsize)
            slot = self.slot(i)
            address = <uintptr_t>buffer.address
            if self.n:
                memcpy(<void*>address, slot[0], self.n * itemsize)
            slot[0] = <void*>address
            buffers.append(buffer)
        self.buffers = buffers
        self.cap = cap
        return 0

    cdef int reserve(self, spans) except -1:
        """Room for the rows our encoder says the trace holds (its ``hotspan.spans`` label),
        before the first is read: no column copied as it grows. A count the file's size
        cannot hold (a span takes more than 16 bytes) is not believed."""
        if (spans is not None and spans.isdigit() and self.n == 0
                and self.cap < int(spans) <= self.file_size // 16):
            self.grow(int(spans))
        return 0

    cdef inline int64_t track_of(self, uint64_t uuid) except -1:
        cdef Py_ssize_t index
        cdef void* q
        if self.last_track_index >= 0 and uuid == self.last_track_uuid:
            return self.last_track_index
        found = self.track_index.get(uuid)
        if found is None:
            if self.n_tracks == self.tracks_cap:
                self.tracks_cap = self.tracks_cap * 2 if self.tracks_cap else 16
                q = realloc(self.tracks, self.tracks_cap * sizeof(Track))
                if q == NULL:
                    raise MemoryError()
                self.tracks = <Track*>q
            index = self.n_tracks
            self.tracks[index].uuid = uuid
            self.tracks[index].stack = NULL
            self.tracks[index].depth = 0
            self.tracks[index].cap = 0
            self.n_tracks += 1
            self.track_index[uuid] = index
        else:
            index = found
        self.last_track_uuid = uuid
        self.last_track_index = index
        return index

    # ------------------------------------------------------------------ the stream

    def read(self, int fd, Py_ssize_t block_size, int64_t file_size):
        """Every packet of the file open on ``fd``, ``block_size`` bytes at a time (into a
        buffer of Arrow's pool: pages the last load touched, not new ones to fault in)."""
        cdef Py_ssize_t cap = max(block_size, 64)
        block = pa.allocate_buffer(cap)
        cdef uint8_t* buf = <uint8_t*><uintptr_t>block.address
        cdef Py_ssize_t have = 0, pos, r, header
        cdef const uint8_t* p
        cdef uint64_t length
        cdef bint eof = False
        cdef Py_ssize_t t
        self.offset = 0
        self.file_size = file_size
        while True:
            while not eof and have < cap:
                with nogil:
                    r = c_read(fd, buf + have, cap - have)
                if r < 0:
                    if errno == EINTR:
                        continue
                    raise OSError(errno, os.strerror(errno))
                if r == 0:
                    eof = True
                have += r
            pos = 0
            while pos < have:
                if buf[pos] != 0x0A:
                    self.fail("not a TracePacket (not a Perfetto trace?)", buf + pos, buf)
                p = get_varint(buf + pos + 1, buf + have, &length)
                if p == NULL:
                    if have - pos > 11:
                        self.fail("a packet length that is not a varint", buf + pos, buf)
                    break  # the length continues in the next block
                header = p - (buf + pos)
                if length > <uint64_t>(file_size - (self.offset + pos + header)):
                    self.fail(f"truncated: a packet of {length} bytes runs past the end of the file",
                              buf + pos, buf)
                if length > MAX_PACKET_BYTES:
                    self.fail(f"a packet of {length} bytes (more than {MAX_PACKET_BYTES})", buf + pos, buf)
                if pos + header + <Py_ssize_t>length > have:
                    if pos == 0 and header + <Py_ssize_t>length > cap:
                        cap = header + <Py_ssize_t>length  # one packet larger than a block
                        bigger = pa.allocate_buffer(cap)
                        memcpy(<void*><uintptr_t>bigger.address, buf, have)
                        buf = <uint8_t*><uintptr_t>bigger.address
                        block = bigger  # the smaller one freed only now
                    break
                self.packet(p, p + length, buf)
                pos += header + <Py_ssize_t>length
            if pos:
                memmove(buf, buf + pos, have - pos)
                have -= pos
                self.offset += pos
            if eof and (have == 0 or pos == 0):
                if have:
                    self.fail("truncated: the last packet runs past the end of the file", buf, buf)
                break
        for t in range(self.n_tracks):
            if self.tracks[t].depth:
                raise CodecError(f"{self.tracks[t].depth} slice(s) on track {self.tracks[t].uuid} begin and never end")

    cdef inline int packet(self, const uint8_t* p, const uint8_t* end, const uint8_t* base) except -1:
        """One TracePacket: our encoder's span packets by the fast path, any other by the
        general one (every field by its tag, in any order)."""
        if self.ours and self.fast and self.our_packet(p, end):
            self.our_packets += 1
            return 0
        return self.any_packet(p, end, base)

    cdef inline int our_packet(self, const uint8_t* p, const uint8_t* end) except -1:
        """A packet in the exact layout our encoder writes (``put_begin``, ``put_end``): a
        timestamp, a TrackEvent, the sequence id and its flags, each once and in that order,
        the event's own fields likewise (``our_event``), read straight through without the
        general tag dispatch. 1 when it was one (its row stored or closed as the general
        path does); 0, with nothing changed, for any other packet, even a valid one: the
        general path reads it (or says what is wrong with it)."""
        cdef uint64_t ts, length, sequence
        cdef const uint8_t* event_end
        cdef const uint8_t* q
        cdef Slice f
        cdef Row r
        if end - p < 12 or p[0] != F_TIMESTAMP << 3:
            return 0
        p = get_varint(p + 1, end, &ts)
        if p == NULL or ts > <uint64_t>0x7FFFFFFFFFFFFFFF or end - p < 8 or p[0] != (F_TRACK_EVENT << 3) | 2:
            return 0
        p = get_varint(p + 1, end, &length)
        if p == NULL or end - p < 4 or length > <uint64_t>(end - p - 4) or length < 4:
            return 0
        event_end = p + length
        # The packet's tail: the sequence id (any: the decoder keeps one table of interned
        # strings for the whole trace) and the flags our events carry.
        if event_end[0] != F_SEQUENCE_ID << 3:
            return 0
        q = get_varint(event_end + 1, end, &sequence)
        if q == NULL or end - q != 2 or q[0] != F_SEQUENCE_FLAGS << 3 or q[1] != NEEDS_STATE:
            return 0
        if p[0] != F_EVENT_TYPE << 3 or p[2] != F_EVENT_TRACK_UUID << 3:
            return 0
        f.kind = p[1]
        p = get_varint(p + 3, event_end, &f.track_uuid)
        if p == NULL:
            return 0
        if f.kind == SLICE_END:
            return p == event_end and self.close_slice(self.track_of(f.track_uuid), <int64_t>ts)
        if (f.kind != SLICE_BEGIN and f.kind != INSTANT) or our_event(p, event_end, &f, &r) != event_end:
            return 0
        self.add_slice(&f, &r, <int64_t>ts, self.track_of(f.track_uuid))
        return 1

    cdef inline int any_packet(self, const uint8_t* p, const uint8_t* end, const uint8_t* base) except -1:
        """A packet of any valid layout: its fields found by their tags."""
        cdef uint64_t tag, v, ts = 0
        cdef bint has_ts = False
        cdef const uint8_t* event = NULL
        cdef const uint8_t* event_end = NULL
        cdef const uint8_t* interned = NULL
        cdef const uint8_t* interned_end = NULL
        cdef const uint8_t* descriptor = NULL
        cdef const uint8_t* descriptor_end = NULL
        cdef const uint8_t* at
        cdef int field, wire
        while p < end:
            at = p
            p = get_varint(p, end, &tag)
            if p == NULL:
                self.fail("a field tag runs past its packet", at, base)
            field = <int>(tag >> 3) if tag < (<uint64_t>1 << 32) else -1
            wire = tag & 7
            if field == F_TIMESTAMP:
                if wire != 0:
                    self.fail("a timestamp that is not a varint", at, base)
                p = get_varint(p, end, &ts)
                has_ts = True
            elif field == F_TRACK_EVENT or field == F_INTERNED_DATA or field == F_TRACK_DESCRIPTOR:
                if wire != 2:
                    self.fail(f"packet field {field} with wire type {wire}, not a message", at, base)
                p = get_varint(p, end, &v)
                if p == NULL or v > <uint64_t>(end - p):
                    self.fail("a field runs past the end of its packet", at, base)
                if field == F_TRACK_EVENT:
                    event, event_end = p, p + v
                elif field == F_INTERNED_DATA:
                    interned, interned_end = p, p + v
                else:
                    descriptor, descriptor_end = p, p + v
                p += v
            else:
                p = self.skip(p, end, wire, at, base)
            if p == NULL:
                self.fail("a field runs past the end of its packet", at, base)
        if interned != NULL:
            self.interned(interned, interned_end, base)
        if descriptor != NULL:
            self.descriptor(descriptor, descriptor_end, base)
        if event != NULL:
            if not has_ts:
                self.fail("a track event without a timestamp (not a trace hotspan wrote?)", event, base)
            if ts > <uint64_t>0x7FFFFFFFFFFFFFFF:
                self.fail("a timestamp past 2^63 ns", event, base)
            self.event(event, event_end, <int64_t>ts, base)
        return 0

    cdef inline const uint8_t* skip(self, const uint8_t* p, const uint8_t* end, int wire, const uint8_t* at,
                             const uint8_t* base) except? NULL:
        cdef uint64_t v
        if wire == 0:
            return get_varint(p, end, &v)
        if wire == 1:
            return p + 8 if end - p >= 8 else NULL
        if wire == 5:
            return p + 4 if end - p >= 4 else NULL
        if wire == 2:
            p = get_varint(p, end, &v)
            if p == NULL or v > <uint64_t>(end - p):
                return NULL
            return p + v
        # Groups (3, 4) are deprecated and never in a trace; 6 and 7 do not exist.
        self.fail(f"wire type {wire} (not a Perfetto trace?)", at, base)
        return NULL

    cdef inline int scan_event(self, const uint8_t* p, const uint8_t* end, const uint8_t* base, Slice* f) except -1:
        """A TrackEvent's fields into f (its annotations found, not yet read)."""
        cdef uint64_t tag, v
        cdef const uint8_t* at
        cdef int field, wire
        while p < end:
            at = p
            p = get_varint(p, end, &tag)
            if p == NULL:
                self.fail("a field tag runs past its track event", at, base)
            field = <int>(tag >> 3) if tag < (<uint64_t>1 << 32) else -1
            wire = tag & 7
            if field == F_EVENT_TYPE or field == F_EVENT_TRACK_UUID or field == F_EVENT_NAME_IID:
                if wire != 0:
                    self.fail(f"track event field {field} with wire type {wire}, not a varint", at, base)
                p = get_varint(p, end, &v)
                if field == F_EVENT_TYPE:
                    f.kind = v
                elif field == F_EVENT_TRACK_UUID:
                    f.track_uuid = v
                    f.has_track = True
                else:
                    f.name_iid = v
                    f.has_name = True
            elif field == F_EVENT_CATEGORY_IIDS:
                p = self.scan_category(p, end, wire, at, base, f)
            elif field == F_EVENT_ANNOTATIONS:
                if wire != 2:
                    self.fail(f"a debug annotation with wire type {wire}, not a message", at, base)
                p = get_varint(p, end, &v)
                if p == NULL or v > <uint64_t>(end - p):
                    self.fail("a debug annotation runs past its track event", at, base)
                if f.n_ann == 32:
                    self.fail("more than 32 debug annotations on one event (not a trace hotspan wrote?)", at, base)
                f.ann[f.n_ann] = p
                f.ann_end[f.n_ann] = p + v
                f.n_ann += 1
                p += v
            else:
                p = self.skip(p, end, wire, at, base)
            if p == NULL:
                self.fail("a field runs past the end of its track event", at, base)
        return 0

    cdef inline const uint8_t* scan_category(self, const uint8_t* p, const uint8_t* end, int wire, const uint8_t* at,
                                      const uint8_t* base, Slice* f) except? NULL:
        """category_iids: one varint, or a packed list (the first category is the one we keep)."""
        cdef uint64_t v
        cdef const uint8_t* list_end
        if wire == 0:
            p = get_varint(p, end, &v)
        elif wire == 2:
            p = get_varint(p, end, &v)
            if p == NULL or v > <uint64_t>(end - p) or v == 0:
                self.fail("a category list runs past its track event", at, base)
            list_end = p + v
            p = get_varint(p, list_end, &v)
            if p != NULL:
                p = list_end
        else:
            self.fail(f"category ids with wire type {wire}", at, base)
        if p != NULL:
            f.category_iid = v
            f.has_category = True
        return p

    cdef inline int scan_annotation(self, const uint8_t* a, const uint8_t* a_end, const uint8_t* base,
                             Annotation* x) except -1:
        """A DebugAnnotation's name id, integer (or bool) value and string value."""
        cdef uint64_t a_tag, v
        cdef const uint8_t* at
        cdef int a_field, a_wire
        memset(x, 0, sizeof(Annotation))
        while a < a_end:
            at = a
            a = get_varint(a, a_end, &a_tag)
            if a == NULL:
                self.fail("a debug annotation field runs past its end", at, base)
            a_field = <int>(a_tag >> 3) if a_tag < (<uint64_t>1 << 32) else -1
            a_wire = a_tag & 7
            if a_field == F_ANNOTATION_NAME_IID or a_field == F_ANNOTATION_BOOL or a_field == F_ANNOTATION_UINT \
                    or a_field == F_ANNOTATION_INT:
                if a_wire != 0:
                    self.fail(f"debug annotation field {a_field} with wire type {a_wire}", at, base)
                a = get_varint(a, a_end, &v)
                if a_field == F_ANNOTATION_NAME_IID:
                    x.iid = v
                else:
                    x.value = v
                    x.has_value = True
            elif a_field == F_ANNOTATION_STRING and a_wire == 2:
                a = get_varint(a, a_end, &v)
                if a == NULL or v > <uint64_t>(a_end - a):
                    self.fail("a debug annotation string runs past its end", at, base)
                x.string = a
                x.string_len = v
                a += v
            else:
                a = self.skip(a, a_end, a_wire, at, base)
            if a == NULL:
                self.fail("a debug annotation field runs past its end", at, base)
        return 0

    cdef inline int annotate(self, const uint8_t* at, const uint8_t* a_end, const uint8_t* base, Row* r) except -1:
        """One debug annotation of a slice (at ``at``) into its row's columns."""
        cdef Annotation x
        cdef int meaning
        cdef bint known
        cdef int64_t depth
        self.scan_annotation(at, a_end, base, &x)
        if x.iid < 64:
            meaning = self.annotation_kind[x.iid]
            known = meaning != 0 or x.iid in self.annotation_names
        else:
            entry = self.annotation_names.get(x.iid)
            known = entry is not None
            meaning = entry[0] if known else 0
        if not known:
            self.fail(f"a debug annotation names id {x.iid}, never interned", at, base)
        if meaning == A_THREAD_NAME:
            if x.string == NULL:
                self.fail("a thread_name annotation that is not a string", at, base)
            self.renamed[self.n] = (<char*>x.string)[:x.string_len].decode("utf-8")
            return 0
        if meaning == 0:
            return 0  # an annotation of someone else's: not a column
        if not x.has_value:
            self.fail(f"a {ANNOTATIONS[meaning - 1]} annotation without an integer value", at, base)
        if meaning == A_SPAN_ID:
            r.span = x.value
            r.flags |= HAS_SPAN_ID
        elif meaning == A_PARENT_ID:
            r.parent = x.value
            r.flags |= HAS_PARENT
        elif meaning == A_DEPTH:
            depth = <int64_t>x.value
            if depth < -2147483648 or depth > 2147483647:
                self.fail(f"a depth of {depth}", at, base)
            r.depth = depth
            r.flags |= HAS_DEPTH
        elif meaning == A_ARG:
            r.argv = <int64_t>x.value
            r.flags |= HAS_ARG
        elif meaning == A_ERROR:
            if x.value:
                r.flags |= ERROR
        return 0

    cdef inline int event(self, const uint8_t* p, const uint8_t* end, int64_t ts, const uint8_t* base) except -1:
        """A TrackEvent at ``ts``: scanned, then a row opened, or its slice's row closed."""
        cdef Slice f
        cdef Row r
        cdef Py_ssize_t t, i
        cdef Track* track
        # Every field but the annotation pointers (only the first n_ann are read): a
        # memset of the whole struct was most of the cost of an event.
        f.kind = f.track_uuid = f.name_iid = f.category_iid = 0
        f.has_track = f.has_name = f.has_category = False
        f.n_ann = 0
        memset(&r, 0, sizeof(Row))
        self.scan_event(p, end, base, &f)
        if not f.has_track:
            self.fail("a track event without a track (not a trace hotspan wrote?)", end, base)
        if f.kind == COUNTER:
            return 0  # not a span (formats/_perfetto_counters.py reads counters)
        t = self.track_of(f.track_uuid)
        track = &self.tracks[t]
        if f.kind == SLICE_END:
            if not self.close_slice(t, ts):
                self.fail(f"a slice ends on track {f.track_uuid} that never began" if track.depth == 0
                          else "a slice ends before it begins", end, base)
            return 0
        if f.kind != SLICE_BEGIN and f.kind != INSTANT:
            self.fail(f"a track event of type {f.kind} (not a trace hotspan wrote?)", end, base)
        if not f.has_name:
            self.fail("a slice without an interned name (not a trace hotspan wrote?)", end, base)
        if f.name_iid > 0xFFFFFFFF or f.category_iid > 0xFFFFFFFF:
            self.fail("an interned id past 2^32 (not a trace hotspan wrote?)", end, base)
        if f.has_category:
            r.flags |= HAS_CATEGORY
        for i in range(f.n_ann):
            self.annotate(f.ann[i], f.ann_end[i], base, &r)
        if not (r.flags & HAS_SPAN_ID):
            self.fail("a slice without a span_id annotation (not a trace hotspan wrote?)", end, base)
        self.add_slice(&f, &r, ts, t)
        return 0

    cdef inline bint close_slice(self, Py_ssize_t t, int64_t ts) noexcept:
        """The last slice open on track t ends at ``ts``; False (nothing changed) when none
        is open there or it began after ``ts``."""
        cdef Track* track = &self.tracks[t]
        if track.depth == 0 or ts < self.start[track.stack[track.depth - 1]]:
            return False
        track.depth -= 1
        self.end[track.stack[track.depth]] = ts
        self.duration[track.stack[track.depth]] = ts - self.start[track.stack[track.depth]]
        return True

    cdef inline int add_slice(self, Slice* f, Row* r, int64_t ts, Py_ssize_t t) except -1:
        """The row of a slice's begin (kept open on its track) or of an instant."""
        cdef Py_ssize_t row
        cdef Track* track = &self.tracks[t]
        cdef void* q
        if self.n == self.cap:
            self.grow()
        row = self.n
        self.n += 1
        self.start[row] = ts
        self.end[row] = ts  # an instant ends where it starts; a slice's end comes later
        self.duration[row] = 0
        self.span_id[row] = r.span
        self.parent_id[row] = r.parent
        self.arg[row] = r.argv
        self.depth[row] = <int32_t>r.depth
        self.name[row] = <uint32_t>f.name_iid
        self.category[row] = <uint32_t>f.category_iid
        self.track[row] = <int32_t>t
        self.flags[row] = r.flags
        if f.kind == SLICE_BEGIN:
            if track.depth == track.cap:
                track.cap = track.cap * 2 if track.cap else 16
                q = realloc(track.stack, track.cap * sizeof(int64_t))
                if q == NULL:
                    raise MemoryError()
                track.stack = <int64_t*>q
            track.stack[track.depth] = row
            track.depth += 1
        return 0

    # ------------------------------------------------------------------ rare packets (Python level)

    cdef int interned(self, const uint8_t* p, const uint8_t* end, const uint8_t* base) except -1:
        cdef uint64_t tag, v, iid
        cdef const uint8_t* at
        cdef const uint8_t* e
        cdef const uint8_t* q
        cdef const uint8_t* text
        cdef uint64_t text_len
        cdef int field, wire, f2
        cdef bint has_iid
        while p < end:
            at = p
            p = get_varint(p, end, &tag)
            if p == NULL:
                self.fail("interned data runs past its packet", at, base)
            field = <int>(tag >> 3) if tag < (<uint64_t>1 << 32) else -1
            wire = tag & 7
            if field != F_INTERNED_NAMES and field != F_INTERNED_CATEGORIES and field != F_INTERNED_ANNOTATION_NAMES:
                p = self.skip(p, end, wire, at, base)
                if p == NULL:
                    self.fail("interned data runs past its packet", at, base)
                continue
            if wire != 2:
                self.fail(f"an interned string with wire type {wire}", at, base)
            p = get_varint(p, end, &v)
            if p == NULL or v > <uint64_t>(end - p):
                self.fail("an interned string runs past its packet", at, base)
            e = p + v
            q = p
            p = e
            has_iid = False
            text = NULL
            text_len = 0
            iid = 0
            while q < e:
                q = get_varint(q, e, &tag)
                if q == NULL:
                    break
                f2 = <int>(tag >> 3) if tag < (<uint64_t>1 << 32) else -1
                if f2 == 1 and (tag & 7) == 0:
                    q = get_varint(q, e, &iid)
                    has_iid = True
                elif f2 == 2 and (tag & 7) == 2:
                    q = get_varint(q, e, &v)
                    if q == NULL or v > <uint64_t>(e - q):
                        q = NULL
                        break
                    text, text_len = q, v
                    q += v
                else:
                    q = self.skip(q, e, tag & 7, at, base)
                if q == NULL:
                    break
            if q == NULL or not has_iid or text == NULL:
                self.fail("a malformed interned string", at, base)
            value = (<char*>text)[:text_len].decode("utf-8")
            if field == F_INTERNED_NAMES:
                table = self.names
            elif field == F_INTERNED_CATEGORIES:
                table = self.categories
            else:
                table = self.annotation_names
                kind = ANNOTATIONS.index(value) + 1 if value in ANNOTATIONS else 0
                value = (kind, value)
            if table.setdefault(iid, value) != value:
                self.fail(f"interned id {iid} means two strings (not a trace hotspan wrote?)", at, base)
            if table is self.annotation_names and iid < 64:
                self.annotation_kind[iid] = value[0]
        self.ours = (self.annotation_kind[A_SPAN_ID] == A_SPAN_ID and self.annotation_kind[A_PARENT_ID] == A_PARENT_ID
                     and self.annotation_kind[A_DEPTH] == A_DEPTH and self.annotation_kind[A_ARG] == A_ARG
                     and self.annotation_kind[A_ERROR] == A_ERROR)
        return 0

    cdef int descriptor(self, const uint8_t* p, const uint8_t* end, const uint8_t* base) except -1:
        data = (<char*>p)[:end - p]
        try:
            fields = parse_fields(data)
            uuid = _one(fields, TRACK_UUID, 0, int)
            process = _one(fields, TRACK_PROCESS, None, bytes)
            thread = _one(fields, TRACK_THREAD, None, bytes)
            if process is not None:
                body = parse_fields(process)
                labels = {}
                for number, label in body:
                    if number == PROCESS_LABELS and isinstance(label, bytes) and b"=" in label:
                        key, value = label.decode().split("=", 1)
                        labels[key] = value
                self.processes[uuid] = {
                    "pid": int(labels.get("hotspan.pid", _signed(_one(body, PROCESS_PID, 0, int)))),
                    "rank": int(labels.get("hotspan.rank", 0)),
                    "meta": labels.get("hotspan.meta"),
                    "spans": labels.get("hotspan.spans"),
                }
                self.reserve(labels.get("hotspan.spans"))
            elif thread is not None:
                body = parse_fields(thread)
                self.threads[uuid] = {
                    "parent": _one(fields, TRACK_PARENT_UUID, None, int),
                    "tid": _signed(_one(body, THREAD_TID, 0, int)),
                    "name": _one(body, THREAD_NAME, b"", bytes).decode(),
                }
        except CodecError as exc:
            self.fail(f"a malformed track descriptor: {exc}", p, base)
        except ValueError as exc:  # labels that are not numbers, names not UTF-8
            self.fail(f"a malformed track descriptor: {exc}", p, base)
        return 0

    # ------------------------------------------------------------------ the result

    def columns(self):
        """The rows read, as numpy arrays over the decoder's own buffers (no copy), and
        per row the index of its track in ``track_uuids``."""
        cdef Py_ssize_t n = self.n
        cdef int i
        if self.buffers is None:
            self.grow(1)
        result = {}
        for i in range(len(COLUMNS)):
            key, itemsize, dtype = COLUMNS[i]
            result[key] = np.frombuffer(self.buffers[i], dtype, count=n)
            self.slot(i)[0] = NULL
        result["track_uuids"] = np.array([self.tracks[i].uuid for i in range(self.n_tracks)], np.uint64)
        self.n = self.cap = 0
        self.buffers = None
        return result


# --------------------------------------------------------------------------- lookups


def track_columns(const int32_t[::1] track, const int64_t[::1] pid, const int32_t[::1] rank,
                  const int64_t[::1] tid, const int32_t[::1] name):
    """Per row its track's pid, rank, thread id and thread name code (``pid[track[row]]``
    and so on), in one pass, as four buffers of Arrow's pool (int64, int32, int64, int32)
    that become the table's columns. ValueError for a track past the tables."""
    cdef Py_ssize_t n = track.shape[0], tracks = pid.shape[0], i, bad = -1
    cdef int32_t t
    if rank.shape[0] != tracks or tid.shape[0] != tracks or name.shape[0] != tracks:
        raise ValueError("track_columns: per-track tables of different lengths")
    buffers = [pa.allocate_buffer(max(n, 1) * size) for size in (8, 4, 8, 4)]
    cdef int64_t* row_pid = <int64_t*><uintptr_t>buffers[0].address
    cdef int32_t* row_rank = <int32_t*><uintptr_t>buffers[1].address
    cdef int64_t* row_tid = <int64_t*><uintptr_t>buffers[2].address
    cdef int32_t* row_name = <int32_t*><uintptr_t>buffers[3].address
    with nogil:
        for i in range(n):
            t = track[i]
            if t < 0 or t >= tracks:
                bad = i
                break
            row_pid[i] = pid[t]
            row_rank[i] = rank[t]
            row_tid[i] = tid[t]
            row_name[i] = name[t]
    if bad >= 0:
        raise ValueError(f"track_columns: row {bad} names track {track[bad]}, not one of {tracks}")
    return buffers


def lookup_codes(uint32_t[::1] iids, const int32_t[::1] lookup, const uint8_t[::1] flags, int flag):
    """Replace each interned id by ``lookup[iid]`` in place (the buffer becomes the int32
    dictionary codes; ids past the table map to its last slot, -1). Rows whose flags lack
    ``flag`` (when nonzero) get 0. Returns the first row whose id was never defined, or -1."""
    cdef Py_ssize_t n = iids.shape[0], i
    cdef uint32_t top = lookup.shape[0] - 1
    cdef uint32_t v
    cdef int32_t c
    cdef Py_ssize_t missing = -1
    with nogil:
        for i in range(n):
            if flag and not (flags[i] & flag):
                iids[i] = 0
                continue
            v = iids[i]
            c = lookup[v if v < top else top]
            if c < 0 and missing < 0:
                missing = i
            iids[i] = <uint32_t>c
    return missing


# --------------------------------------------------------------------------- generic fields


def parse_fields(bytes data):
    """(field number, value) of a small message: ints for varints and fixed, bytes for
    length-delimited; bounds-checked (CodecError)."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef const uint8_t* end = p + len(data)
    cdef uint64_t tag, v
    cdef int wire
    fields = []
    while p < end:
        p = get_varint(p, end, &tag)
        if p == NULL:
            raise CodecError("a field tag runs past its message")
        wire = tag & 7
        if wire == 0:
            p = get_varint(p, end, &v)
            if p == NULL:
                raise CodecError("a varint runs past its message")
            fields.append((tag >> 3, v))
        elif wire == 2:
            p = get_varint(p, end, &v)
            if p == NULL or v > <uint64_t>(end - p):
                raise CodecError("a field runs past its message")
            fields.append((tag >> 3, (<char*>p)[:v]))
            p += v
        elif wire == 1 or wire == 5:
            if end - p < (8 if wire == 1 else 4):
                raise CodecError("a field runs past its message")
            p += 8 if wire == 1 else 4
        else:
            raise CodecError(f"wire type {wire}")
    return fields


def _one(fields, int number, default, kind):
    value = default
    for field_number, field_value in fields:
        if field_number == number:
            if not isinstance(field_value, kind):
                raise CodecError(f"field {number} has the wrong wire type")
            value = field_value
    return value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
