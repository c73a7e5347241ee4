"""Compaction: a dataset's many small parts (one per flush) merged into parts of about
``target_bytes`` (128 MiB), while readers go on reading it; a local run's counter files
(``_counters/``, a file a flush) each process's into one, by the same steps
(``hotspan.counters.merge_run_counters``), their inputs deleted after the same grace.

    hotspan compact run/                # or s3://bucket/run; the library: compact("run/")

Which parts merge: those of one writer (a rank's process: the ``<pid>-<token>`` of its part
names), consecutive, each smaller than the target, gathered in order until the next would
take the group past it. A compacted part is named after its writer and the first and last
part it holds (``part-<pid>-<token>-<first>-<last>.parquet``): it sorts where its inputs did,
and keeps its writer's metadata (the latest input's: clock, dropped counts; the earliest
start; every input's own ``hotspan.part`` entry under ``inputs``). Parts of older runs (names
without a token) are left as they are.

Readers see every span exactly once at every moment; the steps, and what a reader
(``hotspan.load``, ``formats/dataset.py``) sees between them:

1. The merged part is written under a name readers skip (``.``-prefixed, locally; in memory
   or a local temporary file, for an object store). Readers: the inputs.
2. It becomes visible in ONE atomic step: ``link()`` locally, or one put of the whole object
   (an object store publishes an object when its upload completes, and there is no rename).
   Its footer lists the inputs it replaces (``hotspan.part`` key ``replaces``), so from the
   same moment a reader that sees it leaves those inputs out. Readers: the merged part.
3. After ``grace_s`` the inputs are deleted (in any order: they are hidden already). A reader
   that listed the inputs before step 2 and finds one gone when it reads it lists again, and
   sees the merged part (``load_dataset`` retries).

Readers that do not know about ``replaces`` (DuckDB, Spark, Trino reading the Parquet files
as they are) see inputs and merged part together between steps 2 and 3: give them a dataset
that is not being compacted, or count distinct ``span_id``. Run one compactor per writer at a
time: two merging the same parts at once would publish them twice (the collector compacts
each writer it received once, when that writer says it is done; ``hotspan compact`` on a
dataset a collector is still writing may meet one of those).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..formats.dataset import Location

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_TARGET_BYTES", "Compaction", "compact"]

DEFAULT_TARGET_BYTES = 128 << 20
#: How long the inputs of a merged part stay after it appeared: a reader that listed them
#: just before reads them in peace (one that takes longer lists again).
DEFAULT_GRACE_S = 2.0


@dataclass
class Compaction:
    """What one ``compact()`` did."""

    parts_before: int = 0
    parts_after: int = 0
    merged: int = 0  # input parts merged
    written: int = 0  # compacted parts written
    deleted: int = 0  # input parts deleted (and leftovers of an earlier, interrupted compaction)
    bytes_before: int = 0
    bytes_after: int = 0
    ranks: set[int] = field(default_factory=set)
    seconds: float = 0.0
    # a local run's counters (its ``_counters/`` folder: a file a flush), one file a process
    counter_files_before: int = 0
    counter_files_after: int = 0


def compact(
    dest: Any,
    *,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    grace_s: float = DEFAULT_GRACE_S,
    rank: int | None = None,
    pid: int | None = None,
    token: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Compaction:
    """Merge the small parts of the dataset ``dest`` (a directory or a URI), each writer's
    into parts of about ``target_bytes``; only ``rank``'s / ``pid``'s / ``token``'s where given.

    Readers see every span exactly once throughout (see the module's note). Raises
    ``FileNotFoundError`` for a dataset that is not there."""
    import errno

    import pyarrow.fs as pafs

    from ..formats.dataset import Location, current_parts, list_parts, location, replaced_by

    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes < 1:
        raise ValueError(f"compact(): target_bytes must be a positive int, not {target_bytes!r}")
    began = time.monotonic()
    loc = dest if isinstance(dest, Location) else location(dest)
    if loc.fs.get_file_info(loc.root).type == pafs.FileType.NotFound:
        raise FileNotFoundError(errno.ENOENT, "no such dataset", loc.shown)
    result = Compaction()
    if loc.local:  # the raw logs of recordings killed before their stop(): Parquet first
        from ._rawlog import convert_left

        convert_left(loc.root, log)
    files = list_parts(loc)
    metas = _footers(loc, files)
    replaced = replaced_by([(path, meta) for path, (meta, _size) in metas.items()])
    live = [(path, size) for path, size in files if path in metas and path not in replaced]
    result.parts_before = len(live)
    result.bytes_before = sum(size for _path, size in live)
    groups = _groups(live, metas, target_bytes, rank=rank, pid=pid, token=token)
    # An interrupted compaction's inputs (replaced, never deleted): deleted now. Only parts
    # seen replaced: a part written since the listing is never touched.
    doomed = sorted(path for path in replaced if path in metas and _wanted(path, rank, pid, token))
    merged_counters = False
    if loc.local and token is None:
        # the counters, each process's files into one (hotspan.counters: the same steps),
        # their inputs deleted below with the parts'
        from ..counters import merge_run_counters

        before_files, after_files, inputs = merge_run_counters(loc.root, rank=rank, pid=pid)
        result.counter_files_before, result.counter_files_after = before_files, after_files
        merged_counters = after_files < before_files
        doomed.extend(str(file) for file in inputs)
        if log is not None and after_files < before_files:
            log(f"counters: {before_files} files -> {after_files}")
    for writer, members in groups:
        _merge(loc, writer, members, metas)
        result.written += 1
        result.merged += len(members)
        result.ranks.add(writer[0])
        doomed.extend(path for path, _size in members)
        if log is not None:
            log(f"rank {writer[0]}: {len(members)} parts of process {writer[1]} merged")
    if doomed and (result.written or merged_counters) and grace_s > 0:
        time.sleep(grace_s)  # one grace for parts and counters: readers that listed them read
    for path in doomed:
        try:
            loc.fs.delete_file(path)
            result.deleted += 1
        except FileNotFoundError:
            pass
    _loc, after = current_parts(loc)  # counted as a reader counts them
    result.parts_after = len(after)
    result.bytes_after = sum(size for _path, size, _meta in after)
    result.seconds = time.monotonic() - began
    return result


def _wanted(path: str, rank: int | None, pid: int | None, token: str | None) -> bool:
    from ..formats.dataset import part_key

    key = part_key(path)
    return key is not None and all(
        want is None or key[name] == want
        for name, want in (("rank", rank), ("pid", pid), ("token", token))
    )


def _footers(
    loc: Location, files: list[tuple[str, int]]
) -> dict[str, tuple[dict[bytes, bytes], int]]:
    """Each part's schema metadata (its footer only), by path; parts gone meanwhile left out."""
    import pyarrow.parquet as pq

    found = {}
    for path, size in files:
        try:
            found[path] = (dict(pq.read_schema(path, filesystem=loc.fs).metadata or {}), size)
        except FileNotFoundError:
            continue
    return found


def _groups(
    live: list[tuple[str, int]],
    metas: dict[str, tuple[dict[bytes, bytes], int]],
    target_bytes: int,
    *,
    rank: int | None,
    pid: int | None,
    token: str | None,
) -> list[tuple[tuple[int, int, str], list[tuple[str, int]]]]:
    """[(writer (rank, pid, token), [(path, size), ...]), ...]: runs of consecutive small parts
    of one writer, each run at most ``target_bytes`` (or two parts, whichever is more) and of
    two parts or more."""
    from ..formats.dataset import part_key

    writers: dict[tuple[int, int, str], list[tuple[str, int]]] = {}
    seq_of: dict[str, int] = {}
    for path, size in live:
        key = part_key(path)
        if key is None or key["token"] is None:
            continue  # not a part name of ours, or an older run's name without a token
        writer = (key["rank"], key["pid"], key["token"])
        if not _wanted(path, rank, pid, token):
            continue
        writers.setdefault(writer, []).append((path, size))
        seq_of[path] = key["seq"]
    groups = []
    for writer, parts in writers.items():
        parts.sort(key=lambda item: seq_of[item[0]])
        run: list[tuple[str, int]] = []
        total = 0
        for path, size in parts:
            if size < target_bytes and (not run or total + size <= target_bytes):
                run.append((path, size))
                total += size
                continue
            if len(run) >= 2:
                groups.append((writer, run))
            run, total = [], 0
            if size < target_bytes:
                run, total = [(path, size)], size
        if len(run) >= 2:  # the writer's last run
            groups.append((writer, run))
    return groups


def _merge(
    loc: Location,
    writer: tuple[int, int, str],
    members: list[tuple[str, int]],
    metas: dict[str, tuple[dict[bytes, bytes], int]],
) -> None:
    """One compacted part from ``members`` (in order), published in one atomic step."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from .._schema import META_START, meta_int, meta_json
    from ..formats._base import conform_to_schema
    from ..formats.dataset import META_PART, part_key, write_part

    rank, pid, token = writer
    tables, inputs, starts = [], [], []
    for path, _size in members:
        meta = metas[path][0]
        tables.append(conform_to_schema(pq.read_table(path, filesystem=loc.fs), path, metadata={}))
        inputs.append(meta_json(meta, META_PART) or {})
        start = meta_int(meta, META_START)
        if start is not None:
            starts.append(start)
    latest = dict(
        metas[members[-1][0]][0]
    )  # the latest part: clock, dropped counts (they only grow)
    latest_part = meta_json(latest, META_PART) or {}
    latest.pop(META_PART, None)
    if starts:
        latest[META_START] = str(min(starts)).encode()
    table = pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]
    first, last = part_key(members[0][0]), part_key(members[-1][0])
    assert first is not None and last is not None  # _groups takes parts of ours only
    part_meta = {
        k: v for k, v in latest_part.items() if k not in ("rank", "pid", "seq", "token", "kind")
    }
    part_meta.update(
        {
            "seq_last": last["last"] if last["last"] is not None else last["seq"],
            "replaces": [path.rpartition("/")[2] for path, _size in members],
            "inputs": inputs,
            "compacted_ns": time.time_ns(),
            "compacted_by": os.getpid(),
        }
    )
    json.dumps(part_meta)  # fails here, not half-way through the write, if something is not JSON
    write_part(
        table.replace_schema_metadata(latest),
        loc,
        rank=rank,
        pid=pid,
        seq=first["seq"],
        token=token,
        part_meta=part_meta,
        last=part_meta["seq_last"],
        encoding="file",  # parts that stay: zstd's smaller files, written once, off the flusher
    )
