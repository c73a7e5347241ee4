"""Columns as numpy codes and values: the helpers every reader of a span table shares
(formats, analysis, report), below all of them (``tests/test_layout.py``: the table floor).

- :func:`to_numpy`: a column as one numpy array, copied only where it must be.
- :func:`column_codes` and :func:`combined_codes`: rows numbered by their value (a column's)
  or by their combination of values (several columns'), dense from 0.
- :func:`parent_rows`: each span's parent as a row index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "column_codes",
    "combined_codes",
    "densify",
    "parent_rows",
    "plain_type",
    "to_numpy",
    "values_and_validity",
]


def to_numpy(column: pa.ChunkedArray | pa.Array, dtype: type) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=dtype)


def column_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Per row a code in [0, K), and the K values in code order (a null among them if any
    row is null), so that ``values[codes[i]] == column[i]``."""
    if isinstance(column, pa.ChunkedArray):
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        array = column
    if pa.types.is_dictionary(array.type):
        dictionary = array.dictionary
        indices = array.indices
        if dictionary.null_count == 0 and pc.count_distinct(dictionary).as_py() == len(dictionary):
            # A dictionary of distinct values (as Parquet reads them): the indices are the
            # codes as they lie, no copy (speed: a part of a million spans a time).
            values = dictionary
            remap = None
            if indices.null_count == 0:
                # straight from the buffer: to_numpy took 5 ms for a batch's 256 K indices
                codes, _ = values_and_validity(indices)
            else:  # (category: nulls) the indices as they lie, nulls' slots given a code below
                codes, valid = values_and_validity(indices)
                assert valid is not None  # (the indices hold nulls)
                null_code = len(values)
                values = pa.concat_arrays([values, pa.nulls(1, values.type)])
                wide = np.promote_types(codes.dtype, np.min_scalar_type(null_code))
                return np.where(valid, codes, wide.type(null_code)), values
        else:
            # Re-encode the (small) dictionary: it may repeat a value, or hold a null.
            encoded = pc.dictionary_encode(dictionary, null_encoding="encode")
            remap = to_numpy(encoded.indices, np.int64)
            values = encoded.dictionary
            codes = None
    else:
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        remap = None
        values = encoded.dictionary
        indices = encoded.indices
        codes = None
    if codes is None:
        codes = to_numpy(indices.fill_null(0), np.int64)
        if remap is not None:
            codes = remap[codes] if len(remap) else codes
    if indices.null_count:
        null_code = len(values)
        values = pa.concat_arrays([values, pa.nulls(1, values.type)])
        valid = to_numpy(indices.is_valid(), np.bool_)
        codes = np.where(valid, codes.astype(np.int64, copy=False), null_code)  # (int8 indices)
    return codes, values


def values_and_validity(
    column: pa.Array | pa.ChunkedArray,
) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer (or bool-free fixed-width) column's values, read straight from its buffers
    (anything where null), and its validity (None: no nulls); ``fill_null`` and ``is_valid``
    would each copy the column first."""
    array = column
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    n, offset = len(array), array.offset
    validity, data = array.buffers()[:2]
    dtype = np.dtype(array.type.to_pandas_dtype())
    values = np.frombuffer(data, dtype, count=n, offset=offset * dtype.itemsize)
    if validity is None or array.null_count == 0:
        return values, None
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
    return values, bits[offset : offset + n].view(np.bool_)


def combined_codes(table: pa.Table, columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids over the distinct combinations of ``columns`` (0 .. G-1, per row) and,
    per group, the index of one row holding it."""
    n = table.num_rows
    code: np.ndarray | None = None
    size = 1
    for name in columns:
        column_code, values = column_codes(table.column(name))
        k = max(len(values), 1)
        if code is None:
            code, size = column_code, k
            continue
        if size * k >= 1 << 62:
            code, size = densify(code, size)
        code = code.astype(np.int64, copy=False) * k + column_code
        size *= k
    if code is None:
        code = np.zeros(n, np.int64)
    code, _ = densify(code, size)
    representative = np.empty(code.max() + 1 if n else 0, np.int64)
    representative[code] = np.arange(n)  # any row of a group will do: they share its keys
    return code, representative


def densify(code: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Renumber codes 0 .. G-1 over the values present."""
    if size <= max(4 * len(code), 1 << 22):
        present = np.bincount(code, minlength=size) > 0  # a bincount: faster than a scatter
        remap = np.cumsum(present) - 1
        return remap[code], int(present.sum())
    distinct, inverse = np.unique(code, return_inverse=True)
    return inverse.reshape(-1), len(distinct)


def plain_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def parent_rows(table: pa.Table) -> np.ndarray:
    """For each row, the row index of its parent span in ``table``, or -1 (a root, or a
    parent that is not in the table, drained later or filtered out).

    Span ids are unique within one trace; when they repeat (traces of several processes
    concatenated) a parent is looked up among the spans of its child's own thread, where it
    always is.
    """
    n = table.num_rows
    span_id = to_numpy(table.column("span_id"), np.uint64).view(np.int64)
    parent_column = table.column("parent_id")
    valid = to_numpy(parent_column.is_valid(), np.bool_)
    parent = to_numpy(parent_column.fill_null(0), np.uint64).view(np.int64)
    # Stable argsort: drained span ids come in long ascending runs, which timsort eats fast.
    order = np.argsort(span_id, kind="stable")
    keys = span_id[order]
    if n > 1 and bool((keys[1:] == keys[:-1]).any()):
        distinct = np.unique(keys)
        lane, _ = combined_codes(table, ("rank", "pid", "thread_id"))
        found = np.minimum(np.searchsorted(distinct, parent), len(distinct) - 1)
        valid &= distinct[found] == parent
        span_key = lane * len(distinct) + np.searchsorted(distinct, span_id)
        parent = lane * len(distinct) + found
        order = np.argsort(span_key, kind="stable")
        keys = span_key[order]
    if n == 0:
        return np.zeros(0, np.int64)
    position = np.minimum(np.searchsorted(keys, parent), n - 1)
    hit = valid & (keys[position] == parent)
    return np.where(hit, order[position], -1)
