"""``hotspan runs DIR_OR_URI``: the runs a dataset directory holds (``hotspan.formats.dataset.list_runs``)."""

from __future__ import annotations

import argparse
import json
import time

from .common import add_command
from .errors import CliError, check_dataset

HELP = "list the runs a dataset directory holds: id, start, processes, ranks, spans, command"
DESCRIPTION = (
    "Each run has an id, drawn by its first process (hotspan run, a HOTSPAN_OUT parent) or taken from "
    "HOTSPAN_RUN_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID, and shared by its processes and ranks; every part "
    "carries it. Two runs written into one directory are listed apart; hotspan.load(DIR, run=ID) reads one. "
    "Only the parts' footers are read."
)
EXAMPLE = "hotspan runs runs/train\nhotspan runs s3://bucket/run --json"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hotspan runs`` to the subcommands ``sub``."""
    parser = add_command(sub, "runs", HELP, DESCRIPTION, EXAMPLE, cmd_runs)
    parser.add_argument(
        "dataset", metavar="DIR_OR_URI", help="a dataset directory or file system URI"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a run, one a line")
    return parser


def cmd_runs(args: argparse.Namespace) -> int:
    from ..formats.base import TraceFileError
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
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for heading in ("run", "start (UTC)", "processes", "ranks", "spans", "command"):
        table.add_column(heading, justify="right" if heading in ("processes", "spans") else "left")
    for run in runs:
        start = run["start_ns"]
        shown = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start / 1e9)) if start else "-"
        ranks = run["ranks"]
        table.add_row(
            run["run"] or "(no id)",
            shown,
            f"{run['processes']:,}",
            ",".join(map(str, ranks))
            if len(ranks) <= 8
            else f"{len(ranks)} ({ranks[0]}-{ranks[-1]})",
            f"{run['spans']:,}",
            run["command"] or "-",
        )
    Console(soft_wrap=True).print(table)
    return 0
