"""``stats`` of Parquet parts read with pyarrow: the streaming ``stats`` (streaming.py)
without a query engine.

Each part is read alone, in batches (only the columns ``stats`` needs, string keys as
dictionaries), and each batch goes through the per-batch kernels a table in memory goes
through (``group_batches``: its rows numbered by group by ``kernels.group_codes``, the
dictionary indices combined in one pass; its counts and sums taken and its durations ordered
by group in one pass in C by ``kernels.group_sums``). The batches' sums are added. The parts
are read on every core (pyarrow and the kernels let the GIL go).

- :func:`part_groups`, when a run's durations fit in memory: they are kept, 4 bytes a span
  where they fit in 32 bits, in a piece a batch, of which ``_scan_kernel.select_ranks``
  finds the order statistics of the exact percentiles (``group_batches.order_statistics``),
  as for a table in memory (``group_batches.Groups``). DuckDB's ``list()`` aggregate, which
  collected the same values before, cost more than the whole of this.
- :func:`part_buckets`, in bounded memory: two reads, the first counting each group's
  durations per bucket, the second keeping only the durations of the buckets that hold the
  percentiles' order statistics.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from ._group_batches import (
    BATCH_ROWS,
    Batch,
    Found,
    Groups,
    Summed,
    batch_groups,
    batch_sums,
    combine,
)
from ._kernels import group_sums
from .statistics import DEVICE_KEY, with_device_key

__all__ = ["BUCKETS", "duration_buckets", "part_buckets", "part_groups", "scan_memory"]

#: The columns ``stats`` reads besides its keys (``self_ns`` summed: no parent join).
VALUE_COLUMNS = ("duration_ns", "self_ns", "error", "arg")
#: Bytes a span of a batch being read takes (its columns, their numpy copies, the group
#: codes): one batch per core in flight at a time.
_PART_BYTES_PER_ROW = 96
#: Rows a part is read in at a time (as many as a batch of a table in memory).
_BATCH_ROWS = BATCH_ROWS


def _readable(schema: pa.Schema, by: Sequence[str]) -> bool:
    names = set(schema.names)
    keys = [k for k in by if not (k == DEVICE_KEY and k not in names)]
    if DEVICE_KEY in by and DEVICE_KEY not in names:
        keys += ["thread_id", "thread_name"]
    return set(keys) | set(VALUE_COLUMNS) <= names


def _values(schemas: Sequence[pa.Schema]) -> tuple[str, ...]:
    """The value columns to read: ``wait_ns`` too where every part has it (an older part's
    spans waited for nothing known: 0)."""
    return VALUE_COLUMNS + (("wait_ns",) if all("wait_ns" in s.names for s in schemas) else ())


def scan_memory(rows: int, narrow: bool, largest_part: int) -> tuple[int, int]:
    """Bytes :func:`part_groups` holds at most (every duration, 4 or 8 bytes, and the
    largest group's put together once more: at most all of them; plus the parts in flight),
    and bytes :func:`part_buckets` holds (the batches in flight: one a core)."""
    reading = (os.cpu_count() or 1) * min(largest_part, _BATCH_ROWS) * _PART_BYTES_PER_ROW
    return 2 * rows * (4 if narrow else 8) + reading, reading


class _Parts:
    """How to read the parts for ``stats`` by ``by``: the columns, string keys as
    dictionaries, each part's rows numbered by group."""

    def __init__(self, schema: pa.Schema, by: Sequence[str], filesystem: Any) -> None:
        self.by = tuple(by)
        self.filesystem = filesystem
        self.derived = DEVICE_KEY in by and DEVICE_KEY not in schema.names
        keys = [k for k in by if not (self.derived and k == DEVICE_KEY)]
        self.keys = list(
            dict.fromkeys([*keys, *(("thread_id", "thread_name") if self.derived else ())])
        )
        # Strings read as dictionaries: a part's distinct values are few, its rows small codes.
        self.dictionaries = [
            c
            for c in [*self.keys, *VALUE_COLUMNS]
            if pa.types.is_string(schema.field(c).type)
            or pa.types.is_large_string(schema.field(c).type)
            or pa.types.is_dictionary(schema.field(c).type)
        ]

    def read(self, path: str, values: Sequence[str]) -> list[Batch]:
        """One part's ``values`` columns in batches of ``_BATCH_ROWS`` rows, and per batch,
        per row its group (0 .. G-1 in the batch), the G key tuples, and the durations."""
        import pyarrow.parquet as pq

        from ..formats._base import TraceFileError

        columns = list(dict.fromkeys([*self.keys, *values]))
        out = []
        try:
            part = pq.ParquetFile(
                path, filesystem=self.filesystem, read_dictionary=self.dictionaries
            )
            # In batches, not the part whole: a smaller working set, the same memory reused
            # batch after batch (fresh memory costs a page fault a page). One part a core.
            for batch in part.iter_batches(_BATCH_ROWS, columns=columns, use_threads=False):
                if batch.num_rows:
                    out.append(self._grouped(pa.Table.from_batches([batch])))
        except (pa.ArrowException, OSError) as exc:  # a page torn or damaged: the part named
            why = " ".join(str(exc).split())  # one line
            raise TraceFileError(path, f"not a readable Parquet file: {why}") from exc
        return out

    def _grouped(self, table: pa.Table) -> Batch:
        if self.derived:
            table = with_device_key(table, self.by)
        return batch_groups(table, self.by)


def part_groups(
    files: Sequence[str],
    schemas: Sequence[pa.Schema],
    by: Sequence[str],
    *,
    filesystem: Any = None,
) -> Found | None:
    """Per group of ``by`` over the parts ``files`` (whose Arrow schemas are ``schemas``):
    (key tuple -> group number, the aggregates of ``queries.STAT_AGGREGATES`` by their names
    (``n``, ``total``, ``self_total``, ``lo``, ``hi``, ``errors``, ``instants``, ``args``,
    ``arg_sum``, ``arg_time``), the percentiles); None when a part lacks a column it needs
    (the caller asks DuckDB, which fills missing columns with nulls). Holds every duration."""
    if not files or not all(_readable(s, by) for s in schemas):
        return None
    parts = _Parts(schemas[0], by, filesystem)
    values_read = _values(schemas)

    def read(path: str) -> list[Summed]:
        # per batch the same kernels as a table in memory (group_batches.batch_sums)
        return [batch_sums(batch) for batch in parts.read(path, values_read)]

    groups = Groups()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for batches in pool.map(read, files):
            for result in batches:
                groups.add(result)
    return groups.finish()


# --------------------------------------------------------------------------- bounded memory

#: Buckets a group's durations fall into (see :func:`duration_buckets`): below 2048 the value
#: itself, above it 1024 a power of two, up to 2**63.
BUCKETS = 54 * 1024
#: Up to this many (group, bucket) codes are counted and looked up in dense arrays (a few
#: MB), more by sorting and searching.
_DENSE_CODES = 1 << 22
#: The bounded reads' (group, bucket) counts are merged whenever this many pile up.
_HISTOGRAM_ENTRIES = 1 << 22


def duration_buckets(duration: np.ndarray) -> np.ndarray:
    """Each duration's bucket (durations of 0 or more): below 2048 the value itself; above
    it the highest set bit ``e`` and the 10 bits after it, ``(e - 10) * 1024 + (d >> (e -
    10))`` (streaming's ``hs_bucket_exact``): monotone in the duration, exact, a bucket's
    values within 0.1% of each other."""
    # floor(log2(d)): float64's exponent, exact below 2**53; above, the conversion to float
    # may round up to the next power of two (never down past one): one step back then.
    e = np.frexp(duration.astype(np.float64))[1].astype(np.int64) - 1
    e = np.clip(e, 0, 62)
    e -= duration < np.left_shift(np.int64(1), e)
    shift = np.maximum(e - 10, 0)
    return np.where(duration < 2048, duration, (e - 10) * 1024 + (duration >> shift))


def part_buckets(
    files: Sequence[str],
    schemas: Sequence[pa.Schema],
    by: Sequence[str],
    *,
    filesystem: Any = None,
) -> Found | None:
    """What :func:`part_groups` gives, in bounded memory: two reads of the parts. The first
    takes the aggregates and counts each group's durations per bucket
    (:func:`duration_buckets`); the ranks of the order statistics of each percentile are
    then located in their buckets from the cumulative counts, and the second read keeps the
    durations of those few buckets only (as distinct values with their counts). None where
    :func:`part_groups` gives None, or a duration is negative (no bucket)."""
    if not files or not all(_readable(s, by) for s in schemas):
        return None
    from ._kernels import interpolate, percentile_ranks
    from .statistics import PERCENTILES

    parts = _Parts(schemas[0], by, filesystem)
    values_read = _values(schemas)

    def first(
        path: str,
    ) -> list[tuple[list[tuple[Any, ...]], dict[str, np.ndarray], np.ndarray, np.ndarray]]:
        return [counted(*batch) for batch in parts.read(path, values_read)]

    def counted(
        table: pa.Table, group: np.ndarray, keys: list[tuple[Any, ...]], duration: np.ndarray
    ) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray], np.ndarray, np.ndarray]:
        sums = group_sums(table, group, len(keys), duration, ordered=True)
        ordered = sums.pop("ordered").astype(np.int64, copy=False)
        del sums["starts"]
        if int(sums["lo"].min()) < 0:
            raise _Negative
        # (group, bucket) codes, counted: a bincount where the codes are few enough (a
        # part's groups x the buckets its durations span, not all BUCKETS: a 4x smaller
        # count array to fill and search at 256 K spans a batch), else np.unique (a sort)
        in_order = np.repeat(np.arange(len(keys), dtype=np.int64), sums["n"])
        bucket = duration_buckets(ordered)
        low = int(bucket.min())
        width = int(bucket.max()) - low + 1
        if len(keys) * width <= _DENSE_CODES:
            bucket -= low
            bucket += in_order * width
            counts = np.bincount(bucket, minlength=len(keys) * width)
            found = np.flatnonzero(counts)
            codes = found // width * BUCKETS + found % width + low
            return keys, sums, codes, counts[found]
        codes, counts = np.unique(in_order * BUCKETS + bucket, return_counts=True)
        return keys, sums, codes, counts

    numbers: dict[tuple[Any, ...], int] = {}
    found: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    histogram: list[tuple[np.ndarray, np.ndarray]] = []
    # While the groups are few, their counts are added into one dense array as they come
    # (a batch's codes are distinct: a plain indexed add), not merged by sorting on the
    # thread that takes the batches in, which the reading threads then wait on
    dense: np.ndarray | None = np.zeros(0, np.int64)
    held = 0
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for result in (r for batches in pool.map(first, files) for r in batches):
                part_keys, sums, codes, counts = result
                ids = np.array([numbers.setdefault(k, len(numbers)) for k in part_keys], np.int64)
                global_codes = ids[codes // BUCKETS] * BUCKETS + codes % BUCKETS
                found.append((ids, sums))
                if dense is not None and len(numbers) * BUCKETS <= _DENSE_CODES:
                    if len(dense) < len(numbers) * BUCKETS:
                        dense = np.concatenate(
                            (dense, np.zeros(len(numbers) * BUCKETS - len(dense), np.int64))
                        )
                    dense[global_codes] += counts
                    continue
                if dense is not None:  # too many groups: the sparse way from here on
                    present = np.flatnonzero(dense)
                    histogram.append((present, dense[present]))
                    held += len(present)
                    dense = None
                histogram.append((global_codes, counts))
                held += len(codes)
                if held > _HISTOGRAM_ENTRIES:  # merged as it grows: a batch's buckets repeat
                    histogram = [_merged(histogram)]
                    held = len(histogram[0][0])
    except _Negative:
        return None
    aggregates = combine(found, len(numbers))
    if not numbers:
        return numbers, aggregates, {column: np.zeros(0) for column, _q in PERCENTILES}
    # Every (group, bucket) with its count, in (group, bucket) order.
    if dense is not None:
        codes = np.flatnonzero(dense)
        counts = dense[codes]
    else:
        codes, counts = _merged(histogram)
    cumulative = np.cumsum(counts.astype(np.int64))
    group_of = codes // BUCKETS
    before_group = np.concatenate(([0], np.cumsum(aggregates["n"])))[:-1]
    # Each wanted rank (two per percentile and group), counted over all groups in order: the
    # bucket whose cumulative count passes it, and its place among that bucket's values.
    wanted = {column: percentile_ranks(aggregates["n"], q) for column, q in PERCENTILES}
    ranks = np.concatenate([np.concatenate((lo, hi)) for lo, hi, _ in wanted.values()])
    rank_group = np.tile(np.arange(len(numbers)), 2 * len(wanted))
    overall = before_group[rank_group] + ranks
    bucket_row = np.searchsorted(cumulative, overall, side="right")
    assert (group_of[bucket_row] == rank_group).all()  # a group's ranks lie in its buckets
    within = overall - (cumulative[bucket_row] - counts[bucket_row].astype(np.int64))
    targets = np.unique(codes[bucket_row])
    wanted_table = None
    if len(numbers) * BUCKETS <= _DENSE_CODES:
        wanted_table = np.zeros(len(numbers) * BUCKETS, np.bool_)
        wanted_table[targets] = True

    def second(path: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return [chosen(*batch) for batch in parts.read(path, ("duration_ns",))]

    def chosen(
        _table: pa.Table, group: np.ndarray, keys: list[tuple[Any, ...]], duration: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.array([numbers[k] for k in keys], np.int64)
        code = ids[group] * BUCKETS + duration_buckets(duration)
        if wanted_table is not None:  # one lookup a row
            hit = wanted_table[code]
        else:
            at = np.minimum(np.searchsorted(targets, code), len(targets) - 1)
            hit = targets[at] == code
        code, value = code[hit], duration[hit]
        if len(code) == 0:  # none of this batch's durations wanted
            return code, value, np.zeros(0, np.int64)
        # distinct (bucket, value) with counts: ties held once (memory bounded by the
        # values a bucket can hold, not by how often they repeat)
        order = np.lexsort((value, code))
        code, value = code[order], value[order]
        new = np.flatnonzero(np.r_[True, (code[1:] != code[:-1]) | (value[1:] != value[:-1])])
        return code[new], value[new], np.diff(np.r_[new, len(code)])

    picked: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for batches in pool.map(second, files):
            picked += batches
    code = np.concatenate([c for c, _, _ in picked])
    value = np.concatenate([v for _, v, _ in picked])
    repeats = np.concatenate([r for _, _, r in picked])
    order = np.lexsort((value, code))
    code, value, repeats = code[order], value[order], repeats[order]
    # The value at a place within its bucket: where the bucket's cumulative count passes it.
    running = np.cumsum(repeats)
    bucket_start = np.searchsorted(code, codes[bucket_row], side="left")
    before_bucket = running[bucket_start] - repeats[bucket_start]
    at_rank = value[np.searchsorted(running, before_bucket + within, side="right")]
    percentiles = {}
    size = len(numbers)
    for i, (column, (_lo, _hi, gamma)) in enumerate(wanted.items()):
        below = at_rank[2 * i * size : (2 * i + 1) * size]
        above = at_rank[(2 * i + 1) * size : (2 * i + 2) * size]
        percentiles[column] = interpolate(below, above, gamma)
    return numbers, aggregates, percentiles


def _merged(histogram: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(code, count) pairs as one pair of arrays: each code once, in order, counts added."""
    codes, where = np.unique(np.concatenate([c for c, _ in histogram]), return_inverse=True)
    counts = np.bincount(where.reshape(-1), weights=np.concatenate([n for _, n in histogram]))
    return codes, counts.astype(np.int64)


class _Negative(Exception):
    """A negative duration (no bucket): the caller takes another path."""
