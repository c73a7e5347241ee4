"""The ``hotspan`` command line (also ``python -m hotspan``).

Every command that reads a trace takes any format ``hotspan.load`` reads. Bad input
(a missing or corrupt file, an unknown format, a bad option) is one line on stderr naming
the file and the problem, and exit status 2; files are written under a temporary name and
renamed into place.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..units import human_count, human_ns, human_rate

EXIT_BAD_INPUT = 2
DEFAULT_BY = ("category", "name")


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


# --------------------------------------------------------------------------- files


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` beside ``path`` and rename it into place (the library's atomic writer)."""
    from ..formats.base import atomic_path

    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        write(tmp)


def _check_output(path: str | os.PathLike, *, trace: bool = True) -> Path:
    """An output path, checked before any work: known format, not a directory; its missing
    directories are made now."""
    path = Path(path)
    if trace:
        from ..formats import exporter_for

        try:
            exporter_for(path)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _beside(path: Path, extension: str) -> Path:
    """``path`` with its trace extension (``.json.gz`` counts as one) replaced."""
    from ..formats import EXTENSIONS

    name = path.name
    for known in sorted(EXTENSIONS, key=len, reverse=True):
        if name.lower().endswith(known):
            return path.with_name(name[: -len(known)] + extension)
    return path.with_name(path.stem + extension)


def _export(table: pa.Table, path: Path) -> None:
    from ..formats import export

    try:
        export(table, path)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None


def _load_one(path: str) -> pa.Table:
    from ..formats import load

    try:
        return load(path)
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(message if path in message else f"{path}: {message}") from None


def _load(paths: Sequence[str]) -> pa.Table:
    """One table from one or more traces (ranks written to separate files, say)."""
    tables = [_load_one(p) for p in paths]
    if len(tables) == 1:
        return tables[0]
    # The first file's metadata stands for the whole (concat_tables keeps it).
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables])


def _by(text: str | None, default: Sequence[str] = DEFAULT_BY) -> tuple[str, ...]:
    from .._schema import SPAN_SCHEMA

    if text is None:
        return tuple(default)
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise CliError("--by: give one or more column names, comma-separated")
    unknown = [k for k in keys if k not in SPAN_SCHEMA.names]
    if unknown:
        raise CliError(f"--by: no column {', '.join(map(repr, unknown))}; columns: {', '.join(SPAN_SCHEMA.names)}")
    if len(set(keys)) != len(keys):
        raise CliError(f"--by: a column is named twice in {text!r}")
    return keys


# --------------------------------------------------------------------------- rendering


def _console(stderr: bool = False, min_width: int = 220):
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # piped or captured: don't squeeze the tables into 80 columns
        console = Console(stderr=stderr, highlight=False, width=max(min_width, console.width))
    return console


def _stats_renderable(result: pa.Table, by: Sequence[str], title: str | None = None):
    from rich.table import Table

    out = Table(show_header=True, header_style="bold", title=title, title_justify="left")
    for key in by:
        out.add_column(key)
    heads = ("count", "total", "self", "mean", "min", "p50", "p90", "p99", "max", "share", "errors", "arg/s")
    for head in heads:
        out.add_column(head, justify="right")
    for row in result.to_pylist():
        share = row["share"]
        out.add_row(
            *("-" if row[k] is None else str(row[k]) for k in by),
            f"{row['count']:,}",
            *(human_ns(row[c]) for c in ("total_ns", "self_ns", "mean_ns", "min_ns", "p50_ns", "p90_ns",
                                            "p99_ns", "max_ns")),
            "-" if share is None or math.isnan(share) else f"{share * 100:.1f}%",
            f"{row['errors']:,}" if row["errors"] else "0",
            human_rate(row["arg_per_s"]),
        )
    return out


def _phases_renderable(result: pa.Table):
    from rich.table import Table

    out = Table(show_header=True, header_style="bold", title="phases", title_justify="left")
    for head, justify in (("rank", "left"), ("phase", "left"), ("time", "right"), ("steps", "right"),
                          ("per step", "right"), ("share", "right")):
        out.add_column(head, justify=justify)
    for row in result.to_pylist():
        top = row["phase"] == row["category"]
        share = row["share"]
        out.add_row(
            "mean" if row["rank"] is None else str(row["rank"]),
            row["phase"] if top else "  " + row["phase"],
            human_ns(row["time_ns"]),
            human_count(row["steps"]),
            human_ns(row["per_step_ns"]),
            "-" if share is None or math.isnan(share) else f"{share * 100:.0f}%",
            style="bold" if top else None,
        )
    return out


def _sorted(result: pa.Table, column: str, by: Sequence[str]) -> pa.Table:
    # Keys read best A to Z; numbers biggest first.
    order = "ascending" if column in by else "descending"
    return result.take(pc.sort_indices(result, sort_keys=[(column, order)]))  # nulls last


def _json_rows(result: pa.Table) -> str:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = [{k: clean(v) for k, v in row.items()} for row in result.to_pylist()]
    return json.dumps(rows, indent=1, default=str)


# --------------------------------------------------------------------------- commands


def cmd_stats(args: argparse.Namespace) -> int:
    from ..analysis import STAT_COLUMNS, phases, stats

    by = _by(args.by)
    sort = args.sort or "total_ns"
    if sort not in (*by, *STAT_COLUMNS):
        raise CliError(f"--sort: no column {sort!r}; choose from {', '.join((*by, *STAT_COLUMNS))}")
    if args.top is not None and args.top < 1:
        raise CliError(f"--top must be at least 1, not {args.top}")
    csv_path = _check_output(args.csv, trace=False) if args.csv else None  # directories first, then work
    table = _load(args.traces)
    result = _sorted(stats(table, by=by), sort, by)
    if args.top is not None:
        result = result.slice(0, args.top)
    if csv_path is not None:
        import pyarrow.csv as pcsv

        _write_atomically(csv_path, lambda tmp: pcsv.write_csv(result, tmp))
    if args.json:
        print(_json_rows(result))
        return 0
    console = _console()
    console.print(_stats_renderable(result, by))
    phase_rows = phases(table)
    if phase_rows.num_rows:
        console.print(_phases_renderable(phase_rows))
    if csv_path is not None:
        console.print(f"wrote {result.num_rows} rows to [cyan]{csv_path}[/cyan]")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = _check_output(args.output)
    table = _load([args.trace])
    _export(table, out)
    print(f"{table.num_rows:,} spans: {args.trace} -> {out}")
    return 0


def cmd_gantt(args: argparse.Namespace) -> int:
    from ..report import gantt, step_gantts

    if args.width < 10:
        raise CliError(f"--width must be at least 10, not {args.width}")
    table = _load([args.trace])
    console = _console(min_width=args.width + 50)
    if args.step is None:
        console.print(gantt(table, width=args.width))
        return 0
    try:
        charts = step_gantts(table, args.step, width=args.width)
    except ValueError as exc:
        raise CliError(f"{args.trace}: {exc}") from None
    for chart in charts:
        console.print(chart)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import html_report

    out = _check_output(args.output, trace=False)
    table = _load([args.trace])
    page = html_report(table, title=args.title or f"hotspan report: {Path(args.trace).name}")
    _write_atomically(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    print(f"{table.num_rows:,} spans -> {out}")
    return 0


def _environment(table: pa.Table) -> dict | None:
    from .._schema import META_ENV, meta_dict

    return meta_dict(table.schema.metadata, META_ENV)


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..analysis import compare

    by = _by(args.by)
    if args.threshold < 0 or not math.isfinite(args.threshold):
        raise CliError(f"--threshold must be a fraction >= 0 (0.05 is 5%), not {args.threshold}")
    if args.min_count < 1:
        raise CliError(f"--min-count must be at least 1, not {args.min_count}")
    base, new = _load([args.base]), _load([args.new])
    env_base, env_new = _environment(base), _environment(new)
    if env_base and env_new and env_base.get("digest") != env_new.get("digest"):
        differences = [
            f"{key} {env_base.get(key)!s} -> {env_new.get(key)!s}"
            for key in ("host", "python", "hotspan", "config") if env_base.get(key) != env_new.get(key)
        ]
        print(f"hotspan compare: warning: the traces were recorded in different environments "
              f"({'; '.join(differences) or 'digests differ'}): timings may not be comparable", file=sys.stderr)
    elif not (env_base and env_new):
        missing = args.base if not env_base else args.new
        print(f"hotspan compare: note: {missing} records no environment digest; cannot check that the "
              f"environments match", file=sys.stderr)
    rows = compare(base, new, by=by, threshold=args.threshold, min_count=args.min_count)
    slower = [r for r in rows if r["verdict"] == "slower"]
    if args.json:
        print(json.dumps([{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                          for r in rows], indent=1, default=str))
    else:
        out = Table(show_header=True, header_style="bold")
        for key in by:
            out.add_column(key)
        for head in ("count", "p50", "Δp50", "mean", "Δmean", "p99", "Δp99", "verdict"):
            out.add_column(head, justify="left" if head == "verdict" else "right")
        styles = {"slower": "bold red", "faster": "green", "new": "cyan", "gone": "yellow", "few": "dim"}
        for r in rows:
            out.add_row(
                *("-" if r[k] is None else str(r[k]) for k in by),
                f"{r['count_base']:,} → {r['count_new']:,}",
                *(cell for column in ("p50_ns", "mean_ns", "p99_ns") for cell in (
                    f"{human_ns(r[column + '_base'])} → {human_ns(r[column + '_new'])}",
                    _fmt_change(r[column + "_change"]))),
                r["verdict"],
                style=styles.get(r["verdict"]),
            )
        console = _console()
        console.print(out)
        console.print(f"{len(slower)} of {len(rows)} slower by more than {args.threshold * 100:g}% (p50 or mean)")
    return 1 if slower else 0


def _fmt_change(change: float | None) -> str:
    if change is None:
        return "-"
    if math.isinf(change):
        return "+inf%"
    return f"{change * 100:+.1f}%"


def _print_recording_summary(table: pa.Table, path: Path, elapsed: float, dropped: int, *, label: str,
                             stderr: bool = False, top: int | None = None) -> None:
    from ..analysis import stats

    console = _console(stderr=stderr)
    threads = len(pc.unique(table.column("thread_id"))) if table.num_rows else 0
    console.print(
        f"[bold]hotspan {label}[/bold]: {table.num_rows:,} spans on {threads} threads in {elapsed:.2f} s, "
        f"{dropped:,} dropped -> [cyan]{path}[/cyan]"
    )
    if table.num_rows:
        result = stats(table)
        if top is not None:
            result = result.slice(0, top)
        console.print(_stats_renderable(result, DEFAULT_BY))


def cmd_demo(args: argparse.Namespace) -> int:
    import hotspan
    from hotspan import demo

    from ..report import gantt

    if args.threads < 1 or args.steps < 1:
        raise CliError("--threads and --steps must be at least 1")
    out = _check_output(args.output)
    # Beside the trace, a Chrome JSON copy that Perfetto UI opens directly.
    perfetto_json = _beside(out, ".json") if not out.name.lower().endswith(".json") else None
    hotspan.enable()
    hotspan.drain()  # start from nothing
    before = hotspan.dropped()
    start = time.perf_counter()
    demo.run(threads=args.threads, steps=args.steps)
    elapsed = time.perf_counter() - start
    table = hotspan.drain()
    _export(table, out)
    if perfetto_json is not None:
        _export(table, perfetto_json)
    _print_recording_summary(table, out, elapsed, hotspan.dropped() - before, label="demo")
    console = _console()
    console.print(gantt(table, width=100))
    if perfetto_json is not None:
        console.print(f"open [cyan]{perfetto_json}[/cyan] in https://ui.perfetto.dev to explore the timeline")
    return 0


def _split_run_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s own options from the program and its arguments.

    Everything after the script (or after ``-m MODULE``) belongs to the program, options
    included, as with ``python -m cProfile``.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-o", "--output", "--live-min-ms"):  # run's options that take a value
            i += 2
        elif arg.startswith(("--output=", "--live-min-ms=")) or (arg.startswith("-o") and len(arg) > 2):
            i += 1
        elif arg == "-m":
            return argv[: i + 2], argv[i + 2 :]
        elif arg.startswith("-m") and len(arg) > 2:
            return argv[: i + 1], argv[i + 1 :]
        elif arg == "--":
            return argv[:i], argv[i + 1 :]
        elif arg.startswith("-"):
            i += 1  # --help or a bad option: argparse speaks to it
        else:
            return argv[:i], argv[i:]
    return argv, []


def cmd_run(args: argparse.Namespace) -> int:
    from ..recording.supervisor import ProgramError, resolve_program, run_program

    out = _check_output(args.output)
    if args.live_min_ms < 0:
        raise CliError(f"--live-min-ms must be >= 0, not {args.live_min_ms}")
    try:
        resolve_program(args.program, args.module)  # a missing program: exit 2 before anything runs
    except ProgramError as exc:
        raise CliError(str(exc)) from None
    result = run_program(args.program, out, module=args.module,
                         live_min_ns=int(args.live_min_ms * 1e6) if args.live else None)
    # The summary goes to stderr: the program's stdout stays the program's.
    label = "run" if result.processes <= 1 else f"run ({result.processes} processes)"
    _print_recording_summary(result.table, out, result.elapsed, result.dropped, label=label, stderr=True, top=20)
    return result.status


def _check_port_free(host: str, port: int) -> None:
    """gRPC binds with SO_REUSEPORT and says only "Server did not start properly" when it cannot:
    try the address first, to name the problem (and not share a port with another server)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CliError(f"--listen: cannot resolve {host}: {exc}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise CliError(f"cannot listen on grpc://{host}:{port}: {exc.strerror or exc}") from None


def _lower_priority(steps: int) -> None:
    """Run this process ``steps`` nice levels lower. On Linux a nice value belongs to a thread
    and passes to the threads it starts, and pyarrow's import has already started some
    (jemalloc's): every thread running now is lowered, and gRPC's, started later, inherit."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        os.nice(steps)
        return
    target = min(os.getpriority(os.PRIO_PROCESS, 0) + steps, 19)
    for tid in os.listdir(tasks):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), target)
        except ProcessLookupError:
            pass  # a thread that has just exited


def cmd_collect(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..recording import collector
    from ..recording.recorder import stop_env_recorder

    stop_env_recorder()  # HOTSPAN_OUT inherited from a launcher is for the ranks, not for us
    if not args.max_put_mb > 0:
        raise CliError(f"--max-put-mb: expected a size in MiB above 0, not {args.max_put_mb}")
    if not 0 <= args.nice <= 19:
        raise CliError(f"--nice: expected 0-19 (how much lower than now to run), not {args.nice}")
    if args.nice:
        try:
            _lower_priority(args.nice)
        except OSError as exc:
            raise CliError(f"--nice {args.nice}: {exc.strerror or exc}") from None
    try:
        host, port = collector.parse_url(args.listen)
    except ValueError as exc:
        raise CliError(f"--listen: {exc}") from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out}: exists and is not a directory")
    token = args.token if args.token is not None else (os.environ.get("HOTSPAN_TOKEN") or None)
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    if port:
        _check_port_free(host, port)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # our one-line errors, not gRPC's log
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = collector.CollectorServer(out, f"grpc://{host}:{port}", token=token, log=sys.stderr,
                                               max_put_bytes=int(args.max_put_mb * (1 << 20)))
        except Exception as exc:  # noqa: BLE001 - pyarrow.flight says what: port in use, bad address
            raise CliError(f"cannot listen on grpc://{host}:{port}: {exc}") from None
        if host not in ("127.0.0.1", "localhost", "::1") and not token:
            print(f"hotspan collect: warning: listening on {host} without --token: anyone who can reach "
                  f"this port can write spans", file=sys.stderr)
        print(f"hotspan collect: listening on {server.url}, writing to {out}"
              f"{' (token required)' if token else ''}", flush=True)
        start = time.monotonic()
        try:
            while not stop.wait(0.2):
                if args.duration is not None and time.monotonic() - start >= args.duration:
                    break
        finally:
            server.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"hotspan collect: {server.spans:,} spans from {len(server.ranks)} rank(s) in {server.parts:,} parts "
          f"-> {out}" + (f"; {server.refused} put(s) refused" if server.refused else "")
          + (f"; {server.duplicates} resent batch(es) kept once" if server.duplicates else "")
          + (f"; {server.swept} temporary part(s) of a killed collector removed" if server.swept else ""), flush=True)
    return 0


# --------------------------------------------------------------------------- parser


def _add(sub, name: str, help: str, description: str, example: str, func) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  " + example.replace("\n", "\n  "),
    )
    parser.set_defaults(func=func)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hotspan",
        description="Record spans in hot loops; inspect the traces. A TRACE is any format hotspan "
        "exports (.parquet .arrow .feather .json .json.gz .pftrace .perfetto-trace .csv), a Chrome JSON trace, or a "
        "directory of Parquet parts (hotspan.record(\"run/\"), hotspan collect --out run/).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  hotspan demo --threads 4 --steps 50\n  hotspan stats hotspan-demo.parquet --top 10",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = _add(sub, "demo", "run a built-in multi-threaded workload and write hotspan-demo.parquet",
                "Run a built-in workload (nested compute blocks, communication with byte counts, data loading) "
                "on several threads, write the spans to a trace (format from the extension) and a Chrome JSON "
                "copy beside it for Perfetto UI, and print statistics and a timeline.",
                "hotspan demo --threads 8 --steps 100 -o /tmp/demo.parquet", cmd_demo)
    demo.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    demo.add_argument("--steps", type=int, default=50, help="training-like steps per thread (default 50)")
    demo.add_argument("-o", "--output", default="hotspan-demo.parquet", help="where to write the spans")

    stats = _add(sub, "stats", "statistics per span: count, total, self, percentiles, share, args",
                 "Per group of spans (by category and name unless --by says otherwise): count, total, self time "
                 "(total minus direct children), mean, min, p50, p90, p99 (exact), max, share of the wall time, "
                 "errors, arg sum and arg per second; then the phases (each top-level category's time, steps, "
                 "and its sub-categories' shares). Several traces (one per rank, say) are taken together.",
                 "hotspan stats trace.parquet --top 10\n"
                 "hotspan stats rank*.parquet --by rank,name --sort p99_ns --json\n"
                 "hotspan stats trace.json --csv out/stats.csv", cmd_stats)
    stats.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s), any supported format")
    stats.add_argument("--by", metavar="KEYS", help="comma-separated columns to group by (default category,name)")
    stats.add_argument("--json", action="store_true", help="print the rows as JSON on stdout instead of a table")
    stats.add_argument("--csv", metavar="PATH", help="also write the rows to a CSV file")
    stats.add_argument("--sort", metavar="COL", help="column to sort by (default total_ns; numbers biggest first)")
    stats.add_argument("--top", type=int, metavar="N", help="only the first N rows")

    export = _add(sub, "export", "convert a trace from any supported format to any other",
                  "Read TRACE and write it to OUT in the format OUT's extension names.",
                  "hotspan export trace.parquet trace.pftrace   # for ui.perfetto.dev", cmd_export)
    export.add_argument("trace", metavar="TRACE")
    export.add_argument("output", metavar="OUT")

    gantt = _add(sub, "gantt", "a timeline in the terminal, one row per rank/thread",
                 "Draw the trace as a terminal timeline: one row per rank/thread, one glyph per category (the "
                 "innermost span at each moment), '!' where a span ended with an error. With --step NAME, one "
                 "chart per occurrence of that span (the n-th on every thread together), each with its duration.",
                 "hotspan gantt trace.parquet --width 120\nhotspan gantt trace.parquet --step step", cmd_gantt)
    gantt.add_argument("trace", metavar="TRACE")
    gantt.add_argument("--width", type=int, default=100, help="characters of timeline (default 100)")
    gantt.add_argument("--step", metavar="NAME", help="one chart per occurrence of the span NAME")

    report = _add(sub, "report", "a self-contained HTML report (summary, stats, phases, timeline)",
                  "Write one HTML file that needs nothing else (no network): summary, statistics, phases, and an "
                  "SVG timeline per rank/thread with details on hover (click a span to pin them; the link keeps it).",
                  "hotspan report trace.parquet -o report.html", cmd_report)
    report.add_argument("trace", metavar="TRACE")
    report.add_argument("-o", "--output", default="hotspan-report.html", help="default hotspan-report.html")
    report.add_argument("--title", help="page title (default: from the trace's file name)")

    compare = _add(sub, "compare", "compare two traces span by span; exit 1 on a slowdown",
                   "For each span group: count, p50, mean and p99 before and after, the change, and a verdict. "
                   "Exit status 1 when any group's p50 or mean got slower by more than the threshold, else 0. "
                   "Warns when the traces were recorded in different environments (host, Python, hotspan, "
                   "configuration).",
                   "hotspan compare base.parquet new.parquet --threshold 0.10 --min-count 20", cmd_compare)
    compare.add_argument("base", metavar="BASE")
    compare.add_argument("new", metavar="NEW")
    compare.add_argument("--threshold", type=float, default=0.05,
                         help="slowdown that fails, as a fraction (default 0.05 = 5%%)")
    compare.add_argument("--by", metavar="KEYS", help="comma-separated columns to group by (default category,name)")
    compare.add_argument("--min-count", type=int, default=1, metavar="N",
                         help="groups with fewer spans on either side are shown but not judged (default 1)")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")

    run = _add(sub, "run", "run a Python script or module with recording on, then write its trace",
               "Run a program in this process (like python -m cProfile) with hotspan recording, write the spans "
               "to OUT (format from the extension) and print a summary on stderr. The program's exit status "
               "passes through.",
               "hotspan run train.py --epochs 2\nhotspan run -o out/trace.json -m mypkg.bench --fast", cmd_run)
    run.add_argument("-o", "--output", default="hotspan-trace.parquet", help="default hotspan-trace.parquet")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    run.add_argument("--live", action="store_true", help="print a line per finished span on stderr while it runs")
    run.add_argument("--live-min-ms", type=float, default=0.0, metavar="MS",
                     help="with --live: only spans of at least MS milliseconds (errors always)")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]")

    collect = _add(sub, "collect", "receive spans from many ranks (Arrow Flight) into a dataset directory",
                   "Run a collector: an Arrow Flight server that takes the spans of many ranks at once "
                   "(hotspan.record(\"grpc://HOST:PORT\") or HOTSPAN_OUT=grpc://HOST:PORT in each rank) and writes "
                   "them to DIR/rank=R/part-<pid>-<token>-<n>.parquet as they arrive, each client's times corrected by its "
                   "measured clock offset. Binds to 127.0.0.1 unless told otherwise. SIGINT/SIGTERM: finish the "
                   "puts in flight, then exit 0. Read the result with `hotspan stats DIR` or hotspan.load(DIR).",
                   "hotspan collect --listen grpc://127.0.0.1:8815 --out run/\n"
                   "HOTSPAN_OUT=grpc://127.0.0.1:8815 torchrun --nproc-per-node 4 train.py   # the ranks\n"
                   "hotspan stats run/ --by rank,name", cmd_collect)
    collect.add_argument("--listen", default="grpc://127.0.0.1:8815", metavar="grpc://HOST:PORT",
                         help="address to listen on (default grpc://127.0.0.1:8815; port 0 picks a free one)")
    collect.add_argument("--out", required=True, metavar="DIR", help="dataset directory to write (made if missing)")
    collect.add_argument("--token", help="clients must present this token (default: $HOTSPAN_TOKEN, if set)")
    collect.add_argument("--max-put-mb", type=float, default=256.0, metavar="MB",
                         help="refuse a put past this many MiB of spans, as it arrives (default 256)")
    collect.add_argument("--duration", type=float, metavar="S", help="stop by itself after S seconds")
    collect.add_argument("--nice", type=int, default=0, metavar="N",
                         help="run N steps lower in CPU priority (0-19, like `nice -n N`): on a host whose cores "
                              "also run ranks, 19 leaves them the CPU and lets the collector take what is idle "
                              "(the clients buffer meanwhile)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program: list[str] | None = None
    if argv and argv[0] == "run":
        head, program = _split_run_argv(argv[1:])
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
