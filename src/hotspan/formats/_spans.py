"""What the two trace formats (Chrome JSON, Perfetto) both need from a span table.

Both write threads as tracks, names and categories once (as dictionaries), and spans in
the order a trace viewer replays them: per thread, by start time, a parent before its
children. :class:`TraceLayout` computes that once for the whole table (dictionary codes,
thread and process tables, a sort permutation: about 30 bytes a span, a fraction of the
table itself) and then hands out the rows batch by batch, so an export never holds more
than one batch of its output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._schema import META_HOST
from . import base

#: Added to the sort key of spans opening at a time, so that spans closing at that same
#: time (and instants recorded just before they close) come first.
_OPENING = np.int64(1) << 40

UINT32_MAX = (1 << 32) - 1


def dictionary_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Per-row int32 codes (-1 for null) into one dictionary of distinct strings."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    column = pa.table({"c": column}).unify_dictionaries().column("c")
    if column.num_chunks == 0:
        return np.empty(0, np.int32), []
    dictionary = column.chunk(0).dictionary.to_pylist()
    codes = np.concatenate(
        [pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32, copy=False) for chunk in column.chunks]
    )
    return codes, dictionary


def _dense_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row codes and the distinct values of an integer column (hash based, no sort)."""
    encoded = pa.table({"c": pc.dictionary_encode(column)}).unify_dictionaries().column("c")
    if encoded.num_chunks == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    codes = np.concatenate([chunk.indices.to_numpy().astype(np.int64) for chunk in encoded.chunks])
    return codes, encoded.chunk(0).dictionary.to_numpy()


@dataclass
class Batch:
    """Rows of one batch, in trace order, and their codes into the layout's tables."""

    rows: pa.Table  # span_id, parent_id, start_ns, duration_ns, depth, arg, error
    thread: np.ndarray  # int32 index into TraceLayout.threads
    name: np.ndarray  # int32 index into TraceLayout.names
    category: np.ndarray  # int32 index into TraceLayout.categories, -1: none
    thread_name: np.ndarray  # int32 index into TraceLayout.thread_names, -1: the thread's own
    tie: np.ndarray  # int64 order among rows of one thread starting at the same time


class TraceLayout:
    """A span table prepared for a trace format (see the module's docstring).

    Attributes:
      names, categories, thread_names: distinct strings (lists, index = code).
      threads: per thread (trace order: rank, pid, thread id): ``pid``, ``rank``,
        ``thread_id``, ``process`` (index into processes) and ``name`` (its most frequent
        thread name; rows that carry another name keep it per span).
      processes: per (pid, rank): ``pid``, ``rank``.
      start_ns: the earliest start (0 for an empty table).
    """

    def __init__(self, table: pa.Table, batch_rows: int | None = None):
        self.table = table
        self.num_rows = table.num_rows
        self.batch_rows = batch_rows or base.BATCH_ROWS
        self.metadata = dict(table.schema.metadata or {})
        self.host = self.metadata.get(META_HOST, b"").decode("utf-8", "replace")

        if self.num_rows and pc.min(table.column("duration_ns")).as_py() < 0:
            bad = pc.sum(pc.less(table.column("duration_ns"), 0)).as_py()
            raise ValueError(f"{bad} span(s) have a negative duration_ns; a trace cannot show them")
        self.start_ns = int(pc.min(table.column("start_ns")).as_py()) if self.num_rows else 0

        self._name_codes, self.names = dictionary_codes(table.column("name"))
        self._category_codes, self.categories = dictionary_codes(table.column("category"))
        thread_name_codes, self.thread_names = dictionary_codes(table.column("thread_name"))
        self._thread_codes = self._build_threads()
        self._thread_name_codes = self._build_thread_names(thread_name_codes)
        self._tie = np.empty(0, np.int64)
        self._order = self._trace_order()

    # ------------------------------------------------------------------ threads, processes

    def _build_threads(self) -> np.ndarray:
        table = self.table
        pid_codes, pids = _dense_codes(table.column("pid"))
        rank_codes, ranks = _dense_codes(table.column("rank"))
        tid_codes, tids = _dense_codes(table.column("thread_id"))
        combined = (pid_codes * len(ranks) + rank_codes) * max(len(tids), 1) + tid_codes
        thread_codes, combos = _dense_codes(pa.chunked_array([pa.array(combined, pa.int64())]))
        tid_part = combos % max(len(tids), 1)
        rank_part = (combos // max(len(tids), 1)) % max(len(ranks), 1)
        pid_part = combos // max(len(tids), 1) // max(len(ranks), 1)
        thread_pid = pids[pid_part].astype(np.int64) if len(combos) else np.empty(0, np.int64)
        thread_rank = ranks[rank_part].astype(np.int64) if len(combos) else np.empty(0, np.int64)
        thread_tid = tids[tid_part].astype(np.int64) if len(combos) else np.empty(0, np.int64)

        # Trace order of the threads: by rank, then process, then thread id.
        order = np.lexsort((thread_tid, thread_pid, thread_rank))
        remap = np.empty(len(order), np.int32)
        remap[order] = np.arange(len(order), dtype=np.int32)
        self.thread_pid = thread_pid[order]
        self.thread_rank = thread_rank[order]
        self.thread_tid = thread_tid[order]

        process_keys = list(dict.fromkeys(zip(self.thread_pid.tolist(), self.thread_rank.tolist())))
        self.process_pid = np.array([pid for pid, _ in process_keys], np.int64)
        self.process_rank = np.array([rank for _, rank in process_keys], np.int64)
        process_index = {key: i for i, key in enumerate(process_keys)}
        self.thread_process = np.array(
            [process_index[key] for key in zip(self.thread_pid.tolist(), self.thread_rank.tolist())], np.int32
        )
        return remap[thread_codes] if len(thread_codes) else np.empty(0, np.int32)

    def _build_thread_names(self, thread_name_codes: np.ndarray) -> np.ndarray:
        """Each thread's name (its most frequent one); per row -1 or the other name it had."""
        n_threads = len(self.thread_pid)
        n_names = max(len(self.thread_names), 1)
        pairs = self._thread_codes.astype(np.int64) * n_names + thread_name_codes
        counts = pc.value_counts(pa.array(pairs, pa.int64()))
        values = counts.field("values").to_numpy()
        frequencies = counts.field("counts").to_numpy()
        # Sort by thread, then frequency (ties: the smaller name code), keep each thread's top.
        order = np.lexsort((values % n_names, -frequencies, values // n_names))
        top = order[np.r_[True, np.diff(values[order] // n_names) != 0]] if len(order) else order
        self.thread_name = np.zeros(n_threads, np.int32)
        self.thread_name[values[top] // n_names] = values[top] % n_names
        own = self.thread_name[self._thread_codes] if len(self._thread_codes) else np.empty(0, np.int32)
        return np.where(thread_name_codes == own, -1, thread_name_codes).astype(np.int32)

    def process_name(self, process: int) -> str:
        rank = int(self.process_rank[process])
        return f"rank {rank} @ {self.host}" if self.host else f"rank {rank}"

    @property
    def num_threads(self) -> int:
        return len(self.thread_pid)

    @property
    def num_processes(self) -> int:
        return len(self.process_pid)

    # ------------------------------------------------------------------ order

    def _trace_order(self) -> np.ndarray | None:
        """The permutation putting rows in trace order, or None when they already are.

        Per thread by start time; at one time, first instants that close their parent
        (recorded at the parent's last tick), deepest first; then spans and instants that
        open, shallowest first, an instant before a span of its own depth.
        """
        if not self.num_rows:
            return None
        table = self.table
        start = table.column("start_ns").to_numpy()
        duration = table.column("duration_ns").to_numpy()
        depth = table.column("depth").to_numpy().astype(np.int64)
        tie = _OPENING + 2 * depth + (duration > 0)
        closing = self._closing_instants(start, duration)
        tie[closing] = -2 * depth[closing]
        self._tie = tie
        thread = self._thread_codes
        same_thread = thread[1:] == thread[:-1]
        same_start = same_thread & (start[1:] == start[:-1])
        in_order = (thread[1:] > thread[:-1]) | (same_thread & (start[1:] > start[:-1])) | (same_start & (tie[1:] >= tie[:-1]))
        if in_order.all():
            return None
        return np.lexsort((tie, start, thread))

    def _closing_instants(self, start: np.ndarray, duration: np.ndarray) -> np.ndarray:
        """Row indices of instants whose parent ends at the instant's own time."""
        table = self.table
        instants = np.flatnonzero(duration == 0)
        if not len(instants):
            return instants
        parent_ids = table.column("parent_id").take(pa.array(instants))
        has_parent = parent_ids.is_valid().to_numpy(zero_copy_only=False)
        instants = instants[has_parent]
        if not len(instants):
            return instants
        parent_ids = pc.drop_null(parent_ids)
        # Only spans ending at some instant's time can be such a parent: a small set.
        candidate = pc.is_in(table.column("end_ns"), value_set=pa.array(np.unique(start[instants])))
        candidates = table.filter(candidate).select(["span_id", "end_ns"])
        where = pc.index_in(parent_ids, value_set=candidates.column("span_id").combine_chunks())
        found = where.is_valid().to_numpy(zero_copy_only=False)
        where = pc.fill_null(where, 0).to_numpy(zero_copy_only=False)
        parent_end = candidates.column("end_ns").to_numpy()[where] if len(candidates) else np.zeros(len(where), np.int64)
        return instants[found & (parent_end == start[instants])]

    # ------------------------------------------------------------------ batches

    _ROW_COLUMNS = ["span_id", "parent_id", "start_ns", "duration_ns", "depth", "arg", "error"]

    def batches(self) -> Iterator[Batch]:
        rows = self.table.select(self._ROW_COLUMNS)
        for begin in range(0, self.num_rows, self.batch_rows):
            if self._order is None:
                index = slice(begin, begin + self.batch_rows)
                batch_rows = rows.slice(begin, self.batch_rows)
            else:
                index = self._order[begin:begin + self.batch_rows]
                batch_rows = rows.take(pa.array(index))
            yield Batch(
                rows=batch_rows,
                thread=self._thread_codes[index],
                name=self._name_codes[index],
                category=self._category_codes[index],
                thread_name=self._thread_name_codes[index],
                tie=self._tie[index],
            )
