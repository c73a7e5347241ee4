"""Arrow IPC file (Feather v2): the span table as it is, uncompressed, batch by batch.

The file format allows one dictionary per column for the whole file, so the chunks'
dictionaries are unified first (a cheap pass over the int32 indices).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from . import _base as base
from ._base import Exporter, Progress

__all__ = ["ArrowIpcExporter"]


class ArrowIpcExporter(Exporter):
    def _write(self, table: pa.Table, path: Path) -> None:
        table = table.unify_dictionaries()
        with (
            Progress(table.num_rows, f"writing {path.name}") as progress,
            pa.OSFile(str(path), "wb") as sink,
            pa.ipc.new_file(sink, table.schema) as writer,
        ):
            for batch in table.to_batches(max_chunksize=base.BATCH_ROWS):
                writer.write_batch(batch)
                progress.advance(batch.num_rows)

    def _read(self, path: Path) -> pa.Table:
        # Read into memory rather than memory-map: a mapped file truncated later by
        # another process would crash the interpreter with SIGBUS on access.
        with pa.OSFile(str(path), "rb") as source:
            table = pa.ipc.open_file(source).read_all()
        # The IPC reader checks the framing, not the data: flipped bytes can leave dictionary
        # indices or string offsets out of range, and the first to_pylist(), cast or export
        # of such a table reads outside its buffers (SIGSEGV). A full validation (every
        # offset and index: ~10 ms a million rows, against ~25 ms for the read itself) turns
        # that into ArrowInvalid, which read() reports as a bad file.
        table.validate(full=True)
        return table
