"""``hotspan top [PID | PATH | DIR]``: which span every thread of every rank is in now, and
for how long, read from the processes' flight files without stopping them."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._common import add_command
from ._errors import CliError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.table import Table

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "add_arguments", "cmd_top", "register"]

HELP = "the open spans of running processes, per rank and thread, from their flight files"
DESCRIPTION = (
    "Show, per rank and thread, the stack of spans open now and how long each has been open, read from "
    "the processes' flight files (HOTSPAN_FLIGHT=PATH, configure(flight=PATH)) without stopping or slowing "
    "them: which rank is stuck in which allreduce, for how long. With nothing given: every process of "
    "this user with a flight file mapped. PID: that process's file, wherever it is. PATH: one flight "
    "file. DIR: every flight file in it (one per rank). Refreshes until Ctrl-C (output that is not a "
    "terminal gets a snapshot each interval, under a line with its time); --once prints one snapshot, --json one JSON object per process a line: {pid, rank, alive, threads: [{thread_id, "
    "thread_name, stack: [{name, category, start_ns, elapsed_ns}, ...]}]}, outermost span first. A "
    "process that is gone says so; exit status 1 when every process asked for is gone."
)
EXAMPLE = (
    "hotspan top                       # every process of yours with a flight file\n"
    "hotspan top 4242 --once\n"
    "hotspan top /dev/shm/ --json     # every rank's file in a directory"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan top`` to the subcommands ``sub``."""
    parser = add_command(sub, "top", HELP, DESCRIPTION, EXAMPLE, cmd_top)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", nargs="?", metavar="PID|PATH|DIR", help="what to show (default: all yours)"
    )
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per process a line (implies --once)"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes (1)"
    )


@dataclass
class _Target:
    pid: int | None
    path: str | None


def _targets(arg: str | None) -> list[_Target]:
    from .._api import flight_path
    from ..recording.flight import flight_processes, is_flight_file, mapped_flight_files

    if arg is None:
        return [
            _Target(pid, path)
            for pid, paths in sorted(flight_processes().items())
            for path in paths
        ]
    if arg.isdigit():
        pid = int(arg)
        paths = mapped_flight_files(pid)
        if not paths and is_flight_file(flight_path(None, pid)):
            paths = [flight_path(None, pid)]  # the default place, after the process is gone
        return [_Target(pid, p) for p in paths] or [_Target(pid, None)]
    if os.path.isdir(arg):
        files = sorted(os.path.join(arg, n) for n in os.listdir(arg))
        found = [_Target(None, p) for p in files if os.path.isfile(p) and is_flight_file(p)]
        if not found:
            raise CliError(f"{arg}: no flight file in this directory")
        return found
    if not os.path.exists(arg):
        raise CliError(f"{arg}: no such process id, file or directory")
    return [_Target(None, arg)]


def _read(targets: list[_Target]) -> list[dict[str, Any]]:
    """One dict per process (the --json shape, plus "path")."""
    from ..recording.flight import FlightFileError, pid_alive, stacks

    out: list[dict[str, Any]] = []
    now = time.time_ns()
    for t in targets:
        if t.path is None:
            assert t.pid is not None  # a target is a pid, a flight file, or both
            alive = pid_alive(t.pid)
            if alive:
                raise CliError(
                    f"process {t.pid} has no flight file mapped (start it with HOTSPAN_FLIGHT=PATH)"
                )
            out.append({"pid": t.pid, "rank": None, "alive": False, "threads": [], "path": None})
            continue
        try:
            proc = stacks(t.path)
        except FileNotFoundError:
            out.append({"pid": t.pid, "rank": None, "alive": False, "threads": [], "path": t.path})
            continue
        except ValueError as exc:  # FlightFileError: names the file
            if isinstance(exc, FlightFileError) and len(targets) > 1:
                continue  # one damaged file among many ranks' does not hide the others
            raise CliError(str(exc)) from None
        end = now if proc.alive else proc.last_seen_ns
        out.append(
            {
                "pid": proc.pid,
                "rank": proc.rank,
                "alive": proc.alive,
                "path": proc.path,
                "threads": [
                    {
                        "thread_id": th.thread_id,
                        "thread_name": th.thread_name,
                        "stack": [
                            {
                                "name": fr.name,
                                "category": fr.category,
                                "start_ns": fr.start_ns,
                                "elapsed_ns": max(0, end - fr.start_ns),
                            }
                            for fr in th.stack
                        ],
                    }
                    for th in proc.threads
                ],
            }
        )
    out.sort(key=lambda p: (p["rank"] if p["rank"] is not None else -1, p["pid"] or 0))
    return out


def _render(procs: list[dict[str, Any]]) -> Table:
    from rich.table import Table
    from rich.text import Text

    from .._units import human_ns

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in (
        "rank",
        "pid",
        "thread",
        "open spans (outermost first), how long each has been open",
    ):
        table.add_column(col)
    if not procs:
        table.add_row("-", "-", "-", "no process with a flight file (HOTSPAN_FLIGHT=PATH)")
    for p in procs:
        rank = "-" if p["rank"] is None else str(p["rank"])
        if not p["alive"]:
            table.add_row(rank, str(p["pid"]), "", Text("gone", style="red"))
        threads = p["threads"] if p["alive"] else [t for t in p["threads"] if t["stack"]]
        for th in threads:
            stack = Text()
            for k, fr in enumerate(th["stack"]):
                if k:
                    stack.append(" > ", style="dim")
                stack.append(fr["name"], style="bold" if k == len(th["stack"]) - 1 else "")
                stack.append(f" {human_ns(fr['elapsed_ns'])}", style="cyan")
            if not th["stack"]:
                stack.append("idle", style="dim")
            table.add_row(rank, str(p["pid"]), f"{th['thread_name']} ({th['thread_id']})", stack)
    return table


def cmd_top(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise CliError(f"--interval must be positive, not {args.interval}")
    if args.target is None and not os.path.isdir("/proc"):
        raise CliError("finding processes needs /proc: give a flight file or a directory")
    targets = _targets(args.target)
    procs: list[dict[str, Any]] = []
    if args.json or args.once:
        procs = _read(targets)
        if args.json:
            for p in procs:
                p.pop("path", None)
                print(json.dumps(p))
        else:
            from rich.console import Console

            Console(highlight=False).print(_render(procs))
        return _exit_status(procs)
    from rich.console import Console
    from rich.live import Live

    console = Console(highlight=False)
    try:
        if console.is_terminal:
            with Live(console=console, refresh_per_second=4, screen=False) as live:
                for procs in _every_interval(args, targets):
                    live.update(_render(procs))
        else:
            # A file, a pipe, a job's log: a snapshot each interval under a line with its
            # time, as `top -b` does (a live view there shows only its last frame, at the end,
            # and nothing when the watcher is killed).
            for procs in _every_interval(args, targets):
                console.print(f"hotspan top {time.strftime('%Y-%m-%d %H:%M:%S')}")
                console.print(_render(procs))
                console.print()
                console.file.flush()
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    return _exit_status(procs)


def _every_interval(
    args: argparse.Namespace, targets: list[_Target]
) -> Iterator[list[dict[str, Any]]]:
    """The processes now, then again each ``--interval`` (with nothing given, found again:
    processes come and go), until Ctrl-C."""
    while True:
        yield _read(targets)
        time.sleep(args.interval)
        if args.target is None:
            targets = _targets(None)


def _exit_status(procs: list[dict[str, Any]]) -> int:
    """1 when every process asked for is gone, else 0."""
    return 1 if procs and not any(p["alive"] for p in procs) else 0
