"""Lanes: spans of interleaved asyncio tasks placed on extra tracks of their thread.

asyncio tasks run on one OS thread, and each task's spans form their own tree, so on the
thread's track the trees of two tasks overlap in time without nesting. Perfetto's trace
processor keeps one stack of slices per track: it drops overlapping Chrome JSON complete
events (stat ``slice_drop_overlapping_complete_event``) and nests a ``.pftrace`` wrongly.

:func:`assign_lanes` moves such trees, whole, to extra tracks ("lanes") of the same thread,
before a trace format encodes the table: each lane is a synthetic thread id with the same
thread name, and the mapping ``{synthetic: real thread id}`` travels in the table's schema
metadata under :data:`LANES_KEY`, which both trace formats carry. :func:`restore_lanes`
maps the ids back on load, so ``load(export(table))`` gives back the table's thread ids.

A table without overlap (the normal case) passes through unchanged, at the cost of a
vectorised check per thread.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._schema import META_TASKS, META_VERSION

__all__ = ["LANES_KEY", "LANE_BASE", "assign_lanes", "may_overlap", "restore_lanes"]

#: Schema metadata key: JSON ``{"synthetic thread id": real thread id}``.
LANES_KEY = b"hotspan.lanes"
#: First synthetic thread id: above any Linux thread id (at most 2**22) and within int32,
#: so every trace format (Chrome JSON tids are uint32) keeps it as it is.
LANE_BASE = 0x7F000000


def intervals_nest(start: np.ndarray, end: np.ndarray) -> bool:
    """Whether the intervals ``[start, end)`` of one thread form a laminar family (any two
    either nest or are disjoint; touching ends are disjoint), as Perfetto's stack needs.

    Vectorised: in the time-ordered sequence of opens and closes (closes first at equal
    times, inner before outer), the intervals nest exactly when each one's close brings
    the open count back to what it was just before its open. Instants cannot overlap
    anything (a point either lies inside an interval or touches it), so they are left out.

    Cost: a few stable sorts, which are near-linear here because a drained table is in end
    order per thread (timsort finds the runs), so starts are nearly sorted too; ties that
    need the second key fall back to lexsort. No Python loop over spans.
    """
    keep = end > start
    if not keep.all():
        start, end = start[keep], end[keep]
    n = len(start)
    if n < 2:
        return True
    rank = np.arange(n)
    # Preorder: by start, the outer (later-ending) first at equal starts.
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    if np.any((s[1:] == s[:-1]) & (e[1:] > e[:-1])):
        order = np.lexsort((-end, start))
        s, e = start[order], end[order]
    # Closes: by end, the later-opened (inner) first at equal ends; in preorder ranks.
    preorder_rank = np.empty(n, np.int64)
    preorder_rank[order] = rank
    close_order = preorder_rank[np.argsort(end, kind="stable")]
    close_end = e[close_order]
    if np.any((close_end[1:] == close_end[:-1]) & (close_order[1:] > close_order[:-1])):
        close_order = np.lexsort((-rank, e))
        close_end = e[close_order]
    # One stable merge of the two sorted sequences, closes first at equal times: a
    # start's merged position counts the closes at or before it, a close's the opens
    # strictly before it.
    merged = np.argsort(np.concatenate((close_end, s)), kind="stable")
    position = np.empty(2 * n, np.int64)
    position[merged] = np.arange(2 * n)
    # Open count just before each open: opens before it minus closes so far.
    before_open = rank - (position[n:] - rank)
    # Open count just after each close: opens before it minus closes up to it.
    after_close = np.empty(n, np.int64)
    after_close[close_order] = (position[:n] - rank) - (rank + 1)
    return bool(np.array_equal(before_open, after_close))


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Dense codes of a column's values (0..k-1) and k."""
    low, high = pc.min_max(column).values()
    if low == high:  # one process, one rank: the usual case, and no hashing needed
        return np.zeros(len(column), np.int64), 1
    encoded = pc.dictionary_encode(column).combine_chunks()
    return encoded.indices.to_numpy(), len(encoded.dictionary)


def _thread_groups(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Row order grouped by (pid, rank, thread_id), and where each group starts."""
    pid, pids = _codes(table.column("pid"))
    rank, ranks = _codes(table.column("rank"))
    tid, tids = _codes(table.column("thread_id"))
    if pids * ranks * tids <= 1 << 16:
        # One small code per thread: numpy's stable sort of 16-bit keys is a radix sort,
        # linear where a 3-key lexsort of the 64-bit columns is not.
        thread = ((pid.astype(np.int64) * ranks + rank) * tids + tid).astype(np.uint16)
        order = np.argsort(thread, kind="stable")
        sorted_thread = thread[order]
        change = np.flatnonzero(sorted_thread[1:] != sorted_thread[:-1]) + 1
    else:
        order = np.lexsort((tid, rank, pid))
        p, r, t = pid[order], rank[order], tid[order]
        change = np.flatnonzero((p[1:] != p[:-1]) | (r[1:] != r[:-1]) | (t[1:] != t[:-1])) + 1
    return order, np.concatenate(([0], change, [len(order)]))


def _walk(
    start: np.ndarray,
    end: np.ndarray,
    depth: np.ndarray,
    span_id: np.ndarray,
    parent_id: np.ndarray,
    has_parent: np.ndarray,
) -> np.ndarray:
    """Lane (0 = the thread's own track) of each span of one thread.

    Spans in Perfetto's order (by start, outer first). A span stays on its parent's lane
    when the parent is the innermost span still open there, so each lane shows the
    table's own nesting; otherwise it starts a tree on the first lane whose last tree has
    ended (greedy interval partitioning), or on a new lane. A Python loop, but it only runs
    for a thread whose spans overlap.
    """
    order = np.lexsort((depth, -end, start))
    lane_of: dict[int, int] = {}
    stacks: list[list[tuple[int, int]]] = []  # per lane: (end, span_id) of the open spans
    lanes = np.zeros(len(start), np.int64)
    for i in order.tolist():
        s, e, sid = int(start[i]), int(end[i]), int(span_id[i])
        lane = lane_of.get(int(parent_id[i])) if has_parent[i] else None
        if lane is not None:
            stack = stacks[lane]
            parent = int(parent_id[i])
            while stack and stack[-1][1] != parent and stack[-1][0] <= s:
                stack.pop()
            if not (stack and stack[-1][1] == parent and e <= stack[-1][0]):
                lane = None
        if lane is None:
            for k, stack in enumerate(stacks):
                while stack and stack[-1][0] <= s:
                    stack.pop()
                if not stack:
                    lane = k
                    break
            else:
                lane = len(stacks)
                stacks.append([])
        stacks[lane].append((e, sid))
        lane_of[sid] = lane
        lanes[i] = lane
    return lanes


def may_overlap(table: pa.Table) -> bool:
    """Whether ``table`` can hold span trees that overlap on a thread. A table hotspan
    recorded says so in its metadata (the core notes spans run in asyncio tasks): one
    without tasks nests on every thread, and its export skips the search (it costs sorts,
    ~0.1 s a million spans). A foreign table, or one whose metadata was lost (CSV), is
    searched."""
    meta = table.schema.metadata or {}
    return META_TASKS in meta or META_VERSION not in meta


def assign_lanes(table: pa.Table) -> tuple[pa.Table, dict[int, int]]:
    """``table`` with the span trees that overlap on a thread moved to extra lanes, and
    the mapping ``{synthetic thread id: real thread id}`` (empty, and the table returned
    as it is, when nothing overlaps). The mapping is also in the schema metadata."""
    if LANES_KEY in (table.schema.metadata or {}):
        table = restore_lanes(table)  # a table laned before: start from its real threads
    if table.num_rows < 2 or not may_overlap(table):
        return table, {}
    start = table.column("start_ns").to_numpy()
    end = table.column("end_ns").to_numpy()
    order, bounds = _thread_groups(table)
    overlapping = [
        order[a:b]
        for a, b in zip(bounds[:-1], bounds[1:])
        if not intervals_nest(start[order[a:b]], end[order[a:b]])
    ]
    if not overlapping:
        return table, {}

    tid = table.column("thread_id").to_numpy().copy()
    depth = table.column("depth").to_numpy()
    span_id = table.column("span_id").to_numpy()
    parent = table.column("parent_id")
    has_parent = parent.is_valid().to_numpy(zero_copy_only=False)
    parent_id = parent.fill_null(0).to_numpy()
    used = set(np.unique(tid).tolist())
    mapping: dict[int, int] = {}
    synthetic = LANE_BASE
    for rows in overlapping:
        lanes = _walk(
            start[rows], end[rows], depth[rows], span_id[rows], parent_id[rows], has_parent[rows]
        )
        real = int(tid[rows[0]])
        for lane in range(1, int(lanes.max()) + 1):
            while synthetic in used:  # unique within the trace, even next to real ids
                synthetic += 1
            used.add(synthetic)
            mapping[synthetic] = real
            tid[rows[lanes == lane]] = synthetic
    metadata = dict(table.schema.metadata or {})
    metadata[LANES_KEY] = json.dumps({str(k): v for k, v in mapping.items()}).encode()
    index = table.schema.get_field_index("thread_id")
    column = pa.array(tid, table.schema.field(index).type)
    table = table.set_column(index, table.schema.field(index), column).replace_schema_metadata(
        metadata
    )
    return table, mapping


def restore_lanes(table: pa.Table) -> pa.Table:
    """``table`` with the synthetic lane thread ids mapped back to the real ones and the
    :data:`LANES_KEY` metadata removed (the table as it is without that key)."""
    metadata = dict(table.schema.metadata or {})
    raw = metadata.pop(LANES_KEY, None)
    if raw is None:
        return table
    try:
        mapping = {int(k): int(v) for k, v in json.loads(raw).items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"bad {LANES_KEY.decode()} metadata: {exc}") from exc
    index = table.schema.get_field_index("thread_id")
    if mapping and table.num_rows:
        tid = table.column(index).to_numpy()
        keys = np.array(sorted(mapping), np.int64)
        values = np.array([mapping[k] for k in keys.tolist()], np.int64)
        at = np.minimum(np.searchsorted(keys, tid), len(keys) - 1)
        hit = keys[at] == tid
        tid = np.where(hit, values[at], tid)
        table = table.set_column(
            index, table.schema.field(index), pa.array(tid, table.schema.field(index).type)
        )
    return table.replace_schema_metadata(metadata or None)
