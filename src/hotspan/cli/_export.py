"""``hotspan export TRACE OUT``: a trace from any format hotspan reads to any it writes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow as pa

from ._common import add_command, add_filter_options, export_trace, load_filtered, span_filter
from ._errors import check_output

__all__ = ["cmd_export", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan export`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "export",
        "convert a trace from any supported format to any other",
        "Read TRACE and write it to OUT in the format OUT's extension names: a trace format, or a "
        "flame-graph view of it (.speedscope.json for speedscope.app, .folded collapsed stacks with "
        "self time for flamegraph.pl and inferno; written, never loaded back). --since/--until "
        "and --rank export a window of the run: every span that overlaps it on those ranks "
        "(a span that starts before --since and ends after it too): a window of a run too large for "
        "Perfetto UI.",
        "hotspan export trace.parquet trace.pftrace          # for ui.perfetto.dev\n"
        "hotspan export run/ run.speedscope.json             # for speedscope.app\n"
        "hotspan export trace.parquet trace.folded           # flamegraph.pl trace.folded > flame.svg\n"
        "hotspan export run/ window.pftrace --since 12 --until 12.5 --rank 0,3",
        cmd_export,
    )
    parser.add_argument("trace", metavar="TRACE")
    parser.add_argument("output", metavar="OUT")
    add_filter_options(parser, overlap=True)
    return parser


def _window_files(path: Path, run: str | None) -> list[str] | None:
    """The Parquet files of one run at ``path`` (a Parquet file, or a directory's current
    parts of its one run or of ``run``), or None where the run is best loaded whole (another
    format, several runs without ``--run``, no such run: ``load`` says so)."""
    if path.is_file() and path.suffix.lower() == ".parquet" and run is None:
        return [str(path)]
    if not path.is_dir():
        return None
    from ..formats.dataset import current_parts, run_of

    _loc, parts = current_parts(path)
    if run is not None:
        parts = [part for part in parts if run_of(part[2]) == run]
    elif len({run_of(meta) for _path, _size, meta in parts}) > 1:
        return None
    return [part_path for part_path, _size, _meta in parts] or None


def _window(path: str, spans_filter: Any) -> pa.Table | None:
    """A window of a Parquet run (--since/--until/--rank and nothing else), read with the
    window pushed down (``window_spans``: only the row groups reaching it), so a window of
    a run of any size exports in the memory of the window; None: load the run and filter it."""
    from dataclasses import replace

    from ..analysis.filters import SpanFilter
    from ..analysis.timeline import window_of, window_spans

    window_only = replace(
        SpanFilter(),
        ranks=spans_filter.ranks,
        since=spans_filter.since,
        until=spans_filter.until,
        run=spans_filter.run,
        overlap=True,
    )
    if spans_filter != window_only or not spans_filter:
        return None
    try:
        files = _window_files(Path(path), spans_filter.run)
        if files is None:
            return None
        origin = window_of(files)[0] if spans_filter.needs_origin else None
        low, high = spans_filter.with_origin(origin).window()
        return window_spans(files, low, high, ranks=spans_filter.ranks)
    except (ValueError, OSError, pa.ArrowException):
        return None  # loaded whole instead, which names the problem


def cmd_export(args: argparse.Namespace) -> int:
    out = check_output(args.output)
    table = _window(args.trace, span_filter(args))
    if table is None:
        table = load_filtered(args.trace, args)
    export_trace(table, out)
    print(f"{table.num_rows:,} spans: {args.trace} -> {out}")
    return 0
