"""The ``hotspan`` command line."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


def _write_parquet_atomically(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a trace is an ordinary file
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summarize(table: pa.Table) -> pa.Table:
    """Per name: count and mean duration, largest total first."""
    grouped = table.group_by("name").aggregate(
        [("duration_ns", "count"), ("duration_ns", "mean"), ("duration_ns", "sum")]
    )
    order = pc.sort_indices(grouped, sort_keys=[("duration_ns_sum", "descending")])
    return grouped.take(order)


def _print_summary(table: pa.Table, path: Path, elapsed: float, dropped: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    threads = len(pc.unique(table.column("thread_id")))
    console.print(
        f"[bold]hotspan demo[/bold]: {table.num_rows:,} spans on {threads} threads in {elapsed:.2f} s, "
        f"{dropped:,} dropped -> [cyan]{path}[/cyan]"
    )
    out = Table(show_header=True, header_style="bold")
    out.add_column("name")
    out.add_column("count", justify="right")
    out.add_column("mean", justify="right")
    out.add_column("total", justify="right")
    for row in summarize(table).to_pylist():
        out.add_row(
            str(row["name"]),
            f"{row['duration_ns_count']:,}",
            _human_ns(row["duration_ns_mean"]),
            _human_ns(row["duration_ns_sum"]),
        )
    console.print(out)


def _human_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def cmd_demo(args: argparse.Namespace) -> int:
    import hotspan
    from hotspan import demo

    if args.threads < 1 or args.steps < 1:
        raise CliError("--threads and --steps must be at least 1")
    out = Path(args.output)
    if out.exists() and out.is_dir():
        raise CliError(f"{out}: is a directory, not a file to write")
    hotspan.enable()
    hotspan.drain()  # start from nothing
    before = hotspan.dropped()
    start = time.perf_counter()
    demo.run(threads=args.threads, steps=args.steps)
    elapsed = time.perf_counter() - start
    table = hotspan.drain()
    _write_parquet_atomically(table, out)
    _print_summary(table, out, elapsed, hotspan.dropped() - before)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hotspan",
        description="Record spans in hot loops; inspect the traces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  hotspan demo --threads 4 --steps 50",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="run a built-in multi-threaded workload and write hotspan-demo.parquet",
        description="Run a built-in workload (nested compute blocks, communication with byte counts, data "
        "loading) on several threads, write the spans to a Parquet file and print a summary.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  hotspan demo --threads 8 --steps 100 -o /tmp/demo.parquet",
    )
    demo.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    demo.add_argument("--steps", type=int, default=50, help="training-like steps per thread (default 50)")
    demo.add_argument("-o", "--output", default="hotspan-demo.parquet", help="where to write the spans")
    demo.set_defaults(func=cmd_demo)
    return parser



def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on a bad option, 0 on --help
        return int(exc.code or 0)
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
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"hotspan {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"hotspan {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
