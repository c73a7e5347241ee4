"""What the API answers, computed from a run's Parquet files without ever holding the
whole run for a request of a page of spans; statistics, phases and comparisons come from
the library (``hotspan.stats``, ``hotspan.phases``, ``hotspan.compare``), given the run's
path.

Results are cached per run version (its files' sizes and modification times), so a page
that asks for the same statistics twice computes them once.
"""

from __future__ import annotations

import math
import queue
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

from .runs import HEAVY, Run

__all__ = [
    "DOWNLOAD_FORMATS",
    "SPAN_FIELDS",
    "Warmer",
    "cached",
    "compare_rows",
    "download_path",
    "phases_rows",
    "plain",
    "spans_page",
    "stats_rows",
    "timeline_html",
    "flame_html",
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

_cache: "OrderedDict[tuple, Any]" = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_ENTRIES = 64


def _lookup(key: tuple) -> tuple[bool, Any]:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return True, _cache[key]
    return False, None


def cached(key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, remembered under ``key`` (which holds the run's signature) among the
    last ``_CACHE_ENTRIES`` results; computed under ``HEAVY``."""
    found, value = _lookup(key)
    if found:
        return value
    with HEAVY:
        found, value = _lookup(key)  # computed meanwhile by the request this one waited for
        if found:
            return value
        value = compute()
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
# The run's path goes to the library as it is: the analysis layer (analysis/engine.py) decides
# in memory or streamed, by the one rule the CLI follows too.


def make_filter(**fields: Any):
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
    from ..analysis.engine import open_spans

    with open_spans(run.source, span_filter) as spans:
        keys = spans.default_by() if by is None else tuple(by)
        return keys, spans.stats(keys)


def _phases(run: Run):
    import hotspan

    return hotspan.phases(run.source)


def _compare(base: Run, new: Run, **options):
    import hotspan

    return hotspan.compare(base.source, new.source, **options)


# --------------------------------------------------------------------------- answers


def stats_rows(
    run: Run, by: Sequence[str] | None, span_filter: Any = None
) -> tuple[tuple[str, ...], list[dict]]:
    """(the keys grouped by, the rows): by the library's default keys when ``by`` is None."""
    from ..analysis.filters import SpanFilter

    if span_filter == SpanFilter():  # no filter: one cache entry with None (pages, the warmer)
        span_filter = None

    def compute() -> tuple[tuple[str, ...], list[dict]]:
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
        self.warmed: list[tuple[str, tuple | None]] = []

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
            except Exception:  # noqa: BLE001  (the request that asks reports it)
                continue
            self.warmed.append((run.id, run.signature))


def phases_rows(run: Run) -> list[dict[str, Any]]:
    return cached(("phases", run.id, run.signature), lambda: plain(_phases(run).to_pylist()))


def compare_rows(base: Run, new: Run, *, threshold: float, min_count: int) -> list[dict[str, Any]]:
    return cached(
        ("compare", base.id, base.signature, new.id, new.signature, threshold, min_count),
        lambda: plain(_compare(base, new, threshold=threshold, min_count=min_count).to_pylist()),
    )


def _filter(
    names: Sequence[str],
    *,
    name: str | None,
    category: str | None,
    rank: int | None,
    min_ns: int | None,
):
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
            rows.extend(table.select(list(SPAN_FIELDS)).to_pylist())
            if len(rows) > limit:
                return plain(rows[:limit]), True
    return plain(rows), False


def download_path(run: Run, fmt: str, cache: Path) -> Path:
    """A file of the run in ``fmt``: the run's own Parquet file when it is one, else a copy
    written once into the cache (per version of the run) and streamed from there."""
    import hashlib

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

        return html_report(load(run.source), title=run.path, sections=("timeline",))

    return cached(("timeline", run.id, run.signature), render)


def flame_html(run: Run) -> str | None:
    """The HTML report's flame view of the run, alone (a document of its own, shown in a
    frame of the run page); None for runs past ``TIMELINE_MAX_SPANS`` (it loads the run)."""
    if (run.summary or {}).get("spans", 0) > TIMELINE_MAX_SPANS:
        return None

    def render() -> str:
        from ..formats import load
        from ..report.html import html_report

        return html_report(load(run.source), title=run.path, sections=("flame",))

    return cached(("flame", run.id, run.signature), render)
