"""The parts of the per-process phases stream (process_phases.py): category codes shared
by its workers, a sorted index of span ids, the id ranges seen, the rows carried to a later
row group, and lane codes. The sums themselves are the phases kernel's
(``_phase_kernel.PhaseSums``)."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from .._columns import values_and_validity

__all__ = ["LANE", "GiveUp"]

#: The columns that tell a span's thread apart where ids repeat.
LANE = ("rank", "pid", "thread_id")


class GiveUp(Exception):
    """The stream cannot answer within its memory share (or the parts are not as it needs):
    the caller takes the DuckDB path."""


class Categories:
    """Category strings numbered in order of first sight (None: a null category), shared by
    the workers (a lock: only distinct values of each row group's dictionary come here)."""

    def __init__(self) -> None:
        self.codes: dict[str | None, int] = {}
        self.lock = threading.Lock()

    def codes_of(self, column: pa.ChunkedArray) -> np.ndarray:
        import pyarrow.compute as pc

        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if not pa.types.is_dictionary(array.type):
            array = pc.dictionary_encode(array)
        values = array.dictionary.to_pylist()
        with self.lock:
            remap = np.array(
                [self.codes.setdefault(v, len(self.codes)) for v in values] or [0], np.int64
            )
            null = self.codes.setdefault(None, len(self.codes))
        if not len(values):
            return np.full(len(array), null, np.int64)
        indices, valid = values_and_validity(array.indices)
        codes = remap[np.where(valid, indices, 0) if valid is not None else indices]
        if valid is not None:
            codes[~valid] = null
        return codes


def numpy_of(column: pa.Array | pa.ChunkedArray, dtype: type) -> np.ndarray:
    """An integer column as numpy, nulls as 0 (pyarrow's ``to_numpy`` would import pandas:
    ~0.3 s of a fresh process)."""
    values, valid = values_and_validity(column)
    values = values.astype(dtype, copy=False)
    return values if valid is None else np.where(valid, values, 0).astype(dtype, copy=False)


class IdIndex:
    """Row of each id among a row group's spans (keys: ids, or (lane, id) pairs made dense).

    The recorder draws a process's ids as ``base + k``: the ids of a row group lie in a
    range not much wider than their number, and a table indexed by ``id - lowest`` finds
    each in one step, with no sort (a sort of a million ids costs several times the whole
    lookup). Ids spread wider (other writers' random ids) are sorted instead."""

    def __init__(self, keys: np.ndarray) -> None:
        n = len(keys)
        self.n = n
        if n == 0:
            self.direct, self.repeated, self.runs = False, False, (keys, keys)
            return
        self.low = keys.min()
        width = int(keys.max() - self.low) + 1
        self.direct = width <= 4 * n + 4096
        if self.direct:
            offset = (keys - self.low).view(np.int64)  # below width: a view, no copy
            self.width = width
            # Rows in reverse: where an id repeats, its first row is the one left (as the
            # in-memory path's stable sort picks the first).
            table = np.full(width, -1, np.int32 if n < 2**31 else np.int64)
            rows = np.arange(n, dtype=table.dtype)
            table[offset[::-1]] = rows[::-1]
            self.table = table
            present = table >= 0
            # fewer distinct ids than rows: one repeats
            self.repeated = int(np.count_nonzero(present)) != n
            # runs of consecutive ids: where presence switches on and off
            edges = np.flatnonzero(np.diff(np.r_[False, present, False].view(np.int8)))
            self.runs = (
                self.low + edges[0::2].astype(np.uint64),
                self.low + (edges[1::2] - 1).astype(np.uint64),
            )
        else:
            self.order = np.argsort(keys, kind="stable")
            self.sorted = keys[self.order]
            self.repeated = bool(n > 1 and (self.sorted[1:] == self.sorted[:-1]).any())
            distinct = np.unique(self.sorted) if self.repeated else self.sorted
            breaks = np.flatnonzero(distinct[1:] != distinct[:-1] + np.uint64(1))
            self.runs = (distinct[np.r_[0, breaks + 1]], distinct[np.r_[breaks, len(distinct) - 1]])

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """The row of each wanted key, -1 where absent."""
        if self.n == 0 or len(wanted) == 0:
            return np.full(len(wanted), -1, np.int64)
        if self.direct:
            # below the lowest id, the difference wraps around past the width: one test
            offset = wanted - self.low
            outside = offset >= np.uint64(self.width)
            offset[outside] = 0
            out: np.ndarray = self.table[offset.view(np.int64)]
            out[outside] = -1
            return out
        position = np.minimum(np.searchsorted(self.sorted, wanted), self.n - 1)
        return np.where(self.sorted[position] == wanted, self.order[position], -1)


class Ranges:
    """Disjoint ranges of ids seen, merged as row groups come: an overlap is a repeated id."""

    def __init__(self, budget: int) -> None:
        self.starts = np.zeros(0, np.uint64)
        self.ends = np.zeros(0, np.uint64)
        self.budget = budget
        self.overflow = False  # too many runs to keep: uniqueness asked of DuckDB instead

    def add(self, starts: np.ndarray, ends: np.ndarray) -> bool:
        """Merge; whether an id was seen before."""
        if self.overflow:
            return False
        starts = np.concatenate((self.starts, starts))
        ends = np.concatenate((self.ends, ends))
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends) if len(ends) else ends
        overlap = bool(len(starts) > 1 and (starts[1:] <= reach[:-1]).any())
        # a run that starts right after the reach so far continues it (+1 wraps only at 2**64-1)
        begins = np.r_[True, starts[1:] > reach[:-1] + np.uint64(1)] if len(starts) else starts
        last = np.r_[np.flatnonzero(begins)[1:] - 1, len(starts) - 1] if len(starts) else starts
        self.starts, self.ends = starts[begins], reach[last.astype(np.int64)]
        if len(self.starts) > self.budget:
            self.overflow = True
            self.starts = self.ends = np.zeros(0, np.uint64)
        return overlap


class Carried:
    """Children whose parent is not found yet, summed per (parent key, lane, rank, category):
    parent_id (uint64), lane (int64, 0 without lanes), rank, category, and the sums: time,
    steps, self time and wait (0 where the spans carry no wait times)."""

    FIELDS = ("parent", "lane", "rank", "child", "time", "steps", "own", "waited")
    SUMMED = ("time", "steps", "own", "waited")

    def __init__(self, budget: int) -> None:
        self.columns = {
            name: np.zeros(0, np.uint64 if name == "parent" else np.int64) for name in self.FIELDS
        }
        self.budget = budget

    def __len__(self) -> int:
        return len(self.columns["parent"])

    def add(self, **columns: np.ndarray) -> None:
        merged = {k: np.concatenate((self.columns[k], columns[k])) for k in self.FIELDS}
        if len(merged["parent"]) > 1:
            order = np.lexsort((merged["child"], merged["rank"], merged["lane"], merged["parent"]))
            merged = {k: v[order] for k, v in merged.items()}
            key = ("parent", "lane", "rank", "child")
            same = np.ones(len(order) - 1, np.bool_)
            for k in key:
                same &= merged[k][1:] == merged[k][:-1]
            starts = np.flatnonzero(np.r_[True, ~same])
            merged = {
                k: (np.add.reduceat(v, starts) if k in self.SUMMED else v[starts])
                for k, v in merged.items()
            }
        if len(merged["parent"]) > self.budget:
            raise GiveUp("too many children waiting for their parents")
        self.columns = merged

    def take(self, keep: np.ndarray) -> dict[str, np.ndarray]:
        """The rows of ``keep`` (a mask) out of the carried ones."""
        taken = {k: v[keep] for k, v in self.columns.items()}
        self.columns = {k: v[~keep] for k, v in self.columns.items()}
        return taken


class Lanes:
    """Dense numbers for (rank, pid, thread_id) lanes, shared by the workers."""

    def __init__(self) -> None:
        self.codes: dict[tuple[int, ...], int] = {}
        self.lock = threading.Lock()

    def of(self, table: pa.Table) -> np.ndarray:
        columns = [numpy_of(table.column(c).fill_null(0), np.int64) for c in LANE]
        stacked = np.stack(columns, axis=1)
        distinct, inverse = np.unique(stacked, axis=0, return_inverse=True)
        with self.lock:
            remap = np.array(
                [
                    self.codes.setdefault(tuple(int(x) for x in row), len(self.codes))
                    for row in distinct
                ],
                np.int64,
            )
        return remap[inverse.reshape(-1)]


def lane_keys(
    lane: np.ndarray, ids: np.ndarray, wanted_lane: np.ndarray, wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(lane, id) pairs as single dense keys, the same numbering for the row group's spans and
    the wanted parents (absent ids: a key no span has)."""
    distinct = np.unique(ids)
    k = np.uint64(len(distinct) + 1)
    span_key = lane.astype(np.uint64) * k + np.searchsorted(distinct, ids).astype(np.uint64)
    found = np.minimum(np.searchsorted(distinct, wanted), max(len(distinct) - 1, 0))
    hit = distinct[found] == wanted if len(distinct) else np.zeros(len(wanted), np.bool_)
    wanted_key = wanted_lane.astype(np.uint64) * k + np.where(hit, found, len(distinct)).astype(
        np.uint64
    )
    return span_key, wanted_key
