"""Parquet: the span table as it is (dictionary columns, schema metadata), zstd-compressed;
a recording's parts (``PartParquetExporter``) in a lighter encoding that costs the flusher less.

Row groups hold a million rows (half a million for tables large enough to be written on
several cores, below): large enough for good compression and fast scans of 10 M-span
traces, small enough that the writer's buffer stays bounded.
"""

from __future__ import annotations

import collections
import itertools
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from . import _thrift
from ._base import Exporter, Progress

__all__ = [
    "PARALLEL_MIN_ROWS",
    "PARALLEL_ROWS",
    "PART_WRITER_OPTIONS",
    "ParquetExporter",
    "PartParquetExporter",
    "ROW_GROUP_ROWS",
]

ROW_GROUP_ROWS = 1 << 20

# Measured on the 1 M-span benchmark table (pyarrow 26, one core: pyarrow's writer encodes
# the columns of a row group one after another): dictionaries only on the strings (the
# integer columns cost 10-40 ms each as dictionaries, and zstd squeezes their runs as
# well); DELTA_BINARY_PACKED on the increasing ids and times (and the sparse args).
# zstd at level -1 (zstd's first "fast" level; the stream is plain zstd, any reader opens
# it): ~4% faster end to end than level 1 for a 3% larger file, over 30 interleaved runs.
# LZ4 (LZ4_RAW to pyarrow) measured ~8% faster still, but older Parquet readers cannot open
# LZ4_RAW files, and zstd is what every reader (DuckDB, Spark, pandas) takes.
_DICTIONARY_COLUMNS = ["name", "category", "thread_name"]
_COLUMN_ENCODINGS = {
    **{
        name: "DELTA_BINARY_PACKED"
        for name in ("span_id", "parent_id", "start_ns", "end_ns", "arg")
    },
    # durations are noisy small numbers: split into byte streams, zstd finds the structure
    # (0.5 MB a million spans in 17 ms, against 1.5 MB in 36 ms plain); self times alike
    # (0.46 MB in 6 ms against 1.5 MB in 15 ms plain: the file 21% smaller, its write 7%
    # faster; issue 35). Parts write both so already: every reader of the matrix opens them.
    "duration_ns": "BYTE_STREAM_SPLIT",
    "self_ns": "BYTE_STREAM_SPLIT",
    **{name: "PLAIN" for name in ("depth", "thread_id", "pid", "rank", "error", "wait_ns")},
}


_WRITER_OPTIONS = dict(
    compression="zstd",
    compression_level=-1,
    use_dictionary=_DICTIONARY_COLUMNS,
    column_encoding=_COLUMN_ENCODINGS,
    # Statistics on the times (what a reader prunes row groups by), the thread ids (whether a
    # run has device rows: the default keys of stats) and the durations (whether they fit in
    # 32 bits): a reader learns them from the footers, without a scan.
    write_statistics=["start_ns", "end_ns", "thread_id", "duration_ns"],
    # Values handed to the column encoders 64 K at a time rather than 1 K: 5% less time
    # (median of 15 paired runs), the same bytes.
    write_batch_size=1 << 16,
)

#: A recording's parts (``formats/dataset.write_part``: one every ``flush_interval``, on the
#: flusher, while the program records): the flusher must write spans faster than a program's
#: threads record them, often on the one core they leave it (issue 21: 2 threads recording
#: flat out on 2 cores make ~3-6 M spans a second). Measured on 1 M-span tables (pyarrow 26,
#: one core, CPU time of the write, median of 7 interleaved runs; flat = the benchmark's
#: ``span("x", "c")``, nested = 50 names, depth 3, args): 48 / 67 ns a span against today's
#: full-file options' 76 / 112, for 4.3 / 5.6 bytes a span against 3.9 / 4.3.
#: - BYTE_STREAM_SPLIT on the signed 64-bit columns: the cheapest encoder per value (5 ns a span for
#:   span_id, start_ns, end_ns, against 8-10 for DELTA_BINARY_PACKED), and its byte streams
#:   compress nearly as well (start_ns 1.7 bytes a span either way).
#: - LZ4 (LZ4_RAW): half zstd's cost on the compressible streams. Every reader of the matrix
#:   (pandas, polars, DuckDB, Spark: tests/formats/test_dataset_readers.py) opens it; for
#:   older readers and for size, ``hotspan compact`` rewrites parts with the full-file options.
#: - dictionaries on the strings only, as for files (a dictionary column written plain is
#:   decoded first: 11-18 ns a span); statistics on the columns readers take ranges from
#:   (analysis/_streaming.py ``column_range``: start_ns, end_ns, duration_ns; ~1 ns a span).
_PART_COLUMN_ENCODINGS = {
    # Not the unsigned ids: Spark's vectorized reader cannot read BYTE_STREAM_SPLIT uint64
    # ("readUnsignedLongs" unsupported; test_spark)
    "span_id": "DELTA_BINARY_PACKED",
    "parent_id": "DELTA_BINARY_PACKED",
    **{
        name: "BYTE_STREAM_SPLIT"
        for name in ("start_ns", "end_ns", "duration_ns", "self_ns", "wait_ns", "arg")
    },
    **{name: "PLAIN" for name in ("depth", "thread_id", "pid", "rank", "error")},
}
PART_WRITER_OPTIONS = dict(
    compression="lz4",
    use_dictionary=_DICTIONARY_COLUMNS,
    column_encoding=_PART_COLUMN_ENCODINGS,
    write_statistics=["start_ns", "end_ns", "duration_ns", "wait_ns"],
    write_batch_size=1 << 16,
)

# pyarrow's writer encodes a row group's columns one after another on one core (it does not
# expose the C++ writer's use_threads), ~150 ns a span here. Large tables are cut into row
# groups written on as many threads as there are cores, each into memory as a little
# Parquet file of its own; their bodies go into one file in order, and one footer lists all
# their row groups with the offsets moved (export/_thrift.py). Memory: one round of row
# groups, compressed.
PARALLEL_MIN_ROWS = 1 << 18
PARALLEL_ROWS = 1 << 19  # a row group of the parallel writer


class ParquetExporter(Exporter):
    #: pyarrow.parquet's writer options (compression, encodings, statistics)
    writer_options: dict[str, Any] = _WRITER_OPTIONS
    #: Large tables written on several cores (``_write_parallel``)
    parallel = True

    def _write(self, table: pa.Table, path: Path) -> None:
        workers = min(os.cpu_count() or 1, 4)
        if self.parallel and table.num_rows >= PARALLEL_MIN_ROWS and workers > 1:
            self._write_parallel(table, path, workers)
            return
        with (
            Progress(table.num_rows, f"writing {path.name}") as progress,
            pq.ParquetWriter(path, table.schema, **self.writer_options) as writer,
        ):
            for start in range(0, table.num_rows, ROW_GROUP_ROWS):
                row_group = table.slice(start, ROW_GROUP_ROWS)
                writer.write_table(row_group, row_group_size=ROW_GROUP_ROWS)
                progress.advance(row_group.num_rows)

    def _write_parallel(self, table: pa.Table, path: Path, workers: int) -> None:
        def one_file(part: pa.Table) -> pa.Buffer:
            sink = pa.BufferOutputStream()
            pq.write_table(
                part, sink, row_group_size=PARALLEL_ROWS, **self.writer_options
            )  # releases the GIL
            return sink.getvalue()

        starts = iter(range(0, table.num_rows, PARALLEL_ROWS))
        joined = _JoinedFile()
        with (
            Progress(table.num_rows, f"writing {path.name}") as progress,
            open(path, "wb") as out,
            ThreadPoolExecutor(workers) as pool,
        ):
            # A sliding window of row groups in flight, taken in file order: every core stays
            # busy while the earliest is joined, and memory stays at about `workers + 1`
            # compressed row groups whatever the table's size.
            in_flight = collections.deque(
                pool.submit(one_file, table.slice(start, PARALLEL_ROWS))
                for start in itertools.islice(starts, workers + 1)
            )
            out.write(b"PAR1")
            while in_flight:
                written = in_flight.popleft().result()
                next_start = next(starts, None)
                if next_start is not None:
                    in_flight.append(pool.submit(one_file, table.slice(next_start, PARALLEL_ROWS)))
                joined.add(written, out)
                progress.advance(joined.last_rows)
            joined.finish(out)

    def _read(self, path: Path) -> pa.Table:
        table = pq.read_table(path)
        # As for Arrow IPC (arrow_ipc.py): data that decodes but breaks Arrow's invariants
        # (offsets, dictionary indices) must be refused here, not crash a later to_pylist().
        # ~10 ms a million rows on top of a ~100 ms read.
        table.validate(full=True)
        return table


class PartParquetExporter(ParquetExporter):
    """A recording's parts: Parquet any reader opens, in the encoding cheapest to write
    (``PART_WRITER_OPTIONS``); read like any Parquet file."""

    writer_options = PART_WRITER_OPTIONS
    # One core: the flusher writes beside a program whose threads hold the other cores, and
    # the parallel writer's row groups, each a file of its own (their dictionaries built
    # again, joined in Python), cost ~25% more CPU (62 against 49 ns a span, 1 M spans).
    parallel = False


class _JoinedFile:
    """Parquet files (each "PAR1" body footer length "PAR1") joined into one: their bodies
    in order, then the first footer listing every row group, offsets moved to where the
    bodies now sit."""

    # Offsets into the file, by Thrift field id (parquet.thrift): RowGroup.file_offset;
    # ColumnChunk.file_offset, offset_index_offset, column_index_offset; ColumnMetaData
    # data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset.
    _ROW_GROUP_OFFSETS = (5,)
    _CHUNK_OFFSETS = (2, 4, 6)
    _COLUMN_META_OFFSETS = (9, 10, 11, 14)

    def __init__(self) -> None:
        self.offset = 4  # past the leading "PAR1"
        self.footer: list[list[Any]] | None = None
        self.row_groups: list[list[list[Any]]] = []
        self.rows = 0
        self.last_rows = 0

    def add(self, data: pa.Buffer, out: BinaryIO) -> None:
        view = memoryview(data)
        (length,) = struct.unpack("<I", view[-8:-4])
        footer = _thrift.read_struct(bytes(view[-8 - length : -8]))
        body = view[4 : -8 - length]
        moved_by = self.offset - 4
        for row_group in _thrift.required_field(footer, 4)[2][1]:
            self._move(row_group, moved_by)
            ordinal = _thrift.field(row_group, 7)
            if ordinal is not None:
                ordinal[2] = len(self.row_groups)
            self.row_groups.append(row_group)
        self.last_rows = _thrift.required_field(footer, 3)[2]
        self.rows += self.last_rows
        if self.footer is None:
            self.footer = footer
        out.write(body)
        self.offset += len(body)

    def _move(self, row_group: list[list[Any]], by: int) -> None:
        for entry in row_group:
            if entry[0] in self._ROW_GROUP_OFFSETS:
                entry[2] += by
        for chunk in _thrift.required_field(row_group, 1)[2][1]:
            for entry in chunk:
                if entry[0] in self._CHUNK_OFFSETS:
                    entry[2] += by
            meta = _thrift.field(chunk, 3)
            if meta is not None:
                for entry in meta[2]:
                    if entry[0] in self._COLUMN_META_OFFSETS:
                        entry[2] += by

    def finish(self, out: BinaryIO) -> None:
        footer = self.footer
        assert footer is not None  # add() ran at least once
        _thrift.required_field(footer, 3)[2] = self.rows
        _thrift.required_field(footer, 4)[2] = (_thrift.STRUCT, self.row_groups)
        encoded = _thrift.write_struct(footer)
        out.write(encoded)
        out.write(struct.pack("<I", len(encoded)))
        out.write(b"PAR1")
