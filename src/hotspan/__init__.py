"""hotspan: spans recorded in hot loops at close to the interpreter's own floor, handed to
Python as Arrow tables.

    import hotspan
    with hotspan.span("forward", "compute"):
        ...
    table = hotspan.drain()

``import hotspan`` loads the recorder alone: pyarrow, numpy and the exporters, statistics
and reports load on first use (the first ``drain()``, ``export``, ``load``, ``stats``...),
so a program that only records, on every rank of a job, pays nothing for them.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__  # noqa: E402

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

# Public names that live in modules loaded on first use: name -> (module, attribute).
# Each is a function (or class) named differently from every submodule, so that
# ``import hotspan.X`` always gives a module and ``hotspan.X`` stays the same object; an
# attribute of None names the submodule itself (``hotspan.events``).
_LAZY = {
    "export": ("hotspan.formats", "export"),
    "load": ("hotspan.formats", "load"),
    "stats": ("hotspan.analysis", "stats"),
    "phases": ("hotspan.analysis", "phases"),
    "compare": ("hotspan.analysis", "compare"),
    "SpanFilter": ("hotspan.analysis.filters", "SpanFilter"),
    "live": ("hotspan.recording.live_log", "live"),
    "record": ("hotspan.recording.recorder", "record"),
    "Recorder": ("hotspan.recording.recorder", "Recorder"),
    "SPAN_SCHEMA": ("hotspan._schema", "SPAN_SCHEMA"),
    "subscribe": ("hotspan.recording.subscribers", "subscribe"),
    "on_event": ("hotspan.events", "on_event"),
    "wrap": ("hotspan.proxy", "wrap"),
    "events": ("hotspan.events", None),  # a submodule: hotspan.events.Flushed after import hotspan
    "instrument": ("hotspan.instrumentation", "instrument"),
    "uninstrument": ("hotspan.instrumentation", "uninstrument"),
    # A submodule (attribute None): ``hotspan.sync.mlx`` works without ``import hotspan.sync``.
    "sync": ("hotspan.sync", None),
    "snapshot": ("hotspan.recording.flight", "snapshot"),
    # Jupyter: results as HTML, and ``%load_ext hotspan`` (IPython looks this name up).
    "display": ("hotspan.notebook", "display"),
    "load_ipython_extension": ("hotspan.notebook", "load_ipython_extension"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'hotspan' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(target[0])
    value = module if target[1] is None else getattr(module, target[1])
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def get_include() -> str:
    """The directory holding ``hotspan.h``, for native callers' build systems."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for candidate in (
        here / "include",
        here.parents[1] / "csrc" / "include",
    ):  # wheel, then source tree
        if (candidate / "hotspan.h").is_file():
            return str(candidate)
    raise FileNotFoundError("hotspan.h is not installed beside the hotspan package")


__all__ = [
    "Recorder",
    "SPAN_SCHEMA",
    "SpanFilter",
    "__version__",
    "begin",
    "compare",
    "configure",
    "disable",
    "drain",
    "dropped",
    "enable",
    "enabled",
    "end",
    "events",
    "export",
    "get_include",
    "instant",
    "instrument",
    "live",
    "load",
    "on_event",
    "phases",
    "rank",
    "record",
    "set_thread_name",
    "span",
    "stats",
    "subscribe",
    "sync",
    "traced",
    "traced_function",
    "uninstrument",
    "wrap",
]

# HOTSPAN_OUT=dest: record from import to exit (launchers need no code change). The
# recorder module (no pyarrow at import) loads only when asked for.
import os as _os  # noqa: E402

if _os.environ.get("HOTSPAN_OUT", "").strip():
    from .recording.recorder import start_from_env as _start_from_env

    _start_from_env()
