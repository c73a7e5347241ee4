"""``hotspan report TRACE``: one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import add_command, add_filter_options, load_filtered, write_atomically
from ._errors import check_output

__all__ = ["cmd_report", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan report`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "report",
        "a self-contained HTML report (summary, timeline, flame graph, stats, phases)",
        "Write one HTML file that needs nothing else (no network): summary, statistics, phases, and an "
        "SVG timeline per rank/thread with details on hover (click a span to pin them; the link keeps it), "
        "and a flame graph of self time by stack (merged, per rank or per thread; click a frame to zoom).",
        "hotspan report trace.parquet -o report.html",
        cmd_report,
    )
    parser.add_argument("trace", metavar="TRACE")
    parser.add_argument(
        "-o", "--output", default="hotspan-report.html", help="default hotspan-report.html"
    )
    parser.add_argument("--title", help="page title (default: from the trace's file name)")
    add_filter_options(parser)
    return parser


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import html_report

    out = check_output(args.output, trace=False)
    table = load_filtered(args.trace, args)
    page = html_report(table, title=args.title or f"hotspan report: {Path(args.trace).name}")
    write_atomically(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    print(f"{table.num_rows:,} spans -> {out}")
    return 0
