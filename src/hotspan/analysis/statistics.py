"""Statistics over a span table: per-group times with exact percentiles, and phases.

    hotspan.stats(table)                          # by (category, name)
    hotspan.stats(table, by=("rank", "name"))     # any columns
    hotspan.phases(table)                         # sync -> sync/compute 71%, sync/comms 24%

Everything is computed with whole-column kernels (in C, or numpy / pyarrow operations): the
only Python loops run over batches, groups or distinct categories, never over spans. A
table's ``stats`` go through the batch kernels the Parquet scan feeds (``group_batches``):
one definition of each statistic for both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._columns import combined_codes, plain_type
from .._columns import parent_rows as parent_rows  # (reached here by older callers)
from ._kernels import PERCENTILES as PERCENTILES  # (reached here by the engines)
from ._phase_kernel import PHASE_COLUMNS, phases_of_table

__all__ = [
    "DEVICE_KEY",
    "PHASE_COLUMNS",
    "STAT_COLUMNS",
    "default_by",
    "device_labels",
    "phases",
    "stats",
]

#: The statistics columns of ``stats()``, after the ``by`` keys.
STAT_COLUMNS = (
    "count",
    "total_ns",
    "self_ns",
    "wait_ns",
    "mean_ns",
    "min_ns",
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "max_ns",
    "share",
    "busy",
    "errors",
    "arg_sum",
    "arg_per_s",
    "instants",
)

STAT_TYPES = {
    "count": pa.int64(),
    "total_ns": pa.int64(),
    "self_ns": pa.int64(),
    "wait_ns": pa.int64(),
    "mean_ns": pa.float64(),
    "min_ns": pa.int64(),
    "p50_ns": pa.float64(),
    "p90_ns": pa.float64(),
    "p99_ns": pa.float64(),
    "max_ns": pa.int64(),
    "share": pa.float64(),
    "busy": pa.float64(),
    "errors": pa.int64(),
    "arg_sum": pa.int64(),
    "arg_per_s": pa.float64(),
    "instants": pa.int64(),
}

_NEEDED = ("span_id", "parent_id", "start_ns", "end_ns", "duration_ns", "error", "arg")


def is_path(value: object) -> TypeGuard[str | os.PathLike[str]]:
    """Whether ``value`` names a trace to stream (a file, a dataset directory, a URI) rather
    than a table."""
    return isinstance(value, (str, os.PathLike))


# --------------------------------------------------------------------------- stats


def stats(table: pa.Table, by: str | Sequence[str] | None = None) -> pa.Table:
    """Per group of spans (the distinct values of the ``by`` columns): ``count``,
    ``total_ns``, ``self_ns`` (the time the spans' own code ran: total minus the time of
    direct children, and minus ``wait_ns``), ``wait_ns`` (the time their asyncio tasks were
    suspended, awaiting, while they were the tasks' innermost spans), ``mean_ns``,
    ``min_ns``, ``p50_ns``, ``p90_ns``, ``p99_ns`` (exact, linear interpolation as numpy's
    default), ``max_ns``, ``share`` (the group's self time over the summed self time of all
    spans of its rank/thread: of the lane columns ``rank``, ``pid``, ``thread_id`` and
    ``thread_name``, those in ``by`` say which spans count; with none of them, the whole
    table's; so the column adds up to 1 per rank/thread, or over the table), ``busy`` (total
    over the trace's wall time, from the first start to the last end; nested spans, spans
    on several threads at once and asyncio tasks that overlap make it add up to more than
    1), ``errors``, ``arg_sum`` and ``arg_per_s`` (the args summed, per second of the time of the
    spans that carry one; both null where no span of the group has an arg).

    Rows come largest ``total_ns`` first. Null keys form their own group.

    ``hotspan.stats`` also takes a path (analysis/_api.py): streamed, to the same result.
    Device rows (``span(..., device="cuda")``: a negative ``thread_id``) are kept apart from
    host spans: ``by`` may name ``device``, a key derived per row (``host``, or the device of
    a device row: ``cuda:0``; see :func:`device_labels`), and the default ``by`` is
    ``(category, name)`` plus ``device`` when the table has device rows (:func:`default_by`).
    With ``device`` in ``by``, ``share`` is taken per device, like a lane. A host span's
    ``self_ns`` never loses its device rows' time: they are its children, but on the device,
    in parallel with it.
    """
    if by is None:
        by = default_by(table)
    if not isinstance(table, pa.Table):
        raise TypeError(
            f"expected a pyarrow.Table of spans (or a path), not {type(table).__name__}"
        )
    table = with_device_key(table, by)
    # with the self_ns column, no parent lookup: the ids are not needed
    needed = (
        [c for c in _NEEDED if c not in ("span_id", "parent_id")]
        if "self_ns" in table.column_names
        else _NEEDED
    )
    by = _check_columns(table, by, needed)
    n = table.num_rows
    if n == 0:
        return _empty_stats(table, by)

    if "self_ns" not in table.column_names:
        # the column by its one rule, over the whole table (a batch may hold a child but
        # not its parent), before the table is cut in batches
        from .._selftime import self_ns_column

        table = table.append_column("self_ns", self_ns_column(table))
    # The same batch kernels, combination and finish as the Parquet scan's (group_batches)
    from ._group_batches import table_groups

    wall = int(pc.max(table.column("end_ns")).as_py()) - int(
        pc.min(table.column("start_ns")).as_py()
    )
    representative, aggregates, percentiles = table_groups(table, by)
    keys = [_plain(table.column(name).take(pa.array(representative))) for name in by]
    return finish_groups(by, keys, aggregates, percentiles, wall=wall)


def finish_groups(
    by: Sequence[str],
    keys: Sequence[pa.Array],
    aggregates: Mapping[str, np.ndarray],
    percentiles: Mapping[str, np.ndarray],
    *,
    wall: int,
) -> pa.Table:
    """The ``stats`` table from the groups of a run taken a batch at a time (a table in
    memory, or the Parquet parts: ``group_batches.Groups``), by :func:`stats_table`."""
    return stats_table(
        by,
        keys,
        aggregates,
        total=aggregates["total"],
        low=aggregates["lo"],
        high=aggregates["hi"],
        percentiles=percentiles,
        wall=wall,
    )


def stats_table(
    by: Sequence[str],
    keys: Sequence[pa.Array],
    sums: Mapping[str, np.ndarray],
    *,
    total: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    percentiles: Mapping[str, np.ndarray],
    wall: int,
) -> pa.Table:
    """The ``stats`` table from each group's keys (``keys``: one array per column of ``by``,
    one row a group), counts and sums (``sums``: those of :func:`kernels.group_sums`, under
    its names), total, min and max duration, percentiles, and the run's wall time: one
    definition for every path (in memory here; the Parquet scan, DuckDB and Spark through
    ``queries.finish_stats``). Rows largest total first, keys in order among equal totals."""
    count = sums["n"]
    columns: dict[str, np.ndarray | pa.Array] = {
        "count": count,
        "total_ns": total,
        "self_ns": sums["self_total"],
        "wait_ns": sums["wait_total"],
        "mean_ns": total / count,
        "min_ns": low,
        **percentiles,
        "max_ns": high,
    }
    key_table = pa.table(dict(zip(by, keys))) if by else pa.table({"_": pa.nulls(len(count))})
    columns["share"] = self_share(key_table, by, sums["self_total"], np.arange(len(count)))
    columns["busy"] = total / wall if wall > 0 else np.full(len(count), np.nan)
    columns["errors"] = sums["errors"]
    arg_sum, arg_time = sums["arg_sum"], sums["arg_time"]
    no_arg = sums["args"] == 0
    columns["arg_sum"] = pa.array(arg_sum, pa.int64(), mask=no_arg)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_s = arg_sum / (arg_time / 1e9)
    columns["arg_per_s"] = pa.array(per_s, pa.float64(), mask=no_arg | (arg_time <= 0))
    columns["instants"] = sums["instants"]
    stat_arrays = [
        value
        if isinstance(value := columns[name], pa.Array)
        else pa.array(np.asarray(value), STAT_TYPES[name])
        for name in STAT_COLUMNS
    ]
    # One order for every engine: largest total first, then the keys (order_stats_rows).
    result = pa.Table.from_arrays(list(keys) + stat_arrays, names=list(by) + list(STAT_COLUMNS))
    return order_stats_rows(result, by)


def split_instants(result: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A ``stats`` result as (timed groups, groups of instants only): instants (spans of no
    duration, ``hotspan.instant``) are counts, not times, and every view shows them apart."""
    only_instants = pc.equal(result.column("instants"), result.column("count"))
    return result.filter(pc.invert(only_instants)), result.filter(only_instants)


#: Columns that name a rank or thread (or device): ``share`` is taken within the values of
#: those in ``by``.
LANE_COLUMNS = ("rank", "pid", "thread_id", "thread_name", "device")


def self_share(
    table: pa.Table, by: Sequence[str], self_ns: np.ndarray, representative: np.ndarray
) -> np.ndarray:
    """Each group's self time over the summed self time of its lane (see ``stats``). Self
    times of a lane's spans add up to the time its outermost spans cover, so the shares of a
    lane add up to 1."""
    lanes = [name for name in by if name in LANE_COLUMNS]
    self_ns = np.asarray(self_ns, np.float64)
    if not lanes:
        denominator = np.full(len(self_ns), self_ns.sum())
    else:
        lane, _ = combined_codes(table, lanes)
        group_lane = lane[representative]
        per_lane = np.bincount(group_lane, weights=self_ns)
        denominator = per_lane[group_lane]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, self_ns / denominator, np.nan)


def _empty_stats(table: pa.Table, by: Sequence[str]) -> pa.Table:
    fields = [pa.field(name, plain_type(table.schema.field(name).type)) for name in by]
    fields += [pa.field(name, STAT_TYPES[name]) for name in STAT_COLUMNS]
    return pa.schema(fields).empty_table()


# --------------------------------------------------------------------------- device rows

#: The key of ``by`` derived per row, not read from the table: where the span ran.
DEVICE_KEY = "device"


def device_labels(table: pa.Table) -> pa.Array:
    """Per row where it ran: ``host`` for a span of a thread, the device for a device row
    (a negative ``thread_id``, see ``hotspan._devices.cuda``): its ``thread_name`` up to
    `` stream `` (``cuda:0`` for ``cuda:0 stream 7``)."""
    thread_id = table.column("thread_id")
    names = table.column("thread_name")
    if pa.types.is_dictionary(names.type):
        names = names.cast(names.type.value_type)
    device = pc.replace_substring_regex(names, pattern=" stream .*$", replacement="")
    labels = pc.if_else(pc.less(thread_id, 0), device, pa.scalar("host"))
    return labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels


def default_by(table: pa.Table) -> tuple[str, ...]:
    """``stats``' default keys: ``(category, name)``, plus ``device`` when the table has
    device rows, so their time never mixes with the host spans of the same name."""
    thread_id = table.column("thread_id") if "thread_id" in table.column_names else None
    has_device = thread_id is not None and table.num_rows and (pc.min(thread_id).as_py() or 0) < 0
    return ("category", "name", DEVICE_KEY) if has_device else ("category", "name")


def with_device_key(table: pa.Table, by: str | Sequence[str]) -> pa.Table:
    """``table`` with the derived ``device`` column when ``by`` names it (and the table has
    no column of that name of its own)."""
    keys = (by,) if isinstance(by, str) else tuple(by)
    if (
        DEVICE_KEY not in keys
        or DEVICE_KEY in table.column_names
        or not isinstance(table, pa.Table)
    ):
        return table
    if not {"thread_id", "thread_name"} <= set(table.column_names):
        return table  # the missing columns are reported by the usual check
    return table.append_column(DEVICE_KEY, device_labels(table))


# --------------------------------------------------------------------------- phases


def phases(table: pa.Table) -> pa.Table:
    """Where each top-level category's time goes, per rank.

    For each rank and top-level category (the first part of the category path, ``sync`` in
    ``sync/compute``): a row with ``phase`` = the category, its time (the outermost spans of
    the category: a ``sync`` span inside another ``sync`` span is not counted twice; where
    the category's spans awaited in asyncio tasks, the time their code ran: their self
    times summed, see ``_phase_kernel.phase_times``), its
    number of ``steps`` (those outermost spans, instants excluded) and ``per_step_ns``; then
    a row per sub-category (``sync/compute``: its outermost spans, deeper levels included)
    with its time, time per step of the category and ``share`` of the category's time.

    When the trace holds several ranks, rows with ``rank`` null follow: the mean over the
    ranks that have the category (``share`` is then the ratio of the means).

    ``hotspan.phases`` also takes a path (analysis/_api.py): streamed, to the same result.
    """
    _check_columns(table, (), _NEEDED + ("category", "rank"))
    return phases_of_table(table)


# --------------------------------------------------------------------------- shared helpers


def _check_columns(
    table: pa.Table, by: str | Iterable[str], needed: Iterable[str]
) -> tuple[str, ...]:
    if not isinstance(table, pa.Table):
        raise TypeError(f"expected a pyarrow.Table of spans, not {type(table).__name__}")
    if isinstance(by, str):
        by = (by,)
    by = tuple(by)
    for name in by:
        if not isinstance(name, str):
            raise TypeError(f"by: column names must be str, not {type(name).__name__}")
    if len(set(by)) != len(by):
        raise ValueError(f"by: a column is named twice in {', '.join(by)}")
    missing = [name for name in (*by, *needed) if name not in table.column_names]
    if missing:
        raise ValueError(
            f"no column {', '.join(repr(m) for m in dict.fromkeys(missing))} in the span table "
            f"(columns: {', '.join(table.column_names)})"
        )
    return by


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Keys as plain values (not dictionary-encoded): friendlier to JSON, CSV and joins."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def order_stats_rows(result: pa.Table, by: Sequence[str]) -> pa.Table:
    """Rows largest ``total_ns`` first; among equal totals, by key (nulls last)."""
    keys = [("total_ns", "descending", "at_end")] + [(k, "ascending", "at_end") for k in by]
    return result.take(pc.sort_indices(result, sort_keys=keys))
