"""hotspan: spans recorded in hot loops at close to the interpreter's own floor, handed to
Python as Arrow tables.

    import hotspan
    with hotspan.span("forward", "compute"):
        ...
    table = hotspan.drain()
"""
from __future__ import annotations

__version__ = "0.1.0"

from ._native import (  # noqa: E402
    begin,
    disable,
    dropped,
    enable,
    enabled,
    end,
    instant,
    set_thread_name,
    span,
    traced_function,
)
from ._api import configure, drain, rank, traced  # noqa: E402
from ._schema import SPAN_SCHEMA  # noqa: E402
from .export import export, load  # noqa: E402
from .live import live  # noqa: E402
from .record import Recorder, record  # noqa: E402
from .stats import phases, stats  # noqa: E402


def get_include() -> str:
    """The directory holding ``hotspan.h``, for native callers' build systems."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parents[1] / "csrc" / "include"):  # wheel, then source tree
        if (candidate / "hotspan.h").is_file():
            return str(candidate)
    raise FileNotFoundError("hotspan.h is not installed beside the hotspan package")

__all__ = [
    "Recorder",
    "SPAN_SCHEMA",
    "__version__",
    "begin",
    "configure",
    "disable",
    "drain",
    "dropped",
    "enable",
    "enabled",
    "end",
    "export",
    "get_include",
    "instant",
    "live",
    "load",
    "phases",
    "rank",
    "record",
    "set_thread_name",
    "span",
    "stats",
    "traced",
    "traced_function",
]

# HOTSPAN_OUT=dest: record from import to exit (launchers need no code change). Last, so
# that everything it needs is imported.
from .record import start_from_env as _start_from_env  # noqa: E402

_start_from_env()
