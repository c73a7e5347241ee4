"""The span blocks of the timeline's index (see :mod:`hotspan.analysis._timeline_index`): the
spans an index is built from, written once as zstd Arrow IPC blocks of ``BLOCK_ROWS`` rows
with a directory of each block's reach, and read back a window at a time for the views finer
than the index's bins."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ._timeline_kernel import BATCH_ROWS, COLUMNS, TRACK_KEYS, Summary

__all__ = ["BLOCK_ROWS", "BLOCK_SCHEMA", "BlockWriter", "Blocks"]


#: Rows a block of a :class:`TimelineIndex`'s span blocks holds (at most).
BLOCK_ROWS = 1 << 12
#: The columns of the span blocks: the kernel's, the name and the track as codes.
BLOCK_SCHEMA = pa.schema(
    [
        ("span_id", pa.uint64()),
        ("parent_id", pa.uint64()),
        ("name", pa.int32()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("depth", pa.int32()),
        ("track", pa.int32()),
    ]
)


class BlockWriter:
    """Writes the spans an index is built from as blocks (see :class:`TimelineIndex`), with
    the index's own name and track codes; a file that cannot be written leaves no blocks
    (the index still answers, the finer views from the spans)."""

    def __init__(self, path: str | os.PathLike[str], summary: Summary) -> None:
        self.path = os.fspath(path)
        self.summary = summary
        self.rows: list[np.ndarray] = []  # per block: first start, last start, last end, ranks
        self.writer: Any = None
        try:
            self.sink = pa.OSFile(self.path, "wb")
            self.writer = pa.ipc.new_file(
                self.sink, BLOCK_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")
            )
        except (OSError, pa.ArrowException):
            self._drop()

    def _drop(self) -> None:
        self.writer = None
        try:
            self.sink.close()
        except Exception:  # noqa: BLE001  (never opened)
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def add(self, batch: pa.RecordBatch) -> None:
        if self.writer is None or batch.num_rows == 0:
            return
        summary = self.summary
        track = summary._track_codes(batch)
        names = summary._name_codes(batch.column("name"))
        keys = np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS))
        parent = batch.column("parent_id") if "parent_id" in batch.schema.names else None
        columns = [
            batch.column("span_id").cast(pa.uint64()),
            parent.cast(pa.uint64())
            if parent is not None
            else pa.nulls(batch.num_rows, pa.uint64()),
            pa.array(names.astype(np.int32)),
            batch.column("start_ns").cast(pa.int64()),
            batch.column("end_ns").cast(pa.int64()),
            batch.column("depth").cast(pa.int32()),
            pa.array(track.astype(np.int32)),
        ]
        table = pa.RecordBatch.from_arrays(columns, schema=BLOCK_SCHEMA)
        start = batch.column("start_ns").to_numpy(zero_copy_only=False)
        end = batch.column("end_ns").to_numpy(zero_copy_only=False)
        rank = keys[track, 0]
        try:
            for at in range(0, batch.num_rows, BLOCK_ROWS):
                cut = slice(at, at + BLOCK_ROWS)
                self.writer.write_batch(table.slice(at, BLOCK_ROWS))
                self.rows.append(
                    np.array(
                        [
                            start[cut].min(),
                            start[cut].max(),
                            end[cut].max(),
                            rank[cut].min(),
                            rank[cut].max(),
                        ],
                        np.int64,
                    )
                )
        except (OSError, pa.ArrowException):  # a full disk: no blocks
            self._drop()

    def close(self) -> Blocks | None:
        if self.writer is None:
            return None
        try:
            self.writer.close()
            self.sink.close()
        except (OSError, pa.ArrowException):
            self._drop()
            return None
        directory = np.array(self.rows, np.int64).reshape(-1, 5)
        return Blocks(self.path, directory, self.summary)


class Blocks:
    """A :class:`TimelineIndex`'s span blocks: the blocks a window reaches, as the kernel's
    batches (only the rows in the window). Read with plain reads, not a memory map: the
    pages of a map stay in the server's resident memory once touched (hundreds of MB after
    a few zooms over 200 M spans), where a read's buffer is given back with its block and
    the file's pages stay in the page cache all the same."""

    def __init__(self, path: str, directory: np.ndarray, summary: Summary) -> None:
        import threading

        self.path = path
        self.directory = directory
        self.names = pa.array(list(summary.names) or [""], pa.string())
        self.keys = np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS))
        self.reader = pa.ipc.open_file(pa.OSFile(path))
        if self.reader.num_record_batches != len(directory):
            raise pa.ArrowInvalid(
                f"{path}: {self.reader.num_record_batches} blocks, not {len(directory)}"
            )
        self.lock = threading.Lock()

    def batches(
        self, start_ns: int, end_ns: int, ranks: Sequence[int] | None
    ) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        """The rows of the window (on ``ranks``), in batches, each with its rows' track codes
        (into ``keys``)."""
        d = self.directory
        reach = (d[:, 0] < end_ns) & ((d[:, 2] > start_ns) | (d[:, 1] >= start_ns))
        if ranks is not None:
            wanted = np.array(sorted({int(r) for r in ranks}), np.int64)
            if not len(wanted):  # no rank asked (``rank=`` empty): no block
                return
            lo = np.searchsorted(wanted, d[:, 3])  # some wanted rank in [rank min, rank max]
            reach &= (lo < len(wanted)) & (wanted[np.minimum(lo, len(wanted) - 1)] <= d[:, 4])
        # the rows in the window of several blocks are handed over together (a batch of
        # up to BATCH_ROWS): the kernel's cost per batch is paid once, not once a block
        taken: list[pa.RecordBatch] = []
        held = 0
        for i in np.flatnonzero(reach).tolist():
            with self.lock:
                block = self.reader.get_batch(i)
            start = block.column("start_ns").to_numpy()
            end = block.column("end_ns").to_numpy()
            inside = (start < end_ns) & ((end > start_ns) | (start >= start_ns))
            if ranks is not None:
                inside &= np.isin(self.keys[block.column("track").to_numpy(), 0], wanted)
            rows = np.flatnonzero(inside)
            if not len(rows):
                continue
            taken.append(block if len(rows) == block.num_rows else block.take(pa.array(rows)))
            held += len(rows)
            if held >= BATCH_ROWS:
                yield self._batch(taken)
                taken, held = [], 0
        if taken:
            yield self._batch(taken)

    def _batch(self, blocks: list[pa.RecordBatch]) -> tuple[pa.RecordBatch, np.ndarray]:
        """Rows of blocks as one of the kernel's batches (names and tracks decoded), and their
        track codes."""
        block = pa.Table.from_batches(blocks).combine_chunks()
        track = block.column("track").to_numpy()
        keys = self.keys[track]
        return pa.RecordBatch.from_arrays(
            [
                block.column("span_id").chunk(0),
                block.column("parent_id").chunk(0),
                pa.DictionaryArray.from_arrays(block.column("name").chunk(0), self.names),
                block.column("start_ns").chunk(0),
                block.column("end_ns").chunk(0),
                block.column("depth").chunk(0),
                pa.array(keys[:, 0].astype(np.int32)),
                pa.array(keys[:, 1]),
                pa.array(keys[:, 2]),
                pa.array(keys[:, 3]),
            ],
            names=[*COLUMNS, "lane"],
        ), track
