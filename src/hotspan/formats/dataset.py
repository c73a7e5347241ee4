"""A run as a directory: a hive-partitioned Parquet dataset, one part per flush.

    run/rank=0/part-<pid>-<token>-<n>.parquet
    run/rank=1/part-<pid>-<token>-<n>.parquet
    ...

``token`` is drawn by each writer when it starts (``new_token()``: its start time and 32
random bits, in hex): part names never repeat, within a process (several recordings one
after another), across processes whose pid repeats (a restarted container) and across
hosts. A part is never written over an existing one (``write_part`` takes its name with
``link()``). Names without a token (``part-<pid>-<n>.parquet``, older runs) still read.

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
import secrets
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from .base import TraceFileError, check_span_rules, conform_to_schema
from .._schema import meta_int, meta_json, META_TASKS, META_CLOCK, META_DROPPED, META_HOST, META_PID, META_RANK, META_START

__all__ = ["META_PART", "META_RANKS", "NoPartsError", "is_dataset", "load_dataset", "new_token", "part_path",
           "sweep_temporaries", "write_part"]

#: Per part (JSON): {"rank", "pid", "seq", "sink_dropped", and from a collector "offset_ns",
#: "offset_uncertainty_ns", "offset_applied_ns", "rtt_ns", "client_host", "received_ns"}.
META_PART = b"hotspan.part"
#: In a loaded dataset (JSON): {"<rank>": [{"pid", "host", "parts", "spans", "start_ns", "clock",
#: "dropped", "sink_dropped", "offset_ns", "offset_uncertainty_ns", "offset_applied_ns"}, ...]}.
META_RANKS = b"hotspan.ranks"

_PART_RE = re.compile(r"^part-(\d+)-(?:([0-9a-f]+)-)?(\d+)\.parquet$")
#: What ``atomic_path`` leaves behind a writer killed mid-part: ``.<part name>.<8 hex>.part``.
_TEMP_RE = re.compile(r"^\.(part-(\d+)-[0-9a-f-]*\d+\.parquet)\.[0-9a-f]{8}\.part$")
#: A temporary part untouched this long is stale whoever wrote it (a part is written in
#: well under a second; on a shared file system its writer may be on another host).
STALE_TEMP_S = 600.0
_RANK_DIR_RE = re.compile(r"^rank=(\d+)$")
_PARTITIONING_SCHEMA = pa.schema([("rank", pa.int32())])


def new_token() -> str:
    """A writer's part-name token: its start time (seconds, so a directory listing sorts a
    process's recordings in order) and 32 random bits, 16 hex digits."""
    return f"{int(time.time()) & 0xFFFFFFFF:08x}{secrets.token_hex(4)}"


def part_path(directory: str | os.PathLike, rank: int, pid: int, seq: int, token: str | None = None) -> Path:
    """Where part ``seq`` of writer ``token`` (process ``pid`` of ``rank``) lives in a dataset
    directory; without a token, the older ``part-<pid>-<seq>`` name."""
    middle = "" if token is None else f"{_check_token(token)}-"
    return Path(directory) / f"rank={int(rank)}" / f"part-{int(pid)}-{middle}{int(seq):06d}.parquet"


def _check_token(token: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{1,64}", token):
        raise ValueError(f"part token {token!r}: expected 1-64 lower-case hex digits")
    return token


def write_part(table: pa.Table, directory: str | os.PathLike, *, rank: int, pid: int, seq: int,
               token: str | None = None, part_meta: dict[str, Any] | None = None) -> Path:
    """Write one part atomically (temporary ``.``-name, fsync, then the name taken with
    ``link()``); return its path.

    ``table`` keeps its schema metadata; ``part_meta`` is added under ``hotspan.part``.
    A part is never written over: where the name exists already, ``FileExistsError`` (the
    caller decides whether that is the same batch again or a new name is needed).
    """
    from .registry import exporter_for

    path = part_path(directory, rank, pid, seq, token)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(table.schema.metadata or {})
    own = {"rank": int(rank), "pid": int(pid), "seq": int(seq)}
    if token is not None:
        own["token"] = token
    meta[META_PART] = json.dumps({**own, **(part_meta or {})}).encode()
    exporter_for(path).write(table.replace_schema_metadata(meta), path, replace=False)
    return path


def part_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``hotspan.part`` metadata of one written part (its footer only is read)."""
    import pyarrow.parquet as pq

    return meta_json(pq.read_schema(path).metadata or {}, META_PART) or {}


def sweep_temporaries(directory: str | os.PathLike, *, stale_s: float = STALE_TEMP_S) -> int:
    """Remove what writers killed mid-part left in ``directory`` (hidden temporary parts);
    return how many. A temporary part goes when its writer is a process of this host that no
    longer runs, or when nothing has touched it for ``stale_s`` seconds; one being written
    now stays. Nothing else is touched (temporaries are never counted as parts anyway)."""
    directory = Path(directory)
    removed = 0
    try:
        rank_dirs = [d for d in directory.iterdir() if _RANK_DIR_RE.match(d.name) and d.is_dir()]
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
            if age < stale_s and _alive(int(match.group(2))):
                continue
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (a pid of another host may look dead:
    the age rule in ``sweep_temporaries`` covers those only when the pid is in use here)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours
    return True


def is_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory (``load()`` reads directories as datasets)."""
    return Path(path).is_dir()


def part_files(directory: Path) -> list[Path]:
    """Every visible ``*.parquet`` under ``directory`` (hidden / ``_`` names skipped, as
    ``pyarrow.dataset`` does), ordered by rank, pid and part number."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                found.append(Path(root) / name)

    def key(path: Path) -> tuple:
        rank_dir = _RANK_DIR_RE.match(path.parent.name)
        part = _PART_RE.match(path.name)
        return (
            int(rank_dir.group(1)) if rank_dir else -1,
            str(path.parent),
            int(part.group(1)) if part else -1,
            part.group(2) or "" if part else "",
            int(part.group(3)) if part else -1,
            path.name,
        )

    return sorted(found, key=key)


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
    for meta, rows in parts:
        part = meta_json(meta, META_PART) or {}
        rank = part.get("rank", meta_int(meta, META_RANK) or 0)
        pid = part.get("pid", meta_int(meta, META_PID) or 0)
        host = (meta.get(META_HOST) or b"").decode(errors="replace")
        proc = processes.setdefault((int(rank), int(pid), host), {"pid": pid, "host": host, "parts": 0, "spans": 0})
        proc["parts"] += 1
        proc["spans"] += rows
        start = meta_int(meta, META_START)
        if start is not None:
            proc["start_ns"] = min(proc.get("start_ns", start), start)
        clock = meta_json(meta, META_CLOCK)
        if clock is not None:
            proc["clock"] = clock  # the latest part's calibration
        dropped = meta_json(meta, META_DROPPED)
        if isinstance(dropped, dict) and _dropped_total(dropped) >= _dropped_total(proc.get("dropped")):
            proc["dropped"] = dropped  # the largest: a process's counts only grow
        for key in ("sink_dropped", "offset_ns", "offset_uncertainty_ns", "offset_applied_ns", "rtt_ns"):
            if key in part:
                proc[key] = part[key]
    ranks: dict[str, list[dict[str, Any]]] = {}
    total_dropped, threads, names, starts = 0, {}, {}, []
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
    merged[META_DROPPED] = json.dumps({"total": total_dropped, "threads": threads, "names": names}).encode()
    if any(META_TASKS in meta for meta, _rows in parts):
        merged[META_TASKS] = b"1"  # a part with task spans: the whole may overlap on a thread
    if starts:
        merged[META_START] = str(min(starts)).encode()
    rank_ids = sorted({r for r, _p, _h in processes})
    pids = sorted({p for _r, p, _h in processes})
    merged[META_RANK] = ",".join(map(str, rank_ids)).encode()
    merged[META_PID] = ",".join(map(str, pids)).encode()
    merged[META_RANKS] = json.dumps(ranks).encode()
    return merged


def _dropped_total(dropped: Any) -> int:
    try:
        return int(dropped.get("total", 0))
    except (AttributeError, TypeError, ValueError):
        return -1


class NoPartsError(TraceFileError, IsADirectoryError):
    """A directory with no span parts: not a trace (a ``TraceFileError``), and a directory
    where a trace file was expected (an ``IsADirectoryError``, as the file loaders have it)."""


def load_dataset(directory: str | os.PathLike, *, check: bool = True) -> pa.Table:
    """Every part of a dataset directory (all ranks, all processes) as one table with
    exactly ``SPAN_SCHEMA``, ordered by rank, process and part; metadata merged (see
    :func:`merge_metadata`). ``check``: as for :func:`hotspan.formats.load`."""
    import pyarrow.dataset as ds

    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such dataset directory", str(directory))
    files = part_files(directory)
    if not files:
        raise NoPartsError(directory, "no span parts in this directory (expected rank=R/part-*.parquet)")
    try:
        dataset = ds.dataset(
            [str(f) for f in files], format="parquet", partition_base_dir=str(directory),
            partitioning=ds.partitioning(_PARTITIONING_SCHEMA, flavor="hive"),
        )
        parts_meta = []
        for fragment in dataset.get_fragments():
            parts_meta.append((dict(fragment.physical_schema.metadata or {}), fragment.count_rows()))
        # Each file's own schema, not the first file's: dictionary and plain strings may mix.
        tables = []
        for fragment in dataset.get_fragments():
            table = fragment.to_table(schema=fragment.physical_schema)
            table.validate(full=True)  # as parquet.py's reader does, before any cast or copy
            if "rank" not in table.column_names:  # a part written without its rank column
                partition = ds.get_partition_keys(fragment.partition_expression)
                if "rank" not in partition:
                    raise TraceFileError(fragment.path, "no rank column and no rank=R directory")
                table = table.append_column("rank", pa.array([partition["rank"]] * table.num_rows, pa.int32()))
            tables.append(conform_to_schema(table, fragment.path, metadata={}))
    except TraceFileError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceFileError(directory, f"not a readable span dataset: {type(exc).__name__}: {exc}") from exc
    # One dictionary per string column across the parts: pyarrow's group_by and joins
    # refuse differing ones ("Unifying differing dictionaries").
    table = pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]
    if check:
        check_span_rules(table, directory)
    return table.replace_schema_metadata(merge_metadata(parts_meta))

