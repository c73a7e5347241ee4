"""JSON Lines: one span a line, a JSON object with the schema's columns, as log pipelines
and ``jq`` expect (``jq 'select(.duration_ns > 1e6) | .name' trace.jsonl``).

Lossless: integers are written as JSON integers (exact, span ids included: JSON itself has
no limit, only JavaScript's doubles do), a missing value is ``null`` and an empty string
``""``. Like CSV it has no place for the schema metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from .._schema import SPAN_SCHEMA
from . import _base as base
from ._base import (
    MISSING_PARENTS,
    Exporter,
    Progress,
    missing_parents,
    note_skipped,
    read_line_blocks,
)

__all__ = ["JSONL_SCHEMA", "JsonlExporter", "SPANS_KEY"]


def _plain_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


#: What a line holds: the span columns as plain (not dictionary-encoded) types.
JSONL_SCHEMA = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in SPAN_SCHEMA])


def _json_values(column: pa.Array) -> pa.Array:
    """Each value of ``column`` as JSON text (``null`` for a missing one), computed by
    column: numbers by Arrow's own formatting, strings escaped once per distinct value
    (names repeat millions of times; their dictionary holds a few hundred)."""
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.string()).fill_null("null")
    if pa.types.is_boolean(column.type):
        return pc.if_else(column, "true", "false").fill_null("null")
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    escaped = pa.array(
        [json.dumps(v, ensure_ascii=False) for v in encoded.dictionary.to_pylist()], pa.string()
    )
    return escaped.take(encoded.indices).fill_null("null")


def _lines(batch: pa.RecordBatch) -> bytes:
    """The batch as JSON lines, built column-wise with Arrow kernels (a Python loop over rows
    writes some 30 thousand spans a second; this, millions)."""
    pieces: list[Any] = []
    for i, name in enumerate(JSONL_SCHEMA.names):
        pieces.append(("{" if i == 0 else ",") + json.dumps(name) + ":")
        pieces.append(_json_values(batch.column(i)))
    pieces.append("}\n")
    lines = pc.binary_join_element_wise(*pieces, "")
    # The lines end to end are the string array's data buffer between its first and last offsets.
    offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, lines.offset * 4)
    return lines.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]] if len(lines) else b""


#: The key of the first line that holds the file's span count.
SPANS_KEY = "hotspan.spans"


def _spans_written(path: Path) -> int | None:
    """The span count the first line gives (None: it gives none), read from that line alone."""
    with open(path, "rb") as f:
        line = f.readline(1 << 20)
    if SPANS_KEY.encode() not in line:
        return None
    try:
        value = json.loads(line).get(SPANS_KEY)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class JsonlExporter(Exporter):
    keeps_metadata = False

    def _write(self, table: pa.Table, path: Path) -> None:
        with Progress(table.num_rows, f"writing {path.name}") as progress, open(path, "wb") as out:
            first = True
            for batch in table.select(JSONL_SCHEMA.names).to_batches(max_chunksize=base.BATCH_ROWS):
                text = _lines(batch)
                if first and text:
                    # The first line also says how many spans the file holds (one key more
                    # there, which jq and DataFrame readers take as a mostly-null column): a
                    # load of a file cut at a line's end, or with lines cut out, says how many.
                    end = text.index(b"}\n")
                    text = (
                        text[:end] + b',"%s":%d' % (SPANS_KEY.encode(), table.num_rows) + text[end:]
                    )
                    first = False
                out.write(text)
                progress.advance(batch.num_rows)

    def _read(self, path: Path) -> pa.Table:
        if path.stat().st_size == 0:
            return JSONL_SCHEMA.empty_table()
        options = pajson.ParseOptions(
            explicit_schema=JSONL_SCHEMA,
            unexpected_field_behavior="ignore",
            newlines_in_values=False,
        )
        # Streamed a block at a time, each block's strings dictionary-encoded as it comes: a
        # load peaks near the table's own size, not at the plain strings of the whole file.
        # Mapped, not read (the bytes stay in the page cache), so that a second read with
        # blocks as large as the longest line (a 3 MB span name) costs no copy.
        with pa.memory_map(str(path), "r") as source:
            data = source.read_buffer()

        def open_reader(block_size: int | None) -> Any:
            return pajson.open_json(
                pa.BufferReader(data),
                read_options=pajson.ReadOptions(block_size=block_size) if block_size else None,
                parse_options=options,
            )

        table = read_line_blocks(open_reader, data, JSONL_SCHEMA)
        # pyarrow's JSON reader passes invalid UTF-8 inside strings through: checked here,
        # or the damage surfaces later as a UnicodeDecodeError far from the file's name.
        table.validate(full=True)
        written = _spans_written(path)
        if written is not None:
            missing = {
                "span(s) missing: the file was written with more (lines cut out?)": written
                - table.num_rows
            }
        else:  # a file from elsewhere (or whose first line is gone): lines cut out are seen
            # through the spans that name them as their parent
            missing = {MISSING_PARENTS: missing_parents(table)}
        return note_skipped(table, path, missing)
