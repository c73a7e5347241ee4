"""The ``hotspan`` command line (also ``python -m hotspan``): the parser, assembled from one
module per command (``cli/<command>.py``, each adding its own subparser with ``register``),
and ``main``.

Every command that reads a trace takes any format ``hotspan.load`` reads. Bad input
(a missing or corrupt file, an unknown format, a bad option) is one line on stderr naming
the file and the problem, and exit status 2; files are written under a temporary name and
renamed into place.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import (
    collect,
    compact,
    compare,
    completion,
    demo,
    export,
    gantt,
    hang,
    ranks,
    recover,
    report,
    run,
    runs,
    serve,
    stats,
    top,
)
from .common import CliParser
from .errors import EXIT_BAD_INPUT, CliError

#: The commands, in the order ``hotspan --help`` lists them.
COMMANDS = (
    demo,
    stats,
    export,
    gantt,
    report,
    compare,
    ranks,
    hang,
    run,
    runs,
    collect,
    compact,
    top,
    recover,
    serve,
    completion,
)


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="hotspan",
        description="Record spans in hot loops; inspect the traces. A TRACE is any format hotspan "
        "exports (.parquet .arrow .feather .json .json.gz .pftrace .perfetto-trace .csv .jsonl), a Chrome JSON trace, or a "
        'directory of Parquet parts (hotspan.record("run/"), hotspan collect --out run/).',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  hotspan demo --threads 4 --steps 50\n  hotspan stats hotspan-demo.parquet --top 10",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    for command in COMMANDS:
        command.register(sub)
    # The whole parser, for commands that describe it (completion), without importing this module.
    parser.set_defaults(root_parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program: list[str] | None = None
    if argv and argv[0] == "run":
        head, program = run.split_argv(argv[1:])
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
