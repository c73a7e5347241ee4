"""The kernels of the statistics, over Arrow columns and the numpy arrays made from them:
group codes, exact counts and sums per group, self and wait time, and numpy's linear
percentile as exact order statistics. One definition each, used by the statistics of a run
taken a batch at a time (group_batches.py: a table in memory and the Parquet scan alike), the
per process phases (process_phases.py) and the engines' finishing step (queries.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from .._columns import column_codes, combined_codes, to_numpy, values_and_validity

__all__ = [
    "PERCENTILES",
    "group_sum",
    "group_sums",
    "interpolate",
    "percentile_ranks",
]


#: The percentiles of ``stats``: column and fraction.
PERCENTILES = (("p50_ns", 0.50), ("p90_ns", 0.90), ("p99_ns", 0.99))


def group_sums(
    table: pa.Table, group: np.ndarray, groups: int, duration: np.ndarray, *, ordered: bool = False
) -> dict[str, np.ndarray]:
    """Per group (``group``: a code in [0, groups) per row of ``table``) the aggregates of
    ``queries.STAT_AGGREGATES`` under their names there: ``n``, ``total``, ``lo``, ``hi``,
    ``self_total``, ``wait_total`` (0 without the column), ``errors``, ``instants``,
    ``args``, ``arg_sum`` (0 where no arg) and ``arg_time``, exact int64; with ``ordered``
    also ``ordered`` (the durations by group, rows in order within a group; int32 where they
    all fit) and ``starts`` (each group's first place in it). One pass over the columns in C
    (``_scan_kernel.group_aggregates``); one definition for the in-memory path and the
    streaming one that reads Parquet a batch at a time (``parquet_scan``, which adds the
    batches' sums)."""
    from ._scan_kernel import group_aggregates

    if "self_ns" in table.column_names:
        self_ns, self_valid = _int64_values(table.column("self_ns"))
    else:  # a table built without the column gets it by the same rule
        from .._selftime import self_ns_column

        self_ns, self_valid = to_numpy(self_ns_column(table), np.int64), None
    # a table without wait_ns (a foreign trace, an older file) waited for nothing known
    wait, wait_valid = (
        _int64_values(table.column("wait_ns")) if "wait_ns" in table.column_names else (None, None)
    )
    error_column = table.column("error")
    error = to_numpy(
        error_column.fill_null(False) if error_column.null_count else error_column, np.bool_
    )
    arg, arg_valid = _int64_values(table.column("arg"))
    return dict(
        group_aggregates(
            np.ascontiguousarray(group, np.int32),
            groups,
            np.ascontiguousarray(duration, np.int64),
            self_ns=self_ns,
            self_valid=self_valid,
            wait=wait,
            wait_valid=wait_valid,
            error=error,
            arg=arg,
            arg_valid=arg_valid,
            ordered=ordered,
        )
    )


def _int64_values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer column's values as contiguous int64 (anything where null: the validity
    says) and its validity (None: no nulls), straight from its buffers where it can."""
    if pa.types.is_int64(column.type):
        values, valid = values_and_validity(column)
        return np.ascontiguousarray(values), valid
    if pa.types.is_null(column.type):  # a column of nulls only (a foreign table's): no values
        return np.zeros(len(column), np.int64), np.zeros(len(column), np.bool_)
    valid = to_numpy(column.is_valid(), np.bool_) if column.null_count else None
    return to_numpy(column.fill_null(0) if column.null_count else column, np.int64), valid


def percentile_ranks(counts: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy's linear percentile of groups of ``counts`` values: the 0-based ranks of the two
    order statistics it interpolates between (``below``, ``above``), and the weight ``gamma``."""
    virtual = (counts - 1) * q
    below = np.floor(virtual).astype(np.int64)
    above = np.minimum(below + 1, counts - 1)
    return below, above, virtual - below


def interpolate(below: np.ndarray, above: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """numpy's two-sided linear interpolation between the order statistics ``below`` and ``above``."""
    a = below.astype(np.float64)
    b = above.astype(np.float64)
    diff = b - a
    return np.asarray(np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma))


def group_sum(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group. ``np.add.at`` is exact but slow (an unbuffered
    loop: ~10x a bincount), and a bincount sums in float64 (inexact past 2**53); so the values,
    shifted to start at 0, are cut into three 21-bit pieces whose float sums stay exact below
    2**32 values, and put together as integers."""
    if len(values) == 0:
        return np.zeros(groups, np.int64)
    low = int(values.min())
    if int(values.max()) - low >= 1 << 63 or len(values) >= 1 << 32:
        out = np.zeros(groups, np.int64)
        np.add.at(out, group, values)
        return out
    span = int(values.max()) - low
    if span * len(values) < 1 << 53:
        # Every partial sum an integer below 2**53: one float64 bincount is exact (durations
        # of a part of a million spans, say: a third of the work of the pieces below).
        sums = np.bincount(group, weights=(values - low).astype(np.float64), minlength=groups)
        total = sums.astype(np.int64)
        if low:
            total += np.bincount(group, minlength=groups).astype(np.int64) * low
        return total
    shifted = (values - low).view(np.uint64) if low else values.view(np.uint64)
    total = np.zeros(groups, np.int64)
    mask = np.uint64((1 << 21) - 1)
    for piece in range(3):
        part = (shifted >> np.uint64(21 * piece)) & mask
        sums = np.bincount(group, weights=part.astype(np.float64), minlength=groups)
        total += sums.astype(np.int64) << (21 * piece)
    if low:
        total += np.bincount(group, minlength=groups).astype(np.int64) * low
    return total


def sum_by(code: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, np.int64)
    np.add.at(out, code, values)
    return out


def group_codes(table: pa.Table, by: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Rows numbered by their combination of ``by``'s values, 0 .. G-1 (as
    ``_columns.combined_codes`` numbers them), and a row of each group: where the
    combinations are few enough for a table (``_scan_kernel.DENSE_LIMIT``), in one pass in C
    over the columns' codes (a part's dictionary indices as they lie), else by
    ``combined_codes``."""
    from ._scan_kernel import DENSE_LIMIT, dense_codes

    if not by:
        return combined_codes(table, by)
    codes, sizes = [], []
    for name in by:
        column_code, values = column_codes(table.column(name))
        codes.append(column_code)
        sizes.append(max(len(values), 1))
    if int(np.prod(np.array(sizes, np.float64))) > DENSE_LIMIT:
        return combined_codes(table, by)
    return dense_codes([np.ascontiguousarray(c, np.int32) for c in codes], sizes)
