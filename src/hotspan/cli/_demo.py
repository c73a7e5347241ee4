"""``hotspan demo``: a built-in multi-threaded workload, recorded, written and shown."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ._common import add_command, export_trace
from ._errors import CliError, check_output
from ._tables import new_console, print_recording_summary

__all__ = ["cmd_demo", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan demo`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "demo",
        "run a built-in multi-threaded workload and write hotspan-demo.parquet",
        "Run a built-in workload (nested compute blocks, communication with byte counts, data loading) "
        "on several threads, write the spans to a trace (format from the extension) and a Chrome JSON "
        "copy beside it for Perfetto UI, and print statistics and a timeline.",
        "hotspan demo --threads 8 --steps 100 -o /tmp/demo.parquet",
        cmd_demo,
    )
    parser.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument(
        "--steps", type=int, default=50, help="training-like steps per thread (default 50)"
    )
    parser.add_argument(
        "-o", "--output", default="hotspan-demo.parquet", help="where to write the spans"
    )
    return parser


def _beside(path: Path, extension: str) -> Path:
    """``path`` with its trace extension (``.json.gz`` counts as one) replaced."""
    from ..formats import EXTENSIONS

    name = path.name
    for known in sorted(EXTENSIONS, key=len, reverse=True):
        if name.lower().endswith(known):
            return path.with_name(name[: -len(known)] + extension)
    return path.with_name(path.stem + extension)


def cmd_demo(args: argparse.Namespace) -> int:
    import hotspan
    from hotspan import _demo as demo

    from ..report import gantt

    if args.threads < 1 or args.steps < 1:
        raise CliError("--threads and --steps must be at least 1")
    out = check_output(args.output)
    # Beside the trace, a Chrome JSON copy that Perfetto UI opens directly.
    perfetto_json = _beside(out, ".json") if not out.name.lower().endswith(".json") else None
    hotspan.enable()
    hotspan.drain()  # start from nothing
    before = hotspan.dropped()
    start = time.perf_counter()
    demo.run(threads=args.threads, steps=args.steps)
    elapsed = time.perf_counter() - start
    table = hotspan.drain()
    export_trace(table, out)
    if perfetto_json is not None:
        export_trace(table, perfetto_json)
    print_recording_summary(table, out, elapsed, hotspan.dropped() - before, label="demo")
    console = new_console()
    console.print(gantt(table, width=max(min(100, console.width - 26), 10)))
    if perfetto_json is not None:
        console.print(
            f"open [cyan]{perfetto_json}[/cyan] in https://ui.perfetto.dev to explore the timeline",
            soft_wrap=True,
        )
    return 0
