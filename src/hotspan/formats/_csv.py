"""CSV: one row a span, a header line, strings quoted (so an empty string and a missing
category stay apart: ``""`` versus nothing). CSV has no place for the schema metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from .._schema import SPAN_SCHEMA
from . import _base as base
from ._base import (
    DERIVED_COLUMNS,
    MISSING_PARENTS,
    Exporter,
    Progress,
    TraceFileError,
    missing_parents,
    note_skipped,
    read_line_blocks,
)

__all__ = ["CsvExporter", "INCOMPLETE_LAST_ROW"]


#: The reason said for a file that ends mid-row (``hotspan.skipped_on_load``'s key).
INCOMPLETE_LAST_ROW = (
    "incomplete last row (the file ends mid-row: truncated? "
    "any rows that were after the cut cannot be counted)"
)


def _plain_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


_CSV_SCHEMA = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in SPAN_SCHEMA])


class CsvExporter(Exporter):
    keeps_metadata = False

    def _write(self, table: pa.Table, path: Path) -> None:
        options = pacsv.WriteOptions(include_header=True, quoting_style="needed")
        with (
            Progress(table.num_rows, f"writing {path.name}") as progress,
            pacsv.CSVWriter(str(path), _CSV_SCHEMA, write_options=options) as writer,
        ):
            for batch in table.to_batches(max_chunksize=base.BATCH_ROWS):
                writer.write_batch(
                    pa.RecordBatch.from_arrays(
                        [
                            column.cast(field.type)
                            for column, field in zip(batch.columns, _CSV_SCHEMA)
                        ],
                        schema=_CSV_SCHEMA,
                    )
                )
                progress.advance(batch.num_rows)

    def _read(self, path: Path) -> pa.Table:
        # Mapped, not read: the file's bytes stay in the page cache instead of a second copy
        # in memory beside the table (a load peaks near the table's own size).
        with pa.memory_map(str(path), "r") as source:
            data = source.read_buffer()
        header = data.slice(0, min(data.size, 4096)).to_pybytes().split(b"\n", 1)[0]
        columns = {
            field.strip().strip(b'"').decode("utf-8", "replace") for field in header.split(b",")
        }
        missing = [
            name
            for name in _CSV_SCHEMA.names
            if name not in columns and name not in DERIVED_COLUMNS
        ]
        if len(missing) > 3:
            raise TraceFileError(
                path,
                f"not a hotspan CSV: its first line is not the span table's header "
                f"({','.join(_CSV_SCHEMA.names)})",
            )
        if missing:
            raise TraceFileError(
                path, f"not a hotspan CSV: its header has no {', '.join(missing)} column"
            )
        # A file cut short (a copy interrupted, a disk full) ends inside a row: that row is
        # left out, counted, and said, rather than the whole file refused.
        cut = 0
        if data.size and data.slice(data.size - 1).to_pybytes() != b"\n":
            cut, data = 1, data.slice(0, _last_line_end(data))
        malformed = 0

        def skip(row: Any) -> str:  # a row with the wrong number of fields: counted, left out
            nonlocal malformed
            malformed += 1
            return "skip"

        def open_reader(block_size: int | None) -> Any:
            nonlocal malformed
            malformed = 0  # counted again on a second read with larger blocks
            return pacsv.open_csv(
                pa.BufferReader(data),
                read_options=pacsv.ReadOptions(block_size=block_size) if block_size else None,
                convert_options=convert,
                parse_options=parse,
            )

        # a file from before self_ns: read without it, computed by conform_to_schema
        schema = pa.schema(
            [
                field
                for field in _CSV_SCHEMA
                if field.name in columns or field.name not in DERIVED_COLUMNS
            ]
        )
        convert = pacsv.ConvertOptions(
            column_types=schema,
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            include_columns=schema.names,
        )
        parse = pacsv.ParseOptions(invalid_row_handler=skip)
        table = read_line_blocks(open_reader, data, schema)
        return note_skipped(
            table,
            path,
            {
                # CSV has no row count nor end marker: the rows the cut took whole cannot be
                # counted (only those named as parents, below), and the warning says so.
                INCOMPLETE_LAST_ROW: cut,
                "row(s) with the wrong number of fields": malformed,
                # CSV cannot say how many rows it holds: a row cut out whole (the last line of a
                # file cut at a line's end) is seen through the rows that name it as their parent;
                # less the rows left out above, any of which may be such a parent (said once).
                MISSING_PARENTS: max(0, missing_parents(table) - cut - malformed),
            },
        )


def _last_line_end(data: pa.Buffer) -> int:
    """Offset just past the last newline of ``data`` (0 if none), looked for from the end
    a megabyte at a time rather than by copying the whole file."""
    end: int = data.size
    while end > 0:
        start = max(0, end - (1 << 20))
        found: int = data.slice(start, end - start).to_pybytes().rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0
