"""A run as a directory: a hive-partitioned Parquet dataset, one part per flush.

    run/rank=0/part-<pid>-<n>.parquet
    run/rank=1/part-<pid>-<n>.parquet
    ...

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
from pathlib import Path
from typing import Any

import pyarrow as pa

from .base import TraceFileError, check_span_rules, conform_to_schema
from .._schema import meta_int, meta_json, META_CLOCK, META_DROPPED, META_HOST, META_PID, META_RANK, META_START

__all__ = ["META_PART", "META_RANKS", "NoPartsError", "is_dataset", "load_dataset", "part_path", "write_part"]

#: Per part (JSON): {"rank", "pid", "seq", "sink_dropped", and from a collector "offset_ns",
#: "offset_uncertainty_ns", "offset_applied_ns", "rtt_ns", "client_host", "received_ns"}.
META_PART = b"hotspan.part"
#: In a loaded dataset (JSON): {"<rank>": [{"pid", "host", "parts", "spans", "start_ns", "clock",
#: "dropped", "sink_dropped", "offset_ns", "offset_uncertainty_ns", "offset_applied_ns"}, ...]}.
META_RANKS = b"hotspan.ranks"

_PART_RE = re.compile(r"^part-(\d+)-(\d+)\.parquet$")
_RANK_DIR_RE = re.compile(r"^rank=(\d+)$")
_PARTITIONING_SCHEMA = pa.schema([("rank", pa.int32())])


def part_path(directory: str | os.PathLike, rank: int, pid: int, seq: int) -> Path:
    """Where part ``seq`` of process ``pid`` of ``rank`` lives in a dataset directory."""
    return Path(directory) / f"rank={int(rank)}" / f"part-{int(pid)}-{int(seq):06d}.parquet"


def write_part(table: pa.Table, directory: str | os.PathLike, *, rank: int, pid: int, seq: int,
               part_meta: dict[str, Any] | None = None) -> Path:
    """Write one part atomically (temporary ``.``-name, fsync, rename); return its path.

    ``table`` keeps its schema metadata; ``part_meta`` is added under ``hotspan.part``.
    Writing the same (rank, pid, seq) again replaces the part (a resent batch is idempotent).
    """
    from .registry import exporter_for

    path = part_path(directory, rank, pid, seq)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(table.schema.metadata or {})
    meta[META_PART] = json.dumps({"rank": int(rank), "pid": int(pid), "seq": int(seq), **(part_meta or {})}).encode()
    exporter_for(path).write(table.replace_schema_metadata(meta), path)
    return path


def is_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory (``load()`` reads directories as datasets)."""
    return Path(path).is_dir()


def _part_files(directory: Path) -> list[Path]:
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
            int(part.group(2)) if part else -1,
            path.name,
        )

    return sorted(found, key=key)


def merge_metadata(parts: list[tuple[dict[bytes, bytes], int]]) -> dict[bytes, bytes]:
    """One schema metadata for a dataset from its parts' (metadata, rows), in part order.

    The first part's metadata (lowest rank) stands for the whole; the start time is the
    earliest of all; dropped counts are summed over processes (each process's latest count,
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
        if isinstance(dropped, dict):
            proc["dropped"] = dropped
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
    if starts:
        merged[META_START] = str(min(starts)).encode()
    rank_ids = sorted({r for r, _p, _h in processes})
    pids = sorted({p for _r, p, _h in processes})
    merged[META_RANK] = ",".join(map(str, rank_ids)).encode()
    merged[META_PID] = ",".join(map(str, pids)).encode()
    merged[META_RANKS] = json.dumps(ranks).encode()
    return merged


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
    files = _part_files(directory)
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
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if check:
        check_span_rules(table, directory)
    return table.replace_schema_metadata(merge_metadata(parts_meta))

