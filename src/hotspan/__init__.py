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

# Submodules and classes that need no pyarrow load with the package: ``hotspan.events.Flushed``
# and ``hotspan.sync.mlx`` work after a bare ``import hotspan``, ``Recorder`` is the real class.
from . import events, sync
from ._api import configure, drain, rank, traced
from ._native import (
    begin,
    counter,
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

# typing loads for the type checker only: a fresh interpreter has not loaded it yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path
    from typing import IO, Any

    import pyarrow as pa

    from .analysis.filters import SpanFilter as _SpanFilter
    from .notebook import HtmlView
    from .proxy import SizeFn
    from .recording.live_log import LiveLog
    from .recording.subscribers import Subscription
del TYPE_CHECKING  # not a public name of the package

# Why small forwarding functions and no module ``__getattr__``: CPython (3.11-3.14) never
# specialises ``LOAD_ATTR`` on a module whose dict holds ``__getattr__`` (specialize.c,
# SPEC_FAIL_OVERRIDDEN), so with one every ``hotspan.span`` written in a hot loop paid a
# generic attribute lookup (~250 instructions a span, a fifth of the floor). The functions
# below keep ``import hotspan`` free of pyarrow/numpy: each imports its implementation on call
# (the import is a dict hit in sys.modules after the first). Each names its implementation's
# parameters, with the same defaults, so that ``help``, ``inspect.signature`` and an IDE show
# them before any call (tests/core/test_public_signatures.py holds the two equal); the
# implementation still checks the values and raises the errors.


def export(
    table: pa.Table,
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    counters: pa.Table | None = None,
) -> Path:
    """Write a span table to ``path``, in the format its extension names (``.parquet``,
    ``.arrow``/``.feather``, ``.json``/``.json.gz`` Chrome trace, ``.pftrace`` Perfetto,
    ``.csv``, ``.jsonl``, ``.folded``, ``.speedscope.json``) or ``format``. The file appears
    under its name only once complete. Returns the path written; ``ValueError`` names an
    unknown extension.

    :param counters: a counter table (:func:`drain_counters`) written beside the spans:
        Chrome ``"ph":"C"`` events, Perfetto counter tracks (the two trace formats only).
    """
    from .formats import export as implementation

    return implementation(table, path, format, counters=counters)


def drain_counters() -> pa.Table:
    """Every counter value (:func:`counter`, and ``configure(counters=)``'s samples of the
    process's memory) recorded since the last call, oldest first, as a ``pyarrow.Table``:
    ``time_ns``, ``name``, ``value`` (float64), ``rank``, ``pid``. Up to 1,048,576 values
    wait for the next call; newer ones past that are dropped, counted in
    ``dropped(detail=True)["counters"]``."""
    from .counters import drain_counters as implementation

    return implementation()


def load_counters(path: str | os.PathLike[str]) -> pa.Table:
    """Read the counters of a run directory (its ``_counters/`` folder), a counters file, or
    a Chrome JSON / Perfetto trace written with counters; see
    :func:`hotspan.counters.load_counters`."""
    from .counters import load_counters as implementation

    return implementation(path)


def counter_stats(spans: Any, counters: Any, *, counter: str | None = None) -> pa.Table:
    """A counter's min/mean/max while the spans of each name ran (memory while ``forward``
    ran): a row per span name and counter; see :func:`hotspan.counters.counter_stats`."""
    from .counters import counter_stats as implementation

    return implementation(spans, counters, counter=counter)


def load(
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    check: bool = True,
    run: str | None = None,
) -> pa.Table:
    """Read a file written by :func:`export` (or a foreign Chrome JSON trace), a run
    directory of Parquet parts, or a URI (``s3://bucket/run``) as a span table.

    :param format: the format, when the extension does not say it.
    :param check: refuse a table that breaks the schema's rules (negative durations or
        depths, ``end_ns != start_ns + duration_ns``, a span id twice), naming the row;
        ``False`` reads a file the caller chooses to trust as it is.
    :param run: of a directory holding several runs, only that one (``hotspan runs DIR``
        lists their ids).
    :raises OSError: a missing file.
    :raises hotspan.formats.TraceFileError: (a ``ValueError``) naming the file and what is
        wrong with it.
    """
    from .formats import load as implementation

    return implementation(path, format, check=check, run=run)


def stats(
    spans: Any,
    by: str | Sequence[str] | None = None,
    *,
    filter: _SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """Statistics per group of spans, as a ``pyarrow.Table``, largest ``total_ns`` first.

    :param spans: a span table, or a path (a file, a run directory, a URI, a list of them):
        streamed, to the same result.
    :param by: the columns to group by (default ``category, name``, plus ``device`` when the
        run has device rows).
    :param filter: which spans count (:func:`SpanFilter`, or a dict of its fields).
    :param engine: who computes: ``None`` (chosen by size), ``"memory"``, ``"duckdb"``, or a
        ``SparkSession``.

    Columns: the ``by`` keys, ``count``, ``total_ns``, ``self_ns`` (the time the group's own
    code ran: duration minus its children's), ``mean_ns``, ``min_ns``, ``p50_ns``,
    ``p90_ns``, ``p99_ns`` (exact), ``max_ns``, ``share`` (self time over the busy time of
    the group's rank/thread, so it adds up to 1 per lane; headed ``self %`` by ``hotspan
    stats``), ``busy`` (total time over the run's wall time; ``total %``), ``errors``,
    ``arg_sum`` and ``arg_per_s``. See :func:`hotspan.analysis.statistics.stats` for each
    column's exact definition.
    """
    from .analysis import stats as implementation

    return implementation(spans, by, filter=filter, engine=engine)


def phases(
    spans: Any, *, filter: _SpanFilter | dict[str, Any] | None = None, engine: Any = None
) -> pa.Table:
    """Where each top-level category's time goes, per rank, as a ``pyarrow.Table``: a row
    per rank and top-level category (``phase``: its time, ``steps``, ``per_step_ns``), then a
    row per sub-category with its ``share`` of the category's time; with several ranks,
    rows of ``rank`` null give the mean over them. ``spans``, ``filter`` and ``engine`` as
    for :func:`stats`; see :func:`hotspan.analysis.statistics.phases`.
    """
    from .analysis import phases as implementation

    return implementation(spans, filter=filter, engine=engine)


def compare(
    base: Any,
    new: Any,
    *,
    by: str | Sequence[str] = ("category", "name"),
    threshold: float = 0.05,
    min_count: int = 1,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    filter: _SpanFilter | dict[str, Any] | None = None,
    normalize: str | None = None,
    shift: bool = True,
    engine: Any = None,
) -> pa.Table:
    """Per span group, what changed between two runs, as a ``pyarrow.Table``: counts, p50,
    mean and p99 on each side, the median's change with its bootstrap interval
    (``change_low``, ``change_high``), the Mann-Whitney U ``p_value`` and a ``verdict``:
    ``slower`` when ``p_value < alpha`` and the whole interval lies above ``threshold``
    (``faster`` likewise), ``same``, ``new``/``gone`` (one side only), ``few`` (under
    ``min_count`` spans on a side) or ``instant``.

    :param base: the run before (a table or a path, as for :func:`stats`).
    :param new: the run after.
    :param by: the columns that make a group.
    :param confidence: of the bootstrap interval, from ``resamples`` resamples drawn with
        ``seed``.
    :param normalize: judge against the median of the span of this name on each side.
    :param shift: judge against a shift most groups share (the machine's); ``False``: raw.
    :param filter: which spans count, on both sides.
    :param engine: who computes, as for :func:`stats`.

    See :func:`hotspan.analysis.comparison.compare` for the rule in full.
    """
    from .analysis import compare as implementation

    return implementation(
        base,
        new,
        by=by,
        threshold=threshold,
        min_count=min_count,
        alpha=alpha,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        filter=filter,
        normalize=normalize,
        shift=shift,
        engine=engine,
    )


def collectives(
    spans: Any,
    *,
    category: str = "comms",
    align: bool = True,
    clock_error_ns: int | None = None,
    filter: _SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """Collectives matched across ranks: a row per instance and rank, as a ``pyarrow.Table``.

    :param spans: a span table, or a path (a run directory, a file, a list of them): a run
        larger than memory is read a batch at a time.
    :param category: the last part of the collectives' category (``train/comms``: ``comms``).
    :param align: estimate each rank's clock offset from the collectives' ends and correct it.
    :param clock_error_ns: each rank's clock error bound, in place of the run's metadata.
    :param filter: which spans count (:func:`SpanFilter`, or a dict of its fields).
    :param engine: as for :func:`stats`: ``"memory"``, ``"duckdb"`` (streamed), ``"spark"`` or
        a SparkSession (the same rows).

    Columns: ``key`` (the span's name), ``index`` (the k-th of that key on each rank),
    ``rank``, ``arrival_ns``, ``arrival_error_ns``, ``wait_ns`` (last arrival minus its own,
    within its span) and ``last``. See :func:`hotspan.analysis.ranks.collectives`.
    """
    from .analysis.ranks import collectives as implementation

    return implementation(
        spans,
        category=category,
        align=align,
        clock_error_ns=clock_error_ns,
        filter=filter,
        engine=engine,
    )


def stragglers(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    clock_error_ns: int | None = None,
    alpha: float = 0.001,
    min_share: float = 0.05,
    filter: _SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """Which rank makes the others wait, and why: a row per rank, as a ``pyarrow.Table``.

    :param spans: a span table, or a path (a run directory, a file, a list of them).
    :param category: the last part of the collectives' category.
    :param step: the step span's name (else each rank's most frequent top-level span).
    :param align: correct each rank's clock offset, estimated from the collectives' ends.
    :param clock_error_ns: each rank's clock error bound, in place of the run's metadata.
    :param alpha: the straggler test's level (Bennett's bound, Bonferroni over ranks).
    :param min_share: how far above its expected share of all blame a straggler must be.
    :param filter: which spans count (:func:`SpanFilter`, or a dict of its fields).
    :param engine: as for :func:`stats`: ``"memory"``, ``"duckdb"`` (streamed), ``"spark"`` or
        a SparkSession (the same rows).

    Columns: ``rank``, ``blame_ns`` (the others' waits where it arrived last), ``wait_ns``,
    ``steps_last``, ``straggler``, ``reason`` (``rank 7: data.fetch +38.00 ms a step over
    the median rank, 812 of 1,000 steps``) and ``step_ns_if_median``. See
    :func:`hotspan.analysis.ranks.stragglers`.
    """
    from .analysis.ranks import stragglers as implementation

    return implementation(
        spans,
        category=category,
        step=step,
        align=align,
        clock_error_ns=clock_error_ns,
        alpha=alpha,
        min_share=min_share,
        filter=filter,
        engine=engine,
    )


def critical_path(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    summary: bool = False,
    filter: _SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """The critical path of each step across ranks: a row per segment, as a ``pyarrow.Table``.

    :param spans: a span table, or a path (a run directory, a file, a list of them).
    :param category: the last part of the collectives' category.
    :param step: the step span's name (else each rank's most frequent top-level span).
    :param align: correct each rank's clock offset, estimated from the collectives' ends.
    :param summary: per span name instead: ``critical_ns`` and ``share`` of the path.
    :param filter: which spans count (:func:`SpanFilter`, or a dict of its fields).
    :param engine: as for :func:`stats`: ``"memory"``, ``"duckdb"`` (streamed), ``"spark"`` or
        a SparkSession (the same rows).

    Columns: ``step``, ``rank``, ``name``, ``start_ns``, ``end_ns`` (the rank's own clock).
    See :func:`hotspan.analysis.ranks.critical_path`.
    """
    from .analysis.ranks import critical_path as implementation

    return implementation(
        spans,
        category=category,
        step=step,
        align=align,
        summary=summary,
        filter=filter,
        engine=engine,
    )


def rank_steps(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    filter: _SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """Per rank and step: its time, waits and blame, as a ``pyarrow.Table`` (the cells of
    ``hotspan serve``'s rank x step heatmap).

    :param spans: a span table, or a path (a run directory, a file, a list of them).
    :param category: the last part of the collectives' category.
    :param step: the step span's name (else each rank's most frequent top-level span).
    :param align: correct each rank's clock offset, estimated from the collectives' ends.
    :param filter: which spans count (:func:`SpanFilter`, or a dict of its fields).
    :param engine: as for :func:`stats`: ``"memory"``, ``"duckdb"`` (streamed), ``"spark"`` or
        a SparkSession; ``None`` chooses by size.

    Columns: ``rank``, ``step``, ``start_ns``, ``end_ns`` (the step span, on the rank's own
    clock), ``step_ns``, ``wait_ns`` (its waits in that step's collectives), ``blame_ns``
    (the others' waits where it arrived last in that step) and ``last`` (how many times).
    See :func:`hotspan.analysis.ranks.rank_steps`.
    """
    from .analysis.ranks import rank_steps as implementation

    return implementation(
        spans, category=category, step=step, align=align, filter=filter, engine=engine
    )


def live(min_ns: int = 0, file: IO[str] | None = None) -> LiveLog:
    """Print one line per finished span of at least ``min_ns`` (:func:`hotspan.recording.live_log.live`)."""
    from .recording.live_log import live as implementation

    return implementation(min_ns, file)


def subscribe(
    callback: Callable[[pa.RecordBatch], Any],
    *,
    min_ns: int = 0,
    names: Iterable[str] | str | None = None,
    categories: Iterable[str] | str | None = None,
) -> Subscription:
    """Call ``callback(batch)`` with the spans recorded from now on, about every drain
    interval, on a hotspan-owned thread: ``batch`` is a ``pyarrow.RecordBatch`` of the spans
    lasting at least ``min_ns`` whose name is in ``names`` and whose category (or a component
    of its path) is in ``categories`` (``None``: any). Returns a
    :class:`~hotspan.recording.subscribers.Subscription`; ``close()`` it (or use ``with``)
    to deliver what is left and stop.
    """
    from .recording.subscribers import subscribe as implementation

    return implementation(callback, min_ns=min_ns, names=names, categories=categories)


def wrap(
    obj: Any,
    category: str | None = "db",
    size: SizeFn | None = None,
    methods: Iterable[str] | None = None,
) -> Any:
    """A proxy of ``obj`` recording one span per method call, named ``ClassName.method``.

    :param category: the spans' category.
    :param size: ``size(args, kwargs, result)`` gives the span's ``arg`` (bytes moved,
        rows...; ``None`` leaves it unset).
    :param methods: the names to record (default: every public method).

    ``async def`` methods are recorded around the awaited call. An exception marks the span
    as an error and propagates unchanged. Everything else (attributes, properties, ``with``,
    iteration) passes through to ``obj``.
    """
    from .proxy import wrap as implementation

    return implementation(obj, category, size, methods)


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


def SpanFilter(
    where: tuple[tuple[str, str, str], ...] = (),
    names: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    ranks: tuple[int, ...] | None = None,
    threads: tuple[str, ...] = (),
    since: float | None = None,
    until: float | None = None,
    min_ns: int | None = None,
    run: str | None = None,
    overlap: bool = False,
    origin_ns: int | None = None,
) -> _SpanFilter:
    """The spans a question is about (``stats``, ``phases`` and ``compare`` take it as
    ``filter=``); every field narrows (all must hold), ``None``/empty does not.

    :param where: ``(column, op, value)`` with op ``~`` (regex search) or ``=`` (equals, as
        text), as ``--filter COL~REGEX`` / ``COL=VALUE`` give them.
    :param names: exact names (any of).
    :param categories: a category or any below it (``train`` takes ``train/compute``).
    :param ranks: ranks (any of).
    :param threads: thread names or ids (any of).
    :param since: the window's start: seconds from the run's start, or epoch ns.
    :param until: the window's end, likewise.
    :param min_ns: a minimum duration.
    :param run: a run id (the parts of a directory recorded by that run only).
    :param overlap: the window keeps every span overlapping it (as a timeline shows it;
        ``hotspan export --since/--until``), not only those starting in it.
    :param origin_ns: the run's start (epoch ns) that relative bounds are taken from, once
        known.

    A function here so that ``import hotspan`` loads no pyarrow; it returns a
    :class:`hotspan.analysis.filters.SpanFilter` (``isinstance`` needs that class).
    """
    from .analysis.filters import SpanFilter as implementation

    return implementation(
        where,
        names,
        categories,
        ranks,
        threads,
        since,
        until,
        min_ns,
        run,
        overlap=overlap,
        origin_ns=origin_ns,
    )


def display(result: Any, *, title: str = "hotspan") -> HtmlView:
    """``result`` drawn as HTML in a notebook: a span table (a run summary with a small
    timeline and the flame graph), or the table :func:`stats`, :func:`phases` or
    :func:`compare` returns (:func:`hotspan.notebook.display`)."""
    from .notebook import display as implementation

    return implementation(result, title=title)


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext hotspan`` (:func:`hotspan.notebook.load_ipython_extension`)."""
    from .notebook import load_ipython_extension as implementation

    implementation(shell)


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext hotspan`` (:func:`hotspan.notebook.unload_ipython_extension`)."""
    from .notebook import unload_ipython_extension as implementation

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
    "collectives",
    "compare",
    "configure",
    "counter",
    "counter_stats",
    "critical_path",
    "disable",
    "drain",
    "drain_counters",
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
    "load_counters",
    "on_event",
    "phases",
    "rank",
    "rank_steps",
    "record",
    "set_thread_name",
    "span",
    "stats",
    "stragglers",
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

from . import _machine as _machine  # noqa: E402

_machine.mark_import()  # a run's CPU contention counts from here, its loop's first sample (~0.4 ms: see _machine)

if _os.environ.get("HOTSPAN_OUT", "").strip() or _os.environ.get("HOTSPAN_RECORD_CHILDREN"):
    from .recording.recorder import start_from_env as _start_from_env

    _start_from_env()
# multiprocessing's children carry the run id and the recordings (now, or as it loads)
from .recording._children import offer_to_multiprocessing as _offer  # noqa: E402

_offer()
