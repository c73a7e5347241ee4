"""Span-table columns as the trace codecs take them: contiguous numpy arrays, validity as
uint8, strings as int32 codes into one dictionary. Shared by the Chrome JSON and Perfetto
writers."""

from __future__ import annotations

import re

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._collective_match import collective_pattern, match_instances
from .._columns import values_and_validity

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "bool_values",
    "collective_flows",
    "column_values",
    "device_flows",
    "dictionary_codes",
    "nullable_values",
    "thread_table",
    "trace_flows",
]


def column_values(table: pa.Table, name: str, dtype: npt.DTypeLike) -> np.ndarray:
    """A non-null column as one contiguous array (no copy for a single chunk)."""
    column = table.column(name)
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return np.ascontiguousarray(array.to_numpy(zero_copy_only=False), dtype)


def bool_values(table: pa.Table, name: str) -> np.ndarray:
    """A non-null boolean column as uint8 (1: true): its bitmap unpacked."""
    column = table.column(name)
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if array.null_count or not pa.types.is_boolean(array.type):
        return np.ascontiguousarray(array.to_numpy(zero_copy_only=False), np.bool_).view(np.uint8)
    start, n = array.offset, len(array)
    bits = np.unpackbits(
        np.frombuffer(array.buffers()[1], np.uint8), count=start + n, bitorder="little"
    )
    return np.ascontiguousarray(bits[start:])


def nullable_values(
    table: pa.Table, name: str, dtype: npt.DTypeLike
) -> tuple[np.ndarray, np.ndarray]:
    """A nullable column's values and validity (uint8, 1 where valid). Where a row is null
    its value is whatever the column's buffer holds there (0 unless the buffer is shared):
    the codecs read a value only where it is valid."""
    column = table.column(name)
    if column.null_count == 0:
        return column_values(table, name, dtype), np.ones(table.num_rows, np.uint8)
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if array.type == pa.from_numpy_dtype(np.dtype(dtype)):
        # One chunk of the right type: its value buffer as it is, its validity bitmap
        # unpacked (no pass to fill the nulls, no copy of the values)
        values, valid = values_and_validity(array)
        assert valid is not None  # the column has nulls
        return values, valid.view(np.uint8)
    values = np.ascontiguousarray(pc.fill_null(array, 0).to_numpy(), dtype)
    valid = array.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    return values, np.ascontiguousarray(valid)


def dictionary_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Per-row int32 codes (-1 for null) into one dictionary of distinct strings."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    column = pa.table({"c": column}).unify_dictionaries().column("c")
    if column.num_chunks == 0:
        return np.empty(0, np.int32), []
    dictionary = column.chunk(0).dictionary.to_pylist()
    # indices without nulls (names, thread names): their buffer as it is, no fill_null copy
    codes = [
        (pc.fill_null(chunk.indices, -1) if chunk.indices.null_count else chunk.indices).to_numpy(
            zero_copy_only=False
        )
        for chunk in column.chunks
    ]
    return np.ascontiguousarray(
        np.concatenate(codes) if len(codes) > 1 else codes[0], np.int32
    ), dictionary


def thread_table(
    codes: np.ndarray, keys: list[Any], name_rows: dict[tuple[int, int], int]
) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """From a codec's ``thread_codes`` (per-row thread codes, the (pid, rank, tid) keys,
    rows per (thread, name code)): per row its thread's index in trace order (by rank, then
    pid, then thread id), the keys in that order, and each thread's own name: the one most
    of its rows carry (ties: the smaller code)."""
    order = sorted(range(len(keys)), key=lambda k: (keys[k][1], keys[k][0], keys[k][2]))
    remap = np.empty(len(keys), np.int32)
    remap[order] = np.arange(len(keys), dtype=np.int32)
    best: dict[int, tuple[int, int]] = {}
    for (thread, name), rows in name_rows.items():
        if thread not in best or (-rows, name) < (-best[thread][0], best[thread][1]):
            best[thread] = (rows, name)
    own = np.zeros(len(keys), np.int32)
    for thread, (_, name) in best.items():
        own[remap[thread]] = name
    # threads already in trace order (the usual case): the codes as they are; else np.take
    # (a plain gather, about twice as fast as fancy indexing)
    if len(codes) and (remap != np.arange(len(keys))).any():
        codes = np.take(remap, codes)
    row_thread = np.ascontiguousarray(codes, np.int32)
    return row_thread, [keys[k] for k in order], own


def device_flows(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The arrows from host spans to their device rows, for the trace writers: per row the
    id of the flow that starts at it (``flow_out``) and that ends at it (``flow_in``), 0 for
    none. A device row is one with a negative ``thread_id`` (a device stream's track, see
    ``hotspan._devices.cuda``) whose parent, in the table, has a non-negative one. Flow ids
    are 1, 2, ... in row order (small: exact in every reader, JSON numbers included). A
    host span with several device rows starts the flow of the last one. Loading gives no
    row for a flow: ``parent_id`` already holds it."""
    n = table.num_rows
    flow_out = np.zeros(n, np.uint64)
    flow_in = np.zeros(n, np.uint64)
    if n == 0:
        return flow_out, flow_in
    tid = column_values(table, "thread_id", np.int64)
    device = np.flatnonzero(tid < 0)
    if len(device) == 0:  # the usual table: one vectorised compare
        return flow_out, flow_in
    span_id = column_values(table, "span_id", np.uint64)
    parent_id, has_parent = nullable_values(table, "parent_id", np.uint64)
    device = device[has_parent[device] != 0]
    order = np.argsort(span_id, kind="stable")
    keys = span_id[order]
    at = np.minimum(np.searchsorted(keys, parent_id[device]), n - 1)
    found = keys[at] == parent_id[device]
    device, parent = device[found], order[at[found]]
    host = tid[parent] >= 0
    device, parent = device[host], parent[host]
    ids = np.arange(1, len(device) + 1, dtype=np.uint64)
    flow_in[device] = ids
    flow_out[parent] = ids
    return flow_out, flow_in


def trace_flows(table: pa.Table, *, chain_in: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """``device_flows`` and then ``collective_flows`` (``chain_in`` as there), or None when
    the table has no flow: most tables, which have no device row (no negative
    ``thread_id``) and one rank, are told apart by two passes over two columns, with no
    per-row array allocated (0.2 ms a million spans; two zeroed arrays of 8 bytes a row and
    a pass over one of them to find it empty took 1.2 ms, before the export's first byte)."""
    if table.num_rows == 0:
        return None
    tid = column_values(table, "thread_id", np.int64)
    rank = column_values(table, "rank", np.int32)
    if tid.min() >= 0 and rank.min() == rank.max():
        return None  # device_flows needs a negative thread id, collective_flows two ranks
    flow_out, flow_in = device_flows(table)
    collective_flows(table, flow_out, flow_in, chain_in=chain_in)
    # every flow ends somewhere: a row with flow_in
    return (flow_out, flow_in) if flow_in.any() else None


def collective_flows(
    table: pa.Table,
    flow_out: np.ndarray,
    flow_in: np.ndarray,
    category: str = "comms",
    *,
    chain_in: bool = False,
) -> None:
    """Add to ``flow_out``/``flow_in`` (``device_flows``') the flows that link the spans of
    one collective instance across ranks, matched as ``hotspan.collectives`` matches them
    (the k-th span of a name whose category ends in ``comms`` on each rank, or the k-th
    collective of a process group, ``comms:GROUP``): per instance
    one flow id, on every span of it but the last to start as ``flow_out`` and on the last
    as ``flow_in``, so a viewer draws a chain from the first arrival to the last (in
    Perfetto's protobuf ``flow_ids`` continue a flow). ``chain_in``: the spans inside the
    chain get ``flow_in`` too (Chrome JSON, where an event continues a flow by both ends of
    one ``bind_id``). A span that already starts or ends a flow (a device row's host span)
    keeps it: the chain skips it. Nothing happens for a table of one rank or without
    collectives (looks at the category dictionary and the rank column)."""
    n = table.num_rows
    if n < 2:
        return
    # one rank first: the cheap test, and the case of most exports
    rank = column_values(table, "rank", np.int32)
    if rank.min() == rank.max() or not _has_collectives(table, category):
        return
    # The collectives alone, in one order whatever the table's (spans of one rank that start
    # together are matched in span id order), matched as the ranks analysis matches them
    # (hotspan._collective_match: the category's last part is category or category:GROUP).
    categories = table.column("category")
    if pa.types.is_dictionary(categories.type):
        categories = categories.cast(categories.type.value_type)
    mask = pc.match_substring_regex(categories, collective_pattern(category)).fill_null(False)
    picked = np.flatnonzero(mask.to_numpy(zero_copy_only=False))  # rows of the table
    start = column_values(table, "start_ns", np.int64)
    span_id = column_values(table, "span_id", np.uint64)
    picked = picked[np.lexsort((span_id[picked], start[picked]))]
    spans = _instance_spans(table.take(pa.array(picked)), category)
    if not len(spans["span_id"]):
        return
    # back to the table's rows, by span id among the collectives (and the same rank)
    order = np.argsort(span_id[picked], kind="stable")
    at = np.minimum(np.searchsorted(span_id[picked][order], spans["span_id"]), len(picked) - 1)
    row = picked[order[at]]
    known = (span_id[row] == spans["span_id"]) & (rank[row] == spans["rank"])
    known &= (flow_out[row] == 0) & (flow_in[row] == 0)  # a device row's host span: kept
    # per instance, its spans in the order they started (ties: by rank)
    chain = np.lexsort((spans["rank"], spans["start_ns"], spans["instance"]))
    chain = chain[known[chain]]
    instance, row = spans["instance"][chain], row[chain]
    if not len(chain):
        return
    starts = np.flatnonzero(np.r_[True, instance[1:] != instance[:-1]])
    counts = np.diff(np.r_[starts, len(chain)])
    many = counts >= 2  # an instance of one span here links nothing
    first_id = int(max(flow_out.max(initial=0), flow_in.max(initial=0))) + 1
    # ids in the order of the instances' first arrivals: the same whatever the rows' order
    lead = row[starts[many]]
    by_time = np.lexsort((span_id[lead], rank[lead], start[lead]))
    numbers = np.empty(len(lead), np.uint64)
    numbers[by_time] = np.arange(first_id, first_id + len(lead), dtype=np.uint64)
    per_instance = np.zeros(len(starts), np.uint64)
    per_instance[many] = numbers
    ids = np.repeat(per_instance, counts)
    linked = ids != 0
    first = np.zeros(len(chain), bool)
    first[starts] = True
    last = np.zeros(len(chain), bool)
    last[starts + counts - 1] = True
    out_rows = linked & ~last
    in_rows = linked & (last | (~first if chain_in else False))
    flow_out[row[out_rows]] = ids[out_rows]
    flow_in[row[in_rows]] = ids[in_rows]


def _has_collectives(table: pa.Table, category: str) -> bool:
    """Whether a category of ``table`` ends in ``category`` (its dictionary, or its values)."""
    column = table.column("category")
    if pa.types.is_dictionary(column.type):
        values: set[str] = set()
        for chunk in column.chunks:
            values.update(v for v in chunk.dictionary.to_pylist() if v is not None)
    else:
        values = set(pc.unique(column).to_pylist()) - {None}
    pattern = re.compile(collective_pattern(category))
    return any(pattern.search(v) for v in values)


def _instance_spans(collectives: pa.Table, category: str) -> dict[str, np.ndarray]:
    """The matched spans of ``collectives`` (rows in start order): ``span_id``, ``rank``,
    ``start_ns`` and ``instance`` (a number per collective instance), rows by (instance,
    rank)."""
    names, name_values = dictionary_codes(collectives.column("name"))
    cats, cat_values = dictionary_codes(collectives.column("category"))
    values: list[str | None] = [*name_values, *cat_values, None]
    null = len(values) - 1
    name_codes = np.where(names >= 0, names, null)
    cat_codes = np.where(cats >= 0, cats + len(name_values), null)
    rank = column_values(collectives, "rank", np.int64)
    start = column_values(collectives, "start_ns", np.int64)
    found = match_instances(name_codes, cat_codes, rank, start, values, category)
    keep, instance = found.instances()
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((rank[rows], instance[rows]))]
    return {
        "span_id": column_values(collectives, "span_id", np.uint64)[rows],
        "rank": rank[rows],
        "start_ns": start[rows],
        "instance": instance[rows],
    }
