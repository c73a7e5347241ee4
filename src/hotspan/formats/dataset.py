"""A run as a directory: a flat Parquet dataset, one part per flush.

    run/part-r0-<pid>-<token>-<n>.parquet
    run/part-r1-<pid>-<token>-<n>.parquet
    ...

Flat, with the rank in each part's ``rank`` column and in its name, so that the directory
reads as it is in every Parquet reader, all giving the rows ``hotspan.load()`` gives:
``pandas.read_parquet(run)``, ``pyarrow.parquet.read_table(run)``,
``pyarrow.dataset.dataset(run)``, polars ``scan_parquet(run)`` and ``scan_parquet("run/*.parquet")``,
DuckDB ``read_parquet('run/*.parquet')`` with or without ``hive_partitioning``, Spark
``spark.read.parquet(run)`` (tests/formats/test_dataset_readers.py). The older layout,
``rank=R/part-*.parquet`` (a ``rank=R`` hive directory beside a ``rank`` column in the
files), broke pandas and pyarrow ("Field rank has incompatible types: int32 vs
dictionary"), and a hive directory without the column breaks the readers that do not
infer partitions (pyarrow.dataset, DuckDB with ``hive_partitioning=false``) while Spark
reads no subdirectory that is not ``key=value``. Directories in the older layout still load.

``token`` is drawn by each writer when it starts (``new_token()``: its start time and 32
random bits, in hex): part names never repeat, within a process (several recordings one
after another), across processes whose pid repeats (a restarted container) and across
hosts. A part is never written over an existing one (``write_part`` takes its name with
``link()``). Names without a token (``part-<pid>-<n>.parquet``, older runs) still read.

The same layout lives in object storage and other file systems: ``run`` may be any URI
``pyarrow.fs.FileSystem.from_uri`` accepts (``s3://bucket/run``, ``gs://...``,
``hdfs://...``), with credentials from each store's standard environment and config (never
printed: URIs are shown with their user info and secret-looking query values blanked).
Object stores have no rename: there a part is written to a local temporary file and then
put whole (one write, one close: an upload cut short is never completed, so the object is
complete or absent); file systems with a rename (HDFS) take a hidden temporary name and a
move, as a local directory does.

Written by ``hotspan.record("run/")`` in every process and by ``hotspan collect --out run/``;
read back whole by ``hotspan.load("run/")`` (``pyarrow.dataset``), by every CLI command, and
by anything that reads Parquet (DuckDB: ``SELECT ... FROM 'run/**/*.parquet'``).

Each part is a complete span table with its own process's metadata, written under a
temporary name beginning with ``.`` (which ``pyarrow.dataset`` and the ``*.parquet`` glob
skip) and renamed into place: a process killed at any moment never leaves a torn part
visible. Loading merges the metadata: the lowest rank's stands for the whole, and the key
``hotspan.ranks`` keeps, per rank, each process's host, pid, clock anchor, dropped counts
and (from a collector) its clock offset and uncertainty.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import pyarrow as pa

from .. import _machine
from ._uri import is_uri, redact_uri
from ._base import TraceFileError, check_span_rules, conform_to_schema, require_regular_file
from .._schema import (
    meta_int,
    meta_json,
    META_ARGV,
    META_TASKS,
    META_CLOCK,
    META_DROPPED,
    META_HOST,
    META_MACHINE,
    META_PID,
    META_RANK,
    META_PART,
    META_RUN,
    META_SKIPPED_ON_LOAD,
    META_START,
)

__all__ = [
    "META_PART",
    "META_RANKS",
    "META_RUNS",
    "META_UNFLUSHED",
    "ALL_RUNS",
    "SeveralRunsWarning",
    "list_runs",
    "parts_of_run",
    "run_of",
    "Location",
    "NoPartsError",
    "is_dataset",
    "is_uri",
    "load_dataset",
    "load_uri",
    "list_parts",
    "location",
    "pid_alive",
    "new_token",
    "part_files",
    "part_key",
    "part_name",
    "part_path",
    "put_file",
    "current_parts",
    "redact_uri",
    "replaced_by",
    "sweep_temporaries",
    "write_part",
]

#: Per part (JSON): {"rank", "pid", "seq", "sink_dropped", and from a collector "offset_ns",
#: "offset_uncertainty_ns", "offset_applied_ns", "rtt_ns", "client_host", "received_ns"}
#: (``META_PART``, defined in _schema).
#: In a loaded dataset (JSON): {"<rank>": [{"pid", "host", "parts", "spans", "start_ns", "clock",
#: "dropped", "sink_dropped", "offset_ns", "offset_uncertainty_ns", "offset_applied_ns"}, ...]}.
META_RANKS = b"hotspan.ranks"
#: In a loaded dataset holding several runs (JSON list): their ids (``hotspan.run`` is then absent).
META_RUNS = b"hotspan.runs"
#: In a loaded dataset (JSON): [{"pid", "name", "exitcode", "parent_pid"}, ...], the
#: multiprocessing children that died of a signal before writing any part (so before any of
#: their spans could be kept), as named by the parent that started them.
META_UNFLUSHED = b"hotspan.unflushed"

#: ``part-<pid>-<token>-<seq>``, older ``part-<pid>-<seq>``, and a compacted part
#: ``part-<pid>-<token>-<first seq>-<last seq>`` (its writer's parts first..last, merged).
_PART_RE = re.compile(r"^part-(\d+)-(?:([0-9a-f]+)-)?(\d+)(?:-(\d+))?\.parquet$")
#: What ``atomic_path`` leaves behind a writer killed mid-part: ``.<part name>.<8 hex>.part``.
_TEMP_RE = re.compile(r"^\.(part-(?:r-?\d+-)?(\d+)-[0-9a-f-]*\d+\.parquet)\.[0-9a-f]{8}\.part$")
#: A temporary part untouched this long is stale whoever wrote it (a part is written in
#: well under a second; on a shared file system its writer may be on another host).
STALE_TEMP_S = 600.0
_RANK_DIR_RE = re.compile(r"^rank=(-?\d+)$")
#: The older layout's rank directory, the one pattern every reader (serve's run listing too) uses.
RANK_DIR_RE = _RANK_DIR_RE
#: ``part-r<rank>-<pid>-<token>-<seq>[-<last>].parquet``: a part of the flat layout.
_FLAT_PART_RE = re.compile(r"^part-r(-?\d+)-(\d+)-(?:([0-9a-f]+)-)?(\d+)(?:-(\d+))?\.parquet$")
_PARTITIONING_SCHEMA = pa.schema([("rank", pa.int32())])


def new_token() -> str:
    """A writer's part-name token: its start time (seconds, so a directory listing sorts a
    process's recordings in order) and 32 random bits, 16 hex digits."""
    # os.urandom, not secrets: secrets' import loads hmac and OpenSSL (~30 ms, and under a
    # memory limit a traceback per hash algorithm)
    return f"{int(time.time()) & 0xFFFFFFFF:08x}{os.urandom(4).hex()}"


def part_name(
    rank: int, pid: int, seq: int, token: str | None = None, last: int | None = None
) -> str:
    """A part's name relative to the dataset's root: ``part-r<rank>-<pid>-<token>-<seq>.parquet``
    (flat: see the module's doc); without a token, ``part-r<rank>-<pid>-<seq>``; with ``last``,
    a compacted part holding its writer's parts ``seq`` to ``last``."""
    middle = "" if token is None else f"{_check_token(token)}-"
    tail = "" if last is None else f"-{int(last):06d}"
    return f"part-r{int(rank)}-{int(pid)}-{middle}{int(seq):06d}{tail}.parquet"


def part_path(
    directory: str | os.PathLike[str], rank: int, pid: int, seq: int, token: str | None = None
) -> Path:
    """Where part ``seq`` of writer ``token`` (process ``pid`` of ``rank``) lives in a local
    dataset directory; without a token, the older ``part-<pid>-<seq>`` name."""
    return Path(directory) / part_name(rank, pid, seq, token)


def _check_token(token: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{1,64}", token):
        raise ValueError(f"part token {token!r}: expected 1-64 lower-case hex digits")
    return token


# --------------------------------------------------------------------------- where a dataset lives

#: File systems without a rename (or whose rename is a copy): an object appears whole when
#: its upload completes, so a part is put in one piece instead of renamed into place.
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})


class Location:
    """A dataset's root on a file system: ``fs`` (a ``pyarrow.fs.FileSystem``), ``root`` (its
    path there, no trailing ``/``), ``shown`` (the name to print) and ``local`` (a local
    directory, written with ``os`` calls: an atomic rename, fsync)."""

    def __init__(self, fs: Any, root: str, shown: str, local: bool):
        self.fs, self.root, self.shown, self.local = fs, root.rstrip("/") or root, shown, local

    @property
    def object_store(self) -> bool:
        return self.fs.type_name in OBJECT_STORES

    def join(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def relative(self, path: str) -> str:
        return path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path

    def __repr__(self) -> str:
        return f"<Location {self.shown}>"


def location(dest: str | os.PathLike[str]) -> Location:
    """Where ``dest`` (a local path, or any URI ``pyarrow.fs.FileSystem.from_uri`` accepts)
    lives. A bad URI is a ``ValueError`` that names it without its credentials."""
    import pyarrow.fs as pafs

    text = os.fspath(dest)
    if isinstance(text, bytes):
        text = text.decode()
    if not is_uri(text):
        return Location(pafs.LocalFileSystem(), os.path.abspath(text), str(text), True)
    shown = redact_uri(text)
    try:
        fs, root = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, ValueError, OSError) as exc:
        # pyarrow's message may quote the URI, credentials and all: not shown.
        raise ValueError(
            f"{shown}: not a file system URI that pyarrow can open ({type(exc).__name__})"
        ) from None
    if isinstance(fs, pafs.LocalFileSystem):  # file:///path
        return Location(fs, root, shown, True)
    return Location(fs, root, shown, False)


def put_file(loc: Location, local_file: str | os.PathLike[str], relative: str) -> str:
    """Publish a complete local file as ``relative`` under ``loc`` (not a local directory:
    ``write_part`` writes those in place, with ``atomic_path``), never over an existing one
    (``FileExistsError``); return its path on ``loc.fs``.

    Object store: one put of the whole file (read into memory first, so that nothing can stop
    the upload half-way between two writes and leave the close to publish a torn object; a
    process killed mid-upload never completes it, and the object never appears). Other file
    systems (HDFS): a hidden temporary name, then a move."""
    if loc.local:
        raise ValueError(
            f"{loc.shown}: put_file publishes to a remote store; write local parts in place"
        )
    target = loc.join(relative)
    import pyarrow.fs as pafs

    # Object stores have no create-if-absent here: names are unique by construction (pid,
    # a random token, a sequence number); this check catches a reused name.
    if loc.fs.get_file_info(target).type != pafs.FileType.NotFound:
        raise FileExistsError(errno.EEXIST, "part exists already", f"{loc.shown}/{relative}")
    with open(local_file, "rb") as f:
        data = f.read()
    if loc.object_store:
        with loc.fs.open_output_stream(target) as out:
            out.write(data)
        return target
    parent, name = target.rsplit("/", 1)
    loc.fs.create_dir(parent, recursive=True)
    temporary = f"{parent}/.{name}.{os.urandom(4).hex()}.part"
    with loc.fs.open_output_stream(temporary) as out:
        out.write(data)
    loc.fs.move(temporary, target)
    return target


def write_part(
    table: pa.Table,
    directory: str | os.PathLike[str] | Location,
    *,
    rank: int,
    pid: int,
    seq: int,
    token: str | None = None,
    part_meta: dict[str, Any] | None = None,
    last: int | None = None,
    encoding: str = "part",
) -> Path | str:
    """Write one part atomically; return its path (local) or its path on the store.

    Local: a temporary ``.``-name, fsync, then the name taken with ``link()``. Elsewhere:
    written to a local temporary file, then :func:`put_file`.

    ``encoding``: ``"part"``, the encoding cheapest to write (LZ4, byte-stream-split
    integers: a recorder's flush, a collector's put; ``parquet.PART_WRITER_OPTIONS``), or
    ``"file"``, an exported file's (zstd: smaller, for parts that stay, as compaction writes).

    ``table`` keeps its schema metadata; ``part_meta`` is added under ``hotspan.part``.
    A part is never written over: where the name exists already, ``FileExistsError`` (the
    caller decides whether that is the same batch again or a new name is needed).
    """
    import tempfile

    from ._parquet import ParquetExporter, PartParquetExporter

    if encoding not in ("part", "file"):
        raise ValueError(f"write_part: encoding must be 'part' or 'file', not {encoding!r}")
    exporter = PartParquetExporter() if encoding == "part" else ParquetExporter()
    loc = (
        directory
        if isinstance(directory, Location)
        else (None if not is_uri(directory) else location(directory))
    )
    relative = part_name(rank, pid, seq, token, last)
    meta = dict(table.schema.metadata or {})
    own: dict[str, int | str] = {"rank": int(rank), "pid": int(pid), "seq": int(seq)}
    if token is not None:
        own["token"] = token
    meta[META_PART] = json.dumps({**own, **(part_meta or {})}).encode()
    table = table.replace_schema_metadata(meta)
    if loc is None or loc.local:
        # loc is None only for a local path (neither a Location nor a URI)
        local_root = loc.root if loc is not None else cast("str | os.PathLike[str]", directory)
        path = Path(local_root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        exporter.write(table, path, replace=False)
        return path
    with tempfile.TemporaryDirectory(prefix="hotspan-part-") as tmp:
        staged = Path(tmp) / relative.rpartition("/")[2]
        exporter.write(table, staged)
        return put_file(loc, staged, relative)


def part_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``hotspan.part`` metadata of one written part (its footer only is read)."""
    import pyarrow.parquet as pq

    return meta_json(pq.read_schema(path).metadata or {}, META_PART) or {}


def sweep_temporaries(
    directory: str | os.PathLike[str], *, stale_s: float = STALE_TEMP_S, by_pid: bool = True
) -> int:
    """Remove what writers killed mid-part left in ``directory`` (hidden temporary parts);
    return how many. A temporary part goes when its writer is a process of this host that no
    longer runs, or when nothing has touched it for ``stale_s`` seconds; one being written
    now stays. ``by_pid=False``: by age alone (a collector: the pid in a part's name is its
    rank's, not the writer's, and another collector may be writing into the same dataset).
    Nothing else is touched (temporaries are never counted as parts anyway)."""
    directory = Path(directory)
    removed = 0
    try:
        # the flat layout's parts are in the directory itself; the older layout's in rank=R/
        rank_dirs = [directory] + [
            d for d in directory.iterdir() if _RANK_DIR_RE.match(d.name) and d.is_dir()
        ]
    except OSError:
        return 0
    now = time.time()
    for rank_dir in rank_dirs:
        try:
            names = os.listdir(rank_dir)
        except OSError:
            continue
        for name in names:
            match = _TEMP_RE.match(name)
            if match is None:
                continue
            path = rank_dir / name
            try:
                age = now - path.stat().st_mtime
            except OSError:
                continue
            if age < stale_s and (not by_pid or pid_alive(int(match.group(2)))):
                continue
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (a pid of another host may look dead:
    the age rule in ``sweep_temporaries`` covers those only when the pid is in use here)."""
    if not 0 < pid < 1 << 31:  # never a process id (a damaged file's): os.kill would overflow
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours
    return True


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory or a file system URI (``load()`` reads both as datasets)."""
    return is_uri(path) or Path(path).is_dir()


def part_key(path: str) -> dict[str, Any] | None:
    """What a part's path says: ``rank`` (from its name, or in the older layout from its
    ``rank=R`` directory), ``pid``, ``token`` (None in older names), ``seq`` and, for a
    compacted part, ``last``; None for another name."""
    parent, _, name = path.replace(os.sep, "/").rpartition("/")
    flat = _FLAT_PART_RE.match(name)
    if flat is not None:
        return {
            "rank": int(flat.group(1)),
            "pid": int(flat.group(2)),
            "token": flat.group(3),
            "seq": int(flat.group(4)),
            "last": int(flat.group(5)) if flat.group(5) else None,
        }
    rank_dir = _RANK_DIR_RE.match(parent.rpartition("/")[2])
    part = _PART_RE.match(name)
    if rank_dir is None or part is None:
        return None
    return {
        "rank": int(rank_dir.group(1)),
        "pid": int(part.group(1)),
        "token": part.group(2),
        "seq": int(part.group(3)),
        "last": int(part.group(4)) if part.group(4) else None,
    }


def _part_key(path: str) -> tuple[Any, ...]:
    """Order parts by rank, directory, pid, writer token and part number."""
    parent, _, name = path.rpartition("/")
    key = part_key(path)
    if key is None:
        return (-1, parent, -1, "", -1, name)
    return (key["rank"], parent, key["pid"], key["token"] or "", key["seq"], name)


def list_parts(loc: Location, *, own: bool = False) -> list[tuple[str, int]]:
    """Every visible ``*.parquet`` under ``loc`` as (path on ``loc.fs``, size in bytes):
    names beginning with ``.`` or ``_`` (and everything below such a directory) skipped, as
    ``pyarrow.dataset`` does; ordered by rank, pid, writer and part number. Parts replaced by
    a compacted part are still listed: :func:`current_parts` leaves them out.

    ``own``: only the dataset's own parts, those in ``loc`` itself and in its ``rank=R``
    directories (not the files of other runs in other subdirectories: ``hotspan serve``)."""
    return [(path, size) for path, size, _mtime in _list_parts(loc, own=own)]


def _list_parts(loc: Location, *, own: bool = False) -> list[tuple[str, int, int]]:
    """:func:`list_parts` with each part's modification time (ns) too."""
    import pyarrow.fs as pafs

    found = []
    for info in loc.fs.get_file_info(
        pafs.FileSelector(loc.root, recursive=True, allow_not_found=True)
    ):
        if info.type not in (pafs.FileType.File, pafs.FileType.Unknown) or not info.path.endswith(
            ".parquet"
        ):
            continue
        pieces = loc.relative(info.path).split("/")
        if any(piece.startswith((".", "_")) for piece in pieces):
            continue
        if own and not (
            len(pieces) == 1 or (len(pieces) == 2 and _RANK_DIR_RE.match(pieces[0]) is not None)
        ):
            continue
        if (
            info.type == pafs.FileType.Unknown
        ):  # a FIFO, a socket, a device named like a part: refused, never opened
            require_regular_file(info.path)  # raises, naming what it is
            continue
        found.append((info.path, info.size or 0, info.mtime_ns or 0))
    return sorted(found, key=lambda item: _part_key(item[0]))


def part_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The parts of a local dataset directory, as paths, in :func:`list_parts`'s order (parts
    that a compacted part replaces included: see :func:`current_parts`)."""
    return [Path(path) for path, _size in list_parts(location(directory))]


def current_parts(
    dest: str | os.PathLike[str] | Location,
    *,
    own: bool = False,
    footers: dict[str, tuple[tuple[int, int], dict[bytes, bytes]]] | None = None,
) -> tuple[Location, list[tuple[str, int, dict[bytes, bytes]]]]:
    """Where ``dest`` lives, and the parts a reader should read now: (path, size, schema
    metadata), parts replaced by a visible compacted part left out. Reads every footer.
    ``own``: as for :func:`list_parts`. ``footers``: a cache of the metadata read, by path,
    with the (size, modification time) it was read at (a part is never written over), kept
    up to date here: a reader that lists a dataset again and again (``hotspan serve``) reads
    each footer once.

    One consistent set while a compaction runs: a listed part that vanishes before its footer
    is read is fine when a compacted part of the same listing replaces it; otherwise the
    listing is stale (the part that replaces it appeared since), and the directory is listed
    again (``LOAD_ATTEMPTS`` times at most), so a part's spans are never left out."""
    import pyarrow.parquet as pq

    loc = dest if isinstance(dest, Location) else location(dest)
    for _attempt in range(LOAD_ATTEMPTS):
        found, vanished = [], []
        listed = _list_parts(loc, own=own)
        if footers is not None:  # forget the parts gone
            for gone in footers.keys() - {path for path, _size, _mtime in listed}:
                del footers[gone]
        for path, size, mtime in listed:
            known = footers.get(path) if footers is not None else None
            if known is not None and known[0] == (size, mtime):
                found.append((path, size, known[1]))
                continue
            try:
                meta = pq.read_schema(path, filesystem=loc.fs).metadata
            except FileNotFoundError:
                vanished.append(path)  # deleted since the listing: replaced, or listed too early
                continue
            except (pa.ArrowException, OSError) as exc:
                if _any_vanished(loc, [path]):
                    vanished.append(path)
                    continue
                raise TraceFileError(
                    redact_uri(path) if not loc.local else path,
                    f"not a readable Parquet part: {exc}",
                ) from None
            found.append((path, size, dict(meta or {})))
            if footers is not None:
                footers[path] = ((size, mtime), found[-1][2])
        replaced = replaced_by([(path, meta) for path, _size, meta in found])
        if all(path in replaced for path in vanished):
            return loc, [item for item in found if item[0] not in replaced]
        time.sleep(0.01)
    raise TraceFileError(
        loc.shown,
        f"parts kept vanishing while being read ({LOAD_ATTEMPTS} listings): "
        "is something deleting them?",
    )


def replaced_by(metas: list[tuple[str, dict[bytes, bytes]]]) -> set[str]:
    """The paths that compacted parts among ``metas`` (path, schema metadata) replace: a
    compacted part lists its inputs (``hotspan.part`` key ``replaces``, names in its own
    directory). Applied transitively by taking the union: a part compacted again is itself
    replaced, and its inputs with it."""
    replaced: set[str] = set()
    for path, meta in metas:
        names = (meta_json(meta, META_PART) or {}).get("replaces") or ()
        parent = path.rpartition("/")[0]
        replaced.update(
            f"{parent}/{name}" for name in names if isinstance(name, str) and "/" not in name
        )
    return replaced


def merge_metadata(parts: list[tuple[dict[bytes, bytes], int]]) -> dict[bytes, bytes]:
    """One schema metadata for a dataset from its parts' (metadata, rows), in part order.

    The first part's metadata (lowest rank) stands for the whole; the start time is the
    earliest of all; dropped counts are summed over processes (each process's largest count,
    as its counts only grow); ``hotspan.ranks`` keeps each process's own figures.
    """
    if not parts:
        return {}
    merged = dict(parts[0][0])
    merged.pop(META_PART, None)
    processes: dict[tuple[int, int, str], dict[str, Any]] = {}
    unflushed: list[dict[str, Any]] = []
    for meta, rows in parts:
        part = meta_json(meta, META_PART) or {}
        rank = part.get("rank", meta_int(meta, META_RANK) or 0)
        pid = part.get("pid", meta_int(meta, META_PID) or 0)
        if isinstance(part.get("unflushed_children"), list):
            unflushed += [
                {**child, "parent_pid": pid}
                for child in part["unflushed_children"]
                if isinstance(child, dict)
            ]
        host = (meta.get(META_HOST) or b"").decode(errors="replace")
        proc = processes.setdefault(
            (int(rank), int(pid), host), {"pid": pid, "host": host, "parts": 0, "spans": 0}
        )
        if META_RUN in meta:
            proc["run"] = meta[META_RUN].decode(errors="replace")
        proc["parts"] += 1
        proc["spans"] += rows
        start = meta_int(meta, META_START)
        if start is not None:
            proc["start_ns"] = min(proc.get("start_ns", start), start)
        clock = meta_json(meta, META_CLOCK)
        if clock is not None:
            proc["clock"] = clock  # the latest part's calibration
        proc["machine"] = _machine.latest(proc.get("machine"), meta_json(meta, META_MACHINE))
        dropped = meta_json(meta, META_DROPPED)
        if isinstance(dropped, dict) and _dropped_total(dropped) >= _dropped_total(
            proc.get("dropped")
        ):
            proc["dropped"] = dropped  # the largest: a process's counts only grow
        for key in (
            "sink_dropped",
            "offset_ns",
            "offset_uncertainty_ns",
            "offset_applied_ns",
            "rtt_ns",
        ):
            if key in part:
                proc[key] = part[key]
    ranks: dict[str, list[dict[str, Any]]] = {}
    total_dropped, starts = 0, []
    threads: dict[str, int] = {}
    names: dict[str, str] = {}
    for (rank, _pid, _host), proc in sorted(processes.items()):
        ranks.setdefault(str(rank), []).append(proc)
        dropped = proc.get("dropped") or {}
        try:
            total_dropped += int(dropped.get("total", 0))
            for tid, count in (dropped.get("threads") or {}).items():
                threads[tid] = threads.get(tid, 0) + int(count)
            names.update(dropped.get("names") or {})
        except (TypeError, ValueError, AttributeError):
            pass
        if "start_ns" in proc:
            starts.append(proc["start_ns"])
    merged[META_DROPPED] = json.dumps(
        {"total": total_dropped, "threads": threads, "names": names}
    ).encode()
    if any(META_TASKS in meta for meta, _rows in parts):
        merged[META_TASKS] = b"1"  # a part with task spans: the whole may overlap on a thread
    if starts:
        merged[META_START] = str(min(starts)).encode()
    machine = _machine.combine([proc.pop("machine", None) for proc in processes.values()])
    if machine is not None:  # the machine's speed over every process, at their latest parts
        merged[META_MACHINE] = json.dumps(machine).encode()
    rank_ids = sorted({r for r, _p, _h in processes})
    pids = sorted({p for _r, p, _h in processes})
    merged[META_RANK] = ",".join(map(str, rank_ids)).encode()
    merged[META_PID] = ",".join(map(str, pids)).encode()
    merged[META_RANKS] = json.dumps(ranks).encode()
    runs = sorted({proc["run"] for proc in processes.values() if "run" in proc})
    if len(runs) > 1:  # several runs: no one id stands for the whole; each process keeps its own
        merged.pop(META_RUN, None)
        merged[META_RUNS] = json.dumps(runs).encode()
    if unflushed:
        merged[META_UNFLUSHED] = json.dumps(unflushed).encode()
    return merged


def run_of(meta: dict[bytes, bytes]) -> str | None:
    """The run id a part's (or file's) metadata names, None for one written before run ids."""
    raw = meta.get(META_RUN)
    return raw.decode(errors="replace") if raw is not None else None


#: ``run=ALL_RUNS`` (``--run all``): every run of a dataset, read together.
ALL_RUNS = "all"
#: How a dataset's parts without a run id (written before run ids) are named.
NO_RUN_ID = "(no id)"


class SeveralRunsWarning(UserWarning):
    """A dataset holds the parts of more than one run and the newest was read: one line
    naming it and how to read the others (``warnings.simplefilter("ignore",
    SeveralRunsWarning)`` silences it)."""


_T = TypeVar("_T")


def parts_of_run(
    parts: Sequence[_T],
    meta_of: Callable[[_T], dict[bytes, bytes]],
    run: str | None,
    shown: str,
    stacklevel: int = 2,
) -> list[_T]:
    """The parts of a dataset that a reader reads (every reader: ``load``, the streamed and
    Spark statistics, so the CLI and serve): those of run ``run``; of every run for
    ``ALL_RUNS``; for None, those of the newest run (the latest to start: one job is one
    run, each program start outside a job a new one), said in one ``SeveralRunsWarning``
    when others are there. ``TraceFileError`` for a run that is not there."""
    by_run: dict[str, list[_T]] = {}
    starts: dict[str, int] = {}
    for part in parts:
        meta = meta_of(part)
        rid = run_of(meta) or NO_RUN_ID
        by_run.setdefault(rid, []).append(part)
        start = meta_int(meta, META_START)
        if start is not None and start > 0:
            starts[rid] = min(starts.get(rid, start), start)
    if run == ALL_RUNS or (run is None and len(by_run) <= 1):
        return list(parts)
    if run is not None:
        if run not in by_run:
            raise TraceFileError(
                shown, f"no run {run!r} here; runs: {', '.join(sorted(by_run))} (or run='all')"
            )
        return by_run[run]
    newest = max(by_run, key=lambda rid: (rid in starts, starts.get(rid, 0), rid))
    warnings.warn(
        f'{shown}: reading run {newest} (newest of {len(by_run)}; run=ID, run="all" or '
        "--run ID for the others; hotspan runs DIR lists them)",
        SeveralRunsWarning,
        stacklevel=stacklevel + 1,
    )
    return by_run[newest]


def _format_hotspans_warnings_on_one_line() -> None:
    """``warnings.formatwarning`` for hotspan's one-line warnings: the message says it all,
    without the file, line and source line of hotspan's own code; others as before."""
    before = warnings.formatwarning
    if getattr(before, "hotspan_one_line", False):
        return  # installed already (this module loaded again)

    def one_line(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        if isinstance(category, type) and issubclass(category, SeveralRunsWarning):
            return f"hotspan: {message}\n"
        return before(message, category, filename, lineno, line)

    one_line.hotspan_one_line = True  # type: ignore[attr-defined]
    warnings.formatwarning = one_line


_format_hotspans_warnings_on_one_line()


def list_runs(dest: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The runs in a dataset (a directory or URI), from its parts' footers only, oldest
    first: ``run`` (its id; None for parts written before run ids), ``start_ns``,
    ``processes``, ``ranks``, ``spans``, ``parts`` and ``command`` (the first process's argv)."""
    import pyarrow.parquet as pq

    loc, parts = current_parts(dest)
    runs: dict[str | None, dict[str, Any]] = {}
    for path, _size, meta in parts:
        rid = run_of(meta)
        entry = runs.setdefault(
            rid,
            {
                "run": rid,
                "start_ns": None,
                "processes": set(),
                "ranks": set(),
                "spans": 0,
                "parts": 0,
                "command": None,
            },
        )
        part = meta_json(meta, META_PART) or {}
        rank = part.get("rank", meta_int(meta, META_RANK) or 0)
        pid = part.get("pid", meta_int(meta, META_PID) or 0)
        entry["processes"].add((rank, pid, (meta.get(META_HOST) or b"").decode(errors="replace")))
        entry["ranks"].add(int(rank))
        entry["parts"] += 1
        entry["spans"] += pq.ParquetFile(path, filesystem=loc.fs).metadata.num_rows
        start = meta_int(meta, META_START)
        if start is not None and (entry["start_ns"] is None or start < entry["start_ns"]):
            entry["start_ns"] = start
            argv = meta_json(meta, META_ARGV)
            entry["command"] = " ".join(map(str, argv)) if isinstance(argv, list) else None
    out = []
    for entry in runs.values():
        out.append({**entry, "processes": len(entry["processes"]), "ranks": sorted(entry["ranks"])})
    return sorted(out, key=lambda e: (e["start_ns"] is None, e["start_ns"] or 0, e["run"] or ""))


def _dropped_total(dropped: Any) -> int:
    try:
        return int(dropped.get("total", 0))
    except (AttributeError, TypeError, ValueError):
        return -1


class NoPartsError(TraceFileError, IsADirectoryError):
    """A directory with no span parts: not a trace (a ``TraceFileError``), and a directory
    where a trace file was expected (an ``IsADirectoryError``, as the file loaders have it)."""


#: How many times a load starts again when a part it listed vanished before it was read (a
#: compaction deleting the parts its merged part replaced): each new listing sees the merged part.
LOAD_ATTEMPTS = 8


class _PartVanished(Exception):
    pass


def load_uri(
    uri: str, format: str | None = None, *, check: bool = True, run: str | None = None
) -> pa.Table:
    """A trace named by URI: a dataset (a prefix holding ``rank=R/`` parts), or one trace file
    (fetched to a local temporary file and read by its format's exporter)."""
    import tempfile

    import pyarrow.fs as pafs

    from ._registry import exporter_for

    loc = location(uri)
    if not loc.local and loc.fs.get_file_info(loc.root).type == pafs.FileType.File:
        exporter = exporter_for(loc.root, format)
        with tempfile.TemporaryDirectory(prefix="hotspan-fetch-") as tmp:
            local = Path(tmp) / loc.root.rpartition("/")[2]
            pafs.copy_files(
                loc.root,
                str(local),
                source_filesystem=loc.fs,
                destination_filesystem=pafs.LocalFileSystem(),
            )
            try:
                return exporter.read(local, check=check)
            except TraceFileError as exc:
                raise TraceFileError(loc.shown, exc.problem) from None
    if loc.local and os.path.isfile(loc.root):
        return exporter_for(loc.root, format).read(loc.root, check=check)
    return load_dataset(loc, check=check, run=run)


def load_dataset(
    directory: str | os.PathLike[str] | Location, *, check: bool = True, run: str | None = None
) -> pa.Table:
    """Every part of a dataset (a directory, or a URI: all ranks, all processes) as one table
    with exactly ``SPAN_SCHEMA``, ordered by rank, process and part; metadata merged (see
    :func:`merge_metadata`). ``check``: as for :func:`hotspan.formats.load`.

    Each span is read exactly once while a compaction runs: parts that a visible compacted
    part replaces are left out, and a load whose listed part vanished before it was read
    (deleted by the compaction after its merged part appeared) lists again.

    ``run``: only the parts of that run (see ``hotspan._run``; ``hotspan runs DIR`` lists
    them), or ``"all"``: every run. Without it, a directory holding several runs reads its
    newest, said in a :class:`SeveralRunsWarning` (:func:`parts_of_run`)."""
    loc = directory if isinstance(directory, Location) else location(directory)
    for _attempt in range(LOAD_ATTEMPTS):
        try:
            return _load_once(loc, check, run)
        except _PartVanished:
            time.sleep(0.01)
    raise TraceFileError(
        loc.shown,
        f"parts kept vanishing while being read ({LOAD_ATTEMPTS} listings): "
        "is something deleting them?",
    )


def _load_once(loc: Location, check: bool, run: str | None = None) -> pa.Table:
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    if loc.local and not os.path.isdir(loc.root):
        raise FileNotFoundError(errno.ENOENT, "no such dataset directory", loc.shown)
    try:
        files = list_parts(loc)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(
            loc.shown, f"cannot list the dataset: {type(exc).__name__}: {exc}"
        ) from None
    if not files:
        if not loc.local and loc.fs.get_file_info(loc.root).type == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, "no such dataset", loc.shown)
        raise NoPartsError(loc.shown, "no span parts in this directory (expected part-*.parquet)")
    try:
        try:
            dataset = ds.dataset(
                [path for path, _size in files],
                format="parquet",
                filesystem=loc.fs,
                partition_base_dir=loc.root,
                partitioning=ds.partitioning(_PARTITIONING_SCHEMA, flavor="hive"),
            )
            fragments = list(dataset.get_fragments())
            metas = [
                (fragment.path, dict(fragment.physical_schema.metadata or {}))
                for fragment in fragments
            ]
            replaced = replaced_by(metas)
            kept = [
                (fragment, meta)
                for fragment, (path, meta) in zip(fragments, metas)
                if path not in replaced
            ]
            kept = parts_of_run(kept, lambda part: part[1], run, loc.shown, stacklevel=4)
            parts_meta = [(meta, fragment.count_rows()) for fragment, meta in kept]
            # Each file's own schema, not the first file's: dictionary and plain strings may mix.
            tables = []
            for fragment, _meta in kept:
                table = fragment.to_table(schema=fragment.physical_schema)
                table.validate(full=True)  # as parquet.py's reader does, before any cast or copy
                if "rank" not in table.column_names:  # a part written without its rank column
                    partition = ds.get_partition_keys(fragment.partition_expression)
                    if "rank" not in partition:
                        raise TraceFileError(
                            fragment.path, "no rank column and no rank=R directory"
                        )
                    table = table.append_column(
                        "rank", pa.array([partition["rank"]] * table.num_rows, pa.int32())
                    )
                tables.append(conform_to_schema(table, fragment.path, metadata={}))
            metas_read = [meta for _fragment, meta in kept]
            live_skipped = None
            if loc.local:
                # a live run's raw logs (formats/_rawlog.py): the spans no part holds yet
                from ._rawlog import live_tables

                try:
                    live = live_tables(loc.root, metas_read)
                except FileNotFoundError as exc:  # converted meanwhile: its parts appeared
                    raise _PartVanished() from exc
                for table, meta in live:
                    tables.append(table)
                    metas_read.append(meta)
                    parts_meta.append((meta, table.num_rows))
                    skipped = (table.schema.metadata or {}).get(META_SKIPPED_ON_LOAD)
                    if skipped is not None:  # a damaged raw log (said in a warning already)
                        live_skipped = skipped
        except (pa.ArrowException, OSError) as exc:
            if _any_vanished(loc, [path for path, _size in files]):
                raise _PartVanished() from exc
            raise
    except (TraceFileError, _PartVanished):
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceFileError(
            loc.shown, f"not a readable span dataset: {type(exc).__name__}: {exc}"
        ) from exc
    tables = _with_test_column(tables, metas_read)
    # One dictionary per string column across the parts: pyarrow's group_by and joins
    # refuse differing ones ("Unifying differing dictionaries").
    table = pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]
    if check:
        check_span_rules(table, loc.shown)
    merged = merge_metadata(parts_meta)
    if live_skipped is not None:
        merged[META_SKIPPED_ON_LOAD] = live_skipped
    return table.replace_schema_metadata(merged)


#: The column a run written by ``pytest --hotspan`` gets on load: each span's test (the node
#: id its part's metadata names), so ``stats(table, by=("test", "name"))`` groups by test.
TEST_COLUMN = "test"


def _with_test_column(tables: list[pa.Table], metas: list[dict[bytes, bytes]]) -> list[pa.Table]:
    """``tables`` with a ``test`` column when any part names its test (``hotspan.part`` key
    ``test``, written by the pytest plugin): the part's test id on its rows, null on the rows of
    parts that name none; the tables as they are otherwise."""
    tests = [(meta_json(meta, META_PART) or {}).get(TEST_COLUMN) for meta in metas]
    if not any(isinstance(test, str) for test in tests):
        return tables
    out = []
    for table, test in zip(tables, tests):
        value = test if isinstance(test, str) else None
        column = pa.DictionaryArray.from_arrays(
            pa.array(
                [0] * table.num_rows if value is not None else [None] * table.num_rows, pa.int32()
            ),
            pa.array([value] if value is not None else [], pa.string()),
        )
        out.append(table.append_column(pa.field(TEST_COLUMN, column.type), column))
    return out


def _any_vanished(loc: Location, paths: list[str]) -> bool:
    import pyarrow.fs as pafs

    try:
        return any(info.type == pafs.FileType.NotFound for info in loc.fs.get_file_info(paths))
    except (pa.ArrowException, OSError):
        return False
