"""``hotspan stats TRACE...``: statistics per span group, then the phases."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ._common import (
    add_command,
    add_filter_options,
    engine_of,
    open_spans_for,
    parse_by,
    without_pandas,
    write_atomically,
)
from ._errors import CliError, check_output
from ._tables import (
    STAT_DEFAULT,
    STAT_HEADS,
    new_console,
    phases_renderable,
    print_stats,
    stat_column,
    stat_head,
)

__all__ = ["cmd_stats", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan stats`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "stats",
        "statistics per span: count, total, self, percentiles, shares, args",
        "Per group of spans (by category and name unless --by says otherwise): count, total, self time "
        "(the self_ns column: duration minus the time its children cover and, in asyncio tasks, minus wait), "
        "wait (the time its task was suspended, awaiting: shown when there is some), mean, min, p50, p90, p99 (exact), max, "
        "self %, total %, errors, arg sum, arg per second and instants. self % (share in the JSON) is the "
        "group's self time over the busy time of its rank/thread, the summed self time of its spans (of "
        "the whole trace unless --by names rank, pid, thread_id or thread_name), so the column adds up "
        "to 100%; total % (busy in the JSON) is total over the trace's wall time, from the first start "
        "to the last end (nested spans count twice). "
        "The table fits the terminal (COLUMNS when piped): count, total, self, p50 and p99 go "
        "first, the others while they fit (--columns or --all to choose); a name too long for its "
        "column loses its middle, never so much that two read alike. Instants (spans of no "
        "duration) are counted in a table of their own. Then the phases (each top-level category's "
        "time per step and its sub-categories' shares) when the trace has steps; for a streamed run "
        "with --phases only (they look up each span's parent: a second pass over the run, about as "
        "long as the statistics). Several traces (one "
        "per rank, say) are taken together. Parquet of 64 MiB or more ($HOTSPAN_STREAM_MIN_BYTES; a "
        "run directory's parts together) is streamed through DuckDB with bounded memory "
        "($HOTSPAN_MEMORY_LIMIT, default 1GB), to the same result; --engine spark runs the same "
        "queries on Spark.",
        "hotspan stats trace.parquet --top 10\n"
        "hotspan stats rank*.parquet --by rank,name --sort p99 --json\n"
        "hotspan stats trace.parquet --filter 'name~^fwd' --category compute --rank 0,1 --sort p99 --asc\n"
        "hotspan stats trace.json --csv out/stats.csv",
        cmd_stats,
    )
    parser.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace file(s), any supported format"
    )
    parser.add_argument(
        "--by",
        metavar="KEYS",
        help="comma-separated columns to group by (default category,name, "
        "and device when the trace has device rows; device: host or cuda:N, derived per span; test: the test of each span, on runs written by pytest --hotspan)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the rows as JSON on stdout instead of a table"
    )
    parser.add_argument("--csv", metavar="PATH", help="also write the rows to a CSV file")
    parser.add_argument(
        "--jsonl", action="store_true", help="print the rows as JSON lines (one object a line)"
    )
    parser.add_argument(
        "--sort",
        metavar="COL",
        help="column to sort by, as in the header (p99) or the JSON (p99_ns); default total; "
        "numbers biggest first, names A to Z",
    )
    parser.add_argument("--asc", action="store_true", help="sort ascending")
    parser.add_argument("--top", type=int, metavar="N", help="only the first N rows")
    add_filter_options(parser)
    parser.add_argument(
        "--engine",
        choices=("auto", "memory", "duckdb", "spark"),
        default="auto",
        help="who computes: auto (in memory below $HOTSPAN_STREAM_MIN_BYTES of Parquet, else "
        "DuckDB), memory, duckdb, or spark (SparkSession.builder.getOrCreate(): your Spark "
        "settings)",
    )
    parser.add_argument(
        "--columns",
        metavar="COLS",
        help=f"the columns to show, comma-separated, from: {', '.join(STAT_HEADS)}".replace(
            "%", "%%"
        ),
    )
    parser.add_argument(
        "--all", action="store_true", help="show every column (as the width allows)"
    )
    parser.add_argument(
        "--counter",
        metavar="NAME",
        help="instead: the counter NAME's min/mean/max while the spans of each name ran "
        "(hotspan.counter_stats; the counters of the same run directory or trace file)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="print the phases, even when the trace has no step structure (a streamed run shows "
        "them with this option only)",
    )
    return parser


def _stat_heads(args: argparse.Namespace) -> tuple[str, ...]:
    if args.columns:
        heads = []
        for text in args.columns.split(","):
            if not text.strip():
                continue
            try:
                heads.append(stat_head(stat_column(text)))
            except KeyError:
                raise CliError(
                    f"--columns: no column {text.strip()!r}; choose from {', '.join(STAT_HEADS)}"
                ) from None
        return tuple(dict.fromkeys(heads))
    return tuple(STAT_HEADS) if args.all else STAT_DEFAULT


def _has_steps(phase_rows: pa.Table) -> bool:
    """A step structure: some top-level category ran more than once and holds sub-categories."""
    return any(
        r["phase"] != r["category"] and (r["steps"] or 0) > 1 for r in phase_rows.to_pylist()
    )


def _has_sub_categories(result: pa.Table) -> bool:
    """Whether the statistics name a sub-category (``train/compute``): the phases could have
    something to show (known without computing them)."""
    if "category" not in result.column_names:
        return False
    return any("/" in (c or "") for c in pc.unique(result.column("category")).to_pylist())


def _dropped_note(meta: dict[bytes, bytes] | None) -> str | None:
    from .._schema import META_DROPPED, meta_dict

    dropped = meta_dict(meta, META_DROPPED)
    total = dropped.get("total") if dropped else None
    if isinstance(total, int) and total > 0:
        return f"{total:,} spans were dropped while recording: these statistics miss them"
    return None


def _sorted(
    result: pa.Table, column: str, by: Sequence[str], ascending: bool | None = None
) -> pa.Table:
    # Keys read best A to Z; numbers biggest first (unless --asc).
    if ascending is None:
        ascending = column in by
    order = "ascending" if ascending else "descending"
    return result.take(pc.sort_indices(result, sort_keys=[(column, order)]))  # nulls last


def _json_rows(result: pa.Table) -> str:
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = [{k: clean(v) for k, v in row.items()} for row in result.to_pylist()]
    return json.dumps(rows, indent=1, default=str)


def _printed_as_json(result: pa.Table, args: argparse.Namespace) -> bool:
    """``--json`` (one array) or ``--jsonl`` (a row a line): printed, True; else False."""
    if args.json:
        print(_json_rows(result))
        return True
    if args.jsonl:
        for row in json.loads(_json_rows(result)):
            print(json.dumps(row, default=str))
        return True
    return False


def cmd_stats(args: argparse.Namespace) -> int:
    if args.engine == "spark":  # Spark hands its rows over through pandas
        return _stats_command(args)
    with without_pandas():  # (start-up: see without_pandas)
        return _stats_command(args)


def _counter_command(args: argparse.Namespace) -> int:
    """``--counter NAME``: hotspan.counter_stats over the trace's spans and counters."""
    from ..counters import counter_stats, load_counters
    from ..formats import load

    if len(args.traces) != 1:
        raise CliError("--counter: give one trace (a run directory or a trace file)")
    (trace,) = args.traces
    try:
        counters = load_counters(trace)
        spans = load(trace)
    except (OSError, ValueError) as exc:
        raise CliError(str(exc)) from None
    names = set(counters.column("name").to_pylist())
    if args.counter not in names:
        have = ", ".join(sorted(names)) or "none"
        raise CliError(f"{trace}: no counter named {args.counter!r} (counters: {have})")
    result = counter_stats(spans, counters, counter=args.counter)
    if args.top is not None:
        result = result.slice(0, args.top)
    if _printed_as_json(result, args):
        return 0
    from rich.table import Table

    table = Table(title=f"{args.counter} while each span ran", title_justify="left")
    for head in ("name", "spans", "values", "min", "mean", "max"):
        table.add_column(head, justify="left" if head == "name" else "right")
    for row in result.to_pylist():
        table.add_row(
            row["name"],
            f"{row['spans']:,}",
            f"{row['values']:,}",
            *(f"{row[k]:,.6g}" for k in ("min", "mean", "max")),
        )
    new_console().print(table)
    return 0


def _stats_command(args: argparse.Namespace) -> int:
    if args.counter is not None:
        return _counter_command(args)
    by = parse_by(args.by)
    sort = args.sort or "total_ns"
    if sort not in by:
        try:
            sort = stat_column(sort)
        except KeyError:
            raise CliError(
                f"--sort: no column {sort!r}; choose from {', '.join((*by, *STAT_HEADS))}"
            ) from None
    if args.top is not None and args.top < 1:
        raise CliError(f"--top must be at least 1, not {args.top}")
    heads = _stat_heads(args)
    csv_path = (
        check_output(args.csv, trace=False) if args.csv else None
    )  # directories first, then work
    engine = engine_of(args)
    if "test" in by and engine is None:
        engine = (
            "memory"  # the test column exists on load only (from pytest --hotspan's part metadata)
        )
    with open_spans_for(args.traces, args, engine) as spans:
        if "test" in by and spans.table is not None and "test" not in spans.table.column_names:
            raise CliError(
                "--by test: these spans name no test (a run written by pytest --hotspan does: "
                "hotspan stats .hotspan/<session> --by test,name)"
            )
        if args.by is None:
            by = spans.default_by()  # with device rows: device time apart from the host's
        result = spans.stats(by)
        # The phases only where they are shown (--json and --jsonl print the rows alone). A
        # streamed run's phases look each span's parent up, a second pass over the run about
        # as long as the statistics' own: the table shows them on --phases only (issue 23:
        # the command within 1.5x of DuckDB's GROUP BY), saying so where they would show.
        streamed = spans.table is None
        table_phases = not (args.json or args.jsonl) and not streamed
        all_phases = spans.phases() if (args.phases or table_phases) and result.num_rows else None
        meta = spans.metadata()
    result = _sorted(result, sort, by, True if args.asc else None)
    if args.top is not None:
        result = result.slice(0, args.top)
    if csv_path is not None:
        import pyarrow.csv as pcsv

        write_atomically(csv_path, lambda tmp: pcsv.write_csv(result, tmp))
    if _printed_as_json(result, args):
        return 0
    console = new_console()
    print_stats(console, result, by, heads)
    if all_phases is not None and all_phases.num_rows and (args.phases or _has_steps(all_phases)):
        console.print(phases_renderable(all_phases, console.width))
    elif streamed and not args.phases and _has_sub_categories(result):
        console.print(
            "[dim]phases: add --phases (a streamed run's take a second pass over it)[/dim]"
        )
    note = _dropped_note(meta)
    if note:
        console.print(f"[yellow]note: {note}[/yellow]")
    if csv_path is not None:
        console.print(f"wrote {result.num_rows} rows to [cyan]{csv_path}[/cyan]")
    return 0
