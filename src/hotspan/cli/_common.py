"""What the commands share on the way in: the parser class, loading traces (one or several), --by and the
span filters (as a pyarrow mask and as SQL for the streaming path), whether to stream, and writing
files atomically."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa

from ._errors import EXIT_BAD_INPUT, CliError

if TYPE_CHECKING:
    from ..analysis._engine import Spans
    from ..analysis.filters import SpanFilter

__all__ = [
    "CliParser",
    "DEFAULT_BY",
    "add_command",
    "add_filter_options",
    "engine_of",
    "export_trace",
    "load_filtered",
    "load_traces",
    "open_spans_for",
    "parse_by",
    "span_filter",
    "without_pandas",
    "write_atomically",
]

DEFAULT_BY = ("category", "name")


class CliParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    description: str,
    example: str,
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  " + example.replace("\n", "\n  "),
    )
    parser.set_defaults(func=func)
    return parser


# --------------------------------------------------------------------------- start-up


class _RefusePandas:
    """A finder, first on ``sys.meta_path``, that refuses pandas (see :func:`without_pandas`)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(
                f"hotspan: this command runs without pandas (it needs none): {name}", name=name
            )


@contextlib.contextmanager
def without_pandas() -> Iterator[None]:
    """pandas refused while the block runs: pyarrow and DuckDB then take it as not installed.

    Why: pyarrow imports pandas the first time it builds any array (``pa.array``, ``pa.table``:
    its pandas shim and its C++ conversion look for pandas objects and constants), and DuckDB
    when it registers an Arrow table, though neither has a pandas object to see here. pandas
    is about 0.8 s of a fresh ``hotspan stats``, more than everything else it imports, and
    the answer needs none of it. Only for commands of hotspan's own, whose answers never
    touch pandas (``stats``, ``serve``): never around a user's program (``hotspan run``) or
    Spark (which hands its rows over through pandas)."""
    if "pandas" in sys.modules:  # loaded already: nothing to save
        yield
        return
    finder = _RefusePandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


# --------------------------------------------------------------------------- files


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` beside ``path`` and rename it into place (the library's atomic writer)."""
    from ..formats._base import atomic_path

    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        write(tmp)


def export_trace(table: pa.Table, path: Path) -> None:
    from ..formats import export

    try:
        export(table, path)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None


def _load_one(path: str, run: str | None = None) -> pa.Table:
    import warnings

    from ..formats import load
    from ..formats._base import TraceFileWarning

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", TraceFileWarning)
            table = load(path, run=run)
        for warning in said:  # rows left out of a damaged file: one line each, no source line
            if issubclass(warning.category, TraceFileWarning):
                print(f"hotspan: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        return table
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(message if path in message else f"{path}: {message}") from None


def load_traces(paths: Sequence[str], run: str | None = None) -> pa.Table:
    """One table from one or more traces (ranks written to separate files, say); ``run``: of
    a directory holding several runs, that one (``hotspan.load``'s ``run=``)."""
    tables = [_load_one(p, run) for p in paths]
    if len(tables) == 1:
        return tables[0]
    # The first file's metadata stands for the whole (concat_tables keeps it).
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables]).unify_dictionaries()


def parse_by(text: str | None, default: Sequence[str] = DEFAULT_BY) -> tuple[str, ...]:
    from .._schema import SPAN_SCHEMA

    if text is None:
        return tuple(default)
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise CliError("--by: give one or more column names, comma-separated")
    # device: derived (analysis.statistics.device_labels); test: on runs of pytest --hotspan
    # (formats.dataset.TEST_COLUMN, from each part's metadata)
    known = (*SPAN_SCHEMA.names, "device", "test")
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise CliError(
            f"--by: no column {', '.join(map(repr, unknown))}; columns: {', '.join(known)}"
        )
    if len(set(keys)) != len(keys):
        raise CliError(f"--by: a column is named twice in {text!r}")
    return keys


# --------------------------------------------------------------------------- filters


def _parse_filters(filters: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """--filter COLUMN~REGEX / COLUMN=VALUE as (column, op, value)."""
    parsed = []
    for text in filters:
        for op in ("~", "="):
            column, sep, value = text.partition(op)
            if sep:
                break
        else:
            raise CliError(f"--filter: expected COLUMN~REGEX or COLUMN=VALUE, not {text!r}")
        parsed.append((column.strip(), op, value))
    return tuple(parsed)


def _time_bound(text: str | None, option: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise CliError(
            f"{option}: expected seconds from the run's start (12.5) or epoch nanoseconds, "
            f"not {text!r}"
        ) from None
    if value < 0 or math.isnan(value):
        raise CliError(f"{option}: must be >= 0, not {text!r}")
    return value


def add_filter_options(parser: argparse.ArgumentParser, *, overlap: bool = False) -> None:
    """The span filter's options (analysis/filters.py), the same on every command that reads
    spans. ``overlap``: --since/--until keep the spans overlapping the window (a timeline's
    view of it: ``export``), not only those starting in it (``stats``' question)."""
    parser.set_defaults(window_overlap=overlap)
    group = parser.add_argument_group("which spans")
    group.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="COL~REGEX",
        help="only spans whose COL matches REGEX (COL~REGEX) or equals VALUE (COL=VALUE), e.g. "
        "name~^fwd; repeat to require several",
    )
    group.add_argument(
        "--category",
        action="append",
        default=[],
        metavar="CAT",
        help="only spans of category CAT or below it (sync takes sync/compute); repeat for several",
    )
    group.add_argument("--rank", metavar="R[,R...]", help="only spans of these ranks")
    group.add_argument(
        "--thread",
        action="append",
        default=[],
        metavar="NAME|ID",
        help="only spans of this thread (name or id); repeat for several",
    )
    if overlap:
        since = "only spans that end after T (or start at it): seconds from the run's start, or epoch ns"
        until = "only spans that start before T (as --since): with --since, every span overlapping the window"
    else:
        since = "only spans that start at or after T: seconds from the run's start, or epoch ns"
        until = "only spans that start before T (as --since)"
    group.add_argument("--since", metavar="T", help=since)
    group.add_argument("--until", metavar="T", help=until)
    group.add_argument(
        "--min-ms", type=float, metavar="MS", help="only spans of at least MS milliseconds"
    )
    group.add_argument(
        "--run",
        metavar="ID",
        help="of a directory holding several runs, the run ID (default: the newest; all: every "
        "run; hotspan runs lists them)",
    )


def span_filter(args: argparse.Namespace) -> SpanFilter:
    """The filter the options of :func:`add_filter_options` ask for."""
    from ..analysis.filters import FilterError, SpanFilter

    ranks = None
    if args.rank is not None:
        try:
            ranks = tuple(int(r) for r in args.rank.split(",") if r.strip())
        except ValueError:
            raise CliError(
                f"--rank: expected rank numbers, comma-separated, not {args.rank!r}"
            ) from None
    if args.min_ms is not None and not args.min_ms >= 0:
        raise CliError(f"--min-ms must be >= 0, not {args.min_ms}")
    try:
        return SpanFilter(
            where=_parse_filters(args.filter),
            categories=tuple(args.category),
            ranks=ranks,
            threads=tuple(args.thread),
            since=_time_bound(args.since, "--since"),
            until=_time_bound(args.until, "--until"),
            min_ns=None if args.min_ms is None else round(args.min_ms * 1e6),
            run=args.run,
            overlap=getattr(args, "window_overlap", False),
        )
    except FilterError as exc:
        raise CliError(f"--filter: {exc}") from None


def open_spans_for(paths: Sequence[str], args: argparse.Namespace, engine: Any = None) -> Spans:
    """The spans of ``paths`` after the filter options, held by the engine the analysis layer
    chooses (analysis/_engine.py); load errors as one line naming the file."""
    import warnings

    from ..analysis._engine import open_spans
    from ..formats._base import TraceFileWarning

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", TraceFileWarning)
            spans = open_spans(list(paths), span_filter(args), engine)
        for warning in said:  # rows left out of a damaged file: one line each, no source line
            if issubclass(warning.category, TraceFileWarning):
                print(f"hotspan: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        return spans
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(
            message if any(p in message for p in paths) else f"{', '.join(paths)}: {message}"
        ) from None


def load_filtered(path: str, args: argparse.Namespace) -> pa.Table:
    """One trace loaded whole (export, gantt, report), after the filter options."""
    from ..analysis.filters import filter_table

    table = load_traces([path], getattr(args, "run", None))  # --run picks the run's parts
    return filter_table(table, span_filter(args))


def engine_of(args: argparse.Namespace) -> Any:
    name = getattr(args, "engine", None)
    if name in (None, "auto"):
        return None
    if name == "spark":
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise CliError(
                "--engine spark: pyspark is not installed (pip install pyspark)"
            ) from None
        return SparkSession.builder.getOrCreate()  # the user's own Spark settings
    return name
