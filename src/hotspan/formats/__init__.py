"""Exports of a span table to files, and loaders back to tables.

    export(table, "trace.parquet")      # the format from the extension
    table = load("trace.json")          # any format we write, and foreign Chrome JSON

Every format is an :class:`Exporter` (``write(table, path)``, ``read(path)``) registered
here by file extension. This package works on plain pyarrow tables: it never needs the
compiled recorder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ._registry import EXTENSIONS, FORMATS, exporter_for, format_of

if TYPE_CHECKING:
    import pyarrow as pa

    from ._base import TraceFileError

__all__ = ["EXTENSIONS", "FORMATS", "TraceFileError", "export", "exporter_for", "format_of", "load"]


def __getattr__(name: str) -> type[TraceFileError]:
    # TraceFileError lives with the base class; loading it loads pyarrow, so only on demand.
    if name == "TraceFileError":
        from ._base import TraceFileError

        return TraceFileError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def export(
    table: "pa.Table",
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    counters: "pa.Table | None" = None,
) -> Path:
    """Write a span table to ``path`` in the format its extension names (or ``format``).

    The file appears under its name only once complete (written beside it, then renamed).
    ``counters``: a counter table written beside the spans, by the formats that hold
    counters (Chrome JSON, Perfetto); ``ValueError`` for another. Returns the path written.
    """
    from ._uri import local_path

    path = local_path(path)
    exporter_for(path, format).write(table, path, counters=counters)
    return Path(path)


def load(
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    check: bool = True,
    run: str | None = None,
) -> "pa.Table":
    """Read a file written by :func:`export` (or a foreign Chrome JSON trace) as a span table.

    Raises ``OSError`` (missing file, ...) or :class:`TraceFileError` (a ``ValueError``)
    naming the file and what is wrong with it. A directory is read as a dataset of Parquet
    parts (``hotspan.record("dir/")``, ``hotspan collect``): see ``hotspan.formats.dataset``;
    so is a URI (``s3://bucket/run``, any that ``pyarrow.fs.FileSystem.from_uri`` accepts),
    unless it names one trace file.

    ``check``: refuse a table that breaks the schema's rules (negative durations or depths,
    ``end_ns != start_ns + duration_ns``, a span id twice), naming the row; ``False`` reads
    a file the caller chooses to trust as it is.

    ``run``: of a dataset holding several runs, only that one (its id: ``hotspan runs DIR``
    lists them; a directory of several runs loads whole with a warning naming them).
    """
    from ._uri import is_uri, local_path

    path = local_path(path)
    if is_uri(path):
        from .dataset import load_uri

        # s3://, gs://, hdfs://, file://: a dataset or one file there
        return load_uri(path, format, check=check, run=run)
    if format is None and (os.path.isdir(path) or path.endswith(("/", os.sep))):
        from .dataset import load_dataset

        return load_dataset(path, check=check, run=run)
    table = exporter_for(path, format).read(path, check=check)
    if run is not None:
        from .._schema import META_RUN
        from ._base import TraceFileError

        found = (table.schema.metadata or {}).get(META_RUN, b"").decode(errors="replace")
        if found != run:
            raise TraceFileError(path, f"holds run {found or '(no id)'!r}, not {run!r}")
    return table
