"""``hotspan hang [DIR | FLIGHT_FILE | grpc://HOST:PORT ...]``: where the ranks of a hung job
are, from their flight files or the collector they record to
(:func:`hotspan.analysis.hang.hang`; this module only prints)."""

from __future__ import annotations

import argparse
import json
import os

from ._common import add_command
from ._errors import CliError

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "cmd_hang", "register"]

HELP = "where a hung job's ranks are: grouped by the collective they wait in, from flight files or a collector"
DESCRIPTION = (
    "Reads the flight files of a job's processes (started with HOTSPAN_FLIGHT=PATH; no other change) "
    "while it hangs, or after it was killed, and groups the ranks by state: the collective each waits "
    "in (the innermost open span whose category ends in 'comms', or 'comms:GROUP': named NAME@GROUP), "
    "or, for a rank in none, its open "
    "stack and for how long. With nothing given: every flight file mapped by a process of yours. DIR: "
    "every flight file in it. grpc://HOST:PORT: the collector the ranks record to, which holds the open "
    "stacks each rank with a flight file sends every few seconds (HOTSPAN_STACKS_INTERVAL). Exit status 1 when the ranks disagree on where they are, 0 when they "
    "agree, 2 on bad input. --json prints the whole answer as one JSON object."
)
EXAMPLE = (
    "hotspan hang /dev/shm/job/\nhotspan hang --json | jq .groups\n"
    "hotspan hang grpc://127.0.0.1:8815      # ranks: HOTSPAN_OUT=grpc://... HOTSPAN_FLIGHT=..."
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan hang`` to the subcommands ``sub``."""
    parser = add_command(sub, "hang", HELP, DESCRIPTION, EXAMPLE, cmd_hang)
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="DIR|FLIGHT_FILE|grpc://HOST:PORT",
        help="flight files, directories of them, or a collector",
    )
    parser.add_argument("--token", help="the collector's token (default: $HOTSPAN_TOKEN, if set)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument(
        "--collectives",
        default="comms",
        metavar="CAT",
        help="the last part of the collectives' category (default comms)",
    )
    return parser


def cmd_hang(args: argparse.Namespace) -> int:
    from ..analysis.hang import hang

    try:
        token = args.token if args.token is not None else (os.environ.get("HOTSPAN_TOKEN") or None)
        answer = hang(args.targets, category=args.collectives, token=token)
    except FileNotFoundError as exc:
        raise CliError(f"{exc.filename}: {exc.strerror}") from None
    except (ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    if not answer["ranks"]:
        if answer["unreadable"]:
            raise CliError(answer["unreadable"][0])
        from ..analysis.hang import is_collector

        collectors = [t for t in args.targets if is_collector(t)]
        if collectors:
            raise CliError(
                f"{collectors[0]}: the collector holds no open stacks (ranks send them when they "
                "record to it with HOTSPAN_FLIGHT=PATH)"
            )
        raise CliError("no flight file of a rank found (start the ranks with HOTSPAN_FLIGHT=PATH)")
    if args.json:
        print(json.dumps(answer))
    else:
        from ._tables import new_console

        console = new_console()
        for line in answer["summary"]:
            console.print(line, highlight=False, markup=False)
        for problem in answer["unreadable"]:
            console.print(f"unreadable: {problem}", highlight=False, markup=False)
    return 0 if answer["agree"] else 1
