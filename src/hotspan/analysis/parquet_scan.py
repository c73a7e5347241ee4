"""``stats`` of Parquet parts read with pyarrow a part at a time: the fast path of the
streaming ``stats`` (streaming.py), used when a run's durations fit in memory.

Each part is read alone (only the columns ``stats`` needs, string keys as dictionaries),
its rows numbered by group (``statistics.combined_codes``), its counts and sums taken by the
in-memory path's own function (``statistics.group_sums``), and its durations ordered by
group (a stable sort of small integers: a radix sort) and kept, 4 bytes a span where
they fit in 32 bits. The parts' sums are added, and each group's durations
put together one group at a time for ``numpy.partition`` to find the order statistics of
the exact percentiles (``queries.order_statistics``). The parts are read on every core
(pyarrow and numpy let the GIL go). DuckDB's ``list()`` aggregate, which collected the same
values before, cost more than the whole of this; and no query engine starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from .statistics import (
    DEVICE_KEY,
    combined_codes,
    group_sums,
    to_numpy,
    with_device_key,
)

__all__ = ["part_groups", "scan_memory"]

#: The columns ``stats`` reads besides its keys (``self_ns`` summed: no parent join).
VALUE_COLUMNS = ("duration_ns", "self_ns", "error", "arg")
#: Bytes a span a part being read takes (its columns, their numpy copies, the group codes):
#: one part per core in flight at a time.
_PART_BYTES_PER_ROW = 96


def _readable(schema: pa.Schema, by: Sequence[str]) -> bool:
    names = set(schema.names)
    keys = [k for k in by if not (k == DEVICE_KEY and k not in names)]
    if DEVICE_KEY in by and DEVICE_KEY not in names:
        keys += ["thread_id", "thread_name"]
    return set(keys) | set(VALUE_COLUMNS) <= names


def scan_memory(rows: int, narrow: bool, largest_part: int) -> int:
    """Bytes :func:`part_groups` holds at most: every duration (4 or 8 bytes), the largest
    group's put together once more (at most all of them), the parts in flight."""
    value = 4 if narrow else 8
    return 2 * rows * value + (os.cpu_count() or 1) * largest_part * _PART_BYTES_PER_ROW


def part_groups(
    files: Sequence[str],
    schemas: Sequence[pa.Schema],
    by: Sequence[str],
    *,
    filesystem: Any = None,
) -> tuple[dict[tuple, int], dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """Per group of ``by`` over the parts ``files`` (whose Arrow schemas are ``schemas``):
    (key tuple -> group number, the aggregates of ``queries.STAT_AGGREGATES`` by their names
    (``n``, ``total``, ``self_total``, ``lo``, ``hi``, ``errors``, ``instants``, ``args``,
    ``arg_sum``, ``arg_time``), the percentiles); None when a part lacks a column it needs
    (the caller asks DuckDB, which fills missing columns with nulls)."""
    if not files or not all(_readable(s, by) for s in schemas):
        return None
    import pyarrow.parquet as pq

    from ..formats.base import TraceFileError
    from .queries import order_statistics

    names = set(schemas[0].names)
    derived = DEVICE_KEY in by and DEVICE_KEY not in names
    keys = [k for k in by if not (derived and k == DEVICE_KEY)]
    columns = list(
        dict.fromkeys([*keys, *(("thread_id", "thread_name") if derived else ()), *VALUE_COLUMNS])
    )
    # Strings read as dictionaries: a part's distinct values are few, its rows small codes.
    dictionaries = [
        c
        for c in columns
        if pa.types.is_string(schemas[0].field(c).type)
        or pa.types.is_large_string(schemas[0].field(c).type)
        or pa.types.is_dictionary(schemas[0].field(c).type)
    ]

    def read(path: str) -> tuple[list[tuple], dict[str, np.ndarray], list[np.ndarray]] | None:
        try:
            part = pq.ParquetFile(path, filesystem=filesystem, read_dictionary=dictionaries)
            table = part.read(columns=columns, use_threads=False)  # one part a core already
        except (pa.ArrowException, OSError) as exc:  # a page torn or damaged: the part named
            why = " ".join(str(exc).split())  # one line
            raise TraceFileError(path, f"not a readable Parquet file: {why}") from exc
        if table.num_rows == 0:
            return None
        if derived:
            table = with_device_key(table, by)
        group, representative = combined_codes(table, by)
        groups = len(representative)
        take = pa.array(representative)
        part_keys = (
            list(zip(*(table.column(k).take(take).to_pylist() for k in by)))
            if by
            else [()] * groups
        )
        duration = to_numpy(table.column("duration_ns"), np.int64)
        sums = group_sums(table, group, groups, duration)
        # Rows ordered by group: numpy's stable sort of 8- and 16-bit integers is a radix
        # sort (linear), so the codes go down to the narrowest type that holds them.
        code = (
            group.astype(np.uint8 if groups <= 1 << 8 else np.uint16)
            if groups <= 1 << 16
            else group
        )
        ordered = duration[np.argsort(code, kind="stable")]
        starts = np.concatenate(([0], np.cumsum(sums["n"])[:-1]))
        sums["total"] = np.add.reduceat(ordered, starts)
        sums["lo"] = np.minimum.reduceat(ordered, starts)
        sums["hi"] = np.maximum.reduceat(ordered, starts)
        narrow = -(2**31) <= int(sums["lo"].min()) and int(sums["hi"].max()) < 2**31
        kept = ordered.astype(np.int32) if narrow else ordered  # the same values, in 4 bytes
        return part_keys, sums, np.split(kept, starts[1:])

    numbers: dict[tuple, int] = {}
    found: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    values: list[list[np.ndarray]] = []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for result in pool.map(read, files):
            if result is None:
                continue
            part_keys, sums, pieces = result
            ids = np.array([numbers.setdefault(k, len(numbers)) for k in part_keys], np.int64)
            values += [[] for _ in range(len(numbers) - len(values))]
            for i, piece in zip(ids, pieces):
                values[i].append(piece)
            found.append((ids, sums))
    count = len(numbers)
    aggregates: dict[str, np.ndarray] = {}
    for name in ("n", "total", "self_total", "errors", "instants", "args", "arg_sum", "arg_time"):
        aggregates[name] = np.zeros(count, np.int64)
        for ids, sums in found:
            np.add.at(aggregates[name], ids, sums[name])  # a part's groups: few
    aggregates["lo"] = np.full(count, np.iinfo(np.int64).max, np.int64)
    aggregates["hi"] = np.full(count, np.iinfo(np.int64).min, np.int64)
    for ids, sums in found:
        np.minimum.at(aggregates["lo"], ids, sums["lo"])
        np.maximum.at(aggregates["hi"], ids, sums["hi"])
    percentiles = order_statistics(list(enumerate(values)), aggregates["n"])
    return numbers, aggregates, percentiles
