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

from typing import TYPE_CHECKING

# Submodules and classes that need no pyarrow load with the package: ``hotspan.events.Flushed``
# and ``hotspan.sync.mlx`` work after a bare ``import hotspan``, ``Recorder`` is the real class.
from . import events, sync
from ._api import configure, drain, rank, traced
from ._native import (
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
from ._version import __version__
from .events import on_event
from .recording.recorder import Recorder, record

if TYPE_CHECKING:
    import os
    from collections.abc import Callable
    from typing import IO, Any

    import pyarrow as pa

    from .recording.live_log import LiveLog
    from .recording.subscribers import Subscription

# Why small forwarding functions and no module ``__getattr__``: CPython (3.11-3.14) never
# specialises ``LOAD_ATTR`` on a module whose dict holds ``__getattr__`` (specialize.c,
# SPEC_FAIL_OVERRIDDEN), so with one every ``hotspan.span`` written in a hot loop paid a
# generic attribute lookup (~250 instructions a span, a fifth of the floor). The functions
# below keep ``import hotspan`` free of pyarrow/numpy: each imports its implementation on call
# (the import is a dict hit in sys.modules after the first). Options are forwarded as given,
# so the implementation's signature and its errors stay the one truth.


def export(table: pa.Table, path: str | os.PathLike[str], format: str | None = None) -> Any:
    """Write a span table to ``path`` in the format its extension names (:func:`hotspan.formats.export`)."""
    from .formats import export as implementation

    return implementation(table, path, format)


def load(path: str | os.PathLike[str], *args: Any, **options: Any) -> pa.Table:
    """Read a file written by :func:`export` (or a run directory) as a span table (:func:`hotspan.formats.load`)."""
    from .formats import load as implementation

    return implementation(path, *args, **options)


def stats(spans: Any, *args: Any, **options: Any) -> pa.Table:
    """Count, total and percentiles per group of spans (:func:`hotspan.analysis.stats`)."""
    from .analysis import stats as implementation

    return implementation(spans, *args, **options)


def phases(spans: Any, **options: Any) -> pa.Table:
    """Where each top-level category's time goes, per rank (:func:`hotspan.analysis.phases`)."""
    from .analysis import phases as implementation

    return implementation(spans, **options)


def compare(base: Any, new: Any, **options: Any) -> pa.Table:
    """Per span group, what changed between two runs (:func:`hotspan.analysis.compare`)."""
    from .analysis import compare as implementation

    return implementation(base, new, **options)


def live(min_ns: int = 0, file: IO[str] | None = None) -> LiveLog:
    """Print one line per finished span of at least ``min_ns`` (:func:`hotspan.recording.live_log.live`)."""
    from .recording.live_log import live as implementation

    return implementation(min_ns, file)


def subscribe(callback: Callable[[pa.RecordBatch], Any], **options: Any) -> Subscription:
    """Call ``callback(batch)`` with the spans recorded from now on (:func:`hotspan.recording.subscribers.subscribe`)."""
    from .recording.subscribers import subscribe as implementation

    return implementation(callback, **options)


def wrap(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """A proxy of ``obj`` recording one span per method call (:func:`hotspan.proxy.wrap`)."""
    from .proxy import wrap as implementation

    return implementation(obj, *args, **kwargs)


def instrument(name: str) -> None:
    """Wrap the integration ``name``'s functions with spans (:func:`hotspan.instrumentation.instrument`)."""
    from .instrumentation import instrument as implementation

    implementation(name)


def uninstrument(name: str) -> None:
    """Put back what ``instrument(name)`` replaced (:func:`hotspan.instrumentation.uninstrument`)."""
    from .instrumentation import uninstrument as implementation

    implementation(name)


def snapshot() -> pa.Table:
    """The spans open now in this process, per thread (:func:`hotspan.recording.flight.snapshot`)."""
    from .recording.flight import snapshot as implementation

    return implementation()


def SpanFilter(*args: Any, **kwargs: Any) -> Any:
    """Which spans a question is about (:class:`hotspan.analysis.filters.SpanFilter`; a function
    here so that ``import hotspan`` loads no pyarrow: ``isinstance`` needs the class there)."""
    from .analysis.filters import SpanFilter as implementation

    return implementation(*args, **kwargs)


def display(result: Any, *, title: str = "hotspan") -> Any:
    """Show a result as HTML in a notebook (:func:`hotspan.notebook.display`)."""
    from .notebook import display as implementation

    return implementation(result, title=title)


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext hotspan`` (:func:`hotspan.notebook.load_ipython_extension`)."""
    from .notebook import load_ipython_extension as implementation

    implementation(shell)


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

# HOTSPAN_OUT=dest: record from import to exit (launchers need no code change); so does a
# process started while its parent runs record() (HOTSPAN_RECORD_CHILDREN, set by it). The
# recorder module (no pyarrow at import) loads only when asked for.
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

if _os.environ.get("HOTSPAN_OUT", "").strip() or _os.environ.get("HOTSPAN_RECORD_CHILDREN"):
    from .recording.recorder import start_from_env as _start_from_env

    _start_from_env()
if "multiprocessing.process" in _sys.modules:  # a Process made now, started while recording
    from .recording.children import offer_to_multiprocessing as _offer

    _offer()
