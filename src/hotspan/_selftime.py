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

from ._span_tree import SpanIndex, self_times

SELF_FIELD = pa.field("self_ns", pa.int64(), nullable=False)
WAIT_FIELD = pa.field("wait_ns", pa.int64(), nullable=False)
#: Schema metadata a trace format (Chrome JSON, Perfetto: neither has a column for them)
#: carries for the rows whose ``self_ns`` or ``wait_ns`` a loader could not compute (spans of
#: asyncio tasks): base64 of ``span_id`` (uint64), ``self_ns`` and ``wait_ns`` (int64), little
#: endian, so ``load(export(table))`` gives them back (:func:`note_self_wait`).
SELF_WAIT_KEY = b"hotspan.self_wait"


class SpanTree:
    """A table's parent links worked out once for every pass that follows them (self time
    here, the schema's rules in ``formats._base.check_span_rules``): :func:`tree_columns`
    and the :class:`~hotspan._span_tree.SpanIndex` of its ids, each computed on first use.

    A loader makes one of the table it decoded and hands it to both passes, the second
    over the conformed table (:meth:`rebased`)."""

    __slots__ = ("_table", "_columns", "_index")

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._index: SpanIndex | None = None

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """span_id, parent_id and has_parent (see :func:`tree_columns`)."""
        if self._columns is None:
            self._columns = tree_columns(self._table)
        return self._columns

    @property
    def index(self) -> SpanIndex:
        """The row of each span id."""
        if self._index is None:
            self._index = SpanIndex(self.columns[0])
        return self._index

    def rebased(self, table: pa.Table) -> "SpanTree":
        """This tree, now over ``table`` (the one it was made of, conformed: cast, the same
        rows), where that gives the same :func:`tree_columns`: when the ids and parents
        were integers already (string ids are numbered by row here, parsed as numbers by a
        cast); else a new tree of ``table``. The table it was made of is let go."""
        ids, parents = (self._table.schema.field(n).type for n in ("span_id", "parent_id"))
        if not (
            table.num_rows == self._table.num_rows
            and pa.types.is_integer(ids)
            and pa.types.is_integer(parents)
        ):
            return SpanTree(table)
        self._table = table
        return self


def self_ns_column(table: pa.Table, tree: SpanTree | None = None) -> pa.Array:
    """``self_ns`` of every row of ``table`` (which needs span_id, parent_id, start_ns,
    end_ns and thread_id; pid too when present), as an int64 array. ``tree``: the table's
    :class:`SpanTree`, when the caller has one to share.

    One pass over the rows in start order (``_span_tree``): each parent's children
    are merged as they come, so overlapping children count once. A loader's rows are in
    that order already (per thread by start time); others (a drained table is per thread
    in end order) are visited through their start order (a sort).
    """
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    tree = tree or SpanTree(table)
    span_id, parent_id, has_parent = tree.columns
    pid = _int64(table, "pid") if "pid" in table.column_names else None
    start = _int64(table, "start_ns")
    columns = (start, _int64(table, "end_ns"), span_id, parent_id, has_parent)
    thread = _int64(table, "thread_id")
    values = self_times(*columns, thread, pid, index=tree.index)
    if values is None:  # some parent's children not by start time: visit in start order
        order = np.argsort(start, kind="stable")
        values = self_times(*columns, thread, pid, order, index=tree.index)
    assert values is not None  # in start order, every parent's children are
    return pa.array(values, pa.int64())


def tree_columns(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """span_id and parent_id as uint64 (the bits of signed ids: equal ids stay equal), and
    per row 1 where parent_id is given (where it is not, parent_id holds any value). Ids of another type (strings, say) are numbered by
    the row of their first occurrence."""
    ids, parents = table.column("span_id"), table.column("parent_id")
    if not (pa.types.is_integer(ids.type) and pa.types.is_integer(parents.type)):
        parents = pc.index_in(parents, value_set=ids.combine_chunks())
        ids = pc.index_in(ids, value_set=ids.combine_chunks())
    ids = ids.cast(pa.uint64(), safe=False)
    parents = parents.cast(pa.uint64(), safe=False)
    if parents.null_count and parents.num_chunks == 1:
        # the validity bits unpacked (0.05 ms a million rows; is_valid() made a boolean
        # array and to_numpy() another, ~1 ms)
        chunk = parents.chunk(0)
        bits = np.frombuffer(chunk.buffers()[0], np.uint8)
        has_parent = np.unpackbits(bits, count=chunk.offset + len(chunk), bitorder="little")
        has_parent = has_parent[chunk.offset :]
    elif parents.null_count:
        has_parent = parents.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    else:
        has_parent = np.ones(len(parents), np.uint8)
    return (
        _uint64_values(ids, ids.null_count == 0),
        _uint64_values(parents, True),
        np.ascontiguousarray(has_parent),
    )


def _uint64_values(column: pa.ChunkedArray, any_under_nulls: bool) -> np.ndarray:
    """A uint64 column as one contiguous array, nulls as 0; with ``any_under_nulls`` (a
    column without nulls, or parents: what lies under a null parent is never read, as
    ``has_parent`` is 0 there) a single chunk's own values buffer: no copy, no fresh pages."""
    if any_under_nulls and column.num_chunks == 1:
        chunk = column.chunk(0)
        values = chunk.buffers()[1]
        if values is not None:
            out: np.ndarray = np.frombuffer(values, np.uint64, len(chunk), chunk.offset * 8)
            return out
    return np.ascontiguousarray(column.fill_null(0).to_numpy())


def with_self_ns(table: pa.Table, tree: SpanTree | None = None) -> pa.Table:
    """``table`` with ``self_ns`` (computed) and ``wait_ns`` (0: no task's suspensions are
    known) appended where it lacks them, or as it is when it has both; then the values a
    trace format carried for the spans of asyncio tasks (:data:`SELF_WAIT_KEY`) put back.
    ``tree``: the table's :class:`SpanTree`, when the caller has one to share."""
    if "self_ns" not in table.column_names:
        table = table.append_column(SELF_FIELD, self_ns_column(table, tree))
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
    """A column as one contiguous int64 array; a null as 0 (a table with nulls where the
    schema allows none is refused after this, by the caller's schema check, naming the
    column)."""
    column = table.column(name)
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    if column.null_count:
        column = column.fill_null(0)
    values: np.ndarray = np.ascontiguousarray(column.to_numpy())
    return values
