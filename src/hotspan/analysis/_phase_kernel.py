"""The phases kernel: ``phases`` defined once, over batches of spans.

Per span, the statistic needs its rank, its category, its parent's category, its duration
(and, where spans awaited in asyncio tasks, its self and wait time). :class:`PhaseSums`
sums those per (rank, category, parent's category): time, steps (spans of positive
duration), self and wait time, exact integers, a batch at a time. Whoever feeds it finds
the parents its own way: the in-memory path over the whole table (``_columns.parent_rows``,
then the table's batches fed in order: :func:`phases_of_table`), the Parquet scan within
each process's row groups (process_phases.py). :meth:`PhaseSums.table` turns the sums into
the ``phases`` table through :func:`phases_of_sums`, which is also where the SQL engines'
rows end (DuckDB and Spark join each span to its parent in SQL: ``queries.phases_sql``):
one arithmetic for the levels, the steps, the wait rule (:func:`phase_times`) and the rows
(:func:`phase_table`), whichever engine summed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .._columns import column_codes, parent_rows, to_numpy
from ._kernels import group_sum, sum_by

__all__ = [
    "BATCH_ROWS",
    "PHASE_COLUMNS",
    "PHASE_SCHEMA",
    "PhaseSums",
    "category_levels",
    "phase_table",
    "phase_times",
    "phases_of_sums",
    "phases_of_table",
]

#: The columns of ``phases()``.
PHASE_COLUMNS = ("rank", "category", "phase", "time_ns", "steps", "per_step_ns", "share")
PHASE_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),  # null: the mean over ranks
        pa.field("category", pa.string()),  # the top-level category
        pa.field("phase", pa.string()),  # the category itself, or one of its sub-categories
        pa.field("time_ns", pa.int64()),  # the mean rows: rounded to the nanosecond
        pa.field("steps", pa.int64()),  # the mean rows: rounded
        pa.field("per_step_ns", pa.float64()),
        pa.field("share", pa.float64()),  # of the top-level category's time
    ]
)

#: Rows of a table fed to the kernel at a time (about a row group of a recorder's part).
BATCH_ROWS = 1 << 20

#: Bins past which a batch's (rank, category, parent) keys are numbered densely first.
_DENSE_BINS = 1 << 22


class PhaseSums:
    """Time, steps, self and wait time per (rank, category code, parent's category code;
    -1: no parent), integer sums, added a batch at a time (``waits``: the self and wait
    times were given)."""

    def __init__(self) -> None:
        self.sums: dict[tuple[int, int, int], list[int]] = {}
        self.waits = False

    def add(
        self,
        rank: np.ndarray,
        child: np.ndarray,
        parent: np.ndarray,
        d: np.ndarray,
        skip: np.ndarray | None = None,
        own: np.ndarray | None = None,
        waited: np.ndarray | None = None,
    ) -> None:
        """Add each row's duration ``d`` (and a step where it is positive; its self time
        ``own`` and wait ``waited`` if given) to its (rank, category, parent's category), the
        rows of ``skip`` (a mask) left out."""
        if len(d) == 0:
            return
        width = int(max(child.max(), parent.max())) + 2  # parent -1 .. C-1
        if rank.min() == rank.max():  # one rank (a process's row group): no per-row rank code
            ranks = rank[:1]
            key = child * width  # (in place from here: no temporaries of a million)
        else:
            ranks, rank_code = np.unique(rank, return_inverse=True)
            key = (rank_code.reshape(-1) * width + child) * width
        key += parent
        key += 1
        size = len(ranks) * width * width
        if skip is not None:
            key[skip] = size  # a bin of their own, dropped below
        bins: np.ndarray | None = None
        if size > _DENSE_BINS and size > 4 * len(d):
            # many categories: only the keys present get a bin
            bins, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1)
        nbins = len(bins) if bins is not None else size + 1
        steps = np.bincount(key[d > 0], minlength=nbins)
        sums = [_exact_sums(key, d, nbins), steps]
        if own is not None and waited is not None:
            self.waits = True
            sums += [_exact_sums(key, own, nbins), _exact_sums(key, waited, nbins)]
        touched = np.zeros(nbins, np.bool_)
        for column in sums:
            touched |= column != 0  # a key of no time, no step, no wait adds nothing (instants)
        for k in np.flatnonzero(touched).tolist():
            full = int(bins[k]) if bins is not None else k
            if full >= size:
                continue  # the skipped rows
            r, rest = divmod(full, width * width)
            self.add_one(
                (int(ranks[r]), rest // width, rest % width - 1), *(int(c[k]) for c in sums)
            )

    def add_one(self, key: tuple[int, int, int], *values: int) -> None:
        """Add summed values (time, steps, and self and wait time if any) to one key."""
        total = self.sums.setdefault(key, [0, 0, 0, 0])
        for i, value in enumerate(values):
            total[i] += value

    def merge(self, other: PhaseSums) -> None:
        self.waits |= other.waits
        for key, values in other.sums.items():
            self.add_one(key, *values)

    def table(
        self, names: Sequence[str | None], numbering: Sequence[str | None], ranks: np.ndarray
    ) -> pa.Table:
        """The ``phases`` table of these sums: ``names`` the category of each code, ``numbering``
        the categories in the order their levels are numbered (ties of time come in that
        order), ``ranks`` every rank of the spans, ascending."""
        levels = category_levels(numbering)
        position = {c: i for i, c in enumerate(numbering)}
        top_of = np.array([_level(levels[2], position, c) for c in names] + [-1], np.int64)
        sub_of = np.array([_level(levels[3], position, c) for c in names] + [-1], np.int64)
        keys = list(self.sums)
        child = np.array([k[1] for k in keys], np.int64)
        parent = np.array([k[2] for k in keys], np.int64)  # -1: none (top_of[-1] is -1)
        has_parent = parent >= 0
        values = np.array([self.sums[k] for k in keys], np.int64).reshape(len(keys), 4)
        rows = {
            "rank": np.array([k[0] for k in keys], np.int64),
            "top": top_of[child],
            "sub": sub_of[child],
            "same_top": has_parent & (top_of[parent] == top_of[child]),
            "same_sub": has_parent & (sub_of[parent] == sub_of[child]),
            "time": values[:, 0],
            "steps": values[:, 1],
        }
        if self.waits:
            rows["own"], rows["waited"] = values[:, 2], values[:, 3]
        return phases_of_sums(rows, np.asarray(ranks, np.int64), levels)


def _level(numbers: np.ndarray, position: dict[str | None, int], category: str | None) -> int:
    at = position.get(category)
    return -1 if at is None else int(numbers[at])


def _exact_sums(key: np.ndarray, values: np.ndarray, bins: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per key."""
    n = len(values)
    if n and int(values.min()) >= 0 and int(values.max()) < (1 << 53) // n:
        # every partial sum an integer below 2**53: float64 sums them exactly, in one pass
        return np.bincount(key, weights=values, minlength=bins).astype(np.int64)
    return group_sum(key, values, bins)


def phases_of_table(table: pa.Table) -> pa.Table:
    """``phases`` of a table in memory (its columns checked by the caller): each span's
    parent found in the whole table, then the table fed to :class:`PhaseSums` in batches of
    :data:`BATCH_ROWS`, as the Parquet scan feeds it row groups. Levels are numbered in the
    order categories first appear (ties of time come in that order)."""
    if table.num_rows == 0:
        return PHASE_SCHEMA.empty_table()
    category, names = column_codes(table.column("category"))
    parent = parent_rows(table)
    parent_category = np.where(parent >= 0, category[np.maximum(parent, 0)], -1)
    waits = {"self_ns", "wait_ns"} <= set(table.column_names)
    sums = PhaseSums()
    for start in range(0, table.num_rows, BATCH_ROWS):
        batch = table.slice(start, BATCH_ROWS)
        rows = slice(start, start + batch.num_rows)
        own = waited = None
        if waits:
            own = to_numpy(batch.column("self_ns").fill_null(0), np.int64)
            waited = to_numpy(batch.column("wait_ns").fill_null(0), np.int64)
        sums.add(
            to_numpy(batch.column("rank"), np.int64),
            category[rows].astype(np.int64, copy=False),
            parent_category[rows].astype(np.int64, copy=False),
            to_numpy(batch.column("duration_ns"), np.int64),
            own=own,
            waited=waited,
        )
    ranks = np.unique(to_numpy(table.column("rank"), np.int64))
    values = names.to_pylist()
    return sums.table(values, values, ranks)


def phases_of_sums(
    rows: dict[str, np.ndarray], rank_values: np.ndarray, levels: tuple[Any, ...]
) -> pa.Table:
    """The ``phases`` table from summed rows as numpy columns (``rank``, ``top``, ``sub``,
    ``same_top``, ``same_sub``, ``time``, ``steps``; ``own`` and ``waited`` where the spans
    carry wait times): those of :meth:`PhaseSums.table` or of ``queries.phases_sql``."""
    tops, subs = levels[0], levels[1]
    if len(rank_values) == 0:
        return PHASE_SCHEMA.empty_table()
    top_of, sub_of = rows["top"], rows["sub"]
    same_top, same_sub = rows["same_top"], rows["same_sub"]
    rank_of, time_of, steps_of = rows["rank"], rows["time"], rows["steps"]
    opens_top, opens_sub = (top_of >= 0) & ~same_top, (sub_of >= 0) & ~same_sub
    n_ranks, n_tops, n_subs = len(rank_values), len(tops), len(subs)
    top_time = np.zeros((n_ranks, n_tops), np.int64)
    top_steps = np.zeros((n_ranks, n_tops), np.int64)
    sub_time = np.zeros((n_ranks, n_subs), np.int64)
    rank = np.searchsorted(rank_values, rank_of)
    # summed: a (rank, level) comes in several rows (one per combination of the flags)
    np.add.at(top_time, (rank[opens_top], top_of[opens_top]), time_of[opens_top])
    np.add.at(top_steps, (rank[opens_top], top_of[opens_top]), steps_of[opens_top])
    np.add.at(sub_time, (rank[opens_sub], sub_of[opens_sub]), time_of[opens_sub])
    if "own" in rows and "waited" in rows:
        top_time = phase_times(top_time, rank, top_of, rows["own"], rows["waited"])
        sub_time = phase_times(sub_time, rank, sub_of, rows["own"], rows["waited"])
    return phase_table(rank_values, tops, subs, top_time, top_steps, sub_time)


def phase_times(
    time: np.ndarray, rank: np.ndarray, level: np.ndarray, own: np.ndarray, waited: np.ndarray
) -> np.ndarray:
    """``time`` (rank x level: the outermost spans' durations) where a level's spans on a
    rank awaited (asyncio tasks: ``wait_ns``), replaced by the time their code ran: the self
    times of every span in the level summed (DESIGN.md "Self and wait"). Durations of
    concurrent tasks add up to more than the wall time; their self times do not. For sync
    code the two are the same, and the durations are kept. ``rank``, ``level``, ``own`` and
    ``waited`` are per row (or per summed row: the SQL engines' groups)."""
    keep = level >= 0
    if not keep.any():
        return time
    shape = time.shape
    code = rank[keep].astype(np.int64) * shape[1] + level[keep]
    size = shape[0] * shape[1]
    awaited = sum_by(code, np.asarray(waited, np.int64)[keep], size).reshape(shape) > 0
    if not awaited.any():
        return time
    ran = sum_by(code, np.asarray(own, np.int64)[keep], size).reshape(shape)
    return np.where(awaited, ran, time)


def category_levels(
    categories: Sequence[str | None],
) -> tuple[dict[str, int], dict[str, int], np.ndarray, np.ndarray]:
    """The top-level categories (``sync``) and sub-categories (``sync/compute``) of distinct
    category paths, each numbered in order of appearance, and per path its top and sub
    number (-1: none)."""
    tops: dict[str, int] = {}
    subs: dict[str, int] = {}
    top_of_value = np.full(len(categories), -1, np.int64)
    sub_of_value = np.full(len(categories), -1, np.int64)
    for i, path in enumerate(categories):  # distinct categories only
        if not path:
            continue
        parts = path.split("/")
        top_of_value[i] = tops.setdefault(parts[0], len(tops))
        if len(parts) > 1 and parts[1]:
            sub_of_value[i] = subs.setdefault(parts[0] + "/" + parts[1], len(subs))
    return tops, subs, top_of_value, sub_of_value


def phase_table(
    rank_values: np.ndarray,
    tops: dict[str, int],
    subs: dict[str, int],
    top_time: np.ndarray,
    top_steps: np.ndarray,
    sub_time: np.ndarray,
) -> pa.Table:
    """The rows of ``phases()`` from, per rank (``rank_values``, ascending) and top-level
    category, its time and steps, and per rank and sub-category its time (integer sums)."""
    n_ranks, n_subs = len(rank_values), len(subs)
    top_time = top_time.astype(np.float64)
    top_steps = top_steps.astype(np.float64)
    sub_time = sub_time.astype(np.float64)

    top_names = list(tops)
    sub_names = list(subs)
    sub_top = np.array([tops[name.split("/", 1)[0]] for name in sub_names], np.int64)

    rows: list[tuple[Any, ...]] = []

    def emit(rank: int | None, times: np.ndarray, steps: np.ndarray, subs_time: np.ndarray) -> None:
        for t in np.argsort(-times, kind="stable"):
            if times[t] <= 0 and steps[t] <= 0:
                continue
            name = top_names[t]
            per_step = times[t] / steps[t] if steps[t] else np.nan
            rows.append(
                (rank, name, name, times[t], steps[t], per_step, 1.0 if times[t] else np.nan)
            )
            mine = np.flatnonzero((sub_top == t) & (subs_time > 0))
            for s in mine[np.argsort(-subs_time[mine], kind="stable")]:
                rows.append(
                    (
                        rank,
                        name,
                        sub_names[s],
                        subs_time[s],
                        steps[t],
                        subs_time[s] / steps[t] if steps[t] else np.nan,
                        subs_time[s] / times[t] if times[t] else np.nan,
                    )
                )

    for r in range(n_ranks):
        emit(int(rank_values[r]), top_time[r], top_steps[r], sub_time[r])
    if n_ranks > 1:
        present = (top_time > 0) | (top_steps > 0)  # ranks x tops
        ranks_with = np.maximum(present.sum(axis=0), 1)
        mean_time = top_time.sum(axis=0) / ranks_with
        mean_steps = top_steps.sum(axis=0) / ranks_with
        mean_sub = (
            (sub_time * present[:, sub_top]).sum(axis=0) / ranks_with[sub_top]
            if n_subs
            else sub_time[0]
        )
        emit(None, mean_time, mean_steps, mean_sub)

    if not rows:
        return PHASE_SCHEMA.empty_table()
    # time and steps are integers: the mean rows' rounded (their per step and share are not)
    rows = [
        (r[0], r[1], r[2], math.floor(r[3] + 0.5), math.floor(r[4] + 0.5), *r[5:]) for r in rows
    ]  # half up
    columns = list(zip(*rows))
    return pa.Table.from_arrays(
        [_arrow_array(list(col), field.type) for col, field in zip(columns, PHASE_SCHEMA)],
        schema=PHASE_SCHEMA,
    )


def _arrow_array(values: list[Any], type_: pa.DataType) -> pa.Array:
    """``pa.array(values, type_, from_pandas=True)`` (None and NaN null) for the few types of
    ``PHASE_SCHEMA``, built from buffers: ``pa.array`` imports pandas on its first call (a
    few tenths of a second of a fresh process that streams a run's phases and needs none)."""
    n = len(values)
    valid = np.array(
        [v is not None and not (isinstance(v, float) and math.isnan(v)) for v in values], np.bool_
    )
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_string(type_):
        from .._table import string_array

        return string_array([v if ok else None for v, ok in zip(values, valid)])
    dtype = np.dtype(type_.to_pandas_dtype())
    data = np.array([v if ok else 0 for v, ok in zip(values, valid)], dtype)
    return pa.Array.from_buffers(
        type_, n, [bitmap, pa.py_buffer(data)], null_count=int(n - valid.sum())
    )
