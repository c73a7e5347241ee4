"""Self time for a span table that does not carry it: the one vectorised implementation.

``drain()`` computes ``self_ns`` and ``wait_ns`` in C as spans become a table
(csrc/hs_selftime.h), and hotspan's own files keep the columns. Every other table (a foreign
Chrome JSON or Perfetto trace, a file written before the columns existed, a recovered flight
file, a table a user built) gets them here. ``wait_ns`` (the time a span's asyncio task
was suspended while the span was its innermost) needs the moments tasks resumed and
suspended, which only the recorder sees: such a table has none, so ``wait_ns`` is 0 and
``self_ns`` follows the rule for sync code: a span's duration minus the time covered by the
union of its children's intervals, children on the same thread (the spans of asyncio tasks
created under it included, which overlap one another), clipped to the span, never negative.
Device rows (another thread id) are not a host span's children for this purpose.
"""

from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SELF_FIELD = pa.field("self_ns", pa.int64(), nullable=False)
WAIT_FIELD = pa.field("wait_ns", pa.int64(), nullable=False)
#: Schema metadata a trace format (Chrome JSON, Perfetto: neither has a column for them)
#: carries for the rows whose ``self_ns`` or ``wait_ns`` a loader could not compute (spans of
#: asyncio tasks): base64 of ``span_id`` (uint64), ``self_ns`` and ``wait_ns`` (int64), little
#: endian, so ``load(export(table))`` gives them back (:func:`note_self_wait`).
SELF_WAIT_KEY = b"hotspan.self_wait"


def self_ns_column(table: pa.Table) -> pa.Array:
    """``self_ns`` of every row of ``table`` (which needs span_id, parent_id, start_ns,
    end_ns and thread_id; pid too when present), as an int64 array.

    O(n log n): the children are sorted by (parent, start) and merged with a running
    maximum of their ends per parent (one ``maximum.accumulate`` over keys that keep the
    parents apart), so overlapping children count once.
    """
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    start = _int64(table, "start_ns")
    end = _int64(table, "end_ns")
    duration = np.maximum(end - start, 0)
    covered = np.zeros(n, np.int64)
    parent_row = pc.index_in(
        table.column("parent_id"), value_set=table.column("span_id").combine_chunks()
    )
    child = np.flatnonzero(pc.is_valid(parent_row).to_numpy(zero_copy_only=False))
    if len(child):
        parent = pc.fill_null(parent_row, 0).to_numpy().astype(np.int64)[child]
        same = _int64(table, "thread_id")[child] == _int64(table, "thread_id")[parent]
        if "pid" in table.column_names:
            same &= _int64(table, "pid")[child] == _int64(table, "pid")[parent]
        same &= child != parent
        child, parent = child[same], parent[same]
        # each child clipped to its parent
        s = np.maximum(start[child], start[parent])
        e = np.minimum(end[child], end[parent])
        keep = e > s
        s, e, parent = s[keep], e[keep], parent[keep]
        covered_by = _union_lengths(parent, s, e)
        if covered_by is not None:
            parents, lengths = covered_by
            covered[parents] = lengths
    return pa.array(np.maximum(duration - covered, 0), pa.int64())


def with_self_ns(table: pa.Table) -> pa.Table:
    """``table`` with ``self_ns`` (computed) and ``wait_ns`` (0: no task's suspensions are
    known) appended where it lacks them, or as it is when it has both; then the values a
    trace format carried for the spans of asyncio tasks (:data:`SELF_WAIT_KEY`) put back."""
    if "self_ns" not in table.column_names:
        table = table.append_column(SELF_FIELD, self_ns_column(table))
    if "wait_ns" not in table.column_names:
        table = table.append_column(
            WAIT_FIELD, pa.array(np.zeros(table.num_rows, np.int64), pa.int64())
        )
    if SELF_WAIT_KEY in (table.schema.metadata or {}):
        table = _apply_self_wait(table)
    return table


def note_self_wait(table: pa.Table) -> pa.Table:
    """``table`` with :data:`SELF_WAIT_KEY` in its metadata for the rows whose ``self_ns`` or
    ``wait_ns`` the rule for sync code would not give back on load (the spans of asyncio
    tasks); as it is when there are none (no column has a wait)."""
    if "wait_ns" not in table.column_names or "self_ns" not in table.column_names:
        return table
    wait = _int64(table, "wait_ns")
    if not wait.any():
        return table
    own = _int64(table, "self_ns")
    recomputed = self_ns_column(table.drop_columns(["self_ns", "wait_ns"])).to_numpy()
    rows = np.flatnonzero((wait != 0) | (own != recomputed))
    ids = table.column("span_id").to_numpy().astype("<u8")[rows]
    blob = b"".join(
        (ids.tobytes(), own[rows].astype("<i8").tobytes(), wait[rows].astype("<i8").tobytes())
    )
    metadata = dict(table.schema.metadata or {})
    metadata[SELF_WAIT_KEY] = base64.b64encode(blob)
    return table.replace_schema_metadata(metadata)


def _apply_self_wait(table: pa.Table) -> pa.Table:
    metadata = dict(table.schema.metadata or {})
    try:
        blob = base64.b64decode(metadata.pop(SELF_WAIT_KEY), validate=True)
    except ValueError:
        blob = b""  # damaged: the computed values stand
    table = table.replace_schema_metadata(metadata or None)
    if not blob or len(blob) % 24:
        return table
    n = len(blob) // 24
    ids = np.frombuffer(blob, "<u8", n)
    own = np.frombuffer(blob, "<i8", n, 8 * n).astype(np.int64)
    wait = np.frombuffer(blob, "<i8", n, 16 * n).astype(np.int64)
    at = pc.index_in(table.column("span_id"), value_set=pa.array(ids, pa.uint64()))
    found = pc.is_valid(at).to_numpy(zero_copy_only=False)
    if not found.any():
        return table
    which = pc.fill_null(at, 0).to_numpy().astype(np.int64)[found]
    self_col, wait_col = _int64(table, "self_ns").copy(), _int64(table, "wait_ns").copy()
    self_col[found] = own[which]
    wait_col[found] = wait[which]
    for field, values in ((SELF_FIELD, self_col), (WAIT_FIELD, wait_col)):
        index = table.schema.get_field_index(field.name)
        table = table.set_column(index, table.schema.field(index), pa.array(values, pa.int64()))
    return table


def _int64(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name)
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    values: np.ndarray = column.to_numpy()
    return values


def _union_lengths(
    parent: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """For intervals [s, e) grouped by parent: each parent and the length of its intervals'
    union."""
    m = len(s)
    if m == 0:
        return None
    order = np.lexsort((s, parent))
    parent, s, e = parent[order], s[order], e[order]
    # The running maximum of the ends seen so far in the same parent, without a loop: ends
    # replaced by their rank (< m + 1) and offset by parent * (m + 1), so one cumulative
    # maximum never carries a value across parents.
    ends_sorted = np.sort(e)
    rank = np.searchsorted(ends_sorted, e)
    running = np.maximum.accumulate(parent * (m + 1) + rank)
    new_group = np.empty(m, np.bool_)
    new_group[0] = True
    new_group[1:] = parent[1:] != parent[:-1]
    previous_end = np.empty(m, np.int64)
    previous_end[0] = np.iinfo(np.int64).min
    previous_end[1:] = ends_sorted[running[:-1] % (m + 1)]
    previous_end[new_group] = np.iinfo(np.int64).min
    # what each interval adds beyond those before it in its group (sorted by start)
    added = np.maximum(e - np.maximum(s, previous_end), 0)
    starts = np.flatnonzero(new_group)
    return parent[starts], np.add.reduceat(added, starts)
