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

import pyarrow as pa

from ._base import Exporter, TraceFileError
from .arrow_ipc import ArrowIpcExporter
from .chrome_json import ChromeJsonExporter, ChromeJsonGzExporter
from .csv import CsvExporter
from .parquet import ParquetExporter
from .perfetto import PerfettoExporter

__all__ = ["FORMATS", "Exporter", "TraceFileError", "export", "exporter_for", "load"]

_EXPORTERS: tuple[Exporter, ...] = (
    ParquetExporter(),
    ArrowIpcExporter(),
    ChromeJsonExporter(),
    ChromeJsonGzExporter(),
    PerfettoExporter(),
    CsvExporter(),
)

#: File extension -> the exporter that writes and reads it.
FORMATS: dict[str, Exporter] = {ext: exporter for exporter in _EXPORTERS for ext in exporter.extensions}

# Longest first, so ".json.gz" wins over ".json".
_BY_LENGTH = sorted(FORMATS, key=len, reverse=True)


def _supported() -> str:
    return ", ".join(FORMATS)


def exporter_for(path: str | os.PathLike, format: str | None = None) -> Exporter:
    """The exporter for ``format`` (a name like ``"parquet"`` or an extension like
    ``".json.gz"``) or, without one, for the file name's extension."""
    if format is not None:
        wanted = format.lower()
        for exporter in _EXPORTERS:
            if wanted == exporter.name or wanted in exporter.extensions or "." + wanted in exporter.extensions:
                return exporter
        raise ValueError(
            f"unknown export format {format!r}; supported: {', '.join(e.name for e in _EXPORTERS)} "
            f"(or an extension: {_supported()})"
        )
    name = Path(path).name.lower()
    for extension in _BY_LENGTH:
        if name.endswith(extension):
            return FORMATS[extension]
    raise ValueError(f"{os.fspath(path)}: unknown file extension; supported: {_supported()}")


def export(table: pa.Table, path: str | os.PathLike, format: str | None = None) -> Path:
    """Write a span table to ``path`` in the format its extension names (or ``format``).

    The file appears under its name only once complete (written beside it, then renamed).
    Returns the path written.
    """
    exporter = exporter_for(path, format)
    exporter.write(table, path)
    return Path(path)


def load(path: str | os.PathLike, format: str | None = None) -> pa.Table:
    """Read a file written by :func:`export` (or a foreign Chrome JSON trace) as a span table.

    Raises ``OSError`` (missing file, ...) or :class:`TraceFileError` (a ``ValueError``)
    naming the file and what is wrong with it. A directory is read as a dataset of Parquet
    parts (``hotspan.record("dir/")``, ``hotspan collect``): see ``hotspan.dataset``.
    """
    if format is None and (os.path.isdir(path) or str(os.fspath(path)).endswith(("/", os.sep))):
        from ..dataset import load_dataset

        return load_dataset(path)
    return exporter_for(path, format).read(path)
