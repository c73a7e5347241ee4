"""The raw log of a live run: the spans of ``record(dir)`` as the native drain thread wrote
them, read back as span tables.

While ``record(dir)`` runs, the drain thread (C, never the interpreter lock) appends every
thread's 32-byte records to ``DIR/_live/part-r<R>-<pid>-<token>.hsraw`` as it moves them out
of the rings, with the string table's and thread names' deltas and the clock
(csrc/hs_rawlog.h has the layout). ``stop()`` and ``hotspan compact`` turn such a file into
Parquet parts (:func:`convert`) and remove it; until then ``hotspan.load(DIR)`` reads it
here (:func:`read`), and so does any reader after a SIGKILL, up to the last whole frame.

A frame that is cut short or whose checksum differs ends the readable part of the file (a
write the kill interrupted, or damage): what follows it is not read, and what was left out is
said in the table's metadata (``hotspan.skipped_on_load``), as every reader of hotspan's
files does.

Spans read here have ``wait_ns`` 0 and ``self_ns`` by the rule for sync code (the duration
less the union of the children's intervals: ``_selftime``), as a recovered flight file's.
"""

from __future__ import annotations

import mmap
import os
import re
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    import numpy as np
    import pyarrow as pa

__all__ = ["LIVE_DIR", "RawFile", "RawLogError", "convert", "raw_name", "read", "tables"]

#: Where a run directory keeps its raw logs: a ``_``-prefixed folder, which pyarrow.dataset,
#: pandas, polars, DuckDB's ``*.parquet`` globs and Spark leave alone.
LIVE_DIR = "_live"
SUFFIX = ".hsraw"
RAW_RE = re.compile(r"^part-r(-?\d+)-(\d+)-([0-9a-f]+)\.hsraw$")

MAGIC = b"HSRAWLOG"
FORMAT = 1
_HEADER = struct.Struct("<8sIIqiiQ32s")  # hs_rawlog_header
_FRAME = struct.Struct("<IIQQQQQ")  # hs_rawlog_frame
_FRAME_MAGIC = 0x46525348
_SUM_K = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1
RECORDS, STRING, PAIR, THREAD, CLOCK, END = 1, 2, 3, 4, 5, 6
# csrc/hs_ring.h
_F_ERROR, _F_ARG, _F_EXT, _F_COUNTER = 1, 2, 8, 64

#: Rows a converted Parquet part holds at most (stop() and compact convert a raw log in
#: pieces of this many spans: memory stays bounded whatever the run's length).
PART_ROWS = 4 << 20


class RawLogError(ValueError):
    """Not a raw log of this version (the header)."""


def raw_name(rank: int, pid: int, token: str) -> str:
    """The raw log's path relative to the run directory."""
    return f"{LIVE_DIR}/part-r{int(rank)}-{int(pid)}-{token}{SUFFIX}"


def _sum(words_head: tuple[int, ...], payload: "np.ndarray | None") -> int:
    """The frame checksum (csrc/hs_rawlog.h): over the header's first five words and the
    payload's words."""
    a = b = 0
    for w in words_head:
        a = (a + w) & _M64
        b = (b + a) & _M64
    if payload is not None and len(payload):
        import numpy as np

        with np.errstate(over="ignore"):
            run = np.cumsum(payload, dtype=np.uint64)
            n = len(payload)
            b = (b + n * a + int(run.sum(dtype=np.uint64))) & _M64
            a = (a + int(run[-1])) & _M64
    return (a + _SUM_K * b) & _M64


class RawFile:
    """One raw log, parsed up to its last whole frame: the header, the string and pair
    tables, thread names, clock segments, and where each thread's records are."""

    def __init__(self, path: str | os.PathLike):
        import numpy as np

        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size:
                raise RawLogError(f"{self.path}: not a raw log ({size} bytes, no header)")
            self.mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        magic, fmt, hbytes, pid, rank, clock_source, id_base, version = _HEADER.unpack_from(
            self.mm, 0
        )
        if magic != MAGIC:
            raise RawLogError(f"{self.path}: not a raw log (magic {magic!r})")
        if fmt != FORMAT or hbytes != _HEADER.size:
            raise RawLogError(f"{self.path}: raw log format {fmt} (this hotspan reads {FORMAT})")
        self.pid, self.rank, self.clock_source, self.id_base = pid, rank, clock_source, id_base
        self.version = version.rstrip(b"\0").decode(errors="replace")
        self.strings: dict[int, str] = {0: ""}
        self.pairs: dict[int, tuple[int, int]] = {}
        self.thread_names: dict[int, str] = {}
        self.clocks: list[tuple[int, int, float]] = []
        #: (payload offset, tid, base id, slots, clock index)
        self.records: list[tuple[int, int, int, int, int]] = []
        self.end: dict[str, int] | None = None
        #: Why reading stopped before the file's end (None: every byte read)
        self.cut: str | None = None
        self.cut_at = size
        at = _HEADER.size
        mm = self.mm
        while at < size:
            if at + _FRAME.size > size:
                self.cut = f"a frame cut short at byte {at:,}"
                break
            magic, kind, nbytes, a, b, c, total = _FRAME.unpack_from(mm, at)
            padded = (nbytes + 7) & ~7
            if magic != _FRAME_MAGIC or at + _FRAME.size + padded > size:
                self.cut = (
                    f"a frame cut short at byte {at:,}"
                    if magic == _FRAME_MAGIC
                    else f"damage at byte {at:,} (no frame there)"
                )
                break
            body = at + _FRAME.size
            payload = (
                np.frombuffer(mm, dtype=np.uint64, count=padded // 8, offset=body)
                if padded
                else None
            )
            head = struct.unpack_from("<5Q", mm, at)
            if _sum(head, payload) != total:
                self.cut = f"damage at byte {at:,} (a frame whose checksum differs)"
                break
            if kind == RECORDS:
                self.records.append((body, a, b, c, len(self.clocks) - 1))
            elif kind == STRING:
                self.strings[a] = bytes(mm[body : body + nbytes]).decode(errors="replace")
            elif kind == PAIR:
                self.pairs[a] = (b, c)
            elif kind == THREAD:
                self.thread_names[a] = bytes(mm[body : body + nbytes]).decode(errors="replace")
            elif kind == CLOCK:
                t0, n0, npt = struct.unpack_from("<Qqd", mm, body)
                self.clocks.append((t0, n0, npt))
            elif kind == END:
                self.end = {"spans": a, "dropped": b}
            at = body + padded
        if self.cut is not None:
            self.cut_at = at

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:  # a numpy view still alive: the GC closes it
            pass

    @property
    def slots(self) -> int:
        return sum(r[3] for r in self.records)

    def chunks(self, max_rows: int = PART_ROWS) -> "Iterator[list[tuple[int, int, int, int, int]]]":
        """The record frames in groups of about ``max_rows`` slots (whole frames)."""
        group: list[tuple[int, int, int, int, int]] = []
        rows = 0
        for frame in self.records:
            group.append(frame)
            rows += frame[3]
            if rows >= max_rows:
                yield group
                group, rows = [], 0
        if group:
            yield group


def _decode(raw: RawFile, frames: list[tuple[int, int, int, int, int]]) -> dict[str, Any]:
    """The spans of ``frames`` as numpy columns (the records' layout: csrc/hs_ring.h; the
    same arithmetic as a flight file's blocks, recording/flight.py, across frames)."""
    import numpy as np

    counts = np.array([f[3] for f in frames], np.int64)
    recs = np.concatenate(
        [np.frombuffer(raw.mm, np.uint64, count=4 * f[3], offset=f[0]) for f in frames]
    ).reshape(-1, 4)
    frame_of = np.repeat(np.arange(len(frames)), counts)
    w0, w1 = recs[:, 2], recs[:, 3]
    flags = (w0 >> np.uint64(56)).astype(np.uint32)
    n = len(recs)
    ext_flag = (flags & _F_EXT) != 0
    is_ext_data = np.zeros(n, dtype=bool)
    if ext_flag.any():
        idx = np.arange(n)
        last_clear = np.maximum.accumulate(np.where(ext_flag, -1, idx))
        run = np.where(ext_flag, idx - last_clear, 0)
        is_ext_data[1:] = (run[:-1] % 2) == 1
    ext_primary = ext_flag & ~is_ext_data
    prim = np.flatnonzero(~is_ext_data & ((flags & np.uint32(_F_COUNTER)) == 0))
    fr = frame_of[prim]
    low = (w1[prim] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    base = np.array([f[2] for f in frames], np.uint64)
    first = np.ones(len(prim), bool)
    first[1:] = fr[1:] != fr[:-1]
    prev_low = np.empty_like(low)
    prev_low[1:] = low[:-1]
    prev_low[first] = (base[fr[first]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    delta = (low - prev_low).astype(np.int32).astype(np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        cum = np.cumsum(delta, dtype=np.uint64)
        first_row = np.maximum.accumulate(np.where(first, np.arange(len(prim)), 0))
        before = cum[first_row] - delta[first_row]
        seq = base[fr] + (cum - before)
        ext_row = ext_primary[prim]
        ext_rows = np.flatnonzero(ext_row)
        if len(ext_rows):
            full = recs[prim[ext_rows] + 1, 0]
            last = np.maximum.accumulate(np.where(ext_row, np.arange(len(prim)), -1))
            anchored = last >= first_row  # an extension earlier in the same frame
            which = np.searchsorted(ext_rows, last[anchored])
            seq[anchored] = full[which] + (cum[anchored] - cum[last[anchored]])
        pdelta = (w1[prim] >> np.uint64(32)) & np.uint64(0xFFFFFF)
        depth = (w1[prim] >> np.uint64(56)).astype(np.int64)
        dur = w0[prim] & np.uint64((1 << 40) - 1)
        pair = ((w0[prim] >> np.uint64(40)) & np.uint64(0xFFFF)).astype(np.int64)
        parent = seq - pdelta
        has_parent = pdelta != 0
        if len(ext_rows):
            x = recs[prim[ext_rows] + 1]
            parent[ext_rows] = x[:, 1] - np.uint64(1)
            has_parent[ext_rows] = x[:, 1] != 0
            dur[ext_rows] = x[:, 2]
            depth[ext_rows] = (x[:, 3] & np.uint64(0xFFFFFFFF)).astype(np.int64)
            pair[ext_rows] = (x[:, 3] >> np.uint64(32)).astype(np.int64)
    start_ns, end_ns = _convert(raw, frames, fr, recs[prim, 0], dur)
    fl = flags[prim]
    return {
        "span_id": seq,
        "parent_id": parent,
        "has_parent": has_parent,
        "pair": pair,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "depth": depth,
        "arg": recs[prim, 1].view(np.int64),
        "has_arg": (fl & _F_ARG) != 0,
        "error": (fl & _F_ERROR) != 0,
        "thread_id": np.array([f[1] for f in frames], np.int64)[fr],
    }


def _convert(raw: RawFile, frames, fr, ticks, dur):
    """Ticks -> epoch ns as drain() converts them (csrc/hs_clock.h hs_clock_convert): with
    the clock segment that holds the tick, among those written before the frame (segments
    only ever follow on from each other), truncated toward zero."""
    import numpy as np

    start = np.empty(len(ticks), np.int64)
    end = np.empty(len(ticks), np.int64)
    if not raw.clocks:  # no clock written (cannot happen but for a damaged file): raw ticks
        start[:] = ticks.view(np.int64)
        return start, start + dur.view(np.int64)
    t0s = np.array([c[0] for c in raw.clocks], np.uint64)
    n0s = np.array([c[1] for c in raw.clocks], np.int64)
    npts = np.array([c[2] for c in raw.clocks], np.float64)
    clock_of = np.maximum(np.array([f[4] for f in frames], np.int64)[fr], 0)
    with np.errstate(over="ignore"):
        ends = ticks + dur
        for k in np.unique(clock_of):
            rows = np.flatnonzero(clock_of == k)
            for out, t in ((start, ticks[rows]), (end, ends[rows])):
                seg = np.maximum(np.searchsorted(t0s[: k + 1], t, side="right") - 1, 0)
                d = (t - t0s[seg]).view(np.int64)
                exact = npts[seg] == 1.0
                out[rows] = n0s[seg] + np.where(
                    exact, d, (d.astype(np.float64) * npts[seg]).astype(np.int64)
                )
    return start, end


def _table(raw: RawFile, cols: dict[str, Any], metadata: dict[bytes, bytes]) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    n = len(cols["span_id"])
    uniq, inverse = np.unique(cols["pair"], return_inverse=True)
    names, paths = [], []
    for p in uniq.tolist():
        name_id, path_id = raw.pairs.get(p, (None, None))
        names.append(raw.strings.get(name_id, f"<unknown span {p}>") if name_id else "")
        paths.append(raw.strings.get(path_id) if path_id else None)
    index = inverse.astype(np.int32).reshape(-1)
    tids = cols["thread_id"]
    tid_values = np.unique(tids)
    start, end = cols["start_ns"], cols["end_ns"]
    return pa.table(
        {
            "span_id": pa.array(cols["span_id"], pa.uint64()),
            "parent_id": pa.array(cols["parent_id"], pa.uint64(), mask=~cols["has_parent"]),
            "name": pa.DictionaryArray.from_arrays(pa.array(index), pa.array(names, pa.string())),
            "category": pa.DictionaryArray.from_arrays(
                pa.array(index), pa.array(paths, pa.string())
            ),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "duration_ns": pa.array(end - start, pa.int64()),
            "depth": pa.array(cols["depth"].astype(np.int32), pa.int32()),
            "thread_id": pa.array(tids, pa.int64()),
            "thread_name": pa.DictionaryArray.from_arrays(
                pa.array(np.searchsorted(tid_values, tids).astype(np.int32)),
                pa.array(
                    [raw.thread_names.get(int(t), f"Thread-{int(t)}") for t in tid_values],
                    pa.string(),
                ),
            ),
            "pid": pa.array(np.full(n, raw.pid, np.int64), pa.int64()),
            "rank": pa.array(np.full(n, raw.rank, np.int32), pa.int32()),
            "arg": pa.array(cols["arg"], pa.int64(), mask=~cols["has_arg"]),
            "error": pa.array(cols["error"], pa.bool_()),
        }
    ).replace_schema_metadata(metadata)


def tables(
    path: str | os.PathLike,
    metadata: dict[bytes, bytes] | None = None,
    *,
    max_rows: int = PART_ROWS,
) -> "Iterator[pa.Table]":
    """The raw log's spans as span tables (``SPAN_SCHEMA``, ``metadata`` on each) of about
    ``max_rows`` spans each, in the order they were written. ``self_ns`` of a span whose
    children are in an earlier piece counts them (a carried row per such parent)."""
    import numpy as np
    import pyarrow as pa

    from .._schema import SPAN_SCHEMA
    from .._selftime import self_ns_column
    from ..formats.base import note_skipped

    raw = RawFile(path)
    meta = dict(metadata or {})
    try:
        carry: pa.Table | None = None  # children of spans not read yet (see _carried)
        produced = False
        for frames in raw.chunks(max_rows):
            table = _table(raw, _decode(raw, frames), {})
            narrow = table.select(_SELF_KEYS)
            both = pa.concat_tables([carry, narrow]) if carry is not None else narrow
            self_ns = self_ns_column(both).slice(both.num_rows - table.num_rows)
            table = table.append_column("self_ns", self_ns).append_column(
                "wait_ns", pa.array(np.zeros(table.num_rows, np.int64))
            )
            carry = _carried(both)
            out = table.cast(SPAN_SCHEMA).replace_schema_metadata(meta)
            if raw.cut is not None:
                out = note_skipped(out, raw.path, {f"the rest of the raw log ({raw.cut})": 1})
            produced = True
            yield out
        if not produced:
            out = SPAN_SCHEMA.empty_table().replace_schema_metadata(meta)
            yield out
    finally:
        raw.close()


_SELF_KEYS = ["span_id", "parent_id", "start_ns", "end_ns", "thread_id", "pid"]


def _carried(table: pa.Table) -> pa.Table | None:
    """What a later piece needs of ``table`` to compute self time: its rows whose parent is
    not in it (a parent's record comes after its children's), one row per such parent that
    covers as much as they do (their union, from their earliest start: inside the parent,
    before its later children), so what is carried stays one row per open span."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from .._selftime import self_ns_column

    if table.num_rows == 0:
        return None
    known = pc.is_in(table.column("parent_id"), value_set=table.column("span_id"))
    orphans = table.filter(pc.and_(pc.is_valid(table.column("parent_id")), pc.invert(known)))
    if orphans.num_rows == 0:
        return None
    groups = orphans.group_by("parent_id").aggregate(
        [("start_ns", "min"), ("end_ns", "max"), ("thread_id", "min"), ("pid", "min")]
    )
    if groups.num_rows * 2 > orphans.num_rows:
        return orphans
    n = groups.num_rows
    first = groups.column("start_ns_min")
    parents = pa.table(
        {
            "span_id": groups.column("parent_id"),
            "parent_id": pa.nulls(n, pa.uint64()),
            "start_ns": first,
            "end_ns": groups.column("end_ns_max"),
            "thread_id": groups.column("thread_id_min"),
            "pid": groups.column("pid_min"),
        }
    ).cast(orphans.schema)
    own = self_ns_column(pa.concat_tables([parents, orphans])).slice(0, n).to_numpy()
    start = first.to_numpy()
    union = groups.column("end_ns_max").to_numpy() - start - own
    return pa.table(
        {
            # ids no span has (a process's ids are its random base plus a count)
            "span_id": pa.array(np.uint64((1 << 64) - 2) - np.arange(n, dtype=np.uint64)),
            "parent_id": groups.column("parent_id"),
            "start_ns": first,
            "end_ns": pa.array(start + union),
            "thread_id": groups.column("thread_id_min"),
            "pid": groups.column("pid_min"),
        }
    ).cast(orphans.schema)


def read(path: str | os.PathLike, metadata: dict[bytes, bytes] | None = None) -> pa.Table:
    """The raw log's spans as one table (see :func:`tables`)."""
    import pyarrow as pa

    parts = list(tables(path, metadata))
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts).unify_dictionaries()


def convert(
    path: str | os.PathLike,
    write: "Any",
    metadata: dict[bytes, bytes] | None = None,
) -> int:
    """Hand the raw log's spans to ``write(table)`` a piece at a time (a Parquet part each:
    the caller's); returns the spans. The caller removes the file once every piece is
    written."""
    spans = 0
    for table in tables(path, metadata):
        if table.num_rows:
            write(table)
            spans += table.num_rows
    return spans
