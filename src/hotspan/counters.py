"""Counters: values at a time (``hotspan.counter(name, value)``, and the process's resident set
size sampled by the drain thread with ``configure(counters=SECONDS)``), a table of their own
(``COUNTER_SCHEMA``: ``time_ns``, ``name``, ``value``, ``rank``, ``pid``).

Where they go:

- :func:`drain_counters` returns the values recorded since its last call.
- A recording into a directory writes them under ``DIR/_counters/`` (files
  ``_part-r<R>-<pid>-<token>-<n>.counters``, Parquet inside): pyarrow, pandas and Spark skip
  ``_``-folders, DuckDB's and polars' ``*.parquet`` globs never match them, so the run still
  reads as one span table (polars reading the bare directory needs
  ``hidden_file_prefix="_"``).
- ``hotspan.export(spans, "t.json", counters=table)`` writes Chrome ``"ph":"C"`` events,
  ``.pftrace`` Perfetto counter tracks.
- :func:`load_counters` reads any of these back; :func:`counter_stats` gives a counter's
  min/mean/max while the spans of each name ran.

Needs pyarrow and numpy (``import hotspan`` loads this module only when asked).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from . import _api, _lifecycle, _native
from ._schema import COUNTER_SCHEMA
from .formats._base import TraceFileError

__all__ = [
    "COUNTER_SCHEMA",
    "RUN_FOLDER",
    "counter_stats",
    "drain_counters",
    "load_counters",
]

#: The folder of a run directory that holds its counters.
RUN_FOLDER = "_counters"
#: Their files' extension: Parquet inside, a name no ``*.parquet`` glob matches.
SUFFIX = ".counters"


def empty() -> pa.Table:
    """A counter table with no rows (built without Python lists: no pandas import)."""
    return pa.Table.from_batches([], schema=COUNTER_SCHEMA)


def _from_core() -> pa.Table:
    """What the core's drain side holds now (a sweep first), as a counter table."""
    times_b, values_b, pairs_b, _tids_b, n = _native._counters_take()
    if not n:
        return empty()
    times = np.frombuffer(times_b, np.int64)
    values = np.frombuffer(values_b, np.float64)
    pairs = np.frombuffer(pairs_b, np.uint32)
    unique, inverse = np.unique(pairs, return_inverse=True)
    names = pa.array([_native._pair_strings(int(p))[0] for p in unique], pa.string())
    order = np.argsort(times, kind="stable")
    return pa.Table.from_arrays(
        [
            pa.array(times[order]),
            names.take(pa.array(inverse[order].astype(np.int64))),
            pa.array(values[order]),
            pa.array(np.full(n, _api.rank(), np.int32)),
            pa.array(np.full(n, os.getpid(), np.int64)),
        ],
        schema=COUNTER_SCHEMA,
    )


# Every consumer (drain_counters(), each recording into a directory) has its own queue:
# each sees every value recorded while it was there. A value taken from the core while no
# consumer is there waits for drain_counters().
class _Queue:
    """What one consumer has not taken yet: tables, oldest first, and their rows."""

    __slots__ = ("rows", "tables")

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.rows = 0


_lock = threading.Lock()
_queues: dict[object, _Queue] = {}
_USER = "drain_counters"

#: The counter values a consumer's queue holds at most: as many as the core's own store
#: (``HS_COUNTERS_MAX_ROWS``, 32 MiB). A consumer that stops taking (``drain_counters()``
#: called once, then a recording into a directory for days) must not grow the process
#: without bound: the newest values past it are dropped from that queue, as the core drops
#: them, and counted (``dropped(detail=True)["counters"]``).
MAX_QUEUED_ROWS = 1 << 20


def _pull_locked() -> None:
    table = _from_core()
    if table.num_rows:
        if not _queues:
            _queues[_USER] = _Queue()
        for queue in _queues.values():
            room = max(MAX_QUEUED_ROWS - queue.rows, 0)
            kept = table if table.num_rows <= room else table.slice(0, room)  # oldest first
            if kept.num_rows < table.num_rows:
                _native._counters_count_drops(table.num_rows - kept.num_rows)
            if kept.num_rows:
                queue.tables.append(kept)
                queue.rows += kept.num_rows


def take(consumer: object) -> pa.Table:
    """The counters ``consumer`` has not seen yet (it is registered at its first call)."""
    with _lock:
        _queues.setdefault(consumer, _Queue())  # first: what the core holds now is its, too
        _pull_locked()
        tables = _queues[consumer].tables
        _queues[consumer] = _Queue()
    if not tables:
        return empty()
    table = pa.concat_tables(tables)
    return table.take(pa.array(np.argsort(table.column("time_ns").to_numpy(), kind="stable")))


def detach(consumer: object) -> None:
    with _lock:
        _queues.pop(consumer, None)


def drain_counters() -> pa.Table:
    """Every counter value recorded since the last call, oldest first."""
    return take(_USER)


def _after_fork_child() -> None:
    global _lock
    _lock = threading.Lock()
    _queues.clear()


_lifecycle.on_fork("counters", after_in_child=_after_fork_child)


# --------------------------------------------------------------------------- run directories


#: The footer key of a merged counters file (:func:`merge_run_counters`): the names of the
#: files it holds, which readers leave out, so that a merge seen before its inputs are
#: deleted still counts every value once.
REPLACES_KEY = b"hotspan.counters.replaces"
#: How a merged file's name ends (before SUFFIX): only such files' footers are read for
#: REPLACES_KEY.
MERGED_MARK = "-merged"
#: How often load_counters() lists a run's counters again when a file it listed is deleted
#: (a compaction's inputs) before it reads it.
LIST_ATTEMPTS = 5
_PART_NAME = re.compile(r"^_part-r(-?\d+)-(\d+)-[0-9a-f]+-[^.]+" + re.escape(SUFFIX) + "$")


def write_run_part(directory: str | os.PathLike[str], table: pa.Table, *, seq: int) -> Path | None:
    """Write ``table`` (counters) into the run ``directory``'s counter folder, atomically;
    ``None`` when there is nothing to write."""
    import pyarrow.parquet as pq

    if not table.num_rows:
        return None
    folder = Path(directory) / RUN_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    rank = int(table.column("rank")[0].as_py())
    pid = int(table.column("pid")[0].as_py())
    name = f"_part-r{rank}-{pid}-{uuid.uuid4().hex[:8]}-{seq}{SUFFIX}"
    tmp = folder / f".{name}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, folder / name)
    return folder / name


# --------------------------------------------------------------------------- reading


def _check_columns(table: pa.Table, path: Path) -> pa.Table:
    names = set(table.column_names)
    if not set(COUNTER_SCHEMA.names) <= names:
        if "span_id" in names:
            raise TraceFileError(
                path,
                f"holds spans, not counters (counters are in a run directory's "
                f"{RUN_FOLDER}/ folder, or a .json/.pftrace export written with counters=)",
            )
        missing = ", ".join(n for n in COUNTER_SCHEMA.names if n not in names)
        raise TraceFileError(path, f"not a counter table (no column {missing})")
    try:
        return table.select(COUNTER_SCHEMA.names).cast(COUNTER_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TraceFileError(path, f"counter columns of the wrong type ({exc})") from None


def _concat_sorted(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return empty()
    table = pa.concat_tables(tables)
    keys = [("time_ns", "ascending"), ("rank", "ascending"), ("pid", "ascending")]
    import pyarrow.compute as pc

    return table.take(pc.sort_indices(table, sort_keys=keys))


def load_counters(path: str | os.PathLike[str]) -> pa.Table:
    """Read counters back: a run directory (its ``_counters/`` folder; a run without counters
    gives an empty table), a counters file (``.counters``, or a ``.parquet``/``.arrow``
    counter table), or a Chrome JSON (``.json``, ``.json.gz``: its ``"ph":"C"`` events) or
    Perfetto (``.pftrace``: its counter tracks) trace.

    :raises OSError: a missing file.
    :raises hotspan.formats.TraceFileError: (a ``ValueError``) naming the file and what is
        wrong with it.
    """
    from .formats._uri import local_path

    path = Path(local_path(path))
    if path.is_dir():
        folder = path if path.name == RUN_FOLDER else path / RUN_FOLDER
        for attempt in range(LIST_ATTEMPTS):
            try:
                live, _replaced = _current_files(folder)
                return _concat_sorted([_read_table_file(f) for f in live])
            except FileNotFoundError:
                if attempt == LIST_ATTEMPTS - 1:
                    raise
                # a file listed was deleted before it was read: a compaction's input, its
                # values in the merged file now; list again
        raise AssertionError("unreachable")
    if not path.exists():
        raise FileNotFoundError(2, "no such file", str(path))
    name = path.name.lower()
    if name.endswith((".json", ".json.gz")):
        return _concat_sorted([_from_chrome(path)])
    if name.endswith((".pftrace", ".perfetto-trace")):
        from .formats._perfetto_counters import read_counters

        return _concat_sorted([read_counters(path)])
    if name.endswith((SUFFIX, ".parquet", ".arrow", ".feather")):
        return _read_table_file(path)
    raise TraceFileError(
        path,
        f"unknown counters file extension; supported: a run directory, {SUFFIX}, "
        ".parquet, .arrow, .feather, .json, .json.gz, .pftrace",
    )


def _current_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """A run's counter files as a reader takes them: (those to read, those a merged file
    replaces). Only merged files' footers are read (FileNotFoundError: one was deleted since
    the listing)."""
    import pyarrow.parquet as pq

    files = sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
    replaced: set[str] = set()
    for file in files:
        if file.name.endswith(MERGED_MARK + SUFFIX):
            try:
                metadata = pq.read_schema(file).metadata or {}
            except pa.ArrowInvalid as exc:
                raise TraceFileError(file, f"not a readable counter table ({exc})") from None
            if REPLACES_KEY in metadata:
                replaced.update(json.loads(metadata[REPLACES_KEY]))
    return [f for f in files if f.name not in replaced], [f for f in files if f.name in replaced]


def merge_run_counters(
    directory: str | os.PathLike[str], *, rank: int | None = None, pid: int | None = None
) -> tuple[int, int, list[Path]]:
    """Merge each process's counter files in the run ``directory`` (its ``_counters/``
    folder: a file a flush) into one; only ``rank``'s / ``pid``'s where given. Returns
    (files before, files after, files to delete): the merged files' inputs, and those an
    interrupted compaction left. ``recording.compaction.compact`` deletes them after its
    grace, with the span parts' own inputs.

    Readers (:func:`load_counters`) see every value once throughout: the merged file
    appears under its name in one step (a rename) and names the files it replaces in its
    footer, which readers leave out from then on; a reader that finds a listed file gone
    lists again. Run one compaction per run at a time."""
    import pyarrow.parquet as pq

    folder = Path(directory) / RUN_FOLDER
    live, doomed = _current_files(folder)
    groups: dict[tuple[int, int], list[Path]] = {}
    for file in live:
        match = _PART_NAME.match(file.name)
        if match is None:
            continue  # not ours to merge: left as it is
        key = (int(match.group(1)), int(match.group(2)))
        if (rank is None or key[0] == rank) and (pid is None or key[1] == pid):
            groups.setdefault(key, []).append(file)
    after = len(live)
    for (group_rank, group_pid), files in groups.items():
        if len(files) < 2:
            continue
        table = _concat_sorted([_read_table_file(f) for f in files])
        metadata = {REPLACES_KEY: json.dumps([f.name for f in files]).encode()}
        table = table.replace_schema_metadata(metadata)
        name = f"_part-r{group_rank}-{group_pid}-{uuid.uuid4().hex[:8]}{MERGED_MARK}{SUFFIX}"
        tmp = folder / f".{name}.tmp"
        try:
            pq.write_table(table, tmp, compression="zstd")
            with open(tmp, "rb") as written_file:
                os.fsync(written_file.fileno())  # its values on disk before its inputs go
            os.replace(tmp, folder / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        after -= len(files) - 1
        doomed.extend(files)
    return len(live), after, doomed


def _read_table_file(path: Path) -> pa.Table:
    try:
        if path.name.lower().endswith((".arrow", ".feather")):
            import pyarrow.feather as feather

            table = feather.read_table(path)
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)):
            raise
        raise TraceFileError(path, f"not a readable counter table ({exc})") from None
    return _check_columns(table, path)


# --------------------------------------------------------------------------- Chrome JSON


def _ts_text(delta_ns: int) -> str:
    """Nanoseconds as Chrome's microseconds, exactly (three decimals)."""
    sign = "-" if delta_ns < 0 else ""
    delta_ns = abs(delta_ns)
    return f"{sign}{delta_ns // 1000}.{delta_ns % 1000:03d}"


def chrome_events(
    counters: pa.Table, start_ns: int, json_pid: dict[tuple[int, int], int]
) -> tuple[bytes, int]:
    """Chrome ``"ph":"C"`` event lines (each led by ``,\\n``) for ``counters``, times relative
    to ``start_ns``; ``json_pid`` maps (pid, rank) to the trace's pid (a process without spans
    gets its own pid and a ``process_name`` event). Returns (text, values skipped: NaN and
    infinities, which JSON cannot hold)."""
    counters = _check_columns(counters, Path("counters="))
    out: list[str] = []
    skipped = 0
    pids = dict(json_pid)
    used = set(pids.values())
    # (time_ns, name, value, rank, pid): the schema's order
    rows = zip(*(counters.column(c).to_pylist() for c in COUNTER_SCHEMA.names))
    for time_ns, name, value, rank, pid in rows:
        key = (pid, rank)
        if key not in pids:
            jp = pid if 0 <= pid <= 0xFFFFFFFF and pid not in used else max(used | {0}) + 1
            used.add(jp)
            pids[key] = jp
            meta = {
                "ph": "M",
                "name": "process_name",
                "pid": jp,
                "tid": 0,
                "args": {"name": f"rank {rank}", "hotspan.pid": pid, "hotspan.rank": rank},
            }
            out.append(",\n" + json.dumps(meta, separators=(",", ":")))
        if not math.isfinite(value):
            skipped += 1
            continue
        number = int(value) if value.is_integer() and abs(value) < 2**53 else value
        out.append(
            f',\n{{"ph":"C","ts":{_ts_text(time_ns - start_ns)},"pid":{pids[key]},"tid":0,'
            f'"name":{json.dumps(name, ensure_ascii=False)},"args":{{"value":{json.dumps(number)}}}}}'
        )
    return "".join(out).encode(), skipped


def _from_chrome(path: Path) -> pa.Table:
    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            doc = json.load(f)
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError)):
            raise
        raise TraceFileError(path, f"not a Chrome JSON trace ({exc})") from None
    if isinstance(doc, dict):
        events = doc.get("traceEvents", [])
        other = doc.get("otherData") or {}
    elif isinstance(doc, list):
        events, other = doc, {}
    else:
        raise TraceFileError(path, f"not a Chrome JSON trace (a {type(doc).__name__})")
    start = other.get("hotspan.trace_start_ns", 0) if isinstance(other, dict) else 0
    start = start if isinstance(start, int) else 0
    processes: dict[Any, tuple[int, int]] = {}
    times: list[int] = []
    names: list[str] = []
    values: list[float] = []
    keys: list[Any] = []
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        ph, args = event.get("ph"), event.get("args")
        if ph == "M" and event.get("name") == "process_name" and isinstance(args, dict):
            pid, rank = args.get("hotspan.pid"), args.get("hotspan.rank")
            if isinstance(pid, int) and isinstance(rank, int):
                processes[event.get("pid")] = (pid, rank)
        if ph != "C" or not isinstance(args, dict):
            continue
        ts = event.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            continue
        name = str(event.get("name", ""))
        for key, value in args.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            times.append(start + round(ts * 1000))
            names.append(name if key == "value" else f"{name} {key}")
            values.append(float(value))
            keys.append(event.get("pid"))
    ranks, pids = [], []
    for key in keys:
        pid, rank = processes.get(key, (key if isinstance(key, int) else 0, 0))
        pids.append(pid)
        ranks.append(rank)
    return pa.Table.from_arrays(
        [
            pa.array(times, pa.int64()),
            pa.array(names, pa.string()),
            pa.array(values, pa.float64()),
            pa.array(ranks, pa.int32()),
            pa.array(pids, pa.int64()),
        ],
        schema=COUNTER_SCHEMA,
    )


# --------------------------------------------------------------------------- statistics


def _range_tables(values: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sparse tables for range minimum and maximum (level k: over 2**k values)."""
    mins, maxs = [values], [values]
    k = 1
    while (1 << k) <= len(values):
        half = 1 << (k - 1)
        mins.append(np.minimum(mins[-1][:-half], mins[-1][half:]))
        maxs.append(np.maximum(maxs[-1][:-half], maxs[-1][half:]))
        k += 1
    return mins, maxs


def counter_stats(spans: Any, counters: Any, *, counter: str | None = None) -> pa.Table:
    """A counter's values while the spans of each name ran: a row per span name and counter
    (``counter``: only that one), largest ``max`` first.

    The values in effect during a span are the last value recorded at or before its start
    (a counter holds its value until the next) and every value recorded until its end, in
    the same process (pid and rank). Columns: ``name`` (the spans'), ``counter``, ``spans``
    (spans of the name with a value in effect), ``values`` (values counted, each once per span
    it was in effect in), ``min``, ``mean`` (over those values), ``max``.

    ``spans``: a span table or a path (:func:`hotspan.load`); ``counters``: a counter table or
    a path (:func:`load_counters`).
    """
    import pyarrow.compute as pc

    if not isinstance(spans, pa.Table):
        from .formats import load

        spans = load(spans)
    if not isinstance(counters, pa.Table):
        counters = load_counters(counters)
    counters = _check_columns(counters, Path("counters"))
    if counter is not None:
        counters = counters.filter(pc.equal(counters.column("name"), counter))
    span_names = spans.column("name").combine_chunks()
    if pa.types.is_dictionary(span_names.type):
        span_names = span_names.cast(pa.string())
    name_values, name_codes = np.unique(
        np.asarray(span_names.to_pylist(), dtype=object), return_inverse=True
    )
    starts = spans.column("start_ns").to_numpy()
    ends = spans.column("end_ns").to_numpy()
    span_pid = spans.column("pid").to_numpy()
    span_rank = spans.column("rank").to_numpy()
    rows: list[tuple[str, str, int, int, float, float, float]] = []
    c_names = counters.column("name").to_pylist()
    c_time = counters.column("time_ns").to_numpy()
    c_value = counters.column("value").to_numpy()
    c_pid = counters.column("pid").to_numpy()
    c_rank = counters.column("rank").to_numpy()
    nnames = len(name_values)
    for cname in sorted(set(c_names)):
        mask = np.asarray([n == cname for n in c_names], dtype=bool)
        total_min = np.full(nnames, np.inf)
        total_max = np.full(nnames, -np.inf)
        total_sum = np.zeros(nnames)
        total_values = np.zeros(nnames, np.int64)
        total_spans = np.zeros(nnames, np.int64)
        for pid, rank in sorted(set(zip(c_pid[mask].tolist(), c_rank[mask].tolist()))):
            sel = mask & (c_pid == pid) & (c_rank == rank)
            order = np.argsort(c_time[sel], kind="stable")
            times, values = c_time[sel][order], c_value[sel][order]
            which = (span_pid == pid) & (span_rank == rank)
            if not which.any():
                continue
            lo = np.maximum(np.searchsorted(times, starts[which], "right") - 1, 0)
            hi = np.searchsorted(times, ends[which], "right")
            ok = hi > lo
            if not ok.any():
                continue
            lo, hi, codes = lo[ok], hi[ok], name_codes[which][ok]
            count = hi - lo
            level = np.floor(np.log2(count)).astype(np.int64)
            mins, maxs = _range_tables(values)
            span_min = np.empty(len(lo))
            span_max = np.empty(len(lo))
            for k in np.unique(level):
                at = level == k
                a, b = lo[at], hi[at] - (1 << int(k))
                span_min[at] = np.minimum(mins[k][a], mins[k][b])
                span_max[at] = np.maximum(maxs[k][a], maxs[k][b])
            prefix = np.concatenate([[0.0], np.cumsum(values)])
            span_sum = prefix[hi] - prefix[lo]
            np.minimum.at(total_min, codes, span_min)
            np.maximum.at(total_max, codes, span_max)
            np.add.at(total_sum, codes, span_sum)
            np.add.at(total_values, codes, count)
            np.add.at(total_spans, codes, 1)
        for code in np.flatnonzero(total_spans):
            rows.append(
                (
                    str(name_values[code]),
                    cname,
                    int(total_spans[code]),
                    int(total_values[code]),
                    float(total_min[code]),
                    float(total_sum[code] / total_values[code]),
                    float(total_max[code]),
                )
            )
    rows.sort(key=lambda r: (-r[6], r[0], r[1]))
    columns: list[tuple[Any, ...]] = list(zip(*rows)) if rows else [()] * 7
    return pa.table(
        {
            "name": pa.array(columns[0], pa.string()),
            "counter": pa.array(columns[1], pa.string()),
            "spans": pa.array(columns[2], pa.int64()),
            "values": pa.array(columns[3], pa.int64()),
            "min": pa.array(columns[4], pa.float64()),
            "mean": pa.array(columns[5], pa.float64()),
            "max": pa.array(columns[6], pa.float64()),
        }
    )


# --------------------------------------------------------------------------- a view


def counter_lanes(
    counters: pa.Table, start_ns: int | None = None, end_ns: int | None = None, width: int = 1200
) -> dict[str, Any]:
    """What a ``width``-pixel view of ``[start_ns, end_ns)`` shows of each counter (a lane
    per name, rank and pid): per pixel that holds values, their ``min``, ``max`` and
    ``last``; ``before``, the value in effect at the window's start (None: none yet); the
    lane's ``min``/``max`` over both, for its scale. The answer's size depends on ``width``
    and the lanes, not on the values. Default window: the counters' own span."""
    if width < 1:
        raise ValueError(f"width must be at least 1, not {width}")
    times_all = counters.column("time_ns").to_numpy()
    if start_ns is None:
        start_ns = int(times_all.min()) if len(times_all) else 0
    if end_ns is None:
        end_ns = int(times_all.max()) + 1 if len(times_all) else start_ns + 1
    if end_ns <= start_ns:
        raise ValueError(f"end_ns ({end_ns}) must be after start_ns ({start_ns})")
    per = (end_ns - start_ns) / width
    names = counters.column("name").to_pylist()
    ranks = counters.column("rank").to_numpy()
    pids = counters.column("pid").to_numpy()
    values_all = counters.column("value").to_numpy()
    lanes = []
    keys = sorted(set(zip(names, ranks.tolist(), pids.tolist())), key=lambda k: (k[1], k[2], k[0]))
    name_array = np.asarray(names, dtype=object)
    for name, rank, pid in keys:
        sel = (name_array == name) & (ranks == rank) & (pids == pid)
        order = np.argsort(times_all[sel], kind="stable")
        times, values = times_all[sel][order], values_all[sel][order]
        first = int(np.searchsorted(times, start_ns, "left"))
        last = int(np.searchsorted(times, end_ns, "left"))
        before = float(values[first - 1]) if first > 0 else None
        inside_t, inside_v = times[first:last], values[first:last]
        pixels = []
        if len(inside_t):
            xs = np.minimum(((inside_t - start_ns) / per).astype(np.int64), width - 1)
            cuts = np.flatnonzero(np.diff(xs)) + 1
            starts = np.concatenate([[0], cuts])
            ends = np.concatenate([cuts, [len(xs)]])
            mins = np.minimum.reduceat(inside_v, starts)
            maxs = np.maximum.reduceat(inside_v, starts)
            lasts = inside_v[ends - 1]
            pixels = [
                {"x": int(x), "min": _finite(lo), "max": _finite(hi), "last": _finite(la)}
                for x, lo, hi, la in zip(
                    xs[starts].tolist(), mins.tolist(), maxs.tolist(), lasts.tolist()
                )
            ]
        shown = [
            v
            for v in [*inside_v.tolist(), *([before] if before is not None else [])]
            if math.isfinite(v)
        ]
        lanes.append(
            {
                "name": name,
                "rank": int(rank),
                "pid": int(pid),
                "before": _finite(before) if before is not None else None,
                "min": min(shown) if shown else None,
                "max": max(shown) if shown else None,
                "pixels": pixels,
            }
        )
    return {
        "start_ns": int(start_ns),
        "end_ns": int(end_ns),
        "width": width,
        "ns_per_pixel": per,
        "lanes": lanes,
    }


def _finite(value: float) -> float | None:
    """JSON holds no NaN or infinity: those are None."""
    return value if math.isfinite(value) else None
