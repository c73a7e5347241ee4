"""``hotspan gantt TRACE``: a timeline in the terminal, one row per rank/thread."""

from __future__ import annotations

import argparse

from ._common import add_command, add_filter_options, load_filtered
from ._errors import CliError
from ._tables import new_console

__all__ = ["cmd_gantt", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan gantt`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "gantt",
        "a timeline in the terminal, one row per rank/thread",
        "Draw the trace as a terminal timeline: one row per rank/thread, one glyph per category (the "
        "innermost span at each moment), '!' where a span ended with an error. With --step NAME, one "
        "chart per occurrence of that span (the n-th on every thread together), each with its duration.",
        "hotspan gantt trace.parquet --width 120\nhotspan gantt trace.parquet --step step",
        cmd_gantt,
    )
    parser.add_argument("trace", metavar="TRACE")
    parser.add_argument(
        "--width",
        type=int,
        help="characters of timeline (default: what the terminal, or COLUMNS, "
        "leaves beside the labels)",
    )
    parser.add_argument("--step", metavar="NAME", help="one chart per occurrence of the span NAME")
    add_filter_options(parser)
    return parser


def cmd_gantt(args: argparse.Namespace) -> int:
    from ..report import gantt, step_gantts
    from ..report._gantt import LABEL_WIDTH

    if args.width is not None and args.width < 10:
        raise CliError(f"--width must be at least 10, not {args.width}")
    table = load_filtered(args.trace, args)
    console = new_console()
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
