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

``self_ns`` and ``wait_ns`` are drain()'s: the records are decoded in C through the same
kernel drain() uses (csrc/hs_selftime.c), thread by thread in the order the spans closed, with
each thread's open spans' children carried from piece to piece, and the wait time of the
spans of asyncio tasks from the log's waits frames (what the event loop's hook noted).
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

__all__ = [
    "LIVE_DIR",
    "PART_ROWS",
    "RAW_RE",
    "RawFile",
    "RawLogError",
    "live_tables",
    "raw_name",
    "read",
    "tables",
]

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
RECORDS, STRING, PAIR, THREAD, CLOCK, END, WAITS = 1, 2, 3, 4, 5, 6, 7
# csrc/hs_ring.h
_F_ERROR, _F_ARG = 1, 2

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

    def __init__(self, path: str | os.PathLike[str]):
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
        #: (payload offset, tid, base id, slots, clock index, waits offset, waits)
        self.records: list[tuple[int, int, int, int, int, int, int]] = []
        waits: dict[int, tuple[int, int]] = {}  # tid -> its next records frame's waits
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
                w_at, w_n = waits.pop(a, (0, 0))
                self.records.append((body, a, b, c, len(self.clocks) - 1, w_at, w_n))
            elif kind == WAITS:
                waits[a] = (body, min(b, nbytes // 16))
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
    def damaged(self) -> bool:
        """Whether reading stopped at damage (a frame cut short at the end is a write under
        way, or the one a kill interrupted: no whole frame was there, nothing readable lost)."""
        return self.cut is not None and not self.cut.startswith("a frame cut short")

    def cut_reason(self) -> str:
        return f"record(s) after {self.cut} in the raw log"

    def lost_estimate(self) -> int:
        """Records past the damage, at most (32 bytes each): not read, so not known exactly."""
        return max(1, (len(self.mm) - self.cut_at) // 32)

    @property
    def slots(self) -> int:
        return sum(r[3] for r in self.records)

    def chunks(
        self, max_rows: int | None = None
    ) -> "Iterator[list[tuple[int, int, int, int, int, int, int]]]":
        """The record frames in groups of about ``max_rows`` slots (whole frames; default
        ``PART_ROWS``)."""
        max_rows = PART_ROWS if max_rows is None else max_rows
        group: list[tuple[int, int, int, int, int, int, int]] = []
        rows = 0
        for frame in self.records:
            group.append(frame)
            rows += frame[3]
            if rows >= max_rows:
                yield group
                group, rows = [], 0
        if group:
            yield group


def _decode(
    raw: RawFile, frames: list[tuple[int, int, int, int, int, int, int]], reader: Any
) -> dict[str, Any]:
    """The spans of ``frames`` as numpy columns: decoded in C (csrc/hs_rawlog.c
    ``hs_rawlog_decode``: the ids rebuilt, the ticks converted as drain() converts them, with
    the clock segments written before each frame; self and wait time by drain()'s kernel, with
    ``reader``'s state: ``_native._raw_reader()``, handed a log's frames in order)."""
    import numpy as np

    from .. import _native

    packed = np.array(
        [(f[0], f[3], f[2], f[4] + 1, f[5], f[6], f[1]) for f in frames],
        dtype=[(k, "<u8") for k in ("offset", "slots", "base", "clocks", "w_at", "w_n")]
        + [("tid", "<i8")],
    ).tobytes()
    clocks = np.array(raw.clocks, dtype=[("t0", "<u8"), ("n0", "<i8"), ("npt", "<f8")]).tobytes()
    data, k = _native._raw_decode(reader, raw.mm, packed, clocks)
    cap = sum(f[3] for f in frames)

    def column(at: int, dtype: Any) -> np.ndarray:
        return np.frombuffer(data, dtype, count=k, offset=at * cap)

    flags = column(68, np.uint8)
    frame = column(60, np.uint32)
    frame_tids = np.array([f[1] for f in frames], np.int64)
    return {
        "span_id": column(0, np.uint64),
        "parent_id": column(8, np.uint64),
        "has_parent": (flags & 0x80) != 0,
        "pair": column(56, np.uint32),
        "start_ns": column(16, np.int64),
        "end_ns": column(24, np.int64),
        "self_ns": column(40, np.int64),
        "wait_ns": column(48, np.int64),
        "depth": column(64, np.int32),
        "arg": column(32, np.int64),
        "has_arg": (flags & _F_ARG) != 0,
        "error": (flags & _F_ERROR) != 0,
        "thread_id": frame_tids[frame],
        "frame_tids": frame_tids,
        "frame": frame,
    }


def _arr(values: "np.ndarray", type: "pa.DataType", valid: "np.ndarray | None" = None) -> pa.Array:
    """A numpy column as an Arrow array, zero copy (``pa.array`` of a numpy array imports
    pandas: ~1 s at a program's stop())."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = int(len(valid) - np.count_nonzero(valid))
    if type == pa.bool_():
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(type, len(values), [bitmap, data], null_count=nulls)


def _table(raw: RawFile, cols: dict[str, Any], metadata: dict[bytes, bytes]) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    from .._table import string_array

    n = len(cols["span_id"])
    pair = cols["pair"]
    if n and int(pair.max()) < (1 << 20):  # the usual: a lookup table, no sort
        seen = np.flatnonzero(np.bincount(pair))
        lookup = np.zeros(int(seen[-1]) + 1, np.int32)
        lookup[seen] = np.arange(len(seen), dtype=np.int32)
        uniq, index = seen, lookup[pair]
    else:
        uniq, inverse = np.unique(pair, return_inverse=True)
        index = inverse.astype(np.int32).reshape(-1)
    # one dictionary entry per distinct string (pairs share names and paths; a dictionary
    # with a value twice is written PLAIN by Parquet's writer)
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    name_of = np.empty(len(uniq), np.int32)
    path_of = np.empty(len(uniq), np.int32)
    for k, p in enumerate(uniq.tolist()):
        name_id, path_id = raw.pairs.get(p, (None, None))
        name = raw.strings.get(name_id, f"<unknown span {p}>") if name_id else ""
        path = raw.strings.get(path_id) if path_id else None
        name_of[k] = names.setdefault(name, len(names))
        path_of[k] = paths.setdefault(path, len(paths)) if path is not None else -1
    has_path = path_of[index] >= 0
    category = pa.DictionaryArray.from_arrays(
        _arr(np.maximum(path_of[index], 0), pa.int32(), has_path), string_array(list(paths))
    )
    tids = cols["thread_id"]
    tid_values = np.array(sorted(set(cols["frame_tids"].tolist())), np.int64)
    thread_names: dict[str, int] = {}  # threads may share a name: one entry each name
    name_of_tid = np.array(
        [
            thread_names.setdefault(
                raw.thread_names.get(int(t), f"Thread-{int(t)}"), len(thread_names)
            )
            for t in tid_values
        ],
        np.int32,
    )
    thread_index = name_of_tid[np.searchsorted(tid_values, cols["frame_tids"])][cols["frame"]]
    start, end = cols["start_ns"], cols["end_ns"]
    return pa.table(
        {
            "span_id": _arr(cols["span_id"], pa.uint64()),
            "parent_id": _arr(cols["parent_id"], pa.uint64(), cols["has_parent"]),
            "name": pa.DictionaryArray.from_arrays(
                _arr(name_of[index], pa.int32()), string_array(list(names))
            ),
            "category": category,
            "start_ns": _arr(start, pa.int64()),
            "end_ns": _arr(end, pa.int64()),
            "duration_ns": _arr(end - start, pa.int64()),
            "depth": _arr(cols["depth"].astype(np.int32), pa.int32()),
            "thread_id": _arr(tids, pa.int64()),
            "thread_name": pa.DictionaryArray.from_arrays(
                _arr(thread_index, pa.int32()),
                string_array(list(thread_names)),
            ),
            "pid": _arr(np.full(n, raw.pid, np.int64), pa.int64()),
            "rank": _arr(np.full(n, raw.rank, np.int32), pa.int32()),
            "arg": _arr(cols["arg"], pa.int64(), cols["has_arg"]),
            "error": _arr(cols["error"], pa.bool_()),
        }
    ).replace_schema_metadata(metadata)


def tables(
    path: str | os.PathLike[str],
    metadata: dict[bytes, bytes] | None = None,
    *,
    max_rows: int | None = None,
    skip: "set[int] | frozenset[int]" = frozenset(),
    raw: "RawFile | None" = None,
    since_ns: int | None = None,
) -> "Iterator[pa.Table]":
    """The raw log's spans as span tables (``SPAN_SCHEMA``, ``metadata`` on each) of about
    ``max_rows`` spans each, in the order they were written, ``self_ns`` and ``wait_ns`` as
    drain() gives them (a span whose children are in an earlier piece counts them). ``skip``:
    pieces (their index) not given (read, for the self time of the pieces after them).
    ``since_ns``: spans that ended before it are left out (a recording started while others
    streamed: they are theirs)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .. import _native
    from .._schema import SPAN_SCHEMA
    from ._base import note_skipped

    raw = raw if raw is not None else RawFile(path)
    meta = dict(metadata or {})
    try:
        reader = _native._raw_reader()  # each thread's open spans' children, piece to piece
        produced = False
        pieces = list(raw.chunks(max_rows))
        for piece, frames in enumerate(pieces):
            cols = _decode(raw, frames, reader)
            if piece in skip:
                continue
            table = (
                _table(raw, cols, {})
                .append_column("self_ns", _arr(cols["self_ns"], pa.int64()))
                .append_column("wait_ns", _arr(cols["wait_ns"], pa.int64()))
            )
            out = table.cast(SPAN_SCHEMA).replace_schema_metadata(meta)
            if since_ns is not None:
                out = out.filter(pc.greater_equal(out.column("end_ns"), since_ns))
            if piece == len(pieces) - 1 and raw.damaged:
                out = note_skipped(out, raw.path, {raw.cut_reason(): raw.lost_estimate()})
            produced = True
            yield out
        if not produced:
            yield SPAN_SCHEMA.empty_table().replace_schema_metadata(meta)
    finally:
        raw.close()


def read(
    path: str | os.PathLike[str],
    metadata: dict[bytes, bytes] | None = None,
    *,
    skip: "set[int] | frozenset[int]" = frozenset(),
    since_ns: int | None = None,
) -> pa.Table:
    """The raw log's spans as one table (see :func:`tables`)."""
    import pyarrow as pa

    from .._schema import SPAN_SCHEMA

    parts = list(tables(path, metadata, skip=skip, since_ns=since_ns)) or [
        SPAN_SCHEMA.empty_table().replace_schema_metadata(dict(metadata or {}))
    ]
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts).unify_dictionaries()


def live_tables(
    root: str | os.PathLike[str], metas: list[dict[bytes, bytes]]
) -> list[tuple[pa.Table, dict[bytes, bytes]]]:
    """The spans of the raw logs in a run directory (``_live/``) that the parts read
    (``metas``: their schema metadata) do not hold yet, with the metadata of the start part of
    the recording that writes each (a log whose start part is not among them is another
    run's, or not this listing's: left out). A part converted from a log names it, its piece
    and the number of pieces (``hotspan.part``: ``replaces_live``, ``piece``, ``pieces``):
    a log whose every piece is visible is not read; one that is being converted gives the
    pieces not visible yet. A log that vanishes meanwhile raises ``FileNotFoundError`` (its
    parts appeared: list again)."""
    import json

    from .._schema import META_PART

    live_dir = os.path.join(os.fspath(root), LIVE_DIR)
    try:
        names = sorted(os.listdir(live_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    seen: dict[str, set[int]] = {}
    pieces: dict[str, int] = {}
    starts: dict[tuple[int, str], dict[bytes, bytes]] = {}
    for meta in metas:
        try:
            part = json.loads(meta.get(META_PART, b"{}"))
        except ValueError:
            continue
        if not isinstance(part, dict):
            continue
        for name in part.get("replaces_live") or ():
            if isinstance(name, str):
                seen.setdefault(name, set()).add(int(part.get("piece", 0)))
                pieces[name] = int(part.get("pieces", 1))
        if part.get("kind") == "start" and isinstance(part.get("token"), str):
            starts[(int(part.get("pid", -1)), part["token"])] = meta
    out = []
    for name in names:
        match = RAW_RE.match(name)
        key = f"{LIVE_DIR}/{name}"
        if match is None:
            continue
        if key in seen and len(seen[key]) >= pieces.get(key, 1):
            continue  # converted: its parts hold every span
        start = starts.get((int(match.group(2)), match.group(3)))
        if start is None:
            continue
        meta = dict(start)
        part = json.loads(meta[META_PART])
        part.update(kind="live", raw=key)
        meta[META_PART] = json.dumps(part).encode()
        since = part.get("since_ns")
        table = read(
            os.path.join(live_dir, name),
            meta,
            skip=seen.get(key, set()),
            since_ns=since if isinstance(since, int) else None,
        )
        out.append((table, meta))
    return out
