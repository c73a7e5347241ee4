"""Which format a path or a name is, and the exporter for it, each loaded on first use.

Free of pyarrow: recording to a path checks its extension at start without importing any
codec.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

if TYPE_CHECKING:
    from ._base import Exporter

__all__ = [
    "EXPORT_ONLY",
    "EXTENSIONS",
    "FORMATS",
    "READABLE_EXTENSIONS",
    "exporter_for",
    "format_of",
    "known_format",
]

# The registry: (name, module, class, extensions) in the order a format name is looked up.
# Extensions live here alone (the classes get theirs from it): the registry answers "which
# format is this path?" without importing pyarrow or any codec, so recording to a path
# costs no import until the first write.
_REGISTRY: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("parquet", "_parquet", "ParquetExporter", (".parquet",)),
    ("arrow", "_arrow_ipc", "ArrowIpcExporter", (".arrow", ".feather")),
    ("chrome-json", "_chrome_json", "ChromeJsonExporter", (".json",)),
    ("chrome-json-gz", "_chrome_json", "ChromeJsonGzExporter", (".json.gz",)),
    ("perfetto", "_perfetto", "PerfettoExporter", (".pftrace", ".perfetto-trace")),
    ("csv", "_csv", "CsvExporter", (".csv",)),
    ("jsonl", "_jsonl", "JsonlExporter", (".jsonl",)),
    # Views of the spans, written and never loaded back (no span ids, pids or args in them).
    ("speedscope", "_speedscope", "SpeedscopeExporter", (".speedscope.json",)),
    ("folded", "_folded", "FoldedExporter", (".folded",)),
)
#: Formats written but never loaded back (their exporters' ``readable`` is False).
EXPORT_ONLY: tuple[str, ...] = ("speedscope", "folded")

#: Every file extension a trace can have (lower case, with the dot).
EXTENSIONS: tuple[str, ...] = tuple(ext for *_, exts in _REGISTRY for ext in exts)
#: The extensions of the formats that load back as spans.
READABLE_EXTENSIONS: tuple[str, ...] = tuple(
    ext for name, _m, _c, exts in _REGISTRY if name not in EXPORT_ONLY for ext in exts
)

# Longest first, so ".json.gz" wins over ".json".
_BY_LENGTH = sorted(EXTENSIONS, key=len, reverse=True)
_loaded: dict[str, "Exporter"] = {}


def _exporter(name: str) -> "Exporter":
    exporter = _loaded.get(name)
    if exporter is None:
        for entry_name, module, cls, extensions in _REGISTRY:
            if entry_name == name:
                exporter = getattr(importlib.import_module(f"{__package__}.{module}"), cls)()
                exporter.name, exporter.extensions = entry_name, extensions
                _loaded[name] = exporter
                break
        else:  # callers pass names from _REGISTRY only
            raise ValueError(f"unknown format {name!r}")
    return exporter


class _Formats(Mapping[str, "Exporter"]):
    """File extension -> its exporter, each imported on first use."""

    def __getitem__(self, extension: str) -> "Exporter":
        for name, _module, _cls, extensions in _REGISTRY:
            if extension in extensions:
                return _exporter(name)
        raise KeyError(extension)

    def __iter__(self) -> Iterator[str]:
        return iter(EXTENSIONS)

    def __len__(self) -> int:
        return len(EXTENSIONS)


#: File extension -> the exporter that writes and reads it.
FORMATS: Mapping[str, "Exporter"] = _Formats()


def _supported() -> str:
    return ", ".join(EXTENSIONS)


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The extension of ``path`` that names its format, or None (no pyarrow needed)."""
    name = Path(path).name.lower()
    for extension in _BY_LENGTH:
        if name.endswith(extension):
            return extension
    return None


def exporter_for(path: str | os.PathLike[str], format: str | None = None) -> "Exporter":
    """The exporter for ``format`` (a name like ``"parquet"`` or an extension like
    ``".json.gz"``) or, without one, for the file name's extension."""
    if format is not None:
        wanted = format.lower()
        for name, _module, _cls, extensions in _REGISTRY:
            if wanted == name or wanted in extensions or "." + wanted in extensions:
                return _exporter(name)
        raise ValueError(
            f"unknown export format {format!r}; supported: {', '.join(e[0] for e in _REGISTRY)} "
            f"(or an extension: {_supported()})"
        )
    return FORMATS[known_format(path)]


def known_format(path: str | os.PathLike[str]) -> str:
    """The extension of ``path`` that names its format; ``ValueError`` when none does.
    Imports no codec: a recorder checks its destination with this at start."""
    extension = format_of(path)
    if extension is None:
        raise ValueError(f"{os.fspath(path)}: unknown file extension; supported: {_supported()}")
    return extension
