# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Chrome JSON codec: one writer and one reader, typed loops over buffers.

Writer: :func:`encode` puts the rows in trace order (a sort shared with the Perfetto
codec, ``_trace_order.pxd``) and formats them (columns as buffers, strings pre-encoded once
per distinct value) into event lines, a bounded buffer at a time.

Reader: :class:`Reader` is one streaming JSON parser for every Chrome trace, ours and
foreign (VizTracer, torch.profiler, B/E pairs, X events, instants, async b/e, M events, the
array form with or without its closing bracket). It is fed bounded blocks of the file,
keeping only a partial event between them (``feed``), or a whole file mapped
(:class:`MappedText`, ``feed_text``); it appends each span to growable column buffers
(no Python object per event: names and categories are interned to codes in C hash
tables) and leaves the assembly of the table (thread map, order, nesting) to
``chrome_json.py``. It is a strict JSON parser (everything it skips is validated too), so
bad bytes are reported with their offset, never half-read.
"""
from libc.stdint cimport int64_t, uint64_t, int32_t, uint8_t, uint32_t, INT64_MIN
from libc.string cimport memcpy, memcmp, memmove, memset, strchr
from libc.stdlib cimport strtod, malloc, calloc, realloc, free
from libc.math cimport isfinite, llround
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.buffer cimport PyBUF_READ, PyBuffer_FillInfo
from posix.unistd cimport lseek, SEEK_CUR, dup, close
from libc.errno cimport errno

cimport cython

from ._trace_order cimport trace_order, thread_codes_of, ThreadSort, sort_thread
from ._block_writer cimport hs_writer, hs_writer_start, hs_writer_submit, hs_writer_stop

import json
import os

from ._base import TraceFileError

cdef int64_t I64_MAX = 0x7FFFFFFFFFFFFFFF
# INT64_MIN from <stdint.h>: Cython folds "-0x7FFFFFFFFFFFFFFF - 1" into the literal
# -9223372036854775808L, which clang warns is too large for a signed type.
cdef int64_t I64_MIN = INT64_MIN
cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFF
cdef int32_t I32_MIN = -0x7FFFFFFF - 1
#: A B event's end until its E arrives.
cdef int64_t OPEN = INT64_MIN
#: Nesting of skipped values: a bound, so that "[[[[..." is an error, not a deep recursion.
DEF MAX_DEPTH = 256

# Row flags (one byte a row).
FLAG_PARENT = HS_F_PARENT
FLAG_ARG = HS_F_ARG
FLAG_ERROR = HS_F_ERROR
FLAG_SPAN_ID = HS_F_SPAN_ID
cdef uint8_t F_PARENT = HS_F_PARENT, F_ARG = HS_F_ARG, F_ERROR = HS_F_ERROR, F_SPAN_ID = HS_F_SPAN_ID


# =========================================================================== writer

cdef char DIGITS[200]
for _i in range(100):
    DIGITS[2 * _i] = 48 + _i // 10
    DIGITS[2 * _i + 1] = 48 + _i % 10


cdef extern from *:
    """
    static inline int hs_clz64(unsigned long long v) { return __builtin_clzll(v | 1); }
    """
    int hs_clz64(unsigned long long v) nogil


# Per fraction (0-999 thousandths) the characters put_us keeps of ".ddd": 0 for .000, else
# up to its last nonzero digit.
cdef uint8_t FRAC_LEN[1000]
for _i in range(1000):
    FRAC_LEN[_i] = 0 if _i == 0 else 2 if _i % 100 == 0 else 3 if _i % 10 == 0 else 4


cdef uint64_t P10[20]
P10[0] = 1
for _i in range(1, 20):
    P10[_i] = P10[_i - 1] * 10


cdef inline int digits10(uint64_t v) noexcept nogil:
    """The number of decimal digits of v (> 0): from its bit length (log10(2) ~ 1233 / 4096),
    corrected by one comparison."""
    cdef int n = ((64 - hs_clz64(v)) * 1233) >> 12
    return n + (v >= P10[n])


cdef inline char* put_u64(char* p, uint64_t v) noexcept nogil:
    """Decimal digits of v at p, written from the last one backwards in place (their
    count known first); two digits a step from a table (a division per digit pair is what
    makes integer formatting slow)."""
    cdef int n
    cdef char* q
    cdef uint64_t d
    cdef int r
    if v < 10:
        p[0] = <char>(48 + v)
        return p + 1
    n = digits10(v)
    q = p + n
    while v >= 100:
        d = v // 100
        r = <int>(v - d * 100)
        v = d
        q -= 2
        q[0] = DIGITS[2 * r]
        q[1] = DIGITS[2 * r + 1]
    q -= 1 if v < 10 else 2  # the first one or two digits (pointer steps, no negative index)
    if v >= 10:
        q[0] = DIGITS[2 * v]
        q[1] = DIGITS[2 * v + 1]
    else:
        q[0] = <char>(48 + v)
    return p + n


cdef inline char* put_i64(char* p, int64_t v) noexcept nogil:
    if v < 0:
        p[0] = b'-'
        return put_u64(p + 1, <uint64_t>0 - <uint64_t>v)
    return put_u64(p, <uint64_t>v)


cdef inline char* put_us(char* p, int64_t ns) noexcept nogil:
    """Nanoseconds as microseconds, exact and as short as exact allows: at most three
    decimals, trailing zeros left out (1136.000 -> 1136, 136.320 -> 136.32)."""
    cdef uint64_t mag
    cdef uint64_t whole
    cdef int frac, rest
    if ns < 0:
        p[0] = b'-'
        p += 1
        mag = <uint64_t>0 - <uint64_t>ns
    else:
        mag = <uint64_t>ns
    whole = mag // 1000
    frac = <int>(mag - whole * 1000)
    p = put_u64(p, whole)
    # '.' and three digits always written; kept: none for .000, else up to the last nonzero
    p[0] = b'.'
    p[1] = <char>(48 + frac // 100)
    rest = frac % 100
    p[2] = DIGITS[2 * rest]
    p[3] = DIGITS[2 * rest + 1]
    return p + FRAC_LEN[frac]


cdef inline char* put(char* p, const char* text, Py_ssize_t n) noexcept nogil:
    memcpy(p, text, n)
    return p + n


DEF TEXT_PAD = 32


cdef inline char* put_text(char* p, const char* text, Py_ssize_t n) noexcept nogil:
    """A ``_Texts`` text (TEXT_PAD bytes readable after it) at p: TEXT_PAD bytes copied
    whatever n (up to TEXT_PAD past the text are written, and overwritten by what follows:
    the line bound leaves room), the rest only for a longer one."""
    memcpy(p, text, TEXT_PAD)
    if n > TEXT_PAD:
        memcpy(p + TEXT_PAD, text + TEXT_PAD, n - TEXT_PAD)
    return p + n


cdef class _Texts:
    """A list of bytes as C pointers and lengths, each copied into one arena with TEXT_PAD
    bytes readable after it (zeros), so that ``put_text`` copies a fixed TEXT_PAD bytes
    (two vector moves) for every text of up to TEXT_PAD bytes rather than calling memcpy
    with a variable length."""
    cdef char* arena
    cdef const char** ptr
    cdef Py_ssize_t* length
    cdef Py_ssize_t longest

    def __cinit__(self, list items):
        cdef Py_ssize_t i, n = len(items), size = 0, at = 0
        self.arena = NULL
        self.ptr = <const char**>malloc((n + 1) * sizeof(char*))
        self.length = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
        if self.ptr == NULL or self.length == NULL:
            raise MemoryError()
        self.longest = 0
        for i in range(n):
            item = items[i]
            if not isinstance(item, bytes):
                raise TypeError("texts must be bytes")
            self.length[i] = PyBytes_GET_SIZE(item)
            size += self.length[i] + TEXT_PAD
            if self.length[i] > self.longest:
                self.longest = self.length[i]
        self.arena = <char*>calloc(size + 1, 1)
        if self.arena == NULL:
            raise MemoryError()
        for i in range(n):
            memcpy(self.arena + at, PyBytes_AS_STRING(items[i]), self.length[i])
            self.ptr[i] = self.arena + at
            at += self.length[i] + TEXT_PAD

    def __dealloc__(self):
        free(self.arena)
        free(self.ptr)
        free(self.length)


def thread_codes(const int64_t[::1] pid, const int32_t[::1] rank, const int64_t[::1] tid,
                 const int32_t[::1] thread_name):
    """Per row its thread's index, the threads (pid, rank, tid) and their names' row
    counts: see ``_trace_order.thread_codes_of``."""
    cdef Py_ssize_t n = pid.shape[0]
    if n == 0:
        import numpy as np
        return np.empty(0, np.int32), [], {}
    return thread_codes_of(n, &pid[0], &rank[0], &tid[0], &thread_name[0])


cdef int _raise_errno(int error) except -1:
    raise OSError(error, os.strerror(error))


cdef int _drain(object sink, char* base, Py_ssize_t length) except -1:
    """``length`` bytes at ``base`` to ``sink.write`` (a short write is retried with the rest)."""
    cdef Py_ssize_t done = 0
    cdef object wrote
    view = memoryview(PyMemoryView_FromMemory(base, length, PyBUF_READ))
    while done < length:
        wrote = sink.write(view[done:])
        done += length - done if wrote is None else <Py_ssize_t>wrote
    return 0


cdef struct Rows:
    # The columns encode formats, as pointers, and the pre-encoded texts per code.
    const int64_t* start
    const int64_t* duration
    const int32_t* depth
    const uint64_t* span_id
    const uint64_t* parent_id
    const uint8_t* parent_valid
    const int64_t* arg
    const uint8_t* arg_valid
    const uint8_t* error
    const int32_t* thread
    const int32_t* name
    const int32_t* category
    const int32_t* thread_name
    const int32_t* own_name  # per thread, the name code its rows need not repeat (-1: none)
    const uint64_t* flow_out  # NULL: no flows
    const uint64_t* flow_in
    int64_t origin
    const char** thread_text
    Py_ssize_t* thread_len
    const char** name_text
    Py_ssize_t* name_len
    const char** category_text
    Py_ssize_t* category_len
    const char** thread_name_text
    Py_ssize_t* thread_name_len


cdef inline char* put_event(char* p, const Rows* r, Py_ssize_t i) noexcept nogil:
    """Row i's event line (after its ",\\n"): an X event, or an i event for an instant."""
    cdef int32_t code
    if r.duration[i] == 0:
        p = put(p, b',\n{"ph":"i","s":"t","ts":', 25)
        p = put_us(p, r.start[i] - r.origin)
    else:
        p = put(p, b',\n{"ph":"X","ts":', 17)
        p = put_us(p, r.start[i] - r.origin)
        p = put(p, b',"dur":', 7)
        p = put_us(p, r.duration[i])
    code = r.thread[i]
    p = put_text(p, r.thread_text[code], r.thread_len[code])
    code = r.name[i]
    p = put_text(p, r.name_text[code], r.name_len[code])
    code = r.category[i]
    if code >= 0:
        p = put_text(p, r.category_text[code], r.category_len[code])
    # Args that hold their default are left out (a loader reads their absence as it):
    # no parent_id for a root, no depth of 0, no arg when null, error only when true.
    p = put(p, b',"args":{"span_id":', 19)
    p = put_u64(p, r.span_id[i])
    if r.parent_valid[i]:
        p = put(p, b',"parent_id":', 13)
        p = put_u64(p, r.parent_id[i])
    if r.depth[i] != 0:
        p = put(p, b',"depth":', 9)
        p = put_i64(p, r.depth[i])
    if r.arg_valid[i]:
        p = put(p, b',"arg":', 7)
        p = put_i64(p, r.arg[i])
    if r.error[i]:
        p = put(p, b',"error":true', 13)
    code = r.thread_name[i]
    if code >= 0 and code != r.own_name[r.thread[i]]:
        p = put_text(p, r.thread_name_text[code], r.thread_name_len[code])
    return put_event_end(p, r, i)


cdef inline char* put_event_end(char* p, const Rows* r, Py_ssize_t i) noexcept nogil:
    """The end of the args, and a flow bound to the event when it has one."""
    if r.flow_out == NULL or not (r.flow_out[i] or r.flow_in[i]):
        return put(p, b'}}', 2)
    p = put(p, b'},"bind_id":', 12)
    if r.flow_out[i] and r.flow_in[i]:  # inside a chain: one id in and out
        p = put_u64(p, r.flow_out[i])
        return put(p, b',"flow_in":true,"flow_out":true}', 32)
    if r.flow_out[i]:
        p = put_u64(p, r.flow_out[i])
        return put(p, b',"flow_out":true}', 17)
    p = put_u64(p, r.flow_in[i])
    return put(p, b',"flow_in":true}', 16)


cdef int write_lines(sink, Rows* r, uint32_t* order, ThreadSort* by_thread, Py_ssize_t n,
                     char** buffers, Py_ssize_t cap, Py_ssize_t line, progress) except -1:
    """Every row's line in trace order, a buffer at a time: to a file descriptor from a
    writer thread (``hs_writer``) while the next buffer is formatted, else to
    ``sink.write``. ``by_thread.key`` not NULL: ``order`` is grouped by thread only, and each
    thread's rows are sorted as the writing reaches them, so that the first block goes to
    the file (and the disk) while the other threads' rows are not sorted yet."""
    cdef Py_ssize_t k = 0, done = 0, ready = n, t = 0
    cdef int current = 0, fd = -1, failed = 0
    cdef char* base = buffers[0]
    cdef char* p = base
    cdef char* limit = base + cap - line
    cdef long long offset = 0
    cdef hs_writer writer
    cdef bint writing = False
    if isinstance(sink, int):
        fd = sink
        offset = lseek(fd, 0, SEEK_CUR)
        if offset < 0:
            offset = 0  # not seekable (a pipe): the writeback hint does not apply anyway
        failed = hs_writer_start(&writer, fd, offset)
        if failed:
            _raise_errno(failed)
        writing = True
    if by_thread.key != NULL:
        ready = 0  # rows order[:ready] are in trace order
    try:
        while k < n:
            while k == ready:  # the next thread's rows, sorted just before they are written
                ready = sort_thread(by_thread, order, t)
                t += 1
            with nogil:
                while k < ready and p < limit:
                    p = put_event(p, r, order[k])
                    k += 1
            if k < n and p < limit:
                continue  # room left in the buffer: on with the next thread
            with nogil:
                if writing:
                    failed = hs_writer_submit(&writer, base, p - base)
            if writing:
                if failed:
                    _raise_errno(failed)
                current ^= 1
                base = buffers[current]
                limit = base + cap - line
            else:
                _drain(sink, base, p - base)
            p = base
            if progress is not None:
                progress(k - done)
                done = k
        if writing:
            writing = False
            with nogil:
                failed = hs_writer_stop(&writer)
            if failed:
                _raise_errno(failed)
    finally:
        if writing:
            with nogil:
                hs_writer_stop(&writer)
    return 0


def encode(sink, Py_ssize_t buffer_size,
           const int64_t[::1] start, const int64_t[::1] duration, const int32_t[::1] depth,
           const uint64_t[::1] span_id, const uint64_t[::1] parent_id, const uint8_t[::1] parent_valid,
           const int64_t[::1] arg, const uint8_t[::1] arg_valid, const uint8_t[::1] error,
           const int32_t[::1] thread, const int32_t[::1] name, const int32_t[::1] category,
           const int32_t[::1] thread_name, list thread_texts, list name_texts, list category_texts,
           list thread_name_texts, int64_t origin, progress=None, flow_out=None, flow_in=None,
           own_name=None):
    """Every row's event line to ``sink`` (an int: a file descriptor open for writing,
    else an object with ``write(bytes-like)``), in trace order.

    Rows may come in any order: they are put in trace order here with the sort the
    Perfetto codec uses too (``_trace_order.pxd``). One event a line, each after ",\\n"
    (the header ends with an event): an ``X`` event a span, an ``i`` event (thread scope)
    an instant. ``*_texts`` are the pre-encoded pieces per code: ``,"pid":P,"tid":T`` per
    thread, ``,"name":...`` per name, ``,"cat":...`` per category, ``,"thread_name":...``
    per thread name (a code of -1: none). ``own_name`` (int32 per thread, or ``None``: none):
    each thread's own name code, which its rows do not repeat (a row carries
    ``thread_name`` only where its thread was renamed). Lines go out ``buffer_size`` bytes at a time;
    to a file descriptor from a writer thread (``hs_writer``) while the next block is
    formatted, each block's writeback started as soon as it is written.

    ``flow_out``/``flow_in`` (uint64 per row, 0: none; ``None``: no flows): a row with one
    also carries ``"bind_id":N,"flow_out":true`` (or ``"flow_in"``; both, when both are
    N: a link inside a chain, as between the ranks' spans of one collective) after its
    args, the flow events v2 that bind to the event itself (Perfetto draws the arrow from
    the host span to its device row; the reader reads none of them).
    """
    cdef const uint64_t[::1] fout
    cdef const uint64_t[::1] fin
    cdef const int32_t[::1] own
    cdef _Texts threads = _Texts(thread_texts)
    cdef _Texts names = _Texts(name_texts)
    cdef _Texts categories = _Texts(category_texts)
    cdef _Texts thread_names = _Texts(thread_name_texts)
    cdef Py_ssize_t n = start.shape[0]
    cdef Rows r
    if n == 0:
        return
    if n >= 0xFFFFFFFF:
        raise ValueError("a Chrome JSON export holds at most 4,294,967,294 spans")
    if own_name is None:
        import numpy as np
        own_name = np.full(max(len(thread_texts), 1), -1, np.int32)
    own = own_name
    if own.shape[0] < len(thread_texts) or own.shape[0] == 0:
        raise ValueError("own_name needs a code per thread")
    r = Rows(&start[0], &duration[0], &depth[0], &span_id[0], &parent_id[0], &parent_valid[0], &arg[0],
             &arg_valid[0], &error[0], &thread[0], &name[0], &category[0], &thread_name[0],
             &own[0], NULL, NULL,
             origin, threads.ptr, threads.length, names.ptr, names.length, categories.ptr,
             categories.length, thread_names.ptr, thread_names.length)
    if flow_out is not None:
        fout = flow_out
        fin = flow_in
        r.flow_out, r.flow_in = &fout[0], &fin[0]
    # Fixed text and numbers of a line come to under 260 bytes: with the longest texts a
    # bound on one line, so the loop checks space once a line, not once a field (plus
    # TEXT_PAD: put_text writes up to that far past a text's end).
    cdef Py_ssize_t line = 320 + TEXT_PAD + threads.longest + names.longest + categories.longest + thread_names.longest
    cdef Py_ssize_t cap = max(buffer_size, 2 * line)
    # Two buffers: one formatted while the writer thread writes the other (fd sinks only).
    cdef char* buffers[2]
    buffers[0] = <char*>malloc(cap)
    buffers[1] = <char*>malloc(cap)
    cdef uint32_t* order = NULL
    cdef ThreadSort by_thread
    by_thread.key = NULL
    by_thread.starts = NULL
    try:
        if buffers[0] == NULL or buffers[1] == NULL:
            raise MemoryError()
        order = trace_order(n, &start[0], &duration[0], &depth[0], &span_id[0], &parent_id[0],
                            &parent_valid[0], &thread[0], NULL, NULL, NULL, &by_thread)
        write_lines(sink, &r, order, &by_thread, n, buffers, cap, line, progress)
    finally:
        free(by_thread.key)
        free(by_thread.starts)
        free(order)
        free(buffers[0])
        free(buffers[1])


# =========================================================================== reader: words
# The reader skips a string's plain bytes 8 at a time (SWAR: plain 64-bit arithmetic, no
# intrinsics, so every platform builds it); such loads may read up to 7 bytes past the NUL
# that ends the data: ``feed`` requires PAD bytes there. (Digits converted 8 at a time the
# same way measured slower than the multiply-add loop for the 1-10 digit numbers of a
# trace: the loop's branches predict well.)

DEF PAD_BYTES = 32  # Reader.lit compares literals of up to 24 bytes with no end check
#: Bytes the reader may read past the end of the data it is fed (its NUL included).
PAD = PAD_BYTES

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* 8 bytes at p, the first in the lowest byte (whatever the machine's byte order). */
    static inline uint64_t hs_load8(const char* p) {
        uint64_t w;
        memcpy(&w, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
    #endif
        return w;
    }
    static inline uint32_t hs_load4(const char* p) { uint32_t w; memcpy(&w, p, 4); return w; }
    /* 0x80 in each byte of w that ends a string's plain run: a quote, a backslash, a
       control byte (the NUL after the data is one) or a non-ASCII byte. Borrows only reach
       bytes after a flagged one: the first flag is exact. */
    static inline uint64_t hs_special8(uint64_t w) {
        const uint64_t ones = 0x0101010101010101ULL;
        uint64_t q = w ^ (ones * 0x22), b = w ^ (ones * 0x5C);
        return (((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w) | w)
               & 0x8080808080808080ULL;
    }
    /* The first byte at or after p that is not a plain string byte. */
    static inline const char* hs_plain_run(const char* p) {
        for (;;) {
            uint64_t m = hs_special8(hs_load8(p));
            if (m) return p + (__builtin_ctzll(m) >> 3);
            p += 8;
        }
    }
    /* a[:n] == b[:n], in word loads that stay inside both (overlapping at the end). */
    static inline int hs_same(const char* a, const char* b, long n) {
        long i = 0;
        if (n < 4) return memcmp(a, b, (size_t)n) == 0;
        if (n < 8) return hs_load4(a) == hs_load4(b) && hs_load4(a + n - 4) == hs_load4(b + n - 4);
        for (; i + 8 <= n; i += 8)
            if (hs_load8(a + i) != hs_load8(b + i)) return 0;
        return i == n || hs_load8(a + n - 8) == hs_load8(b + n - 8);
    }
    /* The bytes of p[:n] as one word for the hash's last step (n > 0; loads stay inside). */
    static inline uint64_t hs_tail(const char* p, long n) {
        if (n >= 8) return hs_load8(p + n - 8);
        if (n >= 4) return (uint64_t)hs_load4(p) | ((uint64_t)hs_load4(p + n - 4) << 32);
        return (uint64_t)(uint8_t)p[0] | ((uint64_t)(uint8_t)p[n / 2] << 8) | ((uint64_t)(uint8_t)p[n - 1] << 16);
    }
    /* The number readers of our own lines, inlined whatever the compiler thinks of the
       size of their caller (Reader.own_row, read once a span): a call each, and its
       spills, cost as much as the digits. */
    #if defined(__GNUC__) || defined(__clang__)
    #define HS_ALWAYS_INLINE static inline __attribute__((always_inline))
    #else
    #define HS_ALWAYS_INLINE static inline
    #endif
    /* The run of digits at p: its value (exact up to 19 digits) and length (24 for any
       longer), one multiply-add a digit: for the 1-11 digits of a trace's numbers its branches
       predict well: 8 digits a step (SWAR) measured slower, inlined or not (again in 2026-12:
       3% slower a load). The run ends at the NUL after the data at the latest; a bound on
       its length in the loop cost 1%. */
    HS_ALWAYS_INLINE const char* hs_digits(const char* p, uint64_t* out, int* count) {
        uint64_t v = 0;
        const char* first = p;
        unsigned d;
        while ((d = (unsigned)(*p - '0')) < 10) {
            v = v * 10 + d;
            p++;
        }
        *out = v;
        *count = p - first < 24 ? (int)(p - first) : 24;
        return p;
    }
    static inline int hs_ends_number(const char* p, const char* stop) {
        return *p != '.' && *p != 'e' && *p != 'E' && p < stop;
    }
    /* An integer of up to 18 digits as our writer spells it (no sign, no leading zero, no
       fraction or exponent after it), else NULL: the general scanner then decides. After a
       run of at most 18 digits the next byte is no digit. */
    HS_ALWAYS_INLINE const char* hs_own_uint(const char* p, const char* stop, uint64_t* out) {
        int n;
        if (*p == '0') {
            *out = 0;
            p += 1;
            return (p[0] < '0' || p[0] > '9') && hs_ends_number(p, stop) ? p : NULL;
        }
        p = hs_digits(p, out, &n);
        return n > 0 && n <= 18 && hs_ends_number(p, stop) ? p : NULL;
    }
    /* Microseconds as our writer spells them (at most 15 digits, then at most three
       decimals; older files always wrote three) as nanoseconds, else NULL. */
    HS_ALWAYS_INLINE const char* hs_own_us(const char* p, const char* stop, int64_t* ns) {
        uint64_t v;
        int n;
        if (*p == '0') {
            v = 0;
            p += 1;
            if (p[0] >= '0' && p[0] <= '9') return NULL;
        } else {
            p = hs_digits(p, &v, &n);
            if (n == 0 || n > 15) return NULL;
        }
        v *= 1000;
        if (*p == '.') {
            /* One to three decimals, read without a loop: each byte a test, no branch on
               how many there are (1-3 vary from number to number, and the loop's exit
               mispredicted; 12% of own_row). A fourth digit is not ours. */
            unsigned d1 = (unsigned)(p[1] - '0'), d2 = (unsigned)(p[2] - '0'), d3 = (unsigned)(p[3] - '0');
            unsigned two = d2 < 10, three = two & (d3 < 10);
            if (d1 >= 10) return NULL;
            v += d1 * 100 + (two ? d2 * 10 : 0) + (three ? d3 : 0);
            p += 2 + two + three;
            if ((unsigned)(*p - '0') < 10) return NULL;
        }
        if (!hs_ends_number(p, stop)) return NULL;
        *ns = (int64_t)v;
        return p;
    }
    /* The last own line's ``,"pid":P,"tid":T`` text and its numbers. */
    typedef struct { char text[48]; long len; int64_t pid, tid; } hs_ids_seen;
    /* ``,"pid":P,"tid":T`` as encode writes it: the last own line's text again (most
       lines follow one of the same thread) takes its numbers without reading digits. */
    HS_ALWAYS_INLINE const char* hs_own_ids(const char* p, const char* stop, hs_ids_seen* seen,
                                            int64_t* pid, int64_t* tid) {
        const char* first = p;
        uint64_t value;
        long n = seen->len;
        if (n && stop - p > n && hs_same(p, seen->text, n) && p[n] == ',') {
            *pid = seen->pid;
            *tid = seen->tid;
            return p + n;
        }
        if (memcmp(p, ",\\"pid\\":", 7) != 0) return NULL;
        p = hs_own_uint(p + 7, stop, &value);
        if (p == NULL || memcmp(p, ",\\"tid\\":", 7) != 0) return NULL;
        *pid = (int64_t)value;
        p = hs_own_uint(p + 7, stop, &value);
        if (p == NULL) return NULL;
        *tid = (int64_t)value;
        if (p - first <= 48) {
            memcpy(seen->text, first, (size_t)(p - first));
            seen->len = (long)(p - first);
            seen->pid = *pid;
            seen->tid = *tid;
        }
        return p;
    }
    /* The phase (X or i), times, pid and tid of an event as encode writes them (an
       instant's dur: 0). Literal compares need no end check: one running past the data
       meets the NUL there, and the padding after it (PAD_BYTES) holds what they read. */
    HS_ALWAYS_INLINE const char* hs_own_head(const char* p, const char* stop, hs_ids_seen* seen,
                                             int64_t* ts, int64_t* dur, int64_t* pid,
                                             int64_t* tid) {
        int complete = memcmp(p, "{\\"ph\\":\\"X\\",\\"ts\\":", 15) == 0;
        if (complete) p += 15;
        else if (memcmp(p, "{\\"ph\\":\\"i\\",\\"s\\":\\"t\\",\\"ts\\":", 23) == 0) p += 23;
        else return NULL;
        p = hs_own_us(p, stop, ts);
        if (p == NULL) return NULL;
        *dur = 0;
        if (complete) {
            if (memcmp(p, ",\\"dur\\":", 7) != 0) return NULL;
            p = hs_own_us(p + 7, stop, dur);
            if (p == NULL) return NULL;
        }
        return hs_own_ids(p, stop, seen, pid, tid);
    }
    /* A row's flags (Reader's F_*; FLAG_* in Python). */
    enum { HS_F_PARENT = 1, HS_F_ARG = 2, HS_F_ERROR = 4, HS_F_SPAN_ID = 8 };
    typedef struct { uint64_t span_id, parent, depth; int64_t arg; uint8_t flags; } hs_args;
    /* ``,"args":{"span_id":N`` and the args encode may write after it (each may be left
       out: a root, depth 0, no arg, no error), up to a thread name or the args' end. */
    HS_ALWAYS_INLINE const char* hs_own_args(const char* p, const char* stop, hs_args* a) {
        uint64_t value;
        int negative;
        if (memcmp(p, ",\\"args\\":{\\"span_id\\":", 19) != 0) return NULL;
        p = hs_own_uint(p + 19, stop, &a->span_id);
        if (p == NULL) return NULL;
        if (memcmp(p, ",\\"parent_id\\":", 13) == 0) {
            p += 13;
            if (memcmp(p, "null", 4) == 0) {
                p += 4;
            } else {
                p = hs_own_uint(p, stop, &a->parent);
                if (p == NULL) return NULL;
                a->flags |= HS_F_PARENT;
            }
        }
        if (memcmp(p, ",\\"depth\\":", 9) == 0) {
            p = hs_own_uint(p + 9, stop, &a->depth);
            if (p == NULL || a->depth > 0x7FFFFFFF) return NULL;
        }
        if (memcmp(p, ",\\"arg\\":", 7) == 0) {
            p += 7;
            if (memcmp(p, "null", 4) == 0) {
                p += 4;
            } else {
                negative = *p == '-';
                p = hs_own_uint(p + negative, stop, &value);
                if (p == NULL) return NULL;  /* 19 digits and more: the general path */
                a->arg = negative ? -(int64_t)value : (int64_t)value;
                a->flags |= HS_F_ARG;
            }
        }
        if (memcmp(p, ",\\"error\\":false", 14) == 0) {
            p += 14;
        } else if (memcmp(p, ",\\"error\\":true", 13) == 0) {
            p += 13;
            a->flags |= HS_F_ERROR;
        }
        return p;
    }
    /* The event's end after its args: ``}}``, or a flow's ``},"bind_id":N`` with its
       ``"flow_in"``/``"flow_out"`` (the id has no column, nor in the general path). */
    HS_ALWAYS_INLINE const char* hs_own_end(const char* p, const char* stop) {
        uint64_t flow;
        if (p[0] == '}' && p[1] == '}') return p + 2;
        if (memcmp(p, "},\\"bind_id\\":", 12) != 0) return NULL;
        p = hs_own_uint(p + 12, stop, &flow);
        if (p == NULL) return NULL;
        if (memcmp(p, ",\\"flow_in\\":true", 15) == 0) p += 15;
        if (memcmp(p, ",\\"flow_out\\":true", 16) == 0) p += 16;
        return p[0] == '}' && p < stop ? p + 1 : NULL;
    }
    /* Texts a reader has found in a file, by their first 8 bytes as found there (a short
       text's closing quote and what follows it included): its length, last 8 bytes and
       code, in 64 sets of 4 (texts that start alike, "train/compute" and
       "train/compute/kernel", share a set). */
    typedef struct {
        uint64_t word[256], tail[256];
        long len[256];   /* -1: an empty way */
        int32_t code[256];
        uint8_t next[64];  /* per set, the way the next new text takes (round robin) */
    } hs_seen;
    static inline int hs_seen_set(uint64_t word) {
        return (int)((word * 0x9E3779B97F4A7C15ULL) >> 58);
    }
    /* The string whose quote is at p, when it is a text seen before: its code, and the
       position after its closing quote; else NULL. Nothing past the data's end is taken:
       the NUL there matches no text or quote, and a longer text is compared only when the
       data holds it. ``key``: each code's text (for the middle of one over 16 bytes). */
    HS_ALWAYS_INLINE const char* hs_seen_find(const hs_seen* seen, const char* const* key,
                                              const char* p, const char* stop, int32_t* code) {
        uint64_t w = hs_load8(p + 1);
        int k = 4 * hs_seen_set(w), last = k + 4;
        for (; k < last; k++) {
            long m = seen->len[k];
            if (seen->word[k] != w || m < 0) continue;
            /* Up to 16 bytes, the first 8 and the last 8 (overlapping) are all of it. */
            if (m < 8 || (stop - p > m + 1 && p[m + 1] == '"'
                          && hs_load8(p + m - 7) == seen->tail[k]
                          && (m <= 16 || hs_same(p + 9, key[seen->code[k]] + 8, m - 16)))) {
                *code = seen->code[k];
                return p + m + 2;
            }
        }
        return NULL;
    }
    /* The text p[:n] (in the data, its quote after it; no escapes in it) has code c. */
    static inline void hs_seen_add(hs_seen* seen, const char* p, long n, int32_t c) {
        uint64_t w = hs_load8(p);
        int set = hs_seen_set(w), k = 4 * set + seen->next[set];
        seen->next[set] = (uint8_t)((seen->next[set] + 1) & 3);
        seen->word[k] = w;
        seen->len[k] = n;
        seen->code[k] = c;
        seen->tail[k] = n >= 8 ? hs_load8(p + n - 8) : 0;
    }
    static inline void hs_seen_init(hs_seen* seen) {
        memset(seen, 0, sizeof(*seen));
        for (int k = 0; k < 256; k++) seen->len[k] = -1;
    }
    /* The first 8 (or 4) bytes of p[:n] as a word, 0 for fewer (hs_tail has those). */
    static inline uint64_t hs_head(const char* p, long n) {
        return n >= 8 ? hs_load8(p) : n >= 4 ? (uint64_t)hs_load4(p) : 0;
    }
    """
    uint64_t hs_head(const char* p, long n) nogil
    int hs_same(const char* a, const char* b, long n) nogil
    uint64_t hs_tail(const char* p, long n) nogil
    const char* hs_plain_run(const char* p) nogil
    uint64_t hs_load8(const char* p) nogil
    const char* hs_own_uint(const char* p, const char* stop, uint64_t* out) nogil
    const char* hs_own_us(const char* p, const char* stop, int64_t* ns) nogil
    ctypedef struct hs_ids_seen:
        long len
    const char* hs_own_head(const char* p, const char* stop, hs_ids_seen* seen, int64_t* ts,
                            int64_t* dur, int64_t* pid, int64_t* tid) nogil
    enum: HS_F_PARENT, HS_F_ARG, HS_F_ERROR, HS_F_SPAN_ID
    ctypedef struct hs_args:
        uint64_t span_id, parent, depth
        int64_t arg
        uint8_t flags
    const char* hs_own_args(const char* p, const char* stop, hs_args* a) nogil
    const char* hs_own_end(const char* p, const char* stop) nogil
    ctypedef struct hs_seen:
        pass
    const char* hs_seen_find(const hs_seen* seen, const char* const* key, const char* p,
                             const char* stop, int32_t* code) nogil
    void hs_seen_add(hs_seen* seen, const char* p, long n, int32_t c) nogil
    void hs_seen_init(hs_seen* seen) nogil


# =========================================================================== reader: strings


cdef inline uint64_t hash_bytes(const char* p, Py_ssize_t n) noexcept nogil:
    # Eight bytes a step (unaligned loads), mixed by multiplication; the tail as one more
    # word (loads that overlap the last step's rather than reading past the text).
    # Collisions only cost a compare: the table checks the bytes.
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL ^ <uint64_t>n
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        h = (h ^ hs_load8(p + i)) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 32
        i += 8
    if i < n:
        h = (h ^ hs_tail(p, n)) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 32
    return h ^ (h >> 29)


cdef class Strings:
    """Distinct strings and their codes, looked up by their UTF-8 bytes (an open-addressing
    table in C, so a repeated name costs a hash and a compare, no Python object)."""
    cdef public list values  # str, index = code
    cdef list keys  # bytes, index = code (they own the bytes key_text points into)
    cdef int32_t* slots
    cdef uint64_t* slot_hash
    cdef Py_ssize_t mask
    # Per code its UTF-8 bytes and their length: a lookup compares them without touching a
    # Python object (no list item, no reference count).
    cdef const char** key_text
    cdef Py_ssize_t* key_len
    cdef Py_ssize_t key_cap
    # A string of up to 24 bytes is exactly its length and three words (its first, second
    # and last 8 bytes, or 4, overlapping; 0 for what it has not): a direct-mapped cache of
    # those answers most lookups of a trace's few names without hashing or comparing bytes.
    cdef uint64_t cache_head[64]
    cdef uint64_t cache_mid[64]
    cdef uint64_t cache_tail[64]
    cdef Py_ssize_t cache_len[64]
    cdef int32_t cache_code[64]
    # The texts the reader of our own lines has found in the file (hs_seen_find): a name
    # it has seen takes a load and a compare or two, no scan for its end, no hash.
    cdef hs_seen seen

    def __cinit__(self):
        for i in range(64):
            self.cache_len[i] = -1
        hs_seen_init(&self.seen)
        self.values = []
        self.keys = []
        self.mask = 63
        self.slots = <int32_t*>malloc(64 * sizeof(int32_t))
        self.slot_hash = <uint64_t*>malloc(64 * sizeof(uint64_t))
        self.key_cap = 32
        self.key_text = <const char**>malloc(self.key_cap * sizeof(char*))
        self.key_len = <Py_ssize_t*>malloc(self.key_cap * sizeof(Py_ssize_t))
        if self.slots == NULL or self.slot_hash == NULL or self.key_text == NULL or self.key_len == NULL:
            raise MemoryError()
        memset(self.slots, 0xFF, 64 * sizeof(int32_t))

    def __dealloc__(self):
        free(self.slots)
        free(self.slot_hash)
        free(self.key_text)
        free(self.key_len)

    cdef int grow(self) except -1:
        cdef Py_ssize_t size = (self.mask + 1) * 2, i, j
        cdef int32_t* slots = <int32_t*>malloc(size * sizeof(int32_t))
        cdef uint64_t* hashes = <uint64_t*>malloc(size * sizeof(uint64_t))
        if slots == NULL or hashes == NULL:
            free(slots)
            free(hashes)
            raise MemoryError()
        memset(slots, 0xFF, size * sizeof(int32_t))
        for i in range(self.mask + 1):
            if self.slots[i] >= 0:
                j = self.slot_hash[i] & (size - 1)
                while slots[j] >= 0:
                    j = (j + 1) & (size - 1)
                slots[j] = self.slots[i]
                hashes[j] = self.slot_hash[i]
        free(self.slots)
        free(self.slot_hash)
        self.slots = slots
        self.slot_hash = hashes
        self.mask = size - 1
        return 0

    cdef int grow_keys(self) except -1:
        cdef Py_ssize_t cap = self.key_cap * 2
        cdef const char** text = <const char**>realloc(self.key_text, cap * sizeof(char*))
        if text == NULL:
            raise MemoryError()
        self.key_text = text
        cdef Py_ssize_t* length = <Py_ssize_t*>realloc(self.key_len, cap * sizeof(Py_ssize_t))
        if length == NULL:
            raise MemoryError()
        self.key_len = length
        self.key_cap = cap
        return 0

    cdef inline int32_t code(self, const char* p, Py_ssize_t n) except -1:
        """The code of the UTF-8 text p[:n], added when new (UnicodeDecodeError if not UTF-8)."""
        cdef uint64_t head, mid, tail
        cdef int k
        cdef int32_t c
        if n > 24:
            return self.lookup(p, n)
        head = hs_head(p, n)
        mid = hs_load8(p + 8) if n > 16 else 0
        tail = hs_tail(p, n) if n else 0
        k = <int>((((head * 0x9E3779B97F4A7C15ULL) ^ mid ^ tail) * 0xFF51AFD7ED558CCDULL ^ <uint64_t>n) >> 58)
        if self.cache_len[k] == n and self.cache_head[k] == head and self.cache_tail[k] == tail \
                and self.cache_mid[k] == mid:
            return self.cache_code[k]
        c = self.lookup(p, n)
        self.cache_len[k], self.cache_head[k], self.cache_mid[k] = n, head, mid
        self.cache_tail[k], self.cache_code[k] = tail, c
        return c

    cdef int32_t lookup(self, const char* p, Py_ssize_t n) except -1:
        """``code`` through the hash table."""
        cdef uint64_t h = hash_bytes(p, n)
        cdef Py_ssize_t j = h & self.mask
        cdef int32_t c
        cdef bytes key
        while True:
            c = self.slots[j]
            if c < 0:
                break
            if self.slot_hash[j] == h and self.key_len[c] == n and hs_same(self.key_text[c], p, n):
                return c
            j = (j + 1) & self.mask
        value = PyUnicode_DecodeUTF8(p, n, NULL)
        c = <int32_t>len(self.values)
        if c == self.key_cap:
            self.grow_keys()
        key = p[:n]
        self.values.append(value)
        self.keys.append(key)
        self.key_text[c] = PyBytes_AS_STRING(key)
        self.key_len[c] = n
        self.slots[j] = c
        self.slot_hash[j] = h
        if 2 * len(self.values) > self.mask:
            self.grow()
        return c

    def code_of(self, str text):
        encoded = text.encode("utf-8", "replace")  # a lone surrogate (\\ud800) becomes "?"
        return self.code(encoded, len(encoded))


# =========================================================================== reader: columns


cdef extern from *:
    """
    #include <sys/mman.h>
    #include <unistd.h>
    /* A column's memory: anonymous pages of its own, advised to be huge pages once it is
       large (a column of a million rows then costs a few page faults, not thousands: in a
       VM each is dear), grown by moving the pages (mremap on Linux) rather than copying. */
    static void hs_col_advise(char* p, size_t n) {
    #ifdef MADV_HUGEPAGE
        if (n >= ((size_t)2 << 20)) (void)madvise(p, n, MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    #include <stdint.h>
    #define HS_HUGE ((size_t)2 << 20)
    /* Whole pages, and whole 2 MiB once that large: the kernel backs only a whole aligned
       2 MiB range of a mapping with a huge page, so a column of a million int64 (7.6 MiB)
       took its last 1.6 MiB in 4 KiB faults, 418 of its 422 (six such columns a load). */
    static size_t hs_col_round(size_t n) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        if (n >= HS_HUGE) return (n + HS_HUGE - 1) / HS_HUGE * HS_HUGE;
        return n < page ? page : (n + page - 1) / page * page;
    }
    /* n bytes of fresh pages, at a multiple of 2 MiB when n is that large: the kernel backs
       only whole aligned 2 MiB ranges with a huge page, and mmap's own addresses are 4 KiB
       aligned, so a grown column took 4 KiB faults for more of its pages. */
    static char* hs_col_map(size_t n) {
        void* raw;
        char* aligned;
        size_t head, span = n + HS_HUGE;
        if (n < HS_HUGE) {
            raw = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            return raw == MAP_FAILED ? NULL : (char*)raw;
        }
        raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) return NULL;
        aligned = (char*)(((uintptr_t)raw + HS_HUGE - 1) & ~(uintptr_t)(HS_HUGE - 1));
        head = (size_t)(aligned - (char*)raw);
        if (head) munmap(raw, head);
        if (span - head > n) munmap(aligned + n, span - head - n);
        return aligned;
    }
    static char* hs_col_alloc(size_t n) {
        char* p = hs_col_map(n);
        if (p != NULL) hs_col_advise(p, n);
        return p;
    }
    static char* hs_col_resize(char* p, size_t old, size_t n) {
    #if defined(__linux__) && defined(MREMAP_MAYMOVE) && defined(MREMAP_FIXED)
        void* q;
        char* target;
        if (n <= old) {  /* in place */
            q = mremap(p, old, n, 0);
            return q == MAP_FAILED ? NULL : (char*)q;
        }
        if (old < HS_HUGE) {
            /* Copied, the little there is: moved, its 4 KiB pages would keep the first
               2 MiB of the new place from being one huge page (512 faults instead of 1). */
            target = hs_col_alloc(n);
            if (target == NULL) return NULL;
            memcpy(target, p, old);
            munmap(p, old);
            return target;
        }
        /* The pages move (no copy) to an aligned place, where the new part can be huge. */
        target = hs_col_map(n);
        if (target == NULL) return NULL;
        q = mremap(p, old, n, MREMAP_MAYMOVE | MREMAP_FIXED, target);
        if (q == MAP_FAILED) {
            munmap(target, n);
            return NULL;
        }
        hs_col_advise((char*)q, n);
        return (char*)q;
    #else
        char* q = hs_col_alloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, old < n ? old : n);
        munmap(p, old);
        return q;
    #endif
    }
    static void hs_col_free(char* p, size_t n) { if (p) munmap(p, n); }
    """
    size_t hs_col_round(size_t n) nogil
    char* hs_col_alloc(size_t n) nogil
    char* hs_col_resize(char* p, size_t old, size_t n) nogil
    void hs_col_free(char* p, size_t n) nogil



cdef extern from *:
    """
    #include <errno.h>
    #include <signal.h>
    #include <stdint.h>
    #include <sys/mman.h>
    #include <sys/stat.h>
    #include <unistd.h>
    /* A file cut shorter while it is mapped: reading a page past its new end raises
       SIGBUS, which would end the process (a job rewriting its trace in place while it is
       loaded). The pages of every file being read are registered here; a fault in them
       maps zeros over the rest of the file (the reader then meets NULs) and marks the
       file cut, and the load says so. A fault anywhere else goes to the handler that was
       there before (or ends the process, as it would have). Registered and unregistered
       under the GIL; the handler, in any thread, reads the slots atomically. */
    #define HS_TEXT_SLOTS 64
    typedef struct { char* lo; char* hi; int active; int cut; } hs_text_slot;
    static hs_text_slot hs_text_slots[HS_TEXT_SLOTS];
    static struct sigaction hs_sigbus_before;
    static void hs_sigbus(int sig, siginfo_t* info, void* context) {
        char* addr = (char*)info->si_addr;
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        for (int k = 0; k < HS_TEXT_SLOTS; k++) {
            hs_text_slot* slot = &hs_text_slots[k];
            if (!__atomic_load_n(&slot->active, __ATOMIC_ACQUIRE)) continue;
            if (addr >= slot->lo && addr < slot->hi) {
                char* from = (char*)((uintptr_t)addr & ~(page - 1));
                if (mmap(from, (size_t)(slot->hi - from), PROT_READ,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
                    break;  /* cannot mend it: as if this handler were not here */
                __atomic_store_n(&slot->cut, 1, __ATOMIC_RELEASE);
                return;  /* the read is done again, and reads zeros */
            }
        }
        if (hs_sigbus_before.sa_flags & SA_SIGINFO) {
            hs_sigbus_before.sa_sigaction(sig, info, context);
        } else if (hs_sigbus_before.sa_handler == SIG_DFL || hs_sigbus_before.sa_handler == SIG_IGN) {
            /* the fault comes again on return, now with the default action */
            signal(SIGBUS, SIG_DFL);
        } else {
            hs_sigbus_before.sa_handler(sig);
        }
    }
    static int hs_sigbus_installed;
    /* hs_sigbus installed, the action it finds kept to pass on faults that are not ours.
       Over another handler only the first time: one installed after hs_sigbus may pass
       faults on to it (faulthandler does), and hs_sigbus installed again over that one
       would pass them back, a loop without end. Again over the default action (hs_sigbus
       was taken away since). 0, or -1 with errno. */
    static int hs_sigbus_install(void) {
        struct sigaction now, ours;
        if (sigaction(SIGBUS, NULL, &now) != 0) return -1;
        if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == hs_sigbus) return 0;
        if (hs_sigbus_installed && ((now.sa_flags & SA_SIGINFO)
                                    || (now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN)))
            return 0;
        hs_sigbus_installed = 1;
        memset(&ours, 0, sizeof(ours));
        ours.sa_sigaction = hs_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        hs_sigbus_before = now;
        return sigaction(SIGBUS, &ours, NULL);
    }
    /* A regular file's first ``length`` bytes, then ``pad`` zero bytes, at one address
       (*mapped: the bytes to unmap; *slot: its registration): the file's whole pages
       mapped from the page cache (read in place: read() copied each byte once more, 7% of
       a Chrome JSON load), its last part page read into anonymous memory, so the zeros
       after the data are ours whatever is appended to the file meanwhile. NULL with errno
       set; EAGAIN: the file is now shorter than ``length``; EBUSY: no free slot. */
    static char* hs_text_map(int fd, size_t length, size_t pad, size_t* mapped, int* slot) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t whole = length / page * page, total = (length + pad + page - 1) / page * page;
        size_t done = 0;
        ssize_t got;
        struct stat st;
        char* base;
        int saved, k;
        /* Pages past the file's end would fault when read: refused here instead. */
        if (fstat(fd, &st) != 0) return NULL;
        if (!S_ISREG(st.st_mode) || (unsigned long long)st.st_size < (unsigned long long)length) {
            errno = S_ISREG(st.st_mode) ? EAGAIN : EINVAL;
            return NULL;
        }
        for (k = 0; k < HS_TEXT_SLOTS && hs_text_slots[k].active; k++) {}
        if (k == HS_TEXT_SLOTS) {
            errno = EBUSY;
            return NULL;
        }
        if (hs_sigbus_install() != 0) return NULL;
        base = (char*)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == (char*)MAP_FAILED) return NULL;
        while (done < length - whole) {
            got = pread(fd, base + whole + done, length - whole - done, (off_t)(whole + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                saved = got < 0 ? errno : EAGAIN;
                munmap(base, total);
                errno = saved;
                return NULL;
            }
            done += (size_t)got;
        }
        if (whole) {
            hs_text_slots[k].lo = base;
            hs_text_slots[k].hi = base + whole;
            hs_text_slots[k].cut = 0;
            __atomic_store_n(&hs_text_slots[k].active, 1, __ATOMIC_RELEASE);
            if (mmap(base, whole, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
                saved = errno;
                __atomic_store_n(&hs_text_slots[k].active, 0, __ATOMIC_RELEASE);
                munmap(base, total);
                errno = saved;
                return NULL;
            }
        }
        *slot = whole ? k : -1;
        *mapped = total;
        return base;
    }
    /* Whether a fault found the file cut shorter while it was mapped. */
    static int hs_text_cut(int slot) {
        return slot >= 0 && __atomic_load_n(&hs_text_slots[slot].cut, __ATOMIC_ACQUIRE);
    }
    static void hs_text_unmap(char* base, size_t mapped, int slot) {
        if (slot >= 0) __atomic_store_n(&hs_text_slots[slot].active, 0, __ATOMIC_RELEASE);
        munmap(base, mapped);
    }
    """
    char* hs_text_map(int fd, size_t length, size_t pad, size_t* mapped, int* slot) nogil
    int hs_text_cut(int slot) nogil
    void hs_text_unmap(char* base, size_t mapped, int slot) nogil


@cython.final
cdef class MappedText:
    """The bytes of a regular file as ``Reader.feed_text`` reads them: mapped, not copied,
    with a NUL and ``PAD`` zero bytes after them. Bytes appended to the file meanwhile are
    not seen; a file cut shorter meanwhile reads as zeros from where it was cut, and
    ``cut`` says so (the reader then refuses it). At most 64 at a time (OSError EBUSY)."""
    cdef char* base
    cdef size_t mapped
    cdef int slot
    cdef int fd  # a copy of the file's descriptor: its length checked again after the read
    cdef readonly Py_ssize_t length

    def __cinit__(self, int fd, Py_ssize_t length):
        import errno as errno_codes
        if length < 0:
            raise ValueError(f"MappedText length {length}")
        self.slot = -1
        self.fd = -1
        self.base = hs_text_map(fd, <size_t>length, PAD_BYTES, &self.mapped, &self.slot)
        if self.base == NULL:
            if errno == errno_codes.EAGAIN:
                raise OSError(errno, f"shorter than the {length:,} bytes to read (changed while read?)")
            if errno == errno_codes.EINVAL:
                raise OSError(errno, "not a regular file")
            if errno == errno_codes.EBUSY:
                raise OSError(errno, "too many files mapped at once")
            raise OSError(errno, os.strerror(errno))
        self.length = length
        self.fd = dup(fd)
        if self.fd < 0:
            error = errno
            self.close()
            raise OSError(error, os.strerror(error))

    @property
    def cut(self):
        """Whether the file is shorter than ``length`` now, or a read met its end: a file
        cut inside a page reads as zeros there without a fault."""
        if hs_text_cut(self.slot):
            return True
        return self.fd >= 0 and os.fstat(self.fd).st_size < self.length

    def close(self):
        if self.base != NULL:
            hs_text_unmap(self.base, self.mapped, self.slot)
            self.base = NULL
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.base != NULL:
            hs_text_unmap(self.base, self.mapped, self.slot)
        if self.fd >= 0:
            close(self.fd)


@cython.final
cdef class Column:
    """A growable buffer of fixed-size items in pages of its own (huge pages once large;
    grown by moving its pages, not copying them), handed to numpy without a copy through
    the buffer protocol (``np.frombuffer(column, dtype, n)``; ``data`` is a memoryview)."""
    cdef char* ptr
    cdef size_t mapped  # bytes mapped (whole pages)
    cdef Py_ssize_t used  # bytes of the items (what the buffer shows)
    cdef Py_ssize_t itemsize
    cdef int exports

    def __cinit__(self, Py_ssize_t itemsize):
        self.itemsize = itemsize
        self.mapped = hs_col_round(0)
        self.ptr = hs_col_alloc(self.mapped)
        if self.ptr == NULL:
            raise MemoryError()
        self.used = 0
        self.exports = 0

    def __dealloc__(self):
        hs_col_free(self.ptr, self.mapped)

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        PyBuffer_FillInfo(buffer, self, self.ptr, self.used, 0, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* buffer):
        self.exports -= 1

    @property
    def data(self):
        return memoryview(self)

    cdef char* resize(self, Py_ssize_t n) except NULL:
        cdef size_t size = hs_col_round(<size_t>(n * self.itemsize))
        cdef char* moved
        if self.exports:
            raise BufferError("a Column cannot grow while its buffer is exported")
        if size != self.mapped:
            moved = hs_col_resize(self.ptr, self.mapped, size)
            if moved == NULL:
                raise MemoryError()
            self.ptr, self.mapped = moved, size
        self.used = n * self.itemsize
        return self.ptr


def fresh_column(Py_ssize_t n, Py_ssize_t itemsize):
    """A Column of ``n`` items of ``itemsize`` bytes (uninitialised, writable; for
    ``np.frombuffer(column, dtype, n)``), in pages of its own: a large one 2 MiB-aligned and
    advised huge, so filling it costs a page fault per 2 MiB. An array of a million int64
    from malloc took 2,000 faults on first write, 5-8 ms in a VM: more than the gather
    that filled it."""
    if n < 0 or itemsize <= 0:
        raise ValueError(f"fresh_column({n}, {itemsize})")
    column = Column(itemsize)
    column.resize(n)
    return column


cdef struct Num:
    const char* start
    uint64_t ip      # integer part (when not overflow)
    uint64_t frac9   # the first nine fraction digits, as a nine-digit integer
    bint neg
    bint overflow
    bint has_exp
    bint is_int


cdef struct Event:
    # One event's fields, as the parser found them (text: pointers into the buffer).
    char ph
    const char* first
    Num ts
    Num dur
    int ts_kind, dur_kind
    const char* ts_raw
    const char* dur_raw
    Py_ssize_t ts_len, dur_len
    int pk, tk
    int64_t pv, tv
    const char* pid_text
    const char* tid_text
    Py_ssize_t pid_len, tid_len
    bint pid_esc, tid_esc
    const char* name_text
    Py_ssize_t name_len
    bint name_esc
    const char* cat_text
    Py_ssize_t cat_len
    bint cat_esc
    const char* id_text
    Py_ssize_t id_len
    uint8_t flags
    uint64_t a_span_id, a_parent
    int64_t a_depth, a_arg, a_rank
    const char* tn_text
    Py_ssize_t tn_len
    bint tn_esc


# Value types, as the event parser records them.
DEF T_MISSING = 0
DEF T_STRING = 1
DEF T_NUMBER = 2
DEF T_TRUE = 3
DEF T_FALSE = 4
DEF T_NULL = 5
DEF T_OTHER = 6

# Identifier kinds (pid, tid).
#: The 'ph' of an event whose "ph" is not a string (a number, an object, ...).
DEF PH_NOT_STRING = 1
#: Every phase of the Chrome trace event format: those that are no spans are skipped quietly.
cdef const char* KNOWN_PHASES = b"BEXiICbneSTpFstfPNODMVvRc()"

DEF ID_INT = 0
DEF ID_STR = 1
DEF ID_BAD = 2
DEF ID_RANGE = 3

cdef uint64_t POW10[10]
POW10[:] = [1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000]
cdef uint8_t WS[256]
cdef uint8_t STR_CLASS[256]  # 0 plain, 1 quote, 2 backslash, 3 control, 4 non-ASCII
cdef uint8_t IS_DIGIT[256]
cdef uint8_t KEY_CHAR[256]
for _i in range(256):
    KEY_CHAR[_i] = (0x30 <= _i <= 0x39) or (0x41 <= _i <= 0x5A) or (0x61 <= _i <= 0x7A) or _i == 0x5F
    WS[_i] = _i in (0x20, 0x09, 0x0A, 0x0D)
    STR_CLASS[_i] = 1 if _i == 0x22 else 2 if _i == 0x5C else 3 if _i < 0x20 else 4 if _i >= 0x80 else 0
    IS_DIGIT[_i] = 0x30 <= _i <= 0x39


# Reader states (where in the document the next bytes go).
DEF S_START = 0
DEF S_KEY = 1        # in the top-level object, before a key (or the closing brace)
DEF S_KEY_NEXT = 2   # after a top-level value: ',' or '}'
DEF S_EVENT = 3      # in the events array, before an event (or ']', when allowed)
DEF S_EVENT_NEXT = 4 # after an event: ',' or ']'
DEF S_END = 5        # after the document: only blanks

# step() results
DEF NEED_MORE = 0
DEF DONE = 1


@cython.final  # direct calls between its parts (no vtable), which the C compiler inlines
cdef class Reader:
    """Streaming parser of one Chrome JSON document (see the module docstring).

    Usage: ``feed(buffer, length, eof)`` with the unconsumed bytes first; it returns how
    many bytes it consumed (the rest must be fed again, with more after them).
    """
    # Columns (collection phase) and their typed pointers, refreshed when they grow.
    cdef public Column c_thread, c_start, c_end, c_name, c_category, c_thread_name
    cdef public Column c_span_id, c_parent_id, c_depth, c_arg, c_rank, c_flags
    cdef int32_t* thread
    cdef int64_t* start
    cdef int64_t* end
    cdef int32_t* name
    cdef int32_t* category
    cdef int32_t* thread_name
    cdef uint64_t* span_id
    cdef uint64_t* parent_id
    cdef int32_t* depth
    cdef int64_t* arg
    cdef int32_t* rank
    cdef uint8_t* flags
    cdef public Py_ssize_t n
    # c_rank and c_thread_name hold a value a row only once one row has one that is not
    # the default (a rank arg; a thread renamed), as few files do: until then they are
    # not written, and each row's is the default (I32_MIN, -1).
    cdef public bint rank_live, thread_name_live
    # Rows of each kind few files have, counted as they come so that the assembly need not
    # look at every row for them (most loads have none): still open (a B or b not yet
    # ended), without a category, without args.span_id.
    cdef public Py_ssize_t open_rows, rows_without_category, rows_without_span_id
    cdef public Py_ssize_t own_rows  # rows read by own_row (our own spelling)
    cdef Py_ssize_t capacity

    cdef public Strings names, categories, thread_names, ids
    # Threads: key (pid kind, pid, tid kind, tid) -> index; the last one looked up cached.
    cdef public dict thread_index
    cdef public list thread_keys
    cdef list stacks  # per thread: rows of open B events
    cdef public dict async_open  # (pid kind, pid, cat, id) -> rows of open b events
    cdef public set async_tracks  # codes (in ids) of the "async <cat>" track names
    cdef int last_pk, last_tk
    cdef int64_t last_pv, last_tv
    cdef int32_t last_thread

    # Document state.
    cdef int state
    cdef public bint array_form
    cdef public bint saw_events
    cdef public Py_ssize_t events  # events seen in traceEvents
    cdef public dict top  # top-level key -> decoded value (the few we use), or True
    cdef public list metadata_events  # decoded M events
    cdef public dict counts  # what was dropped, by cause
    cdef public object first_bad  # (event index, problem) of the first row a hotspan file cannot have
    cdef public object path

    # The buffer being parsed.
    cdef const char* buf
    cdef const char* stop
    cdef int64_t offset  # file offset of buf[0]
    cdef bint s_esc, s_high  # what the last scanned string held
    cdef const char* event_end  # where the event being assembled ends
    # The last own line's ``,"pid":P,"tid":T`` text and its numbers (hs_own_ids).
    cdef hs_ids_seen ids_seen

    def __cinit__(self, path, Py_ssize_t rows=4096):
        """``rows``: room for that many rows from the start (a guess from the file's size):
        the columns are then large from their start, so the kernel backs them with huge
        pages throughout, not 4 KiB pages for their first 2 MiB each (6,000 faults of a
        load of a million spans, a fifth of its time), and they are mapped once. Pages
        never written cost nothing, and ``finish`` gives back what is left."""
        self.path = path
        self.c_thread, self.c_start, self.c_end = Column(4), Column(8), Column(8)
        self.c_name, self.c_category, self.c_thread_name = Column(4), Column(4), Column(4)
        self.c_span_id, self.c_parent_id, self.c_depth = Column(8), Column(8), Column(4)
        self.c_arg, self.c_rank, self.c_flags = Column(8), Column(4), Column(1)
        self.n = 0
        self.capacity = 0
        self.grow(max(rows, 4096))  # mapped once: growing them moves each column's pages
        self.names, self.categories, self.thread_names, self.ids = Strings(), Strings(), Strings(), Strings()
        self.thread_index = {}
        self.thread_keys = []
        self.stacks = []
        self.async_open = {}
        self.async_tracks = set()
        self.last_thread = -1
        self.state = S_START
        self.top = {}
        self.metadata_events = []
        self.counts = {}
        self.first_bad = None

    # ------------------------------------------------------------------ columns

    cdef int grow(self, Py_ssize_t capacity) except -1:
        self.thread = <int32_t*>self.c_thread.resize(capacity)
        self.start = <int64_t*>self.c_start.resize(capacity)
        self.end = <int64_t*>self.c_end.resize(capacity)
        self.name = <int32_t*>self.c_name.resize(capacity)
        self.category = <int32_t*>self.c_category.resize(capacity)
        if self.thread_name_live:
            self.thread_name = <int32_t*>self.c_thread_name.resize(capacity)
        self.span_id = <uint64_t*>self.c_span_id.resize(capacity)
        self.parent_id = <uint64_t*>self.c_parent_id.resize(capacity)
        self.depth = <int32_t*>self.c_depth.resize(capacity)
        self.arg = <int64_t*>self.c_arg.resize(capacity)
        if self.rank_live:
            self.rank = <int32_t*>self.c_rank.resize(capacity)
        self.flags = <uint8_t*>self.c_flags.resize(capacity)
        self.capacity = capacity
        return 0

    cdef int set_rank(self, Py_ssize_t row, int64_t rank) except -1:
        """Row ``row``'s rank (I32_MIN: none), the column made live at the first one."""
        cdef Py_ssize_t i
        if not self.rank_live:
            if rank == I32_MIN:
                return 0
            self.rank = <int32_t*>self.c_rank.resize(self.capacity)
            for i in range(self.capacity):
                self.rank[i] = I32_MIN
            self.rank_live = 1
        self.rank[row] = <int32_t>rank
        return 0

    cdef int set_thread_name(self, Py_ssize_t row, int32_t code) except -1:
        """Row ``row``'s own thread name's code (-1: its thread's), as set_rank."""
        if not self.thread_name_live:
            if code < 0:
                return 0
            self.thread_name = <int32_t*>self.c_thread_name.resize(self.capacity)
            memset(self.thread_name, 0xFF, self.capacity * sizeof(int32_t))  # -1 each
            self.thread_name_live = 1
        self.thread_name[row] = code
        return 0

    def finish(self):
        """Shrink the columns to the rows read."""
        self.grow(self.n)

    # ------------------------------------------------------------------ errors

    cdef object fail(self, const char* p, str problem):
        return TraceFileError(self.path, f"not valid JSON at byte {self.offset + (p - self.buf)}: {problem}")

    cdef object event_fail(self, str problem):
        return TraceFileError(self.path, f"event {self.events}: {problem}")

    cdef object unexpected(self, const char* p, str expected):
        cdef uint8_t c = <uint8_t>p[0]
        if c >= 0x80:
            return self.fail(p, f"byte 0x{c:02x} where {expected} belongs (not UTF-8 text?)")
        if c < 0x20 or c == 0x7F:
            return self.fail(p, f"byte 0x{c:02x} where {expected} belongs")
        return self.fail(p, f"{chr(c)!r} where {expected} belongs")

    # ------------------------------------------------------------------ scanning
    # Each returns the position after what it scanned, or NULL (no exception set) when the
    # buffer ends first: the caller then waits for more bytes. The buffer has a NUL after
    # its last byte, which stops every loop.

    cdef inline const char* ws(self, const char* p) noexcept nogil:
        while WS[<uint8_t>p[0]]:
            p += 1
        return p

    cdef const char* scan_string(self, const char* p) except? NULL:
        """p at the opening quote; validates escapes and (when non-ASCII) UTF-8."""
        cdef const char* first = p + 1
        cdef uint8_t cls, c
        cdef int k
        self.s_esc = 0
        self.s_high = 0
        p += 1
        while True:
            p = hs_plain_run(p)  # plain bytes, 8 at a time
            cls = STR_CLASS[<uint8_t>p[0]]
            if cls == 1:
                break
            if cls == 4:
                self.s_high = 1
                p += 1
                continue
            if cls == 3:
                if p >= self.stop:
                    return NULL
                raise self.fail(p, f"control character 0x{<uint8_t>p[0]:02x} inside a string")
            # backslash
            self.s_esc = 1
            if p + 1 >= self.stop:
                return NULL
            c = <uint8_t>p[1]
            if c == b'u':
                if p + 6 > self.stop:
                    return NULL
                for k in range(2, 6):
                    c = <uint8_t>p[k]
                    if not (IS_DIGIT[c] or (c | 0x20) >= b'a' and (c | 0x20) <= b'f'):
                        raise self.fail(p, "invalid \\u escape")
                p += 6
            elif c == b'"' or c == b'\\' or c == b'/' or c == b'b' or c == b'f' or c == b'n' or c == b'r' or c == b't':
                p += 2
            else:
                raise self.fail(p, "invalid escape in a string")
        if self.s_high:
            try:
                PyUnicode_DecodeUTF8(first, p - first, NULL)
            except UnicodeDecodeError as exc:
                raise self.fail(first + <Py_ssize_t>exc.start, "not UTF-8 text inside a string") from None
        return p + 1

    cdef inline const char* plain_key(self, const char* p) noexcept nogil:
        """The position after ``"key":`` when p starts a key of letters, digits and
        underscores followed right away by its colon (as writers spell them); else NULL,
        and the general path (escapes, blanks, errors) takes it. A shortcut: most of an
        event's bytes are such keys."""
        cdef const char* q = p + 1
        if p[0] != b'"' or self.stop - p < 40:
            return NULL
        while KEY_CHAR[<uint8_t>q[0]]:
            q += 1
        if q[0] == b'"' and q[1] == b':':
            return q + 2
        return NULL

    cdef const char* scan_number(self, const char* p, Num* num) except? NULL:
        cdef int nfrac = 0
        num.start = p
        num.ip = 0
        num.frac9 = 0
        num.neg = 0
        num.overflow = 0
        num.has_exp = 0
        num.is_int = 1
        if p[0] == b'-':
            num.neg = 1
            p += 1
        cdef const char* digits = p
        if p[0] == b'0':
            p += 1
        elif IS_DIGIT[<uint8_t>p[0]]:
            # Accumulate without a check per digit (a division each would cost more than
            # the parse); only 20 digits can overflow, and then the text itself tells.
            while IS_DIGIT[<uint8_t>p[0]]:
                num.ip = num.ip * 10 + (<uint8_t>p[0] - 48)
                p += 1
            if p - digits > 19:
                if p - digits > 20 or memcmp(digits, b"18446744073709551615", 20) > 0:
                    num.overflow = 1
        else:
            if p >= self.stop:
                return NULL
            if p[0] == b'I':
                raise self.fail(p, "-Infinity is not a finite number (nor JSON)")
            raise self.unexpected(p, "a digit")
        if p[0] == b'.':
            num.is_int = 0
            p += 1
            if not IS_DIGIT[<uint8_t>p[0]]:
                if p >= self.stop:
                    return NULL
                raise self.unexpected(p, "a digit after the decimal point")
            while IS_DIGIT[<uint8_t>p[0]]:
                if nfrac < 9:
                    num.frac9 = num.frac9 * 10 + (<uint8_t>p[0] - 48)
                    nfrac += 1
                p += 1
            num.frac9 *= POW10[9 - nfrac]
        if p[0] == b'e' or p[0] == b'E':
            num.is_int = 0
            num.has_exp = 1
            p += 1
            if p[0] == b'+' or p[0] == b'-':
                p += 1
            if not IS_DIGIT[<uint8_t>p[0]]:
                if p >= self.stop:
                    return NULL
                raise self.unexpected(p, "a digit in the exponent")
            while IS_DIGIT[<uint8_t>p[0]]:
                p += 1
        if p >= self.stop:
            return NULL  # the number may go on in the next block
        return p

    cdef const char* scan_literal(self, const char* p, const char* word, Py_ssize_t n) except? NULL:
        cdef Py_ssize_t have = self.stop - p
        if have < n:
            if memcmp(p, word, have) == 0:
                return NULL
            raise self.unexpected(p, "a JSON value")
        if memcmp(p, word, n) != 0:
            raise self.unexpected(p, "a JSON value")
        return p + n

    cdef const char* scan_scalar(self, const char* p, int* kind) except? NULL:
        """A string, number or literal at p (not an object or array)."""
        cdef Num num
        cdef uint8_t c = <uint8_t>p[0]
        if c == b'"':
            kind[0] = T_STRING
            return self.scan_string(p)
        if c == b'-' or IS_DIGIT[c]:
            kind[0] = T_NUMBER
            return self.scan_number(p, &num)
        if c == b't':
            kind[0] = T_TRUE
            return self.scan_literal(p, b"true", 4)
        if c == b'f':
            kind[0] = T_FALSE
            return self.scan_literal(p, b"false", 5)
        if c == b'n':
            kind[0] = T_NULL
            return self.scan_literal(p, b"null", 4)
        if p >= self.stop:
            return NULL
        if c == b'N' or c == b'I':
            raise self.fail(p, "NaN and Infinity are not finite numbers (nor JSON)")
        raise self.unexpected(p, "a JSON value")

    cdef inline const char* member(self, const char* p, const char** key, Py_ssize_t* klen) except? NULL:
        """The key loop's one step (every object this reader walks goes through here): p
        at a key's quote (after blanks); sets key and klen to the key's text between its
        quotes and returns the position of its value, blanks skipped (NULL: the buffer
        ends first). Keys spelled as writers spell them take the ``plain_key`` shortcut."""
        cdef const char* q = self.plain_key(p)
        key[0] = p + 1
        if q != NULL:
            klen[0] = q - 2 - key[0]
        else:
            if p[0] != b'"':
                if p >= self.stop:
                    return NULL
                raise self.unexpected(p, "a key")
            q = self.scan_string(p)
            if q == NULL:
                return NULL
            klen[0] = q - 1 - key[0]
            q = self.ws(q)
            if q[0] != b':':
                if q >= self.stop:
                    return NULL
                raise self.unexpected(q, "':'")
            q += 1
        q = self.ws(q)
        if q >= self.stop:
            return NULL
        return q

    cdef inline const char* after_member(self, const char* p, bint* more, str expected) except? NULL:
        """After a member's value: ',' (more, p at the next key) or '}' (no more, p after it)."""
        p = self.ws(p)
        if p[0] == b',':
            more[0] = 1
            return self.ws(p + 1)
        if p[0] == b'}':
            more[0] = 0
            return p + 1
        if p >= self.stop:
            return NULL
        raise self.unexpected(p, expected)

    cdef const char* skip_value(self, const char* p, int* kind) except? NULL:
        """Any JSON value (validated, not kept); nesting bounded by MAX_DEPTH."""
        cdef char stack[MAX_DEPTH]
        cdef int level = 0
        cdef uint8_t c
        cdef char top
        cdef int ignored
        cdef const char* key
        cdef Py_ssize_t klen
        p = self.ws(p)
        c = <uint8_t>p[0]
        if c == b'{' or c == b'[':
            kind[0] = T_OTHER
        while True:
            # A value at p.
            p = self.ws(p)
            c = <uint8_t>p[0]
            if c == b'{' or c == b'[':
                if level >= MAX_DEPTH:
                    raise self.fail(p, f"nested deeper than {MAX_DEPTH} levels")
                stack[level] = <char>c
                level += 1
                p = self.ws(p + 1)
                if p >= self.stop:
                    return NULL
                if (c == b'{' and p[0] == b'}') or (c == b'[' and p[0] == b']'):
                    level -= 1
                    p += 1
                else:
                    if c == b'{':
                        p = self.member(p, &key, &klen)
                        if p == NULL:
                            return NULL
                    continue
            else:
                if p >= self.stop:
                    return NULL
                p = self.scan_scalar(p, &ignored if level else kind)
                if p == NULL:
                    return NULL
            # After a value: commas and closing brackets.
            while True:
                if level == 0:
                    return p
                p = self.ws(p)
                if p >= self.stop:
                    return NULL
                top = stack[level - 1]
                c = <uint8_t>p[0]
                if c == b',':
                    p = self.ws(p + 1)
                    if top == b'{':
                        p = self.member(p, &key, &klen)
                        if p == NULL:
                            return NULL
                    break
                if (c == b'}' and top == b'{') or (c == b']' and top == b'['):
                    level -= 1
                    p += 1
                    continue
                raise self.unexpected(p, "',' or a closing bracket")

    cdef int64_t int_of(self, Num* num, int* ok) noexcept nogil:
        """The int64 value of an integer number; ok = 0 when not an integer in range."""
        if not num.is_int or num.overflow:
            ok[0] = 0
            return 0
        if num.neg:
            if num.ip > <uint64_t>I64_MAX + 1:
                ok[0] = 0
                return 0
            ok[0] = 1
            return <int64_t>(<uint64_t>0 - num.ip)
        if num.ip > <uint64_t>I64_MAX:
            ok[0] = 0
            return 0
        ok[0] = 1
        return <int64_t>num.ip

    cdef int time_of(self, Num* num, int64_t* ns, int64_t* sub, str key) except -1:
        """Microseconds as nanoseconds, floored, and the rest in millionths of a
        nanosecond (exact for up to nine decimals, so that start + duration rounds once)."""
        cdef double d
        cdef uint64_t mag, rest
        if num.has_exp or num.overflow or num.ip > <uint64_t>9223372036854775:
            d = strtod(num.start, NULL) * 1000.0
            if not isfinite(d) or d >= 9.2233720368547e18 or d <= -9.2233720368547e18:
                raise self.event_fail(f"{key!r} out of range: {self.raw_number(num)}")
            ns[0] = llround(d)
            sub[0] = 0
            return 0
        mag = num.ip * 1000 + num.frac9 // 1000000
        rest = num.frac9 % 1000000
        if num.neg:
            if rest:
                ns[0] = -<int64_t>mag - 1
                sub[0] = 1000000 - <int64_t>rest
            else:
                ns[0] = -<int64_t>mag
                sub[0] = 0
        else:
            ns[0] = <int64_t>mag
            sub[0] = <int64_t>rest
        return 0

    cdef str raw_number(self, Num* num):
        cdef const char* p = num.start
        while p < self.stop and (IS_DIGIT[<uint8_t>p[0]] or p[0] in b'-+.eE'):
            p += 1
        return num.start[:min(p - num.start, 40)].decode("ascii", "replace")

    # ------------------------------------------------------------------ events

    cdef inline int32_t thread_of(self, int pk, int64_t pv, int tk, int64_t tv) except -1:
        """The index of a thread; the last one's again (most events) without a call."""
        if self.last_thread >= 0 and pv == self.last_pv and tv == self.last_tv and pk == self.last_pk and tk == self.last_tk:
            return self.last_thread
        return self.find_thread(pk, pv, tk, tv)

    cdef int32_t find_thread(self, int pk, int64_t pv, int tk, int64_t tv) except -1:
        cdef int32_t t
        key = (pk, pv, tk, tv)
        found = self.thread_index.get(key)
        if found is None:
            t = <int32_t>len(self.thread_keys)
            self.thread_index[key] = t
            self.thread_keys.append(key)
            self.stacks.append([])
        else:
            t = found
        self.last_pk, self.last_pv, self.last_tk, self.last_tv, self.last_thread = pk, pv, tk, tv, t
        return t

    cdef inline int32_t string_code(self, Strings table, const char* p, Py_ssize_t n, bint esc) except -2:
        """The code of a JSON string's text (p[:n], between its quotes)."""
        if not esc:
            return table.code(p, n)
        text = json.loads((p - 1)[:n + 2])
        encoded = text.encode("utf-8", "replace")
        return table.code(encoded, len(encoded))

    cdef inline int add_row(self) except -1:
        if self.n == self.capacity:
            self.grow(self.capacity * 2)
        return 0

    cdef int bad(self, str problem) except -1:
        if self.first_bad is None:
            self.first_bad = (self.events, problem)
        return 0

    cdef void count(self, str cause):
        self.counts[cause] = self.counts.get(cause, 0) + 1

    cdef inline bint lit(self, const char* p, const char* text, Py_ssize_t n) noexcept nogil:
        """p[:n] == text, for p in the data and a literal of at most 24 bytes without a NUL:
        one that runs past the data's end meets its NUL and differs; the padding after the
        data (PAD_BYTES) holds what it reads past there, so no end check."""
        return memcmp(p, text, n) == 0

    # ------------------------------------------------------------------ events: the readers
    # Two paths: own_row reads an event spelled exactly as encode writes it, straight to a
    # row; scan_any reads any spelling key by key into an Event, and assemble (below)
    # makes it what it means.

    cdef inline const char* own_text(self, const char* p, const char** text, Py_ssize_t* n, bint* esc) except? NULL:
        """A string whose quote is at p: its text (between the quotes) and escapes."""
        cdef const char* q = self.scan_string(p)
        if q != NULL:
            text[0], n[0], esc[0] = p + 1, q - p - 2, self.s_esc
        return q

    cdef int32_t own_code(self, Strings table, const char* text, Py_ssize_t n, bint esc) except -1:
        """The code of a text hs_seen_find had not seen, now seen (a text with escapes is
        not: its bytes are not its text)."""
        cdef int32_t code = self.string_code(table, text, n, esc)
        if not esc:
            hs_seen_add(&table.seen, text, n, code)
        return code

    cdef inline const char* own_row(self, const char* p) except? NULL:
        """An event spelled exactly as encode writes it, read field after field with no
        key lookups (most events a load sees are ours, and keys are most of their bytes)
        and written straight to a row: no Event to clear, no dispatch on its phase. NULL
        as soon as the spelling differs, before anything is kept (the strings are coded
        and the row counted last): the general scanner then reads the event from its
        start. Numbers and strings go through the same checks, so both paths accept and
        refuse the same bytes. The fixed parts are C (hs_own_*), inlined here."""
        cdef int64_t ts_ns, dur_ns, pv, tv
        cdef hs_args a
        cdef const char* q
        cdef const char* name_text = NULL
        cdef const char* cat_text = NULL
        cdef const char* tn_text = NULL
        cdef Py_ssize_t name_len = 0, cat_len = 0, tn_len = 0, row
        cdef bint name_esc = 0, cat_esc = 0, tn_esc = 0
        cdef int32_t t, name_code = -2, cat_code = -1, tn_code = -1  # -2: not seen yet
        p = hs_own_head(p, self.stop, &self.ids_seen, &ts_ns, &dur_ns, &pv, &tv)
        if p == NULL or not self.lit(p, b',"name":"', 9):
            return NULL
        q = hs_seen_find(&self.names.seen, self.names.key_text, p + 8, self.stop, &name_code)
        p = q if q != NULL else self.own_text(p + 8, &name_text, &name_len, &name_esc)
        if p == NULL:
            return NULL
        if self.lit(p, b',"cat":"', 8):
            cat_code = -2
            q = hs_seen_find(&self.categories.seen, self.categories.key_text, p + 7, self.stop, &cat_code)
            p = q if q != NULL else self.own_text(p + 7, &cat_text, &cat_len, &cat_esc)
            if p == NULL:
                return NULL
        a.parent, a.depth, a.arg, a.flags = 0, 0, 0, F_SPAN_ID
        p = hs_own_args(p, self.stop, &a)
        if p == NULL:
            return NULL
        if self.lit(p, b',"thread_name":"', 16):
            p = self.own_text(p + 15, &tn_text, &tn_len, &tn_esc)
            if p == NULL:
                return NULL
        p = hs_own_end(p, self.stop)
        if p == NULL:
            return NULL
        # What assemble makes of such an event, in short: exact times (an instant ends
        # where it starts; ts and dur have at most 18 digits, so their sum fits), the
        # pid and tid integers.
        t = self.thread_of(ID_INT, pv, ID_INT, tv)
        if name_code == -2:
            name_code = self.own_code(self.names, name_text, name_len, name_esc)
        if cat_code == -2:
            cat_code = self.own_code(self.categories, cat_text, cat_len, cat_esc)
        if tn_text != NULL:
            tn_code = self.string_code(self.thread_names, tn_text, tn_len, tn_esc)
        # The row's stores written here again, as in append_row: a shared call (the C
        # compiler did not inline it) made the parse 2.7% slower.
        self.add_row()
        row = self.n
        self.thread[row] = t
        self.start[row] = ts_ns
        self.end[row] = ts_ns + dur_ns
        self.name[row] = name_code
        self.category[row] = cat_code
        self.rows_without_category += cat_code < 0
        if tn_code >= 0 or self.thread_name_live:  # most rows: no call (2% of a load)
            self.set_thread_name(row, tn_code)
        self.span_id[row] = a.span_id
        self.parent_id[row] = a.parent
        self.depth[row] = <int32_t>a.depth
        self.arg[row] = a.arg
        if self.rank_live:
            self.rank[row] = I32_MIN
        self.flags[row] = a.flags
        self.n = row + 1
        self.own_rows += 1
        self.event_end = p
        return p

    cdef inline const char* parse_event(self, const char* p) except? NULL:
        """One event object (p at its brace): our own spelling straight to a row, else
        scanned and assembled into what it means."""
        cdef Event e
        cdef const char* q = self.own_row(p)
        if q != NULL:
            return q
        q = self.scan_any(p, &e)
        if q == NULL:
            return NULL
        return self.assemble(&e, q)

    cdef inline const char* scan_any(self, const char* p, Event* e) except? NULL:
        """One event object, any spelling (p at its brace): its fields into e."""
        cdef const char* k
        cdef Py_ssize_t klen
        cdef bint more = 1
        memset(e, 0, sizeof(Event))  # what the event leaves out is missing
        e.first = p
        e.a_rank = I32_MIN
        p = self.ws(p + 1)
        if p >= self.stop:
            return NULL
        if p[0] == b'}':
            return p + 1
        while more:
            p = self.member(p, &k, &klen)
            if p == NULL:
                return NULL
            p = self.event_field(p, k, klen, e)
            if p == NULL:
                return NULL
            p = self.after_member(p, &more, "',' or '}' in an event")
            if p == NULL:
                return NULL
        return p

    cdef inline const char* event_field(self, const char* p, const char* k, Py_ssize_t klen, Event* e) except? NULL:
        """The value of an event's key k (p at the value): into e, or skipped."""
        cdef int kind
        cdef const char* q
        if klen == 2 and k[0] == b'p' and k[1] == b'h':
            return self.scan_phase(p, e)
        if klen == 2 and k[0] == b't' and k[1] == b's':
            return self.scan_time(p, &e.ts, &e.ts_kind, &e.ts_raw, &e.ts_len)
        if klen == 3 and memcmp(k, b"dur", 3) == 0:
            return self.scan_time(p, &e.dur, &e.dur_kind, &e.dur_raw, &e.dur_len)
        if klen == 3 and memcmp(k, b"pid", 3) == 0:
            return self.scan_id(p, &e.pk, &e.pv, &e.pid_text, &e.pid_len, &e.pid_esc)
        if klen == 3 and memcmp(k, b"tid", 3) == 0:
            return self.scan_id(p, &e.tk, &e.tv, &e.tid_text, &e.tid_len, &e.tid_esc)
        if klen == 4 and memcmp(k, b"name", 4) == 0:
            return self.scan_text(p, &e.name_text, &e.name_len, &e.name_esc, 0)
        if klen == 3 and memcmp(k, b"cat", 3) == 0:
            return self.scan_text(p, &e.cat_text, &e.cat_len, &e.cat_esc, 1)
        if klen == 4 and memcmp(k, b"args", 4) == 0 and p[0] == b'{':
            return self.scan_args(p, e)
        if (klen == 2 and k[0] == b'i' and k[1] == b'd') or (klen == 3 and memcmp(k, b"id2", 3) == 0):
            q = self.skip_value(p, &kind)
            if q != NULL and (e.id_text == NULL or klen == 2):
                e.id_text = p
                e.id_len = q - p
            return q
        return self.skip_value(p, &kind)

    cdef inline const char* scan_phase(self, const char* p, Event* e) except? NULL:
        cdef const char* q
        cdef int kind
        if p[0] != b'"':
            e.ph = PH_NOT_STRING
            return self.skip_value(p, &kind)
        q = self.scan_string(p)
        if q != NULL:
            e.ph = p[1] if q - p == 3 else 63  # '?': no phase we read
        return q

    cdef inline const char* scan_time(self, const char* p, Num* num, int* kind, const char** raw,
                               Py_ssize_t* n) except? NULL:
        """ts or dur: a number, else its JSON text and kind (for the complaint)."""
        cdef const char* q
        if p[0] == b'-' or IS_DIGIT[<uint8_t>p[0]]:
            kind[0] = T_NUMBER
            return self.scan_number(p, num)
        q = self.skip_value(p, kind)
        raw[0] = p
        n[0] = q - p if q != NULL else 0
        return q

    cdef inline const char* scan_id(self, const char* p, int* kind, int64_t* value, const char** text,
                             Py_ssize_t* n, bint* esc) except? NULL:
        """pid or tid: an integer, a string, or (null) 0; anything else is ID_BAD."""
        cdef Num number
        cdef int ok, vkind
        cdef const char* q
        if p[0] == b'-' or IS_DIGIT[<uint8_t>p[0]]:
            q = self.scan_number(p, &number)
            if q != NULL:
                value[0] = self.int_of(&number, &ok)
                kind[0] = ID_INT if ok else ID_RANGE if number.is_int else ID_BAD
            return q
        if p[0] == b'"':
            q = self.own_text(p, text, n, esc)
            if q != NULL:
                kind[0] = ID_STR
            return q
        q = self.skip_value(p, &vkind)
        if q != NULL:
            kind[0], value[0] = (ID_INT if vkind == T_NULL else ID_BAD), 0
        return q

    cdef inline const char* scan_text(self, const char* p, const char** text, Py_ssize_t* n, bint* esc,
                               bint null_is_none) except? NULL:
        """name or cat: a string's text; any other value's JSON text (a null category: none)."""
        cdef int kind
        cdef const char* q
        if p[0] == b'"':
            return self.own_text(p, text, n, esc)
        q = self.skip_value(p, &kind)
        if q != NULL and not (null_is_none and kind == T_NULL):
            text[0], n[0], esc[0] = p, q - p, 0
        return q

    cdef const char* scan_args(self, const char* p, Event* e) except? NULL:
        """The args hotspan writes; everything else in them is skipped (p at the brace)."""
        cdef const char* k
        cdef const char* v
        cdef Py_ssize_t klen
        cdef bint more = 1
        cdef int kind
        cdef Num number
        p = self.ws(p + 1)
        if p >= self.stop:
            return NULL
        if p[0] == b'}':
            return p + 1
        while more:
            p = self.member(p, &k, &klen)
            if p == NULL:
                return NULL
            v = p
            if p[0] == b'-' or IS_DIGIT[<uint8_t>p[0]]:
                p = self.scan_number(p, &number)
                kind = T_NUMBER
            elif p[0] == b'"':
                p = self.scan_string(p)
                kind = T_STRING
            else:
                kind = T_OTHER
                p = self.skip_value(p, &kind)
            if p == NULL:
                return NULL
            self.arg_field(k, klen, v, p, kind, &number, e)
            p = self.after_member(p, &more, "',' or '}'")
            if p == NULL:
                return NULL
        return p

    cdef inline int arg_field(self, const char* k, Py_ssize_t klen, const char* v, const char* p, int kind,
                       Num* number, Event* e) except -1:
        """One member of args (its value at v, scanned up to p) into e."""
        cdef int ok = 0
        cdef bint whole = kind == T_NUMBER and number.is_int and not number.neg and not number.overflow
        if klen == 7 and memcmp(k, b"span_id", 7) == 0:
            if whole:
                e.a_span_id = number.ip
                e.flags |= F_SPAN_ID
            else:
                self.bad(f"args.span_id is not a span id: {v[:min(p - v, 40)]!r}")
        elif klen == 9 and memcmp(k, b"parent_id", 9) == 0:
            if whole:
                e.a_parent = number.ip
                e.flags |= F_PARENT
            elif kind == T_NULL:
                e.flags &= ~F_PARENT
            else:
                self.bad(f"args.parent_id is not a span id: {v[:min(p - v, 40)]!r}")
        elif klen == 5 and memcmp(k, b"depth", 5) == 0:
            e.a_depth = self.int_of(number, &ok) if kind == T_NUMBER else 0
            if not (kind == T_NUMBER and ok and -0x80000000 <= e.a_depth <= 0x7FFFFFFF):
                e.a_depth = 0
                self.bad(f"args.depth is not an int32: {v[:min(p - v, 40)]!r}")
        elif klen == 3 and memcmp(k, b"arg", 3) == 0:
            if kind == T_NUMBER:
                e.a_arg = self.int_of(number, &ok)
            if ok:
                e.flags |= F_ARG
            else:
                e.flags &= ~F_ARG
                if kind != T_NULL:
                    self.bad(f"args.arg is not an int64: {v[:min(p - v, 40)]!r}")
        elif klen == 5 and memcmp(k, b"error", 5) == 0:
            if kind == T_TRUE:
                e.flags |= F_ERROR
            else:
                e.flags &= ~F_ERROR
        elif klen == 4 and memcmp(k, b"rank", 4) == 0:
            if kind == T_NUMBER:
                e.a_rank = self.int_of(number, &ok)
                if not ok or not (-0x80000000 <= e.a_rank <= 0x7FFFFFFF):
                    e.a_rank = I32_MIN
        elif klen == 11 and memcmp(k, b"thread_name", 11) == 0:
            if kind == T_STRING:
                e.tn_text, e.tn_len, e.tn_esc = v + 1, p - v - 2, self.s_esc
        return 0

    # ------------------------------------------------------------------ events: the assembler

    cdef inline int no_span(self, Event* e) except -1:
        """Phases that make no span: metadata kept for later, the rest counted or ignored."""
        if e.ph == b'M':
            self.metadata_events.append((self.events, e.first[:self.event_end - e.first]))
            return True
        if e.ph == b'X' or e.ph == b'B' or e.ph == b'E' or e.ph == b'i' or e.ph == b'I' \
                or e.ph == b'b' or e.ph == b'e' or e.ph == b'n':
            return False
        # Counters, flows, samples, objects: no spans, and known, so nothing to say. A phase
        # the format does not have (or none, or not a string) is an event we cannot read:
        # counted, so that the load's warning says it was left out.
        if e.ph == PH_NOT_STRING:
            self.count("ph_not_string")
        elif e.ph == 0:
            self.count("ph_missing")
        elif e.ph == 63 or strchr(KNOWN_PHASES, e.ph) == NULL:
            self.count("ph_unknown")
        return True

    cdef inline int start_and_ids(self, Event* e, int64_t* start_ns, int64_t* start_sub) except -1:
        """The event's time (checked) and its pid and tid as integers (strings coded)."""
        if e.ts_kind != T_NUMBER:
            if e.ts_kind == T_MISSING:
                raise self.event_fail("no 'ts'")
            raise self.event_fail(f"'ts' is not a finite number: {e.ts_raw[:min(e.ts_len, 40)].decode('utf-8', 'replace')}")
        self.time_of(&e.ts, start_ns, start_sub, "ts")
        if e.pk == ID_BAD or e.tk == ID_BAD:
            raise self.event_fail(f"{'pid' if e.pk == ID_BAD else 'tid'} is neither an integer nor a string")
        if e.pk == ID_RANGE or e.tk == ID_RANGE:
            raise self.event_fail(f"{'pid' if e.pk == ID_RANGE else 'tid'} out of range")
        if e.pk == ID_STR:
            e.pv = self.string_code(self.ids, e.pid_text, e.pid_len, e.pid_esc)
        if e.tk == ID_STR:
            e.tv = self.string_code(self.ids, e.tid_text, e.tid_len, e.tid_esc)
        return 0

    cdef object async_key(self, Event* e):
        """Async events: on a track of their own per process and category ("async
        <cat>"), matched by (process, category, id)."""
        cat = e.cat_text[:e.cat_len].decode("utf-8", "replace") if e.cat_text != NULL else ""
        e.tv = self.ids.code_of(f"async {cat}".rstrip())
        e.tk = ID_STR
        self.async_tracks.add(e.tv)
        return (e.pk, e.pv, cat, e.id_text[:e.id_len] if e.id_text != NULL else b"")

    cdef inline int64_t end_of(self, Event* e, int64_t start_ns, int64_t start_sub) except? -1:
        """The end of an X event (rounded once, from start and duration together), of an
        instant, or OPEN for a B/b event; start_ns not yet rounded."""
        cdef int64_t dur_ns = 0, dur_sub = 0, end_ns, total_sub
        if e.ph != b'X':
            return OPEN if (e.ph == b'B' or e.ph == b'b') else start_ns + (1 if start_sub >= 500000 else 0)
        if e.dur_kind == T_NUMBER:
            self.time_of(&e.dur, &dur_ns, &dur_sub, "dur")
            if dur_ns < 0:
                raise self.event_fail(f"negative duration {self.raw_number(&e.dur)}")
        elif e.dur_kind != T_MISSING and e.dur_kind != T_NULL:
            raise self.event_fail(f"'dur' is not a finite number: {e.dur_raw[:min(e.dur_len, 40)].decode('utf-8', 'replace')}")
        if dur_ns > 0 and start_ns > I64_MAX - dur_ns - 1:
            raise self.event_fail("'ts' + 'dur' out of range")
        # Round the end itself, not start and duration apart: a child that ends with
        # its parent must not end a nanosecond after it.
        total_sub = start_sub + dur_sub
        end_ns = start_ns + dur_ns + (1 if total_sub >= 1000000 else 0)
        total_sub = total_sub % 1000000
        return end_ns + (1 if total_sub >= 500000 else 0)

    cdef inline Py_ssize_t append_row(self, Event* e, int32_t t, int64_t start_ns, int64_t end_ns) except -1:
        """A row for an opening event (its strings coded); its index."""
        cdef int32_t name_code, cat_code, tn_code = -1
        cdef Py_ssize_t row
        name_code = self.string_code(self.names, e.name_text, e.name_len, e.name_esc) if e.name_text != NULL \
            else self.names.code(b"", 0)
        cat_code = self.string_code(self.categories, e.cat_text, e.cat_len, e.cat_esc) if e.cat_text != NULL else -1
        if e.tn_text != NULL:
            tn_code = self.string_code(self.thread_names, e.tn_text, e.tn_len, e.tn_esc)
        self.add_row()
        row = self.n
        self.thread[row] = t
        self.start[row] = start_ns
        self.end[row] = end_ns
        self.name[row] = name_code
        self.category[row] = cat_code
        self.rows_without_category += cat_code < 0
        self.set_thread_name(row, tn_code)
        self.span_id[row] = e.a_span_id
        self.parent_id[row] = e.a_parent
        self.depth[row] = <int32_t>e.a_depth
        self.arg[row] = e.a_arg
        self.set_rank(row, e.a_rank)
        self.flags[row] = e.flags
        self.open_rows += end_ns == OPEN
        self.rows_without_span_id += not (e.flags & F_SPAN_ID)
        self.n += 1
        return row

    cdef inline const char* assemble(self, Event* e, const char* p) except? NULL:
        """What a scanned event (ending at p) means: a row, the end of one, a thread
        name, or nothing."""
        cdef int64_t start_ns, start_sub, end_ns
        cdef int32_t t
        cdef Py_ssize_t row
        key = None
        self.event_end = p
        if self.no_span(e):
            return p
        self.start_and_ids(e, &start_ns, &start_sub)
        if e.ph == b'b' or e.ph == b'e' or e.ph == b'n':
            key = self.async_key(e)
            if e.ph == b'e':
                opened = self.async_open.get(key)
                if not opened:
                    self.count("async_end_without_begin")
                    return p
                row = opened.pop()
                if not opened:
                    del self.async_open[key]
                self.close_row(row, start_ns, start_sub, e.flags, e.a_arg, e.a_rank)
                return p
        t = self.thread_of(e.pk, e.pv, e.tk, e.tv)
        if e.ph == b'E':
            stack = <list>self.stacks[t]
            if not stack:
                self.count("E_without_B")
                return p
            self.close_row(stack.pop(), start_ns, start_sub, e.flags, e.a_arg, e.a_rank)
            return p
        end_ns = self.end_of(e, start_ns, start_sub)
        start_ns += 1 if start_sub >= 500000 else 0
        if end_ns != OPEN and end_ns < start_ns:
            end_ns = start_ns
        row = self.append_row(e, t, start_ns, end_ns)
        if e.ph == b'B':
            (<list>self.stacks[t]).append(row)
        elif e.ph == b'b':
            self.async_open.setdefault(key, []).append(row)
        return p

    cdef int close_row(self, Py_ssize_t row, int64_t ts, int64_t sub, uint8_t flags,
                       int64_t a_arg, int64_t a_rank) except -1:
        """An E (or e) event closes its row; its args add to the B's."""
        cdef int64_t end_ns = ts + (1 if sub >= 500000 else 0)
        if end_ns < self.start[row]:
            raise self.event_fail("an 'E' event earlier than its 'B'")
        self.end[row] = end_ns
        self.open_rows -= 1
        if flags & F_ARG:
            self.arg[row] = a_arg
            self.flags[row] |= F_ARG
        if flags & F_ERROR:
            self.flags[row] |= F_ERROR
        if a_rank != I32_MIN:
            self.set_rank(row, a_rank)
        return 0

    # ------------------------------------------------------------------ the document

    def feed(self, bytearray data, Py_ssize_t length, Py_ssize_t offset, bint eof):
        """Parse data[:length] (file offset ``offset``); returns the bytes consumed.

        data must have a NUL byte at data[length], and PAD bytes from there on (the reader
        loads 8 bytes at a time). At eof, what is left must complete the document (the
        array form may stop after any event: the format allows it).
        """
        if length < 0 or PyByteArray_GET_SIZE(data) < length + PAD_BYTES or data[length] != 0:
            raise ValueError(f"feed() needs a NUL after the data and {PAD_BYTES} bytes from it")
        return self.parse(PyByteArray_AS_STRING(data), length, offset, eof)

    def feed_text(self, MappedText text):
        """Parse a whole file's text (mapped, its NUL and padding after it); returns the
        bytes consumed (all, unless it raised). A file cut shorter while it was read is
        refused, whatever the parse made of the zeros it then read."""
        if text.base == NULL:
            raise ValueError("feed_text() of a closed MappedText")
        try:
            return self.parse(text.base, text.length, 0, True)
        finally:
            if text.cut:
                raise TraceFileError(self.path, f"the file got shorter than its {text.length:,} bytes while it was read (written meanwhile?)")

    cdef Py_ssize_t parse(self, const char* buf, Py_ssize_t length, Py_ssize_t offset, bint eof) except -1:
        self.buf = buf
        self.stop = self.buf + length
        self.offset = offset
        cdef const char* p = self.buf
        cdef const char* q
        if self.state == S_START and offset == 0 and length >= 3 and memcmp(p, b"\xef\xbb\xbf", 3) == 0:
            p += 3  # a UTF-8 byte order mark
        while True:
            p = self.ws(p)
            if p >= self.stop:
                break
            q = self.step(p)
            if q == NULL:
                break
            p = q
        if eof:
            self.end_of_file(p)
        return p - self.buf

    cdef inline const char* step(self, const char* p) except? NULL:
        """One step of the document at p (not a blank): the position after it, or NULL
        when the buffer ends first (p is then fed again)."""
        cdef uint8_t c = <uint8_t>p[0]
        if self.state == S_EVENT:
            return self.step_event(p)
        if self.state == S_EVENT_NEXT:
            if c == b',':
                self.state = S_EVENT
                return p + 1
            if c == b']':
                self.state = S_END if self.array_form else S_KEY_NEXT
                return p + 1
            raise self.unexpected(p, "',' or ']' after an event")
        if self.state == S_KEY:
            return self.step_key(p)
        if self.state == S_KEY_NEXT:
            if c == b',':
                self.state = S_KEY
                return p + 1
            if c == b'}':
                self.state = S_END
                return p + 1
            raise self.unexpected(p, "',' or '}'")
        if self.state == S_START:
            return self.step_start(p)
        raise self.unexpected(p, "nothing more after the end of the document")

    cdef inline const char* step_event(self, const char* p) except? NULL:
        """In the events array: an event, or the closing bracket of an empty one."""
        cdef const char* q
        cdef int kind
        if p[0] == b'{':
            q = self.parse_event(p)
            if q == NULL:
                return NULL
            self.events += 1
            self.state = S_EVENT_NEXT
            # The events that follow right away (",\n{"), without a step each: where
            # one is cut by the buffer's end, the next feed starts at its brace.
            while q[0] == b',':
                p = self.ws(q + 1)
                if p[0] != b'{':
                    break
                q = self.parse_event(p)
                if q == NULL:
                    self.state = S_EVENT
                    return p
                self.events += 1
            return q
        if p[0] == b']' and self.events == 0:
            self.state = S_END if self.array_form else S_KEY_NEXT
            return p + 1
        # Not an object: valid JSON (then the complaint is the type) or not.
        q = self.skip_value(p, &kind)
        if q == NULL:
            return NULL
        raise self.event_fail(f"not an object: {p[:min(q - p, 60)].decode('utf-8', 'replace')}")

    cdef const char* step_key(self, const char* p) except? NULL:
        """In the top-level object: a key and its value (the events array entered)."""
        cdef const char* k
        cdef const char* v
        cdef const char* q
        cdef Py_ssize_t klen
        cdef int kind
        if p[0] == b'}' and not self.top and not self.saw_events:
            self.state = S_END
            return p + 1
        v = self.member(p, &k, &klen)
        if v == NULL:
            return NULL
        if klen == 11 and memcmp(k, b"traceEvents", 11) == 0:
            if v[0] != b'[':
                raise TraceFileError(self.path, "'traceEvents' is not a list of events")
            self.saw_events = 1
            self.state = S_EVENT
            return v + 1
        q = self.skip_value(v, &kind)
        if q == NULL:
            return NULL  # p is still at the key: the next block starts there
        name = k[:klen].decode("utf-8", "replace")
        if name in ("otherData", "baseTimeNanoseconds", "viztracer_metadata", "distributedInfo"):
            self.top[name] = json.loads(v[:q - v])
        else:
            self.top[name] = True
        self.state = S_KEY_NEXT
        return q

    cdef const char* step_start(self, const char* p) except? NULL:
        """The document's first value: an object, or the array form."""
        cdef const char* q
        cdef int kind
        if p[0] == b'{':
            self.state = S_KEY
            return p + 1
        if p[0] == b'[':
            self.array_form = 1
            self.saw_events = 1
            self.state = S_EVENT
            return p + 1
        q = self.skip_value(p, &kind)
        if q == NULL:
            return NULL
        what = {T_STRING: "string (str)", T_NUMBER: "number", T_TRUE: "boolean", T_FALSE: "boolean",
                T_NULL: "null"}.get(kind, "value")
        raise TraceFileError(self.path, f"a JSON {what}, not a Chrome trace (an object or an array of events)")

    cdef int end_of_file(self, const char* p) except -1:
        cdef const char* rest
        if self.state == S_START:
            if self.ws(p) < self.stop:
                raise self.fail(p, "the file ends early (truncated?), and a bare value is not a Chrome trace")
            raise TraceFileError(self.path, "empty file, not a Chrome JSON trace")
        if self.state == S_END:
            if not self.saw_events:
                raise TraceFileError(self.path, "a JSON object without 'traceEvents', not a Chrome trace")
            return 0
        if self.array_form and self.state in (S_EVENT, S_EVENT_NEXT):
            # The array form may end without its bracket (tracers killed mid-run); an event
            # cut in the middle is dropped, and said so.
            rest = self.ws(p)
            if rest < self.stop:
                self.count("event_cut_at_end_of_file")
            return 0
        raise self.fail(self.stop, "the file ends early (truncated?)")


# =========================================================================== nesting


def nest(const int32_t[::1] thread, const int64_t[::1] start, const int64_t[::1] end,
         uint64_t[::1] parent_id, int32_t[::1] depth, uint8_t[::1] has_parent):
    """Parent (as its span id, row + 1) and depth of each row, rows in trace order.

    A span is the child of the innermost open span that contains it; one that starts
    exactly when another ends is its sibling; one that overlaps without being contained
    closes the spans it outlives (a viewer would not nest it either).
    """
    cdef Py_ssize_t n = thread.shape[0], i, top
    cdef Py_ssize_t* stack = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
    cdef Py_ssize_t size = 0
    cdef int32_t current = -1
    if stack == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                if thread[i] != current:
                    size = 0
                    current = thread[i]
                while size:
                    top = stack[size - 1]
                    if end[top] <= start[i] or end[top] < end[i]:
                        size -= 1
                    else:
                        break
                if size:
                    parent_id[i] = <uint64_t>(stack[size - 1] + 1)
                    has_parent[i] = 1
                depth[i] = <int32_t>size
                if end[i] > start[i]:
                    stack[size] = i
                    size += 1
    finally:
        free(stack)
