"""``stats``, ``phases`` and ``compare`` over runs larger than memory: pyarrow and DuckDB over the Parquet files.

    hotspan.stats("run/")                 # a dataset directory (part-r<R>-*.parquet)
    hotspan.stats("big.parquet", by="name")
    hotspan.compare("base/", "new/")

The results equal the in-memory path's (``stats(load(path))``): same columns, types and
values, percentiles to the last bit. Rows whose sort key ties (``total_ns`` for stats, a
phase's time) may come in another order: the in-memory path breaks ties by the order in
which values first appear in the table, which a streaming scan does not know; here they
come in key order.

How, for ``stats`` without a filter: the parts read with pyarrow, a part at a time on
every core (``parquet_scan``): counts and sums by the in-memory path's own function; when
the run's durations fit in the memory limit twice over, each group's durations kept (as
32-bit integers where they fit) for ``numpy.partition`` to take the two order statistics
of each percentile; else two reads, the second keeping only the durations of the buckets
that hold those order statistics. Self time is the ``self_ns`` column summed (no parent
join). No DuckDB connection is made for it.

Where that cannot be (a filter, a part without a column ``stats`` reads): when the
durations fit in the memory limit (about 24 bytes a span), one scan, DuckDB aggregating per
group (the query of ``queries.stats_sql``, shared with Spark) and collecting each group's
durations, of which ``numpy.partition`` takes the order statistics. Otherwise (or should
that run out of memory), with bounded memory (DuckDB's ``memory_limit``, spilling to
``temp_directory``):

- Counts, sums, min, max, errors and args: one scan, grouped by the keys and a *bucket* of
  durations (log-spaced: 1024 a power of two, so a bucket spans less than 0.1% of its
  values; monotone in the duration, checked: see ``BUCKET_MACROS``), then combined per group
  (``queries.combine_sql``: every aggregate is a count, sum, min or max); the counts per
  bucket stay for the percentiles.
- Exact percentiles: DuckDB's own ``quantile_cont`` keeps every value of a group in memory
  (it does not spill: 100 M values under a 400 MB limit fail), so instead the order
  statistics that numpy's linear interpolation needs (ranks ``floor((n-1)q)`` and the next
  one) are located in their buckets from the cumulative counts, and a second scan fetches
  only the durations of those few buckets (as distinct values with counts). The
  interpolation is then numpy's own formula (``statistics.interpolate``).
- Phases (and the self time of older files without a ``self_ns`` column: duration minus
  direct children there): a join of each span's ``parent_id`` on ``span_id`` (DuckDB's hash
  join spills), keyed as the in-memory path keys it (by ``span_id`` alone; when an id
  repeats, within the span's rank, pid and thread).
- compare: per group the durations stream in group order from a sorted query (the sort
  spills), one group at a time, into the in-memory path's own test and bootstrap; a group
  of more than ``COMPARE_MAX_VALUES`` spans on a side is thinned to that many, evenly over
  its sorted values (so its quantiles are kept), and only there do p-value and interval
  differ from the in-memory path's (see ``group_durations``). The seeded bootstrap draws
  follow the order of the groups (largest base total first): groups whose base totals tie
  may come in another order, and then their intervals differ too.

Settings: ``HOTSPAN_MEMORY_LIMIT`` (DuckDB's memory limit, default 1GB) and
``HOTSPAN_TEMP_DIR`` (where it spills; default a fresh directory under the system's
temporary directory, removed afterwards).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
import pyarrow as pa

from ._kernels import interpolate, percentile_ranks
from .statistics import (
    PERCENTILES,
    STAT_COLUMNS,
    STAT_TYPES,
    is_path,
)
from .._columns import plain_type
from ._duckdb_source import BUCKET_MACROS
from ._duckdb_source import NEEDED, SpanSource, quote_name, same_keys

if TYPE_CHECKING:
    from ._options import CompareOptions

#: The duration buckets' macros (duckdb_source.py), under the name the tests read.
_MACROS = BUCKET_MACROS

__all__ = [
    "COMPARE_MAX_VALUES",
    "SpanSource",
    "canonical_rows",
    "is_path",
    "stream_compare",
    "stream_stats",
]

#: Above this many spans of one group on one side, compare thins the group (see the module doc).
COMPARE_MAX_VALUES = 5_000_000  # x 2 sides x ~40 bytes of working copies: ~400 MB at most


def other_format(path: Any) -> TypeGuard[str | os.PathLike[str]]:
    """A trace file of a format other than Parquet (JSON, Perfetto, ...): loaded in memory."""
    return is_path(path) and Path(path).is_file() and not str(path).lower().endswith(".parquet")


def load_trace(path: str | os.PathLike[str]) -> pa.Table:
    from ..formats import load

    return load(path)


def open_source(path: str | os.PathLike[str] | SpanSource) -> tuple[SpanSource, bool]:
    if isinstance(path, SpanSource):
        return path, False
    return SpanSource(path), True


@contextlib.contextmanager
def reading(source: SpanSource) -> Iterator[None]:
    """DuckDB's errors while reading (a damaged part found mid-scan) as ``TraceFileError``
    naming the trace. (DuckDB is not imported for it: the fast path of ``stats`` runs none.)"""
    from ..formats._base import TraceFileError

    try:
        yield
    except Exception as exc:
        duckdb = sys.modules.get("duckdb")
        if duckdb is None or not isinstance(exc, duckdb.Error):
            raise
        if isinstance(exc, duckdb.OutOfMemoryException):
            raise MemoryError(
                f"{source.path}: {exc} (HOTSPAN_MEMORY_LIMIT raises DuckDB's limit)"
            ) from exc
        raise TraceFileError(source.path, f"not a readable span table: {exc}") from exc


# --------------------------------------------------------------------------- stats


def stream_stats(
    path: str | os.PathLike[str] | SpanSource, by: str | Sequence[str] = ("category", "name")
) -> pa.Table:
    """``statistics.stats`` of the spans in ``path`` (a Parquet file or dataset directory, or
    an open ``SpanSource``), streamed: see the module doc."""
    by = check_by(by)
    if other_format(path):
        from .statistics import stats

        return stats(load_trace(path), by)
    source, owned = open_source(path)
    try:
        with reading(source):
            return _stats(source, by)
    finally:
        if owned:
            source.close()


def check_by(by: str | Sequence[str]) -> tuple[str, ...]:
    by = (by,) if isinstance(by, str) else tuple(by)
    for name in by:
        if not isinstance(name, str):
            raise TypeError(f"by: column names must be str, not {type(name).__name__}")
    if len(set(by)) != len(by):
        raise ValueError(f"by: a column is named twice in {', '.join(by)}")
    return by


#: The fast path holds each group's durations (in DuckDB's list aggregate, then as one Arrow
#: array here): about this many bytes a span, at most, against HOTSPAN_MEMORY_LIMIT.
_BYTES_PER_VALUE = 24
#: Whether the fast path reads the parts with pyarrow (parquet_scan.py) where it can, rather
#: than DuckDB's list() (the tests turn it off to keep both covered).
_PARQUET_SCAN = True


def _stats(source: SpanSource, by: tuple[str, ...]) -> pa.Table:
    """Per group, the aggregates of ``queries.STAT_AGGREGATES`` and the exact percentiles.

    Fast path (the run's durations fit in the memory limit): the parts read with pyarrow a
    part at a time, their counts and sums taken by the in-memory path's own function, each
    group's durations kept and partitioned by numpy (``parquet_scan.part_groups``); no query
    engine starts. Where that cannot be (a filter, a part without a column it needs, the wall
    time unknown to the footers): one DuckDB scan, grouping and aggregating
    (``queries.stats_sql``) and collecting each group's durations with ``list()``, of which
    numpy picks the order statistics (``queries.list_order_statistics``). Bounded path
    otherwise (or should the fast one run out of memory): the buckets of the module doc, two
    scans, nothing held whole. Self time is the ``self_ns`` column summed; a trace without
    the column (older files) gets it from a parent join."""
    from ._queries import DUCKDB, finish_stats, list_order_statistics, stats_sql

    source.check_columns(by, NEEDED)
    columns = list(source.columns)
    wall = None
    if not source.filtered:
        # The wall time from the footers: no scan of start_ns and end_ns for it.
        (first, _), (_, last) = source.column_range("start_ns"), source.column_range("end_ns")
        if first is not None and last is not None:
            wall = int(last) - int(first)
            columns = [c for c in columns if c not in ("start_ns", "end_ns")]
    if wall is not None and _PARQUET_SCAN:
        scanned = _scan_stats(source, by, wall)
        if scanned is not None:
            return scanned
    if source.rows * _BYTES_PER_VALUE <= source.memory_bytes():
        # Durations under 2.1 s (most spans; the footers say) collected as 32-bit integers:
        # half the bytes for DuckDB to gather, hand over and numpy to partition; same values.
        low, high = source.column_range("duration_ns")
        narrow = low is not None and high is not None and -(2**31) <= low and high < 2**31
        values = "list32" if narrow else "list"
        import duckdb

        try:
            groups = source.arrow(stats_sql(DUCKDB, "spans", by, columns=columns, values=values))
        except duckdb.OutOfMemoryException:
            groups = None
        if groups is not None:
            if groups.num_rows == 0:
                return _empty_stats(source, by)
            count = groups.column("n").to_numpy()
            percentiles = list_order_statistics(groups.column("v"), count)
            self_ns = None if "self_ns" in columns else _parent_self(source, by, groups)
            return finish_stats(
                groups.drop_columns(["v"]),
                by,
                percentiles,
                _key_types(source, by),
                self_ns=self_ns,
                wall=wall,
            )
    return _bucket_stats(source, by, columns, wall)


def _scan_stats(source: SpanSource, by: tuple[str, ...], wall: int) -> pa.Table | None:
    """The fast path: the parts read with pyarrow (``parquet_scan.part_groups``), when the
    run's durations fit in the memory limit; None where it does not apply."""
    from ._parquet_scan import part_buckets, part_groups, scan_memory

    from .statistics import finish_groups

    footers = source.footers()
    largest = max((f.num_rows for f in footers), default=0)
    # 4 bytes a duration where the footers show they all fit in 32 bits (else counted as 8;
    # each part keeps its own as 32-bit integers when they fit, footers or not)
    low, high = source.column_range("duration_ns", query=False)
    narrow = low is not None and high is not None and -(2**31) <= low and high < 2**31
    held, reading = scan_memory(source.rows, narrow, largest)
    schemas = [f.schema.to_arrow_schema() for f in footers]
    if held <= source.memory_bytes():
        found = part_groups(source.files, schemas, by, filesystem=source.filesystem)
    elif reading <= source.memory_bytes():  # bounded: two reads, the few values wanted kept
        found = part_buckets(source.files, schemas, by, filesystem=source.filesystem)
    else:
        return None
    if found is None:
        return None
    numbers, aggregates, percentiles = found
    if not numbers:
        return _empty_stats(source, by)
    types = _key_types(source, by)
    keys = list(numbers)  # in group-number order (insertion order)
    columns = [pa.array([k[i] for k in keys], types[name]) for i, name in enumerate(by)]
    return finish_groups(by, columns, aggregates, percentiles, wall=wall)


def _parent_self(source: SpanSource, by: tuple[str, ...], groups: pa.Table) -> np.ndarray:
    """Self time per group (in ``groups``' row order) for a trace without a ``self_ns`` column:
    the group's total minus the durations of its spans' direct children (a parent join)."""
    parent_keys = ", ".join(f"p.{quote_name(k)}" for k in by)
    child = source.arrow(f"""
        SELECT {parent_keys + "," if by else ""} sum(c.duration_ns)::BIGINT AS child
        FROM spans AS c {source.parent_join("c", "p")}
        WHERE (c.thread_id < 0) = (p.thread_id < 0)  -- a device row runs beside its host parent
        {"GROUP BY " + parent_keys if by else ""}""")
    found = {tuple(r[k] for k in by): r["child"] for r in child.to_pylist()}
    keys = groups.select(list(by)).to_pylist() if by else [{}] * groups.num_rows
    children = np.array([found.get(tuple(r[k] for k in by), 0) or 0 for r in keys], np.int64)
    return np.asarray(groups.column("total").to_numpy(), np.int64) - children


def _bucket_stats(
    source: SpanSource, by: tuple[str, ...], columns: list[str], wall: int | None
) -> pa.Table:
    from ._queries import DUCKDB, combine_sql, finish_stats, stats_sql

    # 1. Per group and duration bucket, every aggregate (one scan; the per-group ones are
    # their sums, mins and maxes below): a small table, groups x buckets.
    for bucket in ("hs_bucket", "hs_bucket_exact"):
        source.sql("DROP TABLE IF EXISTS hs_h")
        source.sql(
            "CREATE TEMP TABLE hs_h AS "
            + stats_sql(
                DUCKDB,
                "spans",
                by,
                columns=columns,
                values="none",
                extra_keys=(f"{bucket}(duration_ns) AS b",),
            )
        )
        if _check_buckets(source, by):
            break
    # 2. Per group, the aggregates, numbered largest total first (keys in order among equal totals).
    order = ", ".join(f"{quote_name(k)} ASC NULLS LAST" for k in by)
    source.sql("DROP TABLE IF EXISTS hs_g")
    source.sql(f"CREATE TEMP TABLE hs_g AS {combine_sql(DUCKDB, 'hs_h', by, columns=columns)}")
    source.sql(
        f"CREATE OR REPLACE TEMP TABLE hs_g AS SELECT *, row_number() OVER (ORDER BY total DESC"
        f"{', ' + order if by else ''}) - 1 AS gid FROM hs_g"
    )
    groups = source.arrow("SELECT * FROM hs_g")
    if groups.num_rows == 0:
        return _empty_stats(source, by)
    groups = groups.take(
        np.argsort(groups.column("gid").to_numpy())
    )  # (see _percentiles on ORDER BY)
    count = groups.column("n").to_numpy()
    percentiles = _percentiles(source, by, count, bucket)
    self_ns = None if "self_ns" in columns else _parent_self(source, by, groups)
    return finish_stats(
        groups.drop_columns(["gid"]),
        by,
        percentiles,
        _key_types(source, by),
        self_ns=self_ns,
        wall=wall,
    )


def _check_buckets(source: SpanSource, by: tuple[str, ...]) -> bool:
    """Whether the buckets of ``hs_h`` are monotone: per group, each one's largest duration
    below the next one's smallest."""
    keys = ", ".join(quote_name(k) for k in by)
    (broken,) = source.sql(f"""
        SELECT count(*) FROM (
            SELECT hi, lead(lo) OVER ({"PARTITION BY " + keys if by else ""} ORDER BY b) AS next_lo FROM hs_h)
        WHERE next_lo <= hi""").fetchall()[0]  # all: DuckDB 2 holds an unfinished result
    return bool(broken == 0)


def _percentiles(
    source: SpanSource, by: tuple[str, ...], count: np.ndarray, bucket: str
) -> dict[str, np.ndarray]:
    """p50/p90/p99 per group (in ``gid`` order), exact: the two order statistics of each
    fetched from the buckets that hold them (see the module doc)."""
    wanted: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
        column: percentile_ranks(count, q) for column, q in PERCENTILES
    }
    gid = np.arange(len(count), dtype=np.int64)
    ranks = np.concatenate([np.concatenate((below, above)) for below, above, _ in wanted.values()])
    ranks_gid = np.tile(gid, 2 * len(wanted))
    want = pa.table({"gid": ranks_gid, "pos": ranks})
    source.con.register("hs_want", want)
    try:
        keys_g = ", ".join(f"g.{quote_name(k)}" for k in by)
        # Each wanted rank's bucket: where the cumulative count passes it.
        source.sql("DROP TABLE IF EXISTS hs_target")
        source.sql(f"""
            CREATE TEMP TABLE hs_target AS
            WITH cum AS (
                SELECT g.gid, h.b, h.n, sum(h.n) OVER (PARTITION BY g.gid ORDER BY h.b) - h.n AS before
                FROM hs_h AS h JOIN hs_g AS g ON {same_keys(by, "h", "g")})
            SELECT DISTINCT w.gid, cum.b, cum.before::BIGINT AS before, w.pos
            FROM (SELECT DISTINCT gid, pos FROM hs_want) AS w JOIN cum ON w.gid = cum.gid
            WHERE w.pos >= cum.before AND w.pos < cum.before + cum.n""")
        # The distinct durations (with counts) of those buckets only, in order.
        values = source.arrow(f"""
            WITH t AS (SELECT DISTINCT t.gid, t.b, {keys_g + "," if by else ""} 0 AS _
                       FROM hs_target AS t JOIN hs_g AS g ON t.gid = g.gid)
            SELECT t.gid, t.b, s.duration_ns AS d, count(*) AS c
            FROM spans AS s JOIN t ON {same_keys(by, "s", "t")} AND {bucket}(s.duration_ns) = t.b
            GROUP BY ALL ORDER BY t.gid, t.b, d""")
        targets = source.arrow("SELECT gid, b, before, pos FROM hs_target")
    finally:
        source.con.unregister("hs_want")
    # In (gid, b, d) order (sorted here too: DuckDB keeps ORDER BY's order only while
    # preserve_insertion_order is on, off here for memory's sake).
    values = values.take(
        np.lexsort(
            (
                values.column("d").to_numpy(),
                values.column("b").to_numpy(),
                values.column("gid").to_numpy(),
            )
        )
    )
    v_gid = values.column("gid").to_numpy()
    v_b = values.column("b").to_numpy()
    v_d = values.column("d").to_numpy()
    cum = np.cumsum(values.column("c").to_numpy())  # over all blocks
    # Each (gid, b) block's first row, and the cumulative count before it.
    block_start = np.flatnonzero(np.r_[True, (v_gid[1:] != v_gid[:-1]) | (v_b[1:] != v_b[:-1])])
    block_gid, block_b = v_gid[block_start], v_b[block_start]
    block_before = np.where(block_start > 0, cum[block_start - 1], 0)
    t_gid, t_b = targets.column("gid").to_numpy(), targets.column("b").to_numpy()
    t_before, t_pos = targets.column("before").to_numpy(), targets.column("pos").to_numpy()
    block = np.lexsort(
        (block_b, block_gid)
    )  # blocks are in (gid, b) order already; searched as pairs
    found = _find_pairs(block_gid[block], block_b[block], t_gid, t_b)
    # The value at rank pos: the first row of its block whose cumulative count passes it.
    row = np.searchsorted(cum, block_before[block][found] + (t_pos - t_before), side="right")
    value_at = {(int(g), int(p)): int(v) for g, p, v in zip(t_gid, t_pos, v_d[row])}
    out = {}
    for column, (below, above, gamma) in wanted.items():
        a = np.array([value_at[(int(g), int(p))] for g, p in zip(gid, below)], np.int64)
        b = np.array([value_at[(int(g), int(p))] for g, p in zip(gid, above)], np.int64)
        out[column] = interpolate(a, b, gamma)
    return out


def _find_pairs(
    sorted_a: np.ndarray, sorted_b: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Indices into the (a, b)-sorted pairs of the pairs (a[i], b[i]) (each present)."""
    lookup = {(int(x), int(y)): i for i, (x, y) in enumerate(zip(sorted_a, sorted_b))}
    return np.array([lookup[(int(x), int(y))] for x, y in zip(a, b)], np.int64)


def _key_types(source: SpanSource, by: Sequence[str]) -> dict[str, pa.DataType]:
    """The in-memory path's key types: the span table's own (strings plain, not dictionaries)."""
    from .._schema import SPAN_SCHEMA

    schema = source.schema
    types = {}
    for name in by:
        if name == "device" and name not in schema.names:
            types[name] = pa.string()  # derived (statistics.device_labels)
        elif name in SPAN_SCHEMA.names:
            types[name] = plain_type(SPAN_SCHEMA.field(name).type)
        else:
            types[name] = plain_type(schema.field(name).type)
    return types


def _empty_stats(source: SpanSource, by: Sequence[str]) -> pa.Table:
    types = _key_types(source, by)
    fields = [pa.field(name, types[name]) for name in by]
    fields += [pa.field(name, STAT_TYPES[name]) for name in STAT_COLUMNS]
    return pa.schema(fields).empty_table()


# --------------------------------------------------------------------------- compare


def group_durations(
    source: SpanSource,
    by: Sequence[str],
    keys: pa.Table,
    counts: Sequence[int],
    max_values: int = COMPARE_MAX_VALUES,
) -> Iterator[tuple[int, np.ndarray]]:
    """(i, durations) for the groups of ``keys`` (one row per group) in row order: each group's
    spans, streamed from a query sorted by group (and duration: a group of more than
    ``max_values`` spans, ``counts[i]``, is thinned to every k-th of its sorted values)."""
    source.con.register(
        "hs_order", keys.append_column("hs_i", pa.array(np.arange(keys.num_rows), pa.int64()))
    )
    # Without it DuckDB may hand the sorted rows out of order, a batch of one thread then another's.
    source.sql("SET preserve_insertion_order = true")
    reader = None
    try:
        reader = source.batches(f"""
            SELECT o.hs_i AS i, s.duration_ns AS d FROM spans AS s JOIN hs_order AS o ON {same_keys(by, "s", "o")}
            ORDER BY o.hs_i, s.duration_ns""")
        current, seen = -1, 0
        parts: list[np.ndarray] = []

        def flush() -> tuple[int, np.ndarray]:
            values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            return current, values

        for batch in reader:
            i = batch.column(0).to_numpy()
            d = batch.column(1).to_numpy()
            bounds = np.flatnonzero(np.r_[True, i[1:] != i[:-1], True])
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                gi = int(i[lo])
                if gi != current:
                    if current >= 0:
                        yield flush()
                    current, parts, seen = gi, [], 0
                chunk = d[lo:hi]
                n = counts[gi]
                if n > max_values:
                    # Keep ranks 0, k, 2k, ... of the sorted group: its quantiles survive.
                    k = math.ceil(n / max_values)
                    first = (-seen) % k
                    seen += len(chunk)
                    chunk = chunk[first::k]
                parts.append(np.asarray(chunk, np.int64))
        if current >= 0:
            yield flush()
    finally:
        if reader is not None:
            reader.close()
        source.sql("SET preserve_insertion_order = false")
        source.con.unregister("hs_order")


def stream_compare(
    base: SpanSource,
    new: SpanSource,
    options: CompareOptions,
    reference: tuple[float, float] | None = None,
    machine: tuple[Any, Any] | None = None,
) -> pa.Table:
    """``comparison.compare`` of two open sources: see the module doc."""
    from .comparison import judge_rows

    by = check_by(options.by)
    with reading(base):
        before = _stats(base, by)
    with reading(new):
        after = _stats(new, by)

    def durations(keys: pa.Table) -> Iterator[tuple[tuple[Any, ...], np.ndarray, np.ndarray]]:
        """Per group of ``keys``: (key, base durations, new durations), in order."""
        b_counts = _counts_for(before, by, keys)
        a_counts = _counts_for(after, by, keys)
        b_stream = group_durations(base, by, keys, b_counts)
        a_stream = group_durations(new, by, keys, a_counts)
        b_next, a_next = next(b_stream, None), next(a_stream, None)
        for i, key in enumerate(keys.to_pylist()):
            x = y = np.zeros(0, np.int64)
            if b_next is not None and b_next[0] == i:
                x, b_next = b_next[1], next(b_stream, None)
            if a_next is not None and a_next[0] == i:
                y, a_next = a_next[1], next(a_stream, None)
            yield tuple(key[k] for k in by), x, y

    with reading(base), reading(new):
        return judge_rows(before, after, durations, options, reference=reference, machine=machine)


def _counts_for(result: pa.Table, by: Sequence[str], keys: pa.Table) -> list[int]:
    count = {tuple(r[k] for k in by): r["count"] for r in result.select([*by, "count"]).to_pylist()}
    return [count.get(tuple(r[k] for k in by), 0) for r in keys.to_pylist()]


# --------------------------------------------------------------------------- comparing results


def canonical_rows(result: pa.Table, by: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of a ``stats`` result in key order, NaN as None: what "equal" means between
    the streaming and the in-memory paths (whose order may differ among equal totals)."""

    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and math.isnan(value) else value

    rows = [{k: clean(v) for k, v in row.items()} for row in result.to_pylist()]
    return sorted(
        rows, key=lambda r: tuple((r[k] is None, r[k] if r[k] is not None else 0) for k in by)
    )
