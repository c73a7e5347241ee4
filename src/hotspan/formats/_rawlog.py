"""The raw log of a live run: the spans of ``record(dir)`` as the native drain thread wrote
them, read back as span tables.

While ``record(dir)`` runs, the drain thread (C, never the interpreter lock) appends every
thread's 32-byte records to ``DIR/_live/part-r<R>-<pid>-<token>.hsraw`` as it moves them out
of the rings, with the string table's and thread names' deltas and the clock
(csrc/hs_rawlog.h has the layout). ``stop()`` and ``hotspan compact`` turn such a file into
Parquet parts (:func:`convert`) and remove it; until then ``hotspan.load(DIR)`` reads it
here (:func:`read`), and so does any reader after a SIGKILL, up to the last whole frame (a log
killed before its header was written holds no spans: read as empty).

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
RECORDS, STRING, PAIR, THREAD, CLOCK, END, WAITS = 1, 2, 3, 4, 5, 6, 7

#: Rows a converted Parquet part holds at most (stop() and compact convert a raw log in
#: pieces of this many spans: memory stays bounded whatever the run's length).
PART_ROWS = 4 << 20
#: Slots decoded at a time (a piece's table is made of such chunks): 88 bytes a span of
#: output, 23 MB, which the allocator hands back warm from one chunk to the next (measured:
#: a 4 Mi-span piece decoded at once took 80-100 ns a span, in chunks of 256 Ki 30-50).
SUB_ROWS = 1 << 18


class RawLogError(ValueError):
    """Not a raw log of this version (the header)."""


def raw_name(rank: int, pid: int, token: str) -> str:
    """The raw log's path relative to the run directory."""
    return f"{LIVE_DIR}/part-r{int(rank)}-{int(pid)}-{token}{SUFFIX}"


def _signed(word: int) -> int:
    """A frame's word holding an int64 (a thread id), as the int it is."""
    return word - (1 << 64) if word >> 63 else word


class RawFile:
    """One raw log, parsed up to its last whole frame: the header, the string and pair
    tables, thread names, clock segments, and where each thread's records are."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size:
                start = f.read(len(MAGIC))
                if start != MAGIC[: len(start)]:
                    raise RawLogError(f"{self.path}: not a raw log ({size} bytes, no header)")
                self.mm: mmap.mmap | bytes = b""  # read as a log without spans (below)
            else:
                self.mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            self._read_frames(size)
        except BaseException:
            self.close()
            raise

    def _read_frames(self, size: int) -> None:
        self.strings: dict[int, str] = {0: ""}
        self.pairs: dict[int, tuple[int, int]] = {}
        self.thread_names: dict[int, str] = {}
        self.clocks: list[tuple[int, int, float]] = []
        #: (payload offset, tid, base id, slots, clock index, waits offset, waits)
        self.records: list[tuple[int, int, int, int, int, int, int]] = []
        self.end: dict[str, int] | None = None
        #: Why reading stopped before the file's end (None: every byte read)
        self.cut: str | None = None
        self.cut_at = size
        if size < _HEADER.size:
            # The log of a process that ended between the file's creation and its header's
            # write (a pool's worker terminated as its recording started): no frame follows a
            # header, so nothing was in it.
            self.pid, self.rank, self.clock_source, self.id_base, self.version = -1, -1, 0, 0, ""
            return
        magic, fmt, hbytes, pid, rank, clock_source, id_base, version = _HEADER.unpack_from(
            self.mm, 0
        )
        if magic != MAGIC:
            raise RawLogError(f"{self.path}: not a raw log (magic {magic!r})")
        if fmt != FORMAT or hbytes != _HEADER.size:
            raise RawLogError(f"{self.path}: raw log format {fmt} (this hotspan reads {FORMAT})")
        self.pid, self.rank, self.clock_source, self.id_base = pid, rank, clock_source, id_base
        self.version = version.rstrip(b"\0").decode(errors="replace")
        waits: dict[int, tuple[int, int]] = {}  # tid -> its next records frame's waits
        mm = self.mm
        # every frame's sum checked in C (csrc/hs_rawlog.c hs_rawlog_scan: ~1 ns a word, where
        # numpy a frame at a time took ~50 ns a span), the frames listed here
        from .. import _native

        info, at, why = _native._raw_scan(mm, _HEADER.size)
        for head, kind, nbytes, a, b, c in struct.iter_unpack("<6Q", info):
            body = head + _FRAME.size
            if kind == RECORDS:
                w_at, w_n = waits.pop(a, (0, 0))
                self.records.append((body, _signed(a), b, c, len(self.clocks) - 1, w_at, w_n))
            elif kind == WAITS:
                waits[a] = (body, min(b, nbytes // 16))
            elif kind == STRING:
                self.strings[a] = bytes(mm[body : body + nbytes]).decode(errors="replace")
            elif kind == PAIR:
                self.pairs[a] = (b, c)
            elif kind == THREAD:
                self.thread_names[_signed(a)] = bytes(mm[body : body + nbytes]).decode(
                    errors="replace"
                )
            elif kind == CLOCK and nbytes >= 24:
                t0, n0, npt = struct.unpack_from("<Qqd", mm, body)
                self.clocks.append((t0, n0, npt))
            elif kind == END:
                self.end = {"spans": a, "dropped": b}
        if why:
            self.cut = (
                f"a frame cut short at byte {at:,}",
                f"damage at byte {at:,} (no frame there)",
                f"damage at byte {at:,} (a frame whose checksum differs)",
            )[why - 1]
            self.cut_at = at

    def close(self) -> None:
        if not isinstance(self.mm, mmap.mmap):
            return
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


def _groups(
    frames: list[tuple[int, int, int, int, int, int, int]], max_rows: int
) -> "Iterator[list[tuple[int, int, int, int, int, int, int]]]":
    """Consecutive frames in groups of about ``max_rows`` slots (whole frames)."""
    group: list[tuple[int, int, int, int, int, int, int]] = []
    rows = 0
    for frame in frames:
        group.append(frame)
        rows += frame[3]
        if rows >= max_rows:
            yield group
            group, rows = [], 0
    if group or not frames:
        yield group


class _Dictionaries:
    """The string dictionaries of a log's tables, one entry per distinct value (a dictionary
    with a value twice is written PLAIN by Parquet's writer), and the indices the C decoder
    writes: each pair's name and category path (int32 by pair id, -1: no category), each
    thread's name."""

    def __init__(self, raw: RawFile) -> None:
        import numpy as np

        from .._table import string_array

        top = max(raw.pairs, default=-1) + 1
        names: dict[str, int] = {}
        paths: dict[str, int] = {}
        pair_name = np.zeros(top, np.int32)
        pair_cat = np.full(top, -1, np.int32)
        for p in range(top):
            name, path = f"<unknown span {p}>", None  # a pair the log does not define
            if p in raw.pairs:
                name_id, path_id = raw.pairs[p]
                name = raw.strings.get(name_id, name) if name_id else ""
                path = raw.strings.get(path_id) if path_id else None
            pair_name[p] = names.setdefault(name, len(names))
            if path is not None:
                pair_cat[p] = paths.setdefault(path, len(paths))
        if not names:
            names[""] = 0  # no pair: the name index 0 of an unknown pair needs an entry
        self.pair_name, self.pair_cat = pair_name.tobytes(), pair_cat.tobytes()
        self.names, self.paths = string_array(list(names)), string_array(list(paths))
        threads: dict[str, int] = {}  # threads may share a name: one entry each name
        self.thread_of: dict[int, int] = {}
        for tid in sorted({r[1] for r in raw.records}):
            name = raw.thread_names.get(tid, f"Thread-{tid}")
            self.thread_of[tid] = threads.setdefault(name, len(threads))
        self.threads = string_array(list(threads))
        self._pid: pa.Buffer | None = None
        self._rank: pa.Buffer | None = None

    def constants(self, raw: RawFile, n: int) -> tuple[pa.Buffer, pa.Buffer]:
        """The pid and rank columns' values for n rows: slices of one pair of buffers,
        read-only, shared by every piece's table."""
        import numpy as np
        import pyarrow as pa

        if self._pid is None or self._rank is None or self._pid.size < 8 * n:
            self._pid = pa.py_buffer(np.full(n, raw.pid, np.int64))
            self._rank = pa.py_buffer(np.full(n, raw.rank, np.int32))
        return self._pid.slice(0, 8 * n), self._rank.slice(0, 4 * n)


def _piece(
    raw: RawFile,
    frames: list[tuple[int, int, int, int, int, int, int]],
    reader: Any,
    dicts: _Dictionaries,
) -> pa.Table:
    """The spans of ``frames`` as a span table (``SPAN_SCHEMA``), every column built in C
    (csrc/hs_rawlog.c ``hs_rawlog_decode``: the ids rebuilt, the ticks converted as drain()
    converts them with the clock segments written before each frame, self and wait time by
    drain()'s kernel with ``reader``'s state: ``_native._raw_reader()``, handed a log's frames
    in order) and wrapped here without a copy."""
    import numpy as np
    import pyarrow as pa

    from .. import _native
    from .._schema import SPAN_SCHEMA

    packed = np.array(
        [(f[0], f[3], f[2], f[4] + 1, f[5], f[6], f[1], dicts.thread_of[f[1]]) for f in frames],
        dtype=[(k, "<u8") for k in ("offset", "slots", "base", "clocks", "w_at", "w_n")]
        + [("tid", "<i8"), ("thread", "<i8")],
    ).tobytes()
    clocks = np.array(raw.clocks, dtype=[("t0", "<u8"), ("n0", "<i8"), ("npt", "<f8")]).tobytes()
    data, k, parents, categories, args = _native._raw_decode(
        reader, raw.mm, packed, clocks, dicts.pair_name, dicts.pair_cat
    )
    cap = sum(f[3] for f in frames)
    bitmap_bytes = (cap + 7) // 8
    buf = pa.py_buffer(data)

    def col(at: int, width: int, type: pa.DataType, bits: int = -1, valid: int = -1) -> pa.Array:
        bitmap = None
        if bits >= 0 and valid < k:
            bitmap = buf.slice(88 * cap + bits * bitmap_bytes, bitmap_bytes)
        values = buf.slice(at, k * width)
        nulls = k - valid if bitmap is not None else 0
        return pa.Array.from_buffers(type, k, [bitmap, values], null_count=nulls)

    def eight(i: int, type: pa.DataType, bits: int = -1, valid: int = -1) -> pa.Array:
        return col(8 * i * cap, 8, type, bits, valid)

    def four(j: int, bits: int = -1, valid: int = -1) -> pa.Array:
        return col(72 * cap + 4 * j * cap, 4, pa.int32(), bits, valid)

    pid, rank = dicts.constants(raw, k)
    columns = [
        eight(0, pa.uint64()),
        eight(1, pa.uint64(), 0, parents),
        pa.DictionaryArray.from_arrays(four(0), dicts.names),
        pa.DictionaryArray.from_arrays(four(1, 1, categories), dicts.paths),
        eight(2, pa.int64()),
        eight(3, pa.int64()),
        eight(4, pa.int64()),
        four(2),
        eight(5, pa.int64()),
        pa.DictionaryArray.from_arrays(four(3), dicts.threads),
        pa.Array.from_buffers(pa.int64(), k, [None, pid]),
        pa.Array.from_buffers(pa.int32(), k, [None, rank]),
        eight(6, pa.int64(), 2, args),
        pa.Array.from_buffers(pa.bool_(), k, [None, buf.slice(88 * cap + 3 * bitmap_bytes)]),
        eight(7, pa.int64()),
        eight(8, pa.int64()),
    ]
    return pa.Table.from_arrays(columns, schema=SPAN_SCHEMA)


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
        dicts = _Dictionaries(raw)
        produced = False
        pieces = list(raw.chunks(max_rows))
        for piece, frames in enumerate(pieces):
            # decoded SUB_ROWS at a time: buffers of that size come back from the allocator
            # warm (a piece's 370 MB at once are fresh pages, faulted in: twice the time)
            subs = [_piece(raw, group, reader, dicts) for group in _groups(frames, SUB_ROWS)]
            if piece in skip:
                continue
            out = (subs[0] if len(subs) == 1 else pa.concat_tables(subs)).replace_schema_metadata(
                meta
            )
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
