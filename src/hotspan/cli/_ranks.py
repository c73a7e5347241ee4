"""``hotspan ranks TRACE...``: which rank holds the others back and why, and what sets the
step's length (:func:`hotspan.analysis.ranks.ranks_summary`; this module only prints)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._common import add_command, add_filter_options, engine_of, span_filter, without_pandas
from ._errors import CliError

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "cmd_ranks", "print_summary", "register"]

HELP = "across ranks: stragglers (who makes the others wait, and why) and the critical path"
DESCRIPTION = (
    "Matches each collective (a span whose category ends in 'comms', e.g. train/comms) across ranks: "
    "the k-th one of each name on every rank is one instance. In each instance every rank waits for "
    "the last arrival, and the last arriver is blamed for those waits. A rank is a straggler when its "
    "blame is significantly above what it would be were ranks alike (Bennett's bound, Bonferroni over "
    "ranks, --alpha) and exceeds its fair share by --min-share; the reason is the span it spent "
    "longer in than the median rank before arriving late. Clocks of different hosts are aligned on "
    "the collectives' ends (--no-align to turn off). Then the critical path of the steps: each span "
    "name's share of it. --json prints the whole answer as one JSON object."
)
EXAMPLE = (
    "hotspan ranks run/\nhotspan ranks run/ --top 20\nhotspan ranks run/ --json | jq .stragglers[0]\n"
    "hotspan ranks run/ --engine spark"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan ranks`` to the subcommands ``sub``."""
    parser = add_command(sub, "ranks", HELP, DESCRIPTION, EXAMPLE, cmd_ranks)
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="a run directory or trace files")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="ranks shown, most blamed first (10)"
    )
    parser.add_argument(
        "--collectives",
        default="comms",
        metavar="CAT",
        help="the last part of the collectives' category (default comms)",
    )
    parser.add_argument(
        "--step",
        default="step",
        metavar="NAME",
        help="the step span's name (default step; else each rank's most frequent top-level span)",
    )
    parser.add_argument("--no-align", action="store_true", help="take every rank's clock as it is")
    parser.add_argument(
        "--alpha", type=float, default=0.001, help="the straggler test's level (default 0.001)"
    )
    parser.add_argument(
        "--min-share",
        type=float,
        default=0.05,
        help="blame a straggler has above its fair share, as a fraction of all (default 0.05)",
    )
    add_filter_options(parser)
    parser.add_argument(
        "--engine",
        choices=("auto", "memory", "duckdb", "spark"),
        default="auto",
        help="who reads the run, as for hotspan stats: auto (by size), memory, duckdb, or spark "
        "(SparkSession.builder.getOrCreate(): your Spark settings)",
    )
    return parser


def cmd_ranks(args: argparse.Namespace) -> int:
    from ..analysis.ranks import ranks_summary

    if args.top < 0:
        raise CliError(f"--top: expected a count of 0 or more, not {args.top}")
    paths = list(args.traces)
    try:
        with without_pandas():  # the answer needs none of it (~0.8 s of a fresh command)
            answer = ranks_summary(
                paths if len(paths) > 1 else paths[0],
                category=args.collectives,
                step=args.step,
                align=not args.no_align,
                alpha=args.alpha,
                min_share=args.min_share,
                filter=span_filter(args),
                engine=engine_of(args),
            )
    except FileNotFoundError as exc:
        raise CliError(
            f"{exc.filename or ', '.join(paths)}: no such trace file or directory"
        ) from None
    except (ValueError, TypeError, OSError) as exc:
        message = str(exc)
        raise CliError(
            message if any(p in message for p in paths) else f"{', '.join(paths)}: {message}"
        ) from None
    if args.json:
        print(json.dumps(answer))
        return 0
    print_summary(answer, args.top)
    return 0


def print_summary(answer: dict[str, Any], top: int) -> None:
    from rich.table import Table

    from .._units import human_count, human_ns
    from ._tables import new_console

    console = new_console()
    step = answer["step_ns"]
    console.print(
        f"{human_count(answer['ranks'])} ranks, {human_count(answer['steps'])} steps"
        + (f" of {human_ns(step)} on average" if step else "")
        + f", {human_count(answer['instances'])} collectives matched"
        + (f" ({human_count(answer['unmatched'])} left unmatched)" if answer["unmatched"] else "")
        + f"; ranks waited {human_ns(answer['total_wait_ns'])} in all",
        soft_wrap=False,
    )
    for problem in answer.get("match_problems", ()):
        console.print(f"  {problem}", highlight=False, markup=False)
    if not answer["instances"]:
        console.print("no collectives: no span's category ends in the collectives' category")
        return
    named = [r for r in answer["stragglers"] if r["straggler"]]
    if named:
        console.print(f"[bold]stragglers[/bold] ({len(named)}):")
        for row in named:
            console.print(f"  {row['reason']}")
            if_median = row["step_ns_if_median"]
            gain = (
                f"; a step would take {human_ns(if_median)} ({(if_median / step - 1) * 100:+.0f}%) had it kept up"
                if step and if_median is not None
                else ""
            )
            console.print(
                f"    blamed for {human_ns(row['blame_ns'])} ({row['share'] * 100:.1f}%) of waits{gain}"
            )
    else:
        console.print("no straggler: no rank's blame is significantly above the others'")
    rows = answer["stragglers"][:top]
    columns = [  # (heading, cells), in the order they are given up when the terminal is narrow
        ("rank", [str(r["rank"]) for r in rows]),
        ("blame", [human_ns(r["blame_ns"]) for r in rows]),
        ("share", [f"{r['share'] * 100:.1f}%" for r in rows]),
        ("", ["straggler" if r["straggler"] else "" for r in rows]),
        ("steps last", [human_count(r["steps_last"]) for r in rows]),
        ("wait", [human_ns(r["wait_ns"]) for r in rows]),
        ("step if median", [human_ns(r["step_ns_if_median"]) for r in rows]),
    ]
    shown: list[tuple[str, list[str]]] = []
    width = 0
    for heading, cells in columns:
        need = max([len(heading), *map(len, cells)]) + 2
        if shown and width + need > console.width:
            continue
        shown.append((heading, cells))
        width += need
    order = [h for h, _ in columns if h != ""] + [""]  # the flag goes last when shown
    shown.sort(key=lambda item: order.index(item[0]))
    table = Table(box=None, header_style="bold")
    for heading, _ in shown:
        table.add_column(
            heading, justify="left" if heading in ("rank", "") else "right", no_wrap=True
        )
    for i in range(len(rows)):
        table.add_row(*(cells[i] for _, cells in shown))
    console.print(table)
    rest = len(answer["stragglers"]) - top
    if rest > 0:
        console.print(f"({rest:,} more ranks: --top {len(answer['stragglers'])} or --json)")
    if answer["critical_path"]:
        path = Table(box=None, header_style="bold", title="critical path", title_justify="left")
        for heading in ("span", "time", "share"):
            path.add_column(heading, justify="left" if heading == "span" else "right")
        for row in answer["critical_path"][: max(top, 1)]:
            path.add_row(row["name"], human_ns(row["critical_ns"]), f"{row['share'] * 100:.1f}%")
        console.print(path)
