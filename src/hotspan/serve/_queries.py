"""What the API answers, computed from a run's Parquet files without ever holding the
whole run for a request of a page of spans; statistics, phases and comparisons come from
the library (``hotspan.stats``, ``hotspan.phases``, ``hotspan.compare``), given the run's
path.

Results are cached per run version (its files' sizes and modification times), so a page
that asks for the same statistics twice computes them once.
"""

from __future__ import annotations

import json
import math
import queue
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar, cast

from ._runs import HEAVY, Run

if TYPE_CHECKING:
    import pyarrow as pa

    from ..analysis.filters import SpanFilter

_T = TypeVar("_T")

__all__ = [
    "DOWNLOAD_FORMATS",
    "SPAN_FIELDS",
    "Warmer",
    "cached",
    "compare_rows",
    "critical_segments",
    "download_path",
    "phases_rows",
    "plain",
    "rank_steps_columns",
    "ranks_answer",
    "spans_page",
    "step_window",
    "stats_rows",
    "timeline_html",
    "timeline_index",
    "index_path",
    "timeline_view",
    "flame_html",
    "diff_flame_page",
]

#: format parameter -> (file extension, media type).
DOWNLOAD_FORMATS = {
    "pftrace": (".pftrace", "application/octet-stream"),
    "json": (".json", "application/json"),
    "json.gz": (".json.gz", "application/gzip"),
    "parquet": (".parquet", "application/vnd.apache.parquet"),
    "speedscope": (".speedscope.json", "application/json"),
    "folded": (".folded", "text/plain; charset=utf-8"),
}

#: The columns of a span as /spans returns it (the span table's, strings plain).
SPAN_FIELDS = (
    "span_id",
    "parent_id",
    "name",
    "category",
    "start_ns",
    "end_ns",
    "duration_ns",
    "self_ns",
    "wait_ns",
    "depth",
    "thread_id",
    "thread_name",
    "pid",
    "rank",
    "arg",
    "error",
)

#: Runs up to this many spans get the HTML report's timeline on their page (it holds the
#: run in memory while it is drawn); larger ones point to Perfetto UI instead.
TIMELINE_MAX_SPANS = 500_000

_cache: "OrderedDict[tuple[Any, ...], Any]" = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_ENTRIES = 64


def _lookup(key: tuple[Any, ...]) -> tuple[bool, Any]:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return True, _cache[key]
    return False, None


def cached(key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    """``compute()``, remembered under ``key`` (which holds the run's signature) among the
    last ``_CACHE_ENTRIES`` results; computed under ``HEAVY``."""
    found, value = _lookup(key)
    if found:
        return cast(_T, value)
    with HEAVY:
        found, value = _lookup(key)  # computed meanwhile by the request this one waited for
        if found:
            return cast(_T, value)
        value = compute()
    return _remember(key, value)


def _remember(key: tuple[Any, ...], value: _T) -> _T:
    """Keep ``value`` under ``key`` among the last ``_CACHE_ENTRIES`` results; return it."""
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return value


def plain(value: Any) -> Any:
    """A value JSON can carry: NaN and infinities become null (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- the library, given a path
# The run's path goes to the library as it is: the analysis layer (analysis/_engine.py) decides
# in memory or streamed, by the one rule the CLI follows too.


def make_filter(**fields: Any) -> SpanFilter:
    """The library's span filter from the API's query parameters (None: not asked)."""
    from ..analysis.filters import SpanFilter

    return SpanFilter(
        names=(fields["name"],) if fields.get("name") is not None else (),
        categories=(fields["category"],) if fields.get("category") is not None else (),
        ranks=(fields["rank"],) if fields.get("rank") is not None else None,
        threads=(fields["thread"],) if fields.get("thread") is not None else (),
        since=fields.get("since"),
        until=fields.get("until"),
        min_ns=fields.get("min_ns"),
    )


def _stats(run: Run, by: Sequence[str] | None, span_filter: Any) -> tuple[tuple[str, ...], Any]:
    from ..analysis._engine import open_spans

    with open_spans(run.source, span_filter) as spans:
        keys = spans.default_by() if by is None else tuple(by)
        return keys, spans.stats(keys)


def _phases(run: Run) -> pa.Table:
    import hotspan

    return hotspan.phases(run.source)


def _compare(base: Run, new: Run, **options: Any) -> pa.Table:
    import hotspan

    return hotspan.compare(base.source, new.source, **options)


# --------------------------------------------------------------------------- answers


def timeline_view(
    run: Run, start_ns: int | None, end_ns: int | None, width: int, ranks: Sequence[int] | None
) -> bytes:
    """What a ``width``-pixel view of the run's window shows (``hotspan.analysis.timeline``),
    as the JSON text the library writes from the answer's columns.

    A zoomed-out view (pixels a bin of the run's index long or more) comes from the run's
    :class:`~hotspan.analysis.timeline.TimelineIndex`, once it is built: milliseconds, whatever
    the run's size. Any other view, or one asked before the index is ready, reads the run's
    Parquet files with the window pushed down; the first such request starts the index's
    build on a thread of its own. Cached like the other answers, but computed outside
    ``HEAVY``: its memory is one batch and the answer (bounded by ``width`` and the tracks),
    and a pan or zoom must not wait behind a run's statistics."""
    from ..analysis.timeline import timeline

    key = ("timeline", run.id, run.signature, start_ns, end_ns, width, tuple(ranks or ()))
    with _cache_lock:
        if key in _views:
            _views.move_to_end(key)
            return _views[key]
    index = timeline_index(run, wait=False)
    if index is None and _from_index(run, start_ns, end_ns, width):
        # the index being built answers this view: waiting for it is no longer than the
        # scan of every span that would answer it otherwise, and the scan would be a second one
        index = timeline_index(run)
    view: bytes | None = (
        index.view(start_ns, end_ns, width, ranks=ranks, encoded=True)
        if index is not None
        else None
    )
    if view is None:
        files = [str(path) for path, _rank in run.parts]
        window = index.window if index is not None else None
        if window is not None:  # the run's window known: no footers read again
            start_ns = window[0] if start_ns is None else start_ns
            end_ns = max(window[1], start_ns + 1) if end_ns is None else end_ns
        view = timeline(files, start_ns, end_ns, width, ranks=ranks, encoded=True)
    with _cache_lock:
        _views[key] = view
        while len(_views) > _VIEW_ENTRIES:
            _views.popitem(last=False)
    return view


#: The last timeline answers (a page's pan back, a second tab): a few, apart from the other
#: answers, as JSON text (a whole-run view of 128 tracks is about 9 MB of it).
_views: "OrderedDict[tuple[Any, ...], bytes]" = OrderedDict()
_VIEW_ENTRIES = 8


def _from_index(run: Run, start_ns: int | None, end_ns: int | None, width: int) -> bool:
    """Whether the run's index answers this view (its pixels a bin of the index or longer)."""
    from ..analysis.timeline import INDEX_BINS, window_of

    try:
        first, last = window_of([str(path) for path, _rank in run.parts])
    except (OSError, ValueError):  # the scan that follows reports it
        return False
    start = first if start_ns is None else start_ns
    end = max(last, start + 1) if end_ns is None else end_ns
    return width > 0 and (end - start) / width >= (max(last, first + 1) - first) / INDEX_BINS


# --------------------------------------------------------------------------- across ranks
# hotspan.ranks_summary / rank_steps / critical_path, given the run's path; serve only asks.

#: The columns of /v1/traces/{id}/rank_steps (hotspan.rank_steps).
RANK_STEP_COLUMNS = ("rank", "step", "start_ns", "end_ns", "step_ns", "wait_ns", "blame_ns", "last")


def ranks_answer(run: Run, category: str = "comms", step: str = "step") -> dict[str, Any]:
    """What ``hotspan ranks --json`` prints for the run (``ranks_summary``)."""
    from ..analysis.ranks import ranks_summary

    return cached(
        ("ranks", run.id, run.signature, category, step),
        # through JSON, as the CLI prints it: rank keys as strings, no NaN
        lambda: plain(
            json.loads(json.dumps(ranks_summary(run.source, category=category, step=step)))
        ),
    )


def rank_steps_columns(run: Run, category: str = "comms", step: str = "step") -> dict[str, Any]:
    """``hotspan.rank_steps`` of the run, a list per column (rows by rank, then step)."""
    import hotspan

    def compute() -> dict[str, Any]:
        table = hotspan.rank_steps(run.source, category=category, step=step)
        return {c: table.column(c).to_pylist() for c in RANK_STEP_COLUMNS}

    return cached(("rank-steps", run.id, run.signature, category, step), compute)


def step_window(run: Run, rank: int, step: int) -> tuple[int, int] | None:
    """The start and end of step ``step`` of ``rank`` (its step span), or None: no such step."""
    import bisect

    cells = rank_steps_columns(run)
    ranks, steps = cells["rank"], cells["step"]
    at = bisect.bisect_left(ranks, rank) + step  # a rank's steps are 0, 1, ... in order
    if step >= 0 and at < len(ranks) and ranks[at] == rank and steps[at] == step:
        return cells["start_ns"][at], cells["end_ns"][at]
    return None


def critical_segments(
    run: Run,
    start_ns: int | None,
    end_ns: int | None,
    ranks: Sequence[int] | None,
    category: str = "comms",
    step: str = "step",
) -> list[dict[str, Any]]:
    """The segments of ``hotspan.critical_path`` of the run that overlap ``[start_ns, end_ns)``
    (None: unbounded), on ``ranks`` (None: all), in path order."""
    import numpy as np

    import hotspan

    def compute() -> dict[str, np.ndarray]:
        table = hotspan.critical_path(run.source, category=category, step=step)
        return {
            "step": np.asarray(table.column("step").to_numpy(), np.int64),
            "rank": np.asarray(table.column("rank").to_numpy(), np.int64),
            "name": np.asarray(table.column("name").to_pylist(), object),
            "start_ns": np.asarray(table.column("start_ns").to_numpy(), np.int64),
            "end_ns": np.asarray(table.column("end_ns").to_numpy(), np.int64),
        }

    path = cached(("critical-path", run.id, run.signature, category, step), compute)
    keep = np.ones(len(path["step"]), bool)
    if start_ns is not None:
        keep &= path["end_ns"] > start_ns
    if end_ns is not None:
        keep &= path["start_ns"] < end_ns
    if ranks is not None:
        keep &= np.isin(path["rank"], np.asarray(ranks, np.int64))
    rows = np.flatnonzero(keep)
    return [
        {
            "step": int(path["step"][i]),
            "rank": int(path["rank"][i]),
            "name": str(path["name"][i]),
            "start_ns": int(path["start_ns"][i]),
            "end_ns": int(path["end_ns"][i]),
        }
        for i in rows
    ]


_indexes: "OrderedDict[tuple[Any, ...], Any]" = OrderedDict()
_index_lock = threading.Lock()
#: (run id, signature) -> set once that version's index is built (or failed)
_index_building: dict[tuple[Any, ...], threading.Event] = {}
#: Timeline indexes kept (a few MB each: three integers a bin and track).
_INDEX_ENTRIES = 8


def timeline_index(run: Run, *, wait: bool = True) -> Any:
    """The run's timeline index (per version of the run). Built once: the first call starts
    the build (on this thread when ``wait``, else on a thread of its own, returning None);
    a call that waits while another builds it waits for that build, not a second one.

    Persisted beside the run (:func:`index_path`), keyed by the run's version: a server
    started again, or a later version of the server, reads it back in a fraction of a second
    (on this thread, even when not ``wait``) instead of reading every span again; a run that
    changed since (a new or compacted part) has another version, so its old index is never
    read, and is replaced when the new one is written."""
    from ..analysis.timeline import TimelineIndex, run_version

    key = (run.id, run.signature)
    with _index_lock:
        if key in _indexes:
            _indexes.move_to_end(key)
            return _indexes[key]
        building = _index_building.get(key)
        builder = building is None
        done = _index_building.setdefault(key, threading.Event())
    files = [str(path) for path, _rank in run.parts]

    def build() -> None:
        try:
            version = run_version(files)
            saved = index_path(run, version)
            index = TimelineIndex.load(saved, version) if saved is not None else None
            if index is None:
                blocks = saved.with_suffix(".blocks") if saved is not None else None
                with HEAVY:  # a whole scan: one heavy computation at a time
                    index = TimelineIndex(files, blocks=blocks)
                if saved is not None:
                    _save_index(index, saved, version)
                    # read back memory-mapped: the build's arrays (hundreds of MB for a large
                    # run) given back, only the pages views touch then held
                    index = TimelineIndex.load(saved, version) or index
            with _index_lock:
                _indexes[key] = index
                while len(_indexes) > _INDEX_ENTRIES:
                    _indexes.popitem(last=False)
        finally:
            with _index_lock:
                _index_building.pop(key, None)
            done.set()

    if builder and not wait and not _saved_index_exists(run, files):
        threading.Thread(
            target=_quietly, args=(build,), name="hotspan-serve-index", daemon=True
        ).start()
        return None
    if builder:
        build()
    elif not wait:
        return None
    else:
        done.wait()
    with _index_lock:
        return _indexes.get(key)


#: The name a persisted timeline index starts with, in the run's folder (hidden: serve and
#: the dataset readers pass over it).
INDEX_PREFIX = ".hotspan-timeline-"


def index_path(run: Run, version: str) -> Path | None:
    """Where the run's timeline index of ``version`` is kept: in a dataset's folder, or beside
    a single Parquet file (or beside serve's Parquet copy of a trace of another format)."""
    if not run.parts:
        return None
    if run.kind == "dataset":
        return Path(run.location) / f"{INDEX_PREFIX}{version}.npz"
    part = Path(run.parts[0][0])
    return part.parent / f".{part.name}{INDEX_PREFIX}{version}.npz"


def _saved_index_exists(run: Run, files: list[str]) -> bool:
    from ..analysis.timeline import run_version

    try:
        saved = index_path(run, run_version(files))
    except OSError:  # a part gone meanwhile: the build reports it
        return False
    return saved is not None and saved.exists()


def _save_index(index: Any, path: Path, version: str) -> None:
    """Write the index, replacing the run's indexes of earlier versions; a folder that cannot
    be written (a read-only run) keeps none: the index is built again by the next server."""
    try:
        index.save(path, version)
    except OSError:
        return
    prefix = path.name[: path.name.index(INDEX_PREFIX) + len(INDEX_PREFIX)]
    for stale in path.parent.glob(f"{prefix}*"):
        if stale.stem != path.stem:  # the index and its span blocks kept
            stale.unlink(missing_ok=True)


def _quietly(function: Callable[[], Any]) -> None:
    try:
        function()
    except Exception:  # noqa: BLE001  (a request reading the run reports its error)
        pass


def stats_rows(
    run: Run, by: Sequence[str] | None, span_filter: Any = None
) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """(the keys grouped by, the rows): by the library's default keys when ``by`` is None."""
    from ..analysis.filters import SpanFilter

    if span_filter == SpanFilter():  # no filter: one cache entry with None (pages, the warmer)
        span_filter = None

    def compute() -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        keys, result = _stats(run, by, span_filter)
        return keys, plain(result.to_pylist())

    return cached(
        ("stats", run.id, run.signature, None if by is None else tuple(by), span_filter), compute
    )


class Warmer:
    """Computes the default statistics of each run the server finds, ahead of the first
    request for them, on a thread of its own, one run at a time (under ``HEAVY``, as a
    request's): each run once (a run still being written changes at every flush: its later
    versions are computed when asked for), at most ``limit`` runs (the cache holds 64).

    Why: statistics of a large run take seconds (3 or more for 20 M spans on two cores, the
    engine's own time), more than a page may wait; the server knows a run the moment it
    lists it, seconds before anyone opens its page. A request that comes while they are
    being computed waits for them (``cached``) instead of computing them again."""

    def __init__(self, limit: int = _CACHE_ENTRIES // 2) -> None:
        self.limit = limit
        self._runs: queue.SimpleQueue[Run] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        #: (run id, signature) of each run whose statistics it computed, in order.
        self.warmed: list[tuple[str, tuple[Any, ...] | None]] = []

    def __call__(self, run: Run) -> None:
        with self._lock:
            if run.id in self._seen or len(self._seen) >= self.limit:
                return
            self._seen.add(run.id)
            self._runs.put(run)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="hotspan-serve-warm", daemon=True
                )
                self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:  # the thread ends when nothing is left (no idle thread per app)
                try:
                    run = self._runs.get_nowait()
                except queue.Empty:
                    self._thread = None
                    return
            try:
                stats_rows(run, None)
                timeline_index(run)  # the zoomed-out timeline answers from it at once
            except Exception:  # noqa: BLE001  (the request that asks reports it)
                continue
            self.warmed.append((run.id, run.signature))


def phases_rows(run: Run) -> list[dict[str, Any]]:
    return cached(("phases", run.id, run.signature), lambda: plain(_phases(run).to_pylist()))


def compare_rows(base: Run, new: Run, *, threshold: float, min_count: int) -> list[dict[str, Any]]:
    return compare_result(base, new, threshold=threshold, min_count=min_count)[0]


def compare_result(
    base: Run, new: Run, *, threshold: float, min_count: int
) -> tuple[list[dict[str, Any]], str | None]:
    """``compare``'s rows and, in one line, the machine's drift between the runs (None when
    there is nothing to say): as ``hotspan compare`` prints them."""

    def compute() -> tuple[list[dict[str, Any]], str | None]:
        from ..analysis.comparison import drift_line, drift_of

        table = _compare(base, new, threshold=threshold, min_count=min_count)
        return plain(table.to_pylist()), drift_line(drift_of(table), base.id, new.id)

    return cached(
        ("compare", base.id, base.signature, new.id, new.signature, threshold, min_count), compute
    )


def _filter(
    names: Sequence[str],
    *,
    name: str | None,
    category: str | None,
    rank: int | None,
    min_ns: int | None,
) -> Any:
    """The filter as a pyarrow expression over one part's columns (pushed down to the
    Parquet reader: row groups whose statistics exclude it are skipped): the library's
    filter (analysis/filters.py), rendered for pyarrow.dataset."""
    from ..analysis.filters import dataset_expression

    terms = make_filter(name=name, category=category, rank=rank, min_ns=min_ns).terms()
    return dataset_expression(terms, names)


def spans_page(
    run: Run,
    *,
    offset: int,
    limit: int,
    name: str | None = None,
    category: str | None = None,
    rank: int | None = None,
    min_ns: int | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` spans matching the filters from the ``offset``-th on, in a stable order
    (the run's parts in order, each part's rows in file order), and whether more follow.

    Reads the parts one after another in batches and stops once the page is full; without a
    filter, whole parts before ``offset`` are skipped from their row counts alone."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    rows: list[dict[str, Any]] = []
    skip = offset
    filtered = any(v is not None for v in (name, category, min_ns)) or rank is not None
    for path, dir_rank in run.parts:
        if rank is not None and dir_rank is not None and dir_rank != rank:
            continue
        dataset = ds.dataset(str(path), format="parquet")
        names = dataset.schema.names
        if not filtered and skip > 0:
            count = dataset.count_rows()
            if count <= skip:
                skip -= count
                continue
        columns = [c for c in SPAN_FIELDS if c in names]
        expr = _filter(names, name=name, category=category, rank=rank, min_ns=min_ns)
        for batch in dataset.to_batches(
            columns=columns, filter=expr, batch_size=16_384, use_threads=False
        ):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            if skip:
                batch = batch.slice(skip)
                skip = 0
            need = limit + 1 - len(rows)  # one more than the page: whether another page follows
            batch = batch.slice(0, need)
            table = pa.Table.from_batches([batch])
            if (
                "rank" not in table.column_names
            ):  # a part whose rank=R directory gives it (checked at listing)
                table = table.append_column(
                    "rank", pa.array([dir_rank] * table.num_rows, pa.int32())
                )
            if "self_ns" not in table.column_names:  # a part written before self_ns was a column
                table = table.append_column("self_ns", pa.nulls(table.num_rows, pa.int64()))
            if "wait_ns" not in table.column_names:  # nor wait_ns: none is known
                table = table.append_column("wait_ns", pa.nulls(table.num_rows, pa.int64()))
            rows.extend(table.select(list(SPAN_FIELDS)).to_pylist())
            if len(rows) > limit:
                return plain(rows[:limit]), True
    return plain(rows), False


#: The most spans a window downloaded for Perfetto UI may hold (``download`` with
#: ``start_ns``/``end_ns``/``rank``): past it the answer is 413, naming the window's spans and
#: this limit. Perfetto UI runs in the browser's memory and stops at 1-2 GB of trace; 5 M spans
#: make a .pftrace of a few hundred MB. ``HOTSPAN_SERVE_WINDOW_MAX_SPANS`` overrides it (read at
#: each request).
WINDOW_MAX_SPANS = 5_000_000


def window_max_spans() -> int:
    """``WINDOW_MAX_SPANS``, or ``HOTSPAN_SERVE_WINDOW_MAX_SPANS`` where it is set to a number."""
    import os

    text = os.environ.get("HOTSPAN_SERVE_WINDOW_MAX_SPANS", "").strip()
    return int(text) if text.isdigit() else WINDOW_MAX_SPANS


class WindowTooLarge(ValueError):
    """A window holding more spans than ``window_max_spans()``: ``spans`` and ``limit``."""

    def __init__(self, spans: int, limit: int) -> None:
        self.spans, self.limit = spans, limit
        super().__init__(
            f"this window holds {spans:,} spans, more than the {limit:,} that open in Perfetto UI: "
            f"zoom in to at most {limit:,} spans (or pick fewer ranks)"
        )


def window_path(
    run: Run,
    fmt: str,
    cache: Path,
    start_ns: int | None,
    end_ns: int | None,
    ranks: Sequence[int] | None,
) -> Path:
    """A file of the spans overlapping ``[start_ns, end_ns)`` on ``ranks`` in ``fmt``
    (``hotspan.analysis.timeline.window_spans``), written once into the cache per (version of
    the run, window, ranks). Counted first from the parts' statistics
    (``window_count``): a window of more than ``window_max_spans()`` spans raises
    :class:`WindowTooLarge`, nothing read."""
    import hashlib

    from ..analysis.timeline import window_count, window_spans

    files = [str(path) for path, _rank in run.parts]
    wanted = None if ranks is None else tuple(sorted({int(r) for r in ranks}))
    count = cached(
        ("window-count", run.id, run.signature, start_ns, end_ns, wanted),
        lambda: window_count(files, start_ns, end_ns, ranks=wanted),
    )
    limit = window_max_spans()
    if count > limit:
        raise WindowTooLarge(count, limit)
    extension = DOWNLOAD_FORMATS[fmt][0]
    key = repr((run.signature, start_ns, end_ns, wanted))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = cache / f"{run.id}-{digest}-window{extension}"
    with HEAVY:
        if not target.exists():
            from ..formats import export

            export(window_spans(files, start_ns, end_ns, ranks=wanted), target)
            _forget_windows(cache, keep=target)
    return target


#: Window files kept in the cache (each up to ``WINDOW_MAX_SPANS`` spans): the oldest go first.
WINDOW_FILES_KEPT = 16


def _forget_windows(cache: Path, keep: Path) -> None:
    """The cache's window files past the newest ``WINDOW_FILES_KEPT`` removed: a user panning
    and opening window after window must not fill the disk."""
    found = []
    for path in cache.glob("*-window.*"):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    found.sort(reverse=True)
    for _mtime, path in found[WINDOW_FILES_KEPT:]:
        if path != keep:
            path.unlink(missing_ok=True)


def download_path(
    run: Run,
    fmt: str,
    cache: Path,
    start_ns: int | None = None,
    end_ns: int | None = None,
    ranks: Sequence[int] | None = None,
) -> Path:
    """A file of the run in ``fmt``: the run's own Parquet file when it is one, else a copy
    written once into the cache (per version of the run) and streamed from there. With a
    window or ranks, the spans overlapping it only (:func:`window_path`)."""
    import hashlib

    if start_ns is not None or end_ns is not None or ranks is not None:
        return window_path(run, fmt, cache, start_ns, end_ns, ranks)
    extension = DOWNLOAD_FORMATS[fmt][0]
    if run.kind == "file" and run.format == extension:
        return run.location
    if fmt == "parquet" and run.kind == "file":
        return run.source  # the Parquet copy made when the run was listed
    digest = hashlib.sha256(repr(run.signature).encode()).hexdigest()[:16]
    target = cache / f"{run.id}-{digest}-download{extension}"
    with HEAVY:
        if not target.exists():
            from ..formats import export, load

            export(load(run.source), target)
    return target


def timeline_html(run: Run) -> str | None:
    """The HTML report's timeline of the run, alone (a document of its own, shown in a frame
    of the run page); None for runs past ``TIMELINE_MAX_SPANS``."""
    if (run.summary or {}).get("spans", 0) > TIMELINE_MAX_SPANS:
        return None

    def render() -> str:
        from ..formats import load
        from ..report.html import html_report

        return html_report(load(run.source), title=run.title, sections=("timeline",))

    return cached(("timeline", run.id, run.signature), render)


def diff_flame_page(base: Run, new: Run, threshold: float) -> str | None:
    """The flame graph of the change from ``base`` to ``new`` (``report/diff_flame.py``),
    coloured by the verdicts of their comparison; None where either run is past
    ``TIMELINE_MAX_SPANS`` (it loads both)."""
    if any((run.summary or {}).get("spans", 0) > TIMELINE_MAX_SPANS for run in (base, new)):
        return None

    def render() -> str:
        from ..formats import load
        from ..report.diff_flame import diff_flame_html

        rows = compare_rows(base, new, threshold=threshold, min_count=1)
        verdicts = {(r["category"], r["name"]): r["verdict"] for r in rows}
        title = f"{base.title} → {new.title}"
        return diff_flame_html(load(base.source), load(new.source), verdicts=verdicts, title=title)

    return cached(("diff-flame", base.id, base.signature, new.id, new.signature, threshold), render)


def flame_html(run: Run) -> str | None:
    """The HTML report's flame view of the run, alone (a document of its own, shown in a
    frame of the run page); None for runs past ``TIMELINE_MAX_SPANS`` (it loads the run)."""
    if (run.summary or {}).get("spans", 0) > TIMELINE_MAX_SPANS:
        return None

    def render() -> str:
        from ..formats import load
        from ..report.html import html_report

        return html_report(load(run.source), title=run.title, sections=("flame",))

    return cached(("flame", run.id, run.signature), render)
