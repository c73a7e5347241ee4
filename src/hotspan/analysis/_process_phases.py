"""``phases`` of Parquet parts at the speed of reading them: each process's parts streamed in
order, each span's parent found among the spans read with it, no join.

``statistics.phases`` needs, for every span, its parent's category. A parent is almost always
in its child's own process, drained in the same part as the child or a later one (a span
closes after its children, and a process drains spans in the order they close). So the parts
of one process (one writer: the same rank, pid and token, by part number) are read in order,
a row group at a time, with only the columns the answer needs (``span_id``, ``parent_id``,
``category``, ``duration_ns``, ``rank``; ``self_ns`` and ``wait_ns`` where spans awaited), and each span's parent is looked up among the spans
of that row group (``IdIndex``: a direct-address table where the ids are dense, as the
recorder draws them, else a sort). Children whose parent is not in it yet are carried to the
next row group, summed per (parent, rank, category): a parent with a million children drained
before it carries a row, not a million. What is left at the end (a parent in another
process, or never drained) is looked up once more over every part whose footer says its ids
could hold it; what is not found has no parent, as in memory.

Whether ids repeat decides how a parent is found (``statistics.parent_rows``: by id alone, or
within its child's rank, pid and thread). It is known from the ids read, at no extra scan:
each row group's ids as runs of consecutive values, merged per process and then over the run
(``Ranges``; the recorder draws ids ``base + k``, so a process's ids are a few runs), and
any overlap is a repeated id. Should the run turn out to repeat ids, it is read once more
with the ids looked up within their (rank, pid, thread).

Per span the result is a (rank, category, parent's category) triple, fed a row group at a
time to the phases kernel (``_phase_kernel.PhaseSums``), which the in-memory path feeds its
table's batches alike and whose finishing step (``phases_of_sums``) the DuckDB and Spark
paths' SQL rows (``queries.phases_sql``) end in: one arithmetic, to the same result.

Memory: a row group at a time per worker thread (the parts' row groups are what a writer
flushes: about a million spans), plus the carried children and the id runs, both small for
what a recorder writes; :func:`phases_of_parts` answers None (the caller then takes the
DuckDB path) where a row group would not fit ``memory_bytes`` or the carried rows or runs
grow past their share of it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ._phase_parts import (
    LANE,
    GiveUp,
    Carried,
    Categories,
    IdIndex,
    Lanes,
    numpy_of,
    Ranges,
    lane_keys,
)
from .._columns import values_and_validity
from ._phase_kernel import PhaseSums

__all__ = ["phases_of_parts"]

#: The columns read; ``pid`` and ``thread_id`` too where ids repeat.
COLUMNS = ("span_id", "parent_id", "category", "duration_ns", "rank")
#: Read too where spans awaited (asyncio tasks): the phases then sum their self times.
WAIT_COLUMNS = ("self_ns", "wait_ns")
#: Bytes per span a worker holds while it looks up one row group: the columns (~40), the
#: index (up to 4 x 4 for the direct table, or 16 for a sort) and the temporaries.
BYTES_PER_SPAN = 160
#: Bytes per carried child row and per id run: a budget of each, against ``memory_bytes``.
BYTES_PER_ROW = 64


class RepeatedIds(Exception):
    """An id repeats: parents are then looked up within their rank, pid and thread."""


def phases_of_parts(
    files: Sequence[str],
    footers: Sequence[Any],
    memory_bytes: int,
    unique_ids: Callable[[], bool],
    workers: int | None = None,
    *,
    waits: bool = False,
) -> pa.Table | None:
    """``statistics.phases`` of the spans in ``files`` (local Parquet parts, their footers
    ``pyarrow.parquet.FileMetaData``; ``unique_ids`` answers whether no span id repeats, asked
    only where the ids' runs were too many to keep), or None where this path does not apply (see the module
    doc): a part without one of the columns (a rank taken from a ``rank=R`` directory), a row
    group too large for ``memory_bytes``, null ranks."""
    schemas = [f.schema.to_arrow_schema() for f in footers]
    needed = set(COLUMNS) | (set(WAIT_COLUMNS) if waits else set())
    if any(not needed <= set(s.names) for s in schemas):
        return None
    largest = max(
        (f.row_group(g).num_rows for f in footers for g in range(f.num_row_groups)), default=0
    )
    workers = workers or min(os.cpu_count() or 1, 4)
    # Each worker holds a row group at a time: as many workers as fit in half the limit.
    workers = min(workers, (memory_bytes // 2) // max(largest * BYTES_PER_SPAN, 1))
    if workers < 1:
        return None
    groups = _processes(files, footers)
    workers = min(workers, len(groups)) or 1
    budget = max((memory_bytes // 4) // BYTES_PER_ROW // workers, 1 << 16)
    try:
        try:
            return _run(
                groups, unique_ids, lanes=False, workers=workers, budget=budget, waits=waits
            )
        except RepeatedIds:
            return _run(groups, unique_ids, lanes=True, workers=workers, budget=budget, waits=waits)
    except GiveUp:
        return None


def _processes(files: Sequence[str], footers: Sequence[Any]) -> list[list[tuple[str, Any]]]:
    """The parts grouped by writer (rank, directory, pid, token), each group in part order;
    a file not named as a part is a group of its own."""
    from ..formats.dataset import part_key

    groups: dict[tuple[Any, ...], list[tuple[int, str, Any]]] = {}
    for i, (path, footer) in enumerate(zip(files, footers)):
        key = part_key(path)
        if key is None:
            groups[("file", i)] = [(0, path, footer)]
            continue
        writer = (key["rank"], os.path.dirname(path), key["pid"], key["token"])
        groups.setdefault(writer, []).append((key["seq"], path, footer))
    return [
        [(p, f) for _seq, p, f in sorted(g, key=lambda x: (x[0], x[1]))] for g in groups.values()
    ]


# --------------------------------------------------------------------------- one process


def _stream(
    parts: list[tuple[str, Any]],
    categories: Categories,
    lanes: Lanes | None,
    budget: int,
    stop: threading.Event,
    waits: bool = False,
) -> tuple[PhaseSums, Carried, Ranges, set[int], dict[tuple[str, int], tuple[int, int]]]:
    """One process's parts in order: its sums, the children left without a parent, its id
    ranges, its ranks, and each row group's lowest and highest id (by path and number: the
    parts' footers keep no statistics of the ids). ``stop``: another process gave up (or
    found a repeated id), this one need not go on."""
    import pyarrow.parquet as pq

    sums, carried, ranges = PhaseSums(), Carried(budget), Ranges(budget)
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    ranks: set[int] = set()
    columns = list(COLUMNS) + ([c for c in LANE if c not in COLUMNS] if lanes else [])
    columns += list(WAIT_COLUMNS) if waits else []
    for path, footer in parts:
        reader = pq.ParquetFile(path, metadata=footer)
        rank_index = footer.schema.to_arrow_schema().get_field_index("rank")
        for g in range(footer.num_row_groups):
            if stop.is_set():
                raise GiveUp("stopped")
            # a row group of one rank (the footer says so) is read without its rank column
            stats = footer.row_group(g).column(rank_index).statistics
            one_rank = (
                stats.min
                if not lanes
                and stats is not None
                and stats.has_min_max
                and stats.null_count == 0
                and stats.min == stats.max
                else None
            )
            wanted = [c for c in columns if c != "rank"] if one_rank is not None else columns
            table = _read(reader, path, g, wanted)
            n = table.num_rows
            if n == 0:
                continue
            if one_rank is None and table.column("rank").null_count:
                raise GiveUp("null ranks")
            ids = numpy_of(table.column("span_id"), np.uint64)
            bounds[(path, g)] = (int(ids.min()), int(ids.max()))
            parent, parent_valid = values_and_validity(table.column("parent_id"))
            parent = parent.astype(np.uint64, copy=False)  # (a signed column compares as ids)
            has_parent = parent_valid if parent_valid is not None else np.ones(n, np.bool_)
            child = categories.codes_of(table.column("category"))
            duration = numpy_of(table.column("duration_ns"), np.int64)
            if one_rank is not None:
                rank = np.broadcast_to(np.int32(one_rank), n)  # no copy
                ranks.add(int(one_rank))
            else:
                rank = numpy_of(table.column("rank"), np.int32)
                low, high = int(rank.min()), int(rank.max())  # (np.unique sorts: 10% of it all)
                ranks.update([low] if low == high else np.unique(rank).tolist())
            if lanes is None:
                index = IdIndex(ids)
                if index.repeated or ranges.add(*index.runs):
                    raise RepeatedIds()
                carried_row = index.find(carried.columns["parent"])
                row = index.find(parent)
                lane = np.zeros(n, np.int64)
            else:
                lane = lanes.of(table)
                span_key, wanted_key = lane_keys(
                    lane,
                    ids,
                    np.concatenate((carried.columns["lane"], lane)),
                    np.concatenate((carried.columns["parent"], parent)),
                )
                row = IdIndex(span_key).find(wanted_key)
                carried_row, row = row[: len(carried)], row[len(carried) :]
            # the children carried from earlier row groups whose parent is here
            found_carried = carried_row >= 0
            if found_carried.any():
                done = carried.take(found_carried)
                _add_summed(sums, done, child[carried_row[found_carried]])
            # this row group's spans: a parent here, none, or one still to come
            found = (row >= 0) & has_parent  # a null parent's slot holds any value
            waiting = has_parent & ~found
            # (row -1 reads the last row's category, replaced by -1 at once)
            parent_category = np.where(found, child[row], -1)
            own = waited = None
            if waits:
                own = numpy_of(table.column("self_ns"), np.int64)
                waited = numpy_of(table.column("wait_ns"), np.int64)
            sums.add(rank, child, parent_category, duration, skip=waiting, own=own, waited=waited)
            if waiting.any():
                carried.add(
                    parent=parent[waiting],
                    lane=lane[waiting],
                    rank=rank[waiting].astype(np.int64),
                    child=child[waiting],
                    time=duration[waiting],
                    steps=(duration[waiting] > 0).astype(np.int64),
                    own=own[waiting] if own is not None else np.zeros(int(waiting.sum()), np.int64),
                    waited=(
                        waited[waiting]
                        if waited is not None
                        else np.zeros(int(waiting.sum()), np.int64)
                    ),
                )
    return sums, carried, ranges, ranks, bounds


def _read(reader: Any, path: str, group: int, columns: list[str]) -> pa.Table:
    """Row group ``group`` of a part: its damage (a torn page, a bad checksum) named as
    ``TraceFileError`` of that part, as the DuckDB path names it."""
    from ..formats._base import TraceFileError

    try:
        return reader.read_row_group(group, columns=columns, use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(path, f"not a readable Parquet part: {exc}") from exc


def _add_summed(sums: PhaseSums, rows: dict[str, np.ndarray], parent_category: np.ndarray) -> None:
    """Carried rows (already summed: time, steps, self and wait time) with their parent's
    category now known."""
    for rank, child, parent, time, steps, own, waited in zip(
        rows["rank"].tolist(),
        rows["child"].tolist(),
        parent_category.tolist(),
        rows["time"].tolist(),
        rows["steps"].tolist(),
        rows["own"].tolist(),
        rows["waited"].tolist(),
    ):
        sums.add_one((rank, child, parent), time, steps, own, waited)


# --------------------------------------------------------------------------- the run


def _run(
    groups: list[list[tuple[str, Any]]],
    unique_ids: Callable[[], bool],
    *,
    lanes: bool,
    workers: int,
    budget: int,
    waits: bool = False,
) -> pa.Table:
    from concurrent.futures import ThreadPoolExecutor

    categories = Categories()
    lane_codes = Lanes() if lanes else None

    stop = threading.Event()

    def one(
        parts: list[tuple[str, Any]],
    ) -> tuple[PhaseSums, Carried, Ranges, set[int], dict[tuple[str, int], tuple[int, int]]]:
        try:
            return _stream(parts, categories, lane_codes, budget, stop, waits)
        except (GiveUp, RepeatedIds):
            stop.set()  # the others stop at their next row group
            raise

    # Threads, not processes: reading Parquet and numpy's work on whole columns let go of
    # the GIL, and the processes' streams are independent.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, parts) for parts in groups]
        # the first failure (in submission order) is not always the cause: a worker that
        # stopped because another one failed raises GiveUp("stopped")
        errors = [f.exception() for f in futures]
        if any(isinstance(e, RepeatedIds) for e in errors):
            raise RepeatedIds()
        for error in errors:
            if error is not None:
                raise error
        results = [f.result() for f in futures]
    sums = PhaseSums()
    sums.waits = waits  # (the workers' sums merged say so too, where they read a row)
    ranks: set[int] = set()
    carried = Carried(budget * workers)
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    for group_sums, group_carried, _group_ranges, group_ranks, group_bounds in results:
        sums.merge(group_sums)
        ranks |= group_ranks
        bounds.update(group_bounds)
        if len(group_carried):
            carried.add(**group_carried.columns)
    if not lanes and _repeated_across([result[2] for result in results], budget, unique_ids):
        raise RepeatedIds()
    if len(carried):
        _resolve_carried(carried, sums, bounds, groups, categories, lane_codes)

    names = list(categories.codes)
    # levels numbered in sorted order, as the DuckDB path numbers them
    ordered = sorted(c for c in names if c is not None)
    return sums.table(names, ordered, np.array(sorted(ranks), np.int64))


def _repeated_across(ranges: list[Ranges], budget: int, unique_ids: Callable[[], bool]) -> bool:
    """Whether an id repeats between processes (each process's own ids are unique: checked as
    they were read). Processes draw ids from a random base each, so their spans of ids
    (lowest to highest) do not overlap, and nothing more is needed; where they do, their
    runs are merged, and where those were too many to keep, ``unique_ids`` answers."""
    if any(r.overflow for r in ranges):
        return not unique_ids()
    spans = sorted((r.starts[0], r.ends[-1]) for r in ranges if len(r.starts))
    if all(later[0] > earlier[1] for earlier, later in zip(spans, spans[1:])):
        return False
    merged = Ranges(budget)
    for r in ranges:
        if merged.add(r.starts, r.ends):
            return True
    return merged.overflow and not unique_ids()


def _resolve_carried(
    carried: Carried,
    sums: PhaseSums,
    bounds: dict[tuple[str, int], tuple[int, int]],
    groups: list[list[tuple[str, Any]]],
    categories: Categories,
    lanes: Lanes | None,
) -> None:
    """The children whose parent was not in their own process's parts after them: looked up
    in every row group whose ids (lowest to highest, as read) could hold one; not found, no
    parent."""
    import pyarrow.parquet as pq

    wanted = np.unique(carried.columns["parent"])
    columns = ["span_id", "category"] + (list(LANE) if lanes else [])
    for parts in groups:
        for path, footer in parts:
            reader = None
            for g in range(footer.num_row_groups):
                if not len(carried):
                    return
                if (path, g) not in bounds:
                    continue  # no spans
                low, high = bounds[(path, g)]
                i = np.searchsorted(wanted, np.uint64(low))
                if i >= len(wanted) or wanted[i] > np.uint64(high):
                    continue  # none of the wanted ids in this row group
                reader = reader or pq.ParquetFile(path, metadata=footer)
                table = _read(reader, path, g, columns)
                ids = numpy_of(table.column("span_id"), np.uint64)
                category = categories.codes_of(table.column("category"))
                if lanes is None:
                    row = IdIndex(ids).find(carried.columns["parent"])
                else:
                    span_key, wanted_key = lane_keys(
                        lanes.of(table), ids, carried.columns["lane"], carried.columns["parent"]
                    )
                    row = IdIndex(span_key).find(wanted_key)
                found = row >= 0
                if found.any():
                    _add_summed(sums, carried.take(found), category[row[found]])
    # never found: no parent
    rest = carried.take(np.ones(len(carried), np.bool_))
    _add_summed(sums, rest, np.full(len(rest["parent"]), -1, np.int64))
