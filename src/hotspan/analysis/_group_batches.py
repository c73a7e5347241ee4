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
from collections.abc import Sequence
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
    "SMALL_GROUP",
    "Summed",
    "batch_groups",
    "batch_sums",
    "combine",
    "sum_batch",
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


#: A batch summed: its groups' keys, their aggregates, its durations ordered by group.
Summed = tuple[list[tuple[Any, ...]], dict[str, np.ndarray], np.ndarray]
#: Groups of up to this many durations have their order statistics found all at once (one
#: sort of all their values), larger ones one at a time (``_scan_kernel.select_ranks``,
#: linear time, but some 100 us a call: a million groups of a span or two would take minutes).
SMALL_GROUP = 2048


def batch_sums(batch: Batch) -> Summed:
    """A grouped batch's keys, its groups' aggregates and its durations ordered by group
    (:func:`sum_batch`)."""
    table, group, keys, duration = batch
    return (keys, *sum_batch(table, group, len(keys), duration))


def sum_batch(
    table: pa.Table, group: np.ndarray, groups: int, duration: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The per-batch kernel: a batch's groups' aggregates (``kernels.group_sums``; ``group``:
    each row's group, 0 .. ``groups`` - 1) and its durations ordered by group (group after
    group), in the same pass in C."""
    sums = group_sums(table, group, groups, duration, ordered=True)
    del sums["starts"]
    return sums, sums.pop("ordered")


def combine(
    found: list[tuple[np.ndarray, dict[str, np.ndarray]]], count: int
) -> dict[str, np.ndarray]:
    """The batches' aggregates added up per group (their ``ids``: each batch's groups'
    numbers, distinct within a batch: a plain indexed add): every one a sum but ``lo`` and
    ``hi``."""
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
            aggregates[name][ids] += sums[name]
    lo = aggregates["lo"] = np.full(count, np.iinfo(np.int64).max, np.int64)
    hi = aggregates["hi"] = np.full(count, np.iinfo(np.int64).min, np.int64)
    for ids, sums in found:
        lo[ids] = np.minimum(lo[ids], sums["lo"])
        hi[ids] = np.maximum(hi[ids], sums["hi"])
    return aggregates


class Groups:
    """The groups of every batch added up, batch by batch (in any order), then finished."""

    def __init__(self, size: int = 0) -> None:
        #: the groups' numbers by key, as :meth:`add` numbers them, and how many there are
        self.numbers: dict[tuple[Any, ...], int] = {}
        self.size = size
        self.found: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self.ordered: list[np.ndarray] = []

    def add(self, batch: Summed) -> None:
        """One batch's :func:`batch_sums`."""
        keys, sums, ordered = batch
        numbers = self.numbers
        ids = np.array([numbers.setdefault(k, len(numbers)) for k in keys], np.int64)
        self.size = len(numbers)
        self.add_numbered(ids, sums, ordered)

    def add_numbered(
        self, ids: np.ndarray, sums: dict[str, np.ndarray], ordered: np.ndarray
    ) -> None:
        """A batch's :func:`sum_batch` whose groups are numbered already (``ids``: the
        number of each of its groups)."""
        self.found.append((ids, sums))
        self.ordered.append(ordered)

    def finish(self) -> Found:
        """Per group (numbered by first appearance): the aggregates and exact percentiles."""
        return (self.numbers, *self.totals())

    def totals(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per group: the aggregates and the exact percentiles. A large group's durations stay
        in their batches' pieces, never put together (:func:`order_statistics`); the small
        groups' are sorted together once."""
        aggregates = combine(self.found, self.size)
        counts = aggregates["n"]
        large = counts > SMALL_GROUP
        pieces: dict[int, list[np.ndarray]] = {int(g): [] for g in np.flatnonzero(large)}
        small_values, small_groups = [], []
        for (ids, sums), ordered in zip(self.found, self.ordered):
            in_batch = sums["n"]
            if pieces:
                ends = np.cumsum(in_batch)
                for j in np.flatnonzero(large[ids]):
                    pieces[int(ids[j])].append(ordered[ends[j] - in_batch[j] : ends[j]])
            row_group = np.repeat(ids, in_batch)
            keep = ~large[row_group]
            small_values.append(ordered[keep].astype(np.int64, copy=False))
            small_groups.append(row_group[keep])
        self.ordered.clear()
        percentiles = order_statistics(
            list(pieces.items()), counts, (aggregates["lo"], aggregates["hi"])
        )
        if small_values:
            present = np.flatnonzero(~large & (counts > 0))
            _small_order_statistics(
                np.concatenate(small_groups),
                np.concatenate(small_values),
                counts,
                present,
                percentiles,
            )
        return aggregates, percentiles


def _small_order_statistics(
    group: np.ndarray,
    values: np.ndarray,
    counts: np.ndarray,
    present: np.ndarray,
    percentiles: dict[str, np.ndarray],
) -> None:
    """The percentiles (into ``percentiles``) of the groups ``present`` (in order), whose
    durations are ``values`` (``group``: each one's group): the same ranks and interpolation as
    :func:`order_statistics`, the order statistics read off one sort by (group, value)."""
    if len(values) == 0:
        return
    size = len(counts)
    low = int(values.min())
    value_bits = (int(values.max()) - low).bit_length()
    if (size - 1).bit_length() + value_bits <= 63:  # packed in one int64: a plain sort
        packed = (group.astype(np.int64) << value_bits) | (values - low)
        packed.sort()
        ordered = (packed & ((1 << value_bits) - 1)) + low
    else:
        ordered = values[np.lexsort((values, group))]
    in_sort = np.zeros(size, np.int64)
    in_sort[present] = counts[present]
    starts = np.cumsum(in_sort) - in_sort
    for column, q in PERCENTILES:
        below, above, gamma = percentile_ranks(counts[present], q)
        first = starts[present]
        percentiles[column][present] = interpolate(
            ordered[first + below], ordered[first + above], gamma
        )


def table_groups(
    table: pa.Table, by: Sequence[str], rows: int | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per group of ``by`` over a table in memory (holding ``by``, ``duration_ns``,
    ``self_ns`` and the other value columns of ``kernels.group_sums``): a row of the group,
    the aggregates and the percentiles. Its rows are numbered by group once, by the batches'
    kernel (``kernels.group_codes``: no key looked up again batch after batch), and fed in
    slices of ``rows`` rows (:data:`BATCH_ROWS`) through the Parquet parts' per-batch kernel
    (:func:`sum_batch`) on every core, then added up and finished as theirs
    (:class:`Groups`)."""
    rows = rows or BATCH_ROWS
    group, representative = group_codes(table, by)
    size = len(representative)
    duration = to_numpy(table.column("duration_ns"), np.int64)

    def summed(start: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        end = start + rows
        return sum_batch(table.slice(start, rows), group[start:end], size, duration[start:end])

    groups = Groups(size)
    ids = np.arange(size, dtype=np.int64)
    starts = range(0, table.num_rows, rows)
    if table.num_rows <= rows:
        for start in starts:
            groups.add_numbered(ids, *summed(start))
    else:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for sums, ordered in pool.map(summed, starts):
                groups.add_numbered(ids, sums, ordered)
    return (representative, *groups.totals())


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
