"""The statistics as queries over the span schema, written once and rendered for each engine.

``stats`` per group is a handful of aggregates over the span columns (:data:`STAT_AGGREGATES`)
plus, for the exact percentiles, two order statistics per percentile (ranks
``floor((n - 1) q)`` and the next one, interpolated afterwards with numpy's own formula,
``_kernels.interpolate``, so a percentile equals ``numpy.percentile``'s to the last bit
whatever found the order statistics: numpy over a group's values, or duration buckets).
:func:`stats_sql` renders the aggregates as SQL
for a :class:`Dialect`: DuckDB's (embedded, the default engine) or Spark SQL's. The
in-memory path (statistics.py) computes the same aggregates with numpy, and
:func:`finish_stats` turns the per-group aggregates of any engine into the ``stats`` table,
so the derived columns (mean, share, busy, arg per second, the order of the rows) are
computed by one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ._group_batches import order_statistics
from ._phase_kernel import phases_of_sums
from .statistics import stats_table

__all__ = [
    "DUCKDB",
    "SPARK",
    "STAT_AGGREGATES",
    "Dialect",
    "combine_sql",
    "device_sql",
    "finish_stats",
    "stats_sql",
]


@dataclass(frozen=True)
class Dialect:
    """How one engine spells what the queries need."""

    name: str
    quote_char: str
    #: How a common table expression is kept inline (DuckDB materialises a CTE used twice;
    #: inline, at 200 M spans the parent join stayed within the memory limit).
    inline_cte: str
    text_type: str

    def quote(self, name: str) -> str:
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def string(self, value: str) -> str:
        text = value.replace("'", "''")
        if self.name == "spark":
            text = text.replace("\\", "\\\\")  # Spark reads backslash escapes in string literals
        return "'" + text + "'"

    def regex(self, expr: str, pattern: str) -> str:
        if self.name == "spark":
            return f"{expr} RLIKE {self.string(pattern)}"
        return f"regexp_matches({expr}, {self.string(pattern)})"

    def starts_with(self, expr: str, prefix: str) -> str:
        if self.name == "spark":
            return f"startswith({expr}, {self.string(prefix)})"
        return f"starts_with({expr}, {self.string(prefix)})"

    def count_if(self, condition: str) -> str:
        return f"count_if({condition})"

    def big_sum(self, expr: str) -> str:
        """A sum of int64s as int64 (DuckDB sums into a 128-bit integer)."""
        return f"CAST(sum({expr}) AS BIGINT)"


DUCKDB = Dialect("duckdb", '"', "NOT MATERIALIZED", "VARCHAR")
SPARK = Dialect("spark", "`", "", "STRING")


#: Per group: (alias, aggregate, column, condition). Aggregates: count (rows, or a column's
#: non-null values), sum, min, max, count_if (rows where the condition holds), sum_if.
#: ``self_ns`` is read from the column (hotspan computes it where spans become a table).
STAT_AGGREGATES: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("n", "count", None, None),
    ("total", "sum", "duration_ns", None),
    ("self_total", "sum", "self_ns", None),
    ("wait_total", "sum", "wait_ns", None),
    ("lo", "min", "duration_ns", None),
    ("hi", "max", "duration_ns", None),
    ("errors", "count_if", None, "error"),
    ("instants", "count_if", None, "duration_ns = 0"),
    ("args", "count", "arg", None),
    ("arg_sum", "sum", "arg", None),
    ("arg_time", "sum_if", "duration_ns", "arg IS NOT NULL"),
    ("first_start", "min", "start_ns", None),
    ("last_end", "max", "end_ns", None),
)


def _condition(dialect: Dialect, condition: str) -> str:
    # The conditions above name columns bare; quote them for the dialect.
    column, _, rest = condition.partition(" ")
    return (dialect.quote(column) + (" " + rest if rest else "")).strip()


def aggregate_sql(
    dialect: Dialect, alias: str, kind: str, column: str | None, condition: str | None
) -> str:
    col = dialect.quote(column) if column else None
    if kind == "count":
        expr = f"count({col})" if col else "count(*)"
        return f"CAST({expr} AS BIGINT) AS {dialect.quote(alias)}"
    if kind == "sum":
        return f"{dialect.big_sum(col or '')} AS {dialect.quote(alias)}"
    if kind in ("min", "max"):
        return f"{kind}({col}) AS {dialect.quote(alias)}"
    if kind == "count_if":
        return f"CAST({dialect.count_if(_condition(dialect, condition or 'TRUE'))} AS BIGINT) AS {dialect.quote(alias)}"
    if kind == "sum_if":
        when = _condition(dialect, condition or "TRUE")
        return f"{dialect.big_sum(f'CASE WHEN {when} THEN {col} END')} AS {dialect.quote(alias)}"
    raise AssertionError(kind)


def device_sql(dialect: Dialect) -> str:
    """``statistics.device_labels`` as SQL: ``host``, or a device row's thread name up to `` stream ``."""
    tid, tname = dialect.quote("thread_id"), dialect.quote("thread_name")
    return (
        f"CASE WHEN {tid} < 0 THEN regexp_replace(CAST({tname} AS {dialect.text_type}), ' stream .*$', '') "
        f"ELSE 'host' END"
    )


def key_sql(dialect: Dialect, key: str) -> str:
    """A ``by`` key as a select expression: a column, or ``device`` (derived)."""
    from .statistics import DEVICE_KEY

    if key == DEVICE_KEY:
        return f"{device_sql(dialect)} AS {dialect.quote(key)}"
    return dialect.quote(key)


def stats_sql(
    dialect: Dialect,
    relation: str,
    by: Sequence[str],
    *,
    columns: Sequence[str],
    values: str,
    extra_keys: Sequence[str] = (),
) -> str:
    """The per-group aggregates of ``stats`` over ``relation`` (a table or view of spans with
    ``columns``), grouped by ``by``; ``values``: ``"list"`` adds the group's values unsorted
    (``v``) for numpy to select from (``"list32"``: as 32-bit integers, for durations known to
    fit); ``"none"`` does not (the bounded path finds the percentiles by buckets).
    ``extra_keys``: select expressions (``expr AS alias``) that group too, after ``by`` (the
    bounded path's duration bucket)."""
    keys = [key_sql(dialect, k) for k in by] + list(extra_keys)
    aggregates = [
        aggregate_sql(dialect, *a) for a in STAT_AGGREGATES if a[2] is None or a[2] in columns
    ]
    dur = dialect.quote("duration_ns")
    if values == "list":
        aggregates.append(f"list({dur}) AS v")
    elif values == "list32":  # durations known to fit in 32 bits: half the bytes to collect
        aggregates.append(f"list(CAST({dur} AS INTEGER)) AS v")
    elif values != "none":
        raise ValueError(f"stats_sql: values must be list, list32 or none, not {values!r}")
    group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(keys)))}" if keys else ""
    return f"SELECT {', '.join(keys + aggregates)} FROM {relation}{group}"


#: How each kind of aggregate of :data:`STAT_AGGREGATES` combines over finer groups.
_COMBINE = {
    "count": "sum",
    "sum": "sum",
    "min": "min",
    "max": "max",
    "count_if": "sum",
    "sum_if": "sum",
}


def combine_sql(
    dialect: Dialect, relation: str, by: Sequence[str], *, columns: Sequence[str]
) -> str:
    """The aggregates of ``stats_sql(..., values="none")`` over finer groups (``relation``:
    its rows, grouped by ``by`` and more) combined into the groups of ``by``: every one of
    them is a count, sum, min or max, so the finer rows hold all it takes."""
    q = dialect.quote
    parts = [q(k) for k in by]
    for alias, kind, column, _condition in STAT_AGGREGATES:
        if column is not None and column not in columns:
            continue
        how = _COMBINE[kind]
        expr = f"{how}({q(alias)})"
        parts.append(f"{dialect.big_sum(q(alias)) if how == 'sum' else expr} AS {q(alias)}")
    group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(by)))}" if by else ""
    return f"SELECT {', '.join(parts)} FROM {relation}{group}"


def list_order_statistics(
    values: pa.ChunkedArray | pa.Array, counts: np.ndarray
) -> dict[str, np.ndarray]:
    """Per percentile, its value in each group, from each group's values (a list column, in
    the groups' order): see :func:`order_statistics`."""
    # Each chunk's groups where they lie: no concatenation (a copy of every value).
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    groups: list[tuple[int, np.ndarray | list[np.ndarray]]] = []
    first = 0
    for chunk in chunks:
        offsets = chunk.offsets.to_numpy()
        flat = chunk.values.to_numpy(zero_copy_only=False)  # int64, or int32 (list32)
        groups += [(first + g, flat[offsets[g] : offsets[g + 1]]) for g in range(len(chunk))]
        first += len(chunk)
    return order_statistics(groups, counts)


def finish_stats(
    groups: pa.Table,
    by: Sequence[str],
    percentiles: dict[str, np.ndarray],
    key_types: dict[str, pa.DataType],
    *,
    self_ns: np.ndarray | None = None,
    wall: int | None = None,
) -> pa.Table:
    """The ``stats`` table from per-group aggregates (the columns of :data:`STAT_AGGREGATES`,
    one row a group; ``self_ns`` when the engine found self time otherwise), rows largest
    total first, keys in order among equal totals."""

    def ints(name: str) -> np.ndarray:
        return np.asarray(groups.column(name).fill_null(0).to_numpy(), np.int64)

    count = ints("n")
    sums = {name: ints(name) for name in ("n", "errors", "instants", "args", "arg_sum", "arg_time")}
    sums["self_total"] = ints("self_total") if self_ns is None else np.asarray(self_ns, np.int64)
    # a trace without the column (older files, foreign traces) waited for nothing known
    has_wait = "wait_total" in groups.column_names
    sums["wait_total"] = ints("wait_total") if has_wait else np.zeros(len(count), np.int64)
    if wall is None:
        wall = int(np.max(groups.column("last_end").to_numpy())) - int(
            np.min(groups.column("first_start").to_numpy())
        )
    return stats_table(
        by,
        [groups.column(k).combine_chunks().cast(key_types[k]) for k in by],
        sums,
        total=ints("total"),
        low=np.asarray(groups.column("lo").to_numpy(), np.int64),
        high=np.asarray(groups.column("hi").to_numpy(), np.int64),
        percentiles=percentiles,
        wall=wall,
    )


# --------------------------------------------------------------------------- phases


def phases_sql(
    dialect: Dialect, relation: str, levels: str, *, unique_ids: bool, waits: bool = False
) -> str:
    """``statistics.phases`` as one aggregation: per rank, top-level category and sub-category
    number (``levels``: category -> top, sub; ``_phase_kernel.category_levels``) and whether the
    span's parent is in the same one (then it does not open it), the time and the steps.

    Small integers, not category strings, go through the parent join (its hash table holds a
    few words a span: at 200 M spans strings ran DuckDB out of its memory limit); the result
    is a few rows a rank, summed by :func:`finish_phases`. A parent is looked up as
    ``statistics.parent_rows`` does: by id; where ids repeat, within the child's rank, pid and
    thread (one of them, should an id repeat within a thread too). ``waits`` (the relation
    has ``self_ns`` and ``wait_ns``): the self and wait times summed too (``own``,
    ``waited``), for the categories whose spans awaited (``_phase_kernel.phase_times``)."""
    q = dialect.quote
    waited_cols = f", s.{q('self_ns')} AS o, s.{q('wait_ns')} AS w" if waits else ""
    waited_sums = (
        ", CAST(sum(c.o) AS BIGINT) AS own, CAST(sum(c.w) AS BIGINT) AS waited" if waits else ""
    )
    lane = () if unique_ids else ("rank", "pid", "thread_id")
    lane_cols = "".join(f", s.{q(c)}" for c in lane if c != "rank")
    parents = (
        "lv"
        if unique_ids
        else (
            "(SELECT * FROM (SELECT lv.*, row_number() OVER (PARTITION BY "
            + ", ".join(q(c) for c in (*lane, "span_id"))
            + " ORDER BY span_id) AS hs_rn FROM lv) AS numbered "
            "WHERE hs_rn = 1)"
        )
    )
    same = " AND ".join(f"p.{q(c)} IS NOT DISTINCT FROM c.{q(c)}" for c in lane) or "TRUE"
    return f"""
        WITH lv AS {dialect.inline_cte} (
            SELECT s.{q("span_id")} AS span_id, s.{q("parent_id")} AS parent_id, s.{q("rank")} AS {q("rank")},
                   s.{q("duration_ns")} AS d{lane_cols}{waited_cols},
                   CAST(coalesce(l.top, -1) AS INTEGER) AS top, CAST(coalesce(l.sub, -1) AS INTEGER) AS sub
            FROM {relation} AS s LEFT JOIN {levels} AS l ON s.{q("category")} = l.{q("category")})
        SELECT c.{q("rank")} AS {q("rank")}, c.top AS top, c.sub AS sub,
               coalesce(p.span_id IS NOT NULL AND p.top = c.top, FALSE) AS same_top,
               coalesce(p.span_id IS NOT NULL AND p.sub = c.sub, FALSE) AS same_sub,
               CAST(sum(c.d) AS BIGINT) AS time, CAST(count_if(c.d > 0) AS BIGINT) AS steps{waited_sums}
        FROM lv AS c LEFT JOIN {parents} AS p ON p.span_id = c.parent_id AND {same}
        GROUP BY 1, 2, 3, 4, 5"""


def finish_phases(rows: pa.Table, rank_values: np.ndarray, levels: tuple[Any, ...]) -> pa.Table:
    """The ``phases`` table from :func:`phases_sql`'s rows (``levels``: what
    ``_phase_kernel.category_levels`` gave for the categories it numbered)."""

    def column(name: str, dtype: Any) -> np.ndarray:
        return np.asarray(rows.column(name).to_numpy(zero_copy_only=False), dtype)

    names = ["rank", "top", "sub", "same_top", "same_sub", "time", "steps"]
    names += [n for n in ("own", "waited") if n in rows.column_names]
    return phases_of_sums(
        {name: column(name, np.bool_ if name.startswith("same") else np.int64) for name in names},
        rank_values,
        levels,
    )
