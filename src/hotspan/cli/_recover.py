"""``hotspan recover PATH -o OUT``: the spans a crashed process left in its flight file."""

from __future__ import annotations

import argparse
import json
import sys

from ._common import add_command
from ._errors import CliError, check_output

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "add_arguments", "cmd_recover", "register"]

HELP = "rebuild the spans a crashed process left in its flight file (HOTSPAN_FLIGHT)"
DESCRIPTION = (
    "Read the flight file of a process that died (SIGKILL, SIGSEGV, abort(), the OOM killer) and write "
    "every span it completed and never drained, plus the spans still open at its death (their end_ns is the "
    "last time the file saw the process; their span_ids are listed in the table's metadata under "
    "open_spans), to OUT in the format its extension names. A file left by a clean exit holds nothing new. "
    "Every block's records are checked (ids, depths, times, counts): damaged blocks are left out and "
    "counted in one line; a file from another hotspan version, a truncated one, or one with no intact "
    "block is refused (exit 2)."
)
EXAMPLE = "hotspan recover /dev/shm/hotspan-4242.flight -o crash.parquet"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan recover`` to the subcommands ``sub``."""
    parser = add_command(sub, "recover", HELP, DESCRIPTION, EXAMPLE, cmd_recover)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("flight", metavar="PATH", help="the flight file")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="where to write the spans (any export format, from the extension)",
    )


def cmd_recover(args: argparse.Namespace) -> int:
    from ..formats import export
    from ..recording.flight import META_OPEN_SPANS, recover

    import warnings

    from .._schema import META_SKIPPED_ON_LOAD
    from ..formats._base import TraceFileWarning

    out = check_output(args.output)  # a known format, not a directory: before any work
    try:
        with warnings.catch_warnings():  # what was left out is said below, in one line
            warnings.simplefilter("ignore", TraceFileWarning)
            table = recover(args.flight)
    except ValueError as exc:  # FlightFileError names the file
        raise CliError(str(exc)) from None
    try:
        export(table, out)
    except ValueError as exc:
        raise CliError(f"{out}: {exc}") from None
    opened = json.loads((table.schema.metadata or {}).get(META_OPEN_SPANS, b"[]"))
    print(
        f"{table.num_rows - len(opened):,} completed spans not drained and {len(opened):,} open at the end: "
        f"{args.flight} -> {out}",
        file=sys.stderr,
    )
    skipped = json.loads((table.schema.metadata or {}).get(META_SKIPPED_ON_LOAD, b"{}"))
    if skipped:  # damaged blocks: the good part was recovered, this much was not
        said = "; ".join(f"{count:,} {why}" for why, count in skipped["reasons"].items())
        print(f"hotspan recover: {args.flight}: damaged, left out: {said}", file=sys.stderr)
    return 0
