"""Which spans a question is about: one filter object for the library, the CLI and ``serve``.

    f = SpanFilter(categories=("train",), ranks=(0, 1), since=10, until=20, min_ns=1_000)
    hotspan.stats("run/", filter=f)          # streamed: a SQL condition (DuckDB or Spark)
    hotspan.stats(table, filter=f)           # in memory: a pyarrow mask

The filter is written once, as a list of terms (:meth:`SpanFilter.terms`), and each engine
renders those terms its own way (:func:`arrow_mask`, :func:`dataset_expression`,
:func:`sql_condition`), so a question gets the same spans whichever path answers it.

The time window (``since``/``until``) takes seconds from the run's start (its first span's
start) or, for values of at least 10**15, nanoseconds since the Unix epoch; a span is in the
window when it *starts* in ``[since, until)``, or, with ``overlap=True`` (``hotspan export``,
serve's "Open this window in Perfetto"), when any of it lies in the window, as a timeline
shows it: it starts before ``until`` and ends after ``since`` (an instant: at or after
``since``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EPOCH_NS_FROM",
    "FilterError",
    "SpanFilter",
    "arrow_mask",
    "dataset_expression",
    "sql_condition",
    "window_terms",
]

#: A time-window bound of at least this is nanoseconds since the epoch (1e15 ns is 1970-01-12;
#: no run lasts 1e15 s), smaller ones are seconds from the run's start.
EPOCH_NS_FROM = 10**15
INT64_MAX = 2**63 - 1


class FilterError(ValueError):
    """A filter that cannot be applied (a bad regular expression, an unknown column)."""


#: A term: (kind, column, value). Kinds: "regex" (partial match, RE2 syntax: pyarrow and DuckDB
#: use RE2, Spark Java's regex, the same for the patterns people write), "eq" (the column as a
#: string equals value), "in" (value: a tuple of ints), "prefix" (value: a category path: it or
#: any path below it), "ge"/"lt" (value: an int), "any" (value: a tuple of terms, any holds).
Term = tuple[str, str, Any]


@dataclass(frozen=True)
class SpanFilter:
    """The spans a question is about; every field narrows (all must hold), ``None``/empty
    does not.

    ``where``: (column, op, value) with op ``~`` (regex search) or ``=`` (equals, as text),
    as ``--filter COL~REGEX`` / ``COL=VALUE`` give them; ``names``: exact names (any of);
    ``categories``: a category or any below it (``train`` takes ``train/compute``; any of);
    ``ranks``; ``threads``: thread names or ids (any of); ``since``/``until``: the time window
    (see the module doc); ``min_ns``: a minimum duration; ``run``: a run id (the parts of a
    directory recorded by that run only); ``overlap``: the window keeps the spans overlapping
    it, not only those starting in it (see the module doc)."""

    where: tuple[tuple[str, str, str], ...] = ()
    names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    ranks: tuple[int, ...] | None = None
    threads: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    min_ns: int | None = None
    run: str | None = None
    overlap: bool = False
    #: The run's start (epoch ns), once known: relative bounds are resolved against it.
    origin_ns: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        from .._schema import SPAN_SCHEMA

        for column, op, value in self.where:
            if column not in SPAN_SCHEMA.names:
                raise FilterError(f"no column {column!r}; columns: {', '.join(SPAN_SCHEMA.names)}")
            if op not in ("~", "="):
                raise FilterError(
                    f"filter on {column}: op must be '~' (regex) or '=' (equals), not {op!r}"
                )
            if op == "~":
                try:
                    re.compile(value)
                except re.error as exc:
                    raise FilterError(f"bad regular expression {value!r}: {exc}") from None
        for bound in (self.since, self.until):
            if bound is not None and (
                not isinstance(bound, (int, float)) or math.isnan(bound) or bound < 0
            ):
                raise FilterError(
                    f"since/until: expected seconds from the run's start (>= 0) or epoch ns, not "
                    f"{bound!r}"
                )
        if self.min_ns is not None and self.min_ns < 0:
            raise FilterError(f"minimum duration must be >= 0 ns, not {self.min_ns}")

    @classmethod
    def of(cls, value: SpanFilter | Mapping[str, Any] | None) -> SpanFilter:
        """``value`` as a filter: a filter, a dict of its fields, or None (every span)."""
        if value is None:
            return cls()
        if isinstance(value, SpanFilter):
            return value
        if isinstance(value, dict):
            fields: dict[str, Any] = {
                k: tuple(v) if isinstance(v, list) else v for k, v in value.items()
            }
            return cls(**fields)
        raise TypeError(
            f"filter: expected a hotspan.SpanFilter or a dict of its fields, not {type(value).__name__}"
        )

    def __bool__(self) -> bool:
        """Whether the filter leaves any span out (the run id aside: parts are chosen by it)."""
        return bool(
            self.where
            or self.names
            or self.categories
            or self.ranks is not None
            or self.threads
            or self.since is not None
            or self.until is not None
            or self.min_ns is not None
        )

    @property
    def needs_origin(self) -> bool:
        """Whether a bound is relative to the run's start, not yet known."""
        return self.origin_ns is None and any(
            b is not None and b < EPOCH_NS_FROM for b in (self.since, self.until)
        )

    def with_origin(self, origin_ns: int | None) -> SpanFilter:
        return replace(self, origin_ns=origin_ns)

    def window(self) -> tuple[int | None, int | None]:
        """The time window in epoch ns: [low, high) of the spans' starts."""

        def absolute(bound: float | None) -> int | None:
            if bound is None:
                return None
            if bound >= EPOCH_NS_FROM:
                at = int(bound)
            elif self.origin_ns is None:
                raise FilterError("since/until in seconds need the run's start (origin_ns)")
            else:
                at = self.origin_ns + round(bound * 1e9)
            return min(at, INT64_MAX)  # past any span: every engine compares in int64

        if any(b is not None and math.isinf(b) for b in (self.since, self.until)):
            raise FilterError("since/until: expected a finite time")

        return absolute(self.since), absolute(self.until)

    def terms(self) -> list[Term]:
        """The filter as terms that must all hold (see ``Term``)."""
        out: list[Term] = []
        for column, op, value in self.where:
            out.append(("regex" if op == "~" else "eq", column, value))
        if self.names:
            out.append(("any", "", tuple(("eq", "name", n) for n in self.names)))
        if self.categories:
            out.append(
                ("any", "", tuple(("prefix", "category", c.strip("/")) for c in self.categories))
            )
        if self.ranks is not None:
            out.append(("in", "rank", tuple(int(r) for r in self.ranks)))
        if self.threads:
            out.append(
                (
                    "any",
                    "",
                    tuple(
                        t
                        for name in self.threads
                        for t in (("eq", "thread_name", str(name)), ("eq", "thread_id", str(name)))
                    ),
                )
            )
        out.extend(window_terms(*self.window(), overlap=self.overlap))
        if self.min_ns is not None:
            out.append(("ge", "duration_ns", int(self.min_ns)))
        return out


def window_terms(low: int | None, high: int | None, *, overlap: bool = False) -> list[Term]:
    """The terms of a window ``[low, high)`` in epoch ns (None: unbounded): the spans that
    start in it, or with ``overlap`` those any of which lies in it (they start before
    ``high`` and end after ``low``, or, instants, start at ``low`` or later)."""
    out: list[Term] = []
    if low is not None:
        if overlap:
            after = min(low + 1, INT64_MAX)  # end_ns > low, as the terms compare: >=
            out.append(("any", "", (("ge", "end_ns", after), ("ge", "start_ns", low))))
        else:
            out.append(("ge", "start_ns", low))
    if high is not None:
        out.append(("lt", "start_ns", high))
    return out


# --------------------------------------------------------------------------- in memory (pyarrow)


def arrow_mask(table: pa.Table, terms: Sequence[Term]) -> Any:
    """A boolean mask of ``table``'s rows where every term holds (None: no term)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def text(column: str) -> Any:
        values = table.column(column)
        return values.cast(pa.string())

    def one(term: Term) -> Any:
        kind, column, value = term
        if kind == "regex":
            return pc.match_substring_regex(text(column), value).fill_null(False)
        if kind == "eq":
            return pc.equal(text(column), value).fill_null(False)
        if kind == "prefix":
            category = text(column)
            return pc.or_(
                pc.equal(category, value), pc.starts_with(category, value + "/")
            ).fill_null(False)
        if kind == "in":
            return pc.is_in(
                table.column(column), value_set=pa.array(value, table.schema.field(column).type)
            )
        if kind == "ge":
            return pc.greater_equal(table.column(column), value).fill_null(False)
        if kind == "lt":
            return pc.less(table.column(column), value).fill_null(False)
        if kind == "any":
            masks = [one(t) for t in value]
            mask = masks[0]
            for m in masks[1:]:
                mask = pc.or_(mask, m)
            return mask
        raise AssertionError(kind)

    mask = None
    for term in terms:
        m = one(term)
        mask = m if mask is None else pc.and_(mask, m)
    return mask


def filter_table(table: pa.Table, span_filter: SpanFilter) -> pa.Table:
    """The rows of ``table`` the filter keeps (relative times from the table's first start)."""
    import pyarrow.compute as pc

    if not span_filter:
        return table
    if span_filter.needs_origin:
        first = pc.min(table.column("start_ns")).as_py() if table.num_rows else 0
        span_filter = span_filter.with_origin(first)
    mask = arrow_mask(table, span_filter.terms())
    return table if mask is None else table.filter(mask)


def dataset_expression(terms: Sequence[Term], names: Sequence[str]) -> Any:
    """The terms as a ``pyarrow.dataset`` expression over a part's columns (pushed down to the
    Parquet reader), leaving out terms on columns the part lacks (``rank`` of a part whose
    ``rank=R`` directory says it: the caller checks those). None: no term."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    def text(column: str) -> Any:
        return ds.field(column).cast("string")

    def one(term: Term) -> Any:
        kind, column, value = term
        if kind == "any":
            parts = [one(t) for t in value]
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
            out = parts[0]
            for p in parts[1:]:
                out = out | p
            return out
        if column not in names:
            return None
        if kind == "regex":
            return pc.match_substring_regex(text(column), value)
        if kind == "eq":
            return text(column) == value
        if kind == "prefix":
            return (text(column) == value) | pc.starts_with(text(column), value + "/")
        if kind == "in":
            return ds.field(column).isin(list(value))
        if kind == "ge":
            return ds.field(column) >= value
        if kind == "lt":
            return ds.field(column) < value
        raise AssertionError(kind)

    expr = None
    for term in terms:
        e = one(term)
        if e is not None:
            expr = e if expr is None else expr & e
    return expr


# --------------------------------------------------------------------------- SQL (DuckDB, Spark)


def sql_literal(value: Any) -> str:
    """``value`` as a SQL literal (str, int, float, bool, None): the same in DuckDB and Spark."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    # Spark reads a backslash in a string literal as an escape; DuckDB does not.
    return "'" + str(value).replace("'", "''") + "'"


def sql_condition(terms: Sequence[Term], dialect: Any) -> str | None:
    """The terms as one SQL condition in ``dialect`` (analysis/_queries.py), nulls false."""

    def one(term: Term) -> str:
        kind, column, value = term
        col = dialect.quote(column) if column else ""
        if kind == "regex":
            return str(dialect.regex(f"CAST({col} AS {dialect.text_type})", value))
        if kind == "eq":
            return f"CAST({col} AS {dialect.text_type}) = {dialect.string(value)}"
        if kind == "prefix":
            return f"({col} = {dialect.string(value)} OR {dialect.starts_with(col, value + '/')})"
        if kind == "in":
            return f"{col} IN ({', '.join(str(int(v)) for v in value) or 'NULL'})"
        if kind == "ge":
            return f"{col} >= {int(value)}"
        if kind == "lt":
            return f"{col} < {int(value)}"
        if kind == "any":
            return "(" + " OR ".join(f"coalesce({one(t)}, FALSE)" for t in value) + ")"
        raise AssertionError(kind)

    parts = [f"coalesce({one(t)}, FALSE)" for t in terms]
    return " AND ".join(parts) or None
