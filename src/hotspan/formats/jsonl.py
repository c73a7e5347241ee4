"""JSON Lines: one span a line, a JSON object with the schema's columns, as log pipelines
and ``jq`` expect (``jq 'select(.duration_ns > 1e6) | .name' trace.jsonl``).

Lossless: integers are written as JSON integers (exact, span ids included: JSON itself has
no limit, only JavaScript's doubles do), a missing value is ``null`` and an empty string
``""``. Like CSV it has no place for the schema metadata.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson

from .._schema import SPAN_SCHEMA
from . import base
from .base import Exporter, Progress


def _plain_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


#: What a line holds: the span columns as plain (not dictionary-encoded) types.
JSONL_SCHEMA = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in SPAN_SCHEMA])


class JsonlExporter(Exporter):
    keeps_metadata = False

    def _write(self, table: pa.Table, path: Path) -> None:
        names = JSONL_SCHEMA.names
        encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        with Progress(table.num_rows, f"writing {path.name}") as progress, \
                open(path, "w", encoding="utf-8", newline="\n") as out:
            for batch in table.select(names).to_batches(max_chunksize=base.BATCH_ROWS):
                # Column by column to Python values (dictionaries decoded), then a line a row.
                columns = [column.to_pylist() for column in batch.columns]
                out.writelines(encode(dict(zip(names, row))) + "\n" for row in zip(*columns))
                progress.advance(batch.num_rows)

    def _read(self, path: Path) -> pa.Table:
        if path.stat().st_size == 0:
            return JSONL_SCHEMA.empty_table()
        options = pajson.ParseOptions(explicit_schema=JSONL_SCHEMA, unexpected_field_behavior="ignore",
                                      newlines_in_values=False)
        return pajson.read_json(path, parse_options=options)
