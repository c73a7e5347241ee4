"""CSV: one row a span, a header line, strings quoted (so an empty string and a missing
category stay apart: ``""`` versus nothing). CSV has no place for the schema metadata.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from .._schema import SPAN_SCHEMA
from . import base
from .base import Exporter, Progress


def _plain_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


_CSV_SCHEMA = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in SPAN_SCHEMA])


class CsvExporter(Exporter):
    keeps_metadata = False

    def _write(self, table: pa.Table, path: Path) -> None:
        options = pacsv.WriteOptions(include_header=True, quoting_style="needed")
        with Progress(table.num_rows, f"writing {path.name}") as progress, \
                pacsv.CSVWriter(str(path), _CSV_SCHEMA, write_options=options) as writer:
            for batch in table.to_batches(max_chunksize=base.BATCH_ROWS):
                writer.write_batch(pa.RecordBatch.from_arrays(
                    [column.cast(field.type) for column, field in zip(batch.columns, _CSV_SCHEMA)],
                    schema=_CSV_SCHEMA,
                ))
                progress.advance(batch.num_rows)

    def _read(self, path: Path) -> pa.Table:
        convert = pacsv.ConvertOptions(
            column_types=_CSV_SCHEMA,
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            include_columns=_CSV_SCHEMA.names,
        )
        with pacsv.open_csv(path, convert_options=convert) as reader:
            return reader.read_all()
