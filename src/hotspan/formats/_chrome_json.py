"""Chrome trace event format (JSON, object form), as Perfetto UI and chrome://tracing read it.

What the file holds:

* ``otherData``: the format marker, the absolute trace start (``hotspan.trace_start_ns``),
  the number of span events (``hotspan.spans``) and the table's schema metadata;
* ``M`` events naming each process (``rank N @ host``) and thread (the table's thread
  names); their args keep the real pid, rank and thread id, because the event ``pid``/``tid``
  must fit in uint32 for Perfetto and are renumbered when they do not;
* one ``X`` event a span, one ``i`` event (thread scope) an instant (``duration_ns == 0``),
  per thread in start order, parent before child, one a line. ``ts`` is rebased to the
  trace start so nanoseconds survive (microseconds, exact: at most three decimals, trailing
  zeros left out); ``cat`` is the category path; ``args`` carry ``span_id``, then
  ``parent_id``, ``depth``, ``arg`` and ``error`` only where they differ from their default
  (a root, depth 0, a null arg, no error), which a load reads their absence as (files
  written with every key, as before, load the same); and ``thread_name`` for the rare span
  whose thread was renamed mid-trace;
* a flow from each host span to its device row (``hotspan._devices.cuda``): ``bind_id``
  with ``flow_out`` on the host span's event, ``flow_in`` on the device row's (flow events
  v2, bound to the events themselves); a load makes no row of them.

The compiled codec (``_chrome_codec.pyx``) writes the event lines and reads every Chrome
trace, ours and foreign, with one streaming parser: over the whole file, mapped, when it
is 4 MiB or more (``MAP_FROM``), else over bounded blocks of it (and of a ``.json.gz`` as it
inflates). The writer takes the table's columns in any row order and sorts them into trace order itself
(the sort the Perfetto codec shares, ``_trace_order.pxd``). This module prepares the
writer's inputs (contiguous columns, dictionary codes, the thread and process tables) and
turns the reader's columns into the span table:

* our own files keep their ids, nesting and metadata;
* foreign files (VizTracer, torch.profiler, multi-rank tracers, hand-written ones: object
  or array form, gzip, ``X`` events, ``B``/``E`` pairs, instants, async ``b``/``e``
  events on a track ``async <cat>`` of their process, ``M`` thread names, ``args.rank``)
  get span ids 1, 2, ... in trace order and ``parent_id``/``depth`` from the nesting on
  each thread; ``start_ns`` is on the epoch when the file gives an anchor
  (``baseTimeNanoseconds`` of torch.profiler and VizTracer); ``hotspan.source`` in the
  metadata says which tool wrote the file;
* what a load leaves out (a ``B`` never closed, an ``E`` closing nothing, event lines cut
  out of our file, an event cut by the end of an array-form file) is counted in the
  metadata (``hotspan.skipped_on_load``) and said in a warning; a file with nothing but such
  events is refused.

``.json.gz`` is inflated block by block, at most ``HOTSPAN_MAX_INFLATED_BYTES`` bytes
(default 16 GiB; ``ChromeJsonExporter.read(path, max_inflated_bytes=...)`` too).
"""

from __future__ import annotations

import contextvars
import errno
import gzip
import io
import json
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa

from .._schema import META_HOST, TRACE_SCHEMA
from .._selftime import note_self_wait
from . import _chrome_codec as codec
from ._base import Exporter, Progress, TraceFileError, note_skipped, open_regular_file
from ._codec_inputs import (
    bool_values,
    column_values,
    dictionary_codes,
    nullable_values,
    thread_table,
    trace_flows,
)
from ._lanes import assign_lanes, restore_lanes

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "ChromeJsonExporter",
    "ChromeJsonGzExporter",
    "FORMAT_MARK",
    "MAX_INFLATED_BYTES",
    "MAP_FROM",
    "MAX_VALUE_BYTES",
    "META_SOURCE",
    "READ_BLOCK",
    "UINT32_MAX",
    "WRITE_BLOCK",
]

FORMAT_MARK = "hotspan-chrome-json/1"
UINT32_MAX = (1 << 32) - 1
_GZIP_MAGIC = b"\x1f\x8b"

#: Bytes of event lines the writer hands to the file at a time.
WRITE_BLOCK = 4 << 20
#: Bytes read a block: the reader holds one block (and the event cut at its end) at a time.
READ_BLOCK = 4 << 20
#: A file at least this large (not gzipped) is mapped and parsed where it lies: read() copied
#: each byte once more (7% of a load); smaller ones are read, a block at a time.
MAP_FROM = 4 << 20
#: The reader's columns start with room for (file size / this) rows (huge pages from
#: their start; growing from small ones took thousands of 4 KiB faults): our own events
#: take about 160 bytes, other tracers' more; more rows than that just grow the columns.
_BYTES_PER_EVENT = 100
_MAX_RESERVE = 1 << 24
#: The largest single value (an event, ``otherData``) the reader takes.
MAX_VALUE_BYTES = 256 << 20
#: Default bound on what a ``.json.gz`` may inflate to (env: HOTSPAN_MAX_INFLATED_BYTES).
MAX_INFLATED_BYTES = 16 << 30

_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("max_inflated_bytes")

META_SOURCE = b"hotspan.source"

_DROPPED_WORDS = {
    "B_without_E": "'B' event(s) never closed by an 'E'",
    "async_begin_without_end": "async 'b' event(s) never closed by an 'e'",
    "E_without_B": "'E' event(s) closing no 'B'",
    "async_end_without_begin": "async 'e' event(s) closing no 'b'",
    "event_cut_at_end_of_file": "event cut by the end of the file",
    "events_missing": "span event(s) missing from the file (lines cut out?)",
    "ph_unknown": "event(s) with a 'ph' the format does not have",
    "ph_not_string": "event(s) whose 'ph' is not a string",
    "ph_missing": "event(s) with no 'ph'",
}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _max_inflated_bytes(value: int | None) -> int:
    if value is not None:
        return int(value)
    text = os.environ.get("HOTSPAN_MAX_INFLATED_BYTES")
    if not text:
        return MAX_INFLATED_BYTES
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"HOTSPAN_MAX_INFLATED_BYTES={text!r} is not a number of bytes") from None


class ChromeJsonExporter(Exporter):
    keeps_row_order = False
    compress = False
    writes_counters = True

    # ------------------------------------------------------------------ write

    def _write(self, table: pa.Table, path: Path, counters: pa.Table | None = None) -> None:
        # the spans of asyncio tasks: their self and wait times, which no loader can compute
        table = note_self_wait(table)
        table, _ = assign_lanes(table)  # overlapping asyncio task trees on their own tracks
        layout = _Layout(table)
        # host span -> its device row; the ranks' spans of one collective, chained
        layout.flows = trace_flows(table, chain_in=True)
        layout.counters = counters
        if not layout.num_rows and counters is not None and counters.num_rows:
            # times are written from the trace's start: without spans, the first counter's
            # (from 0, epoch nanoseconds as microseconds would lose the last digits)
            import pyarrow.compute as pc

            layout.start_ns = int(pc.min(counters.column("time_ns")).as_py())
        # Unbuffered: the codec hands over WRITE_BLOCK bytes at a time, nothing to gather.
        with open(path, "wb", buffering=0) as raw:
            if self.compress:
                # mtime=0 and no file name (gzip would record the temporary file's, a random
                # one): the same table gives the same bytes.
                with gzip.GzipFile(
                    filename="", fileobj=raw, mode="wb", compresslevel=3, mtime=0
                ) as sink:
                    self._write_events(layout, sink, path)
            else:
                self._write_events(layout, raw, path, fd=raw.fileno())

    def _write_events(
        self, layout: _Layout, sink: BinaryIO | gzip.GzipFile, path: Path, fd: int | None = None
    ) -> None:
        """The header, the event lines and the tail to ``sink``; ``fd`` (the same unbuffered
        file's descriptor): the codec writes the lines there itself, and starts their
        writeback as it goes."""
        json_pid, json_tid = self._json_ids(layout)
        sink.write(self._header(layout, json_pid, json_tid).encode())
        thread_texts = [
            f',"pid":{int(json_pid[layout.thread_process[t]])},"tid":{int(json_tid[t])}'.encode()
            for t in range(layout.num_threads)
        ]
        name_texts = [f',"name":{_dumps(name)}'.encode() for name in layout.names]
        category_texts = [f',"cat":{_dumps(category)}'.encode() for category in layout.categories]
        thread_name_texts = [
            f',"thread_name":{_dumps(name)}'.encode() for name in layout.thread_names
        ]
        with Progress(layout.num_rows, f"writing {path.name}") as progress:
            codec.encode(
                sink if fd is None else fd,
                WRITE_BLOCK,
                layout.start,
                layout.duration,
                layout.depth,
                layout.span_id,
                layout.parent_id,
                layout.has_parent,
                layout.arg,
                layout.has_arg,
                layout.error,
                layout.thread,
                layout.name,
                layout.category,
                layout.row_thread_name,
                thread_texts,
                name_texts,
                category_texts,
                thread_name_texts,
                layout.start_ns,
                progress.advance,
                flow_out=None if layout.flows is None else layout.flows[0],
                flow_in=None if layout.flows is None else layout.flows[1],
                own_name=layout.thread_name,
            )
        if layout.counters is not None and layout.counters.num_rows:
            from ..counters import chrome_events

            by_process = {
                (int(layout.process_pid[p]), int(layout.process_rank[p])): int(json_pid[p])
                for p in range(layout.num_processes)
            }
            text, _skipped = chrome_events(layout.counters, layout.start_ns, by_process)
            # after no event at all (no spans: the header holds none), no separator first
            sink.write(text if layout.num_processes else text[1:])
        sink.write(b"\n]}\n")

    @staticmethod
    def _json_ids(layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
        """Event pid per process and tid per thread: the real ones when they fit in uint32
        (and pids are not shared by two ranks), else 1, 2, ..."""
        pids = layout.process_pid
        if len(pids) and (
            pids.min() >= 0 and pids.max() <= UINT32_MAX and len(np.unique(pids)) == len(pids)
        ):
            json_pid = pids.copy()
        else:
            json_pid = np.arange(1, len(pids) + 1, dtype=np.int64)
        tids = layout.thread_tid
        if len(tids) and tids.min() >= 0 and tids.max() <= UINT32_MAX:
            json_tid = tids.copy()
        else:
            json_tid = np.arange(1, len(tids) + 1, dtype=np.int64)
        return json_pid, json_tid

    @staticmethod
    def _header(layout: _Layout, json_pid: np.ndarray, json_tid: np.ndarray) -> str:
        other = {
            "hotspan.format": FORMAT_MARK,
            "hotspan.trace_start_ns": layout.start_ns,
            "hotspan.spans": layout.num_rows,
            "hotspan.metadata": {
                key.decode("utf-8", "backslashreplace"): value.decode("utf-8", "backslashreplace")
                for key, value in layout.metadata.items()
            },
        }
        events = []
        for process in range(layout.num_processes):
            pid = int(json_pid[process])
            rank = int(layout.process_rank[process])
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {
                        "name": layout.process_name(process),
                        "hotspan.pid": int(layout.process_pid[process]),
                        "hotspan.rank": rank,
                    },
                }
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": rank},
                }
            )
        for thread in range(layout.num_threads):
            pid = int(json_pid[layout.thread_process[thread]])
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": int(json_tid[thread]),
                    "args": {
                        "name": layout.thread_names[layout.thread_name[thread]],
                        "hotspan.thread_id": int(layout.thread_tid[thread]),
                    },
                }
            )
        head = _dumps({"displayTimeUnit": "ns", "otherData": other, "traceEvents": []})
        return head[:-2] + ",".join(_dumps(event) for event in events)

    # ------------------------------------------------------------------ read

    def read(
        self,
        path: str | os.PathLike[str],
        *,
        check: bool = True,
        max_inflated_bytes: int | None = None,
    ) -> pa.Table:
        """Read ``path``; a gzip file may inflate to at most ``max_inflated_bytes``
        (default: ``HOTSPAN_MAX_INFLATED_BYTES`` or 16 GiB). ``check`` as for every format."""
        # A context variable, not an attribute: the registry shares one exporter between
        # threads.
        token = _LIMIT.set(_max_inflated_bytes(max_inflated_bytes))
        try:
            return super().read(path, check=check)
        finally:
            _LIMIT.reset(token)

    def _read(self, path: Path) -> pa.Table:
        limit = _LIMIT.get()
        with open_regular_file(path) as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            size = os.fstat(raw.fileno()).st_size
            # room for the rows the file's size suggests (a gzip file's is not known)
            rows = 0 if gzipped else min(size // _BYTES_PER_EVENT, _MAX_RESERVE)
            reader = codec.Reader(path, rows)
            text = None
            if not gzipped and size >= MAP_FROM:
                try:
                    text = codec.MappedText(raw.fileno(), size)
                except OSError as exc:
                    if exc.errno != errno.EBUSY:  # EBUSY: too many at once, read instead
                        raise TraceFileError(path, f"cannot map it: {exc.strerror}") from exc
            if text is not None:
                try:
                    reader.feed_text(text)
                finally:
                    text.close()
            else:
                stream = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
                try:
                    _feed(reader, stream, path, limit if gzipped else None)
                except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                    raise TraceFileError(path, f"not a valid gzip stream: {exc}") from exc
                finally:
                    if gzipped:
                        stream.close()
        return restore_lanes(_assemble(reader, path))


class ChromeJsonGzExporter(ChromeJsonExporter):
    compress = True


def _feed(reader: codec.Reader, stream: io.BufferedIOBase, path: Path, limit: int | None) -> None:
    """The file to the reader in blocks; only the unconsumed tail (an event cut by the
    block's end) is carried over, so memory stays one block plus one event. The buffer keeps
    ``codec.PAD`` bytes after the data (a NUL first): the parser reads 8 bytes at a time."""
    buffer = bytearray(READ_BLOCK + codec.PAD)
    filled = 0  # bytes of data at the front of buffer
    offset = 0  # file (inflated) offset of buffer[0]
    total = 0
    while True:
        capacity = len(buffer) - codec.PAD
        if filled == capacity:
            if capacity >= MAX_VALUE_BYTES:
                raise TraceFileError(
                    path,
                    f"a single event or value over {MAX_VALUE_BYTES >> 20} MiB at byte {offset}",
                )
            buffer.extend(bytes(capacity))
            capacity = len(buffer) - codec.PAD
        with memoryview(buffer) as view:
            got = stream.readinto(view[filled:capacity])
        got = got or 0
        total += got
        if limit is not None and total > limit:
            raise TraceFileError(
                path,
                f"inflates to more than {limit:,} bytes; if this file is trusted, raise the limit "
                "(HOTSPAN_MAX_INFLATED_BYTES, or read(path, max_inflated_bytes=...))",
            )
        filled += got
        eof = got == 0
        buffer[filled] = 0  # the parser's sentinel
        used = reader.feed(buffer, filled, offset, eof)
        if eof:
            return
        if used:
            buffer[: filled - used] = buffer[used:filled]
            offset += used
            filled -= used


# --------------------------------------------------------------------------- the writer's inputs


class _Layout:
    """A span table as the writer takes it: contiguous columns, dictionary codes, the
    threads in trace order (by rank, pid, thread id) with each one's name (the one most of
    its rows carry, ties: the smaller code; rows with another keep it per span) and the
    processes (pid, rank). The rows stay in table order: the codec sorts them."""

    # per row, the flow that starts / ends at it (None: no flow): set by the writer
    # (trace_flows), not here
    flows: tuple[np.ndarray, np.ndarray] | None

    def __init__(self, table: pa.Table):
        self.num_rows = n = table.num_rows
        self.counters: pa.Table | None = None  # written after the spans ("ph":"C")
        self.metadata = dict(table.schema.metadata or {})
        self.host = self.metadata.get(META_HOST, b"").decode("utf-8", "replace")
        self.duration = column_values(table, "duration_ns", np.int64)
        self.start = column_values(table, "start_ns", np.int64)
        if n and self.duration.min() < 0:
            bad = int((self.duration < 0).sum())
            raise ValueError(f"{bad} span(s) have a negative duration_ns; a trace cannot show them")
        self.start_ns = int(self.start.min()) if n else 0
        self.depth = column_values(table, "depth", np.int32)
        self.span_id = column_values(table, "span_id", np.uint64)
        self.parent_id, self.has_parent = nullable_values(table, "parent_id", np.uint64)
        self.arg, self.has_arg = nullable_values(table, "arg", np.int64)
        self.error = bool_values(table, "error")
        self.name, self.names = dictionary_codes(table.column("name"))
        self.category, self.categories = dictionary_codes(table.column("category"))
        thread_name, self.thread_names = dictionary_codes(table.column("thread_name"))
        codes, keys, name_rows = codec.thread_codes(
            column_values(table, "pid", np.int64),
            column_values(table, "rank", np.int32),
            column_values(table, "thread_id", np.int64),
            thread_name,
        )
        self.thread, threads, self.thread_name = thread_table(codes, keys, name_rows)
        self.thread_pid = np.array([pid for pid, _, _ in threads], np.int64)
        self.thread_tid = np.array([tid for _, _, tid in threads], np.int64)
        processes = list(dict.fromkeys((pid, rank) for pid, rank, _ in threads))
        self.process_pid = np.array([pid for pid, _ in processes], np.int64)
        self.process_rank = np.array([rank for _, rank in processes], np.int64)
        process_index = {key: i for i, key in enumerate(processes)}
        self.thread_process = np.array(
            [process_index[(pid, rank)] for pid, rank, _ in threads], np.int32
        )
        # Per row its name code: the codec writes it only where it is not its thread's own.
        self.row_thread_name = thread_name

    def process_name(self, process: int) -> str:
        rank = int(self.process_rank[process])
        return f"rank {rank} @ {self.host}" if self.host else f"rank {rank}"

    @property
    def num_threads(self) -> int:
        return len(self.thread_pid)

    @property
    def num_processes(self) -> int:
        return len(self.process_pid)


# --------------------------------------------------------------------------- assembly


def _source(top: dict[str, Any], own: bool) -> str:
    if own:
        return "hotspan"
    if "viztracer_metadata" in top:
        return "viztracer"
    if (
        "baseTimeNanoseconds" in top
        or "deviceProperties" in top
        or "schemaVersion" in top
        or "distributedInfo" in top
    ):
        return "torch.profiler"
    return "chrome"


def _int(value: Any) -> int | None:
    return (
        value
        if isinstance(value, int)
        and not isinstance(value, bool)
        and -(1 << 63) <= value < (1 << 63)
        else None
    )


def _origin(top: dict[str, Any], other: Any, own: bool, path: Path) -> int:
    """What to add to the file's timestamps (in ns) to put them on the epoch."""
    if own:
        origin = _int(other.get("hotspan.trace_start_ns", 0))
        if origin is None:
            raise TraceFileError(path, "otherData['hotspan.trace_start_ns'] is not an integer")
        return origin
    # torch.profiler (2.4+): ts are microseconds since baseTimeNanoseconds, top level;
    # VizTracer: the same, in viztracer_metadata.
    base = top.get("baseTimeNanoseconds")
    if base is None and isinstance(top.get("viztracer_metadata"), dict):
        base = top["viztracer_metadata"].get("baseTimeNanoseconds")
    return _int(base) or 0


def _assemble(reader: codec.Reader, path: Path) -> pa.Table:
    reader.finish()
    n = reader.n
    top = reader.top
    other: Any = top.get("otherData")  # any JSON value; a dict when `own`
    own = isinstance(other, dict) and other.get("hotspan.format") == FORMAT_MARK
    counts: dict[str, int] = dict(reader.counts)

    def column(col: codec.Column, dtype: npt.DTypeLike) -> np.ndarray:
        return np.frombuffer(col.data, dtype, n)

    thread = column(reader.c_thread, np.int32)
    start = column(reader.c_start, np.int64)
    end = column(reader.c_end, np.int64)
    flags = column(reader.c_flags, np.uint8)
    threads = _Threads(reader, path, own)
    threads.origin = _origin(top, other, own, path)
    info = top.get("distributedInfo")
    if (
        isinstance(info, dict)
        and _int(info.get("rank")) is not None
        and -(1 << 31) <= info["rank"] < (1 << 31)
    ):
        threads.default_rank = info["rank"]  # torch.profiler of a distributed job

    # Rows still open: a B never closed by its E (a tracer killed mid-span), an async b
    # never ended. They have no duration: dropped, and counted.
    keep = None
    if reader.open_rows:  # counted by the reader: most files have none, and no scan
        open_rows = end == np.iinfo(np.int64).min
        async_thread = np.array(
            [threads.is_async(t) for t in range(len(threads.keys))] or [False], bool
        )
        is_async = async_thread[thread] & open_rows
        if is_async.any():
            counts["async_begin_without_end"] = int(is_async.sum())
        if (open_rows & ~is_async).any():
            counts["B_without_E"] = int((open_rows & ~is_async).sum())
        keep = np.flatnonzero(~open_rows)
    if own:
        expected = _int(other.get("hotspan.spans"))
        if expected is not None and expected > n:
            counts["events_missing"] = expected - n

    if own:
        order = keep
    else:
        # Trace order: thread (by pid, tid), start, longer first (a parent before a child
        # that starts with it), then file order (B/E pairs were collected at their B).
        rank_of_thread = threads.trace_rank()
        rows = keep if keep is not None else slice(None)
        keys_thread = rank_of_thread[thread[rows]] if len(rank_of_thread) else thread[rows]
        order = np.lexsort((-end[rows], start[rows], keys_thread))
        if keep is not None:
            order = keep[order]

    def take(values: np.ndarray) -> np.ndarray:
        return values if order is None else values[order]

    thread, start, end, flags = take(thread), take(start), take(end), take(flags)
    m = len(thread)
    if m == 0 and any(counts.values()):  # counts are >= 0
        raise TraceFileError(path, "no complete span in the file: " + _describe(counts))

    if own:
        if reader.first_bad is not None:
            index, problem = reader.first_bad
            raise TraceFileError(path, f"event {index}: {problem}")
        if reader.rows_without_span_id and m and not (flags & codec.FLAG_SPAN_ID).all():
            raise TraceFileError(path, "an event without a valid args.span_id in a hotspan trace")
        span_id = take(column(reader.c_span_id, np.uint64))
        parent_id = take(column(reader.c_parent_id, np.uint64))
        depth = take(column(reader.c_depth, np.int32))
    else:
        span_id = np.arange(1, m + 1, dtype=np.uint64)
        parent_id = np.zeros(m, np.uint64)
        depth = np.zeros(m, np.int32)
        has_parent = np.zeros(m, np.uint8)
        codec.nest(thread, start, end, parent_id, depth, has_parent)
        flags = (flags & ~np.uint8(codec.FLAG_PARENT)) | has_parent * np.uint8(codec.FLAG_PARENT)
    duration = np.subtract(end, start, out=_fresh(m, np.int64))
    per_thread = _PerThread(thread)
    # In place: the reader's columns (or the copies take() made) are not read again.
    start_ns, end_ns = start, end
    if threads.origin:
        start_ns += threads.origin
        end_ns += threads.origin
    rank = threads.rank(
        per_thread, take(column(reader.c_rank, np.int32)) if reader.rank_live else None
    )
    # A span's own thread name (a thread renamed mid-trace) or its thread's.
    if m and not reader.thread_name_live:  # no span renamed: each its thread's name
        thread_name_codes = per_thread(threads.name_code)
    elif m:
        known = threads.name_codes
        remap = np.array(
            [known.setdefault(name, len(known)) for name in reader.thread_names.values] or [0],
            np.int32,
        )
        renamed = take(column(reader.c_thread_name, np.int32))
        thread_name_codes = np.where(
            renamed >= 0, remap[np.maximum(renamed, 0)], threads.name_code[thread]
        )
    else:
        thread_name_codes = np.empty(0, np.int32)

    def bits(mask: int) -> pa.Buffer:
        return pa.py_buffer(np.packbits(flags & mask, bitorder="little"))  # nonzero: 1

    def dictionary(
        codes: np.ndarray, values: list[str], nullable: bool = False
    ) -> pa.DictionaryArray:
        # The codes as they are (no copy; a null: -1 under a clear validity bit), and not
        # checked again: each is a string's index in the reader's table by construction.
        # ``nullable``: the reader saw rows without one (it counts them).
        validity = (
            pa.py_buffer(np.packbits(codes >= 0, bitorder="little"))
            if nullable and m and (codes < 0).any()
            else None
        )
        indices = pa.Array.from_buffers(
            pa.int32(), m, [validity, pa.py_buffer(np.ascontiguousarray(codes, np.int32))]
        )
        return pa.DictionaryArray.from_arrays(indices, pa.array(values, pa.string()), safe=False)

    columns = [
        pa.Array.from_buffers(pa.uint64(), m, [None, pa.py_buffer(span_id)]),
        pa.Array.from_buffers(pa.uint64(), m, [bits(codec.FLAG_PARENT), pa.py_buffer(parent_id)]),
        dictionary(take(column(reader.c_name, np.int32)), reader.names.values),
        dictionary(
            take(column(reader.c_category, np.int32)),
            reader.categories.values,
            nullable=reader.rows_without_category > 0,
        ),
        pa.array(start_ns, pa.int64()),
        pa.array(end_ns, pa.int64()),
        pa.array(duration, pa.int64()),
        pa.array(depth, pa.int32()),
        pa.array(per_thread(threads.tid), pa.int64()),
        dictionary(thread_name_codes, list(threads.name_codes)),
        pa.array(per_thread(threads.pid), pa.int64()),
        pa.array(rank, pa.int32()),
        pa.Array.from_buffers(
            pa.int64(),
            m,
            [bits(codec.FLAG_ARG), pa.py_buffer(take(column(reader.c_arg, np.int64)))],
        ),
        pa.Array.from_buffers(pa.bool_(), m, [None, bits(codec.FLAG_ERROR)]),
    ]
    metadata = _metadata_from(other) if own else {}
    if not own:
        metadata[META_SOURCE] = _source(top, own).encode()
    # self_ns comes in conform_to_schema (Exporter.read), once the lanes are the real threads again
    table = pa.Table.from_arrays(columns, schema=TRACE_SCHEMA.with_metadata(metadata or None))
    # The one way a loader says what it left out: a warning, and the counts in the metadata.
    return note_skipped(
        table, path, {_DROPPED_WORDS.get(cause, cause): n for cause, n in counts.items()}
    )


def _fresh(n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """An uninitialised array in pages of its own (huge ones: codec.fresh_column): a
    column of the table, filled once."""
    kind = np.dtype(dtype)
    return np.frombuffer(codec.fresh_column(n, kind.itemsize).data, kind, n)


class _PerThread:
    """Columns of one value per thread (its id, pid, rank, name), each row its thread's.
    Rows come a thread at a time (trace order): each run is filled at memset speed, where
    a gather would look every row up; rows in many short runs are gathered."""

    def __init__(self, thread: np.ndarray):
        self.thread = thread
        m = len(thread)
        starts = np.flatnonzero(thread[1:] != thread[:-1]) + 1 if m else thread[:0]
        self.runs: list[tuple[int, int, int]] | None = None
        if len(starts) < m // 64:
            bounds = [0, *starts.tolist(), m]
            self.runs = [(a, b, int(thread[a])) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

    def __call__(self, values: np.ndarray) -> np.ndarray:
        out = _fresh(len(self.thread), values.dtype)
        if self.runs is None:
            np.take(values, self.thread, out=out, mode="clip")  # codes < len(values)
        else:
            for a, b, t in self.runs:
                out[a:b] = values[t]
        return out


def _describe(counts: dict[str, int]) -> str:
    return "; ".join(
        f"{count:,} {_DROPPED_WORDS.get(cause, cause)}" for cause, count in counts.items() if count
    )


def _metadata_from(other: Any) -> dict[bytes, bytes]:
    metadata = other.get("hotspan.metadata") if isinstance(other, dict) else None
    if not isinstance(metadata, dict):
        return {}
    return {
        str(key).encode(): (value if isinstance(value, str) else _dumps(value)).encode()
        for key, value in metadata.items()
    }


class _Threads:
    """The reader's threads (keyed by the events' pid and tid) as the table's pid, thread
    id, rank and thread name, from the ``M`` events."""

    def __init__(self, reader: codec.Reader, path: Path, own: bool):
        self.path = path
        self.keys: list[tuple[Any, ...]] = reader.thread_keys
        ids = reader.ids.values
        declared_names: dict[tuple[Any, ...], str] = {}
        processes: dict[tuple[Any, ...], tuple[int, int]] = {}
        declared_ids: dict[tuple[Any, ...], int] = {}
        for index, raw in reader.metadata_events:
            event = json.loads(raw)
            args = event.get("args")
            if not isinstance(args, dict):
                continue
            pid = self._ident(reader, event.get("pid"), "pid", index)
            tid = self._ident(reader, event.get("tid"), "tid", index)
            if event.get("name") == "thread_name" and isinstance(args.get("name"), str):
                declared_names[pid + tid] = args["name"]
                if own and _int(args.get("hotspan.thread_id")) is not None:
                    declared_ids[pid + tid] = args["hotspan.thread_id"]
            elif event.get("name") == "process_name" and own:
                real_pid, real_rank = _int(args.get("hotspan.pid")), _int(args.get("hotspan.rank"))
                if real_pid is not None and real_rank is not None:
                    processes[pid] = (real_pid, real_rank)
        ids = reader.ids.values  # the M events may have added strings

        def numeric(kind: int, value: int) -> int:
            # A string pid/tid (some tools write names there): a stable number above uint32.
            return UINT32_MAX + 1 + value if kind == 1 else value

        self.pid = np.array([numeric(k[0], k[1]) for k in self.keys] or [0], np.int64)
        self.tid = np.array([numeric(k[2], k[3]) for k in self.keys] or [0], np.int64)
        name_codes: dict[str, int] = {}
        codes = []
        for key in self.keys:
            name = declared_names.get(key)
            if name is None:
                name = ids[key[3]] if key[2] == 1 else f"thread {key[3]}"
            codes.append(name_codes.setdefault(name, len(name_codes)))
        self.name_codes = name_codes
        self.name_code = np.array(codes or [0], np.int32)
        self.thread_rank = None
        self.own = own
        if own:
            tids, ranks, pids = [], [], []
            for key in self.keys:
                real = processes.get(key[:2])
                if real is None or key not in declared_ids:
                    shown = tuple(ids[v] if k == 1 else v for k, v in (key[:2], key[2:]))
                    raise TraceFileError(
                        path, f"thread {shown} is not declared by the file's 'M' events"
                    )
                pids.append(real[0])
                ranks.append(real[1])
                tids.append(declared_ids[key])
            if self.keys:
                self.pid = np.array(pids, np.int64)
                self.tid = np.array(tids, np.int64)
                self.thread_rank = np.array(ranks, np.int32)
        self.async_ids = reader.async_tracks
        self.origin = 0
        self.default_rank = 0

    @staticmethod
    def _ident(reader: codec.Reader, value: Any, what: str, index: int) -> tuple[int, int]:
        if value is None:
            return (0, 0)
        if isinstance(value, str):
            return (1, reader.ids.code_of(value))
        if _int(value) is None:
            raise TraceFileError(
                reader.path, f"event {index}: {what} is neither an integer nor a string"
            )
        return (0, value)

    def is_async(self, t: int) -> bool:
        return self.keys[t][2] == 1 and self.keys[t][3] in self.async_ids

    def trace_rank(self) -> np.ndarray:
        """Per thread, its place in trace order (by pid, then tid)."""
        if not self.keys:
            return np.empty(0, np.int32)
        order = np.lexsort((self.tid[: len(self.keys)], self.pid[: len(self.keys)]))
        rank = np.empty(len(order), np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        return rank

    def rank(self, per_thread: _PerThread, parsed: np.ndarray | None) -> np.ndarray:
        """Each row's rank: its thread's (ours), else its own arg's (``parsed``, I32_MIN or
        ``None``: none) or the file's."""
        if self.thread_rank is not None:
            return per_thread(self.thread_rank)
        if parsed is None:
            return np.full(len(per_thread.thread), self.default_rank, np.int32)
        return np.where(
            parsed == np.iinfo(np.int32).min, np.int32(self.default_rank), parsed
        ).astype(np.int32)
