"""The one analysis layer: which engine answers, over which spans. The library
(``hotspan.stats``/``phases``/``compare``), the CLI and ``serve`` all come here.

The rule (:func:`choose`), one for everybody:

- a ``pyarrow.Table`` is analysed in memory (statistics.py, numpy);
- paths (a Parquet file, a run directory, a URI, or several) are
  streamed through DuckDB (streaming.py) when they hold at least ``HOTSPAN_STREAM_MIN_BYTES``
  of Parquet (default 64 MiB; a URI always), else loaded and analysed in memory; traces of
  other formats (JSON, Perfetto, CSV, ...) are loaded;
- ``engine=`` overrides it: ``"memory"``, ``"duckdb"``, or ``"spark"`` / a
  ``pyspark.sql.SparkSession`` (spark.py: the same queries on Spark).

Every path gives the same columns, types and values (percentiles to the last bit), for the
same :class:`~hotspan.analysis.filters.SpanFilter` and the same default ``by``.

Each engine answers through one contract, :class:`Engine`: ``stats(StatsRequest)``,
``phases()``, ``compare(other, CompareOptions, ...)``, ``metadata()``, ``default_by()``,
``rank_source()`` (the spans as the across-ranks kernel reads them: ranks.py),
``close()`` (options.py: the questions as frozen objects). :class:`MemoryEngine` is the
core itself (statistics.py over kernels.py); :class:`DuckDBEngine` streams Parquet
(streaming.py, whose Parquet scan feeds the same kernels a part's batches at a time);
spark.SparkSpans runs the SQL of queries.py. tests/analysis/test_core_engines.py holds
every engine to the core's answers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .filters import SpanFilter, filter_table
from ._options import CompareOptions, StatsRequest

if TYPE_CHECKING:
    import pyarrow as pa

    from ._duckdb_source import SpanSource
    from ._rank_source import RankSource

__all__ = [
    "STREAM_MIN_BYTES",
    "CompareOptions",
    "DuckDBEngine",
    "Engine",
    "MemoryEngine",
    "Spans",
    "StatsRequest",
    "choose",
    "open_spans",
    "rank_source",
    "stream_min_bytes",
]

#: Parquet inputs at least this large (together) are streamed rather than loaded.
STREAM_MIN_BYTES = 64 << 20

ENGINES = ("memory", "duckdb", "spark")


def stream_min_bytes() -> int:
    return int(os.environ.get("HOTSPAN_STREAM_MIN_BYTES") or STREAM_MIN_BYTES)


def paths_of(spans: Any) -> list[str] | None:
    """``spans`` as a list of paths (``~`` expanded), or None when it is a table."""
    from ..formats._uri import local_path

    if isinstance(spans, (str, os.PathLike)):
        return [local_path(spans)]
    if (
        isinstance(spans, (list, tuple))
        and spans
        and all(isinstance(p, (str, os.PathLike)) for p in spans)
    ):
        return [local_path(p) for p in spans]
    return None


def _size_of(path: Path) -> int:
    """A part's size; 0 for one deleted since the listing (a compaction's input: the merged
    part that replaces it is counted)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _parquet_bytes(paths: Sequence[str]) -> int | None:
    """The Parquet bytes under ``paths`` (a URI counts as large), or None when one of them is
    another format (then everything is loaded)."""
    from ..formats.dataset import part_files

    size = 0
    for text in paths:
        path = Path(text)
        if "://" in text:
            size += stream_min_bytes()
        elif not path.exists():
            raise FileNotFoundError(2, "no such trace file or dataset directory", text)
        elif path.is_dir():
            if (path / "_live").is_dir() and any((path / "_live").glob("*.hsraw")):
                return None  # a live run's raw logs (formats/_rawlog.py): only load() reads them
            size += sum(_size_of(p) for p in part_files(path))
        elif path.name.lower().endswith(".parquet") and path.is_file():
            size += path.stat().st_size
        else:
            return None
    return size


def choose(spans: Any, engine: Any = None) -> str:
    """``memory``, ``duckdb`` or ``spark``: who answers for ``spans`` (see the module doc)."""
    if engine is not None:
        if isinstance(engine, str):
            if engine not in ENGINES:
                raise ValueError(
                    f"engine: expected one of {', '.join(ENGINES)} or a SparkSession, not {engine!r}"
                )
            return engine
        if type(engine).__module__.startswith("pyspark"):
            return "spark"
        raise TypeError(
            f"engine: expected one of {', '.join(ENGINES)} or a SparkSession, "
            f"not {type(engine).__name__}"
        )
    paths = paths_of(spans)
    if paths is None:
        return "memory"
    size = _parquet_bytes(paths)
    if size is None:
        return "memory"
    return "duckdb" if size >= stream_min_bytes() else "memory"


@runtime_checkable
class Engine(Protocol):
    """What answers the analysis layer's questions over one set of spans (the filter applied
    when it was opened): the in-memory core (:class:`MemoryEngine`), DuckDB streaming
    Parquet (:class:`DuckDBEngine`) or Spark (spark.py). Every engine gives the core's
    answer on the same spans (tests/analysis/test_core_engines.py holds them to it)."""

    kind: str

    def default_by(self) -> tuple[str, ...]: ...

    def stats(self, request: StatsRequest) -> pa.Table: ...

    def phases(self) -> pa.Table: ...

    def compare(
        self,
        other: Any,
        options: CompareOptions,
        reference: tuple[float, float] | None,
        machine: tuple[Any, Any],
    ) -> pa.Table: ...

    def metadata(self) -> dict[bytes, bytes]: ...

    def rank_source(self) -> RankSource: ...

    def close(self) -> None: ...


class MemoryEngine:
    """The core itself: the kernels of statistics.py over a table in memory."""

    kind = "memory"

    def __init__(
        self,
        table: pa.Table,
        default_by: tuple[str, ...],
        unfiltered: pa.Table | None = None,
        span_filter: SpanFilter | None = None,
        paths: Sequence[str] = (),
    ) -> None:
        self.table = table
        self._default_by = default_by
        #: the spans before the filter (``table`` when none was given), and the paths read
        self.unfiltered = table if unfiltered is None else unfiltered
        self.span_filter = span_filter or SpanFilter()
        self.paths = list(paths)

    def default_by(self) -> tuple[str, ...]:
        return self._default_by

    def stats(self, request: StatsRequest) -> pa.Table:
        from .statistics import stats

        return stats(self.table, request.keys(self._default_by))

    def phases(self) -> pa.Table:
        from .statistics import phases

        return phases(self.table)

    def compare(
        self,
        other: MemoryEngine,
        options: CompareOptions,
        reference: tuple[float, float] | None,
        machine: tuple[Any, Any],
    ) -> pa.Table:
        from .comparison import compare_rows

        return compare_rows(self.table, other.table, options, reference=reference, machine=machine)

    def metadata(self) -> dict[bytes, bytes]:
        return dict(self.table.schema.metadata or {})

    def rank_source(self) -> RankSource:
        from ._rank_source import RankSource

        if "self_ns" in self.table.column_names:
            return RankSource.in_memory(self.table, paths=self.paths)  # filtered already
        # self times of the spans before the filter (a parent filtered out still covers)
        return RankSource.in_memory(self.unfiltered, self.span_filter, self.paths)

    def close(self) -> None:
        pass


class DuckDBEngine:
    """Parquet streamed through DuckDB (streaming.py) with bounded memory."""

    kind = "duckdb"

    def __init__(
        self, paths: Sequence[str], span_filter: SpanFilter, *, lazy: bool = False
    ) -> None:
        self.paths = list(paths)
        self.span_filter = span_filter
        self._source: SpanSource | None = None
        self._default_by: tuple[str, ...] | None = None
        if not lazy:
            self.default_by()  # the parts opened now: a damaged one is named by whoever opens

    @property
    def source(self) -> SpanSource:
        """DuckDB's view of the parts (``_duckdb_source.SpanSource``): opened with the engine,
        or on first use where it was opened ``lazy`` (the ranks read the parts with pyarrow
        and need none)."""
        if self._source is None:
            from ._duckdb_source import SpanSource

            paths = self.paths
            self._source = SpanSource(
                paths if len(paths) > 1 else paths[0], span_filter=self.span_filter
            )
        return self._source

    def default_by(self) -> tuple[str, ...]:
        if self._default_by is None:
            low, _ = self.source.column_range("thread_id")
            device = low is not None and low < 0
            self._default_by = ("category", "name", "device") if device else ("category", "name")
        return self._default_by

    def stats(self, request: StatsRequest) -> pa.Table:
        from ._streaming import stream_stats

        return stream_stats(self.source, request.keys(self.default_by()))

    def phases(self) -> pa.Table:
        from ._streamed_phases import stream_phases

        return stream_phases(self.source)

    def compare(
        self,
        other: DuckDBEngine,
        options: CompareOptions,
        reference: tuple[float, float] | None,
        machine: tuple[Any, Any],
    ) -> pa.Table:
        from ._streaming import stream_compare

        return stream_compare(self.source, other.source, options, reference, machine)

    def metadata(self) -> dict[bytes, bytes]:
        return self.source.metadata()

    def rank_source(self) -> RankSource:
        from ._rank_source import RankSource

        return RankSource.of_files(self.paths, self.span_filter)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()


class Spans:
    """Spans to ask questions of, held by the engine :func:`choose` picks, after the filter:
    ``stats(by)``, ``phases()``, ``compare(other, options)``, ``metadata()``,
    ``default_by()``. Close it (or use ``with``) to let an engine's resources go."""

    def __init__(
        self,
        spans: Any,
        span_filter: SpanFilter | Mapping[str, Any] | None = None,
        engine: Any = None,
        *,
        lazy: bool = False,
    ):
        self.span_filter = SpanFilter.of(span_filter)
        self.kind = choose(spans, engine)
        #: the spans in memory (after the filter), None when an engine streams them
        self.table: pa.Table | None = None
        paths = paths_of(spans)
        self.paths = paths
        self.name = ", ".join(paths) if paths else "table"
        self.engine: Engine
        if self.kind == "memory":
            unfiltered = spans if paths is None else load_paths(paths, run=self.span_filter.run)
            self.table = filter_table(unfiltered, self.span_filter)
            self.engine = MemoryEngine(
                self.table, _table_default_by(unfiltered), unfiltered, self.span_filter, paths or ()
            )
        elif paths is None:
            raise TypeError(
                f"engine {self.kind}: give the spans as paths (Parquet files, run directories, URIs), "
                f"not a {type(spans).__name__}"
            )
        elif self.kind == "duckdb":
            self.engine = DuckDBEngine(paths, self.span_filter, lazy=lazy)
        else:
            from ._spark import SparkSpans

            session = engine if not isinstance(engine, str) else None
            self.engine = SparkSpans(session, paths, self.span_filter)
        self._closed = False

    @property
    def source(self) -> Any:
        """The engine's own handle on the spans (DuckDB's SpanSource, Spark's SparkSpans)."""
        return getattr(self.engine, "source", self.engine if self.kind == "spark" else None)

    def __enter__(self) -> Spans:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.close()

    def default_by(self) -> tuple[str, ...]:
        """``(category, name)``, plus ``device`` when the spans (before the filter) have device rows."""
        return self.engine.default_by()

    def stats(self, by: str | Sequence[str] | None = None) -> pa.Table:
        return self.engine.stats(StatsRequest.of(by, self.span_filter))

    def phases(self) -> pa.Table:
        return self.engine.phases()

    def compare(self, other: Spans, options: CompareOptions) -> pa.Table:
        """``compare`` of these spans (the base) and ``other`` (the new run)."""
        from .comparison import machine_of, reference_median

        before, after = self, other
        if before.kind != after.kind:
            # one side loaded (small, or another format), the other streamed: both in memory
            before, after = before.in_memory(), after.in_memory()
        reference = None
        if options.normalize is not None:
            reference = (
                reference_median(before.stats(("name",)), options.normalize, "base"),
                reference_median(after.stats(("name",)), options.normalize, "new"),
            )
        machine = (machine_of(before.metadata()), machine_of(after.metadata()))
        return before.engine.compare(after.engine, options, reference, machine)

    def in_memory(self) -> Spans:
        """These spans loaded and analysed in memory (itself when they are)."""
        if self.table is not None:
            return self
        assert self.paths is not None
        spans = Spans(self.paths, self.span_filter, "memory")
        self.close()
        return spans

    def metadata(self) -> dict[bytes, bytes]:
        return self.engine.metadata()


def _table_default_by(table: Any) -> tuple[str, ...]:
    from .statistics import default_by

    return default_by(table) if hasattr(table, "column_names") else ("category", "name")


def load_paths(paths: Sequence[str], run: str | None = None) -> pa.Table:
    """One table from one or more traces (ranks written to separate files, say); the first
    file's metadata stands for the whole."""
    import pyarrow as pa

    from ..formats import load

    if run is not None:
        _check_run_selection(load)
    tables = []
    for path in paths:
        tables.append(load(path, run=run) if run is not None else load(path))
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables]).unify_dictionaries()


def _check_run_selection(load: Any) -> None:
    """Selecting one run of a directory (``--run``) needs a loader that takes ``run=``
    (formats.load: parts carry their run id): a clear error otherwise."""
    import inspect

    if "run" not in inspect.signature(load).parameters:
        raise ValueError(
            "run: this hotspan's loader cannot select a run yet (parts carry no run id)"
        )


def rank_source(
    spans: Any, span_filter: SpanFilter | Mapping[str, Any] | None = None, engine: Any = None
) -> RankSource:
    """The spans of ``spans`` (a table or paths) as the across-ranks kernel reads them, from
    the engine :func:`choose` picks (``"memory"`` loads paths, ``"duckdb"`` streams them a
    part at a time, ``"spark"`` or a SparkSession leaves them to Spark); closing the source
    closes the engine."""
    import pyarrow as pa

    if paths_of(spans) is None:
        if not isinstance(spans, pa.Table):
            raise TypeError(
                f"spans: expected a pyarrow.Table or a path, not {type(spans).__name__}"
            )
        if choose(spans, engine) != "spark":
            engine = "memory"  # a table is read in memory, whatever engine was named
    opened = open_spans(spans, span_filter, engine, lazy=True)
    try:
        source = opened.engine.rank_source()
    except BaseException:
        opened.close()
        raise
    source.owner = opened
    return source


def open_spans(
    spans: Any,
    span_filter: SpanFilter | Mapping[str, Any] | None = None,
    engine: Any = None,
    *,
    lazy: bool = False,
) -> Spans:
    """:class:`Spans` over ``spans`` (a table, a path, paths), ``span_filter`` applied
    (``lazy``: an engine's own resources, DuckDB's view, opened on first use only)."""
    return Spans(spans, span_filter, engine, lazy=lazy)
