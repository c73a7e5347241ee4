"""The statistics on Apache Spark: the queries of queries.py rendered as Spark SQL.

    hotspan.stats("s3://bucket/run", engine=spark)     # any SparkSession: a cluster, Databricks, local
    hotspan stats DIR --engine spark                    # SparkSession.builder.getOrCreate()

The same description as DuckDB's (``queries.stats_sql``, ``queries.phases_sql``) in Spark's
dialect; the per-group rows come back to the driver (a few per group) and are finished by the
same functions (``queries.finish_stats``, ``queries.finish_phases``), so the columns, types and
values equal the other engines', percentiles to the last bit: Spark counts each group's
durations per bucket (``_BUCKET_SQL``), the driver finds the buckets that hold numpy's ranks,
a second scan brings back those buckets' distinct durations with their counts, and numpy
interpolates (no group's durations are ever gathered in one place: a billion spans run in a
bounded memory). Nothing of Spark is imported until a Spark engine is asked for.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .filters import SpanFilter, sql_condition
from ._options import CompareOptions, StatsRequest
from ._queries import (
    SPARK,
    combine_sql,
    device_sql,
    finish_phases,
    finish_stats,
    phases_sql,
    stats_sql,
)

__all__ = ["SparkSpans"]

_views = itertools.count()
_NEEDED = ("span_id", "parent_id", "start_ns", "end_ns", "duration_ns", "error", "arg")
#: A duration's bucket for the order statistics (``SparkSpans.stats``): itself below 2048,
#: above it 1024 buckets a power of two (``log2`` is monotone, so each bucket's durations are
#: a range of them, within 0.07% of each other). A group's counts per bucket are a small
#: table however many spans it has; Spark's ``collect_list`` of a group's durations is not
#: (a billion spans: gigabytes on one executor).
_BUCKET = "hs_b"
_BUCKET_SQL = (
    "CASE WHEN `duration_ns` < 2048 THEN `duration_ns` "
    "ELSE 2048 + CAST(floor((log2(`duration_ns`) - 11) * 1024) AS BIGINT) END"
)


def _to_arrow(frame: Any) -> pa.Table:
    """A (small) Spark result as an Arrow table."""
    to_arrow = getattr(frame, "toArrow", None)  # Spark 4
    if to_arrow is not None:
        return to_arrow()
    return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)


class SparkSpans:
    """The spans of ``paths`` (Parquet files, run directories, URIs Spark reads) as a Spark
    temporary view, filtered: the Spark engine (engine.Engine)."""

    kind = "spark"

    def __init__(self, session: Any, paths: Sequence[str], span_filter: SpanFilter):
        if session is None:
            from pyspark.sql import SparkSession

            session = SparkSession.builder.getOrCreate()
        self.session = session
        self.paths = list(paths)
        self.files = _part_files(self.paths, span_filter.run)
        frame = session.read.parquet(*self.files)
        if (
            "rank" not in frame.columns
        ):  # parts written without the column: the rank=R directory says it
            from pyspark.sql import functions as F

            frame = frame.withColumn(
                "rank", F.regexp_extract(F.input_file_name(), r"rank=(-?\d+)/", 1).cast("int")
            )
        self.columns = list(frame.columns)
        self.all_view = f"hotspan_all_{next(_views)}"
        frame.createOrReplaceTempView(self.all_view)
        if span_filter.needs_origin:
            (first,) = session.sql(f"SELECT min(start_ns) FROM {self.all_view}").collect()[0]
            span_filter = span_filter.with_origin(first)
        self.span_filter = span_filter
        where = sql_condition(span_filter.terms(), SPARK) or "TRUE"
        self.view = f"hotspan_spans_{next(_views)}"
        device = "" if "device" in self.columns else f", {device_sql(SPARK)} AS device"
        session.sql(f"SELECT *{device} FROM {self.all_view} WHERE {where}").createOrReplaceTempView(
            self.view
        )
        if device:
            self.columns.append("device")
        self._unique: bool | None = None
        self._default_by: tuple[str, ...] | None = None

    def close(self) -> None:
        for view in (self.view, self.all_view):
            self.session.catalog.dropTempView(view)

    def default_by(self) -> tuple[str, ...]:
        if self._default_by is None:
            sql = f"SELECT min(thread_id) FROM {self.all_view}"
            (low,) = self.session.sql(sql).collect()[0]
            device = low is not None and low < 0
            self._default_by = ("category", "name", "device") if device else ("category", "name")
        return self._default_by

    def _check(self, by: Sequence[str], needed: Sequence[str]) -> None:
        missing = [c for c in (*by, *needed) if c not in self.columns]
        if missing:
            raise ValueError(
                f"no column {', '.join(map(repr, missing))} in the span table {', '.join(self.paths)} "
                f"(columns: {', '.join(self.columns)})"
            )

    def stats(self, request: StatsRequest) -> pa.Table:
        from ._streaming import check_by

        by = check_by(request.keys(self.default_by()))
        self._check(by, _NEEDED)
        if "self_ns" not in self.columns:
            raise ValueError(
                f"{', '.join(self.paths)}: no self_ns column: the Spark engine reads self time from it "
                f"(hotspan writes it; convert older files with hotspan export)"
            )
        types = {k: (pa.string() if k == "device" else _plain_type(k)) for k in by}
        # One scan: the aggregates per group and duration bucket (a small table, kept on the
        # executors), then combined per group; the order statistics from the buckets' counts
        # and a second scan that keeps the durations of the few buckets that hold them.
        fine = self.session.sql(
            stats_sql(
                SPARK,
                self.view,
                by,
                columns=self.columns,
                values="none",
                extra_keys=(f"{_BUCKET_SQL} AS {_BUCKET}",),
            )
        ).persist()
        fine_view = f"hotspan_buckets_{next(_views)}"
        fine.createOrReplaceTempView(fine_view)
        try:
            groups = _to_arrow(
                self.session.sql(combine_sql(SPARK, fine_view, by, columns=self.columns))
            )
            if groups.num_rows == 0:
                from .statistics import STAT_COLUMNS, STAT_TYPES

                return pa.schema(
                    [pa.field(k, types[k]) for k in by]
                    + [pa.field(n, STAT_TYPES[n]) for n in STAT_COLUMNS]
                ).empty_table()
            buckets = _to_arrow(
                fine.select(*[SPARK.quote(k) for k in by], _BUCKET, "n", "lo", "hi")
            )
            percentiles = self._bucket_order_statistics(by, groups, buckets, fine)
        finally:
            self.session.catalog.dropTempView(fine_view)
            fine.unpersist()
        return finish_stats(groups, by, percentiles, types)

    def _bucket_order_statistics(
        self, by: Sequence[str], groups: pa.Table, buckets: pa.Table, fine: Any
    ) -> dict[str, np.ndarray]:
        """Per percentile, its exact value in each group (``groups``' order): each wanted
        rank located in its group's buckets (``buckets``: per group and bucket, the count and
        the extremes) by their cumulative counts, then the distinct durations of those
        buckets only, with their counts, read in a second scan."""
        from pyspark.sql import functions as F

        from ._kernels import interpolate, percentile_ranks
        from .statistics import PERCENTILES

        def keys_of(table: pa.Table) -> list[tuple[Any, ...]]:
            columns = [table.column(k).to_pylist() for k in by]
            return list(zip(*columns)) if by else [()] * table.num_rows

        number = {key: i for i, key in enumerate(keys_of(groups))}
        count = np.asarray(groups.column("n").to_numpy(), np.int64)
        gid = np.array([number[k] for k in keys_of(buckets)], np.int64)
        bucket = np.asarray(buckets.column(_BUCKET).to_numpy(), np.int64)
        n = np.asarray(buckets.column("n").to_numpy(), np.int64)
        lo = np.asarray(buckets.column("lo").to_numpy(), np.int64)
        hi = np.asarray(buckets.column("hi").to_numpy(), np.int64)
        order = np.lexsort((bucket, gid))
        gid, bucket, n, lo, hi = gid[order], bucket[order], n[order], lo[order], hi[order]
        same = gid[1:] == gid[:-1]
        if bool((same & (hi[:-1] >= lo[1:])).any()):  # log2 is monotone: never expected
            raise RuntimeError("Spark's duration buckets are not monotone")
        cumulative = np.cumsum(n)
        before_group = np.concatenate(([0], np.cumsum(count)[:-1]))
        wanted = {column: percentile_ranks(count, q) for column, q in PERCENTILES}
        ranks = np.concatenate([np.concatenate((a, b)) for a, b, _ in wanted.values()])
        rank_gid = np.tile(np.arange(len(count)), 2 * len(wanted))
        row = np.searchsorted(cumulative, before_group[rank_gid] + ranks, side="right")
        within = before_group[rank_gid] + ranks - (cumulative[row] - n[row])
        # The second scan: the durations of the wanted (group, bucket) pairs, distinct, counted.
        targets = sorted({(int(gid[r]), int(bucket[r])) for r in row})
        group_keys = keys_of(groups)
        schema = fine.select(*[SPARK.quote(k) for k in by], _BUCKET).schema
        wanted_frame = self.session.createDataFrame(
            [(*group_keys[g], b) for g, b in targets], schema=schema
        ).toDF(*[f"hs_t{i}" for i in range(len(by))], "hs_tb")
        spans = self.session.table(self.view).select(
            *[F.col(SPARK.quote(k)) for k in by],
            F.expr(_BUCKET_SQL).alias(_BUCKET),
            F.col("duration_ns"),
        )
        condition = [spans[SPARK.quote(k)].eqNullSafe(F.col(f"hs_t{i}")) for i, k in enumerate(by)]
        condition.append(spans[_BUCKET] == F.col("hs_tb"))
        picked = _to_arrow(
            spans.join(F.broadcast(wanted_frame), condition)
            .groupBy(*[spans[SPARK.quote(k)] for k in by], spans[_BUCKET], spans["duration_ns"])
            .count()
        )
        values: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        p_gid = np.array([number[k] for k in keys_of(picked)], np.int64)
        p_bucket = np.asarray(picked.column(_BUCKET).to_numpy(), np.int64)
        p_value = np.asarray(picked.column("duration_ns").to_numpy(), np.int64)
        p_count = np.asarray(picked.column("count").to_numpy(), np.int64)
        p_order = np.lexsort((p_value, p_bucket, p_gid))
        p_gid, p_bucket, p_value, p_count = (
            p_gid[p_order],
            p_bucket[p_order],
            p_value[p_order],
            p_count[p_order],
        )
        starts = np.flatnonzero(
            np.r_[True, (p_gid[1:] != p_gid[:-1]) | (p_bucket[1:] != p_bucket[:-1])]
        )
        for start, end in zip(starts, np.r_[starts[1:], len(p_gid)]):
            values[(int(p_gid[start]), int(p_bucket[start]))] = (
                p_value[start:end],
                np.cumsum(p_count[start:end]),
            )
        at_rank = np.empty(len(row), np.int64)
        for i, (r, w) in enumerate(zip(row, within)):
            value, running = values[(int(gid[r]), int(bucket[r]))]
            at_rank[i] = value[np.searchsorted(running, w, side="right")]
        size = len(count)
        out = {}
        for i, (column, (_below, _above, gamma)) in enumerate(wanted.items()):
            below = at_rank[2 * i * size : (2 * i + 1) * size]
            above = at_rank[(2 * i + 1) * size : (2 * i + 2) * size]
            out[column] = interpolate(below, above, gamma)
        return out

    def unique_ids(self) -> bool:
        if self._unique is None:
            (repeated,) = self.session.sql(
                f"SELECT count(*) FROM (SELECT span_id FROM {self.view} GROUP BY span_id "
                f"HAVING count(*) > 1) AS r"
            ).collect()[0]
            self._unique = repeated == 0
        return self._unique

    def phases(self) -> pa.Table:
        from ._phase_kernel import category_levels

        self._check((), _NEEDED + ("category", "rank"))
        categories = sorted(
            r[0]
            for r in self.session.sql(
                f"SELECT DISTINCT category FROM {self.view} WHERE category IS NOT NULL"
            ).collect()
        )
        levels = category_levels(categories)
        levels_view = f"hotspan_levels_{next(_views)}"
        rows = [(c, int(t), int(s)) for c, t, s in zip(categories, levels[2], levels[3])]
        self.session.createDataFrame(
            rows, "category string, top int, sub int"
        ).createOrReplaceTempView(levels_view)
        try:
            result = _to_arrow(
                self.session.sql(
                    phases_sql(
                        SPARK,
                        self.view,
                        levels_view,
                        unique_ids=self.unique_ids(),
                        waits={"self_ns", "wait_ns"} <= set(self.columns),
                    )
                )
            )
            ranks = np.array(
                sorted(
                    r[0]
                    for r in self.session.sql(f"SELECT DISTINCT rank FROM {self.view}").collect()
                ),
                np.int64,
            )
        finally:
            self.session.catalog.dropTempView(levels_view)
        return finish_phases(result, ranks, levels)

    def durations(
        self, by: Sequence[str], keys: pa.Table
    ) -> Iterator[tuple[tuple[Any, ...], np.ndarray]]:
        """(key, the group's durations) for the groups of ``keys``, in key order (collected
        to the driver one group at a time)."""
        from ._queries import key_sql

        q = SPARK.quote
        select = ", ".join(
            [key_sql(SPARK, k) for k in by] + [f"collect_list({q('duration_ns')}) AS v"]
        )
        frame = self.session.sql(
            f"SELECT {select} FROM {self.view} GROUP BY {', '.join(q(k) for k in by)}"
        )
        found = {
            tuple(getattr(row, k) for k in by): np.asarray(row.v, np.int64)
            for row in frame.toLocalIterator()
        }
        for row in keys.to_pylist():
            key = tuple(row[k] for k in by)
            yield key, found.get(key, np.zeros(0, np.int64))

    def compare(
        self,
        other: SparkSpans,
        options: CompareOptions,
        reference: tuple[float, float] | None,
        machine: tuple[Any, Any],
    ) -> pa.Table:
        from .comparison import judge_rows

        by = options.by
        request = StatsRequest(by)
        before, after = self.stats(request), other.stats(request)

        def durations(keys: pa.Table) -> Iterator[tuple[tuple[Any, ...], np.ndarray, np.ndarray]]:
            for (key, x), (_, y) in zip(self.durations(by, keys), other.durations(by, keys)):
                yield key, x, y

        return judge_rows(before, after, durations, options, reference=reference, machine=machine)

    def select(self, where: str, columns: Sequence[str], order: Sequence[str] = ()) -> pa.Table:
        """The rows where ``where`` holds, ``columns`` of them, as an Arrow table on the driver
        (for the across-ranks passes: the few rows a pass keeps). Unsigned 64-bit ids, which
        Spark reads as DECIMAL(20,0), come back as uint64."""
        q = SPARK.quote
        sql = f"SELECT {', '.join(q(c) for c in columns)} FROM {self.view} WHERE {where}"
        if order:
            sql += f" ORDER BY {', '.join(q(c) for c in order)}"
        return _plain_ids(_to_arrow(self.session.sql(sql)), columns)

    def window_sums(self, collective: str) -> pa.Table:
        """The across-ranks reasons' heavy group-by (rank_reasons.second_pass): per rank,
        collective span (by its ``start_ns``) and name, the sum of ``self_ns`` of the spans
        that are not collectives (``collective``: the SQL condition that says a span is one)
        and lie in the window before that collective on its rank: ending at or before its
        start, starting at or after the end of the rank's previous collective (in start
        order). The nearest collective at or after each span's end is found in one ordered
        pass per rank (a running ``last`` over the spans and collectives in descending
        time), not a range join."""
        q, low = SPARK.quote, -(1 << 63)
        rank, start, end = q("rank"), q("start_ns"), q("end_ns")
        sql = f"""
WITH events AS (
  SELECT {rank} AS r, {start} AS t, 1 AS kind, {start} AS cstart,
         coalesce(lag({end}) OVER (PARTITION BY {rank} ORDER BY {start}), {low}) AS prev_end,
         CAST(NULL AS STRING) AS n, CAST(NULL AS BIGINT) AS s, CAST(NULL AS BIGINT) AS st
  FROM {self.view} WHERE {collective}
  UNION ALL
  SELECT {rank}, {end}, 0, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
         {q("name")}, {q("self_ns")}, {start}
  FROM {self.view} WHERE NOT coalesce({collective}, false)
), placed AS (
  SELECT r, kind, n, s, st,
         last(cstart, true) OVER w AS at_start, last(prev_end, true) OVER w AS at_prev
  FROM events
  WINDOW w AS (PARTITION BY r ORDER BY t DESC, kind DESC
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT r AS rank, at_start AS start_ns, n AS name, sum(s) AS self_ns
FROM placed WHERE kind = 0 AND at_start IS NOT NULL AND at_prev <= st
GROUP BY r, at_start, n"""
        return _to_arrow(self.session.sql(sql))

    def rank_source(self) -> Any:
        """The across-ranks kernel's source (_rank_source.RankSource) over this Spark view."""
        from ._rank_source import RankSource

        return RankSource.on_spark(self)

    def metadata(self) -> dict[bytes, bytes]:
        import pyarrow.parquet as pq

        from ..formats.dataset import merge_metadata

        local = [f for f in self.files if "://" not in f or f.startswith("file://")]
        footers = [pq.ParquetFile(f.removeprefix("file://")) for f in local]
        if not footers:
            return {}
        return merge_metadata(
            [(dict(f.schema_arrow.metadata or {}), f.metadata.num_rows) for f in footers]
        )


def _plain_ids(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``span_id`` and ``parent_id`` as uint64 (Spark reads them as DECIMAL(20,0))."""
    for i, name in enumerate(columns):
        if name in ("span_id", "parent_id") and pa.types.is_decimal(table.schema.field(i).type):
            table = table.set_column(i, name, table.column(i).cast(pa.uint64()))
    return table


def _plain_type(name: str) -> pa.DataType:
    from .._schema import SPAN_SCHEMA
    from .._columns import plain_type

    return plain_type(SPAN_SCHEMA.field(name).type) if name in SPAN_SCHEMA.names else pa.string()


def _part_files(paths: Sequence[str], run: str | None = None) -> list[str]:
    """The Parquet files to read: a run directory's current parts (compacted inputs left out),
    files as they are, URIs as they are (Spark lists them)."""
    from pathlib import Path

    from ..formats.dataset import current_parts, parts_of_run

    files: list[str] = []
    for path in paths:
        if "://" in path or not Path(path).is_dir():
            files.append(path)
            continue
        files += [
            p
            for p, _size, _meta in parts_of_run(
                current_parts(Path(path))[1], lambda part: part[2], run, path
            )
        ]
    return files


del json
