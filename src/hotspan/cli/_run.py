"""``hotspan run script.py [args...]`` / ``hotspan run -m module``: a program run with recording on,
its trace written."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ._common import add_command
from ._errors import CliError, check_output
from ._tables import print_recording_summary

__all__ = ["add_arguments", "cmd_run", "register", "split_argv"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan run`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "run",
        "run a Python script or module with recording on, then write its trace",
        "Run a program (in a child process, as python would) with hotspan recording, write the spans "
        "to OUT (format from the extension) and print a summary on stderr. SIGTERM and SIGINT are passed "
        "on to the program, which flushes (once: signalled as a whole process group, the program drops "
        "the copy it already has); however it ends (a crash too) OUT is written, and the program's exit "
        "status passes through (died of a signal: hotspan run dies of the same one, 128+N in a shell). "
        "Where OUT cannot be written (a full disk), the message names the directory holding the spans.",
        "hotspan run train.py --epochs 2\nhotspan run -o out/trace.json -m mypkg.bench --fast",
        cmd_run,
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``run``'s options, named here once: ``split_argv`` reads them back from a parser."""
    parser.add_argument(
        "-o",
        "--output",
        default="hotspan-trace.parquet",
        help="a trace file (format from the extension), or DIR/ for a run directory of Parquet "
        "parts written as the program runs; default hotspan-trace.parquet",
    )
    parser.add_argument(
        "-m", dest="module", metavar="MODULE", help="run a module, as python -m does"
    )
    parser.add_argument(
        "--live", action="store_true", help="print a line per finished span on stderr while it runs"
    )
    parser.add_argument(
        "--live-min-ms",
        type=float,
        metavar="MS",
        help="live log of the spans of at least MS milliseconds (errors always); implies --live",
    )
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s own options from the program and its arguments.

    Everything after the script (or after ``-m MODULE``) belongs to the program, options
    included, as with ``python -m cProfile``. Which options take a value is read from the
    parser ``add_arguments`` builds, so that a new option is named in one place.
    """
    probe = argparse.ArgumentParser(add_help=False)
    add_arguments(probe)
    valued = {
        flag: action.dest
        for action in probe._actions
        if action.option_strings and action.nargs != 0
        for flag in action.option_strings
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        short = arg[:2] if len(arg) > 2 and not arg.startswith("--") else None  # -oOUT, -mMODULE
        if arg in valued:
            if valued[arg] == "module":  # the program: the module and everything after it
                return argv[: i + 2], argv[i + 2 :]
            i += 2
        elif short in valued:
            if valued[short] == "module":
                return argv[: i + 1], argv[i + 1 :]
            i += 1
        elif arg.startswith("--") and arg.partition("=")[0] in valued:  # --output=OUT
            i += 1
        elif arg == "--":
            return argv[:i], argv[i + 1 :]
        elif arg.startswith("-"):
            i += 1  # --help or a bad option: argparse speaks to it
        else:
            return argv[:i], argv[i:]
    return argv, []


def cmd_run(args: argparse.Namespace) -> int:
    from ..recording._supervisor import (
        OutputError,
        ProgramError,
        exit_as_program,
        resolve_program,
        run_program,
    )

    # DIR/ (or an existing directory): the run directory itself, part files as they flush
    as_dir = args.output.endswith(("/", os.sep)) or Path(args.output).is_dir()
    out = Path(args.output) if as_dir else check_output(args.output)
    if as_dir:
        out.mkdir(parents=True, exist_ok=True)
    if args.live_min_ms is not None and args.live_min_ms < 0:
        raise CliError(f"--live-min-ms must be >= 0, not {args.live_min_ms}")
    if args.live_min_ms is not None:
        args.live = True  # a threshold for the live log asks for the live log
    try:
        resolve_program(args.program, args.module)  # a missing program: exit 2 before anything runs
    except ProgramError as exc:
        raise CliError(str(exc)) from None
    try:
        result = run_program(
            args.program,
            out,
            module=args.module,
            live_min_ns=int((args.live_min_ms or 0) * 1e6) if args.live else None,
        )
    except OutputError as exc:  # the program ran; its spans are kept where the message says
        raise CliError(str(exc)) from None
    # The summary goes to stderr: the program's stdout stays the program's.
    label = "run" if result.processes <= 1 else f"run ({result.processes} processes)"
    print_recording_summary(
        result.table, out, result.elapsed, result.dropped, label=label, stderr=True, top=20
    )
    if result.ending:  # ended by a signal or a crash: one line, the output was written all the same
        print(result.ending, file=sys.stderr)
    return exit_as_program(result)
