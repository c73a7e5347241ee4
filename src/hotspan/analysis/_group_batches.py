"""``stats``' groups over a run's spans taken a batch at a time: one definition for every
path that holds the spans (a table in memory, ``statistics.stats``; the Parquet parts read
with pyarrow, ``parquet_scan.part_groups``).

Per batch (:func:`batch_groups`): its rows numbered by group (``kernels.group_codes``), the
groups' key tuples, and in one pass in C their counts and sums and their durations ordered
by group (``kernels.group_sums(ordered=True)``, 4 bytes a duration where they fit). Across
batches (:class:`Groups`): the groups numbered by key, their sums added (:func:`combine`),
their durations kept a piece a batch, and the exact percentiles found among the pieces by
by :func:`order_statistics` (``_scan_kernel.select_ranks``), never put together; the
durations DuckDB collects per group (``queries.list_order_statistics``) go through it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from .._columns import to_numpy
from ._kernels import PERCENTILES, group_codes, group_sums, interpolate, percentile_ranks

__all__ = [
    "BATCH_ROWS",
    "Batch",
    "Found",
    "Groups",
    "batch_groups",
    "batch_sums",
    "combine",
    "order_statistics",
    "table_groups",
]

#: Rows a batch holds (a Parquet part is read in batches of this many; a table in memory is
#: cut in slices of this many).
BATCH_ROWS = 1 << 18

#: (key tuple -> group number, the aggregates by name, the percentiles by column)
Found = tuple[dict[tuple[Any, ...], int], dict[str, np.ndarray], dict[str, np.ndarray]]
#: A batch grouped: its table, per row its group (0 .. G-1 in the batch), the G key tuples,
#: and per row its duration.
Batch = tuple[pa.Table, np.ndarray, list[tuple[Any, ...]], np.ndarray]


def batch_groups(table: pa.Table, by: Sequence[str]) -> Batch:
    """A batch's rows numbered by group of ``by`` (which ``table`` holds), the groups' key
    tuples (in group-number order) and the durations."""
    group, representative = group_codes(table, by)
    take = pa.array(representative)
    keys = (
        list(zip(*(table.column(k).take(take).to_pylist() for k in by)))
        if by
        else [()] * len(representative)
    )
    return table, group, keys, to_numpy(table.column("duration_ns"), np.int64)


def batch_sums(
    batch: Batch,
) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray], list[np.ndarray]]:
    """A grouped batch's keys, its groups' aggregates (``kernels.group_sums``) and each
    group's durations (a piece an entry), ordered in the same pass."""
    table, group, keys, duration = batch
    sums = group_sums(table, group, len(keys), duration, ordered=True)
    kept, starts = sums.pop("ordered"), sums.pop("starts")
    return keys, sums, np.split(kept, starts[1:])


def combine(
    found: list[tuple[np.ndarray, dict[str, np.ndarray]]], count: int
) -> dict[str, np.ndarray]:
    """The batches' aggregates added up per group (their ``ids``: each batch's groups'
    numbers): every one a sum but ``lo`` and ``hi``."""
    aggregates: dict[str, np.ndarray] = {}
    for name in (
        "n",
        "total",
        "self_total",
        "wait_total",
        "errors",
        "instants",
        "args",
        "arg_sum",
        "arg_time",
    ):
        aggregates[name] = np.zeros(count, np.int64)
        for ids, sums in found:
            np.add.at(aggregates[name], ids, sums[name])  # a batch's groups: few
    aggregates["lo"] = np.full(count, np.iinfo(np.int64).max, np.int64)
    aggregates["hi"] = np.full(count, np.iinfo(np.int64).min, np.int64)
    for ids, sums in found:
        np.minimum.at(aggregates["lo"], ids, sums["lo"])
        np.maximum.at(aggregates["hi"], ids, sums["hi"])
    return aggregates


class Groups:
    """The groups of every batch added up, batch by batch (in any order), then finished."""

    def __init__(self) -> None:
        self.numbers: dict[tuple[Any, ...], int] = {}
        self.found: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self.values: list[list[np.ndarray]] = []

    def add(
        self, batch: tuple[list[tuple[Any, ...]], dict[str, np.ndarray], list[np.ndarray]]
    ) -> None:
        """One batch's :func:`batch_sums`."""
        keys, sums, pieces = batch
        numbers = self.numbers
        ids = np.array([numbers.setdefault(k, len(numbers)) for k in keys], np.int64)
        self.values += [[] for _ in range(len(numbers) - len(self.values))]
        for i, piece in zip(ids, pieces):
            self.values[i].append(piece)
        self.found.append((ids, sums))

    def finish(self) -> Found:
        """Per group (numbered by first appearance): the aggregates and exact percentiles."""
        aggregates = combine(self.found, len(self.numbers))
        percentiles = order_statistics(
            list(enumerate(self.values)), aggregates["n"], (aggregates["lo"], aggregates["hi"])
        )
        return self.numbers, aggregates, percentiles


def table_groups(table: pa.Table, by: Sequence[str], rows: int | None = None) -> Found:
    """:class:`Groups` of a table in memory (holding ``by``, ``duration_ns``, ``self_ns`` and
    the other value columns of ``kernels.group_sums``), fed in slices of ``rows`` rows
    (:data:`BATCH_ROWS`) through the same per-batch kernels as the Parquet parts, on every
    core."""
    rows = rows or BATCH_ROWS
    slices: Iterable[pa.Table] = (
        table.slice(start, rows) for start in range(0, table.num_rows, rows)
    )
    groups = Groups()

    def grouped(
        batch: pa.Table,
    ) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray], list[np.ndarray]]:
        return batch_sums(batch_groups(batch, by))

    if table.num_rows <= rows:
        for batch in slices:
            groups.add(grouped(batch))
    else:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for result in pool.map(grouped, slices):
                groups.add(result)
    return groups.finish()


def order_statistics(
    groups: Sequence[tuple[int, np.ndarray | list[np.ndarray]]],
    counts: np.ndarray,
    extremes: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Per percentile, its value in each group from the group's values (``groups``: (group,
    its values, or a list of pieces of them) in any order): the two order statistics of each
    percentile by ``_scan_kernel.select_ranks`` (a histogram of the values' top bits, the
    few values of the buckets that hold the ranks partitioned: linear time, the pieces never
    put together), then numpy's interpolation. ``extremes``: each group's least and greatest
    value where known (the aggregates' ``lo`` and ``hi``), which saves a pass."""
    from ._scan_kernel import select_ranks

    wanted = {column: percentile_ranks(counts, q) for column, q in PERCENTILES}
    below = {c: np.zeros(len(counts), np.int64) for c in wanted}
    above = {c: np.zeros(len(counts), np.int64) for c in wanted}

    def select(item: tuple[int, np.ndarray | list[np.ndarray]]) -> None:
        g, values = item
        if counts[g] == 0:
            return
        ranks = np.array([r for w in wanted.values() for r in (w[0][g], w[1][g])], np.int64)
        pieces = values if isinstance(values, list) else [values]
        if extremes is None:
            found = select_ranks(pieces, ranks)
        else:
            found = select_ranks(pieces, ranks, int(extremes[0][g]), int(extremes[1][g]))
        if isinstance(values, list):
            values.clear()  # the pieces go now, not at the end
        for i, c in enumerate(wanted):
            below[c][g], above[c][g] = found[2 * i], found[2 * i + 1]

    if len(groups) > 1 and int(np.sum(counts)) > 1 << 20:
        # the kernel lets the GIL go: the groups on every core
        # largest groups first: the last one to finish is a small one
        by_size = sorted(groups, key=lambda item: -int(counts[item[0]]))
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(select, by_size))
    else:
        for item in groups:
            select(item)
    return {c: interpolate(below[c], above[c], wanted[c][2]) for c in wanted}
