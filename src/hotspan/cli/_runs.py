"""``hotspan runs DIR_OR_URI``: the runs a dataset directory holds (``hotspan.formats.dataset.list_runs``)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Sequence

from ._common import add_command
from ._errors import CliError, check_dataset

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "cmd_runs", "register"]

HELP = "list the runs a dataset directory holds: id, start, processes, ranks, spans, command"
DESCRIPTION = (
    "Each run has an id, drawn by its first process (hotspan run, a HOTSPAN_OUT parent) or taken from "
    "HOTSPAN_RUN_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID, and shared by its processes and ranks; every part "
    "carries it. Two runs written into one directory are listed apart; hotspan.load(DIR, run=ID) reads one. "
    "Only the parts' footers are read."
)
EXAMPLE = "hotspan runs runs/train\nhotspan runs s3://bucket/run --json"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan runs`` to the subcommands ``sub``."""
    parser = add_command(sub, "runs", HELP, DESCRIPTION, EXAMPLE, cmd_runs)
    parser.add_argument(
        "dataset", metavar="DIR_OR_URI", help="a dataset directory or file system URI"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a run, one a line")
    return parser


def cmd_runs(args: argparse.Namespace) -> int:
    from ..formats._base import TraceFileError
    from ..formats.dataset import list_runs

    try:
        runs = list_runs(check_dataset(args.dataset))
    except (TraceFileError, OSError, ValueError) as exc:
        raise CliError(str(exc)) from None
    if not runs:
        raise CliError(f"{args.dataset}: no span parts here")
    if args.json:
        for run in runs:
            print(json.dumps(run))
        return 0
    _print_runs(runs)
    return 0


def _print_runs(runs: list[dict[str, Any]]) -> None:
    """The runs as a table as wide as the terminal: the run ids whole (``--run`` needs them as
    they are), the command line loses its middle to what room is left."""
    from rich.text import Text

    from ._tables import middle_cut, new_console

    cells = []
    for run in runs:
        start = run["start_ns"]
        ranks = run["ranks"]
        cells.append(
            [
                run["run"] or "(no id)",
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start / 1e9)) if start else "-",
                f"{run['processes']:,}",
                ",".join(map(str, ranks))
                if len(ranks) <= 8
                else f"{len(ranks)} ({ranks[0]}-{ranks[-1]})",
                f"{run['spans']:,}",
                run["command"] or "-",
            ]
        )
    headings = ("run", "start (UTC)", "processes", "ranks", "spans", "command")
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headings)]
    console = new_console()
    gap = 2
    room = console.width - sum(widths[:-1]) - gap * (len(headings) - 1)
    widths[-1] = min(widths[-1], max(room, 16))  # the command alone gives way, down to 16
    right = {"processes", "spans"}

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if heading in right else cell.ljust(width)
            for heading, cell, width in zip(headings, row, widths)
        ).rstrip()

    # Lines of their own, never wrapped or squeezed: a run id is copied from here whole.
    console.print(Text(line(headings), style="bold"), soft_wrap=True)
    for row in cells:
        console.print(Text(line([*row[:-1], middle_cut(row[-1], widths[-1])])), soft_wrap=True)
