"""``hotspan export TRACE OUT``: a trace from any format hotspan reads to any it writes."""

from __future__ import annotations

import argparse

from .common import add_command, add_filter_options, export_trace, load_filtered
from .errors import check_output


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hotspan export`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "export",
        "convert a trace from any supported format to any other",
        "Read TRACE and write it to OUT in the format OUT's extension names: a trace format, or a "
        "flame-graph view of it (.speedscope.json for speedscope.app, .folded collapsed stacks with "
        "self time for flamegraph.pl and inferno; written, never loaded back). --since/--until "
        "and --rank export a window of the run: every span that overlaps it on those ranks "
        "(a span that starts before --since and ends after it too), small enough for Perfetto UI.",
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


def cmd_export(args: argparse.Namespace) -> int:
    out = check_output(args.output)
    table = load_filtered(args.trace, args)
    export_trace(table, out)
    print(f"{table.num_rows:,} spans: {args.trace} -> {out}")
    return 0
