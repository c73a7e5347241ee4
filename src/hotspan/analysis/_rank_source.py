"""The spans that the across-ranks analysis (ranks.py) reads, as numpy columns gathered from
Arrow batches: a table in memory or a run too large for it, read a batch at a time with the
columns it needs and nothing else. Names and categories become codes into one dictionary
for the whole input (batches may each carry their own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .filters import SpanFilter, filter_table

__all__ = ["BATCH_ROWS", "COLUMNS", "RankSource", "Strings", "gather"]

COLUMNS = (
    "span_id",
    "parent_id",
    "name",
    "category",
    "start_ns",
    "end_ns",
    "depth",
    "thread_id",
    "rank",
    "self_ns",
)
BATCH_ROWS = 1 << 20


class Strings:
    """One dictionary of strings for every batch: ``codes(array)`` gives int32 codes into it."""

    def __init__(self) -> None:
        self.values: list[str | None] = []
        self._index: dict[str | None, int] = {}

    def code(self, value: str | None) -> int:
        found = self._index.get(value)
        if found is None:
            found = self._index[value] = len(self.values)
            self.values.append(value)
        return found

    def find(self, value: str | None) -> int | None:
        """The code of ``value`` if some batch held it."""
        return self._index.get(value)

    def codes(self, array: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        mapping = np.array(
            [self.code(v) for v in array.dictionary.to_pylist()] + [self.code(None)], np.int32
        )
        indices = array.indices.fill_null(len(array.dictionary))
        return np.asarray(mapping[indices.to_numpy(zero_copy_only=False)])


class RankSource:
    """Re-iterable batches of spans, the filter applied, and the metadata of the run: what the
    across-ranks kernel reads. Each engine makes its own (``Engine.rank_source``, engine.py):
    the in-memory one over its table (:meth:`in_memory`), DuckDB's over the Parquet parts read
    with pyarrow a batch at a time (:meth:`of_files`), Spark's leaving the spans to Spark,
    which hands back only the rows a pass keeps (:meth:`narrowed`) and the windows' sums
    (:meth:`on_spark`). ``engine.rank_source`` asks the engine ``engine.choose`` picks."""

    _metadata: dict[bytes, bytes] | None = None

    def __init__(
        self,
        *,
        table: pa.Table | None = None,
        files: Sequence[str] = (),
        paths: Sequence[str] = (),
        span_filter: SpanFilter | None = None,
        spark: Any = None,
    ) -> None:
        self.table = table
        self.files = list(files)
        self.paths = list(paths)
        self.span_filter = span_filter or SpanFilter()
        self.spark = spark
        #: the spans opened for this source (engine.Spans), closed with it
        self.owner: Any = None

    @classmethod
    def in_memory(
        cls, table: pa.Table, span_filter: SpanFilter | None = None, paths: Sequence[str] = ()
    ) -> RankSource:
        """A source over ``table`` (the spans before ``span_filter``): their self times taken
        where it lacks them, then the filter applied once, whole (a time window relative to
        the run's start means its start)."""
        missing = [c for c in COLUMNS if c not in table.column_names and c != "self_ns"]
        if missing:
            raise ValueError(f"spans: not a span table, no column {', '.join(missing)}")
        if "self_ns" not in table.column_names:
            from .._selftime import with_self_ns

            table = with_self_ns(table)
        return cls(table=filter_table(table, span_filter or SpanFilter()), paths=paths)

    @classmethod
    def of_files(cls, paths: Sequence[str], span_filter: SpanFilter | None = None) -> RankSource:
        """A source over the Parquet parts under ``paths``, read a batch at a time."""
        from pathlib import Path

        from ..formats.dataset import part_files

        files: list[str] = []
        for text in paths:
            path = Path(text)
            files += [str(p) for p in part_files(path)] if path.is_dir() else [text]
        source = cls(files=files, paths=paths, span_filter=span_filter)
        if source.span_filter.needs_origin:
            source.span_filter = source.span_filter.with_origin(source._first_start())
        return source

    @classmethod
    def on_spark(cls, spark: Any) -> RankSource:
        """A source whose spans Spark holds (spark.SparkSpans, filtered by its view)."""
        missing = [c for c in COLUMNS if c not in spark.columns]
        if missing:
            raise ValueError(
                f"{', '.join(spark.paths)}: not a span table, no column {', '.join(missing)}"
            )
        return cls(files=spark.files, paths=spark.paths, spark=spark)

    @classmethod
    def of_table(cls, table: pa.Table, like: RankSource) -> RankSource:
        """A source over ``table`` (rows already filtered) that answers for ``like``'s run."""
        source = cls(table=table, files=like.files, paths=like.paths)
        source._metadata = like.metadata()
        return source

    def narrowed(self, where: str, columns: tuple[str, ...]) -> RankSource:
        """The rows where ``where`` (a Spark SQL condition) holds, as a source in memory, from
        Spark; this source itself on the other engines (their passes pick rows themselves)."""
        if self.spark is None:
            return self
        table = self.spark.select(where, columns, order=("rank", "start_ns"))
        return RankSource.of_table(table, self)

    def close(self) -> None:
        owner, self.owner = self.owner, None
        if owner is not None:
            owner.close()  # the engine's (a Spark view) with it
        elif self.spark is not None:
            self.spark.close()
        self.spark = None

    def metadata(self) -> dict[bytes, bytes]:
        if self._metadata is not None:
            return self._metadata
        if self.spark is not None:
            meta: dict[bytes, bytes] = self.spark.metadata()
            return meta
        if self.table is not None:
            return dict(self.table.schema.metadata or {})
        import pyarrow.parquet as pq

        return dict(pq.read_schema(self.files[0]).metadata or {}) if self.files else {}

    def clock_error_ns(self) -> int:
        """The clock calibration's error bound the run's metadata states (0 when none)."""
        from .._schema import META_CLOCK

        try:
            clock = json.loads(self.metadata().get(META_CLOCK, b"{}"))
            return max(int(clock.get("last_error_ns") or 0), 0)
        except (ValueError, TypeError, AttributeError):
            return 0

    def rank_clock_errors(self) -> dict[int, int]:
        """Per rank, the largest clock-offset uncertainty a collector measured for its parts
        (``offset_uncertainty_ns`` in each part's ``hotspan.part`` metadata); {} when the
        spans were not given as run directories or came through no collector."""
        from pathlib import Path

        from ..formats.dataset import META_PART, current_parts

        found: dict[int, int] = {}
        for text in self.paths:
            if not Path(text).is_dir():
                continue
            try:
                _, parts = current_parts(text)
            except (ValueError, OSError):
                continue  # unreadable parts are reported by the read itself
            for _path, _size, meta in parts:
                try:
                    part = json.loads(meta.get(META_PART, b"{}"))
                    rank, error = int(part["rank"]), int(part.get("offset_uncertainty_ns") or 0)
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
                found[rank] = max(found.get(rank, 0), error)
        return found

    def batches(self, columns: tuple[str, ...] = COLUMNS) -> Iterator[pa.Table]:
        if self.spark is not None:
            raise RuntimeError("a Spark source is read through narrowed(), not a batch at a time")
        if self.table is not None:
            table = self.table.select(list(columns))
            for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                yield self._filtered(pa.Table.from_batches([batch]))
            return
        import pyarrow.parquet as pq

        # One file at a time, a batch at a time: memory bounded by one row group, where a
        # dataset scan's read-ahead held about 1.8 GiB of a 50 M-span run. The filter's own
        # columns (duration_ns of a minimum, thread_name of threads) read too, then left.
        wanted = list(columns)
        read = list(dict.fromkeys([*wanted, *_term_columns(self.span_filter.terms())]))
        for path in self.files:
            try:
                with pq.ParquetFile(path) as part:
                    for batch in part.iter_batches(batch_size=BATCH_ROWS, columns=read):
                        table = self._filtered(pa.Table.from_batches([batch]))
                        yield table if read == wanted else table.select(wanted)
            except (pa.ArrowException, OSError) as exc:
                raise ValueError(
                    f"{path}: not a readable Parquet part: {type(exc).__name__}: {exc}"
                ) from None

    def _first_start(self) -> int:
        """The earliest start of the streamed run (a time window relative to it needs it)."""
        import pyarrow.compute as pc

        first = None
        saved, self.span_filter = self.span_filter, SpanFilter()
        try:
            for table in self.batches(("start_ns",)):
                if table.num_rows:
                    low = pc.min(table.column(0)).as_py()
                    first = low if first is None else min(first, low)
        finally:
            self.span_filter = saved
        return first or 0

    def _filtered(self, table: pa.Table) -> pa.Table:
        return filter_table(table, self.span_filter) if self.span_filter else table


def _term_columns(terms: Sequence[Any]) -> list[str]:
    """The columns a filter's terms (``filters.SpanFilter.terms``) read."""
    out: list[str] = []
    for kind, column, value in terms:
        out += _term_columns(value) if kind == "any" else [column]
    return out


def _numpy(strings: Strings, name: str, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if name in ("name", "category"):
        return strings.codes(column)
    if name == "parent_id":
        return np.asarray(column.fill_null(0).to_numpy(), np.uint64)
    return np.asarray(column.to_numpy())


def gather(
    source: RankSource,
    strings: Strings,
    picks: dict[str, tuple[Callable[[dict[str, np.ndarray]], np.ndarray | None], tuple[str, ...]]],
    read: tuple[str, ...] = (),
    visit: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """One pass over ``source``: for each ``label: (pick, columns)`` the rows ``pick`` keeps
    (a boolean mask over a batch, None for none), those columns as numpy (``name`` and
    ``category`` as codes in ``strings``), concatenated. The picks see only ``read`` (and
    ``category``); the other columns are converted for the rows some pick keeps, which in a
    run are few (collectives, steps) beside the spans read. ``visit``, if given, sees every
    batch's ``read`` columns (all rows) too."""
    look = tuple(dict.fromkeys(("category", *read)))
    wanted = {c for _, columns in picks.values() for c in columns} | set(look)
    columns_read = tuple(c for c in COLUMNS if c in wanted)
    kept: dict[str, dict[str, list[np.ndarray]]] = {
        label: {c: [] for c in columns} for label, (_, columns) in picks.items()
    }
    for table in source.batches(columns_read):
        if not table.num_rows:
            continue
        seen = {c: _numpy(strings, c, table.column(c)) for c in look}
        if visit is not None:
            visit(seen)
        masks = {label: pick(seen) for label, (pick, _) in picks.items()}
        chosen = [m for m in masks.values() if m is not None and m.any()]
        if not chosen:
            continue
        union = np.logical_or.reduce(chosen)
        rows = table.filter(pa.array(union))
        batch = {c: v[union] for c, v in seen.items()}
        for c in columns_read:
            if c not in batch:
                batch[c] = _numpy(strings, c, rows.column(c))
        for label, (_, columns) in picks.items():
            mask = masks[label]
            if mask is None or not mask.any():
                continue
            inside = mask[union]
            for c in columns:
                kept[label][c].append(batch[c][inside])
    return {
        label: {
            c: np.concatenate(v)
            if v
            else np.zeros(0, np.uint64 if c.endswith("_id") and "thread" not in c else np.int64)
            for c, v in cols.items()
        }
        for label, cols in kept.items()
    }
