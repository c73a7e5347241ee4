"""The ``hotspan`` command line (also ``python -m hotspan``).

Every command that reads a trace takes any format ``hotspan.load`` reads. Bad input
(a missing or corrupt file, an unknown format, a bad option) is one line on stderr naming
the file and the problem, and exit status 2; files are written under a temporary name and
renamed into place.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..units import human_count, human_ns, human_rate

from .errors import EXIT_BAD_INPUT, CliError, check_output  # noqa: F401  (CliError here too: command modules' old home)

DEFAULT_BY = ("category", "name")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


# --------------------------------------------------------------------------- files


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` beside ``path`` and rename it into place (the library's atomic writer)."""
    from ..formats.base import atomic_path

    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        write(tmp)


def _beside(path: Path, extension: str) -> Path:
    """``path`` with its trace extension (``.json.gz`` counts as one) replaced."""
    from ..formats import EXTENSIONS

    name = path.name
    for known in sorted(EXTENSIONS, key=len, reverse=True):
        if name.lower().endswith(known):
            return path.with_name(name[: -len(known)] + extension)
    return path.with_name(path.stem + extension)


def _export(table: pa.Table, path: Path) -> None:
    from ..formats import export

    try:
        export(table, path)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None


def _load_one(path: str) -> pa.Table:
    import warnings

    from ..formats import load
    from ..formats.base import TraceFileWarning

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", TraceFileWarning)
            table = load(path)
        for warning in said:  # rows left out of a damaged file: one line each, no source line
            if issubclass(warning.category, TraceFileWarning):
                print(f"hotspan: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        return table
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(message if path in message else f"{path}: {message}") from None


def _load(paths: Sequence[str]) -> pa.Table:
    """One table from one or more traces (ranks written to separate files, say)."""
    tables = [_load_one(p) for p in paths]
    if len(tables) == 1:
        return tables[0]
    # The first file's metadata stands for the whole (concat_tables keeps it).
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables]).unify_dictionaries()


def _by(text: str | None, default: Sequence[str] = DEFAULT_BY) -> tuple[str, ...]:
    from .._schema import SPAN_SCHEMA

    if text is None:
        return tuple(default)
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise CliError("--by: give one or more column names, comma-separated")
    known = (*SPAN_SCHEMA.names, "device")  # device: derived (analysis.statistics.device_labels)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise CliError(f"--by: no column {', '.join(map(repr, unknown))}; columns: {', '.join(known)}")
    if len(set(keys)) != len(keys):
        raise CliError(f"--by: a column is named twice in {text!r}")
    return keys


# --------------------------------------------------------------------------- rendering


def _console(stderr: bool = False):
    """A console as wide as the terminal; piped or captured, as wide as ``COLUMNS`` says
    (80 when unset), so that ``COLUMNS=200 hotspan stats t.parquet | less`` is wide."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _percent(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 100:.1f}%"


#: The columns of the stats table: header -> (stats column, formatter). Their order on screen.
_STAT_HEADS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "count": ("count", lambda v: f"{v:,}"),
    "total": ("total_ns", human_ns),
    "self": ("self_ns", human_ns),
    "mean": ("mean_ns", human_ns),
    "min": ("min_ns", human_ns),
    "p50": ("p50_ns", human_ns),
    "p90": ("p90_ns", human_ns),
    "p99": ("p99_ns", human_ns),
    "max": ("max_ns", human_ns),
    "share": ("share", _percent),
    "busy": ("busy", _percent),
    "errors": ("errors", lambda v: f"{v:,}"),
    "arg sum": ("arg_sum", human_count),
    "arg/s": ("arg_per_s", human_rate),
}
#: Which columns come first when the width is short: the rest only while they fit.
_STAT_PRIORITY = ("count", "total", "mean", "p50", "p99", "share", "self", "p90", "max", "min", "errors", "arg/s",
                  "busy", "arg sum")
#: Shown unless --all or --columns says otherwise (when the width allows).
_STAT_DEFAULT = ("count", "total", "self", "mean", "p50", "p90", "p99", "max", "share", "errors", "arg/s")
_KEY_MIN_WIDTH = 10  # a name column is never squeezed below this (longer names end in "…")


def _stat_column(head: str) -> str:
    """A stats column from what the user typed: a header (``p99``, ``arg/s``) or a column
    name (``p99_ns``, ``arg_per_s``)."""
    head = head.strip()
    if head in _STAT_HEADS:
        return _STAT_HEADS[head][0]
    for column, _ in _STAT_HEADS.values():
        if head == column:
            return column
    raise KeyError(head)


def _stat_head(column: str) -> str:
    return next(head for head, (col, _) in _STAT_HEADS.items() if col == column)


def _ellipsize(text: str, width: int) -> str:
    """A key cut to ``width`` in its middle: ``train/compute`` and ``train/comms`` stay apart
    (``tr…compute``, ``trai…comms``) where cutting the end would make both ``train/com…``."""
    from ..report.gantt import fit_label

    return fit_label(text, width)


def _fitted_table(keys: list[tuple[str, list[str]]], values: list[tuple[str, list[str]]], width: int,
                  title: str | None = None, order: Sequence[str] | None = None):
    """A table of text columns that fits ``width``: the key columns (left) shrink down to
    ``_KEY_MIN_WIDTH`` with an ellipsis in the middle; the value columns (right-aligned numbers, in
    priority order) are dropped from the last while they do not fit, and never cut; those
    kept are shown in ``order`` (their heads; default: as given). Returns the rich table and
    the value heads left out."""
    from rich import box
    from rich.table import Table

    gap = 2  # a padding space and the (blank) divider between two columns; no outer edge

    def need(column: tuple[str, list[str]]) -> int:
        head, cells = column
        return max([len(head), *(len(c) for c in cells)])

    key_need = [need(c) for c in keys]
    key_min = [min(w, _KEY_MIN_WIDTH) for w in key_need]
    chosen = list(values)
    while chosen:
        total = sum(key_min) + sum(need(c) for c in chosen) + gap * (len(keys) + len(chosen) - 1)
        if total <= width:
            break
        chosen.pop()
    left_out = [head for head, _ in values[len(chosen):]]
    room = width - sum(need(c) for c in chosen) - gap * (len(keys) + len(chosen) - 1)
    # The key columns get their natural width when it fits, else the room shared out.
    key_width = list(key_min)
    spare = max(room - sum(key_min), 0)
    for i, natural in enumerate(key_need):
        extra = min(natural - key_width[i], spare)
        key_width[i] += extra
        spare -= extra
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold", title=title,
                title_justify="left")
    for (head, _), w in zip(keys, key_width):
        out.add_column(_ellipsize(head, w), width=w, no_wrap=True, overflow="ellipsis")
    if order is not None:
        chosen.sort(key=lambda column: list(order).index(column[0]))
    for column in chosen:
        out.add_column(column[0], justify="right", width=need(column), no_wrap=True)
    rows = len(keys[0][1]) if keys else (len(chosen[0][1]) if chosen else 0)
    for i in range(rows):
        out.add_row(*(_ellipsize(cells[i], w) for (_, cells), w in zip(keys, key_width)),
                    *(cells[i] for _, cells in chosen))
    return out, left_out


def _stats_renderable(result: pa.Table, by: Sequence[str], width: int, heads: Sequence[str] = _STAT_DEFAULT,
                      title: str | None = None):
    """The stats rows as a table that fits ``width``: ``heads`` in screen order, dropped from
    the least important (see ``_STAT_PRIORITY``) while they do not fit."""
    rows = result.to_pylist()
    keys = [(key, ["-" if r[key] is None else str(r[key]) for r in rows]) for key in by]
    ranked = sorted(heads, key=lambda h: _STAT_PRIORITY.index(h) if h in _STAT_PRIORITY else len(_STAT_PRIORITY))
    values = [(head, [_STAT_HEADS[head][1](r[_STAT_HEADS[head][0]]) for r in rows]) for head in ranked]
    return _fitted_table(keys, values, width, title=title, order=heads)


def _phases_renderable(result: pa.Table):
    from rich.table import Table

    out = Table(show_header=True, header_style="bold", title="phases", title_justify="left")
    for head, justify in (("rank", "left"), ("phase", "left"), ("time", "right"), ("steps", "right"),
                          ("per step", "right"), ("share", "right")):
        out.add_column(head, justify=justify)
    for row in result.to_pylist():
        top = row["phase"] == row["category"]
        share = row["share"]
        out.add_row(
            "mean" if row["rank"] is None else str(row["rank"]),
            row["phase"] if top else "  " + row["phase"],
            human_ns(row["time_ns"]),
            human_count(row["steps"]),
            human_ns(row["per_step_ns"]),
            "-" if share is None or math.isnan(share) else f"{share * 100:.0f}%",
            style="bold" if top else None,
        )
    return out


def _sorted(result: pa.Table, column: str, by: Sequence[str], ascending: bool | None = None) -> pa.Table:
    # Keys read best A to Z; numbers biggest first (unless --asc).
    if ascending is None:
        ascending = column in by
    order = "ascending" if ascending else "descending"
    return result.take(pc.sort_indices(result, sort_keys=[(column, order)]))  # nulls last


def _json_rows(result: pa.Table) -> str:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = [{k: clean(v) for k, v in row.items()} for row in result.to_pylist()]
    return json.dumps(rows, indent=1, default=str)


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
        raise CliError(f"{option}: expected seconds from the run's start (12.5) or epoch nanoseconds, "
                       f"not {text!r}") from None
    if value < 0 or value != value:
        raise CliError(f"{option}: must be >= 0, not {text!r}")
    return value


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    """The span filter's options (analysis/filters.py), the same on every command that reads spans."""
    group = parser.add_argument_group("which spans")
    group.add_argument("--filter", action="append", default=[], metavar="COL~REGEX",
                       help="only spans whose COL matches REGEX (COL~REGEX) or equals VALUE (COL=VALUE), e.g. "
                            "name~^fwd; repeat to require several")
    group.add_argument("--category", action="append", default=[], metavar="CAT",
                       help="only spans of category CAT or below it (sync takes sync/compute); repeat for several")
    group.add_argument("--rank", metavar="R[,R...]", help="only spans of these ranks")
    group.add_argument("--thread", action="append", default=[], metavar="NAME|ID",
                       help="only spans of this thread (name or id); repeat for several")
    group.add_argument("--since", metavar="T",
                       help="only spans that start at or after T: seconds from the run's start, or epoch ns")
    group.add_argument("--until", metavar="T", help="only spans that start before T (as --since)")
    group.add_argument("--min-ms", type=float, metavar="MS", help="only spans of at least MS milliseconds")
    group.add_argument("--run", metavar="ID", help="only the run ID of a directory holding several (hotspan runs)")


def span_filter(args: argparse.Namespace):
    """The filter the options of :func:`add_filter_options` ask for."""
    from ..analysis.filters import FilterError, SpanFilter

    ranks = None
    if args.rank is not None:
        try:
            ranks = tuple(int(r) for r in args.rank.split(",") if r.strip())
        except ValueError:
            raise CliError(f"--rank: expected rank numbers, comma-separated, not {args.rank!r}") from None
    if args.min_ms is not None and not args.min_ms >= 0:
        raise CliError(f"--min-ms must be >= 0, not {args.min_ms}")
    try:
        return SpanFilter(where=_parse_filters(args.filter), categories=tuple(args.category), ranks=ranks,
                          threads=tuple(args.thread), since=_time_bound(args.since, "--since"),
                          until=_time_bound(args.until, "--until"),
                          min_ns=None if args.min_ms is None else round(args.min_ms * 1e6), run=args.run)
    except FilterError as exc:
        raise CliError(f"--filter: {exc}") from None


def _open_spans(paths: Sequence[str], args: argparse.Namespace, engine: Any = None):
    """The spans of ``paths`` after the filter options, held by the engine the analysis layer
    chooses (analysis/engine.py); load errors as one line naming the file."""
    import warnings

    from ..analysis.engine import open_spans
    from ..formats.base import TraceFileWarning

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", TraceFileWarning)
            spans = open_spans(list(paths), span_filter(args), engine)
        for warning in said:  # rows left out of a damaged file: one line each, no source line
            if issubclass(warning.category, TraceFileWarning):
                print(f"hotspan: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        return spans
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(message if any(p in message for p in paths) else f"{', '.join(paths)}: {message}") from None


def _load_filtered(path: str, args: argparse.Namespace) -> pa.Table:
    """One trace loaded whole (export, gantt, report), after the filter options."""
    from ..analysis.filters import filter_table

    table = _load([path])
    return filter_table(table, span_filter(args))


def _engine(args: argparse.Namespace) -> Any:
    name = getattr(args, "engine", None)
    if name in (None, "auto"):
        return None
    if name == "spark":
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise CliError("--engine spark: pyspark is not installed (pip install pyspark)") from None
        return SparkSession.builder.getOrCreate()  # the user's own Spark settings
    return name


def _stat_heads(args: argparse.Namespace) -> tuple[str, ...]:
    if args.columns:
        heads = []
        for text in args.columns.split(","):
            if not text.strip():
                continue
            try:
                heads.append(_stat_head(_stat_column(text)))
            except KeyError:
                raise CliError(f"--columns: no column {text.strip()!r}; choose from {', '.join(_STAT_HEADS)}") from None
        return tuple(dict.fromkeys(heads))
    return tuple(_STAT_HEADS) if args.all else _STAT_DEFAULT


def _has_steps(phase_rows: pa.Table) -> bool:
    """A step structure: some top-level category ran more than once and holds sub-categories."""
    return any(r["phase"] != r["category"] and (r["steps"] or 0) > 1 for r in phase_rows.to_pylist())


def _dropped_note(meta: dict[bytes, bytes] | None) -> str | None:
    from .._schema import META_DROPPED, meta_dict

    dropped = meta_dict(meta, META_DROPPED)
    total = dropped.get("total") if dropped else None
    if isinstance(total, int) and total > 0:
        return f"{total:,} spans were dropped while recording: these statistics miss them"
    return None


# --------------------------------------------------------------------------- commands


def _print_stats(console, result: pa.Table, by: Sequence[str], heads: Sequence[str] = _STAT_DEFAULT) -> None:
    """The stats table fitted to the console, then the instants (spans of no duration: counts,
    not times) in a table of their own."""
    from ..analysis.statistics import split_instants

    timed, instants = split_instants(result)
    if timed.num_rows or not instants.num_rows:
        rendered, left_out = _stats_renderable(timed, by, console.width, heads)
        console.print(rendered)
        if left_out:
            console.print(f"[dim]({', '.join(left_out)} left out to fit {console.width} columns: "
                          f"--columns, --all, or a wider COLUMNS)[/dim]")
    if instants.num_rows:
        rendered, _ = _stats_renderable(instants, by, console.width, ("count", "errors", "arg sum"), title="instants")
        console.print(rendered)


def cmd_stats(args: argparse.Namespace) -> int:
    from ..analysis import phases, stats

    by = _by(args.by)
    sort = args.sort or "total_ns"
    if sort not in by:
        try:
            sort = _stat_column(sort)
        except KeyError:
            raise CliError(f"--sort: no column {sort!r}; choose from {', '.join((*by, *_STAT_HEADS))}") from None
    if args.top is not None and args.top < 1:
        raise CliError(f"--top must be at least 1, not {args.top}")
    heads = _stat_heads(args)
    csv_path = check_output(args.csv, trace=False) if args.csv else None  # directories first, then work
    with _open_spans(args.traces, args, _engine(args)) as spans:
        if args.by is None:
            by = spans.default_by()  # with device rows: device time apart from the host's
        result = spans.stats(by)
        # the phases only where they are shown (--json and --jsonl print the rows alone)
        shown = args.phases or not (args.json or args.jsonl)
        all_phases = spans.phases() if shown and result.num_rows else None
        meta = spans.metadata()
    result = _sorted(result, sort, by, True if args.asc else None)
    if args.top is not None:
        result = result.slice(0, args.top)
    if csv_path is not None:
        import pyarrow.csv as pcsv

        _write_atomically(csv_path, lambda tmp: pcsv.write_csv(result, tmp))
    if args.json:
        print(_json_rows(result))
        return 0
    if args.jsonl:
        for row in json.loads(_json_rows(result)):
            print(json.dumps(row, default=str))
        return 0
    console = _console()
    _print_stats(console, result, by, heads)
    if all_phases is not None and all_phases.num_rows and (args.phases or _has_steps(all_phases)):
        console.print(_phases_renderable(all_phases))
    note = _dropped_note(meta)
    if note:
        console.print(f"[yellow]note: {note}[/yellow]")
    if csv_path is not None:
        console.print(f"wrote {result.num_rows} rows to [cyan]{csv_path}[/cyan]")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = check_output(args.output)
    table = _load_filtered(args.trace, args)
    _export(table, out)
    print(f"{table.num_rows:,} spans: {args.trace} -> {out}")
    return 0


def cmd_gantt(args: argparse.Namespace) -> int:
    from ..report import gantt, step_gantts
    from ..report.gantt import LABEL_WIDTH

    if args.width is not None and args.width < 10:
        raise CliError(f"--width must be at least 10, not {args.width}")
    table = _load_filtered(args.trace, args)
    console = _console()
    # Beside the timeline: the labels, two borders, and with --step each lane's duration.
    beside = LABEL_WIDTH + 3 + (12 if args.step is not None else 0)
    if args.width is None:
        args.width = max(console.width - beside, 10)  # the terminal's width (COLUMNS when piped)
    elif args.width + beside > console.width:
        from rich.console import Console

        # An explicit --width is honoured whole, wider than the terminal if need be.
        console = Console(highlight=False, width=args.width + beside)
    if args.step is None:
        console.print(gantt(table, width=args.width))
        return 0
    try:
        charts = step_gantts(table, args.step, width=args.width)
    except ValueError as exc:
        raise CliError(f"{args.trace}: {exc}") from None
    for chart in charts:
        console.print(chart)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import html_report

    out = check_output(args.output, trace=False)
    table = _load_filtered(args.trace, args)
    page = html_report(table, title=args.title or f"hotspan report: {Path(args.trace).name}")
    _write_atomically(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    print(f"{table.num_rows:,} spans -> {out}")
    return 0


def _environment(meta: dict[bytes, bytes] | None) -> dict | None:
    from .._schema import META_ENV, meta_dict

    return meta_dict(meta, META_ENV)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..analysis.benchmark_comparison import is_benchmark_json

    by = _by(args.by)
    if args.threshold < 0 or not math.isfinite(args.threshold):
        raise CliError(f"--threshold must be a fraction >= 0 (0.05 is 5%), not {args.threshold}")
    if args.min_count < 1:
        raise CliError(f"--min-count must be at least 1, not {args.min_count}")
    if not 0 < args.alpha < 1:
        raise CliError(f"--alpha must be between 0 and 1 (0.05 is 5%), not {args.alpha}")
    if is_benchmark_json(args.base) or is_benchmark_json(args.new):  # pytest-benchmark JSON, told by content
        return _compare_benchmark_files(args)
    engine = _engine(args)
    with _open_spans([args.base], args, engine) as base, _open_spans([args.new], args, engine) as new:
        _warn_environments(args, _environment(base.metadata()), _environment(new.metadata()))
        from ..analysis.api import compare_spans

        try:
            result = compare_spans(base, new, by=by, threshold=args.threshold, min_count=args.min_count,
                                   alpha=args.alpha, confidence=0.95, resamples=2000, seed=0,
                                   normalize=args.normalize, shift=not args.absolute)
        except ValueError as exc:  # --normalize naming a span a trace lacks
            raise CliError(str(exc)) from None
    return _print_comparison(args, result, by)


def _warn_environments(args: argparse.Namespace, env_base: dict | None, env_new: dict | None) -> None:
    """A warning when the traces were recorded in different environments."""
    if env_base and env_new and env_base.get("digest") != env_new.get("digest"):
        differences = [
            f"{key} {env_base.get(key)!s} -> {env_new.get(key)!s}"
            for key in ("host", "python", "hotspan", "config") if env_base.get(key) != env_new.get(key)
        ]
        print(f"hotspan compare: warning: the traces were recorded in different environments "
              f"({'; '.join(differences) or 'digests differ'}): timings may not be comparable", file=sys.stderr)
    elif not (env_base and env_new):
        missing = args.base if not env_base else args.new
        print(f"hotspan compare: note: {missing} records no environment digest; cannot check that the "
              f"environments match", file=sys.stderr)


def shift_line(result: pa.Table) -> str | None:
    """What ``compare`` judged against, in words: the machine's shift or the reference span."""
    from ..analysis.comparison import shift_of

    said = shift_of(result)
    if not said:
        return None
    if said.get("normalize"):
        return (f"normalized by {said['normalize']!r}: its median moved {said['shift'] * 100:+.1f}%; every group "
                f"is judged against that")
    return (f"every group moved {said['shift'] * 100:+.0f} ± {said['spread'] * 100:.0f}% ({said['moved']} of "
            f"{said['groups']}): the machine, not the code; each group is judged against that shift "
            f"(--absolute: raw times)")


def _print_comparison(args: argparse.Namespace, result: pa.Table, by: Sequence[str]) -> int:
    rows = result.to_pylist()
    if not any(r["verdict"] not in ("new", "gone") for r in rows):
        raise CliError(f"nothing to compare: {args.base} and {args.new} have no span group "
                       f"({', '.join(by)}) in common")
    slower = [r for r in rows if r["verdict"] == "slower"]
    missing = [r for r in rows if r["verdict"] in ("new", "gone")]
    if args.json:
        print(json.dumps([{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                          for r in rows], indent=1, default=str))
    else:
        console = _console()
        keys = [(key, ["-" if r[key] is None else str(r[key]) for r in rows]) for key in by]
        values = [
            ("verdict", [r["verdict"] for r in rows]),
            ("p50 base", [human_ns(r["p50_ns_base"]) for r in rows]),
            ("p50 new", [human_ns(r["p50_ns_new"]) for r in rows]),
            ("Δp50", [_fmt_change(r["p50_ns_change"]) for r in rows]),
        *([("judged", [_fmt_change(r["judged_change"]) for r in rows])] if shift_line(result) else []),
            ("95% interval", [_fmt_interval(r["change_low"], r["change_high"]) for r in rows]),
            ("count", [f"{r['count_base']:,} → {r['count_new']:,}" for r in rows]),
            ("p", [_fmt_p(r["p_value"]) for r in rows]),
            ("Δmean", [_fmt_change(r["mean_ns_change"]) for r in rows]),
        ]
        # Fitted in priority order (the verdict first), shown in reading order (the verdict last).
        out, _ = _fitted_table(keys, values, console.width, order=[
            "count", "p50 base", "p50 new", "Δp50", "judged", "95% interval", "p", "Δmean", "verdict"])
        styles = {"slower": "bold red", "faster": "green", "new": "cyan", "gone": "yellow", "few": "dim",
                  "instant": "dim"}
        for i, r in enumerate(rows):
            out.rows[i].style = styles.get(r["verdict"])
        console.print(out)
        line = shift_line(result)
        if line:
            console.print(f"[bold]{line}[/bold]")
        console.print(f"{len(slower)} of {len(rows)} slower: median up significantly (Mann-Whitney U p < "
                      f"{args.alpha:g}) and its whole 95% interval above +{args.threshold * 100:g}%")
        if missing:
            console.print(f"{sum(r['verdict'] == 'gone' for r in rows)} gone, "
                          f"{sum(r['verdict'] == 'new' for r in rows)} new"
                          + (" (--fail-on-missing: failing)" if args.fail_on_missing else ""))
    return 1 if slower or (missing and args.fail_on_missing) else 0


def _fmt_change(change: float | None) -> str:
    if change is None:
        return "-"
    if math.isinf(change):
        return "+inf%"
    return f"{change * 100:+.1f}%"


def _fmt_interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{_fmt_change(low)}, {_fmt_change(high)}]"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


_VERDICT_STYLES = {"slower": "bold red", "faster": "green", "new": "cyan", "gone": "yellow", "few": "dim"}


def _compare_benchmark_files(args: argparse.Namespace) -> int:
    """``compare`` on two pytest-benchmark JSON files (analysis/benchmark_comparison.py): per
    benchmark and per span, compare's rule and exit status."""
    from ..analysis.benchmark_comparison import (BenchmarkFileError, compare_benchmarks, is_benchmark_json,
                                                 load_benchmark_json)

    kinds = [is_benchmark_json(args.base), is_benchmark_json(args.new)]
    if kinds[0] != kinds[1]:
        which, other = (args.base, args.new) if kinds[0] else (args.new, args.base)
        raise CliError(f"{which} is a pytest-benchmark file and {other} is not: compare two traces or two "
                       f"pytest-benchmark files")
    if args.by is not None:
        raise CliError("--by applies to traces; pytest-benchmark files are compared per benchmark and per span "
                       "(category, name)")
    try:
        base, new = load_benchmark_json(args.base), load_benchmark_json(args.new)
    except BenchmarkFileError as exc:
        raise CliError(str(exc)) from None
    result = compare_benchmarks(base, new, threshold=args.threshold, min_count=args.min_count, alpha=args.alpha)
    benches, spans = result["benchmarks"], result["spans"]
    if not any(r["verdict"] not in ("new", "gone") for r in benches):
        raise CliError(f"nothing to compare: {args.base} and {args.new} have no benchmark in common")
    rows = benches + spans
    slower = [r for r in rows if r["verdict"] == "slower"]
    missing = [r for r in rows if r["verdict"] in ("new", "gone")]
    if args.json:
        print(json.dumps({key: [_finite_values(r) for r in value] for key, value in result.items()}, indent=1))
    else:
        _print_benchmark_comparison(args, benches, spans, slower, missing)
    return 1 if slower or (missing and args.fail_on_missing) else 0


def _finite_values(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _print_benchmark_comparison(args: argparse.Namespace, benches: list[dict], spans: list[dict], slower: list[dict],
                                missing: list[dict]) -> None:
    out = _console()
    keys = [("benchmark", [r["benchmark"] for r in benches])]
    values = [  # in priority order: the last ones go first when the terminal is narrow
        ("verdict", [r["verdict"] for r in benches]),
        ("Δmedian", [_fmt_change(r["median_s_change"]) for r in benches]),
        ("median base", [_human_seconds(r["median_s_base"]) for r in benches]),
        ("median new", [_human_seconds(r["median_s_new"]) for r in benches]),
        ("95% interval", [_fmt_interval(r["change_low"], r["change_high"]) for r in benches]),
        ("Δmean", [_fmt_change(r["mean_s_change"]) for r in benches]),
        ("rounds", [f"{_count_or_dash(r['rounds_base'])} → {_count_or_dash(r['rounds_new'])}" for r in benches]),
    ]
    table, _ = _fitted_table(keys, values, out.width, title="benchmarks (pytest-benchmark's timings)", order=[
        "median base", "median new", "Δmedian", "95% interval", "Δmean", "rounds", "verdict"])
    _style_verdicts(table, benches)
    out.print(table)
    if spans:
        keys = [("benchmark", [r["benchmark"] for r in spans]),
                ("span", [f"{r['category']}/{r['name']}" if r["category"] else r["name"] for r in spans])]
        values = [
            ("verdict", [r["verdict"] for r in spans]),
            ("Δp50", [_fmt_change(r["p50_ns_change"]) for r in spans]),
            ("p50 base", [human_ns(r["p50_ns_base"]) for r in spans]),
            ("p50 new", [human_ns(r["p50_ns_new"]) for r in spans]),
            ("Δp99", [_fmt_change(r["p99_ns_change"]) for r in spans]),
            ("count", [f"{r['count_base']:,} → {r['count_new']:,}" for r in spans]),
        ]
        table, _ = _fitted_table(keys, values, out.width, title="spans (pytest --hotspan's summaries)", order=[
            "p50 base", "p50 new", "Δp50", "Δp99", "count", "verdict"])
        _style_verdicts(table, spans)
        out.print(table)
    else:
        out.print("no span summaries in these files (record them with pytest --hotspan)")
    out.print(f"{len(slower)} of {len(benches) + len(spans)} slower: a benchmark whose median rose significantly "
              f"(rank test p < {args.alpha:g}, or interquartile ranges apart where the rounds were not saved) by "
              f"more than +{args.threshold * 100:g}%; a span whose p50 rose by more than +{args.threshold * 100:g}%")
    if missing:
        out.print(f"{sum(r['verdict'] == 'gone' for r in missing)} gone, "
                  f"{sum(r['verdict'] == 'new' for r in missing)} new"
                  + (" (--fail-on-missing: failing)" if args.fail_on_missing else ""))


def _style_verdicts(table, rows: list[dict]) -> None:
    for i, r in enumerate(rows):
        table.rows[i].style = _VERDICT_STYLES.get(r["verdict"])


def _human_seconds(value: float | None) -> str:
    return human_ns(None if value is None else value * 1e9)


def _count_or_dash(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _print_recording_summary(table: pa.Table, path: Path, elapsed: float, dropped: int, *, label: str,
                             stderr: bool = False, top: int | None = None) -> None:
    from ..analysis import stats
    from ..analysis.statistics import default_by

    console = _console(stderr=stderr)
    threads = len(pc.unique(table.column("thread_id"))) if table.num_rows else 0
    console.print(
        f"[bold]hotspan {label}[/bold]: {table.num_rows:,} spans on {threads} threads in {elapsed:.2f} s, "
        f"{dropped:,} dropped -> [cyan]{path}[/cyan]"
    )
    if table.num_rows:
        result = stats(table)
        if top is not None:
            result = result.slice(0, top)
        _print_stats(console, result, default_by(table))


def cmd_demo(args: argparse.Namespace) -> int:
    import hotspan
    from hotspan import demo

    from ..report import gantt

    if args.threads < 1 or args.steps < 1:
        raise CliError("--threads and --steps must be at least 1")
    out = check_output(args.output)
    # Beside the trace, a Chrome JSON copy that Perfetto UI opens directly.
    perfetto_json = _beside(out, ".json") if not out.name.lower().endswith(".json") else None
    hotspan.enable()
    hotspan.drain()  # start from nothing
    before = hotspan.dropped()
    start = time.perf_counter()
    demo.run(threads=args.threads, steps=args.steps)
    elapsed = time.perf_counter() - start
    table = hotspan.drain()
    _export(table, out)
    if perfetto_json is not None:
        _export(table, perfetto_json)
    _print_recording_summary(table, out, elapsed, hotspan.dropped() - before, label="demo")
    console = _console()
    console.print(gantt(table, width=max(min(100, console.width - 26), 10)))
    if perfetto_json is not None:
        console.print(f"open [cyan]{perfetto_json}[/cyan] in https://ui.perfetto.dev to explore the timeline")
    return 0


def _split_run_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s own options from the program and its arguments.

    Everything after the script (or after ``-m MODULE``) belongs to the program, options
    included, as with ``python -m cProfile``.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-o", "--output", "--live-min-ms"):  # run's options that take a value
            i += 2
        elif arg.startswith(("--output=", "--live-min-ms=")) or (arg.startswith("-o") and len(arg) > 2):
            i += 1
        elif arg == "-m":
            return argv[: i + 2], argv[i + 2 :]
        elif arg.startswith("-m") and len(arg) > 2:
            return argv[: i + 1], argv[i + 1 :]
        elif arg == "--":
            return argv[:i], argv[i + 1 :]
        elif arg.startswith("-"):
            i += 1  # --help or a bad option: argparse speaks to it
        else:
            return argv[:i], argv[i:]
    return argv, []


def cmd_run(args: argparse.Namespace) -> int:
    from ..recording.supervisor import ProgramError, resolve_program, run_program

    out = check_output(args.output)
    if args.live_min_ms is not None and args.live_min_ms < 0:
        raise CliError(f"--live-min-ms must be >= 0, not {args.live_min_ms}")
    if args.live_min_ms is not None:
        args.live = True  # a threshold for the live log asks for the live log
    try:
        resolve_program(args.program, args.module)  # a missing program: exit 2 before anything runs
    except ProgramError as exc:
        raise CliError(str(exc)) from None
    result = run_program(args.program, out, module=args.module,
                         live_min_ns=int((args.live_min_ms or 0) * 1e6) if args.live else None)
    # The summary goes to stderr: the program's stdout stays the program's.
    label = "run" if result.processes <= 1 else f"run ({result.processes} processes)"
    _print_recording_summary(result.table, out, result.elapsed, result.dropped, label=label, stderr=True, top=20)
    return result.status


def _check_port_free(host: str, port: int) -> None:
    """gRPC binds with SO_REUSEPORT and says only "Server did not start properly" when it cannot:
    try the address first, to name the problem (and not share a port with another server)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CliError(f"--listen: cannot resolve {host}: {exc}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise CliError(f"cannot listen on grpc://{host}:{port}: {exc.strerror or exc}") from None


def _lower_priority(steps: int) -> None:
    """Run this process ``steps`` nice levels lower. On Linux a nice value belongs to a thread
    and passes to the threads it starts, and pyarrow's import has already started some
    (jemalloc's): every thread running now is lowered, and gRPC's, started later, inherit."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        os.nice(steps)
        return
    target = min(os.getpriority(os.PRIO_PROCESS, 0) + steps, 19)
    for tid in os.listdir(tasks):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), target)
        except ProcessLookupError:
            pass  # a thread that has just exited


def cmd_collect(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..recording import collector
    from ..recording.recorder import stop_env_recorder

    stop_env_recorder()  # HOTSPAN_OUT inherited from a launcher is for the ranks, not for us
    if not args.max_put_mb > 0:
        raise CliError(f"--max-put-mb: expected a size in MiB above 0, not {args.max_put_mb}")
    if not 0 <= args.nice <= 19:
        raise CliError(f"--nice: expected 0-19 (how much lower than now to run), not {args.nice}")
    if args.nice:
        try:
            _lower_priority(args.nice)
        except OSError as exc:
            raise CliError(f"--nice {args.nice}: {exc.strerror or exc}") from None
    try:
        host, port = collector.parse_url(args.listen)
    except ValueError as exc:
        raise CliError(f"--listen: {exc}") from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out}: exists and is not a directory")
    token = args.token if args.token is not None else (os.environ.get("HOTSPAN_TOKEN") or None)
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    if port:
        _check_port_free(host, port)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # our one-line errors, not gRPC's log
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = collector.CollectorServer(out, f"grpc://{host}:{port}", token=token, log=sys.stderr,
                                               max_put_bytes=int(args.max_put_mb * (1 << 20)))
        except Exception as exc:  # noqa: BLE001 - pyarrow.flight says what: port in use, bad address
            raise CliError(f"cannot listen on grpc://{host}:{port}: {exc}") from None
        if host not in ("127.0.0.1", "localhost", "::1") and not token:
            print(f"hotspan collect: warning: listening on {host} without --token: anyone who can reach "
                  f"this port can write spans", file=sys.stderr)
        print(f"hotspan collect: listening on {server.url}, writing to {out}"
              f"{' (token required)' if token else ''}", flush=True)
        start = time.monotonic()
        try:
            while not stop.wait(0.2):
                if args.duration is not None and time.monotonic() - start >= args.duration:
                    break
        finally:
            server.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"hotspan collect: {server.spans:,} spans from {len(server.ranks)} rank(s) in {server.parts:,} parts "
          f"-> {out}" + (f"; {server.refused} put(s) refused" if server.refused else "")
          + (f"; {server.duplicates} resent batch(es) kept once" if server.duplicates else "")
          + (f"; {server.swept} temporary part(s) of a killed collector removed" if server.swept else ""), flush=True)
    return 0


# --------------------------------------------------------------------------- parser


def _add(sub, name: str, help: str, description: str, example: str, func) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  " + example.replace("\n", "\n  "),
    )
    parser.set_defaults(func=func)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hotspan",
        description="Record spans in hot loops; inspect the traces. A TRACE is any format hotspan "
        "exports (.parquet .arrow .feather .json .json.gz .pftrace .perfetto-trace .csv .jsonl), a Chrome JSON trace, or a "
        "directory of Parquet parts (hotspan.record(\"run/\"), hotspan collect --out run/).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  hotspan demo --threads 4 --steps 50\n  hotspan stats hotspan-demo.parquet --top 10",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = _add(sub, "demo", "run a built-in multi-threaded workload and write hotspan-demo.parquet",
                "Run a built-in workload (nested compute blocks, communication with byte counts, data loading) "
                "on several threads, write the spans to a trace (format from the extension) and a Chrome JSON "
                "copy beside it for Perfetto UI, and print statistics and a timeline.",
                "hotspan demo --threads 8 --steps 100 -o /tmp/demo.parquet", cmd_demo)
    demo.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    demo.add_argument("--steps", type=int, default=50, help="training-like steps per thread (default 50)")
    demo.add_argument("-o", "--output", default="hotspan-demo.parquet", help="where to write the spans")

    stats = _add(sub, "stats", "statistics per span: count, total, self, percentiles, share, args",
                 "Per group of spans (by category and name unless --by says otherwise): count, total, self time "
                 "(total minus direct children), mean, min, p50, p90, p99 (exact), max, share, busy, errors, arg "
                 "sum and arg per second. share is the group's self time over the summed self time of its "
                 "rank/thread (of the whole trace unless --by names rank, pid, thread_id or thread_name), so the "
                 "column adds up to 100%%; busy is total over the trace's wall time (nested spans count twice). "
                 "The table fits the terminal (COLUMNS when piped): count, total, mean, p50, p99 and share go "
                 "first, the others while they fit (--columns or --all to choose). Instants (spans of no "
                 "duration) are counted in a table of their own. Then the phases (each top-level category's "
                 "time per step and its sub-categories' shares) when the trace has steps. Several traces (one "
                 "per rank, say) are taken together. A dataset directory, or Parquet of 64 MiB or more "
                 "($HOTSPAN_STREAM_MIN_BYTES), is streamed through DuckDB with bounded memory "
                 "($HOTSPAN_MEMORY_LIMIT, default 1GB), to the same result.",
                 "hotspan stats trace.parquet --top 10\n"
                 "hotspan stats rank*.parquet --by rank,name --sort p99 --json\n"
                 "hotspan stats trace.parquet --filter 'name~^fwd' --category compute --rank 0,1 --sort p99 --asc\n"
                 "hotspan stats trace.json --csv out/stats.csv", cmd_stats)
    stats.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s), any supported format")
    stats.add_argument("--by", metavar="KEYS", help="comma-separated columns to group by (default category,name, "
                       "and device when the trace has device rows; device: host or cuda:N, derived per span)")
    stats.add_argument("--json", action="store_true", help="print the rows as JSON on stdout instead of a table")
    stats.add_argument("--csv", metavar="PATH", help="also write the rows to a CSV file")
    stats.add_argument("--jsonl", action="store_true", help="print the rows as JSON lines (one object a line)")
    stats.add_argument("--sort", metavar="COL",
                       help="column to sort by, as in the header (p99) or the JSON (p99_ns); default total; "
                            "numbers biggest first, names A to Z")
    stats.add_argument("--asc", action="store_true", help="sort ascending")
    stats.add_argument("--top", type=int, metavar="N", help="only the first N rows")
    add_filter_options(stats)
    stats.add_argument("--engine", choices=("auto", "memory", "duckdb", "spark"), default="auto",
                       help="who computes: auto (in memory below $HOTSPAN_STREAM_MIN_BYTES of Parquet, else "
                            "DuckDB), memory, duckdb, or spark (SparkSession.builder.getOrCreate(): your Spark "
                            "settings)")
    stats.add_argument("--columns", metavar="COLS",
                       help=f"the columns to show, comma-separated, from: {', '.join(_STAT_HEADS)}")
    stats.add_argument("--all", action="store_true", help="show every column (as the width allows)")
    stats.add_argument("--phases", action="store_true",
                       help="print the phases even when the trace has no step structure")

    export = _add(sub, "export", "convert a trace from any supported format to any other",
                  "Read TRACE and write it to OUT in the format OUT's extension names.",
                  "hotspan export trace.parquet trace.pftrace   # for ui.perfetto.dev", cmd_export)
    export.add_argument("trace", metavar="TRACE")
    export.add_argument("output", metavar="OUT")
    add_filter_options(export)

    gantt = _add(sub, "gantt", "a timeline in the terminal, one row per rank/thread",
                 "Draw the trace as a terminal timeline: one row per rank/thread, one glyph per category (the "
                 "innermost span at each moment), '!' where a span ended with an error. With --step NAME, one "
                 "chart per occurrence of that span (the n-th on every thread together), each with its duration.",
                 "hotspan gantt trace.parquet --width 120\nhotspan gantt trace.parquet --step step", cmd_gantt)
    gantt.add_argument("trace", metavar="TRACE")
    gantt.add_argument("--width", type=int, help="characters of timeline (default: what the terminal, or COLUMNS, "
                                                "leaves beside the labels)")
    gantt.add_argument("--step", metavar="NAME", help="one chart per occurrence of the span NAME")
    add_filter_options(gantt)

    report = _add(sub, "report", "a self-contained HTML report (summary, stats, phases, timeline)",
                  "Write one HTML file that needs nothing else (no network): summary, statistics, phases, and an "
                  "SVG timeline per rank/thread with details on hover (click a span to pin them; the link keeps it).",
                  "hotspan report trace.parquet -o report.html", cmd_report)
    report.add_argument("trace", metavar="TRACE")
    report.add_argument("-o", "--output", default="hotspan-report.html", help="default hotspan-report.html")
    report.add_argument("--title", help="page title (default: from the trace's file name)")
    add_filter_options(report)

    compare = _add(sub, "compare", "compare two traces span by span; exit 1 on a slowdown",
                   "For each span group: the median (p50) before and after, its change with a 95%% bootstrap "
                   "interval, the Mann-Whitney U p-value, the mean's change, and a verdict. A group is slower only "
                   "when the shift is significant (p < --alpha) and the whole interval of the median's change is "
                   "above --threshold: one outlier moving a mean, or a noisy run, is not a regression. Exit "
                   "status 1 when a group is slower (or, with --fail-on-missing, a group appeared or went), 2 "
                   "when the traces have no group in common, else 0. "
                   "Warns when the traces were recorded in different environments (host, Python, hotspan, "
                   "configuration). Two dataset directories (or large Parquet files) are streamed, as for stats. "
                   "Two pytest-benchmark JSON files (pytest --hotspan --benchmark-json=F) are "
                   "compared per benchmark and per span, by the same rule and exit status.",
                   "hotspan compare base.parquet new.parquet --threshold 0.10 --min-count 20\n"
                   "hotspan compare .benchmarks/*/0001_base.json .benchmarks/*/0002_new.json", cmd_compare)
    compare.add_argument("base", metavar="BASE")
    compare.add_argument("new", metavar="NEW")
    compare.add_argument("--threshold", type=float, default=0.05,
                         help="slowdown that fails, as a fraction (default 0.05 = 5%%)")
    compare.add_argument("--by", metavar="KEYS", help="comma-separated columns to group by (default category,name)")
    compare.add_argument("--min-count", type=int, default=1, metavar="N",
                         help="groups with fewer spans on either side are shown but not judged (default 1)")
    compare.add_argument("--alpha", type=float, default=0.05,
                         help="significance level of the rank test (default 0.05)")
    compare.add_argument("--fail-on-missing", action="store_true",
                         help="exit 1 when a span group is in one trace only")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    compare.add_argument("--normalize", metavar="NAME",
                         help="judge each group against the reference span NAME: divide each side by NAME's "
                              "median (a fixed workload timed in both runs)")
    compare.add_argument("--absolute", action="store_true",
                         help="judge raw times, even when every group moved together (by default such a shared "
                              "shift is taken as the machine's and each group judged against it)")
    compare.add_argument("--engine", choices=("auto", "memory", "duckdb", "spark"), default="auto",
                         help="who computes (as for stats)")
    add_filter_options(compare)

    run = _add(sub, "run", "run a Python script or module with recording on, then write its trace",
               "Run a program in this process (like python -m cProfile) with hotspan recording, write the spans "
               "to OUT (format from the extension) and print a summary on stderr. The program's exit status "
               "passes through.",
               "hotspan run train.py --epochs 2\nhotspan run -o out/trace.json -m mypkg.bench --fast", cmd_run)
    run.add_argument("-o", "--output", default="hotspan-trace.parquet", help="default hotspan-trace.parquet")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    run.add_argument("--live", action="store_true", help="print a line per finished span on stderr while it runs")
    run.add_argument("--live-min-ms", type=float, metavar="MS",
                     help="live log of the spans of at least MS milliseconds (errors always); implies --live")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]")

    collect = _add(sub, "collect", "receive spans from many ranks (Arrow Flight) into a dataset directory",
                   "Run a collector: an Arrow Flight server that takes the spans of many ranks at once "
                   "(hotspan.record(\"grpc://HOST:PORT\") or HOTSPAN_OUT=grpc://HOST:PORT in each rank) and writes "
                   "them to DIR/rank=R/part-<pid>-<token>-<n>.parquet as they arrive, each client's times corrected by its "
                   "measured clock offset. Binds to 127.0.0.1 unless told otherwise. SIGINT/SIGTERM: finish the "
                   "puts in flight, then exit 0. Read the result with `hotspan stats DIR` or hotspan.load(DIR).",
                   "hotspan collect --listen grpc://127.0.0.1:8815 --out run/\n"
                   "HOTSPAN_OUT=grpc://127.0.0.1:8815 torchrun --nproc-per-node 4 train.py   # the ranks\n"
                   "hotspan stats run/ --by rank,name", cmd_collect)
    collect.add_argument("--listen", default="grpc://127.0.0.1:8815", metavar="grpc://HOST:PORT",
                         help="address to listen on (default grpc://127.0.0.1:8815; port 0 picks a free one)")
    collect.add_argument("--out", required=True, metavar="DIR", help="dataset directory to write (made if missing)")
    collect.add_argument("--token", help="clients must present this token (default: $HOTSPAN_TOKEN, if set)")
    collect.add_argument("--max-put-mb", type=float, default=256.0, metavar="MB",
                         help="refuse a put past this many MiB of spans, as it arrives (default 256)")
    collect.add_argument("--duration", type=float, metavar="S", help="stop by itself after S seconds")
    collect.add_argument("--nice", type=int, default=0, metavar="N",
                         help="run N steps lower in CPU priority (0-19, like `nice -n N`): on a host whose cores "
                              "also run ranks, 19 leaves them the CPU and lets the collector take what is idle "
                              "(the clients buffer meanwhile)")
    from . import compact as _compact
    _compact.add_arguments(_add(sub, "compact", _compact.HELP, _compact.DESCRIPTION, _compact.EXAMPLE,
                                _compact.cmd_compact))
    from . import recover as _recover_cmd
    from . import top as _top_cmd

    _top_cmd.add_arguments(_add(sub, "top", _top_cmd.HELP, _top_cmd.DESCRIPTION, _top_cmd.EXAMPLE,
                                _top_cmd.cmd_top))

    _recover_cmd.add_arguments(_add(sub, "recover", _recover_cmd.HELP, _recover_cmd.DESCRIPTION,
                                    _recover_cmd.EXAMPLE, _recover_cmd.cmd_recover))

    from . import serve as serve_command  # hotspan serve: its own module (the serve extra loads on use)

    serve_command.add_arguments(_add(sub, "serve", "a trace API and a dashboard over the runs under a directory",
                                     serve_command.DESCRIPTION, serve_command.EXAMPLE, serve_command.cmd_serve))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program: list[str] | None = None
    if argv and argv[0] == "run":
        head, program = _split_run_argv(argv[1:])
        argv = ["run", *head]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad option (2, one line already printed), or --help (0)
        return int(exc.code or 0)
    if program is not None:
        args.program = program
    if args.version:
        import hotspan

        print(f"hotspan {hotspan.__version__}")
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return args.func(args)
    except CliError as exc:
        print(f"hotspan {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `hotspan stats ... | head`: the reader has seen enough
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"hotspan {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"hotspan {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
