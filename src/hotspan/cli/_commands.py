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
import signal
import sys

from . import (
    _collect as collect,
    _compact as compact,
    _compare as compare,
    _completion as completion,
    _demo as demo,
    _export as export,
    _gantt as gantt,
    _hang as hang,
    _ranks as ranks,
    _recover as recover,
    _report as report,
    _run as run,
    _runs as runs,
    _serve as serve,
    _stats as stats,
    _top as top,
)
from ._common import CliParser
from ._errors import EXIT_BAD_INPUT, CliError

__all__ = ["COMMANDS", "build_parser", "main"]

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
        with _ended_by_signals(args.command):
            status: int = args.func(args)
            return status
    except _Ended as ended:  # what it was writing is gone (formats.base.atomic_path): die of it
        name = signal.Signals(ended.signum).name
        print(f"hotspan {args.command}: ended by {name}; no partial output left", file=sys.stderr)
        sys.stderr.flush()
        os.kill(os.getpid(), ended.signum)  # the default action is back: this ends the process
        return 128 + ended.signum
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


#: Commands that handle the ending signals themselves: ``run`` passes them on to its program;
#: ``serve``, ``collect`` and ``top`` run until told to end, and end cleanly on them.
_OWN_SIGNALS = frozenset({"run", "serve", "collect", "top"})
#: The signals whose default action ends a process without a word (SIGINT is Python's
#: KeyboardInterrupt already; SIGQUIT dumps core, for a reason).
_ENDING_SIGNALS = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM")


class _Ended(BaseException):
    """An ending signal, raised in the main thread so that what the command was writing
    under a temporary name is removed on the way out (as for KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_ended(signum: int, _frame: object) -> None:
    for name in _ENDING_SIGNALS:  # a second signal while the first unwinds: the default action
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)
    raise _Ended(signum)


class _ended_by_signals:
    """While a command runs, the ending signals raise ``_Ended`` (a half-written file is
    removed, then the process dies of the signal); the previous handlers come back after."""

    def __init__(self, command: str | None):
        self.active = command not in _OWN_SIGNALS
        self.saved: dict[int, object] = {}

    def __enter__(self) -> "_ended_by_signals":
        if not self.active or sys.platform == "win32":
            return self
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        for name in _ENDING_SIGNALS:
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) == signal.SIG_DFL:
                self.saved[number] = signal.signal(number, _raise_ended)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self.saved.items():
            signal.signal(number, handler)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
